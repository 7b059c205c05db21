/* RMSNorm and RoPE fused with the paged KV write (decode path).
 *
 * Both are tiny memory streams at decode (a few KB per token): their cost is launch and
 * latency, not bandwidth, so they are written for clarity with 16-byte accesses where the
 * layout allows; the later step fuses them into the neighbouring GEMVs. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.cuh"
#include "backend/cuda/cuda_ops.h"

/* ==== RMSNorm ==== */

#define NORM_THREADS 256

/* One CTA per row. Pass 1 sums squares (fp32), pass 2 re-reads the row (L1/L2 hit) and
 * scales; one rounding at the end (HF rounds x*rsqrt to the input dtype before the weight
 * multiply; the difference is within bf16 rounding). */
__global__ void __launch_bounds__(NORM_THREADS)
rmsnorm_kernel(const void *__restrict__ x, int x_bf16, const uint16_t *__restrict__ w,
               float offset, float eps, void *__restrict__ y, int y_bf16, int H) {
    __shared__ float red[NORM_THREADS / 32];
    const size_t row = (size_t)blockIdx.x * H;
    float ss = 0.f;
    for (int i = threadIdx.x * 8; i < H; i += NORM_THREADS * 8) {
        float f[8];
        load8_any(x, x_bf16, row + i, f);
#pragma unroll
        for (int e = 0; e < 8; e++) ss = fmaf(f[e], f[e], ss);
    }
    ss = warp_sum(ss);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
    __syncthreads();
    float tot = 0.f;
#pragma unroll
    for (int i = 0; i < NORM_THREADS / 32; i++) tot += red[i]; /* fixed order: reproducible */
    const float inv = rsqrtf(tot / (float)H + eps);
    for (int i = threadIdx.x * 8; i < H; i += NORM_THREADS * 8) {
        float f[8], g[8];
        load8_any(x, x_bf16, row + i, f);
        bf16x8_to_f32(*(const uint4 *)(w + i), g);
#pragma unroll
        for (int e = 0; e < 8; e++) f[e] = f[e] * inv * (g[e] + offset);
        store8_any(y, y_bf16, row + i, f);
    }
}

extern "C" int cuda_rmsnorm(const void *x, int x_dtype, const uint16_t *w, float offset,
                            float eps, void *y, int y_dtype, int rows, int H,
                            cudaStream_t stream) {
    if (rows < 1 || H < 8 || H % 8 != 0 || !x || !w || !y || ((uintptr_t)x & 15) ||
        ((uintptr_t)w & 15) || ((uintptr_t)y & 15) ||
        (x_dtype != CUDA_OPS_F32 && x_dtype != CUDA_OPS_BF16) ||
        (y_dtype != CUDA_OPS_F32 && y_dtype != CUDA_OPS_BF16))
        return (int)cudaErrorInvalidValue;
    rmsnorm_kernel<<<rows, NORM_THREADS, 0, stream>>>(x, x_dtype == CUDA_OPS_BF16, w, offset, eps,
                                                      y, y_dtype == CUDA_OPS_BF16, H);
    return (int)cudaGetLastError();
}

/* ==== RoPE + paged KV write ==== */

#define ROPE_THREADS 128
#define ROPE_MAX_HALF 256 /* head_dim <= 512 */

/* One CTA per token. cos/sin of the token's angles are computed once into shared memory,
 * then each warp takes whole heads: q heads rotate in place into q_out, k heads rotate into
 * the cache slot, v heads are copied. Neox pairing: (i, i + D/2). */
__global__ void __launch_bounds__(ROPE_THREADS) rope_kv_kernel(cuda_rope_kv_args a) {
    __shared__ float cs[ROPE_MAX_HALF], sn[ROPE_MAX_HALF];
    const int t = blockIdx.x, D = a.head_dim, half = D / 2;
    const int pos = a.pos[t];
    for (int i = threadIdx.x; i < half; i += ROPE_THREADS) {
        /* fp32 angle like HF (inv_freq @ position in fp32); accurate sincosf, not __sinf:
         * angles reach 1e5 rad at long context. */
        float ang = (float)pos * a.inv_freq[i];
        sincosf(ang, &sn[i], &cs[i]);
    }
    __syncthreads();

    const int s = a.seq ? a.seq[t] : t;
    const bool pos_ok = pos >= 0 && pos / a.block_size < a.pt_stride;
    const int blk = pos_ok ? a.page_table[(size_t)s * a.pt_stride + pos / a.block_size] : -1;
    const int row = pos_ok ? pos % a.block_size : 0;
    const bool slot_ok = blk >= 0 && blk < a.n_blocks;
    const size_t slot = ((size_t)blk * a.block_size + row) * a.n_kv_heads;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = ROPE_THREADS / 32;
    const int n_heads = a.n_q_heads + 2 * a.n_kv_heads;
    for (int h = warp; h < n_heads; h += nw) {
        const uint16_t *src;
        uint16_t *dst;
        bool rotate = true;
        if (h < a.n_q_heads) {
            src = a.q + (size_t)t * a.q_stride + (size_t)h * D;
            dst = a.q_out + (size_t)t * a.q_out_stride + (size_t)h * D;
        } else if (h < a.n_q_heads + a.n_kv_heads) {
            const int kh = h - a.n_q_heads;
            if (!slot_ok) continue;
            src = a.k + (size_t)t * a.k_stride + (size_t)kh * D;
            dst = a.k_cache + (slot + kh) * D;
        } else {
            const int vh = h - a.n_q_heads - a.n_kv_heads;
            if (!slot_ok) continue;
            src = a.v + (size_t)t * a.v_stride + (size_t)vh * D;
            dst = a.v_cache + (slot + vh) * D;
            rotate = false;
        }
        for (int i = lane; i < half; i += 32) {
            float x1 = bf16_lo(src[i]), x2 = bf16_lo(src[i + half]);
            float o1 = x1, o2 = x2;
            if (rotate) {
                o1 = x1 * cs[i] - x2 * sn[i];
                o2 = x2 * cs[i] + x1 * sn[i];
            }
            dst[i] = (uint16_t)f32_to_bf16_bits(o1);
            dst[i + half] = (uint16_t)f32_to_bf16_bits(o2);
        }
    }
}

extern "C" int cuda_rope_kv_write(const cuda_rope_kv_args *a, cudaStream_t stream) {
    if (!a || a->T < 1 || a->head_dim < 2 || a->head_dim % 2 != 0 ||
        a->head_dim / 2 > ROPE_MAX_HALF || a->n_q_heads < 1 || a->n_kv_heads < 1 ||
        a->block_size < 1 || a->pt_stride < 1 || a->n_blocks < 1 || !a->q || !a->k || !a->v ||
        !a->q_out || !a->k_cache || !a->v_cache || !a->pos || !a->page_table || !a->inv_freq)
        return (int)cudaErrorInvalidValue;
    rope_kv_kernel<<<a->T, ROPE_THREADS, 0, stream>>>(*a);
    return (int)cudaGetLastError();
}

extern "C" void cuda_rope_default_inv_freq(float *inv_freq, int head_dim, float theta) {
    /* HF: 1 / base ** (arange(0, dim, 2).float() / dim), evaluated in fp32. */
    for (int i = 0; i < head_dim / 2; i++) {
        float ex = (float)(2 * i) / (float)head_dim;
        inv_freq[i] = 1.0f / powf(theta, ex);
    }
}
