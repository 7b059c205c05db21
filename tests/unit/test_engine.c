/* Engine + decoder on tiny in-memory models (llama-like, gemma3-like, MoE):
 * - logits against a naive double-precision full-recompute reference (tiny_model.h),
 *   through every matmul kernel family this CPU supports (scalar, AVX2, AVX-512);
 * - greedy tokens against the reference's argmax;
 * - identical tokens for paged vs dense storage, prefill chunk sizes 1 / 7 / 64, a batch of
 *   prompts vs each alone, a prefix-cache hit vs a cold run, and under KV preemption. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/cpu/cpu_internal.h"
#include "engine/engine.h"
#include "tiny_model.h"

#define MAX_GEN 12
#define N_PROMPTS 3

typedef struct run_out {
    int32_t toks[N_PROMPTS][64];
    int n[N_PROMPTS];
    engine_finish why[N_PROMPTS];
    int n_cached[N_PROMPTS];
    int64_t ids[N_PROMPTS];
} run_out;

static int on_token(void *user, int64_t id, int32_t tok, float lp) {
    (void)lp;
    run_out *o = user;
    for (int i = 0; i < N_PROMPTS; i++)
        if (o->ids[i] == id && o->n[i] < 64) o->toks[i][o->n[i]++] = tok;
    return 0;
}

static void on_finish(void *user, int64_t id, engine_finish why, const engine_seq_stats *st) {
    run_out *o = user;
    for (int i = 0; i < N_PROMPTS; i++)
        if (o->ids[i] == id) {
            o->why[i] = why;
            o->n_cached[i] = st->n_cached;
        }
}

static void make_prompt(int which, int32_t *p, int *n) {
    /* prompts 0 and 2 share their first 17 tokens (prefix-cache material) */
    static const int lens[N_PROMPTS] = {21, 9, 30};
    *n = lens[which];
    for (int i = 0; i < *n; i++) {
        int src = (which == 2 && i < 17) ? 0 : which;
        p[i] = (int32_t)((src * 31 + i * 7 + 3) % 90);
    }
}

typedef struct run_cfg {
    kv_storage storage;
    int chunk, n_parallel, block, n_blocks;
    bool prefix;
    int mask;           /* which prompts to run (bit i) */
    bool sequential;    /* run prompts one after another on the same engine */
    float temp;         /* 0 = greedy */
    uint64_t seed;
    int budget;         /* token rows per step; 0 = default */
} run_cfg;

static uint64_t run(const tiny_model *tm, model *m, run_cfg c, run_out *o) {
    memset(o, 0, sizeof *o);
    for (int i = 0; i < N_PROMPTS; i++) o->ids[i] = -1;
    engine_params p;
    engine_params_default(&p, &tm->spec);
    p.ctx_size = 64;
    p.storage = c.storage;
    p.prefill_chunk = c.chunk;
    p.n_parallel = c.n_parallel;
    p.block_size = c.block;
    p.n_kv_blocks = c.n_blocks;
    p.prefix_cache = c.prefix;
    if (c.budget) p.max_batch_tokens = c.budget;
    p.prefill_grant_interval = 2;
    engine *e = NULL;
    mx_error err;
    assert_int_equal(engine_new(&e, m, &p, &err), 0);
    for (int i = 0; i < N_PROMPTS; i++) {
        if (!(c.mask & (1 << i))) continue;
        int32_t prompt[64];
        int n;
        make_prompt(i, prompt, &n);
        engine_request r = {.prompt = prompt, .n_prompt = n, .max_tokens = MAX_GEN,
                            .ignore_eos = true, .on_token = on_token, .on_finish = on_finish, .user = o};
        sampling_params_default(&r.sampling);
        r.sampling.temperature = c.temp;
        r.sampling.top_k = c.temp > 0 ? 40 : 0;
        r.sampling.seed = c.seed;
        o->ids[i] = engine_submit(e, &r, &err);
        assert_true(o->ids[i] >= 0);
        if (c.sequential) assert_int_equal(engine_run(e, &err), 0);
    }
    assert_int_equal(engine_run(e, &err), 0);
    engine_stats st;
    engine_get_stats(e, &st);
    engine_free(e);
    return st.preemptions;
}

static void assert_same(const run_out *a, const run_out *b, int i) {
    assert_int_equal(a->n[i], MAX_GEN);
    assert_int_equal(b->n[i], MAX_GEN);
    assert_memory_equal(a->toks[i], b->toks[i], MAX_GEN * sizeof(int32_t));
}

