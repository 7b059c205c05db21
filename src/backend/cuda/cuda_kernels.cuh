/* Device helpers shared by the decode kernels (included by .cu files only). */
#ifndef MLXCEL_BACKEND_CUDA_KERNELS_CUH
#define MLXCEL_BACKEND_CUDA_KERNELS_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

/* ==== Loads ==== */

/* 16-byte streaming load of data read once (weights, KV): read-only path, no L1
 * allocation, so it does not evict what the CTA does reuse. */
__device__ __forceinline__ uint4 ldg_stream16(const void *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

/* The same, 8 bytes. */
__device__ __forceinline__ uint2 ldg_stream8(const void *p) {
    uint2 v;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];"
                 : "=r"(v.x), "=r"(v.y)
                 : "l"(p));
    return v;
}

/* L2 prefetch of [p, p + bytes) (p 16-byte aligned, bytes a multiple of 16), one bulk request
 * per 16 KB, issued by threads first..first+n-1 of the calling group (tid = the caller's index
 * in it, stride = its size). A hint: no completion to wait for, nothing to undo. */
__device__ __forceinline__ void prefetch_l2(const void *p, size_t bytes, int tid, int stride) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const size_t piece = 16384, n = (bytes + piece - 1) / piece;
    for (size_t i = (size_t)tid; i < n; i += (size_t)stride) {
        const size_t off = i * piece;
        const unsigned sz = (unsigned)(bytes - off < piece ? bytes - off : piece);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"((const char *)p + off),
                     "r"(sz)
                     : "memory");
    }
#endif
}

/* ==== bf16 <-> fp32 ==== */

/* bf16 is the top half of an fp32: widening is a shift (exact). */
__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

__device__ __forceinline__ void bf16x8_to_f32(uint4 v, float f[8]) {
    f[0] = bf16_lo(v.x); f[1] = bf16_hi(v.x);
    f[2] = bf16_lo(v.y); f[3] = bf16_hi(v.y);
    f[4] = bf16_lo(v.z); f[5] = bf16_hi(v.z);
    f[6] = bf16_lo(v.w); f[7] = bf16_hi(v.w);
}

/* Round-to-nearest-even fp32 -> bf16 bits; NaN stays a (quiet) NaN. */
__device__ __forceinline__ uint32_t f32_to_bf16_bits(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
    u += 0x7fffu + ((u >> 16) & 1u);
    return u >> 16;
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    return f32_to_bf16_bits(lo) | (f32_to_bf16_bits(hi) << 16);
}

/* Round to nearest even by the hardware's paired convert (sm_80+): one instruction where
 * pack_bf16x2 takes ~10 (the same bits for finite values). */
__device__ __forceinline__ uint32_t cvt_bf16x2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ uint4 f32x8_to_bf16x8(const float f[8]) {
    return make_uint4(cvt_bf16x2(f[0], f[1]), cvt_bf16x2(f[2], f[3]),
                      cvt_bf16x2(f[4], f[5]), cvt_bf16x2(f[6], f[7]));
}

/* 8 consecutive elements (16-byte aligned) of an fp32 or bf16 array, as fp32. */
__device__ __forceinline__ void load8_any(const void *base, int is_bf16, size_t i, float f[8]) {
    if (is_bf16) {
        bf16x8_to_f32(*(const uint4 *)((const uint16_t *)base + i), f);
    } else {
        float4 a = *(const float4 *)((const float *)base + i);
        float4 b = *(const float4 *)((const float *)base + i + 4);
        f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
        f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
    }
}

/* One element of an fp32 or bf16 array. */
__device__ __forceinline__ void store1_any(void *base, int is_bf16, size_t i, float v) {
    if (is_bf16) ((uint16_t *)base)[i] = (uint16_t)f32_to_bf16_bits(v);
    else ((float *)base)[i] = v;
}

/* RoPE on one neox pair (a, b) = (x[j], x[j + half]) with (c, s) = (cos, sin) of its angle. */
__device__ __forceinline__ void rope_rotate(float a, float b, float c, float s, float &na,
                                            float &nb) {
    na = a * c - b * s;
    nb = b * c + a * s;
}

__device__ __forceinline__ void store8_any(void *base, int is_bf16, size_t i, const float f[8]) {
    if (is_bf16) {
        *(uint4 *)((uint16_t *)base + i) = f32x8_to_bf16x8(f);
    } else {
        *(float4 *)((float *)base + i) = make_float4(f[0], f[1], f[2], f[3]);
        *(float4 *)((float *)base + i + 4) = make_float4(f[4], f[5], f[6], f[7]);
    }
}

/* ==== Activations ==== */

/* act: 0 silu, 1 gelu (tanh approximation), 2 gelu (erf) */
__device__ __forceinline__ float act_apply(float g, int act) {
    if (act == 1) {
        const float k = 0.7978845608028654f; /* sqrt(2 / pi) */
        return 0.5f * g * (1.0f + tanhf(k * (g + 0.044715f * g * g * g)));
    }
    if (act == 2) return 0.5f * g * (1.0f + erff(g * 0.7071067811865476f));
    return g / (1.0f + expf(-g));
}

