/* --load-format dummy (src/model/model_dummy.c): a directory holding nothing but a fixture's
 * config.json loads; the bound model has exactly the parameter count of the real fixture
 * checkpoint (so the source answered every tensor the binder asks for, with the shape the
 * checkpoint has, and nothing it does not have); greedy decoding runs, and TP 2 gives TP 1's
 * tokens; MoE and quantized configs and a missing config are refused with their reasons. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "engine_collect.h"
#include "model/model.h"
#include "test_tmpdir.h"

/* A fresh directory under g_tmp holding only fixture `name`'s config.json. */
static void config_only(const char *name, char *dir, size_t len) {
    const char *src = getenv("MLXCEL_SOURCE_DIR");
    char from[1400], to[1500];
    snprintf(from, sizeof from, "%s/tests/fixtures/models/%s/config.json", src ? src : ".", name);
    snprintf(dir, len, "%s/%s", g_tmp, name);
    snprintf(to, sizeof to, "%s/config.json", dir);
    char cmd[3200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s' '%s'", dir, from, to);
    assert_int_equal(system(cmd), 0);
}

static void test_dummy_matches_fixture_shapes(void **st) {
    (void)st;
    static const char *k_dense[] = {"llama", "qwen2", "qwen3", "mistral", "gemma3_text"};
    for (size_t f = 0; f < sizeof k_dense / sizeof k_dense[0]; f++) {
        const char *src = getenv("MLXCEL_SOURCE_DIR");
        char real[1400], dir[1400];
        snprintf(real, sizeof real, "%s/tests/fixtures/models/%s", src ? src : ".", k_dense[f]);
        config_only(k_dense[f], dir, sizeof dir);
        mx_error err;
        model *mr = NULL, *m1 = NULL, *m2 = NULL;
        if (model_load_tp(&mr, real, backend_cpu(), 1, &err)) fail_msg("%s: %s", real, err.msg);
        if (model_load_dummy_tp(&m1, dir, backend_cpu(), 1, &err)) fail_msg("%s: %s", dir, err.msg);
        if (model_n_params(m1) != model_n_params(mr))
            fail_msg("%s: dummy model has %llu parameters, the checkpoint %llu", k_dense[f],
                     (unsigned long long)model_n_params(m1), (unsigned long long)model_n_params(mr));
        if (model_load_dummy_tp(&m2, dir, backend_cpu(), 2, &err)) fail_msg("%s TP 2: %s", dir, err.msg);
        char what[64];
        snprintf(what, sizeof what, "%s dummy TP 2 (against TP 1)", k_dense[f]);
        ec_expect_same_tokens(m1, m2, 12, what);
        model_free(mr);
        model_free(m1);
        model_free(m2);
    }
}

static void test_dummy_refusals(void **st) {
    (void)st;
    char dir[1400];
    mx_error err;
    model *m = NULL;
    config_only("qwen3_moe", dir, sizeof dir);
    assert_int_equal(model_load_dummy_tp(&m, dir, backend_cpu(), 1, &err), -1);
    assert_non_null(strstr(err.msg, "MoE"));
    char missing[1500];
    snprintf(missing, sizeof missing, "%s/nothing-here", g_tmp);
    assert_int_equal(model_load_dummy_tp(&m, missing, backend_cpu(), 1, &err), -1);
    assert_non_null(strstr(err.msg, "config.json"));
    bool dummy = false;
    assert_int_equal(model_load_format_parse("dummy", &dummy), 0);
    assert_true(dummy);
    assert_int_equal(model_load_format_parse("auto", &dummy), 0);
    assert_false(dummy);
    assert_int_equal(model_load_format_parse("pt", &dummy), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dummy_matches_fixture_shapes),
        cmocka_unit_test(test_dummy_refusals),
    };
    return cmocka_run_group_tests(tests, tmp_setup, tmp_teardown);
}
