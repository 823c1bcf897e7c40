/* st_parse.c — the strict safetensors header parser (SPEC.md §5).
 *
 * Accepts what safetensors 0.8's Rust core accepts (SafeTensors::read_metadata:
 * from_utf8 on the header, serde_json into HashMetadata, Metadata::validate,
 * and "the data must cover the rest of the file exactly"), with four
 * deliberate refusals where the library is lax or we cannot represent the
 * file: duplicate tensor names (serde keeps the last silently), names that
 * contain U+0000, more than ST_MAX_DIMS dimensions, and tensor entries
 * written as JSON arrays (serde's positional struct form).
 *
 * The JSON grammar is serde_json's (st_json.c); nothing but whitespace may
 * follow the top object. The raw text of "__metadata__" is kept so a
 * rewritten header can copy it byte for byte.
 *
 * The order of this folder (held by tests/tools/test_layout.py): each file
 * calls only the files below it.
 *
 *   jtext.c     JSON spans and a Python-compatible writer
 *   st_parse.c  the strict safetensors header parser (SPEC.md section 5)
 *   jcheck.c    the strict JSON gate: what cJSON and Python read alike
 *   st_write.c  dtypes and the canonical safetensors layout
 *   st_json.c   the JSON reader behind the header parser
 */
#include "base/grow.h"
#include "st/st.h"
#include "st/st_internal.h"
#include "st/jcheck.h"

#include "base/err.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* What the parser hands out is the first member of this, so st_header_free
 * and st_find can reach the private parts. */
struct st_header_impl {
	struct st_header h;
	size_t *by_name;   /* [h.n] indices into h.t, sorted by name (bytewise) */
	char *names;       /* arena holding every t[i].name, NUL-terminated */
};

static int by_offset(const void *a, const void *b)
{
	const struct st_tensor *x = a, *y = b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return strcmp(x->name, y->name);
}

static int by_name(const void *a, const void *b, void *ctx)
{
	const struct st_tensor *t = ctx;
	return strcmp(t[*(const size_t *)a].name, t[*(const size_t *)b].name);
}

/* One tensor entry {"dtype":..,"shape":[..],"data_offsets":[b,e]} (other
 * keys are ignored, as serde does). */
static int parse_entry(struct jp *j, struct st_tensor *t)
{
	st_jws(j);
	if (j->p >= j->end || *j->p != '{')
		return st_jfail(j, "expected an object {\"dtype\", \"shape\", \"data_offsets\"}");
	int have_dtype = 0, have_shape = 0, have_off = 0;
	int more = st_jbegin(j, '}');
	while (more > 0) {
		const uint8_t *k = j->p;
		size_t klen;
		char key[16];
		/* keys we know are short; decode longer ones only to skip them */
		st_jws(j);
		k = j->p;
		if (st_jstring(j, NULL, &klen))
			return -1;
		j->p = k;
		if (klen < sizeof key) {
			if (st_jstring(j, key, &klen))
				return -1;
			key[klen] = 0;
		} else {
			if (st_jstring(j, NULL, NULL))
				return -1;
			key[0] = 0;
			klen = (size_t)-1;
		}
		if (st_jexpect(j, ':', "expected ':'"))
			return -1;
		if (klen == 5 && !memcmp(key, "dtype", 5)) {
			if (have_dtype++)
				return st_jfail(j, "duplicate field \"dtype\"");
			char dt[16];
			size_t dlen;
			const uint8_t *q;
			st_jws(j);
			q = j->p;
			if (st_jstring(j, NULL, &dlen))
				return -1;
			j->p = q;
			if (dlen >= sizeof dt) {
				return st_jfail(j, "unknown dtype");
			}
			if (st_jstring(j, dt, &dlen))
				return -1;
			if (st_dtype_parse(dt, dlen, &t->dtype)) {
				j->p = q;
				return st_jfail(j, "unknown dtype");
			}
		} else if (klen == 5 && !memcmp(key, "shape", 5)) {
			if (have_shape++)
				return st_jfail(j, "duplicate field \"shape\"");
			if (st_juint_array(j, t->shape, ST_MAX_DIMS, &t->ndim))
				return -1;
		} else if (klen == 12 && !memcmp(key, "data_offsets", 12)) {
			uint64_t off[2];
			int n;
			if (have_off++)
				return st_jfail(j, "duplicate field \"data_offsets\"");
			if (st_juint_array(j, off, 2, &n))
				return -1;
			if (n != 2)
				return st_jfail(j, "data_offsets must hold two integers");
			t->begin = off[0];
			t->end = off[1];
		} else if (st_jvalue_skip(j)) {
			return -1;
		}
		more = st_jnext(j, '}');
	}
	if (more < 0)
		return -1;
	if (!have_dtype)
		return st_jfail(j, "missing field \"dtype\"");
	if (!have_shape)
		return st_jfail(j, "missing field \"shape\"");
	if (!have_off)
		return st_jfail(j, "missing field \"data_offsets\"");
	return 0;
}

