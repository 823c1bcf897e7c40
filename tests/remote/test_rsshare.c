/* test_rsshare.c — stores sharing one cache directory (remote/rsshare.c):
 * while another store is live on the cache, assembly reads the file back
 * from disk before publishing it (verified_from_disk), so bytes another
 * store wrote over a chunk this one hashed from its buffer are caught (the
 * attack: store b fetches wrong bytes for a chunk store a already hashed);
 * alone on the cache, the fast path (counter 0); a registration nobody
 * holds is stale: removed, not counted; one held by another process is
 * live. Every case checks the published file byte for byte. TAP. Usage:
 * test_rsshare HUB_FAULT_PY. */
#include "tests/remote/rs_test.h"
#include "tests/tap.h"

#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static int file_equals(const char *path, int f)
{
	size_t n;
	char *s = path ? tap_slurp(path, &n) : NULL;
	int r = s && n == sizes[f] && !memcmp(s, data[f], n);
	free(s);
	return r;
}

static struct rq_rs_stats stats(struct rq_rs *s)
{
	struct rq_rs_stats x;
	rq_rs_stats(s, &x);
	return x;
}

static int fetch(struct rq_rs *s, int f, struct rq_err *e)
{
	memset(e, 0, sizeof *e);
	return rq_rs_fetch_file(s, f, NULL, NULL, e);
}

/* (1) two stores open on one cache: the read-back path, right bytes */
static void test_two_open(void)
{
	ctl_do("reset");
	struct rq_rs *a = open_store("two", 2, 0, 0, 0), *b = open_store("two", 2, 0, 0, 0);
	int regs = dir_entries("two/remote/stores");
	struct rq_err e;
	int rc = fetch(a, FB, &e);
	struct rq_rs_stats x = stats(a);
	TAP_OK(regs == 2 && rc == 0 && file_equals(rq_rs_path(a, FB), FB) &&
	       x.verified_from_disk == 1 && x.refetches == 0,
	       "two stores open on one cache (%d registered): assembly read the file back "
	       "(verified_from_disk %llu), right bytes (rc %d %s)", regs,
	       (unsigned long long)x.verified_from_disk, rc, e.msg);
	rq_rs_close(b);
	rc = fetch(a, FA, &e);
	x = stats(a);
	TAP_OK(rc == 0 && file_equals(rq_rs_path(a, FA), FA) && x.verified_from_disk == 1,
	       "the other closed: the next file takes the fast path (verified_from_disk still "
	       "%llu; rc %d %s)", (unsigned long long)x.verified_from_disk, rc, e.msg);
	rq_rs_close(a);
	TAP_OK(dir_entries("two/remote/stores") == 0, "both closed: no registration left (%d)",
	       dir_entries("two/remote/stores"));
}

/* Byte off of f's sparse data file in cache (-1: none). */
static int data_byte(const char *cache, int f, uint64_t off)
{
	char p[700];
	snprintf(p, sizeof p, "%s/%s/remote/chunks/%s-%u/data", tmp, cache, shas[f], CS);
	int fd = open(p, O_RDONLY);
	unsigned char c;
	int r = fd >= 0 && pread(fd, &c, 1, (off_t)off) == 1 ? c : -1;
	if (fd >= 0)
		close(fd);
	return r;
}

/* (2) the attack: a hashes chunks 0..n-2 of FA from its buffers; b (open,
 * so the cache is shared) fetches chunk 1 from a bad mirror and writes its
 * wrong bytes (and their sums) over a's; a then fetches the rest and
 * assembles: it must not publish those bytes. */
