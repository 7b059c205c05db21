/* Elementwise kernels of the CUDA engine backend over fp32 activations (see cuda_elem.h).
 *
 * These are small memory streams (a few KB per token at decode); they are written for
 * clarity, with the same arithmetic as the CPU reference (fp32, one rounding where the CPU
 * rounds), and each launch checks its arguments so that a bad shape never reaches a kernel. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_elem.h"
#include "backend/cuda/cuda_kernels.cuh"

#define EL_THREADS 256
#define LAUNCH_CHECK() return (int)cudaGetLastError()

static int grid_for(size_t n) {
    size_t g = (n + EL_THREADS - 1) / EL_THREADS;
    return (int)(g > 65535u * 16u ? 65535u * 16u : g);
}

__device__ __forceinline__ float bf16_round(float f) {
    return __uint_as_float(f32_to_bf16_bits(f) << 16);
}

/* ==== Embedding ====
 * Rows of H % 8 == 0 go 16 bytes at a time, each thread's loads all issued before its stores:
 * a scalar load-store loop (which the compiler cannot reorder, out may alias table) waited one
 * memory latency per element and took ~8 us for one 4096-wide row on the H200. */
#define EMBED_V 4 /* 16-byte loads in flight per thread */

/* One row of n elements, E per 16-byte quad T: each thread issues EMBED_V loads (load(j): the
 * quad at element j) before their stores (store(j, quad)). Used by embed_kernel and
 * gather_kernel. */
template <int E, class T, class Load, class Store>
__device__ __forceinline__ void row_copy16(int n, Load load, Store store) {
    const int step = blockDim.x * E;
    for (int base = threadIdx.x * E; base < n; base += step * EMBED_V) {
        T v[EMBED_V];
#pragma unroll
        for (int e = 0; e < EMBED_V; e++) {
            const int j = base + e * step;
            v[e] = j < n ? load(j) : T{};
        }
#pragma unroll
        for (int e = 0; e < EMBED_V; e++) {
            const int j = base + e * step;
            if (j >= n) break;
            store(j, v[e]);
        }
    }
}

__device__ __forceinline__ float embed_scale(float v, float s, int round) {
    if (s == 1.0f) return v;
    v *= s;
    return round ? bf16_round(v) : v;
}

__global__ void embed_kernel(float *out, const uint16_t *table, const int32_t *ids, int H, int V,
                             float scale, int round) {
    pdl_wait();
    pdl_trigger();
    const int i = blockIdx.x;
    int id = ids[i];
    id = id < 0 ? 0 : id >= V ? V - 1 : id; /* ids are validated at submit; never read out of range */
    const uint16_t *src = table + (size_t)id * H;
    float *dst = out + (size_t)i * H;
    const float s = round ? bf16_round(scale) : scale;
    if (H % 8 != 0 || ((uintptr_t)table & 15) || ((uintptr_t)out & 15)) {
        for (int j = threadIdx.x; j < H; j += blockDim.x)
            dst[j] = embed_scale(bf16_lo(src[j]), s, round);
        return;
    }
    row_copy16<8, uint4>(
        H, [&](int j) { return __ldg((const uint4 *)(src + j)); },
        [&](int j, const uint4 &v) {
            float f[8];
            bf16x8_to_f32(v, f);
#pragma unroll
            for (int k = 0; k < 8; k++) f[k] = embed_scale(f[k], s, round);
            *(float4 *)(dst + j) = make_float4(f[0], f[1], f[2], f[3]);
            *(float4 *)(dst + j + 4) = make_float4(f[4], f[5], f[6], f[7]);
        });
}

extern "C" int cuda_embed(float *out, const uint16_t *table, const int32_t *ids, int n, int H,
                          int V, float scale, int round, cudaStream_t st) {
    if (n < 1 || H < 1 || V < 1 || !out || !table || !ids) return (int)cudaErrorInvalidValue;
    pdl_launch l;
    pdl_launch_config(&l, dim3(n), dim3(EL_THREADS), 0, st);
    return (int)cudaLaunchKernelEx(&l.cfg, embed_kernel, out, table, ids, H, V, scale, round);
}

