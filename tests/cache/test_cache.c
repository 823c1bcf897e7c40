/* test_cache.c — the on-disk cache against real files: round trips, misses,
 * corrupted/truncated/misnamed entries, concurrent writers (processes and
 * threads), LRU eviction across handles, a full disk (a tiny tmpfs), an
 * unwritable directory, cleanup of crashed writers' temp files, and a
 * hostile directory: FIFOs, symlinks, directories at entry names, entries
 * truncated or rewritten (mtime restored) after verification, the recheck
 * of an open entry, directories writable by others refused; whole files
 * (rq_cache_file_*): chunked writes, verification by a new handle, damaged
 * data and sidecars, FIFO/symlink at the data name, crash leftovers, abort,
 * recheck, a full disk, eviction across kinds with pins, remove/has.
 * Anything that could hang runs in a child with a time limit. */
#include "base/err.h"
#include "cache/cache.h"
#include "tests/tap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define SKIP(...) do { \
	printf("ok %d - ", ++tap_n); \
	printf(__VA_ARGS__); \
	printf("\n"); \
} while (0)

static char root[PATH_MAX];

/* snprintf that fails the whole test program rather than truncate a path. */
static int pathf(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int pathf(char *out, size_t n, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = vsnprintf(out, n, fmt, ap);
	va_end(ap);
	if (r < 0 || (size_t)r >= n) {
		printf("Bail out! path too long: %s\n", fmt);
		exit(1);
	}
	return r;
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)x;
	}
}

static struct rq_cache_key key(const char *tag, int i)
{
	char d[64];
	struct rq_cache_key k;
	int n = pathf(d, sizeof d, "%s-%d", tag, i);
	rq_cache_key_of(d, (size_t)n, &k);
	return k;
}

static void entry_path(const char *dir, const struct rq_cache_key *k, char *out)
{
	char h[33];
	rq_cache_key_hex(k, h);
	pathf(out, PATH_MAX, "%s/%.2s/%s.rqc", dir, h, h);
}

static int exists(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0;
}

static long long fsize(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 ? (long long)st.st_size : -1;
}

/* Files under dir (two levels) whose name contains `part`. */
static int count_named(const char *dir, const char *part)
{
	int n = 0;
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.' && (!de->d_name[1] || !strcmp(de->d_name, "..")))
			continue;
		char p[PATH_MAX];
		pathf(p, sizeof p, "%s/%s", dir, de->d_name);
		if (strstr(de->d_name, part))
			n++;
		struct stat st;
		if (stat(p, &st) == 0 && S_ISDIR(st.st_mode))
			n += count_named(p, part);
	}
	closedir(d);
	return n;
}

static struct rq_cache *open_at(const char *dir, uint64_t max)
{
	struct rq_cache_opts o = { .dir = dir, .max_bytes = max };
	struct rq_cache *c = NULL;
	struct rq_err e = { 0 };
	if (rq_cache_open(&o, &c, &e) < 0) {
		printf("# open %s: %s\n", dir, e.msg);
		return NULL;
	}
	return c;
}

static void subdir(const char *name, char *out)
{
	pathf(out, PATH_MAX, "%s/%s", root, name);
}

/* Test set-up steps that must work, or the program bails out. */
static void must(int ok, const char *what)
{
	if (!ok) {
		printf("Bail out! %s: %s\n", what, strerror(errno));
		exit(1);
	}
}

/* Rewrites one byte of a file in place; keep_mtime restores the old mtime. */
static void flip(const char *p, off_t off, int keep_mtime)
{
	struct stat st;
	stat(p, &st);
	int fd = open(p, O_RDWR);
	uint8_t b;
	must(pread(fd, &b, 1, off) == 1, "pread");
	b ^= 0x40;
	must(pwrite(fd, &b, 1, off) == 1, "pwrite");
	if (keep_mtime) {
		struct timespec ts[2] = { st.st_atim, st.st_mtim };
		futimens(fd, ts);
	}
	close(fd);
}

