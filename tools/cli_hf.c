/* cli_hf.c — hf://ORG/NAME[@REV] as a SRC: model API, pinned commit, range reads. */
#include "tools/cli_hf.h"
#include "base/sha256.h"
#include "base/err.h"
#include "hub/hub.h"
#include "offline/calib.h"
#include "plan/hub_cache.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define INFO_MAX (64u << 20)   /* the model API's JSON: a few KB per file */
#define KEEP_MAX (64u << 20)   /* whole files kept in memory: at most this, all together */

struct cli_hf {
	struct rq_hub *hub;
	char *repo, *rev;         /* as asked: ORG/NAME and the branch, tag or commit */
	char commit[41];          /* what rev named when asked: every read uses it */
	char *label;              /* hf://ORG/NAME@<commit> */
	size_t n, skipped;
	uint64_t kept;            /* bytes in whole[] */
	struct rq_src_entry *e;   /* [n]; names and sha256 owned */
	char **whole;             /* [n]: a small file read whole (checked), kept: the plan
	                             reads the index twice and must not fetch it twice */
	struct rq_src_reader rd;
};

int cli_hf_is(const char *s)
{
	return s && !strncmp(s, "hf://", 5);
}

static int is_hex(const char *s, size_t n)
{
	if (strlen(s) != n)
		return 0;
	for (; *s; s++)
		if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
			return 0;
	return 1;
}

static int hf_read(void *ctx, size_t i, uint64_t off, uint64_t len, void *buf,
                   struct rq_err *err)
{
	struct cli_hf *s = ctx;
	const struct rq_src_entry *e = &s->e[i];
	int whole = off == 0 && len == e->size;
	if (whole && s->whole[i]) {
		memcpy(buf, s->whole[i], len);
		return 0;
	}
	uint64_t total = 0;
	int rc = rq_hub_fetch_range(s->hub, s->repo, s->commit, e->name, off, len, buf, &total,
	                            err);
	if (rc) {
		rq_err_prefix(err, "%s/%s bytes %llu-%llu", s->label, e->name,
		              (unsigned long long)off, (unsigned long long)(off + len - 1));
		return rc;
	}
	if (total != e->size)
		return rq_errf(err, -EPROTO, "%s/%s: the server says %llu bytes, the model API listed "
		               "%llu; the mirror does not serve commit %s as listed", s->label,
		               e->name, (unsigned long long)total, (unsigned long long)e->size,
		               s->commit);
	if (off == 0 && len == e->size && e->sha256) {
		struct sha256 h;
		uint8_t d[32];
		char hex[65];
		sha256_init(&h);
		sha256_update(&h, buf, len);
		sha256_final(&h, d);
		sha256_hex(d, hex);
		if (strcmp(hex, e->sha256))
			return rq_errf(err, -EPROTO, "%s/%s: sha256 mismatch: got %s, the hub's LFS "
			               "sha256 is %s; the bytes were not used (a corrupt mirror or "
			               "transfer; retry, or check the server)", s->label, e->name, hex,
			               e->sha256);
	}
	if (whole && s->kept + len <= KEEP_MAX && (s->whole[i] = malloc(len))) {
		memcpy(s->whole[i], buf, len);
		s->kept += len;
	}
	return 0;
}

/* {"sha": "<40 hex>", "siblings": [{"rfilename", "size", "lfs": {"sha256"}}]} */
static int parse_info(struct cli_hf *s, const char *text, size_t len, struct rq_err *err)
{
	cJSON *j = cJSON_ParseWithLength(text, len);
	const cJSON *sha = cJSON_GetObjectItemCaseSensitive(j, "sha");
	const cJSON *sib = cJSON_GetObjectItemCaseSensitive(j, "siblings");
	int rc = 0;
	if (!cJSON_IsObject(j) || !cJSON_IsString(sha) || !is_hex(sha->valuestring, 40) ||
	    !cJSON_IsArray(sib)) {
		rc = rq_errf(err, -EPROTO, "hf://%s@%s: the model API's answer has no commit \"sha\" "
		             "(40 hex) and \"siblings\" list; is the endpoint a Hugging Face hub "
		             "(set HF_ENDPOINT or --endpoint)?", s->repo, s->rev);
		goto out;
	}
	memcpy(s->commit, sha->valuestring, 41);
	size_t cap = (size_t)cJSON_GetArraySize(sib);
	if (!(s->e = calloc(cap ? cap : 1, sizeof *s->e)) ||
	    !(s->whole = calloc(cap ? cap : 1, sizeof *s->whole))) {
		rc = -ENOMEM;
		goto out;
	}
	const cJSON *f;
	cJSON_ArrayForEach(f, sib) {
		const cJSON *nm = cJSON_GetObjectItemCaseSensitive(f, "rfilename");
		const cJSON *sz = cJSON_GetObjectItemCaseSensitive(f, "size");
		const cJSON *lfs = cJSON_GetObjectItemCaseSensitive(f, "lfs");
		const cJSON *h = lfs ? cJSON_GetObjectItemCaseSensitive(lfs, "sha256") : NULL;
		if (!cJSON_IsString(nm) || !*nm->valuestring) {
			rc = rq_errf(err, -EPROTO, "hf://%s@%s: a sibling without \"rfilename\"", s->repo,
			             s->commit);
			goto out;
		}
		if (!cJSON_IsNumber(sz) || sz->valuedouble < 0 || sz->valuedouble > 9.0e15) {
			rc = rq_errf(err, -EPROTO, "hf://%s@%s: %s has no \"size\" in the model API's "
			             "answer (asked with ?blobs=true); the server must give file sizes",
			             s->repo, s->commit, nm->valuestring);
			goto out;
		}
		if (strchr(nm->valuestring, '/')) {
			s->skipped++;        /* SRC is the top directory, as for a local snapshot */
			continue;
		}
		struct rq_src_entry *e = &s->e[s->n];
		if (!(e->name = strdup(nm->valuestring))) {
			rc = -ENOMEM;
			goto out;
		}
		e->size = (uint64_t)sz->valuedouble;
		s->n++;
		if (h && !(cJSON_IsString(h) && is_hex(h->valuestring, 64))) {
			rc = rq_errf(err, -EPROTO, "hf://%s@%s: %s: lfs.sha256 is not 64 hex digits",
			             s->repo, s->commit, e->name);
			goto out;
		}
		if (h && !(e->sha256 = strdup(h->valuestring))) {
			rc = -ENOMEM;
			goto out;
		}
	}
out:
	cJSON_Delete(j);
	return rc;
}

