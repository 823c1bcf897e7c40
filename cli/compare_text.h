/* compare_text.h — perplexity and KL on one window of real text (compare --text). */
#ifndef RQ_TOOLS_COMPARE_TEXT_H
#define RQ_TOOLS_COMPARE_TEXT_H

struct lg_model;
struct rq_err;
struct rq_pool;
struct tok;

struct ct_result {
	int positions;             /* predicted tokens: window - 1 */
	double ppl_a, ppl_b;       /* exp(mean NLL of the next token) */
	double kl_mean, kl_p99, kl_max;   /* KL(A‖B) per position, nats */
	double top1;               /* fraction of positions where the argmaxes agree */
};

/* The first max_tokens tokens of the file at path as tokenizer(text) encodes
 * it (post-processor applied): malloc'd *tok, *n of them (>= 2). */
int ct_window(const char *path, const struct tok *tk, int max_tokens, int **tok, int *n,
              struct rq_err *err);
/* A's logits at every position of tok[0..n): malloc'd [n][vocab]. */
int ct_reference(const struct lg_model *a, struct rq_pool *pool, const int *tok, int n,
                 float **logits, struct rq_err *err);
/* Perplexity of the reference itself on the window. */
double ct_ppl(const float *ref, const int *tok, int n, int vocab);
/* B on the same window against A's logits (ref). label names the progress bar;
 * fast: B on the CPU engine's fast mode (compare --fast; A stays the oracle). */
int ct_score(const struct lg_model *b, struct rq_pool *pool, const float *ref, const int *tok, int n,
             const char *label, int fast, struct ct_result *r, struct rq_err *err);

#endif
