/* compare_schemes.c — `requantfs compare SRC --schemes all --text FILE`:
 * pick a scheme by measurement before serving.
 *
 * SRC (BF16 or any checkpoint the mount takes) is the reference: its logits
 * on the text window are computed once. Then for each scheme, SRC is mounted
 * with it (`requantfs mount SRC MNT --scheme S` in a temporary directory, with
 * a temporary cache, so nothing of the user's cache is touched or counted),
 * the engine reads the model through the mount as vLLM would, and one table
 * row gives what the mount presents (bytes of its files), what the cache had
 * to hold (disk blocks of the temporary cache after the run), and the
 * quality measured by compare_text.c. The mount is unmounted and the
 * temporary directory removed after each row, on failure too.
 *
 * nvfp4 (W4A4) needs input activation scales. Decision: --calib FILE is used
 * as given; --calib-text FILE calibrates (`requantfs calib run`) on FILE's
 * first --calib-tokens tokens (FILE must not be the --text file); with
 * neither, on the --calib-tokens tokens that FOLLOW the evaluation window in
 * the --text file (`calib run --skip`), so no evaluated token is ever a
 * calibration token; a file too short for that is refused before anything
 * runs, saying to pass --calib or --calib-text. What was used is printed
 * in the table's header.
 *
 * A Laguna 08-01 SRC (the Laguna fix applies): the rows are the fix's
 * --rule-scheme choices (nvfp4, nvfp4a16, fp8-dynamic), mounted with
 * `mount --rule-scheme S`; nvfp4's scales come from --calib, required as
 * mount requires it.
 *
 * --observers LIST: one row per scheme and observer, named "scheme/observer",
 * each mounted with `--observer O`. A pair that rq_observer_ok refuses (the
 * Laguna fix's own nvfp4, a rule scheme on its fp32 recipe) is a row saying so;
 * W4A4's rows share one calibration file (the activations' observer does not
 * depend on the weights'). */
#include "cli/compare_schemes.h"
#include "cli/compare_text.h"
#include "cli/cli.h"
#include "cli/cli_scheme.h"
#include "base/err.h"
#include "engine/model/model.h"
#include "plan/plan.h"

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *const all_schemes[] = {"nvfp4a16", "nvfp4", "fp8-dynamic", "w8a16", "w4a16"};
static const char *const rule_schemes[] = {"nvfp4", "nvfp4a16", "fp8-dynamic"};
#define NALL (int)(sizeof all_schemes / sizeof *all_schemes)
#define NRULE (int)(sizeof rule_schemes / sizeof *rule_schemes)

static unsigned long long walk_sum;
static int walk_blocks;            /* 1: disk blocks (cache), 0: file sizes (presented) */

static int add_entry(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	if (flag == FTW_D && !strcmp(path + f->base, ".requantfs"))
		return FTW_SKIP_SUBTREE;   /* the mount's control files */
	if (flag == FTW_F)
		walk_sum += walk_blocks ? (unsigned long long)st->st_blocks * 512
		                        : (unsigned long long)st->st_size;
	return FTW_CONTINUE;
}

/* Bytes under dir: file sizes, or disk blocks; links followed (a hub
 * snapshot's files are links to its blobs) or not. */
static unsigned long long tree_bytes(const char *dir, int blocks, int follow)
{
	walk_sum = 0;
	walk_blocks = blocks;
	nftw(dir, add_entry, 16, (follow ? 0 : FTW_PHYS) | FTW_ACTIONRETVAL);
	return walk_sum;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	return remove(path) && errno != ENOENT ? -1 : 0;
}

