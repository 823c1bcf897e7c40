/* pt_probe — a tiny low-level FUSE file system that presents real files,
 * opened through kernel passthrough (fs/mount_pt.[ch]) when it can and
 * through the copy path (READ requests answered from the file) otherwise.
 * It exists to test mount_pt against the running kernel
 * (tests/mount/test_passthrough_probe.py).
 *
 *   pt_probe [--no-pt] [--no-clone] [--threads N] [-d] MNT MODE:NAME:PATH...
 *
 * MODE   pt     passthrough (one backing id per inode, kept for the mount's
 *               life), copy path when passthrough is off
 *        copy   always the copy path (keep_cache 0: each open drops the
 *               inode's page cache, so reads reach the daemon)
 *        mixed  like pt, but an open with O_NOATIME is replied in cached
 *               mode (copy path): ETXTBSY / EINVAL rules of the kernel
 *        fresh  passthrough with a new backing id for every open, closed
 *               at its RELEASE: EBUSY rule of the kernel
 *        early  like fresh, but the id is closed right after the reply:
 *               races with the kernel's lookup of the id (open may fail EIO)
 * --no-pt      install the hooks but never request passthrough
 * --no-clone   multi-threaded loop without clone_fd
 *
 * /.stats (direct_io, never cached) reports what the daemon saw:
 *   enabled 0|1, why, kernel_minor, splice_write, pt_opens, and one line per
 *   file: "file NAME reads R bytes B pt_opens P copy_opens C fails F
 *   releases X backing_err E". R counts READ requests: a file read only
 *   through passthrough has R == 0. */
#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/mount_pt.h"

enum pmode { PM_PT, PM_COPY, PM_MIXED, PM_FRESH, PM_EARLY };

struct pfile {
	enum pmode mode;
	const char *name;
	const char *path;
	int fd;                    /* O_RDONLY on path, kept for the mount's life */
	int backing_id;            /* PM_PT/PM_MIXED: lazily registered, under lock */
	int backing_err;           /* last rq_pt_backing_open failure (negative errno) */
	atomic_ullong reads, bytes, pt_opens, copy_opens, fails, releases;
};

static struct {
	struct rq_pt *pt;
	struct pfile *files;
	int nfiles;
	int splice_write;
	pthread_mutex_t lock;
} P = {.lock = PTHREAD_MUTEX_INITIALIZER};

#define INO_STATS 2
#define INO_FILE0 3

static const double TTL = 1.0;

static struct pfile *file_of(fuse_ino_t ino)
{
	if (ino < INO_FILE0 || ino >= (fuse_ino_t)(INO_FILE0 + P.nfiles))
		return NULL;
	return &P.files[ino - INO_FILE0];
}

static char *stats_text(size_t *len)
{
	struct rq_pt_stats s;
	rq_pt_stats(P.pt, &s);
	size_t cap = 512 + (size_t)P.nfiles * 256;
	char *b = malloc(cap);
	if (!b)
		return NULL;
	size_t n = (size_t)snprintf(b, cap,
	                            "enabled %d\nwhy %s\nkernel_minor %u\nsplice_write %d\n"
	                            "pt_opens %llu\nbacking_open %llu\nbacking_close %llu\n",
	                            rq_pt_enabled(P.pt), rq_pt_why(P.pt), s.kernel_minor,
	                            P.splice_write, (unsigned long long)s.pt_opens,
	                            (unsigned long long)s.backing_open,
	                            (unsigned long long)s.backing_close);
	for (int i = 0; i < P.nfiles && n < cap; i++) {
		struct pfile *f = &P.files[i];
		n += (size_t)snprintf(b + n, cap - n,
		                      "file %s reads %llu bytes %llu pt_opens %llu copy_opens %llu "
		                      "fails %llu releases %llu backing_err %d\n", f->name,
		                      (unsigned long long)f->reads, (unsigned long long)f->bytes,
		                      (unsigned long long)f->pt_opens,
		                      (unsigned long long)f->copy_opens,
		                      (unsigned long long)f->fails,
		                      (unsigned long long)f->releases, f->backing_err);
	}
	*len = n < cap ? n : cap - 1;
	return b;
}

