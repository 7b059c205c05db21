/* Tensor-core quantized GEMV (qmv) for decode: 4-bit codes, group 64 or 128, 1..8 rows,
 * y[r, n] = sum_k x[r, k] * (s q + b)[n, k] (MLX affine weights, src/quant/quant.h), fp32 x
 * and y, bf16 or f16 scales / biases. Same contract as cuda_qmv (segments, ldy, workspace).
 *
 * Why: the CUDA-core qmv (qgemv.cu) spends a LOP3, an FADD and an FFMA per code and row and
 * is issue-bound (~2 TB/s at one row). Here a code pair costs one LOP3 (plus a shift per 4
 * codes) into exact bf16 integers 128 + q, and the multiply-adds go to mma.sync m16n8k16.
 *
 * Layout (a step is 128 codes of K; a lane's chunk is 32 codes = one 16-byte load):
 * - A warp owns 16 weight rows (lane (g, t): rows g and g + 8, the MMA's A rows) and a
 *   contiguous range of steps; lane t loads chunk t of the step from both rows, so the four
 *   lanes of a row read 64 contiguous bytes per load and a warp 1 KB per step.
 * - The MMA sums over all four chunks of a step, which may lie in two groups (g64) with two
 *   scales. The B columns keep them apart: column j of an n-tile is (x row j / C, class
 *   j % C), C = 128 / G groups per step, and lane (g', t') puts x into its B registers only
 *   when chunk t' belongs to class g' % C (others read a zero block). So D[n][j] is the sum
 *   over one group of one x row, and y += s * D + (b - 128 s) * sum(x) per group in fp32.
 *   An n-tile holds 8 / C x rows: one tile up to 4 rows (g64) or 8 (g128), two at g64 above.
 * - Word w of a chunk (codes c0..c7) gives the pairs (c0, c4), (c1, c5), (c2, c6), (c3, c7)
 *   by OR-ing nibbles into the mantissa of 128 (0x4300); pairs 0, 1 are the A registers of
 *   one MMA, pairs 2, 3 of the next (a sum over k does not care where each k sits as long as
 *   A and B agree).
 * - x: a prep kernel writes it once per launch as bf16 hi + lo (lo = x - hi rounded: ~16
 *   significant bits) in B-fragment order (one 16-byte load per lane, word and part), and
 *   the per-group sums of hi + lo, so the 128 offset cancels what the MMAs added.
 * - The ks warps of a CTA on the same rows split the steps and add their totals in shared
 *   memory in a fixed order (no atomics: reproducible).
 * - PDL: the first batch of weights, scales and biases is loaded before pdl_wait().
 * Dispatch (cuda_qmatmul.c, mma_ok): one-row launches of <= 4096 outputs by default. ncu at one
 * row (gate+up): half the CUDA-core kernel's instructions but 0.37 issued per scheduler, the
 * warps waiting on memory (long scoreboard ~4 cycles per instruction) with neither DRAM (34%)
 * nor L1 saturated: why it stays at ~2 TB/s is open (bench/results/2026-12-03-qmv-mma.md).
 * Tried: the weights and scales by cp.async into a per-warp ring of 2..3 load batches (4.5 KB
 * each, twice the bytes in flight at ~100 registers): slower at one row on every 8B shape but
 * lm_head (H200 q4g64, gate+up 36.5 / 38.7 against 33.6 us in registers), so not the limit. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_info.h"
#include "backend/cuda/qkern.cuh"

#define QM_WARPS 8 /* warps per CTA */
#define QM_U 4     /* steps per load batch */
#define QM_XW 32   /* sum columns per step: up to 4 n-tiles of 8 */
#define QM_ROWS 8  /* x rows the workspace holds (CUDA_QMV_MAX_ROWS) */

/* Workspace, in uint4: x quads [QM_ROWS][S][8 (4 words hi, 4 lo)][8] (chunks 0..3, then 4
 * zero quads the lanes off the diagonal read: same 128-byte line, one L1 wavefront for the
 * warp's load), then the sums [S][QM_XW] fp32. S = steps = ceil(K / 128). */
__host__ __device__ constexpr int qm_steps(int K) { return (K + 127) / 128; }
__host__ __device__ constexpr size_t qm_quads(int K) { return (size_t)QM_ROWS * qm_steps(K) * 64; }

