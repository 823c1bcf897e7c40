/* test_golden.c — the CPU engine on every family against transformers.
 *
 * usage: test_golden REQUANTFS GOLDEN_DIR TINY_DIR SMOLLM2_DIR [MODEL...]
 *
 * Golden data (tools/golden/gen_real_golden.py, transformers in float32):
 * GOLDEN_DIR/<model>/<variant>.safetensors with, per prompt i,
 *   p<i>.ids I32 [n]     the prompt's token ids
 *   p<i>.pos I32 [k]     positions whose logits are stored
 *   p<i>.logits F32 [k, vocab]
 *   p<i>.greedy I32 [32] transformers' greedy continuation of the prompt
 * and for smollm2 ppl.ids I32 [N] with __metadata__ {"ppl": "<x>"}.
 * model: smollm2 (SMOLLM2_DIR, made by tools/setup-model) or tiny-<family>
 * (TINY_DIR/<family>, committed); variant: bf16 (the directory itself) or a
 * scheme, checked on `requantfs export DIR OUT --scheme S` (golden made from
 * the same export, dequantized by compressed-tensors).
 *
 * Per variant: max|Δlogit| <= 1e-3 · max|logit| over the stored positions
 * of each prompt, the same 32 greedy tokens, and (smollm2) perplexity within
 * 0.5 % of transformers'. A model whose bf16 golden file or directory is
 * missing FAILS with the reason (never a skip); quantized variants are
 * checked where their golden file exists. MODEL... restricts the models.
 * RQ_GOLDEN_DIR, RQ_TINY_DIR, RQ_SMOLLM2_DIR override the three directories. */
#include "engine/model/sampler.h"
#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "base/err.h"
#include "base/pool.h"
#include "st/st.h"
#include "tests/tap.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TOL 1e-3      /* max|Δlogit| <= TOL · max|logit| */
#define PPL_TOL 0.005 /* relative */
#define N_GREEDY 32

static const char *const MODELS[] = {"smollm2", "tiny-llama", "tiny-mistral", "tiny-qwen2",
                                     "tiny-qwen3", "tiny-mixtral", "tiny-qwen2_moe",
                                     "tiny-qwen3_moe"};
static const char *const VARIANTS[] = {"bf16", "nvfp4a16", "fp8-dynamic", "w8a16", "w4a16"};

static char tmpdir[] = "/tmp/rq-test-golden-XXXXXX";

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int exists(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0;
}

/* One golden file, read whole. */
struct golden {
	uint8_t *buf;
	size_t len;
	struct st_header *h;
};

static int golden_open(const char *path, struct golden *g)
{
	memset(g, 0, sizeof *g);
	FILE *f = fopen(path, "rb");
	if (!f)
		return -errno;
	fseek(f, 0, SEEK_END);
	g->len = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	g->buf = malloc(g->len ? g->len : 1);
	int rc = g->buf && fread(g->buf, 1, g->len, f) == g->len ? 0 : -EIO;
	fclose(f);
	struct rq_err err = {0};
	if (!rc)
		rc = st_parse_mem(g->buf, g->len, g->len, path, &g->h, &err);
	return rc;
}

static void golden_close(struct golden *g)
{
	st_header_free(g->h);
	free(g->buf);
}

/* Tensor name of dtype dt: its data and element count, NULL when absent. */
static const void *gt(const struct golden *g, const char *name, enum st_dtype dt, size_t *n,
                      uint64_t *d1)
{
	long i = st_find(g->h, name);
	if (i < 0 || g->h->t[i].dtype != dt)
		return NULL;
	*n = st_numel(&g->h->t[i]);
	if (d1)
		*d1 = g->h->t[i].ndim > 1 ? g->h->t[i].shape[1] : 0;
	return g->buf + g->h->data_start + g->h->t[i].begin;
}

