/* MoE experts with quantized (or mixed dense / quantized) projections, per (row, expert)
 * pair: the decode path of a quantized MoE model, on the device with no host round trip
 * (graph-capturable), like moe.cu's dense pair kernels. A warp computes one output element
 * of one pair: the dot of the expert's weight row with the pair's input (q_warp_dot: 16-byte
 * loads for 4 / 8 bits). Each projection is described by cuda_moe_proj (device arrays of
 * per-expert pointers); bits == 0 means a dense bf16 projection. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/qkern.cuh"

#define MOEQ_WARPS 8

/* Dot of row i of projection pr for expert e with x[K]. */
__device__ __forceinline__ float moeq_dot(const cuda_moe_proj &pr, int e, int i, const float *x,
                                          int K) {
    if (pr.bits == 0) {
        const uint16_t *w = (const uint16_t *)pr.w[e] + (size_t)i * K;
        const int lane = threadIdx.x & 31;
        float acc = 0.f;
        if (K % 8 == 0 && ((uintptr_t)w & 15) == 0) {
            for (int k = lane * 8; k < K; k += 256) {
                float wf[8];
                bf16x8_to_f32(ldg_stream16(w + k), wf);
#pragma unroll
                for (int j = 0; j < 8; j++) acc = fmaf(wf[j], x[k + j], acc);
            }
        } else {
            for (int k = lane; k < K; k += 32) acc = fmaf(bf16_lo(w[k]), x[k], acc);
        }
        return warp_sum(acc);
    }
    const uint32_t *base = (const uint32_t *)pr.w[e];
    const uint32_t *row = base + (size_t)i * K * pr.bits / 32;
    const size_t g0 = (size_t)i * (K / pr.group);
    const void *s = (const char *)pr.scales[e] + g0 * (pr.sb_dtype == CUDA_QSB_F32 ? 4 : 2);
    const void *b = (const char *)pr.biases[e] + g0 * (pr.sb_dtype == CUDA_QSB_F32 ? 4 : 2);
    return q_warp_dot(row, s, b, pr.sb_dtype, pr.bits, pr.group, x, K,
                      ((uintptr_t)row & 15) == 0);
}

__device__ __forceinline__ float moeq_act(float g, int act) {
    if (act == 1) {
        const float c = 0.7978845608028654f;
        return 0.5f * g * (1.0f + tanhf(c * (g + 0.044715f * g * g * g)));
    }
    if (act == 2) return 0.5f * g * (1.0f + erff(g * 0.7071067811865476f));
    return g / (1.0f + expf(-g));
}

__global__ void moeq_gate_up_kernel(float *h, const float *x, long xs, const int32_t *sel, int k,
                                    cuda_moe_proj gate, cuda_moe_proj up, int I, int H, int act,
                                    const float *xscale) {
    const int p = blockIdx.y, lane = threadIdx.x & 31;
    const int i = blockIdx.x * MOEQ_WARPS + (threadIdx.x >> 5);
    if (i >= I) return;
    const int e = sel[p];
    const float *xr = x + (size_t)(p / k) * xs;
    float g = moeq_dot(gate, e, i, xr, H);
    float u = moeq_dot(up, e, i, xr, H);
    if (xscale) { /* the pair's input scale (llama4 routing), on the products */
        g *= xscale[p];
        u *= xscale[p];
    }
    if (lane == 0) h[(size_t)p * I + i] = moeq_act(g, act) * u;
}

__global__ void moeq_down_kernel(float *y, const float *h, const int32_t *sel, cuda_moe_proj down,
                                 int H, int I) {
    const int p = blockIdx.y, lane = threadIdx.x & 31;
    const int j = blockIdx.x * MOEQ_WARPS + (threadIdx.x >> 5);
    if (j >= H) return;
    const float v = moeq_dot(down, sel[p], j, h + (size_t)p * I, I);
    if (lane == 0) y[(size_t)p * H + j] = v;
}

static bool proj_ok(const cuda_moe_proj &p, int K) {
    if (!p.w) return false;
    if (p.bits == 0) return true;
    return p.scales && p.biases && (p.group == 32 || p.group == 64 || p.group == 128) &&
           K % p.group == 0 && p.bits >= 2 && p.bits <= 8 && p.bits != 7 &&
           p.sb_dtype >= CUDA_QSB_BF16 && p.sb_dtype <= CUDA_QSB_F32;
}

extern "C" int cuda_moe_gate_up_q(float *h, const float *x, long x_stride, const int32_t *sel,
                                  int n_pairs, int k, cuda_moe_proj gate, cuda_moe_proj up, int I,
                                  int H, int act, const float *xscale, cudaStream_t st) {
    if (n_pairs < 1 || n_pairs > 65535 || k < 1 || I < 1 || H < 1 || !h || !x || !sel ||
        !proj_ok(gate, H) || !proj_ok(up, H))
        return (int)cudaErrorInvalidValue;
    moeq_gate_up_kernel<<<dim3((I + MOEQ_WARPS - 1) / MOEQ_WARPS, n_pairs), MOEQ_WARPS * 32, 0, st>>>(
        h, x, x_stride, sel, k, gate, up, I, H, act, xscale);
    return (int)cudaGetLastError();
}

extern "C" int cuda_moe_down_q(float *y, const float *h, const int32_t *sel, int n_pairs,
                               cuda_moe_proj down, int H, int I, cudaStream_t st) {
    if (n_pairs < 1 || n_pairs > 65535 || H < 1 || I < 1 || !y || !h || !sel || !proj_ok(down, I))
        return (int)cudaErrorInvalidValue;
    moeq_down_kernel<<<dim3((H + MOEQ_WARPS - 1) / MOEQ_WARPS, n_pairs), MOEQ_WARPS * 32, 0, st>>>(
        y, h, sel, down, H, I);
    return (int)cudaGetLastError();
}
