/* mount_hf.c — a remote SRC for the mount daemon (mount_hf.h). */
#include "cli/mount_hf.h"
#include "cli/cli_hf.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "fs/mount.h"
#include "remote/rstore.h"

struct mount_hf {
	struct cli_hf *hf;
	struct rq_rs *rs;
	struct rq_rs_file *files;     /* [n], strings borrowed from hf */
	char *calib;                  /* --calib hf://: the scales kept in the cache (the
	                                 plan reads them before attach) */
	pthread_mutex_t mu;
	struct rq_mount *m;           /* where the store logs (mu) */
};

static void rs_log(void *ctx, const char *msg)
{
	struct mount_hf *h = ctx;
	pthread_mutex_lock(&h->mu);
	if (h->m)
		rq_mount_logl(h->m, RQ_LOG_WARN, "remote: %s", msg);
	pthread_mutex_unlock(&h->mu);
}

int mount_hf_open(struct rq_mount_opts *o, const char *endpoint, struct mount_hf **out,
                  struct rq_err *err)
{
	struct mount_hf *h = calloc(1, sizeof *h);
	if (!h)
		return -ENOMEM;
	pthread_mutex_init(&h->mu, NULL);
	int offline = cli_hf_offline();
	int rc = cli_hf_open_cached(o->src, endpoint, o->cache_dir, &h->hf, err);
	if (!rc && o->remote_verify == RQ_RV_FILE)   /* no unverified byte, ever */
		rc = cli_hf_check_verifiable(h->hf, "--remote-verify file (the default) serves no "
		                             "unverified byte: use a server whose model API gives "
		                             "them, a local copy as SRC, or --remote-verify none to "
		                             "accept unverified bytes", err);
	if (!rc && o->calib && cli_hf_is(o->calib))     /* offline too, once fetched */
		rc = cli_hf_calib_cached(o->calib, endpoint, o->cache_dir, &h->calib, err);
	const struct rq_src_reader *r = rc ? NULL : cli_hf_reader(h->hf);
	if (r && !(h->files = calloc(r->nfiles ? r->nfiles : 1, sizeof *h->files)))
		rc = -ENOMEM;
	for (size_t i = 0; !rc && i < r->nfiles; i++)
		h->files[i] = (struct rq_rs_file){.name = r->files[i].name, .size = r->files[i].size,
		                                  .sha256 = r->files[i].sha256,
		                                  .blob_id = cli_hf_blob_id(h->hf, i)};
	if (!rc) {
		struct rq_rs_opts so = {.endpoint = endpoint, .repo = cli_hf_repo(h->hf),
		                        .commit = cli_hf_commit(h->hf), .files = h->files,
		                        .nfiles = r->nfiles, .cache_dir = o->cache_dir,
		                        .readahead = -1, .offline = offline, .log = rs_log,
		                        .log_ctx = h};
		if ((rc = rq_rs_open(&so, &h->rs, err)))
			rq_err_prefix(err, "%s", r->label);
	}
	if (rc) {
		mount_hf_close(h);
		return rc;
	}
	o->src = r->label;
	if (h->calib)
		o->calib = h->calib;
	o->rs = h->rs;
	o->rfiles = r->files;
	o->nrfiles = r->nfiles;
	*out = h;
	return 0;
}

void mount_hf_attach(struct mount_hf *h, struct rq_mount *m)
{
	if (!h)
		return;
	pthread_mutex_lock(&h->mu);
	h->m = m;
	pthread_mutex_unlock(&h->mu);
	free(h->calib);
	h->calib = NULL;
}

void mount_hf_close(struct mount_hf *h)
{
	if (!h)
		return;
	mount_hf_attach(h, NULL);
	rq_rs_close(h->rs);
	free(h->files);
	cli_hf_close(h->hf);
	pthread_mutex_destroy(&h->mu);
	free(h);
}
