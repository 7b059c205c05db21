/* KV writes in every cache type and TurboQuant's rotation of query / output heads.
 *
 * The writes reproduce the CPU's rows bit for bit (backend/kvfmt/kv_quant.c, kv_turbo.c), so a pool
 * written on either backend holds the same bytes: each product, sum and rounding is the CPU's
 * one, in its order (explicit _rn intrinsics where nvcc would otherwise fuse a multiply-add;
 * the TurboQuant norms summed in double by one thread in index order, as the CPU loops). */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_elem.h"
#include "backend/cuda/cuda_kernels.cuh"
#include "backend/cuda/kv_codec.cuh"

__device__ __forceinline__ void kv_put_half(uint8_t *p, float d) {
    *(uint16_t *)p = __half_as_ushort(__float2half_rn(d));
}

/* q8_0: warp = one block of 32 (lane = value). */
__device__ __forceinline__ void kv_enc_q8_0(uint8_t *blk, float x, int lane) {
    float amax = fabsf(x);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    if (lane == 0) kv_put_half(blk, d);
    blk[2 + lane] = (uint8_t)(int8_t)fminf(fmaxf(roundf(__fmul_rn(x, id)), -127.0f), 127.0f);
}

/* q4_0: the signed value of largest magnitude (the lowest index on a tie; 0 when all are). */
__device__ __forceinline__ void kv_enc_q4_0(uint8_t *blk, float x, int lane) {
    float ba = fabsf(x);
    int bi = lane;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float oa = __shfl_xor_sync(0xffffffffu, ba, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (oa > ba || (oa == ba && oi < bi)) ba = oa, bi = oi;
    }
    float mx = __shfl_sync(0xffffffffu, x, bi);
    if (!(ba > 0.0f)) mx = 0.0f;
    const float d = mx / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    if (lane == 0) kv_put_half(blk, d);
    const int q = (int)fminf(fmaxf(__fadd_rn(__fmul_rn(x, id), 8.5f), 0.0f), 15.0f);
    const int qh = __shfl_down_sync(0xffffffffu, q, 16);
    if (lane < 16) blk[2 + lane] = (uint8_t)(q | qh << 4);
}

/* TurboQuant: the whole CTA (blockDim.x == D, a power of two), x[t] its value; sm: 3 D
 * words; code_v / bound: the format's tables in shared memory. kv_turbo_encode's steps: |x|
 * in double (in index order), y = R x, each y[t] coded against the N(0, 1) cell bounds after
 * scaling by sqrt(D) / |x|, each block's scale the ratio of its norms (norm correction). */
__device__ void kv_enc_turbo(uint8_t *dst, int type, const float *code_v, const float *bound,
                             float x, int D, float *sm) {
    float *xs = sm, *y = sm + D;
    int *code = (int *)(sm + 2 * D);
    const int t = threadIdx.x, bits = kv_fmt_tq_bits(type), n = 1 << bits;
    xs[t] = x;
    y[t] = __fmul_rn(x, kv_turbo_sign(t));
    kv_fwht_cta(y, D); /* its barriers also publish xs */
    __shared__ double to_unit;
    if (t == 0) {
        double nx = 0.0;
        for (int i = 0; i < D; i++) nx += (double)xs[i] * xs[i];
        nx = sqrt(nx);
        to_unit = nx > 0.0 ? sqrt((double)D) / nx : 0.0;
    }
    const float yt = __fmul_rn(y[t], 1.0f / sqrtf((float)D));
    __syncthreads();
    y[t] = yt;
    const double v = yt * to_unit;
    int k = 0;
    while (k < n - 1 && v > bound[k]) k++;
    code[t] = k;
    __syncthreads();
    if ((t & 31) == 0) { /* lane 0 of warp w: block w, in index order like the CPU */
        const int i0 = t;
        uint8_t *blk = dst + (size_t)(i0 >> 5) * kv_fmt_block_bytes(type);
        double ny = 0.0, nc = 0.0;
        uint8_t packed[16] = {0};
        for (int j = 0; j < 32; j++) {
            const int c = code[i0 + j];
            const int bit = j * bits;
            const unsigned w = (unsigned)c << (bit & 7);
            packed[bit >> 3] |= (uint8_t)w;
            if ((bit & 7) + bits > 8) packed[(bit >> 3) + 1] |= (uint8_t)(w >> 8);
            ny += (double)y[i0 + j] * y[i0 + j];
            nc += (double)code_v[c] * code_v[c];
        }
        const double s = nc > 0.0 ? sqrt(ny / nc) : 0.0;
        kv_put_half(blk, __double2float_rn(s < 65504.0 ? s : 65504.0));
        for (int b = 0; b < 4 * bits; b++) blk[2 + b] = packed[b];
    }
}

