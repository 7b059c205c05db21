/* Engine paths that test_engine.c does not reach, on tiny in-memory models (tiny_model.h):
 * - preemption under seeded sampling: three sequences (temperature 1.2, top-k 40, a seed
 *   each) in a pool too small for them all give the tokens each gives alone with the same
 *   seed, and their samplers draw nothing while preempted;
 * - cancelling a sequence while it waits preempted: it finishes `cancelled` after having been
 *   preempted, the others finish as alone, and the pool ends empty;
 * - a sequence whose KV cannot fit even alone (the pool smaller than one sequence): it finishes
 *   `error`, a sequence beside it finishes with its own tokens, and the engine keeps serving;
 * - two running sequences sharing prefix blocks and diverging: the second attaches the first's
 *   full blocks while the first still decodes, fewer blocks are in use than without sharing,
 *   and both give their cold tokens (the shared blocks are never written: the engine always
 *   computes at least the last prompt token in a block of its own, so copy-on-write is reached
 *   through kv_seq_prepare_write only; test_kv covers it, the MLA single pool included);
 * - penalties over the whole history through the engine (an echoing fixture must stop
 *   echoing under a presence penalty);
 * - a block filled exactly by a sequence's last forwarded token is indexed for the next. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "engine/engine.h"
#include "tiny_model.h"

#define N_SEQ 3
#define MAX_GEN 16

typedef struct out {
    int64_t ids[N_SEQ];
    int32_t toks[N_SEQ][64];
    int n[N_SEQ];
    engine_finish why[N_SEQ];
    engine_seq_stats st[N_SEQ];
    engine *e;
    int64_t cancel_id;     /* cancel this one once it waits preempted (-1: none) */
    bool cancelled_queued; /* the cancel was issued while it was queued after a preemption */
} out;

static int slot(const out *o, int64_t id) {
    for (int i = 0; i < N_SEQ; i++)
        if (o->ids[i] == id) return i;
    return -1;
}

static int on_tok(void *u, int64_t id, int32_t t, float lp) {
    (void)lp;
    out *o = u;
    const int i = slot(o, id);
    if (i >= 0 && o->n[i] < 64) o->toks[i][o->n[i]++] = t;
    if (o->cancel_id >= 0 && !o->cancelled_queued) {
        engine_stats s;
        engine_get_stats(o->e, &s);
        /* all sequences are admitted at once (n_parallel 3): a queued one was preempted */
        if (s.preemptions > 0 && s.queued > 0) {
            engine_cancel(o->e, o->cancel_id);
            o->cancelled_queued = true;
        }
    }
    return 0;
}

static void on_fin(void *u, int64_t id, engine_finish why, const engine_seq_stats *st) {
    out *o = u;
    const int i = slot(o, id);
    if (i >= 0) o->why[i] = why, o->st[i] = *st;
}

static void prompt_of(int which, int32_t *p, int *n) {
    static const int lens[N_SEQ] = {22, 13, 27};
    *n = lens[which];
    for (int k = 0; k < *n; k++) p[k] = (int32_t)((which * 37 + k * 11 + 5) % 90 + 3);
}

typedef struct cfg {
    int n_blocks, block, chunk, mask, max_gen[N_SEQ];
    float temp;
    bool prefix;
    int64_t cancel_which; /* index of the sequence to cancel while preempted (-1: none) */
} cfg;

