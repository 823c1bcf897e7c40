/* ckpt.h — read-only access to tensors of a checkpoint directory (or one
 * safetensors file) by name: shards are found through
 * model.safetensors.index.json when present (headers parsed lazily, so
 * shards never touched may be absent), else by parsing every *.safetensors. */
#ifndef RQ_PLAN_CKPT_H
#define RQ_PLAN_CKPT_H

#include <stddef.h>
#include <stdint.h>
#include "st/st.h"

struct rq_err;
struct rq_ckpt;

/* Reads a whole (small) file into a NUL-terminated malloc'd buffer. -errno. */
int rq_read_whole(const char *path, char **out, size_t *len);

int rq_ckpt_open(const char *path, struct rq_ckpt **out, struct rq_err *err);
/* The same on a remote SRC (hf://): the index, headers and tensors read
 * through r (plan.h's source reader), which must outlive the checkpoint. */
struct rq_src_reader;
int rq_ckpt_open_reader(const struct rq_src_reader *r, struct rq_ckpt **out,
                        struct rq_err *err);
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

/* Reads len bytes at offset at of a shard's data section (the offsets of
 * st_tensor begin/end: several neighbouring tensors in one read); the
 * shard's header must have been read (a tensor of it found). `what` names
 * the bytes in messages. */
int rq_ckpt_pread_data(struct rq_ckpt *c, int shard, uint64_t at, uint64_t len, void *buf,
                       const char *what, struct rq_err *err);

/* Every tensor name (parses every shard): calls fn for each; stops on non-zero. */
int rq_ckpt_each(struct rq_ckpt *c, int (*fn)(void *ctx, const char *name,
                 const struct st_tensor *t, int shard), void *ctx, struct rq_err *err);
const char *rq_ckpt_shard_path(const struct rq_ckpt *c, int shard);

/* The calibration scales: bits[i] = <names[i]>.input_global_scale from CALIB
 * (a 07-22 checkpoint directory or a `calib extract` file), checked to be an
 * F32 with one element, finite and positive. */
int rq_calib_lookup(const char *calib, char *const *modules, size_t n, uint32_t *bits,
                    struct rq_err *err);
/* One scale by its full name (<module>.input_global_scale) from an open
 * calibration checkpoint `calib` (named in messages), checked as rq_calib_check. */
int rq_calib_read_scale(struct rq_ckpt *c, const char *calib, const char *name, uint32_t *bits,
                        struct rq_err *err);
/* What lookup, extract and fetch share. */
/* Checks one calibration scale: t (from a header of `where`, named in
 * messages) must be an F32 with one element; when b (its 4 bytes, little
 * endian) is given, the value must be finite and positive: *bits gets it. */
int rq_calib_check(const char *name, const char *where, const struct st_tensor *t,
                   const uint8_t *b, uint32_t *bits, struct rq_err *err);

#endif
