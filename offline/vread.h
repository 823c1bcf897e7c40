/* vread.h — verify's reads of one checkpoint (internal to offline/).
 *
 * Local: each read goes to the file (rq_ckpt_pread). Remote (hf://, read by
 * HTTP range requests): a request costs a round trip (~50-150 ms to the
 * hub's CDN), so one request per tensor made `verify hf://...` of a
 * checkpoint with thousands of small tensors spend minutes waiting. Here
 * the caller first declares every tensor it will read (vread_need), then
 * reads them; a read that misses fetches one span: the bytes asked for,
 * extended over the next declared tensors of the same shard (in file order)
 * while the gap to the next one is at most VREAD_GAP and the span at most
 * VREAD_SPAN bytes; later reads inside a span are served from memory. At
 * most VREAD_SPANS spans (VREAD_MEM bytes in all) are kept, least recently
 * used dropped first, so memory stays bounded whatever the checkpoint; a
 * caller reading in file order (per dtype region: safetensors groups
 * tensors by dtype) makes about one request per VREAD_SPAN bytes needed. */
#ifndef RQ_OFFLINE_VREAD_H
#define RQ_OFFLINE_VREAD_H

#include <stdint.h>

struct rq_ckpt;
struct rq_err;
struct st_tensor;
struct vread;

#define VREAD_SPAN (64ull << 20)   /* bytes of one request at most */
#define VREAD_GAP (1ull << 20)     /* bytes of unneeded data a span may cross */
#define VREAD_SPANS 4              /* spans kept (one per dtype region, roughly) */
#define VREAD_MEM (128ull << 20)   /* their bytes in all */

/* remote: coalesce (else every read is direct). 0 or -ENOMEM. */
int vread_open(struct rq_ckpt *c, int remote, struct vread **out);
void vread_close(struct vread *v);   /* accepts NULL */

/* t (of shard) will be read. 0 or -ENOMEM. */
int vread_need(struct vread *v, int shard, const struct st_tensor *t);

/* Bytes [off, off + len) of tensor t of shard into buf. 0 or -errno (err). */
int vread_pread(struct vread *v, int shard, const struct st_tensor *t, uint64_t off, void *buf,
                uint64_t len, struct rq_err *err);

/* Requests made and bytes they fetched (remote; 0 when local). */
void vread_stats(const struct vread *v, uint64_t *requests, uint64_t *bytes);

#endif
