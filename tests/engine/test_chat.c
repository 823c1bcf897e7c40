/* test_chat — chat_render against jinja2 renderings of the template that
 * mk_write_tokenizer ships (tests/data/chat_golden.json, made by
 * tools/gen_tok_golden.py and checked there against transformers'
 * apply_chat_template), byte for byte.
 *
 * usage: test_chat tests/data/chat_golden.json */
#include "engine/chat.h"
#include "base/err.h"
#include "tools/mkckpt.h"
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

/* The template mkckpt ships, from a freshly written tokenizer_config.json. */
static void check_template(const cJSON *g)
{
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
	       "if it changed on purpose, rerun tools/gen_tok_golden.py %s", hash, err.msg);
	snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
	char *jinja = tap_slurp(path, NULL);
	TAP_OK(tmpl && jinja && !strcmp(jinja, tmpl), "chat_template.jinja == tokenizer_config's template");
	free(jinja);
	cJSON_Delete(c);
	free(cfg);
	tap_rmtree(dir);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return printf("Bail out! usage: test_chat chat_golden.json\n"), 1;
	char *text = tap_slurp(argv[1], NULL);
	cJSON *g = text ? cJSON_Parse(text) : NULL, *c;
	TAP_OK(g != NULL, "read %s", argv[1]);
	if (!g)
		return tap_done();
	check_template(g);
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
		int rc = chat_render(v, n, gen, think, &out, &len, &err);
		int ok = !rc && len == strlen(want) && !memcmp(out, want, len);
		TAP_OK(ok, "%s (generation prompt %d, thinking %s) == jinja2, %zu bytes",
		       cJSON_GetStringValue(cJSON_GetObjectItem(c, "name")), gen,
		       cJSON_IsNull(et) ? "default" : think ? "on" : "off", len);
		if (!ok)
			printf("#   ours:   %s\n#   jinja2: %s\n", out ? out : err.msg, want);
		free(out);
	}
	struct chat_msg bad[] = {{"user", "hi", NULL}, {"robot", "beep", NULL}};
	char *out;
	size_t len;
	struct rq_err err = {0};
	TAP_OK(chat_render(bad, 2, 1, 1, &out, &len, &err) == -EINVAL && strstr(err.msg, "robot"),
	       "unknown role refused: %s", err.msg);
	struct chat_msg nul[] = {{"user", NULL, NULL}};
	TAP_OK(chat_render(nul, 1, 1, 1, &out, &len, &err) == -EINVAL, "NULL content refused: %s", err.msg);
	cJSON_Delete(g);
	free(text);
	return tap_done();
}
