/* test_forward.c — the CPU engine against transformers' Laguna.
 *
 * usage: test_forward REQUANTFS GOLDEN_JSON [MODEL_DIR]
 *
 * Rebuilds the tiny checkpoints named in tests/data/engine_golden.json with
 * `requantfs mkckpt` (deterministic) into a temporary directory, applies the
 * file's config overrides (a short sliding window), and checks:
 *   - logits of every prompt within tolerance of transformers (float32):
 *     last position over the whole vocabulary, top-5 at every position;
 *   - 16 greedy tokens identical;
 *   - the prompt as one batch == token by token == odd batch splits ==
 *     two threads, bit for bit (the KV ring wraps when the window is short);
 *   - NVFP4 rows dequantized like quant's rq_dequant_row, bit for bit;
 *   - RoPE inverse frequencies and attention factor like transformers;
 *   - config refusals; the sampler's determinism.
 * MODEL_DIR (development): use that directory for every model instead. */
#include "engine/model/forward.h"
#include "engine/model/model.h"
#include "engine/model/ops.h"
#include "engine/model/sampler.h"
#include "base/err.h"
#include "base/pool.h"
#include "quant/quant.h"
#include "tests/tap.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOL 1e-3   /* max|Δlogit| <= TOL · max|logit| */

static char tmpdir[] = "/tmp/rq-test-forward-XXXXXX";

static int run(const char *cmd)
{
	int rc = system(cmd);
	return rc == -1 ? -1 : WEXITSTATUS(rc);
}

/* A model directory for a golden entry: mkckpt's output (form "src"), or
 * `requantfs export` of it with mkckpt's --calib-out twin as CALIB (form
 * "export"); config overrides go to a sibling directory whose other files
 * are symlinks. */
static int make_model_dir(const char *rq, const cJSON *spec, const char *dev_dir, char *out, size_t len)
{
	char base[1024], cmd[8192];
	if (dev_dir) {
		snprintf(base, sizeof base, "%s", dev_dir);
	} else {
		const cJSON *args = cJSON_GetObjectItem(spec, "mkckpt"), *a;
		const cJSON *fj = cJSON_GetObjectItem(spec, "form");
		const char *form = cJSON_IsString(fj) ? fj->valuestring : "src";
		int exp = !strcmp(form, "export");
		char argstr[512] = "", tag[128] = "ckpt";
		cJSON_ArrayForEach(a, args) {
			strncat(argstr, " ", sizeof argstr - strlen(argstr) - 1);
			strncat(argstr, a->valuestring, sizeof argstr - strlen(argstr) - 1);
			strncat(tag, a->valuestring, sizeof tag - strlen(tag) - 1);
		}
		strncat(tag, form, sizeof tag - strlen(tag) - 1);
		char src[600];
		snprintf(src, sizeof src, "%s/%s", tmpdir, tag);
		snprintf(base, sizeof base, "%s%s", src, exp ? ".export" : "");
		if (access(src, F_OK)) {
			snprintf(cmd, sizeof cmd, "'%s' mkckpt '%s'%s%s%s >/dev/null", rq, src,
			         exp ? " --calib-out '" : "", exp ? src : "", exp ? ".twin'" : "");
			strncat(cmd, argstr, sizeof cmd - strlen(cmd) - 1);
			if (run(cmd)) {
				printf("# failed: %s\n", cmd);
				return -1;
			}
			snprintf(cmd, sizeof cmd, "'%s' export '%s' '%s' --calib '%s.twin' 2>/dev/null >/dev/null",
			         rq, src, base, src);
			if (exp && run(cmd)) {
				printf("# failed: %s\n", cmd);
				return -1;
			}
		}
	}
	const cJSON *ov = cJSON_GetObjectItem(spec, "override");
	if (!ov || !cJSON_GetArraySize(ov)) {
		snprintf(out, len, "%s", base);
		return 0;
	}
	snprintf(out, len, "%s/%s", tmpdir, cJSON_GetObjectItem(spec, "name")->valuestring);
	snprintf(cmd, sizeof cmd, "mkdir -p '%s' && for f in '%s'/*; do ln -sf \"$f\" '%s'/; done && rm '%s'/config.json",
	         out, base, out, out);
	if (run(cmd))
		return -1;
	char path[1100];
	snprintf(path, sizeof path, "%s/config.json", base);
	char *text = tap_slurp(path, NULL);
	cJSON *cfg = text ? cJSON_Parse(text) : NULL;
	free(text);
	if (!cfg)
		return -1;
	const cJSON *o;
	cJSON_ArrayForEach(o, ov)
		cJSON_ReplaceItemInObject(cfg, o->string, cJSON_Duplicate(o, 1));
	char *js = cJSON_Print(cfg);
	snprintf(path, sizeof path, "%s/config.json", out);
	FILE *f = fopen(path, "w");
	if (f) {
		fputs(js, f);
		fclose(f);
	}
	free(js);
	cJSON_Delete(cfg);
	return f ? 0 : -1;
}

