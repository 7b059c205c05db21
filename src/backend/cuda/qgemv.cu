/* Quantized GEMV (qmv) for decode: y[r, n] = sum_k x[r, k] * (s q + b)[n, k], 1..8 rows,
 * MLX affine weights (src/backend/qfmt/qfmt.h), fp32 x and y, fp32 accumulation.
 *
 * Decode is a weight stream: each packed word, scale and bias is read once per pass for all
 * rows of the pass, so the floor is (N*K*bits/8 + 2*N*K/group*sb bytes) / bandwidth.
 *
 * Fast path (bits 4 and 8):
 * - Work split: a warp owns QMV_RPW weight rows; each lane loads 16 bytes (32 4-bit or 16
 *   8-bit codes, always inside one group since group >= 32) per row per warp step, QMV_U
 *   steps at a time: RPW*U = 8 independent 16-byte streaming loads in flight per lane. When
 *   the grid would hold few warps, the 4 warps of a CTA split K in two (ksplit) and add
 *   their partial sums through shared memory (fixed order: reproducible).
 * - Dequantization in registers, bias hoisted: per lane chunk, sum_k (s q + b) x =
 *   s * sum(q x) + b * sum(x). Codes become floats without I2F (quarter rate): the code's
 *   bits are masked in place and OR-ed into the mantissa of 2^23 (one LOP3; 8-bit: one PRMT
 *   moves the byte to bits 0..7), and one FADD of -2^23 gives q * 2^p exactly (p = the code's
 *   bit position, <= 16: high codes are first shifted down so they never touch the
 *   exponent). The 2^-p is folded into x once per call by a small prep kernel (exact: a power
 *   of two), so a code costs one LOP3, one FADD and one FFMA per row. Prep and qmv launch with
 *   PDL: the qmv's first weight batch is in flight before it waits for x'.
 * - x: the prep kernel writes x' = x * 2^-p in a lane-interleaved order (for warp step t and
 *   16-byte chunk j, the 32 lanes' chunks are adjacent: every x load of a warp reads 512
 *   contiguous bytes) plus sum(x) per lane chunk; the main kernel reads both through L1 (one
 *   copy per SM, shared by all its CTAs, no staging barrier). Weights bypass L1.
 * Other widths (2, 3, 5, 6): a warp per row and code-by-code extraction (correct, simple).
 *
 * Row window (qmv-multirow): rows are cut into passes of `multirow` rows (grid.y), each
 * pass a compile-time R in {1, 2, 4, 8} (rows round up; padded rows of x' are zero and not
 * written). Segments: up to CUDA_QMV_MAX_SEGS weights sharing x (Q/K/V, gate/up) run as one
 * launch, the grid being the concatenation of each segment's CTAs. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_info.h"
#include "backend/cuda/qkern.cuh"

#define QMV_RPW 4          /* weight rows per warp */
#define QMV_U 2            /* warp steps per load batch */
#define QMV_WARPS 4        /* warps per CTA */
#define QMV_WS_MAX 1024    /* codes per warp step, 4-bit (8-bit: 512) */
#define QMV_MAGIC 0x4B000000u

/* ==== Geometry ==== */
template <int BITS> struct qg {
    static constexpr int EL = 128 / BITS; /* codes per lane per step (16 bytes) */
    static constexpr int WS = 32 * EL;    /* codes per warp step */
    static constexpr int S = EL / 4;      /* 16-byte x chunks per lane step */
    static constexpr int CPW = 32 / BITS; /* codes per word */
};

/* Bit position p of the code at position i of its word, after the extraction below (8-bit
 * codes are moved to bits 0..7 by a byte permute: p = 0). */
template <int BITS> __host__ __device__ constexpr int qmv_shift(int i) {
    return BITS == 4 ? (i < 5 ? 4 * i : 4 * i - 12) : 0;
}

/* (w & MASK) | magic as one LOP3. Written as C, the compiler emits an AND and an OR (a LOP3
 * holds one immediate and both constants were immediates): 4 instructions per code instead
 * of 3. Here the mask is the immediate and the magic a register the caller keeps. */
template <uint32_t MASK> __device__ __forceinline__ float qmv_f4(uint32_t w, uint32_t magic) {
    uint32_t r;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(w), "n"(MASK), "r"(magic));
    return __uint_as_float(r) - 8388608.0f;
}

