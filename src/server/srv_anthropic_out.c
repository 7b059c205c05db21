/* The answers of POST /v1/messages: the Message object and its stream as Anthropic sends it
 * (every event `event: TYPE` + `data: {"type": TYPE, ...}`):
 *
 *   message_start (content [], usage with the prompt's tokens), ping
 *   per content block, in the order the reply produces them:
 *     content_block_start (text "" / thinking "" + signature "" / tool_use with input {}),
 *     content_block_delta (text_delta / thinking_delta / input_json_delta)...,
 *     a thinking block's signature_delta, content_block_stop
 *   message_delta (stop_reason, stop_sequence, usage), message_stop
 *   or, when the engine failed or the request was cancelled, an `error` event.
 *
 * Blocks are the segments of the reply (srv_api_common.c), so a stream and a whole answer of
 * one reply carry the same blocks. A thinking block's signature is "mlxcel1." and the XXH64 of
 * its text: a request that sends the block back must send it unchanged (srv_anthropic.c). */
#include <stdlib.h>
#include <string.h>

#include "server/srv_api.h"
#include "server/srv_internal.h"

/* ==== Blocks ==== */
static json_t *text_json(const srv_seg *x) {
    json_t *v = json_stringn(x->text ? x->text : "", x->len);
    return v ? v : json_string("");
}

/* A tool_use block's input: the arguments as an object ({} when they do not parse, as when
 * max_tokens cut them). */
static json_t *input_json(const srv_seg *x) {
    json_t *v = x->len ? json_loadb(x->text, x->len, 0, NULL) : NULL;
    if (json_is_object(v)) return v;
    json_decref(v);
    return json_object();
}

static json_t *block_json(const srv_seg *x, bool start) {
    char sig[32];
    switch (x->kind) {
    case SRV_SEG_TEXT: return json_pack("{s:s, s:o}", "type", "text", "text", start ? json_string("") : text_json(x));
    case SRV_SEG_REASONING:
        if (start) return json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature", "");
        srv_anthropic_signature(x->text ? x->text : "", x->len, sig);
        return json_pack("{s:s, s:o, s:s}", "type", "thinking", "thinking", text_json(x), "signature", sig);
    default:
        return json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id", x->id, "name", x->name ? x->name : "",
                         "input", start ? json_object() : input_json(x));
    }
}

static bool has_calls(const srv_segs *g) {
    for (int i = 0; i < g->n; i++)
        if (g->v[i].kind == SRV_SEG_CALL) return true;
    return false;
}

/* end_turn, max_tokens, stop_sequence (a stop string matched), tool_use (the reply called
 * tools and ended by itself). */
static const char *stop_reason(const srv_job *j, const srv_segs *g) {
    if (j->finish == SRV_FINISH_LENGTH) return "max_tokens";
    if (j->finish == SRV_FINISH_STOP && j->stop_word) return "stop_sequence";
    if (has_calls(g)) return "tool_use";
    return "end_turn";
}

/* Anthropic counts prompt tokens read from the cache apart from input_tokens. */
static json_t *usage_json(const srv_job *j, bool start) {
    const int cached = start ? 0 : j->n_cached;
    return json_pack("{s:i, s:i, s:i, s:i, s:s}", "input_tokens", j->n_prompt - cached, "cache_creation_input_tokens",
                     0, "cache_read_input_tokens", cached, "output_tokens", start ? 0 : j->n_toks, "service_tier",
                     "standard");
}

static json_t *message_json(srv_server *s, srv_job *j, bool start) {
    srv_api_job *a = j->api;
    json_t *content = json_array();
    for (int i = 0; !start && i < a->segs.n; i++) json_array_append_new(content, block_json(&a->segs.v[i], false));
    json_t *m = json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", a->id, "type", "message", "role", "assistant", "model",
                          srv_api_model(s, j), "content", content);
    json_object_set_new(m, "stop_reason", start ? json_null() : json_string(stop_reason(j, &a->segs)));
    json_object_set_new(m, "stop_sequence",
                        !start && j->finish == SRV_FINISH_STOP && j->stop_word ? json_string(j->stop_word) : json_null());
    json_object_set_new(m, "usage", usage_json(j, start));
    return m;
}

