/* Tensor parallelism on the CPU (docs/tensor-parallel.md):
 * - the CPU collective: all_reduce_sum equals the sum taken in rank order 0..N-1 (bit for bit,
 *   on every rank), all_gather_cols tiles the column blocks, a shape disagreement fails on
 *   every rank instead of hanging;
 * - on the golden fixtures (llama, qwen2, qwen3, mistral, gemma3_text: 4 query / 2 KV heads,
 *   so TP 2): TP=1 greedy tokens equal transformers' (expected.json), and TP=2 greedy tokens
 *   equal TP=1 with paged, dense, chunked, batched and prefix-hit runs; logits at the first
 *   generated position within 1e-5 relative of TP=1. Not bit-identical: the row-parallel
 *   o_proj / down_proj sum each rank's partial dot product, then the ranks, which is another
 *   float summation order than one dot product over the whole row;
 * - TP 2 and 4 on in-memory tiny models with 4 KV heads (llama-like and gemma-like: sliding
 *   window, sandwich norms, tied head) and a vocabulary of 97 rows (uneven vocab split);
 * - MoE (qwen3_moe, qwen3_moe_nonorm, mixtral fixtures; a tiny 4-expert model at TP 2 and 4):
 *   each rank holds E/N experts, the router is replicated, the ranks' expert sums all-reduced;
 * - the tiny models with heads of 32 and a q8_0 KV cache (-ctk/-ctv q8_0): TP 2 and 4 give
 *   TP=1's tokens, logits within the same 1e-5 (each rank quantizes whole blocks of its heads);
 * - a group of one rank (MLXCEL_TP_GROUP=1) is bit-identical to the plain model;
 * - refusals: experts or heads not divisible, a device backend without device binding or with
 *   fewer devices than ranks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include <jansson.h>
#include <pthread.h>

#include "backend/collective.h"
#include "base/env.h"
#include "engine/engine.h"
#include "engine_collect.h"
#include "tiny_model.h"

/* ==== Collective ==== */
#define CN 4
#define CLEN 1000

typedef struct cjob {
    mx_collective *c;
    int rank, rc, rc_bad;
    float buf[CLEN];
    float loc[3 * 5];   /* all_gather input [3, w] */
    float out[3 * 17];  /* [3, 17] */
} cjob;

static float cval(int r, int i) { return (float)((r + 1) * 0.1 + i * 1e-3 + 1.0 / (3.0 + r * 7 + i)); }

static void *cthread(void *arg) {
    cjob *j = arg;
    mx_error err;
    for (int i = 0; i < CLEN; i++) j->buf[i] = cval(j->rank, i);
    mx_tensor t = mx_tensor_1d(j->buf, MX_F32, CLEN, MX_DEV_CPU);
    j->rc = j->c->all_reduce_sum(j->c, j->rank, &t, &err);
    /* column blocks of widths 5,5,5,2 of 17 */
    const int w = j->rank < 3 ? 5 : 2, c0 = j->rank * 5;
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < w; k++) j->loc[i * w + k] = (float)(i * 100 + c0 + k);
    mx_tensor in = mx_tensor_2d(j->loc, MX_F32, 3, w, MX_DEV_CPU);
    mx_tensor out = mx_tensor_2d(j->out, MX_F32, 3, 17, MX_DEV_CPU);
    j->rc |= j->c->all_gather_cols(j->c, j->rank, &out, &in, c0, &err);
    /* rank 3 passes a different size: every rank must fail and return */
    mx_tensor bad = mx_tensor_1d(j->buf, MX_F32, j->rank == 3 ? CLEN - 1 : CLEN, MX_DEV_CPU);
    j->rc_bad = j->c->all_reduce_sum(j->c, j->rank, &bad, &err);
    return NULL;
}

