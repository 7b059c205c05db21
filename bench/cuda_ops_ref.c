/* CPU references for the decode kernels: float64 accumulation over the exact bf16/fp32
 * inputs the kernels read, parallel over output rows with OpenMP. */
#include "cuda_ops_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ==== bf16 ==== */

float ref_bf16_to_f32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t ref_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* ==== GEMV / RMSNorm ==== */

void ref_gemv(const uint16_t *W, const float *x, double *y, int R, int N, int K) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        double acc[32] = {0}; /* R <= 32 */
        const uint16_t *w = W + (size_t)n * K;
        for (int k = 0; k < K; k++) {
            double wv = ref_bf16_to_f32(w[k]);
            for (int r = 0; r < R; r++) acc[r] += wv * x[(size_t)r * K + k];
        }
        for (int r = 0; r < R; r++) y[(size_t)r * N + n] = acc[r];
    }
}

void ref_rmsnorm(const float *x, const uint16_t *w, float offset, float eps, double *y, int R,
                 int H) {
    for (int r = 0; r < R; r++) {
        const float *xr = x + (size_t)r * H;
        double ss = 0;
        for (int i = 0; i < H; i++) ss += (double)xr[i] * xr[i];
        double inv = 1.0 / sqrt(ss / H + eps);
        for (int i = 0; i < H; i++)
            y[(size_t)r * H + i] = xr[i] * inv * ((double)ref_bf16_to_f32(w[i]) + offset);
    }
}

/* ==== RoPE ==== */

void ref_rope(const uint16_t *in, const float *inv_freq, int pos, int D, double *out) {
    int half = D / 2;
    for (int i = 0; i < half; i++) {
        float ang = (float)pos * inv_freq[i]; /* fp32, as HF */
        double c = cos((double)ang), s = sin((double)ang);
        double x1 = ref_bf16_to_f32(in[i]), x2 = ref_bf16_to_f32(in[i + half]);
        out[i] = x1 * c - x2 * s;
        out[i + half] = x2 * c + x1 * s;
    }
}

/* ==== Attention ==== */

void ref_attn(const uint16_t *q, const uint16_t *k_cache, const uint16_t *v_cache,
              const int32_t *page_row, int len, int Hq, int Hkv, int D, int BS, float scale,
              double *o) {
    const int G = Hq / Hkv;
#pragma omp parallel for schedule(static)
    for (int h = 0; h < Hq; h++) {
        const int kh = h / G;
        double *s = malloc((size_t)len * sizeof(double));
        double mx = -INFINITY;
        for (int t = 0; t < len; t++) {
            size_t base = (((size_t)page_row[t / BS] * BS + t % BS) * Hkv + kh) * D;
            double d = 0;
            for (int i = 0; i < D; i++)
                d += (double)ref_bf16_to_f32(q[(size_t)h * D + i]) * ref_bf16_to_f32(k_cache[base + i]);
            s[t] = d * scale;
            if (s[t] > mx) mx = s[t];
        }
        double sum = 0;
        for (int t = 0; t < len; t++) {
            s[t] = exp(s[t] - mx);
            sum += s[t];
        }
        for (int i = 0; i < D; i++) o[(size_t)h * D + i] = 0;
        for (int t = 0; t < len; t++) {
            size_t base = (((size_t)page_row[t / BS] * BS + t % BS) * Hkv + kh) * D;
            double p = s[t] / sum;
            for (int i = 0; i < D; i++) o[(size_t)h * D + i] += p * ref_bf16_to_f32(v_cache[base + i]);
        }
        free(s);
    }
}

/* ==== Argmax, error ==== */

void ref_argmax(const float *logits, int R, int V, int32_t *out) {
    for (int r = 0; r < R; r++) {
        const float *x = logits + (size_t)r * V;
        int best = -1;
        for (int i = 0; i < V; i++)
            if (!isnan(x[i]) && (best < 0 || x[i] > x[best])) best = i;
        out[r] = best < 0 ? 0 : best;
    }
}

double ref_rel_err(const double *ref, const double *got, size_t n, size_t *n_nan,
                   double *max_abs) {
    double num = 0, den = 0, mx = 0;
    size_t nan = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(got[i])) nan++;
        double d = got[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
        if (fabs(d) > mx || isnan(d)) mx = fabs(d);
    }
    if (n_nan) *n_nan = nan;
    if (max_abs) *max_abs = mx;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}
