/* The narrow seam between the HTTP server and what generates text.
 *
 * The server needs two things from a loaded model: text (tokenize, detokenize, chat template,
 * a streaming detokenizer that finds stop strings) and generation (submit a prompt with sampling
 * parameters, get one callback per token, cancel, step, statistics). Both are tables of function
 * pointers so that the whole HTTP layer is tested against a deterministic fake (tests/server/)
 * and runs unchanged on the real engine (src/server/srv_backend_engine.c adapts engine.h).
 *
 * Threading contract: every srv_engine_ops call and every callback it makes happens on the
 * server's single engine thread; the engine need not be thread-safe. srv_text_ops tokenize /
 * detokenize / apply_template are called from HTTP threads concurrently and must be reentrant
 * (they only read the loaded model). A srv_text_stream is used by one thread at a time. */
#ifndef MLXCEL_SERVER_SRV_ENGINE_H
#define MLXCEL_SERVER_SRV_ENGINE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "grammar/grammar.h"

#define SRV_MAX_TOP_LOGPROBS 20

/* ==== Sampling parameters of one request ==== */
typedef struct srv_logit_bias {
    int32_t id;
    float bias;
} srv_logit_bias;

typedef struct srv_sampling {
    float temperature;       /* 0 = greedy (argmax) */
    float top_p;             /* 1 = off */
    int top_k;               /* 0 = off */
    float min_p;             /* 0 = off */
    float presence_penalty;  /* OpenAI: -2..2, 0 = off */
    float frequency_penalty; /* OpenAI: -2..2, 0 = off */
    float repeat_penalty;    /* llama.cpp: 1 = off */
    int repeat_last_n;       /* window of the penalties; -1 = whole context */
    uint64_t seed;           /* used when has_seed; else the engine picks one */
    bool has_seed;
    bool ignore_eos;
    bool logprobs;           /* report the chosen token's log-probability */
    int top_logprobs;        /* 0..SRV_MAX_TOP_LOGPROBS alternatives per token */
    int n_logit_bias;
    srv_logit_bias *logit_bias; /* [n_logit_bias], owned by the request */
} srv_sampling;

/* ==== Per-token event (engine -> server) ==== */
struct engine_seq_stats;

typedef struct srv_token {
    int32_t id;
    float logprob;                               /* log p(id) before sampling filters */
    int n_top;                                   /* <= top_logprobs requested */
    int32_t top_ids[SRV_MAX_TOP_LOGPROBS];       /* most likely first */
    float top_logprobs[SRV_MAX_TOP_LOGPROBS];
    /* MLXCEL_PROFILE_TTFT, the first token only: the engine's statistics of the sequence at
     * that token (engine.h; malloc'd, the receiver owns it; NULL otherwise) */
    struct engine_seq_stats *ttft;
} srv_token;

typedef enum srv_finish {
    SRV_FINISH_NONE = 0,
    SRV_FINISH_EOS,       /* the model emitted an end-of-generation token */
    SRV_FINISH_LENGTH,    /* max_tokens or the context limit reached */
    SRV_FINISH_STOP,      /* a stop string matched (decided by the server) */
    SRV_FINISH_CANCELLED, /* client went away or the server cancelled */
    SRV_FINISH_ERROR,     /* the engine failed this sequence */
} srv_finish;

/* Pooling of an embedding (docs/embeddings.md): the final hidden state (after the model's final
 * norm, no lm_head) of the last position, the mean over all positions, the first position's,
 * or every position's. */
typedef enum srv_pooling { SRV_POOL_LAST = 0, SRV_POOL_MEAN, SRV_POOL_CLS, SRV_POOL_NONE } srv_pooling;

/* ==== One generation (or, with embed, one embedding) ==== */
typedef struct srv_gen {
    const int32_t *prompt; /* [n_prompt]; the engine copies it */
    int n_prompt;
    int max_tokens;        /* >= 1 */
    srv_sampling sampling; /* the engine copies what it keeps */
    /* Structured output: sample only what `grammar` allows over `grammar_vocab` (from
     * srv_text_ops.grammar_vocab); the engine retains both for the sequence. NULL: free. */
    grammar *grammar;
    grammar_vocab *grammar_vocab;
    const char *grammar_trigger; /* non-NULL: a lazy grammar from this text on (engine.h) */
    /* Engine thread. The EOS token itself is not reported: on_finish(EOS) follows instead. */
    void (*on_token)(void *user, const srv_token *tok);
    /* Engine thread, exactly once per successful submit, after the last on_token; also called
     * from cancel(). n_cached: prompt tokens served from the prefix cache. */
    void (*on_finish)(void *user, srv_finish why, int n_cached);
    void *user;
    /* An embedding instead of a generation: the prompt is run, nothing is generated (max_tokens
     * and sampling unused, no on_token); on_embed gets the pooled vector(s) embd [n_vec, dim]
     * (not normalized; n_vec 1, or n_prompt with SRV_POOL_NONE; valid during the call), then
     * on_finish(SRV_FINISH_EOS). Engine thread. A backend without embeddings fails the submit. */
    bool embed;
    srv_pooling pooling;
    void (*on_embed)(void *user, const float *embd, int n_vec, int dim);
} srv_gen;

