/* mlxcel serve (also installed as mlxcel-server): the HTTP server over one checkpoint.
 * Flags and LLAMA_ARG_* variables: src/server/srv_config.c; routes: src/server/; the model,
 * tokenizer, template and engine behind them: src/server/srv_backend_engine.c. */
#include <stdio.h>

#include "cli/cli.h"
#include "server/srv_backend_engine.h"
#include "server/srv_server.h"

int cmd_serve(int argc, char **argv) {
    srv_config cfg;
    srv_config_defaults(&cfg);
    mx_error err = {{0}};
    int rc = srv_config_parse(&cfg, argc, argv, stdout, &err);
    if (rc == 1) return 0;
    if (rc) {
        fprintf(stderr, "mlxcel serve: %s\n", err.msg);
        return 2;
    }
    srv_backend be;
    if (srv_backend_engine_open(&be, &cfg, &err)) {
        fprintf(stderr, "mlxcel serve: %s\n", err.msg);
        return 1;
    }
    rc = srv_run(&cfg, &be, &err);
    if (rc) fprintf(stderr, "mlxcel serve: %s\n", err.msg);
    srv_backend_engine_close(&be);
    return rc ? 1 : 0;
}
