/* mount_mat.c — files served whole: materialized requantized shards, the
 * backing files of kernel passthrough opens (mount_open.c chooses the mode;
 * state machine and mode rules in mount_int.h).
 *
 * Which files pass through:
 *   - a file byte-identical to its SRC file: from its first open, backed by
 *     the SRC file itself (the mount keeps it open);
 *   - a requantized shard once materialized: when every job of it is in the
 *     cache, the materializer thread writes the whole virtual file into the
 *     cache (rq_cache_file_*: tmp, write, fsync, rename; an XXH3-128 of it in
 *     a sidecar), keyed by the file's name and size, its SRC file's identity,
 *     the bytes the plan holds (header) and its jobs' keys (recipe + version,
 *     SRC identity, calibration), so a changed SRC or recipe never reuses it.
 *     A file already in the cache at mount time is verified (hashed whole)
 *     before its first passthrough open; such files are verified first, in
 *     file order (a loader's order: it rarely waits for more than one). Once READY, the jobs' own entries
 *     are dropped: the bytes are kept once.
 *   - everything else (config.json, the index, shards still incomplete) goes
 *     the copy path (mount_read.c).
 *
 * Trust: a materialized file's identity is re-checked at every open and
 * after every copy-path read (a change is re-verified; a corrupt file is
 * dropped and its shard is served through its jobs again, then rebuilt).
 * A passthrough open is read by the kernel without us: a change made to the
 * backing file while it is open is not seen (the cache directory must be
 * writable by its owner only; rq_cache_open insists). When SRC changes, new
 * opens fail (EIO) and the materialized file is dropped; opens made before
 * keep reading the bytes they opened (a passthrough inode reads its backing
 * file directly, which the kernel does not let us revoke): the requantized
 * shard of the SRC as it was, never a mix. A file identical to SRC reads
 * SRC itself, so open passthrough files see a SRC rewritten in place at
 * once (new opens: EIO). */
#include "base/grow.h"
#include "fs/mount_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "job/job.h"

#include "base/err.h"
#include "fs/mount_pt.h"

#define MAT_CHUNK (8u << 20)   /* bytes copied per read while materializing */
#define MAT_RECOPY 3           /* copy-path reads redone when the file changes under them */
#define OPEN_WAIT_S 30         /* an open waits this long at most for a verification */
#define MAT_IDLE_S 1.0         /* new files are written after this long without reads */

/* Tests only: REQUANTFS_TEST_MAT_PAUSE_MS sleeps after each chunk written, so
 * that a test can kill the daemon in the middle of a materialization. */
static unsigned test_pause_ms(void)
{
	const char *s = getenv("REQUANTFS_TEST_MAT_PAUSE_MS");
	return s ? (unsigned)atoi(s) : 0;
}

/* ---- setup -------------------------------------------------------------- */

int rq_mnt_files_init(struct rq_mount *m, struct rq_err *err)
{
	const struct rq_plan *p = m->plan;
	m->files = calloc(p->nfiles ? p->nfiles : 1, sizeof *m->files);
	if (!m->files)
		return rq_errf(err, -ENOMEM, "out of memory");
	m->mat_head = m->mat_tail = -1;
	for (size_t i = 0; i < p->nfiles; i++) {
		struct mfile *mf = &m->files[i];
		const struct rq_vfile *f = &p->files[i];
		mf->mat_next = -1;
		for (size_t k = 0; k < f->nseg; k++) {
			const struct rq_seg *g = &f->seg[k];
			if (g->kind != RQ_SEG_JOB)
				continue;
			int seen = 0;
			for (int q = 0; q < mf->njobs && !seen; q++)
				seen = mf->jobs[q] == g->job;
			if (seen)
				continue;
			int *v = realloc(mf->jobs, (size_t)(mf->njobs + 1) * sizeof *v);
			if (!v)
				return rq_errf(err, -ENOMEM, "out of memory");
			mf->jobs = v;
			mf->jobs[mf->njobs++] = g->job;
			struct mjob *J = &m->jobs[g->job];
			if (J->nvf < 2 && (J->nvf == 0 || J->vf[0] != (int)i))
				J->vf[J->nvf++] = (int)i;
		}
		if (mf->njobs && rq_file_key(p, i, &mf->mat_key))
			return rq_errf(err, -ENOMEM, "out of memory");
	}
	return 0;
}

