/* mount_src.c — SRC identity. Every read fstat()s the SRC file it serves;
 * jobs and opens also stat() the path; the monitor thread (mount_run.c)
 * stats every SRC path once a second. A difference from the plan's identity
 * (size, inode, mtime, ctime: a rewrite that restores size and mtime still
 * moves ctime) is sticky: dependent reads fail with EIO, and the monitor
 * drops the kernel's cached pages of the dependent files and their
 * materialized files, so stale bytes are never served. A leaf. */
#include "fs/mount_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* ---- SRC identity ------------------------------------------------------ */

static int differs(const struct stat *st, const struct rq_srcfile *sf, char *why, size_t len)
{
	int64_t mt = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
	int64_t ct = (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec;
	if ((uint64_t)st->st_size != sf->size)
		snprintf(why, len, "size %" PRIu64 " -> %jd", sf->size, (intmax_t)st->st_size);
	else if (st->st_ino != sf->ino || st->st_dev != sf->dev)
		snprintf(why, len, "replaced by another file");
	else if (mt != sf->mtime_ns)
		snprintf(why, len, "modified (mtime changed)");
	else if (ct != sf->ctime_ns)
		snprintf(why, len, "modified or its metadata changed (ctime changed)");
	else
		return 0;
	return 1;
}

int rq_mnt_src_check(struct rq_mount *m, int s, int path)
{
	struct msrc *ms = &m->srcs[s];
	const struct rq_srcfile *sf = &m->plan->srcs[s];
	struct stat st;
	char why[128];
	if (atomic_load(&ms->changed))
		return -EIO;
	if (m->o.rs)
		return 0;     /* a remote SRC is a pinned commit: it never changes */
	if (fstat(ms->fd, &st)) {
		snprintf(why, sizeof why, "fstat: %s", strerror(errno));
	} else if (!differs(&st, sf, why, sizeof why)) {
		if (!path)
			return 0;
		if (stat(sf->path, &st))
			snprintf(why, sizeof why, "%s", strerror(errno));
		else if (!differs(&st, sf, why, sizeof why))
			return 0;
	}
	if (!atomic_exchange(&ms->changed, 1)) {
		rq_mount_log(m, "SRC file %s changed under the mount (%s): reads of the files made "
		             "from it now fail with EIO; remount to serve its new contents",
		             sf->path, why);
		pthread_mutex_lock(&m->mon_mu);
		pthread_cond_signal(&m->mon_cv);
		pthread_mutex_unlock(&m->mon_mu);
	}
	return -EIO;
}
