/* CPU kernels on MLX-quantized weights: qmv (1..8 rows), qmm (dequantize tile + sgemm), the
 * dispatch between them, and the quantized embedding gather. These are the reference the CUDA
 * kernels are checked against, so they favour a fixed, explainable order over speed: every
 * weight value is the dequantized model-dtype value (quant.h), exactly what a dense model
 * holding the dequantized checkpoint would multiply by. */
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant_internal.h"

/* ==== Dot product in a fixed order ==== */
/* 8 partial sums over k (k is a multiple of 32), then a fixed pairwise sum: the order does not
 * depend on how many rows share the weight pass, so qmv results are batch-invariant. */
static float dot_f32(const float *a, const float *b, int64_t k) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < k; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += a[i + j] * b[i + j];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* ==== qmv: 1..8 rows ==== */

static int qmv_window(float *y, const float *x, int m, const mlxq_matrix *w, mx_error *err) {
    const int64_t n = w->n, k = w->k;
    int failed = 0;
#pragma omp parallel
    {
        float *wr = malloc((size_t)k * sizeof(float)); /* [k] one dequantized weight row */
        if (!wr) {
#pragma omp atomic write
            failed = 1;
        }
        /* dynamic chunks: a thread slowed by other load does not hold the others back */
#pragma omp for schedule(dynamic, 16)
        for (int64_t j = 0; j < n; j++) {
            if (!wr) continue;
            mlxq_dequantize_row(wr, w, j);
            for (int r = 0; r < m; r++) y[r * n + j] = dot_f32(x + r * k, wr, k);
        }
        free(wr);
    }
    if (failed) return mx_fail(err, "qmv: out of memory for a row of %lld values", (long long)k);
    return 0;
}

int mlxq_qmv(float *y, const float *x, int m, const mlxq_matrix *w, mx_error *err) {
    if (mlxq_matrix_check(w, err)) return -1;
    if (m < 1 || m > MLXQ_QMV_MAX_ROWS)
        return mx_fail(err, "qmv: %d rows, expected 1..%d", m, MLXQ_QMV_MAX_ROWS);
    return qmv_window(y, x, m, w, err);
}

/* ==== qmm: dequantize a tile of weight rows, then sgemm ==== */

/* Tile of weight rows dequantized at once: about 8 MiB of fp32, at least 16 rows. */
static int64_t qmm_tile_rows(const mlxq_matrix *w) {
    int64_t t = (8 << 20) / (4 * w->k);
    if (t < 16) t = 16;
    if (t > w->n) t = w->n;
    return t;
}

int mlxq_qmm(float *y, const float *x, int64_t m, const mlxq_matrix *w, mx_error *err) {
    if (mlxq_matrix_check(w, err)) return -1;
    if (m < 1) return mx_fail(err, "qmm: %lld rows", (long long)m);
    const int64_t n = w->n, k = w->k, tn = qmm_tile_rows(w);
    float *tile = malloc((size_t)(tn * k) * sizeof(float)); /* [tn, k] dequantized rows */
    if (!tile)
        return mx_fail(err, "qmm: out of memory for a %lld x %lld dequantized tile",
                       (long long)tn, (long long)k);
    for (int64_t n0 = 0; n0 < n; n0 += tn) {
        int64_t nt = n - n0 < tn ? n - n0 : tn;
        mlxq_dequantize_rows(tile, w, n0, nt);
        /* y[:, n0:n0+nt] = x[m, k] @ tile[nt, k]^T, written with leading dimension n */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)nt, (int)k, 1.0f, x,
                    (int)k, tile, (int)k, 0.0f, y + n0, (int)n);
    }
    free(tile);
    return 0;
}

int mlxq_matmul(float *y, const float *x, int64_t m, const mlxq_matrix *w, mx_error *err) {
    if (mlxq_matrix_check(w, err)) return -1;
    if (m > MLXQ_QMM_MIN_ROWS) return mlxq_qmm(y, x, m, w, err);
    for (int64_t r0 = 0; r0 < m; r0 += MLXQ_QMV_MAX_ROWS) {
        int mr = (int)(m - r0 < MLXQ_QMV_MAX_ROWS ? m - r0 : MLXQ_QMV_MAX_ROWS);
        if (qmv_window(y + r0 * w->n, x + r0 * w->k, mr, w, err)) return -1;
    }
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
