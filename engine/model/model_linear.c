/* model_linear.c — one tensor, or one Linear, bound by name in the form its
 * safetensors header says: BF16, F16 or F32 weight; NVFP4 (weight_packed U8 +
 * weight_scale E4M3 + weight_global_scale); FP8 (weight F8_E4M3 +
 * weight_scale); INT pack-quantized (weight_packed I32 + weight_shape +
 * weight_scale [+ weight_zero_point]); and its bias when the config has one.
 * Dtype and shape checked; every error names the file and the tensor. */
#include "engine/model/model_int.h"
#include "engine/model/ops.h"
#include "base/err.h"
#include "base/grow.h"
#include "quant/quant.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t lg_linear_bytes(const struct lg_linear *l)
{
	size_t n = (size_t)l->rows * l->cols;
	size_t sc = (size_t)l->srows * l->groups * (l->sdtype == LG_S_F32 ? 4 : 2);
	if (l->kind == LG_W_INT)
		return (size_t)l->rows * l->words * 4 + sc +
		       (l->qzero ? ((size_t)l->rows * l->bits + 31) / 32 * l->groups * 4 : 0);
	if (l->kind == LG_W_F32)
		return n * 4;
	return l->kind == LG_W_NVFP4 ? n / 2 + n / 16 + 4 : l->kind == LG_W_FP8 ? n + sc : n * 2;
}

int ld_cmp_tref(const void *a, const void *b)
{
	return strcmp(((const struct tref *)a)->name, ((const struct tref *)b)->name);
}

struct tref *ld_find(struct loader *L, const char *name)
{
	struct tref key = {.name = name};
	return bsearch(&key, L->t, L->n, sizeof key, ld_cmp_tref);
}

const struct st_tensor *ld_tensor(struct loader *L, const struct tref *r)
{
	return &L->m->files[r->file].h->t[r->idx];
}

const uint8_t *ld_data(struct loader *L, const struct tref *r)
{
	const struct lg_file *f = &L->m->files[r->file];
	return f->map + f->h->data_start + f->h->t[r->idx].begin;
}

static void fmt_shape(const struct st_tensor *t, char *buf, size_t len)
{
	size_t o = snprintf(buf, len, "[");
	for (int i = 0; i < t->ndim && o < len; i++)
		o += snprintf(buf + o, len - o, "%s%llu", i ? ", " : "", (unsigned long long)t->shape[i]);
	if (o < len)
		snprintf(buf + o, len - o, "]");
}

/* Looks up name and checks dtype and shape (ndim dims; ndim 1 with d0 == 1
 * also accepts a scalar). NULL with an error when absent or different. */
const struct tref *ld_need(struct loader *L, const char *name, enum st_dtype dt, int ndim,
                               uint64_t d0, uint64_t d1, int *rc)
{
	struct tref *r = ld_find(L, name);
	if (!r) {
		*rc = rq_errf(L->err, -EPROTO, "%s/config.json describes tensor %s, which no shard holds",
		              L->m->dir, name);
		return NULL;
	}
	const struct st_tensor *t = ld_tensor(L, r);
	int scalar_ok = ndim == 1 && d0 == 1 && t->ndim == 0;
	if (t->dtype != dt || (!scalar_ok && (t->ndim != ndim || t->shape[0] != d0 ||
	                                      (ndim > 1 && t->shape[1] != d1)))) {
		char got[96];
		fmt_shape(t, got, sizeof got);
		*rc = ndim > 1
		    ? rq_errf(L->err, -EPROTO, "%s: tensor %s is %s %s, expected %s [%llu, %llu]",
		              L->m->files[r->file].path, name, st_dtype_name(t->dtype), got,
		              st_dtype_name(dt), (unsigned long long)d0, (unsigned long long)d1)
		    : rq_errf(L->err, -EPROTO, "%s: tensor %s is %s %s, expected %s [%llu]",
		              L->m->files[r->file].path, name, st_dtype_name(t->dtype), got,
		              st_dtype_name(dt), (unsigned long long)d0);
		return NULL;
	}
	if (dt == ST_BF16 && ((uintptr_t)ld_data(L, r) & 1)) {
		*rc = rq_errf(L->err, -EPROTO, "%s: tensor %s is not 2-byte aligned",
		              L->m->files[r->file].path, name);
		return NULL;
	}
	r->used = 1;
	return r;
}

