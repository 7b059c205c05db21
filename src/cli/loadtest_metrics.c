/* mlxcel loadtest: the server-side breakdown from GET /metrics.
 *
 * /metrics is read when the steady-state window opens and when it closes, sampled between
 * (gauges), and read once more after the level (every request answered) to check that the
 * server holds nothing any more. Two dialects:
 *   mlxcel serve   its own families (src/server/srv_metrics.c): forward time per step from
 *                  llamacpp:prompt_seconds_total + llamacpp:tokens_predicted_seconds_total over
 *                  llamacpp:n_decode_total (a mixed step's time is split between the two by
 *                  its rows, so the prefill time share is an attribution), host time between
 *                  steps from mlxcel_engine_busy_seconds_total, rows from
 *                  llamacpp:prompt_tokens_total + mlxcel_decode_rows_total, sequences per step
 *                  from the mlxcel_step_batch_size histogram, prefix-cache hits, preemptions,
 *                  queue depth, KV blocks.
 *   llama-server   `llamacpp:` families only: n_decode_total counts llama_decode() calls,
 *                  prompt_seconds_total is wall time with prompt batches in flight (its share
 *                  is of the window), tokens_predicted_seconds_total sums each request's own
 *                  generation time (overlapping: not used), n_busy_slots_per_decode is a mean
 *                  since start (times n_decode_total it gives the busy-slot sum, so a window's
 *                  mean follows), requests_deferred is its queue; it exposes no KV occupancy.
 *                  It prints values with 6 significant digits, so large counters are rounded.
 * A figure the server does not expose is null, never a guess. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/loadtest.h"

/* ==== Prometheus text ==== */
void lt_prom_free(lt_prom *p) {
    for (int i = 0; i < p->n; i++) free(p->s[i].key);
    free(p->s);
    memset(p, 0, sizeof *p);
}

static void prom_add(lt_prom *p, const char *k, size_t kl, double v) {
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 64;
        p->s = realloc(p->s, (size_t)p->cap * sizeof *p->s);
    }
    p->s[p->n].key = strndup(k, kl);
    p->s[p->n].v = v;
    p->n++;
}

int lt_prom_parse(const char *text, lt_prom *out, char *err, size_t errn) {
    memset(out, 0, sizeof *out);
    int line_no = 0;
    for (const char *l = text; l && *l;) {
        const char *eol = strchr(l, '\n');
        const size_t ll = eol ? (size_t)(eol - l) : strlen(l);
        line_no++;
        size_t i = 0;
        while (i < ll && (l[i] == ' ' || l[i] == '\t')) i++;
        if (i == ll || l[i] == '#' || (ll - i == 1 && l[i] == '\r')) goto next;
        const size_t k0 = i;
        while (i < ll && l[i] != '{' && l[i] != ' ' && l[i] != '\t') i++;
        if (i < ll && l[i] == '{') { /* labels: quoted values may hold '}' and escapes */
            bool q = false;
            for (i++; i < ll && (q || l[i] != '}'); i++) {
                if (q && l[i] == '\\') i++;
                else if (l[i] == '"') q = !q;
            }
            if (i >= ll) goto bad;
            i++;
        }
        const size_t k1 = i;
        if (k1 == k0) goto bad;
        while (i < ll && (l[i] == ' ' || l[i] == '\t')) i++;
        char num[64];
        size_t nl = 0;
        while (i < ll && l[i] != ' ' && l[i] != '\t' && l[i] != '\r' && nl < sizeof num - 1) num[nl++] = l[i++];
        num[nl] = 0;
        char *e;
        const double v = strtod(num, &e);
        if (nl == 0 || *e) goto bad;
        prom_add(out, l + k0, k1 - k0, v);
    next:
        l = eol ? eol + 1 : NULL;
    }
    out->ok = true;
    return out->n;
bad:
    snprintf(err, errn, "/metrics line %d is not 'name{labels} value'", line_no);
    lt_prom_free(out);
    return -1;
}

double lt_prom_get(const lt_prom *p, const char *key) {
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->s[i].key, key)) return p->s[i].v;
    return NAN;
}

lt_peer lt_prom_peer(const lt_prom *p) {
    bool llama = false;
    for (int i = 0; i < p->n; i++) {
        if (!strncmp(p->s[i].key, "mlxcel_", 7)) return LT_PEER_MLXCEL;
        if (!strncmp(p->s[i].key, "llamacpp:", 9)) llama = true;
    }
    return llama ? LT_PEER_LLAMACPP : LT_PEER_NONE;
}

