/* Quantized GEMV (qmv) on the int8 tensor cores for decode: 4-bit codes, group 64 or 128,
 * 1..8 rows, y[r, n] = sum_k x[r, k] * (s q + b)[n, k] (MLX affine weights), fp32 x and y,
 * bf16 or f16 scales. Same contract as cuda_qmv_mma (segments, ldy, workspace). Opt-in
 * (MLXCEL_QMV_I8): x is quantized to int8 per group, so results differ from the fp32-x
 * kernels by the activation rounding (as llama.cpp's quantized matvec with q8_1 activations).
 *
 * Why: qmv_mma.cu spends ~150 instructions per lane and 128-code step (nibble pairs into
 * bf16, x as bf16 hi + lo: 16 MMAs), and ncu has its warps computing for longer than a load
 * batch takes to arrive, so the loads of a warp are in flight for only ~1/3 of its time and
 * the one-row launch streams at ~2 TB/s. Here a word of 8 codes is two u8x4 registers (one
 * LOP3, one SHF + LOP3) and mma.sync m16n8k32 (u8 x s8 -> s32) takes 32 k per instruction:
 * ~4 MMAs and ~70 instructions a step.
 *
 * Layout (as qmv_mma.cu; a step is 128 codes, a lane's chunk 32 codes = 16 bytes):
 * - A warp owns 16 weight rows (lane (g, t): rows g and g + 8, the MMA's A rows) and a
 *   contiguous range of steps; lane t loads chunk t of the step from both rows.
 * - Word w of a chunk (codes c0..c7): w & 0x0F0F0F0F = (c0, c2, c4, c6) is A register a0
 *   (row g) or a1 (row g + 8) of MMA w, (w >> 4) & 0x0F0F0F0F = (c1, c3, c5, c7) is a2 / a3;
 *   the x bytes of the B registers follow the same order (a sum over k does not care where
 *   each k sits as long as A and B agree).
 * - B columns are (x row, group class) so the two g64 groups of a step stay apart; lanes off
 *   the diagonal read zero quads in the same 128-byte line as row 0's.
 * - x: a prep kernel quantizes each group of each x row to int8 (scale = absmax / 127, round
 *   to nearest) and writes the bytes in B-fragment order, the scale and the exact fp32 sum of
 *   the group: D = sum q * xq (int32, exact) and y += s * sx * D + b * sum(x) per group.
 * - The ks warps of a CTA on the same rows split the steps and add their totals in shared
 *   memory in a fixed order (no atomics: reproducible).
 * - PDL: the first batch of weights and scales is loaded before pdl_wait(). */
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_info.h"
#include "backend/cuda/qkern.cuh"

#define QI_WARPS 8 /* warps per CTA */
#define QI_U 4     /* steps per load batch */
#define QI_XW 32   /* scale / sum columns per step: up to 4 n-tiles of 8 */
#define QI_ROWS 8  /* x rows the workspace holds (CUDA_QMV_MAX_ROWS) */

/* Workspace: x bytes as uint4 [QI_ROWS][S][2 quads][8] (chunks 0..3, then 4 zero quads the
 * lanes off the diagonal read), then the x scales [S][QI_XW] and the sums [S][QI_XW] fp32.
 * Quad h of chunk t holds MMAs 2h and 2h + 1: {b0, b1} of each. */
__host__ __device__ constexpr int qi_steps(int K) { return (K + 127) / 128; }
__host__ __device__ constexpr size_t qi_quads(int K) { return (size_t)QI_ROWS * qi_steps(K) * 16; }

__device__ __forceinline__ uint32_t qi_pack4(int a, int b, int c, int d) {
    return (uint32_t)(a & 255) | (uint32_t)(b & 255) << 8 | (uint32_t)(c & 255) << 16 |
           (uint32_t)(d & 255) << 24;
}

