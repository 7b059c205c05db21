/* Embeddings routes (docs/embeddings.md), as llama-server has them:
 *   POST /v1/embeddings              OpenAI's request and response (`input`)
 *   POST /embedding, /embeddings     llama-server's: a JSON array of {index, embedding: [[...]]}
 *                                    (a body with `content` instead of `input` gets it too)
 * Only in embedding mode (--embeddings); otherwise 501 with llama-server's message, and in that
 * mode every generation route answers 501 instead.
 *
 * Each input is one engine sequence (an embedding request: prompt only, pooled final hidden
 * states), run beside other requests' sequences in the same steps. A request's inputs are
 * queued --max-batch-size at a time, more as they finish, so a batch of thousands neither
 * fills the queue that --max-queue-depth bounds nor waits behind it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_embed.h"
#include "server/srv_internal.h"

/* ==== Replies (the shapes of srv_routes.c) ==== */
static MHD_Result_t send_body(srv_server *s, struct MHD_Connection *c, int status, char *body) {
    const char *b = body ? body : "";
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(b), (void *)b, MHD_RESPMEM_MUST_COPY);
    free(body);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "application/json; charset=utf-8");
    srv_mhd_cors(r, c);
    MHD_Result_t rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    char code[8];
    snprintf(code, sizeof code, "%d", status);
    srv_metrics_add(s->metrics, SM_HTTP_RESPONSES_TOTAL, code, 1);
    return rc;
}

static MHD_Result_t send_err(srv_server *s, struct MHD_Connection *c, int status, const char *msg, const char *param) {
    return send_body(s, c, status, srv_resp_error(status, msg, param));
}

MHD_Result_t srv_embed_refuse_generation(srv_server *s, struct MHD_Connection *c) {
    return send_err(s, c, 501, "This server does not support completions. Start it without `--embeddings`", NULL);
}

bool srv_embed_is_route(const char *url, bool *oai) {
    *oai = !strcmp(url, "/v1/embeddings");
    return *oai || !strcmp(url, "/embedding") || !strcmp(url, "/embeddings");
}

/* A response body that grows; `oom` once an append failed (the answer is then a 500). */
typedef struct obuf {
    char *p;
    size_t len, cap;
    bool oom;
} obuf;

static void ob_add(obuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t nc = (b->len + n + 1) * 2;
        char *q = realloc(b->p, nc);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = nc;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void ob_str(obuf *b, const char *s) { ob_add(b, s, strlen(s)); }

/* [v0,v1,...]: 9 significant digits give every float back exactly; a value that is not finite
 * has no JSON number and is written null (nlohmann::json, llama-server's library, does so). */
static void ob_floats(obuf *b, const float *v, int n) {
    char num[32];
    ob_add(b, "[", 1);
    for (int i = 0; i < n; i++) {
        const int k = isfinite(v[i]) ? snprintf(num, sizeof num, "%s%.9g", i ? "," : "", (double)v[i])
                                     : snprintf(num, sizeof num, "%snull", i ? "," : "");
        ob_add(b, num, (size_t)k);
    }
    ob_add(b, "]", 1);
}

/* "...": the little-endian float32 bytes in base64 (OpenAI's encoding_format "base64"). */
static void ob_base64(obuf *b, const float *v, int n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const size_t nb = (size_t)n * 4;
    unsigned char *raw = malloc(nb ? nb : 1);
    char *enc = malloc((nb + 2) / 3 * 4 + 3);
    if (!raw || !enc) {
        free(raw);
        free(enc);
        b->oom = true;
        return;
    }
    for (int i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int k = 0; k < 4; k++) raw[(size_t)i * 4 + (size_t)k] = (unsigned char)(u >> (8 * k));
    }
    size_t o = 0;
    enc[o++] = '"';
    for (size_t i = 0; i < nb; i += 3) {
        const uint32_t x = (uint32_t)raw[i] << 16 | (i + 1 < nb ? (uint32_t)raw[i + 1] << 8 : 0) |
                           (i + 2 < nb ? raw[i + 2] : 0);
        enc[o++] = tab[x >> 18 & 63];
        enc[o++] = tab[x >> 12 & 63];
        enc[o++] = i + 1 < nb ? tab[x >> 6 & 63] : '=';
        enc[o++] = i + 2 < nb ? tab[x & 63] : '=';
    }
    enc[o++] = '"';
    ob_add(b, enc, o);
    free(raw);
    free(enc);
}

