/* libmicrohttpd glue. Thread per connection: a handler may block until its job is done, and a
 * streaming response's reader blocks on the job's condition variable (with a timeout that
 * sends SSE keep-alive comments). Bodies are accumulated up to --max-body-size (413 beyond),
 * API keys are checked before the body is read (401). */
#include <arpa/inet.h>
#include <errno.h>
#include <malloc.h>
#include <microhttpd.h>
#include <netdb.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/env.h"
#include "base/log.h"
#include "server/srv_conn.h"
#include "server/srv_guard.h"
#include "server/srv_api.h"
#include "server/srv_embed.h"
#include "server/srv_internal.h"
#include "server/srv_tools.h"
#include "server/srv_mhd.h"
#include "server/srv_webui.h"
#include "tune/tune_policy.h"
#include "server/srv_server.h"

/* ==== Replies ==== */
typedef struct conn_ctx {
    char *body;
    size_t len, cap;
    bool too_large;
    uint64_t discarded; /* body bytes past the limit, read and dropped */
    bool replied;
    srv_job *job; /* the HTTP side's reference */
    srv_dialect dialect; /* /v1/responses, /v1/messages (srv_api.h) */
} conn_ctx;

static const char *code_label(int status) {
    static const char *known[] = {"200", "400", "401", "403", "404", "405", "413", "501", "503", "529"};
    char code[8];
    snprintf(code, sizeof code, "%d", status);
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(code, known[i])) return known[i];
    return "other";
}

/* The answer srv_guard_request chose for the request's Origin (none for a refused one). */
void srv_mhd_cors(struct MHD_Response *r, struct MHD_Connection *c) {
    const char *origin = NULL;
    bool cred = false;
    if (!srv_conns_cors(c, &origin, &cred) || !origin) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", origin);
    if (strcmp(origin, "*")) MHD_add_response_header(r, "Vary", "Origin");
}

MHD_Result_t srv_mhd_queue(srv_server *s, struct MHD_Connection *c, int status, struct MHD_Response *r) {
    srv_mhd_cors(r, c);
    MHD_Result_t rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    srv_metrics_add(s->metrics, SM_HTTP_RESPONSES_TOTAL, code_label(status), 1);
    return rc;
}

/* hdr/val: one more header, or NULL */
static MHD_Result_t reply_with(srv_server *s, struct MHD_Connection *c, int status, const char *ctype, char *body,
                               const char *hdr, const char *val) {
    status = srv_api_status(status); /* Anthropic's 529 for a full queue */
    /* handed over, not copied: a large answer is not held twice */
    struct MHD_Response *r = body ? MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE)
                                  : MHD_create_response_from_buffer(2, (void *)"{}", MHD_RESPMEM_PERSISTENT);
    if (!r) { free(body); return MHD_NO; }
    MHD_add_response_header(r, "Content-Type", ctype);
    if (hdr) MHD_add_response_header(r, hdr, val);
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    return srv_mhd_queue(s, c, status, r);
}

static MHD_Result_t reply(srv_server *s, struct MHD_Connection *c, int status, const char *ctype, char *body) {
    return reply_with(s, c, status, ctype, body, NULL, NULL);
}

static MHD_Result_t reply_error(srv_server *s, struct MHD_Connection *c, int status, const char *msg, const char *param) {
    return reply(s, c, status, "application/json; charset=utf-8", srv_resp_error(status, msg, param));
}

MHD_Result_t srv_mhd_method_not_allowed(srv_server *s, struct MHD_Connection *c, const char *takes) {
    char msg[64];
    snprintf(msg, sizeof msg, "this route takes %s", takes);
    const char *allow = strcmp(takes, "GET") ? "POST, OPTIONS" : "GET, HEAD, OPTIONS";
    return reply_with(s, c, 405, "application/json; charset=utf-8", srv_resp_error(405, msg, NULL), "Allow", allow);
}

/* CORS preflight: a browser sends it before a cross-origin POST with a JSON body or an
 * Authorization header, and sends no credentials with it, so it is answered before the API-key
 * check (as llama-server does) on every route, known or not. */
static MHD_Result_t reply_preflight(srv_server *s, struct MHD_Connection *c) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    const char *want = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    const char *origin = NULL;
    bool cred = false;
    if (srv_conns_cors(c, &origin, &cred) && cred) /* never for `null` or an unlisted origin */
        MHD_add_response_header(r, "Access-Control-Allow-Credentials", "true");
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    MHD_add_response_header(r, "Access-Control-Allow-Headers", want && *want ? want : "content-type, authorization");
    return srv_mhd_queue(s, c, 200, r);
}

/* ==== Auth ==== */
static bool key_equal(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    unsigned char d = (unsigned char)(la != lb);
    for (size_t i = 0; i < la; i++) d |= (unsigned char)(a[i] ^ b[i % (lb ? lb : 1)]);
    return d == 0;
}

