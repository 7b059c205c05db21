/* cuda_ops_bench: correctness against CPU references and timing of the decode kernels
 * (src/backend/cuda/cuda_ops.h) in one run, with the device's own copy bandwidth as the
 * roofline. Prints every check, then a table; exits 1 if any check failed.
 *
 *   cuda_ops_bench [--only gemv|gemvtc|gemvks|norm|rope|attn|argmax|qmv|stream] [--log FILE]
 *
 * This file: harness (fills, timing, table), main, and the GEMV suite next to cuBLASLt. */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_info.h"
#include "backend/cuda/cuda_ops.h"
#include "cuda_ops_bench.h"
#include "cuda_ops_ref.h"

cudaStream_t g_stream;
double g_copy_gbs = 0;
int g_sm_count = 0;
int g_fail = 0;
FILE *g_log = NULL;

/* ==== Logging ==== */

void logf_(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
    if (g_log) {
        va_start(ap, fmt);
        vfprintf(g_log, fmt, ap);
        va_end(ap);
        fflush(g_log);
    }
}

/* ==== Data ==== */

__device__ __forceinline__ float hash_uniform(uint64_t seed, size_t i) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull + 0x94D049BB133111EBull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f; /* [-1, 1) */
}

__global__ void fill_bf16_kernel(uint16_t *p, size_t n, uint64_t seed, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t u = __float_as_uint(hash_uniform(seed, i) * scale);
        u += 0x7fffu + ((u >> 16) & 1u);
        p[i] = (uint16_t)(u >> 16);
    }
}

__global__ void fill_f32_kernel(float *p, size_t n, uint64_t seed, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = hash_uniform(seed, i) * scale;
}

void fill_bf16(uint16_t *p, size_t n, uint64_t seed, float scale) {
    fill_bf16_kernel<<<4 * g_sm_count, 256, 0, g_stream>>>(p, n, seed, scale);
    CK(cudaGetLastError());
}
void fill_f32(float *p, size_t n, uint64_t seed, float scale) {
    fill_f32_kernel<<<4 * g_sm_count, 256, 0, g_stream>>>(p, n, seed, scale);
    CK(cudaGetLastError());
}
void poison(void *p, size_t bytes) { CK(cudaMemsetAsync(p, 0xFF, bytes, g_stream)); }

uint64_t next_seed(void) {
    static uint64_t s = 0x5eed0001ull;
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return s;
}

void *dmalloc(size_t bytes) {
    void *p = NULL;
    CK(cudaMalloc(&p, bytes));
    return p;
}

void lt_open(cublasLtHandle_t *lt, void **ws, size_t *ws_bytes) {
    if (cublasLtCreate(lt)) {
        fprintf(stderr, "cublasLtCreate failed\n");
        exit(2);
    }
    *ws_bytes = (size_t)32 << 20;
    *ws = dmalloc(*ws_bytes);
}

void *d2h(const void *d, size_t bytes) {
    void *h = malloc(bytes);
    if (!h) {
        fprintf(stderr, "out of host memory (%zu bytes)\n", bytes);
        exit(2);
    }
    CK(cudaStreamSynchronize(g_stream));
    CK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
    return h;
}

double *d2h_f64(const void *d, size_t n, int is_bf16) {
    void *h = d2h(d, n * (is_bf16 ? 2 : 4));
    double *o = (double *)malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++)
        o[i] = is_bf16 ? ref_bf16_to_f32(((uint16_t *)h)[i]) : ((float *)h)[i];
    free(h);
    return o;
}

/* ==== Timing ==== */

/* Holds the stream for ns nanoseconds so the host can queue every timed repetition before
 * the first runs: the events then time the kernels, not the host's launch rate. */
__global__ void spin_kernel(long long ns) {
    long long t0, t;
    const long long c0 = clock64();
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        /* Guard: never spin past ~4 ns-worth of cycles per ns even if the timer stalls. */
    } while (t - t0 < ns && clock64() - c0 < 4 * ns);
}

