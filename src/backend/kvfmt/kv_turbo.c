/* TurboQuant KV rows: rotation, codebook, codes (see kv_turbo.h). */
#include "backend/kvfmt/kv_turbo.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "base/dtype.h"

/* ==== Codebooks: Lloyd-Max quantizers of N(0, 1) ====
 * Iterated to a fixed point in double precision (thresholds halfway between centroids, each
 * centroid the mean of N(0, 1) over its cell), so no table is copied from anywhere; the unit
 * test compares the result with Max's published table (1960). */
static float g_code[5][16];  /* [bits][level] */
static float g_bound[5][15]; /* [bits][level]: cell k is (bound[k - 1], bound[k]] */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static double npdf(double x) { return exp(-0.5 * x * x) / sqrt(2.0 * M_PI); }
static double ncdf(double x) { return 0.5 * erfc(-x / sqrt(2.0)); }

static void lloyd_max(int bits) {
    const int n = 1 << bits;
    double c[16], b[17];
    for (int k = 0; k < n; k++) c[k] = -3.0 + 6.0 * (k + 0.5) / n;
    for (int it = 0; it < 100000; it++) {
        b[0] = -INFINITY, b[n] = INFINITY;
        for (int k = 1; k < n; k++) b[k] = 0.5 * (c[k - 1] + c[k]);
        double moved = 0.0;
        for (int k = 0; k < n; k++) {
            const double p = ncdf(b[k + 1]) - ncdf(b[k]);
            const double m = (npdf(b[k]) - npdf(b[k + 1])) / p;
            moved = fmax(moved, fabs(m - c[k]));
            c[k] = m;
        }
        if (moved < 1e-14) break;
    }
    for (int k = 0; k < n; k++) g_code[bits][k] = (float)c[k];
    for (int k = 1; k < n; k++) g_bound[bits][k - 1] = (float)(0.5 * (c[k - 1] + c[k]));
}

static float g_sign[KV_TURBO_MAX_DIM];
static int g_avx2; /* the CPU has AVX2 (reads): set by init_once */

static void init_once(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    g_avx2 = __builtin_cpu_supports("avx2");
#endif
    for (int bits = 1; bits <= 4; bits++) lloyd_max(bits);
    for (int i = 0; i < KV_TURBO_MAX_DIM; i++) g_sign[i] = kv_turbo_sign(i);
}

const float *kv_turbo_codebook(int bits) {
    pthread_once(&g_once, init_once);
    return bits >= 1 && bits <= 4 ? g_code[bits] : NULL;
}

const float *kv_turbo_bounds(int bits) {
    pthread_once(&g_once, init_once);
    return bits >= 1 && bits <= 4 ? g_bound[bits] : NULL;
}

int kv_turbo_check(int dim, int bits, mx_error *err) {
    if (bits < 2 || bits > 4) return mx_fail(err, "TurboQuant KV: %d bits (2, 3 or 4 are supported)", bits);
    if (dim < KV_TURBO_BLOCK || dim > KV_TURBO_MAX_DIM || (dim & (dim - 1)))
        return mx_fail(err, "TurboQuant KV needs a power-of-two head_dim from %d to %d (its rotation is a "
                       "Walsh-Hadamard transform); this model's head_dim is %d", KV_TURBO_BLOCK, KV_TURBO_MAX_DIM, dim);
    return 0;
}

/* ==== Rotation ==== */
/* x <- H x (unnormalised Walsh-Hadamard transform, in place). */
static void fwht(float *x, int n) {
    for (int h = 1; h < n; h *= 2)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                const float a = x[j], b = x[j + h];
                x[j] = a + b, x[j + h] = a - b;
            }
}

void kv_turbo_rotate(float *x, int dim) {
    pthread_once(&g_once, init_once);
    for (int i = 0; i < dim; i++) x[i] *= g_sign[i];
    fwht(x, dim);
    const float r = 1.0f / sqrtf((float)dim);
    for (int i = 0; i < dim; i++) x[i] *= r;
}

void kv_turbo_unrotate(float *x, int dim) {
    pthread_once(&g_once, init_once);
    fwht(x, dim);
    const float r = 1.0f / sqrtf((float)dim);
    for (int i = 0; i < dim; i++) x[i] *= r * g_sign[i];
}

/* ==== Codes ==== */
static void put_code(uint8_t *p, int i, int bits, unsigned v) {
    const int bit = i * bits;
    const unsigned w = v << (bit & 7); /* at most 4 + 7 bits: two bytes */
    p[bit >> 3] |= (uint8_t)w;
    if ((bit & 7) + bits > 8) p[(bit >> 3) + 1] |= (uint8_t)(w >> 8);
}

