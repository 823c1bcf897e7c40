/* mount_pt.h — kernel FUSE passthrough for a libfuse 3.14 low-level session.
 *
 * libfuse 3.14 has no passthrough API, so this module sits between libfuse
 * and /dev/fuse (fuse_session_custom_io) and edits two kinds of reply on
 * their way to the kernel:
 *   - the INIT reply: adds FUSE_PASSTHROUGH (flags2 bit 5) and
 *     max_stack_depth = 1 when the kernel offered it, we hold CAP_SYS_ADMIN
 *     and the reply does not ask for the writeback cache;
 *   - an OPEN reply sent through rq_pt_reply_open(): adds FOPEN_PASSTHROUGH
 *     and the backing id (fuse_open_out.padding in protocol 7.38, called
 *     backing_id from 7.40 on).
 * Every other reply is written unchanged. Reads of a passthrough file then
 * never reach the daemon: the kernel reads (and mmaps) the backing file.
 *
 * One rq_pt per process (the io hooks of libfuse 3.14 carry no pointer of
 * ours); a second rq_pt_install fails with -EBUSY until rq_pt_free.
 *
 * Order of calls:
 *   se = fuse_session_new(...); fuse_session_mount(se, mnt);
 *   rq_pt_install(se, &pt, why, sizeof why);      before any loop runs
 *   fuse_session_loop_mt(se, cfg)                  clone_fd 0 or 1
 *     op_open: if (rq_pt_enabled(pt)) rq_pt_reply_open(pt, req, fi, id)
 *   fuse_session_unmount(se); fuse_session_destroy(se); rq_pt_free(pt);
 *
 * Kernel rules the caller must keep (fs/fuse/iomode.c; a breach makes the
 * user's open() fail with EIO, the daemon only sees the RELEASE that follows):
 *   - an inode open in cached mode (any open replied without passthrough and
 *     without direct_io) cannot be opened in passthrough mode (ETXTBSY), and
 *     an inode open in passthrough mode refuses opens without it (EINVAL);
 *   - while an inode has passthrough opens, every new passthrough open of it
 *     must name the same backing id (another id, even for the same file:
 *     EBUSY). Keep one id per inode and reuse it.
 *   - passthrough opens carry no keep_cache / nonseekable / cache_readdir.
 *   - the backing file's file system must not be stacked (overlayfs: ELOOP).
 */
#ifndef RQ_FS_MOUNT_PT_H
#define RQ_FS_MOUNT_PT_H

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 314
#endif
#include <fuse_lowlevel.h>

#include <stddef.h>
#include <stdint.h>

struct rq_pt;

/* Flags for rq_pt_install_flags. */
enum {
	RQ_PT_NO_REQUEST = 1,   /* install the hooks but never ask for passthrough
	                           (the copy-path fallback, end to end) */
};

/* Installs the io hooks on a mounted session (after fuse_session_mount,
 * before the session loop). 0, or -errno with a sentence in `why`:
 * -EBUSY another rq_pt lives in this process, -EBADF not mounted, -ENOMEM. */
int rq_pt_install(struct fuse_session *se, struct rq_pt **out, char *why, size_t whylen);
int rq_pt_install_flags(struct fuse_session *se, unsigned flags, struct rq_pt **out,
                        char *why, size_t whylen);

/* Does this process hold CAP_SYS_ADMIN (which the kernel demands of a
 * passthrough server)? */
int rq_pt_privileged(void);

/* After fuse_session_destroy (the session calls the hooks until then).
 * Accepts NULL. Backing ids still open are dropped by the kernel with the
 * connection. */
void rq_pt_free(struct rq_pt *pt);

/* 1 when the INIT reply carried FUSE_PASSTHROUGH (and no backing open has
 * been refused with EPERM since), else 0. Final once INIT has been answered,
 * i.e. from any operation other than init. */
int rq_pt_enabled(const struct rq_pt *pt);
/* Why passthrough is off ("" when on). Stable text, for a log line. */
const char *rq_pt_why(const struct rq_pt *pt);

/* Registers fd (any open regular file; the kernel takes its own reference,
 * the caller may close fd afterwards) as a backing file: id > 0 or -errno
 * (-EOPNOTSUPP passthrough off, -EPERM, -ELOOP stacked fs, -EBADF, ...). */
int rq_pt_backing_open(struct rq_pt *pt, int fd);
/* Drops the id (opens set up with it keep the file). Ignores id <= 0. */
void rq_pt_backing_close(struct rq_pt *pt, int id);

/* Replies to an OPEN as a passthrough open of backing_id: clears keep_cache,
 * direct_io, nonseekable and cache_readdir in fi, and calls fuse_reply_open.
 * Returns fuse_reply_open's result. backing_id <= 0 or passthrough off: a
 * plain fuse_reply_open (with fi as given). Any thread, any channel. */
int rq_pt_reply_open(struct rq_pt *pt, fuse_req_t req, struct fuse_file_info *fi,
                     int backing_id);

/* Counters (monotonic, thread-safe reads). */
struct rq_pt_stats {
	uint64_t pt_opens;        /* OPEN replies rewritten to passthrough */
	uint64_t backing_open;    /* ids handed out */
	uint64_t backing_close;
	uint32_t kernel_minor;    /* protocol minor of the kernel's INIT (0: not yet) */
};
void rq_pt_stats(const struct rq_pt *pt, struct rq_pt_stats *st);

#endif
