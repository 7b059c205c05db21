/* Autotune record store: atomic write / read round trip, stale and corrupt records. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "tune/tune_store.h"

static char g_dir[256];

static void rm_rf(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "cannot remove %s\n", dir);
}

static int setup(void **st) {
    (void)st;
    snprintf(g_dir, sizeof g_dir, "/tmp/mlxcel_tune_store_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **st) {
    (void)st;
    rm_rf(g_dir);
    return 0;
}

static tune_record sample(void) {
    tune_record r;
    memset(&r, 0, sizeof r);
    snprintf(r.key.op, sizeof r.key.op, "paged-decode-splits");
    snprintf(r.key.device, sizeof r.key.device, "cpu:Test CPU:t4:mem16G");
    snprintf(r.key.bucket, sizeof r.key.bucket, "b4.c4096.d128.q32.kv8.bs16");
    snprintf(r.key.dtype, sizeof r.key.dtype, "f32");
    r.value = 8, r.default_value = 1, r.best_us = 120.5, r.spread_us = 1.5, r.default_us = 180.0;
    r.speedup = 1.494, r.reps = 37, r.created = 1700000000;
    return r;
}

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static void write_file(const char *dir, const tune_key *k, const char *text) {
    char name[128], path[512];
    tune_key_filename(k, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_roundtrip(void **st) {
    (void)st;
    char dir[300];
    snprintf(dir, sizeof dir, "%s/a/b/autotune", g_dir); /* parents are created */
    tune_record r = sample(), got;
    mx_error err;
    assert_int_equal(tune_store_read(dir, &r.key, &got, &err), TUNE_READ_MISSING);
    assert_int_equal(tune_store_write(dir, &r, &err), 0);
    assert_int_equal(count_entries(dir), 1); /* the temp file was renamed away */
    assert_int_equal(tune_store_read(dir, &r.key, &got, &err), TUNE_READ_OK);
    assert_int_equal(got.value, 8);
    assert_int_equal(got.default_value, 1);
    assert_int_equal(got.reps, 37);
    assert_true(got.best_us == 120.5 && got.speedup == 1.494);
    assert_true(got.created == 1700000000);
    /* overwrite in place: still one file, new value */
    r.value = 4;
    assert_int_equal(tune_store_write(dir, &r, &err), 0);
    assert_int_equal(count_entries(dir), 1);
    assert_int_equal(tune_store_read(dir, &r.key, &got, &err), TUNE_READ_OK);
    assert_int_equal(got.value, 4);
    /* another key is another file, and does not see the first record */
    tune_record r2 = sample();
    snprintf(r2.key.dtype, sizeof r2.key.dtype, "bf16");
    assert_int_equal(tune_store_read(dir, &r2.key, &got, &err), TUNE_READ_MISSING);
    assert_int_equal(tune_store_write(dir, &r2, &err), 0);
    assert_int_equal(count_entries(dir), 2);
}

static void test_filename(void **st) {
    (void)st;
    tune_record r = sample();
    char a[128], b[128];
    tune_key_filename(&r.key, a, sizeof a);
    assert_int_equal(strncmp(a, "paged-decode-splits-", 20), 0);
    assert_int_equal((int)strlen(a), 20 + 16 + 5);
    assert_string_equal(a + strlen(a) - 5, ".json");
    snprintf(r.key.device, sizeof r.key.device, "cpu:Test CPU:t8:mem16G");
    tune_key_filename(&r.key, b, sizeof b);
    assert_string_not_equal(a, b);
}

/* A record as tune_store_write makes it, with fields substituted. */
static void write_record(const char *dir, const tune_key *k, int schema, const char *ver,
                         const char *device, const char *value) {
    char text[2048];
    snprintf(text, sizeof text,
             "{\"schema\": %d, \"mlxcel_version\": \"%s\", \"key\": {\"op\": \"%s\", "
             "\"device\": \"%s\", \"bucket\": \"%s\", \"dtype\": \"%s\"}, \"value\": %s, "
             "\"default\": 1}\n",
             schema, ver, k->op, device, k->bucket, k->dtype, value);
    write_file(dir, k, text);
}

