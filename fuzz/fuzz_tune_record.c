/* libFuzzer target: an autotune record file (${MLXCEL_CACHE_DIR}/autotune/<op>-<hash>.json),
 * which tune_store_read must take as it may find it: corrupt, stale, hand-edited or written
 * for another key. The input is the file's bytes, read back for a fixed key (the one the seeds
 * were written for) from a private temporary directory.
 * Checks: the result is one of the documented codes; an accepted record has its value in
 * [0, 4096] and finite measurements; a refusal's message is one line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tune/tune_store.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_dir[256], g_path[512];
static const tune_key k_key = {"paged-decode-splits", "cpu", "b4.c4096.d128.q32.kv8.bs16", "f32"};

static void cleanup(void) {
    unlink(g_path);
    rmdir(g_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    struct stat sb;
    snprintf(g_dir, sizeof g_dir, "%s/mlxcel-fuzz-tune-XXXXXX", stat("/dev/shm", &sb) ? "/tmp" : "/dev/shm");
    if (!mkdtemp(g_dir)) {
        perror("fuzz_tune_record: mkdtemp");
        abort();
    }
    char name[128];
    tune_key_filename(&k_key, name, sizeof name);
    snprintf(g_path, sizeof g_path, "%s/%s", g_dir, name);
    atexit(cleanup);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *f = fopen(g_path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f)) {
        perror("fuzz_tune_record: write");
        abort();
    }
    tune_record r;
    mx_error err = {{0}};
    int rc = tune_store_read(g_dir, &k_key, &r, &err);
    if (rc == TUNE_READ_OK) {
        if (r.value < 0 || r.value > 4096 || !isfinite(r.best_us) || !isfinite(r.spread_us) ||
            !isfinite(r.default_us) || !isfinite(r.speedup))
            __builtin_trap();
    } else if (rc == TUNE_READ_IGNORED || rc == -1) {
        if (!memchr(err.msg, '\0', sizeof err.msg) || strchr(err.msg, '\n')) __builtin_trap(); /* one line */
    } else if (rc != TUNE_READ_MISSING) {
        __builtin_trap();
    }
    return 0;
}
