/* verify.h — compare the tensors two checkpoints share, byte for byte, and
 * tell which recipe variant (if any) reproduces a reference's NVFP4 bytes
 * from BF16 weights. */
#ifndef RQ_OFFLINE_VERIFY_H
#define RQ_OFFLINE_VERIFY_H

#include <stdint.h>

struct rq_err;

enum rq_vkind {
	RQ_V_TENSOR,     /* a tensor present in both: equal or ndiff bytes differ */
	RQ_V_MODULE,     /* a BF16 module vs the reference's NVFP4: variants tried */
};

struct rq_vresult {
	enum rq_vkind kind;
	const char *name;        /* tensor name, or module name for RQ_V_MODULE */
	int shape_mismatch;      /* TENSOR: dtype or shape differ */
	uint64_t bytes, ndiff;   /* TENSOR: size, differing bytes */
	unsigned variants;       /* MODULE: bit r set if recipe r reproduces REF exactly */
	uint64_t best_ndiff;     /* MODULE: fewest differing bytes over the variants */
};

struct rq_vsummary {
	uint64_t compared, equal, differ, only_dir, only_ref;
	uint64_t modules, modules_reproduced;
	unsigned variants_all;   /* recipes that reproduced every module checked */
	uint64_t requests[3], fetched[3];   /* remote DIR, REF, source: range reads made and
	                                       bytes they fetched (coalesced; 0 when local) */
};

typedef void (*rq_verify_fn)(void *ctx, const struct rq_vresult *r);

/* dir and ref are checkpoint directories (or safetensors files). source, if
 * not NULL, is a BF16 checkpoint used for recipe diagnosis of modules that
 * are BF16 there and NVFP4 in ref (dir itself is used when it has them).
 * regex (Python re syntax as Python's re.search: a match anywhere in the
 * name; plan/pyre.h, bounded) limits the tensors. */
int rq_verify(const char *dir, const char *ref, const char *source, const char *regex,
              rq_verify_fn fn, void *ctx, struct rq_vsummary *sum, struct rq_err *err);
/* The same where rd[0..2] (dir, ref, source), when not NULL, is a remote
 * checkpoint (hf://) read through plan.h's source reader (the path is then
 * ignored). */
struct rq_src_reader;
int rq_verify_readers(const char *dir, const char *ref, const char *source,
                      const struct rq_src_reader *const rd[3], const char *regex,
                      rq_verify_fn fn, void *ctx, struct rq_vsummary *sum, struct rq_err *err);

#endif
