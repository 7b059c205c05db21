/* CPU matmul: out[n, N] = x[n, K] @ w[N, K]^T (+ bias).
 * Few rows (decode): OpenMP over output rows, each weight row read once from its stored dtype
 * (bf16/fp16/fp32) for all input rows, fp32 dot in a fixed order.
 * Many rows (prefill): the weight is converted to fp32 in a scratch buffer (one pass over the
 * weight, small next to n*N*K flops) and cblas_sgemm does the product. */
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"

static int g_blas_min_rows = 16;

void cpu_backend_set_blas_min_rows(int rows) { g_blas_min_rows = rows > 0 ? rows : 16; }
int cpu_backend_blas_min_rows(void) { return g_blas_min_rows; }

/* ==== Scratch ==== */
/* Grown on demand; the engine drives one forward at a time per process. */
static float *g_w32;         /* [N, K] fp32 copy of the current weight */
static size_t g_w32_cap;

static float *scratch_w32(size_t n) {
    if (n > g_w32_cap) {
        free(g_w32);
        g_w32 = malloc(n * sizeof(float));
        g_w32_cap = g_w32 ? n : 0;
    }
    return g_w32;
}

/* ==== GEMV path ==== */
static void matmul_gemv(mx_tensor *out, const mx_tensor *x, const mx_tensor *w, const mx_tensor *bias) {
    const int64_t n = x->shape[0], K = x->shape[1], N = w->shape[0];
    const float *bias32 = NULL;
    float *btmp = NULL;
    if (mx_tensor_present(bias)) {
        if (bias->dtype == MX_F32) {
            bias32 = bias->data;
        } else {
            btmp = malloc((size_t)N * sizeof(float));
            cpu_row_to_f32(btmp, bias->data, bias->dtype, N);
            bias32 = btmp;
        }
    }
#pragma omp parallel
    {
        float *wrow = NULL; /* [K] fp32 copy of one weight row */
        if (w->dtype != MX_F32) wrow = malloc((size_t)K * sizeof(float));
        /* dynamic chunks: a thread slowed by other load on the machine does not hold the
         * others at the closing barrier */
#pragma omp for schedule(dynamic, 32)
        for (int64_t j = 0; j < N; j++) {
            const float *wr;
            if (w->dtype == MX_F32) {
                wr = (const float *)cpu_row_ptr(w, j);
            } else {
                cpu_row_to_f32(wrow, cpu_row_ptr(w, j), w->dtype, K);
                wr = wrow;
            }
            for (int64_t r = 0; r < n; r++) {
                float s = cpu_dot_f32((const float *)cpu_row_ptr(x, r), wr, K);
                if (bias32) s += bias32[j];
                ((float *)cpu_row_ptr(out, r))[j] = s;
            }
        }
        free(wrow);
    }
    free(btmp);
}

/* ==== BLAS path ==== */
static void matmul_blas(mx_tensor *out, const mx_tensor *x, const mx_tensor *w, const mx_tensor *bias) {
    const int64_t n = x->shape[0], K = x->shape[1], N = w->shape[0];
    const float *w32;
    int64_t ldw;
    if (w->dtype == MX_F32) {
        w32 = w->data;
        ldw = w->stride[0];
    } else {
        float *s = scratch_w32((size_t)N * (size_t)K);
        if (!s) { /* out of memory for the scratch: the GEMV path needs none */
            matmul_gemv(out, x, w, bias);
            return;
        }
#pragma omp parallel for schedule(static)
        for (int64_t j = 0; j < N; j++) cpu_row_to_f32(s + j * K, cpu_row_ptr(w, j), w->dtype, K);
        w32 = s;
        ldw = K;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)N, (int)K, 1.0f, x->data,
                (int)x->stride[0], w32, (int)ldw, 0.0f, out->data, (int)out->stride[0]);
    if (mx_tensor_present(bias)) {
        float *b32 = malloc((size_t)N * sizeof(float));
        if (!b32) return;
        cpu_row_to_f32(b32, bias->data, bias->dtype, N);
        for (int64_t r = 0; r < n; r++) {
            float *o = cpu_row_ptr(out, r);
            for (int64_t j = 0; j < N; j++) o[j] += b32[j];
        }
        free(b32);
    }
}

void cpu_matmul(mx_tensor *out, const mx_tensor *x, const mx_tensor *w, const mx_tensor *bias) {
    if (x->shape[0] <= 0) return;
    if (x->shape[0] >= g_blas_min_rows)
        matmul_blas(out, x, w, bias);
    else
        matmul_gemv(out, x, w, bias);
}
