/* KV cache row formats: f32 <-> f16, bf16, q8_0, q4_0 (see kv_quant.h for the rules). */
#include "backend/kvfmt/kv_quant.h"

#include "backend/kvfmt/kv_turbo.h"

#include <math.h>
#include <string.h>

/* ==== Blocks ==== */
static inline void put_d(uint8_t *b, float d) {
    const uint16_t h = mx_f32_to_f16(d);
    memcpy(b, &h, 2); /* little-endian fp16 first, as ggml's block structs */
}

static inline float get_d(const uint8_t *b) {
    uint16_t h;
    memcpy(&h, b, 2);
    return mx_f16_to_f32(h);
}

void kvq_quantize_q8_0(const float *x, void *y, int64_t n) {
    uint8_t *b = y;
    for (int64_t i = 0; i < n; i += MX_QBLOCK, b += 2 + MX_QBLOCK) {
        const float *xb = x + i;
        float amax = 0.0f;
        for (int j = 0; j < MX_QBLOCK; j++) {
            const float a = fabsf(xb[j]);
            amax = amax > a ? amax : a;
        }
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        put_d(b, d);
        int8_t *q = (int8_t *)(b + 2);
        /* |x * id| <= 127 for finite rows; the clamp only keeps a NaN / inf (a diverged model)
         * from an undefined float -> int conversion */
        for (int j = 0; j < MX_QBLOCK; j++) q[j] = (int8_t)fminf(fmaxf(roundf(xb[j] * id), -127.0f), 127.0f);
    }
}

void kvq_quantize_q4_0(const float *x, void *y, int64_t n) {
    uint8_t *b = y;
    for (int64_t i = 0; i < n; i += MX_QBLOCK, b += 2 + MX_QBLOCK / 2) {
        const float *xb = x + i;
        float amax = 0.0f, max = 0.0f; /* the signed value of largest magnitude, first wins */
        for (int j = 0; j < MX_QBLOCK; j++)
            if (amax < fabsf(xb[j])) amax = fabsf(xb[j]), max = xb[j];
        const float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        put_d(b, d);
        for (int j = 0; j < MX_QBLOCK / 2; j++) {
            /* x * id lies in [-8, 8]: + 8.5 then truncation rounds to the nearest code, at most
             * 15; clamping the float first gives the same codes and keeps a NaN / inf defined */
            const int q0 = (int)fminf(fmaxf(xb[j] * id + 8.5f, 0.0f), 15.0f);
            const int q1 = (int)fminf(fmaxf(xb[j + MX_QBLOCK / 2] * id + 8.5f, 0.0f), 15.0f);
            b[2 + j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

static void deq_q8_0_ref(const uint8_t *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i += MX_QBLOCK, b += 2 + MX_QBLOCK) {
        const float d = get_d(b);
        const int8_t *q = (const int8_t *)(b + 2);
        for (int j = 0; j < MX_QBLOCK; j++) y[i + j] = (float)q[j] * d;
    }
}

static void deq_q4_0_ref(const uint8_t *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i += MX_QBLOCK, b += 2 + MX_QBLOCK / 2) {
        const float d = get_d(b);
        for (int j = 0; j < MX_QBLOCK / 2; j++) {
            y[i + j] = (float)((b[2 + j] & 0x0f) - 8) * d;
            y[i + j + MX_QBLOCK / 2] = (float)((b[2 + j] >> 4) - 8) * d;
        }
    }
}

static void to_f32_ref(float *dst, const void *src, mx_dtype t, int64_t n) {
    const uint16_t *h = src;
    switch (t) {
    case MX_F16: for (int64_t i = 0; i < n; i++) dst[i] = mx_f16_to_f32(h[i]); break;
    case MX_BF16: for (int64_t i = 0; i < n; i++) dst[i] = mx_bf16_to_f32(h[i]); break;
    case MX_Q8_0: deq_q8_0_ref(src, dst, n); break;
    case MX_Q4_0: deq_q4_0_ref(src, dst, n); break;
    case MX_TQ2: case MX_TQ3: case MX_TQ4: /* the portable table path (kv_turbo.c) */
        kv_turbo_decode_rot_with(src, kvq_turbo_bits(t), dst, n, KV_TURBO_READ_C);
        break;
    default: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    }
}

/* ==== AVX2 (+F16C) reads: the same exact conversions and the same single multiply per value,
 * eight lanes at a time, so both give the same bits ==== */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define KVQ_X86 1
#define AV __attribute__((target("avx2,f16c")))

static AV void deq_q8_0_avx2(const uint8_t *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i += MX_QBLOCK, b += 2 + MX_QBLOCK) {
        const __m256 d = _mm256_set1_ps(get_d(b));
        for (int j = 0; j < MX_QBLOCK; j += 8) {
            const __m128i q8 = _mm_loadl_epi64((const __m128i *)(b + 2 + j));
            const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8));
            _mm256_storeu_ps(y + i + j, _mm256_mul_ps(v, d));
        }
    }
}

