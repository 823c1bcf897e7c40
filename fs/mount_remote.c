/* mount_remote.c — a remote SRC (hf://ORG/NAME@<commit>, issue 20) read
 * through the chunk store (remote/rstore.h), which the CLI opens in the
 * daemon after the fork and the mount borrows. A leaf.
 *
 *  - The plan and the jobs read SRC through m->rreader (plan.h's source
 *    reader). While the plan is built: a whole small file (config, index)
 *    is read through the store and kept (a file smaller than a chunk is one
 *    chunk, fetched exactly); a shard's header is not: a 16 MiB chunk per
 *    shard would turn Laguna's mount into a download. The first 8 + N bytes
 *    of a shard (its head) are fetched exactly (RQ_RS_NOKEEP) once and kept
 *    under <cache>/hf/heads/<id>-<size>.head (id: rq_rs_file_id, the LFS
 *    sha256 or git-<blob id> of a plain git file), their own SHA-256
 *    appended (a damaged head is refetched), so a mount fetches headers
 *    only, and a second mount (or HF_HUB_OFFLINE=1) nothing. Once the plan
 *    is built the reader serves only jobs, whose BF16 inputs are fetched
 *    and not stored (RQ_RS_NOKEEP): only their quantized output is cached;
 *    except in a chunk that also holds bytes presented unchanged (m->rkept):
 *    that chunk is fetched whole and stored for its readers anyway, and the
 *    job reads through it (fetching its part exactly too cost 921 MB
 *    fetched for 850 MB of SRC).
 *  - SRC segments (mount_seg.c's REMOTE source) read through the store into
 *    the read's own buffer until the store names the file's assembled,
 *    verified copy (rq_rs_path); from then on that file is served like a
 *    local SRC file: spliced, or by passthrough (mount_open.c).
 *  - --remote-verify file (the default; mount_rver.c): the plan reads a
 *    file whole (config, index, a shard's bytes past its head) through a
 *    whole-file fetch and its verified copy, never a chunk as it arrives;
 *    the heads it was built from are remembered by their SHA-256 (rhsha)
 *    and compared with the verified copy when the file is fetched
 *    (rq_mnt_remote_head_check). A head is taken from the verified copy
 *    when the store has one.
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
#include "base/sha256.h"
#include "remote/rstore.h"

#include <stdio.h>
#include <stdlib.h>

#define HEAD_MAX (100ull << 20)   /* safetensors' own limit on N */

static char *head_path(const struct rq_mount *m, size_t i)
{
	const struct rq_src_entry *e = &m->o.rfiles[i];
	const char *id = rq_rs_file_id(m->o.rs, i);   /* LFS sha256, else git-<blob id> */
	char *p = NULL;
	if (!id || asprintf(&p, "%s/hf/heads/%s-%llu.head", m->cache_dir, id,
	                    (unsigned long long)e->size) < 0)
		return NULL;
	return p;
}

/* The head kept in the cache: 8 + N bytes then their SHA-256. 0 or -1. */
static int head_load(struct rq_mount *m, size_t i, const char *path)
{
	FILE *f = path ? fopen(path, "re") : NULL;
	if (!f)
		return -1;
	uint8_t n8[8];
	uint64_t n = 0;
	int ok = fread(n8, 1, 8, f) == 8;
	for (int k = 7; k >= 0; k--)
		n = n << 8 | n8[k];
	uint8_t *b = ok && n <= HEAD_MAX && 8 + n <= m->o.rfiles[i].size ? malloc(8 + n + 32) : NULL;
	if (b) {
		memcpy(b, n8, 8);
		ok = fread(b + 8, 1, n + 32, f) == n + 32 && fgetc(f) == EOF;
	}
	fclose(f);
	uint8_t d[32];
	struct sha256 h;
	if (b && ok) {
		sha256_init(&h);
		sha256_update(&h, b, 8 + n);
		sha256_final(&h, d);
		ok = !memcmp(d, b + 8 + n, 32);
	}
	if (!b || !ok) {
		free(b);
		return -1;
	}
	m->rheads[i] = b;
	m->rhead_len[i] = 8 + n;
	return 0;
}

