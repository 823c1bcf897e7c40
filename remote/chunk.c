/* chunk.c — the bytes of the remote store on disk (chunk.h).
 *
 * Chunk file chunks/<id>-<chunk_size>/<index, 16 hex>, integers
 * little-endian, exactly 64 + len bytes:
 *
 *     offset  bytes  field
 *          0      8  magic "RQCHUNK\0"
 *          8      4  format version (1)
 *         12      4  payload bytes len
 *         16      8  chunk index
 *         24      8  XXH3-64 of the file identity <id>
 *         32      8  XXH3-64 of the payload
 *         40     16  reserved, zero
 *         56      8  XXH3-64 of bytes 0..55 (the header checks itself)
 *         64    len  payload: bytes [index * chunk_size, + len) of the file
 *
 * Writers publish by rename of a unique temp name (<name>.tmp.<pid>.<n>),
 * so readers and other processes sharing the directory only ever see
 * whole chunks or none; a crash before the data reached the disk leaves a
 * short or zeroed file that fails its checksum: a miss, never a wrong byte.
 */
#include "remote/chunk.h"
#include "base/sha256.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define MAGIC "RQCHUNK"            /* + its NUL: 8 bytes */
#define VERSION 1u
#define PIECE (1u << 20)           /* bytes read at a time when verifying or assembling */

static atomic_uint tmp_seq;

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static int chunk_name(char *buf, size_t n, const char *dir, uint64_t idx)
{
	int w = snprintf(buf, n, "%s/%016llx", dir, (unsigned long long)idx);
	return w < 0 || (size_t)w >= n ? -ENAMETOOLONG : 0;
}

