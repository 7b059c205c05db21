/* bf16 GEMV for decode on tensor cores: y[r, n] = sum_k x[r, k] * W[n, k] for 1..8 rows.
 *
 * Decode at small batch is a weight stream: every weight byte is read exactly once per call
 * for all rows, so the time floor is N*K*2 bytes over memory bandwidth. The arithmetic goes to
 * mma.sync m16n8k16 (bf16 in, fp32 accumulate): 16 weight rows are A, up to 8 activation rows
 * are B, so unpacking and FMAs no longer bound 8-row steps (the CUDA-core version reached 46%
 * of copy bandwidth at 8 rows against 81% at 1 row).
 *
 * Fragment trick: a lane loads 16 bytes (8 consecutive k) of weight rows g and g + 8
 * (g = lane / 4, t = lane % 4) and 8 consecutive k of activation row g. A sum over k does
 * not care which k sits in which MMA slot as long as A and B agree, so the 32 k of one
 * "k-tile" (4 lanes x 8) are fed to two MMAs with physical k 8t + {0..3} in the slots
 * {2t, 2t+1, 2t+8, 2t+9} of the first and 8t + {4..7} in those of the second. Every load is
 * a plain 16-byte vector load; no shuffles, no shared-memory staging of weights.
 *
 * Work split: a CTA owns 16 weight rows; its 8 warps take the k-tiles round-robin, each with
 * GEMV_KB k-tiles (2 x GEMV_KB 16-byte weight loads per lane) in flight; the 8 partial
 * 16 x 8 tiles are summed in shared memory in a fixed order (reproducible, no atomics).
 * x is read straight from global memory (L1/L2 resident; fp32 or bf16) and rounded to bf16,
 * like transformers' bf16 Linear input. A result depends only on its own x row and W, so it
 * is the same whatever the other rows are (batch invariance for 1..8 rows).
 *
 * GLU input: with x_up set, x is act(x) * x_up (fp32 both), computed while loading: the
 * down projection reads the gate/up outputs directly and the GLU kernel disappears.
 *
 * PDL: the first batch of weight loads is issued before pdl_wait() (weights are constant),
 * so the stream of the next matrix starts while the previous small kernel finishes.
 *
 * Segments: up to CUDA_GEMV_MAX_SEGS weights sharing x and K (Q/K/V, gate/up) run as one
 * launch: the grid is the concatenation of each segment's CTAs. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.cuh"
#include "backend/cuda/cuda_ops.h"

#define GEMV_WARPS 8  /* warps per CTA, splitting K */
#define GEMV_KB 4     /* k-tiles (32 k each) per load batch per warp */
#define GEMV_KT 32    /* k per tile: 4 lanes x 8 */

/* ==== Device helpers ==== */

