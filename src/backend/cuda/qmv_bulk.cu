/* Streaming quantized GEMV on the tensor cores, bits 4 and 8, bf16 scales / biases, 1..32
 * rows: y[r, n] = sum_k x[r, k] * (s q + b)[n, k], fp32 x and y (same contract as cuda_qmv:
 * segments, ldy). The packed weights are the only large stream, so the kernel is built to
 * keep bytes in flight with few instructions:
 *
 * - A CTA owns 16 * RB weight rows and streams them through S shared-memory stages of KC
 *   codes (256 bytes per row), filled by bulk async copies (one per row and stage) that one
 *   producer thread issues up to S stages ahead on "full" mbarriers; weights are constant,
 *   so it starts before the PDL wait. Four consumer warps: warp w takes row block w % RB and
 *   every (4 / RB)-th k slice of a stage, then releases the stage on its "empty" mbarrier.
 * - Dequantization in registers, to the bf16 values the CPU reference computes
 *   (s * q + b rounded once to bf16): 4-bit codes become exact bf16 integers by OR-ing each
 *   nibble pair (c_i, c_{i+4} of a word) into the mantissa of 128 (0x4300) and subtracting
 *   128; 8-bit codes go through fp32 (0x4B000000 | q, minus 2^23, exact) and keep the high
 *   halves (q has <= 8 significant bits); then one bf16x2 FMA with the group's scale and
 *   bias. The x pairs are converted from fp32 in the same (c_i, c_{i+4}) order.
 * - mma.sync m16n8k16 (bf16 in, fp32 accumulate): lane (g, t) supplies weight rows g, g + 8
 *   and x row g of each 8-row n-tile; the k of a lane's 16-byte chunk are its own slots of
 *   consecutive MMAs (a sum over k does not care where each k sits as long as A and B agree),
 *   so every weight read is one 16-byte shared-memory load per row.
 * - x is rounded to bf16 once per launch by a small prep kernel into the workspace, already in
 *   the B-fragment order of those MMAs: one 16-byte load per lane, consecutive lanes on
 *   consecutive 16 bytes (4 L1 wavefronts a warp). Read straight from fp32 x, a warp's two
 *   16-byte loads touched 32 rows x columns = 32 cache lines each, and those L1 wavefronts were
 *   the kernel's limit at every row count (H200: 8.6 codes per SM cycle at 1 row, 1.4 at 32).
 * - The k-slice warps of a row block add their tiles in shared memory in a fixed order
 *   (no atomics: reproducible).
 * - TL (a weight in the tiled layout, qtile.cuh): a stage is one block per row tile, codes
 *   and scales, one bulk copy each; super-tile sti of a stage is the block's quad row sti
 *   (4-bit: step sti; 8-bit: step sti / 2, quad sti % 2), so 8-bit x is laid out in that k
 *   order. Its register budget is the occupancy shared memory allows (4 CTAs an SM: min blocks
 *   4, else 0 = ptxas decides): at the default, ptxas spilled the 32-row 8-bit variant
 *   (gate+up 151 against 73 us unspilled). The MLX layout's default shape takes the same
 *   budget from 17 rows (q4g64 gate+up at 32 rows 64.9 against 73.1 us, q8g64 lm_head 325.4
 *   against 365.1), not below (q8g64 one row 57.2 against 54.8).
 *   Measured (H200, op bench, 8B shapes, against the MLX layout's default shape): q4g64
 *   gate+up 33.2 / 61.8 us at 1 / 32 rows against 36.7 / 73.1, q8g64 48.4 / 72.5 against
 *   54.8 / 85.9; the scales read from global memory before the stage wait were slower. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_info.h"
#include "backend/cuda/qkern.cuh"
#include "backend/cuda/qtile.cuh"

#define QB_CW 4       /* consumer warps */
#define QB_ROWB 256   /* packed bytes per row and stage */
#define QB_PAD 64     /* bytes after each staged row: a quarter warp's 16-byte loads hit distinct banks */

template <int BITS> struct qb_cfg {
    static constexpr int KC = QB_ROWB * 8 / BITS; /* codes per row and stage */
    static constexpr int LC = 128 / BITS;        /* codes per lane chunk (16 bytes) */
    static constexpr int ST = 4 * LC;            /* codes per super-tile (4 lanes t) */
    static constexpr int NST = KC / ST;          /* super-tiles per stage: 4 */
    static constexpr int VT = LC / 8;            /* virtual k-tiles (8 codes per lane) per chunk */
};

