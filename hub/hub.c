/* hub.c — whole files and byte ranges of hub files over libcurl (hub.h).
 *
 * One request, as the callbacks see it (libcurl calls the header callback
 * for every response of a redirect chain):
 *
 *   status line ──> headers ──> blank line ─┬─ 1xx/3xx: next response (libcurl follows Location)
 *     (reset the                            ├─ 200 on a range request: abort (Range ignored)
 *      response)                            ├─ 200 with Content-Length > max: abort (too big)
 *                                           └─ else: body ──> write callback
 *
 * The body of the expected status (206 for a range, 200 for a whole file)
 * goes to the caller's buffer; any other body is kept only for its first
 * bytes (the message) and abandoned past ERR_BODY_MAX. After the transfer
 * the status decides: done, retry (429, 5xx, network), or a message.
 *
 * The order of this folder (held by tests/tools/test_layout.py): each file
 * calls only the files below it.
 *
 *   hub.c  whole files and byte ranges of hub files over libcurl
 */
#include "hub/hub.h"
#include "base/err.h"

#include <curl/curl.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define ERR_BODY_MAX (64 * 1024)   /* bytes of an error response read before hanging up */
#define BACKOFF_MS 500             /* first wait; doubles each try */
#define RETRY_AFTER_MAX_S 10       /* the most of a server's Retry-After we honour */
#define TIMEOUT_S 10               /* huggingface_hub's HF_HUB_DOWNLOAD_TIMEOUT default */
#define MIN_RATE (64 * 1024)       /* bytes/s a transfer may not stay under (the deadline) */
#define MAX_SOCKS 8                /* sockets of one handle open at once (endpoint, CDN, ...) */

struct rq_hub {
	char *endpoint;                /* no trailing '/' */
	char *token;                   /* NULL: anonymous */
	char *token_src;               /* "$HF_TOKEN" or the token file's path */
	CURL *curl;                    /* one connection, reused */
	struct curl_slist *hdrs;       /* Authorization (when a token), Accept */
	long timeout_s;                /* connect and stall limit; the deadline's base */
	uint64_t min_rate;             /* bytes/s: the deadline's floor rate (> 0) */
	struct rq_hub_stats st;
	uint64_t server_size;          /* rq_hub_server_size: the last range request's */
	void (*progress)(void *ctx, const struct rq_hub_stats *s);
	void *progress_ctx;
	/* rq_hub_cancel, the one cross-thread entry: it sets `cancelled` and
	 * shuts down every socket in socks[] (under sock_mu, which also guards
	 * socks[] against the open/close socket callbacks of h's thread, so a
	 * shut-down descriptor is never one already closed and reused). */
	atomic_int cancelled;
	pthread_mutex_t sock_mu;
	int socks[MAX_SOCKS];           /* -1: free slot; sockets libcurl opened */
};

