/* tok_tool — a test driver around the tokenizer and chat renderer, for the
 * golden-data script and the peer tests (which compare it with `tokenizers`
 * and jinja2). Text travels as hex so that any bytes (NUL included) survive.
 *
 *   tok_tool write DIR               mk_write_tokenizer(DIR); prints the vocab size
 *   tok_tool encode TOKJSON [FLAGS]  each stdin line: hex text -> ids (space separated)
 *   tok_tool decode TOKJSON [FLAGS]  each stdin line: ids -> hex of tok_decode,
 *                                    then " " and hex of the streamed decode
 *   tok_tool pretok                  each stdin line: hex text -> hex pieces
 *   tok_tool chat                    each stdin line: {"messages": [...],
 *                                    "add_generation_prompt": b, "enable_thinking": b}
 *                                    -> hex of chat_render with the template
 *                                       mkckpt ships (Laguna's), or "error"
 *   tok_tool session                 many tokenizers in one process (the random
 *                                    pipelines of tests/peer/test_tok_random.py);
 *                                    each stdin line one command, one line out:
 *       load PATH                    -> "ok VOCAB_SIZE" or "refused MESSAGE"
 *       enc HEX / enc+ HEX           -> ids (enc+: TOK_ADD_SPECIAL)
 *       dec IDS / dec+ IDS           -> as decode (dec+: TOK_SKIP_SPECIAL)
 *                                    ("none" for enc/dec while no tokenizer is loaded)
 * FLAGS: "special" = TOK_ADD_SPECIAL / TOK_SKIP_SPECIAL. */
#include "engine/chat/chat.h"
#include "engine/tok/tokenizer.h"
#include "base/err.h"
#include "tools/mkckpt/mkckpt.h"
#include "tests/engine/tok_json.h"
#include "tests/tap.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		printf("%02x", (unsigned char)s[i]);
}

static int piece(void *ctx, size_t a, size_t b)
{
	const char *s = ctx;
	put_hex(s + a, b - a);
	putchar(' ');
	return 0;
}

/* Laguna's template, as mk_write_tokenizer writes it (loaded once). */
static struct chat_template *laguna_template(void)
{
	static struct chat_template *ct;
	char dir[] = "/tmp/rq-toktool-XXXXXX";
	int vs;
	if (!ct && mkdtemp(dir)) {
		if (mk_write_tokenizer(dir, &vs, NULL) || chat_template_load(dir, &ct, NULL))
			ct = NULL;
		tap_rmtree(dir);
	}
	return ct;
}

static int do_chat(const char *line)
{
	struct chat_template *ct = laguna_template();
	cJSON *req = cJSON_Parse(line);
	const cJSON *msgs = cJSON_GetObjectItem(req, "messages");
	int n = cJSON_GetArraySize(msgs);
	struct chat_msg *v = calloc(n + 1, sizeof *v);
	tj_chat_msgs(msgs, v);
	const cJSON *et = cJSON_GetObjectItem(req, "enable_thinking");
	char *out;
	size_t len;
	struct rq_err err = {0};
	if (!ct || chat_render(ct, v, n, cJSON_IsTrue(cJSON_GetObjectItem(req, "add_generation_prompt")),
	                et ? cJSON_IsTrue(et) : 1, &out, &len, &err))
		printf("error");
	else {
		put_hex(out, len);
		free(out);
	}
	free(v);
	cJSON_Delete(req);
	return 0;
}

/* hex text -> its ids, space separated */
static void do_encode(const struct tok *t, const char *line, char *buf, int special)
{
	struct tok_ids ids = {0};
	size_t n = tj_unhex(line, buf);
	tok_encode(t, buf, n, special ? TOK_ADD_SPECIAL : 0, &ids);
	for (size_t i = 0; i < ids.n; i++)
		printf(i ? " %d" : "%d", ids.v[i]);
	tok_ids_free(&ids);
}

/* ids -> hex of tok_decode, a space, hex of the streamed decode */
static void do_decode(const struct tok *t, const char *line, int special)
{
	struct tok_ids ids = {0};
	char *p = (char *)line, *end;
	for (long v = strtol(p, &end, 10); end != p; p = end, v = strtol(p, &end, 10)) {
		if (ids.n == ids.cap) {
			ids.cap = ids.cap ? 2 * ids.cap : 64;
			ids.v = realloc(ids.v, ids.cap * sizeof *ids.v);
		}
		ids.v[ids.n++] = (int32_t)v;
	}
	char *out;
	size_t len;
	int fl = special ? TOK_SKIP_SPECIAL : 0;
	tok_decode(t, ids.v, ids.n, fl, &out, &len);
	put_hex(out, len);
	free(out);
	putchar(' ');
	struct tok_stream *s = tok_stream_new(t, fl);
	const char *txt;
	for (size_t i = 0; i < ids.n; i++) {
		tok_stream_push(s, ids.v[i], &txt, &len);
		put_hex(txt, len);
	}
	tok_stream_flush(s, &txt, &len);
	put_hex(txt, len);
	tok_stream_free(s);
	tok_ids_free(&ids);
}

/* One command of `tok_tool session` (the file's head comment). */
static void do_session(struct tok **t, const char *line, char *buf)
{
	if (!strncmp(line, "load ", 5)) {
		struct rq_err err = {0};
		tok_free(*t);
		*t = NULL;
		if (tok_load(line + 5, t, &err))
			printf("refused %s", err.msg);
		else
			printf("ok %d", tok_vocab_size(*t));
		return;
	}
	size_t n = strlen(line);
	int plus = n >= 4 && line[3] == '+';
	const char *arg = line + 4 + plus;
	if (n < 4 + (size_t)plus || line[3 + plus] != ' ')
		printf("bad command");
	else if (!*t)
		printf("none");
	else if (!strncmp(line, "enc", 3))
		do_encode(*t, arg, buf, plus);
	else if (!strncmp(line, "dec", 3))
		do_decode(*t, arg, plus);
	else
		printf("bad command");
}

int main(int argc, char **argv)
{
	struct rq_err err = {0};
	if (argc < 2)
		return 2;
	const char *mode = argv[1];
	if (!strcmp(mode, "write")) {
		int vs;
		if (argc < 3 || mk_write_tokenizer(argv[2], &vs, &err)) {
			fprintf(stderr, "tok_tool: %s\n", err.msg);
			return 1;
		}
		printf("%d\n", vs);
		return 0;
	}
	struct tok *t = NULL;
	int needs_tok = !strcmp(mode, "encode") || !strcmp(mode, "decode");
	if (needs_tok && (argc < 3 || tok_load(argv[2], &t, &err))) {
		fprintf(stderr, "tok_tool: %s\n", err.msg);
		return 1;
	}
	int special = argc > 3 && !strcmp(argv[3], "special");
	size_t cap = 1 << 20;
	char *line = malloc(cap), *buf = malloc(cap);
	while (fgets(line, (int)cap, stdin)) {
		line[strcspn(line, "\n")] = 0;
		if (!strcmp(mode, "encode"))
			do_encode(t, line, buf, special);
		else if (!strcmp(mode, "decode"))
			do_decode(t, line, special);
		else if (!strcmp(mode, "session"))
			do_session(&t, line, buf);
		else if (!strcmp(mode, "pretok")) {
			size_t n = tj_unhex(line, buf);
			tok_pretokenize(buf, n, piece, buf);
		} else if (!strcmp(mode, "chat"))
			do_chat(line);
		else
			return 2;
		putchar('\n');
		fflush(stdout);
	}
	free(line);
	free(buf);
	tok_free(t);
	return 0;
}
