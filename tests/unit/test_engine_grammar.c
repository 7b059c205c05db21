/* Constrained decoding in the engine, on a tiny random-weight model with a made-up vocabulary
 * of single characters and pairs: outputs of greedy and of every sampling option (top-k/p,
 * min-p, penalties, logit bias) are sentences of their grammar and end with EOS; rows of
 * different grammars (and unconstrained ones) in one batch give each the tokens it gets alone;
 * preemption and recomputation change nothing; ignore_eos still ends at the grammar's end; a
 * grammar the vocabulary cannot write ends in an error; on_logits sees the raw row; a lazy
 * grammar starts at its trigger's first occurrence (across tokens too) and changes nothing
 * before it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "engine/engine.h"
#include "grammar/json_schema.h"
#include "tiny_model.h"

#define V 97
#define MAXG 64

/* ==== Vocabulary: letters, digits, JSON punctuation, pairs; the last id is EOS ==== */
static char g_tok[V][4];
static const char *g_ptr[V];
static uint32_t g_len[V];
static uint8_t g_flags[V];

static grammar_vocab *make_vocab(void) {
    static const char punct[] = "{}\":, []-.\n";
    static const char *pairs[] = {"ab", "cd", "\"a", "{\"", "\":", ", ", "12", "34", "xy", "yz", "\"x", "\"y",
                                  "z\"", "}\n", "  ", "0.", "-1", "\"}", ":1", "ba"};
    int n = 0;
    for (int c = 'a'; c <= 'z'; c++) g_tok[n][0] = (char)c, n++;
    for (int c = '0'; c <= '9'; c++) g_tok[n][0] = (char)c, n++;
    for (const char *p = punct; *p; p++) g_tok[n][0] = *p, n++;
    for (size_t k = 0; k < sizeof pairs / sizeof *pairs && n < V - 1; k++) strcpy(g_tok[n++], pairs[k]);
    for (; n < V - 1; n++) g_tok[n][0] = 0; /* holes: no bytes, never allowed */
    g_flags[V - 1] = GRAMMAR_TOKEN_SPECIAL;
    for (int i = 0; i < V; i++) g_ptr[i] = g_tok[i], g_len[i] = (uint32_t)strlen(g_tok[i]);
    const int32_t eos = V - 1;
    grammar_vocab *v = NULL;
    mx_error e;
    assert_int_equal(grammar_vocab_new(&v, V, g_ptr, g_len, g_flags, &eos, 1, &e), 0);
    return v;
}

/* ==== Runs ==== */
typedef struct out {
    int64_t id;
    int32_t toks[MAXG + 1];
    int n;
    engine_finish why;
    int raw_rows, raw_inf; /* on_logits rows seen, and -inf values in them */
} out;

static int on_token(void *u, int64_t id, int32_t t, float lp) {
    (void)id, (void)lp;
    out *o = u;
    if (o->n <= MAXG) o->toks[o->n++] = t;
    return 0;
}
static void on_finish(void *u, int64_t id, engine_finish why, const engine_seq_stats *st) {
    (void)id, (void)st;
    ((out *)u)->why = why;
}
static void on_logits(void *u, int64_t id, const float *l, int vocab) {
    (void)id;
    out *o = u;
    o->raw_rows++;
    for (int i = 0; i < vocab; i++) o->raw_inf += isinf(l[i]) && l[i] < 0;
}

typedef struct job {
    grammar *g;          /* NULL: unconstrained */
    float temp;
    uint64_t seed;
    bool fancy;          /* top-k/p, min-p, penalties, logit bias */
    bool ignore_eos;
    bool logits_cb;
    int prompt;          /* which prompt */
} job;

static engine *new_engine(model *m, const tiny_model *tm, int n_parallel, int n_blocks) {
    engine_params p;
    engine_params_default(&p, &tm->spec);
    p.ctx_size = 128;
    p.n_parallel = n_parallel;
    p.storage = KV_STORAGE_PAGED;
    p.block_size = 4;
    p.n_kv_blocks = n_blocks;
    p.prefill_chunk = 7;
    engine *e = NULL;
    mx_error err;
    assert_int_equal(engine_new(&e, m, &p, &err), 0);
    return e;
}

