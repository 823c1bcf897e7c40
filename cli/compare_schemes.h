/* compare_schemes.h — compare SRC --schemes LIST [--observers LIST] --text FILE:
 * one table row per scheme (x observer), each measured through a temporary mount
 * of SRC. Two kinds of SRC:
 * any checkpoint (rows = `mount --scheme S`), and a Laguna 08-01 checkpoint
 * that the Laguna fix applies to (rows = `mount --rule-scheme S`). */
#ifndef RQ_TOOLS_COMPARE_SCHEMES_H
#define RQ_TOOLS_COMPARE_SCHEMES_H

#include "quant/observer.h"

struct lg_model;
struct rq_err;
struct rq_pool;
struct tok;

/* What compare --schemes was asked. */
struct cs_opts {
	const char *src;           /* SRC directory (hub ids already resolved) */
	const char *text;          /* --text: the evaluation window's file */
	int ntok;                  /* --tokens: the window's length asked */
	const char *calib;         /* --calib FILE: for the nvfp4 row; NULL = calibrate */
	const char *calib_text;    /* --calib-text FILE: calibrate on its first tokens */
	int calib_tokens;          /* --calib-tokens N (calibration length) */
	const char *const *schemes;   /* set by cs_parse */
	int ns;
	enum rq_observer observers[RQ_OBSERVER_COUNT];   /* set by cs_parse_observers */
	int nobs;                  /* 0: --observers not given (minmax; rows named by scheme) */
	int laguna;                /* set by cs_laguna: the rows are --rule-scheme choices */
	int fast;                  /* --fast: the rows on the CPU engine's fast mode */
};

/* 1 when the Laguna fix applies to src (an ignore rule of BF16 modules that it
 * drops), else 0. Builds a size-only plan; nothing is read beyond headers. */
int cs_laguna(const char *src);

/* "all" or a comma list: for a Laguna SRC the --rule-scheme choices (nvfp4,
 * nvfp4a16, fp8-dynamic), else the schemes mount --scheme takes (nvfp4 =
 * W4A4 included). Sets o->schemes and o->ns; -EINVAL for an unknown name. */
int cs_parse(const char *list, struct cs_opts *o);

/* --observers: "all" or a comma list of minmax, mse, expanded-mse (each once).
 * Sets o->observers and o->nobs; -EINVAL for an unknown or repeated name. */
int cs_parse_observers(const char *list, struct cs_opts *o);

/* Checks the calibration options against the list before anything runs:
 * -EINVAL with err saying what to pass (a usage error), else 0. tk encodes
 * --text to see whether it holds calibration tokens after the window. */
int cs_check(const struct cs_opts *o, const struct tok *tk, struct rq_err *err);

/* Prints the table: the SRC row (a, already open), then one row per scheme.
 * tok[0..n) is the evaluation window. Calibrates first when a row needs it
 * and no --calib was given (calib run on tokens disjoint from the window). */
int cs_run(const struct cs_opts *o, const struct lg_model *a, struct rq_pool *pool, const int *tok,
           int n, struct rq_err *err);

#endif
