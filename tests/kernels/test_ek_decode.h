/* test_ek_decode.h — what the engine tests that decode on the CUDA engine
 * (test_ek_engine.c and test_ek_gpu_pf.c on the device, test_ek_emul.c
 * emulated) share: their prompt, a mkckpt model, one greedy decode on either
 * engine and the distance of two logit sets. */
#ifndef RQ_TESTS_EK_DECODE_H
#define RQ_TESTS_EK_DECODE_H

#include "engine/model/forward.h"
#include "engine/model/forward_cuda.h"
#include "engine/model/sampler.h"
#include "engine/model/model.h"
#include "base/err.h"
#include "tests/tap.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* The prompt: p[i] = (37 i + 11) mod V, i < n. */
static inline void tu_prompt(int *p, int n, int V)
{
	for (int i = 0; i < n; i++)
		p[i] = (i * 37 + 11) % V;
}

/* The PDL x fuse decode (test_ek_emul.c emulated, test_ek_gpu_pf.c on the
 * device): the prompt p[12], EK_PDL and EK_FUSE set as given, and the
 * engine's options for ngen tokens (the prompt in batches of 3, so that it
 * takes the fused path too). */
static inline struct lgc_opts tu_pf_setup(int *p, int V, const char *pdl, const char *fuse,
                                          int ngen)
{
	tu_prompt(p, 12, V);
	setenv("EK_PDL", pdl, 1);
	setenv("EK_FUSE", fuse, 1);
	return (struct lgc_opts){.max_ctx = 12 + ngen + 1, .kv = "f32", .gemv_prefill = 1,
	                         .max_batch = 3};
}

/* `RQ mkckpt DIR FLAGS` and the model opened; NULL after a failing TAP line
 * for name. */
static inline struct lg_model *tu_model_make(const char *rq, const char *dir, const char *flags,
                                             const char *name)
{
	char cmd[4096];
	snprintf(cmd, sizeof cmd, "'%s' mkckpt '%s' %s >/dev/null", rq, dir, flags);
	if (system(cmd)) {
		TAP_OK(0, "%s: mkckpt failed (%s)", name, cmd);
		return NULL;
	}
	struct rq_err err = {0};
	struct lg_model *m;
	if (lg_model_open(dir, &m, &err)) {
		TAP_OK(0, "%s: %s", name, err.msg);
		return NULL;
	}
	return m;
}

/* The two mkckpt models the CPU-vs-CUDA decode tests run, each made in a
 * temp dir named after tmpl ("/tmp/...-XXXXXX", removed after) and given to
 * check(rq, dir, flags, name, tol): an NVFP4 model with two BF16 layers
 * (tolerance nvfp4_tol) and a dense BF16 one (1e-4). */
static inline void tu_decode_models(const char *rq, const char *tmpl,
                                    void (*check)(const char *, const char *, const char *,
                                                  const char *, double),
                                    double nvfp4_tol)
{
	char tmp[256], dir[600];
	snprintf(tmp, sizeof tmp, "%s", tmpl);
	if (!mkdtemp(tmp))
		TAP_SKIP_ALL("cannot create a temporary directory");
	snprintf(dir, sizeof dir, "%s/nvfp4", tmp);
	check(rq, dir, "--layers 8 --bf16-layers 6-7", "tiny nvfp4", nvfp4_tol);
	snprintf(dir, sizeof dir, "%s/dense", tmp);
	check(rq, dir, "--layers 6 --dense", "tiny bf16", 1e-4);
	tap_rmtree(tmp);
}

/* Greedy decode on s (the CPU engine) or, when s is NULL, on g: the prompt
 * p[n], then ngen tokens out[ngen]; logits[ngen + 1][V] (the last prompt
 * position, then after each generated token but the last). A failure is
 * printed as "# cpu: ..." or "# <gpu>: ...". 0 or the engine's -errno. */
static inline int tu_greedy(struct lg_state *s, struct lgc *g, int V, const int *p, int n,
                            int ngen, int *out, float *logits, const char *gpu)
{
	struct rq_err err = {0};
	int rc = s ? lg_forward(s, p, n, logits, 1, &err) : lgc_forward(g, p, n, logits, 1, &err);
	for (int i = 0; i < ngen && !rc; i++) {
		out[i] = lg_argmax(logits + (size_t)i * V, V);
		float *l = logits + (size_t)(i + 1) * V;
		rc = s ? lg_forward(s, &out[i], 1, l, 1, &err) : lgc_forward(g, &out[i], 1, l, 1, &err);
	}
	if (rc)
		printf("# %s: %s\n", s ? "cpu" : gpu, err.msg);
	return rc;
}

/* max over rows of max|a - b| / max|b| (logits [rows][V]). */
static inline double worst_rel(const float *a, const float *b, int rows, int V)
{
	double w = 0;
	for (int r = 0; r < rows; r++) {
		double mx = 0, d = 0;
		for (int i = 0; i < V; i++) {
			mx = fmax(mx, fabs(b[(size_t)r * V + i]));
			d = fmax(d, fabs(a[(size_t)r * V + i] - b[(size_t)r * V + i]));
		}
		w = fmax(w, d / fmax(mx, 1e-20));
	}
	return w;
}

#endif
