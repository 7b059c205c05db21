/* Paged decode attention, split-K (flash-decoding), one query token per sequence.
 *
 * Phase 1, grid (split, kv head, sequence), 4 warps: the CTA reads its kv head's share of
 * the sequence's KV once for all G = Hq / Hkv query heads that use it (GQA). Warp w takes
 * KV blocks w, w+4, ... of the split; within a 16-token block a lane holds 8 dims (one
 * 16-byte load) of one token, 16 lanes per token, so a warp covers 2 tokens per load and
 * issues 8 K + 8 V loads per block before the first use. Online softmax per block (one
 * rescale per block), in the log2 domain (q is pre-scaled by scale * log2 e, so exp is one
 * ex2). At the end the 4 warps merge in shared memory; a single split writes the output,
 * otherwise the split writes its normalised partial output and log-sum-exp, and the last
 * split of a (sequence, kv head) to finish (one atomic counter per pair, left at zero for the
 * next launch) merges the splits of its G query heads in a fixed order. The merge used to be
 * its own kernel: at B=1 on the 8B shape that launch cost ~6 us per layer, more than the
 * merge's own work.
 *
 * The only atomic elects the merging CTA: for a fixed split count the result is bitwise
 * reproducible, and with num_splits > 0 the splits of a sequence depend only on its own
 * length (batch-invariant).
 * Template parameters: G (query heads per kv head) and D (head_dim); instantiated for
 * D in {64, 128}, G in {1, 2, 4, 8}.
 *
 * The kernel works on 16-token chunks: a table block of block_size tokens (any multiple of
 * 16, so dense storage's one block of ctx tokens works too) is block_size / 16 chunks.
 * Row mode (pos != NULL): every row b is one query at position pos[b] of sequence
 * row_seq[b] (its page-table row), attending to [max(0, pos - window + 1), pos]; this is the
 * engine's decode step, and also serves any row set correctly. Scores may be soft-capped. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_info.h"
#include "backend/cuda/cuda_kernels.cuh"
#include "backend/cuda/cuda_ops.h"

#define ATTN_WARPS 4
#define ATTN_BS 16 /* tokens per KV chunk (fixed: the loop is unrolled over it) */

/* ==== Phase 1: one split of one (sequence, kv head) ==== */

