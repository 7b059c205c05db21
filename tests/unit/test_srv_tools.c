/* The tool layer against the real chat templates of tests/fixtures/templates (Qwen 2.5, Qwen 3,
 * Llama 3.2, Mistral Nemo, DeepSeek V3, and two without tools):
 * - what each template can do (call syntax, arguments as objects, Mistral's 9-character ids);
 * - a conversation with tool calls and tool results, sent in OpenAI's wire form (arguments as
 *   JSON strings, "call_..." ids), renders exactly as transformers renders the fixture's
 *   version (the expected texts of conversations.json) or, where the fixture has none, as the
 *   template itself renders the form it wants;
 * - the assistant turn the template writes for a tool call parses back into that call;
 * - tool_choice, parallel_tool_calls, reasoning_effort and the OpenAI request fields: each one
 *   takes effect or is refused naming it;
 * - the enforcement grammar (GBNF) of each family is well formed and calls the schema hook. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "server/srv_request.h"
#include "server/srv_tools.h"
#include "text/chat_template.h"

/* ==== A backend that only renders templates ==== */
typedef struct tpl_be {
    srv_backend be;
    srv_text_ops ops;
    chat_template *ct;
    json_t *fixture;
    srv_chat_caps caps;
} tpl_be;

static int tb_apply(void *txt, const json_t *m, const json_t *extra, bool add_gen, char **out, mx_error *err) {
    return chat_template_apply(((tpl_be *)txt)->ct, m, extra, add_gen, out, err);
}

static json_t *load_json(const char *rel) {
    char path[1024];
    const char *src = getenv("MLXCEL_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/%s", src ? src : ".", rel);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) fail_msg("%s: %s", path, je.text);
    return j;
}

/* The fixture's template and special tokens written as a checkpoint's tokenizer_config.json. */
static void tb_open(tpl_be *t, const char *name) {
    memset(t, 0, sizeof *t);
    char rel[256];
    snprintf(rel, sizeof rel, "tests/fixtures/templates/%s.json", name);
    t->fixture = load_json(rel);
    char dir[] = "/tmp/mlxcel-tools-XXXXXX";
    assert_non_null(mkdtemp(dir));
    json_t *cfg = json_object();
    json_object_set(cfg, "chat_template", json_object_get(t->fixture, "chat_template"));
    const char *toks[] = {"bos_token", "eos_token"};
    for (int i = 0; i < 2; i++)
        if (json_is_string(json_object_get(t->fixture, toks[i])))
            json_object_set(cfg, toks[i], json_object_get(t->fixture, toks[i]));
    char path[1100];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    assert_int_equal(json_dump_file(cfg, path, 0), 0);
    json_decref(cfg);
    mx_error err;
    if (chat_template_load(&t->ct, dir, NULL, &err)) fail_msg("%s: %s", name, err.msg);
    unlink(path);
    rmdir(dir);
    t->ops.apply_template = tb_apply;
    t->ops.has_template = true;
    t->be.text_ops = &t->ops;
    t->be.text = t;
    t->be.info.chat_template_text = chat_template_source(t->ct);
    srv_config cfgs;
    srv_config_defaults(&cfgs);
    if (srv_chat_caps_init(&t->caps, &t->be, &cfgs, &err)) fail_msg("%s: caps: %s", name, err.msg);
}

static void tb_close(tpl_be *t) {
    srv_chat_caps_free(&t->caps);
    chat_template_free(t->ct);
    json_decref(t->fixture);
}

/* ==== Capabilities ==== */
static void test_caps(void **st) {
    (void)st;
    static const struct {
        const char *name;
        srv_tool_format f;
        bool renders, objects, id9, thinks;
    } want[] = {
        {"qwen2_5", SRV_TOOLS_HERMES, true, true, false, false},
        {"qwen3", SRV_TOOLS_HERMES, true, true, false, true},
        {"llama3_2", SRV_TOOLS_LLAMA3, true, true, false, false},
        {"mistral_nemo", SRV_TOOLS_MISTRAL, true, true, true, false},
        {"deepseek_v3", SRV_TOOLS_DEEPSEEK_V3, false, false, false, false},
        {"llama3", SRV_TOOLS_NONE, false, false, false, false},
        {"gemma3", SRV_TOOLS_NONE, false, false, false, false},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        tpl_be t;
        tb_open(&t, want[i].name);
        if (t.caps.format != want[i].f || t.caps.renders_tools != want[i].renders ||
            t.caps.object_args != want[i].objects || t.caps.id9 != want[i].id9 || t.caps.thinks != want[i].thinks)
            fail_msg("%s: format %s renders %d objects %d id9 %d thinks %d", want[i].name,
                     srv_tool_format_name(t.caps.format), t.caps.renders_tools, t.caps.object_args, t.caps.id9,
                     t.caps.thinks);
        tb_close(&t);
    }
}

