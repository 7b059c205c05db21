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
#include "server/srv_request.h"

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

/* ==== Request bodies (srv_embed_req.c) ==== */
#define SRV_EMBED_MAX_INPUTS 2048 /* OpenAI's limit per request */

typedef struct srv_embed_limits {
    int n_embd;               /* the model's hidden size: `dimensions` goes up to it */
    int n_ctx;                /* tokens one input may hold */
    int vocab;                /* token ids in [0, vocab) */
    srv_tokenize_fn tokenize; /* strings, with the tokenizer's special tokens (llama-server) */
    void *tok_ctx;
} srv_embed_limits;

typedef struct srv_embed_req {
    bool oai;          /* OpenAI's response shape (a body with `content` gets llama-server's) */
    bool base64;       /* encoding_format "base64" (OpenAI's shape only) */
    int normalize;     /* embd_normalize: -1 none, 0 max-abs (int16 range), 1 taxicab, 2 L2, p > 2 */
    int dims;          /* dimensions: the first dims values, normalized again (0: all) */
    char model[256];
    int n;             /* inputs, 1..SRV_EMBED_MAX_INPUTS */
    int32_t **ids;     /* [n] token ids of each input, each 1..n_ctx of them */
    size_t *n_ids;
    char param[48];    /* the field an error is about */
} srv_embed_req;

/* `input` (or llama-server's `content`): a string, an array of ids (one input), llama-server's
 * mixed array of ids and strings (one input), or an array of those; encoding_format,
 * embd_normalize, dimensions, model, user. 0, or -1 with err naming the field (also in param);
 * r is freeable either way. oai: the route is /v1/embeddings. */
int srv_embed_parse(srv_embed_req *r, bool oai, const char *body, size_t len, const srv_embed_limits *lim,
                    mx_error *err);
void srv_embed_req_free(srv_embed_req *r);
/* llama.cpp's common_embd_normalize: norm -1 none, 0 max absolute scaled to the int16 range
 * (32760), 2 euclidean, any other p the p-norm (1: taxicab). out may be in. */
void srv_embd_normalize(const float *in, float *out, int n, int norm);

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
