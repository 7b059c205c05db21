/* bf16 GEMV for decode: y[r, n] = sum_k x[r, k] * W[n, k] for 1..8 rows. One or two rows run
 * on the CUDA cores (below, "CUDA-core kernel"); 3..8 rows on the tensor cores: 
 *
 * Decode at small batch is a weight stream: every weight byte is read exactly once per call
 * for all rows, so the time floor is N*K*2 bytes over memory bandwidth. The arithmetic goes to
 * mma.sync m16n8k16 (bf16 in, fp32 accumulate): 16 weight rows are A, up to 8 activation rows
 * are B, so unpacking and FMAs no longer bound 8-row steps (the CUDA-core version reached 46%
 * of copy bandwidth at 8 rows against 81% at 1 row).
 *
 * Fragment trick: a lane loads 16 bytes (8 consecutive k) of weight rows g and g + 8
 * (g = lane / 4, t = lane % 4) and 8 consecutive k of activation row g. A sum over k does
 * not care which k sits in which MMA slot as long as A and B agree, so the 32 k of one
 * "k-tile" (4 lanes x 8) are fed to two MMAs with physical k 8t + {0..3} in the slots
 * {2t, 2t+1, 2t+8, 2t+9} of the first and 8t + {4..7} in those of the second. Every load is
 * a plain 16-byte vector load; no shuffles, no shared-memory staging of weights.
 *
 * Work split: a CTA owns 16 weight rows; its 8 warps take the k-tiles round-robin, each with
 * GEMV_KB k-tiles (2 x GEMV_KB 16-byte weight loads per lane) in flight; the 8 partial
 * 16 x 8 tiles are summed in shared memory in a fixed order (reproducible, no atomics).
 * x is read straight from global memory (L1/L2 resident). fp32 x is split into bf16 hi + lo
 * parts fed to two MMAs each, so the product keeps ~16 bits of x (as exact as the fp32 CUDA-core
 * kernel to ~1e-5 relative). A result depends only on its own x row and W, whatever the other
 * rows are.
 *
 * PDL: before pdl_wait() (weights are constant) the tensor-core kernel issues its first batch
 * of weight loads, so the HBM stream of the next matrix starts while the previous small kernel
 * finishes. With MLXCEL_GEMV_PREFETCH_KB > 0 each CTA of either kernel also asks L2 for the
 * start of its weight rows there (cuda_gemv_prefetch() bytes per CTA); off by default, as it
 * measured slower on the H200.
 *
 * Segments: up to CUDA_GEMV_MAX_SEGS weights sharing x and K (Q/K/V, gate/up) run as one
 * launch: the grid is the concatenation of each segment's CTAs. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_info.h"
#include "backend/cuda/cuda_kernels.cuh"
#include "backend/cuda/cuda_ops.h"

#define GEMV_WARPS 8  /* warps per CTA, splitting K */
#define GEMV_KB 4     /* k-tiles (32 k each) per load batch per warp */
#define GEMV_KT 32    /* k per tile: 4 lanes x 8 */

#define GEMV_RPW 4                  /* weight rows per warp (CUDA-core kernel) */
#define GEMV_U 4                    /* 256-element K steps per load batch (CUDA-core kernel) */
#define GEMV_STEP 256               /* elements per warp step: 32 lanes x 8 */
#define GEMV_SMEM_BUDGET (64 * 1024) /* x staging per CTA: 3 CTAs fit one SM */

/* A tile's segment: tiles (CTA-sized row blocks) [cta0[s], cta0[s + 1]) belong to segment s.
 * Compile-time indices only: a run-time index into the parameter struct would copy it to
 * local memory. */
__device__ __forceinline__ void gemv_segment(const cuda_gemv_segs &segs, int tile,
                                             const uint16_t *&W, void *&y, int &N, int &c0,
                                             int &seg) {
    W = segs.W[0];
    y = segs.y[0];
    N = segs.N[0];
    c0 = 0;
    seg = 0;
#pragma unroll
    for (int i = 1; i < CUDA_GEMV_MAX_SEGS; i++)
        if (i < segs.n && tile >= segs.cta0[i]) {
            W = segs.W[i];
            y = segs.y[i];
            N = segs.N[i];
            c0 = segs.cta0[i];
            seg = i;
        }
}

/* ==== x staging (cp.async, 16 bytes per copy) ==== */

/* ==== CUDA-core kernel: 1..2 rows ====
 * A warp owns GEMV_RPW consecutive weight rows and walks the whole K; each lane loads 16
 * bytes (8 bf16) per row per 256-element step, GEMV_U steps at a time, so RPW*U = 16
 * independent 16-byte loads are in flight per lane before the first use. x lives in shared
 * memory (staged by cp.async in its own dtype) and is
 * shared by all warps of the CTA; when R*K elements do not fit the budget, K is cut into
 * double-buffered chunks. Measured on the H200: ~80% of copy bandwidth on the 8B shapes at
 * one row, where the tensor-core kernel below reached ~50% (fewer bytes in flight per SM). */