static void test_keys(void)
{
	const char d[] = "recipe=fp32;v=1;tensor=model.layers.0.mlp.up_proj.weight";
	struct rq_cache_key k, k2;
	rq_cache_key_of(d, sizeof d - 1, &k);
	XXH128_canonical_t c;
	XXH128_canonicalFromHash(&c, XXH3_128bits(d, sizeof d - 1));
	TAP_OK(!memcmp(k.b, c.digest, 16), "key is XXH3-128 of the descriptor (canonical bytes)");
	char h[33];
	rq_cache_key_hex(&k, h);
	int hexok = strlen(h) == 32;
	for (int i = 0; i < 32; i++)
		hexok &= (h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f');
	TAP_OK(hexok, "key hex is 32 lowercase digits (%s)", h);
	rq_cache_key_of(d, sizeof d - 2, &k2);
	TAP_OK(memcmp(k.b, k2.b, 16), "a different descriptor gives a different key");
}

static void test_round_trip(void)
{
	char dir[PATH_MAX], p[PATH_MAX];
	subdir("rt/a/b", dir);
	struct rq_cache *c = open_at(dir, 0);
	TAP_OK(c != NULL, "open creates a nested directory");
	if (!c)
		return;
	pathf(p, sizeof p, "%s/CACHEDIR.TAG", dir);
	TAP_OK(exists(p), "CACHEDIR.TAG written");

	size_t n = (1 << 20) + 3;
	uint8_t *a = malloc(n), *b = malloc(n);
	fill(a, n, 1);
	struct rq_cache_key k = key("rt", 0);
	struct rq_err e = { 0 };
	TAP_OK(rq_cache_put(c, &k, a, n, &e) == 0, "put 1 MiB + 3 (%s)", e.msg);
	entry_path(dir, &k, p);
	TAP_OK(fsize(p) == (long long)n + 80, "entry file is payload + 80 bytes (%lld)", fsize(p));
	TAP_OK(count_named(dir, ".tmp.") == 0, "no temp file left after put");
	memset(b, 0, n);
	TAP_OK(rq_cache_get(c, &k, n, b, &e) == 0 && !memcmp(a, b, n), "get returns the same bytes");
	int fd = -1;
	uint64_t off = 0;
	TAP_OK(rq_cache_lookup(c, &k, n, &fd, &off, NULL, &e) == 0 && off == 64,
	       "lookup: fd and offset 64");
	memset(b, 0, n);
	TAP_OK(fd >= 0 && pread(fd, b, n, (off_t)off) == (ssize_t)n && !memcmp(a, b, n),
	       "pread through the returned fd reads the payload");
	if (fd >= 0)
		close(fd);

	struct rq_cache_key miss = key("rt", 1);
	strcpy(e.msg, "stale");
	TAP_OK(rq_cache_lookup(c, &miss, n, &fd, &off, NULL, &e) == -ENOENT && !e.msg[0],
	       "an absent key is a plain miss (-ENOENT, no message)");
	struct rq_cache_key z = key("rt", 2);
	TAP_OK(rq_cache_put(c, &z, a, 0, &e) == 0 && rq_cache_get(c, &z, 0, b, &e) == 0,
	       "an empty payload round-trips");
	struct rq_cache_stats s;
	rq_cache_get_stats(c, &s);
	TAP_OK(s.entries == 2 && s.bytes == n && s.hits == 3 && s.misses == 1 && s.corrupt == 0,
	       "stats: entries %llu bytes %llu hits %llu misses %llu", (unsigned long long)s.entries,
	       (unsigned long long)s.bytes, (unsigned long long)s.hits, (unsigned long long)s.misses);
	rq_cache_close(c);

	c = open_at(dir, 0);
	rq_cache_get_stats(c, &s);
	TAP_OK(s.entries == 2 && s.bytes == n, "a new handle learns entries and bytes by scanning");
	memset(b, 0, n);
	TAP_OK(rq_cache_get(c, &k, n, b, &e) == 0 && !memcmp(a, b, n), "a new handle verifies and hits");

	/* In-place damage that restores the mtime still moves ctime: the same
	 * handle re-verifies (it used to trust it until the next mount). */
	flip(p, 64 + 1000, 1);
	TAP_OK(rq_cache_get(c, &k, n, b, &e) == -ENOENT && strstr(e.msg, "checksum") &&
	       strstr(e.msg, p), "a verified entry rewritten in place, mtime restored: the same "
	       "handle re-verifies and finds it (%s)", e.msg);
	rq_cache_get_stats(c, &s);
	TAP_OK(s.corrupt == 1 && !exists(p), "corrupt entry counted and deleted");
	TAP_OK(rq_cache_put(c, &k, a, n, &e) == 0, "put again");
	/* A handle that never verified it re-verifies too. */
	flip(p, 64 + 1000, 1);
	struct rq_cache *c2 = open_at(dir, 0);
	TAP_OK(rq_cache_get(c2, &k, n, b, &e) == -ENOENT && strstr(e.msg, "checksum") &&
	       strstr(e.msg, p), "the next handle re-verifies and finds it: %s", e.msg);
	rq_cache_get_stats(c2, &s);
	TAP_OK(s.corrupt == 1 && !exists(p), "corrupt entry counted and deleted");
	TAP_OK(rq_cache_put(c2, &k, a, n, &e) == 0 && rq_cache_get(c, &k, n, b, &e) == 0 &&
	       !memcmp(a, b, n), "after a re-put the first handle re-verifies the new file");
	/* A write into a verified file changes its mtime: the same handle re-reads. */
	flip(p, 64 + 2000, 0);
	struct timespec ts[2] = { { 0, UTIME_OMIT } };
	clock_gettime(CLOCK_REALTIME, &ts[1]);
	ts[1].tv_sec += 2;   /* past any coarse timestamp granularity */
	must(utimensat(AT_FDCWD, p, ts, 0) == 0, "utimensat");
	TAP_OK(rq_cache_get(c, &k, n, b, &e) == -ENOENT && strstr(e.msg, "checksum") && !exists(p),
	       "a verified file written into (new mtime) is re-verified by the same handle");
	TAP_OK(rq_cache_put(c, &k, a, n, &e) == 0, "and put again");
	rq_cache_close(c2);
	rq_cache_close(c);
	free(a);
	free(b);
}

/* Damages the entry of k with `how`, then expects a fresh handle's lookup to
 * miss with a message, count it corrupt, delete it, and a re-put to work. */
static void corrupt_case(const char *dir, int i, const char *what, void (*how)(const char *p),
                         uint64_t ask_delta, const char *expect)
{
	size_t n = 200000;
	uint8_t *a = malloc(n), *b = malloc(n + 1);
	fill(a, n, 100 + i);
	struct rq_cache_key k = key("bad", i);
	struct rq_err e = { 0 };
	char p[PATH_MAX];
	struct rq_cache *c = open_at(dir, 0);
	rq_cache_put(c, &k, a, n, &e);
	rq_cache_close(c);
	entry_path(dir, &k, p);
	if (how)
		how(p);
	c = open_at(dir, 0);
	int r = rq_cache_get(c, &k, n + ask_delta, b, &e);
	struct rq_cache_stats s;
	rq_cache_get_stats(c, &s);
	TAP_OK(r == -ENOENT && s.corrupt == 1 && s.misses == 1 && strstr(e.msg, expect),
	       "%s: a miss, counted corrupt (r=%d, msg: %s)", what, r, e.msg);
	TAP_OK(!exists(p), "%s: entry deleted", what);
	memset(b, 0, n);
	TAP_OK(rq_cache_put(c, &k, a, n, &e) == 0 && rq_cache_get(c, &k, n, b, &e) == 0 &&
	       !memcmp(a, b, n), "%s: put again and get works", what);
	rq_cache_close(c);
	free(a);
	free(b);
}

static void flip_payload(const char *p) { flip(p, 64 + 12345, 0); }
static void flip_key(const char *p) { flip(p, 20, 0); }
static void flip_sum(const char *p) { flip(p, fsize(p) - 3, 0); }
static void truncate_half(const char *p) { must(truncate(p, fsize(p) / 2) == 0, "truncate"); }
static void truncate_tiny(const char *p) { must(truncate(p, 10) == 0, "truncate"); }
static void append_byte(const char *p) { must(truncate(p, fsize(p) + 1) == 0, "truncate"); }

/* lazy_sync (the mount's job entries): no fsync per put. A crash before
 * writeback leaves a published name whose blocks are unwritten (zeros, as
 * fallocate reserved them): the next process must see a corrupt entry, a
 * miss, never bytes. */
static void test_lazy_sync(void)
{
	char dir[PATH_MAX], p[PATH_MAX];
	subdir("lazy", dir);
	struct rq_cache_opts o = { .dir = dir, .lazy_sync = 1 };
	struct rq_cache *c = NULL, *c2 = NULL;
	struct rq_err e = { 0 };
	must(rq_cache_open(&o, &c, &e) == 0, "open lazy");
	struct rq_cache_key k = key("lazy", 0), k2 = key("lazy", 1);
	uint8_t buf[8192], out[8192];
	fill(buf, sizeof buf, 11);
	TAP_OK(rq_cache_put(c, &k, buf, sizeof buf, &e) == 0 &&
	       rq_cache_put(c, &k2, buf, sizeof buf, &e) == 0, "lazy_sync: puts succeed");
	TAP_OK(count_named(dir, ".tmp.") == 0, "lazy_sync: no temp file left behind");
	must(rq_cache_open(&o, &c2, &e) == 0, "open lazy again");
	TAP_OK(rq_cache_get(c2, &k, sizeof buf, out, &e) == 0 && !memcmp(out, buf, sizeof buf),
	       "lazy_sync: another process reads the entry");
	rq_cache_close(c2);
	/* what a crash before writeback leaves: the size, zeros for the data */
	entry_path(dir, &k2, p);
	struct stat st;
	must(stat(p, &st) == 0, "stat entry");
	int fd = open(p, O_WRONLY | O_TRUNC);
	must(fd >= 0 && ftruncate(fd, st.st_size) == 0, "zero the entry");
	close(fd);
	c2 = NULL;
	must(rq_cache_open(&o, &c2, &e) == 0, "open after the crash");
	struct rq_cache_stats sx;
	e.msg[0] = 0;
	int r = rq_cache_get(c2, &k2, sizeof buf, out, &e);
	rq_cache_get_stats(c2, &sx);
	TAP_OK(r == -ENOENT && sx.corrupt == 1 && !exists(p),
	       "lazy_sync: an entry whose data never reached the disk is a corrupt miss, removed "
	       "(%d, %s)", r, e.msg);
	TAP_OK(rq_cache_put(c2, &k2, buf, sizeof buf, &e) == 0 &&
	       rq_cache_get(c2, &k2, sizeof buf, out, &e) == 0 && !memcmp(out, buf, sizeof buf),
	       "lazy_sync: rebuilt and read back");
	rq_cache_close(c2);
	rq_cache_close(c);
}

static void test_corruption(void)
{
	char dir[PATH_MAX];
	subdir("bad", dir);
	corrupt_case(dir, 0, "flipped payload byte", flip_payload, 0, "checksum");
	corrupt_case(dir, 1, "flipped header byte", flip_key, 0, "header");
	corrupt_case(dir, 2, "flipped checksum byte", flip_sum, 0, "checksum");
	corrupt_case(dir, 3, "truncated to half", truncate_half, 0, "truncated");
	corrupt_case(dir, 4, "truncated to 10 bytes", truncate_tiny, 0, "truncated");
	corrupt_case(dir, 5, "one byte appended", append_byte, 0, "header says");
	corrupt_case(dir, 6, "wrong-size request", NULL, 1, "expected");

	/* An entry file under another key's name. */
	struct rq_cache *c = open_at(dir, 0);
	struct rq_cache_key ka = key("mis", 0), kb = key("mis", 1);
	uint8_t buf[4096], out[4096];
	fill(buf, sizeof buf, 7);
	struct rq_err e = { 0 };
	rq_cache_put(c, &ka, buf, sizeof buf, &e);
	char pa[PATH_MAX], pb[PATH_MAX], cmd[3 * PATH_MAX];
	entry_path(dir, &ka, pa);
	entry_path(dir, &kb, pb);
	pathf(cmd, sizeof cmd, "mkdir -p $(dirname %s) && cp %s %s", pb, pa, pb);
	TAP_OK(system(cmd) == 0, "copied an entry under another key's name");
	TAP_OK(rq_cache_get(c, &kb, sizeof buf, out, &e) == -ENOENT && strstr(e.msg, "another key") &&
	       !exists(pb), "misnamed entry: a miss, deleted (%s)", e.msg);

	/* A foreign format version: a miss, but left for its owner. */
	int fd = open(pa, O_RDWR);
	uint8_t h[64];
	must(pread(fd, h, 64, 0) == 64, "pread");
	h[8] = 2;
	uint64_t hs = XXH3_64bits(h, 56);
	for (int i = 0; i < 8; i++)
		h[56 + i] = (uint8_t)(hs >> (8 * i));
	must(pwrite(fd, h, 64, 0) == 64, "pwrite");
	close(fd);
	struct rq_cache *c2 = open_at(dir, 0);
	struct rq_cache_stats s;
	int r = rq_cache_get(c2, &ka, sizeof buf, out, &e);
	rq_cache_get_stats(c2, &s);
	TAP_OK(r == -ENOENT && s.corrupt == 0 && exists(pa) && strstr(e.msg, "version 2"),
	       "foreign format version: a miss, not deleted (%s)", e.msg);
	TAP_OK(rq_cache_put(c2, &ka, buf, sizeof buf, &e) == 0 &&
	       rq_cache_get(c2, &ka, sizeof buf, out, &e) == 0 && !memcmp(buf, out, sizeof buf),
	       "a put replaces the foreign entry");

	/* Removed behind our back. */
	rq_cache_get_stats(c2, &s);
	uint64_t before = s.entries;
	unlink(pa);
	r = rq_cache_get(c2, &ka, sizeof buf, out, &e);
	rq_cache_get_stats(c2, &s);
	TAP_OK(r == -ENOENT && s.corrupt == 0 && s.entries == before - 1,
	       "entry removed by someone else: a plain miss, forgotten (entries %llu)",
	       (unsigned long long)s.entries);
	rq_cache_close(c2);
	rq_cache_close(c);
}

/* Payload of key i in the concurrency tests: a function of the key only. */
static size_t conc_size(int i) { return 20000 + (size_t)i * 7919; }

static int child_work(const char *dir, int id)
{
	struct rq_cache *c = open_at(dir, 0);
	if (!c)
		return 1;
	int bad = 0;
	uint8_t *a = malloc(200000), *b = malloc(200000);
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 12; i++) {
			/* keys 0..7 shared by every child, 8..11 this child's own */
			int kid = i < 8 ? i : 100 * (id + 1) + i;
			struct rq_cache_key k = key("conc", kid);
			size_t n = conc_size(i);
			struct rq_err e = { 0 };
			int r = rq_cache_get(c, &k, n, b, &e);
			fill(a, n, (uint64_t)kid);
			if (r == 0 && memcmp(a, b, n))
				bad++;   /* a hit must never return wrong bytes */
			if (r != 0 && r != -ENOENT)
				bad++;
			if (rq_cache_put(c, &k, a, n, &e) < 0) {
				fprintf(stderr, "child %d: %s\n", id, e.msg);
				bad++;
			}
		}
	}
	struct rq_cache_stats s;
	rq_cache_get_stats(c, &s);
	if (s.corrupt)
		bad++;
	rq_cache_close(c);
	free(a);
	free(b);
	return bad;
}