static bool authorized(srv_server *s, struct MHD_Connection *c) {
    if (s->cfg.n_api_keys == 0) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (h && !strncasecmp(h, "Bearer ", 7)) {
        h += 7;
        while (*h == ' ') h++;
    } else {
        h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key"); /* Anthropic's clients */
        if (!h) return false;
    }
    bool ok = false;
    for (int i = 0; i < s->cfg.n_api_keys; i++) ok |= key_equal(h, s->cfg.api_keys[i]);
    return ok;
}

/* ==== Streaming reader ==== */
/* One SSE response over a response's jobs (its choices, in order; one for most requests). */
typedef struct stream_state {
    srv_job **jobs;    /* [n], own references */
    int n;
    int *sent_toks;    /* [n] */
    size_t *sent_bytes;/* [n] */
    bool *started, *done; /* [n]: role chunk sent; finish chunk sent */
    char *buf;
    size_t len, cap, off;
    bool finished;
    double last_write;
    bool ttft_done;           /* MLXCEL_PROFILE_TTFT's line was logged */
} stream_state;

/* Appends what choice i has that was not sent yet; returns whether its finish went out. */
static bool stream_collect(stream_state *st, int i) {
    srv_job *j = st->jobs[i];
    srv_server *s = j->srv;
    if (st->done[i]) return true;
    pthread_mutex_lock(&j->mu);
    int n = j->n_toks;
    if (!st->started[i] || n > st->sent_toks[i]) {
        srv_sse_tokens(s, j, st->sent_toks[i], n, !st->started[i], &st->sent_bytes[i], &st->buf, &st->len, &st->cap);
        st->started[i] = true;
        st->sent_toks[i] = n;
    }
    if (j->done && st->sent_toks[i] == j->n_toks) {
        if ((j->finish == SRV_FINISH_ERROR || j->finish == SRV_FINISH_CANCELLED) && !j->api) {
            /* an error event first: a half-closed client still reads, and learns why (the
             * Responses and Messages streams end with their own failure events) */
            int status = 500;
            const char *why = j->finish == SRV_FINISH_ERROR ? "generation failed in the engine"
                                                             : srv_cancel_reason(j, &status);
            char *e = srv_resp_error(status, why, NULL);
            srv_buf_append(&st->buf, &st->len, &st->cap, "data: ", 6);
            srv_buf_append(&st->buf, &st->len, &st->cap, e, strlen(e));
            srv_buf_append(&st->buf, &st->len, &st->cap, "\n\n", 2);
            free(e);
        }
        srv_sse_finish(s, j, &st->sent_bytes[i], &st->buf, &st->len, &st->cap);
        st->done[i] = true;
    }
    pthread_mutex_unlock(&j->mu);
    return st->done[i];
}

static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max) {
    (void)pos;
    stream_state *st = cls;
    srv_job *j0 = st->jobs[0];
    srv_server *s = j0->srv;
    if (st->off >= st->len) {
        st->len = st->off = 0;
        if (st->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        for (;;) {
            const uint64_t seq = srv_job_progress(j0); /* before looking: no wake-up is missed */
            bool all = true;
            for (int i = 0; i < st->n; i++) all &= stream_collect(st, i);
            if (all) {
                srv_sse_end(s, st->jobs, st->n, &st->buf, &st->len, &st->cap);
                st->finished = true;
            }
            if (st->len) break;
            double now = mx_now();
            double ping = s->cfg.sse_ping_s;
            if (ping > 0 && now - st->last_write >= ping) {
                static const char ka[] = ": keep-alive\n\n";
                srv_buf_append(&st->buf, &st->len, &st->cap, ka, sizeof ka - 1);
                break;
            }
            /* Wake at least once a second to check the ping deadline. */
            double wait = ping > 0 ? st->last_write + ping - now : 1.0;
            if (wait > 1.0) wait = 1.0;
            if (wait < 0.001) wait = 0.001;
            srv_job_wait(j0, seq, wait);
        }
        if (!st->len) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = st->len - st->off;
    if (n > max) n = max;
    memcpy(out, st->buf + st->off, n);
    st->off += n;
    st->last_write = mx_now();
    if (!st->ttft_done && st->sent_toks[0] > 0) { /* the first token's text goes out now */
        srv_job_log_ttft(j0, st->last_write);
        st->ttft_done = true;
    }
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    stream_state *st = cls;
    for (int i = 0; i < st->n; i++) {
        srv_job_detach(st->jobs[i]);
        srv_job_release(st->jobs[i]);
    }
    free(st->jobs);
    free(st->sent_toks);
    free(st->sent_bytes);
    free(st->started);
    free(st->done);
    free(st->buf);
    free(st);
}

/* ==== Generation routes ==== */
/* SSE response over job j; the reader holds its own reference. */
static MHD_Result_t reply_stream(srv_server *s, struct MHD_Connection *c, srv_job *const *js, int n) {
    stream_state *st = calloc(1, sizeof *st);
    if (!st) return reply_error(s, c, 500, "out of memory", NULL);
    st->jobs = calloc((size_t)n, sizeof *st->jobs);
    st->sent_toks = calloc((size_t)n, sizeof *st->sent_toks);
    st->sent_bytes = calloc((size_t)n, sizeof *st->sent_bytes);
    st->started = calloc((size_t)n, sizeof *st->started);
    st->done = calloc((size_t)n, sizeof *st->done);
    if (!st->jobs || !st->sent_toks || !st->sent_bytes || !st->started || !st->done) {
        stream_free(st);
        return reply_error(s, c, 500, "out of memory", NULL);
    }
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < n; i++) js[i]->refs++;
    pthread_mutex_unlock(&s->mu);
    memcpy(st->jobs, js, (size_t)n * sizeof *js);
    st->n = n;
    st->last_write = mx_now();
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, st, stream_free);
    if (!r) { stream_free(st); return MHD_NO; }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    return srv_mhd_queue(s, c, 200, r);
}

