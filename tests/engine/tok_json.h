/* tok_json.h — the golden-data forms the tokenizer and chat tests read
 * (test_tokenizer.c, test_chat.c, tok_tool.c): text as hex, so that any
 * bytes (NUL included) survive JSON, and chat messages as
 * transformers' apply_chat_template takes them. */
#ifndef RQ_TESTS_TOK_JSON_H
#define RQ_TESTS_TOK_JSON_H

#include "engine/chat/chat.h"

#include <cjson/cJSON.h>
#include <stdio.h>

/* Hex digits h (pairs, up to the first non-pair) as bytes into out; their count. */
static inline size_t tj_unhex(const char *h, char *out)
{
	size_t n = 0;
	unsigned v;
	while (h[0] && h[1] && sscanf(h, "%2x", &v) == 1) {
		out[n++] = (char)v;
		h += 2;
	}
	return n;
}

/* The messages array msgs ({role, content, reasoning_content?} objects) into
 * v[] (room for all of them; the strings stay msgs'); their count. */
static inline int tj_chat_msgs(const cJSON *msgs, struct chat_msg *v)
{
	const cJSON *m;
	int i = 0;
	cJSON_ArrayForEach(m, msgs) {
		const cJSON *r = cJSON_GetObjectItem(m, "reasoning_content");
		v[i].role = cJSON_GetStringValue(cJSON_GetObjectItem(m, "role"));
		v[i].content = cJSON_GetStringValue(cJSON_GetObjectItem(m, "content"));
		v[i].fields = NULL;
		v[i++].reasoning = cJSON_IsString(r) ? r->valuestring : NULL;
	}
	return i;
}

#endif
