/* srv_backend on the real engine: see srv_backend_engine.h and the seam in srv_engine.h.
 *
 * Mapping of the server's scheduling flags onto engine_params (docs/server.md):
 *   --max-batch-size  -> n_parallel: sequences admitted and stepped together
 *   -np/--parallel    -> the KV pool: n_parallel contexts of --ctx-size tokens (paged blocks, or
 *                        dense slots), so a pool larger than the batch keeps prefix-cache blocks
 *   -ub/--ubatch-size -> max_batch_tokens: one step is one forward pass (at least one row per
 *                        running sequence); -b caps -ub (srv_config_finalize)
 *   --prefill-chunk-size, --prefill-grant-interval (0 = never), -c, --decode-storage-backend
 *                     -> the engine fields of the same meaning. */
#include "server/srv_backend_engine.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/env.h"
#include "base/log.h"
#include "engine/engine.h"
#include "model/estimate.h"
#include "runtime/runtime.h"
#include "server/srv_embed.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

/* ==== State ==== */
#define SBE_GVOCABS 6 /* the plain table + one per tool-call syntax */
typedef struct sbe sbe;

/* One submitted generation; lives from submit until the engine's finish callback. */
typedef struct sbe_seq {
    sbe *b;
    int64_t id;
    void (*on_token)(void *user, const srv_token *tok);
    void (*on_finish)(void *user, srv_finish why, int n_cached);
    void (*on_embed)(void *user, const float *embd, int n_vec, int dim);
    void *user;
    int top_n;           /* top_logprobs requested */
    bool ignore_eos;
    bool constrained;    /* under a grammar EOS always ends the sequence: never a token */
    bool failed;         /* the step failed: report ERROR instead of CANCELLED */
    struct sbe_seq *prev, *next;
} sbe_seq;

struct sbe {
    runtime rt;            /* backend, model, tokenizer, template, sampling defaults, engine */
    srv_text_ops text_ops; /* the static table with has_template filled in */
    sbe_seq *live;         /* engine thread only */
    uint64_t seed_state;
    uint64_t seen_steps;   /* steps at the last stats() call */
    uint64_t n_generated;  /* tokens sampled (EOS included) */
    /* constrained decoding: the token bytes of the tokenizer, built on the first request
     * that needs them (HTTP threads: under gv_mu) */
    pthread_mutex_t gv_mu;
    grammar_vocab *gvocab[SBE_GVOCABS]; /* token bytes per keep list (tx_grammar_vocab) */
    char gvocab_key[SBE_GVOCABS][256];
};

struct srv_text_stream {
    tok_stream *ts;
    const tokenizer *tok;
};

/* ==== Engine callbacks (engine thread) ==== */
static bool is_eos(const model_spec *s, int32_t t) {
    for (int i = 0; i < s->n_eos; i++)
        if (s->eos_ids[i] == t) return true;
    return false;
}

static int eng_on_token(void *user, int64_t id, int32_t token, float logprob) {
    (void)id;
    sbe_seq *q = user;
    sbe *b = q->b;
    b->n_generated++;
    /* The seam does not report the EOS token: the engine finishes the sequence with EOS. */
    if ((!q->ignore_eos || q->constrained) && is_eos(b->rt.spec, token)) return 0;
    srv_token t = {.id = token, .logprob = logprob};
    const engine_seq_stats *st = mx_env()->profile_ttft ? engine_token_stats(b->rt.e) : NULL;
    if (st && st->n_generated == 1 && (t.ttft = malloc(sizeof *t.ttft))) *t.ttft = *st;
    if (q->top_n > 0) t.n_top = engine_top_logprobs(b->rt.e, q->top_n, t.top_ids, t.top_logprobs);
    q->on_token(q->user, &t);
    return 0; /* stop strings are found by the server's stream, which then cancels */
}

static srv_finish map_finish(engine_finish f) {
    switch (f) {
    case ENGINE_FINISH_EOS: case ENGINE_FINISH_EMBEDDED: return SRV_FINISH_EOS;
    case ENGINE_FINISH_STOP: return SRV_FINISH_STOP;
    case ENGINE_FINISH_LENGTH: case ENGINE_FINISH_CONTEXT: return SRV_FINISH_LENGTH;
    case ENGINE_FINISH_CANCELLED: return SRV_FINISH_CANCELLED;
    default: return SRV_FINISH_ERROR;
    }
}