__device__ __forceinline__ uint32_t qb_bf2_fma(uint32_t q, uint32_t s2, uint32_t b2) {
    __nv_bfloat162 r = __hfma2(*(const __nv_bfloat162 *)&q, *(const __nv_bfloat162 *)&s2,
                               *(const __nv_bfloat162 *)&b2);
    return *(uint32_t *)&r;
}
__device__ __forceinline__ uint32_t qb_bf2_sub128(uint32_t p) {
    const uint32_t k128 = 0x43004300u;
    __nv_bfloat162 r = __hsub2(*(const __nv_bfloat162 *)&p, *(const __nv_bfloat162 *)&k128);
    return *(uint32_t *)&r;
}
/* Word w of a lane chunk -> the 4 A registers of one virtual k-tile (8 codes): pairs in MMA
 * slot order {a0/a2 of the first MMA, a0/a2 of the second}. 4-bit: one word holds the tile
 * (pairs c_i, c_{i+4}); 8-bit: two words (pairs c_2i, c_2i+1). */
template <int BITS>
__device__ __forceinline__ void qb_dequant(const uint32_t *wd, uint32_t s2, uint32_t b2, uint32_t p[4]) {
    if (BITS == 4) {
        const uint32_t w = wd[0];
#pragma unroll
        for (int i = 0; i < 4; i++)
            p[i] = qb_bf2_fma(qb_bf2_sub128(q4_pair_bf16(w >> (4 * i))), s2, b2);
    } else {
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const float lo = __uint_as_float(__byte_perm(wd[h], 0x4B000000u, 0x7440 + 2 * i)) - 8388608.0f;
                const float hi = __uint_as_float(__byte_perm(wd[h], 0x4B000000u, 0x7441 + 2 * i)) - 8388608.0f;
                const uint32_t q = __byte_perm(__float_as_uint(lo), __float_as_uint(hi), 0x7632);
                p[2 * h + i] = qb_bf2_fma(q, s2, b2);
            }
    }
}

/* ==== x in fragment order ====
 * Quad q (16 bytes: the B registers of a lane's two MMAs for one virtual k-tile) of n-tile i,
 * virtual tile j of global super-tile u, lane l = 4 g + t sits at ((u * VT + j) * NT + i) * 32
 * + l and holds x row 8 i + g at codes u * ST + t * LC + 8 j .. + 7 as bf16 pairs in the order
 * of qb_dequant (4-bit: (c_i, c_{i+4}); 8-bit: (c_2i, c_2i+1)); zeros past rows or K. TL
 * 8-bit: super-tile u is quad u % 2 of step u / 2 (qb_k). */
template <int BITS, bool TL> __host__ __device__ constexpr int qb_nst(int K) {
    return TL && BITS == 8 ? 2 * ((K + 127) / 128)
                           : (K + qb_cfg<BITS>::ST - 1) / qb_cfg<BITS>::ST;
}
template <int BITS, bool TL = false>
__host__ __device__ constexpr size_t qb_xquads(int K, int nt) {
    return (size_t)qb_nst<BITS, TL>(K) * qb_cfg<BITS>::VT * nt * 32;
}
/* The first code of lane chunk t of super-tile u. */
template <int BITS, bool TL> __device__ __forceinline__ int qb_k(int u, int t) {
    if (TL && BITS == 8) return (u >> 1) * 128 + 32 * t + 16 * (u & 1);
    return u * qb_cfg<BITS>::ST + t * qb_cfg<BITS>::LC;
}

/* This lane's quad of n-tile i, virtual tile j of super-tile u (zeros where not ok). */
template <int VT, int NT>
__device__ __forceinline__ uint4 qb_xload(const uint4 *xq, int u, int j, int i, int lane, bool ok) {
    return ok ? __ldg(xq + ((size_t)(u * VT + j) * NT + i) * 32 + lane) : make_uint4(0, 0, 0, 0);
}

