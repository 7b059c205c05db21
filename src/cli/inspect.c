#include <stdio.h>

#include "cli/cli.h"

/* Placeholder until the foundation work lands the memory estimate. */
int cmd_inspect(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "mlxcel inspect: not implemented yet\n");
    return 2;
}
