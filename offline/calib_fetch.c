/* calib_fetch.c — `requantfs calib fetch`: the calibration file of
 * rq_calib_extract, made from a 07-22 checkpoint on a hub without
 * downloading it (ckpt.h). Bytes come from hub/, headers are parsed by st/,
 * values are checked and written by ckpt.c (rq_calib_check, rq_calib_write)
 * exactly as extract does, so both give the same file for the same
 * checkpoint.
 *
 * Requests, in order:
 *   1. model.safetensors.index.json, whole (at most INDEX_MAX). A 404 means a
 *      one-file checkpoint: model.safetensors, all of whose scales count.
 *   2. per shard that holds a needed scale, in the index's order:
 *      bytes 0-7 (N, and the file size from Content-Range), then 8..8+N-1
 *      (the header JSON, at most HEADER_MAX like safetensors' own limit);
 *   3. the scalars, sorted by offset; neighbours less than GAP_MAX apart
 *      share one request (scales sit between weight_global_scale scalars in
 *      the F32 block of a shard, so a shard usually needs one), a request
 *      spans at most RUN_MAX.
 * Shards that hold no scale are never touched. */
#include "st/jtext.h"
#include "base/grow.h"
#include "offline/calib.h"
#include "plan/ckpt.h"
#include "base/err.h"
#include "hub/hub.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INDEX_MAX (512u << 20)        /* the real index is tens of MB at most */
#define HEADER_MAX 100000000u         /* safetensors' MAX_HEADER_SIZE */
#define GAP_MAX 4096u                 /* bytes worth reading to save a request */
#define RUN_MAX (1u << 20)
#define SUFFIX ".input_global_scale"

struct need {
	char *name;
	int shard;                        /* index into fetch.shard */
	const struct st_tensor *t;        /* in that shard's header */
	uint32_t bits;
};

struct fetch {
	struct rq_hub *hub;
	const char *repo, *rev;
	char **shard;                     /* [nshards] file names */
	struct st_header **hdr;           /* [nshards] */
	size_t nshards, capshards;
	struct need *need;                /* [n] */
	size_t n, cap;
	int one_file;                     /* no index: every scale of model.safetensors */
};

static int is_scale(const char *name)
{
	size_t l = strlen(name), sl = strlen(SUFFIX);
	return l > sl && !strcmp(name + l - sl, SUFFIX);
}

static int add_need(struct fetch *f, const char *name, int shard)
{
	if (RQ_GROW(f->need, f->n, f->cap, 1024))
		return -ENOMEM;
	struct need *e = &f->need[f->n];
	memset(e, 0, sizeof *e);
	e->name = strdup(name);
	e->shard = shard;
	if (!e->name)
		return -ENOMEM;
	f->n++;
	return 0;
}

/* The index of shard `file` in f->shard, added when new. */
static int add_shard(struct fetch *f, const char *file)
{
	size_t i = 0;
	while (i < f->nshards && strcmp(f->shard[i], file))
		i++;
	if (i < f->nshards)
		return (int)i;
	if (RQ_GROW(f->shard, f->nshards, f->capshards, 16) || !(f->shard[i] = strdup(file)))
		return -ENOMEM;
	f->nshards++;
	return (int)i;
}

static void url_of(struct fetch *f, const char *file, char *buf, size_t len)
{
	if (rq_hub_url(f->hub, f->repo, f->rev, file, buf, len))
		snprintf(buf, len, "%s@%s/%s", f->repo, f->rev, file);
}

