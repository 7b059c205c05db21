/* mlxcel loadtest, shared between its files: loadtest.c (CLI, levels, report),
 * loadtest_http.c (HTTP/SSE client, one request, failure causes), loadtest_dist.c (length
 * distributions) and loadtest_metrics.c (the server's /metrics: scrape, parse, breakdown).
 * Not a public API: the unit tests (tests/unit/test_loadtest.c) reach these functions too. */
#ifndef MLXCEL_CLI_LOADTEST_H
#define MLXCEL_CLI_LOADTEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ==== Length distributions (loadtest_dist.c) ==== */
typedef enum { LT_DIST_FIXED, LT_DIST_UNIFORM, LT_DIST_LOGNORMAL } lt_dist_kind;

typedef struct lt_dist {
    lt_dist_kind kind;
    double mean, sigma;    /* lognormal: the mean of the unclamped law (tokens) and the sigma
                              of its logarithm */
    int lo, hi;            /* every draw lies in [lo, hi]: fixed lo = hi = N; uniform A..B;
                              lognormal: the clamps */
    char spec[128];        /* canonical text, as the report prints it */
} lt_dist;

/* Parses `N`, `fixed:N`, `uniform:A,B`, `lognormal:MEAN,SIGMA[,MIN,MAX]` or the preset
 * `sharegpt` (its prompt or output law, by `gen`). Returns 0, or -1 with err. */
int lt_dist_parse(const char *s, bool gen, lt_dist *d, char *err, size_t errn);
/* The length of request `idx` (its index over the whole run): a pure function of (seed, idx,
 * gen, d), so every server compared under the same --seed gets the same lengths. */
int lt_dist_draw(const lt_dist *d, uint64_t seed, uint64_t idx, bool gen);
/* The SplitMix64 step every PRNG of loadtest uses. */
uint64_t lt_splitmix64(uint64_t *x);

/* ==== Options ==== */
#define LT_MAX_LEVELS 16

typedef struct lt_opts {
    char host[256], port[16];
    int levels[LT_MAX_LEVELS], n_levels;
    int requests;          /* measured requests per level; 0 = 2 x concurrency, at least 8 */
    int warmup;            /* warm-up requests per level; -1 = the level's concurrency */
    lt_dist prompt, gen;   /* prompt and output lengths of each request */
    int timeout_s;         /* a read or write that waits this long fails the request */
    int vocab;             /* prompt ids in [0, vocab); 0 = meta.n_vocab of GET /v1/models */
    double time_limit;     /* seconds from the start; 0 = none */
    double metrics_interval; /* seconds between /metrics samples inside the window; 0 = none */
    bool metrics;          /* scrape /metrics around the window (default on; --no-metrics) */
    uint64_t seed;
    bool stream, json;
    char api_key[256];
} lt_opts;

/* ==== One request (loadtest_http.c) ==== */
typedef enum {
    LT_OK = 0,
    LT_FAIL_CONNECT,       /* no connection (refused, unreachable, name) */
    LT_FAIL_HTTP,          /* a status other than 200 */
    LT_FAIL_ERROR_EVENT,   /* the stream carried an error (an `error` event or {"error": ...}) */
    LT_FAIL_NO_DONE,       /* the stream ended in good order without `data: [DONE]` */
    LT_FAIL_RESET,         /* the connection broke: reset, or closed inside a chunk/body */
    LT_FAIL_TIMEOUT,       /* no byte for --timeout seconds */
    LT_FAIL_SHORT,         /* fewer tokens than max_tokens (the drawn length) */
    LT_FAIL_BAD_RESPONSE,  /* a 200 answer that is not a completion (JSON, no usage...) */
    LT_FAIL_KINDS
} lt_fail_kind;

const char *lt_fail_name(lt_fail_kind k);

typedef struct lt_result {
    lt_fail_kind fail;
    char err[512];
    int http_status;
    double t_issue, t_done;
    double ttft;           /* seconds */
    int want_prompt, want_gen; /* the drawn lengths */
    int tokens;            /* usage.completion_tokens, else the token events counted */
    int prompt_tokens;     /* usage.prompt_tokens; -1 when the server sent none */
    double *ev_t;          /* [n_ev] arrival time of each token event */
    int n_ev, cap_ev;
} lt_result;

/* POST /v1/completions with `want_prompt` random ids (from the seed and `global_idx`) and
 * max_tokens `want_gen`; fills r (r->want_* set by the caller). */
void lt_request_run(const lt_opts *o, uint64_t global_idx, lt_result *r);

/* A plain exchange (GET /metrics, GET /v1/models): status and body (malloc'd, NUL-ended).
 * Returns 0, or -1 with err when no answer came. */
int lt_http_get(const lt_opts *o, const char *path, int *status, char **body, char *err, size_t errn);

/* ==== SSE (loadtest_http.c; exposed for the unit tests) ==== */
/* One parsed event: `event:` name (empty: "message") and the `data:` lines joined by \n. */
typedef struct lt_sse_event {
    char name[32];
    char *data; size_t data_len, data_cap;
    bool has_data;
} lt_sse_event;

typedef struct lt_sse {
    char *buf; size_t len, cap;  /* bytes not yet split into lines */
    lt_sse_event cur;
    bool last_cr;                /* the previous chunk ended in \r (a \n may follow) */
} lt_sse;

/* Feeds body bytes; calls on_event for each complete event (a blank line ends it). Lines end
 * in \n, \r\n or \r; `:` lines are comments; "data:" drops one leading space (the SSE spec). */
typedef void (*lt_sse_cb)(const lt_sse_event *ev, void *user);
void lt_sse_feed(lt_sse *s, const char *p, size_t n, lt_sse_cb on_event, void *user);
void lt_sse_free(lt_sse *s);

/* ==== /metrics (loadtest_metrics.c) ==== */
typedef enum { LT_PEER_NONE, LT_PEER_MLXCEL, LT_PEER_LLAMACPP } lt_peer;

typedef struct lt_prom_sample { char *key; double v; } lt_prom_sample; /* key: name{labels} */

typedef struct lt_prom {
    lt_prom_sample *s;
    int n, cap;
    double t;              /* when it was read (mx_now) */
    bool ok;
} lt_prom;

/* Parses Prometheus text exposition (0.0.4): comments skipped, the key is the name with its
 * label set as written, the value a float ("+Inf", "NaN" too); a timestamp after it is
 * ignored. Returns the number of samples, or -1 on a malformed line (err says which). */
int lt_prom_parse(const char *text, lt_prom *out, char *err, size_t errn);
/* Value of `key`, or NAN when absent. */
double lt_prom_get(const lt_prom *p, const char *key);
void lt_prom_free(lt_prom *p);
lt_peer lt_prom_peer(const lt_prom *p);

/* Gauges sampled inside the window. */
typedef struct lt_gauge_acc { double sum, max; int n; } lt_gauge_acc;

typedef struct lt_samples {
    lt_gauge_acc queued, running, kv_used;
} lt_samples;

/* The server-side breakdown between two scrapes (a = the window's start, b = its end), with the
 * samples taken between them and the scrape after the level (`end`, gauges only). */
json_t *lt_breakdown(const lt_prom *a, const lt_prom *b, const lt_samples *smp, const lt_prom *end,
                     double end_wait_s);
/* Whether the gauges of `p` say the server holds nothing: no KV block used, no request running,
 * none queued (the figures the server exposes). */
bool lt_prom_idle(const lt_prom *p);
void lt_samples_add(lt_samples *smp, const lt_prom *p);
/* One line of text for the report (no trailing newline), from lt_breakdown's object. */
void lt_breakdown_print(const json_t *b);

#endif
