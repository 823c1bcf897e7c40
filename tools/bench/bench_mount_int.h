/* bench_mount_int.h — what `requantfs bench mount` (bench_mount.c) shares
 * with its --scheme and --remote forms (bench_mount_scheme.c,
 * bench_mount_remote.c): the work directory, and the harness of
 * bench_mount_harness.c: the self-run mount/umount, cache eviction and the
 * cold (a) measurement. */
#ifndef RQ_TOOLS_BENCH_MOUNT_INT_H
#define RQ_TOOLS_BENCH_MOUNT_INT_H

#include <stdint.h>

struct rq_plan;
struct rq_quantizer;

#define CHUNK (1u << 20)

struct bm {
	char work[4096], src[4200], cal[4200], exp[4200], mnt[4200], cache[4200], log[4200];
	char cache_pt[4200], cache_off[4200];
	const char *device;
	const char *pt;           /* --passthrough of the mounts made now */
	const char *scheme;       /* mounts get --scheme this, no --calib; NULL = the Laguna fix */
	int threads;              /* --threads of export and mount, <= 0 = their default (all) */
	int procs;                /* (d): loader processes at once */
	int can_drop;             /* drop_caches works (root) */
	int reps;
	unsigned readahead;
	uint8_t *buf;
};

/* What is measured on: the requantized shard with the most quantized bytes. */
struct shard {
	long i;                   /* plan file index */
	const char *name, *srcpath;
	uint64_t size, qbytes, qin;   /* bytes: the shard, its quantized part, all input */
	char mpath[8400], epath[8400];
};

/* (a), seconds, best of reps: export of all files / of the shard alone, and
 * cold reads of all files / of the shard through a fresh mount, empty cache;
 * CPU seconds (user + system, every thread) of the export and of the
 * all-files read (the reader and the mount's daemon), least of reps. */
struct bm_cold {
	double t_exp, t_exp1, t_all, t_shard;
	double c_exp, c_all;
};

int bm_run_self(struct bm *b, char *const args[]);  /* this executable; output to b->log */
void bm_drop(const char *path);                     /* evict every file under path */
void bm_rm_rf(const char *path);
int bm_mount(struct bm *b);                         /* b->src on b->mnt with b->cache */
void bm_umount(struct bm *b);
double bm_read_seq(struct bm *b, const char *path, uint64_t *bytes);  /* seconds, -1 */
void bm_keep_min(double *best, double t);
int bm_pick_shard(struct bm *b, const struct rq_plan *p, struct shard *sh);
/* (a) on plan p (built from b->src as the mounts build it): 0, else the exit
 * code with the message printed. */
int bm_measure_cold(struct bm *b, struct rq_plan *p, struct rq_quantizer *q,
                    const struct shard *sh, struct bm_cold *c);

/* `bench mount --scheme S|all` (bench_mount_scheme.c): b set up, paths
 * made; the exit code. */
int bench_mount_scheme(struct bm *b, const char *scheme, int experts);

/* `bench mount --remote` (bench_mount_remote.c): b set up; the exit code. */
int bench_mount_remote(struct bm *b, int experts);

#endif
