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

/* ==== bf16 GEMV kernel (x86-64 AVX2 + FMA, chosen at run time) ====
 * One weight row against up to 4 input rows per pass: 16 bf16 weights widen to two fp32
 * vectors by a 16-bit shift and feed two FMA accumulators per input row. A row's sum order
 * depends only on K, never on how many rows share the call. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX2_KERNEL 1

__attribute__((target("avx2,fma"))) static inline float hsum256(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    return _mm_cvtss_f32(lo);
}

/* out[r] = dot(x[r], w) for r < n (n <= 4); x rows fp32, w bf16 [K]. */
__attribute__((target("avx2,fma"))) static void dot_bf16_avx2(const float *const *x, int n,
                                                              const uint16_t *w, int64_t K,
                                                              float *out) {
    __m256 acc[4][2];
    for (int r = 0; r < 4; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= K; i += 16) {
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(w + i));
        const __m256 w0 = _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(raw)), 16));
        const __m256 w1 = _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(raw, 1)), 16));
        for (int r = 0; r < n; r++) {
            acc[r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(x[r] + i), w0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(_mm256_loadu_ps(x[r] + i + 8), w1, acc[r][1]);
        }
    }
    for (int r = 0; r < n; r++) {
        float s = hsum256(_mm256_add_ps(acc[r][0], acc[r][1]));
        for (int64_t k = i; k < K; k++) s += x[r][k] * mx_bf16_to_f32(w[k]);
        out[r] = s;
    }
}

static int have_avx2(void) {
    static int cached = -1;
    if (cached < 0) cached = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return cached;
}
#endif

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
    /* small products run on the calling thread: waking the team costs more than they do */
#pragma omp parallel if (N * K * n >= (1 << 16))
    {
        float *wrow = NULL; /* [K] fp32 copy of one weight row (non-AVX2 paths) */
        if (w->dtype != MX_F32) wrow = malloc((size_t)K * sizeof(float));
        /* dynamic chunks: a thread slowed by other load on the machine does not hold the
         * others at the closing barrier */
#pragma omp for schedule(dynamic, 32)
        for (int64_t j = 0; j < N; j++) {
            const float *wr;
#ifdef HAVE_AVX2_KERNEL
            if (w->dtype == MX_BF16 && have_avx2()) {
                const uint16_t *wb = cpu_row_ptr(w, j);
                for (int64_t r0 = 0; r0 < n; r0 += 4) {
                    const int m = n - r0 < 4 ? (int)(n - r0) : 4;
                    const float *xs[4];
                    float o4[4];
                    for (int r = 0; r < m; r++) xs[r] = cpu_row_ptr(x, r0 + r);
                    dot_bf16_avx2(xs, m, wb, K, o4);
                    for (int r = 0; r < m; r++)
                        ((float *)cpu_row_ptr(out, r0 + r))[j] = o4[r] + (bias32 ? bias32[j] : 0.0f);
                }
                continue;
            }
#endif
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
