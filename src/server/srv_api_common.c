/* What the Responses and Messages routes share: the dialect of the request a connection thread
 * is answering and its error bodies, ids, the segments a reply is cut into, feeding a job's
 * text through the reply parser, and the entry points srv_http.c / srv_response.c call. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "server/srv_api.h"
#include "server/srv_chat_out.h"
#include "server/srv_internal.h"
#include "server/srv_tools.h"

/* ==== Dialect of the current request ==== */
static _Thread_local srv_dialect t_dialect;

srv_dialect srv_api_dialect_of(const char *url) {
    if (!strcmp(url, "/v1/responses") || !strncmp(url, "/v1/responses/", 14)) return SRV_DIALECT_RESPONSES;
    if (!strcmp(url, "/v1/messages") || !strncmp(url, "/v1/messages/", 13)) return SRV_DIALECT_ANTHROPIC;
    return SRV_DIALECT_NATIVE;
}

void srv_api_dialect_enter(srv_dialect d) { t_dialect = d; }
srv_dialect srv_api_dialect_current(void) { return t_dialect; }

int srv_api_status(int status) { return t_dialect == SRV_DIALECT_ANTHROPIC && status == 503 ? 529 : status; }

/* ==== Error bodies ==== */
/* Anthropic's error types by status (its documentation's table). */
static const char *anthropic_type(int status) {
    switch (status) {
    case 400: case 405: case 499: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: case 529: return "overloaded_error";
    default: return "api_error";
    }
}

/* A field named by the shared chat checks, in the dialect's terms ("" when it stays). */
static void rename_param(srv_dialect d, const char *p, char *out, size_t cap) {
    static const char *const resp[][2] = {
        {"messages", "input"}, {"max_tokens", "max_output_tokens"}, {"max_completion_tokens", "max_output_tokens"},
        {"reasoning_effort", "reasoning.effort"}, {"response_format", "text.format"},
    };
    static const char *const anth[][2] = {{"stop", "stop_sequences"}, {"reasoning_effort", "thinking"}};
    snprintf(out, cap, "%s", p);
    const char *const(*map)[2] = d == SRV_DIALECT_RESPONSES ? resp : anth;
    const size_t n = d == SRV_DIALECT_RESPONSES ? sizeof resp / sizeof resp[0] : sizeof anth / sizeof anth[0];
    for (size_t i = 0; i < n; i++) {
        const size_t k = strlen(map[i][0]);
        if (!strncmp(p, map[i][0], k) && (p[k] == 0 || p[k] == '[' || p[k] == '.')) {
            snprintf(out, cap, "%s%s", map[i][1], p + k);
            return;
        }
    }
    /* tools[N].function.X -> tools[N].X (both dialects write tools flat) */
    const char *f = strstr(p, "].function");
    if (!strncmp(p, "tools[", 6) && f) {
        const char *rest = f + 10;
        if (d == SRV_DIALECT_ANTHROPIC && !strcmp(rest, ".parameters")) rest = ".input_schema";
        snprintf(out, cap, "%.*s]%s", (int)(f - p), p, rest);
    }
}

/* One line of valid UTF-8 in place: messages quote request bytes (a key cut at 100 bytes may
 * end inside a character), and json_pack refuses invalid UTF-8 (the reply would have no body). */
char *srv_api_error_body(srv_dialect d, int status, const char *message, const char *param) {
    char name[96] = "", msg[1200];
    if (!message) message = "";
    if (param && *param) rename_param(d, param, name, sizeof name);
    /* the message starts with the field it names: say it in the dialect's terms too */
    const size_t pl = param ? strlen(param) : 0;
    if (pl && strcmp(name, param) && !strncmp(message, param, pl) && message[pl] == ':')
        snprintf(msg, sizeof msg, "%s%s", name, message + pl);
    else
        snprintf(msg, sizeof msg, "%s", message);
    srv_one_line_utf8(msg);
    srv_one_line_utf8(name);
    json_t *o;
    if (d == SRV_DIALECT_ANTHROPIC) {
        o = json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", anthropic_type(status), "message", msg);
    } else {
        json_t *e = json_pack("{s:s, s:s}", "message", msg, "type", srv_error_type(status));
        /* OpenAI's own code for an unknown previous response, which clients match on */
        if (status == 400 && !strcmp(name, "previous_response_id") && strstr(msg, "not found"))
            json_object_set_new(e, "code", json_string("previous_response_not_found"));
        else
            json_object_set_new(e, "code", json_integer(status));
        json_object_set_new(e, "param", name[0] ? json_string(name) : json_null());
        o = json_pack("{s:o}", "error", e);
    }
    char *out = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return out;
}