/* Copy x[:, k0 : k0 + len] into xs [R, KC]; rows >= rows are zero-filled (src-size 0). */
template <int R, typename XT>
__device__ __forceinline__ void gemv_stage_x(XT *xs, const XT *x, int rows, int K, int KC,
                                             int k0, int len) {
    constexpr int EPC = 16 / sizeof(XT); /* elements per 16-byte copy */
    const int per_row = len / EPC;
    for (int p = threadIdx.x; p < R * per_row; p += blockDim.x) {
        int r = p / per_row, j = p - r * per_row;
        const XT *src = r < rows ? x + (size_t)r * K + k0 + j * EPC : x;
        cp_async16(xs + (size_t)r * KC + j * EPC, src, r < rows ? 16 : 0);
    }
}

/* 8 x values of row r at chunk offset kk, as fp32. */
__device__ __forceinline__ void gemv_core_x8(const float *xs, float f[8]) {
    float4 a = *(const float4 *)xs, b = *(const float4 *)(xs + 4);
    f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
    f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}
__device__ __forceinline__ void gemv_core_x8(const uint16_t *xs, float f[8]) {
    bf16x8_to_f32(*(const uint4 *)xs, f);
}

/* RMSNorm fused into the GEMV (NRM): y = inv * sum_k x[k] (w[k] + offset) W[n, k] with
 * inv = rsqrt(mean(x^2) + eps). The scalar leaves the sum: once x is staged, the CTA scales
 * it by (w + offset) in shared memory and sums x^2 in the same pass (the first weight batch
 * is in flight meanwhile), the main loop is the plain one, and the totals are scaled by inv
 * at the end. (Reading w and summing x^2 inside the main loop instead put an L1/L2 round
 * trip in every step: 67.5 against 59.5 us for the 8B gate+up.) The norm weight's first
 * pieces are loaded before the PDL wait (constants), so the prologue's chain after the wait is
 * x's staging and one block sum. CTA 0 also stores the normalized rows x (w + offset) inv in
 * f.xn for any other reader. */

#define GEMV_NW 2 /* norm-weight pieces a thread loads before the PDL wait */

/* This thread's first GEMV_NW pieces of the norm weight (constants: loaded before the wait). */
__device__ __forceinline__ void gemv_norm_w_early(const cuda_gemv_fuse &f, int K,
                                                  uint4 nw[GEMV_NW]) {
#pragma unroll
    for (int i = 0; i < GEMV_NW; i++) {
        const int k = (threadIdx.x + i * blockDim.x) * 8;
        nw[i] = k < K ? __ldg((const uint4 *)(f.norm_w + k)) : make_uint4(0, 0, 0, 0);
    }
}

/* x [R][KC] in shared memory becomes x (w + offset); inv[r] = rsqrt(mean(x[r]^2) + eps) in
 * every thread (block_sum: fixed order). red: blockDim.x / 32 floats. K % 8 == 0. nw: the
 * thread's first pieces of w (gemv_norm_w_early; R = 1 only), the rest read here. */
template <int R>
__device__ __forceinline__ void gemv_norm_x(float *xs, int KC, int K, const cuda_gemv_fuse &f,
                                            float *red, float inv[R], const uint4 nw[GEMV_NW]) {
    float ss[R];
#pragma unroll
    for (int r = 0; r < R; r++) ss[r] = 0.f;
    const auto piece = [&](int k, uint4 wv) { /* 8 k of every row: sum x^2, scale by w */
        float wf[8];
        bf16x8_to_f32(wv, wf);
#pragma unroll
        for (int r = 0; r < R; r++) {
            float4 *p = (float4 *)(xs + (size_t)r * KC + k);
            float4 a = p[0], b = p[1];
            ss[r] = fmaf(a.x, a.x, fmaf(a.y, a.y, fmaf(a.z, a.z, fmaf(a.w, a.w, ss[r]))));
            ss[r] = fmaf(b.x, b.x, fmaf(b.y, b.y, fmaf(b.z, b.z, fmaf(b.w, b.w, ss[r]))));
            a.x *= wf[0] + f.norm_offset, a.y *= wf[1] + f.norm_offset;
            a.z *= wf[2] + f.norm_offset, a.w *= wf[3] + f.norm_offset;
            b.x *= wf[4] + f.norm_offset, b.y *= wf[5] + f.norm_offset;
            b.z *= wf[6] + f.norm_offset, b.w *= wf[7] + f.norm_offset;
            p[0] = a, p[1] = b;
        }
    };
#pragma unroll
    for (int i = 0; i < GEMV_NW; i++) {
        const int k = (threadIdx.x + i * blockDim.x) * 8;
        if (k < K) piece(k, R == 1 ? nw[i] : __ldg((const uint4 *)(f.norm_w + k)));
    }
    for (int k = (threadIdx.x + GEMV_NW * blockDim.x) * 8; k < K; k += blockDim.x * 8)
        piece(k, __ldg((const uint4 *)(f.norm_w + k)));
#pragma unroll
    for (int r = 0; r < R; r++) {
        inv[r] = 1.0f / sqrtf(block_sum(ss[r], red) / (float)K + f.norm_eps);
        __syncthreads(); /* red is reused; after the last: the scaled x is visible to all */
    }
}

