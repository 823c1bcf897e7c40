/* pyre.c — Python re patterns on PCRE2, bounded (see pyre.h); the
 * translation is pyre_tr.c. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "plan/pyre.h"
#include "base/err.h"

#include <errno.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rq_pyre {
	pcre2_code *code;
	pcre2_match_context *mctx;   /* the limits; read-only after compile */
	char *shown;                 /* the pattern as errors name it */
};

/* ---- compile and match ----------------------------------------------- */

void rq_pyre_free(struct rq_pyre *re)
{
	if (!re)
		return;
	pcre2_code_free(re->code);
	pcre2_match_context_free(re->mctx);
	free(re->shown);
	free(re);
}

int rq_pyre_compile(struct rq_pyre **out, const char *pat, enum rq_pyre_mode mode,
                    const char *shown, struct rq_err *err)
{
	if (!shown)
		shown = pat;
	char *pp = NULL;
	int rc = rq_pyre_translate(pat, shown, &pp, err);
	if (rc)
		return rc;
	struct rq_pyre *re = calloc(1, sizeof *re);
	pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
	if (!re || !cc || !(re->shown = strdup(shown)) ||
	    !(re->mctx = pcre2_match_context_create(NULL))) {
		rc = -ENOMEM;
		goto fail;
	}
	pcre2_set_newline(cc, PCRE2_NEWLINE_LF);   /* '.' and '$' know only "\n", as Python */
	pcre2_set_match_limit(re->mctx, RQ_PYRE_MATCH_LIMIT);
	pcre2_set_depth_limit(re->mctx, RQ_PYRE_DEPTH_LIMIT);
	pcre2_set_heap_limit(re->mctx, RQ_PYRE_HEAP_LIMIT_KIB);
	uint32_t opt = PCRE2_UTF | PCRE2_UCP | PCRE2_ALT_CIRCUMFLEX | PCRE2_NEVER_BACKSLASH_C |
	               (mode == RQ_PYRE_MATCH ? PCRE2_ANCHORED : 0);
	int ec;
	PCRE2_SIZE eoff;
	re->code = pcre2_compile((PCRE2_SPTR)pp, PCRE2_ZERO_TERMINATED, opt, &ec, &eoff, cc);
	if (!re->code) {
		PCRE2_UCHAR m[256];
		pcre2_get_error_message(ec, m, sizeof m);
		rc = rq_errf(err, -EINVAL, "pattern '%s' does not compile: %s (PCRE2, at offset %zu "
		             "of its translation '%s'); fix the pattern", shown, (char *)m,
		             (size_t)eoff, pp);
		goto fail;
	}
	pcre2_compile_context_free(cc);
	free(pp);
	*out = re;
	return 0;
fail:
	pcre2_compile_context_free(cc);
	rq_pyre_free(re);
	free(pp);
	return rc;
}

/* One match data per thread, kept (it holds PCRE2's backtracking frames,
 * 20 KiB and up): a plan matches each rule against every module name. */
static pthread_key_t md_key;
static pthread_once_t md_once = PTHREAD_ONCE_INIT;
static int md_key_ok;

static void md_free(void *md)
{
	pcre2_match_data_free(md);
}

static void md_init(void)
{
	md_key_ok = pthread_key_create(&md_key, md_free) == 0;
}

int rq_pyre_exec(const struct rq_pyre *re, const char *subject, struct rq_err *err)
{
	pthread_once(&md_once, md_init);
	pcre2_match_data *md = md_key_ok ? pthread_getspecific(md_key) : NULL;
	if (!md && !(md = pcre2_match_data_create(1, NULL)))
		return -ENOMEM;
	size_t n = strlen(subject);
	int rc = pcre2_match(re->code, (PCRE2_SPTR)subject, n, 0, 0, md, re->mctx);
	size_t bad = rc < 0 ? (size_t)pcre2_get_startchar(md) : 0;   /* the bad UTF-8 byte */
	/* kept unless it grew on a failure (frames up to the heap limit) */
	if (rc >= PCRE2_ERROR_NOMATCH && md_key_ok && !pthread_setspecific(md_key, md))
		md = NULL;
	else if (md_key_ok)
		pthread_setspecific(md_key, NULL);
	pcre2_match_data_free(md);
	if (rc >= 0)
		return 1;
	if (rc == PCRE2_ERROR_NOMATCH)
		return 0;
	const char *more = n > 200 ? "..." : "";
	if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
	    rc == PCRE2_ERROR_HEAPLIMIT)
		return rq_errf(err, -ERANGE, "pattern '%s' on '%.200s%s' (%zu bytes) gave up at "
		               "PCRE2's %s limit (%u): it backtracks catastrophically (nested or "
		               "overlapping repetition such as (a+)+ or (a|aa)*); rewrite it, e.g. "
		               "with one repetition per position or a literal prefix", re->shown,
		               subject, more, n,
		               rc == PCRE2_ERROR_MATCHLIMIT ? "match" :
		               rc == PCRE2_ERROR_DEPTHLIMIT ? "depth" : "heap (KiB)",
		               rc == PCRE2_ERROR_MATCHLIMIT ? RQ_PYRE_MATCH_LIMIT :
		               rc == PCRE2_ERROR_DEPTHLIMIT ? RQ_PYRE_DEPTH_LIMIT :
		               RQ_PYRE_HEAP_LIMIT_KIB);
	if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21)
		return rq_errf(err, -EILSEQ, "pattern '%s': the name '%.200s%s' is not valid UTF-8 "
		               "(byte %zu); no Python loader could read it", re->shown, subject, more,
		               bad);
	if (rc == PCRE2_ERROR_NOMEMORY)
		return -ENOMEM;
	PCRE2_UCHAR m[256];
	pcre2_get_error_message(rc, m, sizeof m);
	return rq_errf(err, -EIO, "pattern '%s' on '%.200s%s': PCRE2 failed: %s", re->shown,
	               subject, more, (char *)m);
}
