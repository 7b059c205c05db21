/* Paged decode attention, split-K (flash-decoding), one query token per sequence.
 *
 * Phase 1, grid (split, kv head, sequence), 4 warps: the CTA reads its kv head's share of
 * the sequence's KV once for all G = Hq / Hkv query heads that use it (GQA). Warp w takes
 * KV blocks w, w+4, ... of the split, copied (cp.async) through a ring of up to 3 chunk
 * stages in shared memory, so the next chunks load while one is computed (the stage count is
 * cut where the ring's shared memory would add a wave of CTAs). Within a 16-token block a
 * lane holds 8 dims (16 bytes) of one token, 16 lanes per token, a warp 2 tokens per step;
 * the tensor-core walk (TC, below) uses the MMA layout instead. Online softmax per block (one
 * rescale per block), in the log2 domain (q is pre-scaled by scale * log2 e, so exp is one
 * ex2). At the end the 4 warps merge in shared memory; a single split writes the output,
 * otherwise the splits of a (sequence, kv head) merge their normalised partial outputs by
 * log-sum-exp in a fixed order, one of two ways:
 * - cluster (S <= cuda_attn_cluster(), sm_90, and each warp walks at most one chunk): the S
 *   splits are one thread-block cluster; split r owns the r-th slice of the G x D outputs,
 *   and every split writes its log-sum-exps to all and its partial slice r into split r's
 *   shared memory as st.async stores, each counted on the receiver's mbarrier, so each CTA
 *   waits for its own bytes only, merges from its own shared memory and leaves (pulling with
 *   DSMEM loads took a second barrier, so that no CTA left while another read it; plain DSMEM
 *   stores behind one cluster barrier, whose release fence waited for every store, took
 *   ~0.7 us more: bench/attn_timeline.cu, session 18). H200, 8B shape, B=1, 512 tokens: 12.7
 *   against 13.4 us for the global merge; on longer walks a cluster's CTAs, placed together
 *   on fewer SMs, lost up to 25%.
 * - global: each split writes its partial and log-sum-exp to the workspace, and the last
 *   split to finish (one atomic counter per pair, left at zero for the next launch) merges.
 *   The merge used to be its own kernel: at B=1 on the 8B shape that launch cost ~6 us per
 *   layer, more than the merge's own work.
 * Both compute the same arithmetic in the same order (the same bits). The only atomic elects
 * the merging CTA: for a fixed split count the result is bitwise reproducible, and with
 * num_splits > 0 the splits of a sequence depend only on its own length (batch-invariant).
 *
 * PDL: the positions / lengths and the page table are host uploads (the step arena), so they
 * are read before pdl_wait(), and each warp asks L2 for its first blocks' K and V rows then
 * (a hint: only the newest token may still be in the writing, and a prefetch changes no
 * value). Callers must not produce page_table, seq_lens, pos or row_seq in the kernel
 * launched just before. With kv_settled (the engine's decode step: every row is its
 * sequence's only one, so only the newest key of a row is this step's), the tensor-core walk
 * copies its first chunks into shared memory before the wait, all but the newest key's row,
 * which it loads after (8B, B=1, bench/attn_timeline.cu: chunk 0 had landed 2.3 us after the
 * wait, q 1.5 us).
 * Template parameters: G (query heads per kv head), D (head_dim), TC (the walk on the
 * tensor cores, cuda_attn_tc()) and TY, the pools' cache type: 0 bf16; 1 another type, on
 * the CUDA cores each lane decoding its 8 values of a key / value row straight from the pool
 * (kv_codec.cuh, no ring and no L2 prefetch; the same arithmetic after the decode), on the
 * tensor cores q8_0 / q4_0 through the ring as raw blocks (QB below); 2 f16 on the tensor
 * cores (f16 MMAs: the bf16 walk's copies, q and P as f16 hi + lo). Instantiated for D in
 * {64, 128}, G in {1, 2, 4, 8}.
 *
 * The kernel works on 16-token chunks: a table block of block_size tokens (any multiple of
 * 16, so dense storage's one block of ctx tokens works too) is block_size / 16 chunks.
 * Row mode (pos != NULL): every row b is one query at position pos[b] of sequence
 * row_seq[b] (its page-table row), attending to [max(0, pos - window + 1), pos], and on a
 * chunked layer (chunk > 0) from the chunk start pos - pos % chunk at the earliest; this is the
 * engine's decode step, and also serves any row set correctly. Scores may be soft-capped. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_info.h"
#include "backend/cuda/cuda_kernels.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/kv_codec.cuh"

#define ATTN_WARPS 4
#define ATTN_BS 16 /* tokens per KV chunk (fixed: the loop is unrolled over it) */
#define ATTN_PF_CHUNKS 4 /* chunks per warp prefetched into L2 before pdl_wait */
#define ATTN_CLUSTER_MAX 16
#define ATTN_MAX_STAGES 3 /* chunk stages in flight per warp (cuda_attn_stages() caps it) */

/* ATTN_TIMELINE (bench/attn_timeline.cu only): thread 0 of each CTA stamps %globaltimer at
 * event ev into at_tl[CTA]: 0 entry, 1 after the PDL wait, 2 q's fragments ready (TC walk),
 * 3 the first chunk landed, 4 the walk done, 5 the warps' states written, 6 the cluster
 * started, 7 the splits' partials in, 8 written. AT_TL_DEP first waits for the value dep. */
#ifdef ATTN_TIMELINE
__device__ unsigned long long at_tl[1024][10];
#define AT_TL(ev)                                                                            \
    do {                                                                                     \
        if (threadIdx.x == 0) {                                                              \
            unsigned long long t_;                                                           \
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_)::"memory");                 \
            at_tl[blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)][ev] = t_;  \
        }                                                                                    \
    } while (0)
#define AT_TL_DEP(ev, dep)                                                                   \
    do {                                                                                     \
        asm volatile("" ::"r"(dep));                                                         \
        AT_TL(ev);                                                                           \
    } while (0)
#else
#define AT_TL(ev) do {} while (0)
#define AT_TL_DEP(ev, dep) do {} while (0)
#endif

/* The merge weights c_s = exp2(lse_s - max) / sum_s' exp2(lse_s' - max) of the G heads (in
 * place over lse [G][S]); every thread of the CTA calls it. Warp w takes heads w, w + 4, ..:
 * lane i the splits i, i + 32, .. (in that order), then the warp's max and sum by shuffles,
 * the sum taken from lane 0 (a fixed order: reproducible). Serially, one thread a head, it
 * was ~2,300 cycles at 16 splits, on the chain of every B=1 launch (ncu, session 15). */
