/* CPU references for the decode kernels (float64 accumulation, OpenMP), used by
 * cuda_ops_bench. C-compatible; inputs are host copies of what the kernels read. */
#ifndef MLXCEL_BENCH_CUDA_OPS_REF_H
#define MLXCEL_BENCH_CUDA_OPS_REF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

float ref_bf16_to_f32(uint16_t b);
uint16_t ref_f32_to_bf16(float f);

/* y[r, n] = sum_k x[r, k] * W[n, k]; x fp32 (already widened) [R, K], W bf16 [N, K]. */
void ref_gemv(const uint16_t *W, const float *x, double *y, int R, int N, int K);

/* y = x * rsqrt(mean(x^2) + eps) * (w + offset); x fp32 [R, H]. */
void ref_rmsnorm(const float *x, const uint16_t *w, float offset, float eps, double *y, int R,
                 int H);

/* Neox RoPE of one head vector: angle = (float)pos * inv_freq[i] in fp32 (as HF), the
 * rotation in double. in, out: [D]. */
void ref_rope(const uint16_t *in, const float *inv_freq, int pos, int D, double *out);

/* Decode attention for one sequence over a paged cache (bf16 pools
 * [n_blocks, BS, Hkv, D]); q [Hq, D] bf16, o [Hq, D] double. */
void ref_attn(const uint16_t *q, const uint16_t *k_cache, const uint16_t *v_cache,
              const int32_t *page_row, int len, int Hq, int Hkv, int D, int BS, float scale,
              double *o);

/* First index of the maximum of each row, NaN skipped. */
void ref_argmax(const float *logits, int R, int V, int32_t *out);

/* ||got - ref|| / ||ref|| over n values (NaN anywhere gives NaN); *n_nan counts NaN in got
 * (unwritten outputs: they were poisoned with NaN). */
double ref_rel_err(const double *ref, const double *got, size_t n, size_t *n_nan,
                   double *max_abs);

#ifdef __cplusplus
}
#endif

#endif
