/* Tiled attention over any set of query rows (prefill chunks, mixed steps, and decode shapes
 * the split-K kernel does not take), reading K/V from the paged or dense pools.
 *
 * Grid (tile, kv head), 8 warps. A tile is up to CUDA_ATTN_ROWS_QV query vectors: tile_n
 * rows of one sequence x the G = Hq / Hkv query heads of this kv head, so every K/V chunk
 * loaded into shared memory serves all of them (the reuse a flash-attention tile gives; the
 * products run on CUDA cores in fp32 here: a correct baseline, the tensor-core version is a
 * later step). Keys stream in chunks of 32 through shared memory; a warp owns 4 query
 * vectors; lane j scores key j of the chunk (the query row is broadcast from shared memory,
 * K rows padded by one float so the 32 lanes hit 32 banks), online softmax per query vector
 * in fp32, then lane d accumulates P V for dims d, d + 32, ... (D <= 256: 8 per lane).
 * Masking per query vector: keys outside [max(0, pos - window + 1), pos] score -inf, and
 * on a chunked layer those before the chunk start pos - pos % chunk.
 * The pools may hold any cache type (kv_codec.cuh: the chunk loader decodes 8 values a
 * thread into fp32 shared memory, the same numbers the CPU's kvq_to_f32 gives). With splits
 * (grid.z), split z of a (tile, kv head) walks the z-th run of its key chunks and leaves its
 * unnormalised partial (acc, m, l) in the workspace; attn_rows_merge_kernel combines them in
 * split order. That is how decode rows on these pools reach every SM (a decode tile is one
 * row: B x Hkv CTAs would leave most of the GPU idle at small batches). */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_elem.h"
#include "backend/cuda/cuda_info.h"
#include "backend/cuda/cuda_kernels.cuh"
#include "backend/cuda/kv_codec.cuh"

#define AR_WARPS 8
#define AR_KEYS 32           /* keys per shared-memory chunk (one per lane) */
#define AR_QPW 4             /* query vectors per warp: 8 x 4 = CUDA_ATTN_ROWS_QV */
#define AR_DMAX 256
#define AR_DPL (AR_DMAX / 32) /* dims per lane */

