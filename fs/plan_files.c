/* plan_files.c — the virtual files of a plan as segment lists (SPEC.md §4):
 * config.json without the dropped rule, the rewritten index, the rewritten
 * shards; every other file is its SRC file as is. */
#include "base/grow.h"
#include "fs/plan_int.h"
#include "fs/ckpt.h"
#include "st/jtext.h"
#include "base/err.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rq_plan_layout(struct rq_plan *p, const char *config, size_t config_len,
                   size_t rule_index, struct st_header **hdr, struct rq_err *err);

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
static int rewrite_config(struct rq_plan *p, struct rq_vfile *f, const char *cfg, size_t n,
                          size_t k, struct rq_err *err)
{
	size_t qc, ign, cnt;
	int rc = jt_member(cfg, n, jt_ws(cfg, n, 0), "quantization_config", &qc);
	if (!rc)
		rc = jt_member(cfg, n, qc, "ignore", &ign);
	if (!rc)
		rc = jt_elements(cfg, n, ign, NULL, NULL, 0, &cnt);
	if (rc || k >= cnt)
		return rq_errf(err, -EPROTO, "config.json: cannot locate quantization_config.ignore[%zu]",
		               k);
	size_t *st = malloc(cnt * sizeof *st), *en = malloc(cnt * sizeof *en);
	if (!st || !en) {
		free(st);
		free(en);
		return -ENOMEM;
	}
	jt_elements(cfg, n, ign, st, en, cnt, &cnt);
	size_t cut_b, cut_e;
	if (k + 1 < cnt) {          /* element, comma, whitespace up to the next element */
		cut_b = st[k];
		cut_e = st[k + 1];
	} else if (k > 0) {         /* last: comma and whitespace after the previous one */
		cut_b = en[k - 1];
		cut_e = en[k];
	} else {                    /* the only element */
		cut_b = st[k];
		cut_e = en[k];
	}
	free(st);
	free(en);
	char *out = malloc(n - (cut_e - cut_b) + 1);
	if (!out)
		return -ENOMEM;
	memcpy(out, cfg, cut_b);
	memcpy(out + cut_b, cfg + cut_e, n - cut_e);
	return mem_file(p, f, out, n - (cut_e - cut_b));
}

static const char *part_suffix[4] = {
	".weight_packed", ".weight_scale", ".weight_global_scale", ".input_global_scale"
};

/* A shard holding requantized modules: the file save_file would write. */
static int rewrite_shard(struct rq_plan *p, size_t s, const struct st_header *h,
                         uint64_t *data_size, struct rq_err *err)
{
	struct rq_vfile *f = &p->files[s];
	size_t nm = 0;
	for (size_t i = 0; i < p->nmods; i++)
		nm += p->mods[i].src == (int)s;
	size_t nspec = h->n - nm + 4 * nm, ns = 0, cap = 0, nn = 0;
	struct st_spec *spec = calloc(nspec, sizeof *spec);
	int *what = calloc(nspec, sizeof *what);        /* -1: SRC tensor, else part */
	size_t *ref = calloc(nspec, sizeof *ref);       /* tensor index or module index */
	char *skip = calloc(h->n ? h->n : 1, 1);
	size_t *order = calloc(nspec, sizeof *order);
	uint64_t *begin = calloc(nspec, sizeof *begin);
	char **names = calloc(4 * nm + 1, sizeof *names);
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
		for (int part = 0; part < 4; part++) {
			size_t l = strlen(m->name) + strlen(part_suffix[part]) + 1;
			if (!(names[nn] = malloc(l)))
				goto out;
			snprintf(names[nn], l, "%s%s", m->name, part_suffix[part]);
			struct st_spec *x = &spec[ns];
			x->name = names[nn++];
			x->ndim = part < 2 ? 2 : 1;
			x->shape[0] = part < 2 ? m->rows : 1;
			x->shape[1] = part == 0 ? m->cols / 2 : m->cols / 16;
			x->dtype = part == 0 ? ST_U8 : part == 1 ? ST_F8_E4M3 : ST_F32;
			what[ns] = part;
			ref[ns++] = i;
		}
	}
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
		if (what[j] == 3) {
			uint8_t *b = malloc(4);
			if (!b || (rc = rq_plan_keep(p, b)))
				break;
			memcpy(b, &m->input_gs_bits, 4);  /* little-endian host */
			rc = add_seg(f, &cap, (struct rq_seg){.off = off, .len = 4, .kind = RQ_SEG_MEM,
			                                      .mem = b});
			continue;
		}
		uint64_t jo = what[j] == 0 ? rq_mod_packed_off(p, m)
		            : what[j] == 1 ? rq_mod_scales_off(p, m) : rq_mod_gs_off(p, m);
		uint64_t len = what[j] == 0 ? m->rows * m->cols / 2
		             : what[j] == 1 ? m->rows * m->cols / 16 : 4;
		rc = add_seg(f, &cap, (struct rq_seg){.off = off, .len = len, .kind = RQ_SEG_JOB,
		                                      .job = m->job, .job_off = jo});
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

static int rewrite_index(struct rq_plan *p, struct rq_vfile *f, const uint64_t *data_size,
                         struct rq_err *err)
{
	char *text;
	size_t len;
	int rc = rq_read_whole(p->srcs[f->src].path, &text, &len);
	if (rc)
		return rq_errf(err, rc, "SRC %s: %s", f->name, strerror(-rc));
	cJSON *wm, *j = jt_index_parse(text, len, &wm);
	if (!j)
		return rq_errf(err, -EPROTO, "SRC %s has no weight_map object", f->name);
	rc = 0;
	for (size_t i = 0; i < p->nmods && !rc; i++) {
		const struct rq_module *m = &p->mods[i];
		char wn[1100];
		snprintf(wn, sizeof wn, "%s.weight", m->name);
		cJSON *e = cJSON_GetObjectItemCaseSensitive(wm, wn);
		if (!cJSON_IsString(e) || strcmp(e->valuestring, p->srcs[m->src].name)) {
			rc = rq_errf(err, -EPROTO, "SRC %s maps %s to %s, but it is in %s; the index does "
			             "not match the shards", f->name, wn,
			             cJSON_IsString(e) ? e->valuestring : "nothing", p->srcs[m->src].name);
			break;
		}
		cJSON_DeleteItemFromObjectCaseSensitive(wm, wn);
		for (int part = 0; part < 4; part++) {
			snprintf(wn, sizeof wn, "%s%s", m->name, part_suffix[part]);
			if (!cJSON_AddStringToObject(wm, wn, p->srcs[m->src].name))
				rc = -ENOMEM;
		}
	}
	uint64_t total = 0;
	for (size_t s = 0; s < p->nsrcs && !rc; s++) {
		int used = 0;
		for (cJSON *e = wm->child; e && !used; e = e->next)
			used = cJSON_IsString(e) && !strcmp(e->valuestring, p->srcs[s].name);
		total += used ? data_size[s] : 0;
	}
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

int rq_plan_layout(struct rq_plan *p, const char *config, size_t config_len,
                   size_t rule_index, struct st_header **hdr, struct rq_err *err)
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
			rc = rewrite_config(p, f, config, config_len, rule_index, err);
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
	free(data_size);
	free(has_mod);
	return rc;
}
