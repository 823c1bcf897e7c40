/* test_kq_obs_gpu.c — kq_obs_search (kernels/kq_obs.cu) on a real GPU against quant/'s
 * search (rq_obs_search_rows, itself bit-identical to the oracle): every kind, both
 * observers, per-group steps and improving steps bit for bit; refusals. Suite gpu: skips
 * without a device (or without CUDA compiled in, where kq_obs_search is -ENODEV). */
#include "kernels/kquant.h"
#include "quant/observer.h"
#include "quant/observer_int.h"
#include "quant/quant_int.h"
#include "tests/tap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
	struct kq_ctx *k = NULL;
	char msg[256];
	uint8_t b0;
	int noctx = kq_obs_search(NULL, RQ_OBS_FP4, rq_obs_params(RQ_OBSERVER_MSE), NULL, 1, 16,
	                          16, &b0, NULL, msg, sizeof msg) == -ENODEV;
	if (kq_open(0, (size_t)1 << 30, &k, msg, sizeof msg) != 0)
		TAP_SKIP_ALL("no CUDA device: %s", msg);
	TAP_OK(noctx, "no context: -ENODEV");
	static const struct { int kind; size_t rows, cols, group; } c[] = {
		{RQ_OBS_FP4, 512, 2048, 16}, {RQ_OBS_INT4, 64, 1024, 128},
		{RQ_OBS_INT8, 64, 1024, 128}, {RQ_OBS_FP8, 32, 4096, 4096}, {RQ_OBS_FP8, 64, 300, 300},
	};
	uint64_t st = 0x853C49E6748FEA9Bull;
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		for (int o = RQ_OBSERVER_MSE; o <= RQ_OBSERVER_EXPANDED_MSE; o++) {
			const struct rq_obs_params *p = rq_obs_params((enum rq_observer)o);
			size_t n = c[i].rows * c[i].cols, ng = n / c[i].group;
			uint16_t *w = malloc(2 * n);
			uint8_t *b = malloc(ng), *fb = malloc(ng);
			uint32_t *m = malloc(4 * ng), *fm = malloc(4 * ng);
			void *scratch = malloc(rq_obs_scratch_bytes(c[i].group));
			for (size_t j = 0; j < n; j++) {
				float g = (float)((int)(tap_xorshift(&st) % 20001) - 10000) * 2e-6f;
				w[j] = rq_f32_to_bf16(tap_xorshift(&st) % 64 ? g : 12.0f * g);
			}
			int rc = kq_obs_search(k, c[i].kind, p, w, c[i].rows, c[i].cols, c[i].group,
			                       b, m, msg, sizeof msg);
			rq_obs_search_rows(c[i].kind, p, w, c[i].rows, c[i].cols, c[i].group, fb, fm,
			                   scratch);
			size_t bad = 0;
			for (size_t g = 0; rc == 0 && g < ng; g++)
				bad += b[g] != fb[g] || m[g] != fm[g];
			TAP_OK(rc == 0 && bad == 0, "kind %d, %zux%zu, groups of %zu, %s: %zu of %zu groups "
			       "differ from the CPU (rc %d %s)", c[i].kind, c[i].rows, c[i].cols,
			       c[i].group, rq_observer_name((enum rq_observer)o), bad, ng, rc,
			       rc ? msg : "");
			free(w);
			free(b);
			free(fb);
			free(m);
			free(fm);
			free(scratch);
		}
	}
	uint16_t w1[16] = {0};
	TAP_OK(kq_obs_search(k, 7, rq_obs_params(RQ_OBSERVER_MSE), w1, 1, 16, 16, &b0, NULL, msg,
	                     sizeof msg) == -EINVAL &&
	       kq_obs_search(k, RQ_OBS_FP4, rq_obs_params(RQ_OBSERVER_MSE), w1, 1, 16, 12, &b0,
	                     NULL, msg, sizeof msg) == -EINVAL, "bad kind or group: -EINVAL (%s)",
	       msg);
	kq_close(k);
	return tap_done();
}
