/* mkckpt_plan.c — what a synthetic Laguna checkpoint holds: the tensor list
 * with Laguna S 2.1's names, how it is split into shards, and every byte of
 * every tensor.
 *
 * Weights are a pure function of (seed, tensor name): a splitmix64 stream
 * seeded with XXH3(name, seed) feeds an Irwin-Hall approximation of N(0, 1)
 * computed with integer sums and one binary32 multiply, so the bytes are the
 * same on every machine. Linear weights ~ N(0, 1/fan_in) (0.018 at real
 * dims), norms 1 + N(0, 0.05), router bias N(0, 0.01) in F32; the expert-1
 * down_proj of layer A+2 (42 by default) is all zeros. A quantized expert
 * projection is its BF16 weight through quant/ (RQ_RECIPE_FP32, gate/up
 * sharing one global scale), so the 08-01 form and the 07-22 twin hold the
 * same weights. input_global_scale is 2688 / a with a drawn in [0.5, 16)
 * per expert and input (gate and up see the same input, so they share it). */
#include "base/grow.h"
#include "tools/mkckpt/mkckpt.h"

#include "base/err.h"
#include "quant/quant.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static int plan_add(struct mk_plan *p, const char *name, enum st_dtype dt, int ndim, uint64_t d0,
                    uint64_t d1, enum mk_kind k, float std, int mod)
{
	if (RQ_GROW(p->t, p->n, p->cap, 1024))
		return -ENOMEM;
	struct mk_tensor *t = &p->t[p->n++];
	memset(t, 0, sizeof *t);
	snprintf(t->name, sizeof t->name, "%s", name);
	t->dtype = dt;
	t->ndim = ndim;
	t->shape[0] = d0;
	t->shape[1] = d1;
	t->kind = k;
	t->std = std;
	t->mod = mod;
	return 0;
}

uint64_t mk_tensor_bytes(const struct mk_tensor *t)
{
	struct st_spec s = {t->name, t->dtype, t->ndim, {t->shape[0], t->shape[1]}};
	return st_spec_bytes(&s);
}

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct mk_tensor *)a)->name, ((const struct mk_tensor *)b)->name);
}

static float fan_in_std(size_t in)
{
	return 1.0f / sqrtf((float)in);
}

/* A dense MLP's BF16 weights, named base + sub + proj: gate_proj and up_proj
 * [d, h], down_proj [h, d]. */
static int add_mlp(struct mk_plan *p, const char *base, const char *sub, size_t d, size_t h)
{
	static const char *proj[] = {"gate_proj", "up_proj", "down_proj"};
	char n[128];
	for (int j = 0; j < 3; j++) {
		size_t rows = j < 2 ? d : h, cols = j < 2 ? h : d;
		snprintf(n, sizeof n, "%s%s%s.weight", base, sub, proj[j]);
		int rc = plan_add(p, n, ST_BF16, 2, rows, cols, MK_LINEAR, fan_in_std(cols), -1);
		if (rc)
			return rc;
	}
	return 0;
}

