/* mount_ctl.c — the hidden /.requantfs/ control directory, an edge of the
 * daemon: only mount.c's operations reach it (for its own inodes), and the
 * data path never calls it.
 *
 *   /.requantfs/status     a JSON snapshot taken at open (direct I/O, so
 *                          every open sees fresh numbers)
 *   /.requantfs/jobs/<j>   reading runs job j if needed and answers when it
 *                          is ready ("<j> ok <modules> <in_bytes> <cache|memory>")
 *                          or fails with EIO; `requantfs warm` reads them all
 *                          (parked like a data read, answered through
 *                          mread.serve = rq_mnt_ctl_serve) */
#include "fs/mount_int.h"
#include "remote/rstore.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fs/mount_pt.h"
#include "qdev/qdev.h"

/* ---- text ---------------------------------------------------------------- */

struct sbuf {
	char *s;
	size_t len, cap;
	int oom;
};

static void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
	while (!b->oom) {
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->oom = 1;
			return;
		}
		if (b->s && (size_t)n < b->cap - b->len) {
			b->len += (size_t)n;
			return;
		}
		size_t nc = (b->cap + (size_t)n + 64) * 2;
		char *v = realloc(b->s, nc);
		if (!v) {
			b->oom = 1;
			return;
		}
		b->s = v;
		b->cap = nc;
	}
}

static void sb_jstr(struct sbuf *b, const char *s)
{
	sb_printf(b, "\"");
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			sb_printf(b, "\\%c", c);
		else if (c < 0x20)
			sb_printf(b, "\\u%04x", c);
		else
			sb_printf(b, "%c", c);
	}
	sb_printf(b, "\"");
}

char *rq_mnt_job_line(struct rq_mount *m, long j, int from_disk)
{
	const struct rq_job *jb = &m->plan->jobs[j];
	char *s = NULL;
	if (asprintf(&s, "%ld ok %d %" PRIu64 " %s\n", j, jb->nmod, jb->in_size,
	             from_disk ? "cache" : "memory") < 0)
		return NULL;
	return s;
}

/* Learns which jobs of unknown state have an entry file in the cache,
 * without holding m->lock while stat()ing. Unverified: the entry is checked when first used. An
 * entry another process adds later is learned when the job is first read. */
static void scan_disk(struct rq_mount *m)
{
	size_t n = m->plan->njobs;
	signed char *seen = malloc(n ? n : 1);
	if (!seen)
		return;
	pthread_mutex_lock(&m->lock);
	for (size_t j = 0; j < n; j++)
		seen[j] = (signed char)m->jobs[j].disk;
	pthread_mutex_unlock(&m->lock);
	for (size_t j = 0; j < n; j++)
		if (seen[j] == -1)
			seen[j] = (signed char)rq_cache_has(m->cache, &m->jobs[j].key);
	pthread_mutex_lock(&m->lock);
	for (size_t j = 0; j < n; j++)
		if (m->jobs[j].disk == -1)
			m->jobs[j].disk = seen[j];
	pthread_mutex_unlock(&m->lock);
	free(seen);
}