static void test_processes(void)
{
	char dir[PATH_MAX];
	subdir("conc", dir);
	enum { NCHILD = 4 };
	pid_t pids[NCHILD];
	for (int i = 0; i < NCHILD; i++) {
		fflush(stdout);
		pids[i] = fork();
		if (pids[i] == 0)
			_exit(child_work(dir, i));
	}
	int allok = 1;
	for (int i = 0; i < NCHILD; i++) {
		int st;
		waitpid(pids[i], &st, 0);
		allok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
	}
	TAP_OK(allok, "%d processes put/get shared and own keys: no error, no wrong byte", NCHILD);
	struct rq_cache *c = open_at(dir, 0);
	int good = 0, total = 0;
	uint8_t *a = malloc(200000), *b = malloc(200000);
	for (int id = -1; id < NCHILD; id++) {
		for (int i = id < 0 ? 0 : 8; i < (id < 0 ? 8 : 12); i++) {
			int kid = id < 0 ? i : 100 * (id + 1) + i;
			struct rq_cache_key k = key("conc", kid);
			size_t n = conc_size(i);
			struct rq_err e = { 0 };
			fill(a, n, (uint64_t)kid);
			total++;
			good += rq_cache_get(c, &k, n, b, &e) == 0 && !memcmp(a, b, n);
		}
	}
	struct rq_cache_stats s;
	rq_cache_get_stats(c, &s);
	TAP_OK(good == total && s.entries == (uint64_t)total && s.corrupt == 0,
	       "all %d entries valid afterwards (%d good, %llu on disk)", total, good,
	       (unsigned long long)s.entries);
	TAP_OK(count_named(dir, ".tmp.") == 0, "no temp file left by concurrent writers");
	rq_cache_close(c);
	free(a);
	free(b);
}

struct thr {
	struct rq_cache *c;
	int id, bad;
};

static void *thread_work(void *arg)
{
	struct thr *t = arg;
	uint8_t a[6000], b[6000];
	for (int it = 0; it < 200; it++) {
		int i = (it * 7 + t->id) % 16;
		struct rq_cache_key k = key("thr", i);
		size_t n = 1000 + (size_t)i * 300;
		struct rq_err e = { 0 };
		fill(a, n, (uint64_t)i);
		int r = rq_cache_get(t->c, &k, n, b, &e);
		if ((r == 0 && memcmp(a, b, n)) || (r != 0 && r != -ENOENT))
			t->bad++;
		if (r != 0 && rq_cache_put(t->c, &k, a, n, &e) < 0)
			t->bad++;
	}
	return NULL;
}

static void test_threads(void)
{
	char dir[PATH_MAX];
	subdir("thr", dir);
	struct rq_cache *c = open_at(dir, 40000);   /* small: eviction runs concurrently too */
	struct thr t[4];
	pthread_t th[4];
	for (int i = 0; i < 4; i++) {
		t[i] = (struct thr){ .c = c, .id = i };
		pthread_create(&th[i], NULL, thread_work, &t[i]);
	}
	int bad = 0;
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		bad += t[i].bad;
	}
	struct rq_cache_stats s;
	rq_cache_get_stats(c, &s);
	TAP_OK(bad == 0 && s.corrupt == 0 && s.bytes <= 40000 + 6000,
	       "4 threads on one handle with eviction: %d errors, %llu bytes, %llu evicted", bad,
	       (unsigned long long)s.bytes, (unsigned long long)s.evicted);
	rq_cache_close(c);
}

static void test_lru(void)
{
	enum { N = 100000, K = 7 };
	char dir[PATH_MAX], p[K][PATH_MAX];
	subdir("lru", dir);
	uint64_t max = 3 * N + N / 2;   /* room for three entries */
	uint8_t *a = malloc(N), *b = malloc(N);
	struct rq_cache_key k[K];
	struct rq_err e = { 0 };
	for (int i = 0; i < K; i++) {
		k[i] = key("lru", i);
		entry_path(dir, &k[i], p[i]);
	}
#define PUT(c, i) (fill(a, N, (uint64_t)(i)), rq_cache_put((c), &k[i], a, N, &e))
	struct rq_cache *c = open_at(dir, max);
	PUT(c, 0);
	PUT(c, 1);
	PUT(c, 2);
	TAP_OK(rq_cache_get(c, &k[0], N, b, &e) == 0, "A used after B and C were put");
	PUT(c, 3);
	struct rq_cache_stats s;
	rq_cache_get_stats(c, &s);
	TAP_OK(exists(p[0]) && !exists(p[1]) && exists(p[2]) && exists(p[3]) && s.evicted == 1 &&
	       s.bytes <= max, "put D over the limit evicts B, the least recently used");
	rq_cache_close(c);

	/* A new handle learns the order from the files' atimes. */
	c = open_at(dir, max);
	PUT(c, 4);
	TAP_OK(exists(p[0]) && !exists(p[2]) && exists(p[3]) && exists(p[4]),
	       "a new handle keeps the order: put E evicts C");
	/* Another handle (process) uses A: our eviction must notice. */
	struct rq_cache *c2 = open_at(dir, 0);
	TAP_OK(rq_cache_get(c2, &k[0], N, b, &e) == 0, "another handle uses A");
	PUT(c, 5);
	TAP_OK(exists(p[0]) && !exists(p[3]) && exists(p[4]) && exists(p[5]),
	       "put F evicts D, not A which the other handle used");
	rq_cache_close(c2);
	/* Someone removes E behind our back: forgotten, not counted as evicted. */
	unlink(p[4]);
	PUT(c, 6);
	rq_cache_get_stats(c, &s);
	TAP_OK(exists(p[0]) && exists(p[5]) && exists(p[6]) && s.evicted == 2 && s.entries == 3 &&
	       s.bytes == 3 * N, "put G after E vanished: nothing else evicted (evicted %llu, "
	       "entries %llu)", (unsigned long long)s.evicted, (unsigned long long)s.entries);
	rq_cache_close(c);
#undef PUT

	c = open_at(dir, N + N / 2);
	rq_cache_get_stats(c, &s);
	TAP_OK(s.entries == 1 && exists(p[6]) && !exists(p[0]) && !exists(p[5]) && s.evicted == 2,
	       "opening with a smaller max evicts down to it, youngest kept (%llu entries)",
	       (unsigned long long)s.entries);
	rq_cache_close(c);
	free(a);
	free(b);
}