static void submit(engine *e, grammar_vocab *v, const job *j, out *o) {
    memset(o, 0, sizeof *o);
    int32_t prompt[24];
    for (int i = 0; i < 24; i++) prompt[i] = (int32_t)((j->prompt * 13 + i * 5 + 1) % 90);
    static const mx_logit_bias bias[] = {{26, 2.0f}, {36, -1.5f}, {0, 3.0f}};
    engine_request r = {.prompt = prompt, .n_prompt = 10 + j->prompt * 4, .max_tokens = MAXG,
                        .ignore_eos = j->ignore_eos, .on_token = on_token, .on_finish = on_finish,
                        .on_logits = j->logits_cb ? on_logits : NULL, .user = o,
                        .grammar = j->g, .grammar_vocab = j->g ? v : NULL};
    sampling_params_default(&r.sampling);
    r.sampling.temperature = j->temp;
    r.sampling.seed = j->seed;
    if (j->fancy) {
        r.sampling.top_k = 8, r.sampling.top_p = 0.9f, r.sampling.min_p = 0.02f;
        r.sampling.repeat_penalty = 1.3f, r.sampling.presence_penalty = 0.4f;
        r.sampling.logit_bias = bias, r.sampling.n_logit_bias = 3;
    }
    mx_error err;
    o->id = engine_submit(e, &r, &err);
    if (o->id < 0) fail_msg("submit: %s", err.msg);
}

/* The output as text (EOS left out) is a sentence of g, and the run ended with EOS. */
static void assert_valid(grammar *g, const out *o) {
    char text[4 * MAXG + 1];
    size_t n = 0;
    for (int i = 0; i < o->n; i++) {
        if (o->toks[i] == V - 1) {
            assert_int_equal(i, o->n - 1); /* EOS last */
            break;
        }
        memcpy(text + n, g_tok[o->toks[i]], g_len[o->toks[i]]);
        n += g_len[o->toks[i]];
    }
    text[n] = 0;
    if (o->why != ENGINE_FINISH_EOS) fail_msg("finished with %s after \"%s\"", engine_finish_detail(o->why), text);
    if (!grammar_accepts(g, text, n)) fail_msg("\"%s\" is not a sentence of the grammar", text);
}

typedef struct fixture {
    tiny_model tm;
    model *m;
    grammar_vocab *v;
    grammar *g1, *g2, *g3;
} fixture;

static int setup(void **st) {
    fixture *f = calloc(1, sizeof *f);
    tiny_build_v(&f->tm, TINY_LLAMA, 4242, V);
    mx_error err;
    assert_int_equal(model_bind(&f->m, &f->tm.spec, tiny_lookup, &f->tm, backend_cpu(), &err), 0);
    f->v = make_vocab();
    const char *g1 = "root ::= \"{\" ws \"\\\"n\\\"\" ws \":\" ws [0-9]{1,3} ws \"}\"\nws ::= \" \"?";
    assert_int_equal(grammar_compile(&f->g1, g1, strlen(g1), &err), 0);
    json_t *s = json_loads("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":-50},"
                           "\"b\":{\"enum\":[\"x\",\"yz\"]},\"c\":{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},"
                           "\"maxItems\":2}},\"required\":[\"a\",\"b\"],\"additionalProperties\":false}", 0, NULL);
    assert_int_equal(grammar_from_json_schema(&f->g2, s, &err), 0);
    json_decref(s);
    const char *g3 = "root ::= \"\xC3\xA9\""; /* no token writes é */
    assert_int_equal(grammar_compile(&f->g3, g3, strlen(g3), &err), 0);
    *st = f;
    return 0;
}

static int teardown(void **st) {
    fixture *f = *st;
    grammar_release(f->g1), grammar_release(f->g2), grammar_release(f->g3);
    grammar_vocab_release(f->v);
    model_free(f->m);
    tiny_free(&f->tm);
    free(f);
    return 0;
}

static void run_alone(fixture *f, const job *j, out *o) {
    engine *e = new_engine(f->m, &f->tm, 1, 0);
    submit(e, f->v, j, o);
    mx_error err;
    assert_int_equal(engine_run(e, &err), 0);
    engine_free(e);
}

/* ==== Tests ==== */
static void test_greedy_and_sampling(void **st) {
    fixture *f = *st;
    for (int k = 0; k < 24; k++) {
        job j = {.g = k % 2 ? f->g2 : f->g1, .temp = k < 4 ? 0.0f : 1.2f, .seed = (uint64_t)k, .fancy = k >= 12,
                 .prompt = k % 3};
        out o;
        run_alone(f, &j, &o);
        assert_valid(j.g, &o);
    }
}

