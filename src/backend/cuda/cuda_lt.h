/* cuBLASLt GEMM descriptors shared by the dense matmul (cuda_matmul.c) and the quantized
 * prefill (qmm.cu): bf16 x bf16 with fp32 accumulation and fp32 output, and the algorithm the
 * heuristic picked for that shape. Host C (cuda_lt.c), callable from .cu files. */
#ifndef MLXCEL_BACKEND_CUDA_LT_H
#define MLXCEL_BACKEND_CUDA_LT_H

#include <cublasLt.h>
#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cu_lt_desc {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c; /* c serves as both C and D */
    cublasLtMatmulAlgo_t algo;
    bool ok; /* every descriptor made and the heuristic returned an algorithm */
} cu_lt_desc;

/* Column-major view: D[N, rows] (fp32, ld ldo) = op(A)[N, K] * B[K, rows], with A a bf16
 * K x N matrix (ld lda) taken transposed and B bf16 K x rows (ld K): y = x @ W^T for a
 * row-major W[N, K] and x[rows, K]. ws_bytes: the workspace each matmul will be given;
 * align_c > 0 tells the heuristic the byte alignment of C / D (0: cuBLASLt's assumption).
 * d must be zeroed; whatever was made stays in d for cu_lt_desc_destroy, also when d->ok
 * ends up false. */
void cu_lt_desc_make(cu_lt_desc *d, cublasLtHandle_t lt, int N, int K, int rows, long lda,
                     long ldo, size_t ws_bytes, uint32_t align_c);
/* Whether cu_lt_desc_make may take a split-K algorithm (its partial sums cost a reduce
 * kernel per matmul); off: the first of the heuristic's candidates that reports one split,
 * when there is one. Set once at backend start (MLXCEL_LT_SPLITK). */
void cu_lt_set_splitk(bool allow);
/* Releases what cu_lt_desc_make made and zeroes d. */
void cu_lt_desc_destroy(cu_lt_desc *d);

#ifdef __cplusplus
}
#endif

#endif
