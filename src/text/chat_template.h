/* Chat templates: a Jinja subset interpreter that renders the templates shipped with real
 * checkpoints (tokenizer_config.json "chat_template" or chat_template.jinja) byte-identically
 * to transformers' apply_chat_template. */
#ifndef MLXCEL_TEXT_CHAT_TEMPLATE_H
#define MLXCEL_TEXT_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "base/error.h"

typedef struct jinja_template jinja_template;

/* Compiles template source. Errors name the construct and the line. */
int jinja_compile(jinja_template **out, const char *src, mx_error *err);
void jinja_free(jinja_template *t);
/* Renders with `ctx` (a JSON object) as the global variables. *out malloc'd.
 * raise_exception("msg") becomes an error whose message contains msg. */
int jinja_render(const jinja_template *t, const json_t *ctx, char **out, mx_error *err);

/* Bounds on one render, so that no template (or fuzz input) can run away. Exceeding one is an
 * error naming the limit. jinja_render uses jinja_default_limits. */
typedef struct jinja_limits {
    size_t max_output;  /* bytes of rendered text (also of any intermediate string) */
    size_t max_memory;  /* bytes of values allocated during the render */
    uint64_t max_steps; /* expression evaluations + loop iterations */
    int max_depth;      /* nested evaluation / macro recursion */
} jinja_limits;
extern const jinja_limits jinja_default_limits;
int jinja_render_ex(const jinja_template *t, const json_t *ctx, const jinja_limits *lim, char **out,
                    mx_error *err);

typedef struct chat_template chat_template;

/* Loads the template of a checkpoint dir: chat_template.jinja, else tokenizer_config.json's
 * "chat_template" (a string, or a list of {name, template} where "default" is used), plus
 * bos_token/eos_token. A file given by path overrides (--chat-template-file). */
int chat_template_load(chat_template **out, const char *model_dir, const char *override_file,
                       mx_error *err);
void chat_template_free(chat_template *ct);
/* The template's Jinja text as loaded (valid while ct lives). */
const char *chat_template_source(const chat_template *ct);
/* messages: JSON array of {role, content, ...}; extra: optional object merged into the context
 * (tools, enable_thinking, ...). Sets bos_token, eos_token, add_generation_prompt. */
int chat_template_apply(const chat_template *ct, const json_t *messages, const json_t *extra,
                        bool add_generation_prompt, char **out, mx_error *err);

#endif
