/* CPU matmul: out[n, N] = x[n, K] @ w[N, K]^T (+ bias[N]), batch-invariant by construction.
 *
 * Every output value out[r, j] is computed by the *canonical dot product* of x[r] and w[j]
 * (see cpu_dot_ref below), whatever the number of rows n, the thread count, the kernel family
 * (scalar, AVX2, AVX-512) or the tile a value falls in:
 *   - 16 lanes: element k goes to lane k % 16; the last chunk is zero-padded to 16;
 *   - each lane accumulates with fused multiply-add, k ascending, from +0;
 *   - lanes fold in a fixed tree: l += l + 8, then l += l + 4, l += l + 2, l += l + 1;
 *   - then + bias[j] (fp32) when there is a bias.
 * Weights are widened to fp32 exactly in registers (bf16: 16-bit shift; fp16: exact
 * conversion). The rows of a step therefore never influence each other: decode rows, prefill
 * chunks of any size and any mix of sequences give every row the same value
 * (docs/engine.md, "Batch invariance"). There is deliberately no BLAS path: sgemm's blocking changes the summation order
 * with the shape of the product.
 *
 * Speed: rows are processed in blocks of MR and columns in tiles of NC (register blocking: one
 * weight vector load serves MR rows, one x vector load serves NC columns); OpenMP splits the
 * output columns into panels (never K). A panel of weight rows (~128 KiB) stays in L2 while
 * all row blocks sweep it, so each weight byte comes from memory once per product. Widening a
 * panel to fp32 once for many rows was measured slower than widening in registers (Zen 5,
 * AVX-512 and AVX2 alike) and is not done. */
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"

/* Weight element kinds of the kernels (index into kernel_set.tile). */
enum { WT_BF16 = 0, WT_F16 = 1, WT_F32 = 2, WT_COUNT };

/* out[r * ldo + c] = dot(x[r * ldx ..], w[c * ldw_bytes ..]) (+ bias[c]) for r < nr, c < nc. */
typedef void (*tile_fn)(int nr, int nc, const float *x, int64_t ldx, const char *w,
                        int64_t ldw_bytes, int64_t K, float *out, int64_t ldo, const float *bias);

typedef struct kernel_set {
    cpu_isa isa;
    int mr, nc;          /* rows per block, columns per tile */
    int nc_one_row;      /* columns per tile when a block has a single row (decode) */
    tile_fn tile[WT_COUNT];
} kernel_set;

static inline float widen1(const char *p, int wt, int64_t k) {
    if (wt == WT_F32) return ((const float *)p)[k];
    const uint16_t h = ((const uint16_t *)p)[k];
    return wt == WT_BF16 ? mx_bf16_to_f32(h) : mx_f16_to_f32(h);
}

/* Zero-padded fp32 copy of the tail [K16, K) of one row (the last, partial 16-lane chunk). */
static inline void tail16(float *dst, const char *src, int wt, int64_t K16, int64_t K) {
    memset(dst, 0, 16 * sizeof(float));
    for (int64_t k = K16; k < K; k++) dst[k - K16] = widen1(src, wt, k);
}

/* ==== Canonical dot product (scalar reference and fallback kernel) ==== */
static inline float fold16(float *a) {
    for (int l = 0; l < 8; l++) a[l] += a[l + 8];
    for (int l = 0; l < 4; l++) a[l] += a[l + 4];
    for (int l = 0; l < 2; l++) a[l] += a[l + 2];
    return a[0] + a[1];
}

static float dot_ref(const float *x, const char *w, int wt, int64_t K) {
    float acc[16] = {0};
    const int64_t K16 = K & ~(int64_t)15;
    for (int64_t i = 0; i < K16; i += 16)
        for (int l = 0; l < 16; l++) acc[l] = fmaf(x[i + l], widen1(w, wt, i + l), acc[l]);
    if (K16 < K) {
        float xt[16], wv[16];
        memset(xt, 0, sizeof xt);
        memcpy(xt, x + K16, (size_t)(K - K16) * sizeof(float));
        tail16(wv, w, wt, K16, K);
        for (int l = 0; l < 16; l++) acc[l] = fmaf(xt[l], wv[l], acc[l]);
    }
    return fold16(acc);
}

static int wt_of(mx_dtype t) { return t == MX_F32 ? WT_F32 : t == MX_BF16 ? WT_BF16 : WT_F16; }

