/* HTTP connection admission for libmicrohttpd's thread-per-connection mode (srv_conn.c):
 * connection limits with idle connections closed first, per-address limits, a header
 * deadline, and libmicrohttpd's log lines through a rate limiter. Not a public API. */
#ifndef MLXCEL_SERVER_SRV_CONN_H
#define MLXCEL_SERVER_SRV_CONN_H

#include <stdbool.h>
#include <stdarg.h>
#include <sys/socket.h>

#include "base/error.h"
#include "server/srv_metrics.h"
#include "server/srv_mhd.h"

typedef struct srv_conns srv_conns;

typedef struct srv_conn_limits {
    int max_conns;           /* --threads-http: connections admitted at once */
    int max_per_ip;          /* --max-connections-per-ip (IPv6: per /64); Unix sockets are exempt */
    double header_timeout_s; /* --header-timeout; 0 = no deadline */
} srv_conn_limits;

/* The table and its reaper thread (when header_timeout_s > 0). */
srv_conns *srv_conns_new(const srv_conn_limits *lim, srv_metrics *metrics, mx_error *err);
/* After MHD_stop_daemon (every connection closed). */
void srv_conns_free(srv_conns *t);

/* What libmicrohttpd's own limit (MHD_OPTION_CONNECTION_LIMIT) must be: above max_conns, so
 * that connections closed to make room, whose threads are still exiting, never make it
 * refuse a new one. */
unsigned srv_conns_mhd_limit(const srv_conns *t);
/* Raises the soft open-file limit to what max_conns needs (one descriptor per connection plus
 * the model's files); when the hard limit is lower, lowers max_conns to fit, with a warning. */
void srv_conns_fit_fd_limit(srv_conns *t);

/* libmicrohttpd callbacks: the accept policy (MHD_start_daemon's apc, on the listening
 * thread), MHD_OPTION_NOTIFY_CONNECTION, and MHD_OPTION_EXTERNAL_LOGGER (cls: the table). */
MHD_Result_t srv_conns_accept(void *cls, const struct sockaddr *addr, socklen_t len);
void srv_conns_notify(void *cls, struct MHD_Connection *c, void **socket_ctx,
                      enum MHD_ConnectionNotificationCode code);
void srv_conns_mhd_log(void *cls, const char *fmt, va_list ap);

/* A request's header is complete (its first on_request call): the connection is busy, never
 * closed to make room, until srv_conns_idle (its request completed). */
void srv_conns_busy(struct MHD_Connection *c);
void srv_conns_idle(struct MHD_Connection *c);

/* The CORS answer chosen for the connection's current request (srv_guard.c), applied to every
 * response by srv_mhd_cors: origin NULL = no Access-Control-Allow-Origin. `origin` points into
 * the request's headers (valid until the request completes) or is the literal "*". */
void srv_conns_set_cors(struct MHD_Connection *c, const char *origin, bool credentials);
bool srv_conns_cors(struct MHD_Connection *c, const char **origin, bool *credentials);

#endif
