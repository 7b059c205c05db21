/* The answers of POST /v1/responses: the Response object, and its stream of events as OpenAI
 * sends them (every event `event: TYPE` + `data: {"type": TYPE, "sequence_number": N, ...}`):
 *
 *   response.created, response.in_progress
 *   per output item, in the order the reply produces them:
 *     reasoning:     output_item.added, content_part.added (reasoning_text),
 *                    reasoning_text.delta..., reasoning_text.done, content_part.done, output_item.done
 *     message:       output_item.added, content_part.added (output_text),
 *                    output_text.delta..., output_text.done, content_part.done, output_item.done
 *     function_call: output_item.added, function_call_arguments.delta...,
 *                    function_call_arguments.done, output_item.done
 *   response.completed (response.incomplete when max_output_tokens cut it; response.failed when
 *   the engine failed or the request was cancelled)
 *
 * The items are the segments of the reply (srv_api_common.c); a stream and a whole response
 * of one reply are built by the same code, so they carry the same output. */
#include <stdlib.h>
#include <string.h>

#include "server/srv_api.h"
#include "server/srv_internal.h"

/* ==== Items ==== */
static json_t *text_json(const srv_seg *x) {
    json_t *v = json_stringn(x->text ? x->text : "", x->len);
    return v ? v : json_string("");
}

static json_t *part_json(const srv_seg *x, bool empty) {
    json_t *t = empty ? json_string("") : text_json(x);
    if (x->kind == SRV_SEG_REASONING) return json_pack("{s:s, s:o}", "type", "reasoning_text", "text", t);
    return json_pack("{s:s, s:[], s:[], s:o}", "type", "output_text", "annotations", "logprobs", "text", t);
}

/* The output item of segment i: in_progress (as added, empty) or with its text and `status`. */
static json_t *item_json(const srv_segs *g, int i, const char *status) {
    const srv_seg *x = &g->v[i];
    const bool open = !strcmp(status, "in_progress");
    switch (x->kind) {
    case SRV_SEG_TEXT:
        return json_pack("{s:s, s:s, s:s, s:o, s:s}", "id", x->id, "type", "message", "status", status, "content",
                         open ? json_array() : json_pack("[o]", part_json(x, false)), "role", "assistant");
    case SRV_SEG_REASONING:
        return json_pack("{s:s, s:s, s:[], s:o, s:s}", "id", x->id, "type", "reasoning", "summary", "content",
                         open ? json_array() : json_pack("[o]", part_json(x, false)), "status", status);
    default:
        return json_pack("{s:s, s:s, s:s, s:o, s:s, s:s}", "id", x->id, "type", "function_call", "status", status,
                         "arguments", open ? json_string("") : text_json(x), "call_id", x->call_id, "name",
                         x->name ? x->name : "");
    }
}

/* completed, or incomplete for the item a length cut ended */
static const char *item_status(const srv_job *j, const srv_segs *g, int i) {
    return g->at_end && j->finish == SRV_FINISH_LENGTH && i == g->n - 1 ? "incomplete" : "completed";
}

