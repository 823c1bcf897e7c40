/* cmd_export.c — `requantfs export SRC DST --calib CALIB [...]` (the Laguna
 * fix) and `requantfs export SRC DST --scheme S [--targets T] [--ignore I]`
 * (any checkpoint, a data-free compressed-tensors scheme). */
#include "cli/cli.h"
#include "cli/cli_scheme.h"
#include "cli/cli_hf.h"
#include "cli/export_hf.h"
#include "base/err.h"
#include "offline/export.h"
#include "plan/plan.h"
#include "cache/cache.h"
#include "qdev/qdev.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

static void usage(FILE *f)
{
	fprintf(f,
	"usage: requantfs export SRC DST --calib CALIB [--recipe fp32|bf16|fp32div]\n"
	"                        [--drop-ignore RULE] [--rule-scheme S]\n"
	"                        [--device auto|cpu|cuda[:N]] [--threads N]\n"
	"       requantfs export SRC DST --scheme S [--targets T]... [--ignore I]... [...]\n\n"
	"Writes the requantized checkpoint that `requantfs mount` presents as real files:\n"
	"the modules under the dropped quantization_config.ignore rule become NVFP4, every\n"
	"other file is copied byte for byte. DST must be new or empty; files appear under\n"
	"their names only once all of them are complete.\n\n"
	"With --scheme, SRC is any safetensors checkpoint and the modules are chosen as\n"
	"llm-compressor's model_free_ptq chooses them: every `<m>.weight` whose module m is\n"
	"targeted, not ignored, not a *norm and not quantized already (its weight BF16;\n"
	"F16/F32 where the scheme takes them). config.json gains a quantization_config\n"
	"(or a new group in an existing one); nothing is calibrated.\n\n"
	"  SRC                the 2026-08-01 checkpoint (a directory, a hub snapshot, or\n"
	"                     a hub repo id ORG/NAME[@REV] found in the local hub cache), or\n"
	"                     hf://ORG/NAME[@REV] read from the hub itself: REV pinned to its\n"
	"                     commit; each SRC file is fetched whole (16 MiB range requests\n"
	"                     in parallel) and checked against the hub's sha256 before any\n"
	"                     byte of it is used (a mismatch: fetched again once, then export\n"
	"                     fails naming the file), read from that copy, and dropped once\n"
	"                     written; the next SRC file is fetched while export works on\n"
	"                     one: at most 3 SRC files on disk at once, under\n"
	"                     <cache>/remote/ (--cache, the default cache), or with\n"
	"                     --no-cache in a temporary directory next to DST (no --link)\n"
	"                     (also --calib hf://ORG/NAME[@REV]: fetched as `calib fetch` does)\n"
	"  --endpoint URL     for hf://: the hub or mirror (default $HF_ENDPOINT, else\n"
	"                     https://huggingface.co)\n"
	"  --calib CALIB      the 2026-07-22 checkpoint directory (or repo id), or a file\n"
	"                     from `requantfs calib extract`/`fetch` (input_global_scale of\n"
	"                     each module) or from `requantfs calib run SRC` (calibrated here)\n"
	"  --recipe V         fp32 (default, poolside's bytes), bf16, fp32div\n"
	"  --drop-ignore RULE the ignore entry to drop (default: detected)\n"
	"  --rule-scheme S    what the rule's modules become: nvfp4 (default: NVFP4 with\n"
	"                     CALIB's input scales), nvfp4a16 (weights only) or fp8-dynamic;\n"
	"                     the last two need no --calib and add a config group whose\n"
	"                     targets are one anchored re: per layer\n"
	"  --scheme S         instead of the Laguna fix: nvfp4 (W4A4: NVFP4 weights and\n"
	"                     activations, as llm-compressor oneshot's NVFP4 preset; needs\n"
	"                     --calib FILE from `requantfs calib run SRC --text F -o FILE`),\n"
	"                     or a data-free nvfp4a16, fp8-dynamic, w8a16, w4a16\n"
	"  --observer O       how each group's range is chosen: minmax (default: the group's\n"
	"                     max |w|, today's bytes), mse (llm-compressor memoryless_mse) or\n"
	"                     expanded-mse (nvfp4_expanded_mse): a search for the range of\n"
	"                     least error, on BF16 weights with recipe bf16, on the CPU;\n"
	"                     config.json's weights name it; refused where it does not apply\n"
	"  --targets T        a module to quantize: a name, re:PATTERN (Python re.match)\n"
	"                     or Linear (every module; the default); repeat for more\n"
	"  --ignore I         a module to leave alone, same forms; repeat for more\n"
	"                     (default: lm_head, re:.*embed_tokens$, re:.*\\.gate$ - the\n"
	"                     embedding and MoE routers, which vLLM cannot load quantized;\n"
	"                     giving --ignore replaces the whole list, so --ignore lm_head\n"
	"                     alone selects what model_free_ptq(ignore=[\"lm_head\"]) does)\n"
	"                     a data-free --scheme takes no --calib (nothing to calibrate);\n"
	"                     a --scheme's default recipe is bf16 (llm-compressor on BF16)\n"
	"  --link[=symbolic|hard]  write only what differs from SRC (the rewritten shards,\n"
	"                     config.json, the index); every file identical to SRC becomes\n"
	"                     a link to it (symbolic: relative when SRC and DST share a\n"
	"                     parent directory, else absolute; a hub snapshot's files link\n"
	"                     to its blobs; hard: same file system only). DST keeps a\n"
	"                     manifest (" EXPORT_MANIFEST ") so `requantfs verify DST` can\n"
	"                     say which links no longer show the bytes exported: each\n"
	"                     linked file's size, inode, times and the XXH3-128 of its\n"
	"                     bytes (every linked file is read once to hash it)\n"
	"  --cache DIR        take requantized shards (and job outputs) already in this\n"
	"                     cache, verified, instead of quantizing again: a warmed mount's\n"
	"                     (default: the mount's default cache, when it exists)\n"
	"  --no-cache         quantize everything, read no cache\n"
	"  --device D         auto (default: CUDA if present), cpu, cuda, cuda:N\n"
	"  --threads N        CPU quantizer threads (default: all cores)\n"
	"  --quiet            no progress bar\n");
}

