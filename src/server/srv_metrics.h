/* Server metrics and their Prometheus text exposition (format 0.0.4): llama-server's
 * `llamacpp:` families plus `mlxcel_` families. One mutex guards all values; updates are a few
 * per request and one per engine step, so contention is not a concern. */
#ifndef MLXCEL_SERVER_SRV_METRICS_H
#define MLXCEL_SERVER_SRV_METRICS_H

#include <stddef.h>

#include "server/srv_engine.h"

typedef enum srv_metric_id {
    /* llama-server compatible */
    SM_PROMPT_TOKENS_TOTAL = 0,
    SM_PROMPT_SECONDS_TOTAL,
    SM_TOKENS_PREDICTED_TOTAL,
    SM_TOKENS_PREDICTED_SECONDS_TOTAL,
    SM_N_DECODE_TOTAL,
    SM_N_TOKENS_MAX,
    SM_N_BUSY_SLOTS_PER_DECODE,
    SM_PROMPT_TOKENS_SECONDS,
    SM_PREDICTED_TOKENS_SECONDS,
    SM_REQUESTS_PROCESSING,
    SM_REQUESTS_DEFERRED,
    SM_KV_CACHE_USAGE_RATIO,
    SM_KV_CACHE_TOKENS,
    /* mlxcel */
    SM_HTTP_RESPONSES_TOTAL,   /* label code */
    SM_REQUESTS_FINISHED_TOTAL, /* label reason */
    SM_REQUESTS_RUNNING,
    SM_QUEUE_DEPTH,
    SM_QUEUE_DEPTH_LIMIT,
    SM_BATCH_ROWS,             /* gauge: sequences in the last step */
    SM_BATCH_TOKENS,           /* gauge: tokens in the last step */
    SM_PREFILL_CHUNKS_TOTAL,
    SM_PREFILL_GRANTS_TOTAL,
    SM_KV_BLOCKS_CAPACITY,
    SM_KV_BLOCKS_USED,
    SM_KV_BLOCKS_FREE,
    SM_PREFIX_HITS_TOTAL,
    SM_PREFIX_MISSES_TOTAL,
    SM_PREFIX_REUSED_TOKENS_TOTAL,
    SM_DECODE_ROWS_TOTAL,      /* rows per step = (prompt tokens + decode rows) / steps */
    SM_PREEMPTIONS_TOTAL,
    SM_ENGINE_BUSY_SECONDS_TOTAL, /* engine-thread time of loop iterations that stepped */
    SM_TTFT_SECONDS,           /* histogram */
    SM_DECODE_TOKENS_PER_SECOND, /* histogram, one sample per finished request */
    SM_STEP_ROWS,              /* histogram of sequences per step */
    SM_HTTP_CONNECTIONS,       /* gauge, label state: idle | busy (srv_conn.c) */
    SM_HTTP_CONN_REFUSED_TOTAL, /* label reason: per_ip | limit */
    SM_HTTP_CONN_CLOSED_TOTAL, /* closed by the server, label reason: evicted | header_timeout */
    SM_COUNT
} srv_metric_id;

typedef struct srv_metrics srv_metrics;

srv_metrics *srv_metrics_new(void);
void srv_metrics_free(srv_metrics *m);

/* label: NULL for unlabeled metrics; else one of the metric's declared label values
 * (unknown values are counted under "other"). */
void srv_metrics_add(srv_metrics *m, srv_metric_id id, const char *label, double v);
void srv_metrics_set(srv_metrics *m, srv_metric_id id, const char *label, double v);
void srv_metrics_observe(srv_metrics *m, srv_metric_id id, double v);
double srv_metrics_get(srv_metrics *m, srv_metric_id id, const char *label);
/* Copies the engine's cumulative counters and gauges into the registry. */
void srv_metrics_from_engine(srv_metrics *m, const srv_engine_stats *st);

/* Prometheus text; *out malloc'd. Returns 0 or -1 (out of memory). */
int srv_metrics_render(srv_metrics *m, char **out, size_t *len);

#endif