static void test_collective_cpu(void **st) {
    (void)st;
    mx_error err;
    mx_collective *c = mx_collective_cpu_new(CN, &err);
    assert_non_null(c);
    cjob *jobs = calloc(CN, sizeof *jobs);
    pthread_t th[CN];
    for (int r = 0; r < CN; r++) {
        jobs[r].c = c;
        jobs[r].rank = r;
        assert_int_equal(pthread_create(&th[r], NULL, cthread, &jobs[r]), 0);
    }
    for (int r = 0; r < CN; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < CN; r++) {
        assert_int_equal(jobs[r].rc, 0);
        assert_int_equal(jobs[r].rc_bad, -1);
        for (int i = 0; i < CLEN; i++) {
            float want = cval(0, i);
            for (int q = 1; q < CN; q++) want += cval(q, i);
            assert_true(jobs[r].buf[i] == want); /* fixed order: bit-identical */
        }
        for (int i = 0; i < 3; i++)
            for (int k = 0; k < 17; k++) assert_true(jobs[r].out[i * 17 + k] == (float)(i * 100 + k));
    }
    free(jobs);
    c->destroy(c);
}

/* ==== Engine runs ==== */
#define MAXC 8
#define MAXT 256

typedef ec_collect run_out;
_Static_assert(MAXC == EC_MAX_SEQ && MAXT == EC_MAX_TOK, "collect sizes");

typedef ec_variant variant;

static const variant k_vars[] = {
    {"paged", KV_STORAGE_PAGED, 512, 16, false, false},
    {"dense", KV_STORAGE_DENSE, 512, 16, false, false},
    {"chunk7", KV_STORAGE_PAGED, 7, 16, false, false},
    {"batched", KV_STORAGE_PAGED, 7, 16, true, false},
    {"prefix-hit", KV_STORAGE_PAGED, 512, 4, false, true},
};
#define NVARS (sizeof k_vars / sizeof k_vars[0])

static void run(model *m, int32_t (*prompts)[MAXT], const int *np, const int *nw, int nc,
                const variant *v, run_out *o) {
    const int32_t *pr[MAXC];
    for (int i = 0; i < nc; i++) pr[i] = prompts[i];
    ec_run(m, pr, np, nw, nc, v, o);
}

static void free_out(run_out *o) {
    for (int i = 0; i < MAXC; i++) free(o->first_logits[i]);
}

/* Every variant of TP=tp against the same variant of base (TP=1); returns mismatches. */
static int compare_tp(const char *name, model *base, model *tp, int tpn, int32_t (*prompts)[MAXT],
                      const int *np, const int *nw, int nc) {
    int bad = 0;
    const int V = model_spec_of(base)->vocab_size;
    for (size_t v = 0; v < NVARS; v++) {
        run_out a, b;
        run(base, prompts, np, nw, nc, &k_vars[v], &a);
        run(tp, prompts, np, nw, nc, &k_vars[v], &b);
        for (int i = 0; i < nc; i++) {
            if (a.n[i] != nw[i] || b.n[i] != a.n[i] || memcmp(a.toks[i], b.toks[i], (size_t)a.n[i] * 4)) {
                fprintf(stderr, "  %s TP=%d [%s] prompt %d: tokens differ from TP=1\n", name, tpn,
                        k_vars[v].label, i);
                bad++;
            }
            if (!a.first_logits[i] || !b.first_logits[i]) {
                bad++;
                continue;
            }
            const double re = ec_rel_err(b.first_logits[i], a.first_logits[i], V);
            if (re > 1e-5) {
                fprintf(stderr, "  %s TP=%d [%s] prompt %d: logits rel err %.3g > 1e-5\n", name, tpn,
                        k_vars[v].label, i, re);
                bad++;
            }
        }
        free_out(&a);
        free_out(&b);
    }
    return bad;
}

/* ==== Golden fixtures ==== */
static const char *k_fixtures[] = {"llama",    "qwen2",     "qwen3",           "mistral",
                                   "gemma3_text", "qwen3_moe", "qwen3_moe_nonorm", "mixtral"};

