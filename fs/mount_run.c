/* mount_run.c — the life of a mount: checks before mounting (MNT, SRC,
 * plan, cache, device), the libfuse session (multi-threaded loop, clone_fd),
 * readiness and kernel readahead, the SRC monitor thread, shutdown. The
 * lifecycle edge of the daemon: it calls every file below it (order at the
 * top of mount.c) and none of them calls it. The log is mount_log.c. */
#include "fs/mount_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/esc.h"
#include "fs/mount_pt.h"
#include "fs/mountinfo.h"
#include "qdev/qdev.h"
#include "remote/rstore.h"

/* ---- the SRC monitor (mount_src.c says what a change does) ---------- */

/* Does virtual file f depend on SRC file s? */
static int depends(const struct rq_plan *p, const struct rq_vfile *f, int s)
{
	if (f->src == s)
		return 1;
	for (size_t k = 0; k < f->nseg; k++) {
		const struct rq_seg *g = &f->seg[k];
		if (g->kind == RQ_SEG_SRC && g->src == s)
			return 1;
		if (g->kind == RQ_SEG_JOB)
			for (int i = 0; i < p->jobs[g->job].nmod; i++)
				if (p->mods[p->jobs[g->job].mod[i]].src == s)
					return 1;
	}
	return 0;
}

static void *monitor(void *arg)
{
	struct rq_mount *m = arg;
	const struct rq_plan *p = m->plan;
	pthread_mutex_lock(&m->mon_mu);
	while (!m->mon_stop) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		pthread_cond_timedwait(&m->mon_cv, &m->mon_mu, &ts);
		if (m->mon_stop)
			break;
		pthread_mutex_unlock(&m->mon_mu);
		for (size_t s = 0; s < p->nsrcs; s++) {
			rq_mnt_src_check(m, (int)s, 1);
			if (!atomic_load(&m->srcs[s].changed) || atomic_exchange(&m->srcs[s].invalidated, 1))
				continue;
			/* Drop what the kernel cached of every dependent file, and
			 * its materialized file (open passthrough files keep theirs:
			 * mount_mat.c). */
			for (size_t i = 0; i < p->nfiles; i++)
				if (depends(p, &p->files[i], (int)s)) {
					pthread_mutex_lock(&m->lock);
					rq_mnt_mat_drop(m, (long)i, "its SRC changed");
					pthread_mutex_unlock(&m->lock);
					fuse_lowlevel_notify_inval_inode(m->se, m->vino[i], 0, 0);
				}
		}
		pthread_mutex_lock(&m->mon_mu);
	}
	pthread_mutex_unlock(&m->mon_mu);
	return NULL;
}

int rq_mnt_monitor_start(struct rq_mount *m, struct rq_err *err)
{
	if (m->o.rs)
		return 0;     /* a pinned commit: nothing to watch */
	if (pthread_create(&m->monitor, NULL, monitor, m))
		return -EAGAIN;
	m->monitor_started = 1;
	return 0;
}

void rq_mnt_monitor_stop(struct rq_mount *m)
{
	if (!m->monitor_started)
		return;
	rq_mnt_flag_stop(&m->mon_mu, &m->mon_stop, &m->mon_cv, NULL);
	pthread_join(m->monitor, NULL);
	m->monitor_started = 0;
}

/* ---- open / run / close ----------------------------------------------- */

