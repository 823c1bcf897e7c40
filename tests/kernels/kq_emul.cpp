/* kq_emul.cpp — kernels/kquant.cu (and kquant_bench.cu, kq_obs.cu) compiled for
 * the host against the emulated runtime in emul/cuda_runtime.h, with the kernels
 * of kquant_kern.cu replaced by host loops over the same quant/recipe.h functions
 * (the MSE search: quant/'s rq_obs_search_rows, which test kq-obs-simt holds
 * bit-identical to kq_obs.cuh's kernel).
 * Linked into test_kquant_emul, which runs all of test_kquant.c's cases in
 * every build: this checks the pipeline (chunks, slots, streams, resident vs
 * streamed, fused jobs, refusals) on the CPU; the GPU run checks the real
 * kernels. Also linked into test_qdev_emul (qdev/ on the emulated GPU, with
 * the faults of kq_emul.h). */
#include "kernels/kquant.cu"
#include "kernels/kquant_bench.cu"
#include "kernels/kq_obs.cu"
#include "quant/recipe.h"

#include <stdio.h>

/* The real kernels load uint4 and store uint2: their pointers must be so
 * aligned, or the GPU faults. */
static void aligned(const void *p, size_t a, const char *what)
{
	if ((uintptr_t)p % a) {
		fprintf(stderr, "kq_emul: %s %p not %zu-byte aligned\n", what, p, a);
		abort();
	}
}

void kq_launch_absmax(const struct kq_ctx *k, const uint8_t *din, size_t groups,
                      uint32_t *amax, cudaStream_t s)
{
	aligned(din, 16, "absmax input");
	kq_emul_enqueue(s, [din, groups, amax] {
		uint32_t m = *amax;
		for (size_t i = 0; i < groups * 16; i++) {
			uint16_t w;
			memcpy(&w, din + 2 * i, 2);
			uint32_t a = w & 0x7FFFu;
			m = a > m ? a : m;
		}
		*amax = m;
	});
}

void kq_launch_scale(enum rq_recipe r, const uint32_t *amax, int n, struct kq_res *res,
                     cudaStream_t s)
{
	kq_emul_enqueue(s, [r, amax, n, res] {
		uint32_t m = 0;
		int bad = -1;
		for (int i = 0; i < n; i++) {
			if (amax[i] >= RQ_BF16_INF && bad < 0)
				bad = i;
			m = amax[i] > m ? amax[i] : m;
		}
		res->gs = rq_recipe_gs((int)r, rq_bf16f(m));
		res->bad = bad;
		res->amax = m;
	});
}

void kq_launch_quant(enum rq_recipe r, const uint8_t *din, size_t groups, float gs,
                     uint8_t *dpk, uint8_t *dsc, cudaStream_t s)
{
	aligned(din, 16, "quantize input");
	aligned(dpk, 8, "quantize output");
	kq_emul_enqueue(s, [r, din, groups, gs, dpk, dsc] {
		for (size_t g = 0; g < groups; g++) {
			uint32_t words[8], w[16], pk[2];
			memcpy(words, din + 32 * g, 32);
			for (int j = 0; j < 8; j++) {
				w[2 * j] = words[j] & 0xFFFFu;
				w[2 * j + 1] = words[j] >> 16;
			}
			dsc[g] = (uint8_t)rq_quant_group((int)r, gs, w, pk);
			memcpy(dpk + 8 * g, pk, 8);
			if (kq_emul_g.f.corrupt)    /* read unlocked: set between jobs */
				dpk[8 * g] ^= 1u;
		}
	});
}

void kq_launch_gs_batch(enum rq_recipe r, const uint16_t *amax, size_t n, float *gs)
{
	for (size_t i = 0; i < n; i++)
		gs[i] = rq_recipe_gs((int)r, rq_bf16f(amax[i]));
}

void kq_launch_obs(int kind, int steps, float expand, const float *P, const float *T,
                   const uint16_t *dw, size_t ng, unsigned group, uint8_t *db, uint32_t *dm,
                   cudaStream_t s)
{
	if (!ng)
		return;
	kq_emul_enqueue(s, [=] {
		struct rq_obs_params p = {};
		p.expand = expand;
		p.steps = steps;
		p.patience = steps;
		memcpy(p.p, P, sizeof(float) * (size_t)steps);
		std::vector<uint8_t> scratch(rq_obs_scratch_bytes(group));
		rq_obs_search_rows(kind, &p, dw, ng, group, group, db, dm, scratch.data());
		if (kq_emul_g.f.corrupt || kq_emul_g.f.corrupt_obs)   /* read unlocked: set between jobs */
			db[0] ^= 1u;
	});
}

cudaError_t kq_kernels_loadable(void)
{
	std::lock_guard<std::mutex> l(kq_emul_g.mu);
	return kq_emul_g.f.no_image ? cudaErrorNoKernelImageForDevice : cudaSuccess;
}

/* ---- kq_emul.h ---- */

extern "C" void kq_emul_faults_set(const struct kq_emul_faults *f)
{
	std::lock_guard<std::mutex> l(kq_emul_g.mu);
	kq_emul_g.f = *f;
}

extern "C" void kq_emul_hang(int on)
{
	kq_emul_g.hang.store(on);
}

extern "C" void kq_emul_stats_get(struct kq_emul_stats *s)
{
	std::lock_guard<std::mutex> l(kq_emul_g.mu);
	*s = kq_emul_g.st;
}
