/* mlxcel loadtest: the HTTP/1.1 client, the SSE reader and one generation request.
 *
 * A small client over plain sockets rather than libcurl: it adds no dependency and timestamps
 * each SSE event as its bytes arrive, with nothing buffered between the socket and the clock.
 * http:// only (load tests run on loopback or a private network).
 *
 * A request that does not end with every token the server was asked for is a failure, and the
 * failure says why, by kind (lt_fail_kind): the status of a refused request, the text of an
 * error the server sent inside the stream (llama-server ends a stream that fails mid-way with
 * `data: {"error": {...}}` and no [DONE]; an `event: error` is read the same way), a stream
 * that ended in good order without [DONE], a connection reset or closed inside the body, a
 * timeout, a short answer. */
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/clock.h"
#include "cli/loadtest.h"

const char *lt_fail_name(lt_fail_kind k) {
    static const char *names[LT_FAIL_KINDS] = {"ok", "connect", "http", "error_event", "no_done",
                                               "reset", "timeout", "short", "bad_response"};
    return k < LT_FAIL_KINDS ? names[k] : "?";
}

/* ==== Buffers ==== */
static void buf_add(char **b, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        *cap = (*len + n + 1) * 2;
        *b = realloc(*b, *cap);
    }
    memcpy(*b + *len, s, n);
    *len += n;
    (*b)[*len] = 0;
}

/* ==== SSE ==== */
static void sse_event_reset(lt_sse_event *e) {
    e->name[0] = 0;
    e->data_len = 0;
    if (e->data) e->data[0] = 0;
    e->has_data = false;
}

/* One line (no terminator) of the SSE stream. */
static void sse_line(lt_sse *s, const char *l, size_t n, lt_sse_cb cb, void *user) {
    lt_sse_event *e = &s->cur;
    if (n == 0) { /* a blank line dispatches the event */
        if (e->has_data || e->name[0]) cb(e, user);
        sse_event_reset(e);
        return;
    }
    if (l[0] == ':') return; /* comment (llama-server's keep-alive ping is ":\n\n") */
    const char *colon = memchr(l, ':', n);
    const size_t fl = colon ? (size_t)(colon - l) : n;
    const char *v = colon ? colon + 1 : l + n;
    size_t vl = colon ? n - fl - 1 : 0;
    if (vl && *v == ' ') { v++; vl--; }
    if (fl == 4 && !memcmp(l, "data", 4)) {
        if (e->has_data) buf_add(&e->data, &e->data_len, &e->data_cap, "\n", 1);
        buf_add(&e->data, &e->data_len, &e->data_cap, v, vl);
        e->has_data = true;
    } else if (fl == 5 && !memcmp(l, "event", 5)) {
        snprintf(e->name, sizeof e->name, "%.*s", (int)(vl < sizeof e->name ? vl : sizeof e->name - 1), v);
    } /* id:, retry: and unknown fields change nothing here */
}

void lt_sse_feed(lt_sse *s, const char *p, size_t n, lt_sse_cb cb, void *user) {
    if (n && s->last_cr && p[0] == '\n') { p++; n--; } /* the \n of a \r\n split across reads */
    s->last_cr = false;
    buf_add(&s->buf, &s->len, &s->cap, p, n);
    size_t start = 0;
    for (size_t i = 0; i < s->len; i++) {
        const char c = s->buf[i];
        if (c != '\n' && c != '\r') continue;
        sse_line(s, s->buf + start, i - start, cb, user);
        if (c == '\r') {
            if (i + 1 < s->len) {
                if (s->buf[i + 1] == '\n') i++;
            } else {
                s->last_cr = true;
            }
        }
        start = i + 1;
    }
    memmove(s->buf, s->buf + start, s->len - start);
    s->len -= start;
    s->buf[s->len] = 0;
}

void lt_sse_free(lt_sse *s) {
    free(s->buf);
    free(s->cur.data);
    memset(s, 0, sizeof *s);
}

