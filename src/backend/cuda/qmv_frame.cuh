/* The frame the two tensor-core qmv kernels share (qmv_mma.cu: bf16 MMAs on fp32 x split
 * into hi + lo; qmv_i8.cu: int8 MMAs on x rounded to int8): which weight rows and steps a
 * warp owns, its load batches of packed codes and raw 16-bit scales, the B-source lane
 * mapping, the in-CTA K-split reduction and the output write, and the launch grid. Included
 * by those .cu files only.
 *
 * A step is 128 codes of K; a lane's chunk is 32 codes (one 16-byte load). A warp owns 16
 * weight rows (lane (g, t): rows g and g + 8, the MMA's A rows) and a contiguous range of
 * steps, whole load batches of U steps; lane t loads chunk t of both rows (BITS / 4 16-byte
 * loads: 8-bit codes take twice the bytes, and a batch half the steps). The MMA's B
 * columns are (x row, group class): C = 128 / G groups per step, an n-tile holds 8 / C x
 * rows, and a lane's D columns 2t, 2t + 1 are groups u * C + (2t) % C, u * C + (2t + 1) % C
 * of batch step u. */
#ifndef MLXCEL_BACKEND_CUDA_QMV_FRAME_CUH
#define MLXCEL_BACKEND_CUDA_QMV_FRAME_CUH

#include "backend/cuda/cuda_info.h"
#include "backend/cuda/qkern.cuh"
#include "backend/cuda/qtile.cuh"

#define QW_WARPS 8 /* warps per CTA */
#define QW_XW 32   /* per-step x columns (scales, sums): up to 4 n-tiles of 8 */
#define QW_ROWS 8  /* x rows the workspaces hold (CUDA_QMV_MAX_ROWS) */

__host__ __device__ constexpr int qw_steps(int K) { return (K + 127) / 128; }

/* Scale or bias j of a batch's raw 16-bit words (bf16 or f16) as fp32. */
template <int SBT>
__device__ __forceinline__ float qw_sb(const uint32_t *r, int j) {
    const uint32_t w = r[j >> 1];
    if (SBT == CUDA_QSB_BF16) return __uint_as_float((j & 1) ? w & 0xffff0000u : w << 16);
    return __half2float(__ushort_as_half((unsigned short)((j & 1) ? w >> 16 : w & 0xffffu)));
}

/* The NW words (2 * NW groups from group index i of a [N, NG] array) of one row: one 8- or
 * 16-byte load when vec (aligned, inside the row), else group by group (zeros past NG). */
template <int NW>
__device__ __forceinline__ void qw_sb_batch(uint32_t r[NW], const void *p, size_t row0, int i,
                                            int NG, bool vec) {
    const uint16_t *h = (const uint16_t *)p + row0 + i;
    if (vec) {
        if (NW == 1) {
            r[0] = __ldg((const uint32_t *)h);
        } else if (NW == 4) {
            const uint4 v = __ldg((const uint4 *)h);
            r[0] = v.x, r[1] = v.y, r[2 % NW] = v.z, r[3 % NW] = v.w;
        } else {
            const uint2 v = __ldg((const uint2 *)h);
            r[0] = v.x, r[1 % NW] = v.y;
        }
        return;
    }
#pragma unroll
    for (int j = 0; j < NW; j++) {
        const uint32_t lo = i + 2 * j < NG ? __ldg(h + 2 * j) : 0u;
        const uint32_t hi = i + 2 * j + 1 < NG ? __ldg(h + 2 * j + 1) : 0u;
        r[j] = lo | hi << 16;
    }
}