/* ==== Fused: residual add + RMSNorm ====
 * x[r] += y[r]; out[r] = x[r] / rms(x[r]) * (w + offset). The sum of squares is over the
 * updated x, exactly as add then rms_norm.
 * Decode-sized rows are latency-bound: the vector kernel gives each thread at most
 * NORM_VEC float4s held in registers (one load of x, y and w per element, no re-read), with up
 * to 1024 threads per row; the scalar kernel is the fallback for D % 4 != 0 or huge D. */
#define NORM_VEC 4

/* y == NULL: plain RMSNorm of x (x not written; out may be x). All loads are issued before
 * any store, so x and out need no __restrict__. ob != NULL: out also as bf16 rows [rows, D]
 * (the cuBLASLt input of the matmuls that read out: their conversion pass is saved). */
__global__ void add_rms_norm_vec_kernel(float *x, long xs, const float *__restrict__ y,
                                        float *out, long os, const uint16_t *__restrict__ w,
                                        float eps, float offset, int D, uint16_t *ob) {
    __shared__ float red[32];
    pdl_wait();
    pdl_trigger();
    float4 *xr = (float4 *)(x + (size_t)blockIdx.x * xs);
    const float4 *yr = y ? (const float4 *)(y + (size_t)blockIdx.x * D) : NULL;
    float4 *orow = (float4 *)(out + (size_t)blockIdx.x * os);
    const int D4 = D / 4;
    float4 v[NORM_VEC], b[NORM_VEC];
#pragma unroll
    for (int i = 0; i < NORM_VEC; i++) {
        const int j = threadIdx.x + i * blockDim.x;
        v[i] = j < D4 ? xr[j] : make_float4(0.f, 0.f, 0.f, 0.f);
        b[i] = j < D4 && yr ? yr[j] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    float ss = 0.f;
#pragma unroll
    for (int i = 0; i < NORM_VEC; i++) {
        const int j = threadIdx.x + i * blockDim.x;
        if (yr) {
            v[i].x += b[i].x, v[i].y += b[i].y, v[i].z += b[i].z, v[i].w += b[i].w;
            if (j < D4) xr[j] = v[i];
        }
        ss = fmaf(v[i].x, v[i].x, ss);
        ss = fmaf(v[i].y, v[i].y, ss);
        ss = fmaf(v[i].z, v[i].z, ss);
        ss = fmaf(v[i].w, v[i].w, ss);
    }
    const float inv = 1.0f / sqrtf(block_sum(ss, red) / (float)D + eps);
#pragma unroll
    for (int i = 0; i < NORM_VEC; i++) {
        const int j = threadIdx.x + i * blockDim.x;
        if (j < D4) {
            const uint2 wb = __ldg((const uint2 *)w + j);
            const float4 o = make_float4((v[i].x * inv) * (bf16_lo(wb.x) + offset),
                                         (v[i].y * inv) * (bf16_hi(wb.x) + offset),
                                         (v[i].z * inv) * (bf16_lo(wb.y) + offset),
                                         (v[i].w * inv) * (bf16_hi(wb.y) + offset));
            orow[j] = o;
            if (ob)
                ((uint2 *)(ob + (size_t)blockIdx.x * D))[j] =
                    make_uint2(pack_bf16x2(o.x, o.y), pack_bf16x2(o.z, o.w));
        }
    }
}

/* Threads for the vector kernel, or 0 when it does not apply. */
static int norm_vec_threads(int D, long xs, long os, const void *x, const void *out) {
    if (D % 4 || xs % 4 || os % 4 || ((uintptr_t)x & 15) || ((uintptr_t)out & 15)) return 0;
    const int D4 = D / 4;
    int t = (D4 + NORM_VEC - 1) / NORM_VEC;
    t = (t + 31) / 32 * 32;
    if (t < 32) t = 32;
    return t <= 1024 ? t : 0;
}

static int norm_vec_launch(float *x, long xs, const float *y, float *out, long os,
                           const uint16_t *w, float eps, float offset, int rows, int D, int threads,
                           cudaStream_t st, uint16_t *ob = NULL) {
    pdl_launch l;
    pdl_launch_config(&l, dim3(rows), dim3(threads), 0, st);
    return (int)cudaLaunchKernelEx(&l.cfg, add_rms_norm_vec_kernel, x, xs, y, out, os, w, eps,
                                   offset, D, ob);
}

extern "C" int cuda_rms_norm_bf16copy(float *x, const float *y, float *out, uint16_t *ob,
                                      const uint16_t *w, float eps, float offset, int rows, int D,
                                      cudaStream_t st) {
    if (rows < 1 || D < 1 || !x || !out || !ob || !w || out == x || (y && (out == y)) ||
        ((uintptr_t)ob & 7) || ((uintptr_t)w & 7) || (y && ((uintptr_t)y & 15)))
        return (int)cudaErrorInvalidValue;
    const int vt = norm_vec_threads(D, D, D, x, out);
    if (!vt) return (int)cudaErrorInvalidValue;
    return norm_vec_launch(x, D, y, out, D, w, eps, offset, rows, D, vt, st, ob);
}

__global__ void add_rms_norm_kernel(float *x, const float *y, float *out, const uint16_t *w,
                                    float eps, float offset, int D) {
    __shared__ float red[EL_THREADS / 32];
    float *xr = x + (size_t)blockIdx.x * D;
    const float *yr = y + (size_t)blockIdx.x * D;
    float *orow = out + (size_t)blockIdx.x * D;
    float ss = 0.f;
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        const float v = xr[j] + yr[j];
        xr[j] = v;
        ss = fmaf(v, v, ss);
    }
    const float inv = 1.0f / sqrtf(block_sum(ss, red) / (float)D + eps);
    for (int j = threadIdx.x; j < D; j += blockDim.x)
        orow[j] = (xr[j] * inv) * (bf16_lo(w[j]) + offset);
}

