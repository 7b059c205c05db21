/* MLX affine quantization, the converter's side: quantize (as MLX does) and dequantize whole
 * matrices. The format (packing, the dequantized value, matrix descriptors) is defined below the
 * backend seam in backend/qfmt/qfmt.h; the CPU kernels on it are in backend/cpu/cpu_quant.h.
 *
 * Quantize (MLX's GPU kernels, Metal and CUDA, which produce mlx_lm.convert's output): per
 * group of fp32 values, w_max = max(0, max w) and w_min = min w; scale = max((w_max - w_min)
 * / (2^bits - 1), 1e-7), negated unless |w_min| > |w_max|; edge = w_min or w_max (the larger
 * magnitude); q0 = round(edge / scale); when q0 != 0 the scale becomes edge / q0 and the bias
 * edge (so the edge is exact), else bias = 0. q = min(round((w - bias) / scale), 2^bits - 1)
 * with round half away from zero, computed with the fp32 scale and bias; the stored scale and
 * bias are those rounded to the model dtype (nearest even). See docs/quantization.md. */
#ifndef MLXCEL_QUANT_QUANT_H
#define MLXCEL_QUANT_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/qfmt/qfmt.h"

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

/* out[r, 0..k) = dequantized row (row0 + r), r < nr. */
void mlxq_dequantize_rows(float *out, const mlxq_matrix *m, int64_t row0, int64_t nr);

#endif