/* Byte B of w under the exponent of 2^23 (one PRMT: bytes 1, 2 zero, byte 3 0x4B), minus 2^23. */
template <int B> __device__ __forceinline__ float qmv_f8(uint32_t w, uint32_t magic) {
    return __uint_as_float(__byte_perm(w, magic, 0x7440 | B)) - 8388608.0f;
}

/* Codes 4j..4j+3 of a 16-byte chunk, each times 2^p (exact). magic = QMV_MAGIC in a register. */
template <int BITS, int J>
__device__ __forceinline__ void qmv_decode4(const uint4 &v, float m[4], uint32_t magic) {
    const uint32_t wd[4] = {v.x, v.y, v.z, v.w};
    if (BITS == 4) {
        const uint32_t w = wd[J / 2];
        if ((J & 1) == 0) {
            m[0] = qmv_f4<0xFu>(w, magic);
            m[1] = qmv_f4<0xF0u>(w, magic);
            m[2] = qmv_f4<0xF00u>(w, magic);
            m[3] = qmv_f4<0xF000u>(w, magic);
        } else {
            const uint32_t hi = w >> 12;
            m[0] = qmv_f4<0xF0000u>(w, magic);
            m[1] = qmv_f4<0xF00u>(hi, magic);
            m[2] = qmv_f4<0xF000u>(hi, magic);
            m[3] = qmv_f4<0xF0000u>(hi, magic);
        }
    } else {
        const uint32_t w = wd[J];
        m[0] = qmv_f8<0>(w, magic);
        m[1] = qmv_f8<1>(w, magic);
        m[2] = qmv_f8<2>(w, magic);
        m[3] = qmv_f8<3>(w, magic);
    }
}