template <int G>
__device__ __forceinline__ void attn_merge_weights(float *c_all, int S) {
    constexpr int PER = CUDA_ATTN_MAX_SPLITS / 32; /* splits a lane */
    const int lane = threadIdx.x & 31;
    for (int g = threadIdx.x >> 5; g < G; g += ATTN_WARPS) {
        float *c = c_all + g * S, v[PER], M = -INFINITY, W = 0.f;
#pragma unroll
        for (int i = 0; i < PER; i++) {
            v[i] = lane + 32 * i < S ? c[lane + 32 * i] : -INFINITY;
            M = fmaxf(M, v[i]);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
#pragma unroll
        for (int i = 0; i < PER; i++) {
            v[i] = M == -INFINITY || v[i] == -INFINITY ? 0.f : exp2f(v[i] - M);
            W += v[i];
        }
        W = __shfl_sync(0xffffffffu, warp_sum(W), 0);
        const float inv = W > 0.f ? 1.f / W : 0.f;
#pragma unroll
        for (int i = 0; i < PER; i++)
            if (lane + 32 * i < S) c[lane + 32 * i] = v[i] * inv;
    }
}

__device__ __forceinline__ void attn_store(void *o, int o_bf16, size_t i, float v) {
    if (o_bf16)
        ((uint16_t *)o)[i] = (uint16_t)f32_to_bf16_bits(v);
    else
        ((float *)o)[i] = v;
}

/* ==== Tensor-core walk (TC: MLXCEL_ATTN_TC) ====
 * The FA2 layout (attn_flash.cu) with the kv head's G query heads as the MMA rows: row g < G
 * holds head g's q rounded to bf16 (hi) and row g + 8 the rest (q - hi, rounded), so S = hi K^T
 * + lo K^T keeps ~16 bits of q; P goes in as hi and lo rows the same way, so the result keeps
 * the CUDA-core walk's precision (K and V are bf16 already). Per 16-token chunk: 2 x D/16
 * MMAs for S and D/8 for O, against ~1,100 instructions a lane on the CUDA cores. K and V
 * chunks go through the warp's ring as [16][D + 8] bf16 rows (cp.async; the 8 pad elements
 * put ldmatrix rows on distinct banks), K read as B fragments by ldmatrix, V by
 * ldmatrix.trans. Lane (g, t) keeps head g's running max and sum over its keys and
 * O[g][8 dn + 2t + {0, 1}]; at the end it writes the warp's state as the CUDA-core walk does
 * (wm, wl, wacc [G][D]: max, sum, unnormalised output). */
template <int D> __host__ __device__ constexpr int attn_tc_ld() { return D + 8; }

/* QB (q8_0 / q4_0 pools on the tensor-core walk): a stage holds a chunk's raw K rows then its
 * V rows, each with room for a q8_0 head (34 bytes a 32-value block); after it lands the warp
 * decodes it into one bf16 tile pair of the blocks' integers (exact in bf16) and the blocks'
 * scales as floats, which the walk applies in fp32: to each 32-dim block's partial scores, and
 * to P once per 32-dim block of V. */
__host__ __device__ constexpr int attn_qb_row(int D) { return 34 * (D / 32); }
/* Bytes of one warp's ring of nst stages: the CUDA-core walk's (unpadded rows), the
 * tensor-core walk's (padded rows), QB's (raw stages + the decoded tiles and scales). */
__host__ __device__ constexpr size_t attn_warp_ring(int D, int nst, bool tc, int ty) {
    return ty == 1 && !tc ? 0
           : ty == 1      ? (size_t)nst * 2 * ATTN_BS * attn_qb_row(D) +
                      (size_t)2 * ATTN_BS * (D + 8) * 2 + (size_t)2 * ATTN_BS * (D / 32) * 4
                     : (size_t)nst * 2 * ATTN_BS * (tc ? D + 8 : D) * sizeof(uint16_t);
}

/* QB: copy one pool's 16 raw rows of a chunk (rows of WPR words of CW bytes) into dst. The
 * loops have constant trip counts so that they unroll (every load in flight at once). */
template <int WPR, int CW>
__device__ __forceinline__ void attn_qb_copy(uint8_t *dst, const uint8_t *pool, size_t phys,
                                             int Hkv, int h, int tok0, int len, int start) {
    constexpr int HB = WPR * CW, N = ATTN_BS * WPR;
#pragma unroll
    for (int k = 0; k < (N + 31) / 32; k++) {
        const int p = (threadIdx.x & 31) + 32 * k;
        if (N % 32 && p >= N) break;
        const int r = p / WPR, c = (p % WPR) * CW, tk = tok0 + r;
        const bool ok = tk < len && tk >= start; /* else zeros (a valid address) */
        const uint8_t *src = pool + (ok ? ((phys * ATTN_BS + r) * Hkv + h) * HB + c : 0);
        if constexpr (CW == 8) cp_async8(dst + r * HB + c, src, ok ? 8 : 0);
        else cp_async4(dst + r * HB + c, src, ok ? 4 : 0);
    }
}

/* QB: decode one pool's staged chunk of TYPE into the tile's integers and scales. */
template <int D, int TYPE>
__device__ __forceinline__ void attn_qb_decode(const uint8_t *src, uint16_t *tile,
                                               float *scales) {
    constexpr int LD = attn_tc_ld<D>(), NB = D / 32, BB = TYPE == CUDA_KV_Q8_0 ? 34 : 18;
    constexpr int HB = NB * BB, NS = ATTN_BS * NB;
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int k = 0; k < ATTN_BS * (D / 8) / 32; k++) {
        const int i = lane + 32 * k, r = i / (D / 8), c = (i % (D / 8)) * 8;
        float q[8];
        kv_ints8(src + r * HB + (c >> 5) * BB, TYPE, c & 31, q);
        *(uint4 *)(tile + r * LD + c) = make_uint4(cvt_bf16x2(q[0], q[1]), cvt_bf16x2(q[2], q[3]),
                                                   cvt_bf16x2(q[4], q[5]), cvt_bf16x2(q[6], q[7]));
    }
#pragma unroll
    for (int k = 0; k < (NS + 31) / 32; k++) {
        const int i = lane + 32 * k;
        if (NS % 32 == 0 || i < NS) scales[i] = kv_scale(src + (i / NB) * HB + (i % NB) * BB);
    }
}
template <int D>
__device__ __forceinline__ void attn_qb_decode(const uint8_t *src, int type, uint16_t *tile,
                                               float *scales) {
    if (type == CUDA_KV_Q8_0) attn_qb_decode<D, CUDA_KV_Q8_0>(src, tile, scales);
    else attn_qb_decode<D, CUDA_KV_Q4_0>(src, tile, scales);
}

/* With nst stages in the ring (1..3): this thread's copies of the oldest pending chunk are
 * done (at most nst - 1 later groups still pending). */
__device__ __forceinline__ void attn_wait_chunk(int nst) {
    if (nst == 3) cp_async_wait<2>();
    else if (nst == 2) cp_async_wait<1>();
    else cp_async_wait<0>();
}

