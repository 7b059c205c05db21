/* POST /v1/responses: an OpenAI Responses request translated into a chat request.
 *
 * `input` (a string, or items) and `instructions` become chat messages: message items by role
 * (developer as system), a run of assistant-side items (reasoning, an assistant message,
 * function_call items) one assistant turn with reasoning_content, content and tool_calls, a
 * function_call_output item a `role: tool` message. previous_response_id puts the stored
 * conversation of that response (without its instructions, as OpenAI does) before the input.
 * Function tools become chat tools (`strict` defaults to true, OpenAI's default for this API),
 * `text.format` becomes `response_format`, `reasoning.effort` `reasoning_effort`. Every other
 * field takes effect here or is refused naming it (docs/apis.md). */
#include <stdlib.h>
#include <string.h>

#include "server/srv_api.h"
#include "server/srv_internal.h"
#include "server/srv_tools.h"

typedef struct tx {
    srv_api_job *a;
    char *bad;
    size_t cap;
    mx_error *err;
    json_t *msgs; /* chat messages */
    json_t *turn; /* the open assistant turn (in msgs), or NULL */
} tx;

#define FAIL(t, field, ...) srv_api_fail((t)->bad, (t)->cap, (t)->err, field, __VA_ARGS__)

static json_t *given(const json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return v && !json_is_null(v) ? v : NULL;
}

/* ==== Content ==== */
/* The text of `content`: a string, or parts joined by "\n" (input_text / output_text / refusal;
 * images, files and audio are refused naming the part). *out malloc'd. */
static int content_text(tx *t, const json_t *content, const char *field, char **out) {
    *out = NULL;
    if (json_is_string(content)) {
        *out = strdup(json_string_value(content));
        return *out ? 0 : FAIL(t, field, "out of memory");
    }
    if (!json_is_array(content)) return FAIL(t, field, "expected a string or an array of content parts");
    char *buf = NULL;
    size_t len = 0, cap = 0;
    srv_buf_append(&buf, &len, &cap, "", 0);
    for (size_t k = 0; k < json_array_size(content); k++) {
        const json_t *p = json_array_get(content, k);
        char f[128];
        snprintf(f, sizeof f, "%s[%zu]", field, k);
        const char *ty = json_string_value(json_object_get(p, "type"));
        if (!json_is_object(p) || !ty) {
            free(buf);
            return FAIL(t, f, "expected a content part {\"type\": \"input_text\", \"text\": ...}");
        }
        static const char *const k_text[] = {"type", "text", NULL};
        static const char *const k_out[] = {"type", "text", "annotations", "logprobs", NULL};
        static const char *const k_ref[] = {"type", "refusal", NULL};
        const char *key = "text";
        const char *const *keys = k_text;
        if (!strcmp(ty, "output_text")) keys = k_out;
        else if (!strcmp(ty, "refusal")) keys = k_ref, key = "refusal";
        else if (strcmp(ty, "input_text")) {
            free(buf);
            snprintf(f, sizeof f, "%s[%zu].type", field, k);
            return FAIL(t, f, "'%s' parts are not supported: this server takes text only (input_text, output_text, "
                              "refusal)", ty);
        }
        const json_t *tx_ = json_object_get(p, key);
        if (srv_api_check_keys(p, keys, f, t->bad, t->cap, t->err)) { free(buf); return -1; }
        if (!json_is_string(tx_)) {
            free(buf);
            snprintf(f, sizeof f, "%s[%zu].%s", field, k, key);
            return FAIL(t, f, "expected a string");
        }
        if (k) srv_buf_append(&buf, &len, &cap, "\n", 1);
        srv_buf_append(&buf, &len, &cap, json_string_value(tx_), json_string_length(tx_));
    }
    *out = buf;
    return buf ? 0 : FAIL(t, field, "out of memory");
}

/* ==== Items ==== */
static void close_turn(tx *t) { t->turn = NULL; }

/* The assistant turn items go into; a new one when `fresh` and the open one already has
 * content or calls (its text came before). */
static json_t *turn(tx *t, bool fresh) {
    if (t->turn && fresh &&
        (json_is_string(json_object_get(t->turn, "content")) || json_object_get(t->turn, "tool_calls")))
        t->turn = NULL;
    if (!t->turn) {
        t->turn = json_pack("{s:s, s:n}", "role", "assistant", "content");
        json_array_append_new(t->msgs, t->turn);
    }
    return t->turn;
}