/* llama-server's n_predict 0: no token is generated, only the prompt would be evaluated. The
 * engine has no prompt-only request (its max_tokens <= 0 means "until the context is full"), so
 * the job is finished here and never enqueued: the prompt is tokenized and counted in
 * tokens_evaluated, but not run (nor cached). Nobody else sees the job yet: no lock. */
static void job_finish_empty(srv_job *j) {
    j->max_tokens = 0;
    j->finish = SRV_FINISH_LENGTH;
    j->t_done = mx_now();
    j->done = true;
}

int srv_tokenize_text(void *ctx, const char *text, bool add_special, int32_t **ids, size_t *n, mx_error *err) {
    srv_backend *be = ctx;
    return be->text_ops->tokenize(be->text, text, strlen(text), add_special, ids, n, err);
}

/* A constrained request needs the backend's token bytes (built once, on first use). */
static int job_grammar_vocab(srv_server *s, srv_job *j, mx_error *err) {
    if (!j->req.grammar) return 0;
    const srv_text_ops *t = s->be->text_ops;
    mx_error e2 = {{0}};
    if (!t->grammar_vocab || !(j->req.grammar_vocab = t->grammar_vocab(s->be->text, NULL, 0, &e2))) {
        snprintf(j->req.bad_param, sizeof j->req.bad_param, "%s", j->req.grammar_field);
        return mx_fail(err, "constrained decoding is not available: %s",
                       t->grammar_vocab ? e2.msg : "this backend has no token bytes");
    }
    return 0;
}

/* An enforced tool_choice (srv_tools_enforce, during the render) constrains the reply to its
 * call grammar, over token bytes where the syntax's special markers are text. */
static int job_call_grammar(srv_server *s, srv_job *j, const char **param, mx_error *err) {
    srv_chat_opts *o = j->req.chat;
    if (!o || !o->call_grammar) return 0;
    const bool lazy = o->call_trigger[0] != 0; /* strict tools under auto */
    *param = lazy ? "tools" : "tool_choice";
    if (j->req.grammar)
        return mx_fail(err, "%s: %s constrains the reply's calls with a grammar of its own, so it cannot be combined "
                            "with %s", *param, lazy ? "a strict tool" : "a required or named tool call",
                       j->req.grammar_field);
    const char *keep[16];
    const int n_keep = srv_chat_keep_pieces(o, keep, 16);
    const srv_text_ops *t = s->be->text_ops;
    mx_error e2 = {{0}};
    if (!t->grammar_vocab || !(j->req.grammar_vocab = t->grammar_vocab(s->be->text, keep, n_keep, &e2)))
        return mx_fail(err, "%s: constrained decoding is not available: %s", *param,
                       t->grammar_vocab ? e2.msg : "this backend has no token bytes");
    j->req.grammar = grammar_retain(o->call_grammar);
    snprintf(j->req.grammar_field, sizeof j->req.grammar_field, "%s", *param);
    snprintf(j->req.grammar_trigger, sizeof j->req.grammar_trigger, "%s", o->call_trigger);
    return 0;
}

/* A request's body parsed into j->req, its text logit_bias and mixed prompt resolved. */
static int parse_into(srv_server *s, srv_job *j, struct MHD_Connection *c, conn_ctx *cc, srv_api api, mx_error *err) {
    srv_backend *be = s->be;
    if (cc->dialect != SRV_DIALECT_NATIVE) /* Responses / Messages: a chat request underneath */
        return srv_api_parse(s, j, c, cc->dialect, cc->body ? cc->body : "", cc->len, err);
    const int vocab = be->text_ops->vocab_size(be->text);
    return srv_request_parse(&j->req, api, cc->body ? cc->body : "", cc->len, &s->cfg, vocab, err) ||
           srv_request_text_bias(&j->req, srv_tokenize_text, be, vocab, err) ||
           srv_request_mixed_prompt(&j->req, srv_tokenize_text, be, vocab, err) || job_grammar_vocab(s, j, err);
}

/* The prompt's ids: the chat template's, the text's, or the ids given; element p >= 1 of a
 * list of prompts (/v1/completions) from that element. *param names the field on error. */
