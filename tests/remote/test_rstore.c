/* test_rstore.c — remote/rstore.h against a local hub that misbehaves on
 * demand (hub_fault.py: resolve -> 302 -> a second "CDN" port, 206 ranges,
 * faults armed through /_ctl/). Bytes equal the files; many threads on
 * random ranges; one request per chunk however many readers; readahead;
 * RQ_RS_NOKEEP stores nothing and asks for exactly the range; assembly
 * checked by SHA-256 (wrong bytes once: refetched; always: -EIO); a second
 * store over the same cache fetches nothing; offline serves what is cached
 * and refuses the rest; a corrupt chunk on disk is refetched; drops, 500,
 * 429, stalls, short bodies retried; a 200 ignoring Range refused; close
 * with fetches in flight returns within a second; mem_max respected.
 * TAP. Usage: test_rstore HUB_FAULT_PY (python3 on PATH, or $RQ_PYTHON). */
#include "tests/remote/rs_test.h"
#include "tests/tap.h"
#include "remote/chunk.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include <errno.h>
#include <pthread.h>
#include <sys/mount.h>
#include <sys/stat.h>

struct reader {
	struct rq_rs *s;
	int f, n, rc_bad, wrong;
	uint64_t seed, off, len;       /* n == 0: one read of [off, off + len) */
	int last_rc;
};

static void *reader_main(void *v)
{
	struct reader *r = v;
	if (!r->n) {
		struct rq_err e;
		r->last_rc = read_eq(r->s, r->f, r->off, r->len, 0, &e);
		return NULL;
	}
	for (int i = 0; i < r->n; i++) {
		uint64_t off = tap_xorshift64(&r->seed) % sizes[r->f];
		uint64_t len = 1 + tap_xorshift64(&r->seed) % (600 * 1024);
		if (len > sizes[r->f] - off)
			len = sizes[r->f] - off;
		int rc = read_eq(r->s, r->f, off, len, 0, NULL);
		r->wrong += rc == 1;
		r->rc_bad += rc < 0;
	}
	return NULL;
}

static int run_readers(struct reader *r, int n)
{
	pthread_t t[32];
	for (int i = 0; i < n; i++)
		pthread_create(&t[i], NULL, reader_main, &r[i]);
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	int bad = 0;
	for (int i = 0; i < n; i++)
		bad += r[i].wrong + r[i].rc_bad + (r[i].last_rc != 0);
	return bad;
}

static int file_equals(const char *path, int f)
{
	size_t n;
	char *s = path ? tap_slurp(path, &n) : NULL;
	int r = s && n == sizes[f] && !memcmp(s, data[f], n);
	free(s);
	return r;
}

static uint64_t prog_last;
static int prog_calls;

static void on_progress(void *ctx, uint64_t b)
{
	(void)ctx;
	prog_last = b;
	prog_calls++;
}

