/* mlxcel-fake-server: the real HTTP server (srv_run) over the fake backend, for the e2e tests.
 * Takes every `mlxcel serve` flag plus --fake-step-ms N (sleep per engine step). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_backend.h"
#include "server/srv_server.h"

int main(int argc, char **argv) {
    int step_ms = 0;
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--fake-step-ms") && i + 1 < argc) { step_ms = atoi(argv[++i]); continue; }
        rest[n++] = argv[i];
    }
    srv_config cfg;
    srv_config_defaults(&cfg);
    mx_error err = {{0}};
    int rc = srv_config_parse(&cfg, n, rest, stdout, &err);
    if (rc == 1 || rc || srv_config_finalize(&cfg, 2048, &err)) {
        if (rc != 1) fprintf(stderr, "mlxcel-fake-server: %s\n", err.msg);
        free(rest);
        return rc == 1 ? 0 : 2;
    }
    fake_opts o = {cfg.n_parallel, cfg.max_batch_size, cfg.batch_size, cfg.prefill_chunk_size, cfg.ctx_size, step_ms, ""};
    snprintf(o.name, sizeof o.name, "%s", cfg.n_aliases ? cfg.aliases[0] : "fake-model");
    srv_backend be;
    if (fake_backend_init(&be, &o, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    rc = srv_run(&cfg, &be, &err);
    if (rc) fprintf(stderr, "mlxcel-fake-server: %s\n", err.msg);
    fake_backend_free(&be);
    free(rest);
    return rc ? 1 : 0;
}
