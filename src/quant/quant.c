/* MLX affine quantization: quantize and dequantize whole matrices (the converter's side; the
 * format itself, checks and bit packing: backend/qfmt/qfmt.c).
 * The algorithm is MLX's (mlx/backend/metal/kernels/quantized.h affine_quantize, identical in
 * the CUDA backend); tools/reference/mlx_quant_ref.py reimplements it independently and the
 * fixtures it writes are compared bit for bit in tests/unit/test_quant.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_quant.h"
#include "quant/quant.h"

/* ==== Quantize ==== */

void mlxq_quantize_group(const float *w, int gs, int bits, uint8_t *q, float *scale_out,
                         float *bias_out) {
    const float n_bins = (float)((1 << bits) - 1);
    const float eps = 1e-7f;
    /* MLX's GPU kernels start the max at 0 (and the min at the dtype's largest value), so a
     * group of negative values still has w_max = 0. */
    float w_min = INFINITY, w_max = 0.0f;
    for (int i = 0; i < gs; i++) {
        w_min = fminf(w_min, w[i]);
        w_max = fmaxf(w_max, w[i]);
    }
    float scale = fmaxf((w_max - w_min) / n_bins, eps);
    bool side = fabsf(w_min) > fabsf(w_max);
    scale = side ? scale : -scale;
    float edge = side ? w_min : w_max;
    float q0 = roundf(edge / scale); /* half away from zero, as Metal's round() */
    bool at_zero = q0 == 0.0f;
    scale = at_zero ? scale : edge / q0;
    float bias = at_zero ? 0.0f : edge;
    for (int i = 0; i < gs; i++) {
        float v = roundf((w[i] - bias) / scale);
        v = fminf(v, n_bins);
        /* v >= -0 by construction (the edge is the group's extreme); the clamp only guards
         * NaN inputs, which become code 0. */
        q[i] = v > 0.0f ? (uint8_t)v : 0;
    }
    *scale_out = scale;
    *bias_out = bias;
}

int mlx_quantize(uint32_t *wq, void *scales, void *biases, const void *w, mx_dtype dtype,
                 int64_t rows, int64_t k, int bits, int gs, mx_error *err) {
    if (mlxq_check(bits, gs, k, "quantize", err)) return -1;
    if (!mlxq_float_dtype(dtype))
        return mx_fail(err, "quantize: dtype %s is not a float type (F32, BF16, F16)",
                       mx_dtype_name(dtype));
    const int64_t ng = k / gs, nw = mlxq_packed_cols(k, bits);
    int failed = 0;
#pragma omp parallel
    {
        float *row = malloc((size_t)k * sizeof(float)); /* [k] fp32 input row */
        uint8_t *q = malloc((size_t)k);                 /* [k] codes */
        if (!row || !q) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            if (!row || !q) continue;
            for (int64_t i = 0; i < k; i++) row[i] = mlxq_load(w, dtype, r * k + i);
            for (int64_t g = 0; g < ng; g++) {
                float s, b;
                mlxq_quantize_group(row + g * gs, gs, bits, q + g * gs, &s, &b);
                mlxq_store(scales, dtype, r * ng + g, s);
                mlxq_store(biases, dtype, r * ng + g, b);
            }
            mlxq_pack_row(wq + r * nw, q, k, bits);
        }
        free(row);
        free(q);
    }
    if (failed) return mx_fail(err, "quantize: out of memory for a row of %lld values", (long long)k);
    return 0;
}

/* ==== Dequantize ==== */

/* mlxq_dequantize_row (scalar reference and SIMD versions): backend/cpu/cpu_qdequant.c */

void mlxq_dequantize_rows(float *out, const mlxq_matrix *m, int64_t row0, int64_t nr) {
#pragma omp parallel for schedule(static) if (nr * m->k > 65536)
    for (int64_t r = 0; r < nr; r++) mlxq_dequantize_row(out + r * m->k, m, row0 + r);
}

int mlx_dequantize(void *out, mx_dtype out_dtype, const uint32_t *wq, const void *scales,
                   const void *biases, mx_dtype sb_dtype, int64_t rows, int64_t k, int bits,
                   int gs, mx_error *err) {
    if (mlxq_check(bits, gs, k, "dequantize", err)) return -1;
    if (!mlxq_float_dtype(sb_dtype) || !mlxq_float_dtype(out_dtype))
        return mx_fail(err, "dequantize: scales dtype %s / output dtype %s: expected F32, BF16 "
                       "or F16", mx_dtype_name(sb_dtype), mx_dtype_name(out_dtype));
    mlxq_matrix m = {wq, scales, biases, sb_dtype, rows, k, bits, gs};
    if (out_dtype == MX_F32) {
        mlxq_dequantize_rows(out, &m, 0, rows);
        return 0;
    }
    int failed = 0;
#pragma omp parallel
    {
        float *row = malloc((size_t)k * sizeof(float)); /* [k] */
        if (!row) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            if (!row) continue;
            mlxq_dequantize_row(row, &m, r);
            /* Already a value of sb_dtype; converting to another dtype rounds once more. */
            for (int64_t i = 0; i < k; i++) mlxq_store(out, out_dtype, r * k + i, row[i]);
        }
        free(row);
    }
    if (failed) return mx_fail(err, "dequantize: out of memory for a row of %lld values", (long long)k);
    return 0;
}
