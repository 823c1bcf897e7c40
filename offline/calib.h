/* calib.h — the calibration file (`requantfs calib extract|fetch`): the
 * input_global_scale scalars of a 07-22 checkpoint as one small safetensors
 * file that --calib takes; extract reads a checkpoint on disk, fetch the hub. */
#ifndef RQ_OFFLINE_CALIB_H
#define RQ_OFFLINE_CALIB_H

#include <stddef.h>
#include <stdint.h>

struct rq_err;

/* Writes every *.input_global_scale of calib_dir into out_file (a small
 * safetensors file), atomically. *count gets the number of scales. */
int rq_calib_extract(const char *calib_dir, const char *out_file, size_t *count,
                     struct rq_err *err);

/* Every *.input_global_scale of path (a checkpoint directory or a
 * calibration file) with its F32 bits, in the checkpoint's order;
 * release with rq_calib_free. -ENOENT when there is none. */
int rq_calib_load(const char *path, char ***names, uint32_t **bits, size_t *count,
                  struct rq_err *err);
void rq_calib_free(char **names, uint32_t *bits, size_t n);

/* Writes the calibration file: names[i] = bits[i] as F32 [1], metadata
 * {"format":"pt","requantfs":"calib"}, the canonical layout (st_layout), so
 * the same set gives the same bytes whatever its order; tmp, fsync, rename. */
int rq_calib_write(const char *out_file, char *const *names, const uint32_t *bits, size_t n,
                   struct rq_err *err);

/* The same with more __metadata__: extra (may be NULL) is JSON members
 * ("key":"value",...; safetensors wants string values) after "requantfs". */
int rq_calib_write_meta(const char *out_file, char *const *names, const uint32_t *bits, size_t n,
                        const char *extra, struct rq_err *err);

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