/* ==== Parity with the naive reference ==== */
static void check_parity(tiny_kind kind) {
    tiny_model tm;
    tiny_build(&tm, kind, 1234 + kind);
    model *m = NULL;
    mx_error err;
    assert_int_equal(model_bind(&m, &tm.spec, tiny_lookup, &tm, backend_cpu(), &err), 0);
    const int V = tm.spec.vocab_size;
    for (int isa = CPU_ISA_SCALAR; isa <= CPU_ISA_AVX512; isa++) {
        if (cpu_matmul_force_isa((cpu_isa)isa)) continue; /* not on this CPU */
        run_out o;
        run_cfg c = {KV_STORAGE_DENSE, 512, 1, 16, 0, true, 1, false, 0, 0, 0};
        run(&tm, m, c, &o);
        /* greedy tokens: the reference's argmax at every step, and logits at the first */
        int32_t seq[64];
        int n;
        make_prompt(0, seq, &n);
        for (int t = 0; t < MAX_GEN; t++) {
            double ref[128], best = -1e300;
            int arg = 0;
            tiny_ref_logits(&tm, seq, n, ref);
            for (int v = 0; v < V; v++)
                if (ref[v] > best) best = ref[v], arg = v;
            assert_int_equal(o.toks[0][t], arg);
            seq[n++] = o.toks[0][t];
        }
        /* logits of the engine's forward at the first generated position */
        kv_cache *kv = NULL;
        kv_cache_params kp = {.storage = KV_STORAGE_DENSE, .n_layers = tm.spec.n_layers,
                              .n_kv_heads = tm.spec.n_kv_heads, .head_dim = tm.spec.head_dim,
                              .ctx_size = 64, .n_seqs = 1};
        assert_int_equal(kv_cache_new(&kv, &kp, backend_cpu(), &err), 0);
        make_prompt(0, seq, &n);
        int32_t pos[64], sid[64], table[1] = {0}, out_row = n - 1;
        int64_t wr[64];
        for (int i = 0; i < n; i++) pos[i] = i, sid[i] = 0, wr[i] = i;
        model_batch b = {.n_rows = n, .tokens = seq, .pos = pos, .seq = sid, .block_table = table,
                         .table_stride = 1, .n_seqs = 1, .write_rows = wr, .n_out = 1, .out_rows = &out_row};
        float lg[128];
        assert_int_equal(model_forward(m, kv, &b, lg, &err), 0);
        double ref[128], num = 0, den = 0;
        tiny_ref_logits(&tm, seq, n, ref);
        for (int v = 0; v < V; v++) {
            num += (lg[v] - ref[v]) * (lg[v] - ref[v]);
            den += ref[v] * ref[v];
        }
        const double rel = sqrt(num / den);
        if (rel > 1e-5)
            fprintf(stderr, "kind %d %s: logits rel err %.3g\n", kind, cpu_isa_name((cpu_isa)isa), rel);
        assert_true(rel < 1e-5);
        kv_cache_free(kv);
    }
    cpu_matmul_force_isa(CPU_ISA_AUTO);
    model_free(m);
    tiny_free(&tm);
}

static void test_parity_llama(void **st) { (void)st; check_parity(TINY_LLAMA); }
static void test_parity_gemma(void **st) { (void)st; check_parity(TINY_GEMMA); }
static void test_parity_moe(void **st) { (void)st; check_parity(TINY_MOE); }