static int check_mountpoint(const char *mnt, struct rq_err *err)
{
	struct stat st;
	if (stat(mnt, &st)) {
		int e = errno;
		if (e == ENOTCONN || e == ECONNABORTED)
			return rq_errf(err, -e, "%s is a dead FUSE mount (its daemon is gone): run "
			               "`requantfs umount %s` first", mnt, mnt);
		if (e == ENOENT)
			return rq_errf(err, -e, "mount point %s does not exist: create it with "
			               "`mkdir -p %s`", mnt, mnt);
		return rq_errf(err, -e, "mount point %s: %s", mnt, strerror(e));
	}
	if (!S_ISDIR(st.st_mode))
		return rq_errf(err, -ENOTDIR, "mount point %s is not a directory", mnt);
	DIR *d = opendir(mnt);
	if (!d && (errno == ENOTCONN || errno == ECONNABORTED))
		return rq_errf(err, -errno, "%s is a dead FUSE mount (its daemon is gone): run "
		               "`requantfs umount %s` first", mnt, mnt);
	if (!d)
		return rq_errf(err, -errno, "mount point %s: %s", mnt, strerror(errno));
	struct dirent *de;
	int nonempty = 0;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
			nonempty = 1;
			break;
		}
	closedir(d);
	char ctl[PATH_MAX];
	snprintf(ctl, sizeof ctl, "%s/%s/status", mnt, RQ_CTL_DIR);
	if (nonempty && !access(ctl, F_OK))
		return rq_errf(err, -EBUSY, "%s is already a requantfs mount: run `requantfs umount "
		               "%s` first", mnt, mnt);
	if (nonempty)
		return rq_errf(err, -ENOTEMPTY, "mount point %s is not empty: mount on an empty "
		               "directory", mnt);
	if (access(mnt, W_OK | X_OK) && geteuid() != 0)
		return rq_errf(err, -EACCES, "mount point %s is not writable by you (FUSE needs "
		               "to own or be able to write it)", mnt);
	return 0;
}

/* ---- a mount by an unprivileged user --------------------------------- */

/* Not root, libfuse 3.14 opens /dev/fuse itself first (and gives up when it
 * cannot: no fallback on EACCES), then, when mount(2) says EPERM, runs the
 * setuid fusermount3 (/usr/bin first, then PATH), which checks the mount
 * point (owned or writable, a sticky one owned), the options (allow_other
 * only with user_allow_other in /etc/fuse.conf) and mounts. Each of these is
 * checked here first so that the refusal says what to do; fusermount3's own
 * checks remain the authority (its message is printed when it refuses). */

/* Whether the comma-separated option list names opt as a whole word. */
static int has_opt(const char *list, const char *opt)
{
	size_t n = strlen(opt);
	for (const char *p = list; p && *p;) {
		const char *e = strchr(p, ',');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		if (l == n && !strncmp(p, opt, n))
			return 1;
		p = e ? e + 1 : NULL;
	}
	return 0;
}

/* An uncommented "user_allow_other" line in /etc/fuse.conf (as fusermount3
 * reads it: one option a line, surrounding blanks ignored). */
