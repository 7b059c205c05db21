/* The CPU attention's split count (paged-decode-splits on the CPU, src/backend/cpu/
 * cpu_attention.c):
 * - kernel level, at the production piece length: paged rows up to 1500 keys (GQA, sliding
 *   window, soft-capping, head dims with and without a 16-lane tail), split counts 1..1000 on
 *   1 and 4 threads give the bits of S = 1, each row alone gives the bits it has in the batch,
 *   and the values are close to a double-precision reference;
 * - the workspace bound: a batch whose split partials exceed one group's workspace is run in
 *   row groups, with the same bits;
 * - engine level: the count the engine's attention uses is the one the tune policy resolves:
 *   MLXCEL_PAGED_DECODE_SPLITS > a cached winner (MLXCEL_AUTOTUNE=cache) > the built-in count,
 *   and the logits do not change with it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <omp.h>

#include "backend/cpu/cpu_internal.h"
#include "engine/engine.h"
#include "tiny_model.h"
#include "tune_test_util.h"

_Static_assert(CPU_ATTN_PIECE == TUNE_CPU_ATTN_PIECE, "the tuner's piece length is the kernel's");

/* ==== Kernel level ==== */
typedef struct att_case {
    int Hq, Hkv, D, bs, window;
    float softcap;
} att_case;

/* Paged pools of n_seq sequences of `len` keys each, blocks scattered (reversed) over the pool;
 * q rows at `pos` of sequence `seq`. */
typedef struct att_fix {
    att_case c;
    int n, stride, n_rows_pool;
    float *q, *k, *v;        /* q: [n, Hq, D]; k, v: [n_rows_pool, Hkv, D] */
    int32_t *table;          /* [n_seq, stride] */
    const int32_t *pos, *seq;
} att_fix;

static uint64_t g_rng = 4242;

static void fix_make(att_fix *f, att_case c, int n_seq, int len, int n, const int32_t *pos,
                     const int32_t *seq) {
    memset(f, 0, sizeof *f);
    f->c = c, f->n = n, f->pos = pos, f->seq = seq;
    f->stride = (len + c.bs - 1) / c.bs;
    const int n_blocks = n_seq * f->stride;
    f->n_rows_pool = n_blocks * c.bs;
    const size_t kvf = (size_t)f->n_rows_pool * c.Hkv * c.D, qf = (size_t)n * c.Hq * c.D;
    f->q = malloc(qf * 4), f->k = malloc(kvf * 4), f->v = malloc(kvf * 4);
    f->table = malloc((size_t)n_blocks * 4);
    for (size_t i = 0; i < qf; i++) f->q[i] = 2.0f * tiny_rand(&g_rng);
    for (size_t i = 0; i < kvf; i++) f->k[i] = 2.0f * tiny_rand(&g_rng), f->v[i] = tiny_rand(&g_rng);
    for (int i = 0; i < n_blocks; i++) f->table[i] = n_blocks - 1 - i;
}

static void fix_free(att_fix *f) { free(f->q), free(f->k), free(f->v), free(f->table); }

/* Rows [r0, r0 + n) of the fixture with split count S into o ([n, Hq, D]). */
static void fix_run(const att_fix *f, int r0, int n, int S, float *o) {
    const att_case *c = &f->c;
    mx_attn_batch b = {.n_rows = n, .pos = f->pos + r0, .seq = f->seq + r0, .block_table = f->table,
                       .table_stride = f->stride, .block_size = c->bs, .kv_splits = S};
    mx_attn_params p = {.n_heads = c->Hq, .n_kv_heads = c->Hkv, .head_dim = c->D,
                        .scale = 1.0f / sqrtf((float)c->D), .softcap = c->softcap,
                        .window = c->window};
    mx_tensor tq = mx_tensor_3d(f->q + (size_t)r0 * c->Hq * c->D, MX_F32, n, c->Hq, c->D, MX_DEV_CPU);
    mx_tensor tk = mx_tensor_3d(f->k, MX_F32, f->n_rows_pool, c->Hkv, c->D, MX_DEV_CPU);
    mx_tensor tv = mx_tensor_3d(f->v, MX_F32, f->n_rows_pool, c->Hkv, c->D, MX_DEV_CPU);
    mx_tensor to = mx_tensor_3d(o, MX_F32, n, c->Hq, c->D, MX_DEV_CPU);
    memset(o, 0xff, (size_t)n * c->Hq * c->D * 4);
    cpu_attention(&to, &tq, &tk, &tv, &b, &p);
}