static void test_tp_fixtures(void **st) {
    (void)st;
    const char *src = getenv("MLXCEL_SOURCE_DIR");
    int bad = 0, n_tp_runs = 0;
    for (size_t f = 0; f < sizeof k_fixtures / sizeof k_fixtures[0]; f++) {
        char dir[1400], path[1500];
        snprintf(dir, sizeof dir, "%s/tests/fixtures/models/%s", src ? src : ".", k_fixtures[f]);
        mx_error err;
        model *m1 = NULL;
        if (model_load_tp(&m1, dir, backend_cpu(), 1, &err)) fail_msg("%s: %s", dir, err.msg);
        assert_int_equal(model_tp_size(m1), 1);
        const model_spec *s = model_spec_of(m1);
        /* prompts and transformers' greedy tokens */
        snprintf(path, sizeof path, "%s/expected.json", dir);
        json_error_t je;
        json_t *doc = json_load_file(path, 0, &je);
        if (!doc) fail_msg("%s: %s", path, je.text);
        json_t *cases = json_object_get(doc, "cases");
        static int32_t prompts[MAXC][MAXT], want[MAXC][MAXT];
        int np[MAXC], nw[MAXC], nc = 0;
        size_t ci;
        json_t *c;
        json_array_foreach(cases, ci, c) {
            if (nc == MAXC) break;
            json_t *pr = json_object_get(c, "prompt_ids"), *g = json_object_get(c, "greedy");
            np[nc] = (int)json_array_size(pr);
            nw[nc] = (int)json_array_size(g);
            assert_true(np[nc] > 0 && np[nc] <= MAXT && nw[nc] > 0 && nw[nc] <= MAXT);
            for (int k = 0; k < np[nc]; k++) prompts[nc][k] = (int32_t)json_integer_value(json_array_get(pr, k));
            for (int k = 0; k < nw[nc]; k++) want[nc][k] = (int32_t)json_integer_value(json_array_get(g, k));
            nc++;
        }
        json_decref(doc);
        assert_true(nc > 0);
        /* TP=1 (the rank code path with no-op collectives) against transformers */
        run_out o;
        run(m1, prompts, np, nw, nc, &k_vars[0], &o);
        for (int i = 0; i < nc; i++)
            if (o.n[i] != nw[i] || memcmp(o.toks[i], want[i], (size_t)nw[i] * 4)) {
                fprintf(stderr, "  %s TP=1 prompt %d: tokens differ from transformers\n", k_fixtures[f], i);
                bad++;
            }
        free_out(&o);
        for (int tp = 2; tp <= 4; tp *= 2) {
            model *mt = NULL;
            const bool fits = s->n_kv_heads % tp == 0 && s->n_heads % tp == 0 &&
                              s->intermediate_size % tp == 0 && s->n_experts % tp == 0;
            const int rc = model_load_tp(&mt, dir, backend_cpu(), tp, &err);
            if (!fits) { /* refused, with the reason */
                assert_int_equal(rc, -1);
                assert_non_null(strstr(err.msg, "divisible"));
                continue;
            }
            if (rc) fail_msg("%s TP=%d: %s", dir, tp, err.msg);
            assert_int_equal(model_tp_size(mt), tp);
            bad += compare_tp(k_fixtures[f], m1, mt, tp, prompts, np, nw, nc);
            n_tp_runs++;
            model_free(mt);
        }
        model_free(m1);
        fprintf(stderr, "tp %-12s %d prompts: %s\n", k_fixtures[f], nc, bad ? "FAIL" : "ok");
    }
    /* every fixture has 2 KV heads: TP=2 must have run on each, never vacuously */
    assert_int_equal(n_tp_runs, (int)(sizeof k_fixtures / sizeof k_fixtures[0]));
    assert_int_equal(bad, 0);
}

