/* Metric registry as a fixed table: every family is declared once with its help, type, labels
 * and histogram buckets, so the exposition is complete (a family with no samples yet still
 * prints its HELP/TYPE and zero values) and cannot drift from the code that updates it. */
#include "server/srv_metrics.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ==== Declarations ==== */
typedef enum { MT_COUNTER, MT_GAUGE, MT_HISTOGRAM } metric_type;

#define MAX_LABELS 10
#define MAX_BUCKETS 16

typedef struct metric_def {
    const char *name;
    const char *help;
    metric_type type;
    const char *label;                    /* label name or NULL */
    const char *values[MAX_LABELS];       /* declared label values; the last may be "other" */
    double buckets[MAX_BUCKETS];          /* histogram upper bounds, ascending; 0-terminated */
} metric_def;

static const metric_def k_defs[SM_COUNT] = {
    [SM_PROMPT_TOKENS_TOTAL] = {"llamacpp:prompt_tokens_total", "Number of prompt tokens processed.", MT_COUNTER, NULL, {0}, {0}},
    [SM_PROMPT_SECONDS_TOTAL] = {"llamacpp:prompt_seconds_total", "Prompt process time.", MT_COUNTER, NULL, {0}, {0}},
    [SM_TOKENS_PREDICTED_TOTAL] = {"llamacpp:tokens_predicted_total", "Number of generation tokens processed.", MT_COUNTER, NULL, {0}, {0}},
    [SM_TOKENS_PREDICTED_SECONDS_TOTAL] = {"llamacpp:tokens_predicted_seconds_total", "Predict process time.", MT_COUNTER, NULL, {0}, {0}},
    [SM_N_DECODE_TOTAL] = {"llamacpp:n_decode_total", "Total number of engine steps (forward passes).", MT_COUNTER, NULL, {0}, {0}},
    [SM_N_TOKENS_MAX] = {"llamacpp:n_tokens_max", "Largest observed number of tokens in one step.", MT_GAUGE, NULL, {0}, {0}},
    [SM_N_BUSY_SLOTS_PER_DECODE] = {"llamacpp:n_busy_slots_per_decode", "Average number of busy slots per engine step.", MT_GAUGE, NULL, {0}, {0}},
    [SM_PROMPT_TOKENS_SECONDS] = {"llamacpp:prompt_tokens_seconds", "Average prompt throughput in tokens/s.", MT_GAUGE, NULL, {0}, {0}},
    [SM_PREDICTED_TOKENS_SECONDS] = {"llamacpp:predicted_tokens_seconds", "Average generation throughput in tokens/s.", MT_GAUGE, NULL, {0}, {0}},
    [SM_REQUESTS_PROCESSING] = {"llamacpp:requests_processing", "Number of requests processing.", MT_GAUGE, NULL, {0}, {0}},
    [SM_REQUESTS_DEFERRED] = {"llamacpp:requests_deferred", "Number of requests deferred.", MT_GAUGE, NULL, {0}, {0}},
    [SM_KV_CACHE_USAGE_RATIO] = {"llamacpp:kv_cache_usage_ratio", "KV-cache usage. 1 means 100 percent usage.", MT_GAUGE, NULL, {0}, {0}},
    [SM_KV_CACHE_TOKENS] = {"llamacpp:kv_cache_tokens", "KV-cache tokens (blocks in use times tokens per block).", MT_GAUGE, NULL, {0}, {0}},
    [SM_HTTP_RESPONSES_TOTAL] = {"mlxcel_http_responses_total", "HTTP responses by status code.", MT_COUNTER, "code",
                                 {"200", "400", "401", "403", "404", "405", "413", "501", "503", "other"}, {0}},
    [SM_REQUESTS_FINISHED_TOTAL] = {"mlxcel_requests_finished_total", "Generation requests finished, by finish reason.", MT_COUNTER, "reason",
                                    {"stop", "length", "cancelled", "error", "other"}, {0}},
    [SM_REQUESTS_RUNNING] = {"mlxcel_requests_running", "Generation requests holding a slot.", MT_GAUGE, NULL, {0}, {0}},
    [SM_QUEUE_DEPTH] = {"mlxcel_queue_depth", "Generation requests waiting for a slot.", MT_GAUGE, NULL, {0}, {0}},
    [SM_QUEUE_DEPTH_LIMIT] = {"mlxcel_queue_depth_limit", "Waiting requests allowed before 503 (0 = no limit).", MT_GAUGE, NULL, {0}, {0}},
    [SM_BATCH_ROWS] = {"mlxcel_batch_size", "Sequences in the last engine step.", MT_GAUGE, NULL, {0}, {0}},
    [SM_BATCH_TOKENS] = {"mlxcel_batch_tokens", "Tokens in the last engine step.", MT_GAUGE, NULL, {0}, {0}},
    [SM_PREFILL_CHUNKS_TOTAL] = {"mlxcel_prefill_chunks_total", "Prefill chunks computed.", MT_COUNTER, NULL, {0}, {0}},
    [SM_PREFILL_GRANTS_TOTAL] = {"mlxcel_prefill_grants_total", "Prefill chunks granted to waiting prompts during decode.", MT_COUNTER, NULL, {0}, {0}},
    [SM_KV_BLOCKS_CAPACITY] = {"mlxcel_kv_blocks_capacity", "KV blocks in the pool (total).", MT_GAUGE, NULL, {0}, {0}},
    [SM_KV_BLOCKS_USED] = {"mlxcel_kv_blocks_used", "KV blocks held by sequences (cached prefix blocks nobody holds are evictable: they count as free).", MT_GAUGE, NULL, {0}, {0}},
    [SM_KV_BLOCKS_FREE] = {"mlxcel_kv_blocks_free", "KV blocks free.", MT_GAUGE, NULL, {0}, {0}},
    [SM_PREFIX_HITS_TOTAL] = {"mlxcel_prefix_cache_hits_total", "Admitted sequences that reused cached prefix blocks.", MT_COUNTER, NULL, {0}, {0}},
    [SM_PREFIX_MISSES_TOTAL] = {"mlxcel_prefix_cache_misses_total", "Admitted sequences that reused no cached block.", MT_COUNTER, NULL, {0}, {0}},
    [SM_PREFIX_REUSED_TOKENS_TOTAL] = {"mlxcel_prefix_cache_reused_tokens_total", "Prompt tokens served from the prefix cache.", MT_COUNTER, NULL, {0}, {0}},
    [SM_DECODE_ROWS_TOTAL] = {"mlxcel_decode_rows_total", "Single-token decode rows computed (prompt rows are the prompt tokens processed).", MT_COUNTER, NULL, {0}, {0}},
    [SM_PREEMPTIONS_TOTAL] = {"mlxcel_preemptions_total", "Sequences preempted when the KV pool ran out (recomputed when readmitted).", MT_COUNTER, NULL, {0}, {0}},
    [SM_ENGINE_BUSY_SECONDS_TOTAL] = {"mlxcel_engine_busy_seconds_total", "Engine-thread time of loop iterations that ran a step: "
                                      "the forward passes (prompt + predict process time) plus scheduling, submissions and "
                                      "hang-up polling between them, when the device idles.", MT_COUNTER, NULL, {0}, {0}},
    [SM_TTFT_SECONDS] = {"mlxcel_time_to_first_token_seconds", "Time from request arrival to its first generated token.", MT_HISTOGRAM, NULL, {0},
                         {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 0}},
    [SM_DECODE_TOKENS_PER_SECOND] = {"mlxcel_decode_tokens_per_second", "Per-request decode rate after the first token.", MT_HISTOGRAM, NULL, {0},
                                     {1, 5, 10, 25, 50, 100, 200, 400, 800, 1600, 0}},
    [SM_STEP_ROWS] = {"mlxcel_step_batch_size", "Sequences per engine step.", MT_HISTOGRAM, NULL, {0},
                      {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 0}},
    [SM_HTTP_CONNECTIONS] = {"mlxcel_http_connections", "Open HTTP connections: busy (a request being read, run or answered) "
                             "or idle (waiting for a request header).", MT_GAUGE, "state", {"idle", "busy"}, {0}},
    [SM_HTTP_CONN_REFUSED_TOTAL] = {"mlxcel_http_connections_refused_total", "Connections refused at accept: every connection of "
                                    "the client address (--max-connections-per-ip) or of the server (--threads-http) was busy.",
                                    MT_COUNTER, "reason", {"per_ip", "limit"}, {0}},
    [SM_HTTP_CONN_CLOSED_TOTAL] = {"mlxcel_http_connections_closed_total", "Idle connections closed by the server: to admit a new "
                                   "one at a limit (evicted), or no complete request header within --header-timeout.",
                                   MT_COUNTER, "reason", {"evicted", "header_timeout"}, {0}},
};

