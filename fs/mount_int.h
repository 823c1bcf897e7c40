/* mount_int.h — internals shared by the daemon's files (fs/mount*.c; their
 * order is written at the top of mount.c). Not included outside fs/. */
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
#include "plan/plan.h"

struct rq_quantizer;
struct rq_pt;

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

/* The states of a job: the diagram is at the top of mount_jobs.c. PUTTING
 * and READY both hold the bytes (rq_job_has_bytes). */
enum mjob_state { J_IDLE, J_QUEUED, J_RUNNING, J_PUTTING, J_READY };

struct mjob {
	enum mjob_state state;
	int demand;               /* QUEUED on the demand list (1) or prefetch list (0) */
	int qprev, qnext;         /* queue links (job indices, -1 = none) */
	int lprev, lnext;         /* LRU links of READY jobs (-1 = none) */
	int on_lru;               /* 1 mem LRU, 2 fd LRU, 0 none */
	int disk;                 /* -1 unknown, 0 not in the cache, 1 in the cache */
	struct mout *out;         /* PUTTING/READY: the bytes; else NULL */
	struct mread **wait;      /* parked reads waiting for this job */
	int nwait, capwait;
	unsigned fails;
	unsigned gen;             /* bumped each time a worker takes the job */
	struct rq_cache_key key;
	int nvf;                  /* files made from its output (1, or 2 for a pair split
	                             across shards) */
	int vf[2];                /* their plan file indices (constant) */
};

static inline int rq_job_has_bytes(const struct mjob *J)
{
	return J->state == J_PUTTING || J->state == J_READY;
}

/* A job output a parked read keeps alive until it is answered, so that
 * eviction between a job's completion and the answer cannot starve it. */
struct mhold {
	int job;
	struct mout *o;           /* one reference */
};

/* A parked read (or a control-file read of one job). Fields under m->lock
 * while parked; owned by the answering thread once pending reaches 0.
 * Its FUSE request is answered once: by that thread, or by FUSE_INTERRUPT
 * (EINTR) while it waits -- whoever wins `answered` (mount_out.c). */
struct mread {
	/* how it is answered once nothing holds it back: rq_mnt_serve (a data
	 * read) or rq_mnt_ctl_serve (a jobs/<j> read) */
	void (*serve)(struct rq_mount *m, struct mread *rd);
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
	atomic_int answered;      /* 1 once req is answered or about to be (a reply
	                             claimed it, or an interrupt answered EINTR) */
	int watched;              /* an interrupt callback is registered (rq_mnt_read_watch) */
};

/* A remote SRC file under --remote-verify file (mount_rver.c has the state
 * diagram). Under m->lock but `verified`, also read without it. */
enum mrv_state { RV_NONE, RV_FETCHING, RV_LOCAL, RV_BAD };

struct mrv {
	enum mrv_state state;
	atomic_int verified;      /* sticky: the whole file was checked once and its head
	                             matched the plan's: bytes the plan holds from it
	                             (a shard's header) may be served */
	struct mout *out;         /* LOCAL: the verified copy's fd (one reference) */
	unsigned gen;             /* bumped when a fetch of it ends */
	struct mread **wait;      /* reads parked until it is LOCAL/verified */
	int nwait, capwait;
};

/* A read's hold on remote SRC file r's verified copy (mhold.job < 0). */
#define RQ_RV_KEY(r) (-2 - (int)(r))

/* A task of the remote pool: a whole-file fetch (r >= 0) or a read (rd). */
struct rvtask {
	struct rvtask *next;
	long r;
	struct mread *rd;
};

struct msrc {
	int fd;                   /* O_RDONLY on plan->srcs[i].path, kept for the mount's life;
	                             -1 for a remote SRC */
	atomic_int rfd;           /* remote SRC: its assembled, verified file in the store
	                             (mount_remote.c), opened on first use; -1 until then */
	atomic_int changed;       /* sticky: identity differs from the plan's */
	atomic_int invalidated;   /* the kernel cache of dependent files was dropped */
};