static int item_message(tx *t, const json_t *it, const char *f) {
    static const char *const keys[] = {"type", "role", "content", "id", "status", NULL};
    if (srv_api_check_keys(it, keys, f, t->bad, t->cap, t->err)) return -1;
    const char *role = json_string_value(json_object_get(it, "role"));
    char ff[128];
    snprintf(ff, sizeof ff, "%s.role", f);
    if (!role || (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system") && strcmp(role, "developer")))
        return FAIL(t, ff, "expected user, assistant, system or developer");
    snprintf(ff, sizeof ff, "%s.content", f);
    char *text;
    if (content_text(t, json_object_get(it, "content"), ff, &text)) return -1;
    if (!strcmp(role, "assistant")) {
        json_t *tn = turn(t, true);
        json_object_set_new(tn, "content", json_string(text));
    } else {
        close_turn(t);
        /* developer messages are the system's (templates know system, user, assistant, tool) */
        json_array_append_new(t->msgs, json_pack("{s:s, s:s}", "role", strcmp(role, "developer") ? role : "system",
                                                 "content", text));
    }
    free(text);
    return 0;
}

static int item_call(tx *t, const json_t *it, const char *f) {
    static const char *const keys[] = {"type", "call_id", "name", "arguments", "id", "status", NULL};
    if (srv_api_check_keys(it, keys, f, t->bad, t->cap, t->err)) return -1;
    static const char *const req[] = {"call_id", "name", "arguments"};
    for (int k = 0; k < 3; k++) {
        if (json_is_string(json_object_get(it, req[k]))) continue;
        char ff[128];
        snprintf(ff, sizeof ff, "%s.%s", f, req[k]);
        return FAIL(t, ff, "expected a string");
    }
    json_t *tn = turn(t, false);
    json_t *calls = json_object_get(tn, "tool_calls");
    if (!calls) json_object_set_new(tn, "tool_calls", calls = json_array());
    json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", json_object_get(it, "call_id"), "type",
                                           "function", "function", "name", json_object_get(it, "name"), "arguments",
                                           json_object_get(it, "arguments")));
    return 0;
}

static int item_call_output(tx *t, const json_t *it, const char *f) {
    static const char *const keys[] = {"type", "call_id", "output", "id", "status", NULL};
    if (srv_api_check_keys(it, keys, f, t->bad, t->cap, t->err)) return -1;
    char ff[128];
    snprintf(ff, sizeof ff, "%s.call_id", f);
    if (!json_is_string(json_object_get(it, "call_id"))) return FAIL(t, ff, "expected a string");
    snprintf(ff, sizeof ff, "%s.output", f);
    char *text;
    if (content_text(t, json_object_get(it, "output"), ff, &text)) return -1;
    close_turn(t);
    json_array_append_new(t->msgs, json_pack("{s:s, s:O, s:s}", "role", "tool", "tool_call_id",
                                             json_object_get(it, "call_id"), "content", text));
    free(text);
    return 0;
}

/* A reasoning item: its reasoning_text content (else its summary) as the turn's thoughts. */
static int item_reasoning(tx *t, const json_t *it, const char *f) {
    static const char *const keys[] = {"type", "id", "summary", "content", "encrypted_content", "status", NULL};
    if (srv_api_check_keys(it, keys, f, t->bad, t->cap, t->err)) return -1;
    char ff[128];
    if (given(it, "encrypted_content")) {
        snprintf(ff, sizeof ff, "%s.encrypted_content", f);
        return FAIL(t, ff, "this server issues no encrypted reasoning; send the reasoning item as it came (its "
                           "content) or use previous_response_id");
    }
    const json_t *parts = given(it, "content");
    const char *key = "content", *want = "reasoning_text";
    if (!json_array_size(parts)) parts = json_object_get(it, "summary"), key = "summary", want = "summary_text";
    if (parts && !json_is_array(parts)) {
        snprintf(ff, sizeof ff, "%s.%s", f, key);
        return FAIL(t, ff, "expected an array");
    }
    json_t *tn = NULL;
    for (size_t k = 0; k < json_array_size(parts); k++) {
        const json_t *p = json_array_get(parts, k);
        const char *ty = json_string_value(json_object_get(p, "type"));
        const char *text = json_string_value(json_object_get(p, "text"));
        snprintf(ff, sizeof ff, "%s.%s[%zu]", f, key, k);
        if (!ty || strcmp(ty, want) || !text) return FAIL(t, ff, "expected {\"type\": \"%s\", \"text\": ...}", want);
        if (!tn) tn = turn(t, true);
        srv_api_append_text(tn, "reasoning_content", text);
    }
    return 0;
}

