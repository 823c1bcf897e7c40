/* rstore_int.h — the remote store's state, shared by the files of remote/
 * (internal to the folder). Lock rules on the fields: "mu" = under rq_rs.mu.
 * The functions are declared by file, in the folder's order (the top of
 * rstore.c): each file calls only the files below it. */
#ifndef RQ_REMOTE_RSTORE_INT_H
#define RQ_REMOTE_RSTORE_INT_H

#include "remote/rstore.h"
#include "base/err.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define RQ_RS_CHUNK_DEFAULT (16u << 20)   /* rstore.c says why */
#define RQ_RS_CONN_DEFAULT 8
#define RQ_RS_CONN_MAX 64

enum { CH_ABSENT, CH_PRESENT };   /* rfile.st[c] */
/* rfile.failed: why a file's reads fail -EIO for good (rqr_failed_err says it).
 * F_HASH: its bytes hashed wrong twice (rq_rs_drop starts it afresh);
 * F_SIZE: the server stated a size other than the listed one (rstore.c
 * "Listed sizes"); F_LISTED: listed larger than RQ_RS_CHUNKS_MAX chunks. */
enum { F_OK, F_HASH, F_SIZE, F_LISTED };
enum { JOB_CHUNK, JOB_RANGE };

struct job {
	int kind;
	int hi;                    /* mu: which queue it is in (1: demand, 0: readahead) */
	struct job *next;          /* mu */
	size_t fi;                 /* the file */
	uint64_t c;                /* JOB_CHUNK: the chunk index */
	/* JOB_RANGE (a RQ_RS_NOKEEP piece): bytes [off, off + len) into dst */
	uint64_t off, len;
	void *dst;
	struct group *g;
};

/* A RQ_RS_NOKEEP read's pieces in flight (on the reader's stack). */
struct group {
	int pending;               /* mu: pieces not finished */
	int rc;                    /* mu: the first failure */
	struct rq_err err;         /* mu: its message */
};

/* One chunk being fetched (in rfile.fl[c] while queued, running or just done). */
struct fetch {
	struct job j;              /* JOB_CHUNK */
	int refs;                  /* mu: the worker's (queue's) + each waiting caller's */
	int queued;                /* mu: still in a queue */
	int done, rc;              /* mu: finished; 0 or -errno */
	int stored;                /* mu: its bytes went to disk (set as it leaves fl[]) */
	struct rq_err err;         /* mu: when rc */
	uint8_t *buf;              /* [len], allocated by the worker (counted in mem_used);
	                              read-only once done; freed with the last reference */
	uint32_t len;
};

struct rfile {
	char *name;                /* relative name in the repo */
	uint64_t size;             /* bytes */
	char sha256[65];           /* 64 lowercase hex, or "" */
	char blob_id[41];          /* 40 lowercase hex, or "": checked when there is no sha256 */
	char want[65];             /* what assembly checks: sha256, else blob_id, else "" */
	const char *hash_name;     /* "sha256" or "git blob id", for messages */
	char id[96];               /* identity (chunk.h) */
	uint64_t idhash;           /* XXH3-64 of id, in every chunk's header */
	char dir[128];             /* chunks/<id>-<chunk_size> */
	char *apath;               /* <root>/files/<id>: the assembled file's path */
	uint64_t nchunks;          /* <= RQ_RS_CHUNKS_MAX (0 when failed F_LISTED) */
	uint8_t *st;               /* mu: [nchunks] CH_* */
	struct fetch **fl;         /* mu: [nchunks] in flight, or NULL */
	uint64_t npresent;         /* mu: chunks with st != CH_ABSENT */
	int assembled;             /* mu: files/<id> is there, verified */
	int assembling;            /* mu: a thread is assembling it */
	int sha_fails;             /* mu: SHA-256 mismatches at assembly */
	int failed;                /* mu: F_*: reads fail -EIO (F_OK: they do not) */
	uint64_t server_size;      /* mu: F_SIZE: the size the server stated */
	char bad_sha[65];          /* mu: what the last mismatching bytes hashed to (want's kind) */
	uint64_t seq_next;         /* mu: end of the last read (readahead) */
	uint8_t *ra_want;          /* mu: [nchunks] chunks readahead may fetch, or NULL: all */
	/* the budget (rstore.c "Disk budget") */
	int users;                 /* mu: reads and fetch_files of it running now */
	int pins;                  /* mu: rq_rs_pin count */
	int evicting;              /* mu: its names being unlinked: chunk writers wait */
	int64_t last_use;          /* mu: ns since the epoch of its last read, store or scan */
	/* the in-order hash (rshash.c): bytes [0, hnext * chunk_size) fed to hash */
	struct rqr_hash *hash;     /* owned by the hasher while `hashing`, else mu; NULL: none yet */
	uint64_t hnext;            /* mu: the next chunk to hash (nchunks: all hashed) */
	int hashing;               /* mu: a thread is feeding hash (one at a time) */
	unsigned hgen;             /* mu: +1 when hashed bytes may have changed (rqr_hash_reset) */
};

