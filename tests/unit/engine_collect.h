/* What the engine streams back, per sequence (tests only): generated tokens, the first
 * sampled position's logits, the finish reason and cached-prefix length. Used by the golden
 * and tensor-parallel tests through the engine's on_token / on_logits / on_finish callbacks,
 * and the engine runs that fill it. */
#ifndef MLXCEL_TESTS_ENGINE_COLLECT_H
#define MLXCEL_TESTS_ENGINE_COLLECT_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "model/model.h"

/* cmocka's fail_msg must be visible (include <cmocka.h> first) */

#define EC_MAX_SEQ 8
#define EC_MAX_TOK 256

typedef struct ec_collect {
    int64_t ids[EC_MAX_SEQ];            /* engine sequence id per slot */
    int32_t toks[EC_MAX_SEQ][EC_MAX_TOK];
    int n[EC_MAX_SEQ];
    float *first_logits[EC_MAX_SEQ];    /* [vocab], malloc'd; ec_free releases */
    float *step_logits[EC_MAX_SEQ];     /* [n_steps[i], vocab] every sampled position's logits
                                           when ec_keep_steps is set (else NULL) */
    int n_steps[EC_MAX_SEQ];
    bool keep_steps;
    int vocab;
    int n_cached[EC_MAX_SEQ];
    engine_finish why[EC_MAX_SEQ];
} ec_collect;

static inline int ec_slot(ec_collect *c, int64_t id) {
    for (int i = 0; i < EC_MAX_SEQ; i++)
        if (c->ids[i] == id) return i;
    return -1;
}

static inline int ec_on_token(void *u, int64_t id, int32_t t, float lp) {
    (void)lp;
    ec_collect *c = u;
    const int i = ec_slot(c, id);
    if (i >= 0 && c->n[i] < EC_MAX_TOK) c->toks[i][c->n[i]++] = t;
    return 0;
}

static inline void ec_on_logits(void *u, int64_t id, const float *lg, int vocab) {
    ec_collect *c = u;
    const int i = ec_slot(c, id);
    if (i >= 0 && !c->first_logits[i]) {
        c->first_logits[i] = malloc((size_t)vocab * sizeof(float));
        memcpy(c->first_logits[i], lg, (size_t)vocab * sizeof(float));
    }
    if (i >= 0 && c->keep_steps && c->n_steps[i] < EC_MAX_TOK) {
        float *n = realloc(c->step_logits[i], (size_t)(c->n_steps[i] + 1) * vocab * sizeof(float));
        if (!n) fail_msg("out of memory keeping step logits");
        c->step_logits[i] = n;
        memcpy(n + (size_t)c->n_steps[i]++ * vocab, lg, (size_t)vocab * sizeof(float));
    }
}

static inline void ec_on_finish(void *u, int64_t id, engine_finish why, const engine_seq_stats *st) {
    ec_collect *c = u;
    const int i = ec_slot(c, id);
    if (i >= 0) {
        c->why[i] = why;
        c->n_cached[i] = st->n_cached;
    }
}

/* How a run drives the engine: KV storage, prefill chunk, block size, all sequences in one
 * batch or one engine run each, and a prefix-cache rerun (each prompt runs twice on one
 * engine; the second, cache-hit run is the one collected). */
typedef struct ec_variant {
    const char *label;
    kv_storage storage;
    int chunk, block;
    bool batched, prefix_rerun;
} ec_variant;

/* KV cache types of the engines ec_run makes (-ctk / -ctv; 0: the backend's). */
static kv_type ec_cache_k, ec_cache_v;
/* ec_run keeps every sampled position's logits (ec_collect.step_logits) when set. */
static bool ec_keep_steps;

