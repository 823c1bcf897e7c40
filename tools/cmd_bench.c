/* PLACEHOLDER: replaced by the module that owns this command. */
#include "tools/cli.h"

int cmd_bench(int argc, char **argv)
{
	return cli_fail(1, argv[0], "not built yet");
}
