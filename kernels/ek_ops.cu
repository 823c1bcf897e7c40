/* ek_ops.cu — the small ops of a Laguna layer: RMSNorm, SwiGLU, residual
 * add, embedding, fused QK-norm + RoPE + KV-cache write, and the router.
 * Each is memory-light; they are written plainly, one block per row
 * (token, head) where a reduction is needed, with the CPU engine's
 * formulas and rounding points (explicit _rn operations where the twin has
 * no FMA). */
#include "kernels/ek_dev.cuh"

#include <errno.h>

static unsigned grid_for(struct ek_dev *d, size_t n, int threads)
{
	size_t b = (n + threads - 1) / threads, cap = (size_t)d->sms * 16;
	return (unsigned)(b < 1 ? 1 : b > cap ? cap : b);
}

/* ---------------------------------------------------------- RMSNorm */

#include "kernels/ek_rmsnorm.cuh"     /* k_rmsnorm */

extern "C" int ek_rmsnorm(struct ek_dev *d, float *out, int ldo, const float *x, int ldx,
                          const float *w, int T, int n, float eps)
{
	if (T < 1 || n < 1)
		return ek_fail(d, -EINVAL, "rmsnorm: T %d, n %d", T, n);
	ek_launch(d, k_rmsnorm, dim3(T), dim3(256), 0, out, ldo, x, ldx, w, n, eps);
	return ek_launched(d, "rmsnorm");
}

/* ------------------------------------------------- SwiGLU, add, embed */

__global__ void k_swiglu(float *out, int ldo, const float *g, int ldg, const float *u, int ldu,
                         int n, size_t total)
{
	pdl_start();
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t t = i / n, c = i % n;
		out[t * ldo + c] = __fmul_rn(dsilu(g[t * ldg + c]), u[t * ldu + c]);
	}
}

extern "C" int ek_swiglu(struct ek_dev *d, float *out, int ldo, const float *g, int ldg,
                         const float *u, int ldu, int T, int n)
{
	size_t total = (size_t)T * n;
	if (!total)
		return 0;
	ek_launch(d, k_swiglu, dim3(grid_for(d, total, 256)), dim3(256), 0, out, ldo, g, ldg, u, ldu,
	          n, total);
	return ek_launched(d, "swiglu");
}

__global__ void k_add(float *x, const float *y, size_t n)
{
	pdl_start();
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		x[i] = __fadd_rn(x[i], y[i]);
}

extern "C" int ek_add(struct ek_dev *d, float *x, const float *y, size_t n)
{
	if (!n)
		return 0;
	ek_launch(d, k_add, dim3(grid_for(d, n, 256)), dim3(256), 0, x, y, n);
	return ek_launched(d, "add");
}

__global__ void k_bias(float *y, int ldy, const float *b, int n, size_t total)
{
	pdl_start();
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t t = i / n, c = i % n;
		y[t * ldy + c] = __fadd_rn(y[t * ldy + c], b[c]);
	}
}

extern "C" int ek_bias(struct ek_dev *d, float *y, int ldy, const float *b, int T, int n)
{
	size_t total = (size_t)T * n;
	if (!total)
		return 0;
	ek_launch(d, k_bias, dim3(grid_for(d, total, 256)), dim3(256), 0, y, ldy, b, n, total);
	return ek_launched(d, "bias");
}

__global__ void k_sigmoid_scale(float *h, int ldh, const float *g, int ldg, int n, size_t total)
{
	pdl_start();
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t t = i / n, c = i % n;
		float s = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-g[t * ldg])));
		h[t * ldh + c] = __fmul_rn(h[t * ldh + c], s);
	}
}

extern "C" int ek_sigmoid_scale(struct ek_dev *d, float *h, int ldh, const float *g, int ldg, int T,
                                int n)
{
	size_t total = (size_t)T * n;
	if (!total)
		return 0;
	ek_launch(d, k_sigmoid_scale, dim3(grid_for(d, total, 256)), dim3(256), 0, h, ldh, g, ldg, n,
	          total);
	return ek_launched(d, "sigmoid_scale");
}

__global__ void k_embed(float *x, const uint16_t *table, const int *tokens, int hidden, size_t n)
{
	pdl_start();
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		size_t t = i / hidden, c = i % hidden;
		x[i] = bf16f(table[(size_t)tokens[t] * hidden + c]);
	}
}

extern "C" int ek_embed(struct ek_dev *d, float *x, const uint16_t *table, const int *tokens,
                        int T, int hidden)
{
	size_t n = (size_t)T * hidden;
	if (!n)
		return 0;
	ek_launch(d, k_embed, dim3(grid_for(d, n, 256)), dim3(256), 0, x, table, tokens, hidden, n);
	return ek_launched(d, "embed");
}

