/* test_job_key.c — the cache keys of a remote SRC (issue 20): a plan of
 * tests/data/tiny/llama (--scheme nvfp4a16) read through a source reader
 * that serves the files from disk and lists them with their sha256, as
 * hf:// does. A verified reader keys every job "src sha256:<sha>" and
 * nothing more (the descriptor a hub snapshot of the same bytes gets, so
 * warm caches stay shared); an unverified one (a --remote-verify none
 * mount) adds its line, so every job key and every changed file's key
 * differ: its entries are never taken by a verifying mount or export. TAP. */
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

static struct rq_plan *plan_of(struct dirsrc *d, struct rq_src_reader *r, int unverified)
{
	*r = (struct rq_src_reader){.label = "hf://test/tiny@0000000000000000000000000000000000000001",
	                            .nfiles = NF, .files = d->e, .ctx = d, .read = dir_read,
	                            .unverified = unverified};
	struct rq_plan_opts po = {.reader = r, .scheme = RQ_SCHEME_NVFP4A16,
	                          .recipe = rq_scheme_default_recipe(RQ_SCHEME_NVFP4A16)};
	struct rq_plan *p = NULL;
	struct rq_err e = {0};
	int rc = rq_plan_build(&po, &p, &e);
	if (rc)
		printf("# plan: %s\n", e.msg);
	return rc ? NULL : p;
}

static int key_eq(const struct rq_cache_key *a, const struct rq_cache_key *b)
{
	char x[33], y[33];
	rq_cache_key_hex(a, x);
	rq_cache_key_hex(b, y);
	return !strcmp(x, y);
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
out:
	rq_plan_free(pv);
	rq_plan_free(pu);
	printf("1..%d\n", tap_n);
	return tap_failed ? 1 : 0;
}