extern "C" int cuda_add_rms_norm_f32(float *x, const float *y, float *out, const uint16_t *w,
                                     float eps, float offset, int rows, int D, cudaStream_t st) {
    if (rows < 1 || D < 1 || !x || !y || !out || !w || out == x || out == y)
        return (int)cudaErrorInvalidValue;
    const int vt = norm_vec_threads(D, D, D, x, out);
    if (vt && ((uintptr_t)y & 15) == 0 && ((uintptr_t)w & 7) == 0)
        return norm_vec_launch(x, D, y, out, D, w, eps, offset, rows, D, vt, st);
    int threads = D >= EL_THREADS ? EL_THREADS : (D + 31) / 32 * 32;
    add_rms_norm_kernel<<<rows, threads, 0, st>>>(x, y, out, w, eps, offset, D);
    LAUNCH_CHECK();
}

/* ==== RMSNorm ==== */
/* One CTA per row; fixed-order fp32 sum of squares (reproducible), then x * inv * (w + off). */
__global__ void rms_norm_kernel(float *out, long out_stride, const float *x, long x_stride,
                                const uint16_t *w, float eps, float offset, int D) {
    __shared__ float red[EL_THREADS / 32];
    const float *xr = x + (size_t)blockIdx.x * x_stride;
    float *orow = out + (size_t)blockIdx.x * out_stride;
    float ss = 0.f;
    for (int j = threadIdx.x; j < D; j += blockDim.x) ss = fmaf(xr[j], xr[j], ss);
    ss = warp_sum(ss);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
    __syncthreads();
    float tot = 0.f;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) tot += red[i];
    const float inv = 1.0f / sqrtf(tot / (float)D + eps);
    for (int j = threadIdx.x; j < D; j += blockDim.x)
        orow[j] = (xr[j] * inv) * (bf16_lo(w[j]) + offset);
}

