/* plan_files.c — the virtual files of a plan as segment lists (SPEC.md §4):
 * config.json without the dropped rule, the rewritten index, the rewritten
 * shards; every other file is its SRC file as is. */
#include "base/grow.h"
#include "plan/plan_int.h"
#include "plan/ckpt.h"
#include "st/jtext.h"
#include "base/err.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Appends a segment, merging it into the previous one when contiguous. */
static int add_seg(struct rq_vfile *f, size_t *cap, struct rq_seg s)
{
	if (!s.len)
		return 0;
	if (f->nseg) {
		struct rq_seg *q = &f->seg[f->nseg - 1];
		if (q->kind == s.kind && q->off + q->len == s.off &&
		    ((s.kind == RQ_SEG_SRC && q->src == s.src && q->src_off + q->len == s.src_off) ||
		     (s.kind == RQ_SEG_JOB && q->job == s.job && q->job_off + q->len == s.job_off))) {
			q->len += s.len;
			return 0;
		}
	}
	if (RQ_GROW(f->seg, f->nseg, *cap, 16))
		return -ENOMEM;
	f->seg[f->nseg++] = s;
	return 0;
}

static int mem_file(struct rq_plan *p, struct rq_vfile *f, char *bytes, size_t len)
{
	int rc = rq_plan_keep(p, bytes);
	if (rc)
		return rc;
	size_t cap = 0;
	f->changed = 1;
	f->size = len;
	return add_seg(f, &cap, (struct rq_seg){.off = 0, .len = len, .kind = RQ_SEG_MEM,
	                                        .mem = (const uint8_t *)bytes});
}

/* config.json minus the dropped rule's array element, with one separating
 * comma and the whitespace between; every other byte kept. */
int rq_plan_laguna_config(const char *cfg, size_t n, size_t k, char **outp, size_t *out_len,
                          struct rq_err *err)
{
	size_t qc, ign;
	struct jt_buf b = {0};
	int rc = jt_member(cfg, n, jt_ws(cfg, n, 0), "quantization_config", &qc);
	if (!rc)
		rc = jt_member(cfg, n, qc, "ignore", &ign);
	if (!rc)
		rc = jt_cut_element(&b, cfg, n, ign, k);
	if (!rc)
		jt_put(&b, "", 1);   /* NUL-terminated for the caller */
	if (!rc && b.oom)
		rc = -ENOMEM;
	if (rc) {
		free(b.p);
		return rc == -ENOMEM ? rc : rq_errf(err, -EPROTO, "config.json: cannot locate "
		                                    "quantization_config.ignore[%zu]", k);
	}
	*outp = b.p;
	*out_len = b.len - 1;
	return 0;
}

/* Tensors of module m in its shard: the scheme's t[], and for the Laguna
 * fix and --scheme nvfp4 the input_global_scale from CALIB (part index nt, a
 * MEM segment). */
static int mod_parts(const struct rq_plan *p, const struct rq_module *m)
{
	return m->nt + rq_scheme_has_input_scale(p->mod_scheme);
}

static int part_name(const struct rq_plan *p, const struct rq_module *m, int part, char *buf,
                     size_t len)
{
	const char *suf = part < m->nt ? m->t[part].suffix : "input_global_scale";
	(void)p;
	return snprintf(buf, len, "%s.%s", m->name, suf) >= (int)len ? -ENAMETOOLONG : 0;
}

static int part_spec(const struct rq_plan *p, const struct rq_module *m, int part,
                     struct st_spec *x, struct rq_err *err)
{
	if (part >= m->nt) {           /* CALIB's input_global_scale F32 [1] */
		x->dtype = ST_F32;
		x->ndim = 1;
		x->shape[0] = 1;
		return 0;
	}
	const struct rq_stensor *t = &m->t[part];
	if (st_dtype_parse(t->dtype, strlen(t->dtype), &x->dtype))
		return rq_errf(err, -EINVAL, "%s.%s: scheme %s gives unknown dtype %s", m->name,
		               t->suffix, rq_scheme_name(p->scheme), t->dtype);
	x->ndim = t->ndim;
	for (int d = 0; d < t->ndim && d < 2; d++)
		x->shape[d] = t->shape[d];
	return 0;
}

