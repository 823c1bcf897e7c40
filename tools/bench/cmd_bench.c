/* cmd_bench.c — `requantfs bench quant|export|mount|engine`. */
#include "tools/bench/bench.h"
#include "cli/cli.h"

#include <string.h>
#include <time.h>

double bench_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double bench_memcpy_bw(void *dst, const void *src, unsigned long long bytes, int reps)
{
	double best = 1e30;
	for (int i = 0; i < reps; i++) {
		double t = bench_now();
		memcpy(dst, src, bytes);
		t = bench_now() - t;
		if (t < best)
			best = t;
	}
	return best > 0 ? bytes / best : 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: requantfs bench <quant|export|mount|engine> [options]\n\n"
	           "Benchmarks link the same code as the product and print each figure next to\n"
	           "a baseline measured in the same run (memcpy, cp, native reads).\n"
	           "  quant    BF16->NVFP4 throughput vs memcpy (CPU; --device cuda for the GPU)\n"
	           "  export   export of a --real-dims checkpoint vs cp of the same source\n"
	           "  mount    cold/warm/random reads through the mount vs export and native reads\n"
	           "           (--remote: an hf:// mount from a local server vs curl of the same files)\n"
	           "  engine   prefill/decode tokens/s and weight GB/s vs memcpy\n"
	           "Run `requantfs bench <what> --help` for the options of each.\n");
}

int cmd_bench(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	const char *w = argv[1];
	if (!strcmp(w, "--help") || !strcmp(w, "-h")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(w, "quant"))
		return bench_quant(argc - 1, argv + 1);
	if (!strcmp(w, "export"))
		return bench_export(argc - 1, argv + 1);
	if (!strcmp(w, "mount"))
		return bench_mount(argc - 1, argv + 1);
	if (!strcmp(w, "engine"))
		return bench_engine(argc - 1, argv + 1);
	usage(stderr);
	return 2;
}
