/* test_ek_gpu_pf.c — programmatic dependent launch and the RMSNorm fused
 * into the GEMV, on the device (suite gpu; SKIP without CUDA or a device).
 *
 * usage: test_ek_gpu_pf [REQUANTFS]
 *
 *   - ek_gemv_norm against ek_rmsnorm + ek_gemv on the device: y and xn bit
 *     for bit (the fused kernels use k_rmsnorm's reduction and roundings),
 *     and against the CPU twin within the GEMV's 1e-5 · Σ|w·x|; BF16 and
 *     NVFP4, T = 1..4, the BF16 T · cols > 46 KB fallback, the scalar path,
 *     several staged chunks; a bad shape is -EINVAL;
 *   - PDL: the mode ek_open chose (2 expected on compute capability >= 9.0),
 *     EK_PDL=0 honoured; a chain of dependent kernels (norm, GEMV, add,
 *     fused norm + GEMV; 500 in all) gives bit-identical results with PDL off, on, and
 *     captured in a graph with PDL edges and replayed;
 *   - with REQUANTFS (mkckpt's tiny NVFP4 and BF16 models): the CUDA engine's
 *     greedy tokens and logits are bit-identical with EK_PDL=0/1 x
 *     EK_FUSE=0/1, and a direct decode step launches 2 · layers + 1 kernels
 *     fewer fused (counts printed). */
#include "engine/model/forward_cuda.h"
#include "engine/model/model.h"
#include "engine/model/sampler.h"
#include "base/err.h"
#include "tests/kernels/test_ek_dev.h"
#include "tests/kernels/test_ek_decode.h"

#include <errno.h>
#include <stdio.h>
#include <unistd.h>

/* ------------------------------------------------------ fused norm */

static void test_gemv_norm(int kind, int rows, int cols, int T, int acc)
{
	struct tu_w t;
	tu_w_make(&t, kind, rows, cols, 1, 0.05f);
	int ldx = cols + 4, ldy = rows + 3, ldxn = cols + 8;
	float eps = 1e-6f;
	float *x = tu_floats((size_t)T * ldx, -3, 3), *nw = tu_floats(cols, 0.5f, 1.5f);
	float *y0 = tu_floats((size_t)T * ldy, -1, 1);
	size_t yb = sizeof(float) * T * ldy, xb = sizeof(float) * T * ldxn;
	float *yf = tu_alloc(yb), *yu = tu_alloc(yb), *yc = tu_alloc(yb);
	float *xnf = tu_alloc(xb), *xnu = tu_alloc(xb), *xnc = tu_alloc(xb);
	struct ek_w w = wdev(&t);
	float *dx = up(x, sizeof(float) * T * ldx), *dnw = up(nw, sizeof(float) * cols);
	float *dyf = up(y0, yb), *dyu = up(y0, yb), *dxnf = up(xnf, xb), *dxnu = up(xnu, xb);
	int rc = ek_gemv_norm(D, &w, dx, ldx, dnw, eps, dxnf, ldxn, dyf, ldy, T, acc);
	int rc2 = ek_rmsnorm(D, dxnu, ldxn, dx, ldx, dnw, T, cols, eps);
	if (!rc2)
		rc2 = ek_gemv(D, &w, dxnu, ldxn, dyu, ldy, T, acc);
	if (rc || rc2)
		printf("# gemv+norm rc %d, unfused rc %d: %s\n", rc, rc2, ek_error(D));
	down(yf, dyf, yb);
	down(yu, dyu, yb);
	down(xnf, dxnf, xb);
	down(xnu, dxnu, xb);
	int bad = 0;
	for (int tt = 0; tt < T; tt++) {
		bad += memcmp(yf + (size_t)tt * ldy, yu + (size_t)tt * ldy, sizeof(float) * rows) != 0;
		bad += memcmp(xnf + (size_t)tt * ldxn, xnu + (size_t)tt * ldxn, sizeof(float) * cols) != 0;
	}
	const char *k = kind == EK_BF16 ? "bf16" : "nvfp4";
	TAP_OK(!rc && !rc2 && !bad, "gemv+norm %s %dx%d T=%d%s: GPU fused == GPU rmsnorm + gemv bit "
	       "for bit, y and xn (%d rows differ)", k, rows, cols, T, acc ? " acc" : "", bad);
	memcpy(yc, y0, yb);
	ek_gemv_norm_cpu(&t.w, x, ldx, nw, eps, xnc, ldxn, yc, ldy, T, acc);
	float *g2 = tu_alloc(sizeof(float) * T * rows), *c2 = tu_alloc(sizeof(float) * T * rows);
	float *mag = tu_alloc(sizeof(float) * T * rows), *row = tu_alloc(sizeof(float) * cols);
	for (int tt = 0; tt < T; tt++) {
		memcpy(g2 + (size_t)tt * rows, yf + (size_t)tt * ldy, sizeof(float) * rows);
		memcpy(c2 + (size_t)tt * rows, yc + (size_t)tt * ldy, sizeof(float) * rows);
	}
	for (int r = 0; r < rows; r++) {
		ek_w_row_cpu(&t.w, 0, r, row);
		for (int tt = 0; tt < T; tt++) {
			double s = 0;
			for (int c = 0; c < cols; c++)
				s += fabs((double)row[c] * xnc[(size_t)tt * ldxn + c]);
			mag[(size_t)tt * rows + r] = (float)s;
		}
	}
	char what[160];
	snprintf(what, sizeof what, "gemv+norm %s %dx%d T=%d%s: GPU vs twin", k, rows, cols, T,
	         acc ? " acc" : "");
	tu_close_f(what, g2, c2, mag, (size_t)T * rows, 1e-5, acc ? 3e-7 : 1e-30);
	free(x); free(nw); free(y0); free(yf); free(yu); free(yc); free(xnf); free(xnu); free(xnc);
	free(g2); free(c2); free(mag); free(row);
	ek_free(D, dx); ek_free(D, dnw); ek_free(D, dyf); ek_free(D, dyu); ek_free(D, dxnf);
	ek_free(D, dxnu);
	wdev_free(&w);
	tu_w_free(&t);
}