/* Step 1: which scales, in which shards. */
static int read_index(struct fetch *f, struct rq_err *err)
{
	const char *iname = "model.safetensors.index.json";
	char *text = NULL, url[4096];
	size_t len = 0;
	int rc = rq_hub_fetch_file(f->hub, f->repo, f->rev, iname, INDEX_MAX, &text, &len, err);
	if (rc == -ENOENT) {              /* one-file checkpoint? */
		f->one_file = 1;
		return add_shard(f, "model.safetensors") < 0 ? -ENOMEM : 0;
	}
	if (rc)
		return rc;
	url_of(f, iname, url, sizeof url);
	cJSON *wm, *j = jt_index_parse(text, len, url, &wm, err);   /* the hub's answer, strict */
	if (!j)
		return err ? err->code : -EPROTO;
	for (cJSON *e = wm->child; e && !rc; e = e->next) {
		if (!is_scale(e->string))
			continue;
		if (!cJSON_IsString(e) || strchr(e->valuestring, '/') || !*e->valuestring ||
		    e->valuestring[0] == '.') {
			rc = rq_errf(err, -EPROTO, "%s: weight_map entry '%s' is not a shard file name",
			             url, e->string);
			break;
		}
		int s = add_shard(f, e->valuestring);
		rc = s < 0 ? s : add_need(f, e->string, s);
	}
	cJSON_Delete(j);
	if (!rc && !f->n)
		rc = rq_errf(err, -ENOENT, "%s names no *" SUFFIX " tensors; is %s@%s the 07-22 "
		             "all-NVFP4 checkpoint?", url, f->repo, f->rev);
	return rc;
}

/* Step 2: one shard's header, from two range requests. */
static int read_header(struct fetch *f, size_t s, struct rq_err *err)
{
	char url[4096];
	url_of(f, f->shard[s], url, sizeof url);
	uint8_t first[8];
	uint64_t size = 0;
	int rc = rq_hub_fetch_range(f->hub, f->repo, f->rev, f->shard[s], 0, 8, first, &size, err);
	if (rc)
		return rc;
	uint64_t n = 0;
	for (int i = 7; i >= 0; i--)
		n = n << 8 | first[i];
	if (n == 0 || n > HEADER_MAX || 8 + n > size)
		return rq_errf(err, -EPROTO, "%s: header length %llu is not a safetensors header in a "
		               "file of %llu bytes", url, (unsigned long long)n, (unsigned long long)size);
	uint8_t *buf = malloc(8 + n);
	if (!buf)
		return -ENOMEM;
	memcpy(buf, first, 8);
	rc = rq_hub_fetch_range(f->hub, f->repo, f->rev, f->shard[s], 8, n, buf + 8, NULL, err);
	if (!rc)
		rc = st_parse_mem(buf, 8 + n, size, url, &f->hdr[s], err);
	free(buf);
	return rc;
}

static int cmp_need_off(const void *a, const void *b)
{
	const struct need *x = *(struct need *const *)a, *y = *(struct need *const *)b;
	return x->t->begin < y->t->begin ? -1 : x->t->begin > y->t->begin;
}

/* Step 3: the scalars of shard s (ptrs: its needs, sorted by offset). */
static int read_scalars(struct fetch *f, size_t s, struct need **v, size_t m, struct rq_err *err)
{
	char url[4096];
	url_of(f, f->shard[s], url, sizeof url);
	const struct st_header *h = f->hdr[s];
	uint8_t *buf = malloc(RUN_MAX);
	if (!buf)
		return -ENOMEM;
	int rc = 0;
	for (size_t i = 0; i < m && !rc;) {
		uint64_t a = v[i]->t->begin, b = v[i]->t->end;
		size_t j = i + 1;
		while (j < m && v[j]->t->begin <= b + GAP_MAX && v[j]->t->end - a <= RUN_MAX) {
			if (v[j]->t->end > b)
				b = v[j]->t->end;
			j++;
		}
		rc = rq_hub_fetch_range(f->hub, f->repo, f->rev, f->shard[s], h->data_start + a, b - a,
		                        buf, NULL, err);
		for (size_t k = i; k < j && !rc; k++)
			rc = rq_calib_check(v[k]->name, url, v[k]->t, buf + (v[k]->t->begin - a),
			                    &v[k]->bits, err);
		i = j;
	}
	free(buf);
	return rc;
}

