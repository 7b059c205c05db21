/* Tensor-core quantized GEMV (qmv) for decode, bits 4 and 8: y[r, n] = sum_k x[r, k] *
 * (s q + b)[n, k] for 1..32 rows, fp32 x and y, MLX affine weights (src/backend/qfmt/qfmt.h).
 * Same contract as cuda_qmv (qgemv.cu: segments, ldy), which stays the fallback.
 *
 * Why tensor cores: the CUDA-core kernel spends LOP3 + FADD + FFMA per code and row and is
 * issue-bound (~36% of copy bandwidth at 4-bit, one row). Here a code costs ~1 LOP3 (+ a
 * shift per 4 codes) into an exact bf16 integer, and the multiply-adds of 16 weight rows x
 * 8 x rows go to one mma.sync m16n8k16 per 16 k (two with the hi / lo parts of x).
 *
 * Layout (details, and the functions shared with the host unit test: qmv_tc_map.h):
 * - A CTA owns 16 weight rows (32 at 4-bit with 9+ x rows: two row blocks per warp share the
 *   staged x); its warps split K by batches of qtc_cfg::KB k (round robin).
 *   Lane (g, t) loads, per group, the t-th quarter (group / 4 codes: 4..32 contiguous bytes)
 *   of weight rows n0 + g and n0 + g + 8, so every MMA sums codes of one group and the
 *   group's scale multiplies the MMA result: y += s * C + (b - offset * s) * sum(x).
 * - Codes become bf16 integers by OR-ing nibbles into the mantissa of 128 (0x4300 | q);
 *   8-bit codes are split into nibbles run as two MMAs (2048 + 16 h, 128 + l: exact).
 * - x: each warp converts its batch of x (fp32 -> bf16 hi + lo, ~16 mantissa bits) into its
 *   own shared-memory staging area in the lanes' pair order, with the per-group sums, using
 *   all 32 lanes (no separate prep launch); the MMA loop reads its B pairs with 16-byte LDS.
 * - Up to 4 n-tiles (x rows 8 i .. 8 i + 7) reuse every decoded weight register (9..32
 *   rows stay one weight stream instead of dequantized slabs + cuBLASLt). The x staging is
 *   per warp and grows with the rows (each warp converts its K slice for all rows): at 32
 *   rows it, not the MMAs, is the bulk of the instructions (a per-call prep shared by all
 *   CTAs would remove it; not done).
 * - Per-group fp32 partials (hi and lo chains apart at one n-tile) are scaled into per-lane
 *   totals; warps are summed in shared memory in a fixed order (deterministic, no atomics).
 * Bandwidth: the next batch's weights and scales are loaded (8- or 16-byte streaming loads;
 * 4-byte L1-cached ones at q4 g32) before the current batch is computed, and the batch after
 * it is prefetched into L2 (cp.async.bulk.prefetch). PDL: the first batch's weights and an
 * L2 prefetch of the start of the CTA's rows are issued before pdl_wait(), which precedes
 * the first read of x. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_info.h"
#include "backend/cuda/qkern.cuh"
#include "backend/cuda/qmv_tc_map.h"

#define QTC_TPW 32       /* threads per warp */
#define QTC_PF_CTA 32768 /* bytes of the CTA's rows prefetched into L2 before pdl_wait: with
                          * every resident CTA doing it, ~17 MB in flight, well inside L2 */

/* ==== Geometry ==== */
template <int BITS, int G, int NT> struct qtc_cfg {
    static constexpr int LW = G / 4 * BITS / 32; /* words per lane per row per group */
    static constexpr int LB = LW * 4;            /* bytes per lane per row per group */
    static constexpr int NP = G / 8;             /* x pairs per lane per group */
    static constexpr int S = 2 * NP + 4;         /* staging words per lane */
    /* k per batch: 256 at one n-tile (32 units of 8 x values: every lane converts one at
     * one row, 4-bit), 128 with more tiles (staging memory), for 8-bit and g32 (registers) */
    static constexpr int KB = (NT == 1 && G >= 64 && BITS == 4) ? 256 : 128;
    static constexpr int UG = KB / G; /* groups per batch */
    /* 16-row blocks per warp sharing the staged x: 2 with several n-tiles at 4-bit (halves
     * the x conversion and B reads per code, which grow with the rows; 8-bit: registers) */
    static constexpr int MB = NT >= 2 && BITS == 4 ? 2 : 1;
    /* register budget: <= 128 (2 CTAs of 8 warps per SM) for the small configurations */
    static constexpr int MIN_CTAS = MB == 1 && NT <= 2 ? 2 : 1;
    static constexpr int WARP_WORDS = UG * NT * 32 * S + UG * 8 * NT; /* staging + sums */
};

