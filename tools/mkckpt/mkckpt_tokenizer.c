/* mkckpt_tokenizer.c — the synthetic checkpoint's tokenizer: a real, small
 * byte-level BPE in Laguna's format that `tokenizers` and `transformers`
 * load, learned deterministically from mkckpt_corpus.h.
 *
 * Id layout, as Laguna S 2.1's tokenizer has it:
 *   0..69     added tokens: 〈|UNK|〉 0, 〈|EOS|〉 2 (bos and eos), 〈|PAD|〉 9,
 *             <think> 18, </think> 19, <assistant> 23, </assistant> 24 (the
 *             second eos), <tool_call> 25, </tool_call> 26, 〈|SPECIAL_n|〉
 *             placeholders; 18, 19, 23, 25, 26 are not flagged special.
 *             <system>, <user> and </user> are plain text, as in Laguna.
 *   70..325   the 256 byte symbols, in code point order of the GPT-2 alphabet
 *   326..     one token per merge that made a new string
 * Files written: tokenizer.json, tokenizer_config.json (with the chat
 * template), chat_template.jinja, special_tokens_map.json. */
#include "tools/mkckpt/mkckpt.h"
#include "tools/mkckpt/mkckpt_corpus.h"
#include "engine/tok/tokenizer.h"
#include "base/err.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_ADDED 70
#define FIRST_BYTE_ID N_ADDED
#define FIRST_MERGE_ID (N_ADDED + 256)
#define MAX_MERGES 600
#define MAX_TOKENS (FIRST_MERGE_ID + MAX_MERGES)

/* The poolside_v1-style template chat.c renders; every tag trims white
 * space on both sides, so it renders the same with or without transformers'
 * trim_blocks/lstrip_blocks. */
static const char CHAT_TEMPLATE[] =
	"{{- '\xe3\x80\x88|EOS|\xe3\x80\x89' -}}\n"
	"{%- set enable_thinking = enable_thinking if enable_thinking is defined else true -%}\n"
	"{%- if messages and messages[0].role == 'system' -%}\n"
	"{%- set system_message = messages[0].content.rstrip() -%}\n"
	"{%- set loop_messages = messages[1:] -%}\n"
	"{%- else -%}\n"
	"{%- set system_message = 'You are a helpful, conversationally-fluent assistant made by Poolside. "
	"You are here to be helpful to users through natural language conversations.' -%}\n"
	"{%- set loop_messages = messages -%}\n"
	"{%- endif -%}\n"
	"{%- if system_message or enable_thinking -%}\n"
	"{{- '<system>' + system_message + '</system>\\n' -}}\n"
	"{%- endif -%}\n"
	"{%- for message in loop_messages -%}\n"
	"{%- if message.role == 'user' -%}\n"
	"{{- '<user>' + message.content + '</user>\\n' -}}\n"
	"{%- elif message.role == 'system' -%}\n"
	"{{- '<system>' + message.content + '</system>\\n' -}}\n"
	"{%- elif message.role == 'tool' -%}\n"
	"{{- '<tool_response>' + message.content + '</tool_response>\\n' -}}\n"
	"{%- elif message.role == 'assistant' -%}\n"
	"{{- '<assistant>' -}}\n"
	"{%- if message.reasoning_content is defined and message.reasoning_content is not none -%}\n"
	"{{- '<think>' + message.reasoning_content + '</think>' -}}\n"
	"{%- elif not (message.content.startswith('<think>') or message.content.startswith('</think>')) -%}\n"
	"{{- '</think>' -}}\n"
	"{%- endif -%}\n"
	"{{- message.content + '</assistant>\\n' -}}\n"
	"{%- else -%}\n"
	"{{- raise_exception('Unknown role: ' + message.role) -}}\n"
	"{%- endif -%}\n"
	"{%- endfor -%}\n"
	"{%- if add_generation_prompt -%}\n"
	"{{- '<assistant><think>' if enable_thinking else '<assistant></think>' -}}\n"
	"{%- endif -%}\n";

#define SPECIAL_TOK(s) "\xe3\x80\x88|" s "|\xe3\x80\x89"   /* 〈|s|〉 */