static int prompt_ids(srv_server *s, srv_job *j, srv_api api, size_t p, int32_t **ids, size_t *n,
                      const char **param, mx_error *err) {
    srv_backend *be = s->be;
    *param = api == SRV_API_CHAT ? "messages" : "prompt";
    if (p > 0) {
        json_t *e = json_array_get(j->req.prompt_list, p);
        if (json_is_string(e)) return be->text_ops->tokenize(be->text, json_string_value(e), json_string_length(e),
                                                             true, ids, n, err);
        return srv_tokenize_mixed(e, true, srv_tokenize_text, be, be->text_ops->vocab_size(be->text), ids, n, err);
    }
    if (api == SRV_API_CHAT) {
        if (!be->text_ops->has_template)
            return mx_fail(err, "this model has no chat template; start the server with --chat-template-file");
        char *prompt = NULL; /* tools, tool_choice, reasoning: srv_tools.c */
        if (srv_chat_render(s->chat_caps, be, j->req.chat, j->req.messages, j->req.template_extra,
                            j->req.add_generation_prompt, &prompt, param, err) ||
            job_call_grammar(s, j, param, err)) {
            free(prompt);
            return -1;
        }
        int rc = be->text_ops->tokenize(be->text, prompt, strlen(prompt), false, ids, n, err);
        free(prompt);
        return rc;
    }
    if (j->req.prompt_text)
        return be->text_ops->tokenize(be->text, j->req.prompt_text, strlen(j->req.prompt_text), true, ids, n, err);
    *ids = j->req.prompt_ids;
    *n = j->req.n_prompt_ids;
    j->req.prompt_ids = NULL;
    return 0;
}

/* Takes ids; checks the length against the context and sets max_tokens (errors name prompt p
 * of a list when `listed`). */
static int job_prompt(srv_server *s, srv_job *j, int32_t *ids, size_t n, size_t p, bool listed, mx_error *err) {
    j->prompt = ids;
    j->n_prompt = (int)n;
    const int n_ctx = s->cfg.ctx_size;
    char which[32] = "";
    if (listed) snprintf(which, sizeof which, " %zu", p);
    if (n == 0) return mx_fail(err, "prompt%s: the prompt is empty (no tokens)", which);
    if ((int)n >= n_ctx)
        return mx_fail(err,
                       "the request exceeds the available context size: the prompt%s has %zu tokens, the context is "
                       "%d (--ctx-size) and at least one token must be generated",
                       which, n, n_ctx);
    int avail = n_ctx - (int)n;
    j->max_tokens = j->req.max_tokens < 0 || j->req.max_tokens > avail ? avail : j->req.max_tokens;
    if (j->max_tokens < 1) j->max_tokens = 1;
    return 0;
}

/* Choices 1.. of a request (`n`, a list of prompts): jobs with a copy of the request's
 * sampling and limits, each with its prompt's ids; with a seed, choice i samples with seed + i (choice 0 is the request as
 * given, so n = 1 and n > 1 agree on it). Owned by j as kids. */
static int make_kids(srv_server *s, srv_job *j, int32_t *const *pids,
                     const size_t *pn, int n_choices, int total, const char **param, mx_error *err) {
    j->kids = calloc((size_t)total, sizeof *j->kids);
    if (!j->kids) return mx_fail(err, "out of memory");
    for (int c = 1; c < total; c++) {
        srv_job *k = srv_job_new(s);
        if (!k) return mx_fail(err, "out of memory");
        j->kids[j->n_kids++] = k;
        if (srv_request_copy_choice(&k->req, &j->req, err)) return -1;
        const size_t p = (size_t)(c / n_choices);
        int32_t *ids = malloc((pn[p] ? pn[p] : 1) * sizeof *ids);
        if (!ids) return mx_fail(err, "out of memory");
        memcpy(ids, pids[p], pn[p] * sizeof *ids);
        *param = "prompt";
        if (job_prompt(s, k, ids, pn[p], p, j->req.prompt_list != NULL, err)) return -1;
        if (k->req.sampling.has_seed) k->req.sampling.seed += (uint64_t)c;
        k->choice = c;
        k->counts_prompt = c % n_choices == 0;
        if (c % n_choices) { /* the prompt's first choice leads: created before this one */
            srv_job *l = c < n_choices ? j : j->kids[(c / n_choices) * n_choices - 1];
            pthread_mutex_lock(&s->mu);
            l->refs++;
            pthread_mutex_unlock(&s->mu);
            k->lead = l;
        }
        memcpy(k->id, j->id, sizeof k->id);
        k->created = j->created;
        k->t_arrival = j->t_arrival;
        k->fd = j->fd;
    }
    return 0;
}

/* Queues a response's jobs (choices in order) and answers: a stream, or the whole response
 * once every choice is done (an error if any failed or was cancelled). */
