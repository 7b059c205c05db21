/* cuda_ops_bench suite "gemvtc": the tensor-core GEMV (cuda_gemv_tc, gemv_tc.cu) for 1..32
 * rows with bf16 x, every launch variant, next to what the engine ran before on the same
 * buffers: cuBLASLt (the engine's descriptor: bf16 in, fp32 out, the heuristic's algorithm,
 * split-K reduce included) and, up to 8 rows, the current GEMV kernels (cuda_gemv_bf16, fp32
 * x as the engine passes it). Shapes: the Llama-3.1-8B and -3.2-1B decode projections.
 *
 * Checks: variant 0 against the CPU reference (fp64 sums of the same bf16 inputs) on the
 * smaller shapes at every row count; every other variant against variant 0 (same inputs,
 * relative L2 over all outputs: only the k slicing differs, ~1e-6). */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_lt.h"
#include "backend/cuda/cuda_ops.h"
#include "cuda_ops_bench.h"
#include "cuda_ops_ref.h"

#define GT_MAX_SETS 8
#define GT_MAX_ROWS 32

typedef struct gt_ctx {
    int N, K, R, nsets, variant;
    uint16_t *W[GT_MAX_SETS];
    uint16_t *xb[GT_MAX_SETS]; /* [32, K] bf16 */
    float *xf[GT_MAX_SETS];    /* the same values as fp32 (the old GEMV's input) */
    float *y[GT_MAX_SETS];     /* [32, N] */
    cublasLtHandle_t lt;
    void *ws;
    size_t ws_bytes;
    cu_lt_desc d;
} gt_ctx;

static void gt_tc(void *p, int rep) {
    gt_ctx *c = (gt_ctx *)p;
    const int s = rep % c->nsets;
    cuda_gemv_segs segs;
    memset(&segs, 0, sizeof segs);
    segs.n = 1, segs.W[0] = c->W[s], segs.y[0] = c->y[s], segs.N[0] = c->N;
    CKL(cuda_gemv_tc(&segs, c->xb[s], c->R, c->K, c->variant, g_stream));
}

static void gt_old(void *p, int rep) {
    gt_ctx *c = (gt_ctx *)p;
    const int s = rep % c->nsets;
    CKL(cuda_gemv_bf16(c->W[s], c->xf[s], CUDA_OPS_F32, c->y[s], CUDA_OPS_F32, c->R, c->N, c->K,
                       g_stream));
}

static void gt_lt(void *p, int rep) {
    gt_ctx *c = (gt_ctx *)p;
    const int s = rep % c->nsets;
    const float alpha = 1.0f, beta = 0.0f;
    if (cublasLtMatmul(c->lt, c->d.op, &alpha, c->W[s], c->d.a, c->xb[s], c->d.b, &beta, c->y[s],
                       c->d.c, c->y[s], c->d.c, &c->d.algo, c->ws, c->ws_bytes, g_stream)) {
        fprintf(stderr, "cublasLtMatmul failed\n");
        exit(2);
    }
}

__global__ void gt_widen(float *o, const uint16_t *b, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        o[i] = __uint_as_float((uint32_t)b[i] << 16);
}

static double *gt_out(gt_ctx *c) {
    return d2h_f64(c->y[0], (size_t)c->R * c->N, 0);
}

static double rel_l2(const double *a, const double *b, size_t n, size_t *nan) {
    double num = 0, den = 0;
    *nan = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) (*nan)++;
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

