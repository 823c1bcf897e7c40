/* plan.h — the virtual requantized checkpoint (SPEC.md §2, §4), decided from
 * SRC's config.json, index and shard headers before anything is quantized.
 *
 * A plan is immutable once built and may be read from any thread. Every
 * virtual file is a list of segments; export writes them and the mount
 * serves them, so the two cannot disagree. */
#ifndef RQ_PLAN_PLAN_H
#define RQ_PLAN_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "quant/quant.h"
#include "quant/scheme.h"
#include "quant/observer.h"

struct rq_err;

/* A SRC that is not a local directory (hf://ORG/NAME@REV): the caller lists
 * its files and answers byte-range reads, so plan/ reads a remote SRC's small
 * files and shard headers without knowing HTTP (plan/ links no hub/). The
 * reader must outlive every plan built on it (p->reader borrows it). */
struct rq_src_entry {
	const char *name;         /* relative name, e.g. "model-00001-of-00002.safetensors" */
	uint64_t size;            /* exact size in bytes */
	const char *sha256;       /* 64 hex (the hub's LFS sha256) or NULL */
};
struct rq_src_reader {
	const char *label;        /* SRC as messages name it, e.g. hf://org/name@<commit> */
	size_t nfiles;
	const struct rq_src_entry *files;   /* [nfiles], any order, names unique */
	void *ctx;
	/* Bytes [off, off + len) of files[i] into buf (off + len <= size). A read
	 * of a whole file checks it against its sha256 when one is given. 0 or
	 * -errno with a message naming the file and range. */
	int (*read)(void *ctx, size_t i, uint64_t off, uint64_t len, void *buf,
	            struct rq_err *err);
	/* 1: read() may answer bytes never checked against the file's sha256
	 * (a mount's --remote-verify none: ranges served as they arrive). The
	 * cache keys then say so (rq_job_key), so what was computed from them is
	 * never taken as the sha256's bytes by a verifying reader (a file-mode
	 * mount, export). 0: every byte used was verified first. */
	int unverified;
};

struct rq_plan_opts {
	const char *src;          /* SRC directory (plain or a hub snapshot); ignored with reader */
	const struct rq_src_reader *reader;  /* non-NULL: SRC is remote, read through it */
	const char *calib;        /* CALIB: a 07-22 checkpoint dir or a `calib extract` file
	                             (the Laguna fix only; refused with another scheme) */
	const char *drop_rule;    /* the ignore entry to drop; NULL = detect (Laguna fix only) */
	enum rq_recipe recipe;    /* must satisfy rq_scheme_recipe_ok(scheme, recipe) */
	enum rq_scheme scheme;    /* RQ_SCHEME_NVFP4 (0): the Laguna fix (SPEC.md §2), as before;
	                             any other: model_free_ptq's module selection (plan_scheme.c) */
	const char *const *targets;  /* [ntargets] module targets; NULL = {"Linear"} */
	size_t ntargets;
	const char *const *ignore;   /* [nignore] modules to leave alone; NULL = {"lm_head"} */
	size_t nignore;
	enum rq_scheme rule_scheme;  /* Laguna fix only (--rule-scheme): what the dropped rule's
	                             modules become: RQ_SCHEME_NVFP4 (0, default: NVFP4 with CALIB's
	                             input scales, today's bytes), RQ_SCHEME_NVFP4A16 or
	                             RQ_SCHEME_FP8_DYNAMIC (no CALIB needed; a config group added) */
	enum rq_observer observer;   /* how the weights' group ranges are chosen (--observer):
	                             RQ_OBSERVER_MINMAX (0, default: today's bytes) or an MSE
	                             observer where rq_observer_ok takes it for the jobs' scheme
	                             and recipe (refused otherwise, and for a non-BF16 module) */
	int no_scales;            /* figures only (plan's per-choice sizes): CALIB is not read,
	                             input_global_scale bytes are 0; never export or mount this */
};

/* A file of SRC (symlinks resolved). Its identity is what the cache keys on
 * and what the mount re-checks to notice a file changed under it. */
