/* cli_scheme.c — --scheme/--recipe/--targets/--ignore/--calib/--drop-ignore/
 * --rule-scheme/--observer for plan, export and mount (cli_scheme.h). */
#include "cli/cli_scheme.h"
#include "cli/cli.h"
#include "base/err.h"
#include "base/grow.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int push(const char ***arr, size_t *n, size_t *cap, const char *v)
{
	if (RQ_GROW(*arr, *n, *cap, 8))
		return -ENOMEM;
	(*arr)[(*n)++] = v;
	return 0;
}

int cli_scheme_option(struct cli_scheme *s, const char *cmd, int c, const char *arg)
{
	switch (c) {
	case CLI_O_SCHEME:
		if (rq_scheme_parse(arg, &s->scheme))
			return cli_fail(2, cmd, "--scheme must be nvfp4 (W4A4, with --calib), nvfp4a16, "
			                "fp8-dynamic, w8a16 or w4a16 (got '%s'); give no --scheme, only "
			                "--calib, for the Laguna fix", arg);
		return 0;
	case CLI_O_RECIPE:
		if (rq_recipe_parse(arg, &s->recipe))
			return cli_fail(2, cmd, "--recipe must be fp32, bf16 or fp32div (got '%s')", arg);
		s->recipe_given = 1;
		return 0;
	case CLI_O_TARGETS:
	case CLI_O_IGNORE:
		if (c == CLI_O_TARGETS ? push(&s->targets, &s->ntargets, &s->targets_cap, arg)
		                       : push(&s->ignore, &s->nignore, &s->ignore_cap, arg))
			return cli_fail(1, cmd, "out of memory");
		return 0;
	case CLI_O_RULE:
		if (!strcmp(arg, "nvfp4"))
			s->rule_scheme = RQ_SCHEME_NVFP4;      /* the Laguna fix's own NVFP4 */
		else if (rq_scheme_parse(arg, &s->rule_scheme) ||
		         (s->rule_scheme != RQ_SCHEME_NVFP4A16 &&
		          s->rule_scheme != RQ_SCHEME_FP8_DYNAMIC))
			return cli_fail(2, cmd, "--rule-scheme must be nvfp4 (the default), nvfp4a16 or "
			                "fp8-dynamic (got '%s'): vLLM's MoE layers reject weight-only FP8 "
			                "and take no other of requantfs' schemes", arg);
		s->rule_given = 1;
		return 0;
	case CLI_O_OBSERVER:
		if (rq_observer_parse(arg, &s->observer))
			return cli_fail(2, cmd, "--observer must be minmax (the default), mse or "
			                "expanded-mse (got '%s')", arg);
		return 0;
	case CLI_O_CALIB: s->calib = arg; return 0;
	case CLI_O_DROP: s->drop_rule = arg; return 0;
	}
	return -1;
}

