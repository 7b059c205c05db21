#include "tune/tune_runner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tune/cpu_paged_decode.h"
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

/* ==== CPU paged-decode-splits: synthetic KV of the point's geometry ==== */
typedef struct cpu_attn_bench {
    cpu_paged_attn_args a;
    float *q, *k, *v, *o, *ref, *ws; /* see cpu_paged_attn_args */
    int32_t *table, *lens;
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
    free(bn->q), free(bn->k), free(bn->v), free(bn->o), free(bn->ref), free(bn->ws);
    free(bn->table), free(bn->lens);
}

static int cpu_bench_init(cpu_attn_bench *bn, const tune_point *p, const tune_geom *g,
                          mx_error *err) {
    memset(bn, 0, sizeof *bn);
    const int B = p->batch, C = p->context, bs = g->block_size;
    const int nb = (C + bs - 1) / bs;           /* blocks per sequence */
    const int64_t n_blocks = (int64_t)B * nb;
    const size_t row = (size_t)g->kv_heads * g->head_dim;
    const size_t kv_floats = (size_t)n_blocks * bs * row;
    const uint64_t need = 2 * kv_floats * sizeof(float);
    const uint64_t avail = mem_available();
    if (avail && need > avail / 2)
        return mx_fail(err, "batch %d x context %d needs %.1f GiB of synthetic KV, more than half "
                            "of the %.1f GiB available", B, C, need / 1073741824.0,
                       avail / 1073741824.0);
    int max_s = 1;
    for (int i = 0; i < p->n_cand; i++)
        if (p->cand[i] > max_s) max_s = p->cand[i];
    const size_t qo = (size_t)B * g->q_heads * g->head_dim;
    const size_t wsf = cpu_paged_attn_workspace_floats(B, g->q_heads, g->head_dim, max_s);
    bn->q = malloc(qo * sizeof(float));            /* [B, Hq, D] */
    bn->o = malloc(qo * sizeof(float));            /* [B, Hq, D] */
    bn->ref = malloc(qo * sizeof(float));          /* [B, Hq, D] the default's output */
    bn->k = malloc(kv_floats * sizeof(float));     /* [n_blocks, bs, Hkv, D] */
    bn->v = malloc(kv_floats * sizeof(float));     /* [n_blocks, bs, Hkv, D] */
    bn->ws = malloc(wsf * sizeof(float));
    bn->table = malloc((size_t)n_blocks * sizeof(int32_t)); /* [B, nb] */
    bn->lens = malloc((size_t)B * sizeof(int32_t));         /* [B] */
    if (!bn->q || !bn->o || !bn->ref || !bn->k || !bn->v || !bn->ws || !bn->table || !bn->lens) {
        cpu_bench_free(bn);
        return mx_fail(err, "out of memory for batch %d x context %d", B, C);
    }
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < qo; i++) bn->q[i] = rnd(&s);
    for (size_t i = 0; i < kv_floats; i++) bn->k[i] = rnd(&s), bn->v[i] = rnd(&s);
    /* Shuffled page table: a pool after some serving has scattered blocks. */
    for (int64_t i = 0; i < n_blocks; i++) bn->table[i] = (int32_t)i;
    for (int64_t i = n_blocks - 1; i > 0; i--) {
        const int64_t j = (int64_t)((s = s * 6364136223846793005ull + 1442695040888963407ull) >>
                                    33) % (i + 1);
        const int32_t t = bn->table[i];
        bn->table[i] = bn->table[j];
        bn->table[j] = t;
    }
    for (int b = 0; b < B; b++) bn->lens[b] = C;
    cpu_paged_attn_args *a = &bn->a;
    a->q = bn->q, a->k_cache = bn->k, a->v_cache = bn->v, a->page_table = bn->table;
    a->seq_lens = bn->lens, a->o = bn->o, a->workspace = bn->ws, a->workspace_floats = wsf;
    a->B = B, a->n_q_heads = g->q_heads, a->n_kv_heads = g->kv_heads, a->head_dim = g->head_dim;
    a->block_size = bs, a->pt_stride = nb, a->n_blocks = n_blocks;
    a->scale = 1.0f / sqrtf((float)g->head_dim);
    return 0;
}

static int cpu_bench_run(void *ctx, int value, mx_error *err) {
    cpu_attn_bench *bn = ctx;
    bn->a.num_splits = value;
    return cpu_paged_decode_attn(&bn->a, err);
}

/* Splits reorder fp32 sums only; a wrong merge is off by O(1), so 1e-4 separates the two. */
#define CPU_ATTN_TOL 1e-4

static int cpu_bench_check(void *ctx, int value, int is_default, double *rel_err, mx_error *err) {
    (void)value, (void)err;
    cpu_attn_bench *bn = ctx;
    const size_t n = (size_t)bn->a.B * bn->a.n_q_heads * bn->a.head_dim;
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
    return *rel_err <= CPU_ATTN_TOL ? TUNE_CHECK_OK : TUNE_CHECK_MISMATCH; /* NaN mismatches */
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
