/* Test helpers shared by the autotune tests: a private cache root per test (setup / teardown
 * with the tuning variables cleared), planting a winner record in it, a CUDA test device, and
 * running `mlxcel tune` with stdout and stderr captured. Header-only; included by one test file
 * each (after cmocka.h). */
#ifndef MLXCEL_TEST_TUNE_TEST_UTIL_H
#define MLXCEL_TEST_TUNE_TEST_UTIL_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "base/env.h"
#include "tune/tune_ops.h"
#include "tune/tune_policy.h"
#include "tune/tune_runner.h"
#include "tune/tune_store.h"

#define TT_UNUSED __attribute__((unused))

/* ==== Cache root ==== */
/* g_root: the test's mkdtemp dir; g_cache: MLXCEL_CACHE_DIR (not created by setup, so a test
 * can tell whether anything wrote it); g_dir: the autotune store inside it. */
static TT_UNUSED char g_root[256], g_cache[300], g_dir[400];

static TT_UNUSED void set_env(const char *k, const char *v) {
    if (v) setenv(k, v, 1);
    else unsetenv(k);
}

/* Applies the environment: re-parse it and forget memoised lookups. */
static TT_UNUSED void apply_env(void) {
    mx_env_reload();
    tune_policy_reset();
}

/* Makes a fresh root from `tmpl` (a mkdtemp template), points MLXCEL_CACHE_DIR into it, clears
 * every variable that overrides a tuned value (so the host environment cannot leak into the
 * expectations) and sets the log level. Returns -1 when the root cannot be made. */
static TT_UNUSED int tt_setup(const char *tmpl, const char *log_level) {
    snprintf(g_root, sizeof g_root, "%s", tmpl);
    if (!mkdtemp(g_root)) return -1;
    snprintf(g_cache, sizeof g_cache, "%s/cache", g_root);
    snprintf(g_dir, sizeof g_dir, "%s/autotune", g_cache);
    set_env("MLXCEL_CACHE_DIR", g_cache);
    static const char *clear[] = {"MLXCEL_AUTOTUNE", "MLXCEL_PAGED_DECODE_SPLITS",
                                  "MLXCEL_QMV_MULTIROW", "MLXCEL_QMM_TILE_M",
                                  "MLXCEL_SDPA_DETERMINISTIC"};
    for (size_t i = 0; i < sizeof clear / sizeof clear[0]; i++) set_env(clear[i], NULL);
    set_env("MLXCEL_LOG_LEVEL", log_level);
    apply_env();
    return 0;
}

static TT_UNUSED int teardown(void **st) {
    (void)st;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
    return system(cmd) ? -1 : 0;
}

static TT_UNUSED bool exists(const char *p) {
    struct stat s;
    return stat(p, &s) == 0;
}

/* ==== Devices and records ==== */
/* An H200-like device (cc 9, 132 SMs, 141 GiB); `name` feeds the device id. */
static TT_UNUSED tune_device tt_cuda_dev(const char *name) {
    tune_device d;
    memset(&d, 0, sizeof d);
    d.kind = TUNE_DEV_CUDA;
    snprintf(d.name, sizeof d.name, "%s", name);
    d.cc_major = 9, d.threads = 132, d.mem_bytes = 141ull << 30;
    tune_device_make_id(&d);
    return d;
}

/* Stores `value` as the winner the lookup for (op, batch, context) on `dev` will look for;
 * with `bucket` non-NULL, also checks the record lands in that bucket. */
static TT_UNUSED void tt_plant(tune_op op, const tune_device *dev, const tune_geom *g, int batch,
                               int context, int value, const char *bucket) {
    tune_point p;
    mx_error err;
    assert_int_equal(tune_point_make(op, dev, g, batch, context, &p, &err), 0);
    tune_record r;
    memset(&r, 0, sizeof r);
    tune_point_key(&p, dev, &r.key);
    if (bucket) assert_string_equal(r.key.bucket, bucket);
    r.value = value;
    r.default_value = p.default_value;
    assert_int_equal(tune_store_write(g_dir, &r, &err), 0);
}

/* ==== The CLI ==== */
/* Runs `<bin> tune <args>` with stderr into g_root/stderr; stdout into *out (malloc'd).
 * Returns the exit status (-1 when it did not exit). */
static TT_UNUSED int tt_run_tune(const char *bin, const char *args, char **out) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' tune %s 2>%s/stderr", bin, args, g_root);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, n = 0, r;
    char *buf = malloc(cap);
    while ((r = fread(buf + n, 1, cap - n - 1, p)) > 0)
        if ((n += r) + 1 >= cap) buf = realloc(buf, cap *= 2);
    buf[n] = 0;
    const int st = pclose(p);
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The stderr of the last tt_run_tune (first 64 KiB, malloc'd). */
static TT_UNUSED char *tt_read_stderr(void) {
    char path[300];
    snprintf(path, sizeof path, "%s/stderr", g_root);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *buf = calloc(1, 1 << 16);
    const size_t n = fread(buf, 1, (1 << 16) - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

#endif
