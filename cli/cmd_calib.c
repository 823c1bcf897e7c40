/* cmd_calib.c — `requantfs calib extract CALIB_DIR -o FILE` and
 * `requantfs calib fetch [REPO[@REV]] -o FILE`: the same calibration file,
 * from a 07-22 checkpoint on disk or on a Hugging Face hub. */
#include "cli/cli.h"
#include "cli/calib_run.h"
#include "cli/cli_hf.h"
#include "base/err.h"
#include "offline/calib.h"
#include "plan/ckpt.h"
#include "hub/hub.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The 2026-07-22 all-NVFP4 revision of Laguna S 2.1 (SPEC.md section 1). */
#define DEFAULT_REPO "poolside/Laguna-S-2.1-NVFP4"
#define DEFAULT_REV "07614121b3"

static void usage(FILE *f)
{
	fprintf(f,
	"usage: requantfs calib extract CALIB_DIR -o FILE\n"
	"       requantfs calib fetch [REPO[@REV]] -o FILE [--endpoint URL] [--quiet]\n"
	"       requantfs calib run MODEL (--text FILE | --prompts FILE) -o FILE [...]\n"
	"       requantfs calib diff A B     (calib run --help)\n\n"
	"extract and fetch save every <module>.input_global_scale of a 2026-07-22\n"
	"(all-NVFP4) checkpoint into FILE, a small safetensors file that --calib accepts\n"
	"instead of the whole checkpoint. Only the headers and the 4-byte scalars are read.\n"
	"run calibrates any model itself (the engine over your text: W4A4 for --scheme\n"
	"nvfp4, or Laguna 08-01 without the 07-22 revision); diff compares two\n"
	"calibration files module by module (see `requantfs calib run --help`).\n\n"
	"extract reads CALIB_DIR on disk. fetch reads a hub repository over HTTP(S)\n"
	"with range requests: the index, each needed shard's header and the scalars\n"
	"(kilobytes to megabytes, never the weights); both write the same bytes.\n"
	"REPO@REV defaults to " DEFAULT_REPO "@" DEFAULT_REV " (REV: main when\n"
	"omitted).\n\n"
	"fetch options:\n"
	"  -o, --output FILE   where to write (atomically)\n"
	"  --endpoint URL      hub to ask (default $HF_ENDPOINT, else https://huggingface.co)\n"
	"  -q, --quiet         no progress line and no summary\n\n"
	"The token for gated or private repositories is $HF_TOKEN, else the file\n"
	"huggingface_hub writes ($HF_TOKEN_PATH, $HF_HOME/token, ~/.cache/huggingface/token);\n"
	"it is not sent on when the hub redirects to another host. Failed requests\n"
	"(429, 5xx, time-outs) are retried %d times with back-off; HF_HUB_DOWNLOAD_TIMEOUT\n"
	"(seconds, default 10) bounds connecting and a stalled transfer, and each request\n"
	"must end within HF_HUB_DOWNLOAD_TIMEOUT + its bytes / REQUANTFS_HUB_MIN_RATE\n"
	"(bytes per second, K/M/G allowed, default 64K).\n", RQ_HUB_TRIES - 1);
}

