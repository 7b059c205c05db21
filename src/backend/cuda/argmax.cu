/* Greedy sampling on the device: argmax over [rows, V] fp32 logits.
 *
 * A single CTA per row would stream 0.5 MB (V = 128256) through one SM; instead stage 1
 * cuts each row into ARGMAX_CHUNKS pieces (grid chunks x rows) and stage 2 reduces the
 * partial (value, index) pairs of a row in a fixed order. "Better" is a total order (larger
 * value, then smaller index) and NaN is never taken, so the result does not depend on the
 * reduction order and equals torch.argmax's first maximum on NaN-free rows. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.cuh"
#include "backend/cuda/cuda_ops.h"

#define ARGMAX_THREADS 256
#define ARGMAX_CHUNKS 32
#define ARGMAX_NONE 0x7fffffff /* index of "nothing seen yet" */

/* ==== Pair reduction ==== */

__device__ __forceinline__ void amax_take(float &bv, int &bi, float v, int i) {
    if (v > bv || (v == bv && i < bi)) {
        bv = v;
        bi = i;
    }
}

__device__ __forceinline__ void amax_warp(float &bv, int &bi) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float v = __shfl_xor_sync(0xffffffffu, bv, o);
        int i = __shfl_xor_sync(0xffffffffu, bi, o);
        amax_take(bv, bi, v, i);
    }
}

/* The CTA's best (value, index): valid in warp 0. sv, si: blockDim.x / 32 slots of shared
 * memory, free for reuse after a barrier. */
__device__ __forceinline__ void amax_cta(float &bv, int &bi, float *sv, int *si) {
    amax_warp(bv, bi);
    if ((threadIdx.x & 31) == 0) {
        sv[threadIdx.x >> 5] = bv;
        si[threadIdx.x >> 5] = bi;
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        const bool in = threadIdx.x < (blockDim.x >> 5);
        bv = in ? sv[threadIdx.x] : -INFINITY;
        bi = in ? si[threadIdx.x] : ARGMAX_NONE;
        amax_warp(bv, bi);
    }
}

/* ==== Stage 1: one chunk of one row ==== */

__global__ void __launch_bounds__(ARGMAX_THREADS)
argmax_chunk_kernel(const float *__restrict__ logits, int V, int chunk,
                    float *__restrict__ part_v, int *__restrict__ part_i) {
    __shared__ float sv[ARGMAX_THREADS / 32];
    __shared__ int si[ARGMAX_THREADS / 32];
    const int row = blockIdx.y, c = blockIdx.x;
    const float *x = logits + (size_t)row * V;
    const int lo = c * chunk, hi = min(V, lo + chunk);
    float bv = -INFINITY;
    int bi = ARGMAX_NONE;
    if ((V & 3) == 0) {
        /* chunk is a multiple of 4, so lo is too and float4 loads stay aligned. */
        for (int i = lo + threadIdx.x * 4; i < hi; i += ARGMAX_THREADS * 4) {
            float4 f = __ldcs((const float4 *)(x + i));
            amax_take(bv, bi, f.x, i);
            amax_take(bv, bi, f.y, i + 1);
            amax_take(bv, bi, f.z, i + 2);
            amax_take(bv, bi, f.w, i + 3);
        }
    } else {
        for (int i = lo + threadIdx.x; i < hi; i += ARGMAX_THREADS) amax_take(bv, bi, x[i], i);
    }
    amax_cta(bv, bi, sv, si);
    if (threadIdx.x == 0) {
        part_v[row * gridDim.x + c] = bv;
        part_i[row * gridDim.x + c] = bi;
    }
}

/* ==== Stage 2: one warp per row ==== */

__global__ void argmax_final_kernel(const float *__restrict__ part_v, const int *__restrict__ part_i,
                                    int nchunks, int32_t *__restrict__ out) {
    const int row = blockIdx.x;
    float bv = -INFINITY;
    int bi = ARGMAX_NONE;
    for (int c = threadIdx.x; c < nchunks; c += 32)
        amax_take(bv, bi, part_v[row * nchunks + c], part_i[row * nchunks + c]);
    amax_warp(bv, bi);
    if (threadIdx.x == 0) out[row] = bi == ARGMAX_NONE ? 0 : bi; /* all-NaN row: 0 */
}

/* ==== Host side ==== */