static void test_basic_and_cache(void)
{
	ctl_do("reset");
	struct rq_rs *s = open_store("main", 4, 0, 0, 0);
	uint64_t seed = 7;
	int bad = 0;
	for (int i = 0; i < 30; i++) {
		uint64_t off = tap_xorshift64(&seed) % sizes[FA], len = 1 + tap_xorshift64(&seed) % 70000;
		if (len > sizes[FA] - off)
			len = sizes[FA] - off;
		bad += read_eq(s, FA, off, len, 0, NULL) != 0;
	}
	TAP_OK(!bad, "30 random reads of %s equal the file", names[FA]);
	cJSON *st = ctl("stats");
	int dup = 0;
	for (long c = 0; c * CS < sizes[FA]; c++)
		dup += ranges_of(st, FA, c) > 1;
	cJSON_Delete(st);
	TAP_OK(!dup, "every chunk fetched at most once (%d chunks fetched twice)", dup);
	TAP_OK(read_eq(s, FB, 0, 1000, 0, NULL) == 0 && read_eq(s, FB, CS - 10, 20, 0, NULL) == 0,
	       "reads of %s (chunks 0 and 1, one across their border)", names[FB]);
	int okc = read_eq(s, FC, 0, sizes[FC], 0, NULL) == 0;
	for (int i = 0; i < 200 && !rq_rs_path(s, FC); i++)
		usleep(10000);                    /* the worker assembles it after the read */
	TAP_OK(okc && rq_rs_path(s, FC),
	       "config.json (one chunk, blob id): read whole, then assembled (%s)",
	       rq_rs_path(s, FC) ? rq_rs_path(s, FC) : "no path");
	TAP_OK(!rq_rs_path(s, FA), "a file read in part has no assembled path");
	prog_calls = 0;
	struct rq_err e = {0};
	int rc = rq_rs_fetch_file(s, FA, on_progress, NULL, &e);
	TAP_OK(rc == 0 && prog_last == sizes[FA] && prog_calls >= 2,
	       "fetch_file %s: rc %d, progress %llu (%d calls) %s", names[FA], rc,
	       (unsigned long long)prog_last, prog_calls, e.msg);
	TAP_OK(file_equals(rq_rs_path(s, FA), FA), "its assembled file equals the source, at %s",
	       rq_rs_path(s, FA) ? rq_rs_path(s, FA) : "(none)");
	char rel[200];
	snprintf(rel, sizeof rel, "main/remote/chunks/%s-%u", shas[FA], CS);
	TAP_OK(dir_entries(rel) == 0, "its chunks are gone after assembly (%d left)",
	       dir_entries(rel));
	st = ctl("stats");
	dup = 0;
	for (long c = 0; c * CS < sizes[FA]; c++)
		dup += ranges_of(st, FA, c) != 1;
	cJSON_Delete(st);
	TAP_OK(!dup, "fetch_file fetched only the missing chunks, each once");
	TAP_OK(read_eq(s, FA, 12345, 2 * CS, 0, NULL) == 0, "reads now come from the assembled file");
	struct rq_rs_stats ss;
	rq_rs_stats(s, &ss);
	TAP_OK(ss.fetched_chunks == (sizes[FA] + CS - 1) / CS + 2 + 1 && ss.bytes_on_disk > sizes[FA],
	       "stats: %llu chunks fetched, %llu bytes on disk, %llu hits",
	       (unsigned long long)ss.fetched_chunks, (unsigned long long)ss.bytes_on_disk,
	       (unsigned long long)ss.cached_hits);
	rq_rs_close(s);

	/* a second store over the same cache: nothing fetched again */
	ctl_do("reset");
	s = open_store("main", 4, -1, 0, 0);
	TAP_OK(rq_rs_path(s, FA) && rq_rs_path(s, FC), "a second store finds the assembled files");
	bad = read_eq(s, FA, 0, sizes[FA], 0, NULL) + read_eq(s, FB, 0, 2 * CS, 0, NULL) +
	      read_eq(s, FC, 0, sizes[FC], 0, NULL);
	TAP_OK(!bad, "it reads them and %s's cached chunks", names[FB]);
	/* readahead may have started on B's chunks 2-5: only they may have been asked for */
	usleep(300000);
	st = ctl("stats");
	int other = 0;
	cJSON *x;
	cJSON_ArrayForEach(x, cJSON_GetObjectItem(st, "ranges"))
		other += strcmp(cJSON_GetArrayItem(x, 0)->valuestring, names[FB]) ||
		         cJSON_GetArrayItem(x, 1)->valuedouble < 2.0 * CS;
	cJSON_Delete(st);
	TAP_OK(other == 0, "the second store fetched nothing it had (%d requests beyond readahead)",
	       other);
	rq_rs_close(s);

	/* offline: the cache only */
	ctl_do("reset");
	s = open_store("main", 4, -1, 0, 1);
	TAP_OK(read_eq(s, FA, 100, 5000, 0, NULL) == 0 && read_eq(s, FB, 10, 1000, 0, NULL) == 0,
	       "offline: cached bytes are served");
	memset(&e, 0, sizeof e);
	uint8_t b[100];
	rc = rq_rs_read(s, FB, 7 * CS, sizeof b, b, 0, &e);
	TAP_OK(rc == -ENETUNREACH && strstr(e.msg, "HF_HUB_OFFLINE") && strstr(e.msg, names[FB]),
	       "offline: a missing chunk fails -ENETUNREACH naming the file (%d: %s)", rc, e.msg);
	rc = rq_rs_fetch_file(s, FB, NULL, NULL, &e);
	TAP_OK(rc == -ENETUNREACH, "offline: fetch_file of a partial file fails -ENETUNREACH (%d)", rc);
	TAP_OK(nranges() == 0, "offline: the server saw no request");
	rq_rs_close(s);

	/* a corrupt chunk on disk is dropped and refetched */
	char p[600];
	snprintf(p, sizeof p, "%s/main/remote/chunks/%s-%u/data", tmp, shas[FB], CS);
	FILE *fp = fopen(p, "r+b");
	int c = -1;
	if (fp) {                                 /* byte 77 of the file: chunk 0, block 0 */
		fseek(fp, 77, SEEK_SET);
		c = fgetc(fp);
		fseek(fp, 77, SEEK_SET);
		fputc(c ^ 0x55, fp);
		fclose(fp);
	}
	TAP_OK(c >= 0, "corrupted a byte of %s", p);
	ctl_do("reset");
	s = open_store("main", 4, 0, 0, 0);
	TAP_OK(read_eq(s, FB, 50, 100, 0, NULL) == 0, "the corrupt chunk is never served");
	rq_rs_stats(s, &ss);
	st = ctl("stats");
	TAP_OK(ss.refetches == 1 && ranges_of(st, FB, 0) == 1 && log_has("corrupt"),
	       "it was refetched once and logged (refetches %llu)", (unsigned long long)ss.refetches);
	cJSON_Delete(st);

	/* a chunk gone bad on disk found by assembly: that chunk refetched. A
	 * store that hashed the chunk as it came does not read it back (the
	 * in-order hash, rstore.c); a store opened after (this one) reads every
	 * chunk already there back through its block sums. */
	rq_rs_close(s);
	rq_rs_stats(s = open_store("main", 4, 0, 0, 0), &ss);
	fp = fopen(p, "r+b");
	c = -1;
	if (fp) {                                 /* chunk 1, its second block */
		fseek(fp, CS + 70000, SEEK_SET);
		c = fgetc(fp);
		fseek(fp, CS + 70000, SEEK_SET);
		fputc(c ^ 0x01, fp);
		fclose(fp);
	}
	ctl_do("reset");
	memset(&e, 0, sizeof e);
	rc = rq_rs_fetch_file(s, FB, NULL, NULL, &e);
	struct rq_rs_stats s2;
	rq_rs_stats(s, &s2);
	st = ctl("stats");
	int right = file_equals(rq_rs_path(s, FB), FB);
	TAP_OK(c >= 0 && rc == 0 && right && s2.refetches == ss.refetches + 1 &&
	       ranges_of(st, FB, 1) == 1,
	       "assembly finds a chunk bad on disk: it alone is refetched, the file right (rc %d "
	       "%s; file right %d; %llu refetches; chunk 1 asked %d times; logged: %.300s)", rc,
	       e.msg, right, (unsigned long long)(s2.refetches - ss.refetches),
	       ranges_of(st, FB, 1), logbuf_tail());
	cJSON_Delete(st);

	/* drop: the file and its chunks go; a read fetches again */
	char ap[600];
	snprintf(ap, sizeof ap, "%s", rq_rs_path(s, FB) ? rq_rs_path(s, FB) : "");
	rq_rs_stats(s, &ss);
	rq_rs_drop(s, FB);
	rq_rs_stats(s, &s2);
	struct stat sb;
	TAP_OK(!rq_rs_path(s, FB) && *ap && stat(ap, &sb) != 0 &&
	       ss.bytes_on_disk - s2.bytes_on_disk == sizes[FB],
	       "drop: no path, the file deleted, %llu bytes less on disk",
	       (unsigned long long)(ss.bytes_on_disk - s2.bytes_on_disk));
	ctl_do("reset");
	TAP_OK(read_eq(s, FB, CS + 3, 100, 0, NULL) == 0 && nranges() == 1,
	       "after drop a read fetches its chunk again");
	rq_rs_close(s);
}

