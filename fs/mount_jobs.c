/* mount_jobs.c — single-flight quantization jobs behind the mount.
 *
 * State machine of one job (struct mjob, every field under m->lock):
 *
 *   IDLE ──a read parks on it / prefetch──▶ QUEUED (demand or prefetch list)
 *   QUEUED ──a worker takes it (gen++)──▶ RUNNING
 *   RUNNING ──cache hit──▶ READY (out = the entry's fd)
 *   RUNNING ──quantized──▶ PUTTING (out = the bytes in memory)
 *   RUNNING ──failure: its parked reads get EIO, it stays retryable──▶ IDLE
 *   PUTTING ──put done: out switched to the entry's fd, or kept in memory
 *             when the cache cannot take it (ENOSPC: a warning)──▶ READY
 *   PUTTING/READY ──evicted (memory or fd LRU), stale entry, or covered by
 *             materialized files (mount_mat.c)──▶ IDLE
 *
 * PUTTING and READY both hold the bytes: data reads are served from either.
 * A jobs/<j> read (warm) answers only at READY, so that `warm` returns once
 * everything it can store is in the cache. Reads parked on a job are
 * answered by the thread that moves it out of QUEUED/RUNNING/PUTTING; a job
 * evicted while reads still wait on it is queued again.
 *
 * A worker (run_job): looks the job up in the cache (verified on first use:
 * a corrupt entry is a logged miss); on a miss runs it (job/job.c: SRC
 * identity before and after, the quantizer, page cache dropped), makes it
 * PUTTING and answers its data reads, publishes it, READY.
 *
 * Lock rules: m->lock protects m->jobs[], both queues, both LRUs, mem_bytes,
 * nfd, running/queued/stop and every parked mread. It is never held while
 * replying, reading files or quantizing. struct mout is reference counted
 * (atomics) so a reply can use bytes the job no longer owns. */
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

#include "base/err.h"
#include "job/job.h"
#include "qdev/qdev.h"

#define DEFAULT_MEM_MAX (1ull << 30)
#define DEFAULT_MAX_FD 1024

/* ---- coverage --------------------------------------------------------- */

int rq_mnt_job_covered(struct rq_mount *m, int j)
{
	const struct mjob *J = &m->jobs[j];
	if (!J->nvf)
		return 0;
	for (int k = 0; k < J->nvf; k++)
		if (m->files[J->vf[k]].mat != MAT_READY)
			return 0;
	return 1;
}

/* ---- queues and LRUs (under m->lock) ----------------------------------- */

static void q_remove(struct rq_mount *m, int j)
{
	struct mjob *J = &m->jobs[j];
	int *head = J->demand ? &m->dq_head : &m->pq_head;
	int *tail = J->demand ? &m->dq_tail : &m->pq_tail;
	if (J->qprev >= 0)
		m->jobs[J->qprev].qnext = J->qnext;
	else
		*head = J->qnext;
	if (J->qnext >= 0)
		m->jobs[J->qnext].qprev = J->qprev;
	else
		*tail = J->qprev;
	J->qprev = J->qnext = -1;
	m->queued--;
}

static void q_append(struct rq_mount *m, int j, int demand)
{
	struct mjob *J = &m->jobs[j];
	int *head = demand ? &m->dq_head : &m->pq_head;
	int *tail = demand ? &m->dq_tail : &m->pq_tail;
	J->demand = demand;
	J->qnext = -1;
	J->qprev = *tail;
	if (*tail >= 0)
		m->jobs[*tail].qnext = j;
	else
		*head = j;
	*tail = j;
	J->state = J_QUEUED;
	m->queued++;
	pthread_cond_signal(&m->work);
}

static void lru_remove(struct rq_mount *m, int j)
{
	struct mjob *J = &m->jobs[j];
	if (!J->on_lru)
		return;
	int *head = J->on_lru == 1 ? &m->mlru_head : &m->flru_head;
	int *tail = J->on_lru == 1 ? &m->mlru_tail : &m->flru_tail;
	if (J->lprev >= 0)
		m->jobs[J->lprev].lnext = J->lnext;
	else
		*head = J->lnext;
	if (J->lnext >= 0)
		m->jobs[J->lnext].lprev = J->lprev;
	else
		*tail = J->lprev;
	J->lprev = J->lnext = -1;
	J->on_lru = 0;
}

