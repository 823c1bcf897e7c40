/* bench_mount_remote.c — `requantfs bench mount --remote` (issue 20): an
 * hf:// mount served by a local HTTP server with the hub's layout (model API
 * + resolve with ranges; a small Python ThreadingHTTPServer started here,
 * sendfile for bodies), on a --real-dims mkckpt checkpoint, against
 * baselines measured in the same run on the same server:
 *
 *   cold  every file read through a fresh hf:// mount with an empty cache
 *         (fetching and quantizing as it goes; --remote-verify file, the
 *         default, and none printed next to it) vs `curl` of every SRC file
 *         from the same server into a file in the work directory (the
 *         cache's filesystem: the mount stores what it fetches, so curl
 *         does too) (bar: curl seconds / mount seconds >= 0.9); curl to
 *         /dev/null is printed as a reference. Mount and curl take turns
 *         going first, rep by rep. Each pass's CPU seconds are printed
 *         (the daemon's during the reads, from /proc/<status pid>/stat;
 *         curl's, as its children): on a small machine cold reads are
 *         CPU-bound, and the figures show whose CPU it was.
 *   warm  after `warm`, one mount that stays mounted (as a served model's
 *         does): every file read through it vs the same bytes (`export` of
 *         the local copy) read natively, 4 x --reps passes; in each, every
 *         file is read through the mount and natively back to back, which
 *         goes first alternating file by file and pass by pass, every page
 *         cache of both sides evicted before each read (the cache
 *         directory's files, the export's, the mount's own); each side's
 *         figure is the sum over files of each file's fastest read (bar:
 *         >= 0.95); then the same with the page caches warm. The reader's
 *         CPU time (least per file, summed) is printed too: on a loaded
 *         machine it shows the cost of each side without the waiting.
 *         The first read after mounting is timed apart (no bar): it waits
 *         for the verification of the materialized shards (hashed whole
 *         once per mount, fs/mount_mat.c), which a native read has no
 *         counterpart of. Before the pairs the mount must have settled
 *         (status: nothing pending or materializing), and the FUSE reads
 *         reaching the daemon during the timed passes are counted (status
 *         "reads"): with every shard passing through, only the rewritten
 *         small files (config, index) are read by the daemon.
 *
 * Why not remount before each warm read (as this bench once did): a fresh
 * mount verifies its materialized shards in the background at once, and the
 * reads raced that: a shard verified before the page caches were evicted
 * was read from disk, one verified meanwhile from the page cache the
 * verification had filled, one not yet verified waited for the hash. The
 * ratio measured that race (0.86 to 1.51 on the same files), not reads.
 * The mount is this executable's own `mount`. */
#include "tools/bench/bench.h"
#include "tools/bench/bench_mount_int.h"
#include "cli/cli.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fs/mount.h"

#define COMMIT "b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0"
#define REPO "bench/ckpt"