template <int BITS, bool TL>
__global__ void __launch_bounds__(256)
qb_prep_kernel(uint4 *__restrict__ xq, const float *__restrict__ x, long ldx, int rows, int K, int nt) {
    using C = qb_cfg<BITS>;
    pdl_wait(); /* x is the previous kernel's output; an earlier qmv may still read xq */
    pdl_trigger();
    const size_t q = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= qb_xquads<BITS, TL>(K, nt)) return;
    const int l = (int)(q % 32);
    const size_t rest = q / 32;
    const int i = (int)(rest % nt), j = (int)(rest / nt % C::VT);
    const int u = (int)(rest / nt / C::VT);
    const int r = 8 * i + l / 4;
    const size_t k = (size_t)qb_k<BITS, TL>(u, l % 4) + 8 * j;
    float f[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (r < rows && k < (size_t)K) { /* K % 32 == 0: all 8 codes or none */
        const float4 f0 = *(const float4 *)(x + (size_t)r * ldx + k);
        const float4 f1 = *(const float4 *)(x + (size_t)r * ldx + k + 4);
        f[0] = f0.x, f[1] = f0.y, f[2] = f0.z, f[3] = f0.w;
        f[4] = f1.x, f[5] = f1.y, f[6] = f1.z, f[7] = f1.w;
    }
    uint32_t b[4];
#pragma unroll
    for (int e = 0; e < 4; e++)
        b[e] = BITS == 4 ? bf16x2_pack(f[e], f[e + 4]) : bf16x2_pack(f[2 * e], f[2 * e + 1]);
    xq[q] = make_uint4(b[0], b[1], b[2], b[3]);
}

