/* test_chat — chat_render (the Jinja interpreter running the template that
 * mk_write_tokenizer ships) against jinja2 renderings of that template
 * (tests/data/chat_golden.json, made by tools/golden/gen_tok_golden.py and checked
 * there against transformers' apply_chat_template), byte for byte; and
 * chat_template_load's choices and refusals; and chat_render against
 * transformers' apply_chat_template itself (tests/data/chat_template_golden.json,
 * made by tools/golden/gen_chat_golden.py) on SmolLM2's own template (.models/, from
 * tools/setup: missing is a failure), Laguna's and tests/data/chat_templates/.
 *
 * usage: test_chat tests/data/chat_golden.json tests/data/chat_template_golden.json
 * (RQ_SOURCE_ROOT: the source tree, for .models/ and tests/data/chat_templates/) */
#include "engine/chat/chat.h"
#include "engine/chat/jinja.h"
#include "base/err.h"
#include "tools/mkckpt/mkckpt.h"
#include "tests/tap.h"
#include "tests/engine/tok_json.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

static uint64_t fnv64(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	while (*s)
		h = (h ^ (unsigned char)*s++) * 0x100000001b3ULL;
	return h;
}

/* The template mkckpt ships, from a freshly written tokenizer_config.json;
 * loaded with chat_template_load (NULL when that fails). */
static struct chat_template *check_template(const cJSON *g)
{
	struct chat_template *ct = NULL;
	char dir[] = "/tmp/rq-chat-XXXXXX", path[4200];
	struct rq_err err = {0};
	int vs;
	char *cfg = NULL;
	if (mkdtemp(dir) && !mk_write_tokenizer(dir, &vs, &err)) {
		snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
		cfg = tap_slurp(path, NULL);
	}
	cJSON *c = cfg ? cJSON_Parse(cfg) : NULL;
	const char *tmpl = cJSON_GetStringValue(cJSON_GetObjectItem(c, "chat_template"));
	char hash[32];
	snprintf(hash, sizeof hash, "%016llx", tmpl ? (unsigned long long)fnv64(tmpl) : 0ULL);
	TAP_OK(tmpl && !strcmp(hash, cJSON_GetStringValue(cJSON_GetObjectItem(g, "template_fnv64"))),
	       "the shipped chat template is the one the golden data was rendered from (fnv64 %s); "
	       "if it changed on purpose, rerun tools/golden/gen_tok_golden.py %s", hash, err.msg);
	snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
	char *jinja = tap_slurp(path, NULL);
	TAP_OK(tmpl && jinja && !strcmp(jinja, tmpl), "chat_template.jinja == tokenizer_config's template");
	TAP_OK(chat_template_load(dir, &ct, &err) == 0, "chat_template_load %s %s", dir, err.msg);
	free(jinja);
	cJSON_Delete(c);
	free(cfg);
	tap_rmtree(dir);
	return ct;
}

static void write_file(const char *dir, const char *name, const char *text)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

/* Where the template comes from: chat_template.jinja first, else
 * tokenizer_config.json (a string or the "default" of a list), with the
 * special tokens as strings or {"content": ...}; none is -ENOENT. */
