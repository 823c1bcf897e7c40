/* cmd_generate.c — `requantfs generate MODEL_DIR --prompt TEXT ...`: run
 * Laguna on a prompt and stream the continuation to stdout; speeds on stderr. */
#include "tools/cli.h"
#include "base/err.h"
#include "base/pool.h"
#include "engine/chat.h"
#include "engine/forward.h"
#include "engine/forward_cuda.h"
#include "kernels/kquant.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/tokenizer.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(FILE *f)
{
	fprintf(f,
	"usage: requantfs generate MODEL_DIR --prompt TEXT [--chat] [--system S] [--no-think]\n"
	"                 [-n N] [--temperature T] [--top-k K] [--top-p P] [--seed S]\n"
	"                 [--threads N] [--device cpu|cuda|auto]\n\n"
	"Runs Laguna from MODEL_DIR (the mount, the source checkpoint or an export:\n"
	"BF16 or NVFP4 per tensor, as its headers say) on TEXT and streams the\n"
	"continuation to stdout; prompt and decode tokens/s go to stderr.\n\n"
	"  --prompt TEXT     the prompt (raw text, or the user message with --chat)\n"
	"  --chat            wrap TEXT in the poolside_v1 chat format with a generation prompt\n"
	"  --system S        system message (with --chat; default: the model's default prompt)\n"
	"  --no-think        chat generation prompt without thinking (<assistant></think>)\n"
	"  -n N              tokens to generate at most (default 256); stops at an EOS token\n"
	"  --temperature T   0 = greedy; default from generation_config.json\n"
	"  --top-k K         0 = off; default from generation_config.json\n"
	"  --top-p P         1 = off; default from generation_config.json\n"
	"  --seed S          sampling seed (default: from the clock, printed on stderr)\n"
	"  --threads N       CPU threads (default: all)\n"
	"  --device D        cpu, cuda or auto (default: cuda when a GPU is usable, else cpu)\n"
	"  --kv T            CUDA KV cache type: bf16 (default), f32, fp8\n");
}

static int num(const char *s, double lo, double hi, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= lo && v <= hi))
		return -1;
	*out = v;
	return 0;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int is_eos(const struct lg_model *m, int id)
{
	for (int i = 0; i < m->gen.n_eos; i++)
		if (m->gen.eos[i] == id)
			return 1;
	return 0;
}

