/* `mlxcel tune` end to end: dry-run matrix (text and JSON), -m config.json geometry, the CUDA
 * refusal, bad arguments, and one real (tiny) CPU tuning run that writes a record. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "tune_test_util.h"

static const char *g_bin;

static int setup(void **st) {
    (void)st;
    g_bin = getenv("MLXCEL_BIN");
    if (!g_bin) return -1;
    return tt_setup("/tmp/mlxcel_tune_cli_XXXXXX", "warn");
}

/* Runs `mlxcel tune <args>`; stdout into *out (malloc'd), returns the exit status. */
static int run(const char *args, char **out) { return tt_run_tune(g_bin, args, out); }

static void test_dry_run_json(void **st) {
    (void)st;
    char *out;
    assert_int_equal(run("--dry-run --json --device cpu --head-dim 64 --q-heads 8 --kv-heads 2 "
                         "--block-size 32 --batch-sizes 1,3 --context-lengths 256,1000", &out), 0);
    json_error_t je;
    json_t *o = json_loads(out, 0, &je);
    assert_non_null(o);
    assert_true(json_is_true(json_object_get(o, "dry_run")));
    json_t *m = json_object_get(o, "matrix");
    assert_int_equal(json_array_size(m), 4); /* paged-decode-splits only on the cpu: 2 x 2 */
    json_t *p0 = json_array_get(m, 0), *p3 = json_array_get(m, 3);
    assert_string_equal(json_string_value(json_object_get(p0, "op")), "paged-decode-splits");
    assert_string_equal(json_string_value(json_object_get(p0, "bucket")), "b1.c256.d64.q8.kv2.bs32");
    assert_int_equal(json_array_size(json_object_get(p0, "candidates")), 1); /* 1 piece */
    assert_int_equal(json_integer_value(json_object_get(p3, "batch")), 4);   /* 3 snapped */
    assert_int_equal(json_integer_value(json_object_get(p3, "context")), 1024);
    assert_string_equal(json_string_value(json_object_get(p0, "dtype")), "f32");
    json_decref(o);
    free(out);
    assert_false(exists(g_cache)); /* a dry run writes nothing */
}

static void test_dry_run_cuda_text(void **st) {
    (void)st;
    char *out;
    assert_int_equal(run("--dry-run --device cuda --batch-sizes 1,2 --context-lengths 1024", &out),
                     0);
    /* every CUDA op: 2 paged points, 1 qmm point (context axis), 2 qmv points (batch axis) */
    int paged = 0, qmm = 0, qmv = 0;
    for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n")) {
        paged += !strncmp(l, "paged-decode-splits ", 20);
        qmm += !strncmp(l, "qmm-tile ", 9);
        qmv += !strncmp(l, "qmv-multirow ", 13);
    }
    assert_int_equal(paged, 2);
    assert_int_equal(qmm, 1);
    assert_int_equal(qmv, 2);
    free(out);
    /* without --dry-run the CUDA tuner is refused clearly */
    assert_int_not_equal(run("--device cuda", &out), 0);
    free(out);
    char *err = tt_read_stderr();
    assert_non_null(strstr(err, "CUDA tuner"));
    assert_non_null(strstr(err, "not available"));
    free(err);
}

