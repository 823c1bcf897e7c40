/* mount_pt.c — kernel FUSE passthrough for a libfuse 3.14 session (see
 * mount_pt.h for the contract).
 *
 * How replies are recognised
 *   INIT: the read hook sees every request before libfuse parses it; when
 *   it is a FUSE_INIT it records the request's unique and what the kernel
 *   offers. The writev hook rewrites the one reply whose header carries that
 *   unique. libfuse answers INIT in the thread that read it, and the kernel
 *   sends nothing else before INIT is answered.
 *   OPEN: rq_pt_reply_open arms a thread-local slot (rq_pt, backing id) and
 *   calls fuse_reply_open, which in libfuse 3.14 writes the reply from the
 *   same thread before it returns (send_reply_ok -> fuse_send_msg ->
 *   io->writev). The hook rewrites only a successful two-part reply of
 *   exactly fuse_out_header + fuse_open_out while the slot is armed, then
 *   disarms it. No other thread can see the slot, so clone_fd workers need
 *   no lock and no table of uniques.
 *
 * State machine (pt->state, written with release order, read with acquire):
 *
 *   WAIT ──INIT read: offered, CAP_SYS_ADMIN, not RQ_PT_NO_REQUEST──▶ OFFERED
 *    │                                                               │
 *    └──INIT read: not offered / no capability / not requested──▶ OFF ◀─┤
 *                                  INIT reply: error, writeback cache,  │
 *                                  unexpected layout, write failed ─────┘
 *   OFFERED ──INIT reply rewritten and written──▶ ON ──backing open EPERM──▶ OFF
 *
 * pt->why is written once, before the store of OFF that publishes it.
 *
 * Channels: with clone_fd each worker reads and writes its own cloned
 * /dev/fuse fd; libfuse 3.14 passes that fd to the hooks (ch->fd), so the
 * hooks simply use the fd they are given. The backing ioctls go to a dup of
 * the session fd (any fd of the connection will do; the dup stays valid
 * after fuse_session_unmount closes libfuse's own fd).
 *
 * Splice: libfuse 3.14 advertises FUSE_CAP_SPLICE_WRITE only when the custom
 * io has splice_send, so we give it a plain splice() and READ replies made of
 * fd buffers are still spliced (they never need rewriting). There is no
 * splice_receive: requests must be read into memory for the read hook to see
 * INIT, so FUSE_CAP_SPLICE_READ is not offered (it only serves write_buf). */
#include "fs/mount_pt.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/fuse.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

/* ---- protocol bits newer than Debian 12's <linux/fuse.h> (7.38) ---------
 * From protocol 7.40 (Linux 6.9): FUSE_PASSTHROUGH in the INIT flags,
 * fuse_init_out.max_stack_depth, FOPEN_PASSTHROUGH, fuse_open_out.backing_id
 * and the backing ioctls on /dev/fuse. */
#ifndef FUSE_INIT_EXT
#define FUSE_INIT_EXT (1u << 30)
#endif
#ifndef FUSE_WRITEBACK_CACHE
#define FUSE_WRITEBACK_CACHE (1u << 16)
#endif
#ifndef FUSE_PASSTHROUGH
#define FUSE_PASSTHROUGH (1ull << 37)
#endif
#ifndef FOPEN_PASSTHROUGH
#define FOPEN_PASSTHROUGH (1u << 7)
#endif
#ifndef FUSE_DEV_IOC_MAGIC
#define FUSE_DEV_IOC_MAGIC 229
#endif
#define PT_FLAGS2_PASSTHROUGH ((uint32_t)(FUSE_PASSTHROUGH >> 32))

/* INIT reply as of 7.40: libfuse 3.14 sends all 64 bytes (minor >= 23),
 * with unused[] zeroed; max_stack_depth takes the first unused word. */
struct pt_init_out {
	uint32_t major, minor, max_readahead, flags;
	uint16_t max_background, congestion_threshold;
	uint32_t max_write, time_gran;
	uint16_t max_pages, map_alignment;
	uint32_t flags2;
	uint32_t max_stack_depth;
	uint32_t unused[6];
};
_Static_assert(sizeof(struct pt_init_out) == sizeof(struct fuse_init_out), "init_out size");
_Static_assert(offsetof(struct pt_init_out, flags2) == offsetof(struct fuse_init_out, flags2),
               "init_out flags2");
_Static_assert(offsetof(struct pt_init_out, max_stack_depth) == 36, "max_stack_depth");