/* The RoPE + KV-write epilogue (f.rope_cs): seg 0 (q) and 1 (k) hold rotation pairs p, p + 2
 * (dims j, j + D/2 of one head), seg 2 (v) plain rows. Hkv = N of k / D. Lane (p * R + r) % 32
 * writes pair (or row) p of x row r, as the plain epilogue does; the arithmetic is
 * rope_kv_f32_kernel's. c, s: the pair's cos / sin and slot its KV row, loaded by that lane
 * before the main loop. */
template <int R>
__device__ __forceinline__ void gemv_rope_store(const cuda_gemv_fuse &f, int seg,
                                                const int nrow[GEMV_RPW], const bool ok[GEMV_RPW],
                                                const float tot[GEMV_RPW][R], float *y, int N,
                                                int Nk, int rows, int lane, float c, float s,
                                                int64_t slot) {
    const int D = f.head_dim, half = D / 2, Hkv = Nk / D;
#pragma unroll
    for (int p = 0; p < GEMV_RPW; p++)
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (lane != ((p * R + r) & 31) || r >= rows || !ok[p] || (seg < 2 && p >= 2)) continue;
            const int n = nrow[p], h = n / D, j = n - h * D;
            float v0 = tot[p][r], v1 = 0.f;
            if (seg < 2) { /* (j, j + half) */
                rope_rotate(tot[p][r], tot[p + 2][r], c, s, v0, v1);
                y[(size_t)r * N + n + half] = v1;
            }
            y[(size_t)r * N + n] = v0;
            if (seg == 0 || slot < 0) continue;
            const size_t o = ((size_t)slot * Hkv + h) * D + j;
            store1_any(seg == 1 ? f.k_pool : f.v_pool, f.pool_bf16, o, v0);
            if (seg == 1) store1_any(f.k_pool, f.pool_bf16, o + half, v1);
        }
}

/* ==== Kernel ==== */