static void lru_append(struct rq_mount *m, int j, int which)
{
	struct mjob *J = &m->jobs[j];
	int *head = which == 1 ? &m->mlru_head : &m->flru_head;
	int *tail = which == 1 ? &m->mlru_tail : &m->flru_tail;
	J->on_lru = which;
	J->lnext = -1;
	J->lprev = *tail;
	if (*tail >= 0)
		m->jobs[*tail].lnext = j;
	else
		*head = j;
	*tail = j;
}

void rq_mnt_touch(struct rq_mount *m, int j)
{
	int which = m->jobs[j].on_lru;
	if (which && m->jobs[j].lnext >= 0) {
		lru_remove(m, j);
		lru_append(m, j, which);
	}
}

/* Drops PUTTING/READY job j's output (it becomes IDLE; a later read
 * recomputes or looks it up again). Holders keep their references. Reads
 * still parked on it (jobs/<j> reads waiting for the put) queue it again. */
static void drop_output(struct rq_mount *m, int j)
{
	struct mjob *J = &m->jobs[j];
	struct mout *o = J->out;
	if (J->on_lru == 1)
		m->mem_bytes -= m->plan->jobs[j].out_size;
	else if (J->on_lru == 2)
		m->nfd--;
	lru_remove(m, j);
	J->out = NULL;
	J->state = J_IDLE;
	rq_mout_unref(o);
	if (J->nwait && !m->stop)
		q_append(m, j, 1);
}

void rq_mnt_job_release(struct rq_mount *m, int j)
{
	struct mjob *J = &m->jobs[j];
	if (rq_job_has_bytes(J))
		drop_output(m, j);
	else if (J->state == J_QUEUED && !J->nwait) { /* prefetched: nobody needs it now */
		q_remove(m, j);
		J->state = J_IDLE;
	}
}

void rq_mnt_drop_stale(struct rq_mount *m, int j, struct mout *o)
{
	struct mjob *J = &m->jobs[j];
	if (rq_job_has_bytes(J) && J->out == o) {
		drop_output(m, j);
		J->disk = 0;
	}
}

static void evict(struct rq_mount *m, int keep)
{
	uint64_t mem_max = m->o.mem_max ? m->o.mem_max : DEFAULT_MEM_MAX;
	while (m->mem_bytes > mem_max && m->mlru_head >= 0 && m->mlru_head != keep)
		drop_output(m, m->mlru_head);
	while (m->nfd > m->max_fd && m->flru_head >= 0 && m->flru_head != keep)
		drop_output(m, m->flru_head);
}

void rq_mnt_park(struct rq_mount *m, int j, struct mread *rd)
{
	struct mjob *J = &m->jobs[j];
	for (int i = J->nwait - 1; i >= 0; i--)
		if (J->wait[i] == rd)
			return;
	if (RQ_GROW(J->wait, J->nwait, J->capwait, 4)) {
		rd->err = -ENOMEM;
		return;
	}
	J->wait[J->nwait++] = rd;
	rd->pending++;
	if (J->state == J_IDLE) {
		q_append(m, j, 1);
	} else if (J->state == J_QUEUED && !J->demand) {
		q_remove(m, j);
		q_append(m, j, 1);
	}
}

void rq_mnt_prefetch(struct rq_mount *m, size_t k)
{
	const struct rq_plan *p = m->plan;
	int want = m->o.prefetch, last = p->mods[k].job;
	for (size_t i = k + 1; i < p->nmods && want > 0; i++) {
		int j = p->mods[i].job;
		if (j == last)
			continue;
		last = j;
		want--;
		if (m->jobs[j].state == J_IDLE && !m->stop && !rq_mnt_job_covered(m, j))
			q_append(m, j, 0);
	}
}

void rq_mnt_prefetch_from(struct rq_mount *m, size_t k)
{
	int j = m->plan->mods[k].job;
	if (m->o.prefetch <= 0)
		return;
	if (m->jobs[j].state == J_IDLE && !m->stop && !rq_mnt_job_covered(m, j))
		q_append(m, j, 0);
	rq_mnt_prefetch(m, k);
}

/* A remote SRC (hf://): how far ahead of a reader of SRC bytes in a changed
 * file its next job is started, so quantizing overlaps the fetching. */
#define AHEAD_BYTES (256ull << 20)

