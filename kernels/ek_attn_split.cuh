/* ek_attn_split.cuh — the decode attention kernels (k_attn_split,
 * k_attn_merge; the decomposition is described at the top of ek_attn.cu)
 * and their argument block. Internal to kernels/ (ek_attn.cu) and to
 * tests/kernels/test_ek_attn_simt.cpp, which runs these very kernels on the
 * host under a SIMT emulation (tests/kernels/emul/simt.h).
 *
 * Needs, defined before it is included: ek_dev.cuh's device helpers
 * (pdl_start, warp_max, warp_sum, dsoftplus) or the emulation's, __ldg,
 * __shfl_xor_sync, __syncthreads, and float2 at_fp8x2(uint32_t b): the two
 * E4M3 bytes of b (low byte first) as floats. */
#ifndef RQ_KERNELS_EK_ATTN_SPLIT_CUH
#define RQ_KERNELS_EK_ATTN_SPLIT_CUH

#include "kernels/ek_attn_int.h"

/* ek_attn's arguments (ek.h) and the decomposition's numbers. */
struct at_args {
	float *out;                /* [T][ldo], head h at h·hd */
	int ldo;
	const float *q;            /* [T][ldq], head h at h·hd */
	int ldq;
	const float *g;            /* gate logits [T][ldg]: [nh] (gate 1) or [nh·hd] (gate 2) */
	int ldg, gate, T, nh, nkv, hd;
	const void *kc, *vc;       /* [nkv][cap][hd] of the KV type */
	int cap;
	const int *pos;            /* device: position of token 0 */
	int window;                /* 0: full layer */
	int ns;                    /* splits of the grid (ek_at_nsplit(max_keys)) */
	int ng, per;               /* query-head groups per kv head, heads per group */
	float *po;                 /* [T][nh][ns][hd] partial outputs */
	float *pml;                /* [T][nh][ns][2] partial max, sum */
	float scale;
	int tq;                    /* prefill: tokens per block */
};

/* The argument block of one call (ek_attn's, and the host emulation's):
 * split count, head groups, the partials' places in work, 1/sqrt(hd). */
static inline at_args at_make(float *out, int ldo, const float *q, int ldq, const float *g, int ldg,
                              int gate, int T, int nh, int nkv, int hd, const void *kc,
                              const void *vc, int cap, const int *pos, int window, int max_keys,
                              void *work)
{
	at_args a = {};
	a.out = out;
	a.ldo = ldo;
	a.q = q;
	a.ldq = ldq;
	a.g = g;
	a.ldg = ldg;
	a.gate = gate;
	a.T = T;
	a.nh = nh;
	a.nkv = nkv;
	a.hd = hd;
	a.kc = kc;
	a.vc = vc;
	a.cap = cap;
	a.pos = pos;
	a.window = window;
	a.ns = ek_at_nsplit(max_keys);
	ek_at_groups(nh / nkv, &a.ng, &a.per);
	a.po = (float *)work;
	a.pml = a.po + (size_t)T * nh * a.ns * hd;
	a.scale = (float)(1.0 / sqrt((double)hd));
	return a;
}

static_assert(EK_AT_THREADS == 2 * EK_AT_CHUNK, "two threads per key in the score phase");
static_assert(EK_AT_CHUNK == 64, "the softmax phase gives each lane two keys");
static_assert(EK_AT_THREADS / 32 >= EK_AT_QG, "one warp per query head of a group");
static_assert(EK_AT_THREADS >= EK_AT_SPLITS, "the merge loads one split per thread");

/* One vector (VE elements at element index i) of a cache row, raw. */
template <int KV, int VE>
static __device__ __forceinline__ uint4 ld_vec(const void *c, size_t i)
{
	if (KV == EK_KV_FP8 && VE == 8) {
		uint2 v = __ldg((const uint2 *)((const uint8_t *)c + i));
		return make_uint4(v.x, v.y, 0u, 0u);
	}
	const char *b = (const char *)c + i * (KV == EK_KV_F32 ? 4 : KV == EK_KV_BF16 ? 2 : 1);
	return __ldg((const uint4 *)b);
}

template <int KV, int VE>
static __device__ __forceinline__ void cvt_vec(uint4 r, float *v)
{
	const uint32_t w[4] = {r.x, r.y, r.z, r.w};
	if (KV == EK_KV_F32) {
#pragma unroll
		for (int z = 0; z < 4; z++)
			v[z] = __uint_as_float(w[z]);
	} else if (KV == EK_KV_BF16) {
#pragma unroll
		for (int z = 0; z < 4; z++) {
			v[2 * z] = __uint_as_float(w[z] << 16);
			v[2 * z + 1] = __uint_as_float(w[z] & 0xFFFF0000u);
		}
	} else {
#pragma unroll
		for (int z = 0; z < VE / 2; z++) {
			float2 f = at_fp8x2((w[z / 2] >> (16 * (z & 1))) & 0xFFFFu);
			v[2 * z] = f.x;
			v[2 * z + 1] = f.y;
		}
	}
}