int cmd_generate(int argc, char **argv)
{
	static const struct option opts[] = {
		{"prompt", required_argument, 0, 'p'}, {"chat", no_argument, 0, 'c'},
		{"system", required_argument, 0, 's'}, {"no-think", no_argument, 0, 'N'},
		{"temperature", required_argument, 0, 'T'}, {"top-k", required_argument, 0, 'k'},
		{"top-p", required_argument, 0, 'P'}, {"seed", required_argument, 0, 'S'},
		{"threads", required_argument, 0, 't'}, {"device", required_argument, 0, 'd'},
		{"kv", required_argument, 0, 'K'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	const char *prompt = NULL, *system = NULL, *device = "auto", *kv = NULL;
	int chat = 0, think = 1, n = 256, threads = 0, have_seed = 0;
	double temp = -1, top_p = -1, v;
	long top_k = -1;
	unsigned long long seed = 0;
	int c;
	while ((c = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
		switch (c) {
		case 'p': prompt = optarg; break;
		case 'c': chat = 1; break;
		case 's': system = optarg; break;
		case 'N': think = 0; break;
		case 'd': device = optarg; break;
		case 'K':
			if (lgc_kv_parse(optarg) < 0)
				return cli_fail(2, "generate", "--kv: expected bf16, f32 or fp8, got '%s'", optarg);
			kv = optarg;
			break;
		case 'n':
			if (num(optarg, 0, 1 << 24, &v))
				return cli_fail(2, "generate", "-n: expected a token count, got '%s'", optarg);
			n = (int)v;
			break;
		case 'T':
			if (num(optarg, 0, 1e6, &temp))
				return cli_fail(2, "generate", "--temperature: expected a number >= 0, got '%s'", optarg);
			break;
		case 'k':
			if (num(optarg, 0, 1 << 30, &v))
				return cli_fail(2, "generate", "--top-k: expected an integer >= 0, got '%s'", optarg);
			top_k = (long)v;
			break;
		case 'P':
			if (num(optarg, 1e-9, 1, &top_p))
				return cli_fail(2, "generate", "--top-p: expected a number in (0, 1], got '%s'", optarg);
			break;
		case 'S':
			if (num(optarg, 0, 1.8e19, &v))
				return cli_fail(2, "generate", "--seed: expected an integer >= 0, got '%s'", optarg);
			seed = strtoull(optarg, NULL, 10);
			have_seed = 1;
			break;
		case 't':
			if (num(optarg, 1, 4096, &v))
				return cli_fail(2, "generate", "--threads: expected a count >= 1, got '%s'", optarg);
			threads = (int)v;
			break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (argc - optind != 1 || !prompt) {
		usage(stderr);
		return 2;
	}
	if (strcmp(device, "cpu") && strcmp(device, "cuda") && strcmp(device, "auto"))
		return cli_fail(2, "generate", "--device: expected cpu, cuda or auto, got '%s'", device);
	if ((system || !think) && !chat)
		return cli_fail(2, "generate", "--system and --no-think need --chat");
	const char *dir = argv[optind];

	struct rq_err err = {0};
	struct lg_model *m = NULL;
	struct tok *tk = NULL;
	struct rq_pool *pool = NULL;
	struct lg_state *st = NULL;
	struct lgc *g = NULL;
	struct lg_sampler smp = {0};
	struct tok_ids ids = {0};
	struct tok_stream *ts = NULL;
	float *logits = NULL;
	char *text = NULL;
	int rc = 1;
	if (lg_model_open(dir, &m, &err)) {
		cli_fail(1, "generate", "%s", err.msg);
		goto out;
	}
	if (tok_load(dir, &tk, &err)) {
		cli_fail(1, "generate", "%s", err.msg);
		goto out;
	}
	int flags = TOK_ADD_SPECIAL;
	const char *in = prompt;
	size_t in_len = strlen(prompt);
	if (chat) {
		struct chat_msg msgs[2];
		size_t k = 0;
		if (system)
			msgs[k++] = (struct chat_msg){.role = "system", .content = system};
		msgs[k++] = (struct chat_msg){.role = "user", .content = prompt};
		if (chat_render(msgs, k, 1, think, &text, &in_len, &err)) {
			cli_fail(1, "generate", "%s", err.msg);
			goto out;
		}
		in = text;
		flags = 0;   /* the rendered text starts with its own BOS */
	}
	if (tok_encode(tk, in, in_len, flags, &ids) || ids.n == 0) {
		cli_fail(1, "generate", "could not tokenize the prompt");
		goto out;
	}

	/* sampling: the command line, else generation_config.json */
	float t = temp >= 0 ? (float)temp : m->gen.do_sample ? m->gen.temperature : 0.0f;
	int k = top_k >= 0 ? (int)top_k : m->gen.top_k;
	float p = top_p > 0 ? (float)top_p : m->gen.top_p;
	if (!have_seed)
		seed = (unsigned long long)time(NULL) ^ ((unsigned long long)clock() << 20);
	if (lg_sampler_init(&smp, m->cfg.vocab, t, k, p, seed)) {
		cli_fail(1, "generate", "bad sampling parameters (temperature %g, top-k %d, top-p %g)", t, k, p);
		goto out;
	}
	if (rq_pool_create(threads, &pool)) {
		cli_fail(1, "generate", "cannot start %d threads", threads);
		goto out;
	}
	int want_cuda = !strcmp(device, "cuda") || (!strcmp(device, "auto") && kq_device_count() > 0);
	if (want_cuda) {
		struct lgc_opts go = {.device = 0, .max_ctx = (int)ids.n + n + 1, .kv = kv};
		struct lgc_plan plan;
		char text_plan[1024];
		if (!lgc_plan_make(m, &go, &plan, &err)) {
			lgc_plan_text(&plan, text_plan, sizeof text_plan);
			fprintf(stderr, "%s\n", text_plan);
		}
		if (lgc_create(m, &go, &g, &err)) {
			if (!strcmp(device, "cuda")) {
				cli_fail(1, "generate", "%s", err.msg);
				goto out;
			}
			fprintf(stderr, "requantfs generate: CUDA engine unavailable (%s); using the CPU\n",
			        err.msg);
			g = NULL;
		} else {
			struct lgc_stats gs;
			lgc_stats(g, &gs);
			fprintf(stderr, "requantfs generate: weights uploaded: %.2f GB in %.2f s (%.2f GB/s)\n",
			        gs.upload_bytes / 1e9, gs.upload_s,
			        gs.upload_s > 0 ? gs.upload_bytes / gs.upload_s / 1e9 : 0.0);
		}
	}
	if (!g && lg_state_create(m, (int)ids.n + n + 1, 0, pool, &st, &err)) {
		cli_fail(1, "generate", "%s", err.msg);
		goto out;
	}
	logits = malloc(sizeof(float) * m->cfg.vocab);
	ts = tok_stream_new(tk, 0);
	if (!logits || !ts) {
		cli_fail(1, "generate", "out of memory");
		goto out;
	}
	int *prompt_ids = malloc(sizeof(int) * ids.n);
	if (!prompt_ids) {
		cli_fail(1, "generate", "out of memory");
		goto out;
	}
	for (size_t i = 0; i < ids.n; i++)
		prompt_ids[i] = ids.v[i];
	double t0 = now();
	int frc = g ? lgc_forward(g, prompt_ids, (int)ids.n, logits, 1, &err)
	            : lg_forward(st, prompt_ids, (int)ids.n, logits, 1, &err);
	free(prompt_ids);
	if (frc) {
		cli_fail(1, "generate", "%s", err.msg);
		goto out;
	}
	double t1 = now();
	int made = 0;
	const char *piece;
	size_t plen;
	while (made < n) {
		int id = lg_sample(&smp, logits);
		made++;
		if (is_eos(m, id))
			break;
		if (!tok_stream_push(ts, id, &piece, &plen) && plen) {
			fwrite(piece, 1, plen, stdout);
			fflush(stdout);
		}
		if (made < n && (g ? lgc_forward(g, &id, 1, logits, 1, &err)
		                   : lg_forward(st, &id, 1, logits, 1, &err))) {
			cli_fail(1, "generate", "%s", err.msg);
			goto out;
		}
	}
	if (!tok_stream_flush(ts, &piece, &plen) && plen)
		fwrite(piece, 1, plen, stdout);
	printf("\n");
	fflush(stdout);
	double t2 = now();
	char where[64];
	if (g)
		snprintf(where, sizeof where, "cuda");
	else
		snprintf(where, sizeof where, "cpu, %d threads", rq_pool_size(pool));
	fprintf(stderr, "prompt: %zu tokens, %.1f tok/s; decode: %d tokens, %.2f tok/s "
	        "(%s, temperature %g, top-k %d, top-p %g, seed %llu)\n",
	        ids.n, ids.n / (t1 - t0), made, made > 1 ? (made - 1) / (t2 - t1) : 0.0,
	        where, t, k, p, seed);
	rc = 0;
out:
	tok_stream_free(ts);
	free(logits);
	free(text);
	tok_ids_free(&ids);
	lg_sampler_free(&smp);
	lg_state_free(st);
	lgc_free(g);
	rq_pool_destroy(pool);
	tok_free(tk);
	lg_model_close(m);
	return rc;
}
