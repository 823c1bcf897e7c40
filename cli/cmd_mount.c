/* cmd_mount.c — `requantfs mount` and `requantfs umount`.
 *
 * mount forks before anything starts a thread: the child opens the mount
 * (every refusal happens there, with its reason), reports over a pipe once
 * the kernel has answered through it, detaches and serves; the parent exits
 * 0 or 1 with the child's message. --foreground serves in this process.
 *
 * The mount(8) form: mount.fuse3 (for an /etc/fstab line of type
 * fuse.requantfs) runs `requantfs SRC MNT -o OPTS`, and a
 * mount.fuse.requantfs link to this binary is run as `mount.fuse.requantfs
 * SRC MNT [-snv] -o OPTS`; main.c sends both here. In OPTS (from any -o)
 * every long option that takes a value may be spelled KEY=VALUE
 * (calib=...,cache=...,device=..., '_' for '-' too); what is only mount(8)'s
 * or systemd's (nofail, noauto, _netdev, x-*, ...) is dropped, the FUSE
 * options requantfs sets itself (fsname, subtype, max_read) are refused, and
 * the rest goes to libfuse (allow_other, noatime, ...). */
#include "cli/cli.h"
#include "cli/cli_scheme.h"
#include "cli/cli_hf.h"
#include "cli/mount_hf.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <syslog.h>     /* _PATH_LOG */
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "fs/mount.h"
#include "qdev/qdev.h"