/* The tensors of one form. nvfp4_all: the 07-22 twin. */
int mk_plan_build(const struct mk_model *m, int nvfp4_all, struct mk_plan *p)
{
	char n[128];
	size_t H = (size_t)m->hidden, hd = (size_t)m->head_dim, kv = (size_t)m->kv_heads;
	int rc = 0;
#define ADD(dt, nd, a, b, k, s, mod) do { if ((rc = plan_add(p, n, dt, nd, a, b, k, s, mod))) return rc; } while (0)
	snprintf(n, sizeof n, "model.embed_tokens.weight");
	ADD(ST_BF16, 2, (uint64_t)m->vocab, H, MK_LINEAR, fan_in_std(H), -1);
	snprintf(n, sizeof n, "model.norm.weight");
	ADD(ST_BF16, 1, H, 0, MK_NORM, 0.05f, -1);
	snprintf(n, sizeof n, "lm_head.weight");
	ADD(ST_BF16, 2, (uint64_t)m->vocab, H, MK_LINEAR, fan_in_std(H), -1);
	static const char *proj[] = {"gate_proj", "up_proj", "down_proj"};
	for (int l = 0; l < m->layers; l++) {
		size_t heads = (size_t)(mk_full_layer(l) ? m->heads_full : m->heads_sliding);
		char base[40];
		snprintf(base, sizeof base, "model.layers.%d.", l);
#define NAME(...) do { size_t k_ = strlen(base); memcpy(n, base, k_); snprintf(n + k_, sizeof n - k_, __VA_ARGS__); } while (0)
		NAME("input_layernorm.weight");
		ADD(ST_BF16, 1, H, 0, MK_NORM, 0.05f, -1);
		NAME("post_attention_layernorm.weight");
		ADD(ST_BF16, 1, H, 0, MK_NORM, 0.05f, -1);
		NAME("self_attn.q_proj.weight");
		ADD(ST_BF16, 2, heads * hd, H, MK_LINEAR, fan_in_std(H), -1);
		NAME("self_attn.k_proj.weight");
		ADD(ST_BF16, 2, kv * hd, H, MK_LINEAR, fan_in_std(H), -1);
		NAME("self_attn.v_proj.weight");
		ADD(ST_BF16, 2, kv * hd, H, MK_LINEAR, fan_in_std(H), -1);
		NAME("self_attn.o_proj.weight");
		ADD(ST_BF16, 2, H, heads * hd, MK_LINEAR, fan_in_std(heads * hd), -1);
		NAME("self_attn.g_proj.weight");
		ADD(ST_BF16, 2, heads, H, MK_LINEAR, fan_in_std(H), -1);
		NAME("self_attn.q_norm.weight");
		ADD(ST_BF16, 1, hd, 0, MK_NORM, 0.05f, -1);
		NAME("self_attn.k_norm.weight");
		ADD(ST_BF16, 1, hd, 0, MK_NORM, 0.05f, -1);
		if (l == 0) {
			if ((rc = add_mlp(p, base, "mlp.", (size_t)m->dense_w, H)))
				return rc;
			continue;
		}
		size_t S = (size_t)m->shared_w, W = (size_t)m->expert_w;
		NAME("mlp.gate.weight");
		ADD(ST_BF16, 2, (uint64_t)m->experts, H, MK_LINEAR, fan_in_std(H), -1);
		NAME("mlp.experts.e_score_correction_bias");
		ADD(ST_F32, 1, (uint64_t)m->experts, 0, MK_BIAS, 0.01f, -1);
		if ((rc = add_mlp(p, base, "mlp.shared_expert.", S, H)))
			return rc;
		int bf16 = !m->quantized || (!nvfp4_all && l >= m->bf16_a && l <= m->bf16_b);
		int zero_layer = m->bf16_a + (m->bf16_b - m->bf16_a < 2 ? m->bf16_b - m->bf16_a : 2);
		for (int e = 0; e < m->experts; e++) {
			for (int j = 0; j < 3; j++) {
				if (RQ_GROW(p->mods, p->nmods, p->capm, 256))
					return -ENOMEM;
				int mi = (int)p->nmods++;
				struct mk_module *md = &p->mods[mi];
				snprintf(md->name, sizeof md->name, "model.layers.%d.mlp.experts.%d.%s", l, e,
				         proj[j]);
				md->rows = j < 2 ? W : H;
				md->cols = j < 2 ? H : W;
				md->partner = j == 0 ? mi + 1 : j == 1 ? mi - 1 : -1;
				md->zero = j == 2 && l == zero_layer && e == 1 % m->experts;
				md->std = fan_in_std(md->cols);
				if (bf16) {
					snprintf(n, sizeof n, "%s.weight", md->name);
					ADD(ST_BF16, 2, md->rows, md->cols, MK_QWEIGHT, md->std, mi);
					continue;
				}
				snprintf(n, sizeof n, "%s.weight_packed", md->name);
				ADD(ST_U8, 2, md->rows, md->cols / 2, MK_PACKED, 0, mi);
				snprintf(n, sizeof n, "%s.weight_scale", md->name);
				ADD(ST_F8_E4M3, 2, md->rows, md->cols / 16, MK_SCALE, 0, mi);
				snprintf(n, sizeof n, "%s.weight_global_scale", md->name);
				ADD(ST_F32, 1, 1, 0, MK_WGS, 0, mi);
				snprintf(n, sizeof n, "%s.input_global_scale", md->name);
				ADD(ST_F32, 1, 1, 0, MK_IGS, 0, mi);
			}
		}
#undef NAME
	}
#undef ADD
	qsort(p->t, p->n, sizeof *p->t, by_name);
	return 0;
}

void mk_plan_free(struct mk_plan *p)
{
	free(p->mods);
	free(p->t);
	memset(p, 0, sizeof *p);
}

/* Greedy by size in name order, like huggingface_hub's splitter, plus the
 * forced boundary before `force_prefix` (an up_proj whose gate_proj precedes
 * it). */
void mk_shard_by_size(struct mk_plan *p, uint64_t max, const char *force_prefix)
{
	uint64_t cur = 0;
	int s = 0, forced = 0;
	for (size_t i = 0; i < p->n; i++) {
		uint64_t b = mk_tensor_bytes(&p->t[i]);
		int force = !forced && !strncmp(p->t[i].name, force_prefix, strlen(force_prefix));
		if (cur > 0 && (cur + b > max || force)) {
			s++;
			cur = 0;
		}
		forced |= force;
		p->t[i].shard = s;
		cur += b;
	}
	p->nshards = s + 1;
}

