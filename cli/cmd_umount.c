/* cmd_umount.c — `requantfs umount MNT [--timeout SECONDS]` (split from
 * cmd_mount.c): asks the daemon to stop through fusermount3/umount and waits
 * for it to exit. */
#include "cli/cli.h"
#include "fs/mountinfo.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- umount ----------------------------------------------------------- */

static void umount_usage(FILE *f)
{
	fprintf(f,
	"usage: requantfs umount MNT [--timeout SECONDS]\n\n"
	"Unmounts a requantfs mount and waits (up to --timeout, default 30) for its\n"
	"daemon to exit. When files are still open under MNT it is detached instead:\n"
	"MNT is free at once and the daemon exits when the last file is closed.\n"
	"Also cleans up a dead mount whose daemon was killed.\n");
}

/* Finds MNT in /proc/self/mountinfo (its escapes decoded: a mount point
 * may hold spaces, tabs, newlines, backslashes): *fstype and the daemon's
 * pid (from fsname requantfs@<pid>, 0 if unknown). 0 when found, -ENOENT if
 * not. */
static int find_mount(const char *mnt, char *fstype, size_t len, int *pid)
{
	struct rq_mountinfo mi;
	int rc = rq_mountinfo_find(mnt, &mi);
	if (rc)
		return rc;
	snprintf(fstype, len, "%s", mi.fstype);
	*pid = 0;
	if (!strncmp(mi.source, "requantfs@", 10))
		*pid = atoi(mi.source + 10);
	return 0;
}

/* Gone, or a zombie nobody reaps (the daemon's parent exited long ago). */
static int pid_gone(int pid)
{
	if (kill(pid, 0) && errno == ESRCH)
		return 1;
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return 1;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	char *rp = strrchr(buf, ')');
	return rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
}

static int run_fusermount(const char *mnt, int lazy)
{
	pid_t p = fork();
	if (p < 0)
		return -errno;
	if (p == 0) {
		if (lazy)
			execlp("fusermount3", "fusermount3", "-u", "-z", "-q", mnt, (char *)NULL);
		else
			execlp("fusermount3", "fusermount3", "-u", "-q", mnt, (char *)NULL);
		_exit(127);
	}
	int st;
	if (waitpid(p, &st, 0) < 0)
		return -errno;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EBUSY;
}

int cmd_umount(int argc, char **argv)
{
	static const struct option lo[] = {{"timeout", required_argument, 0, 't'},
	                                   {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	double timeout = 30;
	int c;
	char *end;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		if (c == 'h') {
			umount_usage(stdout);
			return 0;
		}
		if (c == 't') {
			errno = 0;
			timeout = strtod(optarg, &end);
			if (errno || end == optarg || *end || timeout < 0)
				return cli_fail(2, "umount", "--timeout needs seconds (got '%s')", optarg);
			continue;
		}
		umount_usage(stderr);
		return cli_fail(2, "umount", "unknown or incomplete option '%s'", argv[optind - 1]);
	}
	if (argc - optind != 1) {
		umount_usage(stderr);
		return cli_fail(2, "umount", "needs MNT");
	}
	/* Not realpath(): a dead mount point cannot be resolved (ENOTCONN). */
	char *mnt = NULL;
	const char *a = argv[optind];
	char cwd[PATH_MAX];
	if (a[0] == '/' || !getcwd(cwd, sizeof cwd))
		mnt = strdup(a);
	else if (asprintf(&mnt, "%s/%s", cwd, a) < 0)
		mnt = NULL;
	if (!mnt)
		return cli_fail(1, "umount", "out of memory");
	size_t l = strlen(mnt);
	while (l > 1 && mnt[l - 1] == '/')
		mnt[--l] = 0;
	char *rp = realpath(mnt, NULL);
	if (rp) {
		free(mnt);
		mnt = rp;
	}
	char fstype[256];
	int pid = 0, rc;
	if (find_mount(mnt, fstype, sizeof fstype, &pid)) {
		rc = cli_fail(1, "umount", "%s is not mounted", mnt);
		goto out;
	}
	if (strcmp(fstype, "fuse.requantfs")) {
		rc = cli_fail(1, "umount", "%s is a %s mount, not requantfs: use umount(8)", mnt,
		              fstype);
		goto out;
	}
	int busy = 0;
	if (geteuid() == 0) {
		if (umount2(mnt, 0)) {
			if (errno != EBUSY) {
				rc = cli_fail(1, "umount", "%s: %s", mnt, strerror(errno));
				goto out;
			}
			busy = 1;
			if (umount2(mnt, MNT_DETACH)) {
				rc = cli_fail(1, "umount", "%s: %s", mnt, strerror(errno));
				goto out;
			}
		}
	} else if (run_fusermount(mnt, 0)) {
		busy = 1;
		if (run_fusermount(mnt, 1)) {
			rc = cli_fail(1, "umount", "fusermount3 -u %s failed (see its message)", mnt);
			goto out;
		}
	}
	rc = 0;
	if (busy) {
		printf("requantfs: %s detached; files are still open under it, the daemon exits "
		       "when the last one is closed\n", mnt);
		goto out;
	}
	if (pid > 0) {
		struct timespec t0, t;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (;;) {
			if (pid_gone(pid))
				break;
			clock_gettime(CLOCK_MONOTONIC, &t);
			if ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) * 1e-9 > timeout) {
				fprintf(stderr, "requantfs umount: %s unmounted, but daemon %d is still "
				        "running after %.0f s\n", mnt, pid, timeout);
				rc = 1;
				goto out;
			}
			usleep(20000);
		}
	}
	printf("requantfs: %s unmounted\n", mnt);
out:
	free(mnt);
	return rc;
}
