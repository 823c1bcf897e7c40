/* bench_engine_cuda.c — `requantfs bench engine --device cuda`: the CUDA
 * engine on a stack of Laguna S 2.1-shaped layers (synthetic weights filled
 * on the device, or --model DIR), against the device's own copy bandwidth
 * measured in the same run.
 *
 * Decode: device time of one captured step (graph replay) at a position
 * after a 1K prompt, as tokens/s and as GB/s of the weights a token reads
 * (lg_model_token_bytes: every dense weight, top_k average experts,
 * lm_head) plus its KV reads, next to the measured device-to-device copy
 * bandwidth (read + write). Prefill: wall clock of 1K and 8K-token prompts.
 * Extrapolation to the full depth: the step is timed for L and L/2 layers,
 * t(L) = t0 + L·t_layer is solved for t0 and t_layer, and t(48) predicted
 * (layers of the stack are the sliding kind but the first, which is full;
 * the real model has 12 full layers, with fewer heads and longer KV reads).
 *
 * Per weight format (bench_engine_ops.c bench_engine_formats): the decode
 * GEMV of one shape in BF16 and NVFP4, weight GB/s against the copy
 * bandwidth of the same run (--no-formats skips it).
 *
 * --decode-at P,P: instead, for each position P (prompt of P tokens), the
 * device time of one decode step at P and, with --logits-out FILE, the
 * logits of that step (vocab little-endian floats per position, in order):
 * run under EK_PDL=0 and EK_PDL=1 they must be byte-identical. The kernels
 * of one direct decode step are counted too (ek_launches).
 * --op NAME[,NAME]: one op at a time (tools/bench/bench_engine_ops.c). */
#include "tools/bench/bench.h"
#include "cli/cli.h"
#include "base/err.h"
#include "engine/model/forward_cuda.h"
#include "engine/model/model.h"
#include "tools/bench/bench_synth.h"
#include "tools/bench/bench_engine_ops.h"
#include "kernels/ek.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
	fprintf(f,
	"usage: requantfs bench engine --device cuda[:N] [--real-dims] [--layers N]\n"
	"              [--experts E] [--model DIR] [--ctx N] [--kv bf16|f32|fp8] [--steps N]\n"
	"              [--prefill N,N|0] [--batch N] [--gpu-mem SIZE] [--no-graph]\n"
	"              [--decode-at P,P [--logits-out FILE]] [--no-formats]\n"
	"       requantfs bench engine --device cuda[:N] --op NAME[,NAME] [--pos P] [--ctx N]\n"
	"              [--reps N] [--json]    |    --list-ops\n\n"
	"The CUDA engine on a stack of Laguna S 2.1-shaped layers with synthetic weights\n"
	"(filled on the device: BF16 attention, dense and shared MLPs, NVFP4 routed experts),\n"
	"or on the checkpoint in --model DIR. Prints the memory plan, the upload rate, the\n"
	"device's copy bandwidth, decode tokens/s and GB/s (graph replay, device time),\n"
	"prefill tokens/s, for the synthetic stack an extrapolation to 48 layers, and per\n"
	"weight format of the CUDA engine (bf16, nvfp4) a decode GEMV's weight GB/s and its\n"
	"fraction of the copy bandwidth measured in the same run.\n"
	"  --real-dims     Laguna S 2.1 widths (the default; accepted for symmetry)\n"
	"  --layers N      layers of the synthetic stack (default 4)\n"
	"  --experts E     routed experts per layer (default 256)\n"
	"  --ctx N         context positions (default 16384)\n"
	"  --kv T          KV cache type (default bf16)\n"
	"  --steps N       decode steps timed (default 64)\n"
	"  --prefill L,L   prompt lengths timed (default 1024,8192)\n"
	"  --batch N       prompt tokens per batch (default 1024)\n"
	"  --gpu-mem SIZE  plan against SIZE bytes instead of the free memory (e.g. 96G)\n"
	"  --decode-at P,P decode step time (and kernels per step) at each position P after a\n"
	"                  P-token prompt, instead of the prefill/extrapolation runs\n"
	"  --logits-out F  with --decode-at: the logits of each timed step, raw float32\n"
	"  --no-formats    skip the per-format decode GEMV rows\n"
	"  --op NAME,...   per-op timing at Laguna S 2.1 shapes: us per call (graph of 8 calls,\n"
	"                  median of --reps replays), GB/s of the bytes it must move, vs the\n"
	"                  device copy of the same run; --pos/--ctx for attention ops\n"
	"  --json          --op: one JSON object per op\n"
	"  --list-ops      the op names\n"
	"PDL is on where the device has it; EK_PDL=0 turns it off, EK_FUSE=0 unfuses the\n"
	"RMSNorms from their GEMVs (both for comparisons).\n");
}

