/* test_ek_wq_simt.cpp — the FP8 / INT8 / INT4 kernels' own source
 * (kernels/ek_gemv_q.cuh: k_gemv_q, kernels/ek_gemm_q.cuh: k_gemm_q) run on
 * the host under the SIMT emulation of tests/kernels/emul/simt.h (suite
 * kernels; every build, no GPU), on weights repacked by the twin
 * ek_wq_repack_cpu, against the CPU twins.
 *
 * What it proves without a device, for each kind:
 *   - the decode GEMV (plain mode, T = 1, 3, 16, accumulating or not; odd
 *     column counts whose last chunk is padding; unaligned x taking the
 *     scalar loads; per-row scales and groups of 16 and 128 columns) equals
 *     ek_gemv_cpu within 1e-6 · Σ|w·x| (the same weight values fl(v·s), fp32
 *     sums in another order: a failure of the decode or of the scale
 *     addressing is O(1) of the bound or more);
 *   - the fused RMSNorm variant is bit-identical to k_rmsnorm followed by the
 *     plain kernel (y and the xn of block 0);
 *   - the MoE modes: GV_GU gives silu(G_e·x)·(U_e·x) per slot and GV_DOWN the
 *     combine of the slots in pick order, within the same bound of the twins;
 *   - the prefill GEMM, plain and grouped by expert through a gather (the MoE
 *     prefill's tile table), against ek_gemm_cpu within the bound;
 *   - no barrier missed (the emulation reports a deadlock).
 * Not proved: the cc >= 8.9 E4M3 conversion (the GPU's cvt; test_ek_wq_gpu
 * on a device), the repack kernel (the same), timing, PDL (no-ops here). */
extern "C" {
#include "quant/quant.h"
}
#include "kernels/ek.h"
/* the twins' one product loop (kernels/ek_cpu_int.h): member e, mode 0 */
extern "C" int ek_matvec_cpu(const struct ek_w *W, int e, const float *x, int ldx, float *y,
                             int ldy, int T, int acc, int mode);
#include "tests/kernels/emul/simt.h"
#include "tests/kernels/emul/simt_tap.h"

#include <math.h>

#include <vector>

#include "tests/kernels/emul/gemv_host.h"

#include "kernels/ek_reduce.cuh"
#include "kernels/ek_rmsnorm.cuh"
#include "kernels/ek_gemm_q.cuh"

static uint64_t rng = 0x7F4A7C159E3779B9ull;

static float unif(float lo, float hi)
{
	return simt_unif(&rng, lo, hi);
}

static const char *kname(int kind)
{
	return kind == EK_FP8 ? "fp8" : kind == EK_INT8 ? "int8" : "int4";
}

/* A set of n random matrices of one kind in the engine layout (BF16 scales). */
struct qset {
	struct ek_w w;
	std::vector<uint8_t> data;
};

static void qset_make(qset &q, int kind, int rows, int cols, int n, int gshift)
{
	int G = ((cols - 1) >> gshift) + 1;
	size_t ldc = kind == EK_INT4 ? ((size_t)cols * 4 + 31) / 32 * 4 : (size_t)cols;
	size_t one = ek_w_bytes_g(kind, rows, cols, gshift);
	q.data.assign(one * n, 0);
	std::vector<uint8_t> codes(ldc * rows);
	std::vector<uint16_t> sc((size_t)rows * G);
	for (int e = 0; e < n; e++) {
		for (uint8_t &b : codes) {
			b = (uint8_t)(simt_unif(&rng, 0, 256));
			if (kind == EK_FP8 && (b & 0x7F) == 0x7F)   /* no NaN codes in products */
				b ^= 1;
		}
		for (uint16_t &s : sc)
			s = rq_f32_to_bf16(unif(0.002f, 0.02f));
		ek_wq_repack_cpu(kind, codes.data(), ldc, sc.data(), EK_S_BF16, 1, rows, cols, gshift,
		                 q.data.data() + one * e);
	}
	q.w = {};
	q.w.kind = kind;
	q.w.rows = rows;
	q.w.cols = cols;
	q.w.n = n;
	q.w.stride = one;
	q.w.data = q.data.data();
	q.w.gshift = gshift;
}

