/* cli_scheme.h — the options that choose what `plan`, `export` and `mount`
 * quantize: --scheme S, --recipe V, --targets T, --ignore I (a data-free
 * compressed-tensors scheme; --scheme nvfp4 with --calib FILE) or --calib
 * CALIB, --drop-ignore RULE, --rule-scheme S (the Laguna fix), and --observer
 * O (how the weights' ranges are chosen). One parser and one set of refusals
 * for the three commands. */
#ifndef RQ_TOOLS_CLI_SCHEME_H
#define RQ_TOOLS_CLI_SCHEME_H

#include "plan/plan.h"

#include <getopt.h>
#include <stddef.h>

/* getopt_long values of the eight options (outside any short option). */
enum { CLI_O_SCHEME = 0x5c00, CLI_O_RECIPE, CLI_O_TARGETS, CLI_O_IGNORE, CLI_O_CALIB,
       CLI_O_DROP, CLI_O_RULE, CLI_O_OBSERVER };

/* Their entries, for a command's struct option table. */
#define CLI_SCHEME_OPTIONS                                                             \
	{"scheme", required_argument, 0, CLI_O_SCHEME},                                    \
	{"recipe", required_argument, 0, CLI_O_RECIPE},                                    \
	{"targets", required_argument, 0, CLI_O_TARGETS},                                  \
	{"ignore", required_argument, 0, CLI_O_IGNORE},                                    \
	{"calib", required_argument, 0, CLI_O_CALIB},                                      \
	{"drop-ignore", required_argument, 0, CLI_O_DROP},                                 \
	{"rule-scheme", required_argument, 0, CLI_O_RULE},                                 \
	{"observer", required_argument, 0, CLI_O_OBSERVER}

/* What they said. Zero-initialize; cli_scheme_free releases the lists.
 * The strings point into argv (or the caller's copies). */
struct cli_scheme {
	enum rq_scheme scheme;    /* --scheme; RQ_SCHEME_NVFP4 (0, none given): the Laguna fix */
	enum rq_recipe recipe;    /* --recipe; after cli_scheme_check, a scheme's default if none */
	int recipe_given;
	const char *calib;        /* --calib (the Laguna fix only) */
	const char *drop_rule;    /* --drop-ignore (the Laguna fix only) */
	enum rq_scheme rule_scheme;  /* --rule-scheme (the Laguna fix only); RQ_SCHEME_NVFP4 (0)
	                             when not given */
	int rule_given;
	enum rq_observer observer;   /* --observer; RQ_OBSERVER_MINMAX (0) when not given */
	const char **targets;     /* [ntargets] --targets values, in order (cap allocated) */
	size_t ntargets, targets_cap;
	const char **ignore;      /* [nignore] --ignore values, in order (cap allocated) */
	size_t nignore, ignore_cap;
};

/* Takes getopt_long's c with its arg for command cmd: -1 when c is none of
 * the eight (nothing done), 0 when taken, 2 with the usage error printed
 * ("requantfs <cmd>: --recipe must be ..."), 1 when out of memory. */
int cli_scheme_option(struct cli_scheme *s, const char *cmd, int c, const char *arg);

/* Checks the options against each other once all are parsed: --targets and
 * --ignore only with --scheme, --calib and --drop-ignore only without it,
 * --recipe one the scheme takes (its default when not given), --observer one the
 * jobs' scheme and recipe take (cli_scheme_observer_check). no_calib is
 * the message for the Laguna fix without --calib. -1 when they fit
 * together, else 2 with the message printed. */
int cli_scheme_check(struct cli_scheme *s, const char *cmd, const char *no_calib);

/* Copies the checked options into o, a struct rq_plan_opts or rq_mount_opts
 * (the same field names; the lists stay owned by s). */
#define CLI_SCHEME_TO(o, s) do {                                                       \
	(o)->scheme = (s)->scheme;                                                         \
	(o)->recipe = (s)->recipe;                                                         \
	(o)->calib = (s)->calib;                                                           \
	(o)->drop_rule = (s)->drop_rule;                                                   \
	(o)->rule_scheme = (s)->rule_scheme;                                               \
	(o)->observer = (s)->observer;                                                     \
	if ((s)->ntargets) {                                                               \
		(o)->targets = (s)->targets;                                                   \
		(o)->ntargets = (s)->ntargets;                                                 \
	}                                                                                  \
	if ((s)->nignore) {                                                                \
		(o)->ignore = (s)->ignore;                                                     \
		(o)->nignore = (s)->nignore;                                                   \
	}                                                                                  \
} while (0)

/* The plan of po for command cmd: hub repo ids in po->src and po->calib resolved
 * (cli_hub_args), rq_plan_build, its skipped-file warnings printed ("requantfs
 * <cmd>: warning: ..."). -1 with *out set (rq_plan_free it), else the exit code
 * with the message printed. */
int cli_scheme_plan(const char *cmd, struct rq_plan_opts *po, struct rq_plan **out);

/* Observer o for scheme sc with recipe r (the jobs' own: a Laguna --rule-scheme's), for
 * command cmd: -1 when rq_observer_ok takes it, else 2 with the refusal printed, naming
 * both and listing the observers that apply (what names the scheme in the message:
 * "--scheme", "--rule-scheme" or "the Laguna fix's"). compare uses it per scheme. */
int cli_scheme_observer_check(const char *cmd, const char *what, enum rq_scheme sc,
                              enum rq_recipe r, enum rq_observer o);
/* "minmax, mse or expanded-mse": the observers scheme sc with recipe r takes, into buf. */
const char *cli_observers_for(enum rq_scheme sc, enum rq_recipe r, char *buf, size_t len);

void cli_scheme_free(struct cli_scheme *s);   /* the lists; s itself is the caller's */

#endif