template <int R, typename XT, bool NRM>
__global__ void __launch_bounds__(256, 2)
gemv_bf16_kernel(cuda_gemv_segs segs,           /* W [N, K] -> y [rows, N] per segment */
                 const XT *__restrict__ x,       /* [rows, K] */
                 int y_bf16, int rows, int K, int KC, int pf_row,
                 cuda_gemv_fuse f,               /* all zero for XT = bf16 */
                 int ks,                         /* warps per row group (K split) */
                 int early,                      /* first weight batch before the PDL wait */
                 int tiles) {                    /* row tiles (CTA-sized); > gridDim.x: each
                                                  * CTA walks tiles blockIdx.x + i * gridDim.x
                                                  * (one chunk of x only: the launcher's rule) */
    extern __shared__ uint4 gemv_smem[]; /* [2][R][KC] XT, or [R][KC] with one chunk */
    /* K-split partial totals, per warp; two sets used by turns, so a warp starting the next
     * tile cannot overwrite totals a part-0 warp still reads */
    __shared__ float gemv_red[2][8][GEMV_RPW * R];
    XT *xbuf = (XT *)gemv_smem;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int part = warp % ks, group = warp / ks; /* warps of a group share rows, split K */
    const bool glu = f.glu != NULL;
    const int nchunks = (K + KC - 1) / KC;
    const int batch = GEMV_STEP * GEMV_U;
    float inv[R];
    uint4 nw[GEMV_NW]; /* the norm weight's first pieces, loaded before the wait (one row: at
                        * two the registers would spill) */

    for (int tile = blockIdx.x, turn = 0; tile < tiles; tile += gridDim.x, turn++) {
        const bool first = turn == 0;
        const uint16_t *W;
        void *y;
        int N, c0, seg;
        gemv_segment(segs, tile, W, y, N, c0, seg);
        /* GLU: the grid covers N output units; a warp owns units u0, u0 + 1: its rows p = 0, 1
         * are gate rows u0 + p and p = 2, 3 the up rows of the same units */
        if (glu) { /* both segments span the whole grid */
            W = segs.W[0];
            y = segs.y[0];
            N = segs.N[0];
            c0 = 0;
        }
        const int n0 = ((tile - c0) * ((blockDim.x >> 5) / ks) + group) * (glu ? 2 : GEMV_RPW);
        /* RoPE (q, k segments): a row group owns the rotation pairs of two adjacent dims, rows
         * {2w, 2w + 1, 2w + D/2, 2w + 1 + D/2} of head h for the group's index h * D/4 + w
         * (n0 / 4), so the epilogue rotates in registers (after the K-split sum, in part 0) */
        const bool rope = f.rope_cs != NULL && seg < 2;
        const int rope_base = rope ? n0 / GEMV_RPW / (f.head_dim / 4) * f.head_dim +
                                         2 * (n0 / GEMV_RPW % (f.head_dim / 4))
                                   : 0;

        float acc[GEMV_RPW][R];
#pragma unroll
        for (int p = 0; p < GEMV_RPW; p++)
#pragma unroll
            for (int r = 0; r < R; r++) acc[p][r] = 0.f;

        /* Row pointers; rows past N are clamped (loads skipped below, never written). */
        const uint16_t *wrow[GEMV_RPW];
        bool ok[GEMV_RPW];
        int nrow[GEMV_RPW]; /* the weight / output row of each of the warp's rows */
#pragma unroll
        for (int p = 0; p < GEMV_RPW; p++) {
            const int n = glu    ? n0 + (p & 1)
                          : rope ? rope_base + (p & 1) + (p >= 2 ? f.head_dim / 2 : 0)
                                 : n0 + p;
            nrow[p] = n;
            ok[p] = n < N;
            wrow[p] = (glu && p >= 2 ? segs.W[1] : W) + (size_t)min(n, N - 1) * K;
        }
        if (lane < GEMV_RPW && pf_row > 0) {
            const uint16_t *mine = wrow[0];
            bool mine_ok = ok[0];
#pragma unroll
            for (int p = 1; p < GEMV_RPW; p++)
                if (lane == p) mine = wrow[p], mine_ok = ok[p];
            if (mine_ok) prefetch_l2(mine, (size_t)pf_row, 0, 1);
        }

        uint4 w[GEMV_U][GEMV_RPW];
        /* One batch: GEMV_U steps of 256 k of each of the warp's rows, at chunk offset
         * k0 + base. */
        auto load_batch = [&](int k0, int base, int len) {
#pragma unroll
            for (int u = 0; u < GEMV_U; u++) {
                const int kk = base + u * GEMV_STEP + lane * 8;
#pragma unroll
                for (int p = 0; p < GEMV_RPW; p++)
                    w[u][p] = (kk < len && ok[p]) ? ldg_stream16(wrow[p] + k0 + kk)
                                                  : make_uint4(0, 0, 0, 0);
            }
        };

        /* The first batch goes out before the PDL wait, while the previous kernel runs
         * (weights are constants; early, MLXCEL_GEMV_EARLY, the default), or else right after
         * x's staging is issued, so both latencies overlap. H200, B=1, two runs each: 8B
         * 214.7 / 213.9 tok/s early against 211.6 / 211.9, 1B 976.4 / 986.4 against 955.2 /
         * 951.4. (With one 8-warp CTA per SM, before the 128-register bound, early measured
         * slower: 213.8 against 221.9.) A warp of a K-split group takes every ks-th batch,
         * starting at its part. A later tile of a persistent CTA loads at once (x is staged). */
        bool preloaded = part * batch < min(KC, K);
        if (preloaded && (early || !first)) load_batch(0, part * batch, min(KC, K));
        if (first) {
            if (NRM && R == 1) gemv_norm_w_early(f, K, nw);
            pdl_wait(); /* x is the previous kernel's output */
            pdl_trigger();
            gemv_stage_x<R, XT>(xbuf, x, rows, K, KC, 0, min(KC, K));
            cp_async_commit();
            if (preloaded && !early) load_batch(0, part * batch, min(KC, K));
        }
        /* The epilogue's own reads go out now, under the weight loads, not after the sums
         * (each an L2 round trip on the chain there): the residual this lane adds to, or the
         * cos / sin and KV slot of its RoPE pair. Lane p * R + r writes (row p, x row r). */
        const int lp = lane / R, lr = lane - lp * R;
        const bool mine = lane < GEMV_RPW * R && lr < rows;
        float pa = 0.f, pb = 0.f; /* residual, or cos and sin */
        int64_t pslot = -1;
        if (mine && f.res && !y_bf16 && n0 + lp < N) pa = f.res[(size_t)lr * N + n0 + lp];
        if (mine && f.rope_cs) {
            pslot = f.rope_rows[lr];
            if (rope && lp < 2) { /* rows rope_base + lp: dims j, j + D/2 with j < D/2 */
                const int j = (rope_base + lp) % f.head_dim;
                pa = f.rope_cs[(size_t)lr * f.head_dim + 2 * j];
                pb = f.rope_cs[(size_t)lr * f.head_dim + 2 * j + 1];
            }
        }

        for (int c = 0; c < nchunks; c++) {
            const int k0 = c * KC, len = min(KC, K - k0);
            if (first || nchunks > 1) {
                /* Chunk c has landed for this thread; the barrier makes it visible to all
                 * and also says every warp is done with chunk c-1, whose buffer chunk c+1
                 * reuses. */
                cp_async_wait_all();
                __syncthreads();
                if (c + 1 < nchunks) {
                    gemv_stage_x<R, XT>(xbuf + (size_t)((c + 1) & 1) * R * KC, x, rows, K, KC,
                                        k0 + KC, min(KC, K - k0 - KC));
                    cp_async_commit();
                }
            }
            const XT *xs = xbuf + (size_t)(c & 1) * R * KC;
            if (NRM && first) /* one chunk (the launcher's rule): all of x is in xbuf */
                gemv_norm_x<R>((float *)xbuf, KC, K, f, &gemv_red[0][0][0], inv, nw);

            for (int base = part * batch; base < len; base += ks * batch) {
                /* All loads first: RPW*U independent 16-byte loads in flight per lane. */
                if (!preloaded) load_batch(k0, base, len);
                preloaded = false;
#pragma unroll
                for (int u = 0; u < GEMV_U; u++) {
                    const int kk = base + u * GEMV_STEP + lane * 8;
                    /* Skip, not multiply by zero: the stale tail of the buffer may hold NaN. */
                    if (kk < len) {
                        float wf[GEMV_RPW][8];
#pragma unroll
                        for (int p = 0; p < GEMV_RPW; p++) bf16x8_to_f32(w[u][p], wf[p]);
#pragma unroll
                        for (int r = 0; r < R; r++) {
                            float xf[8];
                            gemv_core_x8(xs + (size_t)r * KC + kk, xf);
#pragma unroll
                            for (int p = 0; p < GEMV_RPW; p++)
#pragma unroll
                                for (int e = 0; e < 8; e++)
                                    acc[p][r] = fmaf(wf[p][e], xf[e], acc[p][r]);
                        }
                    }
                }
            }
        }

        /* Butterfly sums leave every total in every lane; lane (p*R + r) % 32 writes it. The
         * selects use compile-time indices so acc stays in registers. */
        float tot[GEMV_RPW][R];
#pragma unroll
        for (int p = 0; p < GEMV_RPW; p++)
#pragma unroll
            for (int r = 0; r < R; r++) tot[p][r] = warp_sum(acc[p][r]);
        if (NRM && first && blockIdx.x == 0) { /* xbuf holds x (w + offset), all of it */
            const float *xw = (const float *)xbuf;
            for (int i = threadIdx.x; i < rows * K; i += blockDim.x) {
                const int r = i / K, k = i - r * K;
                f.xn[i] = xw[(size_t)r * KC + k] * (r == 0 ? inv[0] : inv[R - 1]); /* R <= 2 */
            }
        }
        if (ks > 1 && !ksplit_sum<GEMV_RPW, R>(tot, gemv_red[turn & 1], warp, part, ks))
            continue;
        if (NRM) {
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int p = 0; p < GEMV_RPW; p++) tot[p][r] *= inv[r];
        }
        if (f.rope_cs) { /* q, k rotated; k and v also to the KV pools */
            gemv_rope_store<R>(f, seg, nrow, ok, tot, (float *)y, N, segs.N[1], rows, lane, pa,
                               pb, pslot);
            continue;
        }
        if (glu) { /* gate and up rows as usual, and act(gate) * up */
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const int n = n0 + i;
                    if (lane == ((i * R + r) & 31) && r < rows && ok[i]) {
                        const size_t o = (size_t)r * N + n;
                        ((float *)y)[o] = tot[i][r];
                        ((float *)segs.y[1])[o] = tot[i + 2][r];
                        f.glu[o] = act_apply(tot[i][r], f.act) * tot[i + 2][r];
                    }
                }
            continue;
        }
