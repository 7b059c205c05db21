/* The one decode engine. generate, run, bench and the server all drive engine_step(); a single
 * prompt is a batch of one.
 *
 * Each step: admit queued sequences while slots allow (n_parallel), give every decoding
 * sequence one row and prefilling sequences chunks (prefill_chunk) within the step token budget
 * (max_batch_tokens); a prompt starved for prefill_grant_interval steps gets a chunk anyway.
 * KV is reserved per step; when the pool runs out the youngest sequence is preempted (its KV
 * released, its tokens recomputed later; the prefix cache usually brings most of them back).
 * One forward over the mixed batch; logits only for rows that are sampled; sampler; finish
 * checks (EOS, max tokens, context full, stop signalled by the token callback, cancel).
 *
 * Threading: engine_submit() and engine_cancel() may be called from any thread; engine_step()
 * and every callback run on the thread that steps. */
#ifndef MLXCEL_ENGINE_ENGINE_H
#define MLXCEL_ENGINE_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "engine/sampler.h"
#include "grammar/grammar.h"
#include "kv/kv_cache.h"
#include "model/model.h"

typedef enum {
    ENGINE_FINISH_NONE = 0,
    ENGINE_FINISH_EOS,        /* an EOS id of config/generation_config: "stop" */
    ENGINE_FINISH_STOP,       /* the token callback matched a stop string: "stop" */
    ENGINE_FINISH_LENGTH,     /* max_tokens reached: "length" */
    ENGINE_FINISH_CONTEXT,    /* context full: "length" */
    ENGINE_FINISH_CANCELLED,  /* engine_cancel: "cancelled" */
    ENGINE_FINISH_ERROR,      /* could not run (e.g. KV pool smaller than the sequence): "error" */
    ENGINE_FINISH_EMBEDDED,   /* an embedding request computed its vector(s): "stop" */
} engine_finish;

/* OpenAI-style reason: "stop", "length", "cancelled", "error". */
const char *engine_finish_name(engine_finish f);
/* Precise reason: "eos", "stop_string", "max_tokens", "context_full", "cancelled", "error",
 * "embedded". */
const char *engine_finish_detail(engine_finish f);

typedef struct engine_params {
    int n_parallel;             /* sequences running at once (--n-parallel / slots) */
    int max_batch_tokens;       /* token rows per step (-b/--batch-size) */
    int prefill_chunk;          /* prefill rows per sequence per step (--prefill-chunk-size) */
    int prefill_grant_interval; /* steps a waiting prompt may be starved (--prefill-grant-interval) */
    int ctx_size;               /* tokens per sequence (prompt + generated) */
    kv_storage storage;         /* auto | dense | paged */
    int block_size;             /* paged: tokens per block */
    int n_kv_blocks;            /* paged: pool size; 0 = n_parallel * ctx_size / block_size */
    bool prefix_cache;          /* paged: reuse cached prompt blocks */
    kv_type cache_type_k;       /* -ctk: K cache type (0 = the backend's: CPU f32, CUDA bf16) */
    kv_type cache_type_v;       /* -ctv: V cache type */
} engine_params;

/* n_parallel 1, batch 2048, chunk 512, grant 4, ctx min(4096, max positions), auto, 16, on. */
void engine_params_default(engine_params *p, const model_spec *spec);

/* Forwards recorded per sequence before its first token (MLXCEL_PROFILE_TTFT's breakdown). */
#define ENGINE_TTFT_STEPS 16

typedef struct engine_seq_stats {
    int n_prompt;          /* prompt tokens as submitted */
    int n_cached;          /* prompt tokens reused from the prefix cache at first admission */
    int n_generated;
    int n_preempted;
    double t_submit, t_start, t_first_token, t_finish; /* mx_now() seconds */
    /* ---- before the first token: every forward that carried this sequence's prompt rows
     * (recomputation after a preemption too); the first ENGINE_TTFT_STEPS in detail ---- */
    int n_prefill_steps;
    double prefill_seconds;                       /* all of them */
    double prefill_step_s[ENGINE_TTFT_STEPS];     /* each forward's time */
    int prefill_step_rows[ENGINE_TTFT_STEPS];     /* this sequence's rows in it */
    int prefill_step_all_rows[ENGINE_TTFT_STEPS]; /* every sequence's rows in it */
    double t_first_forward_end; /* end of the forward whose logits gave the first token; the
                                   sampler ran between it and t_first_token */
} engine_seq_stats;