/* mag[t][r] = Σ|W_e[r][c]·x[t][c]| */
static std::vector<double> mag_of(const struct ek_w &W, int e, const float *x, int ldx, int T)
{
	std::vector<double> m((size_t)T * W.rows);
	std::vector<float> row(W.cols);
	for (int r = 0; r < W.rows; r++) {
		ek_w_row_cpu(&W, e, r, row.data());
		for (int t = 0; t < T; t++) {
			double s = 0;
			for (int c = 0; c < W.cols; c++)
				s += fabs((double)row[c] * x[(size_t)t * ldx + c]);
			m[(size_t)t * W.rows + r] = s;
		}
	}
	return m;
}

/* |got − want| <= 1e-6 · mag + atol for n values at stride ld; worst ratio */
static int close_all(const float *got, const float *want, const double *mag, int T, int n, int ld,
                     double atol, double *worst)
{
	int bad = 0;
	*worst = 0;
	for (int t = 0; t < T; t++)
		for (int i = 0; i < n; i++) {
			double lim = 1e-6 * mag[(size_t)t * n + i] + atol;
			double e = fabs((double)got[(size_t)t * ld + i] - want[(size_t)t * ld + i]);
			bad += !(e <= lim);
			*worst = fmax(*worst, e / lim);
		}
	return bad;
}

template <int KIND, int TT>
static int launch_plain(const gv_args &a, bool norm)
{
	dim3 grid((unsigned)((a.rows + Q_ROWS - 1) / Q_ROWS)), block(GV_THREADS);
	return norm ? simt_launch(k_gemv_q<KIND, TT, GV_PLAIN, true>, grid, block, a)
	            : simt_launch(k_gemv_q<KIND, TT, GV_PLAIN, false>, grid, block, a);
}

/* plain GEMV: kernel vs twin; with norm (T <= 4): fused vs k_rmsnorm + plain */
template <int KIND, int TT>
static void gemv_case(int rows, int cols, int T, int acc, int gshift, int xoff, bool norm)
{
	qset q;
	qset_make(q, KIND, rows, cols, 1, gshift);
	int ldx = cols + 3 + xoff, ldy = rows + 2, ldxn = cols + 5;
	std::vector<float> xb((size_t)T * ldx + 4), nw(cols), y0((size_t)T * ldy);
	for (float &v : xb)
		v = unif(-3, 3);
	for (float &v : nw)
		v = unif(0.5f, 1.5f);
	for (float &v : y0)
		v = unif(-1, 1);
	const float *x = xb.data() + xoff;       /* xoff 1: x not 16-byte aligned */
	std::vector<float> yk = y0, yt = y0, xn((size_t)T * ldxn, NAN);
	gv_args a = {};
	a.w = (const uint8_t *)q.w.data;
	a.stride = q.w.stride;
	a.rows = rows;
	a.cols = cols;
	a.n = 1;
	a.gshift = gshift;
	a.x = x;
	a.ldx = ldx;
	a.y = yk.data();
	a.ldy = ldy;
	a.T = T;
	a.acc = acc;
	char what[160];
	snprintf(what, sizeof what, "%s %dx%d T=%d%s, groups 2^%d, x %saligned%s", kname(KIND), rows,
	         cols, T, acc ? " acc" : "", gshift, xoff ? "un" : "", norm ? ", fused norm" : "");
	if (norm) {
		a.nw = nw.data();
		a.eps = 1e-6f;
		a.xn = xn.data();
		a.ldxn = ldxn;
	}
	int rc = launch_plain<KIND, TT>(a, norm);
	if (rc) {
		OK(0, "k_gemv_q %s: %s", what, simt_error);
		return;
	}
	if (norm) {      /* the unfused pair on xn2, bit for bit */
		std::vector<float> xn2((size_t)T * ldxn, NAN), yu = y0;
		rc = simt_launch(k_rmsnorm, dim3((unsigned)T), dim3(256), xn2.data(), ldxn, x, ldx,
		                 (const float *)nw.data(), cols, 1e-6f);
		gv_args u = a;
		u.x = xn2.data();
		u.ldx = ldxn;
		u.y = yu.data();
		u.nw = NULL;
		u.xn = NULL;
		if (!rc)
			rc = launch_plain<KIND, TT>(u, false);
		int bad = rc != 0;
		for (int t = 0; t < T && !rc; t++)
			bad += memcmp(&yk[(size_t)t * ldy], &yu[(size_t)t * ldy], sizeof(float) * rows) != 0 ||
			       memcmp(&xn[(size_t)t * ldxn], &xn2[(size_t)t * ldxn], sizeof(float) * cols) != 0;
		OK(!bad, "k_gemv_q %s == k_rmsnorm + k_gemv_q bit for bit (y, xn)%s%s", what,
		   rc ? ": " : "", rc ? simt_error : "");
		return;
	}
	ek_gemv_cpu(&q.w, x, ldx, yt.data(), ldy, T, acc);
	std::vector<double> mag = mag_of(q.w, 0, x, ldx, T);
	double worst;
	int bad = close_all(yk.data(), yt.data(), mag.data(), T, rows, ldy, acc ? 3e-7 : 1e-30, &worst);
	OK(!bad, "k_gemv_q %s vs ek_gemv_cpu: within 1e-6 x sum|w*x| (%d off, worst %.3f of the bound)",
	   what, bad, worst);
}