template <int G, int D>
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
                        int Hkv, int pt_stride, int cpb, int window, float qscale,
                        float cap2) {
    constexpr int LPT = D / 8;       /* lanes per token */
    constexpr int TPW = 32 / LPT;    /* tokens per warp load */
    constexpr int J = ATTN_BS / TPW; /* loads per lane per block, for K and for V each */
    constexpr int JT = G >= 8 ? J / 2 : J; /* loads per sub-tile */
    static_assert(D % 8 == 0 && 32 % LPT == 0 && ATTN_BS % TPW == 0, "layout");

    __shared__ float sm_m[ATTN_WARPS][G], sm_l[ATTN_WARPS][G];
    __shared__ __align__(16) float sm_acc[ATTN_WARPS][G][D];

    pdl_wait();
    pdl_trigger();
    const int split = blockIdx.x, S = gridDim.x, h = blockIdx.y, b = blockIdx.z;
    const int Hq = Hkv * G;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int sub = lane / LPT, dl = lane % LPT; /* token within the pair, dim group */

    const int len = pos ? pos[b] + 1 : seq_lens[b];
    const int start = window > 0 && len - window > 0 ? len - window : 0; /* first visible key */
    const int nblk = (len + ATTN_BS - 1) / ATTN_BS;
    const int blk0 = start / ATTN_BS;
    const int bps = (nblk - blk0 + S - 1) / S;
    const int blk_begin = blk0 + split * bps, blk_end = min(nblk, blk_begin + bps);

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

    const int32_t *pt = page_table + (size_t)(pos && row_seq ? row_seq[b] : b) * pt_stride;
    int pt_reg = 0; /* lane i holds the block id of this warp's i-th upcoming block */
    int it = 0;
    for (int bi = blk_begin + warp; bi < blk_end; bi += ATTN_WARPS, it++) {
        if ((it & 31) == 0) {
            /* chunk bb of 16 tokens: chunk bb % cpb of table block bb / cpb */
            const int bb = bi + ATTN_WARPS * lane;
            pt_reg = bb < blk_end ? pt[bb / cpb] * cpb + bb % cpb : 0;
        }
        const size_t phys = (size_t)__shfl_sync(0xffffffffu, pt_reg, it & 31);
        const int tok0 = bi * ATTN_BS;

        /* G = 8 keeps half a block of loads in registers at a time (no spills). */
#pragma unroll
        for (int jt = 0; jt < J; jt += JT) {
            uint4 kr[JT], vr[JT];
#pragma unroll
            for (int j = 0; j < JT; j++) {
                const int row = (jt + j) * TPW + sub;
                const size_t off = ((phys * ATTN_BS + row) * Hkv + h) * D + dl * 8;
                const bool ok = tok0 + row < len && tok0 + row >= start;
                kr[j] = ok ? ldg_stream16(k_cache + off) : make_uint4(0, 0, 0, 0);
                vr[j] = ok ? ldg_stream16(v_cache + off) : make_uint4(0, 0, 0, 0);
            }

            /* Scores: partial dot over this lane's 8 dims, summed over the token's LPT lanes. */
            float s[JT][G];
#pragma unroll
            for (int j = 0; j < JT; j++) {
                float kf[8];
                bf16x8_to_f32(kr[j], kf);
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
                bf16x8_to_f32(vr[j], vf);
#pragma unroll
                for (int g = 0; g < G; g++) {
                    /* masked: exp2(-inf) = 0; m = -inf only while all is masked */
                    const float p = m[g] == -INFINITY ? 0.f : exp2f(s[j][g] - m[g]);
                    l[g] += p;
#pragma unroll
                    for (int e = 0; e < 8; e++) acc[g][e] = fmaf(p, vf[e], acc[g][e]);
                }
            }
        }
    }

    /* The TPW token lanes of a dim group share m: add their l and acc. */
#pragma unroll
    for (int o2 = LPT; o2 < 32; o2 <<= 1)
#pragma unroll
        for (int g = 0; g < G; g++) {
            l[g] += __shfl_xor_sync(0xffffffffu, l[g], o2);
#pragma unroll
            for (int e = 0; e < 8; e++) acc[g][e] += __shfl_xor_sync(0xffffffffu, acc[g][e], o2);
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
    __syncthreads();

    /* Merge the warps (fixed order) and write. */
    for (int idx = threadIdx.x; idx < G * D; idx += ATTN_WARPS * 32) {
        const int g = idx / D, d = idx - g * D;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < ATTN_WARPS; w++) M = fmaxf(M, sm_m[w][g]);
        float L = 0.f, A = 0.f;
        if (M != -INFINITY) {
#pragma unroll
            for (int w = 0; w < ATTN_WARPS; w++) {
                const float c = sm_m[w][g] == -INFINITY ? 0.f : exp2f(sm_m[w][g] - M);
                L = fmaf(sm_l[w][g], c, L);
                A = fmaf(sm_acc[w][g][d], c, A);
            }
        }
        const size_t hq = (size_t)b * Hq + h * G + g;
        if (S == 1) {
            const float v = L > 0.f ? A / L : 0.f;
            if (o_bf16)
                ((uint16_t *)o)[hq * D + d] = (uint16_t)f32_to_bf16_bits(v);
            else
                ((float *)o)[hq * D + d] = v;
        } else {
            part_o[(hq * S + split) * D + d] = L > 0.f ? A / L : 0.f;
            if (d == 0) part_lse[hq * S + split] = L > 0.f ? M + log2f(L) : -INFINITY;
        }
    }
    if (S == 1) return;

    /* ==== Merge of the splits by log-sum-exp, by the last of them (fixed order) ====
     * The partials were written by other CTAs: the fences order them before the counter,
     * and the reads go around L1 (__ldcg). */
    __shared__ int sm_last;
    __shared__ float sm_c[G * CUDA_ATTN_MAX_SPLITS], sm_w[G];
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
    /* The G heads' log-sum-exps are contiguous: one parallel load, then per head the weights
     * c_s = exp2(lse_s - max) and their sum W (serial over s: the fixed order), then every
     * output sums c_s * o_s over the splits with all its loads in flight. */
    const size_t hq0 = (size_t)b * Hq + h * G;
    for (int i = threadIdx.x; i < G * S; i += ATTN_WARPS * 32)
        sm_c[i] = __ldcg(part_lse + hq0 * S + i);
    __syncthreads();
    if (threadIdx.x < G) {
        float *c = sm_c + threadIdx.x * S, M = -INFINITY, W = 0.f;
        for (int s = 0; s < S; s++) M = fmaxf(M, c[s]);
        for (int s = 0; s < S; s++) {
            c[s] = M == -INFINITY || c[s] == -INFINITY ? 0.f : exp2f(c[s] - M);
            W += c[s];
        }
        sm_w[threadIdx.x] = W;
    }
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
        const float v = sm_w[g] > 0.f ? A[j] / sm_w[g] : 0.f;
        if (o_bf16)
            ((uint16_t *)o)[(hq0 + g) * D + d] = (uint16_t)f32_to_bf16_bits(v);
        else
            ((float *)o)[(hq0 + g) * D + d] = v;
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
        /* Auto: about two CTAs per SM, at least one block per warp in each split. */
        const long ctas = (long)a->B * a->n_kv_heads;
        const int max_blk = (a->max_seq_len + ATTN_BS - 1) / ATTN_BS;
        S = (int)((2L * cuda_sm_count() + ctas - 1) / ctas);
        S = min(S, max(1, max_blk / ATTN_WARPS));
    }
    return max(1, min(S, CUDA_ATTN_MAX_SPLITS));
}

