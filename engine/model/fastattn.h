/* fastattn.h — the fast mode's attention for one query token and one KV
 * head (internal to engine/model; engine/model/fastattn.c): the query heads
 * that share the KV head read each key and value once, scores and P·V with
 * fused multiply-adds, the softmax's exponentials 16 at a time. NOT the
 * oracle's bits (forward.c's attn_items): within the fast mode's tolerance
 * (tests/engine/test_fast.c, docs/engine.md "The fast mode"). */
#ifndef RQ_ENGINE_FASTATTN_H
#define RQ_ENGINE_FASTATTN_H

#define LG_FATTN_HEADS 4           /* query heads per pass (scores: that many rows) */

struct lg_fattn {
	const float *q;            /* [rep][hd] the queries of the KV head's query heads */
	float *o;                  /* [rep][hd] their outputs */
	const float *kc, *vc;      /* the layer's caches: key j at slot (lo + j) % cap, the KV
	                              head's hd values at slot · kvd + kvh · hd */
	int kvd, kvh, hd, rep;
	int cap, lo, n;            /* n >= 1 keys from slot lo (mod cap) */
	float scale;               /* scores times scale before the softmax */
	float *sc;                 /* scratch: LG_FATTN_HEADS · n floats */
};

/* 1 when lg_fast_attn takes head_dim hd on this CPU (AVX-512 F with FMA, the
 * fast mode on, hd a multiple of 16 up to 256). */
int lg_fast_attn_takes(int hd);

/* o[h] = Σ_j softmax_j(scale · q[h]·k_j) · v_j for h < rep. */
void lg_fast_attn(const struct lg_fattn *a);

#endif
