/* Dequantizing a row of an MLX-quantized matrix, fast: the engine's quantized matmul
 * dequantizes every weight row once per step (decode), so this is its inner loop.
 *
 * Value of code q in a group with scale s and bias b (quant.h): the model-dtype value nearest
 * to fp32(s * q) + b, i.e. one fp32 multiply, one fp32 add (never fused), then rounding to
 * nearest even in the scales' dtype. The scalar reference (mlxq_dequantize_row_ref) and the
 * AVX2 / AVX-512 versions below compute exactly that, so they agree bit for bit
 * (tests/unit/test_quant.c compares them for every bit width, group and dtype). A vector that
 * holds a NaN is redone by the scalar code, whose NaN encoding the vector rounding does not
 * reproduce. The SIMD family follows the matmul's (cpu_matmul_isa), so a test that forces a
 * family exercises both. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "quant/quant_internal.h"

/* ==== Scalar reference ==== */

/* out[0..gs) for one group of codes. */
static void group_ref(float *o, const uint8_t *q, int gs, float s, float b, mx_dtype t) {
    for (int i = 0; i < gs; i++) {
        const float p = s * (float)q[i];
        o[i] = mlxq_round_to(p + b, t);
    }
}

void mlxq_dequantize_row_ref(float *out, const mlxq_matrix *m, int64_t r) {
    const int64_t ng = m->k / m->group_size, nw = mlxq_packed_cols(m->k, m->bits);
    const uint32_t *src = m->w + r * nw;
    const int gs = m->group_size, wpg = gs * m->bits / 32;
    uint8_t q[128];
    for (int64_t g = 0; g < ng; g++) {
        const float s = mlxq_load(m->scales, m->sb_dtype, r * ng + g);
        const float b = mlxq_load(m->biases, m->sb_dtype, r * ng + g);
        mlxq_unpack_row(q, src + g * wpg, gs, m->bits);
        group_ref(out + g * gs, q, gs, s, b, m->sb_dtype);
    }
}

/* ==== x86-64 ==== */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86 1
#define AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#define AVX512_TARGET __attribute__((target("avx512f,avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

/* Kernels are specialised per bit width (2, 4, 8 read straight from the words; 3, 5, 6 from
 * codes unpacked per group) and per scales dtype, so the inner loop holds no branch. A group
 * whose scale or bias is not finite (the only way to get a NaN: inf * 0, inf - inf, NaN) is
 * done by the scalar reference. */
enum { DT_BF16 = 0, DT_F16 = 1, DT_F32 = 2 };
#define SB_LOAD(DT, p, i)                                                                         \
    ((DT) == DT_BF16 ? mx_bf16_to_f32(((const uint16_t *)(p))[i])                                 \
     : (DT) == DT_F16 ? mx_f16_to_f32(((const uint16_t *)(p))[i])                                 \
                      : ((const float *)(p))[i])

/* ---- AVX-512: 16 codes per vector ---- */
/* Codes i..i+15 of a group (i % 16 == 0) as int32 lanes; w = the group's first word. For bit
 * widths that straddle words the codes come from q (already unpacked). */
INLINE AVX512_TARGET __m512i codes16(const uint32_t *w, const uint8_t *q, const int bits, int i) {
    if (bits == 2) { /* one word holds 16 codes */
        const __m512i sh = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        return _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32((int)w[i / 16]), sh),
                                _mm512_set1_epi32(3));
    }
    if (bits == 4) { /* 8 bytes: low nibble first, interleaved into 16 bytes, widened */
        const __m128i by = _mm_loadl_epi64((const __m128i *)((const uint8_t *)w + i / 2));
        const __m128i m4 = _mm_set1_epi8(15);
        const __m128i lo = _mm_and_si128(by, m4), hi = _mm_and_si128(_mm_srli_epi16(by, 4), m4);
        return _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi));
    }
    if (bits == 8) return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)((const uint8_t *)w + i)));
    return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(q + i)));
}