/* ==== Prep: x' (scaled, lane-interleaved) and chunk sums ==== */
/* xp [rows_pad, Kp], xs [rows_pad, Kp / EL]; rows >= rows are zero. grid (ceil(K/256), rows_pad). */
template <int BITS>
__global__ void qmv_prep_kernel(float *xp, float *xs, const float *x, long ldx, int rows, int K,
                                int Kp) {
    constexpr int EL = qg<BITS>::EL, WS = qg<BITS>::WS, CPW = qg<BITS>::CPW;
    pdl_wait(); /* x is the previous kernel's output; the previous qmv may still read xp */
    pdl_trigger(); /* the qmv's CTAs may start their weight loads */
    const int r = blockIdx.y, k = blockIdx.x * blockDim.x + threadIdx.x;
    if (blockIdx.x * blockDim.x >= (unsigned)K) return; /* whole warp-uniform CTA */
    /* K % 32 == 0: a warp is entirely inside or outside [0, K) */
    if (k - (int)(threadIdx.x & 31) >= K) return;
    const float v = r < rows ? x[(size_t)r * ldx + k] : 0.f;
    float sum = v;
#pragma unroll
    for (int o = EL / 2; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const int t = k / WS, e = k - t * WS, l = e / EL, o = e - l * EL;
    const int pos = t * WS + (o >> 2) * 128 + l * 4 + (o & 3);
    const int p = qmv_shift<BITS>(k % CPW);
    xp[(size_t)r * Kp + pos] = v * __uint_as_float((uint32_t)(127 - p) << 23);
    if (o == 0) xs[(size_t)r * (Kp / EL) + t * 32 + l] = sum;
}

/* ==== Fast kernel (bits 4, 8) ==== */
template <int BITS, int R, int SBT>
__global__ void __launch_bounds__(QMV_WARPS * 32)
qmv_fast_kernel(qmv_segs segs, const float *__restrict__ xp, const float *__restrict__ xsum,
                int rows, int K, int Kp, int group, int kspl) {
    constexpr int EL = qg<BITS>::EL, WS = qg<BITS>::WS, S = qg<BITS>::S;
    __shared__ float red[QMV_WARPS][QMV_RPW * R];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const qmv_seg sg = qmv_pick(segs);
    /* kspl warps share the same RPW rows, each taking every kspl-th load batch */
    const int wrow = warp / kspl, wk = warp - wrow * kspl;
    const int n0 = (((int)blockIdx.x - sg.c0) * (QMV_WARPS / kspl) + wrow) * QMV_RPW;
    const int r0 = blockIdx.y * R; /* this pass's rows of x' */
    const float *xr = xp + (size_t)r0 * Kp;
    const float *sr = xsum + (size_t)r0 * (Kp / EL);
    const int G = K / group;
    const size_t row_bytes = (size_t)K * BITS / 8;
    uint32_t magic = QMV_MAGIC;
    asm volatile("" : "+r"(magic)); /* a register, not an immediate (see qmv_f4) */

    const uint8_t *wp[QMV_RPW];
    size_t gb[QMV_RPW];
#pragma unroll
    for (int p = 0; p < QMV_RPW; p++) {
        const int n = min(n0 + p, sg.N - 1); /* clamped: loads skipped below, never written */
        wp[p] = (const uint8_t *)sg.w + (size_t)n * row_bytes;
        gb[p] = (size_t)n * G;
    }
    float acc[QMV_RPW][R];
#pragma unroll
    for (int p = 0; p < QMV_RPW; p++)
#pragma unroll
        for (int r = 0; r < R; r++) acc[p][r] = 0.f;

    bool waited = false;
    for (int base = wk * WS * QMV_U; base < K; base += kspl * WS * QMV_U) {
        uint4 wv[QMV_U][QMV_RPW];
        float sv[QMV_U][QMV_RPW], bv[QMV_U][QMV_RPW];
        /* all loads first: RPW*U independent 16-byte loads in flight per lane */
#pragma unroll
        for (int u = 0; u < QMV_U; u++) {
            const int kk = base + u * WS + lane * EL;
#pragma unroll
            for (int p = 0; p < QMV_RPW; p++) {
                const bool ok = kk < K && n0 + p < sg.N;
                wv[u][p] = ok ? ldg_stream16(wp[p] + (size_t)kk * BITS / 8) : make_uint4(0, 0, 0, 0);
                const int gi = kk / group;
                sv[u][p] = ok ? q_sb_load<SBT>(sg.s, gb[p] + gi) : 0.f;
                bv[u][p] = ok ? q_sb_load<SBT>(sg.b, gb[p] + gi) : 0.f;
            }
        }
        if (!waited) {
            /* PDL: the first batch of (constant) weights is in flight while the prep kernel
             * finishes x' */
            pdl_wait();
            pdl_trigger();
            waited = true;
        }
#pragma unroll
        for (int u = 0; u < QMV_U; u++) {
            const int kb = base + u * WS; /* warp step start */
            if (kb + lane * EL >= K) continue;
            float d[QMV_RPW][R];
#pragma unroll
            for (int p = 0; p < QMV_RPW; p++)
#pragma unroll
                for (int r = 0; r < R; r++) d[p][r] = 0.f;
#pragma unroll
            for (int j = 0; j < S; j++) {
                float m[QMV_RPW][4];
#pragma unroll
                for (int p = 0; p < QMV_RPW; p++) {
                    /* J is a template argument: expand the switch at compile time */
                    switch (j) {
                    case 0: qmv_decode4<BITS, 0>(wv[u][p], m[p], magic); break;
                    case 1: qmv_decode4<BITS, 1>(wv[u][p], m[p], magic); break;
                    case 2: qmv_decode4<BITS, 2>(wv[u][p], m[p], magic); break;
                    case 3: qmv_decode4<BITS, 3>(wv[u][p], m[p], magic); break;
                    case 4: qmv_decode4<BITS, 4 % S>(wv[u][p], m[p], magic); break;
                    case 5: qmv_decode4<BITS, 5 % S>(wv[u][p], m[p], magic); break;
                    case 6: qmv_decode4<BITS, 6 % S>(wv[u][p], m[p], magic); break;
                    default: qmv_decode4<BITS, 7 % S>(wv[u][p], m[p], magic); break;
                    }
                }
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const float4 x4 = __ldg((const float4 *)(xr + (size_t)r * Kp + kb + j * 128 + lane * 4));
#pragma unroll
                    for (int p = 0; p < QMV_RPW; p++) {
                        d[p][r] = fmaf(m[p][0], x4.x, d[p][r]);
                        d[p][r] = fmaf(m[p][1], x4.y, d[p][r]);
                        d[p][r] = fmaf(m[p][2], x4.z, d[p][r]);
                        d[p][r] = fmaf(m[p][3], x4.w, d[p][r]);
                    }
                }
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float xs = __ldg(sr + (size_t)r * (Kp / EL) + kb / EL + lane);
#pragma unroll
                for (int p = 0; p < QMV_RPW; p++)
                    acc[p][r] = fmaf(sv[u][p], d[p][r], fmaf(bv[u][p], xs, acc[p][r]));
            }
        }
    }

    if (!waited) pdl_wait(); /* a warp with no k: it still writes (red, y) after the wait */
    /* butterfly sums leave every total in every lane */
#pragma unroll
    for (int p = 0; p < QMV_RPW; p++)
#pragma unroll
        for (int r = 0; r < R; r++) acc[p][r] = warp_sum(acc[p][r]);
    if (kspl > 1 && !ksplit_sum<QMV_RPW, R>(acc, red, warp, wk, kspl)) return;
#pragma unroll
    for (int p = 0; p < QMV_RPW; p++)
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int n = n0 + p;
            if (lane == ((p * R + r) & 31) && r0 + r < rows && n < sg.N)
                sg.y[(size_t)(r0 + r) * sg.ldy + n] = acc[p][r];
        }
}