/* One perform's state; the response fields are reset at each status line. */
struct xfer {
	struct rq_hub *h;
	int range;                     /* 1: [off, off + len) into buf; 0: whole file into *wbuf */
	uint64_t off, len;
	uint8_t *buf;
	char *wbuf;                    /* whole file: grows up to max (+1 for the NUL) */
	size_t wcap, max;
	uint64_t got;                  /* body bytes stored */
	/* the current response */
	long status;
	int have_cr, cr_total_known;
	uint64_t cr_a, cr_b, cr_total; /* Content-Range: bytes A-B/TOTAL */
	uint64_t clen;                 /* Content-Length, 0 when absent */
	long retry_after;              /* seconds, 0 when absent */
	char xerr[256];                /* the hub's X-Error-Message */
	char ebody[160];               /* the start of an error body */
	size_t ebody_len;
	uint64_t body;                 /* body bytes received of this response */
	/* the deadline of one try (see deadline_ms) */
	uint64_t expect;               /* bytes the deadline is for: the range, Content-Length
	                                  of a whole file once known, else max */
	struct timespec t0;            /* when the try began (CLOCK_MONOTONIC) */
	/* why the transfer was aborted from a callback */
	int ignored_range, too_big, overflow, late;
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;

static void global_init(void)
{
	global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static char *trim_dup(const char *s, size_t n)
{
	while (n && isspace((unsigned char)*s))
		s++, n--;
	while (n && isspace((unsigned char)s[n - 1]))
		n--;
	return strndup(s, n);
}

/* The token: $HF_TOKEN, else huggingface_hub's token file. A missing file
 * means anonymous; an unreadable one is an error (the user meant it). */
static int read_token(struct rq_hub *h, struct rq_err *err)
{
	const char *env = getenv("HF_TOKEN");
	if (env && *env) {
		h->token = trim_dup(env, strlen(env));
		h->token_src = strdup("$HF_TOKEN");
	} else {
		char path[4096];
		const char *p = getenv("HF_TOKEN_PATH"), *home = getenv("HF_HOME");
		const char *xdg = getenv("XDG_CACHE_HOME"), *uh = getenv("HOME");
		if (p && *p)
			snprintf(path, sizeof path, "%s", p);
		else if (home && *home)
			snprintf(path, sizeof path, "%s/token", home);
		else if (xdg && *xdg)
			snprintf(path, sizeof path, "%s/huggingface/token", xdg);
		else if (uh && *uh)
			snprintf(path, sizeof path, "%s/.cache/huggingface/token", uh);
		else
			return 0;
		FILE *f = fopen(path, "re");
		if (!f) {
			if (errno == ENOENT || errno == ENOTDIR)
				return 0;
			return rq_errf(err, -errno, "token file %s: %s", path, strerror(errno));
		}
		char buf[4096];
		size_t n = fread(buf, 1, sizeof buf, f);
		fclose(f);
		h->token = trim_dup(buf, n);
		h->token_src = strdup(path);
	}
	if (!h->token || !h->token_src)
		return -ENOMEM;
	if (!*h->token) {                 /* an empty file: anonymous */
		free(h->token);
		free(h->token_src);
		h->token = h->token_src = NULL;
		return 0;
	}
	for (const char *c = h->token; *c; c++)
		if (*c < 0x21 || *c > 0x7e)
			return rq_errf(err, -EINVAL, "the token from %s has a character that cannot go "
			               "into an HTTP header", h->token_src);
	return 0;
}

int rq_hub_open(const char *endpoint, struct rq_hub **out, struct rq_err *err)
{
	pthread_once(&global_once, global_init);
	if (global_rc != CURLE_OK)
		return rq_errf(err, -EIO, "libcurl: %s", curl_easy_strerror(global_rc));
	if (!endpoint || !*endpoint)
		endpoint = getenv("HF_ENDPOINT");
	if (!endpoint || !*endpoint)
		endpoint = RQ_HUB_DEFAULT_ENDPOINT;
	if (strncmp(endpoint, "http://", 7) && strncmp(endpoint, "https://", 8))
		return rq_errf(err, -EINVAL, "hub endpoint '%s' is not an http:// or https:// URL",
		               endpoint);
	struct rq_hub *h = calloc(1, sizeof *h);
	if (!h)
		return -ENOMEM;
	int rc = -ENOMEM;
	h->server_size = RQ_HUB_SIZE_UNKNOWN;
	pthread_mutex_init(&h->sock_mu, NULL);
	for (int i = 0; i < MAX_SOCKS; i++)
		h->socks[i] = -1;
	h->endpoint = strdup(endpoint);
	if (!h->endpoint)
		goto fail;
	for (size_t l = strlen(h->endpoint); l > 8 && h->endpoint[l - 1] == '/'; l--)
		h->endpoint[l - 1] = 0;
	h->timeout_s = TIMEOUT_S;
	const char *t = getenv("HF_HUB_DOWNLOAD_TIMEOUT");
	if (t && *t) {
		char *end;
		double v = strtod(t, &end);
		if (*end || !(v >= 1 && v <= 3600)) {
			rc = rq_errf(err, -EINVAL, "HF_HUB_DOWNLOAD_TIMEOUT='%s' is not a number of seconds "
			             "from 1 to 3600", t);
			goto fail;
		}
		h->timeout_s = (long)v;
	}
	h->min_rate = MIN_RATE;
	t = getenv("REQUANTFS_HUB_MIN_RATE");
	if (t && *t) {
		char *end;
		double v = strtod(t, &end);
		double mul = *end == 'K' ? 1024.0 : *end == 'M' ? 1048576.0 : *end == 'G' ? 1073741824.0
		                                                                          : 1.0;
		if (mul > 1)
			end++;
		if (*end || !(v * mul >= 1 && v * mul <= 1e12)) {
			rc = rq_errf(err, -EINVAL, "REQUANTFS_HUB_MIN_RATE='%s' is not a rate in bytes per "
			             "second from 1 to 1e12 (K, M, G: binary multiples)", t);
			goto fail;
		}
		h->min_rate = (uint64_t)(v * mul);
	}
	rc = read_token(h, err);
	if (rc)
		goto fail;
	rc = -ENOMEM;
	if (h->token) {
		char *line = malloc(strlen(h->token) + 32);
		if (!line)
			goto fail;
		sprintf(line, "Authorization: Bearer %s", h->token);
		struct curl_slist *l = curl_slist_append(NULL, line);
		free(line);
		if (!l)
			goto fail;
		h->hdrs = l;
	}
	h->curl = curl_easy_init();
	if (!h->curl)
		goto fail;
	*out = h;
	return 0;
fail:
	rq_hub_close(h);
	return rc;
}

void rq_hub_close(struct rq_hub *h)
{
	if (!h)
		return;
	if (h->curl)
		curl_easy_cleanup(h->curl);
	curl_slist_free_all(h->hdrs);
	if (h->token)
		memset(h->token, 0, strlen(h->token));
	free(h->token);
	free(h->token_src);
	free(h->endpoint);
	pthread_mutex_destroy(&h->sock_mu);
	free(h);
}

void rq_hub_cancel(struct rq_hub *h)
{
	pthread_mutex_lock(&h->sock_mu);
	atomic_store(&h->cancelled, 1);
	for (int i = 0; i < MAX_SOCKS; i++)
		if (h->socks[i] >= 0)
			shutdown(h->socks[i], SHUT_RDWR);
	pthread_mutex_unlock(&h->sock_mu);
}

/* libcurl's socket open and close, recorded for rq_hub_cancel. */
static curl_socket_t on_open_socket(void *vh, curlsocktype purpose, struct curl_sockaddr *a)
{
	struct rq_hub *h = vh;
	(void)purpose;
	pthread_mutex_lock(&h->sock_mu);
	int fd = atomic_load(&h->cancelled) ? -1
	         : socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
	int slot = -1;
	for (int i = 0; fd >= 0 && i < MAX_SOCKS && slot < 0; i++)
		if (h->socks[i] < 0)
			slot = i;
	if (fd >= 0 && slot < 0) {          /* more than MAX_SOCKS at once: not expected */
		close(fd);
		fd = -1;
	}
	if (fd >= 0)
		h->socks[slot] = fd;
	pthread_mutex_unlock(&h->sock_mu);
	return fd >= 0 ? fd : CURL_SOCKET_BAD;
}

static int on_close_socket(void *vh, curl_socket_t fd)
{
	struct rq_hub *h = vh;
	pthread_mutex_lock(&h->sock_mu);
	for (int i = 0; i < MAX_SOCKS; i++)
		if (h->socks[i] == fd)
			h->socks[i] = -1;
	int r = close(fd);
	pthread_mutex_unlock(&h->sock_mu);
	return r;
}

void rq_hub_set_progress(struct rq_hub *h, void (*fn)(void *ctx, const struct rq_hub_stats *s),
                         void *ctx)
{
	h->progress = fn;
	h->progress_ctx = ctx;
}

void rq_hub_get_stats(const struct rq_hub *h, struct rq_hub_stats *s)
{
	*s = h->st;
}

uint64_t rq_hub_server_size(const struct rq_hub *h)
{
	return h->server_size;
}

const char *rq_hub_token_source(const struct rq_hub *h)
{
	return h->token_src;
}

/* Appends s percent-encoded (RFC 3986 unreserved kept, and '/' when keep_slash). */
static int put_enc(char *buf, size_t len, size_t *at, const char *s, int keep_slash)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		int plain = isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' ||
		            (keep_slash && c == '/');
		int w = plain ? snprintf(buf + *at, len - *at, "%c", c)
		              : snprintf(buf + *at, len - *at, "%%%02X", c);
		if (w < 0 || (size_t)w >= len - *at)
			return -ENAMETOOLONG;
		*at += (size_t)w;
	}
	return 0;
}

