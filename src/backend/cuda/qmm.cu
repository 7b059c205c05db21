/* Quantized matmul for prefill-sized row counts (qmm), the dequantize kernel, and the
 * quantized embedding gather.
 *
 * qmm: y[rows, N] = x[rows, K] @ Wq^T. The weight is dequantized slab by slab (tile_m rows
 * of W, the GEMM's M in cuBLAS terms) into a bf16 scratch, and each slab runs one cuBLASLt
 * bf16 GEMM (fp32 accumulate, fp32 out written straight into y's columns [n0, n0 + tile)).
 * x is converted to bf16 once per call. Dequantized values are the CPU reference's (scales
 * dtype rounding) then rounded to bf16 (exact for bf16 scales, the common case). A slab of
 * <= ~16 MiB stays in L2 between its dequantize and its GEMM, so for modest row counts the
 * dequantized bytes never travel to HBM; big slabs give cuBLASLt bigger problems for long
 * prefills. This is the "dequantize + cuBLASLt" design, not a fused tensor-core kernel: the
 * extra cost is one write + read of the bf16 slab per call, small next to the GEMM at 2048
 * rows (about 2 * rows flops per weight byte). */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "backend/cuda/cuda_elem.h"
#include "backend/cuda/cuda_lt.h"
#include "backend/cuda/cuda_info.h"
#include "backend/cuda/qkern.cuh"
#include "backend/cuda/qtile.cuh"

/* Code k of row n of a tiled weight and its group's scale and bias (bf16), as fp32. */
__device__ __forceinline__ float qt_code(const uint8_t *w, const qt_shape &s, int n, int k) {
    int sh;
    const uint32_t v = __ldg((const uint32_t *)(w + qt_code_word(s, n, k, &sh)));
    return (float)((v >> sh) & ((1u << s.bits) - 1u));
}
__device__ __forceinline__ float qt_sb(const uint8_t *w, const qt_shape &s, int n, int k, int b) {
    return bf16_lo(__ldg((const uint16_t *)(w + qt_sb_half(s, n, k, b))));
}
/* Its dequantized value, as q_value computes it for the MLX layout. */
__device__ __forceinline__ float qt_value(const uint8_t *w, const qt_shape &s, int n, int k) {
    return q_round_sb(__fadd_rn(__fmul_rn(qt_sb(w, s, n, k, 0), qt_code(w, s, n, k)),
                                qt_sb(w, s, n, k, 1)),
                      CUDA_QSB_BF16);
}

/* ==== Dequantize to bf16 ==== */
/* Thread per 8 consecutive codes (one group: 8 | group). grid (ceil(K / 8 / 128), n).
 * tiled: w in the tiled layout (bf16 scales inside). */
