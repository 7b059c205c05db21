/* The launch parameters of the CUDA quantized matmul kernels that can be chosen at run time
 * (qgemv.cu: multirow, qmm.cu: tile_m): the one list of each, in plain C with no CUDA
 * header, so that the kernels (cuda_ops.h), the environment parser (MLXCEL_QMV_MULTIROW /
 * MLXCEL_QMM_TILE_M, through cuda_knobs_register) and the autotuner's candidates
 * (src/tune/tune_ops.c) all read the same values, in every build (a CPU-only build too).
 * Ascending order. */
#ifndef MLXCEL_BACKEND_CUDA_QKNOBS_H
#define MLXCEL_BACKEND_CUDA_QKNOBS_H

/* qmv row window: activation rows handled by one pass over the weight (1 <= rows <= 8). */
#define CUDA_QMV_MULTIROW_VALUES {1, 2, 4, 8}
#define CUDA_QMV_MULTIROW_COUNT 4
/* qmm slab: weight rows dequantized to bf16 per cuBLASLt GEMM. */
#define CUDA_QMM_TILE_VALUES {256, 512, 1024, 2048, 4096, 8192, 16384}
#define CUDA_QMM_TILE_COUNT 7

/* Hands these lists to the environment parser (base/env.h mx_env_register_choices); until then
 * MLXCEL_QMV_MULTIROW / MLXCEL_QMM_TILE_M read as 0. Every reader of those two values calls it
 * first (backend_get, the CUDA backend's init, the tune policy); idempotent, thread-safe.
 * cuda_knobs.c, in every build. */
void cuda_knobs_register(void);

#endif
