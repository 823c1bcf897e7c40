/* cli_hf.c — hf://ORG/NAME[@REV] as a SRC: model API, pinned commit, range reads. */
#include "cli/cli_hf.h"
#include "plan/plan.h"
#include "cli/cli.h"
#include "base/sha256.h"
#include "base/err.h"
#include "hub/hub.h"
#include "offline/calib.h"
#include "plan/hub_cache.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
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
	char **blob;              /* [n]: git blob ids ("blobId"), or NULL */
	char **whole;             /* [n]: a small file read whole (checked), kept: the plan
	                             reads the index twice and must not fetch it twice */
	struct rq_src_reader rd;
};

int cli_hf_is(const char *s)
{
	return s && !strncmp(s, "hf://", 5);
}

int cli_hf_engine_refuse(const char *cmd, const char *arg)
{
	if (!cli_hf_is(arg))
		return -1;
	const char *id = arg + 5, *at = strchr(id, '@');
	int n = at ? (int)(at - id) : (int)strlen(id);
	return cli_fail(2, cmd, "%s: the engine reads a model directory, and hf:// is read by "
	                "mount, export, plan and verify only: mount it (`requantfs mount %s MNT "
	                "...`) and give MNT, or download a snapshot (`hf download %.*s%s%s`) and "
	                "give %s", arg, arg, n, id, at ? " --revision " : "", at ? at + 1 : "", id);
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
	if (!s->hub)
		return rq_errf(err, -ENETUNREACH, "%s/%s: HF_HUB_OFFLINE=1: not read", s->label,
		               e->name);
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
		char hex[65];
		sha256_buf_hex(buf, len, hex);
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

/* Does JSON text hold a \u0000 escape (outside strings a backslash is not JSON)? */
static int has_nul_escape(const char *t, size_t len)
{
	for (size_t i = 0; i + 1 < len; i++)
		if (t[i] == '\\') {
			if (t[i + 1] == 'u' && i + 6 <= len && !memcmp(t + i + 2, "0000", 4))
				return 1;
			i++;    /* the escaped character: "\\\\u0000" is no NUL */
		}
	return 0;
}

/* {"sha": "<40 hex>", "siblings": [{"rfilename", "size", "lfs": {"sha256"}}]} */
static int parse_info(struct cli_hf *s, const char *text, size_t len, struct rq_err *err)
{
	/* cJSON's strings are C strings: "a\u0000b" would read as "a", another
	 * file's name perhaps. No hub answers that (git cannot hold the name). */
	if (has_nul_escape(text, len))
		return rq_errf(err, -EPROTO, "hf://%s@%s: the model API's answer holds \\u0000 (a NUL "
		               "byte, which no file name can hold); refused: is the endpoint a "
		               "Hugging Face hub (set HF_ENDPOINT or --endpoint)?", s->repo, s->rev);
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
	    !(s->blob = calloc(cap ? cap : 1, sizeof *s->blob)) ||
	    !(s->whole = calloc(cap ? cap : 1, sizeof *s->whole))) {
		rc = -ENOMEM;
		goto out;
	}
	const cJSON *f;
	cJSON_ArrayForEach(f, sib) {
		const cJSON *nm = cJSON_GetObjectItemCaseSensitive(f, "rfilename");
		const cJSON *sz = cJSON_GetObjectItemCaseSensitive(f, "size");
		const cJSON *lfs = cJSON_GetObjectItemCaseSensitive(f, "lfs");
		const cJSON *bid = cJSON_GetObjectItemCaseSensitive(f, "blobId");
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
		if (cJSON_IsString(bid) && is_hex(bid->valuestring, 40) &&
		    !(s->blob[s->n - 1] = strdup(bid->valuestring))) {
			rc = -ENOMEM;
			goto out;
		}
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

/* ---- the model API's answers kept per commit (offline) -------------------
 * <cache>/hf/models--ORG--NAME/info/<commit>.json   the answer, as received
 * <cache>/hf/models--ORG--NAME/refs/<REV>           the commit REV named when
 *                                                   last asked ('/' -> %2F)
 * as huggingface_hub's refs/: HF_HUB_OFFLINE=1 resolves REV as last seen. */

int cli_hf_offline(void)
{
	const char *v = getenv("HF_HUB_OFFLINE");
	return v && (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") ||
	             !strcasecmp(v, "on"));
}

static char *repo_dir(const char *cache_dir, const char *repo)
{
	const char *slash = strchr(repo, '/');
	char *d = NULL;
	if (!slash || asprintf(&d, "%s/hf/models--%.*s--%s", cache_dir, (int)(slash - repo), repo,
	                       slash + 1) < 0)
		return NULL;
	return d;
}

static char *ref_name(const char *rev)
{
	char *r = malloc(strlen(rev) * 3 + 1), *o = r;
	for (; r && *rev; rev++)
		o += *rev == '/' || *rev == '%' ? sprintf(o, "%%%02X", *rev) : (*o = *rev, 1);
	if (r)
		*o = 0;
	return r;
}

static int mkdirs(char *path)
{
	for (char *p = path + 1; *p; p++)
		if (*p == '/') {
			*p = 0;
			int r = mkdir(path, 0755);
			*p = '/';
			if (r && errno != EEXIST)
				return -errno;
		}
	return mkdir(path, 0755) && errno != EEXIST ? -errno : 0;
}

/* Writes text to path through a temporary file and rename(2). */
static int put_file(const char *path, const char *text, size_t len)
{
	char *tmp = NULL;
	if (asprintf(&tmp, "%s.tmp.%d", path, (int)getpid()) < 0)
		return -ENOMEM;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), rc = 0;
	if (fd < 0)
		rc = -errno;
	else if (write(fd, text, len) != (ssize_t)len)
		rc = -EIO;
	if (fd >= 0 && close(fd) && !rc)
		rc = -errno;
	if (!rc && rename(tmp, path))
		rc = -errno;
	if (rc)
		unlink(tmp);
	free(tmp);
	return rc;
}

static int get_file(const char *path, char **text, size_t *len)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return -errno;
	char *b = malloc(INFO_MAX + 1);
	size_t n = b ? fread(b, 1, INFO_MAX, f) : 0;
	fclose(f);
	if (!b)
		return -ENOMEM;
	b[n] = 0;
	*text = b;
	*len = n;
	return 0;
}

