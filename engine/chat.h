/* chat.h — the poolside_v1 chat format (Laguna), rendered in C.
 *
 * Byte-for-byte the chat template that `requantfs mkckpt` ships in
 * tokenizer_config.json (a poolside_v1-style template; see
 * tools/mkckpt_tokenizer.c), rendered with enable_thinking and
 * add_generation_prompt:
 *
 *   〈|EOS|〉<system>SYSTEM</system>\n          first message if role system,
 *                                             right-stripped; else the default
 *                                             prompt; the block is left out when
 *                                             SYSTEM is empty and thinking is off
 *   <user>TEXT</user>\n
 *   <assistant><think>REASONING</think>TEXT</assistant>\n
 *                      (no reasoning: "</think>" alone, unless TEXT itself
 *                       starts with <think> or </think>)
 *   <system>TEXT</system>\n                   a later system message
 *   <tool_response>TEXT</tool_response>\n     role tool
 *   <assistant><think>   or   <assistant></think>   generation prompt, thinking on / off
 *
 * The string starts with 〈|EOS|〉 (bos): encode it without TOK_ADD_SPECIAL. */
#ifndef RQ_ENGINE_CHAT_H
#define RQ_ENGINE_CHAT_H

#include <stddef.h>

struct rq_err;

struct chat_msg {
	const char *role;       /* "system", "user", "assistant" or "tool" */
	const char *content;    /* NUL-terminated UTF-8 */
	const char *reasoning;  /* assistant only: the thinking text, or NULL */
};

/* The system prompt used when the conversation has none. */
extern const char chat_default_system[];

/* Renders msgs into a malloc'd NUL-terminated string. 0, -EINVAL (unknown
 * role or NULL content, named in err) or -ENOMEM. */
int chat_render(const struct chat_msg *msgs, size_t n, int add_generation_prompt,
                int enable_thinking, char **out, size_t *out_len, struct rq_err *err);

#endif