static int write_all(int fd, const void *buf, size_t n)
{
	const uint8_t *p = buf;
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int pread_all(int fd, void *buf, size_t n, uint64_t off)
{
	uint8_t *p = buf;
	while (n) {
		ssize_t r = pread(fd, p, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -EBADMSG;          /* shorter than its header says: torn */
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

static int chunk_write_once(int dfd, const char *dir, uint64_t idx, uint64_t idhash,
                            const void *buf, uint32_t len);

int rqr_chunk_write(int dfd, const char *dir, uint64_t idx, uint64_t idhash, const void *buf,
                    uint32_t len)
{
	/* Another store sharing the directory may remove dir (it assembled the
	 * file) between our mkdir and our rename: then make it again. */
	int rc = -ENOENT;
	for (int i = 0; i < 3 && rc == -ENOENT; i++)
		rc = chunk_write_once(dfd, dir, idx, idhash, buf, len);
	return rc;
}

static int chunk_write_once(int dfd, const char *dir, uint64_t idx, uint64_t idhash,
                            const void *buf, uint32_t len)
{
	char name[512], tmp[600];
	int rc = chunk_name(name, sizeof name, dir, idx);
	if (rc)
		return rc;
	if (mkdirat(dfd, dir, 0755) < 0 && errno != EEXIST)
		return -errno;
	snprintf(tmp, sizeof tmp, "%s.tmp.%d.%u", name, (int)getpid(),
	         atomic_fetch_add(&tmp_seq, 1));
	uint8_t h[RQR_CHUNK_HDR] = {0};
	memcpy(h, MAGIC, 8);
	put32(h + 8, VERSION);
	put32(h + 12, len);
	put64(h + 16, idx);
	put64(h + 24, idhash);
	put64(h + 32, XXH3_64bits(buf, len));
	put64(h + 56, XXH3_64bits(h, 56));
	int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return -errno;
	rc = write_all(fd, h, sizeof h);
	if (!rc)
		rc = write_all(fd, buf, len);
	if (close(fd) < 0 && !rc)
		rc = -errno;
	if (!rc && renameat(dfd, tmp, dfd, name) < 0)
		rc = -errno;
	if (rc)
		unlinkat(dfd, tmp, 0);
	return rc;
}

/* Opens chunk idx and checks its header and size. */
static int open_chunk(int dfd, const char *dir, uint64_t idx, uint64_t idhash, uint32_t len,
                      uint64_t *sum)
{
	char name[512];
	int rc = chunk_name(name, sizeof name, dir, idx);
	if (rc)
		return rc;
	int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return errno == ELOOP ? -EBADMSG : -errno;
	struct stat st;
	uint8_t h[RQR_CHUNK_HDR];
	if (fstat(fd, &st) < 0) {
		rc = -errno;
	} else if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != RQR_CHUNK_HDR + (uint64_t)len) {
		rc = -EBADMSG;
	} else if ((rc = pread_all(fd, h, sizeof h, 0)) == 0) {
		if (memcmp(h, MAGIC, 8) || get32(h + 8) != VERSION || get32(h + 12) != len ||
		    get64(h + 16) != idx || get64(h + 24) != idhash ||
		    get64(h + 56) != XXH3_64bits(h, 56))
			rc = -EBADMSG;
		*sum = get64(h + 32);
	}
	if (rc) {
		close(fd);
		return rc;
	}
	return fd;
}

/* Streams chunk fd's payload through the checksum (and sha, when not NULL),
 * handing each piece to out (may be NULL) at its payload offset. */
struct sink {
	void *dst;                 /* copy [at, at + n) of the payload here, or NULL */
	uint64_t at, n;
	int wfd;                   /* append everything here, or -1 */
	struct sha256 *sha;
};

static int stream_chunk(int fd, uint32_t len, uint64_t sum, uint8_t *piece, struct sink *k)
{
	XXH3_state_t *x = XXH3_createState();
	if (!x)
		return -ENOMEM;
	XXH3_64bits_reset(x);
	int rc = 0;
	for (uint64_t o = 0; o < len && !rc; o += PIECE) {
		size_t m = len - o < PIECE ? (size_t)(len - o) : PIECE;
		rc = pread_all(fd, piece, m, RQR_CHUNK_HDR + o);
		if (rc)
			break;
		XXH3_64bits_update(x, piece, m);
		if (k->sha)
			sha256_update(k->sha, piece, m);
		if (k->wfd >= 0)
			rc = write_all(k->wfd, piece, m);
		if (k->dst && o < k->at + k->n && o + m > k->at) {
			uint64_t a = o > k->at ? o : k->at, b = o + m < k->at + k->n ? o + m : k->at + k->n;
			memcpy((uint8_t *)k->dst + (a - k->at), piece + (a - o), b - a);
		}
	}
	if (!rc && XXH3_64bits_digest(x) != sum)
		rc = -EBADMSG;
	XXH3_freeState(x);
	return rc;
}

int rqr_chunk_read(int dfd, const char *dir, uint64_t idx, uint64_t idhash, uint32_t len,
                   uint64_t at, uint64_t n, void *dst, int verify)
{
	uint64_t sum;
	if (at + n > len)
		return -EINVAL;
	int fd = open_chunk(dfd, dir, idx, idhash, len, &sum);
	if (fd < 0)
		return fd;
	int rc;
	if (verify) {
		uint8_t *piece = malloc(PIECE);
		struct sink k = {.dst = dst, .at = at, .n = n, .wfd = -1};
		rc = piece ? stream_chunk(fd, len, sum, piece, &k) : -ENOMEM;
		free(piece);
	} else {
		rc = pread_all(fd, dst, n, RQR_CHUNK_HDR + at);
	}
	close(fd);
	return rc;
}

int rqr_assemble(int dfd, const char *dir, const char *id, uint64_t idhash, uint64_t size,
                 uint32_t chunk_size, const char *sha256, const atomic_int *stop,
                 int64_t *bad_chunk, char got_hex[65])
{
	char name[512], tmp[600];
	*bad_chunk = -1;
	got_hex[0] = 0;
	if (snprintf(name, sizeof name, "files/%s", id) >= (int)sizeof name)
		return -ENAMETOOLONG;
	snprintf(tmp, sizeof tmp, "files/.%s.tmp.%d.%u", id, (int)getpid(),
	         atomic_fetch_add(&tmp_seq, 1));
	uint8_t *piece = malloc(PIECE);
	if (!piece)
		return -ENOMEM;
	int wfd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (wfd < 0) {
		free(piece);
		return -errno;
	}
	struct sha256 sha;
	sha256_init(&sha);
	struct sink k = {.wfd = wfd, .sha = &sha};
	uint64_t nchunks = (size + chunk_size - 1) / chunk_size;
	int rc = 0;
	for (uint64_t c = 0; c < nchunks && !rc; c++) {
		if (atomic_load(stop)) {
			rc = -ECANCELED;
			break;
		}
		uint32_t len = (uint32_t)(size - c * chunk_size < chunk_size ? size - c * chunk_size
		                                                            : chunk_size);
		uint64_t sum;
		int fd = open_chunk(dfd, dir, c, idhash, len, &sum);
		if (fd < 0) {
			rc = fd == -ENOENT ? -EBADMSG : fd;   /* vanished (dropped): refetch it */
		} else {
			rc = stream_chunk(fd, len, sum, piece, &k);
			close(fd);
		}
		if (rc == -EBADMSG)
			*bad_chunk = (int64_t)c;
	}
	free(piece);
	if (!rc) {
		uint8_t d[32];
		sha256_final(&sha, d);
		sha256_hex(d, got_hex);
		if (sha256 && strcmp(got_hex, sha256))
			rc = -EBADMSG;
	}
	if (!rc && fsync(wfd) < 0)
		rc = -errno;
	if (close(wfd) < 0 && !rc)
		rc = -errno;
	if (!rc && renameat(dfd, tmp, dfd, name) < 0)
		rc = -errno;
	if (rc) {
		unlinkat(dfd, tmp, 0);
		return rc;
	}
	int ffd = openat(dfd, "files", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ffd >= 0) {
		fsync(ffd);
		close(ffd);
	}
	return 0;
}

uint64_t rqr_chunk_drop_all(int dfd, const char *dir)
{
	int fd = openat(dfd, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return 0;
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return 0;
	}
	uint64_t freed = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		struct stat st;
		if (e->d_name[0] == '.')
			continue;
		if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    unlinkat(fd, e->d_name, 0) == 0)
			freed += (uint64_t)st.st_size;
	}
	closedir(d);
	unlinkat(dfd, dir, AT_REMOVEDIR);
	return freed;
}
