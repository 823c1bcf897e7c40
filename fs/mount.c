/* mount.c — the FUSE session of a requantfs mount: checks before mounting,
 * the fixed inode tree, lookup/getattr/readdir/open/statfs, the run loop.
 *
 * The tree never changes while mounted, so entries and attributes are
 * cached by the kernel for a day and every open keeps the page cache.
 * Reads are in mount_read.c, jobs in mount_jobs.c, /.requantfs in
 * mount_ctl.c. */
#include "fs/mount_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "fs/qrun.h"

#define TTL_LONG 86400.0          /* immutable tree: entries and attrs for a day */
#define TTL_CTL 1.0               /* control files change */

double rq_mnt_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void rq_mount_log(struct rq_mount *m, const char *fmt, ...)
{
	char line[1536];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	if (!m->logf && !m->o.log_stderr) {
		syslog(LOG_NOTICE, "%s", line);
		return;
	}
	time_t t = time(NULL);
	struct tm tm;
	char ts[32];
	localtime_r(&t, &tm);
	strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", &tm);
	pthread_mutex_lock(&m->log_mu);
	FILE *f = m->logf ? m->logf : stderr;
	fprintf(f, "%s requantfs[%d]: %s\n", ts, (int)getpid(), line);
	fflush(f);
	pthread_mutex_unlock(&m->log_mu);
}

/* ---- inode tree ------------------------------------------------------- */