/* ==== Whole answer ==== */
char *srv_anthropic_final(srv_server *s, srv_job *j) {
    srv_api_job *a = j->api;
    srv_cp *cp = srv_api_parser(j);
    size_t sent = 0;
    srv_segs_free(&a->segs);
    srv_segs_init(&a->segs, SRV_DIALECT_ANTHROPIC);
    srv_api_feed(j, cp, &a->segs, 0, j->n_toks, &sent, NULL);
    srv_api_feed_end(j, cp, &a->segs, &sent);
    srv_cp_free(cp);
    json_t *m = message_json(s, j, false);
    char *out = json_dumps(m, JSON_COMPACT);
    json_decref(m);
    return out;
}

/* ==== Stream ==== */
static void emit(srv_api_job *a, const char *type, json_t *o) {
    json_t *e = json_pack("{s:s}", "type", type);
    if (o) {
        json_object_update(e, o);
        json_decref(o);
    }
    srv_api_sse_event(a->buf, a->len, a->cap, type, e);
}

static void on_open(void *ctx, srv_segs *g, int i) {
    emit(ctx, "content_block_start", json_pack("{s:i, s:o}", "index", i, "content_block", block_json(&g->v[i], true)));
}

static void on_delta(void *ctx, srv_segs *g, int i, const char *t, size_t n) {
    static const char *const kinds[][2] = {{"text_delta", "text"}, {"thinking_delta", "thinking"},
                                           {"input_json_delta", "partial_json"}};
    json_t *d = json_stringn(t, n);
    if (!d) return;
    const int k = (int)g->v[i].kind;
    emit(ctx, "content_block_delta", json_pack("{s:i, s:{s:s, s:o}}", "index", i, "delta", "type", kinds[k][0],
                                               kinds[k][1], d));
}

static void on_close(void *ctx, srv_segs *g, int i) {
    const srv_seg *x = &g->v[i];
    if (x->kind == SRV_SEG_REASONING) {
        char sig[32];
        srv_anthropic_signature(x->text ? x->text : "", x->len, sig);
        emit(ctx, "content_block_delta",
             json_pack("{s:i, s:{s:s, s:s}}", "index", i, "delta", "type", "signature_delta", "signature", sig));
    }
    emit(ctx, "content_block_stop", json_pack("{s:i}", "index", i));
}

static void stream_start(srv_server *s, srv_job *j) {
    srv_api_job *a = j->api;
    if (a->cp) return;
    a->cp = srv_api_parser(j);
    srv_segs_free(&a->segs);
    srv_segs_init(&a->segs, SRV_DIALECT_ANTHROPIC);
    a->segs.on_open = on_open;
    a->segs.on_delta = on_delta;
    a->segs.on_close = on_close;
    a->segs.ctx = a;
    emit(a, "message_start", json_pack("{s:o}", "message", message_json(s, j, true)));
    emit(a, "ping", NULL);
}

void srv_anthropic_sse_tokens(srv_server *s, srv_job *j, int from, int to, size_t *sent) {
    srv_api_job *a = j->api;
    stream_start(s, j);
    srv_api_feed(j, a->cp, &a->segs, from, to, sent, NULL);
}

void srv_anthropic_sse_finish(srv_server *s, srv_job *j, size_t *sent) {
    srv_api_job *a = j->api;
    stream_start(s, j);
    srv_api_feed_end(j, a->cp, &a->segs, sent);
    if (j->finish == SRV_FINISH_ERROR || j->finish == SRV_FINISH_CANCELLED) {
        int status = 500;
        const char *why = j->finish == SRV_FINISH_ERROR ? "generation failed in the engine" : srv_cancel_reason(j, &status);
        const char *type = status == 503 ? "overloaded_error" : status == 499 ? "invalid_request_error" : "api_error";
        emit(a, "error", json_pack("{s:{s:s, s:s}}", "error", "type", type, "message", why));
        return;
    }
    json_t *u = usage_json(j, false);
    json_object_del(u, "service_tier");
    emit(a, "message_delta",
         json_pack("{s:{s:s, s:o}, s:o}", "delta", "stop_reason", stop_reason(j, &a->segs), "stop_sequence",
                   j->finish == SRV_FINISH_STOP && j->stop_word ? json_string(j->stop_word) : json_null(), "usage", u));
    emit(a, "message_stop", NULL);
}