int rq_hub_url(const struct rq_hub *h, const char *repo, const char *rev, const char *file,
               char *buf, size_t len)
{
	if (!*repo || !*rev || !*file || strstr(repo, "..") || strstr(file, "..") ||
	    repo[0] == '/' || file[0] == '/')
		return -EINVAL;
	for (const char *c = repo; *c; c++)
		if (!isalnum((unsigned char)*c) && !strchr("-._/", *c))
			return -EINVAL;
	int w = snprintf(buf, len, "%s/", h->endpoint);
	if (w < 0 || (size_t)w >= len)
		return -ENAMETOOLONG;
	size_t at = (size_t)w;
	int rc = put_enc(buf, len, &at, repo, 1);
	if (!rc)
		rc = put_enc(buf, len, &at, "/resolve/", 1);
	if (!rc)
		rc = put_enc(buf, len, &at, rev, 0);
	if (!rc)
		rc = put_enc(buf, len, &at, "/", 1);
	if (!rc)
		rc = put_enc(buf, len, &at, file, 1);
	return rc;
}

/* The deadline of one try: HF_HUB_DOWNLOAD_TIMEOUT (connecting, the first
 * byte, a redirect) plus the bytes asked for at the floor rate,
 *     deadline_ms = 1000 * timeout_s + 1000 * expect / min_rate
 * so that a server trickling just above the stall limit (1 B/s) cannot hold
 * a request for days: the try is abandoned and retried like a stall. */