void rq_mnt_prefetch_ahead(struct rq_mount *m, long file, uint64_t end)
{
	const struct rq_vfile *f = &m->plan->files[file];
	if (!m->o.rs || m->o.prefetch <= 0 || !f->changed || end >= f->size)
		return;
	for (size_t i = rq_vfile_seg_at(f, end); i < f->nseg; i++) {
		const struct rq_seg *g = &f->seg[i];
		if (g->off > end + AHEAD_BYTES)
			return;
		if (g->kind != RQ_SEG_JOB)
			continue;
		const struct rq_job *jb = &m->plan->jobs[g->job];
		int k = 0;
		while (k + 1 < jb->nmod && g->job_off >= jb->mod_off[k + 1])
			k++;
		pthread_mutex_lock(&m->lock);
		rq_mnt_prefetch_from(m, (size_t)jb->mod[k]);
		pthread_mutex_unlock(&m->lock);
		return;
	}
}

/* ---- completion -------------------------------------------------------- */

/* Under m->lock: detaches job j's parked reads and returns, in the same
 * array, those that have nothing left to wait for (the caller serves them
 * after unlocking, then frees the array). While the job's cache put is in
 * progress, control reads stay parked (in a new list; if that cannot be
 * allocated they are simply answered now). */
static struct mread **release_waiters(struct rq_mount *m, int j, struct mout *o, int err,
                                      int *nready)
{
	struct mjob *J = &m->jobs[j];
	struct mread **w = J->wait, **kept = NULL;
	int n = J->nwait, r = 0, keep = 0;
	for (int i = 0; i < n; i++) {
		struct mread *rd = w[i];
		if (J->state == J_PUTTING && rd->ctl_job >= 0 && !err) {
			if (!kept)
				kept = malloc((size_t)n * sizeof *kept);
			if (kept) {
				kept[keep++] = rd;
				continue;
			}
		}
		if (o && rq_mnt_hold(rd, j, o))
			err = -ENOMEM;
		if (err && !rd->err)
			rd->err = err;
		if (--rd->pending == 0)
			w[r++] = rd;      /* r <= i: never overwrites one not seen yet */
	}
	J->wait = kept;
	J->nwait = keep;
	J->capwait = kept ? n : 0;
	*nready = r;
	return w;
}

static void serve_all(struct rq_mount *m, struct mread **w, int n)
{
	for (int i = 0; i < n; i++)
		w[i]->serve(m, w[i]);
	free(w);
}

/* The cache put of job j is done (stored or not): answer the control reads
 * that waited for it. */
static void settle(struct rq_mount *m, int j, unsigned gen)
{
	int n;
	pthread_mutex_lock(&m->lock);
	struct mjob *J = &m->jobs[j];
	if (J->gen != gen) {          /* evicted and run again since: that run settles */
		pthread_mutex_unlock(&m->lock);
		return;
	}
	if (J->state == J_PUTTING)
		J->state = J_READY;
	struct mread **w = release_waiters(m, j, rq_job_has_bytes(J) ? J->out : NULL, 0, &n);
	pthread_mutex_unlock(&m->lock);
	serve_all(m, w, n);
}

static void complete(struct rq_mount *m, int j, struct mout *o, int lru, int err)
{
	struct mjob *J = &m->jobs[j];
	int n;
	pthread_mutex_lock(&m->lock);
	m->running--;
	if (o) {
		J->state = lru == 1 ? J_PUTTING : J_READY;   /* memory: its put follows */
		J->out = o;
		lru_append(m, j, lru);
		if (lru == 1)
			m->mem_bytes += m->plan->jobs[j].out_size;
		else
			m->nfd++;
	} else {
		J->state = J_IDLE;
		J->fails++;
	}
	struct mread **w = release_waiters(m, j, o, err, &n);
	if (o)
		evict(m, j);
	pthread_mutex_unlock(&m->lock);
	serve_all(m, w, n);
}

/* ---- the worker --------------------------------------------------------- */

static const char *job_name(struct rq_mount *m, int j)
{
	return m->plan->mods[m->plan->jobs[j].mod[0]].name;
}

/* Switches PUTTING job j from memory output o to the entry just published
 * (fd, poff, id: from rq_cache_put_open, no second lookup). */
