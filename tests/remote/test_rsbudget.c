/* test_rsbudget.c — the remote store under a disk budget (rstore.h:
 * max_bytes, rq_rs_set_budget, rq_rs_trim, rq_rs_pin; the policy in
 * rstore.c "Disk budget") against the fault hub of test_rstore.c:
 *  - whole files fetched one after another under a limit smaller than their
 *    sum: the least recently used is evicted, the bytes on disk (walked,
 *    not only counted) stay <= the limit + one chunk; evicted files read
 *    right and are fetched again;
 *  - many readers on random ranges of files larger than the limit: every
 *    byte right, the disk within the limit;
 *  - a file being read, or pinned, is never evicted; what cannot be evicted
 *    is served but not kept, and fetch_file says --cache-max;
 *  - the budget shared with another's bytes (the quantized cache): trimmed
 *    at once when the other grows; a smaller limit at open trims at open;
 *  - rq_rs_file_id: LFS sha256, else git-<blob id>.
 * TAP. Usage: test_rsbudget HUB_FAULT_PY (python3 on PATH, or $RQ_PYTHON). */
#include "tests/remote/rs_test.h"
#include "tests/tap.h"
#include "remote/chunk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static struct rq_rs *open_limited(const char *cache, int conns, uint64_t max)
{
	char dir[512];
	snprintf(dir, sizeof dir, "%s/%s", tmp, cache);
	struct rq_rs_opts o = {.endpoint = endpoint, .repo = "test/remote", .commit = COMMIT,
	                       .files = files, .nfiles = NF, .cache_dir = dir, .chunk_size = CS,
	                       .connections = conns, .readahead = 0, .max_bytes = max,
	                       .log = on_log};
	struct rq_rs *s = NULL;
	struct rq_err e = {0};
	int rc = rq_rs_open(&o, &s, &e);
	if (rc) {
		printf("Bail out! rq_rs_open(%s): %d %s\n", cache, rc, e.msg);
		exit(1);
	}
	return s;
}

/* Bytes under dir as the disk holds them: each regular file's allocated
 * blocks (data files are sparse), at most its size. */
static uint64_t du(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	uint64_t n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		char p[1024];
		snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
		struct stat st;
		if (lstat(p, &st))
			continue;
		if (S_ISDIR(st.st_mode)) {
			n += du(p);
		} else if (S_ISREG(st.st_mode)) {
			uint64_t b = (uint64_t)st.st_blocks * 512;
			n += b < (uint64_t)st.st_size ? b : (uint64_t)st.st_size;
		}
	}
	closedir(d);
	return n;
}

static uint64_t du_store(const char *cache)
{
	char d[600];
	snprintf(d, sizeof d, "%s/%s/remote", tmp, cache);
	return du(d);
}

static struct rq_rs_stats stats(struct rq_rs *s)
{
	struct rq_rs_stats st;
	rq_rs_stats(s, &st);
	return st;
}

