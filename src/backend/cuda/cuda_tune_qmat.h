/* Connection between the tuner and the CUDA quantized kernels (qmv-multirow, qmm-tile).
 *
 * The tuner owns everything but the launch: synthetic MLX-affine weights of the point's
 * shape (packed uint32 words, bf16 scales and biases per group), activations, output, the
 * kernels' scratch (qmv workspace, qmm slab buffer, a cuBLASLt handle + workspace), the
 * L-launch event timing, replicas, the output check against the default's and the cache.
 * The kernels' side is the provider below: one launch adapter over cuda_qmv / cuda_qmm
 * (cuda_ops.h) plus the kernels' own default and valid-value rules, which the consumption
 * hooks use too. */
#ifndef MLXCEL_BACKEND_CUDA_TUNE_QMAT_H
#define MLXCEL_BACKEND_CUDA_TUNE_QMAT_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "tune/tune_ops.h"
#include "tune/tune_policy.h"

/* One replica of the synthetic inputs: y[r, n] = sum_k x[r, k] * deq(W)[n, k], r < rows,
 * deq(W)[n, k] = scales[n, k / group] * q[n, k] + biases[n, k / group], q the bits-wide
 * field k of row n (MLX affine layout: little-end first within each uint32). */
typedef struct cuda_tune_qmat_bufs {
    const uint32_t *w;               /* [N, K * bits / 32] */
    const uint16_t *scales, *biases; /* [N, K / group] bf16 */
    const float *x_f32;              /* [rows, K] fp32 */
    const uint16_t *x_bf16;          /* [rows, K] bf16, the same values rounded */
    void *y;                         /* [rows, N], fp32 or bf16 (provider->y_bf16) */
    int rows, N, K, bits, group_size;
    /* the kernels' scratch, shared by the replicas: provider->scratch_bytes(op, shape) bytes
     * (256-byte aligned), and for qmm a cuBLASLt handle with its workspace */
    void *scratch;
    size_t scratch_bytes;
    void *lt, *lt_ws;
    size_t lt_ws_bytes;
} cuda_tune_qmat_bufs;

typedef struct cuda_tune_qmat_provider {
    /* One launch of op (TUNE_OP_QMV_MULTIROW: the GEMV with `value` = multirow;
     * TUNE_OP_QMM_TILE: the GEMM with `value` = tile_m) on b. value > 0 and rules.valid()
     * accepted it. Returns 0 or a cudaError_t value; never synchronises. */
    int (*launch)(tune_op op, const cuda_tune_qmat_bufs *b, int value, cudaStream_t st);
    /* The kernels' default and valid values (what the consumption hooks use too). */
    tune_knob_rules rules;
    /* Device scratch one launch of op on the shape needs with any valid value. */
    size_t (*scratch_bytes)(tune_op op, const tune_qmat_shape *s);
    int y_bf16; /* the launch writes bf16 y (else fp32) */
} cuda_tune_qmat_provider;

/* The connected provider (the CUDA qmv / qmm kernels). */
const cuda_tune_qmat_provider *cuda_tune_qmat(void);

/* Consumption hooks for the quantized kernels' dispatch (cuda_qmatmul.c): MLXCEL_QMV_MULTIROW
 * / MLXCEL_QMM_TILE_M > cached winner (MLXCEL_AUTOTUNE cache or 1) > the kernel's default, on
 * device 0; values the kernel rejects fall back to its default. Memoised per bucket, so the
 * result is fixed for a shape within a process. The first call with MLXCEL_AUTOTUNE set
 * queries device 0 (its autotune id): make it in an eager step; later calls are host-only.
 * rows: GEMV rows (decode batch) / GEMM rows (prefill tokens, or a decode batch above 8). */
int cuda_tune_qmv_multirow(int rows, int N, int K, int bits, int group_size);
int cuda_tune_qmm_tile_m(int rows, int N, int K, int bits, int group_size);

#endif
