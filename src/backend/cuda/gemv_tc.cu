/* Tensor-core GEMV for decode batches of 1..32 rows with bf16 x: y[r, n] = sum_k x[r, k] *
 * W[n, k], fp32 accumulate and output. The weights are streamed once per call for all rows,
 * so the floor is N*K*2 bytes over memory bandwidth, with no split-K reduce kernels and no
 * separate conversions (cuBLASLt's shape at 9..32 rows: a GEMM tile plus split-K reduces).
 *
 * Fragment trick (as gemv.cu's 3..8-row kernel): lane (g = lane / 4, t = lane % 4) loads
 * 16 bytes (8 consecutive k) of weight rows g and g + 8, and 8 consecutive k of x row g of
 * each 8-row n-tile; the 32 k of a k-tile feed two mma.sync m16n8k16 with physical k
 * 8t + {0..3} in the slots {2t, 2t+1, 2t+8, 2t+9} of the first and 8t + {4..7} in the second
 * (a sum over k does not care which k sits in which slot as long as A and B agree).
 *
 * What differs from the 3..8-row kernel: up to 4 n-tiles (32 x rows) reuse each weight
 * fragment; a warp may own two 16-row blocks (MB = 2: x fragments reused twice, half the x
 * traffic); KB k-tiles per load batch (2 * MB * KB 16-byte weight loads in flight per lane);
 * the warps of a CTA take contiguous k slices, so a row's loads of one batch are KB * 64
 * contiguous bytes. Partial tiles are summed in shared memory in a fixed order (no atomics:
 * reproducible). The launch shape is a compile-time variant (gemv_tc_variant); the bench
 * sweeps them, the engine takes the default. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.cuh"
#include "backend/cuda/cuda_ops.h"

#define GTC_KT 32 /* k per k-tile: 4 lanes x 8 */

