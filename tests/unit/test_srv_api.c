/* The Responses and Messages layers (srv_api.h) against Qwen 3's real chat template:
 * - translation: Responses input items and Anthropic content blocks become the chat messages
 *   the template renders (exact JSON), previous_response_id puts the stored conversation first,
 *   a final assistant message is a prefill, tools / tool_choice / thinking land in the chat
 *   options; refusals name the field;
 * - answers: a reply with thoughts, text and a tool call becomes the documented items / blocks,
 *   whole and streamed; the streams, fed in random cuts, follow the documented event order
 *   (checked by a small grammar here) and end with what the whole answer holds; incomplete,
 *   stop_sequence and failed endings;
 * - error bodies in each dialect (the chat layer's field names renamed), the response store's
 *   bounds. */
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

#include "server/srv_api.h"
#include "server/srv_internal.h"
#include "server/srv_tools.h"
#include "text/chat_template.h"

/* ==== A server over a backend that renders templates only ==== */
typedef struct env {
    srv_server s;
    srv_backend be;
    srv_text_ops ops;
    chat_template *ct;
    srv_chat_caps caps;
} env;

static int tb_apply(void *txt, const json_t *m, const json_t *extra, bool add_gen, char **out, mx_error *err) {
    return chat_template_apply(((env *)txt)->ct, m, extra, add_gen, out, err);
}
static int tb_vocab(void *txt) { (void)txt; return 1000; }

static env *env_open(void) {
    env *e = calloc(1, sizeof *e);
    char path[1024];
    const char *src = getenv("MLXCEL_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/tests/fixtures/templates/qwen3.json", src ? src : ".");
    json_error_t je;
    json_t *fx = json_load_file(path, 0, &je);
    if (!fx) fail_msg("%s: %s", path, je.text);
    char dir[] = "/tmp/mlxcel-api-XXXXXX";
    assert_non_null(mkdtemp(dir));
    json_t *cfg = json_pack("{s:O}", "chat_template", json_object_get(fx, "chat_template"));
    char file[1100];
    snprintf(file, sizeof file, "%s/tokenizer_config.json", dir);
    assert_int_equal(json_dump_file(cfg, file, 0), 0);
    json_decref(cfg);
    json_decref(fx);
    mx_error err;
    if (chat_template_load(&e->ct, dir, NULL, &err)) fail_msg("template: %s", err.msg);
    unlink(file);
    rmdir(dir);
    e->ops.apply_template = tb_apply;
    e->ops.vocab_size = tb_vocab;
    e->ops.has_template = true;
    e->be.text_ops = &e->ops;
    e->be.text = e;
    e->be.info.chat_template_text = chat_template_source(e->ct);
    snprintf(e->be.info.name, sizeof e->be.info.name, "qwen3-test");
    srv_config_defaults(&e->s.cfg);
    if (srv_chat_caps_init(&e->caps, &e->be, &e->s.cfg, &err)) fail_msg("caps: %s", err.msg);
    e->s.be = &e->be;
    e->s.chat_caps = &e->caps;
    e->s.resp_store = srv_resp_store_new(16, 1 << 20);
    pthread_mutex_init(&e->s.mu, NULL);
    return e;
}

static void env_close(env *e) {
    srv_resp_store_free(e->s.resp_store);
    srv_chat_caps_free(&e->caps);
    chat_template_free(e->ct);
    pthread_mutex_destroy(&e->s.mu);
    free(e);
}

/* A job parsed from `body`; NULL when the parse failed (*bad: the field it named). */
static srv_job *parse(env *e, srv_dialect d, const char *body, char *bad) {
    srv_job *j = srv_job_new(&e->s);
    mx_error err = {{0}};
    if (srv_api_parse(&e->s, j, NULL, d, body, strlen(body), &err)) {
        snprintf(bad, 64, "%s", j->req.bad_param);
        srv_job_release(j);
        return NULL;
    }
    return j;
}

static void expect_json(const json_t *got, const char *want_text, const char *what) {
    json_error_t je;
    json_t *want = json_loads(want_text, 0, &je);
    if (!want) fail_msg("%s: bad expectation: %s", what, je.text);
    if (!json_equal(got, want)) {
        char *g = json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS), *w = json_dumps(want, JSON_COMPACT | JSON_SORT_KEYS);
        fail_msg("%s:\n got  %s\n want %s", what, g, w);
    }
    json_decref(want);
}

