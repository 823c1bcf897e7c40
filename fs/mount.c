/* mount.c — the file system a requantfs mount presents: the fixed inode
 * tree and lookup/getattr/readdir/open/read/release/statfs (read-only).
 *
 * The tree never changes while mounted, so entries and attributes are
 * cached by the kernel for a day and every open keeps the page cache.
 *
 * The daemon is one straight line. Each file calls only the files below it
 * (mount_int.h declares them in this order); nothing calls back up except
 * through a function pointer the upper file installed (mread.serve: how a
 * parked read is answered; m->on_job_cached: who hears of a published job).
 *
 *   lifecycle mount_run.c   checks, session loop, readiness, SRC monitor, close
 *   ops       mount.c       FUSE operations, inode tree
 *   control   mount_ctl.c   /.requantfs/: status, jobs/<j> (`warm`); an edge:
 *                           only the ops reach it, for its own inodes
 *   open      mount_open.c  the open's mode: passthrough | copy path
 *   read      mount_read.c  a copy-path read maps its range onto segments
 *   sources   mount_seg.c   the seam: each segment's bytes now (buffer or fd
 *                           + offset) or "parked"; memory | SRC range | job
 *                           output | whole materialized file
 *             mount_mat.c   materialized files (a whole shard on disk)
 *             mount_jobs.c  single-flight jobs: park, run (job/), publish
 *   remote    mount_rver.c  hf:// SRC: --remote-verify file (whole files checked
 *                           before any byte), the remote pool (no FUSE thread
 *                           waits on the network)
 *   leaves    mount_pt.c    kernel passthrough (backing ids)
 *             mount_out.c   job outputs and a read's holds on them
 *             mount_src.c   SRC identity
 *             mount_remote.c  a remote SRC (hf://) through the chunk store
 *             mount_log.c   clock, log, thread stop
 *             mountinfo.c   /proc/self/mountinfo (umount's and run's checks)
 *
 * The data path (open, read, mat, jobs) never calls lifecycle or control. */
#include "fs/mount_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/err.h"

#define TTL_LONG 86400.0          /* immutable tree: entries and attrs for a day */
#define TTL_CTL 1.0               /* control files change */

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

static int cmp_child(const void *a, const void *b, void *mp)
{
	const struct rq_mount *m = mp;
	return strcmp(m->nodes[*(const fuse_ino_t *)a - 1].name,
	              m->nodes[*(const fuse_ino_t *)b - 1].name);
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

/* Index of directory prefix[0, len) in m->dirs, or -1. */
static long find_dir(struct rq_mount *m, const char *prefix, size_t len)
{
	char **dir_prefixes = m->dirs;
	size_t lo = 0, hi = m->ndirs;
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
	long d = find_dir(m, name, slash - name);
	return d < 0 ? FUSE_ROOT_ID : 2 + m->plan->nfiles + d;
}

int rq_mnt_tree_build(struct rq_mount *m, struct rq_err *err)
{
	const struct rq_plan *p = m->plan;
	size_t cap = 0, ndir_prefixes = 0;
	char **dir_prefixes = NULL;
	for (size_t i = 0; i < p->nfiles; i++)
		for (const char *s = strchr(p->files[i].name, '/'); s; s = strchr(s + 1, '/')) {
			if (ndir_prefixes == cap) {
				cap = cap ? cap * 2 : 8;
				char **v = realloc(dir_prefixes, cap * sizeof *v);
				if (!v)
					return rq_errf(err, -ENOMEM, "out of memory");
				dir_prefixes = m->dirs = v;
			}
			dir_prefixes[ndir_prefixes] = strndup(p->files[i].name, s - p->files[i].name);
			if (!dir_prefixes[ndir_prefixes])
				return rq_errf(err, -ENOMEM, "out of memory");
			m->ndirs = ++ndir_prefixes;
		}
	if (ndir_prefixes)    /* qsort(NULL, 0) is undefined */
		qsort(dir_prefixes, ndir_prefixes, sizeof *dir_prefixes, cmp_str);
	size_t nd = 0;
	for (size_t i = 0; i < ndir_prefixes; i++) {
		if (nd && !strcmp(dir_prefixes[nd - 1], dir_prefixes[i])) {
			free(dir_prefixes[i]);
			continue;
		}
		dir_prefixes[nd++] = dir_prefixes[i];
	}
	m->ndirs = nd;

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
	for (size_t i = 0; i < m->nnodes; i++)
		if (m->nodes[i].kind == MN_DIR || m->nodes[i].kind == MN_CTL_DIR)
			qsort_r(m->nodes[i].child, m->nodes[i].nchild, sizeof(fuse_ino_t), cmp_child, m);
	return 0;
}

void rq_mnt_tree_free(struct rq_mount *m)
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
	for (size_t d = 0; d < m->ndirs; d++)
		free(m->dirs[d]);
	free(m->dirs);
	m->dirs = NULL;
	m->ndirs = 0;
	free(m->vino);
}

