/* simt.h (emulated) — just enough of CUDA's device side, on the host, to run
 * a kernel's own source without a GPU (tests/kernels/test_ek_attn_simt.cpp
 * runs kernels/ek_attn_split.cuh with it). C++17, one host thread.
 *
 * Each CUDA thread of a block is a fiber (ucontext) with its own stack; the
 * blocks of a grid run one after another. A fiber runs until it reaches a
 * barrier: __syncthreads waits for every live thread of the block, a warp
 * exchange (__shfl_xor_sync) for every live thread of its warp. The
 * scheduler releases a barrier once all its threads are at it; if no fiber
 * can run and none can be released (a __syncthreads some threads skip, a
 * shuffle in divergent code) the launch fails: simt_launch returns -1 with
 * the reason in simt_error. Exited threads count as arrived.
 *
 * __shared__ is `static`: one copy per kernel instantiation, which is the
 * block's shared memory since blocks run one at a time. Before each block
 * it still holds the previous block's values (CUDA's is undefined): a kernel
 * reading shared memory it did not write this block is not caught.
 * Arithmetic: the host's (build with -ffp-contract=off): fmaf is fused,
 * __fadd_rn/__fmul_rn/__fdiv_rn are IEEE binary32, expf is glibc's (CUDA's
 * differs by an ulp or two). Shuffle masks are not checked: all 32 lanes of
 * a warp must take part, as in the kernels this runs. */
#ifndef RQ_TESTS_EMUL_SIMT_H
#define RQ_TESTS_EMUL_SIMT_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <functional>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

struct dim3 {
	unsigned x, y, z;
	dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct uint2 { unsigned x, y; };
struct uint4 { unsigned x, y, z, w; };
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };

static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d)
{
	return uint4{a, b, c, d};
}

template <typename T>
static inline T __ldg(const T *p)
{
	return *p;
}

static inline float __uint_as_float(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* prmt.b32 x, y, s (default mode): byte n of the result is byte (s >> 4n) & 7 of
 * {y:x}, or that byte's sign replicated when bit 3 of the nibble is set. */
static inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s)
{
	uint64_t v = (uint64_t)y << 32 | x;
	uint32_t r = 0;
	for (int n = 0; n < 4; n++) {
		uint32_t sel = (s >> (4 * n)) & 15u, b = (uint32_t)(v >> (8 * (sel & 7))) & 0xFFu;
		if (sel & 8)
			b = b & 0x80u ? 0xFFu : 0u;
		r |= b << (8 * n);
	}
	return r;
}

static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }

enum { SIMT_RUN = 0, SIMT_BLOCK = 1, SIMT_WARP = 2, SIMT_DONE = 3 };

struct simt_fiber {
	ucontext_t ctx;
	int state;
	dim3 tid;
	char *stack;
};

struct simt_rt {
	ucontext_t sched;
	std::vector<simt_fiber> f;
	int cur;
	std::function<void()> body;
	uint32_t xch[1024];        /* shuffle slots, one per thread */
	unsigned long long switches;
	char error[256];
};

static simt_rt simt;
static dim3 blockIdx, blockDim, gridDim;
#define threadIdx (simt.f[simt.cur].tid)
#define simt_error (simt.error)

#define SIMT_STACK (64 * 1024)

static inline void simt_wait(int kind)
{
	simt_fiber &me = simt.f[simt.cur];
	me.state = kind;
	simt.switches++;
	swapcontext(&me.ctx, &simt.sched);
}

static inline void __syncthreads()
{
	simt_wait(SIMT_BLOCK);
}

template <typename T>
static inline T __shfl_xor_sync(unsigned mask, T v, int lanemask)
{
	static_assert(sizeof(T) == 4, "32-bit shuffles only");
	(void)mask;
	int t = simt.cur, src = (t & ~31) | ((t & 31) ^ lanemask);
	memcpy(&simt.xch[t], &v, 4);
	simt_wait(SIMT_WARP);
	T r;
	memcpy(&r, &simt.xch[src], 4);
	simt_wait(SIMT_WARP);
	return r;
}

static void simt_entry()
{
	simt.body();
	simt.f[simt.cur].state = SIMT_DONE;
	swapcontext(&simt.f[simt.cur].ctx, &simt.sched);
}

/* One block of nt threads; 0, or -1 with simt_error on a deadlock. */
static inline int simt_block(int nt)
{
	if ((int)simt.f.size() < nt) {
		size_t old = simt.f.size();
		simt.f.resize(nt);
		for (size_t i = old; i < (size_t)nt; i++)
			simt.f[i].stack = (char *)malloc(SIMT_STACK);
	}
	for (int i = 0; i < nt; i++) {
		simt_fiber &f = simt.f[i];
		getcontext(&f.ctx);
		f.ctx.uc_stack.ss_sp = f.stack;
		f.ctx.uc_stack.ss_size = SIMT_STACK;
		f.ctx.uc_link = NULL;
		makecontext(&f.ctx, simt_entry, 0);
		f.state = SIMT_RUN;
		f.tid = dim3((unsigned)i, 0, 0);
	}
	for (;;) {
		for (int i = 0; i < nt; i++)
			if (simt.f[i].state == SIMT_RUN) {
				simt.cur = i;
				swapcontext(&simt.sched, &simt.f[i].ctx);
			}
		int live = 0, at_block = 0, released = 0;
		for (int w = 0; w < nt; w += 32) {
			int lw = 0, aw = 0;
			for (int i = w; i < nt && i < w + 32; i++) {
				lw += simt.f[i].state != SIMT_DONE;
				aw += simt.f[i].state == SIMT_WARP;
			}
			if (aw && aw == lw) {
				for (int i = w; i < nt && i < w + 32; i++)
					simt.f[i].state = SIMT_RUN;
				released++;
			}
		}
		for (int i = 0; i < nt; i++) {
			live += simt.f[i].state != SIMT_DONE;
			at_block += simt.f[i].state == SIMT_BLOCK;
		}
		if (!live)
			return 0;
		if (released)
			continue;
		if (at_block == live) {
			for (int i = 0; i < nt; i++)
				if (simt.f[i].state == SIMT_BLOCK)
					simt.f[i].state = SIMT_RUN;
			continue;
		}
		snprintf(simt.error, sizeof simt.error, "block (%u,%u,%u): deadlock: %d of %d live threads "
		         "at __syncthreads, the others at a warp exchange of an incomplete warp",
		         blockIdx.x, blockIdx.y, blockIdx.z, at_block, live);
		return -1;
	}
}

/* kern<<<grid, block>>>(args...), run to completion. */
template <typename... KArgs, typename... Args>
static inline int simt_launch(void (*kern)(KArgs...), dim3 grid, dim3 block, Args... args)
{
	if (block.y != 1 || block.z != 1 || block.x > 1024) {
		snprintf(simt.error, sizeof simt.error, "only 1-D blocks of <= 1024 threads");
		return -1;
	}
	gridDim = grid;
	blockDim = block;
	simt.body = [&]() { kern(((KArgs)args)...); };
	for (unsigned z = 0; z < grid.z; z++)
		for (unsigned y = 0; y < grid.y; y++)
			for (unsigned x = 0; x < grid.x; x++) {
				blockIdx = dim3(x, y, z);
				if (simt_block((int)block.x))
					return -1;
			}
	return 0;
}

#endif