struct rqr_hash;

struct worker {
	struct rq_rs *s;
	struct rq_hub *hub;        /* this thread's own */
	uint64_t retries_seen;     /* hub retries already added to st.retries */
	pthread_t tid;
	int started;
};

struct rq_rs {
	char *endpoint, *repo, *commit;
	char *root;                /* <cache_dir>/remote */
	int dfd;                   /* root, open */
	uint32_t chunk_size;
	int nworkers, readahead, offline;
	uint64_t mem_max;
	void (*log)(void *ctx, const char *msg);
	void *log_ctx;
	struct rfile *files;
	size_t nfiles;
	struct worker *workers;

	pthread_mutex_t mu;
	pthread_cond_t work_cv, done_cv, mem_cv;
	struct job *hi_head, *hi_tail, *lo_head, *lo_tail;   /* mu */
	uint64_t mem_used, mem_peak;                         /* mu: bytes of fetch buffers */
	uint64_t hashed_buf, hashed_disk;   /* mu: bytes hashed from fetch buffers, from disk */
	/* mu: freed whole-chunk buffers kept for the next fetch (their pages
	 * stay mapped: a fresh 16 MiB buffer costs 4096 page faults, ~10 % of
	 * the daemon's CPU on a cold read). mem_used + npool * chunk_size <=
	 * mem_max, so the bound holds for what is in use and kept together. */
	void **pool;
	int npool;
	int active;                /* mu: API calls running (close waits for them) */
	atomic_int closing;        /* set once by close */
	atomic_int warned_write;   /* the cannot-store line was logged (once per store) */
	atomic_int warned_budget;  /* the over-budget line was logged (once per store) */
	struct rq_rs_stats st;     /* mu */
	uint64_t max_bytes;        /* mu: the budget (0: none) */
	/* budget_mu (taken alone, never with mu): others() is called under it,
	 * so rq_rs_set_budget returns only once no call is running. */
	pthread_mutex_t budget_mu;
	uint64_t (*others)(void *ctx);   /* budget_mu */
	void *others_ctx;                /* budget_mu */
	/* sharing (rsshare.c): our registration stores/<reg_name>, held locked */
	int reg_fd;                /* -1: not registered */
	char reg_name[128];
	int share_always;          /* not registered (or no flock): always "shared" */
};

/* rswork.c. A worker thread (pthread_create's start, arg: its struct worker). */
void *rqr_worker_main(void *arg);

/* rsasm.c. assemble_file: assembles file fi (its `assembling` already set by
 * the caller); clears it, broadcasts done_cv. Returns 0, -EBADMSG (mismatch
 * or bad chunk: dropped, chunks to refetch), -EIO (failed for good), other
 * -errno. on_disk: f's assembled file is there (published by another store
 * sharing the cache: only ever once verified; no lock needed). adopt (mu
 * held): that file counted as ours now, its chunks forgotten. */
int rqr_assemble_file(struct rq_rs *s, size_t fi, struct rq_err *err);
int rqr_on_disk(const struct rfile *f);
void rqr_adopt_assembled(struct rq_rs *s, struct rfile *f);

/* rshash.c. A worker stored chunk ft->j.c of fi (no lock held; it hands
 * over its reference on ft): if no one hashes fi now, it feeds the hash from
 * hnext on, that chunk from ft's buffer, the other present chunks read back
 * from disk, until a chunk is missing. ft is unreferenced as soon as its
 * buffer is no longer needed. */