template <int BITS, int NT, int RB, int S, bool TL>
__global__ void __launch_bounds__((QB_CW + 1) * 32, TL || (RB == 1 && S == 8 && NT >= 3) ? 4 : 0)
qmv_bulk_kernel(qmv_segs segs, const uint4 *__restrict__ xq, int rows, int K, int group,
                int pcs) {
    using C = qb_cfg<BITS>;
    constexpr int KSPLIT = QB_CW / RB;
    constexpr int ROWS = 16 * RB;
    constexpr int RS = QB_ROWB + QB_PAD;
    const qt_shape ts = qt_of(BITS, group, K);            /* TL */
    const int STAGE = TL ? RB * ts.TB : ROWS * RS;        /* <= ROWS * RS */
    extern __shared__ __align__(128) uint8_t qb_buf[];
    __shared__ __align__(8) uint64_t full[S], empty[S];
    __shared__ float red[QB_CW][NT * 4][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const qmv_seg sg = qmv_pick(segs);
    const int n0 = ((int)blockIdx.x - sg.c0) * ROWS;
    const int nrows = min(ROWS, sg.N - n0);
    const size_t row_bytes = (size_t)K * BITS / 8;
    const int nchunks = (K + C::KC - 1) / C::KC;
    mbar_init_stages(full, empty, S, QB_CW);

    if (TL && warp == QB_CW) { /* ==== producer: one block a row tile and stage ==== */
        /* each block, codes and scales, in pcs copies (TB / pcs: a multiple of 16, pcs | 8) */
        const int nrt = (nrows + 15) / 16, pb = ts.TB / pcs;
        const uint8_t *wb = (const uint8_t *)sg.w;
        for (int c = 0; c < nchunks; c++) { /* nchunks == ts.NB: a stage is a block's steps */
            const int s = c % S;
            if (c >= S) mbar_wait(&empty[s], ((c / S) - 1) & 1);
            if (lane == 0) mbar_expect(&full[s], (uint32_t)(ts.TB * nrt));
            __syncwarp();
            for (int i = lane; i < nrt * pcs; i += 32) {
                const int r = i / pcs, p = i % pcs;
                bulk_g2s(qb_buf + (size_t)s * STAGE + (size_t)r * ts.TB + p * pb,
                         wb + qt_block(ts, n0 + 16 * r, c * C::KC) + p * pb, (uint32_t)pb,
                         &full[s]);
            }
        }
        return;
    }
    if (warp == QB_CW) { /* ==== producer ==== */
        const uint8_t *wb = (const uint8_t *)sg.w + (size_t)n0 * row_bytes;
        for (int c = 0; c < nchunks; c++) {
            const int s = c % S;
            if (c >= S) mbar_wait(&empty[s], ((c / S) - 1) & 1);
            const size_t o = (size_t)c * QB_ROWB;
            /* K % 32 == 0: the tail is a multiple of 16 bytes */
            const uint32_t bytes = (uint32_t)min((size_t)QB_ROWB, row_bytes - o);
            if (lane == 0) mbar_expect(&full[s], bytes * (uint32_t)nrows);
            __syncwarp();
            for (int r = lane; r < nrows; r += 32)
                bulk_g2s(qb_buf + (size_t)s * STAGE + (size_t)r * RS, wb + (size_t)r * row_bytes + o,
                         bytes, &full[s]);
        }
        return; /* dependents' pdl_wait() still waits for the whole grid */
    }

    /* ==== consumers ==== */
    const int g = lane >> 2, t = lane & 3;
    const int rb = warp % RB, kp = warp / RB;
    const int ra = 16 * rb + g, rc = ra + 8; /* this lane's two weight rows in the CTA */
    const bool oka = ra < nrows, okc = rc < nrows;
    const int G = K / group;
    /* TL: rows past N read the block's zeros; the scales are in the stage */
    const uint16_t *sa = TL ? nullptr : (const uint16_t *)sg.s + (size_t)(n0 + (oka ? ra : 0)) * G;
    const uint16_t *ba = TL ? nullptr : (const uint16_t *)sg.b + (size_t)(n0 + (oka ? ra : 0)) * G;
    const uint16_t *sc = TL ? nullptr : (const uint16_t *)sg.s + (size_t)(n0 + (okc ? rc : 0)) * G;
    const uint16_t *bc = TL ? nullptr : (const uint16_t *)sg.b + (size_t)(n0 + (okc ? rc : 0)) * G;
    const int nst = qb_nst<BITS, TL>(K); /* super-tiles in x's fragment order */
    /* TL: this lane's scale of row g at byte 2 gb of the block's (kind, g) words, kinds
     * (scales g, biases g, scales g + 8, biases g + 8) kst bytes apart */
    const int gsh = group == 64 ? 6 : 7, soff = (int)qt_sb_half(ts, g, 0, 0);
    const int kst = (int)qt_sb_half(ts, g, 0, 1) - soff;
    bool okx[NT];
#pragma unroll
    for (int i = 0; i < NT; i++) okx[i] = 8 * i + g < rows;
    /* One n-tile: two accumulators, one per MMA of a virtual tile, halve the dependent chain
     * of back-to-back MMAs, the warp's critical path there (H200 8B q4g64 B=8 1,923.2 against
     * 1,707.7 tok/s). More n-tiles are independent chains already, and the extra registers
     * cost occupancy (B=32 3,564.8 against 4,506.9 with them at every NT). */
    constexpr bool DUAL = NT == 1;
    float acc[NT][4], acc2[NT][4];
#pragma unroll
    for (int i = 0; i < NT; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[i][e] = acc2[i][e] = 0.f;

    pdl_wait(); /* x is the previous kernel's output */
    pdl_trigger();
    for (int c = 0; c < nchunks; c++) {
        const int s = c % S;
        const uint8_t *st = qb_buf + (size_t)s * STAGE;
        bool waited = false;
#pragma unroll
        for (int h = 0; h < C::NST / KSPLIT; h++) {
            const int sti = kp + h * KSPLIT;               /* super-tile within the stage */
            const int u = c * C::NST + sti;                /* global super-tile */
            const int k0 = qb_k<BITS, TL>(u, t);           /* this lane's first code */
            const bool in = k0 < K;                        /* K % 32 == 0: all LC codes or none */
            uint32_t s2a = 0, b2a = 0, s2c = 0, b2c = 0;
            if (!TL && in) { /* TL: the scales are in the stage, read after the wait */
                const int gi = k0 / group; /* group >= 32 >= LC: one group per lane chunk */
                s2a = (uint32_t)__ldg(sa + gi) * 0x10001u, b2a = (uint32_t)__ldg(ba + gi) * 0x10001u;
                s2c = (uint32_t)__ldg(sc + gi) * 0x10001u, b2c = (uint32_t)__ldg(bc + gi) * 0x10001u;
            }
            /* One n-tile: this super-tile's x quads are loaded before the stage wait, so their
             * L2 latency overlaps it (the wait's memory clobber keeps later loads after it). */
            uint4 xpre[NT == 1 ? C::VT : 1];
            if (NT == 1)
#pragma unroll
                for (int j = 0; j < C::VT; j++)
                    xpre[j] = qb_xload<C::VT, NT>(xq, u, j, 0, lane, okx[0] && u < nst);
            if (!waited) {
                mbar_wait(&full[s], (c / S) & 1);
                waited = true;
            }
            uint4 wa = make_uint4(0, 0, 0, 0), wc = wa;
            if (TL) {
                const uint8_t *blk = st + (size_t)rb * ts.TB;
                if (in) {
                    wa = *(const uint4 *)(blk + sti * 1024 + 16 * lane);
                    wc = *(const uint4 *)(blk + sti * 1024 + 512 + 16 * lane);
                    const uint8_t *p = blk + soff + 2 * ((k0 - c * C::KC) >> gsh);
                    s2a = (uint32_t)*(const uint16_t *)p * 0x10001u;
                    b2a = (uint32_t)*(const uint16_t *)(p + kst) * 0x10001u;
                    s2c = (uint32_t)*(const uint16_t *)(p + 2 * kst) * 0x10001u;
                    b2c = (uint32_t)*(const uint16_t *)(p + 3 * kst) * 0x10001u;
                }
            } else {
                const int off = (sti * C::ST + t * C::LC) * BITS / 8;
                if (in && oka) wa = *(const uint4 *)(st + (size_t)ra * RS + off);
                if (in && okc) wc = *(const uint4 *)(st + (size_t)rc * RS + off);
            }
            /* Lanes past K go on with zero codes, scales and x: mma.sync needs the whole warp
             * (a partial last super-tile, K % (4 * LC) != 0, split a warp and hung the GPU). */
            const uint32_t wav[4] = {wa.x, wa.y, wa.z, wa.w}, wcv[4] = {wc.x, wc.y, wc.z, wc.w};
#pragma unroll
            for (int j = 0; j < C::VT; j++) { /* virtual k-tile: 8 codes */
                constexpr int WPT = BITS == 4 ? 1 : 2; /* words per virtual tile */
                uint32_t pa[4], pc[4];
                qb_dequant<BITS>(wav + j * WPT, s2a, b2a, pa);
                qb_dequant<BITS>(wcv + j * WPT, s2c, b2c, pc);
#pragma unroll
                for (int i = 0; i < NT; i++) {
                    /* zeros past K within a super-tile come from the prep */
                    const bool ok = okx[i] && u < nst;
                    const uint4 xb = NT == 1 ? xpre[j] : qb_xload<C::VT, NT>(xq, u, j, i, lane, ok);
                    mma_bf16_16816(acc[i], pa[0], pc[0], pa[1], pc[1], xb.x, xb.y);
                    mma_bf16_16816(DUAL ? acc2[i] : acc[i], pa[2], pc[2], pa[3], pc[3], xb.z, xb.w);
                }
            }
        }
        if (!waited) mbar_wait(&full[s], (c / S) & 1); /* keep the phases in step */
        fence_proxy_async();
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[s]);
    }

    /* acc[i]: [0], [1] = weight row ra, x rows 8i + 2t, 8i + 2t + 1; [2], [3] = row rc */
#pragma unroll
    for (int i = 0; i < NT; i++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            red[warp][i * 4 + e][lane] = DUAL ? acc[i][e] + acc2[i][e] : acc[i][e];
    asm volatile("bar.sync 1, %0;" ::"n"(QB_CW * 32) : "memory"); /* consumers only */
    if (kp != 0) return;
    for (int q = 0; q < NT * 4; q++) {
        float sum = 0.f;
#pragma unroll
        for (int p = 0; p < KSPLIT; p++) sum += red[rb + p * RB][q][lane];
        const int e = q & 3, i = q >> 2;
        const int n = n0 + (e >= 2 ? rc : ra);
        const int r = 8 * i + 2 * t + (e & 1);
        if (n - n0 < nrows && r < rows) sg.y[(size_t)r * sg.ldy + n] = sum;
    }
}

/* ==== Launch ==== */
template <int BITS, int NT, int RB, int S, bool TL>
static int qb_go(qmv_segs segs, const cuda_qmv_args *a, cudaStream_t st, int pcs = 1) {
    constexpr size_t smem = (size_t)S * 16 * RB * (QB_ROWB + QB_PAD);
    static int s_set[CUDA_MAX_DEVICES]; /* cudaFuncSetAttribute is per device */
    const int cd = cuda_cur_device();
    if (!s_set[cd]) {
        const cudaError_t e = cudaFuncSetAttribute(qmv_bulk_kernel<BITS, NT, RB, S, TL>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return (int)e;
        s_set[cd] = 1;
    }
    int grid = 0;
    for (int i = 0; i < segs.n; i++) {
        segs.cta0[i] = grid;
        grid += (segs.N[i] + 16 * RB - 1) / (16 * RB);
    }
    uint4 *xq = (uint4 *)a->ws;
    const size_t quads = qb_xquads<BITS, TL>(a->K, NT);
    pdl_launch p;
    pdl_launch_config(&p, dim3((unsigned)((quads + 255) / 256)), dim3(256), 0, st);
    cudaError_t e =
        cudaLaunchKernelEx(&p.cfg, qb_prep_kernel<BITS, TL>, xq, a->x, a->ldx, a->rows, a->K, NT);
    if (e != cudaSuccess) return (int)e;
    pdl_launch l;
    pdl_launch_config(&l, dim3(grid), dim3((QB_CW + 1) * 32), smem, st);
    return (int)cudaLaunchKernelEx(&l.cfg, qmv_bulk_kernel<BITS, NT, RB, S, TL>, segs,
                                   (const uint4 *)xq, a->rows, a->K, a->group, pcs);
}

template <int BITS, int RB, int S, bool TL = false>
static int qb_nt(const qmv_segs &segs, const cuda_qmv_args *a, cudaStream_t st, int pcs = 1) {
    if (a->rows <= 8) return qb_go<BITS, 1, RB, S, TL>(segs, a, st, pcs);
    if (a->rows <= 16) return qb_go<BITS, 2, RB, S, TL>(segs, a, st, pcs);
    if (a->rows <= 24) return qb_go<BITS, 3, RB, S, TL>(segs, a, st, pcs);
    return qb_go<BITS, 4, RB, S, TL>(segs, a, st, pcs);
}

/* Variants {RB, S}; 0, the default ({1, 8}), was the fastest on every 8B shape at 1, 8 and 32
 * rows but one (H200, cuda_ops_bench --only qmv, bench/results/2026-12-02-qmv-fc0d664.log,
 * where it is listed as variant 1). */
#define QB_N_VARIANTS 4
extern "C" int cuda_qmv_bulk_variants(void) { return QB_N_VARIANTS; }

extern "C" int cuda_qmv_bulk_supported(const cuda_qmv_args *a) {
    return a && (a->bits == 4 || a->bits == 8) && a->sb_dtype == CUDA_QSB_BF16 && a->rows >= 1 &&
           a->rows <= CUDA_QMV_TC_MAX_ROWS && (a->group == 32 || a->group == 64 || a->group == 128) &&
           a->K >= a->group && a->K % a->group == 0 && a->x && ((uintptr_t)a->x & 15) == 0 &&
           a->ldx >= a->K && a->ldx % 4 == 0 && !a->glu_out && !a->norm_w &&
           (!a->tiled || a->group >= 64);
}

/* x in fragment order for CUDA_QMV_TC_MAX_ROWS rows; 4-bit super-tiles are the longer. */
extern "C" size_t cuda_qmv_bulk_workspace_bytes(int K) {
    return qb_xquads<4>(K, CUDA_QMV_TC_MAX_ROWS / 8) * sizeof(uint4);
}

extern "C" int cuda_qmv_bulk(const cuda_qmv_args *a, int variant, cudaStream_t st) {
    if (!cuda_qmv_bulk_supported(a) || a->n_segs < 1 || a->n_segs > CUDA_QMV_MAX_SEGS ||
        variant < 0 || variant >= QB_N_VARIANTS || !a->ws || ((uintptr_t)a->ws & 15) ||
        a->ws_bytes < cuda_qmv_bulk_workspace_bytes(a->K))
        return (int)cudaErrorInvalidValue;
    qmv_segs segs;
    if (qmv_segs_fill(a, &segs, true, true)) return (int)cudaErrorInvalidValue;
    if (((size_t)a->K * a->bits / 8) % 16) return (int)cudaErrorInvalidValue; /* bulk copies: 16-byte rows */
    if (a->tiled) { /* the default shape: a stage is one block a row tile, in 1 (the
                       * fastest at 1, 8 and 32 rows, H200 8B shapes), 2, 4 or 8 copies */
        static const int k_pcs[QB_N_VARIANTS] = {1, 2, 4, 8};
        return a->bits == 4 ? qb_nt<4, 1, 8, true>(segs, a, st, k_pcs[variant])
                            : qb_nt<8, 1, 8, true>(segs, a, st, k_pcs[variant]);
    }
    if (a->bits == 4) {
        switch (variant) {
        case 0: return qb_nt<4, 1, 8>(segs, a, st);
        case 1: return qb_nt<4, 2, 6>(segs, a, st);
        case 2: return qb_nt<4, 4, 4>(segs, a, st);
        default: return qb_nt<4, 2, 4>(segs, a, st);
        }
    }
    switch (variant) {
    case 0: return qb_nt<8, 1, 8>(segs, a, st);
    case 1: return qb_nt<8, 2, 6>(segs, a, st);
    case 2: return qb_nt<8, 4, 4>(segs, a, st);
    default: return qb_nt<8, 2, 4>(segs, a, st);
    }
}
