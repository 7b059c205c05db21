/* `mlxcel generate` end to end on a tiny checkpoint written here (config.json + bf16
 * safetensors from tiny_model.h): --json output, identical tokens across storage / chunking,
 * and clear failures for bad input. */
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

static char g_dir[256];

static void write_model(void) {
    tiny_model tm;
    tiny_build(&tm, TINY_LLAMA, 77);
    snprintf(g_dir, sizeof g_dir, "/tmp/mlxcel_gen_cli_%d", (int)getpid());
    char p[512];
    snprintf(p, sizeof p, "mkdir -p %s", g_dir);
    assert_int_equal(system(p), 0);
    mx_error err;
    snprintf(p, sizeof p, "%s/model.safetensors", g_dir);
    assert_int_equal(tiny_write_safetensors(&tm, p, &err), 0);
    snprintf(p, sizeof p, "%s/config.json", g_dir);
    FILE *f = fopen(p, "w");
    fprintf(f, "{\"model_type\": \"llama\", \"architectures\": [\"LlamaForCausalLM\"],"
               "\"vocab_size\": 97, \"hidden_size\": 32, \"intermediate_size\": 48,"
               "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
               "\"head_dim\": 8, \"max_position_embeddings\": 64, \"rms_norm_eps\": 1e-6,"
               "\"rope_theta\": 10000.0, \"tie_word_embeddings\": false, \"eos_token_id\": 96,"
               "\"torch_dtype\": \"bfloat16\"}\n");
    fclose(f);
    tiny_free(&tm);
}

/* Runs `mlxcel generate ARGS`; returns the exit code, stdout in *out (malloc'd). */
static int run(const char *args, char **out) {
    const char *bin = getenv("MLXCEL_BIN");
    assert_non_null(bin);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s generate %s 2>/dev/null", bin, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    n = fread(buf, 1, cap - 1, p);
    buf[n] = '\0';
    const int st = pclose(p);
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static json_t *run_json(const char *extra) {
    char args[1024], *out = NULL;
    snprintf(args, sizeof args, "-m %s --prompt-ids 3,14,15,92,65,35,89,79,32,38,46,26,43,38,32,79,50,28,84 "
                                "-n 12 --temp 0 --ignore-eos --json %s", g_dir, extra);
    assert_int_equal(run(args, &out), 0);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    if (!j) fail_msg("not one JSON object: %s\n%s", je.text, out);
    free(out);
    return j;
}

static void test_json_and_consistency(void **st) {
    (void)st;
    json_t *base = run_json("--decode-storage-backend dense");
    assert_string_equal(json_string_value(json_object_get(base, "finish_reason")), "length");
    assert_int_equal(json_array_size(json_object_get(base, "tokens")), 12);
    assert_int_equal(json_array_size(json_object_get(base, "prompt_ids")), 19);
    assert_true(json_is_number(json_object_get(base, "decode_tokens_per_s")));
    assert_true(json_is_number(json_object_get(base, "prefill_tokens_per_s")));
    assert_true(json_is_number(json_object_get(base, "ttft_ms")));
    assert_true(json_object_get(base, "text") != NULL);
    const char *variants[] = {"--decode-storage-backend paged", "--prefill-chunk-size 1",
                              "--prefill-chunk-size 7", "--decode-storage-backend paged --prefill-chunk-size 64"};
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        json_t *j = run_json(variants[v]);
        assert_true(json_equal(json_object_get(j, "tokens"), json_object_get(base, "tokens")));
        json_decref(j);
    }
    /* context full: ctx 22 leaves 3 positions after a 19-token prompt */
    json_t *j = run_json("-c 22");
    assert_string_equal(json_string_value(json_object_get(j, "finish_detail")), "context_full");
    assert_int_equal(json_array_size(json_object_get(j, "tokens")), 3);
    json_decref(j);
    json_decref(base);
}

/* Eager materialisation on the CPU (the tuning page: the load reads the checkpoint before it
 * reports loaded): MLXCEL_PROFILE_TTFT's line counts every weight byte read at load, the same
 * total `mlxcel inspect` sums from the safetensors headers; lazy reads nothing at load. */
static void test_weight_materialization(void **st) {
    (void)st;
    const char *bin = getenv("MLXCEL_BIN");
    char cmd[2048], line[512];
    snprintf(cmd, sizeof cmd, "'%s' inspect -m %s --json --device cpu", bin, g_dir);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    json_error_t je;
    json_t *o = json_loadf(p, 0, &je);
    pclose(p);
    assert_non_null(o);
    const long long want = json_integer_value(json_object_get(o, "weights_bytes"));
    json_decref(o);
    assert_true(want > 0);
    for (int lazy = 0; lazy < 2; lazy++) {
        snprintf(cmd, sizeof cmd, "MLXCEL_PROFILE_TTFT=1 MLXCEL_WEIGHT_MATERIALIZATION=%s '%s' generate "
                 "-m %s --prompt-ids 3,14 -n 1 --temp 0 2>&1 >/dev/null", lazy ? "lazy" : "eager", bin, g_dir);
        p = popen(cmd, "r");
        assert_non_null(p);
        long long tensors = -1, bytes = -1;
        int saw_lazy = 0;
        while (fgets(line, sizeof line, p)) {
            sscanf(line, "[TTFT] weights: eager, %lld tensors, %lld bytes", &tensors, &bytes);
            saw_lazy |= strstr(line, "[TTFT] weights: lazy") != NULL;
        }
        assert_int_equal(WEXITSTATUS(pclose(p)), 0);
        if (lazy) {
            assert_true(saw_lazy);
            assert_int_equal(bytes, -1);
        } else {
            assert_true(tensors > 0);
            assert_int_equal(bytes, want);
        }
    }
}

static void test_bad_input(void **st) {
    (void)st;
    char args[512], *out = NULL;
    snprintf(args, sizeof args, "-m %s --prompt-ids 1,2,3 -c 3 --temp 0", g_dir);
    assert_int_not_equal(run(args, &out), 0); /* prompt does not fit the context */
    free(out);
    snprintf(args, sizeof args, "-m /nonexistent/model --prompt-ids 1,2,3 --temp 0");
    assert_int_not_equal(run(args, &out), 0);
    free(out);
    snprintf(args, sizeof args, "-m %s --prompt-ids 1,x,3 --temp 0", g_dir);
    assert_int_not_equal(run(args, &out), 0);
    free(out);
    snprintf(args, sizeof args, "-m %s --prompt-ids 1,2 --device cuda --temp 0", g_dir);
    assert_int_not_equal(run(args, &out), 0);
    free(out);
    snprintf(args, sizeof args, "-m %s -p hello --temp 0", g_dir); /* no tokenizer.json */
    assert_int_not_equal(run(args, &out), 0);
    free(out);
    assert_int_equal(run("--help", &out), 0);
    assert_non_null(strstr(out, "--prompt-ids"));
    free(out);
}

static int teardown(void **st) {
    (void)st;
    char p[512];
    snprintf(p, sizeof p, "rm -rf %s", g_dir);
    return system(p) == 0 ? 0 : -1;
}

static int setup(void **st) {
    (void)st;
    write_model();
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_and_consistency),
        cmocka_unit_test(test_weight_materialization), cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
