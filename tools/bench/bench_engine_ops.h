/* bench_engine_ops.h — per-op timings of the CUDA engine's kernels at Laguna
 * S 2.1 shapes (`requantfs bench engine --device cuda --op NAME[,NAME]`). */
#ifndef RQ_TOOLS_BENCH_ENGINE_OPS_H
#define RQ_TOOLS_BENCH_ENGINE_OPS_H

#include <stdio.h>

struct rq_err;

/* Op names and what each measures, one "name<TAB>text" line per op. */
void bench_engine_list_ops(FILE *f);
/* Times each op of the comma-separated list on CUDA device `device` (pos,
 * ctx: the attention ops' position and cache), median of reps replays;
 * prints one line per op (json: one JSON object per line). */
int bench_engine_ops(int device, const char *names, int pos, int ctx, int reps, int json,
                     struct rq_err *err);
/* Per weight format of the CUDA engine (bf16, nvfp4): decode GEMV weight GB/s and its
 * fraction of the copy bandwidth measured in the same call, one "format NAME ..." line
 * each, and a line naming the formats without a CUDA kernel. */
int bench_engine_formats(int device, int reps, struct rq_err *err);

#endif