static void test_gemv_norm_args(void)
{
	struct tu_w t;
	tu_w_make(&t, EK_BF16, 16, 64, 1, 0.05f);
	struct ek_w w = wdev(&t);
	float *dx = ek_alloc(D, 4096), *dy = ek_alloc(D, 4096), *dnw = ek_alloc(D, 4096);
	int r1 = ek_gemv_norm(D, &w, dx, 64, dnw, 1e-6f, NULL, 0, dy, 16, EK_GEMV_NORM_MAX_T + 1, 0);
	int r2 = ek_gemv_norm(D, &w, dx, 64, NULL, 1e-6f, NULL, 0, dy, 16, 1, 0);
	int r3 = ek_gemv_norm(D, &w, dx, 64, dnw, 1e-6f, dx + 8, 64, dy, 16, 1, 0);
	TAP_OK(r1 == -EINVAL && r2 == -EINVAL && r3 == -EINVAL, "gemv+norm: T > %d, no norm weights, "
	       "xn overlapping x: -EINVAL (%d %d %d; %s)", EK_GEMV_NORM_MAX_T, r1, r2, r3, ek_error(D));
	ek_free(D, dx); ek_free(D, dy); ek_free(D, dnw);
	wdev_free(&w);
	tu_w_free(&t);
}

/* ------------------------------------------------------------- PDL */

/* 100 rounds of: xn = norm(x); y = W·xn; x += y; y2 = W·norm(x) (fused);
 * x += y2 — 400 dependent kernels, each reading its predecessor's output. */
static int chain(const struct ek_w *w, float *dx, float *dxn, float *dy, const float *dnw, int H)
{
	int rc = 0;
	for (int i = 0; i < 100 && !rc; i++) {
		if ((rc = ek_rmsnorm(D, dxn, H, dx, H, dnw, 1, H, 1e-6f)) ||
		    (rc = ek_gemv(D, w, dxn, H, dy, H, 1, 0)) || (rc = ek_add(D, dx, dy, H)) ||
		    (rc = ek_gemv_norm(D, w, dx, H, dnw, 1e-6f, dxn, H, dy, H, 1, 0)))
			break;
		rc = ek_add(D, dx, dy, H);
	}
	return rc;
}

