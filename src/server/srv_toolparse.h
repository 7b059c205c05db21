/* Streaming parser of a chat reply: splits the model's text into content, reasoning
 * (<think>...</think>) and tool calls in the model family's own syntax, as the text arrives.
 *
 * It is a byte machine: the final message depends only on the whole text, never on how it was
 * cut into pieces (tests/unit/test_srv_toolparse.c feeds every transcript cut at every byte).
 * Text that may still turn out to be a marker (a partial "<tool_call>" at the end of what has
 * arrived) is withheld and released as content as soon as it cannot be one.
 *
 * Used by the chat route (srv_chat_out.c) and meant for any route that answers with a chat
 * message (Responses, Anthropic Messages): events come through a sink, and the accumulated
 * message can be read at the end. */
#ifndef MLXCEL_SERVER_SRV_TOOLPARSE_H
#define MLXCEL_SERVER_SRV_TOOLPARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ==== Formats ==== */
typedef enum srv_tool_format {
    SRV_TOOLS_NONE = 0,    /* no tool-call parsing */
    SRV_TOOLS_HERMES,      /* Qwen 2.5 / 3 / 3.5, Hermes: <tool_call>{"name":..,"arguments":..}</tool_call>,
                            * also the XML body <function=NAME><parameter=K>V</parameter></function> */
    SRV_TOOLS_LLAMA3,      /* Llama 3.x: {"name":..,"parameters":..} and <|python_tag|> */
    SRV_TOOLS_MISTRAL,     /* [TOOL_CALLS][{..},..] and [TOOL_CALLS]NAME[ARGS]{..} */
    SRV_TOOLS_DEEPSEEK_V3, /* <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME ```json .. ``` */
} srv_tool_format;

/* llama-server's --reasoning-format: none leaves <think> in the content; deepseek moves it to
 * reasoning_content; legacy (deepseek-legacy) fills reasoning_content and keeps the tags and the
 * thoughts in the content too. */
typedef enum srv_reasoning_mode {
    SRV_REASONING_NONE = 0,
    SRV_REASONING_DEEPSEEK,
    SRV_REASONING_LEGACY,
} srv_reasoning_mode;

/* The request's tools, for the parser's two questions (implemented in srv_tools.c). */
typedef struct srv_tool_set srv_tool_set;
bool srv_tool_set_has(const srv_tool_set *t, const char *name, size_t len);
/* JSON schema type of parameter `key` of tool `name` ("string", "integer", ...), NULL unknown */
const char *srv_tool_set_param_type(const srv_tool_set *t, const char *name, const char *key);

/* ==== Events ==== */
typedef enum srv_cp_kind {
    SRV_CP_CONTENT = 0, /* text: a content fragment */
    SRV_CP_REASONING,   /* text: a reasoning fragment */
    SRV_CP_CALL,        /* a tool call begins: index, id, text = the function's name */
    SRV_CP_ARGS,        /* text: a fragment of call `index`'s arguments (a JSON text) */
} srv_cp_kind;

typedef struct srv_cp_event {
    srv_cp_kind kind;
    int index;        /* SRV_CP_CALL / SRV_CP_ARGS: the call, 0.. */
    const char *text; /* valid during the callback */
    size_t len;
    const char *id;   /* SRV_CP_CALL: "call_..." */
} srv_cp_event;

/* Events of one feed, in order; consecutive fragments of one kind come as one event. */
typedef void (*srv_cp_sink)(void *ctx, const srv_cp_event *ev);

typedef struct srv_cp_config {
    srv_tool_format format;       /* NONE: tool calls are not parsed (tool_choice none, no tools) */
    srv_reasoning_mode reasoning;
    bool start_in_reasoning;      /* the prompt opened <think>: the reply starts inside it */
    bool parallel;                /* false: calls after the first are dropped (parallel_tool_calls) */
    const srv_tool_set *tools;    /* may be NULL; must outlive the parser */
    uint64_t id_seed;             /* call ids: 0 = random, else deterministic (tests) */
} srv_cp_config;

typedef struct srv_cp srv_cp;

srv_cp *srv_cp_new(const srv_cp_config *cfg);
void srv_cp_free(srv_cp *p);
/* Text of the reply, in pieces of any size (a piece may end inside a UTF-8 character). */
void srv_cp_feed(srv_cp *p, const char *text, size_t n, srv_cp_sink sink, void *ctx);
/* End of the reply: withheld text is released, an unfinished call is closed as it stands. */
void srv_cp_finish(srv_cp *p, srv_cp_sink sink, void *ctx);

/* ==== The accumulated message (everything emitted so far) ==== */
const char *srv_cp_content(const srv_cp *p, size_t *len);
const char *srv_cp_reasoning(const srv_cp *p, size_t *len);
int srv_cp_n_calls(const srv_cp *p);
const char *srv_cp_call_id(const srv_cp *p, int i);
const char *srv_cp_call_name(const srv_cp *p, int i);
const char *srv_cp_call_args(const srv_cp *p, int i, size_t *len);

/* Shared helpers (srv_toolparse_util.c) */
/* Length of the longest prefix of s[0..n) that does not end inside a UTF-8 character. */
size_t srv_utf8_complete(const char *s, size_t n);

#endif