void rqr_hash_stored(struct rq_rs *s, size_t fi, struct fetch *ft);
/* For assembly (fi's `assembling` set, every chunk present; no lock held):
 * waits for a running hasher, hashes what is left from disk and finishes
 * the hash. 0 matches; -EBADMSG with *bad >= 0: chunk *bad is bad on disk
 * (not yet forgotten), with *bad -1: the file hashes to got (not the hub's);
 * -ECANCELED; other -errno. The caller then calls rqr_hash_reset (mu). */
int rqr_hash_finish(struct rq_rs *s, size_t fi, int64_t *bad, char got[65]);

/* rsshare.c (no lock held). register: at open, never fails (a store that
 * cannot register counts the cache as shared); unregister: at close.
 * shared: 1 when another live store may write into this cache's chunks
 * (stale registrations removed on the way), else 0. verify_disk: file fi's
 * bytes read back from disk, every block checked against its sum, hashed
 * and compared with the hub's: 0; -EBADMSG with *bad >= 0 (chunk *bad bad)
 * or *bad -1 (hashes to got); -ENOENT with *bad: chunk *bad gone; -errno. */
void rqr_share_register(struct rq_rs *s);
void rqr_share_unregister(struct rq_rs *s);
int rqr_share_shared(struct rq_rs *s);
int rqr_verify_disk(struct rq_rs *s, size_t fi, int64_t *bad, char got[65]);

/* rsbudget.c. Makes room for `need` more bytes of file fi under the budget
 * (evicting other files) and counts them in bytes_on_disk: 0, or -ENOSPC
 * when what is over cannot be evicted now (nothing counted). No lock held. */
int rqr_reserve(struct rq_rs *s, size_t fi, uint64_t need);

/* rsqueue.c (all with mu held). */
void rqr_unref(struct rq_rs *s, struct fetch *ft);
/* A buffer for len bytes of a chunk: a kept one when whole (NULL: -ENOMEM). */
void *rqr_buf_get(struct rq_rs *s, uint32_t len);
/* The fetch of chunk c (in flight, else queued; hi: demand, a queued
 * readahead is moved to the demand queue); a reference for the caller when
 * ref. NULL: offline, closing or -ENOMEM. */
struct fetch *rqr_want_chunk(struct rq_rs *s, size_t fi, uint64_t c, int hi, int ref);
void rqr_enqueue_range(struct rq_rs *s, struct job *j);
/* Queues every chunk of fi not present nor in flight (readahead queue). */
void rqr_refetch_all(struct rq_rs *s, size_t fi);
/* dequeue: the next job (demand first), out of its queue, or NULL. unqueue:
 * j out of its queue. end_job: queued job j (already out of its queue)
 * ended with e's error. */
struct job *rqr_dequeue(struct rq_rs *s);
void rqr_unqueue(struct rq_rs *s, struct job *j);
void rqr_end_job(struct rq_rs *s, struct job *j, const struct rq_err *e);

/* rsfile.c: the store's gate, log and clock. enter: -ECANCELED when
 * closing, else an API call is counted running until leave. now_ns: ns
 * since the epoch, for last_use. */
int rqr_enter(struct rq_rs *s);
void rqr_leave(struct rq_rs *s);
void rqr_log(struct rq_rs *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int64_t rqr_now_ns(void);
/* rsfile.c: a file's state. */
uint32_t rqr_chunk_len(const struct rq_rs *s, const struct rfile *f, uint64_t c);
/* mu held, f->failed set: its message into err; returns -EIO. */
int rqr_failed_err(const struct rq_rs *s, const struct rfile *f, struct rq_err *err);
/* Chunk c of f is gone or bad on disk (mu held): absent, uncounted (and
 * the in-order hash started again if it had fed c). */
void rqr_forget_chunk(struct rq_rs *s, struct rfile *f, uint64_t c);
/* The bytes hashed so far may have changed (mu held): the hash starts again
 * from chunk 0 (at once, else when its hasher next looks). */
void rqr_hash_reset(struct rq_rs *s, struct rfile *f);
/* rsfile.c, at open. name: f's identity (chunk.h), dir and paths from in;
 * 0, -EINVAL (a bad hash), -ENOMEM. scan: what the cache holds of f (its
 * assembled file, else its chunks: names and sizes). mkdir_p: 0 or -errno. */
int rqr_name_file(struct rq_rs *s, struct rfile *f, const struct rq_rs_file *in,
                  struct rq_err *err);
void rqr_scan_file(struct rq_rs *s, struct rfile *f);
int rqr_mkdir_p(const char *path);

#endif
