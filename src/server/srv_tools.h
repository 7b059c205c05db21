/* The tool-calling and reasoning layer of the chat-shaped routes: tool definitions, tool_choice,
 * the chat template's capabilities (which call syntax, how it wants arguments and ids), the
 * prompt rendered for a request, the reply parser's configuration, and the hook that turns a
 * tool_choice that must be enforced into a grammar (srv_tools_grammar.c).
 *
 * /v1/chat/completions uses it through srv_chat_fields.c (request fields) and srv_chat_out.c
 * (responses); a Responses or Messages route converts its own tool and message shapes into the
 * OpenAI chat shapes that templates expect, fills a srv_chat_opts, and calls srv_chat_render and
 * srv_chat_parser_new the same way. */
#ifndef MLXCEL_SERVER_SRV_TOOLS_H
#define MLXCEL_SERVER_SRV_TOOLS_H

#include <jansson.h>
#include <stdbool.h>

#include "base/error.h"
#include "server/srv_config.h"
#include "server/srv_engine.h"
#include "server/srv_toolparse.h"

/* ==== Tool definitions ==== */
typedef struct srv_tool {
    char *name;
    json_t *parameters; /* JSON schema of the arguments (owned), NULL when none was given */
    bool strict;        /* the arguments must follow the schema exactly (needs enforcement) */
} srv_tool;

struct srv_tool_set {
    srv_tool *t;
    int n;
    json_t *openai; /* the tools as the template sees them: [{type:"function", function:{..}}] */
};

/* Adds one function tool; the caller also appends its OpenAI-shaped object to set->openai. */
int srv_tool_set_add(srv_tool_set *s, const char *name, const json_t *parameters, bool strict, mx_error *err);
/* The OpenAI chat `tools` array, checked (names as OpenAI allows them: [A-Za-z0-9_-]{1,64}).
 * On error *field names the offending element ("tools[2].function.name"). */
int srv_tool_set_parse_openai(srv_tool_set *s, const json_t *tools, char *field, size_t field_cap, mx_error *err);
void srv_tool_set_clear(srv_tool_set *s);

/* ==== tool_choice ==== */
typedef enum srv_tool_choice_mode {
    SRV_TOOL_CHOICE_AUTO = 0, /* the model decides */
    SRV_TOOL_CHOICE_NONE,     /* no call: tools are not rendered and replies are not parsed for calls */
    SRV_TOOL_CHOICE_REQUIRED, /* at least one call (enforced by a grammar) */
    SRV_TOOL_CHOICE_NAMED,    /* a call of `name` (enforced by a grammar) */
} srv_tool_choice_mode;

typedef struct srv_tool_choice {
    srv_tool_choice_mode mode;
    char name[72];
} srv_tool_choice;

/* ==== A request's options for this layer (shared by its choices: reference counted) ==== */
typedef struct srv_chat_opts {
    int refs;
    srv_tool_set tools;
    srv_tool_choice choice;
    bool parallel;               /* parallel_tool_calls (default true) */
    bool reasoning_given;        /* a per-request reasoning_format */
    srv_reasoning_mode reasoning;
    char reasoning_effort[16];   /* "" when not given */
    char *prefill;               /* text that continues the rendered prompt (Anthropic's final
                                  * assistant message), or NULL; owned */
    /* resolved by srv_chat_render */
    srv_tool_format format;      /* NONE when calls are not parsed */
    srv_reasoning_mode reasoning_used;
    bool start_in_reasoning;     /* the rendered prompt ends inside <think> */
    grammar *call_grammar;       /* an enforced tool_choice: the reply's grammar (a reference) */
    char call_trigger[64];       /* "" from the first token; else (strict tools under auto) the
                                    grammar starts at this call opener's first occurrence */
} srv_chat_opts;

srv_chat_opts *srv_chat_opts_new(void);
srv_chat_opts *srv_chat_opts_ref(srv_chat_opts *o);
void srv_chat_opts_unref(srv_chat_opts *o);

/* ==== What the chat template can do (probed once at start-up) ==== */
typedef struct srv_chat_caps {
    srv_tool_format format;        /* the call syntax (detected, or --tool-call-parser) */
    bool renders_tools;            /* the template reads `tools` */
    bool object_args;              /* it wants tool_calls[].function.arguments as objects */
    bool id9;                      /* it wants tool call ids of 9 alphanumerics (Mistral) */
    bool empty_content;            /* a call-only turn needs content "" rather than null (Qwen 3) */
    bool thinks;                   /* it knows <think> */
    bool enable_thinking;          /* it reads enable_thinking */
    bool reasoning_effort;         /* it reads reasoning_effort */
    srv_reasoning_mode reasoning;  /* --reasoning-format (auto resolved) */
    json_t *kwargs;                /* --chat-template-kwargs, or NULL */
} srv_chat_caps;