float cpu_dot_ref(const float *x, const void *w, mx_dtype wdtype, int64_t K) {
    return dot_ref(x, w, wt_of(wdtype), K);
}

static void tile_ref(int wt, int nr, int nc, const float *x, int64_t ldx, const char *w,
                     int64_t ldw, int64_t K, float *out, int64_t ldo, const float *bias) {
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) {
            const float s = dot_ref(x + r * ldx, w + c * ldw, wt, K);
            out[r * ldo + c] = bias ? s + bias[c] : s;
        }
}

#define REF_TILE(WT, name)                                                                        \
    static void name(int nr, int nc, const float *x, int64_t ldx, const char *w, int64_t ldw,     \
                     int64_t K, float *out, int64_t ldo, const float *bias) {                     \
        tile_ref(WT, nr, nc, x, ldx, w, ldw, K, out, ldo, bias);                                  \
    }
REF_TILE(WT_BF16, tile_ref_bf16)
REF_TILE(WT_F16, tile_ref_f16)
REF_TILE(WT_F32, tile_ref_f32)

static const kernel_set k_scalar = {CPU_ISA_SCALAR, 4, 4, 4,
                                    {tile_ref_bf16, tile_ref_f16, tile_ref_f32}};

/* ==== x86-64 kernels (chosen at run time) ==== */
#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_X86_KERNELS 1
#include "backend/cpu/cpu_simd.h"

/* ---- AVX2: a 16-lane accumulator is two ymm registers (lanes 0-7, 8-15) ---- */
/* Tiles measured on Zen 5 forced to AVX2 (16 registers): 4 rows x 1 column for many rows,
 * 1 row x 3 columns for a single row (more independent weight streams). */
#define MR2 4
#define NC2 1
#define NC2_ONE_ROW 3
#define NC2_MAX 3

/* The 8 weights at element k, widened. */
INLINE AVX2_TARGET __m256 ld8(const char *w, int wt, int64_t k) {
    if (wt == WT_BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + k))), 16));
    if (wt == WT_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + k)));
    return _mm256_loadu_ps((const float *)w + k);
}

INLINE AVX2_TARGET void tile_avx2_body(const int NR, const int NC, const int wt, const float *x,
                                       int64_t ldx, const char *w, int64_t ldw, int64_t K,
                                       float *out, int64_t ldo, const float *bias) {
    __m256 lo[MR2][NC2_MAX], hi[MR2][NC2_MAX];
    UNROLL
    for (int r = 0; r < NR; r++)
        UNROLL
        for (int c = 0; c < NC; c++) lo[r][c] = hi[r][c] = _mm256_setzero_ps();
    const int64_t K16 = K & ~(int64_t)15;
    for (int64_t i = 0; i < K16; i += 16) {
        __m256 wl[NC2_MAX], wh[NC2_MAX];
        UNROLL
        for (int c = 0; c < NC; c++) {
            wl[c] = ld8(w + c * ldw, wt, i);
            wh[c] = ld8(w + c * ldw, wt, i + 8);
        }
        UNROLL
        for (int r = 0; r < NR; r++) {
            const __m256 xl = _mm256_loadu_ps(x + r * ldx + i);
            UNROLL
            for (int c = 0; c < NC; c++) lo[r][c] = _mm256_fmadd_ps(xl, wl[c], lo[r][c]);
            const __m256 xh = _mm256_loadu_ps(x + r * ldx + i + 8);
            UNROLL
            for (int c = 0; c < NC; c++) hi[r][c] = _mm256_fmadd_ps(xh, wh[c], hi[r][c]);
        }
    }
    if (K16 < K) { /* the zero-padded last chunk, exactly as dot_ref */
        float xt[MR2][16], wv[NC2_MAX][16];
        UNROLL
        for (int c = 0; c < NC; c++) tail16(wv[c], w + c * ldw, wt, K16, K);
        UNROLL
        for (int r = 0; r < NR; r++) tail16(xt[r], (const char *)(x + r * ldx), WT_F32, K16, K);
        UNROLL
        for (int r = 0; r < NR; r++)
            UNROLL
            for (int c = 0; c < NC; c++) {
                lo[r][c] = _mm256_fmadd_ps(_mm256_loadu_ps(xt[r]), _mm256_loadu_ps(wv[c]), lo[r][c]);
                hi[r][c] = _mm256_fmadd_ps(_mm256_loadu_ps(xt[r] + 8), _mm256_loadu_ps(wv[c] + 8), hi[r][c]);
            }
    }
    UNROLL
    for (int r = 0; r < NR; r++)
        UNROLL
        for (int c = 0; c < NC; c++) {
            const float s = hsum8(_mm256_add_ps(lo[r][c], hi[r][c]));
            out[r * ldo + c] = bias ? s + bias[c] : s;
        }
}

