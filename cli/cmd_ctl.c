/* cmd_ctl.c — `requantfs warm` and `requantfs status`: clients of a mount's
 * hidden control directory (fs/mount.h, RQ_CTL_DIR). */
#include "cli/cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fs/mount.h"

static char *read_all(const char *path, int *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		*err = errno;
		return NULL;
	}
	size_t len = 0, cap = 8192;
	char *s = malloc(cap);
	for (;;) {
		if (!s) {
			*err = ENOMEM;
			break;
		}
		if (len + 1 >= cap) {
			char *v = realloc(s, cap *= 2);
			if (!v) {
				free(s);
				s = NULL;
				continue;
			}
			s = v;
		}
		ssize_t n = read(fd, s + len, cap - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			*err = errno;
			free(s);
			s = NULL;
			break;
		}
		if (n == 0) {
			s[len] = 0;
			break;
		}
		len += (size_t)n;
	}
	close(fd);
	return s;
}

/* Reads and parses MNT/.requantfs/status; prints why not (exit code in *rc). */
static cJSON *get_status(const char *cmd, const char *mnt, char **raw, int *rc)
{
	char path[4096];
	int e = 0;
	snprintf(path, sizeof path, "%s/%s/status", mnt, RQ_CTL_DIR);
	char *s = read_all(path, &e);
	if (!s) {
		if (e == ENOENT || e == ENOTDIR)
			*rc = cli_fail(1, cmd, "%s is not a requantfs mount (no %s/status)", mnt,
			               RQ_CTL_DIR);
		else if (e == ENOTCONN || e == ECONNABORTED)
			*rc = cli_fail(1, cmd, "%s: the daemon of this mount is gone; run `requantfs "
			               "umount %s` and mount again", mnt, mnt);
		else
			*rc = cli_fail(1, cmd, "%s: %s", path, strerror(e));
		return NULL;
	}
	cJSON *j = cJSON_Parse(s);
	if (!j) {
		*rc = cli_fail(1, cmd, "%s: not valid JSON", path);
		free(s);
		return NULL;
	}
	if (raw)
		*raw = s;
	else
		free(s);
	return j;
}

static double num(const cJSON *j, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
	return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static int flag(const cJSON *j, const char *k)
{
	return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, k));
}

static const char *str(const cJSON *j, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
	return cJSON_IsString(v) ? v->valuestring : "";
}


/* ---- status ------------------------------------------------------------ */

/* How the files are served, with passthrough on: the pending requantized
 * shards split by what they wait for, so that a status taken right after a
 * full read (every job cached, the shards queued to be materialized) does
 * not read like a failure. */
static void print_files(const cJSON *j)
{
	double pend = num(j, "files_pending"), jobs = num(j, "files_pending_jobs");
	double stuck = num(j, "files_pending_stuck"), soon = pend - jobs - stuck;
	printf("  files       %.0f pass through, %.0f copy path, %.0f requantized "
	       "shards pending, %.0f materialized\n", num(j, "files_passthrough"),
	       num(j, "files_copy"), pend, num(j, "files_materialized"));
	if (soon > 0)
		printf("              %.0f pending: every job cached, about to be materialized (written "
		       "whole into the cache once reads pause; new opens then pass through; `requantfs "
		       "warm` waits for it)\n", soon);
	if (jobs > 0)
		printf("              %.0f pending: waiting for their jobs (quantized when read, or run "
		       "`requantfs warm`); read meanwhile through the copy path\n", jobs);
	if (stuck > 0)
		printf("              %.0f pending: every job cached but not materialized (the mount's "
		       "log says why); read through the copy path\n", stuck);
	printf("  opens       %.0f passthrough, %.0f copy path\n", num(j, "opens_passthrough"),
	       num(j, "opens_copy"));
}

