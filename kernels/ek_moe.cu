/* ek_moe.cu — the routed experts of a MoE block (ek.h ek_moe).
 *
 * Decode and small batches (T <= 16): two launches, expert ids never leave
 * the device.
 *   1. GV_GU   one block per (slot, row block): gate and up rows of expert
 *              ids[slot] against x[slot / k], h[slot] = silu(g) ⊙ u;
 *   2. GV_DOWN one block per (slot, row block): d[slot] = D_e · h[slot]; the
 *              last block of each row block to finish sums the token's k
 *              slots in pick order into out (counters in `work`, left at 0).
 * Prefill (T > 16): the ids come to the host once (one synchronising copy),
 * slots are grouped by expert (ascending expert, then token — the CPU
 * engine's order), and three grouped tile GEMMs (gate, up, down) plus a
 * SwiGLU and a combine kernel run over the groups.
 *
 * FP8-input experts (ek_moe_a8, FP8_DYNAMIC): x quantized per token once into
 * xq (the ek_moe_q region), read by gate/up; h quantized per slot in place
 * after the observer, before down.
 *
 * W4A4 experts (ek_moe_q): each slot's input is quantized with its expert's
 * input global scale into xq[slot] first (k_moe_actq), gate/up then read
 * xq[slot] (the GEMVs with k = 1, the grouped GEMMs with xq in grouped slot
 * order), and h is quantized in place with the expert's down scale before
 * the down projection: vLLM's rule (ek_actq_rule.h), so the twin's bits.
 *
 * work layout (sizes from ek_moe_work_bytes):
 *   cnt[EK_WORK_CNT_BYTES / 4] | h[S][I] g[S][I] u[S][I] d[S][H] | slot_tok[S] pos_of[S] tiles[...]
 *   | (ek_moe_q) xq[S][H] inv[S]   at ek_moe_work_bytes's first aligned end for this T
 * with S = T·k slots, I = inter, H = hidden: the counters never move with T. */
#include "kernels/ek_dev.cuh"
#include "kernels/ek_actq_rule.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* out[t] = (acc ? out[t] : 0) + scale · Σ_j wts[t·k+j] · d[pos_of[t·k+j]] */
__global__ void k_moe_combine(const float *d, int H, const int *pos_of, const float *wts, int k,
                              float scale, float *out, int ldo, int acc)
{
	pdl_start();
	int t = blockIdx.x;
	for (int r = threadIdx.x; r < H; r += blockDim.x) {
		float s = 0.0f;
		for (int j = 0; j < k; j++)
			s = __fadd_rn(s, __fmul_rn(wts[(size_t)t * k + j],
			                           d[(size_t)pos_of[(size_t)t * k + j] * H + r]));
		float *o = &out[(size_t)t * ldo + r];
		*o = __fadd_rn(acc ? *o : 0.0f, __fmul_rn(scale, s));
	}
}

/* y[r] (cols wide) = the NVFP4 input quantization of x row (xmap ? xmap[r] : r) / xdiv under
 * gs[ids[imap ? imap[r] : r]]; one thread per group of 16 (y may be x when the rows agree). */
__global__ void k_moe_actq(const float *x, int ldx, const int *xmap, int xdiv, float *y, int ldy,
                           int groups, size_t total, const float *gs, const int *ids,
                           const int *imap)
{
	pdl_start();
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		int r = (int)(i / groups), gi = (int)(i % groups);
		int src = xmap ? xmap[r] : r;
		float gsv = gs[ids[imap ? imap[r] : r]];
		const float *xr = x + (size_t)(src / xdiv) * ldx + (size_t)gi * 16;
		float *yr = y + (size_t)r * ldy + (size_t)gi * 16;
		float v[16], a = 0.0f;
#pragma unroll
		for (int j = 0; j < 16; j++) {
			v[j] = xr[j];
			a = fmaxf(a, fabsf(v[j]));
		}
		float sc = ek_actq_nv_scale(a, gsv);
		float inv = ek_actq_nv_inv(sc, gsv), deq = ek_actq_nv_deq(sc, gsv);
#pragma unroll
		for (int j = 0; j < 16; j++)
			yr[j] = ek_actq_nv_elem(v[j], inv, deq);
	}
}

