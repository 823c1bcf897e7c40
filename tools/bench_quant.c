/* PLACEHOLDER: replaced by the module that owns this benchmark. */
#include "tools/bench.h"
#include "tools/cli.h"

int bench_quant(int argc, char **argv)
{
	return cli_fail(1, "bench", "not built yet");
}