static void test_attack(void)
{
	ctl_do("reset");
	uint64_t n = (sizes[FA] + CS - 1) / CS;
	struct rq_rs *a = open_store("attack", 1, 0, 0, 0), *b = open_store("attack", 1, 0, 0, 0);
	int bad = read_eq(a, FA, 0, (n - 1) * CS, 0, NULL) != 0;
	for (int k = 0; k < 500 && stats(a).hashed_from_buffer < (n - 1) * CS; k++)
		usleep(10000);
	struct rq_rs_stats x0 = stats(a);
	char q[128];
	snprintf(q, sizeof q, "set?wrong=1&wrong_file=%s", names[FA]);
	ctl_do(q);
	int rb = read_eq(b, FA, CS, 10, 0, NULL);   /* 1: b was served wrong bytes */
	ctl_do("reset");
	int over = 0;                            /* b's bytes landed over a's chunk 1 */
	for (int k = 0; k < 500 && !over; k++) {
		int c = data_byte("attack", FA, CS);
		over = c >= 0 && c != data[FA][CS];
		if (!over)
			usleep(10000);
	}
	usleep(100000);                          /* (b's sum file renamed just after) */
	struct rq_err e;
	int rc = fetch(a, FA, &e);
	struct rq_rs_stats x = stats(a);
	TAP_OK(!bad && x0.hashed_from_buffer == (n - 1) * CS && rb == 1 && over,
	       "a hashed chunks 0-%llu from its buffers (%llu bytes); b wrote wrong bytes over "
	       "chunk 1 in the shared data (b read %d, on disk %d)", (unsigned long long)(n - 2),
	       (unsigned long long)x0.hashed_from_buffer, rb, over);
	TAP_OK(rc == 0 && file_equals(rq_rs_path(a, FA), FA) && x.verified_from_disk >= 1 &&
	       x.refetches >= 1,
	       "a read the file back, caught the bytes b changed, refetched: the published file "
	       "is right (rc %d %s; verified_from_disk %llu, refetches %llu; logged: %.300s)", rc,
	       e.msg, (unsigned long long)x.verified_from_disk, (unsigned long long)x.refetches,
	       logbuf_tail());
	rq_rs_close(b);
	rq_rs_close(a);

	/* alone on a cache: the fast path, nothing read back */
	ctl_do("reset");
	a = open_store("attack-alone", 1, 0, 0, 0);
	rc = fetch(a, FA, &e);
	x = stats(a);
	TAP_OK(rc == 0 && file_equals(rq_rs_path(a, FA), FA) && x.verified_from_disk == 0 &&
	       x.hashed_from_buffer == sizes[FA],
	       "alone on its cache: the fast path (verified_from_disk %llu, %llu bytes hashed "
	       "from buffers; rc %d %s)", (unsigned long long)x.verified_from_disk,
	       (unsigned long long)x.hashed_from_buffer, rc, e.msg);
	rq_rs_close(a);
}

/* (3) a stale registration (nobody holds it) is removed and does not make
 * the cache shared; one another process holds locked does */
static void test_stale(void)
{
	ctl_do("reset");
	char d[600], p[700];
	int made = 1;
	for (int k = 0; k < 3; k++) {
		snprintf(d, sizeof d, "%s/stale%s", tmp, k == 0 ? "" : k == 1 ? "/remote" :
		         "/remote/stores");
		made &= mkdir(d, 0755) == 0;
	}
	snprintf(p, sizeof p, "%s/deadhost-1-00000000000000ff", d);
	int fd = open(p, O_RDWR | O_CREAT, 0644);
	made = made && fd >= 0;
	if (fd >= 0)
		close(fd);
	struct rq_rs *a = open_store("stale", 2, 0, 0, 0);
	struct rq_err e;
	int rc = fetch(a, FB, &e);
	struct rq_rs_stats x = stats(a);
	struct stat sb;
	TAP_OK(made && rc == 0 && file_equals(rq_rs_path(a, FB), FB) &&
	       x.verified_from_disk == 0 && stat(p, &sb) != 0,
	       "a stale registration: removed (%s), the fast path taken (verified_from_disk "
	       "%llu; rc %d %s)", stat(p, &sb) ? "gone" : "still there",
	       (unsigned long long)x.verified_from_disk, rc, e.msg);

	/* a registration held locked (as by a live store elsewhere): shared */
	snprintf(p, sizeof p, "%s/otherhost-2-00000000000000aa", d);
	fd = open(p, O_RDWR | O_CREAT, 0644);
	int held = fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0;
	rc = fetch(a, FA, &e);
	x = stats(a);
	TAP_OK(held && rc == 0 && file_equals(rq_rs_path(a, FA), FA) &&
	       x.verified_from_disk == 1 && stat(p, &sb) == 0,
	       "a registration held by another: the cache is shared, the file read back "
	       "(verified_from_disk %llu), the entry left alone (rc %d %s)",
	       (unsigned long long)x.verified_from_disk, rc, e.msg);
	if (fd >= 0)
		close(fd);
	rq_rs_close(a);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: test_rsshare HUB_FAULT_PY\n");
		return 2;
	}
	if (rs_setup(argv[1]))
		return 1;
	test_two_open();
	test_attack();
	test_stale();
	rs_teardown();
	if (!tap_failed)
		tap_rmtree(tmp);
	else
		printf("# kept %s\n", tmp);
	return tap_done();
}