static int moe_actq(struct ek_dev *d, const float *x, int ldx, const int *xmap, int xdiv, float *y,
                    int ldy, int rows, int cols, const float *gs, const int *ids, const int *imap)
{
	size_t total = (size_t)rows * (cols / 16);
	size_t b = (total + 127) / 128, cap = (size_t)d->sms * 16;
	ek_launch(d, k_moe_actq, dim3((unsigned)(b < 1 ? 1 : b > cap ? cap : b)), dim3(128), 0, x, ldx,
	          xmap, xdiv, y, ldy, cols / 16, total, gs, ids, imap);
	return ek_launched(d, "moe actq");
}

static int check_set(struct ek_dev *d, const struct ek_w *W, int rows, int cols, int n,
                     const char *what)
{
	if (!W || !W->data || W->rows != rows || W->cols != cols || W->n != n)
		return ek_fail(d, -EINVAL, "moe: %s set has shape %d x [%d x %d], expected %d x [%d x %d]",
		               what, W ? W->n : 0, W ? W->rows : 0, W ? W->cols : 0, n, rows, cols);
	if (W->kind == EK_NVFP4 && (W->cols % 16 || !W->gs))
		return ek_fail(d, -EINVAL, "moe: %s NVFP4 set needs cols %% 16 == 0 and scales", what);
	if ((W->kind == EK_FP8 || W->kind == EK_INT8 || W->kind == EK_INT4) &&
	    (W->gshift < 4 || W->gshift > EK_GSHIFT_ROW))
		return ek_fail(d, -EINVAL, "moe: %s FP8/INT set has scale groups of 2^%d columns", what,
		               W->gshift);
	return 0;
}

/* Host side of the prefill path: groups the S = T·k slots by expert.
 * slot_tok[s] = token of slot s, pos_of[t·k+j] = slot of pick j of token t,
 * tiles = {expert, m0, m1} per 64 slots of one expert. Returns ntiles. */
static int group_slots(const int *ids, int T, int k, int E, int *slot_tok, int *pos_of,
                       int *tiles, int *cnt)
{
	int S = T * k, nt = 0;
	memset(cnt, 0, sizeof(int) * (size_t)(E + 1));
	for (int s = 0; s < S; s++) {
		int e = ids[s] < 0 || ids[s] >= E ? 0 : ids[s];
		cnt[e + 1]++;
	}
	for (int e = 0; e < E; e++)
		cnt[e + 1] += cnt[e];
	for (int e = 0; e < E; e++)
		for (int m0 = cnt[e]; m0 < cnt[e + 1]; m0 += EK_GM_BM) {
			tiles[3 * nt] = e;
			tiles[3 * nt + 1] = m0;
			tiles[3 * nt + 2] = m0 + EK_GM_BM < cnt[e + 1] ? m0 + EK_GM_BM : cnt[e + 1];
			nt++;
		}
	for (int s = 0; s < S; s++) {        /* token-ascending within an expert */
		int e = ids[s] < 0 || ids[s] >= E ? 0 : ids[s], slot = cnt[e]++;
		slot_tok[slot] = s / k;
		pos_of[s] = slot;
	}
	return nt;
}

/* ek_moe, and ek_moe_q when gs_gu (and gs_dn) are given, ek_moe_a8 when a8;
 * obs_dn (ek_moe_obs): the calibration observer of the down inputs, fed from
 * h before its quantization (GEMV path: h row = slot; prefill: h row =
 * pos_of[slot]). */