static MHD_Result_t reply_jobs(srv_server *s, struct MHD_Connection *c, srv_job *const *js, int total) {
    srv_job *j = js[0];
    mx_error err = {{0}};
    int status = 0;
    if (total > 1 && srv_job_group(js, total)) return reply_error(s, c, 500, "out of memory", NULL);
    if (j->req.api == SRV_API_LLAMA_COMPLETION && j->req.max_tokens == 0) {
        job_finish_empty(j); /* never enqueued; /completion has no n */
    } else if (srv_core_enqueue(s, js, total, &status, &err)) {
        char wait[16]; /* queue full: when to try again (clients such as openai's honour it) */
        snprintf(wait, sizeof wait, "%d", srv_core_retry_after(s));
        return reply_with(s, c, status, "application/json; charset=utf-8", srv_resp_error(status, err.msg, NULL),
                          status == 503 ? "Retry-After" : NULL, wait);
    }
    if (j->req.stream) return reply_stream(s, c, js, total);
    /* Non-stream: this connection's thread waits for every choice. */
    for (int i = 0; i < total;) {
        const uint64_t seq = srv_job_progress(j);
        for (; i < total; i++) {
            pthread_mutex_lock(&js[i]->mu);
            const bool d = js[i]->done;
            pthread_mutex_unlock(&js[i]->mu);
            if (!d) break;
        }
        if (i < total) srv_job_wait(j, seq, 1.0);
    }
    for (int i = 0; i < total; i++) {
        if (js[i]->finish == SRV_FINISH_ERROR) return reply_error(s, c, 500, "generation failed in the engine", NULL);
        if (js[i]->finish == SRV_FINISH_CANCELLED) {
            const char *why = srv_cancel_reason(js[i], &status);
            return reply_error(s, c, status, why, NULL);
        }
    }
    srv_job_log_ttft(j, mx_now()); /* the whole answer goes out now */
    return reply(s, c, 200, "application/json; charset=utf-8", srv_resp_final(s, js, total));
}

static MHD_Result_t route_generate(srv_server *s, struct MHD_Connection *c, conn_ctx *cc, srv_api api) {
    mx_error err = {{0}};
    srv_job *j = srv_job_new(s);
    if (!j) return reply_error(s, c, 500, "out of memory", NULL);
    cc->job = j;
    pthread_mutex_lock(&s->mu);
    s->n_http_jobs++; /* until on_completed: its answer is sent (or the client is gone) */
    pthread_mutex_unlock(&s->mu);
    if (parse_into(s, j, c, cc, api, &err)) return reply_error(s, c, 400, err.msg, j->req.bad_param);
    free(cc->body); /* parsed: the request is in j->req, and the wait for the answer may be long */
    cc->body = NULL;

    /* Prompts -> ids: one, or each of a list (/v1/completions). */
    const size_t n_prompts = j->req.prompt_list ? json_array_size(j->req.prompt_list) : 1;
    const int n_choices = j->req.n_choices > 0 ? j->req.n_choices : 1;
    const int total = (int)n_prompts * n_choices; /* <= SRV_MAX_CHOICES: checked by the parse */
    int32_t **pids = calloc(n_prompts, sizeof *pids);
    size_t *pn = calloc(n_prompts, sizeof *pn);
    const char *param = "prompt";
    int status = 400, rc = pids && pn ? 0 : mx_fail(&err, "out of memory");
    for (size_t p = 0; p < n_prompts && !rc; p++) rc = prompt_ids(s, j, api, p, &pids[p], &pn[p], &param, &err);
    if (!rc) {
        int32_t *ids0 = NULL;
        if (total > 1 && pn[0]) {
            ids0 = malloc(pn[0] * sizeof *ids0);
            if (ids0) memcpy(ids0, pids[0], pn[0] * sizeof *ids0);
            else rc = mx_fail(&err, "out of memory");
        } else {
            ids0 = pids[0];
            pids[0] = NULL;
        }
        if (!rc) rc = job_prompt(s, j, ids0, pn[0], 0, j->req.prompt_list != NULL, &err);
        else free(ids0);
    }
    if (!rc) {
        pthread_mutex_lock(&s->mu);
        uint64_t seq = ++s->id_counter;
        pthread_mutex_unlock(&s->mu);
        snprintf(j->id, sizeof j->id, "%s-%llx%08llx", api == SRV_API_CHAT ? "chatcmpl" : "cmpl",
                 (unsigned long long)s->t_start, (unsigned long long)seq);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        j->fd = ci ? ci->connect_fd : -1;
        j->counts_prompt = true;
        if (total > 1) rc = make_kids(s, j, pids, pn, n_choices, total, &param, &err);
    }
    for (size_t p = 0; pids && p < n_prompts; p++) free(pids[p]);
    free(pids);
    free(pn);
    if (rc) return reply_error(s, c, status, err.msg, param);

    /* The response's jobs: choice 0 (this connection's), then its kids. */
    srv_job **js = malloc((size_t)total * sizeof *js);
    if (!js) return reply_error(s, c, 500, "out of memory", NULL);
    js[0] = j;
    for (int i = 1; i < total; i++) js[i] = j->kids[i - 1];
    MHD_Result_t out = reply_jobs(s, c, js, total);
    free(js);
    return out;
}

