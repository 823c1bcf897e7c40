/* mount_rver.c — a remote SRC (hf://): --remote-verify file, and the remote
 * pool that keeps remote waits off the FUSE threads.
 *
 * --remote-verify file (the default): the hub gives a whole-file sha256
 * (LFS) or git blob id, no per-chunk hash, so no byte derived from a SRC
 * file -- served unchanged, the BF16 a job quantizes, a shard's header the
 * plan holds -- leaves the daemon before that whole file has been fetched
 * and checked. State of remote file r (struct mrv, under m->lock):
 *
 *   NONE --a read needs it (parked on it) or a job / the materializer
 *          needs it (waits on rv_cv): a fetch task queued--> FETCHING
 *   FETCHING --a pool thread: rq_rs_fetch_file (every chunk, in parallel
 *          over the store's connections, assembled, checked; a mismatch
 *          refetched once), then the copy's first 8 + N bytes compared with
 *          the head the plan was built from (mount_remote.c)-->
 *        LOCAL, verified (sticky): parked reads served again, from the
 *          verified copy (spliced; an identical file passes through from
 *          its next open); jobs read their BF16 input from it
 *        NONE: the fetch failed (faults after the store's retries, offline,
 *          or the hub's bytes hashing wrong twice: the store then fails
 *          every later fetch at once); parked reads answered EIO, logged
 *        BAD (sticky): the verified bytes' head differs from the one the
 *          plan used, or the store failed the file for good (hashed wrong
 *          twice, a size the server contradicts: rq_rs_failed): every read
 *          of the file fails EIO at once, one log line; remount
 *   LOCAL --the shard presented from it is materialized (mount_mat.c): the
 *          copy is released and the store drops the file--> NONE (verified
 *          stays: the plan's bytes from it were checked; a job that must
 *          run again fetches it again)
 *
 * Every gated read of a file (fetching or verified) starts the fetch of
 * the next RV_AHEAD files not yet fetched (shards are loaded in name
 * order): their transfer overlaps this one's check, quantization and
 * reading, so the connections never idle between files. (Once only the
 * read that started a fetch did: reading files 1-3 started nothing, and
 * file 4 was fetched only when its first read came: a stall every third
 * file.)
 *
 * Gates: a read of a presented file whose SRC is remote waits for
 * `verified` (rq_mnt_rv_gate: its header comes from the head); a SRC
 * segment waits for LOCAL and holds the copy (a struct mout, RQ_RV_KEY)
 * until its reply is sent, so a drop never closes an fd under a reply.
 *
 * The remote pool (both modes): RV_POOL threads, twice the store's default
 * 8 connections (mount_hf.c opens the store with the default), take tasks:
 * a whole-file fetch (file mode), or (none mode) a read whose remote bytes
 * are not assembled yet, answered on the pool thread exactly as a FUSE
 * thread would have. A FUSE thread only queues or parks, so slow reads of
 * one file never stall readers of another. Reads park on the file, one
 * fetch however many readers: 20 readers of a stalled file hold one pool
 * thread and no FUSE thread. (none mode: each such read holds a pool
 * thread; with RV_POOL of them busy, later remote reads queue, while reads
 * of local bytes still go straight through.)
 *
 * Stop: rq_mnt_rv_stop answers parked reads and queued tasks EIO and wakes
 * waiting jobs; rq_mnt_rv_join waits RV_STOP_WAIT_S at most: a thread still
 * in a fetch (a stalled server) is left to rq_rs_close's cancel, counted in
 * m->stuck so nothing it uses is freed. */
#include "base/grow.h"
#include "fs/mount_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "remote/rstore.h"

#define RV_POOL 16          /* 2 x the store's default connections */
#define RV_STOP_WAIT_S 2
#define RV_AHEAD 2          /* files fetched ahead of a reader (ahead()) */

static int on(const struct rq_mount *m)
{
	return m->rv != NULL;
}

static size_t ridx(const struct rq_mount *m, int s)
{
	return m->plan->srcs[s].ridx;
}

static const char *rname(const struct rq_mount *m, size_t r)
{
	return m->o.rfiles[r].name;
}

/* ---- the pool ------------------------------------------------------------ */

static int push(struct rq_mount *m, long r, struct mread *rd)
{
	struct rvtask *t = calloc(1, sizeof *t);
	if (!t)
		return -ENOMEM;
	t->r = r;
	t->rd = rd;
	pthread_mutex_lock(&m->rp_mu);
	if (m->rp_stop) {
		pthread_mutex_unlock(&m->rp_mu);
		free(t);
		return -ECANCELED;
	}
	if (m->rp_tail)
		m->rp_tail->next = t;
	else
		m->rp_head = t;
	m->rp_tail = t;
	pthread_cond_signal(&m->rp_cv);
	pthread_mutex_unlock(&m->rp_mu);
	return 0;
}

