/* export.c — the virtual checkpoint as real files (or links to SRC's).
 *
 * Each virtual file is made under a temporary name in DST, in order:
 *   identical to SRC, link mode     a link to SRC's resolved file, after checking it is
 *                                   still the file the plan saw, inside SRC
 *   requantized, in the cache whole the materialized copy (hash-verified on open,
 *                                   identity re-checked after the copy)
 *   otherwise                       its segments: plan bytes, SRC ranges, job outputs
 *                                   (a job's output from the cache when it is there,
 *                                   else quantized now)
 * then every temporary is renamed; with links, the manifest goes last.
 * A remote SRC (hf://) is read through the plan's reader (the CLI's answers
 * from whole files fetched and verified first); o->src_order says in which
 * order SRC files will be read (so the next may be fetched while export works
 * on one), o->src_done when one is needed no more.
 *
 * The order of this folder (held by tests/tools/test_layout.py): each file
 * calls only the files below it.
 *
 *   calib_fetch.c  `calib fetch`: the scales of a hub checkpoint
 *   export.c       the virtual checkpoint as real files (or links)
 *   verify.c       byte comparison of two checkpoints, recipe diagnosis
 *   calib.c        `calib extract`: every input_global_scale of a checkpoint
 *   vread.c        verify's coalesced reads of a remote checkpoint
 */
#include "offline/export.h"
#include "plan/plan.h"
#include "job/job.h"
#include "cache/cache.h"
#include "base/err.h"
#include "st/jcheck.h"

#include <cjson/cJSON.h>

#include <dirent.h>
#include <inttypes.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
	while ((de = readdir(d)))
		used |= strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	closedir(d);
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

/* The manifest of a linked export: each link's name, kind, target and the
 * identity of the file it resolved to. */
