/* libFuzzer target, built once per POST route (FUZZ_ROUTE = the route's path, see
 * fuzz/CMakeLists.txt): the input is a request body, sent as a well-formed POST with the API
 * key to the real server over the fake backend (http_harness.c), on a kept-alive connection,
 * so it reaches the route's handler: request parsing, prompt and template handling, the generation
 * queue, the JSON or SSE reply. Besides crashes, leaks and hangs, the reply must be 200, 400 or
 * 413 (a 5xx is the server failing on its input) and read as a client reads it: JSON, or SSE
 * events of JSON, and an error object naming its status. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_harness.h"

#ifndef FUZZ_ROUTE
#error "FUZZ_ROUTE must name the route, e.g. -DFUZZ_ROUTE=\"/v1/chat/completions\""
#endif

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_http_start();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char head[512];
    int hl = snprintf(head, sizeof head,
                      "POST %s HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " FUZZ_HTTP_KEY "\r\n"
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                      FUZZ_ROUTE, size);
    uint8_t *req = malloc((size_t)hl + size);
    if (!req) return 0;
    memcpy(req, head, (size_t)hl);
    memcpy(req + hl, data, size);
    static char buf[1 << 20];
    fuzz_http_reply r = {.data = buf, .cap = sizeof buf};
    fuzz_http_request(req, (size_t)hl + size, &r);
    free(req);
    static int verbose = -1; /* FUZZ_VERBOSE=1: every reply (to see what an input reaches) */
    if (verbose < 0) verbose = getenv("FUZZ_VERBOSE") != NULL;
    if (verbose) fuzz_http_log("%.*s\n", (int)(r.len < 2048 ? r.len : 2048), r.data);
    const char *bad = NULL;
    if (r.status != 200 && r.status != 400 && r.status != 413) bad = "status is not 200, 400 or 413";
    else bad = fuzz_http_check_json(&r);
    if (bad) {
        fuzz_http_log("fuzz_route %s: %s; reply (%zu bytes):\n%.*s\n", FUZZ_ROUTE, bad, r.total,
                (int)(r.len < 4096 ? r.len : 4096), r.data);
        abort();
    }
    return 0;
}