/* ---- how a file is served ------------------------------------------------
 * Kernel passthrough (mount_pt.h) serves a file straight from one backing
 * file when it exists whole on disk: a file identical to its SRC file (from
 * the first open), or a requantized shard once materialized (mount_mat.c).
 * The kernel's rule: an inode is open either in cached mode (our copy path)
 * or in passthrough mode, never both, and every passthrough open of it uses
 * one backing file. So a new open goes the way the inode's open files go,
 * and only an inode with no opens changes mode or backing. Counts drop on
 * RELEASE, which comes after the kernel's own bookkeeping: never too low.
 *
 * Materialization of a requantized shard (fields under m->lock):
 *
 *   NONE ──every job of it cached, or a file of it found at mount──▶ QUEUED
 *   QUEUED ──materializer thread──▶ RUNNING ──written or verified──▶ READY
 *   RUNNING ──a job not cached / failure (logged)──▶ NONE (queued again when
 *            a job of it is cached again)
 *   READY ──the file changed after verification, or SRC changed──▶ NONE
 *
 * A READY file is read from its one file, by passthrough or by the copy
 * path; its jobs' cache entries are dropped (the bytes are not kept twice)
 * and its jobs are never run while it stays READY. */
enum mmat { MAT_NONE, MAT_QUEUED, MAT_RUNNING, MAT_READY };

struct mfile {
	int pt_opens, cached_opens; /* opens replied and not yet released, by mode */
	int pt_id;                /* backing id of its passthrough opens (> 0), 0 none */
	struct mout *pt_out;      /* the materialized file pt_id was made from (a ref),
	                             NULL when pt_id is the SRC file's */
	int pt_err;               /* -errno: the kernel refused a backing: copy path */
	enum mmat mat;
	int verifying;            /* QUEUED/RUNNING to verify a file found in the cache:
	                             its reads (and jobs/<j> reads of its jobs) park on
	                             the file meanwhile, rather than re-quantizing */
	struct mread **wait;      /* reads parked on the verification */
	int nwait, capwait;
	int mat_next;             /* materializer queue link (-1 none) */
	unsigned mat_fails;
	struct mout *mat_out;     /* READY: the materialized file (fd, identity; a ref) */
	struct rq_cache_key mat_key;
	int njobs;                /* > 0: a requantized shard made from these jobs */
	int *jobs;                /* [njobs] distinct, in file order */
};

/* fi->fh of a plan file: its index, with this bit on a passthrough open. */
#define RQ_FH_PT (1ull << 62)

/* Counters reported by /.requantfs/status (atomics: updated without m->lock). */
struct mstats {
	atomic_ullong hits, misses, corrupt, jobs_run, jobs_failed, put_failed;
	atomic_ullong quant_in_bytes, reads, read_bytes, parked;
	atomic_ullong parked_hit;  /* parked reads a worker then answered from the cache:
	                              a cache hit is looked up by a worker, never in a FUSE
	                              thread (a hung cache file system must not hang them) */
	atomic_ullong pt_opens, cached_opens, mat_written, mat_verified, mat_failed, mat_bytes;
	atomic_ullong remote_failed;  /* remote SRC reads answered EIO */
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
	/* passthrough and materialized files (mount_mat.c), under lock */
	struct rq_pt *pt;         /* NULL: --passthrough off, or the hooks failed */
	char pt_note[240];        /* why passthrough is off (set once, before ready) */
	struct mfile *files;      /* [plan->nfiles] */
	int mat_head, mat_tail;   /* materializer queue (file indices) */
	int mat_on;               /* the materializer runs */
	int mat_write;            /* it writes new files (passthrough is on); else it only
	                             verifies and uses the files the cache already holds */
	int mat_stop;
	int mat_busy;             /* files being written or verified now, until their job
	                             entries are dropped (status: files_materializing) */
	atomic_llong last_busy_ns;/* CLOCK_MONOTONIC ns of the last copy-path read or job:
	                             new files are written once the mount idles */
	pthread_t mat_thread;
	pthread_cond_t mat_cv;
	pthread_cond_t mat_done;  /* broadcast when the materializer finishes a file */
	int mat_started;
	/* a job's output was published to the cache (under lock); set by
	 * mount_mat.c so that mount_jobs.c need not know who listens */
	void (*on_job_cached)(struct rq_mount *m, int j);

