/* cuda_ops_bench suite "qmv": the quantized decode GEMV on the Llama-3.1-8B shapes, the
 * tensor-core kernel (cuda_qmv_tc, qmv_tc.cu) next to what it replaces: the CUDA-core qmv
 * (cuda_qmv, qgemv.cu) up to 8 rows and dequantize + cuBLASLt (cuda_qmm) above.
 *
 * Inputs are random device bits (packed codes uniform, scales / biases bf16); every timed
 * configuration is first checked: new vs old on the same inputs (relative L2 over all
 * outputs; both are fp32-accurate GEMVs of the same dequantized weights: tolerance 1e-4
 * against cuda_qmv, 1e-2 against cuda_qmm, which rounds x and the weight to bf16). The
 * rigorous per-element checks against the CPU reference are in tests/gpu (gpu_quant.c).
 * Bytes per call: packed weights + scales + biases + x + y. PDL is on, as in the engine. */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_ops.h"
#include "cuda_ops_bench.h"

extern "C" void cuda_set_pdl(int on);

#define QB_MAX_SETS 16

typedef struct qb_ctx {
    int N, K, bits, group, R, nsets, variant;
    uint32_t *w[QB_MAX_SETS];
    uint16_t *s[QB_MAX_SETS], *b[QB_MAX_SETS];
    void *tl[QB_MAX_SETS]; /* the weights in the tiled layout (cuda_q_tile), as loaded */
    int tiled, inprep;     /* read tl; x rounded in the CTAs (qmv_i8, one row, as the engine) */
    float *x[QB_MAX_SETS], *y[QB_MAX_SETS]; /* x [32, K], y [32, N] */
    void *ws;                               /* cuda_qmv workspace */
    size_t ws_bytes;
    cublasLtHandle_t lt;
    void *lt_ws, *scratch;
    size_t lt_ws_bytes, scratch_bytes;
} qb_ctx;

static void qb_args(qb_ctx *c, int s, cuda_qmv_args *a, int r0, int rows) {
    memset(a, 0, sizeof *a);
    a->w[0] = c->w[s], a->scales[0] = c->s[s], a->biases[0] = c->b[s];
    a->y[0] = c->y[s] + (size_t)r0 * c->N, a->ldy[0] = c->N, a->N[0] = c->N, a->n_segs = 1;
    a->x = c->x[s] + (size_t)r0 * c->K, a->ldx = c->K;
    a->rows = rows, a->K = c->K, a->bits = c->bits, a->group = c->group;
    a->sb_dtype = CUDA_QSB_BF16, a->ws = c->ws, a->ws_bytes = c->ws_bytes;
    if (c->tiled) a->w[0] = (const uint32_t *)c->tl[s], a->scales[0] = a->biases[0] = NULL;
    a->tiled = c->tiled;
    a->x_inprep = c->inprep;
}

static void qb_new(void *p, int rep) {
    qb_ctx *c = (qb_ctx *)p;
    cuda_qmv_args a;
    qb_args(c, rep % c->nsets, &a, 0, c->R);
    CKL(cuda_qmv_tc(&a, 0, g_stream));
}

static void qb_mma(void *p, int rep) {
    qb_ctx *c = (qb_ctx *)p;
    cuda_qmv_args a;
    qb_args(c, rep % c->nsets, &a, 0, c->R);
    CKL(cuda_qmv_mma(&a, g_stream));
}

static void qb_i8(void *p, int rep) {
    qb_ctx *c = (qb_ctx *)p;
    cuda_qmv_args a;
    qb_args(c, rep % c->nsets, &a, 0, c->R);
    CKL(cuda_qmv_i8(&a, g_stream));
}

static void qb_bulk(void *p, int rep) {
    qb_ctx *c = (qb_ctx *)p;
    cuda_qmv_args a;
    qb_args(c, rep % c->nsets, &a, 0, c->R);
    CKL(cuda_qmv_bulk(&a, c->variant, g_stream));
}

static void qb_bulk_tl(void *p, int rep) {
    qb_ctx *c = (qb_ctx *)p;
    c->tiled = 1;
    qb_bulk(p, rep);
    c->tiled = 0;
}

