/* mount.h — the FUSE daemon that presents a plan's virtual files (DESIGN.md
 * "The mount"): read-only, stable inodes, lazy single-flight quantization
 * into the cache, and a hidden /.requantfs/ control directory.
 *
 * Life of a mount, as the CLI drives it (fork first: no threads before):
 *   rq_mount_open()   checks MNT, builds the plan, opens the cache, the
 *                     quantizer and every SRC file, mounts (nothing served yet)
 *   rq_mount_run()    serves until unmounted or signalled; calls ready() once
 *                     the kernel has answered a request through the mount
 *   rq_mount_close()  stops the workers, answers parked reads, frees. */
#ifndef RQ_FS_MOUNT_H
#define RQ_FS_MOUNT_H

#include <stddef.h>
#include <stdint.h>
#include "quant/quant.h"

struct rq_err;
struct rq_mount;
struct rq_plan;
struct rq_rs;
struct rq_src_entry;

/* Kernel FUSE passthrough (Linux >= 6.9, CAP_SYS_ADMIN): files that exist
 * whole on disk (identical to SRC, or materialized requantized shards) are
 * read by the kernel straight from that file. AUTO uses it when it can and
 * logs why not; ON refuses to mount without it; OFF never asks. */
enum rq_passthrough { RQ_PT_AUTO, RQ_PT_ON, RQ_PT_OFF };

/* What the daemon's log keeps (--log-level); 0 in the options = INFO. A
 * line is written when its level is at or below the mount's. */
/* --remote-verify (rq_mount_opts.remote_verify). */
enum { RQ_RV_FILE, RQ_RV_NONE };

enum rq_log_level { RQ_LOG_DEFAULT, RQ_LOG_ERROR, RQ_LOG_WARN, RQ_LOG_INFO, RQ_LOG_DEBUG };

struct rq_mount_opts {
	const char *src;          /* SRC checkpoint directory; remote: its label,
	                             hf://ORG/NAME@<commit> */
	/* Remote SRC (hf://): the chunk store of the pinned commit (opened in the
	 * daemon, after the fork: it starts threads) and its files, rfiles[i]
	 * being the store's file i. Borrowed: they outlive the mount. rs NULL:
	 * SRC is a local directory. */
	struct rq_rs *rs;
	const struct rq_src_entry *rfiles;
	size_t nrfiles;
	/* Remote SRC: RQ_RV_FILE (0, the default): no byte derived from a SRC
	 * file (served unchanged, a job's BF16 input, a shard's header) leaves
	 * the daemon before that whole file is fetched and its sha256 (else git
	 * blob id) checked; RQ_RV_NONE: bytes served as chunks arrive, checked
	 * only when the file is assembled (a server's wrong bytes can be
	 * served). fs/mount_rver.c. */
	int remote_verify;
	const char *mnt;          /* mount point: an existing empty directory */
	const char *calib;        /* CALIB directory or `calib extract` file */
	const char *cache_dir;    /* cache directory (created if missing) */
	const char *drop_rule;    /* NULL = detect */
	enum rq_recipe recipe;
	int scheme;               /* enum rq_scheme: 0 (RQ_SCHEME_NVFP4) = the Laguna fix */
	int rule_scheme;          /* enum rq_scheme: the Laguna fix's --rule-scheme, 0 = nvfp4 */
	int observer;             /* enum rq_observer: --observer, 0 = minmax */
	const char *const *targets;  /* [ntargets] --targets, NULL = {"Linear"} (a scheme only) */
	size_t ntargets;
	const char *const *ignore;   /* [nignore] --ignore, NULL = {"lm_head"} (a scheme only) */
	size_t nignore;
	const char *device;       /* "auto", "cpu", "cuda", "cuda:N" */
	int threads;              /* CPU quantizer threads, <= 0 = all */
	size_t gpu_mem;           /* bytes, 0 = default (1 GiB) */
	double gpu_idle_s;        /* release the CUDA context after this idle time */
	int workers;              /* quantization jobs in flight at once, <= 0 = 2 */
	int prefetch;             /* jobs queued ahead of a reader, 0 = none */
	int fuse_threads;         /* max FUSE worker threads, <= 0 = 16 */
	uint64_t cache_max;       /* cache size limit in bytes, 0 = unlimited */
	uint64_t mem_max;         /* in-memory job outputs kept when the cache
	                             cannot take them, bytes; 0 = 1 GiB */
	unsigned readahead_kb;    /* kernel readahead of the mount, 0 = kernel default */
	const char *fuse_opts;    /* extra comma-separated -o options, or NULL */
	const char *log_path;     /* append log lines here; NULL = log_stderr or syslog */
	int log_stderr;           /* foreground: log to stderr */
	enum rq_log_level log_level;   /* RQ_LOG_DEFAULT = RQ_LOG_INFO */
	enum rq_passthrough passthrough;  /* kernel passthrough of whole files */
	int debug;                /* libfuse debug output (foreground only) */
};

/* Everything that can be refused is refused here, with a message that says
 * what to do: MNT missing/not empty/a dead mount, SRC invalid, calibration
 * missing (plan errors), cache directory unusable, device unavailable. */
int rq_mount_open(const struct rq_mount_opts *o, struct rq_mount **out, struct rq_err *err);

/* Serves requests (multi-threaded) until the file system is unmounted or the
 * process gets SIGINT/SIGTERM/SIGHUP. ready(ctx, 0, NULL) is called from
 * another thread once the mount answers; ready(ctx, rc, msg) if it never
 * does. Returns 0 after a clean unmount, else -errno. */
int rq_mount_run(struct rq_mount *m, void (*ready)(void *ctx, int rc, const char *msg),
                 void *ctx);
void rq_mount_close(struct rq_mount *m);

/* Writes a log line (the daemon's log sink: file, stderr or syslog) at
 * RQ_LOG_INFO; rq_mount_logl at the given level (dropped when above the
 * mount's --log-level; syslog priorities err, warning, notice, debug). */
void rq_mount_log(struct rq_mount *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void rq_mount_logl(struct rq_mount *m, enum rq_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Whether a line at level would be written (to skip building costly ones). */
int rq_mount_log_on(const struct rq_mount *m, enum rq_log_level level);


/* Control directory at the root of a mount (not listed by readdir):
 *   RQ_CTL_DIR "/status"       JSON snapshot, taken at open
 *   RQ_CTL_DIR "/jobs/<i>"     reading it runs job i (if not ready) and
 *                              returns "<i> ok <modules> <in_bytes> <from>\n"
 *                              once its output is stored in the cache (from
 *                              "cache") or could not be (from "memory"), or
 *                              fails with EIO */
#define RQ_CTL_DIR ".requantfs"

#endif
