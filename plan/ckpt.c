/* ckpt.c — tensors of a checkpoint by name; the calibration scales. */
#include "st/jtext.h"
#include "plan/ckpt.h"
#include "plan/plan.h"
#include "base/err.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct name_ref {
	char *name;
	int shard;
};

struct rq_ckpt {
	char *dir;
	size_t nshards;
	char **shard_path;            /* [nshards] */
	struct st_header **hdr;       /* [nshards], parsed lazily */
	struct name_ref *map;         /* from the index, sorted by name; NULL if none */
	size_t nmap;
	int all_parsed;
	const struct rq_src_reader *rd;   /* remote (hf://): every read through it, else NULL */
	size_t *ridx;                 /* rd: [nshards] the reader's file of each shard */
};

static int cmp_ref(const void *a, const void *b)
{
	return strcmp(((const struct name_ref *)a)->name, ((const struct name_ref *)b)->name);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int add_shard(struct rq_ckpt *c, const char *path)
{
	for (size_t i = 0; i < c->nshards; i++)
		if (!strcmp(c->shard_path[i], path))
			return (int)i;
	char **p = realloc(c->shard_path, (c->nshards + 1) * sizeof *p);
	if (!p)
		return -ENOMEM;
	c->shard_path = p;
	struct st_header **h = realloc(c->hdr, (c->nshards + 1) * sizeof *h);
	if (!h)
		return -ENOMEM;
	c->hdr = h;
	c->shard_path[c->nshards] = strdup(path);
	c->hdr[c->nshards] = NULL;
	if (!c->shard_path[c->nshards])
		return -ENOMEM;
	return (int)c->nshards++;
}

static int parse_index(struct rq_ckpt *c, char *text, size_t len, const char *ipath,
                       struct rq_err *err);

static int load_index(struct rq_ckpt *c, const char *ipath, struct rq_err *err)
{
	char *text = NULL;
	size_t len = 0;
	int rc = rq_read_whole(ipath, &text, &len);
	if (rc)
		return rq_errf(err, rc, "%s: cannot read: %s", ipath, strerror(-rc));
	return parse_index(c, text, len, ipath, err);   /* frees text */
}

static int parse_index(struct rq_ckpt *c, char *text, size_t len, const char *ipath,
                       struct rq_err *err)
{
	int rc = 0;
	cJSON *wm, *j = jt_index_parse(text, len, ipath, &wm, err);
	if (!j)
		return err ? err->code : -EPROTO;
	size_t n = 0;
	for (cJSON *e = wm->child; e; e = e->next)
		n++;
	c->map = calloc(n ? n : 1, sizeof *c->map);
	if (!c->map) {
		cJSON_Delete(j);
		return -ENOMEM;
	}
	for (cJSON *e = wm->child; e; e = e->next) {
		if (!cJSON_IsString(e) || strchr(e->valuestring, '/')) {
			rc = rq_errf(err, -EPROTO, "%s: weight_map entry '%s' is not a shard file name",
			             ipath, e->string);
			break;
		}
		char path[4096];
		snprintf(path, sizeof path, "%s/%s", c->dir, e->valuestring);
		int s = add_shard(c, path);
		if (s < 0) {
			rc = s;
			break;
		}
		c->map[c->nmap].name = strdup(e->string);
		c->map[c->nmap].shard = s;
		if (!c->map[c->nmap++].name) {
			rc = -ENOMEM;
			break;
		}
	}
	cJSON_Delete(j);
	if (rc)
		return rc;
	qsort(c->map, c->nmap, sizeof *c->map, cmp_ref);
	return 0;
}

int rq_ckpt_open(const char *path, struct rq_ckpt **out, struct rq_err *err)
{
	struct stat st;
	if (stat(path, &st) < 0)
		return rq_errf(err, -errno, "%s: %s", path, strerror(errno));
	struct rq_ckpt *c = calloc(1, sizeof *c);
	if (!c)
		return -ENOMEM;
	int rc = 0;
	c->dir = strdup(path);
	if (!c->dir) {
		rc = -ENOMEM;
		goto fail;
	}
	if (S_ISREG(st.st_mode)) {        /* one safetensors file */
		rc = add_shard(c, path);
		if (rc < 0)
			goto fail;
		rc = 0;
		*out = c;
		return 0;
	}
	char ipath[4096];
	snprintf(ipath, sizeof ipath, "%s/model.safetensors.index.json", path);
	if (access(ipath, F_OK) == 0) {
		rc = load_index(c, ipath, err);
		if (rc)
			goto fail;
		*out = c;
		return 0;
	}
	DIR *d = opendir(path);
	if (!d) {
		rc = rq_errf(err, -errno, "%s: %s", path, strerror(errno));
		goto fail;
	}
	char **names = NULL;
	size_t nn = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t l = strlen(de->d_name);
		if (l > 12 && !strcmp(de->d_name + l - 12, ".safetensors")) {
			char **p = realloc(names, (nn + 1) * sizeof *p);
			if (!p || !(p[nn] = strdup(de->d_name))) {
				free(p ? p : names);
				names = NULL;
				rc = -ENOMEM;
				break;
			}
			names = p;
			nn++;
		}
	}
	closedir(d);
	if (rc)
		goto fail;
	qsort(names, nn, sizeof *names, cmp_str);
	for (size_t i = 0; i < nn; i++) {
		char p[4096];
		snprintf(p, sizeof p, "%s/%s", path, names[i]);
		if (rc == 0 && add_shard(c, p) < 0)
			rc = -ENOMEM;
		free(names[i]);
	}
	free(names);
	if (rc)
		goto fail;
	if (!c->nshards) {
		rc = rq_errf(err, -ENOENT, "%s: no *.safetensors files and no "
		             "model.safetensors.index.json", path);
		goto fail;
	}
	*out = c;
	return 0;
fail:
	rq_ckpt_close(c);
	return rc;
}

