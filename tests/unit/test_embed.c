/* Embedding requests of the engine (ENGINE_REQ_EMBED), checked against references no one here
 * wrote and against the engine's own invariants:
 * - head identity: for every golden fixture (tests/fixtures/models, made with transformers) the
 *   un-normalized last-pooled embedding e of each prompt, times the lm_head (the embedding
 *   table when tied), is the logits row transformers computed at that position (the golden
 *   tolerance, 1e-4 relative) and the engine's own logits to fp32 rounding. So e is the final
 *   norm's output: the state an embedding model pools.
 * - mean / cls / none pooling of a prompt equal, bit for bit, the mean (in double, ascending) /
 *   the first / each of the last-pooled embeddings of its prefixes computed one at a time;
 * - a batch of inputs (mixed with generations) equals each alone; prefill chunks 1, 7, 512,
 *   dense and paged KV, a preemption, and a prefix-cache hit (last pooling) all give the same
 *   bits; mean pooling never attaches cached blocks; a generation after an embedding of its
 *   prompt reuses that embedding's blocks and gets the cold logits;
 * - errors: empty input, input longer than the context (one that fills it is fine), unknown
 *   pooling, cancel; a checkpoint without lm_head embeds and refuses generation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "model/model_internal.h"
#include "tiny_model.h"

static const char *k_fixtures[] = {"llama", "llama_linear", "llama_dynamic", "llama_yarn", "llama_llama3",
                                   "mistral", "qwen2", "qwen3", "gemma3_text", "mixtral", "qwen3_moe",
                                   "llama4_text", "llama4_text_top2", "deepseek_v3", "deepseek_v3_noqlora"};

/* ==== Requests and their results ==== */
typedef struct ereq {
    const int32_t *prompt;
    int n;
    bool embed;
    engine_pooling pool;
    int max_tokens;      /* generation */
    int64_t id;
    float *v;            /* [n_vec, dim] the embedding */
    int n_vec, dim;
    float *logits;       /* generation: the first sampled position's logits */
    int32_t toks[16];
    int n_toks;
    engine_finish why;
    int n_cached;
} ereq;

typedef struct eset {
    ereq *rq;
    int n;
} eset;

static ereq *find(eset *s, int64_t id) {
    for (int i = 0; i < s->n; i++)
        if (s->rq[i].id == id) return &s->rq[i];
    fail_msg("unknown sequence %lld", (long long)id);
    return NULL;
}

static void on_embed(void *u, int64_t id, const float *v, int n_vec, int dim) {
    ereq *r = find(u, id);
    assert_null(r->v); /* once */
    r->v = malloc((size_t)n_vec * (size_t)dim * sizeof(float));
    memcpy(r->v, v, (size_t)n_vec * (size_t)dim * sizeof(float));
    r->n_vec = n_vec;
    r->dim = dim;
}

static int on_token(void *u, int64_t id, int32_t t, float lp) {
    (void)lp;
    ereq *r = find(u, id);
    if (r->n_toks < 16) r->toks[r->n_toks++] = t;
    return 0;
}

static void on_logits(void *u, int64_t id, const float *lg, int vocab) {
    ereq *r = find(u, id);
    if (r->logits) return;
    r->logits = malloc((size_t)vocab * sizeof(float));
    memcpy(r->logits, lg, (size_t)vocab * sizeof(float));
}

static void on_finish(void *u, int64_t id, engine_finish why, const engine_seq_stats *st) {
    ereq *r = find(u, id);
    r->why = why;
    r->n_cached = st->n_cached;
}

static void ereq_clear(ereq *r) {
    free(r->v);
    free(r->logits);
    r->v = r->logits = NULL;
    r->n_toks = 0;
    r->id = -1;
}

