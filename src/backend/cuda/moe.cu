/* MoE on the device: routing (softmax, top-k, renormalisation; or llama4's sigmoid of the
 * top-k logits, which scales each expert's input: xscale below) and, for few rows, per-pair
 * expert GEMVs that read each selected expert's rows with 16-byte loads; no host round trip,
 * so a decode step of an MoE model stays one captured graph. Many rows (prefill) go through
 * the backend's grouped path instead (rows gathered per expert, one GEMM per expert, then
 * cuda_scatter_add_rows), see backend_cuda_moe.c. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_elem.h"
#include "backend/cuda/cuda_kernels.cuh"

#define MOE_MAX_E 1024
#define MOE_MAX_K 32
#define MOE_WARPS 8

/* ==== Routing: one warp per row ==== */
__global__ void moe_route_kernel(const float *logits, long ls, int E, int k, int norm_topk,
                                 int mode, int32_t *sel, float *wsel) {
    const int r = blockIdx.x, lane = threadIdx.x;
    const float *lg = logits + (size_t)r * ls;
    float mx = -INFINITY;
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, lg[e]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0.f;
    for (int e = lane; e < E; e += 32) sum += expf(lg[e] - mx);
    sum = warp_sum(sum);
    unsigned taken = 0; /* bit i: expert lane + 32 i already selected */
    __shared__ int s_sel[MOE_MAX_K];
    __shared__ float s_w[MOE_MAX_K];
    for (int j = 0; j < k; j++) {
        float bv = -INFINITY;
        int bi = 0x7fffffff;
        for (int i = 0, e = lane; e < E; i++, e += 32) {
            if (taken >> i & 1u) continue;
            /* mode 1 ranks the logits themselves (sigmoid is monotonic: the same order) */
            const float v = mode == 1 ? lg[e] : expf(lg[e] - mx) / sum;
            if (v > bv || (v == bv && e < bi)) {
                bv = v;
                bi = e;
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float v = __shfl_xor_sync(0xffffffffu, bv, o);
            const int i = __shfl_xor_sync(0xffffffffu, bi, o);
            if (v > bv || (v == bv && i < bi)) {
                bv = v;
                bi = i;
            }
        }
        if (bi != 0x7fffffff && (bi & 31) == lane) taken |= 1u << (bi >> 5);
        if (lane == 0) {
            s_sel[j] = bi == 0x7fffffff ? 0 : bi;
            s_w[j] = bi == 0x7fffffff ? 0.f : mode == 1 ? 1.0f / (1.0f + expf(-bv)) : bv;
        }
    }
    __syncwarp();
    if (lane == 0) {
        float t = 0.f;
        for (int j = 0; j < k; j++) t += s_w[j];
        /* ascending expert id: the order the CPU reference accumulates in */
        for (int a = 1; a < k; a++)
            for (int b = a; b > 0 && s_sel[b - 1] > s_sel[b]; b--) {
                const int ti = s_sel[b]; s_sel[b] = s_sel[b - 1]; s_sel[b - 1] = ti;
                const float tw = s_w[b]; s_w[b] = s_w[b - 1]; s_w[b - 1] = tw;
            }
        for (int j = 0; j < k; j++) {
            sel[(size_t)r * k + j] = s_sel[j];
            wsel[(size_t)r * k + j] = norm_topk && mode == 0 && t > 0.f ? s_w[j] / t : s_w[j];
        }
    }
}

extern "C" int cuda_moe_route(const float *logits, long l_stride, int rows, int E, int k,
                              int norm_topk, int mode, int32_t *sel, float *wsel, cudaStream_t st) {
    if (rows < 1 || E < 1 || E > MOE_MAX_E || k < 1 || k > MOE_MAX_K || k > E || !logits ||
        !sel || !wsel || mode < 0 || mode > 1)
        return (int)cudaErrorInvalidValue;
    moe_route_kernel<<<rows, 32, 0, st>>>(logits, l_stride, E, k, norm_topk, mode, sel, wsel);
    return (int)cudaGetLastError();
}

/* ==== Dot of a bf16 weight row with an fp32 vector, one warp ==== */
__device__ __forceinline__ float warp_dot(const uint16_t *w, const float *x, int K, int vec) {
    const int lane = threadIdx.x & 31;
    float acc = 0.f;
    if (vec) { /* K % 8 == 0, 16-byte aligned rows */
        for (int k = lane * 8; k < K; k += 256) {
            float wf[8], xf[8];
            bf16x8_to_f32(ldg_stream16(w + k), wf);
            load8_any(x, 0, k, xf);
#pragma unroll
            for (int e = 0; e < 8; e++) acc = fmaf(wf[e], xf[e], acc);
        }
    } else {
        for (int k = lane; k < K; k += 32) acc = fmaf(bf16_lo(w[k]), x[k], acc);
    }
    return warp_sum(acc);
}

/* ==== gate/up per (row, expert) pair ==== */
__device__ __forceinline__ float moe_act(float g, int act) {
    if (act == 1) {
        const float c = 0.7978845608028654f;
        return 0.5f * g * (1.0f + tanhf(c * (g + 0.044715f * g * g * g)));
    }
    if (act == 2) return 0.5f * g * (1.0f + erff(g * 0.7071067811865476f));
    return g / (1.0f + expf(-g));
}

__global__ void moe_gate_up_kernel(float *h, const float *x, long xs, const int32_t *sel, int k,
                                   const uint16_t *const *gate, const uint16_t *const *up, int I,
                                   int H, int act, const float *xscale, int vec) {
    const int p = blockIdx.y, lane = threadIdx.x & 31;
    const int i = blockIdx.x * MOE_WARPS + (threadIdx.x >> 5);
    if (i >= I) return;
    const int e = sel[p];
    const float *xr = x + (size_t)(p / k) * xs;
    float g = warp_dot(gate[e] + (size_t)i * H, xr, H, vec);
    float u = warp_dot(up[e] + (size_t)i * H, xr, H, vec);
    if (xscale) { /* W (s x) = s (W x): the pair's input scale, applied to the products */
        g *= xscale[p];
        u *= xscale[p];
    }
    if (lane == 0) h[(size_t)p * I + i] = moe_act(g, act) * u;
}

extern "C" int cuda_moe_gate_up(float *h, const float *x, long x_stride, const int32_t *sel,
                                int n_pairs, int k, const uint16_t *const *gate,
                                const uint16_t *const *up, int I, int H, int act,
                                const float *xscale, cudaStream_t st) {
    if (n_pairs < 1 || k < 1 || I < 1 || H < 1 || !h || !x || !sel || !gate || !up ||
        n_pairs > 65535)
        return (int)cudaErrorInvalidValue;
    const int vec = H % 8 == 0 && (x_stride % 4) == 0 && ((uintptr_t)x & 15) == 0;
    moe_gate_up_kernel<<<dim3((I + MOE_WARPS - 1) / MOE_WARPS, n_pairs), MOE_WARPS * 32, 0, st>>>(
        h, x, x_stride, sel, k, gate, up, I, H, act, xscale, vec);
    return (int)cudaGetLastError();
}

__global__ void moe_down_kernel(float *y, const float *h, const int32_t *sel,
                                const uint16_t *const *down, int H, int I, int vec) {
    const int p = blockIdx.y, lane = threadIdx.x & 31;
    const int j = blockIdx.x * MOE_WARPS + (threadIdx.x >> 5);
    if (j >= H) return;
    const float v = warp_dot(down[sel[p]] + (size_t)j * I, h + (size_t)p * I, I, vec);
    if (lane == 0) y[(size_t)p * H + j] = v;
}

extern "C" int cuda_moe_down(float *y, const float *h, const int32_t *sel, int n_pairs,
                             const uint16_t *const *down, int H, int I, cudaStream_t st) {
    if (n_pairs < 1 || H < 1 || I < 1 || !y || !h || !sel || !down || n_pairs > 65535)
        return (int)cudaErrorInvalidValue;
    const int vec = I % 8 == 0 && ((uintptr_t)h & 15) == 0;
    moe_down_kernel<<<dim3((H + MOE_WARPS - 1) / MOE_WARPS, n_pairs), MOE_WARPS * 32, 0, st>>>(
        y, h, sel, down, H, I, vec);
    return (int)cudaGetLastError();
}

/* ==== Weighted sums into the output ==== */
__global__ void moe_combine_kernel(float *out, long os, const float *y, const float *w, int k,
                                   int H) {
    const int r = blockIdx.x;
    for (int c = threadIdx.x; c < H; c += blockDim.x) {
        float s = 0.f;
        for (int j = 0; j < k; j++) s += y[((size_t)r * k + j) * H + c] * (w ? w[(size_t)r * k + j] : 1.0f);
        out[(size_t)r * os + c] = s;
    }
}

extern "C" int cuda_moe_combine(float *out, long out_stride, const float *y, const float *wsel,
                                int rows, int k, int H, cudaStream_t st) {
    if (rows < 1 || k < 1 || H < 1 || !out || !y) return (int)cudaErrorInvalidValue;
    moe_combine_kernel<<<rows, 256, 0, st>>>(out, out_stride, y, wsel, k, H);
    return (int)cudaGetLastError();
}

__global__ void scatter_add_kernel(float *out, long os, const float *y, const int32_t *rows,
                                   const float *w, int H) {
    const int i = blockIdx.x;
    float *o = out + (size_t)rows[i] * os;
    const float wi = w ? w[i] : 1.0f;
    for (int c = threadIdx.x; c < H; c += blockDim.x) o[c] += y[(size_t)i * H + c] * wi;
}

extern "C" int cuda_scatter_add_rows(float *out, long out_stride, const float *y,
                                     const int32_t *rows, const float *w, int n, int H,
                                     cudaStream_t st) {
    if (n < 1 || H < 1 || !out || !y || !rows) return (int)cudaErrorInvalidValue;
    scatter_add_kernel<<<n, 256, 0, st>>>(out, out_stride, y, rows, w, H);
    return (int)cudaGetLastError();
}

__global__ void scale_rows_kernel(float *x, long ld, const float *w, int H) {
    const int i = blockIdx.x;
    const float wi = w[i];
    for (int c = threadIdx.x; c < H; c += blockDim.x) x[(size_t)i * ld + c] *= wi;
}

extern "C" int cuda_scale_rows_f32(float *x, long ld, const float *w, int n, int H,
                                   cudaStream_t st) {
    if (n < 1 || H < 1 || !x || !w || ld < H) return (int)cudaErrorInvalidValue;
    scale_rows_kernel<<<n, 256, 0, st>>>(x, ld, w, H);
    return (int)cudaGetLastError();
}