static void test_model_config(void **st) {
    (void)st;
    char dir[300], path[400];
    snprintf(dir, sizeof dir, "%s/model", g_root);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    /* a multimodal-style config: attention geometry under text_config, head_dim implied; read
     * by the config parser every command uses, so gemma3's default head_dim of 256 (as
     * transformers' Gemma3TextConfig), not hidden / heads = 128 */
    fputs("{\"model_type\": \"gemma3\", \"quantization\": {\"bits\": 8, \"group_size\": 32},"
          " \"text_config\": {\"model_type\": \"gemma3_text\", \"hidden_size\": 2048,"
          " \"num_attention_heads\": 16, \"num_key_value_heads\": 4, \"intermediate_size\": 6144,"
          " \"num_hidden_layers\": 2, \"vocab_size\": 1000}}", f);
    fclose(f);
    char args[600], *out;
    snprintf(args, sizeof args, "--dry-run --json -m %s --block-size 8 --batch-sizes 1 "
                                "--context-lengths 256", dir);
    assert_int_equal(run(args, &out), 0);
    json_t *o = json_loads(out, 0, NULL);
    assert_non_null(o);
    json_t *g = json_object_get(o, "geometry");
    assert_int_equal(json_integer_value(json_object_get(g, "head_dim")), 256);
    assert_int_equal(json_integer_value(json_object_get(g, "q_heads")), 16);
    assert_int_equal(json_integer_value(json_object_get(g, "kv_heads")), 4);
    assert_int_equal(json_integer_value(json_object_get(g, "block_size")), 8);
    assert_int_equal(json_integer_value(json_object_get(g, "q_bits")), 8);
    assert_int_equal(json_integer_value(json_object_get(g, "intermediate")), 6144);
    json_decref(o);
    free(out);
    /* a broken config names the file and field */
    f = fopen(path, "w");
    fputs("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 1, \"vocab_size\": 10,"
          " \"intermediate_size\": 128, \"num_attention_heads\": \"sixteen\"}", f);
    fclose(f);
    assert_int_equal(run(args, &out), 2);
    free(out);
    char *err = tt_read_stderr();
    assert_non_null(strstr(err, "config.json"));
    assert_non_null(strstr(err, "num_attention_heads"));
    free(err);
}

static void test_bad_args(void **st) {
    (void)st;
    static const char *bad[] = {"--op qmm-tile --device cpu --dry-run", "--op nope --dry-run",
                                "--batch-sizes 1,x --dry-run", "--reps 10 --max-reps 5",
                                "--kv-heads 5 --dry-run", "--bogus", "--device tpu",
                                "--min-improvement -1", "-m /nonexistent/dir --dry-run"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *out;
        const int rc = run(bad[i], &out);
        if (rc != 2) print_message("'%s' exited %d\n", bad[i], rc);
        assert_int_equal(rc, 2);
        free(out);
    }
    char *out;
    assert_int_equal(run("--help", &out), 0);
    assert_non_null(strstr(out, "--min-improvement"));
    free(out);
}

static void test_real_cpu_run(void **st) {
    (void)st;
    char *out;
    assert_int_equal(run("--json --device cpu --head-dim 16 --q-heads 2 --kv-heads 1 "
                         "--block-size 16 --batch-sizes 1 --context-lengths 1024 --warmup 1 "
                         "--warmup-ms 0 --reps 3 --max-reps 3 --sample-ms 1", &out), 0);
    json_t *o = json_loads(out, 0, NULL);
    assert_non_null(o);
    json_t *r = json_array_get(json_object_get(o, "results"), 0);
    assert_non_null(r);
    const json_int_t sel = json_integer_value(json_object_get(r, "selected"));
    json_t *c = json_object_get(r, "candidates_measured");
    /* 4 pieces of 256 keys: 1, 2, 4, plus the default when it is none of them (it is
     * min(4, threads) for one task) */
    assert_true(json_array_size(c) == 3 || json_array_size(c) == 4);
    bool found = false;
    for (size_t i = 0; i < json_array_size(c); i++) {
        json_t *e = json_array_get(c, i);
        /* every split count gives the default's bits */
        assert_true(json_is_true(json_object_get(e, "checked")));
        assert_true(json_real_value(json_object_get(e, "check_rel_err")) == 0.0);
        assert_int_equal(json_integer_value(json_object_get(e, "reps")), 3);
        found |= json_integer_value(json_object_get(e, "value")) == sel;
    }
    assert_true(found);
    /* the record on disk names the same winner */
    const char *file = json_string_value(json_object_get(r, "record"));
    assert_non_null(file);
    json_t *rec = json_load_file(file, 0, NULL);
    assert_non_null(rec);
    assert_int_equal(json_integer_value(json_object_get(rec, "value")), sel);
    assert_int_equal(json_integer_value(json_object_get(rec, "schema")), 1);
    json_decref(rec);
    json_decref(o);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_dry_run_json, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dry_run_cuda_text, setup, teardown),
        cmocka_unit_test_setup_teardown(test_model_config, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_args, setup, teardown),
        cmocka_unit_test_setup_teardown(test_real_cpu_run, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
