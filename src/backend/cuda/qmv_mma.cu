/* Tensor-core quantized GEMV (qmv) for decode: 4-bit codes, group 64 or 128, 1..8 rows,
 * y[r, n] = sum_k x[r, k] * (s q + b)[n, k] (MLX affine weights, src/quant/quant.h), fp32 x
 * and y, scales / biases in any dtype. Same contract as cuda_qmv (segments, ldy, workspace).
 *
 * Why: the CUDA-core qmv (qgemv.cu) spends a LOP3, an FADD and an FFMA per code and row, so
 * its cost grows with the rows. Here a code pair costs one LOP3 (plus a shift per 4 codes)
 * into exact bf16 integers 128 + q, and the multiply-adds of 16 weight rows x 8 x rows go to
 * mma.sync m16n8k16: the same instructions at 8 rows as at one. Measured (H200, 8B q4g64,
 * bench/results/2026-12-03-qmv-96630a5.log) it wins at 2..8 rows on launches of <= 4096
 * output rows (o, down: K split over 8 warps where the streaming kernel has one CTA per 16
 * rows) and loses elsewhere: its 8-byte quarter-group loads (32 bytes of a row per 4 lanes)
 * stream at ~1.3 TB/s against the CUDA-core kernel's 2 TB/s at one row. End to end even the
 * o / down use lost (8B q4g64 B=8 1,796.9 against 2,093.3 tok/s), so it is opt-in
 * (MLXCEL_QMV_MMA; cuda_qmatmul.c, mma_ok). A 16-byte-load layout (weights re-laid out at
 * upload so a lane's 16 bytes feed whole-group MMAs) is the next step, not done.
 *
 * Layout:
 * - A warp owns 16 weight rows (lane (g, t): rows g and g + 8, the MMA's A rows) and a
 *   contiguous range of groups; the ks warps of a CTA on the same rows split the groups and
 *   add their totals in shared memory in a fixed order (no atomics: reproducible).
 * - Lane (g, t) reads, per group, the t-th quarter (G / 4 codes: 8 or 16 bytes) of both rows,
 *   so every MMA's 16 k lie in one group and the group's scale and bias apply to the MMA
 *   total in fp32: y += s * D + (b - 128 s) * sum(x), D = sum (128 + q) x.
 * - Word w of a quarter (codes c0..c7) gives the pairs (c0, c4), (c1, c5), (c2, c6), (c3, c7)
 *   by OR-ing nibbles into the mantissa of 128 (0x4300); pairs 0, 1 are the A registers of
 *   one MMA, pairs 2, 3 of the next (a sum over k does not care where each k sits as long as
 *   A and B agree).
 * - x: a prep kernel writes it once per launch as bf16 hi + lo (lo = x - hi rounded: ~16
 *   significant bits) in B-fragment order (one coalesced 16-byte load per lane and word), and
 *   the per-group sums of hi + lo, so the 128 offset cancels what the MMAs added. Lanes whose
 *   x row (g) is past `rows` load nothing (zeros).
 * - PDL: the first batch of weights, scales and biases is loaded before pdl_wait(). */
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_info.h"
#include "backend/cuda/qkern.cuh"

#define QM_WARPS 8 /* warps per CTA */
#define QM_U 4     /* groups per load batch */

template <int G> struct qm_cfg {
    static constexpr int WPL = G / 32; /* words per lane, row and group: 2 (g64), 4 (g128) */
};

/* x quads: group gi, word w, part h (0 hi, 1 lo), lane l at ((gi * WPL + w) * 2 + h) * 32 + l,
 * holding x row l / 4 at codes gi * G + (l % 4) * G / 4 + 8 w + {0, 4}, {1, 5}, {2, 6}, {3, 7}
 * as bf16 pairs; then the sums [K / G][8] fp32. */
template <int G> __host__ __device__ constexpr size_t qm_xquads(int K) {
    return (size_t)(K / G) * qm_cfg<G>::WPL * 2 * 32;
}