static int write_manifest(const struct rq_plan *p, const uint8_t *linked, enum rq_export_link mode,
                          const char *path, struct rq_err *err)
{
	cJSON *root = cJSON_CreateObject(), *arr = cJSON_CreateArray();
	if (!root || !arr) {
		cJSON_Delete(root);
		cJSON_Delete(arr);
		return rq_errf(err, -ENOMEM, "out of memory");
	}
	cJSON_AddNumberToObject(root, "format", 1);
	cJSON_AddStringToObject(root, "link", mode == RQ_LINK_HARD ? "hard" : "symbolic");
	cJSON_AddStringToObject(root, "src", p->src_dir);
	cJSON_AddItemToObject(root, "linked", arr);
	for (size_t i = 0; i < p->nfiles; i++) {
		if (!linked[i])
			continue;
		const struct rq_srcfile *s = &p->srcs[p->files[i].src];
		cJSON *o = cJSON_CreateObject();
		if (!o)
			break;
		cJSON_AddItemToArray(arr, o);
		char num[32];
		cJSON_AddStringToObject(o, "name", p->files[i].name);
		cJSON_AddStringToObject(o, "target", s->path);
		snprintf(num, sizeof num, "%" PRIu64, s->size);
		cJSON_AddStringToObject(o, "size", num);
		snprintf(num, sizeof num, "%" PRId64, s->mtime_ns);
		cJSON_AddStringToObject(o, "mtime_ns", num);
		snprintf(num, sizeof num, "%ju", (uintmax_t)s->ino);
		cJSON_AddStringToObject(o, "ino", num);
	}
	char *text = cJSON_Print(root);
	cJSON_Delete(root);
	if (!text)
		return rq_errf(err, -ENOMEM, "out of memory");
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	int rc = fd < 0 ? rq_errf(err, -errno, "cannot create %s: %s", path, strerror(errno))
	                : write_all(fd, (const uint8_t *)text, strlen(text), path, err);
	if (fd >= 0 && !rc && fsync(fd) < 0)
		rc = rq_errf(err, -errno, "fsync %s: %s", path, strerror(errno));
	if (fd >= 0)
		close(fd);
	free(text);
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
	char dst_real[PATH_MAX], man_tmp[PATH_MAX + 32] = "";
	if (!realpath(dst, dst_real))
		return rq_errf(err, -errno, "DST %s: %s", dst, strerror(errno));
	int *fds = malloc((p->nsrcs ? p->nsrcs : 1) * sizeof *fds);
	uint8_t **out = calloc(p->njobs ? p->njobs : 1, sizeof *out);
	int *refs = calloc(p->njobs ? p->njobs : 1, sizeof *refs);
	uint8_t *linked = calloc(p->nfiles ? p->nfiles : 1, 1);
	char (*tmp)[PATH_MAX] = calloc(p->nfiles ? p->nfiles : 1, sizeof *tmp);
	long *last_use = malloc((p->nsrcs ? p->nsrcs : 1) * sizeof *last_use);
	size_t written = 0;
	uint64_t bytes = 0;
	if (!fds || !out || !refs || !linked || !tmp || !last_use) {
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
		snprintf(tmp[i], sizeof tmp[i], "%s/.%s.requantfs-tmp", dst, f->name);
		written = i + 1;
		if (!f->changed && o->link != RQ_LINK_NONE) {
			if (!(rc = make_link(p, f, dst_real, o->link, tmp[i], err))) {
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
	if (!rc && st.files_linked) {
		snprintf(man_tmp, sizeof man_tmp, "%s/.%s.requantfs-tmp", dst, EXPORT_MANIFEST);
		rc = write_manifest(p, linked, o->link, man_tmp, err);
	}
	/* every file is complete: give them their names (the manifest last) */
	for (size_t i = 0; i < p->nfiles && !rc; i++) {
		char final[PATH_MAX + 8];
		snprintf(final, sizeof final, "%s/%s", dst, p->files[i].name);
		if (rename(tmp[i], final) < 0)
			rc = rq_errf(err, -errno, "rename %s -> %s: %s", tmp[i], final, strerror(errno));
	}
	if (!rc && man_tmp[0]) {
		char final[PATH_MAX + 32];
		snprintf(final, sizeof final, "%s/%s", dst, EXPORT_MANIFEST);
		if (rename(man_tmp, final) < 0)
			rc = rq_errf(err, -errno, "rename %s -> %s: %s", man_tmp, final, strerror(errno));
	}
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
	if (rc && man_tmp[0])
		unlink(man_tmp);
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
	free(tmp);
	free(last_use);
	return rc;
}

static int jnum(const cJSON *o, const char *key, uint64_t *v)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
	char *end;
	if (!cJSON_IsString(x) || !*x->valuestring)
		return -1;
	errno = 0;
	*v = strtoull(x->valuestring, &end, 10);
	return errno || *end ? -1 : 0;
}

int rq_export_check_links(const char *dst, void (*fn)(void *ctx, const char *name, const char *why),
                          void *ctx, size_t *nlinks, size_t *nbad, struct rq_err *err)
{
	char path[PATH_MAX + 32];
	snprintf(path, sizeof path, "%s/%s", dst, EXPORT_MANIFEST);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0 && errno == ENOENT)
		return -ENOENT;
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > (64 << 20)) {
		if (fd >= 0)
			close(fd);
		return rq_errf(err, -EPROTO, "%s: not a readable regular file of at most 64 MiB", path);
	}
	char *text = malloc((size_t)st.st_size + 1);
	ssize_t n = text ? read(fd, text, (size_t)st.st_size) : -1;
	close(fd);
	if (n != st.st_size) {
		free(text);
		return rq_errf(err, -EPROTO, "%s: cannot be read", path);
	}
	text[n] = 0;
	cJSON *root = jc_parse(text, (size_t)n, path, err);
	free(text);
	if (!root)
		return -EPROTO;
	const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "linked"), *o;
	if (!cJSON_IsArray(arr)) {
		cJSON_Delete(root);
		return rq_errf(err, -EPROTO, "%s: not an export manifest (no \"linked\" array)", path);
	}
	size_t links = 0, bad = 0;
	int rc = 0;
	cJSON_ArrayForEach(o, arr) {
		const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
		uint64_t size, mtime, ino;
		if (!cJSON_IsString(name) || strchr(name->valuestring, '/') || jnum(o, "size", &size) ||
		    jnum(o, "mtime_ns", &mtime) || jnum(o, "ino", &ino)) {
			rc = rq_errf(err, -EPROTO, "%s: a \"linked\" entry lacks name, size, mtime_ns or ino",
			             path);
			break;
		}
		links++;
		char fp[2 * PATH_MAX], why[256] = "";
		snprintf(fp, sizeof fp, "%s/%s", dst, name->valuestring);
		struct stat s;
		if (stat(fp, &s) < 0)
			snprintf(why, sizeof why, "%s (a dangling link: its SRC file is gone)", strerror(errno));
		else if (!S_ISREG(s.st_mode))
			snprintf(why, sizeof why, "no longer leads to a regular file");
		else if ((uint64_t)s.st_size != size)
			snprintf(why, sizeof why, "SRC's file changed since the export (%" PRIu64 " bytes then, "
			         "%jd now)", size, (intmax_t)s.st_size);
		else if ((uint64_t)s.st_ino != ino)
			snprintf(why, sizeof why, "SRC's file was replaced since the export (another inode)");
		else if ((uint64_t)((int64_t)s.st_mtim.tv_sec * 1000000000 + s.st_mtim.tv_nsec) != mtime)
			snprintf(why, sizeof why, "SRC's file was modified since the export (its mtime moved)");
		if (why[0]) {
			bad++;
			if (fn)
				fn(ctx, name->valuestring, why);
		}
	}
	cJSON_Delete(root);
	if (!rc) {
		*nlinks = links;
		*nbad = bad;
	}
	return rc;
}