/* d += a (16 x 32 u8, row) * b (32 x 8 s8, col), s32 accumulate (fragments per PTX). */
__device__ __forceinline__ void mma_u8s8_16832(int d[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                               uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* x row r (blockIdx.y; rows >= `rows` only zero their scales and sums), one thread per
 * (step, chunk t, word j): codes 8j..8j+7 of the chunk. A group is the 4 * (G / 32) adjacent
 * threads of a class: its absmax and sum go through shuffles (no early return). */
template <int G>
__global__ void __launch_bounds__(256)
qi_prep_kernel(uint4 *__restrict__ xq, float *__restrict__ xsc, float *__restrict__ xsum,
               const float *__restrict__ x, long ldx, int rows, int K) {
    constexpr int C = 128 / G, CPG = G / 32;
    pdl_wait(); /* x is the previous kernel's output; the previous qmv may still read xq */
    pdl_trigger();
    const int S = qi_steps(K), r = blockIdx.y;
    const int u = blockIdx.x * 256 + threadIdx.x, s = u >> 4, t = (u >> 2) & 3, j = u & 3;
    const bool in = s < S;
    const int k = s * 128 + 32 * t + 8 * j;
    float f[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (in && r < rows && k < K) {
        const float *p = x + (size_t)r * ldx + k;
        const float4 f0 = *(const float4 *)p, f1 = *(const float4 *)(p + 4);
        f[0] = f0.x, f[1] = f0.y, f[2] = f0.z, f[3] = f0.w;
        f[4] = f1.x, f[5] = f1.y, f[6] = f1.z, f[7] = f1.w;
    }
    float amax = 0.f, sum = 0.f;
#pragma unroll
    for (int e = 0; e < 8; e++) amax = fmaxf(amax, fabsf(f[e])), sum += f[e];
#pragma unroll
    for (int m = 1; m < 4 * CPG; m <<= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
        sum += __shfl_xor_sync(0xffffffffu, sum, m);
    }
    const float inv = amax > 0.f ? 127.f / amax : 0.f;
    int q[8];
#pragma unroll
    for (int e = 0; e < 8; e++) q[e] = __float2int_rn(f[e] * inv);
    if (in && r < rows) {
        /* quad j / 2 of chunk t, words 2 (j % 2) .. + 1 */
        uint2 *dst = (uint2 *)(xq + (((size_t)r * S + s) * 2 + j / 2) * 8 + t) + (j & 1);
        *dst = make_uint2(qi_pack4(q[0], q[2], q[4], q[6]), qi_pack4(q[1], q[3], q[5], q[7]));
        if (r == 0) dst[8] = make_uint2(0u, 0u); /* 64 bytes on: slot 4 + t, same half */
    }
    if (in && j == 0 && t % CPG == 0) {
        const size_t c = (size_t)s * QI_XW + r * C + t / CPG;
        xsc[c] = amax / 127.f;
        xsum[c] = sum;
    }
}

template <int G, int SBT, int NT>
__global__ void __launch_bounds__(QI_WARPS * 32, 2)
qmv_i8_kernel(qmv_segs segs, const uint4 *__restrict__ xq, const float *__restrict__ xsc,
              const float *__restrict__ xsum, int rows, int K, int ks) {
    constexpr int C = 128 / G, CPG = G / 32, RPT = 8 / C;
    __shared__ float red[QI_WARPS][NT * 4][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const qmv_seg sg = qmv_pick(segs);
    const int n0 = (((int)blockIdx.x - sg.c0) * (QI_WARPS / ks) + warp / ks) * 16;
    const int wk = warp % ks, S = qi_steps(K), NG = K / G;
    /* whole load batches per warp: the batch's scales are one aligned load */
    const int per = ((S + ks - 1) / ks + QI_U - 1) / QI_U * QI_U;
    const int sbeg = wk * per, send = min(S, sbeg + per);
    constexpr int NW = QI_U * C / 2; /* 16-bit scale words per row and batch */
    const bool sb_vec = NG % (QI_U * C) == 0;
    /* rows past N are clamped for the loads and never written */
    const int na = min(n0 + g, sg.N - 1), nb = min(n0 + g + 8, sg.N - 1);
    const uint8_t *wa = (const uint8_t *)sg.w + (size_t)na * (K / 2) + t * 16;
    const uint8_t *wb = (const uint8_t *)sg.w + (size_t)nb * (K / 2) + t * 16;
    const size_t sa = (size_t)na * NG, sb = (size_t)nb * NG;
    /* B source per n-tile: column g is x row nt * RPT + g / C, class g % C; chunk t is in
     * class t / CPG. Lanes off the diagonal read the zero quads beside x row 0's. */
    const uint4 *xl[NT];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const int br = nt * RPT + g / C;
        const bool on = g % C == t / CPG && br < rows;
        xl[nt] = on ? xq + (size_t)br * S * 16 + t : xq + 4 + t;
    }
    float acc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
    bool waited = false;
    for (int s0 = sbeg; s0 < send; s0 += QI_U) {
        uint4 qa[QI_U], qb[QI_U];
#pragma unroll
        for (int u = 0; u < QI_U; u++) {
            const int s = s0 + u;
            if (s < send && s * 128 + 32 * t < K) {
                qa[u] = ldg_stream16(wa + (size_t)s * 64);
                qb[u] = ldg_stream16(wb + (size_t)s * 64);
            } else {
                qa[u] = qb[u] = make_uint4(0, 0, 0, 0);
            }
        }
        /* scales / biases of groups s0 * C .. (s0 + U) * C - 1 of rows na, nb */
        uint32_t rs_a[NW], rb_a[NW], rs_b[NW], rb_b[NW];
        const bool vec = sb_vec && s0 + QI_U <= S;
        qm_sb_batch<NW>(rs_a, sg.s, sa, s0 * C, NG, vec);
        qm_sb_batch<NW>(rb_a, sg.b, sa, s0 * C, NG, vec);
        qm_sb_batch<NW>(rs_b, sg.s, sb, s0 * C, NG, vec);
        qm_sb_batch<NW>(rb_b, sg.b, sb, s0 * C, NG, vec);
        if (!waited) { /* the first batch is in flight while the prep kernel finishes x */
            pdl_wait();
            pdl_trigger();
            waited = true;
        }
#pragma unroll
        for (int u = 0; u < QI_U; u++) {
            const int s = s0 + u;
            if (s >= send) break; /* warp-uniform */
            /* two accumulator chains per n-tile (even / odd words) */
            int d[NT][2][4];
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int c = 0; c < 2; c++)
                    d[nt][c][0] = d[nt][c][1] = d[nt][c][2] = d[nt][c][3] = 0;
            const uint32_t wda[4] = {qa[u].x, qa[u].y, qa[u].z, qa[u].w};
            const uint32_t wdb[4] = {qb[u].x, qb[u].y, qb[u].z, qb[u].w};
            uint4 bx[NT][2];
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const uint4 *xp = xl[nt] + (size_t)s * 16;
                bx[nt][0] = __ldg(xp), bx[nt][1] = __ldg(xp + 8);
            }
#pragma unroll
            for (int w = 0; w < 4; w++) {
                const uint32_t a0 = wda[w] & 0x0F0F0F0Fu, a1 = wdb[w] & 0x0F0F0F0Fu;
                const uint32_t a2 = (wda[w] >> 4) & 0x0F0F0F0Fu, a3 = (wdb[w] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    const uint4 &b = bx[nt][w >> 1];
                    const uint32_t b0 = (w & 1) ? b.z : b.x, b1 = (w & 1) ? b.w : b.y;
                    mma_u8s8_16832(d[nt][w & 1], a0, a1, a2, a3, b0, b1);
                }
            }
            /* D: (row g, column 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1); columns'
             * groups u * C + (2t) % C and u * C + (2t + 1) % C of the batch */
            const int j0 = u * C, j1 = u * C + (C - 1);
            const float sa0 = qm_sb<SBT>(rs_a, j0), sa1 = qm_sb<SBT>(rs_a, j1);
            const float sb0 = qm_sb<SBT>(rs_b, j0), sb1 = qm_sb<SBT>(rs_b, j1);
            const float ba0 = qm_sb<SBT>(rb_a, j0), ba1 = qm_sb<SBT>(rb_a, j1);
            const float bb0 = qm_sb<SBT>(rb_b, j0), bb1 = qm_sb<SBT>(rb_b, j1);
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const size_t c = (size_t)s * QI_XW + nt * 8 + 2 * t;
                const float2 sx = __ldg((const float2 *)(xsc + c));
                const float2 sm = __ldg((const float2 *)(xsum + c));
                const float D0 = (float)(d[nt][0][0] + d[nt][1][0]);
                const float D1 = (float)(d[nt][0][1] + d[nt][1][1]);
                const float D2 = (float)(d[nt][0][2] + d[nt][1][2]);
                const float D3 = (float)(d[nt][0][3] + d[nt][1][3]);
                acc[nt][0] = fmaf(sa0 * sx.x, D0, fmaf(ba0, sm.x, acc[nt][0]));
                acc[nt][1] = fmaf(sa1 * sx.y, D1, fmaf(ba1, sm.y, acc[nt][1]));
                acc[nt][2] = fmaf(sb0 * sx.x, D2, fmaf(bb0, sm.x, acc[nt][2]));
                acc[nt][3] = fmaf(sb1 * sx.y, D3, fmaf(bb1, sm.y, acc[nt][3]));
            }
        }
    }
    if (!waited) pdl_wait(); /* a warp with no steps still writes after the wait */
    if (ks > 1) {
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) red[warp][nt * 4 + i][lane] = acc[nt][i];
        __syncthreads();
        if (wk != 0) return;
        for (int w = 1; w < ks; w++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++) acc[nt][i] += red[warp + w][nt * 4 + i][lane];
    }
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int n = n0 + g + 8 * h;
            if (n >= sg.N) continue;
            if (C == 1) { /* columns 2t, 2t + 1: x rows */
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int r = nt * 8 + 2 * t + e;
                    if (r < rows) sg.y[(size_t)r * sg.ldy + n] = acc[nt][2 * h + e];
                }
            } else { /* columns 2t, 2t + 1: the two groups of x row t */
                const int r = nt * RPT + t;
                if (r < rows) sg.y[(size_t)r * sg.ldy + n] = acc[nt][2 * h] + acc[nt][2 * h + 1];
            }
        }
}