static int *ids_of(const cJSON *arr, int *n)
{
	*n = cJSON_GetArraySize(arr);
	int *v = malloc((*n + 1) * sizeof *v), i = 0;
	const cJSON *e;
	cJSON_ArrayForEach(e, arr)
		v[i++] = (int)e->valuedouble;
	return v;
}

/* Feeds prompt[0..n) in batches of `batch` tokens; logits of every position. */
static int feed(const struct lg_model *m, struct rq_pool *pool, int max_batch, const int *p, int n,
                int batch, float *logits)
{
	struct lg_state *s;
	struct rq_err err = {0};
	if (lg_state_create(m, n + 32, max_batch, pool, &s, &err)) {
		printf("# %s\n", err.msg);
		return -1;
	}
	int rc = 0;
	for (int i = 0; i < n && !rc; i += batch) {
		int k = n - i < batch ? n - i : batch;
		rc = lg_forward(s, p + i, k, logits + (size_t)i * m->cfg.vocab, k, &err);
	}
	if (rc)
		printf("# lg_forward: %s\n", err.msg);
	lg_state_free(s);
	return rc;
}

static void check_case(const struct lg_model *m, struct rq_pool *pool2, const cJSON *c, const char *name)
{
	int V = m->cfg.vocab, n, ng;
	int *p = ids_of(cJSON_GetObjectItem(c, "prompt"), &n);
	int *greedy = ids_of(cJSON_GetObjectItem(c, "greedy"), &ng);
	float *lb = malloc(sizeof(float) * V * n), *lt = malloc(sizeof(float) * V * n);
	struct rq_err err = {0};

	/* one batch, one thread: against transformers */
	int ok = !feed(m, NULL, 64, p, n, n, lb);
	TAP_OK(ok, "%s n=%d: prompt runs as one batch", name, n);
	if (!ok)
		goto out;
	const cJSON *last = cJSON_GetObjectItem(c, "last_logits"), *e;
	double maxref = 0, maxd = 0;
	int i = 0;
	cJSON_ArrayForEach(e, last) {
		double r = e->valuedouble, d = fabs(lb[(size_t)(n - 1) * V + i] - r);
		maxref = fmax(maxref, fabs(r));
		maxd = fmax(maxd, d);
		i++;
	}
	TAP_OK(i == V && maxd <= TOL * maxref, "%s n=%d: last-position logits (%d) max|d| %.3g <= %.0e x %.3g",
	       name, n, i, maxd, TOL, maxref);
	const cJSON *tid = cJSON_GetObjectItem(c, "top5_ids"), *tv = cJSON_GetObjectItem(c, "top5_vals");
	double worst = 0;
	int argmax_same = 0;
	for (int t = 0; t < n; t++) {
		const cJSON *ri = cJSON_GetArrayItem(tid, t), *rv = cJSON_GetArrayItem(tv, t);
		double mref = fabs(cJSON_GetArrayItem(rv, 0)->valuedouble);
		for (int j = 0; j < 5; j++) {
			int id = (int)cJSON_GetArrayItem(ri, j)->valuedouble;
			double d = fabs(lb[(size_t)t * V + id] - cJSON_GetArrayItem(rv, j)->valuedouble);
			worst = fmax(worst, d / fmax(mref, 1e-6));
		}
		argmax_same += lg_argmax(lb + (size_t)t * V, V) == (int)cJSON_GetArrayItem(ri, 0)->valuedouble;
	}
	TAP_OK(worst <= TOL, "%s n=%d: top-5 logits at all positions, worst relative %.3g", name, n, worst);
	TAP_OK(argmax_same == n, "%s n=%d: argmax agrees at %d/%d positions", name, n, argmax_same, n);

	/* greedy continuation, decoding one token at a time after the prompt */
	struct lg_state *s;
	int got[64], same = 1;
	float *lg = malloc(sizeof(float) * V);
	if (!lg_state_create(m, n + ng + 1, 64, NULL, &s, &err)) {
		int rc = lg_forward(s, p, n, lg, 1, &err);
		for (int k = 0; k < ng && !rc; k++) {
			got[k] = lg_argmax(lg, V);
			same &= got[k] == greedy[k];
			rc = lg_forward(s, &got[k], 1, lg, 1, &err);
		}
		same &= !rc;
		lg_state_free(s);
	} else {
		same = 0;
	}
	free(lg);
	TAP_OK(same, "%s n=%d: %d greedy tokens identical to transformers", name, n, ng);

	/* batching, ring and threads do not change a bit */
	ok = !feed(m, NULL, 1, p, n, 1, lt) && !memcmp(lb, lt, sizeof(float) * V * n);
	TAP_OK(ok, "%s n=%d: token by token (ring of the bare window) == one batch, bit for bit", name, n);
	ok = !feed(m, NULL, 3, p, n, 5, lt) && !memcmp(lb, lt, sizeof(float) * V * n);
	TAP_OK(ok, "%s n=%d: batches of 3 fed 5 at a time == one batch, bit for bit", name, n);
	ok = !feed(m, pool2, 64, p, n, n, lt) && !memcmp(lb, lt, sizeof(float) * V * n);
	TAP_OK(ok, "%s n=%d: two threads == one thread, bit for bit", name, n);
out:
	free(lb);
	free(lt);
	free(p);
	free(greedy);
}

