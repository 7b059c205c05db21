/* Helpers shared by the quant module's files (not part of the public API). */
#ifndef MLXCEL_QUANT_INTERNAL_H
#define MLXCEL_QUANT_INTERNAL_H

#include "backend/cpu/cpu_internal.h"
#include "quant/quant.h"

/* Element i of a float array stored in t (F32, BF16, F16). */
static inline float mlxq_load(const void *p, mx_dtype t, int64_t i) {
    switch (t) {
    case MX_BF16: return mx_bf16_to_f32(((const uint16_t *)p)[i]);
    case MX_F16: return mx_f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

static inline void mlxq_store(void *p, mx_dtype t, int64_t i, float v) {
    switch (t) {
    case MX_BF16: ((uint16_t *)p)[i] = mx_f32_to_bf16(v); break;
    case MX_F16: ((uint16_t *)p)[i] = mx_f32_to_f16(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

/* The value of t nearest to v (round to nearest even), as fp32. */
static inline float mlxq_round_to(float v, mx_dtype t) {
    switch (t) {
    case MX_BF16: return mx_bf16_to_f32(mx_f32_to_bf16(v));
    case MX_F16: return mx_f16_to_f32(mx_f32_to_f16(v));
    default: return v;
    }
}

static inline bool mlxq_float_dtype(mx_dtype t) { return t == MX_F32 || t == MX_BF16 || t == MX_F16; }

/* Dequantizes one row of m (row index r) into out[k]: the SIMD version of this CPU
 * (qdequant.c), bit-identical to the scalar reference mlxq_dequantize_row_ref. */
void mlxq_dequantize_row(float *out, const mlxq_matrix *m, int64_t r);
void mlxq_dequantize_row_ref(float *out, const mlxq_matrix *m, int64_t r);
/* cpu_wfill_fn over an mlxq_matrix (ctx): rows [j0, j0 + nr) dequantized into dst [nr, k]. */
void mlxq_fill_rows(float *dst, int64_t j0, int64_t nr, const void *ctx);
/* The fused product of a few rows over an mlxq_matrix (ctx) for this CPU's kernel family, or
 * NULL (then the rows go through mlxq_fill_rows): qdequant.c. */
cpu_wtile_fn mlxq_wtile_for(const mlxq_matrix *m);

#endif