/* A shard holding requantized modules: the file save_file would write. */
static int rewrite_shard(struct rq_plan *p, size_t s, const struct st_header *h,
                         uint64_t *data_size, struct rq_err *err)
{
	struct rq_vfile *f = &p->files[s];
	size_t nm = 0, np = 0;
	for (size_t i = 0; i < p->nmods; i++)
		if (p->mods[i].src == (int)s) {
			nm++;
			np += (size_t)mod_parts(p, &p->mods[i]);
		}
	size_t nspec = h->n - nm + np, ns = 0, cap = 0, nn = 0;
	struct st_spec *spec = calloc(nspec, sizeof *spec);
	int *what = calloc(nspec, sizeof *what);        /* -1: SRC tensor, else part */
	size_t *ref = calloc(nspec, sizeof *ref);       /* tensor index or module index */
	char *skip = calloc(h->n ? h->n : 1, 1);
	size_t *order = calloc(nspec, sizeof *order);
	uint64_t *begin = calloc(nspec, sizeof *begin);
	char **names = calloc(np + 1, sizeof *names);
	uint8_t *hb = NULL;
	size_t hlen = 0;
	int rc = -ENOMEM;
	if (!spec || !what || !ref || !skip || !order || !begin || !names)
		goto out;
	for (size_t i = 0; i < p->nmods; i++) {
		const struct rq_module *m = &p->mods[i];
		if (m->src != (int)s)
			continue;
		char wn[1100];
		snprintf(wn, sizeof wn, "%s.weight", m->name);
		skip[st_find(h, wn)] = 1;
		for (int part = 0; part < mod_parts(p, m); part++) {
			char pn[1100];
			rc = part_name(p, m, part, pn, sizeof pn);
			if (rc || !(names[nn] = strdup(pn))) {
				rc = rc ? rc : -ENOMEM;
				goto out;
			}
			struct st_spec *x = &spec[ns];
			x->name = names[nn++];
			if ((rc = part_spec(p, m, part, x, err)))
				goto out;
			what[ns] = part;
			ref[ns++] = i;
		}
	}
	rc = -ENOMEM;
	for (size_t t = 0; t < h->n; t++) {
		if (skip[t])
			continue;
		struct st_spec *x = &spec[ns];
		x->name = h->t[t].name;
		x->dtype = h->t[t].dtype;
		x->ndim = h->t[t].ndim;
		memcpy(x->shape, h->t[t].shape, sizeof x->shape);
		what[ns] = -1;
		ref[ns++] = t;
	}
	rc = st_layout(spec, ns, h->metadata, &hb, &hlen, order, begin, data_size, err);
	if (rc) {
		rq_err_prefix(err, "laying out shard %s", f->name);
		goto out;
	}
	rc = rq_plan_keep(p, hb);
	if (rc)
		goto out;
	f->changed = 1;
	rc = add_seg(f, &cap, (struct rq_seg){.off = 0, .len = hlen, .kind = RQ_SEG_MEM, .mem = hb});
	for (size_t i = 0; i < ns && !rc; i++) {
		size_t j = order[i];
		uint64_t off = hlen + begin[j];
		if (what[j] < 0) {
			const struct st_tensor *t = &h->t[ref[j]];
			rc = add_seg(f, &cap, (struct rq_seg){.off = off, .len = t->end - t->begin,
			             .kind = RQ_SEG_SRC, .src = (int)s, .src_off = h->data_start + t->begin});
			continue;
		}
		const struct rq_module *m = &p->mods[ref[j]];
		if (what[j] >= m->nt) {
			uint8_t *b = malloc(4);
			if (!b || (rc = rq_plan_keep(p, b)))
				break;
			memcpy(b, &m->input_gs_bits, 4);  /* little-endian host */
			rc = add_seg(f, &cap, (struct rq_seg){.off = off, .len = 4, .kind = RQ_SEG_MEM,
			                                      .mem = b});
			continue;
		}
		const struct rq_stensor *t = &m->t[what[j]];
		rc = add_seg(f, &cap, (struct rq_seg){.off = off, .len = t->len, .kind = RQ_SEG_JOB,
		                                      .job = m->job,
		                                      .job_off = p->jobs[m->job].mod_off[m->slot] +
		                                                 t->off});
	}
	f->size = hlen + *data_size;
out:
	for (size_t i = 0; names && i < nn; i++)
		free(names[i]);
	free(names);
	free(spec);
	free(what);
	free(ref);
	free(skip);
	free(order);
	free(begin);
	return rc;
}

static int cmp_item(const void *a, const void *b)
{
	const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
	return strcmp(x->string, y->string);
}