int cmd_status(int argc, char **argv)
{
	static const struct option lo[] = {{"json", no_argument, 0, 'j'},
	                                   {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	int json = 0, c, rc = 0;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		if (c == 'h') {
			printf("usage: requantfs status MNT [--json]\n\n"
			       "What a mount has cached, hits/misses, device, quantizer throughput,\n"
			       "and whether its SRC files are unchanged. --json prints the raw status.\n"
			       "An hf:// SRC shows as hf://ORG/NAME@<commit> (the revision pinned at\n"
			       "mount time), with its remote traffic and files not yet fetched.\n");
			return 0;
		}
		if (c == 'j') {
			json = 1;
			continue;
		}
		return cli_fail(2, "status", "unknown option '%s' (see --help)", argv[optind - 1]);
	}
	if (argc - optind != 1)
		return cli_fail(2, "status", "needs MNT (see --help)");
	const char *mnt = argv[optind];
	char *raw = NULL;
	cJSON *j = get_status("status", mnt, &raw, &rc);
	if (!j)
		return rc;
	if (json) {
		fputs(raw, stdout);
	} else {
		char a[32], b[32], d[32];
		printf("requantfs mount %s (daemon pid %.0f, up %.0f s)\n", str(j, "mountpoint"),
		       num(j, "pid"), num(j, "uptime_s"));
		printf("  source      %s\n", str(j, "src"));
		const cJSON *rj = cJSON_GetObjectItemCaseSensitive(j, "remote");
		if (rj) {     /* hf://: what the chunk store fetched and keeps */
			const cJSON *pend = cJSON_GetObjectItemCaseSensitive(j, "remote_pending");
			char fb[32], db[32];
			cli_human_bytes(num(rj, "fetched_bytes"), fb, sizeof fb);
			cli_human_bytes(num(rj, "bytes_on_disk"), db, sizeof db);
			printf("  remote      fetched %s in %.0f chunks, %.0f chunk hits, %.0f retries, "
			       "%.0f failures, %.0f read errors; %s of chunks on disk; %d files identical "
			       "to SRC not yet assembled (`requantfs warm` fetches them)\n", fb,
			       num(rj, "fetched_chunks"), num(rj, "cached_hits"), num(rj, "retries"),
			       num(rj, "failures"), num(rj, "read_errors"), db,
			       cJSON_IsArray(pend) ? cJSON_GetArraySize(pend) : 0);
			printf("  verify      %s (--remote-verify)\n", str(rj, "verify"));
		}
		const char *sch = str(j, "scheme");    /* "" from a daemon before --scheme */
		if (!sch[0] || (!strcmp(sch, "nvfp4") && str(j, "dropped_rule")[0]))
			printf("  scheme      Laguna fix (nvfp4, recipe %s v%.0f), dropped ignore rule %s; "
			       "its modules as %s\n", str(j, "recipe"), num(j, "recipe_version"),
			       str(j, "dropped_rule"), str(j, "rule_scheme")[0] ? str(j, "rule_scheme") : "nvfp4");
		else if (!strcmp(sch, "nvfp4"))        /* --scheme nvfp4: no rule dropped */
			printf("  scheme      nvfp4 (W4A4, llm-compressor oneshot's NVFP4 preset, "
			       "calibrated), recipe %s v%.0f\n", str(j, "recipe"), num(j, "recipe_version"));
		else
			printf("  scheme      %s (llm-compressor model_free_ptq), recipe %s v%.0f\n", sch,
			       str(j, "recipe"), num(j, "recipe_version"));
		if (str(j, "observer")[0]) {           /* "" from a daemon before --observer */
			printf("  observer    weights: %s", str(j, "observer"));
			if (num(j, "observer_version") > 0)
				printf(" v%.0f (its search on the device below when it is a GPU)",
				       num(j, "observer_version"));
			if (str(j, "calib_observer")[0])
				printf("; input scales (--calib): %s", str(j, "calib_observer"));
			printf("\n");
		}
		printf("  device      %s\n", str(j, "device"));
		if (str(j, "device_reason")[0])        /* why it is the CPU now, or idle */
			printf("              %s\n", str(j, "device_reason"));
		if (num(j, "gpu_jobs") + num(j, "gpu_failures") > 0) {
			char cb[32] = "unknown";
			if (num(j, "gpu_context_bytes") > 0)
				cli_human_bytes(num(j, "gpu_context_bytes"), cb, sizeof cb);
			printf("              %.0f jobs on the GPU, %.0f on the CPU, %.0f GPU failures "
			       "(%.0f watchdog); CUDA context %s beyond --gpu-mem\n", num(j, "gpu_jobs"),
			       num(j, "cpu_jobs"), num(j, "gpu_failures"), num(j, "gpu_watchdog"), cb);
		}
		printf("  modules     %.0f / %.0f cached (%.0f ready)\n", num(j, "modules_cached"),
		       num(j, "modules_total"), num(j, "modules_ready"));
		printf("  jobs        %.0f / %.0f cached, %.0f in memory only, %.0f running, %.0f "
		       "queued, %.0f run, %.0f failed\n", num(j, "jobs_cached"), num(j, "jobs_total"),
		       num(j, "jobs_in_memory"), num(j, "jobs_in_flight"), num(j, "jobs_queued"),
		       num(j, "jobs_run"), num(j, "jobs_failed"));
		cli_human_bytes(num(j, "cache_bytes"), a, sizeof a);
		printf("  cache       %s: %.0f entries, %s; %.0f hits, %.0f misses, %.0f corrupt, "
		       "%.0f puts failed\n", str(j, "cache_dir"), num(j, "cache_entries"), a,
		       num(j, "cache_hits"), num(j, "cache_misses"), num(j, "cache_corrupt"),
		       num(j, "cache_put_failed"));
		cli_human_bytes(num(j, "quant_in_bytes"), a, sizeof a);
		printf("  quantizer   %s of BF16 in %.2f s (%.0f MB/s)\n", a, num(j, "quant_seconds"),
		       num(j, "quant_mb_s"));
		cli_human_bytes(num(j, "read_bytes"), b, sizeof b);
		cli_human_bytes(num(j, "memory_bytes"), d, sizeof d);
		printf("  reads       %.0f (%s), %.0f parked on jobs; %s of outputs held in memory\n",
		       num(j, "reads"), b, num(j, "parked_reads"), d);
		if (flag(j, "passthrough"))
			print_files(j);
		else
			printf("  files       %.0f, all on the copy path: passthrough off (%s)\n",
			       num(j, "files"), str(j, "passthrough_why"));
		const cJSON *ch = cJSON_GetObjectItemCaseSensitive(j, "src_changed");
		if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "src_ok"))) {
			printf("  SRC         %.0f files, unchanged\n", num(j, "src_files"));
		} else {
			printf("  SRC         CHANGED under the mount (reads of dependent files fail; "
			       "remount):\n");
			const cJSON *e;
			cJSON_ArrayForEach(e, ch)
				printf("                %s\n", cJSON_IsString(e) ? e->valuestring : "?");
		}
	}
	cJSON_Delete(j);
	free(raw);
	return 0;
}

