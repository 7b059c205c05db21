/* The index math of the tensor-core qmv (src/backend/cuda/qmv_tc_map.h), emulated on the
 * host: one warp of qmv_tc_kernel over 16 weight rows, every group, with the x staging,
 * the bit extraction and the MMA operand / accumulator layouts taken from the PTX
 * definition of mma.m16n8k16 (written out here independently of the header). The emulated
 * result must equal sum_k (s q + b) x computed directly (double; x staged exactly, so the
 * only difference is the summation order), and every staging slot of a real x row must be
 * written exactly once per group. A wrong pair order, quarter, nibble constant, offset or
 * accumulator mapping changes the result by O(|y|). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/qmv_tc_map.h"

#define NR 16 /* weight rows of a CTA */

static uint64_t g_rng = 0x243f6a8885a308d3ull;
static uint32_t rnd(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(g_rng >> 33);
}
static double rndf(void) { return (double)(rnd() % 20001) / 10000.0 - 1.0; }

/* bf16 bits -> value */
static double bf(uint32_t h) {
    const uint32_t u = (h & 0xffffu) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* One warp's emulated result y[r][n] for R x rows; returns the largest |emu - ref| / (|ref| + 1). */
static double emulate(int bits, int G, int K, int R) {
    const int NG = K / G, NT = (R + 7) / 8, wpr = K * bits / 32, lw = qtc_lw(bits, G);
    const int np = qtc_np(G), lb = lw * 4;
    uint32_t *w = calloc((size_t)NR * wpr, 4);
    double *q = malloc(sizeof(double) * NR * K), *s = malloc(sizeof(double) * NR * NG);
    double *b = malloc(sizeof(double) * NR * NG), *x = malloc(sizeof(double) * R * K);
    for (int n = 0; n < NR; n++)
        for (int k = 0; k < K; k++) { /* MLX packing: code k at bits [k * bits, ...) */
            const uint32_t c = rnd() & ((1u << bits) - 1);
            q[n * K + k] = c;
            w[(size_t)n * wpr + k * bits / 32] |= c << (k * bits % 32);
        }
    for (int i = 0; i < NR * NG; i++) s[i] = rndf() * 0.1, b[i] = rndf();
    for (int i = 0; i < R * K; i++) x[i] = rndf();

    /* staging [NT][32 lanes][np pairs][2 halves] of one group, and the write counts */
    double *xs = malloc(sizeof(double) * NT * 32 * np * 2), xsum[32];
    int *cnt = malloc(sizeof(int) * NT * 32 * np * 2);
    double acc[4][32][4];
    memset(acc, 0, sizeof acc);
    for (int j = 0; j < NG; j++) {
        memset(xs, 0, sizeof(double) * NT * 32 * np * 2);
        memset(cnt, 0, sizeof(int) * NT * 32 * np * 2);
        memset(xsum, 0, sizeof xsum);
        for (int r = 0; r < R; r++)
            for (int v = 0; v < G / 8; v++) {
                const int t = qtc_unit_t(G, v), e0 = qtc_unit_e0(G, v);
                const double *f = x + (size_t)r * K + j * G + 8 * v;
                const int lane = 4 * (r & 7) + t, i = r >> 3;
                for (int p = 0; p < 4; p++) {
                    int lo, hi;
                    qtc_unit_pairs(bits, p, &lo, &hi);
                    const size_t o = (((size_t)i * 32 + lane) * np + e0 + p) * 2;
                    xs[o] = f[lo], xs[o + 1] = f[hi];
                    cnt[o]++, cnt[o + 1]++;
                }
                for (int e = 0; e < 8; e++) xsum[r] += f[e];
            }
        for (int i = 0; i < NT; i++)
            for (int lane = 0; lane < 32; lane++)
                for (int e = 0; e < np * 2; e++)
                    if (8 * i + (lane >> 2) < R)
                        assert_int_equal(cnt[((size_t)i * 32 + lane) * np * 2 + e], 1);
        double C[4][32][4];
        memset(C, 0, sizeof C);
        for (int wi = 0; wi < lw; wi++)
            for (int i = 0; i < NT; i++)
                for (int jj = 0; jj < 2; jj++) {
                    /* operands assembled from the 32 lanes' fragments (PTX layout) */
                    double A[16][16], B[16][8];
                    memset(B, 0, sizeof B);
                    for (int lane = 0; lane < 32; lane++) {
                        const int g = lane >> 2, t = lane & 3;
                        uint32_t r0[4], r8[4];
                        const size_t wo = ((size_t)j * G * bits / 8 + (size_t)t * lb) / 4 + wi;
                        qtc_decode_word(bits, w[(size_t)g * wpr + wo], r0);
                        qtc_decode_word(bits, w[(size_t)(g + 8) * wpr + wo], r8);
                        int ra, rb, pb;
                        qtc_word_mma(bits, wi, jj, &ra, &rb, &pb);
                        const uint32_t a[4] = {r0[ra], r8[ra], r0[rb], r8[rb]};
                        A[g][2 * t] = bf(a[0]), A[g][2 * t + 1] = bf(a[0] >> 16);
                        A[g + 8][2 * t] = bf(a[1]), A[g + 8][2 * t + 1] = bf(a[1] >> 16);
                        A[g][2 * t + 8] = bf(a[2]), A[g][2 * t + 9] = bf(a[2] >> 16);
                        A[g + 8][2 * t + 8] = bf(a[3]), A[g + 8][2 * t + 9] = bf(a[3] >> 16);
                        const double *bp = xs + ((size_t)i * 32 + lane) * np * 2;
                        B[2 * t][g] = bp[2 * pb], B[2 * t + 1][g] = bp[2 * pb + 1];
                        B[2 * t + 8][g] = bp[2 * pb + 2], B[2 * t + 9][g] = bp[2 * pb + 3];
                    }
                    for (int lane = 0; lane < 32; lane++) {
                        const int g = lane >> 2, t = lane & 3;
                        const int rr[4] = {g, g, g + 8, g + 8}, cc[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
                        for (int e = 0; e < 4; e++) {
                            double d = 0;
                            for (int k = 0; k < 16; k++) d += A[rr[e]][k] * B[k][cc[e]];
                            C[i][lane][e] += d;
                        }
                    }
                }
        for (int i = 0; i < NT; i++)
            for (int lane = 0; lane < 32; lane++)
                for (int e = 0; e < 4; e++) {
                    const int n = qtc_c_wrow(lane, e), r = qtc_c_xrow(i, lane, e);
                    const double sc = s[n * NG + j], bb = b[n * NG + j] - qtc_offset(bits) * sc;
                    acc[i][lane][e] += sc * C[i][lane][e] + bb * (r < 32 ? xsum[r] : 0);
                }
    }
    /* every (x row, weight row) exactly once among the accumulators, against the direct sum */
    int seen[32][NR];
    memset(seen, 0, sizeof seen);
    double worst = 0;
    for (int i = 0; i < NT; i++)
        for (int lane = 0; lane < 32; lane++)
            for (int e = 0; e < 4; e++) {
                const int n = qtc_c_wrow(lane, e), r = qtc_c_xrow(i, lane, e);
                assert_true(r < 8 * NT && n < NR);
                seen[r][n]++;
                if (r >= R) continue;
                double ref = 0;
                for (int k = 0; k < K; k++)
                    ref += (s[n * NG + k / G] * q[n * K + k] + b[n * NG + k / G]) * x[r * K + k];
                const double d = fabs(acc[i][lane][e] - ref) / (fabs(ref) + 1.0);
                if (d > worst) worst = d;
            }
    for (int r = 0; r < 8 * NT; r++)
        for (int n = 0; n < NR; n++) assert_int_equal(seen[r][n], 1);
    free(w), free(q), free(s), free(b), free(x), free(xs), free(cnt);
    return worst;
}

static void test_layouts(void **state) {
    (void)state;
    static const int bits[] = {4, 8}, groups[] = {32, 64, 128}, rows[] = {1, 3, 8, 9, 17, 32};
    for (int bi = 0; bi < 2; bi++)
        for (int gi = 0; gi < 3; gi++)
            for (int ri = 0; ri < 6; ri++) {
                const int G = groups[gi], K = 3 * G; /* three groups: group boundaries */
                const double e = emulate(bits[bi], G, K, rows[ri]);
                if (e > 1e-9) fail_msg("bits %d group %d rows %d: emulated vs direct %.3e", bits[bi], G, rows[ri], e);
            }
}

/* The staging units and the pair map are inverse: unit v's pair (e0 + p, half) holds code
 * 8 v + (half ? hi : lo), and qtc_code_pair sends that code back to the same pair. */
static void test_pair_maps(void **state) {
    (void)state;
    static const int bits[] = {4, 8}, groups[] = {32, 64, 128};
    for (int bi = 0; bi < 2; bi++)
        for (int gi = 0; gi < 3; gi++) {
            const int G = groups[gi], cl = qtc_cl(G);
            int used[128];
            memset(used, 0, sizeof used);
            for (int v = 0; v < G / 8; v++)
                for (int p = 0; p < 4; p++) {
                    int lo, hi;
                    qtc_unit_pairs(bits[bi], p, &lo, &hi);
                    const int t = qtc_unit_t(G, v), e = qtc_unit_e0(G, v) + p;
                    for (int h = 0; h < 2; h++) {
                        const int c = 8 * v + (h ? hi : lo) - t * cl; /* within the quarter */
                        int ee, hh;
                        assert_true(c >= 0 && c < cl);
                        qtc_code_pair(bits[bi], c, &ee, &hh);
                        assert_int_equal(ee, e);
                        assert_int_equal(hh, h);
                        assert_int_equal(qtc_pair_c0(bits[bi], e) + h * qtc_pair_d(bits[bi]), c);
                        used[8 * v + (h ? hi : lo)]++;
                    }
                }
            for (int k = 0; k < G; k++) assert_int_equal(used[k], 1);
            /* the kernel reads word wi's B pairs as one vector from pair P0 * wi (P0 = 4 at
             * 4-bit, 2 at 8-bit) and indexes it with pb - P0 * wi */
            const int p0 = bits[bi] == 4 ? 4 : 2;
            for (int wi = 0; wi < qtc_lw(bits[bi], G); wi++)
                for (int j = 0; j < 2; j++) {
                    int ra, rb, pb;
                    qtc_word_mma(bits[bi], wi, j, &ra, &rb, &pb);
                    assert_true(pb - p0 * wi >= 0 && pb - p0 * wi + 1 < p0);
                    assert_true(pb + 1 < qtc_np(G));
                }
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pair_maps),
        cmocka_unit_test(test_layouts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
