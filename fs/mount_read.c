/* mount_read.c — the read path: a read's range is mapped onto its file's
 * segments (plan.h) and answered with one fuse_reply_data() whose buffers
 * each segment's source gives (mount_seg.c): memory, or a file descriptor
 * range (FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK, spliced to the kernel when it
 * allows, so the bytes are not copied here). This file does not know which
 * kind of source answered.
 *
 * A read whose source is not ready never blocks a FUSE thread: it is parked
 * (on every missing job, mount_jobs.c; on a remote SRC file's whole-file
 * fetch under --remote-verify file, mount_rver.c) and answered by the
 * thread that completes the last of them; under --remote-verify none a read
 * of remote bytes not here yet is handed to the remote pool (mount_rver.c)
 * and answered there. Reads whose sources never park (SRC/MEM ranges) never
 * take the lock.
 *
 * Cache entries are files someone else may change under us (cache.c's trust
 * model). A range served from a READY job's cache fd is therefore pread into
 * memory here, not handed to libfuse as an fd buffer: libfuse turns a short
 * copy from an fd into a short reply, which the kernel takes for EOF and
 * shrinks the file to -- a silent short file. We get exactly the bytes or
 * answer EIO. After the copy, every fd the read used is re-checked
 * (rq_cache_recheck: one fstat when nothing changed; any write, truncation,
 * utime or touch moves ctime): changed but verified good again -> copy
 * again; corrupt -> the job's output is dropped (IDLE) and the read parks
 * again, so the job is rebuilt and the reader gets correct bytes. The kernel
 * may keep pages served before the change: they were correct. */
#include "fs/mount_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"

#define SMALL_SEGS 16
#define MAX_RECOPY 3      /* entries changing (but good) under every copy: EIO */
#define MAX_REBUILDS 3    /* rebuilt entries corrupt again and again: EIO */

static void advise_done(const struct fuse_bufvec *bv)
{
	/* The mount's page cache holds what was just served: do not keep a
	 * second copy of SRC ranges in the SRC file's page cache. */
	for (size_t i = 0; i < bv->count; i++)
		if ((bv->buf[i].flags & FUSE_BUF_IS_FD) && bv->buf[i].size >= (1u << 16))
			posix_fadvise(bv->buf[i].fd, bv->buf[i].pos, (off_t)bv->buf[i].size,
			              POSIX_FADV_DONTNEED);
}

/* Builds the buffers of [off, off+size) of file fi, asking each segment's
 * source (mount_seg.c) for its bytes; those it copies go into copy (size
 * bytes, indexed like the read; NULL when rd holds no output in a file).
 * Returns the number of buffers, -EIO when a SRC file changed, -ENODATA
 * when a cache entry was shorter than needed. */
static int build(struct rq_mount *m, long fi, uint64_t off, uint64_t size,
                 struct fuse_bufvec *bv, size_t cap, struct mread *rd, uint8_t *copy)
{
	const struct rq_vfile *f = &m->plan->files[fi];
	uint64_t end = off + size;
	size_t n = 0;
	for (size_t s = rq_vfile_seg_at(f, off); s < f->nseg && f->seg[s].off < end; s++) {
		const struct rq_seg *g = &f->seg[s];
		uint64_t a = off > g->off ? off : g->off;
		uint64_t b = end < g->off + g->len ? end : g->off + g->len;
		struct fuse_buf fb;
		int r = rq_mnt_seg_bytes(m, rd, g, a - g->off, b - a, copy ? copy + (a - off) : NULL,
		                         &fb);
		if (r)
			return r;
		/* Merge with the previous buffer when contiguous. */
		if (n) {
			struct fuse_buf *pb = &bv->buf[n - 1];
			if (!(fb.flags & FUSE_BUF_IS_FD) && !(pb->flags & FUSE_BUF_IS_FD) &&
			    (uint8_t *)pb->mem + pb->size == fb.mem) {
				pb->size += fb.size;
				continue;
			}
			if ((fb.flags & FUSE_BUF_IS_FD) && (pb->flags & FUSE_BUF_IS_FD) &&
			    pb->fd == fb.fd && pb->pos + (off_t)pb->size == fb.pos) {
				pb->size += fb.size;
				continue;
			}
		}
		if (n == cap)
			return -E2BIG;
		bv->buf[n++] = fb;
	}
	bv->count = n;
	bv->idx = 0;
	bv->off = 0;
	return (int)n;
}

