/* chunk.c — the bytes of the remote store on disk (chunk.h).
 *
 * A file being fetched lives in its directory chunks/<id>-<chunk_size>/:
 *
 *     data                   the file itself, sparse: chunk c's bytes written
 *                            in place at c * chunk_size (pwrite, no fsync)
 *     <index, 16 hex>        chunk c's sum file: present = its bytes are in data
 *
 * so a whole file is stored once: the store hashes it in order as its
 * chunks come (rstore.c), a chunk read back from data checked against its
 * sums (rqr_chunk_hash); assembly fsyncs data and renames it to
 * files/<id> (rqr_publish: no copy; a 100 GB checkpoint never needs twice
 * its size on disk).
 *
 * Sum file, integers little-endian, exactly 64 + 8 * nb bytes:
 *
 *     offset  bytes  field
 *          0      8  magic "RQCHSUM\0"
 *          8      4  format version (3)
 *         12      4  the chunk's bytes len
 *         16      8  chunk index
 *         24      8  XXH3-64 of the file identity <id>
 *         32      4  block bytes (RQR_BLOCK)
 *         36      4  blocks nb = ceil(len / block bytes)
 *         40      8  XXH3-64 of the block table
 *         48      8  reserved, zero
 *         56      8  XXH3-64 of bytes 0..55 (the header checks itself)
 *         64   8*nb  block table: XXH3-64 of each block of the chunk's bytes
 *
 * Every read from disk is verified: a read checks the sum file's header and
 * table, then each 64 KiB block of data it touches against its entry (a
 * 4 KiB read hashes 64 KiB, ~5 us; a 1 MiB read costs one more pass over
 * bytes just read), so no byte is served unchecked and no read pays for a
 * whole 16 MiB chunk.
 *
 * Writing a chunk: pwrite its bytes into data, then publish its sum file by
 * rename of a unique temp name (<name>.tmp.<pid>.<n>). A crash before the
 * bytes reached the disk leaves a sum file over zeros or stale bytes: its
 * blocks fail their checksums, a miss, never a wrong byte. Stores sharing
 * the directory (other mounts, other nodes) write the same bytes at the
 * same offsets; one that assembles renames data away and removes the
 * directory, and the others find files/<id> instead. A store whose chunks
 * went that way may write a later chunk into a new, sparse data file (of
 * the full size when it is the last chunk): rqr_publish publishes data only
 * when every chunk's sum file is beside it, and never over files/<id>.
 */
#include "remote/chunk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define MAGIC "RQCHSUM"            /* + its NUL: 8 bytes */
#define VERSION 3u
#define PIECE (1u << 20)           /* bytes read at a time when assembling (whole blocks) */

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

static int sum_name(char *buf, size_t n, const char *dir, uint64_t idx)
{
	int w = snprintf(buf, n, "%s/%016llx", dir, (unsigned long long)idx);
	return w < 0 || (size_t)w >= n ? -ENAMETOOLONG : 0;
}

