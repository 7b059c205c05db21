/* TurboQuant KV rows: rotation, codebook, codes (see kv_turbo.h). */
#include "kv/kv_turbo.h"

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

static void init_once(void) {
    for (int bits = 1; bits <= 4; bits++) lloyd_max(bits);
    /* D's signs: splitmix64 of the index, a fixed sequence on every platform and run (rows
     * written by one process are read back by it, but the prefix cache and the tests rely on
     * the same rows for the same input) */
    for (int i = 0; i < KV_TURBO_MAX_DIM; i++) {
        uint64_t z = (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        g_sign[i] = z >> 63 ? -1.0f : 1.0f;
    }
}

const float *kv_turbo_codebook(int bits) {
    pthread_once(&g_once, init_once);
    return bits >= 1 && bits <= 4 ? g_code[bits] : NULL;
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

void kv_turbo_decode_rot(const void *src, int bits, float *y, int64_t n) {
    pthread_once(&g_once, init_once);
    const float *c = g_code[bits];
    const uint8_t *blk = src;
    for (int64_t i0 = 0; i0 < n; i0 += KV_TURBO_BLOCK, blk += kv_turbo_block_bytes(bits)) {
        uint16_t h;
        memcpy(&h, blk, 2);
        const float s = mx_f16_to_f32(h);
        for (int j = 0; j < KV_TURBO_BLOCK; j++) y[i0 + j] = s * c[get_code(blk + 2, j, bits)];
    }
}

void kv_turbo_decode(const void *src, int dim, int bits, float *x) {
    kv_turbo_decode_rot(src, bits, x, dim);
    kv_turbo_unrotate(x, dim);
}