static void check_rope(const struct lg_config *cfg, const cJSON *rope, const char *name)
{
	static const char *const tn[2] = {"full_attention", "sliding_attention"};
	for (int t = 0; t < 2; t++) {
		const cJSON *r = cJSON_GetObjectItem(rope, tn[t]);
		if (!r)
			continue;
		const cJSON *inv = cJSON_GetObjectItem(r, "inv_freq"), *e;
		double sc = cJSON_GetObjectItem(r, "attention_scaling")->valuedouble, worst = 0;
		int i = 0;
		cJSON_ArrayForEach(e, inv) {
			if (i < LG_ROPE_MAX)
				worst = fmax(worst, fabs(cfg->rope[t].inv_freq[i] - e->valuedouble) /
				                        fabs(e->valuedouble));
			i++;
		}
		TAP_OK(i == cfg->rope[t].rot_dim / 2 && worst <= 2.5e-7 &&
		       fabsf(cfg->rope[t].attn_scale - (float)sc) <= 1e-7f * (float)sc,
		       "%s: %s RoPE (%s) %d frequencies within 2 ulp (worst %.2g), attention factor %.7g == %.7g",
		       name, tn[t], cfg->rope[t].type, i, worst, cfg->rope[t].attn_scale, sc);
	}
}

/* NVFP4 rows as the engine reads them == quant's rq_dequant_row. */
static void check_dequant(const struct lg_model *m, const char *name)
{
	for (int i = 0; i < m->cfg.n_layers; i++) {
		const struct lg_layer *L = &m->layers[i];
		if (!L->moe || L->eg[0].kind != LG_W_NVFP4)
			continue;
		const struct lg_linear *W = &L->ed[0];
		float *a = malloc(sizeof(float) * W->cols), *b = malloc(sizeof(float) * W->cols);
		int same = 1;
		for (int r = 0; r < W->rows; r++) {
			lg_linear_row(W, r, a);
			rq_dequant_row(W->packed + (size_t)r * W->cols / 2, W->scales + (size_t)r * W->cols / 16,
			               W->global_scale, W->cols, b);
			same &= !memcmp(a, b, sizeof(float) * W->cols);
		}
		free(a);
		free(b);
		TAP_OK(same, "%s: layer %d expert 0 down_proj: NVFP4 rows == rq_dequant_row bit for bit", name, i);
		return;
	}
}