/* ==== Generic kernel (any width): a warp per weight row, code by code ==== */
template <int R>
__global__ void __launch_bounds__(QMV_WARPS * 32)
qmv_generic_kernel(qmv_segs segs, const float *__restrict__ x, long ldx, int rows, int K,
                   int bits, int group, int sbt) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const qmv_seg sg = qmv_pick(segs);
    const int n = ((int)blockIdx.x - sg.c0) * QMV_WARPS + warp;
    if (n >= sg.N) return;
    const int r0 = blockIdx.y * R;
    const uint32_t *row = sg.w + (size_t)n * K * bits / 32;
    const size_t g0 = (size_t)n * (K / group);
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.f;
    for (int k = lane; k < K; k += 32) {
        const int gi = k / group;
        const float w = fmaf(q_sb_load_rt(sg.s, sbt, g0 + gi), (float)q_code(row, k, bits),
                             q_sb_load_rt(sg.b, sbt, g0 + gi));
#pragma unroll
        for (int r = 0; r < R; r++)
            if (r0 + r < rows) acc[r] = fmaf(w, x[(size_t)(r0 + r) * ldx + k], acc[r]);
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        const float v = warp_sum(acc[r]);
        if (lane == 0 && r0 + r < rows) sg.y[(size_t)(r0 + r) * sg.ldy + n] = v;
    }
}

/* ==== Launchers ==== */
static size_t qmv_kp(int K) { return ((size_t)K + QMV_WS_MAX - 1) / QMV_WS_MAX * QMV_WS_MAX; }

template <int BITS, int R>
static int qmv_fast_go(qmv_segs &segs, const float *xp, const float *xs, const cuda_qmv_args *a,
                       int passes, int Kp, cudaStream_t st) {
    /* few warps in the grid: split K over 2 warps of a CTA (more loads in flight) */
    int n_total = 0;
    for (int i = 0; i < segs.n; i++) n_total += segs.N[i];
    const int kspl = (n_total + QMV_RPW - 1) / QMV_RPW * passes < 16 * cuda_sm_count() ? 2 : 1;
    const int rows_per_cta = QMV_WARPS / kspl * QMV_RPW;
    int grid = 0;
    for (int i = 0; i < segs.n; i++) {
        segs.cta0[i] = grid;
        grid += (segs.N[i] + rows_per_cta - 1) / rows_per_cta;
    }
    pdl_launch l;
    pdl_launch_config(&l, dim3(grid, passes), dim3(QMV_WARPS * 32), 0, st);
    if (a->sb_dtype == CUDA_QSB_BF16)
        return (int)cudaLaunchKernelEx(&l.cfg, qmv_fast_kernel<BITS, R, CUDA_QSB_BF16>, segs, xp,
                                       xs, a->rows, a->K, Kp, a->group, kspl);
    else if (a->sb_dtype == CUDA_QSB_F16)
        return (int)cudaLaunchKernelEx(&l.cfg, qmv_fast_kernel<BITS, R, CUDA_QSB_F16>, segs, xp,
                                       xs, a->rows, a->K, Kp, a->group, kspl);
    else
        return (int)cudaLaunchKernelEx(&l.cfg, qmv_fast_kernel<BITS, R, CUDA_QSB_F32>, segs, xp,
                                       xs, a->rows, a->K, Kp, a->group, kspl);
}

template <int R>
static int qmv_generic_go(qmv_segs &segs, const cuda_qmv_args *a, int passes, cudaStream_t st) {
    int grid = 0;
    for (int i = 0; i < segs.n; i++) {
        segs.cta0[i] = grid;
        grid += (segs.N[i] + QMV_WARPS - 1) / QMV_WARPS;
    }
    qmv_generic_kernel<R><<<dim3(grid, passes), QMV_WARPS * 32, 0, st>>>(
        segs, a->x, a->ldx, a->rows, a->K, a->bits, a->group, a->sb_dtype);
    return (int)cudaGetLastError();
}