struct prog {
	struct cli_progress *bar;
	unsigned long long jobs;
};

static void on_progress(void *ctx, uint64_t jobs, uint64_t bytes)
{
	struct prog *pg = ctx;
	cli_progress_set(pg->bar, jobs, bytes);
}

/* A remote SRC (hf://) the plan reads through; outlives the plan. */
static struct export_hf *export_hf;
static char *export_store;    /* hf://: the cache whose remote/ holds the files fetched */

/* Export reads SRC file s no more: its fetched copy (hf://) is dropped. */
static void on_src_done(void *ctx, size_t s)
{
	const struct rq_plan *p = ctx;
	export_hf_done(export_hf, p->srcs[s].ridx);
}

_Static_assert(EXPORT_HF_HOLD == 3, "export --help and README say at most 3 SRC files");

/* The order export reads SRC files in: the next one is fetched meanwhile. */
static void on_src_order(void *ctx, const size_t *order, size_t n)
{
	const struct rq_plan *p = ctx;
	size_t *r = malloc((n ? n : 1) * sizeof *r);
	if (!r)
		return;                 /* no prefetch: each file fetched when reached */
	for (size_t k = 0; k < n; k++)
		r[k] = p->srcs[order[k]].ridx;
	export_hf_order(export_hf, r, n);
	free(r);
}

static void print_fetched(const char *label)
{
	struct export_hf_stats hs;
	export_hf_stats(export_hf, &hs);
	char b[32], r[32], m[32];
	cli_human_bytes((double)hs.bytes, b, sizeof b);
	cli_human_bytes(hs.seconds > 0 ? hs.bytes / hs.seconds : 0, r, sizeof r);
	cli_human_bytes((double)hs.held_max, m, sizeof m);
	fprintf(stderr, "requantfs export: fetched %zu SRC files of %s (%s in %.1f s, %s/s), each "
	        "checked against the hub's sha256 (or git blob id) before use (%llu hash "
	        "mismatches, each file fetched again once); %zu fetched ahead while export worked, "
	        "export waited %.1f s for fetches; at most %zu files (%s) on disk at once\n",
	        hs.files, label, b, hs.seconds, r, (unsigned long long)hs.refetches,
	        hs.prefetched, hs.waited, hs.held_files_max, m);
}

/* The cache export reads from: dir, else the default one when it exists
 * (a default cache that cannot be opened is only a warning: export then
 * quantizes). 0, or 1 after printing why an explicit --cache is refused. */