/* ==== Launch ==== */
template <int G, int SBT, int NT>
static int qi_go(qmv_segs &segs, const cuda_qmv_args *a, cudaStream_t st) {
    uint4 *xq = (uint4 *)a->ws;
    const int S = qi_steps(a->K);
    float *xsc = (float *)(xq + qi_quads(a->K)), *xsum = xsc + (size_t)S * QI_XW;
    pdl_launch p;
    pdl_launch_config(&p, dim3((unsigned)((S * 16 + 255) / 256), QI_ROWS), dim3(256), 0, st);
    cudaError_t e = cudaLaunchKernelEx(&p.cfg, qi_prep_kernel<G>, xq, xsc, xsum, a->x, a->ldx,
                                       a->rows, a->K);
    if (e != cudaSuccess) return (int)e;
    /* warps on the same rows split K until the grid holds ~16 warps per SM, keeping at least
     * two load batches per warp */
    int tiles = 0;
    for (int i = 0; i < segs.n; i++) tiles += (segs.N[i] + 15) / 16;
    int ks = 1;
    while (ks < QI_WARPS && tiles * ks < 16 * cuda_sm_count() && S >= 2 * ks * QI_U) ks *= 2;
    const int tiles_per_cta = QI_WARPS / ks;
    int grid = 0;
    for (int i = 0; i < segs.n; i++) {
        segs.cta0[i] = grid;
        grid += ((segs.N[i] + 15) / 16 + tiles_per_cta - 1) / tiles_per_cta;
    }
    pdl_launch l;
    pdl_launch_config(&l, dim3(grid), dim3(QI_WARPS * 32), 0, st);
    return (int)cudaLaunchKernelEx(&l.cfg, qmv_i8_kernel<G, SBT, NT>, segs, (const uint4 *)xq,
                                   (const float *)xsc, (const float *)xsum, a->rows, a->K, ks);
}