typedef struct metric_val {
    double v[MAX_LABELS];            /* per label value (index 0 when unlabeled) */
    uint64_t bucket[MAX_BUCKETS];    /* histogram: non-cumulative counts per bucket */
    uint64_t count;
    double sum;
} metric_val;

struct srv_metrics {
    pthread_mutex_t mu;
    metric_val val[SM_COUNT];
};

srv_metrics *srv_metrics_new(void) {
    srv_metrics *m = calloc(1, sizeof *m);
    if (m) pthread_mutex_init(&m->mu, NULL);
    return m;
}

void srv_metrics_free(srv_metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

/* ==== Updates ==== */
static int label_index(const metric_def *d, const char *label) {
    if (!d->label || !label) return 0;
    int last = 0;
    for (int i = 0; i < MAX_LABELS && d->values[i]; i++) {
        if (!strcmp(d->values[i], label)) return i;
        last = i;
    }
    return last; /* "other" is declared last */
}

void srv_metrics_add(srv_metrics *m, srv_metric_id id, const char *label, double v) {
    pthread_mutex_lock(&m->mu);
    m->val[id].v[label_index(&k_defs[id], label)] += v;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_set(srv_metrics *m, srv_metric_id id, const char *label, double v) {
    pthread_mutex_lock(&m->mu);
    m->val[id].v[label_index(&k_defs[id], label)] = v;
    pthread_mutex_unlock(&m->mu);
}

double srv_metrics_get(srv_metrics *m, srv_metric_id id, const char *label) {
    pthread_mutex_lock(&m->mu);
    double v = m->val[id].v[label_index(&k_defs[id], label)];
    pthread_mutex_unlock(&m->mu);
    return v;
}

void srv_metrics_observe(srv_metrics *m, srv_metric_id id, double v) {
    const metric_def *d = &k_defs[id];
    if (!isfinite(v)) return;
    pthread_mutex_lock(&m->mu);
    metric_val *mv = &m->val[id];
    int b = 0;
    while (b < MAX_BUCKETS && d->buckets[b] != 0 && v > d->buckets[b]) b++;
    if (b < MAX_BUCKETS && d->buckets[b] != 0) mv->bucket[b]++;
    mv->count++;
    mv->sum += v;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_from_engine(srv_metrics *m, const srv_engine_stats *st) {
    pthread_mutex_lock(&m->mu);
    metric_val *v = m->val;
    v[SM_PROMPT_TOKENS_TOTAL].v[0] = (double)st->prompt_tokens_total;
    v[SM_PROMPT_SECONDS_TOTAL].v[0] = st->prefill_seconds_total;
    v[SM_TOKENS_PREDICTED_TOTAL].v[0] = (double)st->decode_tokens_total;
    v[SM_TOKENS_PREDICTED_SECONDS_TOTAL].v[0] = st->decode_seconds_total;
    if (st->steps_total > (uint64_t)v[SM_N_DECODE_TOTAL].v[0] && st->last_batch_rows > 0) {
        /* Running mean of busy slots over steps, as llama-server reports it. */
        double n = (double)st->steps_total;
        double prev = v[SM_N_BUSY_SLOTS_PER_DECODE].v[0];
        v[SM_N_BUSY_SLOTS_PER_DECODE].v[0] = prev + ((double)st->last_batch_rows - prev) / n;
    }
    v[SM_N_DECODE_TOTAL].v[0] = (double)st->steps_total;
    if (st->last_batch_tokens > v[SM_N_TOKENS_MAX].v[0]) v[SM_N_TOKENS_MAX].v[0] = st->last_batch_tokens;
    v[SM_PROMPT_TOKENS_SECONDS].v[0] =
        st->prefill_seconds_total > 0 ? (double)st->prompt_tokens_total / st->prefill_seconds_total : 0;
    v[SM_PREDICTED_TOKENS_SECONDS].v[0] =
        st->decode_seconds_total > 0 ? (double)st->decode_tokens_total / st->decode_seconds_total : 0;
    v[SM_KV_CACHE_USAGE_RATIO].v[0] =
        st->kv_blocks_total > 0 ? (double)st->kv_blocks_used / (double)st->kv_blocks_total : 0;
    v[SM_KV_CACHE_TOKENS].v[0] = (double)st->kv_blocks_used * st->kv_block_tokens;
    v[SM_BATCH_ROWS].v[0] = st->last_batch_rows;
    v[SM_BATCH_TOKENS].v[0] = st->last_batch_tokens;
    v[SM_PREFILL_CHUNKS_TOTAL].v[0] = (double)st->prefill_chunks_total;
    v[SM_PREFILL_GRANTS_TOTAL].v[0] = (double)st->prefill_grants_total;
    v[SM_KV_BLOCKS_CAPACITY].v[0] = (double)st->kv_blocks_total;
    v[SM_KV_BLOCKS_USED].v[0] = (double)st->kv_blocks_used;
    v[SM_KV_BLOCKS_FREE].v[0] = (double)(st->kv_blocks_total - st->kv_blocks_used);
    v[SM_PREFIX_HITS_TOTAL].v[0] = (double)st->prefix_hits_total;
    v[SM_PREFIX_MISSES_TOTAL].v[0] = (double)st->prefix_misses_total;
    v[SM_PREFIX_REUSED_TOKENS_TOTAL].v[0] = (double)st->prefix_reused_tokens_total;
    v[SM_DECODE_ROWS_TOTAL].v[0] = (double)st->decode_rows_total;
    v[SM_PREEMPTIONS_TOTAL].v[0] = (double)st->preemptions_total;
    pthread_mutex_unlock(&m->mu);
}

/* ==== Exposition ==== */
typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) { b->oom = 1; return; }
        if (b->len + (size_t)n < b->cap) { b->len += (size_t)n; return; }
        size_t nc = (b->cap + (size_t)n + 1) * 2;
        char *np = realloc(b->p, nc);
        if (!np) { b->oom = 1; return; }
        b->p = np;
        b->cap = nc;
    }
}