static char *status_json(struct rq_mount *m)
{
	const struct rq_plan *p = m->plan;
	struct sbuf b = {0};
	uint64_t mods_cached = 0, mods_ready = 0, jobs_cached = 0, jobs_ready = 0, jobs_mem = 0;
	uint64_t in_total = 0, mem_bytes;
	int running, queued;
	scan_disk(m);
	pthread_mutex_lock(&m->lock);
	for (size_t j = 0; j < p->njobs; j++) {
		const struct mjob *J = &m->jobs[j];
		in_total += p->jobs[j].in_size;
		/* covered: its bytes are in materialized files (its entry dropped) */
		int cached = J->disk == 1 || rq_mnt_job_covered(m, (int)j);
		if (cached) {
			jobs_cached++;
			mods_cached += (uint64_t)p->jobs[j].nmod;
		}
		if (rq_job_has_bytes(J) || cached) {
			jobs_ready++;
			mods_ready += (uint64_t)p->jobs[j].nmod;
		}
		if (rq_job_has_bytes(J) && J->out->fd < 0)
			jobs_mem++;
	}
	mem_bytes = m->mem_bytes;
	double qs = m->busy_s + (m->quantizing ? rq_mnt_now() - m->busy_since : 0);
	running = m->running;
	queued = m->queued;
	pthread_mutex_unlock(&m->lock);

	struct rq_cache_stats cs;
	rq_cache_get_stats(m->cache, &cs);
	uint64_t qin = atomic_load(&m->st.quant_in_bytes);
	sb_printf(&b, "{\n  \"pid\": %d,\n  \"mountpoint\": ", (int)getpid());
	sb_jstr(&b, m->mnt);
	sb_printf(&b, ",\n  \"src\": ");
	sb_jstr(&b, m->src);
	if (m->o.rs) {      /* remote SRC (hf://): what the chunk store fetched and keeps */
		struct rq_rs_stats rs;
		rq_rs_stats(m->o.rs, &rs);
		sb_printf(&b, ",\n  \"remote\": {\"fetched_bytes\": %" PRIu64 ", \"fetched_chunks\": %"
		          PRIu64 ", \"cached_hits\": %" PRIu64 ", \"retries\": %" PRIu64
		          ", \"failures\": %" PRIu64 ", \"refetches\": %" PRIu64 ", \"bytes_on_disk\": %"
		          PRIu64 ", \"evicted_files\": %" PRIu64 ", \"evicted_bytes\": %" PRIu64
		          ", \"not_kept\": %" PRIu64 ", \"read_errors\": %llu, \"verify\": \"%s\"}",
		          rs.fetched_bytes, rs.fetched_chunks, rs.cached_hits, rs.retries, rs.failures,
		          rs.refetches, rs.bytes_on_disk, rs.evicted_files, rs.evicted_bytes,
		          rs.not_kept, atomic_load(&m->st.remote_failed),
		          m->o.remote_verify == RQ_RV_NONE ? "none" : "file");
	}
	sb_printf(&b, ",\n  \"cache_dir\": ");
	sb_jstr(&b, rq_cache_dir(m->cache));
	sb_printf(&b, ",\n  \"scheme\": \"%s\",\n  \"recipe\": \"%s\",\n  \"recipe_version\": %d,"
	          "\n  \"dropped_rule\": ", rq_scheme_name(p->scheme), rq_recipe_name(p->recipe),
	          RQ_RECIPE_VERSION);
	sb_jstr(&b, p->dropped_rule);
	if (p->dropped_rule)     /* the Laguna fix: what the dropped rule's modules became */
		sb_printf(&b, ",\n  \"rule_scheme\": \"%s\"",
		          rq_scheme_name((enum rq_scheme)m->o.rule_scheme));
	/* the weights' observer; and the input scales' (a calibration file that says) */
	sb_printf(&b, ",\n  \"observer\": \"%s\",\n  \"observer_version\": %d",
	          rq_observer_name(p->observer), p->observer ? RQ_OBSERVER_VERSION : 0);
	if (p->calib_observer) {
		sb_printf(&b, ",\n  \"calib_observer\": ");
		sb_jstr(&b, p->calib_observer);
	}
	sb_printf(&b, ",\n  \"device\": ");
	sb_jstr(&b, rq_quantizer_device(m->q));
	{       /* why the jobs run there (qdev's state machine) */
		char why[1024];
		struct rq_quantizer_stats qs;
		rq_quantizer_get_stats(m->q, &qs);
		sb_printf(&b, ",\n  \"device_state\": \"%s\",\n  \"device_reason\": ",
		          rq_quantizer_state(m->q));
		sb_jstr(&b, rq_quantizer_reason(m->q, why, sizeof why));
		sb_printf(&b, ",\n  \"gpu_jobs\": %llu,\n  \"cpu_jobs\": %llu,\n  \"gpu_failures\": "
		          "%llu,\n  \"gpu_watchdog\": %llu,\n  \"gpu_context_bytes\": %llu,\n"
		          "  \"gpu_host_copied_bytes\": %llu", qs.gpu_jobs, qs.cpu_jobs,
		          qs.gpu_failures, qs.watchdog, qs.context_bytes, qs.host_copied);
	}
	sb_printf(&b, ",\n  \"uptime_s\": %.1f,\n  \"files\": %zu,\n  \"total_bytes\": %" PRIu64 ",\n",
	          rq_mnt_now() - m->t_start, p->nfiles, p->total_size);
	sb_printf(&b, "  \"modules_total\": %zu,\n  \"modules_cached\": %" PRIu64 ",\n"
	          "  \"modules_ready\": %" PRIu64 ",\n", p->nmods, mods_cached, mods_ready);
	sb_printf(&b, "  \"jobs_total\": %zu,\n  \"jobs_cached\": %" PRIu64 ",\n  \"jobs_ready\": %"
	          PRIu64 ",\n  \"jobs_in_memory\": %" PRIu64 ",\n  \"jobs_in_flight\": %d,\n"
	          "  \"jobs_queued\": %d,\n  \"jobs_run\": %llu,\n  \"jobs_failed\": %llu,\n",
	          p->njobs, jobs_cached, jobs_ready, jobs_mem, running, queued,
	          atomic_load(&m->st.jobs_run), atomic_load(&m->st.jobs_failed));
	sb_printf(&b, "  \"in_bytes_total\": %" PRIu64 ",\n  \"memory_bytes\": %" PRIu64 ",\n",
	          in_total, mem_bytes);
	sb_printf(&b, "  \"cache_hits\": %llu,\n  \"cache_misses\": %llu,\n  \"cache_corrupt\": %llu,\n"
	          "  \"cache_put_failed\": %llu,\n  \"cache_entries\": %" PRIu64 ",\n"
	          "  \"cache_bytes\": %" PRIu64 ",\n  \"cache_evicted\": %" PRIu64 ",\n",
	          atomic_load(&m->st.hits), atomic_load(&m->st.misses),
	          atomic_load(&m->st.corrupt), atomic_load(&m->st.put_failed), cs.entries, cs.bytes,
	          cs.evicted);
	sb_printf(&b, "  \"quant_in_bytes\": %" PRIu64 ",\n  \"quant_seconds\": %.3f,\n"
	          "  \"quant_mb_s\": %.1f,\n", qin, qs, qs > 0 ? qin / qs / 1e6 : 0.0);
	sb_printf(&b, "  \"reads\": %llu,\n  \"read_bytes\": %llu,\n  \"parked_reads\": %llu,\n"
	          "  \"parked_on_hits\": %llu,\n", atomic_load(&m->st.reads),
	          atomic_load(&m->st.read_bytes), atomic_load(&m->st.parked),
	          atomic_load(&m->st.parked_hit));
	/* How files are served: passthrough (identical to SRC, or materialized),
	 * pending (a requantized shard not materialized yet), copy (the rest).
	 * A pending shard is queued or being written (every job cached: it
	 * passes through soon), waits for jobs not cached yet, or is stuck
	 * (every job cached, yet not queued: its materialization failed or was
	 * postponed, the log says why). */
	int pt_on = m->pt && rq_pt_enabled(m->pt);
	uint64_t f_pt = 0, f_pend = 0, f_copy = 0, f_mat = 0, mat_q = 0;
	uint64_t f_pend_jobs = 0, f_pend_stuck = 0;
	pthread_mutex_lock(&m->lock);
	for (size_t i = 0; i < p->nfiles; i++) {
		const struct mfile *mf = &m->files[i];
		f_mat += mf->mat == MAT_READY;
		mat_q += mf->mat == MAT_QUEUED;
		/* a remote file identical to SRC passes through once assembled */
		int whole = !p->files[i].changed &&
		            (!m->o.rs || rq_mnt_rv_whole(m, p->files[i].src));
		if (pt_on && !mf->pt_err && (whole || mf->mat == MAT_READY)) {
			f_pt++;
		} else if (pt_on && mf->njobs && !mf->pt_err) {
			f_pend++;
			if (mf->mat == MAT_NONE) {
				int all = 1;
				for (int q = 0; q < mf->njobs && all; q++)
					all = m->jobs[mf->jobs[q]].disk == 1;
				*(all ? &f_pend_stuck : &f_pend_jobs) += 1;
			}
		} else {
			f_copy++;
		}
	}
	mat_q += (uint64_t)m->mat_busy;
	pthread_mutex_unlock(&m->lock);
	sb_printf(&b, "  \"passthrough\": %s,\n  \"passthrough_why\": ", pt_on ? "true" : "false");
	sb_jstr(&b, pt_on ? "" : m->pt ? rq_pt_why(m->pt) : m->pt_note);
	sb_printf(&b, ",\n  \"files_passthrough\": %" PRIu64 ",\n  \"files_pending\": %" PRIu64
	          ",\n  \"files_copy\": %" PRIu64 ",\n  \"files_materialized\": %" PRIu64
	          ",\n  \"files_materializing\": %" PRIu64 ",\n  \"files_pending_jobs\": %" PRIu64
	          ",\n  \"files_pending_stuck\": %" PRIu64 ",\n", f_pt, f_pend, f_copy, f_mat, mat_q,
	          f_pend_jobs, f_pend_stuck);
	sb_printf(&b, "  \"opens_passthrough\": %llu,\n  \"opens_copy\": %llu,\n"
	          "  \"mat_written\": %llu,\n  \"mat_verified\": %llu,\n  \"mat_failed\": %llu,\n"
	          "  \"mat_bytes\": %llu,\n  \"cache_files\": %" PRIu64 ",\n"
	          "  \"cache_file_bytes\": %" PRIu64 ",\n",
	          atomic_load(&m->st.pt_opens), atomic_load(&m->st.cached_opens),
	          atomic_load(&m->st.mat_written), atomic_load(&m->st.mat_verified),
	          atomic_load(&m->st.mat_failed), atomic_load(&m->st.mat_bytes), cs.files,
	          cs.file_bytes);
	if (m->o.rs) {
		/* remote files identical to SRC not assembled yet (`warm` reads them) */
		int n = 0;
		sb_printf(&b, "  \"remote_pending\": [");
		pthread_mutex_lock(&m->lock);
		for (size_t i = 0; i < p->nfiles; i++)
			if (!p->files[i].changed && !rq_mnt_rv_whole(m, p->files[i].src)) {
				sb_printf(&b, "%s", n++ ? ", " : "");
				sb_jstr(&b, p->files[i].name);
			}
		pthread_mutex_unlock(&m->lock);
		sb_printf(&b, "],\n");
	}
	int nchanged = 0;
	sb_printf(&b, "  \"src_files\": %zu,\n  \"src_changed\": [", p->nsrcs);
	for (size_t s = 0; s < p->nsrcs; s++)
		if (atomic_load(&m->srcs[s].changed)) {
			sb_printf(&b, "%s", nchanged++ ? ", " : "");
			sb_jstr(&b, p->srcs[s].path);
		}
	sb_printf(&b, "],\n  \"src_ok\": %s\n}\n", nchanged ? "false" : "true");
	if (b.oom) {
		free(b.s);
		return NULL;
	}
	return b.s;
}