static void test_stale_and_corrupt(void **st) {
    (void)st;
    char dir[300];
    snprintf(dir, sizeof dir, "%s/autotune", g_dir);
    mkdir(dir, 0755);
    tune_record r = sample(), got;
    mx_error err;
    /* a hand-written valid record reads back: the format is what the reader expects */
    write_record(dir, &r.key, TUNE_SCHEMA_VERSION, MLXCEL_VERSION, r.key.device, "16");
    assert_int_equal(tune_store_read(dir, &r.key, &got, &err), TUNE_READ_OK);
    assert_int_equal(got.value, 16);

    write_record(dir, &r.key, TUNE_SCHEMA_VERSION + 1, MLXCEL_VERSION, r.key.device, "16");
    assert_int_equal(tune_store_read(dir, &r.key, &got, &err), TUNE_READ_IGNORED);
    assert_non_null(strstr(err.msg, "stale"));
    assert_non_null(strstr(err.msg, "schema"));

    write_record(dir, &r.key, TUNE_SCHEMA_VERSION, "0.0.1-old", r.key.device, "16");
    assert_int_equal(tune_store_read(dir, &r.key, &got, &err), TUNE_READ_IGNORED);
    assert_non_null(strstr(err.msg, "stale"));
    assert_non_null(strstr(err.msg, "0.0.1-old"));

    write_record(dir, &r.key, TUNE_SCHEMA_VERSION, MLXCEL_VERSION, "cpu:Other", "16");
    assert_int_equal(tune_store_read(dir, &r.key, &got, &err), TUNE_READ_IGNORED);
    assert_non_null(strstr(err.msg, "another key"));

    write_record(dir, &r.key, TUNE_SCHEMA_VERSION, MLXCEL_VERSION, r.key.device, "\"eight\"");
    assert_int_equal(tune_store_read(dir, &r.key, &got, &err), TUNE_READ_IGNORED);
    assert_non_null(strstr(err.msg, "\"value\""));

    write_record(dir, &r.key, TUNE_SCHEMA_VERSION, MLXCEL_VERSION, r.key.device, "-3");
    assert_int_equal(tune_store_read(dir, &r.key, &got, &err), TUNE_READ_IGNORED);

    write_file(dir, &r.key, "{\"schema\": 1, \"mlxcel_vers"); /* truncated */
    assert_int_equal(tune_store_read(dir, &r.key, &got, &err), TUNE_READ_IGNORED);
    assert_non_null(strstr(err.msg, "corrupt"));

    write_file(dir, &r.key, "[1, 2, 3]");
    assert_int_equal(tune_store_read(dir, &r.key, &got, &err), TUNE_READ_IGNORED);
    assert_non_null(strstr(err.msg, "corrupt"));

    write_file(dir, &r.key, "");
    assert_int_equal(tune_store_read(dir, &r.key, &got, &err), TUNE_READ_IGNORED);

    /* a fresh write replaces the corrupt file */
    assert_int_equal(tune_store_write(dir, &r, &err), 0);
    assert_int_equal(tune_store_read(dir, &r.key, &got, &err), TUNE_READ_OK);
    assert_int_equal(got.value, 8);
}

/* Informational numbers out of an int's range read 0 instead of an undefined cast (found by
 * fuzz_tune_record: fuzz/regress/tune_record/reps_out_of_int_range.json). */
static void test_measurements_out_of_range(void **st) {
    (void)st;
    char dir[300];
    snprintf(dir, sizeof dir, "%s/autotune", g_dir);
    mkdir(dir, 0755);
    tune_record r = sample(), got;
    mx_error err;
    char text[2048];
    snprintf(text, sizeof text,
             "{\"schema\": %d, \"mlxcel_version\": \"%s\", \"key\": {\"op\": \"%s\", \"device\": \"%s\", "
             "\"bucket\": \"%s\", \"dtype\": \"%s\"}, \"value\": 4, \"default\": 1, \"reps\": 1e300, "
             "\"created\": -1e30, \"best_us\": 1e300}\n",
             TUNE_SCHEMA_VERSION, MLXCEL_VERSION, r.key.op, r.key.device, r.key.bucket, r.key.dtype);
    write_file(dir, &r.key, text);
    assert_int_equal(tune_store_read(dir, &r.key, &got, &err), TUNE_READ_OK);
    assert_int_equal(got.value, 4);
    assert_int_equal(got.reps, 0);
    assert_int_equal(got.created, 0);
    assert_true(got.best_us == 1e300);
}

static void test_write_failure(void **st) {
    (void)st;
    /* the cache dir path runs through a regular file: mkdir fails, the error names it */
    char file[300], dir[400];
    snprintf(file, sizeof file, "%s/plainfile", g_dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(dir, sizeof dir, "%s/autotune", file);
    tune_record r = sample(), got;
    mx_error err;
    assert_int_equal(tune_store_write(dir, &r, &err), -1);
    assert_non_null(strstr(err.msg, "plainfile"));
    assert_int_equal(tune_store_read(dir, &r.key, &got, &err), TUNE_READ_MISSING);
}

/* A reader racing a writer sees the old record or the new one, never a torn file. */
static void test_concurrent_reader_sees_whole_records(void **st) {
    (void)st;
    char dir[300];
    snprintf(dir, sizeof dir, "%s/autotune", g_dir);
    tune_record r = sample(), got;
    mx_error err;
    /* a long device string makes each file a few KB, so a torn read would show */
    memset(r.key.device, 'x', sizeof r.key.device - 1);
    r.key.device[sizeof r.key.device - 1] = 0;
    assert_int_equal(tune_store_write(dir, &r, &err), 0);
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        for (int i = 0; i < 300; i++) {
            r.value = i % 64;
            if (tune_store_write(dir, &r, &err)) _exit(1);
        }
        _exit(0);
    }
    int ok = 0, bad = 0;
    for (int i = 0; i < 3000; i++) {
        const int rc = tune_store_read(dir, &r.key, &got, &err);
        if (rc == TUNE_READ_OK && got.value >= 0 && got.value < 64) ok++;
        else bad++;
        if (bad) print_message("read %d: rc %d (%s)\n", i, rc, err.msg);
        if (bad) break;
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
            break;
        }
    }
    int status;
    waitpid(pid, &status, 0);
    assert_int_equal(bad, 0);
    assert_true(ok > 0);
    assert_int_equal(count_entries(dir), 1); /* no temp file left behind */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_filename, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_and_corrupt, setup, teardown),
        cmocka_unit_test_setup_teardown(test_measurements_out_of_range, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_reader_sees_whole_records, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