static void adopt_entry(struct rq_mount *m, int j, struct mout *o, int fd, uint64_t poff,
                        const struct rq_cache_ident *id)
{
	const struct rq_job *jb = &m->plan->jobs[j];
	struct mout *no = rq_mout_new(fd, poff, id, NULL);
	if (!no) {
		close(fd);
		return;
	}
	pthread_mutex_lock(&m->lock);
	struct mjob *J = &m->jobs[j];
	J->disk = 1;
	if (m->on_job_cached)
		m->on_job_cached(m, j);
	if (rq_job_has_bytes(J) && J->out == o) {
		lru_remove(m, j);
		m->mem_bytes -= jb->out_size;
		J->out = no;
		lru_append(m, j, 2);
		m->nfd++;
		evict(m, j);
		no = NULL;
	}
	pthread_mutex_unlock(&m->lock);
	if (no)
		rq_mout_unref(no);
	else
		rq_mout_unref(o);     /* the job's reference; holders keep theirs */
}

/* A miss: quantize (job/job.c checks SRC before and after), answer the data
 * reads from memory (PUTTING), publish, READY. */
static void quantize_job(struct rq_mount *m, int j, unsigned gen)
{
	const struct rq_plan *p = m->plan;
	const struct rq_job *jb = &p->jobs[j];
	struct mjob *J = &m->jobs[j];
	struct rq_err e = {0};
	uint8_t *buf = NULL;
	if (posix_memalign((void **)&buf, 4096, jb->out_size ? jb->out_size : 1)) {
		buf = NULL;
		rq_mount_log(m, "job %d (%s) failed: out of memory", j, job_name(m, j));
		goto fail;
	}
	pthread_mutex_lock(&m->lock);
	if (m->quantizing++ == 0)
		m->busy_since = rq_mnt_now();
	pthread_mutex_unlock(&m->lock);
	double t0 = rq_mnt_now();
	int rc = rq_job_run(m->q, p, (size_t)j, m->src_fds, buf, &e);
	double dt = rq_mnt_now() - t0;
	pthread_mutex_lock(&m->lock);
	if (--m->quantizing == 0)
		m->busy_s += rq_mnt_now() - m->busy_since;
	pthread_mutex_unlock(&m->lock);
	/* when (the line's time stamp: its end), where, how long, how fast (read bytes) */
	if (!rc)
		rq_mount_log(m, "job %d (%s) quantized on %s in %.4f s, %.2f MB, %.0f MB/s", j,
		             job_name(m, j), rq_quantizer_device(m->q), dt, jb->in_size / 1e6,
		             dt > 0 ? jb->in_size / 1e6 / dt : 0.0);
	if (rc == -ESTALE) {
		/* mark it (sticky, logged once, cached pages dropped) */
		for (int s = 0; s < jb->nmod; s++)
			rq_mnt_src_check(m, p->mods[jb->mod[s]].src, 1);
		rq_mount_log(m, "job %d (%s) failed: %s", j, job_name(m, j), e.msg);
		goto fail;
	}
	if (rc) {
		rq_mount_log(m, "job %d (%s) failed: %s", j, job_name(m, j), e.msg);
		goto fail;
	}
	atomic_fetch_add(&m->st.jobs_run, 1);
	atomic_fetch_add(&m->st.quant_in_bytes, jb->in_size);

	struct mout *o = rq_mout_new(-1, 0, NULL, buf);
	if (!o)
		goto fail;
	atomic_fetch_add(&o->refs, 1);           /* ours, until the put is done */
	complete(m, j, o, 1, 0);

	e.msg[0] = 0;
	int fd;
	uint64_t poff;
	struct rq_cache_ident id;
	rc = rq_cache_put_open(m->cache, &J->key, buf, jb->out_size, &fd, &poff, &id, &e);
	if (rc == 0) {
		adopt_entry(m, j, o, fd, poff, &id);
	} else if (rc == -ESTALE) {
		pthread_mutex_lock(&m->lock);
		J->disk = 1;        /* stored (by another process too): served from memory now */
		pthread_mutex_unlock(&m->lock);
	} else {
		atomic_fetch_add(&m->st.put_failed, 1);
		pthread_mutex_lock(&m->lock);
		int first = !m->warned_put;
		m->warned_put = 1;
		pthread_mutex_unlock(&m->lock);
		if (first)
			rq_mount_log(m, "warning: the cache cannot store %s (%s); serving job outputs "
			             "from memory (up to %" PRIu64 " MiB) until it can", job_name(m, j),
			             e.msg, (uint64_t)((m->o.mem_max ? m->o.mem_max : DEFAULT_MEM_MAX) >> 20));
	}
	settle(m, j, gen);
	rq_mout_unref(o);
	return;
fail:
	free(buf);
	atomic_fetch_add(&m->st.jobs_failed, 1);
	complete(m, j, NULL, 0, -EIO);
}