static int try_mount(const char *dir, unsigned long flags, const char *opts, char *why)
{
	mkdir(dir, 0755);
	if (mount("tmpfs", dir, "tmpfs", flags, opts) < 0) {
		pathf(why, 256, "cannot mount a tmpfs on %s (%s); needs root", dir, strerror(errno));
		return -1;
	}
	return 0;
}

static void test_enospc(void)
{
	char mnt[PATH_MAX], dir[PATH_MAX], why[256];
	subdir("tiny", mnt);
	if (try_mount(mnt, 0, "size=64k", why) < 0) {
		SKIP("full disk # SKIP %s", why);
		return;
	}
	pathf(dir, sizeof dir, "%s/cache", mnt);
	struct rq_cache *c = open_at(dir, 0);
	TAP_OK(c != NULL, "open a cache on a 64 KiB tmpfs");
	if (c) {
		size_t n = 256 * 1024;
		uint8_t *a = malloc(n), *b = malloc(n);
		fill(a, n, 9);
		struct rq_cache_key k = key("big", 0);
		struct rq_err e = { 0 };
		char p[PATH_MAX];
		entry_path(dir, &k, p);
		int r = rq_cache_put(c, &k, a, n, &e);
		TAP_OK(r == -ENOSPC && strstr(e.msg, p), "put of 256 KiB: -ENOSPC naming the entry (%s)",
		       e.msg);
		TAP_OK(!exists(p) && count_named(dir, ".tmp.") == 0, "no entry and no temp file left");
		struct rq_cache_stats s;
		rq_cache_get_stats(c, &s);
		TAP_OK(s.put_failed == 1 && rq_cache_get(c, &k, n, b, &e) == -ENOENT,
		       "counted as put_failed; the key is a miss");
		struct rq_cache_key k2 = key("big", 1);
		TAP_OK(rq_cache_put(c, &k2, a, 1000, &e) == 0 && rq_cache_get(c, &k2, 1000, b, &e) == 0 &&
		       !memcmp(a, b, 1000), "a small put still works afterwards");
		rq_cache_close(c);
		free(a);
		free(b);
	}
	umount2(mnt, MNT_DETACH);
}

static void test_unwritable(void)
{
	char f[PATH_MAX], dir[PATH_MAX], why[256];
	struct rq_cache_opts o = { 0 };
	struct rq_cache *c = NULL;
	struct rq_err e = { 0 };
	subdir("afile", f);
	close(open(f, O_CREAT | O_WRONLY, 0644));
	pathf(dir, sizeof dir, "%s/sub/cache", f);
	o.dir = dir;
	TAP_OK(rq_cache_open(&o, &c, &e) == -ENOTDIR && strstr(e.msg, dir),
	       "directory under a regular file: -ENOTDIR naming it (%s)", e.msg);
	o.dir = f;
	TAP_OK(rq_cache_open(&o, &c, &e) == -ENOTDIR && strstr(e.msg, f) &&
	       strstr(e.msg, "not a directory"), "a regular file as the directory: %s", e.msg);

	subdir("ro", dir);
	if (try_mount(dir, MS_RDONLY, "size=64k,mode=0755", why) < 0) {
		SKIP("read-only directory # SKIP %s", why);
	} else {
		o.dir = dir;
		int r = rq_cache_open(&o, &c, &e);
		TAP_OK(r == -EROFS && strstr(e.msg, dir) && strstr(e.msg, "not writable"),
		       "read-only file system: -EROFS naming it (%s)", e.msg);
		umount2(dir, MNT_DETACH);
	}
	if (geteuid() == 0) {
		SKIP("mode 0555 directory # SKIP root may write anywhere; covered by the read-only mount");
	} else {
		subdir("noperm", dir);
		mkdir(dir, 0555);
		o.dir = dir;
		TAP_OK(rq_cache_open(&o, &c, &e) == -EACCES && strstr(e.msg, dir),
		       "mode 0555 directory: -EACCES naming it (%s)", e.msg);
	}
}

static void touch_file(const char *p, int64_t age_s)
{
	close(open(p, O_CREAT | O_WRONLY, 0644));
	struct timespec ts[2];
	clock_gettime(CLOCK_REALTIME, &ts[0]);
	ts[0].tv_sec -= age_s;
	ts[1] = ts[0];
	utimensat(AT_FDCWD, p, ts, 0);
}

static void test_stale_tmp(void)
{
	char dir[PATH_MAX], sub[PATH_MAX], p[6][PATH_MAX + 80];
	subdir("stale", dir);
	pathf(sub, sizeof sub, "%s/ab", dir);
	mkdir(dir, 0755);
	mkdir(sub, 0755);
	fflush(stdout);
	pid_t dead = fork();
	if (dead == 0)
		_exit(0);
	waitpid(dead, NULL, 0);
	const char *h = "ab0123456789abcdef0123456789abcd";
	pathf(p[0], sizeof p[0], "%s/%s.rqc.tmp.%d.0", sub, h, (int)dead);       /* dead, 2 min */
	pathf(p[1], sizeof p[1], "%s/%s.rqc.tmp.%d.1", sub, h, (int)dead);       /* dead, fresh */
	pathf(p[2], sizeof p[2], "%s/%s.rqc.tmp.%d.2", sub, h, (int)getppid());  /* live, fresh */
	pathf(p[3], sizeof p[3], "%s/%s.rqc.tmp.%d.3", sub, h, (int)getppid());  /* live, 1 h */
	pathf(p[4], sizeof p[4], "%s/notes.txt", sub);
	pathf(p[5], sizeof p[5], "%s/.rqprobe.%d.0", dir, (int)dead);
	touch_file(p[0], 120);
	touch_file(p[1], 0);
	touch_file(p[2], 0);
	touch_file(p[3], 3600);
	touch_file(p[4], 3600);
	touch_file(p[5], 120);
	struct rq_cache *c = open_at(dir, 0);
	TAP_OK(!exists(p[0]) && !exists(p[5]), "temp files of a dead writer older than 1 min removed");
	TAP_OK(exists(p[1]), "a dead writer's fresh temp file is kept for a grace minute");
	TAP_OK(exists(p[2]), "a live writer's fresh temp file is kept");
	TAP_OK(!exists(p[3]), "any temp file older than 15 min removed");
	TAP_OK(exists(p[4]), "unrelated files are left alone");
	struct rq_cache_stats s;
	rq_cache_get_stats(c, &s);
	TAP_OK(s.entries == 0 && s.bytes == 0, "temp files are not entries");
	rq_cache_close(c);
}

/* ---- a hostile directory --------------------------------------------- */

/* Runs fn(arg) in a child with a time limit, so that a lookup blocking
 * forever (a FIFO at an entry's name) is a failure, not a stuck suite.
 * The child reports through its exit status: 0 passed. -1: it hung. */