/* ==== Translation ==== */
static void test_responses_input(void **st) {
    (void)st;
    env *e = env_open();
    char bad[64] = "";
    srv_job *j = parse(e, SRV_DIALECT_RESPONSES,
        "{\"model\":\"m\",\"instructions\":\"Be brief.\",\"input\":["
        "{\"role\":\"developer\",\"content\":\"Dev rule.\"},"
        "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"Hi\"},"
        "{\"type\":\"input_text\",\"text\":\"there\"}]},"
        "{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\",\"text\":\"hmm\"}]},"
        "{\"type\":\"message\",\"id\":\"msg_1\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":"
        "[{\"type\":\"output_text\",\"text\":\"Checking.\",\"annotations\":[]}]},"
        "{\"type\":\"function_call\",\"id\":\"fc_1\",\"call_id\":\"call_A\",\"name\":\"f\",\"arguments\":\"{\\\"x\\\":1}\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"call_A\",\"output\":\"42\"},"
        "{\"role\":\"user\",\"content\":\"Thanks\"}],"
        "\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":{\"type\":\"object\"},\"strict\":false}]}", bad);
    if (!j) fail_msg("parse failed at %s", bad);
    expect_json(j->req.messages,
        "[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"system\",\"content\":\"Dev rule.\"},"
        "{\"role\":\"user\",\"content\":\"Hi\\nthere\"},"
        "{\"role\":\"assistant\",\"content\":\"Checking.\",\"reasoning_content\":\"hmm\",\"tool_calls\":"
        "[{\"id\":\"call_A\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\":1}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_A\",\"content\":\"42\"},{\"role\":\"user\",\"content\":\"Thanks\"}]",
        "input items -> chat messages");
    /* the stored conversation leaves the instructions out */
    assert_int_equal(json_array_size(j->api->history), json_array_size(j->req.messages) - 1);
    assert_int_equal(j->req.chat->tools.n, 1);
    assert_false(j->req.chat->tools.t[0].strict);
    assert_true(!strncmp(j->api->id, "resp_", 5) && strlen(j->api->id) == 53);
    srv_job_release(j);

    /* strict defaults to true; named tool_choice; parallel_tool_calls; reasoning.effort */
    j = parse(e, SRV_DIALECT_RESPONSES,
              "{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\"}],\"tool_choice\":{\"type\":\"function\","
              "\"name\":\"f\"},\"parallel_tool_calls\":false,\"reasoning\":{\"effort\":\"none\"},\"max_output_tokens\":7}",
              bad);
    assert_non_null(j);
    assert_true(j->req.chat->tools.t[0].strict);
    assert_int_equal(j->req.chat->choice.mode, SRV_TOOL_CHOICE_NAMED);
    assert_false(j->req.chat->parallel);
    assert_string_equal(j->req.chat->reasoning_effort, "none");
    assert_int_equal(j->req.max_tokens, 7);
    srv_job_release(j);
    env_close(e);
}

static void test_responses_previous(void **st) {
    (void)st;
    env *e = env_open();
    json_t *hist = json_loads("[{\"role\":\"user\",\"content\":\"one\"},{\"role\":\"assistant\",\"content\":\"two\"}]", 0, NULL);
    srv_resp_store_put(e->s.resp_store, "resp_prev", json_pack("{s:s}", "id", "resp_prev"), hist);
    char bad[64] = "";
    srv_job *j = parse(e, SRV_DIALECT_RESPONSES,
                       "{\"previous_response_id\":\"resp_prev\",\"instructions\":\"New.\",\"input\":\"three\"}", bad);
    assert_non_null(j);
    expect_json(j->req.messages,
                "[{\"role\":\"system\",\"content\":\"New.\"},{\"role\":\"user\",\"content\":\"one\"},"
                "{\"role\":\"assistant\",\"content\":\"two\"},{\"role\":\"user\",\"content\":\"three\"}]",
                "stored conversation first, the new instructions before it");
    srv_job_release(j);
    assert_null(parse(e, SRV_DIALECT_RESPONSES, "{\"previous_response_id\":\"resp_nope\",\"input\":\"x\"}", bad));
    assert_string_equal(bad, "previous_response_id");
    env_close(e);
}

static void test_anthropic_blocks(void **st) {
    (void)st;
    env *e = env_open();
    char sig[32], body[4096], bad[64] = "";
    srv_anthropic_signature("I should call f.", 16, sig);
    snprintf(body, sizeof body,
        "{\"model\":\"m\",\"max_tokens\":100,\"system\":[{\"type\":\"text\",\"text\":\"S1\"},{\"type\":\"text\","
        "\"text\":\"S2\",\"cache_control\":{\"type\":\"ephemeral\"}}],\"messages\":["
        "{\"role\":\"user\",\"content\":\"Hello\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"again\"}]},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"I should call f.\",\"signature\":\"%s\"},"
        "{\"type\":\"text\",\"text\":\"Calling.\"},{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"f\",\"input\":{\"a\":1}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":\"ok\"},"
        "{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"is_error\":true,\"content\":[{\"type\":\"text\",\"text\":\"boom\"}]},"
        "{\"type\":\"text\",\"text\":\"Now?\"}]},{\"role\":\"assistant\",\"content\":\"Sure,\"}],"
        "\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],"
        "\"tool_choice\":{\"type\":\"auto\",\"disable_parallel_tool_use\":true},"
        "\"stop_sequences\":[\"END\",\"\",\"STOP\"],\"thinking\":{\"type\":\"disabled\"},\"metadata\":{\"user_id\":\"u7\"}}",
        sig);
    srv_job *j = parse(e, SRV_DIALECT_ANTHROPIC, body, bad);
    if (!j) fail_msg("parse failed at %s", bad);
    expect_json(j->req.messages,
        "[{\"role\":\"system\",\"content\":\"S1\\nS2\"},{\"role\":\"user\",\"content\":\"Hello\\nagain\"},"
        "{\"role\":\"assistant\",\"content\":\"Calling.\",\"reasoning_content\":\"I should call f.\",\"tool_calls\":"
        "[{\"id\":\"toolu_1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"toolu_1\",\"content\":\"ok\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"toolu_1\",\"content\":\"Error: boom\"},{\"role\":\"user\",\"content\":\"Now?\"}]",
        "blocks -> chat messages");
    assert_string_equal(j->req.chat->prefill, "Sure,");
    assert_false(j->req.chat->parallel);
    assert_int_equal(j->req.n_stops, 2);
    assert_string_equal(j->req.stops[1], "STOP");
    assert_string_equal(j->req.user, "u7");
    assert_true(json_is_false(json_object_get(j->req.template_extra, "enable_thinking"))); /* thinking disabled */
    assert_true(!strncmp(j->api->id, "msg_01", 6) && strlen(j->api->id) == 28);
    /* the prefill ends the rendered prompt */
    char *prompt = NULL;
    const char *param = NULL;
    mx_error err;
    assert_int_equal(srv_chat_render(e->s.chat_caps, &e->be, j->req.chat, j->req.messages, j->req.template_extra, true,
                                     &prompt, &param, &err), 0);
    const size_t n = strlen(prompt);
    assert_true(n > 5 && !strcmp(prompt + n - 5, "Sure,"));
    assert_non_null(strstr(prompt, "Error: boom"));
    free(prompt);
    srv_job_release(j);

    /* a changed thinking block, a final assistant message with a tool_use */
    snprintf(body, sizeof body, "{\"model\":\"m\",\"max_tokens\":9,\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
             "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"changed\",\"signature\":\"%s\"}]},"
             "{\"role\":\"user\",\"content\":\"b\"}]}", sig);
    assert_null(parse(e, SRV_DIALECT_ANTHROPIC, body, bad));
    assert_string_equal(bad, "messages[1].content[0].signature");
    assert_null(parse(e, SRV_DIALECT_ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":9,\"messages\":[{\"role\":\"user\","
                      "\"content\":\"a\"},{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t\","
                      "\"name\":\"f\",\"input\":{}}]}]}", bad));
    assert_string_equal(bad, "messages[1].content[0].type");
    env_close(e);
}

/* Each body is refused naming the field. */
static void test_refusals(void **st) {
    (void)st;
    env *e = env_open();
    static const struct { srv_dialect d; const char *body, *param; } cases[] = {
        {SRV_DIALECT_RESPONSES, "{\"input\":\"x\",\"n\":2}", "n"},
        {SRV_DIALECT_RESPONSES, "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_file\",\"file_id\":\"f\"}]}]}",
         "input[0].content[0].type"},
        {SRV_DIALECT_RESPONSES, "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_audio\"}]}]}",
         "input[0].content[0].type"},
        {SRV_DIALECT_RESPONSES, "{\"input\":\"x\",\"tools\":[{\"type\":\"code_interpreter\",\"container\":\"auto\"}]}", "tools[0].type"},
        {SRV_DIALECT_RESPONSES, "{\"input\":\"x\",\"tools\":[{\"type\":\"file_search\",\"vector_store_ids\":[]}]}", "tools[0].type"},
        {SRV_DIALECT_RESPONSES, "{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"extra\":1}]}", "tools[0].extra"},
        {SRV_DIALECT_RESPONSES, "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"yaml\"}}}", "text.format.type"},
        {SRV_DIALECT_RESPONSES, "{\"input\":\"x\",\"reasoning\":{\"generate_summary\":\"auto\"}}", "reasoning.generate_summary"},
        {SRV_DIALECT_RESPONSES, "{\"input\":\"x\",\"stream_options\":{}}", "stream_options"},
        {SRV_DIALECT_RESPONSES, "{\"input\":\"x\",\"store\":\"yes\"}", "store"},
        {SRV_DIALECT_RESPONSES, "{}", "input"},
        {SRV_DIALECT_RESPONSES, "[1]", "body"},
        {SRV_DIALECT_ANTHROPIC, "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "model"},
        {SRV_DIALECT_ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[]}", "messages"},
        {SRV_DIALECT_ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
         "\"search_result\"}]}]}", "messages[0].content[0].type"},
        {SRV_DIALECT_ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
         "\"tool_result\",\"tool_use_id\":\"t\",\"content\":[{\"type\":\"image\"}]}]}]}", "messages[0].content[0].content[0].type"},
        {SRV_DIALECT_ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"name\":\"n\"}]}",
         "messages[0].name"},
        {SRV_DIALECT_ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
         "\"tools\":[{\"type\":\"bash_20250124\",\"name\":\"bash\"}]}", "tools[0].type"},
        {SRV_DIALECT_ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
         "\"stop_sequences\":[1]}", "stop_sequences"},
        {SRV_DIALECT_ANTHROPIC, "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"assistant\",\"content\":\"x\"}]}",
         "messages"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char bad[64] = "";
        srv_job *j = parse(e, cases[i].d, cases[i].body, bad);
        if (j) fail_msg("case %zu (%s): accepted", i, cases[i].body);
        if (strcmp(bad, cases[i].param)) fail_msg("case %zu (%s): named '%s', want '%s'", i, cases[i].body, bad, cases[i].param);
    }
    env_close(e);
}

/* ==== Answers ==== */
static const char k_reply[] = "<think>\nA plan.\n</think>\n\nHello <b>ü</b>\n<tool_call>\n{\"name\": \"f\", \"arguments\": "
                              "{\"a\": 1}}\n</tool_call>";

/* A finished job of `body` whose reply is `text`, one token per UTF-8 character. */
static srv_job *finished(env *e, srv_dialect d, const char *body, const char *text, srv_finish fin) {
    char bad[64] = "";
    srv_job *j = parse(e, d, body, bad);
    if (!j) fail_msg("parse: %s", bad);
    char *prompt = NULL;
    const char *param = NULL;
    mx_error err;
    if (srv_chat_render(e->s.chat_caps, &e->be, j->req.chat, j->req.messages, j->req.template_extra, true, &prompt,
                        &param, &err))
        fail_msg("render: %s", err.msg);
    free(prompt);
    const size_t n = strlen(text);
    j->text = strdup(text);
    j->text_len = j->text_cap = n;
    j->tok_end = calloc(n + 1, sizeof *j->tok_end);
    for (size_t i = 0; i < n;) {
        size_t k = 1;
        while (i + k < n && ((unsigned char)text[i + k] & 0xC0) == 0x80) k++;
        i += k;
        j->tok_end[j->n_toks++] = i;
    }
    j->n_prompt = 30;
    j->n_cached = 16;
    j->done = true;
    j->finish = fin;
    return j;
}

typedef struct sse_ev {
    char name[64];
    json_t *data;
} sse_ev;

/* Splits an SSE text into events; `event:` must equal data.type. */
static int sse_parse(const char *buf, sse_ev *out, int cap) {
    int n = 0;
    const char *p = buf;
    while (p && *p && n < cap) {
        const char *end = strstr(p, "\n\n");
        if (!end) fail_msg("unterminated event: %.80s", p);
        if (strncmp(p, "event: ", 7)) fail_msg("event without a name: %.80s", p);
        const char *nl = strchr(p, '\n');
        snprintf(out[n].name, sizeof out[n].name, "%.*s", (int)(nl - p - 7), p + 7);
        if (strncmp(nl + 1, "data: ", 6)) fail_msg("event without data: %.80s", p);
        json_error_t je;
        out[n].data = json_loadb(nl + 7, (size_t)(end - nl - 7), 0, &je);
        if (!out[n].data) fail_msg("bad data: %s", je.text);
        if (strcmp(json_string_value(json_object_get(out[n].data, "type")), out[n].name))
            fail_msg("event %s has data.type %s", out[n].name, json_string_value(json_object_get(out[n].data, "type")));
        n++;
        p = end + 2;
    }
    return n;
}

/* Streams job j in random cuts (as the connection thread does), then its end. */
static char *stream(env *e, srv_job *j, unsigned seed) {
    char *buf = NULL;
    size_t len = 0, cap = 0, sent = 0;
    srv_buf_append(&buf, &len, &cap, "", 0);
    for (int from = 0; from < j->n_toks;) {
        int to = from + 1 + (int)(rand_r(&seed) % 7);
        if (to > j->n_toks) to = j->n_toks;
        srv_api_sse_tokens(&e->s, j, from, to, &sent, &buf, &len, &cap);
        from = to;
    }
    srv_api_sse_finish(&e->s, j, &sent, &buf, &len, &cap);
    return buf;
}

#define EV(i) (i < n ? ev[i].name : "(end)")
#define FIELD_INT(i, k) json_integer_value(json_object_get(ev[i].data, k))

/* The documented order of the Responses events (see srv_responses_out.c); returns the final
 * Response (a new reference). */
static json_t *responses_order(sse_ev *ev, int n) {
    for (int i = 0; i < n; i++)
        if (FIELD_INT(i, "sequence_number") != i) fail_msg("event %d: sequence_number %lld", i, (long long)FIELD_INT(i, "sequence_number"));
    if (n < 3 || strcmp(ev[0].name, "response.created") || strcmp(ev[1].name, "response.in_progress"))
        fail_msg("begins %s, %s", EV(0), EV(1));
    int i = 2, k = 0;
    json_t *items = json_array();
    while (i < n && !strcmp(ev[i].name, "response.output_item.added")) {
        if (FIELD_INT(i, "output_index") != k) fail_msg("item %d added at output_index %lld", k, (long long)FIELD_INT(i, "output_index"));
        const char *type = json_string_value(json_object_get(json_object_get(ev[i].data, "item"), "type"));
        i++;
        const bool call = !strcmp(type, "function_call");
        const char *kind = !strcmp(type, "message") ? "output_text" : "reasoning_text";
        char delta[64], done[64];
        snprintf(delta, sizeof delta, "response.%s.delta", call ? "function_call_arguments" : kind);
        snprintf(done, sizeof done, "response.%s.done", call ? "function_call_arguments" : kind);
        if (!call && strcmp(EV(i), "response.content_part.added")) fail_msg("item %d: no content_part.added", k);
        if (!call) i++;
        char acc[1024] = "";
        while (i < n && !strcmp(ev[i].name, delta)) strcat(acc, json_string_value(json_object_get(ev[i++].data, "delta")));
        if (strcmp(EV(i), done)) fail_msg("item %d: %s where %s belongs", k, EV(i), done);
        const char *full = json_string_value(json_object_get(ev[i++].data, call ? "arguments" : "text"));
        if (strcmp(full, acc)) fail_msg("item %d: done '%s' != deltas '%s'", k, full, acc);
        if (!call && strcmp(EV(i), "response.content_part.done")) fail_msg("item %d: no content_part.done", k);
        if (!call) i++;
        if (strcmp(EV(i), "response.output_item.done")) fail_msg("item %d: %s where output_item.done belongs", k, EV(i));
        json_array_append(items, json_object_get(ev[i++].data, "item"));
        k++;
    }
    if (i != n - 1) fail_msg("%s at %d of %d: the terminal event must come last", EV(i), i, n);
    json_t *final = json_incref(json_object_get(ev[i].data, "response"));
    if (strcmp(ev[i].name, "response.failed") && !json_equal(json_object_get(final, "output"), items))
        fail_msg("the final output is not the streamed items");
    json_decref(items);
    return final;
}

static void free_events(sse_ev *ev, int n) {
    for (int i = 0; i < n; i++) json_decref(ev[i].data);
}

/* Items without their random ids. */
static json_t *strip_ids(const json_t *output) {
    json_t *o = json_deep_copy(output);
    size_t i;
    json_t *it;
    json_array_foreach(o, i, it) {
        json_object_del(it, "id");
        json_object_del(it, "call_id");
    }
    return o;
}

static void test_responses_answer(void **st) {
    (void)st;
    env *e = env_open();
    const char *body = "{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"strict\":false}]}";
    srv_job *j = finished(e, SRV_DIALECT_RESPONSES, body, k_reply, SRV_FINISH_EOS);
    char *whole = srv_api_final(&e->s, j);
    json_t *r = json_loads(whole, 0, NULL);
    free(whole);
    json_t *out = strip_ids(json_object_get(r, "output"));
    expect_json(out,
        "[{\"type\":\"reasoning\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\",\"text\":\"A plan.\"}],"
        "\"status\":\"completed\"},"
        "{\"type\":\"message\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\","
        "\"annotations\":[],\"logprobs\":[],\"text\":\"Hello <b>\xc3\xbc</b>\"}]},"
        "{\"type\":\"function_call\",\"status\":\"completed\",\"arguments\":\"{\\\"a\\\": 1}\",\"name\":\"f\"}]",
        "Response output");
    assert_string_equal(json_string_value(json_object_get(r, "status")), "completed");
    json_t *u = json_object_get(r, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "output_tokens")), j->n_toks);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(u, "input_tokens_details"), "cached_tokens")), 16);
    /* the thoughts' tokens, tags included, and nothing of the answer: "<think>\nA plan.\n</think>\n\n" */
    assert_int_equal(json_integer_value(json_object_get(json_object_get(u, "output_tokens_details"), "reasoning_tokens")), 26);
    /* stored with its conversation (store defaults to true): the assistant turn last */
    json_t *resp = NULL, *hist = NULL;
    assert_int_equal(srv_resp_store_get(e->s.resp_store, j->api->id, &resp, &hist), 0);
    json_t *last = json_array_get(hist, json_array_size(hist) - 1);
    assert_string_equal(json_string_value(json_object_get(last, "reasoning_content")), "A plan.");
    assert_int_equal(json_array_size(json_object_get(last, "tool_calls")), 1);
    json_decref(resp);
    json_decref(hist);
    srv_job_release(j);

    /* streamed in random cuts: the documented order, and the same output */
    for (unsigned seed = 1; seed <= 40; seed++) {
        j = finished(e, SRV_DIALECT_RESPONSES, body, k_reply, SRV_FINISH_EOS);
        char *text = stream(e, j, seed);
        sse_ev ev[512];
        const int n = sse_parse(text, ev, 512);
        json_t *fin = responses_order(ev, n);
        assert_string_equal(ev[n - 1].name, "response.completed");
        json_t *so = strip_ids(json_object_get(fin, "output"));
        if (!json_equal(so, out)) fail_msg("seed %u: streamed output differs", seed);
        json_decref(so);
        json_decref(fin);
        free_events(ev, n);
        free(text);
        srv_job_release(j);
    }
    json_decref(out);
    json_decref(r);

    /* cut by max_output_tokens: incomplete, the open item incomplete */
    j = finished(e, SRV_DIALECT_RESPONSES, body, "<think>\nA plan.\n</think>\n\nHel", SRV_FINISH_LENGTH);
    char *text = stream(e, j, 7);
    sse_ev ev[512];
    int n = sse_parse(text, ev, 512);
    json_t *fin = responses_order(ev, n);
    assert_string_equal(ev[n - 1].name, "response.incomplete");
    assert_string_equal(json_string_value(json_object_get(json_object_get(fin, "incomplete_details"), "reason")),
                        "max_output_tokens");
    json_t *items = json_object_get(fin, "output");
    assert_string_equal(json_string_value(json_object_get(json_array_get(items, 0), "status")), "completed");
    assert_string_equal(json_string_value(json_object_get(json_array_get(items, 1), "status")), "incomplete");
    json_decref(fin);
    free_events(ev, n);
    free(text);
    srv_job_release(j);

    /* failed in the engine: response.failed with the error, nothing stored */
    j = finished(e, SRV_DIALECT_RESPONSES, "{\"input\":\"x\"}", "Partial", SRV_FINISH_ERROR);
    text = stream(e, j, 3);
    n = sse_parse(text, ev, 512);
    fin = responses_order(ev, n);
    assert_string_equal(ev[n - 1].name, "response.failed");
    assert_string_equal(json_string_value(json_object_get(json_object_get(fin, "error"), "code")), "server_error");
    json_t *resp2 = NULL, *hist2 = NULL;
    assert_int_equal(srv_resp_store_get(e->s.resp_store, j->api->id, &resp2, &hist2), -1);
    json_decref(fin);
    free_events(ev, n);
    free(text);
    srv_job_release(j);
    env_close(e);
}