static const char *const named_added[27] = {
	SPECIAL_TOK("UNK"), SPECIAL_TOK("SEP"), SPECIAL_TOK("EOS"), SPECIAL_TOK("CODE_START"),
	SPECIAL_TOK("CODE_END"), SPECIAL_TOK("FIM_PREFIX"), SPECIAL_TOK("FIM_MIDDLE"),
	SPECIAL_TOK("FIM_SUFFIX"), SPECIAL_TOK("FIM_PAD"), SPECIAL_TOK("PAD"), SPECIAL_TOK("FILE_SEP"),
	SPECIAL_TOK("REPO_NAME"), SPECIAL_TOK("MASK"), SPECIAL_TOK("DOC_START"), SPECIAL_TOK("DOC_END"),
	SPECIAL_TOK("CELL_SEP"), SPECIAL_TOK("COMMIT_BEFORE"), SPECIAL_TOK("COMMIT_AFTER"),
	"<think>", "</think>", SPECIAL_TOK("SPECIAL_1"), SPECIAL_TOK("SPECIAL_2"),
	SPECIAL_TOK("SPECIAL_3"), "<assistant>", "</assistant>", "<tool_call>", "</tool_call>",
};

static void added_name(int id, char *buf, size_t cap)
{
	if (id < 27)
		snprintf(buf, cap, "%s", named_added[id]);
	else   /* 27..69: SPECIAL_8..SPECIAL_50 (4..7 became the chat tags) */
		snprintf(buf, cap, SPECIAL_TOK("SPECIAL_%d"), id - 19);
}

static int added_special(int id)
{
	return !(id == 18 || id == 19 || id == 23 || id == 25 || id == 26);
}

/* ---- the trainer ---- */

struct word {
	size_t at;       /* where the piece first occurs in mk_corpus */
	int32_t *sym;    /* [n] token ids, initially one per byte */
	int n;
	int count;       /* occurrences in the corpus */
};

struct trainer {
	struct word *w;  /* [nw] distinct pre-tokenizer pieces of the corpus */
	int nw, capw;
	char *tok[MAX_TOKENS];   /* token strings (GPT-2 alphabet), by id - FIRST_BYTE_ID */
	int ntok;
	int32_t merge[MAX_MERGES][2];
	int nmerge;
};

/* Byte b's symbol: printable bytes are themselves, the others follow from
 * U+0100 in byte order (GPT-2's bytes_to_unicode); ids follow code points. */
static int printable(int b)
{
	return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
}

static int32_t byte_token(int b)
{
	int rank = 0;
	for (int x = 0; x < 256; x++)
		if (printable(x) ? (printable(b) ? x < b : 1) : (!printable(b) && x < b))
			rank++;
	return FIRST_BYTE_ID + rank;
}

static uint32_t byte_cp(int b)
{
	int n = 0;
	if (printable(b))
		return (uint32_t)b;
	for (int x = 0; x < b; x++)
		n += !printable(x);
	return 256 + n;
}

static int add_piece(void *ctx, size_t a, size_t b)
{
	struct trainer *t = ctx;
	for (int i = 0; i < t->nw; i++) {   /* the corpus is small: a linear search will do */
		struct word *w = &t->w[i];
		if ((size_t)w->n == b - a && !memcmp(mk_corpus + w->at, mk_corpus + a, b - a)) {
			w->count++;
			return 0;
		}
	}
	if (t->nw == t->capw) {
		int cap = t->capw ? 2 * t->capw : 256;
		struct word *nw = realloc(t->w, cap * sizeof *nw);
		if (!nw)
			return -ENOMEM;
		t->w = nw;
		t->capw = cap;
	}
	struct word *w = &t->w[t->nw];
	if (!(w->sym = malloc((b - a) * sizeof *w->sym)))
		return -ENOMEM;
	t->nw++;
	w->at = a;
	w->n = (int)(b - a);
	w->count = 1;
	for (size_t k = 0; k < b - a; k++)
		w->sym[k] = byte_token((unsigned char)mk_corpus[a + k]);
	return 0;
}

static int merged_before(const struct trainer *t, int32_t l, int32_t r)
{
	for (int m = 0; m < t->nmerge; m++)
		if (t->merge[m][0] == l && t->merge[m][1] == r)
			return 1;
	return 0;
}