/* A job that ran while the files made from it were being materialized:
 * now that it is READY, its entry is not needed (the bytes are kept once). */
static void drop_if_covered(struct rq_mount *m, int j)
{
	struct mjob *J = &m->jobs[j];
	pthread_mutex_lock(&m->lock);
	int drop = J->state == J_READY && !J->nwait && rq_mnt_job_covered(m, j);
	if (drop) {
		rq_mnt_job_release(m, j);
		J->disk = 0;
	}
	pthread_mutex_unlock(&m->lock);
	if (drop)
		rq_cache_remove(m->cache, &J->key);
}

/* One cache lookup; a hit is READY at once, a miss is quantized. */
static void run_job(struct rq_mount *m, int j)
{
	const struct rq_job *jb = &m->plan->jobs[j];
	struct mjob *J = &m->jobs[j];
	struct rq_err e = {0};
	struct rq_cache_ident id;
	int fd;
	uint64_t poff;
	unsigned gen = J->gen;        /* set by this worker when it took the job */

	int rc = rq_cache_lookup(m->cache, &J->key, jb->out_size, &fd, &poff, &id, &e);
	if (rc == 0) {
		struct mout *o = rq_mout_new(fd, poff, &id, NULL);
		if (o) {
			atomic_fetch_add(&m->st.hits, 1);
			pthread_mutex_lock(&m->lock);
			J->disk = 1;
			if (m->on_job_cached)
				m->on_job_cached(m, j);
			atomic_fetch_add(&m->st.parked_hit, (unsigned long long)J->nwait);
			pthread_mutex_unlock(&m->lock);
			complete(m, j, o, 2, 0);
			drop_if_covered(m, j);
			return;
		}
		close(fd);
	}
	atomic_fetch_add(&m->st.misses, 1);
	if (rc == -ENOENT && e.msg[0]) {
		atomic_fetch_add(&m->st.corrupt, 1);
		rq_mount_log(m, "cache: %s: rebuilding %s", e.msg, job_name(m, j));
	} else if (rc && rc != -ENOENT) {
		rq_mount_log(m, "cache lookup for %s failed: %s", job_name(m, j), e.msg);
	}
	pthread_mutex_lock(&m->lock);
	J->disk = 0;
	pthread_mutex_unlock(&m->lock);
	quantize_job(m, j, gen);
	drop_if_covered(m, j);
}