/* (attn_pk / attn_rest / attn_mma, the MMA element type: cuda_kernels.cuh) */
/* TY: 0 bf16 pools, 1 q8_0 / q4_0 (QB), 2 f16 */
template <int G, int D, int TY, class PhysOf, class Deps>
__device__ __forceinline__ void attn_tc_walk(const void *q, int q_f32, const uint16_t *k_cache,
                                             const uint16_t *v_cache, int kt, int vt, int b,
                                             int h, int Hkv, int blk_begin, int blk_end, int len,
                                             int start, float qscale, float cap2, int nst,
                                             int settled, PhysOf chunk_phys, Deps deps,
                                             uint16_t *ring, float *wm, float *wl, float *wacc) {
    constexpr int LD = attn_tc_ld<D>(), KS = D / 16, DN = D / 8, CH = ATTN_BS * LD, NB = D / 32;
    static_assert(G <= 8 && KS % 2 == 0 && DN % 2 == 0, "tensor-core walk shape");
    constexpr bool QB = TY == 1, FH = TY == 2;
    static_assert(!QB || D % 32 == 0, "a 32-value block per 2 k-steps");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int Hq = Hkv * G;
    /* QB: the stages, then the decoded K / V tiles and their scales [16][NB] each */
    constexpr int QST = 2 * ATTN_BS * attn_qb_row(D), QCW = D % 128 == 0 ? 8 : 4;
    uint16_t *const qtile = (uint16_t *)((uint8_t *)ring + (size_t)nst * QST);
    float *const dks = (float *)(qtile + 2 * CH), *const dvs = dks + ATTN_BS * NB;

    int it_in = 0; /* chunks copied so far (this warp's order) */
    /* The warp's chunk it_in into stage it_in % nst. Before the wait (pre) the newest key's
     * row is left out: the previous launch may still be writing it (fetched after the wait). */
    const auto issue = [&](bool pre) {
        const int bi = blk_begin + warp + ATTN_WARPS * it_in;
        if (QB && bi < blk_end) { /* (never pre: QB walks are not settled) */
            const size_t phys = chunk_phys(it_in);
            uint8_t *st = (uint8_t *)ring + (size_t)(it_in % nst) * QST;
            /* head bytes: q8_0 17 words of 8 (D 128) or 4 (D 64) bytes, q4_0 9 */
#pragma unroll
            for (int kv = 0; kv < 2; kv++) {
                const uint8_t *pool = (const uint8_t *)(kv ? v_cache : k_cache);
                uint8_t *dst = st + kv * (QST / 2);
                if ((kv ? vt : kt) == CUDA_KV_Q8_0)
                    attn_qb_copy<17, QCW>(dst, pool, phys, Hkv, h, bi * ATTN_BS, len, start);
                else
                    attn_qb_copy<9, QCW>(dst, pool, phys, Hkv, h, bi * ATTN_BS, len, start);
            }
        } else if (bi < blk_end) {
            const size_t phys = chunk_phys(it_in);
            uint16_t *sk = ring + (size_t)(it_in % nst) * 2 * CH, *sv = sk + CH;
#pragma unroll
            for (int p = lane; p < ATTN_BS * (D / 8); p += 32) {
                const int r = p / (D / 8), c = (p % (D / 8)) * 8, tk = bi * ATTN_BS + r;
                if (pre && tk == len - 1) continue;
                const bool ok = tk < len && tk >= start; /* else zeros (a valid address) */
                const size_t off = ok ? ((phys * ATTN_BS + r) * Hkv + h) * D + c : 0;
                cp_async16(sk + r * LD + c, k_cache + off, ok ? 16 : 0);
                cp_async16(sv + r * LD + c, v_cache + off, ok ? 16 : 0);
            }
        }
        cp_async_commit(); /* empty past the end: the group count stays uniform */
        it_in++;
    };
    /* settled (every key but the newest was written before the previous launch): the ring's
     * first chunks are copied while that launch still runs, so the walk waits on q only */
    if (settled)
        for (int i = 0; i < nst; i++) issue(true);
    deps();
    /* ... and the newest key's K / V row, if one of those chunks holds it: loaded here, stored
     * into the ring after q's loads are issued (its cp.async was never issued: no race) */
    const int bn = (len - 1) / ATTN_BS, itn = (bn - blk_begin - warp) / ATTN_WARPS;
    uint4 fixv = make_uint4(0, 0, 0, 0);
    uint16_t *fixp = NULL;
    if (!QB && settled && bn >= blk_begin + warp && bn < blk_end &&
        (bn - blk_begin - warp) % ATTN_WARPS == 0 && itn < nst) { /* warp-uniform */
        const size_t phys = chunk_phys(itn); /* itn < nst <= 3: no refetch */
        const int r = (len - 1) % ATTN_BS, kv = lane / (D / 8), c = (lane % (D / 8)) * 8;
        if (lane < 2 * (D / 8)) {
            fixv = *(const uint4 *)((kv ? v_cache : k_cache) +
                                    ((phys * ATTN_BS + r) * Hkv + h) * D + c);
            fixp = ring + (size_t)itn * 2 * CH + kv * CH + r * LD + c;
        }
    }

    /* A fragments of q: {row g, row g + 8} x {dims 16 ks + 2t + (0, 1), + 8}. Every load is
     * issued before the first use (at B=1 a launch is a latency chain: waits add up). */
    float2 qv[KS][2];
#pragma unroll
    for (int ks = 0; ks < KS; ks++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const size_t qo = ((size_t)b * Hq + h * G + (g < G ? g : 0)) * D + ks * 16 +
                              half * 8 + 2 * t;
            if (q_f32) {
                qv[ks][half] = *(const float2 *)((const float *)q + qo);
            } else {
                const uint32_t u = *(const uint32_t *)((const uint16_t *)q + qo);
                qv[ks][half] = make_float2(bf16_lo(u), bf16_hi(u));
            }
        }
    /* FH: head g's q times 2^-ex (max |q| in [0.5, 1): no f16 overflow, and hi + lo keep
     * ~22 bits of the largest), its scores times 2^ex after the MMAs (exact scalings) */
    float qdiv = 1.f, qmul = 1.f;
    if constexpr (FH) {
        float mx = 0.f;
#pragma unroll
        for (int ks = 0; ks < KS; ks++)
#pragma unroll
            for (int half = 0; half < 2; half++)
                mx = fmaxf(mx, fmaxf(fabsf(qv[ks][half].x), fabsf(qv[ks][half].y)) * qscale);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const int ex = attn_q_exp(mx);
        qdiv = ldexpf(1.f, -ex), qmul = ldexpf(1.f, ex);
    }
    uint32_t qa[KS][4];
#pragma unroll
    for (int ks = 0; ks < KS; ks++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const float x0 = g < G ? qv[ks][half].x * qscale * qdiv : 0.f;
            const float x1 = g < G ? qv[ks][half].y * qscale * qdiv : 0.f;
            const uint32_t hi = attn_pk<FH>(x0, x1);
            qa[ks][2 * half] = hi;
            qa[ks][2 * half + 1] = attn_pk<FH>(attn_rest<FH>(x0, hi, 0), attn_rest<FH>(x1, hi, 1));
        }
    AT_TL_DEP(2, qa[0][0]);
    if (fixp) *(uint4 *)fixp = fixv;
    if (!settled)
        for (int i = 0; i < nst; i++) issue(false);

    float o[DN][4];
#pragma unroll
    for (int i = 0; i < DN; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m = -INFINITY, l = 0.f;

    /* chunk it is in stage it % nst; once it is walked, chunk it + nst is copied there */
    int it = 0;
    for (int bi = blk_begin + warp; bi < blk_end; bi += ATTN_WARPS, it++) {
        attn_wait_chunk(nst);
        __syncwarp(); /* the chunk's rows, copied by every lane, visible to every lane */
        if (it == 0) AT_TL(3);
        if constexpr (QB) {
            const uint8_t *st = (const uint8_t *)ring + (size_t)(it % nst) * QST;
            attn_qb_decode<D>(st, kt, qtile, dks);
            attn_qb_decode<D>(st + QST / 2, vt, qtile + CH, dvs);
            __syncwarp(); /* the tiles, decoded by every lane */
        }
        const uint16_t *sk = QB ? qtile : ring + (size_t)(it % nst) * 2 * CH, *sv = sk + CH;
        const int tok0 = bi * ATTN_BS;

        /* S: keys 8j + 0..7 (j = 0, 1); [0], [1] hi rows, [2], [3] lo rows */
        float s[2][4];
#pragma unroll
        for (int j = 0; j < 2; j++) {
            s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
            for (int ks = 0; ks < KS; ks += 2) {
                uint32_t b0, b1, b2, b3;
                ldsm_x4(b0, b1, b2, b3, sk + (j * 8 + (lane & 7)) * LD + ks * 16 + (lane >> 3) * 8);
                float u[4] = {0.f, 0.f, 0.f, 0.f}, *acc = QB ? u : s[j];
                attn_mma<FH>(acc, qa[ks][0], qa[ks][1], qa[ks][2], qa[ks][3], b0, b1);
                attn_mma<FH>(acc, qa[ks + 1][0], qa[ks + 1][1], qa[ks + 1][2], qa[ks + 1][3], b2,
                             b3);
                if constexpr (QB) { /* keys 8j + 2t + (0, 1): their block ks / 2's scales */
                    const float *dk = dks + (j * 8 + 2 * t) * NB + ks / 2;
#pragma unroll
                    for (int i = 0; i < 4; i++) s[j][i] = fmaf(dk[(i & 1) * NB], u[i], s[j][i]);
                }
            }
        }
        /* head g's scores of keys tok0 + 8j + 2t + e, masked; the max over the quad */
        float sf[2][2], tmax = -INFINITY;
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float v = s[j][e] + s[j][2 + e];
                if constexpr (FH) v *= qmul;
                if (cap2 > 0.f) v = cap2 * tanhf(v / cap2);
                const int tk = tok0 + 8 * j + 2 * t + e;
                sf[j][e] = tk < len && tk >= start ? v : -INFINITY;
                tmax = fmaxf(tmax, sf[j][e]);
            }
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 2));
        const float mn = fmaxf(m, tmax);
        /* 0 on the first live chunk (m = -inf); 1 while everything is masked */
        const float alpha = m == -INFINITY ? (mn == -INFINITY ? 1.f : 0.f) : exp2f(m - mn);
        m = mn;
        l *= alpha;