static int fuse_conf_allows_other(void)
{
	FILE *f = fopen("/etc/fuse.conf", "re");
	if (!f)
		return 0;
	char line[512];
	int yes = 0;
	while (!yes && fgets(line, sizeof line, f)) {
		char *p = line, *e;
		while (*p == ' ' || *p == '\t')
			p++;
		e = p + strlen(p);
		while (e > p && (e[-1] == '\n' || e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
			*--e = 0;
		yes = !strcmp(p, "user_allow_other");
	}
	fclose(f);
	return yes;
}

/* The fusermount3 libfuse would run (/usr/bin, then PATH) into path: 0, or
 * -ENOENT when there is none. */
static int find_fusermount(char *path, size_t len, struct stat *st)
{
	const char *pathenv = getenv("PATH");
	char dirs[4096];
	snprintf(dirs, sizeof dirs, "/usr/bin:%s", pathenv ? pathenv : "/bin:/usr/bin");
	char *save = NULL;
	for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		snprintf(path, len, "%s/fusermount3", *d ? d : ".");
		if (!stat(path, st) && S_ISREG(st->st_mode) && !access(path, X_OK))
			return 0;
	}
	return -ENOENT;
}

static int check_unprivileged(const struct rq_mount_opts *o, struct rq_err *err)
{
	struct stat st;
	if (stat("/dev/fuse", &st))
		return rq_errf(err, -ENODEV, "/dev/fuse is missing: load the module (`modprobe fuse` "
		               "as root; in a container pass --device /dev/fuse), or mount as root");
	if (access("/dev/fuse", R_OK | W_OK))
		return rq_errf(err, -EACCES, "/dev/fuse (mode %04o, uid %u) is not readable and "
		               "writable by you, and libfuse needs that to mount as a non-root user: "
		               "as root `chmod 0666 /dev/fuse` (the kernel's and Debian's default; in "
		               "a container it comes from the host's device), or mount as root",
		               (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid);
	char fm[PATH_MAX];
	if (find_fusermount(fm, sizeof fm, &st))
		return rq_errf(err, -ENOENT, "fusermount3 is not installed (libfuse runs it to mount "
		               "as a non-root user): `apt-get install fuse3` as root, or mount as root");
	if (st.st_uid != 0 || !(st.st_mode & S_ISUID))
		return rq_errf(err, -EPERM, "%s is not setuid root, so it cannot mount for you: as "
		               "root `chown root %s && chmod u+s %s` (how Debian's fuse3 installs it), "
		               "or mount as root", fm, fm, fm);
	if (has_opt(o->fuse_opts, "allow_other") && !fuse_conf_allows_other())
		return rq_errf(err, -EPERM, "-o allow_other as a non-root user: add "
		               "user_allow_other to /etc/fuse.conf (or mount as root)");
	return 0;
}

static int open_srcs(struct rq_mount *m, struct rq_err *err)
{
	const struct rq_plan *p = m->plan;
	m->srcs = calloc(p->nsrcs ? p->nsrcs : 1, sizeof *m->srcs);
	m->src_fds = calloc(p->nsrcs ? p->nsrcs : 1, sizeof *m->src_fds);
	if (!m->srcs || !m->src_fds)
		return rq_errf(err, -ENOMEM, "out of memory");
	for (size_t i = 0; i < p->nsrcs; i++) {
		m->srcs[i].fd = m->src_fds[i] = -1;
		atomic_init(&m->srcs[i].rfd, -1);
	}
	for (size_t i = 0; i < p->nsrcs && !m->o.rs; i++) {
		int fd = rq_src_open(&p->srcs[i]);
		if (fd < 0)
			return rq_errf(err, fd, "SRC file %s: %s", p->srcs[i].path,
			               fd == -EINVAL ? "no longer a regular file" : strerror(-fd));
		m->srcs[i].fd = m->src_fds[i] = fd;
		if (rq_mnt_src_check(m, (int)i, 1))
			return rq_errf(err, -EIO, "%s changed while the mount was being prepared: "
			               "mount again", p->srcs[i].path);
	}
	return 0;
}

static char *build_fuse_opts(struct rq_mount *m)
{
	const char *extra = m->fuse_opts && *m->fuse_opts ? m->fuse_opts : NULL;
	char *s = NULL;
	/* fsname carries the daemon's pid: `requantfs umount` finds it in
	 * /proc/self/mountinfo without a request to a possibly dead mount.
	 * default_permissions: the kernel checks the modes and owners the mount
	 * presents (SRC's). No allow_other unless asked for (-o allow_other):
	 * without it only the mounting user gets in, whatever the modes say. */
	int r = asprintf(&s, "ro,default_permissions,fsname=requantfs@%d,subtype=requantfs,"
	                 "max_read=1048576%s%s", (int)getpid(), extra ? "," : "", extra ? extra : "");
	return r < 0 ? NULL : s;
}

/* Raises the soft limit on open files; returns the limit. */
/* qdev's GPU state changes (failures, back-off, watchdog, releases). Called
 * with qdev's lock held: it only logs, never calls back into qdev. */
/* --cache-max, one budget for the quantized cache and a remote SRC's chunk
 * store (rstore.c "Disk budget"): each counts the other's bytes; the
 * cache asks the store to evict first. */
static uint64_t budget_cache_bytes(void *c)
{
	struct rq_cache_stats st;
	rq_cache_get_stats(c, &st);
	return st.bytes + st.writing;
}

static uint64_t budget_rs_bytes(void *s)
{
	struct rq_rs_stats st;
	rq_rs_stats(s, &st);
	return st.bytes_on_disk;
}

static uint64_t budget_rs_trim(void *s, uint64_t n)
{
	return rq_rs_trim(s, n);
}

static void qdev_log(void *arg, const char *line)
{
	rq_mount_logl(arg, RQ_LOG_WARN, "quantizer: %s", line);
}

static long raise_nofile(void)
{
	struct rlimit r;
	if (getrlimit(RLIMIT_NOFILE, &r))
		return 1024;
	if (r.rlim_cur < r.rlim_max) {
		r.rlim_cur = r.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &r))
			getrlimit(RLIMIT_NOFILE, &r);
	}
	return r.rlim_cur == RLIM_INFINITY ? 1 << 20 : (long)r.rlim_cur;
}

