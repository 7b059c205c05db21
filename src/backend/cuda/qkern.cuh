/* Device helpers for MLX affine-quantized weights (included by .cu files only).
 *
 * Format (src/backend/qfmt/qfmt.h): a row of K codes is one little-endian bit stream of K * bits
 * bits in u32 words (code i at bits [i*bits, (i+1)*bits) from bit 0 of word 0; 3/5/6-bit
 * codes straddle words); scales / biases [N, K / group] in bf16, f16 or f32; value =
 * scale * q + bias. */
#ifndef MLXCEL_BACKEND_CUDA_QKERN_CUH
#define MLXCEL_BACKEND_CUDA_QKERN_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.cuh"
#include "backend/cuda/cuda_ops.h"

/* ==== Segments ====
 * Up to CUDA_QMV_MAX_SEGS weights sharing x in one launch (the qmv kernels): CTAs
 * [cta0[i], cta0[i + 1]) belong to segment i. */
typedef struct qmv_segs {
    const uint32_t *w[CUDA_QMV_MAX_SEGS];
    const void *s[CUDA_QMV_MAX_SEGS];
    const void *b[CUDA_QMV_MAX_SEGS];
    float *y[CUDA_QMV_MAX_SEGS];
    long ldy[CUDA_QMV_MAX_SEGS];
    int N[CUDA_QMV_MAX_SEGS];
    int cta0[CUDA_QMV_MAX_SEGS];
    int n;
    /* qw_frame's pair modes: a CTA's warps 0..3 and 4..7 are two row groups its epilogue
     * pairs. 1 (a GLU's gate and up, ks 1): CTA c takes rows [64c, 64c + 64) of segments 0
     * and 1. 2 (RoPE, ks <= 4): CTA b of a segment takes rows [h D + a rg, + rg) and the same
     * + half (D = 2 half, rg = 64 / ks rows a group, a < half / rg, b = h (half / rg) + a):
     * the dims j, j + half that rotate together. */
    int pair, pair_half;

} qmv_segs;

struct qmv_seg {
    const uint32_t *w;
    const void *s, *b;
    float *y;
    long ldy;
    int N, c0;
};

/* segs from a launch's arguments (host side); cudaErrorInvalidValue for a missing pointer, an
 * empty segment, ldy < N, or (align16) a weight not 16-byte aligned. */
static inline int qmv_segs_fill(const cuda_qmv_args *a, qmv_segs *segs, bool align16,
                                bool tiled_ok = false) {
    *segs = qmv_segs{};
    segs->n = a->n_segs;
    if (a->tiled && !tiled_ok) return (int)cudaErrorInvalidValue;
    for (int i = 0; i < a->n_segs; i++) {
        /* tiled: w[i] holds the scales and biases too (qtile.cuh) */
        if (!a->w[i] || (!a->tiled && (!a->scales[i] || !a->biases[i])) || !a->y[i] || a->N[i] < 1 ||
            a->ldy[i] < a->N[i] || (align16 && ((uintptr_t)a->w[i] & 15)))
            return (int)cudaErrorInvalidValue;
        segs->w[i] = a->w[i];
        segs->s[i] = a->scales[i];
        segs->b[i] = a->biases[i];
        segs->y[i] = a->y[i];
        segs->ldy[i] = a->ldy[i];
        segs->N[i] = a->N[i];
    }
    return 0;
}

/* This CTA's segment (compile-time indices only: a run-time index into the parameter
 * struct would copy it to local memory). */
__device__ __forceinline__ qmv_seg qmv_pick(const qmv_segs &sg) {
    qmv_seg o = {sg.w[0], sg.s[0], sg.b[0], sg.y[0], sg.ldy[0], sg.N[0], 0};
#pragma unroll
    for (int i = 1; i < CUDA_QMV_MAX_SEGS; i++)
        if (i < sg.n && (int)blockIdx.x >= sg.cta0[i])
            o = {sg.w[i], sg.s[i], sg.b[i], sg.y[i], sg.ldy[i], sg.N[i], sg.cta0[i]};
    return o;
}

/* ==== Scales / biases ==== */
template <int SBT>
__device__ __forceinline__ float q_sb_load(const void *p, size_t i) {
    if (SBT == CUDA_QSB_BF16) return bf16_lo(((const uint16_t *)p)[i]);
    if (SBT == CUDA_QSB_F16) return __half2float(__ushort_as_half(((const uint16_t *)p)[i]));
    return ((const float *)p)[i];
}

