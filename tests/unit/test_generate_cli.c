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

/* Runs `mlxcel CMD ARGS`; returns the exit code, stderr in *err (malloc'd). */
static int run_err(const char *cmd, const char *args, char **err) {
    const char *bin = getenv("MLXCEL_BIN");
    assert_non_null(bin);
    char line[2048], path[300];
    snprintf(path, sizeof path, "%s/stderr.txt", g_dir);
    snprintf(line, sizeof line, "%s %s %s >/dev/null 2>%s", bin, cmd, args, path);
    const int st = system(line);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *buf = calloc(1, 1 << 16);
    (void)!fread(buf, 1, (1 << 16) - 1, f);
    fclose(f);
    *err = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* -ctk / -ctv: types reach the engine (--json, bytes per token), f32 by name is the default,
 * llama.cpp's other types and unknown names are usage errors (exit 2, like every bad flag
 * value) on generate, run, bench, compare and inspect; a type the model cannot hold (q8_0 on
 * heads of 8) is a run-time error (exit 1) naming head_dim. */
static void test_cache_types(void **st) {
    (void)st;
    json_t *base = run_json("");
    json_t *f32 = run_json("-ctk f32 --cache-type-v f32");
    assert_true(json_equal(json_object_get(base, "tokens"), json_object_get(f32, "tokens")));
    assert_string_equal(json_string_value(json_object_get(base, "cache_type_k")), "f32");
    /* 2 layers x 2 KV heads x 8 values: f32 K + V = 2 x 2 x 2 x 8 x 4 bytes */
    assert_int_equal(json_integer_value(json_object_get(base, "kv_bytes_per_token")), 256);
    json_t *h = run_json("-ctk f16 -ctv bf16");
    assert_string_equal(json_string_value(json_object_get(h, "cache_type_k")), "f16");
    assert_string_equal(json_string_value(json_object_get(h, "cache_type_v")), "bf16");
    assert_int_equal(json_integer_value(json_object_get(h, "kv_bytes_per_token")), 128);
    assert_int_equal(json_array_size(json_object_get(h, "tokens")), 12);
    json_decref(base), json_decref(f32), json_decref(h);
    char args[512], *err = NULL;
    static const char *cmds[] = {"generate", "run", "bench", "compare", "inspect"};
    for (int c = 0; c < 5; c++) {
        snprintf(args, sizeof args, "-m %s -ctk q4_1%s", g_dir,
                 c == 0 ? " --prompt-ids 1,2" : c == 3 ? " --ref . --prompt-ids 1,2" : "");
        const int rc = run_err(cmds[c], args, &err);
        if (rc != 2 || !strstr(err, "q4_1") || !strstr(err, "f32, f16, bf16, q8_0"))
            fail_msg("%s -ctk q4_1: exit %d, stderr: %s", cmds[c], rc, err);
        free(err);
    }
    snprintf(args, sizeof args, "-m %s --prompt-ids 1,2 -n 2 --cache-type-v iq4_nl", g_dir);
    assert_int_equal(run_err("generate", args, &err), 2);
    assert_non_null(strstr(err, "--cache-type-v: cache type iq4_nl (llama.cpp) is not supported; supported: "
                                "f32, f16, bf16, q8_0, q4_0"));
    free(err);
    snprintf(args, sizeof args, "-m %s --prompt-ids 1,2 -n 2 -ctv q8", g_dir);
    assert_int_equal(run_err("generate", args, &err), 2);
    assert_non_null(strstr(err, "unknown cache type 'q8'"));
    free(err);
    snprintf(args, sizeof args, "-m %s --prompt-ids 1,2 -n 2 -ctk q8_0", g_dir);
    assert_int_equal(run_err("generate", args, &err), 1);
    assert_non_null(strstr(err, "K cache type q8_0 stores blocks of 32 values along head_dim, and the "
                                "model's head_dim is 8"));
    free(err);
    snprintf(args, sizeof args, "-m %s -ctv q4_0", g_dir);
    assert_int_equal(run_err("inspect", args, &err), 1);
    assert_non_null(strstr(err, "head_dim"));
    free(err);
    /* --device cuda: without a GPU the backend is refused first (the CUDA cache-type refusal
     * itself is tested in test_kv_quant with a CUDA-like backend table) */
    snprintf(args, sizeof args, "-m %s --prompt-ids 1,2 -n 2 --device cuda -ctk q8_0", g_dir);
    assert_int_equal(run_err("generate", args, &err), 1);
    free(err);
}

/* MLXCEL_PROFILE_TTFT=1: one [TTFT] line per request with the prefill steps the engine ran
 * for it: a 16-token prompt in chunks of 5 is four forwards of 5, 5, 5 and 1 rows. */
static void test_profile_ttft(void **st) {
    (void)st;
    char args[600], *err;
    snprintf(args, sizeof args, "-m %s --prompt-ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16 -n 3 "
                                "--prefill-chunk-size 5", g_dir);
    setenv("MLXCEL_PROFILE_TTFT", "1", 1);
    assert_int_equal(run_err("generate", args, &err), 0);
    unsetenv("MLXCEL_PROFILE_TTFT");
    const char *l = strstr(err, "[TTFT] generate: prompt 16 tok (0 cached) | template+tokenize ");
    if (!l) fail_msg("no [TTFT] request line in: %s", err);
    const char *p = strstr(l, "| prefill 4 steps ");
    assert_non_null(p);
    double ms[4];
    int rows[4], all[4];
    p = strchr(p, '(');
    assert_non_null(p);
    assert_int_equal(sscanf(p, "(%lf ms %d/%d rows, %lf ms %d/%d rows, %lf ms %d/%d rows, %lf ms %d/%d rows)",
                            &ms[0], &rows[0], &all[0], &ms[1], &rows[1], &all[1], &ms[2], &rows[2],
                            &all[2], &ms[3], &rows[3], &all[3]),
                     12);
    const int want[4] = {5, 5, 5, 1};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(rows[i], want[i]);
        assert_int_equal(all[i], want[i]); /* alone in every step */
        assert_true(ms[i] > 0);
    }
    assert_non_null(strstr(l, "| queue "));
    assert_non_null(strstr(p, "| first sample "));
    assert_non_null(strstr(p, "| first byte out "));
    assert_non_null(strstr(p, "| total "));
    free(err);
    /* the tuning page's Metal budgets: a one-line notice each, never silence */
    setenv("MLX_MAX_MB_PER_BUFFER", "1000", 1);
    setenv("MLXCEL_DECODE_MB_PER_BUFFER", "1000", 1);
    assert_int_equal(run_err("generate", args, &err), 0);
    unsetenv("MLX_MAX_MB_PER_BUFFER");
    unsetenv("MLXCEL_DECODE_MB_PER_BUFFER");
    assert_non_null(strstr(err, "mlxcel note: MLX_MAX_MB_PER_BUFFER=1000 is a Metal command-buffer budget"));
    assert_non_null(strstr(err, "mlxcel note: MLXCEL_DECODE_MB_PER_BUFFER=1000 is a Metal"));
    assert_null(strstr(err, "MLX_MAX_OPS_PER_BUFFER"));
    free(err);
    /* off by default: no request line */
    assert_int_equal(run_err("generate", args, &err), 0);
    assert_null(strstr(err, "[TTFT]"));
    free(err);
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
        cmocka_unit_test(test_cache_types), cmocka_unit_test(test_profile_ttft),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