/* ==== Engine statistics (for /metrics, /slots, /props) ==== */
typedef struct srv_engine_stats {
    int n_running;                 /* sequences holding a slot */
    int n_waiting;                 /* submitted, not yet admitted */
    int last_batch_rows;           /* sequences in the last step */
    int last_batch_tokens;         /* tokens in the last step (prefill + decode) */
    uint64_t steps_total;
    uint64_t prefill_chunks_total;
    uint64_t prefill_grants_total; /* chunks granted to waiting prompts during decode */
    uint64_t prompt_tokens_total;  /* prompt tokens actually computed (prefix hits excluded) */
    uint64_t decode_tokens_total;
    double prefill_seconds_total;  /* step time attributed to prefill */
    double decode_seconds_total;   /* step time attributed to decode */
    int64_t kv_blocks_total;
    int64_t kv_blocks_used;
    int kv_block_tokens;           /* tokens per block */
    uint64_t prefix_hits_total;    /* admitted sequences that reused >= 1 cached block */
    uint64_t prefix_misses_total;
    uint64_t prefix_reused_tokens_total;
    uint64_t decode_rows_total;    /* single-token decode rows stepped (prompt rows: prompt_tokens_total) */
    uint64_t preemptions_total;    /* sequences preempted (KV pool full) to be recomputed later */
} srv_engine_stats;

typedef struct srv_engine_ops {
    /* Queues a sequence; *id identifies it for cancel. Fails (no callback) on bad input. */
    int (*submit)(void *eng, const srv_gen *g, uint64_t *id, mx_error *err);
    /* Ends a sequence now and frees its KV blocks; calls on_finish(CANCELLED) unless it already
     * finished. Unknown ids are ignored. Never called from inside a callback. */
    void (*cancel)(void *eng, uint64_t id);
    /* One scheduler step. Returns 0, or -1 when the step failed as a whole (every running
     * sequence then gets on_finish(ERROR)). */
    int (*step)(void *eng, mx_error *err);
    bool (*has_work)(void *eng);
    void (*stats)(void *eng, srv_engine_stats *out);
} srv_engine_ops;

/* ==== Text ==== */
typedef struct srv_text_stream srv_text_stream;

typedef struct srv_text_ops {
    int (*tokenize)(void *txt, const char *text, size_t len, bool add_special, int32_t **ids,
                    size_t *n_ids, mx_error *err);
    /* skip_special as tokenizers' skip_special_tokens. *out malloc'd, NUL-terminated, *out_len
     * bytes (the text may hold U+0000 itself: InternLM2 has a piece for it). */
    int (*detokenize)(void *txt, const int32_t *ids, size_t n_ids, bool skip_special, char **out,
                      size_t *out_len, mx_error *err);
    /* One token's own bytes, as detokenize gives them but without replacing invalid UTF-8:
     * a token that is part of a character (a byte such as 0xC3) gives that byte. Reentrant;
     * *out malloc'd, *out_len bytes. For logprobs `bytes` and /tokenize pieces. */
    int (*token_bytes)(void *txt, int32_t id, char **out, size_t *out_len, mx_error *err);
    /* messages: OpenAI messages normalized to {role, content: string}; extra: optional object
     * merged into the template context. *out malloc'd. */
    int (*apply_template)(void *txt, const json_t *messages, const json_t *extra,
                          bool add_generation_prompt, char **out, mx_error *err);
    /* Streaming detokenizer with stop strings (tok_stream semantics). */
    srv_text_stream *(*stream_new)(void *txt, const char *const *stops, int n_stops);
    /* Returns 1 when a stop string matched (text before it emitted), else 0. */
    int (*stream_push)(srv_text_stream *s, int32_t id, const char **out, size_t *out_len);
    /* The stop string that matched (valid while s lives), NULL while none has. */
    const char *(*stream_stop_word)(srv_text_stream *s);
    void (*stream_flush)(srv_text_stream *s, const char **out, size_t *out_len);
    /* Optional (NULL: nothing to do): special tokens whose text is `pieces` are shown in the
     * stream although special tokens are skipped (tool-call and <think> markers). */
    void (*stream_keep)(srv_text_stream *s, const char *const *pieces, int n);
    void (*stream_free)(srv_text_stream *s);
    int (*vocab_size)(void *txt);
    /* The vocabulary's token bytes for constrained decoding (built on first use, then shared;
     * lives as long as the backend). Reentrant. NULL with err when the backend cannot
     * constrain (an op left NULL means the same). keep[0..n_keep): special tokens whose text a
     * grammar may produce (an enforced tool call's markers, which the stream shows through
     * stream_keep); every other special token stays out of every grammar. */
    grammar_vocab *(*grammar_vocab)(void *txt, const char *const *keep, int n_keep, mx_error *err);
    bool has_template;
} srv_text_ops;

/* ==== What a loaded model offers the server ==== */
typedef struct srv_model_info {
    char name[256];       /* served model id (first --alias, else the directory name) */
    char path[1024];
    char family[64];
    uint64_t n_params;
    char dtype[64];       /* "bf16", "affine-q4-g64", ... */
    uint64_t weight_bytes;
    uint64_t kv_bytes_per_token;
    uint64_t activation_bytes; /* estimate (src/model/estimate.c); 0 = unknown */
    uint64_t headroom_bytes;
    int n_ctx;            /* context per sequence */
    int n_ctx_train;
    char storage[16];     /* "dense" | "paged" */
    char storage_reason[256];
    char cache_type_k[16], cache_type_v[16]; /* resolved KV cache types ("f32", "q8_0", ...) */
    char chat_template[64]; /* where the template came from (start-up log) */
    const char *chat_template_text; /* its Jinja text for /props (owned by the backend), or NULL */
    char device[512];     /* backend line: "cpu", or the CUDA device, capability and settings */
    int n_embd;           /* hidden size: the length of an embedding */
    srv_pooling pooling;  /* embeddings: --pooling, else the checkpoint's sentence-transformers
                             1_Pooling/config.json, else last (srv_embed_st.c) */
} srv_model_info;

typedef struct srv_backend {
    const srv_engine_ops *eng_ops;
    void *eng;
    const srv_text_ops *text_ops;
    void *text;
    srv_model_info info;
} srv_backend;

#endif