int rq_mount_open(const struct rq_mount_opts *o, struct rq_mount **out, struct rq_err *err)
{
	int rc;
	struct rq_mount *m = calloc(1, sizeof *m);
	if (!m)
		return rq_errf(err, -ENOMEM, "out of memory");
	m->o = *o;
	pthread_mutex_init(&m->log_mu, NULL);
	pthread_mutex_init(&m->lock, NULL);
	pthread_cond_init(&m->work, NULL);
	pthread_mutex_init(&m->mon_mu, NULL);
	pthread_cond_init(&m->mon_cv, NULL);
	pthread_cond_init(&m->mat_cv, NULL);
	pthread_cond_init(&m->mat_done, NULL);
	m->t_start = rq_mnt_now();
	if (o->log_path) {
		m->logf = fopen(o->log_path, "ae");
		if (!m->logf) {
			rc = rq_errf(err, -errno, "log file %s: %s", o->log_path, strerror(errno));
			goto fail;
		}
	} else if (!o->log_stderr) {
		openlog("requantfs", LOG_PID, LOG_DAEMON);
	}
	long nofile = raise_nofile();

	m->mnt = realpath(o->mnt, NULL);
	if (!m->mnt) {
		rc = check_mountpoint(o->mnt, err);
		if (!rc)
			rc = rq_errf(err, -errno, "mount point %s: %s", o->mnt, strerror(errno));
		goto fail;
	}
	if ((rc = check_mountpoint(m->mnt, err)))
		goto fail;
	if (o->passthrough == RQ_PT_ON && !rq_pt_privileged()) {
		rc = rq_errf(err, -EPERM, "--passthrough on: the kernel lets only a server with "
		             "CAP_SYS_ADMIN (root) use FUSE passthrough; mount as root or use "
		             "--passthrough auto");
		goto fail;
	}
	if (geteuid() != 0 && (rc = check_unprivileged(o, err)))
		goto fail;
	m->src = strdup(o->src);
	m->cache_dir = strdup(o->cache_dir);
	m->fuse_opts = o->fuse_opts ? strdup(o->fuse_opts) : NULL;
	if (!m->src || !m->cache_dir) {
		rc = rq_errf(err, -ENOMEM, "out of memory");
		goto fail;
	}
	struct stat sst;
	if (o->rs) {
		struct timespec now;
		clock_gettime(CLOCK_REALTIME, &now);
		m->mtime_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
		if ((rc = rq_mnt_remote_init(m, err)))
			goto fail;
	} else if (stat(o->src, &sst) || !S_ISDIR(sst.st_mode)) {
		rc = rq_errf(err, -ENOENT, "SRC %s is not a checkpoint directory%s%s", o->src,
		             errno ? ": " : "", errno ? strerror(errno) : "");
		goto fail;
	} else {
		m->mtime_ns = (int64_t)sst.st_mtim.tv_sec * 1000000000 + sst.st_mtim.tv_nsec;
	}

	struct rq_plan_opts po = {.src = o->src, .calib = o->calib, .drop_rule = o->drop_rule,
	                          .recipe = o->recipe, .scheme = (enum rq_scheme)o->scheme,
	                          .targets = o->targets, .ntargets = o->ntargets,
	                          .ignore = o->ignore, .nignore = o->nignore,
	                          .rule_scheme = (enum rq_scheme)o->rule_scheme,
	                          .observer = (enum rq_observer)o->observer,
	                          .reader = o->rs ? &m->rreader : NULL};
	if ((rc = rq_plan_build(&po, &m->plan, err)))
		goto fail;
	rq_mnt_remote_planned(m);         /* from now on the reader serves jobs only */
	if ((rc = rq_mnt_rv_init(m, err)))   /* --remote-verify file: jobs read verified copies */
		goto fail;
	for (size_t i = 0; i < m->plan->nskipped; i++)
		rq_mount_log(m, "%s", m->plan->skipped[i]);
	/* lazy_sync: job entries are checksummed and verified at first use in a
	 * process, so a crash costs a rebuild, never a wrong byte; per-entry
	 * fsyncs would cost a cold read up to a fifth of its speed. */
	struct rq_cache_opts co = {.dir = o->cache_dir, .max_bytes = o->cache_max, .lazy_sync = 1};
	if ((rc = rq_cache_open(&co, &m->cache, err))) {
		if (err) {   /* the cache's message names the directory; add what to do */
			size_t l = strnlen(err->msg, sizeof err->msg - 1);
			snprintf(err->msg + l, sizeof err->msg - l, "; choose another with --cache");
		}
		goto fail;
	}
	if (o->rs) {
		struct rq_cache_peer peer = {.bytes = budget_rs_bytes, .trim = budget_rs_trim,
		                             .ctx = o->rs};
		rq_cache_set_peer(m->cache, &peer);
		rq_rs_set_budget(o->rs, o->cache_max, budget_cache_bytes, m->cache);
	}
	if ((rc = open_srcs(m, err)) || (rc = rq_mnt_tree_build(m, err)) ||
	    (rc = rq_mnt_jobs_init(m, err)) || (rc = rq_mnt_files_init(m, err)))
		goto fail;
	/* Open cache entries kept by READY jobs: what the fd limit leaves. */
	long fds = (nofile - (long)m->plan->nsrcs - 256) / 2;
	m->max_fd = fds < 16 ? 16 : fds > 1024 ? 1024 : (int)fds;
	struct rq_quantizer_opts qo = {.device = o->device, .threads = o->threads,
	                               .gpu_mem = o->gpu_mem, .gpu_idle_s = o->gpu_idle_s,
	                               .log = qdev_log, .log_arg = m};
	if ((rc = rq_quantizer_open(&qo, &m->q, err)))
		goto fail;
	const char *fb = rq_quantizer_fallback_reason(m->q);
	if (fb)
		rq_mount_log(m, "quantizer: %s", fb);

	char *opts = build_fuse_opts(m);
	if (!opts) {
		rc = rq_errf(err, -ENOMEM, "out of memory");
		goto fail;
	}
	char *argv[5] = {"requantfs", "-o", opts, NULL, NULL};
	int argc = 3;
	if (o->debug)
		argv[argc++] = "-d";
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	m->se = fuse_session_new(&args, &rq_mnt_ops, sizeof rq_mnt_ops, m);
	fuse_opt_free_args(&args);
	if (!m->se) {
		rc = rq_errf(err, -EINVAL, "libfuse refused the mount options \"%s\" (see its "
		             "message above; check -o)", opts);
		free(opts);
		goto fail;
	}
	free(opts);
	if (fuse_set_signal_handlers(m->se)) {
		rc = rq_errf(err, -EIO, "cannot install signal handlers");
		goto fail;
	}
	if (fuse_session_mount(m->se, m->mnt)) {
		if (geteuid() != 0)
			rc = rq_errf(err, -EIO, "cannot mount on %s: fusermount3 refused (its reason "
			             "is above). A non-root mount needs an empty mount point you own "
			             "(e.g. `mkdir -p ~/mnt`; a sticky one such as /tmp itself will not "
			             "do), /dev/fuse readable and writable by you and a setuid-root "
			             "fusermount3; or mount as root", m->mnt);
		else
			rc = rq_errf(err, -EIO, "cannot mount on %s (see the message above: is "
			             "/dev/fuse there? in a container run with --device /dev/fuse "
			             "--cap-add SYS_ADMIN)", m->mnt);
		goto fail;
	}
	if (o->passthrough == RQ_PT_OFF) {
		snprintf(m->pt_note, sizeof m->pt_note, "--passthrough off");
	} else if (rq_pt_install(m->se, &m->pt, m->pt_note, sizeof m->pt_note)) {
		m->pt = NULL;
		if (o->passthrough == RQ_PT_ON) {
			rc = rq_errf(err, -EOPNOTSUPP, "--passthrough on: %s", m->pt_note);
			fuse_session_unmount(m->se);
			goto fail;
		}
	}
	rq_mount_log(m, "mounted %s at %s: %zu files, %zu modules in %zu jobs, scheme %s, "
	             "recipe %s, observer %s%s, device %s, cache %s", m->src, m->mnt,
	             m->plan->nfiles, m->plan->nmods, m->plan->njobs,
	             rq_scheme_name(m->plan->scheme), rq_recipe_name(m->plan->recipe),
	             rq_observer_name(m->plan->observer), m->plan->observer ? " (on the CPU: no "
	             "CUDA twin of its search)" : "", rq_quantizer_device(m->q), m->cache_dir);
	*out = m;
	return 0;
fail:
	rq_mount_close(m);
	return rc;
}

