/* export_manifest.c — the record a linked export leaves (EXPORT_MANIFEST),
 * and verify's check of the links against it.
 *
 * Format 2 (format 1, from before: no ctime_ns, no xxh3_128):
 *   {"format": 2, "link": "symbolic"|"hard", "src": SRC directory,
 *    "linked": [{"name", "target", "size", "mtime_ns", "ctime_ns", "ino",
 *                "xxh3_128"}, ...]}     numbers as decimal strings (exact)
 * What each check proves, for the file a link shows now:
 *   default  it is a regular file with the recorded size, inode and mtime,
 *            and either the recorded ctime or, when the ctime moved, bytes
 *            with the recorded XXH3-128 (those files alone are read). A
 *            rewrite in place that restores size and mtime (touch -d) still
 *            moves the ctime, which no user can set back; chmod, chown and
 *            hard links added or removed move it too, and pass on their bytes.
 *   --full   every linked file is read whole: it passes when its bytes have
 *            the XXH3-128 computed from them at export time, whatever its
 *            metadata did (a touch, a file replaced by an identical copy);
 *            it catches what no metadata shows (a rewrite that also set the
 *            ctime back, the clock or the disk tampered with, bit rot).
 */
#include "offline/export_int.h"
#include "plan/plan.h"
#include "base/err.h"
#include "st/jcheck.h"

#include <cjson/cJSON.h>
#include <xxhash.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MANIFEST_FORMAT 2

int rq_export_hash_fd(int fd, uint64_t size, const char *name, char hex[33],
                      struct rq_err *err)
{
	static const size_t chunk = 8 << 20;
	uint8_t *buf = malloc(chunk);
	XXH3_state_t *st = XXH3_createState();
	int rc = buf && st && XXH3_128bits_reset(st) == XXH_OK ? 0 : -ENOMEM;
	(void)posix_fadvise(fd, 0, (off_t)size, POSIX_FADV_SEQUENTIAL);
	for (uint64_t off = 0; off < size && !rc;) {
		ssize_t r = pread(fd, buf, size - off < chunk ? size - off : chunk, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			rc = rq_errf(err, r < 0 ? -errno : -EIO, "reading %s to hash it: %s", name,
			             r < 0 ? strerror(errno) : "the file ends early (changed meanwhile?)");
		else if (XXH3_128bits_update(st, buf, (size_t)r) != XXH_OK)
			rc = -ENOMEM;
		else
			off += (uint64_t)r;
	}
	(void)posix_fadvise(fd, 0, (off_t)size, POSIX_FADV_DONTNEED);
	if (!rc) {
		XXH128_canonical_t c;
		XXH128_canonicalFromHash(&c, XXH3_128bits_digest(st));
		for (int i = 0; i < 16; i++)
			snprintf(hex + 2 * i, 3, "%02x", c.digest[i]);
	}
	XXH3_freeState(st);
	free(buf);
	return rc;
}

static void add_num(cJSON *o, const char *key, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void add_num(cJSON *o, const char *key, const char *fmt, ...)
{
	char num[32];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(num, sizeof num, fmt, ap);
	va_end(ap);
	cJSON_AddStringToObject(o, key, num);
}

static int write_file(const char *path, const char *text, struct rq_err *err)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		return rq_errf(err, -errno, "cannot create %s: %s", path, strerror(errno));
	int rc = 0;
	for (size_t len = strlen(text); len && !rc;) {
		ssize_t w = write(fd, text, len);
		if (w < 0 && errno != EINTR)
			rc = rq_errf(err, -errno, "writing %s: %s", path, strerror(errno));
		else if (w > 0) {
			text += w;
			len -= (size_t)w;
		}
	}
	if (!rc && fsync(fd) < 0)
		rc = rq_errf(err, -errno, "fsync %s: %s", path, strerror(errno));
	if (close(fd) < 0 && !rc)
		rc = rq_errf(err, -errno, "close %s: %s", path, strerror(errno));
	return rc;
}

int rq_export_manifest_write(const struct rq_plan *p, const uint8_t *linked,
                             const struct rq_link_rec *rec, enum rq_export_link mode,
                             const char *path, struct rq_err *err)
{
	cJSON *root = cJSON_CreateObject(), *arr = cJSON_CreateArray();
	if (!root || !arr) {
		cJSON_Delete(root);
		cJSON_Delete(arr);
		return rq_errf(err, -ENOMEM, "out of memory");
	}
	cJSON_AddNumberToObject(root, "format", MANIFEST_FORMAT);
	cJSON_AddStringToObject(root, "link", mode == RQ_LINK_HARD ? "hard" : "symbolic");
	cJSON_AddStringToObject(root, "src", p->src_dir);
	cJSON_AddItemToObject(root, "linked", arr);
	for (size_t i = 0; i < p->nfiles; i++) {
		if (!linked[i])
			continue;
		cJSON *o = cJSON_CreateObject();
		if (!o)
			break;
		cJSON_AddItemToArray(arr, o);
		cJSON_AddStringToObject(o, "name", p->files[i].name);
		cJSON_AddStringToObject(o, "target", p->srcs[p->files[i].src].path);
		add_num(o, "size", "%" PRIu64, rec[i].size);
		add_num(o, "mtime_ns", "%" PRId64, rec[i].mtime_ns);
		add_num(o, "ctime_ns", "%" PRId64, rec[i].ctime_ns);
		add_num(o, "ino", "%" PRIu64, rec[i].ino);
		cJSON_AddStringToObject(o, "xxh3_128", rec[i].xxh3);
	}
	char *text = cJSON_Print(root);
	cJSON_Delete(root);
	if (!text)
		return rq_errf(err, -ENOMEM, "out of memory");
	int rc = write_file(path, text, err);
	free(text);
	return rc;
}

/* ---- verify's side ------------------------------------------------------ */

static int jnum(const cJSON *o, const char *key, uint64_t *v)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
	char *end;
	if (!cJSON_IsString(x) || !*x->valuestring)
		return -1;
	errno = 0;
	*v = strtoull(x->valuestring, &end, 10);
	return errno || *end ? -1 : 0;
}

