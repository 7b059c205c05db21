/* The OpenAI chat-completions request fields of the tool and reasoning layer, and every other
 * OpenAI field this server cannot honour, which is refused with a 400 naming it (a field that
 * is accepted takes effect; see the table in docs/tools.md). Called by srv_request_parse for
 * /v1/chat/completions after the common fields. */
#include <string.h>

#include "server/srv_request.h"
#include "server/srv_tools.h"

static int refuse(srv_request *r, mx_error *err, const char *field, const char *msg) {
    snprintf(r->bad_param, sizeof r->bad_param, "%.63s", field);
    return mx_fail(err, "%s: %s", field, msg);
}

static json_t *given(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return v && !json_is_null(v) ? v : NULL;
}

/* ==== tools, tool_choice, parallel_tool_calls ==== */
static int parse_tools(srv_request *r, srv_chat_opts *c, json_t *o, mx_error *err) {
    json_t *tools = given(o, "tools"), *tc = given(o, "tool_choice"), *ptc = given(o, "parallel_tool_calls");
    if (given(o, "functions"))
        return refuse(r, err, "functions", "the deprecated functions field is not supported; send tools");
    if (given(o, "function_call"))
        return refuse(r, err, "function_call", "the deprecated function_call field is not supported; send tool_choice");
    if (tools) {
        char field[64];
        if (srv_tool_set_parse_openai(&c->tools, tools, field, sizeof field, err)) {
            snprintf(r->bad_param, sizeof r->bad_param, "%.63s", field);
            return -1;
        }
    }
    if (ptc) {
        if (!json_is_boolean(ptc)) return refuse(r, err, "parallel_tool_calls", "expected a boolean");
        c->parallel = json_is_true(ptc);
    }
    if (!tc) return 0;
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        if (!strcmp(s, "auto")) c->choice.mode = SRV_TOOL_CHOICE_AUTO;
        else if (!strcmp(s, "none")) c->choice.mode = SRV_TOOL_CHOICE_NONE;
        else if (!strcmp(s, "required")) c->choice.mode = SRV_TOOL_CHOICE_REQUIRED;
        else return refuse(r, err, "tool_choice", "expected \"none\", \"auto\", \"required\" or "
                                                  "{\"type\":\"function\",\"function\":{\"name\":...}}");
    } else if (json_is_object(tc)) {
        json_t *ty = json_object_get(tc, "type");
        json_t *nm = json_object_get(json_object_get(tc, "function"), "name");
        if (!json_is_string(ty) || strcmp(json_string_value(ty), "function"))
            return refuse(r, err, "tool_choice", "only {\"type\":\"function\",\"function\":{\"name\":...}} is "
                                                 "supported as an object (allowed_tools and custom are not)");
        if (!json_is_string(nm)) return refuse(r, err, "tool_choice", "function.name: expected a string");
        if (!srv_tool_set_has(&c->tools, json_string_value(nm), json_string_length(nm)))
            return refuse(r, err, "tool_choice", "names a function that is not among tools");
        c->choice.mode = SRV_TOOL_CHOICE_NAMED;
        snprintf(c->choice.name, sizeof c->choice.name, "%s", json_string_value(nm));
    } else {
        return refuse(r, err, "tool_choice", "expected a string or an object");
    }
    if (c->choice.mode == SRV_TOOL_CHOICE_REQUIRED && !c->tools.n)
        return refuse(r, err, "tool_choice", "\"required\" needs tools");
    return 0;
}

