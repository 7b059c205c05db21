/* backend_cpu()->matmul_q (MLX-quantized weight) against backend_cpu()->matmul on the
 * dequantized weight (what `mlxcel convert -d` writes): bit-identical for every row count,
 * with and without a bias, bf16 and f16 models; matmul_group against the single calls and
 * embed_q against embed likewise. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "quant/quant.h"

static uint64_t g_rng = 7;
static float rnd(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return ((float)((g_rng >> 40) & 0xffffff) / 16777216.0f - 0.5f);
}

static void run(int bits, int gs, int64_t N, int64_t K, int64_t rows, mx_dtype dt, bool with_bias) {
    const backend_ops *ops = backend_cpu();
    assert_non_null(ops->matmul_q);
    uint16_t *w = malloc((size_t)(N * K) * 2), *wd = malloc((size_t)(N * K) * 2);
    uint32_t *wq = malloc((size_t)(N * K * bits / 32) * 4);
    uint16_t *s = malloc((size_t)(N * K / gs) * 2), *b = malloc((size_t)(N * K / gs) * 2);
    float *x = malloc((size_t)(rows * K) * 4), *y = malloc((size_t)(rows * N) * 4);
    float *yr = malloc((size_t)(rows * N) * 4), *bias = malloc((size_t)N * 4);
    for (int64_t i = 0; i < N * K; i++)
        w[i] = dt == MX_BF16 ? mx_f32_to_bf16(rnd() * 0.1f) : mx_f32_to_f16(rnd() * 0.1f);
    for (int64_t i = 0; i < rows * K; i++) x[i] = rnd();
    for (int64_t i = 0; i < N; i++) bias[i] = rnd();
    mx_error err;
    assert_int_equal(mlx_quantize(wq, s, b, w, dt, N, K, bits, gs, &err), 0);
    assert_int_equal(mlx_dequantize(wd, dt, wq, s, b, dt, N, K, bits, gs, &err), 0);
    mx_qweight qw = {mx_tensor_2d(wq, MX_U32, N, K * bits / 32, MX_DEV_CPU),
                     mx_tensor_2d(s, dt, N, K / gs, MX_DEV_CPU),
                     mx_tensor_2d(b, dt, N, K / gs, MX_DEV_CPU), bits, gs, false};
    mx_tensor xt = mx_tensor_2d(x, MX_F32, rows, K, MX_DEV_CPU);
    mx_tensor yt = mx_tensor_2d(y, MX_F32, rows, N, MX_DEV_CPU);
    mx_tensor yrt = mx_tensor_2d(yr, MX_F32, rows, N, MX_DEV_CPU);
    mx_tensor wdt = mx_tensor_2d(wd, dt, N, K, MX_DEV_CPU);
    mx_tensor bt = with_bias ? mx_tensor_1d(bias, MX_F32, N, MX_DEV_CPU) : (mx_tensor){0};
    ops->matmul_q(&yt, &xt, &qw, &bt);
    ops->matmul(&yrt, &xt, &wdt, &bt);
    if (memcmp(y, yr, (size_t)(rows * N) * 4))
        fail_msg("q%d g%d %s rows %lld bias %d: matmul_q differs from matmul on the dequantized "
                 "weight", bits, gs, mx_dtype_name(dt), (long long)rows, with_bias);
    /* not vacuous: the product is close to a double reference on the dequantized weight */
    double num = 0, den = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < N; j++) {
            double ref = with_bias ? bias[j] : 0;
            for (int64_t i = 0; i < K; i++)
                ref += (double)x[r * K + i] * (dt == MX_BF16 ? mx_bf16_to_f32(wd[j * K + i])
                                                             : mx_f16_to_f32(wd[j * K + i]));
            num += (y[r * N + j] - ref) * (y[r * N + j] - ref);
            den += ref * ref;
        }
    assert_true(den > 0 && sqrt(num / den) < 1e-5);
    /* matmul_group: five products of x (more than one region's four), dense and quantized, with
     * and without the bias, each bitwise what its own call gives */
    assert_non_null(ops->matmul_group);
    float *yg = malloc((size_t)(5 * rows * N) * 4);
    mx_tensor gt[5];
    mx_linear ls[5];
    const mx_tensor none = {0};
    for (int i = 0; i < 5; i++) {
        gt[i] = mx_tensor_2d(yg + (size_t)i * rows * N, MX_F32, rows, N, MX_DEV_CPU);
        ls[i] = (mx_linear){.out = &gt[i], .w = &wdt, .q = i % 2 ? NULL : &qw, .bias = i == 1 || i == 4 ? &bt : &none};
    }
    ops->matmul_group(&xt, ls, 5);
    for (int i = 0; i < 5; i++) {
        if (i % 2) ops->matmul(&yrt, &xt, &wdt, ls[i].bias);
        else ops->matmul_q(&yrt, &xt, &qw, ls[i].bias);
        if (memcmp(yg + (size_t)i * rows * N, yr, (size_t)(rows * N) * 4))
            fail_msg("q%d g%d rows %lld: matmul_group product %d differs from its own call", bits, gs,
                     (long long)rows, i);
    }
    free(yg);
    /* embedding rows: embed_q on the packed table = embed on the dequantized table */
    int32_t ids[3] = {0, (int32_t)(N - 1), (int32_t)(N / 2)};
    float *e1 = malloc((size_t)(3 * K) * 4), *e2 = malloc((size_t)(3 * K) * 4);
    mx_tensor et1 = mx_tensor_2d(e1, MX_F32, 3, K, MX_DEV_CPU), et2 = mx_tensor_2d(e2, MX_F32, 3, K, MX_DEV_CPU);
    ops->embed_q(&et1, &qw, ids, 3, 5.65f, false);
    ops->embed(&et2, &wdt, ids, 3, 5.65f, false);
    assert_memory_equal(e1, e2, (size_t)(3 * K) * 4);
    free(e1), free(e2);
    free(w), free(wd), free(wq), free(s), free(b), free(x), free(y), free(yr), free(bias);
}

static void test_matmul_q(void **st) {
    (void)st;
    const int64_t rows[] = {1, 3, 8, 16, 33};
    for (int r = 0; r < 5; r++) {
        run(4, 64, 96, 256, rows[r], MX_BF16, r % 2);
        run(3, 32, 40, 128, rows[r], MX_F16, r % 2 == 0);
        run(8, 128, 64, 384, rows[r], MX_BF16, true);
        run(2, 32, 130, 512, rows[r], MX_BF16, false);
        run(5, 64, 17, 320, rows[r], MX_F16, true);
        run(6, 128, 33, 768, rows[r], MX_BF16, false);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_matmul_q)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