/* The documented order of the Messages events (see srv_anthropic_out.c); returns the blocks
 * the stream built. */
static json_t *messages_order(sse_ev *ev, int n, const char **stop_reason) {
    if (n < 4 || strcmp(ev[0].name, "message_start") || strcmp(ev[1].name, "ping")) fail_msg("begins %s, %s", EV(0), EV(1));
    int i = 2, k = 0;
    json_t *blocks = json_array();
    while (i < n && !strcmp(ev[i].name, "content_block_start")) {
        if (FIELD_INT(i, "index") != k) fail_msg("block %d starts at index %lld", k, (long long)FIELD_INT(i, "index"));
        json_t *b = json_deep_copy(json_object_get(ev[i++].data, "content_block"));
        const char *type = json_string_value(json_object_get(b, "type"));
        const char *key = !strcmp(type, "text") ? "text" : !strcmp(type, "thinking") ? "thinking" : "partial_json";
        char acc[1024] = "";
        while (i < n && !strcmp(ev[i].name, "content_block_delta")) {
            json_t *d = json_object_get(ev[i].data, "delta");
            if (FIELD_INT(i, "index") != k) fail_msg("block %d: a delta of index %lld", k, (long long)FIELD_INT(i, "index"));
            if (!strcmp(json_string_value(json_object_get(d, "type")), "signature_delta")) {
                if (strcmp(type, "thinking") || strcmp(EV(i + 1), "content_block_stop"))
                    fail_msg("block %d: signature_delta not last in a thinking block", k);
                json_object_set(b, "signature", json_object_get(d, "signature"));
            } else {
                strcat(acc, json_string_value(json_object_get(d, key)));
            }
            i++;
        }
        if (strcmp(EV(i), "content_block_stop") || FIELD_INT(i, "index") != k) fail_msg("block %d: no stop", k);
        i++;
        if (!strcmp(key, "partial_json")) json_object_set_new(b, "input", json_loads(acc, 0, NULL));
        else json_object_set_new(b, key, json_string(acc));
        json_array_append_new(blocks, b);
        k++;
    }
    if (strcmp(EV(i), "message_delta") || strcmp(EV(i + 1), "message_stop") || i + 2 != n)
        fail_msg("ends %s, %s at %d of %d", EV(i), EV(i + 1), i, n);
    *stop_reason = json_string_value(json_object_get(json_object_get(ev[i].data, "delta"), "stop_reason"));
    return blocks;
}