/* The pre-tensor-core dispatch: cuda_qmv up to 8 rows, cuda_qmm (default slab) above. */
static void qb_old(void *p, int rep) {
    qb_ctx *c = (qb_ctx *)p;
    const int s = rep % c->nsets;
    if (c->R <= CUDA_QMV_MAX_ROWS) {
        cuda_qmv_args a;
        qb_args(c, s, &a, 0, c->R);
        CKL(cuda_qmv(&a, cuda_qmv_default_multirow(c->R, c->N, c->K, c->bits), g_stream));
        return;
    }
    cuda_qmm_args a;
    memset(&a, 0, sizeof a);
    a.w = c->w[s], a.scales = c->s[s], a.biases = c->b[s];
    a.x = c->x[s], a.ldx = c->K, a.y = c->y[s], a.ldy = c->N;
    a.rows = c->R, a.N = c->N, a.K = c->K, a.bits = c->bits, a.group = c->group;
    a.sb_dtype = CUDA_QSB_BF16, a.lt = c->lt, a.lt_ws = c->lt_ws, a.lt_ws_bytes = c->lt_ws_bytes;
    a.scratch = c->scratch, a.scratch_bytes = c->scratch_bytes;
    CKL(cuda_qmm(&a, cuda_qmm_default_tile_m(c->R, c->N, c->K, c->bits), g_stream));
}

/* Relative L2 difference of y[0 .. R) between a new kernel (fn) and the old one (set 0), and
 * the NaN count. */
static double qb_check(qb_ctx *c, size_t *nan, bench_fn fn) {
    const size_t n = (size_t)c->R * c->N;
    poison(c->y[0], n * 4);
    fn(c, 0);
    double *a = d2h_f64(c->y[0], n, 0);
    poison(c->y[0], n * 4);
    if (c->R <= CUDA_QMV_MAX_ROWS) {
        qb_old(c, 0);
    } else { /* the exact reference: cuda_qmv in passes of 8 rows */
        for (int r0 = 0; r0 < c->R; r0 += 8) {
            cuda_qmv_args q;
            qb_args(c, 0, &q, r0, c->R - r0 < 8 ? c->R - r0 : 8);
            CKL(cuda_qmv(&q, 8, g_stream));
        }
    }
    double *b = d2h_f64(c->y[0], n, 0);
    double num = 0, den = 0;
    *nan = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) {
            (*nan)++;
            continue;
        }
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    free(a);
    free(b);
    return sqrt(num / (den + 1e-30));
}

/* y of the launch fn makes, on set 0 (host copy). */
static float *qb_y(qb_ctx *c, bench_fn fn) {
    const size_t n = (size_t)c->R * c->N;
    poison(c->y[0], n * 4);
    fn(c, 0);
    float *h = (float *)malloc(n * 4);
    CK(cudaMemcpy(h, c->y[0], n * 4, cudaMemcpyDeviceToHost));
    return h;
}

/* qmv_i8 reading the tiled layout (bitwise the MLX-layout launch's y: the same arithmetic in
 * the same order) and, at one row, with x rounded in the CTAs (the engine's one-row form). */
static void qb_i8_variants(qb_ctx *c, const char *shape, double bytes) {
    for (int inp = 0; inp <= (c->R == 1); inp++) {
        c->inprep = inp;
        c->tiled = 0;
        cuda_qmv_args a;
        qb_args(c, 0, &a, 0, c->R);
        if (inp && !cuda_qmv_i8_supported(&a)) break; /* x past the CTA's shared memory */
        float *ref = qb_y(c, qb_i8);
        timing t;
        char op[40], what[96];
        if (inp) {
            snprintf(op, sizeof op, "qmv_i8 inprep q%dg%d", c->bits, c->group);
            t = bench_time(qb_i8, c, 5, 30);
            result_add(op, shape, t, bytes, -1, 0);
        }
        c->tiled = 1;
        float *y = qb_y(c, qb_i8);
        size_t diff = 0;
        for (size_t i = 0; i < (size_t)c->R * c->N; i++) diff += memcmp(&y[i], &ref[i], 4) != 0;
        snprintf(what, sizeof what, "qmv_i8%s tiled == MLX layout, bitwise (%s)",
                 inp ? " inprep" : "", shape);
        const int f0 = g_fail;
        check_report(what, diff ? 1.0 : 0.0, 0, 0, 0.5);
        snprintf(op, sizeof op, "qmv_i8%s tiled q%dg%d", inp ? " inprep" : "", c->bits, c->group);
        t = bench_time(qb_i8, c, 5, 30);
        result_add(op, shape, t, bytes, -1, g_fail > f0);
        free(ref);
        free(y);
    }
    c->tiled = c->inprep = 0;
}