static unsigned get_code(const uint8_t *p, int i, int bits) {
    const int bit = i * bits;
    unsigned w = p[bit >> 3];
    if ((bit & 7) + bits > 8) w |= (unsigned)p[(bit >> 3) + 1] << 8;
    return (w >> (bit & 7)) & ((1u << bits) - 1);
}

void kv_turbo_encode(const float *x, int dim, int bits, void *dst, float *y) {
    pthread_once(&g_once, init_once);
    const int n = 1 << bits;
    const float *c = g_code[bits], *b = g_bound[bits];
    double nx = 0.0;
    for (int i = 0; i < dim; i++) nx += (double)x[i] * x[i];
    nx = sqrt(nx);
    memcpy(y, x, (size_t)dim * sizeof *y);
    kv_turbo_rotate(y, dim);
    /* sqrt(dim) R x / |x|: coordinates ~ N(0, 1), the codebook's scale */
    const double to_unit = nx > 0.0 ? sqrt((double)dim) / nx : 0.0;
    uint8_t *blk = dst;
    for (int i0 = 0; i0 < dim; i0 += KV_TURBO_BLOCK, blk += kv_turbo_block_bytes(bits)) {
        uint8_t *codes = blk + 2;
        memset(codes, 0, kv_turbo_block_bytes(bits) - 2);
        double ny = 0.0, nc = 0.0;
        for (int j = 0; j < KV_TURBO_BLOCK; j++) {
            const double v = y[i0 + j] * to_unit;
            int k = 0;
            while (k < n - 1 && v > b[k]) k++;
            put_code(codes, j, bits, (unsigned)k);
            ny += (double)y[i0 + j] * y[i0 + j];
            nc += (double)c[k] * c[k];
        }
        /* norm correction: |s c| = |y's block|; fp16 saturates rather than overflow to inf */
        const double s = nc > 0.0 ? sqrt(ny / nc) : 0.0;
        const uint16_t h = mx_f32_to_f16((float)(s < 65504.0 ? s : 65504.0));
        memcpy(blk, &h, 2);
    }
}

/* ==== Reads: codes -> s * c[code] ====
 * Every path computes each value as the one fp32 product s * c[code] (the reference's), so all
 * give the same bits; the fast ones form the block's 2^bits products first (a table t[k] =
 * s * c[k], the same multiplies) and then only look codes up. Codes are taken 8 at a time:
 * 8 codes are exactly `bits` whole bytes (code j of the group at bit j * bits of their
 * little-endian word), so no load crosses a block's end. */

/* The definition: one code at a time (get_code), one multiply per value. */
static void decode_rot_ref(const uint8_t *blk, int bits, float *y, int64_t n) {
    const float *c = g_code[bits];
    for (int64_t i0 = 0; i0 < n; i0 += KV_TURBO_BLOCK, blk += kv_turbo_block_bytes(bits)) {
        uint16_t h;
        memcpy(&h, blk, 2);
        const float s = mx_f16_to_f32(h);
        for (int j = 0; j < KV_TURBO_BLOCK; j++) y[i0 + j] = s * c[get_code(blk + 2, j, bits)];
    }
}

#define TQ_INLINE static inline __attribute__((always_inline))