extern "C" size_t cuda_argmax_workspace_bytes(int rows) {
    return rows < 1 ? 0 : (size_t)rows * ARGMAX_CHUNKS * (sizeof(float) + sizeof(int));
}

extern "C" int cuda_argmax_f32(const float *logits, int rows, int V, int32_t *out,
                               void *workspace, cudaStream_t stream) {
    if (!logits || !out || !workspace || rows < 1 || rows > 65535 || V < 1 ||
        ((V & 3) == 0 && ((uintptr_t)logits & 15)) || ((uintptr_t)workspace & 3))
        return (int)cudaErrorInvalidValue;
    /* At least 1024 elements per chunk; chunk a multiple of 4 for the float4 path. */
    int nchunks = (V + 1023) / 1024;
    if (nchunks > ARGMAX_CHUNKS) nchunks = ARGMAX_CHUNKS;
    int chunk = (V + nchunks - 1) / nchunks;
    chunk = (chunk + 3) & ~3;
    nchunks = (V + chunk - 1) / chunk;
    float *part_v = (float *)workspace;
    int *part_i = (int *)(part_v + (size_t)rows * nchunks);
    argmax_chunk_kernel<<<dim3(nchunks, rows), ARGMAX_THREADS, 0, stream>>>(logits, V, chunk,
                                                                           part_v, part_i);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return (int)e;
    argmax_final_kernel<<<rows, 32, 0, stream>>>(part_v, part_i, nchunks, out);
    return (int)cudaGetLastError();
}

/* ==== Greedy token + its log-probability ====
 * The sampler's greedy contract: NaN counts as -inf, the lowest id wins a tie, the
 * log-probability is log-softmax of the chosen id (= -log sum exp(x - max)); a row with no
 * finite logit gives id -1.
 *
 * One launch, up to GREEDY_CHUNKS CTAs per row (one CTA streaming a 0.5 MB row took ~24 us,
 * as long as a 4096 x 4096 GEMV): each CTA reduces its chunk to (max, first id of it, sum
 * exp(x - max)) in two passes over the chunk (the second from registers when the chunk fits
 * GREEDY_PER logits a thread, else L1/L2-resident), stores the triple, and the
 * CTA that finishes last for the row (a counter, reset by that CTA for the next launch and
 * graph replay) merges the row's triples in chunk order: sum = sum_c s_c exp(m_c - M). The
 * merge order is fixed, so results do not depend on which CTA finished last. */
#define GREEDY_THREADS 256
#define GREEDY_CHUNKS 128
#define GREEDY_PER 8         /* logits a thread holds in registers */
#define GREEDY_MAX_ROWS 512 /* rows per launch in the staging below; more run in several */

__device__ float g_greedy_m[GREEDY_MAX_ROWS * GREEDY_CHUNKS];
__device__ float g_greedy_s[GREEDY_MAX_ROWS * GREEDY_CHUNKS];
__device__ int g_greedy_i[GREEDY_MAX_ROWS * GREEDY_CHUNKS];
__device__ unsigned g_greedy_done[GREEDY_MAX_ROWS];