static void test_messages_answer(void **st) {
    (void)st;
    env *e = env_open();
    const char *body = "{\"model\":\"m\",\"max_tokens\":99,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                       "\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}]}";
    srv_job *j = finished(e, SRV_DIALECT_ANTHROPIC, body, k_reply, SRV_FINISH_EOS);
    char *whole = srv_api_final(&e->s, j);
    json_t *m = json_loads(whole, 0, NULL);
    free(whole);
    json_t *content = json_deep_copy(json_object_get(m, "content"));
    json_t *tu = json_array_get(content, 2);
    assert_true(!strncmp(json_string_value(json_object_get(tu, "id")), "toolu_", 6));
    json_object_del(tu, "id");
    char sig[32];
    srv_anthropic_signature("A plan.", 7, sig);
    char want[512];
    snprintf(want, sizeof want,
             "[{\"type\":\"thinking\",\"thinking\":\"A plan.\",\"signature\":\"%s\"},{\"type\":\"text\",\"text\":"
             "\"Hello <b>\xc3\xbc</b>\"},{\"type\":\"tool_use\",\"name\":\"f\",\"input\":{\"a\":1}}]", sig);
    expect_json(content, want, "Message content");
    assert_string_equal(json_string_value(json_object_get(m, "stop_reason")), "tool_use");
    json_t *u = json_object_get(m, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "input_tokens")), 30 - 16);
    assert_int_equal(json_integer_value(json_object_get(u, "cache_read_input_tokens")), 16);
    srv_job_release(j);
    json_object_del(json_array_get(content, 2), "id");

    for (unsigned seed = 1; seed <= 40; seed++) {
        j = finished(e, SRV_DIALECT_ANTHROPIC, body, k_reply, SRV_FINISH_EOS);
        char *text = stream(e, j, seed);
        sse_ev ev[512];
        const int n = sse_parse(text, ev, 512);
        const char *sr = NULL;
        json_t *blocks = messages_order(ev, n, &sr);
        json_object_del(json_array_get(blocks, 2), "id");
        if (!json_equal(blocks, content)) fail_msg("seed %u: streamed blocks differ", seed);
        assert_string_equal(sr, "tool_use");
        json_decref(blocks);
        free_events(ev, n);
        free(text);
        srv_job_release(j);
    }
    json_decref(content);
    json_decref(m);

    /* a stop string: stop_sequence names it */
    j = finished(e, SRV_DIALECT_ANTHROPIC, body, "one two ", SRV_FINISH_STOP);
    j->stop_word = strdup("STOP");
    whole = srv_api_final(&e->s, j);
    m = json_loads(whole, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(m, "stop_reason")), "stop_sequence");
    assert_string_equal(json_string_value(json_object_get(m, "stop_sequence")), "STOP");
    json_decref(m);
    free(whole);
    srv_job_release(j);
    /* max_tokens; and a failed stream ends with an error event */
    j = finished(e, SRV_DIALECT_ANTHROPIC, body, "abc", SRV_FINISH_LENGTH);
    whole = srv_api_final(&e->s, j);
    assert_non_null(strstr(whole, "\"stop_reason\":\"max_tokens\""));
    free(whole);
    srv_job_release(j);
    j = finished(e, SRV_DIALECT_ANTHROPIC, body, "abc", SRV_FINISH_ERROR);
    char *text = stream(e, j, 5);
    sse_ev ev[64];
    const int n = sse_parse(text, ev, 64);
    assert_string_equal(ev[n - 1].name, "error");
    assert_string_equal(json_string_value(json_object_get(json_object_get(ev[n - 1].data, "error"), "type")), "api_error");
    free_events(ev, n);
    free(text);
    srv_job_release(j);
    env_close(e);
}

