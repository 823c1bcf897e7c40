/* file.c — bounded, non-blocking opens and reads of named files (file.h). */
#include "base/file.h"
#include "base/err.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *rq_file_kind(mode_t m)
{
	return S_ISREG(m) ? "a regular file" : S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" :
	       S_ISSOCK(m) ? "a socket" : S_ISCHR(m) ? "a character device" :
	       S_ISBLK(m) ? "a block device" : S_ISLNK(m) ? "a symbolic link" : "not a regular file";
}

const char *rq_file_size_str(size_t b, char *buf, size_t cap)
{
	if (b >= (1u << 20) && b % (1u << 20) == 0)
		snprintf(buf, cap, "%zu MiB", b >> 20);
	else if (b >= 1024 && b % 1024 == 0)
		snprintf(buf, cap, "%zu KiB", b >> 10);
	else
		snprintf(buf, cap, "%zu bytes", b);
	return buf;
}

int rq_file_open(const char *path, size_t *size, struct rq_err *err)
{
	/* O_NONBLOCK: a FIFO planted at the path must not hang the caller (a
	 * FIFO's open waits for a writer; with O_NONBLOCK it returns at once). */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		return rq_errf(err, -e, "%s: %s", path, strerror(e));
	}
	struct stat st;
	int fl, rc = 0;
	if (fstat(fd, &st) < 0)
		rc = rq_errf(err, -errno, "%s: stat: %s", path, strerror(errno));
	else if (!S_ISREG(st.st_mode))
		rc = rq_errf(err, -EINVAL, "%s is %s, not a regular file: refused (give the file "
		             "itself, or a link to it)", path, rq_file_kind(st.st_mode));
	else if ((fl = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0)
		rc = rq_errf(err, -errno, "%s: fcntl: %s", path, strerror(errno));
	if (rc) {
		close(fd);
		return rc;
	}
	if (size)
		*size = (size_t)st.st_size;
	return fd;
}

/* Reads fd to its end into b (grown as needed), never more than cap + 1
 * bytes: the one past cap tells "larger than cap" from "exactly cap". */
static int read_capped(int fd, size_t hint, size_t cap, char **out, size_t *len)
{
	size_t have = (hint < cap ? hint : cap) + 1, got = 0;
	char *b = malloc(have + 1);
	if (!b)
		return -ENOMEM;
	for (;;) {
		if (got == have) {
			if (have > cap) {   /* cap + 1 bytes read: more than cap */
				free(b);
				return -EFBIG;
			}
			size_t nh = have > cap / 2 ? cap + 1 : have * 2;
			char *nb = realloc(b, nh + 1);
			if (!nb) {
				free(b);
				return -ENOMEM;
			}
			b = nb;
			have = nh;
		}
		ssize_t r = read(fd, b + got, have - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = errno;
			free(b);
			return -e;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	if (got > cap) {
		free(b);
		return -EFBIG;
	}
	b[got] = 0;
	*out = b;
	*len = got;
	return 0;
}

int rq_file_read(const char *path, size_t cap, char **out, size_t *len, struct rq_err *err)
{
	size_t size = 0;
	int fd = rq_file_open(path, &size, err);
	if (fd < 0)
		return fd;
	char capbuf[32];
	int rc = size > cap ? -EFBIG : read_capped(fd, size, cap, out, len);
	close(fd);
	if (rc == -EFBIG)
		return rq_errf(err, rc, "%s is larger than %s, the most that is read of it: refused "
		               "(is it the right file?)", path, rq_file_size_str(cap, capbuf, sizeof capbuf));
	if (rc == -ENOMEM)
		return rq_errf(err, rc, "%s: out of memory reading it", path);
	if (rc)
		return rq_errf(err, rc, "%s: read: %s", path, strerror(-rc));
	return 0;
}
