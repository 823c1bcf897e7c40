/* test_kq_obs_simt.cpp — the MSE observers' GPU search, kernels/kq_obs.cuh's own source,
 * run on the host under the SIMT emulation (emul/simt.h; suite kernels, no GPU) against
 * quant/'s scalar oracle: per group, the step chosen and the improving steps, bit for bit.
 * The oracle's side is rq_obs_err_ref at every step with the search's rule (err < best),
 * and rq_obs_search_rows (the CPU fast path) must agree too. Cases: every kind (FP4 groups
 * of 16, INT4/INT8 groups of 128, FP8 channels of 7, 300 and 4096 -- the last reaches the
 * cascade's flushed levels), both observers, on random, tied, subnormal, huge and zero
 * weights. Not proved here: the launch and copies of kq_obs.cu (a GPU run does that) and
 * the device's arithmetic flags (kernels/meson.build's, checked on the quantizer's PTX by
 * test-ptx-bitexact). */
extern "C" {
#include "quant/observer.h"
#include "quant/observer_int.h"
#include "quant/quant_int.h"
}
#include "tests/kernels/emul/simt.h"
#include "tests/kernels/emul/simt_tap.h"
#include "kernels/kq_obs.cuh"

#include <math.h>

#include <vector>

static uint64_t rng = 0x5DEECE66DA3B1F07ull;

static uint16_t weight(int how, size_t i, size_t group)
{
	float g = simt_unif(&rng, -1.0f, 1.0f) + simt_unif(&rng, -1.0f, 1.0f);
	switch (how) {
	case 1:                                     /* ties: multiples of an eighth */
		return rq_f32_to_bf16((float)((int)(tap_xorshift(&rng) % 97) - 48) * 0.125f);
	case 2:                                     /* subnormals and tiny normals */
		return (uint16_t)((tap_xorshift(&rng) % 0x200u) | (tap_xorshift(&rng) & 0x8000u));
	case 3:                                     /* huge, within 1.8x of the BF16 max */
		return rq_f32_to_bf16(g * 1e37f);
	case 4:                                     /* a zero group every third */
		return (i / group) % 3 == 0 ? 0 : rq_f32_to_bf16(g * 0.02f);
	default:                                    /* trained-like, an outlier in 50 */
		return rq_f32_to_bf16(g * (tap_xorshift(&rng) % 50 == 0 ? 0.3f : 0.02f));
	}
}

static int run_case(int kind, enum rq_observer o, size_t rows, size_t cols, size_t group,
                    int how)
{
	const struct rq_obs_params *p = rq_obs_params(o);
	size_t ng = rows * cols / group;
	std::vector<uint16_t> w(rows * cols);
	for (size_t i = 0; i < w.size(); i++)
		w[i] = weight(how, i, group);
	std::vector<uint8_t> best(ng, 0xEE), fbest(ng);
	std::vector<uint32_t> mask(ng, 0xEEEEEEEEu), fmask(ng);
	int rc = simt_launch(k_obs_search, dim3((unsigned)((ng + 31) / 32)), dim3(32), kind,
	                     p->steps, p->expand, rq_obs_q(kind), (const float *)p->p,
	                     rq_obs_pow_table(), (const uint16_t *)w.data(),
	                     (unsigned long long)ng, (unsigned)group, best.data(), mask.data());
	if (rc != 0) {
		printf("# launch failed: %s\n", simt_error);
		return 0;
	}
	std::vector<uint8_t> scratch(rq_obs_scratch_bytes(group));
	rq_obs_search_rows(kind, p, w.data(), rows, cols, group, fbest.data(), fmask.data(),
	                   scratch.data());
	int bad = 0;
	for (size_t g = 0; g < ng; g++) {
		float bv = rq_u2f(KQ_OBS_BF16_MAX);
		int bi = 0;
		uint32_t mk = 0;
		for (int i = 0; i < p->steps; i++) {
			float e = rq_obs_err_ref(kind, p, w.data() + g * group, group, i, NULL);
			if (e < bv) {
				bv = e;
				bi = i;
				mk |= i < 32 ? 1u << i : 0u;
			}
		}
		if (best[g] != bi || mask[g] != mk || fbest[g] != bi || fmask[g] != mk) {
			if (bad++ < 3)
				printf("# group %zu: kernel step %d mask %08x, oracle %d %08x, CPU fast %d "
				       "%08x\n", g, best[g], mask[g], bi, mk, fbest[g], fmask[g]);
		}
	}
	return bad == 0;
}

int main(void)
{
	static const struct { int kind; size_t rows, cols, group; const char *what; } c[] = {
		{RQ_OBS_FP4, 8, 64, 16, "FP4 (nvfp4a16), groups of 16"},
		{RQ_OBS_INT4, 4, 256, 128, "INT4 (w4a16), groups of 128"},
		{RQ_OBS_INT8, 4, 256, 128, "INT8 (w8a16), groups of 128"},
		{RQ_OBS_FP8, 6, 7, 7, "FP8 (fp8-dynamic), channels of 7"},
		{RQ_OBS_FP8, 6, 300, 300, "FP8, channels of 300"},
		{RQ_OBS_FP8, 2, 4096, 4096, "FP8, channels of 4096 (flushed cascade levels)"},
	};
	for (size_t k = 0; k < sizeof(c) / sizeof(c[0]); k++) {
		for (int o = RQ_OBSERVER_MSE; o <= RQ_OBSERVER_EXPANDED_MSE; o++) {
			int ok = 1;
			for (int how = 0; how <= 4; how++) {
				if (how == 3 && o == RQ_OBSERVER_EXPANDED_MSE)
					continue;       /* 1.8 |w| may overflow: refused before any search */
				ok &= run_case(c[k].kind, (enum rq_observer)o, c[k].rows, c[k].cols,
				               c[k].group, how);
			}
			OK(ok, "%s, %s: the kernel's step and improving steps == the oracle's, 5 kinds "
			   "of weights", c[k].what, rq_observer_name((enum rq_observer)o));
		}
	}
	return tap_done();
}