extern "C" int cuda_rms_norm_f32(float *out, long out_stride, const float *x, long x_stride,
                                 const uint16_t *w, float eps, float offset, int rows, int D,
                                 cudaStream_t st) {
    if (rows < 1 || D < 1 || !out || !x || !w) return (int)cudaErrorInvalidValue;
    const int vt = norm_vec_threads(D, x_stride, out_stride, x, out);
    if (vt && ((uintptr_t)w & 7) == 0)
        return norm_vec_launch((float *)x, x_stride, NULL, out, out_stride, w, eps, offset, rows,
                               D, vt, st);
    int threads = D >= EL_THREADS ? EL_THREADS : (D + 31) / 32 * 32;
    rms_norm_kernel<<<rows, threads, 0, st>>>(out, out_stride, x, x_stride, w, eps, offset, D);
    LAUNCH_CHECK();
}

/* ==== RoPE (rotate-half pairing, cos/sin per row from the host tables) ==== */
__global__ void rope_kernel(float *x, long x_stride, const float *cos_sin, int heads, int D,
                            int half) {
    const int i = blockIdx.x;
    const float *cs = cos_sin + (size_t)i * 2 * half;
    float *row = x + (size_t)i * x_stride;
    for (int t = threadIdx.x; t < heads * half; t += blockDim.x) {
        const int h = t / half, j = t - h * half;
        float *v = row + (size_t)h * D;
        const float c = cs[2 * j], s = cs[2 * j + 1];
        const float a = v[j], b = v[j + half];
        v[j] = a * c - b * s;
        v[j + half] = b * c + a * s;
    }
}

extern "C" int cuda_rope_f32(float *x, long x_stride, const float *cos_sin, int n, int heads, int D,
                             int rot, cudaStream_t st) {
    if (n < 1 || heads < 1 || rot < 2 || rot % 2 || rot > D || !x || !cos_sin)
        return (int)cudaErrorInvalidValue;
    rope_kernel<<<n, 128, 0, st>>>(x, x_stride, cos_sin, heads, D, rot / 2);
    LAUNCH_CHECK();
}

/* ==== add, GLU, soft-capping ==== */
__global__ void add_kernel(float *x, long xs, const float *y, long ys, int cols, size_t n) {
    for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < n;
         t += (size_t)gridDim.x * blockDim.x) {
        const size_t r = t / cols, c = t - r * cols;
        x[r * xs + c] += y[r * ys + c];
    }
}

extern "C" int cuda_add_f32(float *x, long x_stride, const float *y, long y_stride, int rows,
                            int cols, cudaStream_t st) {
    if (rows < 1 || cols < 1 || !x || !y) return (int)cudaErrorInvalidValue;
    const size_t n = (size_t)rows * cols;
    add_kernel<<<grid_for(n), EL_THREADS, 0, st>>>(x, x_stride, y, y_stride, cols, n);
    LAUNCH_CHECK();
}

__global__ void empty_kernel(void) {
    pdl_wait();
    pdl_trigger();
}

extern "C" int cuda_empty_launch(int ctas, cudaStream_t st) {
    pdl_launch l;
    pdl_launch_config(&l, dim3(ctas), dim3(128), 0, st);
    return (int)cudaLaunchKernelEx(&l.cfg, empty_kernel);
}

__global__ void glu_kernel(float *out, long os, const float *g, long gs, const float *u, long us,
                           int cols, size_t n, int act) {
    pdl_wait();
    pdl_trigger();
    for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < n;
         t += (size_t)gridDim.x * blockDim.x) {
        const size_t r = t / cols, c = t - r * cols;
        out[r * os + c] = act_apply(g[r * gs + c], act) * u[r * us + c];
    }
}

extern "C" int cuda_glu_f32(float *out, long out_stride, const float *gate, long g_stride,
                            const float *up, long u_stride, int rows, int cols, int act,
                            cudaStream_t st) {
    if (rows < 1 || cols < 1 || !out || !gate || !up || act < 0 || act > 2)
        return (int)cudaErrorInvalidValue;
    const size_t n = (size_t)rows * cols;
    pdl_launch l;
    pdl_launch_config(&l, dim3(grid_for(n)), dim3(EL_THREADS), 0, st);
    return (int)cudaLaunchKernelEx(&l.cfg, glu_kernel, out, out_stride, gate, g_stride, up,
                                   u_stride, cols, n, act);
}

