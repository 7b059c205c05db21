/* CPU KV write and attention over physical KV rows (dense and paged alike, see backend.h).
 *
 * Attention arithmetic, per (row, query head), is fixed by the scalar reference below and does
 * not depend on the batch: one pass over the row's own keys in position order, online softmax
 *     s = dot16(q, k) * scale            (cpu_dot_f32: 16 partial sums, multiply then add)
 *     [s = cap * tanh(s / cap)]
 *     if s > m: c = exp(m - s); l *= c; acc *= c; m = s
 *     e = exp(s - m); l += e; acc += e * v   (multiply then add, per element)
 *     out = acc * (1 / l)
 * The AVX2 and AVX-512 versions perform exactly these IEEE operations (no fused multiply-add,
 * same lanes, same fold tree), only several lanes at a time, so every kernel family gives the
 * same bits (tests/unit/test_batch_invariance.c compares them); the build is ISO C
 * (-ffp-contract=off), so the compiler does not fuse the scalar tails either. The G query heads that share a
 * KV head walk the keys together, so each K/V row is loaded once for all of them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"

/* ==== KV write ==== */
void cpu_kv_write(mx_tensor *k_pool, mx_tensor *v_pool, const mx_tensor *k, const mx_tensor *v,
                  const mx_attn_batch *b) {
    /* pools: [n_phys_rows, n_kv_heads, head_dim] f32; k, v: [n, n_kv_heads, head_dim] f32 */
    const size_t row_bytes = (size_t)(k->shape[1] * k->shape[2]) * sizeof(float);
    for (int i = 0; i < b->n_rows; i++) {
        memcpy(cpu_row_ptr(k_pool, b->write_rows[i]), cpu_row_ptr(k, i), row_bytes);
        memcpy(cpu_row_ptr(v_pool, b->write_rows[i]), cpu_row_ptr(v, i), row_bytes);
    }
}

void cpu_kv_copy_rows(mx_tensor *pool, int64_t dst_row, int64_t src_row, int64_t n_rows) {
    const size_t row_bytes = (size_t)pool->stride[0] * mx_dtype_size(pool->dtype);
    memmove(cpu_row_ptr(pool, dst_row), cpu_row_ptr(pool, src_row), row_bytes * (size_t)n_rows);
}

/* ==== Vector primitives (three families, identical results) ==== */
/* s[g] = dot16(q + g * D, k) for g < G. */
typedef void (*scores_fn)(const float *q, const float *k, int G, int D, float *s);
/* a[d] *= c */
typedef void (*scale_fn)(float *a, float c, int D);
/* a[d] += e * v[d] */
typedef void (*axpy_fn)(float *a, float e, const float *v, int D);

typedef struct att_ops {
    scores_fn scores;
    scale_fn scale;
    axpy_fn axpy;
} att_ops;

static void scores_ref(const float *q, const float *k, int G, int D, float *s) {
    for (int g = 0; g < G; g++) s[g] = cpu_dot_f32(q + (size_t)g * D, k, D);
}
static void scale_ref(float *a, float c, int D) {
    for (int d = 0; d < D; d++) a[d] *= c;
}
static void axpy_ref(float *a, float e, const float *v, int D) {
    for (int d = 0; d < D; d++) a[d] += e * v[d];
}
static const att_ops k_ref_ops = {scores_ref, scale_ref, axpy_ref};

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86_ATT 1
#define A2 __attribute__((target("avx2")))
#define A5 __attribute__((target("avx512f,avx2")))

/* Lanes j and j + 8 already added: j += j + 4, j += j + 2, j += j + 1 (cpu_dot_f32's tree). */
static inline A2 float fold8(__m256 v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    return _mm_cvtss_f32(lo);
}

/* Mask of the first n (< 8) lanes for maskload. */
static inline A2 __m256i mask8(int n) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

static A2 void scores_avx2(const float *q, const float *k, int G, int D, float *s) {
    const int D16 = D & ~15, t = D - D16;
    for (int g = 0; g < G; g++) {
        const float *a = q + (size_t)g * D;
        __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
        for (int i = 0; i < D16; i += 16) {
            lo = _mm256_add_ps(lo, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(k + i)));
            hi = _mm256_add_ps(hi, _mm256_mul_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(k + i + 8)));
        }
        if (t) { /* tail elements go to lanes 0.., the rest add +0 (exact: a lane is never -0) */
            const __m256i m0 = mask8(t < 8 ? t : 8), m1 = mask8(t - 8 > 0 ? t - 8 : 0);
            lo = _mm256_add_ps(lo, _mm256_mul_ps(_mm256_maskload_ps(a + D16, m0), _mm256_maskload_ps(k + D16, m0)));
            hi = _mm256_add_ps(hi, _mm256_mul_ps(_mm256_maskload_ps(a + D16 + 8, m1),
                                                 _mm256_maskload_ps(k + D16 + 8, m1)));
        }
        s[g] = fold8(_mm256_add_ps(lo, hi));
    }
}

static A2 void scale_avx2(float *a, float c, int D) {
    const __m256 cv = _mm256_set1_ps(c);
    int d = 0;
    for (; d + 8 <= D; d += 8) _mm256_storeu_ps(a + d, _mm256_mul_ps(_mm256_loadu_ps(a + d), cv));
    for (; d < D; d++) a[d] *= c;
}

static A2 void axpy_avx2(float *a, float e, const float *v, int D) {
    const __m256 ev = _mm256_set1_ps(e);
    int d = 0;
    for (; d + 8 <= D; d += 8)
        _mm256_storeu_ps(a + d, _mm256_add_ps(_mm256_loadu_ps(a + d), _mm256_mul_ps(ev, _mm256_loadu_ps(v + d))));
    for (; d < D; d++) a[d] += e * v[d];
}

