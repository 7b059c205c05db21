/* CPU split-K paged decode attention against a naive double-precision softmax reference. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "tune/cpu_paged_decode.h"

static float rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

typedef struct fixture {
    int B, Hq, Hkv, D, bs, pt_stride;
    int64_t n_blocks;
    float *q, *k, *v, *o, *ws;
    int32_t *table, *lens;
    size_t wsf;
} fixture;

/* B sequences of the given lengths; blocks scattered over the pool in reverse order. */
static void make(fixture *f, int B, int Hq, int Hkv, int D, int bs, const int *lens, int max_s) {
    memset(f, 0, sizeof *f);
    f->B = B, f->Hq = Hq, f->Hkv = Hkv, f->D = D, f->bs = bs;
    int maxlen = 0;
    for (int b = 0; b < B; b++) maxlen = lens[b] > maxlen ? lens[b] : maxlen;
    f->pt_stride = (maxlen + bs - 1) / bs;
    f->n_blocks = (int64_t)B * f->pt_stride;
    const size_t kvf = (size_t)f->n_blocks * bs * Hkv * D;
    f->q = malloc((size_t)B * Hq * D * sizeof(float));
    f->o = malloc((size_t)B * Hq * D * sizeof(float));
    f->k = malloc(kvf * sizeof(float));
    f->v = malloc(kvf * sizeof(float));
    f->table = malloc((size_t)f->n_blocks * sizeof(int32_t));
    f->lens = malloc((size_t)B * sizeof(int32_t));
    f->wsf = cpu_paged_attn_workspace_floats(B, Hq, D, max_s);
    f->ws = malloc(f->wsf * sizeof(float));
    uint64_t s = 42;
    for (size_t i = 0; i < (size_t)B * Hq * D; i++) f->q[i] = 2.0f * rnd(&s);
    for (size_t i = 0; i < kvf; i++) f->k[i] = 2.0f * rnd(&s), f->v[i] = rnd(&s);
    for (int64_t i = 0; i < f->n_blocks; i++) f->table[i] = (int32_t)(f->n_blocks - 1 - i);
    for (int b = 0; b < B; b++) f->lens[b] = lens[b];
}

static void drop(fixture *f) {
    free(f->q), free(f->o), free(f->k), free(f->v), free(f->table), free(f->lens), free(f->ws);
}

static cpu_paged_attn_args args(fixture *f, int splits) {
    cpu_paged_attn_args a = {f->q, f->k, f->v, f->table, f->lens, f->o, f->ws, f->wsf,
                             f->B, f->Hq, f->Hkv, f->D, f->bs, f->pt_stride, f->n_blocks,
                             1.0f / sqrtf((float)f->D), splits};
    return a;
}

/* softmax(q . k * scale) . v per (sequence, q head), straight over the positions. */
static double rel_err_vs_reference(const fixture *f) {
    const float scale = 1.0f / sqrtf((float)f->D);
    const int G = f->Hq / f->Hkv;
    double num = 0, den = 0;
    for (int b = 0; b < f->B; b++)
        for (int h = 0; h < f->Hq; h++) {
            const float *q = f->q + ((size_t)b * f->Hq + h) * f->D;
            const int L = f->lens[b];
            double *sc = malloc((size_t)L * sizeof(double)), mx = -INFINITY, sum = 0;
            for (int p = 0; p < L; p++) {
                const int64_t row = (int64_t)f->table[(size_t)b * f->pt_stride + p / f->bs] * f->bs +
                                    p % f->bs;
                const float *k = f->k + ((size_t)row * f->Hkv + h / G) * f->D;
                double d = 0;
                for (int i = 0; i < f->D; i++) d += (double)q[i] * k[i];
                sc[p] = d * scale;
                mx = sc[p] > mx ? sc[p] : mx;
            }
            for (int p = 0; p < L; p++) sum += sc[p] = exp(sc[p] - mx);
            for (int i = 0; i < f->D; i++) {
                double acc = 0;
                for (int p = 0; p < L; p++) {
                    const int64_t row =
                        (int64_t)f->table[(size_t)b * f->pt_stride + p / f->bs] * f->bs + p % f->bs;
                    acc += sc[p] * f->v[((size_t)row * f->Hkv + h / G) * f->D + i];
                }
                const double ref = acc / sum, got = f->o[((size_t)b * f->Hq + h) * f->D + i];
                num += (got - ref) * (got - ref);
                den += ref * ref;
            }
            free(sc);
        }
    return sqrt(num / den);
}

static void check_case(int B, int Hq, int Hkv, int D, int bs, const int *lens) {
    static const int splits[] = {1, 2, 3, 7, 16, 64};
    fixture f;
    make(&f, B, Hq, Hkv, D, bs, lens, 64);
    for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++) {
        cpu_paged_attn_args a = args(&f, splits[i]);
        mx_error err;
        memset(f.o, 0xff, (size_t)B * Hq * D * sizeof(float)); /* NaN: every output is written */
        assert_int_equal(cpu_paged_decode_attn(&a, &err), 0);
        const double e = rel_err_vs_reference(&f);
        if (!(e < 1e-5)) print_message("B%d Hq%d Hkv%d D%d bs%d splits %d: rel err %g\n", B, Hq,
                                       Hkv, D, bs, splits[i], e);
        assert_true(e < 1e-5);
    }
    drop(&f);
}

static void test_matches_reference(void **st) {
    (void)st;
    const int l1[] = {1};
    check_case(1, 4, 4, 32, 16, l1);             /* a single token, more splits than blocks */
    const int l2[] = {100, 37, 16};
    check_case(3, 8, 2, 64, 16, l2);             /* GQA 4, ragged lengths, partial blocks */
    const int l3[] = {513, 300};
    check_case(2, 6, 1, 16, 5, l3);              /* MQA, odd block size */
    const int l4[] = {333};
    check_case(1, 2, 2, 24, 100, l4);            /* block larger than the 64-token chunk */
}

static void test_rejects_bad_args(void **st) {
    (void)st;
    const int l[] = {40, 20};
    fixture f;
    make(&f, 2, 4, 2, 16, 16, l, 4);
    mx_error err;
    cpu_paged_attn_args a = args(&f, 0);
    assert_int_equal(cpu_paged_decode_attn(&a, &err), -1);
    a = args(&f, 8); /* workspace sized for 4 splits */
    assert_int_equal(cpu_paged_decode_attn(&a, &err), -1);
    a = args(&f, 2);
    f.table[1] = (int32_t)f.n_blocks; /* out of the pool */
    assert_int_equal(cpu_paged_decode_attn(&a, &err), -1);
    assert_non_null(strstr(err.msg, "page_table[0][1]"));
    f.table[1] = 0;
    f.lens[1] = 0;
    assert_int_equal(cpu_paged_decode_attn(&a, &err), -1);
    f.lens[1] = 20;
    a.n_kv_heads = 3;
    assert_int_equal(cpu_paged_decode_attn(&a, &err), -1);
    drop(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_reference),
        cmocka_unit_test(test_rejects_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
