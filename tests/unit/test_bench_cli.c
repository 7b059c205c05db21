/* `mlxcel bench` on a committed tiny checkpoint (CPU): the --json report has every field for
 * every batch size, the figures are consistent with each other, and bad flags are refused.
 * No timing assertions: only presence, signs and identities between the reported figures. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* Runs `mlxcel bench -m tests/fixtures/ckpt/CKPT ARGS`; exit code, stdout in *out (malloc'd). */
static int run_on(const char *ckpt, const char *args, char **out) {
    const char *bin = getenv("MLXCEL_BIN"), *src = getenv("MLXCEL_SOURCE_DIR");
    assert_non_null(bin);
    assert_non_null(src);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s bench -m %s/tests/fixtures/ckpt/%s %s 2>/dev/null", bin, src, ckpt,
             args);
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

static int run(const char *args, char **out) { return run_on("llama_tiny", args, out); }

static double num(const json_t *o, const char *k) {
    const json_t *v = json_object_get(o, k);
    if (!json_is_number(v)) fail_msg("field %s missing or not a number", k);
    return json_number_value(v);
}

static void test_json_report(void **state) {
    (void)state;
    char *out = NULL;
    assert_int_equal(run("--prompt-tokens 24 --gen-tokens 6 --batch 1,3 --repeat 2 --json", &out), 0);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    if (!j) fail_msg("not one JSON object: %s\n%s", je.text, out);
    assert_string_equal(json_string_value(json_object_get(j, "device")), "cpu");
    assert_true(num(j, "copy_gb_s") > 0);
    assert_true(num(j, "weight_bytes") > 0);
    assert_int_equal((int)num(j, "prompt_tokens"), 24);
    assert_int_equal((int)num(j, "gen_tokens"), 6);
    const json_t *res = json_object_get(j, "results");
    assert_true(json_is_array(res));
    assert_int_equal(json_array_size(res), 2);
    const int want_b[2] = {1, 3};
    for (int i = 0; i < 2; i++) {
        const json_t *r = json_array_get(res, (size_t)i);
        const int B = want_b[i];
        assert_int_equal((int)num(r, "batch"), B);
        assert_int_equal((int)num(r, "repeats"), 2);
        assert_true(num(r, "prefill_tok_s") > 0);
        assert_true(num(r, "ttft_ms_p50") > 0);
        assert_true(num(r, "ttft_ms_max") >= num(r, "ttft_ms_p50"));
        assert_true(num(r, "decode_tok_s") > 0);
        assert_true(fabs(num(r, "decode_tok_s_per_seq") * B - num(r, "decode_tok_s")) <=
                    1e-6 * num(r, "decode_tok_s"));
        /* only tokens after the last first token count: B=1 gives exactly gen - 1 */
        const int timed = (int)num(r, "decode_tokens_timed");
        if (B == 1) assert_int_equal(timed, 5);
        assert_true(timed > 0 && timed <= B * 5);
        assert_true(num(r, "itl_ms_p50") > 0);
        assert_true(num(r, "itl_ms_p99") >= num(r, "itl_ms_p50"));
        assert_true(num(r, "mem_peak_bytes") > 0);
        assert_true(num(r, "decode_bytes_per_step") > 0);
        assert_true(num(r, "decode_gb_s") > 0);
        assert_true(num(r, "decode_pct_of_copy") > 0);
        /* GB/s = bytes per step x steps per second (medians of consistent runs may differ
         * slightly, so the identity is checked to 50%) */
        const double gbs = num(r, "decode_bytes_per_step") * num(r, "decode_tok_s") / B / 1e9;
        assert_true(fabs(gbs - num(r, "decode_gb_s")) <= 0.5 * gbs);
    }
    /* bytes per step grow with the batch (more KV read) */
    assert_true(num(json_array_get(res, 1), "decode_bytes_per_step") >
                num(json_array_get(res, 0), "decode_bytes_per_step"));
    json_decref(j);
    free(out);
}

/* Bytes of the safetensors tensors whose names start with `prefix`, from the file's header. */
static double file_bytes(const char *ckpt, const char *prefix) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/ckpt/%s/model.safetensors", getenv("MLXCEL_SOURCE_DIR"),
             ckpt);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint64_t n = 0;
    assert_int_equal(fread(&n, 8, 1, f), 1);
    char *hdr = calloc(1, n + 1);
    assert_int_equal(fread(hdr, 1, n, f), n);
    fclose(f);
    json_t *h = json_loads(hdr, 0, NULL);
    assert_non_null(h);
    double sum = 0;
    const char *k;
    json_t *v;
    json_object_foreach(h, k, v) {
        if (strncmp(k, prefix, strlen(prefix))) continue;
        const json_t *off = json_object_get(v, "data_offsets");
        sum += (double)(json_integer_value(json_array_get(off, 1)) - json_integer_value(json_array_get(off, 0)));
    }
    json_decref(h);
    free(hdr);
    return sum;
}