/* ==== Round trip through the templates ==== */
/* conversations.json's conversation `id` in OpenAI's wire form: arguments as JSON text, an id
 * on every call and tool_call_id on every tool result. */
static json_t *wire_form(json_t *conv) {
    json_t *m = json_deep_copy(json_object_get(conv, "messages"));
    int next = 1;
    char id[32];
    size_t i;
    json_t *msg;
    json_array_foreach(m, i, msg) {
        json_t *calls = json_object_get(msg, "tool_calls");
        size_t k;
        json_t *c;
        json_array_foreach(calls, k, c) {
            json_t *fn = json_object_get(c, "function");
            char *args = json_dumps(json_object_get(fn, "arguments"), JSON_COMPACT);
            json_object_set_new(fn, "arguments", json_string(args));
            free(args);
            if (!json_object_get(c, "id")) {
                snprintf(id, sizeof id, "call_wire%d", next++);
                json_object_set_new(c, "id", json_string(id));
            }
        }
        if (!strcmp(json_string_value(json_object_get(msg, "role")), "tool") && !json_object_get(msg, "tool_call_id"))
            json_object_set_new(msg, "tool_call_id", json_string("call_wire1"));
        if (calls && !json_string_length(json_object_get(msg, "content"))) json_object_set_new(msg, "content", json_null());
    }
    return m;
}

static json_t *conversation(int id) {
    static json_t *doc;
    if (!doc) doc = load_json("tests/fixtures/templates/conversations.json");
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(doc, "conversations"), i, c) if (json_integer_value(json_object_get(c, "id")) == id) return c;
    fail_msg("no conversation %d", id);
    return NULL;
}

static const char *expected(tpl_be *t, int conv, bool add_gen) {
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(t->fixture, "cases"), i, c) {
        if (json_integer_value(json_object_get(c, "conversation")) == conv &&
            json_is_true(json_object_get(c, "add_generation_prompt")) == add_gen)
            return json_string_value(json_object_get(c, "expected"));
    }
    return NULL;
}

/* Renders a chat request the way the server does (tools from the conversation, tool_choice auto). */
static char *render(tpl_be *t, json_t *msgs, json_t *tools, bool add_gen, srv_chat_opts **opts_out) {
    srv_chat_opts *o = srv_chat_opts_new();
    char field[64];
    mx_error err;
    if (tools && srv_tool_set_parse_openai(&o->tools, tools, field, sizeof field, &err)) fail_msg("%s", err.msg);
    json_t *extra = tools ? json_pack("{s:O}", "tools", tools) : NULL;
    if (json_object_get(t->fixture, "cases")) {
        /* the fixtures fix Llama's date */
        if (!extra) extra = json_object();
        json_object_set_new(extra, "date_string", json_string("26 Jul 2024"));
    }
    char *prompt = NULL;
    const char *param = NULL;
    if (srv_chat_render(&t->caps, &t->be, o, msgs, extra, add_gen, &prompt, &param, &err))
        fail_msg("render: %s (%s)", err.msg, param);
    json_decref(extra);
    if (opts_out) *opts_out = o;
    else srv_chat_opts_unref(o);
    return prompt;
}

static void check_same(const char *label, const char *want, const char *got) {
    if (strcmp(want, got)) {
        size_t i = 0;
        while (want[i] && want[i] == got[i]) i++;
        fail_msg("%s: differs at byte %zu\n want ...%.60s\n got  ...%.60s", label, i, want + (i > 20 ? i - 20 : 0),
                 got + (i > 20 ? i - 20 : 0));
    }
}

