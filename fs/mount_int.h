/* mount_int.h — internals shared by mount.c (inode tree, metadata ops),
 * mount_run.c (open, session loop, close, log), mount_read.c (read path),
 * mount_jobs.c (single-flight jobs, parked reads, prefetch, workers) and
 * mount_ctl.c (control directory, status, SRC monitor). Not included
 * outside fs/mount*.c. */
#ifndef RQ_FS_MOUNT_INT_H
#define RQ_FS_MOUNT_INT_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/types.h>

#include "cache/cache.h"
#include "fs/mount.h"
#include "fs/plan.h"

struct rq_quantizer;

/* ---- inodes ------------------------------------------------------------
 * A fixed tree built at mount time. Numbers are stable for a given plan:
 *   1                  root
 *   2 + i              plan->files[i]
 *   2 + nfiles + k     k-th subdirectory (only when names contain '/')
 *   m->ctl_base + 0    /.requantfs          (lookup only; not listed in /)
 *   m->ctl_base + 1    /.requantfs/status
 *   m->ctl_base + 2    /.requantfs/jobs
 *   m->ctl_base + 3+j  /.requantfs/jobs/<j> */
enum mnode_kind { MN_DIR, MN_FILE, MN_CTL_DIR, MN_CTL_STATUS, MN_CTL_JOBS, MN_CTL_JOB };

struct mnode {
	enum mnode_kind kind;
	const char *name;         /* base name (points into the plan or a literal) */
	fuse_ino_t parent;
	long file;                /* MN_FILE: index into plan->files */
	size_t nchild;
	fuse_ino_t *child;        /* MN_DIR: listed children, sorted by name */
};

/* ---- job outputs -------------------------------------------------------
 * Where a ready job's bytes live. Reference counted so that a reply in
 * progress keeps the bytes alive while the job is evicted or moved. */
struct mout {
	atomic_int refs;
	int fd;                   /* cache entry fd (payload at fd_off), or -1 */
	uint64_t fd_off;
	struct rq_cache_ident id; /* fd: the entry's identity when its bytes were last
	                             verified (rq_cache_recheck serializes access) */
	uint8_t *mem;             /* out_size bytes in memory, or NULL */
};

/* State machine of one job (all fields under m->lock):
 *
 *   IDLE ──read/prefetch──▶ QUEUED ──worker──▶ RUNNING ──ok──▶ READY
 *    ▲                                            │               │
 *    └──────────── failure (waiters get EIO) ─────┘               │
 *    └──────────── evicted (memory-only output dropped, fd LRU) ──┘
 *
 * READY means `out` holds the bytes (cache fd and/or memory). A job in
 * QUEUED/RUNNING has a list of parked reads; they are answered (or re-served)
 * by the thread that finishes the job. */
enum mjob_state { J_IDLE, J_QUEUED, J_RUNNING, J_READY };

struct mjob {
	enum mjob_state state;
	int demand;               /* QUEUED on the demand list (1) or prefetch list (0) */
	int qprev, qnext;         /* queue links (job indices, -1 = none) */
	int lprev, lnext;         /* LRU links of READY jobs (-1 = none) */
	int on_lru;               /* 1 mem LRU, 2 fd LRU, 0 none */
	int disk;                 /* -1 unknown, 0 not in the cache, 1 in the cache */
	struct mout *out;         /* READY: the bytes; else NULL */
	struct mread **wait;      /* parked reads waiting for this job */
	int nwait, capwait;
	int putting;              /* READY from memory, cache put in progress: control
	                             reads (warm) stay parked until it is settled */
	unsigned fails;
	unsigned gen;             /* bumped each time a worker takes the job */
	struct rq_cache_key key;
};

/* A job output a parked read keeps alive until it is answered, so that
 * eviction between a job's completion and the answer cannot starve it. */
struct mhold {
	int job;
	struct mout *o;           /* one reference */
};

/* A parked read (or a control-file read of one job). Fields under m->lock
 * while parked; owned by the answering thread once pending reaches 0. */
struct mread {
	fuse_req_t req;
	long file;                /* plan file index, or -1 for a jobs/<j> read */
	long ctl_job;             /* jobs/<j>: j */
	uint64_t off, size;
	int pending;              /* jobs still awaited */
	int seen;                 /* served once already (walk detection done) */
	int err;                  /* first failure, negative errno */
	int rebuilds;             /* times a changed cache entry sent it back to park */
	struct mhold *held;       /* outputs of the jobs it touches, once ready */
	int nheld, capheld, hcur; /* hcur: where the last lookup hit */
};

struct msrc {
	int fd;                   /* O_RDONLY on plan->srcs[i].path, kept for the mount's life */
	atomic_int changed;       /* sticky: identity differs from the plan's */
	atomic_int invalidated;   /* the kernel cache of dependent files was dropped */
};

/* Counters reported by /.requantfs/status (atomics: updated without m->lock). */
struct mstats {
	atomic_ullong hits, misses, corrupt, jobs_run, jobs_failed, put_failed;
	atomic_ullong quant_in_bytes, reads, read_bytes, parked;
};

/* One quantization worker thread. */
struct mworker {
	struct rq_mount *m;
	pthread_t th;
	int job;                  /* job it runs now, -1 when none (m->lock) */
};

struct rq_mount {
	struct rq_mount_opts o;   /* strings below are owned copies */
	char *mnt, *src, *cache_dir, *fuse_opts, *log_path;
	struct rq_plan *plan;
	struct rq_cache *cache;
	struct rq_quantizer *q;
	struct msrc *srcs;        /* [plan->nsrcs] */
	int *src_fds;             /* [plan->nsrcs] for rq_job_run */
	struct fuse_session *se;
	FILE *logf;
	pthread_mutex_t log_mu;
	double t_start;