/* ==== Tiny models with 4 KV heads: TP 2 and 4 ==== */
/* Rebuilds k/v_proj as [4 * D, H] and sets 4 KV heads (4 query heads: plain MHA). */
static void widen_kv(tiny_model *tm) {
    tm->spec.n_kv_heads = 4;
    for (int l = 0; l < tm->spec.n_layers; l++)
        for (int p = 0; p < 2; p++) {
            char nm[96];
            snprintf(nm, sizeof nm, "model.layers.%d.self_attn.%s_proj.weight", l, p ? "v" : "k");
            for (int i = 0; i < tm->n; i++)
                if (!strcmp(tm->w[i].name, nm)) tm->w[i].name[0] = '#'; /* retired */
            tiny_add(tm, nm, 4 * tm->spec.head_dim, 32, 0, 0.3f, 0);
        }
}

/* A TP group of one rank (MLXCEL_TP_GROUP=1): rank thread, collectives of size 1, separate
 * head slice + all_gather. On the CPU every collective of one rank is an exact copy, so the
 * logits are bit-identical to the plain model's (the NCCL group of one on a GPU is checked the
 * same way by bench/tp_device.sh). */
static void test_tp_group_of_one(void **st) {
    (void)st;
    tiny_model tm;
    tiny_build(&tm, TINY_MOE, 11);
    mx_error err;
    model *m1 = NULL, *g1 = NULL;
    if (model_bind_tp(&m1, &tm.spec, tiny_lookup, &tm, backend_cpu(), 1, &err)) fail_msg("%s", err.msg);
    setenv("MLXCEL_TP_GROUP", "1", 1);
    mx_env_reload();
    const int rc = model_bind_tp(&g1, &tm.spec, tiny_lookup, &tm, backend_cpu(), 1, &err);
    unsetenv("MLXCEL_TP_GROUP");
    mx_env_reload();
    if (rc) fail_msg("%s", err.msg);
    assert_int_equal(model_tp_size(g1), 1);
    static int32_t prompts[2][MAXT];
    int np[2] = {6, 11}, nw[2] = {10, 7};
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < np[i]; k++) prompts[i][k] = (int32_t)((i * 31 + k * 7) % 90 + 1);
    const int V = tm.spec.vocab_size;
    for (size_t v = 0; v < NVARS; v++) {
        run_out a, b;
        run(m1, prompts, np, nw, 2, &k_vars[v], &a);
        run(g1, prompts, np, nw, 2, &k_vars[v], &b);
        for (int i = 0; i < 2; i++) {
            assert_int_equal(a.n[i], nw[i]);
            assert_int_equal(b.n[i], nw[i]);
            assert_memory_equal(a.toks[i], b.toks[i], (size_t)nw[i] * 4);
            assert_non_null(a.first_logits[i]);
            assert_non_null(b.first_logits[i]);
            assert_memory_equal(a.first_logits[i], b.first_logits[i], (size_t)V * 4);
        }
        free_out(&a);
        free_out(&b);
    }
    model_free(g1);
    model_free(m1);
    tiny_free(&tm);
}

/* head_dim 8, or 32 with a KV cache of type ct (q8_0: blocks of 32 along head_dim) */
static void tiny_case_kv(tiny_kind kind, const char *name, int head_dim, kv_type ct) {
    tiny_model tm;
    tiny_build_d(&tm, kind, 77, 97, head_dim);
    widen_kv(&tm);
    ec_cache_k = ec_cache_v = ct;
    mx_error err;
    model *m1 = NULL;
    if (model_bind_tp(&m1, &tm.spec, tiny_lookup, &tm, backend_cpu(), 1, &err)) fail_msg("%s", err.msg);
    static int32_t prompts[3][MAXT];
    int np[3] = {5, 19, 1}, nw[3] = {12, 9, 14};
    uint64_t rng = 5;
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < np[i]; k++) prompts[i][k] = (int32_t)((tiny_rand(&rng) + 1.0f) * 48) % 96;
    int bad = 0;
    for (int tp = 2; tp <= 4; tp *= 2) {
        model *mt = NULL;
        if (model_bind_tp(&mt, &tm.spec, tiny_lookup, &tm, backend_cpu(), tp, &err)) fail_msg("%s", err.msg);
        bad += compare_tp(name, m1, mt, tp, prompts, np, nw, 3);
        model_free(mt);
    }
    ec_cache_k = ec_cache_v = KV_TYPE_DEFAULT;
    model_free(m1);
    tiny_free(&tm);
    assert_int_equal(bad, 0);
}

