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
 */
#include "tools/export_hf.h"
#include "tools/cli_hf.h"
#include "tools/cli.h"
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

struct lfile {
	int fd;                    /* the verified copy, or -1 */
	int ours;                  /* export fetched it: dropped when done */
	struct piece *pc;          /* [npc] */
	size_t npc;
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
	uint64_t held;             /* bytes of ours on disk now */
	size_t held_files;
	struct export_hf_stats st;
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

/* File i fetched whole, verified and open (lf->fd). */
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
	int had = rq_rs_path(h->rs, i) != NULL;   /* a mount's: read, never dropped */
	if (!had)
		lf->ours = 1;                         /* even a failed fetch leaves chunks */
	struct prog pg = {.h = h, .name = e->name, .size = e->size, .t0 = now_s()};
	pg.last = pg.t0;                          /* a quick fetch draws no live line */
	rq_rs_pin(h->rs, i, 1);
	if ((rc = rq_rs_fetch_file(h->rs, i, on_fetch, &pg, err)))
		rq_err_prefix(err, "%s", h->up->label);   /* the store names the file */
	double dt = now_s() - pg.t0;
	const char *path = rc ? NULL : rq_rs_path(h->rs, i);
	struct stat st;
	if (!rc && (!path || (lf->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 ||
	            fstat(lf->fd, &st) || (uint64_t)st.st_size != e->size))
		rc = rq_errf(err, -EIO, "%s/%s: its verified copy %s cannot be read", h->up->label,
		             e->name, path ? path : "(gone)");
	int line = !rc && !had && !h->o.quiet && (e->size >= (1u << 20) || is_shard(e->name));
	if (pg.drawn && !line)
		fprintf(stderr, "\r\033[K");          /* the live line, not followed by one */
	if (!rc && !had) {
		h->held += e->size;
		h->held_files++;
		if (h->held > h->st.held_max)
			h->st.held_max = h->held;
		if (h->held_files > h->st.held_files_max)
			h->st.held_files_max = h->held_files;
		h->st.files++;
		h->st.bytes += e->size;
		h->st.seconds += dt;
	}
	if (line) {
		char a[32], r[32];
		cli_human_bytes((double)e->size, a, sizeof a);
		cli_human_bytes(dt > 0 ? e->size / dt : 0, r, sizeof r);
		fprintf(stderr, "%srequantfs export: fetched %s (%s in %.1f s, %s/s), %s checked\n",
		        h->tty ? "\r\033[K" : "", e->name, a, dt, r,
		        e->sha256 ? "sha256" : "git blob id");
	}
	if (!rc)
		rc = check_pieces(h, i, err);
	if (rc) {
		if (lf->fd >= 0)
			close(lf->fd);
		lf->fd = -1;
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
	h->up = cli_hf_reader(h->hf);
	size_t n = h->up->nfiles ? h->up->nfiles : 1;
	if (!(h->rf = calloc(n, sizeof *h->rf)) || !(h->f = calloc(n, sizeof *h->f))) {
		export_hf_close(h);
		return -ENOMEM;
	}
	for (size_t i = 0; i < h->up->nfiles; i++) {
		const struct rq_src_entry *e = &h->up->files[i];
		h->rf[i] = (struct rq_rs_file){.name = e->name, .size = e->size, .sha256 = e->sha256,
		                               .blob_id = cli_hf_blob_id(h->hf, i)};
		h->f[i].fd = -1;
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

void export_hf_done(struct export_hf *h, size_t i)
{
	if (!h || i >= h->up->nfiles)
		return;
	struct lfile *lf = &h->f[i];
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
	for (size_t i = 0; h->f && i < h->up->nfiles; i++) {
		export_hf_done(h, i);
		free(h->f[i].pc);
	}
	rq_rs_close(h->rs);
	if (h->tmpdir) {
		nftw(h->tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
		free(h->tmpdir);
	}
	free(h->f);
	free(h->rf);
	cli_hf_close(h->hf);
	free(h);
}