/* NW words of a tiled block (one aligned load). */
template <int NW> __device__ __forceinline__ void qw_sb_tile(uint32_t r[NW], const uint8_t *p) {
    if constexpr (NW == 4) {
        const uint4 v = __ldg((const uint4 *)p);
        r[0] = v.x, r[1 % NW] = v.y, r[2 % NW] = v.z, r[3 % NW] = v.w;
    } else if constexpr (NW == 2) {
        const uint2 v = __ldg((const uint2 *)p);
        r[0] = v.x, r[1 % NW] = v.y;
    } else {
        r[0] = __ldg((const uint32_t *)p);
    }
}

/* Prep kernels (256 threads a block, grid (ceil(S * 16 / 256), QW_ROWS)): the thread's x row
 * r = blockIdx.y, step s, chunk t and word j (codes 8j..8j+7 of the chunk), and f = those 8
 * values of x (zeros past K or `rows`). in: the step exists; threads past it must still
 * take part in the caller's shuffles. The 4 * (G / 32) threads of a group are adjacent. */
struct qw_prep_at {
    int r, s, t, j;
    bool in;
};
__device__ __forceinline__ qw_prep_at qw_prep_x(const float *x, long ldx, int rows, int K,
                                                float f[8]) {
    const int u = blockIdx.x * 256 + threadIdx.x;
    const qw_prep_at at = {(int)blockIdx.y, u >> 4, (u >> 2) & 3, u & 3, (u >> 4) < qw_steps(K)};
    const int k = at.s * 128 + 32 * at.t + 8 * at.j;
#pragma unroll
    for (int e = 0; e < 8; e++) f[e] = 0.f;
    if (at.in && at.r < rows && k < K) load8_any(x, 0, (size_t)at.r * ldx + k, f);
    return at;
}

/* One load batch: the packed chunks of U steps (LQ 16-byte quads a row; zeros past the
 * warp's range or K) and the raw scales / biases of their groups for rows a and b. */
template <int NW, int U, int LQ> struct qw_batch {
    uint4 qa[U][LQ], qb[U][LQ];
    uint32_t rs_a[NW], rb_a[NW], rs_b[NW], rb_b[NW];
};

/* The frame's optional epilogue: res (one segment, contiguous [rows, N]): res += y as y is
 * written (the residual add after o / down); pair (pair modes, shared [2][64]): x row 0's
 * outputs of the CTA's two row groups, for a GLU or RoPE epilogue after the walk. */
struct qw_epi {
    float *res;
    float *pair;
};

