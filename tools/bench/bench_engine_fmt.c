/* bench_engine_fmt.c — a BF16 model's Linears in every weight format the CPU
 * engine reads (bench_engine_fmt.h), made in memory so that one run of
 * `bench engine --model DIR` decodes the same model in each format.
 *
 * The quantizers here are plain round-to-nearest (the bench measures speed;
 * the values only need to keep the forward finite and typical): FP8 with
 * s = bf16(amax / 448), INT with s = bf16(amax / (2^(bits-1) - 1)), both per
 * channel or per group; NVFP4 is quant's nvfp4a16 scheme itself. */
#include "tools/bench/bench_engine_fmt.h"
#include "base/err.h"
#include "engine/model/model.h"
#include "quant/quant.h"
#include "quant/scheme.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[BEF_N] = {"bf16", "nvfp4", "fp8-channel", "fp8-group",
                                         "int8-group", "int4-group"};

const char *bef_name(enum bef_fmt f)
{
	return (unsigned)f < BEF_N ? names[f] : "?";
}

int bef_parse(const char *list, unsigned *set, struct rq_err *err)
{
	unsigned s = 0;
	if (!strcmp(list, "all")) {
		*set = (1u << BEF_N) - 1;
		return 0;
	}
	if (!strcmp(list, "none")) {
		*set = 0;
		return 0;
	}
	for (const char *p = list; *p;) {
		size_t n = strcspn(p, ",");
		int f = 0;
		while (f < BEF_N && !(strlen(names[f]) == n && !strncmp(p, names[f], n)))
			f++;
		if (f == BEF_N)
			return rq_errf(err, -EINVAL, "--formats: unknown format '%.*s' (expected all, none "
			               "or a list of bf16, nvfp4, fp8-channel, fp8-group, int8-group, "
			               "int4-group)", (int)n, p);
		s |= 1u << f;
		p += n + (p[n] == ',');
	}
	*set = s;
	return 0;
}

struct bef {
	struct lg_model *m;
	int n;                     /* Linears converted */
	struct lg_linear **lin;    /* [n] into the model */
	struct lg_linear *orig;    /* [n] as loaded */
	struct lg_linear *conv[BEF_N]; /* [n] per format made (NULL: not made; BF16: NULL) */
	void **mem;                /* buffers the converted Linears point into */
	size_t n_mem, cap_mem;
	int group;                 /* smallest G of the group formats */
	int swapped;               /* the model holds a converted format */
	char (*label)[40];         /* [n] "lm_head", "layer 3 q", ... */
};

static void *keep(struct bef *b, size_t bytes)
{
	if (b->n_mem == b->cap_mem) {
		size_t cap = b->cap_mem ? 2 * b->cap_mem : 64;
		void **p = realloc(b->mem, cap * sizeof *p);
		if (!p)
			return NULL;
		b->mem = p;
		b->cap_mem = cap;
	}
	void *v = calloc(1, bytes ? bytes : 1);
	if (v)
		b->mem[b->n_mem++] = v;
	return v;
}

/* The Linears of the products a token runs (a MoE router and the shared
 * gate excluded: the forward reads them in its own ways), with a label
 * each. NULL lin: count only. */
static int walk(struct lg_model *m, struct lg_linear **lin, char (*label)[40])
{
	const struct lg_config *c = &m->cfg;
	int n = 1;
	if (lin) {
		lin[0] = &m->lm_head;
		snprintf(label[0], sizeof label[0], "lm_head");
	}
#define PUT(L, ...)                                                                   \
	do {                                                                          \
		if (lin) {                                                            \
			lin[n] = (L);                                                 \
			snprintf(label[n], sizeof label[n], "layer %d " __VA_ARGS__); \
		}                                                                     \
		n++;                                                                  \
	} while (0)
	for (int li = 0; li < c->n_layers; li++) {
		struct lg_layer *l = &m->layers[li];
		PUT(&l->q, "q_proj", li);
		PUT(&l->k, "k_proj", li);
		PUT(&l->v, "v_proj", li);
		PUT(&l->o, "o_proj", li);
		if (c->gate != LG_GATE_NONE)
			PUT(&l->g, "g_proj", li);
		if (!l->moe) {
			PUT(&l->gate, "gate_proj", li);
			PUT(&l->up, "up_proj", li);
			PUT(&l->down, "down_proj", li);
			continue;
		}
		for (int e = 0; e < c->n_experts; e++) {
			PUT(&l->eg[e], "expert %d gate", li, e);
			PUT(&l->eu[e], "expert %d up", li, e);
			PUT(&l->ed[e], "expert %d down", li, e);
		}
		if (c->shared_inter > 0) {
			PUT(&l->sg, "shared gate", li);
			PUT(&l->su, "shared up", li);
			PUT(&l->sd, "shared down", li);
		}
	}
#undef PUT
	return n;
}

