/* mlxcel loadtest: steady-state load against an OpenAI-compatible server.
 *
 * Prompts are token ids, so every request's prompt is exactly --prompt-tokens tokens (text
 * would be re-tokenized by the server into some other count): POST /v1/completions with
 * "prompt": [ids], max_tokens G, temperature 0 and ignore_eos, so every request generates
 * exactly G tokens. The ids are drawn uniformly from the model's vocabulary (meta.n_vocab of
 * GET /v1/models, as llama-server and `mlxcel serve` report it; --vocab-size overrides) by a
 * PRNG keyed by (--seed, the request's index over the whole run): no two requests share a
 * prefix, within a level or across levels, so the prefix cache never shortens a prompt. The
 * server's usage (prompt_tokens, completion_tokens) is reported per level (mean, min, max) so
 * the accepted token counts are checked, not assumed.
 *
 * Per concurrency level C: C client threads in a closed loop (a thread issues its next request
 * when the previous one ends), one connection per request. The first --warmup requests
 * (default C: one wave, which pays graph captures and plan set-up for the new batch sizes) are
 * excluded; then --requests measured ones (default 2 x C, at least 8). Steady state is the
 * window from the issue of the first measured request to the moment the first thread finds no
 * request left (C requests are in flight throughout). Reported:
 *   output tok/s  = tokens streamed inside the window / window length (a request's usage
 *                   tokens spread over its events; non-stream: counted at completion)
 *   requests/s    = requests completed inside the window / window length
 *   TTFT p50/p99  = first token event - issue, measured requests (non-stream: whole response)
 *   ITL p50/p99   = gaps between token events of measured requests (events read together
 *                   share the gap since the previous read)
 *   failures      = failed requests of the level, warm-up included
 *
 * The HTTP client is a small HTTP/1.1 client over plain sockets rather than libcurl: it adds no
 * dependency, and it timestamps each SSE event as its bytes arrive, with nothing buffered
 * between the socket and the clock. It speaks http:// only (load tests run on loopback). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <netdb.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "cli/cli.h"

#define MAX_LEVELS 16

typedef struct lt_opts {
    char host[256], port[16];
    int levels[MAX_LEVELS], n_levels;
    int requests;          /* measured requests per level; 0 = 2 x concurrency, at least 8 */
    int warmup;            /* warm-up requests per level; -1 = the level's concurrency */
    int prompt_tokens, gen_tokens, timeout_s;
    int vocab;             /* prompt ids in [0, vocab); 0 = meta.n_vocab of GET /v1/models */
    double time_limit;     /* seconds from the start; 0 = none */
    uint64_t seed;
    bool stream, json;
    char api_key[256];
} lt_opts;

typedef struct lt_result {
    bool ok;
    char err[512];
    double t_issue, t_done;
    double ttft;           /* seconds */
    int tokens;            /* usage.completion_tokens, else the token events counted */
    int prompt_tokens;     /* usage.prompt_tokens; -1 when the server sent none */
    double *ev_t;          /* [n_ev] arrival time of each token event */
    int n_ev, cap_ev;
} lt_result;

/* ==== HTTP over a socket ==== */
static int lt_connect(const lt_opts *o, char *err, size_t errn) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(o->host, o->port, &hints, &res);
    if (rc) { snprintf(err, errn, "%.200s: %s", o->host, gai_strerror(rc)); return -1; }
    int fd = socket(res->ai_family, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen)) {
        snprintf(err, errn, "connect %.200s:%s: %s", o->host, o->port, strerror(errno));
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        struct timeval tv = {o->timeout_s, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    return fd;
}

/* Incremental body decoder (chunked or identity) feeding an SSE event scanner. */
typedef struct lt_conn {
    char *raw; size_t raw_len, raw_cap;   /* undecoded bytes */
    char *body; size_t body_len, body_cap; /* decoded body */
    size_t scan;                           /* body bytes already split into events */
    bool chunked, headers_done, done;
    int status;
    long chunk_left;                       /* -1 = expecting a size line */
} lt_conn;

static void buf_add(char **b, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        *cap = (*len + n + 1) * 2;
        *b = realloc(*b, *cap);
    }
    memcpy(*b + *len, s, n);
    *len += n;
    (*b)[*len] = 0;
}

