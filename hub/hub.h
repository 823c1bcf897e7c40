/* hub.h — bytes of files in a Hugging Face hub repository over HTTP(S)
 * (libcurl): a whole small file, or one byte range of a large one.
 *
 * URL: ${endpoint}/{repo}/resolve/{rev}/{file}, endpoint = the argument, else
 * $HF_ENDPOINT, else https://huggingface.co (trailing '/' dropped); rev is
 * percent-encoded whole (refs/pr/1 -> refs%2Fpr%2F1), file keeps its '/'.
 * Token (sent as "Authorization: Bearer"): $HF_TOKEN, else the file
 * huggingface_hub writes: $HF_TOKEN_PATH, else $HF_HOME/token, else
 * $XDG_CACHE_HOME/huggingface/token, else ~/.cache/huggingface/token; none
 * is fine (public repositories).
 *
 * Every request follows redirects (the hub sends resolve URLs of large files
 * to a CDN); the Range goes along, the Authorization header does not leave
 * the host it was meant for (libcurl's rule; CURLOPT_UNRESTRICTED_AUTH is
 * never set). 429, 5xx, time-outs and dropped connections are retried with
 * exponential back-off (RQ_HUB_TRIES tries, waits 0.5 s, 1 s, 2 s, or the
 * server's Retry-After up to 10 s). Time-outs: connecting, and a transfer
 * stalled (< 1 B/s) for $HF_HUB_DOWNLOAD_TIMEOUT seconds (default 10); and
 * every try has a deadline scaled to the bytes asked for (a range's length,
 * a whole file's Content-Length, else its max):
 *     deadline = HF_HUB_DOWNLOAD_TIMEOUT + bytes / $REQUANTFS_HUB_MIN_RATE
 * (bytes per second, K/M/G suffixes, default 64K), so that a server that
 * trickles just above the stall limit fails the try instead of holding the
 * caller for days. A range request needs "206 Partial
 * Content" with exactly the Content-Range asked for: a 200 means the server
 * ignored Range, and the transfer is aborted when its headers end, before
 * the body is read. Messages name the URL (never the token) and the status.
 *
 * One handle is one connection (kept alive between requests); not
 * thread-safe: one thread per handle, except rq_hub_cancel. */
#ifndef RQ_HUB_HUB_H
#define RQ_HUB_HUB_H

#include <stddef.h>
#include <stdint.h>

struct rq_err;
struct rq_hub;

#define RQ_HUB_DEFAULT_ENDPOINT "https://huggingface.co"
#define RQ_HUB_TRIES 4

/* What a handle has transferred so far. */
struct rq_hub_stats {
	uint64_t requests;   /* HTTP responses (not 1xx) received: redirects and retries count */
	uint64_t bytes;      /* response body bytes received (error bodies included; a
	                        gzipped whole file counts as decompressed) */
	uint64_t retries;    /* requests repeated after a retryable failure */
};

/* endpoint may be NULL ($HF_ENDPOINT, else the default). Reads the token.
 * -EINVAL for a bad endpoint or token, -ENOMEM. */
int rq_hub_open(const char *endpoint, struct rq_hub **out, struct rq_err *err);
void rq_hub_close(struct rq_hub *h);

/* Cancels h for good, from any thread: the request in flight ends at once
 * (its sockets are shut down, a back-off wait is cut short) and every
 * request on h, now or later, fails -ECANCELED. For a prompt close of a
 * pool of handles (remote/rstore.c). */
void rq_hub_cancel(struct rq_hub *h);

/* Called after every request (for a progress line); may be NULL. */
void rq_hub_set_progress(struct rq_hub *h, void (*fn)(void *ctx, const struct rq_hub_stats *s),
                         void *ctx);
void rq_hub_get_stats(const struct rq_hub *h, struct rq_hub_stats *s);

/* Where the token came from, for messages: "$HF_TOKEN", a file path, or NULL
 * when no token is sent. */
const char *rq_hub_token_source(const struct rq_hub *h);

/* The resolve URL of file, for messages (never holds the token). */
int rq_hub_url(const struct rq_hub *h, const char *repo, const char *rev, const char *file,
               char *buf, size_t len);

/* Reads bytes [off, off + len) of file into buf (len >= 1). *size (may be
 * NULL) gets the file's total size from Content-Range. Errors: -ENOENT (404),
 * -EACCES (401/403), -EPROTO (Range ignored, wrong Content-Range, 416, short
 * body), -EIO (other statuses, network failures after the retries). */
int rq_hub_fetch_range(struct rq_hub *h, const char *repo, const char *rev, const char *file,
                       uint64_t off, uint64_t len, void *buf, uint64_t *size,
                       struct rq_err *err);

/* The file size the server stated in the final response to the last
 * rq_hub_fetch_range on h, whether it succeeded or not: its Content-Range
 * total ("bytes A-B/TOTAL", or a 416's "bytes * /TOTAL"), else the
 * Content-Length of a 200 that ignored the Range (the whole body's length);
 * RQ_HUB_SIZE_UNKNOWN when it stated none (a fault, no answer). Lets a
 * caller tell a listed size the server contradicts (a file shorter or longer
 * than its listing) from any other failure. */
#define RQ_HUB_SIZE_UNKNOWN UINT64_MAX
uint64_t rq_hub_server_size(const struct rq_hub *h);

/* Reads a whole file of at most max bytes into a NUL-terminated malloc'd
 * buffer (*out, *len). -EFBIG when it is larger; other errors as above. */
int rq_hub_fetch_file(struct rq_hub *h, const char *repo, const char *rev, const char *file,
                      size_t max, char **out, size_t *len, struct rq_err *err);

/* The hub's model API for repo at rev (huggingface_hub's model_info with
 * files_metadata): GET ${endpoint}/api/models/{repo}/revision/{rev}?blobs=true
 * (rev percent-encoded whole), its JSON body (at most max bytes) into a
 * NUL-terminated malloc'd buffer: {"sha": commit, "siblings": [{"rfilename",
 * "size", "blobId", "lfs": {"sha256", "size", "pointerSize"}}...]}. Errors as
 * rq_hub_fetch_file. */
int rq_hub_fetch_model_info(struct rq_hub *h, const char *repo, const char *rev, size_t max,
                            char **out, size_t *len, struct rq_err *err);

#endif