static void check_load(void)
{
	char dir[] = "/tmp/rq-chatload-XXXXXX";
	struct rq_err err = {0};
	struct chat_template *ct = NULL;
	struct chat_msg m[] = {{"user", "hi", NULL, NULL}};
	char *out = NULL;
	size_t len;
	if (!mkdtemp(dir))
		return;
	TAP_OK(chat_template_load(dir, &ct, &err) == -ENOENT && strstr(err.msg, "no chat template"),
	       "a directory without a template: -ENOENT, %s", err.msg);
	write_file(dir, "tokenizer_config.json", "{\"bos_token\": {\"content\": \"<s>\"}, \"eos_token\": \"</s>\", "
		   "\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}, "
		   "{\"name\": \"default\", \"template\": \"{{ bos_token }}{{ messages[0].content }}{{ eos_token }}\"}]}");
	int rc = chat_template_load(dir, &ct, &err);
	rc = rc ? rc : chat_render(ct, m, 1, 1, 1, &out, &len, &err);
	TAP_OK(!rc && !strcmp(out, "<s>hi</s>"), "tokenizer_config.json: the default of a template list, "
	       "special tokens as objects or strings: %s", rc ? err.msg : out);
	free(out);
	chat_template_free(ct);
	ct = NULL;
	write_file(dir, "chat_template.jinja", "[{{ messages | length }}{{ undefined_thing }}]\n");
	out = NULL;
	rc = chat_template_load(dir, &ct, &err);
	rc = rc ? rc : chat_render(ct, m, 1, 1, 1, &out, &len, &err);
	TAP_OK(!rc && !strcmp(out, "[1]"), "chat_template.jinja wins over tokenizer_config.json; one "
	       "trailing newline dropped: %s", rc ? err.msg : out);
	free(out);
	chat_template_free(ct);
	ct = NULL;
	write_file(dir, "chat_template.jinja", "{% for m in messages %}{{ m.content }");
	rc = chat_template_load(dir, &ct, &err);
	rc = rc ? rc : chat_render(ct, m, 1, 1, 1, &out, &len, &err);
	TAP_OK(rc == -EINVAL && strstr(err.msg, "chat_template.jinja") && strstr(err.msg, "line 1 col"),
	       "a broken template fails naming the file and position: %s", err.msg);
	chat_template_free(ct);
	tap_rmtree(dir);
}

/* The golden messages as chat_msg: role, content, reasoning_content, and
 * every other field as JSON (fields[i] is malloc'd, or NULL). */
static int golden_msgs(const cJSON *msgs, struct chat_msg *v, char **fields)
{
	int i = tj_chat_msgs(msgs, v);
	for (int k = 0; k < i; k++) {
		cJSON *m = cJSON_Duplicate(cJSON_GetArrayItem(msgs, k), 1);
		cJSON_DeleteItemFromObjectCaseSensitive(m, "role");
		cJSON_DeleteItemFromObjectCaseSensitive(m, "content");
		cJSON_DeleteItemFromObjectCaseSensitive(m, "reasoning_content");
		fields[k] = m && m->child ? cJSON_PrintUnformatted(m) : NULL;
		v[k].fields = fields[k];
		cJSON_Delete(m);
	}
	return i;
}

