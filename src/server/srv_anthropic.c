/* POST /v1/messages and /v1/messages/count_tokens: an Anthropic Messages request translated
 * into a chat request.
 *
 * `system` (a string or text blocks) is the system message. A user message's text blocks are
 * its content; its tool_result blocks are `role: tool` messages (is_error: the text starts
 * with "Error: "). An assistant message's thinking blocks are its reasoning_content (their
 * signature must be the one this server gave them), its text its content, its tool_use
 * blocks its tool_calls. Consecutive messages of one role are one turn, as Anthropic merges
 * them. A final assistant message is continued: its text is appended to the rendered prompt
 * and the reply carries only what follows. Tools (name, description, input_schema) are chat
 * tools; tool_choice auto / any / tool / none is chat's auto / required / named / none, and
 * disable_parallel_tool_use is parallel_tool_calls false. `thinking` turns the template's
 * thinking switch (enable_thinking) on or off. Anything else is refused naming it, as
 * Anthropic refuses unknown fields. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "server/srv_api.h"
#include "server/srv_internal.h"
#include "server/srv_tools.h"

typedef struct tx {
    char *bad;
    size_t cap;
    mx_error *err;
    json_t *msgs;
} tx;

#define FAIL(t, field, ...) srv_api_fail((t)->bad, (t)->cap, (t)->err, field, __VA_ARGS__)

static json_t *given(const json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return v && !json_is_null(v) ? v : NULL;
}

void srv_anthropic_signature(const char *thinking, size_t n, char out[32]) {
    snprintf(out, 32, "mlxcel1.%016llx", (unsigned long long)XXH64(thinking, n, 0x6d6c7863656c31ull));
}

/* ==== Blocks ==== */
static int check_cache_control(tx *t, const json_t *b, const char *f) {
    const json_t *cc = given(b, "cache_control");
    if (!cc) return 0;
    char ff[160];
    snprintf(ff, sizeof ff, "%s%scache_control", f, *f ? "." : "");
    const char *ty = json_string_value(json_object_get(cc, "type"));
    const json_t *ttl = json_object_get(cc, "ttl");
    if (!json_is_object(cc) || !ty || strcmp(ty, "ephemeral") ||
        (ttl && !(json_is_string(ttl) && (!strcmp(json_string_value(ttl), "5m") || !strcmp(json_string_value(ttl), "1h")))))
        return FAIL(t, ff, "expected {\"type\": \"ephemeral\"} (with ttl \"5m\" or \"1h\")");
    return 0; /* prompt prefixes are cached automatically (the prefix cache): a breakpoint asks nothing more */
}

/* A text block {type: text, text, cache_control?, citations?}: its text. */
static int text_block(tx *t, const json_t *b, const char *f, const char **text) {
    static const char *const keys[] = {"type", "text", "cache_control", "citations", NULL};
    if (srv_api_check_keys(b, keys, f, t->bad, t->cap, t->err) || check_cache_control(t, b, f)) return -1;
    char ff[160];
    const json_t *cit = given(b, "citations");
    if (cit && !(json_is_array(cit) && !json_array_size(cit))) {
        snprintf(ff, sizeof ff, "%s.citations", f);
        return FAIL(t, ff, "citations are not supported");
    }
    *text = json_string_value(json_object_get(b, "text"));
    snprintf(ff, sizeof ff, "%s.text", f);
    return *text ? 0 : FAIL(t, ff, "expected a string");
}

static void join(char **buf, size_t *len, size_t *cap, const char *text) {
    if (*len) srv_buf_append(buf, len, cap, "\n", 1);
    srv_buf_append(buf, len, cap, text, strlen(text));
}

