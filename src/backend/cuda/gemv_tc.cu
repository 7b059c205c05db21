/* Tensor-core GEMV for decode batches of 1..32 rows with bf16 x: y[r, n] = sum_k x[r, k] *
 * W[n, k], fp32 accumulate and output. Decode is a weight stream: the floor is N*K*2 bytes
 * over memory bandwidth, so what matters is keeping enough bytes in flight with few
 * instructions, which register loads cannot do (measured on the H200: 16-byte loads straight
 * into MMA fragments reached ~54% of copy bandwidth on the 8B Q/K/V shape where cuBLASLt's
 * TMA kernel reached 64%).
 *
 * Pipeline: a CTA owns 16 weight rows and streams them through S shared-memory stages of KC
 * k each, filled by bulk async copies (cp.async.bulk, one per row and stage, completing on
 * the stage's "full" mbarrier) that one producer thread issues up to S stages ahead; weights
 * are constant, so the producer starts before the PDL wait. Four consumer warps split each
 * stage's k-tiles, read MMA fragments from shared memory (rows padded by 64 bytes: the
 * 16-byte fragment loads of a quarter warp hit distinct banks) and release the stage on its
 * "empty" mbarrier. x fragments come from global memory (L1-resident: every CTA of an SM
 * reads the same x), one stage ahead of their use.
 *
 * Fragment trick (as gemv.cu's 3..8-row kernel): lane (g = lane / 4, t = lane % 4) takes 8
 * consecutive k (16 bytes) of weight rows g and g + 8 and of x row g of each 8-row n-tile;
 * the 32 k of a k-tile feed two mma.sync m16n8k16 with physical k 8t + {0..3} in the slots
 * {2t, 2t+1, 2t+8, 2t+9} of the first and 8t + {4..7} of the second (a sum over k does not
 * care which k sits in which slot as long as A and B agree). Up to 4 n-tiles (32 x rows)
 * share every weight fragment. The consumer warps' partial tiles are summed in shared memory
 * in a fixed order (no atomics: reproducible).
 *
 * Split x (cuda_gemv_tc_split): x holds 2R rows, the bf16 hi parts of R rows then their lo
 * parts (x - hi, rounded); the MMAs treat them as 2R rows sharing each weight fragment, and
 * the epilogue adds rows r and r + R (fold = R): fp32-x precision (~16 bits of x) for the
 * price of R more MMA columns, which the weight stream hides. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_info.h"
#include "backend/cuda/cuda_kernels.cuh"
#include "backend/cuda/cuda_ops.h"

#define GTC_KT 32  /* k per k-tile: 4 lanes x 8 */
#define GTC_CW 4   /* consumer warps */
#define GTC_ROWS 16
#define GTC_PAD 64 /* bytes after each staged row */

