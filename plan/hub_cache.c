/* hub_cache.c — ORG/NAME[@REV] to a snapshot directory of the local hub cache.
 *
 * Decisions (README "Hub repo ids"):
 * - Only model repos (models--ORG--NAME); an id needs its ORG (a bare NAME is
 *   a relative path). The id rules are huggingface_hub's validate_repo_id.
 * - The cache directory follows huggingface_hub/constants.py exactly, except
 *   that a variable set to the empty string counts as unset (Python would use
 *   "" + "/hub", a relative directory) and only a leading "~" is expanded
 *   (no $VAR expansion inside the value).
 * - REV resolves like huggingface_hub's try_to_load_from_cache: refs/<REV>
 *   first (it holds the commit), then snapshots/<REV>; we add what git users
 *   expect: a unique hash prefix of at least 7 hex digits (case-insensitive)
 *   names the snapshot it prefixes; two or more matches are refused, listed.
 *   A branch wins over a hash prefix that spells the same name.
 * - A refs/ file must hold a 40-hex commit (what huggingface_hub writes), so
 *   that the path built from it cannot leave snapshots/.
 * - The snapshot is returned with symlinks resolved; rq_src_scan then applies
 *   its hub symlink policy (links into that repo's blobs/ only). */
#include "plan/hub_cache.h"
#include "plan/ckpt.h"
#include "base/err.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* asprintf that leaves NULL behind on failure. */
static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...)
{
	char *s;
	va_list ap;
	va_start(ap, f);
	int r = vasprintf(&s, f, ap);
	va_end(ap);
	return r < 0 ? NULL : s;
}

/* One part of a repo id (ORG or NAME), n bytes of s. */
static int id_part_ok(const char *s, size_t n)
{
	if (n < 1 || n > 96 || s[0] == '.' || s[0] == '-' || s[n - 1] == '.' || s[n - 1] == '-')
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (!isalnum(c) && c != '.' && c != '_' && c != '-')
			return 0;
		if (i && (c == '.' || c == '-') && s[i - 1] == c)   /* ".." and "--" */
			return 0;
	}
	return 1;
}

static int rev_ok(const char *r)
{
	size_t n = strlen(r);
	if (n < 1 || n > 255 || r[0] == '/' || r[n - 1] == '/' || r[0] == '.' || strstr(r, "/.") ||
	    strstr(r, "..") || strstr(r, "//"))
		return 0;
	for (const char *p = r; *p; p++)
		if (!isalnum((unsigned char)*p) && !strchr("._/-", *p))
			return 0;
	return 1;
}

int rq_hub_is_repo_id(const char *s)
{
	const char *slash = strchr(s, '/'), *at = strchr(s, '@');
	if (!slash || (at && at < slash))
		return 0;
	size_t idlen = at ? (size_t)(at - s) : strlen(s);
	const char *name = slash + 1;
	if (!id_part_ok(s, (size_t)(slash - s)) || !id_part_ok(name, idlen - (size_t)(name - s)))
		return 0;
	return !at || rev_ok(at + 1);
}

static int is_hex(const char *s, size_t min, size_t max)
{
	size_t n = strlen(s);
	if (n < min || n > max)
		return 0;
	for (; *s; s++)
		if (!isxdigit((unsigned char)*s))
			return 0;
	return 1;
}

static const char *env(const char *name)
{
	const char *v = getenv(name);
	return v && v[0] ? v : NULL;
}

/* v with a leading "~" (alone or "~/...") replaced by the home directory. */
static int expand_home(const char *v, const char *suffix, char **out)
{
	const char *home = "";
	if (v[0] == '~' && (v[1] == '/' || !v[1])) {
		home = env("HOME");
		if (!home) {
			struct passwd *pw = getpwuid(getuid());
			if (!pw || !pw->pw_dir)
				return -ENOENT;
			home = pw->pw_dir;
		}
		v++;
	}
	*out = fmt("%s%s%s", home, v, suffix);
	return *out ? 0 : -ENOMEM;
}

