/* test_ek_attn_cpu.c — CPU twins of the layer ops (RMSNorm, SwiGLU, add,
 * embedding, QK-norm + RoPE + KV write, attention) and the deterministic
 * fills, against double-precision references written here (suite unit).
 * Attention is checked on full and sliding (ring) caches, GQA, both gates
 * and the three cache types; RoPE on partial rotation with YaRN-like scale. */
#include "tests/kernels/test_ek_util.h"
#include "kernels/ek_attn_int.h"
#include "quant/quant.h"

#include <stdio.h>

static void test_rmsnorm_swiglu(void)
{
	int T = 3, n = 200, ldx = 203, ldo = 207;
	float *x = tu_floats((size_t)T * ldx, -3, 3), *w = tu_floats(n, 0.5f, 1.5f);
	float *o = tu_alloc(sizeof(float) * T * ldo), *got = tu_alloc(sizeof(float) * T * n);
	double *ref = tu_alloc(sizeof(double) * T * n);
	ek_rmsnorm_cpu(o, ldo, x, ldx, w, T, n, 1e-6f);
	for (int t = 0; t < T; t++) {
		double ss = 0;
		for (int i = 0; i < n; i++)
			ss += (double)x[t * ldx + i] * x[t * ldx + i];
		double r = 1 / sqrt(ss / n + 1e-6);
		for (int i = 0; i < n; i++) {
			ref[t * n + i] = w[i] * x[t * ldx + i] * r;
			got[t * n + i] = o[t * ldo + i];
		}
	}
	tu_close("rmsnorm T=3 n=200 (strided)", got, ref, NULL, (size_t)T * n, 1e-6, 1e-7);
	ek_rmsnorm_cpu(x, ldx, x, ldx, w, T, n, 1e-6f);
	for (int t = 0; t < T; t++)
		for (int i = 0; i < n; i++)
			got[t * n + i] = x[t * ldx + i];
	tu_close("rmsnorm in place", got, ref, NULL, (size_t)T * n, 1e-6, 1e-7);

	float *g = tu_floats((size_t)T * ldx, -30, 30), *u = tu_floats((size_t)T * ldo, -2, 2);
	ek_swiglu_cpu(o, ldo, g, ldx, u, ldo, T, n);
	for (int t = 0; t < T; t++)
		for (int i = 0; i < n; i++) {
			double gv = g[t * ldx + i];
			ref[t * n + i] = gv / (1 + exp(-gv)) * u[t * ldo + i];
			got[t * n + i] = o[t * ldo + i];
		}
	tu_close("swiglu T=3 n=200 (|g| up to 30)", got, ref, NULL, (size_t)T * n, 1e-6, 1e-30);

	float a[5] = {1, 2, 3, 4, 5}, b[5] = {0.5f, -2, 1e-8f, 4, -5};
	ek_add_cpu(a, b, 5);
	TAP_OK(a[0] == 1.5f && a[1] == 0 && a[2] == 3 && a[3] == 8 && a[4] == 0, "add: x += y");

	uint16_t table[4 * 6];
	for (int i = 0; i < 24; i++)
		table[i] = rq_f32_to_bf16((float)i - 7.25f);
	int toks[3] = {2, 0, 3};
	float e[18];
	ek_embed_cpu(e, table, toks, 3, 6);
	int bad = 0;
	for (int t = 0; t < 3; t++)
		for (int i = 0; i < 6; i++)
			bad += e[t * 6 + i] != rq_bf16_to_f32(table[toks[t] * 6 + i]);
	TAP_OK(bad == 0, "embed: rows of the BF16 table by token id");
	free(x); free(w); free(o); free(got); free(ref); free(g); free(u);
}