/* fuse_open_out: 7.38 `padding` is 7.40 `backing_id`. */
struct pt_open_out {
	uint64_t fh;
	uint32_t open_flags;
	int32_t backing_id;
};
_Static_assert(sizeof(struct pt_open_out) == sizeof(struct fuse_open_out), "open_out size");

struct pt_backing_map {
	int32_t fd;
	uint32_t flags;           /* 0 */
	uint64_t padding;         /* 0 */
};
#define PT_IOC_BACKING_OPEN  _IOW(FUSE_DEV_IOC_MAGIC, 1, struct pt_backing_map)
#define PT_IOC_BACKING_CLOSE _IOW(FUSE_DEV_IOC_MAGIC, 2, uint32_t)
#ifdef FUSE_DEV_IOC_BACKING_OPEN
_Static_assert(PT_IOC_BACKING_OPEN == FUSE_DEV_IOC_BACKING_OPEN, "ioctl number");
#endif

enum { PT_WAIT, PT_OFFERED, PT_ON, PT_OFF };

struct rq_pt {
	int fd;                     /* dup of the session's /dev/fuse fd (ioctls) */
	unsigned flags;             /* RQ_PT_* */
	atomic_int state;           /* PT_* (see the top of the file) */
	atomic_int init_pending;    /* an INIT was read and is not answered yet */
	atomic_ullong init_unique;  /* its unique (valid while init_pending) */
	atomic_uint kernel_minor;
	atomic_int why_set;         /* first writer of `why` wins */
	char why[200];              /* reason for PT_OFF; written before the store */
	atomic_ullong n_pt_opens, n_bopen, n_bclose;
};

/* The io hooks of libfuse 3.14 receive the file system's userdata, not
 * ours: one instance per process. */
static _Atomic(struct rq_pt *) g_pt;

/* Armed by rq_pt_reply_open for the reply it is about to write. */
static __thread struct rq_pt *t_pt;
static __thread int t_backing_id;
static __thread int t_done;

__attribute__((format(printf, 2, 3)))
static void go_off(struct rq_pt *pt, const char *fmt, ...)
{
	int zero = 0;
	if (atomic_compare_exchange_strong(&pt->why_set, &zero, 1)) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(pt->why, sizeof pt->why, fmt, ap);
		va_end(ap);
	}
	atomic_store_explicit(&pt->state, PT_OFF, memory_order_release);
}

static int have_sys_admin(void)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	struct __user_cap_data_struct d[2];
	memset(d, 0, sizeof d);
	if (syscall(SYS_capget, &h, d) != 0)
		return 0;
	return (d[CAP_SYS_ADMIN / 32].effective >> (CAP_SYS_ADMIN % 32)) & 1;
}

int rq_pt_privileged(void)
{
	return have_sys_admin();
}

/* ---- hooks ------------------------------------------------------------- */

static void saw_init(struct rq_pt *pt, const struct fuse_in_header *ih, const void *body,
                     size_t blen)
{
	struct fuse_init_in in;
	memset(&in, 0, sizeof in);
	memcpy(&in, body, blen < sizeof in ? blen : sizeof in);
	if (in.major != 7)
		return;   /* libfuse asks for a second INIT with 7.x */
	atomic_store(&pt->kernel_minor, in.minor);
	if (atomic_load(&pt->state) != PT_WAIT)
		return;   /* a repeated INIT keeps the first decision */
	uint64_t kflags = in.flags;
	if ((in.flags & FUSE_INIT_EXT) && blen >= offsetof(struct fuse_init_in, flags2) + 4)
		kflags |= (uint64_t)in.flags2 << 32;
	if (pt->flags & RQ_PT_NO_REQUEST)
		return go_off(pt, "passthrough not requested (RQ_PT_NO_REQUEST)");
	if (!(kflags & FUSE_PASSTHROUGH))
		return go_off(pt, "the kernel does not offer FUSE_PASSTHROUGH (protocol 7.%u; "
		              "needs 7.40, Linux >= 6.9 with CONFIG_FUSE_PASSTHROUGH)", in.minor);
	if (!have_sys_admin())
		return go_off(pt, "no CAP_SYS_ADMIN: the kernel only lets a privileged server "
		              "register backing files");
	atomic_store(&pt->init_unique, ih->unique);
	atomic_store(&pt->init_pending, 1);
	atomic_store_explicit(&pt->state, PT_OFFERED, memory_order_release);
}

