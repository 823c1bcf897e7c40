/* ek_attn.cu — causal GQA attention over the KV cache (ek.h ek_attn).
 *
 * Cache: per layer K and V of [nkv][cap][hd] (F32, BF16 or FP8 E4M3), slot =
 * position % cap, so full layers (cap >= context) and sliding rings share one
 * layout. A kv head's rows are contiguous: a block streams one head's keys.
 *
 * Decode and small batches (T <= 16): one block per (kv head, split of 512
 * keys, token). It stages the rep = nh/nkv queries of that kv head, scores
 * its keys (thread per key, 8 dims per load), takes each head's max and sum
 * of exponentials, and accumulates p·v (thread per dimension pair × key
 * group). With one split the block writes the gated output; otherwise it
 * writes (max, sum, Σ p·v) to work and the last split block to finish (an
 * arrival counter per token and kv head, left at zero) merges the splits in
 * split order. The grid is fixed by max_keys, blocks past the live key range
 * exit, and the position is read from device memory: capturable.
 *
 * Prefill (T > 16): one block per (kv head, tile of up to 16 tokens); the
 * tile's TQ·rep query rows (queries, running output, max and sum) live in
 * shared memory and are spread over 8 warps; keys stream through shared
 * memory in chunks of 32 (lane = key for scores, lane = dimension for p·v)
 * with an online softmax per row. SIMT, no tensor cores yet. */
#include "kernels/ek_dev.cuh"

#include <errno.h>

#define AT_SPLIT 512
#define AT_THREADS 256
#define AT_MAXREP 16
#define PF_CH 32                   /* keys per chunk (prefill) */

struct at_args {
	float *out;
	int ldo;
	const float *q;
	int ldq;
	const float *g;
	int ldg, gate, T, nh, nkv, hd;
	const void *kc, *vc;
	int cap;
	const int *pos;
	int window, maxsp;
	float *part;               /* [T][nh][maxsp][hd + 2] after the counters */
	int *cnt;                  /* [T][nkv] at the start of work */
	float scale;
	int tq;                    /* prefill: tokens per block */
};

template <int KV>
static __device__ __forceinline__ void load8(const void *c, size_t i, float *v)
{
	if (KV == EK_KV_F32) {
		float4 a = *(const float4 *)((const float *)c + i), b = *(const float4 *)((const float *)c + i + 4);
		v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
		v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
	} else if (KV == EK_KV_BF16) {
		uint4 a = *(const uint4 *)((const uint16_t *)c + i);
		const uint32_t w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
		for (int z = 0; z < 4; z++) {
			v[2 * z] = __uint_as_float(w[z] << 16);
			v[2 * z + 1] = __uint_as_float(w[z] & 0xFFFF0000u);
		}
	} else {
		uint2 a = *(const uint2 *)((const uint8_t *)c + i);
		const uint32_t w[2] = {a.x, a.y};
#pragma unroll
		for (int z = 0; z < 4; z++) {
			__half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
			    (__nv_fp8x2_storage_t)((w[z / 2] >> (16 * (z & 1))) & 0xFFFFu), __NV_E4M3);
			float2 f = __half22float2(__half2(h));
			v[2 * z] = f.x;
			v[2 * z + 1] = f.y;
		}
	}
}

template <int KV>
static __device__ __forceinline__ float load1(const void *c, size_t i)
{
	if (KV == EK_KV_F32)
		return ((const float *)c)[i];
	if (KV == EK_KV_BF16)
		return bf16f(((const uint16_t *)c)[i]);
	return e4m3f(((const uint8_t *)c)[i]);
}

static __device__ __forceinline__ float gate_of(const at_args &a, int t, int h, int i)
{
	if (!a.gate)
		return 1.0f;
	return dsoftplus(a.gate == 1 ? a.g[(size_t)t * a.ldg + h] : a.g[(size_t)t * a.ldg + (size_t)h * a.hd + i]);
}

static __device__ __forceinline__ int key_lo(const at_args &a, int p)
{
	return a.window > 0 && p - a.window + 1 > 0 ? p - a.window + 1 : 0;
}

/* ------------------------------------------------------- split (decode) */

