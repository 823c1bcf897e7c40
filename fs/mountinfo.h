/* mountinfo.h — finding a mount in /proc/self/mountinfo by its path.
 *
 * The kernel writes a mount point, a source and a type with four characters
 * escaped as octal: space \040, tab \011, newline \012, backslash \134
 * (fs/proc_namespace.c, mangle()). A path compared with a raw field would
 * never match a mount point that holds one of them; these functions decode
 * first. */
#ifndef RQ_FS_MOUNTINFO_H
#define RQ_FS_MOUNTINFO_H

#include <stddef.h>

/* The topmost mount at one path. */
struct rq_mountinfo {
	char dev[32];          /* "major:minor" of the mount */
	char fstype[256];      /* e.g. "fuse.requantfs" (decoded) */
	char source[4096];     /* the fsname, e.g. "requantfs@1234" (decoded, maybe cut) */
};

/* Decodes the \ooo escapes of one mountinfo field in place; any other
 * backslash is kept as it is. */
void rq_mountinfo_unescape(char *s);

/* The last (topmost) mount whose decoded mount point equals mnt exactly
 * (an absolute path without a trailing '/', as realpath gives): 0 and *out,
 * -ENOENT when nothing is mounted there, -errno when mountinfo cannot be
 * read, -ENOMEM. */
int rq_mountinfo_find(const char *mnt, struct rq_mountinfo *out);

#endif