/* The twin's tensors go where OUT holds the same tensor or its module. */
int mk_shard_like(struct mk_plan *twin, const struct mk_plan *main)
{
	for (size_t i = 0; i < twin->n; i++) {
		struct mk_tensor key, *hit;
		snprintf(key.name, sizeof key.name, "%s", twin->t[i].name);
		hit = bsearch(&key, main->t, main->n, sizeof *main->t, by_name);
		if (!hit && twin->t[i].mod >= 0) {
			snprintf(key.name, sizeof key.name, "%s.weight", twin->mods[twin->t[i].mod].name);
			hit = bsearch(&key, main->t, main->n, sizeof *main->t, by_name);
		}
		if (!hit)
			return -ENOENT;
		twin->t[i].shard = hit->shard;
	}
	twin->nshards = main->nshards;
	return 0;
}

/* ---- weights ------------------------------------------------------------ */

struct mk_rng mk_rng_for(uint64_t seed, const char *key)
{
	struct mk_rng r = {XXH3_64bits_withSeed(key, strlen(key), seed)};
	return r;
}

static uint64_t rng_next(struct mk_rng *r)
{
	uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* Irwin–Hall of four 16-bit uniforms: mean 0, variance 1, |z| < 3.47. */
float mk_rng_normal(struct mk_rng *r)
{
	uint64_t x = rng_next(r);
	int32_t sum = (int32_t)(x & 0xFFFF) + (int32_t)(x >> 16 & 0xFFFF) +
	              (int32_t)(x >> 32 & 0xFFFF) + (int32_t)(x >> 48);
	return (float)(sum - 131070) * (1.0f / 37837.23f);
}

/* BF16 values of a stream, n at a time (callers keep r across chunks). */
void mk_gen_bf16(struct mk_rng *r, enum mk_kind k, float std, uint16_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		float z = mk_rng_normal(r) * std;
		out[i] = rq_f32_to_bf16(k == MK_NORM ? 1.0f + z : z);
	}
}

static void module_weight(uint64_t seed, const struct mk_module *md, uint16_t *w)
{
	if (md->zero) {
		memset(w, 0, md->rows * md->cols * sizeof *w);
		return;
	}
	char key[128];
	snprintf(key, sizeof key, "%s.weight", md->name);
	struct mk_rng r = mk_rng_for(seed, key);
	mk_gen_bf16(&r, MK_QWEIGHT, md->std, w, md->rows * md->cols);
}

float mk_input_global_scale(uint64_t seed, const struct mk_module *md)
{
	char key[128];
	/* gate_proj and up_proj read the same activations: key on the expert */
	if (md->partner >= 0)
		snprintf(key, sizeof key, "%.*s.gate_up.input",
		         (int)(strrchr(md->name, '.') - md->name), md->name);
	else
		snprintf(key, sizeof key, "%s.input", md->name);
	struct mk_rng r = mk_rng_for(seed, key);
	float u = (float)(rng_next(&r) >> 40) * (1.0f / 16777216.0f);
	return 2688.0f / (0.5f + 15.5f * u);
}

int mk_qcache_get(struct mk_qcache *c, const struct mk_plan *p, uint64_t seed, int mod,
                      struct rq_err *err)
{
	const struct mk_module *md = &p->mods[mod];
	int job = md->partner >= 0 && md->partner < mod ? md->partner : mod;
	if (c->job == job)
		return 0;
	c->job = -1;
	c->n = md->partner >= 0 ? 2 : 1;
	c->mods[0] = job;
	c->mods[1] = job + 1;
	struct rq_qmod q[2];
	for (int i = 0; i < c->n; i++) {
		const struct mk_module *m = &p->mods[c->mods[i]];
		size_t n = m->rows * m->cols;
		free(c->w[i]);
		free(c->packed[i]);
		free(c->scales[i]);
		c->w[i] = malloc(n * 2);
		c->packed[i] = malloc(n / 2);
		c->scales[i] = malloc(n / 16);
		if (!c->w[i] || !c->packed[i] || !c->scales[i])
			return rq_errf(err, -ENOMEM, "out of memory quantizing %s", m->name);
		module_weight(seed, m, c->w[i]);
		q[i] = (struct rq_qmod){c->w[i], m->rows, m->cols, c->packed[i], c->scales[i]};
	}
	int bad = -1;
	int rc = rq_quantize_job(RQ_RECIPE_FP32, q, c->n, &c->gs, &bad, NULL);
	if (rc)
		return rq_errf(err, rc, "quantizing %s: %s", md->name, strerror(-rc));
	c->job = job;
	return 0;
}

void mk_qcache_free(struct mk_qcache *c)
{
	for (int i = 0; i < 2; i++) {
		free(c->w[i]);
		free(c->packed[i]);
		free(c->scales[i]);
	}
}
