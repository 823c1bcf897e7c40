/* qconfig_json.c — the quantization_config JSON of each scheme, exactly as
 * compressed-tensors 0.19.0's QuantizationConfig.model_dump() gives it under
 * llm-compressor 0.14.0.1 model_free_ptq (golden dumps:
 * tests/data/qconfig_golden/, tools/golden/gen_qconfig_golden.py), and the text
 * edits that write it into config.json without re-serializing the file. */
#include "plan/qconfig_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* compressed-tensors QuantizationArgs of a preset, the fields that vary;
 * actorder, block_structure, observer and zp_dtype dump as null,
 * observer_kwargs as {}, symmetric as true for all four presets. */
struct qargs {
	int num_bits;
	const char *type;          /* "float" | "int" */
	const char *strategy;      /* "tensor_group" | "channel" | "group" | "token" */
	int group_size;            /* 0: null */
	int dynamic;               /* JSON false / true; 2: "local" (DynamicType.LOCAL) */
	const char *scale_dtype;   /* NULL: null */
	const char *observer;      /* NULL: null (model_free_ptq's dump) */
};

static const struct {
	enum rq_scheme scheme;
	struct qargs w;
	int has_input;             /* 0: "input_activations": null */
	struct qargs in;
} presets[] = {
	{RQ_SCHEME_NVFP4A16, {4, "float", "tensor_group", 16, 0, "torch.float8_e4m3fn", NULL}, 0,
	 {0, NULL, NULL, 0, 0, NULL, NULL}},
	{RQ_SCHEME_FP8_DYNAMIC, {8, "float", "channel", 0, 0, NULL, NULL}, 1,
	 {8, "float", "token", 0, 1, NULL, NULL}},
	{RQ_SCHEME_W8A16, {8, "int", "group", 128, 0, NULL, NULL}, 0,
	 {0, NULL, NULL, 0, 0, NULL, NULL}},
	{RQ_SCHEME_W4A16, {4, "int", "group", 128, 0, NULL, NULL}, 0,
	 {0, NULL, NULL, 0, 0, NULL, NULL}},
	/* --scheme nvfp4: what oneshot(scheme="NVFP4") saves (checked against its output for
	 * tests/data/tiny/llama and qwen2_moe): the observers stay in the dump, the input's
	 * dynamic is "local" (static global scale, per-group scales computed at run time) */
	{RQ_SCHEME_NVFP4_W4A4, {4, "float", "tensor_group", 16, 0, "torch.float8_e4m3fn",
	                        "memoryless_minmax"}, 1,
	 {4, "float", "tensor_group", 16, 2, "torch.float8_e4m3fn", "static_minmax"}},
};
#define NPRESETS (sizeof presets / sizeof presets[0])

static int preset_index(enum rq_scheme s)
{
	for (size_t k = 0; k < NPRESETS; k++)
		if (presets[k].scheme == s)
			return (int)k;
	return -1;
}

int qc_preset_find(enum rq_scheme s)
{
	return preset_index(s) < 0 ? -EINVAL : 0;
}

/* Keys are added in sorted order: model_free_ptq json.dump's with sort_keys. */
static cJSON *args_json(const struct qargs *a)
{
	cJSON *o = cJSON_CreateObject();
	if (!o)
		return NULL;
	cJSON_AddNullToObject(o, "actorder");
	cJSON_AddNullToObject(o, "block_structure");
	if (a->dynamic == 2)
		cJSON_AddStringToObject(o, "dynamic", "local");
	else
		cJSON_AddBoolToObject(o, "dynamic", a->dynamic);
	if (a->group_size)
		cJSON_AddNumberToObject(o, "group_size", a->group_size);
	else
		cJSON_AddNullToObject(o, "group_size");
	cJSON_AddNumberToObject(o, "num_bits", a->num_bits);
	if (a->observer)
		cJSON_AddStringToObject(o, "observer", a->observer);
	else
		cJSON_AddNullToObject(o, "observer");
	cJSON_AddObjectToObject(o, "observer_kwargs");
	if (a->scale_dtype)
		cJSON_AddStringToObject(o, "scale_dtype", a->scale_dtype);
	else
		cJSON_AddNullToObject(o, "scale_dtype");
	cJSON_AddStringToObject(o, "strategy", a->strategy);
	cJSON_AddBoolToObject(o, "symmetric", 1);
	cJSON_AddStringToObject(o, "type", a->type);
	cJSON_AddNullToObject(o, "zp_dtype");
	return o;
}

