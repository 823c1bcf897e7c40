/* cmd_calib.c — `requantfs calib extract CALIB_DIR -o FILE`. */
#include "tools/cli.h"
#include "base/err.h"
#include "fs/ckpt.h"

#include <getopt.h>
#include <string.h>

static void usage(FILE *f)
{
	fprintf(f,
	"usage: requantfs calib extract CALIB_DIR -o FILE\n\n"
	"Saves every <module>.input_global_scale of a 2026-07-22 (all-NVFP4) checkpoint\n"
	"into FILE, a small safetensors file that --calib accepts instead of the whole\n"
	"checkpoint. Only the headers and the 4-byte scalars are read.\n");
}

int cmd_calib(int argc, char **argv)
{
	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		usage(stdout);
		return 0;
	}
	if (argc < 2 || strcmp(argv[1], "extract")) {
		usage(stderr);
		return 2;
	}
	static const struct option opts[] = {
		{"output", required_argument, 0, 'o'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	const char *out = NULL;
	int c;
	argc--;
	argv++;
	while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
		switch (c) {
		case 'o': out = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (argc - optind != 1 || !out) {
		usage(stderr);
		return 2;
	}
	struct rq_err err = {0};
	size_t n = 0;
	if (rq_calib_extract(argv[optind], out, &n, &err))
		return cli_fail(1, "calib extract", "%s", err.msg);
	fprintf(stderr, "requantfs calib extract: %zu scales written to %s\n", n, out);
	return 0;
}