#define C2(R, C, WT)                                                                              \
    case (R) * 16 + (C): tile_avx2_body(R, C, WT, x, ldx, w, ldw, K, out, ldo, bias); break;
#define AVX2_TILE(WT, name)                                                                       \
    AVX2_TARGET static void name(int nr, int nc, const float *x, int64_t ldx, const char *w,      \
                                 int64_t ldw, int64_t K, float *out, int64_t ldo,                  \
                                 const float *bias) {                                              \
        switch (nr * 16 + nc) {                                                                    \
            C2(1, 1, WT) C2(1, 2, WT) C2(1, 3, WT) C2(2, 1, WT) C2(3, 1, WT) C2(4, 1, WT)          \
        default: break;                                                                            \
        }                                                                                          \
    }
AVX2_TILE(WT_BF16, tile_avx2_bf16)
AVX2_TILE(WT_F16, tile_avx2_f16)
AVX2_TILE(WT_F32, tile_avx2_f32)


static const kernel_set k_avx2 = {CPU_ISA_AVX2, MR2, NC2, NC2_ONE_ROW,
                                  {tile_avx2_bf16, tile_avx2_f16, tile_avx2_f32}};

/* ---- AVX-512: one zmm register per 16-lane accumulator ----
 * 4 rows x 6 columns: 24 accumulators + 6 weight vectors + 1 x vector of the 32 registers. */
#define MR5 4
#define NC5 6

INLINE AVX512_TARGET __m512 ld16(const char *w, int wt, int64_t k) {
    if (wt == WT_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + k))), 16));
    if (wt == WT_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + k)));
    return _mm512_loadu_ps((const float *)w + k);
}

INLINE AVX512_TARGET void tile_avx512_body(const int NR, const int NC, const int wt,
                                           const float *x, int64_t ldx, const char *w,
                                           int64_t ldw, int64_t K, float *out, int64_t ldo,
                                           const float *bias) {
    __m512 acc[MR5][NC5];
    UNROLL
    for (int r = 0; r < NR; r++)
        UNROLL
        for (int c = 0; c < NC; c++) acc[r][c] = _mm512_setzero_ps();
    const int64_t K16 = K & ~(int64_t)15;
    for (int64_t i = 0; i < K16; i += 16) {
        __m512 wv[NC5];
        UNROLL
        for (int c = 0; c < NC; c++) wv[c] = ld16(w + c * ldw, wt, i);
        UNROLL
        for (int r = 0; r < NR; r++) {
            const __m512 xv = _mm512_loadu_ps(x + r * ldx + i);
            UNROLL
            for (int c = 0; c < NC; c++) acc[r][c] = _mm512_fmadd_ps(xv, wv[c], acc[r][c]);
        }
    }
    if (K16 < K) {
        float xt[MR5][16], wv[NC5][16];
        UNROLL
        for (int c = 0; c < NC; c++) tail16(wv[c], w + c * ldw, wt, K16, K);
        UNROLL
        for (int r = 0; r < NR; r++) tail16(xt[r], (const char *)(x + r * ldx), WT_F32, K16, K);
        UNROLL
        for (int r = 0; r < NR; r++)
            UNROLL
            for (int c = 0; c < NC; c++)
                acc[r][c] = _mm512_fmadd_ps(_mm512_loadu_ps(xt[r]), _mm512_loadu_ps(wv[c]), acc[r][c]);
    }
    UNROLL
    for (int r = 0; r < NR; r++)
        UNROLL
        for (int c = 0; c < NC; c++) {
            const float s = hsum16(acc[r][c]);
            out[r * ldo + c] = bias ? s + bias[c] : s;
        }
}

#define C5(R, C, WT)                                                                              \
    case (R) * 16 + (C): tile_avx512_body(R, C, WT, x, ldx, w, ldw, K, out, ldo, bias); break;