static int cmp_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

timing bench_time(bench_fn fn, void *ctx, int warmup, int reps) {
    static cudaEvent_t ev[257];
    static int ev_init = 0;
    if (!ev_init) {
        for (int i = 0; i < 257; i++) CK(cudaEventCreate(&ev[i]));
        ev_init = 1;
    }
    if (reps > 256) reps = 256;
    for (int i = 0; i < warmup; i++) fn(ctx, i);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(g_stream));
    spin_kernel<<<1, 1, 0, g_stream>>>(2000000LL + 20000LL * reps);
    CK(cudaGetLastError());
    CK(cudaEventRecord(ev[0], g_stream));
    for (int i = 0; i < reps; i++) {
        fn(ctx, warmup + i);
        CK(cudaEventRecord(ev[i + 1], g_stream));
    }
    CK(cudaStreamSynchronize(g_stream));
    CK(cudaGetLastError());
    float t[256];
    for (int i = 0; i < reps; i++) CK(cudaEventElapsedTime(&t[i], ev[i], ev[i + 1]));
    qsort(t, reps, sizeof(float), cmp_f);
    timing r = {1000.0 * t[reps / 2], 1000.0 * t[0]};
    return r;
}

/* ==== Results ==== */

typedef struct result_row {
    char op[24], shape[40];
    timing t;
    double gbs, rel;
    int fail;
} result_row;
static result_row g_rows[512];
static int g_nrows = 0;

void result_add(const char *op, const char *shape, timing t, double bytes, double rel, int fail) {
    if (g_nrows >= (int)(sizeof g_rows / sizeof g_rows[0])) return;
    result_row *r = &g_rows[g_nrows++];
    snprintf(r->op, sizeof r->op, "%s", op);
    snprintf(r->shape, sizeof r->shape, "%s", shape);
    r->t = t;
    r->gbs = bytes / (t.med_us * 1e-6) / 1e9;
    r->rel = rel;
    r->fail = fail;
    logf_("  time %-14s %-30s median %9.2f us  min %9.2f us  %7.0f GB/s  %5.1f%% of copy\n", op,
          shape, t.med_us, t.min_us, r->gbs, 100.0 * r->gbs / g_copy_gbs);
}

void result_print_table(void) {
    logf_("\n%-14s %-30s %10s %10s %8s %6s %9s %s\n", "op", "shape", "med_us", "min_us", "GB/s",
          "%copy", "rel_err", "check");
    for (int i = 0; i < g_nrows; i++) {
        result_row *r = &g_rows[i];
        char rel[16];
        if (r->rel < 0)
            snprintf(rel, sizeof rel, "-");
        else
            snprintf(rel, sizeof rel, "%.2e", r->rel);
        logf_("%-14s %-30s %10.2f %10.2f %8.0f %6.1f %9s %s\n", r->op, r->shape, r->t.med_us,
              r->t.min_us, r->gbs, 100.0 * r->gbs / g_copy_gbs, rel, r->fail ? "FAIL" : "ok");
    }
    logf_("copy bandwidth (D2D, read+write): %.0f GB/s; checks failed: %d\n", g_copy_gbs, g_fail);
}

int check_report(const char *what, double rel, double max_abs, size_t n_nan, double tol) {
    int fail = !(rel <= tol) || n_nan > 0;
    logf_("  check %-58s rel %.3e  max_abs %.3e  unwritten/NaN %zu  tol %.0e  %s\n", what, rel,
          max_abs, n_nan, tol, fail ? "FAIL" : "ok");
    g_fail += fail;
    return fail;
}

/* ==== Copy roofline ==== */

typedef struct copy_ctx {
    void *src, *dst;
    size_t bytes;
} copy_ctx;
static void copy_rep(void *c, int rep) {
    (void)rep;
    copy_ctx *x = (copy_ctx *)c;
    CK(cudaMemcpyAsync(x->dst, x->src, x->bytes, cudaMemcpyDeviceToDevice, g_stream));
}