	/* remote SRC (o.rs != NULL): the plan's and jobs' reader (mount_remote.c) */
	struct rq_src_reader rreader;
	atomic_int rs_nokeep;     /* 1 once the plan is built: what the reader reads then
	                             is a job's BF16 input, never stored (RQ_RS_NOKEEP) */
	uint8_t **rheads;         /* [nrfiles] while the plan is built: a shard's first 8 + N
	                             bytes (its header), or NULL; mount_remote.c */
	uint64_t *rhead_len;
	uint8_t (*rhsha)[32];     /* [nrfiles] once planned: SHA-256 of the head the plan
	                             used (its first rhlen[i] bytes; rhlen 0: none); */
	uint64_t *rhlen;          /* mount_remote.c */
	uint8_t *rwhole;          /* [nrfiles] 1: the plan read it whole, verified */
	atomic_uchar *rgone;      /* [nrfiles] 1: its failure for good (rq_rs_failed) was
	                             logged: later failed reads of it log nothing */
	/* --remote-verify file (mount_rver.c): rv [nrfiles] under lock, NULL in
	 * none mode or for a local SRC; rv_cv (with lock): a fetch ended, or
	 * rv_stop. The remote pool (both modes): its queue under rp_mu. */
	struct mrv *rv;
	pthread_cond_t rv_cv;
	int rv_stop;
	int rv_inited;
	pthread_mutex_t rp_mu;
	pthread_cond_t rp_cv;
	struct rvtask *rp_head, *rp_tail;   /* rp_mu */
	int rp_stop;              /* rp_mu */
	int rp_n;                 /* threads started */
	pthread_t *rp_th;
	uint8_t **rkept;          /* [nrfiles] once planned: [chunk] 1 when the chunk holds
	                             bytes presented unchanged (it is fetched whole and
	                             stored anyway), or NULL; mount_remote.c */

	pthread_t monitor;
	int monitor_started;
	pthread_mutex_t mon_mu;
	pthread_cond_t mon_cv;
	int mon_stop;

	struct mstats st;
};

/* ---- who calls whom ------------------------------------------------------
 * Declarations by file, in the daemon's order (top of mount.c): each file
 * calls only files listed after it. */

/* mount_run.c (lifecycle: open, session loop, SRC monitor, close) calls
 * everything below; its API is mount.h. */

/* mount.c: FUSE operations and the inode tree */
extern const struct fuse_lowlevel_ops rq_mnt_ops;
int rq_mnt_tree_build(struct rq_mount *m, struct rq_err *err);
void rq_mnt_tree_free(struct rq_mount *m);
void rq_mnt_fill_attr(struct rq_mount *m, fuse_ino_t ino, struct stat *st);

/* mount_ctl.c: the control edge (/.requantfs/), reached only from mount.c */
/* Answers a jobs/<j> read once job j is READY (its output stored in the
 * cache, or known not to fit) or covered by materialized files; else parks
 * it. Takes m->lock. (Reached from below only through mread.serve.) */
void rq_mnt_ctl_serve(struct rq_mount *m, struct mread *rd);
void rq_mnt_ctl_open(fuse_req_t req, struct rq_mount *m, fuse_ino_t ino, struct fuse_file_info *fi);
void rq_mnt_ctl_read(fuse_req_t req, struct rq_mount *m, fuse_ino_t ino, size_t size, off_t off,
                     struct fuse_file_info *fi);
void rq_mnt_ctl_release(fuse_req_t req, struct rq_mount *m, fuse_ino_t ino,
                        struct fuse_file_info *fi);