#pragma unroll
        for (int i = 0; i < DN; i++) o[i][0] *= alpha, o[i][1] *= alpha, o[i][2] *= alpha,
                                     o[i][3] *= alpha;
        float p[2][2];
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                p[j][e] = m == -INFINITY ? 0.f : exp2f(sf[j][e] - m); /* masked: exp2(-inf) */
                l += p[j][e];
            }
        /* P as A: row g hi, row g + 8 lo; keys 2t, 2t + 1 and 8 + 2t, 8 + 2t + 1. QB: P
         * times the keys' V scales of each 32-dim block (4 dn tiles), the same A otherwise. */
        constexpr int PB = QB ? NB : 1;
#pragma unroll
        for (int pb = 0; pb < PB; pb++) {
            float pq[2][2];
#pragma unroll
            for (int j = 0; j < 2; j++)
#pragma unroll
                for (int e = 0; e < 2; e++)
                    pq[j][e] = QB ? p[j][e] * dvs[(8 * j + 2 * t + e) * NB + pb] : p[j][e];
            const uint32_t ph0 = attn_pk<FH>(pq[0][0], pq[0][1]),
                           ph1 = attn_pk<FH>(pq[1][0], pq[1][1]);
            const uint32_t pl0 = attn_pk<FH>(attn_rest<FH>(pq[0][0], ph0, 0),
                                             attn_rest<FH>(pq[0][1], ph0, 1));
            const uint32_t pl1 = attn_pk<FH>(attn_rest<FH>(pq[1][0], ph1, 0),
                                             attn_rest<FH>(pq[1][1], ph1, 1));
#pragma unroll
            for (int dn = pb * (DN / PB); dn < (pb + 1) * (DN / PB); dn += 2) {
                uint32_t b0, b1, b2, b3;
                ldsm_x4_t(b0, b1, b2, b3,
                          sv + ((lane & 7) + ((lane >> 3) & 1) * 8) * LD + dn * 8 + (lane >> 4) * 8);
                attn_mma<FH>(o[dn], ph0, pl0, ph1, pl1, b0, b1);
                attn_mma<FH>(o[dn + 1], ph0, pl0, ph1, pl1, b2, b3);
            }
        }
        __syncwarp();  /* every lane's ldmatrix of this stage is done */
        issue(false); /* chunk it + nst */
    }
    cp_async_wait<0>(); /* the empty groups issued past the end */

    /* the sum over the quad's keys; O = hi rows + lo rows */
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    AT_TL_DEP(4, __float_as_uint(l));
    if (g < G) {
#pragma unroll
        for (int dn = 0; dn < DN; dn++)
#pragma unroll
            for (int e = 0; e < 2; e++) wacc[g * D + dn * 8 + 2 * t + e] = o[dn][e] + o[dn][2 + e];
        if (t == 0) {
            wm[g] = m;
            wl[g] = l;
        }
    }
}

/* ==== Phase 1: one split of one (sequence, kv head) ==== */

