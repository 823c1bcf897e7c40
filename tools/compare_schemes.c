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
 * temporary directory removed after each row, on failure too. */
#include "tools/compare_schemes.h"
#include "tools/compare_text.h"
#include "tools/cli.h"
#include "base/err.h"
#include "engine/model.h"

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *const all_schemes[] = {"nvfp4a16", "fp8-dynamic", "w8a16", "w4a16"};

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

static void row(const char *name, double presented, double cache, const struct ct_result *r, int ref)
{
	char p[32], c[32] = "-";
	cli_human_bytes(presented, p, sizeof p);
	if (cache >= 0)
		cli_human_bytes(cache, c, sizeof c);
	if (ref)
		printf("%-12s %11s %11s %10.4f %10s %10s %7s\n", name, p, c, r->ppl_a, "-", "-", "-");
	else
		printf("%-12s %11s %11s %10.4f %10.3e %10.3e %6.2f%%\n", name, p, c, r->ppl_b, r->kl_mean,
		       r->kl_p99, 100 * r->top1);
	fflush(stdout);
}

/* One scheme: mount, score, measure, unmount, clean up. */
static int one_scheme(const char *src, const char *scheme, const char *tmp, struct rq_pool *pool,
                      const float *ref, const int *tok, int n, struct rq_err *err)
{
	char base[PATH_MAX - 16], mnt[PATH_MAX], cache[PATH_MAX];
	snprintf(base, sizeof base, "%s/requantfs-compare-XXXXXX", tmp);
	if (!mkdtemp(base))
		return rq_errf(err, -errno, "%s: cannot make a temporary directory: %s", tmp,
		               strerror(errno));
	snprintf(mnt, sizeof mnt, "%s/mnt", base);
	snprintf(cache, sizeof cache, "%s/cache", base);
	int rc = 0, mounted = 0;
	if (mkdir(mnt, 0700) || mkdir(cache, 0700)) {
		rc = rq_errf(err, -errno, "%s: %s", base, strerror(errno));
		goto out;
	}
	char *margs[] = {"mount", (char *)src, mnt, "--scheme", (char *)scheme, "--cache", cache, NULL};
	if (cli_run_self(margs)) {
		/* a scheme SRC's shapes do not allow (the mount said why on stderr):
		 * a row that says so, and the table goes on */
		printf("%-12s not mountable with this scheme (requantfs mount's message above)\n", scheme);
		goto out;
	}
	mounted = 1;
	struct lg_model *m = NULL;
	if ((rc = lg_model_open(mnt, &m, err)))
		goto out;
	struct ct_result r;
	rc = ct_score(m, pool, ref, tok, n, scheme, &r, err);
	lg_model_close(m);
	if (!rc)
		row(scheme, (double)tree_bytes(mnt, 0, 0), (double)tree_bytes(cache, 1, 0), &r, 0);
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

int cs_parse(const char *list, const char ***out, int *n)
{
	static const char *picked[8];
	int k = 0;
	if (!strcmp(list, "all")) {
		for (size_t i = 0; i < sizeof all_schemes / sizeof *all_schemes; i++)
			picked[k++] = all_schemes[i];
	} else {
		static char buf[256];
		if (strlen(list) >= sizeof buf)
			return -EINVAL;
		strcpy(buf, list);
		for (char *s, *p = strtok_r(buf, ",", &s); p; p = strtok_r(NULL, ",", &s)) {
			size_t i = 0;
			while (i < sizeof all_schemes / sizeof *all_schemes && strcmp(p, all_schemes[i]))
				i++;
			if (i == sizeof all_schemes / sizeof *all_schemes || k == 8)
				return -EINVAL;
			picked[k++] = all_schemes[i];
		}
	}
	if (!k)
		return -EINVAL;
	*out = picked;
	*n = k;
	return 0;
}

int cs_run(const char *src, const struct lg_model *a, const char *const *schemes, int ns,
           struct rq_pool *pool, const int *tok, int n, const char *text_path,
           struct rq_err *err)
{
	const char *tmp = getenv("TMPDIR");
	if (!tmp || !*tmp)
		tmp = "/tmp";
	float *ref = NULL;
	int rc = ct_reference(a, pool, tok, n, &ref, err);
	if (rc)
		return rc;
	printf("SRC = %s\ntext = %s, %d tokens (%d predicted); KL(SRC||scheme) in nats\n\n", src,
	       text_path, n, n - 1);
	printf("%-12s %11s %11s %10s %10s %10s %7s\n", "scheme", "presented", "cache", "ppl", "KL mean",
	       "KL p99", "top-1");
	/* the reference row: SRC as it is */
	struct ct_result self = {.ppl_a = ct_ppl(ref, tok, n, a->cfg.vocab)};
	row("source", (double)tree_bytes(src, 0, 1), -1, &self, 1);
	for (int i = 0; i < ns && !rc; i++)
		rc = one_scheme(src, schemes[i], tmp, pool, ref, tok, n, err);
	free(ref);
	return rc;
}
