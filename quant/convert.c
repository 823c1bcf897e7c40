/* convert.c — recipe names and the scalar number-format conversions.
 *
 * These are the slow, literal definitions (the oracle): E4M3FN encoding
 * searches the table of representable values and compares against exact
 * midpoints. The branch-free twins the fast path uses live in recipe.h. */
#include "quant/quant.h"
#include "quant/quant_int.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

static const char *const recipe_names[RQ_RECIPE_COUNT] = {"fp32", "bf16", "fp32div"};

int rq_recipe_parse(const char *s, enum rq_recipe *out)
{
	for (int i = 0; s && i < RQ_RECIPE_COUNT; i++) {
		if (!strcmp(s, recipe_names[i])) {
			*out = (enum rq_recipe)i;
			return 0;
		}
	}
	return -EINVAL;
}

const char *rq_recipe_name(enum rq_recipe r)
{
	return (unsigned)r < RQ_RECIPE_COUNT ? recipe_names[r] : "?";
}

float rq_bf16_to_f32(uint16_t b)
{
	return rq_bf16f(b);
}

uint16_t rq_f32_to_bf16(float f)
{
	uint32_t u = rq_f2u(f);
	if ((u & 0x7FFFFFFFu) > 0x7F800000u)
		return (uint16_t)((u >> 16) | 0x40u);       /* NaN stays NaN (quiet) */
	u += 0x7FFFu + ((u >> 16) & 1u);               /* overflow rounds to inf */
	return (uint16_t)(u >> 16);
}

float rq_e4m3_to_f32(uint8_t b)
{
	int e = (b >> 3) & 15, m = b & 7;
	float v;
	if (e == 15 && m == 7)
		v = NAN;
	else if (e == 0)
		v = ldexpf((float)m, -9);              /* subnormal: m * 2^-9 */
	else
		v = ldexpf((float)(8 + m), e - 10);    /* (1 + m/8) * 2^(e-7) */
	return (b & 0x80) ? -v : v;
}

/* The 127 non-negative finite E4M3FN values, indexed by code (0..0x7E). */
static float e4m3_table[127];
static pthread_once_t e4m3_table_once = PTHREAD_ONCE_INIT;

static void e4m3_table_init(void)
{
	for (int c = 0; c < 127; c++)
		e4m3_table[c] = rq_e4m3_to_f32((uint8_t)c);
}

uint8_t rq_f32_to_e4m3(float f)
{
	if (isnan(f))
		return 0x7F;
	pthread_once(&e4m3_table_once, e4m3_table_init);
	uint8_t sign = signbit(f) ? 0x80 : 0;
	float a = fabsf(f);
	if (a >= RQ_E4M3_MAX)                      /* saturate (callers clamp first) */
		return sign | 0x7E;
	/* largest code lo with table[lo] <= a; the table is increasing */
	int lo = 0, hi = 126;
	while (lo < hi) {
		int mid = (lo + hi + 1) / 2;
		if (e4m3_table[mid] <= a)
			lo = mid;
		else
			hi = mid - 1;
	}
	uint8_t c = (uint8_t)lo;
	if (e4m3_table[lo] != a) {
		/* neighbours' midpoint is exact in binary32 (few mantissa bits) */
		float midp = (e4m3_table[lo] + e4m3_table[lo + 1]) * 0.5f;
		if (a > midp || (a == midp && (lo & 1)))
			c = (uint8_t)(lo + 1);
	}
	return sign | c;
}

const float rq_e2m1_mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

float rq_e2m1_to_f32(uint8_t code)
{
	float v = rq_e2m1_mag[code & 7];
	return (code & 8) ? -v : v;
}