/* ==== Text and info routes (srv_routes.c) ==== */
MHD_Result_t srv_route_info(srv_server *s, struct MHD_Connection *c, const char *method, const char *url,
                            const char *body, size_t len, bool *handled);

/* ==== Dispatch ==== */
static bool is_post_route(const char *url, srv_api *api) {
    if (!strcmp(url, "/v1/chat/completions") || !strcmp(url, "/chat/completions")) { *api = SRV_API_CHAT; return true; }
    if (!strcmp(url, "/v1/completions") || !strcmp(url, "/completions")) { *api = SRV_API_COMPLETIONS; return true; }
    if (!strcmp(url, "/completion")) { *api = SRV_API_LLAMA_COMPLETION; return true; }
    /* OpenAI Responses and Anthropic Messages: chat jobs answered in their shapes (srv_api.h) */
    if (!strcmp(url, "/v1/responses") || !strcmp(url, "/v1/messages")) { *api = SRV_API_CHAT; return true; }
    return false;
}

static MHD_Result_t on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    srv_server *s = cls;
    conn_ctx *cc = *con_cls;
    if (!cc) {
        cc = calloc(1, sizeof *cc);
        if (!cc) return MHD_NO;
        *con_cls = cc;
        cc->dialect = srv_api_dialect_of(url);
        srv_api_dialect_enter(cc->dialect); /* the error shapes of this request (srv_api.h) */
        srv_conns_busy(c); /* never closed to make room until on_completed */
        srv_guard_refusal g;
        if (srv_guard_request(&s->cfg, s->keyless_loopback, c, version, &g)) {
            cc->replied = true;
            return reply_with(s, c, g.status, "application/json; charset=utf-8", srv_resp_error(g.status, g.msg, NULL),
                              g.close ? "Connection" : NULL, g.close ? "close" : NULL);
        }
        if (!strcmp(method, "OPTIONS")) {
            cc->replied = true;
            return reply_preflight(s, c);
        }
        bool public = !strcmp(url, "/health") || !strcmp(url, "/v1/health") || srv_webui_public(s, url);
        if (!public && !authorized(s, c)) {
            cc->replied = true;
            return reply_error(s, c, 401, "invalid or missing API key (send Authorization: Bearer KEY, or x-api-key: KEY)",
                               NULL);
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body_bytes) {
            cc->replied = true;
            char msg[200];
            snprintf(msg, sizeof msg, "request body of %s bytes exceeds the limit of %llu bytes (--max-body-size)", cl,
                     (unsigned long long)s->cfg.max_body_bytes);
            return reply_error(s, c, 413, msg, NULL);
        }
        return MHD_YES;
    }
    if (cc->replied) { *upload_size = 0; return MHD_YES; }
    if (*upload_size) {
        if (cc->len + *upload_size > s->cfg.max_body_bytes) cc->too_large = true;
        if (!cc->too_large) srv_buf_append(&cc->body, &cc->len, &cc->cap, upload, *upload_size);
        else cc->discarded += *upload_size;
        *upload_size = 0;
        /* libmicrohttpd 0.9.75 cannot answer before the body ends: a chunked body over the
         * limit is read and dropped so that its 413 can be sent, but one that goes on for more
         * than 16 MiB (or the limit, if larger) past it, a client streaming without end, has
         * its connection closed. */
        const uint64_t slack = s->cfg.max_body_bytes > (16u << 20) ? s->cfg.max_body_bytes : (16u << 20);
        if (cc->discarded > slack) return MHD_NO;
        return MHD_YES;
    }
    cc->replied = true;
    if (cc->too_large) {
        char msg[160];
        snprintf(msg, sizeof msg, "request body exceeds the limit of %llu bytes (--max-body-size)",
                 (unsigned long long)s->cfg.max_body_bytes);
        return reply_error(s, c, 413, msg, NULL);
    }
    srv_guard_refusal g; /* a body of tiny JSON values would cost its parse 80x its size */
    if (cc->len && srv_guard_body(cc->body, cc->len, &g))
        return reply_error(s, c, g.status, g.msg, "body");
    srv_api api;
    bool oai;
    if (srv_embed_is_route(url, &oai)) { /* srv_embed.c */
        if (strcmp(method, "POST")) return srv_mhd_method_not_allowed(s, c, "POST");
        return srv_embed_route(s, c, oai, cc->body ? cc->body : "", cc->len, &cc->job);
    }
    if (is_post_route(url, &api)) {
        if (strcmp(method, "POST")) return srv_mhd_method_not_allowed(s, c, "POST");
        if (s->cfg.embeddings) return srv_embed_refuse_generation(s, c); /* llama-server's embedding mode */
        return route_generate(s, c, cc, api);
    }
    bool handled = false;
    MHD_Result_t rc = srv_api_route(s, c, method, url, cc->body ? cc->body : "", cc->len, &handled);
    if (!handled) /* count_tokens, /v1/responses/{id} above; the text and info routes here */
        rc = srv_route_info(s, c, method, url, cc->body ? cc->body : "", cc->len, &handled);
    free(cc->body); /* read by the route; /tokenize's answer is still being written */
    cc->body = NULL;
    if (handled) return rc;
    char msg[300];
    snprintf(msg, sizeof msg, "no route for %.16s %.200s", method, url);
    return reply_error(s, c, 404, msg, NULL);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)toe;
    srv_server *s = cls;
    conn_ctx *cc = *con_cls;
    srv_conns_idle(c); /* its next request's header deadline starts */
    if (!cc) return;
    if (cc->job) {
        srv_job_release_kids(cc->job);
        srv_job_detach(cc->job);
        srv_job_release(cc->job);
        pthread_mutex_lock(&s->mu);
        s->n_http_jobs--;
        pthread_mutex_unlock(&s->mu);
    }
    free(cc->body);
    const bool big = cc->len >= (4u << 20);
    free(cc);
    *con_cls = NULL;
    /* A big body's pages (the body, its JSON, its tokens) go back to the system rather than
     * stay in this thread's malloc arena: RSS returns to its level after the request. */
    if (big) malloc_trim(0);
}

