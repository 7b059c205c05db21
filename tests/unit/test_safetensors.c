/* safetensors: writer/reader round trip, header validation, file-level truncation checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/safetensors.h"

static char g_dir[256];

static int setup(void **st) {
    (void)st;
    snprintf(g_dir, sizeof g_dir, "/tmp/mlxcel_st_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **st) {
    (void)st;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* ==== Round trip ==== */

static void test_roundtrip(void **st) {
    (void)st;
    uint16_t a[6] = {1, 2, 3, 4, 5, 6};      /* [2, 3] bf16 */
    float b[4] = {1.5f, -2.0f, 3.25f, 0.0f}; /* [4] f32 */
    uint8_t c[3] = {7, 8, 9};                /* [3] u8: leaves the next offset unaligned */
    double d = 42.0;                         /* [] scalar */
    st_write_tensor ts[] = {
        {.name = "w.a", .dtype = MX_BF16, .ndim = 2, .shape = {2, 3}, .data = a},
        {.name = "w.c", .dtype = MX_U8, .ndim = 1, .shape = {3}, .data = c},
        {.name = "w.b", .dtype = MX_F32, .ndim = 1, .shape = {4}, .data = b},
        {.name = "empty", .dtype = MX_F16, .ndim = 2, .shape = {0, 5}, .data = NULL},
        {.name = "scalar", .dtype = MX_F64, .ndim = 0, .data = &d},
    };
    const char *mk[] = {"format", "note"}, *mv[] = {"pt", "hello"};
    char path[300];
    snprintf(path, sizeof path, "%s/rt.safetensors", g_dir);
    mx_error err = {0};
    assert_int_equal(st_write(path, ts, 5, mk, mv, 2, &err), 0);

    st_file f;
    int rc = st_open(&f, path, &err);
    if (rc) fail_msg("%s", err.msg);
    assert_int_equal(f.n_tensors, 5);
    assert_int_equal(f.header_len % 8, 0);
    /* sorted by name */
    assert_string_equal(f.tensors[0].name, "empty");
    assert_string_equal(f.tensors[4].name, "w.c");
    const st_tensor *t = st_find(&f, "w.a");
    assert_non_null(t);
    assert_int_equal(t->dtype, MX_BF16);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[1], 3);
    assert_int_equal(t->nbytes, 12);
    assert_memory_equal(t->data, a, 12);
    t = st_find(&f, "w.b");
    assert_non_null(t);
    assert_int_equal((uintptr_t)t->data % 8, 0); /* aligned after the 3-byte tensor */
    assert_memory_equal(t->data, b, 16);
    t = st_find(&f, "scalar");
    assert_int_equal(t->ndim, 0);
    assert_memory_equal(t->data, &d, 8);
    assert_int_equal(st_find(&f, "empty")->nbytes, 0);
    assert_null(st_find(&f, "nope"));
    assert_string_equal(st_meta(&f, "note"), "hello");
    assert_null(st_meta(&f, "missing"));
    st_close(&f);
}

/* ==== Header validation ==== */

static void expect_header_error(const char *json, uint64_t data_len, const char *needle) {
    st_file f;
    memset(&f, 0, sizeof f);
    mx_error err = {0};
    int rc = st_parse_header(&f, json, strlen(json), data_len, &err);
    if (rc == 0) fail_msg("accepted: %s", json);
    if (!strstr(err.msg, needle)) fail_msg("message '%s' lacks '%s'", err.msg, needle);
    assert_int_equal(f.n_tensors, 0);
}

static void test_header_errors(void **st) {
    (void)st;
    expect_header_error("not json", 0, "not valid JSON");
    expect_header_error("[1,2]", 0, "not a JSON object");
    expect_header_error("{\"a\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,1]}}", 8,
                        "unknown dtype 'Q4'");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 16,
                        "data_offsets span 8");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 12,
                        "past the end of the data section");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 12,
                        "end before they begin");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                        16, "overlap");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
                        "shape[0]");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                        "\"data_offsets\":[0,4]}}",
                        4, "dimensions");
    expect_header_error("{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,4294967296],"
                        "\"data_offsets\":[0,0]}}",
                        4, "overflows 64 bits");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                        "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                        8, "not valid JSON");
    expect_header_error("{\"__metadata__\":{\"k\":1}}", 0, "__metadata__");
    expect_header_error("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "dtype");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4,
                        "data_offsets");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4,
                        "shape[0]");

    /* a tensor name holding a newline still gives a one-line message */
    expect_header_error("{\"a\\nb\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,1]}}", 8,
                        "'a?b': unknown dtype");

    /* accepted: zero-length tensors share offsets with neighbours without overlapping */
    st_file f;
    mx_error err;
    const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    assert_int_equal(st_parse_header(&f, ok, strlen(ok), 8, &err), 0);
    assert_int_equal(f.n_tensors, 2);
    st_close(&f);
}

/* ==== File-level checks ==== */

static void write_raw(const char *path, const void *buf, size_t n) {
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(buf, 1, n, fp), n);
    fclose(fp);
}

static void expect_open_error(const void *buf, size_t n, const char *needle) {
    char path[300];
    snprintf(path, sizeof path, "%s/bad.safetensors", g_dir);
    write_raw(path, buf, n);
    st_file f;
    mx_error err = {0};
    assert_int_equal(st_open(&f, path, &err), -1);
    if (!strstr(err.msg, needle) || !strstr(err.msg, path))
        fail_msg("message '%s' lacks '%s' or the path", err.msg, needle);
}

static void test_file_errors(void **st) {
    (void)st;
    uint8_t buf[64] = {0};
    expect_open_error(buf, 0, "truncated");
    expect_open_error(buf, 5, "truncated");
    buf[0] = 200; /* header length 200 in a 64-byte file */
    expect_open_error(buf, sizeof buf, "past the end");
    memset(buf, 0xff, 8); /* 2^64 - 1 */
    expect_open_error(buf, sizeof buf, "cap");
    uint8_t hb[8 + 12] = {12, 0, 0, 0, 0, 0, 0, 0};
    memcpy(hb + 8, "{\"a\":{\"dtyp", 12);
    expect_open_error(hb, sizeof hb, "not valid JSON");
    st_file f;
    mx_error err;
    assert_int_equal(st_open(&f, "/nonexistent/x.safetensors", &err), -1);
    assert_non_null(strstr(err.msg, "/nonexistent/x.safetensors"));
    assert_int_equal(st_open(&f, g_dir, &err), -1); /* a directory */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_header_errors),
        cmocka_unit_test(test_file_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