static void test_concurrency(void)
{
	ctl_do("reset");
	ctl_do("set?delay_ms=300");
	struct rq_rs *s = open_store("dedupe", 8, 0, 0, 0);
	struct reader r[16];
	for (int i = 0; i < 16; i++)
		r[i] = (struct reader){.s = s, .f = FA, .off = 3 * CS + 100 + 37 * i, .len = 1000};
	int bad = run_readers(r, 16);
	cJSON *st = ctl("stats");
	TAP_OK(!bad && ranges_of(st, FA, 3) == 1 && ranges_of(st, FA, -1) == 1,
	       "16 readers of one chunk: one request (%d), all bytes right", ranges_of(st, FA, 3));
	cJSON_Delete(st);
	rq_rs_close(s);

	ctl_do("reset");
	ctl_do("set?delay_ms=20");
	s = open_store("conc", 6, -1, 0, 0);
	for (int i = 0; i < 8; i++)
		r[i] = (struct reader){.s = s, .f = i % 2 ? FA : FF, .n = 25, .seed = 1000 + i};
	bad = run_readers(r, 8);
	st = ctl("stats");
	int dup = 0;
	for (long c = 0; c * CS < sizes[FA]; c++)
		dup += ranges_of(st, FA, c) > 1;
	for (long c = 0; c * CS < sizes[FF]; c++)
		dup += ranges_of(st, FF, c) > 1;
	TAP_OK(!bad && !dup, "8 threads x 25 random reads of 2 files: all bytes right (%d bad), "
	       "no chunk fetched twice (%d)", bad, dup);
	TAP_OK(cJSON_GetObjectItem(st, "maxconc")->valueint > 1,
	       "requests ran in parallel (at most %d at once)",
	       cJSON_GetObjectItem(st, "maxconc")->valueint);
	cJSON_Delete(st);
	rq_rs_close(s);
	/* the chunks on disk, read back at every alignment (block edges, chunk ends) */
	s = open_store("conc", 2, 0, 0, 1);
	uint64_t seed = 99;
	int good = 0, wrong = 0, other = 0;
	for (int i = 0; i < 400; i++) {
		int f = i % 3 ? FF : FA;                   /* FA: a short last chunk and block */
		uint64_t off = tap_xorshift64(&seed) % sizes[f];
		uint64_t len = 1 + tap_xorshift64(&seed) % (i % 2 ? 300 * 1024 : 70 * 1024);
		if (i % 7 == 0)
			off = off / (64 * 1024) * (64 * 1024);   /* on a block edge */
		if (i % 11 == 0)
			len = sizes[f] - off;                    /* to the end of the file */
		if (len > sizes[f] - off)
			len = sizes[f] - off;
		struct rq_err e;
		int rc = read_eq(s, f, off, len, 0, &e);
		good += rc == 0;
		wrong += rc == 1;
		other += rc != 0 && rc != 1 && rc != -ENETUNREACH;
	}
	TAP_OK(good > 50 && !wrong && !other, "400 random reads of 2 files' stored chunks (offline): "
	       "%d served, all bytes right (%d wrong, %d other errors)", good, wrong, other);
	rq_rs_close(s);
	/* a short last chunk (and block) read back from its sums, the file not whole */
	uint64_t last = (sizes[FA] - 1) / CS * CS;
	s = open_store("tail", 2, 0, 0, 0);
	int okt = read_eq(s, FA, last + 1, 10, 0, NULL) == 0 && !rq_rs_path(s, FA);
	rq_rs_close(s);
	s = open_store("tail", 2, 0, 0, 1);
	wrong = other = 0;
	for (int i = 0; i < 200; i++) {
		uint64_t off = last + tap_xorshift64(&seed) % (sizes[FA] - last);
		uint64_t len = 1 + tap_xorshift64(&seed) % (sizes[FA] - off);
		int rc = read_eq(s, FA, off, i % 5 ? len : sizes[FA] - off, 0, NULL);
		wrong += rc == 1;
		other += rc < 0;
	}
	TAP_OK(okt && !wrong && !other, "200 reads of a stored short last chunk (%llu bytes): "
	       "all right (%d wrong, %d errors)", (unsigned long long)(sizes[FA] - last), wrong,
	       other);
	rq_rs_close(s);
}