/* ==== Loads ==== */
template <int LW> __device__ __forceinline__ void qtc_ldw(uint32_t *d, const uint8_t *p) {
    if (LW == 1) {
        /* 4-byte quarters (q4 g32): a warp load covers half sectors, the next group's load
         * the other half; through L1 so that second half is a hit */
        asm volatile("ld.global.nc.u32 %0, [%1];" : "=r"(d[0]) : "l"(p));
    } else if (LW == 2) {
        asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];"
                     : "=r"(d[0]), "=r"(d[1]) : "l"(p));
    } else {
#pragma unroll
        for (int i = 0; i < LW / 4; i++) {
            const uint4 v = ldg_stream16(p + 16 * i);
            d[4 * i] = v.x, d[4 * i + 1] = v.y, d[4 * i + 2] = v.z, d[4 * i + 3] = v.w;
        }
    }
}

/* The scales (or biases) of groups i .. i + UG - 1 of one row, as fp32. vec: one aligned
 * vector load (the launcher checked ngroups % UG == 0 and 16-byte aligned arrays, so the
 * offset is a multiple of UG elements and every group of the batch exists); else one load
 * per group, n of them (the batch's groups inside K). */
template <int UG>
__device__ __forceinline__ void qtc_ld_sb(float *o, const void *p, int sbt, size_t i, int n, bool vec) {
    if constexpr (UG >= 2) {
        if (vec) {
            if (sbt == CUDA_QSB_F32) {
                const float *f = (const float *)p + i;
                if constexpr (UG == 2) {
                    const float2 v = __ldg((const float2 *)f);
                    o[0] = v.x, o[1] = v.y;
                } else {
#pragma unroll
                    for (int u = 0; u < UG; u += 4) {
                        const float4 v = __ldg((const float4 *)(f + u));
                        o[u] = v.x, o[u + 1] = v.y, o[u + 2] = v.z, o[u + 3] = v.w;
                    }
                }
            } else {
                uint32_t h[UG / 2];
                const uint16_t *q = (const uint16_t *)p + i;
                if constexpr (UG == 2) {
                    h[0] = __ldg((const unsigned int *)q);
                } else if constexpr (UG == 4) {
                    const uint2 v = __ldg((const uint2 *)q);
                    h[0] = v.x, h[1] = v.y;
                } else {
#pragma unroll
                    for (int u = 0; u < UG / 2; u += 4) {
                        const uint4 v = __ldg((const uint4 *)(q + 2 * u));
                        h[u] = v.x, h[u + 1] = v.y, h[u + 2] = v.z, h[u + 3] = v.w;
                    }
                }
#pragma unroll
                for (int u = 0; u < UG; u++) {
                    const uint32_t b = (h[u / 2] >> (16 * (u & 1))) & 0xffffu;
                    o[u] = sbt == CUDA_QSB_BF16 ? __uint_as_float(b << 16)
                                                : __half2float(__ushort_as_half((unsigned short)b));
                }
            }
            return;
        }
    }
#pragma unroll
    for (int u = 0; u < UG; u++) o[u] = u < n ? q_sb_load_rt(p, sbt, i + u) : 0.f;
}

__device__ __forceinline__ void qtc_prefetch_l2(const void *p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}

/* bf16x2 (round to nearest even) of (lo, hi): lo in the low half. */
__device__ __forceinline__ uint32_t qtc_pack_rn(float lo, float hi) {
    uint32_t d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}

/* ==== x staging: one batch of x rows [p0, p0 + rp), k [kb, kb + ug_n * G) ====
 * xs [UG][NT][32 lanes][S] words (hi pairs, lo pairs), xsum [UG][8 NT] floats. Rows >= rp
 * of the tiles keep the zeros of the kernel start (their outputs are never written). */