static void eng_on_finish(void *user, int64_t id, engine_finish reason, const engine_seq_stats *st) {
    (void)id;
    sbe_seq *q = user;
    sbe *b = q->b;
    if (q->prev) q->prev->next = q->next;
    else b->live = q->next;
    if (q->next) q->next->prev = q->prev;
    const srv_finish why = q->failed ? SRV_FINISH_ERROR : map_finish(reason);
    q->on_finish(q->user, why, st ? st->n_cached : 0);
    free(q);
}

static void eng_on_embed(void *user, int64_t id, const float *embd, int n_vec, int dim) {
    (void)id;
    sbe_seq *q = user;
    q->on_embed(q->user, embd, n_vec, dim);
}

/* ==== srv_engine_ops ==== */
static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* An embedding: the prompt only, pooled (no sampler). */
static int64_t submit_embed(sbe *b, sbe_seq *q, const srv_gen *g, mx_error *err) {
    static const engine_pooling pools[] = {[SRV_POOL_LAST] = ENGINE_POOL_LAST, [SRV_POOL_MEAN] = ENGINE_POOL_MEAN,
                                           [SRV_POOL_CLS] = ENGINE_POOL_CLS, [SRV_POOL_NONE] = ENGINE_POOL_NONE};
    if ((unsigned)g->pooling >= sizeof pools / sizeof pools[0] || !g->on_embed)
        return mx_fail(err, "embedding: bad pooling %d or no on_embed", (int)g->pooling), -1;
    q->on_embed = g->on_embed;
    engine_request r = {.kind = ENGINE_REQ_EMBED, .pooling = pools[g->pooling], .on_embed = eng_on_embed,
                        .prompt = g->prompt, .n_prompt = g->n_prompt, .on_finish = eng_on_finish, .user = q};
    return engine_submit(b->rt.e, &r, err);
}

static int be_submit(void *p, const srv_gen *g, uint64_t *id, mx_error *err) {
    sbe *b = p;
    if (g->embed) {
        sbe_seq *q = calloc(1, sizeof *q);
        if (!q) return mx_fail(err, "out of memory");
        q->b = b;
        q->on_finish = g->on_finish;
        q->user = g->user;
        const int64_t sid = submit_embed(b, q, g, err);
        if (sid < 0) {
            free(q);
            return -1;
        }
        q->id = sid;
        q->next = b->live;
        if (b->live) b->live->prev = q;
        b->live = q;
        *id = (uint64_t)sid;
        return 0;
    }
    sbe_seq *q = calloc(1, sizeof *q);
    mx_logit_bias *lb = NULL;
    const srv_sampling *s = &g->sampling;
    if (s->n_logit_bias > 0) lb = malloc((size_t)s->n_logit_bias * sizeof *lb);
    if (!q || (s->n_logit_bias > 0 && !lb)) {
        free(q);
        free(lb);
        return mx_fail(err, "out of memory");
    }
    for (int i = 0; i < s->n_logit_bias; i++) lb[i] = (mx_logit_bias){s->logit_bias[i].id, s->logit_bias[i].bias};
    sampling_params sp;
    sampling_params_default(&sp);
    sp.temperature = s->temperature;
    sp.top_k = s->top_k;
    sp.top_p = s->top_p;
    sp.min_p = s->min_p;
    sp.repeat_penalty = s->repeat_penalty;
    sp.repeat_last_n = s->repeat_last_n;
    sp.presence_penalty = s->presence_penalty;
    sp.frequency_penalty = s->frequency_penalty;
    sp.logit_bias = lb; /* copied by the engine's sampler */
    sp.n_logit_bias = s->n_logit_bias;
    sp.seed = s->has_seed ? s->seed : splitmix64(&b->seed_state);
    q->b = b;
    q->on_token = g->on_token;
    q->on_finish = g->on_finish;
    q->user = g->user;
    q->top_n = s->top_logprobs < SRV_MAX_TOP_LOGPROBS ? s->top_logprobs : SRV_MAX_TOP_LOGPROBS;
    q->ignore_eos = s->ignore_eos;
    q->constrained = g->grammar != NULL;
    /* Device sampling (CUDA: argmax + its logprob on the device, 8 bytes per row to the host
     * instead of a row of logits) is allowed unless the request wants top_logprobs, which
     * need the host sampler's distribution (engine_top_logprobs). The engine itself keeps
     * the host path for anything but plain greedy (temperature, penalties, logit bias). */
    engine_request r = {.prompt = g->prompt, .n_prompt = g->n_prompt, .sampling = sp,
                        .max_tokens = g->max_tokens, .ignore_eos = s->ignore_eos,
                        .on_token = eng_on_token, .on_finish = eng_on_finish, .user = q,
                        .allow_device_sampling = q->top_n == 0, .grammar = g->grammar,
                        .grammar_vocab = g->grammar ? g->grammar_vocab : NULL,
                        .grammar_trigger = g->grammar ? g->grammar_trigger : NULL,
                        .grammar_trigger_len = g->grammar && g->grammar_trigger ? (int)strlen(g->grammar_trigger) : 0};
    const int64_t sid = engine_submit(b->rt.e, &r, err);
    free(lb);
    if (sid < 0) {
        free(q);
        return -1;
    }
    /* No callback can run before the next step, which is on this thread. */
    q->id = sid;
    q->next = b->live;
    if (b->live) b->live->prev = q;
    b->live = q;
    *id = (uint64_t)sid;
    return 0;
}