static int open_cache(const char *dir, struct rq_cache **out)
{
	char *def = dir ? NULL : cli_default_cache();
	struct stat st;
	if (!dir && (!def || stat(def, &st) < 0)) {
		free(def);
		return 0;
	}
	struct rq_cache_opts co = {.dir = dir ? dir : def};
	struct rq_err err = {0};
	int rc = rq_cache_open(&co, out, &err);
	if (rc && dir) {
		free(def);
		return cli_fail(1, "export", "--cache %s: %s", dir, err.msg);
	}
	if (rc)
		fprintf(stderr, "requantfs export: not reading the default cache (%s); quantizing "
		        "everything\n", err.msg);
	free(def);
	return 0;
}

static char *export_calib;    /* --calib hf://: the scales fetched into a temporary file */

/* sc: the scheme options, freed by cmd_export. */
static int export_main(int argc, char **argv, struct cli_scheme *sc)
{
	static const struct option opts[] = {
		CLI_SCHEME_OPTIONS, {"device", required_argument, 0, 'D'},
		{"threads", required_argument, 0, 't'}, {"quiet", no_argument, 0, 'q'},
		{"link", optional_argument, 0, 'L'}, {"cache", required_argument, 0, 'C'},
		{"no-cache", no_argument, 0, 'N'}, {"endpoint", required_argument, 0, 'e'},
		{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	const char *endpoint = NULL;
	struct rq_plan_opts po = {0};
	struct rq_quantizer_opts qo = {.device = "auto"};
	struct rq_export_opts eo = {0};
	const char *cache_dir = NULL;
	int quiet = 0, no_cache = 0, c, rc;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if ((rc = cli_scheme_option(sc, "export", c, optarg)) >= 0) {
			if (rc)
				return rc;
			continue;
		}
		switch (c) {
		case 'D': qo.device = optarg; break;
		case 't': qo.threads = atoi(optarg); break;
		case 'q': quiet = 1; break;
		case 'L':
			if (!optarg || !strcmp(optarg, "symbolic") || !strcmp(optarg, "sym"))
				eo.link = RQ_LINK_SYMLINK;
			else if (!strcmp(optarg, "hard"))
				eo.link = RQ_LINK_HARD;
			else
				return cli_fail(2, "export", "--link=%s: expected --link, --link=symbolic or "
				                "--link=hard", optarg);
			break;
		case 'C': cache_dir = optarg; break;
		case 'e': endpoint = optarg; break;
		case 'N': no_cache = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (argc - optind != 2) {
		usage(stderr);
		return 2;
	}
	if ((rc = cli_scheme_check(sc, "export", "--calib is required: the 2026-07-22 checkpoint, "
	                           "or the file of `requantfs calib fetch` (its scales over HTTP) "
	                           "or of `requantfs calib run SRC --text FILE -o FILE` (calibrated "
	                           "here); or --rule-scheme nvfp4a16|fp8-dynamic (no calibration), "
	                           "or a data-free --scheme")) >= 0)
		return rc;
	CLI_SCHEME_TO(&po, sc);
	int laguna = po.scheme == RQ_SCHEME_NVFP4;
	po.src = argv[optind];
	const char *dst = argv[optind + 1];
	struct rq_plan *p;
	if (no_cache && cache_dir)
		return cli_fail(2, "export", "--cache and --no-cache: pick one");
	if (cli_hf_is(po.src) && eo.link)   /* before anything is fetched or planned */
		return cli_fail(2, "export", "--link: SRC %s is remote, there is nothing on disk to "
		                "link to: export it without --link (or `hf download` it and export "
		                "that snapshot with --link)", po.src);
	if (cli_hf_is(po.src)) {     /* closed by cmd_export, after the plan is freed */
		struct rq_err herr = {0};
		struct stat cst;
		/* the files fetched live in the cache export reads (as a mount's), else
		 * in a temporary directory next to DST */
		if (!no_cache && !(export_store = cache_dir ? strdup(cache_dir) : cli_default_cache()))
			return cli_fail(1, "export", "out of memory");
		if (export_store && !cache_dir && stat(export_store, &cst) < 0) {
			free(export_store);
			export_store = NULL;
		}
		struct export_hf_opts ho = {.spec = po.src, .endpoint = endpoint,
		                            .cache_dir = export_store, .dst = argv[optind + 1],
		                            .quiet = quiet};
		if (export_hf_open(&ho, &export_hf, &herr))
			return cli_fail(1, "export", "%s", herr.msg);
		po.reader = export_hf_reader(export_hf);
		po.src = po.reader->label;
	} else if (endpoint && !cli_hf_is(po.calib)) {
		return cli_fail(2, "export", "--endpoint is for an hf://ORG/NAME[@REV] SRC or --calib");
	}
	if (cli_hf_is(po.calib)) {   /* unlinked by cmd_export */
		struct rq_err herr = {0};
		if (cli_hf_calib(po.calib, endpoint, &export_calib, &herr))
			return cli_fail(1, "export", "%s", herr.msg);
		po.calib = export_calib;
	}
	if ((rc = cli_scheme_plan("export", &po, &p)) >= 0)
		return rc;
	if (export_hf)
		export_hf_planned(export_hf);
	struct rq_err err = {0};
	struct rq_cache *cache = NULL;
	if (!no_cache && open_cache(cache_dir, &cache)) {
		rq_plan_free(p);
		return 1;
	}
	struct rq_quantizer *q;
	if (rq_quantizer_open(&qo, &q, &err)) {
		rq_cache_close(cache);
		rq_plan_free(p);
		return cli_fail(1, "export", "%s", err.msg);
	}
	if (rq_quantizer_fallback_reason(q))
		fprintf(stderr, "requantfs export: %s\n", rq_quantizer_fallback_reason(q));
	uint64_t qbytes = 0;
	for (size_t j = 0; j < p->njobs; j++)
		qbytes += p->jobs[j].in_size;
	if (laguna)
		fprintf(stderr, "requantfs export: dropping ignore rule %s: %zu modules in %zu jobs "
		        "(%.2f GB of BF16) as %s on %s, recipe %s\n", p->dropped_rule, p->nmods,
		        p->njobs, qbytes / 1e9, rq_scheme_name(p->mod_scheme), rq_quantizer_device(q),
		        rq_recipe_name(p->mod_recipe));
	else
		fprintf(stderr, "requantfs export: scheme %s: %zu modules in %zu jobs (%.2f GB in) "
		        "on %s, recipe %s, %zu ignore entries removed\n", rq_scheme_name(p->scheme),
		        p->nmods, p->njobs, qbytes / 1e9, rq_quantizer_device(q),
		        rq_recipe_name(p->recipe), p->ndropped);
	if (p->observer != RQ_OBSERVER_MINMAX)
		fprintf(stderr, "requantfs export: observer %s (llm-compressor %s): its search runs "
		        "on the GPU when the quantizer has one, the rest of each job on the CPU\n",
		        rq_observer_name(p->observer), rq_observer_llmc(p->observer));
	struct prog pg = {.bar = quiet ? NULL : cli_progress_start("export", p->njobs,
	                                                             p->total_size, 0)};
	struct rq_export_stats st;
	eo.cache = cache;
	eo.progress = on_progress;
	eo.ctx = &pg;
	if (export_hf) {
		eo.src_done = on_src_done;
		eo.src_order = on_src_order;
		eo.src_ctx = p;
	}
	rc = rq_export(p, q, dst, &eo, &st, &err);
	cli_progress_end(pg.bar);
	if (export_hf)
		print_fetched(po.src);
	if (rc) {
		cli_fail(1, "export", "%s", err.msg);
	} else {
		char w[32], l[32];
		cli_human_bytes((double)st.bytes_written, w, sizeof w);
		cli_human_bytes((double)st.bytes_linked, l, sizeof l);
		fprintf(stderr, "requantfs export: wrote %zu files (%s)", st.files_written, w);
		if (eo.link)
			fprintf(stderr, ", linked %zu files (%s) to SRC", st.files_linked, l);
		fprintf(stderr, " in %s; %zu jobs quantized, %zu jobs and %zu files taken from the "
		        "cache\n", dst, st.jobs_run, st.jobs_from_cache, st.files_from_cache);
	}
	rq_cache_close(cache);
	rq_quantizer_close(q);
	rq_plan_free(p);
	return rc ? 1 : 0;
}

int cmd_export(int argc, char **argv)
{
	struct cli_scheme sc = {0};
	int rc = export_main(argc, argv, &sc);
	cli_scheme_free(&sc);
	export_hf_close(export_hf);   /* its fetched files dropped */
	export_hf = NULL;
	free(export_store);
	export_store = NULL;
	if (export_calib)
		unlink(export_calib);
	free(export_calib);
	export_calib = NULL;
	return rc;
}