/* ==== HTTP over a socket ==== */
typedef void (*lt_body_cb)(const char *p, size_t n, double now, void *user);

typedef struct lt_conn {
    char *raw; size_t raw_len, raw_cap;    /* bytes not yet decoded */
    char *body; size_t body_len, body_cap; /* decoded body, when no on_body */
    bool headers_done, chunked, complete;  /* complete: the body's end was seen */
    long long content_length;              /* -1: none (the body ends at EOF) */
    long long body_seen;
    long chunk_left;                       /* -1 expecting a size line, -2 the CRLF after data */
    int status;
    lt_body_cb on_body;
    void *user;
} lt_conn;

static void conn_body(lt_conn *c, const char *p, size_t n, double now) {
    c->body_seen += (long long)n;
    /* a refused request's body is its error message, whatever the caller reads */
    if (c->on_body && c->status == 200) c->on_body(p, n, now, c->user);
    else buf_add(&c->body, &c->body_len, &c->body_cap, p, n);
}

/* Headers, then the body (chunked, Content-Length or until EOF) into conn_body. */
static void conn_decode(lt_conn *c, double now) {
    size_t p = 0;
    if (!c->headers_done) {
        char *e = strstr(c->raw, "\r\n\r\n");
        if (!e) return;
        *e = 0;
        if (sscanf(c->raw, "HTTP/%*s %d", &c->status) != 1) c->status = 0;
        for (char *h = c->raw; *h; h++) *h = (char)(*h >= 'A' && *h <= 'Z' ? *h + 32 : *h);
        c->chunked = strstr(c->raw, "\ntransfer-encoding: chunked") != NULL;
        const char *cl = strstr(c->raw, "\ncontent-length:");
        c->content_length = cl && !c->chunked ? strtoll(cl + 16, NULL, 10) : -1;
        c->headers_done = true;
        c->chunk_left = -1;
        p = (size_t)(e - c->raw) + 4;
        if (c->content_length == 0) c->complete = true;
    }
    while (p < c->raw_len && !c->complete) {
        if (!c->chunked) {
            size_t n = c->raw_len - p;
            if (c->content_length >= 0 && (long long)n > c->content_length - c->body_seen)
                n = (size_t)(c->content_length - c->body_seen);
            conn_body(c, c->raw + p, n, now);
            p += n;
            if (c->content_length >= 0 && c->body_seen >= c->content_length) c->complete = true;
            p = c->raw_len; /* bytes past Content-Length are not ours */
        } else if (c->chunk_left == -1) {
            char *nl = memchr(c->raw + p, '\n', c->raw_len - p);
            if (!nl) break;
            c->chunk_left = strtol(c->raw + p, NULL, 16);
            p = (size_t)(nl - c->raw) + 1;
            if (c->chunk_left == 0) c->complete = true; /* trailers are not read */
        } else if (c->chunk_left > 0) {
            size_t n = c->raw_len - p < (size_t)c->chunk_left ? c->raw_len - p : (size_t)c->chunk_left;
            conn_body(c, c->raw + p, n, now);
            p += n;
            c->chunk_left -= (long)n;
            if (c->chunk_left == 0) c->chunk_left = -2;
        } else {
            char *nl = memchr(c->raw + p, '\n', c->raw_len - p);
            if (!nl) break;
            p = (size_t)(nl - c->raw) + 1;
            c->chunk_left = -1;
        }
    }
    memmove(c->raw, c->raw + p, c->raw_len - p);
    c->raw_len -= p;
    c->raw[c->raw_len] = 0;
}

