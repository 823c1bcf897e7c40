/* test_torch_gemm.c — lg_torch_gemm (engine/model/torch_bf16.h), the tiled BF16
 * GEMM of the calibration forward, gives every bit of lg_torch_dot, the
 * scalar dot in torch's order that the goldens pin: BF16-valued inputs
 * (the forward's) and arbitrary floats (where the products round), widths
 * below, at and around 16 and 64 and the SmolLM2 ones with and without a
 * tail, 1..7 tokens, odd row counts, strides wider than a row, and nothing
 * written outside the [T][R] block of y. Run twice by meson: with the AVX2
 * path and with RQ_ENGINE_NO_AVX2=1 (the portable one). A control checks
 * that the inputs are such that another summation order shows in the bits.
 * lg_torch_expf_n, the vectorized exp of the softmax and SiLU, is checked the
 * same way against lg_torch_expf, and lg_torch_swiglu_row against the scalar
 * SiLU·up. */
#include "engine/model/ops.h"
#include "engine/model/torch_bf16.h"
#include "tests/tap.h"

#include <math.h>
#include <stdlib.h>

/* a float with a spread of exponents and signs, so that order shows in the bits */
static float rnd(uint64_t *s, int bf16)
{
	float m = (float)(tap_xorshift(s) & 0xFFFFFF) / 16777216.0f - 0.5f;
	float f = ldexpf(m, (int)(tap_xorshift(s) % 24) - 12);
	return bf16 ? lg_bf16(f) : f;
}