/* <mod>.weight_scale of an FP8 or INT Linear: BF16, F16 or F32 (as the
 * checkpoint has it), [rows, G] with G dividing cols (G = 1: per channel), or
 * [1] / a scalar (per tensor). */
static int bind_qscale(struct loader *L, const char *mod, struct lg_linear *out)
{
	char name[256];
	snprintf(name, sizeof name, "%s.weight_scale", mod);
	struct tref *r = ld_find(L, name);
	if (!r)
		return rq_errf(L->err, -EPROTO, "%s: module %s has no %s (a quantized Linear needs its "
		               "scales)", L->m->dir, mod, name);
	const struct st_tensor *t = ld_tensor(L, r);
	const char *path = L->m->files[r->file].path;
	char got[96];
	fmt_shape(t, got, sizeof got);
	switch (t->dtype) {
	case ST_BF16: out->sdtype = LG_S_BF16; break;
	case ST_F16: out->sdtype = LG_S_F16; break;
	case ST_F32: out->sdtype = LG_S_F32; break;
	default:
		return rq_errf(L->err, -EPROTO, "%s: tensor %s is %s %s; a weight_scale must be BF16, F16 "
		               "or F32", path, name, st_dtype_name(t->dtype), got);
	}
	if (t->ndim == 0 || (t->ndim == 1 && t->shape[0] == 1)) {
		out->srows = out->groups = 1;
	} else if (t->ndim == 2 && t->shape[0] == (uint64_t)out->rows && t->shape[1] >= 1 &&
	           t->shape[1] <= (uint64_t)out->cols && out->cols % t->shape[1] == 0) {
		out->srows = out->rows;
		out->groups = (int)t->shape[1];
	} else {
		return rq_errf(L->err, -EPROTO, "%s: tensor %s is %s %s, expected [%d, G] with G dividing "
		               "%d (per channel or per group), or [1] (per tensor); block scales are not "
		               "supported", path, name, st_dtype_name(t->dtype), got, out->rows, out->cols);
	}
	out->qscale = ld_data(L, r);
	r->used = 1;
	return 0;
}

/* 0 when RQ_ENGINE_ACT_QUANT=0: every Linear on binary32 inputs, whatever the
 * config says (the engine before W4A4 inputs: references that dequantize
 * weights only, and A/B runs of activation quantization's own cost). */
static int act_quant_on(void)
{
	const char *e = getenv("RQ_ENGINE_ACT_QUANT");
	return !(e && !strcmp(e, "0"));
}

/* The F32 [1] tensor name, a positive finite scale, into *gs. */
static int global_scale(struct loader *L, const char *name, float *gs)
{
	int rc = 0;
	const struct tref *g = ld_need(L, name, ST_F32, 1, 1, 0, &rc);
	if (!g)
		return rc;
	float v;
	memcpy(&v, ld_data(L, g), 4);
	if (!isfinite(v) || !(v > 0))
		return rq_errf(L->err, -EPROTO, "%s: tensor %s = %g is not a positive finite scale",
		               L->m->files[g->file].path, name, v);
	*gs = v;
	return 0;
}

/* The input quantization of NVFP4 module mod (config: act_nvfp4): W4A4 with
 * <mod>.input_global_scale F32 [1] when the config asks for NVFP4 inputs. The
 * embedding is a lookup, never a product's input: left alone. */
static int bind_nvfp4_act(struct loader *L, const char *mod, struct lg_linear *out)
{
	char name[256];
	int rc = 0, want = L->m->cfg.act_nvfp4;
	if (!want || !act_quant_on() || !strcmp(mod, "model.embed_tokens"))
		return 0;
	snprintf(name, sizeof name, "%s.input_global_scale", mod);
	if (!ld_find(L, name)) {
		if (want == 2)   /* some NVFP4 groups are weight-only: this is one of theirs */
			return 0;
		return rq_errf(L->err, -EPROTO, "%s/config.json quantizes the input activations of NVFP4 "
		               "Linears (W4A4) but no shard holds %s; export or mount with --calib so "
		               "every module has its input_global_scale", L->m->dir, name);
	}
	float gs;
	if ((rc = global_scale(L, name, &gs)))
		return rc;
	out->act = LG_A_NVFP4;
	out->in_gs = gs;
	L->m->n_act++;
	return 0;
}

