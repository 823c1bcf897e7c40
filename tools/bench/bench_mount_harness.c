/* bench_mount_harness.c — what every `requantfs bench mount` form stands on
 * (bench_mount.c, bench_mount_scheme.c, bench_mount_remote.c): this
 * executable run as a child (mount, umount), cache eviction, sequential
 * reads, the measured shard and the cold (a) measurement. It calls none of
 * them. */
#include "tools/bench/bench.h"
#include "tools/bench/bench_mount_int.h"
#include "cli/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/err.h"
#include "offline/export.h"
#include "plan/plan.h"

/* Runs this executable with args; output goes to the bench log. */
int bm_run_self(struct bm *b, char *const args[])
{
	pid_t p = fork();
	if (p < 0)
		return -errno;
	if (p == 0) {
		int fd = open(b->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execv("/proc/self/exe", args);
		_exit(127);
	}
	int st;
	if (waitpid(p, &st, 0) < 0)
		return -errno;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static int drop_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	if (flag != FTW_F)
		return 0;
	int fd = open(path, O_RDONLY);
	if (fd >= 0) {
		fdatasync(fd);
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
	return 0;
}

/* Evicts every file under path from the page cache. */
void bm_drop(const char *path)
{
	nftw(path, drop_one, 16, FTW_PHYS);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	remove(path);
	return 0;
}

void bm_rm_rf(const char *path)
{
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int bm_mount(struct bm *b)
{
	char ra[16], th[16];
	snprintf(ra, sizeof ra, "%u", b->readahead);
	snprintf(th, sizeof th, "%d", b->threads);
	mkdir(b->mnt, 0755);
	char *args[24] = {"requantfs", "mount", b->src, b->mnt, "--cache", b->cache,
	                  "--device", (char *)b->device, "--readahead", ra, "--log", b->log,
	                  "--passthrough", (char *)(b->pt ? b->pt : "auto")};
	int n = 14;
	args[n++] = b->scheme ? "--scheme" : "--calib";
	args[n++] = b->scheme ? (char *)b->scheme : b->cal;
	if (b->threads > 0) {
		args[n++] = "--threads";
		args[n++] = th;
	}
	args[n] = NULL;
	return bm_run_self(b, args);
}

void bm_umount(struct bm *b)
{
	char *args[] = {"requantfs", "umount", b->mnt, NULL};
	bm_run_self(b, args);
}

/* Sequential read of a file with CHUNK reads: seconds, -1 on error. */
double bm_read_seq(struct bm *b, const char *path, uint64_t *bytes)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	double t = bench_now();
	ssize_t r;
	uint64_t n = 0;
	while ((r = read(fd, b->buf, CHUNK)) > 0)
		n += (uint64_t)r;
	t = bench_now() - t;
	close(fd);
	if (bytes)
		*bytes = n;
	return r < 0 ? -1 : t;
}

void bm_keep_min(double *best, double t)
{
	if (t > 0 && t < *best)
		*best = t;
}

int bm_pick_shard(struct bm *b, const struct rq_plan *p, struct shard *sh)
{
	memset(sh, 0, sizeof *sh);
	sh->i = -1;
	for (size_t j = 0; j < p->njobs; j++)
		sh->qin += p->jobs[j].in_size;
	for (size_t i = 0; i < p->nfiles; i++) {
		uint64_t jb = 0;
		for (size_t k = 0; k < p->files[i].nseg; k++)
			if (p->files[i].seg[k].kind == RQ_SEG_JOB)
				jb += p->files[i].seg[k].len;
		if (jb > sh->qbytes) {
			sh->qbytes = jb;
			sh->i = (long)i;
		}
	}
	if (sh->i < 0)
		return cli_fail(1, "bench", "mount: the checkpoint has no requantized shard");
	sh->name = p->files[sh->i].name;
	sh->size = p->files[sh->i].size;
	sh->srcpath = p->srcs[p->files[sh->i].src].path;
	snprintf(sh->mpath, sizeof sh->mpath, "%s/%s", b->mnt, sh->name);
	snprintf(sh->epath, sizeof sh->epath, "%s/%s", b->exp, sh->name);
	return 0;
}

/* (a): export of everything and of the shard alone vs cold reads through a
 * fresh mount with an empty cache (quantizing as it goes). */
static double cpu_self(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
	       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* The daemon of the mount just made: the last "(daemon pid N" in the log
 * (what `mount` prints once it is ready), or -1. */
static int daemon_pid(struct bm *b)
{
	char tail[65536];
	int pid = -1, fd = open(b->log, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	off_t end = lseek(fd, 0, SEEK_END);
	off_t from = end > (off_t)sizeof tail - 1 ? end - (off_t)sizeof tail + 1 : 0;
	ssize_t n = pread(fd, tail, sizeof tail - 1, from);
	close(fd);
	if (n <= 0)
		return -1;
	tail[n] = 0;
	for (const char *c = tail; (c = strstr(c, "(daemon pid ")); c++)
		pid = atoi(c + 12);
	return pid > 0 ? pid : -1;
}

/* CPU seconds (user + system, all threads) process pid has used, or -1. */
static double cpu_of(int pid)
{
	char path[64], st[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	int fd = pid > 0 ? open(path, O_RDONLY | O_CLOEXEC) : -1;
	ssize_t n = fd >= 0 ? read(fd, st, sizeof st - 1) : -1;
	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return -1;
	st[n] = 0;
	const char *c = strrchr(st, ')');
	unsigned long ut, sy;
	if (!c || sscanf(c, ") %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &sy) != 2)
		return -1;
	return (double)(ut + sy) / (double)sysconf(_SC_CLK_TCK);
}

int bm_measure_cold(struct bm *b, struct rq_plan *p, struct rq_quantizer *q,
                    const struct shard *sh, struct bm_cold *r)
{
	struct rq_err err = {0};
	char eshard[4300];
	snprintf(eshard, sizeof eshard, "%s/export-shard", b->work);
	struct rq_plan one = *p;          /* the same plan restricted to that file */
	one.files = &p->files[sh->i];
	one.nfiles = 1;
	r->t_exp = r->t_exp1 = r->t_all = r->t_shard = r->c_exp = r->c_all = 1e30;
	for (int k = 0; k < b->reps; k++) {
		bm_rm_rf(b->exp);
		bm_drop(b->src);
		double c = cpu_self(), t = bench_now();
		if (rq_export(p, q, b->exp, NULL, NULL, &err))
			return cli_fail(1, "bench", "mount: export: %s", err.msg);
		bm_keep_min(&r->t_exp, bench_now() - t);
		bm_keep_min(&r->c_exp, cpu_self() - c);
		bm_rm_rf(eshard);
		bm_drop(b->src);
		t = bench_now();
		if (rq_export(&one, q, eshard, NULL, NULL, &err))
			return cli_fail(1, "bench", "mount: export of %s: %s", sh->name, err.msg);
		bm_keep_min(&r->t_exp1, bench_now() - t);
		bm_rm_rf(eshard);
		bm_rm_rf(b->cache);
		bm_drop(b->src);
		if (bm_mount(b))
			return cli_fail(1, "bench", "mount: mount failed (see %s)", b->log);
		int dpid = daemon_pid(b);
		double cd = cpu_of(dpid);
		c = cpu_self();
		t = bench_now();
		for (size_t i = 0; i < p->nfiles; i++) {
			char fp[8400];
			snprintf(fp, sizeof fp, "%s/%s", b->mnt, p->files[i].name);
			if (bm_read_seq(b, fp, NULL) < 0) {
				bm_umount(b);
				return cli_fail(1, "bench", "mount: reading %s failed", fp);
			}
		}
		bm_keep_min(&r->t_all, bench_now() - t);
		c = cpu_self() - c;
		double cd1 = cpu_of(dpid);
		if (cd >= 0 && cd1 >= 0)
			bm_keep_min(&r->c_all, c + cd1 - cd);
		bm_umount(b);
		bm_rm_rf(b->cache);
		bm_drop(b->src);
		bm_mount(b);
		bm_keep_min(&r->t_shard, bm_read_seq(b, sh->mpath, NULL));
		bm_umount(b);
	}
	return 0;
}