/* The text of a string or of text blocks only (system, tool_result content, a prefill). */
static int text_of(tx *t, const json_t *content, const char *f, char **out) {
    char *buf = NULL;
    size_t len = 0, cap = 0;
    srv_buf_append(&buf, &len, &cap, "", 0);
    if (json_is_string(content)) {
        srv_buf_append(&buf, &len, &cap, json_string_value(content), json_string_length(content));
    } else if (json_is_array(content)) {
        for (size_t k = 0; k < json_array_size(content); k++) {
            const json_t *b = json_array_get(content, k);
            char ff[160], tf[170];
            snprintf(ff, sizeof ff, "%s[%zu]", f, k);
            snprintf(tf, sizeof tf, "%s.type", ff);
            const char *ty = json_string_value(json_object_get(b, "type"));
            const char *text = NULL;
            if (!json_is_object(b) || !ty || strcmp(ty, "text")) {
                free(buf);
                return FAIL(t, tf, "'%s' blocks are not supported here: text only", ty ? ty : "?");
            }
            if (text_block(t, b, ff, &text)) { free(buf); return -1; }
            join(&buf, &len, &cap, text);
        }
    } else {
        free(buf);
        return FAIL(t, f, "expected a string or an array of text blocks");
    }
    *out = buf;
    return buf ? 0 : FAIL(t, f, "out of memory");
}

/* The chat message of the previous turn when it has `role`, else a new one appended. */
static json_t *turn_of(tx *t, const char *role) {
    json_t *last = json_array_get(t->msgs, json_array_size(t->msgs) - 1);
    const char *r = json_string_value(json_object_get(last, "role"));
    if (last && r && !strcmp(r, role)) return last;
    json_t *m = json_pack("{s:s, s:n}", "role", role, "content");
    json_array_append_new(t->msgs, m);
    return m;
}

static int user_block(tx *t, const json_t *b, const char *f) {
    const char *ty = json_string_value(json_object_get(b, "type"));
    char ff[160];
    if (!strcmp(ty, "text")) {
        const char *text;
        if (text_block(t, b, f, &text)) return -1;
        srv_api_append_text(turn_of(t, "user"), "content", text);
        return 0;
    }
    if (!strcmp(ty, "tool_result")) {
        static const char *const keys[] = {"type", "tool_use_id", "content", "is_error", "cache_control", NULL};
        if (srv_api_check_keys(b, keys, f, t->bad, t->cap, t->err) || check_cache_control(t, b, f)) return -1;
        snprintf(ff, sizeof ff, "%s.tool_use_id", f);
        if (!json_is_string(json_object_get(b, "tool_use_id"))) return FAIL(t, ff, "expected a string");
        const json_t *err = given(b, "is_error");
        snprintf(ff, sizeof ff, "%s.is_error", f);
        if (err && !json_is_boolean(err)) return FAIL(t, ff, "expected a boolean");
        char *text = NULL;
        snprintf(ff, sizeof ff, "%s.content", f);
        const json_t *content = given(b, "content");
        if (content && text_of(t, content, ff, &text)) return -1;
        if (!text && !(text = strdup(""))) return FAIL(t, f, "out of memory");
        /* the template has no error flag: the result says it failed in words */
        if (json_is_true(err)) {
            size_t n = strlen(text) + 8;
            char *e = malloc(n);
            if (e) snprintf(e, n, *text ? "Error: %s" : "Error", text);
            free(text);
            text = e;
            if (!text) return FAIL(t, f, "out of memory");
        }
        json_array_append_new(t->msgs, json_pack("{s:s, s:O, s:s}", "role", "tool", "tool_call_id",
                                                 json_object_get(b, "tool_use_id"), "content", text));
        free(text);
        return 0;
    }
    snprintf(ff, sizeof ff, "%s.type", f);
    return FAIL(t, ff, "'%s' blocks are not supported in user messages (text and tool_result are; images and "
                       "documents need a model that reads them)", ty);
}

