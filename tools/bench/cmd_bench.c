/* cmd_bench.c — `requantfs bench quant|export|mount|engine`.
 *
 * The folder is one straight line: each file calls only the files below it
 * (bench.h, bench_mount_int.h, bench_engine_fmt.h and bench_synth.h declare
 * what crosses).
 *
 *   dispatch  cmd_bench.c            `bench <what>`: usage, one bench each
 *   quant     bench_quant.c          CPU quantizer vs memcpy, bit-exact check
 *             bench_quant_cuda.c     --device cuda: kernels/kquant vs copies
 *   export    bench_export.c         export vs cp -r of the same source
 *   mount     bench_mount.c          (a)-(d) through a real mount vs export
 *                                    and native reads
 *             bench_mount_scheme.c   --scheme S|all: (a) per data-free scheme
 *             bench_mount_remote.c   --remote: an hf:// mount vs curl
 *             bench_mount_harness.c  the bm_* harness of all three: self-run
 *                                    mount/umount, eviction, cold (a)
 *   engine    bench_engine.c         CPU prefill/decode vs memcpy
 *             bench_engine_fmt.c     --model's Linears in each weight format
 *             bench_engine_cuda.c    --device cuda: the CUDA engine
 *             bench_engine_ops.c     --op NAME: one engine op at a time
 *             bench_synth.c          synthetic Laguna configs (no weights)
 *   leaf      bench_clock.c          bench_now, the memcpy baseline
 */
#include "tools/bench/bench.h"
#include "cli/cli.h"

#include <string.h>

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
