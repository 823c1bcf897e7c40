/* cmd_compare.c — `requantfs compare DIR_A DIR_B`: how far model B's next-token
 * distributions are from model A's on the same token streams.
 *
 * Each prompt is encoded with A's tokenizer and continued greedily by A for
 * N tokens; both models then read the whole stream teacher-forced, and at
 * every position we take KL(A||B) of the next-token distributions, whether
 * their top-1 tokens agree, and each model's log-likelihood of the actual
 * next token (perplexity over the stream). */
#include "base/grow.h"
#include "cli/cli.h"
#include "cli/cli_hf.h"
#include "base/err.h"
#include "base/pool.h"
#include "engine/model/backend.h"
#include "engine/model/model.h"
#include "engine/model/sampler.h"
#include "engine/tok/tokenizer.h"
#include "cli/compare_schemes.h"
#include "cli/compare_text.h"
#include "cli/prompts.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const default_prompts[] = {
	"The capital of France is",
	"def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
	"In 1969, the first humans to walk on the Moon were",
	"Explain the difference between a process and a thread in an operating system.",
	"SELECT name, COUNT(*) FROM orders GROUP BY",
	"Once upon a time, in a small village by the sea,",
};

static void usage(FILE *f)
{
	fprintf(f,
	"usage: requantfs compare DIR_A DIR_B [--prompts FILE [--tokens N]] [-n N] [--threads N]\n"
	"       requantfs compare DIR_A DIR_B --text FILE [--tokens N] [--threads N]\n"
	"       requantfs compare SRC --schemes all|S[,S...] --text FILE [--tokens N]\n"
	"                 [--observers all|O[,O...]]\n"
	"                 [--calib FILE | --calib-text FILE] [--calib-tokens N]\n"
	"       any form: [--fast]\n\n"
	"Runs both models on the same token streams: each prompt (one per line of FILE,\n"
	"or %zu built-in ones) encoded with A's tokenizer, then continued greedily by A\n"
	"for N tokens (default 32). Both read each stream teacher-forced; printed per\n"
	"prompt and overall: KL(A||B) of the next-token distributions (mean, p99, max, in\n"
	"nats), top-1 agreement, and each model's perplexity on the stream.\n"
	"Typical use: A = the BF16-expert source, B = the requantized mount. DIR_A and\n"
	"DIR_B may also be hub repo ids ORG/NAME[@REV] in the local hub cache. Both run\n"
	"on the CPU engine, which reads each Linear as its headers say: BF16, NVFP4 or\n"
	"NVFP4A16, FP8 (fp8-dynamic) or INT pack-quantized (w8a16, w4a16).\n"
	"--prompts FILE: a regular file (not a FIFO or device); each prompt is its\n"
	"line's first N tokens (--tokens, default 2048), of which at most 64 x N bytes\n"
	"are read (a longer line is cut there, with a note).\n\n"
	"--text FILE: quality on real text instead. One window, the first N tokens of\n"
	"FILE (--tokens, default 2048) as transformers' tokenizer(text) encodes it; prints\n"
	"'ppl A <x> B <y>' (each model's perplexity on the window) and, per position,\n"
	"KL(A||B) (A the reference) and top-1 agreement.\n"
	"--schemes: SRC alone, mounted once per scheme (nvfp4a16, nvfp4 = W4A4,\n"
	"fp8-dynamic, w8a16, w4a16; all = every one) in a temporary directory with a\n"
	"temporary cache, both removed after; prints one table: scheme, bytes the mount\n"
	"presents, bytes its cache holds, ppl, KL mean and p99, top-1 against SRC. Needs\n"
	"--text. The engine quantizes activations where the config says the server does\n"
	"(W4A4's NVFP4 inputs, fp8-dynamic's per-token FP8), so each row is what a\n"
	"server would see.\n"
	"--observers LIST: one row per scheme and weight observer (minmax, mse,\n"
	"expanded-mse; all = the three), each mounted with --observer O and named\n"
	"'scheme/observer'; a pair the scheme does not take is a row saying so.\n"
	"nvfp4 (W4A4) needs input scales: --calib FILE (`requantfs calib run`'s file) is\n"
	"used as given; --calib-text FILE calibrates on FILE's first --calib-tokens N\n"
	"tokens (default 512; FILE must not be the --text file); with neither, compare\n"
	"runs `calib run` on the N tokens that FOLLOW the evaluated window in the --text\n"
	"file (never on the evaluated ones) and refuses, before anything runs, a file too\n"
	"short for that. The header says which tokens were used.\n"
	"A Laguna 08-01 SRC (the Laguna fix applies): the rows are the fix's\n"
	"--rule-scheme choices for the dropped rule's layers (nvfp4, nvfp4a16,\n"
	"fp8-dynamic; all = the three; column 'rule-scheme'); nvfp4 needs --calib CALIB\n"
	"as mount does (a 07-22 checkpoint or a calib file).\n"
	"--fast: B (or each --schemes row) on the CPU engine's fast mode (FMA kernels,\n"
	"not the oracle's bits); A stays the oracle, so `compare A A --fast` measures\n"
	"the fast mode itself.\n"
	"Progress goes to stderr when it is a terminal.\n",
	sizeof default_prompts / sizeof default_prompts[0]);
}

