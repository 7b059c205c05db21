/* TurboQuant KV rows (src/backend/kvfmt/kv_turbo.c): the codebooks against Max's published Lloyd-Max
 * table, the rotation's orthonormality, each code the nearest centroid of its rotated
 * coordinate (packing at 2, 3 and 4 bits), the error against the Lloyd-Max distortion, and
 * the rotated-space dot product attention relies on. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/cpu/cpu_internal.h"
#include "base/dtype.h"
#include "backend/kvfmt/kv_quant.h"
#include "backend/kvfmt/kv_turbo.h"
#include "kv_attn_fixture.h"

static uint64_t g_rng = 0x1234567887654321ull;
static double uniform(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return ((g_rng >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
static float gauss(void) { return (float)(sqrt(-2.0 * log(uniform())) * cos(2.0 * M_PI * uniform())); }

/* J. Max, "Quantizing for minimum distortion", IRE Trans. Inf. Theory 6 (1960), Table I: the
 * positive output levels of the optimum quantizer of N(0, 1) for 2, 4, 8 and 16 levels. */
static void test_codebook_matches_max(void **st) {
    (void)st;
    static const double l1[] = {0.7980}, l2[] = {0.4528, 1.510}, l3[] = {0.2451, 0.7560, 1.344, 2.152},
                        l4[] = {0.1284, 0.3881, 0.6568, 0.9424, 1.256, 1.618, 2.069, 2.733};
    static const double *tab[] = {NULL, l1, l2, l3, l4};
    for (int bits = 1; bits <= 4; bits++) {
        const float *c = kv_turbo_codebook(bits);
        const int n = 1 << bits;
        for (int k = 0; k < n / 2; k++) {
            assert_true(fabs(c[n / 2 + k] - tab[bits][k]) < 1.5e-3);
            assert_true(fabs(c[n / 2 - 1 - k] + tab[bits][k]) < 1.5e-3); /* symmetric */
        }
    }
    assert_null(kv_turbo_codebook(5));
}

static void test_rotation(void **st) {
    (void)st;
    for (int d = 2; d <= 256; d *= 2) {
        float x[256], y[256];
        double nx = 0.0, ny = 0.0;
        for (int i = 0; i < d; i++) x[i] = y[i] = gauss(), nx += (double)x[i] * x[i];
        kv_turbo_rotate(y, d);
        for (int i = 0; i < d; i++) ny += (double)y[i] * y[i];
        assert_true(fabs(ny - nx) <= 1e-5 * nx);
        kv_turbo_unrotate(y, d);
        for (int i = 0; i < d; i++) assert_true(fabsf(y[i] - x[i]) <= 1e-5f * (1.0f + fabsf(x[i])));
        /* a basis vector spreads over every coordinate with magnitude 1 / sqrt(d) */
        memset(y, 0, sizeof y);
        y[d / 2] = 1.0f;
        kv_turbo_rotate(y, d);
        for (int i = 0; i < d; i++) assert_true(fabsf(fabsf(y[i]) - 1.0f / sqrtf((float)d)) < 1e-6f);
    }
}

/* Every code is the nearest centroid of sqrt(d) R x / |x| (brute force here), each block's
 * values lie on the codebook times its fp16 scale, and have the norm of the rotated block. */
static void test_codes_nearest(void **st) {
    (void)st;
    for (int bits = 2; bits <= 4; bits++) {
        const int d = 128, n = 1 << bits;
        const float *c = kv_turbo_codebook(bits);
        for (int t = 0; t < 50; t++) {
            float x[128], z[128], y[128], scratch[128];
            uint8_t row[4 * 18];
            double nx = 0.0;
            for (int i = 0; i < d; i++) x[i] = z[i] = gauss() * (t + 1), nx += (double)x[i] * x[i];
            nx = sqrt(nx);
            kv_turbo_encode(x, d, bits, row, scratch);
            kv_turbo_decode_rot(row, bits, y, d);
            kv_turbo_rotate(z, d);
            for (int i0 = 0; i0 < d; i0 += 32) {
                const uint8_t *blk = row + (size_t)(i0 / 32) * kv_turbo_block_bytes(bits);
                uint16_t h;
                memcpy(&h, blk, 2);
                const float s = mx_f16_to_f32(h);
                assert_true(s > 0.0f);
                double ny = 0.0, nz = 0.0;
                for (int i = i0; i < i0 + 32; i++) {
                    const double v = z[i] * sqrt((double)d) / nx;
                    int best = 0;
                    for (int k = 1; k < n; k++)
                        if (fabs(v - c[k]) < fabs(v - c[best])) best = k;
                    double gap = INFINITY; /* to the second nearest: within float noise either may win */
                    for (int k = 0; k < n; k++)
                        if (k != best) gap = fmin(gap, fabs(v - c[k]) - fabs(v - c[best]));
                    bool on_book = false;
                    for (int k = 0; k < n; k++) on_book |= y[i] == s * c[k];
                    assert_true(on_book);
                    if (gap > 1e-4) assert_true(y[i] == s * c[best]);
                    ny += (double)y[i] * y[i], nz += (double)z[i] * z[i];
                }
                assert_true(fabs(sqrt(ny) - sqrt(nz)) <= 1e-3 * sqrt(nz)); /* fp16 scale */
            }
        }
    }
    float zero[64] = {0}, y[64], scratch[64];
    uint8_t row[2 * 18];
    kv_turbo_encode(zero, 64, 4, row, scratch);
    kv_turbo_decode(row, 64, 4, y);
    for (int i = 0; i < 64; i++) assert_true(y[i] == 0.0f);
}