static void *worker(void *arg)
{
	struct mworker *w = arg;
	struct rq_mount *m = w->m;
	pthread_mutex_lock(&m->lock);
	for (;;) {
		while (!m->stop && m->dq_head < 0 && m->pq_head < 0)
			pthread_cond_wait(&m->work, &m->lock);
		if (m->stop)
			break;
		int j = m->dq_head >= 0 ? m->dq_head : m->pq_head;
		q_remove(m, j);
		m->jobs[j].state = J_RUNNING;
		m->jobs[j].gen++;
		m->running++;
		w->job = j;
		pthread_mutex_unlock(&m->lock);
		run_job(m, j);
		atomic_store(&m->last_busy_ns, (long long)(rq_mnt_now() * 1e9));
		pthread_mutex_lock(&m->lock);
		w->job = -1;
	}
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

/* ---- keys, setup, teardown -------------------------------------------- */

int rq_mnt_jobs_init(struct rq_mount *m, struct rq_err *err)
{
	const struct rq_plan *p = m->plan;
	m->jobs = calloc(p->njobs ? p->njobs : 1, sizeof *m->jobs);
	m->walk_end = calloc(p->nfiles ? p->nfiles : 1, sizeof *m->walk_end);
	m->walk_mod = calloc(p->nfiles ? p->nfiles : 1, sizeof *m->walk_mod);
	if (!m->jobs || !m->walk_end || !m->walk_mod)
		return rq_errf(err, -ENOMEM, "out of memory");
	for (size_t i = 0; i < p->nfiles; i++)
		m->walk_mod[i] = -1;
	m->dq_head = m->dq_tail = m->pq_head = m->pq_tail = -1;
	m->mlru_head = m->mlru_tail = m->flru_head = m->flru_tail = -1;
	m->max_fd = DEFAULT_MAX_FD;
	for (size_t j = 0; j < p->njobs; j++) {
		struct mjob *J = &m->jobs[j];
		J->qprev = J->qnext = J->lprev = J->lnext = -1;
		J->disk = -1;
		if (rq_job_key(p, j, &J->key, NULL))
			return rq_errf(err, -ENOMEM, "out of memory");
	}
	return 0;
}

int rq_mnt_jobs_start(struct rq_mount *m, struct rq_err *err)
{
	int n = m->o.workers > 0 ? m->o.workers : 2;
	m->workers = calloc((size_t)n, sizeof *m->workers);
	if (!m->workers)
		return rq_errf(err, -ENOMEM, "out of memory");
	for (int i = 0; i < n; i++) {
		m->workers[i] = (struct mworker){.m = m, .job = -1};
		if (pthread_create(&m->workers[i].th, NULL, worker, &m->workers[i])) {
			rq_mnt_jobs_stop(m);
			return rq_errf(err, -EAGAIN, "cannot start quantization worker threads");
		}
		m->nworkers++;
	}
	return 0;
}

void rq_mnt_jobs_stop(struct rq_mount *m)
{
	if (!m->jobs)
		return;
	rq_mnt_flag_stop(&m->lock, &m->stop, &m->work, NULL);
	/* A worker can be stuck for good: in open(2) or read(2) of a hung file
	 * system (a dead NFS server, a FUSE daemon that stopped answering), or
	 * anything the kernel will not interrupt. Waiting for it would keep the
	 * daemon alive after umount with its readers stuck, so wait a bounded
	 * time, say which job is stuck, and let the process exit around it:
	 * m->stuck makes rq_mount_close free nothing such a worker may still
	 * touch (jobs, cache, plan, quantizer, session, m itself) -- a leak on
	 * purpose, reclaimed by the exit that follows. */
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += RQ_MNT_STOP_WAIT_S;
	int left = 0;
	for (int i = 0; i < m->nworkers; i++) {
		if (pthread_timedjoin_np(m->workers[i].th, NULL, &dl) == 0)
			continue;
		pthread_mutex_lock(&m->lock);
		int j = m->workers[i].job;
		pthread_mutex_unlock(&m->lock);
		left++;
		if (j >= 0)
			rq_mount_log(m, "stopping: quantization worker %d is stuck in job %d (%s) after "
			             "%d s (a hung file system?); exiting without it", i, j,
			             job_name(m, j), RQ_MNT_STOP_WAIT_S);
		else
			rq_mount_log(m, "stopping: quantization worker %d did not stop within %d s; "
			             "exiting without it", i, RQ_MNT_STOP_WAIT_S);
	}
	if (left) {
		m->stuck = left;   /* workers[] stays: the stuck ones use their slot */
	} else {
		m->nworkers = 0;
		free(m->workers);
		m->workers = NULL;
	}
	/* Nothing runs now (or what runs is stuck): fail whatever is still
	 * parked; a stuck worker that ever returns finds no waiter to answer. */
	for (size_t j = 0; j < m->plan->njobs; j++) {
		int n;
		pthread_mutex_lock(&m->lock);
		if (m->jobs[j].state == J_QUEUED)
			q_remove(m, (int)j);
		if (!rq_job_has_bytes(&m->jobs[j]))
			m->jobs[j].state = J_IDLE;
		struct mread **w = release_waiters(m, (int)j, NULL, -EIO, &n);
		pthread_mutex_unlock(&m->lock);
		serve_all(m, w, n);
	}
}

void rq_mnt_jobs_free(struct rq_mount *m)
{
	free(m->walk_end);
	free(m->walk_mod);
	m->walk_end = NULL;
	m->walk_mod = NULL;
	if (!m->jobs)
		return;
	for (size_t j = 0; j < m->plan->njobs; j++) {
		free(m->jobs[j].wait);
		rq_mout_unref(m->jobs[j].out);
	}
	free(m->jobs);
	m->jobs = NULL;
}