static int conn_connect(const lt_opts *o, char *err, size_t errn) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV}, *res = NULL;
    int rc = getaddrinfo(o->host, o->port, &hints, &res);
    if (rc) { snprintf(err, errn, "%.200s: %s", o->host, gai_strerror(rc)); return -1; }
    int fd = socket(res->ai_family, SOCK_STREAM, 0);
    if (fd >= 0) {
        /* before connect: Linux bounds a blocking connect by SO_SNDTIMEO too */
        struct timeval tv = {o->timeout_s, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (connect(fd, res->ai_addr, res->ai_addrlen)) {
            snprintf(err, errn, "connect %.200s:%s: %s", o->host, o->port,
                     errno == EINPROGRESS ? "timed out" : strerror(errno));
            close(fd);
            fd = -1;
        }
    } else {
        snprintf(err, errn, "socket: %s", strerror(errno));
    }
    freeaddrinfo(res);
    return fd;
}

/* One exchange on a fresh connection (Connection: close). Returns LT_OK when the response
 * ended in good order (whatever its status), else CONNECT, TIMEOUT or RESET with err. */
static lt_fail_kind conn_exchange(const lt_opts *o, const char *method, const char *path, const char *body,
                                  lt_conn *c, char *err, size_t errn) {
    char auth[300] = "";
    if (o->api_key[0]) snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", o->api_key);
    const bool v6 = strchr(o->host, ':') != NULL;
    const size_t blen = body ? strlen(body) : 0, hl = blen + 1024;
    char *req = malloc(hl);
    const int n = snprintf(req, hl, "%s %s HTTP/1.1\r\nHost: %s%s%s:%s\r\n%s%sConnection: close\r\nContent-Length: %zu\r\n\r\n%s",
                           method, path, v6 ? "[" : "", o->host, v6 ? "]" : "", o->port,
                           body ? "Content-Type: application/json\r\n" : "", auth, blen, body ? body : "");
    c->raw = malloc(c->raw_cap = 65536);
    c->raw[0] = 0;
    c->body = malloc(c->body_cap = 4096);
    c->body[0] = 0;
    lt_fail_kind k = LT_FAIL_CONNECT;
    const int fd = conn_connect(o, err, errn);
    if (fd < 0) goto out;
    k = LT_FAIL_RESET;
    for (int off = 0; off < n;) { /* MSG_NOSIGNAL: a server that hangs up must not kill us */
        const ssize_t w = send(fd, req + off, (size_t)(n - off), MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            k = errno == EAGAIN || errno == EWOULDBLOCK ? LT_FAIL_TIMEOUT : LT_FAIL_RESET;
            snprintf(err, errn, "send: %s", strerror(errno));
            goto out;
        }
        off += (int)w;
    }
    char tmp[16384];
    for (;;) {
        const ssize_t r = recv(fd, tmp, sizeof tmp, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            k = errno == EAGAIN || errno == EWOULDBLOCK ? LT_FAIL_TIMEOUT : LT_FAIL_RESET;
            if (k == LT_FAIL_TIMEOUT) snprintf(err, errn, "no data for %d s (--timeout)", o->timeout_s);
            else snprintf(err, errn, "recv: %s", strerror(errno));
            goto out;
        }
        if (r == 0) { /* EOF: in order only where the body may end at EOF */
            if (c->headers_done && !c->chunked && c->content_length < 0) { c->complete = true; k = LT_OK; }
            else if (!c->complete)
                snprintf(err, errn, "connection closed %s", !c->headers_done ? "before the response headers"
                                                         : c->chunked ? "inside the chunked body (no final chunk)"
                                                                      : "before Content-Length bytes");
            break;
        }
        buf_add(&c->raw, &c->raw_len, &c->raw_cap, tmp, (size_t)r);
        conn_decode(c, mx_now());
        if (c->complete) { k = LT_OK; break; }
    }
out:
    if (fd >= 0) close(fd);
    free(req);
    return k;
}

static void conn_free(lt_conn *c) {
    free(c->raw);
    free(c->body);
}

int lt_http_get(const lt_opts *o, const char *path, int *status, char **body, char *err, size_t errn) {
    lt_conn c = {0};
    const lt_fail_kind k = conn_exchange(o, "GET", path, NULL, &c, err, errn);
    *status = c.status;
    *body = c.body;
    c.body = NULL;
    conn_free(&c);
    if (k != LT_OK) {
        free(*body);
        *body = NULL;
        return -1;
    }
    return 0;
}