__global__ void softcap_kernel(float *x, size_t n, float cap) {
    for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < n;
         t += (size_t)gridDim.x * blockDim.x)
        x[t] = cap * tanhf(x[t] / cap);
}

extern "C" int cuda_softcap_f32(float *x, size_t n, float cap, cudaStream_t st) {
    if (!x || !(cap > 0.f)) return (int)cudaErrorInvalidValue;
    if (!n) return 0;
    softcap_kernel<<<grid_for(n), EL_THREADS, 0, st>>>(x, n, cap);
    LAUNCH_CHECK();
}

/* ==== Row gather, bias ==== */
__global__ void gather_kernel(float *out, long os, const float *x, long xs, const int32_t *idx,
                              int cols) {
    pdl_wait();
    pdl_trigger();
    const int i = blockIdx.x;
    const float *src = x + (size_t)idx[i] * xs;
    float *dst = out + (size_t)i * os;
    if (cols % 4 != 0 || xs % 4 != 0 || os % 4 != 0 || ((uintptr_t)x & 15) ||
        ((uintptr_t)out & 15)) {
        for (int c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = src[c];
        return;
    }
    /* 16 bytes at a time, loads before stores (see embed_kernel) */
    row_copy16<4, float4>(
        cols, [&](int c) { return *(const float4 *)(src + c); },
        [&](int c, const float4 &v) { *(float4 *)(dst + c) = v; });
}

extern "C" int cuda_gather_rows_f32(float *out, long out_stride, const float *x, long x_stride,
                                    const int32_t *idx, int n, int cols, cudaStream_t st) {
    if (n < 1 || cols < 1 || !out || !x || !idx) return (int)cudaErrorInvalidValue;
    pdl_launch l;
    pdl_launch_config(&l, dim3(n), dim3(EL_THREADS), 0, st);
    return (int)cudaLaunchKernelEx(&l.cfg, gather_kernel, out, out_stride, x, x_stride, idx, cols);
}

__global__ void bias_kernel(float *out, long os, const uint16_t *b, int cols, size_t n) {
    for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < n;
         t += (size_t)gridDim.x * blockDim.x) {
        const size_t r = t / cols, c = t - r * cols;
        out[r * os + c] += bf16_lo(b[c]);
    }
}

__global__ void split_cols_kernel(cuda_split_segs s, const float *src, int cols, size_t n) {
    for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < n;
         t += (size_t)gridDim.x * blockDim.x) {
        const size_t r = t / cols;
        int c = (int)(t - r * cols);
        /* compile-time indices only (a run-time index into s would copy it to local memory) */
        float *y = s.y[0];
        const uint16_t *b = s.bias[0];
        int N = s.N[0];
        if (c >= s.N[0]) {
            c -= s.N[0];
            y = s.y[1], b = s.bias[1], N = s.N[1];
            if (c >= s.N[1]) {
                c -= s.N[1];
                y = s.y[2], b = s.bias[2], N = s.N[2];
            }
        }
        y[r * N + c] = src[t] + (b ? bf16_lo(b[c]) : 0.0f);
    }
}

extern "C" int cuda_split_cols_f32(const cuda_split_segs *s, const float *src, int rows,
                                   cudaStream_t st) {
    if (!s || s->n < 1 || s->n > 3 || rows < 1 || !src) return (int)cudaErrorInvalidValue;
    cuda_split_segs a = *s;
    int cols = 0;
    for (int i = 0; i < a.n; i++) {
        if (!a.y[i] || a.N[i] < 1) return (int)cudaErrorInvalidValue;
        cols += a.N[i];
    }
    for (int i = a.n; i < 3; i++) a.y[i] = NULL, a.bias[i] = NULL, a.N[i] = 1 << 30;
    const size_t n = (size_t)rows * cols;
    split_cols_kernel<<<grid_for(n), EL_THREADS, 0, st>>>(a, src, cols, n);
    LAUNCH_CHECK();
}