/* Classic BPE training: merge the most frequent adjacent pair (ties: the
 * smallest ids) until MAX_MERGES or no pair occurs twice. */
static int train(struct trainer *t)
{
	int n = 0;
	for (int i = 0; i < t->nw; i++)
		n += t->w[i].n;
	int32_t *pl = malloc(n * sizeof *pl), *pr = malloc(n * sizeof *pr);
	int *pc = malloc(n * sizeof *pc);
	int rc = pl && pr && pc ? 0 : -ENOMEM;
	while (!rc && t->nmerge < MAX_MERGES) {
		int np = 0, best = -1;
		for (int i = 0; i < t->nw; i++) {
			const struct word *w = &t->w[i];
			for (int k = 0; k + 1 < w->n; k++) {
				int j = 0;
				while (j < np && (pl[j] != w->sym[k] || pr[j] != w->sym[k + 1]))
					j++;
				if (j == np) {
					pl[np] = w->sym[k];
					pr[np] = w->sym[k + 1];
					pc[np++] = 0;
				}
				pc[j] += w->count;
			}
		}
		for (int j = 0; j < np; j++) {
			if (pc[j] < 2 || merged_before(t, pl[j], pr[j]))
				continue;
			if (best < 0 || pc[j] > pc[best] ||
			    (pc[j] == pc[best] && (pl[j] < pl[best] || (pl[j] == pl[best] && pr[j] < pr[best]))))
				best = j;
		}
		if (best < 0)
			break;
		int32_t l = pl[best], r = pr[best], id = -1;
		size_t ll = strlen(t->tok[l - FIRST_BYTE_ID]), lr = strlen(t->tok[r - FIRST_BYTE_ID]);
		char *s = malloc(ll + lr + 1);
		if (!s) {
			rc = -ENOMEM;
			break;
		}
		memcpy(s, t->tok[l - FIRST_BYTE_ID], ll);
		memcpy(s + ll, t->tok[r - FIRST_BYTE_ID], lr + 1);
		for (int k = 0; k < t->ntok && id < 0; k++)
			if (!strcmp(t->tok[k], s))
				id = FIRST_BYTE_ID + k;
		if (id < 0) {
			id = FIRST_BYTE_ID + t->ntok;
			t->tok[t->ntok++] = s;
		} else
			free(s);
		t->merge[t->nmerge][0] = l;
		t->merge[t->nmerge++][1] = r;
		for (int i = 0; i < t->nw; i++) {
			struct word *w = &t->w[i];
			int o = 0;
			for (int k = 0; k < w->n; k++) {
				if (k + 1 < w->n && w->sym[k] == l && w->sym[k + 1] == r) {
					w->sym[o++] = id;
					k++;
				} else
					w->sym[o++] = w->sym[k];
			}
			w->n = o;
		}
	}
	free(pl);
	free(pr);
	free(pc);
	return rc;
}

/* ---- the files ---- */

static int write_atomic(const char *dir, const char *name, const char *data, struct rq_err *err)
{
	char path[4096], tmp[4200];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return rq_errf(err, -errno, "%s: %s", tmp, strerror(errno));
	size_t len = strlen(data), off = 0;
	while (off < len) {
		ssize_t w = write(fd, data + off, len - off);
		if (w < 0) {
			int e = errno;
			close(fd);
			unlink(tmp);
			return rq_errf(err, -e, "%s: %s", tmp, strerror(e));
		}
		off += (size_t)w;
	}
	if (fsync(fd) || close(fd) || rename(tmp, path)) {
		int e = errno;
		unlink(tmp);
		return rq_errf(err, -e, "%s: %s", path, strerror(e));
	}
	return 0;
}

static cJSON *split_step(const char *re, const char *behavior)
{
	cJSON *o = cJSON_CreateObject(), *p = cJSON_AddObjectToObject(o, "pattern");
	cJSON_AddStringToObject(o, "type", "Split");
	cJSON_AddStringToObject(p, "Regex", re);
	cJSON_AddStringToObject(o, "behavior", behavior);
	cJSON_AddFalseToObject(o, "invert");
	return o;
}