static int translate_input(tx *t, const json_t *input) {
    if (json_is_string(input)) {
        json_array_append_new(t->msgs, json_pack("{s:s, s:O}", "role", "user", "content", input));
        return 0;
    }
    if (!json_is_array(input)) return FAIL(t, "input", "expected a string or an array of input items");
    for (size_t i = 0; i < json_array_size(input); i++) {
        const json_t *it = json_array_get(input, i);
        char f[64];
        snprintf(f, sizeof f, "input[%zu]", i);
        if (!json_is_object(it)) return FAIL(t, f, "expected an input item (an object)");
        const json_t *ty = json_object_get(it, "type");
        const char *type = json_string_value(ty);
        if (!ty && json_object_get(it, "role")) type = "message"; /* EasyInputMessage */
        int rc;
        if (!type) rc = FAIL(t, f, "expected a \"type\" (message, function_call, function_call_output, reasoning)");
        else if (!strcmp(type, "message")) rc = item_message(t, it, f);
        else if (!strcmp(type, "function_call")) rc = item_call(t, it, f);
        else if (!strcmp(type, "function_call_output")) rc = item_call_output(t, it, f);
        else if (!strcmp(type, "reasoning")) rc = item_reasoning(t, it, f);
        else if (!strcmp(type, "item_reference"))
            rc = FAIL(t, f, "item_reference items are not supported: send the item itself, or previous_response_id");
        else {
            snprintf(f, sizeof f, "input[%zu].type", i);
            rc = FAIL(t, f, "'%s' items are not supported (message, function_call, function_call_output and "
                            "reasoning are; built-in tools do not exist here)", type);
        }
        if (rc) return -1;
    }
    close_turn(t);
    return 0;
}

/* ==== Tools ==== */
static int translate_tools(tx *t, const json_t *tools, json_t *chat, json_t *echo) {
    if (!json_is_array(tools)) return FAIL(t, "tools", "expected an array of tools");
    json_t *out = json_array(), *shown = json_array();
    json_object_set_new(chat, "tools", out);
    json_object_set_new(echo, "tools", shown);
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *e = json_array_get(tools, i);
        char f[64];
        snprintf(f, sizeof f, "tools[%zu].type", i);
        const char *ty = json_string_value(json_object_get(e, "type"));
        if (!json_is_object(e) || !ty) return FAIL(t, f, "expected a tool {\"type\": \"function\", \"name\": ...}");
        if (strcmp(ty, "function"))
            return FAIL(t, f, "'%s' tools are not supported: only function tools (this server has none of OpenAI's "
                              "built-in tools)", ty);
        static const char *const keys[] = {"type", "name", "description", "parameters", "strict", NULL};
        snprintf(f, sizeof f, "tools[%zu]", i);
        if (srv_api_check_keys(e, keys, f, t->bad, t->cap, t->err)) return -1;
        const json_t *st = given(e, "strict");
        if (st && !json_is_boolean(st)) {
            snprintf(f, sizeof f, "tools[%zu].strict", i);
            return FAIL(t, f, "expected a boolean");
        }
        /* OpenAI: strict defaults to true on this API (the arguments follow the schema) */
        const bool strict = st ? json_is_true(st) : true;
        json_t *fn = json_object();
        const char *const copy[] = {"name", "description", "parameters"};
        for (int k = 0; k < 3; k++)
            if (given(e, copy[k])) json_object_set(fn, copy[k], json_object_get(e, copy[k]));
        json_object_set_new(fn, "strict", json_boolean(strict));
        json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn));
        json_t *sh = json_deep_copy(e);
        json_object_set_new(sh, "strict", json_boolean(strict));
        if (!json_object_get(sh, "description")) json_object_set_new(sh, "description", json_null());
        if (!json_object_get(sh, "parameters")) json_object_set_new(sh, "parameters", json_null());
        json_array_append_new(shown, sh);
    }
    return 0;
}