/* ==== The Response object ==== */
json_t *srv_responses_object(srv_server *s, srv_job *j, const char *status) {
    srv_api_job *a = j->api;
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:b, s:n, s:n}", "id", a->id, "object", "response", "created_at",
                          (json_int_t)j->created, "status", status, "background", 0, "error", "incomplete_details");
    if (!strcmp(status, "incomplete"))
        json_object_set_new(o, "incomplete_details", json_pack("{s:s}", "reason", "max_output_tokens"));
    const char *const order[] = {"instructions", "max_output_tokens", "max_tool_calls", "metadata"};
    for (int i = 0; i < 4; i++) json_object_set(o, order[i], json_object_get(a->echo, order[i]));
    json_object_set_new(o, "model", json_string(srv_api_model(s, j)));
    json_t *out = json_array();
    const bool live = strcmp(status, "in_progress") != 0;
    for (int i = 0; live && i < a->segs.n; i++) json_array_append_new(out, item_json(&a->segs, i, item_status(j, &a->segs, i)));
    json_object_set_new(o, "output", out);
    const char *const rest[] = {"parallel_tool_calls", "previous_response_id", "prompt_cache_key", "reasoning",
                                "safety_identifier"};
    for (int i = 0; i < 5; i++)
        if (json_object_get(a->echo, rest[i])) json_object_set(o, rest[i], json_object_get(a->echo, rest[i]));
    json_object_set_new(o, "service_tier", json_string("default"));
    const char *const tail[] = {"store", "temperature", "text", "tool_choice", "tools"};
    for (int i = 0; i < 5; i++) json_object_set(o, tail[i], json_object_get(a->echo, tail[i]));
    json_object_set_new(o, "top_logprobs", json_integer(0));
    json_object_set(o, "top_p", json_object_get(a->echo, "top_p"));
    json_object_set_new(o, "truncation", json_string("disabled"));
    if (live && strcmp(status, "failed"))
        json_object_set_new(
            o, "usage",
            json_pack("{s:i, s:{s:i}, s:i, s:{s:i}, s:i}", "input_tokens", j->n_prompt, "input_tokens_details",
                      "cached_tokens", j->n_cached, "output_tokens", j->n_toks, "output_tokens_details",
                      "reasoning_tokens", a->reasoning_tokens, "total_tokens", j->n_prompt + j->n_toks));
    else
        json_object_set_new(o, "usage", json_null());
    json_object_set(o, "user", json_object_get(a->echo, "user") ? json_object_get(a->echo, "user") : json_null());
    return o;
}

static const char *final_status(const srv_job *j) {
    return j->finish == SRV_FINISH_LENGTH ? "incomplete" : "completed";
}

/* ==== Whole response ==== */
char *srv_responses_final(srv_server *s, srv_job *j) {
    srv_api_job *a = j->api;
    srv_cp *cp = srv_api_parser(j);
    size_t sent = 0;
    srv_segs_free(&a->segs);
    srv_segs_init(&a->segs, SRV_DIALECT_RESPONSES);
    a->reasoning_tokens = 0;
    srv_api_feed(j, cp, &a->segs, 0, j->n_toks, &sent, &a->reasoning_tokens);
    srv_api_feed_end(j, cp, &a->segs, &sent);
    json_t *o = srv_responses_object(s, j, final_status(j));
    if (cp) srv_responses_store(s, j, o, cp);
    srv_cp_free(cp);
    char *out = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return out;
}

/* ==== Stream ==== */
/* One event: {"type", "sequence_number", ...o} (o stolen). */
static void emit(srv_api_job *a, const char *type, json_t *o) {
    json_t *e = json_pack("{s:s, s:I}", "type", type, "sequence_number", (json_int_t)a->seq++);
    json_object_update(e, o);
    json_decref(o);
    srv_api_sse_event(a->buf, a->len, a->cap, type, e);
}

static void on_open(void *ctx, srv_segs *g, int i) {
    srv_api_job *a = ctx;
    const srv_seg *x = &g->v[i];
    emit(a, "response.output_item.added", json_pack("{s:i, s:o}", "output_index", i, "item", item_json(g, i, "in_progress")));
    if (x->kind != SRV_SEG_CALL)
        emit(a, "response.content_part.added", json_pack("{s:s, s:i, s:i, s:o}", "item_id", x->id, "output_index", i,
                                                         "content_index", 0, "part", part_json(x, true)));
}

