/* The quantized entries of the CPU backend's ops table (backend_ops.matmul_q, embed_q) and the
 * quantized expert product of its MoE op. They live in src/quant so the backend only gains
 * table entries. */
#ifndef MLXCEL_QUANT_BACKEND_H
#define MLXCEL_QUANT_BACKEND_H

#include "backend/backend.h"
#include "quant/quant.h"

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
