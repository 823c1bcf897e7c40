/* quant_fast.c — the fast CPU quantizer: same bytes as quant_ref.c, faster.
 *
 * A row is processed in blocks of up to BLOCK_GROUPS groups of 16 columns,
 * in three loops that gcc auto-vectorizes (no intrinsics):
 *   1. group absmax on BF16 bits (|w| bits order like the values);
 *   2. group scale bytes and seff = value(scale) / gs for the whole block;
 *   3. q = w / seff (a true binary32 division per element, as the recipe
 *      says: a reciprocal-multiply would change ties), E2M1 by threshold
 *      counting, nibble packing.
 * The arithmetic is the same IEEE operations in the same order as the
 * reference, so vector width does not matter: the loops are compiled three
 * times (baseline SSE2, AVX2, x86-64-v4 AVX-512), the best one the CPU runs is
 * picked at first use, and tests run every variant the CPU has against the
 * oracle (rq_quant_isa_force). Rows are spread over the thread pool. */
#include "quant/quant.h"
#include "quant/quant_int.h"
#include "base/pool.h"

#include <errno.h>

#define BLOCK_GROUPS 64
#define MIN_CHUNK_ELEMS 65536   /* work per pool chunk, in weights */

#if defined(__x86_64__) && \
    ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && __GNUC__ >= 11))
#define RQ_X86_VARIANTS 1
#endif

/* rng: the groups' ranges (BF16 bits, an observer's choice) in place of their max |w|, or
 * NULL */
static inline __attribute__((always_inline))
void quant_block(const uint16_t *restrict w, size_t ng, float gs, int r,
                 uint8_t *restrict packed, uint8_t *restrict scales, const uint16_t *rng)
{
	int16_t gmax[BLOCK_GROUPS];   /* [ng] group max |w| as BF16 bits */
	float seff[BLOCK_GROUPS];     /* [ng] effective scale value(sc) / gs */

	for (size_t g = 0; rng && g < ng; g++)
		gmax[g] = (int16_t)rng[g];
	for (size_t g = 0; !rng && g < ng; g++) {
		int16_t m = 0;
		for (int j = 0; j < 16; j++) {
			int16_t a = (int16_t)(w[g * 16 + j] & 0x7FFF);
			m = a > m ? a : m;
		}
		gmax[g] = m;
	}
	for (size_t g = 0; g < ng; g++) {
		uint32_t c = rq_scale_code(r, rq_bf16f((uint16_t)gmax[g]), gs);
		scales[g] = (uint8_t)c;
		seff[g] = rq_seff(c, gs);
	}
	for (size_t g = 0; g < ng; g++) {
		const uint16_t *wg = w + g * 16;
		float se = seff[g];
		uint32_t code[16];
		for (int j = 0; j < 16; j++)
			code[j] = rq_e2m1_code(rq_bf16f(wg[j]) / se);
		for (int k = 0; k < 8; k++)
			packed[g * 8 + k] = (uint8_t)(code[2 * k] | (code[2 * k + 1] << 4));
	}
}

static inline __attribute__((always_inline))
void quant_rows_body(enum rq_recipe r, const uint16_t *w, size_t rows, size_t cols, float gs,
                     uint8_t *packed, uint8_t *scales, const uint16_t *rng)
{
	int bf16 = r == RQ_RECIPE_BF16;
	size_t groups = cols / 16;
	for (size_t i = 0; i < rows; i++) {
		const uint16_t *wr = w + i * cols;
		uint8_t *pr = packed + i * (cols / 2);
		uint8_t *sr = scales + i * groups;
		for (size_t g = 0; g < groups; g += BLOCK_GROUPS) {
			size_t ng = groups - g < BLOCK_GROUPS ? groups - g : BLOCK_GROUPS;
			/* the variant's S6 as a constant: each copy of the block is
			 * straight-line (fp32 and fp32div differ only in gs) */
			const uint16_t *rg = rng ? rng + i * groups + g : NULL;
			if (bf16)
				quant_block(wr + g * 16, ng, gs, RQ_R_BF16, pr + g * 8, sr + g, rg);
			else
				quant_block(wr + g * 16, ng, gs, RQ_R_FP32, pr + g * 8, sr + g, rg);
		}
	}
}