static cJSON *read_manifest(const char *path, struct rq_err *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0 && errno == ENOENT) {
		rq_errf(err, -ENOENT, "%s: not there", path);
		return NULL;
	}
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > (64 << 20)) {
		if (fd >= 0)
			close(fd);
		rq_errf(err, -EPROTO, "%s: not a readable regular file of at most 64 MiB", path);
		return NULL;
	}
	char *text = malloc((size_t)st.st_size + 1);
	ssize_t n = text ? read(fd, text, (size_t)st.st_size) : -1;
	close(fd);
	if (n != st.st_size) {
		free(text);
		rq_errf(err, -EPROTO, "%s: cannot be read", path);
		return NULL;
	}
	text[n] = 0;
	cJSON *root = jc_parse(text, (size_t)n, path, err);
	free(text);
	return root;
}

/* One manifest entry, parsed: 0, or -1 when a field is missing or bad. */
struct entry {
	const char *name, *xxh3;  /* xxh3: NULL in a format-1 manifest */
	uint64_t size, mtime, ino, ctime;
	int has_ctime;
};

static int parse_entry(const cJSON *o, int format, struct entry *e)
{
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
	const cJSON *h = cJSON_GetObjectItemCaseSensitive(o, "xxh3_128");
	*e = (struct entry){0};
	if (!cJSON_IsString(name) || rq_src_name_refused(name->valuestring) ||
	    jnum(o, "size", &e->size) || jnum(o, "mtime_ns", &e->mtime) || jnum(o, "ino", &e->ino))
		return -1;
	e->name = name->valuestring;
	e->has_ctime = !jnum(o, "ctime_ns", &e->ctime);
	e->xxh3 = cJSON_IsString(h) && strlen(h->valuestring) == 32 ? h->valuestring : NULL;
	return format >= 2 && (!e->has_ctime || !e->xxh3) ? -1 : 0;
}

/* Does the file at fp (size bytes) still hash to what export recorded? */
static int same_bytes(const char *fp, const struct entry *e, int *same, char *why, size_t cap,
                      struct rq_err *err)
{
	int fd = open(fp, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		snprintf(why, cap, "cannot be read: %s", strerror(errno));
		*same = 0;
		return 0;
	}
	char hex[33];
	int rc = rq_export_hash_fd(fd, e->size, fp, hex, err);
	close(fd);
	*same = !rc && !strcmp(hex, e->xxh3);
	if (!rc && !*same)
		snprintf(why, cap, "its bytes are not those exported (XXH3-128 %s then, %s now)",
		         e->xxh3, hex);
	return rc;
}

