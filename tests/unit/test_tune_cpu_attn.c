/* CPU split-K paged decode attention against (1) a naive double-precision softmax reference and
 * (2) the engine's CPU backend attention (backend_cpu()->attention) on the same pools. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "tune/cpu_paged_decode.h"

static float rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* B query rows over n_seqs page-table rows (row b reads sequence seq[b]). */
typedef struct fixture {
    int B, n_seqs, Hq, Hkv, D, bs, pt_stride, window;
    float softcap;
    int64_t n_blocks;
    float *q, *k, *v, *o, *ws;      /* q, o: [B, Hq, D]; k, v: [n_blocks, bs, Hkv, D] */
    int32_t *table, *lens, *seq;    /* table: [n_seqs, pt_stride]; lens, seq: [B] */
    size_t wsf;
} fixture;

typedef struct fcase {
    int B, n_seqs, Hq, Hkv, D, bs, window;
    float softcap;
    const int *lens, *seq; /* seq NULL = identity */
} fcase;

/* Blocks of all sequences scattered over the pool in reverse order. */
static void make(fixture *f, const fcase *c, int max_s) {
    memset(f, 0, sizeof *f);
    f->B = c->B, f->n_seqs = c->n_seqs, f->Hq = c->Hq, f->Hkv = c->Hkv, f->D = c->D;
    f->bs = c->bs, f->window = c->window, f->softcap = c->softcap;
    int maxlen = 0;
    for (int b = 0; b < c->B; b++) maxlen = c->lens[b] > maxlen ? c->lens[b] : maxlen;
    f->pt_stride = (maxlen + c->bs - 1) / c->bs;
    f->n_blocks = (int64_t)c->n_seqs * f->pt_stride;
    const size_t kvf = (size_t)f->n_blocks * c->bs * c->Hkv * c->D, qf = (size_t)c->B * c->Hq * c->D;
    f->q = malloc(qf * sizeof(float));
    f->o = malloc(qf * sizeof(float));
    f->k = malloc(kvf * sizeof(float));
    f->v = malloc(kvf * sizeof(float));
    f->table = malloc((size_t)f->n_blocks * sizeof(int32_t));
    f->lens = malloc((size_t)c->B * sizeof(int32_t));
    f->seq = malloc((size_t)c->B * sizeof(int32_t));
    f->wsf = cpu_paged_attn_workspace_floats(c->B, c->Hq, c->D, max_s);
    f->ws = malloc(f->wsf * sizeof(float));
    uint64_t s = 42;
    for (size_t i = 0; i < qf; i++) f->q[i] = 2.0f * rnd(&s);
    for (size_t i = 0; i < kvf; i++) f->k[i] = 2.0f * rnd(&s), f->v[i] = rnd(&s);
    for (int64_t i = 0; i < f->n_blocks; i++) f->table[i] = (int32_t)(f->n_blocks - 1 - i);
    for (int b = 0; b < c->B; b++) f->lens[b] = c->lens[b], f->seq[b] = c->seq ? c->seq[b] : b;
}

static void drop(fixture *f) {
    free(f->q), free(f->o), free(f->k), free(f->v), free(f->table), free(f->lens), free(f->seq);
    free(f->ws);
}

static cpu_paged_attn_args args(fixture *f, int splits) {
    return (cpu_paged_attn_args){.q = f->q, .k_cache = f->k, .v_cache = f->v,
                                 .page_table = f->table, .seq = f->seq, .seq_lens = f->lens,
                                 .o = f->o, .workspace = f->ws, .workspace_floats = f->wsf,
                                 .B = f->B, .n_q_heads = f->Hq, .n_kv_heads = f->Hkv,
                                 .head_dim = f->D, .block_size = f->bs, .pt_stride = f->pt_stride,
                                 .n_blocks = f->n_blocks, .n_seqs = f->n_seqs,
                                 .scale = 1.0f / sqrtf((float)f->D), .softcap = f->softcap,
                                 .window = f->window, .num_splits = splits};
}

static int64_t phys(const fixture *f, int b, int p) {
    return (int64_t)f->table[(size_t)f->seq[b] * f->pt_stride + p / f->bs] * f->bs + p % f->bs;
}

/* softmax(cap(q . k * scale)) . v per (query row, q head), straight over the key positions. */
static double rel_err(const fixture *f, const float *got) {
    const double scale = 1.0 / sqrt((double)f->D);
    const int G = f->Hq / f->Hkv;
    double num = 0, den = 0;
    for (int b = 0; b < f->B; b++)
        for (int h = 0; h < f->Hq; h++) {
            const float *q = f->q + ((size_t)b * f->Hq + h) * f->D;
            const int L = f->lens[b], lo = f->window > 0 && L > f->window ? L - f->window : 0;
            double *sc = malloc((size_t)L * sizeof(double)), mx = -INFINITY, sum = 0;
            for (int p = lo; p < L; p++) {
                const float *k = f->k + ((size_t)phys(f, b, p) * f->Hkv + h / G) * f->D;
                double d = 0;
                for (int i = 0; i < f->D; i++) d += (double)q[i] * k[i];
                d *= scale;
                if (f->softcap > 0) d = f->softcap * tanh(d / f->softcap);
                sc[p] = d;
                mx = d > mx ? d : mx;
            }
            for (int p = lo; p < L; p++) sum += sc[p] = exp(sc[p] - mx);
            for (int i = 0; i < f->D; i++) {
                double acc = 0;
                for (int p = lo; p < L; p++)
                    acc += sc[p] * f->v[((size_t)phys(f, b, p) * f->Hkv + h / G) * f->D + i];
                const double ref = acc / sum, o = got[((size_t)b * f->Hq + h) * f->D + i];
                num += (o - ref) * (o - ref);
                den += ref * ref;
            }
            free(sc);
        }
    return sqrt(num / den);
}