/* log-softmax of x[n] into out */
static void log_softmax(const float *x, int n, double *out)
{
	double mx = x[0], sum = 0;
	for (int i = 1; i < n; i++)
		mx = x[i] > mx ? x[i] : mx;
	for (int i = 0; i < n; i++)
		sum += exp(x[i] - mx);
	double lse = mx + log(sum);
	for (int i = 0; i < n; i++)
		out[i] = x[i] - lse;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

struct stats {
	double *kl;                /* per position */
	size_t n, cap;
	size_t agree;
	double nll_a, nll_b;       /* Σ -log p(next) */
};

static int push_kl(struct stats *s, double v)
{
	if (RQ_GROW(s->kl, s->n, s->cap, 1024))
		return -ENOMEM;
	s->kl[s->n++] = v;
	return 0;
}

static void report(const char *label, struct stats *s)
{
	if (!s->n)
		return;
	double sum = 0;
	for (size_t i = 0; i < s->n; i++)
		sum += s->kl[i];
	double *sorted = malloc(s->n * sizeof *sorted);
	if (!sorted)
		return;
	memcpy(sorted, s->kl, s->n * sizeof *sorted);
	qsort(sorted, s->n, sizeof *sorted, cmp_double);
	size_t i99 = (size_t)ceil(0.99 * s->n) - 1;
	printf("%-10s %5zu pos  KL mean %.3e  p99 %.3e  max %.3e  top-1 %6.2f%%  ppl A %8.3f  B %8.3f\n",
	       label, s->n, sum / s->n, sorted[i99], sorted[s->n - 1], 100.0 * s->agree / s->n,
	       exp(s->nll_a / s->n), exp(s->nll_b / s->n));
	free(sorted);
}

/* --prompts FILE: every line's first max_tokens tokens (cli/prompts.h:
 * of a line at most 64 bytes a token are read; a cut is noted on stderr). */
static int read_prompts(const char *path, const struct tok *tk, int max_tokens,
                        struct prompt **out, size_t *n, struct rq_err *err)
{
	struct prompts *pf = NULL;
	struct prompt *v = NULL, p;
	size_t cnt = 0, cap = 0;
	int rc = prompts_open(path, "--prompts", &pf, err);
	while (!rc && (rc = prompts_next(pf, tk, max_tokens, &p, err)) == 1) {
		if (p.cut_at)
			fprintf(stderr, "compare: note: --prompts %s line %zu is longer than %zu bytes (%d "
			        "bytes a token for --tokens %d): only its first %zu bytes are read\n", path,
			        p.line, (size_t)PROMPT_BYTES_PER_TOKEN * (size_t)max_tokens,
			        PROMPT_BYTES_PER_TOKEN, max_tokens, p.cut_at);
		rc = RQ_GROW(v, cnt, cap, 64) ? rq_errf(err, -ENOMEM, "out of memory") : 0;
		if (rc)
			free(p.tok);
		else
			v[cnt++] = p;
	}
	prompts_close(pf);
	if (!rc && !cnt)
		rc = rq_errf(err, -ENODATA, "--prompts %s holds no prompt (one a line)", path);
	if (rc < 0) {
		for (size_t i = 0; i < cnt; i++)
			free(v[i].tok);
		free(v);
		return rc;
	}
	*out = v;
	*n = cnt;
	return 0;
}

/* The CPU reference engine for up to n positions (the oracle compare
 * measures against: bit for bit, whatever the thread count); fast: B's
 * engine on the fast mode (--fast). */
static int open_cpu(const struct lg_model *m, struct rq_pool *pool, int n, int fast,
                    struct lg_backend **b, struct rq_err *err)
{
	struct lg_backend_opts o = {.device = LG_DEVICE_CPU, .max_ctx = n, .pool = pool, .fast = fast};
	return lg_backend_open(m, &o, b, err);
}

/* All-position logits of tokens[0..n) under model m. */
static int run_all(const struct lg_model *m, struct rq_pool *pool, const int *tok, int n, int fast,
                   float *out, struct rq_err *err)
{
	struct lg_backend *b;
	int rc = open_cpu(m, pool, n, fast, &b, err);
	if (rc)
		return rc;
	rc = b->forward(b, tok, n, out, n, err);
	lg_backend_close(b);
	return rc;
}

static int compare_one(const struct lg_model *a, const struct lg_model *b, struct rq_pool *pool,
                       const int *prompt, int np, int ngen, int fast, struct stats *tot, int idx,
                       struct rq_err *err)
{
	int V = a->cfg.vocab, L = np + ngen, rc;
	int *tok = malloc(sizeof(int) * L);
	float *la = malloc(sizeof(float) * V * (size_t)L), *lb = malloc(sizeof(float) * V * (size_t)L);
	double *pa = malloc(sizeof(double) * V), *pb = malloc(sizeof(double) * V);
	struct lg_backend *s = NULL;
	struct stats one = {0};
	if (!tok || !la || !lb || !pa || !pb) {
		rc = rq_errf(err, -ENOMEM, "out of memory for %d positions", L);
		goto out;
	}
	memcpy(tok, prompt, sizeof(int) * np);
	/* greedy continuation by A */
	if ((rc = open_cpu(a, pool, L, 0, &s, err)) || (rc = s->forward(s, tok, np, la, 1, err)))
		goto out;
	for (int i = np; i < L; i++) {
		tok[i] = lg_argmax(la, V);
		if (i + 1 < L && (rc = s->forward(s, &tok[i], 1, la, 1, err)))
			goto out;
	}
	if ((rc = run_all(a, pool, tok, L, 0, la, err)) || (rc = run_all(b, pool, tok, L, fast, lb, err)))
		goto out;
	for (int i = 0; i + 1 < L; i++) {
		const float *xa = la + (size_t)i * V, *xb = lb + (size_t)i * V;
		log_softmax(xa, V, pa);
		log_softmax(xb, V, pb);
		double kl = 0;
		for (int j = 0; j < V; j++)
			kl += exp(pa[j]) * (pa[j] - pb[j]);
		kl = kl < 0 ? 0 : kl;
		int agree = lg_argmax(xa, V) == lg_argmax(xb, V);
		double na = -pa[tok[i + 1]], nb = -pb[tok[i + 1]];
		struct stats *ss[2] = {&one, tot};
		for (int k = 0; k < 2; k++) {
			if ((rc = push_kl(ss[k], kl)))
				goto out;
			ss[k]->agree += agree;
			ss[k]->nll_a += na;
			ss[k]->nll_b += nb;
		}
	}
	char label[32];
	snprintf(label, sizeof label, "prompt %d", idx);
	report(label, &one);
	rc = 0;
out:
	lg_backend_close(s);
	free(one.kl);
	free(tok);
	free(la);
	free(lb);
	free(pa);
	free(pb);
	return rc;
}

/* --text (two models) and --schemes (one SRC, one temporary mount per scheme). */
/* A (and B when db) opened, their vocabularies equal, the threads started; else a message
 * and 1 (the caller closes what was opened). */
static int open_models(const char *da, const char *db, int threads, struct lg_model **a,
                       struct lg_model **b, struct rq_pool **pool)
{
	struct rq_err err = {0};
	if (lg_model_open(da, a, &err) || (db && lg_model_open(db, b, &err)))
		return cli_fail(1, "compare", "%s", err.msg);
	if (*b && (*a)->cfg.vocab != (*b)->cfg.vocab)
		return cli_fail(1, "compare", "vocabularies differ: %s has %d tokens, %s %d", da,
		                (*a)->cfg.vocab, db, (*b)->cfg.vocab);
	if (rq_pool_create(threads, pool))
		return cli_fail(1, "compare", "cannot start threads");
	return 0;
}

static int compare_text_mode(char **dirs, const char *schemes, struct cs_opts *co, int threads)
{
	const char *da = dirs[0], *db = schemes ? NULL : dirs[1], *text = co->text;
	int ntok = co->ntok, hc;
	if ((hc = cli_hf_engine_refuse("compare", da)) >= 0 ||
	    (db && (hc = cli_hf_engine_refuse("compare", db)) >= 0) ||
	    (hc = cli_hub_args("compare", &da, NULL)) >= 0 ||
	    (db && (hc = cli_hub_args("compare", &db, NULL)) >= 0))
		return hc;
	if (schemes) {
		co->src = da;
		co->laguna = cs_laguna(da);
		if (cs_parse(schemes, co) && co->laguna)
			return cli_fail(2, "compare", "--schemes: %s is a Laguna 08-01 checkpoint, so the "
			                "rows are the Laguna fix's --rule-scheme choices: expected all or a "
			                "comma list of nvfp4, nvfp4a16, fp8-dynamic; got '%s'", da, schemes);
		if (!co->ns)
			return cli_fail(2, "compare", "--schemes: expected all or a comma list of nvfp4a16, "
			                "nvfp4, fp8-dynamic, w8a16, w4a16; got '%s'", schemes);
	}
	struct rq_err err = {0};
	struct lg_model *a = NULL, *b = NULL;
	struct tok *tk = NULL;
	struct rq_pool *pool = NULL;
	int *tok = NULL, n = 0, rc = 1;
	float *ref = NULL;
	/* the tokenizer first: one it cannot take is refused before any shard is opened */
	if (tok_load(da, &tk, &err) || ct_window(text, tk, ntok, &tok, &n, &err)) {
		cli_fail(1, "compare", "%s", err.msg);
		goto out;
	}
	if (open_models(da, db, threads, &a, &b, &pool))
		goto out;
	if (schemes) {
		int e = cs_check(co, tk, &err);
		if (e) {
			rc = cli_fail(e == -EINVAL ? 2 : 1, "compare", "%s", err.msg);
			goto out;
		}
		if (cs_run(co, a, pool, tok, n, &err)) {
			cli_fail(1, "compare", "%s", err.msg);
			goto out;
		}
		rc = 0;
		goto out;
	}
	struct ct_result r;
	if (ct_reference(a, pool, tok, n, &ref, &err) || ct_score(b, pool, ref, tok, n, "B", co->fast, &r, &err)) {
		cli_fail(1, "compare", "%s", err.msg);
		goto out;
	}
	printf("A = %s\nB = %s\ntext = %s, %d tokens (%d predicted), %d threads\n", da, db, text, n,
	       r.positions, rq_pool_size(pool));
	printf("ppl A %.4f B %.4f\n", r.ppl_a, r.ppl_b);
	printf("KL(A||B) mean %.3e p99 %.3e max %.3e nats  top-1 %.2f%%\n", r.kl_mean, r.kl_p99,
	       r.kl_max, 100 * r.top1);
	rc = 0;
out:
	free(ref);
	free(tok);
	rq_pool_destroy(pool);
	tok_free(tk);
	lg_model_close(a);
	lg_model_close(b);
	return rc;
}

int cmd_compare(int argc, char **argv)
{
	static const struct option opts[] = {
		{"prompts", required_argument, 0, 'p'}, {"threads", required_argument, 0, 't'},
		{"text", required_argument, 0, 'x'}, {"tokens", required_argument, 0, 'k'},
		{"schemes", required_argument, 0, 's'}, {"calib", required_argument, 0, 'c'},
		{"calib-text", required_argument, 0, 'C'}, {"calib-tokens", required_argument, 0, 'K'},
		{"observers", required_argument, 0, 'O'}, {"fast", no_argument, 0, 'F'},
		{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	const char *pfile = NULL, *text = NULL, *schemes = NULL;
	int ngen = 32, threads = 0, ntok = 2048, c, ctok_given = 0;
	struct cs_opts co = {.calib_tokens = 512};
	char *end;
	while ((c = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
		switch (c) {
		case 'p': pfile = optarg; break;
		case 'n':
			ngen = (int)strtol(optarg, &end, 10);
			if (*end || end == optarg || ngen < 0 || ngen > 1 << 20)
				return cli_fail(2, "compare", "-n: expected a token count in [0, %d], got '%s'",
				                1 << 20, optarg);
			break;
		case 't':
			threads = (int)strtol(optarg, &end, 10);
			if (*end || end == optarg || threads < 1)
				return cli_fail(2, "compare", "--threads: expected a count >= 1, got '%s'", optarg);
			break;
		case 'x': text = optarg; break;
		case 'F': co.fast = 1; break;
		case 's': schemes = optarg; break;
		case 'O':
			if (cs_parse_observers(optarg, &co))
				return cli_fail(2, "compare", "--observers: expected all or a comma list of "
				                "minmax, mse, expanded-mse, each once; got '%s'", optarg);
			break;
		case 'c': co.calib = optarg; break;
		case 'C': co.calib_text = optarg; break;
		case 'K':
			co.calib_tokens = (int)strtol(optarg, &end, 10);
			if (*end || end == optarg || co.calib_tokens < 2 || co.calib_tokens > 1 << 20)
				return cli_fail(2, "compare", "--calib-tokens: expected a count in [2, %d], got "
				                "'%s'", 1 << 20, optarg);
			ctok_given = 1;
			break;
		case 'k':
			ntok = (int)strtol(optarg, &end, 10);
			if (*end || end == optarg || ntok < 2 || ntok > 1 << 20)
				return cli_fail(2, "compare", "--tokens: expected a count in [2, %d], got '%s'",
				                1 << 20, optarg);
			break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (schemes && !text)
		return cli_fail(2, "compare", "--schemes needs --text FILE (the text to measure on)");
	if (!schemes && co.nobs)
		return cli_fail(2, "compare", "--observers is for --schemes (one SRC mounted per scheme "
		                "and observer); two checkpoints are compared as they are");
	if (!schemes && (co.calib || co.calib_text || ctok_given))
		return cli_fail(2, "compare", "--calib, --calib-text and --calib-tokens are for --schemes "
		                "(the nvfp4 row); two checkpoints are compared as they are");
	if (schemes || text) {
		if (pfile)
			return cli_fail(2, "compare", "--prompts and --text are two different modes: pick one");
		if (argc - optind != (schemes ? 1 : 2)) {
			usage(stderr);
			return 2;
		}
		co.text = text;
		co.ntok = ntok;
		return compare_text_mode(argv + optind, schemes, &co, threads);
	}
	if (argc - optind != 2) {
		usage(stderr);
		return 2;
	}
	const char *da = argv[optind], *db = argv[optind + 1];
	int hc;
	if ((hc = cli_hf_engine_refuse("compare", da)) >= 0 ||
	    (hc = cli_hf_engine_refuse("compare", db)) >= 0 ||
	    (hc = cli_hub_args("compare", &da, NULL)) >= 0 ||    /* ORG/NAME[@REV] ids */
	    (hc = cli_hub_args("compare", &db, NULL)) >= 0)
		return hc;
	struct rq_err err = {0};
	struct lg_model *a = NULL, *b = NULL;
	struct tok *tk = NULL;
	struct rq_pool *pool = NULL;
	struct stats tot = {0};
	struct prompt *pr = NULL;
	size_t nlines = 0;
	int rc = 1;
	/* the tokenizer and the prompts first: refused before any shard is opened */
	if (tok_load(da, &tk, &err)) {
		cli_fail(1, "compare", "%s", err.msg);
		goto out;
	}
	if (pfile && (rc = read_prompts(pfile, tk, ntok, &pr, &nlines, &err)) != 0) {
		rc = cli_fail(1, "compare", "%s", err.msg);
		goto out;
	}
	rc = 1;
	if (open_models(da, db, threads, &a, &b, &pool))
		goto out;
	size_t np = pfile ? nlines : sizeof default_prompts / sizeof default_prompts[0];
	printf("A = %s\nB = %s\n%zu prompts, %d greedy tokens of A each, %d threads\n", da, db, np, ngen,
	       rq_pool_size(pool));
	for (size_t i = 0; i < np; i++) {
		struct prompt d = {0};
		if (!pfile) {
			const char *text = default_prompts[i];
			struct tok_ids ids = {0};
			if (tok_encode(tk, text, strlen(text), TOK_ADD_SPECIAL, &ids) || !ids.n ||
			    !(d.tok = malloc(sizeof(int) * ids.n))) {
				tok_ids_free(&ids);
				cli_fail(1, "compare", "could not tokenize prompt %zu", i + 1);
				goto out;
			}
			for (size_t j = 0; j < ids.n; j++)
				d.tok[j] = ids.v[j];
			d.n = (int)ids.n;
			tok_ids_free(&ids);
		}
		const struct prompt *p = pfile ? &pr[i] : &d;
		int r = compare_one(a, b, pool, p->tok, p->n, ngen, co.fast, &tot, (int)i + 1, &err);
		free(d.tok);
		if (r) {
			cli_fail(1, "compare", "prompt %zu: %s", i + 1, err.msg);
			goto out;
		}
		fflush(stdout);
	}
	report("overall", &tot);
	rc = 0;
out:
	for (size_t i = 0; i < nlines; i++)
		free(pr[i].tok);
	free(pr);
	free(tot.kl);
	rq_pool_destroy(pool);
	tok_free(tk);
	lg_model_close(a);
	lg_model_close(b);
	return rc;
}
