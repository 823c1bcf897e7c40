/* cmd_verify.c — `requantfs verify DIR --against REF [--tensors REGEX] [--source SRC]`. */
#include "cli/cli.h"
#include "cli/cli_hf.h"
#include "base/err.h"
#include "offline/export.h"
#include "offline/verify.h"
#include "quant/quant.h"

#include <errno.h>
#include <getopt.h>
#include <string.h>

static void usage(FILE *f)
{
	fprintf(f,
	"usage: requantfs verify DIR --against REF [--tensors REGEX] [--source SRC] [--quiet]\n"
	"       requantfs verify DIR [--full]  (DIR made by `requantfs export --link`)\n\n"
	"Compares, byte for byte, every tensor present in both checkpoints and prints,\n"
	"per tensor, 'equal' or how many bytes differ. Where DIR (or --source) holds a\n"
	"module as a BF16 weight and REF holds it as NVFP4, it quantizes it with each\n"
	"recipe variant and says which one reproduces REF's bytes. This is how to prove\n"
	"bit-exactness on the real checkpoints, e.g.\n"
	"  requantfs verify MNT --against LAGUNA-0722 --tensors 'layers\\.4[0-7]\\.mlp\\.experts'\n"
	"  requantfs verify SRC-0801 --against LAGUNA-0722 --tensors 'layers\\.40\\.'\n\n"
	"DIR, REF and SRC are directories, hub repo ids ORG/NAME[@REV] in the local\n"
	"hub cache, or hf://ORG/NAME[@REV] read from the hub by range (only the\n"
	"headers and the tensors compared are fetched, neighbours merged into requests\n"
	"of up to 64 MiB, at most 128 MiB held per side; --endpoint URL, $HF_ENDPOINT,\n"
	"$HF_TOKEN as `calib fetch`). The hf:// bytes compared are not sha256-verified\n"
	"(the hub hashes whole files only; checking them would fetch every file whole):\n"
	"a difference may be the server's; `export hf://` checks every byte it uses.\n"
	"  --tensors REGEX  only tensors whose name contains a match (Python re.search)\n"
	"  --source SRC     BF16 checkpoint for the recipe diagnosis of modules that differ\n"
	"  --quiet          print only differences and the summary\n"
	"When DIR was made by `export --link`, its links are checked first against the\n"
	"manifest the export left: each file SRC changed (or removed) since is named,\n"
	"and verify fails; without --against that is all it checks. By default a link\n"
	"passes when the file it shows has the size, inode and mtime recorded, and the\n"
	"ctime recorded or, when its ctime moved (a rewrite in place with the mtime set\n"
	"back, or chmod, chown, a hard link added or removed), the bytes the export\n"
	"hashed: only those files are read.\n"
	"  --full           read every linked file whole: it passes when its bytes hash\n"
	"                   (XXH3-128) to what the export hashed, whatever its metadata\n"
	"                   did; it also catches what no metadata shows (bit rot, a\n"
	"                   rewrite that set the ctime back)\n"
	"Exit status: 0 when every compared tensor is equal and every diagnosed module is\n"
	"reproduced by some variant (and every link still shows what was exported), 1\n"
	"otherwise.\n");
}

struct out {
	int quiet;
};

static void variants_text(unsigned v, char *buf, size_t len)
{
	buf[0] = 0;
	for (int r = 0; r < RQ_RECIPE_COUNT; r++)
		if (v & (1u << r))
			snprintf(buf + strlen(buf), len - strlen(buf), "%s%s", buf[0] ? ", " : "",
			         rq_recipe_name((enum rq_recipe)r));
}

static void on_result(void *ctx, const struct rq_vresult *r)
{
	struct out *o = ctx;
	if (r->kind == RQ_V_TENSOR) {
		if (r->shape_mismatch)
			printf("DIFFER  %s: dtype or shape differ\n", r->name);
		else if (r->ndiff)
			printf("DIFFER  %s: %llu of %llu bytes differ\n", r->name,
			       (unsigned long long)r->ndiff, (unsigned long long)r->bytes);
		else if (!o->quiet)
			printf("equal   %s\n", r->name);
		return;
	}
	char v[64];
	variants_text(r->variants, v, sizeof v);
	if (r->variants)
		printf("recipe  %s: REF reproduced by %s\n", r->name, v);
	else
		printf("recipe  %s: no variant reproduces REF (closest differs in %llu bytes)\n",
		       r->name, (unsigned long long)r->best_ndiff);
}

static void on_bad_link(void *ctx, const char *name, const char *why)
{
	printf("CHANGED %s: %s\n", name, why);
}

/* The links of an `export --link` DIR: 0 all good (or not a linked export),
 * 1 some changed, -1 an error (printed), -2 a usage error (printed). must: DIR has to be a linked export
 * (verify DIR without --against). */
