#include "tune/tune_policy.h"

#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_qknobs.h" /* plain C: the knobs' value lists, in every build */
#include "base/env.h"
#include "base/log.h"
#include "tune/tune_runner.h"
#include "tune/tune_store.h"

const char *tune_source_name(tune_source s) {
    switch (s) {
    case TUNE_SRC_CACHE: return "cache";
    case TUNE_SRC_TUNED: return "tuned";
    case TUNE_SRC_OVERRIDE: return "override";
    default: return "default";
    }
}

/* ==== Memo: one entry per key string ==== */
#define MEMO_CAP 512
typedef struct memo_entry {
    char key[640];
    int value;         /* valid when found */
    int found;         /* 1: a record applies; 0: none (missing, stale, corrupt, or tuning failed) */
    tune_source src;
} memo_entry;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static memo_entry g_memo[MEMO_CAP];
static int g_memo_n;
static tune_device g_host; /* this host's CPU, identified on first need */
static int g_host_ok;
static int g_logged_override[TUNE_OP_COUNT];

void tune_policy_reset(void) {
    pthread_mutex_lock(&g_mu);
    g_memo_n = 0;
    g_host_ok = 0;
    memset(g_logged_override, 0, sizeof g_logged_override);
    pthread_mutex_unlock(&g_mu);
}

static memo_entry *memo_find(const char *key) {
    for (int i = 0; i < g_memo_n; i++)
        if (!strcmp(g_memo[i].key, key)) return &g_memo[i];
    return NULL;
}

static memo_entry *memo_add(const char *key) {
    /* Full memo: recycle the oldest slot (a long-lived server with many shapes). */
    if (g_memo_n == MEMO_CAP) {
        memmove(g_memo, g_memo + 1, (MEMO_CAP - 1) * sizeof g_memo[0]);
        g_memo_n--;
    }
    memo_entry *e = &g_memo[g_memo_n++];
    memset(e, 0, sizeof *e);
    snprintf(e->key, sizeof e->key, "%s", key);
    return e;
}

tune_profile_opts tune_policy_online_opts(void) {
    tune_profile_opts o = tune_profile_defaults();
    o.warmup = 2;
    o.warmup_ms = 5.0;
    o.min_reps = 5;
    o.max_reps = 15;
    o.sample_ms = 30.0;
    return o;
}

void tune_policy_describe(char *buf, size_t n) {
    const mx_env_t *env = mx_env();
    char dir[1100];
    tune_store_dir(dir, sizeof dir);
    switch (env->autotune) {
    case MX_AUTOTUNE_CACHE: snprintf(buf, n, "autotune: cache (stored winners from %s)", dir); break;
    case MX_AUTOTUNE_ON:
        snprintf(buf, n, "autotune: 1 (stored winners from %s, unseen shapes tuned on first use)",
                 dir);
        break;
    default: snprintf(buf, n, "autotune: off (built-in defaults)"); break;
    }
}

/* ==== Lookup ====
 * Called with g_mu held. Returns 1 and *value when a cached (or freshly tuned) winner applies. */