/* NVFP4: weight_packed U8 [rows, cols/2], weight_scale F8_E4M3 [rows, cols/16],
 * weight_global_scale F32 [1]. */
static int bind_nvfp4(struct loader *L, const char *mod, struct lg_linear *out)
{
	char name[256];
	int rc = 0, rows = out->rows, cols = out->cols;
	if (cols % 16)
		return rq_errf(L->err, -EPROTO, "%s: NVFP4 module %s has %d input columns, not a "
		               "multiple of 16", L->m->dir, mod, cols);
	snprintf(name, sizeof name, "%s.weight_packed", mod);
	const struct tref *p = ld_need(L, name, ST_U8, 2, rows, cols / 2, &rc);
	if (!p)
		return rc;
	snprintf(name, sizeof name, "%s.weight_scale", mod);
	const struct tref *s = ld_need(L, name, ST_F8_E4M3, 2, rows, cols / 16, &rc);
	if (!s)
		return rc;
	snprintf(name, sizeof name, "%s.weight_global_scale", mod);
	float gs;
	if ((rc = global_scale(L, name, &gs)))
		return rc;
	struct lg_model *m = L->m;
	float *div = malloc(512 * sizeof *div);
	if (!div || RQ_GROW(m->owned, m->n_owned, m->cap_owned, 16)) {
		free(div);
		return rq_errf(L->err, -ENOMEM, "out of memory");
	}
	lg_nvfp4_div_table(gs, div);
	m->owned[m->n_owned++] = div;
	out->kind = LG_W_NVFP4;
	out->packed = ld_data(L, p);
	out->scales = ld_data(L, s);
	out->global_scale = gs;
	out->gs_div = div;
	L->m->n_nvfp4++;
	return bind_nvfp4_act(L, mod, out);
}

/* The bit width b in 1..8 that packs cols columns into `words` int32 words
 * per row (ceil(cols·b/32) == words), 0 when none or more than one does
 * (possible only when cols < 32). */
static int int_bits(int cols, uint64_t words)
{
	int found = 0;
	for (int b = 1; b <= 8; b++)
		if (((uint64_t)cols * b + 31) / 32 == words)
			found = found ? -1 : b;
	return found > 0 ? found : 0;
}

/* INT (pack-quantized): weight_packed I32 [rows, ceil(cols·bits/32)],
 * weight_shape I64 [2] = [rows, cols], weight_scale (bind_qscale), and when
 * asymmetric weight_zero_point I32 [ceil(rows·bits/32), groups]. */
static int bind_int(struct loader *L, const char *mod, struct tref *p, struct lg_linear *out)
{
	char name[256], got[96];
	int rc = 0, rows = out->rows, cols = out->cols;
	const struct st_tensor *t = ld_tensor(L, p);
	const char *path = L->m->files[p->file].path;
	fmt_shape(t, got, sizeof got);
	int bits = t->ndim == 2 && t->shape[0] == (uint64_t)rows ? int_bits(cols, t->shape[1]) : 0;
	if (!bits)
		return rq_errf(L->err, -EPROTO, "%s: tensor %s.weight_packed is I32 %s; a pack-quantized "
		               "[%d, %d] Linear needs [%d, ceil(%d·bits/32)] with one bit width 1..8",
		               path, mod, got, rows, cols, rows, cols);
	p->used = 1;
	snprintf(name, sizeof name, "%s.weight_shape", mod);
	const struct tref *sh = ld_need(L, name, ST_I64, 1, 2, 0, &rc);
	if (!sh)
		return rc;
	int64_t dims[2];
	memcpy(dims, ld_data(L, sh), sizeof dims);
	if (dims[0] != rows || dims[1] != cols)
		return rq_errf(L->err, -EPROTO, "%s: tensor %s = [%lld, %lld], but config.json makes %s "
		               "[%d, %d]", L->m->files[sh->file].path, name, (long long)dims[0],
		               (long long)dims[1], mod, rows, cols);
	if ((rc = bind_qscale(L, mod, out)))
		return rc;
	/* asymmetric: zero points packed down the rows; per tensor (srows 1) has no such form */
	snprintf(name, sizeof name, "%s.weight_zero_point", mod);
	const struct tref *z = ld_find(L, name) ? ld_need(L, name, ST_I32, 2, out->srows == rows ?
	                       ((uint64_t)rows * bits + 31) / 32 : 0, out->groups, &rc) : NULL;
	if (rc)
		return rc;
	out->qzero = z ? ld_data(L, z) : NULL;
	out->kind = LG_W_INT;
	out->qw = ld_data(L, p);
	out->bits = bits;
	out->words = (int)t->shape[1];
	L->m->n_int++;
	return 0;
}

