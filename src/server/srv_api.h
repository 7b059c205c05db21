/* The OpenAI Responses API (POST /v1/responses) and the Anthropic Messages API (POST
 * /v1/messages, /v1/messages/count_tokens) over the chat machinery.
 *
 * A request of either dialect is translated into an OpenAI chat request (messages, tools,
 * tool_choice, sampling fields), parsed by srv_request_parse like /v1/chat/completions and run
 * as a chat job: the same template rendering, tool layer (srv_tools.c), reply parser
 * (srv_toolparse.c), queue, cancellation and metrics. Only the answer differs: the reply
 * parser's events are cut into segments (reasoning, text, one per tool call; srv_api_common.c)
 * and written as a Response object and its SSE events (srv_responses_out.c), or as a Message
 * and its SSE events (srv_anthropic_out.c).
 *
 * Hooks into the generic server (kept small because other work edits those files):
 * srv_http.c calls srv_api_dialect_enter per request, srv_api_parse for the two generation
 * routes and srv_api_route for the others; srv_response.c hands a job with `api` set to the
 * srv_api_* writers and asks srv_api_error_body for error bodies; srv_core.c frees `api`. */
#ifndef MLXCEL_SERVER_SRV_API_H
#define MLXCEL_SERVER_SRV_API_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "server/srv_mhd.h"
#include "server/srv_toolparse.h"

struct srv_server;
struct srv_job;

/* ==== Dialects ==== */
typedef enum srv_dialect {
    SRV_DIALECT_NATIVE = 0, /* OpenAI chat / completions, llama-server */
    SRV_DIALECT_RESPONSES,  /* OpenAI Responses API */
    SRV_DIALECT_ANTHROPIC,  /* Anthropic Messages API */
} srv_dialect;

/* The dialect of a route: /v1/responses[/...] and /v1/messages[/...]. */
srv_dialect srv_api_dialect_of(const char *url);
/* The dialect of the request this thread is answering. libmicrohttpd runs every callback of a
 * connection on that connection's thread (thread-per-connection mode), so the HTTP layer sets
 * it when a request arrives and every error body written for it (auth, size, queue, parse)
 * takes the dialect's shape without each call site passing it along. */
void srv_api_dialect_enter(srv_dialect d);
srv_dialect srv_api_dialect_current(void);

/* Error bodies in the current dialect: OpenAI's {"error": {...}} with the Responses field
 * names (a chat field such as `messages` or `max_tokens` named by a shared check is renamed
 * to `input` / `max_output_tokens`); Anthropic's {"type": "error", "error": {type, message}}. */
char *srv_api_error_body(srv_dialect d, int status, const char *message, const char *param);
/* The HTTP status in the current dialect: Anthropic answers a full queue with 529. */
int srv_api_status(int status);

/* ==== Segments of a reply (srv_api_common.c) ====
 * The reply parser's events cut into output items / content blocks: a run of reasoning, a run
 * of text, one tool call. A segment opens with the first event of its kind and closes when
 * another kind starts or the reply ends. */
typedef enum srv_seg_kind { SRV_SEG_TEXT = 0, SRV_SEG_REASONING, SRV_SEG_CALL } srv_seg_kind;

typedef struct srv_seg {
    srv_seg_kind kind;
    char id[64];       /* the dialect's id of the item (msg_/rs_/fc_) or block (toolu_ for calls) */
    char call_id[48];  /* SRV_SEG_CALL: the parser's "call_..." id */
    char *name;        /* SRV_SEG_CALL: the function's name */
    char *text;        /* text / reasoning / the call's arguments so far */
    size_t len, cap;
    bool closed;
} srv_seg;

typedef struct srv_segs srv_segs;
typedef void (*srv_seg_fn)(void *ctx, srv_segs *g, int index);
typedef void (*srv_seg_delta_fn)(void *ctx, srv_segs *g, int index, const char *t, size_t n);