/* Mean squared error of unit-norm Gaussian directions against Max's distortion for N(0, 1) at
 * that rate (0.1175, 0.03454, 0.009497): at or a little under it (each block's scale is side
 * information the bound does not have: measured 0.967 / 0.930 / 0.918 of it). */
static void test_distortion(void **st) {
    (void)st;
    static const double max_d[] = {0, 0, 0.1175, 0.03454, 0.009497};
    for (int bits = 2; bits <= 4; bits++) {
        const int d = 128, trials = 400;
        double err = 0.0;
        for (int t = 0; t < trials; t++) {
            float x[128], y[128], scratch[128];
            uint8_t row[4 * 18];
            double nx = 0.0, e = 0.0;
            for (int i = 0; i < d; i++) x[i] = gauss(), nx += (double)x[i] * x[i];
            kv_turbo_encode(x, d, bits, row, scratch);
            kv_turbo_decode(row, d, bits, y);
            for (int i = 0; i < d; i++) e += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
            err += e / nx;
        }
        err /= trials;
        print_message("bits %d: relative squared error %.5f (Max %.5f)\n", bits, err, max_d[bits]);
        assert_true(err > 0.85 * max_d[bits] && err < 1.02 * max_d[bits]);
    }
}

/* <R q, y_rot> = <q, R^T y_rot>: scores read the keys in the rotated space. */
static void test_rotated_dot(void **st) {
    (void)st;
    const int d = 64;
    float q[64], k[64], y[64], yr[64], scratch[64];
    uint8_t row[2 * 14];
    for (int i = 0; i < d; i++) q[i] = gauss(), k[i] = gauss();
    kv_turbo_encode(k, d, 3, row, scratch);
    kv_turbo_decode(row, d, 3, y);
    kv_turbo_decode_rot(row, 3, yr, d);
    double a = 0.0, b = 0.0, mag = 0.0;
    for (int i = 0; i < d; i++) a += (double)q[i] * y[i], mag += fabs((double)q[i] * y[i]);
    kv_turbo_rotate(q, d);
    for (int i = 0; i < d; i++) b += (double)q[i] * yr[i];
    assert_true(fabs(a - b) <= 1e-5 * mag);
}

/* ==== Reads: every code path gives the definition's bits ====
 * Random blocks (every fp16 scale bit pattern allowed: zero, -0, subnormal, inf, NaN; every
 * code) and encoded heads, row lengths of 1 to 33 blocks, unaligned source and destination:
 * the plain unpack here (value j of a block: bits j * bits .. of its code bytes,
 * little-endian, times the block's scale), the library's reference, portable and AVX2 paths,
 * kv_turbo_decode_rot and kvq_to_f32 (both of its paths) all give the same bits. */
static void plain_unpack(const uint8_t *blk, int bits, float *y, int64_t n) {
    const float *c = kv_turbo_codebook(bits);
    for (int64_t i0 = 0; i0 < n; i0 += 32, blk += kv_turbo_block_bytes(bits)) {
        const float s = mx_f16_to_f32((uint16_t)(blk[0] | blk[1] << 8));
        for (int j = 0; j < 32; j++) {
            unsigned code = 0;
            for (int b = 0; b < bits; b++) {
                const int bit = j * bits + b;
                code |= (unsigned)(blk[2 + bit / 8] >> (bit % 8) & 1) << b;
            }
            y[i0 + j] = s * c[code];
        }
    }
}

