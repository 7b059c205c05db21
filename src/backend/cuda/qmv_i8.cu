/* Quantized GEMV (qmv) on the int8 tensor cores for decode: 4- or 8-bit codes, group 64 or 128,
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
 * ~4 MMAs and ~70 instructions a step. 8-bit codes are u8 MMA operands as they are (a
 * chunk is two 16-byte loads; the A bytes and the x bytes both in code order).
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

#include "backend/cuda/qmv_frame.cuh"

/* Workspace: x bytes as uint4 [QW_ROWS][S][2 quads][8] (chunks 0..3, then 4 zero quads the
 * lanes off the diagonal read), then the x scales [S][QW_XW] and the sums [S][QW_XW] fp32.
 * Quad h of chunk t holds MMAs 2h and 2h + 1: {b0, b1} of each. */
__host__ __device__ constexpr size_t qi_quads(int K) { return (size_t)QW_ROWS * qw_steps(K) * 16; }

__device__ __forceinline__ uint32_t qi_pack4(int a, int b, int c, int d) {
    return (uint32_t)(a & 255) | (uint32_t)(b & 255) << 8 | (uint32_t)(c & 255) << 16 |
           (uint32_t)(d & 255) << 24;
}

/* The absmax and exact sum of a group's values: 8 a thread, 4 * CPG adjacent threads (every
 * thread of the warp calls it: the shuffles). */
template <int CPG>
__device__ __forceinline__ void qi_group_stats(const float f[8], float &amax, float &sum) {
    amax = 0.f, sum = 0.f;
#pragma unroll
    for (int e = 0; e < 8; e++) amax = fmaxf(amax, fabsf(f[e])), sum += f[e];
#pragma unroll
    for (int m = 1; m < 4 * CPG; m <<= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
        sum += __shfl_xor_sync(0xffffffffu, sum, m);
    }
}

/* A group's scale and exact sum at column c of the workspace / shared-memory scale arrays,
 * from its absmax and sum; HL (8-bit x as int8 hi + lo, qi_quant_store_hl) also row 1's at
 * c + C: the lo part's scale / 254 and sum 0. RAW stores the absmax as it is, for
 * qi_scale_finish. */
template <int C, bool HL, bool RAW = false>
__device__ __forceinline__ void qi_scale_store(float *xsc, float *xsum, size_t c, float amax,
                                               float sum) {
    xsc[c] = RAW ? amax : amax / 127.f, xsum[c] = sum;
    if (HL && !RAW) xsc[c + C] = amax / 127.f / 254.f, xsum[c + C] = 0.f;
}

/* One thread's 8 values f of x row at.r (step at.s, chunk at.t, word at.j: codes 8j..8j+7
 * of the chunk) rounded to int8 and stored in B-fragment order, with the group's scale and
 * exact sum. A group is the 4 * (G / 32) adjacent threads of a class: its absmax and sum go
 * through shuffles, so every thread of the warp calls this (f = 0 past K or `rows`; rows >=
 * `rows` only zero their scales and sums). */
template <int G, int BITS, int XW = QW_XW, bool RAW = false>
__device__ __forceinline__ void qi_quant_store(uint4 *xq, float *xsc, float *xsum,
                                               const float f[8], qw_prep_at at, int rows, int S) {
    constexpr int C = 128 / G, CPG = G / 32;
    const int r = at.r, s = at.s, t = at.t, j = at.j;
    float amax, sum;
    qi_group_stats<CPG>(f, amax, sum);
    const float inv = amax > 0.f ? 127.f / amax : 0.f;
    int q[8];
#pragma unroll
    for (int e = 0; e < 8; e++) q[e] = __float2int_rn(f[e] * inv);
    if (at.in && r < rows) {
        /* quad j / 2 of chunk t, words 2 (j % 2) .. + 1 */
        uint2 *dst = (uint2 *)(xq + (((size_t)r * S + s) * 2 + j / 2) * 8 + t) + (j & 1);
        /* the B bytes in the order of the A bytes: 4-bit (c0, c2, c4, c6), (c1, c3, c5, c7) of
         * the nibble split; 8-bit the codes in order */
        *dst = BITS == 4
                   ? make_uint2(qi_pack4(q[0], q[2], q[4], q[6]), qi_pack4(q[1], q[3], q[5], q[7]))
                   : make_uint2(qi_pack4(q[0], q[1], q[2], q[3]), qi_pack4(q[4], q[5], q[6], q[7]));
        if (r == 0) dst[8] = make_uint2(0u, 0u); /* 64 bytes on: slot 4 + t, same half */
    }
    if (at.in && j == 0 && t % CPG == 0)
        qi_scale_store<C, false, RAW>(xsc, xsum, (size_t)s * XW + r * C + t / CPG, amax, sum);
}