/* TL: the weight is in the tiled layout (qtile.cuh): a load batch is one block. */
template <int G, int NT, int BITS = 4, bool TL = false> struct qw_frame {
    static constexpr int C = 128 / G, CPG = G / 32, RPT = 8 / C;
    static constexpr int LQ = BITS / 4;         /* 16-byte loads per lane, row and step */
    static constexpr int U = BITS == 4 ? 4 : 2; /* steps per load batch: the same bytes */
    static constexpr int NW = U * C / 2;        /* 16-bit scale words per row and batch */
    static constexpr int TB = qt_geo<BITS, G>::TB; /* TL: bytes of a tiled block */
    static_assert(U == qt_geo<BITS, G>::U && LQ == qt_geo<BITS, G>::LQ &&
                      NW == qt_geo<BITS, G>::NW, "the frame's batch is a tiled block");
    using batch = qw_batch<NW, U, LQ>;
    qmv_seg sg;
    int lane, warp, g, t, n0, wk, S, NG, sbeg, send;
    int pbase; /* pair modes: the first row of this warp's row group */
    bool sb_vec;
    const uint8_t *wa, *wb;
    size_t sa, sb;

    __device__ __forceinline__ qw_frame(const qmv_segs &segs, int K, int ks, bool pair = false)
        : sg(qmv_pick(segs)) {
        lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
        n0 = (((int)blockIdx.x - sg.c0) * (QW_WARPS / ks) + warp / ks) * 16;
        pbase = 0;
        if (pair) { /* segs.pair: warps 0..3 and 4..7 are the two row groups */
            const bool g1 = warp >= QW_WARPS / 2;
            if (segs.pair == 1) { /* GLU: segment 0's rows, then segment 1's (ks 1) */
                sg = {g1 ? segs.w[1] : segs.w[0], g1 ? segs.s[1] : segs.s[0],
                      g1 ? segs.b[1] : segs.b[0], g1 ? segs.y[1] : segs.y[0],
                      g1 ? segs.ldy[1] : segs.ldy[0], g1 ? segs.N[1] : segs.N[0], 0};
                pbase = (int)blockIdx.x * 64;
            } else { /* RoPE: rows j and j + half of a head */
                const int half = segs.pair_half, rg = 64 / ks, b = (int)blockIdx.x - sg.c0;
                pbase = b / (half / rg) * 2 * half + (g1 ? half : 0) + b % (half / rg) * rg;
            }
            n0 = pbase + (warp & (QW_WARPS / 2 - 1)) / ks * 16;
        }
        wk = warp % ks, S = qw_steps(K), NG = K / G;
        /* whole load batches per warp: a batch's scales are one aligned load */
        const int per = ((S + ks - 1) / ks + U - 1) / U * U;
        sbeg = wk * per, send = min(S, sbeg + per);
        sb_vec = NG % (U * C) == 0;
        if constexpr (TL) { /* n0 % 16 == 0: the row tile's blocks; wb: this g's words */
            const uint8_t *rt = (const uint8_t *)sg.w + (size_t)(n0 / 16) * ((S + U - 1) / U) * TB;
            wa = rt + 16 * lane, wb = rt + 4096 + 4 * NW * g;
            sa = sb = 0;
            return;
        }
        /* rows past N are clamped for the loads and never written */
        const int na = min(n0 + g, sg.N - 1), nb = min(n0 + g + 8, sg.N - 1);
        wa = (const uint8_t *)sg.w + (size_t)na * (K * BITS / 8) + t * 16 * LQ;
        wb = (const uint8_t *)sg.w + (size_t)nb * (K * BITS / 8) + t * 16 * LQ;
        sa = (size_t)na * NG, sb = (size_t)nb * NG;
    }

    /* B source of n-tile nt for x quads laid out [x row][step][QPS] with the zero quads at
     * slot 4 + t of x row 0's: column g is x row nt * RPT + g / C, class g % C; chunk t is
     * in class t / CPG, and lanes off that diagonal read zeros. */
    __device__ __forceinline__ const uint4 *xsrc(const uint4 *xq, int nt, int rows,
                                                 int qps) const {
        const int br = nt * RPT + g / C;
        const bool on = g % C == t / CPG && br < rows;
        return on ? xq + (size_t)br * S * qps + t : xq + 4 + t;
    }

    __device__ __forceinline__ void load(batch &bt, int s0, int K) const {
        if constexpr (TL) load_tiled(bt, s0);
        else load_mlx(bt, s0, K);
    }

    /* whole blocks: the steps past send are another warp's (run() skips them) */
    __device__ __forceinline__ void load_tiled(batch &bt, int s0) const {
        const size_t o = (size_t)(s0 / U) * TB;
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int q = 0; q < LQ; q++) {
                bt.qa[u][q] = ldg_stream16(wa + o + (u * LQ + q) * 1024);
                bt.qb[u][q] = ldg_stream16(wa + o + (u * LQ + q) * 1024 + 512);
            }
        qw_sb_tile<NW>(bt.rs_a, wb + o);
        qw_sb_tile<NW>(bt.rb_a, wb + o + 32 * NW);
        qw_sb_tile<NW>(bt.rs_b, wb + o + 64 * NW);
        qw_sb_tile<NW>(bt.rb_b, wb + o + 96 * NW);
    }

    __device__ __forceinline__ void load_mlx(batch &bt, int s0, int K) const {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int s = s0 + u;
            if (s < send && s * 128 + 32 * t < K) {
#pragma unroll
                for (int q = 0; q < LQ; q++) {
                    bt.qa[u][q] = ldg_stream16(wa + (size_t)s * 64 * LQ + 16 * q);
                    bt.qb[u][q] = ldg_stream16(wb + (size_t)s * 64 * LQ + 16 * q);
                }
            } else {
#pragma unroll
                for (int q = 0; q < LQ; q++) bt.qa[u][q] = bt.qb[u][q] = make_uint4(0, 0, 0, 0);
            }
        }
        const bool vec = sb_vec && s0 + U <= S;
        qw_sb_batch<NW>(bt.rs_a, sg.s, sa, s0 * C, NG, vec);
        qw_sb_batch<NW>(bt.rb_a, sg.b, sa, s0 * C, NG, vec);
        qw_sb_batch<NW>(bt.rs_b, sg.s, sb, s0 * C, NG, vec);
        qw_sb_batch<NW>(bt.rb_b, sg.b, sb, s0 * C, NG, vec);
    }

    /* Scales (s) and biases (b) of this lane's D entries at batch step u, in D order:
     * (row a, column 2t), (a, 2t + 1), (row b, 2t), (b, 2t + 1). */
    template <int SBT>
    __device__ __forceinline__ void scales(const batch &bt, int u, float s[4],
                                           float b[4]) const {
        const int j0 = u * C, j1 = u * C + (C - 1);
        s[0] = qw_sb<SBT>(bt.rs_a, j0), s[1] = qw_sb<SBT>(bt.rs_a, j1);
        s[2] = qw_sb<SBT>(bt.rs_b, j0), s[3] = qw_sb<SBT>(bt.rs_b, j1);
        b[0] = qw_sb<SBT>(bt.rb_a, j0), b[1] = qw_sb<SBT>(bt.rb_a, j1);
        b[2] = qw_sb<SBT>(bt.rb_b, j0), b[3] = qw_sb<SBT>(bt.rb_b, j1);
    }

    /* fn(r, n, nt, i) for each output this lane writes (warp wk 0 after the K-split sum):
     * x row r, weight row n, from acc[nt][i] (+ acc[nt][i + 1] when C == 2: the two groups of
     * x row t). C == 1: columns 2t, 2t + 1 are x rows. */
    template <class Fn> __device__ __forceinline__ void each_out(int rows, Fn fn) const {
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int n = n0 + g + 8 * h;
                if (n >= sg.N) continue;
                if (C == 1) {
#pragma unroll
                    for (int e = 0; e < 2; e++)
                        if (nt * 8 + 2 * t + e < rows) fn(nt * 8 + 2 * t + e, n, nt, 2 * h + e);
                } else if (nt * RPT + t < rows) {
                    fn(nt * RPT + t, n, nt, 2 * h);
                }
            }
    }

    /* The ks warps on the same rows add their totals in a fixed order (reproducible), then
     * warp wk 0 writes y, and with e.res also res += y (rp: res's values, read before the
     * main loop), with e.pair x row 0's values into e.pair[row group][n - its first row]. */
    template <bool EPI, bool HL>
    __device__ __forceinline__ void finish(float (&acc)[NT][4], float (*red)[NT * 4 * 32],
                                           int rows, int ks, const qw_epi &e,
                                           const float (&rp)[NT][4]) const {
        if (ks > 1 && !ksplit_sum<NT, 4, 32>(acc, red, warp, wk, ks)) return;
        /* x row r's output v at weight row n; pre: res's value there */
        const auto put = [&](int r, int n, float v, float pre) {
            sg.y[(size_t)r * sg.ldy + n] = v;
            if (EPI && e.res) e.res[(size_t)r * sg.N + n] = pre + v;
            if (EPI && e.pair && r == 0) e.pair[(warp >= QW_WARPS / 2 ? 64 : 0) + n - pbase] = v;
        };
        if constexpr (HL) { /* x rows 0 and 1 are one row's hi and lo parts: y row 0 */
#pragma unroll
            for (int h = 0; h < 2; h++) { /* every lane: the shuffle */
                const int n = n0 + g + 8 * h;
                float v = acc[0][2 * h] + acc[0][2 * h + 1]; /* C 1: rows 0, 1; C 2: row t */
                if (C == 2) v += __shfl_down_sync(0xffffffffu, v, 1);
                if (t == 0 && n < sg.N) put(0, n, v, rp[0][2 * h]);
            }
            return;
        }
        each_out(rows, [&](int r, int n, int nt, int i) {
            put(r, n, C == 1 ? acc[nt][i] : acc[nt][i] + acc[nt][i + 1], rp[nt][i]);
        });
    }
};