/* For a one-file checkpoint: every scale of its header is needed. */
static int needs_from_header(struct fetch *f, struct rq_err *err)
{
	const struct st_header *h = f->hdr[0];
	for (size_t i = 0; i < h->n; i++)
		if (is_scale(h->t[i].name)) {
			int rc = add_need(f, h->t[i].name, 0);
			if (rc)
				return rc;
		}
	if (!f->n) {
		char url[4096];
		url_of(f, f->shard[0], url, sizeof url);
		return rq_errf(err, -ENOENT, "%s has no *" SUFFIX " tensors (and %s@%s has no "
		               "model.safetensors.index.json); is it the 07-22 all-NVFP4 checkpoint?",
		               url, f->repo, f->rev);
	}
	return 0;
}

static int fetch_shard(struct fetch *f, size_t s, struct rq_err *err)
{
	int rc = read_header(f, s, err);
	if (rc == -ENOENT && f->one_file)
		return rq_err_prefix(err, "%s@%s has no model.safetensors.index.json nor "
		                     "model.safetensors", f->repo, f->rev);
	if (rc)
		return rc;
	if (f->one_file && (rc = needs_from_header(f, err)))
		return rc;
	char url[4096];
	url_of(f, f->shard[s], url, sizeof url);
	struct need **v = malloc(f->n * sizeof *v);
	if (!v)
		return -ENOMEM;
	size_t m = 0;
	for (size_t i = 0; i < f->n && !rc; i++) {
		struct need *e = &f->need[i];
		if (e->shard != (int)s)
			continue;
		long k = st_find(f->hdr[s], e->name);
		if (k < 0) {
			rc = rq_errf(err, -EPROTO, "%s: the index maps %s to this shard, but its header has "
			             "no such tensor", url, e->name);
			break;
		}
		e->t = &f->hdr[s]->t[k];
		rc = rq_calib_check(e->name, url, e->t, NULL, NULL, err);
		v[m++] = e;
	}
	if (!rc) {
		qsort(v, m, sizeof *v, cmp_need_off);
		rc = read_scalars(f, s, v, m, err);
	}
	free(v);
	return rc;
}

int rq_calib_fetch(const char *endpoint, const char *repo, const char *rev, const char *out_file,
                   size_t *count, struct rq_hub_stats *stats,
                   void (*progress)(void *ctx, const struct rq_hub_stats *s), void *ctx,
                   struct rq_err *err)
{
	struct fetch f = {.repo = repo, .rev = rev};
	char **names = NULL;
	uint32_t *bits = NULL;
	int rc = rq_hub_open(endpoint, &f.hub, err);
	if (rc)
		return rc;
	rq_hub_set_progress(f.hub, progress, ctx);
	rc = read_index(&f, err);
	if (!rc && !(f.hdr = calloc(f.nshards, sizeof *f.hdr)))
		rc = -ENOMEM;
	for (size_t s = 0; s < f.nshards && !rc; s++)
		rc = fetch_shard(&f, s, err);
	if (!rc) {
		names = malloc(f.n * sizeof *names);
		bits = malloc(f.n * sizeof *bits);
		rc = names && bits ? 0 : -ENOMEM;
	}
	if (!rc) {
		for (size_t i = 0; i < f.n; i++) {
			names[i] = f.need[i].name;
			bits[i] = f.need[i].bits;
		}
		rc = rq_calib_write(out_file, names, bits, f.n, err);
	}
	if (!rc) {
		*count = f.n;
		if (stats)
			rq_hub_get_stats(f.hub, stats);
	}
	free(names);
	free(bits);
	for (size_t i = 0; i < f.n; i++)
		free(f.need[i].name);
	free(f.need);
	for (size_t s = 0; s < f.nshards; s++) {
		free(f.shard[s]);
		if (f.hdr)
			st_header_free(f.hdr[s]);
	}
	free(f.shard);
	free(f.hdr);
	rq_hub_close(f.hub);
	return rc;
}