static void test_round_trip(void **st) {
    (void)st;
    /* 13: two calls with object arguments and two tool results; 19: one call after thoughts */
    static const struct { const char *tpl; int conv; } cases[] = {
        {"qwen2_5", 13}, {"qwen3", 13}, {"qwen2_5", 19}, {"qwen3", 19}, {"llama3_2", 19},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tpl_be t;
        tb_open(&t, cases[i].tpl);
        json_t *conv = conversation(cases[i].conv);
        json_t *wire = wire_form(conv);
        for (int g = 0; g < 2; g++) {
            const char *want = expected(&t, cases[i].conv, g);
            assert_non_null(want);
            char *got = render(&t, wire, json_object_get(conv, "tools"), g, NULL);
            char label[96];
            snprintf(label, sizeof label, "%s conversation %d (add_generation_prompt %d)", cases[i].tpl,
                     cases[i].conv, g);
            check_same(label, want, got);
            free(got);
        }
        json_decref(wire);
        tb_close(&t);
    }
    /* Mistral: "call_..." ids would make the template raise; they map to 9 alphanumerics, the
     * same for the call and its result */
    tpl_be t;
    tb_open(&t, "mistral_nemo");
    json_t *conv = conversation(13), *wire = wire_form(conv);
    char *got = render(&t, wire, json_object_get(conv, "tools"), true, NULL);
    const char *a = strstr(got, "\"arguments\": {\"city\": \"Paris\"}, \"id\": \"");
    assert_non_null(a);
    char id[10] = {0};
    memcpy(id, a + strlen("\"arguments\": {\"city\": \"Paris\"}, \"id\": \""), 9);
    char res[64];
    snprintf(res, sizeof res, "\"call_id\": \"%s\"}[/TOOL_RESULTS]", id);
    assert_non_null(strstr(got, res));
    assert_int_not_equal(strcmp(id, "call_1"), 0);
    free(got);
    json_decref(wire);
    tb_close(&t);
    /* DeepSeek V3 renders calls only for a null content, and the arguments text as sent; its
     * template does not render tools, so they are described in the system message */
    tb_open(&t, "deepseek_v3");
    conv = conversation(13);
    wire = wire_form(conv);
    got = render(&t, wire, json_object_get(conv, "tools"), true, NULL);
    assert_non_null(strstr(got, "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\":\"Paris\"}\n```"
                                "<｜tool▁call▁end｜>"));
    assert_non_null(strstr(got, "You can call any of the following tools"));
    assert_non_null(strstr(got, "\"name\": \"get_weather\""));
    free(got);
    json_decref(wire);
    tb_close(&t);
}

/* The assistant turn each template writes for a call parses back into that call. */
static void test_parse_rendered(void **st) {
    (void)st;
    static const char *const names[] = {"qwen2_5", "qwen3", "llama3_2", "mistral_nemo", "deepseek_v3"};
    static const char *const ends[] = {"<|im_end|>\n", "<|eot_id|>", "</s>", "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>"};
    json_t *tools = json_object_get(conversation(13), "tools");
    for (size_t i = 0; i < 5; i++) {
        tpl_be t;
        tb_open(&t, names[i]);
        json_t *user = json_pack("[{s:s, s:s}]", "role", "user", "content", "Weather in Paris?");
        json_t *turn = json_deep_copy(user);
        json_array_append_new(turn, json_pack("{s:s, s:n, s:[{s:s, s:s, s:{s:s, s:s}}]}", "role", "assistant",
                                              "content", "tool_calls", "id", "call_abc", "type", "function",
                                              "function", "name", "get_weather", "arguments",
                                              "{\"city\": \"Paris\", \"unit\": \"celsius\"}"));
        srv_chat_opts *o = NULL;
        char *prefix = render(&t, user, tools, true, &o);
        char *full = render(&t, turn, tools, false, NULL);
        if (strncmp(full, prefix, strlen(prefix))) fail_msg("%s: the generation prompt is not a prefix", names[i]);
        char *reply = strdup(full + strlen(prefix));
        for (size_t e = 0; e < 4; e++) {
            size_t rn = strlen(reply), en = strlen(ends[e]);
            if (rn >= en && !strcmp(reply + rn - en, ends[e])) reply[rn - en] = 0;
        }
        assert_int_equal(o->format, t.caps.format);
        srv_cp *p = srv_chat_parser_new(o);
        srv_cp_feed(p, reply, strlen(reply), NULL, NULL);
        srv_cp_finish(p, NULL, NULL);
        size_t n;
        srv_cp_content(p, &n);
        if (srv_cp_n_calls(p) != 1 || n) fail_msg("%s: '%s' gave %d calls, %zu content bytes", names[i], reply,
                                                  srv_cp_n_calls(p), n);
        assert_string_equal(srv_cp_call_name(p, 0), "get_weather");
        json_t *args = json_loads(srv_cp_call_args(p, 0, &n), 0, NULL);
        json_t *want = json_pack("{s:s, s:s}", "city", "Paris", "unit", "celsius");
        if (!json_equal(args, want)) fail_msg("%s: arguments %s", names[i], srv_cp_call_args(p, 0, &n));
        json_decref(args);
        json_decref(want);
        srv_cp_free(p);
        srv_chat_opts_unref(o);
        free(reply);
        free(prefix);
        free(full);
        json_decref(user);
        json_decref(turn);
        tb_close(&t);
    }
}