struct run {
	double step_s;             /* device time of one decode step */
	double prefill_tps[4];
	double bytes_tok;          /* weight bytes per token */
	double kv_tok;             /* KV bytes one step reads at the timed position */
	double d2d_gbs;            /* device copy bandwidth, read + write */
	int pos;
};

/* Prefills, then times decode at position `at`. */
/* --decode-at: step time and logits at each position. */
static int decode_at(const struct lg_model *m, const struct lgc_opts *o, int steps, const int *at,
                     int nat, const char *logits_out, struct rq_err *err)
{
	struct lgc *g;
	int V = m->cfg.vocab, maxp = 0, rc;
	for (int i = 0; i < nat; i++)
		maxp = at[i] > maxp ? at[i] : maxp;
	if ((rc = lgc_create(m, o, &g, err)))
		return rc;
	FILE *lf = logits_out ? fopen(logits_out, "wb") : NULL;
	if (logits_out && !lf) {
		lgc_free(g);
		return rq_errf(err, -errno, "%s: cannot create (%s)", logits_out, strerror(errno));
	}
	int *tok = malloc(sizeof(int) * (maxp + 1));
	float *logits = malloc(sizeof(float) * V);
	rc = !tok || !logits ? rq_errf(err, -ENOMEM, "out of memory") : 0;
	for (int i = 0; !rc && i <= maxp; i++)
		tok[i] = (int)((i * 7919ull + 13) % (unsigned)V);
	const char *pdl = getenv("EK_PDL"), *fuse = getenv("EK_FUSE");
	printf("PDL: %s; RMSNorm %s\n", pdl && !strcmp(pdl, "0") ? "off (EK_PDL=0)" :
	       "on where the device has it (EK_PDL=0 turns it off)",
	       fuse && !strcmp(fuse, "0") ? "unfused (EK_FUSE=0)" : "fused into the GEMVs");
	for (int i = 0; !rc && i < nat; i++) {
		double s = 0;
		lgc_reset(g);
		if (at[i] > 0)
			rc = lgc_forward(g, tok, at[i], NULL, 0, err);
		if (!rc && i == 0) {       /* one direct step (the graph is captured after two) */
			unsigned long long l0 = ek_launches(NULL);
			rc = lgc_forward(g, &tok[at[i]], 1, logits, 1, err);
			if (!rc)
				printf("kernels per decode step: %llu (a direct step, %d layers)\n",
				       ek_launches(NULL) - l0, m->cfg.n_layers);
			lgc_reset(g);
			if (!rc && at[i] > 0)
				rc = lgc_forward(g, tok, at[i], NULL, 0, err);
		}
		if (!rc)
			rc = lgc_time_step(g, tok[at[i]], steps, &s, err);
		if (!rc)                   /* the logits of the step at P (after the timing: same KV) */
			rc = lgc_forward(g, &tok[at[i]], 1, logits, 1, err);
		if (!rc && lf && fwrite(logits, sizeof(float), V, lf) != (size_t)V)
			rc = rq_errf(err, -EIO, "%s: write failed", logits_out);
		if (!rc)
			printf("decode at position %d: %.3f ms/token, %.1f tokens/s (graph replay, device "
			       "time)\n", at[i], s * 1e3, 1 / s);
	}
	if (lf && fclose(lf) && !rc)
		rc = rq_errf(err, -EIO, "%s: write failed", logits_out);
	free(tok);
	free(logits);
	lgc_free(g);
	return rc;
}

