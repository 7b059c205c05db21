/* CPU micro-benchmark of the KV row reads alone (kvq_to_f32 / kv_turbo_decode_rot_with): rows of
 * 64 values (a head of 64: 2 blocks), 16,384 rows, each read path, minimum of 200 passes of
 * thread CPU time (robust on a shared host). Every path of a type sums to the same printed value.
 * Not part of the build (no CMake target); against a build's core library:
 *   gcc -O2 -std=c11 -D_GNU_SOURCE -Isrc bench/cpu_kv_read.c build-cpu/libmlxcel_core.a -lm \
 *       -lpthread -o /tmp/cpu_kv_read
 * bench/results/2026-12-05-cpu-turbo-reads.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "backend/kvfmt/kv_turbo.h"
#include "backend/kvfmt/kv_quant.h"
static double tcpu(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(void) {
    const int D = 64, rows = 16384;
    float *x = malloc(sizeof(float) * D * rows), y[64], scratch[64];
    uint8_t *buf = malloc((size_t)rows * 2 * 18);
    srand(1);
    for (int i = 0; i < D * rows; i++) x[i] = rand() / (float)RAND_MAX - 0.5f;
    const char *nm[] = {"auto", "ref", "c", "avx2"};
    for (int bits = 2; bits <= 4; bits++) {
        const size_t rb = 2 * kv_turbo_block_bytes(bits);
        for (int r = 0; r < rows; r++) kv_turbo_encode(x + r * D, D, bits, buf + r * rb, scratch);
        for (int how = 1; how <= 3; how++) {
            double best = 1e9; float acc = 0;
            for (int rep = 0; rep < 200; rep++) {
                double t0 = tcpu();
                for (int r = 0; r < rows; r++) { kv_turbo_decode_rot_with(buf + r * rb, bits, y, D, how); acc += y[r & 63]; }
                double t = tcpu() - t0; if (t < best) best = t;
            }
            printf("turbo%d %-4s %.2f ns/row (%.3f ns/value) %g\n", bits, nm[how], best / rows * 1e9, best / rows / D * 1e9, acc);
        }
    }
    mx_dtype qt[] = {MX_Q4_0, MX_Q8_0}; const char *qn[] = {"q4_0", "q8_0"};
    for (int t = 0; t < 2; t++) {
        const size_t rb = kvq_row_bytes(qt[t], D);
        kvq_from_f32(buf, qt[t], x, (int64_t)D * rows);
        for (int ref = 1; ref >= 0; ref--) {
            kvq_force_ref(ref);
            double best = 1e9; float acc = 0;
            for (int rep = 0; rep < 200; rep++) {
                double t0 = tcpu();
                for (int r = 0; r < rows; r++) { kvq_to_f32(y, buf + r * rb, qt[t], D); acc += y[r & 63]; }
                double t = tcpu() - t0; if (t < best) best = t;
            }
            printf("%s %-4s %.2f ns/row %g\n", qn[t], ref ? "ref" : "avx2", best / rows * 1e9, acc);
        }
    }
    return 0;
}