static fuse_ino_t child_named(struct rq_mount *m, fuse_ino_t dir, const char *name)
{
	struct mnode *d = node(m, dir);
	if (!d)
		return 0;
	if (d->kind == MN_CTL_JOBS) {
		/* Only the canonical decimal name: no sign, space or leading zero. */
		size_t j = 0, len = strlen(name);
		if (!len || len > 19 || (name[0] == '0' && len > 1))
			return 0;
		for (size_t i = 0; i < len; i++) {
			if (name[i] < '0' || name[i] > '9')
				return 0;
			j = j * 10 + (size_t)(name[i] - '0');
		}
		if (j >= m->plan->njobs)
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

/* Ownership and modes follow SRC (the kernel enforces them: the mount has
 * default_permissions): a file presents its SRC file's mode, owner and
 * group — a rewritten shard those of the shard it derives from — and the
 * directories those of SRC's directory. Write bits stay as SRC has them;
 * the mount is read-only all the same (EROFS). /.requantfs belongs to the
 * daemon's user alone (status names paths; reading jobs/<j> runs work). */
void rq_mnt_fill_attr(struct rq_mount *m, fuse_ino_t ino, struct stat *st)
{
	struct mnode *n = node(m, ino);
	const struct rq_plan *p = m->plan;
	int64_t t = m->mtime_ns;
	memset(st, 0, sizeof *st);
	st->st_ino = ino;
	st->st_uid = geteuid();
	st->st_gid = getegid();
	st->st_blksize = 1 << 20;
	switch (n->kind) {
	case MN_DIR:
		st->st_mode = S_IFDIR | p->dir_mode;
		st->st_uid = p->dir_uid;
		st->st_gid = p->dir_gid;
		st->st_nlink = 2;
		break;
	case MN_CTL_DIR:
	case MN_CTL_JOBS:
		st->st_mode = S_IFDIR | 0500;
		st->st_nlink = 2;
		break;
	case MN_FILE: {
		const struct rq_vfile *f = &p->files[n->file];
		const struct rq_srcfile *sf = &p->srcs[f->src];
		st->st_mode = S_IFREG | sf->mode;
		st->st_uid = sf->uid;
		st->st_gid = sf->gid;
		st->st_nlink = 1;
		st->st_size = (off_t)f->size;
		st->st_blocks = (blkcnt_t)((f->size + 511) / 512);
		t = sf->mtime_ns;
		break;
	}
	case MN_CTL_STATUS:
	case MN_CTL_JOB:
		st->st_mode = S_IFREG | 0400;
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
	conn->max_read = 1 << 20;    /* must equal -o max_read */
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
	rq_mnt_open_file(req, m, n->file, fi);   /* passthrough or copy path */
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
	struct rq_mount *m = M(req);
	if (ino >= m->ctl_base)
		return rq_mnt_ctl_read(req, m, ino, size, off, fi);
	rq_mnt_read(req, m, size, off, fi);   /* the copy path: mount_read.c */
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct rq_mount *m = M(req);
	struct mnode *n = node(m, ino);
	if (n && n->kind != MN_FILE)
		return rq_mnt_ctl_release(req, m, ino, fi);
	if (n)
		rq_mnt_release_file(m, fi->fh);
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

const struct fuse_lowlevel_ops rq_mnt_ops = {
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
	.read = op_read,
	.release = op_release,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.releasedir = op_releasedir,
	.statfs = op_statfs,
	.access = op_access,
};