template <int BITS, int G, int NT>
__device__ __forceinline__ void qtc_stage_x(uint32_t *xs, float *xsum, const float *__restrict__ x,
                                            long ldx, int p0, int rp, int kb, int ug_n, int lane) {
    using C = qtc_cfg<BITS, G, NT>;
    constexpr int PER = G / 8; /* units per (row, group): divides 32 */
    const int per_row = ug_n * PER, total = rp * per_row;
    for (int base = 0; base < total; base += QTC_TPW) { /* warp-uniform trip count */
        const int idx = base + lane;
        const bool ok = idx < total;
        float sum = 0.f;
        int r = 0, ug = 0, v = 0;
        if (ok) {
            /* a whole batch (all but the last): a power-of-two divisor, no integer division */
            r = ug_n == C::UG ? idx / (C::UG * PER) : idx / per_row;
            const int rem = idx - r * per_row;
            ug = rem / PER;
            v = rem - ug * PER;
            const float *src = x + (size_t)(p0 + r) * ldx + kb + ug * G + 8 * v;
            const float4 fa = __ldg((const float4 *)src), fb = __ldg((const float4 *)(src + 4));
            const float f[8] = {fa.x, fa.y, fa.z, fa.w, fb.x, fb.y, fb.z, fb.w};
            uint32_t hi[4], lo[4];
#pragma unroll
            for (int p = 0; p < 4; p++) {
                int a, b;
                qtc_unit_pairs(BITS, p, &a, &b);
                hi[p] = qtc_pack_rn(f[a], f[b]);
                const float ha = __uint_as_float(hi[p] << 16), hb = __uint_as_float(hi[p] & 0xffff0000u);
                lo[p] = qtc_pack_rn(f[a] - ha, f[b] - hb);
            }
#pragma unroll
            for (int e = 0; e < 8; e++) sum += f[e];
            const int t = qtc_unit_t(G, v), e0 = qtc_unit_e0(G, v);
            uint32_t *d = xs + (size_t)((ug * NT + (r >> 3)) * 32 + 4 * (r & 7) + t) * C::S + e0;
            *(uint4 *)d = make_uint4(hi[0], hi[1], hi[2], hi[3]);
            *(uint4 *)(d + C::NP) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
        }
        /* the PER units of one (row, group) are PER consecutive, aligned lanes */
#pragma unroll
        for (int o = 1; o < PER; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (ok && v == 0) xsum[ug * 8 * NT + r] = sum;
    }
}

/* ==== Kernel ==== */
template <int BITS, int G, int NT>
__global__ void __launch_bounds__(256, qtc_cfg<BITS, G, NT>::MIN_CTAS)
qmv_tc_kernel(qmv_segs segs, const float *__restrict__ x, long ldx, int rows, int K, int win,
              int sbt, int sbvec) {
    using C = qtc_cfg<BITS, G, NT>;
    constexpr int LW = C::LW, NP = C::NP, S = C::S, KB = C::KB, UG = C::UG, MB = C::MB;
    constexpr int H = 2 * MB; /* weight rows per lane: g + 16 m and g + 8 + 16 m, m < MB */
    constexpr bool SPLIT = NT == 1; /* hi / lo products in two chains (one tile: ILP) */
    constexpr float OFF = BITS == 4 ? 128.0f : 2176.0f;
    extern __shared__ uint4 qtc_smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const qmv_seg sg = qmv_pick(segs);
    const int n0 = ((int)blockIdx.x - sg.c0) * (16 * MB);
    const int p0 = blockIdx.y * win, rp = min(win, rows - p0); /* this pass's x rows */
    const int ngroups = K / G, nb = (K + KB - 1) / KB;
    const size_t row_bytes = (size_t)K * BITS / 8;

    uint32_t *xs = (uint32_t *)qtc_smem + (size_t)warp * C::WARP_WORDS;
    float *xsum = (float *)(xs + UG * NT * 32 * S);
    for (int i = lane; i < C::WARP_WORDS; i += 32) xs[i] = 0u;

    /* rows past N are not loaded (zero codes, zero scales) and never written */
    bool ok[H];
    const uint8_t *wr[H];
    size_t sr[H];
#pragma unroll
    for (int h = 0; h < H; h++) {
        const int n = n0 + 16 * (h >> 1) + 8 * (h & 1) + g;
        ok[h] = n < sg.N;
        wr[h] = (const uint8_t *)sg.w + (size_t)(ok[h] ? n : 0) * row_bytes + t * C::LB;
        sr[h] = (size_t)(ok[h] ? n : 0) * ngroups;
    }

    /* L2 prefetch of the start of the CTA's rows: the stream begins before pdl_wait */
    constexpr uint32_t PF_ROW = QTC_PF_CTA / (16 * MB); /* a multiple of 16 */
    if (warp == 0 && lane < 16 * MB && n0 + lane < sg.N)
        qtc_prefetch_l2((const uint8_t *)sg.w + (size_t)(n0 + lane) * row_bytes,
                        row_bytes < PF_ROW ? (uint32_t)row_bytes : PF_ROW);

    uint32_t wn[H][UG][LW];
    float sn[H][UG], bn[H][UG];
    auto load_batch = [&](int b) {
        const int j0 = b * UG, n_in = min(UG, ngroups - j0);
#pragma unroll
        for (int h = 0; h < H; h++) {
#pragma unroll
            for (int u = 0; u < UG; u++) {
                if (u < n_in && ok[h]) qtc_ldw<LW>(wn[h][u], wr[h] + (size_t)(j0 + u) * (G * BITS / 8));
                else
#pragma unroll
                    for (int i = 0; i < LW; i++) wn[h][u][i] = 0u;
            }
            /* rows past N: zero scales and biases (their zero codes then add nothing) */
            qtc_ld_sb<UG>(sn[h], sg.s, sbt, sr[h] + j0, ok[h] ? n_in : 0, ok[h] && sbvec);
            qtc_ld_sb<UG>(bn[h], sg.b, sbt, sr[h] + j0, ok[h] ? n_in : 0, ok[h] && sbvec);
        }
    };

    float acc[MB][NT][4];
#pragma unroll
    for (int m = 0; m < MB; m++)
#pragma unroll
        for (int i = 0; i < NT; i++) acc[m][i][0] = acc[m][i][1] = acc[m][i][2] = acc[m][i][3] = 0.f;

    if (warp < nb) load_batch(warp); /* constants: safe before the dependency wait */
    pdl_wait();                      /* x is the previous kernel's output */
    pdl_trigger();
    __syncwarp();                    /* the zeroed staging area is visible to every lane */

    for (int b = warp; b < nb; b += nw) {
        uint32_t wc[H][UG][LW];
        float sc[H][UG], bc[H][UG];
#pragma unroll
        for (int h = 0; h < H; h++)
#pragma unroll
            for (int u = 0; u < UG; u++) {
#pragma unroll
                for (int i = 0; i < LW; i++) wc[h][u][i] = wn[h][u][i];
                sc[h][u] = sn[h][u];
                bc[h][u] = bn[h][u];
            }
        if (b + nw < nb) load_batch(b + nw); /* next batch in flight during this one */
        /* and the one after it into L2: more bytes in flight than the registers hold
         * (lane l < 16 MB: this warp's slice of row n0 + l; sizes are multiples of 16) */
        if (b + 2 * nw < nb && lane < 16 * MB && n0 + lane < sg.N) {
            const size_t off = (size_t)(b + 2 * nw) * (KB * BITS / 8);
            const size_t len = row_bytes - off < (size_t)(KB * BITS / 8) ? row_bytes - off : KB * BITS / 8;
            qtc_prefetch_l2((const uint8_t *)sg.w + (size_t)(n0 + lane) * row_bytes + off, (uint32_t)len);
        }
        const int kb = b * KB, ug_n = min(UG, ngroups - b * UG);
        qtc_stage_x<BITS, G, NT>(xs, xsum, x, ldx, p0, rp, kb, ug_n, lane);
        __syncwarp();
#pragma unroll
        for (int u = 0; u < UG; u++) {
            if (u >= ug_n) break; /* warp-uniform */
            float ch[MB][NT][4], cl[MB][NT][4];
#pragma unroll
            for (int m = 0; m < MB; m++)
#pragma unroll
                for (int i = 0; i < NT; i++)
#pragma unroll
                    for (int e = 0; e < 4; e++) ch[m][i][e] = cl[m][i][e] = 0.f;
#pragma unroll
            for (int wi = 0; wi < LW; wi++) {
                uint32_t rr[H][4]; /* A registers of rows h (qtc_decode_word) */
#pragma unroll
                for (int h = 0; h < H; h++) qtc_decode_word(BITS, wc[h][u][wi], rr[h]);
#pragma unroll
                for (int i = 0; i < NT; i++) {
                    const uint32_t *bp = xs + (size_t)((u * NT + i) * 32 + lane) * S;
                    /* the word's B pairs: 4 (4-bit: one 16-byte LDS per part, 8 lanes of a
                     * phase at a stride of S = 4 mod 8 words hit 8 distinct bank groups) or 2 */
                    constexpr int NPW = BITS == 4 ? 4 : 2, P0 = BITS == 4 ? 4 : 2;
                    uint32_t bh[NPW], bl[NPW];
                    if (BITS == 4) {
                        const uint4 h4 = *(const uint4 *)(bp + P0 * wi);
                        const uint4 l4 = *(const uint4 *)(bp + NP + P0 * wi);
                        bh[0] = h4.x, bh[1] = h4.y, bh[2 % NPW] = h4.z, bh[3 % NPW] = h4.w;
                        bl[0] = l4.x, bl[1] = l4.y, bl[2 % NPW] = l4.z, bl[3 % NPW] = l4.w;
                    } else {
                        const uint2 h2 = *(const uint2 *)(bp + P0 * wi);
                        const uint2 l2 = *(const uint2 *)(bp + NP + P0 * wi);
                        bh[0] = h2.x, bh[1] = h2.y, bl[0] = l2.x, bl[1] = l2.y;
                    }
#pragma unroll
                    for (int m = 0; m < MB; m++)
#pragma unroll
                        for (int j = 0; j < 2; j++) {
                            int ra, rb, pb;
                            qtc_word_mma(BITS, wi, j, &ra, &rb, &pb);
                            const int o = pb - P0 * wi; /* 2 j (4-bit) or 0 (8-bit) */
                            const uint32_t *A0 = rr[2 * m], *A8 = rr[2 * m + 1];
                            mma_bf16_16816(ch[m][i], A0[ra], A8[ra], A0[rb], A8[rb], bh[o], bh[o + 1]);
                            mma_bf16_16816(SPLIT ? cl[m][i] : ch[m][i], A0[ra], A8[ra], A0[rb],
                                           A8[rb], bl[o], bl[o + 1]);
                        }
                }
            }
            /* C: [0], [1] = weight row g (+ 16 m), x rows 2t, 2t + 1; [2], [3] = row g + 8 */
#pragma unroll
            for (int m = 0; m < MB; m++) {
                const float s0 = sc[2 * m][u], s8 = sc[2 * m + 1][u];
                const float bb0 = fmaf(-OFF, s0, bc[2 * m][u]), bb8 = fmaf(-OFF, s8, bc[2 * m + 1][u]);
#pragma unroll
                for (int i = 0; i < NT; i++) {
                    const float2 sx = *(const float2 *)(xsum + u * 8 * NT + 8 * i + 2 * t);
                    float c4[4];
#pragma unroll
                    for (int e = 0; e < 4; e++) c4[e] = SPLIT ? ch[m][i][e] + cl[m][i][e] : ch[m][i][e];
                    acc[m][i][0] = fmaf(s0, c4[0], fmaf(bb0, sx.x, acc[m][i][0]));
                    acc[m][i][1] = fmaf(s0, c4[1], fmaf(bb0, sx.y, acc[m][i][1]));
                    acc[m][i][2] = fmaf(s8, c4[2], fmaf(bb8, sx.x, acc[m][i][2]));
                    acc[m][i][3] = fmaf(s8, c4[3], fmaf(bb8, sx.y, acc[m][i][3]));
                }
            }
        }
        __syncwarp(); /* every lane is done with this staging before the next batch's */
    }

    /* ==== Fixed-order sum over the warps ==== red [nw][MB][NT][4][32] reuses the staging */
    __syncthreads();
    float *red = (float *)qtc_smem;
#pragma unroll
    for (int m = 0; m < MB; m++)
#pragma unroll
        for (int i = 0; i < NT; i++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                red[(((warp * MB + m) * NT + i) * 4 + e) * 32 + lane] = acc[m][i][e];
    __syncthreads();
    for (int q = threadIdx.x; q < MB * NT * 128; q += blockDim.x) {
        const int mi = q >> 7, e = (q >> 5) & 3, l = q & 31; /* mi = m * NT + i */
        const int m = mi / NT, i = mi - m * NT;
        float s = 0.f;
        for (int w = 0; w < nw; w++) s += red[((w * MB * NT + mi) * 4 + e) * 32 + l];
        const int r = qtc_c_xrow(i, l, e), n = n0 + 16 * m + qtc_c_wrow(l, e);
        if (r < rp && n < sg.N) sg.y[(size_t)(p0 + r) * sg.ldy + n] = s;
    }
}

/* ==== Launchers ==== */
template <int BITS, int G, int NT>
static int qtc_go(qmv_segs segs, const cuda_qmv_args *a, int win, int passes, cudaStream_t st) {
    using C = qtc_cfg<BITS, G, NT>;
    static bool s_attr = false;
    int ctas = 0;
    for (int i = 0; i < segs.n; i++) {
        segs.cta0[i] = ctas;
        ctas += (segs.N[i] + 16 * C::MB - 1) / (16 * C::MB);
    }
    /* 8 warps per CTA (2 CTAs per SM) when the grid fits one such wave (o, down: 256 CTAs),
     * else 4 (4 per SM: qkv's 384 CTAs still run as one wave, no half-empty second wave;
     * many waves: finer tail). Either way up to 16 warps per SM. */
    const int nw = ctas * passes <= 2 * cuda_sm_count() ? 8 : 4;
    const size_t smem = (size_t)nw * C::WARP_WORDS * 4;
    if (!s_attr) {
        const cudaError_t e = cudaFuncSetAttribute(qmv_tc_kernel<BITS, G, NT>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   (int)((size_t)8 * C::WARP_WORDS * 4));
        if (e != cudaSuccess) return (int)e;
        s_attr = true;
    }
    /* vector scale / bias loads: every batch whole, arrays 16-byte aligned */
    int sbvec = (a->K / G) % C::UG == 0;
    for (int i = 0; i < segs.n; i++)
        sbvec &= ((uintptr_t)segs.s[i] & 15) == 0 && ((uintptr_t)segs.b[i] & 15) == 0;
    pdl_launch l;
    pdl_launch_config(&l, dim3(ctas, passes), dim3(nw * 32), smem, st);
    return (int)cudaLaunchKernelEx(&l.cfg, qmv_tc_kernel<BITS, G, NT>, segs, a->x, a->ldx, a->rows,
                                   a->K, win, a->sb_dtype, sbvec);
}

template <int BITS, int G>
static int qtc_go_nt(const qmv_segs &segs, const cuda_qmv_args *a, int win, int passes,
                     cudaStream_t st) {
    const int nt = (win + 7) / 8;
    if (nt == 1) return qtc_go<BITS, G, 1>(segs, a, win, passes, st);
    if (nt == 2) return qtc_go<BITS, G, 2>(segs, a, win, passes, st);
    if (nt == 3) return qtc_go<BITS, G, 3>(segs, a, win, passes, st);
    return qtc_go<BITS, G, 4>(segs, a, win, passes, st);
}

extern "C" int cuda_qmv_tc_supported(const cuda_qmv_args *a) {
    if (!a || (a->bits != 4 && a->bits != 8) ||
        (a->group != 32 && a->group != 64 && a->group != 128) || a->rows < 1 ||
        a->rows > CUDA_QMV_TC_MAX_ROWS || a->K < a->group || a->K % a->group || !a->x ||
        ((uintptr_t)a->x & 15) || a->ldx < a->K || a->ldx % 4 || a->n_segs < 1 ||
        a->n_segs > CUDA_QMV_MAX_SEGS || a->sb_dtype < CUDA_QSB_BF16 ||
        a->sb_dtype > CUDA_QSB_F32 || a->glu_out || a->norm_w || a->tiled)
        return 0;
    for (int i = 0; i < a->n_segs; i++)
        if (!a->w[i] || ((uintptr_t)a->w[i] & 15)) return 0;
    return 1;
}

extern "C" int cuda_qmv_tc(const cuda_qmv_args *a, int window, cudaStream_t st) {
    if (!cuda_qmv_tc_supported(a) || window < 0 || window > CUDA_QMV_TC_MAX_ROWS)
        return (int)cudaErrorInvalidValue;
    qmv_segs segs;
    if (qmv_segs_fill(a, &segs, false)) return (int)cudaErrorInvalidValue;
    /* window: x rows per pass over the weight (0: all rows in one pass) */
    const int win = window == 0 || window > a->rows ? a->rows : window;
    const int passes = (a->rows + win - 1) / win;
    if (a->bits == 4) {
        if (a->group == 32) return qtc_go_nt<4, 32>(segs, a, win, passes, st);
        if (a->group == 64) return qtc_go_nt<4, 64>(segs, a, win, passes, st);
        return qtc_go_nt<4, 128>(segs, a, win, passes, st);
    }
    if (a->group == 32) return qtc_go_nt<8, 32>(segs, a, win, passes, st);
    if (a->group == 64) return qtc_go_nt<8, 64>(segs, a, win, passes, st);
    return qtc_go_nt<8, 128>(segs, a, win, passes, st);
}