/* ---- warm --------------------------------------------------------------
 * Ctrl-C means stop. Worker threads ask the mount for each job (a read of
 * /.requantfs/jobs/<j>, answered when the job is in the cache) and read
 * the remote files whole; such a read may wait minutes (a stalled hub).
 * SIGINT and SIGTERM are blocked in every thread and taken by the main
 * thread (sigtimedwait) while it waits: it says what was done and exits at
 * once, and the exit kills the workers where they wait. That cannot leave
 * them in D state: the daemon answers an interrupted read EINTR at once
 * (FUSE_INTERRUPT, fs/mount_out.c), and page-cache reads of data files wait
 * killably. Why not a child to abandon, or the reads elsewhere: a reader
 * the kernel will not let go of pins the mount whoever it is; the fix
 * belongs in the daemon, for every reader (a killed `cat` as much). */

struct warm {
	const char *mnt;
	long njobs;
	atomic_long next;
	char **files;         /* remote SRC: files identical to SRC not assembled yet, */
	long nfiles;          /* read whole through the mount after the jobs */
	atomic_long next_file;
	atomic_long failed, done, files_done;
	atomic_int running;   /* worker threads not finished */
	struct cli_progress *prog;
	pthread_mutex_t mu;
	char first_err[512];
};

static void *warm_thread(void *arg)
{
	struct warm *w = arg;
	for (;;) {
		long j = atomic_fetch_add(&w->next, 1);
		if (j >= w->njobs)
			break;
		char path[4096];
		int e = 0;
		snprintf(path, sizeof path, "%s/%s/jobs/%ld", w->mnt, RQ_CTL_DIR, j);
		char *s = read_all(path, &e);
		long jj;
		int nmod;
		unsigned long long in;
		if (!s || sscanf(s, "%ld ok %d %llu", &jj, &nmod, &in) != 3 || jj != j) {
			atomic_fetch_add(&w->failed, 1);
			pthread_mutex_lock(&w->mu);
			if (!w->first_err[0])
				snprintf(w->first_err, sizeof w->first_err, "job %ld: %s", j,
				         s ? "unexpected answer" : strerror(e));
			pthread_mutex_unlock(&w->mu);
			free(s);
			if (e == ENOTCONN || e == ECONNABORTED || e == ENOENT)
				break;       /* the mount is gone: stop early */
			continue;
		}
		free(s);
		atomic_fetch_add(&w->done, 1);
		cli_progress_add(w->prog, (unsigned long long)nmod, in);
	}
	/* remote SRC: a file read whole through the mount is fetched whole, and
	 * the store assembles and verifies it (then it passes through) */
	char *buf = w->nfiles ? malloc(1 << 20) : NULL;
	for (;;) {
		long f = atomic_fetch_add(&w->next_file, 1);
		if (f >= w->nfiles || !buf)
			break;
		char path[4096];
		snprintf(path, sizeof path, "%s/%s", w->mnt, w->files[f]);
		int fd = open(path, O_RDONLY | O_CLOEXEC), e = 0;
		ssize_t r = 0;
		if (fd < 0)
			e = errno;
		while (fd >= 0 && (r = read(fd, buf, 1 << 20)) > 0)
			cli_progress_add(w->prog, 0, (unsigned long long)r);
		if (fd >= 0 && r < 0)
			e = errno;
		if (fd >= 0)
			close(fd);
		if (e) {
			atomic_fetch_add(&w->failed, 1);
			pthread_mutex_lock(&w->mu);
			if (!w->first_err[0])
				snprintf(w->first_err, sizeof w->first_err, "%s: %s", w->files[f],
				         strerror(e));
			pthread_mutex_unlock(&w->mu);
		} else {
			atomic_fetch_add(&w->files_done, 1);
			cli_progress_add(w->prog, 1, 0);
		}
	}
	free(buf);
	atomic_fetch_sub(&w->running, 1);
	return NULL;
}