/* GV_GU then GV_DOWN for S = T·k slots against the twins' composition */
template <int KIND>
static void moe_case(int H, int I, int E, int k, int T, int gshift)
{
	qset G, U, D;
	qset_make(G, KIND, I, H, E, gshift);
	qset_make(U, KIND, I, H, E, gshift);
	qset_make(D, KIND, H, I, E, gshift);
	int S = T * k;
	std::vector<int> ids(S), cnt((H + Q_ROWS - 1) / Q_ROWS, 0);
	std::vector<float> wts(S), x((size_t)T * H), h((size_t)S * I), dd((size_t)S * H);
	std::vector<float> out((size_t)T * H), want((size_t)T * H);
	for (int s = 0; s < S; s++) {
		ids[s] = (s * 5 + 3) % E;
		wts[s] = unif(0.1f, 1.0f);
	}
	for (float &v : x)
		v = unif(-2, 2);
	gv_args a = {};
	a.w = (const uint8_t *)G.w.data;
	a.w2 = (const uint8_t *)U.w.data;
	a.stride = G.w.stride;
	a.stride2 = U.w.stride;
	a.rows = I;
	a.cols = H;
	a.n = E;
	a.gshift = gshift;
	a.x = x.data();
	a.ldx = H;
	a.y = h.data();
	a.ldy = I;
	a.T = S;
	a.ids = ids.data();
	a.k = k;
	int rc = simt_launch(k_gemv_q<KIND, 1, GV_GU, false>, dim3((unsigned)((I + Q_ROWS - 1) / Q_ROWS),
	                     (unsigned)S), dim3(GV_THREADS), a);
	gv_args b = {};
	b.w = (const uint8_t *)D.w.data;
	b.stride = D.w.stride;
	b.rows = H;
	b.cols = I;
	b.n = E;
	b.gshift = gshift;
	b.x = h.data();
	b.ldx = I;
	b.y = dd.data();
	b.ldy = H;
	b.T = S;
	b.ids = ids.data();
	b.k = k;
	b.wts = wts.data();
	b.scale = 1.5f;
	b.out = out.data();
	b.ldo = H;
	b.cnt = cnt.data();
	if (!rc)
		rc = simt_launch(k_gemv_q<KIND, 1, GV_DOWN, false>, dim3((unsigned)((H + Q_ROWS - 1) / Q_ROWS),
		                 (unsigned)S), dim3(GV_THREADS), b);
	char what[128];
	snprintf(what, sizeof what, "%s experts E=%d k=%d T=%d [%d -> %d -> %d]", kname(KIND), E, k, T,
	         H, I, H);
	if (rc) {
		OK(0, "k_gemv_q GU/DOWN %s: %s", what, simt_error);
		return;
	}
	/* the twin on the kernel's own h (the down input), so each stage is held alone */
	std::vector<float> g(I), u(I), ht((size_t)S * I);
	double wg = 0, wd = 0;
	int badg = 0, badd = 0, cnt0 = 0;
	for (int s = 0; s < S; s++) {
		int e = ids[s];
		const float *xs = x.data() + (size_t)(s / k) * H;
		ek_matvec_cpu(&G.w, e, xs, H, g.data(), I, 1, 0, 0);
		ek_matvec_cpu(&U.w, e, xs, H, u.data(), I, 1, 0, 0);
		std::vector<double> mg = mag_of(G.w, e, xs, H, 1), mu = mag_of(U.w, e, xs, H, 1);
		for (int i = 0; i < I; i++) {
			float want_h = dsilu(g[i]) * u[i];
			double lim = 1e-6 * (fabs(u[i]) * mg[i] + fabs(dsilu(g[i])) * mu[i]) + 1e-30;
			double err = fabs((double)h[(size_t)s * I + i] - want_h);
			badg += !(err <= lim);
			wg = fmax(wg, err / lim);
		}
	}
	for (int t = 0; t < T; t++) {
		std::vector<double> mag(H, 0.0);
		for (int j = 0; j < k; j++) {
			int s = t * k + j;
			std::vector<float> ds(H);
			ek_matvec_cpu(&D.w, ids[s], h.data() + (size_t)s * I, I, ds.data(), H, 1, 0, 0);
			std::vector<double> md = mag_of(D.w, ids[s], h.data() + (size_t)s * I, I, 1);
			for (int r = 0; r < H; r++) {
				want[(size_t)t * H + r] += wts[s] * ds[r];
				mag[r] += fabs(wts[s]) * md[r];
			}
		}
		for (int r = 0; r < H; r++) {
			double lim = 1.5 * 2e-6 * mag[r] + 1e-30;
			double err = fabs((double)out[(size_t)t * H + r] - 1.5 * want[(size_t)t * H + r]);
			badd += !(err <= lim);
			wd = fmax(wd, err / lim);
		}
	}
	for (int c : cnt)
		cnt0 += c != 0;
	OK(!badg, "k_gemv_q GV_GU %s: silu(g)*u within the twins' 1e-6 bound (worst %.3f)", what, wg);
	OK(!badd && !cnt0, "k_gemv_q GV_DOWN %s: the combine within 2e-6 x sum|w*d| (worst %.3f), "
	   "counters back at 0 (%d not)", what, wd, cnt0);
}

