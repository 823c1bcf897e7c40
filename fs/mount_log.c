/* mount_log.c — what every file of the daemon uses and nothing of it is
 * called back from: the monotonic clock, the daemon's log (syslog, or
 * --log-file / stderr with a timestamp; names from input escaped), and the
 * stop flag of its threads. A leaf of the daemon's order (mount.c). */
#include "fs/mount_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "base/esc.h"

double rq_mnt_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static enum rq_log_level log_level(const struct rq_mount *m)
{
	return m->o.log_level == RQ_LOG_DEFAULT ? RQ_LOG_INFO : m->o.log_level;
}

int rq_mount_log_on(const struct rq_mount *m, enum rq_log_level level)
{
	return level <= log_level(m);
}

static void log_line(struct rq_mount *m, enum rq_log_level level, const char *fmt, va_list ap)
{
	if (!rq_mount_log_on(m, level))
		return;
	char line[1536];
	rq_vfmt_esc(line, sizeof line, fmt, ap);   /* names from input escaped (issue 17) */
	if (!m->logf && !m->o.log_stderr) {
		/* NOTICE, not INFO, for the default level: what it always was */
		static const int prio[] = {LOG_NOTICE, LOG_ERR, LOG_WARNING, LOG_NOTICE, LOG_DEBUG};
		syslog(prio[level], "%s", line);
		return;
	}
	time_t t = time(NULL);
	struct tm tm;
	char ts[32];
	localtime_r(&t, &tm);
	strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", &tm);
	pthread_mutex_lock(&m->log_mu);
	FILE *f = m->logf ? m->logf : stderr;
	fprintf(f, "%s requantfs[%d]: %s\n", ts, (int)getpid(), line);
	fflush(f);
	pthread_mutex_unlock(&m->log_mu);
}

void rq_mount_log(struct rq_mount *m, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	log_line(m, RQ_LOG_INFO, fmt, ap);
	va_end(ap);
}

void rq_mount_logl(struct rq_mount *m, enum rq_log_level level, const char *fmt, ...)
{
	if (level < RQ_LOG_ERROR || level > RQ_LOG_DEBUG)
		level = RQ_LOG_INFO;
	va_list ap;
	va_start(ap, fmt);
	log_line(m, level, fmt, ap);
	va_end(ap);
}

void rq_mnt_flag_stop(pthread_mutex_t *mu, int *flag, pthread_cond_t *cv, pthread_cond_t *cv2)
{
	pthread_mutex_lock(mu);
	*flag = 1;
	pthread_cond_broadcast(cv);
	if (cv2)
		pthread_cond_broadcast(cv2);
	pthread_mutex_unlock(mu);
}