__global__ void qdequant_kernel(uint16_t *out, long ldo, const uint32_t *w, const void *s,
                                const void *b, int sbt, int tiled, int n0, int K, int bits,
                                int group) {
    const int r = blockIdx.y, k0 = (blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (k0 >= K) return;
    const int n = n0 + r;
    const uint32_t *row = w + (size_t)n * K * bits / 32;
    const size_t gi = (size_t)n * (K / group) + k0 / group;
    const qt_shape ts = qt_of(bits, group, K);
    const uint8_t *tw = (const uint8_t *)w;
    const float sc = tiled ? qt_sb(tw, ts, n, k0, 0) : q_sb_load_rt(s, sbt, gi);
    const float bi = tiled ? qt_sb(tw, ts, n, k0, 1) : q_sb_load_rt(b, sbt, gi);
    float f[8];
#pragma unroll
    for (int e = 0; e < 8; e++) {
        const float q = tiled ? qt_code(tw, ts, n, k0 + e) : (float)q_code(row, k0 + e, bits);
        f[e] = q_round_sb(__fadd_rn(__fmul_rn(sc, q), bi), sbt);
    }
    uint16_t *o = out + (size_t)r * ldo + k0;
    if ((((uintptr_t)o) & 15) == 0) {
        *(uint4 *)o = f32x8_to_bf16x8(f);
    } else {
#pragma unroll
        for (int e = 0; e < 8; e++) o[e] = (uint16_t)f32_to_bf16_bits(f[e]);
    }
}

/* A tiled weight's rows [n0, n0 + nr) (n0 % 16 == 0), bf16 scales: one CTA a block (batch
 * blockIdx.x of row tile n0 / 16 + blockIdx.y), thread i its 16-byte quad i (one coalesced
 * 4 KB read a block) -> 32 (4-bit) or 16 (8-bit) consecutive codes of one row, written as
 * bf16 16-byte stores. The per-code path above reads the tiled layout 4 bytes at a time:
 * a 2048-token 4-bit prefill ran at 20.7k tok/s with it against 22.7k on the MLX layout. */
template <int BITS>
__global__ void __launch_bounds__(256)
qt_dequant_kernel(uint16_t *out, long ldo, const uint8_t *w, int n0, int nr, int K, int group) {
    const qt_shape s = qt_of(BITS, group, K);
    const qt_quad d = qt_quad_at(threadIdx.x, s.LQ);
    const int n = n0 + (int)blockIdx.y * 16 + d.g + 8 * d.ab;
    const int k = ((int)blockIdx.x * s.U + d.u) * 128 + 32 * d.t + d.q * (128 / BITS);
    if (n >= n0 + nr || k >= K) return;
    const uint4 v = __ldg((const uint4 *)(w + qt_block(s, n, k) + 16 * threadIdx.x));
    const float sc = qt_sb(w, s, n, k, 0), bi = qt_sb(w, s, n, k, 1);
    const uint32_t wd[4] = {v.x, v.y, v.z, v.w};
    uint16_t *o = out + (size_t)(n - n0) * ldo + k;
    constexpr int PER = 32 / BITS; /* codes a word */
#pragma unroll
    for (int h = 0; h < 4 * PER / 8; h++) { /* 8 codes a store */
        float f[8];
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const int c = 8 * h + e;
            const float qv = (float)((wd[c / PER] >> (BITS * (c % PER))) & ((1u << BITS) - 1u));
            f[e] = q_round_sb(__fadd_rn(__fmul_rn(sc, qv), bi), CUDA_QSB_BF16);
        }
        if ((((uintptr_t)(o + 8 * h)) & 15) == 0) {
            *(uint4 *)(o + 8 * h) = f32x8_to_bf16x8(f);
        } else {
#pragma unroll
            for (int e = 0; e < 8; e++) o[8 * h + e] = (uint16_t)f32_to_bf16_bits(f[e]);
        }
    }
}

static bool q_shape_ok(int K, int bits, int group) {
    return (group == 32 || group == 64 || group == 128) && K >= group && K % group == 0 &&
           bits >= 2 && bits <= 8 && bits != 7;
}

/* a tiled weight: bits 4 / 8, group 64 / 128, bf16 scales (cuda_q_tile); else the MLX
 * layout's three arrays */
static bool q_arrays_ok(const void *w, const void *s, const void *b, int sbt, int tiled, int bits,
                        int group) {
    if (!w || sbt < CUDA_QSB_BF16 || sbt > CUDA_QSB_F32) return false;
    if (!tiled) return s && b;
    return (bits == 4 || bits == 8) && group >= 64 && sbt == CUDA_QSB_BF16 &&
           ((uintptr_t)w & 15) == 0;
}

extern "C" int cuda_qdequant_bf16(uint16_t *out, long ldo, const uint32_t *w, const void *scales,
                                  const void *biases, int sb_dtype, int tiled, int n0, int n,
                                  int K, int bits, int group, cudaStream_t st) {
    if (!out || n < 1 || n0 < 0 || n > 65535 || ldo < K || !q_shape_ok(K, bits, group) ||
        !q_arrays_ok(w, scales, biases, sb_dtype, tiled, bits, group))
        return (int)cudaErrorInvalidValue;
    if (tiled && n0 % 16 == 0) {
        const dim3 b(qt_of(bits, group, K).NB, (n + 15) / 16);
        const uint8_t *tw = (const uint8_t *)w;
        if (bits == 4) qt_dequant_kernel<4><<<b, 256, 0, st>>>(out, ldo, tw, n0, n, K, group);
        else qt_dequant_kernel<8><<<b, 256, 0, st>>>(out, ldo, tw, n0, n, K, group);
        return (int)cudaGetLastError();
    }
    const dim3 g((K / 8 + 127) / 128, n);
    qdequant_kernel<<<g, 128, 0, st>>>(out, ldo, w, scales, biases, sb_dtype, tiled, n0, K, bits,
                                       group);
    return (int)cudaGetLastError();
}