static ssize_t hook_read(int fd, void *buf, size_t len, void *userdata)
{
	ssize_t n = read(fd, buf, len);
	struct rq_pt *pt = atomic_load_explicit(&g_pt, memory_order_acquire);
	if (pt && n >= (ssize_t)sizeof(struct fuse_in_header)) {
		const struct fuse_in_header *ih = buf;
		if (ih->opcode == FUSE_INIT) {
			int e = errno;
			saw_init(pt, ih, ih + 1, (size_t)n - sizeof *ih);
			errno = e;
		}
	}
	return n;
}

/* Writes the INIT reply with FUSE_PASSTHROUGH added, or unchanged. */
static ssize_t send_init(struct rq_pt *pt, int fd, struct iovec *iov, int count)
{
	atomic_store(&pt->init_pending, 0);
	const struct fuse_out_header *oh = iov[0].iov_base;
	if (oh->error) {
		go_off(pt, "INIT failed in the file system (error %u)", (unsigned)-oh->error);
		return writev(fd, iov, count);
	}
	struct pt_init_out o;
	if (count != 2 || iov[1].iov_len != sizeof o) {
		go_off(pt, "unexpected INIT reply layout (%u bytes)",
		       count == 2 ? (unsigned)iov[1].iov_len : 0u);
		return writev(fd, iov, count);
	}
	memcpy(&o, iov[1].iov_base, sizeof o);
	if (!(o.flags & FUSE_INIT_EXT) || o.max_stack_depth != 0) {
		go_off(pt, "unexpected INIT reply (flags 0x%x)", o.flags);
		return writev(fd, iov, count);
	}
	if (o.flags & FUSE_WRITEBACK_CACHE) {
		go_off(pt, "the file system asked for the writeback cache, which excludes "
		       "passthrough");
		return writev(fd, iov, count);
	}
	o.flags2 |= PT_FLAGS2_PASSTHROUGH;
	o.max_stack_depth = 1;     /* backing files on plain (unstacked) file systems */
	struct iovec v[2] = {iov[0], {.iov_base = &o, .iov_len = sizeof o}};
	/* ON before the write: the kernel releases the requests held behind
	 * INIT as soon as it has the reply, and one of them (the mount's
	 * readiness check) asks rq_pt_enabled at once. */
	atomic_store_explicit(&pt->state, PT_ON, memory_order_release);
	ssize_t n = writev(fd, v, 2);
	if (n < 0) {
		int e = errno;
		go_off(pt, "writing the INIT reply failed (errno %u)", (unsigned)e);
		errno = e;
		return n;
	}
	return n;
}

static ssize_t hook_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	struct rq_pt *pt = atomic_load_explicit(&g_pt, memory_order_acquire);
	if (!pt || count < 1 || iov[0].iov_len != sizeof(struct fuse_out_header))
		return writev(fd, iov, count);
	const struct fuse_out_header *oh = iov[0].iov_base;
	if (t_pt == pt && t_backing_id > 0) {
		int id = t_backing_id;
		t_backing_id = 0;     /* one reply per arming, whatever it is */
		if (count == 2 && oh->error == 0 && iov[1].iov_len == sizeof(struct pt_open_out)) {
			struct pt_open_out o;
			memcpy(&o, iov[1].iov_base, sizeof o);
			o.open_flags |= FOPEN_PASSTHROUGH;
			o.backing_id = id;
			struct iovec v[2] = {iov[0], {.iov_base = &o, .iov_len = sizeof o}};
			ssize_t n = writev(fd, v, 2);
			if (n >= 0)
				t_done = 1;
			return n;
		}
		return writev(fd, iov, count);
	}
	if (oh->unique && atomic_load(&pt->init_pending) &&
	    oh->unique == atomic_load(&pt->init_unique))
		return send_init(pt, fd, iov, count);
	return writev(fd, iov, count);
}

static ssize_t hook_splice_send(int fdin, off_t *offin, int fdout, off_t *offout, size_t len,
                                unsigned int flags, void *userdata)
{
	return splice(fdin, (loff_t *)offin, fdout, (loff_t *)offout, len, flags);
}

/* ---- public ------------------------------------------------------------ */