static int group_of(int cols)
{
	static const int g[] = {128, 64, 32, 16};
	for (int i = 0; i < 4; i++)
		if (cols % g[i] == 0)
			return g[i];
	return 0;
}

static float wt(const struct lg_linear *W, int r, int c)
{
	return rq_bf16_to_f32(W->w[(size_t)r * W->cols + c]);
}

/* amax of row r's columns [c0, c0 + n) */
static float amax(const struct lg_linear *W, int r, int c0, int n)
{
	float a = 0;
	for (int c = c0; c < c0 + n; c++)
		a = fmaxf(a, fabsf(wt(W, r, c)));
	return a;
}

static int to_nvfp4(struct bef *b, const struct lg_linear *W, struct lg_linear *o)
{
	struct rq_stensor t[RQ_SCHEME_MAX_TENSORS];
	int nt = 0, bad = 0;
	uint64_t size = 0;
	if (rq_scheme_layout(RQ_SCHEME_NVFP4A16, RQ_SRC_BF16, W->rows, W->cols, t, &nt, &size))
		return -EINVAL;
	uint8_t *out = keep(b, size);
	float *div = keep(b, 512 * sizeof *div);
	if (!out || !div)
		return -ENOMEM;
	struct rq_smod mod = {.w = W->w, .dtype = RQ_SRC_BF16, .rows = W->rows, .cols = W->cols,
	                      .out = out};
	int rc = rq_scheme_quantize(RQ_SCHEME_NVFP4A16, rq_scheme_default_recipe(RQ_SCHEME_NVFP4A16),
	                            &mod, 1, &bad, NULL);
	if (rc)
		return rc;
	*o = (struct lg_linear){.kind = LG_W_NVFP4, .rows = W->rows, .cols = W->cols,
	                        .packed = out + t[0].off, .scales = out + t[1].off, .bias = W->bias};
	memcpy(&o->global_scale, out + t[2].off, 4);
	/* the table the loader makes (engine/model/model_linear.c bind_nvfp4) */
	for (int s = 0; s < 256; s++) {
		div[s] = rq_e4m3_to_f32((uint8_t)s) / o->global_scale;
		div[256 + s] = (1.5f * rq_e4m3_to_f32((uint8_t)s)) / o->global_scale;
	}
	o->gs_div = div;
	return 0;
}

/* FP8 (bits 0) or INT (bits 8, 4), groups of g columns (g = cols: per channel). */
static int to_q(struct bef *b, const struct lg_linear *W, int bits, int g, struct lg_linear *o)
{
	int rows = W->rows, cols = W->cols, groups = cols / g;
	int words = bits ? (int)(((size_t)cols * bits + 31) / 32) : 0;
	uint16_t *sc = keep(b, (size_t)rows * groups * 2);
	uint8_t *q = keep(b, bits ? (size_t)rows * words * 4 : (size_t)rows * cols);
	if (!sc || !q)
		return -ENOMEM;
	int qmax = bits ? (1 << (bits - 1)) - 1 : 448;
	for (int r = 0; r < rows; r++)
		for (int k = 0; k < groups; k++) {
			float a = amax(W, r, k * g, g);
			uint16_t sb = rq_f32_to_bf16(a > 0 ? a / (float)qmax : 1.0f);
			float s = rq_bf16_to_f32(sb);
			sc[(size_t)r * groups + k] = sb;
			for (int c = k * g; c < (k + 1) * g; c++) {
				float v = wt(W, r, c) / s;
				if (!bits) {
					q[(size_t)r * cols + c] = rq_f32_to_e4m3(fminf(fmaxf(v, -448.0f), 448.0f));
					continue;
				}
				int iv = (int)rintf(fminf(fmaxf(v, (float)-qmax - 1), (float)qmax));
				uint32_t field = (uint32_t)(iv + qmax + 1), bit = (uint32_t)c * bits;
				uint8_t *row = q + (size_t)r * words * 4;
				for (int j = 0; j < bits; j++, bit++)   /* little-endian words: bit k of byte k/8 */
					row[bit / 8] |= (uint8_t)(((field >> j) & 1) << (bit % 8));
			}
		}
	*o = (struct lg_linear){.rows = rows, .cols = cols, .qscale = (const uint8_t *)sc,
	                        .sdtype = LG_S_BF16, .srows = rows, .groups = groups, .bias = W->bias};
	if (bits) {
		o->kind = LG_W_INT;
		o->qw = q;
		o->bits = bits;
		o->words = words;
	} else {
		o->kind = LG_W_FP8;
		o->w8 = q;
	}
	return 0;
}