int main(void)
{
	const char *e = getenv("RQ_ENGINE_NO_AVX2");
	printf("# path: %s\n", e && *e && strcmp(e, "0") ? "portable (RQ_ENGINE_NO_AVX2)" : "AVX2 where the CPU has it");
	static const int ns[] = {1, 7, 15, 16, 17, 31, 48, 63, 64, 65, 79, 80, 127, 128, 129, 200,
	                         575, 576, 577, 1536, 1549};
	static const int rs[] = {1, 2, 3, 4, 5, 7, 9, 13};
	enum { PAD = 5, TMAX = 7, RMAX = 13, NMAX = 1549 + PAD };
	const float SENT = -1234.5f;
	float *x = malloc(sizeof(float) * TMAX * NMAX), *w = malloc(sizeof(float) * RMAX * NMAX);
	float y[TMAX * (RMAX + 3)];
	if (!x || !w)
		return 1;
	uint64_t s = 0x2545F4914F6CDD1Dull;
	for (int bf = 1; bf >= 0; bf--) {
		long cases = 0, bad = 0, outside = 0, order_shows = 0;
		for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
			for (int T = 1; T <= TMAX; T++)
				for (size_t ri = 0; ri < sizeof rs / sizeof rs[0]; ri++) {
					int n = ns[ni], R = rs[ri];
					size_t ldx = (size_t)n + (T & 1 ? PAD : 0), ldw = (size_t)n + (R & 1 ? 0 : 3);
					size_t ldy = (size_t)R + (T % 3);
					for (size_t i = 0; i < (size_t)TMAX * NMAX; i++)
						x[i] = rnd(&s, bf);
					for (size_t i = 0; i < (size_t)RMAX * NMAX; i++)
						w[i] = rnd(&s, bf);
					for (size_t i = 0; i < sizeof y / sizeof y[0]; i++)
						y[i] = SENT;
					lg_torch_gemm(x, ldx, T, w, ldw, R, n, y, ldy);
					for (int t = 0; t < T; t++)
						for (int r = 0; r < R; r++) {
							float want = lg_torch_dot(x + t * ldx, w + r * ldw, n);
							float got = y[t * ldy + r];
							cases++;
							if (memcmp(&want, &got, 4) && bad++ < 5)
								printf("# %s n=%d T=%d R=%d t=%d r=%d: %.9g, lg_torch_dot %.9g\n",
								       bf ? "bf16" : "f32", n, T, R, t, r, got, want);
							float other = lg_dot(x + t * ldx, w + r * ldw, n);
							order_shows += memcmp(&want, &other, 4) != 0;
						}
					for (size_t i = 0; i < sizeof y / sizeof y[0]; i++) {
						size_t t = i / ldy, r = i % ldy;
						if ((t >= (size_t)T || r >= (size_t)R) && memcmp(&y[i], &SENT, 4))
							outside++;
					}
				}
		TAP_OK(!bad, "%s inputs: lg_torch_gemm == lg_torch_dot bit for bit (%ld of %ld outputs differ)",
		       bf ? "BF16-valued" : "binary32", bad, cases);
		TAP_OK(!outside, "%s inputs: nothing written outside y's [T][R] block (%ld values)",
		       bf ? "BF16-valued" : "binary32", outside);
		TAP_OK(order_shows > cases / 4, "%s inputs: another order (lg_dot) differs in %ld of %ld outputs "
		       "(the comparison can see an order change)", bf ? "BF16-valued" : "binary32",
		       order_shows, cases);
	}
	/* lg_torch_expf_n (the softmax's and SiLU's exp, vectorized) == lg_torch_expf:
	 * the whole range it sees, past both cut-offs, specials, odd lengths */
	enum { NE = 1 << 16 };
	float *in = malloc(sizeof(float) * NE), *out = malloc(sizeof(float) * NE);
	if (!in || !out)
		return 1;
	for (int i = 0; i < NE; i++)
		in[i] = (float)((int)(tap_xorshift(&s) % 2200001) - 1200000) / 10000.0f;   /* -120 .. 100 */
	static const float sp[] = {0.0f, -0.0f, -104.0f, -103.99f, 100.0f, 100.01f, 88.7f, -87.4f,
	                           INFINITY, -INFINITY, NAN, 1e-8f, -1e-8f, 0.5f, -0.5f};
	memcpy(in, sp, sizeof sp);
	long ebad = 0;
	for (int len = NE; len > NE - 8; len--) {
		lg_torch_expf_n(in, out, len);
		for (int i = 0; i < len; i++) {
			float want = lg_torch_expf(in[i]);
			if (memcmp(&want, &out[i], 4) && ebad++ < 5)
				printf("# expf(%.9g): %.9g, lg_torch_expf %.9g\n", in[i], out[i], want);
		}
	}
	TAP_OK(!ebad, "lg_torch_expf_n == lg_torch_expf bit for bit on %d values x 8 lengths (%ld differ)",
	       NE, ebad);
	memcpy(out, in, sizeof(float) * 37);
	lg_torch_expf_n(out, out, 37);   /* in place */
	long ipbad = 0;
	for (int i = 0; i < 37; i++) {
		float want = lg_torch_expf(in[i]);
		ipbad += memcmp(&want, &out[i], 4) != 0;
	}
	TAP_OK(!ipbad, "lg_torch_expf_n in place (%ld of 37 differ)", ipbad);
	/* lg_torch_swiglu_row == the scalar silu·up of the BF16 forward, in place too */
	long sbad = 0;
	for (int n = 1; n <= 200; n += 13) {
		float g[200], u[200], o[200], g2[200];
		for (int i = 0; i < n; i++) {
			g[i] = lg_bf16(in[i] / 8.0f);
			u[i] = rnd(&s, 1);
			g2[i] = g[i];
		}
		lg_torch_swiglu_row(o, g, u, n);
		lg_torch_swiglu_row(g2, g2, u, n);
		for (int i = 0; i < n; i++) {
			float a = g[i], want = lg_bf16(lg_bf16(a / (1.0f + lg_torch_expf(-a))) * u[i]);
			sbad += memcmp(&want, &o[i], 4) != 0;
			sbad += memcmp(&want, &g2[i], 4) != 0;
		}
	}
	TAP_OK(!sbad, "lg_torch_swiglu_row == bf16(bf16(a / (1 + lg_torch_expf(-a))) * u), in place too "
	       "(%ld differ)", sbad);
	free(in);
	free(out);
	free(x);
	free(w);
	return tap_done();
}