/* ==== One generation request ==== */
typedef struct lt_stream {
    lt_result *r;
    lt_sse sse;
    int completion, prompt;  /* usage, -1 until seen */
    bool saw_done, saw_error;
    char finish[24];         /* the last finish_reason */
    double last;             /* the previous read's time */
    int ev_read;             /* token events of the current read */
} lt_stream;

static void usage_of(json_t *o, int *completion, int *prompt) {
    json_t *u = json_object_get(o, "usage");
    json_t *c = json_object_get(u, "completion_tokens"), *p = json_object_get(u, "prompt_tokens");
    if (json_is_integer(c)) *completion = (int)json_integer_value(c);
    if (json_is_integer(p)) *prompt = (int)json_integer_value(p);
}

/* The message of an error object ({"error": {"message": ...}} / {"error": "..."} / the text). */
static void error_text(const char *data, char *out, size_t n) {
    json_t *o = json_loads(data, JSON_ALLOW_NUL, NULL);
    json_t *e = json_object_get(o, "error");
    if (!e) e = o;
    json_t *m = json_is_object(e) ? json_object_get(e, "message") : e;
    if (json_is_string(m)) snprintf(out, n, "%s", json_string_value(m));
    else snprintf(out, n, "%.300s", data);
    json_decref(o);
}

static void finish_of(json_t *ch, char *out, size_t n) {
    json_t *f = json_object_get(ch, "finish_reason");
    if (json_is_string(f)) snprintf(out, n, "%s", json_string_value(f));
}

static void on_sse_event(const lt_sse_event *ev, void *user) {
    lt_stream *s = user;
    if (s->saw_done || s->saw_error) return; /* nothing after the end counts */
    const bool err_event = !strcmp(ev->name, "error");
    if (!ev->has_data && !err_event) return;
    const char *d = ev->data ? ev->data : "";
    if (!err_event && !strcmp(d, "[DONE]")) { s->saw_done = true; return; }
    json_t *o = err_event ? NULL : json_loads(d, JSON_ALLOW_NUL, NULL); /* text may hold \u0000 */
    if (err_event || json_object_get(o, "error")) {
        s->saw_error = true;
        error_text(d, s->r->err, sizeof s->r->err);
        json_decref(o);
        return;
    }
    json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
    if (ch && json_is_null(json_object_get(ch, "finish_reason"))) s->ev_read++;
    finish_of(ch, s->finish, sizeof s->finish);
    usage_of(o, &s->completion, &s->prompt);
    json_decref(o);
}

static void on_stream_body(const char *p, size_t n, double now, void *user) {
    lt_stream *s = user;
    lt_result *r = s->r;
    s->ev_read = 0;
    lt_sse_feed(&s->sse, p, n, on_sse_event, s);
    const int ne = s->ev_read;
    if (ne <= 0) return;
    if (r->n_ev == 0) r->ttft = now - r->t_issue;
    /* Events read together share the time since the previous read evenly (the first read's
     * extra events arrived with the first token: no gap). */
    for (int k = 1; k <= ne; k++) {
        if (r->n_ev == r->cap_ev) {
            r->cap_ev = 2 * r->cap_ev + 16;
            r->ev_t = realloc(r->ev_t, (size_t)r->cap_ev * sizeof(double));
        }
        r->ev_t[r->n_ev++] = s->last > 0 ? s->last + (now - s->last) * k / ne : now;
    }
    s->last = now;
}