#define ROW5(R, WT) C5(R, 1, WT) C5(R, 2, WT) C5(R, 3, WT) C5(R, 4, WT) C5(R, 5, WT) C5(R, 6, WT)
#define AVX512_TILE(WT, name)                                                                     \
    AVX512_TARGET static void name(int nr, int nc, const float *x, int64_t ldx, const char *w,    \
                                   int64_t ldw, int64_t K, float *out, int64_t ldo,                \
                                   const float *bias) {                                            \
        switch (nr * 16 + nc) {                                                                    \
            ROW5(1, WT) ROW5(2, WT) ROW5(3, WT) ROW5(4, WT)                                        \
        default: break;                                                                            \
        }                                                                                          \
    }
AVX512_TILE(WT_BF16, tile_avx512_bf16)
AVX512_TILE(WT_F16, tile_avx512_f16)
AVX512_TILE(WT_F32, tile_avx512_f32)


static const kernel_set k_avx512 = {CPU_ISA_AVX512, MR5, NC5, NC5,
                                    {tile_avx512_bf16, tile_avx512_f16, tile_avx512_f32}};
#endif

/* ==== Kernel selection ==== */
#ifdef HAVE_X86_KERNELS
#include <cpuid.h>
/* F16C via CPUID.1:ECX[29]: clang 14's __builtin_cpu_supports does not know "f16c". */
static bool cpu_has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
#endif

bool cpu_isa_supported(cpu_isa isa) {
    switch (isa) {
    case CPU_ISA_SCALAR: return true;
#ifdef HAVE_X86_KERNELS
    case CPU_ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
    case CPU_ISA_AVX512:
        return cpu_isa_supported(CPU_ISA_AVX2) && __builtin_cpu_supports("avx512f");
#endif
    default: return false;
    }
}

const char *cpu_isa_name(cpu_isa isa) {
    switch (isa) {
    case CPU_ISA_SCALAR: return "scalar";
    case CPU_ISA_AVX2: return "avx2";
    case CPU_ISA_AVX512: return "avx512";
    default: return "auto";
    }
}

static cpu_isa g_forced = CPU_ISA_AUTO;

static const kernel_set *kernels_for(cpu_isa isa) {
#ifdef HAVE_X86_KERNELS
    if (isa == CPU_ISA_AVX512) return &k_avx512;
    if (isa == CPU_ISA_AVX2) return &k_avx2;
#endif
    (void)isa;
    return &k_scalar;
}

/* Detected once (pthread_once: tensor-parallel rank threads may ask at the same time). */
static cpu_isa g_best = CPU_ISA_AUTO;
static pthread_once_t g_best_once = PTHREAD_ONCE_INIT;
static void detect_best(void) {
    g_best = cpu_isa_supported(CPU_ISA_AVX512) ? CPU_ISA_AVX512
             : cpu_isa_supported(CPU_ISA_AVX2) ? CPU_ISA_AVX2
                                               : CPU_ISA_SCALAR;
}

cpu_isa cpu_matmul_isa(void) {
    if (g_forced != CPU_ISA_AUTO) return g_forced;
    pthread_once(&g_best_once, detect_best);
    return g_best;
}

int cpu_matmul_force_isa(cpu_isa isa) {
    if (isa != CPU_ISA_AUTO && !cpu_isa_supported(isa)) return -1;
    g_forced = isa;
    return 0;
}

/* ==== Driver ==== */
/* Work (multiply-adds) below which a product stays on the calling thread, and per extra
 * thread: waking a sleeping team costs tens of microseconds, more than a small product. */
#define MIN_PARALLEL_MACS (1 << 18)
#define MACS_PER_THREAD (1 << 17)
/* Weight bytes of a panel: stays in L2 while every row block sweeps it. */
#define PANEL_BYTES (128 << 10)

/* Where the weight rows come from: read in place (stored dtype, widened in registers), or
 * produced per panel as fp32 rows by a callback into per-thread scratch (quantized weights:
 * the dequantized values). The arithmetic per output is the same canonical dot either way. */
typedef struct wsource {
    const char *w;        /* direct: row 0 */
    int64_t ldw;          /* direct: bytes between rows */
    int wt;               /* direct: WT_* */
    cpu_wfill_fn fill;    /* or NULL */
    cpu_wtile_fn wtile;   /* fill sources, may be NULL: a few rows without the fp32 rows */
    const void *ctx;
} wsource;

