/* Chat template loading rules, and the real templates of Llama 3, Qwen 3, Gemma 3 (from the npm
 * tokenizer packages, tools/fetch_tokenizers.sh) and the Mistral-Instruct [INST] template,
 * checked against the prompt formats their model cards document. Byte parity with
 * transformers over many conversations is test_chat_template_parity. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "text/chat_template.h"

/* ==== Helpers ==== */
static char g_tmp[256];

static void write_file(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void rm_file(const char *dir, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

static int setup(void **st) {
    (void)st;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/mlxcel_ct_XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown(void **st) {
    (void)st;
    rm_file(g_tmp, "tokenizer_config.json");
    rm_file(g_tmp, "chat_template.jinja");
    rm_file(g_tmp, "override.jinja");
    rmdir(g_tmp);
    return 0;
}

static json_t *parse(const char *text) {
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (!j) fprintf(stderr, "bad JSON in test: %s\n", je.text);
    assert_non_null(j);
    return j;
}

/* Renders messages (JSON text) with the checkpoint in dir; returns malloc'd text or NULL + err. */
static char *apply(const char *dir, const char *override, const char *messages, const char *extra, bool agp,
                   mx_error *err) {
    chat_template *ct = NULL;
    char *out = NULL;
    if (chat_template_load(&ct, dir, override, err)) return NULL;
    json_t *m = parse(messages), *x = extra ? parse(extra) : NULL;
    if (chat_template_apply(ct, m, x, agp, &out, err)) out = NULL;
    json_decref(m);
    json_decref(x);
    chat_template_free(ct);
    return out;
}

static void expect_render(const char *dir, const char *override, const char *messages, const char *extra,
                          bool agp, const char *want) {
    mx_error err = {0};
    char *got = apply(dir, override, messages, extra, agp, &err);
    if (!got) fprintf(stderr, "render failed: %s\n", err.msg);
    assert_non_null(got);
    if (strcmp(got, want)) fprintf(stderr, "want: [%s]\ngot:  [%s]\n", want, got);
    assert_string_equal(got, want);
    free(got);
}

/* ==== Loading rules ==== */
static void test_load_rules(void **st) {
    (void)st;
    const char *msgs = "[{\"role\": \"user\", \"content\": \"x\"}]";
    /* tokenizer_config.json string template; AddedToken-style bos object */
    write_file(g_tmp, "tokenizer_config.json",
               "{\"chat_template\": \"{{ bos_token }}[{{ messages[0].content }}]{{ eos_token }}{% if "
               "add_generation_prompt %}>{% endif %}\", \"bos_token\": {\"content\": \"<B>\", \"lstrip\": false}, "
               "\"eos_token\": \"<E>\", \"model_max_length\": 1000000000000000019884624838656}");
    expect_render(g_tmp, NULL, msgs, NULL, true, "<B>[x]<E>>");
    expect_render(g_tmp, NULL, msgs, NULL, false, "<B>[x]<E>");
    /* extra variables win over special tokens */
    expect_render(g_tmp, NULL, msgs, "{\"eos_token\": \"!\"}", false, "<B>[x]!");
    /* named templates: "default" is used */
    write_file(g_tmp, "tokenizer_config.json",
               "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}, {\"name\": \"default\", "
               "\"template\": \"D{{ tools is none }}{{ documents is none }}\"}], \"bos_token\": null}");
    expect_render(g_tmp, NULL, msgs, NULL, true, "DTrueTrue");
    /* chat_template.jinja wins over tokenizer_config.json; bos_token stays undefined when null */
    write_file(g_tmp, "chat_template.jinja", "J{{ bos_token is defined }}\n");
    expect_render(g_tmp, NULL, msgs, NULL, true, "JFalse");
    /* an override file wins over both */
    char over[512];
    snprintf(over, sizeof over, "%s/override.jinja", g_tmp);
    write_file(g_tmp, "override.jinja", "O{{ messages | length }}");
    expect_render(g_tmp, over, msgs, NULL, true, "O1");
    rm_file(g_tmp, "chat_template.jinja");

    mx_error err = {0};
    write_file(g_tmp, "tokenizer_config.json", "{\"chat_template\": [{\"name\": \"rag\", \"template\": \"R\"}]}");
    assert_null(apply(g_tmp, NULL, msgs, NULL, true, &err));
    assert_non_null(strstr(err.msg, "no template named 'default'"));
    write_file(g_tmp, "tokenizer_config.json", "{\"bos_token\": \"<s>\"}");
    assert_null(apply(g_tmp, NULL, msgs, NULL, true, &err));
    assert_non_null(strstr(err.msg, "has no \"chat_template\""));
    write_file(g_tmp, "tokenizer_config.json", "{\"chat_template\": \"{% if %}\"}");
    assert_null(apply(g_tmp, NULL, msgs, NULL, true, &err));
    assert_non_null(strstr(err.msg, "tokenizer_config.json: chat template line 1"));
    write_file(g_tmp, "tokenizer_config.json", "{\"chat_template\": 5}");
    assert_null(apply(g_tmp, NULL, msgs, NULL, true, &err));
    assert_non_null(strstr(err.msg, "\"chat_template\" must be a string"));
}

/* ==== Real templates ==== */
static bool npm_template_dir(const char *name, char *dir, size_t cap) {
    const char *root = getenv("MLXCEL_SOURCE_DIR");
    snprintf(dir, cap, "%s/tests/fixtures/tokenizers/npm/%s", root ? root : ".", name);
    char path[600];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    struct stat s;
    if (stat(path, &s) == 0) return true;
    /* CTest fetches it first (text_fetch_tokenizers, tests/text.cmake): a missing template
     * is a failure, never a skipped check */
    fail_msg("%s missing (tools/fetch_tokenizers.sh fetches it)", path);
    return false;
}

static void test_llama3(void **st) {
    (void)st;
    char dir[512];
    if (!npm_template_dir("llama3", dir, sizeof dir)) skip();
    /* Llama 3 format: <|begin_of_text|> then per message a header, "\n\n", trimmed content,
     * <|eot_id|>; this (3.0) template always ends with the assistant header. */
    expect_render(dir, NULL,
                  "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"  Hi \\n\"}]",
                  NULL, true,
                  "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static void test_qwen3(void **st) {
    (void)st;
    char dir[512];
    if (!npm_template_dir("qwen3", dir, sizeof dir)) skip();
    const char *one = "[{\"role\": \"user\", \"content\": \"Hi\"}]";
    expect_render(dir, NULL, one, NULL, true, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    expect_render(dir, NULL, one, NULL, false, "<|im_start|>user\nHi<|im_end|>\n");
    expect_render(dir, NULL, one, "{\"enable_thinking\": false}", true,
                  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    expect_render(dir, NULL, one, "{\"enable_thinking\": true}", true,
                  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    /* Reasoning of earlier turns is dropped; the system message comes first. */
    expect_render(dir, NULL,
                  "[{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"A\"}, "
                  "{\"role\": \"assistant\", \"content\": \"<think>\\nhmm\\n</think>\\n\\nB\"}, "
                  "{\"role\": \"user\", \"content\": \"C\"}]",
                  NULL, true,
                  "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nA<|im_end|>\n"
                  "<|im_start|>assistant\nB<|im_end|>\n<|im_start|>user\nC<|im_end|>\n<|im_start|>assistant\n");
}

/* Tools: signatures as json.dumps lines inside <tools></tools>; tool results as user turns. */
static void test_qwen3_tools(void **st) {
    (void)st;
    char dir[512];
    if (!npm_template_dir("qwen3", dir, sizeof dir)) skip();
    const char *msgs = "[{\"role\": \"user\", \"content\": \"W?\"}, {\"role\": \"assistant\", \"content\": \"\", "
                       "\"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"w\", \"arguments\": "
                       "{\"city\": \"Paris\", \"n\": 1}}}]}, {\"role\": \"tool\", \"content\": \"sunny\"}]";
    const char *extra = "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"w\", \"parameters\": "
                        "{\"type\": \"object\"}}}]}";
    expect_render(dir, NULL, msgs, extra, true,
                  "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user "
                  "query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
                  "{\"type\": \"function\", \"function\": {\"name\": \"w\", \"parameters\": {\"type\": \"object\"}}}\n"
                  "</tools>\n\nFor each function call, return a json object with function name and arguments within "
                  "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
                  "<args-json-object>}\n</tool_call><|im_end|>\n"
                  "<|im_start|>user\nW?<|im_end|>\n"
                  "<|im_start|>assistant\n<tool_call>\n{\"name\": \"w\", \"arguments\": {\"city\": \"Paris\", \"n\": 1}}\n"
                  "</tool_call><|im_end|>\n"
                  "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
}

static void test_gemma3(void **st) {
    (void)st;
    char dir[512];
    if (!npm_template_dir("gemma3", dir, sizeof dir)) skip();
    /* Gemma 3: the system prompt is folded into the first user turn; assistant is "model". */
    expect_render(dir, NULL,
                  "[{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"Hi\"}, "
                  "{\"role\": \"assistant\", \"content\": \"Yo\"}, {\"role\": \"user\", \"content\": "
                  "[{\"type\": \"image\"}, {\"type\": \"text\", \"text\": \" Q \"}]}]",
                  NULL, true,
                  "<bos><start_of_turn>user\nS\n\nHi<end_of_turn>\n<start_of_turn>model\nYo<end_of_turn>\n"
                  "<start_of_turn>user\n<start_of_image>Q<end_of_turn>\n<start_of_turn>model\n");
    mx_error err = {0};
    assert_null(apply(dir, NULL, "[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"user\", \"content\": \"b\"}]",
                      NULL, true, &err));
    assert_non_null(strstr(err.msg, "Conversation roles must alternate user/assistant/user/assistant/..."));
}

/* The Mistral-7B-Instruct template that tools/reference/make_template_fixtures.py uses (the npm
 * Mistral vocab package ships none). */
static const char k_mistral[] =
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}"
    "{% endif %}{% endfor %}";

static void test_mistral(void **st) {
    (void)st;
    char dir[512], over[600];
    if (!npm_template_dir("mistral", dir, sizeof dir)) skip();
    snprintf(over, sizeof over, "%s/override.jinja", g_tmp);
    write_file(g_tmp, "override.jinja", k_mistral);
    expect_render(dir, over,
                  "[{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Yo\"}, "
                  "{\"role\": \"user\", \"content\": \"Q\"}]",
                  NULL, true, "<s>[INST] Hi [/INST]Yo</s>[INST] Q [/INST]");
    mx_error err = {0};
    assert_null(apply(dir, over, "[{\"role\": \"system\", \"content\": \"S\"}]", NULL, true, &err));
    assert_non_null(strstr(err.msg, "Conversation roles must alternate"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_rules), cmocka_unit_test(test_llama3), cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_qwen3_tools), cmocka_unit_test(test_gemma3), cmocka_unit_test(test_mistral),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
