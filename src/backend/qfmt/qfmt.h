/* MLX affine quantization: the storage format. It sits below the backend seam because the
 * backends' quantized kernels read it (the CPU's in backend/cpu, the CUDA kernels' own copies of
 * the layout cite this file); quantizing and converting stay in quant/.
 *
 * Format (bit-exact with MLX checkpoints, mlx-community style):
 *   X.weight  U32 [..., K * bits / 32]  the K codes of a row as one little-endian bit stream:
 *                                       code i occupies bits [i*bits, (i+1)*bits) counted from
 *                                       bit 0 of word 0 (3/5/6-bit codes straddle words).
 *   X.scales  [..., K / group_size]     in the model dtype (bf16, f16 or f32)
 *   X.biases  [..., K / group_size]
 *   value = scale * q + bias; bits 2, 3, 4, 5, 6, 8; group size 32, 64, 128.
 *
 * Dequantized value (defined here, used by every kernel so quantized and dequantized models
 * agree exactly): the model-dtype value nearest to fp32(scale) * q + fp32(bias) (no FMA). */
#ifndef MLXCEL_BACKEND_QFMT_QFMT_H
#define MLXCEL_BACKEND_QFMT_QFMT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/error.h"

/* ==== Format ==== */
bool mlxq_valid_bits(int bits);        /* 2, 3, 4, 5, 6, 8 */
bool mlxq_valid_group(int group_size); /* 32, 64, 128 */
/* Checks bits, group size, and that k is a positive multiple of the group size. `what` names
 * the tensor in the message. */
int mlxq_check(int bits, int group_size, int64_t k, const char *what, mx_error *err);
static inline int64_t mlxq_packed_cols(int64_t k, int bits) { return k * bits / 32; }

/* q[k] codes (each < 2^bits) <-> one packed row of k * bits / 32 words. k % 32 == 0. */
void mlxq_pack_row(uint32_t *dst, const uint8_t *q, int64_t k, int bits);
void mlxq_unpack_row(uint8_t *q, const uint32_t *src, int64_t k, int bits);

/* ==== Matrix descriptor ==== */
typedef struct mlxq_matrix {
    const uint32_t *w;    /* [n, k * bits / 32] packed codes */
    const void *scales;   /* [n, k / group_size] in sb_dtype */
    const void *biases;   /* [n, k / group_size] in sb_dtype */
    mx_dtype sb_dtype;    /* F32, BF16 or F16 */
    int64_t n, k;         /* logical shape: n output rows, k inputs */
    int bits, group_size;
} mlxq_matrix;

/* Rows [r0, r0 + nr) of a matrix; a stacked [E, out, in] expert tensor is [E * out, in], so
 * expert e is mlxq_matrix_rows(m, e * out, out). */
mlxq_matrix mlxq_matrix_rows(const mlxq_matrix *m, int64_t r0, int64_t nr);
/* Validates a descriptor (pointers, bits, group, k % group, sb dtype). */
int mlxq_matrix_check(const mlxq_matrix *m, mx_error *err);

/* ==== Scale / bias dtypes ==== */
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

#endif
