/* Flash attention on tensor cores for prefill chunks and mixed steps (FlashAttention-2 layout,
 * mma.sync m16n8k16 bf16 -> fp32), reading K/V straight from the paged or dense bf16 pools.
 *
 * Grid (tile, kv head), 4 warps. A tile is up to 64 query vectors: the rows of one sequence
 * times the G query heads of the kv head (vector qv = local row * G + g), so each K/V tile in
 * shared memory serves 64 queries. Warp w owns query vectors 16w..16w+15 (the M of the mma).
 * Per 64-key tile: S = Q K^T (Q fragments stay in registers; K B-fragments by ldmatrix), mask
 * (causal per query vector, sliding window, tile end), optional soft-cap, online softmax in
 * the log2 domain (q pre-scaled by scale * log2 e), then O += P V with P reused from the S
 * accumulators as A fragments (the FA2 register trick) and V B-fragments by ldmatrix.trans.
 * K/V rows are gathered through the page table with cp.async (16 bytes), zero-filled past
 * the end; rows padded by 8 bf16 so ldmatrix rows hit distinct banks. Pools of the other
 * cache types are decoded (kv_codec.cuh) and rounded to bf16 into the same tiles.
 * Instantiated for head_dim 64 and 128. Output fp32 [n_rows, Hq, D]. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_elem.h"
#include "backend/cuda/cuda_info.h"
#include "backend/cuda/cuda_kernels.cuh"
#include "backend/cuda/kv_codec.cuh"

#define FA_WARPS 4
#define FA_QV 64   /* query vectors per CTA (16 per warp) */
#define FA_KT 64   /* keys per tile */
#define FA_PAD 8   /* bf16 elements of padding per smem row */


/* Values c..c+7 of a head into a tile row: a bf16 pool (an f16 one on the f16 walk, FH) by
 * cp.async (zeros when !live), any other type decoded (kv_codec.cuh) and rounded to bf16. */
template <int D, bool FH>
__device__ __forceinline__ void fa_load8(uint16_t *dst, const void *pool, int type,
                                         const float *code, size_t head, int c, bool live) {
    if (type == (FH ? CUDA_KV_F16 : CUDA_KV_BF16)) {
        cp_async16(dst, (const uint16_t *)pool + head * D + c, live ? 16 : 0);
        return;
    }
    float v[8] = {0.f};
    if (live) kv_dec8((const uint8_t *)pool + head * kv_fmt_head_bytes(type, D), type, code, c, v);
    *(uint4 *)dst = f32x8_to_bf16x8(v);
}

/* The raw path (pools of a type other than bf16 / f32): a tile's 64 heads copied as stored
 * (cp.async, zeros for keys past the end, which decode to zeros), decoded into sK / sV once
 * they land, so the next tile's copies run under this tile's MMAs. Decoding kv_dec8's
 * values from shared memory gives the bits of the direct path (fa_load8). */
__host__ __device__ __forceinline__ bool fa_raw(const cuda_kv_fmt &kf, const cuda_kv_fmt &vf) {
    return (kf.type != CUDA_KV_BF16 || vf.type != CUDA_KV_BF16) && kf.type != CUDA_KV_F32 &&
           vf.type != CUDA_KV_F32;
}
__device__ __forceinline__ void fa_copy_raw(uint8_t *dst, const void *pool, int hb,
                                            const int64_t *phys, int Hkv, int h) {
    const int cw = hb % 16 == 0 ? 16 : hb % 8 == 0 ? 8 : 4, wpk = hb / cw; /* every head: 4 | hb */
    for (int i = threadIdx.x; i < FA_KT * wpk; i += blockDim.x) {
        const int j = i / wpk, c = (i - j * wpk) * cw;
        const int64_t r = phys[j];
        const uint8_t *src = (const uint8_t *)pool + (r >= 0 ? ((size_t)r * Hkv + h) * hb + c : 0);
        const int n = r >= 0 ? cw : 0;
        if (cw == 16) cp_async16(dst + j * hb + c, src, n);
        else if (cw == 8) cp_async8(dst + j * hb + c, src, n);
        else cp_async4(dst + j * hb + c, src, n);
    }
}