/* A quantized checkpoint with its own lm_head: a step reads every weight but the token table,
 * at the table's stored (packed) size, not V * H * dtype (session 20: the bf16 size was
 * subtracted, under-counting a 4-bit 8B step by 0.75 GB). Two batch sizes separate the KV
 * term (linear in B) from the weights. */
static void test_quantized_step_bytes(void **state) {
    (void)state;
    char *out = NULL;
    assert_int_equal(run_on("llama_q4", "--prompt-tokens 16 --gen-tokens 4 --batch 1,2 --repeat 1 --json", &out), 0);
    json_t *j = json_loads(out, 0, NULL);
    if (!j) fail_msg("not one JSON object:\n%s", out);
    const double embd = file_bytes("llama_q4", "model.embed_tokens.");
    assert_true(embd > 0);
    assert_true(num(j, "embedding_bytes") == embd);
    const json_t *res = json_object_get(j, "results");
    const double b1 = num(json_array_get(res, 0), "decode_bytes_per_step");
    const double b2 = num(json_array_get(res, 1), "decode_bytes_per_step");
    const double kv = b2 - b1; /* one sequence's KV read per step */
    assert_true(kv > 0);
    assert_true(fabs((b1 - kv) - (num(j, "weight_bytes") - embd)) < 0.5);
    json_decref(j);
    free(out);
}

static void test_text_table(void **state) {
    (void)state;
    char *out = NULL;
    assert_int_equal(run("--prompt-tokens 8 --gen-tokens 3 --batch 2 --repeat 1", &out), 0);
    assert_non_null(strstr(out, "prefill t/s"));
    assert_non_null(strstr(out, "% copy"));
    free(out);
}

/* --shared-prefix: the prompts' first 32 tokens come from the prefix cache (2 full blocks of
 * 16), so each run computes B * (40 - 32) prompt tokens; without it, all B * 40. */
static void test_shared_prefix(void **state) {
    (void)state;
    static const char *args[] = {"--prompt-tokens 40 --gen-tokens 3 --batch 3 --repeat 1 --json",
                                 "--prompt-tokens 40 --gen-tokens 3 --batch 3 --repeat 1 --json "
                                 "--shared-prefix 32"};
    for (int k = 0; k < 2; k++) {
        char *out = NULL;
        assert_int_equal(run(args[k], &out), 0);
        json_t *j = json_loads(out, 0, NULL);
        if (!j) fail_msg("not one JSON object:\n%s", out);
        assert_int_equal((int)num(j, "shared_prefix"), k ? 32 : 0);
        const json_t *r = json_array_get(json_object_get(j, "results"), 0);
        assert_int_equal((int)num(r, "prefill_tokens"), k ? 3 * 8 : 3 * 40);
        assert_true(num(r, "prefill_tok_s") > 0 && num(r, "decode_tok_s") > 0);
        json_decref(j);
        free(out);
    }
    char *out = NULL;
    assert_int_equal(run("--prompt-tokens 8 --gen-tokens 3 --batch 2 --repeat 1 --shared-prefix 4", &out), 0);
    assert_non_null(strstr(out, "shared prefix 4"));
    free(out);
}

static void test_bad_flags(void **state) {
    (void)state;
    char *out = NULL;
    assert_int_equal(run("--batch 0", &out), 2);
    free(out);
    assert_int_equal(run("--batch 1,x", &out), 2);
    free(out);
    assert_int_equal(run("--device tpu", &out), 2);
    free(out);
    assert_int_equal(run("--gen-tokens -3", &out), 2);
    free(out);
    assert_int_equal(run("--frobnicate 1", &out), 2);
    free(out);
    assert_int_equal(run("--prompt-tokens 8 --shared-prefix 8", &out), 2); /* no own token */
    free(out);
    assert_int_equal(run("--shared-prefix -1", &out), 2);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_report),
        cmocka_unit_test(test_quantized_step_bytes),
        cmocka_unit_test(test_text_table),
        cmocka_unit_test(test_shared_prefix),
        cmocka_unit_test(test_bad_flags),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