/* prefill GEMM, plain (gather NULL) or grouped by expert through a gather */
template <int KIND>
static void gemm_case(int rows, int cols, int M, int acc, int gshift, int grouped)
{
	int E = grouped ? 3 : 1;
	qset q;
	qset_make(q, KIND, rows, cols, E, gshift);
	int ldx = cols + 1, ldy = rows + 3, ntok = grouped ? 7 : M;
	std::vector<float> x((size_t)ntok * ldx), y0((size_t)M * ldy);
	for (float &v : x)
		v = unif(-2, 2);
	for (float &v : y0)
		v = unif(-1, 1);
	std::vector<float> yk = y0, yt = y0;
	std::vector<int> gather(M), tiles;
	for (int m = 0; m < M; m++)
		gather[m] = grouped ? (m * 3 + 1) % ntok : m;
	/* grouped: rows [0, M) cut into runs of one expert (at most 64 slots) */
	for (int m0 = 0, e = 0; grouped && m0 < M; e = (e + 1) % E) {
		int m1 = m0 + 37 < M ? m0 + 37 : M;
		tiles.insert(tiles.end(), {e, m0, m1});
		m0 = m1;
	}
	gq_args a = {};
	a.w = (const uint8_t *)q.w.data;
	a.stride = q.w.stride;
	a.rows = rows;
	a.cols = cols;
	a.gshift = gshift;
	a.x = x.data();
	a.ldx = ldx;
	a.gather = grouped ? gather.data() : NULL;
	a.y = yk.data();
	a.ldy = ldy;
	a.M = M;
	a.acc = acc;
	a.tiles = grouped ? tiles.data() : NULL;
	unsigned gy = grouped ? (unsigned)(tiles.size() / 3) : (unsigned)((M + GQ_BM - 1) / GQ_BM);
	int rc = simt_launch(k_gemm_q<KIND>, dim3((unsigned)((rows + GQ_BN - 1) / GQ_BN), gy),
	                     dim3(GQ_THREADS), a);
	char what[128];
	snprintf(what, sizeof what, "%s %dx%d M=%d%s%s, groups 2^%d", kname(KIND), rows, cols, M,
	         acc ? " acc" : "", grouped ? ", grouped by expert" : "", gshift);
	if (rc) {
		OK(0, "k_gemm_q %s: %s", what, simt_error);
		return;
	}
	int bad = 0;
	double worst = 0;
	for (int m = 0; m < M; m++) {
		int e = 0;
		for (size_t ti = 0; grouped && ti < tiles.size(); ti += 3)
			if (m >= tiles[ti + 1] && m < tiles[ti + 2])
				e = tiles[ti];
		const float *xm = x.data() + (size_t)gather[m] * ldx;
		ek_matvec_cpu(&q.w, e, xm, ldx, yt.data() + (size_t)m * ldy, ldy, 1, acc, 0);
		std::vector<double> mag = mag_of(q.w, e, xm, ldx, 1);
		double w1;
		bad += close_all(yk.data() + (size_t)m * ldy, yt.data() + (size_t)m * ldy, mag.data(), 1,
		                 rows, ldy, acc ? 3e-7 : 1e-30, &w1);
		worst = fmax(worst, w1);
	}
	OK(!bad, "k_gemm_q %s vs the twin: within 1e-6 x sum|w*x| (%d off, worst %.3f of the bound)",
	   what, bad, worst);
}