static int translate_tool_choice(tx *t, const json_t *tc, json_t *chat) {
    if (json_is_string(tc)) {
        const char *v = json_string_value(tc);
        if (strcmp(v, "none") && strcmp(v, "auto") && strcmp(v, "required"))
            return FAIL(t, "tool_choice", "expected \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                                          "\"name\": ...}");
        json_object_set(chat, "tool_choice", (json_t *)tc);
        return 0;
    }
    const char *ty = json_string_value(json_object_get(tc, "type"));
    if (!json_is_object(tc) || !ty) return FAIL(t, "tool_choice", "expected a string or an object with a type");
    if (strcmp(ty, "function"))
        return FAIL(t, "tool_choice", "'%s' is not supported: only none, auto, required and a function by name "
                                      "(allowed_tools, built-in, MCP and custom tools do not exist here)", ty);
    static const char *const keys[] = {"type", "name", NULL};
    if (srv_api_check_keys(tc, keys, "tool_choice", t->bad, t->cap, t->err)) return -1;
    const json_t *nm = json_object_get(tc, "name");
    if (!json_is_string(nm)) return FAIL(t, "tool_choice.name", "expected a string");
    json_object_set_new(chat, "tool_choice", json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", nm));
    return 0;
}

/* ==== reasoning, text ==== */
static int translate_reasoning(tx *t, const json_t *r, json_t *chat, json_t *echo) {
    if (!json_is_object(r)) return FAIL(t, "reasoning", "expected an object {\"effort\": ...}");
    static const char *const keys[] = {"effort", "summary", "generate_summary", NULL};
    if (srv_api_check_keys(r, keys, "reasoning", t->bad, t->cap, t->err)) return -1;
    const char *sums[] = {"summary", "generate_summary"};
    for (int k = 0; k < 2; k++) {
        if (!given(r, sums[k])) continue;
        char f[64];
        snprintf(f, sizeof f, "reasoning.%s", sums[k]);
        return FAIL(t, f, "reasoning summaries are not produced here; the model's own reasoning comes back as the "
                          "reasoning item's reasoning_text content (leave summary out)");
    }
    const json_t *ef = given(r, "effort");
    if (ef) {
        if (!json_is_string(ef)) return FAIL(t, "reasoning.effort", "expected a string");
        json_object_set(chat, "reasoning_effort", (json_t *)ef); /* checked against the template at render */
    }
    json_object_set_new(echo, "reasoning", json_pack("{s:O, s:n}", "effort", ef ? ef : json_null(), "summary"));
    return 0;
}

static int translate_text(tx *t, const json_t *x, json_t *chat, json_t *echo) {
    if (!json_is_object(x)) return FAIL(t, "text", "expected an object {\"format\": ...}");
    static const char *const keys[] = {"format", "verbosity", NULL};
    if (srv_api_check_keys(x, keys, "text", t->bad, t->cap, t->err)) return -1;
    if (given(x, "verbosity")) return FAIL(t, "text.verbosity", "no model served here has a verbosity control");
    const json_t *fm = given(x, "format");
    if (!fm) return 0;
    const char *ty = json_string_value(json_object_get(fm, "type"));
    if (!json_is_object(fm) || !ty) return FAIL(t, "text.format", "expected an object with a type");
    json_t *rf;
    if (!strcmp(ty, "text") || !strcmp(ty, "json_object")) {
        static const char *const k1[] = {"type", NULL};
        if (srv_api_check_keys(fm, k1, "text.format", t->bad, t->cap, t->err)) return -1;
        rf = json_pack("{s:s}", "type", ty);
    } else if (!strcmp(ty, "json_schema")) {
        static const char *const k2[] = {"type", "name", "schema", "description", "strict", NULL};
        if (srv_api_check_keys(fm, k2, "text.format", t->bad, t->cap, t->err)) return -1;
        if (!json_is_string(json_object_get(fm, "name"))) return FAIL(t, "text.format.name", "expected a string");
        if (!json_is_object(json_object_get(fm, "schema")))
            return FAIL(t, "text.format.schema", "expected a JSON schema object");
        json_t *js = json_deep_copy(fm);
        json_object_del(js, "type");
        rf = json_pack("{s:s, s:o}", "type", "json_schema", "json_schema", js);
    } else {
        return FAIL(t, "text.format.type", "expected text, json_object or json_schema");
    }
    /* structured output is the chat route's response_format (the grammar work): the same
     * acceptance and refusals apply */
    if (strcmp(ty, "text")) json_object_set_new(chat, "response_format", rf);
    else json_decref(rf);
    json_object_set_new(echo, "text", json_pack("{s:O, s:s}", "format", fm, "verbosity", "medium"));
    return 0;
}

/* ==== Top-level fields ==== */
static const char *const k_fields[] = {
    "model", "input", "instructions", "max_output_tokens", "max_tool_calls", "metadata", "parallel_tool_calls",
    "previous_response_id", "reasoning", "store", "stream", "stream_options", "temperature", "text", "tool_choice",
    "tools", "top_p", "top_logprobs", "truncation", "user", "include", "background", "conversation", "prompt",
    "prompt_cache_key", "prompt_cache_retention", "safety_identifier", "service_tier",
    /* llama-server's sampling extensions, as on the chat route */
    "top_k", "min_p", "seed", "repeat_penalty", "presence_penalty", "frequency_penalty", "ignore_eos", "chat_template_kwargs",
    NULL};

/* Fields whose only supported value is "off": present with anything else, a 400. */
static int refuse_on(tx *t, const json_t *o) {
    const json_t *v;
    if ((v = given(o, "background")) && !json_is_false(v))
        return FAIL(t, "background", "background responses are not supported (send false or leave it out)");
    if (given(o, "conversation"))
        return FAIL(t, "conversation", "the Conversations API is not supported; use previous_response_id");
    if (given(o, "prompt")) return FAIL(t, "prompt", "stored prompt templates are not supported");
    if ((v = given(o, "truncation")) && !(json_is_string(v) && !strcmp(json_string_value(v), "disabled")))
        return FAIL(t, "truncation", "only \"disabled\" is supported: an input longer than the context is a 400");
    if ((v = given(o, "top_logprobs")) && !(json_is_integer(v) && json_integer_value(v) == 0))
        return FAIL(t, "top_logprobs", "log probabilities are not returned on this route (use /v1/chat/completions)");
    if ((v = given(o, "include"))) {
        if (!json_is_array(v)) return FAIL(t, "include", "expected an array");
        for (size_t i = 0; i < json_array_size(v); i++) {
            const char *x = json_string_value(json_array_get(v, i));
            return FAIL(t, "include", "'%s' is not supported (no encrypted reasoning, logprobs, or built-in tool "
                                      "outputs here)", x ? x : "?");
        }
    }
    if ((v = given(o, "max_tool_calls")) && !(json_is_integer(v) && json_integer_value(v) >= 0))
        return FAIL(t, "max_tool_calls", "expected an integer >= 0");
    if ((v = given(o, "stream_options"))) {
        if (!json_is_object(v)) return FAIL(t, "stream_options", "expected an object");
        static const char *const keys[] = {"include_obfuscation", NULL};
        if (srv_api_check_keys(v, keys, "stream_options", t->bad, t->cap, t->err)) return -1;
        if (!json_is_true(given(o, "stream"))) return FAIL(t, "stream_options", "only allowed when stream is true");
        if (json_is_true(json_object_get(v, "include_obfuscation")))
            return FAIL(t, "stream_options.include_obfuscation", "this server adds no obfuscation padding");
    }
    if ((v = given(o, "metadata"))) {
        if (!json_is_object(v) || json_object_size(v) > 16)
            return FAIL(t, "metadata", "expected an object of at most 16 string values");
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)v, key, val) {
            if (strlen(key) > 64 || !json_is_string(val) || json_string_length(val) > 512)
                return FAIL(t, "metadata", "'%.64s': keys of at most 64 characters, string values of at most 512",
                            key);
        }
    }
    return 0;
}