/* Whole files one after another: LRU eviction, refetch, the bound. */
static void test_lru(void)
{
	const uint64_t lim = 4u << 20;   /* FA (3 MiB+) fits, FA + FB (5 MiB+) does not */
	ctl_do("reset");
	struct rq_rs *s = open_limited("lru", 4, lim);
	struct rq_err e = {0};
	int rc = rq_rs_fetch_file(s, FA, NULL, NULL, &e);
	TAP_OK(rc == 0 && rq_rs_path(s, FA), "limit %llu: %s fetched and assembled (%d %s)",
	       (unsigned long long)lim, names[FA], rc, e.msg);
	rc = rq_rs_fetch_file(s, FB, NULL, NULL, &e);
	struct rq_rs_stats st = stats(s);
	uint64_t disk = du_store("lru");
	TAP_OK(rc == 0 && rq_rs_path(s, FB) && !rq_rs_path(s, FA) && st.evicted_files == 1,
	       "%s fetched: %s (least recently used, unused) evicted, %llu files evicted (%d %s)",
	       names[FB], names[FA], (unsigned long long)st.evicted_files, rc, e.msg);
	TAP_OK(st.bytes_on_disk <= lim && disk <= lim + CS,
	       "on disk %llu bytes (counted %llu) <= limit + one chunk", (unsigned long long)disk,
	       (unsigned long long)st.bytes_on_disk);
	TAP_OK(log_has("evicted") && log_has(names[FA]), "the eviction logged naming the file");
	ctl_do("reset");
	TAP_OK(read_eq(s, FA, 0, sizes[FA], 0, NULL) == 0, "%s read whole after its eviction: "
	       "the right bytes", names[FA]);
	cJSON *hs = ctl("stats");
	int again = ranges_of(hs, FA, -1);
	cJSON_Delete(hs);
	st = stats(s);
	disk = du_store("lru");
	TAP_OK(again >= (int)((sizes[FA] + CS - 1) / CS), "its chunks were fetched again "
	       "(%d ranges)", again);
	TAP_OK(st.bytes_on_disk <= lim && disk <= lim + CS && !rq_rs_path(s, FB),
	       "kept again under the limit: %s evicted for it, on disk %llu (counted %llu)",
	       names[FB], (unsigned long long)disk, (unsigned long long)st.bytes_on_disk);
	/* a smaller limit at the next open trims at open */
	rq_rs_close(s);
	s = open_limited("lru", 2, 1u << 20);
	st = stats(s);
	disk = du_store("lru");
	TAP_OK(st.bytes_on_disk <= (1u << 20) && disk <= (1u << 20),
	       "reopened with a 1 MiB limit: trimmed at open to %llu bytes (on disk %llu)",
	       (unsigned long long)st.bytes_on_disk, (unsigned long long)disk);
	rq_rs_close(s);
}

struct rreader {
	struct rq_rs *s;
	uint64_t seed;
	int n, wrong, failed;
};
static int readers_done;

