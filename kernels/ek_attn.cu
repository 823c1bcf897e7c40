/* ek_attn.cu — causal GQA attention over the KV cache (ek.h ek_attn).
 *
 * Cache: per layer K and V of [nkv][cap][hd] (F32, BF16 or FP8 E4M3), slot =
 * position % cap, so full layers (cap >= context) and sliding rings share one
 * layout. A kv head's rows are contiguous.
 *
 * Decode and small batches (T <= 16): flash-decoding in two kernels, cut as
 * ek_attn_int.h says (the CPU twin cuts the same way), written in
 * ek_attn_split.cuh so that tests/kernels/test_ek_attn_simt.cpp can run the
 * same source on the host.
 *
 *   k_attn_split: one block of 128 threads per (query-head group, split, kv
 *   head, token). A token sees n keys; they are cut into chunks of 64 and the
 *   chunks dealt to nsp = min(ns, chunks) splits, ns = min(ceil(max_keys/64),
 *   64) fixed by max_keys (the grid does not depend on the position, which is
 *   read from device memory: capturable). The rep = nh/nkv query heads of a
 *   kv head are dealt to groups of <= 4. For Laguna S 2.1 (8 kv heads, hd
 *   128) that is:
 *     sliding (window 512, 72 heads: rep 9 = 3 groups of 3): from position
 *       511 on, 8 chunks = 8 splits x 8 kv heads x 3 groups = 192 blocks, 1.45
 *       per SM on a 132-SM H200 (at position 128: 3 chunks, 72 blocks);
 *     full (48 heads: rep 6 = 2 groups of 3, max_ctx 16K: ns = 64): 33 splits
 *       = 528 blocks at position 2K, 64 splits of 4 chunks = 1024 at 16K.
 *   Per chunk a block runs three phases, a barrier after each:
 *     scores: two threads per key, each loading every other 16-byte vector of
 *       the K row (BF16 hd 128: 8 loads of 8 dims, all issued before the
 *       FMAs; F32 16 of 4 dims; FP8 4 of 16 dims) and dotting it with the
 *       group's queries (shared memory, broadcast); one shuffle adds the
 *       halves; scaled by 1/sqrt(hd);
 *     softmax: warp r (one per query head) takes the chunk's max, rescales
 *       its running max m and sum l (online softmax) and leaves e^(s - m) and
 *       the correction e^(m_old - m) in shared memory;
 *     p.v: thread = (16-byte column vector, key group); BF16 hd 128: 16
 *       columns x 8 groups, 8 keys (8 independent 16-byte V loads) per thread
 *       and chunk; F32 32 x 4, 16 keys; FP8 8 x 16, 4 keys. It keeps the
 *       group's <= 4 heads x one vector of running output in registers
 *       (rescaled by the correction each chunk).
 *   The ring index is hoisted: one % per chunk for the chunk's first slot,
 *   then slot = first + j with one conditional subtraction (ek_at_slot).
 *   Keys past the end load the chunk's first row (a valid key) and are
 *   masked, so every load is unconditional. At the end the key groups'
 *   outputs are summed in group order and the block writes its partial:
 *   work po [T][nh][ns][hd] (sum of e^(s - m) v) and pml [T][nh][ns][2] (m, l).
 *
 *   k_attn_merge: one block per (query head, token): M = max m_s, w_s =
 *   e^(m_s - M), out = (sum_s w_s o_s) / (sum_s w_s l_s) · gate, in split
 *   order. No state survives a call (no counters).
 *
 * Both kernels start with pdl_start() (ek_dev.cuh: griddepcontrol
 * launch_dependents + wait when launched with PDL), so each may be launched
 * early and waits for its predecessor's writes (the KV cache, the partials).
 *
 * Prefill (T > 16): one block per (kv head, tile of up to 16 tokens); the
 * tile's TQ·rep query rows (queries, running output, max and sum) live in
 * shared memory and are spread over 8 warps; keys stream through shared
 * memory in chunks of 32 (lane = key for scores, lane = dimension for p·v)
 * with an online softmax per row. SIMT, no tensor cores yet. */
#include "kernels/ek_dev.cuh"

#include <errno.h>

#define PF_THREADS 256
#define PF_CH 32                   /* keys per chunk (prefill) */

/* Two E4M3 bytes (low first) as floats: exact through fp16. */
static __device__ __forceinline__ float2 at_fp8x2(uint32_t b)
{
	return __half22float2(e4m3x2h(b));
}

#include "kernels/ek_attn_split.cuh"