static void test_batch_matches_alone(void **st) {
    fixture *f = *st;
    const job jobs[5] = {{.g = f->g1, .temp = 0, .prompt = 0},
                         {.g = f->g2, .temp = 1.0f, .seed = 7, .prompt = 1},
                         {.g = NULL, .temp = 0, .prompt = 2, .ignore_eos = true},
                         {.g = f->g2, .temp = 0.8f, .seed = 9, .fancy = true, .prompt = 0},
                         {.g = f->g2, .temp = 0, .prompt = 2}};
    out alone[5], batch[5];
    for (int i = 0; i < 5; i++) run_alone(f, &jobs[i], &alone[i]);
    /* together, then again with a pool so small that sequences are preempted and recomputed */
    for (int pass = 0; pass < 2; pass++) {
        engine *e = new_engine(f->m, &f->tm, 5, pass ? 24 : 0);
        for (int i = 0; i < 5; i++) submit(e, f->v, &jobs[i], &batch[i]);
        mx_error err;
        assert_int_equal(engine_run(e, &err), 0);
        engine_stats es;
        engine_get_stats(e, &es);
        if (pass) assert_true(es.preemptions > 0);
        assert_true(es.grammar_masks > 0);
        engine_free(e);
        for (int i = 0; i < 5; i++) {
            assert_int_equal(batch[i].n, alone[i].n);
            assert_memory_equal(batch[i].toks, alone[i].toks, (size_t)alone[i].n * sizeof(int32_t));
            assert_int_equal(batch[i].why, alone[i].why);
            if (jobs[i].g) assert_valid(jobs[i].g, &batch[i]);
        }
    }
}

static void test_ignore_eos_and_logits(void **st) {
    fixture *f = *st;
    job j = {.g = f->g1, .temp = 1.0f, .seed = 3, .ignore_eos = true, .logits_cb = true};
    out o;
    run_alone(f, &j, &o);
    assert_valid(f->g1, &o); /* ended at the grammar's end despite ignore_eos */
    assert_int_equal(o.raw_rows, o.n);
    assert_int_equal(o.raw_inf, 0); /* on_logits saw the rows before the mask */
}

static void test_impossible_grammar(void **st) {
    fixture *f = *st;
    job j = {.g = f->g3, .temp = 0};
    out o;
    run_alone(f, &j, &o);
    assert_int_equal(o.why, ENGINE_FINISH_ERROR);
    assert_int_equal(o.n, 0);
}

static void test_submit_checks(void **st) {
    fixture *f = *st;
    engine *e = new_engine(f->m, &f->tm, 1, 0);
    int32_t p[3] = {1, 2, 3};
    out o = {0};
    engine_request r = {.prompt = p, .n_prompt = 3, .max_tokens = 4, .on_token = on_token, .on_finish = on_finish,
                        .user = &o, .grammar = f->g1};
    sampling_params_default(&r.sampling);
    mx_error err;
    assert_true(engine_submit(e, &r, &err) < 0); /* a grammar without its vocabulary */
    /* a vocabulary whose EOS is not the model's */
    grammar_vocab *v2;
    const int32_t other = 5;
    assert_int_equal(grammar_vocab_new(&v2, V, g_ptr, g_len, g_flags, &other, 1, &err), 0);
    r.grammar_vocab = v2;
    assert_true(engine_submit(e, &r, &err) < 0);
    assert_non_null(strstr(err.msg, "EOS id 96"));
    grammar_vocab_release(v2);
    engine_free(e);
}

/* ==== Lazy grammars (engine_request.grammar_trigger) ==== */
static int tok_id(const char *s) {
    for (int i = 0; i < V - 1; i++)
        if (!strcmp(g_tok[i], s)) return i;
    fail_msg("no token '%s'", s);
    return -1;
}

/* Greedy with a logit bias (and a repetition penalty that makes a biased token give way to the
 * next one once used), lazy from `trigger` on: the output text, how it finished, the masks. */