/* One prompt: logits at the stored positions, greedy continuation. */
static void check_prompt(const struct lg_model *m, struct rq_pool *pool, const struct golden *g,
                         int pi, const char *tag)
{
	char nm[64];
	size_t n = 0, k = 0, nl = 0, ng = 0;
	uint64_t V = 0;
	snprintf(nm, sizeof nm, "p%d.ids", pi);
	const int32_t *ids = gt(g, nm, ST_I32, &n, NULL);
	snprintf(nm, sizeof nm, "p%d.pos", pi);
	const int32_t *pos = gt(g, nm, ST_I32, &k, NULL);
	snprintf(nm, sizeof nm, "p%d.logits", pi);
	const float *want = gt(g, nm, ST_F32, &nl, &V);
	snprintf(nm, sizeof nm, "p%d.greedy", pi);
	const int32_t *greedy = gt(g, nm, ST_I32, &ng, NULL);
	int vocab = m->cfg.vocab;
	if (!ids || !pos || !want || !greedy || nl != k * V || V != (uint64_t)vocab || !n) {
		TAP_OK(0, "%s: prompt %d: golden tensors p%d.ids/pos/logits/greedy missing or of the wrong "
		       "shape (vocab %d)", tag, pi, pi, vocab);
		return;
	}
	struct lg_state *s = NULL;
	struct rq_err err = {0};
	float *lg = malloc(sizeof(float) * n * vocab);
	int *tok = malloc(sizeof(int) * n);
	if (!lg || !tok || lg_state_create(m, (int)n + N_GREEDY + 1, 64, pool, &s, &err)) {
		TAP_OK(0, "%s: prompt %d: state: %s", tag, pi, err.msg);
		free(lg);
		free(tok);
		return;
	}
	for (size_t i = 0; i < n; i++)
		tok[i] = ids[i];
	int rc = lg_forward(s, tok, (int)n, lg, (int)n, &err);
	double worst = 0, scale = 0;
	int bad_pos = -1;
	for (size_t j = 0; !rc && j < k; j++) {
		if (pos[j] < 0 || (size_t)pos[j] >= n) {
			bad_pos = pos[j];
			break;
		}
		const float *a = lg + (size_t)pos[j] * vocab, *b = want + j * V;
		for (int v = 0; v < vocab; v++) {
			worst = fmax(worst, fabs((double)a[v] - b[v]));
			scale = fmax(scale, fabs((double)b[v]));
		}
	}
	TAP_OK(!rc && bad_pos < 0 && worst <= TOL * scale,
	       "%s: prompt %d (%zu tokens, %zu positions): max|dlogit| %.3g <= %.0e x max|logit| %.3g%s%s",
	       tag, pi, n, k, worst, TOL, scale, rc ? ": " : "", rc ? err.msg : "");
	/* greedy: argmax after the prompt, then one token at a time */
	int got[N_GREEDY], same = !rc, first_diff = -1;
	float *last = malloc(sizeof(float) * vocab);
	if (last && !rc)
		memcpy(last, lg + (n - 1) * vocab, sizeof(float) * vocab);
	for (int t = 0; same && last && t < N_GREEDY && (size_t)t < ng; t++) {
		got[t] = lg_argmax(last, vocab);
		if (got[t] != greedy[t]) {
			same = 0;
			first_diff = t;
			break;
		}
		if (t + 1 < N_GREEDY && lg_forward(s, &got[t], 1, last, 1, &err))
			same = 0;
	}
	TAP_OK(same && ng == N_GREEDY, "%s: prompt %d: %d greedy tokens identical to transformers'%s",
	       tag, pi, N_GREEDY, first_diff < 0 ? "" : " (first difference below)");
	if (first_diff >= 0) {
		size_t nm_ = 0;
		snprintf(nm, sizeof nm, "p%d.greedy_margin", pi);
		const float *margin = gt(g, nm, ST_F32, &nm_, NULL);
		printf("#   token %d: engine %d, transformers %d (transformers' top-2 margin there %g)\n",
		       first_diff, got[first_diff], greedy[first_diff],
		       margin && (size_t)first_diff < nm_ ? margin[first_diff] : NAN);
	}
	free(last);
	lg_state_free(s);
	free(lg);
	free(tok);
}

