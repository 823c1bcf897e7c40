/* export_hf.c — a verified remote SRC for export (export_hf.h).
 *
 * State of SRC file i (h->f[i]):
 *
 *   remote --range read before the plan is built: from the hub, the piece
 *     |     remembered (offset, length, SHA-256)--> remote
 *     +-- whole read, or any read once planned: fetched whole through the
 *     |     store (pinned), checked against the hub's hash by the store,
 *     |     each remembered piece compared with the copy--> local (fd open)
 *     |     (a failure: the read fails, naming the file; nothing of it used)
 *   local --export_hf_done: fd closed, unpinned; dropped from the store when
 *     export fetched it (ours)--> remote (a later read fetches it again)
 *
 * Prefetch (export only, once planned; export_hf_order gave the order export
 * reads SRC files in): as soon as file order[k] is local, file order[k+1] is
 * fetched on one background thread while export works on order[k]:
 *
 *   remote --prefetch started (pinned, ours, its bytes counted held; only if
 *     |      fewer than EXPORT_HF_HOLD files are held, else started when one
 *     |      is done)--> prefetching
 *   prefetching --export reads it (make_local joins the thread, the wait
 *     |      counted), or export_hf_done, or close (the store cancelled
 *     |      first)--> fetched (verified in the store, pinned) or failed
 *   fetched --make_local: opened as any verified copy--> local
 *   failed --unpinned, nothing counted; make_local fetches it again in the
 *            foreground, and reports that error--> remote or local
 *
 * One prefetch at a time; the thread touches only its struct prefetch and
 * the store (thread-safe), never the rest of h; everything it did is read
 * after pthread_join. It prints nothing: the main thread prints each file's
 * line when export reaches it, so lines never interleave.
 */
#include "cli/export_hf.h"
#include "cli/cli_hf.h"
#include "cli/cli.h"
#include "base/err.h"
#include "base/sha256.h"
#include "plan/plan.h"
#include "remote/rstore.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <ftw.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct piece {                 /* a range the plan read from the hub, unverified */
	uint64_t off, len;
	uint8_t sha[32];
};

enum { PRE_NONE, PRE_RUN, PRE_DONE };

struct lfile {
	int fd;                    /* the verified copy, or -1 */
	int ours;                  /* export fetched it: dropped when done */
	int pre;                   /* PRE_*: a prefetch runs, or ended well (pinned, counted) */
	struct piece *pc;          /* [npc] */
	size_t npc;
};

struct prefetch {              /* one background fetch; the thread writes rc, err, t1 */
	struct rq_rs *rs;
	size_t i;
	pthread_t tid;
	int running;               /* created, not yet joined (main thread only) */
	int rc;
	struct rq_err err;
	double t0, t1;
};