template <int G, int D, bool TC, int TY>
__global__ void __launch_bounds__(ATTN_WARPS * 32)
paged_attn_split_kernel(const void *__restrict__ q, int q_f32,   /* [B, Hq, D] */
                        const uint16_t *__restrict__ k_cache,  /* [nb, BS, Hkv, D] */
                        const uint16_t *__restrict__ v_cache,  /* [nb, BS, Hkv, D] */
                        const int32_t *__restrict__ page_table, /* [n_seqs, pt_stride] */
                        const int32_t *__restrict__ seq_lens,   /* [B] (pos == NULL) */
                        const int32_t *__restrict__ pos,        /* [B] or NULL */
                        const int32_t *__restrict__ row_seq,    /* [B] or NULL (= b) */
                        void *__restrict__ o, int o_bf16,       /* [B, Hq, D] when 1 split */
                        float *__restrict__ part_o,             /* [B, Hq, S, D] */
                        float *__restrict__ part_lse,           /* [B, Hq, S] */
                        int *__restrict__ done,                 /* [B, Hkv] zero counters */
                        int Hkv, int pt_stride, int cpb, int window, int chunk, float qscale,
                        float cap2, int cluster, int nst, int settled,
                        /* grid constants: the typed walk indexes their code tables at run
                         * time, which otherwise copies both into each thread's local memory */
                        const __grid_constant__ cuda_kv_fmt kf,
                        const __grid_constant__ cuda_kv_fmt vf) {
    constexpr int LPT = D / 8;       /* lanes per token */
    constexpr int TPW = 32 / LPT;    /* tokens per warp load */
    constexpr int J = ATTN_BS / TPW; /* loads per lane per block, for K and for V each */
    constexpr int JT = G >= 8 ? J / 2 : J; /* loads per sub-tile */
    static_assert(D % 8 == 0 && 32 % LPT == 0 && ATTN_BS % TPW == 0, "layout");

    __shared__ float sm_m[ATTN_WARPS][G], sm_l[ATTN_WARPS][G];
    __shared__ __align__(16) float sm_acc[ATTN_WARPS][G][D];
    /* cluster merge: the splits' partials of this CTA's slice, [S][slice], and (sm_c) their
     * log-sum-exps [G][S], written by every split of the cluster */
    __shared__ float sm_recv[G * D + ATTN_CLUSTER_MAX];
    __shared__ float sm_c[G * CUDA_ATTN_MAX_SPLITS];
    __shared__ __align__(8) uint64_t sm_bar; /* cluster merge: those stores' bytes arrived */
    extern __shared__ uint4 kv_ring[]; /* the warps' K / V rings (nst stages each) */

    AT_TL(0);
    __shared__ float sm_code[2][TY == 1 && !TC ? 16 : 1]; /* the typed walk's TurboQuant codes */
    if constexpr (TY == 1 && !TC) {
        if (threadIdx.x == 0) kv_code_copy(sm_code[0], kf), kv_code_copy(sm_code[1], vf);
        __syncthreads();
    }
    const int split = blockIdx.x, S = gridDim.x, h = blockIdx.y, b = blockIdx.z;
    const int Hq = Hkv * G;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int sub = lane / LPT, dl = lane % LPT; /* token within the pair, dim group */

    const int len = pos ? pos[b] + 1 : seq_lens[b];
    int start = window > 0 && len - window > 0 ? len - window : 0; /* first visible key */
    if (chunk > 0) start = max(start, (len - 1) - (len - 1) % chunk);  /* its chunk's start */
    const int nblk = (len + ATTN_BS - 1) / ATTN_BS;
    const int blk0 = start / ATTN_BS;
    const int bps = (nblk - blk0 + S - 1) / S;
    const int blk_begin = blk0 + split * bps, blk_end = min(nblk, blk_begin + bps);

    /* lane i holds the physical chunk of this warp's i-th upcoming chunk */
    const int32_t *pt = page_table + (size_t)(pos && row_seq ? row_seq[b] : b) * pt_stride;
    const auto pt_fetch = [&](int it) {
        const int bb = blk_begin + warp + ATTN_WARPS * (it + lane); /* chunk bb of 16 tokens */
        return bb < blk_end ? pt[bb / cpb] * cpb + bb % cpb : 0;   /* chunk bb % cpb of a block */
    };
    int pt_reg = pt_fetch(0);
    /* the physical chunk of the warp's it-th chunk; it only walks forward (refetched every 32) */
    const auto chunk_phys = [&](int it) {
        if (it > 0 && (it & 31) == 0) pt_reg = pt_fetch(it);
        return (size_t)__shfl_sync(0xffffffffu, pt_reg, it & 31);
    };
    /* kv_settled is a row-mode contract (pos given); only the bf16 tensor-core walk uses it */
    const int early_kv = TC && TY != 1 && settled && pos;
    if (TY != 1) {   /* L2 prefetch: lanes 0-15 the K rows of a chunk, 16-31 its V rows */
        const int r = lane & (ATTN_BS - 1);
        const uint16_t *kv = lane < ATTN_BS ? k_cache : v_cache;
        const int pf0 = early_kv ? nst : 0; /* the walk copies those before the wait */
#pragma unroll
        for (int it = 0; it < ATTN_PF_CHUNKS; it++) {
            if (it < pf0) continue;
            const int bi = blk_begin + warp + ATTN_WARPS * it, t = bi * ATTN_BS + r;
            if (bi >= blk_end) break; /* warp-uniform */
            const size_t phys = chunk_phys(it); /* it < 32: no refetch */
            if (t < len && t >= start)
                prefetch_l2(kv + ((phys * ATTN_BS + r) * Hkv + h) * D, D * 2, 0, 1);
        }
    }
    /* per: the outputs a split owns in the cluster merge; every split sends each CTA its G
     * log-sum-exps and its partials of that CTA's slice, as st.async counted on the
     * receiver's barrier (its init visible before the cluster barrier lets anyone send) */
    const int per = (G * D + S - 1) / S;
    if (cluster && threadIdx.x == 0) {
        const int slice = max(0, min(G * D, (split + 1) * per) - split * per);
        mbar_init(&sm_bar, 1);
        mbar_init_fence_cluster();
        mbar_expect(&sm_bar, 4u * (unsigned)(S * (G + slice)));
    }
    if (cluster) cluster_arrive_relaxed(); /* this CTA has started (cluster_wait below) */
    const auto deps = [&]() {
        pdl_wait(); /* q and the newest token's K / V are the previous kernels' output */
        pdl_trigger();
        AT_TL(1);
    };

    if constexpr (TC) {
        attn_tc_walk<G, D, TY>(q, q_f32, k_cache, v_cache, kf.type, vf.type, b, h, Hkv, blk_begin,
                               blk_end, len, start, qscale, cap2, nst, early_kv, chunk_phys, deps,
                               (uint16_t *)((uint8_t *)kv_ring + warp * attn_warp_ring(D, nst, TC, TY)),
                               sm_m[warp], sm_l[warp], &sm_acc[warp][0][0]);
    } else {
        deps();
        float qf[G][8];
#pragma unroll
        for (int g = 0; g < G; g++) {
            const size_t qo = ((size_t)b * Hq + h * G + g) * D + dl * 8;
            load8_any(q, !q_f32, qo, qf[g]);
#pragma unroll
            for (int e = 0; e < 8; e++) qf[g][e] *= qscale;
        }

        float m[G], l[G], acc[G][8];
#pragma unroll
        for (int g = 0; g < G; g++) {
            m[g] = -INFINITY;
            l[g] = 0.f;
#pragma unroll
            for (int e = 0; e < 8; e++) acc[g][e] = 0.f;
        }

        /* One sub-tile of JT token loads a lane (kget / vget give load j's 8 values, fp32):
         * scores, online softmax, P V. Both walks below call it, so they compute the same
         * arithmetic once the values are in registers. */
        const auto tile = [&](auto &&kget, auto &&vget, int tok0, int jt) {
            /* Scores: partial dot over this lane's 8 dims, summed over the token's LPT
             * lanes. */
            float s[JT][G];
#pragma unroll
            for (int j = 0; j < JT; j++) {
                float kf[8];
                kget(j, kf);
#pragma unroll
                for (int g = 0; g < G; g++) {
                    float d = 0.f;
#pragma unroll
                    for (int e = 0; e < 8; e++) d = fmaf(qf[g][e], kf[e], d);
                    s[j][g] = d;
                }
            }
#pragma unroll
            for (int o2 = LPT / 2; o2 > 0; o2 >>= 1)
#pragma unroll
                for (int j = 0; j < JT; j++)
#pragma unroll
                    for (int g = 0; g < G; g++)
                        s[j][g] += __shfl_xor_sync(0xffffffffu, s[j][g], o2);
            /* soft-capping in the log2 domain: cap2 = cap * log2 e */
            if (cap2 > 0.f) {
#pragma unroll
                for (int j = 0; j < JT; j++)
#pragma unroll
                    for (int g = 0; g < G; g++) s[j][g] = cap2 * tanhf(s[j][g] / cap2);
            }

            /* Online softmax, one rescale per sub-tile. A sub-tile can be fully masked (before
             * the window start): m stays -inf, and -inf - -inf is kept out of exp2. */
#pragma unroll
            for (int g = 0; g < G; g++) {
                float mt = -INFINITY;
#pragma unroll
                for (int j = 0; j < JT; j++) {
                    const int t = tok0 + (jt + j) * TPW + sub;
                    if (t >= len || t < start) s[j][g] = -INFINITY;
                    mt = fmaxf(mt, s[j][g]);
                }
#pragma unroll
                for (int o2 = LPT; o2 < 32; o2 <<= 1)
                    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, o2));
                const float mn = fmaxf(m[g], mt);
                /* 0 on the first live sub-tile (m = -inf); 1 while everything is masked */
                const float alpha = m[g] == -INFINITY ? (mn == -INFINITY ? 1.f : 0.f)
                                                      : exp2f(m[g] - mn);
                m[g] = mn;
                l[g] *= alpha;
#pragma unroll
                for (int e = 0; e < 8; e++) acc[g][e] *= alpha;
            }
#pragma unroll
            for (int j = 0; j < JT; j++) {
                float vf[8];
                vget(j, vf);
#pragma unroll
                for (int g = 0; g < G; g++) {
                    /* masked: exp2(-inf) = 0; m = -inf only while all is masked */
                    const float p = m[g] == -INFINITY ? 0.f : exp2f(s[j][g] - m[g]);
                    l[g] += p;
#pragma unroll
                    for (int e = 0; e < 8; e++) acc[g][e] = fmaf(p, vf[e], acc[g][e]);
                }
            }
        };

        if constexpr (TY != 0) {
            /* Each lane decodes its 8 dims of JT rows, K and V, then the tile: no ring (the
             * loads are in flight together, and CTAs of every split hide their latency). */
            const uint8_t *kp8 = (const uint8_t *)k_cache, *vp8 = (const uint8_t *)v_cache;
            const size_t kbytes = kv_fmt_head_bytes(kf.type, D), vbytes = kv_fmt_head_bytes(vf.type, D);
            int it = 0;
            for (int bi = blk_begin + warp; bi < blk_end; bi += ATTN_WARPS, it++) {
                const size_t phys = chunk_phys(it);
                const int tok0 = bi * ATTN_BS;
#pragma unroll
                for (int jt = 0; jt < J; jt += JT) {
                    float kd[JT][8], vd[JT][8];
#pragma unroll
                    for (int j = 0; j < JT; j++) {
                        const int row = (jt + j) * TPW + sub, t = tok0 + row;
                        const size_t head = (phys * ATTN_BS + row) * Hkv + h;
#pragma unroll
                        for (int e = 0; e < 8; e++) kd[j][e] = vd[j][e] = 0.f;
                        if (t < len && t >= start) {
                            kv_dec8(kp8 + head * kbytes, kf.type, sm_code[0], dl * 8, kd[j]);
                            kv_dec8(vp8 + head * vbytes, vf.type, sm_code[1], dl * 8, vd[j]);
                        }
                    }
                    tile([&](int j, float f[8]) {
#pragma unroll
                             for (int e = 0; e < 8; e++) f[e] = kd[j][e];
                         },
                         [&](int j, float f[8]) {
#pragma unroll
                             for (int e = 0; e < 8; e++) f[e] = vd[j][e];
                         },
                         tok0, jt);
                }
            }
        } else {
            /* The warp's ring of nst chunk stages: [stage][K, V][J][lane], 16 bytes each. A lane
             * reads back only what it copied itself, so its own cp.async wait is the only sync. */
            uint4 *ring = kv_ring + (size_t)warp * nst * 2 * J * 32;
            int it_in = 0; /* chunks copied so far (this warp's order) */
            const auto issue = [&]() { /* copy the warp's chunk it_in into stage it_in % nst */
                const int bi = blk_begin + warp + ATTN_WARPS * it_in;
                if (bi < blk_end) {
                    const size_t phys = chunk_phys(it_in);
                    uint4 *st = ring + (size_t)(it_in % nst) * 2 * J * 32 + lane;
#pragma unroll
                    for (int j = 0; j < J; j++) {
                        const int row = j * TPW + sub, t = bi * ATTN_BS + row;
                        const size_t off = ((phys * ATTN_BS + row) * Hkv + h) * D + dl * 8;
                        const bool ok = t < len && t >= start; /* else zeros (a valid address) */
                        cp_async16(st + j * 32, k_cache + (ok ? off : 0), ok ? 16 : 0);
                        cp_async16(st + (J + j) * 32, v_cache + (ok ? off : 0), ok ? 16 : 0);
                    }
                }
                cp_async_commit(); /* empty past the end: the group count stays uniform */
                it_in++;
            };
            for (int i = 1; i < nst; i++) issue();

            int it = 0;
            for (int bi = blk_begin + warp; bi < blk_end; bi += ATTN_WARPS, it++) {
                issue(); /* chunk it + nst - 1 */
                attn_wait_chunk(nst);
                const uint4 *stg = ring + (size_t)(it % nst) * 2 * J * 32 + lane;
                const int tok0 = bi * ATTN_BS;

                /* G = 8 keeps half a chunk in registers at a time (no spills). */
#pragma unroll
                for (int jt = 0; jt < J; jt += JT) {
                    uint4 kr[JT], vr[JT];
#pragma unroll
                    for (int j = 0; j < JT; j++) {
                        kr[j] = stg[(jt + j) * 32];
                        vr[j] = stg[(J + jt + j) * 32];
                    }

                    tile([&](int j, float f[8]) { bf16x8_to_f32(kr[j], f); },
                         [&](int j, float f[8]) { bf16x8_to_f32(vr[j], f); }, tok0, jt);
                }
            }

            cp_async_wait<0>(); /* the empty groups issued past the end */
        }


        /* The TPW token lanes of a dim group share m: add their l and acc. */