__device__ __forceinline__ float q_sb_load_rt(const void *p, int sbt, size_t i) {
    if (sbt == CUDA_QSB_BF16) return q_sb_load<CUDA_QSB_BF16>(p, i);
    if (sbt == CUDA_QSB_F16) return q_sb_load<CUDA_QSB_F16>(p, i);
    return q_sb_load<CUDA_QSB_F32>(p, i);
}

/* The sb-dtype value nearest to v (round to nearest even), as fp32: the rounding the CPU
 * reference applies to every dequantized value. */
__device__ __forceinline__ float q_round_sb(float v, int sbt) {
    if (sbt == CUDA_QSB_BF16) return bf16_lo(f32_to_bf16_bits(v));
    if (sbt == CUDA_QSB_F16) return __half2float(__float2half_rn(v));
    return v;
}

/* ==== Codes ==== */
/* Nibbles 0 and 4 of w as bf16x2 (128 + q_0, 128 + q_4), exact: OR-ed into the mantissa of 128
 * by one LOP3 (written as C, the compiler may emit an AND and an OR). */
__device__ __forceinline__ uint32_t q4_pair_bf16(uint32_t w) {
    uint32_t r;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(w), "n"(0x000F000Fu), "n"(0x43004300u));
    return r;
}

/* Code k of a packed row (any bit width). A straddling code reads the next word, which
 * exists: the row holds K * bits bits, a multiple of 32, and the code ends inside it. */
__device__ __forceinline__ uint32_t q_code(const uint32_t *row, int k, int bits) {
    const int o = k * bits, wi = o >> 5, sh = o & 31;
    uint32_t v = __ldg(row + wi) >> sh;
    if (sh + bits > 32) v |= __ldg(row + wi + 1) << (32 - sh);
    return v & ((1u << bits) - 1u);
}

/* Dequantized value of code k of row r, exactly as the CPU reference: fp32 multiply, fp32
 * add (never fused), rounded to the scales' dtype. */
__device__ __forceinline__ float q_value(const uint32_t *row, const void *s, const void *b,
                                         int sbt, size_t g_index, int k, int bits) {
    const float q = (float)q_code(row, k, bits);
    return q_round_sb(__fadd_rn(__fmul_rn(q_sb_load_rt(s, sbt, g_index), q),
                                q_sb_load_rt(b, sbt, g_index)),
                      sbt);
}

/* ==== One warp: dot of a quantized row with an fp32 vector ====
 * sum_k (s q_k + b) x_k = sum over groups of s * sum(q x) + b * sum(x), fp32. Bits 4 and 8
 * (16-byte loads, one per lane per 32 / 16 codes) when vec (row 16-byte aligned); any width
 * code by code otherwise. K % 32 == 0. Every lane gets the total. */
__device__ __forceinline__ float q_warp_dot(const uint32_t *row, const void *s, const void *b,
                                            int sbt, int bits, int group, const float *x, int K,
                                            int vec) {
    const int lane = threadIdx.x & 31;
    float acc = 0.f;
    if (vec && (bits == 4 || bits == 8)) {
        const int el = 128 / bits; /* codes per 16 bytes: within one group (group >= 32) */
        const uint32_t mask = (1u << bits) - 1u;
        for (int k0 = lane * el; k0 < K; k0 += 32 * el) {
            const uint4 w = ldg_stream16((const uint8_t *)row + (size_t)k0 * bits / 8);
            const uint32_t wd[4] = {w.x, w.y, w.z, w.w};
            const int gi = k0 / group;
            float qx = 0.f, sx = 0.f;
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int e = 0; e < 32 / 8; e++) {
                    /* bits 8: 4 codes per word; bits 4: 8 codes, done as two passes of 4 */
                    if (bits == 8) {
                        const float xv = x[k0 + i * 4 + e];
                        qx = fmaf((float)((wd[i] >> (8 * e)) & mask), xv, qx);
                        sx += xv;
                    } else {
                        const float xa = x[k0 + i * 8 + 2 * e], xb = x[k0 + i * 8 + 2 * e + 1];
                        qx = fmaf((float)((wd[i] >> (8 * e)) & mask), xa, qx);
                        qx = fmaf((float)((wd[i] >> (8 * e + 4)) & mask), xb, qx);
                        sx += xa + xb;
                    }
                }
            acc = fmaf(q_sb_load_rt(s, sbt, gi), qx, fmaf(q_sb_load_rt(b, sbt, gi), sx, acc));
        }
    } else {
        for (int k = lane; k < K; k += 32) {
            const int gi = k / group;
            const float q = (float)q_code(row, k, bits);
            acc = fmaf(fmaf(q_sb_load_rt(s, sbt, gi), q, q_sb_load_rt(b, sbt, gi)), x[k], acc);
        }
    }
    return warp_sum(acc);
}

#endif