/* Keeps the answer for commit and refs/REV -> commit; a failure only costs
 * the offline use of this revision (not an error of the mount). */
static void keep_info(const struct cli_hf *s, const char *cache_dir, const char *text,
                      size_t len)
{
	char *d = repo_dir(cache_dir, s->repo), *ref = ref_name(s->rev), *p = NULL;
	if (!d || !ref)
		goto out;
	if (asprintf(&p, "%s/info", d) >= 0 && !mkdirs(p)) {
		free(p);
		if (asprintf(&p, "%s/info/%s.json", d, s->commit) >= 0)
			put_file(p, text, len);
	}
	free(p);
	p = NULL;
	if (strcmp(s->rev, s->commit) && asprintf(&p, "%s/refs", d) >= 0 && !mkdirs(p)) {
		free(p);
		if (asprintf(&p, "%s/refs/%s", d, ref) >= 0)
			put_file(p, s->commit, 40);
	}
out:
	free(p);
	free(ref);
	free(d);
}

/* HF_HUB_OFFLINE=1: the answer kept for REV's commit. */
static int cached_info(struct cli_hf *s, const char *spec, const char *cache_dir, char **text,
                       size_t *len, struct rq_err *err)
{
	char *d = repo_dir(cache_dir, s->repo), *ref = ref_name(s->rev), *p = NULL, *c = NULL;
	char commit[41] = "";
	size_t cl = 0;
	int rc = !d || !ref ? -ENOMEM : 0;
	if (!rc && is_hex(s->rev, 40)) {
		memcpy(commit, s->rev, 41);
	} else if (!rc && asprintf(&p, "%s/refs/%s", d, ref) >= 0 && !get_file(p, &c, &cl) &&
	           cl >= 40) {
		memcpy(commit, c, 40);
		commit[40] = 0;
	}
	if (!rc && !is_hex(commit, 40))
		rc = rq_errf(err, -ENETUNREACH, "%s: HF_HUB_OFFLINE=1 and revision '%s' was never "
		             "resolved with cache %s (no %s/refs/%s): mount it once online, or "
		             "give the commit", spec, s->rev, cache_dir, d, ref);
	free(p);
	p = NULL;
	if (!rc && (asprintf(&p, "%s/info/%s.json", d, commit) < 0 || get_file(p, text, len)))
		rc = rq_errf(err, -ENETUNREACH, "%s: HF_HUB_OFFLINE=1 and commit %s was never seen "
		             "with cache %s (no %s): mount it once online", spec, commit, cache_dir,
		             p ? p : "info");
	free(p);
	free(c);
	free(ref);
	free(d);
	return rc;
}

static int hf_open(const char *spec, const char *endpoint, const char *cache_dir,
                   struct cli_hf **out, struct rq_err *err);

int cli_hf_open(const char *spec, const char *endpoint, struct cli_hf **out, struct rq_err *err)
{
	return hf_open(spec, endpoint, NULL, out, err);
}

int cli_hf_open_cached(const char *spec, const char *endpoint, const char *cache_dir,
                       struct cli_hf **out, struct rq_err *err)
{
	return hf_open(spec, endpoint, cache_dir, out, err);
}