int rq_hub_cache_dir(char **dir, const char **from)
{
	static const struct {
		const char *var, *suffix, *from;
	} order[] = {
		{"HF_HUB_CACHE", "", "$HF_HUB_CACHE"},
		{"HUGGINGFACE_HUB_CACHE", "", "$HUGGINGFACE_HUB_CACHE"},
		{"HF_HOME", "/hub", "$HF_HOME/hub"},
		{"XDG_CACHE_HOME", "/huggingface/hub", "$XDG_CACHE_HOME/huggingface/hub"},
	};
	for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
		const char *v = env(order[i].var);
		if (v) {
			int rc = expand_home(v, order[i].suffix, dir);
			if (!rc && from)
				*from = order[i].from;
			return rc;
		}
	}
	int rc = expand_home("~/.cache/huggingface/hub", "", dir);
	if (!rc && from)
		*from = "the default, ~/.cache/huggingface/hub";
	return rc;
}

/* Up to 4 entries of dir (directories or files), comma separated, hashes
 * shortened to 10 digits: what the cache does hold, for an error message. */
static void have(const char *dir, char *buf, size_t len)
{
	buf[0] = 0;
	DIR *d = opendir(dir);
	if (!d) {
		snprintf(buf, len, "none");
		return;
	}
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		size_t l = strlen(buf);
		if (n++ == 4) {
			snprintf(buf + l, len - l, ", ...");
			break;
		}
		snprintf(buf + l, len - l, "%s%.*s", l ? ", " : "", is_hex(e->d_name, 40, 40) ? 10 : 64,
		         e->d_name);
	}
	closedir(d);
	if (!buf[0])
		snprintf(buf, len, "none");
}

/* The snapshots/ entry that hex prefix p names: 0 and *out (malloc'd), -ENOENT
 * for none, -ENOTUNIQ for several (listed in err). */
static int by_prefix(const char *snaps, const char *spec, const char *p, char **out,
                     struct rq_err *err)
{
	DIR *d = opendir(snaps);
	if (!d)
		return -ENOENT;
	char *found = NULL, list[600] = "";
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!is_hex(e->d_name, 40, 40) || strncasecmp(e->d_name, p, strlen(p)))
			continue;
		size_t l = strlen(list);
		snprintf(list + l, sizeof list - l, "%s%s", l ? ", " : "", e->d_name);
		if (n++ == 0 && !(found = strdup(e->d_name))) {
			closedir(d);
			return -ENOMEM;
		}
	}
	closedir(d);
	if (n > 1) {
		free(found);
		return rq_errf(err, -ENOTUNIQ, "%s: revision %s is ambiguous in %s: it begins %d "
		               "snapshots (%s); give more digits", spec, p, snaps, n, list);
	}
	if (!n)
		return -ENOENT;
	*out = found;
	return 0;
}

/* 1 when ref is (or links to) a regular file, 0 when there is nothing
 * there, else -EPROTO / the errno with err naming what is there instead. */
static int ref_kind(const char *spec, const char *ref, struct rq_err *err)
{
	struct stat st, lst;
	if (stat(ref, &st) == 0) {
		if (S_ISREG(st.st_mode))
			return 1;
		const char *what = S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO"
		                 : S_ISSOCK(st.st_mode) ? "a socket" : S_ISCHR(st.st_mode) ? "a character "
		                 "device" : S_ISBLK(st.st_mode) ? "a block device" : "not a regular file";
		return rq_errf(err, -EPROTO, "%s: %s is %s, not a file holding a commit hash (a damaged "
		               "hub cache? remove it, or name the revision by its hash)", spec, ref, what);
	}
	int e = errno;
	if (lstat(ref, &lst) == 0 && S_ISLNK(lst.st_mode))
		return rq_errf(err, -EPROTO, "%s: %s is a symbolic link that cannot be followed (%s); "
		               "huggingface_hub writes refs as plain files: remove it", spec, ref,
		               strerror(e));
	if (e == ENOENT || e == ENOTDIR)
		return 0;
	return rq_errf(err, -e, "%s: %s: %s", spec, ref, strerror(e));
}