static inline __attribute__((always_inline))
uint16_t absmax_body(const uint16_t *w, size_t n)
{
	int16_t m = 0;
	for (size_t i = 0; i < n; i++) {
		int16_t a = (int16_t)(w[i] & 0x7FFF);
		m = a > m ? a : m;
	}
	return (uint16_t)m;
}

/* One copy of the loops per instruction set. */
#define RQ_VARIANT(suffix, attr) \
	attr static void quant_rows_##suffix(enum rq_recipe r, const uint16_t *w, size_t rows, \
	                                      size_t cols, float gs, uint8_t *p, uint8_t *s) \
	{ quant_rows_body(r, w, rows, cols, gs, p, s, NULL); } \
	attr static void rng_rows_##suffix(const uint16_t *w, size_t rows, size_t cols, float gs, \
	                                   const uint16_t *rng, uint8_t *p, uint8_t *s) \
	{ quant_rows_body(RQ_RECIPE_BF16, w, rows, cols, gs, p, s, rng); } \
	attr static uint16_t absmax_##suffix(const uint16_t *w, size_t n) \
	{ return absmax_body(w, n); }

RQ_VARIANT(base, )
#ifdef RQ_X86_VARIANTS
RQ_VARIANT(avx2, __attribute__((target("avx2"))))
RQ_VARIANT(avx512, __attribute__((target("arch=x86-64-v4"))))
#endif

typedef void (*rows_fn)(enum rq_recipe, const uint16_t *, size_t, size_t, float, uint8_t *,
                        uint8_t *);
typedef void (*rng_fn)(const uint16_t *, size_t, size_t, float, const uint16_t *, uint8_t *,
                       uint8_t *);
typedef uint16_t (*absmax_fn)(const uint16_t *, size_t);
static const struct {
	const char *name;
	rows_fn rows;
	rng_fn rng;
	absmax_fn absmax;
} variants[RQ_ISA_COUNT] = {
	{"sse2", quant_rows_base, rng_rows_base, absmax_base},
#ifdef RQ_X86_VARIANTS
	{"avx2", quant_rows_avx2, rng_rows_avx2, absmax_avx2},
	{"avx512", quant_rows_avx512, rng_rows_avx512, absmax_avx512},
#endif
};

void rq_quantize_rng_rows(const uint16_t *w, size_t rows, size_t cols, float gs,
                          const uint16_t *rng, uint8_t *packed, uint8_t *scales)
{
	if (rows && cols >= 16)
		variants[rq_quant_isa()].rng(w, rows, cols, gs, rng, packed, scales);
}

int rq_quant_isa_max(void)
{
#ifdef RQ_X86_VARIANTS
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
	    __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx2") &&
	    __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("fma"))
		return RQ_ISA_AVX512;
	if (__builtin_cpu_supports("avx2"))
		return RQ_ISA_AVX2;
#endif
	return RQ_ISA_BASE;
}

static int isa_forced = -1;   /* -1: automatic (relaxed atomic) */
static int isa_auto = -1;     /* cached rq_quant_isa_max() (relaxed atomic) */

int rq_quant_isa_force(int isa)
{
	int prev = __atomic_load_n(&isa_forced, __ATOMIC_RELAXED);
	if (isa > rq_quant_isa_max())
		return -EINVAL;
	__atomic_store_n(&isa_forced, isa < 0 ? -1 : isa, __ATOMIC_RELAXED);
	return prev;
}

int rq_quant_isa(void)
{
	int f = __atomic_load_n(&isa_forced, __ATOMIC_RELAXED);
	if (f >= 0)
		return f;
	int a = __atomic_load_n(&isa_auto, __ATOMIC_RELAXED);
	if (a < 0) {
		a = rq_quant_isa_max();
		__atomic_store_n(&isa_auto, a, __ATOMIC_RELAXED);
	}
	return a;
}