static double since(const struct timespec *t0)
{
	struct timespec t1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (t1.tv_sec - t0->tv_sec) + (t1.tv_nsec - t0->tv_nsec) * 1e-9;
}

/* SIGINT/SIGTERM: says what was done and exits now (128 + sig), the worker
 * threads killed where they wait (see the top of this part). */
_Noreturn static void warm_stopped(struct warm *w, int sig, const struct timespec *t0,
                                   const char *doing)
{
	cli_progress_stop(w->prog);
	fprintf(stderr, "requantfs warm: stopped by %s after %.1f s, %s: %ld of %ld jobs ready",
	        sig == SIGINT ? "SIGINT" : "SIGTERM", since(t0), doing, (long)atomic_load(&w->done),
	        w->njobs);
	if (w->nfiles)
		fprintf(stderr, ", %ld of %ld remote files fetched", (long)atomic_load(&w->files_done),
		        w->nfiles);
	fprintf(stderr, "; jobs already started finish in the mount. Run `requantfs warm %s` "
	        "again to go on (what is ready is only checked).\n", w->mnt);
	fflush(stdout);
	fflush(stderr);
	_exit(128 + sig);
}

/* Waits up to ms for one of the signals in stop: the signal, or 0. */
static int stop_signal(const sigset_t *stop, long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	int sig = sigtimedwait(stop, NULL, &ts);
	return sig > 0 ? sig : 0;
}

