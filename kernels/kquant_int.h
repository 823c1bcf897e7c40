/* kquant_int.h — the CUDA quantizer's context and kernels, shared by
 * kquant.cu (the job) and kquant_bench.cu (device-resident timing).
 * Internal to kernels/; C++ (nvcc) only. */
#ifndef RQ_KQUANT_INT_H
#define RQ_KQUANT_INT_H

#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "kernels/kquant.h"
}

#ifndef KQ_GPU_ARCH
#define KQ_GPU_ARCH "?"
#endif

/* Bytes per group of 16 weights: 32 in (BF16), 8 packed codes, 1 scale. */
#define KQ_IN_G 32u
#define KQ_PK_G 8u
#define KQ_GROUP_BYTES 41u
/* Largest streaming chunk / staging slot, in groups (2 MiB of input): small
 * enough that one expert (6 MiB) pipelines the host copy of one chunk with
 * the transfer of the previous one. */
#define KQ_CHUNK_MAX ((size_t)1 << 16)
#define KQ_MEM_DEFAULT ((size_t)1 << 30)
#define KQ_MEM_MIN ((size_t)4096)

/* What the scale kernel leaves for the host (device and pinned copies). */
struct kq_res {
	float gs;          /* the shared global scale */
	int bad;           /* first module holding a NaN/Inf, -1 when none */
	uint32_t amax;     /* max |w| over the job, BF16 bits */
};

/* Invariant: arena_bytes <= mem_limit; each slot s owns stage[s] (pinned)
 * and, when streaming, arena[s * chunk * 41 ...]; ev[s] is recorded after
 * the last queued copy that reads or writes stage[s], so the host may touch
 * stage[s] once ev[s] has completed. Used by one thread at a time. */
struct kq_ctx {
	int dev;                 /* CUDA device ordinal */
	int sms;                 /* multiprocessors */
	int cc;                  /* compute capability, 10 * major + minor */
	char name[256];          /* cudaDeviceProp.name */
	size_t mem_limit;        /* bytes of device buffers at most */
	size_t chunk;            /* groups per staging slot and streaming chunk */
	cudaStream_t st[2];      /* one non-blocking stream per slot */
	cudaEvent_t ev[2];       /* last use of each slot's pinned buffer */
	cudaEvent_t evx;         /* cross-stream ordering point */
	uint8_t *arena;          /* device [arena_bytes]: resident job or two slots */
	size_t arena_bytes;
	uint32_t *damax;         /* device [amax_cap]: per-module max |w|, BF16 bits */
	int amax_cap;
	struct kq_res *dres;     /* device: the scale kernel's result */
	struct kq_res *hres;     /* pinned host copy of dres */
	uint8_t *stage[2];       /* pinned host [stage_groups * 41] each: in, packed, scales */
	size_t stage_groups;
	size_t ctx_bytes;        /* device bytes the context took at kq_open (NVML), 0 unknown */
	int poisoned;            /* watchdog fired or sticky error: never run another job */
	int ctx_made;            /* kq_open got as far as a current context */
	unsigned long long copied;   /* input bytes memcpy'd into stage[] by the host */
	/* the running job's watchdog (kq_quantize_job_opt): */
	double deadline;         /* now() seconds after which waiting fails; 0 = none */
	double (*now)(void);     /* the job's clock */
};

/* kquant.cu */
int kq_fail(char *msg, size_t msglen, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
int kq_cuda_fail(char *msg, size_t msglen, struct kq_ctx *k, const char *what,
                 cudaError_t e);
/* Waits (polling cudaEventQuery) until e completed, or fails with
 * -ETIMEDOUT (and poisons k) once k->deadline has passed. */
int kq_wait(struct kq_ctx *k, cudaEvent_t e, const char *what, char *msg, size_t msglen);
size_t kq_groups(const struct rq_qmod *m);
int kq_amax_need(struct kq_ctx *k, int n, char *msg, size_t msglen);
/* Device arena of at least bytes (<= mem_limit), kept between jobs. */
int kq_arena_need(struct kq_ctx *k, size_t bytes, char *msg, size_t msglen);
/* Starts a job's watchdog: k->now and k->deadline from o (NULL: no deadline). */
void kq_deadline_start(struct kq_ctx *k, const struct kq_job_opts *o);
/* kquant_kern.cu: launches on stream s (gs_batch: the legacy stream) */
void kq_launch_absmax(const struct kq_ctx *k, const uint8_t *din, size_t groups,
                      uint32_t *amax, cudaStream_t s);
void kq_launch_scale(enum rq_recipe r, const uint32_t *amax, int n, struct kq_res *res,
                     cudaStream_t s);
void kq_launch_quant(enum rq_recipe r, const uint8_t *din, size_t groups, float gs,
                     uint8_t *dpk, uint8_t *dsc, cudaStream_t s);
void kq_launch_gs_batch(enum rq_recipe r, const uint16_t *amax, size_t n, float *gs);
/* kq_obs.cuh's k_obs_search over ng groups of `group` weights at dw (P: steps of them,
 * T: rq_obs_pow_table on the device; dm may be NULL) */
void kq_launch_obs(int kind, int steps, float expand, const float *P, const float *T,
                   const uint16_t *dw, size_t ng, unsigned group, uint8_t *db, uint32_t *dm,
                   cudaStream_t s);
cudaError_t kq_kernels_loadable(void);

#define KQ_CK(what, call) do { \
	cudaError_t kq_e_ = (call); \
	if (kq_e_ != cudaSuccess) { \
		rc = kq_cuda_fail(msg, msglen, k, (what), kq_e_); \
		goto fail; \
	} \
} while (0)

#endif