int cli_hf_open(const char *spec, const char *endpoint, struct cli_hf **out, struct rq_err *err)
{
	if (!cli_hf_is(spec) || !rq_hub_is_repo_id(spec + 5))
		return rq_errf(err, -EINVAL, "%s: expected hf://ORG/NAME[@REV] (REV: a branch, tag "
		               "or commit; default main)", spec);
	struct cli_hf *s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	const char *id = spec + 5, *at = strchr(id, '@');
	s->repo = at ? strndup(id, (size_t)(at - id)) : strdup(id);
	s->rev = strdup(at ? at + 1 : "main");
	char *text = NULL;
	size_t len = 0;
	int rc = !s->repo || !s->rev ? -ENOMEM : rq_hub_open(endpoint, &s->hub, err);
	if (!rc) {
		rc = rq_hub_fetch_model_info(s->hub, s->repo, s->rev, INFO_MAX, &text, &len, err);
		if (rc == -ENOENT)
			rq_err_prefix(err, "%s: no such repository or revision (model API)", spec);
		else if (rc)
			rq_err_prefix(err, "%s: model API", spec);
	}
	if (!rc)
		rc = parse_info(s, text, len, err);
	free(text);
	if (!rc) {
		size_t l = strlen(s->repo) + 48;
		if (!(s->label = malloc(l)))
			rc = -ENOMEM;
		else
			snprintf(s->label, l, "hf://%s@%s", s->repo, s->commit);
	}
	if (rc) {
		cli_hf_close(s);
		return rc;
	}
	s->rd = (struct rq_src_reader){.label = s->label, .nfiles = s->n, .files = s->e, .ctx = s,
	                               .read = hf_read};
	*out = s;
	return 0;
}

void cli_hf_close(struct cli_hf *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++) {
		free((char *)s->e[i].name);
		free((char *)s->e[i].sha256);
		free(s->whole[i]);
	}
	free(s->whole);
	free(s->e);
	rq_hub_close(s->hub);
	free(s->repo);
	free(s->rev);
	free(s->label);
	free(s);
}

const struct rq_src_reader *cli_hf_reader(const struct cli_hf *s)
{
	return &s->rd;
}

const char *cli_hf_commit(const struct cli_hf *s)
{
	return s->commit;
}

size_t cli_hf_skipped(const struct cli_hf *s)
{
	return s->skipped;
}

void cli_hf_traffic(const struct cli_hf *s, uint64_t *requests, uint64_t *bytes)
{
	struct rq_hub_stats st;
	rq_hub_get_stats(s->hub, &st);
	*requests = st.requests;
	*bytes = st.bytes;
}

int cli_hf_calib(const char *spec, const char *endpoint, char **path, struct rq_err *err)
{
	if (!cli_hf_is(spec) || !rq_hub_is_repo_id(spec + 5))
		return rq_errf(err, -EINVAL, "--calib %s: expected hf://ORG/NAME[@REV]", spec);
	const char *id = spec + 5, *at = strchr(id, '@'), *tmpd = getenv("TMPDIR");
	char *repo = at ? strndup(id, (size_t)(at - id)) : strdup(id);
	size_t l = strlen(tmpd && *tmpd ? tmpd : "/tmp") + 40;
	char *p = malloc(l);
	if (!repo || !p) {
		free(repo);
		free(p);
		return -ENOMEM;
	}
	snprintf(p, l, "%s/requantfs-calib-XXXXXX", tmpd && *tmpd ? tmpd : "/tmp");
	int fd = mkstemp(p), rc = 0;
	if (fd < 0)
		rc = rq_errf(err, -errno, "--calib %s: cannot create a temporary file in %s: %s", spec,
		             tmpd && *tmpd ? tmpd : "/tmp", strerror(errno));
	else
		close(fd);
	size_t n = 0;
	if (!rc && (rc = rq_calib_fetch(endpoint, repo, at ? at + 1 : "main", p, &n, NULL, NULL,
	                                NULL, err)))
		rq_err_prefix(err, "--calib %s", spec);
	free(repo);
	if (rc) {
		if (fd >= 0)
			unlink(p);
		free(p);
		return rc;
	}
	*path = p;
	return 0;
}