/* ==== Small helpers ==== */
void srv_api_new_id(char *out, size_t cap, const char *prefix, int n) {
    static const char hex[] = "0123456789abcdef";
    static const char b62[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    const bool anth = !strncmp(prefix, "msg_01", 6);
    unsigned char rnd[64];
    if (n > 64) n = 64;
    if (getrandom(rnd, (size_t)n, 0) != (ssize_t)n) { /* never on Linux for <= 256 bytes; a fallback anyway */
        uint64_t x = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)out;
        for (int i = 0; i < n; i++) rnd[i] = (unsigned char)((x = x * 6364136223846793005ull + 1442695040888963407ull) >> 56);
    }
    size_t k = (size_t)snprintf(out, cap, "%s", prefix);
    for (int i = 0; i < n && k + 1 < cap; i++) out[k++] = anth ? b62[rnd[i] % 62] : hex[rnd[i] & 15];
    out[k < cap ? k : cap - 1] = 0;
}

const char *srv_api_model(const srv_server *s, const srv_job *j) {
    for (int i = 0; i < s->cfg.n_aliases; i++)
        if (!strcmp(j->req.model, s->cfg.aliases[i])) return s->cfg.aliases[i];
    return s->be->info.name;
}

void srv_api_sse_event(char **buf, size_t *len, size_t *cap, const char *name, json_t *o) {
    char *d = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!d) return;
    srv_buf_append(buf, len, cap, "event: ", 7);
    srv_buf_append(buf, len, cap, name, strlen(name));
    srv_buf_append(buf, len, cap, "\ndata: ", 7);
    srv_buf_append(buf, len, cap, d, strlen(d));
    srv_buf_append(buf, len, cap, "\n\n", 2);
    free(d);
}

int srv_api_fail(char *bad, size_t bad_cap, mx_error *err, const char *field, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(bad, bad_cap, "%s", field);
    return mx_fail(err, "%s: %s", field, msg);
}

void srv_api_append_text(json_t *o, const char *key, const char *text) {
    const char *old = json_string_value(json_object_get(o, key));
    if (!old) {
        json_object_set_new(o, key, json_string(text));
        return;
    }
    size_t n = strlen(old) + strlen(text) + 2;
    char *j = malloc(n);
    if (!j) return;
    snprintf(j, n, "%s\n%s", old, text);
    json_object_set_new(o, key, json_string(j));
    free(j);
}

int srv_api_check_keys(const json_t *o, const char *const *known, const char *where, char *bad, size_t bad_cap,
                       mx_error *err) {
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)o, key, v) {
        bool ok = false;
        for (int i = 0; known[i] && !ok; i++) ok = !strcmp(key, known[i]);
        if (ok) continue;
        char f[160];
        if (where && *where) snprintf(f, sizeof f, "%s.%.100s", where, key);
        else snprintf(f, sizeof f, "%.100s", key);
        return srv_api_fail(bad, bad_cap, err, f, "unknown field (this server implements the fields listed in "
                                                  "docs/apis.md; a field it cannot honour is refused, not ignored)");
    }
    return 0;
}

/* ==== Segments ==== */
void srv_segs_init(srv_segs *g, srv_dialect d) {
    memset(g, 0, sizeof *g);
    g->open = -1;
    g->dialect = d;
}

void srv_segs_free(srv_segs *g) {
    for (int i = 0; i < g->n; i++) {
        free(g->v[i].name);
        free(g->v[i].text);
    }
    free(g->v);
    memset(g, 0, sizeof *g);
    g->open = -1;
}

void srv_segs_close(srv_segs *g) {
    if (g->open < 0) return;
    const int i = g->open;
    g->v[i].closed = true;
    g->open = -1;
    if (g->on_close) g->on_close(g->ctx, g, i);
}