static cJSON *byte_level(int prefix_space, int use_regex)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "type", "ByteLevel");
	cJSON_AddBoolToObject(o, "add_prefix_space", prefix_space);
	cJSON_AddTrueToObject(o, "trim_offsets");
	cJSON_AddBoolToObject(o, "use_regex", use_regex);
	return o;
}

static cJSON *template_item(const char *kind, const char *id, int type_id)
{
	cJSON *o = cJSON_CreateObject(), *in = cJSON_AddObjectToObject(o, kind);
	cJSON_AddStringToObject(in, "id", id);
	cJSON_AddNumberToObject(in, "type_id", type_id);
	return o;
}

static cJSON *added_entry(int id, int with_id)
{
	char name[64];
	added_name(id, name, sizeof name);
	cJSON *o = cJSON_CreateObject();
	if (with_id)
		cJSON_AddNumberToObject(o, "id", id);
	cJSON_AddStringToObject(o, "content", name);
	cJSON_AddFalseToObject(o, "single_word");
	cJSON_AddFalseToObject(o, "lstrip");
	cJSON_AddFalseToObject(o, "rstrip");
	cJSON_AddFalseToObject(o, "normalized");
	cJSON_AddBoolToObject(o, "special", added_special(id));
	return o;
}

static cJSON *tokenizer_json(const struct trainer *t)
{
	const char *eos = named_added[2];
	cJSON *root = cJSON_CreateObject();
	cJSON_AddStringToObject(root, "version", "1.0");
	cJSON_AddNullToObject(root, "truncation");
	cJSON_AddNullToObject(root, "padding");
	cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
	for (int id = 0; id < N_ADDED; id++)
		cJSON_AddItemToArray(added, added_entry(id, 1));
	cJSON_AddNullToObject(root, "normalizer");

	cJSON *pre = cJSON_AddObjectToObject(root, "pre_tokenizer");
	cJSON_AddStringToObject(pre, "type", "Sequence");
	cJSON *steps = cJSON_AddArrayToObject(pre, "pretokenizers");
	cJSON_AddItemToArray(steps, split_step("(?:\\r?\\n)+(?!\\r?\\n)", "MergedWithNext"));
	cJSON_AddItemToArray(steps, split_step(
		"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
		"|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", "Isolated"));
	cJSON_AddItemToArray(steps, byte_level(0, 0));

	cJSON *post = cJSON_AddObjectToObject(root, "post_processor");
	cJSON_AddStringToObject(post, "type", "TemplateProcessing");
	cJSON *single = cJSON_AddArrayToObject(post, "single");
	cJSON_AddItemToArray(single, template_item("SpecialToken", eos, 0));
	cJSON_AddItemToArray(single, template_item("Sequence", "A", 0));
	cJSON *pair = cJSON_AddArrayToObject(post, "pair");
	cJSON_AddItemToArray(pair, template_item("SpecialToken", eos, 0));
	cJSON_AddItemToArray(pair, template_item("Sequence", "A", 0));
	cJSON_AddItemToArray(pair, template_item("SpecialToken", eos, 1));
	cJSON_AddItemToArray(pair, template_item("Sequence", "B", 1));
	cJSON *sp = cJSON_AddObjectToObject(cJSON_AddObjectToObject(post, "special_tokens"), eos);
	cJSON_AddStringToObject(sp, "id", eos);
	cJSON_AddItemToObject(sp, "ids", cJSON_CreateIntArray((const int[]){2}, 1));
	cJSON_AddItemToObject(sp, "tokens", cJSON_CreateStringArray(&eos, 1));

	cJSON_AddItemToObject(root, "decoder", byte_level(1, 1));

	cJSON *model = cJSON_AddObjectToObject(root, "model");
	cJSON_AddStringToObject(model, "type", "BPE");
	cJSON_AddNullToObject(model, "dropout");
	cJSON_AddNullToObject(model, "unk_token");
	cJSON_AddNullToObject(model, "continuing_subword_prefix");
	cJSON_AddNullToObject(model, "end_of_word_suffix");
	cJSON_AddFalseToObject(model, "fuse_unk");
	cJSON_AddFalseToObject(model, "byte_fallback");
	cJSON_AddFalseToObject(model, "ignore_merges");
	cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
	for (int id = 0; id < N_ADDED; id++) {
		char name[64];
		added_name(id, name, sizeof name);
		cJSON_AddNumberToObject(vocab, name, id);
	}
	for (int k = 0; k < t->ntok; k++)
		cJSON_AddNumberToObject(vocab, t->tok[k], FIRST_BYTE_ID + k);
	cJSON *merges = cJSON_AddArrayToObject(model, "merges");
	for (int m = 0; m < t->nmerge; m++) {
		const char *ab[2] = {t->tok[t->merge[m][0] - FIRST_BYTE_ID], t->tok[t->merge[m][1] - FIRST_BYTE_ID]};
		cJSON_AddItemToArray(merges, cJSON_CreateStringArray(ab, 2));
	}
	return root;
}