extern "C" int cuda_bias_add_f32(float *out, long out_stride, const uint16_t *bias, int rows,
                                 int cols, cudaStream_t st) {
    if (rows < 1 || cols < 1 || !out || !bias) return (int)cudaErrorInvalidValue;
    const size_t n = (size_t)rows * cols;
    bias_kernel<<<grid_for(n), EL_THREADS, 0, st>>>(out, out_stride, bias, cols, n);
    LAUNCH_CHECK();
}

/* ==== Conversions ==== */
__device__ __forceinline__ float load_any(const void *p, int dt, size_t i) {
    if (dt == CUDA_EL_F32) return ((const float *)p)[i];
    if (dt == CUDA_EL_BF16) return bf16_lo(((const uint16_t *)p)[i]);
    return __half2float(((const __half *)p)[i]);
}

__device__ __forceinline__ void store_any(void *p, int dt, size_t i, float v) {
    if (dt == CUDA_EL_F32) ((float *)p)[i] = v;
    else if (dt == CUDA_EL_BF16) ((uint16_t *)p)[i] = (uint16_t)f32_to_bf16_bits(v);
    else ((__half *)p)[i] = __float2half_rn(v);
}

__global__ void convert_kernel(void *dst, int dd, const void *src, int sd, size_t n) {
    for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < n;
         t += (size_t)gridDim.x * blockDim.x)
        store_any(dst, dd, t, load_any(src, sd, t));
}

extern "C" int cuda_convert(void *dst, int dst_dtype, const void *src, int src_dtype, size_t n,
                            cudaStream_t st) {
    if (!dst || !src || dst_dtype < 0 || dst_dtype > 2 || src_dtype < 0 || src_dtype > 2)
        return (int)cudaErrorInvalidValue;
    if (!n) return 0;
    convert_kernel<<<grid_for(n), EL_THREADS, 0, st>>>(dst, dst_dtype, src, src_dtype, n);
    LAUNCH_CHECK();
}

__global__ void f32_to_bf16_rows_kernel(uint16_t *dst, const float *src, long ss, int cols,
                                        size_t n) {
    for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < n;
         t += (size_t)gridDim.x * blockDim.x) {
        const size_t r = t / cols, c = t - r * cols;
        dst[t] = (uint16_t)f32_to_bf16_bits(src[r * ss + c]);
    }
}

extern "C" int cuda_f32_to_bf16_rows(uint16_t *dst, const float *src, long src_stride, int rows,
                                     int cols, cudaStream_t st) {
    if (rows < 1 || cols < 1 || !dst || !src) return (int)cudaErrorInvalidValue;
    const size_t n = (size_t)rows * cols;
    f32_to_bf16_rows_kernel<<<grid_for(n), EL_THREADS, 0, st>>>(dst, src, src_stride, cols, n);
    LAUNCH_CHECK();
}

/* v = x (up == NULL) or act(x) * up, [rows, cols] contiguous; dst rows 0..rows-1 get bf16(v)
 * and rows rows..2 rows-1 bf16(v - bf16(v)): together ~16 bits of v's mantissa. */
__global__ void bf16_split_kernel(uint16_t *__restrict__ dst, const float *__restrict__ x,
                                  const float *__restrict__ up, int act, size_t n) {
    for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < n;
         t += (size_t)gridDim.x * blockDim.x) {
        const float v = up ? act_apply(x[t], act) * up[t] : x[t];
        const uint32_t hi = f32_to_bf16_bits(v);
        dst[t] = (uint16_t)hi;
        dst[n + t] = (uint16_t)f32_to_bf16_bits(v - bf16_lo(hi));
    }
}

extern "C" int cuda_bf16_split_rows(uint16_t *dst, const float *x, const float *up, int act,
                                    int rows, int cols, cudaStream_t st) {
    if (rows < 1 || cols < 1 || !dst || !x || (up && (act < 0 || act > 2)))
        return (int)cudaErrorInvalidValue;
    const size_t n = (size_t)rows * cols;
    bf16_split_kernel<<<grid_for(n), EL_THREADS, 0, st>>>(dst, x, up, act, n);
    LAUNCH_CHECK();
}