static int lookup_cached(const tune_point *p, const tune_device *dev, const tune_geom *g,
                         int *value, tune_source *src) {
    tune_key k;
    tune_point_key(p, dev, &k);
    char ks[640];
    tune_key_string(&k, ks, sizeof ks);
    memo_entry *e = memo_find(ks);
    if (e) {
        *value = e->value;
        *src = e->src;
        return e->found;
    }
    e = memo_add(ks);
    char dir[1100];
    tune_store_dir(dir, sizeof dir);
    tune_record r;
    mx_error err;
    mx_error_clear(&err);
    const int rc = tune_store_read(dir, &k, &r, &err);
    if (rc == TUNE_READ_OK) {
        /* A record that kept the default says "the built-in policy": 0, so that a runtime
         * shape of the bucket gets the policy's value for itself, not the tuned point's. */
        e->found = 1, e->value = r.value == r.default_value ? 0 : r.value, e->src = TUNE_SRC_CACHE;
    } else if (rc == TUNE_READ_IGNORED || rc < 0) {
        LOG_WARN("autotune: %s; ignored", err.msg);
    }
    /* MLXCEL_AUTOTUNE=1: tune an unseen paged-decode-splits shape now, once per process. */
    if (!e->found && mx_env()->autotune == MX_AUTOTUNE_ON && p->op == TUNE_OP_PAGED_DECODE_SPLITS) {
        if (!tune_can_profile(dev->kind)) {
            LOG_INFO("autotune: %s %s unseen; tuning on first use is not available on %s in this "
                     "build, using the default", k.op, k.bucket, tune_device_kind_name(dev->kind));
        } else {
            LOG_INFO("autotune: tuning %s %s on first use", k.op, k.bucket);
            tune_profile_opts o = tune_policy_online_opts();
            tune_profile_result res;
            if (tune_run_point(p, dev, g, &o, &res, &r, &err) ||
                tune_store_write(dir, &r, &err)) {
                LOG_WARN("autotune: tuning on first use failed: %s; using the default", err.msg);
            } else {
                e->found = 1, e->src = TUNE_SRC_TUNED;
                e->value = r.value == r.default_value ? 0 : r.value;
            }
        }
    }
    if (e->found && e->value > 0)
        LOG_INFO("autotune: %s = %d for %s on %s (%s)", k.op, e->value, k.bucket, k.device,
                 tune_source_name(e->src));
    else if (e->found)
        LOG_INFO("autotune: %s = built-in default for %s on %s (%s: tuning kept the default)",
                 k.op, k.bucket, k.device, tune_source_name(e->src));
    *value = e->value;
    *src = e->src;
    return e->found;
}

/* Shared precedence: override > cache > default. The point is built only when the cache
 * is consulted, so the off mode does no work beyond reading the parsed environment. */
static int resolve(tune_op op, int override, const char *override_name, int def,
                   const tune_device *dev, int batch, int context,
                   const tune_geom *g, tune_source *src_out) {
    tune_source src = TUNE_SRC_DEFAULT;
    int value = def;
    if (override > 0) {
        src = TUNE_SRC_OVERRIDE;
        value = override;
        pthread_mutex_lock(&g_mu);
        if (!g_logged_override[op]) {
            g_logged_override[op] = 1;
            LOG_INFO("autotune: %s = %d from %s (overrides cached and default values)",
                     tune_op_name(op), override, override_name);
        }
        pthread_mutex_unlock(&g_mu);
    } else if (mx_env()->autotune != MX_AUTOTUNE_OFF) {
        pthread_mutex_lock(&g_mu);
        if (!dev) {
            if (!g_host_ok) tune_device_cpu(&g_host), g_host_ok = 1;
            dev = &g_host;
        }
        tune_point p;
        mx_error err;
        if (tune_geom_check(g, &err) ||
            tune_point_make(op, dev, g, batch, context, &p, &err)) {
            LOG_DEBUG("autotune: %s shape not tunable (%s); default", tune_op_name(op), err.msg);
        } else {
            int v;
            tune_source s;
            /* a stored 0 ("auto", or the default kept) is the built-in value */
            if (lookup_cached(&p, dev, g, &v, &s)) value = v > 0 ? v : def, src = s;
        }
        pthread_mutex_unlock(&g_mu);
    }
    if (src_out) *src_out = src;
    return value;
}

static tune_geom attn_geom(const tune_attn_shape *s) {
    tune_geom g = tune_geom_defaults();
    g.head_dim = s->head_dim, g.q_heads = s->q_heads, g.kv_heads = s->kv_heads;
    g.block_size = s->block_size;
    return g;
}

static tune_geom qmat_geom(const tune_qmat_shape *s) {
    tune_geom g = tune_geom_defaults();
    g.intermediate = s->n, g.hidden = s->k, g.q_bits = s->bits, g.q_group = s->group_size;
    return g;
}

int tune_get_paged_decode_splits(const tune_attn_shape *s, const tune_device *dev,
                                 tune_source *src) {
    const tune_device_kind kind = dev ? dev->kind : TUNE_DEV_CPU;
    int def = 0;
    if (kind == TUNE_DEV_CPU) {
        const int threads = dev ? dev->threads : omp_get_max_threads();
        def = tune_cpu_default_splits(s->batch > 0 ? s->batch : 1, s->kv_heads > 0 ? s->kv_heads : 1,
                                      tune_cpu_attn_pieces(s->context), threads);
    } else {
        def = tune_cuda_default_splits(s->batch, s->kv_heads,
                                       tune_cuda_capacity_tokens(s->context, s->block_size),
                                       dev->threads);
    }
    const tune_geom g = attn_geom(s);
    return resolve(TUNE_OP_PAGED_DECODE_SPLITS, mx_env()->paged_decode_splits,
                   "MLXCEL_PAGED_DECODE_SPLITS", def, dev, s->batch, s->context, &g, src);
}