template <int KV>
static __device__ __forceinline__ float load1(const void *c, size_t i)
{
	if (KV == EK_KV_F32)
		return ((const float *)c)[i];
	if (KV == EK_KV_BF16)
		return bf16f(((const uint16_t *)c)[i]);
	return e4m3f(((const uint8_t *)c)[i]);
}

static __device__ __forceinline__ int key_lo(const at_args &a, int p)
{
	return ek_at_lo(p, a.window);
}

/* ---------------------------------------------------- prefill (tiles) */

template <int KV, int DPL>
__global__ __launch_bounds__(PF_THREADS) void k_attn_prefill(at_args a)
{
	extern __shared__ float sm[];
	pdl_start();
	int kvh = blockIdx.x, t0 = blockIdx.y * a.tq, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	int hd = a.hd, rep = a.nh / a.nkv, tq = min(a.tq, a.T - t0), rows = tq * rep;
	int ks = hd + 1;                             /* padded K/V row: conflict-free by lane */
	/* K, V [PF_CH][ks]; Q, O [rows][hd]; ML [rows][2] (running max, sum) */
	float *Ks = sm, *Vs = Ks + PF_CH * ks, *Qs = Vs + PF_CH * ks;
	float *Os = Qs + (size_t)a.tq * rep * hd, *ML = Os + (size_t)a.tq * rep * hd;
	size_t kvbase = (size_t)kvh * a.cap * hd;
	int p0 = *a.pos + t0;
	for (int i = tid; i < rows * hd; i += PF_THREADS) {
		int rr = i / hd, tt = rr / rep, r = rr % rep;
		Qs[i] = a.q[(size_t)(t0 + tt) * a.ldq + (size_t)(kvh * rep + r) * hd + i % hd];
		Os[i] = 0.0f;
	}
	for (int i = tid; i < rows; i += PF_THREADS) {
		ML[2 * i] = -INFINITY;
		ML[2 * i + 1] = 0.0f;
	}
	int klo = key_lo(a, p0), khi = p0 + tq - 1;
	for (int j0 = klo; j0 <= khi; j0 += PF_CH) {
		__syncthreads();
		for (int i = tid; i < PF_CH * hd; i += PF_THREADS) {
			int j = i / hd, c = i % hd, kp = j0 + j;
			size_t off = kvbase + (size_t)(kp % a.cap) * hd + c;
			Ks[j * ks + c] = kp <= khi ? load1<KV>(a.kc, off) : 0.0f;
			Vs[j * ks + c] = kp <= khi ? load1<KV>(a.vc, off) : 0.0f;
		}
		__syncthreads();
		for (int rr = warp; rr < rows; rr += PF_THREADS / 32) {
			int p = p0 + rr / rep, kp = j0 + lane;
			if (j0 > p)                      /* warp-uniform: no visible key in this chunk */
				continue;
			const float *qr = Qs + (size_t)rr * hd;
			float s = 0.0f;
			for (int c = 0; c < hd; c++)
				s = fmaf(qr[c], Ks[lane * ks + c], s);
			bool vis = kp <= p && kp >= key_lo(a, p);
			s = vis ? __fmul_rn(s, a.scale) : -INFINITY;
			float m = ML[2 * rr], mn = fmaxf(m, warp_max(s));
			if (mn == -INFINITY)
				continue;
			float corr = expf(m - mn), e = vis ? expf(s - mn) : 0.0f;
			float l = __fadd_rn(__fmul_rn(ML[2 * rr + 1], corr), warp_sum(e));
			float o[DPL];
#pragma unroll
			for (int z = 0; z < DPL; z++) {
				int c = lane + 32 * z;
				o[z] = c < hd ? __fmul_rn(Os[(size_t)rr * hd + c], corr) : 0.0f;
			}
#pragma unroll 4
			for (int j = 0; j < PF_CH; j++) {
				float ej = __shfl_sync(0xffffffffu, e, j);
#pragma unroll
				for (int z = 0; z < DPL; z++) {
					int c = lane + 32 * z;
					if (c < hd)
						o[z] = fmaf(ej, Vs[j * ks + c], o[z]);
				}
			}
#pragma unroll
			for (int z = 0; z < DPL; z++) {
				int c = lane + 32 * z;
				if (c < hd)
					Os[(size_t)rr * hd + c] = o[z];
			}
			__syncwarp();
			if (lane == 0) {
				ML[2 * rr] = mn;
				ML[2 * rr + 1] = l;
			}
			__syncwarp();
		}
	}
	__syncthreads();
	for (int i = tid; i < rows * hd; i += PF_THREADS) {
		int rr = i / hd, c = i % hd, t = t0 + rr / rep, h = kvh * rep + rr % rep;
		a.out[(size_t)t * a.ldo + (size_t)h * hd + c] =
		    __fmul_rn(__fdiv_rn(Os[i], ML[2 * rr + 1]), gate_of(a, t, h, c));
	}
}