static void check_read_paths(const uint8_t *src, int bits, int64_t n, mx_dtype t, const char *what) {
    float want[33 * 32], got[33 * 32 + 2]; /* got: a guard value either side */
    plain_unpack(src, bits, want, n);
    static const char *names[] = {"auto", "ref", "c", "avx2"};
    for (int how = KV_TURBO_READ_AUTO; how <= KV_TURBO_READ_AVX2; how++) {
        memset(got, 0xa5, sizeof got);
        /* got + 1: an unaligned destination */
        if (kv_turbo_decode_rot_with(src, bits, got + 1, n, (kv_turbo_read)how)) {
            assert_int_equal(how, KV_TURBO_READ_AVX2);
            print_message("(no AVX2 here: that path not run)\n");
            continue;
        }
        if (memcmp(got + 1, want, (size_t)n * 4))
            fail_msg("%s: %d bits, %lld values, path %s: not the plain unpack's bits", what, bits, (long long)n, names[how]);
        uint32_t guard[2];
        memcpy(&guard[0], &got[0], 4), memcpy(&guard[1], &got[n + 1], 4);
        assert_true(guard[0] == 0xa5a5a5a5u && guard[1] == 0xa5a5a5a5u); /* nothing written outside */
    }
    for (int ref = 0; ref < 2; ref++) {
        kvq_force_ref(ref);
        memset(got, 0, sizeof got);
        kv_turbo_decode_rot(src, bits, got, n);
        assert_memory_equal(got, want, (size_t)n * 4);
        kvq_to_f32(got, src, t, n);
        assert_memory_equal(got, want, (size_t)n * 4);
    }
    kvq_force_ref(false);
}

static void test_read_paths(void **st) {
    (void)st;
    static const mx_dtype ts[] = {0, 0, MX_TQ2, MX_TQ3, MX_TQ4};
    uint8_t raw[1 + 33 * 18];
    for (int bits = 2; bits <= 4; bits++) {
        for (int nb = 1; nb <= 33; nb++) {
            for (int t = 0; t < 8; t++) {
                for (size_t i = 0; i < sizeof raw; i++) raw[i] = (uint8_t)(uniform() * 256.0);
                if (t == 0) /* scales that are finite and positive, as the encoder writes them */
                    for (int b = 0; b < nb; b++) raw[1 + b * kv_turbo_block_bytes(bits) + 1] &= 0x3b;
                check_read_paths(raw + 1, bits, 32 * nb, ts[bits], "random blocks"); /* raw + 1: unaligned */
            }
        }
        for (int d = 32; d <= 1024; d *= 2) { /* encoded heads of every allowed head_dim */
            float x[1024], scratch[1024];
            static uint8_t row[1024 / 32 * 18];
            for (int i = 0; i < d; i++) x[i] = gauss() * (i % 5 ? 1.0f : 30.0f);
            kv_turbo_encode(x, d, bits, row, scratch);
            check_read_paths(row, bits, d, ts[bits], "encoded head");
        }
    }
}

/* ==== Attention over TurboQuant pools ====
 * Pools written through cpu_kv_write; the same attention over f32 pools holding each head's
 * rebuilt (rotated back) values is the reference: equal up to the rotation's rounding. Every
 * kernel family, split count and piece length gives the same bits (the contracts of
 * cpu_attention.c hold for these pools too). */