/* Kernel readahead of this mount: /sys/class/bdi/<major:minor>/read_ahead_kb,
 * found through /proc/self/mountinfo (no request to our own mount). */
static void set_readahead(struct rq_mount *m)
{
	if (!m->o.readahead_kb)
		return;
	struct rq_mountinfo mi;
	if (rq_mountinfo_find(m->mnt, &mi))
		return;
	const char *dev = mi.dev;
	char path[128];
	snprintf(path, sizeof path, "/sys/class/bdi/%s/read_ahead_kb", dev);
	FILE *w = fopen(path, "we");
	if (!w || fprintf(w, "%u\n", m->o.readahead_kb) < 0 || fclose(w)) {
		rq_mount_log(m, "cannot set readahead to %u KiB (%s): %s", m->o.readahead_kb, path,
		             strerror(errno));
		return;
	}
}

struct ready_ctx {
	struct rq_mount *m;
	void (*fn)(void *, int, const char *);
	void *ctx;
	int done;
};

static void *ready_thread(void *arg)
{
	struct ready_ctx *r = arg;
	struct stat st;
	/* The kernel holds every request until INIT is answered: when this stat
	 * returns, the mount serves requests and the readahead can be raised
	 * (INIT would otherwise lower it again). */
	if (stat(r->m->mnt, &st) || st.st_ino != FUSE_ROOT_ID) {
		char msg[256];
		snprintf(msg, sizeof msg, "the mount at %s does not answer", r->m->mnt);
		r->fn(r->ctx, -EIO, msg);
		r->done = 1;
		return NULL;
	}
	set_readahead(r->m);
	/* INIT is answered: whether passthrough is on is known now. */
	struct rq_mount *m = r->m;
	if (rq_mnt_mat_start(m))
		rq_mount_log(m, "cannot start the materializer: requantized shards are served "
		             "through their jobs");
	if (m->pt && rq_pt_enabled(m->pt)) {
		rq_mount_log(m, "passthrough on: files identical to SRC pass through from the first "
		             "open, requantized shards once materialized");
	} else {
		if (m->pt)
			snprintf(m->pt_note, sizeof m->pt_note, "%s", rq_pt_why(m->pt));
		rq_mount_log(m, "passthrough off (%s): the copy path serves every file", m->pt_note);
		if (m->o.passthrough == RQ_PT_ON) {
			char msg[400];
			snprintf(msg, sizeof msg, "--passthrough on, but passthrough is off: %s",
			         m->pt_note);
			r->fn(r->ctx, -EOPNOTSUPP, msg);
			r->done = 1;
			/* end the session loop: the next request it reads sees the exit */
			fuse_session_exit(m->se);
			struct statvfs sv;
			statvfs(m->mnt, &sv);
			return NULL;
		}
	}
	rq_mount_log(m, "ready");
	r->fn(r->ctx, 0, NULL);
	r->done = 1;
	return NULL;
}

