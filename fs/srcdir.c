/* srcdir.c — what SRC holds: its files, resolved through hub symlinks. */
#include "fs/plan_int.h"
#include "fs/ckpt.h"
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

int rq_read_whole(const char *path, char **out, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	if (st.st_size > (1 << 30)) {
		close(fd);
		return -EFBIG;
	}
	char *b = malloc(st.st_size + 1);
	if (!b) {
		close(fd);
		return -ENOMEM;
	}
	size_t got = 0;
	while (got < (size_t)st.st_size) {
		ssize_t r = pread(fd, b + got, st.st_size - got, got);
		if (r <= 0) {
			int e = r < 0 ? -errno : -EIO;
			free(b);
			close(fd);
			return e;
		}
		got += r;
	}
	close(fd);
	b[got] = 0;
	*out = b;
	*len = got;
	return 0;
}

static int is_hex64(const char *s)
{
	if (strlen(s) != 64)
		return 0;
	for (; *s; s++)
		if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
			return 0;
	return 1;
}

/* A hub repo directory (models--org--name with refs/main and snapshots/)
 * given instead of a snapshot: use the snapshot refs/main names. */
static char *hub_snapshot(const char *src)
{
	char ref[4096], rev[256];
	snprintf(ref, sizeof ref, "%s/refs/main", src);
	FILE *f = fopen(ref, "r");
	if (!f)
		return NULL;
	char *ok = fgets(rev, sizeof rev, f);
	fclose(f);
	if (!ok)
		return NULL;
	rev[strcspn(rev, "\r\n")] = 0;
	char snap[4096];
	snprintf(snap, sizeof snap, "%s/snapshots/%s", src, rev);
	struct stat st;
	if (stat(snap, &st) < 0 || !S_ISDIR(st.st_mode))
		return NULL;
	return strdup(snap);
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(((const struct rq_srcfile *)a)->name, ((const struct rq_srcfile *)b)->name);
}

int rq_src_scan(const char *src, struct rq_srcfile **out, size_t *n, char **resolved,
                struct rq_err *err)
{
	struct stat st;
	if (stat(src, &st) < 0)
		return rq_errf(err, -errno, "SRC %s: %s", src, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return rq_errf(err, -ENOTDIR, "SRC %s is not a directory; give the checkpoint directory "
		               "(or its hub snapshot)", src);
	char *dir = hub_snapshot(src);
	if (!dir)
		dir = realpath(src, NULL);
	if (!dir)
		return rq_errf(err, -errno, "SRC %s: %s", src, strerror(errno));
	DIR *d = opendir(dir);
	if (!d) {
		int e = -errno;
		rq_errf(err, e, "SRC %s: %s", dir, strerror(-e));
		free(dir);
		return e;
	}
	struct rq_srcfile *f = NULL;
	size_t nf = 0, cap = 0;
	int rc = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char path[PATH_MAX];
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		struct stat fs;
		if (stat(path, &fs) < 0) {
			rc = rq_errf(err, -errno, "SRC file %s: %s (a dangling hub symlink? re-download "
			             "the snapshot)", path, strerror(errno));
			break;
		}
		if (!S_ISREG(fs.st_mode))
			continue;   /* subdirectories are not part of the presented checkpoint */
		if (nf == cap) {
			cap = cap ? cap * 2 : 64;
			struct rq_srcfile *nfp = realloc(f, cap * sizeof *f);
			if (!nfp) {
				rc = -ENOMEM;
				break;
			}
			f = nfp;
		}
		struct rq_srcfile *s = &f[nf];
		memset(s, 0, sizeof *s);
		s->name = strdup(de->d_name);
		s->path = realpath(path, NULL);
		if (!s->name || !s->path) {
			free(s->name);
			free(s->path);
			rc = -ENOMEM;
			break;
		}
		nf++;
		s->size = fs.st_size;
		s->dev = fs.st_dev;
		s->ino = fs.st_ino;
		s->mtime_ns = (int64_t)fs.st_mtim.tv_sec * 1000000000 + fs.st_mtim.tv_nsec;
		const char *base = strrchr(s->path, '/');
		if (base && is_hex64(base + 1) && base - s->path >= 6 && !strncmp(base - 6, "/blobs", 6))
			memcpy(s->blob_sha256, base + 1, 65);
	}
	closedir(d);
	if (rc) {
		rq_srcfiles_free(f, nf);
		free(dir);
		return rc;
	}
	qsort(f, nf, sizeof *f, cmp_name);
	*out = f;
	*n = nf;
	*resolved = dir;
	return 0;
}

void rq_srcfiles_free(struct rq_srcfile *f, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(f[i].name);
		free(f[i].path);
	}
	free(f);
}
