/* test_scheme_peer.c — every byte of llm-compressor's model_free_ptq outputs
 * (tests/data/scheme_peer.bin, tools/golden/gen_scheme_peer.py) against rq_scheme_quantize, for
 * NVFP4A16, FP8_DYNAMIC, W8A16 and W4A16, each from BF16, F16 and F32 sources,
 * with every instruction-set variant the CPU has,
 * without and with a thread pool. The layout (suffix, dtype, shape, length, order) must
 * match the library's tensors too. */
#include "quant/scheme.h"
#include "quant/quant_int.h"
#include "base/pool.h"
#include "tests/quant/golden_cursor.h"
#include "tests/tap.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tens {
	char suffix[25], dtype[9];
	uint32_t ndim;
	uint64_t shape[2], len;
	const uint8_t *data;
};

struct kase {
	char name[25];
	int scheme, nmod, src;          /* enum rq_scheme, 1..3, enum rq_src_dtype */
	uint32_t rows[3], cols[3];
	const uint8_t *in[3];           /* src values, possibly unaligned in the file */
	int nt[3];
	struct tens t[3][RQ_SCHEME_MAX_TENSORS];
};

static int parse_case(struct kase *k)
{
	uint8_t hdr[28];
	memset(k, 0, sizeof(*k));
	if (take(hdr, 28))
		return -1;
	memcpy(k->name, hdr, 24);
	k->scheme = hdr[24];
	k->nmod = hdr[25];
	k->src = hdr[26] | hdr[27] << 8;
	if (k->nmod < 1 || k->nmod > 3 || k->src > RQ_SRC_F32)
		return -1;
	for (int i = 0; i < k->nmod; i++)
		if (take(&k->rows[i], 4) || take(&k->cols[i], 4))
			return -1;
	for (int i = 0; i < k->nmod; i++) {
		size_t n = (size_t)k->rows[i] * k->cols[i] * (k->src == RQ_SRC_F32 ? 4 : 2);
		k->in[i] = buf;
		if (take(NULL, n))
			return -1;
	}
	for (int i = 0; i < k->nmod; i++) {
		uint32_t nt;
		if (take(&nt, 4) || nt > RQ_SCHEME_MAX_TENSORS)
			return -1;
		k->nt[i] = (int)nt;
		for (uint32_t j = 0; j < nt; j++) {
			struct tens *t = &k->t[i][j];
			if (take(t->suffix, 24) || take(t->dtype, 8) || take(&t->ndim, 4) ||
			    take(t->shape, 16) || take(&t->len, 8))
				return -1;
			t->data = buf;
			if (take(NULL, t->len))
				return -1;
		}
	}
	return 0;
}

/* Runs one case; returns the number of mismatching bytes (or -1 on a layout/API failure,
 * with a message in why). */