int rq_mnt_rv_push(struct rq_mount *m, struct mread *rd)
{
	return push(m, -1, rd);
}

/* Under m->lock: file r ends its fetch (state already set): its parked
 * reads that wait for nothing else are returned (*n) to be served after
 * unlocking; err: what they get when it failed. */
static struct mread **release(struct rq_mount *m, size_t r, int err, int *n)
{
	struct mrv *v = &m->rv[r];
	struct mread **w = v->wait;
	int k = 0;
	for (int i = 0; i < v->nwait; i++) {
		struct mread *rd = w[i];
		if (err && !rd->err)
			rd->err = err;
		if (--rd->pending == 0)
			w[k++] = rd;
	}
	v->wait = NULL;
	v->nwait = v->capwait = 0;
	v->gen++;
	pthread_cond_broadcast(&m->rv_cv);
	*n = k;
	return w;
}

static void serve_all(struct rq_mount *m, struct mread **w, int n)
{
	for (int i = 0; i < n; i++)
		w[i]->serve(m, w[i]);
	free(w);
}

/* Pool thread: fetch and verify file r, then answer who waits for it. */
static void fetch(struct rq_mount *m, size_t r)
{
	struct rq_err e = {0};
	double t = rq_mnt_now();
	rq_rs_pin(m->o.rs, r, 1);     /* kept while v->out holds the copy open (--cache-max) */
	int rc = rq_rs_fetch_file(m->o.rs, r, NULL, NULL, &e), fd = -1, bad = 0;
	int lost = rc && rq_rs_failed(m->o.rs, r);   /* for good: BAD, logged once */
	const char *path = rc ? NULL : rq_rs_path(m->o.rs, r);
	struct stat st;
	if (!rc && (!path || (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || fstat(fd, &st) ||
	            (uint64_t)st.st_size != m->o.rfiles[r].size))
		rc = rq_errf(&e, -EIO, "its verified copy %s is gone or not %" PRIu64 " bytes",
		             path ? path : "(none)", m->o.rfiles[r].size);
	if (!rc) {
		int h = rq_mnt_remote_head_check(m, r, fd);
		bad = h == -EPROTO;
		if (h && !bad)
			rc = rq_errf(&e, -EIO, "cannot read the head of its verified copy %s", path);
	}
	struct mout *o = !rc && !bad ? rq_mout_new(fd, 0, NULL, NULL) : NULL;
	if (!rc && !bad && !o)
		rc = rq_errf(&e, -ENOMEM, "out of memory");
	if (!o && fd >= 0)
		close(fd);
	if (!o)
		rq_rs_pin(m->o.rs, r, -1);
	int n;
	pthread_mutex_lock(&m->lock);
	struct mrv *v = &m->rv[r];
	if (o) {
		v->state = RV_LOCAL;
		v->out = o;
		atomic_store(&v->verified, 1);
	} else {
		v->state = bad || lost ? RV_BAD : RV_NONE;
	}
	struct mread **w = release(m, r, o ? 0 : -EIO, &n);
	pthread_mutex_unlock(&m->lock);
	if (o) {
		rq_mount_logl(m, RQ_LOG_DEBUG, "remote: %s fetched whole and verified in %.2f s",
		              rname(m, r), rq_mnt_now() - t);
	} else if (bad) {
		atomic_fetch_add(&m->st.remote_failed, 1);
		rq_mount_logl(m, RQ_LOG_ERROR, "remote: %s: the hub served a header (its first %" PRIu64
		              " bytes, fetched by range at mount) that does not match the file's "
		              "sha256-verified bytes: every read of it fails EIO; remount to rebuild "
		              "the plan", rname(m, r), m->rhlen[r]);
	} else if (lost) {
		atomic_fetch_add(&m->st.remote_failed, 1);
		rq_mount_logl(m, RQ_LOG_ERROR, "remote: %s: %s: every read of it fails EIO",
		              rname(m, r), e.msg[0] ? e.msg : strerror(-rc));
	} else if (rc != -ECANCELED) {
		atomic_fetch_add(&m->st.remote_failed, 1);
		rq_mount_logl(m, RQ_LOG_ERROR, "remote: %s: whole-file fetch failed: %s: its reads "
		              "fail EIO (--remote-verify file serves no byte of it unverified)",
		              rname(m, r), e.msg[0] ? e.msg : strerror(-rc));
	}
	serve_all(m, w, n);
}

static void *pool_main(void *arg)
{
	struct rq_mount *m = arg;
	pthread_mutex_lock(&m->rp_mu);
	for (;;) {
		while (!m->rp_stop && !m->rp_head)
			pthread_cond_wait(&m->rp_cv, &m->rp_mu);
		struct rvtask *t = m->rp_head;
		if (!t)
			break;
		if (!(m->rp_head = t->next))
			m->rp_tail = NULL;
		pthread_mutex_unlock(&m->rp_mu);
		if (t->r >= 0)
			fetch(m, (size_t)t->r);
		else
			t->rd->serve(m, t->rd);
		free(t);
		pthread_mutex_lock(&m->rp_mu);
	}
	pthread_mutex_unlock(&m->rp_mu);
	return NULL;
}

/* ---- file mode: fetches, parking, holds ------------------------------------ */

/* Under m->lock: queues the fetch of file r (NONE -> FETCHING). */
static int start(struct rq_mount *m, size_t r)
{
	struct mrv *v = &m->rv[r];
	if (v->state != RV_NONE)
		return 0;
	int rc = m->rv_stop ? -ECANCELED : push(m, (long)r, NULL);
	if (!rc)
		v->state = RV_FETCHING;
	return rc;
}

/* Under m->lock: does any presented file still need remote file r's
 * bytes? Not when every file made from it is a requantized shard already
 * materialized (or found so in the cache): its SRC was dropped for good. */
static int wanted(struct rq_mount *m, size_t r)
{
	const struct rq_plan *p = m->plan;
	for (size_t f = 0; f < p->nfiles; f++) {
		int s = p->files[f].src;
		if (s < 0 || (size_t)s >= p->nsrcs || ridx(m, s) != r)
			continue;
		const struct mfile *mf = &m->files[f];
		if (!mf->njobs || (mf->mat != MAT_READY && !mf->verifying))
			return 1;
	}
	return 0;
}

/* Under m->lock: a read of file r: the next RV_AHEAD files not fetched nor
 * verified, and still wanted, are fetched too (a loader reads shards in
 * order), so their transfer overlaps the check, quantization and reading
 * of r. */
static void ahead(struct rq_mount *m, size_t r)
{
	int n = 0;
	/* a bounded window: this runs under the lock on every gated read */
	for (size_t k = r + 1; k < m->o.nrfiles && k <= r + 4 * RV_AHEAD && n < RV_AHEAD; k++) {
		if (m->rv[k].state != RV_NONE || atomic_load(&m->rv[k].verified) || !wanted(m, k))
			continue;
		if (start(m, k))
			return;
		n++;
	}
}

/* Under m->lock: parks rd on file r's fetch (started if need be). */
static int park(struct rq_mount *m, struct mread *rd, size_t r)
{
	struct mrv *v = &m->rv[r];
	if (v->state == RV_BAD || m->rv_stop)
		return -EIO;
	if (v->state == RV_NONE) {
		if (start(m, r))
			return -EIO;
		ahead(m, r);
	}
	if (RQ_GROW(v->wait, v->nwait, v->capwait, 4))
		return -EIO;
	v->wait[v->nwait++] = rd;
	rd->pending++;
	return 1;
}

int rq_mnt_rv_needs(struct rq_mount *m, long file)
{
	if (!on(m))
		return 0;
	int s = m->plan->files[file].src;
	if (s < 0 || (size_t)s >= m->plan->nsrcs)
		return 0;
	return !atomic_load(&m->rv[ridx(m, s)].verified);
}

int rq_mnt_rv_gate(struct rq_mount *m, struct mread *rd)
{
	if (!on(m))
		return 0;
	int s = m->plan->files[rd->file].src;
	if (s < 0 || (size_t)s >= m->plan->nsrcs)
		return 0;
	size_t r = ridx(m, s);
	if (!m->rv_stop)
		ahead(m, r);        /* every read of r keeps the next files coming */
	if (atomic_load(&m->rv[r].verified))
		return 0;
	return park(m, rd, r);
}

int rq_mnt_rv_acquire(struct rq_mount *m, struct mread *rd, int s)
{
	size_t r = ridx(m, s);
	struct mrv *v = &m->rv[r];
	if (rq_mnt_held(rd, RQ_RV_KEY(r)))
		return 0;
	if (v->state == RV_LOCAL)
		return rq_mnt_hold(rd, RQ_RV_KEY(r), v->out) ? -EIO : 0;
	return park(m, rd, r);
}

/* The verified copy of file r (a reference), fetched if need be; blocks the
 * caller (a job, the materializer: never a FUSE thread). NULL: *rc. */
static struct mout *ensure(struct rq_mount *m, size_t r, int *rc)
{
	struct mout *o = NULL;
	pthread_mutex_lock(&m->lock);
	struct mrv *v = &m->rv[r];
	unsigned gen = v->gen;
	for (;;) {
		if (v->state == RV_LOCAL) {
			o = v->out;
			atomic_fetch_add(&o->refs, 1);
			break;
		}
		if (m->rv_stop) {
			*rc = -ECANCELED;
			break;
		}
		if (v->state == RV_BAD || (v->gen != gen && v->state == RV_NONE)) {
			*rc = -EIO;         /* a fetch since we asked, and it failed */
			break;
		}
		if ((*rc = start(m, r)))
			break;
		pthread_cond_wait(&m->rv_cv, &m->lock);
	}
	pthread_mutex_unlock(&m->lock);
	return o;
}

static int pread_all(int fd, uint8_t *p, uint64_t n, uint64_t off)
{
	while (n) {
		ssize_t k = pread(fd, p, n, (off_t)off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -EIO;
		p += k;
		n -= (uint64_t)k;
		off += (uint64_t)k;
	}
	return 0;
}

/* Bytes of file r from its verified copy (blocking). */
static int copy_read(struct rq_mount *m, size_t r, uint64_t off, uint64_t len, void *buf,
                     struct rq_err *err)
{
	int rc = 0;
	struct mout *o = ensure(m, r, &rc);
	if (!o)
		return rq_errf(err, rc == -ECANCELED ? rc : -EIO, "%s/%s: not fetched whole and "
		               "verified (%s; the log says why)", m->src, rname(m, r),
		               rc == -ECANCELED ? "the mount is stopping" : "failed");
	rc = pread_all(o->fd, buf, len, off);
	rq_mout_unref(o);
	if (rc)
		return rq_errf(err, -EIO, "%s/%s: its verified copy cannot be read at %" PRIu64,
		               m->src, rname(m, r), off);
	return 0;
}

/* The jobs' reader in file mode (m->rreader.read once the plan is built). */
static int job_reader(void *ctx, size_t i, uint64_t off, uint64_t len, void *buf,
                      struct rq_err *err)
{
	return copy_read(ctx, i, off, len, buf, err);
}

int rq_mnt_src_read(struct rq_mount *m, int s, uint64_t off, uint64_t len, void *buf)
{
	if (!on(m))
		return rq_mnt_remote_read(m, s, off, len, buf, 0);
	struct rq_err e = {0};
	int rc = copy_read(m, ridx(m, s), off, len, buf, &e);
	if (rc && rc != -ECANCELED)
		rq_mount_logl(m, RQ_LOG_ERROR, "%s: EIO", e.msg);
	return rc ? -EIO : 0;
}

int rq_mnt_rv_whole(struct rq_mount *m, int s)
{
	if (s < 0 || (size_t)s >= m->plan->nsrcs)
		return 0;
	if (!on(m))
		return rq_mnt_remote_fd(m, s) >= 0;
	return m->rv[ridx(m, s)].state == RV_LOCAL;
}

int rq_mnt_src_fd(struct rq_mount *m, int s)
{
	if (!m->o.rs)
		return m->srcs[s].fd;
	if (!on(m))
		return rq_mnt_remote_fd(m, s);
	pthread_mutex_lock(&m->lock);
	const struct mrv *v = &m->rv[ridx(m, s)];
	int fd = v->state == RV_LOCAL ? v->out->fd : -1;
	pthread_mutex_unlock(&m->lock);
	return fd;
}

void rq_mnt_rv_drop(struct rq_mount *m, int s)
{
	if (!m->o.rs)
		return;
	struct mout *o = NULL;
	if (on(m)) {
		pthread_mutex_lock(&m->lock);
		struct mrv *v = &m->rv[ridx(m, s)];
		if (v->state == RV_LOCAL) {
			o = v->out;            /* readers still holding it keep the fd */
			v->out = NULL;
			v->state = RV_NONE;
			rq_rs_pin(m->o.rs, ridx(m, s), -1);
		}
		pthread_mutex_unlock(&m->lock);
	}
	rq_mout_unref(o);
	rq_mnt_remote_drop(m, s);
}

/* ---- life ------------------------------------------------------------------ */

int rq_mnt_rv_init(struct rq_mount *m, struct rq_err *err)
{
	if (!m->o.rs)
		return 0;
	pthread_cond_init(&m->rv_cv, NULL);
	pthread_mutex_init(&m->rp_mu, NULL);
	pthread_cond_init(&m->rp_cv, NULL);
	m->rv_inited = 1;
	if (m->o.remote_verify != RQ_RV_FILE)
		return 0;
	if (!(m->rv = calloc(m->o.nrfiles ? m->o.nrfiles : 1, sizeof *m->rv)))
		return rq_errf(err, -ENOMEM, "out of memory");
	for (size_t r = 0; r < m->o.nrfiles; r++)   /* read whole by the plan, no head kept */
		atomic_init(&m->rv[r].verified, m->rwhole && m->rwhole[r] && !m->rhlen[r]);
	m->rreader.read = job_reader;    /* jobs read their BF16 from verified copies */
	return 0;
}

int rq_mnt_rv_start(struct rq_mount *m)
{
	if (!m->o.rs)
		return 0;
	if (!(m->rp_th = calloc(RV_POOL, sizeof *m->rp_th)))
		return -ENOMEM;
	while (m->rp_n < RV_POOL && !pthread_create(&m->rp_th[m->rp_n], NULL, pool_main, m))
		m->rp_n++;
	if (!m->rp_n)
		return -EAGAIN;
	/* file mode: files a mount before assembled and verified become LOCAL
	 * at once (a pool fetch finds them whole: no transfer), so a remount
	 * serves them by passthrough from their first open */
	for (size_t r = 0; on(m) && r < m->o.nrfiles; r++) {
		if (!rq_rs_path(m->o.rs, r))
			continue;
		pthread_mutex_lock(&m->lock);
		start(m, r);
		pthread_mutex_unlock(&m->lock);
	}
	return 0;
}

void rq_mnt_rv_stop(struct rq_mount *m)
{
	if (!m->rv_inited)
		return;
	struct mread **ready = NULL;
	int nready = 0;
	pthread_mutex_lock(&m->lock);
	m->rv_stop = 1;
	for (size_t r = 0; m->rv && r < m->o.nrfiles; r++) {
		int n;
		struct mread **w = release(m, r, -EIO, &n);
		struct mread **all = n ? realloc(ready, (size_t)(nready + n) * sizeof *all) : ready;
		if (all) {
			ready = all;
			memcpy(ready + nready, w, (size_t)n * sizeof *w);
			nready += n;
		}
		free(w);
	}
	pthread_cond_broadcast(&m->rv_cv);
	pthread_mutex_unlock(&m->lock);
	serve_all(m, ready, nready);       /* each answers its EIO */
	pthread_mutex_lock(&m->rp_mu);
	m->rp_stop = 1;
	struct rvtask *t = m->rp_head;
	m->rp_head = m->rp_tail = NULL;
	pthread_cond_broadcast(&m->rp_cv);
	pthread_mutex_unlock(&m->rp_mu);
	while (t) {
		struct rvtask *next = t->next;
		if (t->rd) {
			rq_mnt_read_fail(t->rd, EIO);
		} else if (m->rv) {
			pthread_mutex_lock(&m->lock);
			if (m->rv[t->r].state == RV_FETCHING)
				m->rv[t->r].state = RV_NONE;
			pthread_cond_broadcast(&m->rv_cv);
			pthread_mutex_unlock(&m->lock);
		}
		free(t);
		t = next;
	}
}

void rq_mnt_rv_join(struct rq_mount *m)
{
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += RV_STOP_WAIT_S;
	int left = 0;
	for (int i = 0; i < m->rp_n; i++)
		if (pthread_timedjoin_np(m->rp_th[i], NULL, &dl))
			left++;
	if (left) {
		rq_mount_log(m, "%d remote fetch%s still in flight at stop: left to the store's "
		             "cancel", left, left > 1 ? "es" : "");
		m->stuck += left;
		return;
	}
	m->rp_n = 0;
}

void rq_mnt_rv_free(struct rq_mount *m)
{
	if (!m->rv_inited || m->rp_n)
		return;
	for (size_t r = 0; m->rv && r < m->o.nrfiles; r++) {
		if (m->rv[r].out)     /* the store outlives the mount */
			rq_rs_pin(m->o.rs, r, -1);
		rq_mout_unref(m->rv[r].out);
		free(m->rv[r].wait);
	}
	free(m->rv);
	m->rv = NULL;
	free(m->rp_th);
	m->rp_th = NULL;
	pthread_cond_destroy(&m->rv_cv);
	pthread_cond_destroy(&m->rp_cv);
	pthread_mutex_destroy(&m->rp_mu);
	m->rv_inited = 0;
}
