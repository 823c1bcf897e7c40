/* compare_text.c — quality on real text: one window of a file, two models.
 *
 * The window is the first N tokens of FILE as transformers' tokenizer(text)
 * encodes it (the post-processor applied, e.g. a leading BOS). Model A, the
 * reference, reads it once and its logits at every position are kept
 * ([N][vocab] floats); model B then reads the same window batch by batch, and
 * each position i < N-1 gives
 *
 *   KL(A‖B) = Σ_v pA(v) (log pA(v) − log pB(v))     next-token distributions,
 *                                                   A as the reference (what
 *                                                   llama.cpp's KL divergence
 *                                                   mode measures)
 *   top-1    argmax pA == argmax pB
 *   NLL      −log p(tok[i+1]) under A and under B
 *
 * and ppl = exp(mean NLL) over the N-1 predicted tokens: transformers' loss
 * with labels = input_ids on the same window. Both run on the CPU engine (the
 * reference path: results do not depend on the thread count). */
#include "cli/compare_text.h"
#include "base/err.h"
#include "base/file.h"
#include "base/pool.h"
#include "engine/model/backend.h"
#include "engine/model/model.h"
#include "engine/model/sampler.h"
#include "engine/tok/tokenizer.h"
#include "cli/cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CT_BATCH 64                /* positions per forward call */