static void add_special_names(cJSON *o)
{
	cJSON_AddStringToObject(o, "bos_token", named_added[2]);
	cJSON_AddStringToObject(o, "eos_token", named_added[2]);
	cJSON_AddStringToObject(o, "pad_token", named_added[9]);
	cJSON_AddStringToObject(o, "unk_token", named_added[0]);
}

static cJSON *tokenizer_config(void)
{
	cJSON *root = cJSON_CreateObject();
	cJSON *dec = cJSON_AddObjectToObject(root, "added_tokens_decoder");
	for (int id = 0; id < N_ADDED; id++) {
		char key[16];
		snprintf(key, sizeof key, "%d", id);
		cJSON_AddItemToObject(dec, key, added_entry(id, 0));
	}
	add_special_names(root);
	cJSON_AddStringToObject(root, "chat_template", CHAT_TEMPLATE);
	cJSON_AddFalseToObject(root, "clean_up_tokenization_spaces");
	cJSON_AddNumberToObject(root, "model_max_length", 1048576);
	cJSON_AddStringToObject(root, "tokenizer_class", "PreTrainedTokenizerFast");
	return root;
}

static int write_json(const char *dir, const char *name, cJSON *o, struct rq_err *err)
{
	char *s = o ? cJSON_Print(o) : NULL;
	cJSON_Delete(o);
	if (!s)
		return rq_errf(err, -ENOMEM, "%s/%s: out of memory", dir, name);
	size_t n = strlen(s);
	char *nl = realloc(s, n + 2);
	if (!nl) {
		free(s);
		return rq_errf(err, -ENOMEM, "%s/%s: out of memory", dir, name);
	}
	nl[n] = '\n';
	nl[n + 1] = 0;
	int rc = write_atomic(dir, name, nl, err);
	free(nl);
	return rc;
}

int mk_write_tokenizer(const char *dir, int *vocab_size, struct rq_err *err)
{
	struct trainer t = {0};
	int rc = 0;
	for (int b = 0; b < 256 && !rc; b++) {
		char *s = calloc(1, 4);
		uint32_t c = byte_cp(b);
		if (!s)
			rc = -ENOMEM;
		else if (c < 0x80)
			s[0] = (char)c;
		else {
			s[0] = (char)(0xC0 | c >> 6);
			s[1] = (char)(0x80 | (c & 0x3F));
		}
		t.tok[byte_token(b) - FIRST_BYTE_ID] = s;
	}
	t.ntok = 256;
	if (!rc)
		rc = tok_pretokenize(mk_corpus, sizeof mk_corpus - 1, add_piece, &t);
	if (!rc)
		rc = train(&t);
	if (rc)
		rq_errf(err, rc, "%s: tokenizer training: out of memory", dir);
	if (!rc)
		rc = write_json(dir, "tokenizer.json", tokenizer_json(&t), err);
	if (!rc)
		rc = write_json(dir, "tokenizer_config.json", tokenizer_config(), err);
	if (!rc)
		rc = write_atomic(dir, "chat_template.jinja", CHAT_TEMPLATE, err);
	if (!rc) {
		cJSON *m = cJSON_CreateObject();
		if (m)
			add_special_names(m);
		rc = write_json(dir, "special_tokens_map.json", m, err);
	}
	if (!rc)
		*vocab_size = FIRST_BYTE_ID + t.ntok;
	for (int k = 0; k < t.ntok; k++)
		free(t.tok[k]);
	for (int i = 0; i < t.nw; i++)
		free(t.w[i].sym);
	free(t.w);
	return rc;
}