/* Remote SRC (status "remote_pending"): the files to read whole; their
 * bytes. */
static unsigned long long remote_files(const cJSON *st, const char *mnt, struct warm *w)
{
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(st, "remote_pending"), *e;
	unsigned long long bytes = 0;
	long n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : 0;
	if (!n || !(w->files = calloc((size_t)n, sizeof *w->files)))
		return 0;
	cJSON_ArrayForEach(e, a) {
		char path[4096];
		struct stat sb;
		if (!cJSON_IsString(e) || !(w->files[w->nfiles] = strdup(e->valuestring)))
			continue;
		snprintf(path, sizeof path, "%s/%s", mnt, e->valuestring);
		if (!stat(path, &sb))
			bytes += (unsigned long long)sb.st_size;
		w->nfiles++;
	}
	return bytes;
}

int cmd_warm(int argc, char **argv)
{
	static const struct option lo[] = {{"parallel", required_argument, 0, 'p'},
	                                   {"progress", no_argument, 0, 'P'},
	                                   {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	int c, rc = 0, par = 8, force = 0;
	char *end;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		if (c == 'h') {
			printf("usage: requantfs warm MNT [--parallel N] [--progress]\n\n"
			       "Quantizes every module of a mount now (cache hits are only checked),\n"
			       "with a progress bar; exits 0 when every job is in the cache.\n"
			       "  --parallel N   jobs requested at once (default 8)\n"
			       "  --progress     draw the progress bar even when stderr is not a terminal\n");
			return 0;
		}
		if (c == 'p') {
			errno = 0;
			long v = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || v < 1 || v > 256)
				return cli_fail(2, "warm", "--parallel needs 1..256 (got '%s')", optarg);
			par = (int)v;
			continue;
		}
		if (c == 'P') {
			force = 1;
			continue;
		}
		return cli_fail(2, "warm", "unknown or incomplete option '%s' (see --help)",
		                argv[optind - 1]);
	}
	if (argc - optind != 1)
		return cli_fail(2, "warm", "needs MNT (see --help)");
	const char *mnt = argv[optind];
	cJSON *st = get_status("warm", mnt, NULL, &rc);
	if (!st)
		return rc;
	struct warm w = {.mnt = mnt, .njobs = (long)num(st, "jobs_total")};
	pthread_mutex_init(&w.mu, NULL);
	unsigned long long mods = (unsigned long long)num(st, "modules_total");
	unsigned long long bytes = (unsigned long long)num(st, "in_bytes_total");
	int remote = cJSON_GetObjectItemCaseSensitive(st, "remote") != NULL;
	double fetched0 = 0;
	if (remote) {     /* one bar: the modules and the remote files; bytes fetched */
		bytes += remote_files(st, mnt, &w);
		mods += (unsigned long long)w.nfiles;
		fetched0 = num(cJSON_GetObjectItemCaseSensitive(st, "remote"), "fetched_bytes");
	}
	cJSON_Delete(st);
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	sigset_t stop;          /* taken by this thread alone, the workers inherit the mask */
	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);
	w.prog = cli_progress_start("warm", mods, bytes, force);
	pthread_t th[256];
	int nt = 0;
	for (int i = 0; i < par && i < w.njobs + w.nfiles; i++) {
		atomic_fetch_add(&w.running, 1);
		if (!pthread_create(&th[nt], NULL, warm_thread, &w))
			nt++;
		else
			atomic_fetch_sub(&w.running, 1);
	}
	for (int sig; atomic_load(&w.running) > 0;)
		if ((sig = stop_signal(&stop, 50)))
			warm_stopped(&w, sig, &t0, "waiting for jobs and files");
	for (int i = 0; i < nt; i++)
		pthread_join(th[i], NULL);
	cli_progress_end(w.prog);
	w.prog = NULL;
	double dt = since(&t0);
	for (long f = 0; f < w.nfiles; f++)
		free(w.files[f]);
	free(w.files);
	if (nt == 0 && w.njobs + w.nfiles > 0)
		return cli_fail(1, "warm", "cannot start threads");
	if (atomic_load(&w.failed))
		return cli_fail(1, "warm", "%ld of %ld jobs and files failed (first: %s); see the "
		                "mount's log", (long)atomic_load(&w.failed), w.njobs + w.nfiles,
		                w.first_err);
	st = get_status("warm", mnt, NULL, &rc);
	if (!st)
		return rc;
	/* With passthrough, each requantized shard is then written whole into
	 * the cache (materialized) so that later opens pass through: wait. So
	 * does an hf:// mount verifying whole files (--remote-verify file), with
	 * passthrough or not: once written, the SRC file it needed is dropped. */
	const cJSON *rj = cJSON_GetObjectItemCaseSensitive(st, "remote");
	int rverify = rj && !strcmp(str(rj, "verify"), "file");
	if ((flag(st, "passthrough") || rverify) && (num(st, "files_pending") > 0 ||
	                                             num(st, "files_materializing") > 0)) {
		fprintf(stderr, "requantfs warm: materializing %.0f requantized shards%s...\n",
		        num(st, "files_pending") + num(st, "files_materializing"),
		        flag(st, "passthrough") ? " for passthrough" : "");
		double idle = 0;
		while ((num(st, "files_pending") > 0 && idle < 3.0) ||
		       num(st, "files_materializing") > 0) {
			/* pending with nothing queued for 3 s: a shard that cannot be
			 * materialized now (its log line says why) */
			idle = num(st, "files_materializing") > 0 ? 0 : idle + 0.1;
			cJSON_Delete(st);
			int sig = stop_signal(&stop, 100);
			if (sig)
				warm_stopped(&w, sig, &t0, "waiting for shards to be materialized");
			if (!(st = get_status("warm", mnt, NULL, &rc)))
				return rc;
		}
	}
	if (remote) {
		const cJSON *r = cJSON_GetObjectItemCaseSensitive(st, "remote");
		const cJSON *pend = cJSON_GetObjectItemCaseSensitive(st, "remote_pending");
		char fb[32];
		cli_human_bytes(num(r, "fetched_bytes") - fetched0, fb, sizeof fb);
		printf("requantfs warm: fetched %s from %s (%.0f MB/s); %d remote files not "
		       "assembled\n", fb, str(st, "src"),
		       dt > 0 ? (num(r, "fetched_bytes") - fetched0) / dt / 1e6 : 0.0,
		       cJSON_IsArray(pend) ? cJSON_GetArraySize(pend) : -1);
	}
	double cached = num(st, "jobs_cached"), inmem = num(st, "jobs_in_memory");
	double f_pt = num(st, "files_passthrough"), f_pend = num(st, "files_pending");
	char a[32];
	cli_human_bytes(num(st, "quant_in_bytes"), a, sizeof a);
	printf("requantfs warm: %ld jobs (%llu modules) ready in %.1f s; %.0f in the cache, %.0f "
	       "in memory only; quantized %s this mount at %.0f MB/s\n", w.njobs, mods, dt, cached,
	       inmem, a, num(st, "quant_mb_s"));
	if (flag(st, "passthrough"))
		printf("requantfs warm: %.0f of %.0f files pass through to a file on disk (%.0f "
		       "shards materialized)%s\n", f_pt, num(st, "files"),
		       num(st, "files_materialized"), f_pend > 0 ? "; some shards could not be "
		       "materialized (see the mount's log): they use the copy path" : "");
	else
		printf("requantfs warm: passthrough off (%s): every file uses the copy path\n",
		       str(st, "passthrough_why"));
	cJSON_Delete(st);
	if (cached < (double)w.njobs)
		return cli_fail(1, "warm", "%.0f jobs could not be stored in the cache (full? see "
		                "the mount's log); they are served from memory", w.njobs - cached);
	return 0;
}
