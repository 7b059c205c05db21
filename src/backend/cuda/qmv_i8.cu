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

/* One thread's 8 values f of x row at.r (step at.s, chunk at.t, word at.j: codes 8j..8j+7
 * of the chunk) rounded to int8 and stored in B-fragment order, with the group's scale and
 * exact sum. A group is the 4 * (G / 32) adjacent threads of a class: its absmax and sum go
 * through shuffles, so every thread of the warp calls this (f = 0 past K or `rows`; rows >=
 * `rows` only zero their scales and sums). */
template <int G, int BITS>
__device__ __forceinline__ void qi_quant_store(uint4 *xq, float *xsc, float *xsum,
                                               const float f[8], qw_prep_at at, int rows, int S) {
    constexpr int C = 128 / G, CPG = G / 32;
    const int r = at.r, s = at.s, t = at.t, j = at.j;
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
    if (at.in && j == 0 && t % CPG == 0) {
        const size_t c = (size_t)s * QW_XW + r * C + t / CPG;
        xsc[c] = amax / 127.f;
        xsum[c] = sum;
    }
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

template <int BITS, int G, int SBT, int NT>
__global__ void __launch_bounds__(QW_WARPS * 32, 2)
qmv_i8_kernel(qmv_segs segs, const uint4 *__restrict__ xq, const float *__restrict__ xsc,
              const float *__restrict__ xsum, int rows, int K, int ks) {
    __shared__ float red[QW_WARPS][NT * 4 * 32]; /* K-split partials, per lane */
    using F = qw_frame<G, NT, BITS>;
    /* one step of a load batch: D of the step's MMAs, scaled into acc per group */
    qw_run<G, NT, BITS>(segs, xq, 16, rows, K, ks, red,
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
            bx[nt][0] = __ldg(xp), bx[nt][1] = __ldg(xp + 8);
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
            const size_t c = (size_t)s * QW_XW + nt * 8 + 2 * f.t;
            const float2 sx = __ldg((const float2 *)(xsc + c));
            const float2 sm = __ldg((const float2 *)(xsum + c));
            const float sxe[4] = {sx.x, sx.y, sx.x, sx.y}, sme[4] = {sm.x, sm.y, sm.x, sm.y};
#pragma unroll
            for (int i = 0; i < 4; i++)
                acc[nt][i] = fmaf(sc[i] * sxe[i], (float)(d[nt][0][i] + d[nt][1][i]),
                                  fmaf(bi[i], sme[i], acc[nt][i]));
        }
    });
}

/* ==== Launch ==== */
/* The prep and main launches of one configuration (qw_dispatch picks it). */
template <int BITS, int G, int SBT, int NT> struct qi_launch {
    static int go(qmv_segs &segs, const cuda_qmv_args *a, cudaStream_t st) {
        uint4 *xq = (uint4 *)a->ws;
        const int S = qw_steps(a->K);
        float *xsc = (float *)(xq + qi_quads(a->K)), *xsum = xsc + (size_t)S * QW_XW;
        pdl_launch p;
        cudaError_t e = cudaSuccess;
        if (a->skip_prep) { /* timing diagnostics (MLXCEL_DIAG_SKIP=prep): stale x */
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
        int grid;
        /* ~16 warps per SM, >= 2 load batches a warp */
        const int ks = qw_grid(segs, S, qw_frame<G, NT, BITS>::U, 16, 2, &grid);
        pdl_launch l;
        pdl_launch_config(&l, dim3(grid), dim3(QW_WARPS * 32), 0, st);
        return (int)cudaLaunchKernelEx(&l.cfg, qmv_i8_kernel<BITS, G, SBT, NT>, segs,
                                       (const uint4 *)xq, (const float *)xsc, (const float *)xsum,
                                       a->rows, a->K, ks);
    }
};

template <int G, int SBT, int NT> using qi_launch4 = qi_launch<4, G, SBT, NT>;
template <int G, int SBT, int NT> using qi_launch8 = qi_launch<8, G, SBT, NT>;

extern "C" int cuda_qmv_i8_supported(const cuda_qmv_args *a) { return qw_supported(a, true); }

extern "C" size_t cuda_qmv_i8_workspace_bytes(int K) {
    return qi_quads(K) * sizeof(uint4) + 2 * (size_t)qw_steps(K) * QW_XW * sizeof(float);
}

extern "C" int cuda_qmv_i8(const cuda_qmv_args *a, cudaStream_t st) {
    qmv_segs segs;
    const int rc = qw_args(a, true, a ? cuda_qmv_i8_workspace_bytes(a->K) : 0, &segs);
    if (rc) return rc;
    return a->bits == 4 ? qw_dispatch<qi_launch4>(segs, a, st)
                        : qw_dispatch<qi_launch8>(segs, a, st);
}
