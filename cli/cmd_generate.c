/* cmd_generate.c — `requantfs generate MODEL_DIR --prompt TEXT ...`: run
 * Laguna on a prompt and stream the continuation to stdout; speeds on stderr. */
#include "cli/cli.h"
#include "cli/cli_hf.h"
#include "cli/utf8_stream.h"
#include "base/err.h"
#include "base/pool.h"
#include "engine/model/backend.h"
#include "engine/chat/chat.h"
#include "engine/model/forward_cuda.h"
#include "engine/model/model.h"
#include "engine/model/sampler.h"
#include "engine/tok/tokenizer.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(FILE *f)
{
	fprintf(f,
	"usage: requantfs generate MODEL_DIR --prompt TEXT [--chat] [--system S] [--no-think]\n"
	"                 [-n N | --max-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S]\n"
	"                 [--threads N] [--device cpu|cuda|auto] [--kv bf16|f32|fp8] [--fast]\n\n"
	"Runs the model in MODEL_DIR (a mount, a source checkpoint or an export; llama,\n"
	"mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe or laguna, as config.json\n"
	"says) on TEXT and streams the continuation to stdout, stopping at an EOS token of\n"
	"generation_config.json (else config.json); prompt and decode tokens/s go to\n"
	"stderr. MODEL_DIR may also be a hub repo id ORG/NAME[@REV] in the local hub\n"
	"cache. Each Linear is read as its headers say: BF16, NVFP4 or NVFP4A16, FP8\n"
	"(fp8-dynamic) or INT pack-quantized (w8a16, w4a16) on the CPU engine; the\n"
	"CUDA engine takes these too (INT only symmetric, 4 or 8 bits) and refuses the\n"
	"others (F16/F32, INT with zero points) naming the module (--device auto then\n"
	"runs on the CPU and says why).\n\n"
	"  --prompt TEXT     the prompt (raw text, or the user message with --chat)\n"
	"  --chat            render TEXT as a user message with the model's own chat template\n"
	"                    (chat_template.jinja or tokenizer_config.json) and a generation prompt\n"
	"  --system S        system message (with --chat; default: the template's own)\n"
	"  --no-think        enable_thinking=false for the template (Laguna: <assistant></think>)\n"
	"  -n, --max-tokens N  tokens to generate at most (default 256); stops at an EOS token\n"
	"  --temperature T   0 = greedy; default from generation_config.json\n"
	"  --top-k K         0 = off; default from generation_config.json\n"
	"  --top-p P         1 = off; default from generation_config.json\n"
	"  --seed S          sampling seed (default: from the clock, printed on stderr)\n"
	"  --threads N       CPU threads (default: all)\n"
	"  --device D        cpu, cuda or auto (default: cuda when a GPU is usable, else cpu)\n"
	"  --kv T            CUDA KV cache type: bf16 (default), f32, fp8\n"
	"  --fast            CPU engine: the fast mode (FMA kernels; logits within the\n"
	"                    tolerance of docs/engine.md, not the oracle's bits)\n");
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

/* The command line. */
struct gen_opts {
	const char *dir, *prompt, *system, *kv;
	enum lg_device device;
	int chat, think, n, threads, have_seed, fast;
	double temp, top_p;        /* < 0: generation_config.json's */
	long top_k;                /* < 0: generation_config.json's */
	unsigned long long seed;
};

/* Fills o from argv: -1 to go on, else the exit code (help, usage error). */
static int parse_args(int argc, char **argv, struct gen_opts *o)
{
	static const struct option opts[] = {
		{"prompt", required_argument, 0, 'p'}, {"chat", no_argument, 0, 'c'},
		{"system", required_argument, 0, 's'}, {"no-think", no_argument, 0, 'N'},
		{"temperature", required_argument, 0, 'T'}, {"top-k", required_argument, 0, 'k'},
		{"top-p", required_argument, 0, 'P'}, {"seed", required_argument, 0, 'S'},
		{"threads", required_argument, 0, 't'}, {"device", required_argument, 0, 'd'},
		{"kv", required_argument, 0, 'K'}, {"max-tokens", required_argument, 0, 'n'},
		{"fast", no_argument, 0, 'F'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	const char *device = "auto";
	double v;
	int c;
	*o = (struct gen_opts){.think = 1, .n = 256, .temp = -1, .top_p = -1, .top_k = -1};
	while ((c = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
		switch (c) {
		case 'p': o->prompt = optarg; break;
		case 'c': o->chat = 1; break;
		case 's': o->system = optarg; break;
		case 'N': o->think = 0; break;
		case 'F': o->fast = 1; break;
		case 'd': device = optarg; break;
		case 'K':
			if (lgc_kv_parse(optarg) < 0)
				return cli_fail(2, "generate", "--kv: expected bf16, f32 or fp8, got '%s'", optarg);
			o->kv = optarg;
			break;
		case 'n':
			if (num(optarg, 0, 1 << 24, &v))
				return cli_fail(2, "generate", "-n: expected a token count, got '%s'", optarg);
			o->n = (int)v;
			break;
		case 'T':
			if (num(optarg, 0, 1e6, &o->temp))
				return cli_fail(2, "generate", "--temperature: expected a number >= 0, got '%s'", optarg);
			break;
		case 'k':
			if (num(optarg, 0, 1 << 30, &v))
				return cli_fail(2, "generate", "--top-k: expected an integer >= 0, got '%s'", optarg);
			o->top_k = (long)v;
			break;
		case 'P':
			if (num(optarg, 1e-9, 1, &o->top_p))
				return cli_fail(2, "generate", "--top-p: expected a number in (0, 1], got '%s'", optarg);
			break;
		case 'S':
			if (num(optarg, 0, 1.8e19, &v))
				return cli_fail(2, "generate", "--seed: expected an integer >= 0, got '%s'", optarg);
			o->seed = strtoull(optarg, NULL, 10);
			o->have_seed = 1;
			break;
		case 't':
			if (num(optarg, 1, 4096, &v))
				return cli_fail(2, "generate", "--threads: expected a count >= 1, got '%s'", optarg);
			o->threads = (int)v;
			break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (argc - optind != 1 || !o->prompt) {
		usage(stderr);
		return 2;
	}
	if (lg_device_parse(device, &o->device))
		return cli_fail(2, "generate", "--device: expected cpu, cuda or auto, got '%s'", device);
	if (o->fast && o->device == LG_DEVICE_CUDA)
		return cli_fail(2, "generate", "--fast is the CPU engine's mode; drop it or use --device cpu");
	if ((o->system || !o->think) && !o->chat)
		return cli_fail(2, "generate", "--system and --no-think need --chat");
	o->dir = argv[optind];
	int hc = cli_hf_engine_refuse("generate", o->dir);
	return hc >= 0 ? hc : cli_hub_args("generate", &o->dir, NULL);   /* ORG/NAME[@REV] ids */
}

/* The prompt's token ids (rendered as a chat first with --chat; *text keeps
 * the rendering). */
static int encode_prompt(const struct gen_opts *o, const struct tok *tk, struct tok_ids *ids,
                         char **text, struct rq_err *err)
{
	int flags = TOK_ADD_SPECIAL;
	const char *in = o->prompt;
	size_t in_len = strlen(o->prompt);
	if (o->chat) {
		struct chat_msg msgs[2];
		size_t k = 0;
		if (o->system)
			msgs[k++] = (struct chat_msg){.role = "system", .content = o->system};
		msgs[k++] = (struct chat_msg){.role = "user", .content = o->prompt};
		struct chat_template *ct;
		int rc = chat_template_load(o->dir, &ct, err);
		if (rc)
			return rc;
		rc = chat_render(ct, msgs, k, 1, o->think, text, &in_len, err);
		chat_template_free(ct);
		if (rc)
			return rc;
		in = *text;
		flags = 0;   /* as apply_chat_template: the template writes any BOS itself */
	}
	if (tok_encode(tk, in, in_len, flags, ids) || ids->n == 0)
		return rq_errf(err, -EINVAL, "could not tokenize the prompt");
	return 0;
}

/* The engine --device asks for, with what it says about itself on stderr. */
static int open_backend(const struct gen_opts *o, const struct lg_model *m, struct rq_pool *pool,
                        int max_ctx, struct lg_backend **out)
{
	char plan[1024];
	struct rq_err err = {0};
	struct lg_backend_opts bo = {.device = o->device, .max_ctx = max_ctx, .pool = pool,
	                             .kv = o->kv, .fast = o->fast, .plan = plan,
	                             .plan_len = sizeof plan};
	int rc = lg_backend_open(m, &bo, out, &err);
	if (plan[0])
		fprintf(stderr, "%s\n", plan);
	if (rc)
		return cli_fail(1, "generate", "%s", err.msg);
	const struct lg_backend *b = *out;
	if (b->fallback[0])
		fprintf(stderr, "requantfs generate: CUDA engine unavailable (%s); using the CPU\n",
		        b->fallback);
	if (!strcmp(b->name, "cuda"))
		fprintf(stderr, "requantfs generate: weights uploaded: %.2f GB in %.2f s (%.2f GB/s)\n",
		        b->upload_bytes / 1e9, b->upload_s,
		        b->upload_s > 0 ? b->upload_bytes / b->upload_s / 1e9 : 0.0);
	return 0;
}

/* Writes a token's bytes to stdout as well-formed UTF-8 (u holds a character
 * split over tokens until its last byte; ill-formed bytes print U+FFFD). */
static int put_piece(struct utf8_stream *u, const char *piece, size_t plen)
{
	char buf[256], *out = plen <= 80 ? buf : malloc(UTF8_STREAM_OUT_MAX(plen));
	if (!out)
		return -ENOMEM;
	size_t n = utf8_stream_push(u, piece, plen, out);
	fwrite(out, 1, n, stdout);
	fflush(stdout);
	if (out != buf)
		free(out);
	return 0;
}

/* Prompt, then up to n sampled tokens streamed to stdout; *made counts them,
 * t[0..2] the clock at the start, after the prompt and at the end. */
static int run(struct lg_backend *b, const struct lg_model *m, const struct tok *tk,
               struct lg_sampler *smp, const struct tok_ids *ids, int n, int *made, double t[3],
               struct rq_err *err)
{
	float *logits = malloc(sizeof(float) * m->cfg.vocab);
	int *prompt_ids = malloc(sizeof(int) * ids->n);
	struct tok_stream *ts = tok_stream_new(tk, 0);
	int rc = -ENOMEM;
	if (!logits || !prompt_ids || !ts) {
		rq_errf(err, rc, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < ids->n; i++)
		prompt_ids[i] = ids->v[i];
	t[0] = now();
	if ((rc = b->forward(b, prompt_ids, (int)ids->n, logits, 1, err)))
		goto out;
	t[1] = now();
	const char *piece;
	size_t plen;
	struct utf8_stream u8 = {0};
	char tail[3];
	*made = 0;
	while (*made < n) {
		int id = lg_sample(smp, logits);
		(*made)++;
		if (is_eos(m, id))
			break;
		if (!tok_stream_push(ts, id, &piece, &plen) && plen &&
		    (rc = put_piece(&u8, piece, plen))) {
			rq_errf(err, rc, "out of memory");
			goto out;
		}
		if (*made < n && (rc = b->forward(b, &id, 1, logits, 1, err)))
			goto out;
	}
	if (!tok_stream_flush(ts, &piece, &plen) && plen && (rc = put_piece(&u8, piece, plen))) {
		rq_errf(err, rc, "out of memory");
		goto out;
	}
	fwrite(tail, 1, utf8_stream_end(&u8, tail), stdout);
	printf("\n");
	fflush(stdout);
	t[2] = now();
	rc = 0;
out:
	tok_stream_free(ts);
	free(prompt_ids);
	free(logits);
	return rc;
}

int cmd_generate(int argc, char **argv)
{
	struct gen_opts o;
	int rc = parse_args(argc, argv, &o);
	if (rc >= 0)
		return rc;
	struct rq_err err = {0};
	struct lg_model *m = NULL;
	struct tok *tk = NULL;
	struct rq_pool *pool = NULL;
	struct lg_backend *b = NULL;
	struct lg_sampler smp = {0};
	struct tok_ids ids = {0};
	char *text = NULL;
	rc = 1;
	/* the tokenizer and the chat template first: one they cannot take is
	 * refused before any shard is opened */
	if (tok_load(o.dir, &tk, &err) || encode_prompt(&o, tk, &ids, &text, &err) ||
	    lg_model_open(o.dir, &m, &err)) {
		cli_fail(1, "generate", "%s", err.msg);
		goto out;
	}

	/* sampling: the command line, else generation_config.json */
	float t = o.temp >= 0 ? (float)o.temp : m->gen.do_sample ? m->gen.temperature : 0.0f;
	int k = o.top_k >= 0 ? (int)o.top_k : m->gen.top_k;
	float p = o.top_p > 0 ? (float)o.top_p : m->gen.top_p;
	if (!o.have_seed)
		o.seed = (unsigned long long)time(NULL) ^ ((unsigned long long)clock() << 20);
	if (lg_sampler_init(&smp, m->cfg.vocab, t, k, p, o.seed)) {
		cli_fail(1, "generate", "bad sampling parameters (temperature %g, top-k %d, top-p %g)", t, k, p);
		goto out;
	}
	if (rq_pool_create(o.threads, &pool)) {
		cli_fail(1, "generate", "cannot start %d threads", o.threads);
		goto out;
	}
	if (open_backend(&o, m, pool, (int)ids.n + o.n + 1, &b))
		goto out;
	int made;
	double tm[3];
	if (run(b, m, tk, &smp, &ids, o.n, &made, tm, &err)) {
		cli_fail(1, "generate", "%s", err.msg);
		goto out;
	}
	char where[64];
	if (b->threads)
		snprintf(where, sizeof where, "%s, %d threads%s", b->name, b->threads,
		         o.fast ? ", fast mode" : "");
	else
		snprintf(where, sizeof where, "%s", b->name);
	fprintf(stderr, "prompt: %zu tokens, %.1f tok/s; decode: %d tokens, %.2f tok/s "
	        "(%s, temperature %g, top-k %d, top-p %g, seed %llu)\n",
	        ids.n, ids.n / (tm[1] - tm[0]), made, made > 1 ? (made - 1) / (tm[2] - tm[1]) : 0.0,
	        where, t, k, p, o.seed);
	rc = 0;
out:
	free(text);
	tok_ids_free(&ids);
	lg_sampler_free(&smp);
	lg_backend_close(b);
	rq_pool_destroy(pool);
	tok_free(tk);
	lg_model_close(m);
	return rc;
}