int srv_responses_translate(srv_server *s, srv_api_job *a, json_t *o, json_t **chat_out, char *bad, size_t bad_cap,
                            mx_error *err) {
    tx t = {a, bad, bad_cap, err, json_array(), NULL};
    json_t *chat = json_object(), *echo = json_object();
    a->echo = echo;
    a->store = true;
    int rc = srv_api_check_keys(o, k_fields, NULL, bad, bad_cap, err) || refuse_on(&t, o);
    const json_t *v;
    /* plain copies: the chat parser checks them as it does for /v1/chat/completions */
    static const char *const pass[] = {"model", "stream", "temperature", "top_p", "parallel_tool_calls", "user",
                                       "prompt_cache_key", "safety_identifier", "prompt_cache_retention",
                                       "service_tier", "top_k", "min_p", "seed", "repeat_penalty", "presence_penalty",
                                       "frequency_penalty", "ignore_eos", "chat_template_kwargs"};
    for (size_t i = 0; !rc && i < sizeof pass / sizeof pass[0]; i++)
        if ((v = given(o, pass[i]))) json_object_set(chat, pass[i], (json_t *)v);
    /* thoughts always come back as reasoning items (the server's --reasoning-format is the chat
     * route's) */
    json_object_set_new(chat, "reasoning_format", json_string("deepseek"));
    if (!rc && (v = given(o, "max_output_tokens"))) {
        if (!json_is_integer(v) || json_integer_value(v) < 1)
            rc = FAIL(&t, "max_output_tokens", "expected an integer >= 1");
        else json_object_set(chat, "max_tokens", (json_t *)v);
    }
    if (!rc && (v = given(o, "store"))) {
        if (!json_is_boolean(v)) rc = FAIL(&t, "store", "expected a boolean");
        a->store = json_is_true(v);
    }
    const json_t *ins = given(o, "instructions");
    if (!rc && ins && !json_is_string(ins)) rc = FAIL(&t, "instructions", "expected a string");
    if (!rc && ins) json_array_append_new(t.msgs, json_pack("{s:s, s:O}", "role", "system", "content", ins));
    const size_t n_instr = json_array_size(t.msgs);
    const json_t *prev = given(o, "previous_response_id");
    if (!rc && prev) {
        json_t *resp = NULL, *hist = NULL;
        if (!json_is_string(prev)) rc = FAIL(&t, "previous_response_id", "expected a string");
        else if (srv_resp_store_get(s->resp_store, json_string_value(prev), &resp, &hist))
            rc = FAIL(&t, "previous_response_id", "Previous response with id '%.100s' not found.",
                      json_string_value(prev));
        for (size_t i = 0; !rc && i < json_array_size(hist); i++)
            json_array_append_new(t.msgs, json_deep_copy(json_array_get(hist, i)));
        json_decref(resp);
        json_decref(hist);
    }
    const json_t *input = given(o, "input");
    if (!rc && !input && !prev) rc = FAIL(&t, "input", "required (a string or an array of input items)");
    if (!rc && input) rc = translate_input(&t, input);
    if (!rc && (v = given(o, "tools"))) rc = translate_tools(&t, v, chat, echo);
    if (!rc && (v = given(o, "tool_choice"))) rc = translate_tool_choice(&t, v, chat);
    if (!rc && (v = given(o, "reasoning"))) rc = translate_reasoning(&t, v, chat, echo);
    if (!rc && (v = given(o, "text"))) rc = translate_text(&t, v, chat, echo);
    if (!rc && !json_array_size(t.msgs)) rc = FAIL(&t, "input", "the conversation is empty");
    if (rc) {
        json_decref(t.msgs);
        json_decref(chat);
        return -1;
    }
    /* the conversation to store with the answer: without the instructions, which a later
     * previous_response_id request does not inherit */
    a->history = json_array();
    for (size_t i = n_instr; i < json_array_size(t.msgs); i++)
        json_array_append(a->history, json_array_get(t.msgs, i));
    json_object_set_new(chat, "messages", t.msgs);
    *chat_out = chat;

    /* the request as the Response object shows it */
    json_object_set_new(echo, "instructions", ins ? json_incref((json_t *)ins) : json_null());
    json_object_set_new(echo, "max_output_tokens", json_incref(given(o, "max_output_tokens") ? json_object_get(o, "max_output_tokens") : json_null()));
    json_object_set_new(echo, "max_tool_calls", json_incref(given(o, "max_tool_calls") ? json_object_get(o, "max_tool_calls") : json_null()));
    json_object_set_new(echo, "metadata", (v = given(o, "metadata")) ? json_deep_copy(v) : json_object());
    json_object_set_new(echo, "parallel_tool_calls", json_boolean(!json_is_false(given(o, "parallel_tool_calls"))));
    json_object_set_new(echo, "previous_response_id", prev ? json_incref((json_t *)prev) : json_null());
    if (!json_object_get(echo, "reasoning")) json_object_set_new(echo, "reasoning", json_pack("{s:n, s:n}", "effort", "summary"));
    json_object_set_new(echo, "store", json_boolean(a->store));
    if (!json_object_get(echo, "text"))
        json_object_set_new(echo, "text", json_pack("{s:{s:s}, s:s}", "format", "type", "text", "verbosity", "medium"));
    v = given(o, "tool_choice");
    json_object_set_new(echo, "tool_choice", v ? json_deep_copy(v) : json_string("auto"));
    if (!json_object_get(echo, "tools")) json_object_set_new(echo, "tools", json_array());
    const char *ids[] = {"user", "prompt_cache_key", "safety_identifier"};
    for (int i = 0; i < 3; i++)
        if ((v = given(o, ids[i]))) json_object_set(echo, ids[i], (json_t *)v);
    return 0;
}