__device__ __forceinline__ void mma_bf16_16816(float c[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                               uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* 8 consecutive x values of one row as bf16 (x fp32 or bf16; with up: act(x) * up). */
template <typename XT>
__device__ __forceinline__ uint4 gemv_x8(const XT *x, const float *up, int act, size_t i);

template <>
__device__ __forceinline__ uint4 gemv_x8<float>(const float *x, const float *up, int act, size_t i) {
    float f[8];
    const float4 a = __ldg((const float4 *)(x + i)), b = __ldg((const float4 *)(x + i + 4));
    f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
    f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
    if (up) {
        const float4 c = __ldg((const float4 *)(up + i)), d = __ldg((const float4 *)(up + i + 4));
        const float u[8] = {c.x, c.y, c.z, c.w, d.x, d.y, d.z, d.w};
#pragma unroll
        for (int e = 0; e < 8; e++) f[e] = act_apply(f[e], act) * u[e];
    }
    return f32x8_to_bf16x8(f);
}

template <>
__device__ __forceinline__ uint4 gemv_x8<uint16_t>(const uint16_t *x, const float *, int, size_t i) {
    return __ldg((const uint4 *)(x + i));
}

/* ==== Kernel ==== */

template <typename XT>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
gemv_tc_kernel(cuda_gemv_segs segs,        /* W [N, K] -> y [rows, N] per segment */
               const XT *__restrict__ x,   /* [rows, K] */
               const float *__restrict__ x_up, int act, /* GLU: x = act(x) * x_up */
               int y_bf16, int rows, int K) {
    __shared__ float red[GEMV_WARPS][32][4];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    /* this CTA's segment (compile-time indices only: a run-time index into the parameter
     * struct would copy it to local memory) */
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
    const int n0 = ((int)blockIdx.x - c0) * 16;
    const bool ok0 = n0 + g < N, ok8 = n0 + g + 8 < N;
    const uint16_t *w0 = W + (size_t)(ok0 ? n0 + g : 0) * K + 8 * t;
    const uint16_t *w8 = W + (size_t)(ok8 ? n0 + g + 8 : 0) * K + 8 * t;
    const int n_kt = (K + GEMV_KT - 1) / GEMV_KT;
    const bool xrow = g < rows;
    const size_t xoff = (size_t)(xrow ? g : 0) * K + 8 * t;

    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    uint4 wa[GEMV_KB], wb[GEMV_KB];
    /* k-tiles of this warp: kt = warp + GEMV_WARPS * j */
    int kt0 = warp;
    auto load_batch = [&](int kt_first) {
#pragma unroll
        for (int j = 0; j < GEMV_KB; j++) {
            const int k = (kt_first + GEMV_WARPS * j) * GEMV_KT + 8 * t;
            const bool in = k < K; /* K % 8 == 0: a lane's 8 k are all in or all out */
            const size_t off = (size_t)(kt_first + GEMV_WARPS * j) * GEMV_KT;
            wa[j] = in && ok0 ? ldg_stream16(w0 + off) : make_uint4(0, 0, 0, 0);
            wb[j] = in && ok8 ? ldg_stream16(w8 + off) : make_uint4(0, 0, 0, 0);
        }
    };
    if (kt0 < n_kt) load_batch(kt0); /* weights only: safe before the dependency wait */
    pdl_wait();
    pdl_trigger();
    for (; kt0 < n_kt; kt0 += GEMV_WARPS * GEMV_KB) {
        uint4 xv[GEMV_KB];
#pragma unroll
        for (int j = 0; j < GEMV_KB; j++) {
            const int k = (kt0 + GEMV_WARPS * j) * GEMV_KT + 8 * t;
            xv[j] = xrow && k < K ? gemv_x8<XT>(x, x_up, act, xoff + (size_t)(kt0 + GEMV_WARPS * j) * GEMV_KT)
                                  : make_uint4(0, 0, 0, 0);
        }
        uint4 ca[GEMV_KB], cb[GEMV_KB];
#pragma unroll
        for (int j = 0; j < GEMV_KB; j++) ca[j] = wa[j], cb[j] = wb[j];
        /* the next batch's weights go out before this batch's MMAs */
        if (kt0 + GEMV_WARPS * GEMV_KB < n_kt) load_batch(kt0 + GEMV_WARPS * GEMV_KB);
#pragma unroll
        for (int j = 0; j < GEMV_KB; j++) {
            mma_bf16_16816(acc, ca[j].x, cb[j].x, ca[j].y, cb[j].y, xv[j].x, xv[j].y);
            mma_bf16_16816(acc, ca[j].z, cb[j].z, ca[j].w, cb[j].w, xv[j].z, xv[j].w);
        }
    }
    /* acc: [0], [1] = W row g, x rows 2t, 2t + 1; [2], [3] = W row g + 8, same x rows */
#pragma unroll
    for (int e = 0; e < 4; e++) red[warp][lane][e] = acc[e];
    __syncthreads();
    if (threadIdx.x < 128) {
        const int l = threadIdx.x >> 2, e = threadIdx.x & 3;
        float s = 0.f;
#pragma unroll
        for (int w = 0; w < GEMV_WARPS; w++) s += red[w][l][e];
        const int n = n0 + (l >> 2) + (e >= 2 ? 8 : 0), r = 2 * (l & 3) + (e & 1);
        if (n < N && r < rows) {
            if (y_bf16) ((uint16_t *)y)[(size_t)r * N + n] = (uint16_t)f32_to_bf16_bits(s);
            else ((float *)y)[(size_t)r * N + n] = s;
        }
    }
}

/* ==== Launcher ==== */

template <typename XT>
static int gemv_launch(cuda_gemv_segs segs, const XT *x, const float *x_up, int act, int y_bf16,
                       int rows, int K, cudaStream_t stream) {
    int grid = 0;
    for (int i = 0; i < segs.n; i++) {
        segs.cta0[i] = grid;
        grid += (segs.N[i] + 15) / 16;
    }
    pdl_launch l;
    pdl_launch_config(&l, dim3(grid), dim3(GEMV_WARPS * 32), 0, stream);
    return (int)cudaLaunchKernelEx(&l.cfg, gemv_tc_kernel<XT>, segs, x, x_up, act, y_bf16, rows, K);
}

extern "C" int cuda_gemv_bf16_glu(const cuda_gemv_segs *segs, const void *x, int x_dtype,
                                  const float *x_up, int act, int y_dtype, int rows, int K,
                                  cudaStream_t stream) {
    if (!segs || segs->n < 1 || segs->n > CUDA_GEMV_MAX_SEGS || rows < 1 || rows > 8 || K < 8 ||
        K % 8 != 0 || !x || ((uintptr_t)x & 15) || ((uintptr_t)x_up & 15) ||
        (x_dtype != CUDA_OPS_F32 && x_dtype != CUDA_OPS_BF16) ||
        (y_dtype != CUDA_OPS_F32 && y_dtype != CUDA_OPS_BF16) ||
        (x_up && (x_dtype != CUDA_OPS_F32 || act < 0 || act > 2)))
        return (int)cudaErrorInvalidValue;
    for (int i = 0; i < segs->n; i++)
        if (!segs->W[i] || !segs->y[i] || segs->N[i] < 1 || ((uintptr_t)segs->W[i] & 15))
            return (int)cudaErrorInvalidValue;
    const int y_bf16 = y_dtype == CUDA_OPS_BF16;
    if (x_dtype == CUDA_OPS_BF16)
        return gemv_launch<uint16_t>(*segs, (const uint16_t *)x, NULL, 0, y_bf16, rows, K, stream);
    return gemv_launch<float>(*segs, (const float *)x, x_up, act, y_bf16, rows, K, stream);
}

extern "C" int cuda_gemv_bf16_multi(const cuda_gemv_segs *segs, const void *x, int x_dtype,
                                    int y_dtype, int rows, int K, cudaStream_t stream) {
    return cuda_gemv_bf16_glu(segs, x, x_dtype, NULL, 0, y_dtype, rows, K, stream);
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
