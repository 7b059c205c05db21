/* The CPU backend's kernels on MLX-quantized weights (the format: backend/qfmt/qfmt.h): row
 * dequantization, the batch-invariant matmul on dequantized rows, the embedding gather, and the
 * ops-table entries built on them (backend_ops.matmul_q, matmul_group, embed_q, and the
 * quantized expert product of the MoE op). They are the reference for the device kernels, and
 * the converter (quant/) dequantizes through them. */
#ifndef MLXCEL_BACKEND_CPU_QUANT_H
#define MLXCEL_BACKEND_CPU_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/qfmt/qfmt.h"

/* ==== Kernels (fp32 activations, fp32 accumulation) ==== */
/* Dequantizes one row of m (row index r) into out[k]: the SIMD version of this CPU
 * (cpu_qdequant.c), bit-identical to the scalar reference mlxq_dequantize_row_ref. */
void mlxq_dequantize_row(float *out, const mlxq_matrix *m, int64_t r);
void mlxq_dequantize_row_ref(float *out, const mlxq_matrix *m, int64_t r);
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

/* ==== Ops-table entries ==== */
/* Descriptor for a backend quantized weight: w [N, K*bits/32] u32, scales/biases [N, K/group]. */
int mlxq_from_qweight(mlxq_matrix *m, const mx_qweight *w, mx_error *err);
/* out[n, N] = x[n, K] @ W^T (+ bias[N]), fp32 activations, the canonical dot on the
 * dequantized rows (mlxq_matmul): bit-identical to backend_cpu()->matmul on the dequantized
 * weight, for any n. x and out may have row strides; their last dimension is contiguous. */
void mlxq_cpu_matmul_q(mx_tensor *out, const mx_tensor *x, const mx_qweight *w,
                       const mx_tensor *bias);
/* backend_ops.matmul_group: dense and quantized products of one x in one parallel region. */
void mlxq_cpu_matmul_group(const mx_tensor *x, const mx_linear *ls, int n);
/* backend_ops.embed on a quantized table [V, H] (mlxq_embed). */
void mlxq_cpu_embed_q(mx_tensor *out, const mx_qweight *table, const int32_t *ids, int n,
                      float scale, bool round_scale);

#endif