/* ==== Request fields ==== */
static int parse(const char *body, srv_request *r, mx_error *err) {
    srv_config d;
    srv_config_defaults(&d);
    return srv_request_parse(r, SRV_API_CHAT, body, strlen(body), &d, 1000, err);
}

#define MSGS "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"
#define TOOLS                                                                                                   \
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"," \
    "\"properties\":{\"city\":{\"type\":\"string\"}}}}}]"

static void expect_bad(const char *body, const char *param) {
    srv_request r;
    mx_error err = {{0}};
    if (!parse(body, &r, &err)) fail_msg("accepted: %s", body);
    if (strcmp(r.bad_param, param)) fail_msg("%s: param '%s', want '%s' (%s)", body, r.bad_param, param, err.msg);
    if (!strstr(err.msg, param)) fail_msg("%s: message '%s' does not name %s", body, err.msg, param);
    srv_request_free(&r);
}

static void expect_ok(const char *body, srv_request *r) {
    mx_error err = {{0}};
    if (parse(body, r, &err)) fail_msg("%s: %s", body, err.msg);
}

static void test_fields(void **st) {
    (void)st;
    /* the OpenAI chat fields this server cannot honour: a 400 naming each */
    expect_bad("{" MSGS ",\"functions\":[{\"name\":\"f\"}]}", "functions");
    expect_bad("{" MSGS ",\"function_call\":\"auto\"}", "function_call");
    expect_bad("{" MSGS ",\"audio\":{\"voice\":\"alloy\",\"format\":\"mp3\"}}", "audio");
    expect_bad("{" MSGS ",\"modalities\":[\"text\",\"audio\"]}", "modalities");
    expect_bad("{" MSGS ",\"store\":true}", "store");
    expect_bad("{" MSGS ",\"metadata\":{\"k\":\"v\"}}", "metadata");
    expect_bad("{" MSGS ",\"service_tier\":\"flex\"}", "service_tier");
    expect_bad("{" MSGS ",\"prediction\":{\"type\":\"content\",\"content\":\"x\"}}", "prediction");
    expect_bad("{" MSGS ",\"web_search_options\":{}}", "web_search_options");
    expect_bad("{" MSGS ",\"verbosity\":\"low\"}", "verbosity");
    expect_bad("{" MSGS ",\"prompt_cache_retention\":\"24h\"}", "prompt_cache_retention");
    expect_bad("{" MSGS ",\"stream\":true,\"stream_options\":{\"include_obfuscation\":true}}", "stream_options");
    expect_bad("{" MSGS ",\"reasoning_effort\":\"extreme\"}", "reasoning_effort");
    expect_bad("{" MSGS ",\"reasoning_format\":\"xml\"}", "reasoning_format");
    expect_bad("{" MSGS ",\"tools\":[{\"type\":\"custom\",\"custom\":{\"name\":\"x\"}}]}", "tools[0].type");
    expect_bad("{" MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"bad name\"}}]}",
               "tools[0].function.name");
    expect_bad("{" MSGS ",\"tool_choice\":\"required\"}", "tool_choice");
    expect_bad("{" MSGS "," TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}",
               "tool_choice");
    expect_bad("{" MSGS "," TOOLS ",\"tool_choice\":\"sometimes\"}", "tool_choice");
    expect_bad("{" MSGS "," TOOLS ",\"parallel_tool_calls\":\"yes\"}", "parallel_tool_calls");
    expect_bad("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"tool\",\"content\":\"r\"}]}",
               "messages[1].tool_call_id");
    expect_bad("{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"a\"}]}]}",
               "messages[0].tool_calls[0]");
    /* accepted: each takes effect (or is an identifier with nothing to do) */
    srv_request r;
    expect_ok("{" MSGS ",\"store\":false,\"metadata\":{},\"service_tier\":\"auto\",\"modalities\":[\"text\"],"
              "\"prompt_cache_key\":\"k\",\"safety_identifier\":\"u1\",\"prompt_cache_retention\":\"in-memory\","
              "\"user\":\"u\"}", &r);
    srv_request_free(&r);
    expect_ok("{" MSGS "," TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}},"
              "\"parallel_tool_calls\":false,\"reasoning_format\":\"none\",\"reasoning_effort\":\"low\"}", &r);
    assert_int_equal(r.chat->choice.mode, SRV_TOOL_CHOICE_NAMED);
    assert_string_equal(r.chat->choice.name, "get_weather");
    assert_false(r.chat->parallel);
    assert_true(r.chat->reasoning_given);
    assert_int_equal(r.chat->reasoning, SRV_REASONING_NONE);
    assert_string_equal(r.chat->reasoning_effort, "low");
    assert_int_equal(r.chat->tools.n, 1);
    srv_request_free(&r);
    /* a call-only assistant turn keeps content null for the template */
    expect_ok("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"a\",\"type\":\"function\",\"function\":"
              "{\"name\":\"f\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"a\",\"content\":\"r\"}]}",
              &r);
    assert_true(json_is_null(json_object_get(json_array_get(r.messages, 0), "content")));
    srv_request_free(&r);
}