static void test_fills(void)
{
	uint16_t *p = tu_alloc(2 * 100000), *q = tu_alloc(2 * 100000);
	ek_fill_bf16_cpu(p, 100000, 0.02f, 7);
	ek_fill_bf16_cpu(q, 100000, 0.02f, 7);
	double mx = 0, mean = 0;
	for (int i = 0; i < 100000; i++) {
		float v = rq_bf16_to_f32(p[i]);
		mx = fabs(v) > mx ? fabs(v) : mx;
		mean += v / 100000.0;
	}
	TAP_OK(!memcmp(p, q, 200000) && mx <= 0.0201 && mx > 0.019 && fabs(mean) < 3e-4,
	       "fill bf16: deterministic, uniform in [-amp, amp] (max %.4f, mean %.2e)", mx, mean);
	ek_fill_bf16_cpu(q, 100000, 0.02f, 8);
	TAP_OK(memcmp(p, q, 200000), "fill bf16: another seed, other values");
	uint8_t *b = tu_alloc(100000);
	ek_fill_bytes_cpu(b, 100000, 0x30, 0x38, 1);
	int lo = 255, hi = 0;
	for (int i = 0; i < 100000; i++) {
		lo = b[i] < lo ? b[i] : lo;
		hi = b[i] > hi ? b[i] : hi;
	}
	TAP_OK(lo == 0x30 && hi == 0x38, "fill bytes: every value in [lo, hi] reached");
	free(p);
	free(q);
	free(b);
}

/* ---------------------------------------------------- RoPE + KV write */

static float kv_get(const void *c, int kvtype, size_t i)
{
	return kvtype == EK_KV_F32 ? ((const float *)c)[i]
	     : kvtype == EK_KV_BF16 ? rq_bf16_to_f32(((const uint16_t *)c)[i])
	     : rq_e4m3_to_f32(((const uint8_t *)c)[i]);
}

static void test_rope(int kvtype)
{
	int T = 4, nh = 6, nkv = 2, hd = 16, rot = 8, cap = 5, pos = 7;
	int ldq = nh * hd + 3, ldk = nkv * hd + 1, ldv = nkv * hd + 2;
	float *q = tu_floats((size_t)T * ldq, -2, 2), *k = tu_floats((size_t)T * ldk, -2, 2);
	float *v = tu_floats((size_t)T * ldv, -2, 2), *qn = tu_floats(hd, 0.5f, 1.5f);
	float *kn = tu_floats(hd, 0.5f, 1.5f), inv[4] = {1.0f, 0.0376f, 7.1e-4f, 4.2e-7f};
	float *q0 = tu_alloc(sizeof(float) * T * ldq), *k0 = tu_alloc(sizeof(float) * T * ldk);
	memcpy(q0, q, sizeof(float) * T * ldq);
	memcpy(k0, k, sizeof(float) * T * ldk);
	size_t cb = ek_kv_bytes(kvtype, cap, nkv, hd);
	void *kc = tu_alloc(cb), *vc = tu_alloc(cb);
	float as = 1.4852f;
	ek_qk_rope_kv_cpu(q, ldq, k, ldk, v, ldv, T, nh, nkv, hd, qn, kn, 1e-6f, inv, rot, as, &pos, kc,
	                  vc, kvtype, cap);
	int nq = T * (nh + nkv) * hd, n = 0;
	float *got = tu_alloc(sizeof(float) * nq);
	double *ref = tu_alloc(sizeof(double) * nq), *mag = tu_alloc(sizeof(double) * nq);
	int cache_bad = 0;
	for (int t = 0; t < T; t++)
		for (int hh = 0; hh < nh + nkv; hh++) {
			int isk = hh >= nh;
			const float *x0 = isk ? k0 + t * ldk + (hh - nh) * hd : q0 + t * ldq + hh * hd;
			const float *x1 = isk ? k + t * ldk + (hh - nh) * hd : q + t * ldq + hh * hd;
			const float *w = isk ? kn : qn;
			double ss = 0, xn[16];
			for (int i = 0; i < hd; i++)
				ss += (double)x0[i] * x0[i];
			for (int i = 0; i < hd; i++)
				xn[i] = w[i] * x0[i] / sqrt(ss / hd + 1e-6);
			for (int i = 0; i < hd; i++) {
				double o = xn[i];
				if (i < rot) {
					int ii = i % (rot / 2);
					double f = (float)(pos + t) * inv[ii];   /* the fp32 product, like the engine */
					double c = cos(f) * as, s = sin(f) * as;
					o = i < rot / 2 ? xn[ii] * c - xn[ii + rot / 2] * s
					                : xn[ii + rot / 2] * c + xn[ii] * s;
				}
				ref[n] = o;
				mag[n] = 2 * as * (fabs(xn[i]) + fabs(xn[i % (rot / 2) + (i < rot ? rot / 2 : 0)]));
				got[n++] = x1[i];
			}
			if (isk) {
				size_t off = ((size_t)(hh - nh) * cap + (pos + t) % cap) * hd;
				for (int i = 0; i < hd; i++) {
					float kw = kvtype == EK_KV_F32 ? x1[i] : kvtype == EK_KV_BF16
					         ? rq_bf16_to_f32(rq_f32_to_bf16(x1[i])) : rq_e4m3_to_f32(rq_f32_to_e4m3(x1[i]));
					const float *vv = v + t * ldv + (hh - nh) * hd;
					float vw = kvtype == EK_KV_F32 ? vv[i] : kvtype == EK_KV_BF16
					         ? rq_bf16_to_f32(rq_f32_to_bf16(vv[i])) : rq_e4m3_to_f32(rq_f32_to_e4m3(vv[i]));
					if (t >= T - cap && (kv_get(kc, kvtype, off + i) != kw || kv_get(vc, kvtype, off + i) != vw))
						cache_bad++;
				}
			}
		}
	char what[128];
	snprintf(what, sizeof what, "qk-norm + partial rope (%d of %d dims, scale %.4g) at positions %d..%d",
	         rot, hd, as, pos, pos + T - 1);
	if (kvtype == EK_KV_F32)
		tu_close(what, got, ref, mag, nq, 1e-6, 1e-7);
	TAP_OK(cache_bad == 0, "kv write (%s): ring slots pos %% %d hold k, v as stored type",
	       kvtype == EK_KV_F32 ? "f32" : kvtype == EK_KV_BF16 ? "bf16" : "fp8", cap);
	free(q); free(k); free(v); free(qn); free(kn); free(q0); free(k0); free(kc); free(vc);
	free(got); free(ref); free(mag);
}

