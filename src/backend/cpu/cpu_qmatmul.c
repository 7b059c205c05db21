/* CPU kernels on MLX-quantized weights: the matmul (batch-invariant: the backend's canonical
 * dot on dequantized rows) and the quantized embedding gather. Every weight value is the
 * dequantized model-dtype value (qfmt.h), exactly what a dense model holding the dequantized
 * checkpoint multiplies by, and the dot is the one cpu_matmul computes for that dense weight:
 * a quantized model and its dequantized twin give bit-identical results, and a row's result
 * never depends on the other rows of the call. These are the reference for device kernels. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_quant.h"

/* ==== Matmul ==== */

/* cpu_wfill_fn: rows [j0, j0 + nr) of the quantized matrix, dequantized to fp32. */
void mlxq_fill_rows(float *dst, int64_t j0, int64_t nr, const void *ctx) {
    const mlxq_matrix *m = ctx;
    for (int64_t j = 0; j < nr; j++) mlxq_dequantize_row(dst + j * m->k, m, j0 + j);
}

int mlxq_matmul(float *y, const float *x, int64_t m, const mlxq_matrix *w, mx_error *err) {
    if (mlxq_matrix_check(w, err)) return -1;
    if (m < 1) return mx_fail(err, "quantized matmul: %lld rows", (long long)m);
    mx_tensor tx = mx_tensor_2d((void *)x, MX_F32, m, w->k, MX_DEV_CPU);
    mx_tensor ty = mx_tensor_2d(y, MX_F32, m, w->n, MX_DEV_CPU);
    cpu_matmul_fill_tile(&ty, &tx, w->n, mlxq_fill_rows, mlxq_wtile_for(w), w, NULL);
    return 0;
}

/* ==== Quantized embedding gather ==== */

int mlxq_embed(float *out, const mlxq_matrix *table, const int32_t *ids, int n, float scale,
               bool round_scale, mx_error *err) {
    if (mlxq_matrix_check(table, err)) return -1;
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= table->n)
            return mx_fail(err, "embedding: token id %d at position %d is outside the vocabulary "
                           "[0, %lld)", ids[i], i, (long long)table->n);
    const int64_t h = table->k;
    /* transformers multiplies by a scale held in the embedding dtype, and rounds the product */
    float s = round_scale ? mlxq_round_to(scale, table->sb_dtype) : scale;
    for (int i = 0; i < n; i++) {
        float *o = out + (int64_t)i * h;
        mlxq_dequantize_row(o, table, ids[i]);
        if (s != 1.0f)
            for (int64_t j = 0; j < h; j++)
                o[j] = round_scale ? mlxq_round_to(o[j] * s, table->sb_dtype) : o[j] * s;
    }
    return 0;
}