/* tool_choice and reasoning_effort against real templates */
static void test_choice_render(void **st) {
    (void)st;
    tpl_be t;
    tb_open(&t, "qwen2_5");
    srv_request r;
    mx_error err;
    char *p = NULL;
    const char *param;
    /* auto: tools rendered, replies parsed in Qwen's syntax */
    expect_ok("{" MSGS "," TOOLS "}", &r);
    assert_int_equal(srv_chat_render(&t.caps, &t.be, r.chat, r.messages, r.template_extra, true, &p, &param, &err), 0);
    assert_non_null(strstr(p, "# Tools"));
    assert_int_equal(r.chat->format, SRV_TOOLS_HERMES);
    free(p);
    srv_request_free(&r);
    /* none: tools not rendered, replies not parsed for calls */
    expect_ok("{" MSGS "," TOOLS ",\"tool_choice\":\"none\"}", &r);
    assert_int_equal(srv_chat_render(&t.caps, &t.be, r.chat, r.messages, r.template_extra, true, &p, &param, &err), 0);
    assert_null(strstr(p, "# Tools"));
    assert_int_equal(r.chat->format, SRV_TOOLS_NONE);
    free(p);
    srv_request_free(&r);
    /* required / named: the reply is constrained to Qwen's call syntax with the tool's schema */
    const char *enforced[] = {"\"tool_choice\":\"required\"",
                              "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}"};
    static const char call_ok[] = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                                  "</tool_call>";
    static const char call_bad_args[] = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": 5}}"
                                        "\n</tool_call>";
    static const char call_bad_name[] = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
    for (int i = 0; i < 2; i++) {
        char body[1024];
        snprintf(body, sizeof body, "{" MSGS "," TOOLS ",%s}", enforced[i]);
        expect_ok(body, &r);
        assert_int_equal(srv_chat_render(&t.caps, &t.be, r.chat, r.messages, r.template_extra, true, &p, &param, &err), 0);
        free(p);
        grammar *g = r.chat->call_grammar;
        assert_non_null(g);
        assert_true(grammar_accepts(g, call_ok, strlen(call_ok)));
        assert_false(grammar_accepts(g, call_bad_args, strlen(call_bad_args))); /* "city" is a string */
        assert_false(grammar_accepts(g, call_bad_name, strlen(call_bad_name)));
        assert_false(grammar_accepts(g, "It is sunny.", 12)); /* a call, not text */
        srv_request_free(&r);
    }
    /* strict tools under tool_choice auto: a lazy grammar from Qwen's call opener on */
    expect_ok("{" MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"strict\":true,"
              "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]}", &r);
    assert_int_equal(srv_chat_render(&t.caps, &t.be, r.chat, r.messages, r.template_extra, true, &p, &param, &err), 0);
    free(p);
    assert_non_null(r.chat->call_grammar);
    assert_string_equal(r.chat->call_trigger, "<tool_call>");
    assert_true(grammar_accepts(r.chat->call_grammar, call_ok, strlen(call_ok)));
    assert_false(grammar_accepts(r.chat->call_grammar, call_bad_args, strlen(call_bad_args)));
    srv_request_free(&r);
    /* required: from the first token */
    expect_ok("{" MSGS "," TOOLS ",\"tool_choice\":\"required\"}", &r);
    assert_int_equal(srv_chat_render(&t.caps, &t.be, r.chat, r.messages, r.template_extra, true, &p, &param, &err), 0);
    free(p);
    assert_string_equal(r.chat->call_trigger, "");
    srv_request_free(&r);
    /* reasoning_effort: Qwen 2.5 does not think, so "none" holds; "high" cannot take effect */
    expect_ok("{" MSGS ",\"reasoning_effort\":\"none\"}", &r);
    assert_int_equal(srv_chat_render(&t.caps, &t.be, r.chat, r.messages, r.template_extra, true, &p, &param, &err), 0);
    free(p);
    srv_request_free(&r);
    expect_ok("{" MSGS ",\"reasoning_effort\":\"high\"}", &r);
    assert_int_equal(srv_chat_render(&t.caps, &t.be, r.chat, r.messages, r.template_extra, true, &p, &param, &err), -1);
    assert_string_equal(param, "reasoning_effort");
    srv_request_free(&r);
    tb_close(&t);

    /* a template without a call syntax: tools refused, unless tool_choice is none */
    tb_open(&t, "llama3");
    expect_ok("{" MSGS "," TOOLS "}", &r);
    assert_int_equal(srv_chat_render(&t.caps, &t.be, r.chat, r.messages, r.template_extra, true, &p, &param, &err), -1);
    assert_string_equal(param, "tools");
    srv_request_free(&r);
    expect_ok("{" MSGS "," TOOLS ",\"tool_choice\":\"none\"}", &r);
    assert_int_equal(srv_chat_render(&t.caps, &t.be, r.chat, r.messages, r.template_extra, true, &p, &param, &err), 0);
    free(p);
    srv_request_free(&r);
    tb_close(&t);

    /* Qwen 3: reasoning_effort none turns thinking off through enable_thinking */
    tb_open(&t, "qwen3");
    expect_ok("{" MSGS ",\"reasoning_effort\":\"none\"}", &r);
    assert_int_equal(srv_chat_render(&t.caps, &t.be, r.chat, r.messages, r.template_extra, true, &p, &param, &err), 0);
    assert_non_null(strstr(p, "<think>\n\n</think>\n\n"));
    assert_false(r.chat->start_in_reasoning);
    free(p);
    srv_request_free(&r);
    tb_close(&t);
}