static srv_seg *seg_open(srv_segs *g, srv_seg_kind kind, const char *call_id, const char *name, size_t name_len) {
    srv_segs_close(g);
    if (g->n == g->cap) {
        const int nc = g->cap ? g->cap * 2 : 4;
        srv_seg *nv = realloc(g->v, (size_t)nc * sizeof *nv);
        if (!nv) return NULL;
        g->v = nv;
        g->cap = nc;
    }
    srv_seg *x = &g->v[g->n];
    memset(x, 0, sizeof *x);
    x->kind = kind;
    if (kind == SRV_SEG_CALL) {
        snprintf(x->call_id, sizeof x->call_id, "%s", call_id ? call_id : "");
        x->name = strndup(name ? name : "", name_len);
    }
    if (g->dialect == SRV_DIALECT_RESPONSES) {
        static const char *const prefix[] = {"msg_", "rs_", "fc_"};
        srv_api_new_id(x->id, sizeof x->id, prefix[kind], 48);
    } else if (kind == SRV_SEG_CALL) {
        /* the parser's "call_" + 24 alphanumerics, as Anthropic's "toolu_..." */
        const char *tail = call_id && !strncmp(call_id, "call_", 5) ? call_id + 5 : call_id ? call_id : "";
        snprintf(x->id, sizeof x->id, "toolu_%s", tail);
    }
    g->open = g->n++;
    if (g->on_open) g->on_open(g->ctx, g, g->open);
    return x;
}

static void seg_append(srv_segs *g, int i, const char *t, size_t n) {
    srv_seg *x = &g->v[i];
    if (x->len + n + 1 > x->cap) {
        size_t nc = (x->len + n + 1) * 2;
        char *nb = realloc(x->text, nc);
        if (!nb) return;
        x->text = nb;
        x->cap = nc;
    }
    memcpy(x->text + x->len, t, n);
    x->len += n;
    x->text[x->len] = 0;
    if (g->on_delta) g->on_delta(g->ctx, g, i, t, n);
}

void srv_segs_sink(void *ctx, const srv_cp_event *e) {
    srv_segs *g = ctx;
    switch (e->kind) {
    case SRV_CP_CONTENT:
    case SRV_CP_REASONING: {
        const srv_seg_kind k = e->kind == SRV_CP_CONTENT ? SRV_SEG_TEXT : SRV_SEG_REASONING;
        if (k == SRV_SEG_REASONING) g->seen_reasoning = true;
        else g->seen_answer = true;
        if ((g->open < 0 || g->v[g->open].kind != k) && !seg_open(g, k, NULL, NULL, 0)) return;
        seg_append(g, g->open, e->text, e->len);
        break;
    }
    case SRV_CP_CALL:
        g->seen_answer = true;
        seg_open(g, SRV_SEG_CALL, e->id, e->text, e->len);
        break;
    case SRV_CP_ARGS:
        /* the call's segment: the index-th call (its arguments follow its header) */
        for (int i = 0, k = 0; i < g->n; i++) {
            if (g->v[i].kind != SRV_SEG_CALL) continue;
            if (k++ == e->index) {
                seg_append(g, i, e->text, e->len);
                break;
            }
        }
        break;
    }
}

/* ==== Feeding a job's reply ==== */
srv_cp *srv_api_parser(const srv_job *j) { return srv_chat_parser_new(j->req.chat); }

json_t *srv_api_chat_message(const srv_cp *cp) { return srv_chat_message(cp); }

void srv_api_feed(srv_job *j, srv_cp *cp, srv_segs *g, int from, int to, size_t *sent, int *reasoning_tokens) {
    for (int i = from; i < to; i++) {
        const size_t end = j->tok_end[i];
        if (cp && end > *sent) srv_cp_feed(cp, j->text + *sent, end - *sent, srv_segs_sink, g);
        if (end > *sent) *sent = end;
        if (g->seen_answer || !reasoning_tokens) continue;
        if (g->seen_reasoning) {
            *reasoning_tokens += 1 + g->pending;
            g->pending = 0;
        } else {
            g->pending++;
        }
    }
}

void srv_api_feed_end(srv_job *j, srv_cp *cp, srv_segs *g, size_t *sent) {
    if (cp && j->text_len > *sent) srv_cp_feed(cp, j->text + *sent, j->text_len - *sent, srv_segs_sink, g);
    *sent = j->text_len;
    /* an error or a cancel ends the reply as it stands; a finished one releases what the parser
     * held back (a partial marker that never completed) */
    if (cp && j->finish != SRV_FINISH_ERROR && j->finish != SRV_FINISH_CANCELLED) srv_cp_finish(cp, srv_segs_sink, g);
    g->at_end = true;
    srv_segs_close(g);
}

/* ==== Per-job state ==== */
void srv_api_job_free(srv_api_job *a) {
    if (!a) return;
    json_decref(a->echo);
    json_decref(a->history);
    srv_cp_free(a->cp);
    srv_segs_free(&a->segs);
    free(a);
}