template <int KIND>
static void kind_cases()
{
	gemv_case<KIND, 1>(40, 512, 1, 0, EK_GSHIFT_ROW, 0, false);
	gemv_case<KIND, 4>(37, 1056, 3, 1, 7, 0, false);
	gemv_case<KIND, 16>(20, 128, 16, 0, 4, 0, false);
	gemv_case<KIND, 1>(17, 100, 1, 1, 4, 1, false);        /* padding chunk, unaligned x */
	gemv_case<KIND, 4>(19, 77, 4, 0, EK_GSHIFT_ROW, 1, false);
	gemv_case<KIND, 2>(24, 300, 2, 1, 5, 0, true);
	gemv_case<KIND, 1>(16, 99, 1, 0, EK_GSHIFT_ROW, 1, true);
	moe_case<KIND>(128, 64, 6, 2, 2, 7);
	moe_case<KIND>(96, 48, 4, 3, 1, 4);
	gemm_case<KIND>(70, 200, 67, 0, 7, 0);
	gemm_case<KIND>(64, 129, 20, 1, EK_GSHIFT_ROW, 0);
	gemm_case<KIND>(40, 256, 90, 0, 4, 1);
}

int main(void)
{
	kind_cases<EK_FP8>();
	kind_cases<EK_INT8>();
	kind_cases<EK_INT4>();
	return tap_done();
}
