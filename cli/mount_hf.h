/* mount_hf.h — what the mount daemon opens for SRC hf://ORG/NAME[@REV]
 * (issue 20): the revision pinned to its commit (cli_hf; the model API's
 * answer kept under the mount's cache, so HF_HUB_OFFLINE=1 resolves REV as
 * last seen), the chunk store of that commit (remote/rstore.h, under the
 * mount's cache), and --calib hf://... fetched to a temporary file. Opened
 * in the daemon after the fork: curl handles and the store's threads must
 * be the daemon's own. */
#ifndef RQ_TOOLS_MOUNT_HF_H
#define RQ_TOOLS_MOUNT_HF_H

struct rq_err;
struct rq_mount;
struct rq_mount_opts;
struct mount_hf;

/* o->src (hf://...) and o->calib (a path, or hf://...) are replaced: src by
 * the label hf://ORG/NAME@<commit>, calib by the temporary file; o->rs,
 * rfiles, nrfiles are set. Everything stays valid until mount_hf_close. */
int mount_hf_open(struct rq_mount_opts *o, const char *endpoint, struct mount_hf **out,
                  struct rq_err *err);
/* The store logs into m's log from now on (NULL: nowhere, before m closes).
 * Also removes the calibration's temporary file (the plan is built). */
void mount_hf_attach(struct mount_hf *h, struct rq_mount *m);
void mount_hf_close(struct mount_hf *h);

#endif