/* The call syntax a template's text implies (SRV_TOOLS_NONE when none is known). */
srv_tool_format srv_tools_detect(const char *template_text);
const char *srv_tool_format_name(srv_tool_format f);
/* "auto" -> -1, a name of srv_tool_format_name (or vLLM's llama3_json / qwen / hermes) -> it;
 * -2 when unknown. */
int srv_tool_format_parse(const char *s);
/* llama-server's names: none, auto (= deepseek), deepseek, deepseek-legacy. -1 unknown. */
int srv_reasoning_parse(const char *s, srv_reasoning_mode *out);

int srv_chat_caps_init(srv_chat_caps *c, const srv_backend *be, const srv_config *cfg, mx_error *err);
void srv_chat_caps_free(srv_chat_caps *c);

/* ==== Prompt ==== */
/* Messages as the template wants them (a new array): arguments strings parsed into objects
 * when caps->object_args, ids mapped to 9 alphanumerics when caps->id9 (the same id always
 * maps to the same value, so a call and its result still match), a `role: tool` message
 * given the `name` of the call it answers. */
json_t *srv_chat_template_messages(const srv_chat_caps *caps, const json_t *messages);
/* Renders a chat request: `extra` holds `tools` (OpenAI shape) and the template kwargs; the
 * server's --chat-template-kwargs go under them; tool_choice none leaves tools out; opts->prefill
 * is appended to the prompt (the reply continues it). Checks that
 * what the request asks can take effect with this template (a parseable call syntax, a
 * template that reads reasoning_effort ...), resolves opts->format / reasoning_used /
 * start_in_reasoning. On error *param names the request field. */
int srv_chat_render(const srv_chat_caps *caps, const srv_backend *be, srv_chat_opts *opts, const json_t *messages,
                    const json_t *extra, bool add_generation_prompt, char **prompt, const char **param,
                    mx_error *err);
/* Whether the rendered prompt ends inside an open <think> (the template starts the thoughts). */
bool srv_prompt_opens_think(const char *prompt);

/* ==== Reply parsing ==== */
/* Whether a chat reply goes through the parser (tools parsed or reasoning extracted). */
bool srv_chat_parses(const srv_chat_opts *o);
srv_cp *srv_chat_parser_new(const srv_chat_opts *o);
/* Special-token texts the reply must show for the parser (markers of the format, <think>):
 * up to `cap` pointers to static strings. */
int srv_chat_keep_pieces(const srv_chat_opts *o, const char **out, int cap);

/* ==== Enforcement (tool_choice required / named, strict tools) ==== */
/* Whether the request needs constrained decoding to be honoured. */
bool srv_tools_need_constraint(const srv_chat_opts *o);

/* The grammar of the family's call syntax for this request's tools and choice, as GBNF
 * (llama.cpp's grammar format, root rule "root"). schema_rules converts one parameters schema
 * into GBNF rules defining `rule` (the grammar module's JSON-schema converter); NULL uses a
 * generic JSON-object rule. lazy: the grammar applies from the first `trigger` in the output
 * on (tool_choice auto with strict tools); else from the first token. */
typedef char *(*srv_schema_rules_fn)(void *ctx, const json_t *schema, const char *rule, mx_error *err);
typedef struct srv_tool_constraint {
    char *gbnf;       /* malloc'd */
    bool lazy;
    char trigger[64]; /* the call opener (lazy only) */
} srv_tool_constraint;
int srv_tools_constraint(srv_tool_format fmt, const srv_chat_opts *o, srv_schema_rules_fn schema_rules, void *ctx,
                         srv_tool_constraint *out, mx_error *err);
/* tool_choice required / named, or strict tools: compiles the constraint into o->call_grammar
 * (the request's sampling grammar, srv_http.c); under tool_choice auto (strict tools) a lazy
 * one, from the family's call opener on (o->call_trigger). *param names the field on error. */
int srv_tools_enforce(srv_tool_format fmt, srv_chat_opts *o, const char **param, mx_error *err);

#endif
