/* bench_synth.h — synthetic Laguna models (tools/, the benchmarks' and
 * tests' fixture; not part of the engine). */
#ifndef RQ_TOOLS_BENCH_SYNTH_H
#define RQ_TOOLS_BENCH_SYNTH_H

#include <stddef.h>
#include "engine/model/model.h"

struct rq_err;

/* A model with config.json's shapes and no weights: every data pointer NULL
 * (lgc_create fills those weights on the device with deterministic random
 * values), norms 1, selection biases 0; routed experts NVFP4 when
 * nvfp4_experts, everything else BF16 as in the checkpoint. For benchmarks
 * and memory plans. Free with bench_synth_free (not lg_model_close). */
int bench_synth_model(const char *config_json, int nvfp4_experts, struct lg_model **out,
                      struct rq_err *err);
void bench_synth_free(struct lg_model *m);
/* config.json text of Laguna S 2.1's shapes at `layers` depth with `experts`
 * routed experts (top-10, or all when fewer): for bench_synth_model. */
void bench_laguna_config(char *buf, size_t len, int layers, int experts);

#endif