static uint64_t deadline_ms(const struct rq_hub *h, uint64_t expect)
{
	double ms = 1000.0 * (double)h->timeout_s + 1000.0 * (double)expect / (double)h->min_rate;
	return ms > 1e15 ? (uint64_t)1e15 : (uint64_t)ms;
}

static uint64_t elapsed_ms(const struct xfer *x)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)((t.tv_sec - x->t0.tv_sec) * 1000 + (t.tv_nsec - x->t0.tv_nsec) / 1000000);
}

/* libcurl calls this at least once a second, data or not. */
static int on_progress(void *vx, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
	struct xfer *x = vx;
	(void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
	if (atomic_load(&x->h->cancelled))
		return 1;
	if (elapsed_ms(x) < deadline_ms(x->h, x->expect))
		return 0;
	x->late = 1;
	return 1;
}

static int header_is(const char *line, size_t n, const char *name, const char **val)
{
	size_t l = strlen(name);
	if (n <= l || strncasecmp(line, name, l) || line[l] != ':')
		return 0;
	*val = line + l + 1;
	while (*val < line + n && (**val == ' ' || **val == '\t'))
		(*val)++;
	return 1;
}

static size_t on_header(char *line, size_t size, size_t nitems, void *vx)
{
	struct xfer *x = vx;
	size_t n = size * nitems;
	char tmp[512];
	size_t k = n < sizeof tmp - 1 ? n : sizeof tmp - 1;
	memcpy(tmp, line, k);                       /* NUL-terminated copy for sscanf */
	tmp[k] = 0;
	const char *v;
	if (n >= 5 && !strncmp(line, "HTTP/", 5)) {
		int code = 0;
		sscanf(tmp, "%*s %d", &code);
		x->status = code;
		x->have_cr = x->cr_total_known = 0;
		x->clen = 0;
		x->retry_after = 0;
		x->xerr[0] = 0;
		x->body = 0;
		x->ebody_len = 0;
		if (code >= 200)
			x->h->st.requests++;
	} else if (n <= 2 && (line[0] == '\r' || line[0] == '\n')) {
		if (x->status < 200 || (x->status >= 300 && x->status < 400))
			return n;                           /* libcurl goes on to the next response */
		if (x->range && x->status == 200) {
			x->ignored_range = 1;               /* do not read the whole file */
			return 0;
		}
		if (!x->range && x->status == 200 && x->clen > x->max) {
			x->too_big = 1;
			return 0;
		}
		if (!x->range && x->status == 200 && x->clen)
			x->expect = x->clen;                /* the deadline of the size announced */
	} else if (header_is(tmp, k, "content-range", &v)) {
		unsigned long long a, b;
		char total[32];
		if (sscanf(v, "bytes %llu-%llu/%31[0-9*]", &a, &b, total) == 3) {
			x->have_cr = 1;
			x->cr_a = a;
			x->cr_b = b;
			if (total[0] != '*') {
				x->cr_total_known = 1;
				x->cr_total = strtoull(total, NULL, 10);
			}
		} else if (sscanf(v, "bytes */%31[0-9]", total) == 1) {   /* a 416's */
			x->cr_total_known = 1;
			x->cr_total = strtoull(total, NULL, 10);
		}
	} else if (header_is(tmp, k, "content-length", &v)) {
		x->clen = strtoull(v, NULL, 10);
	} else if (header_is(tmp, k, "retry-after", &v)) {
		x->retry_after = strtol(v, NULL, 10);
	} else if (header_is(tmp, k, "x-error-message", &v)) {
		size_t m = strcspn(v, "\r\n");
		if (m >= sizeof x->xerr)
			m = sizeof x->xerr - 1;
		memcpy(x->xerr, v, m);
		x->xerr[m] = 0;
	}
	return n;
}

static size_t on_body(char *p, size_t size, size_t nitems, void *vx)
{
	struct xfer *x = vx;
	size_t n = size * nitems;
	if (atomic_load(&x->h->cancelled))
		return 0;
	x->h->st.bytes += n;
	x->body += n;
	if (x->range && x->status == 206) {
		if (x->got + n > x->len) {
			x->overflow = 1;
			return 0;
		}
		memcpy(x->buf + x->got, p, n);
		x->got += n;
		return n;
	}
	if (!x->range && x->status == 200) {
		if (x->got + n > x->max) {
			x->too_big = 1;
			return 0;
		}
		if (x->got + n + 1 > x->wcap) {
			size_t cap = x->wcap ? x->wcap : 65536;
			while (cap < x->got + n + 1)
				cap *= 2;
			char *nb = realloc(x->wbuf, cap);
			if (!nb)
				return 0;
			x->wbuf = nb;
			x->wcap = cap;
		}
		memcpy(x->wbuf + x->got, p, n);
		x->got += n;
		return n;
	}
	size_t keep = sizeof x->ebody - 1 - x->ebody_len;   /* an error body: its start */
	if (keep > n)
		keep = n;
	memcpy(x->ebody + x->ebody_len, p, keep);
	x->ebody_len += keep;
	x->ebody[x->ebody_len] = 0;
	return x->body > ERR_BODY_MAX ? 0 : n;
}

static int retryable_curl(CURLcode cc)
{
	switch (cc) {
	case CURLE_COULDNT_RESOLVE_HOST: case CURLE_COULDNT_CONNECT: case CURLE_OPERATION_TIMEDOUT:
	case CURLE_SEND_ERROR: case CURLE_RECV_ERROR: case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE: case CURLE_HTTP2: case CURLE_HTTP2_STREAM: case CURLE_SSL_CONNECT_ERROR:
		return 1;
	default:
		return 0;
	}
}

/* The reason a response failed, in words: the hub's X-Error-Message, else
 * the start of the body on one line. */
static const char *why(struct xfer *x)
{
	if (x->xerr[0])
		return x->xerr;
	if (x->ebody[0] == '<')           /* an HTML page says nothing the status does not */
		return "";
	size_t o = 0;
	for (size_t i = 0; i < x->ebody_len && o < 100; i++) {
		char c = x->ebody[i] == '\n' || x->ebody[i] == '\r' || x->ebody[i] == '\t' ? ' '
		                                                                       : x->ebody[i];
		if (c != ' ' || (o && x->ebody[o - 1] != ' '))
			x->ebody[o++] = c;
	}
	while (o && x->ebody[o - 1] == ' ')
		o--;
	x->ebody[o] = 0;
	x->ebody_len = o;
	return x->ebody;
}

/* Sleeps the back-off in slices of 20 ms, cut short by rq_hub_cancel. */
static void backoff(struct rq_hub *h, int attempt, long retry_after)
{
	long ms = (long)BACKOFF_MS << (attempt - 1);
	if (retry_after > 0) {
		long ra = (retry_after > RETRY_AFTER_MAX_S ? RETRY_AFTER_MAX_S : retry_after) * 1000;
		if (ra > ms)
			ms = ra;
	}
	for (long left = ms; left > 0 && !atomic_load(&h->cancelled); left -= 20) {
		struct timespec ts = {0, (left < 20 ? left : 20) * 1000000L};
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	}
}

static void setup(struct rq_hub *h, const char *url, struct xfer *x, const char *range)
{
	CURL *c = h->curl;
	curl_easy_reset(c);                     /* keeps the connection, drops old options */
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h->hdrs);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "requantfs (libcurl)");
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
	/* The token stays with the endpoint's host: libcurl drops a custom
	 * Authorization header when a redirect changes host, port or scheme,
	 * unless this is set, which it must never be (a CDN must not see it). */
	curl_easy_setopt(c, CURLOPT_UNRESTRICTED_AUTH, 0L);
