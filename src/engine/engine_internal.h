/* Engine internals shared by engine.c (scheduler, step) and engine_grammar.c (constrained
 * rows): the sequence and engine state. Not a public API. */
#ifndef MLXCEL_ENGINE_ENGINE_INTERNAL_H
#define MLXCEL_ENGINE_ENGINE_INTERNAL_H

#include <pthread.h>

#include "engine/engine.h"
#include "engine/engine_pool.h"

typedef enum { SEQ_QUEUED = 0, SEQ_RUNNING, SEQ_FINISHED } seq_state;

typedef struct seq {
    int64_t id;
    uint64_t arrival;          /* submission order; the youngest is preempted first */
    seq_state state;
    int32_t *tokens;           /* [cap] prompt + generated */
    int n_tokens, cap;
    int n_prompt;
    int n_generated;
    int max_tokens;
    bool ignore_eos;
    bool cancel;
    bool admitted_once;
    bool plain_greedy;         /* argmax, no penalty/bias, no logits callback: the backend may
                                  pick the token on the device (model_forward_greedy) */
    bool embed;                /* ENGINE_REQ_EMBED: pool (below), no sampler, no token */
    eng_pool pool;
    engine_embed_cb on_embed;
    kv_seq kv;                 /* n_tokens of kv = tokens with K/V in the cache */
    sampler *smp;
    grammar_matcher *gm;       /* constrained decoding: the grammar state, or NULL */
    struct seq_lazy *lazy;     /* a lazy grammar still waiting for its trigger, or NULL */
    const uint32_t *mask;      /* this step's token mask (gm's), NULL when not computed */
    engine_token_cb on_token;
    engine_finish_cb on_finish;
    engine_logits_cb on_logits;
    void *user;
    engine_seq_stats st;
    int starved;               /* steps waiting for a prefill chunk */
    int rows;                  /* rows planned this step */
    struct seq *next;          /* queue / incoming list */
} seq;

struct engine {
    model *m;
    const model_spec *spec;
    engine_params p;
    kv_cache *kv;
    char storage_reason[160];
    seq **running;             /* [n_parallel] */
    int n_running;
    seq *queue;                /* sorted by arrival */
    /* ---- cross-thread inbox ---- */
    pthread_mutex_t mu;
    seq *inbox;                /* submitted, not yet queued */
    int64_t *cancels;
    int n_cancels, cap_cancels;
    int64_t next_id;
    uint64_t next_arrival;
    /* ---- step buffers ---- */
    int cap_rows, cap_table;
    int32_t *tok, *pos, *sid, *rope_len, *out_rows, *table;
    int64_t *write_rows;
    seq **step_seqs;
    seq **cons;                /* [n_parallel] constrained sequences sampled this step */
    int *cons_row;             /* [n_parallel] their logits rows */
    float *logits;             /* [n_parallel, V] */
    int32_t *g_ids;            /* [n_parallel] device-greedy tokens */
    float *g_lps;              /* [n_parallel] their log-probabilities */
    int32_t *hid_rows;         /* [cap_rows] step rows whose hidden states embeddings pool */
    float *hidden;             /* [cap_hid, H] those states (host) */
    int cap_hid;
    engine_stats stats;
    const seq *reporting;      /* the sequence inside its token callback (engine_top_logprobs) */
    /* ---- mask worker (MLXCEL_GRAMMAR_OVERLAP): computes the constrained rows' masks while
     * the step's forward runs; cons[0..n_cons) are its rows between start and wait ---- */
    bool overlap;
    bool gw_started, gw_stop, gw_work;
    pthread_t gw_thread;
    pthread_mutex_t gw_mu;
    pthread_cond_t gw_cv;
    int n_cons;
    double gw_busy;            /* seconds the worker spent on the last batch */
};

/* ==== Constrained rows (engine_grammar.c) ==== */
/* A lazy grammar (engine_request.grammar_trigger) for s: no matcher until the trigger is out. */
int engine_lazy_new(seq *s, const engine_request *r, mx_error *err);
void engine_lazy_free(seq *s);
/* After token t joined s's output: on the trigger's first occurrence the matcher starts there. */
void engine_lazy_feed(seq *s, int32_t t);
/* This step's sampled constrained sequences (e->cons, their logits rows e->cons_row). */
void engine_cons_collect(engine *e, seq **ss, int n);
/* Hands them to the mask worker (started on first use); false when it cannot run. */
bool engine_gworker_start(engine *e);
void engine_gworker_stop(engine *e);
/* Until the worker is done with this step's rows (it reads the sequences). */
void engine_gworker_wait(engine *e);
/* After the forward: the masks (the worker's, or computed now) applied to the logits rows. */
void engine_cons_finish(engine *e, bool on_worker);

#endif