/* One head of D values of a type without a code table (f32, bf16, f16, q8_0, q4_0) by one
 * warp: lanes over the values, q8_0 / q4_0 a block of 32 at a time. */
__device__ __forceinline__ void kv_write_head_warp(uint8_t *dst, int type, const float *x, int D,
                                                   int lane) {
    switch (type) {
    case CUDA_KV_F32:
        for (int c = lane; c < D; c += 32) ((float *)dst)[c] = x[c];
        break;
    case CUDA_KV_BF16:
        for (int c = lane; c < D; c += 32) ((uint16_t *)dst)[c] = (uint16_t)f32_to_bf16_bits(x[c]);
        break;
    case CUDA_KV_F16:
        for (int c = lane; c < D; c += 32) ((uint16_t *)dst)[c] = __half_as_ushort(__float2half_rn(x[c]));
        break;
    case CUDA_KV_Q8_0:
        for (int b = 0; b < D / 32; b++) kv_enc_q8_0(dst + (size_t)b * 34, x[b * 32 + lane], lane);
        break;
    default: /* CUDA_KV_Q4_0 */
        for (int b = 0; b < D / 32; b++) kv_enc_q4_0(dst + (size_t)b * 18, x[b * 32 + lane], lane);
    }
}

/* Neither type TurboQuant: a warp per (row, kv head, K | V), 8 a CTA: 7.5 us for 512 rows of
 * the 8B's K and V on an H100, where a CTA per head (as below) took 90 us
 * (tools/diag/prefill_ncu.sh). The types travel as ints: selecting one of two cuda_kv_fmt
 * parameters by reference had every thread copy both into local memory first. */
#define KW_WARPS 8
__global__ void __launch_bounds__(KW_WARPS * 32)
    kv_write_plain_kernel(uint8_t *kp, int kt, uint8_t *vp, int vt, const float *__restrict__ k,
                          long ks, const float *__restrict__ v, long vs,
                          const int64_t *__restrict__ rows, int n, int Hkv, int D) {
    const long w = (long)blockIdx.x * KW_WARPS + (threadIdx.x >> 5);
    if (w >= (long)n * Hkv * 2) return;
    const int is_v = (int)(w & 1), h = (int)((w >> 1) % Hkv), i = (int)((w >> 1) / Hkv);
    const int64_t r = rows[i];
    if (r < 0) return;
    const int type = is_v ? vt : kt;
    const float *x = (is_v ? v + (size_t)i * vs : k + (size_t)i * ks) + (size_t)h * D;
    uint8_t *dst = (is_v ? vp : kp) + ((size_t)r * Hkv + h) * kv_fmt_head_bytes(type, D);
    kv_write_head_warp(dst, type, x, D, threadIdx.x & 31);
}

/* A TurboQuant K or V (the other may be any type): grid (row, kv head, K | V), blockDim D
 * rounded up to a warp (<= 1024); TurboQuant heads by the whole CTA, the rest by warp 0. The
 * format's tables are copied into shared memory by constant indices: indexing a parameter's
 * array at run time made every thread copy the parameters into local memory. */