static int is_dir(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int rq_hub_resolve(const char *spec, char **snapshot_dir, struct rq_err *err)
{
	if (!rq_hub_is_repo_id(spec))
		return rq_errf(err, -EINVAL, "%s is not a hub repo id (ORG/NAME or ORG/NAME@REV)", spec);
	const char *at = strchr(spec, '@');
	const char *rev = at ? at + 1 : "main";
	int idlen = at ? (int)(at - spec) : (int)strlen(spec);
	int orglen = (int)(strchr(spec, '/') - spec);
	char *cache = NULL, *repo = NULL, *ref = NULL, *snap = NULL, *commit = NULL, *real = NULL;
	const char *from = NULL;
	size_t clen = 0;
	char hint[400], list[400];
	int rc = rq_hub_cache_dir(&cache, &from);
	if (rc)
		return rq_errf(err, rc, "%s: cannot find the hub cache (%s): set HF_HUB_CACHE", spec,
		               strerror(-rc));
	snprintf(hint, sizeof hint, "download it with `hf download %.*s%s%s` or give the "
	         "checkpoint directory", idlen, spec, at ? " --revision " : "", at ? rev : "");
	int namelen = idlen - orglen - 1;
	repo = fmt("%s/models--%.*s--%.*s", cache, orglen, spec, namelen, spec + orglen + 1);
	ref = repo ? fmt("%s/refs/%s", repo, rev) : NULL;
	if (!ref) {
		rc = -ENOMEM;
		goto out;
	}
	if (!is_dir(repo)) {
		rc = rq_errf(err, -ENOENT, "%s is not a directory and not in the hub cache at %s (%s; "
		             "no %s there): %s", spec, cache, from, strrchr(repo, '/') + 1, hint);
		goto out;
	}
	/* 1. refs/<rev>: a branch or tag. What is there but is no regular file
	 * (a directory, a FIFO, ...) is refused as what it is, not taken for
	 * "no such ref"; a FIFO is never opened. */
	if ((rc = ref_kind(spec, ref, err)) < 0)
		goto out;
	rc = rc ? rq_read_whole(ref, &commit, &clen) : -ENOENT;
	if (rc && rc != -ENOENT && rc != -ENOTDIR) {
		rc = rq_errf(err, rc, "%s: cannot read %s: %s", spec, ref, strerror(-rc));
		goto out;
	}
	if (!rc) {
		size_t used = strcspn(commit, " \t\r\n");
		commit[used] = 0;
		/* never its contents in the message: a refs file may be a link to a
		 * file that is not the user's to see */
		if (!is_hex(commit, 40, 40)) {
			rc = rq_errf(err, -EPROTO, "%s: %s holds %zu bytes that are not a commit hash "
			             "(huggingface_hub writes 40 hex digits there; the contents are not "
			             "shown): a damaged hub cache? Remove it or download the revision "
			             "again", spec, ref, clen);
			goto out;
		}
		if (!(snap = fmt("%s/snapshots/%s", repo, commit))) {
			rc = -ENOMEM;
			goto out;
		}
		if (!is_dir(snap)) {
			rc = rq_errf(err, -ENOENT, "%s: %s names commit %s, but %s is missing (an "
			             "interrupted download?): %s", spec, ref, commit, snap, hint);
			goto out;
		}
	} else {
		rc = 0;
		/* 2. snapshots/<rev>, 3. a unique hash prefix */
		char *hit = NULL;
		if (!strchr(rev, '/') && !(snap = fmt("%s/snapshots/%s", repo, rev))) {
			rc = -ENOMEM;
			goto out;
		}
		if (!snap || !is_dir(snap)) {
			free(snap);
			snap = NULL;
			char snaps[PATH_MAX];
			snprintf(snaps, sizeof snaps, "%s/snapshots", repo);
			rc = is_hex(rev, 7, 40) ? by_prefix(snaps, spec, rev, &hit, err) : -ENOENT;
			if (!rc && !(snap = fmt("%s/%s", snaps, hit)))
				rc = -ENOMEM;
			free(hit);
			if (rc == -ENOENT) {
				char refs[PATH_MAX];
				snprintf(refs, sizeof refs, "%s/refs", repo);
				have(snaps, list, sizeof list);
				size_t l = strlen(list);
				snprintf(list + l, sizeof list - l, "; refs: ");
				have(refs, list + strlen(list), sizeof list - strlen(list));
				rc = rq_errf(err, -ENOENT, "%s: revision %s is not in the hub cache at %s (no "
				             "refs/%s, no snapshot %s%s; snapshots: %s): %s", spec, rev, repo,
				             rev, rev, is_hex(rev, 7, 40) ? " or one it begins" : "", list, hint);
			}
			if (rc)
				goto out;
		}
	}
	if (!(real = realpath(snap, NULL))) {
		rc = rq_errf(err, -errno, "%s: %s: %s", spec, snap, strerror(errno));
		goto out;
	}
	*snapshot_dir = real;
out:
	if (rc == -ENOMEM)
		rq_errf(err, rc, "%s: out of memory", spec);
	free(commit);
	free(snap);
	free(ref);
	free(repo);
	free(cache);
	return rc;
}
