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
 * on a chunked layer those before the chunk start pos - pos % chunk. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_elem.h"
#include "backend/cuda/cuda_info.h"
#include "backend/cuda/cuda_kernels.cuh"

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

    const int t = blockIdx.x, h = blockIdx.y;
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

    float m[AR_QPW], l[AR_QPW], acc[AR_QPW][AR_DPL];
#pragma unroll
    for (int i = 0; i < AR_QPW; i++) {
        m[i] = -INFINITY;
        l[i] = 0.f;
#pragma unroll
        for (int k = 0; k < AR_DPL; k++) acc[i][k] = 0.f;
    }

    for (int c0 = kmin; c0 <= kmax; c0 += AR_KEYS) {
        /* ---- K/V chunk into shared memory ---- */
        if (threadIdx.x < AR_KEYS) {
            const int p = c0 + threadIdx.x;
            sPhys[threadIdx.x] =
                p <= kmax ? (int64_t)table[p / a.block] * a.block + p % a.block : -1;
        }
        __syncthreads();
        for (int idx = threadIdx.x; idx < AR_KEYS * D; idx += blockDim.x) {
            const int j = idx / D, d = idx - j * D;
            const int64_t r = sPhys[j];
            float kv = 0.f, vv = 0.f;
            if (r >= 0) {
                const size_t off = ((size_t)r * Hkv + h) * D + d;
                if (a.pool_bf16) {
                    kv = bf16_lo(((const uint16_t *)a.k_pool)[off]);
                    vv = bf16_lo(((const uint16_t *)a.v_pool)[off]);
                } else {
                    kv = ((const float *)a.k_pool)[off];
                    vv = ((const float *)a.v_pool)[off];
                }
            }
            sK[j * (D + 1) + d] = kv;
            sV[j * D + d] = vv;
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

extern "C" int cuda_attn_rows(const cuda_attn_rows_args *a, cudaStream_t st) {
    if (!a || a->n_tiles < 1 || a->head_dim < 1 || a->head_dim > AR_DMAX || a->n_kv_heads < 1 ||
        a->n_heads % a->n_kv_heads != 0 || a->n_heads / a->n_kv_heads > CUDA_ATTN_ROWS_QV ||
        a->block < 1 || a->table_stride < 1 || !a->q || !a->o || !a->k_pool || !a->v_pool ||
        !a->pos || !a->seq || !a->table || !a->tile_row0 || !a->tile_n)
        return (int)cudaErrorInvalidValue;
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
    attn_rows_kernel<<<dim3(a->n_tiles, a->n_kv_heads), AR_WARPS * 32, smem, st>>>(*a);
    return (int)cudaGetLastError();
}