void rq_mnt_files_free(struct rq_mount *m)
{
	if (!m->files)
		return;
	for (size_t i = 0; i < m->plan->nfiles; i++) {
		rq_mout_unref(m->files[i].mat_out);
		rq_mout_unref(m->files[i].pt_out);
		free(m->files[i].jobs);
		free(m->files[i].wait);
	}
	free(m->files);
	m->files = NULL;
}

/* ---- the queue (m->lock) ----------------------------------------------- */

static void mat_push(struct rq_mount *m, long i)
{
	struct mfile *mf = &m->files[i];
	if (!m->mat_on || m->mat_stop || mf->mat != MAT_NONE || !mf->njobs)
		return;
	mf->mat = MAT_QUEUED;
	mf->mat_next = -1;
	if (m->mat_tail >= 0)
		m->files[m->mat_tail].mat_next = (int)i;
	else
		m->mat_head = (int)i;
	m->mat_tail = (int)i;
	pthread_cond_signal(&m->mat_cv);
}

int rq_mnt_mat_park(struct rq_mount *m, long i, struct mread *rd)
{
	struct mfile *mf = &m->files[i];
	if (!mf->verifying || (mf->mat != MAT_QUEUED && mf->mat != MAT_RUNNING) || m->mat_stop)
		return 0;
	if (RQ_GROW(mf->wait, mf->nwait, mf->capwait, 8))
		return 0;     /* served through the jobs instead */
	mf->wait[mf->nwait++] = rd;
	return 1;
}

/* Under m->lock: detaches the reads parked on file i (the caller serves
 * them once unlocked). */
static struct mread **mat_unpark(struct rq_mount *m, long i, int *n)
{
	struct mfile *mf = &m->files[i];
	struct mread **w = mf->wait;
	*n = mf->nwait;
	mf->wait = NULL;
	mf->nwait = mf->capwait = 0;
	mf->verifying = 0;
	return w;
}

static void serve_parked(struct rq_mount *m, struct mread **w, int n)
{
	for (int k = 0; k < n; k++)
		w[k]->serve(m, w[k]);
	free(w);
}

/* Moves QUEUED file i to the head of the queue. */
static void mat_first(struct rq_mount *m, long i)
{
	if (m->files[i].mat != MAT_QUEUED || m->mat_head == i)
		return;
	for (long p = m->mat_head; p >= 0; p = m->files[p].mat_next)
		if (m->files[p].mat_next == i) {
			m->files[p].mat_next = m->files[i].mat_next;
			if (m->mat_tail == i)
				m->mat_tail = (int)p;
			m->files[i].mat_next = m->mat_head;
			m->mat_head = (int)i;
			return;
		}
}

/* Moves QUEUED file i behind the files being verified at the head of the
 * queue (ahead of every write): found files are verified in file order,
 * the order a loader opens them in, so that the first shard it opens is
 * the first verified and the others are verified while it reads. */
static void mat_after_verifying(struct rq_mount *m, long i)
{
	if (m->files[i].mat != MAT_QUEUED)
		return;
	long prev = -1;                       /* unlink i */
	for (long p = m->mat_head; p >= 0; prev = p, p = m->files[p].mat_next)
		if (p == i)
			break;
	if (prev < 0 && m->mat_head != i)
		return;                           /* not in the queue */
	long next = m->files[i].mat_next;
	if (prev < 0)
		m->mat_head = (int)next;
	else
		m->files[prev].mat_next = (int)next;
	if (m->mat_tail == i)
		m->mat_tail = (int)prev;
	long at = -1;                         /* the last verifying file at the head */
	for (long p = m->mat_head; p >= 0 && m->files[p].verifying; p = m->files[p].mat_next)
		at = p;
	if (at < 0) {
		m->files[i].mat_next = m->mat_head;
		m->mat_head = (int)i;
	} else {
		m->files[i].mat_next = m->files[at].mat_next;
		m->files[at].mat_next = (int)i;
	}
	if (m->files[i].mat_next < 0)
		m->mat_tail = (int)i;
}

