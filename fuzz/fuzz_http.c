/* libFuzzer target: a raw HTTP/1.x request stream (request line, headers, body, more requests
 * pipelined after it) sent to the real server (libmicrohttpd's parser, then the server's
 * router, Host/Origin and API-key checks, body limits and routes) over one Unix-socket
 * connection, which is half-closed after the input so that an incomplete request ends at once.
 * The server runs over the fake backend with the key FUZZ_HTTP_KEY (http_harness.c).
 * Nothing may crash, leak, hang, or answer with anything but an HTTP status line. */
#include <stdio.h>
#include <stdlib.h>

#include "http_harness.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fuzz_http_start();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char buf[64];
    fuzz_http_reply r = {.data = buf, .cap = sizeof buf};
    fuzz_http_exchange(data, size, true, &r);
    /* libmicrohttpd answers what it cannot parse with a status (or closes without a word):
     * never with other bytes. */
    if (r.total && !r.status) {
        fuzz_http_log("fuzz_http: a reply without a status line: %.*s\n", (int)r.len, r.data);
        abort();
    }
    return 0;
}