template <int NT, int MB, int KB, int WARPS>
__global__ void __launch_bounds__(WARPS * 32)
gemv_tc_kernel2(cuda_gemv_segs segs, const uint16_t *__restrict__ x, int rows, int K) {
    /* per warp, per (block m, tile i, element e): one float per lane */
    __shared__ float red[WARPS][MB * NT * 4][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const uint16_t *W = segs.W[0];
    float *y = (float *)segs.y[0];
    int N = segs.N[0], c0 = 0;
#pragma unroll
    for (int i = 1; i < CUDA_GEMV_MAX_SEGS; i++)
        if (i < segs.n && (int)blockIdx.x >= segs.cta0[i]) {
            W = segs.W[i];
            y = (float *)segs.y[i];
            N = segs.N[i];
            c0 = segs.cta0[i];
        }
    const int n0 = ((int)blockIdx.x - c0) * 16 * MB;
    const uint16_t *wr[MB][2];
    bool okr[MB][2];
#pragma unroll
    for (int m = 0; m < MB; m++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int n = n0 + 16 * m + 8 * h + g;
            okr[m][h] = n < N;
            wr[m][h] = W + (size_t)(okr[m][h] ? n : 0) * K + 8 * t;
        }
    const uint16_t *xr[NT];
    bool okx[NT];
#pragma unroll
    for (int i = 0; i < NT; i++) {
        okx[i] = 8 * i + g < rows;
        xr[i] = x + (size_t)(okx[i] ? 8 * i + g : 0) * K + 8 * t;
    }
    const int n_kt = (K + GTC_KT - 1) / GTC_KT;
    const int per = (n_kt + WARPS - 1) / WARPS;
    const int kt_lo = min(warp * per, n_kt), kt_hi = min(kt_lo + per, n_kt);

    float acc[MB][NT][4];
#pragma unroll
    for (int m = 0; m < MB; m++)
#pragma unroll
        for (int i = 0; i < NT; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[m][i][e] = 0.f;

    pdl_wait(); /* x is the previous kernel's output */
    pdl_trigger();
    for (int kt0 = kt_lo; kt0 < kt_hi; kt0 += KB) {
        uint4 wv[MB][2][KB];
        /* all weight loads of the batch first */
#pragma unroll
        for (int j = 0; j < KB; j++) {
            const int kt = kt0 + j;
            /* K % 8 == 0: a lane's 8 k are all inside or all outside */
            const bool in = kt < kt_hi && kt * GTC_KT + 8 * t < K;
#pragma unroll
            for (int m = 0; m < MB; m++)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    wv[m][h][j] = in && okr[m][h] ? ldg_stream16(wr[m][h] + (size_t)kt * GTC_KT)
                                                  : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int j = 0; j < KB; j++) {
            const int kt = kt0 + j;
            const bool in = kt < kt_hi && kt * GTC_KT + 8 * t < K;
#pragma unroll
            for (int i = 0; i < NT; i++) {
                const uint4 xv = in && okx[i] ? __ldg((const uint4 *)(xr[i] + (size_t)kt * GTC_KT))
                                              : make_uint4(0, 0, 0, 0);
#pragma unroll
                for (int m = 0; m < MB; m++) {
                    mma_bf16_16816(acc[m][i], wv[m][0][j].x, wv[m][1][j].x, wv[m][0][j].y,
                                   wv[m][1][j].y, xv.x, xv.y);
                    mma_bf16_16816(acc[m][i], wv[m][0][j].z, wv[m][1][j].z, wv[m][0][j].w,
                                   wv[m][1][j].w, xv.z, xv.w);
                }
            }
        }
    }
    /* acc[m][i]: [0], [1] = W row n0 + 16m + g, x rows 8i + 2t, 8i + 2t + 1; [2], [3] = W row
     * n0 + 16m + g + 8, same x rows */
#pragma unroll
    for (int m = 0; m < MB; m++)
#pragma unroll
        for (int i = 0; i < NT; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) red[warp][(m * NT + i) * 4 + e][lane] = acc[m][i][e];
    __syncthreads();
    for (int o = threadIdx.x; o < MB * NT * 4 * 32; o += WARPS * 32) {
        const int l = o & 31, q = o >> 5, e = q & 3, i = (q >> 2) % NT, m = (q >> 2) / NT;
        float s = 0.f;
#pragma unroll
        for (int w = 0; w < WARPS; w++) s += red[w][q][l];
        const int n = n0 + 16 * m + (l >> 2) + (e >= 2 ? 8 : 0);
        const int r = 8 * i + 2 * (l & 3) + (e & 1);
        if (n < N && r < rows) y[(size_t)r * N + n] = s;
    }
}

/* ==== Launch ==== */
/* Variants: {MB, KB, WARPS}. 0 is the engine's default. */
struct gtc_variant {
    int mb, kb, warps;
};
static const gtc_variant k_gtc_variants[] = {
    {1, 8, 8}, /* 0: default */
    {2, 4, 8},
    {1, 4, 8},
    {1, 8, 4},
    {2, 4, 4},
};
#define GTC_N_VARIANTS ((int)(sizeof k_gtc_variants / sizeof k_gtc_variants[0]))

template <int NT, int MB, int KB, int WARPS>
static int gtc_go(cuda_gemv_segs segs, const uint16_t *x, int rows, int K, cudaStream_t st) {
    int grid = 0;
    for (int i = 0; i < segs.n; i++) {
        segs.cta0[i] = grid;
        grid += (segs.N[i] + 16 * MB - 1) / (16 * MB);
    }
    pdl_launch l;
    pdl_launch_config(&l, dim3(grid), dim3(WARPS * 32), 0, st);
    return (int)cudaLaunchKernelEx(&l.cfg, gemv_tc_kernel2<NT, MB, KB, WARPS>, segs, x, rows, K);
}

template <int MB, int KB, int WARPS>
static int gtc_nt(const cuda_gemv_segs &segs, const uint16_t *x, int rows, int K, cudaStream_t st) {
    if (rows <= 8) return gtc_go<1, MB, KB, WARPS>(segs, x, rows, K, st);
    if (rows <= 16) return gtc_go<2, MB, KB, WARPS>(segs, x, rows, K, st);
    if (rows <= 24) return gtc_go<3, MB, KB, WARPS>(segs, x, rows, K, st);
    return gtc_go<4, MB, KB, WARPS>(segs, x, rows, K, st);
}

extern "C" int cuda_gemv_tc_variants(void) { return GTC_N_VARIANTS; }

extern "C" int cuda_gemv_tc(const cuda_gemv_segs *segs, const uint16_t *x, int rows, int K,
                            int variant, cudaStream_t st) {
    if (!segs || segs->n < 1 || segs->n > CUDA_GEMV_MAX_SEGS || rows < 1 ||
        rows > CUDA_GEMV_TC_MAX_ROWS || K < 8 || K % 8 || !x || ((uintptr_t)x & 15) ||
        variant < 0 || variant >= GTC_N_VARIANTS)
        return (int)cudaErrorInvalidValue;
    for (int i = 0; i < segs->n; i++)
        if (!segs->W[i] || !segs->y[i] || segs->N[i] < 1 || ((uintptr_t)segs->W[i] & 15))
            return (int)cudaErrorInvalidValue;
    switch (variant) {
    case 0: return gtc_nt<1, 8, 8>(*segs, x, rows, K, st);
    case 1: return gtc_nt<2, 4, 8>(*segs, x, rows, K, st);
    case 2: return gtc_nt<1, 4, 8>(*segs, x, rows, K, st);
    case 3: return gtc_nt<1, 8, 4>(*segs, x, rows, K, st);
    default: return gtc_nt<2, 4, 4>(*segs, x, rows, K, st);
    }
}
