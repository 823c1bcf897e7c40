/* test_job_key.c — the cache keys of a remote SRC (issue 20): a plan of
 * tests/data/tiny/llama (--scheme nvfp4a16) read through a source reader
 * that serves the files from disk and lists them with their sha256, as
 * hf:// does. A verified reader keys every job "src sha256:<sha>" and
 * nothing more (the descriptor a hub snapshot of the same bytes gets, so
 * warm caches stay shared); an unverified one (a --remote-verify none
 * mount) adds its line, so every job key and every changed file's key
 * differ: its entries are never taken by a verifying mount or export.
 * --observer (issue 32): a minmax plan's descriptors name no observer (the
 * keys of before --observer); mse and expanded-mse add "observer NAME
 * RQ_OBSERVER_VERSION", so the three key every job and changed file apart. TAP. */
#include "base/err.h"
#include "base/sha256.h"
#include "cache/cache.h"
#include "job/job.h"
#include "plan/plan.h"
#include "tests/tap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NF 2
static const char *names[NF] = {"config.json", "model.safetensors"};

struct dirsrc {
	char dir[4096];
	char sha[NF][65];
	struct rq_src_entry e[NF];
	int reads;
};

static int dir_read(void *ctx, size_t i, uint64_t off, uint64_t len, void *buf,
                    struct rq_err *err)
{
	struct dirsrc *d = ctx;
	char p[4200];
	snprintf(p, sizeof p, "%s/%s", d->dir, d->e[i].name);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	ssize_t r = fd < 0 ? -1 : pread(fd, buf, len, (off_t)off);
	if (fd >= 0)
		close(fd);
	d->reads++;
	return r == (ssize_t)len ? 0 : rq_errf(err, -EIO, "%s: cannot read", p);
}

static struct rq_plan *plan_obs(struct dirsrc *d, struct rq_src_reader *r, int unverified,
                                enum rq_observer obs)
{
	*r = (struct rq_src_reader){.label = "hf://test/tiny@0000000000000000000000000000000000000001",
	                            .nfiles = NF, .files = d->e, .ctx = d, .read = dir_read,
	                            .unverified = unverified};
	struct rq_plan_opts po = {.reader = r, .scheme = RQ_SCHEME_NVFP4A16, .observer = obs,
	                          .recipe = rq_scheme_default_recipe(RQ_SCHEME_NVFP4A16)};
	struct rq_plan *p = NULL;
	struct rq_err e = {0};
	int rc = rq_plan_build(&po, &p, &e);
	if (rc)
		printf("# plan: %s\n", e.msg);
	return rc ? NULL : p;
}

static struct rq_plan *plan_of(struct dirsrc *d, struct rq_src_reader *r, int unverified)
{
	return plan_obs(d, r, unverified, RQ_OBSERVER_MINMAX);
}

static int key_eq(const struct rq_cache_key *a, const struct rq_cache_key *b)
{
	char x[33], y[33];
	rq_cache_key_hex(a, x);
	rq_cache_key_hex(b, y);
	return !strcmp(x, y);
}

/* --observer: minmax (pv) names none; each MSE observer keys every job and changed file
 * apart from minmax and from the other. */
static void observer_keys(struct dirsrc *d, const struct rq_plan *pv)
{
	struct rq_src_reader r1, r2;
	struct rq_plan *pm = plan_obs(d, &r1, 0, RQ_OBSERVER_MSE);
	struct rq_plan *px = plan_obs(d, &r2, 0, RQ_OBSERVER_EXPANDED_MSE);
	TAP_OK(pm && px && pm->njobs == pv->njobs && px->njobs == pv->njobs,
	       "plans with --observer mse and expanded-mse: the same %zu jobs", pv->njobs);
	if (!pm || !px) {
		rq_plan_free(pm);
		rq_plan_free(px);
		return;
	}
	char wm[64], wx[64];
	snprintf(wm, sizeof wm, "\nobserver mse %d\n", RQ_OBSERVER_VERSION);
	snprintf(wx, sizeof wx, "\nobserver expanded-mse %d\n", RQ_OBSERVER_VERSION);
	size_t none = 0, named = 0, apart = 0;
	for (size_t j = 0; j < pv->njobs; j++) {
		struct rq_cache_key k0, k1, k2;
		char *d0 = NULL, *d1 = NULL, *d2 = NULL;
		if (!rq_job_key(pv, j, &k0, &d0) && !rq_job_key(pm, j, &k1, &d1) &&
		    !rq_job_key(px, j, &k2, &d2)) {
			none += !strstr(d0, "observer");
			named += strstr(d1, wm) && strstr(d2, wx);
			apart += !key_eq(&k0, &k1) && !key_eq(&k0, &k2) && !key_eq(&k1, &k2);
		}
		free(d0);
		free(d1);
		free(d2);
	}
	TAP_OK(none == pv->njobs, "minmax: no descriptor names an observer (keys as before "
	       "--observer; %zu of %zu)", none, pv->njobs);
	TAP_OK(named == pv->njobs, "mse / expanded-mse: each descriptor names its observer and "
	       "RQ_OBSERVER_VERSION %d (%zu of %zu)", RQ_OBSERVER_VERSION, named, pv->njobs);
	TAP_OK(apart == pv->njobs, "the three observers' job keys all differ (%zu of %zu jobs)",
	       apart, pv->njobs);
	size_t changed = 0, fdiff = 0;
	for (size_t i = 0; i < pv->nfiles; i++) {
		struct rq_cache_key f0, f1, f2;
		if (!pv->files[i].changed)
			continue;
		changed++;
		if (!rq_file_key(pv, i, &f0) && !rq_file_key(pm, i, &f1) && !rq_file_key(px, i, &f2) &&
		    !key_eq(&f0, &f1) && !key_eq(&f0, &f2) && !key_eq(&f1, &f2))
			fdiff++;
	}
	TAP_OK(changed > 0 && fdiff == changed, "and so do the materialized file keys (%zu of %zu)",
	       fdiff, changed);
	rq_plan_free(pm);
	rq_plan_free(px);
}