static void mount_usage(FILE *f)
{
	fprintf(f,
	"usage: requantfs mount SRC MNT --calib CALIB [options]\n"
	"       requantfs mount SRC MNT --scheme S [--targets T]... [--ignore I]... [options]\n\n"
	"Presents SRC (a checkpoint directory, a hub snapshot, a hub repo id\n"
	"ORG/NAME[@REV] found in the local hub cache, or hf://ORG/NAME[@REV] read\n"
	"straight from the hub) at MNT as the requantized checkpoint. Modules are\n"
	"quantized on first read and kept in the cache.\n\n"
	"  --calib CALIB          07-22 checkpoint directory, a `calib extract`/`fetch` file,\n"
	"                         a `calib run SRC` file (calibrated here), or\n"
	"                         hf://ORG/NAME[@REV] (fetched as `calib fetch` does,\n"
	"                         once per commit, and kept in the cache: HF_HUB_OFFLINE=1\n"
	"                         serves a commit or branch fetched before)\n"
	"  --endpoint URL         for hf://: the hub or a mirror with its resolve layout\n"
	"                         (default $HF_ENDPOINT, else https://huggingface.co);\n"
	"                         the token: $HF_TOKEN or huggingface_hub's token file.\n"
	"                         hf:// SRC: the revision is pinned to its commit; a file\n"
	"                         is fetched whole (chunks in parallel) on first read and\n"
	"                         kept while the mount presents bytes from it (a shard\n"
	"                         it requantizes: until materialized, then dropped);\n"
	"                         HF_HUB_OFFLINE=1 serves what the cache holds\n"
	"  --remote-verify MODE   hf:// SRC: file (default): a file's bytes (and the\n"
	"                         BF16 a job quantizes, and a shard's header) are served\n"
	"                         only once the whole file is fetched and its sha256\n"
	"                         checked; none: served as chunks arrive, checked when\n"
	"                         the file is whole (a server's wrong bytes can be served)\n"
	"  --cache DIR            cache directory (default $XDG_CACHE_HOME/requantfs,\n"
	"                         else ~/.cache/requantfs)\n"
	"  --device D             auto (default), cpu, cuda, cuda:N\n"
	"  --recipe V             fp32 (default), bf16, fp32div\n"
	"  --drop-ignore RULE     the ignore entry to drop (default: detect it)\n"
	"  --rule-scheme S        what that rule's modules become: nvfp4 (default, with\n"
	"                         CALIB's input scales), nvfp4a16 or fp8-dynamic (no\n"
	"                         --calib needed; a config group of their own)\n"
	"  --scheme S             instead of the Laguna fix, present any safetensors\n"
	"                         checkpoint quantized as llm-compressor's model_free_ptq\n"
	"                         would: nvfp4a16, fp8-dynamic, w8a16, w4a16 (no --calib;\n"
	"                         default recipe bf16); or nvfp4 (W4A4, as oneshot's NVFP4\n"
	"                         preset) with --calib FILE from `requantfs calib run`\n"
	"  --observer O           how the weights' group ranges are chosen: minmax\n"
	"                         (default), mse or expanded-mse (llm-compressor's MSE\n"
	"                         searches; BF16 weights, recipe bf16; on the CPU)\n"
	"  --targets T            with --scheme: a module to quantize (name, re:PATTERN or\n"
	"                         Linear = every module, the default); repeat for more\n"
	"  --ignore I             with --scheme: a module to leave alone; repeat for more\n"
	"                         (default: lm_head, re:.*embed_tokens$, re:.*\\.gate$ - the\n"
	"                         embedding and MoE routers, which vLLM cannot load\n"
	"                         quantized; giving --ignore replaces the whole list)\n"
	"  --foreground, -f       serve in this process, log to stderr\n"
	"  --threads N            CPU quantizer threads (default: all)\n"
	"  --workers N            quantization jobs in flight at once (default 2)\n"
	"  --prefetch N           jobs to quantize ahead of a reader (default 4, 0 = off)\n"
	"  --cache-max SIZE       cache size limit, e.g. 200G (default unlimited); an\n"
	"                         hf:// SRC's fetched files count too (evicted first)\n"
	"  --mem-max SIZE         outputs kept in memory when the cache is full (default 1G)\n"
	"  --gpu-mem SIZE         GPU buffer bound (default 1G); the CUDA context adds\n"
	"                         about 0.3-0.6 GB on top (status: gpu_context_bytes)\n"
	"  --gpu-idle SECONDS     release the GPU after this idle time (default 30)\n"
	"  --readahead KB         kernel readahead of the mount (default 8192, 0 = leave)\n"
	"  --passthrough MODE     auto (default): kernel passthrough for files that exist\n"
	"                         whole on disk (identical to SRC; requantized shards once\n"
	"                         materialized into the cache), when root on Linux >= 6.9;\n"
	"                         on: refuse to mount without it; off: the copy path only\n"
	"  --fuse-threads N       FUSE worker threads (default 16)\n"
	"  --log FILE             append the daemon's log here (default: syslog; without\n"
	"                         /dev/log: $XDG_STATE_HOME/requantfs/mount.log, else\n"
	"                         ~/.local/state/requantfs/mount.log; stderr with --foreground)\n"
	"  --log-level L          error, warn, info (default; logs each job: when, device,\n"
	"                         seconds, MB/s) or debug\n"
	"  -o OPTS                comma separated: FUSE mount options (allow_other: other\n"
	"                         users, e.g. vLLM in a container; a non-root user needs\n"
	"                         user_allow_other in /etc/fuse.conf), and any option above\n"
	"                         as KEY=VALUE (calib=...,cache=...): the fstab form\n"
	"  --debug                libfuse debug output (implies --foreground)\n"
	"  --help                 this text\n\n"
	"Unmount with `requantfs umount MNT`. As mount(8) runs it (fstab type\n"
	"fuse.requantfs): requantfs SRC MNT -o calib=CALIB,cache=DIR[,allow_other,...]\n"
	"Not root: through the setuid fusermount3, the copy path only (passthrough\n"
	"needs CAP_SYS_ADMIN).\n");
}

static char *abs_path(const char *p)
{
	if (!p)
		return NULL;
	char *r = realpath(p, NULL);
	if (r)
		return r;
	if (p[0] == '/')
		return strdup(p);
	char cwd[PATH_MAX];
	if (!getcwd(cwd, sizeof cwd))
		return strdup(p);
	char *s = NULL;
	if (asprintf(&s, "%s/%s", cwd, p) < 0)
		return NULL;
	return s;
}

static int parse_int(const char *s, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return -EINVAL;
	*out = v;
	return 0;
}

/* ---- daemon start-up reporting ---------------------------------------- */

struct report {
	int fd;           /* pipe to the waiting parent, -1 in the foreground */
	int quiet_stdio;  /* redirect stdio to /dev/null once ready */
	const char *src, *mnt;
	const char *endpoint;   /* hf:// SRC or --calib: --endpoint, or NULL */
};

