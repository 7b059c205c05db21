/* Checks on a request's header, made once it is complete (its first on_request call) and before
 * the API key and the body (srv_guard.c): strict framing, Host for a keyless loopback server,
 * and the CORS answer for its Origin. Not a public API. */
#ifndef MLXCEL_SERVER_SRV_GUARD_H
#define MLXCEL_SERVER_SRV_GUARD_H

#include <stdbool.h>
#include <stddef.h>

#include "server/srv_config.h"
#include "server/srv_mhd.h"

typedef struct srv_guard_refusal {
    int status;      /* 400, 403 or 501 */
    bool close;      /* framing errors: the rest of the stream cannot be trusted */
    char msg[400];
} srv_guard_refusal;

/* The Host / Origin policy of a configuration: whether the server is keyless and its
 * listening socket is bound to a loopback TCP address (then Host must be a loopback name, and
 * foreign Origins are refused). */
bool srv_guard_keyless_loopback(const srv_config *cfg, int listen_fd);

/* 0: go on (the CORS answer is set on the connection, see srv_conns_set_cors); -1: refuse with
 * *out (no CORS header is given to a refused origin). */
int srv_guard_request(const srv_config *cfg, bool keyless_loopback, struct MHD_Connection *c, const char *version,
                      srv_guard_refusal *out);

/* A request body's JSON, before it is parsed: jansson spends up to ~230 bytes on a 3-byte
 * value (`{},`), so a 16 MB body of small values would take over 1 GB. 0 when the tree the body
 * would make (estimated from its values) fits 8x the body + 32 MiB; else -1 with a 413. */
int srv_guard_body(const char *body, size_t len, srv_guard_refusal *out);

/* The start-up log line describing the policy (auth, Host, CORS). */
void srv_guard_describe(const srv_config *cfg, bool keyless_loopback, char *out, size_t n);

#endif