static void measure_copy(void) {
    copy_ctx c;
    c.bytes = (size_t)2 << 30;
    c.src = dmalloc(c.bytes);
    c.dst = dmalloc(c.bytes);
    fill_f32((float *)c.src, c.bytes / 4, next_seed(), 1.0f);
    timing t = bench_time(copy_rep, &c, 2, 10);
    g_copy_gbs = 2.0 * c.bytes / (t.med_us * 1e-6) / 1e9;
    logf_("copy roofline: D2D cudaMemcpy of %zu MiB: median %.1f us -> %.0f GB/s (read+write)\n",
          c.bytes >> 20, t.med_us, g_copy_gbs);
    CK(cudaFree(c.src));
    CK(cudaFree(c.dst));
}

/* ==== GEMV vs cuBLASLt ==== */

#define GEMV_MAX_SETS 8
typedef struct gemv_ctx {
    int N, K, R, nsets, x_dt, y_dt;
    uint16_t *W[GEMV_MAX_SETS];
    uint16_t *wh; /* host copy of W[0] for the references */
    void *x[GEMV_MAX_SETS], *y[GEMV_MAX_SETS]; /* x [8, K] (either dtype), y [8, N] fp32 size */
    /* cuBLASLt plan for the current (R, y_dt) */
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
    void *ws;
    size_t ws_bytes;
    int lt_bad; /* cublasLtMatmul failed for the current plan */
} gemv_ctx;

static void gemv_rep(void *c, int rep) {
    gemv_ctx *g = (gemv_ctx *)c;
    int s = rep % g->nsets;
    CKL(cuda_gemv_bf16(g->W[s], g->x[s], g->x_dt, g->y[s], g->y_dt, g->R, g->N, g->K, g_stream));
}

static void lt_rep(void *c, int rep) {
    gemv_ctx *g = (gemv_ctx *)c;
    int s = rep % g->nsets;
    const float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t st = cublasLtMatmul(g->lt, g->desc, &alpha, g->W[s], g->la, g->x[s], g->lb,
                                       &beta, g->y[s], g->ld, g->y[s], g->ld, &g->algo, g->ws,
                                       g->ws_bytes, g_stream);
    if (st != CUBLAS_STATUS_SUCCESS && !g->lt_bad) {
        logf_("  cublasLtMatmul failed: status %d (comparison skipped)\n", (int)st);
        g->lt_bad = 1; /* the peer is optional: report and go on, do not abort the run */
    }
}

/* Y[R, N] = X[R, K] W[N, K]^T as column-major D[N, R] = op(A)[N, K] B[K, R] with A = W
 * (col-major K x N, transposed) and B = X (col-major K x R): the "TN" case cuBLAS likes. */
static int lt_plan(gemv_ctx *g) {
    cudaDataType_t yt = g->y_dt == CUDA_OPS_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    if (cublasLtMatmulDescCreate(&g->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F)) return -1;
    cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    if (cublasLtMatrixLayoutCreate(&g->la, CUDA_R_16BF, g->K, g->N, g->K) ||
        cublasLtMatrixLayoutCreate(&g->lb, CUDA_R_16BF, g->K, g->R, g->K) ||
        cublasLtMatrixLayoutCreate(&g->ld, yt, g->N, g->R, g->N))
        return -1;
    cublasLtMatmulPreference_t pref;
    if (cublasLtMatmulPreferenceCreate(&pref)) return -1;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                         &g->ws_bytes, sizeof g->ws_bytes);
    cublasLtMatmulHeuristicResult_t res;
    int n = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(g->lt, g->desc, g->la, g->lb, g->ld, g->ld,
                                                       pref, 1, &res, &n);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || n < 1) return -1;
    g->algo = res.algo;
    return 0;
}

static void lt_unplan(gemv_ctx *g) {
    cublasLtMatrixLayoutDestroy(g->la);
    cublasLtMatrixLayoutDestroy(g->lb);
    cublasLtMatrixLayoutDestroy(g->ld);
    cublasLtMatmulDescDestroy(g->desc);
}

