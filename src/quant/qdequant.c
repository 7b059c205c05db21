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

/* ---- AVX-512: 16 codes per vector ---- */
/* Codes i..i+15 of a group (i % 16 == 0) as int32 lanes; w = the group's first word. For bit
 * widths that straddle words the codes come from q (already unpacked). */
INLINE AVX512_TARGET __m512i codes16(const uint32_t *w, const uint8_t *q, int bits, int i) {
    switch (bits) {
    case 2: { /* one word holds 16 codes */
        const __m512i sh = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        return _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32((int)w[i / 16]), sh),
                                _mm512_set1_epi32(3));
    }
    case 4: { /* two words: lanes 0-7 from the first, 8-15 from the second */
        const __m512i sh = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
        const __m512i v = _mm512_inserti64x4(_mm512_set1_epi32((int)w[i / 8]),
                                             _mm256_set1_epi32((int)w[i / 8 + 1]), 1);
        return _mm512_and_si512(_mm512_srlv_epi32(v, sh), _mm512_set1_epi32(15));
    }
    case 8: /* bytes */
        return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)((const uint8_t *)w + i)));
    default:
        return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(q + i)));
    }
}

INLINE AVX512_TARGET void group512(float *o, const uint32_t *w, const uint8_t *q, int bits, int gs,
                                   float s, float b, mx_dtype t) {
    const __m512 vs = _mm512_set1_ps(s), vb = _mm512_set1_ps(b);
    for (int i = 0; i < gs; i += 16) {
        const __m512 c = _mm512_cvtepi32_ps(codes16(w, q, bits, i));
        __m512 v = _mm512_add_ps(_mm512_mul_ps(vs, c), vb); /* not fused, as the reference */
        if (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q)) { /* NaN: the reference's encoding */
            uint8_t qq[16];
            _mm_storeu_si128((__m128i *)qq, _mm512_cvtepi32_epi8(codes16(w, q, bits, i)));
            group_ref(o + i, qq, 16, s, b, t);
            continue;
        }
        if (t == MX_BF16) { /* round to nearest even at bit 16 */
            __m512i u = _mm512_castps_si512(v);
            const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
            u = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
            v = _mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32((int)0xffff0000u)));
        } else if (t == MX_F16) {
            v = _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
        _mm512_storeu_ps(o + i, v);
    }
}

AVX512_TARGET static void row512(float *out, const mlxq_matrix *m, int64_t r) {
    const int64_t ng = m->k / m->group_size, nw = mlxq_packed_cols(m->k, m->bits);
    const uint32_t *src = m->w + r * nw;
    const int gs = m->group_size, bits = m->bits, wpg = gs * bits / 32;
    const bool direct = bits == 2 || bits == 4 || bits == 8;
    uint8_t q[128];
    for (int64_t g = 0; g < ng; g++) {
        const float s = mlxq_load(m->scales, m->sb_dtype, r * ng + g);
        const float b = mlxq_load(m->biases, m->sb_dtype, r * ng + g);
        if (!direct) mlxq_unpack_row(q, src + g * wpg, gs, bits);
        group512(out + g * gs, src + g * wpg, q, bits, gs, s, b, m->sb_dtype);
    }
}

/* ---- AVX2: 8 codes per vector ---- */
INLINE AVX2_TARGET __m256i codes8(const uint32_t *w, const uint8_t *q, int bits, int i) {
    switch (bits) {
    case 2: { /* half a word */
        const __m256i sh = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
        const __m256i v = _mm256_set1_epi32((int)(w[i / 16] >> (i % 16 ? 16 : 0)));
        return _mm256_and_si256(_mm256_srlv_epi32(v, sh), _mm256_set1_epi32(3));
    }
    case 4: {
        const __m256i sh = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
        return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)w[i / 8]), sh),
                                _mm256_set1_epi32(15));
    }
    case 8:
        return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)((const uint8_t *)w + i)));
    default:
        return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + i)));
    }
}

INLINE AVX2_TARGET void group256(float *o, const uint32_t *w, const uint8_t *q, int bits, int gs,
                                 float s, float b, mx_dtype t) {
    const __m256 vs = _mm256_set1_ps(s), vb = _mm256_set1_ps(b);
    for (int i = 0; i < gs; i += 8) {
        const __m256i ci = codes8(w, q, bits, i);
        __m256 v = _mm256_add_ps(_mm256_mul_ps(vs, _mm256_cvtepi32_ps(ci)), vb);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {
            uint8_t qq[8];
            int32_t c32[8];
            _mm256_storeu_si256((__m256i *)c32, ci);
            for (int j = 0; j < 8; j++) qq[j] = (uint8_t)c32[j];
            group_ref(o + i, qq, 8, s, b, t);
            continue;
        }
        if (t == MX_BF16) {
            __m256i u = _mm256_castps_si256(v);
            const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
            u = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
            v = _mm256_castsi256_ps(_mm256_and_si256(u, _mm256_set1_epi32((int)0xffff0000u)));
        } else if (t == MX_F16) {
            v = _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
        _mm256_storeu_ps(o + i, v);
    }
}

AVX2_TARGET static void row256(float *out, const mlxq_matrix *m, int64_t r) {
    const int64_t ng = m->k / m->group_size, nw = mlxq_packed_cols(m->k, m->bits);
    const uint32_t *src = m->w + r * nw;
    const int gs = m->group_size, bits = m->bits, wpg = gs * bits / 32;
    const bool direct = bits == 2 || bits == 4 || bits == 8;
    uint8_t q[128];
    for (int64_t g = 0; g < ng; g++) {
        const float s = mlxq_load(m->scales, m->sb_dtype, r * ng + g);
        const float b = mlxq_load(m->biases, m->sb_dtype, r * ng + g);
        if (!direct) mlxq_unpack_row(q, src + g * wpg, gs, bits);
        group256(out + g * gs, src + g * wpg, q, bits, gs, s, b, m->sb_dtype);
    }
}
#endif

/* ==== Dispatch ==== */

void mlxq_dequantize_row(float *out, const mlxq_matrix *m, int64_t r) {
#ifdef HAVE_X86
    switch (cpu_matmul_isa()) {
    case CPU_ISA_AVX512: row512(out, m, r); return;
    case CPU_ISA_AVX2: row256(out, m, r); return;
    default: break;
    }
#endif
    mlxq_dequantize_row_ref(out, m, r);
}