static void *rreader_main(void *v)
{
	struct rreader *r = v;
	static const int fs[] = {FA, FB, FF};
	for (int i = 0; i < r->n; i++) {
		int f = fs[tap_xorshift64(&r->seed) % 3];
		uint64_t off = tap_xorshift64(&r->seed) % sizes[f];
		uint64_t len = 1 + tap_xorshift64(&r->seed) % (400 * 1024);
		if (len > sizes[f] - off)
			len = sizes[f] - off;
		int rc = read_eq(r->s, f, off, len, 0, NULL);
		r->wrong += rc == 1;
		r->failed += rc < 0;
	}
	__atomic_add_fetch(&readers_done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

/* Many readers, files larger than the limit: right bytes, disk bounded. */
static void test_readers(void)
{
	const uint64_t lim = 2u << 20;
	ctl_do("reset");
	struct rq_rs *s = open_limited("readers", 4, lim);
	struct rreader r[6];
	pthread_t t[6];
	for (int i = 0; i < 6; i++) {
		r[i] = (struct rreader){.s = s, .seed = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1),
		                        .n = 40};
		pthread_create(&t[i], NULL, rreader_main, &r[i]);
	}
	uint64_t worst = 0;
	while (__atomic_load_n(&readers_done, __ATOMIC_SEQ_CST) < 6) {   /* the disk meanwhile */
		uint64_t d = du_store("readers");
		worst = d > worst ? d : worst;
		usleep(2000);
	}
	for (int i = 0; i < 6; i++)
		pthread_join(t[i], NULL);
	int wrong = 0, failed = 0;
	for (int i = 0; i < 6; i++) {
		wrong += r[i].wrong;
		failed += r[i].failed;
	}
	struct rq_rs_stats st = stats(s);
	TAP_OK(!wrong && !failed, "6 readers x 40 random reads of 3 files (9 MiB) under a 2 MiB "
	       "limit: every byte right (%d wrong, %d failed)", wrong, failed);
	/* each of 4 connections may be writing one chunk it reserved */
	TAP_OK(st.bytes_on_disk <= lim && worst <= lim + 4 * (uint64_t)CS,
	       "the disk never held more than %llu bytes (limit %llu + 4 chunks being written); "
	       "counted now %llu; %llu files evicted, %llu chunks not kept",
	       (unsigned long long)worst, (unsigned long long)lim,
	       (unsigned long long)st.bytes_on_disk, (unsigned long long)st.evicted_files,
	       (unsigned long long)st.not_kept);
	TAP_OK(st.evicted_files > 0, "files were evicted to make room (%llu, %llu bytes)",
	       (unsigned long long)st.evicted_files, (unsigned long long)st.evicted_bytes);
	rq_rs_close(s);
}

struct slow {
	struct rq_rs *s;
	int rc;
};

static void *slow_main(void *v)
{
	struct slow *x = v;
	x->rc = read_eq(x->s, FB, 5 * (uint64_t)CS + 7, 1000, 0, NULL);
	return NULL;
}

static int chunk_there(const char *cache, int f, uint64_t c)
{
	char p[800];
	snprintf(p, sizeof p, "%s/%s/remote/chunks/%s-%u/%016llx", tmp, cache, shas[f], CS,
	         (unsigned long long)c);
	return access(p, F_OK) == 0;
}

/* In use: a read in flight, a pin. Not evictable: served, not kept. */
static void test_in_use(void)
{
	ctl_do("reset");
	struct rq_rs *s = open_limited("inuse", 2, 0);
	TAP_OK(read_eq(s, FB, 10, 100, 0, NULL) == 0 && read_eq(s, FA, 10, 100, 0, NULL) == 0,
	       "chunk 0 of %s and of %s stored", names[FB], names[FA]);
	ctl_do("set?delay_ms=700");   /* under the 1 s stall deadline */
	struct slow x = {.s = s};
	pthread_t t;
	pthread_create(&t, NULL, slow_main, &x);
	usleep(250000);            /* its chunk 5 is being fetched */
	uint64_t freed = rq_rs_trim(s, UINT64_MAX);
	int kept_b = chunk_there("inuse", FB, 0), gone_a = !chunk_there("inuse", FA, 0);
	pthread_join(t, NULL);
	ctl_do("reset");
	TAP_OK(kept_b && gone_a && freed == rqr_chunk_file_size(CS) && x.rc == 0,
	       "trim everything while %s is being read: %s kept, %s evicted (%llu bytes freed), "
	       "the read right (%d)", names[FB], names[FB], names[FA], (unsigned long long)freed,
	       x.rc);
	TAP_OK(chunk_there("inuse", FB, 5), "the chunk that read fetched was stored");
	/* pinned: never evicted; the budget then cannot be met: served, not kept */
	struct rq_err e = {0};
	int rc = rq_rs_fetch_file(s, FA, NULL, NULL, &e);
	TAP_OK(rc == 0 && rq_rs_path(s, FA), "%s fetched whole (%d %s)", names[FA], rc, e.msg);
	rq_rs_pin(s, FA, 1);
	rq_rs_set_budget(s, sizes[FA] + (1u << 20), NULL, NULL);
	struct rq_rs_stats st = stats(s);
	TAP_OK(rq_rs_path(s, FA) && st.bytes_on_disk <= sizes[FA] + (1u << 20),
	       "a limit of %s + 1 MiB set: %s (pinned) kept (%llu bytes counted)", names[FA],
	       names[FA], (unsigned long long)st.bytes_on_disk);
	rc = rq_rs_fetch_file(s, FF, NULL, NULL, &e);
	TAP_OK(rc == -ENOSPC && strstr(e.msg, "--cache-max") && strstr(e.msg, names[FF]) &&
	       rq_rs_path(s, FA), "fetch_file of %s (4 MiB) that cannot fit beside the pinned "
	       "file: -ENOSPC naming the file and --cache-max; the pinned file kept (%d %.160s)",
	       names[FF], rc, e.msg);
	st = stats(s);
	TAP_OK(read_eq(s, FF, 0, sizes[FF], 0, NULL) == 0 && st.not_kept > 0 &&
	       log_has("not kept"), "reads of it still right, served not kept (%llu chunks), "
	       "logged", (unsigned long long)st.not_kept);
	TAP_OK(st.bytes_on_disk <= sizes[FA] + (1u << 20) &&
	       du_store("inuse") <= sizes[FA] + (1u << 20) + CS,
	       "on disk within the limit: %llu (counted %llu)",
	       (unsigned long long)du_store("inuse"), (unsigned long long)st.bytes_on_disk);
	rq_rs_pin(s, FA, -1);
	freed = rq_rs_trim(s, UINT64_MAX);
	TAP_OK(freed >= sizes[FA] && !rq_rs_path(s, FA), "unpinned: trimmed (%llu bytes)",
	       (unsigned long long)freed);
	rq_rs_close(s);
}

static uint64_t other_bytes;
static uint64_t others(void *ctx)
{
	(void)ctx;
	return __atomic_load_n(&other_bytes, __ATOMIC_SEQ_CST);
}

/* The budget shared with another store's bytes (the quantized cache). */
static void test_shared_budget(void)
{
	const uint64_t lim = 13u << 19;   /* 6.5 MiB */
	ctl_do("reset");
	struct rq_rs *s = open_limited("shared", 4, 0);
	other_bytes = 1u << 20;
	rq_rs_set_budget(s, lim, others, NULL);
	struct rq_err e = {0};
	int ra = rq_rs_fetch_file(s, FA, NULL, NULL, &e);
	int rb = rq_rs_fetch_file(s, FB, NULL, NULL, &e);
	struct rq_rs_stats st = stats(s);
	TAP_OK(!ra && !rb && rq_rs_path(s, FA) && rq_rs_path(s, FB) && !st.evicted_files,
	       "limit 6.5 MiB, 1 MiB held by the other: %s and %s (5 MiB+) both kept", names[FA],
	       names[FB]);
	other_bytes = 3u << 20;    /* the other grew: what is over goes at the next store */
	rq_rs_set_budget(s, lim, others, NULL);
	st = stats(s);
	TAP_OK(!rq_rs_path(s, FA) && rq_rs_path(s, FB) && st.bytes_on_disk + other_bytes <= lim,
	       "the other now holds 3 MiB: %s (older) evicted, %llu + %llu <= %llu", names[FA],
	       (unsigned long long)st.bytes_on_disk, (unsigned long long)other_bytes,
	       (unsigned long long)lim);
	other_bytes = lim;         /* no room at all: reads right, nothing kept */
	uint64_t before = st.bytes_on_disk;
	int rc = read_eq(s, FC, 0, sizes[FC], 0, NULL);
	st = stats(s);
	TAP_OK(rc == 0 && st.bytes_on_disk <= before, "the other holds the whole limit: %s "
	       "read right, not stored beyond what could be evicted (%llu -> %llu bytes)",
	       names[FC], (unsigned long long)before, (unsigned long long)st.bytes_on_disk);
	rq_rs_set_budget(s, 0, NULL, NULL);
	rq_rs_close(s);
}

/* The identity callers key what they keep by (the mount's shard heads). */
static void test_file_id(void)
{
	struct rq_rs *s = open_limited("ids", 1, 0);
	char git[48];
	snprintf(git, sizeof git, "git-%s", blobs[FC]);
	const char *a = rq_rs_file_id(s, FA), *c = rq_rs_file_id(s, FC);
	TAP_OK(a && !strcmp(a, shas[FA]) && c && !strcmp(c, git) && !rq_rs_file_id(s, NF),
	       "rq_rs_file_id: the LFS sha256 (%s), else git-<blob id> (%s), NULL past the end",
	       a ? a : "(null)", c ? c : "(null)");
	rq_rs_close(s);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: test_rsbudget HUB_FAULT_PY\n");
		return 2;
	}
	if (rs_setup(argv[1]))
		return 1;
	test_lru();
	test_readers();
	test_in_use();
	test_shared_budget();
	test_file_id();
	rs_teardown();
	if (!tap_failed)
		tap_rmtree(tmp);
	else
		printf("# kept %s\n", tmp);
	return tap_done();
}