static void tiny_case(tiny_kind kind, const char *name) { tiny_case_kv(kind, name, 8, KV_TYPE_DEFAULT); }

static void test_tp_tiny_llama(void **st) {
    (void)st;
    tiny_case(TINY_LLAMA, "tiny-llama");
}
static void test_tp_tiny_gemma(void **st) {
    (void)st;
    tiny_case(TINY_GEMMA, "tiny-gemma");
}
/* A q8_0 KV cache: each rank quantizes its own heads' blocks (a block never crosses a head) */
static void test_tp_tiny_llama_q8_0(void **st) {
    (void)st;
    tiny_case_kv(TINY_LLAMA, "tiny-llama-q8_0", 32, KV_TYPE_Q8_0);
}
static void test_tp_tiny_gemma_q8_0(void **st) {
    (void)st;
    tiny_case_kv(TINY_GEMMA, "tiny-gemma-q8_0", 32, KV_TYPE_Q8_0);
}
/* 4 experts: 2 per rank at TP 2, one per rank at TP 4 */
static void test_tp_tiny_moe(void **st) {
    (void)st;
    tiny_case(TINY_MOE, "tiny-moe");
}

/* ==== KV: rank views and copy-on-write ====
 * (The engine runs rarely reach a copy-on-write, so it is driven directly, as test_kv does.) */
static void test_kv_rank_views(void **st) {
    (void)st;
    kv_cache_params p = {.storage = KV_STORAGE_PAGED, .n_layers = 1, .n_kv_heads = 4, .head_dim = 2,
                         .ctx_size = 64, .block_size = 4, .n_blocks = 8, .prefix_cache = true,
                         .tp_size = 2};
    kv_cache *kv = NULL;
    mx_error err;
    assert_int_equal(kv_cache_new(&kv, &p, backend_cpu(), &err), 0);
    /* rank r's pool: [32 rows, 2 heads, 2] at r * 32 * 4 floats of the layer's memory */
    mx_tensor k0 = kv_cache_k_rank(kv, 0, 0), k1 = kv_cache_k_rank(kv, 0, 1);
    assert_int_equal(k1.ndim, 3);
    assert_int_equal(k1.shape[0], 32);
    assert_int_equal(k1.shape[1], 2);
    assert_ptr_equal(k1.data, (float *)kv_cache_k(kv, 0)->data + 32 * 4);
    assert_ptr_equal(k0.data, kv_cache_k(kv, 0)->data);
    int32_t toks[12];
    for (int i = 0; i < 12; i++) toks[i] = 100 + i;
    kv_seq a, b;
    kv_seq_init(&a);
    kv_seq_init(&b);
    assert_int_equal(kv_seq_reserve(kv, &a, 10, &err), 0);
    const int64_t row = kv_seq_row(kv, &a, 5);
    ((float *)k0.data)[row * 4 + 3] = 11.0f;
    ((float *)k1.data)[row * 4 + 3] = 22.0f;
    ((float *)kv_cache_v_rank(kv, 0, 1).data)[row * 4] = 33.0f;
    kv_seq_commit(kv, &a, toks, 10);
    assert_int_equal(kv_seq_match_prefix(kv, &b, toks, 12), 8);
    assert_int_equal(kv_seq_prepare_write(kv, &b, 5, 6), 0); /* shared block 1: copied */
    const int64_t nrow = kv_seq_row(kv, &b, 5);
    assert_true(nrow != row);
    assert_true(((float *)k0.data)[nrow * 4 + 3] == 11.0f);
    assert_true(((float *)k1.data)[nrow * 4 + 3] == 22.0f);
    assert_true(((float *)kv_cache_v_rank(kv, 0, 1).data)[nrow * 4] == 33.0f);
    kv_seq_release(kv, &a);
    kv_seq_release(kv, &b);
    kv_cache_free(kv);
    /* KV heads that do not divide */
    p.tp_size = 3;
    assert_int_equal(kv_cache_new(&kv, &p, backend_cpu(), &err), -1);
}

