/* kq_emul.h — C controls of the emulated CUDA runtime (emul/cuda_runtime.h,
 * tests/kernels/kq_emul.cpp): fault injection and what the "driver" saw, for
 * tests of kernels/kquant.cu and qdev/ on the host. */
#ifndef RQ_TESTS_EMUL_KQ_EMUL_H
#define RQ_TESTS_EMUL_KQ_EMUL_H

#ifdef __cplusplus
extern "C" {
#endif

/* Faults, each a count of calls to fail ("the next N ..."); set replaces
 * all of them. */
struct kq_emul_faults {
	int malloc_fail;        /* the next N cudaMalloc fail: out of memory ... */
	int malloc_after;       /* ... after this many more succeed */
	int launch_fail;        /* the next N kernel launches fail (sticky launch failure) */
	int query_fail;         /* the next N cudaEventQuery fail (sticky illegal address) */
	int busy;               /* the next N context creations fail: all devices busy or
	                           unavailable (exclusive-process mode) */
	int no_image;           /* 1: no kernel image for the device (permanent) */
	int corrupt;            /* 1: the quantize kernel flips bit 0 of every group's first
	                           packed byte (a GPU that is not bit-exact) */
	int no_device;          /* 1: cudaGetDeviceCount finds none */
	int corrupt_obs;        /* 1: the MSE search kernel flips bit 0 of the first group's
	                           step (a search that is not bit-exact; the quantize kernel
	                           stays exact) */
	long long mem_total;    /* device memory in bytes; 0 = 80 GiB */
	long long mem_others;   /* bytes "another process" holds (count against mem_total) */
};
void kq_emul_faults_set(const struct kq_emul_faults *f);
/* 1: kernels launched from now on never complete, until 0 (then they do). */
void kq_emul_hang(int on);

struct kq_emul_stats {
	int contexts_created;   /* primary contexts brought up (first use after a reset) */
	int context_active;     /* 1 while one exists */
	long long dev_used;     /* device bytes in use: the context, buffers, others */
	long long launches;     /* kernels launched */
	long long host_allocs;  /* cudaMallocHost calls that succeeded */
	long long host_live;    /* cudaMallocHost buffers not yet freed */
};
void kq_emul_stats_get(struct kq_emul_stats *s);

/* What creating a context costs in the emulation (NVML sees it). */
#define KQ_EMUL_CONTEXT_BYTES (448ll << 20)

#ifdef __cplusplus
}
#endif

#endif