/* Greedy (temperature 0, EOS ignored) runs of n prompts under variant v, ctx 160, into c. */
static inline void ec_run(model *m, const int32_t *const *prompts, const int *n_prompt,
                          const int *max_tokens, int n, const ec_variant *v, ec_collect *c) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < EC_MAX_SEQ; i++) c->ids[i] = -1;
    c->vocab = model_spec_of(m)->vocab_size;
    c->keep_steps = ec_keep_steps;
    engine_params p;
    engine_params_default(&p, model_spec_of(m));
    p.ctx_size = 160;
    p.storage = v->storage;
    p.prefill_chunk = v->chunk;
    p.block_size = v->block;
    p.n_parallel = v->batched ? n : 1;
    p.prefix_cache = v->prefix_rerun;
    p.cache_type_k = ec_cache_k;
    p.cache_type_v = ec_cache_v;
    engine *e = NULL;
    mx_error err;
    if (engine_new(&e, m, &p, &err)) fail_msg("engine_new: %s", err.msg);
    for (int i = 0; i < n; i++) {
        engine_request r = {.prompt = prompts[i], .n_prompt = n_prompt[i], .max_tokens = max_tokens[i],
                            .ignore_eos = true, .on_token = ec_on_token, .on_finish = ec_on_finish,
                            .on_logits = ec_on_logits, .user = c};
        sampling_params_default(&r.sampling);
        r.sampling.temperature = 0.0f;
        if (v->prefix_rerun) { /* cold run first, not collected */
            if (engine_submit(e, &r, &err) < 0) fail_msg("submit: %s", err.msg);
            if (engine_run(e, &err)) fail_msg("engine_run: %s", err.msg);
        }
        c->ids[i] = engine_submit(e, &r, &err);
        if (c->ids[i] < 0) fail_msg("submit: %s", err.msg);
        if (!v->batched && engine_run(e, &err)) fail_msg("engine_run: %s", err.msg);
    }
    if (engine_run(e, &err)) fail_msg("engine_run: %s", err.msg);
    engine_free(e);
}

/* Relative L2 error of a against ref over n values. */
static inline double ec_rel_err(const float *a, const float *ref, int n) {
    double num = 0, den = 0;
    for (int k = 0; k < n; k++) {
        const double d = (double)a[k] - ref[k];
        num += d * d;
        den += (double)ref[k] * ref[k];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static inline void ec_free(ec_collect *c) {
    for (int i = 0; i < EC_MAX_SEQ; i++) {
        free(c->first_logits[i]);
        free(c->step_logits[i]);
        c->first_logits[i] = c->step_logits[i] = NULL;
    }
}

/* Greedy n_gen tokens of a fixed 6-token prompt (paged KV) on models a and b: both must give
 * n_gen tokens inside a's vocabulary, the same ones ("what b" in the failure message). */
static inline void ec_expect_same_tokens(model *a, model *b, int n_gen, const char *what) {
    const int32_t prompt[] = {1, 7, 42, 3, 99, 5};
    const int32_t *pr[1] = {prompt};
    const int np[1] = {6}, nw[1] = {n_gen};
    const ec_variant v = {"paged", KV_STORAGE_PAGED, 512, 16, false, false};
    ec_collect ca, cb;
    ec_run(a, pr, np, nw, 1, &v, &ca);
    ec_run(b, pr, np, nw, 1, &v, &cb);
    if (ca.n[0] != n_gen || cb.n[0] != n_gen)
        fail_msg("%s: %d and %d tokens, %d asked", what, ca.n[0], cb.n[0], n_gen);
    for (int i = 0; i < n_gen; i++) {
        if (ca.toks[0][i] < 0 || ca.toks[0][i] >= model_spec_of(a)->vocab_size)
            fail_msg("%s: token %d is %d, outside the vocabulary", what, i, ca.toks[0][i]);
        if (ca.toks[0][i] != cb.toks[0][i])
            fail_msg("%s: token %d is %d, expected %d", what, i, cb.toks[0][i], ca.toks[0][i]);
    }
    ec_free(&ca);
    ec_free(&cb);
}

#endif