__device__ __forceinline__ void kv_write_head_cta(uint8_t *pool, const cuda_kv_fmt &f,
                                                  const float *x, int64_t r, int h, int Hkv,
                                                  int D, float *sm) {
    __shared__ float code_v[16], bound[15];
    if (threadIdx.x == 0) {
        kv_code_copy(code_v, f);
#pragma unroll
        for (int j = 0; j < 15; j++) bound[j] = f.bound[j];
    }
    __syncthreads();
    uint8_t *dst = pool + ((size_t)r * Hkv + h) * kv_fmt_head_bytes(f.type, D);
    if (kv_fmt_tq_bits(f.type)) kv_enc_turbo(dst, f.type, code_v, bound, x[threadIdx.x], D, sm);
    else if (threadIdx.x < 32) kv_write_head_warp(dst, f.type, x, D, threadIdx.x);
}
__global__ void kv_write_fmt_kernel(uint8_t *kp, cuda_kv_fmt kf, uint8_t *vp, cuda_kv_fmt vf,
                                    const float *__restrict__ k, long ks,
                                    const float *__restrict__ v, long vs,
                                    const int64_t *__restrict__ rows, int Hkv, int D) {
    extern __shared__ float kw_sm[];
    const int i = blockIdx.x, h = blockIdx.y;
    const int64_t r = rows[i];
    if (r < 0) return; /* the whole CTA */
    /* each parameter used directly (a reference picking one copied both to local memory) */
    if (blockIdx.z) kv_write_head_cta(vp, vf, v + (size_t)i * vs + (size_t)h * D, r, h, Hkv, D, kw_sm);
    else kv_write_head_cta(kp, kf, k + (size_t)i * ks + (size_t)h * D, r, h, Hkv, D, kw_sm);
}

static bool fmt_ok(const cuda_kv_fmt *f, int D) {
    if (!f || f->type < CUDA_KV_BF16 || f->type > CUDA_KV_TQ4) return false;
    if (!kv_fmt_blocked(f->type)) return true;
    if (D % 32 || D > 1024) return false;
    return !kv_fmt_tq_bits(f->type) || (D & (D - 1)) == 0;
}

extern "C" int cuda_kv_write_fmt(void *k_pool, const cuda_kv_fmt *kf, void *v_pool,
                                 const cuda_kv_fmt *vf, const float *k, long k_stride,
                                 const float *v, long v_stride, const int64_t *rows, int n,
                                 int Hkv, int D, cudaStream_t st) {
    if (n < 1 || Hkv < 1 || D < 1 || !k_pool || !v_pool || !k || !v || !rows || !fmt_ok(kf, D) ||
        !fmt_ok(vf, D))
        return (int)cudaErrorInvalidValue;
    if (!kv_fmt_tq_bits(kf->type) && !kv_fmt_tq_bits(vf->type)) {
        const long warps = (long)n * Hkv * 2;
        kv_write_plain_kernel<<<(unsigned)((warps + KW_WARPS - 1) / KW_WARPS), KW_WARPS * 32, 0,
                                st>>>((uint8_t *)k_pool, kf->type, (uint8_t *)v_pool, vf->type, k,
                                      k_stride, v, v_stride, rows, n, Hkv, D);
        return (int)cudaGetLastError();
    }
    const int threads = D >= 1024 ? 1024 : (D + 31) / 32 * 32;
    kv_write_fmt_kernel<<<dim3(n, Hkv, 2), threads, (size_t)3 * D * sizeof(float), st>>>(
        (uint8_t *)k_pool, *kf, (uint8_t *)v_pool, *vf, k, k_stride, v, v_stride, rows, Hkv, D);
    return (int)cudaGetLastError();
}

/* ==== Rotation: grid (row, head), D threads ==== */
__global__ void kv_rotate_kernel(float *dst, long ds, const float *src, long ss, int heads,
                                 int D, int inverse) {
    extern __shared__ float rot_y[];
    const int i = blockIdx.x, h = blockIdx.y, t = threadIdx.x;
    const float x = src[(size_t)i * ss + (size_t)h * D + t];
    rot_y[t] = inverse ? x : __fmul_rn(x, kv_turbo_sign(t));
    kv_fwht_cta(rot_y, D);
    const float r = 1.0f / sqrtf((float)D);
    dst[(size_t)i * ds + (size_t)h * D + t] =
        __fmul_rn(rot_y[t], inverse ? __fmul_rn(r, kv_turbo_sign(t)) : r);
}

extern "C" int cuda_kv_rotate(float *dst, long dst_stride, const float *src, long src_stride,
                              int n, int heads, int D, int inverse, cudaStream_t st) {
    if (n < 1 || heads < 1 || D < 32 || D > 1024 || (D & (D - 1)) || !dst || !src)
        return (int)cudaErrorInvalidValue;
    kv_rotate_kernel<<<dim3(n, heads), D, (size_t)D * sizeof(float), st>>>(dst, dst_stride, src,
                                                                        src_stride, heads, D,
                                                                        inverse);
    return (int)cudaGetLastError();
}