/* QW_TIMELINE (bench/qi_timeline.cu only): lane 0 of each warp stamps %globaltimer at
 * event ev (0 entry, 1 after the PDL wait, 2 after pro(), 3 + i after load batch i (i < 11),
 * 15 after the K-split sum and the write, 14 the kernel's end) into qw_tl[launch kind]: a
 * Llama layer's q/k/v (3 segments), o, gate+up (2), down (K > 8192). */
#ifdef QW_TIMELINE
__device__ unsigned long long qw_tl[4][4096 * 16];
__device__ int qw_tl_sm[4][4096];
/* qmv_i8's in-CTA prep, passed as a kernel argument (no memory read on the chain): 1 makes
 * x up instead of loading it, 2 skips the prep (x stale: an upper bound of its cost) */
static int qw_diag_host;
#define QW_TL(ev)                                                                            \
    do {                                                                                     \
        if ((threadIdx.x & 31) == 0) {                                                       \
            const int k_ = segs.n == 3 ? 0 : segs.n == 2 ? 2 : K > 8192 ? 3 : 1;             \
            unsigned long long t_;                                                           \
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));                           \
            const int w_ = (int)blockIdx.x * QW_WARPS + (int)(threadIdx.x >> 5);             \
            qw_tl[k_][w_ * 16 + (ev)] = t_;                                                  \
            if ((ev) == 0) {                                                                 \
                int sm_;                                                                     \
                asm volatile("mov.u32 %0, %%smid;" : "=r"(sm_));                             \
                qw_tl_sm[k_][w_] = sm_;                                                      \
            }                                                                                \
        }                                                                                    \
    } while (0)