static cJSON *strings_json(const char *const *v, size_t n)
{
	cJSON *a = cJSON_CreateArray();
	for (size_t i = 0; a && i < n; i++)
		cJSON_AddItemToArray(a, cJSON_CreateString(v[i]));
	return a;
}

/* cJSON's Add* return NULL on allocation failure but keep the tree valid;
 * a tree missing a member is caught by counting them. */
static int complete(const cJSON *o, int members)
{
	return o && cJSON_GetArraySize(o) == members;
}

cJSON *qc_group_json(enum rq_scheme s, enum rq_observer o, const char *in_obs,
                     const char *const *targets, size_t nt)
{
	int k = preset_index(s);
	cJSON *g = k < 0 ? NULL : cJSON_CreateObject();
	if (!g)
		return NULL;
	cJSON_AddStringToObject(g, "format", rq_scheme_format(s));
	struct qargs in = presets[k].in;
	if (in_obs && s == RQ_SCHEME_NVFP4_W4A4)   /* the calibration's observer, as oneshot dumps it */
		in.observer = in_obs;
	if (presets[k].has_input)
		cJSON_AddItemToObject(g, "input_activations", args_json(&in));
	else
		cJSON_AddNullToObject(g, "input_activations");
	cJSON_AddNullToObject(g, "output_activations");
	cJSON *t = strings_json(targets, nt);
	if (t && cJSON_GetArraySize(t) == (int)nt)
		cJSON_AddItemToObject(g, "targets", t);
	else
		cJSON_Delete(t);
	struct qargs w = presets[k].w;
	if (o != RQ_OBSERVER_MINMAX)     /* what a scheme whose weights.observer is set dumps */
		w.observer = rq_observer_llmc(o);
	cJSON_AddItemToObject(g, "weights", args_json(&w));
	if (!complete(g, 5)) {
		cJSON_Delete(g);
		return NULL;
	}
	return g;
}

cJSON *qc_config_json(enum rq_scheme s, enum rq_observer o, const char *in_obs,
                      const char *group_name,
                      const char *const *targets, size_t nt, const char *const *ignore,
                      size_t ni)
{
	cJSON *q = cJSON_CreateObject();
	cJSON *groups = q ? cJSON_AddObjectToObject(q, "config_groups") : NULL;
	cJSON *g = qc_group_json(s, o, in_obs, targets, nt), *ig = strings_json(ignore, ni);
	if (!groups || !g || !ig || cJSON_GetArraySize(ig) != (int)ni) {
		cJSON_Delete(q);
		cJSON_Delete(g);
		cJSON_Delete(ig);
		return NULL;
	}
	cJSON_AddItemToObject(groups, group_name, g);
	cJSON_AddStringToObject(q, "format", rq_scheme_format(s));
	cJSON_AddNullToObject(q, "global_compression_ratio");
	cJSON_AddItemToObject(q, "ignore", ig);
	cJSON_AddNullToObject(q, "kv_cache_scheme");
	cJSON_AddStringToObject(q, "quant_method", "compressed-tensors");
	cJSON_AddStringToObject(q, "quantization_status", "compressed");
	int members = 9;
	if (s == RQ_SCHEME_NVFP4_W4A4) {   /* oneshot's save keeps an empty sparsity_config */
		cJSON_AddObjectToObject(q, "sparsity_config");
		members++;
	}
	cJSON_AddObjectToObject(q, "transform_config");
	cJSON_AddStringToObject(q, "version", QC_CT_VERSION);
	if (!complete(q, members) || !complete(groups, 1)) {
		cJSON_Delete(q);
		return NULL;
	}
	return q;
}

