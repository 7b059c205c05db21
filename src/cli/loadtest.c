/* mlxcel loadtest: steady-state load against an OpenAI-compatible server.
 *
 * Prompts are token ids, so every request's prompt is exactly the length drawn for it (text
 * would be re-tokenized by the server into some other count): POST /v1/completions with
 * "prompt": [ids], max_tokens G, temperature 0 and ignore_eos, so every request generates
 * exactly G tokens (fewer is a failure, kind `short`). P and G are fixed (--prompt-tokens,
 * --gen-tokens) or drawn per request from a law (--prompt-tokens-dist, --gen-tokens-dist;
 * loadtest_dist.c) keyed by --seed and the request's index over the whole run, so every
 * server run under the same seed gets the same sequence of lengths. The ids are drawn
 * uniformly from the model's vocabulary (meta.n_vocab of GET /v1/models, as llama-server and
 * `mlxcel serve` report it; --vocab-size overrides) by a PRNG keyed the same way: no two
 * requests share a prefix, so the prefix cache never shortens a prompt. The server's usage
 * (prompt_tokens, completion_tokens) is reported per level so the accepted counts are checked.
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
 *   failures      = failed requests of the level, warm-up included, grouped by cause
 *   server        = the server's own breakdown over the same window from /metrics
 *                   (loadtest_metrics.c), and whether it holds nothing after the level */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "cli/cli.h"
#include "cli/loadtest.h"

/* ==== /metrics scrapes ==== */
static int scrape(const lt_opts *o, lt_prom *p, char *err, size_t errn) {
    int status = 0;
    char *body = NULL;
    memset(p, 0, sizeof *p);
    if (lt_http_get(o, "/metrics", &status, &body, err, errn)) return -1;
    int rc = -1;
    if (status != 200) snprintf(err, errn, "GET /metrics: HTTP %d: %.200s", status, body ? body : "");
    else rc = lt_prom_parse(body, p, err, errn) < 0 ? -1 : 0;
    p->t = mx_now();
    free(body);
    return rc;
}

/* ==== One concurrency level ==== */
typedef struct lt_level {
    const lt_opts *o;
    lt_result *res;
    int n_total, warm, next;
    uint64_t base;         /* global index of the level's first request */
    double deadline;       /* mx_now() after which no request is issued; 0 = none */
    double t_a, t_b;       /* steady-state window */
    bool truncated, clients_done;
    pthread_mutex_t mu;
    pthread_cond_t cv;     /* the window opened or closed, or the clients ended */
    lt_prom m_a, m_b;      /* /metrics at the window's ends */
    lt_samples smp;
} lt_level;

static void *worker(void *arg) {
    lt_level *L = arg;
    for (;;) {
        pthread_mutex_lock(&L->mu);
        const double now = mx_now();
        int i = -1;
        if (L->next < L->n_total && !(L->deadline > 0 && now > L->deadline)) {
            i = L->next++;
            if (i == L->warm) { L->t_a = now; pthread_cond_broadcast(&L->cv); }
        } else {
            if (L->t_b == 0) { L->t_b = now; pthread_cond_broadcast(&L->cv); } /* fewer than C in flight from here */
            if (L->next < L->n_total) L->truncated = true;
        }
        pthread_mutex_unlock(&L->mu);
        if (i < 0) return NULL;
        lt_request_run(L->o, L->base + (uint64_t)i, &L->res[i]);
    }
}