/* One product of a call: its source and, once planned, its panels. */
typedef struct mm_job {
    mx_tensor *out;
    int64_t N;
    wsource src;
    const mx_tensor *bias;
    float *bias32;        /* [N] or NULL */
    int64_t np, n_panels; /* panel width, count (0: nothing to run) */
    int64_t first;        /* its first panel in the call's numbering */
    bool direct;          /* the wtile path: no fp32 rows */
} mm_job;

static void zero_out(mx_tensor *out, int64_t n, int64_t N) {
    for (int64_t r = 0; r < n; r++) memset(cpu_row_ptr(out, r), 0, (size_t)N * sizeof(float));
}

/* One panel of a job: its weight rows [j0, j0 + pw) against every row of x. */
static void run_panel(const kernel_set *ks, const mm_job *jb, int64_t p, const mx_tensor *x,
                      float *scratch) {
    const int64_t n = x->shape[0], K = x->shape[x->ndim - 1], nc = ks->nc;
    const int64_t ldx = x->stride[0], ldo = jb->out->stride[0];
    const float *x0 = x->data;
    float *o0 = jb->out->data;
    const wsource *src = &jb->src;
    const float *bias32 = jb->bias32;
    const int64_t j0 = p * jb->np, pw = jb->N - j0 < jb->np ? jb->N - j0 : jb->np;
    if (jb->direct) { /* one row block: the tile widths of the dense kernels */
        const int64_t step = n == 1 ? ks->nc_one_row : nc;
        for (int64_t c0 = 0; c0 < pw; c0 += step) {
            const int ncc = (int)(pw - c0 < step ? pw - c0 : step);
            src->wtile((int)n, ncc, x0, ldx, j0 + c0, o0 + j0 + c0, ldo, bias32 ? bias32 + j0 + c0 : NULL,
                       src->ctx);
        }
        return;
    }
    const char *wp;
    int64_t ldw;
    if (src->fill) {
        if (!scratch) return;
        src->fill(scratch, j0, pw, src->ctx);
        wp = (const char *)scratch;
        ldw = K * (int64_t)sizeof(float);
    } else {
        wp = src->w + j0 * src->ldw;
        ldw = src->ldw;
    }
    const tile_fn tile = ks->tile[src->fill ? WT_F32 : src->wt];
    for (int64_t r0 = 0; r0 < n; r0 += ks->mr) {
        const int nr = (int)(n - r0 < ks->mr ? n - r0 : ks->mr);
        const int64_t step = nr == 1 ? ks->nc_one_row : nc;
        for (int64_t c0 = 0; c0 < pw; c0 += step) {
            const int ncc = (int)(pw - c0 < step ? pw - c0 : step);
            tile(nr, ncc, x0 + r0 * ldx, ldx, wp + c0 * ldw, ldw, K, o0 + r0 * ldo + j0 + c0, ldo,
                 bias32 ? bias32 + j0 + c0 : NULL);
        }
    }
}

/* The products of jobs (all of x) in one parallel region: a product of the same x as the
 * previous one (q/k/v, gate/up) costs no extra wake-up of the thread team. */