/* The seam's cancel is immediate: the sequence finishes and its KV is released before the
 * call returns, so the next step and the next /metrics already see the blocks free. */
static void be_cancel(void *p, uint64_t id) {
    sbe *b = p;
    engine_cancel(b->rt.e, (int64_t)id);
    engine_apply_cancels(b->rt.e);
}

static int be_step(void *p, mx_error *err) {
    sbe *b = p;
    if (engine_step(b->rt.e, err) >= 0) return 0;
    /* The forward failed as a whole: every sequence ends with ERROR (no retry loop). */
    LOG_ERR("engine: step failed (%s); failing every running request", err->msg);
    for (sbe_seq *q = b->live; q; q = q->next) {
        q->failed = true;
        engine_cancel(b->rt.e, q->id);
    }
    engine_apply_cancels(b->rt.e);
    return -1;
}

static bool be_has_work(void *p) { return engine_has_work(((sbe *)p)->rt.e); }

static void be_stats(void *p, srv_engine_stats *out) {
    sbe *b = p;
    engine_stats es;
    engine_get_stats(b->rt.e, &es);
    kv_cache *kv = engine_kv(b->rt.e);
    kv_cache_stats ks;
    kv_cache_get_stats(kv, &ks);
    memset(out, 0, sizeof *out);
    out->n_running = es.running;
    out->n_waiting = es.queued;
    /* "last step" values only when a step ran since the previous call (idle reads 0) */
    const bool stepped = es.steps != b->seen_steps;
    b->seen_steps = es.steps;
    out->last_batch_rows = stepped ? es.last_seqs : 0;
    out->last_batch_tokens = stepped ? es.last_rows : 0;
    out->steps_total = es.steps;
    out->prefill_chunks_total = es.prefill_chunks;
    out->prefill_grants_total = es.prefill_grants;
    out->prompt_tokens_total = es.prefill_rows;
    out->decode_tokens_total = b->n_generated;
    out->prefill_seconds_total = es.prefill_seconds;
    out->decode_seconds_total = es.decode_seconds;
    out->kv_blocks_total = ks.n_blocks;
    out->kv_blocks_used = ks.n_used; /* cached blocks with no owner count as free (evictable) */
    out->kv_block_tokens = kv_cache_table_block(kv);
    out->prefix_hits_total = es.prefix_hits;
    out->prefix_misses_total = es.prefix_misses;
    out->prefix_reused_tokens_total = es.prefix_reused_tokens;
    out->decode_rows_total = es.decode_rows;
    out->preemptions_total = es.preemptions;
}