/* ==== Programmatic dependent launch (sm_90) ====
 * A kernel launched with pdl_launch_config() may start while its predecessor in the stream
 * is still running. It must call pdl_wait() before it reads anything an earlier kernel wrote
 * and before it writes anything (an earlier kernel may still read it); work on constant data
 * (weights) may come first. pdl_wait() returns at once in a kernel launched without PDL.
 * pdl_trigger() lets the next kernel start launching now. */
__device__ __forceinline__ void pdl_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Launch configuration carrying the PDL attribute when cuda_pdl_enabled(). Fill in place
 * (cfg.attrs points into the struct) and launch with cudaLaunchKernelEx(&l.cfg, ...). */
typedef struct pdl_launch {
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute attr[2]; /* PDL, and a cluster shape (pdl_launch_cluster) */
} pdl_launch;

extern "C" int cuda_pdl_enabled(void);

static inline void pdl_launch_config(pdl_launch *l, dim3 grid, dim3 block, size_t smem,
                                     cudaStream_t st) {
    l->cfg = cudaLaunchConfig_t{};
    l->cfg.gridDim = grid;
    l->cfg.blockDim = block;
    l->cfg.dynamicSmemBytes = smem;
    l->cfg.stream = st;
    l->attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    l->attr[0].val.programmaticStreamSerializationAllowed = 1;
    l->cfg.attrs = l->attr;
    l->cfg.numAttrs = cuda_pdl_enabled() ? 1 : 0;
}

/* Adds a cluster shape of cx x 1 x 1 CTAs to a configuration from pdl_launch_config. */
static inline void pdl_launch_cluster(pdl_launch *l, unsigned cx) {
    cudaLaunchAttribute *at = &l->attr[l->cfg.numAttrs++];
    at->id = cudaLaunchAttributeClusterDimension;
    at->val.clusterDim.x = cx;
    at->val.clusterDim.y = 1;
    at->val.clusterDim.z = 1;
}

/* ==== Thread-block clusters (sm_90) ==== */
/* The two halves of a cluster barrier: arrive with no memory ordering (e.g. "this CTA has
 * started", before another may write its shared memory), and wait (acquire). */
__device__ __forceinline__ void cluster_arrive_relaxed(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

/* ==== cp.async (global -> shared, per thread) ====
 * src_bytes < the copy's size zero-fills the rest (0: nothing is read; gmem must still be a
 * valid address). Completion is per thread: cp_async_wait<N>() returns once at most N of this
 * thread's committed groups are pending; other threads' copies need a barrier after it. */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, int src_bytes) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem),
                 "r"(src_bytes));
}
__device__ __forceinline__ void cp_async8(void *smem, const void *gmem, int src_bytes) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(s), "l"(gmem),
                 "r"(src_bytes));
}
__device__ __forceinline__ void cp_async4(void *smem, const void *gmem, int src_bytes) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(s), "l"(gmem),
                 "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit(void) { asm volatile("cp.async.commit_group;"); }
template <int N> __device__ __forceinline__ void cp_async_wait(void) {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all(void) { cp_async_wait<0>(); }

/* ==== mbarrier and bulk async copies (sm_90) ====
 * A stage of shared memory filled by cp.async.bulk copies completes its "full" mbarrier
 * (mbar_expect announces the bytes, each copy's completion subtracts its own); consumers
 * wait on the barrier's phase parity. Used by the streaming GEMVs (gemv_tc.cu, qmv_bulk.cu). */
__device__ __forceinline__ uint32_t smem_u32(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void mbar_init(uint64_t *b, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count));
}
__device__ __forceinline__ void mbar_expect(uint64_t *b, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(b)),
                 "r"(bytes) : "memory");
}
/* A consumer's reads of a stage before the stage's refill by the async proxy. */
__device__ __forceinline__ void fence_proxy_async(void) {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *b) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t *b, uint32_t parity) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "MBAR_WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra MBAR_WAIT;\n"
        "}\n" ::"r"(smem_u32(b)),
        "r"(parity)
        : "memory");
}
/* Makes mbar_init's effects visible to the cluster (before the cluster barrier that lets
 * other CTAs store into this CTA's shared memory against the barrier). */
__device__ __forceinline__ void mbar_init_fence_cluster(void) {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
/* v stored at this CTA's shared-memory address p in the shared memory of the cluster's CTA
 * of rank r (the same variable there), its 4 bytes counted on that CTA's mbarrier bar (the
 * same variable there, expecting them): the reader waits on its own barrier, not on a
 * cluster barrier. */
__device__ __forceinline__ void dsmem_st_async_f32(float *p, int r, float v, uint64_t *bar) {
    uint32_t ra, rb;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(smem_u32(p)), "r"(r));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rb) : "r"(smem_u32(bar)), "r"(r));
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];"
                 ::"r"(ra), "r"(__float_as_uint(v)), "r"(rb) : "memory");
}
/* The CTA's S stage pairs: "full" completes on the producer's expect + copies, "empty" on one
 * arrival per consumer warp. Every thread calls it (it ends in a CTA barrier). */