/* ==== Quantized embedding gather ==== */
__global__ void qembed_kernel(float *out, const uint32_t *w, const void *s, const void *b,
                              int sbt, int tiled, const int32_t *ids, int V, int H, int bits,
                              int group, float scale, int round) {
    const int i = blockIdx.x;
    int id = ids[i];
    id = id < 0 ? 0 : id >= V ? V - 1 : id; /* ids are validated at submit; never read out of range */
    const uint32_t *row = w + (size_t)id * H * bits / 32;
    const size_t g0 = (size_t)id * (H / group);
    const float sc = round ? q_round_sb(scale, sbt) : scale;
    float *dst = out + (size_t)i * H;
    const qt_shape ts = qt_of(bits, group, H);
    const uint8_t *tw = (const uint8_t *)w;
    for (int j = threadIdx.x; j < H; j += blockDim.x) {
        float v = tiled ? qt_value(tw, ts, id, j)
                        : q_value(row, s, b, sbt, g0 + j / group, j, bits);
        if (sc != 1.0f) {
            v = __fmul_rn(v, sc);
            if (round) v = q_round_sb(v, sbt);
        }
        dst[j] = v;
    }
}

extern "C" int cuda_qembed(float *out, const uint32_t *w, const void *scales, const void *biases,
                           int sb_dtype, int tiled, const int32_t *ids, int n, int V, int H,
                           int bits, int group, float scale, int round_scale, cudaStream_t st) {
    if (!out || !ids || n < 1 || V < 1 || !q_shape_ok(H, bits, group) ||
        !q_arrays_ok(w, scales, biases, sb_dtype, tiled, bits, group))
        return (int)cudaErrorInvalidValue;
    qembed_kernel<<<n, 256, 0, st>>>(out, w, scales, biases, sb_dtype, tiled, ids, V, H, bits,
                                     group, scale, round_scale);
    return (int)cudaGetLastError();
}

/* ==== qmm: cuBLASLt plans (per shape, LRU) ==== */
#define QMM_PLANS 32
typedef struct qmm_plan {
    void *lt;
    int N, K, rows;
    long ldo;
    uint32_t align_c;                     /* byte alignment of the output pointer */
    cu_lt_desc d;                         /* d.op != NULL: the slot is in use */
    unsigned long long last_use;
} qmm_plan;
/* per device: under TP each GPU's thread looks up its own plans (no shared LRU to race on) */
static qmm_plan s_plans[CUDA_MAX_DEVICES][QMM_PLANS];
static unsigned long long s_clock[CUDA_MAX_DEVICES];

static void plan_destroy(qmm_plan *p) {
    cu_lt_desc_destroy(&p->d);
    memset(p, 0, sizeof *p);
}

extern "C" void cuda_qmm_release(void) {
    const int cd = cuda_cur_device(); /* the calling thread's device (its backend state) */
    for (int i = 0; i < QMM_PLANS; i++) plan_destroy(&s_plans[cd][i]);
}

/* Column-major view: D[N, rows] (ld ldo) = A^T B with A = the bf16 slab as K x N (ld K),
 * B = bf16 x as K x rows (ld K), as the dense path's cuBLASLt call. */
static qmm_plan *plan_get(void *lt, int N, int K, int rows, long ldo, uint32_t align_c,
                          size_t ws_bytes) {
    const int cd = cuda_cur_device();
    qmm_plan *lru = &s_plans[cd][0];
    for (int i = 0; i < QMM_PLANS; i++) {
        qmm_plan *p = &s_plans[cd][i];
        if (p->d.op && p->lt == lt && p->N == N && p->K == K && p->rows == rows && p->ldo == ldo &&
            p->align_c == align_c) {
            p->last_use = ++s_clock[cd];
            return p;
        }
        if (!p->d.op || p->last_use < lru->last_use) lru = p;
    }
    plan_destroy(lru);
    qmm_plan *p = lru;
    p->lt = lt, p->N = N, p->K = K, p->rows = rows, p->ldo = ldo, p->align_c = align_c;
    p->last_use = ++s_clock[cd];
    /* A = the slab (ld K); the output's alignment as measured */
    cu_lt_desc_make(&p->d, (cublasLtHandle_t)lt, N, K, rows, K, ldo, ws_bytes, align_c);
    return p;
}