static const srv_engine_ops k_engine_ops = {be_submit, be_cancel, be_step, be_has_work, be_stats};

/* ==== srv_text_ops (HTTP threads; tokenizer and template are read-only) ==== */
static int tx_tokenize(void *p, const char *text, size_t len, bool add_special, int32_t **ids,
                       size_t *n_ids, mx_error *err) {
    return tok_encode(((sbe *)p)->rt.tok, text, len, add_special, ids, n_ids, err);
}

static int tx_detokenize(void *p, const int32_t *ids, size_t n_ids, bool skip_special, char **out,
                         size_t *out_len, mx_error *err) {
    return tok_decode_n(((sbe *)p)->rt.tok, ids, n_ids, skip_special, out, out_len, err);
}

static int tx_token_bytes(void *p, int32_t id, char **out, size_t *out_len, mx_error *err) {
    return tok_decode_bytes(((sbe *)p)->rt.tok, &id, 1, false, out, out_len, err);
}

static int tx_template(void *p, const json_t *messages, const json_t *extra, bool add_gen, char **out,
                       mx_error *err) {
    sbe *b = p;
    if (!b->rt.tpl) return mx_fail(err, "this model has no chat template");
    return chat_template_apply(b->rt.tpl, messages, extra, add_gen, out, err);
}

static srv_text_stream *tx_stream_new(void *p, const char *const *stops, int n_stops) {
    srv_text_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->tok = ((sbe *)p)->rt.tok;
    s->ts = tok_stream_new(s->tok, true);
    if (!s->ts) {
        free(s);
        return NULL;
    }
    if (n_stops > 0) tok_stream_set_stops(s->ts, stops, n_stops);
    return s;
}

static int tx_stream_push(srv_text_stream *s, int32_t id, const char **out, size_t *out_len) {
    return tok_stream_push(s->ts, id, out, out_len);
}

static void tx_stream_keep(srv_text_stream *s, const char *const *pieces, int n) {
    int32_t ids[32];
    size_t k = 0;
    for (int i = 0; i < n && k < 32; i++) {
        const int32_t id = tok_piece_to_id(s->tok, pieces[i]);
        if (id >= 0 && tok_is_special(s->tok, id)) ids[k++] = id; /* others are shown anyway */
    }
    tok_stream_keep_special(s->ts, ids, k);
}

static const char *tx_stream_stop_word(srv_text_stream *s) { return tok_stream_stop_word(s->ts); }

static void tx_stream_flush(srv_text_stream *s, const char **out, size_t *out_len) {
    tok_stream_flush(s->ts, out, out_len);
}

static void tx_stream_free(srv_text_stream *s) {
    if (!s) return;
    tok_stream_free(s->ts);
    free(s);
}

/* The tokenizer's token bytes with the model's EOS ids, built once per keep list (a plain one
 * for response_format / grammar requests, one per tool-call syntax): ~0.2 s and ~6 MB for a
 * 128k vocabulary, so only when a request first asks for one. A kept special token contributes
 * its text, as the stream shows it (stream_keep). */
static grammar_vocab *build_vocab(sbe *b, const char *const *keep, int n_keep, mx_error *err) {
    tok_vocab tv;
    if (tok_vocab_bytes(b->rt.tok, &tv, err)) return NULL;
    const char **ptr = malloc((size_t)(tv.n ? tv.n : 1) * sizeof *ptr);
    grammar_vocab *v = NULL;
    if (!ptr) {
        mx_fail(err, "out of memory");
    } else {
        for (int i = 0; i < tv.n; i++) ptr[i] = tv.data + tv.off[i];
        for (int k = 0; k < n_keep; k++) {
            const int32_t id = tok_piece_to_id(b->rt.tok, keep[k]);
            if (id < 0 || id >= tv.n || !tv.special[id]) continue; /* plain text already, or absent */
            ptr[id] = keep[k];
            tv.len[id] = (uint32_t)strlen(keep[k]);
            tv.special[id] = 0;
        }
        const double t0 = mx_now();
        if (!grammar_vocab_new(&v, tv.n, ptr, tv.len, tv.special, b->rt.spec->eos_ids, b->rt.spec->n_eos, err))
            LOG_INFO("grammar: token bytes of %d tokens ready in %.0f ms (%s)", tv.n, (mx_now() - t0) * 1e3,
                     n_keep ? "first enforced tool call of this syntax" : "first constrained request");
    }
    free(ptr);
    tok_vocab_free(&tv);
    return v;
}

