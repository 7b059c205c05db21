#include "tune/tune_runner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#ifdef MLXCEL_HAVE_CUDA
#include "backend/cuda/cuda_tune.h"
#endif

bool tune_can_profile(tune_device_kind kind) {
#ifdef MLXCEL_HAVE_CUDA
    if (kind == TUNE_DEV_CUDA) return true;
#endif
    return kind == TUNE_DEV_CPU;
}

bool tune_op_available(tune_op op, tune_device_kind kind, const char **why) {
    if (!tune_op_supported(op, kind)) {
        if (why) *why = "not a launch parameter on this device";
        return false;
    }
    if (!tune_can_profile(kind)) {
        if (why) *why = "this build has no CUDA backend";
        return false;
    }
#ifdef MLXCEL_HAVE_CUDA
    if (kind == TUNE_DEV_CUDA) return cuda_tune_op_available(op, why);
#endif
    return true;
}

const char *tune_point_dtype(const tune_point *p, const tune_device *dev) {
    (void)p;
    return dev->kind == TUNE_DEV_CUDA ? "bf16" : "f32";
}

void tune_point_key(const tune_point *p, const tune_device *dev, tune_key *k) {
    memset(k, 0, sizeof *k);
    snprintf(k->op, sizeof k->op, "%s", tune_op_name(p->op));
    snprintf(k->device, sizeof k->device, "%s", dev->id);
    snprintf(k->bucket, sizeof k->bucket, "%s", p->bucket);
    snprintf(k->dtype, sizeof k->dtype, "%s", tune_point_dtype(p, dev));
}

/* ==== CPU paged-decode-splits: the engine's attention on synthetic KV ====
 * What the CPU engine runs for a decode step of the point: backend_cpu()->attention over B
 * rows at position context - 1, the pools in the engine's layout ([blocks * bs, Hkv, D] f32,
 * physical row = block * bs + offset) with each sequence's blocks scattered through a shuffled
 * page table; the candidate goes in as mx_attn_batch.kv_splits. */
typedef struct cpu_attn_bench {
    mx_attn_batch b;
    mx_attn_params p;
    mx_tensor tq, tk, tv, to;
    float *q, *k, *v, *o, *ref;   /* q, o, ref: [B, Hq, D]; k, v: [n_blocks * bs, Hkv, D] */
    int32_t *table, *pos, *seq;   /* table: [B, nb]; pos, seq: [B] */
} cpu_attn_bench;