static void test_readahead(void)
{
	ctl_do("reset");
	struct rq_rs *s = open_store("readahead", 4, 3, 0, 0);
	TAP_OK(read_eq(s, FA, 0, 1000, 0, NULL) == 0, "a read at offset 0");
	int got = 0;
	for (int i = 0; i < 100 && got < 4; i++) {
		cJSON *st = ctl("stats");
		got = ranges_of(st, FA, -1);
		cJSON_Delete(st);
		usleep(30000);
	}
	usleep(200000);
	cJSON *st = ctl("stats");
	TAP_OK(ranges_of(st, FA, 1) == 1 && ranges_of(st, FA, 2) == 1 && ranges_of(st, FA, 3) == 1 &&
	       ranges_of(st, FA, 4) == 0, "readahead 3: chunks 1-3 fetched, chunk 4 not (%d ranges)",
	       ranges_of(st, FA, -1));
	cJSON_Delete(st);
	ctl_do("reset");
	int okr = read_eq(s, FA, 1000, 3 * CS, 0, NULL) == 0;
	st = ctl("stats");
	int again = 0;
	for (long c = 0; c < 4; c++)
		again += ranges_of(st, FA, c);
	cJSON_Delete(st);
	TAP_OK(okr && !again, "the sequential read that follows is served from the chunks read "
	       "ahead (%d of chunks 0-3 asked again)", again);
	rq_rs_close(s);

	/* A readahead mask (a mount's chunks that hold presented bytes): chunk
	 * 2 holds only requantized weights, so readahead never fetches it. */
	ctl_do("reset");
	s = open_store("readahead-mask", 4, 3, 0, 0);
	uint8_t want[64];
	memset(want, 1, sizeof want);
	want[2] = 0;
	TAP_OK(rq_rs_set_readahead_mask(s, FA, want) == 0, "readahead mask set");
	TAP_OK(read_eq(s, FA, 0, 1000, 0, NULL) == 0, "a read at offset 0 (mask: not chunk 2)");
	for (int i = 0; i < 100 && nranges() < 3; i++)
		usleep(30000);
	usleep(200000);
	st = ctl("stats");
	TAP_OK(ranges_of(st, FA, 1) == 1 && ranges_of(st, FA, 2) == 0 && ranges_of(st, FA, 3) == 1,
	       "readahead 3 with chunk 2 masked: chunks 1 and 3 fetched, 2 not (%d %d %d)",
	       ranges_of(st, FA, 1), ranges_of(st, FA, 2), ranges_of(st, FA, 3));
	cJSON_Delete(st);
	/* RQ_RS_NORA (a job reading through a kept chunk): no readahead */
	ctl_do("reset");
	okr = read_eq(s, FA, 6 * CS, 1000, RQ_RS_NORA, NULL) == 0;
	okr &= read_eq(s, FA, 6 * CS + 1000, 1000, RQ_RS_NORA, NULL) == 0;
	usleep(300000);
	st = ctl("stats");
	int ahead = 0;
	for (long c = 7; c < 12; c++)
		ahead += ranges_of(st, FA, c);
	TAP_OK(okr && ranges_of(st, FA, 6) == 1 && !ahead, "RQ_RS_NORA reads: chunk 6 fetched, "
	       "nothing read ahead (%d ranges beyond it)", ahead);
	cJSON_Delete(st);
	rq_rs_close(s);

	/* RQ_RS_NOKEEP: exactly the range, nothing stored */
	ctl_do("reset");
	s = open_store("nokeep", 4, 0, 0, 0);
	TAP_OK(read_eq(s, FD, 1000, 600000, RQ_RS_NOKEEP, NULL) == 0, "a NOKEEP read of 600000 bytes");
	st = ctl("stats");
	cJSON *rg = cJSON_GetObjectItem(st, "ranges");
	int n = cJSON_GetArraySize(rg);
	double lo = 1e18, hi = 0, sum = 0;
	for (int i = 0; i < n; i++) {
		cJSON *x = cJSON_GetArrayItem(rg, i);
		if (strcmp(cJSON_GetArrayItem(x, 0)->valuestring, names[FD])) {
			n = -1;   /* another file: not ours */
			break;
		}
		double a = cJSON_GetArrayItem(x, 1)->valuedouble, b = cJSON_GetArrayItem(x, 2)->valuedouble;
		lo = a < lo ? a : lo;
		hi = b > hi ? b : hi;
		sum += b - a + 1;
	}
	TAP_OK(n == 3 && lo == 1000 && hi == 600999 && sum == 600000,
	       "it asked for exactly bytes 1000-600999, in %d pieces (one per chunk)", n);
	cJSON_Delete(st);
	struct rq_rs_stats ss;
	rq_rs_stats(s, &ss);
	TAP_OK(ss.bytes_on_disk == 0 && dir_entries("nokeep/remote/chunks") == 0,
	       "NOKEEP stored nothing (%llu bytes on disk)", (unsigned long long)ss.bytes_on_disk);
	ctl_do("reset");
	TAP_OK(read_eq(s, FA, 0, 10, 0, NULL) == 0 && read_eq(s, FA, 5, 5000, RQ_RS_NOKEEP, NULL) == 0
	       && nranges() == 1, "a NOKEEP read of a cached chunk fetches nothing more");
	rq_rs_close(s);
}