/* Assistant tool_calls and tool results in the history, in OpenAI's shapes. */
static int check_messages(srv_request *r, mx_error *err) {
    char f[64];
    for (size_t i = 0; i < json_array_size(r->messages); i++) {
        json_t *m = json_array_get(r->messages, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *calls = given(m, "tool_calls");
        if (calls && strcmp(role, "assistant")) {
            snprintf(f, sizeof f, "messages[%zu].tool_calls", i);
            return refuse(r, err, f, "only assistant messages carry tool_calls");
        }
        if (calls && !json_is_array(calls)) {
            snprintf(f, sizeof f, "messages[%zu].tool_calls", i);
            return refuse(r, err, f, "expected an array");
        }
        for (size_t k = 0; k < json_array_size(calls); k++) {
            json_t *c = json_array_get(calls, k), *fn = json_object_get(c, "function");
            json_t *args = json_object_get(fn, "arguments");
            snprintf(f, sizeof f, "messages[%zu].tool_calls[%zu]", i, k);
            if (!json_is_object(c) || !json_is_string(json_object_get(fn, "name")) ||
                !(json_is_string(args) || json_is_object(args)))
                return refuse(r, err, f, "expected {\"id\", \"type\": \"function\", \"function\": {\"name\", "
                                         "\"arguments\"}}");
            json_t *id = json_object_get(c, "id");
            if (id && !json_is_string(id)) return refuse(r, err, f, "id: expected a string");
        }
        if (!strcmp(role, "tool") && !json_is_string(json_object_get(m, "tool_call_id"))) {
            snprintf(f, sizeof f, "messages[%zu].tool_call_id", i);
            return refuse(r, err, f, "required for role tool (the id of the call it answers)");
        }
    }
    return 0;
}

/* ==== Reasoning ==== */
static int parse_reasoning(srv_request *r, srv_chat_opts *c, json_t *o, mx_error *err) {
    json_t *rf = given(o, "reasoning_format"), *re = given(o, "reasoning_effort");
    if (rf) {
        if (!json_is_string(rf) || srv_reasoning_parse(json_string_value(rf), &c->reasoning))
            return refuse(r, err, "reasoning_format", "expected none, auto, deepseek or deepseek-legacy");
        c->reasoning_given = true;
    }
    if (re) {
        static const char *const efforts[] = {"none", "minimal", "low", "medium", "high", "xhigh"};
        bool ok = false;
        for (int i = 0; i < 6 && json_is_string(re); i++) ok |= !strcmp(json_string_value(re), efforts[i]);
        if (!ok) return refuse(r, err, "reasoning_effort", "expected none, minimal, low, medium, high or xhigh");
        snprintf(c->reasoning_effort, sizeof c->reasoning_effort, "%s", json_string_value(re));
    }
    return 0;
}

/* ==== OpenAI fields with no effect here ==== */
static int parse_unsupported(srv_request *r, json_t *o, mx_error *err) {
    static const struct { const char *field, *why; } never[] = {
        {"audio", "audio output is not supported"},
        {"prediction", "predicted outputs are not supported"},
        {"web_search_options", "web search is not supported"},
        {"verbosity", "no model served here has a verbosity control"},
    };
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
        if (given(o, never[i].field)) return refuse(r, err, never[i].field, never[i].why);
    json_t *mod = given(o, "modalities");
    if (mod) {
        bool text_only = json_is_array(mod) && json_array_size(mod) >= 1;
        for (size_t i = 0; text_only && i < json_array_size(mod); i++)
            text_only = json_is_string(json_array_get(mod, i)) && !strcmp(json_string_value(json_array_get(mod, i)), "text");
        if (!text_only) return refuse(r, err, "modalities", "only [\"text\"] is supported");
    }
    json_t *store = given(o, "store");
    if (store && !json_is_boolean(store)) return refuse(r, err, "store", "expected a boolean");
    if (json_is_true(store)) return refuse(r, err, "store", "this server does not store completions");
    json_t *md = given(o, "metadata");
    if (md && !json_is_object(md)) return refuse(r, err, "metadata", "expected an object");
    if (md && json_object_size(md))
        return refuse(r, err, "metadata", "metadata is kept with stored completions, which this server does not keep");
    json_t *tier = given(o, "service_tier");
    if (tier && !(json_is_string(tier) && (!strcmp(json_string_value(tier), "auto") ||
                                           !strcmp(json_string_value(tier), "default"))))
        return refuse(r, err, "service_tier", "this server has one tier: only \"auto\" or \"default\"");
    json_t *ret = given(o, "prompt_cache_retention");
    if (ret && !(json_is_string(ret) && (!strcmp(json_string_value(ret), "in-memory") ||
                                         !strcmp(json_string_value(ret), "in_memory"))))
        return refuse(r, err, "prompt_cache_retention", "the prefix cache is in memory only: \"in-memory\"");
    static const char *const ids[] = {"prompt_cache_key", "safety_identifier"};
    for (int i = 0; i < 2; i++) {
        json_t *v = given(o, ids[i]);
        if (v && !json_is_string(v)) return refuse(r, err, ids[i], "expected a string");
    }
    json_t *so = given(o, "stream_options");
    if (json_is_true(json_object_get(so, "include_obfuscation")))
        return refuse(r, err, "stream_options", "include_obfuscation: this server adds no obfuscation padding");
    return 0;
}

int srv_chat_parse_fields(srv_request *r, json_t *o, mx_error *err) {
    srv_chat_opts *c = srv_chat_opts_new();
    if (!c) return refuse(r, err, "body", "out of memory");
    r->chat = c;
    if (parse_tools(r, c, o, err) || parse_reasoning(r, c, o, err) || check_messages(r, err) ||
        parse_unsupported(r, o, err))
        return -1;
    return 0;
}
