/* cmd_tokenize.c — `requantfs tokenize MODEL (--text FILE | --prompt TEXT)`:
 * the ids the model's own tokenizer gives a text, as llama.cpp's
 * llama-tokenize prints them, and as transformers' tokenizer(text) makes
 * them (the post-processor applied: a BOS where the model's tokenizer.json
 * puts one) or, with --chat, apply_chat_template(tokenize=True) (the
 * rendering tokenized without the post-processor: the template writes any
 * BOS itself). Loads the tokenizer (and the chat template for --chat) only,
 * never a weight or config.json.
 *
 * A piece is what the token decodes to on its own (tok_token_bytes), written
 * as a Python string literal: valid printable UTF-8 as is; \\ \' \n \r \t;
 * other controls, Unicode spaces other than U+0020, line separators, zero
 * width and bidi format characters as \xNN (below U+0080) or \uNNNN; a
 * byte that is not part of valid UTF-8 (a token holding part of a
 * character) as \xNN in the 0x80..0xFF range, never confusable with a
 * character of U+0080..U+00FF (printed as itself, or \u00NN when unprintable). */
#include "cli/cli.h"
#include "cli/cli_hf.h"
#include "base/err.h"
#include "base/esc.h"
#include "base/file.h"
#include "engine/chat/chat.h"
#include "engine/tok/tokenizer.h"

#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The largest --text FILE read (a book is a few MiB). */
#define TOKENIZE_TEXT_MAX ((size_t)64 << 20)

static void usage(FILE *f)
{
	fprintf(f,
	"usage: requantfs tokenize MODEL (--text FILE | --prompt TEXT) [--ids | --tokens | --count]\n"
	"                 [--chat]\n\n"
	"Prints the token ids the tokenizer of MODEL (a model directory, a mount, or a hub\n"
	"repo id ORG/NAME[@REV] in the local hub cache) gives the text, as transformers'\n"
	"tokenizer(text) makes them: with the special tokens the tokenizer adds by default\n"
	"(its post-processor, e.g. a BOS). Reads tokenizer.json only (and the chat\n"
	"template with --chat), never a weight. The text must be UTF-8.\n\n"
	"  --text FILE   the text: FILE's bytes (a regular file of at most 64 MiB)\n"
	"  --prompt TEXT the text: TEXT itself\n"
	"  --chat        the text as one user message rendered with the model's chat template\n"
	"                and a generation prompt, tokenized as apply_chat_template(tokenize=True)\n"
	"                does (no post-processor: the template writes any BOS itself)\n"
	"  (default)     one line per token: ID, a tab, and its piece (what the token decodes\n"
	"                to alone) as a quoted Python string literal, unprintable bytes escaped\n"
	"  --ids         the ids as one Python list: [1, 2, 3]\n"
	"  --tokens      the pieces as one Python list of string literals\n"
	"  --count       the number of tokens only\n");
}

enum { OUT_LINES, OUT_IDS, OUT_TOKENS, OUT_COUNT };

struct tk_opts {
	const char *dir, *text_file, *prompt;
	int chat, out;
};

/* The offset of the first byte of s[0..n) that is not valid UTF-8, or n. */
static size_t utf8_bad(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	uint32_t cp;
	for (size_t i = 0; i < n;) {
		size_t l = rq_utf8_char(u + i, n - i, &cp);
		if (!l)
			return i;
		i += l;
	}
	return n;
}

/* Characters a piece shows escaped: controls, spaces other than U+0020, line
 * and paragraph separators, zero-width and bidi format characters, BOM. */