static long reader_find(const struct rq_src_reader *r, const char *name)
{
	for (size_t i = 0; i < r->nfiles; i++)
		if (!strcmp(r->files[i].name, name))
			return (long)i;
	return -1;
}

int rq_ckpt_open_reader(const struct rq_src_reader *r, struct rq_ckpt **out, struct rq_err *err)
{
	struct rq_ckpt *c = calloc(1, sizeof *c);
	if (!c || !(c->dir = strdup(r->label))) {
		free(c);
		return -ENOMEM;
	}
	c->rd = r;
	int rc = 0;
	long ix = reader_find(r, "model.safetensors.index.json");
	if (ix >= 0) {
		const struct rq_src_entry *e = &r->files[ix];
		char ipath[4096];
		snprintf(ipath, sizeof ipath, "%s/%s", r->label, e->name);
		char *text = e->size < (256u << 20) ? malloc(e->size + 1) : NULL;
		if (!text)
			rc = e->size < (256u << 20) ? -ENOMEM : rq_errf(err, -EFBIG, "%s: too large",
			                                               ipath);
		else if ((rc = r->read(r->ctx, (size_t)ix, 0, e->size, text, err)))
			free(text);
		else
			rc = parse_index(c, text, e->size, ipath, err);   /* frees text */
	} else {
		for (size_t i = 0; i < r->nfiles && !rc; i++) {
			size_t l = strlen(r->files[i].name);
			char p[4096];
			snprintf(p, sizeof p, "%s/%s", r->label, r->files[i].name);
			if (l > 12 && !strcmp(r->files[i].name + l - 12, ".safetensors") &&
			    add_shard(c, p) < 0)
				rc = -ENOMEM;
		}
		if (!rc && !c->nshards)
			rc = rq_errf(err, -ENOENT, "%s: no *.safetensors files and no "
			             "model.safetensors.index.json", r->label);
	}
	if (!rc && !(c->ridx = calloc(c->nshards ? c->nshards : 1, sizeof *c->ridx)))
		rc = -ENOMEM;
	for (size_t s = 0; !rc && s < c->nshards; s++) {
		long k = reader_find(r, c->shard_path[s] + strlen(r->label) + 1);
		if (k < 0)
			rc = rq_errf(err, -EIO, "shard %s is missing, though "
			             "model.safetensors.index.json names it", c->shard_path[s]);
		else
			c->ridx[s] = (size_t)k;
	}
	if (rc) {
		rq_ckpt_close(c);
		return rc;
	}
	*out = c;
	return 0;
}

