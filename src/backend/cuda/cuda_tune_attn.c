/* CUDA paged-decode-splits tuning: cuda_paged_decode_attn on synthetic bf16 paged K/V in the
 * engine's form (row mode: one fp32 query per sequence at position context - 1, fp32 output,
 * page-table stride = the power-of-two capacity the engine would have), one candidate per
 * split count. Every candidate's output is checked against the default's. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_tune_bench.h"

/* Another split count only reorders fp32 sums (and the log-sum-exp merge): ~1e-6 relative;
 * a wrong merge or a skipped block is off by O(1e-2) or more. */
#define ATTN_TOL 1e-3
#define PATTERN_ELEMS ((size_t)1 << 23) /* 16 MiB of random bf16, tiled over the pools */

typedef struct attn_bench {
    cuda_paged_attn_args a;
    cuda_tune_timer tm;        /* stream, events, the profiler's clock */
    float *d_q, *d_o;          /* [B, Hq, D] fp32 */
    uint16_t *d_k, *d_v;       /* [R * B * nb, bs, Hkv, D] bf16 */
    int32_t *d_table;          /* [R, B, cap_blocks] */
    int32_t *d_pos;            /* [B] = context - 1 */
    void *d_ws;                /* split partials for the largest candidate */
    int *d_cnt;                /* split merge counters, zero at rest */
    float *h_out, *h_ref;      /* [B, Hq, D] */
    size_t n_out, table_elems; /* B * Hq * D; B * cap_blocks */
    int L, R;                  /* launches per run; data replicas */
} attn_bench;

static void bench_free(attn_bench *b) {
    cuda_tune_timer_free(&b->tm); /* waits for the stream first */
    cudaFree(b->d_q), cudaFree(b->d_o), cudaFree(b->d_k), cudaFree(b->d_v);
    cudaFree(b->d_table), cudaFree(b->d_pos), cudaFree(b->d_ws), cudaFree(b->d_cnt);
    free(b->h_out), free(b->h_ref);
    cudaGetLastError();
    memset(b, 0, sizeof *b);
}

/* dst[0..n) from the host pattern, repeated. */
static int fill_tiled(uint16_t *dst, size_t n, const uint16_t *pat, mx_error *err) {
    for (size_t off = 0; off < n; off += PATTERN_ELEMS) {
        const size_t m = n - off < PATTERN_ELEMS ? n - off : PATTERN_ELEMS;
        if (cuda_tune_ck(cudaMemcpy(dst + off, pat, m * 2, cudaMemcpyHostToDevice), "KV upload",
                         err))
            return -1;
    }
    return 0;
}

/* ==== Callbacks ==== */
static int attn_run(void *ctx, int value, mx_error *err) {
    attn_bench *b = ctx;
    b->a.num_splits = value;
    if (cuda_tune_timer_begin(&b->tm, err)) return -1;
    for (int i = 0; i < b->L; i++) {
        b->a.page_table = b->d_table + (size_t)(i % b->R) * b->table_elems;
        const int rc = cuda_paged_decode_attn(&b->a, b->tm.st);
        if (rc) return mx_fail(err, "CUDA tuner: paged decode attention with %d splits: %s",
                               value, cudaGetErrorString((cudaError_t)rc));
    }
    return cuda_tune_timer_end(&b->tm, err);
}

static int attn_sync(void *ctx, mx_error *err) {
    return cuda_tune_timer_sync(&((attn_bench *)ctx)->tm, err);
}

static double attn_clock(void *ctx) { return ((attn_bench *)ctx)->tm.gpu_s; }

/* After a synced run: the last launch's output (replica (L - 1) % R for every candidate). */
static int attn_check(void *ctx, int value, int is_default, double *rel_err, mx_error *err) {
    (void)value;
    attn_bench *b = ctx;
    float *dst = is_default ? b->h_ref : b->h_out;
    if (cuda_tune_ck(cudaMemcpy(dst, b->d_o, b->n_out * sizeof(float), cudaMemcpyDeviceToHost),
           "output download", err))
        return -1;
    if (is_default) {
        *rel_err = 0.0;
        return TUNE_CHECK_OK;
    }
    *rel_err = cuda_tune_rel_err(b->h_out, b->h_ref, b->n_out);
    return *rel_err <= ATTN_TOL ? TUNE_CHECK_OK : TUNE_CHECK_MISMATCH;
}