/* One input's result as sent: the first `dims` values of each vector, normalized when pooled
 * (llama-server leaves pooling none's per-token vectors as they are). Truncating before the
 * normalization is what Matryoshka-trained models (Qwen3-Embedding) and OpenAI's `dimensions`
 * mean: the shorter vector is a unit vector again. */
static void ob_vector(obuf *b, const srv_embed_req *r, const srv_job *j, int row, float *tmp) {
    const int d = r->dims > 0 ? r->dims : j->embd_dim;
    const float *v = j->embd + (size_t)row * (size_t)j->embd_dim;
    if (j->pooling != SRV_POOL_NONE) {
        srv_embd_normalize(v, tmp, d, r->normalize);
        v = tmp;
    }
    if (r->base64) ob_base64(b, v, d);
    else ob_floats(b, v, d);
}

/* OpenAI's list object, or llama-server's array of {index, embedding: [[...], ...]}. */
static char *render(srv_server *s, const srv_embed_req *r, srv_job *const *js) {
    obuf b = {0};
    float *tmp = malloc((size_t)s->be->info.n_embd * sizeof *tmp);
    if (!tmp) return NULL;
    char head[96];
    long long tokens = 0;
    ob_str(&b, r->oai ? "{\"object\":\"list\",\"data\":[" : "[");
    for (int i = 0; i < r->n; i++) {
        const srv_job *j = js[i];
        tokens += j->n_prompt;
        snprintf(head, sizeof head, r->oai ? "%s{\"object\":\"embedding\",\"index\":%d,\"embedding\":"
                                           : "%s{\"index\":%d,\"embedding\":[", i ? "," : "", i);
        ob_str(&b, head);
        for (int k = 0; k < (r->oai ? 1 : j->n_embd_vec); k++) {
            if (k) ob_add(&b, ",", 1);
            ob_vector(&b, r, j, k, tmp);
        }
        ob_str(&b, r->oai ? "}" : "]}");
    }
    if (r->oai) {
        /* model: the name asked for when it is a served alias, else the first (srv_response.c) */
        const char *model = s->be->info.name;
        for (int i = 0; i < s->cfg.n_aliases; i++)
            if (!strcmp(r->model, s->cfg.aliases[i])) model = s->cfg.aliases[i];
        json_t *m = json_string(model);
        char *mq = m ? json_dumps(m, JSON_ENCODE_ANY) : NULL;
        json_decref(m);
        snprintf(head, sizeof head, "],\"usage\":{\"prompt_tokens\":%lld,\"total_tokens\":%lld},\"model\":", tokens,
                 tokens);
        ob_str(&b, head);
        ob_str(&b, mq ? mq : "\"\"");
        ob_str(&b, "}");
        free(mq);
    } else {
        ob_str(&b, "]");
    }
    free(tmp);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

/* ==== Running the inputs ==== */
/* Whether the engine has a slot for one more sequence now (sequences outstanding, queued or
 * running, below the batch). */
static bool slot_free(srv_server *s) {
    srv_engine_stats st;
    int out = 0;
    srv_core_snapshot(s, &st, &out);
    return out < s->cfg.max_batch_size;
}

/* Runs the inputs and waits until all are done or one failed. The first input not yet done is
 * queued like any request (so a full queue answers 503, whatever the batch); more go in only
 * while the engine has free slots, at most --max-batch-size of this request at a time: a batch
 * of thousands fills the idle slots without counting as thousands of waiting requests against
 * --max-queue-depth (one refused while others of the request run is tried again later). 0, or
 * -1 with *status and err (503 queue full / shutting down, 499 client gone, 500 engine). */
static int run_jobs(srv_server *s, srv_job *const *js, int n, int *status, mx_error *err) {
    const int window = s->cfg.max_batch_size > 0 ? s->cfg.max_batch_size : 1;
    int next = 0;
    for (;;) {
        const uint64_t seq = srv_job_progress(js[0]); /* before looking: no wake-up is missed */
        int in_flight = 0, n_done = 0;
        for (int i = 0; i < next; i++) {
            pthread_mutex_lock(&js[i]->mu);
            const bool done = js[i]->done;
            const srv_finish fin = js[i]->finish;
            const bool vec = js[i]->embd != NULL;
            const char *why = fin == SRV_FINISH_CANCELLED ? srv_cancel_reason(js[i], status) : NULL;
            pthread_mutex_unlock(&js[i]->mu);
            if (!done) {
                in_flight++;
                continue;
            }
            n_done++;
            if (why) return mx_fail(err, "%s", why);
            if (fin != SRV_FINISH_EOS || !vec) {
                *status = 500;
                return mx_fail(err, "input %d: the embedding failed in the engine", i);
            }
        }
        if (n_done == n) return 0;
        for (; next < n && in_flight < window && (in_flight == 0 || slot_free(s)); next++, in_flight++)
            if (srv_core_enqueue(s, &js[next], 1, status, err)) {
                if (in_flight == 0) return -1;
                break; /* the queue took its limit meanwhile: try again when one of ours is done */
            }
        srv_job_wait(js[0], seq, 1.0);
    }
}

/* ==== Route ==== */
MHD_Result_t srv_embed_route(srv_server *s, struct MHD_Connection *c, bool oai, const char *body, size_t len,
                             srv_job **hold) {
    if (!s->cfg.embeddings)
        return send_err(s, c, 501, "This server does not support embeddings. Start it with `--embeddings`", NULL);
    if (oai && s->be->info.pooling == SRV_POOL_NONE)
        return send_err(s, c, 400, "Pooling type 'none' is not OAI compatible. Please use a different pooling type",
                        NULL);
    const srv_text_ops *tx = s->be->text_ops;
    const srv_embed_limits lim = {.n_embd = s->be->info.n_embd, .n_ctx = s->cfg.ctx_size,
                                  .vocab = tx->vocab_size(s->be->text), .tokenize = srv_tokenize_text,
                                  .tok_ctx = s->be};
    srv_embed_req r;
    mx_error err = {{0}};
    int rc = srv_embed_parse(&r, oai, body, len, &lim, &err);
    if (rc) {
        MHD_Result_t out = send_err(s, c, 400, err.msg, r.param);
        srv_embed_req_free(&r);
        return out;
    }

    /* one job per input; the connection keeps js[0] (srv_http.c's on_completed releases it
     * once the answer is sent: a shutdown waits for that) */
    srv_job **js = calloc((size_t)r.n, sizeof *js);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    int status = 500;
    rc = js ? 0 : mx_fail(&err, "out of memory");
    for (int i = 0; i < r.n && !rc; i++) {
        srv_job *j = js[i] = srv_job_new(s);
        if (!j) {
            rc = mx_fail(&err, "out of memory");
            break;
        }
        j->embed = true;
        j->pooling = s->be->info.pooling;
        j->prompt = r.ids[i];
        j->n_prompt = (int)r.n_ids[i];
        r.ids[i] = NULL;
        j->fd = ci ? ci->connect_fd : -1; /* the engine thread cancels it when the client hangs up */
        j->counts_prompt = true;
    }
    if (!rc && r.n > 1 && srv_job_group(js, r.n)) rc = mx_fail(&err, "out of memory");
    if (!rc) {
        *hold = js[0];
        pthread_mutex_lock(&s->mu);
        s->n_http_jobs++; /* until on_completed */
        pthread_mutex_unlock(&s->mu);
        rc = run_jobs(s, js, r.n, &status, &err);
    }
    char *out = rc ? NULL : render(s, &r, js);
    if (!rc && !out) status = 500, rc = mx_fail(&err, "out of memory for the response");
    for (int i = 0; js && i < r.n; i++) {
        if (!js[i]) continue;
        srv_job_detach(js[i]); /* inputs still queued or running are cancelled */
        if (i > 0 || !*hold) srv_job_release(js[i]);
    }
    free(js);
    srv_embed_req_free(&r);
    return rc ? send_err(s, c, status, err.msg, NULL) : send_body(s, c, 200, out);
}
