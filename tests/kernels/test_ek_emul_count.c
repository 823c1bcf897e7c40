/* test_ek_emul_count.c — launch counts of the CUDA engine's decode step in the
 * host emulation of test_ek_emul.c (linked into that executable; not tests):
 *   test_ek_emul REQUANTFS --count-real-dims   Laguna S 2.1 widths, 2 and 4 layers
 *   test_ek_emul REQUANTFS --count DIR         the checkpoint in DIR
 * The emulation counts one per ek_* kernel op (ek_launches); on the device
 * ek_attn and ek_moe at one token are two kernels each. */
#include "engine/model/forward_cuda.h"
#include "engine/model/model.h"
#include "kernels/ek.h"
#include "base/err.h"
#include "tools/bench/bench_synth.h"

#include <stdio.h>
#include <stdlib.h>

int emul_count_real_dims(void);
int emul_count_dir(const char *dir);

/* Not a test (test_ek_emul REQUANTFS --count-real-dims): kernels of one
 * direct decode step, fused and EK_FUSE=0, at Laguna S 2.1's widths
 * (tools/bench/bench_synth.c; 16 experts: the count does not depend on them) for
 * 2 and 4 layers (layer 0 dense, the rest MoE), and the per-layer counts. */
int emul_count_real_dims(void)
{
	static char cfg[32768];
	long n[2][2];
	int layers[2] = {2, 4};
	for (int li = 0; li < 2; li++)
		for (int f = 0; f < 2; f++) {
			struct lg_model *m = NULL;
			struct lgc *g = NULL;
			struct rq_err err = {0};
			bench_laguna_config(cfg, sizeof cfg, layers[li], 16);
			struct lgc_opts o = {.max_ctx = 8, .kv = "bf16", .max_batch = 4, .seed = 1};
			setenv("EK_FUSE", f ? "1" : "0", 1);
			int tok = 5, rc = bench_synth_model(cfg, 1, &m, &err);
			if (!rc)
				rc = lgc_create(m, &o, &g, &err);
			float *l = m ? malloc(sizeof(float) * m->cfg.vocab) : NULL;
			unsigned long long l0 = ek_launches(NULL);
			if (!rc)
				rc = lgc_forward(g, &tok, 1, l, 1, &err);
			n[li][f] = (long)(ek_launches(NULL) - l0);
			if (rc)
				printf("# %d layers: %s\n", layers[li], err.msg);
			free(l);
			lgc_free(g);
			bench_synth_free(m);
			unsetenv("EK_FUSE");
			if (rc)
				return 1;
		}
	for (int f = 0; f < 2; f++) {
		long moe = (n[1][f] - n[0][f]) / 2, rest = n[0][f] - moe;   /* rest: dense layer + ends */
		printf("%s: %ld kernels per token at 2 layers, %ld at 4: %ld per MoE layer, %ld for the "
		       "dense layer + embedding + head; 48 layers (1 dense + 47 MoE): %ld\n",
		       f ? "fused" : "unfused (EK_FUSE=0)", n[0][f], n[1][f], moe, rest, rest + 47 * moe);
	}
	return 0;
}

/* Not a test either (test_ek_emul REQUANTFS --count DIR): the same count
 * for the checkpoint in DIR (e.g. mkckpt's default tiny model). */
int emul_count_dir(const char *dir)
{
	struct lg_model *m = NULL;
	struct rq_err err = {0};
	if (lg_model_open(dir, &m, &err)) {
		printf("# %s\n", err.msg);
		return 1;
	}
	for (int f = 0; f < 2; f++) {
		struct lgc *g = NULL;
		struct lgc_opts o = {.max_ctx = 8, .kv = "bf16", .max_batch = 4};
		setenv("EK_FUSE", f ? "1" : "0", 1);
		int tok = 5, rc = lgc_create(m, &o, &g, &err);
		float *l = malloc(sizeof(float) * m->cfg.vocab);
		unsigned long long l0 = ek_launches(NULL);
		if (!rc)
			rc = lgc_forward(g, &tok, 1, l, 1, &err);
		printf("%s: %llu ek ops per token (%d layers)%s%s\n", f ? "fused" : "unfused (EK_FUSE=0)",
		       ek_launches(NULL) - l0, m->cfg.n_layers, rc ? ": " : "", rc ? err.msg : "");
		free(l);
		lgc_free(g);
		unsetenv("EK_FUSE");
	}
	lg_model_close(m);
	return 0;
}

