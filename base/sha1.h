/* sha1.h — SHA-1 (FIPS 180-4), for git blob ids: the hub names a file that is
 * not in LFS by sha1("blob <size>\0" + bytes) (its "blobId"). Not for
 * anything that needs collision resistance against an adversary. */
#ifndef RQ_BASE_SHA1_H
#define RQ_BASE_SHA1_H

#include <stddef.h>
#include <stdint.h>

struct sha1 {
	uint32_t h[5];
	uint64_t len;          /* bytes hashed so far */
	uint8_t buf[64];
	size_t nbuf;
};

void sha1_init(struct sha1 *s);
void sha1_update(struct sha1 *s, const void *data, size_t n);
/* The digest as 40 lowercase hex digits into hex[41]. */
void sha1_final_hex(struct sha1 *s, char hex[41]);
/* Starts the git blob id of a file of size bytes ("blob <size>\0"). */
void sha1_init_git_blob(struct sha1 *s, uint64_t size);

#endif