int rq_mount_run(struct rq_mount *m, void (*ready)(void *ctx, int rc, const char *msg), void *ctx)
{
	struct rq_err err = {0};
	int rc = rq_mnt_jobs_start(m, &err);
	if (!rc)
		rc = rq_mnt_monitor_start(m, &err);
	if (!rc && (rc = rq_mnt_rv_start(m)))
		rq_errf(&err, rc, "cannot start the remote read threads");
	if (rc) {
		if (ready)
			ready(ctx, rc, err.msg);
		return rc;
	}
	struct fuse_loop_config *cfg = fuse_loop_cfg_create();
	if (!cfg)
		return -ENOMEM;
	int nt = m->o.fuse_threads > 0 ? m->o.fuse_threads : 16;
	fuse_loop_cfg_set_max_threads(cfg, nt);
	fuse_loop_cfg_set_idle_threads(cfg, nt / 2 ? nt / 2 : 1);
	fuse_loop_cfg_set_clone_fd(cfg, 1);

	struct ready_ctx r = {.m = m, .fn = ready, .ctx = ctx};
	pthread_t rt;
	int have_rt = ready && !pthread_create(&rt, NULL, ready_thread, &r);
	int lrc = fuse_session_loop_mt(m->se, cfg);
	fuse_loop_cfg_destroy(cfg);
	if (lrc > 0)
		rq_mount_log(m, "stopping on signal %d", lrc);
	else
		rq_mount_log(m, "unmounted%s: stopping", lrc < 0 ? " (session error)" : "");
	/* Finish or fail what is parked before the connection goes away (then
	 * the monitor: its page invalidations may wait on parked reads). */
	rq_mnt_rv_stop(m);      /* parked remote reads EIO; jobs waiting on a fetch woken */
	rq_mnt_mat_stop(m);
	rq_mnt_jobs_stop(m);
	rq_mnt_rv_join(m);
	rq_mnt_monitor_stop(m);
	fuse_session_unmount(m->se);
	if (have_rt)
		pthread_join(rt, NULL);
	if (ready && !have_rt)
		ready(ctx, -EIO, "cannot start a thread");
	/* lrc > 0: the signal that ended the loop (SIGTERM/SIGINT/SIGHUP): a clean stop. */
	return lrc < 0 ? lrc : 0;
}

