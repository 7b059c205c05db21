/* Dequantizing a row of an MLX-quantized matrix, fast: the engine's quantized matmul
 * dequantizes every weight row once per step (decode), so this is its inner loop.
 *
 * Value of code q in a group with scale s and bias b (qfmt.h): the model-dtype value nearest
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
#include "backend/cpu/cpu_quant.h"

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

/* ==== Unpacking 3-, 5- and 6-bit codes fast ====
 * The words of a row are one little-endian bit stream, so 8 codes of BITS bits are BITS
 * bytes: 8 codes at a time from one 64-bit load of those bytes, constant shifts. Same values
 * as mlxq_unpack_row (the reference; test_quant compares the SIMD dequantization with it). */
static inline __attribute__((always_inline)) void unpack8s(uint8_t *q, const uint32_t *w, int gs,
                                                           const int bits) {
    const uint8_t *b = (const uint8_t *)w;
    const uint64_t mask = (1u << bits) - 1;
    for (int i = 0; i < gs; i += 8, b += bits) {
        /* little-endian: byte 0 is the low one. A whole 8-byte load (a copy of `bits` bytes
         * into a zeroed word stalls on store forwarding, ~2x slower), but not past the group */
        uint64_t v = 0;
        if (i * bits / 8 + 8 <= gs * bits / 8) memcpy(&v, b, 8); /* 3 bits: not the last 2 */
        else memcpy(&v, b, (size_t)bits);
        _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++)
            q[i + j] = (uint8_t)((v >> (bits * j)) & mask);
    }
}
static inline void unpack_group(uint8_t *q, const uint32_t *w, int gs, const int bits) {
    if (bits == 3) unpack8s(q, w, gs, 3);
    else if (bits == 5) unpack8s(q, w, gs, 5);
    else if (bits == 6) unpack8s(q, w, gs, 6);
    else mlxq_unpack_row(q, w, gs, bits);
}

/* ==== x86-64 ==== */
#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_X86 1
#include "backend/cpu/cpu_simd.h"

/* Kernels are specialised per bit width (AVX-512 reads every width straight from the words;
 * AVX2 2, 4, 8, and 3, 5, 6 from codes unpacked per group) and per scales dtype, so the inner
 * loop holds no branch. A group
 * whose scale or bias is not finite (the only way to get a NaN: inf * 0, inf - inf, NaN) is
 * done by the scalar reference. */
enum { DT_BF16 = 0, DT_F16 = 1, DT_F32 = 2 };
#define SB_LOAD(DT, p, i)                                                                         \
    ((DT) == DT_BF16 ? mx_bf16_to_f32(((const uint16_t *)(p))[i])                                 \
     : (DT) == DT_F16 ? mx_f16_to_f32(((const uint16_t *)(p))[i])                                 \
                      : ((const float *)(p))[i])

/* ---- AVX-512: 16 codes per vector ---- */
/* 3-, 5- and 6-bit codes straight from the words: code k of a 16-code chunk starting at bit
 * sb of word wb sits at bit p = sb + bits k, i.e. word p / 32, shift p % 32, and may straddle
 * two words. Each 64-bit lane gets the word pair (vpermd), a variable shift (vpsrlvq) leaves
 * the code at its bottom; two halves of 8 codes, then their low dwords in order (vpermt2d).
 * The permutations and shifts per (bits, sb) are constant tables (sb is 0 or 16: a chunk is
 * 48, 80 or 96 bits). */
typedef struct p16_tab {
    int32_t idx[2][16]; /* per half: dword pairs (p / 32, p / 32 + 1) of its 8 codes */
    int64_t sh[2][8];   /* per half: p % 32 */
} p16_tab;
#define P16_P(B, S, K) (16 * (S) + (B) * (K))
#define P16_W(B, S, K) P16_P(B, S, K) >> 5, (P16_P(B, S, K) >> 5) + 1
#define P16_IDX(B, S, H)                                                                           \
    {P16_W(B, S, 8 * (H)), P16_W(B, S, 8 * (H) + 1), P16_W(B, S, 8 * (H) + 2),                     \
     P16_W(B, S, 8 * (H) + 3), P16_W(B, S, 8 * (H) + 4), P16_W(B, S, 8 * (H) + 5),                 \
     P16_W(B, S, 8 * (H) + 6), P16_W(B, S, 8 * (H) + 7)}
