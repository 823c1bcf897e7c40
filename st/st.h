/* st.h — safetensors: a strict parser (SPEC.md §5) and the canonical
 * serializer (SPEC.md §4), i.e. the bytes safetensors.torch.save_file writes. */
#ifndef RQ_ST_ST_H
#define RQ_ST_ST_H

#include <stddef.h>
#include <stdint.h>

struct rq_err;

/* In safetensors' enum order: data is sorted by dtype DESCENDING in this order. */
enum st_dtype {
	ST_BOOL, ST_F4, ST_F6_E2M3, ST_F6_E3M2, ST_U8, ST_I8, ST_F8_E5M2, ST_F8_E4M3,
	ST_F8_E8M0, ST_F8_E4M3FNUZ, ST_F8_E5M2FNUZ, ST_I16, ST_U16, ST_F16, ST_BF16,
	ST_I32, ST_U32, ST_F32, ST_C64, ST_F64, ST_I64, ST_U64,
	ST_NDTYPES
};

const char *st_dtype_name(enum st_dtype d);                 /* "BF16" */
int st_dtype_parse(const char *s, size_t len, enum st_dtype *out);  /* -EINVAL */
unsigned st_dtype_bits(enum st_dtype d);                    /* 4 for F4, 16 for BF16 */

#define ST_MAX_DIMS 8

struct st_tensor {
	char *name;
	enum st_dtype dtype;
	int ndim;
	uint64_t shape[ST_MAX_DIMS];
	uint64_t begin, end;     /* byte offsets relative to the data start (8 + N) */
};

struct st_header {
	uint64_t header_len;     /* N: the JSON length including padding */
	uint64_t data_start;     /* 8 + N */
	uint64_t file_size;
	char *metadata;          /* raw JSON text of the "__metadata__" value as written, or NULL */
	size_t n;
	struct st_tensor *t;     /* in data order (ascending begin) */
};

/* Parses and validates the header of an open file (pread only). `path` is
 * used in messages. -EPROTO for a bad file, -EIO for a read error. */
int st_parse_fd(int fd, const char *path, struct st_header **out, struct rq_err *err);
int st_parse_path(const char *path, struct st_header **out, struct rq_err *err);
/* Same on bytes in memory: buf holds at least the first 8 + N bytes of a file
 * of file_size bytes. */
int st_parse_mem(const uint8_t *buf, size_t len, uint64_t file_size, const char *path,
                 struct st_header **out, struct rq_err *err);
void st_header_free(struct st_header *h);

/* Index of the tensor called name, or -1. O(log n). */
long st_find(const struct st_header *h, const char *name);
uint64_t st_numel(const struct st_tensor *t);

/* Serializer. Given a tensor set (any order) and the raw __metadata__ text
 * (NULL for none), computes the canonical file layout:
 *   *hdr and *hdr_len: the first 8 + N bytes of the file (malloc'd),
 *   order[i]: index into specs of the i-th tensor in data order,
 *   begin[j]: data offset of specs[j] (relative to the data start).
 * Returns -EINVAL on duplicate names, bad shapes, or sub-byte sizes that
 * do not divide. data_size (total payload bytes) may be NULL. */
struct st_spec {
	const char *name;
	enum st_dtype dtype;
	int ndim;
	uint64_t shape[ST_MAX_DIMS];
};
int st_layout(const struct st_spec *specs, size_t n, const char *metadata_raw,
              uint8_t **hdr, size_t *hdr_len, size_t *order, uint64_t *begin,
              uint64_t *data_size, struct rq_err *err);
uint64_t st_spec_bytes(const struct st_spec *s);

#endif