static A5 void scores_avx512(const float *q, const float *k, int G, int D, float *s) {
    const int D16 = D & ~15, t = D - D16;
    const __mmask16 m = (__mmask16)((1u << t) - 1);
    for (int g = 0; g < G; g++) {
        const float *a = q + (size_t)g * D;
        __m512 acc = _mm512_setzero_ps();
        for (int i = 0; i < D16; i += 16)
            acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(k + i)));
        if (t)
            acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, a + D16),
                                                   _mm512_maskz_loadu_ps(m, k + D16)));
        const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
        s[g] = fold8(_mm256_add_ps(_mm512_castps512_ps256(acc), hi));
    }
}

static A5 void scale_avx512(float *a, float c, int D) {
    const __m512 cv = _mm512_set1_ps(c);
    int d = 0;
    for (; d + 16 <= D; d += 16) _mm512_storeu_ps(a + d, _mm512_mul_ps(_mm512_loadu_ps(a + d), cv));
    for (; d < D; d++) a[d] *= c;
}

static A5 void axpy_avx512(float *a, float e, const float *v, int D) {
    const __m512 ev = _mm512_set1_ps(e);
    int d = 0;
    for (; d + 16 <= D; d += 16)
        _mm512_storeu_ps(a + d, _mm512_add_ps(_mm512_loadu_ps(a + d), _mm512_mul_ps(ev, _mm512_loadu_ps(v + d))));
    for (; d < D; d++) a[d] += e * v[d];
}

static const att_ops k_avx2_ops = {scores_avx2, scale_avx2, axpy_avx2};
static const att_ops k_avx512_ops = {scores_avx512, scale_avx512, axpy_avx512};
#endif

/* The family follows the matmul's (cpu_matmul_force_isa switches both). */
static const att_ops *att_ops_now(void) {
#ifdef HAVE_X86_ATT
    switch (cpu_matmul_isa()) {
    case CPU_ISA_AVX512: return &k_avx512_ops;
    case CPU_ISA_AVX2: return &k_avx2_ops;
    default: break;
    }
#endif
    return &k_ref_ops;
}

/* ==== Attention ==== */
void cpu_attention(mx_tensor *out, const mx_tensor *q, const mx_tensor *k_pool,
                   const mx_tensor *v_pool, const mx_attn_batch *b, const mx_attn_params *p) {
    const int Hkv = p->n_kv_heads, G = p->n_heads / p->n_kv_heads, D = p->head_dim;
    const int bs = b->block_size;
    const int64_t total = (int64_t)b->n_rows * Hkv;
    const att_ops *ops = att_ops_now();
    int64_t work = 0; /* key visits x head dim, to keep small steps on the calling thread */
    for (int i = 0; i < b->n_rows; i++) work += (int64_t)(b->pos[i] + 1) * p->n_heads * D;
#pragma omp parallel if (work >= (1 << 17))
    {
        /* per query head of the group: running sum of p * v [G, D], max m [G], normaliser l [G],
         * this key's scores s [G] */
        float *acc = malloc((size_t)G * (D + 3) * sizeof(float));
        float *m = acc + (size_t)G * D, *l = m + G, *s = l + G;
#pragma omp for schedule(dynamic, 1) nowait /* the region's end is the one barrier */
        for (int64_t t = 0; t < total; t++) {
            const int i = (int)(t / Hkv), kvh = (int)(t % Hkv);
            const float *qv = (const float *)cpu_row_ptr(q, i) + (size_t)kvh * G * D; /* [G, D] */
            float *o = (float *)cpu_row_ptr(out, i) + (size_t)kvh * G * D;
            if (!acc) { /* no memory for a few KiB: a defined (zero) result, not garbage */
                memset(o, 0, (size_t)G * D * sizeof(float));
                continue;
            }
            const int pos = b->pos[i];
            const int32_t *table = b->block_table + (size_t)b->seq[i] * (size_t)b->table_stride;
            const int start = p->window > 0 && pos - p->window + 1 > 0 ? pos - p->window + 1 : 0;
            memset(acc, 0, (size_t)G * D * sizeof(float));
            for (int g = 0; g < G; g++) m[g] = -INFINITY, l[g] = 0.0f;
            /* keys block by block: physical row = table[kp / bs] * bs + kp % bs */
            for (int kp = start; kp <= pos;) {
                const int blk = kp / bs, last = (blk + 1) * bs - 1 < pos ? (blk + 1) * bs - 1 : pos;
                int64_t r = (int64_t)table[blk] * bs + kp % bs;
                for (; kp <= last; kp++, r++) {
                    const float *kv = (const float *)cpu_row_ptr(k_pool, r) + (size_t)kvh * D;
                    const float *vv = (const float *)cpu_row_ptr(v_pool, r) + (size_t)kvh * D;
                    ops->scores(qv, kv, G, D, s);
                    for (int g = 0; g < G; g++) {
                        float sc = s[g] * p->scale;
                        if (p->softcap > 0.0f) sc = p->softcap * tanhf(sc / p->softcap);
                        float *ag = acc + (size_t)g * D;
                        if (sc > m[g]) {
                            const float c = expf(m[g] - sc); /* 0 on the first key (m = -inf) */
                            l[g] *= c;
                            ops->scale(ag, c, D);
                            m[g] = sc;
                        }
                        const float e = expf(sc - m[g]);
                        l[g] += e;
                        ops->axpy(ag, e, vv, D);
                    }
                }
            }
            for (int g = 0; g < G; g++) {
                const float inv = l[g] > 0.0f ? 1.0f / l[g] : 0.0f;
                for (int d = 0; d < D; d++) o[(size_t)g * D + d] = acc[(size_t)g * D + d] * inv;
            }
        }
        free(acc);
    }
}