struct srv_segs {
    srv_seg *v;
    int n, cap;
    int open;                /* the open segment, -1 when none */
    srv_seg_fn on_open;      /* may be NULL (whole answers build nothing while parsing) */
    srv_seg_delta_fn on_delta;
    srv_seg_fn on_close;
    void *ctx;
    srv_dialect dialect;     /* for the ids */
    bool seen_reasoning;     /* a reasoning event came */
    bool seen_answer;        /* a text or call event came */
    int pending;             /* tokens fed before either: reasoning tokens if thoughts follow */
    bool at_end;             /* the reply has ended: the last close is the final one */
};

void srv_segs_init(srv_segs *g, srv_dialect d);
void srv_segs_free(srv_segs *g);
/* srv_cp_sink over segments (ctx: the srv_segs). */
void srv_segs_sink(void *ctx, const srv_cp_event *e);
/* Closes the open segment. */
void srv_segs_close(srv_segs *g);

/* ==== Per-job state of a Responses / Messages job ==== */
typedef struct srv_api_job {
    srv_dialect dialect;
    char id[64];           /* resp_... / msg_... */
    /* Responses */
    json_t *echo;          /* request fields echoed in the Response object */
    json_t *history;       /* the conversation without instructions (for the store) */
    bool store;
    /* Streaming state (the connection thread, under the job's lock) */
    srv_cp *cp;
    srv_segs segs;
    long seq;              /* Responses: the next sequence_number */
    int reasoning_tokens;  /* tokens whose text went to the reasoning */
    char **buf;            /* the stream's buffer during one srv_api_sse_* call */
    size_t *len, *cap;
    struct srv_server *srv;
    struct srv_job *job;
} srv_api_job;

void srv_api_job_free(srv_api_job *a);

/* ==== Hooks for the HTTP layer ==== */
/* Parses a Responses / Messages request body into j->req (a chat request) and j->api. On error
 * j->req.bad_param names the field (in the dialect's terms). */
int srv_api_parse(struct srv_server *s, struct srv_job *j, struct MHD_Connection *c, srv_dialect d,
                  const char *body, size_t len, mx_error *err);
/* Routes that do not generate: POST /v1/messages/count_tokens, GET and DELETE
 * /v1/responses/{id}. *handled false when the URL is none of them. */
MHD_Result_t srv_api_route(struct srv_server *s, struct MHD_Connection *c, const char *method, const char *url,
                           const char *body, size_t len, bool *handled);

/* ==== Hooks for srv_response.c (job j has j->api) ==== */
char *srv_api_final(struct srv_server *s, struct srv_job *j);
void srv_api_sse_tokens(struct srv_server *s, struct srv_job *j, int from, int to, size_t *sent, char **buf,
                        size_t *len, size_t *cap);
/* The rest of the reply and the closing events (or the failure events of a failed job). */
void srv_api_sse_finish(struct srv_server *s, struct srv_job *j, size_t *sent, char **buf, size_t *len,
                        size_t *cap);

/* ==== Shared helpers (srv_api_common.c) ==== */
/* "<prefix>" + n random characters of [A-Za-z0-9] (getrandom). */
void srv_api_new_id(char *out, size_t cap, const char *prefix, int n);
/* The response's `model` (the served alias the request named, else the first). */
const char *srv_api_model(const struct srv_server *s, const struct srv_job *j);
/* One SSE event: "event: NAME\ndata: JSON\n\n" (o stolen). */
void srv_api_sse_event(char **buf, size_t *len, size_t *cap, const char *name, json_t *o);
/* Feeds tokens [from, to) of j's text through the parser into the segments; *sent: the bytes
 * already fed. Reasoning tokens: the tokens before the answer proper (its first text or call)
 * when the reply thinks, its think tags included. */
void srv_api_feed(struct srv_job *j, srv_cp *cp, srv_segs *g, int from, int to, size_t *sent, int *reasoning_tokens);
/* Feeds the rest of j's text and, unless the job failed, ends the parse; closes the segments. */
void srv_api_feed_end(struct srv_job *j, srv_cp *cp, srv_segs *g, size_t *sent);
/* The parser of job j's reply (a new one). */
srv_cp *srv_api_parser(const struct srv_job *j);
/* The chat message of a finished reply (content, reasoning_content, tool_calls). */
json_t *srv_api_chat_message(const srv_cp *cp);