static long mat_pop(struct rq_mount *m)
{
	long i = m->mat_head;
	if (i < 0)
		return -1;
	m->mat_head = m->files[i].mat_next;
	if (m->mat_head < 0)
		m->mat_tail = -1;
	m->files[i].mat_next = -1;
	return i;
}

/* File i's materialized file o failed a re-check (r): counted when corrupt,
 * dropped if it is still the one served. No lock held. */
void rq_mnt_mat_failed_check(struct rq_mount *m, long i, struct mout *o, int r, const char *why)
{
	if (r == -ESTALE)
		atomic_fetch_add(&m->st.corrupt, 1);
	pthread_mutex_lock(&m->lock);
	if (m->files[i].mat_out == o)
		rq_mnt_mat_drop(m, i, why);
	pthread_mutex_unlock(&m->lock);
}

/* Under m->lock: file i, found in the cache at mount, is being verified:
 * wait (bounded: a hung cache must not hold this thread) so that an open
 * can pass through, and verify it next. */
void rq_mnt_mat_await(struct rq_mount *m, long i)
{
	struct mfile *mf = &m->files[i];
	if (!mf->verifying || (mf->mat != MAT_QUEUED && mf->mat != MAT_RUNNING))
		return;
	mat_first(m, i);
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += OPEN_WAIT_S;
	while (mf->verifying && !m->mat_stop &&
	       pthread_cond_timedwait(&m->mat_done, &m->lock, &until) == 0)
		;
}

static void job_cached(struct rq_mount *m, int j)
{
	const struct mjob *J = &m->jobs[j];
	if (!m->mat_write)
		return;
	for (int k = 0; k < J->nvf; k++) {
		struct mfile *mf = &m->files[J->vf[k]];
		int all = 1;
		for (int q = 0; q < mf->njobs && all; q++)
			all = m->jobs[mf->jobs[q]].disk == 1;
		if (all)
			mat_push(m, J->vf[k]);
	}
}

void rq_mnt_mat_drop(struct rq_mount *m, long i, const char *why)
{
	struct mfile *mf = &m->files[i];
	if (mf->mat != MAT_READY)
		return;
	/* No later mount can use it (its key names the SRC as it was, or it is
	 * corrupt); opens that pass through to it keep it alive. */
	rq_cache_file_remove(m->cache, &mf->mat_key);
	rq_mount_log(m, "materialized %s dropped (%s): it is read through its jobs again",
	             m->plan->files[i].name, why);
	rq_cache_file_pin(m->cache, &mf->mat_key, -1);
	rq_mout_unref(mf->mat_out);
	mf->mat_out = NULL;
	mf->mat = MAT_NONE;
	for (int q = 0; q < mf->njobs; q++)
		m->jobs[mf->jobs[q]].disk = -1;    /* its entries may be gone: learn again */
}

/* ---- materializing one file (no lock held) ------------------------------ */