/* FH: f16 pools (both) on f16 MMAs: K / V copied as stored, Q and P in f16, each query vector
 * scaled by a power of two (attn_q_exp) and its scores scaled back. */
template <int D, bool FH>
__global__ void __launch_bounds__(FA_WARPS * 32) attn_flash_kernel(cuda_attn_rows_args a) {
    constexpr int LD = D + FA_PAD; /* smem row stride (bf16) */
    constexpr int KS = D / 16;     /* k-steps of Q K^T */
    constexpr int DN = D / 8;      /* n-tiles of O */
    extern __shared__ __align__(16) uint16_t fa_smem[];
    uint16_t *sQ = fa_smem;              /* [FA_QV][LD] */
    uint16_t *sK = sQ + FA_QV * LD;      /* [FA_KT][LD] */
    uint16_t *sV = sK + FA_KT * LD;      /* [FA_KT][LD] */
    __shared__ int sPos[FA_QV], sStart[FA_QV];
    __shared__ int64_t sPhys[FA_KT];
    __shared__ int sQex[FH ? FA_QV : 1];
    __shared__ float sCode[2][16]; /* TurboQuant codes (published by the barrier after Q) */
    if (threadIdx.x == 0) kv_code_copy(sCode[0], a.kf), kv_code_copy(sCode[1], a.vf);

    const int G = a.n_heads / a.n_kv_heads, Hq = a.n_heads, Hkv = a.n_kv_heads;
    const int t = blockIdx.x, h = blockIdx.y;
    const int row0 = a.tile_row0[t], QV = a.tile_n[t] * G;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int32_t *table = a.table + (size_t)a.seq[row0] * a.table_stride;
    const float qscale = a.scale * 1.4426950408889634f;
    const float cap2 = a.softcap > 0.f ? a.softcap * 1.4426950408889634f : 0.f;

    /* ---- Q (scaled, bf16 or f16) and the key range of every query vector ---- */
    if constexpr (FH) {
        for (int qv = threadIdx.x; qv < FA_QV; qv += blockDim.x) {
            float mx = 0.f;
            if (qv < QV) {
                const float *src = a.q + ((size_t)(row0 + qv / G) * Hq + h * G + qv % G) * D;
                for (int d = 0; d < D; d++) mx = fmaxf(mx, fabsf(src[d] * qscale));
            }
            sQex[qv] = attn_q_exp(mx);
        }
        __syncthreads();
    }
    for (int idx = threadIdx.x; idx < FA_QV * (D / 2); idx += blockDim.x) {
        const int qv = idx / (D / 2), d = (idx - qv * (D / 2)) * 2;
        float x0 = 0.f, x1 = 0.f;
        if (qv < QV) {
            const float *src = a.q + ((size_t)(row0 + qv / G) * Hq + h * G + qv % G) * D + d;
            x0 = src[0] * qscale;
            x1 = src[1] * qscale;
            if constexpr (FH) x0 = ldexpf(x0, -sQex[qv]), x1 = ldexpf(x1, -sQex[qv]);
        }
        *(uint32_t *)&sQ[qv * LD + d] = attn_pk<FH>(x0, x1);
    }
    for (int qv = threadIdx.x; qv < FA_QV; qv += blockDim.x) {
        int p = -1, st = 1 << 30; /* padding vectors see nothing */
        if (qv < QV) {
            p = a.pos[row0 + qv / G];
            st = a.window > 0 && p - a.window + 1 > 0 ? p - a.window + 1 : 0;
            if (a.chunk > 0) st = max(st, p - p % a.chunk); /* chunked layer: its chunk */
        }
        sPos[qv] = p;
        sStart[qv] = st;
    }
    __syncthreads();
    int kmin = 1 << 30, kmax = -1;
    for (int qv = 0; qv < QV; qv++) {
        kmin = min(kmin, sStart[qv]);
        kmax = max(kmax, sPos[qv]);
    }

    /* Q fragments of this warp's 16 vectors, all k-steps (ldmatrix x4: rows 0-7 / 8-15 x
     * dims 0-7 / 8-15 of the step) */
    uint32_t qa[KS][4];
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
        const int r = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, c = ks * 16 + (lane >> 4) * 8;
        ldsm_x4(qa[ks][0], qa[ks][1], qa[ks][2], qa[ks][3], &sQ[r * LD + c]);
    }
    const int qa_row = warp * 16 + (lane >> 2), qb_row = qa_row + 8; /* accumulator rows */
    const int pa = sPos[qa_row], pb = sPos[qb_row], sa = sStart[qa_row], sb = sStart[qb_row];
    const float qma = FH ? ldexpf(1.f, sQex[FH ? qa_row : 0]) : 1.f,
                qmb = FH ? ldexpf(1.f, sQex[FH ? qb_row : 0]) : 1.f;

    float o[DN][4];
