/* ek_attn_int.h — the decode attention's decomposition, shared by the CUDA
 * kernel (ek_attn.cu) and its CPU twin (ek_attn_cpu.c) so that both cut the
 * keys the same way (internal to kernels/ and its tests; C and CUDA).
 *
 * Token t at position p sees the n = p - lo + 1 keys lo..p. They are cut
 * into chunks of EK_AT_CHUNK keys (from lo); the chunks are dealt to at most
 * ns = ek_at_nsplit(max_keys) splits, nsp = min(ns, chunks) of them live,
 * split sp taking chunks [sp·nch/nsp, (sp+1)·nch/nsp). Each split writes one
 * partial (Σ e^(s - m)·v, m, l) per query head; a merge combines them. The
 * query heads of one kv head are dealt to groups of at most EK_AT_QG. */
#ifndef RQ_KERNELS_EK_ATTN_INT_H
#define RQ_KERNELS_EK_ATTN_INT_H

#include "kernels/ek.h"

#if defined(__CUDACC__)
#define EK_AT_FN static constexpr __host__ __device__ __forceinline__
#elif defined(__cplusplus)
#define EK_AT_FN static constexpr inline      /* the host emulation of the kernels */
#else
#define EK_AT_FN static inline
#endif

#define EK_AT_CHUNK 64         /* keys one block scores and accumulates per pass */
#define EK_AT_SPLITS 64        /* most splits per (token, kv head): bounds the work buffer */
#define EK_AT_QG 4             /* most query heads per block */
#define EK_AT_THREADS 128      /* threads per split block */

/* First key a token at position p sees. */
EK_AT_FN int ek_at_lo(int p, int window)
{
	return window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
}

/* Splits of the grid (and of the work buffer) for calls seeing <= max_keys. */
EK_AT_FN int ek_at_nsplit(int max_keys)
{
	long c = ((long)(max_keys > 0 ? max_keys : 1) + EK_AT_CHUNK - 1) / EK_AT_CHUNK;
	return c < EK_AT_SPLITS ? (int)c : EK_AT_SPLITS;
}

EK_AT_FN int ek_at_chunks(int n)
{
	return (n + EK_AT_CHUNK - 1) / EK_AT_CHUNK;
}

/* Chunks [*c0, *c1) of split sp when nsp splits share nch chunks. */
EK_AT_FN void ek_at_range(int nch, int nsp, int sp, int *c0, int *c1)
{
	*c0 = (int)((long)sp * nch / nsp);
	*c1 = (int)((long)(sp + 1) * nch / nsp);
}

/* Slot of the key j places after the one at slot s0 (< cap): one conditional
 * subtraction when cap >= EK_AT_CHUNK (j < EK_AT_CHUNK), a modulo for tiny
 * rings (tests), so even a cache too small for its keys is read in bounds. */
EK_AT_FN int ek_at_slot(int s0, int j, int cap)
{
	return cap >= EK_AT_CHUNK ? (s0 + j >= cap ? s0 + j - cap : s0 + j) : (s0 + j) % cap;
}

/* Elements of one vector load (16 bytes; 8 for FP8 rows of 8 elements). */
EK_AT_FN int ek_at_ve(int kvtype, int hd)
{
	int v = kvtype == EK_KV_F32 ? 4 : kvtype == EK_KV_BF16 ? 8 : 16;
	return v < hd ? v : hd;
}

/* Query-head groups of a kv head with rep query heads: *ng groups of *per. */
EK_AT_FN void ek_at_groups(int rep, int *ng, int *per)
{
	*ng = (rep + EK_AT_QG - 1) / EK_AT_QG;
	*per = (rep + *ng - 1) / *ng;
}

#endif