/* Writes the head through a temporary file and rename(2); a failure costs
 * only a refetch at the next mount. */
static void head_keep(struct rq_mount *m, size_t i, const char *path)
{
	char *dir = NULL, *tmp = NULL;
	if (!path || asprintf(&dir, "%s/hf", m->cache_dir) < 0)
		return;
	mkdir(dir, 0755);
	free(dir);
	if (asprintf(&dir, "%s/hf/heads", m->cache_dir) < 0)
		return;
	mkdir(dir, 0755);
	free(dir);
	if (asprintf(&tmp, "%s.tmp.%d", path, (int)getpid()) < 0)
		return;
	uint8_t d[32];
	struct sha256 h;
	sha256_init(&h);
	sha256_update(&h, m->rheads[i], m->rhead_len[i]);
	sha256_final(&h, d);
	FILE *f = fopen(tmp, "we");
	int ok = f && fwrite(m->rheads[i], 1, m->rhead_len[i], f) == m->rhead_len[i] &&
	         fwrite(d, 1, 32, f) == 32;
	if (f && fclose(f))
		ok = 0;
	if (!ok || rename(tmp, path))
		unlink(tmp);
	free(tmp);
}

/* Reads exactly n bytes at off: 0 or -EIO. */
static int pread_all(int fd, uint8_t *p, uint64_t n, uint64_t off)
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

/* The head of file i from its verified copy in the store: 0, or -1 when
 * there is none (or it is unreadable). */
static int head_from_copy(struct rq_mount *m, size_t i)
{
	rq_rs_pin(m->o.rs, i, 1);      /* not evicted under --cache-max while open */
	const char *path = rq_rs_path(m->o.rs, i);
	int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
	rq_rs_pin(m->o.rs, i, -1);     /* an open fd reads on; the pin only kept the name */
	if (fd < 0)
		return -1;
	uint8_t n8[8], *b = NULL;
	uint64_t n = 0, size = m->o.rfiles[i].size;
	int ok = size >= 8 && !pread_all(fd, n8, 8, 0);
	for (int k = 7; ok && k >= 0; k--)
		n = n << 8 | n8[k];
	ok = ok && n <= HEAD_MAX && 8 + n <= size && (b = malloc(8 + n));
	if (ok) {
		memcpy(b, n8, 8);
		ok = !pread_all(fd, b + 8, n, 8);
	}
	close(fd);
	if (!ok) {
		free(b);
		return -1;
	}
	m->rheads[i] = b;
	m->rhead_len[i] = 8 + n;
	return 0;
}

/* File i's head (8 + N bytes), from the cache or fetched exactly. */
static int head_get(struct rq_mount *m, size_t i, struct rq_err *err)
{
	if (m->rheads[i])
		return 0;
	if (!head_from_copy(m, i))
		return 0;
	char *path = head_path(m, i);
	if (!head_load(m, i, path)) {
		free(path);
		return 0;
	}
	const struct rq_src_entry *e = &m->o.rfiles[i];
	uint8_t n8[8];
	uint64_t n = 0;
	int rc = e->size < 8 ? rq_errf(err, -EPROTO, "%s/%s: too short for a safetensors file",
	                                m->src, e->name)
	                     : rq_rs_read(m->o.rs, i, 0, 8, n8, RQ_RS_NOKEEP, err);
	for (int k = 7; !rc && k >= 0; k--)
		n = n << 8 | n8[k];
	if (!rc && (n > HEAD_MAX || 8 + n > e->size))
		rc = rq_errf(err, -EPROTO, "%s/%s: header length %llu does not fit a file of %llu "
		             "bytes; not a safetensors file", m->src, e->name, (unsigned long long)n,
		             (unsigned long long)e->size);
	uint8_t *b = rc ? NULL : malloc(8 + n);
	if (!rc && !b)
		rc = -ENOMEM;
	if (!rc) {
		memcpy(b, n8, 8);
		rc = n ? rq_rs_read(m->o.rs, i, 8, n, b + 8, RQ_RS_NOKEEP, err) : 0;
	}
	if (!rc) {
		m->rheads[i] = b;
		m->rhead_len[i] = 8 + n;
		head_keep(m, i, path);
	} else {
		free(b);
	}
	free(path);
	return rc;
}

