/* test_mountinfo.c — fs/mountinfo.h: the kernel's octal escapes decoded
 * (\040 \011 \012 \134), and mounts found by their real path: bind mounts
 * (root) on directories named with a space, a tab, a backslash, a newline,
 * non-ASCII letters, and a literal "\040" that must not be decoded twice. */
#include "tests/tap.h"
#include "fs/mountinfo.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

static void unescape_is(const char *in, const char *want)
{
	char buf[256];
	snprintf(buf, sizeof buf, "%s", in);
	rq_mountinfo_unescape(buf);
	TAP_OK(!strcmp(buf, want), "unescape \"%s\"", in);
}

int main(void)
{
	unescape_is("/plain/path", "/plain/path");
	unescape_is("/a\\040b\\011c\\012d\\134e", "/a b\tc\nd\\e");
	unescape_is("\\134040", "\\040");              /* a literal backslash, then 040 */
	unescape_is("/x\\04", "/x\\04");                /* too short: kept */
	unescape_is("/x\\089", "/x\\089");              /* not octal: kept */
	unescape_is("/x\\000y", "/x\\000y");            /* NUL cannot be in a path: kept */
	unescape_is("tail\\", "tail\\");
	unescape_is("/\xc3\xa9\\040\xe6\xa8\xa1", "/\xc3\xa9 \xe6\xa8\xa1");

	struct rq_mountinfo mi;
	TAP_OK(rq_mountinfo_find("/", &mi) == 0 && mi.fstype[0] && strchr(mi.dev, ':'),
	       "/ is found (type %s, dev %s)", mi.fstype, mi.dev);
	TAP_OK(rq_mountinfo_find("/no/such/mount/point", &mi) == -ENOENT,
	       "a path where nothing is mounted: -ENOENT");

	if (geteuid() != 0) {
		printf("ok %d - # SKIP bind mounts on odd names need root\n", ++tap_n);
	} else {
		char tmpl[] = "/tmp/rq-mountinfo-XXXXXX";
		char *dir = mkdtemp(tmpl);
		static const char *names[] = {"a b\tc\\d\ne\xc3\xa9\xe6\xa8\xa1", "lit\\040eral",
		                              "trailing space ", "x\\134y"};
		char src[PATH_MAX], mnt[PATH_MAX];
		snprintf(src, sizeof src, "%s/src", dir ? dir : "/nonexistent");
		TAP_OK(dir && mkdir(src, 0755) == 0, "a temporary directory %s", dir ? dir : "");
		for (size_t i = 0; dir && i < sizeof names / sizeof names[0]; i++) {
			snprintf(mnt, sizeof mnt, "%s/%s", dir, names[i]);
			if (mkdir(mnt, 0755) || mount(src, mnt, NULL, MS_BIND, NULL)) {
				int e = errno;
				if (e == EPERM || e == EACCES)
					printf("ok %d - # SKIP bind mount refused (%s): no CAP_SYS_ADMIN here\n",
					       ++tap_n, strerror(e));
				else
					TAP_OK(0, "bind mount on name %zu: %s", i, strerror(e));
				rmdir(mnt);
				continue;
			}
			struct rq_mountinfo a = {0};
			int rc = rq_mountinfo_find(mnt, &a);
			struct stat st;
			char dev[32] = "";
			if (!stat(mnt, &st))
				snprintf(dev, sizeof dev, "%u:%u", major(st.st_dev), minor(st.st_dev));
			TAP_OK(rc == 0 && !strcmp(a.dev, dev), "the bind mount on name %zu is found by "
			       "its real path (dev %s, want %s)", i, a.dev, dev);
			char esc[PATH_MAX];          /* the field as mountinfo writes it does not match */
			size_t o = (size_t)snprintf(esc, sizeof esc, "%s/", dir);
			for (const char *c = names[i]; *c && o + 5 < sizeof esc; c++)
				o += strchr(" \t\n\\", *c) ? (size_t)sprintf(esc + o, "\\%03o", (unsigned char)*c)
				                           : (size_t)sprintf(esc + o, "%c", *c);
			TAP_OK(rq_mountinfo_find(esc, &a) == -ENOENT, "its escaped form (%s) matches "
			       "nothing", esc + strlen(dir) + 1);
			umount2(mnt, MNT_DETACH);
			rmdir(mnt);
		}
		if (dir) {
			rmdir(src);
			rmdir(dir);
		}
	}
	return tap_done();
}