static void run_lazy(fixture *f, grammar *g, const char *trigger, const mx_logit_bias *bias, int n_bias, out *o,
                     char *text, uint64_t *masks) {
    engine *e = new_engine(f->m, &f->tm, 1, 0);
    memset(o, 0, sizeof *o);
    int32_t prompt[6] = {1, 2, 3, 4, 5, 6};
    engine_request r = {.prompt = prompt, .n_prompt = 6, .max_tokens = 24, .on_token = on_token,
                        .on_finish = on_finish, .user = o, .grammar = g, .grammar_vocab = g ? f->v : NULL,
                        .grammar_trigger = trigger, .grammar_trigger_len = trigger ? (int)strlen(trigger) : 0};
    sampling_params_default(&r.sampling);
    r.sampling.logit_bias = bias;
    r.sampling.n_logit_bias = n_bias;
    r.sampling.repeat_penalty = 100.0f;
    mx_error err;
    o->id = engine_submit(e, &r, &err);
    if (o->id < 0) fail_msg("submit: %s", err.msg);
    assert_int_equal(engine_run(e, &err), 0);
    engine_stats es;
    engine_get_stats(e, &es);
    *masks = es.grammar_masks;
    engine_free(e);
    size_t n = 0;
    for (int i = 0; i < o->n && o->toks[i] != V - 1; i++) {
        memcpy(text + n, g_tok[o->toks[i]], g_len[o->toks[i]]);
        n += g_len[o->toks[i]];
    }
    text[n] = 0;
}

static void test_lazy_grammar(void **st) {
    fixture *f = *st;
    const char *gl = "root ::= \"{\\\"\" [a-z]{1,3} \"\\\":\" [0-9] \"}\"";
    grammar *g;
    mx_error err;
    assert_int_equal(grammar_compile(&g, gl, strlen(gl), &err), 0);
    char text[4 * MAXG + 1], free_text[4 * MAXG + 1];
    out o, o_free;
    uint64_t masks, masks_free;
    const char *trig = "{\"";
    /* the trigger across two tokens ("{", then "\"a"): the matcher starts at "{" and takes the
     * "a" after the trigger; from there on the output is the grammar's, ending with EOS */
    const mx_logit_bias split[] = {{tok_id("{"), 30.0f}, {tok_id("\"a"), 25.0f}, {tok_id("{\""), -100.0f}};
    run_lazy(f, g, trig, split, 3, &o, text, &masks);
    const char *at = strstr(text, trig);
    if (!at || at != text) fail_msg("trigger not at the start of \"%s\"", text);
    if (!grammar_accepts(g, at, strlen(at))) fail_msg("\"%s\" is not a sentence of the grammar", at);
    assert_int_equal(o.why, ENGINE_FINISH_EOS);
    assert_true(masks > 0);
    /* free text first: the trigger comes late, the text before it is the unconstrained run's */
    const mx_logit_bias late[] = {{tok_id("ab"), 40.0f}, {tok_id("cd"), 35.0f}, {tok_id("{\""), 30.0f}};
    run_lazy(f, g, trig, late, 3, &o, text, &masks);
    run_lazy(f, NULL, NULL, late, 3, &o_free, free_text, &masks_free);
    at = strstr(text, trig);
    assert_non_null(at);
    assert_true(at > text);
    assert_memory_equal(text, free_text, (size_t)(at - text)); /* the same until the trigger */
    if (!grammar_accepts(g, at, strlen(at))) fail_msg("\"%s\" is not a sentence of the grammar", at);
    assert_int_equal(o.why, ENGINE_FINISH_EOS);
    assert_int_equal(masks_free, 0);
    /* never triggered: exactly the unconstrained tokens, no mask computed */
    const mx_logit_bias none[] = {{tok_id("{"), -100.0f}, {tok_id("{\""), -100.0f}, {tok_id("ab"), 5.0f}};
    run_lazy(f, g, trig, none, 3, &o, text, &masks);
    run_lazy(f, NULL, NULL, none, 3, &o_free, free_text, &masks_free);
    assert_int_equal(o.n, o_free.n);
    assert_memory_equal(o.toks, o_free.toks, (size_t)o.n * sizeof(int32_t));
    assert_int_equal(masks, 0);
    /* the token that completes the trigger goes on with what the grammar refuses ("{" then
     * "\":"): nothing sampled can be taken back, so the run continues unconstrained */
    const mx_logit_bias bad[] = {{tok_id("{"), 30.0f}, {tok_id("\":"), 25.0f}, {tok_id("{\""), -100.0f}};
    run_lazy(f, g, trig, bad, 3, &o, text, &masks);
    assert_non_null(strstr(text, "{\":"));
    assert_int_equal(masks, 0);
    grammar_release(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lazy_grammar),
        cmocka_unit_test(test_greedy_and_sampling), cmocka_unit_test(test_batch_matches_alone),
        cmocka_unit_test(test_ignore_eos_and_logits), cmocka_unit_test(test_impossible_grammar),
        cmocka_unit_test(test_submit_checks),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
