/* bf16 GEMV for decode: y[r, n] = sum_k x[r, k] * W[n, k] for 1..8 rows.
 *
 * Decode at small batch is a weight stream: every weight byte is read exactly once per call
 * for all rows, so the time floor is N*K*2 bytes over memory bandwidth.
 *
 * Work split: a warp owns GEMV_RPW consecutive weight rows and walks the whole K; each lane
 * loads 16 bytes (8 bf16) per row per 256-element step, GEMV_U steps at a time, so
 * RPW*U = 8 independent 16-byte loads are in flight per lane before the first use.
 * x lives in shared memory (staged by cp.async in its own dtype) and is shared by all warps
 * of the CTA; when R*K elements do not fit the budget, K is cut into chunks that are
 * double-buffered (chunk c+1 is copied while chunk c is consumed; one barrier per chunk).
 * Lane partial sums are reduced by warp shuffles; no atomics, so results are reproducible.
 *
 * Template parameters are compile-time only: R in {1, 2, 4, 8} (rows round up, missing rows
 * read zeros and are not written) and the x dtype: 8 instantiations.
 *
 * Segments: up to CUDA_GEMV_MAX_SEGS weights that share x and K (Q/K/V, gate/up) run as one
 * launch: the grid is the concatenation of each segment's CTAs, so small matrices (K/V
 * projections of 1024 rows) no longer leave most SMs idle, and two launches are saved. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.cuh"
#include "backend/cuda/cuda_ops.h"

#define GEMV_RPW 4                  /* weight rows per warp */
#define GEMV_U 2                    /* 256-element K steps per load batch */
#define GEMV_STEP 256               /* elements per warp step: 32 lanes x 8 */
#define GEMV_SMEM_BUDGET (64 * 1024) /* x staging per CTA: 3 CTAs fit one SM */

/* ==== x staging (cp.async, 16 bytes per copy) ==== */

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, int src_bytes) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem),
                 "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit(void) { asm volatile("cp.async.commit_group;"); }
__device__ __forceinline__ void cp_async_wait_all(void) {
    asm volatile("cp.async.wait_group 0;" ::: "memory");
}

/* Copy x[:, k0 : k0 + len] into xs [R, KC]; rows >= rows are zero-filled (src-size 0). */
template <int R, typename XT>
__device__ __forceinline__ void gemv_stage_x(XT *xs, const XT *x, int rows, int K, int KC,
                                             int k0, int len) {
    constexpr int EPC = 16 / sizeof(XT); /* elements per 16-byte copy */
    const int per_row = len / EPC;
    for (int p = threadIdx.x; p < R * per_row; p += blockDim.x) {
        int r = p / per_row, j = p - r * per_row;
        const XT *src = r < rows ? x + (size_t)r * K + k0 + j * EPC : x;
        cp_async16(xs + (size_t)r * KC + j * EPC, src, r < rows ? 16 : 0);
    }
}

/* 8 x values of row r at chunk offset kk, as fp32. */
__device__ __forceinline__ void gemv_x8(const float *xs, float f[8]) {
    float4 a = *(const float4 *)xs, b = *(const float4 *)(xs + 4);
    f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
    f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}
__device__ __forceinline__ void gemv_x8(const uint16_t *xs, float f[8]) {
    bf16x8_to_f32(*(const uint4 *)xs, f);
}

/* ==== Kernel ==== */