/* ------------------------------------------ QK-norm, RoPE, KV write */

static __device__ __forceinline__ void kv_put(void *c, int kvtype, size_t i, float v)
{
	if (kvtype == EK_KV_F32) {
		((float *)c)[i] = v;
	} else if (kvtype == EK_KV_BF16) {
		__nv_bfloat16 b = __float2bfloat16_rn(v);
		((uint16_t *)c)[i] = *(uint16_t *)&b;
	} else {
		((uint8_t *)c)[i] = (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
	}
}

/* Block (head, token): heads 0..nh-1 are q, nh..nh+nkv-1 are k (which also
 * write k and v into the cache). Thread i owns dimension i. */
__global__ void k_qk_rope_kv(float *q, int ldq, float *k, int ldk, const float *v, int ldv,
                             int nh, int hd, const float *qn, const float *kn, float eps,
                             const float *inv_freq, int rot, float as, const int *pos, void *kc,
                             void *vc, int kvtype, int cap)
{
	__shared__ float sh[33];
	__shared__ float xs[256];
	pdl_start();
	int t = blockIdx.y, hh = blockIdx.x, i = threadIdx.x, p = *pos + t;
	int isk = hh >= nh, kvh = hh - nh;
	float *x = isk ? k + (size_t)t * ldk + (size_t)kvh * hd : q + (size_t)t * ldq + (size_t)hh * hd;
	const float *w = isk ? kn : qn;
	float xv = i < hd ? x[i] : 0.0f;
	float ss = block_sum(__fmul_rn(xv, xv), sh);
	float r = 1.0f / sqrtf(ss / (float)hd + eps);
	if (i < hd)   /* no norm weights (llama, mistral): RoPE only */
		xs[i] = w ? __fmul_rn(w[i], __fmul_rn(xv, r)) : xv;
	__syncthreads();
	if (i >= hd)
		return;
	int half = rot / 2;
	float o = xs[i];
	if (i < rot) {
		int ii = i < half ? i : i - half;
		float f = __fmul_rn((float)p, inv_freq[ii]);
		float c = __fmul_rn(cosf(f), as), s = __fmul_rn(sinf(f), as);
		float a = xs[ii], b = xs[ii + half];
		o = i < half ? __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s))
		             : __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
	}
	x[i] = o;
	if (isk) {
		size_t off = ((size_t)kvh * cap + p % cap) * hd + i;
		kv_put(kc, kvtype, off, o);
		kv_put(vc, kvtype, off, v[(size_t)t * ldv + (size_t)kvh * hd + i]);
	}
}

extern "C" int ek_qk_rope_kv(struct ek_dev *d, float *q, int ldq, float *k, int ldk,
                             const float *v, int ldv, int T, int nh, int nkv, int hd,
                             const float *qn, const float *kn, float eps, const float *inv_freq,
                             int rot, float attn_scale, const int *pos, void *kc, void *vc,
                             int kvtype, int cap)
{
	if (T < 1 || nh < 1 || nkv < 1 || hd < 1 || hd > 256 || rot < 0 || rot > hd || rot % 2 ||
	    cap < 1 || kvtype < EK_KV_F32 || kvtype > EK_KV_FP8)
		return ek_fail(d, -EINVAL, "qk_rope_kv: bad shape (T %d, heads %d/%d, hd %d, rot %d)", T,
		               nh, nkv, hd, rot);
	int threads = (hd + 31) / 32 * 32;
	ek_launch(d, k_qk_rope_kv, dim3(nh + nkv, T), dim3(threads), 0, q, ldq, k, ldk, v, ldv, nh,
	          hd, qn, kn, eps, inv_freq, rot, attn_scale, pos, kc, vc, kvtype, cap);
	return ek_launched(d, "qk_rope_kv");
}

/* ------------------------------------------------------------ router */

#define RT_PER 4                   /* experts per thread: E <= 1024 */

/* Better (value, index) of two: larger value, then lower index. */
static __device__ __forceinline__ void rbest(float &v, int &i, float v2, int i2)
{
	if (i2 >= 0 && (i < 0 || v2 > v || (v2 == v && i2 < i))) {
		v = v2;
		i = i2;
	}
}

/* SOFTMAX false: Laguna's sigmoid scores picked by score + bias; true: the
 * softmax over the E logits (bias unused), picked by probability. */