/* x row r (blockIdx.y, all QM_ROWS: rows >= `rows` only zero their sums), one thread per
 * (step, chunk t, word i): 8 values -> a hi and a lo quad, and the class sums (class = the
 * chunks of one group: t / (G / 32)). Chunks past K are zeros (their weight lanes load zero
 * codes, which decode to 128). */
template <int G>
__global__ void __launch_bounds__(256)
qm_prep_kernel(uint4 *__restrict__ xq, float *__restrict__ xs, const float *__restrict__ x,
               long ldx, int rows, int K) {
    constexpr int C = 128 / G, CPG = G / 32;
    pdl_wait(); /* x is the previous kernel's output; the previous qmv may still read xq */
    pdl_trigger();
    const int S = qm_steps(K), r = blockIdx.y;
    const int u = blockIdx.x * 256 + threadIdx.x, s = u >> 4, t = (u >> 2) & 3, i = u & 3;
    /* no early return: the class sums below shuffle across the warp */
    const bool in = s < S;
    const int k = s * 128 + 32 * t + 8 * i;
    float f[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (in && r < rows && k < K) {
        const float *p = x + (size_t)r * ldx + k;
        const float4 f0 = *(const float4 *)p, f1 = *(const float4 *)(p + 4);
        f[0] = f0.x, f[1] = f0.y, f[2] = f0.z, f[3] = f0.w;
        f[4] = f1.x, f[5] = f1.y, f[6] = f1.z, f[7] = f1.w;
    }
    uint32_t h[4], o[4];
    float sum = 0.f;
#pragma unroll
    for (int e = 0; e < 4; e++) {
        h[e] = bf16x2_pack(f[e], f[e + 4]);
        const float ha = bf16_lo(h[e]), hb = bf16_hi(h[e]);
        o[e] = bf16x2_pack(f[e] - ha, f[e + 4] - hb); /* the differences are exact */
        sum += (ha + bf16_lo(o[e])) + (hb + bf16_hi(o[e]));
    }
    if (in && r < rows) {
        const size_t q = (((size_t)r * S + s) * 8 + i) * 8 + t;
        xq[q] = make_uint4(h[0], h[1], h[2], h[3]);
        xq[q + 32] = make_uint4(o[0], o[1], o[2], o[3]);
        if (r == 0) xq[q + 4] = xq[q + 36] = make_uint4(0, 0, 0, 0);
    }
    /* the 4 * CPG threads of a class are adjacent (t * 4 + i) */
#pragma unroll
    for (int m = 1; m < 4 * CPG; m <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, m);
    if (in && i == 0 && t % CPG == 0)
        xs[(size_t)s * QM_XW + r * C + t / CPG] = sum;
}

template <int G, int SBT, int NT>
__global__ void __launch_bounds__(QM_WARPS * 32, 2)
qmv_mma_kernel(qmv_segs segs, const uint4 *__restrict__ xq, const float *__restrict__ xs,
               int rows, int K, int ks) {
    constexpr int C = 128 / G, CPG = G / 32, RPT = 8 / C;
    __shared__ float red[QM_WARPS][NT * 4][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const qmv_seg sg = qmv_pick(segs);
    const int n0 = (((int)blockIdx.x - sg.c0) * (QM_WARPS / ks) + warp / ks) * 16;
    const int wk = warp % ks, S = qm_steps(K), NG = K / G;
    /* whole load batches per warp: the batch's scales are one aligned load */
    const int per = ((S + ks - 1) / ks + QM_U - 1) / QM_U * QM_U;
    const int sbeg = wk * per, send = min(S, sbeg + per);
    constexpr int NW = QM_U * C / 2; /* 16-bit scale words per row and batch */
    const bool sb_vec = NG % (QM_U * C) == 0;
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
        xl[nt] = on ? xq + (size_t)br * S * 64 + t : xq + 4 + t;
    }
    /* this lane's D columns 2t, 2t + 1: groups s * C + (2t) % C and s * C + (2t + 1) % C */
    float acc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
    bool waited = false;
    for (int s0 = sbeg; s0 < send; s0 += QM_U) {
        uint4 qa[QM_U], qb[QM_U];
#pragma unroll
        for (int u = 0; u < QM_U; u++) {
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
        const bool vec = sb_vec && s0 + QM_U <= S;
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
        for (int u = 0; u < QM_U; u++) {
            const int s = s0 + u;
            if (s >= send) break; /* warp-uniform */
            /* CH independent accumulator chains per n-tile (hi / lo x parts, then the two
             * pairs of a word): a chain of 16 dependent MMAs stalled on their latency */
            constexpr int CH = NT == 1 ? 4 : 2;
            float d[NT][CH][4];
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int c = 0; c < CH; c++)
                    d[nt][c][0] = d[nt][c][1] = d[nt][c][2] = d[nt][c][3] = 0.f;
            const uint32_t wda[4] = {qa[u].x, qa[u].y, qa[u].z, qa[u].w};
            const uint32_t wdb[4] = {qb[u].x, qb[u].y, qb[u].z, qb[u].w};
#pragma unroll
            for (int w = 0; w < 4; w++) {
                const uint32_t xa = wda[w], xb = wdb[w];
                const uint32_t a0 = q4_pair_bf16(xa), a1 = q4_pair_bf16(xb);
                const uint32_t a2 = q4_pair_bf16(xa >> 4), a3 = q4_pair_bf16(xb >> 4);
                const uint32_t c0 = q4_pair_bf16(xa >> 8), c1 = q4_pair_bf16(xb >> 8);
                const uint32_t c2 = q4_pair_bf16(xa >> 12), c3 = q4_pair_bf16(xb >> 12);
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    const uint4 *xp = xl[nt] + (size_t)s * 64 + w * 8;
                    const uint4 bh = __ldg(xp), bl = __ldg(xp + 32);
                    mma_bf16_16816(d[nt][0], a0, a1, a2, a3, bh.x, bh.y);
                    mma_bf16_16816(d[nt][1], a0, a1, a2, a3, bl.x, bl.y);
                    mma_bf16_16816(d[nt][2 % CH], c0, c1, c2, c3, bh.z, bh.w);
                    mma_bf16_16816(d[nt][3 % CH], c0, c1, c2, c3, bl.z, bl.w);
                }
            }
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    float v = d[nt][0][i] + d[nt][1][i];
                    if (CH == 4) v += d[nt][2 % CH][i] + d[nt][3 % CH][i];
                    d[nt][0][i] = v;
                }
            /* D: (row g, column 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1) */
            /* groups u * C + (2t) % C and u * C + (2t + 1) % C of the batch */
            const int j0 = u * C, j1 = u * C + (C - 1);
            const float sa0 = qm_sb<SBT>(rs_a, j0), sa1 = qm_sb<SBT>(rs_a, j1);
            const float sb0 = qm_sb<SBT>(rs_b, j0), sb1 = qm_sb<SBT>(rs_b, j1);
            const float ba0 = fmaf(-128.f, sa0, qm_sb<SBT>(rb_a, j0));
            const float ba1 = fmaf(-128.f, sa1, qm_sb<SBT>(rb_a, j1));
            const float bb0 = fmaf(-128.f, sb0, qm_sb<SBT>(rb_b, j0));
            const float bb1 = fmaf(-128.f, sb1, qm_sb<SBT>(rb_b, j1));
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const float2 sx = __ldg((const float2 *)(xs + (size_t)s * QM_XW + nt * 8 + 2 * t));
                acc[nt][0] = fmaf(sa0, d[nt][0][0], fmaf(ba0, sx.x, acc[nt][0]));
                acc[nt][1] = fmaf(sa1, d[nt][0][1], fmaf(ba1, sx.y, acc[nt][1]));
                acc[nt][2] = fmaf(sb0, d[nt][0][2], fmaf(bb0, sx.x, acc[nt][2]));
                acc[nt][3] = fmaf(sb1, d[nt][0][3], fmaf(bb1, sx.y, acc[nt][3]));
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
/* K split rule: split until the grid holds g_qm_wps warps per SM, keeping >= g_qm_mb load
 * batches per warp (cuda_qmv_mma_set_split: the op bench's variants). */
static int g_qm_wps = 16, g_qm_mb = 2;
extern "C" void cuda_qmv_mma_set_split(int warps_per_sm, int min_batches) {
    g_qm_wps = warps_per_sm > 0 ? warps_per_sm : 16;
    g_qm_mb = min_batches > 0 ? min_batches : 2;
}

template <int G, int SBT, int NT>
static int qm_go(qmv_segs &segs, const cuda_qmv_args *a, cudaStream_t st) {
    uint4 *xq = (uint4 *)a->ws;
    float *xs = (float *)(xq + qm_quads(a->K));
    const int S = qm_steps(a->K);
    pdl_launch p;
    pdl_launch_config(&p, dim3((unsigned)((S * 16 + 255) / 256), QM_ROWS), dim3(256), 0, st);
    cudaError_t e =
        cudaLaunchKernelEx(&p.cfg, qm_prep_kernel<G>, xq, xs, a->x, a->ldx, a->rows, a->K);
    if (e != cudaSuccess) return (int)e;
    /* warps on the same rows split K until the grid holds ~16 warps per SM (loads in flight),
     * keeping at least one load batch per warp */
    int tiles = 0;
    for (int i = 0; i < segs.n; i++) tiles += (segs.N[i] + 15) / 16;
    int ks = 1;
    while (ks < QM_WARPS && tiles * ks < g_qm_wps * cuda_sm_count() && S >= g_qm_mb * ks * QM_U)
        ks *= 2;
    const int tiles_per_cta = QM_WARPS / ks;
    int grid = 0;
    for (int i = 0; i < segs.n; i++) {
        segs.cta0[i] = grid;
        grid += ((segs.N[i] + 15) / 16 + tiles_per_cta - 1) / tiles_per_cta;
    }
    pdl_launch l;
    pdl_launch_config(&l, dim3(grid), dim3(QM_WARPS * 32), 0, st);
    return (int)cudaLaunchKernelEx(&l.cfg, qmv_mma_kernel<G, SBT, NT>, segs, (const uint4 *)xq,
                                   (const float *)xs, a->rows, a->K, ks);
}

template <int G>
static int qm_sbt(qmv_segs &segs, const cuda_qmv_args *a, cudaStream_t st) {
    /* n-tiles: 8 / C x rows each (g64: 4, g128: 8) */
    if constexpr (G == 64) {
        if (a->rows > 4)
            return a->sb_dtype == CUDA_QSB_BF16 ? qm_go<G, CUDA_QSB_BF16, 2>(segs, a, st)
                                                : qm_go<G, CUDA_QSB_F16, 2>(segs, a, st);
    }
    return a->sb_dtype == CUDA_QSB_BF16 ? qm_go<G, CUDA_QSB_BF16, 1>(segs, a, st)
                                        : qm_go<G, CUDA_QSB_F16, 1>(segs, a, st);
}

extern "C" int cuda_qmv_mma_supported(const cuda_qmv_args *a) {
    return a && a->bits == 4 && (a->group == 64 || a->group == 128) && a->rows >= 1 &&
           a->rows <= CUDA_QMV_MAX_ROWS && a->K >= a->group && a->K % a->group == 0 && a->x &&
           ((uintptr_t)a->x & 15) == 0 && a->ldx >= a->K && a->ldx % 4 == 0 &&
           (a->sb_dtype == CUDA_QSB_BF16 || a->sb_dtype == CUDA_QSB_F16);
}

extern "C" size_t cuda_qmv_mma_workspace_bytes(int K) {
    return qm_quads(K) * sizeof(uint4) + (size_t)qm_steps(K) * QM_XW * sizeof(float);
}

extern "C" int cuda_qmv_mma(const cuda_qmv_args *a, cudaStream_t st) {
    if (!cuda_qmv_mma_supported(a) || a->n_segs < 1 || a->n_segs > CUDA_QMV_MAX_SEGS || !a->ws ||
        ((uintptr_t)a->ws & 15) || a->ws_bytes < cuda_qmv_mma_workspace_bytes(a->K))
        return (int)cudaErrorInvalidValue;
    qmv_segs segs;
    if (qmv_segs_fill(a, &segs, true)) return (int)cudaErrorInvalidValue;
    return a->group == 64 ? qm_sbt<64>(segs, a, st) : qm_sbt<128>(segs, a, st);
}