/* FP8 (float-quantized): weight F8_E4M3 [rows, cols] and weight_scale. */
static int bind_fp8(struct loader *L, const char *mod, struct lg_linear *out)
{
	char name[256];
	int rc = 0;
	snprintf(name, sizeof name, "%s.weight", mod);
	const struct tref *w = ld_need(L, name, ST_F8_E4M3, 2, out->rows, out->cols, &rc);
	if (!w)
		return rc;
	if ((rc = bind_qscale(L, mod, out)))
		return rc;
	out->kind = LG_W_FP8;
	out->w8 = ld_data(L, w);
	L->m->n_fp8++;
	if (L->m->cfg.act_fp8 && act_quant_on() && strcmp(mod, "model.embed_tokens")) {
		out->act = LG_A_FP8_TOKEN;
		L->m->n_act++;
	}
	return 0;
}

/* A Linear [rows, cols] in whichever form its tensors say: weight_packed U8
 * (NVFP4) or I32 (INT), weight F8_E4M3 (FP8) or BF16. */
int ld_linear(struct loader *L, const char *mod, int rows, int cols, struct lg_linear *out)
{
	char name[256];
	int rc = 0;
	memset(out, 0, sizeof *out);
	out->rows = rows;
	out->cols = cols;
	snprintf(name, sizeof name, "%s.weight_packed", mod);
	struct tref *p = ld_find(L, name);
	if (p) {
		enum st_dtype dt = ld_tensor(L, p)->dtype;
		snprintf(name, sizeof name, "%s.weight", mod);
		if (ld_find(L, name))
			return rq_errf(L->err, -EPROTO, "%s: module %s has both weight and weight_packed",
			               L->m->dir, mod);
		if (dt == ST_U8)
			return bind_nvfp4(L, mod, out);
		if (dt == ST_I32)
			return bind_int(L, mod, p, out);
		return rq_errf(L->err, -ENOTSUP, "%s: tensor %s.weight_packed is %s; this engine reads "
		               "U8 (nvfp4-pack-quantized) or I32 (pack-quantized)",
		               L->m->files[p->file].path, mod, st_dtype_name(dt));
	}
	snprintf(name, sizeof name, "%s.weight", mod);
	struct tref *r = ld_find(L, name);
	if (r && ld_tensor(L, r)->dtype == ST_F8_E4M3)
		return bind_fp8(L, mod, out);
	if (r && (ld_tensor(L, r)->dtype == ST_F16 || ld_tensor(L, r)->dtype == ST_F32)) {
		enum st_dtype dt = ld_tensor(L, r)->dtype;
		const struct tref *w = ld_need(L, name, dt, 2, rows, cols, &rc);
		if (!w)
			return rc;
		out->kind = dt == ST_F16 ? LG_W_F16 : LG_W_F32;
		out->w8 = ld_data(L, w);   /* read with memcpy: no alignment assumed */
		L->m->n_bf16++;
		return 0;
	}
	if (r && ld_tensor(L, r)->dtype != ST_BF16)
		return rq_errf(L->err, -ENOTSUP, "%s: tensor %s is %s; this engine reads Linear weights as "
		               "BF16, F16, F32, F8_E4M3 (float-quantized) or compressed-tensors NVFP4/INT "
		               "weight_packed only", L->m->files[r->file].path, name,
		               st_dtype_name(ld_tensor(L, r)->dtype));
	const struct tref *w = ld_need(L, name, ST_BF16, 2, rows, cols, &rc);
	if (!w)
		return rc;
	out->kind = LG_W_BF16;
	out->w = (const uint16_t *)ld_data(L, w);
	L->m->n_bf16++;
	return 0;
}

