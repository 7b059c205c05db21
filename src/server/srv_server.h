/* The HTTP server: OpenAI- and llama-server-compatible routes over libmicrohttpd, continuous
 * batching through the srv_engine.h seam. */
#ifndef MLXCEL_SERVER_SRV_SERVER_H
#define MLXCEL_SERVER_SRV_SERVER_H

#include "base/error.h"
#include "server/srv_config.h"
#include "server/srv_engine.h"

/* Serves until SIGINT or SIGTERM, then cancels running requests and returns 0.
 * cfg must be finalized (srv_config_finalize). The backend stays owned by the caller. */
int srv_run(const srv_config *cfg, srv_backend *be, mx_error *err);

#endif