/* ==== Consistency across storage, chunking, batching, prefix reuse, preemption ==== */
static void check_consistency(tiny_kind kind) {
    tiny_model tm;
    tiny_build(&tm, kind, 99 + kind);
    model *m = NULL;
    mx_error err;
    assert_int_equal(model_bind(&m, &tm.spec, tiny_lookup, &tm, backend_cpu(), &err), 0);
    /* every row's value is independent of batch composition (default kernels, nothing
     * forced): exact token equality */
    run_out base[N_PROMPTS], o;
    for (int i = 0; i < N_PROMPTS; i++) {
        run_cfg c = {KV_STORAGE_DENSE, 512, 1, 16, 0, false, 1 << i, false, 0, 0, 0};
        run(&tm, m, c, &base[i]);
        assert_int_equal(base[i].why[i], ENGINE_FINISH_LENGTH);
    }
    for (int i = 0; i < N_PROMPTS; i++) {
        run_cfg paged = {KV_STORAGE_PAGED, 512, 1, 4, 0, false, 1 << i, false, 0, 0, 0};
        run(&tm, m, paged, &o);
        assert_same(&base[i], &o, i);
        const int chunks[] = {1, 7, 64};
        for (int k = 0; k < 3; k++) {
            run_cfg c = {KV_STORAGE_PAGED, chunks[k], 1, 4, 0, false, 1 << i, false, 0, 0, 0};
            run(&tm, m, c, &o);
            assert_same(&base[i], &o, i);
            c.storage = KV_STORAGE_DENSE;
            run(&tm, m, c, &o);
            assert_same(&base[i], &o, i);
        }
    }
    /* all prompts batched together (mixed prefill chunks and decode rows) */
    for (int st = 0; st < 2; st++) {
        run_cfg c = {st ? KV_STORAGE_PAGED : KV_STORAGE_DENSE, 7, N_PROMPTS, 4, 0, false, 7, false, 0, 0, 0};
        run(&tm, m, c, &o);
        for (int i = 0; i < N_PROMPTS; i++) assert_same(&base[i], &o, i);
    }
    /* prefix cache: prompt 0 then prompt 2 (shares 17 tokens = 4 full blocks of 4) */
    {
        run_cfg c = {KV_STORAGE_PAGED, 512, 1, 4, 0, true, 1 | 4, true, 0, 0, 0};
        run(&tm, m, c, &o);
        assert_int_equal(o.n_cached[0], 0);
        assert_int_equal(o.n_cached[2], 16);
        assert_same(&base[0], &o, 0);
        assert_same(&base[2], &o, 2);
    }
    /* preemption: a pool too small for three sequences at once */
    {
        run_cfg c = {KV_STORAGE_PAGED, 7, N_PROMPTS, 4, 14, true, 7, false, 0, 0, 0};
        const uint64_t pre = run(&tm, m, c, &o);
        assert_true(pre > 0);
        for (int i = 0; i < N_PROMPTS; i++) assert_same(&base[i], &o, i);
    }
    /* a step budget smaller than the decode rows: prompts advance only through prefill grants */
    {
        run_cfg c = {KV_STORAGE_PAGED, 7, N_PROMPTS, 4, 0, true, 7, false, 0, 0, 2};
        run(&tm, m, c, &o);
        for (int i = 0; i < N_PROMPTS; i++) assert_same(&base[i], &o, i);
    }
    model_free(m);
    tiny_free(&tm);
}

static void test_consistency_llama(void **st) { (void)st; check_consistency(TINY_LLAMA); }
static void test_consistency_gemma(void **st) { (void)st; check_consistency(TINY_GEMMA); }
static void test_consistency_moe(void **st) { (void)st; check_consistency(TINY_MOE); }

/* ==== Finish reasons and bad input ==== */
static void test_finish_and_errors(void **st) {
    (void)st;
    tiny_model tm;
    tiny_build(&tm, TINY_LLAMA, 5);
    model *m = NULL;
    mx_error err;
    assert_int_equal(model_bind(&m, &tm.spec, tiny_lookup, &tm, backend_cpu(), &err), 0);
    engine_params p;
    engine_params_default(&p, &tm.spec);
    p.ctx_size = 24;
    engine *e = NULL;
    assert_int_equal(engine_new(&e, m, &p, &err), 0);
    run_out o;
    memset(&o, 0, sizeof o);
    int32_t prompt[64];
    int n;
    make_prompt(0, prompt, &n); /* 21 tokens: 3 positions left */
    engine_request r = {.prompt = prompt, .n_prompt = n, .ignore_eos = true, .on_token = on_token,
                        .on_finish = on_finish, .user = &o};
    sampling_params_default(&r.sampling);
    r.sampling.temperature = 0;
    o.ids[0] = engine_submit(e, &r, &err);
    assert_int_equal(engine_run(e, &err), 0);
    assert_int_equal(o.why[0], ENGINE_FINISH_CONTEXT);
    assert_int_equal(o.n[0], 3);
    /* prompt longer than the context: clear error */
    make_prompt(2, prompt, &n);
    r.n_prompt = 30;
    assert_true(engine_submit(e, &r, &err) < 0);
    assert_non_null(strstr(err.msg, "does not fit the context"));
    /* out-of-vocabulary id */
    prompt[0] = 5000;
    r.n_prompt = 3;
    assert_true(engine_submit(e, &r, &err) < 0);
    assert_non_null(strstr(err.msg, "outside the vocabulary"));
    /* cancel while queued */
    prompt[0] = 1;
    memset(&o, 0, sizeof o);
    o.ids[0] = engine_submit(e, &r, &err);
    engine_cancel(e, o.ids[0]);
    assert_int_equal(engine_run(e, &err), 0);
    assert_int_equal(o.why[0], ENGINE_FINISH_CANCELLED);
    engine_free(e);
    /* EOS: make the eos id the greedy choice by declaring the first sampled token EOS */
    run_out first;
    run_cfg c = {KV_STORAGE_DENSE, 512, 1, 16, 0, false, 1, false, 0, 0, 0};
    run(&tm, m, c, &first);
    model_free(m);
    tm.spec.eos_ids[0] = first.toks[0][2];
    assert_int_equal(model_bind(&m, &tm.spec, tiny_lookup, &tm, backend_cpu(), &err), 0);
    assert_int_equal(engine_new(&e, m, &p, &err), 0);
    memset(&o, 0, sizeof o);
    make_prompt(0, prompt, &n);
    r.n_prompt = n;
    r.ignore_eos = false;
    r.max_tokens = 10;
    p.ctx_size = 64;
    engine_free(e);
    assert_int_equal(engine_new(&e, m, &p, &err), 0);
    o.ids[0] = engine_submit(e, &r, &err);
    assert_int_equal(engine_run(e, &err), 0);
    assert_int_equal(o.why[0], ENGINE_FINISH_EOS);
    assert_int_equal(o.n[0], 3);
    engine_free(e);
    model_free(m);
    tiny_free(&tm);
}