static void ready_cb(void *ctx, int rc, const char *msg)
{
	struct report *r = ctx;
	if (r->fd < 0) {
		if (rc)
			fprintf(stderr, "requantfs mount: %s\n", msg);
		else
			fprintf(stderr, "requantfs mount: %s mounted at %s (Ctrl-C or `requantfs umount "
			        "%s` to stop)\n", r->src, r->mnt, r->mnt);
		return;
	}
	char buf[1100];
	int n = snprintf(buf, sizeof buf, "%c%s", rc ? 'E' : 'O', rc ? msg : "");
	if (write(r->fd, buf, (size_t)n) < 0) {
		/* the parent is gone: nothing to tell */
	}
	close(r->fd);
	r->fd = -2;
	if (!rc && r->quiet_stdio) {
		int nul = open("/dev/null", O_RDWR);
		if (nul >= 0) {
			dup2(nul, 0);
			dup2(nul, 1);
			dup2(nul, 2);
			if (nul > 2)
				close(nul);
		}
	}
}

static int serve(const struct rq_mount_opts *opts, struct report *r)
{
	struct rq_mount *m = NULL;
	struct rq_err err = {0};
	struct rq_mount_opts o = *opts;
	struct mount_hf *hf = NULL;
	int rc = 0;
	/* hf:// SRC (or --calib): here, in the daemon, after the fork: the
	 * curl handles and the chunk store's threads must be its own */
	if (cli_hf_is(o.src) || cli_hf_is(o.calib)) {
		if (!cli_hf_is(o.src))
			rc = rq_errf(&err, -EINVAL, "--calib %s: an hf:// calibration needs an hf:// "
			             "SRC with mount (or fetch it: `requantfs calib fetch`)", o.calib);
		else
			rc = mount_hf_open(&o, r->endpoint, &hf, &err);
	}
	if (!rc)
		rc = rq_mount_open(&o, &m, &err);
	if (rc) {
		mount_hf_close(hf);
		if (r->fd >= 0) {
			ready_cb(r, rc, err.msg);
			return 1;
		}
		return cli_fail(1, "mount", "%s", err.msg);
	}
	mount_hf_attach(hf, m);
	rc = rq_mount_run(m, ready_cb, r);
	mount_hf_attach(hf, NULL);
	rq_mount_close(m);
	mount_hf_close(hf);
	return rc ? 1 : 0;
}

/* ---- the command line ------------------------------------------------ */

enum { O_CACHE = 256, O_DEVICE, O_THREADS, O_WORKERS,
       O_PREFETCH, O_CACHEMAX, O_MEMMAX, O_GPUMEM, O_GPUIDLE, O_RA, O_FT, O_LOG, O_DEBUG, O_PT, O_LOGLEVEL, O_ENDPOINT,
       O_RVERIFY };

static const struct option mount_lo[] = {
	CLI_SCHEME_OPTIONS, {"cache", required_argument, 0, O_CACHE},
	{"device", required_argument, 0, O_DEVICE}, {"foreground", no_argument, 0, 'f'},
	{"threads", required_argument, 0, O_THREADS},
	{"workers", required_argument, 0, O_WORKERS},
	{"prefetch", required_argument, 0, O_PREFETCH},
	{"cache-max", required_argument, 0, O_CACHEMAX},
	{"mem-max", required_argument, 0, O_MEMMAX},
	{"gpu-mem", required_argument, 0, O_GPUMEM},
	{"gpu-idle", required_argument, 0, O_GPUIDLE},
	{"readahead", required_argument, 0, O_RA},
	{"passthrough", required_argument, 0, O_PT},
	{"fuse-threads", required_argument, 0, O_FT}, {"log", required_argument, 0, O_LOG},
	{"log-level", required_argument, 0, O_LOGLEVEL},
	{"endpoint", required_argument, 0, O_ENDPOINT},
	{"remote-verify", required_argument, 0, O_RVERIFY},
	{"debug", no_argument, 0, O_DEBUG}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};

/* What the command line asked for; paths still as given. */
struct mount_args {
	struct rq_mount_opts o;
	const char *cache, *log;
	const char *endpoint; /* --endpoint (hf:// SRC or --calib) */
	int rv_given;         /* --remote-verify given (hf:// SRC only) */
	int fg;
	int helper;           /* run as mount(8)'s helper: accept -s -n -v -N -t */
	char *fuse_extra;     /* the -o words for libfuse, comma separated (owned) */
	char *keep[64];       /* copies of KEY=VALUE values that o points into */
	int nkeep;
	struct cli_scheme sc;  /* --scheme, --recipe, --targets, ... (o points into it) */
};

static void args_free(struct mount_args *a)
{
	free(a->fuse_extra);
	cli_scheme_free(&a->sc);
	for (int i = 0; i < a->nkeep; i++)
		free(a->keep[i]);
}

