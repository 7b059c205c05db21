/* What the hand-built diagnostic harnesses (bench/qi_timeline.cu, bench/attn_timeline.cu,
 * bench/persist_layer.cu) share: checked CUDA calls (cuda_ops_bench.h's CK), a qsort
 * comparison of doubles, device buffers of hashed words, and the timing of a layer loop. */
#ifndef MLXCEL_BENCH_DIAG_UTIL_CUH
#define MLXCEL_BENCH_DIAG_UTIL_CUH

#include "cuda_ops_bench.h"

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

__global__ void fill_kernel(uint32_t *p, size_t n, uint32_t seed, uint32_t mask, uint32_t or_) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        p[i] = (h & mask) | or_;
    }
}

/* bytes of device memory, each word a hash of its index and seed, & mask | or_ */
static void *dev_fill(size_t bytes, uint32_t seed, uint32_t mask = ~0u, uint32_t or_ = 0) {
    void *p;
    CK(cudaMalloc(&p, bytes));
    fill_kernel<<<1024, 256>>>((uint32_t *)p, bytes / 4, seed, mask, or_);
    CK(cudaGetLastError());
    return p;
}

/* run(l) issues layer l of L on st: one untimed pass, then iters (1..1000) timed passes; the
 * median and the fastest pass in us a layer. */
template <class Fn>
static void time_layers(cudaStream_t st, int iters, int L, Fn run, double *med, double *best) {
    static double per[1000];
    for (int l = 0; l < L; l++) run(l);
    CK(cudaStreamSynchronize(st));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const int n = iters < 1 ? 1 : iters > 1000 ? 1000 : iters;
    for (int it = 0; it < n; it++) {
        CK(cudaEventRecord(e0, st));
        for (int l = 0; l < L; l++) run(l);
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        per[it] = ms * 1000.0 / L;
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    qsort(per, n, sizeof *per, cmp_double);
    *med = per[n / 2], *best = per[0];
}

#endif