/* Reply text for a finished jobs/<j> read (malloc'd). */
char *rq_mnt_job_line(struct rq_mount *m, long j, int from_disk);

/* mount_open.c: the open's mode */
/* op_open of plan file i (SRC identity already checked): replies. */
void rq_mnt_open_file(fuse_req_t req, struct rq_mount *m, long i, struct fuse_file_info *fi);
void rq_mnt_release_file(struct rq_mount *m, uint64_t fh);

/* mount_read.c: a copy-path read maps its range onto segments */
void rq_mnt_read(fuse_req_t req, struct rq_mount *m, size_t size, off_t off,
                 struct fuse_file_info *fi);
/* Serves rd now if every job it needs is READY (replies, frees rd), else
 * parks it on the missing jobs (queuing them). Takes m->lock. */
void rq_mnt_serve(struct rq_mount *m, struct mread *rd);

/* mount_seg.c: a segment's source, the seam under the read path (the kinds
 * and their table are at the top of mount_seg.c) */
/* 1 when the source of g may have to park a read (acquire it under lock). */
int rq_mnt_seg_may_park(const struct rq_mount *m, const struct rq_seg *g);
/* 1 when the bytes of g are remote and not here yet (--remote-verify none):
 * the read then runs on the remote pool, not a FUSE thread. */
int rq_mnt_seg_slow(struct rq_mount *m, const struct rq_seg *g);
/* 1 when the source of g may copy its bytes into the read's buffer (dst of
 * rq_mnt_seg_bytes): the read path then allocates one. */
int rq_mnt_seg_copies(const struct rq_mount *m, const struct rq_seg *g);
/* Under m->lock: may the bytes of [d, ...) of g be had now for rd? 0: yes
 * (rd holds what keeps them alive); 1: rd parked on what produces them;
 * -errno. *unit: the unit of work that makes byte d (a module: prefetch
 * walks them in order), or -1. */
int rq_mnt_seg_acquire(struct rq_mount *m, struct mread *rd, const struct rq_seg *g, uint64_t d,
                       long *unit);
/* No lock: *fb = the bytes [d, d + len) of g: memory (copied into dst, len
 * bytes, when the source is a file others may change) or an fd + offset to
 * splice. 0, -EIO (changed SRC), -ENODATA (a cache entry shorter than
 * verified). */
int rq_mnt_seg_bytes(struct rq_mount *m, struct mread *rd, const struct rq_seg *g, uint64_t d,
                     uint64_t len, uint8_t *dst, struct fuse_buf *fb);
/* Called by rq_mnt_serve under m->lock before any segment is asked: 1 when
 * a whole materialized file answered rd (or parked it on its verification;
 * m->lock released, rd no longer the caller's), 0 when the segments must
 * (m->lock still held). */
int rq_mnt_seg_file(struct rq_mount *m, struct mread *rd);

/* mount_mat.c: materialized files */
int rq_mnt_files_init(struct rq_mount *m, struct rq_err *err);
void rq_mnt_files_free(struct rq_mount *m);
/* Starts the materializer once the kernel answered INIT; queues the shards
 * whose file is in the cache, and (passthrough on) those whose every job
 * is; from then on a published job queues the files it completes
 * (m->on_job_cached). */
int rq_mnt_mat_start(struct rq_mount *m);
void rq_mnt_mat_stop(struct rq_mount *m);
/* Under m->lock: drops file i's materialized file (changed, corrupt, or its
 * SRC changed): it is read through its jobs again. */
void rq_mnt_mat_drop(struct rq_mount *m, long i, const char *why);
/* File i's materialized file o failed a re-check (r, from
 * rq_cache_file_recheck): counted when corrupt, dropped if it is still the
 * one served. No lock held. */
void rq_mnt_mat_failed_check(struct rq_mount *m, long i, struct mout *o, int r, const char *why);
/* Under m->lock: waits (bounded) for the verification of file i's file
 * found in the cache, when one is queued or running. */
void rq_mnt_mat_await(struct rq_mount *m, long i);
/* Under m->lock: if file i is being verified, parks rd on it (answered by
 * rd->serve once the verification is done) and returns 1. */
