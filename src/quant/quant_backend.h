/* The quantized matmul entry of the CPU backend's ops table (backend_ops.matmul_q). Lives in
 * src/quant so the backend only gains one table entry. */
#ifndef MLXCEL_QUANT_BACKEND_H
#define MLXCEL_QUANT_BACKEND_H

#include "backend/backend.h"
#include "quant/quant.h"

/* Descriptor for a backend quantized weight: w [N, K*bits/32] u32, scales/biases [N, K/group]. */
int mlxq_from_qweight(mlxq_matrix *m, const mx_qweight *w, mx_error *err);
/* out[n, N] = x[n, K] @ W^T, fp32 activations: qmv for up to 16 rows, dequantize + sgemm above
 * (mlxq_matmul). x and out must be contiguous in their rows' last dimension. */
void mlxq_cpu_matmul_q(mx_tensor *out, const mx_tensor *x, const mx_qweight *w);

#endif