static int rewrite_index(struct rq_plan *p, struct rq_vfile *f, const uint64_t *data_size,
                         struct rq_err *err)
{
	char *text;
	size_t len;
	int rc = rq_src_whole(p, &p->srcs[f->src], &text, &len, err);
	if (rc)
		return rc;
	cJSON *wm, *j = jt_index_parse(text, len, p->srcs[f->src].path, &wm, err);
	if (!j)
		return err ? err->code : -EPROTO;
	/* cJSON objects are lists: index the weight_map once (sorted by key), so
	 * the real Laguna index (126k entries, 6k modules) costs milliseconds,
	 * not a lookup and a delete scanning the list per module. */
	size_t n = 0, k = 0;
	for (cJSON *e = wm->child; e; e = e->next)
		n++;
	cJSON **ix = malloc((n ? n : 1) * sizeof *ix);
	cJSON **gone = malloc((p->nmods ? p->nmods : 1) * sizeof *gone);   /* detached entries */
	size_t ngone = 0;
	char *used = calloc(p->nsrcs ? p->nsrcs : 1, 1);
	rc = ix && gone && used ? 0 : -ENOMEM;
	for (cJSON *e = wm->child; e && !rc; e = e->next)
		if (e->string)
			ix[k++] = e;
	if (!rc)
		qsort(ix, k, sizeof *ix, cmp_item);
	for (size_t i = 0; i < p->nmods && !rc; i++) {
		const struct rq_module *m = &p->mods[i];
		char wn[1100];
		snprintf(wn, sizeof wn, "%s.weight", m->name);
		cJSON key = {.string = wn}, *kp = &key;
		cJSON **hit = k ? bsearch(&kp, ix, k, sizeof *ix, cmp_item) : NULL;
		cJSON *e = hit ? *hit : NULL;
		if (!cJSON_IsString(e) || strcmp(e->valuestring, p->srcs[m->src].name)) {
			rc = rq_errf(err, -EPROTO, "SRC %s maps %s to %s, but it is in %s; the index does "
			             "not match the shards", f->name, wn,
			             cJSON_IsString(e) ? e->valuestring : "nothing", p->srcs[m->src].name);
			break;
		}
		/* detached now, freed after the loop: ix still points at it */
		gone[ngone++] = cJSON_DetachItemViaPointer(wm, e);
		for (int part = 0; part < mod_parts(p, m) && !rc; part++) {
			rc = part_name(p, m, part, wn, sizeof wn);
			if (!rc && !cJSON_AddStringToObject(wm, wn, p->srcs[m->src].name))
				rc = -ENOMEM;
		}
	}
	free(ix);
	for (size_t i = 0; i < ngone; i++)
		cJSON_Delete(gone[i]);
	free(gone);
	/* total_size: the data of every shard the new weight_map still names */
	for (cJSON *e = wm->child; e && !rc; e = e->next) {
		const struct rq_srcfile *sf = cJSON_IsString(e) ? rq_src_find(p, e->valuestring) : NULL;
		if (sf)
			used[sf - p->srcs] = 1;
	}
	uint64_t total = 0;
	for (size_t s = 0; s < p->nsrcs && !rc; s++)
		total += used[s] ? data_size[s] : 0;
	free(used);
	cJSON *md = cJSON_GetObjectItemCaseSensitive(j, "metadata");
	if (!rc && cJSON_IsObject(md)) {
		cJSON *ts = cJSON_CreateNumber((double)total);
		if (!ts || !cJSON_ReplaceItemInObjectCaseSensitive(md, "total_size", ts)) {
			cJSON_Delete(ts);
			if (!cJSON_AddNumberToObject(md, "total_size", (double)total))
				rc = -ENOMEM;
		}
	}
	struct jt_buf b = {0};
	if (!rc) {
		jt_dump_python(&b, j, 0);
		jt_put(&b, "\n", 1);
		rc = b.oom ? -ENOMEM : 0;
	}
	cJSON_Delete(j);
	if (rc) {
		free(b.p);
		return rc;
	}
	return mem_file(p, f, b.p, b.len);
}

int rq_plan_layout(struct rq_plan *p, char *config, size_t config_len, struct st_header **hdr,
                   struct rq_err *err)
{
	p->files = calloc(p->nsrcs, sizeof *p->files);
	uint64_t *data_size = calloc(p->nsrcs, sizeof *data_size);
	char *has_mod = calloc(p->nsrcs, 1);
	int rc = -ENOMEM;
	if (!p->files || !data_size || !has_mod)
		goto out;
	p->nfiles = p->nsrcs;
	for (size_t i = 0; i < p->nmods; i++)
		has_mod[p->mods[i].src] = 1;
	long index = -1;
	rc = 0;
	for (size_t s = 0; s < p->nsrcs && !rc; s++) {
		struct rq_vfile *f = &p->files[s];
		f->src = (int)s;
		if (!(f->name = strdup(p->srcs[s].name))) {
			rc = -ENOMEM;
			break;
		}
		if (hdr[s])
			data_size[s] = hdr[s]->file_size - hdr[s]->data_start;
		if (!strcmp(f->name, "config.json")) {
			rc = mem_file(p, f, config, config_len);   /* frees it on failure */
			config = NULL;
		} else if (!strcmp(f->name, "model.safetensors.index.json")) {
			index = (long)s;             /* after every shard's size is known */
		} else if (has_mod[s]) {
			rc = rewrite_shard(p, s, hdr[s], &data_size[s], err);
		} else {
			size_t cap = 0;
			f->size = p->srcs[s].size;
			rc = add_seg(f, &cap, (struct rq_seg){.off = 0, .len = f->size, .kind = RQ_SEG_SRC,
			                                      .src = (int)s, .src_off = 0});
		}
	}
	if (!rc && index >= 0)
		rc = rewrite_index(p, &p->files[index], data_size, err);
	for (size_t s = 0; s < p->nfiles && !rc; s++)
		p->total_size += p->files[s].size;
out:
	free(config);     /* not taken: no config.json in SRC, or out of memory first */
	free(data_size);
	free(has_mod);
	return rc;
}