struct rq_srcfile {
	char *name;               /* relative name in the checkpoint, e.g. "config.json" */
	char *path;               /* resolved absolute path of the bytes */
	uint64_t size;
	dev_t dev;
	ino_t ino;
	int64_t mtime_ns;
	int64_t ctime_ns;         /* a rewrite that restores size and mtime still moves it */
	mode_t mode;              /* permission bits (& 0777) the mount presents */
	uid_t uid;                /* owner and group the mount presents */
	gid_t gid;
	char blob_sha256[65];     /* hub blob name when SRC is a hub snapshot, else "";
	                             remote SRC: the LFS sha256 when the hub gives one */
	size_t ridx;              /* remote SRC: index into reader->files */
};

enum rq_seg_kind {
	RQ_SEG_MEM,               /* bytes held by the plan (headers, config, index, scalars) */
	RQ_SEG_SRC,               /* a byte range of a SRC file */
	RQ_SEG_JOB,               /* a byte range of a quantization job's output */
};

struct rq_seg {
	uint64_t off, len;        /* range in the virtual file */
	enum rq_seg_kind kind;
	const uint8_t *mem;       /* MEM: len bytes */
	int src;                  /* SRC: index into plan->srcs */
	uint64_t src_off;         /* SRC: absolute offset in that file */
	int job;                  /* JOB: index into plan->jobs */
	uint64_t job_off;         /* JOB: offset in the job's output */
};

struct rq_vfile {
	char *name;               /* relative name, same as SRC's */
	uint64_t size;            /* exact, known before quantization */
	int changed;              /* 0: byte-identical to srcs[src] */
	int src;                  /* the SRC file it derives from */
	size_t nseg;
	struct rq_seg *seg;       /* sorted by off, contiguous, covering [0, size) */
};

/* One requantized Linear: <name>.weight [rows, cols] in SRC becomes the
 * scheme's tensors t[] (rq_scheme_layout). Laguna fix: BF16 in, t[] =
 * weight_packed, weight_scale, weight_global_scale, and the plan adds
 * <name>.input_global_scale from CALIB. */
struct rq_module {
	char *name;               /* "model.layers.40.mlp.experts.3.gate_proj" */
	int src;                  /* SRC shard holding <name>.weight */
	uint64_t w_off;           /* absolute offset of the weight in that file */
	uint64_t rows, cols;      /* [out, in], cols % the scheme's group == 0 */
	enum rq_src_dtype dtype;  /* the SRC weight's element type (BF16 for the Laguna fix) */
	uint32_t input_gs_bits;   /* input_global_scale from CALIB, bit-exact (Laguna fix) */
	int nt;                   /* output tensors, each at t[k].off in the module's output */
	struct rq_stensor t[RQ_SCHEME_MAX_TENSORS];
	uint64_t out_size;        /* sum of t[].len */
	int job, slot;            /* the job computing it and its place in the job */
};

/* One quantization job: a module, or a fused set sharing one global scale
 * (Laguna fix: gate/up, gate in slot 0; NVFP4 schemes: model_free_ptq's
 * q/k/v, gate/up, w1/w3, wq_a/wkv_a_with_mqa sets, primary in slot 0). The
 * output is the slots' module outputs back to back, slot s at mod_off[s]
 * (NVFP4: packed [rows][cols/2] | scales [rows][cols/16] | global scale F32). */
#define RQ_JOB_MAX_MODS 3
struct rq_job {
	int nmod;
	int mod[RQ_JOB_MAX_MODS];
	uint64_t mod_off[RQ_JOB_MAX_MODS];
	uint64_t out_size;
	uint64_t in_size;         /* weight bytes read from SRC */
};