/* ---- jobs/<j> ----------------------------------------------------------- */

void rq_mnt_ctl_serve(struct rq_mount *m, struct mread *rd)
{
	int j = (int)rd->ctl_job;
	if (!rq_mnt_serve_begin(m, rd))
		return;
	/* READY: stored in the cache (or known not to fit: memory); covered:
	 * every file made from it is materialized, nothing to run */
	struct mout *o = m->jobs[j].state == J_READY ? m->jobs[j].out : NULL;
	int covered = !o && rq_mnt_job_covered(m, j);
	if (!o && !covered) {
		/* a file of it being verified may cover it: wait for that */
		for (int k = 0; k < m->jobs[j].nvf; k++)
			if (rq_mnt_mat_park(m, m->jobs[j].vf[k], rd)) {
				pthread_mutex_unlock(&m->lock);
				return;
			}
		rq_mnt_park(m, j, rd);
		pthread_mutex_unlock(&m->lock);
		return;
	}
	int disk = covered || o->fd >= 0;
	pthread_mutex_unlock(&m->lock);
	char *line = rq_mnt_job_line(m, j, disk);
	if (!rq_mnt_read_claim(rd)) {
		;                     /* interrupted meanwhile: answered EINTR */
	} else if (!line) {
		fuse_reply_err(rd->req, ENOMEM);
	} else {
		size_t len = strlen(line);
		uint64_t o2 = rd->off < len ? rd->off : len;
		uint64_t n = len - o2 < rd->size ? len - o2 : rd->size;
		fuse_reply_buf(rd->req, line + o2, n);
	}
	free(line);
	rq_mnt_read_free(rd);
}