/* Segments of [off, end) of f; *may_park: a source of one may park a read;
 * *copies: a source of one copies into the read's buffer; *slow: one's
 * bytes are remote and not here yet (the remote pool answers the read). */
static size_t seg_count(struct rq_mount *m, const struct rq_vfile *f, uint64_t off,
                        uint64_t end, int *may_park, int *copies, int *slow)
{
	size_t n = 0;
	*may_park = *copies = *slow = 0;
	for (size_t s = rq_vfile_seg_at(f, off); s < f->nseg && f->seg[s].off < end; s++) {
		n++;
		*may_park |= rq_mnt_seg_may_park(m, &f->seg[s]);
		*copies |= rq_mnt_seg_copies(m, &f->seg[s]);
		if (!*slow)
			*slow = rq_mnt_seg_slow(m, &f->seg[s]);
	}
	return n;
}

static struct fuse_bufvec *bufvec_alloc(size_t n, struct fuse_bufvec *small)
{
	if (n <= SMALL_SEGS)
		return small;
	return calloc(1, sizeof(struct fuse_bufvec) + (n - 1) * sizeof(struct fuse_buf));
}

static void reply(struct rq_mount *m, fuse_req_t req, struct fuse_bufvec *bv)
{
	size_t len = fuse_buf_size(bv);
	/* fd buffers are spliced into /dev/fuse when the kernel allows it
	 * (FUSE_CAP_SPLICE_WRITE), else libfuse preads them into one buffer. */
	int r = fuse_reply_data(req, bv, 0);
	if (r == 0) {
		atomic_fetch_add(&m->st.reads, 1);
		atomic_fetch_add(&m->st.read_bytes, len);
		advise_done(bv);
	}
}

enum { RECHECK_SAME = 0, RECHECK_CHANGED = 1, RECHECK_REBUILD = 2 };

/* Drops rd's hold on job j's output. */
static void unhold(struct mread *rd, int j)
{
	for (int i = 0; i < rd->nheld; i++) {
		if (rd->held[i].job != j)
			continue;
		rq_mout_unref(rd->held[i].o);
		rd->held[i] = rd->held[--rd->nheld];
		rd->hcur = 0;
		return;
	}
}

/* Re-checks every cache fd rd holds (rq_cache_recheck). RECHECK_SAME: all
 * unchanged; RECHECK_CHANGED: some changed but verified good again (copy
 * again); RECHECK_REBUILD: some are corrupt now: their jobs were dropped
 * and rd lost its holds on them (serve it again: it parks); -EIO: one
 * could not be checked, or rd was rebuilt too often. */
static int recheck_held(struct rq_mount *m, struct mread *rd)
{
	int res = RECHECK_SAME;
	for (int i = 0; i < rd->nheld; i++) {
		struct mout *o = rd->held[i].o;
		int j = rd->held[i].job;
		if (o->fd < 0 || j < 0)
			continue;     /* (j < 0: a remote SRC's verified copy, not a cache entry) */
		struct rq_err e = {0};
		int r = rq_cache_recheck(m->cache, &m->jobs[j].key, o->fd, m->plan->jobs[j].out_size,
		                         &o->id, &e);
		if (r == 0)
			continue;
		const char *name = m->plan->mods[m->plan->jobs[j].mod[0]].name;
		if (r == 1) {
			if (res == RECHECK_SAME)
				res = RECHECK_CHANGED;
			continue;
		}
		if (r != -ESTALE) {
			rq_mount_log(m, "cache: cannot re-check the entry of %s: %s: EIO", name, e.msg);
			return -EIO;
		}
		atomic_fetch_add(&m->st.corrupt, 1);
		rq_mount_log(m, "cache: %s (changed after it was verified): rebuilding %s", e.msg, name);
		pthread_mutex_lock(&m->lock);
		rq_mnt_drop_stale(m, j, o);
		pthread_mutex_unlock(&m->lock);
		unhold(rd, j);
		i--;
		res = RECHECK_REBUILD;
	}
	if (res == RECHECK_REBUILD && ++rd->rebuilds > MAX_REBUILDS) {
		rq_mount_log(m, "cache: entries of %s keep changing after verification: EIO",
		             m->plan->files[rd->file].name);
		return -EIO;
	}
	return res;
}