__global__ void __launch_bounds__(AR_WARPS * 32) attn_rows_kernel(cuda_attn_rows_args a) {
    extern __shared__ float ar_smem[];
    const int D = a.head_dim, G = a.n_heads / a.n_kv_heads, Hq = a.n_heads, Hkv = a.n_kv_heads;
    float *sQ = ar_smem;                          /* [QV, D] scaled queries */
    float *sK = sQ + CUDA_ATTN_ROWS_QV * D;       /* [AR_KEYS, D + 1] */
    float *sV = sK + AR_KEYS * (D + 1);           /* [AR_KEYS, D] */
    __shared__ int64_t sPhys[AR_KEYS];
    __shared__ int sPos[CUDA_ATTN_ROWS_QV], sStart[CUDA_ATTN_ROWS_QV];
    __shared__ float sCode[2][16]; /* TurboQuant codes (published by the barrier below) */
    if (threadIdx.x == 0) kv_code_copy(sCode[0], a.kf), kv_code_copy(sCode[1], a.vf);

    const int t = blockIdx.x, h = blockIdx.y, split = blockIdx.z, S = gridDim.z;
    const int row0 = a.tile_row0[t], nr = a.tile_n[t], QV = nr * G;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int seq = a.seq[row0];
    const int32_t *table = a.table + (size_t)seq * a.table_stride;

    /* ---- queries and their key ranges ---- */
    for (int idx = threadIdx.x; idx < QV * D; idx += blockDim.x) {
        const int qv = idx / D, d = idx - qv * D, rr = qv / G, g = qv - rr * G;
        sQ[idx] = a.q[((size_t)(row0 + rr) * Hq + h * G + g) * D + d] * a.scale;
    }
    for (int qv = threadIdx.x; qv < QV; qv += blockDim.x) {
        const int p = a.pos[row0 + qv / G];
        sPos[qv] = p;
        int st = a.window > 0 && p - a.window + 1 > 0 ? p - a.window + 1 : 0;
        if (a.chunk > 0) st = max(st, p - p % a.chunk);
        sStart[qv] = st;
    }
    __syncthreads();
    int kmin = 1 << 30, kmax = -1;
    for (int qv = 0; qv < QV; qv++) {
        kmin = min(kmin, sStart[qv]);
        kmax = max(kmax, sPos[qv]);
    }
    /* this split's chunks: [c_lo, c_hi) of the tile's range, whole chunks each */
    int c_lo = kmin, c_hi = kmax + 1;
    if (S > 1 && kmax >= kmin) {
        const int nch = (kmax - kmin) / AR_KEYS + 1, cps = (nch + S - 1) / S;
        c_lo = kmin + split * cps * AR_KEYS;
        c_hi = min(kmax + 1, c_lo + cps * AR_KEYS);
    }
    const size_t kbytes = kv_fmt_head_bytes(a.kf.type, D), vbytes = kv_fmt_head_bytes(a.vf.type, D);
    const uint8_t *kpool = (const uint8_t *)a.k_pool, *vpool = (const uint8_t *)a.v_pool;

    float m[AR_QPW], l[AR_QPW], acc[AR_QPW][AR_DPL];
#pragma unroll
    for (int i = 0; i < AR_QPW; i++) {
        m[i] = -INFINITY;
        l[i] = 0.f;
#pragma unroll
        for (int k = 0; k < AR_DPL; k++) acc[i][k] = 0.f;
    }

    for (int c0 = c_lo; c0 < c_hi; c0 += AR_KEYS) {
        /* ---- K/V chunk into shared memory ---- */
        if (threadIdx.x < AR_KEYS) {
            const int p = c0 + threadIdx.x;
            sPhys[threadIdx.x] =
                p <= kmax ? (int64_t)table[p / a.block] * a.block + p % a.block : -1;
        }
        __syncthreads();
        if (D % 8 == 0) { /* 8 values a thread (every blocked type: D % 32 == 0) */
            for (int idx = threadIdx.x; idx < AR_KEYS * (D / 8); idx += blockDim.x) {
                const int j = idx / (D / 8), d = (idx - j * (D / 8)) * 8;
                const int64_t r = sPhys[j];
                float kv[8] = {0.f}, vv[8] = {0.f};
                if (r >= 0) {
                    const size_t head = (size_t)r * Hkv + h;
                    kv_dec8(kpool + head * kbytes, a.kf.type, sCode[0], d, kv);
                    kv_dec8(vpool + head * vbytes, a.vf.type, sCode[1], d, vv);
                }
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    sK[j * (D + 1) + d + e] = kv[e];
                    sV[j * D + d + e] = vv[e];
                }
            }
        } else { /* f32 / bf16 / f16 heads of any length */
            for (int idx = threadIdx.x; idx < AR_KEYS * D; idx += blockDim.x) {
                const int j = idx / D, d = idx - j * D;
                const int64_t r = sPhys[j];
                float kv = 0.f, vv = 0.f;
                if (r >= 0) {
                    const size_t off = ((size_t)r * Hkv + h) * D + d;
                    kv = kv_dec1(kpool, a.kf.type, off);
                    vv = kv_dec1(vpool, a.vf.type, off);
                }
                sK[j * (D + 1) + d] = kv;
                sV[j * D + d] = vv;
            }
        }
        __syncthreads();

        /* ---- scores, online softmax, P V for this warp's query vectors ---- */
#pragma unroll
        for (int i = 0; i < AR_QPW; i++) {
            const int qv = warp + AR_WARPS * i;
            if (qv >= QV) break;
            const float *qr = sQ + qv * D, *kr = sK + lane * (D + 1);
            float s = 0.f;
            for (int d = 0; d < D; d++) s = fmaf(qr[d], kr[d], s);
            const int p = c0 + lane;
            const bool ok = p >= sStart[qv] && p <= sPos[qv];
            if (a.softcap > 0.f) s = a.softcap * tanhf(s / a.softcap);
            s = ok ? s : -INFINITY;
            float mt = s;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, o));
            const float mn = fmaxf(m[i], mt);
            if (mn == -INFINITY) continue; /* nothing visible yet for this query */
            const float alpha = m[i] == -INFINITY ? 0.f : expf(m[i] - mn);
            const float pr = ok ? expf(s - mn) : 0.f;
            m[i] = mn;
            l[i] = l[i] * alpha + warp_sum(pr);
#pragma unroll
            for (int k = 0; k < AR_DPL; k++) acc[i][k] *= alpha;
            for (int j = 0; j < AR_KEYS; j++) {
                const float pj = __shfl_sync(0xffffffffu, pr, j);
                if (pj == 0.f) continue; /* warp-uniform: pj is the same in every lane */
#pragma unroll
                for (int k = 0; k < AR_DPL; k++) {
                    const int d = lane + 32 * k;
                    if (d < D) acc[i][k] = fmaf(pj, sV[j * D + d], acc[i][k]);
                }
            }
        }
        __syncthreads();
    }

    if (S > 1) { /* the unnormalised partial and (m, l), merged by attn_rows_merge_kernel */
#pragma unroll
        for (int i = 0; i < AR_QPW; i++) {
            const int qv = warp + AR_WARPS * i;
            if (qv >= QV) break;
            const size_t part = (((size_t)t * Hkv + h) * S + split) * a.ws_qv + qv;
            float *pa = a.ws + part * D;
#pragma unroll
            for (int k = 0; k < AR_DPL; k++) {
                const int d = lane + 32 * k;
                if (d < D) pa[d] = acc[i][k];
            }
            if (lane == 0) {
                float *ml = a.ws + (size_t)gridDim.x * Hkv * S * a.ws_qv * D + part * 2;
                ml[0] = m[i];
                ml[1] = l[i];
            }
        }
        return;
    }
    /* ---- normalise and write ---- */