static int check_links(const char *dir, int must, int full)
{
	struct rq_err err = {0};
	size_t n = 0, bad = 0;
	int rc = rq_export_check_links(dir, full, on_bad_link, NULL, &n, &bad, &err);
	if (rc == -ENOENT) {
		if (!must && !full)
			return 0;
		usage(stderr);
		cli_fail(2, "verify", "%s has no %s (it was not made by `export --link`): %s", dir,
		         EXPORT_MANIFEST, full ? "--full checks the links of a linked export; leave "
		         "it out" : "give --against REF");
		return -2;
	}
	if (rc) {
		cli_fail(1, "verify", "%s", err.msg);
		return -1;
	}
	printf("links: %zu of %zu linked files still show the bytes exported (%s)%s\n", n - bad,
	       n, full ? "every byte hashed and compared with the export's XXH3-128" :
	       "size, inode, mtime, ctime; --full reads every byte",
	       bad ? "; export again from SRC as it is now" : "");
	return bad ? 1 : 0;
}

int cmd_verify(int argc, char **argv)
{
	static const struct option opts[] = {
		{"against", required_argument, 0, 'a'}, {"tensors", required_argument, 0, 't'},
		{"source", required_argument, 0, 's'}, {"quiet", no_argument, 0, 'q'},
		{"endpoint", required_argument, 0, 'e'}, {"full", no_argument, 0, 'F'},
		{"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	const char *ref = NULL, *regex = NULL, *source = NULL, *endpoint = NULL;
	struct out o = {0};
	int c, full = 0;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'a': ref = optarg; break;
		case 't': regex = optarg; break;
		case 's': source = optarg; break;
		case 'q': o.quiet = 1; break;
		case 'e': endpoint = optarg; break;
		case 'F': full = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (argc - optind != 1) {
		usage(stderr);
		return 2;
	}
	const char *dir = argv[optind];
	if (full && cli_hf_is(dir)) {
		usage(stderr);
		return cli_fail(2, "verify", "--full checks the links of an `export --link` DIR on "
		                "this machine, not %s", dir);
	}
	int links = cli_hf_is(dir) ? (ref ? 0 : -2) : check_links(dir, !ref, full);
	if (links == -2 && cli_hf_is(dir)) {
		usage(stderr);
		return cli_fail(2, "verify", "%s: give --against REF", dir);
	}
	if (links < 0 || !ref)
		return links < 0 ? -links : links;
	if ((!cli_hf_is(dir) && (c = cli_hub_args("verify", &dir, NULL)) >= 0) ||
	    (!cli_hf_is(ref) && (c = cli_hub_args("verify", &ref, NULL)) >= 0) ||
	    (!cli_hf_is(source) && (c = cli_hub_args("verify", &source, NULL)) >= 0))
		return c;      /* ORG/NAME[@REV] ids */
	if (endpoint && !cli_hf_is(dir) && !cli_hf_is(ref) && !cli_hf_is(source))
		return cli_fail(2, "verify", "--endpoint is for an hf://ORG/NAME[@REV] argument");
	struct rq_err err = {0};
	struct rq_vsummary s;
	/* hf://: pinned to its commit, read through cli_hf's reader (range requests) */
	const char *arg[3] = {dir, ref, source};
	struct cli_hf *hf[3] = {NULL, NULL, NULL};
	const struct rq_src_reader *rd[3] = {NULL, NULL, NULL};
	int rc = 0;
	for (int i = 0; i < 3 && !rc; i++)
		if (cli_hf_is(arg[i]) && !(rc = cli_hf_open(arg[i], endpoint, &hf[i], &err)))
			rd[i] = cli_hf_reader(hf[i]);
	if (!rc)
		rc = rq_verify_readers(dir, ref, source, rd, regex, on_result, &o, &s, &err);
	for (int i = 0; i < 3; i++)
		cli_hf_close(hf[i]);
	if (rc)
		return cli_fail(1, "verify", "%s", err.msg);
	printf("summary: %llu tensors compared: %llu equal, %llu differ; %llu only in DIR, "
	       "%llu only in REF\n", (unsigned long long)s.compared, (unsigned long long)s.equal,
	       (unsigned long long)s.differ, (unsigned long long)s.only_dir,
	       (unsigned long long)s.only_ref);
	for (int i = 0; i < 3; i++)      /* hf:// sides: how their reads were coalesced */
		if (rd[i])
			printf("remote: %s read in %llu range requests (%.1f MB)\n", arg[i],
			       (unsigned long long)s.requests[i], s.fetched[i] / 1e6);
	if (s.modules) {
		char v[64];
		variants_text(s.variants_all, v, sizeof v);
		printf("recipe: %llu of %llu BF16 modules reproduced; variant reproducing all: %s\n",
		       (unsigned long long)s.modules_reproduced, (unsigned long long)s.modules,
		       s.variants_all ? v : "none");
	}
	if (!s.compared && !s.modules)
		return cli_fail(1, "verify", "no tensor in common between %s and %s%s%s",
		                dir, ref, regex ? " matching " : "", regex ? regex : "");
	return s.differ || s.modules_reproduced < s.modules || links ? 1 : 0;
}
