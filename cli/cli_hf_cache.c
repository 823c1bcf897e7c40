/* cli_hf_cache.c — an hf:// SRC read from a mount's cache alone (cli_hf_cache.h). */
#include "cli/cli_hf_cache.h"
#include "cli/cli_hf.h"
#include "base/err.h"
#include "base/sha256.h"
#include "remote/rstore.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define HEAD_MAX (100ull << 20)   /* safetensors' own limit on N */

struct cli_hf_cache {
	const struct cli_hf *hf;
	const struct rq_src_reader *under;   /* hf's: label and file list */
	char *dir;
	struct rq_rs *rs;                    /* offline: never connects */
	struct rq_rs_file *files;            /* [n], strings borrowed from hf */
	uint8_t **head;                      /* [n]: a shard's kept head, or NULL */
	uint64_t *head_len;                  /* [n]: 8 + N bytes */
	uint8_t *head_tried;                 /* [n]: 1 once its head file was looked for */
	struct rq_src_reader rd;
};

static int is_shard(const char *name)
{
	size_t l = strlen(name);
	return l >= 12 && !strcmp(name + l - 12, ".safetensors");
}

/* <dir>/hf/heads/<id>-<size>.head: 8 + N bytes, then their SHA-256 (the
 * layout fs/mount_remote.c writes). Kept in c->head[i] when whole and
 * matching its SHA-256; else nothing (the store may still have the bytes). */
static void head_load(struct cli_hf_cache *c, size_t i)
{
	const struct rq_src_entry *e = &c->under->files[i];
	const char *id = rq_rs_file_id(c->rs, i);
	char *path = NULL;
	c->head_tried[i] = 1;
	if (!id || asprintf(&path, "%s/hf/heads/%s-%llu.head", c->dir, id,
	                    (unsigned long long)e->size) < 0)
		return;
	FILE *f = fopen(path, "re");
	free(path);
	if (!f)
		return;
	uint8_t n8[8], d[32], *b = NULL;
	uint64_t n = 0;
	int ok = fread(n8, 1, 8, f) == 8;
	for (int k = 7; ok && k >= 0; k--)
		n = n << 8 | n8[k];
	ok = ok && n <= HEAD_MAX && 8 + n <= e->size && (b = malloc(8 + n + 32));
	if (ok) {
		memcpy(b, n8, 8);
		ok = fread(b + 8, 1, n + 32, f) == n + 32 && fgetc(f) == EOF;
	}
	fclose(f);
	if (ok) {
		struct sha256 h;
		sha256_init(&h);
		sha256_update(&h, b, 8 + n);
		sha256_final(&h, d);
		ok = !memcmp(d, b + 8 + n, 32);
	}
	if (!ok) {
		free(b);
		return;
	}
	c->head[i] = b;
	c->head_len[i] = 8 + n;
}

/* A whole file with an LFS sha256: checked as the online reader does. */
static int check_whole(const struct cli_hf_cache *c, const struct rq_src_entry *e,
                       const void *buf, uint64_t len, struct rq_err *err)
{
	char hex[65];
	sha256_buf_hex(buf, len, hex);
	if (strcmp(hex, e->sha256))
		return rq_errf(err, -EPROTO, "%s/%s: sha256 mismatch in cache %s: got %s, the hub's "
		               "LFS sha256 is %s; the bytes were not used (remove %s/remote and mount "
		               "it once online)", c->under->label, e->name, c->dir, hex, e->sha256,
		               c->dir);
	return 0;
}

static int cache_read(void *ctx, size_t i, uint64_t off, uint64_t len, void *buf,
                      struct rq_err *err)
{
	struct cli_hf_cache *c = ctx;
	const struct rq_src_entry *e = &c->under->files[i];
	int whole = off == 0 && len == e->size;
	if (!whole && is_shard(e->name)) {
		if (!c->head_tried[i])
			head_load(c, i);
		if (c->head[i] && off + len <= c->head_len[i]) {
			memcpy(buf, c->head[i] + off, len);
			return 0;
		}
	}
	struct rq_err e2 = {0};
	int rc = rq_rs_read(c->rs, i, off, len, buf, RQ_RS_NORA, &e2);
	if (rc == -ENETUNREACH)
		return rq_errf(err, rc, "%s/%s bytes %llu-%llu: HF_HUB_OFFLINE=1 and not in cache %s "
		               "(no kept head, chunk or verified copy of it): unset HF_HUB_OFFLINE to "
		               "plan it from the hub, or mount it once online with --cache %s",
		               c->under->label, e->name, (unsigned long long)off,
		               (unsigned long long)(off + len - 1), c->dir, c->dir);
	if (rc) {
		*err = e2;
		rq_err_prefix(err, "%s/%s (cache %s)", c->under->label, e->name, c->dir);
		return rc;
	}
	return whole && e->sha256 ? check_whole(c, e, buf, len, err) : 0;
}

int cli_hf_cache_open(struct cli_hf *hf, const char *cache_dir, struct cli_hf_cache **out,
                      struct rq_err *err)
{
	struct stat st;
	if (stat(cache_dir, &st) || !S_ISDIR(st.st_mode))
		return rq_errf(err, -ENOENT, "cache %s: not a directory; give --cache DIR of a mount "
		               "that saw the revision", cache_dir);
	const struct rq_src_reader *r = cli_hf_reader(hf);
	size_t n = r->nfiles ? r->nfiles : 1;
	struct cli_hf_cache *c = calloc(1, sizeof *c);
	if (!c)
		return -ENOMEM;
	c->hf = hf;
	c->under = r;
	int rc = 0;
	if (!(c->dir = strdup(cache_dir)) || !(c->files = calloc(n, sizeof *c->files)) ||
	    !(c->head = calloc(n, sizeof *c->head)) ||
	    !(c->head_len = calloc(n, sizeof *c->head_len)) || !(c->head_tried = calloc(n, 1)))
		rc = -ENOMEM;
	for (size_t i = 0; !rc && i < r->nfiles; i++)
		c->files[i] = (struct rq_rs_file){.name = r->files[i].name, .size = r->files[i].size,
		                                  .sha256 = r->files[i].sha256,
		                                  .blob_id = cli_hf_blob_id(hf, i)};
	if (!rc) {
		struct rq_rs_opts so = {.repo = cli_hf_repo(hf), .commit = cli_hf_commit(hf),
		                        .files = c->files, .nfiles = r->nfiles, .cache_dir = cache_dir,
		                        .readahead = 0, .offline = 1};
		if ((rc = rq_rs_open(&so, &c->rs, err)))
			rq_err_prefix(err, "%s (cache %s)", r->label, cache_dir);
	}
	if (rc) {
		cli_hf_cache_close(c);
		return rc;
	}
	c->rd = (struct rq_src_reader){.label = r->label, .nfiles = r->nfiles, .files = r->files,
	                               .ctx = c, .read = cache_read};
	*out = c;
	return 0;
}

const struct rq_src_reader *cli_hf_cache_reader(const struct cli_hf_cache *c)
{
	return &c->rd;
}

void cli_hf_cache_close(struct cli_hf_cache *c)
{
	if (!c)
		return;
	rq_rs_close(c->rs);
	for (size_t i = 0; c->head && i < c->under->nfiles; i++)
		free(c->head[i]);
	free(c->head);
	free(c->head_len);
	free(c->head_tried);
	free(c->files);
	free(c->dir);
	free(c);
}
