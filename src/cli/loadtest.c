/* mlxcel loadtest: steady-state load against an OpenAI-compatible server.
 *
 * Per concurrency level C: C client threads issue --requests requests in total to
 * POST /v1/completions (prompt given as P token ids, max_tokens G, ignore_eos so every request
 * generates exactly G tokens), one connection per request. Reported per level: output tokens/s
 * and requests/s over the level's wall time, TTFT p50/p99 (first streamed text event; the whole
 * response without --stream), inter-token latency p50/p99 (gaps between streamed events), and
 * failures.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/clock.h"
#include "cli/cli.h"

#define MAX_LEVELS 16

typedef struct lt_opts {
    char host[256], port[16];
    int levels[MAX_LEVELS], n_levels;
    int requests, prompt_tokens, gen_tokens, timeout_s;
    bool stream, json;
    char api_key[256];
} lt_opts;

typedef struct lt_result {
    bool ok;
    char err[512];
    double ttft;       /* seconds */
    int tokens;        /* completion tokens (usage, else counted events) */
    double *gaps;      /* inter-event gaps, seconds */
    int n_gaps, cap_gaps;
} lt_result;

/* ==== HTTP over a socket ==== */
static int lt_connect(const lt_opts *o, int timeout_s, char *err, size_t errn) {
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
        struct timeval tv = {timeout_s, 0};
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

/* Scans complete SSE events; returns the number of text-bearing events; sets *usage. */
static int scan_events(lt_conn *c, int *usage, bool *saw_done) {
    int n = 0;
    for (;;) {
        char *s = c->body + c->scan;
        char *e = strstr(s, "\n\n");
        if (!e) break;
        *e = 0;
        if (!strncmp(s, "data: ", 6)) {
            if (!strcmp(s + 6, "[DONE]")) *saw_done = true;
            else {
                json_t *o = json_loads(s + 6, 0, NULL);
                json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
                const char *t = json_string_value(json_object_get(ch, "text"));
                if (t && *t) n++;
                json_t *u = json_object_get(json_object_get(o, "usage"), "completion_tokens");
                if (json_is_integer(u)) *usage = (int)json_integer_value(u);
                json_decref(o);
            }
        }
        *e = '\n';
        c->scan = (size_t)(e - c->body) + 2;
    }
    return n;
}

static void one_request(const lt_opts *o, int idx, lt_result *r) {
    /* Distinct prompts (ids 1..250) so that no request reuses another's prefix. */
    json_t *ids = json_array();
    for (int i = 0; i < o->prompt_tokens; i++)
        json_array_append_new(ids, json_integer(1 + (int)(((unsigned)idx * 7919u + (unsigned)i * 31u + (unsigned)(idx * i)) % 250u)));
    json_t *bodyj = json_pack("{s:s, s:o, s:i, s:f, s:b, s:b}", "model", "loadtest", "prompt", ids, "max_tokens",
                              o->gen_tokens, "temperature", 0.0, "ignore_eos", 1, "stream", o->stream);
    if (o->stream) json_object_set_new(bodyj, "stream_options", json_pack("{s:b}", "include_usage", 1));
    char *body = json_dumps(bodyj, JSON_COMPACT);
    json_decref(bodyj);
    char auth[300] = "";
    if (o->api_key[0]) snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", o->api_key);
    size_t hl = strlen(body) + 512;
    char *reqs = malloc(hl);
    int n = snprintf(reqs, hl, "POST /v1/completions HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n%s"
                     "Connection: close\r\nContent-Length: %zu\r\n\r\n%s", o->host, o->port, auth, strlen(body), body);
    free(body);
    lt_conn c = {0};
    c.raw = malloc(c.raw_cap = 65536);
    c.raw[0] = 0;
    c.body = malloc(c.body_cap = 65536);
    c.body[0] = 0;
    double t0 = mx_now(), last = 0;
    int events = 0, usage = -1;
    bool saw_done = false;
    int fd = lt_connect(o, o->timeout_s, r->err, sizeof r->err);
    if (fd < 0) goto out;
    if (write(fd, reqs, (size_t)n) != n) { snprintf(r->err, sizeof r->err, "write: %s", strerror(errno)); goto out; }
    char tmp[16384];
    for (;;) {
        ssize_t k = read(fd, tmp, sizeof tmp);
        if (k < 0) { snprintf(r->err, sizeof r->err, "read: %s", strerror(errno)); goto out; }
        if (k == 0) break;
        double now = mx_now();
        buf_add(&c.raw, &c.raw_len, &c.raw_cap, tmp, (size_t)k);
        decode(&c);
        if (o->stream && c.headers_done) {
            int ne = scan_events(&c, &usage, &saw_done);
            if (ne > 0) {
                if (events == 0) r->ttft = now - t0;
                else if (r->n_gaps < r->cap_gaps) r->gaps[r->n_gaps++] = (now - last) / ne;
                /* Several events in one read share the gap evenly (they arrived together). */
                for (int g = 1; g < ne && r->n_gaps < r->cap_gaps; g++) r->gaps[r->n_gaps++] = 0;
                events += ne;
                last = now;
            }
        }
        if (c.done) break;
    }
    if (c.status != 200) { snprintf(r->err, sizeof r->err, "HTTP %d: %.120s", c.status, c.body ? c.body : ""); goto out; }
    if (o->stream) {
        if (!saw_done) { snprintf(r->err, sizeof r->err, "stream ended without [DONE]"); goto out; }
        r->tokens = usage >= 0 ? usage : events;
    } else {
        json_t *j = json_loads(c.body, 0, NULL);
        json_t *u = json_object_get(json_object_get(j, "usage"), "completion_tokens");
        r->tokens = json_is_integer(u) ? (int)json_integer_value(u) : 0;
        json_decref(j);
        r->ttft = mx_now() - t0;
    }
    r->ok = r->tokens > 0;
    if (!r->ok && !r->err[0]) snprintf(r->err, sizeof r->err, "no tokens generated");
out:
    if (fd >= 0) close(fd);
    free(reqs);
    free(c.raw);
    free(c.body);
}

/* ==== One concurrency level ==== */
typedef struct lt_level {
    const lt_opts *o;
    lt_result *res;
    int next;
    pthread_mutex_t mu;
} lt_level;

static void *worker(void *arg) {
    lt_level *L = arg;
    for (;;) {
        pthread_mutex_lock(&L->mu);
        int i = L->next < L->o->requests ? L->next++ : -1;
        pthread_mutex_unlock(&L->mu);
        if (i < 0) return NULL;
        one_request(L->o, i, &L->res[i]);
    }
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(double *v, int n, double p) {
    if (n == 0) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    int k = (int)ceil(p / 100.0 * n) - 1;
    return v[k < 0 ? 0 : k >= n ? n - 1 : k];
}

static json_t *run_level(const lt_opts *o, int conc) {
    lt_level L = {o, calloc((size_t)o->requests, sizeof(lt_result)), 0, PTHREAD_MUTEX_INITIALIZER};
    for (int i = 0; i < o->requests; i++) {
        L.res[i].cap_gaps = o->gen_tokens + 4;
        L.res[i].gaps = malloc((size_t)L.res[i].cap_gaps * sizeof(double));
    }
    pthread_t *th = calloc((size_t)conc, sizeof *th);
    double t0 = mx_now();
    for (int i = 0; i < conc; i++) pthread_create(&th[i], NULL, worker, &L);
    for (int i = 0; i < conc; i++) pthread_join(th[i], NULL);
    double wall = mx_now() - t0;
    int fails = 0, ok = 0, ng = 0;
    long toks = 0;
    double *ttft = malloc((size_t)o->requests * sizeof(double));
    double *gaps = malloc(((size_t)o->requests * (size_t)(o->gen_tokens + 4) + 1) * sizeof(double));
    const char *first_err = NULL;
    for (int i = 0; i < o->requests; i++) {
        lt_result *r = &L.res[i];
        if (!r->ok) { fails++; if (!first_err) first_err = r->err; continue; }
        ttft[ok++] = r->ttft * 1e3;
        toks += r->tokens;
        for (int g = 0; g < r->n_gaps; g++) gaps[ng++] = r->gaps[g] * 1e3;
    }
    json_t *out = json_pack("{s:i, s:i, s:i, s:f, s:f, s:f, s:{s:f, s:f}, s:{s:f, s:f}}", "concurrency", conc,
                            "requests", o->requests, "failures", fails, "wall_s", wall, "output_tokens_per_s",
                            wall > 0 ? (double)toks / wall : 0.0, "requests_per_s", wall > 0 ? ok / wall : 0.0,
                            "ttft_ms", "p50", pct(ttft, ok, 50), "p99", pct(ttft, ok, 99), "itl_ms", "p50",
                            pct(gaps, ng, 50), "p99", pct(gaps, ng, 99));
    if (first_err) json_object_set_new(out, "first_error", json_string(first_err));
    for (int i = 0; i < o->requests; i++) free(L.res[i].gaps);
    free(L.res);
    free(th);
    free(ttft);
    free(gaps);
    return out;
}

/* ==== CLI ==== */
static void usage(FILE *f) {
    fprintf(f, "usage: mlxcel loadtest --url http://HOST:PORT [--concurrency 1,8,32,64] [--requests N]\n"
               "                       [--prompt-tokens P] [--gen-tokens G] [--stream] [--json]\n"
               "                       [--timeout S] [--api-key KEY]\n\n"
               "Steady-state load on POST /v1/completions; prints per concurrency: output tok/s, requests/s,\n"
               "TTFT p50/p99, inter-token latency p50/p99 (with --stream), failures.\n"
               "Defaults: --concurrency 1,8,32,64 --requests 64 --prompt-tokens 128 --gen-tokens 64 --timeout 300\n");
}

static int parse_int(const char *s, int lo, int hi, int *out) {
    char *e;
    long v = strtol(s, &e, 10);
    if (*e || e == s || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

int cmd_loadtest(int argc, char **argv) {
    lt_opts o = {.requests = 64, .prompt_tokens = 128, .gen_tokens = 64, .timeout_s = 300};
    int defaults[] = {1, 8, 32, 64};
    memcpy(o.levels, defaults, sizeof defaults);
    o.n_levels = 4;
    const char *url = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!strcmp(a, "--stream")) { o.stream = true; continue; }
        if (!strcmp(a, "--json")) { o.json = true; continue; }
        if (!v) { fprintf(stderr, "mlxcel loadtest: %s: missing value (see --help)\n", a); return 2; }
        i++;
        int bad = 0;
        if (!strcmp(a, "--url")) url = v;
        else if (!strcmp(a, "--requests")) bad = parse_int(v, 1, 1000000, &o.requests);
        else if (!strcmp(a, "--prompt-tokens")) bad = parse_int(v, 1, 1 << 20, &o.prompt_tokens);
        else if (!strcmp(a, "--gen-tokens")) bad = parse_int(v, 1, 1 << 20, &o.gen_tokens);
        else if (!strcmp(a, "--timeout")) bad = parse_int(v, 1, 86400, &o.timeout_s);
        else if (!strcmp(a, "--api-key")) snprintf(o.api_key, sizeof o.api_key, "%s", v);
        else if (!strcmp(a, "--concurrency")) {
            o.n_levels = 0;
            char tmp[256];
            snprintf(tmp, sizeof tmp, "%s", v);
            for (char *sv, *t = strtok_r(tmp, ",", &sv); t && !bad; t = strtok_r(NULL, ",", &sv)) {
                if (o.n_levels == MAX_LEVELS) bad = -1;
                else bad = parse_int(t, 1, 4096, &o.levels[o.n_levels++]);
            }
            if (!o.n_levels) bad = -1;
        } else { fprintf(stderr, "mlxcel loadtest: unknown option '%s' (see --help)\n", a); return 2; }
        if (bad) { fprintf(stderr, "mlxcel loadtest: %s: invalid value '%s'\n", a, v); return 2; }
    }
    if (!url) { fprintf(stderr, "mlxcel loadtest: --url is required\n"); usage(stderr); return 2; }
    const char *hp = !strncmp(url, "http://", 7) ? url + 7 : NULL;
    if (!hp) { fprintf(stderr, "mlxcel loadtest: --url %s: only http:// URLs are supported\n", url); return 2; }
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
    snprintf(o.port, sizeof o.port, "%s", colon ? colon + 1 : "80");
    if (colon) *colon = 0;
    snprintf(o.host, sizeof o.host, "%.255s", hostport);

    json_t *results = json_array();
    if (!o.json)
        printf("%6s %9s %10s %8s %10s %10s %9s %9s %8s\n", "conc", "requests", "out tok/s", "req/s", "ttft p50",
               "ttft p99", "itl p50", "itl p99", "failures");
    int total_fail = 0;
    for (int l = 0; l < o.n_levels; l++) {
        json_t *r = run_level(&o, o.levels[l]);
        total_fail += (int)json_integer_value(json_object_get(r, "failures"));
        if (!o.json) {
            json_t *tt = json_object_get(r, "ttft_ms"), *it = json_object_get(r, "itl_ms");
            printf("%6d %9d %10.1f %8.2f %8.1fms %8.1fms %7.2fms %7.2fms %8d\n", o.levels[l], o.requests,
                   json_real_value(json_object_get(r, "output_tokens_per_s")),
                   json_real_value(json_object_get(r, "requests_per_s")), json_real_value(json_object_get(tt, "p50")),
                   json_real_value(json_object_get(tt, "p99")), json_real_value(json_object_get(it, "p50")),
                   json_real_value(json_object_get(it, "p99")),
                   (int)json_integer_value(json_object_get(r, "failures")));
            if (json_object_get(r, "first_error"))
                printf("       first error: %s\n", json_string_value(json_object_get(r, "first_error")));
            fflush(stdout);
        }
        json_array_append_new(results, r);
    }
    if (o.json) {
        json_t *doc = json_pack("{s:s, s:i, s:i, s:i, s:b, s:o}", "url", url, "requests", o.requests, "prompt_tokens",
                                o.prompt_tokens, "gen_tokens", o.gen_tokens, "stream", o.stream, "results", results);
        char *s = json_dumps(doc, JSON_INDENT(2));
        puts(s);
        free(s);
        json_decref(doc);
    } else {
        json_decref(results);
    }
    return total_fail ? 1 : 0;
}
