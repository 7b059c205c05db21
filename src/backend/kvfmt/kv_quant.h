/* KV cache row formats (--cache-type-k / --cache-type-v): fp32 rows to and from the pool element
 * types f32, f16, bf16, and ggml's q8_0 and q4_0 blocks (MX_Q8_0 / MX_Q4_0, base/dtype.h).
 *
 * q8_0, per block of 32 values x[j] (ggml's quantize_row_q8_0_ref):
 *     d = amax / 127 (amax = max |x[j]|), id = d ? 1 / d : 0, q[j] = roundf(x[j] * id)
 *     (halves away from zero); stored: fp16(d) (round to nearest even), q as int8.
 *     value = q[j] * float(fp16(d)).
 * q4_0, per block (ggml's quantize_row_q4_0_ref):
 *     max = the signed x[j] of largest magnitude (the first one on a tie), d = max / -8,
 *     id = d ? 1 / d : 0, q[j] = min(15, (int)(x[j] * id + 8.5)); stored: fp16(d), then 16
 *     bytes, byte j = q[j] | q[j + 16] << 4. value = (q[j] - 8) * float(fp16(d)).
 * All conversions are pure functions of the values (no state), so a row's stored bits depend
 * only on that row: writing the same K/V gives the same cache whatever the batch. */
#ifndef MLXCEL_BACKEND_KVFMT_KV_QUANT_H
#define MLXCEL_BACKEND_KVFMT_KV_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"

/* Bytes of n values (a multiple of mx_dtype_block(t)) stored as t. */
static inline size_t kvq_row_bytes(mx_dtype t, int64_t n) {
    return (size_t)(n / mx_dtype_block(t)) * mx_dtype_size(t);
}

/* n values (multiple of MX_QBLOCK) <-> n / 32 blocks. */
void kvq_quantize_q8_0(const float *x, void *y, int64_t n);
void kvq_quantize_q4_0(const float *x, void *y, int64_t n);
void kvq_dequantize_q8_0(const void *x, float *y, int64_t n);
void kvq_dequantize_q4_0(const void *x, float *y, int64_t n);

/* TurboQuant types (MX_TQ2..4): their code bits; 0 for every other type. Their rows hold a
 * head's rotated values (backend/kvfmt/kv_turbo.h), so a reader rotates q and rotates the output back. */
static inline int kvq_turbo_bits(mx_dtype t) {
    return t == MX_TQ2 ? 2 : t == MX_TQ3 ? 3 : t == MX_TQ4 ? 4 : 0;
}

/* dst (n values of type t: f32, f16, bf16, q8_0, q4_0) = src. f16 / bf16: round to nearest
 * even. Not for the TurboQuant types (a head is their unit): kvq_from_f32_heads. */
void kvq_from_f32(void *dst, mx_dtype t, const float *src, int64_t n);
/* n_heads heads of head_dim values each, any type (TurboQuant: each head rotated and coded). */
void kvq_from_f32_heads(void *dst, mx_dtype t, const float *src, int n_heads, int head_dim);
/* dst[0..n) = the values of src (type t), exactly (every stored value is an fp32 number); for
 * the TurboQuant types the values in the rotated space (s * c[code]). */
void kvq_to_f32(float *dst, const void *src, mx_dtype t, int64_t n);
/* Tests only: kvq_to_f32 takes the scalar path even where AVX2 + F16C exist (same bits; the
 * TurboQuant types: kv_turbo.c's portable table path). */
void kvq_force_ref(bool on);

#endif