	/* inode tree */
	struct mnode *nodes;      /* index = ino - 1 */
	char **dirs;              /* sorted directory prefixes of file names ("a", "a/b") */
	size_t ndirs;
	size_t nnodes;
	fuse_ino_t ctl_base;
	fuse_ino_t *vino;         /* [plan->nfiles] inode of each file */
	uint64_t mtime_ns;        /* root/dirs: SRC directory's mtime */

	/* jobs: every field of jobs[] and the lists below under lock */
	pthread_mutex_t lock;
	pthread_cond_t work;      /* signalled when a job is queued or on stop */
	struct mjob *jobs;        /* [plan->njobs] */
	int dq_head, dq_tail;     /* demand queue */
	int pq_head, pq_tail;     /* prefetch queue */
	uint64_t *walk_end;       /* [nfiles] where the last read of each file ended */
	long *walk_mod;           /* [nfiles] last module index a read of it touched */
	int mlru_head, mlru_tail; /* memory-only READY jobs, least recent at head */
	int flru_head, flru_tail; /* cache-fd READY jobs */
	uint64_t mem_bytes;       /* out_size summed over memory-held outputs */
	int nfd;                  /* open cache fds held by READY jobs */
	int max_fd;               /* bound on nfd (fd LRU) */
	int running, queued;
	int quantizing;           /* jobs inside rq_job_run now */
	double busy_since;        /* when quantizing went 0 -> 1 */
	double busy_s;            /* seconds with at least one job quantizing */
	int stop;
	int warned_put;           /* a put failure was logged */
	int nworkers;
	struct mworker *workers;  /* [nworkers] */
	int stuck;                /* workers that did not stop in time: rq_mount_close
	                             then frees nothing they may use (see jobs_stop) */
	pthread_t monitor;
	int monitor_started;
	pthread_mutex_t mon_mu;
	pthread_cond_t mon_cv;
	int mon_stop;

	struct mstats st;
};

/* mount.c */
extern const struct fuse_lowlevel_ops rq_mnt_ops;
int rq_mnt_tree_build(struct rq_mount *m, struct rq_err *err);
void rq_mnt_tree_free(struct rq_mount *m);
void rq_mnt_fill_attr(struct rq_mount *m, fuse_ino_t ino, struct stat *st);

/* mount_run.c */
double rq_mnt_now(void);

/* mount_read.c */
void rq_mnt_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                 struct fuse_file_info *fi);
/* Serves rd now if every job it needs is READY (replies, frees rd), else
 * parks it on the missing jobs (queuing them). Takes m->lock. */
void rq_mnt_serve(struct rq_mount *m, struct mread *rd);

/* mount_jobs.c */
int rq_mnt_jobs_init(struct rq_mount *m, struct rq_err *err);
int rq_mnt_jobs_start(struct rq_mount *m, struct rq_err *err);
/* Joins workers (waiting at most RQ_MNT_STOP_WAIT_S for all: a worker stuck
 * in a hung file system is logged and left, m->stuck set), answers parked
 * reads EIO. */
void rq_mnt_jobs_stop(struct rq_mount *m);
#define RQ_MNT_STOP_WAIT_S 10
void rq_mnt_jobs_free(struct rq_mount *m);
/* Under m->lock: parks rd on job j (queuing j on demand). */
void rq_mnt_park(struct rq_mount *m, int j, struct mread *rd);
/* Under m->lock: queues up to m->o.prefetch jobs that follow module k in
 * name order (counting those already queued/running/ready). Called when
 * reads walk a file: by offset, or by module name order. */
void rq_mnt_prefetch(struct rq_mount *m, size_t k);
/* Under m->lock: marks a READY job as used now (LRU). */
void rq_mnt_touch(struct rq_mount *m, int j);
void rq_mout_unref(struct mout *o);
/* Under m->lock: job j's cache entry o turned out changed and corrupt: if o
 * is still j's output, j becomes IDLE (a later read rebuilds it). */
void rq_mnt_drop_stale(struct rq_mount *m, int j, struct mout *o);
/* Under m->lock: rd keeps a reference to o (job j's output). -ENOMEM. */
int rq_mnt_hold(struct mread *rd, int j, struct mout *o);
/* The output of job j that rd holds, or NULL. */
struct mout *rq_mnt_held(struct mread *rd, int j);
void rq_mnt_read_free(struct mread *rd);   /* drops its holds, frees */

/* mount_ctl.c */
void rq_mnt_ctl_open(fuse_req_t req, struct rq_mount *m, fuse_ino_t ino, struct fuse_file_info *fi);
void rq_mnt_ctl_read(fuse_req_t req, struct rq_mount *m, fuse_ino_t ino, size_t size, off_t off,
                     struct fuse_file_info *fi);
void rq_mnt_ctl_release(fuse_req_t req, struct rq_mount *m, fuse_ino_t ino,
                        struct fuse_file_info *fi);
/* Checks SRC file s against the plan's identity (fstat of the fd; stat of
 * the path too when `path`). Marks it changed (sticky, logged) and returns
 * -EIO when it differs. */
int rq_mnt_src_check(struct rq_mount *m, int s, int path);
int rq_mnt_monitor_start(struct rq_mount *m, struct rq_err *err);
void rq_mnt_monitor_stop(struct rq_mount *m);
/* Reply text for a finished jobs/<j> read (malloc'd). */
char *rq_mnt_job_line(struct rq_mount *m, long j, int from_disk);

#endif