template <int G>
__global__ void __launch_bounds__(256)
qm_prep_kernel(uint4 *__restrict__ xq, float *__restrict__ xs, const float *__restrict__ x,
               long ldx, int rows, int K) {
    constexpr int WPL = qm_cfg<G>::WPL;
    pdl_wait(); /* x is the previous kernel's output; the previous qmv may still read xq */
    pdl_trigger();
    const int gi = blockIdx.x * 8 + (threadIdx.x >> 5), l = threadIdx.x & 31;
    if (gi >= K / G) return; /* whole warps */
    const int r = l >> 2, t = l & 3;
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < WPL; w++) {
        float f[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        if (r < rows) {
            const float *p = x + (size_t)r * ldx + (size_t)gi * G + t * (G / 4) + 8 * w;
            const float4 f0 = *(const float4 *)p, f1 = *(const float4 *)(p + 4);
            f[0] = f0.x, f[1] = f0.y, f[2] = f0.z, f[3] = f0.w;
            f[4] = f1.x, f[5] = f1.y, f[6] = f1.z, f[7] = f1.w;
        }
        uint32_t h[4], o[4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            h[e] = bf16x2_pack(f[e], f[e + 4]);
            const float ha = bf16_lo(h[e]), hb = bf16_hi(h[e]);
            o[e] = bf16x2_pack(f[e] - ha, f[e + 4] - hb); /* the differences are exact */
            sum += (ha + bf16_lo(o[e])) + (hb + bf16_hi(o[e]));
        }
        const size_t q = ((size_t)gi * WPL + w) * 2 * 32 + l;
        xq[q] = make_uint4(h[0], h[1], h[2], h[3]);
        xq[q + 32] = make_uint4(o[0], o[1], o[2], o[3]);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (t == 0) xs[(size_t)gi * 8 + r] = sum;
}

/* A lane's quarter of a row's group: 8 bytes (g64) or 16 (g128), streamed past L1. */
template <int G> struct qm_q;
template <> struct qm_q<64> {
    uint2 v;
    __device__ __forceinline__ void load(const uint8_t *p) { v = ldg_stream8(p); }
    __device__ __forceinline__ void zero() { v = make_uint2(0, 0); }
    __device__ __forceinline__ uint32_t word(int w) const { return w == 0 ? v.x : v.y; }
};
template <> struct qm_q<128> {
    uint4 v;
    __device__ __forceinline__ void load(const uint8_t *p) { v = ldg_stream16(p); }
    __device__ __forceinline__ void zero() { v = make_uint4(0, 0, 0, 0); }
    __device__ __forceinline__ uint32_t word(int w) const {
        return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w;
    }
};

template <int G, int SBT>
__global__ void __launch_bounds__(QM_WARPS * 32)
qmv_mma_kernel(qmv_segs segs, const uint4 *__restrict__ xq, const float *__restrict__ xs,
               int rows, int K, int ks) {
    constexpr int WPL = qm_cfg<G>::WPL;
    __shared__ float red[QM_WARPS][4][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const qmv_seg sg = qmv_pick(segs);
    const int n0 = (((int)blockIdx.x - sg.c0) * (QM_WARPS / ks) + warp / ks) * 16;
    const int wk = warp % ks, NG = K / G;
    const int per = (NG + ks - 1) / ks, gbeg = wk * per, gend = min(NG, gbeg + per);
    /* rows past N are clamped for the loads and never written */
    const int na = min(n0 + g, sg.N - 1), nb = min(n0 + g + 8, sg.N - 1);
    const uint8_t *wa = (const uint8_t *)sg.w + (size_t)na * (K / 2) + t * (G / 8);
    const uint8_t *wb = (const uint8_t *)sg.w + (size_t)nb * (K / 2) + t * (G / 8);
    const size_t sa = (size_t)na * NG, sb = (size_t)nb * NG;
    const bool xon = g < rows; /* this lane's B column (x row g) exists */
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    bool waited = false;
    for (int gb = gbeg; gb < gend; gb += QM_U) {
        qm_q<G> qa[QM_U], qb[QM_U];
        float s_a[QM_U], s_b[QM_U], b_a[QM_U], b_b[QM_U];
#pragma unroll
        for (int u = 0; u < QM_U; u++) {
            const int gi = gb + u;
            if (gi < gend) {
                qa[u].load(wa + (size_t)gi * (G / 2));
                qb[u].load(wb + (size_t)gi * (G / 2));
                s_a[u] = q_sb_load<SBT>(sg.s, sa + gi), b_a[u] = q_sb_load<SBT>(sg.b, sa + gi);
                s_b[u] = q_sb_load<SBT>(sg.s, sb + gi), b_b[u] = q_sb_load<SBT>(sg.b, sb + gi);
            } else {
                qa[u].zero(), qb[u].zero();
                s_a[u] = s_b[u] = b_a[u] = b_b[u] = 0.f;
            }
        }
        if (!waited) { /* the first batch is in flight while the prep kernel finishes x */
            pdl_wait();
            pdl_trigger();
            waited = true;
        }
#pragma unroll
        for (int u = 0; u < QM_U; u++) {
            const int gi = gb + u;
            if (gi >= gend) break; /* warp-uniform */
            float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int w = 0; w < WPL; w++) {
                const uint32_t xa = qa[u].word(w), xb = qb[u].word(w);
                const uint4 *xp = xq + ((size_t)gi * WPL + w) * 2 * 32 + lane;
                const uint4 bh = xon ? __ldg(xp) : make_uint4(0, 0, 0, 0);
                const uint4 bl = xon ? __ldg(xp + 32) : make_uint4(0, 0, 0, 0);
                const uint32_t a0 = q4_pair_bf16(xa), a1 = q4_pair_bf16(xb);
                const uint32_t a2 = q4_pair_bf16(xa >> 4), a3 = q4_pair_bf16(xb >> 4);
                mma_bf16_16816(d, a0, a1, a2, a3, bh.x, bh.y);
                mma_bf16_16816(d, a0, a1, a2, a3, bl.x, bl.y);
                const uint32_t c0 = q4_pair_bf16(xa >> 8), c1 = q4_pair_bf16(xb >> 8);
                const uint32_t c2 = q4_pair_bf16(xa >> 12), c3 = q4_pair_bf16(xb >> 12);
                mma_bf16_16816(d, c0, c1, c2, c3, bh.z, bh.w);
                mma_bf16_16816(d, c0, c1, c2, c3, bl.z, bl.w);
            }
            /* D: (row g, x row 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1) */
            const float2 sx = __ldg((const float2 *)(xs + (size_t)gi * 8 + 2 * t));
            const float ba = fmaf(-128.f, s_a[u], b_a[u]), bb = fmaf(-128.f, s_b[u], b_b[u]);
            acc[0] = fmaf(s_a[u], d[0], fmaf(ba, sx.x, acc[0]));
            acc[1] = fmaf(s_a[u], d[1], fmaf(ba, sx.y, acc[1]));
            acc[2] = fmaf(s_b[u], d[2], fmaf(bb, sx.x, acc[2]));
            acc[3] = fmaf(s_b[u], d[3], fmaf(bb, sx.y, acc[3]));
        }
    }
    if (!waited) pdl_wait(); /* a warp with no groups still writes after the wait */
    if (ks > 1) {
#pragma unroll
        for (int i = 0; i < 4; i++) red[warp][i][lane] = acc[i];
        __syncthreads();
        if (wk != 0) return;
        for (int w = 1; w < ks; w++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[i] += red[warp + w][i][lane];
    }
    const int r0 = 2 * t;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int n = n0 + g + (i >= 2 ? 8 : 0), r = r0 + (i & 1);
        if (n < sg.N && r < rows) sg.y[(size_t)r * sg.ldy + n] = acc[i];
    }
}

/* ==== Launch ==== */
template <int G, int SBT>
static int qm_go(qmv_segs &segs, const cuda_qmv_args *a, cudaStream_t st) {
    uint4 *xq = (uint4 *)a->ws;
    float *xs = (float *)(xq + qm_xquads<G>(a->K));
    const int NG = a->K / G;
    pdl_launch p;
    pdl_launch_config(&p, dim3((unsigned)((NG + 7) / 8)), dim3(256), 0, st);
    cudaError_t e =
        cudaLaunchKernelEx(&p.cfg, qm_prep_kernel<G>, xq, xs, a->x, a->ldx, a->rows, a->K);
    if (e != cudaSuccess) return (int)e;
    /* warps on the same rows split K until the grid holds ~16 warps per SM (loads in flight),
     * keeping at least one load batch per warp */
    int tiles = 0;
    for (int i = 0; i < segs.n; i++) tiles += (segs.N[i] + 15) / 16;
    int ks = 1;
    while (ks < QM_WARPS && tiles * ks < 16 * cuda_sm_count() && NG >= 2 * ks * QM_U) ks *= 2;
    const int tiles_per_cta = QM_WARPS / ks;
    int grid = 0;
    for (int i = 0; i < segs.n; i++) {
        segs.cta0[i] = grid;
        grid += ((segs.N[i] + 15) / 16 + tiles_per_cta - 1) / tiles_per_cta;
    }
    pdl_launch l;
    pdl_launch_config(&l, dim3(grid), dim3(QM_WARPS * 32), 0, st);
    return (int)cudaLaunchKernelEx(&l.cfg, qmv_mma_kernel<G, SBT>, segs, (const uint4 *)xq,
                                   (const float *)xs, a->rows, a->K, ks);
}

template <int G>
static int qm_sbt(qmv_segs &segs, const cuda_qmv_args *a, cudaStream_t st) {
    if (a->sb_dtype == CUDA_QSB_BF16) return qm_go<G, CUDA_QSB_BF16>(segs, a, st);
    if (a->sb_dtype == CUDA_QSB_F16) return qm_go<G, CUDA_QSB_F16>(segs, a, st);
    return qm_go<G, CUDA_QSB_F32>(segs, a, st);
}

extern "C" int cuda_qmv_mma_supported(const cuda_qmv_args *a) {
    return a && a->bits == 4 && (a->group == 64 || a->group == 128) && a->rows >= 1 &&
           a->rows <= CUDA_QMV_MAX_ROWS && a->K >= a->group && a->K % a->group == 0 && a->x &&
           ((uintptr_t)a->x & 15) == 0 && a->ldx >= a->K && a->ldx % 4 == 0 &&
           a->sb_dtype >= CUDA_QSB_BF16 && a->sb_dtype <= CUDA_QSB_F32;
}

extern "C" size_t cuda_qmv_mma_workspace_bytes(int K) {
    /* g64's is the larger */
    return qm_xquads<64>(K) * sizeof(uint4) + (size_t)(K / 64) * 8 * sizeof(float);
}

extern "C" int cuda_qmv_mma(const cuda_qmv_args *a, cudaStream_t st) {
    if (!cuda_qmv_mma_supported(a) || a->n_segs < 1 || a->n_segs > CUDA_QMV_MAX_SEGS || !a->ws ||
        ((uintptr_t)a->ws & 15) || a->ws_bytes < cuda_qmv_mma_workspace_bytes(a->K))
        return (int)cudaErrorInvalidValue;
    qmv_segs segs;
    if (qmv_segs_fill(a, &segs, true)) return (int)cudaErrorInvalidValue;
    return a->group == 64 ? qm_sbt<64>(segs, a, st) : qm_sbt<128>(segs, a, st);
}
