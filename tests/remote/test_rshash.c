/* test_rshash.c — the in-order whole-file hash of the remote store
 * (remote/rshash.c) gives the verdict assembly gave when it read every file
 * back whole: chunks arriving in order (every byte hashed from the fetch
 * buffers, none read back), in reverse order (the early ones read back from
 * disk when chunk 0 comes), wrong bytes from the server in a chunk that came
 * first in order or out of order (the mismatch caught at assembly: dropped,
 * refetched once, then right), a store reopened mid-file (the chunks of the
 * first store read back through their block sums: today's fallback; wrong
 * bytes stored by it caught too), and a file dropped mid-hash. Every case
 * checks the assembled file byte for byte. TAP. Usage: test_rshash
 * HUB_FAULT_PY. */
#include "tests/remote/rs_test.h"
#include "tests/tap.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const uint64_t NA = (3 * 1024 * 1024 + 4567 + CS - 1) / CS;   /* FA's chunks: 13 */

static int file_equals(const char *path, int f)
{
	size_t n;
	char *s = path ? tap_slurp(path, &n) : NULL;
	int r = s && n == sizes[f] && !memcmp(s, data[f], n);
	free(s);
	return r;
}

/* Chunk c of file f is stored (its sum file published) in cache. */
static int sum_there(const char *cache, int f, uint64_t c)
{
	char p[700];
	struct stat st;
	snprintf(p, sizeof p, "%s/%s/remote/chunks/%s-%u/%016llx", tmp, cache, shas[f], CS,
	         (unsigned long long)c);
	return stat(p, &st) == 0;
}

/* Waits (5 s at most) until chunks [c0, c1] of f are stored: 1, else 0. */
static int wait_sums(const char *cache, int f, uint64_t c0, uint64_t c1)
{
	for (int k = 0; k < 500; k++) {
		uint64_t c = c0;
		while (c <= c1 && sum_there(cache, f, c))
			c++;
		if (c > c1)
			return 1;
		usleep(10000);
	}
	return 0;
}

static const char *wait_path(struct rq_rs *s, int f)
{
	for (int k = 0; k < 500 && !rq_rs_path(s, f); k++)
		usleep(10000);
	return rq_rs_path(s, f);
}

static struct rq_rs_stats stats(struct rq_rs *s)
{
	struct rq_rs_stats x;
	rq_rs_stats(s, &x);
	return x;
}

static void arm_wrong(int f)
{
	char q[128];
	snprintf(q, sizeof q, "set?wrong=1&wrong_file=%s", names[f]);
	ctl_do(q);
}

static void test_in_order(void)
{
	ctl_do("reset");
	struct rq_rs *s = open_store("inorder", 1, 0, 0, 0);   /* one connection: in order */
	struct rq_err e = {0};
	int rc = rq_rs_fetch_file(s, FA, NULL, NULL, &e);
	struct rq_rs_stats x = stats(s);
	TAP_OK(rc == 0 && file_equals(rq_rs_path(s, FA), FA), "in order: %s assembled right (rc %d %s)",
	       names[FA], rc, e.msg);
	TAP_OK(x.hashed_from_buffer == sizes[FA] && x.hashed_from_disk == 0,
	       "in order: every byte hashed from the fetch buffers (%llu), none read back (%llu)",
	       (unsigned long long)x.hashed_from_buffer, (unsigned long long)x.hashed_from_disk);
	TAP_OK(nranges() == (int)NA && x.refetches == 0, "in order: %d requests for %llu chunks",
	       nranges(), (unsigned long long)NA);
	rq_rs_close(s);

	/* wrong bytes in chunk 0, hashed from its buffer: caught at assembly */
	ctl_do("reset");
	arm_wrong(FA);
	s = open_store("inorder-wrong", 1, 0, 0, 0);
	memset(&e, 0, sizeof e);
	rc = rq_rs_fetch_file(s, FA, NULL, NULL, &e);
	x = stats(s);
	cJSON *st = ctl("stats");
	TAP_OK(rc == 0 && file_equals(rq_rs_path(s, FA), FA) && x.refetches == 1 &&
	       ranges_of(st, FA, -1) == 2 * (int)NA && log_has("dropped, fetching them again"),
	       "in order, wrong bytes in chunk 0: the mismatch caught, the file refetched once, "
	       "right (rc %d %s; %d requests)", rc, e.msg, ranges_of(st, FA, -1));
	cJSON_Delete(st);
	rq_rs_close(s);
}