/* ==== Kernel ==== */
template <int NT, int KC, int S>
__global__ void __launch_bounds__((GTC_CW + 1) * 32)
gemv_tc_kernel2(cuda_gemv_segs segs, const uint16_t *__restrict__ x, int rows, int K, int early,
                int fold) {
    constexpr int ROWB = KC * 2 + GTC_PAD;    /* bytes per staged row */
    constexpr int STAGE = GTC_ROWS * ROWB;    /* bytes per stage */
    constexpr int TPW = KC / GTC_KT / GTC_CW; /* k-tiles per consumer warp per stage */
    static_assert(TPW >= 1 && KC % (GTC_KT * GTC_CW) == 0, "stage k must split over the warps");
    extern __shared__ __align__(128) uint8_t gtc_buf[];
    __shared__ __align__(8) uint64_t full[S], empty[S];
    __shared__ float red[GTC_CW][NT * 4][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
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
    const int n0 = ((int)blockIdx.x - c0) * GTC_ROWS;
    const int nrows = min(GTC_ROWS, N - n0);
    const int nchunks = (K + KC - 1) / KC;
    mbar_init_stages(full, empty, S, GTC_CW);

    if (warp == GTC_CW) { /* ==== producer ==== */
        if (!early) pdl_wait();
        for (int c = 0; c < nchunks; c++) {
            const int s = c % S;
            if (c >= S) mbar_wait(&empty[s], ((c / S) - 1) & 1);
            const int k0 = c * KC;
            const uint32_t bytes = (uint32_t)min(KC, K - k0) * 2;
            if (lane == 0) mbar_expect(&full[s], bytes * (uint32_t)nrows);
            __syncwarp();
            if (lane < nrows)
                bulk_g2s(gtc_buf + (size_t)s * STAGE + (size_t)lane * ROWB,
                         W + (size_t)(n0 + lane) * K + k0, bytes, &full[s]);
        }
        return; /* dependents' pdl_wait() still waits for the whole grid */
    }

    /* ==== consumers ==== */
    const int g = lane >> 2, t = lane & 3;
    const bool ok0 = g < nrows, ok8 = g + 8 < nrows;
    const uint16_t *xr[NT];
    bool okx[NT];
#pragma unroll
    for (int i = 0; i < NT; i++) {
        okx[i] = 8 * i + g < rows;
        xr[i] = x + (size_t)(okx[i] ? 8 * i + g : 0) * K + 8 * t;
    }
    float acc[NT][4];
#pragma unroll
    for (int i = 0; i < NT; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[i][e] = 0.f;

    pdl_wait(); /* x is the previous kernel's output */
    pdl_trigger();
    uint4 xa[TPW][NT], xb[TPW][NT];
    auto load_x = [&](uint4 (&xv)[TPW][NT], int c) {
#pragma unroll
        for (int j = 0; j < TPW; j++) {
            const int k = c * KC + (warp * TPW + j) * GTC_KT + 8 * t;
#pragma unroll
            for (int i = 0; i < NT; i++)
                xv[j][i] = c < nchunks && k < K && okx[i] ? __ldg((const uint4 *)(xr[i] + (size_t)(k - 8 * t)))
                                                         : make_uint4(0, 0, 0, 0);
        }
    };
    auto step = [&](const uint4 (&xv)[TPW][NT], int c) {
        const int s = c % S;
        mbar_wait(&full[s], (c / S) & 1);
        const uint8_t *st = gtc_buf + (size_t)s * STAGE;
#pragma unroll
        for (int j = 0; j < TPW; j++) {
            const int kl = (warp * TPW + j) * GTC_KT + 8 * t; /* k within the stage */
            const bool in = c * KC + kl < K; /* K % 8 == 0: a lane's 8 k are all in or out */
            const uint4 a = in && ok0 ? *(const uint4 *)(st + (size_t)g * ROWB + kl * 2) : make_uint4(0, 0, 0, 0);
            const uint4 b = in && ok8 ? *(const uint4 *)(st + (size_t)(g + 8) * ROWB + kl * 2) : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int i = 0; i < NT; i++) {
                mma_bf16_16816(acc[i], a.x, b.x, a.y, b.y, xv[j][i].x, xv[j][i].y);
                mma_bf16_16816(acc[i], a.z, b.z, a.w, b.w, xv[j][i].z, xv[j][i].w);
            }
        }
        fence_proxy_async(); /* these reads before the producer's next copy into the stage */
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[s]);
    };
    load_x(xa, 0);
    for (int c = 0; c < nchunks; c += 2) { /* two register sets, no copies between them */
        load_x(xb, c + 1);
        step(xa, c);
        if (c + 1 >= nchunks) break;
        load_x(xa, c + 2);
        step(xb, c + 1);
    }

    /* acc[i]: [0], [1] = W row n0 + g, x rows 8i + 2t, 8i + 2t + 1; [2], [3] = row n0 + g + 8 */
#pragma unroll
    for (int i = 0; i < NT; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) red[warp][i * 4 + e][lane] = acc[i][e];
    asm volatile("bar.sync 1, %0;" ::"n"(GTC_CW * 32) : "memory"); /* consumers only */
    if (fold) { /* x rows r and r + fold are the hi and lo parts of output row r */
        for (int o = threadIdx.x; o < GTC_ROWS * fold; o += GTC_CW * 32) {
            const int nl = o / fold, r = o - nl * fold, n = n0 + nl;
            float sum = 0.f;
#pragma unroll
            for (int part = 0; part < 2; part++) { /* the inverse of the index map below */
                const int xr = r + part * fold, m = xr & 7;
                const int l = ((nl & 7) << 2) | (m >> 1), e = ((nl >> 3) << 1) | (m & 1);
                const int q = (xr >> 3) * 4 + e;
#pragma unroll
                for (int w = 0; w < GTC_CW; w++) sum += red[w][q][l];
            }
            if (n < N) y[(size_t)r * N + n] = sum;
        }
        return;
    }
    for (int o = threadIdx.x; o < NT * 4 * 32; o += GTC_CW * 32) {
        const int l = o & 31, q = o >> 5, e = q & 3, i = q >> 2;
        float sum = 0.f;
#pragma unroll
        for (int w = 0; w < GTC_CW; w++) sum += red[w][q][l];
        const int n = n0 + (l >> 2) + (e >= 2 ? 8 : 0);
        const int r = 8 * i + 2 * (l & 3) + (e & 1);
        if (n < N && r < rows) y[(size_t)r * N + n] = sum;
    }
}