/* ---- operations ------------------------------------------------------- */

void rq_mnt_ctl_open(fuse_req_t req, struct rq_mount *m, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fi->direct_io = 1;      /* generated content: never from the page cache */
	fi->keep_cache = 0;
	fi->fh = 0;
	if (ino == m->ctl_base + 1) {
		char *s = status_json(m);
		if (!s)
			return (void)fuse_reply_err(req, ENOMEM);
		fi->fh = (uint64_t)(uintptr_t)s;
	}
	fuse_reply_open(req, fi);
}

void rq_mnt_ctl_read(fuse_req_t req, struct rq_mount *m, fuse_ino_t ino, size_t size, off_t off,
                     struct fuse_file_info *fi)
{
	if (ino == m->ctl_base + 1) {
		const char *s = (const char *)(uintptr_t)fi->fh;
		size_t len = s ? strlen(s) : 0;
		size_t o = (size_t)off < len ? (size_t)off : len;
		return (void)fuse_reply_buf(req, s + o, len - o < size ? len - o : size);
	}
	if (ino < m->ctl_base + 3 || ino >= m->ctl_base + 3 + m->plan->njobs)
		return (void)fuse_reply_err(req, EISDIR);
	struct mread *rd = calloc(1, sizeof *rd);
	if (!rd)
		return (void)fuse_reply_err(req, ENOMEM);
	*rd = (struct mread){.serve = rq_mnt_ctl_serve, .req = req, .file = -1,
	                     .ctl_job = (long)(ino - m->ctl_base - 3), .off = (uint64_t)off,
	                     .size = size};
	rq_mnt_read_watch(rd);      /* `warm` stopped or killed: answered EINTR at once */
	rq_mnt_ctl_serve(m, rd);
}

void rq_mnt_ctl_release(fuse_req_t req, struct rq_mount *m, fuse_ino_t ino,
                        struct fuse_file_info *fi)
{
	if (ino == m->ctl_base + 1)
		free((void *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}
