/* test_ek_attn_simt.cpp — the decode attention kernels' own source
 * (kernels/ek_attn_split.cuh: k_attn_split, then k_attn_merge) run on the
 * host under the SIMT emulation of tests/kernels/emul/simt.h, against the
 * CPU twin ek_attn_cpu (suite kernels; runs in every build, no GPU).
 *
 * What it proves without a device: the kernels' indexing (groups, splits,
 * chunks, ring slots, vector lanes, key groups, partials), their barriers
 * (a __syncthreads or shuffle some threads miss is a reported deadlock),
 * masking of keys past the end, that the merge reads only partials written
 * by this call (work is filled with NaN first) and that a second call on the
 * same work gives the same bytes. Not proved: timing, memory coalescing,
 * CUDA's expf (glibc's here) and the launch itself (ek_attn.cu).
 * Tolerance against the twin: 2e-5 · max|v| · gate, test_ek_gpu's bar. */
extern "C" {
#include "quant/quant.h"
}
#include "kernels/ek.h"
#include "tests/kernels/emul/simt.h"
#include "tests/kernels/emul/simt_tap.h"

/* what ek_dev.cuh gives the kernels on a GPU */
static inline void pdl_start() {}

static inline float warp_sum(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

static inline float warp_max(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

static inline float dsoftplus(float x)
{
	return x > 20.0f ? x : log1pf(expf(x));
}

static inline float2 at_fp8x2(uint32_t b)
{
	return float2{rq_e4m3_to_f32((uint8_t)(b & 0xFF)), rq_e4m3_to_f32((uint8_t)(b >> 8))};
}

#include "kernels/ek_attn_split.cuh"

#include <vector>

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static float unif(float lo, float hi)
{
	return simt_unif(&rng, lo, hi);
}

/* The decode path of ek_attn: splits, then merge. 0 or -1 (simt_error). */
static int emu_attn(const at_args &a, int kvtype)
{
	dim3 g1((unsigned)a.ng, (unsigned)a.ns, (unsigned)(a.nkv * a.T)), b(EK_AT_THREADS);
	int rc;
#define EMU(KV, HD)                                                                            \
	if (kvtype == KV && a.hd == HD)                                                            \
		rc = simt_launch(k_attn_split<KV, HD>, g1, b, a);
#define EMU_HD(KV) EMU(KV, 8) EMU(KV, 16) EMU(KV, 32) EMU(KV, 64) EMU(KV, 128) EMU(KV, 256)
	rc = -2;
	EMU_HD(EK_KV_F32) EMU_HD(EK_KV_BF16) EMU_HD(EK_KV_FP8)
#undef EMU_HD
#undef EMU
	if (rc == -2) {
		snprintf(simt_error, sizeof simt_error, "no kernel for hd %d", a.hd);
		return -1;
	}
	return rc ? rc : simt_launch(k_attn_merge, dim3((unsigned)a.nh, (unsigned)a.T), b, a);
}

static void run_case(int kvtype, int nh, int nkv, int hd, int T, int pos, int window, int cap,
                     int gate, int max_keys)
{
	int ldq = nh * hd + 3, ldo = nh * hd + 1, ldg = gate == 2 ? nh * hd : nh + 2;
	size_t ne = (size_t)cap * nkv * hd, cb = ek_kv_bytes(kvtype, cap, nkv, hd);
	std::vector<uint8_t> kc(cb), vc(cb);
	for (size_t i = 0; i < ne; i++) {
		float k = unif(-1.5f, 1.5f), v = unif(-2, 2);
		if (kvtype == EK_KV_F32) {
			((float *)kc.data())[i] = k;
			((float *)vc.data())[i] = v;
		} else if (kvtype == EK_KV_BF16) {
			((uint16_t *)kc.data())[i] = rq_f32_to_bf16(k);
			((uint16_t *)vc.data())[i] = rq_f32_to_bf16(v);
		} else {
			kc[i] = rq_f32_to_e4m3(k);
			vc[i] = rq_f32_to_e4m3(v);
		}
	}
	std::vector<float> q((size_t)T * ldq), g((size_t)T * ldg), want((size_t)T * ldo, 0.0f);
	for (float &x : q)
		x = unif(-1.5f, 1.5f);
	for (float &x : g)
		x = unif(-3, 3);
	std::vector<float> got((size_t)T * ldo, 0.0f), again((size_t)T * ldo, 0.0f);
	size_t wb = ek_attn_work_bytes(T, nh, hd, max_keys);
	std::vector<float> work(wb / sizeof(float), NAN);
	char what[200];
	snprintf(what, sizeof what, "%s %d/%d heads hd %d T=%d pos %d %s cap %d max_keys %d gate %d",
	         kvtype == EK_KV_F32 ? "f32" : kvtype == EK_KV_BF16 ? "bf16" : "fp8", nh, nkv, hd, T,
	         pos, window ? "sliding" : "full", cap, max_keys, gate);
	at_args a = at_make(got.data(), ldo, q.data(), ldq, g.data(), ldg, gate, T, nh, nkv, hd,
	                    kc.data(), vc.data(), cap, &pos, window, max_keys, work.data());
	unsigned long long sw0 = simt.switches;
	if (emu_attn(a, kvtype)) {
		OK(0, "emulated kernels, %s: %s", what, simt_error);
		return;
	}
	a.out = again.data();
	int rc2 = emu_attn(a, kvtype);
	ek_attn_cpu(want.data(), ldo, q.data(), ldq, g.data(), ldg, gate, T, nh, nkv, hd, kc.data(),
	            vc.data(), kvtype, cap, &pos, window, max_keys, NULL);
	double bound = 2e-5 * 2.0 * (gate ? 3.1 : 1.0), worst = 0;
	int bad = 0;
	for (int t = 0; t < T; t++)
		for (int i = 0; i < nh * hd; i++) {
			double e = fabs((double)got[(size_t)t * ldo + i] - want[(size_t)t * ldo + i]);
			bad += !(e <= bound);
			worst = e > worst ? e : worst;
		}
	int lo = ek_at_lo(pos + T - 1, window), nch = ek_at_chunks(pos + T - lo), ng, per;
	ek_at_groups(nh / nkv, &ng, &per);
	OK(bad == 0, "emulated kernels vs twin, %s: %d groups x %d splits (%d chunks), max |diff| "
	   "%.3g (bound %.2g), %llu fiber switches", what, ng, ek_at_nsplit(max_keys) < nch ?
	   ek_at_nsplit(max_keys) : nch, nch, worst, bound, simt.switches - sw0);
	OK(rc2 == 0 && !memcmp(got.data(), again.data(), sizeof(float) * got.size()),
	   "second call on the same work: same bytes (%s)", what);
}

/* A shuffle half a warp skips (for a __syncthreads) is reported, not hung;
 * the same kernel without the divergence runs. */
static __global__ void k_barrier(int *x, int diverge)
{
	if (diverge && (threadIdx.x & 31) >= 16)
		__syncthreads();
	else
		x[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
}

int main()
{
	std::vector<int> x(128);
	int rc = simt_launch(k_barrier, dim3(1), dim3(128), x.data(), 0), bad = 0;
	for (int i = 0; i < 128; i++)
		bad += x[i] != (i ^ 1);
	OK(rc == 0 && bad == 0, "emulation: __shfl_xor_sync exchanges lanes (x[i] = i ^ 1)");
	rc = simt_launch(k_barrier, dim3(1), dim3(128), x.data(), 1);
	OK(rc == -1 && strstr(simt_error, "deadlock"), "emulation reports a divergent barrier (%s)",
	   simt_error);
	/* Laguna S 2.1's head shapes (two kv heads instead of eight: same code) */
	run_case(EK_KV_BF16, 18, 2, 128, 1, 128, 512, 512, 1, 512);     /* ring, 3 chunks */
	run_case(EK_KV_BF16, 18, 2, 128, 1, 600, 512, 512, 1, 512);     /* ring wrapped, 8 */
	run_case(EK_KV_F32, 18, 2, 128, 1, 1024, 512, 512, 1, 512);
	run_case(EK_KV_FP8, 18, 2, 128, 1, 600, 512, 512, 1, 512);
	run_case(EK_KV_BF16, 18, 2, 128, 3, 1024, 512, 514, 2, 512);    /* T = 3 */
	run_case(EK_KV_F32, 12, 2, 128, 1, 2047, 0, 2048, 1, 16384);    /* full: 32 splits */
	run_case(EK_KV_FP8, 12, 2, 128, 1, 2100, 0, 2200, 0, 16384);    /* 33, last chunk 53 keys */
	if (!getenv("RQ_TEST_QUICK"))
		run_case(EK_KV_BF16, 6, 1, 128, 1, 16383, 0, 16384, 1, 16384); /* 64 x 4 chunks */
	/* group, vector and ring corner cases */
	run_case(EK_KV_FP8, 10, 2, 64, 2, 300, 0, 302, 1, 4096);        /* rep 5: groups 3 + 2 */
	run_case(EK_KV_FP8, 4, 1, 8, 1, 300, 100, 100, 1, 100);         /* hd 8: 8-byte vectors */
	run_case(EK_KV_BF16, 6, 2, 16, 3, 40, 16, 18, 2, 16);           /* ring of 18 < a chunk */
	run_case(EK_KV_F32, 8, 2, 256, 2, 700, 0, 1024, 2, 1024);       /* hd 256: 2 key groups */
	run_case(EK_KV_F32, 12, 2, 32, 2, 1000, 0, 1100, 1, 100);       /* keys > max_keys */
	run_case(EK_KV_BF16, 16, 4, 64, 16, 63, 0, 80, 1, 80);          /* T = 16 across a chunk edge */
	return tap_done();
}
