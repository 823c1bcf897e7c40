/* chat.h — a model's own chat template, rendered as transformers'
 * apply_chat_template renders it (engine/chat/jinja.h does the Jinja).
 *
 * The template comes from MODEL_DIR/chat_template.jinja when there is one,
 * else from tokenizer_config.json's "chat_template" (a string, or a list of
 * {name, template} of which "default" is used). The template sees:
 *   messages               [{role, content, reasoning_content?, fields...}]
 *                          (a message with reasoning also carries it as
 *                          "thinking", the aliases transformers adds)
 *   add_generation_prompt  bool
 *   enable_thinking        bool
 *   tools, documents       none, unless set with chat_template_set_json
 *   bos_token, eos_token, unk_token, sep_token, pad_token, cls_token,
 *   mask_token             as tokenizer_config.json sets them (absent ones
 *                          are undefined)
 *   anything set with chat_template_set_var or chat_template_set_json
 *
 * Laguna's template (tools/mkckpt/mkckpt_tokenizer.c) starts with its bos 〈|EOS|〉:
 * such renderings are encoded without TOK_ADD_SPECIAL. */
#ifndef RQ_ENGINE_CHAT_H
#define RQ_ENGINE_CHAT_H

#include <stddef.h>
#include <stdint.h>

struct rq_err;
struct chat_template;

struct chat_msg {
	const char *role;       /* "system", "user", "assistant", "tool", ... (the template decides) */
	const char *content;    /* NUL-terminated UTF-8 */
	const char *reasoning;  /* assistant only: the thinking text, or NULL */
	const char *fields;     /* more fields of the message as a JSON object, e.g.
	                           {"tool_calls": [...]} or {"name": "get_weather"}, or NULL */
};

/* Reads the template and special tokens of model_dir. 0; -ENOENT when it has
 * no chat template (err names the files looked at); -EPROTO for a bad
 * tokenizer_config.json; -ENOMEM. */
int chat_template_load(const char *model_dir, struct chat_template **out, struct rq_err *err);
/* A template from text, with bos/eos tokens (either may be NULL: undefined). */
int chat_template_new(const char *text, const char *bos, const char *eos, struct chat_template **out,
                      struct rq_err *err);
void chat_template_free(struct chat_template *t);
/* Sets one more string variable for the template (e.g. date_string), or
 * replaces it. 0 or -ENOMEM. */
int chat_template_set_var(struct chat_template *t, const char *name, const char *value);
/* The same with a JSON value (e.g. "tools" and a list of function schemas).
 * 0, -EINVAL (not JSON: named in err) or -ENOMEM. */
int chat_template_set_json(struct chat_template *t, const char *name, const char *json, struct rq_err *err);
/* The work budget of each render (jinja.h; 0: JINJA_WORK_DEFAULT, the default). */
void chat_template_set_budget(struct chat_template *t, uint64_t units);

/* Renders msgs into a malloc'd NUL-terminated string. 0; -EINVAL when a
 * message has no role or content, or the template cannot render the
 * conversation (raise_exception, an unsupported construct: err says which,
 * with its line and column); -ENOMEM. */
int chat_render(const struct chat_template *t, const struct chat_msg *msgs, size_t n,
                int add_generation_prompt, int enable_thinking, char **out, size_t *out_len,
                struct rq_err *err);

#endif