/* Submits rq[0..n) to e (all before running when together, else each run to the end). */
static void run_on(engine *e, ereq *rq, int n, bool together) {
    eset set = {rq, n};
    mx_error err;
    for (int i = 0; i < n; i++) rq[i].id = -1;
    for (int i = 0; i < n; i++) {
        ereq *q = &rq[i];
        engine_request r = {.kind = q->embed ? ENGINE_REQ_EMBED : ENGINE_REQ_GENERATE, .pooling = q->pool,
                            .on_embed = on_embed, .prompt = q->prompt, .n_prompt = q->n,
                            .max_tokens = q->max_tokens, .ignore_eos = true, .on_token = on_token,
                            .on_finish = on_finish, .on_logits = on_logits, .user = &set};
        sampling_params_default(&r.sampling);
        r.sampling.temperature = 0.0f;
        q->id = engine_submit(e, &r, &err);
        if (q->id < 0) fail_msg("submit %d: %s", i, err.msg);
        if (!together && engine_run(e, &err)) fail_msg("engine_run: %s", err.msg);
    }
    if (engine_run(e, &err)) fail_msg("engine_run: %s", err.msg);
}

static engine *new_engine(model *m, kv_storage st, int chunk, int n_parallel, int ctx, bool prefix) {
    engine_params p;
    engine_params_default(&p, model_spec_of(m));
    p.storage = st;
    p.prefill_chunk = chunk;
    p.n_parallel = n_parallel;
    p.ctx_size = ctx;
    p.prefix_cache = prefix;
    engine *e = NULL;
    mx_error err;
    if (engine_new(&e, m, &p, &err)) fail_msg("engine_new: %s", err.msg);
    return e;
}

/* One engine run of rq (paged, chunk 512, ctx 160, no prefix cache). */
static void run_simple(model *m, ereq *rq, int n, bool together) {
    engine *e = new_engine(m, KV_STORAGE_PAGED, 512, together ? n : 1, 160, false);
    run_on(e, rq, n, together);
    engine_free(e);
}

static void expect_same(const ereq *a, const ereq *b, const char *what) {
    if (!a->v || !b->v) fail_msg("%s: no embedding (finish %s / %s)", what, engine_finish_detail(a->why),
                                 engine_finish_detail(b->why));
    assert_int_equal(a->n_vec, b->n_vec);
    assert_int_equal(a->dim, b->dim);
    if (memcmp(a->v, b->v, (size_t)a->n_vec * (size_t)a->dim * sizeof(float))) {
        double worst = 0;
        for (int i = 0; i < a->n_vec * a->dim; i++) worst = fmax(worst, fabs((double)a->v[i] - b->v[i]));
        fail_msg("%s: embeddings differ (max |diff| %.3g)", what, worst);
    }
}

static char *fixture_dir(const char *name) {
    const char *src = getenv("MLXCEL_SOURCE_DIR");
    char *p = malloc(2048);
    snprintf(p, 2048, "%s/tests/fixtures/models/%s", src ? src : ".", name);
    return p;
}

static model *load(const char *name) {
    char *dir = fixture_dir(name);
    model *m = NULL;
    mx_error err;
    if (model_load(&m, dir, backend_cpu(), &err)) fail_msg("%s: %s", dir, err.msg);
    free(dir);
    return m;
}

/* ==== Head identity against transformers' logits ==== */
typedef struct gcase {
    int32_t prompt[256];
    int n;
    float *ref; /* [vocab] transformers' logits after the prompt */
} gcase;

static int load_cases(const char *name, gcase *cs, int vocab) {
    char *dir = fixture_dir(name), path[2200];
    snprintf(path, sizeof path, "%s/expected.json", dir);
    free(dir);
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    if (!doc) fail_msg("%s: %s", path, je.text);
    json_t *cases = json_object_get(doc, "cases");
    int n = 0;
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        if (n == 8) break;
        json_t *pr = json_object_get(c, "prompt_ids"), *lg = json_object_get(c, "logits");
        assert_true(json_array_size(pr) <= 256 && (int)json_array_size(lg) == vocab);
        gcase *g = &cs[n++];
        g->n = (int)json_array_size(pr);
        for (int k = 0; k < g->n; k++) g->prompt[k] = (int32_t)json_integer_value(json_array_get(pr, k));
        g->ref = malloc((size_t)vocab * sizeof(float));
        for (int k = 0; k < vocab; k++) g->ref[k] = (float)json_number_value(json_array_get(lg, k));
    }
    json_decref(doc);
    return n;
}