#define P16_SH(B, S, H)                                                                            \
    {P16_P(B, S, 8 * (H)) & 31,     P16_P(B, S, 8 * (H) + 1) & 31, P16_P(B, S, 8 * (H) + 2) & 31, \
     P16_P(B, S, 8 * (H) + 3) & 31, P16_P(B, S, 8 * (H) + 4) & 31, P16_P(B, S, 8 * (H) + 5) & 31, \
     P16_P(B, S, 8 * (H) + 6) & 31, P16_P(B, S, 8 * (H) + 7) & 31}
#define P16_TAB(B, S) {{P16_IDX(B, S, 0), P16_IDX(B, S, 1)}, {P16_SH(B, S, 0), P16_SH(B, S, 1)}}
static const p16_tab g_p16[9][2] = {[3] = {P16_TAB(3, 0), P16_TAB(3, 1)},
                                    [5] = {P16_TAB(5, 0), P16_TAB(5, 1)},
                                    [6] = {P16_TAB(6, 0), P16_TAB(6, 1)}};
INLINE AVX512_TARGET __m512i codes16_p(const uint32_t *w, const int bits, int i) {
    const int p0 = bits * i, sb = p0 & 31, nw = (sb + 16 * bits + 31) >> 5; /* words, <= 3 */
    const __m512i v = _mm512_maskz_loadu_epi32((__mmask16)((1u << nw) - 1), w + (p0 >> 5));
    const p16_tab *t = &g_p16[bits][sb >> 4];
    const __m512i a = _mm512_srlv_epi64(
        _mm512_permutexvar_epi32(_mm512_loadu_si512(t->idx[0]), v), _mm512_loadu_si512(t->sh[0]));
    const __m512i b = _mm512_srlv_epi64(
        _mm512_permutexvar_epi32(_mm512_loadu_si512(t->idx[1]), v), _mm512_loadu_si512(t->sh[1]));
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    return _mm512_and_si512(_mm512_permutex2var_epi32(a, even, b), _mm512_set1_epi32((1 << bits) - 1));
}

/* Codes i..i+15 of a group (i % 16 == 0) as int32 lanes; w = the group's first word. */
INLINE AVX512_TARGET __m512i codes16(const uint32_t *w, const int bits, int i) {
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
    return codes16_p(w, bits, i); /* 3, 5, 6 */
}

/* 4-bit codes i..i+15 of a group (w: its first word) as lane indices for a 16-entry table:
 * only each lane's low 4 bits are meaningful (vpermps reads nothing else). */
INLINE AVX512_TARGET __m512i idx4_16(const uint32_t *w, int i) {
    const __m512i sh = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
    return _mm512_srlv_epi32(_mm512_inserti64x4(_mm512_set1_epi32((int)w[i / 8]),
                                                _mm256_set1_epi32((int)w[i / 8 + 1]), 1), sh);
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
    const void *sc = m->scales, *bi = m->biases;
    uint8_t q[128];
    for (int64_t g = 0; g < ng; g++) {
        const float s = SB_LOAD(dt, sc, r * ng + g), b = SB_LOAD(dt, bi, r * ng + g);
        const uint32_t *w = src + g * wpg;
        float *o = out + g * gs;
        if (!isfinite(s) || !isfinite(b)) { /* codes16 reads 3/5/6 bits from the words too */
            unpack_group(q, w, gs, bits);
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
                const __m512i c = bits == 4 ? idx4_16(w, i) : codes16(w, bits, i);
                _mm512_storeu_ps(o + i, _mm512_permutexvar_ps(c, lut));
            }
            continue;
        }
        for (int i = 0; i < gs; i += 16) {
            const __m512 c = _mm512_cvtepi32_ps(codes16(w, bits, i));
            /* multiply, then add: not fused, as the reference */
            _mm512_storeu_ps(o + i, round512(_mm512_add_ps(_mm512_mul_ps(vs, c), vb), dt));
        }
    }
}

/* ---- AVX-512, fused product of a few rows ----
 * out[r][c] = canonical dot (cpu_matmul.c) of x row r and dequantized weight row j0 + c, with
 * no fp32 copy of the weight rows: each 16-code chunk is dequantized in registers exactly as
 * row512_body does it (the same table or the same multiply, add and rounding) and goes
 * straight into each row's 16-lane FMA accumulator of that column, k ascending. So the outputs
 * are bit for bit those of the dequantize-then-multiply path (test_quant's canonical check),
 * for decode rows (1..4: cpu_matmul_fill_tile) without the scratch round trip that made the
 * 4-bit product no faster than bf16 (session 21: the dequantize 43% of a q4 decode step, the
 * fp32 product 16%). Every bit width: <= 4 bits by a table of the group's 16 values, 5, 6 and
 * 8 by multiply, add and rounding. A
 * non-finite scale or bias needs no scalar detour here: its values are the reference's but
 * for NaN encodings, and a NaN weight makes the output a NaN either way. */