__device__ __forceinline__ void mbar_init_stages(uint64_t *full, uint64_t *empty, int S,
                                                 int consumers) {
    if (threadIdx.x == 0) {
        for (int s = 0; s < S; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], consumers);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
}
__device__ __forceinline__ void bulk_g2s(void *dst, const void *src, uint32_t bytes, uint64_t *b) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
            smem_u32(dst)),
        "l"(src), "r"(bytes), "r"(smem_u32(b))
        : "memory");
}

/* bf16x2 of (lo, hi): lo in the low half, each rounded to nearest even. */
__device__ __forceinline__ uint32_t bf16x2_pack(float lo, float hi) {
    uint32_t d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}

/* ==== Tensor cores ==== */

/* d += a (16 x 16, row) * b (16 x 8, col), bf16 (or f16) in, fp32 accumulate (fragments per
 * PTX). */
#define MMA_16816(NAME, T)                                                                     \
    __device__ __forceinline__ void NAME(float d[4], uint32_t a0, uint32_t a1, uint32_t a2,    \
                                         uint32_t a3, uint32_t b0, uint32_t b1) {              \
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." T "." T ".f32 {%0, %1, %2, %3}, " \
                     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"                           \
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                          \
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));                  \
    }
MMA_16816(mma_bf16_16816, "bf16")
MMA_16816(mma_f16_16816, "f16")
#undef MMA_16816

/* The attention walks' MMA element type: bf16, or f16 (FH) for f16 KV pools, whose values it
 * then holds exactly (the queries pre-scaled by a power of two so that f16 cannot overflow). */
template <bool FH> __device__ __forceinline__ uint32_t attn_pk(float x0, float x1) {
    if constexpr (FH) {
        const __half2 v = __floats2half2_rn(x0, x1);
        return *(const uint32_t *)&v;
    }
    return pack_bf16x2(x0, x1);
}
/* x - the packed pair's value, element e: what the lo half carries */
template <bool FH> __device__ __forceinline__ float attn_rest(float x, uint32_t w, int e) {
    if constexpr (FH) return x - __half2float(__ushort_as_half((unsigned short)(w >> (16 * e))));
    return x - (e ? bf16_hi(w) : bf16_lo(w));
}
/* FH: the exponent ex with mx 2^-ex in [0.5, 1) (0 for 0 or non-finite): a query times 2^-ex
 * fits f16, its scores times 2^ex after the MMAs (exact scalings). */
__device__ __forceinline__ int attn_q_exp(float mx) {
    int ex = 0;
    if (mx > 0.f && mx < INFINITY) frexpf(mx, &ex);
    return ex;
}
template <bool FH>
__device__ __forceinline__ void attn_mma(float d[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
    if constexpr (FH) mma_f16_16816(d, a0, a1, a2, a3, b0, b1);
    else mma_bf16_16816(d, a0, a1, a2, a3, b0, b1);
}

/* ldmatrix: four 8 x 8 bf16 matrices from shared memory (lanes 8i..8i+7 give the row
 * addresses of matrix i); _t transposes each. */
__device__ __forceinline__ void ldsm_x4(uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3,
                                        const void *p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t &r0, uint32_t &r1, uint32_t &r2,
                                          uint32_t &r3, const void *p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(a));
}

/* d += a (16 x 32 u8, row) * b (32 x 8 s8, col), s32 accumulate (fragments per PTX). */
__device__ __forceinline__ void mma_u8s8_16832(int d[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                               uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* ==== Reductions ==== */

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Sum over the CTA in a fixed order (warps' sums, then warp 0..n-1): the total in every
 * thread. red: blockDim.x / 32 floats of shared memory, free for reuse after a barrier. */
/* K split: groups of ks consecutive warps (part = warp % ks) hold partial totals t of the same
 * P x R outputs: the same in every lane (after warp_sum, L = 1) or each lane its own (L = 32,
 * MMA fragments). Part 0 of each group gets the group's sum, in a fixed order (its own, then
 * parts 1, 2, ...); the other parts get false and have nothing left to do. red: [warps]
 * [P * R * L] shared floats. A CTA barrier: every thread calls it. */
template <int P, int R, int L = 1>
__device__ __forceinline__ bool ksplit_sum(float (&t)[P][R], float (*red)[P * R * L], int warp,
                                           int part, int ks) {
    const int l = L == 1 ? 0 : (int)(threadIdx.x & 31);
    if (L == 32 || (threadIdx.x & 31) == 0)
#pragma unroll
        for (int p = 0; p < P; p++)
#pragma unroll
            for (int r = 0; r < R; r++) red[warp][(p * R + r) * L + l] = t[p][r];
    __syncthreads();
    if (part != 0) return false;
    for (int i = 1; i < ks; i++)
#pragma unroll
        for (int p = 0; p < P; p++)
#pragma unroll
            for (int r = 0; r < R; r++) t[p][r] += red[warp + i][(p * R + r) * L + l];
    return true;
}

__device__ __forceinline__ float block_sum(float v, float *red) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float tot = 0.f;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) tot += red[i];
    return tot;
}

#endif