/* A float setting as the decimal it was written as (0.8, not 0.800000011920929). */
static json_t *float_json(float x) {
    char b[32];
    snprintf(b, sizeof b, "%.7g", (double)x);
    return json_real(strtod(b, NULL));
}

void srv_responses_after_parse(srv_server *s, srv_job *j) {
    (void)s;
    json_t *echo = j->api->echo;
    json_object_set_new(echo, "temperature", float_json(j->req.sampling.temperature));
    json_object_set_new(echo, "top_p", float_json(j->req.sampling.top_p));
}

/* ==== Stored responses ==== */
void srv_responses_store(srv_server *s, srv_job *j, json_t *response, const srv_cp *cp) {
    srv_api_job *a = j->api;
    if (!a->store || !s->resp_store) return;
    json_t *hist = json_deep_copy(a->history);
    json_t *msg = srv_api_chat_message(cp);
    if (!hist || !msg) {
        json_decref(hist);
        json_decref(msg);
        return;
    }
    json_array_append_new(hist, msg);
    srv_resp_store_put(s->resp_store, a->id, json_deep_copy(response), hist);
}

static MHD_Result_t send_json(srv_server *s, struct MHD_Connection *c, int status, char *body) {
    const char *b = body ? body : "{}";
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(b), (void *)b, MHD_RESPMEM_MUST_COPY);
    free(body);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "application/json; charset=utf-8");
    srv_mhd_cors(r, c);
    MHD_Result_t rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    char code[8];
    snprintf(code, sizeof code, "%d", status);
    srv_metrics_add(s->metrics, SM_HTTP_RESPONSES_TOTAL, code, 1);
    return rc;
}

/* GET /v1/responses/{id}: the stored Response; DELETE: drops it. */
MHD_Result_t srv_responses_route(srv_server *s, struct MHD_Connection *c, const char *method, const char *id) {
    const bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (!get && strcmp(method, "DELETE")) return srv_mhd_method_not_allowed(s, c, "GET");
    char msg[200];
    snprintf(msg, sizeof msg, "No response found with id '%.100s'.", id);
    if (!get) {
        if (!srv_resp_store_delete(s->resp_store, id)) return send_json(s, c, 404, srv_resp_error(404, msg, NULL));
        json_t *o = json_pack("{s:s, s:s, s:b}", "id", id, "object", "response", "deleted", 1);
        char *b = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        return send_json(s, c, 200, b);
    }
    json_t *resp = NULL, *hist = NULL;
    if (srv_resp_store_get(s->resp_store, id, &resp, &hist)) return send_json(s, c, 404, srv_resp_error(404, msg, NULL));
    char *b = json_dumps(resp, JSON_COMPACT);
    json_decref(resp);
    json_decref(hist);
    return send_json(s, c, 200, b);
}