static grammar_vocab *tx_grammar_vocab(void *p, const char *const *keep, int n_keep, mx_error *err) {
    sbe *b = p;
    char key[sizeof b->gvocab_key[0]] = "";
    for (int k = 0; k < n_keep; k++) {
        const size_t l = strlen(key);
        snprintf(key + l, sizeof key - l, "%s\x1f", keep[k]);
    }
    pthread_mutex_lock(&b->gv_mu);
    grammar_vocab *v = NULL;
    int slot = -1;
    for (int i = 0; i < SBE_GVOCABS && !v; i++) {
        if (b->gvocab[i] && !strcmp(b->gvocab_key[i], key)) v = b->gvocab[i];
        else if (!b->gvocab[i] && slot < 0) slot = i;
    }
    if (!v && slot < 0) mx_fail(err, "too many token-byte tables (%d tool-call syntaxes)", SBE_GVOCABS);
    else if (!v && (v = build_vocab(b, keep, n_keep, err))) {
        b->gvocab[slot] = v;
        snprintf(b->gvocab_key[slot], sizeof b->gvocab_key[slot], "%s", key);
    }
    pthread_mutex_unlock(&b->gv_mu);
    return v;
}

/* Ids the engine accepts: the model's vocabulary (prompt ids and logit_bias are checked
 * against it). */
static int tx_vocab_size(void *p) { return ((sbe *)p)->rt.spec->vocab_size; }

static const srv_text_ops k_text_ops = {
    .tokenize = tx_tokenize, .detokenize = tx_detokenize, .token_bytes = tx_token_bytes,
    .apply_template = tx_template, .stream_new = tx_stream_new, .stream_push = tx_stream_push,
    .stream_stop_word = tx_stream_stop_word, .stream_flush = tx_stream_flush, .stream_free = tx_stream_free, .vocab_size = tx_vocab_size,
    .stream_keep = tx_stream_keep, .grammar_vocab = tx_grammar_vocab,
    .has_template = false};

/* ==== Open / close ==== */
static void fill_info(sbe *b, srv_model_info *m, const srv_config *cfg, const char *tpl_src,
                      const backend_ops *ops) {
    const model_spec *s = b->rt.spec;
    /* the line `generate` and `bench` print: device, compute capability, memory, settings */
    if (ops->describe) ops->describe(m->device, sizeof m->device);
    else snprintf(m->device, sizeof m->device, "%s", ops->name);
    if (cfg->n_aliases) {
        snprintf(m->name, sizeof m->name, "%.255s", cfg->aliases[0]);
    } else {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s", cfg->model);
        size_t n = strlen(dir);
        while (n > 1 && dir[n - 1] == '/') dir[--n] = 0;
        const char *base = strrchr(dir, '/');
        snprintf(m->name, sizeof m->name, "%.255s", base ? base + 1 : dir);
    }
    char *real = realpath(cfg->model, NULL);
    snprintf(m->path, sizeof m->path, "%.1023s", real ? real : cfg->model);
    free(real);
    snprintf(m->family, sizeof m->family, "%.30s (%.20s family)", s->model_type, spec_family_name(s->family));
    m->n_params = model_n_params(b->rt.m);
    if (s->quant.bits)
        snprintf(m->dtype, sizeof m->dtype, "%.8s, MLX affine %d-bit group %d", mx_dtype_name(s->dtype),
                 s->quant.bits, s->quant.group_size);
    else
        snprintf(m->dtype, sizeof m->dtype, "%.63s", mx_dtype_name(s->dtype));
    m->weight_bytes = model_weight_bytes(b->rt.m);
    m->kv_bytes_per_token = kv_cache_bytes_per_token(engine_kv(b->rt.e));
    /* activations and headroom as `mlxcel inspect` estimates them (src/model/estimate.c) */
    mx_mem_estimate est;
    estimate_memory(s, m->n_params, m->weight_bytes, cfg->ctx_size, cfg->max_batch_size,
                    s->dtype == MX_BF16 ? MX_KV_BF16 : MX_KV_F16, &est);
    m->activation_bytes = est.activation_bytes;
    m->headroom_bytes = est.headroom_bytes;
    m->n_ctx = cfg->ctx_size;
    m->n_ctx_train = s->max_position_embeddings;
    snprintf(m->storage, sizeof m->storage, "%.15s", kv_storage_name(engine_storage(b->rt.e)));
    snprintf(m->storage_reason, sizeof m->storage_reason, "%.255s", engine_storage_reason(b->rt.e));
    snprintf(m->cache_type_k, sizeof m->cache_type_k, "%s", kv_type_name(engine_params_of(b->rt.e)->cache_type_k));
    snprintf(m->cache_type_v, sizeof m->cache_type_v, "%s", kv_type_name(engine_params_of(b->rt.e)->cache_type_v));
    snprintf(m->chat_template, sizeof m->chat_template, "%.63s", tpl_src[0] ? tpl_src : "none");
    m->chat_template_text = b->rt.tpl ? chat_template_source(b->rt.tpl) : NULL;
    m->n_embd = s->hidden_size;
}