static void test_faults(void)
{
	static const char *fault[] = {"drop", "e500", "e429", "stall", "short"};
	struct rq_rs *s = open_store("faults", 4, 0, 0, 0);
	for (int i = 0; i < 5; i++) {
		char q[64];
		ctl_do("reset");
		snprintf(q, sizeof q, "set?%s=1", fault[i]);
		ctl_do(q);
		struct rq_rs_stats a, b;
		rq_rs_stats(s, &a);
		double t0 = now_s();
		int rc = read_eq(s, FE, (uint64_t)i * CS + 5, 1000, 0, NULL);
		double t = now_s() - t0;
		rq_rs_stats(s, &b);
		TAP_OK(rc == 0 && b.retries > a.retries && stat_num("faults_served") == 1,
		       "%s: retried (%llu retries) and the bytes are right, in %.1f s", fault[i],
		       (unsigned long long)(b.retries - a.retries), t);
	}
	ctl_do("reset");
	ctl_do("set?ignore=1");
	struct rq_err e = {0};
	int rc = read_eq(s, FE, 5 * CS + 1, 10, 0, &e);
	TAP_OK(rc == -EIO && strstr(e.msg, "ignored the Range") && strstr(e.msg, names[FE]),
	       "a 200 ignoring Range: -EIO, never the bytes (%d: %.150s)", rc, e.msg);
	TAP_OK(read_eq(s, FE, 5 * CS + 1, 10, 0, NULL) == 0, "the next read fetches it right");
	ctl_do("reset");
	ctl_do("set?e500=100");
	memset(&e, 0, sizeof e);
	double t0 = now_s();
	rc = read_eq(s, FE, 6 * CS + 7, 10, 0, &e);
	double t = now_s() - t0;
	TAP_OK(rc == -EIO && strstr(e.msg, names[FE]) && strstr(e.msg, "bytes 1572864-1835007") &&
	       strstr(e.msg, "HTTP 500") && t < 15, "500 for good: -EIO naming file and range in "
	       "%.1f s (%.200s)", t, e.msg);
	ctl_do("reset");
	TAP_OK(read_eq(s, FE, 6 * CS + 7, 10, 0, NULL) == 0, "a failed chunk is fetched again later");
	rq_rs_close(s);

	/* wrong bytes: caught by SHA-256 at assembly */
	ctl_do("reset");
	char q[128];
	snprintf(q, sizeof q, "set?wrong=1&wrong_file=%s", names[FB]);
	ctl_do(q);
	s = open_store("wrong", 4, 0, 0, 0);
	memset(&e, 0, sizeof e);
	rc = rq_rs_fetch_file(s, FB, NULL, NULL, &e);
	struct rq_rs_stats ss;
	rq_rs_stats(s, &ss);
	cJSON *st = ctl("stats");
	long nb = (long)((sizes[FB] + CS - 1) / CS);
	TAP_OK(rc == 0 && file_equals(rq_rs_path(s, FB), FB) && ss.refetches == 1 &&
	       ranges_of(st, FB, -1) == 2 * nb && log_has("sha256"),
	       "wrong bytes once: the SHA-256 mismatch is logged, the file refetched (%d of %ld "
	       "chunks twice), the result right (rc %d %s)", ranges_of(st, FB, -1) - (int)nb, nb,
	       rc, e.msg);
	cJSON_Delete(st);
	ctl_do("reset");
	snprintf(q, sizeof q, "set?wrong=1&wrong_file=%s", names[FC]);
	ctl_do(q);
	rc = rq_rs_fetch_file(s, FC, NULL, NULL, &e);
	TAP_OK(rc == 0 && file_equals(rq_rs_path(s, FC), FC) && log_has("git blob id") &&
	       stat_num("faults_served") == 1, "a file outside LFS is checked by its git blob id: "
	       "wrong bytes caught, refetched (rc %d)", rc);
	ctl_do("reset");
	snprintf(q, sizeof q, "set?wrong=1000&wrong_file=%s", names[FD]);
	ctl_do(q);
	memset(&e, 0, sizeof e);
	rc = rq_rs_fetch_file(s, FD, NULL, NULL, &e);
	TAP_OK(rc == -EIO && !rq_rs_path(s, FD) && strstr(e.msg, names[FD]) && strstr(e.msg, shas[FD]),
	       "wrong bytes always: -EIO, no path (%.200s)", e.msg);
	uint8_t b[10];
	rc = rq_rs_read(s, FD, 0, sizeof b, b, 0, &e);
	TAP_OK(rc == -EIO, "and reads of it fail -EIO (%d)", rc);
	ctl_do("reset");
	rq_rs_close(s);
}