int main(void)
{
	const char *root = getenv("RQ_SOURCE_ROOT");
	struct dirsrc d = {0};
	snprintf(d.dir, sizeof d.dir, "%s/tests/data/tiny/llama", root && *root ? root : ".");
	for (int i = 0; i < NF; i++) {
		char p[4200];
		struct stat st;
		snprintf(p, sizeof p, "%s/%s", d.dir, names[i]);
		if (stat(p, &st) < 0) {
			printf("not ok 1 - %s: %s (set RQ_SOURCE_ROOT to the checkout)\n1..1\n", p,
			       strerror(errno));
			return 1;
		}
		d.e[i] = (struct rq_src_entry){.name = names[i], .size = (uint64_t)st.st_size};
		if (i == 1 && !sha256_file(p, d.sha[i]))   /* the LFS file has its sha256 */
			d.e[i].sha256 = d.sha[i];
	}
	TAP_OK(d.e[1].sha256 != NULL, "sha256 of model.safetensors");

	struct rq_src_reader rv, ru;
	struct rq_plan *pv = plan_of(&d, &rv, 0), *pu = plan_of(&d, &ru, 1);
	TAP_OK(pv && pu, "plans of the same files through a verified and an unverified reader");
	if (!pv || !pu)
		goto out;
	TAP_OK(pv->njobs > 0 && pv->njobs == pu->njobs, "%zu jobs each", pv->njobs);

	size_t same = 0, plain = 0, marked = 0;
	char want[100];
	snprintf(want, sizeof want, "src sha256:%s\ntensor ", d.sha[1]);
	for (size_t j = 0; j < pv->njobs; j++) {
		struct rq_cache_key kv, ku;
		char *dv = NULL, *du = NULL;
		if (rq_job_key(pv, j, &kv, &dv) || rq_job_key(pu, j, &ku, &du)) {
			free(dv);
			free(du);
			break;
		}
		same += key_eq(&kv, &ku);
		/* verified: the sha256 line straight before the tensor line, no other src line */
		plain += strstr(dv, want) && !strstr(dv, "unverified") && !strstr(dv, "remote:");
		marked += strstr(du, "src unverified ranges\n") != NULL;
		for (char *l = j == 0 ? dv : NULL, *nl; l && *l; l = nl + 1) {
			if (!(nl = strchr(l, '\n')))
				break;
			printf("# job 0, verified: %.*s\n", (int)(nl - l), l);
		}
		free(dv);
		free(du);
	}
	TAP_OK(same == 0, "every job key differs between the readers (%zu equal of %zu)", same,
	       pv->njobs);
	TAP_OK(plain == pv->njobs, "verified: each module keyed by \"src sha256:<its sha256>\" "
	       "alone, as a hub snapshot of the same bytes (%zu of %zu)", plain, pv->njobs);
	TAP_OK(marked == pu->njobs, "unverified: each descriptor says so (%zu of %zu)", marked,
	       pu->njobs);
	/* stable: the same plan keys the same way again */
	struct rq_cache_key a, b;
	TAP_OK(!rq_job_key(pv, 0, &a, NULL) && !rq_job_key(pv, 0, &b, NULL) && key_eq(&a, &b),
	       "a job key is the same when asked twice");

	size_t changed = 0, fdiff = 0;
	for (size_t i = 0; i < pv->nfiles; i++) {
		if (!pv->files[i].changed)
			continue;
		struct rq_cache_key fv, fu;
		changed++;
		if (!rq_file_key(pv, i, &fv) && !rq_file_key(pu, i, &fu) && !key_eq(&fv, &fu))
			fdiff++;
	}
	TAP_OK(changed > 0 && fdiff == changed, "the materialized file keys differ too (%zu of %zu "
	       "changed files)", fdiff, changed);
	observer_keys(&d, pv);
out:
	rq_plan_free(pv);
	rq_plan_free(pu);
	printf("1..%d\n", tap_n);
	return tap_failed ? 1 : 0;
}