#if LIBCURL_VERSION_NUM >= 0x075500
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
	curl_easy_setopt(c, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
	curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, h->timeout_s);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);   /* < 1 B/s for timeout_s: stalled */
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, h->timeout_s);
	/* The deadline: on_progress keeps it (tightened once a whole file's
	 * Content-Length is known); CURLOPT_TIMEOUT_MS backs it up. */
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(c, CURLOPT_XFERINFODATA, x);
	uint64_t dl = deadline_ms(h, x->expect) + 1000;
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, dl > LONG_MAX ? LONG_MAX : (long)dl);
	curl_easy_setopt(c, CURLOPT_RANGE, range);          /* kept on every redirect */
	/* A range is of the identity encoding; a whole (JSON) file may come gzipped. */
	curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, range ? NULL : "");
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, x);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
	curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, on_open_socket);
	curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, h);
	curl_easy_setopt(c, CURLOPT_CLOSESOCKETFUNCTION, on_close_socket);
	curl_easy_setopt(c, CURLOPT_CLOSESOCKETDATA, h);
}

/* Checks a finished 206 against the range asked for. */
static int check_partial(struct xfer *x, const char *url, struct rq_err *err)
{
	uint64_t last = x->off + x->len - 1;
	if (!x->have_cr)
		return rq_errf(err, -EPROTO, "%s: HTTP 206 without a Content-Range header", url);
	if (x->cr_a != x->off || x->cr_b != last)
		return rq_errf(err, -EPROTO, "%s: asked for bytes %llu-%llu, the server sent "
		               "%llu-%llu%s", url, (unsigned long long)x->off,
		               (unsigned long long)last, (unsigned long long)x->cr_a,
		               (unsigned long long)x->cr_b, x->cr_total_known && x->cr_total <= last ?
		               " (the file is shorter)" : "");
	if (x->got != x->len)
		return rq_errf(err, -EPROTO, "%s: HTTP 206 with %llu bytes for a range of %llu", url,
		               (unsigned long long)x->got, (unsigned long long)x->len);
	return 0;
}