/* x row r = blockIdx.y, one thread per 8 values (qw_prep_x). With glu_out, x is a GLU's gate:
 * the values are act(x) * up, written to glu_out as well. */
template <int G, int BITS>
__global__ void __launch_bounds__(256)
qi_prep_kernel(uint4 *__restrict__ xq, float *__restrict__ xsc, float *__restrict__ xsum,
               const float *__restrict__ x, long ldx, int rows, int K, float *glu_out,
               const float *__restrict__ glu_up, int glu_act) {
    pdl_wait(); /* x is the previous kernel's output; the previous qmv may still read xq */
    pdl_trigger();
    float f[8];
    const qw_prep_at at = qw_prep_x(x, ldx, rows, K, f);
    const int k = at.s * 128 + 32 * at.t + 8 * at.j;
    if (glu_out && at.in && at.r < rows && k < K) {
        const size_t o = (size_t)at.r * ldx + k;
        float u[8];
        load8_any(glu_up, 0, o, u);
#pragma unroll
        for (int e = 0; e < 8; e++) f[e] = act_apply(f[e], glu_act) * u[e];
        store8_any(glu_out, 0, o, f);
    }
    qi_quant_store<G, BITS>(xq, xsc, xsum, f, at, rows, qw_steps(K));
}

/* The prep with the RMSNorm that produces x: CTA r (grid QW_ROWS) adds ny into nx (when
 * given) and normalises row r of it, out = nx / rms(nx) * (w + offset) written to x (row
 * stride ldx), as add_rms_norm_vec_kernel does, then rounds out as qi_prep_kernel does; the
 * thread of 8 values k = 8u is the same in both passes, so it re-reads only what it wrote. */
