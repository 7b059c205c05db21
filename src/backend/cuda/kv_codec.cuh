/* KV pool rows on the device: the cache types of backend/kvfmt/kv_quant.h and backend/kvfmt/kv_turbo.h, read and
 * written with the CPU's arithmetic (included by .cu files only).
 *
 * One head of D values is stored as (cuda_kv_fmt.type):
 * - F32 / BF16 / F16: D elements;
 * - Q8_0 / Q4_0 / TQ2..TQ4: D / 32 blocks, each an fp16 scale d then the payload: q8_0 32
 *   int8 (value d q), q4_0 16 bytes with byte j = q[j] | q[j + 16] << 4 (value d (q - 8)),
 *   TurboQuant 32 codes of b bits little-endian (value d c[code], in the rotated space).
 * Every block size is even and every head starts at an even offset, so scales and q8_0 / q4_0
 * payloads are read as 16-bit words (a q8_0 head of D = 128 is 136 bytes), TurboQuant codes
 * bytewise. */
#ifndef MLXCEL_BACKEND_CUDA_KV_CODEC_CUH
#define MLXCEL_BACKEND_CUDA_KV_CODEC_CUH

#include <cuda_fp16.h>
#include <stdint.h>

#include "backend/cuda/cuda_elem.h"
#include "backend/cuda/cuda_kernels.cuh"
#include "backend/kvfmt/kv_turbo.h" /* kv_turbo_sign */

__host__ __device__ __forceinline__ int kv_fmt_tq_bits(int type) {
    return type >= CUDA_KV_TQ2 && type <= CUDA_KV_TQ4 ? type - CUDA_KV_TQ2 + 2 : 0;
}
__host__ __device__ __forceinline__ int kv_fmt_blocked(int type) { return type >= CUDA_KV_Q8_0; }
/* Bytes of one 32-value block (blocked types). */
__host__ __device__ __forceinline__ int kv_fmt_block_bytes(int type) {
    return type == CUDA_KV_Q8_0 ? 34 : type == CUDA_KV_Q4_0 ? 18 : 2 + 4 * kv_fmt_tq_bits(type);
}
/* Bytes of one head of D values. */
__host__ __device__ __forceinline__ size_t kv_fmt_head_bytes(int type, int D) {
    return type == CUDA_KV_F32                            ? (size_t)D * 4
           : type == CUDA_KV_BF16 || type == CUDA_KV_F16 ? (size_t)D * 2
                                                         : (size_t)(D / 32) * kv_fmt_block_bytes(type);
}

__device__ __forceinline__ uint32_t kv_ld16(const uint8_t *p) { return *(const uint16_t *)p; }

/* The fp16 scale d of a blocked type's block. */
__device__ __forceinline__ float kv_scale(const uint8_t *blk) {
    return __half2float(__ushort_as_half((unsigned short)kv_ld16(blk)));
}

/* q8_0 / q4_0: the integers q of values e..e+7 (e a multiple of 8) of the block at blk, as
 * floats (exact; the value is d q). */
__device__ __forceinline__ void kv_ints8(const uint8_t *blk, int type, int e, float v[8]) {
    if (type == CUDA_KV_Q8_0) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t w = kv_ld16(blk + 2 + e + 2 * i);
            v[2 * i] = (float)(int8_t)(w & 0xff);
            v[2 * i + 1] = (float)(int8_t)(w >> 8);
        }
    } else {
        const int sh = e >= 16 ? 4 : 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t w = kv_ld16(blk + 2 + (e & 15) + 2 * i);
            v[2 * i] = (float)((int)((w >> sh) & 15) - 8);
            v[2 * i + 1] = (float)((int)((w >> (8 + sh)) & 15) - 8);
        }
    }
}

/* A format's TurboQuant codes into shared memory (by one thread; constant indices: a kernel
 * parameter's array indexed at run time costs each thread a local copy of the parameter, and
 * the lanes' different codes would serialise on the constant cache). */
__device__ __forceinline__ void kv_code_copy(float *dst, const cuda_kv_fmt &f) {
#pragma unroll
    for (int j = 0; j < 16; j++) dst[j] = f.code[j];
}

/* Values e0..e0+7 (e0 a multiple of 8) of the head stored at p, of the type; code: its
 * TurboQuant codes (kv_code_copy; unused by the other types). F32 / BF16 / F16 need p + e0
 * elements 16-byte aligned (D a multiple of 8, as every caller has). */
__device__ __forceinline__ void kv_dec8(const uint8_t *p, int type, const float *code, int e0,
                                        float v[8]) {
    if (type == CUDA_KV_F32) {
        const float4 a = *(const float4 *)(p + (size_t)e0 * 4), b = *(const float4 *)(p + (size_t)e0 * 4 + 16);
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
        return;
    }
    if (type == CUDA_KV_BF16) {
        bf16x8_to_f32(*(const uint4 *)(p + (size_t)e0 * 2), v);
        return;
    }
    if (type == CUDA_KV_F16) {
        const uint4 u = *(const uint4 *)(p + (size_t)e0 * 2);
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float2 t = __half22float2(*(const __half2 *)&w[i]);
            v[2 * i] = t.x, v[2 * i + 1] = t.y;
        }
        return;
    }
    const uint8_t *blk = p + (size_t)(e0 >> 5) * kv_fmt_block_bytes(type);
    const int e = e0 & 31;
    const float d = kv_scale(blk);
    if (type == CUDA_KV_Q8_0 || type == CUDA_KV_Q4_0) {
        kv_ints8(blk, type, e, v);
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = d * v[i];
    } else { /* TurboQuant: 8 codes are exactly `bits` bytes */
        const int bits = kv_fmt_tq_bits(type);
        const uint8_t *c = blk + 2 + (e >> 3) * bits;
        uint32_t w = (uint32_t)c[0] | (uint32_t)c[1] << 8; /* tq3's groups start at odd bytes */
        if (bits > 2) w |= (uint32_t)c[2] << 16;
        if (bits > 3) w |= (uint32_t)c[3] << 24;
        const uint32_t mask = (1u << bits) - 1;
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = d * code[(w >> (i * bits)) & mask];
    }
}

/* Element i of an f32 / bf16 / f16 pool (the unblocked types). */
__device__ __forceinline__ float kv_dec1(const uint8_t *pool, int type, size_t i) {
    if (type == CUDA_KV_F32) return ((const float *)pool)[i];
    const uint16_t u = ((const uint16_t *)pool)[i];
    return type == CUDA_KV_BF16 ? bf16_lo(u) : __half2float(__ushort_as_half(u));
}

/* y[0..D) <- H y (unnormalised Walsh-Hadamard, kv_turbo.c's butterfly order) by the CTA's
 * threads, thread t owning pairs (j, j + h) with j = t's index among the pairs; y in shared
 * memory, D a power of two; starts and ends with a barrier. */
__device__ __forceinline__ void kv_fwht_cta(float *y, int D) {
    for (int h = 1; h < D; h *= 2) {
        __syncthreads();
        for (int p = threadIdx.x; p < D / 2; p += blockDim.x) {
            const int j = (p / h) * 2 * h + p % h;
            const float a = y[j], b = y[j + h];
            y[j] = __fadd_rn(a, b);
            y[j + h] = __fsub_rn(a, b);
        }
    }
    __syncthreads();
}

#endif