static void check_refusals(void)
{
	static const struct { const char *extra, *what; int code; } cases[] = {
		{"\"swa_attention_sink_enabled\": true", "attention sinks", -ENOTSUP},
		{"\"moe_router_score_func\": \"sqrtsoftplus\"", "sqrtsoftplus router", -ENOTSUP},
		{"\"hidden_act\": \"gelu\"", "gelu", -ENOTSUP},
		{"\"qkv_bias\": true", "qkv bias", -ENOTSUP},
		{"\"decoder_sparse_step\": 2", "decoder_sparse_step 2", -ENOTSUP},
		{"\"quantization_config\": {\"quant_method\": \"compressed-tensors\", \"transform_config\": {\"config_groups\": {\"u\": {}}}}",
		 "a transform config", -ENOTSUP},
		{"\"rope_parameters\": {\"full_attention\": {\"rope_type\": \"longrope\", \"rope_theta\": 1e4}}",
		 "longrope", -ENOTSUP},
		{"\"gating\": \"sometimes\"", "unknown gating", -ENOTSUP},
		{"\"model_type\": \"gemma\"", "a model type this engine does not run", -ENOTSUP},
		{"\"rms_norm_eps\": 1e-5", "(accepted) a plain config", 0},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char js[1024];
		snprintf(js, sizeof js, "{\"hidden_size\": 64, \"num_hidden_layers\": 2, \"vocab_size\": 100, "
		         "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"intermediate_size\": 32, "
		         "\"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 16, %s}",
		         cases[i].extra);
		struct lg_config c;
		enum lg_attn_type *t = NULL;
		int *h = NULL, *mo = NULL;
		struct rq_err err = {0};
		int rc = lg_config_parse(js, "config.json", &c, &t, &h, &mo, &err);
		TAP_OK(rc == cases[i].code, "config with %s -> %d (%s)", cases[i].what, rc, rc ? err.msg : "ok");
		if (!rc) {
			free(t);
			free(h);
			free(mo);
		}
	}
}

static void check_sampler(void)
{
	float lg[50];
	for (int i = 0; i < 50; i++)
		lg[i] = sinf(i * 1.3f) * 3;
	struct lg_sampler a, b, g;
	int same = 1, in_topk = 1, diff = 0;
	lg_sampler_init(&a, 50, 0.8f, 5, 0.9f, 42);
	lg_sampler_init(&b, 50, 0.8f, 5, 0.9f, 42);
	lg_sampler_init(&g, 50, 0.0f, 0, 1.0f, 1);
	float sorted[50];
	memcpy(sorted, lg, sizeof sorted);
	for (int i = 0; i < 50; i++)
		for (int j = i + 1; j < 50; j++)
			if (sorted[j] > sorted[i]) {
				float t = sorted[i];
				sorted[i] = sorted[j];
				sorted[j] = t;
			}
	int first = -1;
	for (int k = 0; k < 200; k++) {
		int x = lg_sample(&a, lg), y = lg_sample(&b, lg);
		same &= x == y;
		in_topk &= lg[x] >= sorted[4];
		if (first < 0)
			first = x;
		diff |= x != first;
	}
	TAP_OK(same, "sampler: same seed, same 200 tokens");
	TAP_OK(in_topk && diff, "sampler: draws stay inside top-k=5 and vary");
	TAP_OK(lg_sample(&g, lg) == lg_argmax(lg, 50), "sampler: temperature 0 is greedy");
	lg_sampler_free(&a);
	lg_sampler_free(&b);
	lg_sampler_free(&g);
}