int bef_open(struct lg_model *m, unsigned set, struct bef **out, struct rq_err *err)
{
	struct bef *b = calloc(1, sizeof *b);
	int rc = -ENOMEM;
	if (!b)
		return rq_errf(err, -ENOMEM, "out of memory");
	b->m = m;
	b->n = walk(m, NULL, NULL);
	b->lin = calloc(b->n, sizeof *b->lin);
	b->orig = calloc(b->n, sizeof *b->orig);
	b->label = calloc(b->n, sizeof *b->label);
	if (!b->lin || !b->orig || !b->label)
		goto fail;
	walk(m, b->lin, b->label);
	for (int i = 0; i < b->n; i++) {
		b->orig[i] = *b->lin[i];
		if (b->orig[i].kind != LG_W_BF16) {
			rc = rq_errf(err, -ENOTSUP, "%s: the %s Linear is not BF16; the per-format rows "
			             "quantize BF16 weights (give a BF16 checkpoint, or --formats none)",
			             m->dir, b->label[i]);
			goto fail;
		}
		int g = group_of(b->orig[i].cols);
		if (!g) {
			rc = rq_errf(err, -ENOTSUP, "%s: the %s Linear has %d columns, not a multiple of 16; "
			             "the per-format rows need groups of 16 (--formats none)", m->dir,
			             b->label[i], b->orig[i].cols);
			goto fail;
		}
		if (!b->group || g < b->group)
			b->group = g;
	}
	for (int f = BEF_NVFP4; f < BEF_N; f++) {
		if (!(set & (1u << f)))
			continue;
		b->conv[f] = calloc(b->n, sizeof *b->conv[f]);
		if (!b->conv[f])
			goto fail;
		for (int i = 0; i < b->n; i++) {
			const struct lg_linear *W = &b->orig[i];
			struct lg_linear *o = &b->conv[f][i];
			int g = group_of(W->cols);
			rc = f == BEF_NVFP4 ? to_nvfp4(b, W, o)
			   : f == BEF_FP8_CH ? to_q(b, W, 0, W->cols, o)
			   : f == BEF_FP8_G ? to_q(b, W, 0, g, o)
			   : to_q(b, W, f == BEF_INT8_G ? 8 : 4, g, o);
			if (rc) {
				rq_errf(err, rc, "converting the %s Linear [%d, %d] to %s: %s", b->label[i],
				        W->rows, W->cols, names[f], strerror(-rc));
				goto fail;
			}
		}
	}
	*out = b;
	return 0;
fail:
	if (rc == -ENOMEM && !err->msg[0])
		rq_errf(err, rc, "out of memory converting the model's Linears");
	bef_close(b);
	return rc;
}

void bef_use(struct bef *b, enum bef_fmt f)
{
	const struct lg_linear *src = f == BEF_BF16 || !b->conv[f] ? b->orig : b->conv[f];
	for (int i = 0; i < b->n; i++)
		*b->lin[i] = src[i];
	b->swapped = src != b->orig;
}

int bef_group(const struct bef *b)
{
	return b->group;
}

void bef_close(struct bef *b)
{
	if (!b)
		return;
	if (b->swapped)
		bef_use(b, BEF_BF16);
	for (size_t i = 0; i < b->n_mem; i++)
		free(b->mem[i]);
	for (int f = 0; f < BEF_N; f++)
		free(b->conv[f]);
	free(b->mem);
	free(b->lin);
	free(b->orig);
	free(b->label);
	free(b);
}