#else
#define QW_TL(ev) do {} while (0)
#endif

/* The kernels' walk: the warp's frame, its B sources (x quads, qps per x row and step),
 * the load batches (the first before pdl_wait: the prep kernel may still be writing x),
 * with EPI pro() by every thread right after the wait (an in-CTA x prep: it may hold
 * barriers) and the epilogue's res / pair (qw_epi; without EPI both are ignored), with HL
 * (NT 1, rows 2) x rows 0 and 1 summed into y row 0 (qmv_i8's 8-bit hi + lo x),
 * step(f, batch, u, s, xl, acc) per step of each batch, then the K-split sum and the write.
 * One batch in flight per warp: two (software pipelines of whole batches, session 10, and of
 * half batches, session 11) measured slower; warps hide the latency better here. */
template <int G, int NT, int BITS, bool EPI, bool HL = false, bool TL = false, class Step,
          class Pro>
__device__ __forceinline__ void qw_run(const qmv_segs &segs, const uint4 *xq, int qps, int rows,
                                       int K, int ks, float (*red)[NT * 4 * 32], Step step,
                                       Pro pro, const qw_epi &epi) {
    using F = qw_frame<G, NT, BITS, TL>;
    const F f(segs, K, ks, EPI && segs.pair);
    const uint4 *xl[NT];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) xl[nt] = f.xsrc(xq, nt, rows, qps);
    float acc[NT][4], rp[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[nt][i] = rp[nt][i] = 0.f;
    /* the steps of the batch at s0 that exist */
    const auto run = [&](const typename F::batch &bt, int s0) {
#pragma unroll
        for (int u = 0; u < F::U; u++) {
            if (s0 + u >= f.send) break; /* warp-uniform */
            step(f, bt, u, s0 + u, xl, acc);
        }
    };
    if constexpr (!EPI) { /* the walk as it was (registers: the peeled form below costs 8) */
        bool waited = false;
        for (int s0 = f.sbeg; s0 < f.send; s0 += F::U) {
            typename F::batch bt;
            f.load(bt, s0, K);
            if (!waited) {
                pdl_wait();
                pdl_trigger();
                waited = true;
            }
            run(bt, s0);
        }
        if (!waited) pdl_wait(); /* a warp with no steps still writes after the wait */
    } else { /* every thread waits and runs pro() at one place (its barriers) */
        typename F::batch bt;
        QW_TL(0);
        if (f.sbeg < f.send) f.load(bt, f.sbeg, K);
        pdl_wait(); /* x (or the residual) is the previous kernel's output */
        QW_TL(1);
        pdl_trigger();
        /* the residual's values now, under the weight loads: after the sums each is an L2
         * round trip at the end of the chain */
        if (epi.res && f.wk == 0)
            f.each_out(HL ? 1 : rows, [&](int r, int n, int nt, int i) {
                rp[nt][i] = epi.res[(size_t)r * f.sg.N + n];
            });
        pro();
        QW_TL(2);
        for (int s0 = f.sbeg; s0 < f.send; s0 += F::U) {
            if (s0 != f.sbeg) f.load(bt, s0, K);
            run(bt, s0);
            QW_TL(3 + min((s0 - f.sbeg) / F::U, 10));
        }
    }
    f.template finish<EPI, HL>(acc, red, rows, ks, epi, rp);
    if constexpr (EPI) QW_TL(15);
}