/* Runs cmd, captures up to len-1 bytes of stdout; returns the exit status. */
static int capture(const char *cmd, char *out, size_t len)
{
	FILE *p = popen(cmd, "r");
	if (!p)
		return -1;
	size_t n = fread(out, 1, len - 1, p);
	out[n] = 0;
	int st = pclose(p);
	return st == -1 ? -1 : WEXITSTATUS(st);
}

/* The commands on the same checkpoints: reproducible output, compare's
 * numbers on a model against itself and against its requantized export,
 * usage errors. */
static void check_cli(const char *rq)
{
	char src[600], exp[600], cmd[2048], a[8192], b[8192];
	snprintf(src, sizeof src, "%s/ckptsrc", tmpdir);
	snprintf(exp, sizeof exp, "%s/ckptexport.export", tmpdir);
	if (access(src, F_OK) || access(exp, F_OK)) {
		TAP_OK(0, "cli: checkpoints %s and %s exist", src, exp);
		return;
	}
	static const char *const gen[] = {
		"--prompt 'Hello, world' -n 12 --temperature 0",
		"--prompt 'Write a poem' --chat --no-think -n 12 --temperature 0.8 --top-k 5 --seed 3",
	};
	for (int i = 0; i < 2; i++) {
		snprintf(cmd, sizeof cmd, "'%s' generate '%s' %s --threads 2 2>/dev/null", rq, src, gen[i]);
		int r1 = capture(cmd, a, sizeof a), r2 = capture(cmd, b, sizeof b);
		TAP_OK(r1 == 0 && r2 == 0 && strlen(a) > 1 && !strcmp(a, b), "generate %s: exit 0, same text twice",
		       gen[i]);
	}
	snprintf(cmd, sizeof cmd, "'%s' compare '%s' '%s' -n 4 --threads 2", rq, src, src);
	int rc = capture(cmd, a, sizeof a);
	TAP_OK(rc == 0 && strstr(a, "KL mean 0.000e+00") && strstr(a, "top-1 100.00%"),
	       "compare of a model with itself: KL 0, top-1 100%% (exit %d)", rc);
	snprintf(cmd, sizeof cmd, "'%s' compare '%s' '%s' -n 4", rq, src, exp);
	rc = capture(cmd, a, sizeof a);
	const char *ov = strstr(a, "overall");
	double kl = -1, top1 = -1;
	if (ov) {
		const char *k = strstr(ov, "KL mean"), *t = strstr(ov, "top-1");
		kl = k ? atof(k + 7) : -1;
		top1 = t ? atof(t + 5) : -1;
	}
	TAP_OK(rc == 0 && kl > 0 && kl < 1 && top1 > 50,
	       "compare 08-01 form vs its requantized export: 0 < KL mean %.3g < 1, top-1 %.1f%% > 50%%",
	       kl, top1);
	static const struct { const char *args; int code; } bad[] = {
		{"generate DIR", 2}, {"generate DIR --prompt x -n abc", 2}, {"generate DIR --prompt x --top-p 0", 2},
		{"generate DIR --prompt x --device tpu", 2}, {"compare DIR", 2}, {"generate DIR --help", 0},
		{"compare --help", 0}, {"bench engine --help", 0}, {"generate DIR --prompt x --device cuda", 1},
		{"generate /nonexistent --prompt x", 1},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char args[1024];
		const char *d = strstr(bad[i].args, "DIR");
		if (d)
			snprintf(args, sizeof args, "%.*s'%s'%s", (int)(d - bad[i].args), bad[i].args, src, d + 3);
		else
			snprintf(args, sizeof args, "%s", bad[i].args);
		snprintf(cmd, sizeof cmd, "'%s' %s >/dev/null 2>&1", rq, args);
		rc = run(cmd);
		TAP_OK(rc == bad[i].code, "requantfs %s -> exit %d (want %d)", bad[i].args, rc, bad[i].code);
	}
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: test_forward REQUANTFS GOLDEN_JSON [MODEL_DIR]\n");
		return 2;
	}
	/* The references (tools/golden/gen_engine_golden.py, gen_scheme_forward_golden)
	 * run transformers on the dequantized weights with float32 inputs: the
	 * weight path alone. mkckpt's NVFP4 config is W4A4 and fp8-dynamic quantizes
	 * inputs per token, which the engine now computes as vLLM does; that path
	 * has its own tests (test_actq, test_actq_forward.py). */
	setenv("RQ_ENGINE_ACT_QUANT", "0", 1);
	check_refusals();
	check_sampler();
	char *text = tap_slurp(argv[2], NULL);
	cJSON *g = text ? cJSON_Parse(text) : NULL;
	free(text);
	TAP_OK(g != NULL, "golden file %s parses", argv[2]);
	if (!g || !mkdtemp(tmpdir))
		return tap_done();
	const cJSON *rc;
	int nrope = 0;
	cJSON_ArrayForEach(rc, cJSON_GetObjectItem(g, "rope_cases")) {
		char *js = cJSON_PrintUnformatted(cJSON_GetObjectItem(rc, "config"));
		struct lg_config cfg;
		enum lg_attn_type *t = NULL;
		int *h = NULL, *mo = NULL;
		struct rq_err err = {0};
		char name[32];
		snprintf(name, sizeof name, "rope case %d", ++nrope);
		int ok = js && !lg_config_parse(js, name, &cfg, &t, &h, &mo, &err);
		TAP_OK(ok, "%s: config parses (%s)", name, ok ? "ok" : err.msg);
		if (ok)
			check_rope(&cfg, cJSON_GetObjectItem(rc, "rope"), name);
		free(js);
		free(t);
		free(h);
		free(mo);
	}
	struct rq_pool *pool2 = NULL;
	rq_pool_create(2, &pool2);
	const cJSON *spec;
	cJSON_ArrayForEach(spec, cJSON_GetObjectItem(g, "models")) {
		const char *name = cJSON_GetObjectItem(spec, "name")->valuestring;
		char dir[1024];
		struct lg_model *m = NULL;
		struct rq_err err = {0};
		int ok = !make_model_dir(argv[1], spec, argc > 3 ? argv[3] : NULL, dir, sizeof dir) &&
		         !lg_model_open(dir, &m, &err);
		TAP_OK(ok, "%s: model opens (%s)", name, ok ? dir : err.msg);
		if (!ok)
			continue;
		printf("# %s: %d layers, hidden %d, vocab %d, %d NVFP4 + %d BF16 linears\n", name,
		       m->cfg.n_layers, m->cfg.hidden, m->cfg.vocab, m->n_nvfp4, m->n_bf16);
		check_rope(&m->cfg, cJSON_GetObjectItem(spec, "rope"), name);
		check_dequant(m, name);
		const cJSON *c;
		cJSON_ArrayForEach(c, cJSON_GetObjectItem(spec, "cases"))
			check_case(m, pool2, c, name);
		lg_model_close(m);
	}
	rq_pool_destroy(pool2);
	cJSON_Delete(g);
	if (argc <= 3)
		check_cli(argv[1]);
	char cmd[256];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	run(cmd);
	return tap_done();
}