static AV void deq_q4_0_avx2(const uint8_t *b, float *y, int64_t n) {
    const __m128i lo4 = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
    for (int64_t i = 0; i < n; i += MX_QBLOCK, b += 2 + MX_QBLOCK / 2) {
        const __m256 d = _mm256_set1_ps(get_d(b));
        const __m128i raw = _mm_loadu_si128((const __m128i *)(b + 2));
        /* codes - 8 as int8: values 0..15 (low nibbles), 16..31 (high nibbles) */
        const __m128i q[2] = {_mm_sub_epi8(_mm_and_si128(raw, lo4), eight),
                              _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), lo4), eight)};
        for (int h = 0; h < 2; h++) {
            const __m256 v0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q[h]));
            const __m256 v1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q[h], 8)));
            _mm256_storeu_ps(y + i + 16 * h, _mm256_mul_ps(v0, d));
            _mm256_storeu_ps(y + i + 16 * h + 8, _mm256_mul_ps(v1, d));
        }
    }
}

static AV void to_f32_avx2(float *dst, const void *src, mx_dtype t, int64_t n) {
    const uint16_t *h = src;
    int64_t i = 0;
    switch (t) {
    case MX_F16:
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
        for (; i < n; i++) dst[i] = mx_f16_to_f32(h[i]);
        break;
    case MX_BF16:
        for (; i + 8 <= n; i += 8) {
            const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(h + i)));
            _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
        }
        for (; i < n; i++) dst[i] = mx_bf16_to_f32(h[i]);
        break;
    case MX_Q8_0: deq_q8_0_avx2(src, dst, n); break;
    case MX_Q4_0: deq_q4_0_avx2(src, dst, n); break;
    case MX_TQ2: case MX_TQ3: case MX_TQ4: kv_turbo_decode_rot(src, kvq_turbo_bits(t), dst, n); break;
    default: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    }
}
#endif

static _Atomic int g_force_ref;
void kvq_force_ref(bool on) { g_force_ref = on; }

#ifdef KVQ_X86
#include <cpuid.h>
/* F16C via CPUID.1:ECX[29]: clang 14's __builtin_cpu_supports does not know "f16c" (as
 * cpu_matmul.c's kernel selection). */
static bool kvq_has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
#endif

static int have_avx2(void) {
#ifdef KVQ_X86
    return !g_force_ref && __builtin_cpu_supports("avx2") && kvq_has_f16c();
#else
    return 0;
#endif
}

void kvq_dequantize_q8_0(const void *x, float *y, int64_t n) { kvq_to_f32(y, x, MX_Q8_0, n); }
void kvq_dequantize_q4_0(const void *x, float *y, int64_t n) { kvq_to_f32(y, x, MX_Q4_0, n); }

void kvq_to_f32(float *dst, const void *src, mx_dtype t, int64_t n) {
#ifdef KVQ_X86
    if (have_avx2()) {
        to_f32_avx2(dst, src, t, n);
        return;
    }
#endif
    (void)have_avx2;
    to_f32_ref(dst, src, t, n);
}

/* ==== Writes ==== */
void kvq_from_f32(void *dst, mx_dtype t, const float *src, int64_t n) {
    uint16_t *h = dst;
    switch (t) {
    case MX_F16: for (int64_t i = 0; i < n; i++) h[i] = mx_f32_to_f16(src[i]); break;
    case MX_BF16: for (int64_t i = 0; i < n; i++) h[i] = mx_f32_to_bf16(src[i]); break;
    case MX_Q8_0: kvq_quantize_q8_0(src, dst, n); break;
    case MX_Q4_0: kvq_quantize_q4_0(src, dst, n); break;
    case MX_TQ2: case MX_TQ3: case MX_TQ4: kvq_from_f32_heads(dst, t, src, 1, (int)n); break; /* one head */
    default: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    }
}

void kvq_from_f32_heads(void *dst, mx_dtype t, const float *src, int n_heads, int head_dim) {
    const int bits = kvq_turbo_bits(t);
    if (!bits) {
        kvq_from_f32(dst, t, src, (int64_t)n_heads * head_dim);
        return;
    }
    float scratch[KV_TURBO_MAX_DIM];
    const size_t head_bytes = kvq_row_bytes(t, head_dim);
    for (int h = 0; h < n_heads; h++)
        kv_turbo_encode(src + (size_t)h * head_dim, head_dim, bits, (uint8_t *)dst + h * head_bytes, scratch);
}
