/* export.c — the virtual checkpoint as real files (or links to SRC's).
 *
 * Each virtual file is made under its own name in a private directory inside
 * DST (.requantfs-tmp.XXXXXX: SRC cannot hold that name, see
 * rq_src_name_refused), in order:
 *   identical to SRC, link mode     a link to SRC's resolved file, after checking it is
 *                                   still the file the plan saw, inside SRC
 *   requantized, in the cache whole the materialized copy (hash-verified on open,
 *                                   identity re-checked after the copy)
 *   otherwise                       its segments: plan bytes, SRC ranges, job outputs
 *                                   (a job's output from the cache when it is there,
 *                                   else quantized now)
 * then each is renamed into DST; with links, what every link shows is
 * recorded (its identity now, the hash taken before it was made) in the
 * manifest, which is named last; then the private directory is removed.
 * Crash safety: until the renames, DST holds only that directory, which a
 * later export refuses to write over (a dead export's leftovers, named).
 * A remote SRC (hf://) is read through the plan's reader (the CLI's answers
 * from whole files fetched and verified first); o->src_order says in which
 * order SRC files will be read (so the next may be fetched while export works
 * on one), o->src_done when one is needed no more.
 *
 * The order of this folder (held by tests/tools/test_layout.py): each file
 * calls only the files below it.
 *
 *   calib_fetch.c      `calib fetch`: the scales of a hub checkpoint
 *   export.c           the virtual checkpoint as real files (or links)
 *   verify.c           byte comparison of two checkpoints, recipe diagnosis
 *   export_manifest.c  the record of an export: linked files, identities, hashes
 *   calib.c            `calib extract`: every input_global_scale of a checkpoint
 *   vread.c            verify's coalesced reads of a remote checkpoint
 */
#include "offline/export_int.h"
#include "plan/plan.h"
#include "job/job.h"
#include "cache/cache.h"
#include "base/err.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TMPDIR_PREFIX RQ_RESERVED_PREFIX "-tmp."

static int check_dst(const char *dst, struct rq_err *err)
{
	struct stat st;
	if (stat(dst, &st) < 0) {
		if (errno != ENOENT)
			return rq_errf(err, -errno, "DST %s: %s", dst, strerror(errno));
		if (mkdir(dst, 0755) < 0)
			return rq_errf(err, -errno, "cannot create DST %s: %s", dst, strerror(errno));
		return 0;
	}
	if (!S_ISDIR(st.st_mode))
		return rq_errf(err, -ENOTDIR, "DST %s exists and is not a directory", dst);
	DIR *d = opendir(dst);
	if (!d)
		return rq_errf(err, -errno, "DST %s: %s", dst, strerror(errno));
	struct dirent *de;
	int used = 0;
	char left[256] = "";
	while ((de = readdir(d))) {
		used |= strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
		size_t l = strlen(de->d_name), r = strlen(RQ_OLD_TMP_SUFFIX);
		if (!strncmp(de->d_name, TMPDIR_PREFIX, strlen(TMPDIR_PREFIX)) ||
		    (l > r && !strcmp(de->d_name + l - r, RQ_OLD_TMP_SUFFIX)))
			snprintf(left, sizeof left, "%s", de->d_name);
	}
	closedir(d);
	if (left[0])
		return rq_errf(err, -EEXIST, "DST %s holds %s, the temporaries of an export that did "
		               "not finish; remove DST (rm -r) and export again", dst, left);
	if (used)
		return rq_errf(err, -EEXIST, "DST %s is not empty; export writes into a new or empty "
		               "directory", dst);
	return 0;
}

static int write_all(int fd, const uint8_t *b, uint64_t len, const char *path, struct rq_err *err)
{
	while (len) {
		ssize_t w = write(fd, b, len > (1 << 30) ? (1 << 30) : len);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return rq_errf(err, -errno, "writing %s: %s", path, strerror(errno));
		}
		b += w;
		len -= w;
	}
	return 0;
}

