/* file.h — opening and reading the files a user or a directory names,
 * without letting what is there hang or flood the reader.
 *
 * Whatever sits at a path may be a FIFO (open(2) blocks until a writer
 * comes), a device or a symlink to one (/dev/zero reads without end), or a
 * regular file far larger than the caller expects. Every open here is
 * O_NONBLOCK (a FIFO never blocks it; the flag is cleared once the file is
 * known to be regular), fstat'd, and refused unless it is a regular file;
 * a whole-file read stops at a stated cap, whatever st_size says (a file
 * may grow while it is read).
 *
 * Functions return 0 or a negative errno; with a struct rq_err they also
 * say, naming the path, what was wrong: its kind, or the cap. */
#ifndef RQ_BASE_FILE_H
#define RQ_BASE_FILE_H

#include <stddef.h>
#include <sys/types.h>

struct rq_err;

/* "a FIFO", "a directory", "a socket", "a device", "a regular file", ...:
 * what a mode is, for messages. */
const char *rq_file_kind(mode_t mode);

/* Opens path read-only (O_CLOEXEC) when it is a regular file (a symlink is
 * followed). Returns the descriptor, blocking as usual for reads, or -errno:
 * -EINVAL when path is not a regular file (err says what it is). *size
 * (may be NULL) gets the file's size. */
int rq_file_open(const char *path, size_t *size, struct rq_err *err);

/* Reads the regular file at path whole into a NUL-terminated malloc'd
 * buffer of *len bytes. At most cap bytes are ever read: -EFBIG when the
 * file holds more. Errors as rq_file_open's, -EIO for a read that fails. */
int rq_file_read(const char *path, size_t cap, char **out, size_t *len, struct rq_err *err);

/* "16 MiB", "512 KiB", "100 bytes": a cap in words, into buf. */
const char *rq_file_size_str(size_t bytes, char *buf, size_t cap);

#endif