static int pread_exact(int fd, void *buf, size_t n, uint64_t off)
{
	uint8_t *p = buf;
	while (n) {
		ssize_t r = pread(fd, p, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EIO;
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

/* The cache entries of every job of file i: a reference to each job's
 * output when READY from its entry, else a fresh lookup. -EAGAIN when one
 * is not in the cache (the file is queued again once it is). */
static int gather(struct rq_mount *m, long i, struct mout **outs, char *msg, size_t len)
{
	const struct mfile *mf = &m->files[i];
	for (int q = 0; q < mf->njobs; q++) {
		int j = mf->jobs[q];
		struct mjob *J = &m->jobs[j];
		pthread_mutex_lock(&m->lock);
		if (rq_job_has_bytes(J) && J->out->fd >= 0) {
			outs[q] = J->out;
			atomic_fetch_add(&outs[q]->refs, 1);
		}
		pthread_mutex_unlock(&m->lock);
		if (outs[q])
			continue;
		struct rq_err e = {0};
		struct rq_cache_ident id;
		int fd;
		uint64_t off;
		int rc = rq_cache_lookup(m->cache, &J->key, m->plan->jobs[j].out_size, &fd, &off, &id, &e);
		if (rc) {
			snprintf(msg, len, "job %d %.900s", j, rc == -ENOENT ? "is not in the cache" : e.msg);
			pthread_mutex_lock(&m->lock);
			if (rc == -ENOENT)
				J->disk = 0;
			pthread_mutex_unlock(&m->lock);
			return rc == -ENOENT ? -EAGAIN : rc;
		}
		if (!(outs[q] = rq_mout_new(fd, off, &id, NULL))) {
			close(fd);
			return -ENOMEM;
		}
	}
	return 0;
}

static int job_slot(const struct mfile *mf, int j)
{
	for (int q = 0; q < mf->njobs; q++)
		if (mf->jobs[q] == j)
			return q;
	return -1;
}

/* Writes file i into the cache from its segments. */
static int write_file(struct rq_mount *m, long i, struct mout **outs, int *fdp,
                      struct rq_cache_ident *idp, char *msg, size_t len)
{
	const struct rq_plan *p = m->plan;
	const struct rq_vfile *f = &p->files[i];
	const struct mfile *mf = &m->files[i];
	struct rq_err e = {0};
	struct rq_cache_writer *w = NULL;
	unsigned pause_ms = test_pause_ms();
	uint8_t *buf = malloc(MAT_CHUNK);
	int rc = buf ? rq_cache_file_begin(m->cache, &mf->mat_key, f->size, &w, &e) : -ENOMEM;
	if (rc)
		snprintf(msg, len, "%s", buf ? e.msg : "out of memory");
	for (size_t k = 0; k < f->nseg && !rc; k++) {
		const struct rq_seg *g = &f->seg[k];
		if (g->kind == RQ_SEG_MEM) {
			if ((rc = rq_cache_file_write(w, g->mem, g->len, &e)))
				snprintf(msg, len, "%s", e.msg);
			continue;
		}
		int fd, remote = 0;
		uint64_t at;
		if (g->kind == RQ_SEG_SRC) {
			fd = rq_mnt_src_fd(m, g->src);
			remote = fd < 0;   /* a remote SRC file not assembled: through the store */
			at = g->src_off;
		} else {
			const struct mout *o = outs[job_slot(mf, g->job)];
			fd = o->fd;
			at = o->fd_off + g->job_off;
		}
		for (uint64_t d = 0; d < g->len && !rc; d += MAT_CHUNK) {
			size_t n = g->len - d < MAT_CHUNK ? (size_t)(g->len - d) : MAT_CHUNK;
			if (remote) {
				if ((rc = rq_mnt_src_read(m, g->src, at + d, n, buf))) {
					snprintf(msg, len, "reading %s bytes %llu-%llu failed (logged)",
					         p->srcs[g->src].path, (unsigned long long)(at + d),
					         (unsigned long long)(at + d + n - 1));
					break;
				}
			} else if ((rc = pread_exact(fd, buf, n, at + d))) {
				snprintf(msg, len, "reading %s: %s", g->kind == RQ_SEG_SRC ?
				         p->srcs[g->src].path : "a cache entry", strerror(-rc));
				break;
			}
			if ((rc = rq_cache_file_write(w, buf, n, &e)))
				snprintf(msg, len, "%s", e.msg);
			if (pause_ms)
				usleep(pause_ms * 1000u);
		}
		if (g->kind == RQ_SEG_SRC && !remote)
			posix_fadvise(fd, (off_t)at, (off_t)g->len, POSIX_FADV_DONTNEED);
	}
	free(buf);
	/* The inputs must not have changed while they were copied. */
	for (size_t k = 0; k < f->nseg && !rc; k++)
		if (f->seg[k].kind == RQ_SEG_SRC && rq_mnt_src_check(m, f->seg[k].src, 1)) {
			rc = -EIO;
			snprintf(msg, len, "SRC %s changed", p->srcs[f->seg[k].src].path);
		}
	for (int q = 0; q < mf->njobs && !rc; q++) {
		/* Changed but verified good again, with size and mtime as they were:
		 * only atime/ctime moved (another lookup's LRU touch), the bytes
		 * copied are the verified ones. Anything else: copy again. */
		struct rq_cache_ident was = outs[q]->id;
		int r = rq_cache_recheck(m->cache, &m->jobs[mf->jobs[q]].key, outs[q]->fd,
		                         p->jobs[mf->jobs[q]].out_size, &outs[q]->id, &e);
		if (r == 1 && outs[q]->id.size == was.size && outs[q]->id.mtime == was.mtime &&
		    outs[q]->id.ino == was.ino)
			r = 0;
		if (r) {
			rc = r < 0 ? r : -EAGAIN;
			snprintf(msg, len, "the cache entry of job %d changed while copied%s%.900s",
			         mf->jobs[q], r < 0 ? ": " : "", r < 0 ? e.msg : "");
		}
	}
	if (rc) {
		rq_cache_file_abort(w);
		return rc;
	}
	if ((rc = rq_cache_file_commit(w, fdp, idp, &e)))
		snprintf(msg, len, "%s", e.msg);
	return rc;
}

/* Makes file i READY-able: verifies the file the cache holds, or writes
 * it. *out: the file (fd, identity). *fresh: 1 when written now. */
static int materialize(struct rq_mount *m, long i, struct mout **out, int *fresh, char *msg,
                       size_t len)
{
	const struct rq_vfile *f = &m->plan->files[i];
	struct mfile *mf = &m->files[i];
	struct rq_err e = {0};
	struct rq_cache_ident id;
	int fd, rc;
	*fresh = 0;
	rc = rq_cache_file_open(m->cache, &mf->mat_key, f->size, &fd, &id, &e);
	if (rc == -ENOENT && e.msg[0]) {
		atomic_fetch_add(&m->st.corrupt, 1);
		rq_mount_log(m, "cache: %s: rebuilding %s", e.msg, f->name);
	} else if (rc && rc != -ENOENT) {
		snprintf(msg, len, "%s", e.msg);
		return rc;
	}
	if (rc && !m->mat_write) {
		snprintf(msg, len, "not materialized (passthrough off)");
		return -EAGAIN;
	}
	if (rc) {
		struct mout **outs = calloc((size_t)mf->njobs, sizeof *outs);
		if (!outs)
			return -ENOMEM;
		rc = gather(m, i, outs, msg, len);
		for (int tries = 0; !rc; tries++) {
			rc = write_file(m, i, outs, &fd, &id, msg, len);
			if (rc != -EAGAIN || tries == 2)
				break;
			rc = 0;    /* an entry changed while it was copied: copy again */
		}
		for (int q = 0; q < mf->njobs; q++) {
			if (outs[q] && !rc)
				posix_fadvise(outs[q]->fd, 0, 0, POSIX_FADV_DONTNEED);
			rq_mout_unref(outs[q]);
		}
		free(outs);
		if (rc)
			return rc;
		*fresh = 1;
	}
	if (!(*out = rq_mout_new(fd, 0, &id, NULL))) {
		close(fd);
		return -ENOMEM;
	}
	return 0;
}

/* File i is READY: its jobs that no other file still needs give up their
 * cache entries (and any fd they hold); returns how many were dropped. */
static int release_covered(struct rq_mount *m, long i)
{
	struct mfile *mf = &m->files[i];
	int n = 0;
	for (int q = 0; q < mf->njobs; q++) {
		int j = mf->jobs[q];
		pthread_mutex_lock(&m->lock);
		/* (not while it runs or is being put, nor while reads wait on it) */
		const struct mjob *J = &m->jobs[j];
		int drop = rq_mnt_job_covered(m, j) && !J->nwait &&
		           (J->state == J_READY || J->state == J_IDLE || J->state == J_QUEUED);
		if (drop) {
			rq_mnt_job_release(m, j);
			m->jobs[j].disk = 0;
		}
		pthread_mutex_unlock(&m->lock);
		if (drop && rq_cache_remove(m->cache, &m->jobs[j].key) == 0)
			n++;
	}
	return n;
}

static void *mat_main(void *arg)
{
	struct rq_mount *m = arg;
	const struct rq_plan *p = m->plan;
	/* What the cache already holds: a file, or every job of one. */
	for (size_t i = 0; i < p->nfiles && !m->mat_stop; i++) {
		struct mfile *mf = &m->files[i];
		if (!mf->njobs)
			continue;
		int have = rq_cache_file_has(m->cache, &mf->mat_key);
		for (int q = 0; q < mf->njobs && !have && m->mat_write; q++)
			if (!rq_cache_has(m->cache, &m->jobs[mf->jobs[q]].key))
				break;
			else if (q == mf->njobs - 1)
				have = 1;
		if (have) {
			int file = rq_cache_file_has(m->cache, &mf->mat_key);
			pthread_mutex_lock(&m->lock);
			mat_push(m, (long)i);
			mf->verifying = file && mf->mat == MAT_QUEUED;
			if (mf->verifying)     /* verifications unblock opens: first, in file order */
				mat_after_verifying(m, (long)i);
			pthread_mutex_unlock(&m->lock);
		}
	}
	pthread_mutex_lock(&m->lock);
	for (;;) {
		while (!m->mat_stop && m->mat_head < 0)
			pthread_cond_wait(&m->mat_cv, &m->lock);
		if (m->mat_stop)
			break;
		/* Writing a file competes with the readers and the quantizer for
		 * the disk and the cores: wait until the mount idles (no copy-path
		 * read nor job for MAT_IDLE_S), so a cold load keeps its pace;
		 * verifying a found file goes first, it unblocks opens. */
		if (!m->files[m->mat_head].verifying) {
			struct timespec until;
			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_nsec += 100000000;
			if (until.tv_nsec >= 1000000000) {
				until.tv_sec++;
				until.tv_nsec -= 1000000000;
			}
			double idle = rq_mnt_now() - atomic_load(&m->last_busy_ns) / 1e9;
			if (m->dq_head >= 0 || m->running > 0 || idle < MAT_IDLE_S) {
				pthread_cond_timedwait(&m->mat_cv, &m->lock, &until);
				continue;
			}
		}
		long i = mat_pop(m);
		struct mfile *mf = &m->files[i];
		mf->mat = MAT_RUNNING;
		m->mat_busy++;
		pthread_mutex_unlock(&m->lock);

		char msg[1024] = "";
		struct mout *o = NULL;
		int fresh = 0;
		double t = rq_mnt_now();
		int rc = materialize(m, i, &o, &fresh, msg, sizeof msg);
		t = rq_mnt_now() - t;

		pthread_mutex_lock(&m->lock);
		int src_ok = !atomic_load(&m->srcs[p->files[i].src].changed);
		if (!rc && mf->mat == MAT_RUNNING && src_ok) {
			mf->mat = MAT_READY;
			mf->mat_out = o;
			o = NULL;
			rq_cache_file_pin(m->cache, &mf->mat_key, +1);
		} else if (mf->mat == MAT_RUNNING) {
			mf->mat = MAT_NONE;
			if (rc && rc != -EAGAIN)
				mf->mat_fails++;
		}
		int ready = mf->mat == MAT_READY, nw;
		struct mread **w = mat_unpark(m, i, &nw);
		pthread_cond_broadcast(&m->mat_done);
		pthread_mutex_unlock(&m->lock);
		rq_mout_unref(o);
		serve_parked(m, w, nw);     /* from the file, or through the jobs */

		if (ready) {
			atomic_fetch_add(fresh ? &m->st.mat_written : &m->st.mat_verified, 1);
			if (fresh)
				atomic_fetch_add(&m->st.mat_bytes, p->files[i].size);
			int dropped = release_covered(m, i);
			/* a remote SRC: what the shard presents now lives in its file,
			 * so the store drops the SRC chunks it kept (never twice) */
			rq_mnt_rv_drop(m, p->files[i].src);
			rq_mount_log(m, "%s %s (%.1f MB) in %.2f s%s; %d job entries dropped",
			             fresh ? "materialized" : "verified the materialized", p->files[i].name,
			             p->files[i].size / 1e6, t, fresh ? "" : " (found in the cache)",
			             dropped);
		} else if (rc == -EAGAIN) {
			if (m->mat_write)
				rq_mount_log(m, "materializing %s postponed: %s", p->files[i].name, msg);
		} else if (rc || !src_ok) {
			atomic_fetch_add(&m->st.mat_failed, 1);
			rq_mount_log(m, "materializing %s failed: %s; it stays on the copy path",
			             p->files[i].name, rc ? msg : "its SRC changed");
		}
		pthread_mutex_lock(&m->lock);
		m->mat_busy--;      /* done: its entries are dropped too (status, warm) */
	}
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

int rq_mnt_mat_start(struct rq_mount *m)
{
	pthread_mutex_lock(&m->lock);
	m->mat_on = 1;
	/* (a remote SRC verified whole: written without passthrough too, so the
	 * SRC file it needed whole can be dropped once it is: mount_rver.c) */
	m->mat_write = (m->pt && rq_pt_enabled(m->pt)) || m->rv;
	m->on_job_cached = job_cached;   /* published jobs may complete a file */
	pthread_mutex_unlock(&m->lock);
	if (pthread_create(&m->mat_thread, NULL, mat_main, m)) {
		pthread_mutex_lock(&m->lock);
		m->mat_on = 0;
		pthread_mutex_unlock(&m->lock);
		return -EAGAIN;
	}
	m->mat_started = 1;
	return 0;
}

void rq_mnt_mat_stop(struct rq_mount *m)
{
	if (!m->mat_started)
		return;
	rq_mnt_flag_stop(&m->lock, &m->mat_stop, &m->mat_cv, &m->mat_done);
	pthread_join(m->mat_thread, NULL);
	m->mat_started = 0;
	/* Reads still parked on a verification go through their jobs now. */
	for (size_t i = 0; i < m->plan->nfiles; i++) {
		int nw;
		pthread_mutex_lock(&m->lock);
		struct mread **w = mat_unpark(m, (long)i, &nw);
		if (m->files[i].mat != MAT_READY)
			m->files[i].mat = MAT_NONE;
		pthread_mutex_unlock(&m->lock);
		serve_parked(m, w, nw);
	}
}

/* ---- copy-path reads of a materialized file ------------------------------ */

int rq_mnt_read_mat(struct rq_mount *m, struct mread *rd)
{
	long i = rd->file;
	uint64_t off = rd->off, size = rd->size;
	struct mfile *mf = &m->files[i];
	struct mout *o = NULL;
	pthread_mutex_lock(&m->lock);
	if (mf->mat == MAT_READY) {
		o = mf->mat_out;
		atomic_fetch_add(&o->refs, 1);
	}
	pthread_mutex_unlock(&m->lock);
	if (!o)
		return 0;
	const struct rq_vfile *f = &m->plan->files[i];
	uint8_t *buf = malloc(size ? size : 1);
	int rc = buf ? 0 : -ENOMEM;
	for (int tries = 0; !rc; tries++) {
		/* Copied, not spliced: a file shrunk under us must not become a
		 * short reply (the kernel would take it for EOF). */
		rc = pread_exact(o->fd, buf, size, off);
		struct rq_err e = {0};
		int r = rq_cache_file_recheck(m->cache, &mf->mat_key, o->fd, f->size, &o->id, &e);
		if (r == 0 && !rc)
			break;
		if (r == 1 && tries + 1 < MAT_RECOPY) {
			rc = 0;
			continue;          /* changed but good: copy again */
		}
		if (r < 0) {
			rq_mnt_mat_failed_check(m, i, o, r, e.msg);
			free(buf);
			rq_mout_unref(o);
			return 0;          /* served through the jobs instead */
		}
		rc = -EIO;
	}
	if (!rq_mnt_read_claim(rd)) {
		;                      /* interrupted meanwhile: answered EINTR */
	} else if (rc) {
		fuse_reply_err(rd->req, -rc);
	} else if (fuse_reply_buf(rd->req, (const char *)buf, size) == 0) {
		atomic_fetch_add(&m->st.reads, 1);
		atomic_fetch_add(&m->st.read_bytes, size);
	}
	free(buf);
	rq_mout_unref(o);
	rq_mnt_read_free(rd);
	return 1;
}
