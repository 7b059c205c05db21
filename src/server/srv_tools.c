/* Tool definitions, the chat template's capabilities, and the prompt of a chat request with
 * tools (see srv_tools.h). The template is the authority on how tools and tool calls are
 * written into the prompt; this file only hands it what it expects: arguments as objects where
 * it serialises them with tojson (Qwen, Llama, Mistral) and as strings where it concatenates
 * them (DeepSeek V3), ids that Mistral's template accepts, and the names of tool results.
 * Which of these a template wants is probed once by rendering a small conversation both ways. */
#include "server/srv_tools.h"

#include <stdlib.h>
#include <string.h>

/* ==== Tool sets ==== */
bool srv_tool_set_has(const srv_tool_set *t, const char *name, size_t len) {
    for (int i = 0; t && i < t->n; i++)
        if (strlen(t->t[i].name) == len && !memcmp(t->t[i].name, name, len)) return true;
    return false;
}

const char *srv_tool_set_param_type(const srv_tool_set *t, const char *name, const char *key) {
    for (int i = 0; t && i < t->n; i++) {
        if (strcmp(t->t[i].name, name)) continue;
        json_t *prop = json_object_get(json_object_get(t->t[i].parameters, "properties"), key);
        json_t *ty = json_object_get(prop, "type");
        return json_is_string(ty) ? json_string_value(ty) : NULL;
    }
    return NULL;
}

int srv_tool_set_add(srv_tool_set *s, const char *name, const json_t *parameters, bool strict, mx_error *err) {
    srv_tool *t = realloc(s->t, (size_t)(s->n + 1) * sizeof *t);
    if (!t) return mx_fail(err, "out of memory");
    s->t = t;
    srv_tool *x = &s->t[s->n];
    x->name = strdup(name);
    if (!x->name) return mx_fail(err, "out of memory");
    x->parameters = parameters ? json_deep_copy(parameters) : NULL;
    x->strict = strict;
    s->n++;
    return 0;
}

void srv_tool_set_clear(srv_tool_set *s) {
    for (int i = 0; i < s->n; i++) {
        free(s->t[i].name);
        json_decref(s->t[i].parameters);
    }
    free(s->t);
    json_decref(s->openai);
    memset(s, 0, sizeof *s);
}

