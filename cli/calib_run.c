/* calib_run.c — `requantfs calib run MODEL (--text FILE | --prompts FILE)
 * [--tokens N] [--all-experts] -o FILE` and `requantfs calib diff A B`.
 *
 * run: the engine (CPU or CUDA, --device) reads MODEL and feeds the
 * calibration tokens with the observer on (engine/model/observe.h); each observed
 * Linear gets
 * input_global_scale = 448·6 / amax (F32 [1], compressed-tensors'
 * convention; --scale-dtype bf16, the default for a BF16 checkpoint, rounds
 * amax and the scale to BF16 as llm-compressor does: lg_obs_scale), written
 * by rq_calib_write_meta in the layout `calib extract` writes, so --calib
 * takes the file as it is. A routed expert that saw no
 * token gets the fallback amax = the largest amax of the same projection
 * over its layer's experts that did (no token of this text would be clipped
 * by it; counted in the summary; llm-compressor leaves such a module's scale
 * uninitialized, torch.empty). An input whose amax is 0 gets 1.0, what
 * compressed-tensors' generate_gparam writes there (lg_obs_scale). The token ids go into __metadata__ ("calib_token_ids":
 * sequences separated by ';', ids by ','). --forward-dtype bf16, the default for
 * a BF16 checkpoint, runs the forward with transformers' BF16 roundings
 * (lg_state_round_bf16), so the observed inputs are the ones the peer's BF16
 * forward computes; f32 keeps the engine's binary32 forward. Both choices go
 * into __metadata__ (calib_scale_dtype, calib_forward_dtype).
 *
 * --device auto|cpu|cuda (generate's convention, engine/model/backend.h): the CUDA
 * engine observes on the device (lgc_observe_*: the CPU observer's slots and
 * rules, maxima reduced on the GPU, one copy back at the end). Decision on
 * --forward-dtype bf16 there: the CUDA engine has no BF16-rounding mode (its
 * products round activations to fp16/BF16 at other points than transformers'
 * eager BF16 forward), so the peer-exact BF16 forward is the CPU's only:
 * `--device cuda --forward-dtype bf16` is refused (exit 2) with what to use
 * instead. --device auto picks the CPU whenever the forward is BF16 — asked
 * (--forward-dtype bf16) or the default for a BF16 model (--forward-dtype auto:
 * exact parity with the peer, the same file on every machine) — and says how
 * to use the GPU; it picks the GPU (when usable) for an F32 forward: a
 * non-BF16 model, or --forward-dtype f32. --device cuda with --forward-dtype
 * auto runs the F32 forward there. The device goes into __metadata__
 * (calib_device). The scales' rounding (--scale-dtype) is the host's, the
 * same on both. The CUDA engine keeps an F32 KV cache here (the CPU's). */
#include "cli/calib_run.h"
#include "cli/cli.h"
#include "cli/cli_hf.h"
#include "cli/compare_text.h"
#include "cli/prompts.h"
#include "base/err.h"
#include "base/file.h"
#include "base/pool.h"
#include "engine/model/backend.h"
#include "engine/model/forward.h"
#include "engine/model/forward_cuda.h"
#include "engine/model/model.h"
#include "engine/model/observe.h"
#include "engine/tok/tokenizer.h"
#include "kernels/ek.h"
#include "offline/calib.h"