/* ==== Error bodies, store ==== */
static void test_error_bodies(void **st) {
    (void)st;
    static const struct { srv_dialect d; int status; const char *msg, *param, *want; } cases[] = {
        {SRV_DIALECT_RESPONSES, 400, "messages: bad", "messages",
         "{\"error\":{\"message\":\"input: bad\",\"type\":\"invalid_request_error\",\"code\":400,\"param\":\"input\"}}"},
        {SRV_DIALECT_RESPONSES, 400, "max_tokens: x", "max_tokens",
         "{\"error\":{\"message\":\"max_output_tokens: x\",\"type\":\"invalid_request_error\",\"code\":400,\"param\":\"max_output_tokens\"}}"},
        {SRV_DIALECT_RESPONSES, 400, "tools[2].function.name: x", "tools[2].function.name",
         "{\"error\":{\"message\":\"tools[2].name: x\",\"type\":\"invalid_request_error\",\"code\":400,\"param\":\"tools[2].name\"}}"},
        {SRV_DIALECT_RESPONSES, 400, "response_format: only text", "response_format",
         "{\"error\":{\"message\":\"text.format: only text\",\"type\":\"invalid_request_error\",\"code\":400,\"param\":\"text.format\"}}"},
        {SRV_DIALECT_RESPONSES, 400, "previous_response_id: Previous response with id 'r' not found.", "previous_response_id",
         "{\"error\":{\"message\":\"previous_response_id: Previous response with id 'r' not found.\",\"type\":"
         "\"invalid_request_error\",\"code\":\"previous_response_not_found\",\"param\":\"previous_response_id\"}}"},
        {SRV_DIALECT_RESPONSES, 503, "full", NULL,
         "{\"error\":{\"message\":\"full\",\"type\":\"unavailable_error\",\"code\":503,\"param\":null}}"},
        {SRV_DIALECT_ANTHROPIC, 400, "tools[0].function.parameters: x", "tools[0].function.parameters",
         "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"tools[0].input_schema: x\"}}"},
        {SRV_DIALECT_ANTHROPIC, 400, "stop: x", "stop",
         "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"stop_sequences: x\"}}"},
        {SRV_DIALECT_ANTHROPIC, 401, "key", NULL, "{\"type\":\"error\",\"error\":{\"type\":\"authentication_error\",\"message\":\"key\"}}"},
        {SRV_DIALECT_ANTHROPIC, 404, "no", NULL, "{\"type\":\"error\",\"error\":{\"type\":\"not_found_error\",\"message\":\"no\"}}"},
        {SRV_DIALECT_ANTHROPIC, 413, "big", NULL, "{\"type\":\"error\",\"error\":{\"type\":\"request_too_large\",\"message\":\"big\"}}"},
        {SRV_DIALECT_ANTHROPIC, 503, "full", NULL, "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"full\"}}"},
        {SRV_DIALECT_ANTHROPIC, 500, "x", NULL, "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"x\"}}"},
        /* a message cut inside a character, a control byte: still a body, one line of valid UTF-8 */
        {SRV_DIALECT_ANTHROPIC, 400, "k\xc3: a\nb", NULL, "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"k?: a?b\"}}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *b = srv_api_error_body(cases[i].d, cases[i].status, cases[i].msg, cases[i].param);
        json_t *o = b ? json_loads(b, 0, NULL) : NULL;
        char what[32];
        snprintf(what, sizeof what, "error case %zu", i);
        expect_json(o, cases[i].want, what);
        json_decref(o);
        free(b);
    }
    /* the status and srv_resp_error follow the thread's dialect */
    srv_api_dialect_enter(SRV_DIALECT_ANTHROPIC);
    assert_int_equal(srv_api_status(503), 529);
    char *b = srv_resp_error(404, "nope", NULL);
    assert_non_null(strstr(b, "\"not_found_error\""));
    free(b);
    srv_api_dialect_enter(SRV_DIALECT_RESPONSES);
    assert_int_equal(srv_api_status(503), 503);
    srv_api_dialect_enter(SRV_DIALECT_NATIVE);
    b = srv_resp_error(400, "messages: x", "messages");
    assert_non_null(strstr(b, "\"param\":\"messages\""));
    free(b);
    assert_int_equal(srv_api_dialect_of("/v1/messages/count_tokens"), SRV_DIALECT_ANTHROPIC);
    assert_int_equal(srv_api_dialect_of("/v1/responses/resp_1"), SRV_DIALECT_RESPONSES);
    assert_int_equal(srv_api_dialect_of("/v1/chat/completions"), SRV_DIALECT_NATIVE);
    assert_int_equal(srv_api_dialect_of("/v1/messagesx"), SRV_DIALECT_NATIVE);
}

static json_t *blob(size_t n) {
    char *s = malloc(n + 1);
    memset(s, 'x', n);
    s[n] = 0;
    json_t *o = json_pack("{s:s}", "t", s);
    free(s);
    return o;
}

static void test_store_bounds(void **st) {
    (void)st;
    /* by count: the least recently used goes first; a lookup makes an entry recent */
    srv_resp_store *rs = srv_resp_store_new(3, 1 << 20);
    char id[16];
    for (int i = 0; i < 3; i++) {
        snprintf(id, sizeof id, "r%d", i);
        srv_resp_store_put(rs, id, blob(10), json_array());
    }
    json_t *a, *b;
    assert_int_equal(srv_resp_store_get(rs, "r0", &a, &b), 0);
    json_decref(a);
    json_decref(b);
    srv_resp_store_put(rs, "r3", blob(10), json_array());
    assert_int_equal(srv_resp_store_get(rs, "r1", &a, &b), -1); /* r1 was the least recent */
    assert_int_equal(srv_resp_store_get(rs, "r0", &a, &b), 0);
    json_decref(a);
    json_decref(b);
    int count;
    size_t bytes;
    srv_resp_store_stats(rs, &count, &bytes);
    assert_int_equal(count, 3);
    assert_true(srv_resp_store_delete(rs, "r0"));
    assert_false(srv_resp_store_delete(rs, "r0"));
    srv_resp_store_free(rs);
    /* by bytes: entries go until the new one fits; one larger than the bound is not kept */
    rs = srv_resp_store_new(100, 4000);
    for (int i = 0; i < 10; i++) {
        snprintf(id, sizeof id, "b%d", i);
        srv_resp_store_put(rs, id, blob(1000), json_array());
        srv_resp_store_stats(rs, &count, &bytes);
        assert_true(bytes <= 4000);
    }
    assert_int_equal(count, 3);
    assert_int_equal(srv_resp_store_get(rs, "b9", &a, &b), 0);
    json_decref(a);
    json_decref(b);
    srv_resp_store_put(rs, "huge", blob(5000), json_array());
    assert_int_equal(srv_resp_store_get(rs, "huge", &a, &b), -1);
    srv_resp_store_stats(rs, &count, &bytes);
    assert_int_equal(count, 3);
    srv_resp_store_free(rs);
    /* count 0: nothing is kept */
    rs = srv_resp_store_new(0, 1 << 20);
    srv_resp_store_put(rs, "z", blob(1), json_array());
    assert_int_equal(srv_resp_store_get(rs, "z", &a, &b), -1);
    srv_resp_store_free(rs);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_responses_input), cmocka_unit_test(test_responses_previous),
        cmocka_unit_test(test_anthropic_blocks), cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_responses_answer), cmocka_unit_test(test_messages_answer),
        cmocka_unit_test(test_error_bodies), cmocka_unit_test(test_store_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