int cli_scheme_check(struct cli_scheme *s, const char *cmd, const char *no_calib)
{
	if (s->scheme == RQ_SCHEME_NVFP4) {
		if (s->ntargets || s->nignore)
			return cli_fail(2, cmd, "--targets/--ignore need --scheme (nvfp4a16, "
			                "fp8-dynamic, w8a16, w4a16); the Laguna fix requantizes what its "
			                "dropped ignore rule matched");
		/* --rule-scheme nvfp4a16/fp8-dynamic: no input scales, no CALIB needed */
		if (!s->calib && (!s->rule_given || s->rule_scheme == RQ_SCHEME_NVFP4))
			return cli_fail(2, cmd, "%s", no_calib);
		return cli_scheme_observer_check(cmd, s->rule_given ? "--rule-scheme" :
		                                 "the Laguna fix's", s->rule_scheme,
		                                 s->rule_scheme == RQ_SCHEME_FP8_DYNAMIC ?
		                                 RQ_RECIPE_BF16 : s->recipe, s->observer);
	}
	if (s->rule_given)
		return cli_fail(2, cmd, "--rule-scheme is for the Laguna fix only (no --scheme): it "
		                "chooses what the dropped ignore rule's modules become");
	if (s->scheme == RQ_SCHEME_NVFP4_W4A4 && !s->calib)
		return cli_fail(2, cmd, "--scheme nvfp4 (W4A4) needs --calib FILE with the input "
		                "activations' scales: run `requantfs calib run SRC --text FILE -o "
		                "calib.safetensors` first (or use --scheme nvfp4a16, weights only)");
	if (s->calib && s->scheme != RQ_SCHEME_NVFP4_W4A4)
		return cli_fail(2, cmd, "--calib is for the Laguna fix and --scheme nvfp4 only: "
		                "--scheme %s is data-free (no activation scales are copied), leave "
		                "--calib out", rq_scheme_name(s->scheme));
	if (s->drop_rule)
		return cli_fail(2, cmd, "--drop-ignore is for the Laguna fix only: with --scheme "
		                "the ignore entries matching newly quantized modules are removed");
	if (!s->recipe_given)
		s->recipe = rq_scheme_default_recipe(s->scheme);
	if (!rq_scheme_recipe_ok(s->scheme, s->recipe))
		return cli_fail(2, cmd, "--recipe %s does not apply to --scheme %s (use %s)",
		                rq_recipe_name(s->recipe), rq_scheme_name(s->scheme),
		                rq_recipe_name(rq_scheme_default_recipe(s->scheme)));
	return cli_scheme_observer_check(cmd, "--scheme", s->scheme, s->recipe, s->observer);
}

const char *cli_observers_for(enum rq_scheme sc, enum rq_recipe r, char *buf, size_t len)
{
	enum rq_observer ok[RQ_OBSERVER_COUNT];
	int n = 0;
	for (int o = 0; o < RQ_OBSERVER_COUNT; o++)
		if (!rq_observer_ok(sc, r, RQ_SRC_BF16, (enum rq_observer)o))
			ok[n++] = (enum rq_observer)o;
	size_t l = 0;
	buf[0] = 0;
	for (int i = 0; i < n && l < len; i++)
		l += (size_t)snprintf(buf + l, len - l, "%s%s", i == 0 ? "" : i == n - 1 ? " or " : ", ",
		                      rq_observer_name(ok[i]));
	return buf;
}

int cli_scheme_observer_check(const char *cmd, const char *what, enum rq_scheme sc,
                              enum rq_recipe r, enum rq_observer o)
{
	if (!rq_observer_ok(sc, r, RQ_SRC_BF16, o))
		return -1;
	char ok[64];
	cli_observers_for(sc, r, ok, sizeof ok);
	if (sc == RQ_SCHEME_NVFP4)
		return cli_fail(2, cmd, "--observer %s does not apply to the Laguna fix's own NVFP4 "
		                "(its fp32 recipe, which llm-compressor does not compute): it takes %s; "
		                "for an MSE search give --rule-scheme nvfp4a16 --recipe bf16 or "
		                "--rule-scheme fp8-dynamic", rq_observer_name(o), ok);
	return cli_fail(2, cmd, "--observer %s does not apply to %s %s with --recipe %s: it takes "
	                "%s (the MSE observers are llm-compressor's search on BF16 arithmetic: give "
	                "--recipe bf16 for them)", rq_observer_name(o), what, rq_scheme_name(sc),
	                rq_recipe_name(r), ok);
}

int cli_scheme_plan(const char *cmd, struct rq_plan_opts *po, struct rq_plan **out)
{
	int hc = cli_hub_args(cmd, &po->src, &po->calib);   /* ORG/NAME[@REV] ids */
	if (hc >= 0)
		return hc;
	struct rq_err err = {0};
	struct rq_plan *p;
	if (rq_plan_build(po, &p, &err))
		return cli_fail(1, cmd, "%s", err.msg);
	for (size_t i = 0; i < p->nskipped; i++)
		fprintf(stderr, "requantfs %s: warning: %s\n", cmd, p->skipped[i]);
	*out = p;
	return -1;
}

void cli_scheme_free(struct cli_scheme *s)
{
	free(s->targets);
	free(s->ignore);
	s->targets = s->ignore = NULL;
	s->ntargets = s->nignore = s->targets_cap = s->ignore_cap = 0;
}