int tune_get_qmv_multirow(const tune_qmat_shape *s, const tune_device *dev, tune_source *src) {
    cuda_knobs_register(); /* MLXCEL_QMV_MULTIROW is checked against the kernels' list */
    const tune_geom g = qmat_geom(s);
    return resolve(TUNE_OP_QMV_MULTIROW, mx_env()->qmv_multirow, "MLXCEL_QMV_MULTIROW", 0, dev, s->rows, 0, &g, src);
}

int tune_get_qmm_tile_m(const tune_qmat_shape *s, const tune_device *dev, tune_source *src) {
    cuda_knobs_register(); /* MLXCEL_QMM_TILE_M likewise */
    const tune_geom g = qmat_geom(s);
    return resolve(TUNE_OP_QMM_TILE, mx_env()->qmm_tile_m, "MLXCEL_QMM_TILE_M", 0, dev, 1, s->rows, &g, src);
}

/* ==== CUDA decode splits (cu_decode_splits) ==== */
int tune_cuda_paged_decode_splits(int batch, int q_heads, int kv_heads, int head_dim,
                                  int block_size, int capacity_tokens, const tune_device *dev,
                                  tune_source *src) {
    const mx_env_t *env = mx_env();
    const int def = tune_cuda_default_splits(batch, kv_heads, capacity_tokens, dev->threads);
    int v;
    tune_source s = TUNE_SRC_DEFAULT;
    if (env->paged_decode_splits <= 0 && env->sdpa_deterministic) {
        /* a fixed count, whatever the cache says: reproducible across shapes and runs */
        v = TUNE_CUDA_DET_SPLITS;
    } else {
        const tune_geom g = attn_geom(&(tune_attn_shape){batch, 0, head_dim, q_heads, kv_heads,
                                                         block_size});
        v = resolve(TUNE_OP_PAGED_DECODE_SPLITS, env->paged_decode_splits,
                    "MLXCEL_PAGED_DECODE_SPLITS", def, dev, batch,
                    tune_cuda_context_of_capacity(capacity_tokens), &g, &s);
        if (v <= 0) v = def; /* a stored 0 means the built-in policy */
    }
    if (v > TUNE_CUDA_MAX_SPLITS) v = TUNE_CUDA_MAX_SPLITS;
    if (src) *src = s;
    return v;
}

/* ==== CUDA quantized-matmul knobs ==== */
static int g_warned_invalid[TUNE_OP_COUNT];

static int qmat_knob(tune_op op, const tune_qmat_shape *s, const tune_device *dev,
                     const tune_knob_rules *r, tune_source *src) {
    const int def = r && r->default_value ? r->default_value(op, s) : 0;
    tune_source from;
    int v = op == TUNE_OP_QMV_MULTIROW ? tune_get_qmv_multirow(s, dev, &from)
                                        : tune_get_qmm_tile_m(s, dev, &from);
    if (v <= 0) {
        v = def; /* "auto" (no record, or a stored auto): the kernel's own policy */
    } else if (r && r->valid && !r->valid(op, s, v)) {
        pthread_mutex_lock(&g_mu);
        const int w = g_warned_invalid[op]++;
        pthread_mutex_unlock(&g_mu);
        if (!w)
            LOG_WARN("autotune: %s = %d (%s) cannot launch for m%d.n%d.k%d.q%dg%d; using the "
                     "default %d", tune_op_name(op), v, tune_source_name(from), s->rows, s->n,
                     s->k, s->bits, s->group_size, def);
        v = def;
        from = TUNE_SRC_DEFAULT;
    }
    if (src) *src = from;
    return v;
}

int tune_qmv_multirow(const tune_qmat_shape *s, const tune_device *dev, const tune_knob_rules *r,
                      tune_source *src) {
    return qmat_knob(TUNE_OP_QMV_MULTIROW, s, dev, r, src);
}

int tune_qmm_tile_m(const tune_qmat_shape *s, const tune_device *dev, const tune_knob_rules *r,
                    tune_source *src) {
    return qmat_knob(TUNE_OP_QMM_TILE, s, dev, r, src);
}