/* Performs one request with its retries; 0 when the expected status came
 * with a good body. */
static int perform(struct rq_hub *h, const char *url, struct xfer *x, struct rq_err *err)
{
	char range[64] = "", cerr[CURL_ERROR_SIZE];
	if (x->range)
		snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)x->off,
		         (unsigned long long)(x->off + x->len - 1));
	for (int attempt = 1;; attempt++) {
		if (atomic_load(&h->cancelled))
			return rq_errf(err, -ECANCELED, "%s: cancelled (the store is closing)", url);
		x->expect = x->range ? x->len : x->max;
		setup(h, url, x, x->range ? range : NULL);
		cerr[0] = 0;
		curl_easy_setopt(h->curl, CURLOPT_ERRORBUFFER, cerr);
		x->got = 0;
		x->status = 0;
		x->body = 0;
		x->ignored_range = x->too_big = x->overflow = x->late = 0;
		clock_gettime(CLOCK_MONOTONIC, &x->t0);
		CURLcode cc = curl_easy_perform(h->curl);
		uint64_t took = elapsed_ms(x), limit = deadline_ms(h, x->expect);
		if (cc == CURLE_OPERATION_TIMEDOUT && took >= limit)
			x->late = 1;                     /* the backstop fired first */
		if (x->late && cc != CURLE_OK)
			cc = CURLE_OPERATION_TIMEDOUT;   /* retried like a stall */
		else
			x->late = 0;
		if (h->progress)
			h->progress(h->progress_ctx, &h->st);
		if (atomic_load(&h->cancelled))
			return rq_errf(err, -ECANCELED, "%s: cancelled (the store is closing)", url);
		long st = x->status;
		char *eff = NULL;
		curl_easy_getinfo(h->curl, CURLINFO_EFFECTIVE_URL, &eff);
		const char *where = eff && strcmp(eff, url) ? eff : NULL;   /* the redirect target */
		if (x->ignored_range)
			return rq_errf(err, -EPROTO, "%s: the server ignored the Range request (HTTP 200 "
			               "for bytes %s%s%s); refusing to download the whole file (aborted "
			               "after %llu body bytes)", url, range, where ? " at " : "",
			               where ? where : "", (unsigned long long)x->body);
		if (x->too_big)
			return rq_errf(err, -EFBIG, "%s: larger than %zu bytes; refusing to read it whole",
			               url, x->max);
		if (x->overflow)
			return rq_errf(err, -EPROTO, "%s: the server sent more than the %llu bytes of "
			               "range %s", url, (unsigned long long)x->len, range);
		int retry = 0;
		if (cc != CURLE_OK && !(cc == CURLE_WRITE_ERROR && st >= 400)) {
			if (x->late && attempt >= RQ_HUB_TRIES)
				return rq_errf(err, -EIO, "%s: too slow: %llu of %llu%s bytes in %.1f s, "
				               "past the deadline of %.1f s (HF_HUB_DOWNLOAD_TIMEOUT %ld s + "
				               "the bytes at REQUANTFS_HUB_MIN_RATE %llu B/s) (%d tries); on a "
				               "slow link lower REQUANTFS_HUB_MIN_RATE", url,
				               (unsigned long long)x->body, (unsigned long long)x->expect,
				               x->range || x->clen ? "" : " (at most)", took / 1000.0,
				               limit / 1000.0, h->timeout_s,
				               (unsigned long long)h->min_rate, attempt);
			if (!retryable_curl(cc) || attempt >= RQ_HUB_TRIES)
				return rq_errf(err, -EIO, "%s: %s (%d %s)%s", url, cerr[0] ? cerr :
				               curl_easy_strerror(cc), attempt, attempt > 1 ? "tries" : "try",
				               cc == CURLE_OPERATION_TIMEDOUT ? "; HF_HUB_DOWNLOAD_TIMEOUT "
				               "sets the limit in seconds" : "");
			retry = 1;
		} else if ((x->range && st == 206) || (!x->range && st == 200)) {
			return x->range ? check_partial(x, url, err) : 0;
		} else if (st == 429 || st >= 500) {
			if (attempt >= RQ_HUB_TRIES)
				return rq_errf(err, -EIO, "%s: HTTP %ld after %d tries%s%s", url, st, attempt,
				               *why(x) ? ": " : "", why(x));
			retry = 1;
		}
		if (retry) {
			h->st.retries++;
			backoff(h, attempt, x->retry_after);
			continue;
		}
		if (st == 401 || st == 403)
			return rq_errf(err, -EACCES, "%s: HTTP %ld (%s%s%s): %s%s%s", url, st,
			               st == 401 ? "unauthorized" : "forbidden", *why(x) ? ": " : "",
			               why(x), h->token_src ? "the token from " : "no token was sent "
			               "(gated or private repository?): set HF_TOKEN or log in with "
			               "huggingface_hub", h->token_src ? h->token_src : "",
			               h->token_src ? " may be wrong or lack access to this repository "
			               "(a gated one: request access on its page on the hub, then retry "
			               "with a token of that account)" : "");
		if (st == 404)
			return rq_errf(err, -ENOENT, "%s: HTTP 404 (not found)%s%s", url,
			               *why(x) ? ": " : "", why(x));
		if (st == 416)
			return rq_errf(err, -EPROTO, "%s: HTTP 416 (range %s not satisfiable: the file is "
			               "shorter)", url, range);
		if (st >= 300 && st < 400)
			return rq_errf(err, -EIO, "%s: HTTP %ld redirect that could not be followed%s%s",
			               url, st, *why(x) ? ": " : "", why(x));
		return rq_errf(err, -EIO, "%s: HTTP %ld%s%s", url, st, *why(x) ? ": " : "", why(x));
	}
}

