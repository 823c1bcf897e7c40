/* chat.c — loads a model's chat template and renders conversations with it
 * through the Jinja interpreter (engine/chat/jinja.h); what the template sees is
 * written in chat.h.
 *
 * The order of this folder (held by tests/tools/test_layout.py): each file
 * calls only the files below it (jinja_int.h declares what crosses; the
 * builtins read the render's context, never call the evaluator).
 *
 *   template  chat.c           a model's template, its variables, a render
 *   render    jinja_eval.c     jinja_render: runs the statement tree
 *   front     jinja_parse.c    tokens to the statement tree
 *             jinja_lex.c      the template's text to tokens
 *   builtins  jinja_filters.c  the filters and tests
 *             jinja_methods.c  obj.name, the methods of strings, dicts and
 *                              lists, the globals
 *             jinja_ops.c      arithmetic, ordering, `in`
 *   values    jinja_value.c    the arena, values, str/repr/tojson, UTF-8 */
#include "engine/chat/chat.h"
#include "engine/chat/jinja.h"
#include "base/err.h"
#include "base/file.h"
#include "st/jcheck.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* transformers' SPECIAL_TOKENS_ATTRIBUTES: apply_chat_template passes the set ones */
static const char *const special_names[] = {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
	"cls_token", "mask_token"};
#define N_SPECIAL 7

struct chat_template {
	char *text;                  /* the Jinja source */
	char *special[N_SPECIAL];    /* special_names' values, or NULL */
	cJSON *extra;                /* chat_template_set_var's variables: an object, or NULL */
	uint64_t budget;             /* work budget of a render (0: jinja's default) */
	char source[4200];           /* the file it came from, for messages */
};

void chat_template_free(struct chat_template *t)
{
	if (!t)
		return;
	free(t->text);
	for (int i = 0; i < N_SPECIAL; i++)
		free(t->special[i]);
	cJSON_Delete(t->extra);
	free(t);
}

static int set_item(struct chat_template *t, const char *name, cJSON *item)
{
	if (!item || (!t->extra && !(t->extra = cJSON_CreateObject()))) {
		cJSON_Delete(item);
		return -ENOMEM;
	}
	cJSON_DeleteItemFromObjectCaseSensitive(t->extra, name);
	return cJSON_AddItemToObject(t->extra, name, item) ? 0 : -ENOMEM;
}

int chat_template_set_var(struct chat_template *t, const char *name, const char *value)
{
	return set_item(t, name, cJSON_CreateString(value));
}

void chat_template_set_budget(struct chat_template *t, uint64_t units)
{
	t->budget = units;
}

int chat_template_set_json(struct chat_template *t, const char *name, const char *json, struct rq_err *err)
{
	cJSON *v = cJSON_Parse(json);
	if (!v)
		return rq_errf(err, -EINVAL, "chat template variable %s: not valid JSON", name);
	int rc = set_item(t, name, v);
	return rc ? rq_errf(err, rc, "chat template: out of memory") : 0;
}

/* chat_template.jinja and tokenizer_config.json: small files, read whole
 * through base/file.h (a FIFO or a device there is refused, never waited
 * on; at most CHAT_FILE_MAX bytes). A missing file is no error: *out NULL. */
#define CHAT_FILE_MAX (16u << 20)

static int slurp(const char *path, char **out, struct rq_err *err)
{
	size_t len;
	*out = NULL;
	int rc = rq_file_read(path, CHAT_FILE_MAX, out, &len, err);
	if (rc == -ENOENT) {
		*err = (struct rq_err){0};
		return 0;
	}
	return rc;
}

/* A special token as tokenizer_config.json writes it: "text" or {"content": "text", ...}. */
static const char *token_text(const cJSON *j)
{
	if (cJSON_IsString(j))
		return j->valuestring;
	return cJSON_GetStringValue(cJSON_GetObjectItem(j, "content"));
}

/* tokenizer_config.json's chat_template: the string, or the "default" entry of a list. */
static int config_template(const cJSON *cfg, const char *path, const char **out, struct rq_err *err)
{
	const cJSON *t = cJSON_GetObjectItem(cfg, "chat_template"), *e;
	*out = NULL;
	if (!t || cJSON_IsNull(t))
		return 0;
	if (cJSON_IsString(t)) {
		*out = t->valuestring;
		return 0;
	}
	if (!cJSON_IsArray(t))
		return rq_errf(err, -EPROTO, "%s: \"chat_template\" is neither a string nor a list of "
			       "{name, template}", path);
	cJSON_ArrayForEach(e, t)
		if (!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(e, "name")) ?: "", "default"))
			*out = cJSON_GetStringValue(cJSON_GetObjectItem(e, "template"));
	if (!*out)
		return rq_errf(err, -EPROTO, "%s: \"chat_template\" is a list without a \"default\" template", path);
	return 0;
}

int chat_template_new(const char *text, const char *bos, const char *eos, struct chat_template **out,
                      struct rq_err *err)
{
	struct chat_template *t = calloc(1, sizeof *t);
	if (!t || !(t->text = strdup(text)) || (bos && !(t->special[0] = strdup(bos))) ||
	    (eos && !(t->special[1] = strdup(eos)))) {
		chat_template_free(t);
		return rq_errf(err, -ENOMEM, "chat template: out of memory");
	}
	snprintf(t->source, sizeof t->source, "chat template");
	*out = t;
	return 0;
}