/* Chunks n-1 .. 1 first, each stored before the next is asked for; then 0. */
static int reverse_but_first(struct rq_rs *s, const char *cache, int f, uint64_t n)
{
	int bad = 0;
	for (uint64_t c = n - 1; c >= 1; c--) {
		int rc = read_eq(s, f, c * CS, 10, 0, NULL);
		bad += (rc < 0) + !wait_sums(cache, f, c, c);
	}
	return bad;
}

static void test_out_of_order(void)
{
	ctl_do("reset");
	struct rq_rs *s = open_store("reverse", 4, 0, 0, 0);
	int bad = reverse_but_first(s, "reverse", FA, NA);
	struct rq_rs_stats x = stats(s);
	TAP_OK(!bad && x.hashed_from_buffer == 0 && x.hashed_from_disk == 0 && !rq_rs_path(s, FA),
	       "reverse order: chunks %llu..1 stored, nothing hashed (chunk 0 missing)",
	       (unsigned long long)NA - 1);
	TAP_OK(read_eq(s, FA, 0, 10, 0, NULL) == 0, "chunk 0 read");
	const char *p = wait_path(s, FA);
	x = stats(s);
	TAP_OK(p && file_equals(p, FA), "reverse order: assembled right once chunk 0 came");
	TAP_OK(x.hashed_from_buffer == CS && x.hashed_from_disk == sizes[FA] - CS,
	       "reverse order: chunk 0 hashed from its buffer (%llu), the rest read back (%llu)",
	       (unsigned long long)x.hashed_from_buffer, (unsigned long long)x.hashed_from_disk);
	rq_rs_close(s);

	/* wrong bytes in a chunk that came early (read back when 0 came) */
	ctl_do("reset");
	s = open_store("reverse-wrong", 4, 0, 0, 0);
	arm_wrong(FA);
	int rc5 = read_eq(s, FA, 5 * CS, 10, 0, NULL);   /* the store serves chunks unverified */
	ctl_do("reset");
	bad = !wait_sums("reverse-wrong", FA, 5, 5) + (rc5 != 1);
	struct rq_err e = {0};
	int rc = rq_rs_fetch_file(s, FA, NULL, NULL, &e);
	x = stats(s);
	cJSON *st = ctl("stats");
	TAP_OK(!bad && rc == 0 && file_equals(rq_rs_path(s, FA), FA) && x.refetches == 1 &&
	       ranges_of(st, FA, 5) == 1 && log_has("dropped, fetching them again"),
	       "wrong bytes in chunk 5, stored before chunk 0: the mismatch caught, refetched, "
	       "right (rc %d %s; chunk 5 asked again %d times)", rc, e.msg, ranges_of(st, FA, 5));
	cJSON_Delete(st);
	rq_rs_close(s);
}

static void test_reopened(void)
{
	ctl_do("reset");
	struct rq_rs *s = open_store("reopen", 4, 0, 0, 0);
	int bad = read_eq(s, FA, 0, 6 * CS, 0, NULL) != 0;
	bad += !wait_sums("reopen", FA, 0, 5);
	rq_rs_close(s);
	ctl_do("reset");
	s = open_store("reopen", 4, 0, 0, 0);
	struct rq_err e = {0};
	int rc = rq_rs_fetch_file(s, FA, NULL, NULL, &e);
	struct rq_rs_stats x = stats(s);
	TAP_OK(!bad && rc == 0 && file_equals(rq_rs_path(s, FA), FA),
	       "reopened mid-file (chunks 0-5 stored by the first store): assembled right (rc %d %s)",
	       rc, e.msg);
	TAP_OK(x.hashed_from_disk >= 6 * CS && nranges() == (int)NA - 6,
	       "reopened: the first store's chunks read back through their sums (%llu bytes), "
	       "only the %d missing fetched", (unsigned long long)x.hashed_from_disk, nranges());
	rq_rs_close(s);

	/* the first store stored wrong bytes (chunk 2), then closed */
	ctl_do("reset");
	s = open_store("reopen-wrong", 4, 0, 0, 0);
	read_eq(s, FA, 0, CS, 0, NULL);
	arm_wrong(FA);
	int rc2 = read_eq(s, FA, 2 * CS, 10, 0, NULL);
	ctl_do("reset");
	bad = (rc2 != 1) + !wait_sums("reopen-wrong", FA, 0, 0) +
	      !wait_sums("reopen-wrong", FA, 2, 2);
	rq_rs_close(s);
	s = open_store("reopen-wrong", 4, 0, 0, 0);
	memset(&e, 0, sizeof e);
	rc = rq_rs_fetch_file(s, FA, NULL, NULL, &e);
	x = stats(s);
	cJSON *st = ctl("stats");
	TAP_OK(!bad && rc == 0 && file_equals(rq_rs_path(s, FA), FA) && x.refetches == 1 &&
	       ranges_of(st, FA, 2) == 1 && log_has("dropped, fetching them again"),
	       "reopened over wrong bytes of the first store: the mismatch caught, refetched, "
	       "right (rc %d %s; chunk 2 asked again %d times)", rc, e.msg, ranges_of(st, FA, 2));
	cJSON_Delete(st);
	rq_rs_close(s);
}

