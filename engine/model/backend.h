/* backend.h — one seam in front of the two engines (as calm does):
 * the CPU reference (forward.h) and the CUDA path (forward_cuda.h) behind
 * the same four operations, chosen once by lg_backend_open.
 *
 *   forward   feeds tokens[0..n) at the next positions; logits [n_out][vocab]
 *             of the last n_out tokens (lg_forward's contract: -EINVAL for a
 *             token id, -ENOSPC past max_ctx, -EIO on a device failure)
 *   reset     forgets the sequence (position 0)
 *   position  tokens fed so far
 *   free      releases the engine (the model is the caller's)
 *
 * A backend is one sequence, used by one thread at a time. Library code: the
 * text a CLI may want to print (the CUDA memory plan, why auto fell back to
 * the CPU, the weight upload) is left in fields and buffers, never printed. */
#ifndef RQ_ENGINE_BACKEND_H
#define RQ_ENGINE_BACKEND_H

#include <stddef.h>
#include "engine/model/model.h"

struct rq_err;
struct rq_pool;

struct lg_backend {
	const char *name;          /* "cpu" or "cuda" */
	int (*forward)(struct lg_backend *b, const int *tokens, int n, float *logits, int n_out,
	               struct rq_err *err);
	void (*reset)(struct lg_backend *b);
	int (*position)(const struct lg_backend *b);
	void (*free)(struct lg_backend *b);
	void *impl;                /* struct lg_state (cpu) or struct lgc (cuda) */
	int threads;               /* cpu: threads of the pool; cuda: 0 */
	double upload_s;           /* cuda: weight upload, wall clock (0 on the cpu) */
	size_t upload_bytes;       /* cuda: bytes uploaded */
	char fallback[1024];       /* auto on the cpu: why CUDA was not used ("" if not tried) */
};

enum lg_device { LG_DEVICE_AUTO = 0, LG_DEVICE_CPU = 1, LG_DEVICE_CUDA = 2 };

/* "auto", "cpu", "cuda" → *out; -EINVAL otherwise. */
int lg_device_parse(const char *s, enum lg_device *out);

struct lg_backend_opts {
	enum lg_device device;     /* auto: CUDA when ek_device_count() > 0 and the CUDA
	                              engine opens, else the CPU */
	int cuda_device;           /* CUDA ordinal */
	int max_ctx;               /* positions the sequence may reach */
	int max_batch;             /* tokens per prompt batch (<= 0: each engine's default) */
	struct rq_pool *pool;      /* cpu threads (NULL: one); must outlive the backend */
	const char *kv;            /* cuda KV cache type: "bf16" (NULL), "f32", "fp8" */
	int fast;                  /* cpu: 1 = the fast mode (lg_state_fast), never the oracle;
	                              the CUDA engine has its own kernels and ignores it */
	char *plan;                /* out, may be NULL: the CUDA memory plan's text when one
	                              was made, even if opening then failed ("" otherwise) */
	size_t plan_len;
};

/* Opens the engine the options choose. -ENODEV (device cuda without CUDA or
 * a device), -ENOMEM (the plan does not fit), and whatever lg_state_create /
 * lgc_create answer. The model must outlive the backend. */
int lg_backend_open(const struct lg_model *m, const struct lg_backend_opts *o,
                    struct lg_backend **out, struct rq_err *err);
/* The CPU engine's fast mode on (1) or off (0: the oracle), between two
 * forwards (forward.h lg_state_fast). -ENODEV for the CUDA engine. */
int lg_backend_fast(struct lg_backend *b, int on);
/* b->free(b), accepting NULL. */
void lg_backend_close(struct lg_backend *b);

#endif