/* Weight sets for g->N x g->K (enough copies that the rotation spans >= 4x the 60 MB L2),
 * x and y for up to 8 rows each, and a host copy of set 0; returns the bytes of one set. */
static size_t gemv_sets_alloc(gemv_ctx *g) {
    const size_t wbytes = (size_t)g->N * g->K * 2;
    g->nsets = (int)((240e6 + wbytes - 1) / wbytes);
    g->nsets = g->nsets < 2 ? 2 : g->nsets > GEMV_MAX_SETS ? GEMV_MAX_SETS : g->nsets;
    for (int s = 0; s < g->nsets; s++) {
        g->W[s] = (uint16_t *)dmalloc(wbytes);
        fill_bf16(g->W[s], (size_t)g->N * g->K, next_seed(), 1.0f);
        g->x[s] = dmalloc((size_t)8 * g->K * 4);
        g->y[s] = dmalloc((size_t)8 * g->N * 4);
    }
    g->wh = (uint16_t *)d2h(g->W[0], wbytes);
    return wbytes;
}

static void gemv_sets_free(gemv_ctx *g) {
    for (int s = 0; s < g->nsets; s++) {
        CK(cudaFree(g->W[s]));
        CK(cudaFree(g->x[s]));
        CK(cudaFree(g->y[s]));
    }
    free(g->wh);
}

/* Fresh x on every set, reference on set 0, then the GEMV (and cuBLASLt) checked on set 0. */
static double gemv_check(gemv_ctx *g, int use_lt, const char *label) {
    const int xb = g->x_dt == CUDA_OPS_BF16, yb = g->y_dt == CUDA_OPS_BF16;
    for (int s = 0; s < g->nsets; s++) {
        if (xb)
            fill_bf16((uint16_t *)g->x[s], (size_t)g->R * g->K, next_seed(), 1.0f);
        else
            fill_f32((float *)g->x[s], (size_t)g->R * g->K, next_seed(), 1.0f);
    }
    double *xd = d2h_f64(g->x[0], (size_t)g->R * g->K, xb);
    float *xf = (float *)malloc((size_t)g->R * g->K * sizeof(float));
    for (size_t i = 0; i < (size_t)g->R * g->K; i++) xf[i] = (float)xd[i];
    double *ref = (double *)malloc((size_t)g->R * g->N * sizeof(double));
    ref_gemv(g->wh, xf, ref, g->R, g->N, g->K);
    double tol = yb ? 8e-3 : 1e-4, rel = 0;
    for (int pass = 0; pass < 1 + use_lt; pass++) {
        poison(g->y[0], (size_t)g->R * g->N * 4);
        if (pass == 0)
            gemv_rep(g, 0);
        else
            lt_rep(g, 0);
        CK(cudaStreamSynchronize(g_stream));
        if (pass == 1 && g->lt_bad) break;
        double *got = d2h_f64(g->y[0], (size_t)g->R * g->N, yb);
        size_t nan;
        double mx, r = ref_rel_err(ref, got, (size_t)g->R * g->N, &nan, &mx);
        char what[96];
        snprintf(what, sizeof what, "%s %s R=%d x=%s y=%s", pass ? "cublasLt" : "gemv", label,
                 g->R, xb ? "bf16" : "f32", yb ? "bf16" : "f32");
        check_report(what, r, mx, nan, tol);
        if (pass == 0) rel = r;
        free(got);
    }
    free(xd);
    free(xf);
    free(ref);
    return rel;
}

