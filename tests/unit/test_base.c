#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/dtype.h"
#include "base/env.h"
#include "base/error.h"

static void test_bytes(void **st) {
    (void)st;
    uint64_t v = 0;
    assert_int_equal(mx_parse_bytes("80G", &v), 0);
    assert_true(v == 80ull << 30);
    assert_int_equal(mx_parse_bytes("512MiB", &v), 0);
    assert_true(v == 512ull << 20);
    assert_int_equal(mx_parse_bytes("1234", &v), 0);
    assert_true(v == 1234);
    assert_int_equal(mx_parse_bytes("12X", &v), -1);
    assert_int_equal(mx_parse_bytes("", &v), -1);
}

static void test_dtype(void **st) {
    (void)st;
    assert_int_equal(mx_dtype_from_name("BF16"), MX_BF16);
    assert_int_equal(mx_dtype_from_name("F8_E5M2"), MX_F8_E5M2);
    assert_int_equal(mx_dtype_from_name("Q4"), MX_DTYPE_INVALID);
    assert_int_equal(mx_dtype_size(MX_I64), 8);
    /* bf16 round trip and round-to-nearest-even */
    assert_true(mx_bf16_to_f32(mx_f32_to_bf16(1.5f)) == 1.5f);
    assert_true(mx_f32_to_bf16(1.00390625f) == 0x3f80); /* halfway, rounds to even */
    /* f16 round trips over a range of values */
    float vals[] = {0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.9604645e-08f, 0.333251953125f};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++)
        assert_true(mx_f16_to_f32(mx_f32_to_f16(vals[i])) == vals[i]);
}

static void test_error(void **st) {
    (void)st;
    mx_error e;
    assert_int_equal(mx_fail(&e, "tensor %s missing", "w"), -1);
    mx_wrap(&e, "file %s", "a.safetensors");
    assert_string_equal(e.msg, "file a.safetensors: tensor w missing");
    /* one line, whatever the quoted input held */
    mx_fail(&e, "corrupt (invalid escape near '%s')", "\"ps\\\n");
    assert_string_equal(e.msg, "corrupt (invalid escape near '\"ps\\?')");
    mx_wrap(&e, "file %s", "a\r\nb");
    assert_null(strpbrk(e.msg, "\r\n"));
}

/* The CUDA decode defaults measured in sessions 12 and 13, and MLXCEL_DIAG_SKIP's list. */
static void test_env(void **st) {
    (void)st;
    unsetenv("MLXCEL_DIAG_SKIP");
    unsetenv("MLXCEL_ATTN_TC");
    unsetenv("MLXCEL_DENSE_GEMV_ROWS");
    unsetenv("MLXCEL_GEMV_TC_SPLIT_ROWS");
    unsetenv("MLXCEL_GEMV_FUSE");
    unsetenv("MLXCEL_GEMV_ROPE");
    mx_env_reload();
    assert_true(mx_env()->attn_tc);
    assert_int_equal(mx_env()->gemv_fuse, 1);
    assert_true(mx_env()->gemv_rope);
    assert_int_equal(mx_env()->dense_gemv_rows, 2);
    assert_int_equal(mx_env()->gemv_split_rows, 8);
    assert_int_equal(mx_env()->diag_skip, 0);
    setenv("MLXCEL_DIAG_SKIP", "attn+PREP,rope", 1);
    mx_env_reload();
    assert_int_equal(mx_env()->diag_skip, MX_SKIP_ATTN | MX_SKIP_PREP | MX_SKIP_ROPE);
    setenv("MLXCEL_DIAG_SKIP", "down+o,gu+QKV", 1);
    mx_env_reload();
    assert_int_equal(mx_env()->diag_skip, MX_SKIP_DOWN | MX_SKIP_O | MX_SKIP_GU | MX_SKIP_QKV);
    setenv("MLXCEL_DIAG_SKIP", "norm,bogus", 1); /* the unknown name warns, the rest holds */
    mx_env_reload();
    assert_int_equal(mx_env()->diag_skip, MX_SKIP_NORM);
    unsetenv("MLXCEL_DIAG_SKIP");
    mx_env_reload();
    assert_int_equal(mx_env()->diag_skip, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytes),
        cmocka_unit_test(test_dtype),
        cmocka_unit_test(test_error),
        cmocka_unit_test(test_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
