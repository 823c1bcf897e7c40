/* cli_hf_cache.h — an hf:// SRC read from a mount's cache alone, for
 * `requantfs plan hf://... --cache DIR` with HF_HUB_OFFLINE=1.
 *
 * The file list comes from cli_hf_open_cached (the model API's answer kept
 * per commit under <cache>/hf/). The bytes the plan reads come from what a
 * mount of that commit left in the same cache, and from nowhere else:
 *  - a shard's head (8 + N bytes) from <cache>/hf/heads/<id>-<size>.head
 *    (fs/mount_remote.c keeps it there, its SHA-256 appended; a damaged one
 *    is not used);
 *  - anything else (config.json, the index, a head not kept) from the chunk
 *    store <cache>/remote/ opened offline (remote/rstore.h): a file's
 *    assembled, verified copy or its stored chunks, keyed by rq_rs_file_id.
 * A read of bytes the cache lacks fails -ENETUNREACH naming the file, the
 * range and the cache, and saying to plan online or mount it once online. */
#ifndef RQ_TOOLS_CLI_HF_CACHE_H
#define RQ_TOOLS_CLI_HF_CACHE_H

#include "plan/plan.h"

struct rq_err;
struct cli_hf;
struct cli_hf_cache;

/* hf (borrowed, outlives the result) opened by cli_hf_open_cached on
 * cache_dir offline; cache_dir must exist (it is not created). 0, -ENOENT
 * (no such cache directory), -ENOMEM, or the store's -errno, with a message. */
int cli_hf_cache_open(struct cli_hf *hf, const char *cache_dir, struct cli_hf_cache **out,
                      struct rq_err *err);
/* The reader of hf's files (its label and list) answering from the cache. */
const struct rq_src_reader *cli_hf_cache_reader(const struct cli_hf_cache *c);
void cli_hf_cache_close(struct cli_hf_cache *c);

#endif
