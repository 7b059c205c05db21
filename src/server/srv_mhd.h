/* libmicrohttpd helpers shared by srv_http.c (generation routes, dispatch) and srv_routes.c
 * (the other routes), so that every response carries the same CORS headers. Not a public API. */
#ifndef MLXCEL_SERVER_SRV_MHD_H
#define MLXCEL_SERVER_SRV_MHD_H

#include <microhttpd.h>

#if MHD_VERSION < 0x00097002
typedef int MHD_Result_t;
#else
typedef enum MHD_Result MHD_Result_t;
#endif

/* Access-Control-Allow-Origin on a response: the request's Origin echoed (as llama-server
 * does; "Vary: Origin" then tells caches the answer depends on it), else "*". */
void srv_mhd_cors(struct MHD_Response *r, struct MHD_Connection *c);

struct srv_server;
/* Queues r (taken) with the CORS headers, and counts it in /metrics by status (the known codes,
 * else "other"). Every answer of the server goes out through it. */
MHD_Result_t srv_mhd_queue(struct srv_server *s, struct MHD_Connection *c, int status, struct MHD_Response *r);
/* 405 for a route that takes `takes` ("GET" or "POST"), with the Allow header a 405 must carry
 * (RFC 9110): "GET, HEAD, OPTIONS" or "POST, OPTIONS" (OPTIONS: CORS preflights). */
MHD_Result_t srv_mhd_method_not_allowed(struct srv_server *s, struct MHD_Connection *c, const char *takes);

#endif