void rq_ckpt_close(struct rq_ckpt *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->nshards; i++) {
		free(c->shard_path[i]);
		st_header_free(c->hdr[i]);
	}
	for (size_t i = 0; i < c->nmap; i++)
		free(c->map[i].name);
	free(c->map);
	free(c->shard_path);
	free(c->hdr);
	free(c->ridx);
	free(c->dir);
	free(c);
}

const char *rq_ckpt_shard_path(const struct rq_ckpt *c, int shard)
{
	return c->shard_path[shard];
}

/* A shard's header, parsed on first use. A shard that is missing is not a
 * missing tensor: it is reported as -EIO naming the file. */
static int header(struct rq_ckpt *c, int s, struct rq_err *err)
{
	if (c->hdr[s])
		return 0;
	if (c->rd) {          /* 8-byte length + header, two range reads */
		const struct rq_src_entry *e = &c->rd->files[c->ridx[s]];
		uint8_t n8[8];
		if (e->size < 8)
			return rq_errf(err, -EPROTO, "%s: too short for a safetensors file",
			               c->shard_path[s]);
		int rc = c->rd->read(c->rd->ctx, c->ridx[s], 0, 8, n8, err);
		uint64_t n = 0;
		for (int i = 7; i >= 0; i--)
			n = n << 8 | n8[i];
		if (!rc && (n > (100ull << 20) || n > e->size - 8))
			return rq_errf(err, -EPROTO, "%s: header length %llu does not fit the file; not a "
			               "safetensors file", c->shard_path[s], (unsigned long long)n);
		uint8_t *b = rc ? NULL : malloc(8 + n);
		if (!rc && !b)
			return -ENOMEM;
		if (!rc) {
			memcpy(b, n8, 8);
			rc = n ? c->rd->read(c->rd->ctx, c->ridx[s], 8, n, b + 8, err) : 0;
		}
		if (!rc)
			rc = st_parse_mem(b, 8 + n, e->size, c->shard_path[s], &c->hdr[s], err);
		free(b);
		return rc;
	}
	if (access(c->shard_path[s], F_OK) < 0)
		return rq_errf(err, -EIO, "shard %s is missing (%s)%s", c->shard_path[s],
		               strerror(errno), c->map ? ", though model.safetensors.index.json "
		               "names it" : "");
	return st_parse_path(c->shard_path[s], &c->hdr[s], err);
}

int rq_ckpt_find(struct rq_ckpt *c, const char *name, const struct st_tensor **t,
                 int *shard, struct rq_err *err)
{
	if (c->map) {
		struct name_ref key = {(char *)name, 0};
		struct name_ref *r = bsearch(&key, c->map, c->nmap, sizeof *c->map, cmp_ref);
		if (!r)
			return -ENOENT;
		int rc = header(c, r->shard, err);
		if (rc)
			return rc;
		long i = st_find(c->hdr[r->shard], name);
		if (i < 0)
			return rq_errf(err, -EPROTO, "%s: the index maps %s to this shard, but its header "
			               "has no such tensor", c->shard_path[r->shard], name);
		*t = &c->hdr[r->shard]->t[i];
		*shard = r->shard;
		return 0;
	}
	for (size_t s = 0; s < c->nshards; s++) {
		int rc = header(c, (int)s, err);
		if (rc)
			return rc;
		long i = st_find(c->hdr[s], name);
		if (i >= 0) {
			*t = &c->hdr[s]->t[i];
			*shard = (int)s;
			return 0;
		}
	}
	return -ENOENT;
}

int rq_ckpt_read(struct rq_ckpt *c, int shard, const struct st_tensor *t, void *buf,
                 struct rq_err *err)
{
	return rq_ckpt_pread(c, shard, t, 0, buf, t->end - t->begin, err);
}

int rq_ckpt_pread(struct rq_ckpt *c, int shard, const struct st_tensor *t, uint64_t at,
                  void *buf, uint64_t len, struct rq_err *err)
{
	if (at + len > t->end - t->begin)
		return rq_errf(err, -EINVAL, "%s: read past the end of %s", c->shard_path[shard],
		               t->name);
	return rq_ckpt_pread_data(c, shard, t->begin + at, len, buf, t->name, err);
}

