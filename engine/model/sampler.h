/* sampler.h — next-token choice from logits: greedy, or temperature →
 * top-k → top-p (transformers' warper order) and a draw from a seeded RNG.
 * Same seed, same logits → same tokens, on every machine. */
#ifndef RQ_ENGINE_SAMPLER_H
#define RQ_ENGINE_SAMPLER_H

#include <stdint.h>

struct lg_sampler {
	int vocab;
	float temperature;         /* 0: greedy */
	int top_k;                 /* 0: off */
	float top_p;               /* 1: off */
	uint64_t rng;              /* xorshift64* state (never 0) */
	struct lg_cand { float p; int id; } *cand;   /* [vocab] work space */
};

/* 0, -EINVAL (temperature < 0, top_p not in (0, 1], top_k < 0) or -ENOMEM. */
int lg_sampler_init(struct lg_sampler *s, int vocab, float temperature, int top_k, float top_p,
                    uint64_t seed);
void lg_sampler_free(struct lg_sampler *s);

/* Picks a token from logits[vocab] (not modified). */
int lg_sample(struct lg_sampler *s, const float *logits);

/* Index of the largest logit (the first on ties). */
int lg_argmax(const float *logits, int n);

/* Uniform in [0, 1) with 24 random bits; advances the state. */
float lg_rand(uint64_t *state);

#endif
