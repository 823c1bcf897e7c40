/* PLACEHOLDER: replaced by the module that owns this command. */
#include "tools/cli.h"