template <int KV>
__global__ __launch_bounds__(AT_THREADS) void k_attn_split(at_args a)
{
	extern __shared__ float sm[];
	__shared__ float mh[AT_MAXREP], lh[AT_MAXREP];
	__shared__ int last;
	pdl_start();
	int kvh = blockIdx.x, sp = blockIdx.y, t = blockIdx.z, tid = threadIdx.x;
	int hd = a.hd, rep = a.nh / a.nkv, p = *a.pos + t, lo = key_lo(a, p), n = p - lo + 1;
	int nsp = (n + AT_SPLIT - 1) / AT_SPLIT;
	if (sp >= nsp)
		return;
	int j0 = lo + sp * AT_SPLIT, cnt = min(AT_SPLIT, p + 1 - j0);
	float *qs = sm, *sc = sm + rep * hd;      /* q [rep][hd]; scores [rep][AT_SPLIT] */
	size_t kvbase = (size_t)kvh * a.cap * hd;
	for (int i = tid; i < rep * hd; i += AT_THREADS)
		qs[i] = a.q[(size_t)t * a.ldq + (size_t)(kvh * rep + i / hd) * hd + i % hd];
	__syncthreads();

	for (int jj = tid; jj < cnt; jj += AT_THREADS) {
		size_t row = kvbase + (size_t)((j0 + jj) % a.cap) * hd;
		float s[AT_MAXREP];
#pragma unroll
		for (int r = 0; r < AT_MAXREP; r++)
			s[r] = 0.0f;
		for (int i = 0; i < hd; i += 8) {
			float kv[8];
			load8<KV>(a.kc, row + i, kv);
#pragma unroll
			for (int r = 0; r < AT_MAXREP; r++)
				if (r < rep)
#pragma unroll
					for (int z = 0; z < 8; z++)
						s[r] = fmaf(qs[r * hd + i + z], kv[z], s[r]);
		}
#pragma unroll
		for (int r = 0; r < AT_MAXREP; r++)
			if (r < rep)
				sc[r * AT_SPLIT + jj] = __fmul_rn(s[r], a.scale);
	}
	__syncthreads();
	int lane = tid & 31, warp = tid >> 5;
	for (int r = warp; r < rep; r += AT_THREADS / 32) {
		float m = -INFINITY, l = 0.0f;
		for (int jj = lane; jj < cnt; jj += 32)
			m = fmaxf(m, sc[r * AT_SPLIT + jj]);
		m = warp_max(m);
		for (int jj = lane; jj < cnt; jj += 32) {
			float e = expf(sc[r * AT_SPLIT + jj] - m);
			sc[r * AT_SPLIT + jj] = e;
			l += e;
		}
		l = warp_sum(l);
		if (lane == 0) {
			mh[r] = m;
			lh[r] = l;
		}
	}
	__syncthreads();

	int pairs = hd / 2, nkg = AT_THREADS / pairs, ip = tid % pairs, kg = tid / pairs;
	float o[AT_MAXREP][2];
#pragma unroll
	for (int r = 0; r < AT_MAXREP; r++)
		o[r][0] = o[r][1] = 0.0f;
	if (kg < nkg)
		for (int jj = kg; jj < cnt; jj += nkg) {
			size_t row = kvbase + (size_t)((j0 + jj) % a.cap) * hd + 2 * ip;
			float v0 = load1<KV>(a.vc, row), v1 = load1<KV>(a.vc, row + 1);
#pragma unroll
			for (int r = 0; r < AT_MAXREP; r++)
				if (r < rep) {
					float e = sc[r * AT_SPLIT + jj];
					o[r][0] = fmaf(e, v0, o[r][0]);
					o[r][1] = fmaf(e, v1, o[r][1]);
				}
		}
	__syncthreads();                          /* scores done: reuse sc as red[kg][rep][hd] */
	float *red = sc;
	if (kg < nkg)
#pragma unroll
		for (int r = 0; r < AT_MAXREP; r++)
			if (r < rep) {
				red[((size_t)kg * rep + r) * hd + 2 * ip] = o[r][0];
				red[((size_t)kg * rep + r) * hd + 2 * ip + 1] = o[r][1];
			}
	__syncthreads();
	for (int idx = tid; idx < rep * hd; idx += AT_THREADS) {
		int r = idx / hd, i = idx % hd, h = kvh * rep + r;
		float acc = 0.0f;
		for (int q = 0; q < nkg; q++)
			acc = __fadd_rn(acc, red[((size_t)q * rep + r) * hd + i]);
		if (nsp == 1) {
			a.out[(size_t)t * a.ldo + (size_t)h * hd + i] =
			    __fmul_rn(__fdiv_rn(acc, lh[r]), gate_of(a, t, h, i));
		} else {
			float *pp = a.part + (((size_t)t * a.nh + h) * a.maxsp + sp) * (hd + 2);
			pp[i] = acc;
			if (i == 0) {
				pp[hd] = mh[r];
				pp[hd + 1] = lh[r];
			}
		}
	}
	if (nsp == 1)
		return;
	__syncthreads();
	if (tid == 0) {
		__threadfence();
		last = atomicAdd(&a.cnt[t * a.nkv + kvh], 1) == nsp - 1;
	}
	__syncthreads();
	if (!last)
		return;
	__threadfence();
	for (int idx = tid; idx < rep * hd; idx += AT_THREADS) {
		int r = idx / hd, i = idx % hd, h = kvh * rep + r;
		const float *pp = a.part + ((size_t)t * a.nh + h) * a.maxsp * (hd + 2);
		float M = -INFINITY, L = 0.0f, O = 0.0f;
		for (int s = 0; s < nsp; s++)
			M = fmaxf(M, __ldcg(&pp[(size_t)s * (hd + 2) + hd]));
		for (int s = 0; s < nsp; s++) {
			const float *ps = pp + (size_t)s * (hd + 2);
			float f = expf(__ldcg(&ps[hd]) - M);
			L = __fadd_rn(L, __fmul_rn(__ldcg(&ps[hd + 1]), f));
			O = __fadd_rn(O, __fmul_rn(__ldcg(&ps[i]), f));
		}
		a.out[(size_t)t * a.ldo + (size_t)h * hd + i] = __fmul_rn(__fdiv_rn(O, L), gate_of(a, t, h, i));
	}
	if (tid == 0)
		a.cnt[t * a.nkv + kvh] = 0;
}