/* ==== Gauges: queue, running, KV ==== */
static void gauges(const lt_prom *p, double *queued, double *running, double *kv_used) {
    if (lt_prom_peer(p) == LT_PEER_MLXCEL) {
        *queued = lt_prom_get(p, "mlxcel_queue_depth");
        *running = lt_prom_get(p, "mlxcel_requests_running");
        *kv_used = lt_prom_get(p, "mlxcel_kv_blocks_used");
    } else {
        *queued = lt_prom_get(p, "llamacpp:requests_deferred");
        *running = lt_prom_get(p, "llamacpp:requests_processing");
        *kv_used = NAN; /* not exposed */
    }
}

bool lt_prom_idle(const lt_prom *p) {
    double q, r, kv;
    gauges(p, &q, &r, &kv);
    return q == 0 && r == 0 && (isnan(kv) || kv == 0);
}

static void acc_add(lt_gauge_acc *a, double v) {
    if (isnan(v)) return;
    a->sum += v;
    if (a->n == 0 || v > a->max) a->max = v;
    a->n++;
}

void lt_samples_add(lt_samples *smp, const lt_prom *p) {
    double q, r, kv;
    gauges(p, &q, &r, &kv);
    acc_add(&smp->queued, q);
    acc_add(&smp->running, r);
    acc_add(&smp->kv_used, kv);
}

/* ==== Breakdown ==== */
static json_t *num(double v) { return isfinite(v) ? json_real(v) : json_null(); }
static double ratio(double a, double b) { return b > 0 && isfinite(a) ? a / b : NAN; }
static double dget(const lt_prom *a, const lt_prom *b, const char *k) { return lt_prom_get(b, k) - lt_prom_get(a, k); }

static json_t *acc_json(const lt_gauge_acc *g) {
    return g->n ? json_pack("{s:f, s:f, s:i}", "mean", g->sum / g->n, "max", g->max, "samples", g->n) : json_null();
}

json_t *lt_breakdown(const lt_prom *a, const lt_prom *b, const lt_samples *smp, const lt_prom *end, double end_wait_s) {
    const lt_peer peer = lt_prom_peer(b);
    const bool mlx = peer == LT_PEER_MLXCEL;
    const double win = b->t - a->t;
    const double steps = dget(a, b, "llamacpp:n_decode_total");
    const double p_s = dget(a, b, "llamacpp:prompt_seconds_total");
    const double prefill = dget(a, b, "llamacpp:prompt_tokens_total");
    const double gen = dget(a, b, "llamacpp:tokens_predicted_total");
    double fwd = NAN, busy = NAN, decode_rows, seqs;
    if (mlx) {
        fwd = p_s + dget(a, b, "llamacpp:tokens_predicted_seconds_total");
        busy = dget(a, b, "mlxcel_engine_busy_seconds_total");
        decode_rows = dget(a, b, "mlxcel_decode_rows_total");
        seqs = ratio(dget(a, b, "mlxcel_step_batch_size_sum"), dget(a, b, "mlxcel_step_batch_size_count"));
    } else {
        decode_rows = gen; /* each generated token after the first is one decode row: close enough */
        const double ga = lt_prom_get(a, "llamacpp:n_busy_slots_per_decode") * lt_prom_get(a, "llamacpp:n_decode_total");
        const double gb = lt_prom_get(b, "llamacpp:n_busy_slots_per_decode") * lt_prom_get(b, "llamacpp:n_decode_total");
        seqs = ratio(gb - ga, steps);
    }
    const double rows = prefill + decode_rows;
    json_t *o = json_object();
    json_object_set_new(o, "peer", json_string(mlx ? "mlxcel" : peer == LT_PEER_LLAMACPP ? "llama-server" : "unknown"));
    json_object_set_new(o, "window_s", json_real(win));
    json_object_set_new(o, "steps", num(steps));
    json_object_set_new(o, "wall_ms_per_step", num(1e3 * ratio(win, steps)));
    json_object_set_new(o, "forward_ms_per_step", num(1e3 * ratio(fwd, steps)));
    json_object_set_new(o, "host_ms_per_step", num(1e3 * ratio(busy - fwd, steps)));
    json_object_set_new(o, "engine_busy_share", num(ratio(busy, win)));
    json_object_set_new(o, "rows_per_step", num(ratio(rows, steps)));
    json_object_set_new(o, "seqs_per_step", num(seqs));
    json_object_set_new(o, "prefill_rows", num(prefill));
    json_object_set_new(o, "decode_rows", num(decode_rows));
    json_object_set_new(o, "prefill_row_share", num(ratio(prefill, rows)));
    /* mlxcel: of the forward time (attributed by rows); llama-server: of the window */
    json_object_set_new(o, "prefill_time_share", num(mlx ? ratio(p_s, fwd) : ratio(p_s, win)));
    json_object_set_new(o, "generated_tokens", num(gen));
    json_object_set_new(o, "prefill_chunks", num(mlx ? dget(a, b, "mlxcel_prefill_chunks_total") : NAN));
    json_object_set_new(o, "prefill_grants", num(mlx ? dget(a, b, "mlxcel_prefill_grants_total") : NAN));
    json_object_set_new(o, "prefix_cache_hits", num(mlx ? dget(a, b, "mlxcel_prefix_cache_hits_total") : NAN));
    json_object_set_new(o, "prefix_cached_tokens", num(dget(a, b, mlx ? "mlxcel_prefix_cache_reused_tokens_total"
                                                                      : "llamacpp:prompt_tokens_cached_total")));
    json_object_set_new(o, "preemptions", num(mlx ? dget(a, b, "mlxcel_preemptions_total") : NAN));
    json_object_set_new(o, "queue_depth", acc_json(&smp->queued));
    json_object_set_new(o, "running", acc_json(&smp->running));
    json_t *kv = acc_json(&smp->kv_used);
    if (json_is_object(kv)) json_object_set_new(kv, "capacity", num(lt_prom_get(b, "mlxcel_kv_blocks_capacity")));
    json_object_set_new(o, "kv_blocks_used", kv);
    if (end && end->ok) {
        double q, r, u;
        gauges(end, &q, &r, &u);
        json_object_set_new(o, "after", json_pack("{s:o, s:o, s:o, s:b, s:f}", "kv_blocks_used", num(u), "running",
                                                  num(r), "queued", num(q), "idle", lt_prom_idle(end), "wait_s",
                                                  end_wait_s));
    }
    return o;
}

