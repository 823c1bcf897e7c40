/* plan_int.h — shared between the plan's source files (not public). */
#ifndef RQ_PLAN_PLAN_INT_H
#define RQ_PLAN_PLAN_INT_H

#include "plan/plan.h"
#include "st/st.h"

struct rq_err;

/* srcdir.c: the regular files of SRC, sorted by name, and the SRC directory
 * actually read (resolved; a hub repo dir becomes its refs/main snapshot) in
 * p->src_dir with its mode/owner. Only regular files are presented; a
 * symlink is followed only when its target stays inside SRC or, for a hub
 * snapshot, inside the same repo's blobs/ directory. Other entries (and a
 * dangling link, a link loop, a file this process cannot open) are skipped
 * (p->skipped says why), except that a checkpoint file (config.json, the
 * index, *.safetensors) that would be skipped is refused. An entry whose
 * name rq_src_name_refused refuses is skipped, whatever it is. */
int rq_src_scan(struct rq_plan *p, const char *src, struct rq_err *err);
/* One line more in p->skipped (a SRC entry not presented, for the CLI and
 * the daemon to log), its %s arguments escaped (base/esc.h). 0 or -ENOMEM. */
int rq_plan_skip(struct rq_plan *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* srcread.c: SRC's files listed by p->reader (remote SRC) instead of a scan. */
int rq_src_scan_reader(struct rq_plan *p, const struct rq_src_reader *r, struct rq_err *err);
/* A whole small SRC file (local or remote) into a NUL-terminated malloc'd
 * buffer; at most 256 MiB. */
int rq_src_whole(const struct rq_plan *p, const struct rq_srcfile *f, char **out, size_t *len,
                 struct rq_err *err);
/* The safetensors header of SRC file f (local: pread; remote: two range reads,
 * the 8-byte length then the header). */
int rq_src_header(const struct rq_plan *p, const struct rq_srcfile *f, struct st_header **out,
                  struct rq_err *err);
/* The SRC file called name, or NULL. */
const struct rq_srcfile *rq_src_find(const struct rq_plan *p, const char *name);
void rq_srcfiles_free(struct rq_srcfile *f, size_t n);

/* plan_obj.c: a zeroed plan ready to keep memory (freed by rq_plan_free), or
 * NULL. */
struct rq_plan *rq_plan_new(void);
/* Keeps every allocation the plan's MEM segments point into. */
int rq_plan_keep(struct rq_plan *p, void *mem);
/* Sorts p->mods by name, the order rq_plan_find_mod searches. */
void rq_plan_sort_mods(struct rq_plan *p);
/* Index of module `name` in p->mods (sorted by name), or -1. */
long rq_plan_find_mod(const struct rq_plan *p, const char *name);

struct rq_rules;

/* plan_scheme.c: for a data-free scheme (o->scheme != RQ_SCHEME_NVFP4),
 * chooses p->mods (sorted by name, located, laid out) and p->jobs, the
 * ignore entries to remove (p->dropped; ign = SRC's
 * quantization_config.ignore, NULL when SRC has no quantization_config) and
 * writes the virtual config.json (*new_config, malloc'd) through qconfig.c.
 * cfg_path names SRC's config.json in messages. */
int rq_plan_scheme(struct rq_plan *p, const struct rq_plan_opts *o, const struct rq_rules *ign,
                   struct st_header **hdr, const char *config, size_t config_len,
                   const char *cfg_path, char **new_config, size_t *new_len,
                   struct rq_err *err);

/* plan_w4a4.c (--scheme nvfp4, W4A4): every module's input_global_scale from
 * calib (a `calib run` file; -EINVAL without one, -ENOENT naming the module
 * and the file when one is missing), and the ignore list oneshot writes: the
 * Linear-like modules of SRC not quantized, plus lm_head, sorted (*out and
 * its strings malloc'd). */
int rq_plan_w4a4_calib(struct rq_plan *p, const char *calib, struct rq_err *err);
int rq_plan_w4a4_ignore(const struct rq_plan *p, struct st_header **hdr, char ***out,
                        size_t *nout);

/* plan_rule.c: the Laguna fix's config.json for a --rule-scheme other than
 * nvfp4: cfg without ignore entry `rule` and with one more config group for
 * p->mod_scheme whose targets are anchored re: per layer over p->mods (hdr:
 * every SRC shard's header, to check that a regex matches nothing else). */
int rq_plan_rule_config(const struct rq_plan *p, const char *cfg, size_t n, size_t rule,
                        struct st_header **hdr, char **out, size_t *out_len,
                        struct rq_err *err);

/* plan_files.c: the Laguna fix's config.json: cfg without ignore entry k
 * (its array element, one separating comma and the whitespace between). */
int rq_plan_laguna_config(const char *cfg, size_t n, size_t k, char **out, size_t *out_len,
                          struct rq_err *err);

/* plan_files.c: the virtual files of p (whose mods and jobs are decided):
 * config.json becomes `config` (malloc'd; taken over, freed on failure too),
 * the index and the shards holding modules are rewritten, the rest is SRC. */
int rq_plan_layout(struct rq_plan *p, char *config, size_t config_len, struct st_header **hdr,
                   struct rq_err *err);

#endif