template <int G, int BITS>
__global__ void __launch_bounds__(256)
qi_prep_norm_kernel(uint4 *__restrict__ xq, float *__restrict__ xsc, float *__restrict__ xsum,
                    float *x, long ldx, int rows, int K, float *nx, const float *ny,
                    const uint16_t *__restrict__ nw, float eps, float offset) {
    __shared__ float red[32];
    pdl_wait();
    pdl_trigger();
    const int r = blockIdx.x, S = qw_steps(K);
    float *xr = nx + (size_t)r * K;
    float inv = 0.f;
    if (r < rows) { /* CTA-uniform */
        float ss = 0.f;
        for (int k = 8 * (int)threadIdx.x; k < K; k += 8 * 256) {
            float v[8];
            load8_any(xr, 0, k, v);
            if (ny) {
                float y8[8];
                load8_any(ny, 0, (size_t)r * K + k, y8);
#pragma unroll
                for (int e = 0; e < 8; e++) v[e] += y8[e];
                store8_any(xr, 0, k, v);
            }
#pragma unroll
            for (int e = 0; e < 8; e++) ss = fmaf(v[e], v[e], ss);
        }
        inv = 1.0f / sqrtf(block_sum(ss, red) / (float)K + eps);
    }
    for (int u0 = 0; u0 < S * 16; u0 += 256) { /* uniform trip count: the shuffles */
        const int u = u0 + (int)threadIdx.x, k = 8 * u;
        const qw_prep_at at = {r, u >> 4, (u >> 2) & 3, u & 3, u < S * 16};
        float f[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        if (r < rows && k < K) {
            float v[8], wv[8];
            load8_any(xr, 0, k, v);
            load8_any(nw, 1, k, wv);
#pragma unroll
            for (int e = 0; e < 8; e++) f[e] = (v[e] * inv) * (wv[e] + offset);
            store8_any(x, 0, (size_t)r * ldx + k, f);
        }
        qi_quant_store<G, BITS>(xq, xsc, xsum, f, at, rows, S);
    }
}

/* The one-row fusions of the main kernel (qmv_i8_kernel's INP, res and pair mode). */
struct qi_fuse {
    const float *x;      /* INP: x row 0 (fp32 [K]), or the norm's input */
    float *xn;           /* INP with nw: the norm's output row, written by CTA 0 */
    const uint16_t *nw;  /* INP: the RMSNorm weight (bf16 [K]); NULL: x as it is */
    float eps, offset;
    float *res;          /* res [rows, N] += y (one segment) */
    float *glu_out;      /* pair mode: act(gate) * up of the CTA's 64 units, row 0 */
    int act;
    uint4 *nxq;          /* pair mode, non-NULL: that GLU output rounded as the x of a g64 qmv */
    float *nxsc, *nxsum; /* of K = N and these BITS (the workspace layout) */
    const float *rope_cs; /* RoPE pair mode (segs.pair 2): cuda_qmv_args' rope fields */
    const int64_t *rope_rows;
    void *k_pool, *v_pool;
    int pool_bf16;
#ifdef QW_TIMELINE
    int diag; /* qw_diag_host */
#endif
};

/* Shared memory of the in-CTA prep: x quads [XR][S][16] (XR x rows: 2 for 8-bit, hi and
 * lo), scales and sums [S][QI_XW], 32 floats. */
#define QI_XW 8 /* one n-tile of scale columns: rows 0, 1's; the others read, never used */
__host__ __device__ constexpr size_t qi_inprep_bytes(int K, int bits) {
    return (size_t)qw_steps(K) * (16 * 16 * (bits == 8 ? 2 : 1) + 2 * QI_XW * 4) + 32 * 4;
}

/* One row of x as int8 hi + lo for 8-bit weights in the one-row fused variants: an 8-bit x
 * rounding is as large as the 8-bit weights' own error (top-1 to bf16 78.1% against 91.0%,
 * session 10), so x row 0 holds h = rn(z), row 1 l = rn((z - h) 254) with z = x 127 / absmax
 * (x = absmax / 127 (h + l / 254) to ~2^-15 of absmax): row 1's scale is row 0's / 254 and its
 * sum 0, and the kernel adds the two rows' totals. At one row the MMA's columns for row 1
 * are free. Same threads and shuffles as qi_quant_store. */
template <int G, int XW, bool RAW = false>
__device__ __forceinline__ void qi_quant_store_hl(uint4 *xq, float *xsc, float *xsum,
                                                  const float f[8], qw_prep_at at, int S) {
    constexpr int C = 128 / G, CPG = G / 32;
    const int s = at.s, t = at.t, j = at.j;
    float amax, sum;
    qi_group_stats<CPG>(f, amax, sum);
    const float inv = amax > 0.f ? 127.f / amax : 0.f;
    int h[8], l[8];
#pragma unroll
    for (int e = 0; e < 8; e++) {
        const float z = f[e] * inv;
        h[e] = __float2int_rn(z);
        l[e] = __float2int_rn((z - (float)h[e]) * 254.f);
    }
    if (at.in) {
        uint2 *d0 = (uint2 *)(xq + ((size_t)s * 2 + j / 2) * 8 + t) + (j & 1);
        uint2 *d1 = (uint2 *)(xq + (((size_t)S + s) * 2 + j / 2) * 8 + t) + (j & 1);
        *d0 = make_uint2(qi_pack4(h[0], h[1], h[2], h[3]), qi_pack4(h[4], h[5], h[6], h[7]));
        *d1 = make_uint2(qi_pack4(l[0], l[1], l[2], l[3]), qi_pack4(l[4], l[5], l[6], l[7]));
        d0[8] = make_uint2(0u, 0u); /* the zero quads the lanes off the diagonal read */
    }
    if (at.in && j == 0 && t % CPG == 0)
        qi_scale_store<C, true, RAW>(xsc, xsum, (size_t)s * XW + t / CPG, amax, sum);
}

/* Finishes a RAW store's group (row 0) as that of its values times a > 0: the int8 parts of
 * a x are those of x (the rounding is scale-free); the absmax and sum scale by a. Called by
 * the threads that stored it. */
template <int G, int BITS, int XW>
__device__ __forceinline__ void qi_scale_finish(float *xsc, float *xsum, qw_prep_at at, float a) {
    constexpr int C = 128 / G, CPG = G / 32;
    if (!at.in || at.j != 0 || at.t % CPG != 0) return;
    const size_t c = (size_t)at.s * XW + at.t / CPG;
    qi_scale_store<C, BITS == 8>(xsc, xsum, c, xsc[c] * a, xsum[c] * a);
}

/* x row 0 rounded inside the CTA (rows == 1) into shared memory, so the prep needs no launch:
 * without a norm the values, thread for thread, that qi_prep_kernel computes; with one the
 * norm's output row as qi_prep_norm_kernel (norm_y NULL) writes it, the int8 parts from one
 * pass (below). The first QI_NWC pieces of the norm weight come in nwc (loaded before the PDL
 * wait: constants; else an L2 round trip on the chain). */
#define QI_NWC 2 /* 8-value pieces a thread: all of K <= 4096 */
#ifdef QW_TIMELINE /* qw_diag_host 1 (bench/qi_timeline.cu): x made up, not loaded */
#define QI_XLOAD(p, k, v)                                                                    \
    do {                                                                                     \
        if ((p).diag == 1)                                                                   \
            for (int e_ = 0; e_ < 8; e_++) (v)[e_] = (float)((k) + e_) * 1e-4f;              \
        else                                                                                 \
            load8_any((p).x, 0, k, v);                                                       \
    } while (0)
#else
#define QI_XLOAD(p, k, v) load8_any((p).x, 0, k, v)
#endif
template <int G, int BITS>
__device__ __forceinline__ void qi_prep_cta(uint4 *xq, float *xsc, float *xsum, float *red,
                                            const qi_fuse &p, int K, const uint4 *nwc) {
    const int S = qw_steps(K), tid = (int)threadIdx.x;
    float ss = 0.f; /* with the norm: sum x^2, the same pieces in the same order as the kernel */
    /* The 256 units from u0 rounded. With the norm, g = x (w + offset) is rounded: the int8
     * parts are scale-free, so they are those of x / rms(x) (w + offset) but for the fp32
     * rounding of g; the groups' scales and sums are stored raw and finished once rms is
     * known. One pass over x, the block sum's barrier after the rounding instead of before
     * it (8B q4g64 B=1 layer 45.0 against 45.5 us in two passes, session 18). With `have`,
     * wq: this thread's norm weight. */
    const auto units = [&](int u0, bool have, uint4 wq) {
        const int u = u0 + tid, k = 8 * u;
        const qw_prep_at at = {0, u >> 4, (u >> 2) & 3, u & 3, u < S * 16};
        float f[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        if (k < K) {
            QI_XLOAD(p, k, f);
            if (p.nw) {
                float wv[8];
                if (have) bf16x8_to_f32(wq, wv);
                else load8_any(p.nw, 1, k, wv);
#pragma unroll
                for (int e = 0; e < 8; e++) ss = fmaf(f[e], f[e], ss), f[e] *= wv[e] + p.offset;
            }
        }
        if (p.nw) {
            if constexpr (BITS == 8) qi_quant_store_hl<G, QI_XW, true>(xq, xsc, xsum, f, at, S);
            else qi_quant_store<G, BITS, QI_XW, true>(xq, xsc, xsum, f, at, 1, S);
        } else {
            if constexpr (BITS == 8) qi_quant_store_hl<G, QI_XW>(xq, xsc, xsum, f, at, S);
            else qi_quant_store<G, BITS, QI_XW>(xq, xsc, xsum, f, at, 1, S);
        }
    };
#pragma unroll
    for (int i = 0; i < QI_NWC; i++) /* uniform trip counts: the shuffles */
        if (256 * i < S * 16) units(256 * i, p.nw != nullptr, nwc[i]);
    for (int u0 = 256 * QI_NWC; u0 < S * 16; u0 += 256) units(u0, false, nwc[0]);
    if (p.nw) { /* this thread's raw groups scaled by inv; CTA 0 writes the norm's output */
        const float inv = 1.0f / sqrtf(block_sum(ss, red) / (float)K + p.eps);
#pragma unroll 1
        for (int u = tid; u < S * 16; u += 256) {
            const qw_prep_at at = {0, u >> 4, (u >> 2) & 3, u & 3, true};
            qi_scale_finish<G, BITS, QI_XW>(xsc, xsum, at, inv);
            const int k = 8 * u;
            if (blockIdx.x != 0 || k >= K) continue;
            float v[8], wv[8];
            QI_XLOAD(p, k, v); /* an L1 hit */
            load8_any(p.nw, 1, k, wv);
#pragma unroll
            for (int e = 0; e < 8; e++) v[e] = (v[e] * inv) * (wv[e] + p.offset);
            store8_any(p.xn, 0, k, v);
        }
    }
    __syncthreads();
}

/* Pair mode, after the walk: the CTA's 64 GLU units act(gate) * up (row 0) to glu_out, as
 * qi_prep_kernel computes them, and with nxq the next qmv's int8 x of those units (one g64
 * group: lanes 0..7 of warp 0 hold 8 units each, the layout of qi_quant_store). */
template <int BITS>
__device__ __forceinline__ void qi_glu_epilogue(const float (*pair)[64], const qi_fuse &p,
                                                int N) {
    __syncthreads(); /* pair is complete (and y's gate values written before glu_out's) */
    if (threadIdx.x >= 32) return;
    const int L = (int)threadIdx.x, c = (int)blockIdx.x, u0 = 64 * c + 8 * L;
    float f[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (L < 8) {
#pragma unroll
        for (int e = 0; e < 8; e++)
            f[e] = act_apply(pair[0][8 * L + e], p.act) * pair[1][8 * L + e];
        if (u0 + 8 <= N) store8_any(p.glu_out, 0, u0, f);
        else
            for (int e = 0; e < 8 && u0 + e < N; e++) p.glu_out[u0 + e] = f[e];
    }
    if (p.nxq) { /* N % 64 == 0 (the host's rule): whole groups; 8-bit as hi + lo */
        const qw_prep_at at = {0, c / 2, 2 * (c & 1) + (L >> 2), L & 3, L < 8};
        if constexpr (BITS == 8)
            qi_quant_store_hl<64, QW_XW>(p.nxq, p.nxsc, p.nxsum, f, at, qw_steps(N));
        else
            qi_quant_store<64, BITS>(p.nxq, p.nxsc, p.nxsum, f, at, 1, qw_steps(N));
    }
}

/* RoPE pair mode: thread i < rg of the CTA's head h, dims j = a rg + i and j + half: its
 * cos / sin and the KV slot, read right after the PDL wait (an L2 round trip each after the
 * sums would sit on the chain). */
struct qi_rope_at {
    int seg, h, j;
    float c, s;
    int64_t slot;
};
__device__ __forceinline__ qi_rope_at qi_rope_pre(const qmv_segs &segs, const qi_fuse &p,
                                                  int ks) {
    const int rg = 64 / ks, half = segs.pair_half, b0 = (int)blockIdx.x;
    qi_rope_at at;
    at.seg = b0 >= segs.cta0[2] ? 2 : b0 >= segs.cta0[1] ? 1 : 0;
    const int b = b0 - (at.seg == 2 ? segs.cta0[2] : at.seg == 1 ? segs.cta0[1] : 0);
    at.h = b / (half / rg), at.j = b % (half / rg) * rg + (int)threadIdx.x;
    at.c = at.s = 0.f, at.slot = -1;
    if ((int)threadIdx.x < rg) {
        if (at.seg < 2) at.c = p.rope_cs[2 * at.j], at.s = p.rope_cs[2 * at.j + 1];
        at.slot = p.rope_rows[0];
    }
    return at;
}

/* After the walk: q and k rotated (rope_rotate, as rope_kv_f32_kernel) into y, k and v to
 * the KV pools at the slot. */
__device__ __forceinline__ void qi_rope_epilogue(const float (*pair)[64], const qmv_segs &segs,
                                                 const qi_fuse &p, int ks, const qi_rope_at &at) {
    __syncthreads(); /* pair is complete (and y's plain values written before these) */
    if ((int)threadIdx.x >= 64 / ks) return;
    const int i = (int)threadIdx.x, half = segs.pair_half, D = 2 * half;
    float v0 = pair[0][i], v1 = pair[1][i];
    const int n = at.h * D + at.j;
    if (at.seg < 2) {
        float *y = at.seg == 1 ? segs.y[1] : segs.y[0];
        float r0, r1;
        rope_rotate(v0, v1, at.c, at.s, r0, r1);
        y[n] = r0, y[n + half] = r1;
        v0 = r0, v1 = r1;
    }
    if (at.seg == 0 || at.slot < 0) return;
    const size_t o = ((size_t)at.slot * (segs.N[1] / D) + at.h) * D + at.j;
    void *pool = at.seg == 1 ? p.k_pool : p.v_pool;
    store1_any(pool, p.pool_bf16, o, v0);
    store1_any(pool, p.pool_bf16, o + half, v1);
}

/* XM: 0 x from the workspace (a prep launch or x_ready), no fusions; 1 x row 0 rounded in
 * each CTA (qi_prep_cta, rows == 1) and fz's epilogues (the residual add, the pair modes'
 * GLU or RoPE); 2 x from the workspace with fz's epilogues. With 8-bit weights XM 1 and 2
 * take x as hi + lo rows (HL; XM 2 only from a GLU epilogue's x_ready). */
template <int BITS, int G, int SBT, int NT, int XM, bool TL>
__global__ void __launch_bounds__(QW_WARPS * 32, 2)
qmv_i8_kernel(qmv_segs segs, const uint4 *__restrict__ xq, const float *__restrict__ xsc,
              const float *__restrict__ xsum, int rows, int K, int ks, qi_fuse fz) {
    __shared__ float red[QW_WARPS][NT * 4 * 32]; /* K-split partials, per lane */
    __shared__ float pair[2][64];
    extern __shared__ uint4 qi_smem[]; /* INP: qi_inprep_bytes(K, BITS) */
    using F = qw_frame<G, NT, BITS, TL>;
    constexpr bool INP = XM == 1;
    constexpr bool HL = XM != 0 && BITS == 8; /* x rows 0, 1: hi and lo of one row */
    constexpr int XW = INP ? QI_XW : QW_XW;
    const int S = qw_steps(K);
    uint4 *sq = qi_smem;
    float *ssc = (float *)(qi_smem + (size_t)S * 16 * (BITS == 8 ? 2 : 1));
    float *ssum = ssc + (size_t)S * QI_XW;
    const uint4 *xb = INP ? sq : xq;
    const float *xscb = INP ? ssc : xsc, *xsumb = INP ? ssum : xsum;
    qi_rope_at ra = {};
    uint4 nwc[QI_NWC]; /* the norm weight's first pieces, before the PDL wait (constants) */
#pragma unroll
    for (int i = 0; i < QI_NWC; i++) {
        const int k = 8 * (int)threadIdx.x + 8 * 256 * i;
        nwc[i] = INP && fz.nw && k < K ? __ldg((const uint4 *)(fz.nw + k))
                                       : make_uint4(0, 0, 0, 0);
    }
    const auto ld4 = [](const uint4 *p) { if constexpr (INP) return *p; else return __ldg(p); };
    const auto ld2 = [](const float *p) {
        if constexpr (INP) return *(const float2 *)p;
        else return __ldg((const float2 *)p);
    };
    /* one step of a load batch: D of the step's MMAs, scaled into acc per group */
    qw_run<G, NT, BITS, XM != 0, HL, TL>(segs, xb, 16, HL ? 2 : rows, K, ks, red,
        [&](const F &f, const typename F::batch &bt, int u, int s, const uint4 *const *xl,
            float (*acc)[4]) {
        /* two accumulator chains per n-tile (even / odd words) */
        int d[NT][2][4];
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int c = 0; c < 2; c++)
                d[nt][c][0] = d[nt][c][1] = d[nt][c][2] = d[nt][c][3] = 0;
        /* the chunk's words: 4 (4-bit, 8 codes each) or 8 (8-bit, 4 codes each) */
        uint32_t wda[4 * F::LQ], wdb[4 * F::LQ];
#pragma unroll
        for (int q = 0; q < F::LQ; q++) {
            const uint4 &a = bt.qa[u][q], &b = bt.qb[u][q];
            wda[4 * q] = a.x, wda[4 * q + 1] = a.y, wda[4 * q + 2] = a.z, wda[4 * q + 3] = a.w;
            wdb[4 * q] = b.x, wdb[4 * q + 1] = b.y, wdb[4 * q + 2] = b.z, wdb[4 * q + 3] = b.w;
        }
        uint4 bx[NT][2];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const uint4 *xp = xl[nt] + (size_t)s * 16;
            bx[nt][0] = ld4(xp), bx[nt][1] = ld4(xp + 8);
        }
#pragma unroll
        for (int w = 0; w < 4; w++) {
            /* MMA w: codes 8w..8w+7 of the chunk, k slots {a0 | a1} then {a2 | a3} */
            uint32_t a0, a1, a2, a3;
            if (BITS == 4) {
                a0 = wda[w] & 0x0F0F0F0Fu, a1 = wdb[w] & 0x0F0F0F0Fu;
                a2 = (wda[w] >> 4) & 0x0F0F0F0Fu, a3 = (wdb[w] >> 4) & 0x0F0F0F0Fu;
            } else {
                a0 = wda[2 * w], a1 = wdb[2 * w], a2 = wda[2 * w + 1], a3 = wdb[2 * w + 1];
            }
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const uint4 &b = bx[nt][w >> 1];
                const uint32_t b0 = (w & 1) ? b.z : b.x, b1 = (w & 1) ? b.w : b.y;
                mma_u8s8_16832(d[nt][w & 1], a0, a1, a2, a3, b0, b1);
            }
        }
        /* D: (row g, column 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1) */
        float sc[4], bi[4];
        f.template scales<SBT>(bt, u, sc, bi);
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const size_t c = (size_t)s * XW + nt * 8 + 2 * f.t;
            const float2 sx = ld2(xscb + c), sm = ld2(xsumb + c);
            const float sxe[4] = {sx.x, sx.y, sx.x, sx.y}, sme[4] = {sm.x, sm.y, sm.x, sm.y};
#pragma unroll
            for (int i = 0; i < 4; i++)
                acc[nt][i] = fmaf(sc[i] * sxe[i], (float)(d[nt][0][i] + d[nt][1][i]),
                                  fmaf(bi[i], sme[i], acc[nt][i]));
        }
    }, [&] {
#ifdef QW_TIMELINE /* qw_diag_host 2 (bench/qi_timeline.cu): no in-CTA prep (x stale) */
        if (fz.diag == 2) return;
#endif
        if (XM != 0 && fz.rope_cs) ra = qi_rope_pre(segs, fz, ks);
        if constexpr (INP)
            qi_prep_cta<G, BITS>(sq, ssc, ssum, ssum + (size_t)S * QI_XW, fz, K, nwc);
    }, qw_epi{fz.res, fz.glu_out || fz.rope_cs ? &pair[0][0] : nullptr});
    if (XM != 0 && fz.glu_out) qi_glu_epilogue<BITS>(pair, fz, segs.N[0]);
    if (XM != 0 && fz.rope_cs) qi_rope_epilogue(pair, segs, fz, ks, ra);
    if constexpr (XM != 0) QW_TL(14);
}