__global__ void glu_to_bf16_kernel(uint16_t *__restrict__ dst, const float *__restrict__ g,
                                   const float *__restrict__ u, size_t n, int act) {
    for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < n;
         t += (size_t)gridDim.x * blockDim.x)
        dst[t] = (uint16_t)f32_to_bf16_bits(act_apply(g[t], act) * u[t]);
}

extern "C" int cuda_glu_to_bf16_rows(uint16_t *dst, const float *gate, const float *up, int rows,
                                     int cols, int act, cudaStream_t st) {
    if (rows < 1 || cols < 1 || !dst || !gate || !up || act < 0 || act > 2)
        return (int)cudaErrorInvalidValue;
    const size_t n = (size_t)rows * cols;
    glu_to_bf16_kernel<<<grid_for(n), EL_THREADS, 0, st>>>(dst, gate, up, n, act);
    LAUNCH_CHECK();
}

/* ==== KV write ==== */
__global__ void kv_write_kernel(void *kp, void *vp, int bf16, const float *k, long ks,
                                const float *v, long vs, const int64_t *rows, int width) {
    const int i = blockIdx.x;
    const int64_t r = rows[i];
    if (r < 0) return; /* padded / skipped rows */
    for (int c = threadIdx.x; c < width; c += blockDim.x) {
        const float kv = k[(size_t)i * ks + c], vv = v[(size_t)i * vs + c];
        const size_t o = (size_t)r * width + c;
        store1_any(kp, bf16, o, kv);
        store1_any(vp, bf16, o, vv);
    }
}

extern "C" int cuda_kv_write(void *k_pool, void *v_pool, int pool_bf16, const float *k,
                             long k_stride, const float *v, long v_stride, const int64_t *rows,
                             int n, int width, cudaStream_t st) {
    if (n < 1 || width < 1 || !k_pool || !v_pool || !k || !v || !rows)
        return (int)cudaErrorInvalidValue;
    kv_write_kernel<<<n, 128, 0, st>>>(k_pool, v_pool, pool_bf16, k, k_stride, v, v_stride, rows,
                                       width);
    LAUNCH_CHECK();
}

/* ==== Generic small-row GEMV (any K, strided rows) ====
 * One warp per output column n, all rows: lanes stride over K, fixed-order warp sum. Used only
 * where the fast kernel cannot run (tiny test models, odd K); correctness over speed. */
#define GG_ROWS 8
__global__ void gemv_generic_kernel(float *y, long ys, const float *x, long xs, const uint16_t *W,
                                    long ws, const uint16_t *bias, int rows, int N, int K) {
    const int lane = threadIdx.x & 31;
    const int n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (n >= N) return;
    const uint16_t *w = W + (size_t)n * ws;
    for (int r0 = 0; r0 < rows; r0 += GG_ROWS) {
        float acc[GG_ROWS];
#pragma unroll
        for (int r = 0; r < GG_ROWS; r++) acc[r] = 0.f;
        for (int k = lane; k < K; k += 32) {
            const float wk = bf16_lo(w[k]);
#pragma unroll
            for (int r = 0; r < GG_ROWS; r++)
                if (r0 + r < rows) acc[r] = fmaf(wk, x[(size_t)(r0 + r) * xs + k], acc[r]);
        }
#pragma unroll
        for (int r = 0; r < GG_ROWS; r++) {
            const float s = warp_sum(acc[r]);
            if (lane == 0 && r0 + r < rows)
                y[(size_t)(r0 + r) * ys + n] = s + (bias ? bf16_lo(bias[n]) : 0.f);
        }
    }
}

extern "C" int cuda_gemv_generic(float *y, long y_stride, const float *x, long x_stride,
                                 const uint16_t *W, long w_stride, const uint16_t *bias, int rows,
                                 int N, int K, cudaStream_t st) {
    if (rows < 1 || N < 1 || K < 1 || !y || !x || !W) return (int)cudaErrorInvalidValue;
    const int warps = 8;
    gemv_generic_kernel<<<(N + warps - 1) / warps, warps * 32, 0, st>>>(y, y_stride, x, x_stride,
                                                                        W, w_stride, bias, rows,
                                                                        N, K);
    LAUNCH_CHECK();
}