int ct_window(const char *path, const struct tok *tk, int max_tokens, int **tok, int *n,
              struct rq_err *err)
{
	/* a regular file only: a FIFO or a device would block or never end */
	size_t fsize = 0;
	int fd = rq_file_open(path, &fsize, err);
	if (fd < 0)
		return fd;
	/* ~4 bytes a token in English; read enough for max_tokens and a margin,
	 * never more than the file (tokens at the cut may merge differently, so
	 * the window is taken from a prefix well past it). */
	size_t want = (size_t)max_tokens * 16 + 4096;
	size_t len = fsize < want ? fsize : want;
	char *text = malloc(len + 1);
	if (!text) {
		close(fd);
		return rq_errf(err, -ENOMEM, "out of memory reading %s", path);
	}
	size_t got = 0;
	while (got < len) {
		ssize_t r = read(fd, text + got, len - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	text[got] = 0;
	if (got < len) {
		free(text);
		return rq_errf(err, -EIO, "%s: short read", path);
	}
	/* A prefix cut inside a UTF-8 character or a word could tokenize its
	 * tail differently from the whole file: cut at the last newline. */
	if (got < fsize) {
		char *nl = memrchr(text, '\n', got);
		if (nl)
			got = (size_t)(nl - text) + 1;
	}
	struct tok_ids ids = {0};
	int rc = tok_encode(tk, text, got, TOK_ADD_SPECIAL, &ids);
	free(text);
	if (rc) {
		tok_ids_free(&ids);
		return rq_errf(err, rc, "%s: cannot tokenize", path);
	}
	if (ids.n < 2) {
		tok_ids_free(&ids);
		return rq_errf(err, -EINVAL, "%s: fewer than 2 tokens of text", path);
	}
	int m = ids.n < (size_t)max_tokens ? (int)ids.n : max_tokens;
	int *t = malloc(sizeof(int) * m);
	if (!t) {
		tok_ids_free(&ids);
		return rq_errf(err, -ENOMEM, "out of memory");
	}
	for (int i = 0; i < m; i++)
		t[i] = ids.v[i];
	tok_ids_free(&ids);
	*tok = t;
	*n = m;
	return 0;
}

/* Feeds tok[0..n) to m on the CPU (fast: its fast mode) in batches; calls
 * fn(ctx, first, k, logits[k][vocab]) after each batch. */
static int run_batches(const struct lg_model *m, struct rq_pool *pool, const int *tok, int n,
                       const char *label, int fast,
                       int (*fn)(void *ctx, int first, int k, const float *lg), void *ctx,
                       struct rq_err *err)
{
	struct lg_backend *b = NULL;
	struct lg_backend_opts o = {.device = LG_DEVICE_CPU, .max_ctx = n, .pool = pool, .fast = fast};
	int V = m->cfg.vocab, rc;
	float *lg = malloc(sizeof(float) * (size_t)V * CT_BATCH);
	if (!lg)
		return rq_errf(err, -ENOMEM, "out of memory for %d logits", V * CT_BATCH);
	if ((rc = lg_backend_open(m, &o, &b, err))) {
		free(lg);
		return rc;
	}
	struct cli_progress *p = cli_progress_start(label, (unsigned long long)n, 0, 0);
	for (int i = 0; i < n && !rc; i += CT_BATCH) {
		int k = n - i < CT_BATCH ? n - i : CT_BATCH;
		if (!(rc = b->forward(b, tok + i, k, lg, k, err)))
			rc = fn(ctx, i, k, lg);
		cli_progress_add(p, (unsigned long long)k, 0);
	}
	cli_progress_end(p);
	lg_backend_close(b);
	free(lg);
	return rc;
}

struct keep_ctx {
	float *out;
	int V;
};

static int keep_rows(void *ctx, int first, int k, const float *lg)
{
	struct keep_ctx *c = ctx;
	memcpy(c->out + (size_t)first * c->V, lg, sizeof(float) * (size_t)c->V * k);
	return 0;
}

int ct_reference(const struct lg_model *a, struct rq_pool *pool, const int *tok, int n,
                 float **logits, struct rq_err *err)
{
	size_t V = (size_t)a->cfg.vocab;
	float *out = malloc(sizeof(float) * V * n);
	if (!out)
		return rq_errf(err, -ENOMEM, "out of memory for the reference logits (%d positions x %zu "
		                "tokens); use fewer --tokens", n, V);
	struct keep_ctx c = {out, (int)V};
	int rc = run_batches(a, pool, tok, n, "reference", 0, keep_rows, &c, err);
	if (rc) {
		free(out);
		return rc;
	}
	*logits = out;
	return 0;
}

/* log-sum-exp of x[n] */
static double lse(const float *x, int n)
{
	double mx = x[0], s = 0;
	for (int i = 1; i < n; i++)
		mx = x[i] > mx ? x[i] : mx;
	for (int i = 0; i < n; i++)
		s += exp(x[i] - mx);
	return mx + log(s);
}

struct score_ctx {
	const float *ref;          /* [n][V] A's logits */
	const int *tok;
	int n, V;
	double *kl;                /* [n-1] */
	long agree;
	double nll_a, nll_b;
};

static int score_rows(void *ctx, int first, int k, const float *lg)
{
	struct score_ctx *c = ctx;
	for (int j = 0; j < k; j++) {
		int i = first + j;
		if (i + 1 >= c->n)
			break;
		const float *xa = c->ref + (size_t)i * c->V, *xb = lg + (size_t)j * c->V;
		double la = lse(xa, c->V), lb = lse(xb, c->V), kl = 0;
		for (int v = 0; v < c->V; v++) {
			double pa = xa[v] - la;
			kl += exp(pa) * (pa - (xb[v] - lb));
		}
		c->kl[i] = kl < 0 ? 0 : kl;
		c->agree += lg_argmax(xa, c->V) == lg_argmax(xb, c->V);
		c->nll_a += la - xa[c->tok[i + 1]];
		c->nll_b += lb - xb[c->tok[i + 1]];
	}
	return 0;
}

double ct_ppl(const float *ref, const int *tok, int n, int V)
{
	double nll = 0;
	for (int i = 0; i + 1 < n; i++) {
		const float *x = ref + (size_t)i * V;
		nll += lse(x, V) - x[tok[i + 1]];
	}
	return exp(nll / (n - 1));
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;
	return (a > b) - (a < b);
}

int ct_score(const struct lg_model *b, struct rq_pool *pool, const float *ref, const int *tok, int n,
             const char *label, int fast, struct ct_result *r, struct rq_err *err)
{
	struct score_ctx c = {.ref = ref, .tok = tok, .n = n, .V = b->cfg.vocab};
	if (!(c.kl = malloc(sizeof(double) * (size_t)n)))
		return rq_errf(err, -ENOMEM, "out of memory");
	int rc = run_batches(b, pool, tok, n, label, fast, score_rows, &c, err);
	if (!rc) {
		int m = n - 1;
		double sum = 0;
		for (int i = 0; i < m; i++)
			sum += c.kl[i];
		qsort(c.kl, (size_t)m, sizeof(double), cmp_double);
		r->positions = m;
		r->kl_mean = sum / m;
		r->kl_p99 = c.kl[(int)ceil(0.99 * m) - 1];
		r->kl_max = c.kl[m - 1];
		r->top1 = (double)c.agree / m;
		r->ppl_a = exp(c.nll_a / m);
		r->ppl_b = exp(c.nll_b / m);
	}
	free(c.kl);
	return rc;
}
