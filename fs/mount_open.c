/* mount_open.c — the open's mode: passthrough or the copy path.
 *
 * Kernel passthrough (mount_pt.h) serves a file straight from one backing
 * file when it exists whole on disk: a file identical to its SRC file (from
 * the first open), or a requantized shard once materialized (mount_mat.c).
 * The kernel's rule: an inode is open either in cached mode (the copy path,
 * mount_read.c) or in passthrough mode, never both, and every passthrough
 * open of it uses one backing file. So a new open goes the way the inode's
 * open files go, and only an inode with no opens changes mode or backing.
 * Counts drop on RELEASE, which comes after the kernel's own bookkeeping:
 * never too low. Fields: struct mfile (mount_int.h), under m->lock. */
#include "fs/mount_int.h"

#include <errno.h>
#include <string.h>

#include "base/err.h"
#include "fs/mount_pt.h"

/* ---- open / release ----------------------------------------------------- */

void rq_mnt_open_file(fuse_req_t req, struct rq_mount *m, long i, struct fuse_file_info *fi)
{
	const struct rq_vfile *f = &m->plan->files[i];
	struct mfile *mf = &m->files[i];
	int pt_on = m->pt && rq_pt_enabled(m->pt);
	struct mout *mo = NULL;
	if (pt_on && f->changed) {
		pthread_mutex_lock(&m->lock);
		rq_mnt_mat_await(m, i);
		if (mf->mat == MAT_READY) {
			mo = mf->mat_out;
			atomic_fetch_add(&mo->refs, 1);
		}
		pthread_mutex_unlock(&m->lock);
		if (mo) {   /* re-checked at every open: a change is verified again */
			struct rq_err e = {0};
			int r = rq_cache_file_recheck(m->cache, &mf->mat_key, mo->fd, f->size, &mo->id, &e);
			if (r < 0) {
				rq_mnt_mat_failed_check(m, i, mo, r, e.msg);
				rq_mout_unref(mo);
				mo = NULL;
			}
		}
	}
	int id = 0, eio = 0;
	/* a file identical to SRC passes through from SRC's fd; a remote SRC
	 * file's only once the store has assembled it (else: the copy path) */
	int sfd = f->changed ? -1 : rq_mnt_src_fd(m, f->src);
	pthread_mutex_lock(&m->lock);
	if (mf->pt_opens > 0) {
		/* Passthrough opens are live: only the same backing will do. */
		if (!f->changed || (mo && mo == mf->pt_out))
			id = mf->pt_id;
		else
			eio = 1;
	} else if (pt_on && !mf->cached_opens && !mf->pt_err && ((!f->changed && sfd >= 0) || mo)) {
		if (mf->pt_id > 0 && f->changed && mf->pt_out != mo) {
			rq_pt_backing_close(m->pt, mf->pt_id);   /* no open uses it now */
			rq_mout_unref(mf->pt_out);
			mf->pt_out = NULL;
			mf->pt_id = 0;
		}
		if (mf->pt_id == 0) {
			int r = rq_pt_backing_open(m->pt, f->changed ? mo->fd : sfd);
			if (r > 0) {
				mf->pt_id = r;
				if (mo) {
					mf->pt_out = mo;
					atomic_fetch_add(&mo->refs, 1);
				}
			} else {
				mf->pt_err = r;
				rq_mount_log(m, "passthrough refused for %s (%s): the copy path serves it",
				             f->name, strerror(-r));
			}
		}
		id = mf->pt_id;
	}
	if (id > 0)
		mf->pt_opens++;
	else if (!eio)
		mf->cached_opens++;
	pthread_mutex_unlock(&m->lock);
	rq_mout_unref(mo);
	if (eio) {
		rq_mount_log(m, "open of %s refused (EIO): its materialized file was dropped while "
		             "passthrough opens of it are still open", f->name);
		fuse_reply_err(req, EIO);
		return;
	}
	int r;
	if (id > 0) {
		fi->fh = (uint64_t)i | RQ_FH_PT;
		atomic_fetch_add(&m->st.pt_opens, 1);
		r = rq_pt_reply_open(m->pt, req, fi, id);
	} else {
		fi->keep_cache = 1;
		fi->direct_io = 0;     /* page cache: mmap (private and shared) works */
		fi->fh = (uint64_t)i;
		atomic_fetch_add(&m->st.cached_opens, 1);
		r = fuse_reply_open(req, fi);
	}
	if (r)          /* the opener is gone: no RELEASE will come */
		rq_mnt_release_file(m, fi->fh);
}

void rq_mnt_release_file(struct rq_mount *m, uint64_t fh)
{
	long i = (long)(fh & ~RQ_FH_PT);
	pthread_mutex_lock(&m->lock);
	if (fh & RQ_FH_PT) {
		if (m->files[i].pt_opens > 0)
			m->files[i].pt_opens--;
	} else if (m->files[i].cached_opens > 0) {
		m->files[i].cached_opens--;
	}
	pthread_mutex_unlock(&m->lock);
}