/* The options that take a count, a size or seconds: 0, or 2 with the
 * message printed. */
static int number_option(int c, const char *arg, struct rq_mount_opts *o)
{
	long v;
	unsigned long long sz;
	char *end;
	switch (c) {
	case O_THREADS:
		if (parse_int(arg, 0, 4096, &v))
			return cli_fail(2, "mount", "--threads needs a number (got '%s')", arg);
		o->threads = (int)v;
		break;
	case O_WORKERS:
		if (parse_int(arg, 1, 64, &v))
			return cli_fail(2, "mount", "--workers needs 1..64 (got '%s')", arg);
		o->workers = (int)v;
		break;
	case O_PREFETCH:
		if (parse_int(arg, 0, 4096, &v))
			return cli_fail(2, "mount", "--prefetch needs 0..4096 (got '%s')", arg);
		o->prefetch = (int)v;
		break;
	case O_FT:
		if (parse_int(arg, 1, 1024, &v))
			return cli_fail(2, "mount", "--fuse-threads needs 1..1024 (got '%s')", arg);
		o->fuse_threads = (int)v;
		break;
	case O_RA:
		if (parse_int(arg, 0, 1 << 20, &v))
			return cli_fail(2, "mount", "--readahead needs KiB, 0..1048576 (got '%s')", arg);
		o->readahead_kb = (unsigned)v;
		break;
	case O_CACHEMAX:
	case O_MEMMAX:
	case O_GPUMEM:
		if (cli_parse_size(arg, &sz))
			return cli_fail(2, "mount", "%s needs a size like 512M or 20G (got '%s')",
			                c == O_CACHEMAX ? "--cache-max" : c == O_MEMMAX ? "--mem-max"
			                : "--gpu-mem", arg);
		if (c == O_CACHEMAX)
			o->cache_max = sz;
		else if (c == O_MEMMAX)
			o->mem_max = sz;
		else
			o->gpu_mem = (size_t)sz;
		break;
	case O_GPUIDLE:
		errno = 0;
		o->gpu_idle_s = strtod(arg, &end);
		if (errno || end == arg || *end || o->gpu_idle_s < 0)
			return cli_fail(2, "mount", "--gpu-idle needs seconds (got '%s')", arg);
		break;
	}
	return 0;
}

/* The options that name a choice or a path: 0, or 2 with the message printed. */
static int word_option(int c, const char *arg, struct mount_args *a)
{
	enum rq_device_kind kind;
	int index, rc = cli_scheme_option(&a->sc, "mount", c, arg);
	if (rc >= 0)
		return rc;
	switch (c) {
	case O_CACHE: a->cache = arg; break;
	case O_ENDPOINT: a->endpoint = arg; break;
	case O_LOG: a->log = arg; break;
	case O_DEVICE:
		if (rq_device_parse(arg, &kind, &index))
			return cli_fail(2, "mount", "--device must be auto, cpu, cuda or cuda:N "
			                "(got '%s')", arg);
		a->o.device = arg;
		break;
	case O_PT:
		if (!strcmp(arg, "auto"))
			a->o.passthrough = RQ_PT_AUTO;
		else if (!strcmp(arg, "on"))
			a->o.passthrough = RQ_PT_ON;
		else if (!strcmp(arg, "off"))
			a->o.passthrough = RQ_PT_OFF;
		else
			return cli_fail(2, "mount", "--passthrough must be auto, on or off (got '%s')",
			                arg);
		break;
	case O_RVERIFY:
		a->rv_given = 1;
		if (!strcmp(arg, "file"))
			a->o.remote_verify = RQ_RV_FILE;
		else if (!strcmp(arg, "none"))
			a->o.remote_verify = RQ_RV_NONE;
		else
			return cli_fail(2, "mount", "--remote-verify must be file or none (got '%s')",
			                arg);
		break;
	case O_LOGLEVEL:
		if (!strcmp(arg, "error"))
			a->o.log_level = RQ_LOG_ERROR;
		else if (!strcmp(arg, "warn") || !strcmp(arg, "warning"))
			a->o.log_level = RQ_LOG_WARN;
		else if (!strcmp(arg, "info"))
			a->o.log_level = RQ_LOG_INFO;
		else if (!strcmp(arg, "debug"))
			a->o.log_level = RQ_LOG_DEBUG;
		else
			return cli_fail(2, "mount", "--log-level must be error, warn, info or debug "
			                "(got '%s')", arg);
		break;
	}
	return 0;
}

