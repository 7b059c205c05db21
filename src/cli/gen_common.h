/* Options and set-up shared by `generate` and `run`: model, tokenizer, sampling, engine. */
#ifndef MLXCEL_CLI_GEN_COMMON_H
#define MLXCEL_CLI_GEN_COMMON_H

#include <stdbool.h>

#include "engine/engine.h"
#include "runtime/runtime.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

#define GEN_MAX_STOPS 16

typedef struct gen_opts {
    const char *model_dir;
    int n_predict;              /* -1 = until EOS or the context is full */
    float temp, top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty;
    int top_k, repeat_last_n;
    bool temp_set, top_p_set, min_p_set, repeat_penalty_set, top_k_set;
    long long seed;             /* -1 = unset */
    bool ignore_eos;
    const char *device;         /* "cpu" | "cuda" */
    int tp_size;                /* tensor-parallel ranks (docs/tensor-parallel.md), default 1 */
    bool dummy_weights;         /* --load-format dummy: config.json only, generated weights */
    const char *storage;        /* auto | dense | paged */
    int prefill_chunk, ctx_size, batch_size, n_parallel, kv_blocks, block_size;
    bool no_prefix_cache;
    kv_type cache_type_k, cache_type_v; /* -ctk / -ctv (0: the backend's, CPU f32) */
    bool no_chat_template;
    const char *chat_template_file;
    const char *stops[GEN_MAX_STOPS];
    int n_stops;
    /* structured output (llama.cpp's flags): one of GBNF text / file, JSON schema text / file */
    const char *grammar, *grammar_file, *json_schema, *json_schema_file;
} gen_opts;

void gen_opts_default(gen_opts *o);
/* Tries argv[*i] as a shared option (advancing *i past its value). Returns 1 when consumed,
 * 0 when not a shared option, -1 on a bad value (message printed). */
int gen_opts_parse(gen_opts *o, int argc, char **argv, int *i, const char *cmd);
/* Help text of the shared options. */
extern const char *const k_gen_opts_help;

typedef struct gen_session {
    runtime rt;                 /* tok NULL when the directory has no tokenizer.json; tpl NULL
                                   without a template or with --no-chat-template */
    sampling_params sp;         /* the runtime's defaults with the flags applied */
    grammar *grammar;           /* --grammar / --json-schema: constrains every request, or NULL */
    grammar_vocab *grammar_vocab;
} gen_session;

/* Loads the model (and tokenizer when present), builds the sampling parameters (flags over
 * generation_config.json over defaults) and the engine; prints the KV storage choice and the
 * cache types. A cache type the device cannot hold is refused before the model loads. */
int gen_session_open(gen_session *s, const gen_opts *o, const char *cmd, mx_error *err);
void gen_session_close(gen_session *s);

/* The grammar of --grammar(-file) / --json-schema(-file), with the tokenizer's token bytes
 * (gen_grammar.c; called by gen_session_open). 0 when none is given. */
int gen_grammar_open(gen_session *s, const gen_opts *o, mx_error *err);

/* Renders messages (JSON array of {role, content}) with the chat template and tokenizes the
 * result without adding special tokens (the template writes them), as transformers'
 * apply_chat_template(tokenize=True). *ids malloc'd. */
int gen_render_chat(const gen_session *s, const json_t *messages, int32_t **ids, int *n, mx_error *err);
/* Tokenizes a raw prompt with the tokenizer's special-token handling (BOS). */
int gen_encode_raw(const gen_session *s, const char *text, int32_t **ids, int *n, mx_error *err);

/* "1,2,3" -> ids (malloc'd). */
int gen_parse_ids(const char *s, int32_t **ids, int *n, mx_error *err);

#endif