/* ---------------------------------------------------------- attention */

static void test_attn_shape(int kvtype, int nh, int nkv, int hd, int window, int gate, int T,
                            int pos, int cap, int max_keys, double rtol)
{
	int rep = nh / nkv, ldq = nh * hd + 1, ldo = nh * hd + 2;
	int ldg = gate == 2 ? nh * hd : nh + 1;
	float *q = tu_floats((size_t)T * ldq, -1.5f, 1.5f), *g = tu_floats((size_t)T * ldg, -3, 3);
	size_t cb = ek_kv_bytes(kvtype, cap, nkv, hd), ne = (size_t)cap * nkv * hd;
	void *kc = tu_alloc(cb), *vc = tu_alloc(cb);
	float *kf = tu_floats(ne, -1.5f, 1.5f), *vf = tu_floats(ne, -2, 2);
	for (size_t i = 0; i < ne; i++) {        /* the cache as stored */
		if (kvtype == EK_KV_F32) {
			((float *)kc)[i] = kf[i];
			((float *)vc)[i] = vf[i];
		} else if (kvtype == EK_KV_BF16) {
			((uint16_t *)kc)[i] = rq_f32_to_bf16(kf[i]);
			((uint16_t *)vc)[i] = rq_f32_to_bf16(vf[i]);
		} else {
			((uint8_t *)kc)[i] = rq_f32_to_e4m3(kf[i]);
			((uint8_t *)vc)[i] = rq_f32_to_e4m3(vf[i]);
		}
	}
	float *out = tu_alloc(sizeof(float) * T * ldo), *got = tu_alloc(sizeof(float) * T * nh * hd);
	double *ref = tu_alloc(sizeof(double) * T * nh * hd), *mag = tu_alloc(sizeof(double) * T * nh * hd);
	int rc = ek_attn_cpu(out, ldo, q, ldq, g, ldg, gate, T, nh, nkv, hd, kc, vc, kvtype, cap, &pos,
	                     window, max_keys, NULL);
	double *sc = tu_alloc(sizeof(double) * (pos + T + 1));
	for (int t = 0; t < T; t++) {
		int p = pos + t, lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
		for (int h = 0; h < nh; h++) {
			size_t base = (size_t)(h / rep) * cap * hd;
			double mx = -INFINITY, sum = 0;
			for (int j = lo; j <= p; j++) {
				double s = 0;
				for (int i = 0; i < hd; i++)
					s += (double)q[t * ldq + h * hd + i] * kv_get(kc, kvtype, base + (size_t)(j % cap) * hd + i);
				sc[j] = s / sqrt((double)hd);
				mx = sc[j] > mx ? sc[j] : mx;
			}
			for (int j = lo; j <= p; j++)
				sum += (sc[j] = exp(sc[j] - mx));
			for (int i = 0; i < hd; i++) {
				double o = 0, m = 0;
				for (int j = lo; j <= p; j++) {
					double vv = kv_get(vc, kvtype, base + (size_t)(j % cap) * hd + i);
					o += sc[j] / sum * vv;
					m += sc[j] / sum * fabs(vv);
				}
				double gv = gate == 1 ? g[t * ldg + h] : gate == 2 ? g[t * ldg + h * hd + i] : 0;
				double gf = gate ? (gv > 20 ? gv : log1p(exp(gv))) : 1;
				ref[(size_t)t * nh * hd + h * hd + i] = o * gf;
				mag[(size_t)t * nh * hd + h * hd + i] = (m + 1e-3) * gf;
				got[(size_t)t * nh * hd + h * hd + i] = out[t * ldo + h * hd + i];
			}
		}
	}
	char what[200];
	int lo = ek_at_lo(pos + T - 1, window), nch = ek_at_chunks(pos + T - lo);
	int nsp = ek_at_nsplit(max_keys) < nch ? ek_at_nsplit(max_keys) : nch;
	snprintf(what, sizeof what, "attention %s %d/%d heads hd %d, %s, gate %d, T=%d at %d, ring %d, "
	         "max_keys %d (last token: %d chunks in %d splits)",
	         kvtype == EK_KV_F32 ? "f32" : kvtype == EK_KV_BF16 ? "bf16" : "fp8", nh, nkv, hd,
	         window ? "sliding" : "full", gate, T, pos, cap, max_keys, nch, nsp);
	if (rc)
		TAP_OK(0, "%s: rc %d", what, rc);
	else
		tu_close(what, got, ref, mag, (size_t)T * nh * hd, rtol, 1e-7);
	free(q); free(g); free(kc); free(vc); free(kf); free(vf); free(out); free(got); free(ref);
	free(mag); free(sc);
}