/* ------------------------------------------------------------ launch */

template <typename K>
static int smem_ok(struct ek_dev *d, K kern, size_t smem)
{
	if (smem > d->smem_optin)
		return ek_fail(d, -EINVAL, "attention needs %zu bytes of shared memory (device: %zu)",
		               smem, d->smem_optin);
	if (smem > 48 * 1024)
		return ek_cuda(d, cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
		                                       (int)smem), "shared memory attribute");
	return 0;
}

template <int KV>
static int launch_prefill(struct ek_dev *d, at_args &a)
{
	int dpl = (a.hd + 31) / 32, rep = a.nh / a.nkv;
	size_t kv = (size_t)2 * PF_CH * (a.hd + 1) * sizeof(float);
	size_t per_tok = (size_t)rep * (2 * a.hd + 2) * sizeof(float);
	size_t budget = d->smem_optin > kv ? d->smem_optin - kv : 0;
	a.tq = (int)(budget / per_tok);
	if (a.tq > 16)
		a.tq = 16;
	if (a.tq < 1)
		return ek_fail(d, -EINVAL, "attention: %d query heads of %d dims per kv head do not fit "
		               "in shared memory", rep, a.hd);
	size_t smem = kv + (size_t)a.tq * per_tok;
	dim3 grid(a.nkv, (a.T + a.tq - 1) / a.tq);
	int rc;
#define EK_PF(D) \
	if (dpl <= D) { \
		if ((rc = smem_ok(d, k_attn_prefill<KV, D>, smem))) \
			return rc; \
		ek_launch(d, k_attn_prefill<KV, D>, grid, dim3(PF_THREADS), smem, a); \
		return ek_launched(d, "attention (prefill)"); \
	}
	EK_PF(1) EK_PF(2) EK_PF(4) EK_PF(8)
#undef EK_PF
	return ek_fail(d, -EINVAL, "attention: head_dim %d > 256", a.hd);
}

template <int KV, int HD>
static int launch_split(struct ek_dev *d, at_args &a)
{
	ek_launch(d, k_attn_split<KV, HD>, dim3(a.ng, a.ns, a.nkv * a.T), dim3(EK_AT_THREADS), 0, a);
	int rc = ek_launched(d, "attention (splits)");
	if (rc)
		return rc;
	ek_launch(d, k_attn_merge, dim3(a.nh, a.T), dim3(EK_AT_THREADS), 0, a);
	return ek_launched(d, "attention (merge)");
}

template <int KV>
static int launch_kv(struct ek_dev *d, at_args &a)
{
	if (a.T > EK_GEMV_MAX_T)
		return launch_prefill<KV>(d, a);
	switch (a.hd) {
	case 8: return launch_split<KV, 8>(d, a);
	case 16: return launch_split<KV, 16>(d, a);
	case 32: return launch_split<KV, 32>(d, a);
	case 64: return launch_split<KV, 64>(d, a);
	case 128: return launch_split<KV, 128>(d, a);
	default: return launch_split<KV, 256>(d, a);
	}
}

extern "C" int ek_attn(struct ek_dev *d, float *out, int ldo, const float *q, int ldq,
                       const float *g, int ldg, int gate, int T, int nh, int nkv, int hd,
                       const void *kc, const void *vc, int kvtype, int cap, const int *pos,
                       int window, int max_keys, void *work)
{
	if (T < 1 || nkv < 1 || nh < nkv || nh % nkv || hd < 8 || hd > 256 || hd & (hd - 1) ||
	    cap < 1 || max_keys < 1 || kvtype < EK_KV_F32 || kvtype > EK_KV_FP8 || gate < 0 ||
	    gate > 2 || nkv * EK_GEMV_MAX_T > 65535)
		return ek_fail(d, -EINVAL, "attention: unsupported shape (T %d, heads %d/%d, hd %d, "
		               "max_keys %d, cap %d; hd a power of two in 8..256, heads a multiple of "
		               "kv heads)", T, nh, nkv, hd, max_keys, cap);
	at_args a = at_make(out, ldo, q, ldq, g, ldg, gate, T, nh, nkv, hd, kc, vc, cap, pos, window,
	                    max_keys, work);
	if (kvtype == EK_KV_F32)
		return launch_kv<EK_KV_F32>(d, a);
	if (kvtype == EK_KV_BF16)
		return launch_kv<EK_KV_BF16>(d, a);
	return launch_kv<EK_KV_FP8>(d, a);
}