static void matmul_drive(const mx_tensor *x, mm_job *jobs, int nj) {
    const int64_t n = x->shape[0], K = x->shape[x->ndim - 1];
    if (n <= 0) return;
    const kernel_set *ks = kernels_for(cpu_matmul_isa());
    double macs = 0;
    for (int i = 0; i < nj; i++) macs += (double)n * (double)(jobs[i].N > 0 ? jobs[i].N : 0) * (double)K;
    int nt = 1;
    if (macs >= MIN_PARALLEL_MACS) {
        const int max_t = omp_get_max_threads();
        const double want = macs / MACS_PER_THREAD;
        nt = want < max_t ? (int)want : max_t;
        if (nt < 1) nt = 1;
    }
    int64_t align = ks->nc; /* whole tiles of both widths: lcm(nc, nc_one_row) */
    while (align % ks->nc_one_row) align += ks->nc;
    int64_t total = 0, scratch_floats = 0;
    for (int i = 0; i < nj; i++) {
        mm_job *jb = &jobs[i];
        jb->bias32 = NULL;
        jb->n_panels = 0;
        jb->first = total;
        if (jb->N <= 0) continue;
        if (mx_tensor_present(jb->bias)) {
            jb->bias32 = malloc((size_t)jb->N * sizeof(float));
            if (!jb->bias32) { /* cannot happen for sane N; a defined result rather than garbage */
                zero_out(jb->out, n, jb->N);
                continue;
            }
            cpu_row_to_f32(jb->bias32, jb->bias->data, jb->bias->dtype, jb->N);
        }
        const wsource *src = &jb->src;
        const size_t esz = src->fill ? sizeof(float) : (src->wt == WT_F32 ? 4 : 2);
        /* Panel width: L2-sized, and narrow enough that every thread gets several panels (the
         * dynamic schedule then absorbs a thread slowed by other load on the machine). */
        int64_t np = PANEL_BYTES / (K * (int64_t)esz);
        if (np > 256) np = 256;
        const int64_t per_thread = (jb->N + 4 * nt - 1) / (4 * nt);
        if (nt > 1 && np > per_thread) np = per_thread;
        np = (np + align - 1) / align * align;
        jb->np = np;
        jb->n_panels = (jb->N + np - 1) / np;
        jb->direct = src->wtile && n <= CPU_WTILE_MAX_ROWS && n <= ks->mr && ks->nc <= CPU_WTILE_MAX_NC &&
                     ks->nc_one_row <= CPU_WTILE_MAX_NC;
        if (src->fill && !jb->direct && np * K > scratch_floats) scratch_floats = np * K;
        total += jb->n_panels;
    }
    if (nt > total) nt = (int)(total > 0 ? total : 1);
    int failed = 0;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        /* [np, K] fp32 weight rows of the current panel (fill sources only) */
        float *scratch = scratch_floats ? malloc((size_t)scratch_floats * sizeof(float)) : NULL;
        if (scratch_floats && !scratch) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1) nowait /* the region's end is the one barrier */
        for (int64_t p = 0; p < total; p++) {
            int i = 0;
            while (p >= jobs[i].first + jobs[i].n_panels) i++;
            run_panel(ks, &jobs[i], p - jobs[i].first, x, scratch);
        }
        free(scratch);
    }
    for (int i = 0; i < nj; i++) {
        /* out of memory for a panel: a defined result rather than garbage */
        if (failed && jobs[i].src.fill && !jobs[i].direct && jobs[i].n_panels) zero_out(jobs[i].out, n, jobs[i].N);
        free(jobs[i].bias32);
    }
}

static mm_job dense_job(mx_tensor *out, const mx_tensor *w, const mx_tensor *bias) {
    return (mm_job){.out = out, .N = w->shape[0], .bias = bias,
                    .src = {.w = w->data, .ldw = w->stride[0] * (int64_t)mx_dtype_size(w->dtype),
                            .wt = wt_of(w->dtype)}};
}

void cpu_matmul(mx_tensor *out, const mx_tensor *x, const mx_tensor *w, const mx_tensor *bias) {
    mm_job jb = dense_job(out, w, bias);
    matmul_drive(x, &jb, 1);
}

void cpu_matmul_group(const mx_tensor *x, const cpu_mm *mms, int n) {
    mm_job jobs[CPU_MM_GROUP_MAX];
    for (int done = 0; done < n; done += CPU_MM_GROUP_MAX) {
        const int k = n - done < CPU_MM_GROUP_MAX ? n - done : CPU_MM_GROUP_MAX;
        for (int i = 0; i < k; i++) {
            const cpu_mm *m = &mms[done + i];
            jobs[i] = m->w ? dense_job(m->out, m->w, m->bias)
                           : (mm_job){.out = m->out, .N = m->N, .bias = m->bias,
                                      .src = {.fill = m->fill, .wtile = m->wtile, .ctx = m->ctx}};
        }
        matmul_drive(x, jobs, k);
    }
}

void cpu_matmul_fill(mx_tensor *out, const mx_tensor *x, int64_t N, cpu_wfill_fn fill,
                     const void *ctx, const mx_tensor *bias) {
    cpu_matmul_fill_tile(out, x, N, fill, NULL, ctx, bias);
}

void cpu_matmul_fill_tile(mx_tensor *out, const mx_tensor *x, int64_t N, cpu_wfill_fn fill,
                          cpu_wtile_fn wtile, const void *ctx, const mx_tensor *bias) {
    const cpu_mm m = {.out = out, .N = N, .fill = fill, .wtile = wtile, .ctx = ctx, .bias = bias};
    cpu_matmul_group(x, &m, 1);
}