/* out[V] = softcap(W e) in double from the head's stored values (bf16 / f16 / f32). */
static void head_times(const model *m, const float *e, float *out) {
    const mx_tensor *w = &m->lm_head.w;
    const int V = m->spec.vocab_size, H = m->spec.hidden_size;
    assert_false(model_weight_quantized(&m->lm_head));
    for (int v = 0; v < V; v++) {
        double acc = 0;
        for (int k = 0; k < H; k++) {
            const size_t at = (size_t)v * H + (size_t)k;
            const float x = w->dtype == MX_BF16 ? mx_bf16_to_f32(((const uint16_t *)w->data)[at])
                            : w->dtype == MX_F16 ? mx_f16_to_f32(((const uint16_t *)w->data)[at])
                                                 : ((const float *)w->data)[at];
            acc += (double)x * e[k];
        }
        const double cap = m->spec.final_softcap;
        out[v] = (float)(cap > 0 ? cap * tanh(acc / cap) : acc);
    }
}

static double rel_err(const float *a, const float *ref, int n) {
    double num = 0, den = 0;
    for (int k = 0; k < n; k++) {
        num += ((double)a[k] - ref[k]) * ((double)a[k] - ref[k]);
        den += (double)ref[k] * ref[k];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

static void test_head_identity(void **state) {
    (void)state;
    double worst_ref = 0, worst_own = 0;
    for (size_t f = 0; f < sizeof k_fixtures / sizeof k_fixtures[0]; f++) {
        model *m = load(k_fixtures[f]);
        const int V = m->spec.vocab_size;
        gcase cs[8];
        const int n = load_cases(k_fixtures[f], cs, V);
        assert_true(n >= 2);
        float *lg = malloc((size_t)V * sizeof(float));
        for (int i = 0; i < n; i++) {
            ereq rq[2] = {{.prompt = cs[i].prompt, .n = cs[i].n, .embed = true, .pool = ENGINE_POOL_LAST},
                          {.prompt = cs[i].prompt, .n = cs[i].n, .max_tokens = 1}};
            run_simple(m, rq, 2, false);
            assert_int_equal(rq[0].why, ENGINE_FINISH_EMBEDDED);
            assert_int_equal(rq[0].n_vec, 1);
            assert_int_equal(rq[0].dim, m->spec.hidden_size);
            head_times(m, rq[0].v, lg);
            const double er = rel_err(lg, cs[i].ref, V), eo = rel_err(lg, rq[1].logits, V);
            if (er > 1e-4 || eo > 1e-5)
                fail_msg("%s prompt %d: embedding x lm_head vs transformers' logits %.3g (max 1e-4), vs the "
                         "engine's %.3g (max 1e-5)", k_fixtures[f], i, er, eo);
            worst_ref = fmax(worst_ref, er);
            worst_own = fmax(worst_own, eo);
            ereq_clear(&rq[0]);
            ereq_clear(&rq[1]);
            free(cs[i].ref);
        }
        free(lg);
        model_free(m);
    }
    printf("  head identity over %zu fixtures: rel err vs transformers <= %.3g, vs the engine <= %.3g\n",
           sizeof k_fixtures / sizeof k_fixtures[0], worst_ref, worst_own);
}

/* ==== Pooling against prefixes ==== */
/* The last-pooled embedding of every prefix of p (one sequence each, one at a time). */
static float *prefix_states(model *m, const int32_t *p, int n) {
    const int H = model_spec_of(m)->hidden_size;
    float *h = malloc((size_t)n * (size_t)H * sizeof(float));
    for (int k = 1; k <= n; k++) {
        ereq rq = {.prompt = p, .n = k, .embed = true, .pool = ENGINE_POOL_LAST};
        run_simple(m, &rq, 1, false);
        memcpy(h + (size_t)(k - 1) * H, rq.v, (size_t)H * sizeof(float));
        ereq_clear(&rq);
    }
    return h;
}

static void check_pooling_on(model *m, const int32_t *p, int n, const char *name) {
    const int H = model_spec_of(m)->hidden_size;
    float *h = prefix_states(m, p, n);
    ereq rq[4] = {{.prompt = p, .n = n, .embed = true, .pool = ENGINE_POOL_MEAN},
                  {.prompt = p, .n = n, .embed = true, .pool = ENGINE_POOL_CLS},
                  {.prompt = p, .n = n, .embed = true, .pool = ENGINE_POOL_NONE},
                  {.prompt = p, .n = n, .embed = true, .pool = ENGINE_POOL_LAST}};
    run_simple(m, rq, 4, true);
    float *mean = malloc((size_t)H * sizeof(float));
    for (int i = 0; i < H; i++) {
        double s = 0;
        for (int k = 0; k < n; k++) s += (double)h[(size_t)k * H + i];
        mean[i] = (float)(s / n);
    }
    ereq want[4] = {{.v = mean, .n_vec = 1, .dim = H}, {.v = h, .n_vec = 1, .dim = H},
                    {.v = h, .n_vec = n, .dim = H}, {.v = h + (size_t)(n - 1) * H, .n_vec = 1, .dim = H}};
    static const char *what[] = {"mean", "cls", "none", "last"};
    for (int i = 0; i < 4; i++) {
        char msg[96];
        snprintf(msg, sizeof msg, "%s: %s pooling vs its prefixes", name, what[i]);
        expect_same(&rq[i], &want[i], msg);
        ereq_clear(&rq[i]);
    }
    free(mean);
    free(h);
}

static void test_pooling_vs_prefixes(void **state) {
    (void)state;
    static const char *names[] = {"qwen3", "gemma3_text", "qwen3_moe"};
    for (int f = 0; f < 3; f++) {
        model *m = load(names[f]);
        gcase cs[8];
        const int n = load_cases(names[f], cs, m->spec.vocab_size);
        check_pooling_on(m, cs[1].prompt, cs[1].n, names[f]);
        for (int i = 0; i < n; i++) free(cs[i].ref);
        model_free(m);
    }
}

/* ==== Batch, chunks, storage, preemption, prefix cache ==== */
static void make_prompt(int32_t *p, int n, int vocab, uint64_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (int32_t)((seed >> 33) % (uint64_t)vocab);
    }
}

static void test_batch_chunks_storage(void **state) {
    (void)state;
    model *m = load("qwen3");
    const int V = m->spec.vocab_size;
    static const int lens[] = {1, 5, 17, 40, 64};
    int32_t pr[5][64];
    for (int i = 0; i < 5; i++) make_prompt(pr[i], lens[i], V, 11 + (uint64_t)i);
    /* 5 prompts x 4 poolings, then 2 generations */
    ereq alone[22], mixed[22];
    int n = 0;
    for (int i = 0; i < 5; i++)
        for (int k = 0; k < 4; k++)
            alone[n++] = (ereq){.prompt = pr[i], .n = lens[i], .embed = true, .pool = (engine_pooling)k};
    alone[n++] = (ereq){.prompt = pr[3], .n = lens[3], .max_tokens = 6};
    alone[n++] = (ereq){.prompt = pr[2], .n = lens[2], .max_tokens = 6};
    memcpy(mixed, alone, sizeof alone);
    run_simple(m, alone, n, false);
    static const struct { const char *label; kv_storage st; int chunk, np; } vs[] = {
        {"batched chunk 7 paged", KV_STORAGE_PAGED, 7, 22}, {"batched chunk 1 dense", KV_STORAGE_DENSE, 1, 22},
        {"batched chunk 512 dense", KV_STORAGE_DENSE, 512, 6}, {"batched chunk 3 paged", KV_STORAGE_PAGED, 3, 4}};
    for (size_t v = 0; v < sizeof vs / sizeof vs[0]; v++) {
        engine *e = new_engine(m, vs[v].st, vs[v].chunk, vs[v].np, 160, false);
        run_on(e, mixed, n, true);
        engine_free(e);
        for (int i = 0; i < n; i++) {
            char msg[96];
            snprintf(msg, sizeof msg, "%s, request %d", vs[v].label, i);
            if (mixed[i].embed) {
                expect_same(&mixed[i], &alone[i], msg);
            } else {
                assert_int_equal(mixed[i].n_toks, 6);
                if (memcmp(mixed[i].toks, alone[i].toks, 6 * sizeof(int32_t))) fail_msg("%s: tokens differ", msg);
            }
            ereq_clear(&mixed[i]);
        }
    }
    for (int i = 0; i < n; i++) ereq_clear(&alone[i]);
    model_free(m);
}

static void test_preemption(void **state) {
    (void)state;
    model *m = load("qwen3");
    int32_t pr[6][100];
    ereq alone[6], tight[6];
    for (int i = 0; i < 6; i++) {
        make_prompt(pr[i], 100, m->spec.vocab_size, 100 + (uint64_t)i);
        alone[i] = (ereq){.prompt = pr[i], .n = 100, .embed = true,
                          .pool = i % 2 ? ENGINE_POOL_MEAN : ENGINE_POOL_NONE};
    }
    memcpy(tight, alone, sizeof alone);
    run_simple(m, alone, 6, false);
    /* 6 sequences of 100 tokens (7 blocks each) in a pool of 16 blocks, chunks of 8 */
    engine_params p;
    engine_params_default(&p, model_spec_of(m));
    p.storage = KV_STORAGE_PAGED;
    p.prefill_chunk = 8;
    p.n_parallel = 6;
    p.ctx_size = 128;
    p.n_kv_blocks = 16;
    p.prefix_cache = false;
    engine *e = NULL;
    mx_error err;
    if (engine_new(&e, m, &p, &err)) fail_msg("engine_new: %s", err.msg);
    run_on(e, tight, 6, true);
    engine_stats st;
    engine_get_stats(e, &st);
    engine_free(e);
    if (st.preemptions == 0) fail_msg("the tight pool preempted nothing: the test does not test preemption");
    for (int i = 0; i < 6; i++) {
        expect_same(&tight[i], &alone[i], "after preemption");
        ereq_clear(&tight[i]);
        ereq_clear(&alone[i]);
    }
    printf("  preemption: %llu preemptions, every embedding unchanged\n", (unsigned long long)st.preemptions);
    model_free(m);
}

static void test_prefix_cache(void **state) {
    (void)state;
    model *m = load("qwen3");
    int32_t pr[50];
    make_prompt(pr, 50, m->spec.vocab_size, 7);
    engine *e = new_engine(m, KV_STORAGE_PAGED, 512, 2, 160, true);
    ereq cold[3] = {{.prompt = pr, .n = 50, .embed = true, .pool = ENGINE_POOL_LAST},
                    {.prompt = pr, .n = 50, .embed = true, .pool = ENGINE_POOL_MEAN},
                    {.prompt = pr, .n = 50, .max_tokens = 1}};
    run_simple(m, cold, 3, false); /* no cache */
    /* an embedding fills the cache; a last-pooled one reuses it, a mean-pooled one never */
    ereq rq[4] = {{.prompt = pr, .n = 50, .embed = true, .pool = ENGINE_POOL_MEAN},
                  {.prompt = pr, .n = 50, .embed = true, .pool = ENGINE_POOL_LAST},
                  {.prompt = pr, .n = 50, .embed = true, .pool = ENGINE_POOL_MEAN},
                  {.prompt = pr, .n = 50, .max_tokens = 1}};
    run_on(e, rq, 4, false);
    engine_free(e);
    assert_int_equal(rq[0].n_cached, 0);
    assert_int_equal(rq[1].n_cached, 48); /* 3 blocks of 16; the last position is computed */
    assert_int_equal(rq[2].n_cached, 0);
    assert_int_equal(rq[3].n_cached, 48);
    expect_same(&rq[1], &cold[0], "last pooling on a prefix-cache hit");
    expect_same(&rq[0], &cold[1], "mean pooling");
    expect_same(&rq[2], &cold[1], "mean pooling after the cache filled");
    if (memcmp(rq[3].logits, cold[2].logits, (size_t)m->spec.vocab_size * sizeof(float)))
        fail_msg("a generation on blocks an embedding cached got other logits than a cold one");
    for (int i = 0; i < 4; i++) ereq_clear(&rq[i]);
    for (int i = 0; i < 3; i++) ereq_clear(&cold[i]);
    model_free(m);
}

/* ==== Errors, cancel, a checkpoint without lm_head ==== */
static void test_errors_and_cancel(void **state) {
    (void)state;
    model *m = load("qwen3");
    int32_t pr[40];
    make_prompt(pr, 40, m->spec.vocab_size, 3);
    engine *e = new_engine(m, KV_STORAGE_PAGED, 8, 2, 32, true);
    ereq rq[2] = {{.prompt = pr, .n = 32, .embed = true, .pool = ENGINE_POOL_MEAN}, {0}};
    eset set = {rq, 2};
    mx_error err;
    engine_request r = {.kind = ENGINE_REQ_EMBED, .pooling = ENGINE_POOL_LAST, .on_embed = on_embed,
                        .prompt = pr, .n_prompt = 33, .on_finish = on_finish, .user = &set};
    assert_true(engine_submit(e, &r, &err) < 0); /* longer than the context */
    assert_non_null(strstr(err.msg, "context of 32 tokens"));
    r.n_prompt = 0;
    assert_true(engine_submit(e, &r, &err) < 0);
    r.n_prompt = 4;
    r.pooling = (engine_pooling)9;
    assert_true(engine_submit(e, &r, &err) < 0);
    r.pooling = ENGINE_POOL_LAST;
    r.on_embed = NULL;
    assert_true(engine_submit(e, &r, &err) < 0);
    engine_request g = {.prompt = pr, .n_prompt = 32, .max_tokens = 1, .on_finish = on_finish, .user = &set};
    sampling_params_default(&g.sampling);
    assert_true(engine_submit(e, &g, &err) < 0); /* a generation needs one free position */
    /* an input that fills the context embeds; one cancelled mid-prefill ends without a vector */
    run_on(e, rq, 1, false);
    assert_int_equal(rq[0].why, ENGINE_FINISH_EMBEDDED);
    assert_non_null(rq[0].v);
    rq[1] = (ereq){.prompt = pr, .n = 30, .embed = true, .pool = ENGINE_POOL_LAST};
    r = (engine_request){.kind = ENGINE_REQ_EMBED, .pooling = ENGINE_POOL_LAST, .on_embed = on_embed,
                         .prompt = pr, .n_prompt = 30, .on_finish = on_finish, .user = &set};
    rq[1].id = engine_submit(e, &r, &err);
    assert_true(rq[1].id >= 0);
    assert_int_equal(engine_step(e, &err), 1); /* one chunk of 8 */
    engine_cancel(e, rq[1].id);
    assert_int_equal(engine_run(e, &err), 0);
    assert_int_equal(rq[1].why, ENGINE_FINISH_CANCELLED);
    assert_null(rq[1].v);
    assert_int_equal(kv_cache_available(engine_kv(e)), kv_cache_params_of(engine_kv(e))->n_blocks);
    engine_free(e);
    ereq_clear(&rq[0]);
    model_free(m);
}

static mx_tensor headless_lookup(void *ctx, const char *name) {
    mx_tensor none = {0};
    return strcmp(name, "lm_head.weight") ? tiny_lookup(ctx, name) : none;
}

static void test_headless(void **state) {
    (void)state;
    tiny_model tm;
    tiny_build(&tm, TINY_LLAMA, 5); /* untied: lm_head.weight exists */
    model *full = NULL, *bare = NULL;
    mx_error err;
    if (model_bind(&full, &tm.spec, tiny_lookup, &tm, backend_cpu(), &err) ||
        model_bind(&bare, &tm.spec, headless_lookup, &tm, backend_cpu(), &err))
        fail_msg("bind: %s", err.msg);
    assert_true(model_has_lm_head(full));
    assert_false(model_has_lm_head(bare));
    const int32_t pr[] = {3, 9, 27, 81, 4};
    ereq a = {.prompt = pr, .n = 5, .embed = true, .pool = ENGINE_POOL_MEAN}, b = a;
    run_simple(full, &a, 1, false);
    run_simple(bare, &b, 1, false);
    expect_same(&a, &b, "a head-less checkpoint's embedding");
    engine *e = new_engine(bare, KV_STORAGE_PAGED, 512, 1, 64, false);
    engine_request g = {.prompt = pr, .n_prompt = 5, .max_tokens = 1};
    sampling_params_default(&g.sampling);
    assert_true(engine_submit(e, &g, &err) < 0);
    assert_non_null(strstr(err.msg, "lm_head"));
    engine_free(e);
    ereq_clear(&a);
    ereq_clear(&b);
    model_free(full);
    model_free(bare);
    tiny_free(&tm);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_head_identity),        cmocka_unit_test(test_pooling_vs_prefixes),
        cmocka_unit_test(test_batch_chunks_storage), cmocka_unit_test(test_preemption),
        cmocka_unit_test(test_prefix_cache),         cmocka_unit_test(test_errors_and_cancel),
        cmocka_unit_test(test_headless),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