/* ==== Fused: RoPE on q and k + KV write ====
 * Row i: q heads rotated in place (when q != NULL), k heads rotated in place and written to
 * k_pool[rows[i]], v copied to v_pool[rows[i]] (rows[i] < 0, or no pools: no write). One thread per item,
 * items being the rotation pairs (j, j + half) of every q and k head, then the k dims past the
 * rotated part and all v dims; a row is spread over gridDim.y CTAs so that a decode step is
 * one load latency deep rather than a loop of dependent loads. Every thread writes what it
 * computed: no barrier. */
#define ROPE_KV_THREADS 128
__global__ void rope_kv_f32_kernel(float *q, long qs, float *k, long ks, const float *v, long vs,
                                   const float *__restrict__ cos_sin, int Hq, int Hkv, int D,
                                   int half, const int64_t *__restrict__ rows, void *kp, void *vp,
                                   int bf16) {
    pdl_wait();
    pdl_trigger();
    const int i = blockIdx.x;
    const int t = blockIdx.y * ROPE_KV_THREADS + threadIdx.x;
    const int64_t r = rows[i];
    const int hq = q ? Hq : 0, n_pairs = (hq + Hkv) * half, rest = D - 2 * half;
    if (t < n_pairs) {
        const float *cs = cos_sin + (size_t)i * 2 * half;
        const int hh = t / half, j = t - hh * half;
        const bool is_q = hh < hq;
        const int h = is_q ? hh : hh - hq;
        float *vec = is_q ? q + (size_t)i * qs + (size_t)h * D : k + (size_t)i * ks + (size_t)h * D;
        float na, nb;
        rope_rotate(vec[j], vec[j + half], cs[2 * j], cs[2 * j + 1], na, nb);
        vec[j] = na;
        vec[j + half] = nb;
        if (!is_q && r >= 0 && kp) {
            const size_t o = ((size_t)r * Hkv + h) * D;
            store1_any(kp, bf16, o + j, na);
            store1_any(kp, bf16, o + j + half, nb);
        }
        return;
    }
    /* k dims past the rotated part (partial rotary), and all of v */
    const int u = t - n_pairs;
    if (r < 0 || !kp || u >= Hkv * (rest + D)) return;
    const int h = u / (rest + D), e = u - h * (rest + D);
    const bool is_k = e < rest;
    const int d = is_k ? 2 * half + e : e - rest;
    const float val = is_k ? k[(size_t)i * ks + (size_t)h * D + d] : v[(size_t)i * vs + (size_t)h * D + d];
    const size_t o = ((size_t)r * Hkv + h) * D + d;
    store1_any(is_k ? kp : vp, bf16, o, val);
}

extern "C" int cuda_rope_kv_f32(float *q, long q_stride, float *k, long k_stride, const float *v,
                                long v_stride, const float *cos_sin, int n, int Hq, int Hkv,
                                int D, int rot, const int64_t *rows, void *k_pool, void *v_pool,
                                int pool_bf16, cudaStream_t st) {
    if (n < 1 || Hkv < 1 || (q && Hq < 1) || rot < 2 || rot % 2 || rot > D || !k || !v ||
        !cos_sin || !rows || !k_pool != !v_pool)
        return (int)cudaErrorInvalidValue;
    const int half = rot / 2, rest = D - rot;
    const int items = ((q ? Hq : 0) + Hkv) * half + Hkv * (rest + D);
    pdl_launch l;
    pdl_launch_config(&l, dim3(n, (items + ROPE_KV_THREADS - 1) / ROPE_KV_THREADS),
                      dim3(ROPE_KV_THREADS), 0, st);
    return (int)cudaLaunchKernelEx(&l.cfg, rope_kv_f32_kernel, q, q_stride, k, k_stride, v,
                                   v_stride, cos_sin, Hq, Hkv, D, half, rows, k_pool, v_pool,
                                   pool_bf16);
}