static int in_child(int (*fn)(void *), void *arg, int secs)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0)
		_exit(fn(arg));
	for (int t = 0; t < secs * 100; t++) {
		int st;
		if (waitpid(pid, &st, WNOHANG) == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
		usleep(10000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return -1;
}

struct plant {
	const char *dir, *what, *expect;
	int i;
	void (*how)(const char *p, const char *dir);
	char msg[300];
};

static void plant_fifo(const char *p, const char *dir)
{
	must(unlink(p) == 0 && mkfifo(p, 0644) == 0, "mkfifo");
}

/* A symlink to a valid copy of the entry elsewhere: following it would hit. */
static void plant_symlink(const char *p, const char *dir)
{
	char q[PATH_MAX], cmd[3 * PATH_MAX];
	pathf(q, sizeof q, "%s.elsewhere", dir);
	pathf(cmd, sizeof cmd, "cp '%s' '%s'", p, q);
	must(system(cmd) == 0 && unlink(p) == 0 && symlink(q, p) == 0, "symlink");
}

static void plant_dir(const char *p, const char *dir)
{
	must(unlink(p) == 0 && mkdir(p, 0755) == 0, "mkdir");
}

static void plant_mode(const char *p, const char *dir)
{
	must(chmod(p, 0666) == 0, "chmod");
}

/* In a child: a fresh handle (its scan must not hang either) looks the
 * entry up: a miss with a message, counted corrupt, the name cleared, and
 * a put + get working afterwards. Exit 0 when all held. */
static int plant_child(void *arg)
{
	struct plant *t = arg;
	size_t n = 50000;
	uint8_t *a = malloc(n), *b = malloc(n);
	fill(a, n, 300 + t->i);
	struct rq_cache_key k = key("plant", t->i);
	char p[PATH_MAX];
	entry_path(t->dir, &k, p);
	struct rq_err e = { 0 };
	struct rq_cache *c = open_at(t->dir, 0);
	if (!c)
		return 2;
	int fd = -1;
	uint64_t off;
	int r = rq_cache_lookup(c, &k, n, &fd, &off, NULL, &e);
	struct rq_cache_stats s;
	rq_cache_get_stats(c, &s);
	struct stat st;
	int gone = lstat(p, &st) < 0 && errno == ENOENT;
	printf("# %s: r=%d corrupt=%llu gone=%d msg: %s\n", t->what, r,
	       (unsigned long long)s.corrupt, gone, e.msg);
	if (r != -ENOENT || s.corrupt != 1 || !strstr(e.msg, t->expect) || !strstr(e.msg, p) || !gone)
		return 3;
	memset(b, 0, n);
	if (rq_cache_put(c, &k, a, n, &e) || rq_cache_get(c, &k, n, b, &e) || memcmp(a, b, n))
		return 4;
	rq_cache_close(c);
	return 0;
}

static void plant_case(const char *dir, int i, const char *what,
                       void (*how)(const char *p, const char *dir), const char *expect)
{
	size_t n = 50000;
	uint8_t *a = malloc(n);
	fill(a, n, 300 + i);
	struct rq_cache_key k = key("plant", i);
	struct rq_err e = { 0 };
	char p[PATH_MAX];
	struct rq_cache *c = open_at(dir, 0);
	must(c && rq_cache_put(c, &k, a, n, &e) == 0, "put");
	rq_cache_close(c);
	entry_path(dir, &k, p);
	how(p, dir);
	struct plant t = { .dir = dir, .what = what, .expect = expect, .i = i, .how = how };
	int r = in_child(plant_child, &t, 5);
	TAP_OK(r == 0, "%s at an entry's name: a miss naming it (\"%s\"), counted corrupt, "
	       "removed, rebuilt (child %s %d)", what, expect, r < 0 ? "hung:" : "exit", r);
	free(a);
}

/* Damage after verification, seen by the same handle. */
static void test_changed_after_verify(const char *dir)
{
	size_t n = 40000;
	uint8_t *a = malloc(n), *b = malloc(n);
	fill(a, n, 77);
	struct rq_cache_key k = key("changed", 0);
	struct rq_err e = { 0 };
	char p[PATH_MAX];
	entry_path(dir, &k, p);
	struct rq_cache *c = open_at(dir, 0);
	must(c && rq_cache_put(c, &k, a, n, &e) == 0, "put");
	TAP_OK(rq_cache_get(c, &k, n, b, &e) == 0 && !memcmp(a, b, n), "verified entry read back");
	/* truncated in place, mtime restored */
	struct stat st0;
	stat(p, &st0);
	must(truncate(p, (off_t)(n / 4)) == 0, "truncate");
	struct timespec ts[2] = { st0.st_atim, st0.st_mtim };
	must(utimensat(AT_FDCWD, p, ts, 0) == 0, "utimensat");
	int r = rq_cache_get(c, &k, n, b, &e);
	struct rq_cache_stats s;
	rq_cache_get_stats(c, &s);
	TAP_OK(r == -ENOENT && s.corrupt == 1 && strstr(e.msg, "truncated") && !exists(p),
	       "a verified entry truncated (mtime restored): the same handle drops it (%s)", e.msg);
	free(a);
	free(b);
	rq_cache_close(c);
}

static void test_recheck(const char *dir)
{
	size_t n = 60000;
	uint8_t *a = malloc(n);
	fill(a, n, 78);
	struct rq_cache_key k = key("recheck", 0);
	struct rq_err e = { 0 };
	char p[PATH_MAX];
	entry_path(dir, &k, p);
	struct rq_cache *c = open_at(dir, 0);
	must(c && rq_cache_put(c, &k, a, n, &e) == 0, "put");
	int fd = -1;
	uint64_t off;
	struct rq_cache_ident id;
	TAP_OK(rq_cache_lookup(c, &k, n, &fd, &off, &id, &e) == 0 && id.size == n + 80,
	       "lookup returns the verified identity");
	TAP_OK(rq_cache_recheck(c, &k, fd, n, &id, &e) == 0, "recheck of an unchanged entry: 0");
	/* Another process's hit touches the entry (atime, hence ctime): changed
	 * but good: verified again and adopted. */
	struct rq_cache *c2 = open_at(dir, 0);
	int fd2 = -1;
	struct rq_cache_ident id0 = id;
	TAP_OK(rq_cache_lookup(c2, &k, n, &fd2, &off, NULL, &e) == 0, "another handle hits");
	close(fd2);
	rq_cache_close(c2);
	int r1 = rq_cache_recheck(c, &k, fd, n, &id, &e);
	int r2 = rq_cache_recheck(c, &k, fd, n, &id, &e);
	TAP_OK(r1 == 1 && r2 == 0 && id.ctime != id0.ctime,
	       "recheck after another handle's touch: verified again (1), then trusted (0): %d %d",
	       r1, r2);
	/* rewritten in place with the mtime restored */
	flip(p, 64 + 5000, 1);
	struct rq_cache_stats s;
	int r = rq_cache_recheck(c, &k, fd, n, &id, &e);
	rq_cache_get_stats(c, &s);
	TAP_OK(r == -ESTALE && strstr(e.msg, "checksum") && s.corrupt == 1 && !exists(p),
	       "recheck of an entry rewritten in place (mtime restored): -ESTALE, counted, "
	       "deleted (%s)", e.msg);
	close(fd);
	/* truncated under an open fd */
	must(rq_cache_put(c, &k, a, n, &e) == 0, "put");
	TAP_OK(rq_cache_lookup(c, &k, n, &fd, &off, &id, &e) == 0, "lookup again");
	must(truncate(p, 100) == 0, "truncate");
	r = rq_cache_recheck(c, &k, fd, n, &id, &e);
	rq_cache_get_stats(c, &s);
	TAP_OK(r == -ESTALE && strstr(e.msg, "truncated") && s.corrupt == 2 && !exists(p),
	       "recheck of a truncated entry: -ESTALE (%s)", e.msg);
	close(fd);
	/* replaced by a good file through rename: the old fd is still good */
	must(rq_cache_put(c, &k, a, n, &e) == 0, "put");
	TAP_OK(rq_cache_lookup(c, &k, n, &fd, &off, &id, &e) == 0, "lookup again");
	c2 = open_at(dir, 0);
	must(c2 && rq_cache_put(c2, &k, a, n, &e) == 0, "put by another handle");
	rq_cache_close(c2);
	/* (the replaced inode's ctime moves as its link goes: verified again) */
	r1 = rq_cache_recheck(c, &k, fd, n, &id, &e);
	r2 = rq_cache_recheck(c, &k, fd, n, &id, &e);
	TAP_OK(r1 >= 0 && r2 == 0 && exists(p), "an fd whose entry was replaced by another good "
	       "one: still good, never deleted (%d %d)", r1, r2);
	close(fd);
	rq_cache_close(c);
	free(a);
}

static void expect_refused(const char *dir, const char *what, const char *word)
{
	struct rq_cache_opts o = { .dir = dir };
	struct rq_cache *c = NULL;
	struct rq_err e = { 0 };
	int r = rq_cache_open(&o, &c, &e);
	TAP_OK(r == -EPERM && !c && strstr(e.msg, dir) && strstr(e.msg, word),
	       "%s refused (-EPERM, names it, says \"%s\"): %s", what, word, e.msg);
	rq_cache_close(c);
}

static void test_dir_perms(void)
{
	char dir[PATH_MAX];
	const struct { const char *name; mode_t mode; const char *what; } bad[] = {
		{ "perm-g", 0775, "a group-writable cache directory" },
		{ "perm-o", 0757, "a world-writable cache directory" },
		{ "perm-t", 01777, "a sticky world-writable (/tmp-like) cache directory" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		subdir(bad[i].name, dir);
		must(mkdir(dir, 0700) == 0 && chmod(dir, bad[i].mode) == 0, "mkdir");
		expect_refused(dir, bad[i].what, "chmod go-w");
	}
	if (geteuid() == 0) {
		subdir("perm-u", dir);
		must(mkdir(dir, 0755) == 0 && chown(dir, 65534, 65534) == 0, "chown");
		expect_refused(dir, "a cache directory owned by another user", "owned by uid 65534");
	} else {
		SKIP("cache directory of another user # SKIP needs root to chown");
	}
	/* a good cache whose xx/ subdirectory became group-writable */
	subdir("perm-sub", dir);
	struct rq_cache *c = open_at(dir, 0);
	struct rq_cache_key k = key("permsub", 0);
	uint8_t x[100] = { 0 };
	struct rq_err e = { 0 };
	must(c && rq_cache_put(c, &k, x, sizeof x, &e) == 0, "put");
	rq_cache_close(c);
	char h[33], sub[PATH_MAX];
	rq_cache_key_hex(&k, h);
	pathf(sub, sizeof sub, "%s/%.2s", dir, h);
	must(chmod(sub, 0775) == 0, "chmod");
	expect_refused(dir, "a cache whose subdirectory is group-writable", "chmod go-w");
	must(chmod(sub, 0755) == 0, "chmod");
	c = open_at(dir, 0);
	TAP_OK(c != NULL, "mode 0755 directories are accepted");
	rq_cache_close(c);
}

static void test_hostile(void)
{
	char dir[PATH_MAX];
	subdir("hostile", dir);
	plant_case(dir, 0, "a FIFO", plant_fifo, "FIFO");
	plant_case(dir, 1, "a symlink to a valid copy", plant_symlink, "symbolic link");
	plant_case(dir, 2, "an empty directory", plant_dir, "directory");
	plant_case(dir, 3, "an entry writable by others (0666)", plant_mode, "writable by group");
	test_changed_after_verify(dir);
	test_recheck(dir);
	test_dir_perms();
}

/* ---- whole files (rq_cache_file_*) ------------------------------------ */

static void file_names(const char *dir, const struct rq_cache_key *k, char *bin, char *sum)
{
	char h[33];
	rq_cache_key_hex(k, h);
	pathf(bin, PATH_MAX, "%s/files/%s.bin", dir, h);
	pathf(sum, PATH_MAX, "%s/files/%s.sum", dir, h);
}

/* Writes file k (n bytes of a) in uneven chunks and commits it: 0 with *fd
 * and *id, or the failing call's result (e says why). */
static int write_file(struct rq_cache *c, const struct rq_cache_key *k, const uint8_t *a,
                      size_t n, int *fd, struct rq_cache_ident *id, struct rq_err *e)
{
	struct rq_cache_writer *w = NULL;
	int r = rq_cache_file_begin(c, k, n, &w, e);
	if (r)
		return r;
	for (size_t off = 0, step = 1; off < n; step = step * 3 + 7777) {
		size_t m = n - off < step ? n - off : step;
		if ((r = rq_cache_file_write(w, a + off, m, e))) {
			rq_cache_file_abort(w);
			return r;
		}
		off += m;
	}
	return rq_cache_file_commit(w, fd, id, e);
}

/* Writes file k and closes the fd; must succeed. */
static void must_file(struct rq_cache *c, const struct rq_cache_key *k, const uint8_t *a, size_t n)
{
	int fd = -1;
	struct rq_cache_ident id;
	struct rq_err e = { 0 };
	if (write_file(c, k, a, n, &fd, &id, &e)) {
		printf("Bail out! writing a cache file: %s\n", e.msg);
		exit(1);
	}
	close(fd);
}

/* A fresh handle opens file k: its result, with e and stats. */
static int reopen_file(const char *dir, const struct rq_cache_key *k, size_t n, struct rq_err *e,
                       struct rq_cache_stats *s)
{
	struct rq_cache *c = open_at(dir, 0);
	if (!c)
		return -999;
	int fd = -1;
	int r = rq_cache_file_open(c, k, n, &fd, NULL, e);
	if (r == 0)
		close(fd);
	rq_cache_get_stats(c, s);
	rq_cache_close(c);
	return r;
}

static int read_back(int fd, const uint8_t *a, size_t n)
{
	uint8_t *b = malloc(n + 1);
	ssize_t got = pread(fd, b, n + 1, 0);
	int ok = got == (ssize_t)n && !memcmp(a, b, n);
	free(b);
	return ok;
}

static void test_file_round_trip(const char *dir, const uint8_t *a, size_t n)
{
	char bin[PATH_MAX], sum[PATH_MAX];
	struct rq_cache_key k = key("file", 0);
	file_names(dir, &k, bin, sum);
	struct rq_cache *c = open_at(dir, 0);
	must(c != NULL, "open");
	int fd = -1;
	struct rq_cache_ident id;
	struct rq_err e = { 0 };
	TAP_OK(write_file(c, &k, a, n, &fd, &id, &e) == 0, "file written in uneven chunks and "
	       "committed (%s)", e.msg);
	TAP_OK(fd >= 0 && read_back(fd, a, n) && id.size == n,
	       "the fd of the commit reads exactly the bytes written");
	close(fd);
	TAP_OK(fsize(bin) == (long long)n && fsize(sum) == 64 && count_named(dir, ".tmp.") == 0,
	       "files/<hex>.bin holds the bytes alone, <hex>.sum is 64 bytes, no temp left");
	struct rq_cache_stats s;
	rq_cache_get_stats(c, &s);
	TAP_OK(s.files == 1 && s.file_bytes == n && s.entries == 1 && s.bytes == n,
	       "stats count the file (files %llu, file_bytes %llu, entries %llu)",
	       (unsigned long long)s.files, (unsigned long long)s.file_bytes,
	       (unsigned long long)s.entries);
	TAP_OK(rq_cache_file_open(c, &k, n, &fd, &id, &e) == 0 && read_back(fd, a, n),
	       "open in the writing handle hits");
	close(fd);
	rq_cache_close(c);

	c = open_at(dir, 0);
	rq_cache_get_stats(c, &s);
	TAP_OK(s.files == 1 && s.file_bytes == n, "a new handle learns the file by scanning");
	TAP_OK(rq_cache_file_has(c, &k) == 1 && rq_cache_has(c, &k) == 0,
	       "file_has sees the file; has (entries) does not");
	TAP_OK(rq_cache_file_open(c, &k, n, &fd, &id, &e) == 0 && read_back(fd, a, n),
	       "a new handle verifies the whole file and hits (%s)", e.msg);
	close(fd);
	strcpy(e.msg, "stale");
	struct rq_cache_key miss = key("file", 1);
	TAP_OK(rq_cache_file_open(c, &miss, n, &fd, &id, &e) == -ENOENT && !e.msg[0],
	       "an absent file is a plain miss");
	rq_cache_close(c);
}

/* Damages file i with `how`, then a fresh handle's open must miss with
 * `expect` (NULL: a plain miss, nothing removed) and count it corrupt. */
static void file_bad_case(const char *dir, int i, const char *what, void (*how)(const char *bin,
                          const char *sum), const char *expect, const uint8_t *a, size_t n)
{
	char bin[PATH_MAX], sum[PATH_MAX];
	struct rq_cache_key k = key("filebad", i);
	file_names(dir, &k, bin, sum);
	struct rq_cache *c = open_at(dir, 0);
	must_file(c, &k, a, n);
	rq_cache_close(c);
	how(bin, sum);
	struct rq_err e = { 0 };
	struct rq_cache_stats s;
	int r = reopen_file(dir, &k, n, &e, &s);
	if (expect) {
		TAP_OK(r == -ENOENT && s.corrupt == 1 && strstr(e.msg, expect) && strstr(e.msg, "files/"),
		       "%s: a miss, counted corrupt (msg: %s)", what, e.msg);
		TAP_OK(!exists(bin) && !exists(sum), "%s: both names removed", what);
	} else {
		TAP_OK(r == -ENOENT && s.corrupt == 0 && !e.msg[0], "%s: a plain miss (r=%d)", what, r);
	}
	c = open_at(dir, 0);
	int fd = -1;
	must_file(c, &k, a, n);
	TAP_OK(rq_cache_file_open(c, &k, n, &fd, NULL, &e) == 0 && read_back(fd, a, n),
	       "%s: written again, opens", what);
	close(fd);
	rq_cache_close(c);
}

static void fb_flip(const char *bin, const char *sum) { flip(bin, 12345, 0); }
static void fb_flip_keep(const char *bin, const char *sum) { flip(bin, 777, 1); }
static void fb_nosum(const char *bin, const char *sum) { must(unlink(sum) == 0, "unlink"); }
static void fb_sumflip(const char *bin, const char *sum) { flip(sum, 20, 0); }
static void fb_sumsum(const char *bin, const char *sum) { flip(sum, 45, 0); }
static void fb_sumshort(const char *bin, const char *sum) { must(truncate(sum, 63) == 0, "truncate"); }
static void fb_trunc(const char *bin, const char *sum) { must(truncate(bin, fsize(bin) - 1) == 0, "truncate"); }
static void fb_extend(const char *bin, const char *sum) { must(truncate(bin, fsize(bin) + 1) == 0, "truncate"); }

struct fplant {
	const char *dir;
	int i, fifo;
	size_t n;
};

/* In a child: a fresh handle opens a file whose .bin is a FIFO or symlink. */
static int fplant_child(void *arg)
{
	struct fplant *t = arg;
	struct rq_cache_key k = key("fileplant", t->i);
	char bin[PATH_MAX], sum[PATH_MAX];
	file_names(t->dir, &k, bin, sum);
	struct rq_err e = { 0 };
	struct rq_cache_stats s;
	int r = reopen_file(t->dir, &k, t->n, &e, &s);
	struct stat st;
	int gone = lstat(bin, &st) < 0 && lstat(sum, &st) < 0;
	printf("# %s: r=%d corrupt=%llu gone=%d msg: %s\n", t->fifo ? "FIFO" : "symlink", r,
	       (unsigned long long)s.corrupt, gone, e.msg);
	return !(r == -ENOENT && s.corrupt == 1 && gone && strstr(e.msg, bin) &&
	         strstr(e.msg, t->fifo ? "FIFO" : "symbolic link"));
}

static void file_plant(const char *dir, int i, int fifo, const uint8_t *a, size_t n)
{
	struct rq_cache_key k = key("fileplant", i);
	char bin[PATH_MAX], sum[PATH_MAX], q[PATH_MAX], cmd[3 * PATH_MAX];
	file_names(dir, &k, bin, sum);
	struct rq_cache *c = open_at(dir, 0);
	must_file(c, &k, a, n);
	rq_cache_close(c);
	if (fifo) {
		must(unlink(bin) == 0 && mkfifo(bin, 0644) == 0, "mkfifo");
	} else {
		pathf(q, sizeof q, "%s.elsewhere", dir);
		pathf(cmd, sizeof cmd, "cp '%s' '%s'", bin, q);
		must(system(cmd) == 0 && unlink(bin) == 0 && symlink(q, bin) == 0, "symlink");
	}
	struct fplant t = { dir, i, fifo, n };
	int r = in_child(fplant_child, &t, 5);
	TAP_OK(r == 0, "%s at a file's .bin: never blocks, a miss naming it, counted corrupt, "
	       "both names removed (child %s %d)", fifo ? "a FIFO" : "a symlink to a valid copy",
	       r < 0 ? "hung:" : "exit", r);
}

static void test_file_crash_abort(const char *dir, const uint8_t *a, size_t n)
{
	struct rq_cache *c = open_at(dir, 0);
	struct rq_cache_key k = key("fileabort", 0);
	char bin[PATH_MAX], sum[PATH_MAX];
	file_names(dir, &k, bin, sum);
	struct rq_cache_writer *w = NULL;
	struct rq_err e = { 0 };
	must(rq_cache_file_begin(c, &k, n, &w, &e) == 0, "begin");
	must(rq_cache_file_write(w, a, n / 2, &e) == 0, "write");
	TAP_OK(count_named(dir, ".bin.tmp.") == 1 && !exists(bin), "while written: a temp only "
	       "(%d temps, bin %d)", count_named(dir, ".bin.tmp."), exists(bin));
	rq_cache_file_abort(w);
	rq_cache_file_abort(NULL);
	TAP_OK(count_named(dir, ".tmp.") == 0 && !exists(bin) && !exists(sum),
	       "abort leaves nothing (abort(NULL) is fine)");
	must(rq_cache_file_begin(c, &k, n, &w, &e) == 0, "begin");
	must(rq_cache_file_write(w, a, n - 1, &e) == 0, "write");
	int fd = -1;
	int r = rq_cache_file_commit(w, &fd, NULL, &e);
	TAP_OK(r == -EINVAL && strstr(e.msg, bin) && count_named(dir, ".tmp.") == 0 && !exists(bin),
	       "commit of a short file: -EINVAL, nothing left (%s)", e.msg);
	must(rq_cache_file_begin(c, &k, 10, &w, &e) == 0, "begin");
	r = rq_cache_file_write(w, a, 11, &e);
	TAP_OK(r == -EINVAL && rq_cache_file_commit(w, &fd, NULL, &e) < 0 &&
	       count_named(dir, ".tmp.") == 0, "writing more than declared fails, so does its commit");

	/* Stale temps in files/: a dead writer's, 2 min old, go; a live one's stay. */
	fflush(stdout);
	pid_t dead = fork();
	if (dead == 0)
		_exit(0);
	waitpid(dead, NULL, 0);
	char t0[PATH_MAX + 40], t1[PATH_MAX + 40];
	pathf(t0, sizeof t0, "%s.tmp.%d.0", bin, (int)dead);
	pathf(t1, sizeof t1, "%s.tmp.%d.1", sum, (int)getppid());
	touch_file(t0, 120);
	touch_file(t1, 0);
	rq_cache_close(c);
	c = open_at(dir, 0);
	TAP_OK(!exists(t0) && exists(t1), "scan: a dead writer's stale temp in files/ removed, a "
	       "live writer's kept");
	unlink(t1);
	rq_cache_close(c);
}

static void test_file_recheck(const char *dir, const uint8_t *a, size_t n)
{
	struct rq_cache *c = open_at(dir, 0);
	struct rq_cache_key k = key("filerecheck", 0);
	char bin[PATH_MAX], sum[PATH_MAX];
	file_names(dir, &k, bin, sum);
	int fd = -1;
	struct rq_cache_ident id;
	struct rq_err e = { 0 };
	must(write_file(c, &k, a, n, &fd, &id, &e) == 0, "write");
	TAP_OK(rq_cache_file_recheck(c, &k, fd, n, &id, &e) == 0,
	       "recheck of the committed fd, unchanged: 0");
	struct rq_cache_ident id0 = id;
	struct rq_cache_stats s;
	TAP_OK(reopen_file(dir, &k, n, &e, &s) == 0, "another handle opens it (a touch)");
	int r1 = rq_cache_file_recheck(c, &k, fd, n, &id, &e);
	int r2 = rq_cache_file_recheck(c, &k, fd, n, &id, &e);
	TAP_OK(r1 == 1 && r2 == 0 && id.ctime != id0.ctime,
	       "recheck after a touch: verified again (1), then trusted (0): %d %d", r1, r2);
	flip(bin, 4321, 1);
	int r = rq_cache_file_recheck(c, &k, fd, n, &id, &e);
	rq_cache_get_stats(c, &s);
	TAP_OK(r == -ESTALE && strstr(e.msg, "checksum") && s.corrupt == 1 && !exists(bin) &&
	       !exists(sum), "recheck of a file rewritten in place (mtime restored): -ESTALE, both "
	       "names removed (%s)", e.msg);
	close(fd);
	/* removed while served (pinned, as the mount does): the fd is still good */
	must(write_file(c, &k, a, n, &fd, &id, &e) == 0, "write");
	rq_cache_file_pin(c, &k, +1);
	must(rq_cache_file_remove(c, &k) == 0, "remove");
	r1 = rq_cache_file_recheck(c, &k, fd, n, &id, &e);
	r2 = rq_cache_file_recheck(c, &k, fd, n, &id, &e);
	TAP_OK(r1 == 1 && r2 == 0 && read_back(fd, a, n), "a pinned file's fd whose names were "
	       "removed: verified against the sum kept in memory (%d %d %s)", r1, r2,
	       r1 < 0 ? e.msg : "");
	rq_cache_file_pin(c, &k, -1);
	close(fd);
	rq_cache_close(c);
}

static void test_file_enospc(const uint8_t *a)
{
	char mnt[PATH_MAX], why[256];
	subdir("ftiny", mnt);
	if (try_mount(mnt, 0, "size=256k,mode=0755", why) < 0) {
		SKIP("full disk for a file # SKIP %s", why);
		return;
	}
	struct rq_cache *c = open_at(mnt, 0);
	TAP_OK(c != NULL, "a cache at the root of a 256 KiB tmpfs (mode 0755)");
	if (c) {
		struct rq_cache_key k = key("filebig", 0);
		char bin[PATH_MAX], sum[PATH_MAX];
		file_names(mnt, &k, bin, sum);
		struct rq_cache_writer *w = NULL;
		struct rq_err e = { 0 };
		int r = rq_cache_file_begin(c, &k, 1 << 20, &w, &e);
		if (r == 0) {   /* no fallocate here: the write fails instead */
			for (size_t off = 0; r == 0 && off < (1 << 20); off += 4096)
				r = rq_cache_file_write(w, a + off, 4096, &e);
			rq_cache_file_abort(w);
		}
		struct rq_cache_stats s;
		rq_cache_get_stats(c, &s);
		TAP_OK(r == -ENOSPC && strstr(e.msg, bin) && strstr(e.msg, "--cache-max") &&
		       s.put_failed == 1, "a 1 MiB file: -ENOSPC naming it (%s)", e.msg);
		TAP_OK(count_named(mnt, ".tmp.") == 0 && !exists(bin) && !exists(sum),
		       "nothing left on the full disk");
		int fd = -1;
		struct rq_cache_key k2 = key("filebig", 1);
		TAP_OK(write_file(c, &k2, a, 5000, &fd, NULL, &e) == 0 && read_back(fd, a, 5000),
		       "a small file still works afterwards");
		close(fd);
		rq_cache_close(c);
	}
	umount2(mnt, MNT_DETACH);
}

static void test_file_evict(const uint8_t *a)
{
	enum { N = 100000 };
	char dir[PATH_MAX], fb[2][PATH_MAX], fs[2][PATH_MAX], ep[8][PATH_MAX];
	subdir("fevict", dir);
	struct rq_cache_key f[2] = { key("fev", 0), key("fev", 1) }, en[8];
	for (int i = 0; i < 2; i++)
		file_names(dir, &f[i], fb[i], fs[i]);
	for (int i = 0; i < 8; i++) {
		en[i] = key("eev", i);
		entry_path(dir, &en[i], ep[i]);
	}
	struct rq_err e = { 0 };
	struct rq_cache_stats s;
	struct rq_cache *c = open_at(dir, 3 * N + N / 2);
#define EPUT(i) must(rq_cache_put(c, &en[i], a, N, &e) == 0, "put")
	must_file(c, &f[0], a, N);
	EPUT(1);
	EPUT(2);
	rq_cache_get_stats(c, &s);
	TAP_OK(s.entries == 3 && s.bytes == 3 * N && s.files == 1, "a file and two entries: "
	       "3 x 100000 bytes counted");
	EPUT(3);
	rq_cache_get_stats(c, &s);
	TAP_OK(!exists(fb[0]) && !exists(fs[0]) && exists(ep[1]) && s.evicted == 1 && s.files == 0,
	       "an entry put over the limit evicts the older file (both names)");
	rq_cache_file_pin(c, &f[1], +1);   /* pinned before it exists */
	must_file(c, &f[1], a, N);
	EPUT(4);
	EPUT(5);
	EPUT(6);
	rq_cache_get_stats(c, &s);
	TAP_OK(exists(fb[1]) && exists(fs[1]) && !exists(ep[4]) && exists(ep[5]) && exists(ep[6]) &&
	       s.files == 1 && s.bytes <= 3 * N + N / 2,
	       "a pinned file, the least recently used, is skipped: younger entries go (evicted %llu)",
	       (unsigned long long)s.evicted);
	rq_cache_file_pin(c, &f[1], -1);
	EPUT(7);
	rq_cache_get_stats(c, &s);
	TAP_OK(!exists(fb[1]) && !exists(fs[1]) && exists(ep[5]) && s.files == 0 && s.file_bytes == 0,
	       "unpinned, it is evicted by the next put");
#undef EPUT
	rq_cache_close(c);
}

static void test_file_remove(const uint8_t *a)
{
	char dir[PATH_MAX], bin[PATH_MAX], sum[PATH_MAX], p[PATH_MAX];
	subdir("fremove", dir);
	struct rq_cache *c = open_at(dir, 0);
	struct rq_cache_key k = key("frm", 0), ke = key("frm", 1);
	struct rq_err e = { 0 };
	file_names(dir, &k, bin, sum);
	entry_path(dir, &ke, p);
	must_file(c, &k, a, 3000);
	must(rq_cache_put(c, &ke, a, 3000, &e) == 0, "put");
	TAP_OK(rq_cache_file_has(c, &k) == 1 && rq_cache_has(c, &ke) == 1 &&
	       rq_cache_has(c, &k) == 0 && rq_cache_file_has(c, &ke) == 0, "has / file_has");
	struct rq_cache_stats s;
	int r1 = rq_cache_file_remove(c, &k), r2 = rq_cache_remove(c, &ke);
	rq_cache_get_stats(c, &s);
	TAP_OK(r1 == 0 && r2 == 0 && !exists(bin) && !exists(sum) && !exists(p) && s.entries == 0 &&
	       s.files == 0 && s.bytes == 0, "remove and file_remove unlink and forget");
	TAP_OK(rq_cache_file_remove(c, &k) == -ENOENT && rq_cache_remove(c, &ke) == -ENOENT &&
	       rq_cache_file_has(c, &k) == 0 && rq_cache_has(c, &ke) == 0,
	       "removing again: -ENOENT; has: 0");
	rq_cache_close(c);
}

static void test_files(void)
{
	char dir[PATH_MAX];
	subdir("files", dir);
	size_t n = (3u << 20) + 12345;
	uint8_t *a = malloc(n);
	fill(a, n, 4242);
	test_file_round_trip(dir, a, n);
	size_t m = 300000;
	file_bad_case(dir, 0, "flipped data byte", fb_flip, "checksum", a, m);
	file_bad_case(dir, 1, "flipped data byte, mtime restored", fb_flip_keep, "checksum", a, m);
	file_bad_case(dir, 2, "data published without its sidecar (a crash)", fb_nosum, NULL, a, m);
	file_bad_case(dir, 3, "garbled sidecar key", fb_sumflip, "sidecar", a, m);
	file_bad_case(dir, 4, "garbled sidecar sum", fb_sumsum, "sidecar", a, m);
	file_bad_case(dir, 5, "short sidecar", fb_sumshort, "sidecar", a, m);
	file_bad_case(dir, 6, "data truncated by a byte", fb_trunc, "truncated or extended", a, m);
	file_bad_case(dir, 7, "data extended by a byte", fb_extend, "truncated or extended", a, m);
	file_plant(dir, 0, 1, a, m);
	file_plant(dir, 1, 0, a, m);
	test_file_crash_abort(dir, a, m);
	test_file_recheck(dir, a, m);
	test_file_enospc(a);
	test_file_evict(a);
	test_file_remove(a);
	free(a);
}

int main(void)
{
	const char *t = getenv("TMPDIR");
	pathf(root, sizeof root, "%s/rqcache-test.XXXXXX", t && *t ? t : "/tmp");
	if (!mkdtemp(root))
		TAP_SKIP_ALL("cannot create a temp directory under %s: %s", t ? t : "/tmp", strerror(errno));
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	test_keys();
	test_round_trip();
	test_corruption();
	test_lazy_sync();
	test_processes();
	test_threads();
	test_lru();
	test_enospc();
	test_unwritable();
	test_stale_tmp();
	test_hostile();
	test_files();
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("# %.2f s\n", (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9);
	char cmd[PATH_MAX + 16];
	pathf(cmd, sizeof cmd, "rm -rf '%s'", root);
	if (system(cmd) != 0)
		printf("# could not remove %s\n", root);
	return tap_done();
}