static __device__ __forceinline__ float gate_of(const at_args &a, int t, int h, int i)
{
	if (!a.gate)
		return 1.0f;
	return dsoftplus(a.gate == 1 ? a.g[(size_t)t * a.ldg + h] : a.g[(size_t)t * a.ldg + (size_t)h * a.hd + i]);
}

/* ---------------------------------------------------- split (decode) */

template <int KV, int HD>
__global__ __launch_bounds__(EK_AT_THREADS) void k_attn_split(at_args a)
{
	constexpr int CH = EK_AT_CHUNK, QG = EK_AT_QG, NT = EK_AT_THREADS;
	constexpr int VE = ek_at_ve(KV, HD), NV = HD / VE, NH = (NV + 1) / 2;
	constexpr int G = NT / NV, GE = G < CH ? G : CH, KPT = (CH + G - 1) / G;
	constexpr int AB = NH < 16 ? NH : 16;      /* K vectors in flight per batch */
	constexpr int KB = KPT < 16 ? KPT : 16;    /* V loads in flight per batch */
	__shared__ __align__(16) float qs[QG][HD];
	__shared__ float sc[QG][CH];               /* scores, then e^(s - m) */
	__shared__ float cs[QG], ms[QG], ls[QG];
	__shared__ __align__(16) float red[GE][QG][HD];
	pdl_start();
	static_assert(VE % 4 == 0 && NT % NV == 0 && KPT % KB == 0 && NH % AB == 0, "vector shape");
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int grp = blockIdx.x, sp = blockIdx.y, kvh = blockIdx.z % a.nkv, t = blockIdx.z / a.nkv;
	const int rep = a.nh / a.nkv, r0 = grp * a.per, nq = min(a.per, rep - r0), h0 = kvh * rep + r0;
	const int p = *a.pos + t, lo = ek_at_lo(p, a.window), nch = ek_at_chunks(p - lo + 1);
	const int nsp = min(a.ns, nch);
	if (sp >= nsp)
		return;
	int c0, c1;
	ek_at_range(nch, nsp, sp, &c0, &c1);
	for (int i = tid; i < QG * HD; i += NT) {
		int r = i / HD, c = i % HD;
		qs[r][c] = r < nq ? a.q[(size_t)t * a.ldq + (size_t)(h0 + r) * HD + c] : 0.0f;
	}
	if (tid < QG)
		cs[tid] = 0.0f;
	const size_t kvb = (size_t)kvh * a.cap * HD;
	const int j = tid >> 1, half = tid & 1, cv = tid % NV, g = tid / NV;
	float m = -INFINITY, l = 0.0f, o[QG][VE];
#pragma unroll
	for (int r = 0; r < QG; r++)
#pragma unroll
		for (int e = 0; e < VE; e++)
			o[r][e] = 0.0f;
	__syncthreads();

	for (int c = c0; c < c1; c++) {
		const int k0 = lo + c * CH, cnt = min(CH, p + 1 - k0), s0 = k0 % a.cap;
		{                                          /* scores */
			const int slot = ek_at_slot(s0, j < cnt ? j : 0, a.cap);
			const size_t row = kvb + (size_t)slot * HD;
			float s[QG];
#pragma unroll
			for (int r = 0; r < QG; r++)
				s[r] = 0.0f;
#pragma unroll
			for (int w0 = 0; w0 < NH; w0 += AB) {
				uint4 raw[AB];
#pragma unroll
				for (int i = 0; i < AB; i++) {
					int v = 2 * (w0 + i) + half;
					raw[i] = NV % 2 == 0 || v < NV ? ld_vec<KV, VE>(a.kc, row + (size_t)v * VE)
					                               : make_uint4(0u, 0u, 0u, 0u);
				}
#pragma unroll
				for (int i = 0; i < AB; i++) {
					int v = 2 * (w0 + i) + half;
					if (NV % 2 == 0 || v < NV) {
						float kv[VE];
						cvt_vec<KV, VE>(raw[i], kv);
#pragma unroll
						for (int r = 0; r < QG; r++)
#pragma unroll
							for (int e4 = 0; e4 < VE / 4; e4++) {
								float4 qq = *(const float4 *)&qs[r][v * VE + 4 * e4];
								s[r] = fmaf(qq.x, kv[4 * e4], s[r]);
								s[r] = fmaf(qq.y, kv[4 * e4 + 1], s[r]);
								s[r] = fmaf(qq.z, kv[4 * e4 + 2], s[r]);
								s[r] = fmaf(qq.w, kv[4 * e4 + 3], s[r]);
							}
					}
				}
			}
#pragma unroll
			for (int r = 0; r < QG; r++)
				s[r] = __fadd_rn(s[r], __shfl_xor_sync(0xffffffffu, s[r], 1));
			if (!half)
#pragma unroll
				for (int r = 0; r < QG; r++)
					sc[r][j] = j < cnt ? __fmul_rn(s[r], a.scale) : -INFINITY;
		}
		__syncthreads();
		if (warp < nq) {                           /* online softmax, warp = head */
			float x0 = sc[warp][lane], x1 = sc[warp][lane + 32];
			float mn = fmaxf(m, warp_max(fmaxf(x0, x1)));
			float corr = expf(m - mn), e0 = expf(x0 - mn), e1 = expf(x1 - mn);
			l = __fadd_rn(__fmul_rn(l, corr), warp_sum(__fadd_rn(e0, e1)));
			m = mn;
			sc[warp][lane] = e0;
			sc[warp][lane + 32] = e1;
			if (lane == 0)
				cs[warp] = corr;
		}
		__syncthreads();
		{                                          /* p·v */
#pragma unroll
			for (int r = 0; r < QG; r++) {
				float cr = cs[r];
#pragma unroll
				for (int e = 0; e < VE; e++)
					o[r][e] = __fmul_rn(o[r][e], cr);
			}
#pragma unroll
			for (int b0 = 0; b0 < KPT; b0 += KB) {
				uint4 raw[KB];
#pragma unroll
				for (int i = 0; i < KB; i++) {
					int k = g + (b0 + i) * G, slot = ek_at_slot(s0, k < cnt ? k : 0, a.cap);
					raw[i] = ld_vec<KV, VE>(a.vc, kvb + (size_t)slot * HD + (size_t)cv * VE);
				}
#pragma unroll
				for (int i = 0; i < KB; i++) {
					int k = g + (b0 + i) * G;
					if (k < cnt) {
						float v[VE];
						cvt_vec<KV, VE>(raw[i], v);
#pragma unroll
						for (int r = 0; r < QG; r++) {
							float pr = sc[r][k];
#pragma unroll
							for (int e = 0; e < VE; e++)
								o[r][e] = fmaf(pr, v[e], o[r][e]);
						}
					}
				}
			}
		}
		__syncthreads();
	}
	if (g < GE)
#pragma unroll
		for (int r = 0; r < QG; r++)
#pragma unroll
			for (int e = 0; e < VE; e++)
				red[g][r][cv * VE + e] = o[r][e];
	if (warp < nq && lane == 0) {
		ms[warp] = m;
		ls[warp] = l;
	}
	__syncthreads();
	for (int i = tid; i < nq * HD; i += NT) {
		int r = i / HD, c = i % HD;
		float acc = 0.0f;
#pragma unroll 8
		for (int q = 0; q < GE; q++)
			acc = __fadd_rn(acc, red[q][r][c]);
		size_t pi = ((size_t)t * a.nh + h0 + r) * a.ns + sp;
		a.po[pi * HD + c] = acc;
		if (c == 0) {
			a.pml[2 * pi] = ms[r];
			a.pml[2 * pi + 1] = ls[r];
		}
	}
}