static int moe(struct ek_dev *d, const struct ek_w *G, const struct ek_w *U, const struct ek_w *D,
               const int *ids, const float *wts, int k, float scale, const float *x, int ldx,
               float *out, int ldo, int T, int acc, void *work, const float *gs_gu,
               const float *gs_dn, float *obs_dn, int obs_stride, int a8 = 0)
{
	if (!G || !U || !D || T < 1 || k < 1 || !work)
		return ek_fail(d, -EINVAL, "moe: bad arguments (T %d, k %d)", T, k);
	int I = G->rows, H = G->cols, E = G->n, S = T * k, rc;
	if ((rc = check_set(d, U, I, H, E, "up")) || (rc = check_set(d, D, H, I, E, "down")) ||
	    (rc = check_set(d, G, I, H, E, "gate")))
		return rc;
	if (G->kind != U->kind || G->gshift != U->gshift)
		return ek_fail(d, -EINVAL, "moe: gate and up sets differ in kind or scale groups");
	if (ldx < H || ldo < H)
		return ek_fail(d, -EINVAL, "moe: ldx %d / ldo %d < hidden %d", ldx, ldo, H);
	int *cnt = (int *)work;
	float *h = (float *)((char *)work + EK_WORK_CNT_BYTES), *g = h + (size_t)S * I;
	float *u = g + (size_t)S * I, *dd = u + (size_t)S * I;
	int *ints = (int *)(dd + (size_t)S * H);
	int *slot_tok = ints, *pos_of = ints + S, *tiles = ints + 2 * S;
	if ((size_t)(H + 15) / 16 + 1 > EK_WORK_CNT_BYTES / sizeof(int))
		return ek_fail(d, -EINVAL, "moe: hidden %d too large for the counters", H);
	int q = gs_gu != NULL;
	if (q && (!gs_dn || H % 16 || I % 16))
		return ek_fail(d, -EINVAL, "moe_q: needs both scale vectors, hidden %d and inter %d "
		               "multiples of 16", H, I);
	/* ek_moe_q's region: after what ek_moe_work_bytes gives T without it */
	size_t qoff = ek_moe_work_bytes(T, k, I, H) - (((size_t)S * H * 4 + (size_t)S * 4 + 255) & ~(size_t)255);
	qoff &= ~(size_t)255;
	float *xq = (float *)((char *)work + qoff);
	int *inv = (int *)(xq + (size_t)S * H);
	if (a8) {   /* FP8 per token: x[t] once (xq [T][H]), read by every expert's gate/up */
		if ((rc = ek_actq_fp8(d, x, ldx, xq, H, T, H)))
			return rc;
		x = xq;
		ldx = H;
	}

	if (T <= EK_GEMV_MAX_T) {
		if (q) {   /* xq[s] = quantized x[s / k] under its expert's scale; GEMVs with k = 1 */
			if ((rc = moe_actq(d, x, ldx, NULL, k, xq, H, S, H, gs_gu, ids, NULL)) ||
			    (rc = ek_gv(d, GV_GU, G, U, ids, 1, xq, H, h, I, S, 0, NULL, 0, NULL, 0, NULL)) ||
			    (obs_dn && (rc = ek_obs_rows(d, h, I, NULL, 1, S, I, ids, E, obs_dn, NULL,
			                                 obs_stride))) ||
			    (rc = moe_actq(d, h, I, NULL, 1, h, I, S, I, gs_dn, ids, NULL)))
				return rc;
		} else if ((rc = ek_gv(d, GV_GU, G, U, ids, k, x, ldx, h, I, S, 0, NULL, 0, NULL, 0, NULL)) ||
		           (obs_dn && (rc = ek_obs_rows(d, h, I, NULL, 1, S, I, ids, E, obs_dn, NULL,
		                                        obs_stride))) ||
		           (a8 && (rc = ek_actq_fp8(d, h, I, h, I, S, I)))) {
			return rc;
		}
		return ek_gv(d, GV_DOWN, D, NULL, ids, k, h, I, dd, H, S, acc, wts, scale, out, ldo, cnt);
	}

	if (d->capturing)
		return ek_fail(d, -EINVAL, "moe: %d tokens cannot be captured (at most %d)", T,
		               EK_GEMV_MAX_T);
	size_t maxt = (size_t)S / EK_GM_BM + (size_t)E + 1;
	if (3 * maxt > 2 * (size_t)S + 4096 + 64)
		return ek_fail(d, -EINVAL, "moe: %d experts too many for the tile table", E);
	int *hb = (int *)ek_hbuf(d, (3 * (size_t)S + 3 * maxt + (size_t)E + 1) * sizeof(int));
	if (!hb)
		return -ENOMEM;
	int *hids = hb, *hst = hb + S, *hpos = hst + S, *htiles = hpos + S, *hcnt = htiles + 3 * maxt;
	if ((rc = ek_d2h(d, hids, ids, sizeof(int) * S)) || (rc = ek_sync(d)))
		return rc;
	int nt = group_slots(hids, T, k, E, hst, hpos, htiles, hcnt);
	if ((rc = ek_h2d(d, slot_tok, hst, sizeof(int) * S)) ||
	    (rc = ek_h2d(d, pos_of, hpos, sizeof(int) * S)) ||
	    (rc = ek_h2d(d, tiles, htiles, sizeof(int) * 3 * nt)))
		return rc;
	if (q) {
		/* grouped slot p is slot inv[p] (token inv[p] / k, expert ids[inv[p]]): xq in
		 * grouped order, read by the GEMMs without a gather; h quantized in place.
		 * hst's copy to slot_tok is queued: reused for the map after a sync. */
		if ((rc = ek_sync(d)))
			return rc;
		for (int s = 0; s < S; s++)
			hst[hpos[s]] = s;
		if ((rc = ek_h2d(d, inv, hst, sizeof(int) * S)) ||
		    (rc = moe_actq(d, x, ldx, inv, k, xq, H, S, H, gs_gu, ids, inv)) ||
		    (rc = ek_gm(d, G, xq, H, NULL, g, I, S, 0, tiles, nt)) ||
		    (rc = ek_gm(d, U, xq, H, NULL, u, I, S, 0, tiles, nt)) ||
		    (rc = ek_swiglu(d, h, I, g, I, u, I, S, I)) ||
		    (obs_dn && (rc = ek_obs_rows(d, h, I, pos_of, 1, S, I, ids, E, obs_dn, NULL,
		                                 obs_stride))) ||
		    (rc = moe_actq(d, h, I, NULL, 1, h, I, S, I, gs_dn, ids, inv)) ||
		    (rc = ek_gm(d, D, h, I, NULL, dd, H, S, 0, tiles, nt)))
			return rc;
	} else if ((rc = ek_gm(d, G, x, ldx, slot_tok, g, I, S, 0, tiles, nt)) ||
	           (rc = ek_gm(d, U, x, ldx, slot_tok, u, I, S, 0, tiles, nt)) ||
	           (rc = ek_swiglu(d, h, I, g, I, u, I, S, I)) ||
	           (obs_dn && (rc = ek_obs_rows(d, h, I, pos_of, 1, S, I, ids, E, obs_dn, NULL,
	                                        obs_stride))) ||
	           (a8 && (rc = ek_actq_fp8(d, h, I, h, I, S, I))) ||
	           (rc = ek_gm(d, D, h, I, NULL, dd, H, S, 0, tiles, nt))) {
		return rc;
	}
	ek_launch(d, k_moe_combine, dim3(T), dim3(256), 0, dd, H, pos_of, wts, k, scale, out, ldo, acc);
	if ((rc = ek_launched(d, "moe combine")))
		return rc;
	return ek_sync(d);             /* the pinned tables are reused by the next call */
}