int rq_ckpt_pread_data(struct rq_ckpt *c, int shard, uint64_t at, uint64_t len, void *buf,
                       const char *what, struct rq_err *err)
{
	const char *path = c->shard_path[shard];
	if (!c->hdr[shard])
		return rq_errf(err, -EINVAL, "%s: its header was not read", path);
	if (c->rd) {
		int rc = len ? c->rd->read(c->rd->ctx, c->ridx[shard], c->hdr[shard]->data_start +
		                           at, len, buf, err) : 0;
		if (rc)
			rq_err_prefix(err, "reading %s", what);
		return rc;
	}
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return rq_errf(err, -errno, "%s: %s", path, strerror(errno));
	uint64_t off = c->hdr[shard]->data_start + at, got = 0;
	while (got < len) {
		ssize_t r = pread(fd, (char *)buf + got, len - got, off + got);
		if (r <= 0) {
			int e = r < 0 ? -errno : -EIO;
			close(fd);
			return rq_errf(err, e, "%s: reading %s: %s", path, what,
			               r < 0 ? strerror(-e) : "file is shorter than its header says");
		}
		got += r;
	}
	close(fd);
	return 0;
}

int rq_ckpt_each(struct rq_ckpt *c, int (*fn)(void *ctx, const char *name,
                 const struct st_tensor *t, int shard), void *ctx, struct rq_err *err)
{
	for (size_t s = 0; s < c->nshards; s++) {
		int rc = header(c, (int)s, err);
		if (rc)
			return rc;
		for (size_t i = 0; i < c->hdr[s]->n; i++) {
			rc = fn(ctx, c->hdr[s]->t[i].name, &c->hdr[s]->t[i], (int)s);
			if (rc)
				return rc;
		}
	}
	return 0;
}

int rq_calib_check(const char *name, const char *where, const struct st_tensor *t,
                   const uint8_t *b, uint32_t *bits, struct rq_err *err)
{
	if (t->dtype != ST_F32 || st_numel(t) != 1)
		return rq_errf(err, -EPROTO, "calibration scale %s in %s is %s with %llu elements; "
		               "expected one F32", name, where, st_dtype_name(t->dtype),
		               (unsigned long long)st_numel(t));
	if (!b)
		return 0;
	uint32_t v = b[0] | b[1] << 8 | b[2] << 16 | (uint32_t)b[3] << 24;
	float f;
	memcpy(&f, &v, 4);
	if (!isfinite(f) || f <= 0)
		return rq_errf(err, -EDOM, "calibration scale %s in %s is %g; it must be finite and "
		               "positive (wrong calibration checkpoint?)", name, where, (double)f);
	*bits = v;
	return 0;
}

int rq_calib_read_scale(struct rq_ckpt *c, const char *calib, const char *name, uint32_t *bits,
                        struct rq_err *err)
{
	const struct st_tensor *t;
	int s;
	int rc = rq_ckpt_find(c, name, &t, &s, err);
	if (rc == -ENOENT)
		return rq_errf(err, -ENOENT, "calibration scale %s is not in %s; give the 2026-07-22 "
		               "checkpoint (or a file from `requantfs calib extract`/`calib fetch`), "
		               "or calibrate SRC itself with `requantfs calib run SRC --text FILE "
		               "-o FILE`, as --calib", name, calib);
	if (rc)
		return rq_err_prefix(err, "calibration %s", calib);
	rc = rq_calib_check(name, rq_ckpt_shard_path(c, s), t, NULL, NULL, err);
	if (rc)
		return rc;
	uint8_t b[4];
	rc = rq_ckpt_read(c, s, t, b, err);
	if (rc)
		return rc;
	return rq_calib_check(name, rq_ckpt_shard_path(c, s), t, b, bits, err);
}

int rq_calib_lookup(const char *calib, char *const *modules, size_t n, uint32_t *bits,
                    struct rq_err *err)
{
	struct rq_ckpt *c;
	int rc = rq_ckpt_open(calib, &c, err);
	if (rc)
		return rq_err_prefix(err, "calibration");
	for (size_t i = 0; i < n && !rc; i++) {
		char name[1024];
		snprintf(name, sizeof name, "%s.input_global_scale", modules[i]);
		rc = rq_calib_read_scale(c, calib, name, &bits[i], err);
	}
	rq_ckpt_close(c);
	return rc;
}