void rq_mount_close(struct rq_mount *m)
{
	if (!m)
		return;
	if (m->stuck) {
		/* Workers stuck in a hung file system may still use everything
		 * below (rq_mnt_jobs_stop): leave it all to the process exit. */
		rq_mount_log(m, "exiting with %d stuck worker%s: not freeing what they use",
		             m->stuck, m->stuck > 1 ? "s" : "");
		if (m->se)
			fuse_remove_signal_handlers(m->se);
		return;
	}
	if (m->se) {
		fuse_remove_signal_handlers(m->se);
		fuse_session_destroy(m->se);
	}
	rq_pt_free(m->pt);        /* after the session: its hooks ran until then */
	rq_mnt_files_free(m);
	rq_mnt_jobs_free(m);
	rq_mnt_rv_free(m);
	rq_mnt_remote_planned(m);
	rq_mnt_remote_free(m);
	if (m->srcs && m->plan)
		for (size_t i = 0; i < m->plan->nsrcs; i++)
			if (m->srcs[i].fd >= 0)
				close(m->srcs[i].fd);
	free(m->srcs);
	free(m->src_fds);
	rq_mnt_tree_free(m);
	rq_quantizer_close(m->q);
	if (m->o.rs && m->cache)           /* the store outlives the cache */
		rq_rs_set_budget(m->o.rs, m->o.cache_max, NULL, NULL);
	rq_cache_close(m->cache);
	rq_plan_free(m->plan);
	if (m->logf)
		fclose(m->logf);
	else if (!m->o.log_stderr)
		closelog();
	free(m->mnt);
	free(m->src);
	free(m->cache_dir);
	free(m->fuse_opts);
	pthread_mutex_destroy(&m->lock);
	pthread_cond_destroy(&m->work);
	pthread_mutex_destroy(&m->log_mu);
	pthread_mutex_destroy(&m->mon_mu);
	pthread_cond_destroy(&m->mon_cv);
	pthread_cond_destroy(&m->mat_cv);
	pthread_cond_destroy(&m->mat_done);
	free(m);
}