/* ---------------------------------------------------- prefill (tiles) */

template <int KV, int DPL>
__global__ __launch_bounds__(AT_THREADS) void k_attn_prefill(at_args a)
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
	for (int i = tid; i < rows * hd; i += AT_THREADS) {
		int rr = i / hd, tt = rr / rep, r = rr % rep;
		Qs[i] = a.q[(size_t)(t0 + tt) * a.ldq + (size_t)(kvh * rep + r) * hd + i % hd];
		Os[i] = 0.0f;
	}
	for (int i = tid; i < rows; i += AT_THREADS) {
		ML[2 * i] = -INFINITY;
		ML[2 * i + 1] = 0.0f;
	}
	int klo = key_lo(a, p0), khi = p0 + tq - 1;
	for (int j0 = klo; j0 <= khi; j0 += PF_CH) {
		__syncthreads();
		for (int i = tid; i < PF_CH * hd; i += AT_THREADS) {
			int j = i / hd, c = i % hd, kp = j0 + j;
			size_t off = kvbase + (size_t)(kp % a.cap) * hd + c;
			Ks[j * ks + c] = kp <= khi ? load1<KV>(a.kc, off) : 0.0f;
			Vs[j * ks + c] = kp <= khi ? load1<KV>(a.vc, off) : 0.0f;
		}
		__syncthreads();
		for (int rr = warp; rr < rows; rr += AT_THREADS / 32) {
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
#pragma unroll 8
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
	for (int i = tid; i < rows * hd; i += AT_THREADS) {
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
		ek_launch(d, k_attn_prefill<KV, D>, grid, dim3(AT_THREADS), smem, a); \
		return ek_launched(d, "attention (prefill)"); \
	}
	EK_PF(1) EK_PF(2) EK_PF(4) EK_PF(8)
#undef EK_PF
	return ek_fail(d, -EINVAL, "attention: head_dim %d > 256", a.hd);
}

template <int KV>
static int launch_split(struct ek_dev *d, at_args &a)
{
	int rep = a.nh / a.nkv;
	size_t smem = ((size_t)rep * a.hd + (size_t)rep * AT_SPLIT) * sizeof(float);
	int rc = smem_ok(d, k_attn_split<KV>, smem);
	if (rc)
		return rc;
	ek_launch(d, k_attn_split<KV>, dim3(a.nkv, a.maxsp, a.T), dim3(AT_THREADS), smem, a);
	return ek_launched(d, "attention");
}

extern "C" int ek_attn(struct ek_dev *d, float *out, int ldo, const float *q, int ldq,
                       const float *g, int ldg, int gate, int T, int nh, int nkv, int hd,
                       const void *kc, const void *vc, int kvtype, int cap, const int *pos,
                       int window, int max_keys, void *work)
{
	if (T < 1 || nkv < 1 || nh < nkv || nh % nkv || nh / nkv > AT_MAXREP || hd < 8 || hd > 256 ||
	    hd % 8 || 512 % hd || cap < 1 || max_keys < 1 || kvtype < EK_KV_F32 || kvtype > EK_KV_FP8 ||
	    gate < 0 || gate > 2)
		return ek_fail(d, -EINVAL, "attention: unsupported shape (T %d, heads %d/%d, hd %d, "
		               "max_keys %d; hd a multiple of 8 dividing 512, at most %d query heads "
		               "per kv head)", T, nh, nkv, hd, max_keys, AT_MAXREP);
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
	a.maxsp = (max_keys + AT_SPLIT - 1) / AT_SPLIT;
	if ((size_t)EK_GEMV_MAX_T * nkv > EK_WORK_CNT_BYTES / sizeof(int))
		return ek_fail(d, -EINVAL, "attention: %d kv heads too many for the counters", nkv);
	a.cnt = (int *)work;                    /* [T][nkv], at a fixed place */
	a.part = (float *)((char *)work + EK_WORK_CNT_BYTES);
	a.scale = (float)(1.0 / sqrt((double)hd));
	bool split = T <= EK_GEMV_MAX_T;
	if (kvtype == EK_KV_F32)
		return split ? launch_split<EK_KV_F32>(d, a) : launch_prefill<EK_KV_F32>(d, a);
	if (kvtype == EK_KV_BF16)
		return split ? launch_split<EK_KV_BF16>(d, a) : launch_prefill<EK_KV_BF16>(d, a);
	return split ? launch_split<EK_KV_FP8>(d, a) : launch_prefill<EK_KV_FP8>(d, a);
}