/* Called for every sampled token (EOS included). Return nonzero to finish the sequence with
 * ENGINE_FINISH_STOP (a stop string matched). */
typedef int (*engine_token_cb)(void *user, int64_t id, int32_t token, float logprob);
typedef void (*engine_finish_cb)(void *user, int64_t id, engine_finish reason,
                                 const engine_seq_stats *st);
/* Optional: the raw logits [vocab] of each sampled position, before any sampling transform
 * (golden tests, logprob reporting). */
typedef void (*engine_logits_cb)(void *user, int64_t id, const float *logits, int vocab);

/* What a request computes. A generation samples tokens from the logits; an embedding runs its
 * prompt only (chunked like any prefill, several per step beside generations, no token
 * generated) and pools the final hidden states (after the model's final norm, before the
 * lm_head) of its positions, then finishes with ENGINE_FINISH_EMBEDDED and frees its KV. */
typedef enum engine_req_kind { ENGINE_REQ_GENERATE = 0, ENGINE_REQ_EMBED } engine_req_kind;

/* Pooling of an embedding (llama.cpp's pooling types): the last position's state, the mean
 * over every position, the first position's (CLS), or every position's (none). */
typedef enum engine_pooling {
    ENGINE_POOL_LAST = 0,
    ENGINE_POOL_MEAN,
    ENGINE_POOL_CLS,
    ENGINE_POOL_NONE,
} engine_pooling;

/* "last", "mean", "cls", "none"; parse returns 0, or -1 for another name. */
const char *engine_pooling_name(engine_pooling p);
int engine_pooling_parse(const char *s, engine_pooling *out);

/* The result of an embedding request, once, right before its on_finish(EMBEDDED): embd
 * [n_vec, dim] (n_vec 1, or the prompt's length with ENGINE_POOL_NONE), not normalized; valid
 * during the call only. */
typedef void (*engine_embed_cb)(void *user, int64_t id, const float *embd, int n_vec, int dim);

typedef struct engine_request {
    engine_req_kind kind;      /* default ENGINE_REQ_GENERATE */
    engine_pooling pooling;    /* ENGINE_REQ_EMBED */
    engine_embed_cb on_embed;  /* ENGINE_REQ_EMBED: required */
    const int32_t *prompt;     /* copied */
    int n_prompt;
    sampling_params sampling;
    int max_tokens;            /* <= 0: until EOS or the context is full */
    bool ignore_eos;
    engine_token_cb on_token;
    engine_finish_cb on_finish;
    engine_logits_cb on_logits;
    void *user;
    /* The caller never asks engine_top_logprobs for this sequence: with plain greedy sampling
     * (no penalty, bias or logits callback) a device backend may then pick the token on the
     * device and send only its id and logprob to the host (CUDA). Default false. */
    bool allow_device_sampling;
    /* Constrained decoding (docs/structured-output.md): each sampled token of this sequence is
     * drawn from the tokens `grammar` allows next over `grammar_vocab` (the model's tokenizer;
     * its EOS ids must include the model's). The engine keeps a matcher beside the sequence,
     * created at submit and freed with it (both retained meanwhile): before sampling, the
     * tokens the grammar refuses get -inf (after on_logits, which sees the raw row; before
     * bias, penalties and the sampler, so greedy and every sampling option work under it), and
     * the matcher advances by each sampled token. EOS is allowed only where the grammar may end
     * and is the only choice once it is complete; under a grammar EOS ends the sequence even
     * with ignore_eos. Device sampling is off for such a sequence. Preemption recomputes the
     * KV of kept tokens only, so the matcher is never rewound. NULL: unconstrained. */
    grammar *grammar;
    grammar_vocab *grammar_vocab;
    /* A lazy grammar: the output is free until `grammar_trigger` (grammar_trigger_len bytes, the
     * start of every sentence of the grammar, e.g. a tool-call opener) first appears in it; the
     * matcher then starts there, fed the output from the trigger on, and constrains what
     * follows. NULL: the grammar applies from the first token. (Strict tool calls under
     * tool_choice auto.) */
    const char *grammar_trigger;
    int grammar_trigger_len;
} engine_request;