static int do_extract(int argc, char **argv)
{
	static const struct option opts[] = {
		{"output", required_argument, 0, 'o'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	const char *out = NULL;
	int c;
	while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
		switch (c) {
		case 'o': out = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (argc - optind != 1 || !out) {
		usage(stderr);
		return cli_fail(2, "calib extract", "%s", !out ? "-o FILE is required (where to write "
		                "the scales)" : "needs one CALIB_DIR");
	}
	struct rq_err err = {0};
	size_t n = 0;
	if (rq_calib_extract(argv[optind], out, &n, &err))
		return cli_fail(1, "calib extract", "%s", err.msg);
	fprintf(stderr, "requantfs calib extract: %zu scales written to %s\n", n, out);
	return 0;
}

/* The progress line (stderr is a terminal): requests and bytes so far. */
static void progress(void *ctx, const struct rq_hub_stats *s)
{
	char hb[32];
	cli_human_bytes((double)s->bytes, hb, sizeof hb);
	fprintf(stderr, "\rrequantfs calib fetch: %llu requests, %s%s", (unsigned long long)s->requests,
	        hb, s->retries ? " (retrying)" : "");
	*(int *)ctx = 1;
}

static int do_fetch(int argc, char **argv)
{
	static const struct option opts[] = {
		{"output", required_argument, 0, 'o'}, {"endpoint", required_argument, 0, 'e'},
		{"quiet", no_argument, 0, 'q'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	const char *out = NULL, *endpoint = NULL;
	int c, quiet = 0;
	while ((c = getopt_long(argc, argv, "o:qh", opts, NULL)) != -1) {
		switch (c) {
		case 'o': out = optarg; break;
		case 'e': endpoint = optarg; break;
		case 'q': quiet = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (argc - optind > 1 || !out) {
		usage(stderr);
		return cli_fail(2, "calib fetch", "%s", !out ? "-o FILE is required (where to write "
		                "the scales)" : "takes at most one REPO[@REV]");
	}
	if (cli_hf_offline())   /* huggingface_hub's meaning: connect to nothing */
		return cli_fail(1, "calib fetch", "HF_HUB_OFFLINE=1: calib fetch reads the hub over "
		                "HTTP; unset HF_HUB_OFFLINE, or run `requantfs calib extract` on a "
		                "local copy of the 07-22 checkpoint");
	char id[1024];
	const char *arg = argc - optind == 1 ? argv[optind] : DEFAULT_REPO "@" DEFAULT_REV;
	snprintf(id, sizeof id, "%s", arg);
	char *at = strchr(id, '@');              /* repo ids hold no '@' */
	const char *rev = "main";
	if (at) {
		*at = 0;
		rev = at + 1;
	}
	int bad = !*id || !*rev || strchr(rev, '@') || strstr(id, "..") || id[0] == '/' ||
	          id[strlen(id) - 1] == '/';
	for (const char *p = id; *p && !bad; p++)
		bad = !isalnum((unsigned char)*p) && !strchr("-._/", *p);
	if (bad)
		return cli_fail(2, "calib fetch", "'%s' is not REPO[@REVISION] (e.g. %s@%s)",
		                arg, DEFAULT_REPO, DEFAULT_REV);
	int drawn = 0, tty = !quiet && isatty(2);
	struct rq_err err = {0};
	struct rq_hub_stats st = {0};
	size_t n = 0;
	int rc = rq_calib_fetch(endpoint, id, rev, out, &n, &st, tty ? progress : NULL, &drawn, &err);
	if (drawn)
		fputc('\n', stderr);
	if (rc)
		return cli_fail(1, "calib fetch", "%s", err.msg[0] ? err.msg : strerror(-rc));
	if (!quiet) {
		char hb[32];
		cli_human_bytes((double)st.bytes, hb, sizeof hb);
		fprintf(stderr, "requantfs calib fetch: %zu scales from %s@%s written to %s "
		        "(%llu requests, %llu bytes = %s read%s)\n", n, id, rev, out,
		        (unsigned long long)st.requests, (unsigned long long)st.bytes, hb,
		        st.retries ? ", with retries" : "");
	}
	return 0;
}

int cmd_calib(int argc, char **argv)
{
	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		usage(stdout);
		return 0;
	}
	if (argc >= 2 && !strcmp(argv[1], "run"))
		return calib_run_main(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "diff"))
		return calib_diff_main(argc - 1, argv + 1);
	if (argc < 2 || (strcmp(argv[1], "extract") && strcmp(argv[1], "fetch"))) {
		usage(stderr);
		return 2;
	}
	int fetch = !strcmp(argv[1], "fetch");
	return fetch ? do_fetch(argc - 1, argv + 1) : do_extract(argc - 1, argv + 1);
}