/* Reads /metrics when the window opens, every --metrics-interval inside it, and when it closes. */
static void *metrics_thread(void *arg) {
    lt_level *L = arg;
    char err[256];
    pthread_mutex_lock(&L->mu);
    while (L->t_a == 0 && !L->clients_done) pthread_cond_wait(&L->cv, &L->mu);
    const bool opened = L->t_a > 0;
    pthread_mutex_unlock(&L->mu);
    if (!opened || scrape(L->o, &L->m_a, err, sizeof err)) return NULL;
    lt_samples_add(&L->smp, &L->m_a);
    for (;;) {
        pthread_mutex_lock(&L->mu);
        if (L->t_b == 0 && !L->clients_done) {
            const double iv = L->o->metrics_interval > 0 ? L->o->metrics_interval : 3600;
            struct timespec ts; /* the condvar's clock is CLOCK_REALTIME */
            clock_gettime(CLOCK_REALTIME, &ts);
            const double at = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + iv;
            ts.tv_sec = (time_t)at;
            ts.tv_nsec = (long)((at - floor(at)) * 1e9);
            pthread_cond_timedwait(&L->cv, &L->mu, &ts);
        }
        const bool closed = L->t_b > 0 || L->clients_done;
        pthread_mutex_unlock(&L->mu);
        lt_prom p;
        if (scrape(L->o, &p, err, sizeof err)) return NULL;
        lt_samples_add(&L->smp, &p);
        if (closed) { L->m_b = p; return NULL; }
        lt_prom_free(&p);
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

typedef struct stat3 { double sum; int n, lo, hi; } stat3;
static void stat_add(stat3 *s, int v) {
    if (s->n == 0 || v < s->lo) s->lo = v;
    if (s->n == 0 || v > s->hi) s->hi = v;
    s->sum += v;
    s->n++;
}
static json_t *stat_json(const stat3 *s) {
    return json_pack("{s:f, s:i, s:i}", "mean", s->n ? s->sum / s->n : 0.0, "min", s->n ? s->lo : 0, "max",
                     s->n ? s->hi : 0);
}

/* Failures grouped by cause: kind, plus the status (http) or the message (error_event). */
#define MAX_FAIL_GROUPS 16
static json_t *fail_groups(const lt_result *res, int n) {
    char keys[MAX_FAIL_GROUPS][160];
    int counts[MAX_FAIL_GROUPS] = {0}, first[MAX_FAIL_GROUPS], ng = 0, other = 0;
    for (int i = 0; i < n; i++) {
        const lt_result *r = &res[i];
        if (r->fail == LT_OK) continue;
        char key[160];
        if (r->fail == LT_FAIL_HTTP) snprintf(key, sizeof key, "http %d", r->http_status);
        else if (r->fail == LT_FAIL_ERROR_EVENT) snprintf(key, sizeof key, "error_event %.140s", r->err);
        else snprintf(key, sizeof key, "%s", lt_fail_name(r->fail));
        int g = 0;
        while (g < ng && strcmp(keys[g], key)) g++;
        if (g == ng) {
            if (ng == MAX_FAIL_GROUPS) { other++; continue; }
            snprintf(keys[ng], sizeof keys[ng], "%s", key);
            first[ng++] = i;
        }
        counts[g]++;
    }
    json_t *a = json_array();
    for (int g = 0; g < ng; g++) {
        const lt_result *r = &res[first[g]];
        json_t *o = json_pack("{s:s, s:i, s:s}", "kind", lt_fail_name(r->fail), "count", counts[g], "example", r->err);
        if (r->fail == LT_FAIL_HTTP) json_object_set_new(o, "status", json_integer(r->http_status));
        json_array_append_new(a, o);
    }
    if (other) json_array_append_new(a, json_pack("{s:s, s:i, s:s}", "kind", "other", "count", other, "example", ""));
    return a;
}

static json_t *run_level(const lt_opts *o, int conc, uint64_t base, double deadline) {
    lt_level L = {.o = o, .base = base, .deadline = deadline, .mu = PTHREAD_MUTEX_INITIALIZER,
                  .cv = PTHREAD_COND_INITIALIZER};
    L.warm = o->warmup >= 0 ? o->warmup : conc;
    const int measured = o->requests > 0 ? o->requests : (2 * conc > 8 ? 2 * conc : 8);
    L.n_total = L.warm + measured;
    L.res = calloc((size_t)L.n_total, sizeof(lt_result));
    stat3 want_p = {0}, want_g = {0};
    for (int i = 0; i < L.n_total; i++) {
        L.res[i].want_prompt = lt_dist_draw(&o->prompt, o->seed, base + (uint64_t)i, false);
        L.res[i].want_gen = lt_dist_draw(&o->gen, o->seed, base + (uint64_t)i, true);
    }
    pthread_t *th = calloc((size_t)conc, sizeof *th), mth;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, (size_t)512 << 10); /* 512 clients: no 8 MiB stacks */
    const bool mon = o->metrics && !pthread_create(&mth, &attr, metrics_thread, &L);
    const double t0 = mx_now();
    int started = 0;
    for (int i = 0; i < conc; i++) {
        if (pthread_create(&th[started], &attr, worker, &L)) break; /* fewer clients: reported */
        started++;
    }
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    const double wall = mx_now() - t0;
    pthread_mutex_lock(&L.mu);
    L.clients_done = true;
    pthread_cond_broadcast(&L.cv);
    pthread_mutex_unlock(&L.mu);
    if (mon) pthread_join(mth, NULL);
    pthread_attr_destroy(&attr);
    /* After the level every request has its answer: the server should hold nothing. Its
     * gauges are updated after the step that finished the last request, so poll a little. */
    lt_prom end = {0};
    double end_wait = 0;
    if (mon && L.m_b.ok) {
        char err[256];
        const double te = mx_now();
        while (!scrape(o, &end, err, sizeof err) && !lt_prom_idle(&end) && mx_now() - te < 5.0) {
            lt_prom_free(&end);
            usleep(50000);
        }
        end_wait = mx_now() - te;
    }
    const int issued = L.next;
    const double win = L.t_a > 0 && L.t_b > L.t_a ? L.t_b - L.t_a : 0;

    int fails = 0, n_meas = 0, n_ok = 0, ng = 0, done_in = 0, mismatch = 0;
    double tok_in = 0, ev_sum = 0;
    stat3 got_p = {0}, got_c = {0};
    double *ttft = malloc(((size_t)issued + 1) * sizeof(double));
    size_t gcap = 1;
    for (int i = 0; i < issued; i++) gcap += (size_t)L.res[i].n_ev;
    double *gaps = malloc(gcap * sizeof(double));
    for (int i = 0; i < issued; i++) {
        lt_result *r = &L.res[i];
        stat_add(&want_p, r->want_prompt);
        stat_add(&want_g, r->want_gen);
        if (r->fail != LT_OK) { fails++; continue; }
        /* accepted token counts, every request of the level */
        stat_add(&got_p, r->prompt_tokens);
        stat_add(&got_c, r->tokens);
        mismatch += r->prompt_tokens >= 0 && r->prompt_tokens != r->want_prompt; /* -1: not reported */
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
                            "prompt_tokens", stat_json(&got_p), "completion_tokens", stat_json(&got_c));
    json_object_set_new(out, "requested", json_pack("{s:o, s:o}", "prompt_tokens", stat_json(&want_p),
                                                    "gen_tokens", stat_json(&want_g)));
    json_object_set_new(out, "prompt_tokens_mismatch", json_integer(mismatch));
    if (o->stream) json_object_set_new(out, "token_events_per_request", json_real(n_ok ? ev_sum / n_ok : 0.0));
    if (started < conc) json_object_set_new(out, "threads_started", json_integer(started));
    if (L.truncated) json_object_set_new(out, "truncated", json_true());
    json_t *fg = fail_groups(L.res, issued);
    if (json_array_size(fg)) /* kept for older readers of the report */
        json_object_set_new(out, "first_error", json_copy(json_object_get(json_array_get(fg, 0), "example")));
    json_object_set_new(out, "failures_by_kind", fg);
    if (L.m_a.ok && L.m_b.ok)
        json_object_set_new(out, "server", lt_breakdown(&L.m_a, &L.m_b, &L.smp, &end, end_wait));
    lt_prom_free(&L.m_a);
    lt_prom_free(&L.m_b);
    lt_prom_free(&end);
    for (int i = 0; i < L.n_total; i++) free(L.res[i].ev_t);
    free(L.res);
    free(th);
    free(ttft);
    free(gaps);
    pthread_mutex_destroy(&L.mu);
    pthread_cond_destroy(&L.cv);
    return out;
}

/* ==== Model facts from GET /v1/models (meta.n_vocab, meta.n_ctx) ==== */
static int model_meta(const lt_opts *o, int *vocab, int *n_ctx, char *err, size_t errn) {
    int status = 0;
    char *body = NULL;
    if (lt_http_get(o, "/v1/models", &status, &body, err, errn)) return -1;
    int rc = 0;
    if (status != 200) {
        snprintf(err, errn, "GET /v1/models: HTTP %d: %.200s", status, body ? body : "");
        rc = -1;
    } else {
        json_t *j = json_loads(body, 0, NULL);
        json_t *meta = json_object_get(json_array_get(json_object_get(j, "data"), 0), "meta");
        json_t *v = json_object_get(meta, "n_vocab"), *x = json_object_get(meta, "n_ctx");
        *vocab = json_is_integer(v) ? (int)json_integer_value(v) : 0;
        *n_ctx = json_is_integer(x) ? (int)json_integer_value(x) : 0;
        json_decref(j);
    }
    free(body);
    return rc;
}

/* ==== CLI ==== */
static void usage(FILE *f) {
    fprintf(f, "usage: mlxcel loadtest --url http://HOST:PORT [--concurrency 1,8,32,64] [--requests N]\n"
               "                       [--warmup N] [--prompt-tokens P | --prompt-tokens-dist LAW]\n"
               "                       [--gen-tokens G | --gen-tokens-dist LAW] [--stream] [--json]\n"
               "                       [--vocab-size V] [--seed S] [--time-limit S] [--timeout S] [--api-key KEY]\n"
               "                       [--metrics-interval S] [--no-metrics]\n\n"
               "Steady-state closed-loop load on POST /v1/completions with token-id prompts of exactly P tokens\n"
               "(random ids, no shared prefixes), G tokens generated per request (ignore_eos). Per concurrency\n"
               "level: output tok/s and requests/s over the steady-state window, TTFT p50/p99, inter-token\n"
               "latency p50/p99 (with --stream), the prompt/completion tokens the server accepted (usage),\n"
               "failures by cause, and the server's own breakdown over the window from GET /metrics (step\n"
               "time, rows per step, prefill share, prefix-cache hits, preemptions, queue; then whether its\n"
               "KV pool, slots and queue are empty). Exit status 1 when any request failed.\n\n"
               "  --prompt-tokens-dist LAW, --gen-tokens-dist LAW   lengths drawn per request:\n"
               "                   N | fixed:N | uniform:A,B | lognormal:MEAN,SIGMA[,MIN,MAX] | sharegpt\n"
               "                   (sharegpt: prompt lognormal:161,1.0,4,1024, output lognormal:338,0.8,4,1024)\n"
               "  --requests N     measured requests per level (default 2 x concurrency, at least 8)\n"
               "  --warmup N       requests per level before measuring (default: the level's concurrency)\n"
               "  --vocab-size V   prompt ids in [0, V) (default: meta.n_vocab of GET /v1/models)\n"
               "  --seed S         prompt ids and lengths (default: from the clock; they differ between runs)\n"
               "  --time-limit S   no request is issued after S seconds; later levels are skipped\n"
               "  --timeout S      a request that gets no byte for S seconds fails (kind timeout)\n"
               "  --metrics-interval S   seconds between /metrics samples in the window (default 0.5; 0: ends only)\n"
               "  --no-metrics     do not read /metrics\n"
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
    size_t i;
    json_t *g;
    json_array_foreach(json_object_get(r, "failures_by_kind"), i, g)
        printf("       failed %d x %s: %s\n", (int)json_integer_value(json_object_get(g, "count")),
               json_string_value(json_object_get(g, "kind")), json_string_value(json_object_get(g, "example")));
    const int mm = (int)json_integer_value(json_object_get(r, "prompt_tokens_mismatch"));
    if (mm) printf("       %d answers report another prompt length than was sent (usage.prompt_tokens)\n", mm);
    if (json_object_get(r, "server")) lt_breakdown_print(json_object_get(r, "server"));
    fflush(stdout);
}

/* The value of a length option: --prompt-tokens N and --prompt-tokens-dist LAW set the same law. */
static int set_len(lt_opts *o, bool gen, const char *v, bool *seen, const char *flag) {
    char err[400];
    if (*seen) {
        fprintf(stderr, "mlxcel loadtest: %s: the %s length is already given (--%s-tokens or --%s-tokens-dist, once)\n",
                flag, gen ? "output" : "prompt", gen ? "gen" : "prompt", gen ? "gen" : "prompt");
        return 2;
    }
    *seen = true;
    if (lt_dist_parse(v, gen, gen ? &o->gen : &o->prompt, err, sizeof err)) {
        fprintf(stderr, "mlxcel loadtest: %s\n", err);
        return 2;
    }
    return 0;
}

int cmd_loadtest(int argc, char **argv) {
    lt_opts o = {.warmup = -1, .timeout_s = 300, .metrics = true, .metrics_interval = 0.5};
    char e0[64];
    lt_dist_parse("128", false, &o.prompt, e0, sizeof e0);
    lt_dist_parse("64", true, &o.gen, e0, sizeof e0);
    int defaults[] = {1, 8, 32, 64};
    memcpy(o.levels, defaults, sizeof defaults);
    o.n_levels = 4;
    const char *url = NULL;
    bool have_seed = false, seen_p = false, seen_g = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!strcmp(a, "--stream")) { o.stream = true; continue; }
        if (!strcmp(a, "--json")) { o.json = true; continue; }
        if (!strcmp(a, "--no-metrics")) { o.metrics = false; continue; }
        if (!v) { fprintf(stderr, "mlxcel loadtest: %s: missing value (see --help)\n", a); return 2; }
        i++;
        int bad = 0, t = 0;
        if (!strcmp(a, "--url")) url = v;
        else if (!strcmp(a, "--requests")) bad = parse_int(v, 1, 1000000, &o.requests);
        else if (!strcmp(a, "--warmup")) bad = parse_int(v, 0, 1000000, &o.warmup);
        else if (!strcmp(a, "--prompt-tokens") || !strcmp(a, "--gen-tokens")) {
            const bool gen = a[2] == 'g';
            if (parse_int(v, 1, 1 << 20, &t)) bad = -1;
            else if (set_len(&o, gen, v, gen ? &seen_g : &seen_p, a)) return 2;
        } else if (!strcmp(a, "--prompt-tokens-dist") || !strcmp(a, "--gen-tokens-dist")) {
            const bool gen = a[2] == 'g';
            if (set_len(&o, gen, v, gen ? &seen_g : &seen_p, a)) return 2;
        } else if (!strcmp(a, "--timeout")) bad = parse_int(v, 1, 86400, &o.timeout_s);
        else if (!strcmp(a, "--vocab-size")) bad = parse_int(v, 1, 1 << 30, &o.vocab);
        else if (!strcmp(a, "--time-limit")) { bad = parse_int(v, 1, 1 << 30, &t); o.time_limit = t; }
        else if (!strcmp(a, "--metrics-interval")) {
            char *e;
            errno = 0;
            o.metrics_interval = strtod(v, &e);
            bad = errno || *e || e == v || !(o.metrics_interval >= 0 && o.metrics_interval <= 3600);
        } else if (!strcmp(a, "--seed")) {
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
                if (o.n_levels == LT_MAX_LEVELS) bad = -1;
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
        o.seed = lt_splitmix64(&x) >> 11; /* 53 bits: exact in the JSON report */
    }

    /* The model's vocabulary (prompt ids) and context (the longest P + G must fit). */
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
    if (n_ctx > 0 && (long)o.prompt.hi + o.gen.hi > n_ctx) {
        fprintf(stderr, "mlxcel loadtest: the longest prompt (%d, %s) + the longest output (%d, %s) exceed the server's "
                        "context of %d tokens per sequence (its -c/--ctx-size; llama-server: -c / -np)%s\n",
                o.prompt.hi, o.prompt.spec, o.gen.hi, o.gen.spec, n_ctx,
                o.prompt.kind == LT_DIST_LOGNORMAL || o.gen.kind == LT_DIST_LOGNORMAL
                    ? "; clamp the law: lognormal:MEAN,SIGMA,MIN,MAX" : "");
        return 2;
    }
    if (o.metrics) { /* a server without /metrics (llama-server without --metrics) still gets loaded */
        lt_prom p;
        if (scrape(&o, &p, err, sizeof err) || lt_prom_peer(&p) == LT_PEER_NONE) {
            fprintf(stderr, "mlxcel loadtest: no server breakdown: %s\n",
                    err[0] ? err : "GET /metrics has neither mlxcel_ nor llamacpp: families");
            o.metrics = false;
        }
        lt_prom_free(&p);
    }

    const double t_start = mx_now();
    const double deadline = o.time_limit > 0 ? t_start + o.time_limit : 0;
    json_t *results = json_array(), *skipped = json_array();
    if (!o.json) {
        printf("prompt %s, output %s, seed %llu\n", o.prompt.spec, o.gen.spec, (unsigned long long)o.seed);
        printf("%6s %9s %10s %8s %10s %10s %9s %9s %8s %8s %8s\n", "conc", "requests", "out tok/s", "req/s", "ttft p50",
               "ttft p99", "itl p50", "itl p99", "prompt", "output", "failures");
    }
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
        json_t *doc = json_pack("{s:s, s:i, s:o, s:o, s:s, s:s, s:i, s:I, s:b, s:f, s:o, s:o}", "url", url,
                                "requests", o.requests, "prompt_tokens",
                                o.prompt.kind == LT_DIST_FIXED ? json_integer(o.prompt.lo) : json_null(),
                                "gen_tokens", o.gen.kind == LT_DIST_FIXED ? json_integer(o.gen.lo) : json_null(),
                                "prompt_dist", o.prompt.spec, "gen_dist", o.gen.spec, "vocab", o.vocab, "seed",
                                (json_int_t)o.seed, "stream", o.stream, "elapsed_s", mx_now() - t_start, "results",
                                results, "skipped_levels", skipped);
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
