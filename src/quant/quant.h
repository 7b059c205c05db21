/* MLX affine quantization: the storage format, quantize / dequantize exactly as MLX does, and
 * the CPU kernels (batch-invariant matmul on dequantized rows, embedding row gather).
 *
 * Format (bit-exact with MLX checkpoints, mlx-community style):
 *   X.weight  U32 [..., K * bits / 32]  the K codes of a row as one little-endian bit stream:
 *                                       code i occupies bits [i*bits, (i+1)*bits) counted from
 *                                       bit 0 of word 0 (3/5/6-bit codes straddle words).
 *   X.scales  [..., K / group_size]     in the model dtype (bf16, f16 or f32)
 *   X.biases  [..., K / group_size]
 *   value = scale * q + bias; bits 2, 3, 4, 5, 6, 8; group size 32, 64, 128.
 *
 * Quantize (MLX's GPU kernels, Metal and CUDA, which produce mlx_lm.convert's output): per
 * group of fp32 values, w_max = max(0, max w) and w_min = min w; scale = max((w_max - w_min)
 * / (2^bits - 1), 1e-7), negated unless |w_min| > |w_max|; edge = w_min or w_max (the larger
 * magnitude); q0 = round(edge / scale); when q0 != 0 the scale becomes edge / q0 and the bias
 * edge (so the edge is exact), else bias = 0. q = min(round((w - bias) / scale), 2^bits - 1)
 * with round half away from zero, computed with the fp32 scale and bias; the stored scale and
 * bias are those rounded to the model dtype (nearest even). See docs/quantization.md.
 *
 * Dequantized value (defined here, used by every kernel so quantized and dequantized models
 * agree exactly): the model-dtype value nearest to fp32(scale) * q + fp32(bias) (no FMA). */
#ifndef MLXCEL_QUANT_QUANT_H
#define MLXCEL_QUANT_QUANT_H

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

/* One group of fp32 values -> codes, fp32 scale and bias (before rounding to the model dtype). */
void mlxq_quantize_group(const float *w, int group_size, int bits, uint8_t *q, float *scale,
                         float *bias);

/* w [rows, k] in dtype (F32, BF16, F16) -> wq [rows, k * bits / 32], scales and biases
 * [rows, k / group_size] in the same dtype. OpenMP over rows. */
int mlx_quantize(uint32_t *wq, void *scales, void *biases, const void *w, mx_dtype dtype,
                 int64_t rows, int64_t k, int bits, int group_size, mx_error *err);
/* The inverse: out [rows, k] in out_dtype (F32, BF16, F16). With F32 the values are the
 * model-dtype values (see above) widened to fp32. */
int mlx_dequantize(void *out, mx_dtype out_dtype, const uint32_t *wq, const void *scales,
                   const void *biases, mx_dtype sb_dtype, int64_t rows, int64_t k, int bits,
                   int group_size, mx_error *err);

/* ==== Kernels (fp32 activations, fp32 accumulation) ==== */
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

/* out[r, 0..k) = dequantized row (row0 + r), r < nr. */
void mlxq_dequantize_rows(float *out, const mlxq_matrix *m, int64_t row0, int64_t nr);

/* y[m, n] = x[m, k] @ W^T for any m >= 1. Each y[r, j] is the canonical dot product of the
 * CPU backend (cpu_dot_ref: lane k % 16, FMA in ascending k, fixed 16-lane fold) of x[r] and
 * the dequantized row j: bit-identical to cpu_matmul on a dense weight holding the dequantized
 * values, and to the same row computed alone (batch-invariant). Each panel of weight rows is
 * dequantized once per call for all m rows (OpenMP over panels of output columns). */
int mlxq_matmul(float *y, const float *x, int64_t m, const mlxq_matrix *w, mx_error *err);

/* Embedding gather from a quantized table [vocab, hidden]: out[i] = row ids[i] * scale.
 * With round_scale the product is rounded to the table dtype (as transformers multiplies in
 * the embedding dtype). Ids outside [0, vocab) produce an error naming the id. */
int mlxq_embed(float *out, const mlxq_matrix *table, const int32_t *ids, int n, float scale,
               bool round_scale, mx_error *err);

#endif
