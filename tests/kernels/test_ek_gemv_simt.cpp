/* test_ek_gemv_simt.cpp — the BF16 GEMV kernel's own source with the fused
 * RMSNorm (kernels/ek_gemv_bf16.cuh: k_gemv_bf16<..., NORM = true>) against
 * the pair it replaces (kernels/ek_rmsnorm.cuh: k_rmsnorm, then k_gemv_bf16
 * without NORM), run on the host under the SIMT emulation of
 * tests/kernels/emul/simt.h (suite kernels; runs in every build, no GPU).
 *
 * What it proves without a device: y and the stored xn of the fused kernel
 * are bit-identical to k_rmsnorm + k_gemv_bf16 (both use ek_reduce.cuh's
 * rms_rinv / rms_val with the same thread mapping), for the vector (cols %
 * 8 == 0) and scalar paths, T = 1..3, accumulating or not, a partial last
 * row block, xn stored by block 0 only; no barrier is missed (a deadlock is
 * reported); the fused kernel reads nothing of xn it did not write. Also the
 * fused result against the CPU twin ek_gemv_norm_cpu within test_ek_gpu's
 * GEMV bar (1e-5 · Σ|w·x|). Not proved: the NVFP4 kernel (mma.sync has no
 * emulation here; test_ek_gpu_pf checks it on a device), timing, the launch
 * (ek_gemv.cu) and PDL (no-ops here). */
extern "C" {
#include "quant/quant.h"
}
#include "kernels/ek.h"
#include "tests/kernels/emul/simt.h"
#include "tests/kernels/emul/simt_tap.h"

#include <math.h>

#include <vector>

#include "tests/kernels/emul/gemv_host.h"

#include "kernels/ek_reduce.cuh"
#include "kernels/ek_rmsnorm.cuh"
#include "kernels/ek_gemv_bf16.cuh"

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static float unif(float lo, float hi)
{
	return simt_unif(&rng, lo, hi);
}

template <int TT, bool VEC, bool NORM>
static int launch(const gv_args &a)
{
	dim3 grid((unsigned)((a.rows + BF_ROWS - 1) / BF_ROWS)), block(GV_THREADS);
	return simt_launch(k_gemv_bf16<TT, VEC, GV_PLAIN, NORM>, grid, block, a);
}

template <int TT, bool VEC>
static void run_case(int rows, int cols, int T, int acc)
{
	int ldx = cols + 3, ldxn = cols + 5, ldy = rows + 2;
	float eps = 1e-6f;
	std::vector<uint16_t> w((size_t)rows * cols);
	for (uint16_t &v : w)
		v = rq_f32_to_bf16(unif(-0.05f, 0.05f));
	std::vector<float> x((size_t)T * ldx), nw(cols), y0((size_t)T * ldy);
	for (float &v : x)
		v = unif(-3, 3);
	for (float &v : nw)
		v = unif(0.5f, 1.5f);
	for (float &v : y0)
		v = unif(-1, 1);
	/* xn filled with NaN: the fused kernel must write what it later reads */
	std::vector<float> yf = y0, yu = y0, yc = y0, xnf((size_t)T * ldxn, NAN),
	                   xnu((size_t)T * ldxn, NAN), xnc((size_t)T * ldxn);
	gv_args a = {};
	a.w = (const uint8_t *)w.data();
	a.stride = w.size() * 2;
	a.rows = rows;
	a.cols = cols;
	a.n = 1;
	a.x = x.data();
	a.ldx = ldx;
	a.y = yf.data();
	a.ldy = ldy;
	a.T = T;
	a.acc = acc;
	a.nw = nw.data();
	a.eps = eps;
	a.xn = xnf.data();
	a.ldxn = ldxn;
	gv_args u = a;
	u.x = xnu.data();
	u.ldx = ldxn;
	u.y = yu.data();
	u.nw = NULL;
	u.xn = NULL;
	char what[160];
	snprintf(what, sizeof what, "bf16 %dx%d T=%d%s, %s path", rows, cols, T, acc ? " acc" : "",
	         VEC ? "vector" : "scalar");
	unsigned long long sw0 = simt.switches;
	int rc = launch<TT, VEC, true>(a);
	if (!rc)
		rc = simt_launch(k_rmsnorm, dim3((unsigned)T), dim3(256), xnu.data(), ldxn,
		                 (const float *)x.data(), ldx, (const float *)nw.data(), cols, eps);
	if (!rc)
		rc = launch<TT, VEC, false>(u);
	if (rc) {
		OK(0, "emulated kernels, %s: %s", what, simt_error);
		return;
	}
	int bad_y = 0, bad_xn = 0;
	for (int t = 0; t < T; t++) {
		bad_y += memcmp(&yf[(size_t)t * ldy], &yu[(size_t)t * ldy], sizeof(float) * rows) != 0;
		bad_xn += memcmp(&xnf[(size_t)t * ldxn], &xnu[(size_t)t * ldxn], sizeof(float) * cols) != 0;
	}
	OK(!bad_y && !bad_xn, "fused k_gemv_bf16 == k_rmsnorm + k_gemv_bf16 bit for bit, %s: y (%d "
	   "tokens differ), xn (%d differ); %llu fiber switches", what, bad_y, bad_xn,
	   simt.switches - sw0);
	struct ek_w W = {};
	W.kind = EK_BF16;
	W.rows = rows;
	W.cols = cols;
	W.n = 1;
	W.stride = w.size() * 2;
	W.data = w.data();
	rc = ek_gemv_norm_cpu(&W, x.data(), ldx, nw.data(), eps, xnc.data(), ldxn, yc.data(), ldy, T,
	                      acc);
	double worst = 0;
	int bad = rc != 0;
	for (int t = 0; t < T && !rc; t++)
		for (int r = 0; r < rows; r++) {
			double mag = 0;
			for (int c = 0; c < cols; c++)
				mag += fabs((double)rq_bf16_to_f32(w[(size_t)r * cols + c]) * xnc[(size_t)t * ldxn + c]);
			double lim = 1e-5 * mag + (acc ? 3e-7 : 1e-30);
			double e = fabs((double)yf[(size_t)t * ldy + r] - yc[(size_t)t * ldy + r]);
			bad += !(e <= lim);
			worst = fmax(worst, e / lim);
		}
	OK(!bad, "fused kernel vs the CPU twin, %s: within 1e-5 x sum|w*x| (worst %.3f of the bound)",
	   what, worst);
}

int main(void)
{
	run_case<1, true>(40, 3072, 1, 0);
	run_case<2, true>(40, 3072, 2, 1);
	run_case<4, true>(24, 512, 3, 0);
	run_case<1, false>(37, 100, 1, 1);
	run_case<4, false>(16, 100, 3, 0);
	return tap_done();
}