static void fill_attr(fuse_ino_t ino, struct stat *st)
{
	memset(st, 0, sizeof *st);
	st->st_ino = ino;
	if (ino == FUSE_ROOT_ID) {
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
		return;
	}
	st->st_mode = S_IFREG | 0444;
	st->st_nlink = 1;
	struct pfile *f = file_of(ino);
	struct stat b;
	if (f && fstat(f->fd, &b) == 0) {
		st->st_size = b.st_size;
		st->st_mtim = b.st_mtim;
		st->st_ctim = b.st_ctim;
		st->st_blocks = b.st_blocks;
	}
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	if (conn->capable & FUSE_CAP_SPLICE_WRITE) {
		conn->want |= FUSE_CAP_SPLICE_WRITE;
		P.splice_write = 1;
	}
	conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
	conn->max_read = 1 << 20;
	conn->max_background = 64;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	memset(&e, 0, sizeof e);
	if (parent != FUSE_ROOT_ID)
		return (void)fuse_reply_err(req, ENOENT);
	fuse_ino_t ino = 0;
	if (!strcmp(name, ".stats"))
		ino = INO_STATS;
	for (int i = 0; !ino && i < P.nfiles; i++)
		if (!strcmp(name, P.files[i].name))
			ino = INO_FILE0 + (fuse_ino_t)i;
	if (!ino)
		return (void)fuse_reply_err(req, ENOENT);
	e.ino = ino;
	e.generation = 1;
	fill_attr(ino, &e.attr);
	e.attr_timeout = TTL;
	e.entry_timeout = TTL;
	fuse_reply_entry(req, &e);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (ino != FUSE_ROOT_ID && ino != INO_STATS && !file_of(ino))
		return (void)fuse_reply_err(req, ENOENT);
	struct stat st;
	fill_attr(ino, &st);
	fuse_reply_attr(req, &st, TTL);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
	if (ino != FUSE_ROOT_ID)
		return (void)fuse_reply_err(req, ENOTDIR);
	char *buf = calloc(1, size);
	if (!buf)
		return (void)fuse_reply_err(req, ENOMEM);
	size_t used = 0;
	for (off_t i = off; i < 3 + P.nfiles; i++) {
		struct stat st;
		memset(&st, 0, sizeof st);
		const char *nm = i == 0 ? "." : i == 1 ? ".." : i == 2 ? ".stats"
		                                                       : P.files[i - 3].name;
		st.st_ino = i < 2 ? FUSE_ROOT_ID : i == 2 ? INO_STATS : (fuse_ino_t)(INO_FILE0 + i - 3);
		st.st_mode = i < 2 ? S_IFDIR : S_IFREG;
		size_t need = fuse_add_direntry(req, buf + used, size - used, nm, &st, i + 1);
		if (need > size - used)
			break;
		used += need;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

/* The inode's kept backing id (registered on first use), or -errno. */
static int kept_id(struct pfile *f)
{
	pthread_mutex_lock(&P.lock);
	if (f->backing_id <= 0) {
		int id = rq_pt_backing_open(P.pt, f->fd);
		if (id > 0)
			f->backing_id = id;
		else
			f->backing_err = id;
	}
	int id = f->backing_id > 0 ? f->backing_id : f->backing_err;
	pthread_mutex_unlock(&P.lock);
	return id;
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if ((fi->flags & O_ACCMODE) != O_RDONLY)
		return (void)fuse_reply_err(req, EROFS);
	if (ino == INO_STATS) {
		fi->direct_io = 1;
		fi->fh = 0;
		return (void)fuse_reply_open(req, fi);
	}
	struct pfile *f = file_of(ino);
	if (!f)
		return (void)fuse_reply_err(req, ino == FUSE_ROOT_ID ? EISDIR : ENOENT);
	fi->fh = (uint64_t)(ino - INO_FILE0);   /* PM_FRESH: backing id << 32 */
	int want_pt = f->mode != PM_COPY && rq_pt_enabled(P.pt);
	if (f->mode == PM_MIXED && (fi->flags & O_NOATIME))
		want_pt = 0;
	if (want_pt && (f->mode == PM_FRESH || f->mode == PM_EARLY)) {
		int id = rq_pt_backing_open(P.pt, f->fd);
		if (id > 0) {
			/* The id must outlive the reply: the kernel looks it up in the
			 * opener's context after our write returns. Closed at RELEASE
			 * (PM_EARLY closes it at once, to show the race). */
			atomic_fetch_add(&f->pt_opens, 1);
			fi->fh |= (uint64_t)id << 32;
			rq_pt_reply_open(P.pt, req, fi, id);
			if (f->mode == PM_EARLY)
				rq_pt_backing_close(P.pt, id);
			return;
		}
		f->backing_err = id;
	} else if (want_pt) {
		int id = kept_id(f);
		if (id > 0) {
			atomic_fetch_add(&f->pt_opens, 1);
			rq_pt_reply_open(P.pt, req, fi, id);
			return;
		}
	}
	/* copy path: page cache of the FUSE inode, dropped at each open */
	atomic_fetch_add(&f->copy_opens, 1);
	fi->keep_cache = 0;
	fi->direct_io = 0;
	fuse_reply_open(req, fi);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
	if (ino == INO_STATS) {
		size_t len;
		char *t = stats_text(&len);
		if (!t)
			return (void)fuse_reply_err(req, ENOMEM);
		if ((size_t)off >= len)
			fuse_reply_buf(req, NULL, 0);
		else
			fuse_reply_buf(req, t + off, len - (size_t)off < size ? len - (size_t)off : size);
		free(t);
		return;
	}
	struct pfile *f = file_of(ino);
	if (!f)
		return (void)fuse_reply_err(req, EBADF);
	atomic_fetch_add(&f->reads, 1);
	atomic_fetch_add(&f->bytes, size);
	/* an fd buffer: spliced into /dev/fuse when the kernel allows it */
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(size);
	bv.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	bv.buf[0].fd = f->fd;
	bv.buf[0].pos = off;
	fuse_reply_data(req, &bv, FUSE_BUF_SPLICE_MOVE);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct pfile *f = file_of(ino);
	if (f) {
		atomic_fetch_add(&f->releases, 1);
		if (f->mode == PM_FRESH)
			rq_pt_backing_close(P.pt, (int)(fi->fh >> 32));
	}
	fuse_reply_err(req, 0);
}

static const struct fuse_lowlevel_ops ops = {
	.init = op_init,
	.lookup = op_lookup,
	.getattr = op_getattr,
	.readdir = op_readdir,
	.open = op_open,
	.read = op_read,
	.release = op_release,
};

static int parse_spec(char *s, struct pfile *f)
{
	char *a = strchr(s, ':');
	char *b = a ? strchr(a + 1, ':') : NULL;
	if (!b)
		return -1;
	*a = *b = 0;
	if (!strcmp(s, "pt"))
		f->mode = PM_PT;
	else if (!strcmp(s, "copy"))
		f->mode = PM_COPY;
	else if (!strcmp(s, "mixed"))
		f->mode = PM_MIXED;
	else if (!strcmp(s, "fresh"))
		f->mode = PM_FRESH;
	else if (!strcmp(s, "early"))
		f->mode = PM_EARLY;
	else
		return -1;
	f->name = a + 1;
	f->path = b + 1;
	f->fd = open(f->path, O_RDONLY | O_CLOEXEC);
	return f->fd < 0 ? -2 : 0;
}

int main(int argc, char **argv)
{
	int no_pt = 0, clone = 1, threads = 8, debug = 0, i = 1;
	for (; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "--no-pt"))
			no_pt = 1;
		else if (!strcmp(argv[i], "--no-clone"))
			clone = 0;
		else if (!strcmp(argv[i], "-d"))
			debug = 1;
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			threads = atoi(argv[++i]);
		else
			break;
	}
	if (argc - i < 2) {
		fprintf(stderr, "usage: pt_probe [--no-pt] [--no-clone] [--threads N] [-d] MNT "
		        "MODE:NAME:PATH...\n");
		return 2;
	}
	const char *mnt = argv[i++];
	P.nfiles = argc - i;
	P.files = calloc((size_t)P.nfiles, sizeof *P.files);
	if (!P.files)
		return 1;
	for (int k = 0; k < P.nfiles; k++) {
		int r = parse_spec(argv[i + k], &P.files[k]);
		if (r) {
			fprintf(stderr, "pt_probe: %s: %s\n", argv[i + k],
			        r == -1 ? "want MODE:NAME:PATH (MODE pt|copy|mixed|fresh|early)"
			                : strerror(errno));
			return 2;
		}
	}

	char *fargv[] = {"pt_probe", "-o", "ro,fsname=pt_probe,max_read=1048576", NULL, NULL};
	int fargc = 3;
	if (debug)
		fargv[fargc++] = "-d";
	struct fuse_args args = FUSE_ARGS_INIT(fargc, fargv);
	struct fuse_session *se = fuse_session_new(&args, &ops, sizeof ops, NULL);
	fuse_opt_free_args(&args);
	if (!se)
		return 1;
	int rc = 1;
	if (fuse_set_signal_handlers(se))
		goto out_destroy;
	if (fuse_session_mount(se, mnt)) {
		fprintf(stderr, "pt_probe: cannot mount on %s\n", mnt);
		goto out_signals;
	}
	char why[256];
	int prc = rq_pt_install_flags(se, no_pt ? RQ_PT_NO_REQUEST : 0, &P.pt, why, sizeof why);
	if (prc)
		fprintf(stderr, "pt_probe: passthrough hooks not installed: %s\n", why);

	struct fuse_loop_config *cfg = fuse_loop_cfg_create();
	if (!cfg)
		goto out_unmount;
	fuse_loop_cfg_set_max_threads(cfg, (unsigned)threads);
	fuse_loop_cfg_set_clone_fd(cfg, (unsigned)clone);
	rc = fuse_session_loop_mt(se, cfg) < 0 ? 1 : 0;
	fuse_loop_cfg_destroy(cfg);

	size_t len;
	char *t = stats_text(&len);
	if (t) {
		fprintf(stderr, "%.*s", (int)len, t);
		free(t);
	}
out_unmount:
	fuse_session_unmount(se);
out_signals:
	fuse_remove_signal_handlers(se);
out_destroy:
	fuse_session_destroy(se);
	rq_pt_free(P.pt);
	for (int k = 0; k < P.nfiles; k++)
		close(P.files[k].fd);
	free(P.files);
	return rc;
}