static void test_prompt_opens_think(void **st) {
    (void)st;
    assert_true(srv_prompt_opens_think("<|im_start|>assistant\n<think>\n"));
    assert_true(srv_prompt_opens_think("<｜Assistant｜><think>"));
    assert_false(srv_prompt_opens_think("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    assert_false(srv_prompt_opens_think("<think>a</think> and <think>b"));
    assert_false(srv_prompt_opens_think("no thoughts"));
}

/* ==== Enforcement grammar ==== */
static int g_hook_calls;

static char *hook(void *ctx, const json_t *schema, const char *rule, mx_error *err) {
    (void)ctx;
    (void)err;
    g_hook_calls++;
    assert_true(json_is_object(json_object_get(schema, "properties")));
    char *s = malloc(128);
    snprintf(s, 128, "%s ::= \"{\\\"city\\\": \" j-string \"}\"\n", rule);
    return s;
}

/* Every rule used is defined (names outside literals and classes), root first. */
static void check_gbnf(const char *g, const char *label) {
    if (strncmp(g, "root ::= ", 9)) fail_msg("%s: no root rule first", label);
    char defined[64][32];
    int nd = 0;
    for (const char *l = g; *l; l = strchr(l, '\n') + 1) {
        const char *e = strstr(l, " ::= ");
        if (!e || e - l >= 32 || nd == 64) fail_msg("%s: bad rule line '%.40s'", label, l);
        memcpy(defined[nd], l, (size_t)(e - l));
        defined[nd++][e - l] = 0;
        if (!strchr(l, '\n')) break;
    }
    for (const char *l = g; *l;) {
        const char *end = strchr(l, '\n');
        const char *b = strstr(l, " ::= ") + 5;
        for (const char *c = b; c < end;) {
            if (*c == '"' || *c == '[') {
                const char close = *c == '"' ? '"' : ']';
                for (c++; c < end && *c != close; c++)
                    if (*c == '\\') c++;
                if (c >= end) fail_msg("%s: unclosed literal or class in '%.60s'", label, l);
                c++;
            } else if ((*c >= 'a' && *c <= 'z') || *c == '-') {
                const char *s = c;
                while (c < end && ((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-')) c++;
                bool ok = false;
                for (int i = 0; i < nd; i++) ok |= strlen(defined[i]) == (size_t)(c - s) && !memcmp(defined[i], s, (size_t)(c - s));
                if (!ok) fail_msg("%s: rule '%.*s' is used, not defined", label, (int)(c - s), s);
            } else {
                c++;
            }
        }
        l = end + 1;
    }
}

static void test_gbnf(void **st) {
    (void)st;
    srv_request r;
    expect_ok("{" MSGS ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"
              "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}},{\"type\":\"function\","
              "\"function\":{\"name\":\"get_time\"}}],\"tool_choice\":\"required\"}", &r);
    const srv_tool_format fmts[] = {SRV_TOOLS_HERMES, SRV_TOOLS_LLAMA3, SRV_TOOLS_MISTRAL, SRV_TOOLS_DEEPSEEK_V3};
    const char *opener[] = {"<tool_call>\\n{\\\"name\\\": \\\"get_weather\\\"", "{\\\"name\\\": \\\"get_time\\\"",
                            "\"[TOOL_CALLS][\"", "\"<｜tool▁calls▁begin｜>\""};
    mx_error err;
    for (int i = 0; i < 4; i++) {
        srv_tool_constraint c;
        g_hook_calls = 0;
        assert_int_equal(srv_tools_constraint(fmts[i], r.chat, hook, NULL, &c, &err), 0);
        check_gbnf(c.gbnf, srv_tool_format_name(fmts[i]));
        assert_int_equal(g_hook_calls, 1); /* get_time has no schema: the generic object */
        assert_non_null(strstr(c.gbnf, opener[i]));
        assert_non_null(strstr(c.gbnf, "args-1 ::= j-object"));
        assert_false(c.lazy);
        /* several calls where allowed (Llama makes one at a time) */
        assert_true((strstr(c.gbnf, "call )*") != NULL) == (fmts[i] != SRV_TOOLS_LLAMA3));
        free(c.gbnf);
    }
    /* a named function: only its call */
    r.chat->choice.mode = SRV_TOOL_CHOICE_NAMED;
    snprintf(r.chat->choice.name, sizeof r.chat->choice.name, "get_time");
    srv_tool_constraint c;
    assert_int_equal(srv_tools_constraint(SRV_TOOLS_HERMES, r.chat, NULL, NULL, &c, &err), 0);
    check_gbnf(c.gbnf, "named");
    assert_null(strstr(c.gbnf, "get_weather"));
    assert_non_null(strstr(c.gbnf, "call ::= call-1\n"));
    free(c.gbnf);
    /* auto with a strict tool: lazy, from the opener on */
    r.chat->choice.mode = SRV_TOOL_CHOICE_AUTO;
    assert_int_equal(srv_tools_constraint(SRV_TOOLS_MISTRAL, r.chat, NULL, NULL, &c, &err), 0);
    assert_true(c.lazy);
    assert_string_equal(c.trigger, "[TOOL_CALLS]");
    free(c.gbnf);
    srv_request_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_caps),        cmocka_unit_test(test_round_trip), cmocka_unit_test(test_parse_rendered),
        cmocka_unit_test(test_fields),      cmocka_unit_test(test_choice_render),
        cmocka_unit_test(test_prompt_opens_think), cmocka_unit_test(test_gbnf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