/* Perplexity over ppl.ids: exp(mean NLL of ids[i+1] after ids[..i]). */
static void check_ppl(const struct lg_model *m, struct rq_pool *pool, const struct golden *g,
                      const char *tag)
{
	size_t N = 0;
	const int32_t *ids = gt(g, "ppl.ids", ST_I32, &N, NULL);
	cJSON *meta = g->h->metadata ? cJSON_Parse(g->h->metadata) : NULL;
	const cJSON *pj = cJSON_GetObjectItemCaseSensitive(meta, "ppl");
	double want = cJSON_IsString(pj) ? atof(pj->valuestring) : NAN;
	cJSON_Delete(meta);
	if (!ids || N < 2 || !(want > 0)) {
		TAP_OK(0, "%s: golden has no ppl.ids / __metadata__ ppl", tag);
		return;
	}
	int vocab = m->cfg.vocab, chunk = 64;
	struct lg_state *s = NULL;
	struct rq_err err = {0};
	float *lg = malloc(sizeof(float) * chunk * vocab);
	int *tok = malloc(sizeof(int) * N);
	if (!lg || !tok || lg_state_create(m, (int)N, chunk, pool, &s, &err)) {
		TAP_OK(0, "%s: ppl state: %s", tag, err.msg);
		free(lg);
		free(tok);
		return;
	}
	for (size_t i = 0; i < N; i++)
		tok[i] = ids[i];
	double nll = 0;
	int rc = 0;
	double t0 = now();
	for (size_t b = 0; b < N && !rc; b += chunk) {
		int T = N - b < (size_t)chunk ? (int)(N - b) : chunk;
		if ((rc = lg_forward(s, tok + b, T, lg, T, &err)))
			break;
		for (int t = 0; t < T && b + t + 1 < N; t++) {
			const float *l = lg + (size_t)t * vocab;
			double mx = l[lg_argmax(l, vocab)], z = 0;
			for (int v = 0; v < vocab; v++)
				z += exp((double)l[v] - mx);
			nll += mx + log(z) - l[tok[b + t + 1]];
		}
	}
	double ppl = exp(nll / (double)(N - 1));
	TAP_OK(!rc && fabs(ppl - want) <= PPL_TOL * want,
	       "%s: perplexity on %zu tokens %.4f vs transformers %.4f (%.3f %%, bound %.1f %%) in %.1f s%s%s",
	       tag, N, ppl, want, 100 * fabs(ppl - want) / want, 100 * PPL_TOL, now() - t0,
	       rc ? ": " : "", rc ? err.msg : "");
	lg_state_free(s);
	free(lg);
	free(tok);
}

/* The directory a variant runs on: the model itself (bf16) or its export,
 * made with the arguments the golden file was made with (__metadata__
 * export_args: a JSON list of the arguments after DST, "--scheme S" first;
 * absent: --scheme S alone). An export_args whose scheme is not the
 * variant's fails. */
static int variant_dir(const char *rq, const char *src, const char *model, const char *variant,
                       const struct golden *g, char *out, size_t len, char *log, size_t loglen)
{
	if (!strcmp(variant, "bf16")) {
		snprintf(out, len, "%s", src);
		return 0;
	}
	snprintf(out, len, "%s/%s-%s", tmpdir, model, variant);
	char cmd[8192], logf[2100], args[4096] = "";
	cJSON *meta = g->h->metadata ? cJSON_Parse(g->h->metadata) : NULL;
	const cJSON *ea = cJSON_GetObjectItemCaseSensitive(meta, "export_args");
	cJSON *list = cJSON_IsString(ea) ? cJSON_Parse(ea->valuestring) : NULL, *e;
	int n = 0, scheme_ok = !list, prev_scheme = 0;
	cJSON_ArrayForEach(e, list) {
		if (!cJSON_IsString(e) || strchr(e->valuestring, '\'')) {
			scheme_ok = 0;
			break;
		}
		if (prev_scheme)
			scheme_ok = !strcmp(e->valuestring, variant);
		prev_scheme = !strcmp(e->valuestring, "--scheme");
		size_t o = strlen(args);
		snprintf(args + o, sizeof args - o, " '%s'", e->valuestring);
		n++;
	}
	cJSON_Delete(list);
	cJSON_Delete(meta);
	if (!scheme_ok) {
		snprintf(log, loglen, "the golden file's export_args do not say --scheme %s", variant);
		return -EINVAL;
	}
	if (!n)
		snprintf(args, sizeof args, " --scheme %s", variant);
	snprintf(logf, sizeof logf, "%s.log", out);
	snprintf(cmd, sizeof cmd, "'%s' export '%s' '%s'%s > '%s' 2>&1", rq, src, out, args, logf);
	int rc = system(cmd);
	log[0] = 0;
	FILE *f = fopen(logf, "r");
	if (f) {
		size_t got = fread(log, 1, loglen - 1, f);
		log[got] = 0;
		fclose(f);
	}
	return rc == -1 || WEXITSTATUS(rc) ? -EIO : 0;
}