int rq_hub_fetch_range(struct rq_hub *h, const char *repo, const char *rev, const char *file,
                       uint64_t off, uint64_t len, void *buf, uint64_t *size,
                       struct rq_err *err)
{
	char url[4096];
	if (rq_hub_url(h, repo, rev, file, url, sizeof url))
		return rq_errf(err, -EINVAL, "not a hub file: repository '%s', revision '%s', file '%s'",
		               repo, rev, file);
	if (!len)
		return rq_errf(err, -EINVAL, "%s: empty range", url);
	struct xfer x = {.h = h, .range = 1, .off = off, .len = len, .buf = buf};
	int rc = perform(h, url, &x, err);
	/* what the final response said of the file's size, failed or not */
	h->server_size = x.cr_total_known ? x.cr_total
	                 : x.ignored_range && x.clen ? x.clen : RQ_HUB_SIZE_UNKNOWN;
	if (rc)
		return rc;
	if (size) {
		if (!x.cr_total_known)
			return rq_errf(err, -EPROTO, "%s: Content-Range gives no file size", url);
		*size = x.cr_total;
	}
	return 0;
}

int rq_hub_fetch_file(struct rq_hub *h, const char *repo, const char *rev, const char *file,
                      size_t max, char **out, size_t *len, struct rq_err *err)
{
	char url[4096];
	if (rq_hub_url(h, repo, rev, file, url, sizeof url))
		return rq_errf(err, -EINVAL, "not a hub file: repository '%s', revision '%s', file '%s'",
		               repo, rev, file);
	struct xfer x = {.h = h, .max = max};
	int rc = perform(h, url, &x, err);
	if (!rc && !x.wbuf && !(x.wbuf = malloc(1)))
		rc = -ENOMEM;
	if (rc) {
		free(x.wbuf);
		return rc;
	}
	x.wbuf[x.got] = 0;
	*out = x.wbuf;
	*len = x.got;
	return 0;
}

