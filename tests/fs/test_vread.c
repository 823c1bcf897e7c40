/* test_vread.c — verify's coalesced reads (offline/vread.h) on a safetensors
 * file written here: declared neighbours merged into one read, an undeclared
 * gap > VREAD_GAP splits spans, a tensor larger than a span read in spans of
 * VREAD_SPAN, a read as large as a span goes direct, a read out of order
 * extends its span back over declared tensors not fetched yet; every byte
 * right; local (not coalesced) makes no span. TAP. */
#include "base/err.h"
#include "offline/vread.h"
#include "plan/ckpt.h"
#include "tests/tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NSMALL 150
#define SMALL 1000u
#define GAP_BYTES (2u << 20)            /* > VREAD_GAP: not declared */
#define BIG (80ull << 20)               /* > VREAD_SPAN */

static uint8_t byte_at(uint64_t i)
{
	return (uint8_t)((i * 2654435761u) >> 13);
}

struct found {
	const struct st_tensor *t[NSMALL + 2];
	int shard;
	int n;
};

static int collect(void *ctx, const char *name, const struct st_tensor *t, int shard)
{
	struct found *f = ctx;
	int i = !strcmp(name, "gap") ? NSMALL : !strcmp(name, "z_big") ? NSMALL + 1
	                                                              : atoi(name + 1);
	f->t[i] = t;
	f->shard = shard;
	f->n++;
	return 0;
}

/* The tensor's bytes read through v equal the file's. */
static int read_ok(struct vread *v, int shard, const struct st_tensor *t, uint64_t piece)
{
	uint64_t n = t->end - t->begin;
	uint8_t *b = malloc(n ? n : 1);
	int ok = b != NULL;
	for (uint64_t off = 0; ok && off < n; off += piece) {
		uint64_t l = n - off < piece ? n - off : piece;
		struct rq_err e = {0};
		ok = vread_pread(v, shard, t, off, b + off, l, &e) == 0;
	}
	for (uint64_t i = 0; ok && i < n; i++)
		ok = b[i] == byte_at(t->begin + i);
	free(b);
	return ok;
}

static uint64_t reqs(struct vread *v)
{
	uint64_t r, b;
	vread_stats(v, &r, &b);
	return r;
}

int main(void)
{
	char path[] = "/tmp/rq-vread-XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0) {
		printf("Bail out! mkstemp\n");
		return 1;
	}
	/* s000..s099, gap (in s100's place), s101..s149, z_big */
	uint64_t off = 0;
	char *h = malloc(64 * 1024);
	size_t len = 0;
	len += (size_t)sprintf(h + len, "{");
	for (int i = 0; i < NSMALL; i++) {
		char name[16];
		uint64_t n = i == 100 ? GAP_BYTES : SMALL;
		if (i == 100)
			snprintf(name, sizeof name, "gap");
		else
			snprintf(name, sizeof name, "s%03d", i);
		len += (size_t)sprintf(h + len, "%s\"%s\":{\"dtype\":\"U8\",\"shape\":[%llu],"
		                       "\"data_offsets\":[%llu,%llu]}", i ? "," : "", name,
		                       (unsigned long long)n, (unsigned long long)off,
		                       (unsigned long long)(off + n));
		off += n;
	}
	len += (size_t)sprintf(h + len, ",\"z_big\":{\"dtype\":\"U8\",\"shape\":[%llu],"
	                       "\"data_offsets\":[%llu,%llu]}}", (unsigned long long)BIG,
	                       (unsigned long long)off, (unsigned long long)(off + BIG));
	uint64_t total = off + BIG;
	while (len % 8)
		h[len++] = ' ';
	uint8_t n8[8];
	for (int k = 0; k < 8; k++)
		n8[k] = (uint8_t)((uint64_t)len >> (8 * k));
	int wok = write(fd, n8, 8) == 8 && write(fd, h, len) == (ssize_t)len;
	free(h);
	uint8_t *buf = malloc(1 << 20);
	for (uint64_t a = 0; wok && a < total; a += 1 << 20) {
		uint64_t m = total - a < (1 << 20) ? total - a : (1 << 20);
		for (uint64_t i = 0; i < m; i++)
			buf[i] = byte_at(a + i);
		wok = write(fd, buf, m) == (ssize_t)m;
	}
	free(buf);
	close(fd);
	if (!wok) {
		printf("Bail out! writing %s\n", path);
		unlink(path);
		return 1;
	}

	struct rq_ckpt *c = NULL;
	struct rq_err e = {0};
	struct found f = {0};
	if (rq_ckpt_open(path, &c, &e) || rq_ckpt_each(c, collect, &f, &e) || f.n != NSMALL + 1) {
		printf("Bail out! %s: %s (%d tensors)\n", path, e.msg, f.n);
		unlink(path);
		return 1;
	}
	const struct st_tensor *big = f.t[NSMALL + 1];
	struct vread *v = NULL;
	vread_open(c, 1, &v);
	for (int i = 0; i < NSMALL; i++)
		if (i != 100)
			vread_need(v, f.shard, f.t[i]);
	vread_need(v, f.shard, big);
	int good = 1;
	for (int i = 0; i < 100; i++)
		good &= read_ok(v, f.shard, f.t[i], SMALL);
	TAP_OK(good && reqs(v) == 1, "100 declared neighbours: the right bytes in 1 read (%llu)",
	       (unsigned long long)reqs(v));
	good = read_ok(v, f.shard, f.t[101], SMALL);
	for (int i = 102; i < NSMALL; i++)
		good &= read_ok(v, f.shard, f.t[i], SMALL);
	TAP_OK(good && reqs(v) == 2, "past an undeclared 2 MiB gap: a new span, then served from "
	       "it (%llu reads in all)", (unsigned long long)reqs(v));
	TAP_OK(read_ok(v, f.shard, big, 16u << 20) && reqs(v) == 4,
	       "an 80 MiB tensor in 16 MiB pieces: 2 spans of <= 64 MiB (%llu reads in all)",
	       (unsigned long long)reqs(v));
	TAP_OK(read_ok(v, f.shard, big, BIG) && reqs(v) == 5,
	       "the same tensor in one read (larger than a span): direct (%llu)",
	       (unsigned long long)reqs(v));
	vread_close(v);

	vread_open(c, 1, &v);
	for (int i = 0; i < 100; i++)
		vread_need(v, f.shard, f.t[i]);
	good = read_ok(v, f.shard, f.t[50], SMALL);
	for (int i = 0; i < 100; i++)
		good &= read_ok(v, f.shard, f.t[i], SMALL);
	TAP_OK(good && reqs(v) == 1, "read from the middle first: its span reaches back over the "
	       "declared tensors before it (%llu read)", (unsigned long long)reqs(v));
	vread_close(v);

	vread_open(c, 0, &v);
	good = read_ok(v, f.shard, f.t[3], SMALL) && read_ok(v, f.shard, big, 16u << 20);
	TAP_OK(good && reqs(v) == 0, "local: direct reads, the right bytes, no span");
	vread_close(v);
	rq_ckpt_close(c);
	unlink(path);
	return tap_done();
}