void suite_gemvtc(void) {
    struct { const char *name; int N, K, ref; } shapes[] = {
        {"8b qkv", 6144, 4096, 1},      {"8b o", 4096, 4096, 1},
        {"8b gate_up", 28672, 4096, 0}, {"8b down", 4096, 14336, 0},
        {"8b lm_head", 128256, 4096, 0}, {"1b qkv", 3072, 2048, 1},
        {"1b gate_up", 16384, 2048, 0}, {"1b down", 2048, 8192, 1},
    };
    const int rows_list[] = {1, 2, 4, 8, 16, 32};
    const int nv = cuda_gemv_tc_variants();
    gt_ctx c;
    memset(&c, 0, sizeof c);
    lt_open(&c.lt, &c.ws, &c.ws_bytes);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        c.N = shapes[si].N;
        c.K = shapes[si].K;
        const size_t wbytes = (size_t)c.N * c.K * 2;
        c.nsets = (int)((240e6 + wbytes - 1) / wbytes); /* rotation >= 4x the 60 MB L2 */
        c.nsets = c.nsets < 2 ? 2 : c.nsets > GT_MAX_SETS ? GT_MAX_SETS : c.nsets;
        for (int s = 0; s < c.nsets; s++) {
            c.W[s] = (uint16_t *)dmalloc(wbytes);
            fill_bf16(c.W[s], (size_t)c.N * c.K, next_seed(), 1.0f);
            c.xb[s] = (uint16_t *)dmalloc((size_t)GT_MAX_ROWS * c.K * 2);
            fill_bf16(c.xb[s], (size_t)GT_MAX_ROWS * c.K, next_seed(), 1.0f);
            c.xf[s] = (float *)dmalloc((size_t)GT_MAX_ROWS * c.K * 4);
            gt_widen<<<256, 256, 0, g_stream>>>(c.xf[s], c.xb[s], (size_t)GT_MAX_ROWS * c.K);
            CK(cudaGetLastError());
            c.y[s] = (float *)dmalloc((size_t)GT_MAX_ROWS * c.N * 4);
        }
        uint16_t *wh = shapes[si].ref ? (uint16_t *)d2h(c.W[0], wbytes) : NULL;
        logf_("\n== gemvtc %s %dx%d (%d weight sets, %.1f MB each)\n", shapes[si].name, c.N, c.K,
              c.nsets, wbytes / 1e6);
        for (size_t ri = 0; ri < sizeof rows_list / sizeof rows_list[0]; ri++) {
            c.R = rows_list[ri];
            const size_t ny = (size_t)c.R * c.N;
            const double bytes = (double)wbytes + (double)c.R * c.K * 2 + (double)ny * 4;
            char shape[48];
            snprintf(shape, sizeof shape, "%s R=%d", shapes[si].name, c.R);
            /* variant 0 first: checked against the CPU reference where affordable */
            double *y0 = NULL;
            for (int v = 0; v < nv; v++) {
                c.variant = v;
                poison(c.y[0], ny * 4);
                gt_tc(&c, 0);
                double *got = gt_out(&c);
                size_t nan = 0;
                double rel = -1;
                char what[96];
                if (v == 0) {
                    if (wh) {
                        double *xd = d2h_f64(c.xb[0], (size_t)c.R * c.K, 1);
                        float *xf = (float *)malloc((size_t)c.R * c.K * sizeof(float));
                        for (size_t i = 0; i < (size_t)c.R * c.K; i++) xf[i] = (float)xd[i];
                        double *ref = (double *)malloc(ny * sizeof(double));
                        ref_gemv(wh, xf, ref, c.R, c.N, c.K);
                        rel = rel_l2(got, ref, ny, &nan);
                        snprintf(what, sizeof what, "gemv_tc v0 %s vs CPU", shape);
                        check_report(what, rel, 0, nan, 1e-5);
                        free(xd);
                        free(xf);
                        free(ref);
                    }
                    y0 = got;
                } else {
                    rel = rel_l2(got, y0, ny, &nan);
                    snprintf(what, sizeof what, "gemv_tc v%d %s vs v0", v, shape);
                    check_report(what, rel, 0, nan, 1e-5);
                    free(got);
                }
                const int fails_before = g_fail;
                timing t = bench_time(gt_tc, &c, 5, 30);
                char op[24];
                snprintf(op, sizeof op, "gemv_tc v%d", v);
                result_add(op, shape, t, bytes, rel, g_fail > fails_before);
            }
            if (c.R <= 8) {
                poison(c.y[0], ny * 4);
                gt_old(&c, 0);
                double *got = gt_out(&c);
                size_t nan = 0;
                const double rel = rel_l2(got, y0, ny, &nan);
                char what[96];
                snprintf(what, sizeof what, "old gemv %s vs gemv_tc v0", shape);
                check_report(what, rel, 0, nan, 1e-2); /* fp32 x vs bf16 x: same values */
                free(got);
                timing t = bench_time(gt_old, &c, 5, 30);
                result_add("old gemv", shape, t, bytes, rel, 0);
            }
            memset(&c.d, 0, sizeof c.d);
            cu_lt_desc_make(&c.d, c.lt, c.N, c.K, c.R, c.K, c.N, c.ws_bytes, 0);
            if (c.d.ok) {
                poison(c.y[0], ny * 4);
                gt_lt(&c, 0);
                double *got = gt_out(&c);
                size_t nan = 0;
                const double rel = rel_l2(got, y0, ny, &nan);
                char what[96];
                snprintf(what, sizeof what, "cublasLt %s vs gemv_tc v0", shape);
                check_report(what, rel, 0, nan, 1e-4);
                free(got);
                timing t = bench_time(gt_lt, &c, 5, 30);
                result_add("cublasLt", shape, t, bytes, rel, 0);
            }
            cu_lt_desc_destroy(&c.d);
            free(y0);
        }
        free(wh);
        for (int s = 0; s < c.nsets; s++) {
            CK(cudaFree(c.W[s]));
            CK(cudaFree(c.xb[s]));
            CK(cudaFree(c.xf[s]));
            CK(cudaFree(c.y[s]));
        }
    }
    CK(cudaFree(c.ws));
    cublasLtDestroy(c.lt);
}
