/* A fresh temporary directory per test binary (cmocka group setup / teardown): g_tmp. */
#ifndef MLXCEL_TESTS_TMPDIR_H
#define MLXCEL_TESTS_TMPDIR_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char g_tmp[] = "/tmp/mlxcel-test-XXXXXX";

static int tmp_setup(void **st) {
    (void)st;
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int tmp_teardown(void **st) {
    (void)st;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

#endif