template <int G>
static int qi_sbt(qmv_segs &segs, const cuda_qmv_args *a, cudaStream_t st) {
    /* n-tiles: 8 / C x rows each (g64: 4, g128: 8) */
    if constexpr (G == 64) {
        if (a->rows > 4)
            return a->sb_dtype == CUDA_QSB_BF16 ? qi_go<G, CUDA_QSB_BF16, 2>(segs, a, st)
                                                : qi_go<G, CUDA_QSB_F16, 2>(segs, a, st);
    }
    return a->sb_dtype == CUDA_QSB_BF16 ? qi_go<G, CUDA_QSB_BF16, 1>(segs, a, st)
                                        : qi_go<G, CUDA_QSB_F16, 1>(segs, a, st);
}

extern "C" int cuda_qmv_i8_supported(const cuda_qmv_args *a) {
    return a && a->bits == 4 && (a->group == 64 || a->group == 128) && a->rows >= 1 &&
           a->rows <= CUDA_QMV_MAX_ROWS && a->K >= a->group && a->K % a->group == 0 && a->x &&
           ((uintptr_t)a->x & 15) == 0 && a->ldx >= a->K && a->ldx % 4 == 0 &&
           (a->sb_dtype == CUDA_QSB_BF16 || a->sb_dtype == CUDA_QSB_F16);
}

extern "C" size_t cuda_qmv_i8_workspace_bytes(int K) {
    return qi_quads(K) * sizeof(uint4) + 2 * (size_t)qi_steps(K) * QI_XW * sizeof(float);
}

extern "C" int cuda_qmv_i8(const cuda_qmv_args *a, cudaStream_t st) {
    if (!cuda_qmv_i8_supported(a) || a->n_segs < 1 || a->n_segs > CUDA_QMV_MAX_SEGS || !a->ws ||
        ((uintptr_t)a->ws & 15) || a->ws_bytes < cuda_qmv_i8_workspace_bytes(a->K))
        return (int)cudaErrorInvalidValue;
    qmv_segs segs;
    if (qmv_segs_fill(a, &segs, true)) return (int)cudaErrorInvalidValue;
    return a->group == 64 ? qi_sbt<64>(segs, a, st) : qi_sbt<128>(segs, a, st);
}