static int assistant_block(tx *t, const json_t *b, const char *f) {
    const char *ty = json_string_value(json_object_get(b, "type"));
    char ff[160];
    json_t *m = turn_of(t, "assistant");
    if (!strcmp(ty, "text")) {
        const char *text;
        if (text_block(t, b, f, &text)) return -1;
        srv_api_append_text(m, "content", text);
        return 0;
    }
    if (!strcmp(ty, "thinking")) {
        static const char *const keys[] = {"type", "thinking", "signature", NULL};
        if (srv_api_check_keys(b, keys, f, t->bad, t->cap, t->err)) return -1;
        const json_t *th = json_object_get(b, "thinking"), *sig = json_object_get(b, "signature");
        snprintf(ff, sizeof ff, "%s.thinking", f);
        if (!json_is_string(th)) return FAIL(t, ff, "expected a string");
        char want[32];
        srv_anthropic_signature(json_string_value(th), json_string_length(th), want);
        snprintf(ff, sizeof ff, "%s.signature", f);
        if (!json_is_string(sig) || strcmp(json_string_value(sig), want))
            return FAIL(t, ff, "does not match the thinking block's text: thinking blocks must come back as this "
                               "server sent them (unmodified, from this server)");
        srv_api_append_text(m, "reasoning_content", json_string_value(th));
        return 0;
    }
    if (!strcmp(ty, "tool_use")) {
        static const char *const keys[] = {"type", "id", "name", "input", "cache_control", NULL};
        if (srv_api_check_keys(b, keys, f, t->bad, t->cap, t->err) || check_cache_control(t, b, f)) return -1;
        const char *req[] = {"id", "name"};
        for (int k = 0; k < 2; k++) {
            snprintf(ff, sizeof ff, "%s.%s", f, req[k]);
            if (!json_is_string(json_object_get(b, req[k]))) return FAIL(t, ff, "expected a string");
        }
        const json_t *in = json_object_get(b, "input");
        snprintf(ff, sizeof ff, "%s.input", f);
        if (!json_is_object(in)) return FAIL(t, ff, "expected an object");
        char *args = json_dumps(in, JSON_COMPACT);
        json_t *calls = json_object_get(m, "tool_calls");
        if (!calls) json_object_set_new(m, "tool_calls", calls = json_array());
        json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:s}}", "id", json_object_get(b, "id"), "type",
                                               "function", "function", "name", json_object_get(b, "name"),
                                               "arguments", args ? args : "{}"));
        free(args);
        return 0;
    }
    snprintf(ff, sizeof ff, "%s.type", f);
    return FAIL(t, ff, "'%s' blocks are not supported in assistant messages (text, thinking and tool_use are)", ty);
}

static int translate_messages(tx *t, const json_t *msgs, char **prefill) {
    if (!json_is_array(msgs) || !json_array_size(msgs)) return FAIL(t, "messages", "expected a non-empty array");
    const size_t n = json_array_size(msgs);
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(msgs, i);
        char f[64], ff[96];
        snprintf(f, sizeof f, "messages[%zu]", i);
        static const char *const keys[] = {"role", "content", NULL};
        if (!json_is_object(m)) return FAIL(t, f, "expected an object {\"role\", \"content\"}");
        if (srv_api_check_keys(m, keys, f, t->bad, t->cap, t->err)) return -1;
        const char *role = json_string_value(json_object_get(m, "role"));
        snprintf(ff, sizeof ff, "%s.role", f);
        if (!role || (strcmp(role, "user") && strcmp(role, "assistant"))) return FAIL(t, ff, "expected user or assistant");
        const bool user = !strcmp(role, "user");
        const json_t *content = json_object_get(m, "content");
        snprintf(ff, sizeof ff, "%s.content", f);
        if (!user && i == n - 1) { /* a final assistant message: the reply continues it */
            if (json_is_array(content)) /* a clearer message for thinking / tool_use than text_of's */
                for (size_t k = 0; k < json_array_size(content); k++) {
                    const char *ty = json_string_value(json_object_get(json_array_get(content, k), "type"));
                    if (ty && strcmp(ty, "text")) {
                        char tf[128];
                        snprintf(tf, sizeof tf, "%s[%zu].type", ff, k);
                        return FAIL(t, tf, "a final assistant message is continued by the reply (a prefill) and "
                                           "may hold text only, not '%s'", ty);
                    }
                }
            return text_of(t, content, ff, prefill);
        }
        if (json_is_string(content)) {
            srv_api_append_text(turn_of(t, role), "content", json_string_value(content));
            continue;
        }
        if (!json_is_array(content)) return FAIL(t, ff, "expected a string or an array of content blocks");
        for (size_t k = 0; k < json_array_size(content); k++) {
            const json_t *b = json_array_get(content, k);
            char bf[128];
            snprintf(bf, sizeof bf, "%s[%zu]", ff, k);
            if (!json_is_object(b) || !json_is_string(json_object_get(b, "type")))
                return FAIL(t, bf, "expected a content block with a type");
            if (user ? user_block(t, b, bf) : assistant_block(t, b, bf)) return -1;
        }
    }
    return 0;
}

