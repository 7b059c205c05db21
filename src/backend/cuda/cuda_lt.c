/* cuBLASLt GEMM descriptors (cuda_lt.h). A file of its own so that qmm.cu's users (the
 * tuner, cuda_ops_bench) need nothing of the backend's state to link it. */
#include "backend/cuda/cuda_lt.h"

#include <string.h>

#define LT_CANDIDATES 16

static bool g_splitk = true;
void cu_lt_set_splitk(bool allow) { g_splitk = allow; }

/* The heuristic's first candidate, or without split-K the first that reports one split. */
static int lt_pick(const cublasLtMatmulHeuristicResult_t *res, int n) {
    if (g_splitk) return 0;
    for (int i = 0; i < n; i++) {
        int32_t splits = 1;
        size_t got = 0;
        if (cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                 &splits, sizeof splits, &got) == 0 &&
            splits <= 1)
            return i;
    }
    return 0;
}

void cu_lt_desc_make(cu_lt_desc *d, cublasLtHandle_t lt, int N, int K, int rows, long lda,
                     long ldo, size_t ws_bytes, uint32_t align_c) {
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtMatmulPreference_t pref = NULL;
    int nres = 0;
    cublasLtMatmulHeuristicResult_t res[LT_CANDIDATES];
    memset(res, 0, sizeof res);
    if (cublasLtMatmulDescCreate(&d->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) ||
        cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) ||
        cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) ||
        cublasLtMatrixLayoutCreate(&d->a, CUDA_R_16BF, (uint64_t)K, (uint64_t)N, lda) ||
        cublasLtMatrixLayoutCreate(&d->b, CUDA_R_16BF, (uint64_t)K, (uint64_t)rows, K) ||
        cublasLtMatrixLayoutCreate(&d->c, CUDA_R_32F, (uint64_t)N, (uint64_t)rows, ldo) ||
        cublasLtMatmulPreferenceCreate(&pref) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &ws_bytes, sizeof ws_bytes) ||
        (align_c &&
         (cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                               &align_c, sizeof align_c) ||
          cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                               &align_c, sizeof align_c))) ||
        cublasLtMatmulAlgoGetHeuristic(lt, d->op, d->a, d->b, d->c, d->c, pref,
                                       g_splitk ? 1 : LT_CANDIDATES, res, &nres) ||
        nres < 1) {
        d->ok = false;
    } else {
        d->algo = res[lt_pick(res, nres)].algo;
        d->ok = true;
    }
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
}

void cu_lt_desc_destroy(cu_lt_desc *d) {
    if (d->op) cublasLtMatmulDescDestroy(d->op);
    if (d->a) cublasLtMatrixLayoutDestroy(d->a);
    if (d->b) cublasLtMatrixLayoutDestroy(d->b);
    if (d->c) cublasLtMatrixLayoutDestroy(d->c);
    memset(d, 0, sizeof *d);
}