/* ==== Listening socket ==== */
static int open_listener(const srv_config *cfg, int *port_out, mx_error *err) {
    size_t hl = strlen(cfg->host);
    if (hl > 5 && !strcmp(cfg->host + hl - 5, ".sock")) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (hl >= sizeof sa.sun_path) return mx_fail(err, "--host %s: Unix socket path too long", cfg->host);
        memcpy(sa.sun_path, cfg->host, hl + 1);
        struct stat sb;
        if (!stat(cfg->host, &sb) && S_ISSOCK(sb.st_mode)) unlink(cfg->host); /* stale socket of a previous run */
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return mx_fail(err, "socket: %s", strerror(errno));
        if (bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, 512)) {
            int e = errno;
            close(fd);
            return mx_fail(err, "--host %s: cannot listen on the Unix socket: %s", cfg->host, strerror(e));
        }
        *port_out = 0;
        return fd;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", cfg->port);
    int rc = getaddrinfo(cfg->host, port, &hints, &res);
    if (rc) return mx_fail(err, "--host %s: %s", cfg->host, gai_strerror(rc));
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) { freeaddrinfo(res); return mx_fail(err, "socket: %s", strerror(errno)); }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, 512)) {
        int e = errno;
        close(fd);
        freeaddrinfo(res);
        return mx_fail(err, "cannot listen on %s:%d: %s", cfg->host, cfg->port, strerror(e));
    }
    freeaddrinfo(res);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *port_out = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

/* ==== Run ==== */
/* After srv_core_stop every job is finished, but its connection thread may not have sent the
 * answer yet ("shutting down", or a stream's last events): MHD_stop_daemon shuts the sockets
 * down, and the client would read an empty reply. So wait until every connection holding a job
 * has completed its response, for at most `limit_s` (a client that does not read cannot hold
 * the shutdown). */