#pragma unroll
        for (int p = 0; p < GEMV_RPW; p++)
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float v = tot[p][r];
                const int n = n0 + p;
                if (lane == ((p * R + r) & 31) && r < rows && n < N) {
                    if (y_bf16) {
                        ((uint16_t *)y)[(size_t)r * N + n] = (uint16_t)f32_to_bf16_bits(v);
                    } else {
                        ((float *)y)[(size_t)r * N + n] = v;
                        if (f.res) f.res[(size_t)r * N + n] = pa + v; /* the residual add */
                    }
                }
            }
    }
}

/* ==== Tensor-core kernel: 3..8 rows ==== */

/* 8 consecutive x values of one row as bf16 pairs: hi = bf16(x), lo = bf16(x - hi) for fp32
 * x (hi + lo carries ~16 mantissa bits: the product is as exact as an fp32-input GEMV to
 * ~1e-5), lo = 0 for bf16 x. */
template <typename XT>
__device__ __forceinline__ uint4 gemv_x8(const XT *x, size_t i, uint4 &lo);

template <>
__device__ __forceinline__ uint4 gemv_x8<float>(const float *x, size_t i, uint4 &lo) {
    float f[8], h[8], r[8];
    const float4 a = __ldg((const float4 *)(x + i)), b = __ldg((const float4 *)(x + i + 4));
    f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
    f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
    const uint4 hi = f32x8_to_bf16x8(f);
    bf16x8_to_f32(hi, h);
#pragma unroll
    for (int e = 0; e < 8; e++) r[e] = f[e] - h[e];
    lo = f32x8_to_bf16x8(r);
    return hi;
}

template <>
__device__ __forceinline__ uint4 gemv_x8<uint16_t>(const uint16_t *x, size_t i, uint4 &lo) {
    lo = make_uint4(0, 0, 0, 0);
    return __ldg((const uint4 *)(x + i));
}

/* ==== Kernel ==== */