static struct mnode *node(struct rq_mount *m, fuse_ino_t ino)
{
	if (ino < 1 || ino > m->nnodes)
		return NULL;
	return &m->nodes[ino - 1];
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static struct rq_mount *g_sort_m;   /* qsort context: tree building is single-threaded */

static int cmp_child(const void *a, const void *b)
{
	return strcmp(g_sort_m->nodes[*(const fuse_ino_t *)a - 1].name,
	              g_sort_m->nodes[*(const fuse_ino_t *)b - 1].name);
}

static int add_child(struct mnode *d, fuse_ino_t c)
{
	if ((d->nchild & (d->nchild + 1)) == 0 || d->nchild == 0) {
		size_t cap = d->nchild ? (d->nchild + 1) * 2 : 4;
		fuse_ino_t *v = realloc(d->child, cap * sizeof *v);
		if (!v)
			return -ENOMEM;
		d->child = v;
	}
	d->child[d->nchild++] = c;
	return 0;
}

/* Directory prefixes of the plan's names ("a/b/c" has "a" and "a/b"). */
static char **dir_prefixes;
static size_t ndir_prefixes;

static long find_dir(const char *prefix, size_t len)
{
	size_t lo = 0, hi = ndir_prefixes;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strncmp(dir_prefixes[mid], prefix, len);
		if (!c)
			c = dir_prefixes[mid][len] ? 1 : 0;
		if (!c)
			return (long)mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

static fuse_ino_t parent_ino(struct rq_mount *m, const char *name)
{
	const char *slash = strrchr(name, '/');
	if (!slash)
		return FUSE_ROOT_ID;
	long d = find_dir(name, slash - name);
	return d < 0 ? FUSE_ROOT_ID : 2 + m->plan->nfiles + d;
}

static int build_tree(struct rq_mount *m, struct rq_err *err)
{
	const struct rq_plan *p = m->plan;
	size_t cap = 0;
	ndir_prefixes = 0;
	dir_prefixes = NULL;
	for (size_t i = 0; i < p->nfiles; i++)
		for (const char *s = strchr(p->files[i].name, '/'); s; s = strchr(s + 1, '/')) {
			if (ndir_prefixes == cap) {
				cap = cap ? cap * 2 : 8;
				char **v = realloc(dir_prefixes, cap * sizeof *v);
				if (!v)
					return rq_errf(err, -ENOMEM, "out of memory");
				dir_prefixes = v;
			}
			dir_prefixes[ndir_prefixes] = strndup(p->files[i].name, s - p->files[i].name);
			if (!dir_prefixes[ndir_prefixes])
				return rq_errf(err, -ENOMEM, "out of memory");
			ndir_prefixes++;
		}
	qsort(dir_prefixes, ndir_prefixes, sizeof *dir_prefixes, cmp_str);
	size_t nd = 0;
	for (size_t i = 0; i < ndir_prefixes; i++) {
		if (nd && !strcmp(dir_prefixes[nd - 1], dir_prefixes[i])) {
			free(dir_prefixes[i]);
			continue;
		}
		dir_prefixes[nd++] = dir_prefixes[i];
	}
	ndir_prefixes = nd;

	m->ctl_base = 2 + p->nfiles + nd;
	m->nnodes = m->ctl_base + 3 + p->njobs - 1;
	m->nodes = calloc(m->nnodes, sizeof *m->nodes);
	m->vino = calloc(p->nfiles ? p->nfiles : 1, sizeof *m->vino);
	if (!m->nodes || !m->vino)
		return rq_errf(err, -ENOMEM, "out of memory");
	m->nodes[0] = (struct mnode){.kind = MN_DIR, .name = "", .parent = FUSE_ROOT_ID, .file = -1};
	for (size_t d = 0; d < nd; d++) {
		const char *s = strrchr(dir_prefixes[d], '/');
		struct mnode *n = &m->nodes[2 + p->nfiles + d - 1];
		*n = (struct mnode){.kind = MN_DIR, .name = s ? s + 1 : dir_prefixes[d],
		                    .parent = parent_ino(m, dir_prefixes[d]), .file = -1};
		if (add_child(node(m, n->parent), 2 + p->nfiles + d))
			return rq_errf(err, -ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < p->nfiles; i++) {
		const char *s = strrchr(p->files[i].name, '/');
		struct mnode *n = &m->nodes[2 + i - 1];
		*n = (struct mnode){.kind = MN_FILE, .name = s ? s + 1 : p->files[i].name,
		                    .parent = parent_ino(m, p->files[i].name), .file = (long)i};
		m->vino[i] = 2 + i;
		if (add_child(node(m, n->parent), 2 + i))
			return rq_errf(err, -ENOMEM, "out of memory");
	}
	fuse_ino_t cb = m->ctl_base;
	m->nodes[cb - 1] = (struct mnode){.kind = MN_CTL_DIR, .name = RQ_CTL_DIR,
	                                  .parent = FUSE_ROOT_ID, .file = -1};
	m->nodes[cb] = (struct mnode){.kind = MN_CTL_STATUS, .name = "status", .parent = cb,
	                              .file = -1};
	m->nodes[cb + 1] = (struct mnode){.kind = MN_CTL_JOBS, .name = "jobs", .parent = cb,
	                                  .file = -1};
	if (add_child(&m->nodes[cb - 1], cb + 1) || add_child(&m->nodes[cb - 1], cb + 2))
		return rq_errf(err, -ENOMEM, "out of memory");
	for (size_t j = 0; j < p->njobs; j++) {
		char num[24];
		snprintf(num, sizeof num, "%zu", j);
		struct mnode *n = &m->nodes[cb + 2 + j];
		*n = (struct mnode){.kind = MN_CTL_JOB, .name = strdup(num), .parent = cb + 2,
		                    .file = (long)j};
		if (!n->name || add_child(&m->nodes[cb + 1], cb + 3 + j))
			return rq_errf(err, -ENOMEM, "out of memory");
	}
	g_sort_m = m;
	for (size_t i = 0; i < m->nnodes; i++)
		if (m->nodes[i].kind == MN_DIR || m->nodes[i].kind == MN_CTL_DIR)
			qsort(m->nodes[i].child, m->nodes[i].nchild, sizeof(fuse_ino_t), cmp_child);
	return 0;
}

static void free_tree(struct rq_mount *m)
{
	if (!m->nodes)
		return;
	for (size_t i = 0; i < m->nnodes; i++) {
		free(m->nodes[i].child);
		if (m->nodes[i].kind == MN_CTL_JOB)
			free((char *)m->nodes[i].name);
	}
	free(m->nodes);
	m->nodes = NULL;
	for (size_t d = 0; d < ndir_prefixes; d++)
		free(dir_prefixes[d]);
	free(dir_prefixes);
	dir_prefixes = NULL;
	ndir_prefixes = 0;
	free(m->vino);
}

static fuse_ino_t child_named(struct rq_mount *m, fuse_ino_t dir, const char *name)
{
	struct mnode *d = node(m, dir);
	if (!d)
		return 0;
	if (d->kind == MN_CTL_JOBS) {
		char *end;
		errno = 0;
		unsigned long long j = strtoull(name, &end, 10);
		if (errno || *end || !*name || (name[0] == '0' && name[1]) || j >= m->plan->njobs)
			return 0;
		return m->ctl_base + 3 + j;
	}
	if (dir == FUSE_ROOT_ID && !strcmp(name, RQ_CTL_DIR))
		return m->ctl_base;
	size_t lo = 0, hi = d->nchild;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(m->nodes[d->child[mid] - 1].name, name);
		if (!c)
			return d->child[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return 0;
}

void rq_mnt_fill_attr(struct rq_mount *m, fuse_ino_t ino, struct stat *st)
{
	struct mnode *n = node(m, ino);
	int64_t t = m->mtime_ns;
	memset(st, 0, sizeof *st);
	st->st_ino = ino;
	st->st_uid = geteuid();
	st->st_gid = getegid();
	st->st_blksize = 1 << 20;
	switch (n->kind) {
	case MN_DIR:
	case MN_CTL_DIR:
	case MN_CTL_JOBS:
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
		break;
	case MN_FILE: {
		const struct rq_vfile *f = &m->plan->files[n->file];
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		st->st_size = (off_t)f->size;
		st->st_blocks = (blkcnt_t)((f->size + 511) / 512);
		t = m->plan->srcs[f->src].mtime_ns;
		break;
	}
	case MN_CTL_STATUS:
	case MN_CTL_JOB:
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		st->st_size = 0;      /* generated on open: read until EOF */
		break;
	}
	st->st_mtim.tv_sec = t / 1000000000;
	st->st_mtim.tv_nsec = t % 1000000000;
	st->st_atim = st->st_mtim;
	st->st_ctim = st->st_mtim;
}

static double ttl_of(struct rq_mount *m, fuse_ino_t ino)
{
	enum mnode_kind k = node(m, ino)->kind;
	return k == MN_CTL_STATUS || k == MN_CTL_JOB ? TTL_CTL : TTL_LONG;
}

/* ---- operations ------------------------------------------------------- */

static struct rq_mount *M(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	if (conn->capable & FUSE_CAP_SPLICE_WRITE)
		conn->want |= FUSE_CAP_SPLICE_WRITE;
	if (conn->capable & FUSE_CAP_ASYNC_READ)
		conn->want |= FUSE_CAP_ASYNC_READ;
	/* The tree never changes: no need to check mtimes to drop the cache. */
	conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
	conn->max_write = 1 << 20;
	conn->max_background = 64;       /* concurrent readahead requests */
	conn->congestion_threshold = 48;
	conn->time_gran = 1;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct rq_mount *m = M(req);
	fuse_ino_t ino = child_named(m, parent, name);
	struct fuse_entry_param e;
	memset(&e, 0, sizeof e);
	if (!ino) {
		struct mnode *d = node(m, parent);
		if (!d)
			return (void)fuse_reply_err(req, ENOENT);
		/* negative entry, cached as long as positive ones (tree is fixed) */
		e.ino = 0;
		e.entry_timeout = d->kind == MN_DIR ? TTL_LONG : 0;
		return (void)fuse_reply_entry(req, &e);
	}
	e.ino = ino;
	e.generation = 1;
	rq_mnt_fill_attr(m, ino, &e.attr);
	e.attr_timeout = ttl_of(m, ino);
	e.entry_timeout = TTL_LONG;
	fuse_reply_entry(req, &e);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct rq_mount *m = M(req);
	struct stat st;
	if (!node(m, ino))
		return (void)fuse_reply_err(req, ENOENT);
	rq_mnt_fill_attr(m, ino, &st);
	fuse_reply_attr(req, &st, ttl_of(m, ino));
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi)
{
	fuse_reply_err(req, EROFS);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct rq_mount *m = M(req);
	struct mnode *n = node(m, ino);
	if (!n)
		return (void)fuse_reply_err(req, ENOENT);
	if (n->kind == MN_DIR || n->kind == MN_CTL_DIR || n->kind == MN_CTL_JOBS)
		return (void)fuse_reply_err(req, EISDIR);
	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC))
		return (void)fuse_reply_err(req, EROFS);
	if (n->kind != MN_FILE)
		return rq_mnt_ctl_open(req, m, ino, fi);
	const struct rq_vfile *f = &m->plan->files[n->file];
	/* A changed SRC fails the open (and the monitor drops cached pages). */
	if (rq_mnt_src_check(m, f->src, 1))
		return (void)fuse_reply_err(req, EIO);
	fi->keep_cache = 1;
	fi->direct_io = 0;     /* page cache: mmap (private and shared) works */
	fi->fh = (uint64_t)n->file;
	fuse_reply_open(req, fi);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct rq_mount *m = M(req);
	struct mnode *n = node(m, ino);
	if (n && n->kind != MN_FILE)
		return rq_mnt_ctl_release(req, m, ino, fi);
	fuse_reply_err(req, 0);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct mnode *n = node(M(req), ino);
	if (!n)
		return (void)fuse_reply_err(req, ENOENT);
	if (n->kind != MN_DIR && n->kind != MN_CTL_DIR && n->kind != MN_CTL_JOBS)
		return (void)fuse_reply_err(req, ENOTDIR);
	if ((fi->flags & O_ACCMODE) != O_RDONLY)
		return (void)fuse_reply_err(req, EROFS);
	fi->cache_readdir = 1;
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
	struct rq_mount *m = M(req);
	struct mnode *d = node(m, ino);
	if (!d)
		return (void)fuse_reply_err(req, ENOENT);
	char *buf = malloc(size);
	if (!buf)
		return (void)fuse_reply_err(req, ENOMEM);
	size_t used = 0;
	/* offsets: 1 ".", 2 "..", 3 + i child i */
	for (size_t k = (size_t)off; k < 2 + d->nchild; k++) {
		struct stat st;
		const char *name;
		fuse_ino_t ci;
		if (k == 0) {
			name = ".";
			ci = ino;
		} else if (k == 1) {
			name = "..";
			ci = d->parent;
		} else {
			ci = d->child[k - 2];
			name = m->nodes[ci - 1].name;
		}
		memset(&st, 0, sizeof st);
		st.st_ino = ci;
		st.st_mode = (m->nodes[ci - 1].kind == MN_FILE || m->nodes[ci - 1].kind == MN_CTL_STATUS ||
		              m->nodes[ci - 1].kind == MN_CTL_JOB) ? S_IFREG : S_IFDIR;
		size_t need = fuse_add_direntry(req, buf + used, size - used, name, &st, (off_t)k + 1);
		if (need > size - used)
			break;
		used += need;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fuse_reply_err(req, 0);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct rq_mount *m = M(req);
	struct statvfs s;
	memset(&s, 0, sizeof s);
	s.f_bsize = 1 << 20;
	s.f_frsize = 4096;
	s.f_blocks = (m->plan->total_size + 4095) / 4096;
	s.f_files = m->nnodes;
	s.f_namemax = 255;
	s.f_flag = ST_RDONLY;
	fuse_reply_statfs(req, &s);
}

static void op_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
	fuse_reply_err(req, (mask & W_OK) ? EROFS : 0);
}

static void op_readonly(fuse_req_t req)
{
	fuse_reply_err(req, EROFS);
}
static void op_mknod(fuse_req_t r, fuse_ino_t p, const char *n, mode_t m, dev_t d) { op_readonly(r); }
static void op_mkdir(fuse_req_t r, fuse_ino_t p, const char *n, mode_t m) { op_readonly(r); }
static void op_unlink(fuse_req_t r, fuse_ino_t p, const char *n) { op_readonly(r); }
static void op_create(fuse_req_t r, fuse_ino_t p, const char *n, mode_t m, struct fuse_file_info *fi)
{
	op_readonly(r);
}

static const struct fuse_lowlevel_ops mount_ops = {
	.init = op_init,
	.lookup = op_lookup,
	.getattr = op_getattr,
	.setattr = op_setattr,
	.mknod = op_mknod,
	.mkdir = op_mkdir,
	.unlink = op_unlink,
	.rmdir = op_unlink,
	.create = op_create,
	.open = op_open,
	.read = rq_mnt_read,
	.release = op_release,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.releasedir = op_releasedir,
	.statfs = op_statfs,
	.access = op_access,
};

/* ---- open / run / close ----------------------------------------------- */

static int check_mountpoint(const char *mnt, struct rq_err *err)
{
	struct stat st;
	if (stat(mnt, &st)) {
		int e = errno;
		if (e == ENOTCONN || e == ECONNABORTED)
			return rq_errf(err, -e, "%s is a dead FUSE mount (its daemon is gone): run "
			               "`requantfs umount %s` first", mnt, mnt);
		if (e == ENOENT)
			return rq_errf(err, -e, "mount point %s does not exist: create it with "
			               "`mkdir -p %s`", mnt, mnt);
		return rq_errf(err, -e, "mount point %s: %s", mnt, strerror(e));
	}
	if (!S_ISDIR(st.st_mode))
		return rq_errf(err, -ENOTDIR, "mount point %s is not a directory", mnt);
	DIR *d = opendir(mnt);
	if (!d)
		return rq_errf(err, -errno, "mount point %s: %s", mnt, strerror(errno));
	struct dirent *de;
	int nonempty = 0;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
			nonempty = 1;
			break;
		}
	closedir(d);
	char ctl[PATH_MAX];
	snprintf(ctl, sizeof ctl, "%s/%s/status", mnt, RQ_CTL_DIR);
	if (nonempty && !access(ctl, F_OK))
		return rq_errf(err, -EBUSY, "%s is already a requantfs mount: run `requantfs umount "
		               "%s` first", mnt, mnt);
	if (nonempty)
		return rq_errf(err, -ENOTEMPTY, "mount point %s is not empty: mount on an empty "
		               "directory", mnt);
	if (access(mnt, W_OK | X_OK) && geteuid() != 0)
		return rq_errf(err, -EACCES, "mount point %s is not writable by you (FUSE needs "
		               "to own or be able to write it)", mnt);
	return 0;
}

static int open_srcs(struct rq_mount *m, struct rq_err *err)
{
	const struct rq_plan *p = m->plan;
	m->srcs = calloc(p->nsrcs ? p->nsrcs : 1, sizeof *m->srcs);
	m->src_fds = calloc(p->nsrcs ? p->nsrcs : 1, sizeof *m->src_fds);
	if (!m->srcs || !m->src_fds)
		return rq_errf(err, -ENOMEM, "out of memory");
	for (size_t i = 0; i < p->nsrcs; i++)
		m->srcs[i].fd = m->src_fds[i] = -1;
	for (size_t i = 0; i < p->nsrcs; i++) {
		int fd = open(p->srcs[i].path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return rq_errf(err, -errno, "%s: %s", p->srcs[i].path, strerror(errno));
		m->srcs[i].fd = m->src_fds[i] = fd;
		if (rq_mnt_src_check(m, (int)i, 1))
			return rq_errf(err, -EIO, "%s changed while the mount was being prepared: "
			               "mount again", p->srcs[i].path);
	}
	return 0;
}

static char *build_fuse_opts(struct rq_mount *m)
{
	const char *extra = m->fuse_opts && *m->fuse_opts ? m->fuse_opts : NULL;
	char *s = NULL;
	int r = asprintf(&s, "ro,default_permissions,fsname=requantfs,subtype=requantfs,"
	                 "max_read=1048576%s%s%s", geteuid() == 0 ? ",allow_other" : "",
	                 extra ? "," : "", extra ? extra : "");
	return r < 0 ? NULL : s;
}

static void raise_nofile(void)
{
	struct rlimit r;
	if (!getrlimit(RLIMIT_NOFILE, &r) && r.rlim_cur < r.rlim_max) {
		r.rlim_cur = r.rlim_max;
		setrlimit(RLIMIT_NOFILE, &r);
	}
}

int rq_mount_open(const struct rq_mount_opts *o, struct rq_mount **out, struct rq_err *err)
{
	int rc;
	struct rq_mount *m = calloc(1, sizeof *m);
	if (!m)
		return rq_errf(err, -ENOMEM, "out of memory");
	m->o = *o;
	pthread_mutex_init(&m->log_mu, NULL);
	pthread_mutex_init(&m->lock, NULL);
	pthread_cond_init(&m->work, NULL);
	m->t_start = rq_mnt_now();
	if (o->log_path) {
		m->logf = fopen(o->log_path, "ae");
		if (!m->logf) {
			rc = rq_errf(err, -errno, "log file %s: %s", o->log_path, strerror(errno));
			goto fail;
		}
	} else if (!o->log_stderr) {
		openlog("requantfs", LOG_PID, LOG_DAEMON);
	}
	raise_nofile();

	m->mnt = realpath(o->mnt, NULL);
	if (!m->mnt) {
		rc = check_mountpoint(o->mnt, err);
		if (!rc)
			rc = rq_errf(err, -errno, "mount point %s: %s", o->mnt, strerror(errno));
		goto fail;
	}
	if ((rc = check_mountpoint(m->mnt, err)))
		goto fail;
	m->src = strdup(o->src);
	m->cache_dir = strdup(o->cache_dir);
	m->fuse_opts = o->fuse_opts ? strdup(o->fuse_opts) : NULL;
	if (!m->src || !m->cache_dir) {
		rc = rq_errf(err, -ENOMEM, "out of memory");
		goto fail;
	}
	struct stat sst;
	if (stat(o->src, &sst) || !S_ISDIR(sst.st_mode)) {
		rc = rq_errf(err, -ENOENT, "SRC %s is not a checkpoint directory%s%s", o->src,
		             errno ? ": " : "", errno ? strerror(errno) : "");
		goto fail;
	}
	m->mtime_ns = (int64_t)sst.st_mtim.tv_sec * 1000000000 + sst.st_mtim.tv_nsec;

	struct rq_plan_opts po = {.src = o->src, .calib = o->calib, .drop_rule = o->drop_rule,
	                          .recipe = o->recipe};
	if ((rc = rq_plan_build(&po, &m->plan, err)))
		goto fail;
	struct rq_cache_opts co = {.dir = o->cache_dir, .max_bytes = o->cache_max};
	if ((rc = rq_cache_open(&co, &m->cache, err))) {
		rq_err_prefix(err, "cache directory %s is unusable (choose another with --cache)",
		              o->cache_dir);
		goto fail;
	}
	if ((rc = open_srcs(m, err)) || (rc = build_tree(m, err)) || (rc = rq_mnt_jobs_init(m, err)))
		goto fail;
	struct rq_quantizer_opts qo = {.device = o->device, .threads = o->threads,
	                               .gpu_mem = o->gpu_mem, .gpu_idle_s = o->gpu_idle_s};
	if ((rc = rq_quantizer_open(&qo, &m->q, err)))
		goto fail;
	const char *fb = rq_quantizer_fallback_reason(m->q);
	if (fb)
		rq_mount_log(m, "quantizer: %s", fb);

	char *opts = build_fuse_opts(m);
	if (!opts) {
		rc = rq_errf(err, -ENOMEM, "out of memory");
		goto fail;
	}
	char *argv[5] = {"requantfs", "-o", opts, NULL, NULL};
	int argc = 3;
	if (o->debug)
		argv[argc++] = "-d";
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	m->se = fuse_session_new(&args, &mount_ops, sizeof mount_ops, m);
	fuse_opt_free_args(&args);
	if (!m->se) {
		rc = rq_errf(err, -EINVAL, "libfuse refused the mount options \"%s\" (see its "
		             "message above; check -o)", opts);
		free(opts);
		goto fail;
	}
	free(opts);
	if (fuse_set_signal_handlers(m->se)) {
		rc = rq_errf(err, -EIO, "cannot install signal handlers");
		goto fail;
	}
	if (fuse_session_mount(m->se, m->mnt)) {
		fuse_remove_signal_handlers(m->se);
		rc = rq_errf(err, -EIO, "cannot mount on %s (is /dev/fuse usable and fusermount3 "
		             "installed? see the message above)", m->mnt);
		goto fail;
	}
	rq_mount_log(m, "mounted %s at %s: %zu files, %zu modules in %zu jobs, recipe %s, "
	             "device %s, cache %s", m->src, m->mnt, m->plan->nfiles, m->plan->nmods,
	             m->plan->njobs, rq_recipe_name(m->plan->recipe), rq_quantizer_device(m->q),
	             m->cache_dir);
	*out = m;
	return 0;
fail:
	if (m->se) {
		fuse_session_destroy(m->se);
		m->se = NULL;
	}
	rq_mount_close(m);
	return rc;
}

/* Kernel readahead of this mount: /sys/class/bdi/<major:minor>/read_ahead_kb,
 * found through /proc/self/mountinfo (no request to our own mount). */
static void set_readahead(struct rq_mount *m)
{
	if (!m->o.readahead_kb)
		return;
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return;
	char line[4096], dev[64] = "";
	while (fgets(line, sizeof line, f)) {
		char mp[PATH_MAX], d[64];
		/* id parent major:minor root mountpoint ... */
		if (sscanf(line, "%*d %*d %63s %*s %4095s", d, mp) == 2 && !strcmp(mp, m->mnt))
			snprintf(dev, sizeof dev, "%s", d);    /* last match = topmost */
	}
	fclose(f);
	if (!*dev)
		return;
	char path[128];
	snprintf(path, sizeof path, "/sys/class/bdi/%s/read_ahead_kb", dev);
	FILE *w = fopen(path, "we");
	if (!w || fprintf(w, "%u\n", m->o.readahead_kb) < 0 || fclose(w)) {
		rq_mount_log(m, "cannot set readahead to %u KiB (%s): %s", m->o.readahead_kb, path,
		             strerror(errno));
		return;
	}
}

struct ready_ctx {
	struct rq_mount *m;
	void (*fn)(void *, int, const char *);
	void *ctx;
	int done;
};

static void *ready_thread(void *arg)
{
	struct ready_ctx *r = arg;
	struct stat st;
	/* The kernel holds every request until INIT is answered: when this stat
	 * returns, the mount serves requests and the readahead can be raised
	 * (INIT would otherwise lower it again). */
	if (stat(r->m->mnt, &st) || st.st_ino != FUSE_ROOT_ID) {
		char msg[256];
		snprintf(msg, sizeof msg, "the mount at %s does not answer", r->m->mnt);
		r->fn(r->ctx, -EIO, msg);
		r->done = 1;
		return NULL;
	}
	set_readahead(r->m);
	rq_mount_log(r->m, "ready");
	r->fn(r->ctx, 0, NULL);
	r->done = 1;
	return NULL;
}

int rq_mount_run(struct rq_mount *m, void (*ready)(void *ctx, int rc, const char *msg), void *ctx)
{
	struct rq_err err = {0};
	int rc = rq_mnt_jobs_start(m, &err);
	if (!rc)
		rc = rq_mnt_monitor_start(m, &err);
	if (rc) {
		if (ready)
			ready(ctx, rc, err.msg);
		return rc;
	}
	struct fuse_loop_config *cfg = fuse_loop_cfg_create();
	if (!cfg)
		return -ENOMEM;
	int nt = m->o.fuse_threads > 0 ? m->o.fuse_threads : 16;
	fuse_loop_cfg_set_max_threads(cfg, nt);
	fuse_loop_cfg_set_idle_threads(cfg, nt / 2 ? nt / 2 : 1);
	fuse_loop_cfg_set_clone_fd(cfg, 1);

	struct ready_ctx r = {.m = m, .fn = ready, .ctx = ctx};
	pthread_t rt;
	int have_rt = ready && !pthread_create(&rt, NULL, ready_thread, &r);
	int lrc = fuse_session_loop_mt(m->se, cfg);
	fuse_loop_cfg_destroy(cfg);
	rq_mount_log(m, "session ended (%d): stopping", lrc);
	/* Finish or fail what is parked before the connection goes away. */
	rq_mnt_monitor_stop(m);
	rq_mnt_jobs_stop(m);
	fuse_session_unmount(m->se);
	if (have_rt)
		pthread_join(rt, NULL);
	if (ready && !have_rt)
		ready(ctx, -EIO, "cannot start a thread");
	return lrc < 0 ? lrc : lrc > 0 ? -EIO : 0;
}

void rq_mount_close(struct rq_mount *m)
{
	if (!m)
		return;
	if (m->se) {
		fuse_remove_signal_handlers(m->se);
		fuse_session_destroy(m->se);
	}
	rq_mnt_jobs_free(m);
	if (m->srcs && m->plan)
		for (size_t i = 0; i < m->plan->nsrcs; i++)
			if (m->srcs[i].fd >= 0)
				close(m->srcs[i].fd);
	free(m->srcs);
	free(m->src_fds);
	free_tree(m);
	rq_quantizer_close(m->q);
	rq_cache_close(m->cache);
	rq_plan_free(m->plan);
	if (m->logf)
		fclose(m->logf);
	else if (!m->o.log_stderr)
		closelog();
	free(m->mnt);
	free(m->src);
	free(m->cache_dir);
	free(m->fuse_opts);
	pthread_mutex_destroy(&m->lock);
	pthread_cond_destroy(&m->work);
	pthread_mutex_destroy(&m->log_mu);
	free(m);
}