int rq_pt_install_flags(struct fuse_session *se, unsigned flags, struct rq_pt **out,
                        char *why, size_t whylen)
{
	int rc;
	if (why && whylen)
		why[0] = 0;
	int sfd = se ? fuse_session_fd(se) : -1;
	if (sfd < 0) {
		if (why && whylen)
			snprintf(why, whylen, "the session is not mounted (no /dev/fuse fd)");
		return -EBADF;
	}
	struct rq_pt *pt = calloc(1, sizeof *pt);
	if (!pt) {
		if (why && whylen)
			snprintf(why, whylen, "out of memory");
		return -ENOMEM;
	}
	pt->flags = flags;
	atomic_init(&pt->state, PT_WAIT);
	pt->fd = fcntl(sfd, F_DUPFD_CLOEXEC, 3);
	if (pt->fd < 0) {
		rc = -errno;
		if (why && whylen)
			snprintf(why, whylen, "cannot dup the /dev/fuse fd: %s", strerror(-rc));
		goto fail_free;
	}
	struct rq_pt *none = NULL;
	if (!atomic_compare_exchange_strong(&g_pt, &none, pt)) {
		rc = -EBUSY;
		if (why && whylen)
			snprintf(why, whylen, "passthrough hooks already installed in this process");
		goto fail_fd;
	}
	const struct fuse_custom_io io = {
		.writev = hook_writev,
		.read = hook_read,
		.splice_receive = NULL,
		.splice_send = hook_splice_send,
	};
	rc = fuse_session_custom_io(se, &io, sfd);
	if (rc) {
		rc = rc < 0 ? rc : -EIO;
		if (why && whylen)
			snprintf(why, whylen, "fuse_session_custom_io failed: %s", strerror(-rc));
		atomic_store(&g_pt, NULL);
		goto fail_fd;
	}
	*out = pt;
	return 0;
fail_fd:
	close(pt->fd);
fail_free:
	free(pt);
	return rc;
}

int rq_pt_install(struct fuse_session *se, struct rq_pt **out, char *why, size_t whylen)
{
	return rq_pt_install_flags(se, 0, out, why, whylen);
}

void rq_pt_free(struct rq_pt *pt)
{
	if (!pt)
		return;
	struct rq_pt *me = pt;
	atomic_compare_exchange_strong(&g_pt, &me, NULL);
	if (pt->fd >= 0)
		close(pt->fd);
	free(pt);
}

int rq_pt_enabled(const struct rq_pt *pt)
{
	return pt && atomic_load_explicit(&((struct rq_pt *)pt)->state, memory_order_acquire) == PT_ON;
}

const char *rq_pt_why(const struct rq_pt *pt)
{
	if (!pt)
		return "passthrough hooks not installed";
	switch (atomic_load_explicit(&((struct rq_pt *)pt)->state, memory_order_acquire)) {
	case PT_ON:
		return "";
	case PT_OFF:
		return pt->why;
	case PT_OFFERED:
		return "INIT not answered yet";
	default:
		return "no INIT seen yet";
	}
}

int rq_pt_backing_open(struct rq_pt *pt, int fd)
{
	if (!rq_pt_enabled(pt))
		return -EOPNOTSUPP;
	struct pt_backing_map map = {.fd = fd, .flags = 0, .padding = 0};
	int id = ioctl(pt->fd, PT_IOC_BACKING_OPEN, &map);
	if (id < 0) {
		int e = errno;
		if (e == EPERM)
			go_off(pt, "the kernel refused a backing file (EPERM): passthrough was not "
			       "accepted in INIT");
		return -e;
	}
	if (id == 0)
		return -EIO;
	atomic_fetch_add(&pt->n_bopen, 1);
	return id;
}

void rq_pt_backing_close(struct rq_pt *pt, int id)
{
	if (!pt || id <= 0)
		return;
	uint32_t v = (uint32_t)id;
	if (ioctl(pt->fd, PT_IOC_BACKING_CLOSE, &v) == 0)
		atomic_fetch_add(&pt->n_bclose, 1);
}

int rq_pt_reply_open(struct rq_pt *pt, fuse_req_t req, struct fuse_file_info *fi,
                     int backing_id)
{
	if (backing_id <= 0 || !rq_pt_enabled(pt))
		return fuse_reply_open(req, fi);
	fi->keep_cache = 0;
	fi->direct_io = 0;
	fi->nonseekable = 0;
	fi->cache_readdir = 0;
	t_pt = pt;
	t_backing_id = backing_id;
	t_done = 0;
	int rc = fuse_reply_open(req, fi);
	t_backing_id = 0;
	t_pt = NULL;
	if (t_done)
		atomic_fetch_add(&pt->n_pt_opens, 1);
	return rc;
}

void rq_pt_stats(const struct rq_pt *pt, struct rq_pt_stats *st)
{
	memset(st, 0, sizeof *st);
	if (!pt)
		return;
	struct rq_pt *p = (struct rq_pt *)pt;
	st->pt_opens = atomic_load(&p->n_pt_opens);
	st->backing_open = atomic_load(&p->n_bopen);
	st->backing_close = atomic_load(&p->n_bclose);
	st->kernel_minor = atomic_load(&p->kernel_minor);
}
