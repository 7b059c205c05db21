/* The real backend of `mlxcel serve`: the srv_engine.h seam implemented on the engine
 * (src/engine/engine.h), the tokenizer (src/text/tokenizer.h) and the chat template
 * (src/text/chat_template.h) of one checkpoint directory. */
#ifndef MLXCEL_SERVER_SRV_BACKEND_ENGINE_H
#define MLXCEL_SERVER_SRV_BACKEND_ENGINE_H

#include "base/error.h"
#include "server/srv_config.h"
#include "server/srv_engine.h"

/* Loads cfg->model (config.json, safetensors, tokenizer.json, chat template), finalizes cfg
 * against the model's context (srv_config_finalize) and builds the engine from the scheduling
 * flags. Fills *be (info included). Errors name the file and what was expected. */
int srv_backend_engine_open(srv_backend *be, srv_config *cfg, mx_error *err);
/* Frees what open built. Call after srv_run returned (no sequence is running then). */
void srv_backend_engine_close(srv_backend *be);

#endif