#define QDOT_NC CPU_WTILE_MAX_NC
#define DIRECT(bits) ((bits) == 2 || (bits) == 4 || (bits) == 8) /* AVX2 reads these from the words */
#define QDOT_NR CPU_WTILE_MAX_ROWS
INLINE AVX512_TARGET void qdot512_body(const int NR, const int NC, const int bits, const int dt,
                                       const mlxq_matrix *m, int64_t j0, const float *x,
                                       int64_t ldx, float *out, int64_t ldo, const float *bias) {
    const int64_t ng = m->k / m->group_size, nw = mlxq_packed_cols(m->k, bits);
    const int gs = m->group_size, wpg = gs * bits / 32;
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512 acc[QDOT_NR][QDOT_NC];
    UNROLL
    for (int r = 0; r < NR; r++)
        UNROLL
        for (int c = 0; c < NC; c++) acc[r][c] = _mm512_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        const float *xg = x + g * gs;
        const uint32_t *w[QDOT_NC];
        __m512 t0[QDOT_NC], t1[QDOT_NC]; /* bits <= 4: the table; 5, 6, 8: scale, bias */
        UNROLL
        for (int c = 0; c < NC; c++) {
            const int64_t r = j0 + c;
            t0[c] = _mm512_set1_ps(SB_LOAD(dt, m->scales, r * ng + g));
            t1[c] = _mm512_set1_ps(SB_LOAD(dt, m->biases, r * ng + g));
            w[c] = m->w + r * nw + g * wpg;
            if (bits <= 4) t0[c] = round512(_mm512_add_ps(_mm512_mul_ps(t0[c], iota), t1[c]), dt);
        }
        for (int i = 0; i < gs; i += 16) {
            __m512 xv[QDOT_NR];
            UNROLL
            for (int r = 0; r < NR; r++) xv[r] = _mm512_loadu_ps(xg + r * ldx + i);
            UNROLL
            for (int c = 0; c < NC; c++) {
                __m512 wv;
                if (bits == 4) wv = _mm512_permutexvar_ps(idx4_16(w[c], i), t0[c]);
                else if (bits <= 3) wv = _mm512_permutexvar_ps(codes16(w[c], bits, i), t0[c]);
                else /* multiply, then add: not fused, as the reference */
                    wv = round512(_mm512_add_ps(_mm512_mul_ps(t0[c], _mm512_cvtepi32_ps(
                                                                        codes16(w[c], bits, i))),
                                                t1[c]),
                                  dt);
                UNROLL
                for (int r = 0; r < NR; r++) acc[r][c] = _mm512_fmadd_ps(xv[r], wv, acc[r][c]);
            }
        }
    }
    UNROLL
    for (int r = 0; r < NR; r++)
        UNROLL
        for (int c = 0; c < NC; c++) {
            const float v = hsum16(acc[r][c]);
            out[r * ldo + c] = bias ? v + bias[c] : v;
        }
}

/* The exported tile of a kernel body (qdot512_body / qdot256_body) for one bits and dtype:
 * column blocks of W1 (one row) or WN (2..4 rows) columns, each a call with the shape a
 * constant (CASES: the (rows, columns) pairs the body is compiled for). */
#define QC(BODY, R, C, B, T)                                                                       \
    case (R) * 8 + (C):                                                                            \
        BODY(R, C, B, T, ctx, j0 + c0, x, ldx, out + c0, ldo, bias ? bias + c0 : NULL);           \
        break;
#define QDOTF(NAME, TGT, W1, WN, CASES, BITS, DT)                                                  \
    TGT static void NAME##_##BITS##_##DT(int nr, int nc, const float *x, int64_t ldx, int64_t j0, \
                                         float *out, int64_t ldo, const float *bias,              \
                                         const void *ctx) {                                        \
        const int w = nr == 1 ? (W1) : (WN);                                                       \
        for (int c0 = 0; c0 < nc; c0 += w) {                                                       \
            switch (nr * 8 + (nc - c0 < w ? nc - c0 : w)) {                                        \
                CASES(BITS, DT)                                                                    \
            default: break;                                                                        \
            }                                                                                      \
        }                                                                                          \
    }
