/* sampler.c — greedy / temperature / top-k / top-p sampling.
 *
 * Like transformers: logits / temperature; keep the top_k largest; keep the
 * smallest set of the most likely tokens whose probability reaches top_p
 * (always at least one); softmax over the survivors; draw. */
#include "engine/model/sampler.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

int lg_sampler_init(struct lg_sampler *s, int vocab, float temperature, int top_k, float top_p,
                    uint64_t seed)
{
	if (vocab < 1 || !(temperature >= 0) || top_k < 0 || !(top_p > 0 && top_p <= 1))
		return -EINVAL;
	struct lg_cand *c = malloc((size_t)vocab * sizeof *c);
	if (!c)
		return -ENOMEM;
	s->vocab = vocab;
	s->temperature = temperature;
	s->top_k = top_k;
	s->top_p = top_p;
	/* splitmix64 of the seed: distinct seeds, distinct non-zero states */
	uint64_t z = seed + 0x9E3779B97F4A7C15ull;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	z ^= z >> 31;
	s->rng = z ? z : 1;
	s->cand = c;
	return 0;
}

void lg_sampler_free(struct lg_sampler *s)
{
	if (s) {
		free(s->cand);
		s->cand = NULL;
	}
}

float lg_rand(uint64_t *state)
{
	uint64_t x = *state;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*state = x;
	return (float)((x * 0x2545F4914F6CDD1Dull) >> 40) / 16777216.0f;
}

int lg_argmax(const float *logits, int n)
{
	int best = 0;
	for (int i = 1; i < n; i++)
		if (logits[i] > logits[best])
			best = i;
	return best;
}

/* descending probability, then ascending id: a total order, so qsort's
 * instability cannot change the result */
static int cmp_cand(const void *a, const void *b)
{
	const struct lg_cand *x = a, *y = b;
	if (x->p != y->p)
		return x->p > y->p ? -1 : 1;
	return (x->id > y->id) - (x->id < y->id);
}

/* Moves the k best candidates (cmp_cand order) to the front, unordered. */
static void select_top(struct lg_cand *c, int n, int k)
{
	int lo = 0, hi = n - 1;
	while (lo < hi) {
		struct lg_cand pivot = c[lo + (hi - lo) / 2], t;
		int i = lo, j = hi;
		while (i <= j) {
			while (cmp_cand(&c[i], &pivot) < 0)
				i++;
			while (cmp_cand(&c[j], &pivot) > 0)
				j--;
			if (i <= j) {
				t = c[i];
				c[i++] = c[j];
				c[j--] = t;
			}
		}
		if (k - 1 <= j)
			hi = j;
		else if (k - 1 >= i)
			lo = i;
		else
			return;
	}
}

int lg_sample(struct lg_sampler *s, const float *logits)
{
	int V = s->vocab;
	if (s->temperature == 0)
		return lg_argmax(logits, V);
	for (int i = 0; i < V; i++)
		s->cand[i] = (struct lg_cand){.p = logits[i] / s->temperature, .id = i};
	int n = s->top_k > 0 && s->top_k < V ? s->top_k : V;
	if (n < V)
		select_top(s->cand, V, n);
	qsort(s->cand, n, sizeof *s->cand, cmp_cand);
	/* softmax over the top-k (sorted, so the max is first) */
	float mx = s->cand[0].p;
	double sum = 0;
	for (int i = 0; i < n; i++) {
		s->cand[i].p = expf(s->cand[i].p - mx);
		sum += s->cand[i].p;
	}
	if (s->top_p < 1) {
		double cum = 0;
		int keep = 0;
		while (keep < n) {
			cum += s->cand[keep].p / sum;
			keep++;
			if (cum >= s->top_p)
				break;
		}
		n = keep;
		sum = 0;
		for (int i = 0; i < n; i++)
			sum += s->cand[i].p;
	}
	double r = lg_rand(&s->rng) * sum, acc = 0;
	for (int i = 0; i < n; i++) {
		acc += s->cand[i].p;
		if (r < acc)
			return s->cand[i].id;
	}
	return s->cand[n - 1].id;
}
