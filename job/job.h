/* job.h — runs one of a plan's quantization jobs: reads its BF16 weights
 * from SRC and hands them to the quantizer device (qdev/qdev.h). */
#ifndef RQ_JOB_H
#define RQ_JOB_H

#include <stddef.h>
#include <stdint.h>

struct rq_plan;
struct rq_err;
struct rq_quantizer;
struct rq_cache_key;

/* The cache key of plan job j: XXH3-128 of its canonical descriptor (recipe,
 * RQ_RECIPE_VERSION, an MSE observer with RQ_OBSERVER_VERSION (minmax adds
 * nothing: its keys are those of before --observer), and per module: SRC
 * identity, tensor name, dtype, shape, byte range, calibration bits; the
 * partner is the job's other module). desc, if non-NULL, gets the malloc'd descriptor text. 0 or
 * -ENOMEM. The mount and export key the same job the same way. A remote
 * SRC whose reader is unverified (plan.h) adds a line per module: a
 * --remote-verify none mount's entries are its own, never a verifying
 * reader's. */
int rq_job_key(const struct rq_plan *p, size_t j, struct rq_cache_key *key, char **desc);

/* The cache key of virtual file i stored whole (the mount's materialized
 * shard, rq_cache_file_*): XXH3-128 of its name and size, its SRC file's
 * identity (a hub blob's sha256, else dev, inode, size, mtime, ctime), the
 * bytes the plan holds for it, and the keys of its jobs in the order they
 * first appear (and the unverified line as rq_job_key). The mount and export
 * key a file the same way. 0 or -ENOMEM. */
int rq_file_key(const struct rq_plan *p, size_t i, struct rq_cache_key *key);

/* Runs job j: checks that each SRC file it reads is still the plan's
 * (inode, size, mtime, ctime of the fd and of the path), reads its BF16
 * weights (fds indexed like plan->srcs; their pages dropped after), quantizes,
 * checks the SRC files again, and writes plan->jobs[j].out_size bytes to out. Errors name the
 * tensor: -EDOM NaN/Inf, -EIO read error or short file, -ESTALE SRC changed
 * since the plan, -ENOMEM. */
int rq_job_run(struct rq_quantizer *q, const struct rq_plan *p, size_t j, const int *src_fds,
               uint8_t *out, struct rq_err *err);

#endif
