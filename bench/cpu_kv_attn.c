/* CPU micro-benchmark of the attention over each KV cache type: CPU time of one cpu_attention
 * call (one decode row, 12 q / 4 kv heads of 64, 4096 keys in scattered paged blocks of 16,
 * split count 1), one thread, minimum over the calls (thread CPU time: robust on a shared host).
 * Not part of the build (no CMake target); against a build's core library:
 *   gcc -O2 -std=c11 -D_GNU_SOURCE -fopenmp -DKVQ -Isrc bench/cpu_kv_attn.c \
 *       build-cpu/libmlxcel_core.a $(pkg-config --libs jansson libpcre2-8 libutf8proc \
 *       libmicrohttpd libxxhash) -lopenblas -lm -lpthread -o /tmp/cpu_kv_attn
 *   /tmp/cpu_kv_attn [calls 200] [f32|f16|bf16|q8_0|q4_0|turbo2|turbo3|turbo4]
 * It prints a hash of the output's bits too (equal hashes: the same bits in two builds).
 * Without -DKVQ (and with that build's -Isrc) it builds against a tree before the cache types
 * (f32 only), for an A/B of the f32 path. bench/results/2026-12-05-cpu-kv-types.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <omp.h>
#include "backend/cpu/cpu_internal.h"
#ifdef KVQ
#include "backend/kvfmt/kv_quant.h"
#endif
static double tcpu(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
    const int Hq = 12, Hkv = 4, D = 64, ctx = 4096, bs = 16, nb = ctx / bs, rows = ctx;
    const int reps = argc > 1 ? atoi(argv[1]) : 200;
    const char *type = argc > 2 ? argv[2] : "f32";
    omp_set_num_threads(1);
    float *q = malloc(sizeof(float) * Hq * D), *o = malloc(sizeof(float) * Hq * D);
    float *k = malloc(sizeof(float) * rows * Hkv * D), *v = malloc(sizeof(float) * rows * Hkv * D);
    srand(1);
    for (int i = 0; i < Hq * D; i++) q[i] = rand() / (float)RAND_MAX - 0.5f;
    for (int i = 0; i < rows * Hkv * D; i++) k[i] = rand() / (float)RAND_MAX - 0.5f, v[i] = rand() / (float)RAND_MAX - 0.5f;
    int32_t *table = malloc(sizeof(int32_t) * nb);
    for (int i = 0; i < nb; i++) table[i] = (i * 37) % nb; /* scattered blocks */
    const int32_t pos = ctx - 1, seq = 0;
    const int64_t wr = 0;
    mx_attn_batch b = {.n_rows = 1, .pos = &pos, .seq = &seq, .block_table = table, .table_stride = nb,
                       .block_size = bs, .write_rows = &wr, .kv_splits = 1};
    mx_attn_params p = {.n_heads = Hq, .n_kv_heads = Hkv, .head_dim = D, .scale = 0.125f};
    mx_tensor tq = mx_tensor_3d(q, MX_F32, 1, Hq, D, MX_DEV_CPU), to = mx_tensor_3d(o, MX_F32, 1, Hq, D, MX_DEV_CPU);
    mx_tensor tk = mx_tensor_3d(k, MX_F32, rows, Hkv, D, MX_DEV_CPU), tv = mx_tensor_3d(v, MX_F32, rows, Hkv, D, MX_DEV_CPU);
#ifdef KVQ
    mx_dtype dt = !strcmp(type, "q8_0") ? MX_Q8_0 : !strcmp(type, "q4_0") ? MX_Q4_0 : !strcmp(type, "f16") ? MX_F16
                : !strcmp(type, "bf16") ? MX_BF16 : !strcmp(type, "turbo2") ? MX_TQ2 : !strcmp(type, "turbo3") ? MX_TQ3
                : !strcmp(type, "turbo4") ? MX_TQ4 : MX_F32;
    if (dt != MX_F32) {
        const int e = D / mx_dtype_block(dt);
        void *kq = malloc((size_t)rows * Hkv * e * mx_dtype_size(dt)), *vq = malloc((size_t)rows * Hkv * e * mx_dtype_size(dt));
        kvq_from_f32_heads(kq, dt, k, rows * Hkv, D);
        kvq_from_f32_heads(vq, dt, v, rows * Hkv, D);
        tk = mx_tensor_3d(kq, dt, rows, Hkv, e, MX_DEV_CPU);
        tv = mx_tensor_3d(vq, dt, rows, Hkv, e, MX_DEV_CPU);
    }
#endif
    double best = 1e9, sum = 0;
    for (int r = 0; r < reps; r++) {
        const double t0 = tcpu();
        cpu_attention(&to, &tq, &tk, &tv, &b, &p);
        const double t = tcpu() - t0;
        best = t < best ? t : best;
        sum += t;
    }
    uint64_t hash = 1469598103934665603ull; /* FNV-1a of the output's bytes */
    for (size_t i = 0; i < sizeof(float) * Hq * D; i++) hash = (hash ^ ((const unsigned char *)o)[i]) * 1099511628211ull;
    printf("%s min %.1f us mean %.1f us (out[0] %.6f, bits %016llx)\n", type, best * 1e6, sum / reps * 1e6, o[0],
           (unsigned long long)hash);
    return 0;
}