/* ==== qmm ==== */
static const int k_tiles[CUDA_QMM_TILE_COUNT] = CUDA_QMM_TILE_VALUES;

extern "C" int cuda_qmm_valid_tile_m(int tile_m) {
    for (int i = 0; i < CUDA_QMM_TILE_COUNT; i++)
        if (k_tiles[i] == tile_m) return 1;
    return 0;
}

extern "C" int cuda_qmm_default_tile_m(int rows, int N, int K, int bits) {
    (void)bits;
    /* few rows: slabs of <= 16 MiB that stay in L2 (the GEMM is short, the dequantized
     * bytes would dominate); long prefills: <= 128 MiB slabs for big GEMMs */
    const size_t budget = rows <= 256 ? ((size_t)16 << 20) : ((size_t)128 << 20);
    int best = k_tiles[0];
    for (int i = 0; i < CUDA_QMM_TILE_COUNT; i++) {
        if ((size_t)k_tiles[i] * K * 2 > budget) break;
        best = k_tiles[i];
        if (k_tiles[i] >= N) break; /* one slab covers the weight */
    }
    return best;
}

static size_t al256(size_t n) { return (n + 255) & ~(size_t)255; }

extern "C" size_t cuda_qmm_scratch_bytes(int rows, int N, int K, int tile_m) {
    const int slab = tile_m < N ? tile_m : N;
    return al256((size_t)rows * K * 2) + al256((size_t)slab * K * 2);
}

extern "C" int cuda_qmm(const cuda_qmm_args *a, int tile_m, cudaStream_t st) {
    if (!a || !q_arrays_ok(a->w, a->scales, a->biases, a->sb_dtype, a->tiled, a->bits, a->group) ||
        !a->x || !a->y || !a->lt || a->rows < 1 ||
        a->N < 1 || a->ldx < a->K || a->ldy < a->N || !q_shape_ok(a->K, a->bits, a->group) ||
        a->K % 8 || !cuda_qmm_valid_tile_m(tile_m) || !a->scratch ||
        a->scratch_bytes < cuda_qmm_scratch_bytes(a->rows, a->N, a->K, tile_m))
        return (int)cudaErrorInvalidValue;
    uint16_t *xbf = (uint16_t *)a->scratch;
    uint16_t *slab = (uint16_t *)((char *)a->scratch + al256((size_t)a->rows * a->K * 2));
    int rc = cuda_f32_to_bf16_rows(xbf, a->x, a->ldx, a->rows, a->K, st);
    if (rc) return rc;
    const float alpha = 1.0f, beta = 0.0f;
    for (int n0 = 0; n0 < a->N; n0 += tile_m) {
        const int n = a->N - n0 < tile_m ? a->N - n0 : tile_m;
        rc = cuda_qdequant_bf16(slab, a->K, a->w, a->scales, a->biases, a->sb_dtype, a->tiled,
                                n0, n, a->K, a->bits, a->group, st);
        if (rc) return rc;
        float *y = a->y + n0;
        /* the output columns start inside y's rows: tell the heuristic their alignment */
        uint32_t align_c = 256;
        while (align_c > 4 && ((uintptr_t)y % align_c || (a->ldy * 4) % align_c)) align_c >>= 1;
        const cu_lt_desc *d = &plan_get(a->lt, n, a->K, a->rows, a->ldy, align_c,
                                        a->lt_ws_bytes)->d;
        if (!d->ok) return (int)cudaErrorNotSupported;
        if (cublasLtMatmul((cublasLtHandle_t)a->lt, d->op, &alpha, slab, d->a, xbf, d->b, &beta,
                           y, d->c, y, d->c, &d->algo, a->lt_ws, a->lt_ws_bytes, st))
            return (int)cudaErrorNotSupported;
    }
    return 0;
}