static void test_pdl_chain(int mode0)
{
	int H = 2048;
	struct tu_w t;
	tu_w_make(&t, EK_BF16, H, H, 1, 0.02f);
	struct ek_w w = wdev(&t);
	float *x = tu_floats(H, -1, 1), *nw = tu_floats(H, 0.5f, 1.5f);
	float *r[3];
	float *dx = up(x, sizeof(float) * H), *dnw = up(nw, sizeof(float) * H);
	float *dxn = ek_alloc(D, sizeof(float) * H), *dy = ek_alloc(D, sizeof(float) * H);
	int rc = 0, modes[3] = {0, mode0 >= 1 ? 1 : 0, mode0}, got[3];
	for (int i = 0; i < 3; i++) {
		r[i] = tu_alloc(sizeof(float) * H);
		rc |= ek_set_pdl(D, modes[i]);
		got[i] = ek_pdl(D);
		rc |= ek_h2d(D, dx, x, sizeof(float) * H);
		if (i < 2) {
			rc |= chain(&w, dx, dxn, dy, dnw, H);
		} else {                        /* captured (PDL edges when mode 2), replayed twice */
			struct ek_graph *g = NULL;
			rc |= ek_sync(D) || ek_capture_begin(D);
			if (!rc) {
				int c = chain(&w, dx, dxn, dy, dnw, H);
				int e = ek_capture_end(D, &g);
				rc |= c || e;
			}
			rc |= ek_h2d(D, dx, x, sizeof(float) * H);
			if (!rc)
				rc |= ek_graph_run(D, g);
			ek_graph_free(g);
			got[i] = ek_pdl(D);
		}
		down(r[i], dx, sizeof(float) * H);
	}
	if (rc)
		printf("# pdl chain: %s\n", ek_error(D));
	int same = !rc && !memcmp(r[0], r[1], sizeof(float) * H) && !memcmp(r[0], r[2], sizeof(float) * H);
	int finite = 1;
	for (int i = 0; i < H; i++)
		finite &= isfinite(r[0][i]);
	TAP_OK(same && finite, "PDL: 500 dependent kernels bit-identical with PDL off, on (mode %d) "
	       "and captured (mode %d after the capture)", got[1], got[2]);
	ek_set_pdl(D, mode0);
	for (int i = 0; i < 3; i++)
		free(r[i]);
	free(x); free(nw);
	ek_free(D, dx); ek_free(D, dnw); ek_free(D, dxn); ek_free(D, dy);
	wdev_free(&w);
	tu_w_free(&t);
}

static void test_pdl_default(const struct ek_info *inf, int *mode)
{
	*mode = ek_pdl(D);
	printf("# PDL: mode %d (%s)\n", *mode, ek_pdl_status(D));
	if (inf->cc >= 90)
		TAP_OK(*mode == 2, "PDL on by default (launches and graphs) on cc %d: %s", inf->cc,
		       ek_pdl_status(D));
	else
		TAP_OK(*mode == 0, "PDL off below cc 9.0 (cc %d): %s", inf->cc, ek_pdl_status(D));
	struct ek_dev *d2 = NULL;
	char msg[512];
	setenv("EK_PDL", "0", 1);
	int rc = ek_open(0, &d2, msg, sizeof msg);
	unsetenv("EK_PDL");
	TAP_OK(!rc && ek_pdl(d2) == 0 && ek_set_pdl(d2, 1) == -ENODEV,
	       "EK_PDL=0: PDL off (%s), not switchable on", rc ? msg : ek_pdl_status(d2));
	ek_close(d2);
}

/* ------------------------------------------------- engine, PDL x fuse */

#define NGEN 24

static int engine_run(const struct lg_model *m, const char *pdl, const char *fuse, int *tok,
                      float *logits, long *step_launches)
{
	int V = m->cfg.vocab, n = 12, p[12];
	struct lgc_opts o = tu_pf_setup(p, V, pdl, fuse, NGEN);
	struct lgc *g = NULL;
	struct rq_err err = {0};
	int rc = lgc_create(m, &o, &g, &err);
	if (!rc)
		rc = lgc_forward(g, p, n, logits, 1, &err);
	for (int i = 0; i < NGEN && !rc; i++) {
		tok[i] = lg_argmax(logits + (size_t)i * V, V);
		unsigned long long l0 = ek_launches(NULL);
		rc = lgc_forward(g, &tok[i], 1, logits + (size_t)(i + 1) * V, 1, &err);
		if (i == 0)                    /* a direct step (the graph comes later) */
			*step_launches = (long)(ek_launches(NULL) - l0);
	}
	if (rc)
		printf("# EK_PDL=%s EK_FUSE=%s: %s\n", pdl, fuse, err.msg);
	struct lgc_stats st;
	if (!rc) {
		lgc_stats(g, &st);
		if (!st.graph)
			printf("# EK_PDL=%s EK_FUSE=%s: no decode graph\n", pdl, fuse);
	}
	lgc_free(g);
	unsetenv("EK_PDL");
	unsetenv("EK_FUSE");
	return rc || !st.graph;
}