/* ==== Refusals ==== */
static int fake_bind(int ordinal, mx_error *err) {
    (void)ordinal;
    (void)err;
    return 0;
}
static int one_device(void) { return 1; }

static void test_tp_refusals(void **st) {
    (void)st;
    mx_error err;
    model *m = NULL;
    tiny_model tm;
    tiny_build(&tm, TINY_MOE, 3);
    widen_kv(&tm);
    tm.spec.n_heads = tm.spec.n_kv_heads = 2; /* 2 heads of 16: divisible by 2, experts 3 not */
    tm.spec.head_dim = 16;
    tm.spec.n_experts = 3;
    assert_int_equal(model_bind_tp(&m, &tm.spec, tiny_lookup, &tm, backend_cpu(), 2, &err), -1);
    assert_non_null(strstr(err.msg, "3 MoE experts, not divisible"));
    tiny_free(&tm);
    tiny_build(&tm, TINY_LLAMA, 3);
    assert_int_equal(model_bind_tp(&m, &tm.spec, tiny_lookup, &tm, backend_cpu(), 4, &err), -1);
    assert_non_null(strstr(err.msg, "divisible")); /* 2 KV heads */
    assert_int_equal(model_bind_tp(&m, &tm.spec, tiny_lookup, &tm, backend_cpu(), 0, &err), -1);
    /* a device backend that cannot bind threads to devices (the CPU table relabelled), and
     * one with fewer devices than ranks: refused before any op runs */
    backend_ops cuda_like = *backend_cpu();
    cuda_like.device = MX_DEV_CUDA;
    assert_int_equal(model_bind_tp(&m, &tm.spec, tiny_lookup, &tm, &cuda_like, 2, &err), -1);
    assert_non_null(strstr(err.msg, "drives one device only"));
    cuda_like.bind_device = fake_bind;
    cuda_like.device_count = one_device;
    assert_int_equal(model_bind_tp(&m, &tm.spec, tiny_lookup, &tm, &cuda_like, 2, &err), -1);
    assert_non_null(strstr(err.msg, "one GPU per rank, and 1 GPU is visible"));
    /* a KV cache laid out for another TP degree */
    assert_int_equal(model_bind_tp(&m, &tm.spec, tiny_lookup, &tm, backend_cpu(), 2, &err), 0);
    kv_cache_params kp = {.storage = KV_STORAGE_DENSE, .n_layers = 2, .n_kv_heads = 2, .head_dim = 8,
                          .ctx_size = 16, .n_seqs = 1, .tp_size = 1};
    kv_cache *kv = NULL;
    assert_int_equal(kv_cache_new(&kv, &kp, backend_cpu(), &err), 0);
    const int32_t tok = 1, pos = 0, seq = 0, blk = 0, out = 0;
    const int64_t row = 0;
    model_batch b = {.n_rows = 1, .tokens = &tok, .pos = &pos, .seq = &seq, .block_table = &blk,
                     .table_stride = 1, .n_seqs = 1, .write_rows = &row, .n_out = 1, .out_rows = &out};
    float lg[97];
    assert_int_equal(model_forward(m, kv, &b, lg, &err), -1);
    assert_non_null(strstr(err.msg, "tensor-parallel"));
    kv_cache_free(kv);
    model_free(m);
    tiny_free(&tm);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_collective_cpu),
        cmocka_unit_test(test_kv_rank_views),
        cmocka_unit_test(test_tp_refusals),
        cmocka_unit_test(test_tp_tiny_llama),
        cmocka_unit_test(test_tp_tiny_gemma),
        cmocka_unit_test(test_tp_tiny_moe),
        cmocka_unit_test(test_tp_tiny_llama_q8_0),
        cmocka_unit_test(test_tp_tiny_gemma_q8_0),
        cmocka_unit_test(test_tp_group_of_one),
        cmocka_unit_test(test_tp_fixtures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