static int measure(const struct lg_model *m, const struct lgc_opts *o, int steps, const int *plen,
                   int nplen, int at, int verbose, struct run *r, struct rq_err *err)
{
	struct lgc *g;
	int rc = lgc_create(m, o, &g, err), V = m->cfg.vocab;
	if (rc)
		return rc;
	struct lgc_stats st;
	if (verbose) {
		char t[1024];
		lgc_plan_text(lgc_plan_of(g), t, sizeof t);
		lgc_stats(g, &st);
		printf("%s\n", t);
		printf("upload: %.2f GB in %.2f s (%.1f GB/s%s)\n", st.upload_bytes / 1e9, st.upload_s,
		       st.upload_bytes / 1e9 / (st.upload_s > 0 ? st.upload_s : 1e-9),
		       m->embed ? ", mapped checkpoint -> pinned -> device" : ", synthetic: filled on the device");
		if (!(rc = lgc_measure_copy(g, (size_t)2 << 30, err))) {
			lgc_stats(g, &st);
			printf("copy bandwidth: device->device %.0f GB/s (read + write), host->device %.1f GB/s\n",
			       st.d2d_gbs, st.h2d_gbs);
			r->d2d_gbs = st.d2d_gbs;
		}
	}
	int maxp = at;
	for (int i = 0; i < nplen; i++)
		maxp = plen[i] > maxp ? plen[i] : maxp;
	int *tok = malloc(sizeof(int) * (maxp + 1));
	float *logits = malloc(sizeof(float) * V);
	for (int i = 0; i <= maxp; i++)
		tok[i] = (int)((i * 7919ull + 13) % (unsigned)V);
	for (int i = 0; !rc && i < nplen; i++) {
		lgc_reset(g);
		lgc_stats(g, &st);
		double s0 = st.prefill_s;
		long n0 = st.prefill_tokens;
		rc = lgc_forward(g, tok, plen[i], logits, 1, err);
		lgc_stats(g, &st);
		r->prefill_tps[i] = rc ? 0 : (st.prefill_tokens - n0) / (st.prefill_s - s0);
	}
	if (!rc) {
		lgc_reset(g);
		rc = lgc_forward(g, tok, at, logits, 1, err);
	}
	if (!rc)
		rc = lgc_time_step(g, tok[at], steps, &r->step_s, err);
	if (!rc) {
		const struct lgc_plan *p = lgc_plan_of(g);
		lgc_stats(g, &st);
		r->bytes_tok = st.weight_bytes_per_token;
		r->pos = at;
		double el = p->kv_type == EK_KV_F32 ? 4 : p->kv_type == EK_KV_BF16 ? 2 : 1;
		for (int i = 0; i < m->cfg.n_layers; i++) {
			int keys = at + 1;
			if (m->layers[i].type == LG_SLIDING && keys > m->cfg.sliding_window)
				keys = m->cfg.sliding_window;
			r->kv_tok += 2.0 * m->cfg.n_kv_heads * m->cfg.head_dim * el * keys;
		}
		if (verbose && st.graph)
			printf("decode graph: captured after %ld direct steps\n", st.decode_steps - 1);
	}
	free(tok);
	free(logits);
	lgc_free(g);
	return rc;
}