static void suite_gemv(void) {
    struct { const char *name; int N, K, full; } shapes[] = {
        {"odd 1003x4104", 1003, 4104, 1},
        {"qkv/o 4096x4096", 4096, 4096, 1},
        {"gate/up 14336x4096", 14336, 4096, 1},
        {"down 4096x14336", 4096, 14336, 1},
        {"lm_head 128256x4096", 128256, 4096, 0},
    };
    gemv_ctx g;
    memset(&g, 0, sizeof g);
    lt_open(&g.lt, &g.ws, &g.ws_bytes);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        g.N = shapes[si].N;
        g.K = shapes[si].K;
        const size_t wbytes = gemv_sets_alloc(&g);
        logf_("\n== gemv %s (%d weight sets, %.1f MB each)\n", shapes[si].name, g.nsets,
              wbytes / 1e6);
        /* Correctness over the row counts and dtype pairs (masking, chunked x staging). */
        struct { int R, x_dt, y_dt; } checks[] = {
            {1, CUDA_OPS_F32, CUDA_OPS_BF16}, {2, CUDA_OPS_BF16, CUDA_OPS_BF16},
            {3, CUDA_OPS_F32, CUDA_OPS_F32},  {5, CUDA_OPS_BF16, CUDA_OPS_F32},
            {8, CUDA_OPS_F32, CUDA_OPS_F32},
        };
        for (size_t ci = 0; ci < sizeof checks / sizeof checks[0]; ci++) {
            if (!shapes[si].full && checks[ci].R != 3) continue; /* lm_head: CPU time */
            g.R = checks[ci].R;
            g.x_dt = checks[ci].x_dt;
            g.y_dt = checks[ci].y_dt;
            gemv_check(&g, 0, shapes[si].name);
        }
        if (g.N == 1003) {
            gemv_sets_free(&g);
            continue;
        }
        /* Timed configurations: x bf16 (the engine's activations), R = 1 and 8, next to
         * cuBLASLt on the same buffers; x fp32 at R = 8 for the chunked-staging path. */
        const int y_dt = g.N > 100000 ? CUDA_OPS_F32 : CUDA_OPS_BF16; /* logits stay fp32 */
        struct { int R, x_dt, lt; } timed[] = {
            {1, CUDA_OPS_BF16, 1}, {8, CUDA_OPS_BF16, 1}, {8, CUDA_OPS_F32, 0}};
        for (size_t ti = 0; ti < sizeof timed / sizeof timed[0]; ti++) {
            g.R = timed[ti].R;
            g.x_dt = timed[ti].x_dt;
            g.y_dt = y_dt;
            g.lt_bad = 0;
            const int lt_ok = timed[ti].lt && lt_plan(&g) == 0;
            if (timed[ti].lt && !lt_ok) logf_("  cublasLt: no algorithm for this shape\n");
            double rel = gemv_check(&g, lt_ok, shapes[si].name);
            const double bytes = (double)wbytes + (double)g.R * g.K * (g.x_dt == CUDA_OPS_BF16 ? 2 : 4) +
                                 (double)g.R * g.N * (y_dt == CUDA_OPS_BF16 ? 2 : 4);
            char shape[48];
            snprintf(shape, sizeof shape, "%dx%d R=%d", g.N, g.K, g.R);
            char op[24];
            snprintf(op, sizeof op, "gemv x%s", g.x_dt == CUDA_OPS_BF16 ? "bf16" : "f32");
            int fails_before = g_fail;
            timing t = bench_time(gemv_rep, &g, 5, 30);
            result_add(op, shape, t, bytes, rel, g_fail > fails_before);
            if (lt_ok) {
                t = bench_time(lt_rep, &g, 5, 30);
                if (!g.lt_bad) result_add("cublasLt", shape, t, bytes, -1, 0);
                lt_unplan(&g);
            }
        }
        gemv_sets_free(&g);
    }
    CK(cudaFree(g.ws));
    cublasLtDestroy(g.lt);
}

/* ==== GEMV K split sweep: the decode shapes at one row (fp32 x and y, as the engine runs
 * them), each K split of the CUDA-core kernel and the per-shape choice (auto) ==== */
