/* cache_int.h — internals shared by cache.c (entry files: format, put,
 * lookup), cache_file.c (whole files: writer, sidecar, open), cache_io.c
 * (what both kinds share: whole reads/writes, identities, the safe open of a
 * name, verification while a file holds still) and cache_index.c (in-memory
 * index, recency order, pins, directory scan, eviction). Not installed, not
 * included outside cache/. */
#ifndef RQ_CACHE_INT_H
#define RQ_CACHE_INT_H

#include "cache/cache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <sys/types.h>
#include <time.h>

#define RQC_HDR 64                 /* header bytes = payload offset */
#define RQC_TRAILER 16             /* XXH3-128 of the payload */
#define RQC_OVERHEAD (RQC_HDR + RQC_TRAILER)
#define RQC_REL_MAX 96             /* "xx/<32 hex>.rqc.tmp.<pid>.<n>" and
                                      "files/<32 hex>.bin.tmp.<pid>.<n>" fit */
#define RQC_FILES_DIR "files"      /* whole files live in <dir>/files/ */

/* Crashed writers' temp files: removed at scan when older than this ... */
#define RQC_TMP_MAX_AGE_NS (15LL * 60 * 1000000000)
/* ... or when their pid is dead and they are older than this grace period
 * (another pid namespace sharing the directory may reuse the number). */
#define RQC_TMP_DEAD_GRACE_NS (60LL * 1000000000)
/* Eviction rescans the directory (to learn other processes' puts) at most
 * this often. */
#define RQC_RESCAN_NS (30LL * 1000000000)

/* What an index record stands for. A key names an entry or a file, never
 * both (the mount's descriptors differ); the index holds one record a key. */
enum { RQC_ENTRY = 0, RQC_FILE = 1 };

/* One entry of the index: what this process knows about one entry file or
 * one whole file (files/<hex>.bin; its sidecar is not tracked).
 * A record is `present` when it stands for something seen on disk. A
 * pinned key keeps its record even when nothing is there (a placeholder:
 * present false, payload 0, not verified), so that a pin taken before the
 * file exists, or held while it is removed and rewritten, still holds. */
struct rqc_ent {
	struct rq_cache_key key;
	uint64_t payload;          /* bytes counted in c->bytes: an entry's payload (file size
	                              - 80, 0 if shorter), a file's size; 0 when !present */
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
	bool present;              /* stands for a name on disk (false: a pinned placeholder) */
	bool has_sum;              /* RQC_FILE: sum is known (kept by placeholders too) */
	uint8_t kind;              /* RQC_ENTRY or RQC_FILE */
	int pins;                  /* rq_cache_file_pin count; > 0: never evicted nor freed */
	uint8_t sum[16];           /* RQC_FILE: XXH3-128 of the bytes (canonical), when has_sum;
	                              a function of the key, so valid for any file at it */
	struct rqc_ent *hnext;     /* hash chain */
	struct rqc_ent *older, *younger; /* recency list, oldest first */
};

/* A file found by a directory scan (no lock needed to build these). */
struct rqc_found {
	struct rq_cache_key key;
	uint8_t kind;              /* RQC_ENTRY (xx/<hex>.rqc) or RQC_FILE (files/<hex>.bin) */
	dev_t dev;
	ino_t ino;
	off_t fsize;
	int64_t mtime, ctime, atime; /* ns since the epoch */
};

struct rq_cache {
	char *dir;                 /* as given to rq_cache_open */
	int dfd;                   /* O_DIRECTORY fd of dir; all paths are relative to it */
	uint64_t max_bytes;        /* 0 = unlimited */
	int lazy_sync;             /* rq_cache_opts.lazy_sync */
	_Atomic int64_t unsynced;  /* lazy_sync: bytes put since the last syncfs */
	_Atomic int64_t synced_ns; /* lazy_sync: CLOCK_MONOTONIC ns of the last syncfs */
	unsigned tmp_seq;          /* temp file counter (atomic builtins) */

	pthread_mutex_t mu;        /* guards every field below */
	struct rqc_ent **tab;      /* hash buckets, ntab a power of two */
	size_t ntab, n;            /* n: records, placeholders included */
	size_t nplace;             /* placeholders (records not present) */
	struct rqc_ent *oldest, *youngest;
	uint64_t bytes;            /* sum of payload over the index */
	uint64_t files, file_bytes; /* present RQC_FILE records, their payload */
	int64_t clock;             /* last value handed out by rqc_tick */
	int64_t last_scan;         /* ns since the epoch */
	struct rq_cache_stats st;  /* entries/bytes filled in by get_stats */
	struct rq_cache_peer peer; /* bytes under the same max_bytes (rq_cache_set_peer) */
	uint64_t writing;          /* bytes of whole files begun and not yet committed nor
	                              aborted: counted against max_bytes (and shown to the
	                              peer) from rq_cache_file_begin on */
};

int64_t rqc_now_ns(void);
/* A strictly increasing realtime clock in ns (mu held). */
int64_t rqc_tick(struct rq_cache *c);
void rqc_hex(const struct rq_cache_key *k, char out[33]);
/* "xx/<32 hex>.rqc" relative to the cache directory. */
void rqc_rel_path(const struct rq_cache_key *k, char out[RQC_REL_MAX]);
/* "files/<32 hex>.bin" / "files/<32 hex>.sum" relative to the directory. */
void rqc_file_rel(const struct rq_cache_key *k, char bin[RQC_REL_MAX], char sum[RQC_REL_MAX]);

