/* cmd_export.c — `requantfs export SRC DST --calib CALIB [...]`. */
#include "tools/cli.h"
#include "base/err.h"
#include "fs/export.h"
#include "fs/plan.h"
#include "qdev/qdev.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
	fprintf(f,
	"usage: requantfs export SRC DST --calib CALIB [--recipe fp32|bf16|fp32div]\n"
	"                        [--drop-ignore RULE] [--device auto|cpu|cuda[:N]] [--threads N]\n\n"
	"Writes the requantized checkpoint that `requantfs mount` presents as real files:\n"
	"the modules under the dropped quantization_config.ignore rule become NVFP4, every\n"
	"other file is copied byte for byte. DST must be new or empty; files appear under\n"
	"their names only once all of them are complete.\n\n"
	"  SRC                the 2026-08-01 checkpoint (a directory, a hub snapshot, or\n"
	"                     a hub repo id ORG/NAME[@REV] found in the local hub cache)\n"
	"  --calib CALIB      the 2026-07-22 checkpoint directory (or repo id), or a file\n"
	"                     from `requantfs calib extract` (input_global_scale of each module)\n"
	"  --recipe V         fp32 (default, poolside's bytes), bf16, fp32div\n"
	"  --drop-ignore RULE the ignore entry to drop (default: detected)\n"
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

int cmd_export(int argc, char **argv)
{
	static const struct option opts[] = {
		{"calib", required_argument, 0, 'c'}, {"recipe", required_argument, 0, 'r'},
		{"drop-ignore", required_argument, 0, 'd'}, {"device", required_argument, 0, 'D'},
		{"threads", required_argument, 0, 't'}, {"quiet", no_argument, 0, 'q'},
		{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	struct rq_plan_opts po = {.recipe = RQ_RECIPE_FP32};
	struct rq_quantizer_opts qo = {.device = "auto"};
	int quiet = 0, c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'c': po.calib = optarg; break;
		case 'r':
			if (rq_recipe_parse(optarg, &po.recipe))
				return cli_fail(2, "export", "--recipe %s: expected fp32, bf16 or fp32div", optarg);
			break;
		case 'd': po.drop_rule = optarg; break;
		case 'D': qo.device = optarg; break;
		case 't': qo.threads = atoi(optarg); break;
		case 'q': quiet = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (argc - optind != 2) {
		usage(stderr);
		return 2;
	}
	if (!po.calib)
		return cli_fail(2, "export", "--calib is required: the 2026-07-22 checkpoint directory "
		                "or a file from `requantfs calib extract`");
	po.src = argv[optind];
	const char *dst = argv[optind + 1];
	int hc = cli_hub_args("export", &po.src, &po.calib);   /* ORG/NAME[@REV] ids */
	if (hc >= 0)
		return hc;
	struct rq_err err = {0};
	struct rq_plan *p;
	if (rq_plan_build(&po, &p, &err))
		return cli_fail(1, "export", "%s", err.msg);
	for (size_t i = 0; i < p->nskipped; i++)
		fprintf(stderr, "requantfs export: warning: %s\n", p->skipped[i]);
	struct rq_quantizer *q;
	if (rq_quantizer_open(&qo, &q, &err)) {
		rq_plan_free(p);
		return cli_fail(1, "export", "%s", err.msg);
	}
	if (rq_quantizer_fallback_reason(q))
		fprintf(stderr, "requantfs export: %s\n", rq_quantizer_fallback_reason(q));
	uint64_t qbytes = 0;
	for (size_t j = 0; j < p->njobs; j++)
		qbytes += p->jobs[j].in_size;
	fprintf(stderr, "requantfs export: dropping ignore rule %s: %zu modules in %zu jobs "
	        "(%.2f GB of BF16) on %s, recipe %s\n", p->dropped_rule, p->nmods, p->njobs,
	        qbytes / 1e9, rq_quantizer_device(q), rq_recipe_name(p->recipe));
	struct prog pg = {.bar = quiet ? NULL : cli_progress_start("export", p->njobs,
	                                                             p->total_size, 0)};
	int rc = rq_export(p, q, dst, on_progress, &pg, &err);
	cli_progress_end(pg.bar);
	if (rc)
		cli_fail(1, "export", "%s", err.msg);
	else
		fprintf(stderr, "requantfs export: wrote %zu files (%.2f GB) to %s\n", p->nfiles,
		        p->total_size / 1e9, dst);
	rq_quantizer_close(q);
	rq_plan_free(p);
	return rc ? 1 : 0;
}