static void test_engine(const char *rq, const char *dir, const char *flags, const char *name)
{
	struct lg_model *m = tu_model_make(rq, dir, flags, name);
	if (!m)
		return;
	static const char *cfg[4][2] = {{"1", "1"}, {"0", "1"}, {"1", "0"}, {"0", "0"}};
	int V = m->cfg.vocab, L = m->cfg.n_layers, tok[4][NGEN], rc = 0;
	long nl[4] = {0};
	float *lg[4];
	for (int i = 0; i < 4; i++) {
		lg[i] = tu_alloc(sizeof(float) * (NGEN + 1) * V);
		rc |= engine_run(m, cfg[i][0], cfg[i][1], tok[i], lg[i], &nl[i]);
	}
	int same[4] = {1, 1, 1, 1};
	for (int i = 1; i < 4; i++)
		same[i] = !rc && !memcmp(tok[i], tok[0], sizeof tok[0]) &&
		          !memcmp(lg[i], lg[0], sizeof(float) * (NGEN + 1) * V);
	TAP_OK(!rc && same[1], "%s: logits bit-identical with PDL on and EK_PDL=0 (fused), %d steps",
	       name, NGEN + 1);
	TAP_OK(!rc && same[2] && same[3], "%s: logits bit-identical fused and EK_FUSE=0 (PDL on, off)",
	       name);
	printf("# %s: kernels per direct decode step: %ld unfused, %ld fused\n", name, nl[2], nl[0]);
	TAP_OK(!rc && nl[2] - nl[0] == 2 * L + 1 && nl[1] == nl[0] && nl[3] == nl[2],
	       "%s: a direct decode step launches %ld kernels fused, %ld unfused (%d layers)", name,
	       nl[0], nl[2], L);
	for (int i = 0; i < 4; i++)
		free(lg[i]);
	lg_model_close(m);
}

int main(int argc, char **argv)
{
	unsetenv("EK_PDL");   /* before the open: ek_open reads it */
	struct ek_info inf;
	dev_open_or_skip(&inf);
	printf("# %s, cc %d, %d SMs\n", inf.name, inf.cc, inf.sms);
	int mode;
	test_pdl_default(&inf, &mode);
	test_gemv_norm(EK_BF16, 1000, 3072, 1, 0);
	test_gemv_norm(EK_BF16, 3072, 1024, 2, 1);
	test_gemv_norm(EK_BF16, 333, 3072, 3, 0);
	test_gemv_norm(EK_BF16, 130, 3072, 4, 0);        /* 48 KB of x: the unfused fallback */
	test_gemv_norm(EK_BF16, 37, 100, 3, 0);          /* cols % 8 != 0: scalar path */
	test_gemv_norm(EK_NVFP4, 1024, 3072, 1, 0);
	test_gemv_norm(EK_NVFP4, 3072, 1024, 4, 1);
	test_gemv_norm(EK_NVFP4, 20, 48, 3, 0);          /* padded tiles */
	test_gemv_norm(EK_NVFP4, 64, 12288, 1, 0);       /* staged x in several chunks */
	test_gemv_norm_args();
	test_pdl_chain(mode);
	ek_close(D);
	if (argc > 1) {
		char tmp[] = "/tmp/rq-test-ek-pf-XXXXXX", dir[600], cmd[700];
		if (!mkdtemp(tmp)) {
			TAP_OK(0, "cannot create a temporary directory");
			return tap_done();
		}
		snprintf(dir, sizeof dir, "%s/nvfp4", tmp);
		test_engine(argv[1], dir, "--layers 8 --bf16-layers 6-7", "tiny nvfp4");
		snprintf(dir, sizeof dir, "%s/dense", tmp);
		test_engine(argv[1], dir, "--layers 6 --dense", "tiny bf16");
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
		if (system(cmd))
			printf("# could not remove %s\n", tmp);
	} else {
		printf("# no REQUANTFS argument: engine cases not run\n");
	}
	return tap_done();
}