/* ------------------------------------------------------- merge (decode) */

__global__ __launch_bounds__(EK_AT_THREADS) void k_attn_merge(at_args a)
{
	__shared__ float mm[EK_AT_SPLITS], ll[EK_AT_SPLITS], ww[EK_AT_SPLITS];
	pdl_start();
	const int h = blockIdx.x, t = blockIdx.y, tid = threadIdx.x;
	const int p = *a.pos + t, lo = ek_at_lo(p, a.window);
	const int nsp = min(a.ns, ek_at_chunks(p - lo + 1));
	const size_t pb = ((size_t)t * a.nh + h) * a.ns;
	if (tid < nsp) {
		mm[tid] = a.pml[2 * (pb + tid)];
		ll[tid] = a.pml[2 * (pb + tid) + 1];
	}
	__syncthreads();
	float M = -INFINITY;
	for (int s = 0; s < nsp; s++)
		M = fmaxf(M, mm[s]);
	if (tid < nsp)
		ww[tid] = expf(mm[tid] - M);
	__syncthreads();
	float L = 0.0f;
	for (int s = 0; s < nsp; s++)
		L = __fadd_rn(L, __fmul_rn(ll[s], ww[s]));
	for (int i = tid; i < a.hd; i += EK_AT_THREADS) {
		float O = 0.0f;
		for (int s = 0; s < nsp; s++)
			O = __fadd_rn(O, __fmul_rn(a.po[(pb + s) * a.hd + i], ww[s]));
		a.out[(size_t)t * a.ldo + (size_t)h * a.hd + i] = __fmul_rn(__fdiv_rn(O, L), gate_of(a, t, h, i));
	}
}

#endif
