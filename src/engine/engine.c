/* Engine: sequences, scheduler, step batch, sampling and finish checks. See engine.h. */
#include "engine/engine.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/env.h"
#include "base/log.h"
#include "engine/engine_internal.h"
#include "engine/engine_pool.h"

/* ==== Names ==== */
const char *engine_finish_name(engine_finish f) {
    switch (f) {
    case ENGINE_FINISH_EOS: case ENGINE_FINISH_STOP: return "stop";
    case ENGINE_FINISH_LENGTH: case ENGINE_FINISH_CONTEXT: return "length";
    case ENGINE_FINISH_CANCELLED: return "cancelled";
    case ENGINE_FINISH_ERROR: return "error";
    case ENGINE_FINISH_EMBEDDED: return "stop";
    default: return "none";
    }
}

const char *engine_finish_detail(engine_finish f) {
    switch (f) {
    case ENGINE_FINISH_EOS: return "eos";
    case ENGINE_FINISH_STOP: return "stop_string";
    case ENGINE_FINISH_LENGTH: return "max_tokens";
    case ENGINE_FINISH_CONTEXT: return "context_full";
    case ENGINE_FINISH_CANCELLED: return "cancelled";
    case ENGINE_FINISH_ERROR: return "error";
    case ENGINE_FINISH_EMBEDDED: return "embedded";
    default: return "none";
    }
}

void engine_params_default(engine_params *p, const model_spec *spec) {
    memset(p, 0, sizeof *p);
    p->n_parallel = 1;
    p->max_batch_tokens = 2048;
    p->prefill_chunk = 512;
    p->prefill_grant_interval = 4;
    p->ctx_size = 4096;
    if (spec && spec->max_position_embeddings > 0 && spec->max_position_embeddings < p->ctx_size)
        p->ctx_size = spec->max_position_embeddings;
    p->storage = KV_STORAGE_AUTO;
    p->block_size = 16;
    p->prefix_cache = true;
}

/* ==== Lifecycle ==== */
int engine_new(engine **out, model *m, const engine_params *p, mx_error *err) {
    if (p->n_parallel <= 0 || p->max_batch_tokens <= 0 || p->prefill_chunk <= 0 || p->ctx_size <= 1)
        return mx_fail(err, "engine: n_parallel, batch size and prefill chunk must be > 0, ctx > 1");
    if (p->block_size <= 0) return mx_fail(err, "engine: block size must be > 0");
    engine *e = calloc(1, sizeof *e);
    if (!e) return mx_fail(err, "out of memory");
    e->m = m;
    e->spec = model_spec_of(m);
    e->p = *p;
    if (e->p.prefill_grant_interval <= 0) e->p.prefill_grant_interval = 1;
    pthread_mutex_init(&e->mu, NULL);
    pthread_mutex_init(&e->gw_mu, NULL);
    pthread_cond_init(&e->gw_cv, NULL);
    const kv_storage st = kv_storage_resolve(p->storage, e->spec, e->storage_reason,
                                             sizeof e->storage_reason);
    e->p.storage = st;
    kv_cache_params kp = {.storage = st, .n_layers = e->spec->n_layers,
                          .n_kv_heads = e->spec->n_kv_heads, .head_dim = e->spec->head_dim,
                          .ctx_size = p->ctx_size, .n_seqs = p->n_parallel,
                          .block_size = p->block_size, .prefix_cache = p->prefix_cache,
                          .tp_size = model_tp_size(m), .type_k = p->cache_type_k,
                          .type_v = p->cache_type_v, .v_is_k = e->spec->kv_lora_rank > 0};
    kp.n_blocks = p->n_kv_blocks > 0
                      ? p->n_kv_blocks
                      : p->n_parallel * ((p->ctx_size + p->block_size - 1) / p->block_size);
    e->p.n_kv_blocks = st == KV_STORAGE_PAGED ? kp.n_blocks : 0;
    e->running = calloc((size_t)p->n_parallel, sizeof(seq *));
    e->logits = malloc((size_t)p->n_parallel * (size_t)e->spec->vocab_size * sizeof(float));
    e->g_ids = malloc((size_t)p->n_parallel * sizeof(int32_t));
    e->g_lps = malloc((size_t)p->n_parallel * sizeof(float));
    if (!e->running || !e->logits || !e->g_ids || !e->g_lps) {
        engine_free(e);
        return mx_fail(err, "out of memory");
    }
    if (kv_cache_new(&e->kv, &kp, model_backend(m), err)) {
        engine_free(e);
        return -1;
    }
    const mx_overlap_mode ov = mx_env()->grammar_overlap;
    e->overlap = ov == MX_OVERLAP_FORCE || (ov == MX_OVERLAP_AUTO && model_backend(m)->device != MX_DEV_CPU);
    e->p.cache_type_k = kv_cache_params_of(e->kv)->type_k; /* resolved */
    e->p.cache_type_v = kv_cache_params_of(e->kv)->type_v;
    *out = e;
    return 0;
}