/* ==== Set-up ==== */
static int bench_init(attn_bench *b, const tune_point *p, const tune_geom *g, mx_error *err) {
    memset(b, 0, sizeof *b);
    const int B = p->batch, C = p->context, bs = g->block_size;
    const int Hq = g->q_heads, Hkv = g->kv_heads, D = g->head_dim;
    const long nb = (C + bs - 1) / bs;                              /* blocks per sequence */
    const long cap_blocks = tune_cuda_capacity_tokens(C, bs) / bs; /* table stride */
    const size_t blk_elems = (size_t)bs * Hkv * D;
    const size_t blocks_one = (size_t)B * nb;
    const double kv_one = 2.0 * blocks_one * blk_elems * 2; /* K + V bytes of one replica */
    int max_s = 1;
    for (int i = 0; i < p->n_cand; i++)
        if (p->cand[i] > max_s) max_s = p->cand[i];
    const size_t ws = cuda_paged_attn_workspace_bytes(B, Hq, D, max_s);
    size_t free_b = 0, total_b = 0;
    if (cuda_tune_ck(cudaMemGetInfo(&free_b, &total_b), "memory info", err)) return -1;
    if (kv_one + ws > free_b / 2.0)
        return mx_fail(err, "batch %d x context %d needs %.2f GiB of synthetic KV, more than half "
                            "of the %.2f GiB free on the GPU", B, C, kv_one / 1073741824.0,
                       free_b / 1073741824.0);
    b->R = cuda_tune_replicas(kv_one, 64, (double)free_b - ws);
    const size_t pool_elems = (size_t)b->R * blocks_one * blk_elems;
    b->n_out = (size_t)B * Hq * D;
    b->table_elems = (size_t)B * cap_blocks;
    const size_t table_all = (size_t)b->R * b->table_elems;

    if (cuda_tune_timer_init(&b->tm, err)) return -1;
    if (cuda_tune_ck(cudaMalloc((void **)&b->d_q, b->n_out * 4), "alloc q", err) ||
        cuda_tune_ck(cudaMalloc((void **)&b->d_o, b->n_out * 4), "alloc o", err) ||
        cuda_tune_ck(cudaMalloc((void **)&b->d_k, pool_elems * 2), "alloc K pool", err) ||
        cuda_tune_ck(cudaMalloc((void **)&b->d_v, pool_elems * 2), "alloc V pool", err) ||
        cuda_tune_ck(cudaMalloc((void **)&b->d_table, table_all * 4), "alloc page table", err) ||
        cuda_tune_ck(cudaMalloc((void **)&b->d_pos, (size_t)B * 4), "alloc positions", err) ||
        cuda_tune_ck(cudaMalloc(&b->d_ws, ws), "alloc workspace", err) ||
        cuda_tune_ck(cudaMalloc((void **)&b->d_cnt, (size_t)B * Hkv * sizeof(int)), "alloc counters",
                     err) ||
        cuda_tune_ck(cudaMemset(b->d_cnt, 0, (size_t)B * Hkv * sizeof(int)), "zero counters", err))
        return -1;
    b->h_out = malloc(b->n_out * sizeof(float));
    b->h_ref = malloc(b->n_out * sizeof(float));
    uint16_t *pat = malloc(2 * PATTERN_ELEMS * sizeof(uint16_t));
    int32_t *tab = malloc(table_all * sizeof(int32_t));
    float *hq = malloc(b->n_out * sizeof(float));
    int32_t *pos = malloc((size_t)B * sizeof(int32_t));
    int rc = -1;
    if (!b->h_out || !b->h_ref || !pat || !tab || !hq || !pos) {
        mx_fail(err, "CUDA tuner: out of host memory");
        goto out;
    }
    cuda_tune_fill_bf16(pat, PATTERN_ELEMS, 1.0f, 0x9e3779b97f4a7c15ull);
    cuda_tune_fill_bf16(pat + PATTERN_ELEMS, PATTERN_ELEMS, 1.0f, 0xd1b54a32d192ed03ull);
    cuda_tune_fill_f32(hq, b->n_out, 1.0f, 0x2545f4914f6cdd1dull);
    /* Each replica's blocks shuffled within its own range: a pool after some serving. */
    uint64_t s = 0x853c49e6748fea9bull;
    for (int r = 0; r < b->R; r++) {
        int32_t *t = tab + (size_t)r * b->table_elems;
        const int32_t base = (int32_t)((size_t)r * blocks_one);
        for (int bb = 0; bb < B; bb++)
            for (long i = 0; i < cap_blocks; i++)
                t[(size_t)bb * cap_blocks + i] = i < nb ? base + (int32_t)(bb * nb + i) : 0;
        for (size_t i = blocks_one; i > 1; i--) { /* Fisher-Yates over the live entries */
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            const size_t j = (size_t)(s >> 33) % i, x = i - 1;
            int32_t *pi = &t[(x / nb) * cap_blocks + x % nb],
                    *pj = &t[(j / nb) * cap_blocks + j % nb];
            const int32_t tmp = *pi;
            *pi = *pj;
            *pj = tmp;
        }
    }
    for (int bb = 0; bb < B; bb++) pos[bb] = C - 1;
    if (fill_tiled(b->d_k, pool_elems, pat, err) ||
        fill_tiled(b->d_v, pool_elems, pat + PATTERN_ELEMS, err) ||
        cuda_tune_ck(cudaMemcpy(b->d_table, tab, table_all * 4, cudaMemcpyHostToDevice),
                     "table upload", err) ||
        cuda_tune_ck(cudaMemcpy(b->d_q, hq, b->n_out * 4, cudaMemcpyHostToDevice), "q upload",
                     err) ||
        cuda_tune_ck(cudaMemcpy(b->d_pos, pos, (size_t)B * 4, cudaMemcpyHostToDevice), "pos upload",
                     err))
        goto out;

    cuda_paged_attn_args *a = &b->a;
    a->q = b->d_q;
    a->q_f32 = 1;
    a->k_cache = b->d_k;
    a->v_cache = b->d_v;
    a->page_table = b->d_table;
    a->pos = b->d_pos;
    a->o = b->d_o;
    a->o_dtype = CUDA_OPS_F32;
    a->workspace = b->d_ws;
    a->workspace_bytes = ws;
    a->split_counters = b->d_cnt;
    a->B = B, a->n_q_heads = Hq, a->n_kv_heads = Hkv, a->head_dim = D;
    a->block_size = bs;
    a->pt_stride = (int)cap_blocks;
    a->max_seq_len = (int)(cap_blocks * bs);
    a->scale = 1.0f / sqrtf((float)D);

    /* Launches per run: time one launch of the default after warm ones. */
    const tune_candidate def = {p->default_value, b, attn_run, attn_sync, NULL};
    if (cuda_tune_calibrate(&def, &b->tm, b->R, &b->L, err)) goto out;
    rc = 0;
out:
    free(pat), free(tab), free(hq), free(pos);
    return rc;
}

/* ==== Point ==== */
int cuda_tune_attn_point(const tune_point *p, const tune_geom *g, const tune_profile_opts *o,
                         tune_profile_result *res, mx_error *err) {
    int def = -1;
    for (int i = 0; i < p->n_cand; i++)
        if (p->cand[i] == p->default_value) def = i;
    if (def < 0) return mx_fail(err, "default %d missing from the candidates", p->default_value);
    attn_bench b;
    if (bench_init(&b, p, g, err)) {
        bench_free(&b);
        return mx_wrap(err, "%s %s", tune_op_name(p->op), p->bucket);
    }
    tune_candidate c[TUNE_MAX_CANDIDATES];
    for (int i = 0; i < p->n_cand; i++)
        c[i] = (tune_candidate){p->cand[i], &b, attn_run, attn_sync, attn_check};
    tune_profile_opts oo = *o;
    oo.clock = attn_clock; /* event time of each run's batch */
    oo.clock_ctx = &b;
    const int rc = tune_profile(c, p->n_cand, def, &oo, res, err);
    const int L = b.L;
    bench_free(&b);
    if (rc) return mx_wrap(err, "%s %s", tune_op_name(p->op), p->bucket);
    cuda_tune_per_launch(res, L);
    return 0;
}