int rq_hub_fetch_model_info(struct rq_hub *h, const char *repo, const char *rev, size_t max,
                            char **out, size_t *len, struct rq_err *err)
{
	char url[4096];
	char probe[4096];   /* the repo and rev checks of a resolve URL */
	if (rq_hub_url(h, repo, rev, "x", probe, sizeof probe))
		return rq_errf(err, -EINVAL, "not a hub repository: '%s' at revision '%s'", repo, rev);
	int w = snprintf(url, sizeof url, "%s/api/models/", h->endpoint);
	if (w < 0 || (size_t)w >= sizeof url)
		return -ENAMETOOLONG;
	size_t at = (size_t)w;
	int rc = put_enc(url, sizeof url, &at, repo, 1);
	if (!rc)
		rc = put_enc(url, sizeof url, &at, "/revision/", 1);
	if (!rc)
		rc = put_enc(url, sizeof url, &at, rev, 0);
	if (!rc && at + sizeof "?blobs=true" > sizeof url)
		rc = -ENAMETOOLONG;
	if (rc)
		return rq_errf(err, rc, "repository '%s', revision '%s': name too long", repo, rev);
	memcpy(url + at, "?blobs=true", sizeof "?blobs=true");
	struct xfer x = {.h = h, .max = max};
	rc = perform(h, url, &x, err);
	if (!rc && !x.wbuf && !(x.wbuf = malloc(1)))
		rc = -ENOMEM;
	if (rc) {
		free(x.wbuf);
		return rc;
	}
	x.wbuf[x.got] = 0;
	*out = x.wbuf;
	*len = x.got;
	return 0;
}