#pragma unroll
        for (int o2 = LPT; o2 < 32; o2 <<= 1)
#pragma unroll
            for (int g = 0; g < G; g++) {
                l[g] += __shfl_xor_sync(0xffffffffu, l[g], o2);
#pragma unroll
                for (int e = 0; e < 8; e++)
                    acc[g][e] += __shfl_xor_sync(0xffffffffu, acc[g][e], o2);
            }
        if (sub == 0) {
#pragma unroll
            for (int g = 0; g < G; g++) {
#pragma unroll
                for (int e = 0; e < 8; e++) sm_acc[warp][g][dl * 8 + e] = acc[g][e];
                if (dl == 0) {
                    sm_m[warp][g] = m[g];
                    sm_l[warp][g] = l[g];
                }
            }
        }
    }
    __syncthreads();
    AT_TL(5);

    /* Merge the warps (fixed order) and write: thread g < G turns head g's warp maxima and
     * sums into one weight per warp (c_w / L, in place over sm_m) and the split's log-sum-exp;
     * then every output is 4 FMAs. (Each output used to redo the max, the exp2s and the
     * division: ~570 instructions a thread, most of a B=1 launch's latency-bound path.) */
    const size_t hq0 = (size_t)b * Hq + h * G;
    if (cluster) cluster_wait(); /* every CTA of the cluster has started: DSMEM stores below */
    AT_TL(6);
    if (threadIdx.x < G) {
        const int g = threadIdx.x;
        float M = -INFINITY, L = 0.f, c[ATTN_WARPS];
#pragma unroll
        for (int w = 0; w < ATTN_WARPS; w++) M = fmaxf(M, sm_m[w][g]);
#pragma unroll
        for (int w = 0; w < ATTN_WARPS; w++) {
            c[w] = M == -INFINITY || sm_m[w][g] == -INFINITY ? 0.f : exp2f(sm_m[w][g] - M);
            L = fmaf(sm_l[w][g], c[w], L);
        }
        const float inv = L > 0.f ? 1.f / L : 0.f, lse = L > 0.f ? M + log2f(L) : -INFINITY;
#pragma unroll
        for (int w = 0; w < ATTN_WARPS; w++) sm_m[w][g] = c[w] * inv;
        if (S > 1 && cluster)
            for (int r = 0; r < S; r++) dsmem_st_async_f32(&sm_c[g * S + split], r, lse, &sm_bar);
        else if (S > 1)
            part_lse[(hq0 + g) * S + split] = lse;
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < G * D; idx += ATTN_WARPS * 32) {
        const int g = idx / D, d = idx - g * D;
        float v = 0.f;
#pragma unroll
        for (int w = 0; w < ATTN_WARPS; w++) v = fmaf(sm_m[w][g], sm_acc[w][g][d], v);
        if (S == 1)
            attn_store(o, o_bf16, (hq0 + g) * D + d, v);
        else if (cluster) /* into the owner's slice, at this split's row */
            dsmem_st_async_f32(&sm_recv[split * per + idx % per], idx / per, v, &sm_bar);
        else
            part_o[((hq0 + g) * S + split) * D + d] = v;
    }
    if (S == 1) return;

    /* ==== Merge of the splits by log-sum-exp (fixed order) ==== */
    if (cluster) { /* split = the CTA's rank in the cluster */
        mbar_wait(&sm_bar, 0); /* every split's stores into this CTA have landed */
        AT_TL(7);
        attn_merge_weights<G>(sm_c, S);
        __syncthreads();
        const int lo = split * per, hi = min(G * D, lo + per);
        for (int idx = lo + threadIdx.x; idx < hi; idx += ATTN_WARPS * 32) {
            const int g = idx / D;
            float ov[ATTN_CLUSTER_MAX], A = 0.f; /* every split's load in flight at once */
#pragma unroll
            for (int s = 0; s < ATTN_CLUSTER_MAX; s++)
                ov[s] = s < S ? sm_recv[s * per + idx - lo] : 0.f;
#pragma unroll
            for (int s = 0; s < ATTN_CLUSTER_MAX; s++)
                if (s < S) A = fmaf(sm_c[g * S + s], ov[s], A);
            attn_store(o, o_bf16, (hq0 + g) * D + idx - g * D, A);
        }
        AT_TL(8);
        return; /* nothing writes this CTA's shared memory once its barrier completed */
    }
    /* global: by the last split to finish. The partials were written by other CTAs: the
     * fences order them before the counter, and the reads go around L1 (__ldcg). */
    __shared__ int sm_last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        int *cnt = done + (size_t)b * Hkv + h;
        sm_last = atomicAdd(cnt, 1) == S - 1;
        if (sm_last) *cnt = 0; /* every split has counted: ready for the next launch */
    }
    __syncthreads();
    if (!sm_last) return;
    __threadfence();
    /* The G heads' log-sum-exps are contiguous: one parallel load, the weights, then every
     * output sums c_s * o_s over the splits with all its loads in flight. */
    for (int i = threadIdx.x; i < G * S; i += ATTN_WARPS * 32)
        sm_c[i] = __ldcg(part_lse + hq0 * S + i);
    __syncthreads();
    attn_merge_weights<G>(sm_c, S);
    __syncthreads();
    constexpr int OPT = (G * D + ATTN_WARPS * 32 - 1) / (ATTN_WARPS * 32); /* outputs per thread */
    constexpr int SU = OPT >= 8 ? 1 : 4; /* G = 8: more would spill */
    float A[OPT];