/* The `bits` bytes of one group of 8 codes as a little-endian word. */
TQ_INLINE uint32_t group_word(const uint8_t *p, int bits) {
    if (bits == 4) return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    if (bits == 3) return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16;
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

/* A block's fp16 scale: mx_f16_to_f32's value, its normal numbers inline (the same formula). */
TQ_INLINE float block_scale(const uint8_t *blk) {
    const uint32_t h = (uint32_t)blk[0] | (uint32_t)blk[1] << 8, exp = (h >> 10) & 0x1f;
    if (exp == 0 || exp == 31) return mx_f16_to_f32((uint16_t)h); /* zero, subnormal, inf, NaN */
    const uint32_t u = (h >> 15) << 31 | (exp + 112) << 23 | (h & 0x3ff) << 13;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Portable: the table, then plain lookups (bits a constant after inlining). */
TQ_INLINE void decode_rot_c_bits(const uint8_t *blk, int bits, float *y, int64_t n) {
    const float *c = g_code[bits]; /* [16]: the entries past 2^bits are 0 */
    const uint32_t mask = (1u << bits) - 1;
    for (int64_t i0 = 0; i0 < n; i0 += KV_TURBO_BLOCK, blk += kv_turbo_block_bytes(bits)) {
        const float s = block_scale(blk);
        float t[16]; /* [2^bits used] */
        for (int k = 0; k < 16; k++) t[k] = s * c[k];
        const uint8_t *p = blk + 2;
        for (int g = 0; g < KV_TURBO_BLOCK / 8; g++, p += bits) {
            const uint32_t w = group_word(p, bits);
            for (int j = 0; j < 8; j++) y[i0 + 8 * g + j] = t[(w >> (j * bits)) & mask];
        }
    }
}

static void decode_rot_c(const uint8_t *blk, int bits, float *y, int64_t n) {
    switch (bits) {
    case 2: decode_rot_c_bits(blk, 2, y, n); break;
    case 3: decode_rot_c_bits(blk, 3, y, n); break;
    default: decode_rot_c_bits(blk, 4, y, n); break;
    }
}

/* AVX2: a group's word in all 8 lanes, shifted per lane (srlv) and masked: the 8 codes; the
 * table's 8 (or 16: two halves, blended on the code's bit 3) products in registers, looked up
 * by permutevar8x32. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TQ_HAVE_AVX2 1
#define TQ_AVX2 __attribute__((target("avx2")))

TQ_INLINE TQ_AVX2 void decode_rot_avx2_bits(const uint8_t *blk, int bits, float *y, int64_t n) {
    const __m256 c_lo = _mm256_loadu_ps(g_code[bits]), c_hi = _mm256_loadu_ps(g_code[bits] + 8);
    const __m256i shift = _mm256_setr_epi32(0, bits, 2 * bits, 3 * bits, 4 * bits, 5 * bits, 6 * bits, 7 * bits);
    const __m256i mask = _mm256_set1_epi32((1 << bits) - 1);
    for (int64_t i0 = 0; i0 < n; i0 += KV_TURBO_BLOCK, blk += kv_turbo_block_bytes(bits)) {
        const __m256 s = _mm256_set1_ps(block_scale(blk));
        const __m256 t_lo = _mm256_mul_ps(s, c_lo); /* t[0..8) */
        const __m256 t_hi = _mm256_mul_ps(s, c_hi); /* t[8..16): 4 bits only */
        const uint8_t *p = blk + 2;
        for (int g = 0; g < KV_TURBO_BLOCK / 8; g++, p += bits) {
            const __m256i w = _mm256_set1_epi32((int)group_word(p, bits));
            const __m256i code = _mm256_and_si256(_mm256_srlv_epi32(w, shift), mask);
            __m256 v = _mm256_permutevar8x32_ps(t_lo, code);
            if (bits == 4) /* codes 8..15: bit 3 into the sign bit picks the upper half */
                v = _mm256_blendv_ps(v, _mm256_permutevar8x32_ps(t_hi, code),
                                     _mm256_castsi256_ps(_mm256_slli_epi32(code, 28)));
            _mm256_storeu_ps(y + i0 + 8 * g, v);
        }
    }
}

static TQ_AVX2 void decode_rot_avx2(const uint8_t *blk, int bits, float *y, int64_t n) {
    switch (bits) {
    case 2: decode_rot_avx2_bits(blk, 2, y, n); break;
    case 3: decode_rot_avx2_bits(blk, 3, y, n); break;
    default: decode_rot_avx2_bits(blk, 4, y, n); break;
    }
}
#endif

static int have_avx2(void) { return g_avx2; }

int kv_turbo_decode_rot_with(const void *src, int bits, float *y, int64_t n, kv_turbo_read how) {
    pthread_once(&g_once, init_once);
    if (how == KV_TURBO_READ_AUTO) how = have_avx2() ? KV_TURBO_READ_AVX2 : KV_TURBO_READ_C;
    switch (how) {
    case KV_TURBO_READ_REF: decode_rot_ref(src, bits, y, n); return 0;
    case KV_TURBO_READ_C: decode_rot_c(src, bits, y, n); return 0;
    case KV_TURBO_READ_AVX2:
#ifdef TQ_HAVE_AVX2
        if (!have_avx2()) return -1;
        decode_rot_avx2(src, bits, y, n);
        return 0;
#else
        return -1;
#endif
    default: return -1;
    }
}

void kv_turbo_decode_rot(const void *src, int bits, float *y, int64_t n) {
    kv_turbo_decode_rot_with(src, bits, y, n, KV_TURBO_READ_AUTO);
}

void kv_turbo_decode(const void *src, int dim, int bits, float *x) {
    kv_turbo_decode_rot(src, bits, x, dim);
    kv_turbo_unrotate(x, dim);
}
