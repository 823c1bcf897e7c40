/* ckpt.h — read-only access to tensors of a checkpoint directory (or one
 * safetensors file) by name: shards are found through
 * model.safetensors.index.json when present (headers parsed lazily, so
 * shards never touched may be absent), else by parsing every *.safetensors. */
#ifndef RQ_FS_CKPT_H
#define RQ_FS_CKPT_H

#include <stddef.h>
#include <stdint.h>
#include "st/st.h"

struct rq_err;
struct rq_ckpt;

/* Reads a whole (small) file into a NUL-terminated malloc'd buffer. -errno. */
int rq_read_whole(const char *path, char **out, size_t *len);

int rq_ckpt_open(const char *path, struct rq_ckpt **out, struct rq_err *err);
void rq_ckpt_close(struct rq_ckpt *c);

/* Finds a tensor. -ENOENT when the checkpoint has no such tensor; other
 * errors (a shard named by the index is missing or corrupt) name the file. */
int rq_ckpt_find(struct rq_ckpt *c, const char *name, const struct st_tensor **t,
                 int *shard, struct rq_err *err);
/* Reads a found tensor's bytes (st_tensor end - begin) into buf. */
int rq_ckpt_read(struct rq_ckpt *c, int shard, const struct st_tensor *t, void *buf,
                 struct rq_err *err);

/* Reads len bytes at offset off inside a found tensor's data. */
int rq_ckpt_pread(struct rq_ckpt *c, int shard, const struct st_tensor *t, uint64_t off,
                  void *buf, uint64_t len, struct rq_err *err);

/* Every tensor name (parses every shard): calls fn for each; stops on non-zero. */
int rq_ckpt_each(struct rq_ckpt *c, int (*fn)(void *ctx, const char *name,
                 const struct st_tensor *t, int shard), void *ctx, struct rq_err *err);
const char *rq_ckpt_shard_path(const struct rq_ckpt *c, int shard);

/* The calibration scales: bits[i] = <names[i]>.input_global_scale from CALIB
 * (a 07-22 checkpoint directory or a `calib extract` file), checked to be an
 * F32 with one element, finite and positive. */
int rq_calib_lookup(const char *calib, char *const *modules, size_t n, uint32_t *bits,
                    struct rq_err *err);
/* Writes every *.input_global_scale of calib_dir into out_file (a small
 * safetensors file), atomically. *count gets the number of scales. */
int rq_calib_extract(const char *calib_dir, const char *out_file, size_t *count,
                     struct rq_err *err);

/* What extract and fetch share, so that both write the same bytes. */
/* Checks one calibration scale: t (from a header of `where`, named in
 * messages) must be an F32 with one element; when b (its 4 bytes, little
 * endian) is given, the value must be finite and positive: *bits gets it. */
int rq_calib_check(const char *name, const char *where, const struct st_tensor *t,
                   const uint8_t *b, uint32_t *bits, struct rq_err *err);
/* Writes the calibration file: names[i] = bits[i] as F32 [1], metadata
 * {"format":"pt","requantfs":"calib"}, the canonical layout (st_layout), so
 * the same set gives the same bytes whatever its order; tmp, fsync, rename. */
int rq_calib_write(const char *out_file, char *const *names, const uint32_t *bits, size_t n,
                   struct rq_err *err);

/* `calib fetch` (calib_fetch.c): the file rq_calib_extract writes, made
 * from a 07-22 checkpoint on a Hugging Face hub (hub/hub.h: endpoint NULL
 * for $HF_ENDPOINT or huggingface.co, the token) without downloading it:
 * model.safetensors.index.json whole (or, when the repository has none,
 * model.safetensors), then for each shard holding a scale its 8-byte header
 * length, its header, and the scalars (neighbours within a few KiB in one
 * range request). *count gets the number of scales, *stats (may be NULL)
 * what was transferred; progress (may be NULL) is called after every request. */
struct rq_hub_stats;
int rq_calib_fetch(const char *endpoint, const char *repo, const char *rev, const char *out_file,
                   size_t *count, struct rq_hub_stats *stats,
                   void (*progress)(void *ctx, const struct rq_hub_stats *s), void *ctx,
                   struct rq_err *err);

#endif