#pragma unroll
    for (int i = 0; i < AR_QPW; i++) {
        const int qv = warp + AR_WARPS * i;
        if (qv >= QV) break;
        const int rr = qv / G, g = qv - rr * G;
        float *orow = a.o + ((size_t)(row0 + rr) * Hq + h * G + g) * D;
        const float inv = l[i] > 0.f ? 1.0f / l[i] : 0.f;
#pragma unroll
        for (int k = 0; k < AR_DPL; k++) {
            const int d = lane + 32 * k;
            if (d < D) orow[d] = acc[i][k] * inv;
        }
    }
}

/* grid (tile, kv head): o = sum_s w_s acc_s / sum_s w_s l_s, w_s = exp(m_s - max m), in
 * split order. */
__global__ void attn_rows_merge_kernel(cuda_attn_rows_args a) {
    const int t = blockIdx.x, h = blockIdx.y, S = a.splits, D = a.head_dim;
    const int G = a.n_heads / a.n_kv_heads, QV = a.tile_n[t] * G, row0 = a.tile_row0[t];
    const size_t base = ((size_t)t * a.n_kv_heads + h) * S * a.ws_qv;
    const float *ml = a.ws + (size_t)gridDim.x * a.n_kv_heads * S * a.ws_qv * D;
    for (int idx = threadIdx.x; idx < QV * D; idx += blockDim.x) {
        const int qv = idx / D, d = idx - qv * D;
        float M = -INFINITY;
        for (int s = 0; s < S; s++) M = fmaxf(M, ml[(base + (size_t)s * a.ws_qv + qv) * 2]);
        float L = 0.f, A = 0.f;
        if (M != -INFINITY)
            for (int s = 0; s < S; s++) {
                const size_t part = base + (size_t)s * a.ws_qv + qv;
                const float ms = ml[part * 2];
                if (ms == -INFINITY) continue;
                const float w = expf(ms - M);
                L = fmaf(w, ml[part * 2 + 1], L);
                A = fmaf(w, a.ws[part * D + d], A);
            }
        const int rr = qv / G, g = qv - rr * G;
        a.o[((size_t)(row0 + rr) * a.n_heads + h * G + g) * D + d] = L > 0.f ? A / L : 0.f;
    }
}

extern "C" size_t cuda_attn_rows_ws_bytes(int n_tiles, int n_kv_heads, int head_dim, int splits,
                                          int ws_qv) {
    return splits > 1 ? (size_t)n_tiles * n_kv_heads * splits * ws_qv * (head_dim + 2) * sizeof(float) : 0;
}

extern "C" int cuda_attn_rows(const cuda_attn_rows_args *a, cudaStream_t st) {
    if (!a || a->n_tiles < 1 || a->head_dim < 1 || a->head_dim > AR_DMAX || a->n_kv_heads < 1 ||
        a->n_heads % a->n_kv_heads != 0 || a->n_heads / a->n_kv_heads > CUDA_ATTN_ROWS_QV ||
        a->block < 1 || a->table_stride < 1 || !a->q || !a->o || !a->k_pool || !a->v_pool ||
        !a->pos || !a->seq || !a->table || !a->tile_row0 || !a->tile_n ||
        (a->head_dim % 8 && (kv_fmt_blocked(a->kf.type) || kv_fmt_blocked(a->vf.type))) ||
        (a->splits > 1 && (!a->ws || a->ws_qv < 1 || a->ws_qv > CUDA_ATTN_ROWS_QV)))
        return (int)cudaErrorInvalidValue;
    const int S = a->splits > 1 ? a->splits : 1;
    const int D = a->head_dim;
    const size_t smem = ((size_t)CUDA_ATTN_ROWS_QV * D + (size_t)AR_KEYS * (D + 1) +
                         (size_t)AR_KEYS * D) * sizeof(float);
    static size_t s_smem_set[CUDA_MAX_DEVICES]; /* the attribute is per device */
    const int cd = cuda_cur_device();
    if (smem > 48 * 1024 && smem > s_smem_set[cd]) {
        cudaError_t e = cudaFuncSetAttribute(attn_rows_kernel,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)smem);
        if (e != cudaSuccess) return (int)e;
        s_smem_set[cd] = smem;
    }
    attn_rows_kernel<<<dim3(a->n_tiles, a->n_kv_heads, S), AR_WARPS * 32, smem, st>>>(*a);
    if (S > 1) {
        const cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return (int)e;
        attn_rows_merge_kernel<<<dim3(a->n_tiles, a->n_kv_heads), 128, 0, st>>>(*a);
    }
    return (int)cudaGetLastError();
}
