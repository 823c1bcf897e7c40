/* mount_seg.c — where a segment's bytes come from: the seam between the
 * read path (mount_read.c) and the sources of bytes. The read path asks, for
 * [d, d + len) of one segment of a virtual file:
 *
 *   rq_mnt_seg_acquire  (under m->lock) may the bytes be had now? 0: yes
 *                       (rd holds what keeps them alive); 1: rd is parked
 *                       on what produces them and is served again later
 *   rq_mnt_seg_bytes    (no lock) the bytes: a buffer (fb->mem, copied into
 *                       the read's own buffer when the source is a file
 *                       someone else may change) or an fd + offset that
 *                       libfuse splices (FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK)
 *
 * and never learns which kind answered. One table below maps each kind of
 * segment (plan.h) to its source:
 *
 *   MEM   bytes the plan holds (headers, config.json, the index)
 *   SRC   a byte range of a SRC file (the mount's own fd; changed SRC: EIO)
 *   RFILE a SRC segment of a remote SRC (hf://) under --remote-verify file
 *         (mount_rver.c): parked until the whole file is fetched and
 *         verified, then spliced from that copy (held until the reply)
 *   REMOTE  the same under --remote-verify none (mount_remote.c): read
 *         through the chunk store into the read's own buffer as chunks
 *         arrive -- on a remote-pool thread, never a FUSE one (the read
 *         path asks rq_mnt_seg_slow) -- or, once the store has assembled
 *         and verified the file, spliced from it
 *   JOB   a byte range of a job's output (mount_jobs.c: parked until the job
 *         publishes; then memory, or its cache entry read into the read's
 *         buffer: see mount_read.c for why a cache fd is never spliced)
 *
 * A whole materialized file (mount_mat.c) answers a read of its shard before
 * any segment is asked: rq_mnt_seg_file. The read path gives every read a
 * buffer of its own when a source copies (rq_mnt_seg_copies); otherwise it
 * does not know which kind answered. */
#include "fs/mount_int.h"

#include <errno.h>
#include <unistd.h>