#pragma unroll
    for (int i = 0; i < DN; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float ma = -INFINITY, mb = -INFINITY, la = 0.f, lb = 0.f;

    /* the physical rows of the keys of the tile at k0 (-1 past kmax) */
    const auto tile_phys = [&](int k0) {
        if (threadIdx.x < FA_KT) {
            const int p = k0 + threadIdx.x;
            sPhys[threadIdx.x] = p <= kmax ? (int64_t)table[p / a.block] * a.block + p % a.block : -1;
        }
    };
    const bool raw = !FH && fa_raw(a.kf, a.vf);
    const int hbk = (int)kv_fmt_head_bytes(a.kf.type, D), hbv = (int)kv_fmt_head_bytes(a.vf.type, D);
    uint8_t *rawK = (uint8_t *)(sV + FA_KT * LD), *rawV = rawK + FA_KT * hbk;
    const auto copy_raw = [&]() {
        fa_copy_raw(rawK, a.k_pool, hbk, sPhys, Hkv, h);
        fa_copy_raw(rawV, a.v_pool, hbv, sPhys, Hkv, h);
        cp_async_commit();
    };
    if (raw && kmin <= kmax) {
        tile_phys(kmin);
        __syncthreads();
        copy_raw();
    }
    for (int k0 = kmin; k0 <= kmax; k0 += FA_KT) {
        if (raw) { /* ---- this tile's raw heads landed: decode; the next tile's copies ---- */
            cp_async_wait_all();
            __syncthreads(); /* every thread's copies; sPhys read by all of them */
            if (k0 + FA_KT <= kmax) tile_phys(k0 + FA_KT);
            for (int idx = threadIdx.x; idx < FA_KT * (D / 8); idx += blockDim.x) {
                const int j = idx / (D / 8), c = (idx - j * (D / 8)) * 8;
                float v[8];
                kv_dec8(rawK + j * hbk, a.kf.type, sCode[0], c, v);
                *(uint4 *)&sK[j * LD + c] = f32x8_to_bf16x8(v);
                kv_dec8(rawV + j * hbv, a.vf.type, sCode[1], c, v);
                *(uint4 *)&sV[j * LD + c] = f32x8_to_bf16x8(v);
            }
            __syncthreads(); /* sK / sV written, the raw buffers free, sPhys of the next tile */
            if (k0 + FA_KT <= kmax) copy_raw();
        } else {
            /* ---- K/V tile: page-table gather, cp.async 16 bytes, zero past kmax ---- */
            tile_phys(k0);
            __syncthreads();
            for (int idx = threadIdx.x; idx < FA_KT * (D / 8); idx += blockDim.x) {
                const int j = idx / (D / 8), c = (idx - j * (D / 8)) * 8;
                const int64_t r = sPhys[j];
                const size_t head = r >= 0 ? (size_t)r * Hkv + h : 0;
                fa_load8<D, FH>(&sK[j * LD + c], a.k_pool, a.kf.type, sCode[0], head, c, r >= 0);
                fa_load8<D, FH>(&sV[j * LD + c], a.v_pool, a.vf.type, sCode[1], head, c, r >= 0);
            }
            asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
            __syncthreads();
        }

        /* ---- S = Q K^T: 8 n-tiles of 8 keys ---- */
        float s[FA_KT / 8][4];
#pragma unroll
        for (int j = 0; j < FA_KT / 8; j++) {
            s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
            for (int ks = 0; ks < KS; ks += 2) {
                uint32_t b0, b1, b2, b3;
                ldsm_x4(b0, b1, b2, b3, &sK[(j * 8 + (lane & 7)) * LD + ks * 16 + (lane >> 3) * 8]);
                attn_mma<FH>(s[j], qa[ks][0], qa[ks][1], qa[ks][2], qa[ks][3], b0, b1);
                attn_mma<FH>(s[j], qa[ks + 1][0], qa[ks + 1][1], qa[ks + 1][2], qa[ks + 1][3], b2, b3);
            }
        }
        /* ---- mask, soft-cap, tile max per row (the 4 lanes of a quad share a row) ---- */
        float ta = -INFINITY, tb = -INFINITY;
#pragma unroll
        for (int j = 0; j < FA_KT / 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int key = k0 + j * 8 + (lane & 3) * 2 + e;
                float va = s[j][e], vb = s[j][2 + e];
                if constexpr (FH) va *= qma, vb *= qmb;
                if (cap2 > 0.f) {
                    va = cap2 * tanhf(va / cap2);
                    vb = cap2 * tanhf(vb / cap2);
                }
                va = key >= sa && key <= pa ? va : -INFINITY;
                vb = key >= sb && key <= pb ? vb : -INFINITY;
                s[j][e] = va;
                s[j][2 + e] = vb;
                ta = fmaxf(ta, va);
                tb = fmaxf(tb, vb);
            }
#pragma unroll
        for (int m = 1; m < 4; m <<= 1) {
            ta = fmaxf(ta, __shfl_xor_sync(0xffffffffu, ta, m));
            tb = fmaxf(tb, __shfl_xor_sync(0xffffffffu, tb, m));
        }
        const float na = fmaxf(ma, ta), nb = fmaxf(mb, tb);
        /* alpha: 0 on the first live tile; rows that saw nothing yet keep m = -inf */
        const float aa = ma == -INFINITY ? 0.f : exp2f(ma - na);
        const float ab = mb == -INFINITY ? 0.f : exp2f(mb - nb);
        ma = na;
        mb = nb;
        la *= aa;
        lb *= ab;
#pragma unroll
        for (int i = 0; i < DN; i++) {
            o[i][0] *= aa;
            o[i][1] *= aa;
            o[i][2] *= ab;
            o[i][3] *= ab;
        }
        /* ---- P (bf16 A fragments from the S accumulators) and O += P V ---- */
#pragma unroll
        for (int kt = 0; kt < FA_KT / 16; kt++) {
            float p[2][4];
#pragma unroll
            for (int u = 0; u < 2; u++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float mrow = e < 2 ? ma : mb;
                    const float v = s[2 * kt + u][e];
                    p[u][e] = mrow == -INFINITY || v == -INFINITY ? 0.f : exp2f(v - mrow);
                }
            la += p[0][0] + p[0][1] + p[1][0] + p[1][1];
            lb += p[0][2] + p[0][3] + p[1][2] + p[1][3];
            const uint32_t a0 = attn_pk<FH>(p[0][0], p[0][1]), a1 = attn_pk<FH>(p[0][2], p[0][3]);
            const uint32_t a2 = attn_pk<FH>(p[1][0], p[1][1]), a3 = attn_pk<FH>(p[1][2], p[1][3]);
#pragma unroll
            for (int dn = 0; dn < DN; dn += 2) {
                uint32_t b0, b1, b2, b3;
                const int key = kt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
                ldsm_x4_t(b0, b1, b2, b3, &sV[key * LD + dn * 8 + (lane >> 4) * 8]);
                attn_mma<FH>(o[dn], a0, a1, a2, a3, b0, b1);
                attn_mma<FH>(o[dn + 1], a0, a1, a2, a3, b2, b3);
            }
        }
        __syncthreads(); /* the next tile overwrites sK / sV */
    }

    /* ---- normalise (row sums across the quad) and write ---- */
#pragma unroll
    for (int m = 1; m < 4; m <<= 1) {
        la += __shfl_xor_sync(0xffffffffu, la, m);
        lb += __shfl_xor_sync(0xffffffffu, lb, m);
    }
    const float ia = la > 0.f ? 1.f / la : 0.f, ib = lb > 0.f ? 1.f / lb : 0.f;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int qv = half ? qb_row : qa_row;
        if (qv >= QV) continue;
        float *orow = a.o + ((size_t)(row0 + qv / G) * Hq + h * G + qv % G) * D;
        const float inv = half ? ib : ia;
#pragma unroll
        for (int dn = 0; dn < DN; dn++) {
            const int d = dn * 8 + (lane & 3) * 2;
            *(float2 *)&orow[d] = make_float2(o[dn][half * 2] * inv, o[dn][half * 2 + 1] * inv);
        }
    }
}

