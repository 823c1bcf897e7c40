/* st_internal.h — what st_parse.c and st_write.c share (not public). */
#ifndef RQ_FS_ST_INTERNAL_H
#define RQ_FS_ST_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_HEADER 100000000ull   /* safetensors' MAX_HEADER_SIZE */

/* 0 when raw[0..len) is exactly one JSON object whose values are all strings
 * (what safetensors accepts as "__metadata__"), or the literal null.
 * -EINVAL otherwise. */
int st_metadata_check(const char *raw, size_t len);

#endif