/* argv: DIR COMMIT REPO. Prints the port, then serves until killed. */
static const char server_py[] =
"import hashlib, http.server, json, os, re, sys, urllib.parse\n"
"d, commit, repo = sys.argv[1], sys.argv[2], sys.argv[3]\n"
"def sha(p):\n"
"    h = hashlib.sha256()\n"
"    with open(p, 'rb') as f:\n"
"        for b in iter(lambda: f.read(1 << 22), b''): h.update(b)\n"
"    return h.hexdigest()\n"
"sib = []\n"
"for n in sorted(os.listdir(d)):\n"
"    p = os.path.join(d, n); e = {'rfilename': n, 'size': os.path.getsize(p)}\n"
"    if n.endswith('.safetensors'): e['lfs'] = {'sha256': sha(p), 'size': e['size']}\n"
"    sib.append(e)\n"
"info = json.dumps({'id': repo, 'sha': commit, 'siblings': sib}).encode()\n"
"class H(http.server.BaseHTTPRequestHandler):\n"
"    protocol_version = 'HTTP/1.1'\n"
"    def log_message(self, *a): pass\n"
"    def do_GET(self):\n"
"        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)\n"
"        if path.startswith('/api/models/'):\n"
"            self.send_response(200); self.send_header('Content-Length', str(len(info)))\n"
"            self.end_headers(); self.wfile.write(info); return\n"
"        m = re.fullmatch(r'/[^/]+/[^/]+/resolve/[^/]+/(.+)', path)\n"
"        p = os.path.join(d, m[1]) if m else ''\n"
"        if not m or '/' in m[1] or not os.path.isfile(p):\n"
"            self.send_response(404); self.send_header('Content-Length', '0')\n"
"            self.end_headers(); return\n"
"        size = os.path.getsize(p); a, b = 0, size - 1\n"
"        r = re.fullmatch(r'bytes=(\\d+)-(\\d*)', self.headers.get('Range', ''))\n"
"        if r: a, b = int(r[1]), min(int(r[2]) if r[2] else size - 1, size - 1)\n"
"        self.send_response(206 if r else 200)\n"
"        if r: self.send_header('Content-Range', f'bytes {a}-{b}/{size}')\n"
"        self.send_header('Content-Length', str(b - a + 1)); self.end_headers()\n"
"        self.wfile.flush()\n"
"        with open(p, 'rb') as f:\n"
"            off, n = a, b - a + 1\n"
"            while n > 0:\n"
"                k = os.sendfile(self.connection.fileno(), f.fileno(), off, n)\n"
"                if k <= 0: break\n"
"                off += k; n -= k\n"
"s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H); s.daemon_threads = True\n"
"print(s.server_address[1], flush=True)\n"
"s.serve_forever()\n";

struct rsrv {
	pid_t pid;
	int port;
	char ep[64];
};

