/* cli.c — what the subcommands share: failure messages, sizes, hub repo ids,
 * progress bar. */
#include "cli/cli.h"
#include "base/err.h"
#include "plan/hub_cache.h"

#include <errno.h>
#include <limits.h>
#include <sys/wait.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int cli_fail(int code, const char *cmd, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "requantfs %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return code;
}

int cli_parse_size(const char *s, unsigned long long *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || v < 0)
		return -EINVAL;
	double mul = 1;
	switch (*end) {
	case 'k': case 'K': mul = 1024.0; end++; break;
	case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
	case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
	case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
	default: break;
	}
	if (*end == 'i' || *end == 'I')
		end++;
	if (*end == 'b' || *end == 'B')
		end++;
	if (*end)
		return -EINVAL;
	*out = (unsigned long long)(v * mul);
	return 0;
}

/* Snapshot directories handed out by cli_hub_args: freed at exit. */
static char **held;
static size_t nheld;

static void free_held(void)
{
	while (nheld)
		free(held[--nheld]);
	free(held);
	held = NULL;
}

static int hub_arg(const char *cmd, const char **arg, int calib)
{
	struct stat st;
	if (!arg || !*arg || lstat(*arg, &st) == 0 || !rq_hub_is_repo_id(*arg))
		return -1;    /* a path (existing or not) is the commands' business */
	struct rq_err err = {0};
	char *snap = NULL;
	int rc = rq_hub_resolve(*arg, &snap, &err);
	if (rc == -ENOENT && calib) {
		char *cache = NULL;
		const char *from = NULL;
		rq_hub_cache_dir(&cache, &from);
		cli_fail(1, cmd, "calibration %s is not in the local hub cache (%s, %s); run "
		         "`requantfs calib fetch %s -o calib.safetensors` and pass --calib "
		         "calib.safetensors", *arg, cache ? cache : "?", from ? from : "?", *arg);
		free(cache);
		return 1;
	}
	if (rc)
		return cli_fail(1, cmd, "%s%s", calib ? "--calib " : "", err.msg);
	char **v = realloc(held, (nheld + 1) * sizeof *v);
	if (!v) {
		free(snap);
		return cli_fail(1, cmd, "out of memory");
	}
	if (!held)
		atexit(free_held);
	held = v;
	held[nheld++] = snap;
	*arg = snap;
	return -1;
}

int cli_hub_args(const char *cmd, const char **model, const char **calib)
{
	int rc = hub_arg(cmd, model, 0);
	return rc >= 0 ? rc : hub_arg(cmd, calib, 1);
}

struct cli_progress {
	pthread_mutex_t mu;
	char label[64];
	unsigned long long total_units, total_bytes, units, bytes;
	double t0, last_draw;
	int draw;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void cli_human_bytes(double b, char *buf, size_t len)
{
	const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	int i = 0;
	while (b >= 1024 && i < 4) {
		b /= 1024;
		i++;
	}
	snprintf(buf, len, i ? "%.1f %s" : "%.0f %s", b, u[i]);
}

static void draw(struct cli_progress *p, int final)
{
	double t = now_s(), el = t - p->t0;
	if (!final && t - p->last_draw < 0.1)
		return;
	p->last_draw = t;
	double frac = p->total_bytes ? (double)p->bytes / p->total_bytes
	            : p->total_units ? (double)p->units / p->total_units : 1.0;
	if (frac > 1)
		frac = 1;
	int width = 28, fill = (int)(frac * width);
	char bar[64], done[32], tot[32], rate[32];
	for (int i = 0; i < width; i++)
		bar[i] = i < fill ? '#' : '.';
	bar[width] = 0;
	cli_human_bytes(p->bytes, done, sizeof done);
	cli_human_bytes(p->total_bytes, tot, sizeof tot);
	cli_human_bytes(el > 0 ? p->bytes / el : 0, rate, sizeof rate);
	double eta = frac > 0 && !final ? el / frac - el : 0;
	fprintf(stderr, "\r%s [%s] %3.0f%% %llu/%llu  %s/%s  %s/s  %s %02d:%02d",
	        p->label, bar, frac * 100, p->units, p->total_units, done, tot, rate,
	        final ? "took" : "ETA", (int)(final ? el : eta) / 60, (int)(final ? el : eta) % 60);
	if (final)
		fputc('\n', stderr);
	fflush(stderr);
}

struct cli_progress *cli_progress_start(const char *label, unsigned long long total_units,
                                        unsigned long long total_bytes, int force)
{
	struct cli_progress *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	pthread_mutex_init(&p->mu, NULL);
	snprintf(p->label, sizeof p->label, "%s", label);
	p->total_units = total_units;
	p->total_bytes = total_bytes;
	p->t0 = now_s();
	p->draw = force || isatty(STDERR_FILENO);
	return p;
}

void cli_progress_add(struct cli_progress *p, unsigned long long units, unsigned long long bytes)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->units += units;
	p->bytes += bytes;
	if (p->draw)
		draw(p, 0);
	pthread_mutex_unlock(&p->mu);
}

void cli_progress_set(struct cli_progress *p, unsigned long long units, unsigned long long bytes)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->units = units;
	p->bytes = bytes;
	if (p->draw)
		draw(p, 0);
	pthread_mutex_unlock(&p->mu);
}

void cli_progress_end(struct cli_progress *p)
{
	if (!p)
		return;
	if (p->draw)
		draw(p, 1);
	pthread_mutex_destroy(&p->mu);
	free(p);
}

void cli_progress_stop(struct cli_progress *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	if (p->draw)
		draw(p, 1);
	p->draw = 0;
	pthread_mutex_unlock(&p->mu);
}

char *cli_default_cache(void)
{
	const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
	char *s = NULL;
	if (x && *x)
		return asprintf(&s, "%s/requantfs", x) < 0 ? NULL : s;
	return asprintf(&s, "%s/.cache/requantfs", h && *h ? h : "/tmp") < 0 ? NULL : s;
}

int cli_run_self(char *const args[])
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n <= 0)
		return -1;
	self[n] = 0;
	char *argv[16] = {self};
	for (int i = 0; args[i] && i < 14; i++)
		argv[i + 1] = args[i];
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		if (!freopen("/dev/null", "w", stdout))
			_exit(127);
		execv(self, argv);
		_exit(127);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}