static long run_case(const struct kase *k, struct rq_pool *pool, char *why, size_t whylen)
{
	struct rq_smod m[3];
	uint8_t *in[3] = {0};
	size_t es = k->src == RQ_SRC_F32 ? 4 : 2;
	long bad = 0;
	for (int i = 0; i < k->nmod; i++) {
		struct rq_stensor t[RQ_SCHEME_MAX_TENSORS];
		int nt;
		uint64_t sz;
		int rc = rq_scheme_layout((enum rq_scheme)k->scheme, (enum rq_src_dtype)k->src, k->rows[i],
		                          k->cols[i], t, &nt, &sz);
		if (rc < 0 || nt != k->nt[i]) {
			snprintf(why, whylen, "layout rc %d nt %d (want %d)", rc, nt, k->nt[i]);
			bad = -1;
			goto out;
		}
		for (int j = 0; j < nt; j++) {
			const struct tens *e = &k->t[i][j];
			if (strcmp(t[j].suffix, e->suffix) || strcmp(t[j].dtype, e->dtype) ||
			    (uint32_t)t[j].ndim != e->ndim || t[j].shape[0] != e->shape[0] ||
			    (e->ndim > 1 && t[j].shape[1] != e->shape[1]) || t[j].len != e->len) {
				snprintf(why, whylen, "tensor %d: ours %s %s [%llu,%llu] %llu, peer %s %s "
				         "[%llu,%llu] %llu", j, t[j].suffix, t[j].dtype,
				         (unsigned long long)t[j].shape[0], (unsigned long long)t[j].shape[1],
				         (unsigned long long)t[j].len, e->suffix, e->dtype,
				         (unsigned long long)e->shape[0], (unsigned long long)e->shape[1],
				         (unsigned long long)e->len);
				bad = -1;
				goto out;
			}
		}
		in[i] = malloc((size_t)k->rows[i] * k->cols[i] * es);
		m[i] = (struct rq_smod){in[i], (enum rq_src_dtype)k->src, k->rows[i], k->cols[i],
		                        malloc(sz)};
		if (!in[i] || !m[i].out) {
			snprintf(why, whylen, "out of memory");
			bad = -1;
			free(m[i].out);
			free(in[i]);
			in[i] = NULL;
			goto out;
		}
		memcpy(in[i], k->in[i], (size_t)k->rows[i] * k->cols[i] * es);
		memset(m[i].out, 0xA5, sz);
	}
	int b = -1;
	int rc = rq_scheme_quantize((enum rq_scheme)k->scheme, RQ_RECIPE_BF16, m, k->nmod, &b,
	                            pool);
	if (rc < 0) {
		snprintf(why, whylen, "quantize rc %d bad %d", rc, b);
		bad = -1;
		goto out;
	}
	for (int i = 0; i < k->nmod; i++) {
		uint64_t off = 0;
		for (int j = 0; j < k->nt[i]; j++) {
			const struct tens *e = &k->t[i][j];
			for (uint64_t x = 0; x < e->len; x++) {
				if (m[i].out[off + x] != e->data[x]) {
					if (bad == 0)
						snprintf(why, whylen, "module %d %s byte %llu: ours %02x peer %02x",
						         i, e->suffix, (unsigned long long)x, m[i].out[off + x],
						         e->data[x]);
					bad++;
				}
			}
			off += e->len;
		}
	}
out:
	for (int i = 0; i < k->nmod; i++) {
		if (in[i]) {
			free(in[i]);
			free(m[i].out);
		}
	}
	return bad;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		TAP_SKIP_ALL("usage: test_scheme_peer tests/data/scheme_peer.bin");
	FILE *f = fopen(argv[1], "rb");
	if (!f) {
		TAP_OK(0, "open %s (regenerate with tools/golden/gen_scheme_peer.py)", argv[1]);
		return tap_done();
	}
	fseek(f, 0, SEEK_END);
	long size = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *data = malloc((size_t)size);
	if (!data || fread(data, 1, (size_t)size, f) != (size_t)size) {
		TAP_OK(0, "read %s", argv[1]);
		return tap_done();
	}
	fclose(f);
	buf = data;
	end = data + size;
	uint32_t ncase = 0, zero;
	TAP_OK(size > 20 && memcmp(data, "RQSCHP02", 8) == 0, "magic of %s", argv[1]);
	buf += 8;
	take(&ncase, 4);
	take(&zero, 4);
	struct kase *ks = calloc(ncase ? ncase : 1, sizeof(*ks));
	uint32_t n = 0;
	while (n < ncase && parse_case(&ks[n]) == 0)
		n++;
	TAP_OK(n == ncase && end - buf == 4 && memcmp(buf, "END!", 4) == 0,
	       "parsed %u of %u cases to END!", n, ncase);

	struct rq_pool *pool = NULL;
	TAP_OK(rq_pool_create(3, &pool) == 0, "pool of 3");
	int per_scheme[RQ_SCHEME_COUNT][3] = {{0}};
	static const char *const srcname[3] = {"bf16", "f16", "f32"};
	for (int isa = 0; isa <= rq_quant_isa_max(); isa++) {
		rq_quant_isa_force(isa);
		for (int p = 0; p < 2; p++) {
			for (uint32_t i = 0; i < n; i++) {
				char why[256] = "";
				long bad = run_case(&ks[i], p ? pool : NULL, why, sizeof(why));
				TAP_OK(bad == 0, "%s %s %s [%ux%u x%d] %s %s: %ld bytes differ %s",
				       rq_scheme_name((enum rq_scheme)ks[i].scheme), srcname[ks[i].src], ks[i].name,
				       ks[i].rows[0], ks[i].cols[0], ks[i].nmod, rq_quant_isa_name(isa),
				       p ? "pool" : "inline", bad, why);
				if (isa == 0 && p == 0 && (unsigned)ks[i].scheme < RQ_SCHEME_COUNT)
					per_scheme[ks[i].scheme][ks[i].src]++;
			}
		}
	}
	rq_quant_isa_force(-1);
	/* model_free_ptq's schemes; --scheme nvfp4 (W4A4) has NVFP4A16's weight bytes
	 * (test_scheme.c) and is compared with oneshot in tests/fs (test_scheme_w4a4.py) */
	for (int s = RQ_SCHEME_NVFP4A16; s <= RQ_SCHEME_W4A16; s++)
		for (int t = 0; t < 3; t++)
			TAP_OK(per_scheme[s][t] >= 9, "%s from %s: %d peer cases",
			       rq_scheme_name((enum rq_scheme)s), srcname[t], per_scheme[s][t]);
	rq_pool_destroy(pool);
	free(ks);
	free(data);
	return tap_done();
}