INLINE AVX512_TARGET __m512 round512(__m512 v, const int dt) {
    if (dt == DT_BF16) { /* round to nearest even at bit 16 */
        __m512i u = _mm512_castps_si512(v);
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        u = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
        return _mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32((int)0xffff0000u)));
    }
    if (dt == DT_F16)
        return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    return v;
}

INLINE AVX512_TARGET void row512_body(float *out, const mlxq_matrix *m, int64_t r, const int bits,
                                      const int dt) {
    const int64_t ng = m->k / m->group_size, nw = mlxq_packed_cols(m->k, bits);
    const uint32_t *src = m->w + r * nw;
    const int gs = m->group_size, wpg = gs * bits / 32;
    const bool direct = bits == 2 || bits == 4 || bits == 8;
    const void *sc = m->scales, *bi = m->biases;
    uint8_t q[128];
    for (int64_t g = 0; g < ng; g++) {
        const float s = SB_LOAD(dt, sc, r * ng + g), b = SB_LOAD(dt, bi, r * ng + g);
        const uint32_t *w = src + g * wpg;
        float *o = out + g * gs;
        if (!direct || !isfinite(s) || !isfinite(b)) mlxq_unpack_row(q, w, gs, bits);
        if (!isfinite(s) || !isfinite(b)) {
            group_ref(o, q, gs, s, b, m->sb_dtype);
            continue;
        }
        const __m512 vs = _mm512_set1_ps(s), vb = _mm512_set1_ps(b);
        if (bits <= 4) {
            /* at most 16 distinct values per group: compute them once (the same arithmetic),
             * then look each code up (vpermps reads the low 4 bits of each lane) */
            const __m512 lut = round512(
                _mm512_add_ps(_mm512_mul_ps(vs, _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
                                                                12, 13, 14, 15)), vb), dt);
            for (int i = 0; i < gs; i += 16) {
                __m512i c;
                if (bits == 4) {
                    const __m512i sh = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12,
                                                         16, 20, 24, 28);
                    c = _mm512_srlv_epi32(_mm512_inserti64x4(_mm512_set1_epi32((int)w[i / 8]),
                                                             _mm256_set1_epi32((int)w[i / 8 + 1]), 1), sh);
                } else {
                    c = codes16(w, q, bits, i);
                }
                _mm512_storeu_ps(o + i, _mm512_permutexvar_ps(c, lut));
            }
            continue;
        }
        for (int i = 0; i < gs; i += 16) {
            const __m512 c = _mm512_cvtepi32_ps(codes16(w, q, bits, i));
            /* multiply, then add: not fused, as the reference */
            _mm512_storeu_ps(o + i, round512(_mm512_add_ps(_mm512_mul_ps(vs, c), vb), dt));
        }
    }
}

/* ---- AVX2: 8 codes per vector ---- */
INLINE AVX2_TARGET __m256i codes8(const uint32_t *w, const uint8_t *q, const int bits, int i) {
    if (bits == 2) { /* half a word */
        const __m256i sh = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
        const __m256i v = _mm256_set1_epi32((int)(w[i / 16] >> (i % 16 ? 16 : 0)));
        return _mm256_and_si256(_mm256_srlv_epi32(v, sh), _mm256_set1_epi32(3));
    }
    if (bits == 4) {
        const __m256i sh = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
        return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)w[i / 8]), sh),
                                _mm256_set1_epi32(15));
    }
    if (bits == 8)
        return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)((const uint8_t *)w + i)));
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + i)));
}

INLINE AVX2_TARGET __m256 round256(__m256 v, const int dt) {
    if (dt == DT_BF16) {
        __m256i u = _mm256_castps_si256(v);
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
        u = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
        return _mm256_castsi256_ps(_mm256_and_si256(u, _mm256_set1_epi32((int)0xffff0000u)));
    }
    if (dt == DT_F16)
        return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    return v;
}