__global__ void __launch_bounds__(GREEDY_THREADS)
greedy_kernel(const float *__restrict__ logits, int V, int chunk, int row0,
              int32_t *__restrict__ ids, float *__restrict__ lps) {
    __shared__ float sv[GREEDY_THREADS / 32];
    __shared__ int si[GREEDY_THREADS / 32];
    __shared__ float s_max;
    __shared__ int s_id, s_last;
    pdl_wait();
    pdl_trigger();
    const int row = blockIdx.y, c = blockIdx.x, slot = row * GREEDY_CHUNKS + c;
    const float *x = logits + (size_t)(row0 + row) * V;
    const int lo = c * chunk, hi = min(V, lo + chunk);
    float bv = -INFINITY;
    int bi = ARGMAX_NONE;
    /* a chunk of <= GREEDY_THREADS * GREEDY_PER logits stays in registers: all its loads are
     * in flight at once and the second pass reads no memory */
    const bool held = hi - lo <= GREEDY_THREADS * GREEDY_PER;
    float v[GREEDY_PER];
    if (held) {
#pragma unroll
        for (int j = 0; j < GREEDY_PER; j++) {
            const int i = lo + threadIdx.x + j * GREEDY_THREADS;
            v[j] = i < hi ? x[i] : -INFINITY;
        }
#pragma unroll
        for (int j = 0; j < GREEDY_PER; j++) {
            const int i = lo + threadIdx.x + j * GREEDY_THREADS;
            if (i < hi) amax_take(bv, bi, v[j], i);
        }
    } else {
        for (int i = lo + threadIdx.x; i < hi; i += GREEDY_THREADS) amax_take(bv, bi, x[i], i);
    }
    amax_cta(bv, bi, sv, si);
    if (threadIdx.x == 0) {
        s_max = bv;
        s_id = bi;
    }
    __syncthreads();
    const float m = s_max;
    float sum = 0.f;
    if (m != -INFINITY && held) {
#pragma unroll
        for (int j = 0; j < GREEDY_PER; j++) /* out of the chunk: -inf, adds nothing */
            if (v[j] == v[j] && v[j] != -INFINITY) sum += expf(v[j] - m);
    } else if (m != -INFINITY) {
        for (int i = lo + threadIdx.x; i < hi; i += GREEDY_THREADS) {
            const float xv = x[i];
            if (xv == xv && xv != -INFINITY) sum += expf(xv - m);
        }
    }
    __syncthreads(); /* sv is reused */
    const float tot = block_sum(sum, sv);
    if (threadIdx.x == 0) {
        g_greedy_m[slot] = m;
        g_greedy_i[slot] = s_id;
        g_greedy_s[slot] = tot;
        __threadfence(); /* the triple is visible before the count says so */
        const unsigned n = atomicAdd(&g_greedy_done[row], 1u);
        s_last = n == gridDim.x - 1;
    }
    __syncthreads();
    if (!s_last || threadIdx.x >= 32) return;
    /* the row's last CTA: merge the triples in chunk order (one warp) */
    __threadfence();
    const int nc = gridDim.x;
    float M = -INFINITY;
    int id = ARGMAX_NONE;
    for (int k = threadIdx.x; k < nc; k += 32)
        amax_take(M, id, __ldcg(&g_greedy_m[row * GREEDY_CHUNKS + k]),
                  __ldcg(&g_greedy_i[row * GREEDY_CHUNKS + k]));
    amax_warp(M, id);
    float part = 0.f;
    if (M != -INFINITY)
        for (int k = threadIdx.x; k < nc; k += 32) {
            const float mk = __ldcg(&g_greedy_m[row * GREEDY_CHUNKS + k]);
            if (mk != -INFINITY) part += __ldcg(&g_greedy_s[row * GREEDY_CHUNKS + k]) * expf(mk - M);
        }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
    if (threadIdx.x == 0) {
        const bool ok = M != -INFINITY && id != ARGMAX_NONE;
        ids[row0 + row] = ok ? id : -1;
        lps[row0 + row] = ok ? -logf(part) : -INFINITY;
        g_greedy_done[row] = 0u; /* ready for the next launch (and graph replay) */
    }
}

extern "C" int cuda_greedy_f32(const float *logits, int rows, int V, int32_t *ids, float *lps,
                               cudaStream_t stream) {
    if (!logits || !ids || !lps || rows < 1 || V < 1) return (int)cudaErrorInvalidValue;
    /* at least 1024 logits per CTA (4 a thread): fewer would cost more in the merge than they
     * save. (32 CTAs of 4008 logits, each thread walking 16 loads one by one, took 9.0 us on
     * the H200 for V = 128256: a third of an 8B layer's attention.) */
    int nchunks = (V + 1023) / 1024;
    if (nchunks > GREEDY_CHUNKS) nchunks = GREEDY_CHUNKS;
    const int chunk = (V + nchunks - 1) / nchunks;
    nchunks = (V + chunk - 1) / chunk;
    /* launches run in stream order: the counters of one are back to 0 before the next reads them */
    for (int r0 = 0; r0 < rows; r0 += GREEDY_MAX_ROWS) {
        const int n = rows - r0 < GREEDY_MAX_ROWS ? rows - r0 : GREEDY_MAX_ROWS;
        pdl_launch l;
        pdl_launch_config(&l, dim3(nchunks, n), dim3(GREEDY_THREADS), 0, stream);
        cudaError_t e = cudaLaunchKernelEx(&l.cfg, greedy_kernel, logits, V, chunk, r0, ids, lps);
        if (e != cudaSuccess) return (int)e;
    }
    return (int)cudaSuccess;
}