/* Host: the K split and the grid. Warps on the same rows split K until the grid holds wps
 * warps per SM, keeping >= mb load batches of u steps per warp; segs.cta0 is filled.
 * Returns ks. */
static inline int qw_grid_fill(qmv_segs &segs, int ks) {
    const int tiles_per_cta = QW_WARPS / ks;
    int grid = 0;
    for (int i = 0; i < segs.n; i++) {
        segs.cta0[i] = grid;
        grid += ((segs.N[i] + 15) / 16 + tiles_per_cta - 1) / tiles_per_cta;
    }
    return grid;
}
static inline int qw_grid(qmv_segs &segs, int S, int u, int wps, int mb, int *grid) {
    int tiles = 0;
    for (int i = 0; i < segs.n; i++) tiles += (segs.N[i] + 15) / 16;
    int ks = 1;
    while (ks < QW_WARPS && tiles * ks < wps * cuda_sm_count() && S >= mb * ks * u) ks *= 2;
    *grid = qw_grid_fill(segs, ks);
    return ks;
}

/* Host: the arguments both kernels take: bits 4 (and 8 where i8), group 64 / 128,
 * 1..CUDA_QMV_MAX_ROWS rows, x 16-byte aligned with ldx % 4 == 0, bf16 / f16 scales; a GLU
 * input (glu_out) where i8, with up 16-byte aligned and act 0..2. */