/* Answers a parked (or new) read whose jobs may all be ready now. */
void rq_mnt_serve(struct rq_mount *m, struct mread *rd)
{
	const struct rq_plan *p = m->plan;
	if (!rq_mnt_serve_begin(m, rd))
		return;
	const struct rq_vfile *f = &p->files[rd->file];
	uint64_t end = rd->off + rd->size;
	if (rq_mnt_seg_file(m, rd))
		return;     /* a whole materialized file answered it, or it parked */
	int gate = rq_mnt_rv_gate(m, rd);     /* a remote SRC: verified first */
	if (gate) {
		pthread_mutex_unlock(&m->lock);
		if (gate > 0) {
			atomic_fetch_add(&m->st.parked, 1);
			return;
		}
		rq_mnt_read_fail(rd, -gate);
		return;
	}
	long last_mod = -1, first_mod = -1;
	size_t nseg = 0;
	int err = 0, copies = 0;
	for (size_t s = rq_vfile_seg_at(f, rd->off); s < f->nseg && f->seg[s].off < end; s++) {
		const struct rq_seg *g = &f->seg[s];
		uint64_t d = rd->off > g->off ? rd->off - g->off : 0;
		long mi;
		nseg++;
		copies |= rq_mnt_seg_copies(m, g);
		int r = rq_mnt_seg_acquire(m, rd, g, d, &mi);
		if (r < 0)
			err = r;
		if (mi < 0)
			continue;
		if (mi > last_mod)
			last_mod = mi;
		if (first_mod < 0 || mi < first_mod)
			first_mod = mi;
	}
	if (!rd->seen && last_mod >= 0) {
		/* Prefetch only when reads walk the file: the kernel's readahead
		 * continues where the last read ended; a loader visits tensors in
		 * name order (vLLM through mmap), so modules come in index order. */
		long prev = m->walk_mod[rd->file];
		int walking = rd->off == m->walk_end[rd->file] ||
		              (prev >= 0 && first_mod >= prev && first_mod <= prev + 8);
		m->walk_end[rd->file] = end;
		m->walk_mod[rd->file] = last_mod;
		if (walking)
			rq_mnt_prefetch(m, (size_t)last_mod);
	}
	rd->seen = 1;
	if (rd->pending) {
		if (err && !rd->err)
			rd->err = err;
		atomic_fetch_add(&m->st.parked, 1);
		pthread_mutex_unlock(&m->lock);
		return;
	}
	pthread_mutex_unlock(&m->lock);

	struct {
		struct fuse_bufvec v;
		struct fuse_buf more[SMALL_SEGS - 1];
	} small;
	struct fuse_bufvec *bv = bufvec_alloc(nseg, &small.v);
	uint8_t *copy = NULL;
	if (!err && (copies || rq_mnt_held_fd(rd)) && !(copy = malloc(rd->size ? rd->size : 1)))
		err = -ENOMEM;
	int n = err ? err : !bv ? -ENOMEM : 0;
	for (int tries = 0; n == 0; tries++) {
		n = build(m, rd->file, rd->off, rd->size, bv, nseg, rd, copy);
		if (n == -EIO || n == -ENOMEM || n == -E2BIG)
			break;
		/* After the copy: did any entry it came from change meanwhile? */
		int r = recheck_held(m, rd);
		if (r == RECHECK_REBUILD) {
			if (bv && bv != &small.v)
				free(bv);
			free(copy);
			rq_mnt_serve(m, rd);      /* parks on the dropped job(s) */
			return;
		}
		if (r < 0) {
			n = r;
		} else if (r == RECHECK_CHANGED) {
			n = tries + 1 < MAX_RECOPY ? 0 : -EIO;   /* copy again */
		} else if (n == -ENODATA) {
			/* short, yet the identity is unchanged: never a short reply */
			rq_mount_log(m, "cache entry of a job of %s was shorter than verified: EIO",
			             p->files[rd->file].name);
			n = -EIO;
		}
	}
	if (!rq_mnt_read_claim(rd))
		;                     /* interrupted meanwhile: answered EINTR */
	else if (n < 0)
		fuse_reply_err(rd->req, -n);
	else
		reply(m, rd->req, bv);
	if (bv && bv != &small.v)
		free(bv);
	free(copy);
	rq_mnt_read_free(rd);
}

