/* prompts.c — one prompt a line, bounded by the tokens wanted (prompts.h). */
#include "cli/prompts.h"
#include "base/err.h"
#include "base/file.h"
#include "engine/tok/tokenizer.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct prompts {
	FILE *f;
	char *path, *what;
	char *buf;         /* [cap] the current line */
	size_t cap;
	size_t line;       /* lines read so far */
	int skip;          /* the last line was cut: skip to its end first */
};

int prompts_open(const char *path, const char *what, struct prompts **out, struct rq_err *err)
{
	int fd = rq_file_open(path, NULL, err);   /* a FIFO or a device is refused */
	if (fd < 0)
		return err ? rq_err_prefix(err, "%s", what) : fd;
	struct prompts *p = calloc(1, sizeof *p);
	if (!p || !(p->path = strdup(path)) || !(p->what = strdup(what)) ||
	    !(p->f = fdopen(fd, "r"))) {
		close(fd);
		prompts_close(p);
		return rq_errf(err, -ENOMEM, "%s %s: out of memory", what, path);
	}
	*out = p;
	return 0;
}

void prompts_close(struct prompts *p)
{
	if (!p)
		return;
	if (p->f)
		fclose(p->f);
	free(p->buf);
	free(p->path);
	free(p->what);
	free(p);
}

/* Appends byte c to the line (n bytes so far). -ENOMEM. */
static int put(struct prompts *p, size_t n, int c)
{
	if (n == p->cap) {
		size_t nc = p->cap ? p->cap * 2 : 4096;
		char *nb = realloc(p->buf, nc);
		if (!nb)
			return -ENOMEM;
		p->buf = nb;
		p->cap = nc;
	}
	p->buf[n] = (char)c;
	return 0;
}

/* Reads the next line, at most max bytes of it, into p->buf[*len]; *cut_at
 * = *len when the line went on (the rest skipped by the next call). Returns
 * 1 (a line, maybe empty), 0 at the end of the file, or -errno. */
static int read_line(struct prompts *p, size_t max, size_t *len, size_t *cut_at)
{
	FILE *f = p->f;
	int c = 0;
	if (p->skip) {
		while ((c = getc_unlocked(f)) != EOF && c != '\n')
			;
		p->skip = 0;
	}
	size_t n = 0;
	int any = 0;
	*cut_at = 0;
	if (c != EOF)
		while ((c = getc_unlocked(f)) != EOF) {
			any = 1;
			if (c == '\n')
				break;
			if (n == max) {
				/* cut: never inside a UTF-8 character (c continuing one) */
				if (((unsigned)c & 0xC0) == 0x80) {
					while (n && ((unsigned char)p->buf[n - 1] & 0xC0) == 0x80)
						n--;
					if (n && ((unsigned char)p->buf[n - 1] & 0xC0) == 0xC0)
						n--;
				}
				*cut_at = n;
				p->skip = 1;
				break;
			}
			if (put(p, n, c))
				return -ENOMEM;
			n++;
		}
	if (ferror(f))
		return -EIO;
	if (!any)
		return 0;
	p->line++;
	while (!*cut_at && n && p->buf[n - 1] == '\r')
		n--;
	*len = n;
	return 1;
}

int prompts_next(struct prompts *p, const struct tok *tk, int max_tokens, struct prompt *out,
                 struct rq_err *err)
{
	if (max_tokens < 1)
		return 0;
	size_t max = (size_t)max_tokens * PROMPT_BYTES_PER_TOKEN, len = 0, cut_at = 0;
	for (;;) {
		int rc = read_line(p, max, &len, &cut_at);
		if (rc <= 0)
			return rc == -ENOMEM ? rq_errf(err, rc, "%s %s: out of memory", p->what, p->path)
			       : rc ? rq_errf(err, rc, "%s %s: read: %s", p->what, p->path, strerror(-rc))
			            : 0;
		if (!len)
			continue;
		struct tok_ids ids = {0};
		if ((rc = tok_encode(tk, p->buf, len, TOK_ADD_SPECIAL, &ids))) {
			tok_ids_free(&ids);
			return rq_errf(err, rc, "%s %s line %zu: cannot tokenize: %s", p->what, p->path,
			               p->line, strerror(-rc));
		}
		if (!ids.n) {   /* text that encodes to nothing: no prompt */
			tok_ids_free(&ids);
			continue;
		}
		int n = ids.n < (size_t)max_tokens ? (int)ids.n : max_tokens;
		int *t = malloc(sizeof *t * (size_t)n);
		for (int i = 0; t && i < n; i++)
			t[i] = ids.v[i];
		tok_ids_free(&ids);
		if (!t)
			return rq_errf(err, -ENOMEM, "%s %s: out of memory", p->what, p->path);
		*out = (struct prompt){.tok = t, .n = n, .line = p->line, .cut_at = cut_at};
		return 1;
	}
}