/* Uniform [-1, 1) from a xorshift state: the data only has to be finite and non-degenerate. */
static float rnd(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (float)((*s >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

static uint64_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (uint64_t)kb << 10;
}

static void cpu_bench_free(cpu_attn_bench *bn) {
    free(bn->q), free(bn->k), free(bn->v), free(bn->o), free(bn->ref);
    free(bn->table), free(bn->pos), free(bn->seq);
}

/* Random q/K/V and a shuffled page table (a pool after some serving has scattered blocks). */
static void cpu_bench_fill(cpu_attn_bench *bn, size_t qo, size_t kv_floats, int64_t n_blocks) {
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < qo; i++) bn->q[i] = rnd(&s);
    for (size_t i = 0; i < kv_floats; i++) bn->k[i] = rnd(&s), bn->v[i] = rnd(&s);
    for (int64_t i = 0; i < n_blocks; i++) bn->table[i] = (int32_t)i;
    for (int64_t i = n_blocks - 1; i > 0; i--) {
        const int64_t j = (int64_t)((s = s * 6364136223846793005ull + 1442695040888963407ull) >>
                                    33) % (i + 1);
        const int32_t t = bn->table[i];
        bn->table[i] = bn->table[j];
        bn->table[j] = t;
    }
}

static int cpu_bench_init(cpu_attn_bench *bn, const tune_point *p, const tune_geom *g,
                          mx_error *err) {
    memset(bn, 0, sizeof *bn);
    const int B = p->batch, C = p->context, bs = g->block_size, D = g->head_dim;
    const int nb = (C + bs - 1) / bs;           /* blocks per sequence */
    const int64_t n_blocks = (int64_t)B * nb;
    const size_t kv_floats = (size_t)n_blocks * bs * g->kv_heads * D;
    const uint64_t need = 2 * kv_floats * sizeof(float);
    const uint64_t avail = mem_available();
    if (avail && need > avail / 2)
        return mx_fail(err, "batch %d x context %d needs %.1f GiB of synthetic KV, more than half "
                            "of the %.1f GiB available", B, C, need / 1073741824.0,
                       avail / 1073741824.0);
    const size_t qo = (size_t)B * g->q_heads * D;
    bn->q = malloc(qo * sizeof(float));
    bn->o = malloc(qo * sizeof(float));
    bn->ref = malloc(qo * sizeof(float));
    bn->k = malloc(kv_floats * sizeof(float));
    bn->v = malloc(kv_floats * sizeof(float));
    bn->table = malloc((size_t)n_blocks * sizeof(int32_t));
    bn->pos = malloc((size_t)B * sizeof(int32_t));
    bn->seq = malloc((size_t)B * sizeof(int32_t));
    if (!bn->q || !bn->o || !bn->ref || !bn->k || !bn->v || !bn->table || !bn->pos || !bn->seq) {
        cpu_bench_free(bn);
        return mx_fail(err, "out of memory for batch %d x context %d", B, C);
    }
    cpu_bench_fill(bn, qo, kv_floats, n_blocks);
    for (int i = 0; i < B; i++) bn->pos[i] = C - 1, bn->seq[i] = i;
    bn->b = (mx_attn_batch){.n_rows = B, .pos = bn->pos, .seq = bn->seq, .block_table = bn->table,
                            .table_stride = nb, .block_size = bs};
    bn->p = (mx_attn_params){.n_heads = g->q_heads, .n_kv_heads = g->kv_heads, .head_dim = D,
                             .scale = 1.0f / sqrtf((float)D)};
    bn->tq = mx_tensor_3d(bn->q, MX_F32, B, g->q_heads, D, MX_DEV_CPU);
    bn->to = mx_tensor_3d(bn->o, MX_F32, B, g->q_heads, D, MX_DEV_CPU);
    bn->tk = mx_tensor_3d(bn->k, MX_F32, n_blocks * bs, g->kv_heads, D, MX_DEV_CPU);
    bn->tv = mx_tensor_3d(bn->v, MX_F32, n_blocks * bs, g->kv_heads, D, MX_DEV_CPU);
    return 0;
}

static int cpu_bench_run(void *ctx, int value, mx_error *err) {
    (void)err;
    cpu_attn_bench *bn = ctx;
    bn->b.kv_splits = value;
    backend_cpu()->attention(&bn->to, &bn->tq, &bn->tk, &bn->tv, &bn->b, &bn->p);
    return 0;
}

/* The split count only spreads work over threads: every candidate must give the default's bits
 * (docs/engine.md, "Batch invariance"), so anything but a bitwise match is a mismatch. */
static int cpu_bench_check(void *ctx, int value, int is_default, double *rel_err, mx_error *err) {
    (void)value, (void)err;
    cpu_attn_bench *bn = ctx;
    const size_t n = (size_t)mx_tensor_numel(&bn->to);
    if (is_default) {
        memcpy(bn->ref, bn->o, n * sizeof(float));
        *rel_err = 0.0;
        return TUNE_CHECK_OK;
    }
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)bn->o[i] - bn->ref[i];
        num += d * d;
        den += (double)bn->ref[i] * bn->ref[i];
    }
    *rel_err = den > 0.0 ? sqrt(num / den) : sqrt(num);
    return memcmp(bn->o, bn->ref, n * sizeof(float)) ? TUNE_CHECK_MISMATCH : TUNE_CHECK_OK;
}

/* ==== Driver ==== */
int tune_run_point(const tune_point *p, const tune_device *dev, const tune_geom *g,
                   const tune_profile_opts *o, tune_profile_result *res, tune_record *rec,
                   mx_error *err) {
    const char *why = NULL;
    if (!tune_op_available(p->op, dev->kind, &why))
        return mx_fail(err, "%s on %s: %s", tune_op_name(p->op), tune_device_kind_name(dev->kind),
                       why);
    if (dev->kind == TUNE_DEV_CUDA) {
#ifdef MLXCEL_HAVE_CUDA
        if (cuda_tune_run_point(p, dev, g, o, res, err)) return -1;
#endif
    } else {
        int def = -1;
        for (int i = 0; i < p->n_cand; i++)
            if (p->cand[i] == p->default_value) def = i;
        if (def < 0) return mx_fail(err, "default %d missing from the candidates", p->default_value);
        cpu_attn_bench bn;
        if (cpu_bench_init(&bn, p, g, err)) return -1;
        tune_candidate c[TUNE_MAX_CANDIDATES];
        for (int i = 0; i < p->n_cand; i++)
            c[i] = (tune_candidate){p->cand[i], &bn, cpu_bench_run, NULL, cpu_bench_check};
        const int rc = tune_profile(c, p->n_cand, def, o, res, err);
        cpu_bench_free(&bn);
        if (rc) return mx_wrap(err, "%s %s", tune_op_name(p->op), p->bucket);
    }

    memset(rec, 0, sizeof *rec);
    tune_point_key(p, dev, &rec->key);
    const tune_cand_result *sel = &res->c[res->selected_idx], *d = &res->c[res->default_idx];
    rec->value = sel->value;
    rec->default_value = p->default_value;
    rec->best_us = sel->stat.median * 1e6;
    rec->spread_us = sel->stat.spread * 1e6;
    rec->default_us = d->stat.median * 1e6;
    rec->speedup = res->speedup;
    rec->reps = sel->stat.n;
    rec->created = (int64_t)time(NULL);
    return 0;
}