static char *request_body(const lt_opts *o, uint64_t global_idx, const lt_result *r) {
    uint64_t st = o->seed ^ (global_idx * 0xd1b54a32d192ed03ull);
    json_t *ids = json_array();
    for (int i = 0; i < r->want_prompt; i++)
        json_array_append_new(ids, json_integer((json_int_t)(lt_splitmix64(&st) % (uint64_t)o->vocab)));
    /* max_tokens is the OpenAI name (llama-server takes it as an alias of n_predict);
     * ignore_eos is read by llama-server and mlxcel serve alike */
    json_t *b = json_pack("{s:s, s:o, s:i, s:f, s:b, s:b}", "model", "loadtest", "prompt", ids, "max_tokens",
                          r->want_gen, "temperature", 0.0, "ignore_eos", 1, "stream", o->stream);
    if (o->stream) json_object_set_new(b, "stream_options", json_pack("{s:b}", "include_usage", 1));
    char *s = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    return s;
}

void lt_request_run(const lt_opts *o, uint64_t global_idx, lt_result *r) {
    char *body = request_body(o, global_idx, r);
    lt_stream s = {.r = r, .completion = -1, .prompt = -1};
    lt_conn c = {0};
    if (o->stream) {
        c.on_body = on_stream_body;
        c.user = &s;
    }
    r->prompt_tokens = -1;
    r->t_issue = mx_now();
    char xerr[256] = "";
    lt_fail_kind k = conn_exchange(o, "POST", "/v1/completions", body, &c, xerr, sizeof xerr);
    r->t_done = mx_now();
    r->http_status = c.status;
    free(body);
    /* a last event cut off before its blank line still counts (lenient where the SSE spec
     * drops it: an error event so cut off still explains the failure) */
    if (o->stream && c.status == 200) lt_sse_feed(&s.sse, "\n\n", 2, on_sse_event, &s);
    /* The server's own word first: an error event explains a reset or a missing [DONE]. */
    if (s.saw_error) { r->fail = LT_FAIL_ERROR_EVENT; goto out; }
    if (k != LT_OK && !s.saw_done && !(c.headers_done && c.status != 200)) {
        r->fail = k;
        snprintf(r->err, sizeof r->err, "%s", xerr);
        goto out;
    }
    if (c.status != 200) { /* the status says it, even if the body was cut short */
        r->fail = LT_FAIL_HTTP;
        char msg[400];
        error_text(c.body, msg, sizeof msg);
        snprintf(r->err, sizeof r->err, "HTTP %d: %s", c.status, msg);
        goto out;
    }
    int comp = -1, pr = -1;
    if (o->stream) {
        if (!s.saw_done) {
            r->fail = LT_FAIL_NO_DONE;
            snprintf(r->err, sizeof r->err, "stream ended without [DONE] after %d token events (no error event)", r->n_ev);
            goto out;
        }
        comp = s.completion;
        pr = s.prompt;
        if (comp < 0) comp = r->n_ev;
    } else {
        /* generated text is any byte sequence: a valid response may hold \u0000, which
         * jansson refuses without JSON_ALLOW_NUL */
        json_t *j = json_loads(c.body, JSON_ALLOW_NUL, NULL);
        usage_of(j, &comp, &pr);
        finish_of(json_array_get(json_object_get(j, "choices"), 0), s.finish, sizeof s.finish);
        const bool is_err = json_object_get(j, "error") != NULL;
        json_decref(j);
        r->ttft = r->t_done - r->t_issue;
        if (is_err || comp < 0) {
            r->fail = LT_FAIL_BAD_RESPONSE;
            snprintf(r->err, sizeof r->err, "200 answer without usage.completion_tokens: %.300s", c.body);
            goto out;
        }
    }
    r->tokens = comp;
    r->prompt_tokens = pr;
    if (comp < r->want_gen) {
        r->fail = LT_FAIL_SHORT;
        snprintf(r->err, sizeof r->err, "%d of %d tokens (finish_reason %s)", comp, r->want_gen,
                 s.finish[0] ? s.finish : "none");
        goto out;
    }
    r->fail = LT_OK;
out:
    lt_sse_free(&s.sse);
    conn_free(&c);
}