typedef struct engine engine;

/* The engine borrows the model (free it after the engine). */
int engine_new(engine **out, model *m, const engine_params *p, mx_error *err);
void engine_free(engine *e);

/* Returns the sequence id (>= 0), or -1 with err (empty prompt, prompt that leaves no room in
 * the context (an embedding's may fill it), a generation on a model without lm_head, out of
 * memory).
 * Prefix cache: an embedding's KV is what a generation of the same tokens would write, so its
 * full blocks are indexed like any prompt's; a last-pooled embedding also attaches cached
 * blocks (its last position is always computed), mean / cls / none never do (they need the
 * state of every position, or of the first). */
int64_t engine_submit(engine *e, const engine_request *r, mx_error *err);
/* Finishes the sequence with ENGINE_FINISH_CANCELLED at the next step (no-op if unknown). */
void engine_cancel(engine *e, int64_t id);
/* One step. Returns 1 while work remains, 0 when idle, -1 on a backend error. */
int engine_step(engine *e, mx_error *err);
/* Steps until idle. */
int engine_run(engine *e, mx_error *err);
bool engine_has_work(engine *e);

kv_storage engine_storage(const engine *e);
/* Why that storage was chosen (e.g. "auto: llama is a qualified family"). */
const char *engine_storage_reason(const engine *e);
const engine_params *engine_params_of(const engine *e);
kv_cache *engine_kv(engine *e);

typedef struct engine_stats {
    uint64_t steps, rows, preemptions;
    int running, queued;
    /* ---- server metrics (added by the serve branch) ---- */
    int last_rows, last_seqs;          /* rows and sequences of the last forward */
    uint64_t prefill_rows, decode_rows;/* rows of prompt chunks (recomputation included) vs
                                          single decode rows */
    uint64_t prefill_chunks;           /* prompt chunks computed */
    uint64_t prefill_grants;           /* chunks granted to a starved prompt over the budget */
    uint64_t prefix_hits, prefix_misses;/* first admissions reusing >= 1 cached block, or none */
    uint64_t prefix_reused_tokens;     /* prompt tokens those hits did not recompute */
    double prefill_seconds, decode_seconds; /* forward time split by the rows' share */
    uint64_t grammar_masks;            /* token masks computed for constrained rows */
    double grammar_seconds;            /* time computing them (worker or step thread) */
    double grammar_wait_seconds;       /* of which the step waited for after its forward (all
                                          of it without the overlap worker) */
} engine_stats;
void engine_get_stats(engine *e, engine_stats *st);

/* Inside an engine_token_cb only: the statistics so far of the sequence just reported (its
 * first token's callback sees the whole prefill breakdown); NULL outside a token callback. */
const engine_seq_stats *engine_token_stats(const engine *e);

/* Inside an engine_token_cb only: the n most likely alternatives of the token just reported
 * (sampler_top_logprobs of that sequence's sampler: the distribution its logprob comes from).
 * Returns how many were written; 0 outside a token callback. (serve branch) */
int engine_top_logprobs(const engine *e, int n, int32_t *ids, float *logprobs);

/* Applies pending engine_cancel()s now, without a forward: each cancelled sequence gets its
 * finish callback and releases its KV before this returns. Engine thread only, never from a
 * callback. (serve branch: the server's cancel must free KV at once.) */
void engine_apply_cancels(engine *e);

#endif
