/* mount_remote.c — a remote SRC (hf://ORG/NAME@<commit>, issue 20) read
 * through the chunk store (remote/rstore.h), which the CLI opens in the
 * daemon after the fork and the mount borrows. A leaf.
 *
 *  - The plan and the jobs read SRC through m->rreader (plan.h's source
 *    reader): while the plan is built (small files, shard headers) reads
 *    are kept as chunks, so a second mount of the commit fetches nothing;
 *    once it is built the reader serves only jobs, whose BF16 inputs are
 *    fetched and not stored (RQ_RS_NOKEEP): only their quantized output is
 *    cached.
 *  - SRC segments (mount_seg.c's REMOTE source) read through the store into
 *    the read's own buffer until the store names the file's assembled,
 *    verified copy (rq_rs_path); from then on that file is served like a
 *    local SRC file: spliced, or by passthrough (mount_open.c).
 *  - A commit never changes: there is no identity to re-check (mount_src.c).
 *  - A failed read (faults after the store's retries, offline and never
 *    fetched) answers EIO with a log line naming the file and range. */
#include "fs/mount_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "remote/rstore.h"

static int reader_read(void *ctx, size_t i, uint64_t off, uint64_t len, void *buf,
                       struct rq_err *err)
{
	struct rq_mount *m = ctx;
	unsigned fl = atomic_load(&m->rs_nokeep) ? RQ_RS_NOKEEP : 0;
	return rq_rs_read(m->o.rs, i, off, len, buf, fl, err);
}

int rq_mnt_remote_init(struct rq_mount *m, struct rq_err *err)
{
	if (!m->o.rs)
		return 0;
	if (!m->o.rfiles && m->o.nrfiles)
		return rq_errf(err, -EINVAL, "remote SRC %s: no file list", m->src);
	m->rreader = (struct rq_src_reader){.label = m->src, .nfiles = m->o.nrfiles,
	                                    .files = m->o.rfiles, .ctx = m, .read = reader_read};
	return 0;
}

void rq_mnt_remote_free(struct rq_mount *m)
{
	if (!m->o.rs || !m->srcs || !m->plan)
		return;
	for (size_t s = 0; s < m->plan->nsrcs; s++) {
		int fd = atomic_exchange(&m->srcs[s].rfd, -1);
		if (fd >= 0)
			close(fd);
	}
}

int rq_mnt_remote_fd(struct rq_mount *m, int s)
{
	struct msrc *ms = &m->srcs[s];
	int fd = atomic_load(&ms->rfd);
	if (fd >= 0)
		return fd;
	const struct rq_srcfile *sf = &m->plan->srcs[s];
	const char *path = rq_rs_path(m->o.rs, sf->ridx);
	if (!path)
		return -1;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != sf->size) {
		/* the store says it is whole, but it is not (yet) what the plan
		 * listed: keep reading through the store */
		if (fd >= 0)
			close(fd);
		return -1;
	}
	int none = -1;
	if (!atomic_compare_exchange_strong(&ms->rfd, &none, fd)) {
		close(fd);           /* another thread opened it first */
		return none;
	}
	rq_mount_logl(m, RQ_LOG_DEBUG, "%s: assembled and verified; served from %s", sf->path,
	              path);
	return fd;
}

int rq_mnt_src_fd(struct rq_mount *m, int s)
{
	return m->o.rs ? rq_mnt_remote_fd(m, s) : m->srcs[s].fd;
}

int rq_mnt_remote_read(struct rq_mount *m, int s, uint64_t off, uint64_t len, void *buf,
                       unsigned flags)
{
	const struct rq_srcfile *sf = &m->plan->srcs[s];
	struct rq_err e = {0};
	int rc = rq_rs_read(m->o.rs, sf->ridx, off, len, buf, flags, &e);
	if (!rc)
		return 0;
	atomic_fetch_add(&m->st.remote_failed, 1);
	rq_mount_logl(m, RQ_LOG_ERROR, "remote read of %s bytes %" PRIu64 "-%" PRIu64 " failed%s: "
	              "%s: EIO", sf->path, off, off + len - 1,
	              rc == -ENETUNREACH ? " (offline: HF_HUB_OFFLINE=1 and never fetched)" : "",
	              e.msg[0] ? e.msg : strerror(-rc));
	return -EIO;
}

void rq_mnt_remote_drop(struct rq_mount *m, int s)
{
	if (m->o.rs)
		rq_rs_drop(m->o.rs, m->plan->srcs[s].ridx);
}