template <typename XT>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
gemv_tc_kernel(cuda_gemv_segs segs,        /* W [N, K] -> y [rows, N] per segment */
               const XT *__restrict__ x,   /* [rows, K] */
               int y_bf16, int rows, int K, int pf_row) {
    __shared__ float red[GEMV_WARPS][32][4];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const uint16_t *W;
    void *y;
    int N, c0, seg;
    gemv_segment(segs, (int)blockIdx.x, W, y, N, c0, seg);
    (void)seg;
    const int n0 = ((int)blockIdx.x - c0) * 16;
    const bool ok0 = n0 + g < N, ok8 = n0 + g + 8 < N;
    const uint16_t *w0 = W + (size_t)(ok0 ? n0 + g : 0) * K + 8 * t;
    const uint16_t *w8 = W + (size_t)(ok8 ? n0 + g + 8 : 0) * K + 8 * t;
    const int n_kt = (K + GEMV_KT - 1) / GEMV_KT;
    const bool xrow = g < rows;
    const size_t xoff = (size_t)(xrow ? g : 0) * K + 8 * t;

    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    uint4 wa[GEMV_KB], wb[GEMV_KB];
    constexpr bool split = sizeof(XT) == 4; /* fp32 x: hi and lo parts */
    /* k-tiles of this warp: a contiguous slice [kt_lo, kt_hi), GEMV_KB at a time (a row's
     * loads of one batch are 32 * GEMV_KB * 2 contiguous bytes) */
    const int per = (n_kt + GEMV_WARPS - 1) / GEMV_WARPS;
    const int kt_lo = min(warp * per, n_kt), kt_hi = min(kt_lo + per, n_kt);
    auto load_batch = [&](int kt_first) {
#pragma unroll
        for (int j = 0; j < GEMV_KB; j++) {
            const int kt = kt_first + j;
            const int k = kt * GEMV_KT + 8 * t;
            const bool in = kt < kt_hi && k < K; /* K % 8 == 0: a lane's 8 k are all in or out */
            const size_t off = (size_t)kt * GEMV_KT;
            wa[j] = in && ok0 ? ldg_stream16(w0 + off) : make_uint4(0, 0, 0, 0);
            wb[j] = in && ok8 ? ldg_stream16(w8 + off) : make_uint4(0, 0, 0, 0);
        }
    };
    /* weights only before the dependency wait: this warp's share of the L2 prefetch (the start
     * of its k slice of each of the CTA's 16 rows, one lane per row), then its first batch */
    if (lane < 16 && n0 + lane < N && kt_lo < kt_hi && pf_row > 0) {
        const size_t slice = (size_t)min(kt_hi * GEMV_KT, K) * 2 - (size_t)kt_lo * GEMV_KT * 2;
        const size_t want = (size_t)(pf_row / GEMV_WARPS) & ~(size_t)15;
        prefetch_l2(W + (size_t)(n0 + lane) * K + (size_t)kt_lo * GEMV_KT,
                    want < slice ? want : slice, 0, 1);
    }
    if (kt_lo < kt_hi) load_batch(kt_lo);
    pdl_wait();
    pdl_trigger();
    for (int kt0 = kt_lo; kt0 < kt_hi; kt0 += GEMV_KB) {
        uint4 xv[GEMV_KB], xl[GEMV_KB];
#pragma unroll
        for (int j = 0; j < GEMV_KB; j++) {
            const int kt = kt0 + j, k = kt * GEMV_KT + 8 * t;
            if (xrow && kt < kt_hi && k < K) {
                xv[j] = gemv_x8<XT>(x, xoff + (size_t)kt * GEMV_KT, xl[j]);
            } else {
                xv[j] = make_uint4(0, 0, 0, 0);
                xl[j] = xv[j];
            }
        }
        uint4 ca[GEMV_KB], cb[GEMV_KB];
#pragma unroll
        for (int j = 0; j < GEMV_KB; j++) ca[j] = wa[j], cb[j] = wb[j];
        /* the next batch's weights go out before this batch's MMAs */
        if (kt0 + GEMV_KB < kt_hi) load_batch(kt0 + GEMV_KB);
#pragma unroll
        for (int j = 0; j < GEMV_KB; j++) {
            mma_bf16_16816(acc, ca[j].x, cb[j].x, ca[j].y, cb[j].y, xv[j].x, xv[j].y);
            mma_bf16_16816(acc, ca[j].z, cb[j].z, ca[j].w, cb[j].w, xv[j].z, xv[j].w);
            if (split) {
                mma_bf16_16816(acc, ca[j].x, cb[j].x, ca[j].y, cb[j].y, xl[j].x, xl[j].y);
                mma_bf16_16816(acc, ca[j].z, cb[j].z, ca[j].w, cb[j].w, xl[j].z, xl[j].w);
            }
        }
    }
    /* acc: [0], [1] = W row g, x rows 2t, 2t + 1; [2], [3] = W row g + 8, same x rows */
#pragma unroll
    for (int e = 0; e < 4; e++) red[warp][lane][e] = acc[e];
    __syncthreads();
    if (threadIdx.x < 128) {
        const int l = threadIdx.x >> 2, e = threadIdx.x & 3;
        float s = 0.f;
#pragma unroll
        for (int w = 0; w < GEMV_WARPS; w++) s += red[w][l][e];
        const int n = n0 + (l >> 2) + (e >= 2 ? 8 : 0), r = 2 * (l & 3) + (e & 1);
        if (n < N && r < rows) {
            if (y_bf16) ((uint16_t *)y)[(size_t)r * N + n] = (uint16_t)f32_to_bf16_bits(s);
            else ((float *)y)[(size_t)r * N + n] = s;
        }
    }
}

/* ==== Launchers ==== */

/* Prefetch bytes per weight row: the CTA budget over its rows, whole 16-byte units, at most
 * the row. */