extern "C" int cuda_qmv_valid_multirow(int multirow) {
    static const int k_mr[CUDA_QMV_MULTIROW_COUNT] = CUDA_QMV_MULTIROW_VALUES;
    for (int i = 0; i < CUDA_QMV_MULTIROW_COUNT; i++)
        if (k_mr[i] == multirow) return 1;
    return 0;
}

extern "C" int cuda_qmv_default_multirow(int rows, int N, int K, int bits) {
    (void)N, (void)K, (void)bits;
    /* one pass: every weight byte read once per step (more passes only pay off when the
     * per-pass x working set overflows L1 and the kernel is bound by it; the tuner finds those) */
    return rows <= 1 ? 1 : rows <= 2 ? 2 : rows <= 4 ? 4 : 8;
}

extern "C" size_t cuda_qmv_workspace_bytes(int K) {
    /* x' [8, Kp] + sums [8, Kp / 16] fp32 */
    return (size_t)CUDA_QMV_MAX_ROWS * (qmv_kp(K) + qmv_kp(K) / 16) * sizeof(float);
}

extern "C" int cuda_qmv(const cuda_qmv_args *a, int multirow, cudaStream_t st) {
    if (!a || a->n_segs < 1 || a->n_segs > CUDA_QMV_MAX_SEGS || a->rows < 1 ||
        a->rows > CUDA_QMV_MAX_ROWS || !cuda_qmv_valid_multirow(multirow) || !a->x ||
        a->ldx < a->K || (a->group != 32 && a->group != 64 && a->group != 128) || a->K < a->group ||
        a->K % a->group || (a->bits < 2 || a->bits > 8 || a->bits == 7) ||
        a->sb_dtype < CUDA_QSB_BF16 || a->sb_dtype > CUDA_QSB_F32 || a->glu_out || a->norm_w)
        return (int)cudaErrorInvalidValue;
    qmv_segs segs;
    if (qmv_segs_fill(a, &segs, true)) return (int)cudaErrorInvalidValue;
    const int win = a->rows < multirow ? a->rows : multirow;
    const int R = win <= 1 ? 1 : win <= 2 ? 2 : win <= 4 ? 4 : 8;
    const int passes = (a->rows + multirow - 1) / multirow;
    /* passes of `multirow` rows each, R >= rows of a pass */
    if (a->bits != 4 && a->bits != 8) {
        if (R == 1) return qmv_generic_go<1>(segs, a, passes, st);
        if (R == 2) return qmv_generic_go<2>(segs, a, passes, st);
        if (R == 4) return qmv_generic_go<4>(segs, a, passes, st);
        return qmv_generic_go<8>(segs, a, passes, st);
    }
    if (!a->ws || a->ws_bytes < cuda_qmv_workspace_bytes(a->K)) return (int)cudaErrorInvalidValue;
    const int Kp = (int)qmv_kp(a->K);
    float *xp = (float *)a->ws, *xs = xp + (size_t)CUDA_QMV_MAX_ROWS * Kp;
    const int rows_pad = passes * R; /* <= 8: passes * R <= rows rounded up to the window */
    const dim3 pg((a->K + 255) / 256, rows_pad);
    pdl_launch l;
    pdl_launch_config(&l, pg, dim3(256), 0, st);
    const int pe = (int)cudaLaunchKernelEx(&l.cfg, a->bits == 4 ? qmv_prep_kernel<4>
                                                                 : qmv_prep_kernel<8>,
                                           xp, xs, (const float *)a->x, a->ldx, a->rows, a->K,
                                           Kp);
    if (pe) return pe;
    if (a->bits == 4) {
        if (R == 1) return qmv_fast_go<4, 1>(segs, xp, xs, a, passes, Kp, st);
        if (R == 2) return qmv_fast_go<4, 2>(segs, xp, xs, a, passes, Kp, st);
        if (R == 4) return qmv_fast_go<4, 4>(segs, xp, xs, a, passes, Kp, st);
        return qmv_fast_go<4, 8>(segs, xp, xs, a, passes, Kp, st);
    }
    if (R == 1) return qmv_fast_go<8, 1>(segs, xp, xs, a, passes, Kp, st);
    if (R == 2) return qmv_fast_go<8, 2>(segs, xp, xs, a, passes, Kp, st);
    if (R == 4) return qmv_fast_go<8, 4>(segs, xp, xs, a, passes, Kp, st);
    return qmv_fast_go<8, 8>(segs, xp, xs, a, passes, Kp, st);
}
