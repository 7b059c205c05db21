/* Deterministic fake model for the server tests (see fake_backend.c). */
#ifndef MLXCEL_TESTS_FAKE_BACKEND_H
#define MLXCEL_TESTS_FAKE_BACKEND_H

#include "server/srv_engine.h"

typedef struct fake_opts {
    int n_parallel, max_batch_size, batch_size, chunk, n_ctx;
    int step_ms; /* sleep per step, to make streams last */
    bool echo;   /* reply with the last user message, byte for byte, then EOS (the web UI test) */
    char name[256];
    /* --chat-template-file: a real Jinja template instead of the built-in one ("" = built-in) */
    char template_file[1024];
    /* --fake-script: JSON [{"when": TEXT, "reply": TEXT}, ...]: a prompt that contains `when`
     * (the first entry that matches) is answered with `reply`, one byte per token, then EOS */
    char script_file[1024];
} fake_opts;

int fake_backend_init(srv_backend *be, const fake_opts *o, mx_error *err);
void fake_backend_free(srv_backend *be);

#endif
