/* test_ek_engine.c — the CUDA engine against the CPU engine on mkckpt's tiny
 * models (suite gpu; SKIP without CUDA or a device).
 *
 * usage: test_ek_engine REQUANTFS
 *
 * For the tiny NVFP4 model and its all-BF16 twin (--dense): a 12-token
 * prompt, then 32 greedy tokens, on the CPU (engine/model/forward.c, the oracle)
 * and on the GPU with an F32 KV cache and GEMV numerics throughout:
 *   - the 32 greedy tokens are identical;
 *   - every step's logits within 5e-3 · max|logit| (fp16 activations of the
 *     NVFP4 GEMV: the twins' numerics reach 1.8e-3 on this model, see
 *     test_ek_emul's history; 1e-4 for the BF16 model, fp32 everywhere);
 *   - the decode graph was captured and replayed; a reset reproduces the
 *     same tokens bit for bit (graph replay is deterministic).
 * Then the default configuration (BF16 KV, a 40-token prompt through the
 * GEMM kernels): it runs and its logits are finite; the deviation from the
 * CPU and the greedy agreement are reported, not asserted (BF16 rounding
 * moves near-tied router scores of the random tiny model: another expert,
 * a large difference). The sliding window of the tiny model (16) is shorter
 * than the sequence, so the rings wrap. */
#include "engine/model/forward.h"
#include "engine/model/forward_cuda.h"
#include "engine/model/model.h"
#include "engine/model/sampler.h"
#include "kernels/ek.h"
#include "base/err.h"
#include "tests/tap.h"
#include "tests/kernels/test_ek_decode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NGEN 32

/* Greedy decode: prompt then NGEN tokens; logits [NGEN + 1][V] (the last
 * prompt position, then after each generated token but the last). */
static int run_cpu(const struct lg_model *m, const int *p, int n, int *out, float *logits)
{
	struct lg_state *s;
	struct rq_err err = {0};
	int V = m->cfg.vocab;
	if (lg_state_create(m, n + NGEN + 1, 64, NULL, &s, &err)) {
		printf("# cpu: %s\n", err.msg);
		return -1;
	}
	int rc = tu_greedy(s, NULL, V, p, n, NGEN, out, logits, "gpu");
	lg_state_free(s);
	return rc;
}

static int run_gpu(struct lgc *g, const int *p, int n, int *out, float *logits, int V)
{
	lgc_reset(g);
	return tu_greedy(NULL, g, V, p, n, NGEN, out, logits, "gpu");
}

/* issue 21: mkckpt's NVFP4 model is W4A4 (its routed experts quantize their
 * inputs, ek_moe_q). Quantized inputs are discontinuous in the activations:
 * the fp16 GEMV's rounding moves some values across an E2M1 boundary, so
 * GPU and CPU are not compared within a tolerance here. Asserted: finite
 * logits, and the GPU's last-prompt-position logits nearer the CPU's W4A4
 * ones than the CPU's A16 ones (by half); the deviation and the greedy
 * agreement are reported. ek_moe_q itself: test_ek_gpu; bits: test_ek_emul. */
static void check_w4a4(const char *dir, const char *name)
{
	struct lg_model *m = NULL, *m16 = NULL;
	struct rq_err err = {0};
	setenv("RQ_ENGINE_ACT_QUANT", "0", 1);
	int rc = lg_model_open(dir, &m16, &err);
	unsetenv("RQ_ENGINE_ACT_QUANT");
	if (rc || (rc = lg_model_open(dir, &m, &err))) {
		TAP_OK(0, "%s W4A4: %s", name, err.msg);
		lg_model_close(m16);
		return;
	}
	if (!m->n_act) {
		lg_model_close(m);
		lg_model_close(m16);
		return;
	}
	int V = m->cfg.vocab, n = 12, p[40], tc[NGEN], t16[NGEN], tg[NGEN];
	tu_prompt(p, 40, V);
	float *lc = malloc(sizeof(float) * (NGEN + 1) * V), *l16 = malloc(sizeof(float) * (NGEN + 1) * V);
	float *lg = malloc(sizeof(float) * (NGEN + 1) * V);
	struct lgc *g = NULL;
	struct lgc_opts o = {.max_ctx = 40 + NGEN + 1, .kv = "f32", .gemv_prefill = 1};
	rc = run_cpu(m, p, n, tc, lc);
	if (!rc)
		rc = run_cpu(m16, p, n, t16, l16);
	if (!rc && (rc = lgc_create(m, &o, &g, &err)))
		printf("# lgc_create: %s\n", err.msg);
	if (!rc)
		rc = run_gpu(g, p, n, tg, lg, V);
	int finite = !rc, same = 0;
	for (size_t i = 0; finite && i < (size_t)(NGEN + 1) * V; i++)
		finite = isfinite(lg[i]);
	while (!rc && same < NGEN && tg[same] == tc[same])
		same++;
	double dq = rc ? 1 : worst_rel(lg, lc, 1, V), d16 = rc ? 0 : worst_rel(lg, l16, 1, V);
	TAP_OK(finite && dq <= 0.5 * d16, "%s W4A4 (%d Linears quantize their input): GPU logits at the "
	       "prompt's end within %.2e x max of the CPU's W4A4, %.2e of its A16 (<= half); greedy "
	       "tokens agree for %d of %d", name, m->n_act, dq, d16, same, NGEN);
	lgc_free(g);
	free(lc);
	free(l16);
	free(lg);
	lg_model_close(m);
	lg_model_close(m16);
}