static void wait_http_answers(srv_server *s, double limit_s) {
    const double deadline = mx_now() + limit_s;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        const int busy = s->n_http_jobs;
        pthread_mutex_unlock(&s->mu);
        if (busy <= 0 || mx_now() >= deadline) return;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static void log_startup(const srv_server *s, int port) {
    const srv_model_info *m = &s->be->info;
    const srv_config *c = &s->cfg;
    LOG_INFO("model: %s (%s)", m->name, m->path);
    if (m->device[0]) LOG_INFO("device: %s", m->device);
    LOG_INFO("family: %s, parameters: %.3fB (%llu), dtype: %s", m->family, (double)m->n_params / 1e9,
             (unsigned long long)m->n_params, m->dtype);
    double kv = (double)m->kv_bytes_per_token * c->ctx_size * c->n_parallel;
    double total = (double)m->weight_bytes + kv + (double)m->activation_bytes + (double)m->headroom_bytes;
    LOG_INFO("memory estimate: weights %.1f MiB + KV cache %.1f MiB (%llu bytes/token x %d ctx x %d slots) + "
             "activations %.1f MiB + headroom %.1f MiB = %.1f MiB",
             (double)m->weight_bytes / 1048576.0, kv / 1048576.0, (unsigned long long)m->kv_bytes_per_token,
             c->ctx_size, c->n_parallel, (double)m->activation_bytes / 1048576.0,
             (double)m->headroom_bytes / 1048576.0, total / 1048576.0);
    LOG_INFO("chat template: %s", m->chat_template);
    LOG_INFO("decode storage backend: %s (%s)", m->storage, m->storage_reason);
    LOG_INFO("kv cache types: K %s, V %s (%llu bytes per token)", m->cache_type_k, m->cache_type_v,
             (unsigned long long)m->kv_bytes_per_token);
    LOG_INFO("decode path: native batched forward");
    char tuned[512];
    tune_policy_describe(tuned, sizeof tuned);
    LOG_INFO("%s", tuned);
    LOG_INFO("slots: %d, max batch %d sequences, batch %d / ubatch %d tokens, prefill chunk %d, grant interval %d, "
             "ctx %d, queue limit %d",
             c->n_parallel, c->max_batch_size, c->batch_size, c->ubatch_size, c->prefill_chunk_size,
             c->prefill_grant_interval, c->ctx_size, c->max_queue_depth);
    char policy[512];
    srv_guard_describe(c, s->keyless_loopback, policy, sizeof policy);
    if (!c->n_api_keys && !s->keyless_loopback && port) LOG_WARN("%s", policy); /* open to the network */
    else LOG_INFO("%s", policy);
    LOG_INFO("http: %d connections (--threads-http), %d per client address, header timeout %d s, idle timeout %d s",
             c->threads_http, c->max_conn_per_ip, c->header_timeout_s, c->timeout_s);
    if (port) LOG_INFO("listening on http://%s:%d", c->host, port);
    else LOG_INFO("listening on unix:%s", c->host);
}

int srv_run(const srv_config *cfg, srv_backend *be, mx_error *err) {
    srv_server *s = calloc(1, sizeof *s);
    if (!s) return mx_fail(err, "out of memory");
    s->cfg = *cfg;
    s->be = be;
    s->t_start = (double)time(NULL);
    s->metrics = srv_metrics_new();
    int rc = -1, port = 0, fd = -1;
    struct MHD_Daemon *d = NULL;

    /* Signals are taken by sigwait below: block them before any thread exists. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    srv_chat_caps caps;
    if (srv_chat_caps_init(&caps, be, cfg, err)) goto out;
    s->chat_caps = &caps;
    if (be->text_ops->has_template)
        LOG_INFO("chat: tool calls %s%s, reasoning format %s%s", srv_tool_format_name(caps.format),
                 caps.format == SRV_TOOLS_NONE ? "" : caps.renders_tools ? " (tools rendered by the template)"
                                                                         : " (tools described in the system message)",
                 cfg->reasoning_format, caps.thinks ? " (the template thinks)" : "");
    s->resp_store = srv_resp_store_new(mx_env()->responses_store_max, (size_t)mx_env()->responses_store_bytes);
    if (!s->resp_store) { mx_fail(err, "out of memory"); goto out; }
    if (!s->metrics || srv_core_start(s, err)) goto out;
    if ((fd = open_listener(cfg, &port, err)) < 0) goto out;
    /* Connection admission (srv_conn.c): --threads-http connections, the oldest idle one closed
     * to admit another, per-address limits, a header deadline; libmicrohttpd's own limit sits
     * above it so that connections being closed never block a new one. */
    const srv_conn_limits lim = {cfg->threads_http, cfg->max_conn_per_ip, (double)cfg->header_timeout_s};
    if (!(s->conns = srv_conns_new(&lim, s->metrics, err))) goto out;
    srv_conns_fit_fd_limit(s->conns);
    s->keyless_loopback = srv_guard_keyless_loopback(cfg, fd);
    d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                             MHD_USE_ERROR_LOG,
                         0, srv_conns_accept, s->conns, on_request, s, MHD_OPTION_EXTERNAL_LOGGER,
                         srv_conns_mhd_log, s->conns, MHD_OPTION_LISTEN_SOCKET, fd,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->timeout_s, MHD_OPTION_CONNECTION_LIMIT,
                         srv_conns_mhd_limit(s->conns), MHD_OPTION_NOTIFY_CONNECTION, srv_conns_notify, s->conns,
                         MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_THREAD_STACK_SIZE,
                         (size_t)1 << 20, MHD_OPTION_END);
    if (!d) { mx_fail(err, "libmicrohttpd failed to start on %s", cfg->host); goto out; }
    log_startup(s, port);
    if (cfg->port_file[0]) {
        char tmp[1100];
        snprintf(tmp, sizeof tmp, "%s.tmp", cfg->port_file);
        FILE *f = fopen(tmp, "w");
        if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f) || rename(tmp, cfg->port_file)) {
            mx_fail(err, "--port-file %s: %s", cfg->port_file, strerror(errno));
            goto out;
        }
    }
    int sig = 0;
    sigwait(&set, &sig);
    LOG_INFO("server: signal %d, shutting down", sig);
    rc = 0;
out:
    srv_core_stop(s); /* cancels running jobs, so blocked connection threads finish */
    if (d) wait_http_answers(s, 3.0);
    if (d) MHD_stop_daemon(d);
    srv_conns_free(s->conns); /* after the daemon: every connection is closed */
    if (fd >= 0) close(fd);
    if (cfg->host[0] && port == 0 && d) unlink(cfg->host);
    srv_metrics_free(s->metrics);
    srv_resp_store_free(s->resp_store);
    if (s->chat_caps) srv_chat_caps_free(s->chat_caps);
    srv_grammar_cache_clear();
    if (s->thread_started == false) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->omu);
        pthread_cond_destroy(&s->ocv);
    }
    free(s);
    return rc;
}