static int data_name(char *buf, size_t n, const char *dir)
{
	int w = snprintf(buf, n, "%s/data", dir);
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

static int pwrite_all(int fd, const void *buf, size_t n, uint64_t off)
{
	const uint8_t *p = buf;
	while (n) {
		ssize_t w = pwrite(fd, p, n, (off_t)off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		p += w;
		n -= (size_t)w;
		off += (uint64_t)w;
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
			return -EBADMSG;          /* data shorter than the sums say: torn */
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

uint32_t rqr_chunk_blocks(uint32_t len)
{
	return (uint32_t)(((uint64_t)len + RQR_BLOCK - 1) / RQR_BLOCK);
}

static int chunk_write_once(int dfd, const char *dir, uint64_t idx, uint32_t chunk_size,
                            uint64_t idhash, const void *buf, uint32_t len)
{
	char name[512], dname[512], tmp[600];
	int rc = sum_name(name, sizeof name, dir, idx);
	if (!rc)
		rc = data_name(dname, sizeof dname, dir);
	if (rc)
		return rc;
	if (mkdirat(dfd, dir, 0755) < 0 && errno != EEXIST)
		return -errno;
	int fd = openat(dfd, dname, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return -errno;
	rc = pwrite_all(fd, buf, len, idx * chunk_size);
	if (!rc)   /* writeback starts now, so assembly's fsync waits for little */
		sync_file_range(fd, (off64_t)(idx * chunk_size), len, SYNC_FILE_RANGE_WRITE);
	if (close(fd) < 0 && !rc)
		rc = -errno;
	if (rc)
		return rc;
	uint32_t nb = rqr_chunk_blocks(len);
	size_t hn = RQR_CHUNK_HDR + 8 * (size_t)nb;
	uint8_t *h = calloc(1, hn);
	if (!h)
		return -ENOMEM;
	for (uint32_t b = 0; b < nb; b++) {
		size_t o = (size_t)b * RQR_BLOCK, m = len - o < RQR_BLOCK ? len - o : RQR_BLOCK;
		put64(h + RQR_CHUNK_HDR + 8 * b, XXH3_64bits((const uint8_t *)buf + o, m));
	}
	memcpy(h, MAGIC, 8);
	put32(h + 8, VERSION);
	put32(h + 12, len);
	put64(h + 16, idx);
	put64(h + 24, idhash);
	put32(h + 32, RQR_BLOCK);
	put32(h + 36, nb);
	put64(h + 40, XXH3_64bits(h + RQR_CHUNK_HDR, 8 * (size_t)nb));
	put64(h + 56, XXH3_64bits(h, 56));
	snprintf(tmp, sizeof tmp, "%s.tmp.%d.%u", name, (int)getpid(),
	         atomic_fetch_add(&tmp_seq, 1));
	fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0) {
		free(h);
		return -errno;
	}
	rc = write_all(fd, h, hn);
	free(h);
	if (close(fd) < 0 && !rc)
		rc = -errno;
	if (!rc && renameat(dfd, tmp, dfd, name) < 0)
		rc = -errno;
	if (rc)
		unlinkat(dfd, tmp, 0);
	return rc;
}

int rqr_chunk_write(int dfd, const char *dir, uint64_t idx, uint32_t chunk_size,
                    uint64_t idhash, const void *buf, uint32_t len)
{
	/* Another store sharing the directory may remove dir (it assembled the
	 * file) between our mkdir and our rename: then make it again. */
	int rc = -ENOENT;
	for (int i = 0; i < 3 && rc == -ENOENT; i++)
		rc = chunk_write_once(dfd, dir, idx, chunk_size, idhash, buf, len);
	return rc;
}

/* A chunk opened for reading: data's descriptor and the checked table. */
struct ochunk {
	int fd;                    /* data */
	uint32_t len, nb;
	uint64_t *sums;            /* [nb] */
	uint64_t base;             /* the chunk's offset in data */
};

static void close_chunk(struct ochunk *o)
{
	if (o->fd >= 0)
		close(o->fd);
	free(o->sums);
	o->fd = -1;
	o->sums = NULL;
}

/* Reads and checks chunk idx's sum file into o->sums. */
static int load_sums(int dfd, const char *dir, uint64_t idx, uint64_t idhash, struct ochunk *o)
{
	char name[512];
	int rc = sum_name(name, sizeof name, dir, idx);
	if (rc)
		return rc;
	int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return errno == ELOOP ? -EBADMSG : -errno;
	struct stat st;
	uint8_t h[RQR_CHUNK_HDR];
	size_t tb = 8 * (size_t)o->nb;
	uint8_t *t = malloc(tb ? tb : 1);
	o->sums = calloc(o->nb ? o->nb : 1, sizeof *o->sums);
	if (!t || !o->sums)
		rc = -ENOMEM;
	else if (fstat(fd, &st) < 0)
		rc = -errno;
	else if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != RQR_CHUNK_HDR + tb)
		rc = -EBADMSG;
	else if (!(rc = pread_all(fd, h, sizeof h, 0)) && !(rc = pread_all(fd, t, tb, sizeof h)))
		if (memcmp(h, MAGIC, 8) || get32(h + 8) != VERSION || get32(h + 12) != o->len ||
		    get64(h + 16) != idx || get64(h + 24) != idhash || get32(h + 32) != RQR_BLOCK ||
		    get32(h + 36) != o->nb || get64(h + 40) != XXH3_64bits(t, tb) ||
		    get64(h + 56) != XXH3_64bits(h, 56))
			rc = -EBADMSG;
	for (uint32_t b = 0; !rc && b < o->nb; b++)
		o->sums[b] = get64(t + 8 * b);
	free(t);
	close(fd);
	return rc;
}

/* Opens chunk idx: its sums checked, data open (or data_fd borrowed when
 * >= 0). -ENOENT: absent; -EBADMSG: bad. */
static int open_chunk(int dfd, const char *dir, uint64_t idx, uint32_t chunk_size,
                      uint64_t idhash, uint32_t len, int data_fd, struct ochunk *o)
{
	*o = (struct ochunk){.fd = -1, .len = len, .nb = rqr_chunk_blocks(len),
	                     .base = idx * chunk_size};   /* closable from here on */
	int rc = load_sums(dfd, dir, idx, idhash, o);
	if (rc)
		return rc;
	if (data_fd >= 0) {
		o->fd = dup(data_fd);
		return o->fd < 0 ? -errno : 0;
	}
	char dname[512];
	if ((rc = data_name(dname, sizeof dname, dir)))
		return rc;
	o->fd = openat(dfd, dname, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	return o->fd < 0 ? (errno == ELOOP ? -EBADMSG : -errno) : 0;
}

/* Reads blocks [b, b + n) of an open chunk into dst (whole blocks, the last
 * one maybe short) and checks each. */
static int read_blocks(const struct ochunk *o, uint32_t b, uint32_t n, uint8_t *dst)
{
	uint64_t a = (uint64_t)b * RQR_BLOCK, e = (uint64_t)(b + n) * RQR_BLOCK;
	if (e > o->len)
		e = o->len;
	int rc = pread_all(o->fd, dst, e - a, o->base + a);
	for (uint32_t k = 0; !rc && k < n; k++) {
		uint64_t x = (uint64_t)k * RQR_BLOCK, m = e - a - x < RQR_BLOCK ? e - a - x : RQR_BLOCK;
		if (XXH3_64bits(dst + x, m) != o->sums[b + k])
			rc = -EBADMSG;
	}
	return rc;
}

int rqr_chunk_read(int dfd, const char *dir, uint64_t idx, uint32_t chunk_size, uint64_t idhash,
                   uint32_t len, uint64_t at, uint64_t n, void *dst)
{
	struct ochunk o;
	if (at + n > len)
		return -EINVAL;
	if (!n)
		return 0;
	int rc = open_chunk(dfd, dir, idx, chunk_size, idhash, len, -1, &o);
	uint8_t *out = dst, *edge = NULL;
	uint32_t b0 = (uint32_t)(at / RQR_BLOCK), b1 = (uint32_t)((at + n - 1) / RQR_BLOCK);
	for (uint32_t b = b0; b <= b1 && !rc;) {
		uint64_t ba = (uint64_t)b * RQR_BLOCK;
		uint64_t be = ba + RQR_BLOCK < len ? ba + RQR_BLOCK : len;
		if (ba >= at && be <= at + n) {      /* whole blocks: straight into dst */
			uint32_t k = 1;
			while (b + k <= b1) {
				uint64_t ne = (uint64_t)(b + k + 1) * RQR_BLOCK;
				if ((ne < len ? ne : len) > at + n)
					break;
				k++;
			}
			rc = read_blocks(&o, b, k, out + (ba - at));
			b += k;
			continue;
		}
		if (!edge && !(edge = malloc(RQR_BLOCK))) {   /* a block cut by the range */
			rc = -ENOMEM;
			break;
		}
		rc = read_blocks(&o, b, 1, edge);
		uint64_t a = ba > at ? ba : at, e = be < at + n ? be : at + n;
		if (!rc)
			memcpy(out + (a - at), edge + (a - ba), e - a);
		b++;
	}
	free(edge);
	close_chunk(&o);
	return rc;
}

/* The hash of a whole file, fed in file order (OpenSSL's digests, SHA-NI
 * where the CPU has it: ~7x the portable base/sha256.c here, 724 vs 109
 * MB/s on a loaded 2-core runner, and every byte of a 100 GB checkpoint is
 * hashed once). */
struct rqr_hash {
	EVP_MD_CTX *md;            /* NULL: nothing to check (no sha256, no blob id) */
	char want[65];             /* the hex the bytes must hash to */
};

struct rqr_hash *rqr_hash_new(const char *sha256, const char *blob_id, uint64_t size)
{
	struct rqr_hash *h = calloc(1, sizeof *h);
	if (!h)
		return NULL;
	int use_git = !sha256 && blob_id;
	if (!sha256 && !blob_id)
		return h;
	snprintf(h->want, sizeof h->want, "%s", sha256 ? sha256 : blob_id);
	if (!(h->md = EVP_MD_CTX_new()) ||
	    !EVP_DigestInit_ex(h->md, use_git ? EVP_sha1() : EVP_sha256(), NULL)) {
		rqr_hash_free(h);
		return NULL;
	}
	if (use_git) {                        /* git's blob id: sha1("blob <size>\0" + bytes) */
		char hdr[32];
		int hn = snprintf(hdr, sizeof hdr, "blob %llu", (unsigned long long)size);
		EVP_DigestUpdate(h->md, hdr, (size_t)hn + 1);
	}
	return h;
}

int rqr_hash_update(struct rqr_hash *h, const void *p, size_t n)
{
	return !h->md || EVP_DigestUpdate(h->md, p, n) ? 0 : -EIO;
}

int rqr_hash_final(struct rqr_hash *h, char got_hex[65])
{
	got_hex[0] = 0;
	if (!h->md)
		return 0;
	unsigned char d[EVP_MAX_MD_SIZE];
	unsigned int dn = 0;
	if (!EVP_DigestFinal_ex(h->md, d, &dn))
		return -EIO;
	for (unsigned i = 0; i < dn && i < 32; i++)
		snprintf(got_hex + 2 * i, 3, "%02x", d[i]);
	return strcmp(got_hex, h->want) ? -EBADMSG : 0;
}

void rqr_hash_free(struct rqr_hash *h)
{
	if (!h)
		return;
	EVP_MD_CTX_free(h->md);
	free(h);
}

int rqr_chunk_hash(int dfd, const char *dir, uint64_t idx, uint32_t chunk_size,
                   uint64_t idhash, uint32_t len, struct rqr_hash *h)
{
	struct ochunk o;
	uint8_t *piece = malloc(PIECE);
	int rc = piece ? open_chunk(dfd, dir, idx, chunk_size, idhash, len, -1, &o) : -ENOMEM;
	for (uint32_t b = 0; !rc && b < o.nb; b += PIECE / RQR_BLOCK) {
		uint32_t k = o.nb - b < PIECE / RQR_BLOCK ? o.nb - b : PIECE / RQR_BLOCK;
		uint64_t a = (uint64_t)b * RQR_BLOCK, e = a + (uint64_t)k * RQR_BLOCK;
		if (e > len)
			e = len;
		if (!(rc = read_blocks(&o, b, k, piece)))
			rc = rqr_hash_update(h, piece, e - a);
	}
	if (piece)
		close_chunk(&o);
	free(piece);
	return rc;
}

int rqr_publish(int dfd, const char *dir, const char *id, uint64_t size, uint64_t nchunks)
{
	char name[512], dname[512], sname[512];
	if (snprintf(name, sizeof name, "files/%s", id) >= (int)sizeof name ||
	    data_name(dname, sizeof dname, dir))
		return -ENAMETOOLONG;
	if (!size && mkdirat(dfd, dir, 0755) < 0 && errno != EEXIST)
		return -errno;                       /* an empty file has no chunk: make it */
	int fd = openat(dfd, dname, O_RDWR | O_CLOEXEC | O_NOFOLLOW | (size ? 0 : O_CREAT), 0644);
	if (fd < 0)
		return errno == ENOENT ? -ESTALE : -errno;   /* moved by another store's publish */
	struct stat st;
	int rc = 0;
	if (fstat(fd, &st) < 0)
		rc = -errno;
	else if ((uint64_t)st.st_size != size)
		rc = -EBADMSG;                       /* bytes past the end: not this file */
	/* Every chunk's sum is here: else another store sharing the cache
	 * assembled the file and removed dir, and this data is a new one that
	 * holds only the chunks written since (sparse, zeros elsewhere, maybe
	 * already of the full size): the bytes the caller hashed are not in it. */
	for (uint64_t c = 0; !rc && c < nchunks; c++)
		if (sum_name(sname, sizeof sname, dir, c) ||
		    fstatat(dfd, sname, &st, AT_SYMLINK_NOFOLLOW) < 0)
			rc = -ESTALE;
	if (!rc && fsync(fd) < 0)
		rc = -errno;
	if (close(fd) < 0 && !rc)
		rc = -errno;
	/* Never over a published file: files/<id> is only ever made by this
	 * rename of checked bytes (another store's: the caller takes it). */
	if (!rc && renameat2(dfd, dname, dfd, name, RENAME_NOREPLACE) < 0) {
		rc = -errno;
		if (rc == -EINVAL) {                 /* a file system without NOREPLACE */
			rc = faccessat(dfd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0 ? -EEXIST
			     : renameat(dfd, dname, dfd, name) < 0 ? -errno : 0;
		}
		if (rc == -ENOENT)
			rc = -ESTALE;                    /* moved meanwhile by another store's publish */
	}
	if (rc)
		return rc;
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
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    unlinkat(fd, e->d_name, 0) == 0)
			freed += (uint64_t)st.st_blocks * 512;   /* data is sparse: what it held */
	}
	closedir(d);
	unlinkat(dfd, dir, AT_REMOVEDIR);
	return freed;
}