static void check_model(const char *rq, const char *dir, const char *flags, const char *name,
                        double tol)
{
	/* the tolerances below are for A16 (see check_w4a4) */
	setenv("RQ_ENGINE_ACT_QUANT", "0", 1);
	struct lg_model *m = tu_model_make(rq, dir, flags, name);
	unsetenv("RQ_ENGINE_ACT_QUANT");
	if (!m)
		return;
	struct rq_err err = {0};
	int V = m->cfg.vocab, n = 12, p[40];
	tu_prompt(p, 40, V);
	int tc[NGEN], tg[NGEN], tg2[NGEN];
	float *lc = malloc(sizeof(float) * (NGEN + 1) * V), *lg = malloc(sizeof(float) * (NGEN + 1) * V);
	float *lg2 = malloc(sizeof(float) * (NGEN + 1) * V);
	struct lgc *g = NULL;
	struct lgc_opts o = {.max_ctx = 40 + NGEN + 1, .kv = "f32", .gemv_prefill = 1};
	int rc = run_cpu(m, p, n, tc, lc);
	if (!rc && (rc = lgc_create(m, &o, &g, &err)))
		printf("# lgc_create: %s\n", err.msg);
	if (!rc)
		rc = run_gpu(g, p, n, tg, lg, V);
	TAP_OK(!rc && !memcmp(tc, tg, sizeof tc), "%s: %d greedy tokens on the GPU == the CPU engine's",
	       name, NGEN);
	if (!rc) {
		double w = worst_rel(lg, lc, NGEN + 1, V);
		TAP_OK(w <= tol, "%s: logits of all %d steps within %.0e x max|logit| (worst %.2e)", name,
		       NGEN + 1, tol, w);
		struct lgc_stats st;
		lgc_stats(g, &st);
		rc = run_gpu(g, p, n, tg2, lg2, V);
		TAP_OK(st.graph && !rc && !memcmp(tg, tg2, sizeof tg) &&
		       !memcmp(lg + V, lg2 + V, sizeof(float) * NGEN * V),
		       "%s: decode graph captured; a reset replays the same tokens and logits bit for bit "
		       "(%ld steps, %.1f us each)", name, st.decode_steps,
		       st.decode_steps ? st.decode_s / st.decode_steps * 1e6 : 0.0);
	}
	lgc_free(g);
	g = NULL;

	/* default options: BF16 KV, the prompt through the GEMM kernels */
	struct lgc_opts o2 = {.max_ctx = 40 + NGEN + 1};
	n = 40;
	rc = run_cpu(m, p, n, tc, lc);
	if (!rc && (rc = lgc_create(m, &o2, &g, &err)))
		printf("# lgc_create: %s\n", err.msg);
	if (!rc)
		rc = run_gpu(g, p, n, tg, lg, V);
	int finite = !rc;
	for (size_t i = 0; finite && i < (size_t)(NGEN + 1) * V; i++)
		finite = isfinite(lg[i]);
	int same = 0;
	while (!rc && same < NGEN && tg[same] == tc[same])
		same++;
	TAP_OK(finite, "%s, bf16 KV, 40-token prompt (GEMM path): runs, finite logits; last prompt "
	       "position within %.2e x max of the CPU, greedy tokens agree for %d of %d", name,
	       rc ? 1.0 : worst_rel(lg, lc, 1, V), same, NGEN);
	lgc_free(g);
	free(lc);
	free(lg);
	free(lg2);
	lg_model_close(m);
	check_w4a4(dir, name);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: test_ek_engine REQUANTFS\n");
		return 2;
	}
	if (!ek_compiled())
		TAP_SKIP_ALL("built without CUDA (reconfigure with -Dcuda=enabled)");
	if (ek_device_count() == 0)
		TAP_SKIP_ALL("no usable CUDA device (ek_device_count() == 0)");
	tu_decode_models(argv[1], "/tmp/rq-test-ek-engine-XXXXXX", check_model, 5e-3);
	return tap_done();
}