int rq_mnt_mat_park(struct rq_mount *m, long i, struct mread *rd);
/* A copy-path read rd of a materialized file: 1 when answered (rd freed), 0
 * when its file is not (or no longer) materialized and must be served
 * through its jobs. */
int rq_mnt_read_mat(struct rq_mount *m, struct mread *rd);

/* mount_jobs.c: single-flight jobs: park, run, publish */
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
/* Under m->lock: the same, module k's own job first (a reader nears it). */
void rq_mnt_prefetch_from(struct rq_mount *m, size_t k);
/* A read of virtual file `file` ended at `end` through SRC bytes of a remote
 * SRC (fetched while no job runs): starts the next job of the file (within
 * 256 MiB) and the prefetch after it, so quantization overlaps the
 * fetching instead of waiting for the reader to reach the job. No lock held. */
void rq_mnt_prefetch_ahead(struct rq_mount *m, long file, uint64_t end);
/* Under m->lock: marks a READY job as used now (LRU). */
void rq_mnt_touch(struct rq_mount *m, int j);
/* Under m->lock: job j is not needed (covered): drops its output, or takes
 * it off the prefetch queue; it becomes IDLE. */
void rq_mnt_job_release(struct rq_mount *m, int j);
/* Under m->lock: job j's cache entry o turned out changed and corrupt: if o
 * is still j's output, j becomes IDLE (a later read rebuilds it). */
void rq_mnt_drop_stale(struct rq_mount *m, int j, struct mout *o);
/* Under m->lock: is every file made from job j materialized (READY)? */
int rq_mnt_job_covered(struct rq_mount *m, int j);

/* mount_rver.c: a remote SRC (hf://): --remote-verify file, the remote pool */
/* After the plan (every mode): state, the jobs' reader in file mode. */
int rq_mnt_rv_init(struct rq_mount *m, struct rq_err *err);
int rq_mnt_rv_start(struct rq_mount *m);     /* the pool (remote SRC only) */
/* Ends the session's remote waits: parked reads EIO, waiting jobs woken,
 * queued tasks failed; then rq_mnt_rv_join waits a bounded time for the
 * pool (a thread left in a fetch: m->stuck). */
void rq_mnt_rv_stop(struct rq_mount *m);
void rq_mnt_rv_join(struct rq_mount *m);
void rq_mnt_rv_free(struct rq_mount *m);
/* No lock: 1 when a read of plan file `file` must wait for its SRC file's
 * verification (file mode, not verified yet). */
int rq_mnt_rv_needs(struct rq_mount *m, long file);
/* Under m->lock: may rd's file be read (its SRC verified)? 0 yes, 1 rd
 * parked on the fetch, -EIO (the file failed for good). */
int rq_mnt_rv_gate(struct rq_mount *m, struct mread *rd);
/* Under m->lock: SRC file s's verified copy for rd: 0 held (RQ_RV_KEY), 1
 * parked on its fetch, -EIO. */
int rq_mnt_rv_acquire(struct rq_mount *m, struct mread *rd, int s);
/* Hands rd to the remote pool (rd->serve runs there). 0 or -ENOMEM. */
int rq_mnt_rv_push(struct rq_mount *m, struct mread *rd);
/* The fd a file identical to SRC file s is served from: the local SRC fd,
 * the remote one's verified (file mode) or assembled copy, or -1. */
int rq_mnt_src_fd(struct rq_mount *m, int s);
/* Under m->lock: is SRC file s served from a whole local copy now (file
 * mode: verified and open; none mode: assembled)? For status. */
int rq_mnt_rv_whole(struct rq_mount *m, int s);
/* Bytes of SRC file s for the materializer (blocks the caller): file
 * mode through the verified copy, else through the store. 0 or -EIO. */
int rq_mnt_src_read(struct rq_mount *m, int s, uint64_t off, uint64_t len, void *buf);
/* SRC file s's bytes now live elsewhere (a materialized shard): its copy
 * is released and the store drops it. */