/* A vector of n values (BF16, F16 or F32) widened into a new float array. */
int ld_vec(struct loader *L, const char *name, int n, float **out)
{
	struct tref *r = ld_find(L, name);
	int rc = 0;
	if (!r)
		return rq_errf(L->err, -EPROTO, "%s/config.json describes tensor %s, which no shard "
		               "holds", L->m->dir, name);
	enum st_dtype dt = ld_tensor(L, r)->dtype;
	if (dt != ST_BF16 && dt != ST_F32 && dt != ST_F16)
		dt = ST_BF16;   /* let ld_need() report the mismatch */
	if (!ld_need(L, name, dt, 1, n, 0, &rc))
		return rc;
	float *v = malloc((size_t)n * sizeof *v);
	if (!v)
		return rq_errf(L->err, -ENOMEM, "out of memory");
	const uint8_t *p = ld_data(L, r);
	for (int i = 0; i < n; i++) {
		if (dt == ST_F32) {
			memcpy(&v[i], p + 4 * (size_t)i, 4);
		} else if (dt == ST_F16) {
			uint16_t h;
			memcpy(&h, p + 2 * (size_t)i, 2);
			v[i] = lg_f16_to_f32(h);
		} else {
			uint16_t b;
			memcpy(&b, p + 2 * (size_t)i, 2);
			v[i] = rq_bf16_to_f32(b);
		}
	}
	*out = v;
	return 0;
}

/* <mod>.bias [rows] widened into an array the model owns. */
static int bind_bias(struct loader *L, const char *mod, struct lg_linear *out)
{
	char name[256];
	float *b = NULL;
	snprintf(name, sizeof name, "%s.bias", mod);
	struct lg_model *m = L->m;
	if (RQ_GROW(m->owned, m->n_owned, m->cap_owned, 16))
		return rq_errf(L->err, -ENOMEM, "out of memory");
	int rc = ld_vec(L, name, out->rows, &b);
	if (rc)
		return rc;
	m->owned[m->n_owned++] = b;
	out->bias = b;
	return 0;
}

/* A Linear and, when the config says it has one, its bias. */
int ld_lin(struct loader *L, const char *mod, int rows, int cols, int bias,
                    struct lg_linear *out)
{
	int rc = ld_linear(L, mod, rows, cols, out);
	return rc ? rc : bias ? bind_bias(L, mod, out) : 0;
}

/* vLLM runs q/k/v, gate/up (dense, shared expert, each routed expert) as one
 * fused Linear with ONE input global scale, the largest of the parts
 * (CompressedTensorsW4A4Fp4: input_global_scale.max(); its MoE method:
 * w13_input_global_scale.max(dim=1)). llm-compressor writes them equal; a
 * checkpoint that does not gets vLLM's choice here too. */
static void fuse_in_gs(struct lg_linear *const *l, int n)
{
	float mx = 0;
	for (int i = 0; i < n; i++)
		if (l[i]->act == LG_A_NVFP4 && l[i]->in_gs > mx)
			mx = l[i]->in_gs;
	for (int i = 0; i < n; i++)
		if (l[i]->act == LG_A_NVFP4)
			l[i]->in_gs = mx;
}

void ld_fuse_acts(struct lg_model *m)
{
	for (int i = 0; i < m->cfg.n_layers; i++) {
		struct lg_layer *ly = &m->layers[i];
		fuse_in_gs((struct lg_linear *const[]){&ly->q, &ly->k, &ly->v}, 3);
		if (!ly->moe) {
			fuse_in_gs((struct lg_linear *const[]){&ly->gate, &ly->up}, 2);
			continue;
		}
		fuse_in_gs((struct lg_linear *const[]){&ly->sg, &ly->su}, 2);
		for (int e = 0; ly->eg && e < m->cfg.n_experts; e++)
			fuse_in_gs((struct lg_linear *const[]){&ly->eg[e], &ly->eu[e]}, 2);
	}
}