/* ---- writing JSON in the file's own style ---- */

struct style {
	int pretty;                /* members on their own lines */
	char nl[3];                /* "\n" or "\r\n" */
	char unit[64];             /* one level of indentation */
	char kv[16];               /* between a key and its value, e.g. ": " */
	char sep[16];              /* compact: between members, e.g. ", " */
};

/* An object's members: the first one's key and value spans, where the second
 * key starts, where the last value ends. */
struct members {
	size_t count;
	size_t first_key, first_key_end, first_val, first_val_end, second_key;
	size_t last_val_end;
};

static int scan_members(const char *s, size_t n, size_t obj, struct members *m)
{
	memset(m, 0, sizeof *m);
	size_t i = jt_ws(s, n, obj);
	if (i >= n || s[i] != '{')
		return -EPROTO;
	i = jt_ws(s, n, i + 1);
	while (i < n && s[i] != '}') {
		if (s[i] != '"')
			return -EPROTO;
		size_t ke = jt_value_end(s, n, i);
		if (!ke)
			return -EPROTO;
		size_t c = jt_ws(s, n, ke);
		if (c >= n || s[c] != ':')
			return -EPROTO;
		size_t vb = jt_ws(s, n, c + 1), ve = jt_value_end(s, n, vb);
		if (!ve)
			return -EPROTO;
		if (m->count == 0) {
			m->first_key = i;
			m->first_key_end = ke;
			m->first_val = vb;
			m->first_val_end = ve;
		} else if (m->count == 1) {
			m->second_key = i;
		}
		m->count++;
		m->last_val_end = ve;
		i = jt_ws(s, n, ve);
		if (i < n && s[i] == ',')
			i = jt_ws(s, n, i + 1);
		else if (i < n && s[i] != '}')
			return -EPROTO;
	}
	return i < n ? 0 : -EPROTO;
}

/* Leading blanks of the line holding s[pos], as [*b, *e). */
static void line_indent(const char *s, size_t pos, size_t *b, size_t *e)
{
	size_t i = pos;
	while (i > 0 && s[i - 1] != '\n')
		i--;
	*b = i;
	while (i < pos && (s[i] == ' ' || s[i] == '\t'))
		i++;
	*e = i;
}

static void copy_span(char *dst, size_t cap, const char *s, size_t b, size_t e)
{
	size_t l = e - b < cap - 1 ? e - b : cap - 1;
	memcpy(dst, s + b, l);
	dst[l] = 0;
}

/* The style of the object at s[obj] (m: its members, at least one): pretty
 * when a newline precedes its first key; then mi = its members' indentation
 * and unit = what it adds to the indentation of the object's own line. */
static void detect_style(const char *s, size_t obj, const struct members *m, struct style *st,
                         char mi[256])
{
	size_t lastnl = 0, ob, oe;
	int has_nl = 0;
	for (size_t i = obj + 1; i < m->first_key; i++)
		if (s[i] == '\n') {
			has_nl = 1;
			lastnl = i;
		}
	if (has_nl) {
		st->pretty = 1;
		if (lastnl > 0 && s[lastnl - 1] == '\r')
			strcpy(st->nl, "\r\n");
		copy_span(mi, 256, s, lastnl + 1, m->first_key);
		line_indent(s, obj, &ob, &oe);
		size_t own = oe - ob, mlen = m->first_key - lastnl - 1;
		if (mlen > own && !memcmp(s + ob, s + lastnl + 1, own))
			copy_span(st->unit, sizeof st->unit, s, lastnl + 1 + own, m->first_key);
		else
			copy_span(st->unit, sizeof st->unit, s, lastnl + 1, m->first_key);
	}
	size_t kb = m->first_key_end, ke = m->first_val;
	if (ke - kb < sizeof st->kv && !memchr(s + kb, '\n', ke - kb))
		copy_span(st->kv, sizeof st->kv, s, kb, ke);
	if (!st->pretty && m->count > 1 && m->second_key - m->first_val_end < sizeof st->sep)
		copy_span(st->sep, sizeof st->sep, s, m->first_val_end, m->second_key);
}