static void seq_free(seq *s) {
    if (!s) return;
    free(s->tokens);
    free(s->kv.blocks);
    sampler_free(s->smp);
    grammar_matcher_free(s->gm);
    engine_lazy_free(s);
    eng_pool_free(&s->pool);
    free(s);
}

void engine_free(engine *e) {
    if (!e) return;
    engine_gworker_stop(e);
    for (int i = 0; i < e->n_running; i++) {
        kv_seq_release(e->kv, &e->running[i]->kv);
        seq_free(e->running[i]);
    }
    for (seq *s = e->queue, *n; s; s = n) { n = s->next; seq_free(s); }
    for (seq *s = e->inbox, *n; s; s = n) { n = s->next; seq_free(s); }
    kv_cache_free(e->kv);
    free(e->running); free(e->logits); free(e->cancels); free(e->g_ids); free(e->g_lps);
    free(e->tok); free(e->pos); free(e->sid); free(e->rope_len); free(e->out_rows);
    free(e->table); free(e->write_rows); free(e->step_seqs); free(e->cons); free(e->cons_row);
    free(e->hid_rows); free(e->hidden);
    pthread_mutex_destroy(&e->gw_mu);
    pthread_cond_destroy(&e->gw_cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

kv_storage engine_storage(const engine *e) { return e->p.storage; }
const char *engine_storage_reason(const engine *e) { return e->storage_reason; }
const engine_params *engine_params_of(const engine *e) { return &e->p; }
kv_cache *engine_kv(engine *e) { return e->kv; }

/* ==== Submit / cancel (any thread) ==== */
int64_t engine_submit(engine *e, const engine_request *r, mx_error *err) {
    const bool embed = r->kind == ENGINE_REQ_EMBED;
    if (r->kind != ENGINE_REQ_GENERATE && !embed) return mx_fail(err, "unknown request kind %d", (int)r->kind), -1;
    if (r->n_prompt <= 0) return mx_fail(err, "empty prompt"), -1;
    if (embed && ((unsigned)r->pooling > ENGINE_POOL_NONE || !r->on_embed))
        return mx_fail(err, "embedding request: unknown pooling %d or no on_embed callback", (int)r->pooling), -1;
    if (!embed && !model_has_lm_head(e->m))
        return mx_fail(err, "this checkpoint has no lm_head.weight (and tie_word_embeddings is false): it "
                            "computes embeddings only"), -1;
    if (embed && r->n_prompt > e->p.ctx_size) /* no position is generated: it may fill the context */
        return mx_fail(err, "input of %d tokens does not fit the context of %d tokens (raise --ctx-size)",
                       r->n_prompt, e->p.ctx_size), -1;
    if (!embed && r->n_prompt >= e->p.ctx_size)
        return mx_fail(err, "prompt of %d tokens does not fit the context of %d tokens "
                       "(at least one position must stay free for generation; raise --ctx-size)",
                       r->n_prompt, e->p.ctx_size), -1;
    const int V = e->spec->vocab_size;
    for (int i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= V)
            return mx_fail(err, "prompt token %d at index %d is outside the vocabulary [0, %d)",
                           r->prompt[i], i, V), -1;
    seq *s = calloc(1, sizeof *s);
    if (!s) return mx_fail(err, "out of memory"), -1;
    s->cap = r->n_prompt + 16;
    s->tokens = malloc((size_t)s->cap * sizeof(int32_t));
    if (!embed && sampling_params_validate(&r->sampling, err)) {
        seq_free(s);
        return -1;
    }
    if (embed) {
        s->embed = true;
        s->on_embed = r->on_embed;
        if (eng_pool_init(&s->pool, r->pooling, r->n_prompt, e->spec->hidden_size)) {
            seq_free(s);
            return mx_fail(err, "out of memory for the embedding of %d positions", r->n_prompt), -1;
        }
    } else {
        s->smp = sampler_new(&r->sampling);
    }
    if (!s->tokens || (!embed && !s->smp)) {
        seq_free(s);
        return mx_fail(err, "out of memory"), -1;
    }
    if (r->grammar || r->grammar_vocab) {
        if (!r->grammar || !r->grammar_vocab) {
            seq_free(s);
            return mx_fail(err, "a grammar needs both the grammar and the vocabulary's token bytes"), -1;
        }
        for (int i = 0; i < e->spec->n_eos; i++)
            if (!grammar_vocab_is_eos(r->grammar_vocab, e->spec->eos_ids[i])) {
                seq_free(s);
                return mx_fail(err, "the grammar vocabulary does not mark the model's EOS id %d as EOS",
                               e->spec->eos_ids[i]), -1;
            }
        if (r->grammar_trigger ? engine_lazy_new(s, r, err)
                               : !(s->gm = grammar_matcher_new(r->grammar, r->grammar_vocab, err))) {
            seq_free(s);
            return -1;
        }
    }
    memcpy(s->tokens, r->prompt, (size_t)r->n_prompt * sizeof(int32_t));
    s->n_tokens = s->n_prompt = r->n_prompt;
    s->max_tokens = r->max_tokens;
    s->ignore_eos = r->ignore_eos;
    s->on_token = r->on_token;
    s->on_finish = r->on_finish;
    s->on_logits = r->on_logits;
    s->user = r->user;
    const sampling_params *sp = &r->sampling;
    s->plain_greedy = !embed && r->allow_device_sampling && sp->temperature <= 0 && !r->on_logits && !r->grammar &&
                      sp->n_logit_bias == 0 &&
                      (sp->repeat_penalty == 1.0f || sp->repeat_last_n == 0) &&
                      sp->presence_penalty == 0 && sp->frequency_penalty == 0;
    s->st.n_prompt = r->n_prompt;
    s->st.t_submit = mx_now();
    kv_seq_init(&s->kv);
    pthread_mutex_lock(&e->mu);
    s->id = e->next_id++;
    s->arrival = e->next_arrival++;
    seq **pp = &e->inbox;
    while (*pp) pp = &(*pp)->next;
    *pp = s;
    pthread_mutex_unlock(&e->mu);
    return s->id;
}

void engine_cancel(engine *e, int64_t id) {
    pthread_mutex_lock(&e->mu);
    if (e->n_cancels == e->cap_cancels) {
        int cap = e->cap_cancels ? 2 * e->cap_cancels : 16;
        int64_t *n = realloc(e->cancels, (size_t)cap * sizeof(int64_t));
        if (n) {
            e->cancels = n;
            e->cap_cancels = cap;
        }
    }
    if (e->n_cancels < e->cap_cancels) e->cancels[e->n_cancels++] = id;
    pthread_mutex_unlock(&e->mu);
}

/* ==== Queue ==== */
static void queue_insert(engine *e, seq *s) {
    seq **pp = &e->queue;
    while (*pp && (*pp)->arrival < s->arrival) pp = &(*pp)->next;
    s->next = *pp;
    *pp = s;
    s->state = SEQ_QUEUED;
}

static void finish(engine *e, seq *s, engine_finish why) {
    if (s->state == SEQ_RUNNING) {
        for (int i = 0; i < e->n_running; i++)
            if (e->running[i] == s) {
                memmove(&e->running[i], &e->running[i + 1],
                        (size_t)(e->n_running - i - 1) * sizeof(seq *));
                e->n_running--;
                break;
            }
    } else if (s->state == SEQ_QUEUED) {
        for (seq **pp = &e->queue; *pp; pp = &(*pp)->next)
            if (*pp == s) {
                *pp = s->next;
                break;
            }
    }
    kv_seq_release(e->kv, &s->kv);
    s->state = SEQ_FINISHED;
    s->st.t_finish = mx_now();
    s->st.n_generated = s->n_generated;
    if (s->on_finish) s->on_finish(s->user, s->id, why, &s->st);
    seq_free(s);
}

static void drain_inbox(engine *e) {
    pthread_mutex_lock(&e->mu);
    seq *in = e->inbox;
    e->inbox = NULL;
    int64_t *cancels = e->cancels;
    const int n_cancels = e->n_cancels;
    e->cancels = NULL;
    e->n_cancels = e->cap_cancels = 0;
    pthread_mutex_unlock(&e->mu);
    for (seq *s = in, *n; s; s = n) {
        n = s->next;
        queue_insert(e, s);
    }
    for (int c = 0; c < n_cancels; c++) {
        seq *hit = NULL;
        for (int i = 0; i < e->n_running && !hit; i++)
            if (e->running[i]->id == cancels[c]) hit = e->running[i];
        for (seq *s = e->queue; s && !hit; s = s->next)
            if (s->id == cancels[c]) hit = s;
        if (hit) finish(e, hit, ENGINE_FINISH_CANCELLED);
    }
    free(cancels);
}

/* Preemption by recomputation: release the KV, back to the queue; all tokens so far become
 * the prompt of its next admission. */
static void preempt(engine *e, seq *s) {
    for (int i = 0; i < e->n_running; i++)
        if (e->running[i] == s) {
            memmove(&e->running[i], &e->running[i + 1], (size_t)(e->n_running - i - 1) * sizeof(seq *));
            e->n_running--;
            break;
        }
    kv_seq_release(e->kv, &s->kv);
    s->rows = 0;
    if (s->embed) eng_pool_reset(&s->pool); /* its positions are computed again */
    s->st.n_preempted++;
    e->stats.preemptions++;
    LOG_DEBUG("engine: preempted sequence %lld (%d tokens) to free KV blocks", (long long)s->id,
              s->n_tokens);
    queue_insert(e, s);
}

static void admit(engine *e) {
    while (e->n_running < e->p.n_parallel && e->queue) {
        seq *s = e->queue;
        /* a fresh sequence needs at least its first chunk's blocks (or a dense slot) */
        const int first = s->n_tokens < e->p.prefill_chunk ? s->n_tokens : e->p.prefill_chunk;
        /* an embedding pooled over every position (or the first) must compute them all */
        const bool match = !s->embed || s->pool.kind == ENGINE_POOL_LAST;
        const int hit = match ? kv_seq_match_prefix(e->kv, &s->kv, s->tokens, s->n_tokens) : 0;
        const int need = kv_cache_blocks_for(e->kv, hit + first) - s->kv.n_blocks;
        if (need > kv_cache_available(e->kv) && e->n_running > 0) {
            kv_seq_release(e->kv, &s->kv); /* wait for running sequences to free blocks */
            break;
        }
        e->queue = s->next;
        s->next = NULL;
        s->state = SEQ_RUNNING;
        if (!s->admitted_once) {
            s->admitted_once = true;
            s->st.n_cached = hit;
            s->st.t_start = mx_now();
            if (hit > 0) {
                e->stats.prefix_hits++;
                e->stats.prefix_reused_tokens += (uint64_t)hit;
            } else {
                e->stats.prefix_misses++;
            }
        }
        e->running[e->n_running++] = s;
    }
}

/* ==== Step planning ==== */
static int pending(const seq *s) { return s->n_tokens - s->kv.n_tokens; }

/* Decode rows first (one per sequence), then prefill chunks within the token budget; a prompt
 * starved for prefill_grant_interval steps is granted one chunk over budget. */
static void plan(engine *e) {
    int budget = e->p.max_batch_tokens;
    for (int i = 0; i < e->n_running; i++) e->running[i]->rows = 0;
    for (int i = 0; i < e->n_running; i++) {
        seq *s = e->running[i];
        if (pending(s) == 1 && budget > 0) {
            s->rows = 1;
            budget--;
        }
    }
    for (int i = 0; i < e->n_running; i++) {
        seq *s = e->running[i];
        const int pd = pending(s);
        if (pd <= 1) continue;
        int c = pd < e->p.prefill_chunk ? pd : e->p.prefill_chunk;
        if (c > budget) c = budget;
        if (c > 0) {
            s->rows = c;
            budget -= c;
            s->starved = 0;
        } else {
            s->starved++;
        }
    }
    for (int i = 0; i < e->n_running; i++) {
        seq *s = e->running[i];
        const int pd = pending(s);
        if (pd > 1 && s->rows == 0 && s->starved >= e->p.prefill_grant_interval) {
            s->rows = pd < e->p.prefill_chunk ? pd : e->p.prefill_chunk;
            s->starved = 0;
            e->stats.prefill_grants++;
            break;
        }
    }
}

static seq *youngest_running(engine *e) {
    seq *y = NULL;
    for (int i = 0; i < e->n_running; i++)
        if (!y || e->running[i]->arrival > y->arrival) y = e->running[i];
    return y;
}

static int cmp_arrival(const void *a, const void *b) {
    const seq *x = *(seq *const *)a, *y = *(seq *const *)b;
    return x->arrival < y->arrival ? -1 : x->arrival > y->arrival;
}

/* Reserves KV for every planned sequence, oldest first, preempting the youngest when the
 * pool is exhausted. Returns the number of sequences left in step_seqs. */
static int reserve(engine *e, int n) {
    seq **ss = e->step_seqs;
    qsort(ss, (size_t)n, sizeof *ss, cmp_arrival);
    for (int i = 0; i < n; i++) {
        seq *s = ss[i];
        while (s->state == SEQ_RUNNING && s->rows > 0) {
            mx_error err;
            const int from = s->kv.n_tokens, to = from + s->rows;
            int rc = kv_seq_reserve(e->kv, &s->kv, to, &err);
            if (rc < 0) {
                LOG_ERR("engine: sequence %lld: %s", (long long)s->id, err.msg);
                finish(e, s, ENGINE_FINISH_ERROR);
                ss[i] = NULL; /* finish freed it */
                break;
            }
            if (rc == 0) rc = kv_seq_prepare_write(e->kv, &s->kv, from, to);
            if (rc == 0) break;
            seq *victim = youngest_running(e);
            if (victim == s && e->n_running == 1) {
                LOG_ERR("engine: sequence %lld needs %d KV blocks but the pool has %d; raise the "
                        "KV pool size", (long long)s->id, kv_cache_blocks_for(e->kv, to),
                        kv_cache_params_of(e->kv)->n_blocks);
                finish(e, s, ENGINE_FINISH_ERROR);
                ss[i] = NULL; /* finish freed it: never read it again */
                break;
            }
            preempt(e, victim);
        }
    }
    int k = 0;
    for (int i = 0; i < n; i++)
        if (ss[i] && ss[i]->state == SEQ_RUNNING && ss[i]->rows > 0) ss[k++] = ss[i];
    return k;
}

static int grow_i32(int32_t **p, int n) {
    int32_t *q = realloc(*p, (size_t)n * sizeof(int32_t));
    if (!q) return -1;
    *p = q;
    return 0;
}

static int ensure_step_buffers(engine *e, int rows, int table) {
    if (rows > e->cap_rows) {
        if (grow_i32(&e->tok, rows) || grow_i32(&e->pos, rows) || grow_i32(&e->sid, rows) ||
            grow_i32(&e->rope_len, rows) || grow_i32(&e->out_rows, rows) || grow_i32(&e->hid_rows, rows))
            return -1;
        int64_t *w = realloc(e->write_rows, (size_t)rows * sizeof(int64_t));
        if (!w) return -1;
        e->write_rows = w;
        e->cap_rows = rows;
    }
    if (table > e->cap_table) {
        if (grow_i32(&e->table, table)) return -1;
        e->cap_table = table;
    }
    return 0;
}

/* ==== After the forward: sampling and finish checks ==== */
static bool is_eos(const engine *e, int32_t t) {
    for (int i = 0; i < e->spec->n_eos; i++)
        if (e->spec->eos_ids[i] == t) return true;
    return false;
}

static int seq_append(seq *s, int32_t t) {
    if (s->n_tokens == s->cap) {
        int cap = 2 * s->cap;
        int32_t *n = realloc(s->tokens, (size_t)cap * sizeof(int32_t));
        if (!n) return -1;
        s->tokens = n;
        s->cap = cap;
    }
    s->tokens[s->n_tokens++] = t;
    return 0;
}

/* Appends the sampled token t (logprob lp; t < 0: nothing could be sampled) and runs the
 * finish checks. */
static void accept_token(engine *e, seq *s, int32_t t, float lp) {
    if (t < 0) { /* every token banned (logit bias) */
        LOG_ERR("engine: sequence %lld: no token can be sampled (all banned)", (long long)s->id);
        finish(e, s, ENGINE_FINISH_ERROR);
        return;
    }
    if (s->gm) { /* the mask allowed t: refusing it here is an internal error */
        mx_error gerr;
        if (grammar_matcher_accept(s->gm, t, &gerr)) {
            LOG_ERR("engine: sequence %lld: %s", (long long)s->id, gerr.msg);
            finish(e, s, ENGINE_FINISH_ERROR);
            return;
        }
    }
    if (seq_append(s, t)) {
        finish(e, s, ENGINE_FINISH_ERROR);
        return;
    }
    if (s->lazy) engine_lazy_feed(s, t);
    s->n_generated++;
    s->st.n_generated = s->n_generated; /* current inside the token callback (engine_token_stats) */
    if (s->n_generated == 1) s->st.t_first_token = mx_now();
    e->reporting = s;
    const int stop = s->on_token ? s->on_token(s->user, s->id, t, lp) : 0;
    e->reporting = NULL;
    if (stop) finish(e, s, ENGINE_FINISH_STOP);
    else if (s->gm ? grammar_matcher_ended(s->gm) : !s->ignore_eos && is_eos(e, t)) finish(e, s, ENGINE_FINISH_EOS);
    else if (s->max_tokens > 0 && s->n_generated >= s->max_tokens) finish(e, s, ENGINE_FINISH_LENGTH);
    else if (s->n_tokens >= e->p.ctx_size) finish(e, s, ENGINE_FINISH_CONTEXT);
}

static void sample_and_check(engine *e, seq *s, float *logits) {
    float lp = 0.0f;
    if (s->on_logits) s->on_logits(s->user, s->id, logits, e->spec->vocab_size);
    if (s->gm) {
        if (!s->mask) {
            finish(e, s, ENGINE_FINISH_ERROR); /* logged by the mask phase */
            return;
        }
        if (s->on_logits) grammar_mask_apply(s->mask, logits, e->spec->vocab_size);
        s->mask = NULL;
    }
    const int32_t t = sampler_sample(s->smp, logits, e->spec->vocab_size, s->tokens, s->n_tokens, &lp);
    if (t < 0 && s->gm && grammar_matcher_is_done(s->gm)) { /* complete, and the model has no EOS */
        finish(e, s, ENGINE_FINISH_EOS);
        return;
    }
    if (t < 0 && s->gm) {
        LOG_ERR("engine: sequence %lld: no token the grammar allows can be sampled (the grammar needs text this "
                "vocabulary cannot write, or logit_bias banned every allowed token)", (long long)s->id);
        finish(e, s, ENGINE_FINISH_ERROR);
        return;
    }
    accept_token(e, s, t, lp);
}

/* An embedding's last position is in: its vector(s) go to the caller, then it finishes (its KV
 * is released; full blocks stay in the prefix index). */
static void embed_done(engine *e, seq *s) {
    int n_vec = 0;
    const float *v = eng_pool_result(&s->pool, &n_vec);
    s->on_embed(s->user, s->id, v, n_vec, s->pool.dim);
    finish(e, s, ENGINE_FINISH_EMBEDDED);
}

/* ==== Step ==== */
/* A forward that carried rows of a sequence that has no token yet (its prompt, or its
 * recomputation after a preemption): the TTFT breakdown of engine_seq_stats. */
static void ttft_record(engine_seq_stats *st, double seconds, int rows, int all_rows, double t_end) {
    if (st->n_prefill_steps < ENGINE_TTFT_STEPS) {
        st->prefill_step_s[st->n_prefill_steps] = seconds;
        st->prefill_step_rows[st->n_prefill_steps] = rows;
        st->prefill_step_all_rows[st->n_prefill_steps] = all_rows;
    }
    st->n_prefill_steps++;
    st->prefill_seconds += seconds;
    st->t_first_forward_end = t_end;
}

int engine_step(engine *e, mx_error *err) {
    drain_inbox(e);
    admit(e);
    if (!e->n_running) return engine_has_work(e) ? 1 : 0;
    plan(e);
    seq **ss = realloc(e->step_seqs, (size_t)e->p.n_parallel * sizeof(seq *));
    if (!ss) return mx_fail(err, "out of memory");
    e->step_seqs = ss;
    if (!e->cons && !(e->cons = malloc((size_t)e->p.n_parallel * sizeof(seq *)))) return mx_fail(err, "out of memory");
    if (!e->cons_row && !(e->cons_row = malloc((size_t)e->p.n_parallel * sizeof(int)))) return mx_fail(err, "out of memory");
    int n = 0;
    for (int i = 0; i < e->n_running; i++)
        if (e->running[i]->rows > 0) ss[n++] = e->running[i];
    n = reserve(e, n);
    if (n == 0) return engine_has_work(e) ? 1 : 0;

    /* ---- build the step batch ---- */
    int rows = 0, stride = 1;
    for (int j = 0; j < n; j++) {
        rows += ss[j]->rows;
        if (ss[j]->kv.n_blocks > stride) stride = ss[j]->kv.n_blocks;
    }
    if (ensure_step_buffers(e, rows, n * stride)) return mx_fail(err, "out of memory");
    int r = 0, n_out = 0, n_hid = 0;
    bool all_greedy = true; /* every sampled sequence is plain greedy */
    uint64_t prefill_rows = 0;
    for (int j = 0; j < n; j++) {
        seq *s = ss[j];
        const int from = s->kv.n_tokens;
        if (s->rows > 1 || from + s->rows < s->n_tokens || from < s->n_prompt) {
            prefill_rows += (uint64_t)s->rows; /* a prompt chunk (or recomputation) */
            e->stats.prefill_chunks++;
        }
        for (int k = 0; k < s->rows; k++, r++) {
            e->tok[r] = s->tokens[from + k];
            e->pos[r] = from + k;
            e->sid[r] = j;
            /* Dynamic NTK RoPE sees the whole known sequence (as a transformers forward over
             * the full prompt, then one decode step at a time), so every prefill chunk of a
             * prompt uses the prompt's frequencies: chunking never changes the result. */
            e->rope_len[r] = s->n_tokens;
            e->write_rows[r] = kv_seq_row(e->kv, &s->kv, from + k);
            if (s->embed && eng_pool_wants(&s->pool, from + k)) e->hid_rows[n_hid++] = r;
        }
        if (from + s->rows == s->n_tokens && !s->embed) {
            e->out_rows[n_out++] = r - 1;
            all_greedy &= s->plain_greedy;
        }
        for (int b = 0; b < stride; b++)
            e->table[j * stride + b] = b < s->kv.n_blocks ? s->kv.blocks[b] : 0;
    }
    if (n_hid > e->cap_hid) {
        float *h = realloc(e->hidden, (size_t)n_hid * (size_t)e->spec->hidden_size * sizeof(float));
        if (!h) return mx_fail(err, "out of memory for %d hidden states", n_hid);
        e->hidden = h;
        e->cap_hid = n_hid;
    }
    model_batch mb = {.n_rows = rows, .tokens = e->tok, .pos = e->pos, .seq = e->sid,
                      .rope_len = e->rope_len, .block_table = e->table, .table_stride = stride,
                      .n_seqs = n, .write_rows = e->write_rows, .n_out = n_out,
                      .out_rows = e->out_rows, .n_hidden = n_hid, .hidden_rows = e->hid_rows};
    /* plain greedy everywhere: the backend picks the tokens on the device (a device backend
     * then copies 8 bytes per row instead of a row of logits) */
    const bool dev_greedy = n_out > 0 && all_greedy && model_has_device_greedy(e->m);
    /* constrained rows: their masks during the forward (worker) or after it */
    e->n_cons = 0;
    if (!dev_greedy) engine_cons_collect(e, ss, n);
    const bool on_worker = e->n_cons > 0 && e->overlap && engine_gworker_start(e);
    const model_out mo = {.logits = dev_greedy ? NULL : e->logits, .ids = dev_greedy ? e->g_ids : NULL,
                          .logprobs = dev_greedy ? e->g_lps : NULL, .hidden = e->hidden};
    const double t0 = mx_now();
    if (model_forward_out(e->m, e->kv, &mb, &mo, err)) {
        if (on_worker) engine_gworker_wait(e); /* it reads the sequences: done before they can go */
        return -1;
    }
    const double dt = mx_now() - t0;
    e->stats.steps++;
    e->stats.rows += (uint64_t)rows;
    e->stats.last_rows = rows;
    e->stats.last_seqs = n;
    e->stats.prefill_rows += prefill_rows;
    e->stats.decode_rows += (uint64_t)rows - prefill_rows;
    e->stats.prefill_seconds += dt * (double)prefill_rows / rows;
    e->stats.decode_seconds += dt * (double)((uint64_t)rows - prefill_rows) / rows;

    /* ---- token masks of constrained rows ---- */
    if (e->n_cons) engine_cons_finish(e, on_worker);

    /* ---- commit, sample, finish ---- */
    int o = 0, hi = 0;
    const size_t V = (size_t)e->spec->vocab_size;
    for (int j = 0; j < n; j++) {
        seq *s = ss[j];
        if (s->n_generated == 0) ttft_record(&s->st, dt, s->rows, rows, t0 + dt);
        const int from = s->kv.n_tokens, to = from + s->rows;
        kv_seq_commit(e->kv, &s->kv, s->tokens, to);
        s->rows = 0;
        if (s->embed) { /* its hidden rows, in the order the batch listed them */
            const size_t H = (size_t)e->spec->hidden_size;
            for (int p = from; p < to; p++)
                if (eng_pool_wants(&s->pool, p)) eng_pool_add(&s->pool, p, e->hidden + (size_t)hi++ * H);
            if (s->cancel) finish(e, s, ENGINE_FINISH_CANCELLED);
            else if (to == s->n_tokens) embed_done(e, s);
            continue;
        }
        const bool sampled = to == s->n_tokens;
        if (s->cancel) {
            finish(e, s, ENGINE_FINISH_CANCELLED);
            if (sampled) o++;
            continue;
        }
        if (sampled && dev_greedy) accept_token(e, s, e->g_ids[o], e->g_lps[o]), o++;
        else if (sampled) sample_and_check(e, s, e->logits + (size_t)o++ * V);
    }
    return engine_has_work(e) ? 1 : 0;
}

int engine_run(engine *e, mx_error *err) {
    int rc;
    while ((rc = engine_step(e, err)) > 0) {
    }
    return rc;
}

bool engine_has_work(engine *e) {
    pthread_mutex_lock(&e->mu);
    const bool inbox = e->inbox != NULL || e->n_cancels > 0;
    pthread_mutex_unlock(&e->mu);
    return inbox || e->n_running > 0 || e->queue != NULL;
}

void engine_get_stats(engine *e, engine_stats *st) {
    *st = e->stats;
    st->running = e->n_running;
    int q = 0;
    for (seq *s = e->queue; s; s = s->next) q++;
    st->queued = q;
}

const engine_seq_stats *engine_token_stats(const engine *e) { return e->reporting ? &e->reporting->st : NULL; }

int engine_top_logprobs(const engine *e, int n, int32_t *ids, float *logprobs) {
    if (!e->reporting || n <= 0) return 0;
    return sampler_top_logprobs(e->reporting->smp, n, ids, logprobs);
}

void engine_apply_cancels(engine *e) { drain_inbox(e); }