INLINE AVX2_TARGET void row256_body(float *out, const mlxq_matrix *m, int64_t r, const int bits,
                                    const int dt) {
    const int64_t ng = m->k / m->group_size, nw = mlxq_packed_cols(m->k, bits);
    const uint32_t *src = m->w + r * nw;
    const int gs = m->group_size, wpg = gs * bits / 32;
    const bool direct = bits == 2 || bits == 4 || bits == 8;
    const void *sc = m->scales, *bi = m->biases;
    uint8_t q[128];
    for (int64_t g = 0; g < ng; g++) {
        const float s = SB_LOAD(dt, sc, r * ng + g), b = SB_LOAD(dt, bi, r * ng + g);
        const uint32_t *w = src + g * wpg;
        float *o = out + g * gs;
        if (!direct || !isfinite(s) || !isfinite(b)) mlxq_unpack_row(q, w, gs, bits);
        if (!isfinite(s) || !isfinite(b)) {
            group_ref(o, q, gs, s, b, m->sb_dtype);
            continue;
        }
        const __m256 vs = _mm256_set1_ps(s), vb = _mm256_set1_ps(b);
        for (int i = 0; i < gs; i += 8) {
            const __m256 c = _mm256_cvtepi32_ps(codes8(w, q, bits, i));
            _mm256_storeu_ps(o + i, round256(_mm256_add_ps(_mm256_mul_ps(vs, c), vb), dt));
        }
    }
}

/* One function per (family, bits class, dtype): constants fold, no branch in the inner loop. */
typedef void (*row_fn)(float *out, const mlxq_matrix *m, int64_t r);
#define ROWF(FAM, TGT, BITS, DT)                                                                  \
    TGT static void row_##FAM##_##BITS##_##DT(float *out, const mlxq_matrix *m, int64_t r) {      \
        FAM##_body(out, m, r, BITS, DT);                                                          \
    }
#define ROWF_BITS(FAM, TGT, DT)                                                                   \
    ROWF(FAM, TGT, 2, DT) ROWF(FAM, TGT, 3, DT) ROWF(FAM, TGT, 4, DT) ROWF(FAM, TGT, 5, DT)      \
    ROWF(FAM, TGT, 6, DT) ROWF(FAM, TGT, 8, DT)
ROWF_BITS(row512, AVX512_TARGET, DT_BF16)
ROWF_BITS(row512, AVX512_TARGET, DT_F16)
ROWF_BITS(row512, AVX512_TARGET, DT_F32)
ROWF_BITS(row256, AVX2_TARGET, DT_BF16)
ROWF_BITS(row256, AVX2_TARGET, DT_F16)
ROWF_BITS(row256, AVX2_TARGET, DT_F32)
#define TAB_DT(FAM, DT)                                                                           \
    {NULL, NULL, row_##FAM##_2_##DT, row_##FAM##_3_##DT, row_##FAM##_4_##DT, row_##FAM##_5_##DT, \
     row_##FAM##_6_##DT, NULL, row_##FAM##_8_##DT}
static const row_fn k_rows512[3][9] = {TAB_DT(row512, DT_BF16), TAB_DT(row512, DT_F16), TAB_DT(row512, DT_F32)};
static const row_fn k_rows256[3][9] = {TAB_DT(row256, DT_BF16), TAB_DT(row256, DT_F16), TAB_DT(row256, DT_F32)};
#endif

/* ==== Dispatch ==== */

void mlxq_dequantize_row(float *out, const mlxq_matrix *m, int64_t r) {
#ifdef HAVE_X86
    const int dt = m->sb_dtype == MX_BF16 ? DT_BF16 : m->sb_dtype == MX_F16 ? DT_F16 : DT_F32;
    const cpu_isa isa = cpu_matmul_isa();
    if (isa == CPU_ISA_AVX512 || isa == CPU_ISA_AVX2) {
        (isa == CPU_ISA_AVX512 ? k_rows512 : k_rows256)[dt][m->bits](out, m, r);
        return;
    }
#endif
    mlxq_dequantize_row_ref(out, m, r);
}
