/* bench.h — `requantfs bench <what>`: benchmarks that link the product's
 * code and report ratios to a baseline measured in the same run. */
#ifndef RQ_TOOLS_BENCH_H
#define RQ_TOOLS_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include "quant/quant.h"

int bench_quant(int argc, char **argv);    /* tools/bench/bench_quant.c */
int bench_export(int argc, char **argv);   /* tools/bench/bench_export.c */
int bench_mount(int argc, char **argv);    /* tools/bench/bench_mount.c */
int bench_engine(int argc, char **argv);   /* tools/bench/bench_engine.c */

/* GPU twin of bench_quant for one BF16 tensor [rows][cols] (CUDA builds). */
int bench_quant_cuda(const uint16_t *w, size_t rows, size_t cols, enum rq_recipe r, int reps);
/* An MSE observer's whole job through the quantizer device (the search on the GPU) vs the
 * CPU pool's job, same run, bytes compared (bench quant --observer O --device cuda). */
#include "quant/observer.h"
int bench_quant_obs_cuda(const uint16_t *w, size_t rows, size_t cols, enum rq_scheme sc,
                         enum rq_observer o, int threads, int reps);
int bench_engine_cuda(int argc, char **argv); /* tools/bench/bench_engine_cuda.c: bench engine --device cuda */

/* Seconds on a monotonic clock (tools/bench/bench_clock.c). */
double bench_now(void);
/* memcpy bandwidth (bytes/s) of copying `bytes` from src to dst, best of reps. */
double bench_memcpy_bw(void *dst, const void *src, unsigned long long bytes, int reps);

#endif