/* Reads exactly n bytes at off: 0, or -EIO when the file is shorter. */
static int pread_exact(int fd, uint8_t *p, uint64_t n, uint64_t off)
{
	while (n) {
		ssize_t r = pread(fd, p, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -EIO;
		p += r;
		n -= (uint64_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

/* ---- MEM ---------------------------------------------------------------- */

static int mem_bytes(struct rq_mount *m, struct mread *rd, const struct rq_seg *g, uint64_t d,
                     uint8_t *dst, struct fuse_buf *fb)
{
	fb->mem = (void *)(g->mem + d);
	return 0;
}

/* ---- SRC ---------------------------------------------------------------- */

static int src_bytes(struct rq_mount *m, struct mread *rd, const struct rq_seg *g, uint64_t d,
                     uint8_t *dst, struct fuse_buf *fb)
{
	if (atomic_load(&m->srcs[g->src].changed))
		return -EIO;
	fb->flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	fb->fd = m->srcs[g->src].fd;
	fb->pos = (off_t)(g->src_off + d);
	return 0;
}

/* ---- REMOTE ------------------------------------------------------------- */

static int remote_bytes(struct rq_mount *m, struct mread *rd, const struct rq_seg *g, uint64_t d,
                        uint8_t *dst, struct fuse_buf *fb)
{
	int fd = rq_mnt_remote_fd(m, g->src);
	if (fd >= 0) {          /* assembled and verified: like a local SRC file */
		fb->flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
		fb->fd = fd;
		fb->pos = (off_t)(g->src_off + d);
		return 0;
	}
	if (!dst)
		return -EIO;    /* not reached: the read allocates it (rq_mnt_seg_copies) */
	fb->mem = dst;
	return rq_mnt_remote_read(m, g->src, g->src_off + d, fb->size, dst, 0);
}

static int remote_slow(struct rq_mount *m, const struct rq_seg *g)
{
	return rq_mnt_remote_fd(m, g->src) < 0;
}

/* ---- RFILE --------------------------------------------------------------- */

static int rfile_acquire(struct rq_mount *m, struct mread *rd, const struct rq_seg *g,
                         uint64_t d, long *unit)
{
	*unit = -1;
	return rq_mnt_rv_acquire(m, rd, g->src);
}

static int rfile_bytes(struct rq_mount *m, struct mread *rd, const struct rq_seg *g, uint64_t d,
                       uint8_t *dst, struct fuse_buf *fb)
{
	struct mout *o = rd ? rq_mnt_held(rd, RQ_RV_KEY(m->plan->srcs[g->src].ridx)) : NULL;
	if (!o)
		return -EIO;    /* not reached: acquire holds the verified copy first */
	fb->flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	fb->fd = o->fd;
	fb->pos = (off_t)(g->src_off + d);
	return 0;
}

/* ---- JOB ---------------------------------------------------------------- */

/* Module (index into plan->mods) whose output holds byte job_off of job j. */
static long mod_at(const struct rq_plan *p, int j, uint64_t job_off)
{
	const struct rq_job *jb = &p->jobs[j];
	int s = 0;
	while (s + 1 < jb->nmod && job_off >= jb->mod_off[s + 1])
		s++;
	return jb->mod[s];
}

/* Does any SRC file that bytes of job j come from differ from the plan? */
static int job_src_changed(struct rq_mount *m, int j)
{
	const struct rq_job *jb = &m->plan->jobs[j];
	for (int s = 0; s < jb->nmod; s++)
		if (atomic_load(&m->srcs[m->plan->mods[jb->mod[s]].src].changed))
			return 1;
	return 0;
}

static int job_acquire(struct rq_mount *m, struct mread *rd, const struct rq_seg *g, uint64_t d,
                       long *unit)
{
	*unit = mod_at(m->plan, g->job, g->job_off + d);
	if (rq_mnt_held(rd, g->job))
		return 0;
	struct mjob *J = &m->jobs[g->job];
	if (!rq_job_has_bytes(J)) {
		rq_mnt_park(m, g->job, rd);
		return 1;
	}
	int rc = rq_mnt_hold(rd, g->job, J->out);
	rq_mnt_touch(m, g->job);
	return rc;
}

static int job_bytes(struct rq_mount *m, struct mread *rd, const struct rq_seg *g, uint64_t d,
                     uint8_t *dst, struct fuse_buf *fb)
{
	struct mout *o = rd ? rq_mnt_held(rd, g->job) : NULL;
	if (!o)
		return -EIO;    /* not reached: acquire holds every job first */
	if (job_src_changed(m, g->job))
		return -EIO;
	if (o->fd < 0) {
		fb->mem = o->mem + g->job_off + d;
		return 0;
	}
	if (!dst)
		return -EIO;    /* not reached: the read allocates it (rq_mnt_held_fd) */
	fb->mem = dst;
	if (pread_exact(o->fd, dst, fb->size, o->fd_off + g->job_off + d))
		return -ENODATA;
	return 0;
}

/* ---- the table ------------------------------------------------------------ */

struct seg_source {
	/* under m->lock; NULL: the bytes are always there. *unit: the unit of
	 * work that makes them (prefetch walks units in order), or -1. */
	int (*acquire)(struct rq_mount *m, struct mread *rd, const struct rq_seg *g, uint64_t d,
	               long *unit);
	int (*bytes)(struct rq_mount *m, struct mread *rd, const struct rq_seg *g, uint64_t d,
	             uint8_t *dst, struct fuse_buf *fb);
	int copies;     /* 1: bytes() may copy into dst: the read gives it one */
	/* NULL: never slow; else 1 when the bytes are remote and not here yet */
	int (*slow)(struct rq_mount *m, const struct rq_seg *g);
};

/* a mount's own kinds: SRC of a remote SRC, --remote-verify none / file */
enum { SEG_REMOTE = RQ_SEG_JOB + 1, SEG_RFILE };

static const struct seg_source sources[] = {
	[RQ_SEG_MEM] = {NULL, mem_bytes, 0, NULL},
	[RQ_SEG_SRC] = {NULL, src_bytes, 0, NULL},
	[RQ_SEG_JOB] = {job_acquire, job_bytes, 0, NULL},
	[SEG_REMOTE] = {NULL, remote_bytes, 1, remote_slow},
	[SEG_RFILE] = {rfile_acquire, rfile_bytes, 0, NULL},
};

static const struct seg_source *source(const struct rq_mount *m, const struct rq_seg *g)
{
	if (g->kind == RQ_SEG_SRC && m->o.rs)
		return &sources[m->rv ? SEG_RFILE : SEG_REMOTE];
	return &sources[g->kind];
}

int rq_mnt_seg_may_park(const struct rq_mount *m, const struct rq_seg *g)
{
	return source(m, g)->acquire != NULL;
}

int rq_mnt_seg_slow(struct rq_mount *m, const struct rq_seg *g)
{
	const struct seg_source *s = source(m, g);
	return s->slow ? s->slow(m, g) : 0;
}

int rq_mnt_seg_copies(const struct rq_mount *m, const struct rq_seg *g)
{
	return source(m, g)->copies;
}

int rq_mnt_seg_acquire(struct rq_mount *m, struct mread *rd, const struct rq_seg *g, uint64_t d,
                       long *unit)
{
	*unit = -1;
	const struct seg_source *s = source(m, g);
	return s->acquire ? s->acquire(m, rd, g, d, unit) : 0;
}

int rq_mnt_seg_bytes(struct rq_mount *m, struct mread *rd, const struct rq_seg *g, uint64_t d,
                     uint64_t len, uint8_t *dst, struct fuse_buf *fb)
{
	*fb = (struct fuse_buf){.size = len};
	return source(m, g)->bytes(m, rd, g, d, dst, fb);
}

/* ---- a whole materialized file ---------------------------------------------- */

int rq_mnt_seg_file(struct rq_mount *m, struct mread *rd)
{
	if (!m->files[rd->file].njobs)
		return 0;
	/* Its materialized file, once verified, serves it whole. */
	if (rq_mnt_mat_park(m, rd->file, rd)) {
		pthread_mutex_unlock(&m->lock);
		return 1;
	}
	if (m->files[rd->file].mat != MAT_READY)
		return 0;
	pthread_mutex_unlock(&m->lock);
	if (rq_mnt_read_mat(m, rd))
		return 1;
	pthread_mutex_lock(&m->lock);
	return 0;
}