template <bool SOFTMAX>
__global__ __launch_bounds__(256) void k_route(const float *logits, int ldl, const float *bias,
                                               int E, int k, int norm, float softcap, int *ids,
                                               float *wts)
{
	__shared__ float wv[8];
	__shared__ int wi[8];
	__shared__ int pick[32];
	__shared__ float pw[32];
	__shared__ float red[33];
	pdl_start();
	int t = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	float s[RT_PER], v[RT_PER];
	bool free_[RT_PER];
	float mx = -INFINITY;
#pragma unroll
	for (int q = 0; q < RT_PER; q++) {
		int e = threadIdx.x + 256 * q;
		free_[q] = e < E;
		s[q] = v[q] = 0.0f;
		if (e < E) {
			float l = logits[(size_t)t * ldl + e];
			if (SOFTMAX) {
				s[q] = l;
				mx = fmaxf(mx, l);
				continue;
			}
			if (softcap > 0.0f)
				l = __fmul_rn(tanhf(__fdiv_rn(l, softcap)), softcap);
			s[q] = 1.0f / (1.0f + expf(-l));
			v[q] = __fadd_rn(s[q], bias[e]);
		}
	}
	if (SOFTMAX) {
		mx = block_max(mx, red);
		float part = 0.0f;
#pragma unroll
		for (int q = 0; q < RT_PER; q++)
			if (free_[q]) {
				s[q] = expf(__fsub_rn(s[q], mx));
				part = __fadd_rn(part, s[q]);
			}
		float z = block_sum(part, red);
#pragma unroll
		for (int q = 0; q < RT_PER; q++)
			if (free_[q])
				v[q] = s[q] = __fdiv_rn(s[q], z);
	}
	for (int j = 0; j < k; j++) {
		float bv = 0.0f;
		int bi = -1;
#pragma unroll
		for (int q = 0; q < RT_PER; q++)
			if (free_[q] && (bi < 0 || v[q] > bv)) {
				bv = v[q];
				bi = threadIdx.x + 256 * q;
			}
#pragma unroll
		for (int o = 16; o > 0; o >>= 1) {
			float v2 = __shfl_xor_sync(0xffffffffu, bv, o);
			int i2 = __shfl_xor_sync(0xffffffffu, bi, o);
			rbest(bv, bi, v2, i2);
		}
		if (lane == 0) {
			wv[warp] = bv;
			wi[warp] = bi;
		}
		__syncthreads();
		if (threadIdx.x == 0) {
			float b = wv[0];
			int ix = wi[0];
			for (int w = 1; w < 8; w++)
				rbest(b, ix, wv[w], wi[w]);
			pick[j] = ix < 0 ? 0 : ix;
		}
		__syncthreads();
		int e = pick[j];
		if (e % 256 == (int)threadIdx.x) {
#pragma unroll
			for (int q = 0; q < RT_PER; q++)
				if (q == e / 256) {
					free_[q] = false;
					pw[j] = s[q];
				}
		}
		__syncthreads();
	}
	if (threadIdx.x == 0) {
		float sum = 0.0f;
		for (int j = 0; j < k; j++)
			sum = __fadd_rn(sum, pw[j]);
		for (int j = 0; j < k; j++) {
			ids[(size_t)t * k + j] = pick[j];
			wts[(size_t)t * k + j] = norm ? __fdiv_rn(pw[j], sum) : pw[j];
		}
	}
}

extern "C" int ek_route(struct ek_dev *d, const float *logits, int ldl, const float *bias, int E,
                        int k, int norm, float softcap, int *ids, float *wts, int T)
{
	if (T < 1 || E < 1 || E > 256 * RT_PER || k < 1 || k > 32 || k > E)
		return ek_fail(d, -EINVAL, "route: E %d, k %d, T %d (E <= %d, k <= 32)", E, k, T,
		               256 * RT_PER);
	ek_launch(d, k_route<false>, dim3(T), dim3(256), 0, logits, ldl, bias, E, k, norm, softcap, ids,
	          wts);
	return ek_launched(d, "route");
}

extern "C" int ek_route_softmax(struct ek_dev *d, const float *logits, int ldl, int E, int k,
                                int norm, int *ids, float *wts, int T)
{
	if (T < 1 || E < 1 || E > 256 * RT_PER || k < 1 || k > 32 || k > E)
		return ek_fail(d, -EINVAL, "route_softmax: E %d, k %d, T %d (E <= %d, k <= 32)", E, k, T,
		               256 * RT_PER);
	ek_launch(d, k_route<true>, dim3(T), dim3(256), 0, logits, ldl, (const float *)NULL, E, k, norm,
	          0.0f, ids, wts);
	return ek_launched(d, "route_softmax");
}