template <int G, int D>
static void attn_launch(const cuda_paged_attn_args *a, int S, float *part_o, float *part_lse,
                        cudaStream_t stream) {
    const dim3 grid(S, a->n_kv_heads, a->B);
    const float log2e = 1.4426950408889634f; /* softmax via exp2 */
    pdl_launch l;
    pdl_launch_config(&l, grid, dim3(ATTN_WARPS * 32), 0, stream);
    cudaLaunchKernelEx(&l.cfg, paged_attn_split_kernel<G, D>,
        a->q, a->q_f32, a->k_cache, a->v_cache, a->page_table, a->seq_lens, a->pos, a->row_seq,
        a->o, a->o_dtype == CUDA_OPS_BF16, part_o, part_lse, a->split_counters, a->n_kv_heads,
        a->pt_stride,
        a->block_size / ATTN_BS, a->window, a->scale * log2e,
        a->softcap > 0.f ? a->softcap * log2e : 0.f);
}

extern "C" int cuda_paged_decode_attn(const cuda_paged_attn_args *a, cudaStream_t stream) {
    if (!a || a->B < 1 || (a->head_dim != 128 && a->head_dim != 64) || a->block_size < ATTN_BS ||
        a->block_size % ATTN_BS != 0 || a->n_kv_heads < 1 || a->window < 0 ||
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
    if (a->head_dim == 128) {
        switch (G) {
        case 1: attn_launch<1, 128>(a, S, part_o, part_lse, stream); break;
        case 2: attn_launch<2, 128>(a, S, part_o, part_lse, stream); break;
        case 4: attn_launch<4, 128>(a, S, part_o, part_lse, stream); break;
        default: attn_launch<8, 128>(a, S, part_o, part_lse, stream); break;
        }
    } else {
        switch (G) {
        case 1: attn_launch<1, 64>(a, S, part_o, part_lse, stream); break;
        case 2: attn_launch<2, 64>(a, S, part_o, part_lse, stream); break;
        case 4: attn_launch<4, 64>(a, S, part_o, part_lse, stream); break;
        default: attn_launch<8, 64>(a, S, part_o, part_lse, stream); break;
        }
    }
    return (int)cudaGetLastError();
}