/* Runs the masked sequences together; returns the engine's preemption count. */
static uint64_t run(model *m, const model_spec *s, const cfg *c, out *o) {
    memset(o, 0, sizeof *o);
    for (int i = 0; i < N_SEQ; i++) o->ids[i] = -1;
    o->cancel_id = -1;
    engine_params p;
    engine_params_default(&p, s);
    p.ctx_size = 64;
    p.storage = KV_STORAGE_PAGED;
    p.block_size = c->block;
    p.n_kv_blocks = c->n_blocks;
    p.prefill_chunk = c->chunk;
    p.n_parallel = N_SEQ;
    p.prefix_cache = c->prefix;
    mx_error err;
    assert_int_equal(engine_new(&o->e, m, &p, &err), 0);
    for (int i = 0; i < N_SEQ; i++) {
        if (!(c->mask & (1 << i))) continue;
        int32_t pr[64];
        int n;
        prompt_of(i, pr, &n);
        engine_request r = {.prompt = pr, .n_prompt = n, .max_tokens = c->max_gen[i],
                            .ignore_eos = true, .on_token = on_tok, .on_finish = on_fin, .user = o};
        sampling_params_default(&r.sampling);
        r.sampling.temperature = c->temp;
        r.sampling.top_k = 40;
        r.sampling.seed = 1000 + 77 * (uint64_t)i; /* a seed of its own */
        o->ids[i] = engine_submit(o->e, &r, &err);
        assert_true(o->ids[i] >= 0);
    }
    if (c->cancel_which >= 0) o->cancel_id = o->ids[c->cancel_which];
    assert_int_equal(engine_run(o->e, &err), 0);
    engine_stats st;
    engine_get_stats(o->e, &st);
    kv_cache_stats ks;
    kv_cache_get_stats(engine_kv(o->e), &ks);
    assert_int_equal(ks.n_used, 0); /* every sequence gave its blocks back */
    engine_free(o->e);
    o->e = NULL;
    return st.preemptions;
}

static void expect_same(const out *a, int ia, const out *b, int ib, int n_gen) {
    assert_int_equal(a->n[ia], n_gen);
    assert_int_equal(b->n[ib], n_gen);
    assert_memory_equal(a->toks[ia], b->toks[ib], (size_t)n_gen * sizeof(int32_t));
}

typedef struct fixture {
    tiny_model tm;
    model *m;
} fixture;

static int setup(void **st) {
    fixture *f = calloc(1, sizeof *f);
    tiny_build(&f->tm, TINY_LLAMA, 4242);
    mx_error err;
    if (model_bind(&f->m, &f->tm.spec, tiny_lookup, &f->tm, backend_cpu(), &err)) return -1;
    *st = f;
    return 0;
}

static int teardown(void **st) {
    fixture *f = *st;
    model_free(f->m);
    tiny_free(&f->tm);
    free(f);
    return 0;
}

/* ==== Preemption under seeded sampling ==== */
static void test_preempt_seeded(void **st) {
    fixture *f = *st;
    out alone[N_SEQ], both;
    for (int i = 0; i < N_SEQ; i++) {
        const cfg c = {64, 4, 7, 1 << i, {MAX_GEN, MAX_GEN, MAX_GEN}, 1.2f, true, -1};
        assert_int_equal(run(f->m, &f->tm.spec, &c, &alone[i]), 0);
        assert_int_equal(alone[i].why[i], ENGINE_FINISH_LENGTH);
    }
    /* 14 blocks of 4 = 56 rows for three sequences of up to 27 + 16 tokens */
    const cfg c = {14, 4, 7, 7, {MAX_GEN, MAX_GEN, MAX_GEN}, 1.2f, true, -1};
    const uint64_t pre = run(f->m, &f->tm.spec, &c, &both);
    assert_true(pre > 0);
    int preempted = 0;
    for (int i = 0; i < N_SEQ; i++) {
        expect_same(&alone[i], i, &both, i, MAX_GEN);
        preempted += both.st[i].n_preempted > 0;
    }
    assert_true(preempted > 0);
    /* the youngest is preempted first (DESIGN.md): the oldest never is */
    assert_int_equal(both.st[0].n_preempted, 0);
    assert_true(both.st[2].n_preempted > 0);
    /* the samples are not all equal to greedy (the seeds matter) */
    const cfg g = {64, 4, 7, 1, {MAX_GEN, MAX_GEN, MAX_GEN}, 0.0f, true, -1};
    out greedy;
    run(f->m, &f->tm.spec, &g, &greedy);
    assert_true(memcmp(greedy.toks[0], alone[0].toks[0], MAX_GEN * 4) != 0);
}