struct export_hf {
	struct export_hf_opts o;   /* strings borrowed */
	struct cli_hf *hf;
	const struct rq_src_reader *up;   /* cli_hf's reader: range requests */
	struct rq_src_reader rd;   /* what the plan and export read through */
	struct rq_rs_file *rf;     /* [n] the store's file list, strings borrowed */
	struct lfile *f;           /* [n] */
	struct rq_rs *rs;          /* opened at the first verified read */
	char *tmpdir;              /* no cache: <dir of dst>/.<dst>.requantfs-fetch-XXXXXX */
	int planned, tty;
	uint64_t held;             /* bytes of ours on disk now (prefetching included) */
	size_t held_files;
	struct export_hf_stats st;
	size_t *order;             /* [norder] reader indices, in the order export reads them */
	size_t norder;
	long *opos;                /* [n] position of file i in order, or -1 */
	long want;                 /* a reader index to prefetch when a file is done, or -1 */
	struct prefetch pf;
};

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static int pread_all(int fd, void *buf, uint64_t len, uint64_t off)
{
	uint8_t *b = buf;
	while (len) {
		ssize_t r = pread(fd, b, len > (1u << 30) ? (1u << 30) : len, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EIO;
		b += r;
		off += (uint64_t)r;
		len -= (uint64_t)r;
	}
	return 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

/* Removes what an export to the same DST that died left next to it: the
 * directories .<base>.requantfs-fetch-* in parent whose owner (the pid in
 * their file "owner") is gone, or, with no owner file, older than an hour.
 * A live export's directory is left alone. */
static void sweep_stale(const char *parent, const char *base)
{
	char pre[NAME_MAX + 1];
	int np = snprintf(pre, sizeof pre, ".%s.requantfs-fetch-", base);
	DIR *dir = np > 0 && (size_t)np < sizeof pre ? opendir(parent) : NULL;
	if (!dir)
		return;
	struct dirent *e;
	while ((e = readdir(dir))) {
		if (strncmp(e->d_name, pre, (size_t)np))
			continue;
		char path[PATH_MAX], own[PATH_MAX + 8];
		if (snprintf(path, sizeof path, "%s/%s", parent, e->d_name) >= (int)sizeof path)
			continue;
		snprintf(own, sizeof own, "%s/owner", path);
		FILE *f = fopen(own, "re");
		long pid = 0;
		int stale;
		if (f) {
			stale = fscanf(f, "%ld", &pid) != 1 || pid <= 0 ||
			        (kill((pid_t)pid, 0) < 0 && errno == ESRCH);
			fclose(f);
		} else {
			struct stat st;
			stale = !lstat(path, &st) && S_ISDIR(st.st_mode) &&
			        time(NULL) - st.st_mtime > 3600;
		}
		if (stale)
			nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	}
	closedir(dir);
}

/* The store, in the cache or in a new temporary directory next to dst. */
static int open_store(struct export_hf *h, struct rq_err *err)
{
	const char *dir = h->o.cache_dir;
	if (!dir) {
		char *d = strdup(h->o.dst), *b = strdup(h->o.dst);
		if (d && b)
			sweep_stale(dirname(d), basename(b));
		free(d);
		free(b);
		d = strdup(h->o.dst);
		b = strdup(h->o.dst);
		if (!d || !b || asprintf(&h->tmpdir, "%s/.%s.requantfs-fetch-XXXXXX", dirname(d),
		                         basename(b)) < 0)
			h->tmpdir = NULL;
		free(d);
		free(b);
		if (!h->tmpdir)
			return -ENOMEM;
		if (!mkdtemp(h->tmpdir)) {
			int e = errno;
			rq_errf(err, -e, "%s: cannot create a directory next to DST %s for the SRC files "
			        "fetched (%s): %s", h->up->label, h->o.dst, h->tmpdir, strerror(e));
			free(h->tmpdir);
			h->tmpdir = NULL;
			return -e;
		}
		char own[PATH_MAX + 8];
		snprintf(own, sizeof own, "%s/owner", h->tmpdir);
		FILE *f = fopen(own, "we");
		if (f) {                  /* a later export sweeps it if this one dies */
			fprintf(f, "%ld\n", (long)getpid());
			fclose(f);
		}
		dir = h->tmpdir;
	}
	struct rq_rs_opts so = {.endpoint = h->o.endpoint, .repo = cli_hf_repo(h->hf),
	                        .commit = cli_hf_commit(h->hf), .files = h->rf,
	                        .nfiles = h->up->nfiles, .cache_dir = dir, .readahead = 0};
	int rc = rq_rs_open(&so, &h->rs, err);
	if (rc)
		rq_err_prefix(err, "%s", h->up->label);
	return rc;
}

struct prog {
	struct export_hf *h;
	const char *name;
	uint64_t size;
	double t0, last;
	int drawn;                 /* a live line is on the terminal */
};

static void on_fetch(void *ctx, uint64_t bytes)
{
	struct prog *p = ctx;
	double t = now_s();
	if (!p->h->tty || p->h->o.quiet || t - p->last < 0.2)
		return;
	p->last = t;
	p->drawn = 1;
	char a[32], b[32], r[32];
	cli_human_bytes((double)bytes, a, sizeof a);
	cli_human_bytes((double)p->size, b, sizeof b);
	cli_human_bytes(t > p->t0 ? bytes / (t - p->t0) : 0, r, sizeof r);
	fprintf(stderr, "\r\033[Krequantfs export: fetching %s  %s/%s  %s/s", p->name, a, b, r);
	fflush(stderr);
}

static int is_shard(const char *name)
{
	size_t n = strlen(name);
	return n > 12 && !strcmp(name + n - 12, ".safetensors");
}

/* Each piece the plan read by range, compared with the verified copy. */
static int check_pieces(struct export_hf *h, size_t i, struct rq_err *err)
{
	struct lfile *lf = &h->f[i];
	for (size_t k = 0; k < lf->npc; k++) {
		struct piece *pc = &lf->pc[k];
		uint8_t *b = malloc(pc->len ? pc->len : 1), d[32];
		if (!b)
			return -ENOMEM;
		int rc = pread_all(lf->fd, b, pc->len, pc->off);
		if (!rc) {
			struct sha256 s;
			sha256_init(&s);
			sha256_update(&s, b, pc->len);
			sha256_final(&s, d);
		}
		free(b);
		if (rc)
			return rq_errf(err, rc, "%s/%s: its verified copy cannot be read: %s",
			               h->up->label, h->up->files[i].name, strerror(-rc));
		if (memcmp(d, pc->sha, 32))
			return rq_errf(err, -EPROTO, "%s/%s: bytes %llu-%llu the plan was built from (its "
			               "safetensors header, fetched by range) differ from the verified "
			               "file's: the server answered that range with other "
			               "bytes; nothing of the file was exported (retry, or check the "
			               "server: --endpoint / HF_ENDPOINT)", h->up->label,
			               h->up->files[i].name, (unsigned long long)pc->off,
			               (unsigned long long)(pc->off + pc->len - 1));
	}
	return 0;
}

static void count_held(struct export_hf *h, size_t i, int delta)
{
	uint64_t size = h->up->files[i].size;
	if (delta > 0) {
		h->held += size;
		h->held_files++;
		if (h->held > h->st.held_max)
			h->st.held_max = h->held;
		if (h->held_files > h->st.held_files_max)
			h->st.held_files_max = h->held_files;
	} else {
		h->held -= size;
		h->held_files--;
	}
}

static void *pf_main(void *arg)
{
	struct prefetch *pf = arg;
	pf->rc = rq_rs_fetch_file(pf->rs, pf->i, NULL, NULL, &pf->err);
	pf->t1 = now_s();
	return NULL;
}

/* Starts fetching file i in the background if it is needed from the hub and
 * the hold limit allows (else remembers it for export_hf_done). */
static void pf_start(struct export_hf *h, size_t i)
{
	struct lfile *lf = &h->f[i];
	const struct rq_src_entry *e = &h->up->files[i];
	if (h->pf.running || !h->rs || lf->fd >= 0 || lf->pre != PRE_NONE ||
	    (!e->sha256 && !h->rf[i].blob_id) || rq_rs_path(h->rs, i))
		return;                   /* busy, local already, or make_local reports it */
	if (h->held_files + 1 > EXPORT_HF_HOLD) {
		h->want = (long)i;
		return;
	}
	h->want = -1;
	lf->ours = 1;
	rq_rs_pin(h->rs, i, 1);
	count_held(h, i, 1);
	h->pf = (struct prefetch){.rs = h->rs, .i = i, .t0 = now_s()};
	if (pthread_create(&h->pf.tid, NULL, pf_main, &h->pf)) {
		count_held(h, i, -1);    /* no thread: export fetches it when it gets there */
		rq_rs_pin(h->rs, i, -1);
		return;
	}
	h->pf.running = 1;
	lf->pre = PRE_RUN;
}

/* Waits for the prefetch in flight, if any: its file fetched (pinned,
 * counted) or failed (unpinned, uncounted: fetched again when read). */
static void pf_join(struct export_hf *h)
{
	if (!h->pf.running)
		return;
	pthread_join(h->pf.tid, NULL);
	h->pf.running = 0;
	size_t i = h->pf.i;
	if (h->pf.rc) {
		h->f[i].pre = PRE_NONE;
		count_held(h, i, -1);
		rq_rs_pin(h->rs, i, -1);
	} else {
		h->f[i].pre = PRE_DONE;
	}
}

/* File i fetched whole (now, or by the prefetch), verified and open (lf->fd);
 * then the next file in export's order starts prefetching. */
static int make_local(struct export_hf *h, size_t i, struct rq_err *err)
{
	struct lfile *lf = &h->f[i];
	const struct rq_src_entry *e = &h->up->files[i];
	if (!e->sha256 && !h->rf[i].blob_id)
		return rq_errf(err, -EPROTO, "%s/%s: the model API lists no LFS sha256 and no git "
		               "blob id for it, so its bytes cannot be verified; export uses no "
		               "unverified byte (use a server whose model API gives them, or a "
		               "local copy as SRC)", h->up->label, e->name);
	int rc = h->rs ? 0 : open_store(h, err);
	if (rc)
		return rc;
	double w0 = now_s(), dt;
	if (h->want == (long)i)
		h->want = -1;             /* held back, and now needed: fetched here */
	if (h->pf.running && h->pf.i == i)
		pf_join(h);
	int pre = lf->pre == PRE_DONE, had = 0, counted = pre;
	struct prog pg = {.h = h, .name = e->name, .size = e->size, .t0 = now_s()};
	if (pre) {
		lf->pre = PRE_NONE;
		dt = h->pf.t1 - h->pf.t0;
	} else {
		had = rq_rs_path(h->rs, i) != NULL;   /* a mount's: read, never dropped */
		if (!had)
			lf->ours = 1;                     /* even a failed fetch leaves chunks */
		pg.last = pg.t0;                      /* a quick fetch draws no live line */
		rq_rs_pin(h->rs, i, 1);
		if ((rc = rq_rs_fetch_file(h->rs, i, on_fetch, &pg, err)))
			rq_err_prefix(err, "%s", h->up->label);   /* the store names the file */
		dt = now_s() - pg.t0;
	}
	double waited = now_s() - w0;
	const char *path = rc ? NULL : rq_rs_path(h->rs, i);
	struct stat st;
	if (!rc && (!path || (lf->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 ||
	            fstat(lf->fd, &st) || (uint64_t)st.st_size != e->size))
		rc = rq_errf(err, -EIO, "%s/%s: its verified copy %s cannot be read", h->up->label,
		             e->name, path ? path : "(gone)");
	int line = !rc && !had && !h->o.quiet && (e->size >= (1u << 20) || is_shard(e->name));
	if (pg.drawn && !line)
		fprintf(stderr, "\r\033[K");          /* the live line, not followed by one */
	if (h->planned)
		h->st.waited += waited;
	if (!rc && !had) {
		if (!counted)
			count_held(h, i, 1);
		counted = 1;
		h->st.files++;
		h->st.prefetched += pre;
		h->st.bytes += e->size;
		h->st.seconds += dt;
	}
	if (line) {
		char a[32], r[32];
		cli_human_bytes((double)e->size, a, sizeof a);
		cli_human_bytes(dt > 0 ? e->size / dt : 0, r, sizeof r);
		if (pre)
			fprintf(stderr, "%srequantfs export: fetched %s ahead (%s in %.1f s, %s/s, "
			        "waited %.1f s for it), %s checked\n", h->tty ? "\r\033[K" : "",
			        e->name, a, dt, r, waited, e->sha256 ? "sha256" : "git blob id");
		else
			fprintf(stderr, "%srequantfs export: fetched %s (%s in %.1f s, %s/s), %s "
			        "checked\n", h->tty ? "\r\033[K" : "", e->name, a, dt, r,
			        e->sha256 ? "sha256" : "git blob id");
	}
	if (!rc && h->planned && h->opos[i] >= 0 && (size_t)h->opos[i] + 1 < h->norder)
		pf_start(h, h->order[h->opos[i] + 1]);   /* fetched while export works on i */
	if (!rc)
		rc = check_pieces(h, i, err);
	if (rc) {
		if (lf->fd >= 0)
			close(lf->fd);
		lf->fd = -1;
		if (counted && !had)
			count_held(h, i, -1);
		rq_rs_pin(h->rs, i, -1);
	}
	return rc;
}

static int hf_read(void *ctx, size_t i, uint64_t off, uint64_t len, void *buf,
                   struct rq_err *err)
{
	struct export_hf *h = ctx;
	struct lfile *lf = &h->f[i];
	int whole = off == 0 && len == h->up->files[i].size;
	if (!h->planned && !whole && lf->fd < 0) {     /* a shard's header, for the plan */
		struct piece *pc = realloc(lf->pc, (lf->npc + 1) * sizeof *pc);
		if (!pc)
			return -ENOMEM;
		lf->pc = pc;
		int rc = h->up->read(h->up->ctx, i, off, len, buf, err);
		if (rc)
			return rc;
		pc += lf->npc++;
		pc->off = off;
		pc->len = len;
		struct sha256 s;
		sha256_init(&s);
		sha256_update(&s, buf, len);
		sha256_final(&s, pc->sha);
		return 0;
	}
	int rc = lf->fd >= 0 ? 0 : make_local(h, i, err);
	if (!rc && (rc = pread_all(lf->fd, buf, len, off)))
		rc = rq_errf(err, rc, "%s/%s bytes %llu-%llu: reading its verified copy: %s",
		             h->up->label, h->up->files[i].name, (unsigned long long)off,
		             (unsigned long long)(off + len - 1), strerror(-rc));
	return rc;
}

int export_hf_open(const struct export_hf_opts *o, struct export_hf **out, struct rq_err *err)
{
	struct export_hf *h = calloc(1, sizeof *h);
	if (!h)
		return -ENOMEM;
	h->o = *o;
	h->tty = isatty(STDERR_FILENO);
	int rc = cli_hf_open(o->spec, o->endpoint, &h->hf, err);
	if (rc) {
		free(h);
		return rc;
	}
	/* refused before anything is fetched (make_local checks again) */
	rc = cli_hf_check_verifiable(h->hf, "export uses no unverified byte (use a server whose "
	                             "model API gives them, or a local copy as SRC)", err);
	if (rc) {
		cli_hf_close(h->hf);
		free(h);
		return rc;
	}
	h->up = cli_hf_reader(h->hf);
	size_t n = h->up->nfiles ? h->up->nfiles : 1;
	h->want = -1;
	if (!(h->rf = calloc(n, sizeof *h->rf)) || !(h->f = calloc(n, sizeof *h->f)) ||
	    !(h->opos = malloc(n * sizeof *h->opos))) {
		export_hf_close(h);
		return -ENOMEM;
	}
	for (size_t i = 0; i < h->up->nfiles; i++) {
		const struct rq_src_entry *e = &h->up->files[i];
		h->rf[i] = (struct rq_rs_file){.name = e->name, .size = e->size, .sha256 = e->sha256,
		                               .blob_id = cli_hf_blob_id(h->hf, i)};
		h->f[i].fd = -1;
		h->opos[i] = -1;
	}
	h->rd = *h->up;
	h->rd.ctx = h;
	h->rd.read = hf_read;
	*out = h;
	return 0;
}

const struct rq_src_reader *export_hf_reader(struct export_hf *h)
{
	return &h->rd;
}

void export_hf_planned(struct export_hf *h)
{
	h->planned = 1;
}

int export_hf_order(struct export_hf *h, const size_t *order, size_t n)
{
	size_t *o = malloc((n ? n : 1) * sizeof *o);
	if (!o)
		return -ENOMEM;
	free(h->order);
	h->order = o;
	h->norder = 0;
	for (size_t i = 0; i < h->up->nfiles; i++)
		h->opos[i] = -1;
	for (size_t k = 0; k < n; k++)
		if (order[k] < h->up->nfiles && h->opos[order[k]] < 0) {
			h->opos[order[k]] = (long)h->norder;
			o[h->norder++] = order[k];
		}
	return 0;
}

void export_hf_done(struct export_hf *h, size_t i)
{
	if (!h || i >= h->up->nfiles)
		return;
	struct lfile *lf = &h->f[i];
	if (h->pf.running && h->pf.i == i)
		pf_join(h);              /* prefetched but not read after all */
	if (lf->pre == PRE_DONE) {
		lf->pre = PRE_NONE;
		count_held(h, i, -1);
		rq_rs_pin(h->rs, i, -1);
	}
	if (lf->fd >= 0) {
		close(lf->fd);
		lf->fd = -1;
		rq_rs_pin(h->rs, i, -1);
		if (lf->ours) {
			h->held -= h->up->files[i].size;
			h->held_files--;
		}
	}
	if (lf->ours && h->rs)
		rq_rs_drop(h->rs, i);
	lf->ours = 0;
	if (h->want == (long)i)
		h->want = -1;
	if (h->want >= 0 && !h->pf.running)
		pf_start(h, (size_t)h->want);   /* held back by EXPORT_HF_HOLD until now */
}

void export_hf_stats(const struct export_hf *h, struct export_hf_stats *st)
{
	*st = h->st;
	if (h->rs) {
		struct rq_rs_stats rs;
		rq_rs_stats(h->rs, &rs);
		st->refetches = rs.refetches;
	}
}

void export_hf_close(struct export_hf *h)
{
	if (!h)
		return;
	h->want = -1;
	/* the files not in flight dropped while the store works; then the
	 * prefetch cancelled and joined before the store goes (its file's
	 * chunks stay in --cache's store: the cancelled store drops nothing;
	 * a temporary one is removed whole) */
	for (size_t i = 0; h->f && i < h->up->nfiles; i++)
		if (!h->pf.running || h->pf.i != i)
			export_hf_done(h, i);
	if (h->pf.running) {
		rq_rs_cancel(h->rs);
		size_t i = h->pf.i;
		pf_join(h);
		export_hf_done(h, i);
	}
	for (size_t i = 0; h->f && i < h->up->nfiles; i++)
		free(h->f[i].pc);
	rq_rs_close(h->rs);
	if (h->tmpdir) {
		nftw(h->tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
		free(h->tmpdir);
	}
	free(h->f);
	free(h->rf);
	free(h->opos);
	free(h->order);
	cli_hf_close(h->hf);
	free(h);
}