static int unprintable(uint32_t c)
{
	return c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD || c == 0x1680 || c == 0x180E ||
	       (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
	       (c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF ||
	       (c >= 0xFFF9 && c <= 0xFFFB);
}

/* Writes s[0..n) to f as a single-quoted Python string literal (file comment). */
static void put_piece(FILE *f, const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	putc('\'', f);
	for (size_t i = 0; i < n;) {
		uint32_t c;
		size_t l = rq_utf8_char(u + i, n - i, &c);
		if (!l) {
			fprintf(f, "\\x%02x", u[i++]);   /* not UTF-8: a raw byte (>= 0x80) */
			continue;
		}
		if (c == '\\' || c == '\'')
			fprintf(f, "\\%c", (char)c);
		else if (c == '\n')
			fputs("\\n", f);
		else if (c == '\r')
			fputs("\\r", f);
		else if (c == '\t')
			fputs("\\t", f);
		else if (unprintable(c))
			fprintf(f, c < 0x80 ? "\\x%02x" : "\\u%04x", c);
		else
			fwrite(u + i, 1, l, f);
		i += l;
	}
	putc('\'', f);
}

/* Fills o from argv: -1 to go on, else the exit code (help, usage error). */
static int parse_args(int argc, char **argv, struct tk_opts *o)
{
	static const struct option opts[] = {
		{"text", required_argument, 0, 'x'}, {"prompt", required_argument, 0, 'p'},
		{"chat", no_argument, 0, 'c'}, {"ids", no_argument, 0, 'i'},
		{"tokens", no_argument, 0, 't'}, {"count", no_argument, 0, 'n'},
		{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	int c, modes = 0;
	*o = (struct tk_opts){.out = OUT_LINES};
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'x': o->text_file = optarg; break;
		case 'p': o->prompt = optarg; break;
		case 'c': o->chat = 1; break;
		case 'i': o->out = OUT_IDS, modes++; break;
		case 't': o->out = OUT_TOKENS, modes++; break;
		case 'n': o->out = OUT_COUNT, modes++; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (argc - optind != 1) {
		usage(stderr);
		return 2;
	}
	if (!o->text_file == !o->prompt)
		return cli_fail(2, "tokenize", "give the text once: --text FILE or --prompt TEXT");
	if (modes > 1)
		return cli_fail(2, "tokenize", "--ids, --tokens and --count are three outputs: pick one");
	o->dir = argv[optind];
	int hc = cli_hf_engine_refuse("tokenize", o->dir);
	return hc >= 0 ? hc : cli_hub_args("tokenize", &o->dir, NULL);   /* ORG/NAME[@REV] ids */
}

/* The text to tokenize (*text malloc'd with --text), checked to be UTF-8 as
 * tokenizers takes (a Python str); *what names it for messages. */
static int read_text(const struct tk_opts *o, char **text, size_t *len, struct rq_err *err)
{
	const char *what = o->text_file ? o->text_file : "--prompt";
	if (o->text_file) {
		int rc = rq_file_read(o->text_file, TOKENIZE_TEXT_MAX, text, len, err);
		if (rc == -EFBIG)
			return rq_errf(err, rc, "--text %s: larger than 64 MiB; tokenize a part of it",
			               o->text_file);
		if (rc)
			return rc;
	} else {
		*len = strlen(o->prompt);
		if (!(*text = strdup(o->prompt)))
			return rq_errf(err, -ENOMEM, "out of memory");
	}
	size_t bad = utf8_bad(*text, *len);
	if (bad < *len)
		rq_errf(err, -EINVAL, "%s: byte %zu (0x%02x) is not valid UTF-8; the tokenizer takes "
		        "text (convert it first, e.g. with iconv)", what, bad, (unsigned char)(*text)[bad]);
	else if (o->chat && memchr(*text, 0, *len))
		rq_errf(err, -EINVAL, "%s: byte %zu is NUL, which a chat message cannot hold", what,
		        (size_t)((char *)memchr(*text, 0, *len) - *text));
	else
		return 0;
	free(*text);
	*text = NULL;
	return err->code;
}

/* text rendered as the one user message of a chat with a generation prompt. */
static int render_chat(const char *dir, const char *text, char **out, size_t *len,
                       struct rq_err *err)
{
	struct chat_template *ct;
	struct chat_msg msg = {.role = "user", .content = text};
	int rc = chat_template_load(dir, &ct, err);
	if (rc)
		return rc;
	rc = chat_render(ct, &msg, 1, 1, 1, out, len, err);
	chat_template_free(ct);
	return rc;
}

static void print_ids(const struct tok *tk, const struct tok_ids *ids, int out)
{
	const char *p;
	size_t n;
	if (out == OUT_COUNT) {
		printf("%zu\n", ids->n);
		return;
	}
	if (out != OUT_LINES)
		putchar('[');
	for (size_t i = 0; i < ids->n; i++) {
		if (out != OUT_LINES && i)
			fputs(", ", stdout);
		if (out == OUT_IDS) {
			printf("%d", ids->v[i]);
			continue;
		}
		if (out == OUT_LINES)
			printf("%d\t", ids->v[i]);
		if (tok_token_bytes(tk, ids->v[i], &p, &n))
			p = "", n = 0;
		put_piece(stdout, p, n);
		if (out == OUT_LINES)
			putchar('\n');
	}
	if (out != OUT_LINES)
		fputs("]\n", stdout);
}

int cmd_tokenize(int argc, char **argv)
{
	struct tk_opts o;
	int rc = parse_args(argc, argv, &o);
	if (rc >= 0)
		return rc;
	struct rq_err err = {0};
	struct tok *tk = NULL;
	struct tok_ids ids = {0};
	char *text = NULL, *chat = NULL;
	size_t len;
	rc = 1;
	if (read_text(&o, &text, &len, &err) || tok_load(o.dir, &tk, &err) ||
	    (o.chat && render_chat(o.dir, text, &chat, &len, &err))) {
		cli_fail(1, "tokenize", "%s", err.msg);
		goto out;
	}
	/* tokenizer(text) applies the post-processor; apply_chat_template does not */
	if (tok_encode(tk, chat ? chat : text, len, chat ? 0 : TOK_ADD_SPECIAL, &ids)) {
		cli_fail(1, "tokenize", "out of memory tokenizing %zu bytes", len);
		goto out;
	}
	print_ids(tk, &ids, o.out);
	if (fflush(stdout) || ferror(stdout)) {
		cli_fail(1, "tokenize", "writing the output: %s", strerror(errno));
		goto out;
	}
	rc = 0;
out:
	tok_ids_free(&ids);
	tok_free(tk);
	free(chat);
	free(text);
	return rc;
}
