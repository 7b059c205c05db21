/* Embeddings (docs/embeddings.md): POST /v1/embeddings (OpenAI's shape), POST /embedding and
 * /embeddings (llama-server's), served in embedding mode (--embeddings); and the pooling a
 * checkpoint asks for (its sentence-transformers configuration). Not a public API. */
#ifndef MLXCEL_SERVER_SRV_EMBED_H
#define MLXCEL_SERVER_SRV_EMBED_H

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "server/srv_engine.h"
#include "server/srv_mhd.h"

/* "last", "mean", "cls", "none" (llama-server's --pooling names). parse: 0, or -1. */
const char *srv_pooling_name(srv_pooling p);
int srv_pooling_parse(const char *s, srv_pooling *out);

/* ==== The checkpoint's pooling (srv_embed_st.c) ====
 * For a checkpoint served with --embeddings: `flag` (--pooling; "" when not given) wins, else
 * the sentence-transformers Pooling module that modules.json names (1_Pooling/config.json:
 * pooling_mode_lasttoken / _mean_tokens / _cls_token, or "pooling_mode"), else last (the
 * decoder default). A pipeline this server cannot reproduce is refused naming the file and
 * the module: modules other than Transformer / Pooling / Normalize (a Dense projection ...),
 * a pooling mode it does not compute (max, weighted mean, mean_sqrt_len, several at once), a
 * word_embedding_dimension other than n_embd. Logs what was found (and the prompts of
 * config_sentence_transformers.json, which are not applied). */
int srv_embed_resolve(const char *dir, const char *flag, int n_embd, srv_pooling *out, mx_error *err);

/* ==== Routes (srv_embed.c) ==== */
struct srv_server;
struct srv_job;
/* Whether url is an embeddings route; *oai: /v1/embeddings (the OpenAI response shape). */
bool srv_embed_is_route(const char *url, bool *oai);
/* Answers a POST to an embeddings route (the body read whole). *hold: a job whose HTTP-side
 * reference the connection keeps until its answer is sent (srv_http.c's conn_ctx job: released,
 * and the server's count of answering connections decreased, by on_completed), or unchanged. */
MHD_Result_t srv_embed_route(struct srv_server *s, struct MHD_Connection *c, bool oai, const char *body,
                             size_t len, struct srv_job **hold);
/* The 501 every generation route answers in embedding mode (llama-server's message). */
MHD_Result_t srv_embed_refuse_generation(struct srv_server *s, struct MHD_Connection *c);

#endif
