/* Tensor-core quantized GEMV (qmv) for decode: 4-bit codes, group 64 or 128, 1..8 rows,
 * y[r, n] = sum_k x[r, k] * (s q + b)[n, k] (MLX affine weights, src/backend/qfmt/qfmt.h), fp32 x
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

#include "backend/cuda/qmv_frame.cuh"

/* Workspace, in uint4: x quads [QW_ROWS][S][8 (4 words hi, 4 lo)][8] (chunks 0..3, then 4
 * zero quads the lanes off the diagonal read: same 128-byte line, one L1 wavefront for the
 * warp's load), then the sums [S][QW_XW] fp32. S = qw_steps(K). */
__host__ __device__ constexpr size_t qm_quads(int K) { return (size_t)QW_ROWS * qw_steps(K) * 64; }

/* x row r (blockIdx.y, all QW_ROWS: rows >= `rows` only zero their sums), one thread per
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
    float f[8];
    /* no early return: the class sums below shuffle across the warp */
    const qw_prep_at at = qw_prep_x(x, ldx, rows, K, f);
    const int S = qw_steps(K), r = at.r, s = at.s, t = at.t, i = at.j;
    const bool in = at.in;
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
        xs[(size_t)s * QW_XW + r * C + t / CPG] = sum;
}

template <int G, int SBT, int NT>
__global__ void __launch_bounds__(QW_WARPS * 32, 2)
qmv_mma_kernel(qmv_segs segs, const uint4 *__restrict__ xq, const float *__restrict__ xs,
               int rows, int K, int ks) {
    __shared__ float red[QW_WARPS][NT * 4 * 32]; /* K-split partials, per lane */
    using F = qw_frame<G, NT>;
    /* one step of a load batch: D of the step's MMAs, scaled into acc per group */
    qw_run<G, NT, 4, false>(segs, xq, 64, rows, K, ks, red,
        [&](const F &f, const typename F::batch &bt, int u, int s, const uint4 *const *xl,
            float (*acc)[4]) {
        /* CH independent accumulator chains per n-tile (hi / lo x parts, then the two
         * pairs of a word): a chain of 16 dependent MMAs stalled on their latency */
        constexpr int CH = NT == 1 ? 4 : 2;
        float d[NT][CH][4];
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int c = 0; c < CH; c++)
                d[nt][c][0] = d[nt][c][1] = d[nt][c][2] = d[nt][c][3] = 0.f;
        const uint4 &qa = bt.qa[u][0], &qb = bt.qb[u][0];
        const uint32_t wda[4] = {qa.x, qa.y, qa.z, qa.w}, wdb[4] = {qb.x, qb.y, qb.z, qb.w};
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
        float sc[4], bi[4];
        f.template scales<SBT>(bt, u, sc, bi);
#pragma unroll
        for (int i = 0; i < 4; i++) bi[i] = fmaf(-128.f, sc[i], bi[i]); /* the 128 offset */
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const float2 sx =
                __ldg((const float2 *)(xs + (size_t)s * QW_XW + nt * 8 + 2 * f.t));
            acc[nt][0] = fmaf(sc[0], d[nt][0][0], fmaf(bi[0], sx.x, acc[nt][0]));
            acc[nt][1] = fmaf(sc[1], d[nt][0][1], fmaf(bi[1], sx.y, acc[nt][1]));
            acc[nt][2] = fmaf(sc[2], d[nt][0][2], fmaf(bi[2], sx.x, acc[nt][2]));
            acc[nt][3] = fmaf(sc[3], d[nt][0][3], fmaf(bi[3], sx.y, acc[nt][3]));
        }
    }, [] {}, qw_epi{nullptr, nullptr});
}

/* ==== Launch ==== */
/* K split rule: split until the grid holds g_qm_wps warps per SM, keeping >= g_qm_mb load
 * batches per warp (cuda_qmv_mma_set_split: the op bench's variants). */
static int g_qm_wps = 16, g_qm_mb = 2;
extern "C" void cuda_qmv_mma_set_split(int warps_per_sm, int min_batches) {
    g_qm_wps = warps_per_sm > 0 ? warps_per_sm : 16;
    g_qm_mb = min_batches > 0 ? min_batches : 2;
}

/* The prep and main launches of one configuration (qw_dispatch picks it). */
template <int G, int SBT, int NT> struct qm_launch {
    static int go(qmv_segs &segs, const cuda_qmv_args *a, cudaStream_t st) {
        uint4 *xq = (uint4 *)a->ws;
        float *xs = (float *)(xq + qm_quads(a->K));
        const int S = qw_steps(a->K);
        pdl_launch p;
        pdl_launch_config(&p, dim3((unsigned)((S * 16 + 255) / 256), QW_ROWS), dim3(256), 0, st);
        cudaError_t e =
            cudaLaunchKernelEx(&p.cfg, qm_prep_kernel<G>, xq, xs, a->x, a->ldx, a->rows, a->K);
        if (e != cudaSuccess) return (int)e;
        int grid;
        const int ks = qw_grid(segs, S, qw_frame<G, NT>::U, g_qm_wps, g_qm_mb, &grid);
        pdl_launch l;
        pdl_launch_config(&l, dim3(grid), dim3(QW_WARPS * 32), 0, st);
        return (int)cudaLaunchKernelEx(&l.cfg, qmv_mma_kernel<G, SBT, NT>, segs, (const uint4 *)xq,
                                       (const float *)xs, a->rows, a->K, ks);
    }
};

extern "C" int cuda_qmv_mma_supported(const cuda_qmv_args *a) { return qw_supported(a, false); }

extern "C" size_t cuda_qmv_mma_workspace_bytes(int K) {
    return qm_quads(K) * sizeof(uint4) + (size_t)qw_steps(K) * QW_XW * sizeof(float);
}

extern "C" int cuda_qmv_mma(const cuda_qmv_args *a, cudaStream_t st) {
    qmv_segs segs;
    const int rc = qw_args(a, false, a ? cuda_qmv_mma_workspace_bytes(a->K) : 0, &segs);
    return rc ? rc : qw_dispatch<qm_launch>(segs, a, st);
}