#pragma unroll
    for (int j = 0; j < OPT; j++) A[j] = 0.f;
#pragma unroll SU
    for (int s = 0; s < S; s++)
#pragma unroll
        for (int j = 0; j < OPT; j++) {
            const int idx = threadIdx.x + j * ATTN_WARPS * 32, g = idx / D, d = idx - g * D;
            if (idx < G * D)
                A[j] = fmaf(sm_c[g * S + s], __ldcg(part_o + ((hq0 + g) * S + s) * D + d), A[j]);
        }
#pragma unroll
    for (int j = 0; j < OPT; j++) {
        const int idx = threadIdx.x + j * ATTN_WARPS * 32, g = idx / D, d = idx - g * D;
        if (idx >= G * D) continue;
        attn_store(o, o_bf16, (hq0 + g) * D + d, A[j]);
    }
}

/* ==== Host side ==== */

static size_t align16(size_t n) { return (n + 15) & ~(size_t)15; }

extern "C" size_t cuda_paged_attn_workspace_bytes(int B, int n_q_heads, int head_dim,
                                                  int max_splits) {
    if (B < 1 || n_q_heads < 1 || head_dim < 1 || max_splits < 1) return 0;
    const size_t rows = (size_t)B * n_q_heads * max_splits;
    return align16(rows * head_dim * sizeof(float)) + align16(rows * sizeof(float));
}

extern "C" int cuda_paged_attn_splits(const cuda_paged_attn_args *a) {
    int S = a->num_splits;
    if (S <= 0 && a->deterministic) S = CUDA_ATTN_DET_SPLITS;
    if (S <= 0) {
        /* Auto (tune_cuda_default_splits' rule): about two CTAs per SM, none when the pairs
         * alone fill every SM, at least one block per warp in each split. */
        const long ctas = (long)a->B * a->n_kv_heads, sms = cuda_sm_count();
        const int max_blk = (a->max_seq_len + ATTN_BS - 1) / ATTN_BS;
        S = ctas >= sms ? 1 : (int)((2L * sms + ctas - 1) / ctas);
        S = min(S, max(1, max_blk / ATTN_WARPS));
    }
    return max(1, min(S, CUDA_ATTN_MAX_SPLITS));
}

/* Dynamic shared memory of nst chunk stages (the K / V ring of every warp; the tensor-core
 * walk pads its rows). */
static size_t attn_ring_bytes(int D, int nst, bool tc, int ty) {
    return ATTN_WARPS * attn_warp_ring(D, nst, tc, ty);
}

/* Lets the kernel have the ring of ATTN_MAX_STAGES stages (above the default 48 KB); once. */
template <int G, int D, bool TC, int TY> static void attn_allow_ring(void) {
    static bool done;
    if (done) return;
    cudaFuncSetAttribute(paged_attn_split_kernel<G, D, TC, TY>,
                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                         (int)attn_ring_bytes(D, ATTN_MAX_STAGES, TC, TY));
    cudaGetLastError();
    done = true;
}

/* Waves of ctas CTAs with an nst-stage ring (CTAs a SM from the occupancy query, once per
 * instantiation and nst). */
template <int G, int D, bool TC, int TY> static long attn_waves(long ctas, int nst) {
    static int per_sm[ATTN_MAX_STAGES + 1];
    if (!per_sm[nst]) {
        int n = 0;
        const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &n, paged_attn_split_kernel<G, D, TC, TY>, ATTN_WARPS * 32, attn_ring_bytes(D, nst, TC, TY));
        if (e != cudaSuccess || n < 1) {
            cudaGetLastError();
            n = 1;
        }
        per_sm[nst] = n;
    }
    const long slots = (long)per_sm[nst] * cuda_sm_count();
    return (ctas + slots - 1) / slots;
}

/* Whether S splits with an nst-stage ring fit one cluster (asked once per instantiation, S
 * and nst: above 8 is a non-portable size the device may refuse). */