static int gemv_pf_row(int rows_per_cta, int K) {
    long b = (long)cuda_gemv_prefetch() / rows_per_cta / 16 * 16;
    return (int)(b < 2L * K ? b : 2L * K);
}

template <int R, typename XT, bool NRM>
static int gemv_core_launch(cuda_gemv_segs segs, const XT *x, int y_bf16, int rows, int K,
                            cudaStream_t stream, const cuda_gemv_fuse *fuse = NULL) {
    /* per device (one thread per GPU under TP): SM count, and cudaFuncSetAttribute is per device */
    static int s_sm_count[CUDA_MAX_DEVICES], s_smem_set[CUDA_MAX_DEVICES];
    const int cd = cuda_cur_device();
    if (!s_sm_count[cd]) {
        int sms = 0;
        cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, cd);
        if (e != cudaSuccess) return (int)e;
        s_sm_count[cd] = sms;
    }
    cuda_gemv_fuse f = {};
    if (fuse) f = *fuse;
    /* One chunk when all of x fits the budget, else double-buffered chunks. */
    const size_t xs = sizeof(XT);
    const int k_round = (K + GEMV_STEP - 1) / GEMV_STEP * GEMV_STEP;
    int KC;
    size_t smem;
    if ((size_t)R * k_round * xs <= GEMV_SMEM_BUDGET) {
        KC = k_round;
        smem = (size_t)R * KC * xs;
    } else {
        if (NRM) return (int)cudaErrorInvalidValue; /* the xn store needs all of x staged */
        KC = (int)(GEMV_SMEM_BUDGET / (2 * R * xs)) / GEMV_STEP * GEMV_STEP;
        smem = 2 * (size_t)R * KC * xs;
    }
    if (!s_smem_set[cd]) {
        cudaError_t e = cudaFuncSetAttribute(gemv_bf16_kernel<R, XT, NRM>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             GEMV_SMEM_BUDGET);
        if (e != cudaSuccess) return (int)e;
        s_smem_set[cd] = 1;
    }
    /* 8 warps per CTA unless that leaves fewer than two CTAs per SM (N = 4096: 4 warps,
     * 256 CTAs): x staging is per CTA, so smaller CTAs cost L2 reads, not HBM bytes. */
    int n_total = 0;
    for (int i = 0; i < segs.n; i++) n_total += segs.N[i];
    int warps = 8;
    if ((n_total + 8 * GEMV_RPW - 1) / (8 * GEMV_RPW) < 2 * s_sm_count[cd]) warps = 4;
    /* K split: small matrices leave too few warps to keep enough loads in flight, and each
     * walks K in many serial batches; ks warps sharing a row group each take every ks-th
     * batch (the GLU epilogue keeps ks = 1: its grid counts two units a warp; the norm
     * prologue is CTA-wide, its scale and the RoPE epilogue apply after the K-split sum).
     * Doubled while the grid stays within one wave of two 8-warp CTAs a SM (16 row groups):
     * past it (8B o and down at 4, 512 CTAs) a second wave cost more than the deeper split
     * gained (H200, 8B bf16 B=1 with ks 2 for both and 1 for q/k/v: 242.7 / 242.9 against
     * 235.7 / 233.2 tok/s; the 1B's down keeps 4, 256 CTAs). */
    const int groups = (n_total + GEMV_RPW - 1) / GEMV_RPW;
    const int batches = (K + GEMV_STEP * GEMV_U - 1) / (GEMV_STEP * GEMV_U);
    int ks = cuda_gemv_ksplit();
    if (ks <= 0) {
        ks = 1;
        while (ks < 4 && groups * 2 * ks <= 16 * s_sm_count[cd] && batches >= 2 * ks) ks *= 2;
    }
    if (f.glu || ks > batches) ks = 1;
    if (ks > 1) warps = 8;
    const int rows_per_cta = warps / ks * GEMV_RPW;
    int grid = 0;
    if (f.glu) { /* N units of two weight rows each, two units per warp (ks = 1) */
        grid = (segs.N[0] + 2 * warps - 1) / (2 * warps);
        segs.cta0[0] = 0;
        segs.cta0[1] = grid; /* unused by the kernel in this mode; keep it out of range */
    } else {
        for (int i = 0; i < segs.n; i++) {
            segs.cta0[i] = grid;
            grid += (segs.N[i] + rows_per_cta - 1) / rows_per_cta;
        }
    }
    /* MLXCEL_GEMV_PERSIST: one wave of CTAs walking the tiles, x staged once per CTA (one
     * chunk of x only: a later tile would need chunk 0 staged again) */
    const int tiles = grid;
    if (cuda_gemv_persist() && KC >= K) {
        int per_sm = 0;
        cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &per_sm, gemv_bf16_kernel<R, XT, NRM>, warps * 32, smem);
        if (e != cudaSuccess) return (int)e;
        int cap = per_sm > 0 ? per_sm * s_sm_count[cd] : grid;
        if (cuda_gemv_persist() > 1 && cuda_gemv_persist() < cap) cap = cuda_gemv_persist();
        if (grid > cap) grid = cap;
    }
    pdl_launch l;
    pdl_launch_config(&l, dim3(grid), dim3(warps * 32), smem, stream);
    return (int)cudaLaunchKernelEx(&l.cfg, gemv_bf16_kernel<R, XT, NRM>, segs, x, y_bf16, rows,
                                   K, KC, gemv_pf_row(rows_per_cta, K), f, ks, cuda_gemv_early(),
                                   tiles);
}