static int copy_range(int in, uint64_t off, uint64_t len, int out, const char *src_name,
                      const char *path, struct rq_err *err)
{
	loff_t o = (loff_t)off;
	while (len) {
		ssize_t n = copy_file_range(in, &o, out, NULL, len > (1u << 30) ? (1u << 30) : len, 0);
		if (n > 0) {
			len -= n;
			continue;
		}
		if (n == 0)
			return rq_errf(err, -EIO, "SRC %s ends early (changed while exporting?)", src_name);
		if (errno != EXDEV && errno != ENOSYS && errno != EINVAL && errno != EOPNOTSUPP)
			return rq_errf(err, -errno, "copying %s into %s: %s", src_name, path,
			               strerror(errno));
		break;   /* fall back to read/write */
	}
	static const size_t chunk = 8 << 20;
	uint8_t *buf = len ? malloc(chunk) : NULL;
	if (len && !buf)
		return -ENOMEM;
	int rc = 0;
	while (len && !rc) {
		ssize_t r = pread(in, buf, len < chunk ? len : chunk, o);
		if (r <= 0) {
			rc = rq_errf(err, r < 0 ? -errno : -EIO, "reading SRC %s: %s", src_name,
			             r < 0 ? strerror(errno) : "file ends early");
			break;
		}
		rc = write_all(out, buf, r, path, err);
		o += r;
		len -= r;
	}
	free(buf);
	return rc;
}

/* A range of a remote SRC file (hf://) into out through the reader, 8 MiB at a time. */
static int copy_remote(const struct rq_plan *p, int src, uint64_t off, uint64_t len, int out,
                       const char *path, struct rq_err *err)
{
	static const size_t chunk = 8 << 20;
	uint8_t *buf = len ? malloc(chunk) : NULL;
	if (len && !buf)
		return -ENOMEM;
	int rc = 0;
	while (len && !rc) {
		uint64_t n = len < chunk ? len : chunk;
		rc = p->reader->read(p->reader->ctx, p->srcs[src].ridx, off, n, buf, err);
		if (!rc)
			rc = write_all(out, buf, n, path, err);
		off += n;
		len -= n;
	}
	free(buf);
	return rc;
}

/* Is path (resolved) inside SRC, or inside the hub repo's blobs/ when SRC is
 * a snapshot (<repo>/snapshots/<rev>)? */
static int inside_src(const struct rq_plan *p, const char *path)
{
	size_t n = strlen(p->src_dir);
	if (!strncmp(path, p->src_dir, n) && path[n] == '/')
		return 1;
	const char *snap = strstr(p->src_dir, "/snapshots/");
	if (!snap || strchr(snap + 11, '/'))
		return 0;
	size_t r = (size_t)(snap - p->src_dir);
	return !strncmp(path, p->src_dir, r) && !strncmp(path + r, "/blobs/", 7);
}

/* SRC file s as the plan saw it, resolved, regular, inside SRC: 0, or an
 * error naming it. */
