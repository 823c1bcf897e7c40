/* pyre.h — Python `re` patterns (str patterns, Python 3.11 syntax) run by
 * PCRE2 with bounded work.
 *
 * A pattern is translated to PCRE2 syntax where the two differ (\Z -> \z,
 * \v -> \x0b, \xhh/\uhhhh/\Uhhhhhhhh/octal -> \x{...}, \s and \S ->
 * Python's str.isspace set, {,n} -> {0,n}, a '[' inside a class is
 * literal, the (?i) letters Python folds together and PCRE2 does not, the
 * u flag dropped; pyre_tr.c lists it all) and compiled with
 * PCRE2_UTF|PCRE2_UCP so that \d \w \b and case folding are Unicode-aware
 * as Python's are; '.' excludes only "\n" and '$' matches at the end or
 * before a final "\n", as in Python. Constructs whose meaning differs and
 * that are not translated are refused with the pattern named: the flags a,
 * L and x, \N{...}, a non-ASCII group name, "(*" verbs, PCRE2-only syntax
 * such as (?| (?R) (?& (?P> \K; so is what Python refuses that we notice
 * (bad escapes, global flags not at the start, a back-reference to an open
 * group). Known leniency: a look-behind whose alternatives differ in width
 * is accepted (PCRE2 takes it; Python refuses it).
 *
 * Any number of threads may match with one compiled pattern: it is
 * immutable (the match data is per thread).
 *
 * Matching is bounded: PCRE2's match limit (backtracking steps), depth limit
 * and heap limit below. Hitting one is an error (-ERANGE) naming the pattern
 * and the subject, never an answer: a pattern that backtracks
 * catastrophically, e.g. (a|aa)*$ or (x+x+)+y, makes the mount or plan fail
 * fast instead of spinning a core, and never silently matches or not.
 * A subject that is not valid UTF-8 is an error too (-EILSEQ): Python never
 * sees such a name. */
#ifndef RQ_PLAN_PYRE_H
#define RQ_PLAN_PYRE_H

struct rq_err;
struct rq_pyre;

#define RQ_PYRE_MATCH_LIMIT 1000000u   /* PCRE2 match() steps per subject */
#define RQ_PYRE_DEPTH_LIMIT 10000u     /* nested backtracking points */
#define RQ_PYRE_HEAP_LIMIT_KIB 65536u  /* backtracking frames, KiB */

enum rq_pyre_mode {
	RQ_PYRE_MATCH,    /* re.match: anchored at the start of the subject */
	RQ_PYRE_SEARCH,   /* re.search: a match anywhere */
};

/* Compiles pat. `shown` (NULL: pat) is how errors name it, e.g. the
 * config.json entry "re:PAT" as written. */
int rq_pyre_compile(struct rq_pyre **out, const char *pat, enum rq_pyre_mode mode,
                    const char *shown, struct rq_err *err);

/* 1 if subject matches, 0 if not, -ERANGE when a limit was hit, -EILSEQ for
 * a subject that is not UTF-8, -ENOMEM; errors name the pattern and subject. */
int rq_pyre_exec(const struct rq_pyre *re, const char *subject, struct rq_err *err);

void rq_pyre_free(struct rq_pyre *re);

/* The PCRE2 pattern pat translates to, in a new string (pyre_tr.c);
 * -EINVAL with the reason in err, naming `shown` (NULL: pat), for what is
 * refused. */
int rq_pyre_translate(const char *pat, const char *shown, char **out, struct rq_err *err);

#endif