static void test_drop_mid(void)
{
	ctl_do("reset");
	struct rq_rs *s = open_store("dropmid", 2, 0, 0, 0);
	int bad = read_eq(s, FA, 0, 4 * CS, 0, NULL) != 0;
	bad += !wait_sums("dropmid", FA, 0, 3);
	struct rq_rs_stats x0 = stats(s);
	rq_rs_drop(s, FA);                       /* hashed chunks gone: the hash starts again */
	struct rq_err e = {0};
	int rc = rq_rs_fetch_file(s, FA, NULL, NULL, &e);
	TAP_OK(!bad && x0.hashed_from_buffer + x0.hashed_from_disk > 0 && rc == 0 &&
	       file_equals(rq_rs_path(s, FA), FA) && stats(s).refetches == 0,
	       "dropped after %llu bytes were hashed, fetched again: assembled right (rc %d %s)",
	       (unsigned long long)(x0.hashed_from_buffer + x0.hashed_from_disk), rc, e.msg);
	rq_rs_close(s);
}

/* Two stores sharing a cache: store b holds chunks 0..n-2 of a file (hashed
 * from its buffers); store a fetches the file whole, assembles and publishes
 * it (its chunk directory, data and sums, removed); then b fetches the last
 * chunk, which lands in a new, sparse data file: b's hash is right (its
 * buffers), but the data it would publish holds only that chunk. The
 * published file must stay the right bytes, and b must serve right bytes. */
static void test_shared_publish(void)
{
	ctl_do("reset");
	uint64_t n = (sizes[FB] + CS - 1) / CS, last = (n - 1) * CS;
	struct rq_rs *a = open_store("sharepub", 2, 0, 0, 0), *b = open_store("sharepub", 2, 0, 0, 0);
	int bad = read_eq(b, FB, 0, last, 0, NULL) != 0;
	bad += !wait_sums("sharepub", FB, 0, n - 2);
	struct rq_err e = {0};
	int rc = rq_rs_fetch_file(a, FB, NULL, NULL, &e);
	const char *pa = rq_rs_path(a, FB);
	char path[700];
	snprintf(path, sizeof path, "%s", pa ? pa : "(none)");
	int first = rc == 0 && pa && file_equals(pa, FB);
	int rb = read_eq(b, FB, last, sizes[FB] - last, 0, NULL);
	struct rq_err e2 = {0};
	int rc2 = rq_rs_fetch_file(b, FB, NULL, NULL, &e2);
	const char *pb = rq_rs_path(b, FB);
	TAP_OK(!bad && first && rb == 0 && file_equals(path, FB),
	       "store a published %s while store b held chunks 0-%llu; b fetched the last chunk "
	       "after: the published file is still right (rc %d %s; b's read %d)", names[FB],
	       (unsigned long long)(n - 2), rc, e.msg, rb);
	TAP_OK(rc2 == 0 && pb && !strcmp(pb, path) && file_equals(pb, FB) &&
	       read_eq(b, FB, 0, sizes[FB], 0, NULL) == 0,
	       "and store b serves that file: its path, right bytes whole (rc %d %s)", rc2, e2.msg);
	rq_rs_close(a);
	rq_rs_close(b);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: test_rshash HUB_FAULT_PY\n");
		return 2;
	}
	if (rs_setup(argv[1]))
		return 1;
	test_in_order();
	test_out_of_order();
	test_reopened();
	test_drop_mid();
	test_shared_publish();
	rs_teardown();
	if (!tap_failed)
		tap_rmtree(tmp);
	else
		printf("# kept %s\n", tmp);
	return tap_done();
}