static void put_line(struct jt_buf *b, const struct style *st, const char *base, int depth)
{
	jt_puts(b, st->nl);
	jt_puts(b, base);
	for (int d = 0; d < depth; d++)
		jt_puts(b, st->unit);
}

static void put_string(struct jt_buf *b, const char *s)
{
	cJSON str = {.type = cJSON_String, .valuestring = (char *)s};
	jt_dump_python(b, &str, 0);   /* Python's escapes, ensure_ascii */
}

/* v on a line indented base + depth units, its members one unit deeper, as
 * json.dumps(indent=...) writes it; or on one line in compact style. */
static void put_value(struct jt_buf *b, const cJSON *v, const struct style *st, const char *base,
                      int depth)
{
	if (!cJSON_IsObject(v) && !cJSON_IsArray(v)) {
		jt_dump_python(b, v, 0);   /* a string, an integer, null, true, false */
		return;
	}
	int obj = cJSON_IsObject(v), first = 1;
	jt_puts(b, obj ? "{" : "[");
	const cJSON *c;
	cJSON_ArrayForEach(c, v) {
		if (!first)
			jt_puts(b, st->pretty ? "," : st->sep);
		first = 0;
		if (st->pretty)
			put_line(b, st, base, depth + 1);
		if (obj) {
			put_string(b, c->string);
			jt_puts(b, st->kv);
		}
		put_value(b, c, st, base, depth + 1);
	}
	if (!first && st->pretty)
		put_line(b, st, base, depth);
	jt_puts(b, obj ? "}" : "]");
}

int qc_insert_member(struct jt_buf *out, const char *s, size_t n, size_t obj, const char *key,
                     const cJSON *v, int pretty)
{
	struct members m;
	obj = jt_ws(s, n, obj);
	int rc = scan_members(s, n, obj, &m);
	if (rc)
		return rc;
	struct style st = {.nl = "\n", .unit = "  ", .kv = ": ", .sep = ", "};
	char mi[256] = "", base[320];
	struct jt_buf mem = {0};
	size_t at, ob, oe;
	if (m.count) {               /* after the last member, like the others */
		detect_style(s, obj, &m, &st, mi);
		at = m.last_val_end;
		jt_puts(&mem, st.pretty ? "," : st.sep);
		if (st.pretty) {
			jt_puts(&mem, st.nl);
			jt_puts(&mem, mi);
		}
		snprintf(base, sizeof base, "%s", mi);
	} else {                     /* an empty object: one unit below its line */
		at = obj + 1;
		line_indent(s, obj, &ob, &oe);
		copy_span(mi, sizeof mi, s, ob, oe);
		st.pretty = pretty;
		snprintf(base, sizeof base, "%s%s", mi, st.pretty ? st.unit : "");
		if (st.pretty) {
			jt_puts(&mem, st.nl);
			jt_puts(&mem, base);
		}
	}
	put_string(&mem, key);
	jt_puts(&mem, st.kv);
	put_value(&mem, v, &st, base, 0);
	if (!m.count && st.pretty) {
		jt_puts(&mem, st.nl);
		jt_puts(&mem, mi);
	}
	if (!mem.oom) {
		jt_put(out, s, at);
		jt_put(out, mem.p, mem.len);
		jt_put(out, s + at, n - at);
	}
	rc = mem.oom || out->oom ? -ENOMEM : 0;
	free(mem.p);
	return rc;
}

int qc_replace_value(struct jt_buf *out, const char *s, size_t n, size_t obj, const char *key,
                     const char *text)
{
	size_t v;
	int rc = jt_member(s, n, obj, key, &v);
	if (rc)
		return rc;
	size_t e = jt_value_end(s, n, v);
	if (!e)
		return -EPROTO;
	jt_put(out, s, v);
	jt_puts(out, text);
	jt_put(out, s + e, n - e);
	return out->oom ? -ENOMEM : 0;
}
