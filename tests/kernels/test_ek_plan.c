/* test_ek_plan.c — the CUDA engine's memory plan, without a device (suite
 * unit): a model with Laguna S 2.1's shapes (48 layers, 256 NVFP4 experts)
 * must plan its weights at the checkpoint's size (computed here tensor by
 * tensor), its BF16 KV cache at 32K positions at 2 × 12 full layers × 32768
 * × 8 heads × 128 × 2 bytes (+ the sliding rings), fit in 96 GB, and not fit
 * in 72 GB; FP8 halves the KV cache; bad options are refused; lgc_create
 * answers -ENODEV (not a crash) where no device is. */
#include "engine/model/forward_cuda.h"
#include "engine/model/model.h"
#include "tools/bench/bench_synth.h"
#include "kernels/ek.h"
#include "base/err.h"
#include "tests/tap.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
	static char cfg[16384];
	struct rq_err err = {0};
	struct lg_model *m = NULL;
	bench_laguna_config(cfg, sizeof cfg, 48, 256);
	int rc = bench_synth_model(cfg, 1, &m, &err);
	TAP_OK(rc == 0, "synthetic Laguna S 2.1 shapes: %s", rc ? err.msg : "ok");
	if (rc)
		return tap_done();

	/* the checkpoint's bytes, tensor by tensor */
	double want = 2.0 * 100352 * 3072 * 2;
	for (int l = 0; l < 48; l++) {
		double nh = l % 4 == 0 ? 48 : 72;
		want += 2.0 * 3072 * (nh * 128 * 2 + 2 * 1024 + nh);
		want += l == 0 ? 3.0 * 12288 * 3072 * 2
		               : 256.0 * 3072 * 2 + 3.0 * 1024 * 3072 * 2 + 256.0 * 3 * 1024 * 3072 * 0.5625;
	}
	struct lgc_opts o = {.max_ctx = 32768, .mem_limit = 96000000000ull};
	struct lgc_plan p;
	rc = lgc_plan_make(m, &o, &p, &err);
	char text[1024];
	lgc_plan_text(&p, text, sizeof text);
	printf("# %s\n", text);
	TAP_OK(rc == 0 && p.weights >= want && p.weights < want + 64e6,
	       "weights planned at %.3f GB, the checkpoint's %.3f GB (+ alignment)", p.weights / 1e9,
	       want / 1e9);
	TAP_OK(want > 71.5e9 && want < 72.3e9, "Laguna S 2.1 is %.2f GB (LAGUNA.md: 71.9)", want / 1e9);
	double full_kv = 2.0 * 12 * 32768 * 8 * 128 * 2;
	double ring = 2.0 * 36 * (512 + p.batch - 1) * 8 * 128 * 2;
	TAP_OK(p.kv >= full_kv + ring && p.kv < full_kv + ring + 1e6,
	       "KV cache bf16 at 32768 positions: %.3f GB (full layers %.3f + rings %.3f)", p.kv / 1e9,
	       full_kv / 1e9, ring / 1e9);
	TAP_OK(p.kv_per_pos == 12 * 2 * 8 * 128 * 2, "KV per position on full layers: %zu bytes (48 KiB)",
	       p.kv_per_pos);
	TAP_OK(p.total <= o.mem_limit && strstr(text, ": fits"),
	       "total %.2f GB fits in 96 GB (activations %.2f GB, staging %.2f GB)", p.total / 1e9,
	       p.act / 1e9, p.staging / 1e9);
	o.mem_limit = 72000000000ull;
	rc = lgc_plan_make(m, &o, &p, &err);
	lgc_plan_text(&p, text, sizeof text);
	TAP_OK(rc == 0 && p.total > o.mem_limit && strstr(text, "DOES NOT FIT"),
	       "the same plan does not fit in 72 GB, and says so");
	size_t kv16 = p.kv;
	o.kv = "fp8";
	rc = lgc_plan_make(m, &o, &p, &err);
	TAP_OK(rc == 0 && p.kv * 2 >= kv16 - 4096 && p.kv * 2 <= kv16 + 4096 * 96,
	       "fp8 KV cache: %.3f GB, half of bf16", p.kv / 1e9);
	o.kv = "int4";
	rc = lgc_plan_make(m, &o, &p, &err);
	TAP_OK(rc == -EINVAL && strstr(err.msg, "int4"), "unknown KV type refused: %s", err.msg);
	o.kv = NULL;
	o.max_ctx = 0;
	rc = lgc_plan_make(m, &o, &p, &err);
	TAP_OK(rc == -EINVAL, "context 0 refused");

	if (!ek_compiled() || ek_device_count() == 0) {
		struct lgc *g = NULL;
		o.max_ctx = 64;
		rc = lgc_create(m, &o, &g, &err);
		TAP_OK(rc == -ENODEV && !g, "lgc_create without a device: -ENODEV (%s)", err.msg);
	}
	bench_synth_free(m);
	return tap_done();
}