static int is_shard(const struct rq_src_entry *e)
{
	size_t l = strlen(e->name);
	return l >= 12 && !strcmp(e->name + l - 12, ".safetensors");
}

/* Every shard's head at once, before the plan asks for them one by one:
 * two round trips per shard, HEAD_THREADS shards in flight (Laguna's mount
 * would otherwise wait for ~80 sequential requests). Failures are left to
 * the plan's own read, which names them. */
#define HEAD_THREADS 8
struct head_pool {
	struct rq_mount *m;
	atomic_size_t next;
};

static void *head_worker(void *arg)
{
	struct head_pool *hp = arg;
	for (;;) {
		size_t i = atomic_fetch_add(&hp->next, 1);
		if (i >= hp->m->o.nrfiles)
			return NULL;
		if (is_shard(&hp->m->o.rfiles[i])) {
			struct rq_err e = {0};
			head_get(hp->m, i, &e);
		}
	}
}

static void heads_prefetch(struct rq_mount *m)
{
	struct head_pool hp = {.m = m};
	atomic_init(&hp.next, 0);
	pthread_t th[HEAD_THREADS];
	int n = 0;
	while (n < HEAD_THREADS && !pthread_create(&th[n], NULL, head_worker, &hp))
		n++;
	if (!n)
		head_worker(&hp);
	for (int k = 0; k < n; k++)
		pthread_join(th[k], NULL);
}

/* A job's BF16 input [off, off + len) of file i: exactly, not stored
 * (RQ_RS_NOKEEP), except where a chunk also holds bytes presented unchanged:
 * that chunk is fetched whole and stored for its readers anyway, so the job
 * reads through it rather than fetching its part a second time. */
static int job_read(struct rq_mount *m, size_t i, uint64_t off, uint64_t len, uint8_t *buf,
                    struct rq_err *err)
{
	const uint8_t *kept = m->rkept ? m->rkept[i] : NULL;
	uint64_t cs = rq_rs_chunk_size(m->o.rs), end = off + len;
	if (!kept)
		return rq_rs_read(m->o.rs, i, off, len, buf, RQ_RS_NOKEEP, err);
	while (off < end) {
		uint64_t c = off / cs, e = (c + 1) * cs;
		while (e < end && kept[e / cs] == kept[c])
			e += cs;
		if (e > end)
			e = end;
		int rc = rq_rs_read(m->o.rs, i, off, e - off, buf,
		                    kept[c] ? RQ_RS_NORA : RQ_RS_NOKEEP, err);
		if (rc)
			return rc;
		buf += e - off;
		off = e;
	}
	return 0;
}

/* --remote-verify file: bytes of file i for the plan, from its whole,
 * verified copy (fetched now if the store has none). */
static int whole_read(struct rq_mount *m, size_t i, uint64_t off, uint64_t len, void *buf,
                      struct rq_err *err)
{
	rq_rs_pin(m->o.rs, i, 1);
	int rc = rq_rs_fetch_file(m->o.rs, i, NULL, NULL, err);
	const char *path = rc ? NULL : rq_rs_path(m->o.rs, i);
	int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
	rq_rs_pin(m->o.rs, i, -1);
	if (!rc && (fd < 0 || pread_all(fd, buf, len, off)))
		rc = rq_errf(err, -EIO, "%s/%s: its verified copy %s cannot be read", m->src,
		             m->o.rfiles[i].name, path ? path : "(gone)");
	if (fd >= 0)
		close(fd);
	if (!rc)
		m->rwhole[i] = 1;
	return rc;
}