static void suite_gemv_ks(void) {
    struct { const char *name; int N, K; } shapes[] = {
        {"8B qkv", 6144, 4096},     {"8B o", 4096, 4096},    {"8B gate+up", 28672, 4096},
        {"8B down", 4096, 14336},   {"1B qkv", 3072, 2048},  {"1B o", 2048, 2048},
        {"1B gate+up", 16384, 2048}, {"1B down", 2048, 8192},
    };
    gemv_ctx g;
    memset(&g, 0, sizeof g);
    const int ks_prev = cuda_gemv_ksplit();
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        g.N = shapes[si].N;
        g.K = shapes[si].K;
        g.R = 1;
        g.x_dt = g.y_dt = CUDA_OPS_F32;
        const size_t wbytes = gemv_sets_alloc(&g);
        logf_("\n== gemv K split %s %dx%d R=1 (%d weight sets)\n", shapes[si].name, g.N, g.K,
              g.nsets);
        /* the last: auto with the persistent CTAs (MLXCEL_GEMV_PERSIST) */
        static const int ks_list[] = {0, 1, 2, 4, 0};
        for (int i = 0; i < 5; i++) {
            cuda_set_gemv_ksplit(ks_list[i]);
            cuda_set_gemv_persist(i == 4);
            char label[48], op[24];
            snprintf(label, sizeof label, "%s ks %d%s", shapes[si].name, ks_list[i],
                     i == 4 ? " persist" : "");
            const int fails_before = g_fail;
            const double rel = gemv_check(&g, 0, label);
            snprintf(op, sizeof op, i == 4 ? "gemv persist" : ks_list[i] ? "gemv ks=%d"
                                                                          : "gemv ks=auto",
                     ks_list[i]);
            char shape[48];
            snprintf(shape, sizeof shape, "%s %dx%d", shapes[si].name, g.N, g.K);
            timing t = bench_time(gemv_rep, &g, 5, 30);
            result_add(op, shape, t, (double)wbytes + g.K * 4.0 + g.N * 4.0, rel,
                       g_fail > fails_before);
        }
        gemv_sets_free(&g);
    }
    cuda_set_gemv_ksplit(ks_prev);
    cuda_set_gemv_persist(0);
}

/* ==== main ==== */

int main(int argc, char **argv) {
    const char *only = NULL, *log_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--log") && i + 1 < argc)
            log_path = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--only gemv|gemvtc|gemvks|norm|rope|attn|argmax|qmv|"
                            "stream] [--log FILE]\n", argv[0]);
            return 2;
        }
    }
    if (log_path && !(g_log = fopen(log_path, "w"))) {
        fprintf(stderr, "cannot open log %s\n", log_path);
        return 2;
    }
    int dev = 0;
    CK(cudaSetDevice(dev));
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, dev));
    g_sm_count = p.multiProcessorCount;
    int drv = 0, rt = 0;
    CK(cudaDriverGetVersion(&drv));
    CK(cudaRuntimeGetVersion(&rt));
    logf_("device: %s, cc %d.%d, %d SMs, L2 %d MB, %.1f GB, driver %d, runtime %d\n", p.name,
          p.major, p.minor, p.multiProcessorCount, p.l2CacheSize >> 20, p.totalGlobalMem / 1e9,
          drv, rt);
    /* A blocking stream: it orders with the synchronous cudaMemcpy/cudaMemset calls (legacy
     * default stream) that the checks use to plant values and upload tables. */
    CK(cudaStreamCreate(&g_stream));
    measure_copy();

    if (!only || !strcmp(only, "gemv")) suite_gemv();
    if (!only || !strcmp(only, "norm")) suite_rmsnorm();
    if (!only || !strcmp(only, "rope")) suite_rope();
    if (!only || !strcmp(only, "attn")) suite_attention();
    if (!only || !strcmp(only, "argmax")) suite_argmax();
    if (!only || !strcmp(only, "qmv")) suite_qmv();
    if (!only || !strcmp(only, "gemvtc")) suite_gemvtc();
    if (!only || !strcmp(only, "gemvks")) suite_gemv_ks();
    if (!only || !strcmp(only, "stream")) suite_stream();

    result_print_table();
    if (g_log) fclose(g_log);
    return g_fail ? 1 : 0;
}