static void decode(lt_conn *c) {
    size_t p = 0;
    if (!c->headers_done) {
        char *e = strstr(c->raw, "\r\n\r\n");
        if (!e) return;
        *e = 0;
        sscanf(c->raw, "HTTP/%*s %d", &c->status);
        for (char *h = c->raw; *h; h++) *h = (char)(*h >= 'A' && *h <= 'Z' ? *h + 32 : *h);
        c->chunked = strstr(c->raw, "transfer-encoding: chunked") != NULL;
        c->headers_done = true;
        c->chunk_left = -1;
        p = (size_t)(e - c->raw) + 4;
    }
    while (p < c->raw_len && !c->done) {
        if (!c->chunked) {
            buf_add(&c->body, &c->body_len, &c->body_cap, c->raw + p, c->raw_len - p);
            p = c->raw_len;
        } else if (c->chunk_left == -1) {
            char *nl = memchr(c->raw + p, '\n', c->raw_len - p);
            if (!nl) break;
            c->chunk_left = strtol(c->raw + p, NULL, 16);
            p = (size_t)(nl - c->raw) + 1;
            if (c->chunk_left == 0) c->done = true;
        } else if (c->chunk_left > 0) {
            size_t n = c->raw_len - p < (size_t)c->chunk_left ? c->raw_len - p : (size_t)c->chunk_left;
            buf_add(&c->body, &c->body_len, &c->body_cap, c->raw + p, n);
            p += n;
            c->chunk_left -= (long)n;
            if (c->chunk_left == 0) c->chunk_left = -2; /* CRLF after the data */
        } else { /* -2: skip the CRLF that ends a chunk */
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

static void usage_of(json_t *o, int *completion, int *prompt) {
    json_t *u = json_object_get(o, "usage");
    json_t *c = json_object_get(u, "completion_tokens"), *p = json_object_get(u, "prompt_tokens");
    if (json_is_integer(c)) *completion = (int)json_integer_value(c);
    if (json_is_integer(p)) *prompt = (int)json_integer_value(p);
}

/* Scans complete SSE events; returns the number of token events (a choice without a
 * finish_reason); takes the usage chunk's counts. */
static int scan_events(lt_conn *c, int *completion, int *prompt, bool *saw_done) {
    int n = 0;
    for (;;) {
        char *s = c->body + c->scan;
        char *e = strstr(s, "\n\n");
        if (!e) break;
        *e = 0;
        if (!strncmp(s, "data: ", 6)) {
            if (!strcmp(s + 6, "[DONE]")) *saw_done = true;
            else {
                json_t *o = json_loads(s + 6, JSON_ALLOW_NUL, NULL); /* text may hold \u0000 */
                json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
                if (ch && json_is_null(json_object_get(ch, "finish_reason"))) n++;
                usage_of(o, completion, prompt);
                json_decref(o);
            }
        }
        *e = '\n';
        c->scan = (size_t)(e - c->body) + 2;
    }
    return n;
}

/* One request; reads until the server closes (Connection: close) or the body ends. `on_read`
 * (optional) sees the connection after each read with its arrival time. */
typedef void (*lt_read_cb)(lt_conn *c, double now, void *user);

static int http_exchange(const lt_opts *o, const char *method, const char *path, const char *body, lt_conn *c,
                         lt_read_cb on_read, void *user, char *err, size_t errn) {
    char auth[300] = "";
    if (o->api_key[0]) snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", o->api_key);
    const size_t blen = body ? strlen(body) : 0, hl = blen + 1024;
    char *reqs = malloc(hl);
    int n = snprintf(reqs, hl, "%s %s HTTP/1.1\r\nHost: %s:%s\r\n%s%sConnection: close\r\nContent-Length: %zu\r\n\r\n%s",
                     method, path, o->host, o->port, body ? "Content-Type: application/json\r\n" : "", auth, blen,
                     body ? body : "");
    memset(c, 0, sizeof *c);
    c->raw = malloc(c->raw_cap = 65536);
    c->raw[0] = 0;
    c->body = malloc(c->body_cap = 65536);
    c->body[0] = 0;
    int rc = -1;
    int fd = lt_connect(o, err, errn);
    if (fd < 0) goto out;
    if (write(fd, reqs, (size_t)n) != n) { snprintf(err, errn, "write: %s", strerror(errno)); goto out; }
    char tmp[16384];
    for (;;) {
        ssize_t k = read(fd, tmp, sizeof tmp);
        if (k < 0) { snprintf(err, errn, "read: %s", strerror(errno)); goto out; }
        if (k == 0) break;
        const double now = mx_now();
        buf_add(&c->raw, &c->raw_len, &c->raw_cap, tmp, (size_t)k);
        decode(c);
        if (on_read && c->headers_done) on_read(c, now, user);
        if (c->done) break;
    }
    rc = 0;
out:
    if (fd >= 0) close(fd);
    free(reqs);
    return rc;
}

static void conn_free(lt_conn *c) {
    free(c->raw);
    free(c->body);
}

/* ==== One generation request ==== */
static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

typedef struct lt_stream {
    lt_result *r;
    int completion, prompt;
    bool saw_done;
    double last;
} lt_stream;

static void on_stream_read(lt_conn *c, double now, void *user) {
    lt_stream *s = user;
    lt_result *r = s->r;
    const int ne = scan_events(c, &s->completion, &s->prompt, &s->saw_done);
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

static void one_request(const lt_opts *o, uint64_t global_idx, lt_result *r) {
    uint64_t st = o->seed ^ (global_idx * 0xd1b54a32d192ed03ull);
    json_t *ids = json_array();
    for (int i = 0; i < o->prompt_tokens; i++)
        json_array_append_new(ids, json_integer((json_int_t)(splitmix64(&st) % (uint64_t)o->vocab)));
    json_t *bodyj = json_pack("{s:s, s:o, s:i, s:f, s:b, s:b}", "model", "loadtest", "prompt", ids, "max_tokens",
                              o->gen_tokens, "temperature", 0.0, "ignore_eos", 1, "stream", o->stream);
    if (o->stream) json_object_set_new(bodyj, "stream_options", json_pack("{s:b}", "include_usage", 1));
    char *body = json_dumps(bodyj, JSON_COMPACT);
    json_decref(bodyj);
    lt_stream s = {.r = r, .completion = -1, .prompt = -1};
    lt_conn c;
    r->prompt_tokens = -1;
    r->t_issue = mx_now();
    int rc = http_exchange(o, "POST", "/v1/completions", body, &c, o->stream ? on_stream_read : NULL, &s, r->err,
                           sizeof r->err);
    r->t_done = mx_now();
    free(body);
    if (rc) goto out;
    if (c.status != 200) { snprintf(r->err, sizeof r->err, "HTTP %d: %.200s", c.status, c.body); goto out; }
    if (o->stream) {
        if (!s.saw_done) { snprintf(r->err, sizeof r->err, "stream ended without [DONE]"); goto out; }
        r->tokens = s.completion >= 0 ? s.completion : r->n_ev;
        r->prompt_tokens = s.prompt;
    } else {
        /* generated text is any byte sequence: a valid response may hold \u0000, which
         * jansson refuses without JSON_ALLOW_NUL */
        json_t *j = json_loads(c.body, JSON_ALLOW_NUL, NULL);
        int comp = -1, pr = -1;
        usage_of(j, &comp, &pr);
        json_decref(j);
        r->tokens = comp > 0 ? comp : 0;
        r->prompt_tokens = pr;
        r->ttft = r->t_done - r->t_issue;
    }
    r->ok = r->tokens > 0;
    if (!r->ok) snprintf(r->err, sizeof r->err, "no tokens generated");
out:
    conn_free(&c);
}

/* ==== One concurrency level ==== */
typedef struct lt_level {
    const lt_opts *o;
    lt_result *res;
    int n_total, warm, next;
    uint64_t base;         /* global index of the level's first request */
    double deadline;       /* mx_now() after which no request is issued; 0 = none */
    double t_a, t_b;       /* steady-state window */
    bool truncated;
    pthread_mutex_t mu;
} lt_level;

static void *worker(void *arg) {
    lt_level *L = arg;
    for (;;) {
        pthread_mutex_lock(&L->mu);
        const double now = mx_now();
        int i = -1;
        if (L->next < L->n_total && !(L->deadline > 0 && now > L->deadline)) {
            i = L->next++;
            if (i == L->warm) L->t_a = now;
        } else {
            if (L->t_b == 0) L->t_b = now; /* from here on fewer than C requests are in flight */
            if (L->next < L->n_total) L->truncated = true;
        }
        pthread_mutex_unlock(&L->mu);
        if (i < 0) return NULL;
        one_request(L->o, L->base + (uint64_t)i, &L->res[i]);
    }
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile (sorts v); 0 for an empty set. */
static double pct(double *v, int n, double p) {
    if (n == 0) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    int k = (int)ceil(p / 100.0 * n) - 1;
    return v[k < 0 ? 0 : k >= n ? n - 1 : k];
}

static json_t *stat3(double sum, int n, int lo, int hi) {
    return json_pack("{s:f, s:i, s:i}", "mean", n ? sum / n : 0.0, "min", n ? lo : 0, "max", n ? hi : 0);
}

static json_t *run_level(const lt_opts *o, int conc, uint64_t base, double deadline) {
    lt_level L = {.o = o, .base = base, .deadline = deadline, .mu = PTHREAD_MUTEX_INITIALIZER};
    L.warm = o->warmup >= 0 ? o->warmup : conc;
    const int measured = o->requests > 0 ? o->requests : (2 * conc > 8 ? 2 * conc : 8);
    L.n_total = L.warm + measured;
    L.res = calloc((size_t)L.n_total, sizeof(lt_result));
    pthread_t *th = calloc((size_t)conc, sizeof *th);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, (size_t)512 << 10); /* 256 clients: no 8 MiB stacks */
    const double t0 = mx_now();
    int started = 0;
    for (int i = 0; i < conc; i++) {
        if (pthread_create(&th[started], &attr, worker, &L)) break; /* fewer clients: reported */
        started++;
    }
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    pthread_attr_destroy(&attr);
    const double wall = mx_now() - t0;
    const int issued = L.next;
    const double win = L.t_a > 0 && L.t_b > L.t_a ? L.t_b - L.t_a : 0;

    int fails = 0, n_meas = 0, n_ok = 0, ng = 0, done_in = 0, lo_p = 0, hi_p = 0, lo_c = 0, hi_c = 0;
    double tok_in = 0, sum_p = 0, sum_c = 0, ev_sum = 0;
    double *ttft = malloc(((size_t)issued + 1) * sizeof(double));
    size_t gcap = 1;
    for (int i = 0; i < issued; i++) gcap += (size_t)L.res[i].n_ev;
    double *gaps = malloc(gcap * sizeof(double));
    const char *first_err = NULL;
    for (int i = 0; i < issued; i++) {
        lt_result *r = &L.res[i];
        if (!r->ok) { fails++; if (!first_err) first_err = r->err; continue; }
        /* accepted token counts, every request of the level */
        const int p = r->prompt_tokens;
        if (n_ok == 0 || p < lo_p) lo_p = p;
        if (n_ok == 0 || p > hi_p) hi_p = p;
        if (n_ok == 0 || r->tokens < lo_c) lo_c = r->tokens;
        if (n_ok == 0 || r->tokens > hi_c) hi_c = r->tokens;
        sum_p += p;
        sum_c += r->tokens;
        ev_sum += r->n_ev;
        n_ok++;
        /* tokens produced inside the window (any request: warm-up ones stream into it) */
        if (win > 0) {
            if (o->stream && r->n_ev > 0) {
                int k = 0;
                for (int e = 0; e < r->n_ev; e++) k += r->ev_t[e] >= L.t_a && r->ev_t[e] <= L.t_b;
                tok_in += (double)r->tokens * k / r->n_ev;
            } else if (r->t_done >= L.t_a && r->t_done <= L.t_b) {
                tok_in += r->tokens;
            }
            done_in += r->t_done >= L.t_a && r->t_done <= L.t_b;
        }
        if (i < L.warm) continue;
        ttft[n_meas++] = r->ttft * 1e3;
        for (int e = 1; e < r->n_ev; e++) gaps[ng++] = (r->ev_t[e] - r->ev_t[e - 1]) * 1e3;
    }
    json_t *out = json_pack("{s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:{s:f, s:f}, s:{s:f, s:f}, s:o, s:o}",
                            "concurrency", conc, "warmup_requests", issued < L.warm ? issued : L.warm, "requests",
                            issued > L.warm ? issued - L.warm : 0, "failures", fails, "wall_s", wall, "window_s", win,
                            "output_tokens_per_s", win > 0 ? tok_in / win : 0.0, "requests_per_s",
                            win > 0 ? done_in / win : 0.0, "ttft_ms", "p50", pct(ttft, n_meas, 50), "p99",
                            pct(ttft, n_meas, 99), "itl_ms", "p50", pct(gaps, ng, 50), "p99", pct(gaps, ng, 99),
                            "prompt_tokens", stat3(sum_p, n_ok, lo_p, hi_p), "completion_tokens",
                            stat3(sum_c, n_ok, lo_c, hi_c));
    if (o->stream) json_object_set_new(out, "token_events_per_request", json_real(n_ok ? ev_sum / n_ok : 0.0));
    if (started < conc) json_object_set_new(out, "threads_started", json_integer(started));
    if (L.truncated) json_object_set_new(out, "truncated", json_true());
    if (first_err) json_object_set_new(out, "first_error", json_string(first_err));
    for (int i = 0; i < L.n_total; i++) free(L.res[i].ev_t);
    free(L.res);
    free(th);
    free(ttft);
    free(gaps);
    return out;
}

/* ==== Model facts from GET /v1/models (meta.n_vocab, meta.n_ctx) ==== */
static int model_meta(const lt_opts *o, int *vocab, int *n_ctx, char *err, size_t errn) {
    lt_conn c;
    int rc = http_exchange(o, "GET", "/v1/models", NULL, &c, NULL, NULL, err, errn);
    if (!rc && c.status != 200) {
        snprintf(err, errn, "GET /v1/models: HTTP %d: %.200s", c.status, c.body);
        rc = -1;
    }
    if (!rc) {
        json_t *j = json_loads(c.body, 0, NULL);
        json_t *meta = json_object_get(json_array_get(json_object_get(j, "data"), 0), "meta");
        json_t *v = json_object_get(meta, "n_vocab"), *x = json_object_get(meta, "n_ctx");
        *vocab = json_is_integer(v) ? (int)json_integer_value(v) : 0;
        *n_ctx = json_is_integer(x) ? (int)json_integer_value(x) : 0;
        json_decref(j);
    }
    conn_free(&c);
    return rc;
}

/* ==== CLI ==== */
static void usage(FILE *f) {
    fprintf(f, "usage: mlxcel loadtest --url http://HOST:PORT [--concurrency 1,8,32,64] [--requests N]\n"
               "                       [--warmup N] [--prompt-tokens P] [--gen-tokens G] [--stream] [--json]\n"
               "                       [--vocab-size V] [--seed S] [--time-limit S] [--timeout S] [--api-key KEY]\n\n"
               "Steady-state closed-loop load on POST /v1/completions with token-id prompts of exactly P tokens\n"
               "(random ids, no shared prefixes), G tokens generated per request (ignore_eos). Per concurrency\n"
               "level: output tok/s and requests/s over the steady-state window, TTFT p50/p99, inter-token\n"
               "latency p50/p99 (with --stream), the prompt/completion tokens the server accepted (usage),\n"
               "failures. Exit status 1 when any request failed.\n\n"
               "  --requests N     measured requests per level (default 2 x concurrency, at least 8)\n"
               "  --warmup N       requests per level before measuring (default: the level's concurrency)\n"
               "  --vocab-size V   prompt ids in [0, V) (default: meta.n_vocab of GET /v1/models)\n"
               "  --seed S         prompt seed (default: from the clock; prompts differ between runs)\n"
               "  --time-limit S   no request is issued after S seconds; later levels are skipped\n"
               "Defaults: --concurrency 1,8,32,64 --prompt-tokens 128 --gen-tokens 64 --timeout 300\n");
}

static int parse_int(const char *s, int lo, int hi, int *out) {
    char *e;
    errno = 0;
    long v = strtol(s, &e, 10);
    if (errno || *e || e == s || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

static int parse_url(const char *url, lt_opts *o) {
    const char *hp = !strncmp(url, "http://", 7) ? url + 7 : NULL;
    if (!hp) return -1;
    size_t hlen = strcspn(hp, "/");
    char hostport[300];
    snprintf(hostport, sizeof hostport, "%.*s", (int)hlen, hp);
    char *colon = strrchr(hostport, ':');
    if (hostport[0] == '[') { /* [v6]:port */
        char *rb = strchr(hostport, ']');
        colon = rb && rb[1] == ':' ? rb + 1 : NULL;
        if (rb) *rb = 0;
        memmove(hostport, hostport + 1, strlen(hostport));
        if (colon) colon--;
    }
    snprintf(o->port, sizeof o->port, "%s", colon ? colon + 1 : "80");
    if (colon) *colon = 0;
    snprintf(o->host, sizeof o->host, "%.255s", hostport);
    return 0;
}

static void print_row(const json_t *r) {
    const json_t *tt = json_object_get(r, "ttft_ms"), *it = json_object_get(r, "itl_ms");
    printf("%6d %9d %10.1f %8.2f %8.1fms %8.1fms %7.2fms %7.2fms %8.1f %8.1f %8d%s\n",
           (int)json_integer_value(json_object_get(r, "concurrency")),
           (int)json_integer_value(json_object_get(r, "requests")),
           json_real_value(json_object_get(r, "output_tokens_per_s")),
           json_real_value(json_object_get(r, "requests_per_s")), json_real_value(json_object_get(tt, "p50")),
           json_real_value(json_object_get(tt, "p99")), json_real_value(json_object_get(it, "p50")),
           json_real_value(json_object_get(it, "p99")),
           json_real_value(json_object_get(json_object_get(r, "prompt_tokens"), "mean")),
           json_real_value(json_object_get(json_object_get(r, "completion_tokens"), "mean")),
           (int)json_integer_value(json_object_get(r, "failures")),
           json_is_true(json_object_get(r, "truncated")) ? "  (truncated by --time-limit)" : "");
    if (json_object_get(r, "first_error"))
        printf("       first error: %s\n", json_string_value(json_object_get(r, "first_error")));
    fflush(stdout);
}

int cmd_loadtest(int argc, char **argv) {
    lt_opts o = {.warmup = -1, .prompt_tokens = 128, .gen_tokens = 64, .timeout_s = 300};
    int defaults[] = {1, 8, 32, 64};
    memcpy(o.levels, defaults, sizeof defaults);
    o.n_levels = 4;
    const char *url = NULL;
    bool have_seed = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!strcmp(a, "--stream")) { o.stream = true; continue; }
        if (!strcmp(a, "--json")) { o.json = true; continue; }
        if (!v) { fprintf(stderr, "mlxcel loadtest: %s: missing value (see --help)\n", a); return 2; }
        i++;
        int bad = 0, t = 0;
        if (!strcmp(a, "--url")) url = v;
        else if (!strcmp(a, "--requests")) bad = parse_int(v, 1, 1000000, &o.requests);
        else if (!strcmp(a, "--warmup")) bad = parse_int(v, 0, 1000000, &o.warmup);
        else if (!strcmp(a, "--prompt-tokens")) bad = parse_int(v, 1, 1 << 20, &o.prompt_tokens);
        else if (!strcmp(a, "--gen-tokens")) bad = parse_int(v, 1, 1 << 20, &o.gen_tokens);
        else if (!strcmp(a, "--timeout")) bad = parse_int(v, 1, 86400, &o.timeout_s);
        else if (!strcmp(a, "--vocab-size")) bad = parse_int(v, 1, 1 << 30, &o.vocab);
        else if (!strcmp(a, "--time-limit")) { bad = parse_int(v, 1, 1 << 30, &t); o.time_limit = t; }
        else if (!strcmp(a, "--seed")) {
            char *e;
            errno = 0;
            o.seed = strtoull(v, &e, 10);
            bad = errno || *e || e == v || *v == '-';
            have_seed = true;
        } else if (!strcmp(a, "--api-key")) snprintf(o.api_key, sizeof o.api_key, "%s", v);
        else if (!strcmp(a, "--concurrency")) {
            o.n_levels = 0;
            char tmp[256];
            snprintf(tmp, sizeof tmp, "%s", v);
            for (char *sv, *tk = strtok_r(tmp, ",", &sv); tk && !bad; tk = strtok_r(NULL, ",", &sv)) {
                if (o.n_levels == MAX_LEVELS) bad = -1;
                else bad = parse_int(tk, 1, 4096, &o.levels[o.n_levels++]);
            }
            if (!o.n_levels) bad = -1;
        } else { fprintf(stderr, "mlxcel loadtest: unknown option '%s' (see --help)\n", a); return 2; }
        if (bad) { fprintf(stderr, "mlxcel loadtest: %s: invalid value '%s'\n", a, v); return 2; }
    }
    if (!url) { fprintf(stderr, "mlxcel loadtest: --url is required\n"); usage(stderr); return 2; }
    if (parse_url(url, &o)) {
        fprintf(stderr, "mlxcel loadtest: --url %s: only http:// URLs are supported\n", url);
        return 2;
    }
    if (!have_seed) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^ ((uint64_t)getpid() << 40);
        o.seed = splitmix64(&x) >> 11; /* 53 bits: exact in the JSON report */
    }

    /* The model's vocabulary (prompt ids) and context (P + G must fit). */
    int vocab = 0, n_ctx = 0;
    char err[512] = "";
    if (model_meta(&o, &vocab, &n_ctx, err, sizeof err) && !o.vocab) {
        fprintf(stderr, "mlxcel loadtest: %s\n", err);
        return 1;
    }
    if (!o.vocab) o.vocab = vocab;
    if (o.vocab <= 0) {
        fprintf(stderr, "mlxcel loadtest: GET /v1/models gives no meta.n_vocab; give --vocab-size\n");
        return 2;
    }
    if (n_ctx > 0 && o.prompt_tokens + o.gen_tokens > n_ctx) {
        fprintf(stderr, "mlxcel loadtest: --prompt-tokens %d + --gen-tokens %d exceed the server's context of %d tokens "
                        "per sequence (its -c/--ctx-size)\n", o.prompt_tokens, o.gen_tokens, n_ctx);
        return 2;
    }

    const double t_start = mx_now();
    const double deadline = o.time_limit > 0 ? t_start + o.time_limit : 0;
    json_t *results = json_array(), *skipped = json_array();
    if (!o.json)
        printf("%6s %9s %10s %8s %10s %10s %9s %9s %8s %8s %8s\n", "conc", "requests", "out tok/s", "req/s", "ttft p50",
               "ttft p99", "itl p50", "itl p99", "prompt", "output", "failures");
    int total_fail = 0;
    uint64_t base = 0;
    for (int l = 0; l < o.n_levels; l++) {
        const int conc = o.levels[l];
        if (deadline > 0 && mx_now() > deadline) {
            json_array_append_new(skipped, json_integer(conc));
            fprintf(stderr, "mlxcel loadtest: concurrency %d skipped (--time-limit %.0f s reached)\n", conc, o.time_limit);
            continue;
        }
        json_t *r = run_level(&o, conc, base, deadline);
        base += 1u << 24; /* request indices of different levels never meet */
        total_fail += (int)json_integer_value(json_object_get(r, "failures"));
        if (!o.json) print_row(r);
        json_array_append_new(results, r);
    }
    if (o.json) {
        json_t *doc = json_pack("{s:s, s:i, s:i, s:i, s:i, s:I, s:b, s:f, s:o, s:o}", "url", url, "requests", o.requests,
                                "prompt_tokens", o.prompt_tokens, "gen_tokens", o.gen_tokens, "vocab", o.vocab,
                                "seed", (json_int_t)o.seed, "stream", o.stream, "elapsed_s", mx_now() - t_start,
                                "results", results, "skipped_levels", skipped);
        char *s = json_dumps(doc, JSON_INDENT(2));
        puts(s);
        free(s);
        json_decref(doc);
    } else {
        json_decref(results);
        json_decref(skipped);
    }
    return total_fail ? 1 : 0;
}
