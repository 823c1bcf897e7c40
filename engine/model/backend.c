/* backend.c — lg_backend over forward.c (cpu) and forward_cuda.c (cuda). */
#include "engine/model/backend.h"
#include "engine/model/forward.h"
#include "engine/model/forward_cuda.h"
#include "base/err.h"
#include "base/pool.h"
#include "kernels/ek.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int lg_device_parse(const char *s, enum lg_device *out)
{
	static const char *const names[] = {"auto", "cpu", "cuda"};
	for (int i = 0; s && i < 3; i++) {
		if (!strcmp(s, names[i])) {
			*out = (enum lg_device)i;
			return 0;
		}
	}
	return -EINVAL;
}

/* ---------------------------------------------------------------- cpu */

static int cpu_forward(struct lg_backend *b, const int *tokens, int n, float *logits, int n_out,
                       struct rq_err *err)
{
	return lg_forward(b->impl, tokens, n, logits, n_out, err);
}

static void cpu_reset(struct lg_backend *b)
{
	lg_state_reset(b->impl);
}

static int cpu_position(const struct lg_backend *b)
{
	return lg_state_pos(b->impl);
}

static void cpu_free(struct lg_backend *b)
{
	lg_state_free(b->impl);
	free(b);
}

/* --------------------------------------------------------------- cuda */

static int cuda_forward(struct lg_backend *b, const int *tokens, int n, float *logits, int n_out,
                        struct rq_err *err)
{
	return lgc_forward(b->impl, tokens, n, logits, n_out, err);
}

static void cuda_reset(struct lg_backend *b)
{
	lgc_reset(b->impl);
}

static int cuda_position(const struct lg_backend *b)
{
	return lgc_pos(b->impl);
}

static void cuda_free(struct lg_backend *b)
{
	lgc_free(b->impl);
	free(b);
}

/* The CUDA engine into b, its plan's text into o->plan. */
static int open_cuda(const struct lg_model *m, const struct lg_backend_opts *o,
                     struct lg_backend *b, struct rq_err *err)
{
	struct lgc_opts go = {.device = o->cuda_device, .max_ctx = o->max_ctx,
	                      .max_batch = o->max_batch, .kv = o->kv};
	struct lgc_plan plan;
	struct rq_err perr = {0};
	if (o->plan && o->plan_len && !lgc_plan_make(m, &go, &plan, &perr))
		lgc_plan_text(&plan, o->plan, o->plan_len);
	struct lgc *g;
	int rc = lgc_create(m, &go, &g, err);
	if (rc)
		return rc;
	struct lgc_stats st;
	lgc_stats(g, &st);
	*b = (struct lg_backend){.name = "cuda", .forward = cuda_forward, .reset = cuda_reset,
	                         .position = cuda_position, .free = cuda_free, .impl = g,
	                         .upload_s = st.upload_s, .upload_bytes = st.upload_bytes};
	return 0;
}

int lg_backend_open(const struct lg_model *m, const struct lg_backend_opts *o,
                    struct lg_backend **out, struct rq_err *err)
{
	if (o->plan && o->plan_len)
		o->plan[0] = 0;
	struct lg_backend *b = calloc(1, sizeof *b);
	if (!b)
		return rq_errf(err, -ENOMEM, "out of memory");
	char why[sizeof b->fallback] = "";
	if (o->device == LG_DEVICE_CUDA || (o->device == LG_DEVICE_AUTO && ek_device_count() > 0)) {
		int rc = open_cuda(m, o, b, err);
		if (!rc) {
			*out = b;
			return 0;
		}
		if (o->device == LG_DEVICE_CUDA) {
			free(b);
			return rc;
		}
		snprintf(why, sizeof why, "%s", err ? err->msg : "CUDA engine failed");
	}
	struct lg_state *s;
	int rc = lg_state_create(m, o->max_ctx, o->max_batch, o->pool, &s, err);
	if (rc) {
		free(b);
		return rc;
	}
	lg_state_fast(s, o->fast);
	*b = (struct lg_backend){.name = "cpu", .forward = cpu_forward, .reset = cpu_reset,
	                         .position = cpu_position, .free = cpu_free, .impl = s,
	                         .threads = rq_pool_size(o->pool)};
	memcpy(b->fallback, why, sizeof why);
	*out = b;
	return 0;
}

int lg_backend_fast(struct lg_backend *b, int on)
{
	if (strcmp(b->name, "cpu"))
		return -ENODEV;
	lg_state_fast(b->impl, on);
	return 0;
}

void lg_backend_close(struct lg_backend *b)
{
	if (b)
		b->free(b);
}