/* chat_render == apply_chat_template on every case of the transformers golden file. */
static void check_transformers(const char *path, struct chat_template *laguna)
{
	const char *root = getenv("RQ_SOURCE_ROOT") ? getenv("RQ_SOURCE_ROOT") : ".";
	char *text = tap_slurp(path, NULL), smol_dir[4200], file[4400];
	cJSON *g = text ? cJSON_Parse(text) : NULL, *c;
	struct rq_err err = {0};
	struct chat_template *smol = NULL;
	TAP_OK(g != NULL, "read %s", path);
	snprintf(smol_dir, sizeof smol_dir, "%s/.models/SmolLM2-135M-Instruct", root);
	TAP_OK(chat_template_load(smol_dir, &smol, &err) == 0, "SmolLM2's own template loads: %s%s", err.msg,
	       err.code ? " (run tools/setup: tools/setup-model makes .models/)" : "");
	int n = 0, same = 0;
	cJSON_ArrayForEach(c, cJSON_GetObjectItem(g, "cases")) {
		const char *model = cJSON_GetStringValue(cJSON_GetObjectItem(c, "model"));
		const char *tname = cJSON_GetStringValue(cJSON_GetObjectItem(c, "template"));
		const char *want = cJSON_GetStringValue(cJSON_GetObjectItem(c, "rendered"));
		struct chat_template *own = !strcmp(model, "laguna") ? laguna : smol, *t = own;
		if (tname) {   /* a test template with the model's bos/eos */
			snprintf(file, sizeof file, "%s/tests/data/chat_templates/%s", root, tname);
			char *body = tap_slurp(file, NULL);
			t = NULL;
			if (body)
				chat_template_new(body, "<|im_start|>", "<|im_end|>", &t, &err);
			free(body);
		}
		struct chat_msg v[16] = {{0}};
		char *fields[16] = {0};
		int k = golden_msgs(cJSON_GetObjectItem(c, "messages"), v, fields);
		char *out = NULL, *tools = cJSON_PrintUnformatted(cJSON_GetObjectItem(c, "tools"));
		size_t len = 0;
		int rc = -ENOENT;
		if (t)   /* ample margin: each case renders within a 500th of the default work budget */
			chat_template_set_budget(t, JINJA_WORK_DEFAULT / 500);
		if (t && !chat_template_set_var(t, "date_string", "26 Jul 2024") &&
		    !chat_template_set_json(t, "tools", tools ? tools : "null", &err))
			rc = chat_render(t, v, (size_t)k, cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt")),
					 cJSON_IsTrue(cJSON_GetObjectItem(c, "enable_thinking")), &out, &len, &err);
		int ok = want ? !rc && len == strlen(want) && !memcmp(out, want, len) : rc == -EINVAL;
		n++;
		same += ok;
		if (!ok)
			printf("#   %s %s case %d:\n#   ours:         %s\n#   transformers: %s\n", model,
			       tname ? tname : "(own)", n, out ? out : err.msg, want ? want : "(refused)");
		free(out);
		free(tools);
		for (int i = 0; i < k; i++)
			free(fields[i]);
		if (t != own)
			chat_template_free(t);
	}
	TAP_OK(n > 0 && same == n, "%d of %d conversations (tool calls and tool schemas too) render as "
	       "transformers %s's apply_chat_template renders them (SmolLM2, Laguna, tests/data/chat_templates), "
	       "each within a 500th of the default work budget",
	       same, n,
	       cJSON_GetStringValue(cJSON_GetObjectItem(g, "transformers")));
	chat_template_free(smol);
	cJSON_Delete(g);
	free(text);
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return printf("Bail out! usage: test_chat chat_golden.json chat_template_golden.json\n"), 1;
	char *text = tap_slurp(argv[1], NULL);
	cJSON *g = text ? cJSON_Parse(text) : NULL, *c;
	TAP_OK(g != NULL, "read %s", argv[1]);
	if (!g)
		return tap_done();
	struct chat_template *ct = check_template(g);
	check_load();
	check_transformers(argv[2], ct);
	cJSON_ArrayForEach(c, cJSON_GetObjectItem(g, "cases")) {
		const cJSON *msgs = cJSON_GetObjectItem(c, "messages");
		struct chat_msg v[16];
		int n = tj_chat_msgs(msgs, v);
		const cJSON *et = cJSON_GetObjectItem(c, "enable_thinking");
		int gen = cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt"));
		int think = cJSON_IsNull(et) ? 1 : cJSON_IsTrue(et);   /* the template's default: on */
		const char *want = cJSON_GetStringValue(cJSON_GetObjectItem(c, "rendered"));
		char *out = NULL;
		size_t len = 0;
		struct rq_err err = {0};
		int rc = ct ? chat_render(ct, v, n, gen, think, &out, &len, &err) : -ENOENT;
		int ok = !rc && len == strlen(want) && !memcmp(out, want, len);
		TAP_OK(ok, "%s (generation prompt %d, thinking %s) == jinja2, %zu bytes",
		       cJSON_GetStringValue(cJSON_GetObjectItem(c, "name")), gen,
		       cJSON_IsNull(et) ? "default" : think ? "on" : "off", len);
		if (!ok)
			printf("#   ours:   %s\n#   jinja2: %s\n", out ? out : err.msg, want);
		free(out);
	}
	struct chat_msg bad[] = {{"user", "hi", NULL, NULL}, {"robot", "beep", NULL, NULL}};
	char *out;
	size_t len;
	struct rq_err err = {0};
	TAP_OK(ct && chat_render(ct, bad, 2, 1, 1, &out, &len, &err) == -EINVAL && strstr(err.msg, "robot"),
	       "unknown role refused (the template's raise_exception): %s", err.msg);
	struct chat_msg nul[] = {{"user", NULL, NULL, NULL}};
	TAP_OK(ct && chat_render(ct, nul, 1, 1, 1, &out, &len, &err) == -EINVAL, "NULL content refused: %s",
	       err.msg);
	struct chat_msg badf[] = {{"user", "hi", NULL, "[1]"}};
	TAP_OK(ct && chat_render(ct, badf, 1, 1, 1, &out, &len, &err) == -EINVAL && strstr(err.msg, "JSON object"),
	       "message fields that are not a JSON object refused: %s", err.msg);
	chat_template_free(ct);
	cJSON_Delete(g);
	free(text);
	return tap_done();
}