int bench_engine_cuda(int argc, char **argv)
{
	static const struct option opts[] = {
		{"device", required_argument, 0, 'D'}, {"real-dims", no_argument, 0, 'R'},
		{"layers", required_argument, 0, 'l'}, {"experts", required_argument, 0, 'e'},
		{"model", required_argument, 0, 'm'}, {"ctx", required_argument, 0, 'c'},
		{"kv", required_argument, 0, 'k'}, {"steps", required_argument, 0, 's'},
		{"prefill", required_argument, 0, 'p'}, {"batch", required_argument, 0, 'b'},
		{"gpu-mem", required_argument, 0, 'g'}, {"no-graph", no_argument, 0, 'G'},
		{"decode-at", required_argument, 0, 'A'}, {"logits-out", required_argument, 0, 'L'},
		{"op", required_argument, 0, 'O'}, {"pos", required_argument, 0, 'P'},
		{"reps", required_argument, 0, 'r'}, {"json", no_argument, 0, 'J'},
		{"list-ops", no_argument, 0, 'N'}, {"no-formats", no_argument, 0, 'F'},
		{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	struct lgc_opts o = {.max_ctx = 16384, .max_batch = 1024};
	const char *model = NULL, *ops = NULL, *logits_out = NULL;
	int layers = 4, experts = 256, steps = 64, plen[4] = {1024, 8192}, nplen = 2, c;
	int at[8], nat = 0, pos = 128, reps = 20, json = 0, ctx_set = 0, formats = 1;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'D':
			if (strncmp(optarg, "cuda", 4) || (optarg[4] && optarg[4] != ':'))
				return cli_fail(2, "bench engine", "--device: this is the CUDA benchmark (cuda[:N])");
			o.device = optarg[4] ? atoi(optarg + 5) : 0;
			break;
		case 'R': break;
		case 'l': layers = atoi(optarg); break;
		case 'e': experts = atoi(optarg); break;
		case 'm': model = optarg; break;
		case 'c': o.max_ctx = atoi(optarg); ctx_set = 1; break;
		case 'O': ops = optarg; break;
		case 'P': pos = atoi(optarg); break;
		case 'r': reps = atoi(optarg); break;
		case 'J': json = 1; break;
		case 'L': logits_out = optarg; break;
		case 'N': bench_engine_list_ops(stdout); return 0;
		case 'F': formats = 0; break;
		case 'A':
			nat = 0;
			for (char *s = optarg; *s && nat < 8;) {
				at[nat++] = (int)strtol(s, &s, 10);
				if (*s == ',')
					s++;
				else if (*s)
					return cli_fail(2, "bench engine", "--decode-at: positions like 128,4096");
			}
			break;
		case 'k': o.kv = optarg; break;
		case 's': steps = atoi(optarg); break;
		case 'b': o.max_batch = atoi(optarg); break;
		case 'G': o.no_graph = 1; break;
		case 'p': {
			nplen = 0;
			if (!strcmp(optarg, "0"))
				break;
			for (char *s = optarg; *s && nplen < 4;) {
				plen[nplen++] = (int)strtol(s, &s, 10);
				if (*s == ',')
					s++;
				else if (*s)
					return cli_fail(2, "bench engine", "--prefill: lengths like 1024,8192");
			}
			break;
		}
		case 'g': {
			unsigned long long v;
			if (cli_parse_size(optarg, &v))
				return cli_fail(2, "bench engine", "--gpu-mem: a size like 96G, got '%s'", optarg);
			o.mem_limit = v;
			break;
		}
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (layers < 1 || experts < 1 || steps < 1 || o.max_ctx < 2 || lgc_kv_parse(o.kv) < 0)
		return cli_fail(2, "bench engine", "bad option value (see --help)");
	for (int i = 0; i < nplen; i++)
		if (plen[i] < 1 || plen[i] + 2 > o.max_ctx)
			return cli_fail(2, "bench engine", "--prefill %d does not fit --ctx %d", plen[i], o.max_ctx);
	if (!ek_compiled())
		return cli_fail(1, "bench engine", "built without CUDA (reconfigure with -Dcuda=enabled)");
	if (ops) {
		struct rq_err e = {0};
		if (reps < 1 || pos < 0)
			return cli_fail(2, "bench engine", "--reps must be >= 1 and --pos >= 0");
		int ctx = ctx_set ? o.max_ctx : (pos + 2 + 1023) / 1024 * 1024;
		if (bench_engine_ops(o.device, ops, pos, ctx, reps, json, &e))
			return cli_fail(1, "bench engine", "%s", e.msg);
		return 0;
	}
	for (int i = 0; i < nat; i++)
		if (at[i] < 0 || at[i] + 2 > o.max_ctx)
			return cli_fail(2, "bench engine", "--decode-at %d does not fit --ctx %d", at[i],
			                o.max_ctx);
	if (logits_out && !nat)
		return cli_fail(2, "bench engine", "--logits-out needs --decode-at");

	struct rq_err err = {0};
	struct lg_model *m = NULL;
	static char cfg[32768];
	int synth = !model, rc;
	if (synth) {
		bench_laguna_config(cfg, sizeof cfg, layers, experts);
		rc = bench_synth_model(cfg, 1, &m, &err);
	} else {
		rc = lg_model_open(model, &m, &err);
	}
	if (rc)
		return cli_fail(1, "bench engine", "%s", err.msg);
	printf("bench engine --device cuda: %s, %d layers (%d experts, top-%d), context %d, KV %s\n",
	       synth ? "synthetic Laguna S 2.1 shapes" : model, m->cfg.n_layers, m->cfg.n_experts,
	       m->cfg.top_k, o.max_ctx, o.kv ? o.kv : "bf16");
	if (nat) {
		rc = decode_at(m, &o, steps, at, nat, logits_out, &err);
		synth ? bench_synth_free(m) : lg_model_close(m);
		return rc ? cli_fail(1, "bench engine", "%s", err.msg) : 0;
	}
	struct run r = {0}, r2 = {0};
	int at1 = 1024 < o.max_ctx - 2 ? 1024 : o.max_ctx - 2;
	rc = measure(m, &o, steps, plen, nplen, at1, 1, &r, &err);
	if (rc) {
		synth ? bench_synth_free(m) : lg_model_close(m);
		return cli_fail(1, "bench engine", "%s", err.msg);
	}
	for (int i = 0; i < nplen; i++)
		printf("prefill %5d tokens: %9.0f tokens/s\n", plen[i], r.prefill_tps[i]);
	double d2d = r.d2d_gbs;
	double gbs = (r.bytes_tok + r.kv_tok) / r.step_s / 1e9;
	printf("decode at position %d: %.3f ms/token, %.1f tokens/s; %.2f GB weights + %.3f GB KV per "
	       "token = %.0f GB/s, %.0f%% of the device copy bandwidth (%.0f GB/s)\n", r.pos,
	       r.step_s * 1e3, 1 / r.step_s, r.bytes_tok / 1e9, r.kv_tok / 1e9, gbs,
	       d2d > 0 ? 100 * gbs / d2d : 0.0, d2d);
	if (synth && layers >= 2) {
		struct lg_model *m2 = NULL, *m48 = NULL;
		bench_laguna_config(cfg, sizeof cfg, layers / 2, experts);
		rc = bench_synth_model(cfg, 1, &m2, &err);
		if (!rc)
			rc = measure(m2, &o, steps, plen, 0, at1, 0, &r2, &err);
		bench_laguna_config(cfg, sizeof cfg, 48, experts);
		if (!rc)
			rc = bench_synth_model(cfg, 1, &m48, &err);
		if (!rc) {
			double tl = (r.step_s - r2.step_s) / (layers - layers / 2), t0 = r.step_s - layers * tl;
			double t48 = t0 + 48 * tl, b48 = lg_model_token_bytes(m48);
			printf("extrapolated to 48 layers: %.3f ms/token (%.3f ms + 48 x %.3f ms), %.1f tokens/s; "
			       "%.2f GB per token: %.0f GB/s, %.0f%% of copy bandwidth; roofline at copy "
			       "bandwidth %.0f tokens/s\n", t48 * 1e3, t0 * 1e3, tl * 1e3, 1 / t48, b48 / 1e9,
			       b48 / t48 / 1e9, d2d > 0 ? 100 * b48 / t48 / 1e9 / d2d : 0.0,
			       d2d > 0 ? d2d * 1e9 / b48 : 0.0);
		} else {
			printf("extrapolation: %s\n", err.msg);
		}
		bench_synth_free(m2);
		bench_synth_free(m48);
	}
	synth ? bench_synth_free(m) : lg_model_close(m);
	if (formats && bench_engine_formats(o.device, reps, &err))
		return cli_fail(1, "bench engine", "%s", err.msg);
	return 0;
}
