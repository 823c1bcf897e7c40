/* chat.c — poolside_v1 prompt rendering; the format is written out in chat.h.
 * The Jinja template it mirrors is CHAT_TEMPLATE in tools/mkckpt_tokenizer.c;
 * tests/engine/test_chat.c and tests/peer/test_chat_peer.py compare the two. */
#include "engine/chat.h"
#include "engine/tok_int.h"
#include "base/err.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char chat_default_system[] =
	"You are a helpful, conversationally-fluent assistant made by Poolside. "
	"You are here to be helpful to users through natural language conversations.";

/* Python's str.isspace(): bidirectional class WS, B or S, or category Zs. */
static int py_space(uint32_t c)
{
	return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
	       c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
	       c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Length of s once str.rstrip() has removed its trailing white space. */
static size_t rstrip_len(const char *s)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t n = strlen(s);
	while (n > 0) {
		uint32_t c;
		size_t p = tok_utf8_prev(u, 0, n, &c);
		if (!py_space(c))
			break;
		n = p;
	}
	return n;
}

static int starts(const char *s, const char *prefix)
{
	return !strncmp(s, prefix, strlen(prefix));
}

static int put(struct tbuf *b, const char *s)
{
	return tbuf_put(b, s, strlen(s));
}

static int put3(struct tbuf *b, const char *open, const char *body, const char *close)
{
	return put(b, open) || put(b, body) || put(b, close);
}

int chat_render(const struct chat_msg *msgs, size_t n, int add_generation_prompt,
                int enable_thinking, char **out, size_t *out_len, struct rq_err *err)
{
	struct tbuf b = {0};
	size_t i = 0;
	for (size_t k = 0; k < n; k++)
		if (!msgs[k].role || !msgs[k].content)
			return rq_errf(err, -EINVAL, "chat message %zu: role and content are required", k);
	int bad = put(&b, "\xe3\x80\x88|EOS|\xe3\x80\x89");   /* 〈|EOS|〉 */
	const char *sys = chat_default_system;
	size_t sys_len = strlen(sys);
	if (n > 0 && !strcmp(msgs[0].role, "system")) {
		sys = msgs[0].content;
		sys_len = rstrip_len(sys);
		i = 1;
	}
	if (sys_len || enable_thinking)
		bad = bad || put(&b, "<system>") || tbuf_put(&b, sys, sys_len) || put(&b, "</system>\n");
	for (; i < n && !bad; i++) {
		const struct chat_msg *m = &msgs[i];
		if (!strcmp(m->role, "user"))
			bad = put3(&b, "<user>", m->content, "</user>\n");
		else if (!strcmp(m->role, "system"))
			bad = put3(&b, "<system>", m->content, "</system>\n");
		else if (!strcmp(m->role, "tool"))
			bad = put3(&b, "<tool_response>", m->content, "</tool_response>\n");
		else if (!strcmp(m->role, "assistant")) {
			bad = put(&b, "<assistant>");
			if (m->reasoning)
				bad = bad || put3(&b, "<think>", m->reasoning, "</think>");
			else if (!starts(m->content, "<think>") && !starts(m->content, "</think>"))
				bad = bad || put(&b, "</think>");
			bad = bad || put3(&b, "", m->content, "</assistant>\n");
		} else {
			free(b.s);
			return rq_errf(err, -EINVAL, "chat message %zu: unknown role \"%s\" (system, user, "
				       "assistant or tool)", i, m->role);
		}
	}
	if (add_generation_prompt && !bad)
		bad = put(&b, enable_thinking ? "<assistant><think>" : "<assistant></think>");
	if (bad) {
		free(b.s);
		return rq_errf(err, -ENOMEM, "chat: out of memory");
	}
	*out = b.s;
	*out_len = b.n;
	return 0;
}
