/* Text path end to end: a tiny checkpoint with a byte-level BPE tokenizer.json and a chat
 * template (written here), driven through `mlxcel generate -p` and `mlxcel run`. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "tiny_model.h"

#define VOCAB 260 /* 256 byte tokens + <|im_start|> <|im_end|> + 2 spare */

static char g_dir[256];

/* GPT-2 bytes_to_unicode: printable bytes map to themselves, the rest to 256 + n. */
static int byte_cp(int b) {
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) return b;
    int n = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF))) n++;
    return 256 + n;
}

static void write_tokenizer(void) {
    json_t *vocab = json_object();
    for (int b = 0; b < 256; b++) {
        char u[8] = {0};
        const int cp = byte_cp(b);
        if (cp < 0x80) u[0] = (char)cp;
        else { u[0] = (char)(0xC0 | (cp >> 6)); u[1] = (char)(0x80 | (cp & 0x3F)); }
        json_object_set_new(vocab, u, json_integer(b));
    }
    json_t *tok = json_pack(
        "{s:s, s:[{s:i, s:s, s:b, s:b, s:b, s:b, s:b}, {s:i, s:s, s:b, s:b, s:b, s:b, s:b}],"
        " s:n, s:{s:s, s:b, s:b, s:b}, s:n, s:{s:s, s:b, s:b, s:b},"
        " s:{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:o, s:[]}}",
        "version", "1.0",
        "added_tokens", "id", 256, "content", "<|im_start|>", "single_word", 0, "lstrip", 0, "rstrip", 0,
        "normalized", 0, "special", 1, "id", 257, "content", "<|im_end|>", "single_word", 0, "lstrip", 0,
        "rstrip", 0, "normalized", 0, "special", 1,
        "normalizer", "pre_tokenizer", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1,
        "use_regex", 1, "post_processor", "decoder", "type", "ByteLevel", "add_prefix_space", 1,
        "trim_offsets", 1, "use_regex", 1, "model", "type", "BPE", "dropout", "unk_token",
        "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", 0, "byte_fallback", 0, "vocab",
        vocab, "merges");
    assert_non_null(tok);
    char p[512];
    snprintf(p, sizeof p, "%s/tokenizer.json", g_dir);
    assert_int_equal(json_dump_file(tok, p, 0), 0);
    json_decref(tok);
    json_t *cfg = json_pack("{s:s, s:s, s:s}", "eos_token", "<|im_end|>", "bos_token", "<|im_start|>",
        "chat_template",
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}");
    snprintf(p, sizeof p, "%s/tokenizer_config.json", g_dir);
    assert_int_equal(json_dump_file(cfg, p, 0), 0);
    json_decref(cfg);
}

static void write_model(void) {
    tiny_model tm;
    tiny_build_v(&tm, TINY_LLAMA, 78, VOCAB);
    snprintf(g_dir, sizeof g_dir, "/tmp/mlxcel_run_cli_%d", (int)getpid());
    char p[512];
    snprintf(p, sizeof p, "mkdir -p %s", g_dir);
    assert_int_equal(system(p), 0);
    mx_error err;
    snprintf(p, sizeof p, "%s/model.safetensors", g_dir);
    assert_int_equal(tiny_write_safetensors(&tm, p, &err), 0);
    snprintf(p, sizeof p, "%s/config.json", g_dir);
    FILE *f = fopen(p, "w");
    fprintf(f, "{\"model_type\": \"llama\", \"vocab_size\": %d, \"hidden_size\": 32,"
               "\"intermediate_size\": 48, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
               "\"num_key_value_heads\": 2, \"head_dim\": 8, \"max_position_embeddings\": 512,"
               "\"rms_norm_eps\": 1e-6, \"tie_word_embeddings\": false, \"eos_token_id\": 257}\n", VOCAB);
    fclose(f);
    tiny_free(&tm);
    write_tokenizer();
}

static int sh(const char *cmd, char **out) {
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 16;
    char *buf = malloc(cap);
    size_t n = fread(buf, 1, cap - 1, p);
    buf[n] = '\0';
    const int st = pclose(p);
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static json_t *gen_json(const char *extra) {
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s generate -m %s -p 'hi there' -n 6 --temp 0 --ignore-eos --json %s 2>/dev/null",
             getenv("MLXCEL_BIN"), g_dir, extra);
    assert_int_equal(sh(cmd, &out), 0);
    json_t *j = json_loads(out, 0, NULL);
    if (!j) fail_msg("not JSON: %s", out);
    free(out);
    return j;
}

static void test_generate_text(void **st) {
    (void)st;
    /* chat template applied: <|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n */
    json_t *j = gen_json("");
    const char *want = "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n";
    json_t *ids = json_object_get(j, "prompt_ids");
    assert_int_equal(json_integer_value(json_array_get(ids, 0)), 256);
    assert_int_equal(json_array_size(ids), 1 + 5 + 8 + 1 + 1 + 1 + 10);
    (void)want;
    const char *text = json_string_value(json_object_get(j, "text"));
    assert_non_null(text);
    /* raw: just the bytes of the prompt */
    json_t *raw = gen_json("--no-chat-template");
    ids = json_object_get(raw, "prompt_ids");
    assert_int_equal(json_array_size(ids), 8);
    assert_int_equal(json_integer_value(json_array_get(ids, 0)), 'h');
    /* a stop string taken from the output ends the text before it */
    const char *rt = json_string_value(json_object_get(raw, "text"));
    if (rt && strlen(rt) >= 3) {
        char stop[8] = {0}, extra[64];
        memcpy(stop, rt + 2, 1); /* the third character */
        if (stop[0] != '\'' && stop[0] != '\\' && (unsigned char)stop[0] < 0x80 && stop[0] > ' ') {
            snprintf(extra, sizeof extra, "--no-chat-template --stop '%s'", stop);
            json_t *s = gen_json(extra);
            assert_string_equal(json_string_value(json_object_get(s, "finish_reason")), "stop");
            assert_true(strlen(json_string_value(json_object_get(s, "text"))) <= 2);
            json_decref(s);
        }
    }
    json_decref(raw);
    json_decref(j);
}

static void test_run_chat(void **st) {
    (void)st;
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd,
             "printf 'hello\\n/clear\\n\"\"\"\\nline one\\nline two\\n\"\"\"\\nagain\\n/bye\\nignored\\n' | "
             "%s run %s -n 4 --temp 0 2>/dev/null", getenv("MLXCEL_BIN"), g_dir);
    assert_int_equal(sh(cmd, &out), 0);
    int lines = 0;
    for (char *p = out; *p; p++) lines += *p == '\n';
    assert_true(lines >= 3); /* three replies, each ended by a newline */
    free(out);
    /* no chat template: clear refusal */
    snprintf(cmd, sizeof cmd, "echo hi | %s run %s --no-chat-template 2>&1", getenv("MLXCEL_BIN"), g_dir);
    assert_int_not_equal(sh(cmd, &out), 0);
    assert_non_null(strstr(out, "chat template"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s run --help", getenv("MLXCEL_BIN"));
    assert_int_equal(sh(cmd, &out), 0);
    assert_non_null(strstr(out, "/bye"));
    free(out);
}

static int setup(void **st) {
    (void)st;
    write_model();
    return 0;
}

static int teardown(void **st) {
    (void)st;
    char p[512];
    if (getenv("MLXCEL_KEEP_TMP")) return 0;
    snprintf(p, sizeof p, "rm -rf %s", g_dir);
    return system(p) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generate_text),
        cmocka_unit_test(test_run_chat),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