static int is_number_option(int c)
{
	return c == O_THREADS || c == O_WORKERS || c == O_PREFETCH || c == O_CACHEMAX ||
	       c == O_MEMMAX || c == O_GPUMEM || c == O_GPUIDLE || c == O_RA || c == O_FT;
}

/* Words of an fstab options field that are mount(8)'s, systemd's or
 * mount.fuse3's, not the file system's: dropped. ro is implied (the mount
 * is read-only) and rw cannot be had; dev and suid (mount.fuse3 adds them
 * unless nodev/nosuid) are dropped so that the mount stays nodev,nosuid as
 * libfuse makes it. */
static int mount8_word(const char *w)
{
	static const char *const words[] = {"", "defaults", "ro", "rw", "auto", "noauto",
		"nofail", "user", "users", "nouser", "owner", "group", "_netdev", "dev", "suid"};
	for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
		if (!strcmp(w, words[i]))
			return 1;
	return !strncmp(w, "x-", 2) || !strncmp(w, "comment=", 8);
}

/* FUSE options requantfs sets itself (fs/mount_run.c, build_fuse_opts):
 * the mount's identity, which `umount` and `status` rely on, and its read
 * size. A user's value would win over ours in libfuse, so it is refused;
 * default_permissions is always on and only warned about. blkdev would make
 * the mount a fuseblk one. Returns 1 when w was handled (*rc set). */
static int own_option(const char *w, int *rc)
{
	static const struct {
		const char *key, *why;
	} own[] = {
		{"fsname", "requantfs sets it to requantfs@PID, how `requantfs umount` finds the "
		           "daemon"},
		{"subtype", "requantfs sets it, so the mount shows as fuse.requantfs for `requantfs "
		            "umount` and `status`"},
		{"max_read", "requantfs sets it (1 MiB reads)"},
		{"blkdev", "it would make the mount fuseblk, not fuse.requantfs"},
	};
	size_t kl = strcspn(w, "=");
	for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
		if (strlen(own[i].key) == kl && !strncmp(w, own[i].key, kl)) {
			*rc = cli_fail(2, "mount", "-o %s: not allowed: %s; remove it from -o (or from "
			               "the fstab line)", w, own[i].why);
			return 1;
		}
	if (!strcmp(w, "default_permissions")) {
		fprintf(stderr, "requantfs mount: warning: -o default_permissions: always on; "
		        "ignored\n");
		*rc = 0;
		return 1;
	}
	return 0;
}

/* One -o list: KEY=VALUE of a long option goes to it, mount(8)'s words are
 * dropped, requantfs's own FUSE options refused, the rest is kept for
 * libfuse. 0, or 2 with the message printed. */
static int o_option(const char *list, struct mount_args *a)
{
	char *copy = strdup(list);
	if (!copy)
		return cli_fail(2, "mount", "out of memory");
	int rc = 0;
	char *save = NULL;
	for (char *w = strtok_r(copy, ",", &save); w && !rc; w = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(w, '=');
		const struct option *lo = NULL;
		if (eq) {
			char key[64];
			size_t kl = (size_t)(eq - w);
			if (kl < sizeof key) {
				for (size_t i = 0; i < kl; i++)
					key[i] = w[i] == '_' ? '-' : w[i];
				key[kl] = 0;
				for (const struct option *l = mount_lo; l->name; l++)
					if (l->has_arg == required_argument && !strcmp(l->name, key))
						lo = l;
			}
		}
		if (lo) {
			if (a->nkeep == (int)(sizeof a->keep / sizeof a->keep[0])) {
				rc = cli_fail(2, "mount", "too many -o KEY=VALUE options");
				break;
			}
			char *v = a->keep[a->nkeep++] = strdup(eq + 1);
			if (!v) {
				rc = cli_fail(2, "mount", "out of memory");
				break;
			}
			rc = is_number_option(lo->val) ? number_option(lo->val, v, &a->o)
			                               : word_option(lo->val, v, a);
			continue;
		}
		if (mount8_word(w) || own_option(w, &rc))
			continue;
		char *s = NULL;
		if (asprintf(&s, "%s%s%s", a->fuse_extra ? a->fuse_extra : "",
		             a->fuse_extra ? "," : "", w) < 0) {
			rc = cli_fail(2, "mount", "out of memory");
			break;
		}
		free(a->fuse_extra);
		a->fuse_extra = s;
	}
	free(copy);
	a->o.fuse_opts = a->fuse_extra;
	return rc;
}

