/* CPU micro-benchmark of cascade attention (src/backend/cpu/cpu_cascade.h): one cpu_attention
 * call over B sequences whose first N keys are the same KV blocks (a cached system prompt) and
 * M keys of their own, with cascade off (MLXCEL_CASCADE_ATTENTION=0) and forced (=1), calls
 * interleaved, medians printed. Decode: one row per sequence at its last key; prefill: each
 * sequence's M own keys are a prefill chunk of M rows (the step after a prefix-cache hit).
 * Both modes give the same bits (tests/unit/test_cpu_cascade.c); checked here too.
 *   cmake --build build --target cpu_cascade_bench
 *   build/cpu_cascade_bench [B 8] [N 2048] [M 64] [decode|prefill] [q_heads 12] [kv_heads 4]
 *                           [head_dim 64] [reps 15] [layers 12] [both|off|on]
 * Each call reads the next of `layers` separate K/V pools, as a forward's layers do, so the K/V
 * come from memory rather than from the cache of the previous call; the OpenMP wait policy is
 * mlxcel's (passive unless set). A figure is the median time of one call (one layer).
 * Not part of the build or the tests. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/cpu_internal.h"
#include "base/env.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    mx_env_apply_omp_defaults(argv);
    const int B = argc > 1 ? atoi(argv[1]) : 8, N = argc > 2 ? atoi(argv[2]) : 2048;
    const int M = argc > 3 ? atoi(argv[3]) : 64;
    const int prefill = argc > 4 && !strcmp(argv[4], "prefill");
    const int Hq = argc > 5 ? atoi(argv[5]) : 12, Hkv = argc > 6 ? atoi(argv[6]) : 4;
    const int D = argc > 7 ? atoi(argv[7]) : 64, reps = argc > 8 ? atoi(argv[8]) : 15;
    const int L = argc > 9 ? atoi(argv[9]) : 12;
    /* modes timed: both (default), or only "off" / "on" (profiling one path) */
    const int m_lo = argc > 10 && !strcmp(argv[10], "on"), m_hi = argc > 10 && !strcmp(argv[10], "off") ? 1 : 2;
    const int bs = 16;
    if (B < 1 || N < 0 || N % bs || M < 1 || Hq < 1 || Hkv < 1 || Hq % Hkv || D < 1 || reps < 1 || L < 1) {
        fprintf(stderr, "usage: %s [B] [N, a multiple of 16] [M] [decode|prefill] [q_heads] "
                        "[kv_heads] [head_dim] [reps] [layers]\n", argv[0]);
        return 2;
    }
    const int len = N + M, stride = (len + bs - 1) / bs, shared = N / bs;
    const int n_blocks = shared + B * (stride - shared), n = prefill ? B * M : B;
    const size_t kvf = (size_t)n_blocks * bs * Hkv * D, qf = (size_t)n * Hq * D;
    float *k = malloc(kvf * L * 4), *v = malloc(kvf * L * 4), *q = malloc(qf * 4);
    float *o0 = malloc(qf * 4), *o1 = malloc(qf * 4);
    int32_t *table = malloc((size_t)B * stride * 4), *pos = malloc((size_t)n * 4), *seq = malloc((size_t)n * 4);
    if (!k || !v || !q || !o0 || !o1 || !table || !pos || !seq) return 1;
    uint32_t h = 12345;
    for (size_t i = 0; i < kvf * L; i++) {
        h = h * 1664525u + 1013904223u;
        k[i] = (float)(h >> 8) / 16777216.0f - 0.5f;
        v[i] = (float)(h & 0xffff) / 65536.0f - 0.5f;
    }
    for (size_t i = 0; i < qf; i++) q[i] = (float)((h = h * 1664525u + 1013904223u) >> 8) / 8388608.0f - 1.0f;
    int next = shared; /* private blocks interleaved over the pool, as a busy server's are */
    for (int b = shared; b < stride; b++)
        for (int s = 0; s < B; s++) table[s * stride + b] = next++;
    for (int s = 0; s < B; s++)
        for (int b = 0; b < shared; b++) table[s * stride + b] = b;
    for (int s = 0, r = 0; s < B; s++)
        for (int j = prefill ? 0 : M - 1; j < M; j++) pos[r] = N + j, seq[r++] = s;
    mx_attn_batch ab = {.n_rows = n, .pos = pos, .seq = seq, .block_table = table,
                        .table_stride = stride, .block_size = bs};
    mx_attn_params p = {.n_heads = Hq, .n_kv_heads = Hkv, .head_dim = D,
                        .scale = 1.0f / sqrtf((float)D)};
    mx_tensor tq = mx_tensor_3d(q, MX_F32, n, Hq, D, MX_DEV_CPU);
    mx_tensor t0 = mx_tensor_3d(o0, MX_F32, n, Hq, D, MX_DEV_CPU), t1 = mx_tensor_3d(o1, MX_F32, n, Hq, D, MX_DEV_CPU);
    const int n_t = reps * L;
    double *ts[2] = {malloc((size_t)n_t * sizeof(double)), malloc((size_t)n_t * sizeof(double))};
    cpu_cascade_info info = {0};
    for (int r = -1; r < reps; r++) /* a warm-up pass */
        for (int mode = m_lo; mode < m_hi; mode++) {
            setenv("MLXCEL_CASCADE_ATTENTION", mode ? "1" : "0", 1);
            mx_env_reload();
            for (int l = 0; l < L; l++) { /* layer l's pools */
                mx_tensor tk = mx_tensor_3d(k + kvf * l, MX_F32, n_blocks * bs, Hkv, D, MX_DEV_CPU);
                mx_tensor tv = mx_tensor_3d(v + kvf * l, MX_F32, n_blocks * bs, Hkv, D, MX_DEV_CPU);
                const double a = now();
                cpu_attention(mode ? &t1 : &t0, &tq, &tk, &tv, &ab, &p);
                const double dt = now() - a;
                if (r >= 0) ts[mode][r * L + l] = dt;
            }
            if (mode) cpu_attention_last_cascade(&info);
        }
    if (m_lo == 0 && m_hi == 2 && memcmp(o0, o1, qf * 4)) {
        fprintf(stderr, "cascade changed the output\n");
        return 1;
    }
    qsort(ts[0], (size_t)n_t, sizeof(double), cmp_d);
    qsort(ts[1], (size_t)n_t, sizeof(double), cmp_d);
    const double m0 = ts[0][n_t / 2] * 1e6, m1 = ts[1][n_t / 2] * 1e6;
    printf("%s B %d shared %d own %d heads %d/%d D %d threads %d: off %.1f us, cascade %.1f us, "
           "x%.2f (rows %d, groups %d, saved %lld key reads per kv head)\n",
           prefill ? "prefill" : "decode", B, N, M, Hq, Hkv, D, omp_get_max_threads(), m0, m1,
           m0 / m1, info.rows, info.groups, (long long)info.saved_keys);
    free(k), free(v), free(q), free(o0), free(o1), free(table), free(pos), free(seq);
    free(ts[0]), free(ts[1]);
    return 0;
}