static void test_memory_and_close(void)
{
	ctl_do("reset");
	ctl_do("set?delay_ms=200");
	struct rq_rs *s = open_store("mem", 8, 0, 2 * CS, 0);
	struct reader r[16];
	for (int i = 0; i < 12; i++)
		r[i] = (struct reader){.s = s, .f = FF, .off = (uint64_t)i * CS + 3, .len = CS - 3};
	int bad = run_readers(r, 12);
	struct rq_rs_stats ss;
	rq_rs_stats(s, &ss);
	int mc = (int)stat_num("maxconc");
	TAP_OK(!bad && ss.mem_peak > 0 && ss.mem_peak <= 2 * CS && mc <= 2,
	       "mem_max 2 chunks, 8 connections, 12 readers: peak %llu bytes, %d requests at once, "
	       "bytes right", (unsigned long long)ss.mem_peak, mc);
	rq_rs_close(s);

	ctl_do("reset");
	ctl_do("set?hang=1");
	s = open_store("close", 4, 2, 0, 0);
	for (int i = 0; i < 6; i++)
		r[i] = (struct reader){.s = s, .f = FF, .off = (uint64_t)i * CS * 2, .len = 1000};
	pthread_t t[6];
	for (int i = 0; i < 6; i++)
		pthread_create(&t[i], NULL, reader_main, &r[i]);
	usleep(400000);
	double t0 = now_s();
	rq_rs_close(s);
	double dt = now_s() - t0;
	for (int i = 0; i < 6; i++)
		pthread_join(t[i], NULL);
	int cancelled = 0;
	for (int i = 0; i < 6; i++)
		cancelled += r[i].last_rc == -ECANCELED;
	TAP_OK(dt < 1.0 && cancelled == 6, "close with 6 reads hanging on the server returns in "
	       "%.3f s; the reads fail -ECANCELED (%d of 6)", dt, cancelled);
	ctl_do("reset");
}