static void on_delta(void *ctx, srv_segs *g, int i, const char *t, size_t n) {
    srv_api_job *a = ctx;
    const srv_seg *x = &g->v[i];
    json_t *d = json_stringn(t, n);
    if (!d) return;
    if (x->kind == SRV_SEG_TEXT)
        emit(a, "response.output_text.delta", json_pack("{s:s, s:i, s:i, s:o, s:[]}", "item_id", x->id, "output_index",
                                                        i, "content_index", 0, "delta", d, "logprobs"));
    else if (x->kind == SRV_SEG_REASONING)
        emit(a, "response.reasoning_text.delta", json_pack("{s:s, s:i, s:i, s:o}", "item_id", x->id, "output_index",
                                                           i, "content_index", 0, "delta", d));
    else
        emit(a, "response.function_call_arguments.delta",
             json_pack("{s:s, s:i, s:o}", "item_id", x->id, "output_index", i, "delta", d));
}

static void on_close(void *ctx, srv_segs *g, int i) {
    srv_api_job *a = ctx;
    const srv_seg *x = &g->v[i];
    if (x->kind == SRV_SEG_TEXT)
        emit(a, "response.output_text.done", json_pack("{s:s, s:i, s:i, s:o, s:[]}", "item_id", x->id, "output_index",
                                                       i, "content_index", 0, "text", text_json(x), "logprobs"));
    else if (x->kind == SRV_SEG_REASONING)
        emit(a, "response.reasoning_text.done", json_pack("{s:s, s:i, s:i, s:o}", "item_id", x->id, "output_index", i,
                                                          "content_index", 0, "text", text_json(x)));
    else
        emit(a, "response.function_call_arguments.done",
             json_pack("{s:s, s:i, s:o, s:s}", "item_id", x->id, "output_index", i, "arguments", text_json(x), "name",
                       x->name ? x->name : ""));
    if (x->kind != SRV_SEG_CALL)
        emit(a, "response.content_part.done", json_pack("{s:s, s:i, s:i, s:o}", "item_id", x->id, "output_index", i,
                                                        "content_index", 0, "part", part_json(x, false)));
    emit(a, "response.output_item.done",
         json_pack("{s:i, s:o}", "output_index", i, "item", item_json(g, i, item_status(a->job, g, i))));
}

static void stream_start(srv_server *s, srv_job *j) {
    srv_api_job *a = j->api;
    if (a->cp) return;
    a->cp = srv_api_parser(j);
    srv_segs_free(&a->segs);
    srv_segs_init(&a->segs, SRV_DIALECT_RESPONSES);
    a->segs.on_open = on_open;
    a->segs.on_delta = on_delta;
    a->segs.on_close = on_close;
    a->segs.ctx = a;
    emit(a, "response.created", json_pack("{s:o}", "response", srv_responses_object(s, j, "in_progress")));
    emit(a, "response.in_progress", json_pack("{s:o}", "response", srv_responses_object(s, j, "in_progress")));
}

void srv_responses_sse_tokens(srv_server *s, srv_job *j, int from, int to, size_t *sent) {
    srv_api_job *a = j->api;
    stream_start(s, j);
    srv_api_feed(j, a->cp, &a->segs, from, to, sent, &a->reasoning_tokens);
}

void srv_responses_sse_finish(srv_server *s, srv_job *j, size_t *sent) {
    srv_api_job *a = j->api;
    stream_start(s, j);
    srv_api_feed_end(j, a->cp, &a->segs, sent);
    if (j->finish == SRV_FINISH_ERROR || j->finish == SRV_FINISH_CANCELLED) {
        int status = 500;
        const char *why = j->finish == SRV_FINISH_ERROR ? "generation failed in the engine" : srv_cancel_reason(j, &status);
        json_t *r = srv_responses_object(s, j, "failed");
        json_object_set_new(r, "error", json_pack("{s:s, s:s}", "code", "server_error", "message", why));
        emit(a, "response.failed", json_pack("{s:o}", "response", r));
        return;
    }
    const char *st = final_status(j);
    json_t *r = srv_responses_object(s, j, st);
    if (a->cp) srv_responses_store(s, j, r, a->cp);
    emit(a, strcmp(st, "completed") ? "response.incomplete" : "response.completed", json_pack("{s:o}", "response", r));
}