template <int G, int D, bool TC, int TY> static bool attn_cluster_fits(int S, int nst) {
    static signed char fit[ATTN_CLUSTER_MAX + 1][ATTN_MAX_STAGES + 1]; /* 0 ?, 1 yes, -1 no */
    if (S < 2 || S > ATTN_CLUSTER_MAX) return false;
    if (!fit[S][nst]) {
        bool ok = S <= 8 || cudaFuncSetAttribute(paged_attn_split_kernel<G, D, TC, TY>,
                                                 cudaFuncAttributeNonPortableClusterSizeAllowed,
                                                 1) == cudaSuccess;
        if (ok) {
            pdl_launch l;
            pdl_launch_config(&l, dim3(S), dim3(ATTN_WARPS * 32), attn_ring_bytes(D, nst, TC, TY), 0);
            l.cfg.numAttrs = 0;
            pdl_launch_cluster(&l, (unsigned)S);
            int n = 0;
            ok = cudaOccupancyMaxActiveClusters(&n, paged_attn_split_kernel<G, D, TC, TY>, &l.cfg) ==
                     cudaSuccess && n > 0;
        }
        cudaGetLastError(); /* a refusal is an answer, not a pending error */
        fit[S][nst] = ok ? 1 : -1;
    }
    return fit[S][nst] > 0;
}

template <int G, int D, bool TC, int TY>
static void attn_launch(const cuda_paged_attn_args *a, int S, float *part_o, float *part_lse,
                        cudaStream_t stream) {
    const dim3 grid(S, a->n_kv_heads, a->B);
    const float log2e = 1.4426950408889634f; /* softmax via exp2 */
    /* Chunks a warp may walk (the grid's bound: max_seq_len, or the window's / the attention
     * chunk's span: a row sees at most window, resp. chunk, keys; +1 for the alignment) */
    long chunks = ((long)a->max_seq_len + ATTN_BS - 1) / ATTN_BS;
    if (a->window > 0) chunks = min(chunks, ((long)a->window + ATTN_BS - 1) / ATTN_BS + 1);
    if (a->chunk > 0) chunks = min(chunks, ((long)a->chunk + ATTN_BS - 1) / ATTN_BS + 1);
    const long per_warp = (chunks + (long)S * ATTN_WARPS - 1) / ((long)S * ATTN_WARPS);
    /* Stages: up to the setting and the chunks a warp walks, but never so many that the
     * ring's shared memory adds a wave of CTAs (H200: 3 stages at B=8, 5 splits took two
     * waves and 40% longer than 1; at B=32 both take two and 3 stages won 4-10%). */
    attn_allow_ring<G, D, TC, TY>();
    const long ctas = (long)S * a->n_kv_heads * a->B;
    const long waves1 = attn_waves<G, D, TC, TY>(ctas, 1);
    int nst = TY == 1 && !TC ? 1 : (int)max(1L, min((long)cuda_attn_stages(), per_warp));
    while (nst > 1 && attn_waves<G, D, TC, TY>(ctas, nst) > waves1) nst--;
    /* The cluster merge only where the merge is most of the work (a chunk a warp at most):
     * there it saved ~0.8 us of 13 (8B, B=1, 512 tokens); on longer walks a cluster's CTAs
     * packed onto fewer SMs lost up to 25%. */
    const int cluster = S > 1 && S <= cuda_attn_cluster() && per_warp <= 1 &&
                        attn_cluster_fits<G, D, TC, TY>(S, nst);
    pdl_launch l;
    pdl_launch_config(&l, grid, dim3(ATTN_WARPS * 32), attn_ring_bytes(D, nst, TC, TY), stream);
    if (cluster) pdl_launch_cluster(&l, (unsigned)S);
    cudaLaunchKernelEx(&l.cfg, paged_attn_split_kernel<G, D, TC, TY>,
        a->q, a->q_f32, a->k_cache, a->v_cache, a->page_table, a->seq_lens, a->pos, a->row_seq,
        a->o, a->o_dtype == CUDA_OPS_BF16, part_o, part_lse, a->split_counters, a->n_kv_heads,
        a->pt_stride,
        a->block_size / ATTN_BS, a->window, a->chunk, a->scale * log2e,
        a->softcap > 0.f ? a->softcap * log2e : 0.f, cluster, nst, a->kv_settled, a->kf, a->vf);
}

extern "C" int cuda_paged_decode_attn(const cuda_paged_attn_args *a, cudaStream_t stream) {
    if (!a || a->B < 1 || (a->head_dim != 128 && a->head_dim != 64) || a->block_size < ATTN_BS ||
        a->block_size % ATTN_BS != 0 || a->n_kv_heads < 1 || a->window < 0 || a->chunk < 0 ||
        a->n_q_heads < 1 || a->n_q_heads % a->n_kv_heads != 0 || a->pt_stride < 1 ||
        a->max_seq_len < 1 || !a->q || !a->k_cache || !a->v_cache || !a->page_table ||
        (!a->seq_lens && !a->pos) || !a->o || (a->o_dtype != CUDA_OPS_F32 && a->o_dtype != CUDA_OPS_BF16) ||
        ((uintptr_t)a->q & 15) || ((uintptr_t)a->k_cache & 15) || ((uintptr_t)a->v_cache & 15))
        return (int)cudaErrorInvalidValue;
    const int G = a->n_q_heads / a->n_kv_heads;
    if (G != 1 && G != 2 && G != 4 && G != 8) return (int)cudaErrorInvalidValue;
    const int S = cuda_paged_attn_splits(a);
    float *part_o = NULL, *part_lse = NULL;
    if (S > 1) {
        const size_t need = cuda_paged_attn_workspace_bytes(a->B, a->n_q_heads, a->head_dim, S);
        if (!a->workspace || a->workspace_bytes < need || ((uintptr_t)a->workspace & 15) ||
            !a->split_counters)
            return (int)cudaErrorInvalidValue;
        part_o = (float *)a->workspace;
        const size_t o_bytes = (size_t)a->B * a->n_q_heads * S * a->head_dim * sizeof(float);
        part_lse = (float *)((char *)a->workspace + align16(o_bytes));
    }
    /* the walk for G and D: bf16 pools (CUDA cores, or tensor cores with cuda_attn_tc()),
     * other cache types (CUDA cores), and on tensor cores q8_0 / q4_0 pools, f16 pools */
    typedef void (*launch_fn)(const cuda_paged_attn_args *, int, float *, float *, cudaStream_t);
#define ATTN_FNS(TC, TY)                                                                    \
    {{attn_launch<1, 64, TC, TY>, attn_launch<2, 64, TC, TY>, attn_launch<4, 64, TC, TY>,  \
      attn_launch<8, 64, TC, TY>},                                                          \
     {attn_launch<1, 128, TC, TY>, attn_launch<2, 128, TC, TY>, attn_launch<4, 128, TC, TY>, \
      attn_launch<8, 128, TC, TY>}}
    static const launch_fn fns[5][2][4] = {ATTN_FNS(false, 0), ATTN_FNS(true, 0),
                                           ATTN_FNS(false, 1), ATTN_FNS(true, 1),
                                           ATTN_FNS(true, 2)};
#undef ATTN_FNS
    const int gi = G == 1 ? 0 : G == 2 ? 1 : G == 4 ? 2 : 3;
    const int kt = a->kf.type, vt = a->vf.type, tc = cuda_attn_tc();
    const auto qb = [](int t) { return t == CUDA_KV_Q8_0 || t == CUDA_KV_Q4_0; };
    const int row = kt == CUDA_KV_BF16 && vt == CUDA_KV_BF16 ? (tc ? 1 : 0)
                    : tc && qb(kt) && qb(vt)                   ? 3
                    : tc && kt == CUDA_KV_F16 && vt == CUDA_KV_F16 ? 4
                                                                   : 2;
    fns[row][a->head_dim == 128][gi](a, S, part_o, part_lse, stream);
    return (int)cudaGetLastError();
}