void suite_qmv(void) {
    struct { const char *name; int N, K; } shapes[] = {
        {"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate+up", 28672, 4096}, {"down", 4096, 14336},
        {"lm_head", 128256, 4096}};
    struct { int bits, group; } quants[] = {{4, 64}, {8, 64}};
    static const int rows[] = {1, 8, 32};
    /* QMV_SHAPE / QMV_ROWS / QMV_BITS narrow the suite (one configuration under ncu) */
    const char *only_shape = getenv("QMV_SHAPE");
    const int only_rows = getenv("QMV_ROWS") ? atoi(getenv("QMV_ROWS")) : 0;
    const int only_bits = getenv("QMV_BITS") ? atoi(getenv("QMV_BITS")) : 0;
    cuda_set_pdl(1);
    qb_ctx c;
    memset(&c, 0, sizeof c);
    lt_open(&c.lt, &c.lt_ws, &c.lt_ws_bytes);
    for (size_t qi = 0; qi < sizeof quants / sizeof quants[0]; qi++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            if ((only_shape && strcmp(only_shape, shapes[si].name)) ||
                (only_bits && only_bits != quants[qi].bits))
                continue;
            c.N = shapes[si].N, c.K = shapes[si].K;
            c.bits = quants[qi].bits, c.group = quants[qi].group;
            const size_t wb = (size_t)c.N * c.K * c.bits / 8, sbb = (size_t)c.N * (c.K / c.group) * 2;
            /* rotation spans >= 4x the L2 */
            c.nsets = (int)((240e6 + wb + 2 * sbb - 1) / (wb + 2 * sbb));
            c.nsets = c.nsets < 2 ? 2 : c.nsets > QB_MAX_SETS ? QB_MAX_SETS : c.nsets;
            for (int s = 0; s < c.nsets; s++) {
                c.w[s] = (uint32_t *)dmalloc(wb);
                c.s[s] = (uint16_t *)dmalloc(sbb);
                c.b[s] = (uint16_t *)dmalloc(sbb);
                c.x[s] = (float *)dmalloc((size_t)32 * c.K * 4);
                c.y[s] = (float *)dmalloc((size_t)32 * c.N * 4);
                fill_f32((float *)c.w[s], wb / 4, next_seed(), 1.0f); /* random bits */
                fill_bf16(c.s[s], sbb / 2, next_seed(), 0.01f);
                fill_bf16(c.b[s], sbb / 2, next_seed(), 0.05f);
                fill_f32(c.x[s], (size_t)32 * c.K, next_seed(), 1.0f);
                c.tl[s] = dmalloc(cuda_q_tiled_bytes(c.N, c.K, c.bits, c.group));
                CKL(cuda_q_tile(c.tl[s], c.w[s], c.s[s], c.b[s], c.N, c.K, c.bits, c.group,
                                g_stream));
            }
            /* the largest of cuda_qmv's, qmv_bulk's, qmv_mma's and qmv_i8's */
            const size_t ws[4] = {cuda_qmv_workspace_bytes(c.K), cuda_qmv_bulk_workspace_bytes(c.K),
                                  cuda_qmv_mma_workspace_bytes(c.K), cuda_qmv_i8_workspace_bytes(c.K)};
            c.ws_bytes = 0;
            for (int i = 0; i < 4; i++)
                if (ws[i] > c.ws_bytes) c.ws_bytes = ws[i];
            c.ws = dmalloc(c.ws_bytes);
            c.scratch_bytes = cuda_qmm_scratch_bytes(32, c.N, c.K, cuda_qmm_default_tile_m(32, c.N, c.K, c.bits));
            c.scratch = dmalloc(c.scratch_bytes);
            logf_("\n== qmv %s %dx%d q%d g%d (%d weight sets, %.1f MB each)\n", shapes[si].name, c.N,
                  c.K, c.bits, c.group, c.nsets, (wb + 2 * sbb) / 1e6);
            for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
                c.R = rows[ri];
                if (only_rows && only_rows != c.R) continue;
                size_t nan;
                const double rel = qb_check(&c, &nan, qb_new);
                char what[96], shape[48], op[24];
                snprintf(what, sizeof what, "qmv_tc vs cuda_qmv %s R=%d q%d", shapes[si].name, c.R, c.bits);
                const int fb = g_fail;
                check_report(what, rel, 0, nan, 1e-4);
                const double bytes = (double)wb + 2.0 * sbb + (double)c.R * c.K * 4 + (double)c.R * c.N * 4;
                snprintf(shape, sizeof shape, "%s %dx%d R=%d", shapes[si].name, c.N, c.K, c.R);
                snprintf(op, sizeof op, "qmv_tc q%dg%d", c.bits, c.group);
                timing t = bench_time(qb_new, &c, 5, 30);
                result_add(op, shape, t, bytes, rel, g_fail > fb);
                snprintf(op, sizeof op, "%s q%dg%d", c.R <= CUDA_QMV_MAX_ROWS ? "old qmv" : "old qmm",
                         c.bits, c.group);
                t = bench_time(qb_old, &c, 5, 30);
                result_add(op, shape, t, bytes, -1, 0);
                cuda_qmv_args ma;
                qb_args(&c, 0, &ma, 0, c.R);
                if (cuda_qmv_mma_supported(&ma)) {
                    const double rm = qb_check(&c, &nan, qb_mma);
                    snprintf(what, sizeof what, "qmv_mma vs cuda_qmv %s R=%d q%d", shapes[si].name,
                             c.R, c.bits);
                    const int fm = g_fail;
                    check_report(what, rm, 0, nan, 1e-3);
                    /* K split variants: warps per SM x least load batches per warp */
                    static const int split[][2] = {{16, 2}, {32, 1}, {64, 1}};
                    for (int v = 0; v < 3; v++) {
                        cuda_qmv_mma_set_split(split[v][0], split[v][1]);
                        snprintf(op, sizeof op, "qmv_mma%d/%d q%dg%d", split[v][0], split[v][1],
                                 c.bits, c.group);
                        t = bench_time(qb_mma, &c, 5, 30);
                        result_add(op, shape, t, bytes, rm, g_fail > fm);
                    }
                    cuda_qmv_mma_set_split(0, 0);
                }
                if (cuda_qmv_i8_supported(&ma)) { /* x rounded to int8 per group: ~1e-2 */
                    const double ri = qb_check(&c, &nan, qb_i8);
                    snprintf(what, sizeof what, "qmv_i8 vs cuda_qmv %s R=%d q%d", shapes[si].name,
                             c.R, c.bits);
                    const int fi = g_fail;
                    check_report(what, ri, 0, nan, 3e-2);
                    snprintf(op, sizeof op, "qmv_i8 q%dg%d", c.bits, c.group);
                    t = bench_time(qb_i8, &c, 5, 30);
                    result_add(op, shape, t, bytes, ri, g_fail > fi);
                    qb_i8_variants(&c, shape, bytes);
                }
                /* the streaming kernel rounds x and the dequantized weights to bf16 (as the CPU
                 * reference does for the weights), the old one keeps fp32: ~1e-3 apart */
                for (c.variant = 0; c.variant < cuda_qmv_bulk_variants(); c.variant++) {
                    const double rb = qb_check(&c, &nan, qb_bulk);
                    snprintf(what, sizeof what, "qmv_bulk v%d vs cuda_qmv %s R=%d q%d", c.variant,
                             shapes[si].name, c.R, c.bits);
                    const int fb2 = g_fail;
                    check_report(what, rb, 0, nan, 1e-2);
                    snprintf(op, sizeof op, "qmv_bulk%d q%dg%d", c.variant, c.bits, c.group);
                    t = bench_time(qb_bulk, &c, 5, 30);
                    result_add(op, shape, t, bytes, rb, g_fail > fb2);
                }
                /* the tiled layout: a stage's block in 8, 1, 2, 4 copies */
                for (c.variant = 0; c.variant < cuda_qmv_bulk_variants(); c.variant++) {
                    const double rt = qb_check(&c, &nan, qb_bulk_tl);
                    snprintf(what, sizeof what, "qmv_bulk%d tiled vs cuda_qmv %s R=%d q%d",
                             c.variant, shapes[si].name, c.R, c.bits);
                    const int ft = g_fail;
                    check_report(what, rt, 0, nan, 1e-2);
                    snprintf(op, sizeof op, "qmv_bulk%d tiled q%dg%d", c.variant, c.bits, c.group);
                    t = bench_time(qb_bulk_tl, &c, 5, 30);
                    result_add(op, shape, t, bytes, rt, g_fail > ft);
                }
                c.variant = 0;
            }
            for (int s = 0; s < c.nsets; s++) {
                CK(cudaFree(c.w[s]));
                CK(cudaFree(c.s[s]));
                CK(cudaFree(c.b[s]));
                CK(cudaFree(c.tl[s]));
                CK(cudaFree(c.x[s]));
                CK(cudaFree(c.y[s]));
            }
            CK(cudaFree(c.ws));
            CK(cudaFree(c.scratch));
        }
    cuda_qmm_release();
    CK(cudaFree(c.lt_ws));
    cublasLtDestroy(c.lt);
}