static int server_start(struct bm *b, struct rsrv *s)
{
	int pfd[2];
	if (pipe(pfd))
		return -errno;
	pid_t p = fork();
	if (p < 0)
		return -errno;
	if (p == 0) {
		dup2(pfd[1], 1);
		close(pfd[0]);
		close(pfd[1]);
		execlp("python3", "python3", "-c", server_py, b->src, COMMIT, REPO, (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	char line[32] = "";
	FILE *f = fdopen(pfd[0], "r");
	if (!f || !fgets(line, sizeof line, f) || (s->port = atoi(line)) <= 0) {
		if (f)
			fclose(f);
		kill(p, SIGKILL);
		waitpid(p, NULL, 0);
		return -EIO;
	}
	fclose(f);
	s->pid = p;
	snprintf(s->ep, sizeof s->ep, "http://127.0.0.1:%d", s->port);
	return 0;
}

static void server_stop(struct rsrv *s)
{
	if (s->pid > 0) {
		kill(s->pid, SIGTERM);
		waitpid(s->pid, NULL, 0);
	}
}

/* The regular files of dir, sorted; NULL-terminated, malloc'd. */
static char **list_files(const char *dir, int *n)
{
	struct dirent **de;
	int k = scandir(dir, &de, NULL, alphasort);
	char **v = calloc(k > 0 ? (size_t)k + 1 : 1, sizeof *v);
	*n = 0;
	for (int i = 0; i < k; i++) {
		if (v && de[i]->d_name[0] != '.')
			v[(*n)++] = strdup(de[i]->d_name);
		free(de[i]);
	}
	if (k >= 0)
		free(de);
	return v;
}

static void free_list(char **v)
{
	for (int i = 0; v && v[i]; i++)
		free(v[i]);
	free(v);
}

/* curl of every file, one after the other, each into a file under dir (the
 * work directory: the cache's filesystem, since the mount stores what it
 * fetches too; the files are removed after), or to /dev/null when dir is
 * NULL (a reference only). Seconds, or -1. */
/* CPU seconds (user + system) of the children waited for so far. */
static double children_cpu(void)
{
	struct rusage ru;
	if (getrusage(RUSAGE_CHILDREN, &ru))
		return 0;
	return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
	       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static double curl_all(struct bm *b, struct rsrv *s, char **names, const char *dir,
                       double *cpu)
{
	if (dir)
		mkdir(dir, 0755);
	double c0 = children_cpu(), t = bench_now();
	for (int i = 0; names[i]; i++) {
		char url[8400], out[8400] = "/dev/null";
		snprintf(url, sizeof url, "%s/%s/resolve/%s/%s", s->ep, REPO, COMMIT, names[i]);
		if (dir)
			snprintf(out, sizeof out, "%s/%s", dir, names[i]);
		char *args[] = {"curl", "-sf", "-o", out, url, NULL};
		pid_t p = fork();
		if (p == 0) {
			execvp("curl", args);
			_exit(127);
		}
		int st = 0;
		if (p < 0 || waitpid(p, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
			return -1;
	}
	t = bench_now() - t;
	*cpu = children_cpu() - c0;
	if (dir)
		bm_rm_rf(dir);
	return t;
}

/* Every file of dir read sequentially: seconds (bytes into *bytes), or -1. */
static double read_all(struct bm *b, const char *dir, char **names, uint64_t *bytes)
{
	double t = 0;
	*bytes = 0;
	for (int i = 0; names[i]; i++) {
		char path[8400];
		uint64_t n = 0;
		snprintf(path, sizeof path, "%s/%s", dir, names[i]);
		double d = bm_read_seq(b, path, &n);
		if (d < 0)
			return -1;
		t += d;
		*bytes += n;
	}
	return t;
}

static int mount_hf(struct bm *b, struct rsrv *s, double *secs, const char *verify)
{
	char ra[16], spec[128];
	snprintf(ra, sizeof ra, "%u", b->readahead);
	snprintf(spec, sizeof spec, "hf://%s@%s", REPO, COMMIT);
	mkdir(b->mnt, 0755);
	char *args[] = {"requantfs", "mount", spec, b->mnt, "--endpoint", s->ep, "--cache", b->cache,
	                "--calib", b->cal, "--device", (char *)b->device, "--readahead", ra,
	                "--remote-verify", (char *)verify, "--log", b->log, NULL};
	double t = bench_now();
	int rc = bm_run_self(b, args);
	if (secs)
		*secs = bench_now() - t;
	return rc;
}

/* What the mount's status says about how it serves its files. */
struct wst {
	long long reads, read_bytes;          /* FUSE reads the daemon answered, their bytes */
	long long pt, copy, pending, mating;  /* files: passthrough, copy path, pending, materializing */
	long long opens_pt, opens_copy;
	long long pid;                        /* the daemon's */
};

static long long jnum(const cJSON *j, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
	return cJSON_IsNumber(v) ? (long long)v->valuedouble : -1;
}

/* MNT/.requantfs/status into *w: 0, or -1. */
static int mnt_status(struct bm *b, struct wst *w)
{
	char path[4400], *txt = malloc(1 << 20);
	snprintf(path, sizeof path, "%s/%s/status", b->mnt, RQ_CTL_DIR);
	FILE *f = txt ? fopen(path, "re") : NULL;
	size_t n = f ? fread(txt, 1, (1 << 20) - 1, f) : 0;
	if (f)
		fclose(f);
	cJSON *j = NULL;
	if (n) {
		txt[n] = 0;
		j = cJSON_Parse(txt);
	}
	free(txt);
	if (!j)
		return -1;
	w->reads = jnum(j, "reads");
	w->pid = jnum(j, "pid");
	w->read_bytes = jnum(j, "read_bytes");
	w->pt = jnum(j, "files_passthrough");
	w->copy = jnum(j, "files_copy");
	w->pending = jnum(j, "files_pending");
	w->mating = jnum(j, "files_materializing");
	w->opens_pt = jnum(j, "opens_passthrough");
	w->opens_copy = jnum(j, "opens_copy");
	cJSON_Delete(j);
	return 0;
}

/* Waits (60 s at most) until no file of the mount is pending or being
 * materialized or verified: 0, or -1 (the last status in *w either way). */
static int settle(struct bm *b, struct wst *w)
{
	for (int k = 0; k < 600; k++) {
		if (mnt_status(b, w) == 0 && w->pending == 0 && w->mating == 0)
			return 0;
		nanosleep(&(struct timespec){.tv_nsec = 100000000}, NULL);
	}
	return -1;
}

/* Every page cache a warm read of either side could be served from: the
 * cache directory's files (a passthrough file's pages are its backing
 * file's), the export's, and the mount's own (the copy path's files). */
static void drop_both(struct bm *b)
{
	sync();
	bm_drop(b->cache);
	bm_drop(b->exp);
	bm_drop(b->mnt);
}

static double load1(void)
{
	double la[3] = {0};
	return getloadavg(la, 3) > 0 ? la[0] : -1;
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

#define MAX_PAIRS 64
#define MAX_FILES 4096

static double thread_cpu(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* What warm_pairs measured, seconds: [0] the mount, [1] native. */
struct wpairs {
	double best[2];           /* sum over files of each file's fastest read */
	double cpu[2];            /* sum over files of each file's least reader CPU */
	double ratio[MAX_PAIRS];  /* each pair's native / mount (whole passes), sorted */
	double la0, la1;          /* load average before and after */
};

/* Warm pairs: npairs passes over every file, each file read through the
 * mount and natively back to back, which goes first alternating file by
 * file and pass by pass, page caches dropped before each read when drop.
 * Each file's fastest read per side is kept (a whole pass undisturbed by
 * the other work of a loaded machine is rare; one file's read often is).
 * -1 if a read failed. */
static int warm_pairs(struct bm *b, char **names, int npairs, int drop, struct wpairs *w)
{
	static double best[2][MAX_FILES], cpu[2][MAX_FILES];
	int nf = 0;
	while (names[nf] && nf < MAX_FILES)
		nf++;
	for (int i = 0; i < nf; i++)
		best[0][i] = best[1][i] = cpu[0][i] = cpu[1][i] = 1e30;
	w->la0 = load1();
	for (int r = 0; r < npairs; r++) {
		double pass[2] = {0, 0};
		for (int i = 0; i < nf; i++) {
			for (int k = 0; k < 2; k++) {
				int nat = (r + i + k) % 2;
				char path[8400];
				snprintf(path, sizeof path, "%s/%s", nat ? b->exp : b->mnt, names[i]);
				if (drop)
					drop_both(b);
				double c = thread_cpu(), t = bm_read_seq(b, path, NULL);
				c = thread_cpu() - c;
				if (t < 0)
					return -1;
				pass[nat] += t;
				bm_keep_min(&best[nat][i], t);
				bm_keep_min(&cpu[nat][i], c);
			}
		}
		w->ratio[r] = pass[1] / pass[0];
	}
	w->la1 = load1();
	for (int k = 0; k < 2; k++) {
		w->best[k] = w->cpu[k] = 0;
		for (int i = 0; i < nf; i++) {
			w->best[k] += best[k][i];
			w->cpu[k] += cpu[k][i] < 1e30 ? cpu[k][i] : 0;
		}
	}
	qsort(w->ratio, (size_t)npairs, sizeof *w->ratio, cmp_dbl);
	return 0;
}

/* CPU seconds (user + system) process pid has used, or -1. */
static double proc_cpu(long long pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%lld/stat", pid);
	FILE *f = pid > 0 ? fopen(path, "re") : NULL;
	size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
	if (f)
		fclose(f);
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	unsigned long long ut, st;
	/* after the name: state ppid pgrp session tty tpgid flags minflt cminflt
	 * majflt cmajflt utime stime */
	if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
	                 &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* One cold pass: a fresh hf:// mount (--remote-verify VERIFY) with an empty
 * cache, every file read; seconds into *t_mount (mount), *t_read (reads)
 * and *cpu (the daemon's CPU during the reads, -1 unknown). 0, or -1. */
static int cold_pass(struct bm *b, struct rsrv *s, const char *verify, char **names,
                     double *t_mount, double *t_read, uint64_t *bytes, double *cpu)
{
	bm_rm_rf(b->cache);
	sync();
	bm_drop(b->src);
	if (mount_hf(b, s, t_mount, verify))
		return -1;
	struct wst w = {0};
	double c0 = mnt_status(b, &w) ? -1 : proc_cpu(w.pid);
	*t_read = read_all(b, b->mnt, names, bytes);
	double c1 = c0 >= 0 ? proc_cpu(w.pid) : -1;
	*cpu = c1 >= 0 ? c1 - c0 : -1;
	bm_umount(b);
	return *t_read < 0 ? -1 : 0;
}

int bench_mount_remote(struct bm *b, int experts)
{
	struct stat st;
	if (stat(b->src, &st) || stat(b->cal, &st)) {
		char ex[16];
		snprintf(ex, sizeof ex, "%d", experts ? experts : 2);
		char *args[] = {"requantfs", "mkckpt", b->src, "--calib-out", b->cal, "--real-dims",
		                "--experts", ex, NULL};
		fprintf(stderr, "bench mount --remote: making a --real-dims checkpoint (%s experts) "
		        "in %s\n", ex, b->src);
		if (bm_run_self(b, args))
			return cli_fail(1, "bench", "mount --remote: mkckpt failed (see %s)", b->log);
	}
	if (stat(b->exp, &st)) {
		char *args[] = {"requantfs", "export", b->src, b->exp, "--calib", b->cal, "--no-cache",
		                "--quiet", "--device", (char *)b->device, NULL};
		if (bm_run_self(b, args))
			return cli_fail(1, "bench", "mount --remote: export failed (see %s)", b->log);
	}
	struct rsrv s = {0};
	int n_src = 0, n_mnt = 0, rc = 1;
	char **src_names = list_files(b->src, &n_src), **exp_names = list_files(b->exp, &n_mnt);
	if (server_start(b, &s)) {
		cli_fail(1, "bench", "mount --remote: cannot start the HTTP server (python3)");
		goto out;
	}
	uint64_t src_bytes = 0, mnt_bytes = 0, nat_bytes = 0;
	for (int i = 0; src_names[i]; i++) {
		char p[8400];
		snprintf(p, sizeof p, "%s/%s", b->src, src_names[i]);
		if (!stat(p, &st))
			src_bytes += (uint64_t)st.st_size;
	}
	printf("bench mount --remote: %s served by %s as hf://%s@%.10s: %d files, %.2f GB\n",
	       b->src, s.ep, REPO, COMMIT, n_src, src_bytes / 1e9);
	char curl_dir[4300];
	snprintf(curl_dir, sizeof curl_dir, "%s/curl", b->work);
	double t_null = 1e30, t_curl = 1e30, t_cold = 1e30, t_mnt = 1e30;
	double t_lazy = 1e30;             /* cold with --remote-verify none */
	double la_cold0 = load1();
	char passes[3][512] = {"", "", ""};   /* each cold pass, s: mount, curl to files, none */
	char cpus[3][512] = {"", "", ""};     /* the CPU s of each: the daemon's, curl's, the daemon's */
	for (int r = 0; r < b->reps; r++) {
		/* each timed phase starts with nothing dirty: no phase pays for
		 * the writeback of what the one before stored; the mount and the
		 * curl passes take turns going first (the first pass of a rep
		 * ran slower: 2.9 s, then 1.1-1.9 s for the same curl) */
		for (int k = 0; k < 4; k++) {
			/* 0 the mount, 1 curl to files, 2 to /dev/null, 3 the mount
			 * with --remote-verify none */
			int what = (k + r) % 4;
			if (what == 3) {
				double tm, tr, cpu;
				uint64_t lb;
				if (!cold_pass(b, &s, "none", exp_names, &tm, &tr, &lb, &cpu)) {
					bm_keep_min(&t_lazy, tr);
					size_t l = strlen(passes[2]);
					snprintf(passes[2] + l, sizeof passes[2] - l, " %.2f", tr);
					l = strlen(cpus[2]);
					snprintf(cpus[2] + l, sizeof cpus[2] - l, " %.2f", cpu);
				}
				continue;
			}
			if (what == 0) {
				double tm, tr, cpu;
				if (cold_pass(b, &s, "file", exp_names, &tm, &tr, &mnt_bytes, &cpu)) {
					cli_fail(1, "bench", "mount --remote: the hf:// mount or a read "
					         "through it failed (see %s)", b->log);
					goto out;
				}
				bm_keep_min(&t_mnt, tm);
				bm_keep_min(&t_cold, tr);
				size_t l = strlen(passes[0]);
				snprintf(passes[0] + l, sizeof passes[0] - l, " %.2f", tr);
				l = strlen(cpus[0]);
				snprintf(cpus[0] + l, sizeof cpus[0] - l, " %.2f", cpu);
				continue;
			}
			sync();
			bm_drop(b->src);
			double cc = -1, tc = curl_all(b, &s, src_names, what == 1 ? curl_dir : NULL, &cc);
			bm_keep_min(what == 1 ? &t_curl : &t_null, tc);
			size_t l = strlen(passes[1]);
			if (what == 1)
				snprintf(passes[1] + l, sizeof passes[1] - l, " %.2f", tc);
			l = strlen(cpus[1]);
			if (what == 1)
				snprintf(cpus[1] + l, sizeof cpus[1] - l, " %.2f", cc);
		}
	}
	double la_cold1 = load1();
	if (t_curl >= 1e30 || t_null >= 1e30) {
		cli_fail(1, "bench", "mount --remote: curl of the SRC files failed (is curl "
		         "installed? apt-get install curl)");
		goto out;
	}
	/* warm: everything fetched, quantized, materialized and assembled */
	if (mount_hf(b, &s, NULL, "file")) {
		cli_fail(1, "bench", "mount --remote: the hf:// mount failed (see %s)", b->log);
		goto out;
	}
	char *wargs[] = {"requantfs", "warm", b->mnt, NULL};
	if (bm_run_self(b, wargs))
		fprintf(stderr, "bench mount --remote: warm failed (see %s)\n", b->log);
	bm_umount(b);
	/* the mount that stays mounted: its first read waits for the
	 * verification of the materialized shards (timed apart) */
	drop_both(b);
	double t_first = -1;
	struct wst w0 = {0}, w1 = {0};
	if (mount_hf(b, &s, NULL, "file")) {
		cli_fail(1, "bench", "mount --remote: the hf:// mount failed (see %s)", b->log);
		goto out;
	}
	t_first = read_all(b, b->mnt, exp_names, &mnt_bytes);
	int settled = settle(b, &w0);
	int npairs = b->reps * 4 < MAX_PAIRS ? b->reps * 4 : MAX_PAIRS;
	struct wpairs wd, wh;
	int bad = t_first < 0 || warm_pairs(b, exp_names, npairs, 1, &wd) || mnt_status(b, &w1) ||
	          warm_pairs(b, exp_names, npairs, 0, &wh);
	bm_umount(b);
	if (bad) {
		cli_fail(1, "bench", "mount --remote: a warm read through the hf:// mount failed "
		         "(see %s)", b->log);
		goto out;
	}
	read_all(b, b->exp, exp_names, &nat_bytes);
	printf("  mount returned in          %8.2f s (model API + headers)\n", t_mnt);
	printf("  cold (best of %d; load %.1f -> %.1f):\n", b->reps, la_cold0, la_cold1);
	printf("  cold: curl of SRC to files %8.2f s  %7.0f MB/s\n", t_curl, src_bytes / t_curl / 1e6);
	printf("  cold: curl to /dev/null    %8.2f s  %7.0f MB/s (reference: stores nothing)\n",
	       t_null, src_bytes / t_null / 1e6);
	printf("  cold: hf:// mount read     %8.2f s  %7.0f MB/s of SRC fetched (%.2f GB presented)\n",
	       t_cold, src_bytes / t_cold / 1e6, mnt_bytes / 1e9);
	printf("  cold, --remote-verify none %8.2f s  %7.0f MB/s (bytes served as chunks come; "
	       "ratio %.2f)\n", t_lazy, src_bytes / t_lazy / 1e6, t_curl / t_lazy);
	printf("  cold passes, s: mount%s; curl to files%s; verify none%s\n", passes[0], passes[1],
	       passes[2]);
	printf("  cold CPU of those passes, s (user + system, %ld CPUs): the daemon%s; curl%s; the "
	       "daemon, verify none%s\n", sysconf(_SC_NPROCESSORS_ONLN), cpus[0], cpus[1], cpus[2]);
	printf("  warm: after `warm`: %lld files pass through, %lld on the copy path, %lld pending%s\n",
	       w0.pt, w0.copy, w0.pending, settled ? " (NOT settled after 60 s)" : "");
	printf("  warm: first read after mounting %6.2f s (waits for the materialized shards' "
	       "verification; no bar)\n", t_first);
	printf("  warm, page caches dropped before each read (%d passes, each file mount and "
	       "native back to back, order alternating; per file the fastest; load %.1f -> "
	       "%.1f):\n", npairs, wd.la0, wd.la1);
	printf("  warm: native export read   %8.3f s  %7.0f MB/s  (reader CPU %.3f s)\n", wd.best[1],
	       nat_bytes / wd.best[1] / 1e6, wd.cpu[1]);
	printf("  warm: hf:// mount read     %8.3f s  %7.0f MB/s  (reader CPU %.3f s)\n", wd.best[0],
	       mnt_bytes / wd.best[0] / 1e6, wd.cpu[0]);
	printf("  warm: FUSE reads reaching the daemon: %.1f per pass (%.0f bytes; passthrough "
	       "serves the rest)\n", (double)(w1.reads - w0.reads) / npairs,
	       (double)(w1.read_bytes - w0.read_bytes) / npairs);
	printf("  warm, page caches warm (same way; load %.1f -> %.1f):\n", wh.la0, wh.la1);
	printf("  warm: native export read   %8.3f s  %7.0f MB/s  (reader CPU %.3f s)\n", wh.best[1],
	       nat_bytes / wh.best[1] / 1e6, wh.cpu[1]);
	printf("  warm: hf:// mount read     %8.3f s  %7.0f MB/s  (reader CPU %.3f s)\n", wh.best[0],
	       mnt_bytes / wh.best[0] / 1e6, wh.cpu[0]);
	double rc_cold = t_curl / t_cold, rc_warm = wd.best[1] / wd.best[0];
	double rc_hot = wh.best[1] / wh.best[0];
	printf("  ratio cold (curl / mount)   %.2f  (bar >= 0.90: %s)\n", rc_cold,
	       rc_cold >= 0.9 ? "met" : "NOT met");
	printf("  (ratio cold vs curl to /dev/null: %.2f)\n", t_null / t_cold);
	printf("  ratio warm (native / mount) %.2f  (bar >= 0.95: %s); whole passes: min %.2f "
	       "median %.2f max %.2f\n", rc_warm, rc_warm >= 0.95 ? "met" : "NOT met", wd.ratio[0],
	       wd.ratio[npairs / 2], wd.ratio[npairs - 1]);
	printf("  ratio warm, page caches warm %.2f  (bar >= 0.95: %s); whole passes: median %.2f; "
	       "reader CPU %.2f\n", rc_hot, rc_hot >= 0.95 ? "met" : "NOT met",
	       wh.ratio[npairs / 2], wh.cpu[1] / wh.cpu[0]);
	printf("  (first read after mounting vs native, dropped: %.2f)\n", wd.best[1] / t_first);
	rc = 0;
out:
	server_stop(&s);
	free_list(src_names);
	free_list(exp_names);
	return rc;
}
