/* sha256.h — SHA-256 (FIPS 180-4), enough to name hub-cache blobs. */
#ifndef RQ_BASE_SHA256_H
#define RQ_BASE_SHA256_H

#include <stddef.h>
#include <stdint.h>

struct sha256 {
	uint32_t h[8];
	uint64_t len;          /* bytes hashed so far */
	uint8_t buf[64];
	size_t nbuf;
};

void sha256_init(struct sha256 *s);
void sha256_update(struct sha256 *s, const void *data, size_t n);
void sha256_final(struct sha256 *s, uint8_t out[32]);
/* Lowercase hex of a file's SHA-256 into hex[65]. 0 or -errno. */
int sha256_file(const char *path, char hex[65]);
void sha256_hex(const uint8_t d[32], char hex[65]);
/* Lowercase hex of the SHA-256 of buf[0, n) into hex[65]. */
void sha256_buf_hex(const void *buf, size_t n, char hex[65]);

#endif