/* Prometheus floats: the shortest of %.15g / %.17g that reads back exactly (so bucket bounds
 * print as 0.025, not 0.025000000000000001). */
static void fmt_num(char *out, size_t n, double v) {
    if (v == floor(v) && fabs(v) < 1e15) { snprintf(out, n, "%.0f", v); return; }
    snprintf(out, n, "%.15g", v);
    if (strtod(out, NULL) != v) snprintf(out, n, "%.17g", v);
}

int srv_metrics_render(srv_metrics *m, char **out, size_t *len) {
    sbuf b = {malloc(8192), 0, 8192, 0};
    if (!b.p) return -1;
    b.p[0] = 0;
    char num[64];
    pthread_mutex_lock(&m->mu);
    for (int id = 0; id < SM_COUNT; id++) {
        const metric_def *d = &k_defs[id];
        const metric_val *v = &m->val[id];
        static const char *types[] = {"counter", "gauge", "histogram"};
        sb_printf(&b, "# HELP %s %s\n# TYPE %s %s\n", d->name, d->help, d->name, types[d->type]);
        if (d->type == MT_HISTOGRAM) {
            uint64_t cum = 0;
            for (int k = 0; k < MAX_BUCKETS && d->buckets[k] != 0; k++) {
                cum += v->bucket[k];
                fmt_num(num, sizeof num, d->buckets[k]);
                sb_printf(&b, "%s_bucket{le=\"%s\"} %llu\n", d->name, num, (unsigned long long)cum);
            }
            sb_printf(&b, "%s_bucket{le=\"+Inf\"} %llu\n", d->name, (unsigned long long)v->count);
            fmt_num(num, sizeof num, v->sum);
            sb_printf(&b, "%s_sum %s\n%s_count %llu\n", d->name, num, d->name, (unsigned long long)v->count);
        } else if (d->label) {
            for (int k = 0; k < MAX_LABELS && d->values[k]; k++) {
                fmt_num(num, sizeof num, v->v[k]);
                sb_printf(&b, "%s{%s=\"%s\"} %s\n", d->name, d->label, d->values[k], num);
            }
        } else {
            fmt_num(num, sizeof num, v->v[0]);
            sb_printf(&b, "%s %s\n", d->name, num);
        }
    }
    pthread_mutex_unlock(&m->mu);
    if (b.oom) { free(b.p); return -1; }
    *out = b.p;
    *len = b.len;
    return 0;
}
