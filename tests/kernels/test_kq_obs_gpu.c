/* test_kq_obs_gpu.c — kq_obs_search (kernels/kq_obs.cu) on a real GPU against quant/'s
 * search (rq_obs_search_rows, itself bit-identical to the oracle): every kind, both
 * observers, per-group steps and improving steps bit for bit; a module streamed through
 * small device buffers in row chunks; refusals. Then whole jobs through qdev
 * (rq_quantizer_run_scheme, issue 32: the search on the GPU, the rest on the CPU) for
 * every observer x scheme the search takes, every output byte against
 * rq_scheme_quantize_obs on the CPU. Suite gpu: skips without a device (or without CUDA
 * compiled in, where kq_obs_search is -ENODEV); tools/gpu-check runs it. */
#include "kernels/kquant.h"
#include "base/err.h"
#include "qdev/qdev.h"
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
	                          16, NULL, &b0, NULL, msg, sizeof msg) == -ENODEV;
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
			                       NULL, b, m, msg, sizeof msg);
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
	TAP_OK(kq_obs_search(k, 7, rq_obs_params(RQ_OBSERVER_MSE), w1, 1, 16, 16, NULL, &b0, NULL,
	                     msg, sizeof msg) == -EINVAL &&
	       kq_obs_search(k, RQ_OBS_FP4, rq_obs_params(RQ_OBSERVER_MSE), w1, 1, 16, 12, NULL,
	                     &b0, NULL, msg, sizeof msg) == -EINVAL, "bad kind or group: -EINVAL (%s)",
	       msg);
	/* a module through 512 KiB of device buffers: row chunks */
	struct kq_ctx *ks = NULL;
	if (kq_open(0, (size_t)512 << 10, &ks, msg, sizeof msg) == 0) {
		const struct rq_obs_params *p = rq_obs_params(RQ_OBSERVER_MSE);
		size_t rows = 300, cols = 2048, ng = rows * cols / 16;
		uint16_t *w = malloc(2 * rows * cols);
		uint8_t *b = malloc(ng), *fb = malloc(ng);
		uint32_t *m = malloc(4 * ng), *fm = malloc(4 * ng);
		void *scratch = malloc(rq_obs_scratch_bytes(16));
		for (size_t j = 0; j < rows * cols; j++)
			w[j] = rq_f32_to_bf16((float)((int)(tap_xorshift(&st) % 20001) - 10000) * 2e-6f);
		int rc = kq_obs_search(ks, RQ_OBS_FP4, p, w, rows, cols, 16, NULL, b, m, msg,
		                       sizeof msg);
		rq_obs_search_rows(RQ_OBS_FP4, p, w, rows, cols, 16, fb, fm, scratch);
		TAP_OK(rc == 0 && !memcmp(b, fb, ng) && !memcmp(m, fm, 4 * ng), "1.2 MiB module "
		       "through 512 KiB of device buffers (row chunks): the CPU's steps (rc %d %s)",
		       rc, rc ? msg : "");
		TAP_OK(kq_obs_search(ks, RQ_OBS_FP8, p, w, 1, 262144, 262144, NULL, b, m, msg,
		                     sizeof msg) == -E2BIG, "a row larger than the buffers: -E2BIG "
		       "(%s)", msg);
		free(w);
		free(b);
		free(fb);
		free(m);
		free(fm);
		free(scratch);
		kq_close(ks);
	} else {
		TAP_OK(0, "kq_open with 512 KiB: %s", msg);
	}
	kq_close(k);

	/* whole jobs through qdev: every observer x scheme, the CPU's bytes */
	struct rq_quantizer_opts qo = {.device = "cuda", .threads = 4};
	struct rq_quantizer *q = NULL;
	struct rq_err err;
	memset(&err, 0, sizeof err);
	int orc = rq_quantizer_open(&qo, &q, &err);
	TAP_OK(orc == 0, "qdev opens the GPU (%s)", orc ? err.msg : rq_quantizer_device(q));
	static const enum rq_scheme sc[] = {RQ_SCHEME_NVFP4A16, RQ_SCHEME_NVFP4_W4A4,
	                                    RQ_SCHEME_FP8_DYNAMIC, RQ_SCHEME_W8A16,
	                                    RQ_SCHEME_W4A16};
	for (int o = RQ_OBSERVER_MSE; q && o < RQ_OBSERVER_COUNT; o++) {
		for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++) {
			int n = rq_scheme_shares_scale(sc[i]) ? 3 : 1;
			size_t rows = 192, cols = 1024;
			struct rq_stensor t[RQ_SCHEME_MAX_TENSORS];
			struct rq_smod mg[3], mc[3];
			uint64_t size = 0;
			int nt, bad = -1, same = 1;
			rq_scheme_layout(sc[i], RQ_SRC_BF16, rows, cols, t, &nt, &size);
			for (int j = 0; j < n; j++) {
				uint16_t *w = malloc(2 * rows * cols);
				for (size_t e = 0; e < rows * cols; e++) {
					float g = (float)((int)(tap_xorshift(&st) % 20001) - 10000) * 2e-6f;
					w[e] = rq_f32_to_bf16(tap_xorshift(&st) % 64 ? g : 12.0f * g);
				}
				mg[j] = (struct rq_smod){w, RQ_SRC_BF16, rows, cols, malloc(size)};
				mc[j] = (struct rq_smod){w, RQ_SRC_BF16, rows, cols, malloc(size)};
				memset(mg[j].out, 0xA5, size);
				memset(mc[j].out, 0x5A, size);
			}
			struct rq_quantizer_stats s0, s1;
			rq_quantizer_get_stats(q, &s0);
			int rg = rq_quantizer_run_scheme(q, sc[i], RQ_RECIPE_BF16, (enum rq_observer)o,
			                                 mg, n, &bad);
			rq_quantizer_get_stats(q, &s1);
			int rcpu = rq_scheme_quantize_obs(sc[i], RQ_RECIPE_BF16, (enum rq_observer)o, mc,
			                                  n, &bad, NULL);
			for (int j = 0; j < n; j++) {
				same &= !memcmp(mg[j].out, mc[j].out, size);
				free((void *)mg[j].w);
				free(mg[j].out);
				free(mc[j].out);
			}
			TAP_OK(rg == 0 && rcpu == 0 && same && s1.gpu_jobs == s0.gpu_jobs + 1,
			       "%s, %s, %d module%s of [%zu, %zu]: searched on the GPU (gpu jobs %llu -> "
			       "%llu), every byte the CPU's (rc %d/%d)", rq_scheme_name(sc[i]),
			       rq_observer_name((enum rq_observer)o), n, n == 1 ? "" : "s", rows, cols,
			       s0.gpu_jobs, s1.gpu_jobs, rg, rcpu);
		}
	}
	rq_quantizer_close(q);
	return tap_done();
}