static void rm_tree(const char *dir)
{
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int name_w = 12;            /* the first column: 12, or 25 with --observers */

static void row(const char *name, double presented, double cache, const struct ct_result *r, int ref)
{
	char p[32], c[32] = "-";
	cli_human_bytes(presented, p, sizeof p);
	if (cache >= 0)
		cli_human_bytes(cache, c, sizeof c);
	if (ref)
		printf("%-*s %11s %11s %10.4f %10s %10s %7s\n", name_w, name, p, c, r->ppl_a, "-", "-",
		       "-");
	else
		printf("%-*s %11s %11s %10.4f %10.3e %10.3e %6.2f%%\n", name_w, name, p, c, r->ppl_b,
		       r->kl_mean, r->kl_p99, 100 * r->top1);
	fflush(stdout);
}

static int is_w4a4(const char *scheme)
{
	return !strcmp(scheme, "nvfp4");
}

/* The scheme and recipe a row's jobs run (a Laguna rule scheme: the fix's fp32
 * recipe, fp8-dynamic's bf16). */
static void row_scheme(const struct cs_opts *o, const char *scheme, enum rq_scheme *s,
                       enum rq_recipe *r)
{
	*s = RQ_SCHEME_NVFP4;
	if (!(o->laguna && is_w4a4(scheme)))
		rq_scheme_parse(scheme, s);
	*r = o->laguna && *s != RQ_SCHEME_FP8_DYNAMIC ? rq_scheme_default_recipe(RQ_SCHEME_NVFP4)
	                                              : rq_scheme_default_recipe(*s);
}

/* One scheme with one observer: mount, score, measure, unmount, clean up.
 * cal: the calibration file for nvfp4. */
static int one_scheme(const struct cs_opts *o, const char *scheme, enum rq_observer obs,
                      const char *cal, const char *tmp, struct rq_pool *pool, const float *ref,
                      const int *tok, int n, struct rq_err *err)
{
	char name[64];
	if (o->nobs)
		snprintf(name, sizeof name, "%s/%s", scheme, rq_observer_name(obs));
	else
		snprintf(name, sizeof name, "%s", scheme);
	enum rq_scheme sc;
	enum rq_recipe rcp;
	row_scheme(o, scheme, &sc, &rcp);
	if (rq_observer_ok(sc, rcp, RQ_SRC_BF16, obs)) {
		char ok[64];
		printf("%-*s not applicable: %s %s takes --observer %s\n", name_w, name,
		       o->laguna ? "--rule-scheme" : "--scheme", scheme, cli_observers_for(sc, rcp, ok,
		       sizeof ok));
		return 0;
	}
	char base[PATH_MAX - 16], mnt[PATH_MAX], cache[PATH_MAX];
	snprintf(base, sizeof base, "%s/requantfs-compare-XXXXXX", tmp);
	if (!mkdtemp(base))
		return rq_errf(err, -errno, "%s: cannot make a temporary directory: %s", tmp,
		               strerror(errno));
	snprintf(mnt, sizeof mnt, "%s/mnt", base);
	snprintf(cache, sizeof cache, "%s/cache", base);
	int rc = 0, mounted = 0, k = 0;
	if (mkdir(mnt, 0700) || mkdir(cache, 0700)) {
		rc = rq_errf(err, -errno, "%s: %s", base, strerror(errno));
		goto out;
	}
	char *margs[14] = {"mount", (char *)o->src, mnt, "--cache", cache};
	k = 5;
	margs[k++] = o->laguna ? "--rule-scheme" : "--scheme";
	margs[k++] = (char *)scheme;
	if (is_w4a4(scheme)) {
		margs[k++] = "--calib";
		margs[k++] = (char *)cal;
	}
	if (obs != RQ_OBSERVER_MINMAX) {
		margs[k++] = "--observer";
		margs[k++] = (char *)rq_observer_name(obs);
	}
	margs[k] = NULL;
	if (cli_run_self(margs)) {
		/* a scheme SRC's shapes do not allow (the mount said why on stderr):
		 * a row that says so, and the table goes on */
		printf("%-*s not mountable with this %s (requantfs mount's message above)\n", name_w,
		       name, o->laguna ? "rule scheme" : "scheme");
		goto out;
	}
	mounted = 1;
	struct lg_model *m = NULL;
	if ((rc = lg_model_open(mnt, &m, err)))
		goto out;
	struct ct_result r;
	rc = ct_score(m, pool, ref, tok, n, name, o->fast, &r, err);
	lg_model_close(m);
	if (!rc)
		row(name, (double)tree_bytes(mnt, 0, 0), (double)tree_bytes(cache, 1, 0), &r, 0);
out:
	if (mounted) {
		char *uargs[] = {"umount", mnt, NULL};
		if (cli_run_self(uargs) && !rc)
			rc = rq_errf(err, -EBUSY, "%s: could not unmount (requantfs umount %s)", mnt, mnt);
	}
	if (!mounted || !rc)
		rm_tree(base);
	return rc;
}

int cs_laguna(const char *src)
{
	/* the fix with a rule scheme that needs no CALIB, sizes only: it builds
	 * exactly when SRC has an ignore rule of BF16 modules to drop */
	struct rq_plan_opts po = {.src = src, .scheme = RQ_SCHEME_NVFP4,
	                          .rule_scheme = RQ_SCHEME_NVFP4A16, .no_scales = 1,
	                          .recipe = rq_scheme_default_recipe(RQ_SCHEME_NVFP4)};
	struct rq_err err = {0};
	struct rq_plan *p = NULL;
	if (rq_plan_build(&po, &p, &err))
		return 0;
	rq_plan_free(p);
	return 1;
}

int cs_parse(const char *list, struct cs_opts *o)
{
	static const char *picked[8];
	const char *const *names = o->laguna ? rule_schemes : all_schemes;
	int nn = o->laguna ? NRULE : NALL, k = 0;
	if (!strcmp(list, "all")) {
		for (int i = 0; i < nn; i++)
			picked[k++] = names[i];
	} else {
		static char buf[256];
		if (strlen(list) >= sizeof buf)
			return -EINVAL;
		strcpy(buf, list);
		for (char *s, *p = strtok_r(buf, ",", &s); p; p = strtok_r(NULL, ",", &s)) {
			int i = 0;
			while (i < nn && strcmp(p, names[i]))
				i++;
			if (i == nn || k == 8)
				return -EINVAL;
			picked[k++] = names[i];
		}
	}
	if (!k)
		return -EINVAL;
	o->schemes = picked;
	o->ns = k;
	return 0;
}

int cs_parse_observers(const char *list, struct cs_opts *o)
{
	char buf[128];
	int k = 0;
	if (!strcmp(list, "all")) {
		for (int i = 0; i < RQ_OBSERVER_COUNT; i++)
			o->observers[k++] = (enum rq_observer)i;
		o->nobs = k;
		return 0;
	}
	if (strlen(list) >= sizeof buf)
		return -EINVAL;
	strcpy(buf, list);
	for (char *s, *p = strtok_r(buf, ",", &s); p; p = strtok_r(NULL, ",", &s)) {
		enum rq_observer v;
		if (rq_observer_parse(p, &v) || k == RQ_OBSERVER_COUNT)
			return -EINVAL;
		for (int i = 0; i < k; i++)
			if (o->observers[i] == v)
				return -EINVAL;
		o->observers[k++] = v;
	}
	if (!k)
		return -EINVAL;
	o->nobs = k;
	return 0;
}

static int wants_calib(const struct cs_opts *o)
{
	for (int i = 0; i < o->ns; i++)
		if (is_w4a4(o->schemes[i]))
			return 1;
	return 0;
}

static int same_file(const char *a, const char *b)
{
	struct stat x, y;
	return !stat(a, &x) && !stat(b, &y) && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

int cs_check(const struct cs_opts *o, const struct tok *tk, struct rq_err *err)
{
	const char *what = o->laguna ? "--rule-scheme nvfp4 (the Laguna fix's input scales)"
	                             : "nvfp4 (W4A4)";
	if (o->calib && o->calib_text)
		return rq_errf(err, -EINVAL, "--calib and --calib-text are two ways to get nvfp4's "
		               "scales: give one");
	if (!wants_calib(o)) {
		if (o->calib || o->calib_text)
			return rq_errf(err, -EINVAL, "--%s is for the nvfp4 row only, and --schemes has "
			               "none: leave it out or add nvfp4", o->calib ? "calib" : "calib-text");
		return 0;
	}
	if (o->calib && access(o->calib, R_OK))
		return rq_errf(err, -EINVAL, "--calib %s: %s", o->calib, strerror(errno));
	if (o->laguna) {
		if (o->calib_text || !o->calib)
			return rq_errf(err, -EINVAL, "%s: the rule scheme nvfp4 needs --calib CALIB, as mount "
			               "does (a 07-22 checkpoint, `calib extract`'s file or `requantfs calib "
			               "run %s --text FILE -o calib.safetensors`'s); or leave nvfp4 out: "
			               "--schemes nvfp4a16,fp8-dynamic", o->src, o->src);
		return 0;
	}
	if (o->calib)
		return 0;
	if (o->calib_text) {
		if (same_file(o->calib_text, o->text))
			return rq_errf(err, -EINVAL, "--calib-text %s is the --text file: nvfp4 would be "
			               "calibrated on the evaluated tokens. Leave --calib-text out (compare "
			               "then calibrates on the tokens after the window) or give another "
			               "file", o->calib_text);
		return 0;
	}
	/* the tokens after the window: the file must hold calib_tokens more */
	int *t = NULL, n = 0;
	int rc = ct_window(o->text, tk, o->ntok + o->calib_tokens, &t, &n, err);
	free(t);
	if (rc)
		return rc;
	if (n < o->ntok + o->calib_tokens)
		return rq_errf(err, -EINVAL, "%s: calibrating %s needs --calib-tokens %d tokens after "
		               "the %d evaluated ones (never the evaluated tokens), and --text %s holds "
		               "%d in all. Pass --calib FILE (from requantfs calib run) or "
		               "--calib-text FILE (another text), or lower --tokens/--calib-tokens",
		               o->text, what, o->calib_tokens, o->ntok, o->text, n);
	return 0;
}

/* nvfp4's scales into dir/calib.safetensors by `requantfs calib run` (its
 * messages on stderr); prints which tokens. */
static int calibrate(const struct cs_opts *o, int n, const char *dir, char *out, size_t outsz,
                     struct rq_err *err)
{
	char skip[16], ntok[16];
	snprintf(out, outsz, "%s/calib.safetensors", dir);
	snprintf(skip, sizeof skip, "%d", n);
	snprintf(ntok, sizeof ntok, "%d", o->calib_tokens);
	const char *file = o->calib_text ? o->calib_text : o->text;
	char *args[14] = {"calib", "run", (char *)o->src, "--text", (char *)file, "--tokens", ntok,
	                  "-o", out, "--quiet"};
	if (!o->calib_text) {
		args[10] = "--skip";
		args[11] = skip;
	}
	if (o->calib_text)
		printf("calibration (nvfp4, W4A4): the first %d tokens of %s (--calib-text), by "
		       "requantfs calib run\n", o->calib_tokens, file);
	else
		printf("calibration (nvfp4, W4A4): tokens %d..%d of %s, the %d after the evaluated "
		       "window (disjoint from it), by requantfs calib run --skip %d\n", n,
		       n + o->calib_tokens - 1, file, o->calib_tokens, n);
	if (cli_run_self(args))
		return rq_errf(err, -EIO, "requantfs calib run %s --text %s failed (its message above): "
		               "pass --calib FILE to give the scales yourself", o->src, file);
	return 0;
}

int cs_run(const struct cs_opts *o, const struct lg_model *a, struct rq_pool *pool, const int *tok,
           int n, struct rq_err *err)
{
	const char *tmp = getenv("TMPDIR");
	if (!tmp || !*tmp)
		tmp = "/tmp";
	float *ref = NULL;
	char cdir[PATH_MAX - 32] = "", cal[PATH_MAX];
	int rc = ct_reference(a, pool, tok, n, &ref, err);
	if (rc)
		return rc;
	printf("SRC = %s%s\ntext = %s, %d tokens (%d predicted); KL(SRC||scheme) in nats\n", o->src,
	       o->laguna ? " (Laguna 08-01: the rows are the fix's --rule-scheme choices)" : "",
	       o->text, n, n - 1);
	if (wants_calib(o) && o->calib) {
		snprintf(cal, sizeof cal, "%s", o->calib);
		printf("calibration (%s): %s (--calib)\n", o->laguna ? "rule scheme nvfp4" :
		       "nvfp4, W4A4", o->calib);
	} else if (wants_calib(o)) {
		snprintf(cdir, sizeof cdir, "%s/requantfs-compare-calib-XXXXXX", tmp);
		if (!mkdtemp(cdir)) {
			rc = rq_errf(err, -errno, "%s: cannot make a temporary directory: %s", tmp,
			             strerror(errno));
			cdir[0] = 0;
			goto out;
		}
		if ((rc = calibrate(o, n, cdir, cal, sizeof cal, err)))
			goto out;
	}
	name_w = o->nobs ? 25 : 12;
	printf("\n%-*s %11s %11s %10s %10s %10s %7s\n", name_w, o->laguna ? "rule-scheme" : "scheme",
	       "presented", "cache", "ppl", "KL mean", "KL p99", "top-1");
	/* the reference row: SRC as it is */
	struct ct_result self = {.ppl_a = ct_ppl(ref, tok, n, a->cfg.vocab)};
	row("source", (double)tree_bytes(o->src, 0, 1), -1, &self, 1);
	for (int i = 0; i < o->ns && !rc; i++)
		for (int j = 0; j < (o->nobs ? o->nobs : 1) && !rc; j++)
			rc = one_scheme(o, o->schemes[i], o->nobs ? o->observers[j] : RQ_OBSERVER_MINMAX,
			                cal, tmp, pool, ref, tok, n, err);
out:
	if (cdir[0])
		rm_tree(cdir);
	free(ref);
	return rc;
}
