/* PLACEHOLDER: replaced by the module that owns this command. */
#include "tools/cli.h"

int cmd_mount(int argc, char **argv)
{
	return cli_fail(1, argv[0], "not built yet");
}

int cmd_umount(int argc, char **argv)
{
	return cli_fail(1, argv[0], "not built yet");
}