template <int D, bool FH>
static int flash_launch(const cuda_attn_rows_args *a, cudaStream_t st) {
    /* the tiles, and on the raw path the raw heads (at most 2 D bytes each: f16 / bf16) */
    const size_t tiles = (size_t)(FA_QV + 2 * FA_KT) * (D + FA_PAD) * sizeof(uint16_t);
    const size_t smem = tiles + (!FH && fa_raw(a->kf, a->vf) ? (size_t)FA_KT *
                                    (kv_fmt_head_bytes(a->kf.type, D) + kv_fmt_head_bytes(a->vf.type, D)) : 0);
    static bool s_set[CUDA_MAX_DEVICES]; /* the attribute is per device */
    const int cd = cuda_cur_device();
    if (!s_set[cd]) {
        const cudaError_t e = cudaFuncSetAttribute(attn_flash_kernel<D, FH>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   (int)(tiles + (size_t)FA_KT * 4 * D));
        if (e != cudaSuccess) return (int)e;
        s_set[cd] = true;
    }
    attn_flash_kernel<D, FH><<<dim3(a->n_tiles, a->n_kv_heads), FA_WARPS * 32, smem, st>>>(*a);
    return (int)cudaGetLastError();
}

extern "C" int cuda_attn_flash(const cuda_attn_rows_args *a, cudaStream_t st) {
    if (!a || a->n_tiles < 1 || (a->head_dim != 64 && a->head_dim != 128) || a->splits > 1 ||
        a->n_kv_heads < 1 || a->n_heads % a->n_kv_heads != 0 ||
        a->n_heads / a->n_kv_heads > CUDA_ATTN_FLASH_QV || a->block < 1 || a->table_stride < 1 ||
        !a->q || !a->o || !a->k_pool || !a->v_pool || !a->pos || !a->seq || !a->table ||
        !a->tile_row0 || !a->tile_n || ((uintptr_t)a->k_pool & 15) || ((uintptr_t)a->v_pool & 15))
        return (int)cudaErrorInvalidValue;
    const bool fh = a->kf.type == CUDA_KV_F16 && a->vf.type == CUDA_KV_F16;
    if (a->head_dim == 128) return fh ? flash_launch<128, true>(a, st) : flash_launch<128, false>(a, st);
    return fh ? flash_launch<64, true>(a, st) : flash_launch<64, false>(a, st);
}
