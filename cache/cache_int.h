/* cache_int.h — internals shared by cache.c (entry files: format, put,
 * lookup) and cache_index.c (in-memory index, recency order, directory scan,
 * eviction). Not installed, not included outside cache/. */
#ifndef RQ_CACHE_INT_H
#define RQ_CACHE_INT_H

#include "cache/cache.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#define RQC_HDR 64                 /* header bytes = payload offset */
#define RQC_TRAILER 16             /* XXH3-128 of the payload */
#define RQC_OVERHEAD (RQC_HDR + RQC_TRAILER)
#define RQC_REL_MAX 96             /* "xx/<32 hex>.rqc.tmp.<pid>.<n>" fits */

/* Crashed writers' temp files: removed at scan when older than this ... */
#define RQC_TMP_MAX_AGE_NS (15LL * 60 * 1000000000)
/* ... or when their pid is dead and they are older than this grace period
 * (another pid namespace sharing the directory may reuse the number). */
#define RQC_TMP_DEAD_GRACE_NS (60LL * 1000000000)
/* Eviction rescans the directory (to learn other processes' puts) at most
 * this often. */
#define RQC_RESCAN_NS (30LL * 1000000000)

/* One entry of the index: what this process knows about one entry file. */
struct rqc_ent {
	struct rq_cache_key key;
	uint64_t payload;          /* payload bytes (file size - 80, 0 if shorter) */
	int64_t last_use;          /* ns since the epoch: atime on disk, or our last hit/put */
	/* Identity of the file as last seen; when `verified`, a file with this
	 * identity had a good header and checksum. A rename over it (new inode),
	 * a write into it (new mtime/size), a utime restoring the mtime or a
	 * touch by another process (new ctime) changes the identity. Recorded
	 * by an fstat after our own touch (futimens moves ctime). */
	dev_t dev;
	ino_t ino;
	off_t fsize;               /* bytes */
	int64_t mtime;             /* ns since the epoch (publish time; hits touch atime only) */
	int64_t ctime;             /* ns since the epoch (moves on every touch and change) */
	bool verified;
	bool seen;                 /* scratch of rqc_merge */
	struct rqc_ent *hnext;     /* hash chain */
	struct rqc_ent *older, *younger; /* recency list, oldest first */
};

/* A file found by a directory scan (no lock needed to build these). */
struct rqc_found {
	struct rq_cache_key key;
	dev_t dev;
	ino_t ino;
	off_t fsize;
	int64_t mtime, ctime, atime; /* ns since the epoch */
};

struct rq_cache {
	char *dir;                 /* as given to rq_cache_open */
	int dfd;                   /* O_DIRECTORY fd of dir; all paths are relative to it */
	uint64_t max_bytes;        /* 0 = unlimited */
	unsigned tmp_seq;          /* temp file counter (atomic builtins) */

	pthread_mutex_t mu;        /* guards every field below */
	struct rqc_ent **tab;      /* hash buckets, ntab a power of two */
	size_t ntab, n;
	struct rqc_ent *oldest, *youngest;
	uint64_t bytes;            /* sum of payload over the index */
	int64_t clock;             /* last value handed out by rqc_tick */
	int64_t last_scan;         /* ns since the epoch */
	struct rq_cache_stats st;  /* entries/bytes filled in by get_stats */
};

int64_t rqc_now_ns(void);
/* A strictly increasing realtime clock in ns (mu held). */
int64_t rqc_tick(struct rq_cache *c);
void rqc_hex(const struct rq_cache_key *k, char out[33]);
/* "xx/<32 hex>.rqc" relative to the cache directory. */
void rqc_rel_path(const struct rq_cache_key *k, char out[RQC_REL_MAX]);

/* Index operations; mu held. */
struct rqc_ent *rqc_find(struct rq_cache *c, const struct rq_cache_key *k);
struct rqc_ent *rqc_add(struct rq_cache *c, const struct rq_cache_key *k); /* NULL: ENOMEM */
void rqc_del(struct rq_cache *c, struct rqc_ent *e);
void rqc_use(struct rq_cache *c, struct rqc_ent *e, int64_t when); /* youngest now */
void rqc_set_payload(struct rq_cache *c, struct rqc_ent *e, uint64_t payload);
void rqc_free_all(struct rq_cache *c);

/* Lists every entry file under the directory and removes stale temp files
 * of crashed writers. No lock. 0 or -errno (*out is malloc'ed); only
 * regular files are listed (never opened). -EPERM when an xx/ subdirectory
 * is writable by group/others or owned by someone else: its name is then in
 * bad_sub (when not NULL). */
int rqc_scan(struct rq_cache *c, struct rqc_found **out, size_t *n, char bad_sub[3]);
/* Is a directory with this stat unsafe to trust (writable by group or
 * others, or owned by neither the caller nor root)? */
bool rqc_dir_unsafe(const struct stat *st);
/* Makes the index agree with a scan that began at scan_start: adds new
 * files, forgets files gone (unless used since the scan began), keeps the
 * newer of the two recencies, re-sorts. mu held. */
void rqc_merge(struct rq_cache *c, const struct rqc_found *f, size_t n, int64_t scan_start);
/* Removes least-recently-used entries (never `keep`) until bytes <= max_bytes.
 * Takes mu itself. */
void rqc_evict(struct rq_cache *c, const struct rq_cache_key *keep);

#endif