static const int k_splits[] = {1, 2, 3, 7, 16, 64};

static void check_case(const fcase *c) {
    fixture f;
    make(&f, c, 64);
    for (size_t i = 0; i < sizeof k_splits / sizeof k_splits[0]; i++) {
        cpu_paged_attn_args a = args(&f, k_splits[i]);
        mx_error err;
        memset(f.o, 0xff, (size_t)f.B * f.Hq * f.D * sizeof(float)); /* NaN until written */
        assert_int_equal(cpu_paged_decode_attn(&a, &err), 0);
        const double e = rel_err(&f, f.o);
        if (!(e < 1e-5))
            print_message("B%d Hq%d Hkv%d D%d bs%d win%d cap%g splits %d: rel err %g\n", f.B, f.Hq,
                          f.Hkv, f.D, f.bs, f.window, f.softcap, k_splits[i], e);
        assert_true(e < 1e-5);
    }
    drop(&f);
}

static const int l1[] = {1}, l2[] = {100, 37, 16}, l3[] = {513, 300}, l4[] = {333};
static const int l5[] = {200, 90, 200}, s5[] = {2, 0, 2};
static const fcase k_cases[] = {
    {1, 1, 4, 4, 32, 16, 0, 0.0f, l1, NULL},     /* one token, more splits than blocks */
    {3, 3, 8, 2, 64, 16, 0, 0.0f, l2, NULL},     /* GQA 4, ragged lengths, partial blocks */
    {2, 2, 6, 1, 16, 5, 0, 0.0f, l3, NULL},      /* MQA, odd block size */
    {1, 1, 2, 2, 24, 100, 0, 0.0f, l4, NULL},    /* block larger than the 64-token chunk */
    {2, 2, 8, 2, 32, 16, 70, 0.0f, l3, NULL},    /* sliding window cutting inside a block */
    {3, 3, 4, 2, 32, 16, 50, 30.0f, l5, s5},     /* softcap, window, rows sharing a sequence */
};

static void test_matches_reference(void **st) {
    (void)st;
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) check_case(&k_cases[i]);
}

/* The engine's CPU attention on the same pools, decode rows at pos = len - 1. */
static void test_matches_cpu_backend(void **st) {
    (void)st;
    const backend_ops *be = backend_cpu();
    for (size_t ci = 0; ci < sizeof k_cases / sizeof k_cases[0]; ci++) {
        const fcase *c = &k_cases[ci];
        fixture f;
        make(&f, c, 64);
        int32_t *pos = malloc((size_t)f.B * sizeof(int32_t));
        for (int b = 0; b < f.B; b++) pos[b] = f.lens[b] - 1;
        float *ref = malloc((size_t)f.B * f.Hq * f.D * sizeof(float));
        mx_tensor q = mx_tensor_3d(f.q, MX_F32, f.B, f.Hq, f.D, MX_DEV_CPU);
        mx_tensor out = mx_tensor_3d(ref, MX_F32, f.B, f.Hq, f.D, MX_DEV_CPU);
        mx_tensor kp = mx_tensor_3d(f.k, MX_F32, f.n_blocks * f.bs, f.Hkv, f.D, MX_DEV_CPU);
        mx_tensor vp = mx_tensor_3d(f.v, MX_F32, f.n_blocks * f.bs, f.Hkv, f.D, MX_DEV_CPU);
        mx_attn_batch bt = {.n_rows = f.B, .pos = pos, .seq = f.seq, .block_table = f.table,
                            .table_stride = f.pt_stride, .block_size = f.bs, .step_id = 1};
        mx_attn_params pr = {.n_heads = f.Hq, .n_kv_heads = f.Hkv, .head_dim = f.D,
                             .scale = 1.0f / sqrtf((float)f.D), .softcap = f.softcap,
                             .window = f.window};
        be->attention(&out, &q, &kp, &vp, &bt, &pr);
        assert_true(rel_err(&f, ref) < 1e-5); /* the backend agrees with the reference too */
        for (size_t i = 0; i < sizeof k_splits / sizeof k_splits[0]; i++) {
            cpu_paged_attn_args a = args(&f, k_splits[i]);
            mx_error err;
            assert_int_equal(cpu_paged_decode_attn(&a, &err), 0);
            double num = 0, den = 0;
            for (size_t j = 0; j < (size_t)f.B * f.Hq * f.D; j++) {
                num += ((double)f.o[j] - ref[j]) * ((double)f.o[j] - ref[j]);
                den += (double)ref[j] * ref[j];
            }
            assert_true(sqrt(num / den) < 1e-5);
        }
        free(pos), free(ref);
        drop(&f);
    }
}

static void test_rejects_bad_args(void **st) {
    (void)st;
    const int l[] = {40, 20};
    const fcase c = {2, 2, 4, 2, 16, 16, 0, 0.0f, l, NULL};
    fixture f;
    make(&f, &c, 4);
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
    f.seq[1] = 2; /* only 2 page-table rows */
    assert_int_equal(cpu_paged_decode_attn(&a, &err), -1);
    assert_non_null(strstr(err.msg, "seq[1]"));
    f.seq[1] = 1;
    a.window = -1;
    assert_int_equal(cpu_paged_decode_attn(&a, &err), -1);
    a.window = 0;
    a.n_kv_heads = 3;
    assert_int_equal(cpu_paged_decode_attn(&a, &err), -1);
    a.n_kv_heads = 2;
    assert_int_equal(cpu_paged_decode_attn(&a, &err), 0);
    drop(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_reference),
        cmocka_unit_test(test_matches_cpu_backend),
        cmocka_unit_test(test_rejects_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
