/* The runtime: what every front end (generate, run, bench, compare, serve, tune, inspect) opens
 * before it can generate, opened in one place so the front ends cannot drift apart:
 *   backend -> KV cache types checked against it -> model (weights, or dummy ones) ->
 *   tokenizer -> chat template -> sampling defaults (generation_config.json) -> engine.
 * A front end fills rt_opts from its own flags, calls runtime_open, sets the engine parameters
 * it owns (slots, budgets) and calls runtime_start_engine. */
#ifndef MLXCEL_RUNTIME_RUNTIME_H
#define MLXCEL_RUNTIME_RUNTIME_H

#include <stdbool.h>

#include "backend/backend.h"
#include "base/error.h"
#include "engine/engine.h"
#include "model/model.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

typedef enum rt_tokenizer {
    RT_TOK_OPTIONAL = 0, /* loaded when DIR has tokenizer.json (generate, run) */
    RT_TOK_REQUIRED,     /* a missing tokenizer.json is an error (serve) */
    RT_TOK_NONE,         /* never loaded (bench, compare's model under test) */
} rt_tokenizer;

typedef struct rt_opts {
    const char *model_dir;
    const char *device;             /* "cpu" | "cuda"; NULL = cpu */
    int tp_size;                    /* tensor-parallel ranks, <= 1: one */
    bool dummy_weights;             /* --load-format dummy */
    kv_type cache_type_k, cache_type_v; /* checked against the backend before the weights load */
    rt_tokenizer tokenizer;
    const char *chat_template_file; /* NULL or "": the checkpoint's own */
    bool no_chat_template;          /* never load a template */
} rt_opts;

/* Which sampling fields generation_config.json set (runtime_generation_defaults). */
enum {
    RT_GEN_TEMPERATURE = 1 << 0,
    RT_GEN_TOP_P = 1 << 1,
    RT_GEN_TOP_K = 1 << 2,
    RT_GEN_REPEAT_PENALTY = 1 << 3,
};

typedef struct runtime {
    const backend_ops *be;
    model *m;
    const model_spec *spec;   /* model_spec_of(m) */
    tokenizer *tok;           /* NULL: none (see rt_opts.tokenizer) */
    chat_template *tpl;       /* NULL: the checkpoint declares none, or no_chat_template */
    char tpl_src[1024];       /* where tpl came from: the override path, "chat_template.jinja",
                                 "tokenizer_config.json"; "" without one */
    sampling_params sampling; /* greedy defaults < generation_config.json (no seed) */
    unsigned gen_fields;      /* RT_GEN_* bits generation_config.json set */
    engine *e;                /* runtime_start_engine */
    double load_seconds;      /* runtime_open's time (weights, tokenizer, template) */
} runtime;

void rt_opts_default(rt_opts *o);

/* Opens backend, model, tokenizer and template, and derives the sampling defaults. On failure
 * everything opened so far is closed again. */
int runtime_open(runtime *rt, const rt_opts *o, mx_error *err);
/* The engine over rt->m with the front end's parameters. */
int runtime_start_engine(runtime *rt, const engine_params *ep, mx_error *err);
void runtime_close(runtime *rt);

/* Sampling defaults as transformers' generate() reads generation_config.json: sampling only
 * when do_sample is true (temperature, top_p, top_k then apply), repetition_penalty always.
 * Starts from sp as given; *fields gets the RT_GEN_* bits that were set. */
void runtime_generation_defaults(const model_spec *s, sampling_params *sp, unsigned *fields);

/* Where DIR's chat template comes from (override first, then chat_template.jinja, then a
 * non-null "chat_template" of tokenizer_config.json); "" when it declares none. An unreadable
 * tokenizer_config.json names itself so that chat_template_load reports why. */
void runtime_template_source(const char *dir, const char *override_file, char *src, size_t n);

/* The lines `generate` prints and the server logs after loading: device, weights, quantization,
 * KV storage and cache types, autotune policy. Each line without its newline through `emit`. */
void runtime_describe(const runtime *rt, void (*emit)(void *user, const char *line), void *user);
/* "kv cache: K f32, V f32 (N bytes per token)": the engine's resolved cache types. */
void runtime_describe_kv(engine *e, char *buf, size_t len);

/* MLXCEL_PROFILE_TTFT=1: one line saying where a request's time to first token went, for
 * `generate` (stderr) and the server (its log):
 *   [TTFT] WHO: prompt P tok (C cached) | template+tokenize A ms | queue B ms |
 *   prefill N steps D ms (each step's ms and rows: this sequence's / the step's) |
 *   between steps E ms | first sample F ms | first byte out G ms | total H ms
 * prep_s: the front end's template + tokenize seconds; st: the engine's statistics at the
 * first token (engine_token_stats); t_out: mx_now() once the first token's bytes were written
 * (0: nothing written yet, e.g. a stop string holds it back). Total = prep + t_out - t_submit. */
void runtime_ttft_line(char *buf, size_t len, const char *who, double prep_s, const engine_seq_stats *st,
                       double t_out);

#endif