static int src_unchanged(const struct rq_plan *p, int s, char real[PATH_MAX], struct rq_err *err)
{
	const struct rq_srcfile *f = &p->srcs[s];
	struct stat st;
	if (!realpath(f->path, real) || stat(real, &st) < 0)
		return rq_errf(err, -ESTALE, "SRC %s: %s (it was there when SRC was read); run the "
		               "export again", f->name, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return rq_errf(err, -ESTALE, "SRC %s is no longer a regular file", f->name);
	if (!inside_src(p, real))
		return rq_errf(err, -EXDEV, "SRC %s leads out of SRC (to %s): export links only to "
		               "files inside SRC (or a hub snapshot's blobs/)", f->name, real);
	int64_t mt = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	int64_t ct = (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec;
	if (st.st_dev != f->dev || st.st_ino != f->ino || (uint64_t)st.st_size != f->size ||
	    mt != f->mtime_ns || ct != f->ctime_ns)
		return rq_errf(err, -ESTALE, "SRC %s changed since SRC was read (size, time or inode); "
		               "run the export again", f->name);
	return 0;
}

/* The symlink text from directory dir (resolved) to path (resolved):
 * relative when they share a parent below /, else path itself. */
static void link_text(const char *dir, const char *path, char *out, size_t cap)
{
	size_t common = 0;   /* length of the shared prefix, ending at a '/' boundary */
	for (size_t i = 1;; i++) {
		if ((dir[i] == '/' || !dir[i]) && (path[i] == '/' || !path[i]) &&
		    !strncmp(dir, path, i))
			common = i;
		if (!dir[i] || !path[i] || dir[i] != path[i])
			break;
	}
	if (common <= 1) {
		snprintf(out, cap, "%s", path);
		return;
	}
	size_t n = 0;
	out[0] = 0;
	for (const char *c = dir + common; *c; c++)
		if (*c == '/' && n + 4 < cap) {
			memcpy(out + n, "../", 4);
			n += 3;
		}
	snprintf(out + n, cap - n, "%s", path + common + 1);
}

static int make_link(const struct rq_plan *p, const struct rq_vfile *f, const char *dst_real,
                     enum rq_export_link mode, const char *tmp, struct rq_err *err)
{
	char real[PATH_MAX], text[2 * PATH_MAX];
	int rc = src_unchanged(p, f->src, real, err);
	if (rc)
		return rc;
	if (mode == RQ_LINK_HARD) {
		if (link(real, tmp) == 0)
			return 0;
		if (errno == EXDEV)
			return rq_errf(err, -EXDEV, "--link=hard: DST is on another file system than SRC "
			               "%s; use --link (symbolic links) or a DST on SRC's file system",
			               f->name);
		if (errno == EPERM)
			return rq_errf(err, -EPERM, "--link=hard: the kernel refuses a hard link to SRC %s "
			               "(not its owner, with fs.protected_hardlinks); use --link", f->name);
		return rq_errf(err, -errno, "--link=hard: link %s -> %s: %s", tmp, real, strerror(errno));
	}
	link_text(dst_real, real, text, sizeof text);
	if (symlink(text, tmp) < 0)
		return rq_errf(err, -errno, "symlink %s -> %s: %s", tmp, text, strerror(errno));
	return 0;
}

/* The requantized file i whole from the cache into fd: 0 copied (and still
 * the verified bytes after the copy), -ENOENT not there (or changed while
 * copied: fd truncated, build it instead), other -errno. */
static int from_cache_file(struct rq_cache *c, const struct rq_plan *p, size_t i, int out,
                           const char *tmp, struct rq_err *err)
{
	const struct rq_vfile *f = &p->files[i];
	struct rq_cache_key k;
	struct rq_cache_ident id;
	struct rq_err e = {0};
	int in;
	if (rq_file_key(p, i, &k))
		return -ENOMEM;
	if (rq_cache_file_open(c, &k, f->size, &in, &id, &e))
		return -ENOENT;
	int rc = copy_range(in, 0, f->size, out, f->name, tmp, err);
	if (!rc && rq_cache_file_recheck(c, &k, in, f->size, &id, &e) != 0)
		rc = -ENOENT;
	close(in);
	if (rc == -ENOENT && (ftruncate(out, 0) < 0 || lseek(out, 0, SEEK_SET) < 0))
		return rq_errf(err, -errno, "truncating %s: %s", tmp, strerror(errno));
	return rc;
}

/* Job j's output into buf: from the cache when it is there, else run. */
static int job_output(struct rq_quantizer *q, const struct rq_plan *p, size_t j, const int *fds,
                      struct rq_cache *c, uint8_t *buf, struct rq_export_stats *st,
                      struct rq_err *err)
{
	if (c) {
		struct rq_cache_key k;
		struct rq_err e = {0};
		if (!rq_job_key(p, j, &k, NULL) && !rq_cache_get(c, &k, p->jobs[j].out_size, buf, &e)) {
			st->jobs_from_cache++;
			return 0;
		}
	}
	int rc = rq_job_run(q, p, j, fds, buf, err);
	if (!rc)
		st->jobs_run++;
	return rc;
}

/* last[s]: the last virtual file (in export's order) that may read SRC file
 * s -- a SRC range of it, or a job first needed there (a job runs once, at
 * its first file) with a module in s -- else -1. 0 or -ENOMEM. */
static int src_last_use(const struct rq_plan *p, long *last)
{
	uint8_t *seen = calloc(p->njobs ? p->njobs : 1, 1);
	if (!seen)
		return -ENOMEM;
	for (size_t s = 0; s < p->nsrcs; s++)
		last[s] = -1;
	for (size_t i = 0; i < p->nfiles; i++)
		for (size_t k = 0; k < p->files[i].nseg; k++) {
			const struct rq_seg *g = &p->files[i].seg[k];
			if (g->kind == RQ_SEG_SRC) {
				last[g->src] = (long)i;
			} else if (g->kind == RQ_SEG_JOB && !seen[g->job]) {
				seen[g->job] = 1;
				const struct rq_job *jb = &p->jobs[g->job];
				for (int m = 0; m < jb->nmod; m++)
					last[p->mods[jb->mod[m]].src] = (long)i;
			}
		}
	free(seen);
	return 0;
}

/* order[0..*n): the SRC files export may read, in the order it first reads
 * them (the walk of src_last_use, each file at its first sight). */
static int src_first_use(const struct rq_plan *p, size_t *order, size_t *n)
{
	uint8_t *seen = calloc(p->njobs ? p->njobs : 1, 1), *got = calloc(p->nsrcs ? p->nsrcs : 1, 1);
	if (!seen || !got) {
		free(seen);
		free(got);
		return -ENOMEM;
	}
	*n = 0;
#define ADD(s) do { if (!got[s]) { got[s] = 1; order[(*n)++] = (s); } } while (0)
	for (size_t i = 0; i < p->nfiles; i++)
		for (size_t k = 0; k < p->files[i].nseg; k++) {
			const struct rq_seg *g = &p->files[i].seg[k];
			if (g->kind == RQ_SEG_SRC) {
				ADD(g->src);
			} else if (g->kind == RQ_SEG_JOB && !seen[g->job]) {
				seen[g->job] = 1;
				const struct rq_job *jb = &p->jobs[g->job];
				for (int m = 0; m < jb->nmod; m++)
					ADD(p->mods[jb->mod[m]].src);
			}
		}
#undef ADD
	free(seen);
	free(got);
	return 0;
}

static int64_t ns(struct timespec t)
{
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* SRC file s's bytes hashed through fd (opened at the start) into rec, with
 * its identity then, which must still be the plan's: a file rewritten while
 * it was read would be recorded with the hash of neither version. */
static int hash_linked(const struct rq_plan *p, int s, int fd, struct rq_link_rec *rec,
                       struct rq_err *err)
{
	const struct rq_srcfile *f = &p->srcs[s];
	struct stat st;
	char hex[33];
	int rc = rq_export_hash_fd(fd, f->size, f->path, hex, err);
	if (rc)
		return rc;
	if (fstat(fd, &st) < 0)
		return rq_errf(err, -errno, "SRC %s: %s", f->path, strerror(errno));
	if (st.st_dev != f->dev || st.st_ino != f->ino || (uint64_t)st.st_size != f->size ||
	    ns(st.st_mtim) != f->mtime_ns || ns(st.st_ctim) != f->ctime_ns)
		return rq_errf(err, -ESTALE, "SRC %s changed while export read it (size, time or "
		               "inode); run the export again", f->name);
	*rec = (struct rq_link_rec){.size = f->size, .ino = f->ino, .mtime_ns = f->mtime_ns,
	                            .ctime_ns = f->ctime_ns};
	memcpy(rec->xxh3, hex, sizeof hex);
	return 0;
}

/* What linked file i shows under its final name in dst: still the file
 * hashed (its ctime taken now: making and naming a hard link moves it;
 * a symbolic link's target must not have moved at all). */
static int link_shows(const struct rq_plan *p, size_t i, const char *dst,
                      enum rq_export_link mode, struct rq_link_rec *rec, struct rq_err *err)
{
	char path[PATH_MAX + 256];
	struct stat st;
	snprintf(path, sizeof path, "%s/%s", dst, p->files[i].name);
	if (stat(path, &st) < 0)
		return rq_errf(err, -errno, "%s: %s", path, strerror(errno));
	if ((uint64_t)st.st_ino != rec->ino || (uint64_t)st.st_size != rec->size ||
	    ns(st.st_mtim) != rec->mtime_ns ||
	    (mode == RQ_LINK_SYMLINK && ns(st.st_ctim) != rec->ctime_ns))
		return rq_errf(err, -ESTALE, "SRC %s changed while it was exported (size, time or "
		               "inode); run the export again", p->files[i].name);
	rec->ctime_ns = ns(st.st_ctim);
	return 0;
}

/* Every file is complete in tmpdir: give them their names in dst; with
 * links, record what each shows and name the manifest last. On failure the
 * names given are taken back (dst was empty: what is there is ours). */
static int publish(const struct rq_plan *p, const char *dst, const char *tmpdir,
                   char (*tmp)[PATH_MAX], const uint8_t *linked, struct rq_link_rec *rec,
                   enum rq_export_link mode, size_t nlinked, struct rq_err *err)
{
	char final[PATH_MAX + 256], man[PATH_MAX + 64];
	size_t named = 0;
	int rc = 0;
	for (; named < p->nfiles; named++) {
		snprintf(final, sizeof final, "%s/%s", dst, p->files[named].name);
		if (rename(tmp[named], final) < 0) {
			rc = rq_errf(err, -errno, "rename %s -> %s: %s", tmp[named], final,
			             strerror(errno));
			break;
		}
	}
	for (size_t i = 0; i < p->nfiles && !rc; i++)
		if (linked[i])
			rc = link_shows(p, i, dst, mode, &rec[i], err);
	if (!rc && nlinked) {
		snprintf(man, sizeof man, "%s/%s", tmpdir, EXPORT_MANIFEST);
		snprintf(final, sizeof final, "%s/%s", dst, EXPORT_MANIFEST);
		rc = rq_export_manifest_write(p, linked, rec, mode, man, err);
		if (!rc && rename(man, final) < 0)
			rc = rq_errf(err, -errno, "rename %s -> %s: %s", man, final, strerror(errno));
		if (rc)
			unlink(man);
	}
	for (size_t i = 0; i < named && rc; i++) {
		snprintf(final, sizeof final, "%s/%s", dst, p->files[i].name);
		unlink(final);
	}
	return rc;
}

int rq_export(const struct rq_plan *p, struct rq_quantizer *q, const char *dst,
              const struct rq_export_opts *o, struct rq_export_stats *st_out, struct rq_err *err)
{
	static const struct rq_export_opts none = {0};
	if (!o)
		o = &none;
	int rc = check_dst(dst, err);
	if (rc)
		return rc;
	struct rq_export_stats st = {0};
	char dst_real[PATH_MAX], tmpdir[PATH_MAX];
	if (!realpath(dst, dst_real))
		return rq_errf(err, -errno, "DST %s: %s", dst, strerror(errno));
	if (snprintf(tmpdir, sizeof tmpdir, "%s/" TMPDIR_PREFIX "XXXXXX", dst) >= (int)sizeof tmpdir)
		return rq_errf(err, -ENAMETOOLONG, "DST %s: path too long", dst);
	if (!mkdtemp(tmpdir))
		return rq_errf(err, -errno, "cannot create a directory in DST %s: %s", dst,
		               strerror(errno));
	int *fds = malloc((p->nsrcs ? p->nsrcs : 1) * sizeof *fds);
	uint8_t **out = calloc(p->njobs ? p->njobs : 1, sizeof *out);
	int *refs = calloc(p->njobs ? p->njobs : 1, sizeof *refs);
	uint8_t *linked = calloc(p->nfiles ? p->nfiles : 1, 1);
	struct rq_link_rec *rec = calloc(p->nfiles ? p->nfiles : 1, sizeof *rec);
	char (*tmp)[PATH_MAX] = calloc(p->nfiles ? p->nfiles : 1, sizeof *tmp);
	long *last_use = malloc((p->nsrcs ? p->nsrcs : 1) * sizeof *last_use);
	size_t written = 0;
	uint64_t bytes = 0;
	if (!fds || !out || !refs || !linked || !rec || !tmp || !last_use) {
		rc = -ENOMEM;
		goto done;
	}
	for (size_t s = 0; s < p->nsrcs; s++)
		fds[s] = -1;
	if (p->reader && o->link != RQ_LINK_NONE)
		rc = rq_errf(err, -EINVAL, "SRC %s is remote: there is nothing on disk to link to; "
		             "export it without --link", p->src_dir);
	for (size_t s = 0; s < p->nsrcs && !rc && !p->reader; s++) {
		fds[s] = rq_src_open(&p->srcs[s]);
		if (fds[s] < 0)
			rc = rq_errf(err, fds[s], "SRC %s: %s", p->srcs[s].path,
			             fds[s] == -EINVAL ? "no longer a regular file" : strerror(-fds[s]));
	}
	if (!rc && o->src_done && !(rc = src_last_use(p, last_use)))
		for (size_t s = 0; s < p->nsrcs; s++)
			if (last_use[s] < 0)
				o->src_done(o->src_ctx, s);    /* read only by the plan, if at all */
	if (!rc && o->src_order) {
		size_t *order = malloc((p->nsrcs ? p->nsrcs : 1) * sizeof *order), n = 0;
		if (!order || (rc = src_first_use(p, order, &n)))
			rc = rc ? rc : -ENOMEM;
		else
			o->src_order(o->src_ctx, order, n);
		free(order);
	}
	/* how many files still need each job's output */
	for (size_t i = 0; i < p->nfiles; i++) {
		const struct rq_vfile *f = &p->files[i];
		int last = -1;
		for (size_t k = 0; k < f->nseg; k++)
			if (f->seg[k].kind == RQ_SEG_JOB && f->seg[k].job != last)
				refs[last = f->seg[k].job]++;
	}
	for (size_t i = 0; i < p->nfiles && !rc; i++) {
		const struct rq_vfile *f = &p->files[i];
		if (snprintf(tmp[i], sizeof tmp[i], "%s/%s", tmpdir, f->name) >= (int)sizeof tmp[i]) {
			rc = rq_errf(err, -ENAMETOOLONG, "DST %s: the path of %s is too long", dst,
			             f->name);
			break;
		}
		written = i + 1;
		if (!f->changed && o->link != RQ_LINK_NONE) {
			if (!(rc = hash_linked(p, f->src, fds[f->src], &rec[i], err)) &&
			    !(rc = make_link(p, f, dst_real, o->link, tmp[i], err))) {
				linked[i] = 1;
				st.files_linked++;
				st.bytes_linked += f->size;
			}
			continue;
		}
		/* Private while written; SRC's permission bits once complete. */
		int fd = open(tmp[i], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0) {
			rc = rq_errf(err, -errno, "cannot create %s: %s", tmp[i], strerror(errno));
			break;
		}
		int whole = -ENOENT;
		if (o->cache && f->changed && (whole = from_cache_file(o->cache, p, i, fd, tmp[i], err)) == 0)
			st.files_from_cache++;
		else if (whole != -ENOENT)
			rc = whole;
		for (size_t k = 0; k < f->nseg && !rc && whole; k++) {
			const struct rq_seg *s = &f->seg[k];
			if (s->kind == RQ_SEG_MEM) {
				rc = write_all(fd, s->mem, s->len, tmp[i], err);
			} else if (s->kind == RQ_SEG_SRC && p->reader) {
				rc = copy_remote(p, s->src, s->src_off, s->len, fd, tmp[i], err);
			} else if (s->kind == RQ_SEG_SRC) {
				rc = copy_range(fds[s->src], s->src_off, s->len, fd, p->srcs[s->src].name,
				                tmp[i], err);
			} else {
				if (!out[s->job]) {
					out[s->job] = malloc(p->jobs[s->job].out_size);
					if (!out[s->job]) {
						rc = -ENOMEM;
						break;
					}
					rc = job_output(q, p, (size_t)s->job, fds, o->cache, out[s->job], &st, err);
					if (rc) {
						free(out[s->job]);
						out[s->job] = NULL;
						break;
					}
					if (o->progress)
						o->progress(o->ctx, st.jobs_run + st.jobs_from_cache, bytes);
				}
				rc = write_all(fd, out[s->job] + s->job_off, s->len, tmp[i], err);
			}
			if (!rc)
				bytes += s->len;
		}
		if (!whole)
			bytes += f->size;
		/* free the outputs no later file needs */
		int last = -1;
		for (size_t k = 0; k < f->nseg; k++)
			if (f->seg[k].kind == RQ_SEG_JOB && f->seg[k].job != last) {
				last = f->seg[k].job;
				if (--refs[last] == 0) {
					free(out[last]);
					out[last] = NULL;
				}
			}
		if (!rc && fchmod(fd, p->srcs[f->src].mode) < 0)
			rc = rq_errf(err, -errno, "chmod %s: %s", tmp[i], strerror(errno));
		if (!rc && fsync(fd) < 0)
			rc = rq_errf(err, -errno, "fsync %s: %s", tmp[i], strerror(errno));
		if (close(fd) < 0 && !rc)
			rc = rq_errf(err, -errno, "close %s: %s", tmp[i], strerror(errno));
		if (!rc) {
			st.files_written++;
			st.bytes_written += f->size;
		}
		if (o->progress)
			o->progress(o->ctx, st.jobs_run + st.jobs_from_cache, bytes);
		for (size_t s = 0; s < p->nsrcs && o->src_done && !rc; s++)
			if (last_use[s] == (long)i)
				o->src_done(o->src_ctx, s);
	}
	if (!rc)
		rc = publish(p, dst, tmpdir, tmp, linked, rec, o->link, st.files_linked, err);
	if (!rc && rmdir(tmpdir) < 0)
		rc = rq_errf(err, -errno, "removing %s: %s", tmpdir, strerror(errno));
	if (!rc) {
		int dfd = open(dst, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0) {
			fsync(dfd);
			close(dfd);
		}
		if (st_out)
			*st_out = st;
	}
done:
	if (rc && tmp)
		for (size_t i = 0; i < written; i++)
			unlink(tmp[i]);
	if (rc)
		rmdir(tmpdir);
	if (fds)
		for (size_t s = 0; s < p->nsrcs; s++)
			if (fds[s] >= 0)
				close(fds[s]);
	if (out)
		for (size_t j = 0; j < p->njobs; j++)
			free(out[j]);
	free(fds);
	free(out);
	free(refs);
	free(linked);
	free(rec);
	free(tmp);
	free(last_use);
	return rc;
}