/* ==== Launch ==== */
/* The prep and main launches of one configuration (qw_dispatch picks it). */
template <int BITS, int G, int SBT, int NT> struct qi_launch {
    static int go(qmv_segs &segs, const cuda_qmv_args *a, cudaStream_t st) {
        uint4 *xq = (uint4 *)a->ws;
        const int S = qw_steps(a->K);
        float *xsc = (float *)(xq + qi_quads(a->K)), *xsum = xsc + (size_t)S * QW_XW;
        const bool inp = a->x_inprep;
        pdl_launch p;
        cudaError_t e = cudaSuccess;
        if (a->skip_prep || a->x_ready || inp) { /* no prep launch (skip_prep: stale x) */
        } else if (a->norm_w) { /* one CTA a row: the norm's sum of squares spans the row */
            pdl_launch_config(&p, dim3(QW_ROWS), dim3(256), 0, st);
            e = cudaLaunchKernelEx(&p.cfg, qi_prep_norm_kernel<G, BITS>, xq, xsc, xsum,
                                   (float *)a->x, a->ldx, a->rows, a->K, a->norm_x, a->norm_y,
                                   a->norm_w, a->norm_eps, a->norm_offset);
        } else {
            pdl_launch_config(&p, dim3((unsigned)((S * 16 + 255) / 256), QW_ROWS), dim3(256), 0,
                              st);
            e = cudaLaunchKernelEx(&p.cfg, qi_prep_kernel<G, BITS>, xq, xsc, xsum, a->x, a->ldx,
                                   a->rows, a->K, a->glu_out, a->glu_up, a->glu_act);
        }
        if (e != cudaSuccess) return (int)e;
        qi_fuse fz = {};
        if (inp) {
            fz.x = a->norm_w ? a->norm_x : a->x;
            fz.xn = (float *)a->x, fz.nw = a->norm_w;
            fz.eps = a->norm_eps, fz.offset = a->norm_offset;
        }
        fz.res = a->res;
#ifdef QW_TIMELINE
        fz.diag = qw_diag_host;
#endif
        int grid, ks;
        if (a->glu_next) { /* pair mode: CTA c owns units [64c, 64c + 64) of gate and up */
            ks = 1, grid = (segs.N[0] + 63) / 64;
            segs.pair = 1, segs.cta0[0] = 0, segs.cta0[1] = grid;
            fz.glu_out = a->glu_next, fz.act = a->glu_next_act;
            if (a->glu_next_q) { /* the next qmv's x: K = N, in this workspace's layout */
                fz.nxq = xq;
                fz.nxsc = (float *)(xq + qi_quads(segs.N[0]));
                fz.nxsum = fz.nxsc + (size_t)qw_steps(segs.N[0]) * QW_XW;
            }
        } else { /* ~16 warps per SM, >= 2 load batches a warp */
            ks = qw_grid(segs, S, qw_frame<G, NT, BITS>::U, 16, 2, &grid);
        }
        if (a->rope_cs) { /* RoPE pairs: rg = 64 / ks rows a group must divide head_dim / 2 */
            int k2 = ks > 4 ? 4 : ks;
            while ((a->head_dim / 2) % (64 / k2)) k2 *= 2; /* ends at 4: head_dim % 32 == 0 */
            if (k2 != ks) ks = k2, grid = qw_grid_fill(segs, ks);
            segs.pair = 2, segs.pair_half = a->head_dim / 2;
            fz.rope_cs = a->rope_cs, fz.rope_rows = a->rope_rows;
            fz.k_pool = a->k_pool, fz.v_pool = a->v_pool, fz.pool_bf16 = a->pool_bf16;
        }
        const bool epi =
            inp || fz.res || fz.glu_out || fz.rope_cs || (BITS == 8 && a->x_ready); /* HL */
        if (epi && NT != 1) return (int)cudaErrorInvalidValue; /* one row only (NT 1) */
        const int xm = epi ? (inp ? 1 : 2) : 0;
        if (!a->tiled) return launch<false>(segs, xq, xsc, xsum, a, ks, grid, fz, xm, st);
        if constexpr (SBT == CUDA_QSB_BF16) /* tiled weights have bf16 scales (qi_supported) */
            return launch<true>(segs, xq, xsc, xsum, a, ks, grid, fz, xm, st);
        return (int)cudaErrorInvalidValue;
    }
    template <bool TL>
    static int launch(const qmv_segs &segs, const uint4 *xq, const float *xsc, const float *xsum,
                      const cuda_qmv_args *a, int ks, int grid, const qi_fuse &fz, int xm,
                      cudaStream_t st) {
        pdl_launch l;
        pdl_launch_config(&l, dim3(grid), dim3(QW_WARPS * 32),
                          xm == 1 ? qi_inprep_bytes(a->K, BITS) : 0, st);
        if constexpr (NT == 1) {
            if (xm)
                return (int)cudaLaunchKernelEx(&l.cfg,
                                               xm == 1 ? qmv_i8_kernel<BITS, G, SBT, NT, 1, TL>
                                                       : qmv_i8_kernel<BITS, G, SBT, NT, 2, TL>,
                                               segs, xq, xsc, xsum, a->rows, a->K, ks, fz);
        }
        return (int)cudaLaunchKernelEx(&l.cfg, qmv_i8_kernel<BITS, G, SBT, NT, 0, TL>, segs, xq,
                                       xsc, xsum, a->rows, a->K, ks, fz);
    }
};

