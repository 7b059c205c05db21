/* The real HTTP server for the HTTP fuzz targets (fuzz_http, fuzz_route_*): srv_run over the
 * deterministic fake backend of the server tests (tests/server/fake_backend.c), started once
 * per process on a Unix socket in a private temporary directory, with an API key. Each input
 * is one client connection: its bytes are written, the reply read to the end. Only public
 * server entry points are used (srv_config_parse, srv_config_finalize, srv_run), so the
 * harness follows the server's HTTP layer as it changes. */
#ifndef MLXCEL_FUZZ_HTTP_HARNESS_H
#define MLXCEL_FUZZ_HTTP_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The key the fuzz server requires (Authorization: Bearer <key>). */
#define FUZZ_HTTP_KEY "fuzz-key"
/* What a connection may take before the harness calls the server hung. */
#define FUZZ_HTTP_REPLY_TIMEOUT_MS 20000

/* Starts the server (once; aborts when it cannot). */
void fuzz_http_start(void);

/* printf to the standard error the process had at start (fuzz_http_start keeps a copy): under
 * -close_fd_mask=2, which fuzz-run gives the HTTP targets to silence libmicrohttpd's line per
 * malformed request, libFuzzer's and the sanitizers' reports and this still come through. */
void fuzz_http_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

typedef struct fuzz_http_reply {
    char *data;      /* the reply's first `cap` bytes (malloc'd by the caller) */
    size_t cap;
    size_t len;      /* bytes kept in data */
    size_t total;    /* bytes the server sent */
    int status;      /* the first status line's code, 0 when there is none */
} fuzz_http_reply;

/* Writes req[0..n) to a new connection, half-closes it when `half_close` (a raw request may
 * be incomplete: the server then sees the end of the stream instead of waiting for its
 * timeout), and reads until the server closes. Aborts when no end comes within
 * FUZZ_HTTP_REPLY_TIMEOUT_MS (a hung server is a finding). */
void fuzz_http_exchange(const uint8_t *req, size_t n, bool half_close, fuzz_http_reply *out);

/* One request on a connection kept alive between calls (a new one when the server closed the
 * last, or did not answer it with 200 or 400), read to the end of its response (Content-Length
 * or the last chunk): no connection and thread per input, so several times faster. req must be
 * one whole request that does not ask for `Connection: close`. Aborts as fuzz_http_exchange. */
void fuzz_http_request(const uint8_t *req, size_t n, fuzz_http_reply *out);

/* Checks a whole reply (status set, not cut at cap) as a client reads it: a JSON body, or for
 * text/event-stream every `data:` event JSON (or [DONE]); an error status carries
 * {"error": {"message": one line, "code": status}}. NULL when it holds, else what failed. */
const char *fuzz_http_check_json(const fuzz_http_reply *r);

#endif