const char *rq_quant_isa_name(int isa)
{
	return isa >= 0 && isa < RQ_ISA_COUNT && variants[isa].name ? variants[isa].name : "?";
}

struct quant_ctx {
	rows_fn rows;         /* the variant for this CPU */
	enum rq_recipe r;
	const uint16_t *w;    /* [rows][cols] BF16 */
	size_t cols;
	float gs;
	uint8_t *packed;      /* [rows][cols/2] */
	uint8_t *scales;      /* [rows][cols/16] */
};

static void quant_chunk(void *arg, size_t begin, size_t end, int worker)
{
	struct quant_ctx *c = arg;
	c->rows(c->r, c->w + begin * c->cols, end - begin, c->cols, c->gs,
	           c->packed + begin * (c->cols / 2), c->scales + begin * (c->cols / 16));
}

void rq_quantize_fast(enum rq_recipe r, const uint16_t *w, size_t rows, size_t cols, float gs,
                      uint8_t *packed, uint8_t *scales, struct rq_pool *pool)
{
	if (rows == 0 || cols < 16)
		return;
	struct quant_ctx c = {variants[rq_quant_isa()].rows, r, w, cols, gs, packed, scales};
	size_t grain = (MIN_CHUNK_ELEMS + cols - 1) / cols;
	rq_pool_for(pool, rows, grain, quant_chunk, &c);
}

/* ---- absmax ---- */

struct absmax_ctx {
	absmax_fn span;       /* the variant for this CPU */
	const uint16_t *w;
	size_t n;
	unsigned max;         /* running max of |w| bits (atomic) */
};

static void absmax_chunk(void *arg, size_t begin, size_t end, int worker)
{
	struct absmax_ctx *c = arg;
	size_t b = begin * MIN_CHUNK_ELEMS, e = end * MIN_CHUNK_ELEMS;
	if (e > c->n)
		e = c->n;
	unsigned m = c->span(c->w + b, e - b);
	unsigned cur = __atomic_load_n(&c->max, __ATOMIC_RELAXED);
	while (m > cur && !__atomic_compare_exchange_n(&c->max, &cur, m, 0, __ATOMIC_RELAXED,
	                                                __ATOMIC_RELAXED))
		;
}

int rq_absmax_bf16_fast(const uint16_t *w, size_t n, uint16_t *amax, size_t *bad_index,
                        struct rq_pool *pool)
{
	struct absmax_ctx c = {variants[rq_quant_isa()].absmax, w, n, 0};
	size_t blocks = (n + MIN_CHUNK_ELEMS - 1) / MIN_CHUNK_ELEMS;
	rq_pool_for(pool, blocks, 4, absmax_chunk, &c);
	if (c.max >= 0x7F80)   /* some Inf/NaN: the scalar scan finds the first one */
		return rq_absmax_bf16(w, n, amax, bad_index);
	*amax = (uint16_t)c.max;
	return 0;
}

/* ---- one job ---- */

int rq_quantize_job(enum rq_recipe r, const struct rq_qmod *m, int n, float *gs,
                    int *bad_module, struct rq_pool *pool)
{
	if (n <= 0 || (unsigned)r >= RQ_RECIPE_COUNT)
		return -EINVAL;
	for (int i = 0; i < n; i++) {
		if (m[i].cols % 16 != 0 || m[i].cols == 0) {
			if (bad_module)
				*bad_module = i;
			return -EINVAL;
		}
	}
	uint16_t amax = 0;
	for (int i = 0; i < n; i++) {
		uint16_t a;
		int rc = rq_absmax_bf16_fast(m[i].w, m[i].rows * m[i].cols, &a, NULL, pool);
		if (rc < 0) {
			if (bad_module)
				*bad_module = i;
			return rc;
		}
		if (a > amax)
			amax = a;
	}
	float g = rq_global_scale(r, rq_bf16_to_f32(amax));
	for (int i = 0; i < n; i++)
		rq_quantize_fast(r, m[i].w, m[i].rows, m[i].cols, g, m[i].packed, m[i].scales, pool);
	*gs = g;
	return 0;
}