void st_header_free(struct st_header *h)
{
	if (!h)
		return;
	struct st_header_impl *hi = (struct st_header_impl *)h;
	free(h->metadata);
	free(h->t);
	free(hi->by_name);
	free(hi->names);
	free(hi);
}

uint64_t st_numel(const struct st_tensor *t)
{
	uint64_t n = 1;
	for (int i = 0; i < t->ndim; i++)
		n *= t->shape[i];
	return n;
}

long st_find(const struct st_header *h, const char *name)
{
	const struct st_header_impl *hi = (const struct st_header_impl *)h;
	size_t lo = 0, hi_ = h->n;
	while (lo < hi_) {
		size_t mid = lo + (hi_ - lo) / 2;
		int c = strcmp(h->t[hi->by_name[mid]].name, name);
		if (!c)
			return (long)hi->by_name[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi_ = mid;
	}
	return -1;
}

static int bad(struct rq_err *err, const char *path, const char *fmt, const char *a,
               unsigned long long x, unsigned long long y, unsigned long long z)
{
	char what[768];
	snprintf(what, sizeof what, fmt, a, x, y, z);
	return rq_errf(err, -EPROTO, "%s: %s", path, what);
}

/* Layout checks of Metadata::validate plus full coverage of the file. */
static int validate(struct st_header *h, const char *path, struct rq_err *err)
{
	uint64_t cur = 0, avail = h->file_size - h->data_start;
	for (size_t i = 0; i < h->n; i++) {
		struct st_tensor *t = &h->t[i];
		if (t->end < t->begin)
			return bad(err, path, "tensor '%s': data_offsets [%llu, %llu] end before they begin",
			           t->name, t->begin, t->end, 0);
		if (t->begin != cur)
			return bad(err, path, t->begin < cur
			           ? "tensor '%s': data_offsets [%llu, %llu] overlap the previous tensor, "
			             "which ends at %llu"
			           : "tensor '%s': data_offsets [%llu, %llu] leave a hole after byte %llu",
			           t->name, t->begin, t->end, cur);
		uint64_t numel = 1, bits;
		for (int d = 0; d < t->ndim; d++)
			if (__builtin_mul_overflow(numel, t->shape[d], &numel))
				return bad(err, path, "tensor '%s': shape overflows (%llu dims)", t->name,
				           (unsigned long long)t->ndim, 0, 0);
		if (__builtin_mul_overflow(numel, (uint64_t)st_dtype_bits(t->dtype), &bits))
			return bad(err, path, "tensor '%s': size overflows (%llu elements)", t->name,
			           numel, 0, 0);
		if (bits % 8)
			return bad(err, path, "tensor '%s': %llu elements of %llu bits are not a whole "
			           "number of bytes", t->name, numel, st_dtype_bits(t->dtype), 0);
		if (t->end - t->begin != bits / 8)
			return bad(err, path, "tensor '%s': data_offsets span %llu bytes but its shape "
			           "and dtype need %llu", t->name, t->end - t->begin, bits / 8, 0);
		cur = t->end;
	}
	if (cur != avail)
		return bad(err, path, cur > avail
		           ? "file is truncated: tensor data needs %s%llu bytes after the header, the "
		             "file has %llu"
		           : "tensor data covers %s%llu bytes after the header but the file has %llu "
		             "(trailing bytes)", "", cur, avail, 0);
	return 0;
}

/* The 8-byte length N, its limits against the file and the buffer, and the
 * header's UTF-8. *np gets N. */
static int check_prefix(const uint8_t *buf, size_t len, uint64_t file_size, const char *path,
                        uint64_t *np, struct rq_err *err)
{
	if (file_size < 8)
		return rq_errf(err, -EPROTO, "%s: file is %llu bytes, shorter than the 8-byte header "
		               "length", path, (unsigned long long)file_size);
	if (len < 8)
		return rq_errf(err, -EINVAL, "%s: st_parse_mem needs the first 8 bytes", path);
	uint64_t n = 0;
	for (int i = 7; i >= 0; i--)
		n = n << 8 | buf[i];
	if (n > ST_MAX_HEADER)
		return rq_errf(err, -EPROTO, "%s: header length %llu exceeds safetensors' limit of "
		               "100,000,000 bytes", path, (unsigned long long)n);
	if (8 + n > file_size)
		return rq_errf(err, -EPROTO, "%s: header length %llu runs past the end of the file "
		               "(%llu bytes)", path, (unsigned long long)n,
		               (unsigned long long)file_size);
	if (len < 8 + n)
		return rq_errf(err, -EINVAL, "%s: st_parse_mem got %zu bytes, the header needs %llu",
		               path, len, (unsigned long long)(8 + n));
	size_t bad_at = st_utf8_bad_at(buf + 8, n);
	if (bad_at != (size_t)-1)
		return rq_errf(err, -EPROTO, "%s: header is not valid UTF-8 (byte %zu)", path, bad_at);
	*np = n;
	return 0;
}

/* The header object being read. The functions below return 0, -1 for bad
 * JSON (j.why and j.at set), or another -errno with err already written
 * (-ENOMEM: the caller writes it). */
struct pstate {
	struct jp j;
	struct st_header *h;       /* h->n counts the tensors read so far */
	char *arena;               /* [h->header_len + 1]: every name, NUL-terminated */
	size_t used;               /* arena bytes taken by names */
	struct st_tensor *t;       /* [cap], entries [0, h->n) filled */
	size_t cap;
	const char *cur_name;      /* the tensor whose entry is being read, for messages */
};

/* The value of "__metadata__": null, or an object whose values are all
 * strings, its raw text kept in h->metadata. */
static int parse_metadata(struct jp *j, struct st_header *h)
{
	st_jws(j);
	const uint8_t *ms = j->p;
	if (j->p < j->end && *j->p == 'n')
		return st_jliteral(j, "null") ? -1 : 0;
	if (j->p >= j->end || *j->p != '{')
		return st_jfail(j, "__metadata__ must be an object of strings");
	int more = st_jbegin(j, '}');
	while (more > 0) {
		if (st_jstring(j, NULL, NULL) || st_jexpect(j, ':', "expected ':'"))
			return -1;
		st_jws(j);
		if (j->p < j->end && *j->p != '"')
			return st_jfail(j, "__metadata__ values must be strings");
		if (st_jstring(j, NULL, NULL))
			return -1;
		more = st_jnext(j, '}');
	}
	if (more < 0)
		return -1;
	size_t ml = (size_t)(j->p - ms);
	h->metadata = malloc(ml + 1);
	if (!h->metadata)
		return -ENOMEM;
	memcpy(h->metadata, ms, ml);
	h->metadata[ml] = 0;
	return 0;
}

/* The entry of the tensor named key[0, klen), a name already decoded into
 * the arena at ps->used. */
static int add_tensor(struct pstate *ps, char *key, size_t klen, const char *path,
                      struct rq_err *err)
{
	struct st_header *h = ps->h;
	if (memchr(key, 0, klen))
		return rq_errf(err, -EPROTO, "%s: a tensor name contains U+0000", path);
	if (ps->used + klen + 1 > h->header_len + 1)
		return st_jfail(&ps->j, "internal: name arena");
	ps->used += klen + 1;
	if (RQ_GROW(ps->t, h->n, ps->cap, 64))
		return -ENOMEM;
	memset(&ps->t[h->n], 0, sizeof ps->t[h->n]);
	ps->t[h->n].name = key;
	ps->cur_name = key;
	if (parse_entry(&ps->j, &ps->t[h->n]))
		return -1;
	ps->cur_name = NULL;
	h->n++;
	return 0;
}

/* The whole header: one object, "__metadata__" at most once, every other
 * member a tensor; nothing but whitespace after it. */
static int parse_object(struct pstate *ps, const char *path, struct rq_err *err)
{
	struct jp *j = &ps->j;
	int seen_meta = 0, rc;
	st_jws(j);
	if (j->p >= j->end || *j->p != '{')
		return st_jfail(j, "header is not a JSON object");
	int more = st_jbegin(j, '}');
	while (more > 0) {
		size_t klen;
		char *key = ps->arena + ps->used;
		if (st_jstring(j, key, &klen))
			return -1;
		key[klen] = 0;
		if (st_jexpect(j, ':', "expected ':'"))
			return -1;
		if (klen == 12 && !memcmp(key, "__metadata__", 12)) {
			if (seen_meta++)
				return st_jfail(j, "duplicate field \"__metadata__\"");
			rc = parse_metadata(j, ps->h);
		} else {
			rc = add_tensor(ps, key, klen, path, err);
		}
		if (rc)
			return rc;
		more = st_jnext(j, '}');
	}
	if (more < 0)
		return -1;
	st_jws(j);
	if (j->p != j->end)
		return st_jfail(j, "trailing characters after the header object");
	return 0;
}

/* Puts h->t in data order, builds the by-name index, refuses a name twice. */
static int index_tensors(struct st_header_impl *hi, const char *path, struct rq_err *err)
{
	struct st_header *h = &hi->h;
	if (h->n)
		qsort(h->t, h->n, sizeof *h->t, by_offset);
	hi->by_name = malloc((h->n ? h->n : 1) * sizeof *hi->by_name);
	if (!hi->by_name)
		return -ENOMEM;
	for (size_t i = 0; i < h->n; i++)
		hi->by_name[i] = i;
	qsort_r(hi->by_name, h->n, sizeof *hi->by_name, by_name, h->t);
	for (size_t i = 1; i < h->n; i++)
		if (!strcmp(h->t[hi->by_name[i]].name, h->t[hi->by_name[i - 1]].name))
			return rq_errf(err, -EPROTO, "%s: duplicate tensor name '%s'", path,
			               h->t[hi->by_name[i]].name);
	return 0;
}

int st_parse_mem(const uint8_t *buf, size_t len, uint64_t file_size, const char *path,
                 struct st_header **out, struct rq_err *err)
{
	if (!path)
		path = "(safetensors)";
	uint64_t n = 0;
	int rc = check_prefix(buf, len, file_size, path, &n, err);
	if (rc)
		return rc;

	const uint8_t *json = buf + 8;
	struct st_header_impl *hi = calloc(1, sizeof *hi);
	char *arena = malloc(n + 1);
	struct pstate ps = {.j = {json, json, json + n, 128, NULL, 0}, .arena = arena};
	rc = -ENOMEM;
	if (!hi || !arena)
		goto fail;
	hi->names = arena;
	struct st_header *h = &hi->h;
	h->header_len = n;
	h->data_start = 8 + n;
	h->file_size = file_size;
	ps.h = h;
	rc = parse_object(&ps, path, err);
	if (rc == -1)
		goto bad_json;
	if (rc)
		goto fail;
	h->t = ps.t;
	ps.t = NULL;
	rc = index_tensors(hi, path, err);
	if (!rc)
		rc = validate(h, path, err);
	/* Last, no key twice anywhere (st/jcheck.h): in __metadata__, whose raw
	 * text we copy into the headers we present (serde keeps the last, cJSON
	 * the first), or among a tensor entry's extra fields. Only that rule:
	 * values of extra fields are ignored by every reader, and the grammar was
	 * checked above. After the checks above, so a repeated tensor name keeps
	 * its own message. */
	if (!rc) {
		char what[600];
		snprintf(what, sizeof what, "%s (header)", path);
		rc = jc_check_keys((const char *)json, n, what, err);
	}
	if (rc)
		goto fail;
	*out = h;
	return 0;

bad_json:
	if (ps.cur_name)
		rc = rq_errf(err, -EPROTO, "%s: tensor '%s': %s (header byte %zu)", path, ps.cur_name,
		             ps.j.why ? ps.j.why : "invalid entry", ps.j.at);
	else
		rc = rq_errf(err, -EPROTO, "%s: invalid header JSON: %s (header byte %zu)", path,
		             ps.j.why ? ps.j.why : "syntax error", ps.j.at);
fail:
	if (rc == -ENOMEM)
		rq_errf(err, -ENOMEM, "%s: out of memory reading the header", path);
	free(ps.t);
	if (hi) {
		st_header_free(&hi->h);
	} else {
		free(arena);
	}
	return rc;
}

static int pread_all(int fd, void *buf, size_t len, uint64_t off)
{
	size_t got = 0;
	while (got < len) {
		ssize_t r = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -ENODATA;
		got += (size_t)r;
	}
	return 0;
}

int st_parse_fd(int fd, const char *path, struct st_header **out, struct rq_err *err)
{
	struct stat st;
	if (!path)
		path = "(safetensors)";
	if (fstat(fd, &st))
		return rq_errf(err, -EIO, "%s: stat: %s", path, strerror(errno));
	uint64_t size = (uint64_t)st.st_size;
	uint8_t first[8];
	if (size < 8)
		return st_parse_mem(first, 0, size, path, out, err);
	int rc = pread_all(fd, first, 8, 0);
	if (rc)
		return rq_errf(err, -EIO, "%s: reading the header length: %s", path,
		               rc == -ENODATA ? "file shrank while reading" : strerror(-rc));
	uint64_t n = 0;
	for (int i = 7; i >= 0; i--)
		n = n << 8 | first[i];
	if (n > ST_MAX_HEADER || 8 + n > size)
		return st_parse_mem(first, 8, size, path, out, err);
	uint8_t *buf = malloc(8 + n);
	if (!buf)
		return rq_errf(err, -ENOMEM, "%s: out of memory for a %llu-byte header", path,
		               (unsigned long long)n);
	rc = pread_all(fd, buf, 8 + n, 0);
	if (rc) {
		free(buf);
		return rq_errf(err, -EIO, "%s: reading the header: %s", path,
		               rc == -ENODATA ? "file shrank while reading" : strerror(-rc));
	}
	rc = st_parse_mem(buf, 8 + n, size, path, out, err);
	free(buf);
	return rc;
}

int st_parse_path(const char *path, struct st_header **out, struct rq_err *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return rq_errf(err, -errno, "%s: %s", path, strerror(errno));
	int rc = st_parse_fd(fd, path, out, err);
	close(fd);
	return rc;
}