/* ==== Cancel while preempted ==== */
static void test_cancel_preempted(void **st) {
    fixture *f = *st;
    out alone[N_SEQ], o;
    for (int i = 0; i < 2; i++) {
        const cfg c = {64, 4, 7, 1 << i, {24, 24, 24}, 1.2f, true, -1};
        run(f->m, &f->tm.spec, &c, &alone[i]);
    }
    const cfg c = {14, 4, 7, 7, {24, 24, 24}, 1.2f, true, 2};
    assert_true(run(f->m, &f->tm.spec, &c, &o) > 0);
    assert_true(o.cancelled_queued);
    assert_int_equal(o.why[2], ENGINE_FINISH_CANCELLED);
    assert_true(o.st[2].n_preempted >= 1);
    assert_true(o.n[2] < 24);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(o.why[i], ENGINE_FINISH_LENGTH);
        expect_same(&alone[i], i, &o, i, 24);
    }
}

/* ==== A pool smaller than one sequence ==== */
static void test_pool_too_small(void **st) {
    fixture *f = *st;
    out o;
    /* 5 blocks of 4 = 20 rows: sequence 2's prompt alone (27 tokens) cannot fit */
    const cfg c = {5, 4, 7, 4, {8, 8, 8}, 0.0f, false, -1};
    run(f->m, &f->tm.spec, &c, &o);
    assert_int_equal(o.why[2], ENGINE_FINISH_ERROR);
    assert_int_equal(o.n[2], 0);
    /* one that fits its prompt but not its generation: 13 + 9 tokens need 21 rows (the last
     * token is sampled, never forwarded): error after its 8th token */
    const cfg c1 = {5, 4, 7, 2, {9, 9, 9}, 0.0f, false, -1};
    run(f->m, &f->tm.spec, &c1, &o);
    assert_int_equal(o.why[1], ENGINE_FINISH_ERROR);
    assert_int_equal(o.n[1], 8);
    /* beside a sequence that fits: that one finishes with its own tokens, the other errs */
    out alone0, mix;
    const cfg a0 = {64, 4, 7, 1, {2, 8, 8}, 0.0f, false, -1};
    run(f->m, &f->tm.spec, &a0, &alone0);
    const cfg m2 = {6, 4, 7, 1 | 4, {2, 8, 8}, 0.0f, false, -1}; /* 0: 22 + 2 = 24 rows: fits */
    run(f->m, &f->tm.spec, &m2, &mix);
    assert_int_equal(mix.why[0], ENGINE_FINISH_LENGTH);
    expect_same(&alone0, 0, &mix, 0, 2);
    assert_int_equal(mix.why[2], ENGINE_FINISH_ERROR);
    /* the same engine serves the next request: an error is per sequence */
    engine_params p;
    engine_params_default(&p, &f->tm.spec);
    p.ctx_size = 64, p.storage = KV_STORAGE_PAGED, p.block_size = 4, p.n_kv_blocks = 5;
    engine *e = NULL;
    mx_error err;
    assert_int_equal(engine_new(&e, f->m, &p, &err), 0);
    memset(&o, 0, sizeof o);
    for (int i = 0; i < N_SEQ; i++) o.ids[i] = -1;
    o.cancel_id = -1;
    int32_t pr[64];
    int n;
    prompt_of(2, pr, &n);
    engine_request r = {.prompt = pr, .n_prompt = n, .max_tokens = 8, .ignore_eos = true,
                        .on_token = on_tok, .on_finish = on_fin, .user = &o};
    sampling_params_default(&r.sampling);
    o.ids[2] = engine_submit(e, &r, &err);
    assert_int_equal(engine_run(e, &err), 0);
    assert_int_equal(o.why[2], ENGINE_FINISH_ERROR);
    prompt_of(1, pr, &n);
    r.n_prompt = 13, r.max_tokens = 8; /* 13 + 7 forwarded = 20 rows: fits exactly */
    o.ids[1] = engine_submit(e, &r, &err);
    assert_int_equal(engine_run(e, &err), 0);
    assert_int_equal(o.why[1], ENGINE_FINISH_LENGTH);
    assert_int_equal(o.n[1], 8);
    engine_free(e);
}

/* ==== Shared prefix blocks, diverging sequences ==== */
typedef struct share_ctx {
    out *o;
    engine *e;
    const int32_t *p2;
    int n2, max2;
    int used_at_share, used_total_peak;
} share_ctx;

static void share_fin(void *u, int64_t id, engine_finish why, const engine_seq_stats *st);