/* Fills a from argv; -1 to go on mounting, else the exit code (0 for
 * --help, 2 for a usage error, message printed). */
static int parse_args(int argc, char **argv, struct mount_args *a)
{
	int c, rc;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, a->helper ? "fho:snvN:t:" : "fho:", mount_lo,
	                        NULL)) != -1) {
		switch (c) {
		case 'h': mount_usage(stdout); return 0;
		case 'f': a->fg = 1; break;
		case 's': case 'n': case 'v': case 'N': case 't':
			break;   /* mount(8)'s: sloppy, no mtab, verbose, namespace, type */
		case O_DEBUG: a->o.debug = 1; a->fg = 1; break;
		case 'o':
			if ((rc = o_option(optarg, a)))
				return rc;
			break;
		case CLI_O_SCHEME: case CLI_O_RECIPE: case CLI_O_TARGETS: case CLI_O_IGNORE:
		case CLI_O_CALIB: case CLI_O_DROP: case CLI_O_RULE: case CLI_O_OBSERVER:
		case O_CACHE: case O_DEVICE:
		case O_LOG: case O_PT:
		case O_LOGLEVEL: case O_ENDPOINT: case O_RVERIFY:
			if ((rc = word_option(c, optarg, a)))
				return rc;
			break;
		case O_THREADS: case O_WORKERS: case O_PREFETCH: case O_CACHEMAX: case O_MEMMAX:
		case O_GPUMEM: case O_GPUIDLE: case O_RA: case O_FT:
			if ((rc = number_option(c, optarg, &a->o)))
				return rc;
			break;
		default:
			mount_usage(stderr);
			return cli_fail(2, "mount", "unknown or incomplete option '%s'", argv[optind - 1]);
		}
	}
	if (argc - optind != 2) {
		mount_usage(stderr);
		return cli_fail(2, "mount", "needs SRC and MNT (got %d arguments)", argc - optind);
	}
	rc = cli_scheme_check(&a->sc, "mount", "--calib CALIB is required (-o calib=CALIB in the "
	                           "fstab form): the 07-22 checkpoint, or the file of `requantfs "
	                           "calib fetch` (its scales over HTTP) or of `requantfs calib run "
	                           "SRC --text FILE -o FILE` (calibrated here); or --rule-scheme "
	                           "nvfp4a16|fp8-dynamic (no calibration), or a data-free --scheme");
	if (rc < 0)
		CLI_SCHEME_TO(&a->o, &a->sc);
	return rc;
}

/* ---- the daemon ------------------------------------------------------ */

/* Whether syslog(3) reaches a logger: /dev/log is a socket. A container or
 * a minimal system may have none, and syslog() then drops every line. */
static int have_syslog(void)
{
	struct stat st;
	return !stat(_PATH_LOG, &st) && S_ISSOCK(st.st_mode);
}

static int mkdir_p(char *path, mode_t mode)
{
	for (char *p = path + 1; *p; p++)
		if (*p == '/') {
			*p = 0;
			int r = mkdir(path, mode);
			*p = '/';
			if (r && errno != EEXIST)
				return -1;
		}
	return mkdir(path, mode) && errno != EEXIST ? -1 : 0;
}

/* The daemon's log file when there is no syslog: $XDG_STATE_HOME/requantfs/
 * mount.log, else ~/.local/state/requantfs/mount.log; NULL if neither
 * directory can be made. */
static char *state_log(void)
{
	const char *x = getenv("XDG_STATE_HOME"), *h = getenv("HOME");
	char *dir = NULL, *s = NULL;
	int r = -1;
	if (x && *x == '/')
		r = asprintf(&dir, "%s/requantfs", x);
	else if (h && *h == '/')
		r = asprintf(&dir, "%s/.local/state/requantfs", h);
	if (r >= 0 && !mkdir_p(dir, 0700) && !access(dir, W_OK) &&
	    asprintf(&s, "%s/mount.log", dir) < 0)
		s = NULL;
	free(r >= 0 ? dir : NULL);
	return s;
}

