/* Request bodies of the generation routes (OpenAI chat/completions, llama-server /completion)
 * parsed and validated into one internal struct. Every rejected field is named in the error
 * (err->msg starts with the field path) and its name is copied to `bad_param`. */
#ifndef MLXCEL_SERVER_SRV_REQUEST_H
#define MLXCEL_SERVER_SRV_REQUEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "grammar/grammar.h"
#include "server/srv_config.h"
#include "server/srv_engine.h"

#define SRV_MAX_STOPS 16
#define SRV_MAX_CHOICES 128 /* n x prompts of one request */

typedef enum { SRV_API_CHAT = 0, SRV_API_COMPLETIONS, SRV_API_LLAMA_COMPLETION } srv_api;

struct srv_chat_opts; /* srv_tools.h */

typedef struct srv_request {
    srv_api api;
    char model[256];        /* as sent ("" when absent) */
    /* Prompt: text (completions) or ids (when given as token arrays); chat gives messages. */
    char *prompt_text;
    int32_t *prompt_ids;
    size_t n_prompt_ids;
    /* llama-server's mixed prompt ([12, "text", 34]): validated, tokenized by
     * srv_request_mixed_prompt into prompt_ids (owned; NULL otherwise) */
    json_t *prompt_mixed;
    /* /v1/completions' list of prompts (2 or more, each checked): element 0 is also parsed into
     * the fields above; the others are tokenized per choice by the server (owned; else NULL) */
    json_t *prompt_list;
    int n_choices;          /* OpenAI `n` (1..SRV_MAX_CHOICES); choices = n x prompts */
    json_t *messages;       /* chat: normalized [{role, content: string, ...}] (owned) */
    json_t *template_extra; /* chat: {tools, ...chat_template_kwargs} or NULL (owned) */
    bool add_generation_prompt; /* chat: end the prompt with the assistant header (default) */
    int max_tokens;         /* -1 = until the context is full */
    bool stream;
    bool include_usage;     /* stream_options.include_usage */
    char *stops[SRV_MAX_STOPS];
    int n_stops;
    srv_sampling sampling;  /* sampling.logit_bias owned */
    /* /completion logit_bias entries given as text (llama-server: the bias applies to every
     * token of the string), resolved by srv_request_text_bias once a tokenizer is at hand */
    char **bias_text;
    double *bias_text_value;
    int n_bias_text;
    int completion_logprobs; /* /v1/completions `logprobs` N (-1 = not requested) */
    struct srv_chat_opts *chat; /* chat: tools, tool_choice, reasoning (srv_chat_fields.c; a reference) */
    char user[256];
    /* structured output (response_format / json_schema / grammar; srv_structured.c): the
     * compiled grammar (a reference, released by srv_request_free), NULL when unconstrained;
     * grammar_vocab: the backend's token bytes, set by the HTTP layer (borrowed) */
    grammar *grammar;
    grammar_vocab *grammar_vocab;
    char grammar_field[32];  /* the field it came from: response_format, json_schema, grammar */
    char grammar_trigger[64]; /* "": the grammar applies from the first token; else from this
                                 text's first occurrence on (strict tools under tool_choice auto) */
    char bad_param[64];     /* field named by the last error */
} srv_request;

/* jansson's parse error as a client reads it ("invalid JSON at line L column C: ...", or a
 * plain sentence for U+0000 in a string, whose library text names a jansson flag). */
void srv_json_error_msg(const json_error_t *je, char *buf, size_t cap);

/* The chat fields of the tool and reasoning layer, and the OpenAI fields refused (srv_chat_fields.c). */
int srv_chat_parse_fields(srv_request *r, json_t *o, mx_error *err);

/* vocab_size bounds logit_bias and prompt ids. Returns 0 or -1 (err names the field). */
int srv_request_parse(srv_request *r, srv_api api, const char *body, size_t len,
                      const srv_config *defaults, int vocab_size, mx_error *err);
void srv_request_free(srv_request *r);
/* dst = what one more choice of src needs (sampling with its logit_bias, stops, limits and
 * response fields), owned apart; no prompt, messages or unresolved text biases. 0 or -1
 * (dst still freeable). */
int srv_request_copy_choice(srv_request *dst, const srv_request *src, mx_error *err);

/* tokenize(ctx, text, add_special, ...) gives a string's ids (*ids malloc'ed), add_special:
 * with the tokenizer's BOS/prefix tokens. 0 or -1 with err. */
typedef int (*srv_tokenize_fn)(void *ctx, const char *text, bool add_special, int32_t **ids,
                               size_t *n, mx_error *err);
/* Resolves the text entries of logit_bias: each string's ids (no special tokens) get the
 * entry's bias. 0 or -1 (err names logit_bias). */
int srv_request_text_bias(srv_request *r, srv_tokenize_fn tokenize, void *ctx, int vocab_size,
                          mx_error *err);
/* llama-server's tokenize_mixed: the ids of array a, in order: an integer as given (checked
 * in [0, vocab)), a string tokenized, with the special tokens only when add_special and it is
 * a's first element. *ids malloc'ed. 0 or -1 with err (which element). */
int srv_tokenize_mixed(json_t *a, bool add_special, srv_tokenize_fn tokenize, void *ctx, int vocab,
                       int32_t **ids, size_t *n, mx_error *err);
/* Resolves a mixed prompt into prompt_ids (srv_tokenize_mixed with the special tokens). No-op
 * without one. 0 or -1 (err names prompt). */
int srv_request_mixed_prompt(srv_request *r, srv_tokenize_fn tokenize, void *ctx, int vocab,
                             mx_error *err);

/* ==== Structured output (srv_structured.c) ====
 * response_format, json_schema and grammar of request object o compiled into r->grammar (on
 * the calling thread; identical sources share one grammar through a small cache). 0, or -1
 * with err naming the field ("response_format.json_schema.schema: schema at /properties/age:
 * keyword 'multipleOf' is not supported") and r->bad_param the top-level one. */
int srv_request_parse_structured(srv_request *r, json_t *o, mx_error *err);
/* GBNF text compiled, or the grammar compiled for the same text before (the cache above): a
 * grammar a reference (grammar_release it). */
int srv_grammar_compile_cached(const char *gbnf, size_t len, grammar **out, mx_error *err);
/* Drops the cached grammars (tests, shutdown). */
void srv_grammar_cache_clear(void);

#endif
