/* main.c — `requantfs <command> ...` dispatcher.
 *
 * Also the mount(8) forms (README "Mount at boot"), both sent to `mount`:
 * mount.fuse3 runs `requantfs SRC MNT -o OPTS` for an fstab line of type
 * fuse.requantfs (argv[1] is a path or hub id, never a command), and a link
 * named mount.fuse.requantfs (or mount.requantfs) to this binary is run by
 * mount(8) as `mount.fuse.requantfs SRC MNT [-snv] -o OPTS`.
 *
 * The order of this folder (held by tests/tools/test_layout.py): each file
 * calls only the files below it.
 *
 *   main.c             the table of commands; `mount.fuse.requantfs` as mount(8) runs it
 *   cmd_mount.c        `mount` (and the daemon's start)
 *   cmd_umount.c       `umount`
 *   cmd_ctl.c          `warm`, `status`: clients of a mount's /.requantfs/
 *   cmd_export.c       `export`
 *   cmd_plan.c         `plan`
 *   cmd_verify.c       `verify`
 *   cmd_calib.c        `calib extract|fetch|run|diff`
 *   cmd_generate.c     `generate`
 *   cmd_compare.c      `compare`
 *   cmd_tokenize.c     `tokenize`: the ids a model's tokenizer gives a text
 *   calib_run.c        `calib run`: the calibration pass on real text
 *   compare_schemes.c  `compare SRC --schemes`: every scheme, one table
 *   compare_text.c     quality on real text: one window of a file, two models
 *   prompts.c          --prompts files, read only as far as --tokens needs
 *   utf8_stream.c      what `generate` prints of a token stream: whole UTF-8 only
 *   cli_scheme.c       --scheme/--recipe/--targets/--ignore/--calib for plan, export, mount
 *   export_hf.c        a verified remote SRC for export
 *   mount_hf.c         a remote SRC for the mount daemon
 *   cli_hf_cache.c     an hf:// SRC read from a mount's cache alone
 *   cli_hf.c           hf://ORG/NAME[@REV] as a SRC: model API, pinned commit
 *   cli.c              what the commands share: failures, sizes, progress bars
 */
#include "cli/cli.h"

#include <string.h>
#include <sys/stat.h>

static const struct {
	const char *name;
	int (*fn)(int, char **);
	const char *help;
} commands[] = {
	{"mount", cmd_mount, "mount SRC as the requantized checkpoint at MNT"},
	{"umount", cmd_umount, "unmount a requantfs mount"},
	{"warm", cmd_warm, "quantize every module of a mount now"},
	{"status", cmd_status, "what a mount has cached, hits/misses, device, throughput"},
	{"export", cmd_export, "write the requantized checkpoint as real files"},
	{"plan", cmd_plan, "what mount/export would present: modules, sizes, cache cost"},
	{"verify", cmd_verify, "compare tensors of two checkpoints byte for byte"},
	{"calib", cmd_calib, "calib extract|fetch: the scales of a 07-22 checkpoint (local or over HTTP);\n"
	                      "            calib run: calibrate any model on your text; calib diff: compare two"},
	{"generate", cmd_generate, "run a model (Laguna, llama, qwen, mixtral, ...) on a prompt"},
	{"compare", cmd_compare, "KL divergence / agreement between two model directories"},
	{"tokenize", cmd_tokenize, "the token ids a model's tokenizer gives a text (as llama-tokenize)"},
	{"bench", cmd_bench, "benchmarks: quant, export, mount, engine"},
	{"mkckpt", cmd_mkckpt, "make a synthetic Laguna-shaped checkpoint"},
};

static void usage(FILE *f)
{
	fprintf(f, "usage: requantfs <command> [options]   (requantfs <command> --help)\n\n"
	           "A FUSE filesystem that presents a Laguna NVFP4 checkpoint whose BF16 experts\n"
	           "(layers 40-47 of the 2026-08-01 release) are requantized to NVFP4 on first read,\n"
	           "or any safetensors checkpoint quantized (--scheme); SRC may be hf://ORG/NAME[@REV].\n\n"
	           "commands:\n");
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv)
{
	const char *base = strrchr(argv[0], '/');
	base = base ? base + 1 : argv[0];
	if (!strncmp(base, "mount.", 6) && argc >= 3)
		return cmd_mount(argc, argv);
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("requantfs %s\n", RQ_VERSION);
		return 0;
	}
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (!strcmp(argv[1], commands[i].name))
			return commands[i].fn(argc - 1, argv + 1);
	struct stat st;
	if (argc >= 3 && argv[1][0] != '-' && (strchr(argv[1], '/') || !stat(argv[1], &st)))
		return cmd_mount(argc, argv);     /* mount.fuse3: requantfs SRC MNT -o OPTS */
	fprintf(stderr, "requantfs: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