/* Sets o[key] to text, or appends it on a new line to the string already there (a turn's
 * content gathered from several text blocks / items). */
void srv_api_append_text(json_t *o, const char *key, const char *text);
/* Rejects keys of object o that are not in the NULL-terminated list `known`: 400 naming
 * "<where>.<key>" (or the key at the top level). */
int srv_api_check_keys(const json_t *o, const char *const *known, const char *where, char *bad, size_t bad_cap,
                       mx_error *err);
/* Field error: copies `field` into bad and fills err with "field: msg". Returns -1. */
int srv_api_fail(char *bad, size_t bad_cap, mx_error *err, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* ==== Responses (srv_responses.c, srv_responses_out.c) ==== */
int srv_responses_translate(struct srv_server *s, srv_api_job *a, json_t *o, json_t **chat, char *bad, size_t bad_cap,
                            mx_error *err);
/* After srv_request_parse: the fields of the Response object that depend on the parse. */
void srv_responses_after_parse(struct srv_server *s, struct srv_job *j);
json_t *srv_responses_object(struct srv_server *s, struct srv_job *j, const char *status);
char *srv_responses_final(struct srv_server *s, struct srv_job *j);
/* Streaming: a->buf/len/cap set by the caller for the call. first: the opening events. */
void srv_responses_sse_tokens(struct srv_server *s, struct srv_job *j, int from, int to, size_t *sent);
void srv_responses_sse_finish(struct srv_server *s, struct srv_job *j, size_t *sent);
MHD_Result_t srv_responses_route(struct srv_server *s, struct MHD_Connection *c, const char *method, const char *id);
/* Stores a finished response (store: true) with its conversation. */
void srv_responses_store(struct srv_server *s, struct srv_job *j, json_t *response, const srv_cp *cp);

/* ==== Messages (srv_anthropic.c, srv_anthropic_out.c) ==== */
/* count: the /v1/messages/count_tokens body (no max_tokens, no sampling fields). */
int srv_anthropic_translate(struct srv_server *s, srv_api_job *a, struct MHD_Connection *c, json_t *o, bool count,
                            json_t **chat, char **prefill, char *bad, size_t bad_cap, mx_error *err);
/* Stop sequences of a Messages request (up to SRV_MAX_STOPS), set after srv_request_parse. */
int srv_anthropic_stops(struct srv_job *j, const json_t *o, char *bad, size_t bad_cap, mx_error *err);
char *srv_anthropic_final(struct srv_server *s, struct srv_job *j);
void srv_anthropic_sse_tokens(struct srv_server *s, struct srv_job *j, int from, int to, size_t *sent);
void srv_anthropic_sse_finish(struct srv_server *s, struct srv_job *j, size_t *sent);
MHD_Result_t srv_anthropic_count_tokens(struct srv_server *s, struct MHD_Connection *c, const char *body, size_t len);
/* The signature of a thinking block: "mlxcel1." and the hex XXH64 of its text. */
void srv_anthropic_signature(const char *thinking, size_t n, char out[32]);

/* ==== Response store (srv_resp_store.c) ====
 * Finished responses by id, for previous_response_id and GET /v1/responses/{id}: a
 * least-recently-used list bounded by count and by bytes (the JSON text of what is kept). */
typedef struct srv_resp_store srv_resp_store;
srv_resp_store *srv_resp_store_new(int max_count, size_t max_bytes);
void srv_resp_store_free(srv_resp_store *st);
/* Takes both references. An entry larger than the byte bound alone is not kept. */
void srv_resp_store_put(srv_resp_store *st, const char *id, json_t *response, json_t *history);
/* New references to the entry's objects (not to be modified), or -1 when absent. */
int srv_resp_store_get(srv_resp_store *st, const char *id, json_t **response, json_t **history);
bool srv_resp_store_delete(srv_resp_store *st, const char *id);
void srv_resp_store_stats(srv_resp_store *st, int *count, size_t *bytes);

#endif