/* Index operations; mu held. */
struct rqc_ent *rqc_find(struct rq_cache *c, const struct rq_cache_key *k);
/* A new record, not present (a placeholder until rqc_set_present). NULL: ENOMEM. */
struct rqc_ent *rqc_add(struct rq_cache *c, const struct rq_cache_key *k);
/* Forgets what is known of e's file; a pinned record stays as a placeholder
 * (its kind, pins and sum kept), any other is freed. */
void rqc_del(struct rq_cache *c, struct rqc_ent *e);
void rqc_use(struct rq_cache *c, struct rqc_ent *e, int64_t when); /* youngest now */
/* e stands for a file of this kind on disk, counting `payload` bytes. */
void rqc_set_present(struct rq_cache *c, struct rqc_ent *e, int kind, uint64_t payload);
void rqc_free_all(struct rq_cache *c);

/* Lists every entry file and whole file (files/<hex>.bin) under the directory
 * and removes stale temp files of crashed writers, and half-published or
 * half-removed files (a .bin or .sum without its twin) older than
 * RQC_TMP_MAX_AGE_NS. No lock. 0 or -errno (*out is malloc'ed); only
 * regular files are listed (never opened). -EPERM when an xx/ or files/
 * subdirectory is writable by group/others or owned by someone else: its
 * name is then in bad_sub (when not NULL). */
int rqc_scan(struct rq_cache *c, struct rqc_found **out, size_t *n, char bad_sub[8]);
/* Is a directory with this stat unsafe to trust (writable by group or
 * others, or owned by neither the caller nor root)? */
bool rqc_dir_unsafe(const struct stat *st);
/* Makes the index agree with a scan that began at scan_start: adds new
 * files, forgets files gone (unless used since the scan began), keeps the
 * newer of the two recencies, re-sorts. mu held. */
void rqc_merge(struct rq_cache *c, const struct rqc_found *f, size_t n, int64_t scan_start);
/* Removes least-recently-used entries and files (never `keep`, never a
 * pinned file) until bytes + room + the peer's bytes <= max_bytes, after
 * asking the peer (rq_cache_set_peer) to trim the excess. Takes mu itself;
 * calls the peer without it. */
void rqc_evict(struct rq_cache *c, const struct rq_cache_key *keep, uint64_t room);

/* ---- cache_io.c: what entries and files share ---- */

#define RQC_IO_CHUNK (1u << 30)    /* largest single read/write we issue */
#define RQC_VERIFY_TRIES 3         /* a file changing during each verification: a miss */
/* Every open of a cached name: never block on a FIFO, never follow a
 * symlink, never become a controlling terminal. */
#define RQC_OPEN_FLAGS (O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)

/* Verdicts of a check (positive), next to -errno. */
enum { VERIFY_OK = 0, VERIFY_CORRUPT = 1, VERIFY_FOREIGN = 2, VERIFY_UNSTABLE = 3 };

static inline void rqc_put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void rqc_put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t rqc_get_le32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static inline uint64_t rqc_get_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static inline int64_t rqc_ns(struct timespec t)
{
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

struct rq_err;
int rqc_pwrite_all(int fd, const uint8_t *p, uint64_t n, uint64_t off);
/* 0, or -errno; a short file gives the count actually read in *got. */
int rqc_pread_all(int fd, uint8_t *p, uint64_t n, uint64_t off, uint64_t *got);
/* Describes a bad file in err (as a miss: -ENOENT) and returns `kind`. */
int rqc_bad(struct rq_err *err, int kind, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
bool rqc_same_file(const struct stat *a, const struct stat *b);
void rqc_ident_of(const struct stat *st, struct rq_cache_ident *id);
bool rqc_ident_eq(const struct rq_cache_ident *a, const struct rq_cache_ident *b);
void rqc_set_identity(struct rqc_ent *e, const struct stat *st);
bool rqc_ent_matches(const struct rqc_ent *e, const struct stat *st);
/* Sets the file's atime to `when` (the shared recency clock); best effort.
 * Moves ctime: take the identity after it. */
void rqc_touch(int fd, int64_t when);
const char *rqc_kind_of(mode_t m);   /* "a FIFO", "a symbolic link"... */
/* Opens the name rel without blocking or following anything: 0 with a
 * regular file not writable by group/others (fd, *st); -ENOENT plain miss;
 * 1 a bad name (err says why, naming "<what> <path>"; *st describes what
 * was judged when *judged); other -errno. */
int rqc_open_name(struct rq_cache *c, const char *rel, const char *what, const char *path,
                  int *fdp, struct stat *st, bool *judged, struct rq_err *err);
/* check() while the file holds still: its identity is the same before and
 * after the whole check (any write in between moves ctime). *after is the
 * identity the verdict is about; VERIFY_UNSTABLE when it kept changing. */
typedef int (*rqc_check_fn)(int fd, const struct stat *st, const char *path, void *arg,
                            struct rq_err *err);
int rqc_verify_stable(int fd, const char *what, const char *path, rqc_check_fn check,
                      void *arg, struct stat *after, struct rq_err *err);
int rqc_fsync_dir_at(int dfd, const char *sub);
/* Counts a failed write and describes it ("cache <noun> <path> ..."). */
int rqc_put_fail(struct rq_cache *c, struct rq_err *err, int r, const char *noun,
                 const char *path, uint64_t bytes, const char *doing);

#endif