template <int G, int SBT, int NT> using qi_launch4 = qi_launch<4, G, SBT, NT>;
template <int G, int SBT, int NT> using qi_launch8 = qi_launch<8, G, SBT, NT>;

/* qw_supported, and x_inprep's shared memory within the default 48 KiB (K <= 19,584 4-bit,
 * 10,240 8-bit) */
static bool qi_supported(const cuda_qmv_args *a) {
    /* 8-bit fusions take x as hi + lo: from the in-CTA prep or a GLU epilogue (x_ready) */
    if (a && a->bits == 8 && (a->res || a->glu_next || a->rope_cs) && !a->x_inprep &&
        !a->x_ready)
        return false;
    if (a && a->tiled && a->sb_dtype != CUDA_QSB_BF16) return false;
    return qw_supported(a, true) &&
           (!a->x_inprep || qi_inprep_bytes(a->K, a->bits) <= 48 * 1024);
}

extern "C" int cuda_qmv_i8_supported(const cuda_qmv_args *a) { return qi_supported(a); }

extern "C" size_t cuda_qmv_i8_workspace_bytes(int K) {
    return qi_quads(K) * sizeof(uint4) + 2 * (size_t)qw_steps(K) * QW_XW * sizeof(float);
}

extern "C" int cuda_qmv_i8(const cuda_qmv_args *a, cudaStream_t st) {
    qmv_segs segs;
    if (!a || !qi_supported(a)) return (int)cudaErrorInvalidValue;
    size_t ws = cuda_qmv_i8_workspace_bytes(a->K);
    if (a->glu_next_q && cuda_qmv_i8_workspace_bytes(a->N[0]) > ws)
        ws = cuda_qmv_i8_workspace_bytes(a->N[0]);
    const int rc = qw_args(a, true, ws, &segs);
    if (rc) return rc;
    return a->bits == 4 ? qw_dispatch<qi_launch4>(segs, a, st)
                        : qw_dispatch<qi_launch8>(segs, a, st);
}