template <typename XT>
static int gemv_launch(cuda_gemv_segs segs, const XT *x, int y_bf16, int rows, int K,
                       cudaStream_t stream) {
    int grid = 0;
    for (int i = 0; i < segs.n; i++) {
        segs.cta0[i] = grid;
        grid += (segs.N[i] + 15) / 16;
    }
    pdl_launch l;
    pdl_launch_config(&l, dim3(grid), dim3(GEMV_WARPS * 32), 0, stream);
    return (int)cudaLaunchKernelEx(&l.cfg, gemv_tc_kernel<XT>, segs, x, y_bf16, rows, K,
                                   gemv_pf_row(16, K));
}

/* The launch contract shared by both entry points: 1..max_rows rows, K % 8 == 0, x and every
 * weight 16-byte aligned, 1..CUDA_GEMV_MAX_SEGS non-empty segments. */
static bool gemv_args_ok(const cuda_gemv_segs *segs, const void *x, int rows, int max_rows, int K) {
    if (!segs || segs->n < 1 || segs->n > CUDA_GEMV_MAX_SEGS || rows < 1 || rows > max_rows ||
        K < 8 || K % 8 != 0 || !x || ((uintptr_t)x & 15))
        return false;
    for (int i = 0; i < segs->n; i++)
        if (!segs->W[i] || !segs->y[i] || segs->N[i] < 1 || ((uintptr_t)segs->W[i] & 15))
            return false;
    return true;
}

extern "C" int cuda_gemv_bf16_multi(const cuda_gemv_segs *segs, const void *x, int x_dtype,
                                    int y_dtype, int rows, int K, cudaStream_t stream) {
    if (!gemv_args_ok(segs, x, rows, 8, K) ||
        (x_dtype != CUDA_OPS_F32 && x_dtype != CUDA_OPS_BF16) ||
        (y_dtype != CUDA_OPS_F32 && y_dtype != CUDA_OPS_BF16))
        return (int)cudaErrorInvalidValue;
    const int y_bf16 = y_dtype == CUDA_OPS_BF16;
    const uint16_t *xb = (const uint16_t *)x;
    const float *xf = (const float *)x;
    const bool bf = x_dtype == CUDA_OPS_BF16;
    if (rows == 1)
        return bf ? gemv_core_launch<1, uint16_t, false>(*segs, xb, y_bf16, rows, K, stream)
                  : gemv_core_launch<1, float, false>(*segs, xf, y_bf16, rows, K, stream);
    if (rows == 2)
        return bf ? gemv_core_launch<2, uint16_t, false>(*segs, xb, y_bf16, rows, K, stream)
                  : gemv_core_launch<2, float, false>(*segs, xf, y_bf16, rows, K, stream);
    return bf ? gemv_launch<uint16_t>(*segs, xb, y_bf16, rows, K, stream)
              : gemv_launch<float>(*segs, xf, y_bf16, rows, K, stream);
}

extern "C" int cuda_gemv_bf16(const uint16_t *W, const void *x, int x_dtype, void *y, int y_dtype,
                              int rows, int N, int K, cudaStream_t stream) {
    cuda_gemv_segs segs = {};
    segs.n = 1;
    segs.W[0] = W;
    segs.y[0] = y;
    segs.N[0] = N;
    return cuda_gemv_bf16_multi(&segs, x, x_dtype, y_dtype, rows, K, stream);
}

extern "C" int cuda_gemv_bf16_fused(const cuda_gemv_segs *segs, const cuda_gemv_fuse *f,
                                    const float *x, int rows, int K, cudaStream_t stream) {
    if (!f || !gemv_args_ok(segs, x, rows, 2, K)) return (int)cudaErrorInvalidValue;
    if ((f->glu && (segs->n != 2 || segs->N[0] != segs->N[1] || f->res)) ||
        (f->res && segs->n != 1) || (f->norm_w && (!f->xn || (const float *)f->res == x)))
        return (int)cudaErrorInvalidValue;
    if (f->rope_cs && (segs->n != 3 || f->glu || f->res || f->head_dim < 8 || f->head_dim % 8 ||
                       segs->N[0] % f->head_dim || segs->N[1] % f->head_dim ||
                       segs->N[2] != segs->N[1] || !f->rope_rows || !f->k_pool || !f->v_pool))
        return (int)cudaErrorInvalidValue;
    if (f->norm_w && ((uintptr_t)f->norm_w & 15)) return (int)cudaErrorInvalidValue;
    if (f->norm_w)
        return rows == 1 ? gemv_core_launch<1, float, true>(*segs, x, 0, rows, K, stream, f)
                         : gemv_core_launch<2, float, true>(*segs, x, 0, rows, K, stream, f);
    return rows == 1 ? gemv_core_launch<1, float, false>(*segs, x, 0, rows, K, stream, f)
                     : gemv_core_launch<2, float, false>(*segs, x, 0, rows, K, stream, f);
}
