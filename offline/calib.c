/* calib.c — `calib extract`: every *.input_global_scale of a checkpoint
 * directory written as one small safetensors file; the writer that
 * `calib fetch` (calib_fetch.c) shares so both give the same bytes. */
#include "offline/calib.h"
#include "plan/ckpt.h"
#include "base/err.h"
#include "st/st.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct extract_ctx {
	struct rq_ckpt *c;
	const char *dir;
	char **names;
	uint32_t *bits;
	size_t n, cap;
	struct rq_err *err;
};

static int extract_one(void *vctx, const char *name, const struct st_tensor *t, int shard)
{
	struct extract_ctx *x = vctx;
	size_t l = strlen(name), sl = strlen(".input_global_scale");
	if (l <= sl || strcmp(name + l - sl, ".input_global_scale"))
		return 0;
	if (x->n == x->cap) {
		size_t cap = x->cap ? x->cap * 2 : 1024;
		char **nn = realloc(x->names, cap * sizeof *nn);
		if (!nn)
			return -ENOMEM;
		x->names = nn;
		uint32_t *nb = realloc(x->bits, cap * sizeof *nb);
		if (!nb)
			return -ENOMEM;
		x->bits = nb;
		x->cap = cap;
	}
	int rc = rq_calib_read_scale(x->c, x->dir, name, &x->bits[x->n], x->err);
	if (rc)
		return rc;
	x->names[x->n] = strdup(name);
	if (!x->names[x->n])
		return -ENOMEM;
	x->n++;
	(void)t;
	(void)shard;
	return 0;
}

int rq_calib_write(const char *out_file, char *const *names, const uint32_t *bits, size_t n,
                   struct rq_err *err)
{
	return rq_calib_write_meta(out_file, names, bits, n, NULL, err);
}

int rq_calib_write_meta(const char *out_file, char *const *names, const uint32_t *bits, size_t n,
                        const char *extra, struct rq_err *err)
{
	char *meta = NULL;
	if (asprintf(&meta, "{\"format\":\"pt\",\"requantfs\":\"calib\"%s%s}", extra ? "," : "",
	             extra ? extra : "") < 0)
		return rq_errf(err, -ENOMEM, "out of memory");
	struct st_spec *specs = calloc(n ? n : 1, sizeof *specs);
	size_t *order = calloc(n ? n : 1, sizeof *order);
	uint64_t *begin = calloc(n ? n : 1, sizeof *begin);
	uint8_t *hdr = NULL, *data = calloc(n ? n : 1, 4);
	size_t hlen = 0;
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s.tmp.%d", out_file, (int)getpid());
	int fd = -1, rc = -ENOMEM;
	if (!specs || !order || !begin || !data)
		goto out;
	for (size_t i = 0; i < n; i++) {
		specs[i].name = names[i];
		specs[i].dtype = ST_F32;
		specs[i].ndim = 1;
		specs[i].shape[0] = 1;
	}
	rc = st_layout(specs, n, meta, &hdr, &hlen,
	               order, begin, NULL, err);
	if (rc)
		goto out;
	for (size_t i = 0; i < n; i++)
		memcpy(data + begin[i], &bits[i], 4);   /* little-endian host */
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = rq_errf(err, -errno, "%s: %s", tmp, strerror(errno));
		goto out;
	}
	if (write(fd, hdr, hlen) != (ssize_t)hlen || write(fd, data, n * 4) != (ssize_t)(n * 4) ||
	    fsync(fd) < 0) {
		rc = rq_errf(err, -errno ? -errno : -EIO, "%s: write failed: %s", tmp, strerror(errno));
		goto out;
	}
	close(fd);
	fd = -1;
	if (rename(tmp, out_file) < 0) {
		rc = rq_errf(err, -errno, "%s: %s", out_file, strerror(errno));
		goto out;
	}
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	if (rc)
		unlink(tmp);
	free(specs);
	free(order);
	free(begin);
	free(hdr);
	free(data);
	free(meta);
	return rc;
}

int rq_calib_load(const char *path, char ***names, uint32_t **bits, size_t *count,
                  struct rq_err *err)
{
	struct extract_ctx x = {.dir = path, .err = err};
	int rc = rq_ckpt_open(path, &x.c, err);
	if (rc)
		return rc;
	rc = rq_ckpt_each(x.c, extract_one, &x, err);
	if (!rc && !x.n)
		rc = rq_errf(err, -ENOENT, "%s has no *.input_global_scale tensors; is it the 07-22 "
		             "all-NVFP4 checkpoint or a calibration file?", path);
	rq_ckpt_close(x.c);
	if (rc) {
		rq_calib_free(x.names, x.bits, x.n);
		return rc;
	}
	*names = x.names;
	*bits = x.bits;
	*count = x.n;
	return 0;
}

void rq_calib_free(char **names, uint32_t *bits, size_t n)
{
	for (size_t i = 0; names && i < n; i++)
		free(names[i]);
	free(names);
	free(bits);
}

int rq_calib_extract(const char *calib_dir, const char *out_file, size_t *count,
                     struct rq_err *err)
{
	char **names;
	uint32_t *bits;
	size_t n;
	int rc = rq_calib_load(calib_dir, &names, &bits, &n, err);
	if (rc)
		return rc;
	rc = rq_calib_write(out_file, names, bits, n, err);
	if (!rc)
		*count = n;
	rq_calib_free(names, bits, n);
	return rc;
}