/* ==== Launch ==== */
/* Variants {KC, S, early}: 0 is the engine's default. */
struct gtc_variant {
    int kc, s, early;
};
static const gtc_variant k_gtc_variants[] = {
    /* 0, the default: the fastest of these at 1..16 rows on every 8B / 1B shape (H200,
     * cuda_ops_bench --only gemvtc, bench/results/2026-12-02-gemvtc-181f21f.log, where it is
     * listed as v1) */
    {512, 4, 1},
    {256, 8, 1},
    {256, 8, 0},
    {128, 12, 1},
    {512, 6, 1},
};
#define GTC_N_VARIANTS ((int)(sizeof k_gtc_variants / sizeof k_gtc_variants[0]))

template <int NT, int KC, int S>
static int gtc_go(cuda_gemv_segs segs, const uint16_t *x, int rows, int K, int early, int fold,
                  cudaStream_t st) {
    constexpr size_t smem = (size_t)S * GTC_ROWS * (KC * 2 + GTC_PAD);
    static int s_set[CUDA_MAX_DEVICES]; /* cudaFuncSetAttribute is per device */
    const int cd = cuda_cur_device();
    if (!s_set[cd]) {
        const cudaError_t e = cudaFuncSetAttribute(gemv_tc_kernel2<NT, KC, S>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return (int)e;
        s_set[cd] = 1;
    }
    int grid = 0;
    for (int i = 0; i < segs.n; i++) {
        segs.cta0[i] = grid;
        grid += (segs.N[i] + GTC_ROWS - 1) / GTC_ROWS;
    }
    pdl_launch l;
    pdl_launch_config(&l, dim3(grid), dim3((GTC_CW + 1) * 32), smem, st);
    return (int)cudaLaunchKernelEx(&l.cfg, gemv_tc_kernel2<NT, KC, S>, segs, x, rows, K, early,
                                   fold);
}

template <int KC, int S>
static int gtc_nt(const cuda_gemv_segs &segs, const uint16_t *x, int rows, int K, int early,
                  int fold, cudaStream_t st) {
    if (rows <= 8) return gtc_go<1, KC, S>(segs, x, rows, K, early, fold, st);
    if (rows <= 16) return gtc_go<2, KC, S>(segs, x, rows, K, early, fold, st);
    if (rows <= 24) return gtc_go<3, KC, S>(segs, x, rows, K, early, fold, st);
    return gtc_go<4, KC, S>(segs, x, rows, K, early, fold, st);
}

extern "C" int cuda_gemv_tc_variants(void) { return GTC_N_VARIANTS; }

/* rows x rows of x; fold > 0: rows = 2 fold, hi and lo parts of fold output rows */
static int gtc_run(const cuda_gemv_segs *segs, const uint16_t *x, int rows, int K, int variant,
                   int fold, cudaStream_t st) {
    if (!segs || segs->n < 1 || segs->n > CUDA_GEMV_MAX_SEGS || rows < 1 ||
        rows > CUDA_GEMV_TC_MAX_ROWS || K < 8 || K % 8 || !x || ((uintptr_t)x & 15) ||
        variant < 0 || variant >= GTC_N_VARIANTS)
        return (int)cudaErrorInvalidValue;
    for (int i = 0; i < segs->n; i++)
        if (!segs->W[i] || !segs->y[i] || segs->N[i] < 1 || ((uintptr_t)segs->W[i] & 15))
            return (int)cudaErrorInvalidValue;
    const int early = k_gtc_variants[variant].early;
    switch (variant) {
    case 0: return gtc_nt<512, 4>(*segs, x, rows, K, early, fold, st);
    case 3: return gtc_nt<128, 12>(*segs, x, rows, K, early, fold, st);
    case 4: return gtc_nt<512, 6>(*segs, x, rows, K, early, fold, st);
    default: return gtc_nt<256, 8>(*segs, x, rows, K, early, fold, st); /* 1, 2 */
    }
}

extern "C" int cuda_gemv_tc(const cuda_gemv_segs *segs, const uint16_t *x, int rows, int K,
                            int variant, cudaStream_t st) {
    return gtc_run(segs, x, rows, K, variant, 0, st);
}

extern "C" int cuda_gemv_tc_split(const cuda_gemv_segs *segs, const uint16_t *x, int rows,
                                  int K, int variant, cudaStream_t st) {
    if (rows < 1 || 2 * rows > CUDA_GEMV_TC_MAX_ROWS) return (int)cudaErrorInvalidValue;
    return gtc_run(segs, x, 2 * rows, K, variant, rows, st);
}
