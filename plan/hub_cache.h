/* hub_cache.h — Hugging Face repo ids (ORG/NAME[@REV]) resolved to a snapshot
 * directory of the local hub cache, the way huggingface_hub lays it out:
 *
 *   <cache>/models--ORG--NAME/refs/<branch or tag>   the commit hash, 40 hex
 *   <cache>/models--ORG--NAME/snapshots/<commit>/    links into ../../blobs/
 *
 * Nothing is downloaded: a repo or revision that is not in the cache is an
 * error that says how to get it. The caller decides whether an argument is a
 * path or a repo id (an existing path always wins); these functions only look
 * at the cache. */
#ifndef RQ_PLAN_HUB_CACHE_H
#define RQ_PLAN_HUB_CACHE_H

struct rq_err;

/* 1 when s is shaped like a hub model id with an optional revision:
 * ORG/NAME[@REV]. ORG and NAME: 1..96 of [A-Za-z0-9._-], not starting or
 * ending with '.' or '-', no "--" or ".." (huggingface_hub's validate_repo_id;
 * a bare NAME without ORG is not taken: it reads as a relative path). REV:
 * 1..255 of [A-Za-z0-9._/-], no part starting with '.', no "//", no leading
 * or trailing '/' (branch names such as refs/pr/1 are allowed). Says nothing about whether
 * the repo is in the cache. */
int rq_hub_is_repo_id(const char *s);

/* The hub cache directory, in huggingface_hub's order (constants.py):
 * $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE (legacy), else $HF_HOME/hub,
 * else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub. A
 * leading "~" is expanded from $HOME; a variable set to "" counts as unset.
 * *dir is malloc'd; *from (may be NULL) names where it came from, e.g.
 * "$HF_HOME/hub" (a static string). 0 or -ENOMEM, -ENOENT (no home). */
int rq_hub_cache_dir(char **dir, const char **from);

/* The snapshot directory (absolute, symlinks resolved; malloc'd) that spec
 * (ORG/NAME[@REV]) names in the hub cache. REV absent means main. REV is
 * looked up as refs/<REV> first (a branch or tag: the file holds the commit),
 * then as snapshots/<REV>, then, when it is 7 to 40 hex digits, as the unique
 * snapshots/ entry it prefixes. Returns 0, -EINVAL (spec is not a repo id),
 * -ENOENT (repo, revision or snapshot not in the cache: the message says what
 * is missing and how to download it), -ENOTUNIQ (a hash prefix matching more
 * than one snapshot; they are listed), -EPROTO (a refs/ file not holding a
 * commit hash), -ENOMEM. */
int rq_hub_resolve(const char *spec, char **snapshot_dir, struct rq_err *err);

#endif