static int reader_read(void *ctx, size_t i, uint64_t off, uint64_t len, void *buf,
                       struct rq_err *err)
{
	struct rq_mount *m = ctx;
	int verify = m->o.remote_verify == RQ_RV_FILE;
	if (atomic_load(&m->rs_nokeep))       /* a job's BF16 input (none mode) */
		return job_read(m, i, off, len, buf, err);
	const struct rq_src_entry *e = &m->o.rfiles[i];
	if ((off == 0 && len == e->size) || !is_shard(e))   /* a small file, kept */
		return verify ? whole_read(m, i, off, len, buf, err)
		              : rq_rs_read(m->o.rs, i, off, len, buf, 0, err);
	int rc = head_get(m, i, err);         /* the plan reads a shard's header */
	if (rc)
		return rc;
	if (off + len <= m->rhead_len[i]) {
		memcpy(buf, m->rheads[i] + off, len);
		return 0;
	}
	return verify ? whole_read(m, i, off, len, buf, err)
	              : rq_rs_read(m->o.rs, i, off, len, buf, RQ_RS_NOKEEP, err);
}

int rq_mnt_remote_init(struct rq_mount *m, struct rq_err *err)
{
	if (!m->o.rs)
		return 0;
	if (!m->o.rfiles && m->o.nrfiles)
		return rq_errf(err, -EINVAL, "remote SRC %s: no file list", m->src);
	m->rreader = (struct rq_src_reader){.label = m->src, .nfiles = m->o.nrfiles,
	                                    .files = m->o.rfiles, .ctx = m, .read = reader_read,
	                                    .unverified = m->o.remote_verify == RQ_RV_NONE};
	size_t n = m->o.nrfiles ? m->o.nrfiles : 1;
	if (!(m->rheads = calloc(n, sizeof *m->rheads)) ||
	    !(m->rhead_len = calloc(n, sizeof *m->rhead_len)) ||
	    !(m->rhsha = calloc(n, sizeof *m->rhsha)) || !(m->rhlen = calloc(n, sizeof *m->rhlen)) ||
	    !(m->rwhole = calloc(n, 1)) || !(m->rgone = calloc(n, sizeof *m->rgone)))
		return rq_errf(err, -ENOMEM, "out of memory");
	heads_prefetch(m);
	return 0;
}

/* m->rkept from the plan's SRC segments (a failure leaves it NULL: jobs
 * then fetch their inputs exactly, as before). */
static void kept_map(struct rq_mount *m)
{
	const struct rq_plan *p = m->plan;
	uint64_t cs = rq_rs_chunk_size(m->o.rs);
	if (!(m->rkept = calloc(m->o.nrfiles ? m->o.nrfiles : 1, sizeof *m->rkept)))
		return;
	for (size_t i = 0; i < m->o.nrfiles; i++)   /* a file listed past what the store
	                                               takes has no map: its reads fail */
		if (m->o.rfiles[i].size <= rq_rs_max_file(m->o.rs) &&
		    !(m->rkept[i] = calloc(m->o.rfiles[i].size / cs + 2, 1)))
			goto fail;
	for (size_t v = 0; v < p->nfiles; v++) {
		const struct rq_vfile *f = &p->files[v];
		for (size_t k = 0; k < f->nseg; k++) {
			const struct rq_seg *g = &f->seg[k];
			if (g->kind != RQ_SEG_SRC || !g->len)
				continue;
			size_t r = p->srcs[g->src].ridx;
			if (r >= m->o.nrfiles || !m->rkept[r])
				continue;
			for (uint64_t c = g->src_off / cs; c <= (g->src_off + g->len - 1) / cs; c++)
				m->rkept[r][c] = 1;
		}
	}
	for (size_t i = 0; i < m->o.nrfiles; i++)
		rq_rs_set_readahead_mask(m->o.rs, i, m->rkept[i]);   /* -ENOMEM: all chunks */
	return;
fail:
	for (size_t i = 0; i < m->o.nrfiles; i++)
		free(m->rkept[i]);
	free(m->rkept);
	m->rkept = NULL;
}

