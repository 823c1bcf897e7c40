/* export.c — the virtual checkpoint as real files. */
#include "fs/export.h"
#include "fs/plan.h"
#include "fs/job.h"
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

int rq_export(const struct rq_plan *p, struct rq_quantizer *q, const char *dst,
              rq_export_progress_fn progress, void *ctx, struct rq_err *err)
{
	int rc = check_dst(dst, err);
	if (rc)
		return rc;
	int *fds = malloc(p->nsrcs * sizeof *fds);
	uint8_t **out = calloc(p->njobs ? p->njobs : 1, sizeof *out);
	int *refs = calloc(p->njobs ? p->njobs : 1, sizeof *refs);
	char (*tmp)[PATH_MAX] = calloc(p->nfiles ? p->nfiles : 1, sizeof *tmp);
	size_t written = 0;
	uint64_t jobs_done = 0, bytes = 0;
	if (!fds || !out || !refs || !tmp) {
		rc = -ENOMEM;
		goto done;
	}
	for (size_t s = 0; s < p->nsrcs; s++)
		fds[s] = -1;
	for (size_t s = 0; s < p->nsrcs && !rc; s++) {
		fds[s] = rq_src_open(&p->srcs[s]);
		if (fds[s] < 0)
			rc = rq_errf(err, fds[s], "SRC %s: %s", p->srcs[s].path,
			             fds[s] == -EINVAL ? "no longer a regular file" : strerror(-fds[s]));
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
		/* Private while written; SRC's permission bits once complete. */
		int fd = open(tmp[i], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		written = i + 1;
		if (fd < 0) {
			rc = rq_errf(err, -errno, "cannot create %s: %s", tmp[i], strerror(errno));
			break;
		}
		for (size_t k = 0; k < f->nseg && !rc; k++) {
			const struct rq_seg *s = &f->seg[k];
			if (s->kind == RQ_SEG_MEM) {
				rc = write_all(fd, s->mem, s->len, tmp[i], err);
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
					rc = rq_job_run(q, p, s->job, fds, out[s->job], err);
					if (rc) {
						free(out[s->job]);
						out[s->job] = NULL;
						break;
					}
					if (progress)
						progress(ctx, ++jobs_done, bytes);
				}
				rc = write_all(fd, out[s->job] + s->job_off, s->len, tmp[i], err);
			}
			if (!rc)
				bytes += s->len;
		}
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
		if (progress)
			progress(ctx, jobs_done, bytes);
	}
	/* every file is complete: give them their names */
	for (size_t i = 0; i < p->nfiles && !rc; i++) {
		char final[PATH_MAX];
		snprintf(final, sizeof final, "%s/%s", dst, p->files[i].name);
		if (rename(tmp[i], final) < 0)
			rc = rq_errf(err, -errno, "rename %s -> %s: %s", tmp[i], final, strerror(errno));
	}
	if (!rc) {
		int dfd = open(dst, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0) {
			fsync(dfd);
			close(dfd);
		}
	}
done:
	if (rc && tmp)
		for (size_t i = 0; i < written; i++)
			unlink(tmp[i]);
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
	free(tmp);
	return rc;
}
