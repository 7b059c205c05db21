/* CPU micro-benchmark of the quantized product of a few rows (decode): for each kernel family this
 * CPU has, the dequantize-then-multiply path (cpu_matmul_fill: a panel of fp32 rows, then the
 * fp32 tile) against the fused one (mlxq_wtile_for: each chunk dequantized in registers), on a
 * made-up MLX-quantized [N, K] weight with bf16 scales. Both give the same bits (test_quant);
 * this prints their speed in weights a second.
 *   cmake --build build --target cpu_qmatmul_bench
 *   OMP_NUM_THREADS=1 build/cpu_qmatmul_bench [bits 4] [group 64] [N 2048] [K 768] [rows 1]
 * Not part of the build or the tests. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_quant.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const int bits = argc > 1 ? atoi(argv[1]) : 4, gs = argc > 2 ? atoi(argv[2]) : 64;
    const int64_t N = argc > 3 ? atoll(argv[3]) : 2048, K = argc > 4 ? atoll(argv[4]) : 768;
    const int rows = argc > 5 ? atoi(argv[5]) : 1;
    if (!mlxq_valid_bits(bits) || (gs != 32 && gs != 64 && gs != 128) || N < 1 || K < gs ||
        K % gs || rows < 1 || rows > 64) {
        fprintf(stderr, "usage: %s [bits 2..8] [group 32|64|128] [N] [K, a multiple of group] "
                        "[rows 1..64]\n", argv[0]);
        return 2;
    }
    const size_t nw = (size_t)N * (size_t)mlxq_packed_cols(K, bits), ng = (size_t)(N * K / gs);
    uint32_t *w = malloc(nw * 4);
    uint16_t *s = malloc(ng * 2), *b = malloc(ng * 2);
    float *x = malloc((size_t)(rows * K) * 4), *y = malloc((size_t)(rows * N) * 4);
    if (!w || !s || !b || !x || !y) return 1;
    uint32_t h = 12345;
    for (size_t i = 0; i < nw; i++) w[i] = h = h * 1664525u + 1013904223u;
    for (size_t i = 0; i < ng; i++) {
        h = h * 1664525u + 1013904223u;
        s[i] = mx_f32_to_bf16(1e-3f * (float)(h >> 24)), b[i] = mx_f32_to_bf16(-0.05f);
    }
    for (int64_t i = 0; i < rows * K; i++) x[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
    mlxq_matrix m = {0};
    m.w = w, m.scales = s, m.biases = b, m.sb_dtype = MX_BF16, m.n = N, m.k = K, m.bits = bits;
    m.group_size = gs;
    mx_tensor tx = mx_tensor_2d(x, MX_F32, rows, K, MX_DEV_CPU);
    mx_tensor ty = mx_tensor_2d(y, MX_F32, rows, N, MX_DEV_CPU);
    printf("q%d g%d [%lld x %lld], %d row(s), best of 5 runs of ~0.1 s\n", bits, gs,
           (long long)N, (long long)K, rows);
    for (int isa = CPU_ISA_SCALAR; isa <= CPU_ISA_AVX512; isa++) {
        if (cpu_matmul_force_isa((cpu_isa)isa)) continue;
        for (int fused = 0; fused < 2; fused++) {
            const cpu_wtile_fn wt = fused ? mlxq_wtile_for(&m) : NULL;
            if (fused && !wt) continue;
            double t1 = now();
            cpu_matmul_fill_tile(&ty, &tx, N, mlxq_fill_rows, wt, &m, NULL);
            t1 = now() - t1;
            const int iters = t1 > 0.1 ? 1 : (int)(0.1 / (t1 + 1e-9)) + 1;
            double best = 1e30;
            for (int rep = 0; rep < 5; rep++) {
                const double t0 = now();
                for (int it = 0; it < iters; it++)
                    cpu_matmul_fill_tile(&ty, &tx, N, mlxq_fill_rows, wt, &m, NULL);
                const double t = (now() - t0) / iters;
                best = t < best ? t : best;
            }
            printf("  %-6s %-6s %8.1f us  %6.2f G weights/s\n", cpu_isa_name((cpu_isa)isa),
                   fused ? "fused" : "fill", best * 1e6, (double)(N * K) / best / 1e9);
        }
    }
    free(w), free(s), free(b), free(x), free(y);
    return 0;
}