/* ==== Text ==== */
static double jnum(const json_t *o, const char *k) {
    const json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* "%.Nf" or "-" for a figure the server does not give. */
static const char *fmt(char *buf, size_t n, double v, int prec) {
    if (isnan(v)) snprintf(buf, n, "-");
    else snprintf(buf, n, "%.*f", prec, v);
    return buf;
}

void lt_breakdown_print(const json_t *b) {
    char f[16][24];
    const char *peer = json_string_value(json_object_get(b, "peer"));
    const json_t *q = json_object_get(b, "queue_depth"), *kv = json_object_get(b, "kv_blocks_used");
    printf("       server (%s): %s steps, ms/step %s wall, %s forward, %s host; rows/step %s (%s seqs); "
           "prefill %s%% of rows, %s%% of %s; prefix-cache hits %s (%s tokens); preemptions %s; "
           "queue mean %s max %s; KV blocks max %s of %s\n",
           peer ? peer : "?", fmt(f[0], 24, jnum(b, "steps"), 0), fmt(f[1], 24, jnum(b, "wall_ms_per_step"), 2),
           fmt(f[2], 24, jnum(b, "forward_ms_per_step"), 2), fmt(f[3], 24, jnum(b, "host_ms_per_step"), 2),
           fmt(f[4], 24, jnum(b, "rows_per_step"), 1), fmt(f[5], 24, jnum(b, "seqs_per_step"), 1),
           fmt(f[6], 24, 100 * jnum(b, "prefill_row_share"), 1), fmt(f[7], 24, 100 * jnum(b, "prefill_time_share"), 1),
           peer && !strcmp(peer, "mlxcel") ? "forward time" : "the window", fmt(f[8], 24, jnum(b, "prefix_cache_hits"), 0),
           fmt(f[9], 24, jnum(b, "prefix_cached_tokens"), 0), fmt(f[10], 24, jnum(b, "preemptions"), 0),
           fmt(f[11], 24, jnum(q, "mean"), 1), fmt(f[12], 24, jnum(q, "max"), 0), fmt(f[13], 24, jnum(kv, "max"), 0),
           fmt(f[14], 24, jnum(kv, "capacity"), 0));
    const json_t *af = json_object_get(b, "after");
    if (af)
        printf("       after the level: KV blocks used %s, running %s, queued %s: %s\n",
               fmt(f[0], 24, jnum(af, "kv_blocks_used"), 0), fmt(f[1], 24, jnum(af, "running"), 0),
               fmt(f[2], 24, jnum(af, "queued"), 0), json_is_true(json_object_get(af, "idle")) ? "empty" : "NOT EMPTY");
}