static void test_attn(int kvtype, int window, int gate, int T, int pos, int cap)
{
	test_attn_shape(kvtype, 6, 2, 16, window, gate, T, pos, cap, pos + T, 2e-6);
}

/* The decomposition both the kernel and the twin use (ek_attn_int.h): the
 * splits of a token cover its chunks exactly once, none empty; query-head
 * groups cover the heads, none empty, <= EK_AT_QG; and the block counts the
 * kernel's header comment gives for Laguna S 2.1 on a 132-SM H200. */
static void test_decomposition(void)
{
	int bad = 0, cases = 0;
	for (int n = 1; n <= 5000; n += n < 200 ? 1 : 37)
		for (int mk = 1; mk <= 20000; mk = mk * 3 + 1) {
			int ns = ek_at_nsplit(mk), nch = ek_at_chunks(n), nsp = ns < nch ? ns : nch, next = 0;
			bad += ns < 1 || ns > EK_AT_SPLITS || nch * EK_AT_CHUNK < n || (nch - 1) * EK_AT_CHUNK >= n;
			for (int sp = 0; sp < nsp; sp++) {
				int c0, c1;
				ek_at_range(nch, nsp, sp, &c0, &c1);
				bad += c0 != next || c1 <= c0;
				next = c1;
			}
			bad += next != nch;
			cases++;
		}
	TAP_OK(bad == 0, "splits cover every chunk once, none empty (%d (keys, max_keys) cases)", cases);
	bad = 0;
	for (int rep = 1; rep <= 128; rep++) {
		int ng, per, covered = 0;
		ek_at_groups(rep, &ng, &per);
		for (int gi = 0; gi < ng; gi++) {
			int nq = rep - gi * per < per ? rep - gi * per : per;
			bad += nq < 1 || nq > EK_AT_QG;
			covered += nq;
		}
		bad += covered != rep;
	}
	TAP_OK(bad == 0, "query-head groups cover 1..128 heads per kv head, 1..%d each", EK_AT_QG);
	bad = 0;
	for (int rep = 1; rep <= 128; rep++)
		for (int cap = 1; cap <= 200; cap++)
			for (int s0 = 0; s0 < cap; s0 += 1 + cap / 7)
				for (int j = 0; j < EK_AT_CHUNK; j++) {
					int sl = ek_at_slot(s0, j, cap);
					bad += sl < 0 || sl >= cap || (j < cap && sl != (s0 + j) % cap);
				}
	TAP_OK(bad == 0, "ring slots: in bounds for every cap, (s0 + j) %% cap for j < cap");
	/* blocks of one layer: groups x live splits x kv heads */
	struct { int rep, window, max_keys, pos, blocks; const char *what; } L[] = {
		{9, 512, 512, 128, 72, "sliding, position 128"},
		{9, 512, 512, 600, 192, "sliding, position 600"},
		{9, 512, 512, 100000, 192, "sliding, position 100000"},
		{6, 0, 16384, 2047, 512, "full, position 2047"},
		{6, 0, 16384, 2048, 528, "full, position 2048"},
		{6, 0, 16384, 16383, 1024, "full, position 16383"},
	};
	for (size_t i = 0; i < sizeof L / sizeof L[0]; i++) {
		int ng, per, lo = ek_at_lo(L[i].pos, L[i].window), nch = ek_at_chunks(L[i].pos - lo + 1);
		int ns = ek_at_nsplit(L[i].max_keys), nsp = ns < nch ? ns : nch;
		ek_at_groups(L[i].rep, &ng, &per);
		int blocks = ng * nsp * 8;
		TAP_OK(blocks == L[i].blocks, "Laguna S 2.1 %s: %d groups x %d splits x 8 kv heads = %d "
		       "blocks (expected %d)", L[i].what, ng, nsp, blocks, L[i].blocks);
	}
	size_t wb = ek_attn_work_bytes(16, 72, 128, 1 << 20);
	TAP_OK(wb == (size_t)16 * 72 * EK_AT_SPLITS * 130 * 4, "work for T=16, 72 heads, 1M keys: "
	       "%.1f MB (bounded by %d splits)", wb / 1e6, EK_AT_SPLITS);
}