/* ==== Cancel while running ==== */
typedef struct cancel_ctx { engine *e; int n; engine_finish why; } cancel_ctx;
static int cancel_tok(void *u, int64_t id, int32_t t, float lp) {
    (void)t; (void)lp;
    cancel_ctx *c = u;
    if (++c->n == 3) engine_cancel(c->e, id);
    return 0;
}
static void cancel_fin(void *u, int64_t id, engine_finish why, const engine_seq_stats *st) {
    (void)id; (void)st;
    ((cancel_ctx *)u)->why = why;
}

static void test_cancel_running(void **st) {
    (void)st;
    tiny_model tm;
    tiny_build(&tm, TINY_LLAMA, 12);
    model *m = NULL;
    mx_error err;
    assert_int_equal(model_bind(&m, &tm.spec, tiny_lookup, &tm, backend_cpu(), &err), 0);
    engine_params p;
    engine_params_default(&p, &tm.spec);
    p.ctx_size = 64;
    engine *e = NULL;
    assert_int_equal(engine_new(&e, m, &p, &err), 0);
    cancel_ctx c = {.e = e};
    int32_t prompt[64];
    int n;
    make_prompt(1, prompt, &n);
    engine_request r = {.prompt = prompt, .n_prompt = n, .ignore_eos = true, .on_token = cancel_tok,
                        .on_finish = cancel_fin, .user = &c};
    sampling_params_default(&r.sampling);
    assert_true(engine_submit(e, &r, &err) >= 0);
    assert_int_equal(engine_run(e, &err), 0);
    assert_int_equal(c.why, ENGINE_FINISH_CANCELLED);
    assert_int_equal(c.n, 3);
    kv_cache_stats ks;
    kv_cache_get_stats(engine_kv(e), &ks);
    assert_int_equal(ks.n_used, 0); /* its blocks went back to the pool */
    engine_free(e);
    model_free(m);
    tiny_free(&tm);
}

/* ==== Seeded sampling ==== */
static void test_seeded_sampling(void **st) {
    (void)st;
    tiny_model tm;
    tiny_build(&tm, TINY_LLAMA, 11);
    model *m = NULL;
    mx_error err;
    assert_int_equal(model_bind(&m, &tm.spec, tiny_lookup, &tm, backend_cpu(), &err), 0);
    run_out a, b, c, batched;
    run_cfg cfg = {KV_STORAGE_PAGED, 512, 1, 4, 0, false, 1, false, 1.5f, 42, 0};
    run(&tm, m, cfg, &a);
    run(&tm, m, cfg, &b);
    assert_same(&a, &b, 0); /* same seed, same output */
    cfg.seed = 43;
    run(&tm, m, cfg, &c);
    assert_int_equal(c.n[0], MAX_GEN);
    assert_true(memcmp(a.toks[0], c.toks[0], MAX_GEN * sizeof(int32_t)) != 0);
    /* each sequence owns its sampler: batching does not change a seeded run */
    cfg.seed = 42;
    cfg.mask = 7;
    cfg.n_parallel = 3;
    cfg.chunk = 7;
    run(&tm, m, cfg, &batched);
    assert_same(&a, &batched, 0);
    model_free(m);
    tiny_free(&tm);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parity_llama),      cmocka_unit_test(test_parity_gemma),
        cmocka_unit_test(test_parity_moe),        cmocka_unit_test(test_consistency_llama),
        cmocka_unit_test(test_consistency_gemma), cmocka_unit_test(test_consistency_moe),
        cmocka_unit_test(test_finish_and_errors), cmocka_unit_test(test_seeded_sampling),
        cmocka_unit_test(test_cancel_running),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