#include <errno.h>
#include <float.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* --bench's window: the first sequence, up to 512 tokens (--tokens' default),
 * as one prefill (generate's). A default --text run's pass is that window, so
 * the pass and the prefill it is compared with attend over the same positions:
 * a longer context costs more per token (a 256-token pass over a 64-token
 * prefill read 0.8 where like for like reads 0.9). */
#define BENCH_TOKENS 512

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

struct seqs {
	int **tok;       /* [n] sequences */
	int *len;
	int n, total;
};

static void seqs_free(struct seqs *q)
{
	for (int i = 0; i < q->n; i++)
		free(q->tok[i]);
	free(q->tok);
	free(q->len);
}

static int seqs_add(struct seqs *q, int *tok, int len)
{
	int **nt = realloc(q->tok, (q->n + 1) * sizeof *nt);
	int *nl = nt ? realloc(q->len, (q->n + 1) * sizeof *nl) : NULL;
	if (nt)
		q->tok = nt;
	if (!nl) {
		free(tok);
		return -ENOMEM;
	}
	q->len = nl;
	q->tok[q->n] = tok;
	q->len[q->n++] = len;
	q->total += len;
	return 0;
}

/* --prompts: one prompt a line (empty lines skipped), tokenizer(line) each,
 * until `budget` tokens in all (the last one cut). Reading stops once the
 * budget is covered, and of a line at most 64 bytes per token still wanted
 * is read (cli/prompts.h): a huge line or file costs what the budget
 * needs. A cut line is said on stderr (the CLI's note). */
static int read_prompts(const char *path, const struct tok *tk, int budget, struct seqs *q,
                        struct rq_err *err)
{
	struct prompts *pf = NULL;
	struct prompt pr;
	int rc = prompts_open(path, "--prompts", &pf, err);
	while (!rc && q->total < budget &&
	       (rc = prompts_next(pf, tk, budget - q->total, &pr, err)) == 1) {
		if (pr.cut_at)
			fprintf(stderr, "calib run: note: --prompts %s line %zu is longer than %zu bytes "
			        "(%d bytes a token for the %d tokens still wanted): only its first %zu "
			        "bytes are read\n", path, pr.line,
			        (size_t)PROMPT_BYTES_PER_TOKEN * (size_t)(budget - q->total),
			        PROMPT_BYTES_PER_TOKEN, budget - q->total, pr.cut_at);
		rc = seqs_add(q, pr.tok, pr.n) ? rq_errf(err, -ENOMEM, "out of memory") : 0;
	}
	prompts_close(pf);
	if (rc > 0)
		rc = 0;
	if (!rc && !q->total)
		rc = rq_errf(err, -ENODATA, "--prompts %s holds no prompt (one a line)", path);
	return rc;
}

/* "calib_token_ids":"1,2;3,4" and the other members of __metadata__. */
static char *metadata(const struct seqs *q, int all_experts, int bf16, int fwd_bf16,
                      const char *device, enum lg_obs_kind kind)
{
	size_t cap = (size_t)q->total * 12 + 320, l = 0;
	char *m = malloc(cap);
	if (!m)
		return NULL;
	/* calib_observer: llm-compressor's name for the observer that made the scales
	 * (--observer; static_minmax, the amax over every token, is oneshot NVFP4's) */
	l += snprintf(m + l, cap - l, "\"calib_source\":\"requantfs calib run\","
	              "\"calib_observer\":\"%s\",\"calib_tokens\":\"%d\","
	              "\"calib_all_experts\":\"%d\",\"calib_scale_dtype\":\"%s\",\"calib_forward_dtype\":"
	              "\"%s\",\"calib_device\":\"%s\",\"calib_token_ids\":\"", lg_obs_kind_name(kind),
	              q->total, all_experts, bf16 ? "bf16" : "f32", fwd_bf16 ? "bf16" : "f32", device);
	for (int s = 0; s < q->n; s++)
		for (int i = 0; i < q->len[s]; i++)
			l += snprintf(m + l, cap - l, "%s%d", i ? "," : s ? ";" : "", q->tok[s][i]);
	snprintf(m + l, cap - l, "\"");
	return m;
}

struct run_opts {
	const char *model, *text, *prompts, *out;
	int tokens, all_experts, threads, quiet, bench, fast;
	int skip;          /* --text: the window starts after this many tokens (--skip) */
	int scale_dtype;   /* -1 auto (bf16 when MODEL's embedding is BF16), 0 f32, 1 bf16 */
	int fwd_dtype;     /* the same for the forward's activations */
	enum lg_device device;   /* --device */
	enum lg_obs_kind observer;   /* --observer */
};

/* The engine that observes: the CPU state or the CUDA engine behind one backend. */
struct eng {
	struct lg_backend *b;
	struct lg_state *st;       /* cpu, else NULL */
	struct lgc *g;             /* cuda, else NULL */
};

/* Observer on (obs) or off (NULL). The CUDA engine's start zeroes its
 * device maxima: the calibration pass reads them before the bench turns
 * the observer on again. */
static int eng_observe(struct eng *e, struct lg_obs *obs, struct rq_err *err)
{
	if (e->st) {
		lg_state_observe(e->st, obs);
		return 0;
	}
	if (!obs) {
		lgc_observe_stop(e->g);
		return 0;
	}
	return lgc_observe_start(e->g, obs->all_experts, err);
}

/* --all-experts needs routed experts, as MODEL's config.json says: checked
 * before the tokenizer and any shard are read. 0, or the exit code (printed). */
static int check_all_experts(const char *model)
{
	struct rq_err err = {0};
	struct lg_config cfg;
	enum lg_attn_type *types = NULL;
	int *heads = NULL, *moe = NULL;
	char *path = NULL, *text = NULL;
	size_t len;
	int rc = asprintf(&path, "%s/config.json", model) < 0 ? -ENOMEM : 0;
	if (!rc)
		rc = rq_file_read(path, LG_CONFIG_MAX, &text, &len, &err);
	if (!rc)
		rc = lg_config_parse(text, path, &cfg, &types, &heads, &moe, &err);
	free(types);
	free(heads);
	free(moe);
	free(text);
	free(path);
	if (rc)
		return cli_fail(1, "calib run", "%s", rc == -ENOMEM && !err.msg[0] ? "out of memory" : err.msg);
	if (cfg.n_experts <= 0)
		return cli_fail(2, "calib run", "--all-experts: %s has no routed experts (a dense "
		                "model); run without it", model);
	return 0;
}

/* An observer's arrays for ns slots (moving: the minmax and mse statistics too), zeroed. */
static int obs_alloc(struct lg_obs *b, size_t ns, int moving)
{
	b->amax = calloc(ns, sizeof *b->amax);
	b->tokens = calloc(ns, sizeof *b->tokens);
	if (moving) {
		b->lo = calloc(ns, sizeof *b->lo);
		b->hi = calloc(ns, sizeof *b->hi);
		b->groups = calloc(ns, sizeof *b->groups);
	}
	return b->amax && b->tokens && (!moving || (b->lo && b->hi && b->groups)) ? 0 : -ENOMEM;
}

static void obs_free(struct lg_obs *b, size_t ns)
{
	lg_obs_release(b, ns);
	free(b->amax);
	free(b->tokens);
	free(b->lo);
	free(b->hi);
	free(b->groups);
}

/* The order the sequences are fed in: as given, or for a moving average (minmax, mse:
 * the order changes the result) oneshot's: its LengthAwareSampler feeds the samples
 * longest first (torch.argsort descending; equal lengths here in the order given). */
static int *seq_order(const struct seqs *q, int longest_first)
{
	int *o = malloc((size_t)q->n * sizeof *o);
	for (int i = 0; o && i < q->n; i++) {
		int j = i;
		while (longest_first && j > 0 && q->len[o[j - 1]] < q->len[i]) {
			o[j] = o[j - 1];
			j--;
		}
		o[j] = i;
	}
	return o;
}

static int run(const struct run_opts *o)
{
	struct rq_err err = {0};
	struct lg_model *m = NULL;
	struct tok *tk = NULL;
	struct rq_pool *pool = NULL;
	struct eng eng = {0};
	struct seqs q = {0};
	struct lg_obs obs = {.all_experts = o->all_experts, .kind = o->observer};
	struct lg_obs bobs = {.all_experts = o->all_experts, .kind = o->observer};
	int *order = NULL;
	char **names = NULL, *meta = NULL;
	uint32_t *bits = NULL;
	size_t nn = 0, ns_all = 0;
	int rc = 1;
	/* the tokenizer first: one it cannot take is refused before any shard is opened */
	if (o->all_experts && (rc = check_all_experts(o->model)) != 0)
		goto out;
	rc = 1;
	if (tok_load(o->model, &tk, &err)) {
		cli_fail(1, "calib run", "%s (calib run needs MODEL's tokenizer to encode the "
		         "calibration text)", err.msg);
		goto out;
	}
	if (lg_model_open(o->model, &m, &err)) {
		cli_fail(1, "calib run", "%s", err.msg);
		goto out;
	}
	if (o->text) {
		int *t, n;
		if (ct_window(o->text, tk, o->skip + o->tokens, &t, &n, &err)) {
			cli_fail(1, "calib run", "--text %s", err.msg);
			goto out;
		}
		if (n - o->skip < 2) {
			free(t);
			cli_fail(1, "calib run", "--text %s holds %d tokens: --skip %d leaves fewer than 2 "
			         "to calibrate on (use a longer text or a smaller --skip)", o->text, n,
			         o->skip);
			goto out;
		}
		if (o->skip)
			memmove(t, t + o->skip, (size_t)(n - o->skip) * sizeof *t);
		if (seqs_add(&q, t, n - o->skip)) {
			cli_fail(1, "calib run", "out of memory");
			goto out;
		}
	} else if (read_prompts(o->prompts, tk, o->tokens, &q, &err)) {
		cli_fail(1, "calib run", "%s", err.msg);
		goto out;
	}
	if (q.total < o->tokens && !o->quiet)   /* the file was shorter than asked: say so */
		fprintf(stderr, "requantfs calib run: warning: %s %s holds only %d token%s%s: "
		        "calibrating on those, not the %d of --tokens (a longer text covers more of "
		        "the activations' range)\n", o->text ? "--text" : "--prompts",
		        o->text ? o->text : o->prompts, q.total, q.total == 1 ? "" : "s",
		        o->skip ? " after --skip" : "", o->tokens);
	size_t ns = ns_all = lg_obs_count(m);
	int moving = o->observer != LG_OBS_STATIC_MINMAX;
	if (obs_alloc(&obs, ns, moving) || (o->bench && obs_alloc(&bobs, ns, moving)) ||
	    !(names = calloc(ns, sizeof *names)) || !(bits = calloc(ns, sizeof *bits)) ||
	    !(order = seq_order(&q, moving)) || rq_pool_create(o->threads, &pool)) {
		cli_fail(1, "calib run", "out of memory");
		goto out;
	}
	int maxlen = 0;
	for (int i = 0; i < q.n; i++)
		if (q.len[i] > maxlen)
			maxlen = q.len[i];
	/* the device: the BF16 forward is the CPU's only (the top comment); the
	 * peer runs the model in its dtype: BF16 for a BF16 checkpoint */
	int model_bf16 = m->embed != NULL || m->embed_q.kind == LG_W_BF16;
	enum lg_device dev = o->device;
	int want_bf16 = o->fwd_dtype >= 0 ? o->fwd_dtype : model_bf16;
	if (moving && !want_bf16) {
		cli_fail(2, "calib run", "--observer %s searches BF16 activations (llm-compressor's "
		         "on a BF16 model) and %s is not BF16: add --forward-dtype bf16",
		         lg_obs_kind_name(o->observer), o->model);
		goto out;
	}
	if (want_bf16 && dev == LG_DEVICE_AUTO) {
		dev = LG_DEVICE_CPU;
		if (!o->quiet && ek_device_count() > 0)   /* no GPU: nothing to point at */
			fprintf(stderr, "requantfs calib run: the BF16 forward (--forward-dtype %s, the peer's "
			        "roundings) runs on the CPU: the CUDA engine has none; --forward-dtype f32 "
			        "or --device cuda observes on the GPU\n", o->fwd_dtype == 1 ? "bf16" : "auto");
	}
	char plan[1024];
	/* minmax and mse: a batch is a sequence, fed as one forward call */
	struct lg_backend_opts bo = {.device = dev, .max_ctx = maxlen,
	                             .max_batch = moving ? maxlen : 64, .pool = pool,
	                             .kv = "f32", .fast = o->fast, .plan = plan,
	                             .plan_len = sizeof plan};
	if (lg_backend_open(m, &bo, &eng.b, &err)) {
		if (plan[0])
			fprintf(stderr, "%s\n", plan);
		cli_fail(1, "calib run", "%s", err.msg);
		goto out;
	}
	if (!strcmp(eng.b->name, "cuda"))
		eng.g = eng.b->impl;
	else
		eng.st = eng.b->impl;
	if (eng.b->fallback[0] && !o->quiet)
		fprintf(stderr, "requantfs calib run: CUDA engine unavailable (%s); using the CPU\n",
		        eng.b->fallback);

	int bf16 = o->scale_dtype >= 0 ? o->scale_dtype : model_bf16;
	int fwd_bf16 = eng.st ? want_bf16 : 0;   /* --device cuda: F32 (bf16 refused at parsing) */
	if (eng.st)
		lg_state_round_bf16(eng.st, fwd_bf16);

	/* observe: every sequence from position 0, 64 tokens a call (the bar) */
	if (eng_observe(&eng, &obs, &err)) {
		cli_fail(1, "calib run", "%s", err.msg);
		goto out;
	}
	struct cli_progress *bar = o->quiet ? NULL : cli_progress_start("calib run", q.total, 0, 0);
	double t0 = now();
	for (int k = 0; k < q.n && rc == 1; k++) {
		int s = order[k], chunk = moving ? q.len[s] : 64;
		eng.b->reset(eng.b);
		for (int d = 0; d < q.len[s]; d += chunk) {
			int T = q.len[s] - d < chunk ? q.len[s] - d : chunk;
			if (eng.b->forward(eng.b, q.tok[s] + d, T, NULL, 0, &err)) {
				cli_progress_end(bar);
				cli_fail(1, "calib run", "%s", err.msg);
				goto out;
			}
			cli_progress_add(bar, T, 0);
		}
	}
	if (eng.g && lgc_observe_read(eng.g, &obs, &err)) {   /* the one copy back */
		cli_progress_end(bar);
		cli_fail(1, "calib run", "%s", err.msg);
		goto out;
	}
	double t_obs = now() - t0;
	cli_progress_end(bar);
	if (obs.err) {
		cli_fail(1, "calib run", "--observer %s: the search failed: %s (an input of %s held "
		         "%s)", lg_obs_kind_name(o->observer), strerror(-obs.err), o->model,
		         obs.err == -EDOM ? "a NaN or Inf" : obs.err == -ENOMEM ? "more than memory "
		         "allows" : "a value the BF16 forward did not round");
		goto out;
	}
	for (size_t i = 0; moving && i < ns; i++)   /* the observer's ranges -> one amax */
		obs.amax[i] = lg_obs_amax(&obs, i);
	/* --bench: the first BENCH_TOKENS tokens of the first sequence as one
	 * prefill (generate's), observer off and on alternately,
	 * best of 3 each, so that both see the same machine. The observing runs
	 * fold into a scratch observer of the same kind (bobs), never into the
	 * scales. With a BF16 forward a
	 * third, alternated with them: the prefill in binary32, the forward
	 * generate runs (issue 21's bar is calib run's rate over generate's). */
	double r_pre = 0, r_bobs = 0, r_gen = 0;
	int nb = q.len[0] < BENCH_TOKENS ? q.len[0] : BENCH_TOKENS, kinds = fwd_bf16 ? 3 : 2;
	for (int rep = 0; rep < 3 * kinds && o->bench; rep++) {
		int kind = rep % kinds;   /* 0 prefill, 1 observing, 2 binary32 prefill */
		if (eng_observe(&eng, kind == 1 ? &bobs : NULL, &err)) {
			cli_fail(1, "calib run", "%s", err.msg);
			goto out;
		}
		if (eng.st)
			lg_state_round_bf16(eng.st, kind == 2 ? 0 : fwd_bf16);
		eng.b->reset(eng.b);
		t0 = now();
		/* the CUDA engine queues its work: the forward returns once it ran */
		if (eng.b->forward(eng.b, q.tok[0], nb, NULL, 0, &err)) {
			cli_fail(1, "calib run", "%s", err.msg);
			goto out;
		}
		double r = nb / (now() - t0), *best = kind == 1 ? &r_bobs : kind == 2 ? &r_gen : &r_pre;
		if (r > *best)
			*best = r;
	}
	if (eng.st)
		lg_state_round_bf16(eng.st, fwd_bf16);
	eng_observe(&eng, NULL, &err);

	/* scales: the fallback first (max over the layer's experts that saw a token) */
	int per = lg_obs_per_layer(m), E = m->cfg.n_experts, fallback = 0, zero = 0;
	for (int li = 0; li < m->cfg.n_layers; li++)
		for (int p = 0; p < 3 && m->layers[li].moe; p++) {
			float mx = 0;
			for (int e = 0; e < E; e++) {
				size_t i = (size_t)li * per + LG_OBS_FIXED + 3 * e + p;
				if (obs.tokens[i] && obs.amax[i] > mx)
					mx = obs.amax[i];
			}
			for (int e = 0; e < E; e++) {
				size_t i = (size_t)li * per + LG_OBS_FIXED + 3 * e + p;
				if (!obs.tokens[i]) {
					obs.amax[i] = mx;
					fallback++;
				}
			}
		}
	char name[512];
	for (size_t i = 0; i < ns; i++) {
		if (lg_obs_name(m, i, name, sizeof name - 32))
			continue;
		float a = obs.amax[i], sc = lg_obs_scale(a, bf16);
		zero += !(a > 0);
		strcat(name, ".input_global_scale");
		if (!(names[nn] = strdup(name))) {
			cli_fail(1, "calib run", "out of memory");
			goto out;
		}
		memcpy(&bits[nn++], &sc, 4);
	}
	if (!nn) {
		cli_fail(1, "calib run", "%s has no Linear that a W4A4 scheme quantizes", o->model);
		goto out;
	}
	if (!(meta = metadata(&q, o->all_experts, bf16, fwd_bf16,
	                      eng.st && o->fast ? "cpu-fast" : eng.b->name, o->observer)) ||
	    rq_calib_write_meta(o->out, names, bits, nn, meta, &err)) {
		cli_fail(1, "calib run", "%s", meta ? err.msg : "out of memory");
		goto out;
	}
	double r_obs = q.total / t_obs;
	if (!o->quiet) {
		fprintf(stderr, "requantfs calib run: %zu scales from %d tokens in %d sequence%s written "
		        "to %s (%d routed-expert inputs saw no token%s: given the max over their layer's "
		        "experts; %d inputs all zero: scale 1.0, as the peer; observer %s; scales in %s; "
		        "forward in %s on the %s)\n", nn, q.total, q.n, q.n == 1 ? "" : "s", o->out, fallback,
		        o->all_experts ? " (--all-experts)" : "", zero, lg_obs_kind_name(o->observer),
		        bf16 ? "BF16 (--scale-dtype bf16)" : "F32 (--scale-dtype f32)",
		        fwd_bf16 ? "BF16 (--forward-dtype bf16)" : "F32 (--forward-dtype f32)",
		        eng.g ? "GPU (--device)" : "CPU (--device)");
		fprintf(stderr, "requantfs calib run: the calibration pass: %d tokens in %.2f s, %.1f "
		        "tok/s%s\n", q.total, t_obs, r_obs, o->bench ? "" : " (--bench compares it with "
		        "generate's prefill of the same tokens)");
	}
	if (o->bench) {
		/* the pass is one timing of all its tokens; the window is its start
		 * (all of it for one sequence of at most BENCH_TOKENS) */
		const char *same = q.n == 1 && q.total == nb ? "the same tokens" : "its first tokens";
		fprintf(stderr, "requantfs calib run: bench: observing %.1f tok/s, prefill of the same "
		        "model %.1f tok/s (the first %d tokens as one prefill, alternated, best of 3), "
		        "ratio %.2f (bar >= 0.8)", r_bobs, r_pre, nb, r_bobs / r_pre);
		if (!fwd_bf16)
			fprintf(stderr, "; the calibration pass (one timing) / the prefill of %s %.2f "
			        "(bar >= 0.8)", same, r_obs / r_pre);
		fputc('\n', stderr);
		if (fwd_bf16)
			fprintf(stderr, "requantfs calib run: bench: generate's prefill (binary32, alternated "
			        "with the above, best of 3) %.1f tok/s: BF16 observing / it %.2f, the "
			        "calibration pass (one timing) / it over %s %.2f (bar >= 0.8)\n", r_gen,
			        r_bobs / r_gen, same, r_obs / r_gen);
	}
	rc = 0;
out:
	rq_calib_free(names, bits, nn);
	free(meta);
	obs_free(&obs, ns_all);
	obs_free(&bobs, ns_all);
	free(order);
	lg_backend_close(eng.b);
	rq_pool_destroy(pool);
	seqs_free(&q);
	tok_free(tk);
	lg_model_close(m);
	return rc;
}

static void usage(FILE *f)
{
	fprintf(f,
	"usage: requantfs calib run MODEL (--text FILE | --prompts FILE) -o FILE\n"
	"                 [--tokens N] [--skip K] [--all-experts] [--scale-dtype auto|bf16|f32]\n"
	"                 [--forward-dtype auto|bf16|f32] [--observer static_minmax|minmax|mse]\n"
	"                 [--device auto|cpu|cuda] [--threads N] [--bench] [--quiet] [--fast]\n"
	"       requantfs calib diff A B\n\n"
	"run: feeds calibration tokens through MODEL (the CPU or CUDA engine) and writes, for\n"
	"every Linear a W4A4 scheme quantizes (attention, MLP, shared and routed experts;\n"
	"not lm_head, the embedding or the routers), <module>.input_global_scale =\n"
	"448*6 / max|input| as F32 [1]: the file --calib takes. --text: the first N\n"
	"tokens of FILE as tokenizer(text) encodes it (one sequence, compare --text's\n"
	"ids; --skip K: tokens K..K+N-1 instead, e.g. those after compare --text's window);\n"
	"--prompts: one prompt a line, each a sequence, N tokens in all (reading stops\n"
	"there; of a line at most 64 bytes a token still wanted are read, a longer line\n"
	"is cut with a note). FILE is a regular file (not a FIFO or a device). --tokens N\n"
	"(default 512). Routed experts see the tokens routed to them; --all-experts also\n"
	"sends every token through every expert for the observer only. An expert that\n"
	"saw no token gets the largest input of its layer's experts (counted).\n"
	"--scale-dtype: bf16 rounds max|input| and the scale to BF16 as llm-compressor\n"
	"does for a BF16 model; f32 keeps the F32 quotient; auto (default): bf16 when\n"
	"MODEL's embedding is BF16, else f32. --forward-dtype: bf16 runs the forward\n"
	"with the roundings of transformers' eager BF16 forward (what llm-compressor\n"
	"observes on a BF16 model; slower), f32 the engine's binary32 forward; auto\n"
	"(default): as --scale-dtype's auto (f32 with --device cuda). --device: cuda\n"
	"observes on the GPU (the CUDA engine, maxima reduced on the device), cpu on the\n"
	"CPU engine, auto (default) on the GPU when one is usable and the forward is\n"
	"F32. The BF16 forward is the CPU's only: --device cuda --forward-dtype bf16 is\n"
	"refused, and auto runs a BF16 forward (a BF16 model's default: exact parity\n"
	"with the peer) on the CPU; --forward-dtype f32 or --device cuda uses the GPU.\n"
	"--observer: llm-compressor's activation observer the scales follow:\n"
	"static_minmax (default) max|input| over every token; minmax and mse per group\n"
	"of 16 columns per sequence (a batch: longest first, as oneshot feeds them),\n"
	"min/max or the range of least sum of |fq(x) - x|^2.4, folded by a moving average\n"
	"(0.01); both need the CPU's BF16 forward.\n"
	"The token ids, both dtypes, the device and the observer go into the file's\n"
	"__metadata__.\n"
	"--bench: then time the first sequence (up to 512 tokens) as one prefill with\n"
	"the observer off and on, and generate's binary32 prefill, alternated, best of 3,\n"
	"and print the ratios (the bar: observing >= 0.8 of the prefill).\n"
	"--fast: the CPU engine's Linears on its fast mode (FMA kernels): faster, no\n"
	"longer the oracle's bits, so no longer the peer's maxima bit for bit;\n"
	"__metadata__ says calib_device cpu-fast. Not with --device cuda.\n\n"
	"diff: per-module ratio A/B of input_global_scale of two calibration files (or\n"
	"07-22 checkpoints), a summary, and the modules only in one; exit status 1\n"
	"when A and B share no module (calibrations of different models).\n");
}

int calib_run_main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"text", required_argument, 0, 'x'}, {"prompts", required_argument, 0, 'p'},
		{"tokens", required_argument, 0, 'n'}, {"all-experts", no_argument, 0, 'a'},
		{"output", required_argument, 0, 'o'}, {"threads", required_argument, 0, 't'},
		{"quiet", no_argument, 0, 'q'}, {"scale-dtype", required_argument, 0, 'd'},
		{"skip", required_argument, 0, 'k'}, {"forward-dtype", required_argument, 0, 'f'},
		{"device", required_argument, 0, 'D'}, {"bench", no_argument, 0, 'B'},
		{"observer", required_argument, 0, 'O'}, {"fast", no_argument, 0, 'F'},
		{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	struct run_opts o = {.tokens = 512, .scale_dtype = -1, .fwd_dtype = -1};
	int c;
	char *end;
	while ((c = getopt_long(argc, argv, "o:n:t:qh", opts, NULL)) != -1) {
		switch (c) {
		case 'x': o.text = optarg; break;
		case 'p': o.prompts = optarg; break;
		case 'a': o.all_experts = 1; break;
		case 'o': o.out = optarg; break;
		case 'q': o.quiet = 1; break;
		case 'B': o.bench = 1; break;
		case 'F': o.fast = 1; break;
		case 'O':
			if (lg_obs_kind_parse(optarg, &o.observer))
				return cli_fail(2, "calib run", "--observer: '%s' is not one of static_minmax "
				                "(the default), minmax, mse (llm-compressor's activation "
				                "observers; see docs/calibration.md)", optarg);
			break;
		case 'D':
			if (lg_device_parse(optarg, &o.device))
				return cli_fail(2, "calib run", "--device: expected cpu, cuda or auto, got '%s'",
				                optarg);
			break;
		case 'd':
		case 'f':
			if (!strcmp(optarg, "auto") || !strcmp(optarg, "bf16") || !strcmp(optarg, "f32"))
				*(c == 'd' ? &o.scale_dtype : &o.fwd_dtype) = optarg[0] == 'a' ? -1
				                                               : optarg[0] == 'b';
			else
				return cli_fail(2, "calib run", "--%s: '%s' is not auto, bf16 or f32",
				                c == 'd' ? "scale-dtype" : "forward-dtype", optarg);
			break;
		case 'n':
		case 'k':
		case 't': {
			long v = strtol(optarg, &end, 10);
			long lo = c == 'n' ? 2 : 0;
			if (*end || end == optarg || v < lo || v > 1 << 24)
				return cli_fail(2, "calib run", "--%s: '%s' is not a count in [%ld, %d]",
				                c == 'n' ? "tokens" : c == 'k' ? "skip" : "threads", optarg, lo,
				                1 << 24);
			*(c == 'n' ? &o.tokens : c == 'k' ? &o.skip : &o.threads) = (int)v;
			break;
		}
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (argc - optind != 1 || !o.out) {
		usage(stderr);
		return cli_fail(2, "calib run", "%s", !o.out ? "-o FILE is required (where to write "
		                "the scales)" : "needs exactly one MODEL");
	}
	if (!o.text == !o.prompts)
		return cli_fail(2, "calib run", "give the calibration tokens: --text FILE or --prompts "
		                "FILE (one of them)");
	if (o.device == LG_DEVICE_CUDA && o.fwd_dtype == 1)
		return cli_fail(2, "calib run", "--forward-dtype bf16 (transformers' BF16 roundings) runs on "
		                "the CPU engine only; use --device cpu for it, or --forward-dtype f32 on "
		                "the GPU");
	if (o.fast && o.device == LG_DEVICE_CUDA)
		return cli_fail(2, "calib run", "--fast is the CPU engine's mode; use --device cpu with it, "
		                "or drop it for the GPU");
	if (o.observer != LG_OBS_STATIC_MINMAX && (o.device == LG_DEVICE_CUDA || o.fwd_dtype == 0))
		return cli_fail(2, "calib run", "--observer %s searches the BF16 activations of the "
		                "CPU engine's BF16 forward (llm-compressor's on a BF16 model): drop "
		                "%s, or use --observer static_minmax", lg_obs_kind_name(o.observer),
		                o.fwd_dtype == 0 ? "--forward-dtype f32" : "--device cuda");
	if (o.skip && !o.text)
		return cli_fail(2, "calib run", "--skip is for --text (tokens of one window)");
	o.model = argv[optind];
	int hc = cli_hf_engine_refuse("calib run", o.model);
	if (hc >= 0)
		return hc;
	hc = cli_hub_args("calib run", &o.model, NULL);
	if (hc >= 0)
		return hc;
	return run(&o);
}

/* ---------------------------------------------------------------- diff */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static int find_name(char **names, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(names[i], name))
			return (int)i;
	return -1;
}

static float bits_f(uint32_t b)
{
	float f;
	memcpy(&f, &b, 4);
	return f;
}

int calib_diff_main(int argc, char **argv)
{
	if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		usage(stdout);
		return 0;
	}
	if (argc != 3) {
		usage(stderr);
		return cli_fail(2, "calib diff", "needs two calibration files (or 07-22 checkpoints) "
		                "A and B, got %d", argc - 1);
	}
	struct rq_err err = {0};
	char **na = NULL, **nb = NULL;
	uint32_t *ba = NULL, *bb = NULL;
	size_t a = 0, b = 0;
	double *r = NULL;
	int rc = 1;
	if (rq_calib_load(argv[1], &na, &ba, &a, &err) || rq_calib_load(argv[2], &nb, &bb, &b, &err)) {
		cli_fail(1, "calib diff", "%s", err.msg);
		goto out;
	}
	/* names sorted in both (safetensors headers sort them): a merge would do;
	 * a linear search per name is simple and fast enough for ~10^4 modules */
	r = malloc((a ? a : 1) * sizeof *r);
	if (!r) {
		cli_fail(1, "calib diff", "out of memory");
		goto out;
	}
	size_t nr = 0, only_a = 0, only_b = 0;
	size_t sl = strlen(".input_global_scale");
	printf("%-64s %12s %12s %8s\n", "module", "A", "B", "A/B");
	for (size_t i = 0; i < a; i++) {
		int j = find_name(nb, b, na[i]);
		int ml = (int)(strlen(na[i]) - sl);
		if (j < 0) {
			printf("%-64.*s %12g %12s %8s\n", ml, na[i], bits_f(ba[i]), "-", "only A");
			only_a++;
			continue;
		}
		double x = bits_f(ba[i]), y = bits_f(bb[j]);
		r[nr++] = x / y;
		printf("%-64.*s %12g %12g %8.4f\n", ml, na[i], x, y, x / y);
	}
	for (size_t j = 0; j < b; j++)
		if (find_name(na, a, nb[j]) < 0) {
			int ml = (int)(strlen(nb[j]) - sl);
			printf("%-64.*s %12s %12g %8s\n", ml, nb[j], "-", bits_f(bb[j]), "only B");
			only_b++;
		}
	qsort(r, nr, sizeof *r, cmp_double);
	if (nr)
		printf("summary: %zu modules in both: A/B min %.4f, median %.4f, max %.4f; "
		       "%zu only in A (%s), %zu only in B (%s)\n", nr, r[0],
		       nr % 2 ? r[nr / 2] : (r[nr / 2 - 1] + r[nr / 2]) / 2, r[nr - 1], only_a, argv[1],
		       only_b, argv[2]);
	else
		printf("summary: no module in both; %zu only in A (%s), %zu only in B (%s)\n", only_a,
		       argv[1], only_b, argv[2]);
	/* nothing compared: two different models, not a calibration difference */
	if (!nr) {
		cli_fail(1, "calib diff", "%s and %s share no module: calibrations of different "
		         "models? (A's first: %s; B's first: %s)", argv[1], argv[2], a ? na[0] : "none",
		         b ? nb[0] : "none");
		goto out;
	}
	rc = 0;
out:
	free(r);
	rq_calib_free(na, ba, a);
	rq_calib_free(nb, bb, b);
	return rc;
}
