/* prompts.h — `--prompts FILE` of calib run and compare: one prompt a line,
 * read in bounded pieces and tokenized only as far as a token budget needs.
 *
 * FILE must be a regular file (a FIFO or a device is refused: it could block
 * or never end). Of each line at most PROMPT_BYTES_PER_TOKEN x the tokens
 * still wanted is read (a longer line is cut there, at a character boundary,
 * and its rest skipped only if a further prompt is asked for), so a huge
 * line or file costs what the budget needs, never the line's size. */
#ifndef RQ_TOOLS_PROMPTS_H
#define RQ_TOOLS_PROMPTS_H

#include <stddef.h>

struct rq_err;
struct tok;
struct prompts;

/* The most bytes of one line read per token wanted: far above any text's
 * bytes per token (about 4 in English), so a cut never shortens a prompt
 * below what was asked for. */
#define PROMPT_BYTES_PER_TOKEN 64

struct prompt {
	int *tok;          /* [n] token ids, malloc'd: the caller frees */
	int n;             /* 1 <= n <= the max_tokens asked for */
	size_t line;       /* 1-based line number in FILE */
	size_t cut_at;     /* 0, or the bytes used of a line longer than PROMPT_BYTES_PER_TOKEN
	                      x max_tokens (a whole number of characters; the rest unread) */
};

/* Opens path (what = the option, for messages: "--prompts"). */
int prompts_open(const char *path, const char *what, struct prompts **out, struct rq_err *err);

/* The next line holding text (empty lines and lines of only \r skipped):
 * tokenizer(line) with its special tokens, cut to its first max_tokens ids.
 * Returns 1 with *out filled, 0 at the end of the file, or -errno. */
int prompts_next(struct prompts *p, const struct tok *tk, int max_tokens, struct prompt *out,
                 struct rq_err *err);

void prompts_close(struct prompts *p);

#endif
