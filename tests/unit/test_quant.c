/* MLX affine quantization: bit-exact against the fixtures written by
 * tools/reference/mlx_quant_ref.py (fails when they are missing), bit packing, the error
 * bound, the SIMD dequantization against the scalar reference (bitwise, NaN included), the
 * matmul against the canonical dot (cpu_dot_ref) on the dequantized weights (bitwise, every
 * kernel family, row count and thread count; the canonical dot checked against double), and
 * the embedding gather. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "backend/cpu/cpu_internal.h"
#include "quant/quant.h"
#include "backend/cpu/cpu_quant.h"

/* ==== Helpers ==== */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rng_next(void) { /* splitmix64 */
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float rng_uniform(void) { return (float)((rng_next() >> 40) * (1.0 / 16777216.0)); }
static float rng_normal(void) {
    float u = rng_uniform() + 1e-7f, v = rng_uniform();
    return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

static const int k_bits[] = {2, 3, 4, 5, 6, 8};
static const int k_groups[] = {32, 64, 128};

/* ==== Fixtures from the independent reference ==== */

typedef struct fixture {
    uint32_t rows, cols, bits, gs, dt;
    mx_dtype dtype;
    void *input, *scales, *biases, *deq;
    uint32_t *packed;
} fixture;

static void *read_block(FILE *fp, size_t n, const char *path) {
    void *p = malloc(n ? n : 1);
    assert_non_null(p);
    if (fread(p, 1, n, fp) != n) fail_msg("%s: truncated", path);
    return p;
}

static void load_fixture(fixture *f, const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) fail_msg("missing fixture %s (run tools/reference/mlx_quant_ref.py)", path);
    char magic[8];
    uint32_t hdr[5];
    if (fread(magic, 1, 8, fp) != 8 || memcmp(magic, "MLXQFX01", 8) || fread(hdr, 4, 5, fp) != 5)
        fail_msg("%s: bad header", path);
    f->rows = hdr[0], f->cols = hdr[1], f->bits = hdr[2], f->gs = hdr[3], f->dt = hdr[4];
    f->dtype = f->dt == 0 ? MX_F32 : f->dt == 1 ? MX_BF16 : MX_F16;
    size_t es = mx_dtype_size(f->dtype), n = (size_t)f->rows * f->cols;
    size_t ng = (size_t)f->rows * (f->cols / f->gs);
    f->input = read_block(fp, n * es, path);
    f->packed = read_block(fp, n * f->bits / 32 * 4, path);
    f->scales = read_block(fp, ng * es, path);
    f->biases = read_block(fp, ng * es, path);
    f->deq = read_block(fp, n * es, path);
    if (fgetc(fp) != EOF) fail_msg("%s: trailing bytes", path);
    fclose(fp);
}

static void free_fixture(fixture *f) {
    free(f->input), free(f->packed), free(f->scales), free(f->biases), free(f->deq);
}

static void check_fixture(const char *path) {
    fixture f;
    load_fixture(&f, path);
    size_t es = mx_dtype_size(f.dtype), n = (size_t)f.rows * f.cols;
    size_t ng = (size_t)f.rows * (f.cols / f.gs), nw = n * f.bits / 32;
    uint32_t *wq = malloc(nw * 4);
    void *s = malloc(ng * es), *b = malloc(ng * es), *d = malloc(n * es);
    mx_error err;
    if (mlx_quantize(wq, s, b, f.input, f.dtype, f.rows, f.cols, (int)f.bits, (int)f.gs, &err))
        fail_msg("%s: %s", path, err.msg);
    for (size_t i = 0; i < nw; i++)
        if (wq[i] != f.packed[i])
            fail_msg("%s: packed word %zu: %#x, reference %#x", path, i, wq[i], f.packed[i]);
    for (size_t i = 0; i < ng * es; i++) {
        if (((uint8_t *)s)[i] != ((uint8_t *)f.scales)[i])
            fail_msg("%s: scales differ at group %zu", path, i / es);
        if (((uint8_t *)b)[i] != ((uint8_t *)f.biases)[i])
            fail_msg("%s: biases differ at group %zu", path, i / es);
    }
    /* dequantize the reference's packed words, not ours (they are equal by now anyway) */
    if (mlx_dequantize(d, f.dtype, f.packed, f.scales, f.biases, f.dtype, f.rows, f.cols,
                       (int)f.bits, (int)f.gs, &err))
        fail_msg("%s: %s", path, err.msg);
    for (size_t i = 0; i < n * es; i++)
        if (((uint8_t *)d)[i] != ((uint8_t *)f.deq)[i])
            fail_msg("%s: dequantized value %zu differs", path, i / es);
    free(wq), free(s), free(b), free(d);
    free_fixture(&f);
}

static void test_fixtures(void **st) {
    (void)st;
    const char *src = getenv("MLXCEL_SOURCE_DIR");
    assert_non_null(src);
    char dir[1024], path[1400], line[256];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/quant", src);
    snprintf(path, sizeof path, "%s/MANIFEST.txt", dir);
    FILE *mf = fopen(path, "r");
    if (!mf) fail_msg("missing %s: run tools/reference/mlx_quant_ref.py OUTDIR", path);
    /* every bits x group size must be covered in bf16 */
    int seen[9][129] = {{0}};
    int n_cases = 0;
    while (fgets(line, sizeof line, mf)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        line[strcspn(line, "\r\n")] = 0;
        snprintf(path, sizeof path, "%s/%s", dir, line);
        check_fixture(path);
        int bits, gs;
        char dt[8];
        if (sscanf(line, "q%d_g%d_%7[a-z0-9]", &bits, &gs, dt) == 3 && !strcmp(dt, "bf16") &&
            bits > 0 && bits <= 8 && gs > 0 && gs <= 128)
            seen[bits][gs] = 1;
        n_cases++;
    }
    fclose(mf);
    for (size_t i = 0; i < sizeof k_bits / sizeof *k_bits; i++)
        for (size_t j = 0; j < sizeof k_groups / sizeof *k_groups; j++)
            if (!seen[k_bits[i]][k_groups[j]])
                fail_msg("fixtures lack the bf16 case q%d_g%d", k_bits[i], k_groups[j]);
    assert_true(n_cases >= 18);
}

/* ==== Packing ==== */

static void test_pack_layout(void **st) {
    (void)st;
    uint8_t q[64] = {0}, back[64];
    uint32_t w[16];
    /* 3-bit code 10 sits at bits 30..32: two low bits end word 0, the high bit starts word 1 */
    q[10] = 7;
    mlxq_pack_row(w, q, 32, 3);
    assert_int_equal(w[0], 0xC0000000u);
    assert_int_equal(w[1], 0x1u);
    assert_int_equal(w[2], 0);
    /* 4-bit: code i at bits 4i of its word */
    memset(q, 0, sizeof q);
    q[1] = 0xA, q[8] = 0x3;
    mlxq_pack_row(w, q, 32, 4);
    assert_int_equal(w[0], 0xA0u);
    assert_int_equal(w[1], 0x3u);
    /* round trip every width on random codes */
    for (size_t i = 0; i < sizeof k_bits / sizeof *k_bits; i++) {
        int bits = k_bits[i];
        for (int j = 0; j < 64; j++) q[j] = (uint8_t)(rng_next() & ((1u << bits) - 1));
        mlxq_pack_row(w, q, 64, bits);
        mlxq_unpack_row(back, w, 64, bits);
        assert_memory_equal(q, back, 64);
    }
}

/* ==== Error bound ==== */

static void test_error_bound(void **st) {
    (void)st;
    enum { R = 8, K = 256 };
    float w[R * K], d[R * K];
    for (int i = 0; i < R * K; i++) w[i] = rng_normal() * (i % 3 ? 0.02f : 1.5f);
    uint32_t wq[R * K];
    float s[R * K / 32], b[R * K / 32];
    mx_error err;
    for (size_t i = 0; i < sizeof k_bits / sizeof *k_bits; i++)
        for (size_t j = 0; j < sizeof k_groups / sizeof *k_groups; j++) {
            int bits = k_bits[i], gs = k_groups[j], ng = K / gs;
            assert_int_equal(mlx_quantize(wq, s, b, w, MX_F32, R, K, bits, gs, &err), 0);
            assert_int_equal(mlx_dequantize(d, MX_F32, wq, s, b, MX_F32, R, K, bits, gs, &err), 0);
            for (int r = 0; r < R; r++)
                for (int c = 0; c < K; c++) {
                    float sc = fabsf(s[r * ng + c / gs]);
                    float e = fabsf(d[r * K + c] - w[r * K + c]);
                    /* scale/2 from rounding; up to one scale at the far end of the range,
                     * where the edge-exact scale can push the code past 2^bits - 1 */
                    if (e > sc * 1.0001f + 1e-6f)
                        fail_msg("q%d g%d: |error| %g > scale = %g", bits, gs, e, sc);
                }
        }
}

static void test_errors(void **st) {
    (void)st;
    mx_error err;
    float w[64] = {0};
    uint32_t wq[64];
    float s[4], b[4];
    assert_int_equal(mlx_quantize(wq, s, b, w, MX_F32, 1, 64, 7, 64, &err), -1);
    assert_non_null(strstr(err.msg, "7-bit"));
    assert_int_equal(mlx_quantize(wq, s, b, w, MX_F32, 1, 64, 4, 48, &err), -1);
    assert_non_null(strstr(err.msg, "group size 48"));
    assert_int_equal(mlx_quantize(wq, s, b, w, MX_F32, 1, 48, 4, 32, &err), -1);
    assert_non_null(strstr(err.msg, "48"));
    assert_int_equal(mlx_quantize(wq, s, b, w, MX_I32, 1, 64, 4, 32, &err), -1);
    float y[8], x[64] = {0};
    mlxq_matrix m = {wq, s, b, MX_F32, 1, 64, 4, 32};
    assert_int_equal(mlxq_matmul(y, x, 0, &m, &err), -1);
    m.bits = 7;
    assert_int_equal(mlxq_matmul(y, x, 1, &m, &err), -1);
}

/* ==== Kernels ==== */

typedef struct qmat {
    mlxq_matrix m;
    float *deq; /* [n, k] dequantized */
} qmat;

static void make_qmat(qmat *q, int64_t n, int64_t k, int bits, int gs, mx_dtype dt) {
    size_t es = mx_dtype_size(dt);
    float *w = malloc((size_t)(n * k) * sizeof(float));
    void *wd = malloc((size_t)(n * k) * es);
    uint32_t *wq = malloc((size_t)(n * k * bits / 32) * 4);
    void *s = malloc((size_t)(n * k / gs) * es), *b = malloc((size_t)(n * k / gs) * es);
    for (int64_t i = 0; i < n * k; i++) w[i] = rng_normal() * 0.05f;
    for (int64_t i = 0; i < n * k; i++) {
        if (dt == MX_BF16) ((uint16_t *)wd)[i] = mx_f32_to_bf16(w[i]);
        else if (dt == MX_F16) ((uint16_t *)wd)[i] = mx_f32_to_f16(w[i]);
        else ((float *)wd)[i] = w[i];
    }
    mx_error err;
    if (mlx_quantize(wq, s, b, wd, dt, n, k, bits, gs, &err)) fail_msg("%s", err.msg);
    q->m = (mlxq_matrix){wq, s, b, dt, n, k, bits, gs};
    q->deq = w; /* reuse */
    if (mlx_dequantize(q->deq, MX_F32, wq, s, b, dt, n, k, bits, gs, &err)) fail_msg("%s", err.msg);
    free(wd);
}

static void free_qmat(qmat *q) {
    free((void *)q->m.w), free((void *)q->m.scales), free((void *)q->m.biases), free(q->deq);
}

/* ||y - ref|| / ||ref|| with ref computed in double over the dequantized weights */
static double rel_err(const float *y, const float *x, const qmat *q, int64_t m) {
    double num = 0, den = 0;
    for (int64_t r = 0; r < m; r++)
        for (int64_t j = 0; j < q->m.n; j++) {
            double ref = 0;
            for (int64_t i = 0; i < q->m.k; i++)
                ref += (double)x[r * q->m.k + i] * q->deq[j * q->m.k + i];
            double e = y[r * q->m.n + j] - ref;
            num += e * e, den += ref * ref;
        }
    return sqrt(num / (den + 1e-30));
}

/* SIMD dequantization (every family this CPU has) = scalar reference, bit for bit; scales
 * include a NaN, an inf and huge values (inf / overflow after rounding). */
static void test_dequant_simd(void **st) {
    (void)st;
    const mx_dtype dts[] = {MX_BF16, MX_F16, MX_F32};
    for (size_t bi = 0; bi < sizeof k_bits / sizeof *k_bits; bi++)
        for (int gi = 0; gi < 3; gi++)
            for (int di = 0; di < 3; di++) {
                qmat q;
                const int64_t n = 6, k = 256;
                make_qmat(&q, n, k, k_bits[bi], k_groups[gi], dts[di]);
                /* poison a few groups: NaN / inf scale, a bias near the dtype's maximum */
                const float poison[3] = {NAN, INFINITY, dts[di] == MX_F16 ? 65000.0f : 3.0e38f};
                for (int i = 0; i < 3; i++)
                    mlxq_store((void *)q.m.scales, dts[di], i * 3 + 1, poison[i]);
                mlxq_store((void *)q.m.biases, dts[di], 5, poison[2]);
                float *ref = malloc((size_t)k * 4), *got = malloc((size_t)k * 4);
                for (int isa = CPU_ISA_SCALAR; isa <= CPU_ISA_AVX512; isa++) {
                    if (cpu_matmul_force_isa((cpu_isa)isa)) continue;
                    for (int64_t r = 0; r < n; r++) {
                        mlxq_dequantize_row_ref(ref, &q.m, r);
                        mlxq_dequantize_row(got, &q.m, r);
                        if (memcmp(ref, got, (size_t)k * 4))
                            fail_msg("%s q%d g%d dtype %s row %lld: SIMD dequantization differs",
                                     cpu_isa_name((cpu_isa)isa), k_bits[bi], k_groups[gi],
                                     mx_dtype_name(dts[di]), (long long)r);
                    }
                }
                cpu_matmul_force_isa(CPU_ISA_AUTO);
                free(ref), free(got);
                free_qmat(&q);
            }
}

/* The dequantized row r in the scales' dtype (what `convert -d` writes). */
static void *deq_dtype_row(const qmat *q, int64_t r) {
    const size_t es = mx_dtype_size(q->m.sb_dtype);
    char *o = malloc((size_t)q->m.k * es);
    for (int64_t i = 0; i < q->m.k; i++)
        mlxq_store(o, q->m.sb_dtype, i, q->deq[r * q->m.k + i]);
    return o;
}

/* mlxq_matmul: every value = cpu_dot_ref(x row, dequantized weight row in the model dtype), bit
 * for bit, for every row count, kernel family and thread count (batch invariance); the
 * canonical dot itself close to a double product. */
static void test_matmul_canonical(void **st) {
    (void)st;
    const mx_dtype dts[] = {MX_BF16, MX_F16, MX_F32};
    enum { M = 40 };
    for (size_t bi = 0; bi < sizeof k_bits / sizeof *k_bits; bi++) {
        const int bits = k_bits[bi], gs = k_groups[bi % 3];
        const int64_t N = 72, K = 384;
        qmat q;
        make_qmat(&q, N, K, bits, gs, dts[bi % 3]);
        float *x = malloc(M * K * sizeof(float)), *y = malloc(M * N * sizeof(float));
        float *want = malloc(M * N * sizeof(float));
        for (int i = 0; i < M * K; i++) x[i] = rng_normal();
        for (int64_t j = 0; j < N; j++) {
            void *wr = deq_dtype_row(&q, j);
            for (int r = 0; r < M; r++) want[r * N + j] = cpu_dot_ref(x + r * K, wr, q.m.sb_dtype, K);
            free(wr);
        }
        double e = rel_err(want, x, &q, M);
        if (e > 1e-5) fail_msg("canonical dot q%d: rel err %g vs double", bits, e);
        mx_error err;
        static const int ms[] = {1, 2, 3, 4, 5, 9, 16, 17, 40};
        for (int isa = CPU_ISA_SCALAR; isa <= CPU_ISA_AVX512; isa++) {
            if (cpu_matmul_force_isa((cpu_isa)isa)) continue;
            for (int th = 1; th <= 3; th += 2) {
                omp_set_num_threads(th);
                for (size_t i = 0; i < sizeof ms / sizeof *ms; i++) {
                    /* the last ms[i] rows: a row's value must not depend on its neighbours */
                    const int r0 = M - ms[i];
                    assert_int_equal(mlxq_matmul(y, x + r0 * K, ms[i], &q.m, &err), 0);
                    if (memcmp(y, want + r0 * N, (size_t)ms[i] * N * sizeof(float)))
                        fail_msg("%s q%d m=%d threads %d: differs from the canonical dot",
                                 cpu_isa_name((cpu_isa)isa), bits, ms[i], th);
                }
            }
        }
        cpu_matmul_force_isa(CPU_ISA_AUTO);
        omp_set_num_threads(omp_get_num_procs());
        free(x), free(y), free(want);
        free_qmat(&q);
    }
}

/* The one-row product (the fused AVX-512 kernel where this CPU has it) on poisoned groups
 * (NaN / inf scales, values that overflow after rounding) and on column counts that leave
 * partial tiles: each output is the canonical dot of x and the scalar reference's
 * dequantized row, bit for bit (a NaN only has to be a NaN: its payload may follow the
 * FMA's operand order), in every kernel family. */
static void test_one_row_poisoned(void **st) {
    (void)st;
    static const int bits[] = {2, 4, 8, 3};
    const mx_dtype dts[] = {MX_BF16, MX_F16, MX_F32};
    for (int bi = 0; bi < 4; bi++)
        for (int gi = 0; gi < 3; gi++) {
            const mx_dtype dt = dts[(bi + gi) % 3];
            const int64_t n = 13, k = 256;
            qmat q;
            make_qmat(&q, n, k, bits[bi], k_groups[gi], dt);
            const float poison[3] = {NAN, INFINITY, dt == MX_F16 ? 65000.0f : 3.0e38f};
            for (int i = 0; i < 3; i++) mlxq_store((void *)q.m.scales, dt, i * 5 + 1, poison[i]);
            mlxq_store((void *)q.m.biases, dt, 7, poison[2]);
            float x[256], y[13], want[13], row[256];
            for (int i = 0; i < k; i++) x[i] = rng_normal();
            for (int64_t j = 0; j < n; j++) {
                mlxq_dequantize_row_ref(row, &q.m, j); /* already the dtype's values */
                want[j] = cpu_dot_ref(x, row, MX_F32, k);
            }
            mx_error err;
            for (int isa = CPU_ISA_SCALAR; isa <= CPU_ISA_AVX512; isa++) {
                if (cpu_matmul_force_isa((cpu_isa)isa)) continue;
                assert_int_equal(mlxq_matmul(y, x, 1, &q.m, &err), 0);
                for (int64_t j = 0; j < n; j++)
                    if (!(isnan(y[j]) && isnan(want[j])) && memcmp(&y[j], &want[j], 4))
                        fail_msg("%s q%d g%d %s column %lld: %g, canonical %g",
                                 cpu_isa_name((cpu_isa)isa), bits[bi], k_groups[gi],
                                 mx_dtype_name(dt), (long long)j, y[j], want[j]);
            }
            cpu_matmul_force_isa(CPU_ISA_AUTO);
            free_qmat(&q);
        }
}

static void test_rows_view(void **st) {
    (void)st;
    /* a stacked [E=3, 32, 128] expert tensor: expert e = rows [32e, 32e + 32) */
    qmat q;
    make_qmat(&q, 96, 128, 4, 64, MX_BF16);
    float x[128], y[32];
    for (int i = 0; i < 128; i++) x[i] = rng_normal();
    mx_error err;
    for (int e = 0; e < 3; e++) {
        mlxq_matrix v = mlxq_matrix_rows(&q.m, 32 * e, 32);
        assert_int_equal(mlxq_matmul(y, x, 1, &v, &err), 0);
        for (int j = 0; j < 32; j++) {
            double ref = 0;
            for (int i = 0; i < 128; i++) ref += (double)x[i] * q.deq[(32 * e + j) * 128 + i];
            assert_true(fabs(y[j] - ref) <= 1e-5 * (fabs(ref) + 1));
        }
    }
    free_qmat(&q);
}

static void test_embed(void **st) {
    (void)st;
    qmat q;
    make_qmat(&q, 50, 64, 6, 32, MX_BF16);
    int32_t ids[4] = {0, 49, 7, 7};
    float out[4 * 64];
    mx_error err;
    assert_int_equal(mlxq_embed(out, &q.m, ids, 4, 1.0f, false, &err), 0);
    for (int i = 0; i < 4; i++) assert_memory_equal(out + i * 64, q.deq + ids[i] * 64, 64 * 4);
    /* gemma-style sqrt(hidden) scale, rounded to bf16 as transformers does */
    float sc = 8.0f * 1.0001f;
    assert_int_equal(mlxq_embed(out, &q.m, ids, 4, sc, true, &err), 0);
    float sr = mx_bf16_to_f32(mx_f32_to_bf16(sc));
    for (int j = 0; j < 64; j++)
        assert_true(out[64 + j] == mx_bf16_to_f32(mx_f32_to_bf16(q.deq[49 * 64 + j] * sr)));
    ids[2] = 50;
    assert_int_equal(mlxq_embed(out, &q.m, ids, 4, 1.0f, false, &err), -1);
    assert_non_null(strstr(err.msg, "token id 50"));
    free_qmat(&q);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures),   cmocka_unit_test(test_pack_layout),
        cmocka_unit_test(test_error_bound), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_dequant_simd),
        cmocka_unit_test(test_matmul_canonical),    cmocka_unit_test(test_one_row_poisoned),
        cmocka_unit_test(test_rows_view),
        cmocka_unit_test(test_embed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
