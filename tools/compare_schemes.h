/* compare_schemes.h — compare SRC --schemes LIST --text FILE: one table row per
 * scheme, each measured through a temporary mount of SRC. */
#ifndef RQ_TOOLS_COMPARE_SCHEMES_H
#define RQ_TOOLS_COMPARE_SCHEMES_H

struct lg_model;
struct rq_err;
struct rq_pool;

/* "all" or a comma list of data-free schemes -> a static array. -EINVAL for
 * an unknown name. */
int cs_parse(const char *list, const char ***out, int *n);

/* Prints the table: the SRC row (a, already open), then one row per scheme.
 * tok[0..n) is the text window (text_path names it in the header). */
int cs_run(const char *src, const struct lg_model *a, const char *const *schemes, int ns,
           struct rq_pool *pool, const int *tok, int n, const char *text_path,
           struct rq_err *err);

#endif