void rq_mnt_rv_drop(struct rq_mount *m, int s);

/* Leaves, called from above and calling no daemon file: mount_pt.c
 * (mount_pt.h), mount_out.c, mount_src.c, mount_remote.c, mount_log.c,
 * mountinfo.c. */

/* mount_out.c: job outputs and a read's holds on them */
struct mout *rq_mout_new(int fd, uint64_t fd_off, const struct rq_cache_ident *id, uint8_t *mem);
void rq_mout_unref(struct mout *o);
/* Under m->lock: rd keeps a reference to o (job j's output). -ENOMEM. */
int rq_mnt_hold(struct mread *rd, int j, struct mout *o);
/* The output of job j that rd holds, or NULL. */
struct mout *rq_mnt_held(struct mread *rd, int j);
/* 1 when an output rd holds is in a cache fd (its bytes are copied). */
int rq_mnt_held_fd(const struct mread *rd);
void rq_mnt_read_free(struct mread *rd);   /* drops its holds, frees */
/* Registers rd for FUSE_INTERRUPT before rd is visible to other threads (a
 * reader killed or interrupted while its read waits is answered EINTR at
 * once; the work it waited for goes on). The callback may run at once. */
void rq_mnt_read_watch(struct mread *rd);
/* Before answering rd->req: 1 when the caller answers it (no interrupt
 * will any more), 0 when an interrupt already did (then only free rd). */
int rq_mnt_read_claim(struct mread *rd);
/* Answers rd with -err (or nothing when an interrupt did) and frees it. */
void rq_mnt_read_fail(struct mread *rd, int err);
/* The start of answering rd: takes m->lock and returns 1, or (rd failed
 * while parked) answers its error, frees it and returns 0 unlocked. */
int rq_mnt_serve_begin(struct rq_mount *m, struct mread *rd);

/* mount_src.c: SRC identity */
/* Checks SRC file s against the plan's identity (fstat of the fd; stat of
 * the path too when `path`). Marks it changed (sticky, logged) and returns
 * -EIO when it differs. */
int rq_mnt_src_check(struct rq_mount *m, int s, int path);

/* mount_remote.c: a remote SRC (hf://) through the chunk store */
/* Sets m->rreader when the mount's SRC is remote (o.rs); 0 or -errno. */
int rq_mnt_remote_init(struct rq_mount *m, struct rq_err *err);
/* The plan is built: frees the headers kept for it; the reader serves jobs
 * from now on (RQ_RS_NOKEEP). */
void rq_mnt_remote_planned(struct rq_mount *m);
void rq_mnt_remote_free(struct rq_mount *m);
/* fd of SRC file s's assembled, verified file, or -1 while there is none. */
int rq_mnt_remote_fd(struct rq_mount *m, int s);
/* Bytes [off, off + len) of SRC file s into buf through the store (flags:
 * RQ_RS_*). 0, or -EIO logged with the file, range and why (offline...). */
int rq_mnt_remote_read(struct rq_mount *m, int s, uint64_t off, uint64_t len, void *buf,
                       unsigned flags);
/* SRC file s's bytes now live elsewhere in the cache (a materialized shard):
 * the store drops its chunks. */
void rq_mnt_remote_drop(struct rq_mount *m, int s);
/* Remote file i's verified copy (fd) against the head the plan used: 0
 * same (or no head kept), -EPROTO different (the kept head is deleted),
 * -EIO unreadable. */
int rq_mnt_remote_head_check(struct rq_mount *m, size_t i, int fd);

/* mount_log.c: clock, log (rq_mount_log* in mount.h), thread stop */
double rq_mnt_now(void);
/* Tells a thread to stop: *flag = 1 under mu, and wakes the waiters of cv
 * (and of cv2 when not NULL). The caller then joins it. */
void rq_mnt_flag_stop(pthread_mutex_t *mu, int *flag, pthread_cond_t *cv, pthread_cond_t *cv2);

#endif