struct rq_plan {
	char *src_dir;            /* the directory actually read (resolved); remote: the label */
	const struct rq_src_reader *reader;  /* remote SRC (borrowed), else NULL; then
	                             srcs[].path is "<label>/<name>", for messages only */
	mode_t dir_mode;          /* its permission bits, owner and group: the mount's root */
	uid_t dir_uid;
	gid_t dir_gid;
	size_t nskipped;
	char **skipped;           /* one line per SRC entry not presented (a symlink leading
	                             out of SRC, a FIFO...), for the CLI/daemon to log */
	enum rq_recipe recipe;
	enum rq_scheme scheme;    /* RQ_SCHEME_NVFP4: the Laguna fix */
	enum rq_scheme mod_scheme;   /* what the jobs compute: the scheme, or for the Laguna fix
	                             its rule scheme (RQ_SCHEME_NVFP4 by default) */
	enum rq_recipe mod_recipe;   /* the jobs' recipe: recipe, except RQ_RECIPE_BF16 for a
	                             Laguna rule scheme of fp8-dynamic (its only arithmetic) */
	enum rq_observer observer;   /* the jobs' weight observer (opts->observer) */
	char *calib_observer;     /* --scheme nvfp4 (W4A4): the input scales' observer as the
	                             calibration file's __metadata__ "calib_observer" says (e.g.
	                             "static_minmax"), NULL when it does not say; independent of
	                             observer (either may be used with the other) */
	char *dropped_rule;       /* the ignore entry removed (Laguna fix), else NULL */
	size_t ndropped;          /* other schemes: SRC quantization_config.ignore entries */
	char **dropped;           /*   removed because every module they matched is now quantized */
	size_t nsrcs;
	struct rq_srcfile *srcs;
	size_t nfiles;
	struct rq_vfile *files;   /* sorted by name */
	size_t nmods;
	struct rq_module *mods;   /* sorted by name */
	size_t njobs;
	struct rq_job *jobs;
	uint64_t total_size;      /* sum of all virtual file sizes */
	void *keep_;              /* private: memory the MEM segments point into */
};

int rq_plan_build(const struct rq_plan_opts *o, struct rq_plan **out, struct rq_err *err);
void rq_plan_free(struct rq_plan *p);

/* Opens SRC file f (its resolved path) read-only: follows no symlink, does
 * not block on a FIFO planted since the scan, and checks it is still a
 * regular file. An fd, or -errno (-ELOOP, -EINVAL for a non-regular file). */
int rq_src_open(const struct rq_srcfile *f);

/* requantfs's own names in a checkpoint directory all begin with this: the
 * mount's control directory (.requantfs), export's record of linked files
 * (.requantfs-export.json) and export's private directory of temporaries
 * (.requantfs-tmp.XXXXXX); older exports' temporaries end in
 * RQ_OLD_TMP_SUFFIX. */
#define RQ_RESERVED_PREFIX ".requantfs"
#define RQ_OLD_TMP_SUFFIX ".requantfs-tmp"

/* Why a SRC entry's name (from a directory listing or a hub's siblings) is
 * not a name requantfs presents, in words ("is . or .."), or NULL when it
 * is one: empty, "." or "..", a '/' or '\\' in it, or one of our own names
 * (above). A name so refused is skipped with a warning (p->skipped) by the
 * plan, so plan, mount and export treat it alike. */
const char *rq_src_name_refused(const char *name);

/* Index of the virtual file called name, or -1. */
long rq_plan_find_file(const struct rq_plan *p, const char *name);
/* Index of the first segment of f that overlaps offset off (off < f->size). */
size_t rq_vfile_seg_at(const struct rq_vfile *f, uint64_t off);

/* Byte offsets of a module's outputs in its job's output (NVFP4 layouts). */
static inline uint64_t rq_mod_packed_off(const struct rq_plan *p, const struct rq_module *m)
{
	return p->jobs[m->job].mod_off[m->slot];
}
static inline uint64_t rq_mod_scales_off(const struct rq_plan *p, const struct rq_module *m)
{
	return rq_mod_packed_off(p, m) + m->rows * m->cols / 2;
}
/* Bytes of a module's source weight in SRC. */
static inline uint64_t rq_mod_in_bytes(const struct rq_module *m)
{
	return m->rows * m->cols * rq_src_size(m->dtype);
}
static inline uint64_t rq_mod_gs_off(const struct rq_plan *p, const struct rq_module *m)
{
	return rq_mod_scales_off(p, m) + m->rows * m->cols / 16;
}

#endif