int main(void)
{
	test_rmsnorm_swiglu();
	test_fills();
	test_rope(EK_KV_F32);
	test_rope(EK_KV_BF16);
	test_rope(EK_KV_FP8);
	test_attn(EK_KV_F32, 0, 0, 1, 0, 64);
	test_attn(EK_KV_F32, 0, 1, 3, 40, 64);
	test_attn(EK_KV_BF16, 0, 2, 2, 61, 64);
	test_attn(EK_KV_FP8, 0, 1, 1, 20, 32);
	test_attn(EK_KV_F32, 16, 1, 1, 100, 16);
	test_attn(EK_KV_F32, 16, 1, 5, 100, 20);
	test_attn(EK_KV_BF16, 16, 2, 20, 7, 35);
	/* the decode kernels' cut (chunks of 64, splits, merge) at Laguna's head
	 * size: the twin, which computes it in fp32, against the double softmax */
	test_decomposition();
	for (int kv = EK_KV_F32; kv <= EK_KV_FP8; kv++) {
		test_attn_shape(kv, 18, 2, 128, 512, 1, 1, 128, 512, 512, 2e-6);   /* ring, 3 chunks */
		test_attn_shape(kv, 18, 2, 128, 512, 1, 1, 600, 512, 512, 2e-6);   /* ring wrapped */
		test_attn_shape(kv, 18, 2, 128, 512, 2, 3, 1024, 514, 512, 2e-6);  /* small prefill */
		test_attn_shape(kv, 12, 2, 128, 0, 1, 1, 2047, 2048, 2048, 2e-6);  /* 32 splits */
		test_attn_shape(kv, 12, 2, 128, 0, 1, 1, 16383, 16384, 16384, 2e-6); /* 64 x 4 chunks */
	}
	test_attn_shape(EK_KV_BF16, 12, 2, 128, 0, 0, 2, 2100, 4096, 4096, 2e-6); /* 33 chunks, 64 splits */
	test_attn_shape(EK_KV_F32, 10, 2, 64, 0, 1, 4, 1000, 1100, 100, 2e-6);  /* more keys than max_keys */
	test_attn_shape(EK_KV_FP8, 4, 1, 8, 100, 1, 1, 300, 100, 100, 2e-6);    /* hd 8: 8-byte vectors */
	test_attn_shape(EK_KV_F32, 4, 2, 256, 0, 2, 1, 700, 701, 701, 2e-6);    /* hd 256 */
	test_attn_shape(EK_KV_BF16, 10, 2, 32, 40, 1, 16, 90, 60, 40, 2e-6);    /* T=16 on a small ring */
	return tap_done();
}