static void check_model(const char *rq, const char *golden_dir, const char *dir, const char *model,
                        struct rq_pool *pool)
{
	char gpath[2048], vdir[2048], log[2048];
	snprintf(gpath, sizeof gpath, "%s/%s/bf16.safetensors", golden_dir, model);
	if (!exists(gpath)) {
		TAP_OK(0, "%s: golden %s is missing (make it with tools/golden/gen_real_golden.py)", model, gpath);
		return;
	}
	if (!exists(dir)) {
		TAP_OK(0, "%s: model directory %s is missing (%s)", model, dir,
		       !strcmp(model, "smollm2") ? "run tools/setup-model" : "it is committed under tests/data/tiny");
		return;
	}
	for (size_t v = 0; v < sizeof VARIANTS / sizeof VARIANTS[0]; v++) {
		snprintf(gpath, sizeof gpath, "%s/%s/%s.safetensors", golden_dir, model, VARIANTS[v]);
		if (!exists(gpath))
			continue;
		char tag[128];
		snprintf(tag, sizeof tag, "%s %s", model, VARIANTS[v]);
		struct golden g;
		if (golden_open(gpath, &g)) {
			TAP_OK(0, "%s: cannot read %s", tag, gpath);
			continue;
		}
		double t0 = now();
		if (variant_dir(rq, dir, model, VARIANTS[v], &g, vdir, sizeof vdir, log, sizeof log)) {
			TAP_OK(0, "%s: requantfs export --scheme %s failed: %s", tag, VARIANTS[v], log);
			golden_close(&g);
			continue;
		}
		struct lg_model *m = NULL;
		struct rq_err err = {0};
		int rc = lg_model_open(vdir, &m, &err);
		TAP_OK(!rc, "%s: engine opens %s (%s; %d BF16/F16/F32, %d NVFP4, %d FP8, %d INT Linears)",
		       tag, vdir, rc ? err.msg : m->cfg.arch->model_type, rc ? 0 : m->n_bf16,
		       rc ? 0 : m->n_nvfp4, rc ? 0 : m->n_fp8, rc ? 0 : m->n_int);
		for (int p = 0; !rc; p++) {
			char nm[32];
			snprintf(nm, sizeof nm, "p%d.ids", p);
			if (st_find(g.h, nm) < 0) {
				if (p == 0)
					TAP_OK(0, "%s: golden %s holds no prompt p0", tag, gpath);
				break;
			}
			check_prompt(m, pool, &g, p, tag);
		}
		if (!rc && st_find(g.h, "ppl.ids") >= 0)
			check_ppl(m, pool, &g, tag);
		else if (!rc && !strcmp(model, "smollm2"))
			TAP_OK(0, "%s: golden %s has no ppl.ids", tag, gpath);
		printf("# %s: %.1f s\n", tag, now() - t0);
		fflush(stdout);
		lg_model_close(m);
		golden_close(&g);
	}
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: test_golden REQUANTFS GOLDEN_DIR TINY_DIR SMOLLM2_DIR [MODEL...]\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	/* the goldens (tools/golden/gen_real_golden.py) are transformers on the
	 * dequantized weights with float32 inputs: the weight path alone, so the
	 * engine runs without fp8-dynamic's per-token input quantization here
	 * (that path: test_actq, test_actq_forward.py) */
	setenv("RQ_ENGINE_ACT_QUANT", "0", 1);
	if (!mkdtemp(tmpdir)) {
		TAP_OK(0, "mkdtemp: %s", strerror(errno));
		printf("1..%d\n", tap_n);
		return 1;
	}
	const char *env;
	if ((env = getenv("RQ_GOLDEN_DIR")) && *env)
		argv[2] = (char *)env;
	if ((env = getenv("RQ_TINY_DIR")) && *env)
		argv[3] = (char *)env;
	if ((env = getenv("RQ_SMOLLM2_DIR")) && *env)
		argv[4] = (char *)env;
	struct rq_pool *pool = NULL;
	int nt = rq_cpu_count();
	rq_pool_create(nt > 8 ? 8 : nt, &pool);
	for (size_t i = 0; i < sizeof MODELS / sizeof MODELS[0]; i++) {
		int want = argc == 5;
		for (int a = 5; a < argc; a++)
			want |= !strcmp(argv[a], MODELS[i]);
		if (!want)
			continue;
		char dir[2048];
		if (!strcmp(MODELS[i], "smollm2"))
			snprintf(dir, sizeof dir, "%s", argv[4]);
		else
			snprintf(dir, sizeof dir, "%s/%s", argv[3], MODELS[i] + 5);
		check_model(argv[1], argv[2], dir, MODELS[i], pool);
	}
	rq_pool_destroy(pool);
	char cmd[256];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	if (system(cmd))
		printf("# could not remove %s\n", tmpdir);
	printf("1..%d\n", tap_n);
	return tap_failed ? 1 : 0;
}
