/* srcdir.c — what SRC holds: its files, resolved through hub symlinks. */
#include "base/grow.h"
#include "plan/plan_int.h"
#include "plan/ckpt.h"
#include "base/err.h"
#include "base/esc.h"
#include "base/file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int rq_read_whole(const char *path, char **out, size_t *len)
{
	/* base/file.h: O_NONBLOCK (a FIFO planted at the path cannot hang the
	 * caller), a regular file only, at most 1 GiB read */
	return rq_file_read(path, (size_t)1 << 30, out, len, NULL);
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

/* Is path (resolved) root itself or below it? */
static int inside(const char *path, const char *root)
{
	size_t n = strlen(root);
	return root[0] && !strncmp(path, root, n) && (path[n] == '/' || path[n] == 0);
}

/* Files a checkpoint cannot do without: refused rather than skipped. */
static int essential(const char *name)
{
	size_t l = strlen(name);
	return !strcmp(name, "config.json") || !strcmp(name, "model.safetensors.index.json") ||
	       (l > 12 && !strcmp(name + l - 12, ".safetensors"));
}

int rq_plan_skip(struct rq_plan *p, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	rq_vfmt_esc(line, sizeof line, fmt, ap);    /* names from SRC may hold control bytes */
	va_end(ap);
	char *dup = strdup(line);
	char **v = dup ? realloc(p->skipped, (p->nskipped + 1) * sizeof *v) : NULL;
	if (!v) {
		free(dup);
		return -ENOMEM;
	}
	p->skipped = v;
	p->skipped[p->nskipped++] = dup;
	return 0;
}

const char *rq_src_name_refused(const char *name)
{
	size_t l = strlen(name), r = strlen(RQ_OLD_TMP_SUFFIX);
	if (!l)
		return "is empty";
	if (!strcmp(name, ".") || !strcmp(name, ".."))
		return "is . or .., not a file name";
	if (strchr(name, '/') || strchr(name, '\\'))
		return "holds a / or \\, a path and not a file name";
	if (!strncmp(name, RQ_RESERVED_PREFIX, strlen(RQ_RESERVED_PREFIX)) ||
	    (l >= r && !strcmp(name + l - r, RQ_OLD_TMP_SUFFIX)))
		return "is kept for requantfs's own files (" RQ_RESERVED_PREFIX "*, *"
		       RQ_OLD_TMP_SUFFIX ")";
	return NULL;
}

/* An entry that cannot be followed, examined or read: skipped and logged
 * when the checkpoint can do without it, else refused with what to do. */
static int odd_entry(struct rq_plan *p, const char *path, const char *name, const char *what,
                     int e, const char *todo, struct rq_err *err)
{
	if (e == ENOMEM || e == EMFILE || e == ENFILE)   /* this process's trouble, not SRC's */
		return rq_errf(err, -e, "SRC file %s: %s", path, strerror(e));
	char target[PATH_MAX] = "";
	ssize_t n = readlink(path, target, sizeof target - 1);
	target[n > 0 ? n : 0] = 0;
	if (essential(name))
		return rq_errf(err, -e, "SRC file %s is %s%s%s (%s): a "
		               "checkpoint file cannot be left out; %s", path, what,
		               *target ? " to " : "", target, strerror(e), todo ? todo : "fix it");
	return rq_plan_skip(p, "SRC entry %s is %s%s%s (%s): not presented", path, what,
	            *target ? " to " : "", target, strerror(e));
}

static const char *kind_of(mode_t m)
{
	return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket" :
	       S_ISCHR(m) || S_ISBLK(m) ? "a device" : "not a regular file";
}

/* The trust boundary. SRC's entries are presented to whoever may read the
 * mount, with SRC's modes and owners; a symlink must therefore not lead the
 * mount to bytes outside SRC (a link to /etc/shadow would otherwise be
 * served by a root daemon). A link is followed when its target, resolved,
 * is inside SRC, or — SRC being a hub snapshot .../snapshots/<rev> — inside
 * that repo's .../blobs/. Everything else that is not a regular file is not
 * presented. */
int rq_src_scan(struct rq_plan *p, const char *src, struct rq_err *err)
{
	struct stat st;
	if (stat(src, &st) < 0)
		return rq_errf(err, -errno, "SRC %s: %s", src, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return rq_errf(err, -ENOTDIR, "SRC %s is not a directory; give the checkpoint directory "
		               "(or its hub snapshot)", src);
	char *snap = hub_snapshot(src);
	char *dir = realpath(snap ? snap : src, NULL);
	free(snap);
	if (!dir)
		return rq_errf(err, -errno, "SRC %s: %s", src, strerror(errno));
	char blobs[PATH_MAX] = "";
	const char *last = strrchr(dir, '/');
	if (last && last > dir) {
		/* .../models--org--name/snapshots/<rev>: blobs is .../models--org--name/blobs */
		const char *prev = last - 1;
		while (prev > dir && *prev != '/')
			prev--;
		if (last - prev == 10 && !strncmp(prev, "/snapshots", 10) && prev > dir)
			snprintf(blobs, sizeof blobs, "%.*s/blobs", (int)(prev - dir), dir);
	}
	DIR *d = opendir(dir);
	if (!d || fstat(dirfd(d), &st) < 0) {
		int e = -errno;
		rq_errf(err, e, "SRC %s: %s", dir, strerror(-e));
		if (d)
			closedir(d);
		free(dir);
		return e;
	}
	p->dir_mode = st.st_mode & 0777;
	p->dir_uid = st.st_uid;
	p->dir_gid = st.st_gid;
	struct rq_srcfile *f = NULL;
	size_t nf = 0, cap = 0;
	int rc = 0;
	struct dirent *de;
	while (!rc && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		const char *bad = rq_src_name_refused(de->d_name);
		if (bad) {
			rc = rq_plan_skip(p, "SRC entry %s/%s: its name %s; not presented", dir,
			                  de->d_name, bad);
			continue;
		}
		char path[PATH_MAX];
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		struct stat ls, fs;
		if (lstat(path, &ls) < 0) {
			if (errno == ENOENT)
				continue;   /* removed while listing */
			rc = odd_entry(p, path, de->d_name, "an entry that cannot be examined", errno,
			               "give this user access to it", err);
			continue;
		}
		char *real = NULL;
		const char *why = NULL;
		if (S_ISLNK(ls.st_mode)) {
			real = realpath(path, NULL);
			if (!real) {
				int e = errno;
				rc = odd_entry(p, path, de->d_name, e == ENOENT ? "a dangling symlink" :
				               e == ELOOP ? "a symlink loop" : "a symlink that cannot be "
				               "followed", e, blobs[0] ? "re-download the snapshot" :
				               "restore its target or remove the link", err);
				continue;
			}
			if (!inside(real, dir) && !(blobs[0] && inside(real, blobs)))
				why = "a symlink leading out of SRC";
			else if (stat(real, &fs) < 0)
				why = "a symlink whose target cannot be read";
		} else {
			fs = ls;
			real = strdup(path);
			if (!real) {
				rc = -ENOMEM;
				break;
			}
		}
		if (!why && !S_ISREG(fs.st_mode)) {
			if (S_ISDIR(fs.st_mode)) {      /* subdirectories are not part of it */
				free(real);
				continue;
			}
			why = kind_of(fs.st_mode);
		}
		if (why) {
			if (essential(de->d_name))
				rc = rq_errf(err, -EPERM, "SRC file %s is %s (%s): refused; a checkpoint "
				             "file must be a regular file inside SRC (or a hub snapshot's "
				             "link into its blobs/)", path, why, S_ISLNK(ls.st_mode) ? real : "");
			else
				rc = rq_plan_skip(p, "SRC entry %s is %s%s%s: not presented", path, why,
				          S_ISLNK(ls.st_mode) ? " to " : "", S_ISLNK(ls.st_mode) ? real : "");
			free(real);
			continue;
		}
		/* What the daemon cannot open it cannot present (a mode the owner
		 * took away, an ACL, an LSM): skipped like the rest, unless needed. */
		int fd = open(real, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0) {
			int e = errno;
			free(real);
			rc = odd_entry(p, path, de->d_name, "a file that cannot be read", e,
			               "give this user read access", err);
			continue;
		}
		close(fd);
		if (RQ_GROW(f, nf, cap, 64)) {
			free(real);
			rc = -ENOMEM;
			break;
		}
		struct rq_srcfile *s = &f[nf];
		memset(s, 0, sizeof *s);
		s->name = strdup(de->d_name);
		s->path = real;
		if (!s->name) {
			free(real);
			rc = -ENOMEM;
			break;
		}
		nf++;
		s->size = fs.st_size;
		s->dev = fs.st_dev;
		s->ino = fs.st_ino;
		s->mtime_ns = (int64_t)fs.st_mtim.tv_sec * 1000000000 + fs.st_mtim.tv_nsec;
		s->ctime_ns = (int64_t)fs.st_ctim.tv_sec * 1000000000 + fs.st_ctim.tv_nsec;
		s->mode = fs.st_mode & 0777;
		s->uid = fs.st_uid;
		s->gid = fs.st_gid;
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
	p->srcs = f;
	p->nsrcs = nf;
	p->src_dir = dir;
	return 0;
}

const struct rq_srcfile *rq_src_find(const struct rq_plan *p, const char *name)
{
	struct rq_srcfile key = {.name = (char *)name};
	return bsearch(&key, p->srcs, p->nsrcs, sizeof key, cmp_name);
}

int rq_src_open(const struct rq_srcfile *f)
{
	int fd = open(f->path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	int e = 0;
	if (fstat(fd, &st) < 0)
		e = -errno;
	else if (!S_ISREG(st.st_mode))
		e = -EINVAL;
	else if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0)
		e = -errno;
	if (e) {
		close(fd);
		return e;
	}
	return fd;
}

void rq_srcfiles_free(struct rq_srcfile *f, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(f[i].name);
		free(f[i].path);
	}
	free(f);
}