static bool name_ok(const char *n) {
    size_t len = strlen(n);
    if (len < 1 || len > 64) return false;
    for (size_t i = 0; i < len; i++) {
        const char c = n[i];
        if (!(c == '_' || c == '-' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')))
            return false;
    }
    return true;
}

int srv_tool_set_parse_openai(srv_tool_set *s, const json_t *tools, char *field, size_t cap, mx_error *err) {
    snprintf(field, cap, "tools");
    if (!json_is_array(tools)) return mx_fail(err, "tools: expected an array of {\"type\":\"function\",\"function\":{...}}");
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *e = json_array_get(tools, i);
        json_t *ty = json_object_get(e, "type"), *fn = json_object_get(e, "function");
        snprintf(field, cap, "tools[%zu].type", i);
        if (!json_is_object(e) || !json_is_string(ty))
            return mx_fail(err, "%s: expected an object with \"type\": \"function\"", field);
        if (strcmp(json_string_value(ty), "function"))
            return mx_fail(err, "%s: '%s' tools are not supported; only \"function\"", field, json_string_value(ty));
        snprintf(field, cap, "tools[%zu].function", i);
        if (!json_is_object(fn)) return mx_fail(err, "%s: expected an object {name, description, parameters}", field);
        json_t *nm = json_object_get(fn, "name"), *ds = json_object_get(fn, "description");
        json_t *pa = json_object_get(fn, "parameters"), *st = json_object_get(fn, "strict");
        snprintf(field, cap, "tools[%zu].function.name", i);
        if (!json_is_string(nm) || !name_ok(json_string_value(nm)))
            return mx_fail(err, "%s: expected a name of 1 to 64 characters a-z, A-Z, 0-9, _ or -", field);
        if (srv_tool_set_has(s, json_string_value(nm), strlen(json_string_value(nm))))
            return mx_fail(err, "%s: '%s' is defined twice", field, json_string_value(nm));
        snprintf(field, cap, "tools[%zu].function.description", i);
        if (ds && !json_is_null(ds) && !json_is_string(ds)) return mx_fail(err, "%s: expected a string", field);
        snprintf(field, cap, "tools[%zu].function.parameters", i);
        if (pa && !json_is_null(pa) && !json_is_object(pa))
            return mx_fail(err, "%s: expected a JSON schema object", field);
        snprintf(field, cap, "tools[%zu].function.strict", i);
        if (st && !json_is_null(st) && !json_is_boolean(st)) return mx_fail(err, "%s: expected a boolean", field);
        if (srv_tool_set_add(s, json_string_value(nm), json_is_object(pa) ? pa : NULL, json_is_true(st), err))
            return -1;
    }
    json_decref(s->openai);
    s->openai = json_deep_copy(tools);
    snprintf(field, cap, "tools");
    return 0;
}

/* ==== Options ==== */
srv_chat_opts *srv_chat_opts_new(void) {
    srv_chat_opts *o = calloc(1, sizeof *o);
    if (!o) return NULL;
    o->refs = 1;
    o->parallel = true;
    return o;
}

srv_chat_opts *srv_chat_opts_ref(srv_chat_opts *o) {
    if (o) __atomic_add_fetch(&o->refs, 1, __ATOMIC_RELAXED);
    return o;
}

void srv_chat_opts_unref(srv_chat_opts *o) {
    if (!o || __atomic_sub_fetch(&o->refs, 1, __ATOMIC_ACQ_REL)) return;
    srv_tool_set_clear(&o->tools);
    grammar_release(o->call_grammar);
    free(o->prefill);
    free(o);
}

/* ==== Formats ==== */
static const char *const k_format_names[] = {"none", "hermes", "llama3", "mistral", "deepseek_v3"};

const char *srv_tool_format_name(srv_tool_format f) {
    return (unsigned)f < sizeof k_format_names / sizeof k_format_names[0] ? k_format_names[f] : "?";
}

int srv_tool_format_parse(const char *s) {
    if (!strcmp(s, "auto")) return -1;
    for (int i = 0; i < (int)(sizeof k_format_names / sizeof k_format_names[0]); i++)
        if (!strcmp(s, k_format_names[i])) return i;
    /* vLLM's --tool-call-parser names of the same syntaxes */
    if (!strcmp(s, "qwen") || !strcmp(s, "qwen25") || !strcmp(s, "qwen3_coder")) return SRV_TOOLS_HERMES;
    if (!strcmp(s, "llama3_json")) return SRV_TOOLS_LLAMA3;
    if (!strcmp(s, "deepseek_v31")) return SRV_TOOLS_DEEPSEEK_V3;
    return -2;
}

srv_tool_format srv_tools_detect(const char *t) {
    if (!t) return SRV_TOOLS_NONE;
    if (strstr(t, "<tool_call>")) return SRV_TOOLS_HERMES;
    if (strstr(t, "[TOOL_CALLS]")) return SRV_TOOLS_MISTRAL;
    if (strstr(t, "<｜tool▁calls▁begin｜>") || strstr(t, "<｜tool▁call▁begin｜>")) return SRV_TOOLS_DEEPSEEK_V3;
    if (strstr(t, "<|python_tag|>")) return SRV_TOOLS_LLAMA3;
    /* Llama 3.2's template: JSON calls, tool results under the ipython role */
    if (strstr(t, "<|start_header_id|>") && strstr(t, "ipython")) return SRV_TOOLS_LLAMA3;
    return SRV_TOOLS_NONE;
}

/* ==== Ids ==== */
/* Mistral's template wants call ids of exactly 9 alphanumerics: other ids map to a stable hash,
 * so an assistant call and the tool message answering it keep matching. */
static void id9_of(const char *id, char out[10]) {
    size_t n = strlen(id);
    bool ok = n == 9;
    for (size_t i = 0; ok && i < n; i++) {
        const char c = id[i];
        ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    }
    if (ok) {
        memcpy(out, id, 10);
        return;
    }
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)id[i]) * 1099511628211ull;
    for (int i = 0; i < 9; i++) {
        out[i] = a[h % 62];
        h = h / 62 ^ (h << 29) ^ 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
    }
    out[9] = 0;
}

/* ==== Messages for the template ==== */
static void map_id(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    if (!json_is_string(v)) return;
    char id[10];
    id9_of(json_string_value(v), id);
    json_object_set_new(o, key, json_string(id));
}