#define QDOTF_DT(NAME, TGT, W1, WN, CASES, BITS)                                                   \
    QDOTF(NAME, TGT, W1, WN, CASES, BITS, DT_BF16) QDOTF(NAME, TGT, W1, WN, CASES, BITS, DT_F16)   \
    QDOTF(NAME, TGT, W1, WN, CASES, BITS, DT_F32)
#define QDOTF_ALL(NAME, TGT, W1, WN, CASES)                                                        \
    QDOTF_DT(NAME, TGT, W1, WN, CASES, 2) QDOTF_DT(NAME, TGT, W1, WN, CASES, 3)                    \
    QDOTF_DT(NAME, TGT, W1, WN, CASES, 4) QDOTF_DT(NAME, TGT, W1, WN, CASES, 5)                    \
    QDOTF_DT(NAME, TGT, W1, WN, CASES, 6) QDOTF_DT(NAME, TGT, W1, WN, CASES, 8)

/* One row: up to 6 columns at once; 2..4 rows: 3 columns at a time (accumulators and the
 * columns' tables fit the 32 registers). */
#define Q5(R, C, B, T) QC(qdot512_body, R, C, B, T)
#define QCASES5(B, T)                                                                              \
    Q5(1, 1, B, T) Q5(1, 2, B, T) Q5(1, 3, B, T) Q5(1, 4, B, T) Q5(1, 5, B, T) Q5(1, 6, B, T)     \
    Q5(2, 1, B, T) Q5(2, 2, B, T) Q5(2, 3, B, T) Q5(3, 1, B, T) Q5(3, 2, B, T) Q5(3, 3, B, T)     \
    Q5(4, 1, B, T) Q5(4, 2, B, T) Q5(4, 3, B, T)