static int hf_open(const char *spec, const char *endpoint, const char *cache_dir,
                   struct cli_hf **out, struct rq_err *err)
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
	int offline = cache_dir && cli_hf_offline();
	int rc = !s->repo || !s->rev ? -ENOMEM : 0;
	/* plan, export, verify keep nothing between runs: offline, nothing to read */
	if (!rc && !cache_dir && cli_hf_offline())
		rc = rq_errf(err, -ENETUNREACH, "%s: HF_HUB_OFFLINE=1, and this command reads hf:// "
		             "from the hub itself (it keeps no cache): unset HF_HUB_OFFLINE, or give "
		             "a local snapshot (`hf download %s --revision %s`, then %s@%s)", spec,
		             s->repo, s->rev, s->repo, s->rev);
	if (!rc && offline)
		rc = cached_info(s, spec, cache_dir, &text, &len, err);
	else if (!rc)
		rc = rq_hub_open(endpoint, &s->hub, err);
	if (!rc && !offline) {
		rc = rq_hub_fetch_model_info(s->hub, s->repo, s->rev, INFO_MAX, &text, &len, err);
		if (rc == -ENOENT)
			rq_err_prefix(err, "%s: no such repository or revision (model API)", spec);
		else if (rc)
			rq_err_prefix(err, "%s: model API", spec);
	}
	if (!rc)
		rc = parse_info(s, text, len, err);
	if (!rc && cache_dir && !offline)
		keep_info(s, cache_dir, text, len);
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
		free(s->blob[i]);
	}
	free(s->blob);
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

const char *cli_hf_repo(const struct cli_hf *s)
{
	return s->repo;
}

const char *cli_hf_blob_id(const struct cli_hf *s, size_t i)
{
	return s->blob[i];
}

int cli_hf_check_verifiable(const struct cli_hf *s, const char *what, struct rq_err *err)
{
	size_t bad = 0, first = 0;
	for (size_t i = 0; i < s->n; i++)   /* a name SRC skips is not presented: not checked */
		if (!s->e[i].sha256 && !s->blob[i] && !rq_src_name_refused(s->e[i].name) && !bad++)
			first = i;
	if (!bad)
		return 0;
	char more[64] = "";
	if (bad > 1)
		snprintf(more, sizeof more, " (and %zu more file%s)", bad - 1, bad > 2 ? "s" : "");
	return rq_errf(err, -EPROTO, "%s/%s%s: the model API lists no LFS sha256 and no git blob "
	               "id for it, so its bytes cannot be verified; %s", s->label, s->e[first].name,
	               more, what);
}

size_t cli_hf_skipped(const struct cli_hf *s)
{
	return s->skipped;
}

void cli_hf_traffic(const struct cli_hf *s, uint64_t *requests, uint64_t *bytes)
{
	struct rq_hub_stats st = {0};
	if (s->hub)
		rq_hub_get_stats(s->hub, &st);
	*requests = st.requests;
	*bytes = st.bytes;
}

int cli_hf_calib(const char *spec, const char *endpoint, char **path, struct rq_err *err)
{
	if (!cli_hf_is(spec) || !rq_hub_is_repo_id(spec + 5))
		return rq_errf(err, -EINVAL, "--calib %s: expected hf://ORG/NAME[@REV]", spec);
	if (cli_hf_offline())
		return rq_errf(err, -ENETUNREACH, "--calib %s: HF_HUB_OFFLINE=1: fetch the scales once "
		               "with `requantfs calib fetch` and pass the file", spec);
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

/* ---- --calib hf:// kept in a mount's cache ----------------------------------
 * <cache>/hf/models--ORG--NAME/calib/<commit>.calib   the scales `calib fetch`
 * makes of that commit (rq_calib_write: tmp, fsync, rename), next to the
 * repo's kept model API answers: REV resolves as for a SRC (online through
 * the model API, keeping info/ and refs/; offline from them), and a commit
 * whose scales are here is never fetched again. */

int cli_hf_calib_cached(const char *spec, const char *endpoint, const char *cache_dir,
                        char **path, struct rq_err *err)
{
	struct cli_hf *s = NULL;
	int rc = hf_open(spec, endpoint, cache_dir, &s, err);
	if (rc) {
		rq_err_prefix(err, "--calib");
		if (rc == -ENETUNREACH)      /* offline, REV never seen here */
			rq_err_append(err, "; or fetch the scales once with `requantfs calib fetch` "
			              "and pass the file");
		return rc;
	}
	char *d = repo_dir(cache_dir, s->repo), *dir = NULL, *p = NULL;
	if (!d || asprintf(&dir, "%s/calib", d) < 0 || asprintf(&p, "%s/%s.calib", dir, s->commit) < 0)
		rc = -ENOMEM;
	if (!rc && access(p, R_OK)) {
		size_t n = 0;
		if (cli_hf_offline())
			rc = rq_errf(err, -ENETUNREACH, "--calib %s: HF_HUB_OFFLINE=1 and the scales of "
			             "commit %s were never fetched into cache %s (no %s): mount once online "
			             "with this --calib, or fetch them with `requantfs calib fetch` and pass "
			             "the file", spec, s->commit, cache_dir, p);
		else if ((rc = mkdirs(dir)))
			rc = rq_errf(err, rc, "--calib %s: cannot create %s: %s", spec, dir, strerror(-rc));
		else if ((rc = rq_calib_fetch(endpoint, s->repo, s->commit, p, &n, NULL, NULL, NULL,
		                              err)))
			rq_err_prefix(err, "--calib %s", spec);
	}
	if (!rc) {
		*path = p;
		p = NULL;
	}
	free(p);
	free(dir);
	free(d);
	cli_hf_close(s);
	return rc;
}