/* ==== Tools ==== */
static int translate_tools(tx *t, const json_t *tools, json_t *chat) {
    if (!json_is_array(tools)) return FAIL(t, "tools", "expected an array of tools");
    json_t *out = json_array();
    json_object_set_new(chat, "tools", out);
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const json_t *e = json_array_get(tools, i);
        char f[64], ff[96];
        snprintf(f, sizeof f, "tools[%zu]", i);
        if (!json_is_object(e)) return FAIL(t, f, "expected a tool {\"name\", \"input_schema\"}");
        const json_t *ty = given(e, "type");
        snprintf(ff, sizeof ff, "%s.type", f);
        if (ty && !(json_is_string(ty) && !strcmp(json_string_value(ty), "custom")))
            return FAIL(t, ff, "'%s' tools (Anthropic's server and client tools) are not supported: define a custom "
                               "tool with name, description and input_schema",
                        json_is_string(ty) ? json_string_value(ty) : "?");
        static const char *const keys[] = {"type", "name", "description", "input_schema", "cache_control", "strict", NULL};
        if (srv_api_check_keys(e, keys, f, t->bad, t->cap, t->err) || check_cache_control(t, e, f)) return -1;
        const json_t *sc = json_object_get(e, "input_schema");
        const char *sty = json_string_value(json_object_get(sc, "type"));
        snprintf(ff, sizeof ff, "%s.input_schema", f);
        if (!json_is_object(sc) || !sty || strcmp(sty, "object"))
            return FAIL(t, ff, "expected a JSON schema object with \"type\": \"object\"");
        json_t *fn = json_pack("{s:O, s:O}", "name", json_object_get(e, "name"), "parameters", sc);
        if (!fn) return FAIL(t, f, "name: expected a string");
        if (given(e, "description")) json_object_set(fn, "description", json_object_get(e, "description"));
        if (json_object_get(e, "strict")) json_object_set(fn, "strict", json_object_get(e, "strict"));
        json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn));
    }
    return 0;
}

