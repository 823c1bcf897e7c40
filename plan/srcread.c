/* srcread.c — SRC's small files and shard headers, from a local directory
 * (pread) or through a reader (remote SRC, hf://): the plan reads nothing
 * else of SRC, so these two functions are all a remote SRC has to answer. */
#include "plan/plan_int.h"
#include "plan/ckpt.h"
#include "base/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WHOLE_MAX (256ull << 20)    /* config, index, tokenizer: far below this */
#define HEADER_MAX (100ull << 20)   /* safetensors' own limit on N */

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct rq_srcfile *)a)->name, ((const struct rq_srcfile *)b)->name);
}

int rq_src_scan_reader(struct rq_plan *p, const struct rq_src_reader *r, struct rq_err *err)
{
	if (!r->label || !r->read || (r->nfiles && !r->files))
		return rq_errf(err, -EINVAL, "remote SRC: incomplete reader");
	if (!(p->src_dir = strdup(r->label)))
		return -ENOMEM;
	p->reader = r;
	p->dir_mode = 0555;
	p->dir_uid = getuid();
	p->dir_gid = getgid();
	struct rq_srcfile *f = calloc(r->nfiles ? r->nfiles : 1, sizeof *f);
	if (!f)
		return -ENOMEM;
	size_t n = 0;
	int rc = 0;
	for (size_t i = 0; i < r->nfiles && !rc; i++) {
		const struct rq_src_entry *e = &r->files[i];
		const char *bad = rq_src_name_refused(e->name);
		if (bad) {       /* as a local SRC's entry of that name: skipped, logged */
			rc = rq_plan_skip(p, "SRC entry %s: the name \"%s\" %s; not presented",
			                  r->label, e->name, bad);
			continue;
		}
		struct rq_srcfile *s = &f[n++];
		size_t pl = strlen(r->label) + strlen(e->name) + 2;
		s->name = strdup(e->name);
		s->path = malloc(pl);
		if (!s->name || !s->path) {
			rc = -ENOMEM;
			break;
		}
		snprintf(s->path, pl, "%s/%s", r->label, e->name);
		s->size = e->size;
		s->mode = 0444;
		s->uid = p->dir_uid;
		s->gid = p->dir_gid;
		s->ridx = i;
		if (e->sha256 && strlen(e->sha256) == 64)
			memcpy(s->blob_sha256, e->sha256, 65);
	}
	if (!rc && n)
		qsort(f, n, sizeof *f, by_name);
	for (size_t i = 1; i < n && !rc; i++)
		if (!strcmp(f[i - 1].name, f[i].name))
			rc = rq_errf(err, -EPROTO, "remote SRC %s lists %s twice", r->label, f[i].name);
	if (rc) {
		rq_srcfiles_free(f, n);
		return rc;
	}
	p->srcs = f;
	p->nsrcs = n;
	return 0;
}

int rq_src_whole(const struct rq_plan *p, const struct rq_srcfile *f, char **out, size_t *len,
                 struct rq_err *err)
{
	if (!p->reader) {
		int rc = rq_read_whole(f->path, out, len);
		return rc ? rq_errf(err, rc, "SRC %s: %s", f->path, strerror(-rc)) : 0;
	}
	if (f->size > WHOLE_MAX)
		return rq_errf(err, -EFBIG, "SRC %s: %llu bytes, more than a small file may hold",
		               f->path, (unsigned long long)f->size);
	char *b = malloc(f->size + 1);
	if (!b)
		return -ENOMEM;
	int rc = f->size ? p->reader->read(p->reader->ctx, f->ridx, 0, f->size, b, err) : 0;
	if (rc) {
		free(b);
		return rc;
	}
	b[f->size] = 0;
	*out = b;
	*len = f->size;
	return 0;
}

int rq_src_header(const struct rq_plan *p, const struct rq_srcfile *f, struct st_header **out,
                  struct rq_err *err)
{
	if (!p->reader)
		return st_parse_path(f->path, out, err);
	uint8_t n8[8];
	if (f->size < 8)
		return rq_errf(err, -EPROTO, "%s: %llu bytes, too short for a safetensors file",
		               f->path, (unsigned long long)f->size);
	int rc = p->reader->read(p->reader->ctx, f->ridx, 0, 8, n8, err);
	if (rc)
		return rc;
	uint64_t n = 0;
	for (int i = 7; i >= 0; i--)
		n = n << 8 | n8[i];
	if (n > HEADER_MAX || n > f->size - 8)
		return rq_errf(err, -EPROTO, "%s: header length %llu does not fit a file of %llu "
		               "bytes (limit %llu); not a safetensors file", f->path,
		               (unsigned long long)n, (unsigned long long)f->size,
		               (unsigned long long)HEADER_MAX);
	uint8_t *b = malloc(8 + n);
	if (!b)
		return -ENOMEM;
	memcpy(b, n8, 8);
	rc = n ? p->reader->read(p->reader->ctx, f->ridx, 8, n, b + 8, err) : 0;
	if (!rc)
		rc = st_parse_mem(b, 8 + n, f->size, f->path, out, err);
	free(b);
	return rc;
}