static int share_tok(void *u, int64_t id, int32_t t, float lp) {
    share_ctx *c = u;
    on_tok(c->o, id, t, lp);
    kv_cache_stats ks;
    kv_cache_get_stats(engine_kv(c->e), &ks);
    if (ks.n_used > c->used_total_peak) c->used_total_peak = ks.n_used;
    /* after the first sequence's 2nd token: its prompt blocks are full and indexed */
    if (c->o->ids[1] < 0 && c->o->n[0] == 2) {
        engine_request r = {.prompt = c->p2, .n_prompt = c->n2, .max_tokens = c->max2,
                            .ignore_eos = true, .on_token = share_tok, .on_finish = share_fin,
                            .user = c};
        sampling_params_default(&r.sampling);
        mx_error err;
        c->o->ids[1] = engine_submit(c->e, &r, &err);
    }
    return 0;
}

static void share_fin(void *u, int64_t id, engine_finish why, const engine_seq_stats *st) {
    on_fin(((share_ctx *)u)->o, id, why, st);
}

static void test_shared_prefix_diverging(void **st) {
    fixture *f = *st;
    int32_t p1[32], p2[32];
    for (int k = 0; k < 18; k++) p1[k] = p2[k] = (int32_t)((k * 13 + 7) % 90 + 3);
    for (int k = 16; k < 18; k++) p2[k] = (int32_t)(p1[k] % 50 + 40); /* diverge in block 4 */
    /* cold runs, each alone on its own engine */
    out cold[2];
    const int32_t *ps[2] = {p1, p2};
    for (int w = 0; w < 2; w++) {
        engine_params p;
        engine_params_default(&p, &f->tm.spec);
        p.ctx_size = 64, p.storage = KV_STORAGE_PAGED, p.block_size = 4, p.n_parallel = 2;
        engine *e = NULL;
        mx_error err;
        assert_int_equal(engine_new(&e, f->m, &p, &err), 0);
        memset(&cold[w], 0, sizeof cold[w]);
        for (int i = 0; i < N_SEQ; i++) cold[w].ids[i] = -1;
        cold[w].cancel_id = -1;
        engine_request r = {.prompt = ps[w], .n_prompt = 18, .max_tokens = 12, .ignore_eos = true,
                            .on_token = on_tok, .on_finish = on_fin, .user = &cold[w]};
        sampling_params_default(&r.sampling);
        cold[w].ids[0] = engine_submit(e, &r, &err);
        assert_int_equal(engine_run(e, &err), 0);
        engine_free(e);
    }
    /* together: the second joins while the first decodes */
    engine_params p;
    engine_params_default(&p, &f->tm.spec);
    p.ctx_size = 64, p.storage = KV_STORAGE_PAGED, p.block_size = 4, p.n_parallel = 2;
    out o;
    memset(&o, 0, sizeof o);
    for (int i = 0; i < N_SEQ; i++) o.ids[i] = -1;
    o.cancel_id = -1;
    share_ctx sc = {.o = &o, .p2 = p2, .n2 = 18, .max2 = 12};
    mx_error err;
    assert_int_equal(engine_new(&sc.e, f->m, &p, &err), 0);
    engine_request r = {.prompt = p1, .n_prompt = 18, .max_tokens = 12, .ignore_eos = true,
                        .on_token = share_tok, .on_finish = share_fin, .user = &sc};
    sampling_params_default(&r.sampling);
    o.ids[0] = engine_submit(sc.e, &r, &err);
    assert_int_equal(engine_run(sc.e, &err), 0);
    assert_true(o.ids[1] >= 0);
    assert_int_equal(o.st[1].n_cached, 16); /* four full blocks of the first, attached */
    for (int w = 0; w < 2; w++) expect_same(&cold[w], 0, &o, w, 12);
    /* 30 tokens each = 8 blocks each alone; sharing 4 of them, never more than 12 in use */
    assert_true(sc.used_total_peak <= 12);
    assert_true(sc.used_total_peak >= 9);
    engine_free(sc.e);
}

/* ==== A block filled exactly by the last forwarded token is indexed ====
 * A prompt of two full blocks and one generated token: the sequence's K/V end exactly at a
 * block boundary (the sampled token is never forwarded), and both blocks must be reusable by
 * the next request, as a chat turn reuses the previous one. */