template <int R, typename XT>
__global__ void __launch_bounds__(256, 1)
gemv_bf16_kernel(cuda_gemv_segs segs,           /* W [N, K] -> y [rows, N] per segment */
                 const XT *__restrict__ x,       /* [rows, K] */
                 int y_bf16, int rows, int K, int KC) {
    extern __shared__ uint4 gemv_smem[]; /* [2][R][KC] XT, or [R][KC] with one chunk */
    XT *xbuf = (XT *)gemv_smem;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    /* this CTA's segment: CTAs [cta0[s], cta0[s + 1]) belong to segment s */
    /* (compile-time indices only: a run-time index into the parameter struct would copy it
     * to local memory) */
    const uint16_t *W = segs.W[0];
    void *y = segs.y[0];
    int N = segs.N[0], c0 = 0;
#pragma unroll
    for (int i = 1; i < CUDA_GEMV_MAX_SEGS; i++)
        if (i < segs.n && (int)blockIdx.x >= segs.cta0[i]) {
            W = segs.W[i];
            y = segs.y[i];
            N = segs.N[i];
            c0 = segs.cta0[i];
        }
    const int n0 = (((int)blockIdx.x - c0) * (blockDim.x >> 5) + warp) * GEMV_RPW;
    const int nchunks = (K + KC - 1) / KC;

    float acc[GEMV_RPW][R];
#pragma unroll
    for (int p = 0; p < GEMV_RPW; p++)
#pragma unroll
        for (int r = 0; r < R; r++) acc[p][r] = 0.f;

    /* Row pointers; rows past N are clamped (loads skipped below, never written). */
    const uint16_t *wrow[GEMV_RPW];
#pragma unroll
    for (int p = 0; p < GEMV_RPW; p++) wrow[p] = W + (size_t)min(n0 + p, N - 1) * K;

    gemv_stage_x<R, XT>(xbuf, x, rows, K, KC, 0, min(KC, K));
    cp_async_commit();

    for (int c = 0; c < nchunks; c++) {
        /* Chunk c has landed for this thread; the barrier makes it visible to all and also
         * says every warp is done with chunk c-1, whose buffer chunk c+1 reuses. */
        cp_async_wait_all();
        __syncthreads();
        const int k0 = c * KC, len = min(KC, K - k0);
        if (c + 1 < nchunks) {
            gemv_stage_x<R, XT>(xbuf + (size_t)((c + 1) & 1) * R * KC, x, rows, K, KC, k0 + KC,
                                min(KC, K - k0 - KC));
            cp_async_commit();
        }
        const XT *xs = xbuf + (size_t)(c & 1) * R * KC;

        for (int base = 0; base < len; base += GEMV_STEP * GEMV_U) {
            uint4 w[GEMV_U][GEMV_RPW];
            /* All loads first: RPW*U independent 16-byte loads in flight per lane. */
#pragma unroll
            for (int u = 0; u < GEMV_U; u++) {
                const int kk = base + u * GEMV_STEP + lane * 8;
#pragma unroll
                for (int p = 0; p < GEMV_RPW; p++)
                    w[u][p] = (kk < len && n0 + p < N) ? ldg_stream16(wrow[p] + k0 + kk)
                                                       : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < GEMV_U; u++) {
                const int kk = base + u * GEMV_STEP + lane * 8;
                /* Skip, not multiply by zero: the stale tail of the buffer may hold NaN. */
                if (kk < len) {
                    float wf[GEMV_RPW][8];
#pragma unroll
                    for (int p = 0; p < GEMV_RPW; p++) bf16x8_to_f32(w[u][p], wf[p]);
#pragma unroll
                    for (int r = 0; r < R; r++) {
                        float xf[8];
                        gemv_x8(xs + (size_t)r * KC + kk, xf);
#pragma unroll
                        for (int p = 0; p < GEMV_RPW; p++)
#pragma unroll
                            for (int e = 0; e < 8; e++)
                                acc[p][r] = fmaf(wf[p][e], xf[e], acc[p][r]);
                    }
                }
            }
        }
    }

    /* Butterfly sums leave every total in every lane; lane (p*R + r) % 32 writes it. The
     * selects use compile-time indices so acc stays in registers. */
#pragma unroll
    for (int p = 0; p < GEMV_RPW; p++)
#pragma unroll
        for (int r = 0; r < R; r++) {
            float v = warp_sum(acc[p][r]);
            const int n = n0 + p;
            if (lane == ((p * R + r) & 31) && r < rows && n < N) {
                if (y_bf16)
                    ((uint16_t *)y)[(size_t)r * N + n] = (uint16_t)f32_to_bf16_bits(v);
                else
                    ((float *)y)[(size_t)r * N + n] = v;
            }
        }
}

/* ==== Launcher ==== */

