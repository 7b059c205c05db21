/* /v1/chat/completions answers through the reply parser: `message.content`, `reasoning_content`
 * and `tool_calls` for a whole response; for a stream, OpenAI's deltas in the order the parser
 * finds them: `delta.content`, `delta.reasoning_content`, a tool call's header
 * {index, id, type: "function", function: {name, arguments: ""}} and then its argument
 * fragments {index, function: {arguments}}. A stream and a whole response of the same reply
 * carry the same message (the parser does not depend on how the text was cut). */
#include <stdlib.h>
#include <string.h>

#include "server/srv_chat_out.h"
#include "server/srv_tools.h"

bool srv_chat_out_active(const srv_job *j) { return j->req.api == SRV_API_CHAT && srv_chat_parses(j->req.chat); }

/* OpenAI's finish_reason: tool_calls when the reply ended on its own after calling tools. */
static const char *finish_name(const srv_job *j, const srv_cp *p) {
    if (p && srv_cp_n_calls(p) > 0 && (j->finish == SRV_FINISH_EOS || j->finish == SRV_FINISH_STOP))
        return "tool_calls";
    return srv_finish_name(j->finish);
}

static json_t *text_json(const char *s, size_t n) {
    json_t *v = json_stringn(s, n);
    return v ? v : json_string("");
}

/* ==== Stream ==== */
typedef struct deltas {
    json_t *list; /* deltas of one feed, in order */
} deltas;

static void collect(void *ctx, const srv_cp_event *e) {
    deltas *d = ctx;
    json_t *delta;
    switch (e->kind) {
    case SRV_CP_CONTENT: delta = json_pack("{s:o}", "content", text_json(e->text, e->len)); break;
    case SRV_CP_REASONING: delta = json_pack("{s:o}", "reasoning_content", text_json(e->text, e->len)); break;
    case SRV_CP_CALL:
        delta = json_pack("{s:[{s:i, s:s, s:s, s:{s:o, s:s}}]}", "tool_calls", "index", e->index, "id", e->id, "type",
                          "function", "function", "name", text_json(e->text, e->len), "arguments", "");
        break;
    default:
        delta = json_pack("{s:[{s:i, s:{s:o}}]}", "tool_calls", "index", e->index, "function", "arguments",
                          text_json(e->text, e->len));
    }
    if (delta) json_array_append_new(d->list, delta);
}

static srv_cp *job_parser(srv_job *j) {
    if (!j->cp) j->cp = srv_chat_parser_new(j->req.chat);
    return j->cp;
}

/* One chunk per delta; lp (stolen) goes with the first, or alone in an empty delta. */
static void emit(srv_server *s, srv_job *j, deltas *d, json_t *lp, char **buf, size_t *len, size_t *cap) {
    for (size_t k = 0; k < json_array_size(d->list); k++) {
        json_t *delta = json_incref(json_array_get(d->list, k));
        srv_resp_sse_event(buf, len, cap, srv_resp_chat_chunk(s, j, delta, lp, NULL));
        lp = NULL;
    }
    if (lp) srv_resp_sse_event(buf, len, cap, srv_resp_chat_chunk(s, j, json_object(), lp, NULL));
    json_array_clear(d->list);
}

void srv_chat_sse_tokens(srv_server *s, srv_job *j, int from, int to, size_t *sent, char **buf, size_t *len,
                         size_t *cap) {
    srv_cp *p = job_parser(j);
    deltas d = {json_array()};
    for (int i = from; i < to; i++) {
        const size_t end = j->tok_end[i];
        if (p && end > *sent) srv_cp_feed(p, j->text + *sent, end - *sent, collect, &d);
        if (end > *sent) *sent = end;
        json_t *lp = j->req.sampling.logprobs ? json_pack("{s:[o]}", "content", srv_resp_chat_logprob(s, &j->toks[i]))
                                              : NULL;
        emit(s, j, &d, lp, buf, len, cap);
    }
    json_decref(d.list);
}

void srv_chat_sse_finish(srv_server *s, srv_job *j, size_t *sent, char **buf, size_t *len, size_t *cap) {
    srv_cp *p = job_parser(j);
    deltas d = {json_array()};
    if (p && j->text_len > *sent) srv_cp_feed(p, j->text + *sent, j->text_len - *sent, collect, &d);
    *sent = j->text_len;
    /* an error or a cancel ends the stream as it stands; a finished reply releases what the
     * parser held back */
    if (p && j->finish != SRV_FINISH_ERROR && j->finish != SRV_FINISH_CANCELLED) srv_cp_finish(p, collect, &d);
    emit(s, j, &d, NULL, buf, len, cap);
    json_decref(d.list);
    srv_resp_sse_event(buf, len, cap, srv_resp_chat_chunk(s, j, json_object(), NULL, json_string(finish_name(j, p))));
}

/* ==== Whole response ==== */
json_t *srv_chat_message(const srv_cp *p) {
    size_t cn, rn;
    const char *content = srv_cp_content(p, &cn), *reasoning = srv_cp_reasoning(p, &rn);
    const int nc = srv_cp_n_calls(p);
    json_t *m = json_pack("{s:s}", "role", "assistant");
    /* OpenAI: content is null when the reply is only tool calls */
    json_object_set_new(m, "content", nc && !cn ? json_null() : text_json(content, cn));
    if (rn) json_object_set_new(m, "reasoning_content", text_json(reasoning, rn));
    if (nc) {
        json_t *calls = json_array();
        for (int i = 0; i < nc; i++) {
            size_t an;
            const char *args = srv_cp_call_args(p, i, &an);
            json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:o}}", "id", srv_cp_call_id(p, i), "type",
                                                   "function", "function", "name", srv_cp_call_name(p, i),
                                                   "arguments", text_json(args, an)));
        }
        json_object_set_new(m, "tool_calls", calls);
    }
    return m;
}

json_t *srv_chat_choice(srv_server *s, srv_job *j) {
    srv_cp *p = srv_chat_parser_new(j->req.chat);
    json_t *msg;
    if (p) {
        srv_cp_feed(p, j->text ? j->text : "", j->text_len, NULL, NULL);
        srv_cp_finish(p, NULL, NULL);
        msg = srv_chat_message(p);
    } else {
        msg = json_pack("{s:s, s:s}", "role", "assistant", "content", "");
    }
    json_t *lp = json_null();
    if (j->req.sampling.logprobs) {
        json_t *content = json_array();
        for (int i = 0; i < j->n_toks; i++) json_array_append_new(content, srv_resp_chat_logprob(s, &j->toks[i]));
        lp = json_pack("{s:o}", "content", content);
    }
    json_t *c = json_pack("{s:i, s:o, s:o, s:s}", "index", j->choice, "message", msg, "logprobs", lp, "finish_reason",
                          finish_name(j, p));
    srv_cp_free(p);
    return c;
}