/* Answers [off, off + len) of file at once, for sources that never park
 * (SRC/MEM ranges, a remote SRC's bytes under --remote-verify none): no
 * lock. rd: the read when the remote pool answers it (it may have been
 * interrupted meanwhile), else NULL. */
static void direct(struct rq_mount *m, fuse_req_t req, struct mread *rd, long file, uint64_t off,
                   uint64_t len)
{
	const struct rq_vfile *f = &m->plan->files[file];
	int may_park, copies, slow;
	size_t nseg = seg_count(m, f, off, off + len, &may_park, &copies, &slow);
	struct {
		struct fuse_bufvec v;
		struct fuse_buf more[SMALL_SEGS - 1];
	} small;
	struct fuse_bufvec *bv = bufvec_alloc(nseg, &small.v);
	uint8_t *copy = copies ? malloc(len) : NULL;
	if (!bv || (copies && !copy)) {
		if (bv && bv != &small.v)
			free(bv);
		free(copy);
		if (!rd || rq_mnt_read_claim(rd))
			fuse_reply_err(req, ENOMEM);
		return;
	}
	if (m->o.rs)       /* a remote SRC: quantize the next job while fetching */
		rq_mnt_prefetch_ahead(m, file, off + len);
	int n = build(m, file, off, len, bv, nseg, NULL, copy);
	if (rd && !rq_mnt_read_claim(rd))
		;                 /* interrupted while the bytes were fetched */
	else if (n < 0)
		fuse_reply_err(req, -n);
	else
		reply(m, req, bv);
	if (bv != &small.v)
		free(bv);
	free(copy);
}

/* A direct read the remote pool answers (its bytes are not here yet). */
static void serve_direct(struct rq_mount *m, struct mread *rd)
{
	if (atomic_load(&rd->answered))
		return rq_mnt_read_free(rd);     /* interrupted while queued */
	direct(m, rd->req, rd, rd->file, rd->off, rd->size);
	rq_mnt_read_free(rd);
}

void rq_mnt_read(fuse_req_t req, struct rq_mount *m, size_t size, off_t off,
                 struct fuse_file_info *fi)
{
	atomic_store(&m->last_busy_ns, (long long)(rq_mnt_now() * 1e9));
	long file = (long)(fi->fh & ~RQ_FH_PT);
	const struct rq_vfile *f = &m->plan->files[file];
	if (off < 0)
		return (void)fuse_reply_err(req, EINVAL);
	if ((uint64_t)off >= f->size || size == 0)
		return (void)fuse_reply_buf(req, NULL, 0);
	uint64_t len = f->size - (uint64_t)off < size ? f->size - (uint64_t)off : size;
	if (rq_mnt_src_check(m, f->src, 0))
		return (void)fuse_reply_err(req, EIO);

	int may_park, copies, slow;
	seg_count(m, f, (uint64_t)off, (uint64_t)off + len, &may_park, &copies, &slow);
	int gate = rq_mnt_rv_needs(m, file);    /* a remote SRC not verified yet */
	if (!may_park && !slow && !gate)
		return direct(m, req, NULL, file, (uint64_t)off, len);
	struct mread *rd = calloc(1, sizeof *rd);
	if (!rd)
		return (void)fuse_reply_err(req, ENOMEM);
	*rd = (struct mread){.serve = may_park || gate ? rq_mnt_serve : serve_direct, .req = req,
	                     .file = file, .ctl_job = -1, .off = (uint64_t)off, .size = len};
	rq_mnt_read_watch(rd);      /* it may wait: a killed reader must not */
	if (slow) {        /* remote bytes not here: a pool thread waits for them, not us */
		if (rq_mnt_rv_push(m, rd))
			rq_mnt_read_fail(rd, EIO);
		return;
	}
	rq_mnt_serve(m, rd);
}