template <int R, typename XT>
static int gemv_launch(cuda_gemv_segs segs, const XT *x, int y_bf16, int rows, int K,
                       cudaStream_t stream) {
    static int s_sm_count = 0, s_smem_set = 0;
    if (!s_sm_count) {
        int dev = 0, sms = 0;
        cudaError_t e = cudaGetDevice(&dev);
        if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        if (e != cudaSuccess) return (int)e;
        s_sm_count = sms;
    }
    /* One chunk when all of x fits the budget, else double-buffered chunks. */
    const size_t xs = sizeof(XT);
    const int k_round = (K + GEMV_STEP - 1) / GEMV_STEP * GEMV_STEP;
    int KC;
    size_t smem;
    if ((size_t)R * k_round * xs <= GEMV_SMEM_BUDGET) {
        KC = k_round;
        smem = (size_t)R * KC * xs;
    } else {
        KC = (int)(GEMV_SMEM_BUDGET / (2 * R * xs)) / GEMV_STEP * GEMV_STEP;
        smem = 2 * (size_t)R * KC * xs;
    }
    if (!s_smem_set) {
        cudaError_t e = cudaFuncSetAttribute(gemv_bf16_kernel<R, XT>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             GEMV_SMEM_BUDGET);
        if (e != cudaSuccess) return (int)e;
        s_smem_set = 1;
    }
    /* 8 warps per CTA unless that leaves fewer than two CTAs per SM (N = 4096: 4 warps,
     * 256 CTAs): x staging is per CTA, so smaller CTAs cost L2 reads, not HBM bytes. */
    int n_total = 0;
    for (int i = 0; i < segs.n; i++) n_total += segs.N[i];
    int warps = 8;
    if ((n_total + 8 * GEMV_RPW - 1) / (8 * GEMV_RPW) < 2 * s_sm_count) warps = 4;
    const int rows_per_cta = warps * GEMV_RPW;
    int grid = 0;
    for (int i = 0; i < segs.n; i++) {
        segs.cta0[i] = grid;
        grid += (segs.N[i] + rows_per_cta - 1) / rows_per_cta;
    }
    gemv_bf16_kernel<R, XT><<<grid, warps * 32, smem, stream>>>(segs, x, y_bf16, rows, K, KC);
    return (int)cudaGetLastError();
}

template <typename XT>
static int gemv_dispatch(const cuda_gemv_segs &segs, const XT *x, int y_bf16, int rows, int K,
                         cudaStream_t stream) {
    if (rows == 1) return gemv_launch<1, XT>(segs, x, y_bf16, rows, K, stream);
    if (rows == 2) return gemv_launch<2, XT>(segs, x, y_bf16, rows, K, stream);
    if (rows <= 4) return gemv_launch<4, XT>(segs, x, y_bf16, rows, K, stream);
    return gemv_launch<8, XT>(segs, x, y_bf16, rows, K, stream);
}

extern "C" int cuda_gemv_bf16_multi(const cuda_gemv_segs *segs, const void *x, int x_dtype,
                                    int y_dtype, int rows, int K, cudaStream_t stream) {
    if (!segs || segs->n < 1 || segs->n > CUDA_GEMV_MAX_SEGS || rows < 1 || rows > 8 || K < 8 ||
        K % 8 != 0 || !x || ((uintptr_t)x & 15) ||
        (x_dtype != CUDA_OPS_F32 && x_dtype != CUDA_OPS_BF16) ||
        (y_dtype != CUDA_OPS_F32 && y_dtype != CUDA_OPS_BF16))
        return (int)cudaErrorInvalidValue;
    for (int i = 0; i < segs->n; i++)
        if (!segs->W[i] || !segs->y[i] || segs->N[i] < 1 || ((uintptr_t)segs->W[i] & 15))
            return (int)cudaErrorInvalidValue;
    const int y_bf16 = y_dtype == CUDA_OPS_BF16;
    if (x_dtype == CUDA_OPS_BF16)
        return gemv_dispatch<uint16_t>(*segs, (const uint16_t *)x, y_bf16, rows, K, stream);
    return gemv_dispatch<float>(*segs, (const float *)x, y_bf16, rows, K, stream);
}

extern "C" int cuda_gemv_bf16(const uint16_t *W, const void *x, int x_dtype, void *y, int y_dtype,
                              int rows, int N, int K, cudaStream_t stream) {
    cuda_gemv_segs segs = {};
    segs.n = 1;
    segs.W[0] = W;
    segs.y[0] = y;
    segs.N[0] = N;
    return cuda_gemv_bf16_multi(&segs, x, x_dtype, y_dtype, rows, K, stream);
}
