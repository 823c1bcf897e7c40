/* rsfile.c — a remote file's identity and names, and what the cache already
 * holds of it at open (rstore.h; the states are written at the top of
 * rstore.c). */
#include "remote/rstore_int.h"
#include "remote/chunk.h"

#include <dirent.h>
#include <xxhash.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TMP_STALE_S (15 * 60)   /* a temp file this old is a crashed writer's (as cache/) */

/* The identity of a file (chunk.h) and its derived names. */
int rqr_name_file(struct rq_rs *s, struct rfile *f, const struct rq_rs_file *in,
                     struct rq_err *err)
{
	if (in->sha256 && *in->sha256) {
		if (strlen(in->sha256) != 64 || strspn(in->sha256, "0123456789abcdef") != 64)
			return rq_errf(err, -EINVAL, "%s: LFS sha256 '%s' is not 64 lowercase hex digits",
			               in->name, in->sha256);
		memcpy(f->sha256, in->sha256, 65);
		snprintf(f->id, sizeof f->id, "%s", in->sha256);
	} else if (in->blob_id && *in->blob_id) {
		if (strlen(in->blob_id) != 40 || strspn(in->blob_id, "0123456789abcdef") != 40)
			return rq_errf(err, -EINVAL, "%s: git blob id '%s' is not 40 lowercase hex digits",
			               in->name, in->blob_id);
		snprintf(f->id, sizeof f->id, "git-%s", in->blob_id);
		memcpy(f->blob_id, in->blob_id, 41);
	} else {
		XXH3_state_t *x = XXH3_createState();
		if (!x)
			return -ENOMEM;
		XXH3_128bits_reset(x);
		XXH3_128bits_update(x, s->repo, strlen(s->repo) + 1);
		XXH3_128bits_update(x, s->commit, strlen(s->commit) + 1);
		XXH3_128bits_update(x, in->name, strlen(in->name) + 1);
		XXH128_hash_t h = XXH3_128bits_digest(x);
		XXH3_freeState(x);
		snprintf(f->id, sizeof f->id, "name-%016llx%016llx", (unsigned long long)h.high64,
		         (unsigned long long)h.low64);
	}
	snprintf(f->want, sizeof f->want, "%s", f->sha256[0] ? f->sha256 : f->blob_id);
	f->hash_name = f->sha256[0] ? "sha256" : "git blob id";
	f->idhash = XXH3_64bits(f->id, strlen(f->id));
	snprintf(f->dir, sizeof f->dir, "chunks/%s-%u", f->id, s->chunk_size);
	if (asprintf(&f->apath, "%s/files/%s", s->root, f->id) < 0) {
		f->apath = NULL;
		return -ENOMEM;
	}
	return 0;
}

/* What the cache already holds of f: its assembled file, else its chunks
 * (names and sizes; the bytes are checksummed at first use). */
void rqr_scan_file(struct rq_rs *s, struct rfile *f)
{
	struct stat st;
	if (stat(f->apath, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size == f->size) {
		f->last_use = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
		f->assembled = 1;
		s->st.bytes_on_disk += f->size;
		rqr_chunk_drop_all(s->dfd, f->dir);   /* left by a crash after the rename */
		return;
	}
	int fd = openat(s->dfd, f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	if (fstatat(fd, "data", &st, AT_SYMLINK_NOFOLLOW) == 0)   /* its last chunk stored */
		f->last_use = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	struct dirent *e;
	while ((e = readdir(d))) {
		char *end;
		if (strstr(e->d_name, ".tmp.")) {        /* a writer's, or a crashed writer's */
			if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    time(NULL) - st.st_mtime > TMP_STALE_S)
				unlinkat(fd, e->d_name, 0);
			continue;
		}
		if (strlen(e->d_name) != 16)
			continue;
		unsigned long long c = strtoull(e->d_name, &end, 16);
		if (*end || c >= f->nchunks || f->st[c] != CH_ABSENT)
			continue;
		uint32_t len = rqr_chunk_len(s, f, c);
		if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
		    (uint64_t)st.st_size == rqr_sum_file_size(len)) {
			f->st[c] = CH_PRESENT;
			f->npresent++;
			s->st.bytes_on_disk += rqr_chunk_file_size(len);
		}
	}
	closedir(d);
}

int rqr_mkdir_p(const char *path)
{
	char buf[4096];
	if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
		return -ENAMETOOLONG;
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}
