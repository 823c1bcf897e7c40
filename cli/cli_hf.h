/* cli_hf.h — SRC given as hf://ORG/NAME[@REV]: the revision pinned to its
 * commit through the hub's model API (file list with sizes and LFS sha256),
 * then a plan/ source reader whose reads are HTTP range requests of that
 * commit, so a branch moved meanwhile never mixes revisions. */
#ifndef RQ_TOOLS_CLI_HF_H
#define RQ_TOOLS_CLI_HF_H

#include <stdint.h>
#include "plan/plan.h"

struct rq_err;
struct cli_hf;

/* 1 when s starts with "hf://". */
int cli_hf_is(const char *s);
/* For the engine's commands (generate, compare, calib run), which read a
 * model directory: when arg is hf://..., prints why not and what to do
 * instead and returns 2 (a usage error); else -1. */
int cli_hf_engine_refuse(const char *cmd, const char *arg);

/* Resolves spec (hf://ORG/NAME[@REV], REV default main) on endpoint (NULL:
 * $HF_ENDPOINT, else the hub). 0, -EINVAL (not a repo id), -ENOENT (no such
 * repo or revision), -EACCES (gated/private: the message says what to do),
 * -EPROTO (an answer not shaped like the hub's), -EIO, -ENOMEM. */
int cli_hf_open(const char *spec, const char *endpoint, struct cli_hf **out, struct rq_err *err);
/* cli_hf_open keeping the model API's answer per commit, and REV -> commit,
 * under <cache_dir>/hf/ (as huggingface_hub's refs/); with HF_HUB_OFFLINE=1
 * it connects to nothing and answers from there (-ENETUNREACH, saying what
 * to do, for a revision never seen). Reads then fail: the caller reads
 * through its chunk store. */
int cli_hf_open_cached(const char *spec, const char *endpoint, const char *cache_dir,
                       struct cli_hf **out, struct rq_err *err);
/* 1 when $HF_HUB_OFFLINE is 1, true, yes or on (huggingface_hub's values). */
int cli_hf_offline(void);
void cli_hf_close(struct cli_hf *s);

const struct rq_src_reader *cli_hf_reader(const struct cli_hf *s);
const char *cli_hf_commit(const struct cli_hf *s);   /* 40 hex */
const char *cli_hf_repo(const struct cli_hf *s);     /* ORG/NAME */
/* The git blob id of file i of the reader (40 hex), or NULL. */
const char *cli_hf_blob_id(const struct cli_hf *s, size_t i);
/* Every file of SRC can be verified (issue "Hostile inputs, fourth round",
 * item 1): the model API lists an LFS sha256 or a git blob id for it (the
 * hub does for every real file; a mirror or proxy may not). 0, else -EPROTO
 * naming the first file that cannot (and how many more), the message ending
 * with `what`: what the caller's user can do (mount, plan: --remote-verify
 * none; export: nothing, it uses no unverified byte). */
int cli_hf_check_verifiable(const struct cli_hf *s, const char *what, struct rq_err *err);
/* Files the repo lists but SRC leaves out (in a subdirectory). */
size_t cli_hf_skipped(const struct cli_hf *s);
/* HTTP requests made and body bytes received so far (the API call included). */
void cli_hf_traffic(const struct cli_hf *s, uint64_t *requests, uint64_t *bytes);

/* --calib hf://ORG/NAME[@REV]: the scales fetched as `calib fetch` does
 * (headers and 4-byte scalars only) into a new private temporary file,
 * whose path (*path, malloc'd) the caller unlinks and frees once the plan is
 * built. 0 or -errno with a message naming the repo. */
int cli_hf_calib(const char *spec, const char *endpoint, char **path, struct rq_err *err);
/* The same for a mount, kept in its cache as huggingface_hub keeps a file:
 * REV resolved to its commit (the model API's answer kept, as for a SRC),
 * the scales fetched once per commit into <cache_dir>/hf/models--ORG--NAME/
 * calib/<commit>.calib (*path, malloc'd; the caller keeps the file). With
 * HF_HUB_OFFLINE=1 a commit or a branch seen before is served from there;
 * anything else is refused (-ENETUNREACH) saying what to do. */
int cli_hf_calib_cached(const char *spec, const char *endpoint, const char *cache_dir,
                        char **path, struct rq_err *err);

#endif