static void test_prefix_block_boundary(void **st) {
    fixture *f = *st;
    engine_params p;
    engine_params_default(&p, &f->tm.spec);
    p.ctx_size = 64, p.storage = KV_STORAGE_PAGED, p.block_size = 4;
    engine *e = NULL;
    mx_error err;
    assert_int_equal(engine_new(&e, f->m, &p, &err), 0);
    int32_t pr[12];
    for (int k = 0; k < 12; k++) pr[k] = (int32_t)((k * 29 + 11) % 90 + 3);
    for (int len = 8; len <= 12; len += 4) {
        out o;
        memset(&o, 0, sizeof o);
        for (int i = 0; i < N_SEQ; i++) o.ids[i] = -1;
        o.cancel_id = -1;
        engine_request r = {.prompt = pr, .n_prompt = len, .max_tokens = 1, .ignore_eos = true,
                            .on_token = on_tok, .on_finish = on_fin, .user = &o};
        sampling_params_default(&r.sampling);
        o.ids[0] = engine_submit(e, &r, &err);
        assert_int_equal(engine_run(e, &err), 0);
        assert_int_equal(o.n[0], 1);
        /* first: cold; then the 8 tokens the first computed, two blocks, come from the cache */
        assert_int_equal(o.st[0].n_cached, len == 8 ? 0 : 8);
    }
    engine_free(e);
}

/* ==== Penalties see the whole history through the engine ====
 * The qwen2 golden fixture echoes: its greedy pick is the last token again (tied embeddings;
 * tests/fixtures/echo_known.txt). With a presence penalty of 100 over the whole history
 * (prompt and generated), greedy must never pick a token it has seen: if the engine handed
 * the sampler a history one token short, the echo of the newest token would come through. */
static void test_penalties_history(void **st) {
    (void)st;
    const char *src = getenv("MLXCEL_SOURCE_DIR");
    if (!src) fail_msg("MLXCEL_SOURCE_DIR unset: run through ctest");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/models/qwen2", src);
    model *m = NULL;
    mx_error err;
    if (model_load(&m, dir, backend_cpu(), &err)) fail_msg("%s: %s", dir, err.msg);
    for (int pen = 0; pen < 2; pen++) {
        engine_params p;
        engine_params_default(&p, model_spec_of(m));
        p.ctx_size = 64;
        engine *e = NULL;
        assert_int_equal(engine_new(&e, m, &p, &err), 0);
        out o;
        memset(&o, 0, sizeof o);
        for (int i = 0; i < N_SEQ; i++) o.ids[i] = -1;
        o.cancel_id = -1;
        const int32_t prompt[6] = {17, 301, 5, 88, 402, 249};
        engine_request r = {.prompt = prompt, .n_prompt = 6, .max_tokens = 20, .ignore_eos = true,
                            .on_token = on_tok, .on_finish = on_fin, .user = &o};
        sampling_params_default(&r.sampling);
        r.sampling.repeat_last_n = -1;
        r.sampling.presence_penalty = pen ? 100.0f : 0.0f;
        o.ids[0] = engine_submit(e, &r, &err);
        assert_int_equal(engine_run(e, &err), 0);
        engine_free(e);
        assert_int_equal(o.n[0], 20);
        if (!pen) { /* the fixture echoes: the premise of the check */
            assert_int_equal(o.toks[0][0], 249);
            assert_int_equal(o.toks[0][1], 249);
            continue;
        }
        for (int k = 0; k < 20; k++) {
            for (int j = 0; j < 6; j++)
                if (o.toks[0][k] == prompt[j]) fail_msg("token %d repeats prompt token %d", k, j);
            for (int j = 0; j < k; j++)
                if (o.toks[0][k] == o.toks[0][j]) fail_msg("token %d repeats token %d (%d)", k, j, o.toks[0][k]);
        }
    }
    model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_preempt_seeded),
        cmocka_unit_test(test_cancel_preempted),
        cmocka_unit_test(test_pool_too_small),
        cmocka_unit_test(test_shared_prefix_diverging),
        cmocka_unit_test(test_penalties_history),
        cmocka_unit_test(test_prefix_block_boundary),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