QDOTF_ALL(qdot, AVX512_TARGET, 6, 3, QCASES5)

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
    const bool direct = DIRECT(bits);
    const void *sc = m->scales, *bi = m->biases;
    uint8_t q[128];
    for (int64_t g = 0; g < ng; g++) {
        const float s = SB_LOAD(dt, sc, r * ng + g), b = SB_LOAD(dt, bi, r * ng + g);
        const uint32_t *w = src + g * wpg;
        float *o = out + g * gs;
        if (!direct || !isfinite(s) || !isfinite(b)) unpack_group(q, w, gs, bits);
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

/* ---- AVX2, fused one-row product: as qdot512_body, a 16-lane accumulator in two registers
 * (lanes 0-7, 8-15). Bits <= 4 look the codes up in the group's 16 values (two 8-entry
 * tables, vpermps on each and a blend on the code's bit 3: 1.5x the multiply-add-round per
 * code at 4 bits), 8 bits dequantize as row256_body. ---- */
INLINE AVX2_TARGET __m256 lut16_256(__m256i idx, __m256 t_lo, __m256 t_hi) {
    const __m256 a = _mm256_permutevar8x32_ps(t_lo, idx), b = _mm256_permutevar8x32_ps(t_hi, idx);
    return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
}

INLINE AVX2_TARGET void qdot256_body(const int NR, const int NC, const int bits, const int dt,
                                     const mlxq_matrix *m, int64_t j0, const float *x,
                                     int64_t ldx, float *out, int64_t ldo, const float *bias) {
    const int64_t ng = m->k / m->group_size, nw = mlxq_packed_cols(m->k, bits);
    const int gs = m->group_size, wpg = gs * bits / 32;
    __m256 lo[QDOT_NR][QDOT_NC], hi[QDOT_NR][QDOT_NC];
    UNROLL
    for (int r = 0; r < NR; r++)
        UNROLL
        for (int c = 0; c < NC; c++) lo[r][c] = hi[r][c] = _mm256_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        const float *xg = x + g * gs;
        const uint32_t *w[QDOT_NC];
        __m256 t0[QDOT_NC], t1[QDOT_NC]; /* bits <= 4: values 0-7, 8-15; 5, 6, 8: scale, bias */
        uint8_t q[DIRECT(bits) ? 1 : QDOT_NC][128]; /* 3, 5, 6 bits: the group's codes */
        const __m256 iota = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7), eight = _mm256_set1_ps(8);
        UNROLL
        for (int c = 0; c < NC; c++) {
            const int64_t r = j0 + c;
            t0[c] = _mm256_set1_ps(SB_LOAD(dt, m->scales, r * ng + g));
            t1[c] = _mm256_set1_ps(SB_LOAD(dt, m->biases, r * ng + g));
            w[c] = m->w + r * nw + g * wpg;
            if (!DIRECT(bits)) unpack_group(q[c], w[c], gs, bits);
            if (bits <= 4) { /* the group's values, as the reference computes each */
                const __m256 s = t0[c], b = t1[c];
                t0[c] = round256(_mm256_add_ps(_mm256_mul_ps(s, iota), b), dt);
                const __m256 hi8 = _mm256_add_ps(iota, eight);
                t1[c] = round256(_mm256_add_ps(_mm256_mul_ps(s, hi8), b), dt);
            }
        }
        for (int i = 0; i < gs; i += 16) {
            UNROLL
            for (int c = 0; c < NC; c++) {
                __m256 wl, wh;
                const uint8_t *qc = q[DIRECT(bits) ? 0 : c];
                if (bits <= 4) {
                    wl = lut16_256(codes8(w[c], qc, bits, i), t0[c], t1[c]);
                    wh = lut16_256(codes8(w[c], qc, bits, i + 8), t0[c], t1[c]);
                } else { /* multiply, then add: not fused, as the reference */
                    const __m256 cl = _mm256_cvtepi32_ps(codes8(w[c], qc, bits, i));
                    const __m256 ch = _mm256_cvtepi32_ps(codes8(w[c], qc, bits, i + 8));
                    wl = round256(_mm256_add_ps(_mm256_mul_ps(t0[c], cl), t1[c]), dt);
                    wh = round256(_mm256_add_ps(_mm256_mul_ps(t0[c], ch), t1[c]), dt);
                }
                UNROLL
                for (int r = 0; r < NR; r++) {
                    lo[r][c] = _mm256_fmadd_ps(_mm256_loadu_ps(xg + r * ldx + i), wl, lo[r][c]);
                    hi[r][c] = _mm256_fmadd_ps(_mm256_loadu_ps(xg + r * ldx + i + 8), wh, hi[r][c]);
                }
            }
        }
    }
    UNROLL
    for (int r = 0; r < NR; r++)
        UNROLL
        for (int c = 0; c < NC; c++) {
            const float v = hsum8(_mm256_add_ps(lo[r][c], hi[r][c]));
            out[r * ldo + c] = bias ? v + bias[c] : v;
        }
}

/* One row: up to 3 columns at once; 2..4 rows: one column (the dense AVX2 tiles' shapes) */
#define Q2(R, C, B, T) QC(qdot256_body, R, C, B, T)
#define QCASES2(B, T)                                                                              \
    Q2(1, 1, B, T) Q2(1, 2, B, T) Q2(1, 3, B, T) Q2(2, 1, B, T) Q2(3, 1, B, T) Q2(4, 1, B, T)
QDOTF_ALL(qdot2, AVX2_TARGET, 3, 1, QCASES2)

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

cpu_wtile_fn mlxq_wtile_for(const mlxq_matrix *m) {
#ifdef HAVE_X86
    const cpu_isa isa = cpu_matmul_isa();
    const int dt = m->sb_dtype == MX_BF16 ? DT_BF16 : m->sb_dtype == MX_F16 ? DT_F16 : DT_F32;
#define WT_DT(FAM, DT)                                                                             \
    {NULL, NULL, FAM##_2_##DT, FAM##_3_##DT, FAM##_4_##DT, FAM##_5_##DT, FAM##_6_##DT, NULL,      \
     FAM##_8_##DT}
    static const cpu_wtile_fn tab512[3][9] = {WT_DT(qdot, DT_BF16), WT_DT(qdot, DT_F16),
                                              WT_DT(qdot, DT_F32)};
    static const cpu_wtile_fn tab256[3][9] = {WT_DT(qdot2, DT_BF16), WT_DT(qdot2, DT_F16),
                                              WT_DT(qdot2, DT_F32)};
    if ((isa == CPU_ISA_AVX512 || isa == CPU_ISA_AVX2) && mlxq_valid_bits(m->bits))
        return (isa == CPU_ISA_AVX512 ? tab512 : tab256)[dt][m->bits];
#endif
    (void)m;
    return NULL;
}

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