static int translate_tool_choice(tx *t, const json_t *tc, json_t *chat) {
    const char *ty = json_string_value(json_object_get(tc, "type"));
    if (!json_is_object(tc) || !ty) return FAIL(t, "tool_choice", "expected {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}");
    static const char *const keys[] = {"type", "name", "disable_parallel_tool_use", NULL};
    static const char *const knone[] = {"type", NULL};
    if (srv_api_check_keys(tc, strcmp(ty, "none") ? keys : knone, "tool_choice", t->bad, t->cap, t->err)) return -1;
    const json_t *dp = given(tc, "disable_parallel_tool_use");
    if (dp && !json_is_boolean(dp)) return FAIL(t, "tool_choice.disable_parallel_tool_use", "expected a boolean");
    if (json_is_true(dp)) json_object_set_new(chat, "parallel_tool_calls", json_false());
    if (!strcmp(ty, "auto")) json_object_set_new(chat, "tool_choice", json_string("auto"));
    else if (!strcmp(ty, "none")) json_object_set_new(chat, "tool_choice", json_string("none"));
    else if (!strcmp(ty, "any")) json_object_set_new(chat, "tool_choice", json_string("required"));
    else if (!strcmp(ty, "tool")) {
        const json_t *nm = json_object_get(tc, "name");
        if (!json_is_string(nm)) return FAIL(t, "tool_choice.name", "expected a string");
        json_object_set_new(chat, "tool_choice", json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", nm));
    } else {
        return FAIL(t, "tool_choice.type", "expected auto, any, tool or none");
    }
    return 0;
}

/* `thinking` through the template's switch: on where it reads enable_thinking (or always
 * thinks), off where it reads the switch (or never thinks); else a 400. */
static int translate_thinking(srv_server *s, tx *t, const json_t *th, const json_t *max_tokens, json_t *chat) {
    const char *ty = json_string_value(json_object_get(th, "type"));
    if (!json_is_object(th) || !ty) return FAIL(t, "thinking", "expected {\"type\": \"enabled\", \"budget_tokens\": N} or {\"type\": \"disabled\"}");
    const srv_chat_caps *caps = s->chat_caps;
    bool on;
    if (!strcmp(ty, "enabled")) {
        static const char *const keys[] = {"type", "budget_tokens", NULL};
        if (srv_api_check_keys(th, keys, "thinking", t->bad, t->cap, t->err)) return -1;
        const json_t *b = json_object_get(th, "budget_tokens");
        if (!json_is_integer(b) || json_integer_value(b) < 1024)
            return FAIL(t, "thinking.budget_tokens", "expected an integer >= 1024");
        if (max_tokens && json_integer_value(b) >= json_integer_value(max_tokens))
            return FAIL(t, "thinking.budget_tokens", "must be less than max_tokens");
        if (!caps->enable_thinking && !caps->thinks)
            return FAIL(t, "thinking", "this model's chat template does not think: thinking cannot be enabled");
        on = true;
    } else if (!strcmp(ty, "disabled")) {
        static const char *const keys[] = {"type", NULL};
        if (srv_api_check_keys(th, keys, "thinking", t->bad, t->cap, t->err)) return -1;
        if (!caps->enable_thinking && caps->thinks)
            return FAIL(t, "thinking", "this model's chat template thinks and has no enable_thinking switch: "
                                       "thinking cannot be disabled");
        on = false;
    } else {
        return FAIL(t, "thinking.type", "expected enabled or disabled");
    }
    if (caps->enable_thinking) {
        json_t *kw = json_object_get(chat, "chat_template_kwargs");
        if (!kw) json_object_set_new(chat, "chat_template_kwargs", kw = json_object());
        if (json_is_object(kw)) json_object_set_new(kw, "enable_thinking", json_boolean(on));
    }
    return 0;
}

/* ==== Top level ==== */
static const char *const k_fields[] = {"model", "max_tokens", "messages", "system", "stop_sequences", "stream",
                                       "temperature", "top_p", "top_k", "tools", "tool_choice", "thinking",
                                       "metadata", "service_tier", "cache_control",
                                       /* known, refused below with a reason */
                                       "container", "mcp_servers", "context_management", "output_format",
                                       "output_config", "inference_geo",
                                       /* llama-server's sampling extensions, as on the chat route */
                                       "min_p", "seed", "repeat_penalty", "presence_penalty", "frequency_penalty",
                                       "ignore_eos", "chat_template_kwargs", NULL};
static const char *const k_count_fields[] = {"model", "messages", "system", "tools", "tool_choice", "thinking",
                                             "cache_control", "chat_template_kwargs", NULL};

static int refuse_unsupported(tx *t, const json_t *o) {
    static const char *const why[][2] = {
        {"container", "code-execution containers are not supported"},
        {"mcp_servers", "MCP servers are not supported: define the tools the model may call in tools"},
        {"context_management", "server-side context management is not supported"},
        {"output_format", "structured output (output_format) is not supported on this route"},
        {"output_config", "output_config is not supported on this route"},
        {"inference_geo", "this server runs where it runs: inference_geo is not supported"},
    };
    for (size_t i = 0; i < sizeof why / sizeof why[0]; i++)
        if (given(o, why[i][0])) return FAIL(t, why[i][0], "%s", why[i][1]);
    return 0;
}

int srv_anthropic_translate(srv_server *s, srv_api_job *a, struct MHD_Connection *c, json_t *o, bool count,
                            json_t **chat_out, char **prefill, char *bad, size_t bad_cap, mx_error *err) {
    (void)a;
    *prefill = NULL;
    tx t = {bad, bad_cap, err, json_array()};
    json_t *chat = json_object();
    int rc = srv_api_check_keys(o, count ? k_count_fields : k_fields, NULL, bad, bad_cap, err) ||
             refuse_unsupported(&t, o);
    const char *ver = c ? MHD_lookup_connection_value(c, MHD_HEADER_KIND, "anthropic-version") : NULL;
    if (!rc && ver && strcmp(ver, "2023-06-01"))
        rc = FAIL(&t, "anthropic-version", "'%.40s' is not served: this server implements version 2023-06-01", ver);
    const json_t *v, *mt = given(o, "max_tokens");
    if (!rc && !json_is_string(given(o, "model"))) rc = FAIL(&t, "model", "required: a string");
    if (!rc && !count && !mt) rc = FAIL(&t, "max_tokens", "required: the most tokens to generate");
    if (!rc && mt && (!json_is_integer(mt) || json_integer_value(mt) < 1))
        rc = FAIL(&t, "max_tokens", "expected an integer >= 1");
    if (!rc && mt) json_object_set(chat, "max_tokens", (json_t *)mt);
    if (!rc && (v = given(o, "temperature")) && (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > 1))
        rc = FAIL(&t, "temperature", "expected a number in [0, 1]");
    static const char *const pass[] = {"model", "stream", "temperature", "top_p", "top_k", "min_p", "seed",
                                       "repeat_penalty", "presence_penalty", "frequency_penalty", "ignore_eos",
                                       "chat_template_kwargs"};
    for (size_t i = 0; !rc && i < sizeof pass / sizeof pass[0]; i++)
        if ((v = given(o, pass[i]))) json_object_set_new(chat, pass[i], json_deep_copy(v));
    /* thoughts always come back as thinking blocks (the server's --reasoning-format is the
     * chat route's) */
    json_object_set_new(chat, "reasoning_format", json_string("deepseek"));
    if (!rc && (v = given(o, "system"))) {
        char *text = NULL;
        rc = text_of(&t, v, "system", &text);
        if (!rc) json_array_append_new(t.msgs, json_pack("{s:s, s:s}", "role", "system", "content", text));
        free(text);
    }
    if (!rc) rc = translate_messages(&t, json_object_get(o, "messages"), prefill);
    if (!rc && (v = given(o, "tools"))) rc = translate_tools(&t, v, chat);
    if (!rc && (v = given(o, "tool_choice"))) rc = translate_tool_choice(&t, v, chat);
    if (!rc && (v = given(o, "thinking"))) rc = translate_thinking(s, &t, v, mt, chat);
    if (!rc && (v = given(o, "metadata"))) {
        static const char *const keys[] = {"user_id", NULL};
        const json_t *uid = given(v, "user_id");
        if (!json_is_object(v)) rc = FAIL(&t, "metadata", "expected an object {\"user_id\": ...}");
        else if (srv_api_check_keys(v, keys, "metadata", bad, bad_cap, err)) rc = -1;
        else if (uid && !json_is_string(uid)) rc = FAIL(&t, "metadata.user_id", "expected a string");
        else if (uid) json_object_set(chat, "user", (json_t *)uid); /* an identifier, as the chat route's user */
    }
    if (!rc && (v = given(o, "service_tier")) &&
        !(json_is_string(v) && (!strcmp(json_string_value(v), "auto") || !strcmp(json_string_value(v), "standard_only"))))
        rc = FAIL(&t, "service_tier", "expected auto or standard_only (this server has one tier)");
    if (!rc && (v = given(o, "cache_control"))) {
        json_t *holder = json_pack("{s:O}", "cache_control", v);
        rc = check_cache_control(&t, holder, "");
        json_decref(holder);
    }
    if (!rc && !json_array_size(t.msgs)) rc = FAIL(&t, "messages", "nothing to answer: the only message is a prefill");
    if (rc) {
        free(*prefill);
        *prefill = NULL;
        json_decref(t.msgs);
        json_decref(chat);
        return -1;
    }
    json_object_set_new(chat, "messages", t.msgs);
    *chat_out = chat;
    return 0;
}

int srv_anthropic_stops(srv_job *j, const json_t *o, char *bad, size_t bad_cap, mx_error *err) {
    const json_t *ss = given(o, "stop_sequences");
    if (!ss) return 0;
    if (!json_is_array(ss)) return srv_api_fail(bad, bad_cap, err, "stop_sequences", "expected an array of strings");
    if (json_array_size(ss) > SRV_MAX_STOPS)
        return srv_api_fail(bad, bad_cap, err, "stop_sequences", "at most %d stop sequences", SRV_MAX_STOPS);
    for (size_t i = 0; i < json_array_size(ss); i++) {
        const char *x = json_string_value(json_array_get(ss, i));
        if (!x) return srv_api_fail(bad, bad_cap, err, "stop_sequences", "element %zu: expected a string", i);
        if (!*x) continue;
        char *d = strdup(x);
        if (!d) return srv_api_fail(bad, bad_cap, err, "stop_sequences", "out of memory");
        j->req.stops[j->req.n_stops++] = d;
    }
    return 0;
}

/* ==== count_tokens ==== */
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

/* The prompt a /v1/messages request with these fields would run, rendered and tokenized the
 * same way (srv_chat_render, then the tokenizer without added specials). */
MHD_Result_t srv_anthropic_count_tokens(srv_server *s, struct MHD_Connection *c, const char *body, size_t len) {
    srv_request r;
    memset(&r, 0, sizeof r);
    mx_error err = {{0}};
    char bad[64] = "";
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je), *chat = NULL;
    char *prefill = NULL, *text = NULL, *prompt = NULL;
    const char *param = NULL;
    int status = 400, rc;
    if (!json_is_object(o)) {
        char m[300];
        if (o) snprintf(m, sizeof m, "expected a JSON object");
        else srv_json_error_msg(&je, m, sizeof m);
        rc = srv_api_fail(bad, sizeof bad, &err, "body", "%s", m);
    } else {
        rc = srv_anthropic_translate(s, NULL, c, o, true, &chat, &prefill, bad, sizeof bad, &err);
    }
    if (!rc && !(text = json_dumps(chat, JSON_COMPACT))) rc = srv_api_fail(bad, sizeof bad, &err, "body", "out of memory");
    if (!rc) {
        rc = srv_request_parse(&r, SRV_API_CHAT, text, strlen(text), &s->cfg, s->be->text_ops->vocab_size(s->be->text),
                               &err);
        if (rc) snprintf(bad, sizeof bad, "%s", r.bad_param);
    }
    if (!rc && !s->be->text_ops->has_template) {
        rc = srv_api_fail(bad, sizeof bad, &err, "messages",
                          "this model has no chat template; start the server with --chat-template-file");
    }
    if (!rc) {
        r.chat->prefill = prefill;
        prefill = NULL;
        rc = srv_chat_render(s->chat_caps, s->be, r.chat, r.messages, r.template_extra, true, &prompt, &param, &err);
        if (rc) snprintf(bad, sizeof bad, "%s", param ? param : "messages");
    }
    size_t n = 0;
    if (!rc) {
        int32_t *ids = NULL;
        rc = s->be->text_ops->tokenize(s->be->text, prompt, strlen(prompt), false, &ids, &n, &err);
        free(ids);
        if (rc) status = 500;
    }
    free(prompt);
    free(prefill);
    free(text);
    json_decref(chat);
    json_decref(o);
    srv_request_free(&r);
    if (rc) return send_json(s, c, status, srv_resp_error(status, err.msg, bad));
    json_t *out = json_pack("{s:I}", "input_tokens", (json_int_t)n);
    char *b = json_dumps(out, JSON_COMPACT);
    json_decref(out);
    return send_json(s, c, 200, b);
}