/* ==== Entry points ==== */
int srv_api_parse(srv_server *s, srv_job *j, struct MHD_Connection *c, srv_dialect d, const char *body, size_t len,
                  mx_error *err) {
    char *bad = j->req.bad_param;
    const size_t bad_cap = sizeof j->req.bad_param;
    srv_api_job *a = calloc(1, sizeof *a);
    if (!a) return srv_api_fail(bad, bad_cap, err, "body", "out of memory");
    a->dialect = d;
    srv_segs_init(&a->segs, d);
    j->api = a;
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(o)) {
        char m[300];
        if (o) snprintf(m, sizeof m, "expected a JSON object");
        else srv_json_error_msg(&je, m, sizeof m);
        json_decref(o);
        return srv_api_fail(bad, bad_cap, err, "body", "%s", m);
    }
    json_t *chat = NULL;
    char *prefill = NULL;
    int rc = d == SRV_DIALECT_RESPONSES
                 ? srv_responses_translate(s, a, o, &chat, bad, bad_cap, err)
                 : srv_anthropic_translate(s, a, c, o, false, &chat, &prefill, bad, bad_cap, err);
    char *text = rc ? NULL : json_dumps(chat, JSON_COMPACT);
    json_decref(chat);
    if (!rc && !text) rc = srv_api_fail(bad, bad_cap, err, "body", "out of memory");
    if (!rc) {
        /* the chat request the body stands for, through the chat route's own parser (its
         * checks name chat fields: srv_api_error_body renames them) */
        const int vocab = s->be->text_ops->vocab_size(s->be->text);
        rc = srv_request_parse(&j->req, SRV_API_CHAT, text, strlen(text), &s->cfg, vocab, err);
    }
    free(text);
    if (!rc && j->req.chat && prefill) { /* Anthropic: a final assistant message is continued */
        j->req.chat->prefill = prefill;
        prefill = NULL;
    }
    free(prefill);
    if (!rc && d == SRV_DIALECT_ANTHROPIC) rc = srv_anthropic_stops(j, o, j->req.bad_param, sizeof j->req.bad_param, err);
    if (!rc && d == SRV_DIALECT_RESPONSES) srv_responses_after_parse(s, j);
    json_decref(o);
    if (!rc) {
        if (d == SRV_DIALECT_RESPONSES) srv_api_new_id(a->id, sizeof a->id, "resp_", 48);
        else srv_api_new_id(a->id, sizeof a->id, "msg_01", 22);
    }
    return rc;
}

MHD_Result_t srv_api_route(srv_server *s, struct MHD_Connection *c, const char *method, const char *url,
                           const char *body, size_t len, bool *handled) {
    *handled = false;
    if (!strcmp(url, "/v1/messages/count_tokens")) {
        *handled = true;
        if (strcmp(method, "POST")) return srv_mhd_method_not_allowed(s, c, "POST");
        return srv_anthropic_count_tokens(s, c, body, len);
    }
    if (!strncmp(url, "/v1/responses/", 14) && url[14] && !strchr(url + 14, '/')) {
        *handled = true;
        return srv_responses_route(s, c, method, url + 14);
    }
    return MHD_NO;
}

char *srv_api_final(srv_server *s, srv_job *j) {
    return j->api->dialect == SRV_DIALECT_RESPONSES ? srv_responses_final(s, j) : srv_anthropic_final(s, j);
}

void srv_api_sse_tokens(srv_server *s, srv_job *j, int from, int to, size_t *sent, char **buf, size_t *len,
                        size_t *cap) {
    srv_api_job *a = j->api;
    a->buf = buf, a->len = len, a->cap = cap, a->srv = s, a->job = j;
    if (a->dialect == SRV_DIALECT_RESPONSES) srv_responses_sse_tokens(s, j, from, to, sent);
    else srv_anthropic_sse_tokens(s, j, from, to, sent);
    a->buf = NULL;
}

void srv_api_sse_finish(srv_server *s, srv_job *j, size_t *sent, char **buf, size_t *len, size_t *cap) {
    srv_api_job *a = j->api;
    a->buf = buf, a->len = len, a->cap = cap, a->srv = s, a->job = j;
    if (a->dialect == SRV_DIALECT_RESPONSES) srv_responses_sse_finish(s, j, sent);
    else srv_anthropic_sse_finish(s, j, sent);
    a->buf = NULL;
}