/* Forks the daemon, which serves o, and waits for its report: the exit code. */
static int start_daemon(const struct rq_mount_opts *o, const char *endpoint)
{
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC))
		return cli_fail(1, "mount", "pipe: %s", strerror(errno));
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		return cli_fail(1, "mount", "fork: %s", strerror(errno));
	if (pid == 0) {
		close(pfd[0]);
		setsid();
		if (chdir("/")) {
			/* paths are absolute already */
		}
		struct report r = {.fd = pfd[1], .quiet_stdio = 1, .src = o->src, .mnt = o->mnt,
		                   .endpoint = endpoint};
		_exit(serve(o, &r));
	}
	close(pfd[1]);
	char msg[1200];
	size_t n = 0;
	ssize_t k;
	while (n < sizeof msg - 1 && (k = read(pfd[0], msg + n, sizeof msg - 1 - n)) != 0) {
		if (k < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		n += (size_t)k;
	}
	msg[n] = 0;
	close(pfd[0]);
	if (n && msg[0] == 'O') {
		printf("requantfs: %s mounted at %s (daemon pid %d%s%s)\n", o->src, o->mnt, (int)pid,
		       o->log_path ? "; log " : "", o->log_path ? o->log_path : "");
		return 0;
	}
	if (n && msg[0] == 'E') {
		waitpid(pid, NULL, 0);
		return cli_fail(1, "mount", "%s", msg + 1);
	}
	int st = 0;
	waitpid(pid, &st, 0);
	return cli_fail(1, "mount", "the daemon exited during start-up (%s %d); run with "
	                "--foreground to see why", WIFSIGNALED(st) ? "signal" : "status",
	                WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
}

int cmd_mount(int argc, char **argv)
{
	struct mount_args a = {.o = {.device = "auto", .recipe = RQ_RECIPE_FP32, .prefetch = 4,
	                             .gpu_idle_s = 30, .readahead_kb = 8192},
	                       .helper = strcmp(argv[0], "mount") != 0};
	int rc = parse_args(argc, argv, &a);
	if (rc >= 0) {
		args_free(&a);
		return rc;
	}
	struct rq_mount_opts *o = &a.o;
	const char *src_arg = argv[optind];    /* ORG/NAME[@REV] ids: hub cache snapshots */
	if (a.endpoint && !cli_hf_is(src_arg) && !cli_hf_is(o->calib)) {
		args_free(&a);
		return cli_fail(2, "mount", "--endpoint is for an hf://ORG/NAME[@REV] SRC or --calib");
	}
	if (a.rv_given && !cli_hf_is(src_arg)) {
		args_free(&a);
		return cli_fail(2, "mount", "--remote-verify is for an hf://ORG/NAME[@REV] SRC: %s is "
		                "read from disk, leave it out", src_arg);
	}
	if (!cli_hf_is(src_arg) && (rc = cli_hub_args("mount", &src_arg, &o->calib)) >= 0) {
		args_free(&a);
		return rc;
	}
	/* hf://: resolved by the daemon (mount_hf.c), not here */
	char *src = cli_hf_is(src_arg) ? strdup(src_arg) : abs_path(src_arg);
	char *mnt = abs_path(argv[optind + 1]);
	char *calib = cli_hf_is(o->calib) ? strdup(o->calib) : abs_path(o->calib);
	char *cdir = a.cache ? abs_path(a.cache) : cli_default_cache();
	char *logp = a.log ? abs_path(a.log) : NULL;
	if (!a.log && !a.fg && !have_syslog()) {
		logp = state_log();
		if (!logp)
			fprintf(stderr, "requantfs mount: warning: no syslog socket (%s) and no state "
			        "directory ($XDG_STATE_HOME or ~/.local/state): the daemon's log is "
			        "lost; pass --log FILE\n", _PATH_LOG);
	}
	if (!src || !mnt || (o->calib && !calib) || !cdir || (a.log && !logp)) {
		rc = cli_fail(1, "mount", "out of memory");
		goto out;
	}
	o->src = src;
	o->mnt = mnt;
	o->calib = calib;
	o->cache_dir = cdir;
	o->log_path = logp;
	o->log_stderr = a.fg && !logp;
	if (a.fg) {
		struct report r = {.fd = -1, .src = src, .mnt = mnt, .endpoint = a.endpoint};
		rc = serve(o, &r);
	} else {
		rc = start_daemon(o, a.endpoint);
	}
out:
	free(src);
	free(mnt);
	free(calib);
	free(cdir);
	free(logp);
	args_free(&a);
	return rc;
}