/* Why the file a link shows is not what was exported (why[0] = 0: it is). */
static int check_one(const char *dst, const struct entry *e, int full, char *why, size_t cap,
                     struct rq_err *err)
{
	char fp[PATH_MAX + 256];
	snprintf(fp, sizeof fp, "%s/%s", dst, e->name);
	why[0] = 0;
	struct stat s;
	if (stat(fp, &s) < 0) {
		snprintf(why, cap, "%s (a dangling link: its SRC file is gone)", strerror(errno));
		return 0;
	}
	if (!S_ISREG(s.st_mode)) {
		snprintf(why, cap, "no longer leads to a regular file");
		return 0;
	}
	if ((uint64_t)s.st_size != e->size) {
		snprintf(why, cap, "SRC's file changed since the export (%" PRIu64 " bytes then, "
		         "%jd now)", e->size, (intmax_t)s.st_size);
		return 0;
	}
	int same;
	if (full)                /* the bytes decide, whatever the metadata did */
		return same_bytes(fp, e, &same, why, cap, err);
	int64_t mt = (int64_t)s.st_mtim.tv_sec * 1000000000 + s.st_mtim.tv_nsec;
	int64_t ct = (int64_t)s.st_ctim.tv_sec * 1000000000 + s.st_ctim.tv_nsec;
	if ((uint64_t)s.st_ino != e->ino) {
		snprintf(why, cap, "SRC's file was replaced since the export (another inode)");
	} else if ((uint64_t)mt != e->mtime) {
		snprintf(why, cap, "SRC's file was modified since the export (its mtime moved)");
	} else if (e->has_ctime && (uint64_t)ct != e->ctime) {
		/* rewritten in place with its mtime set back, or only chmod, chown,
		 * a hard link added or removed: its bytes tell which */
		int rc = same_bytes(fp, e, &same, why, cap, err);
		if (rc || same)
			return rc;
		snprintf(why, cap, "SRC's file was rewritten in place since the export (same size, "
		         "inode and mtime, but its ctime moved and its bytes are not those exported)");
	}
	return 0;
}

int rq_export_check_links(const char *dst, int full,
                          void (*fn)(void *ctx, const char *name, const char *why),
                          void *ctx, size_t *nlinks, size_t *nbad, struct rq_err *err)
{
	char path[PATH_MAX + 32];
	snprintf(path, sizeof path, "%s/%s", dst, EXPORT_MANIFEST);
	cJSON *root = read_manifest(path, err);
	if (!root)
		return err && err->code ? err->code : -EPROTO;
	const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "linked"), *o;
	const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
	int format = cJSON_IsNumber(fmt) ? fmt->valueint : 1, rc = 0;
	if (!cJSON_IsArray(arr) || format < 1 || format > MANIFEST_FORMAT)
		rc = rq_errf(err, -EPROTO, "%s: not an export manifest (format 1 or %d with a "
		             "\"linked\" array)", path, MANIFEST_FORMAT);
	else if (full && format < 2)
		rc = rq_errf(err, -ENODATA, "%s records no hash of the linked files' bytes (made by "
		             "an older requantfs): --full cannot compare them; verify without --full, "
		             "or export again", path);
	size_t links = 0, bad = 0;
	const cJSON *list = rc ? NULL : arr;
	cJSON_ArrayForEach(o, list) {
		struct entry e;
		char why[512];
		if (parse_entry(o, format, &e)) {
			rc = rq_errf(err, -EPROTO, "%s: a \"linked\" entry lacks a file name, size, "
			             "mtime_ns or ino%s", path, format >= 2 ? ", ctime_ns or xxh3_128" : "");
			break;
		}
		links++;
		if ((rc = check_one(dst, &e, full, why, sizeof why, err)))
			break;
		if (why[0]) {
			bad++;
			if (fn)
				fn(ctx, e.name, why);
		}
	}
	cJSON_Delete(root);
	if (!rc) {
		*nlinks = links;
		*nbad = bad;
	}
	return rc;
}
