/* backend_cpu()->matmul_q (MLX-quantized weight) against backend_cpu()->matmul on the
 * dequantized bf16 weight: same math, different code, ||diff|| / ||ref|| must be tiny. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "quant/quant.h"

static uint64_t g_rng = 7;
static float rnd(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return ((float)((g_rng >> 40) & 0xffffff) / 16777216.0f - 0.5f);
}

static void run(int bits, int gs, int64_t N, int64_t K, int64_t rows) {
    const backend_ops *ops = backend_cpu();
    assert_non_null(ops->matmul_q);
    uint16_t *w = malloc((size_t)(N * K) * 2), *wd = malloc((size_t)(N * K) * 2);
    uint32_t *wq = malloc((size_t)(N * K * bits / 32) * 4);
    uint16_t *s = malloc((size_t)(N * K / gs) * 2), *b = malloc((size_t)(N * K / gs) * 2);
    float *x = malloc((size_t)(rows * K) * 4), *y = malloc((size_t)(rows * N) * 4);
    float *yr = malloc((size_t)(rows * N) * 4);
    for (int64_t i = 0; i < N * K; i++) w[i] = mx_f32_to_bf16(rnd() * 0.1f);
    for (int64_t i = 0; i < rows * K; i++) x[i] = rnd();
    mx_error err;
    assert_int_equal(mlx_quantize(wq, s, b, w, MX_BF16, N, K, bits, gs, &err), 0);
    assert_int_equal(mlx_dequantize(wd, MX_BF16, wq, s, b, MX_BF16, N, K, bits, gs, &err), 0);
    mx_qweight qw = {mx_tensor_2d(wq, MX_U32, N, K * bits / 32, MX_DEV_CPU),
                     mx_tensor_2d(s, MX_BF16, N, K / gs, MX_DEV_CPU),
                     mx_tensor_2d(b, MX_BF16, N, K / gs, MX_DEV_CPU), bits, gs};
    mx_tensor xt = mx_tensor_2d(x, MX_F32, rows, K, MX_DEV_CPU);
    mx_tensor yt = mx_tensor_2d(y, MX_F32, rows, N, MX_DEV_CPU);
    mx_tensor yrt = mx_tensor_2d(yr, MX_F32, rows, N, MX_DEV_CPU);
    mx_tensor wdt = mx_tensor_2d(wd, MX_BF16, N, K, MX_DEV_CPU);
    mx_tensor none = {0};
    ops->matmul_q(&yt, &xt, &qw);
    ops->matmul(&yrt, &xt, &wdt, &none);
    double num = 0, den = 0;
    for (int64_t i = 0; i < rows * N; i++) {
        num += (double)(y[i] - yr[i]) * (y[i] - yr[i]);
        den += (double)yr[i] * yr[i];
    }
    double rel = sqrt(num / den);
    if (rel > 1e-6) fail_msg("q%d g%d rows %lld: rel err %g", bits, gs, (long long)rows, rel);
    free(w), free(wd), free(wq), free(s), free(b), free(x), free(y), free(yr);
}

static void test_matmul_q(void **st) {
    (void)st;
    const int64_t rows[] = {1, 3, 8, 16, 33};
    for (int r = 0; r < 5; r++) {
        run(4, 64, 96, 256, rows[r]);
        run(3, 32, 40, 128, rows[r]);
        run(8, 128, 64, 384, rows[r]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_matmul_q)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