/* |out - softmax(q K^T) V| in double, for row i, every q head. */
static void check_reference(const att_fix *f, int i, const float *o) {
    const att_case *c = &f->c;
    const int G = c->Hq / c->Hkv, pos = f->pos[i];
    const int lo = c->window > 0 && pos - c->window + 1 > 0 ? pos - c->window + 1 : 0;
    double *sc = malloc((size_t)(pos - lo + 1) * sizeof(double));
    for (int h = 0; h < c->Hq; h++) {
        const float *q = f->q + ((size_t)i * c->Hq + h) * c->D;
        double mx = -1e300, den = 0;
        for (int t = lo; t <= pos; t++) {
            const int r = f->table[f->seq[i] * f->stride + t / c->bs] * c->bs + t % c->bs;
            const float *k = f->k + ((size_t)r * c->Hkv + h / G) * c->D;
            double d = 0;
            for (int e = 0; e < c->D; e++) d += (double)q[e] * k[e];
            d /= sqrt((double)c->D);
            if (c->softcap > 0) d = c->softcap * tanh(d / c->softcap);
            sc[t - lo] = d;
            mx = d > mx ? d : mx;
        }
        for (int t = lo; t <= pos; t++) den += exp(sc[t - lo] - mx);
        for (int e = 0; e < c->D; e++) {
            double acc = 0;
            for (int t = lo; t <= pos; t++) {
                const int r = f->table[f->seq[i] * f->stride + t / c->bs] * c->bs + t % c->bs;
                acc += exp(sc[t - lo] - mx) / den * f->v[((size_t)r * c->Hkv + h / G) * c->D + e];
            }
            assert_true(fabs(acc - o[(size_t)h * c->D + e]) < 1e-5);
        }
    }
    free(sc);
}

static void check_long_case(att_case c) {
    /* decode rows at the ends of three sequences, and prefill-like rows at piece edges */
    static const int32_t pos[] = {1499, 699, 128, 0, 127, 255, 256, 1000, 1498, 383};
    static const int32_t seq[] = {0, 1, 2, 0, 1, 0, 2, 0, 0, 1};
    const int n = 10;
    att_fix f;
    fix_make(&f, c, 3, 1500, n, pos, seq);
    const size_t row = (size_t)c.Hq * c.D;
    float *ref = malloc(n * row * 4), *o = malloc(n * row * 4);
    omp_set_num_threads(1);
    fix_run(&f, 0, n, 1, ref);
    for (int i = 0; i < n; i++) check_reference(&f, i, ref + i * row);
    static const int splits[] = {1, 2, 3, 4, 5, 12, 1000};
    static const int threads[] = {1, 4};
    for (int ti = 0; ti < 2; ti++) {
        omp_set_num_threads(threads[ti]);
        for (int si = 0; si < 7; si++) {
            fix_run(&f, 0, n, splits[si], o);
            if (memcmp(ref, o, n * row * 4)) {
                fprintf(stderr, "D %d window %d softcap %g: splits %d on %d threads differ\n",
                        c.D, c.window, c.softcap, splits[si], threads[ti]);
                fail();
            }
            /* a row alone: same bits as in the batch */
            for (int i = 0; i < n; i += 3) {
                fix_run(&f, i, 1, splits[si], o);
                assert_memory_equal(ref + i * row, o, row * 4);
            }
        }
    }
    omp_set_num_threads(omp_get_num_procs());
    free(ref), free(o);
    fix_free(&f);
}

/* S = 1 and S = 4 (and others) on paged GQA rows, sliding window, soft-capping. */
static void test_long_rows(void **st) {
    (void)st;
    check_long_case((att_case){8, 2, 64, 16, 0, 0.0f});
    check_long_case((att_case){8, 2, 64, 16, 600, 30.0f}); /* window start inside a piece */
    check_long_case((att_case){6, 1, 72, 16, 0, 20.0f});   /* G 6, a 16-lane tail */
    check_long_case((att_case){4, 4, 40, 32, 300, 0.0f});  /* no GQA, blocks of 32 */
}

/* Pieces of one key: 160 rows x ~1100 pieces x 4 heads x (8 + 2) floats = ~7M floats of
 * partials, more than one group's workspace (4M): the rows run in groups. */
static void test_grouped_workspace(void **st) {
    (void)st;
    enum { N = 160 };
    int32_t pos[N], seq[N];
    for (int i = 0; i < N; i++) pos[i] = 1000 + (i * 37) % 200, seq[i] = i % 2;
    att_fix f;
    fix_make(&f, (att_case){4, 1, 8, 16, 0, 0.0f}, 2, 1200, N, pos, seq);
    const size_t all = (size_t)N * 4 * 8;
    float *ref = malloc(all * 4), *o = malloc(all * 4);
    cpu_attention_force_piece(1);
    omp_set_num_threads(4);
    fix_run(&f, 0, N, 1, ref);
    check_reference(&f, 17, ref + 17 * 4 * 8);
    fix_run(&f, 0, N, 3, o);
    assert_memory_equal(ref, o, all * 4);
    fix_run(&f, 0, N, 100000, o);
    assert_memory_equal(ref, o, all * 4);
    cpu_attention_force_piece(0);
    omp_set_num_threads(omp_get_num_procs());
    free(ref), free(o);
    fix_free(&f);
}