extern "C" int ek_moe(struct ek_dev *d, const struct ek_w *G, const struct ek_w *U,
                      const struct ek_w *D, const int *ids, const float *wts, int k, float scale,
                      const float *x, int ldx, float *out, int ldo, int T, int acc, void *work)
{
	return moe(d, G, U, D, ids, wts, k, scale, x, ldx, out, ldo, T, acc, work, NULL, NULL, NULL, 0);
}

extern "C" int ek_moe_q(struct ek_dev *d, const struct ek_w *G, const struct ek_w *U,
                        const struct ek_w *D, const int *ids, const float *wts, int k, float scale,
                        const float *x, int ldx, float *out, int ldo, int T, int acc, void *work,
                        const float *gs_gu, const float *gs_dn)
{
	if (!gs_gu)
		return ek_fail(d, -EINVAL, "moe_q: no input global scales");
	return moe(d, G, U, D, ids, wts, k, scale, x, ldx, out, ldo, T, acc, work, gs_gu, gs_dn, NULL, 0);
}

extern "C" int ek_moe_obs(struct ek_dev *d, const struct ek_w *G, const struct ek_w *U,
                          const struct ek_w *D, const int *ids, const float *wts, int k,
                          float scale, const float *x, int ldx, float *out, int ldo, int T,
                          int acc, void *work, const float *gs_gu, const float *gs_dn,
                          float *obs_dn, int obs_stride)
{
	if (!obs_dn || obs_stride < 1 || (gs_gu && !gs_dn))
		return ek_fail(d, -EINVAL, "moe_obs: no observer (stride %d) or one scale vector only",
		               obs_stride);
	return moe(d, G, U, D, ids, wts, k, scale, x, ldx, out, ldo, T, acc, work, gs_gu, gs_dn,
	           obs_dn, obs_stride);
}

extern "C" int ek_moe_a8(struct ek_dev *d, const struct ek_w *G, const struct ek_w *U,
                         const struct ek_w *D, const int *ids, const float *wts, int k,
                         float scale, const float *x, int ldx, float *out, int ldo, int T, int acc,
                         void *work, float *obs_dn, int obs_stride)
{
	if (obs_dn && obs_stride < 1)
		return ek_fail(d, -EINVAL, "moe_a8: observer stride %d", obs_stride);
	return moe(d, G, U, D, ids, wts, k, scale, x, ldx, out, ldo, T, acc, work, NULL, NULL, obs_dn,
	           obs_stride, 1);
}