static void check_turbo_attention(mx_dtype tk, mx_dtype tv, int Hq, int Hkv, int D, int window) {
    const int n = KVF_ROWS, rows = KVF_POOL_ROWS;
    const size_t nf = (size_t)n * Hq * D, pf = (size_t)rows * Hkv * D;
    float *q = malloc(nf * 4), *kf = malloc(pf * 4), *vf = malloc(pf * 4), *kd = malloc(pf * 4);
    float *vd = malloc(pf * 4), *o0 = malloc(nf * 4), *o1 = malloc(nf * 4), *oref = malloc(nf * 4);
    for (size_t i = 0; i < nf; i++) q[i] = gauss();
    for (size_t i = 0; i < pf; i++) kf[i] = 2 * gauss(), vf[i] = gauss();
    kf[5] = 40.0f; /* an outlier channel: the rotation spreads it over the head */
    kv_attn_fix f;
    kv_attn_fix_init(&f, tk, tv, Hq, Hkv, D, window, 0.0f, kf, vf);
    const uint8_t *kq = f.kq, *vq = f.vq;
    /* the reference pools: each head rebuilt in the original space */
    for (size_t h = 0; h < (size_t)rows * Hkv; h++) {
        const size_t kb = kvq_row_bytes(tk, D), vb = kvq_row_bytes(tv, D);
        if (kvq_turbo_bits(tk)) kv_turbo_decode(kq + h * kb, D, kvq_turbo_bits(tk), kd + h * D);
        else kvq_to_f32(kd + h * D, kq + h * kb, tk, D);
        if (kvq_turbo_bits(tv)) kv_turbo_decode(vq + h * vb, D, kvq_turbo_bits(tv), vd + h * D);
        else kvq_to_f32(vd + h * D, vq + h * vb, tv, D);
    }
    mx_tensor tkd = mx_tensor_3d(kd, MX_F32, rows, Hkv, D, MX_DEV_CPU);
    mx_tensor tvd = mx_tensor_3d(vd, MX_F32, rows, Hkv, D, MX_DEV_CPU);
    mx_tensor tq = mx_tensor_3d(q, MX_F32, n, Hq, D, MX_DEV_CPU);
    mx_tensor t0 = mx_tensor_3d(o0, MX_F32, n, Hq, D, MX_DEV_CPU);
    mx_tensor t1 = mx_tensor_3d(o1, MX_F32, n, Hq, D, MX_DEV_CPU);
    mx_tensor tr = mx_tensor_3d(oref, MX_F32, n, Hq, D, MX_DEV_CPU);
    f.b.kv_splits = 1;
    cpu_attention(&tr, &tq, &tkd, &tvd, &f.b, &f.p);
    cpu_attention(&t0, &tq, &f.tkq, &f.tvq, &f.b, &f.p);
    double worst = 0.0;
    for (size_t i = 0; i < nf; i++) worst = fmax(worst, fabs((double)o0[i] - oref[i]));
    if (worst > 2e-5) fail_msg("K %s V %s D %d: %.3g from the rebuilt pools", mx_dtype_name(tk), mx_dtype_name(tv), D, worst);
    static const int pieces[] = {0, 1, 3}, splits[] = {1, 2, 3, 64};
    for (int pi = 0; pi < 3; pi++) {
        cpu_attention_force_piece(pieces[pi]);
        for (int isa = CPU_ISA_SCALAR; isa <= CPU_ISA_AVX512; isa++) {
            if (cpu_matmul_force_isa((cpu_isa)isa)) continue;
            for (int si = 0; si < 4; si++) {
                f.b.kv_splits = splits[si];
                if (pi == 0) {
                    memset(o1, 0xff, nf * 4);
                    cpu_attention(&t1, &tq, &f.tkq, &f.tvq, &f.b, &f.p);
                    if (memcmp(o0, o1, nf * 4))
                        fail_msg("K %s V %s D %d %s splits %d: not the bits of one split", mx_dtype_name(tk),
                                 mx_dtype_name(tv), D, cpu_isa_name((cpu_isa)isa), splits[si]);
                } else { /* other piece lengths: other merge trees, the same values up to rounding */
                    cpu_attention(&t1, &tq, &f.tkq, &f.tvq, &f.b, &f.p);
                    for (size_t i = 0; i < nf; i++) assert_true(fabsf(o1[i] - o0[i]) <= 2e-5f);
                }
            }
        }
        cpu_matmul_force_isa(CPU_ISA_AUTO);
    }
    cpu_attention_force_piece(0);
    free(q), free(kf), free(vf), free(kd), free(vd), free(o0), free(o1), free(oref);
    kv_attn_fix_free(&f);
}

static void test_attention(void **st) {
    (void)st;
    const mx_dtype ts[] = {MX_TQ2, MX_TQ3, MX_TQ4};
    for (int t = 0; t < 3; t++) {
        check_turbo_attention(ts[t], ts[t], 4, 2, 64, 0);
        check_turbo_attention(ts[t], ts[t], 8, 1, 128, 7);
        check_turbo_attention(ts[t], ts[t], 2, 2, 32, 0);
    }
    check_turbo_attention(MX_TQ3, MX_F32, 4, 2, 64, 0); /* K and V apart */
    check_turbo_attention(MX_Q8_0, MX_TQ4, 4, 2, 64, 5);
}

static void test_check(void **st) {
    (void)st;
    mx_error err;
    assert_int_equal(kv_turbo_check(128, 4, &err), 0);
    assert_int_equal(kv_turbo_check(80, 4, &err), -1);
    assert_non_null(strstr(err.msg, "head_dim is 80"));
    assert_int_equal(kv_turbo_check(16, 4, &err), -1);
    assert_int_equal(kv_turbo_check(128, 5, &err), -1);
    assert_int_equal(kv_turbo_block_bytes(2), 10);
    assert_int_equal(kv_turbo_block_bytes(3), 14);
    assert_int_equal(kv_turbo_block_bytes(4), 18);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codebook_matches_max), cmocka_unit_test(test_rotation),
        cmocka_unit_test(test_codes_nearest),        cmocka_unit_test(test_distortion),
        cmocka_unit_test(test_rotated_dot),          cmocka_unit_test(test_check),
        cmocka_unit_test(test_read_paths),           cmocka_unit_test(test_attention),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