/* Two stores over one cache directory at once (two mounts, or two nodes
 * sharing it): readers and fetch_file on both; one file results. */
static void test_shared(void)
{
	ctl_do("reset");
	ctl_do("set?delay_ms=10");
	struct rq_rs *a = open_store("shared", 4, -1, 0, 0), *b = open_store("shared", 4, -1, 0, 0);
	struct reader r[8];
	for (int i = 0; i < 8; i++)
		r[i] = (struct reader){.s = i % 2 ? a : b, .f = FB, .n = 10, .seed = 77 + i};
	pthread_t t[10];
	struct fetcher fx[2] = {{a, FB, -1}, {b, FB, -1}};
	for (int i = 0; i < 8; i++)
		pthread_create(&t[i], NULL, reader_main, &r[i]);
	for (int i = 0; i < 2; i++)
		pthread_create(&t[8 + i], NULL, fetcher_main, &fx[i]);
	for (int i = 0; i < 10; i++)
		pthread_join(t[i], NULL);
	int bad = 0;
	for (int i = 0; i < 8; i++)
		bad += r[i].wrong + r[i].rc_bad;
	const char *pa = rq_rs_path(a, FB), *pb = rq_rs_path(b, FB);
	TAP_OK(!bad && !fx[0].rc && !fx[1].rc && pa && pb && !strcmp(pa, pb) && file_equals(pa, FB),
	       "two stores on one cache directory, 8 readers and 2 fetch_file at once: one right "
	       "file (%d bad reads)", bad);
	rq_rs_close(a);
	rq_rs_close(b);
	ctl_do("reset");
}

/* warm (fetch_file) queues behind readers: a read of the file's last chunk
 * during a warm of 16 chunks on 2 connections is answered long before. */
static void test_warm_priority(void)
{
	ctl_do("reset");
	ctl_do("set?delay_ms=150");
	struct rq_rs *s = open_store("warm", 2, 0, 0, 0);
	struct fetcher fx = {s, FF, -1};
	pthread_t t;
	double t0 = now_s();
	pthread_create(&t, NULL, fetcher_main, &fx);
	usleep(100000);
	int rc = read_eq(s, FF, 15 * CS + 9, 100, 0, NULL);
	double tr = now_s() - t0;
	pthread_join(t, NULL);
	double tw = now_s() - t0;
	TAP_OK(rc == 0 && fx.rc == 0 && tr < tw / 2, "a read during a warm waits %.2f s, the "
	       "warm takes %.2f s", tr, tw);
	rq_rs_close(s);
	ctl_do("reset");
}