json_t *srv_chat_template_messages(const srv_chat_caps *caps, const json_t *messages) {
    json_t *out = json_deep_copy(messages);
    if (!out) return NULL;
    for (size_t i = 0; i < json_array_size(out); i++) {
        json_t *m = json_array_get(out, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *calls = json_object_get(m, "tool_calls");
        if (caps->empty_content && json_is_null(json_object_get(m, "content")))
            json_object_set_new(m, "content", json_string(""));
        if (calls && (!json_is_array(calls) || !json_array_size(calls))) {
            json_object_del(m, "tool_calls"); /* null or []: no calls */
            calls = NULL;
        }
        for (size_t k = 0; k < json_array_size(calls); k++) {
            json_t *c = json_array_get(calls, k), *fn = json_object_get(c, "function");
            json_t *args = json_object_get(fn, "arguments");
            if (caps->object_args && json_is_string(args)) {
                json_t *obj = json_loads(json_string_value(args), 0, NULL);
                if (json_is_object(obj)) json_object_set_new(fn, "arguments", obj);
                else json_decref(obj);
            }
            if (caps->id9) map_id(c, "id");
        }
        if (role && !strcmp(role, "tool")) {
            json_t *tid = json_object_get(m, "tool_call_id");
            /* the name of the call this answers, for templates that print it */
            for (size_t j = i; json_is_string(tid) && !json_object_get(m, "name") && j-- > 0;) {
                json_t *pc = json_object_get(json_array_get(messages, j), "tool_calls");
                for (size_t k = 0; k < json_array_size(pc); k++) {
                    json_t *c = json_array_get(pc, k);
                    if (json_equal(json_object_get(c, "id"), tid)) {
                        json_t *nm = json_object_get(json_object_get(c, "function"), "name");
                        if (json_is_string(nm)) json_object_set(m, "name", nm);
                        break;
                    }
                }
            }
            if (caps->id9) map_id(m, "tool_call_id");
        }
    }
    return out;
}

/* ==== Capabilities ==== */
#define PROBE_VALUE "probe_value_7341"
#define PROBE_RAW "\"probe_arg\": \"" PROBE_VALUE "\""

/* Renders the probe conversation; *out NULL when the template raised. The call-only assistant
 * turn has content null, or "" when empty_content. */
static void probe(const srv_backend *be, json_t *args, const char *id, bool with_call, bool empty_content, char **out) {
    json_t *fn = json_pack("{s:s, s:o}", "name", "probe_fn", "arguments", args);
    json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", "probe question");
    if (with_call) {
        json_array_append_new(msgs, json_pack("{s:s, s:o, s:[{s:s, s:s, s:o}]}", "role", "assistant", "content",
                                              empty_content ? json_string("") : json_null(), "tool_calls", "id", id,
                                              "type", "function", "function", fn));
        json_array_append_new(msgs, json_pack("{s:s, s:s, s:s, s:s}", "role", "tool", "tool_call_id", id, "name",
                                              "probe_fn", "content", "probe result"));
    } else {
        json_decref(fn);
    }
    json_t *extra = json_pack("{s:[{s:s, s:{s:s, s:s, s:{s:s, s:{s:{s:s}}}}}]}", "tools", "type", "function",
                              "function", "name", "probe_fn", "description", "probe", "parameters", "type", "object",
                              "properties", "probe_arg", "type", "string");
    mx_error err;
    *out = NULL;
    if (be->text_ops->apply_template(be->text, msgs, extra, true, out, &err)) *out = NULL;
    json_decref(msgs);
    json_decref(extra);
}

int srv_chat_caps_init(srv_chat_caps *c, const srv_backend *be, const srv_config *cfg, mx_error *err) {
    memset(c, 0, sizeof *c);
    const char *text = be->info.chat_template_text;
    if (srv_reasoning_parse(cfg->reasoning_format[0] ? cfg->reasoning_format : "auto", &c->reasoning))
        return mx_fail(err, "--reasoning-format: expected none, auto, deepseek or deepseek-legacy, got '%s'",
                       cfg->reasoning_format);
    if (cfg->chat_template_kwargs[0]) {
        json_error_t je;
        c->kwargs = json_loads(cfg->chat_template_kwargs, 0, &je);
        if (!json_is_object(c->kwargs)) {
            json_decref(c->kwargs);
            c->kwargs = NULL;
            return mx_fail(err, "--chat-template-kwargs: expected a JSON object, e.g. '{\"enable_thinking\":false}'");
        }
    }
    const int forced = srv_tool_format_parse(cfg->tool_call_parser[0] ? cfg->tool_call_parser : "auto");
    if (forced == -2)
        return mx_fail(err, "--tool-call-parser: expected auto, none, hermes, llama3, mistral or deepseek_v3, got '%s'",
                       cfg->tool_call_parser);
    c->format = forced >= 0 ? (srv_tool_format)forced : srv_tools_detect(text);
    if (!be->text_ops->has_template || !text) return 0;
    c->thinks = strstr(text, "<think>") != NULL;
    c->enable_thinking = strstr(text, "enable_thinking") != NULL;
    c->reasoning_effort = strstr(text, "reasoning_effort") != NULL;

    char *with = NULL, *without = NULL, *as_str = NULL, *as_obj = NULL, *bad_id = NULL;
    mx_error e2;
    json_t *plain = json_pack("[{s:s, s:s}]", "role", "user", "content", "probe question");
    if (be->text_ops->apply_template(be->text, plain, NULL, true, &without, &e2)) without = NULL;
    json_decref(plain);
    probe(be, json_string("{" PROBE_RAW "}"), "abcDEF123", false, false, &with);
    c->renders_tools = with && without && strcmp(with, without);
    /* OpenAI sends a call-only turn with content null; Qwen 3's template needs a string there
     * ('</think>' in content), DeepSeek V3's renders the calls only for null */
    for (int empty = 0; empty < 2 && !as_str && !as_obj; empty++) {
        probe(be, json_string("{" PROBE_RAW "}"), "abcDEF123", true, empty, &as_str);
        probe(be, json_pack("{s:s}", "probe_arg", PROBE_VALUE), "abcDEF123", true, empty, &as_obj);
        c->empty_content = empty;
    }
    /* objects wherever the template prints them as JSON (tojson: the form the model was trained
     * on, whatever spacing the client used); strings where it cannot (DeepSeek V3 concatenates) */
    c->object_args = as_obj && strstr(as_obj, PROBE_RAW);
    if (as_obj || as_str) {
        json_t *a = c->object_args ? json_pack("{s:s}", "probe_arg", PROBE_VALUE) : json_string("{" PROBE_RAW "}");
        probe(be, a, "call_probe_0001", true, c->empty_content, &bad_id);
        c->id9 = !bad_id;
    } else {
        c->empty_content = false;
    }
    free(with);
    free(without);
    free(as_str);
    free(as_obj);
    free(bad_id);
    return 0;
}

void srv_chat_caps_free(srv_chat_caps *c) {
    json_decref(c->kwargs);
    memset(c, 0, sizeof *c);
}

/* ==== Rendering ==== */
/* A template that does not render tools (DeepSeek V3's) gets them described in the system
 * message, with an example of the family's call syntax, as llama.cpp's minja polyfill does. */
static void polyfill_tools(srv_tool_format f, json_t *msgs, const json_t *tools) {
    static const char *const example[] = {
        "",
        "<tool_call>\n{\"name\": \"tool_name\", \"arguments\": {\"arg1\": \"some_value\"}}\n</tool_call>",
        "{\"name\": \"tool_name\", \"parameters\": {\"arg1\": \"some_value\"}}",
        "[TOOL_CALLS][{\"name\": \"tool_name\", \"arguments\": {\"arg1\": \"some_value\"}}]",
        ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>tool_name\n```json\n{\"arg1\": "
         "\"some_value\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
    };
    char *list = json_dumps(tools, JSON_INDENT(2));
    if (!list) return;
    const char *ex = (unsigned)f < sizeof example / sizeof example[0] ? example[f] : "";
    size_t cap = strlen(list) + strlen(ex) + 256;
    char *text = malloc(cap);
    if (text) {
        snprintf(text, cap, "You can call any of the following tools to satisfy the user's requests: %s\n\n"
                            "Example tool call syntax:\n\n%s", list, ex);
        json_t *first = json_array_get(msgs, 0);
        const char *role = json_string_value(json_object_get(first, "role"));
        json_t *content = json_object_get(first, "content");
        if (role && !strcmp(role, "system") && json_is_string(content)) {
            size_t n = json_string_length(content) + strlen(text) + 3;
            char *joined = malloc(n);
            if (joined) {
                snprintf(joined, n, "%s\n\n%s", json_string_value(content), text);
                json_object_set_new(first, "content", json_string(joined));
                free(joined);
            }
        } else {
            json_array_insert_new(msgs, 0, json_pack("{s:s, s:s}", "role", "system", "content", text));
        }
    }
    free(text);
    free(list);
}

static int check_effort(const srv_chat_caps *caps, srv_chat_opts *o, json_t *x, const char **param, mx_error *err) {
    const char *e = o->reasoning_effort;
    if (!e[0]) return 0;
    *param = "reasoning_effort";
    if (!strcmp(e, "none")) {
        /* llama-server: none turns the thoughts off; a template without a switch that never
         * thinks has nothing to turn off */
        if (caps->enable_thinking) {
            if (!json_object_get(x, "enable_thinking")) json_object_set_new(x, "enable_thinking", json_false());
            return 0;
        }
        if (caps->thinks)
            return mx_fail(err, "reasoning_effort: 'none' cannot take effect: this model's chat template thinks "
                                "and has no enable_thinking switch");
        return 0;
    }
    if (!caps->reasoning_effort)
        return mx_fail(err, "reasoning_effort: '%s' cannot take effect: this model's chat template does not read "
                            "reasoning_effort (only 'none' is honoured, through enable_thinking)", e);
    json_object_set_new(x, "reasoning_effort", json_string(e));
    return 0;
}

int srv_chat_render(const srv_chat_caps *caps, const srv_backend *be, srv_chat_opts *o, const json_t *messages,
                    const json_t *extra, bool add_gen, char **prompt, const char **param, mx_error *err) {
    *prompt = NULL;
    const bool call_tools = o->tools.n > 0 && o->choice.mode != SRV_TOOL_CHOICE_NONE;
    if (call_tools) {
        *param = "tools";
        if (caps->format == SRV_TOOLS_NONE)
            return mx_fail(err, "tools: this model's chat template has no tool-call syntax this server can parse "
                                "(start the server with --tool-call-parser hermes|llama3|mistral|deepseek_v3, or "
                                "send tool_choice \"none\")");
        if (srv_tools_need_constraint(o) && srv_tools_enforce(caps->format, o, param, err)) return -1;
    }
    o->format = call_tools ? caps->format : SRV_TOOLS_NONE;
    o->reasoning_used = o->reasoning_given ? o->reasoning : caps->reasoning;

    json_t *x = caps->kwargs ? json_deep_copy(caps->kwargs) : json_object();
    if (json_is_object(extra)) json_object_update(x, (json_t *)extra);
    if (o->tools.n && !call_tools) json_object_del(x, "tools"); /* tool_choice none: not offered */
    int rc = check_effort(caps, o, x, param, err);
    json_t *msgs = rc ? NULL : srv_chat_template_messages(caps, messages);
    if (!rc && !msgs) rc = mx_fail(err, "out of memory");
    if (!rc && call_tools && !caps->renders_tools) polyfill_tools(caps->format, msgs, json_object_get(x, "tools"));
    if (!rc) {
        *param = "messages";
        rc = be->text_ops->apply_template(be->text, msgs, x, add_gen, prompt, err);
    }
    json_decref(msgs);
    json_decref(x);
    if (!rc && o->prefill && *o->prefill) { /* the reply continues a message the client began */
        const size_t a = strlen(*prompt), b = strlen(o->prefill);
        char *p = realloc(*prompt, a + b + 1);
        if (p) {
            memcpy(p + a, o->prefill, b + 1);
            *prompt = p;
        } else {
            free(*prompt);
            *prompt = NULL;
            rc = mx_fail(err, "out of memory");
        }
    }
    if (rc) return -1;
    o->start_in_reasoning = o->reasoning_used != SRV_REASONING_NONE && srv_prompt_opens_think(*prompt);
    return 0;
}

/* ==== Parser ==== */
bool srv_chat_parses(const srv_chat_opts *o) {
    return o && (o->format != SRV_TOOLS_NONE || o->reasoning_used != SRV_REASONING_NONE);
}

srv_cp *srv_chat_parser_new(const srv_chat_opts *o) {
    srv_cp_config c = {.format = o->format, .reasoning = o->reasoning_used, .start_in_reasoning = o->start_in_reasoning,
                       .parallel = o->parallel, .tools = &o->tools};
    return srv_cp_new(&c);
}

int srv_chat_keep_pieces(const srv_chat_opts *o, const char **out, int cap) {
    static const char *const hermes[] = {"<tool_call>", "</tool_call>", NULL};
    static const char *const llama[] = {"<|python_tag|>", NULL};
    static const char *const mistral[] = {"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", NULL};
    static const char *const deepseek[] = {"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
                                           "<｜tool▁call▁end｜>", "<｜tool▁sep｜>", NULL};
    static const char *const think[] = {"<think>", "</think>", NULL};
    const char *const *lists[2] = {NULL, think};
    switch (o->format) {
    case SRV_TOOLS_HERMES: lists[0] = hermes; break;
    case SRV_TOOLS_LLAMA3: lists[0] = llama; break;
    case SRV_TOOLS_MISTRAL: lists[0] = mistral; break;
    case SRV_TOOLS_DEEPSEEK_V3: lists[0] = deepseek; break;
    default: break;
    }
    int n = 0;
    for (int l = 0; l < 2; l++)
        for (int i = 0; lists[l] && lists[l][i] && n < cap; i++) out[n++] = lists[l][i];
    return n;
}