void rq_mnt_remote_planned(struct rq_mount *m)
{
	if (m->o.rs && m->plan && !atomic_load(&m->rs_nokeep))
		kept_map(m);
	atomic_store(&m->rs_nokeep, 1);
	for (size_t i = 0; m->rheads && m->rhsha && i < m->o.nrfiles; i++) {
		if (!m->rheads[i])
			continue;
		struct sha256 h;               /* what the plan was built from */
		sha256_init(&h);
		sha256_update(&h, m->rheads[i], m->rhead_len[i]);
		sha256_final(&h, m->rhsha[i]);
		m->rhlen[i] = m->rhead_len[i];
	}
	for (size_t i = 0; m->rheads && i < m->o.nrfiles; i++)
		free(m->rheads[i]);
	free(m->rheads);
	free(m->rhead_len);
	m->rheads = NULL;
	m->rhead_len = NULL;
}

void rq_mnt_remote_free(struct rq_mount *m)
{
	for (size_t i = 0; m->rkept && i < m->o.nrfiles; i++)
		free(m->rkept[i]);
	free(m->rkept);
	m->rkept = NULL;
	free(m->rhsha);
	free(m->rhlen);
	free(m->rwhole);
	free(m->rgone);
	m->rhsha = NULL;
	m->rhlen = NULL;
	m->rwhole = NULL;
	m->rgone = NULL;
	if (!m->o.rs || !m->srcs || !m->plan)
		return;
	for (size_t s = 0; s < m->plan->nsrcs; s++) {
		int fd = atomic_exchange(&m->srcs[s].rfd, -1);
		if (fd >= 0) {
			close(fd);
			rq_rs_pin(m->o.rs, m->plan->srcs[s].ridx, -1);
		}
	}
}

int rq_mnt_remote_fd(struct rq_mount *m, int s)
{
	struct msrc *ms = &m->srcs[s];
	int fd = atomic_load(&ms->rfd);
	if (fd >= 0)
		return fd;
	const struct rq_srcfile *sf = &m->plan->srcs[s];
	rq_rs_pin(m->o.rs, sf->ridx, 1);   /* kept while ms->rfd holds it (--cache-max) */
	const char *path = rq_rs_path(m->o.rs, sf->ridx);
	fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
	struct stat st;
	if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != sf->size) {
		/* the store says it is whole, but it is not (yet) what the plan
		 * listed: keep reading through the store */
		if (fd >= 0)
			close(fd);
		rq_rs_pin(m->o.rs, sf->ridx, -1);
		return -1;
	}
	int none = -1;
	if (!atomic_compare_exchange_strong(&ms->rfd, &none, fd)) {
		close(fd);           /* another thread opened it first */
		rq_rs_pin(m->o.rs, sf->ridx, -1);
		return none;
	}
	rq_mount_logl(m, RQ_LOG_DEBUG, "%s: assembled and verified; served from %s", sf->path,
	              path);
	return fd;
}

int rq_mnt_remote_head_check(struct rq_mount *m, size_t i, int fd)
{
	uint64_t n = m->rhlen ? m->rhlen[i] : 0;
	if (!n)
		return 0;
	uint8_t *b = malloc(n), d[32];
	if (!b)
		return -EIO;
	int rc = pread_all(fd, b, n, 0);
	if (!rc) {
		struct sha256 h;
		sha256_init(&h);
		sha256_update(&h, b, n);
		sha256_final(&h, d);
		rc = memcmp(d, m->rhsha[i], 32) ? -EPROTO : 0;
	}
	free(b);
	if (rc == -EPROTO) {       /* the kept head lied: the next mount takes the copy's */
		char *path = head_path(m, i);
		if (path)
			unlink(path);
		free(path);
	}
	return rc;
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
	/* a file failed for good (a size the server contradicts, bytes hashed
	 * wrong twice): one line, not one per read the kernel makes of it */
	if (m->rgone && rq_rs_failed(m->o.rs, sf->ridx) && atomic_exchange(&m->rgone[sf->ridx], 1))
		return -EIO;
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