/* A full disk (a 700 KiB tmpfs; root): reads are served from memory, logged
 * once; fetch_file says the chunks could not be stored. */
static void test_disk_full(void)
{
	char dir[400];
	snprintf(dir, sizeof dir, "%s/full", tmp);
	mkdir(dir, 0755);
	if (mount("tmpfs", dir, "tmpfs", 0, "size=700k") != 0) {
		printf("ok %d # SKIP a full disk needs a tmpfs mount (root): %s\n", ++tap_n,
		       strerror(errno));
		return;
	}
	ctl_do("reset");
	struct rq_rs *s = open_store("full", 4, 0, 0, 0);
	int bad = 0;
	for (int i = 0; i < 8; i++)
		bad += read_eq(s, FF, (uint64_t)i * CS + 11, 5000, 0, NULL) != 0;
	TAP_OK(!bad && log_has("cannot store chunks"), "disk full: 8 chunks read right, the "
	       "failure to store them logged");
	struct rq_err e = {0};
	int rc = rq_rs_fetch_file(s, FF, NULL, NULL, &e);
	TAP_OK(rc == -ENOSPC && strstr(e.msg, names[FF]), "fetch_file on a full disk: -ENOSPC "
	       "naming the file (%d %.150s)", rc, e.msg);
	rq_rs_close(s);
	umount2(dir, MNT_DETACH);
}

/* Every chunk of a file on disk but no assembled file (a store closed right
 * after its last chunk came, before it assembled): the next read assembles
 * it, so it passes through from the next open. Offline: nothing fetched. */
static void test_assembled_by_reader(void)
{
	char d[600];
	snprintf(d, sizeof d, "%s/unassembled", tmp);
	mkdir(d, 0755);
	snprintf(d, sizeof d, "%s/unassembled/remote", tmp);
	mkdir(d, 0755);
	snprintf(d, sizeof d, "%s/unassembled/remote/chunks", tmp);
	mkdir(d, 0755);
	snprintf(d, sizeof d, "%s/unassembled/remote", tmp);
	int dfd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	char dir[200];
	snprintf(dir, sizeof dir, "chunks/%s-%u", shas[FA], CS);
	uint64_t idh = XXH3_64bits(shas[FA], strlen(shas[FA])), n = (sizes[FA] + CS - 1) / CS;
	int wrc = dfd < 0 ? -1 : 0;
	for (uint64_t c = 0; c < n && !wrc; c++) {
		uint64_t len = sizes[FA] - c * CS < CS ? sizes[FA] - c * CS : CS;
		wrc = rqr_chunk_write(dfd, dir, c, CS, idh, data[FA] + c * CS, (uint32_t)len);
	}
	if (dfd >= 0)
		close(dfd);
	TAP_OK(!wrc, "%llu chunks of %s written, no assembled file", (unsigned long long)n,
	       names[FA]);
	struct rq_rs *s = open_store("unassembled", 2, 0, 0, 1);
	TAP_OK(rq_rs_path(s, FA) == NULL, "opened offline: %s not assembled yet", names[FA]);
	TAP_OK(read_eq(s, FA, 5, 1000, 0, NULL) == 0, "a read of it, from its chunks");
	const char *p = rq_rs_path(s, FA);
	struct stat st;
	TAP_OK(p && stat(p, &st) == 0 && (uint64_t)st.st_size == sizes[FA],
	       "the read assembled it: %s", p ? p : "(none)");
	TAP_OK(read_eq(s, FA, 0, sizes[FA], 0, NULL) == 0, "read whole from the assembled file");
	rq_rs_close(s);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: test_rstore HUB_FAULT_PY\n");
		return 2;
	}
	if (rs_setup(argv[1]))
		return 1;
	char hx[41];
	git_blob_id("hello\n", 6, hx);
	TAP_OK(!strcmp(hx, "ce013625030ba8dba906f756967f9e9ca394464a"),
	       "git blob id of \"hello\\n\" (git hash-object): %s", hx);
	test_basic_and_cache();
	test_concurrency();
	test_readahead();
	test_faults();
	test_shared();
	test_warm_priority();
	test_disk_full();
	test_memory_and_close();
	test_assembled_by_reader();
	rs_teardown();
	if (!tap_failed)
		tap_rmtree(tmp);
	else
		printf("# kept %s\n", tmp);
	return tap_done();
}
