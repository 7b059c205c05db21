/* Connection between the tuner and the CUDA quantized kernels (qmv-multirow, qmm-tile).
 *
 * The tuner owns everything but the launch: synthetic MLX-affine weights of the point's
 * shape (packed uint32 words, bf16 scales and biases per group), activations, output, the
 * L-launch event timing, replicas, the output check and the cache. The kernels' side is the
 * provider below: one launch adapter plus the kernels' own default and valid-value rules.
 * Until a provider is connected (cuda_tune_qmat() returns NULL) `mlxcel tune --op
 * qmv-multirow|qmm-tile --device cuda` fails with a message saying so, and the consumption
 * hooks return the kernel default. docs/tuning.md ("Connecting the quantized kernels") has
 * the adapter to add once cuda_qmv / cuda_qmm exist on the branch. */
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
} cuda_tune_qmat_bufs;

typedef struct cuda_tune_qmat_provider {
    /* One launch of op (TUNE_OP_QMV_MULTIROW: the GEMV with `value` = multirow;
     * TUNE_OP_QMM_TILE: the GEMM with `value` = tile_m) on b. value > 0 and rules.valid()
     * accepted it. Returns 0 or a cudaError_t value; never synchronises. */
    int (*launch)(tune_op op, const cuda_tune_qmat_bufs *b, int value, cudaStream_t st);
    /* The kernels' default and valid values (what the consumption hooks use too). */
    tune_knob_rules rules;
    int y_bf16; /* the launch writes bf16 y (else fp32) */
} cuda_tune_qmat_provider;

/* The connected provider, or NULL (this build: no quantized CUDA kernels yet). */
const cuda_tune_qmat_provider *cuda_tune_qmat(void);

/* Consumption hooks for the quantized kernels' dispatch: MLXCEL_QMV_MULTIROW /
 * MLXCEL_QMM_TILE_M > cached winner (MLXCEL_AUTOTUNE cache or 1) > the provider's default,
 * on device 0; values the provider rejects fall back to its default. Memoised per bucket, so
 * the result is fixed for a shape within a process (safe under graph capture once resolved
 * in an eager step). rows: GEMV rows (decode batch) / GEMM M (prefill tokens). */
int cuda_tune_qmv_multirow(int rows, int N, int K, int bits, int group_size);
int cuda_tune_qmm_tile_m(int rows, int N, int K, int bits, int group_size);

#endif
