/* bench_engine_fmt.h — a BF16 model's Linears converted in memory to each
 * weight format the CPU engine reads, for `requantfs bench engine --model DIR`
 * (tools/bench/bench_engine_fmt.c): decode speed per format in one run. */
#ifndef RQ_TOOLS_BENCH_ENGINE_FMT_H
#define RQ_TOOLS_BENCH_ENGINE_FMT_H

#include <stddef.h>

struct lg_model;
struct rq_err;

enum bef_fmt {
	BEF_BF16 = 0,      /* the checkpoint's own weights */
	BEF_NVFP4,         /* nvfp4a16 (quant's scheme): E2M1, E4M3 scale per 16, global scale */
	BEF_FP8_CH,        /* F8_E4M3, BF16 scale per output channel (fp8-dynamic's form) */
	BEF_FP8_G,         /* F8_E4M3, BF16 scale per group of G columns */
	BEF_INT8_G,        /* pack-quantized 8 bits, symmetric, BF16 scale per group of G */
	BEF_INT4_G,        /* pack-quantized 4 bits, symmetric, BF16 scale per group of G */
	BEF_N
};

/* "bf16", "nvfp4", "fp8-channel", "fp8-group", "int8-group", "int4-group". */
const char *bef_name(enum bef_fmt f);
/* A comma-separated list of those names, or "all" / "none", into a bit set
 * (bit f for format f). -EINVAL naming the unknown entry in err. */
int bef_parse(const char *list, unsigned *set, struct rq_err *err);

struct bef;

/* Converts every Linear of m (the layers' and lm_head; a MoE router and the
 * shared-expert gate stay as they are) to each format of set, kept aside:
 * weights quantized round-to-nearest from the BF16 values (NVFP4 by quant's
 * nvfp4a16 scheme), G = the largest of 128, 64, 32, 16 dividing the Linear's
 * columns. -ENOTSUP (naming the tensor) when a Linear is not BF16, -ENOMEM. */
int bef_open(struct lg_model *m, unsigned set, struct bef **out, struct rq_err *err);
/* Puts format f's Linears into the model (the BF16 originals for BEF_BF16). */
void bef_use(struct bef *b, enum bef_fmt f);
/* The smallest group G of the group formats (0 when none was made). */
int bef_group(const struct bef *b);
/* Restores the original Linears and frees the converted ones; NULL accepted. */
void bef_close(struct bef *b);

#endif