static inline int qw_supported(const cuda_qmv_args *a, bool i8) {
    if (a && a->tiled && !i8) return 0; /* qmv_mma reads the MLX layout */
    if (a && (a->res || a->x_inprep || a->x_ready || a->glu_next || a->rope_cs) && !i8) return 0;
    /* the epilogues are one-row (the kernels' one-row variants) */
    if (a && a->res && (a->n_segs != 1 || ((uintptr_t)a->res & 3) || a->glu_next || a->rows != 1))
        return 0;
    if (a && a->x_inprep &&
        (a->rows != 1 || a->glu_out || a->norm_y || a->x_ready))
        return 0;
    if (a && a->x_ready && (a->glu_out || a->norm_w)) return 0;
    /* RoPE pairs: rows j, j + D/2 in one CTA of <= 4 row tiles a group (D % 32 == 0) */
    if (a && a->rope_cs &&
        (a->rows != 1 || a->n_segs != 3 || a->res || a->glu_next || a->head_dim < 32 ||
         a->head_dim % 32 || a->N[0] % a->head_dim || a->N[1] % a->head_dim ||
         a->N[2] != a->N[1] || !a->rope_rows || !a->k_pool || !a->v_pool))
        return 0;
    if (a && a->glu_next &&
        (!a->x_inprep || a->rows != 1 || a->n_segs != 2 || a->N[0] != a->N[1] ||
         a->glu_next_act < 0 || a->glu_next_act > 2 || ((uintptr_t)a->glu_next & 15) ||
         (a->glu_next_q && a->N[0] % 64)))
        return 0;
    if (a && a->glu_out &&
        (!i8 || !a->glu_up || ((uintptr_t)a->glu_up & 15) || ((uintptr_t)a->glu_out & 15) ||
         a->glu_act < 0 || a->glu_act > 2))
        return 0;
    if (a && a->norm_w &&
        (!i8 || a->glu_out || !a->norm_x || ((uintptr_t)a->norm_x & 15) ||
         ((uintptr_t)a->norm_y & 15) || ((uintptr_t)a->norm_w & 15) ||
         (const float *)a->norm_x == a->x || a->norm_y == a->x))
        return 0;
    return a && (a->bits == 4 || (i8 && a->bits == 8)) && (a->group == 64 || a->group == 128) &&
           a->rows >= 1 &&
           a->rows <= CUDA_QMV_MAX_ROWS && a->K >= a->group && a->K % a->group == 0 && a->x &&
           ((uintptr_t)a->x & 15) == 0 && a->ldx >= a->K && a->ldx % 4 == 0 &&
           (a->sb_dtype == CUDA_QSB_BF16 || a->sb_dtype == CUDA_QSB_F16);
}

/* Host: a supported launch with its segments and a workspace of >= ws_bytes (16-byte
 * aligned) into segs; else cudaErrorInvalidValue. */
static inline int qw_args(const cuda_qmv_args *a, bool i8, size_t ws_bytes, qmv_segs *segs) {
    if (!qw_supported(a, i8) || a->n_segs < 1 || a->n_segs > CUDA_QMV_MAX_SEGS || !a->ws ||
        ((uintptr_t)a->ws & 15) || a->ws_bytes < ws_bytes || qmv_segs_fill(a, segs, true, i8))
        return (int)cudaErrorInvalidValue;
    return 0;
}

/* Host: L<G, SBT, NT>::go for the launch's group, scale dtype and n-tiles (8 / C x rows
 * each: g64 4, g128 8). */
template <template <int, int, int> class L, int G>
static int qw_dispatch_g(qmv_segs &segs, const cuda_qmv_args *a, cudaStream_t st) {
    if constexpr (G == 64) {
        if (a->rows > 4)
            return a->sb_dtype == CUDA_QSB_BF16 ? L<G, CUDA_QSB_BF16, 2>::go(segs, a, st)
                                                : L<G, CUDA_QSB_F16, 2>::go(segs, a, st);
    }
    return a->sb_dtype == CUDA_QSB_BF16 ? L<G, CUDA_QSB_BF16, 1>::go(segs, a, st)
                                        : L<G, CUDA_QSB_F16, 1>::go(segs, a, st);
}
template <template <int, int, int> class L>
static int qw_dispatch(qmv_segs &segs, const cuda_qmv_args *a, cudaStream_t st) {
    return a->group == 64 ? qw_dispatch_g<L, 64>(segs, a, st) : qw_dispatch_g<L, 128>(segs, a, st);
}

#endif