/* ==== Engine level: the engine's attention runs with the resolved count ==== */
#define N_PROMPT 29
#define N_GEN 6

typedef struct run_out {
    float logits[N_GEN][97];
    int n;
} run_out;

static void on_logits(void *user, int64_t id, const float *lg, int vocab) {
    (void)id;
    run_out *r = user;
    assert_int_equal(vocab, 97);
    if (r->n < N_GEN) memcpy(r->logits[r->n++], lg, sizeof r->logits[0]);
}

/* One greedy prompt, alone, paged; returns the split count of the last step (a decode row at
 * context N_PROMPT + N_GEN - 1). */
static int run_engine(model *m, const model_spec *spec, run_out *out) {
    memset(out, 0, sizeof *out);
    engine_params p;
    engine_params_default(&p, spec);
    p.ctx_size = 64, p.storage = KV_STORAGE_PAGED, p.block_size = 4;
    engine *e = NULL;
    mx_error err;
    assert_int_equal(engine_new(&e, m, &p, &err), 0);
    int32_t prompt[N_PROMPT];
    for (int k = 0; k < N_PROMPT; k++) prompt[k] = (k * 11 + 3) % 96;
    engine_request r = {.prompt = prompt, .n_prompt = N_PROMPT, .max_tokens = N_GEN,
                        .ignore_eos = true, .on_logits = on_logits, .user = out};
    sampling_params_default(&r.sampling);
    r.sampling.temperature = 0;
    assert_true(engine_submit(e, &r, &err) >= 0);
    assert_int_equal(engine_run(e, &err), 0);
    engine_free(e);
    assert_int_equal(out->n, N_GEN);
    return cpu_attention_last_splits();
}

static int setup(void **st) {
    (void)st;
    return tt_setup("/tmp/mlxcel_cpu_attn_splits_XXXXXX", "warn");
}

static void test_engine_receives_splits(void **st) {
    (void)st;
    tiny_model tm;
    tiny_build(&tm, TINY_LLAMA, 99);
    model *m = NULL;
    mx_error err;
    assert_int_equal(model_bind(&m, &tm.spec, tiny_lookup, &tm, backend_cpu(), &err), 0);
    run_out *base = malloc(sizeof *base), *o = malloc(sizeof *o);
    const int ctx = N_PROMPT + N_GEN - 1, hkv = tm.spec.n_kv_heads;
    /* MLXCEL_AUTOTUNE unset: the built-in count for one decode row */
    const int def = tune_cpu_default_splits(1, hkv, tune_cpu_attn_pieces(ctx), omp_get_max_threads());
    assert_int_equal(run_engine(m, &tm.spec, base), def);
    /* the override */
    set_env("MLXCEL_PAGED_DECODE_SPLITS", "3");
    apply_env();
    assert_int_equal(run_engine(m, &tm.spec, o), 3);
    assert_memory_equal(base->logits, o->logits, sizeof base->logits);
    /* a cached winner for this host's decode bucket (b1.c256.d8.q4.kv2.bs4) */
    set_env("MLXCEL_PAGED_DECODE_SPLITS", NULL);
    tune_device host;
    tune_device_cpu(&host);
    tune_geom g = tune_geom_defaults();
    g.head_dim = tm.spec.head_dim, g.q_heads = tm.spec.n_heads, g.kv_heads = hkv, g.block_size = 4;
    tt_plant(TUNE_OP_PAGED_DECODE_SPLITS, &host, &g, 1, ctx, def + 4, "b1.c256.d8.q4.kv2.bs4");
    set_env("MLXCEL_AUTOTUNE", "cache");
    apply_env();
    assert_int_equal(run_engine(m, &tm.spec, o), def + 4);
    assert_memory_equal(base->logits, o->logits, sizeof base->logits);
    /* the override beats the cache */
    set_env("MLXCEL_PAGED_DECODE_SPLITS", "2");
    apply_env();
    assert_int_equal(run_engine(m, &tm.spec, o), 2);
    /* autotune off: the record is not read */
    set_env("MLXCEL_PAGED_DECODE_SPLITS", NULL);
    set_env("MLXCEL_AUTOTUNE", NULL);
    apply_env();
    assert_int_equal(run_engine(m, &tm.spec, o), def);
    assert_memory_equal(base->logits, o->logits, sizeof base->logits);
    free(base), free(o);
    model_free(m);
    tiny_free(&tm);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_long_rows),
        cmocka_unit_test(test_grouped_workspace),
        cmocka_unit_test_setup_teardown(test_engine_receives_splits, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