/* generation_config.json's sampling values become the server's defaults where no flag (or
 * LLAMA_ARG_* variable) set them: llama-server's built-in values < the checkpoint's < flags <
 * the request (vLLM's --generation-config auto). */
static void apply_generation_defaults(srv_config *cfg, const runtime *rt) {
    const unsigned f = rt->gen_fields & ~cfg->sampling_set;
    if (f & RT_GEN_TEMPERATURE) cfg->temperature = rt->sampling.temperature;
    if (f & RT_GEN_TOP_P) cfg->top_p = rt->sampling.top_p;
    if (f & RT_GEN_TOP_K) cfg->top_k = rt->sampling.top_k;
    if (f & RT_GEN_REPEAT_PENALTY) cfg->repeat_penalty = rt->sampling.repeat_penalty;
    if (f)
        LOG_INFO("sampling defaults from generation_config.json:%s%s%s%s (flags and requests override)",
                 f & RT_GEN_TEMPERATURE ? " temperature" : "", f & RT_GEN_TOP_P ? " top_p" : "",
                 f & RT_GEN_TOP_K ? " top_k" : "", f & RT_GEN_REPEAT_PENALTY ? " repetition_penalty" : "");
}

int srv_backend_engine_open(srv_backend *be, srv_config *cfg, mx_error *err) {
    memset(be, 0, sizeof *be);
    if (!cfg->model[0]) return mx_fail(err, "no model: give -m DIR (a checkpoint directory)");
    sbe *b = calloc(1, sizeof *b);
    if (!b) return mx_fail(err, "out of memory");
    be->eng = be->text = b;
    be->eng_ops = &k_engine_ops;
    be->text_ops = &b->text_ops;
    b->text_ops = k_text_ops;
    pthread_mutex_init(&b->gv_mu, NULL);
    b->seed_state = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(mx_now() * 1e9);

    /* -ctk / -ctv: a type the device cannot hold is refused before the weights load;
     * --tp-size N: a group of N rank models; the engine runs on this server's engine thread
     * as rank 0, the other ranks as threads of each forward (docs/tensor-parallel.md) */
    rt_opts ro;
    rt_opts_default(&ro);
    ro.model_dir = cfg->model;
    ro.device = cfg->device;
    ro.tp_size = cfg->tp_size;
    ro.dummy_weights = !strcmp(cfg->load_format, "dummy");
    if ((cfg->cache_type_k[0] && kv_type_parse(cfg->cache_type_k, &ro.cache_type_k, err)) ||
        (cfg->cache_type_v[0] && kv_type_parse(cfg->cache_type_v, &ro.cache_type_v, err)))
        goto fail;
    ro.tokenizer = RT_TOK_REQUIRED;
    ro.chat_template_file = cfg->chat_template_file;
    if (runtime_open(&b->rt, &ro, err)) {
        if (strstr(err->msg, "tokenizer.json")) mx_wrap(err, "%s: the server needs tokenizer.json", cfg->model);
        goto fail;
    }
    const backend_ops *ops = b->rt.be;
    if (b->rt.tpl) {
        b->text_ops.has_template = true;
    } else {
        LOG_WARN("%s: no chat template (chat_template.jinja or tokenizer_config.json \"chat_template\"); "
                 "/v1/chat/completions answers 400 unless --chat-template-file is given", cfg->model);
    }
    apply_generation_defaults(cfg, &b->rt);
    /* embeddings: the pooling the checkpoint asks for; a head-less checkpoint (an embedding
     * model saved without lm_head) computes nothing else */
    if (cfg->embeddings && srv_embed_resolve(cfg->model, cfg->pooling, b->rt.spec->hidden_size, &be->info.pooling, err))
        goto fail;
    if (!cfg->embeddings && !model_has_lm_head(b->rt.m)) {
        mx_fail(err, "%s: no lm_head.weight and tie_word_embeddings is false: an embedding model; serve it with "
                     "--embeddings", cfg->model);
        goto fail;
    }

    /* -c 0: the engine's default, min(4096, max_position_embeddings) */
    engine_params ep;
    engine_params_default(&ep, b->rt.spec);
    if (srv_config_finalize(cfg, ep.ctx_size, err)) goto fail;
    if (b->rt.spec->max_position_embeddings > 0 && cfg->ctx_size > b->rt.spec->max_position_embeddings)
        LOG_WARN("--ctx-size %d exceeds the model's max_position_embeddings %d", cfg->ctx_size,
                 b->rt.spec->max_position_embeddings);
    if (cfg->prefill_chunk_size > cfg->ubatch_size) {
        mx_fail(err, "--prefill-chunk-size %d exceeds --ubatch-size %d: one engine step is one forward "
                     "pass of at most --ubatch-size tokens", cfg->prefill_chunk_size, cfg->ubatch_size);
        goto fail;
    }
    ep.n_parallel = cfg->max_batch_size;
    ep.max_batch_tokens = cfg->ubatch_size > cfg->max_batch_size ? cfg->ubatch_size : cfg->max_batch_size;
    ep.prefill_chunk = cfg->prefill_chunk_size;
    ep.prefill_grant_interval = cfg->prefill_grant_interval > 0 ? cfg->prefill_grant_interval : INT_MAX;
    ep.ctx_size = cfg->ctx_size;
    if (kv_storage_parse(cfg->storage, &ep.storage)) {
        mx_fail(err, "--decode-storage-backend: expected auto, dense or paged, got '%s'", cfg->storage);
        goto fail;
    }
    ep.n_kv_blocks = cfg->n_parallel * ((cfg->ctx_size + ep.block_size - 1) / ep.block_size);
    ep.cache_type_k = ro.cache_type_k;
    ep.cache_type_v = ro.cache_type_v;
    if (runtime_start_engine(&b->rt, &ep, err)) goto fail;
    fill_info(b, &be->info, cfg, b->rt.tpl_src, ops);
    LOG_INFO("model loaded in %.2f s (%s backend)", b->rt.load_seconds, ops->name);
    return 0;
fail:
    srv_backend_engine_close(be);
    return -1;
}

void srv_backend_engine_close(srv_backend *be) {
    sbe *b = be->eng;
    if (!b) return;
    engine_free(b->rt.e); /* first: it holds the sequences below as callback users */
    b->rt.e = NULL;
    /* srv_run cancelled every request before returning; anything left never reached a step */
    for (sbe_seq *q = b->live, *n; q; q = n) {
        n = q->next;
        free(q);
    }
    for (int i = 0; i < SBE_GVOCABS; i++) grammar_vocab_release(b->gvocab[i]);
    pthread_mutex_destroy(&b->gv_mu);
    runtime_close(&b->rt);
    free(b);
    memset(be, 0, sizeof *be);
}