int chat_template_load(const char *model_dir, struct chat_template **out, struct rq_err *err)
{
	char jinja[4200], cfgpath[4200];
	snprintf(jinja, sizeof jinja, "%s/chat_template.jinja", model_dir);
	snprintf(cfgpath, sizeof cfgpath, "%s/tokenizer_config.json", model_dir);
	char *text = NULL, *cfgtext = NULL;
	cJSON *cfg = NULL;
	const char *from_cfg = NULL, *src;
	struct chat_template *t = NULL;
	int rc;
	if ((rc = slurp(jinja, &text, err)) || (rc = slurp(cfgpath, &cfgtext, err)))
		goto out;
	src = text ? jinja : cfgpath;
	cfg = cfgtext ? jc_parse(cfgtext, strlen(cfgtext), cfgpath, err) : NULL;
	if (cfgtext && !cfg) {
		rc = err->code ? err->code : -EPROTO;   /* jc_parse said what and where */
		goto out;
	}
	if (cfg && (rc = config_template(cfg, cfgpath, &from_cfg, err)))
		goto out;
	if (!text && !from_cfg) {
		rc = rq_errf(err, -ENOENT, "%s has no chat template (neither chat_template.jinja nor "
			     "\"chat_template\" in tokenizer_config.json): give a plain --prompt without --chat",
			     model_dir);
		goto out;
	}
	if ((rc = chat_template_new(text ? text : from_cfg, NULL, NULL, &t, err)))
		goto out;
	snprintf(t->source, sizeof t->source, "%s", src);
	for (int i = 0; i < N_SPECIAL && cfg; i++) {
		const char *s = token_text(cJSON_GetObjectItem(cfg, special_names[i]));
		if (s && !(t->special[i] = strdup(s))) {
			rc = rq_errf(err, -ENOMEM, "chat template: out of memory");
			goto out;
		}
	}
	*out = t;
	t = NULL;
out:
	chat_template_free(t);
	cJSON_Delete(cfg);
	free(cfgtext);
	free(text);
	return rc;
}

/* The variables the template sees (chat.h), as a JSON object. */
static cJSON *variables(const struct chat_template *t, const struct chat_msg *msgs, size_t n, int gen,
                        int think)
{
	cJSON *v = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(v, "messages");
	int bad = !v || !list;
	for (size_t i = 0; i < n && !bad; i++) {
		cJSON *m = cJSON_CreateObject();
		bad = !m || !cJSON_AddItemToArray(list, m);
		if (!bad && msgs[i].reasoning)   /* transformers' aliases: thinking first, reasoning_content last */
			bad = !cJSON_AddStringToObject(m, "thinking", msgs[i].reasoning);
		bad = bad || !cJSON_AddStringToObject(m, "role", msgs[i].role) ||
		      !cJSON_AddStringToObject(m, "content", msgs[i].content);
		if (!bad && msgs[i].reasoning)
			bad = !cJSON_AddStringToObject(m, "reasoning_content", msgs[i].reasoning);
		cJSON *more = bad || !msgs[i].fields ? NULL : cJSON_Parse(msgs[i].fields), *f;
		while (more && (f = more->child)) {   /* moved over, in their order */
			cJSON_DetachItemViaPointer(more, f);
			cJSON_DeleteItemFromObjectCaseSensitive(m, f->string);
			cJSON_AddItemToObject(m, f->string, f);
		}
		cJSON_Delete(more);
	}
	bad = bad || !cJSON_AddBoolToObject(v, "add_generation_prompt", gen) ||
	      !cJSON_AddBoolToObject(v, "enable_thinking", think) || !cJSON_AddNullToObject(v, "tools") ||
	      !cJSON_AddNullToObject(v, "documents");
	for (int i = 0; i < N_SPECIAL && !bad; i++)
		if (t->special[i])
			bad = !cJSON_AddStringToObject(v, special_names[i], t->special[i]);
	const cJSON *e;
	cJSON_ArrayForEach(e, t->extra) {
		cJSON *c = bad ? NULL : cJSON_Duplicate(e, 1);
		bad = bad || !c;
		if (c) {
			cJSON_DeleteItemFromObjectCaseSensitive(v, e->string);
			cJSON_AddItemToObject(v, e->string, c);
		}
	}
	if (bad) {
		cJSON_Delete(v);
		return NULL;
	}
	return v;
}

int chat_render(const struct chat_template *t, const struct chat_msg *msgs, size_t n,
                int add_generation_prompt, int enable_thinking, char **out, size_t *out_len,
                struct rq_err *err)
{
	for (size_t k = 0; k < n; k++) {
		if (!msgs[k].role || !msgs[k].content)
			return rq_errf(err, -EINVAL, "chat message %zu: role and content are required", k);
		cJSON *f = msgs[k].fields ? cJSON_Parse(msgs[k].fields) : NULL;
		int ok = !msgs[k].fields || cJSON_IsObject(f);
		cJSON_Delete(f);
		if (!ok)
			return rq_errf(err, -EINVAL, "chat message %zu: its fields are not a JSON object", k);
	}
	cJSON *v = variables(t, msgs, n, add_generation_prompt, enable_thinking);
	if (!v)
		return rq_errf(err, -ENOMEM, "chat: out of memory");
	int rc = jinja_render_budget(t->text, strlen(t->text), v, t->budget, NULL, out, out_len, err);
	cJSON_Delete(v);
	if (rc && err)
		rq_err_prefix(err, "%s", t->source);
	return rc;
}
