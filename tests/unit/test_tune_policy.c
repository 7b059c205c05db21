/* Autotune consumption: precedence, MLXCEL_AUTOTUNE modes (unset touches no file), tuning on
 * first use, and the matrix / bucket rules. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "base/env.h"
#include "tune/tune_ops.h"
#include "tune/tune_policy.h"
#include "tune/tune_runner.h"
#include "tune/tune_store.h"
#include "tune_test_util.h"

static int setup(void **st) {
    (void)st;
    return tt_setup("/tmp/mlxcel_tune_policy_XXXXXX", "warn");
}

static tune_device cpu_dev(void) {
    tune_device d;
    memset(&d, 0, sizeof d);
    d.kind = TUNE_DEV_CPU;
    snprintf(d.name, sizeof d.name, "Test CPU");
    d.threads = 4;
    d.mem_bytes = 16ull << 30;
    tune_device_make_id(&d);
    return d;
}

static tune_device cuda_dev(void) { return tt_cuda_dev("Test GPU"); }

static const tune_attn_shape k_attn = {3, 3000, 128, 32, 8, 16}; /* bucket b4.c4096 */

static tune_geom attn_geom(const tune_attn_shape *s) {
    tune_geom g = tune_geom_defaults();
    g.head_dim = s->head_dim, g.q_heads = s->q_heads, g.kv_heads = s->kv_heads;
    g.block_size = s->block_size;
    return g;
}

static void plant(tune_op op, const tune_device *dev, const tune_geom *g, int batch, int context,
                  int value) {
    tt_plant(op, dev, g, batch, context, value, NULL);
}

/* ==== MLXCEL_AUTOTUNE unset / 0: no file access at all ==== */
static void lookups_all(const tune_device *cpu, const tune_device *gpu, tune_source *src) {
    const tune_qmat_shape qs = {4, 14336, 4096, 4, 64};
    tune_get_paged_decode_splits(&k_attn, NULL, &src[0]);
    tune_get_paged_decode_splits(&k_attn, cpu, &src[1]);
    tune_get_paged_decode_splits(&k_attn, gpu, &src[2]);
    tune_get_qmv_multirow(&qs, gpu, &src[3]);
    tune_get_qmm_tile_m(&qs, gpu, &src[4]);
}

static void test_off_touches_no_file(void **st) {
    (void)st;
    const tune_device cpu = cpu_dev(), gpu = cuda_dev();
    tune_source src[5];
    /* the cache dir does not exist: an off-mode lookup must neither create nor read it */
    long before = tune_store_fs_calls();
    lookups_all(&cpu, &gpu, src);
    assert_int_equal(tune_store_fs_calls(), before);
    assert_false(exists(g_cache));
    for (int i = 0; i < 5; i++) assert_int_equal(src[i], TUNE_SRC_DEFAULT);

    /* a winner on disk is not read either, with the variable unset or 0 */
    const tune_geom g = attn_geom(&k_attn);
    plant(TUNE_OP_PAGED_DECODE_SPLITS, &cpu, &g, 3, 3000, 7);
    const char *modes[] = {NULL, "0", "off"};
    for (int m = 0; m < 3; m++) {
        set_env("MLXCEL_AUTOTUNE", modes[m]);
        apply_env();
        before = tune_store_fs_calls();
        tune_source s;
        const int v = tune_get_paged_decode_splits(&k_attn, &cpu, &s);
        assert_int_equal(s, TUNE_SRC_DEFAULT);
        assert_int_equal(v, tune_cpu_default_splits(3, 8, 3000 / 16 + 1, cpu.threads));
        lookups_all(&cpu, &gpu, src);
        assert_int_equal(tune_store_fs_calls(), before);
    }
    /* ... while in cache mode the same lookup does read it: the counter is live */
    set_env("MLXCEL_AUTOTUNE", "cache");
    apply_env();
    before = tune_store_fs_calls();
    tune_source s;
    assert_int_equal(tune_get_paged_decode_splits(&k_attn, &cpu, &s), 7);
    assert_int_equal(s, TUNE_SRC_CACHE);
    assert_true(tune_store_fs_calls() > before);
}

/* ==== override > cache > default ==== */
static void test_precedence(void **st) {
    (void)st;
    const tune_device cpu = cpu_dev(), gpu = cuda_dev();
    const tune_geom g = attn_geom(&k_attn);
    tune_source s;
    set_env("MLXCEL_AUTOTUNE", "cache");
    apply_env();
    /* nothing stored: default (3 x 8 CTAs on 132 SMs: ceil(264 / 24) = 11 splits) */
    assert_int_equal(tune_get_paged_decode_splits(&k_attn, &gpu, &s), 11);
    assert_int_equal(s, TUNE_SRC_DEFAULT);
    plant(TUNE_OP_PAGED_DECODE_SPLITS, &cpu, &g, 4, 4096, 7);
    plant(TUNE_OP_PAGED_DECODE_SPLITS, &gpu, &g, 4, 4096, 32);
    apply_env();
    assert_int_equal(tune_get_paged_decode_splits(&k_attn, &cpu, &s), 7);
    assert_int_equal(s, TUNE_SRC_CACHE);
    assert_int_equal(tune_get_paged_decode_splits(&k_attn, &gpu, &s), 32); /* per device */
    assert_int_equal(s, TUNE_SRC_CACHE);
    /* memoised: a second lookup reads no file */
    long before = tune_store_fs_calls();
    assert_int_equal(tune_get_paged_decode_splits(&k_attn, &cpu, &s), 7);
    assert_int_equal(tune_store_fs_calls(), before);
    /* the explicit variable wins over the cache, in every mode */
    set_env("MLXCEL_PAGED_DECODE_SPLITS", "3");
    const char *modes[] = {"cache", "1", NULL};
    for (int m = 0; m < 3; m++) {
        set_env("MLXCEL_AUTOTUNE", modes[m]);
        apply_env();
        assert_int_equal(tune_get_paged_decode_splits(&k_attn, &cpu, &s), 3);
        assert_int_equal(s, TUNE_SRC_OVERRIDE);
    }
    set_env("MLXCEL_PAGED_DECODE_SPLITS", NULL);

    /* the quantized-matmul knobs follow the same order */
    const tune_qmat_shape qs = {4, 14336, 4096, 4, 64};
    tune_geom qg = tune_geom_defaults();
    plant(TUNE_OP_QMV_MULTIROW, &gpu, &qg, 4, 0, 2);
    plant(TUNE_OP_QMM_TILE, &gpu, &qg, 1, 4, 16); /* qmm: M = rows = 4 -> context bucket 256 */
    set_env("MLXCEL_AUTOTUNE", "cache");
    apply_env();
    assert_int_equal(tune_get_qmv_multirow(&qs, &gpu, &s), 2);
    assert_int_equal(s, TUNE_SRC_CACHE);
    assert_int_equal(tune_get_qmm_tile_m(&qs, &gpu, &s), 16);
    assert_int_equal(s, TUNE_SRC_CACHE);
    set_env("MLXCEL_QMV_MULTIROW", "8");
    set_env("MLXCEL_QMM_TILE_M", "1024"); /* one of CUDA_QMM_TILE_VALUES */
    apply_env();
    assert_int_equal(tune_get_qmv_multirow(&qs, &gpu, &s), 8);
    assert_int_equal(s, TUNE_SRC_OVERRIDE);
    assert_int_equal(tune_get_qmm_tile_m(&qs, &gpu, &s), 1024);
    assert_int_equal(s, TUNE_SRC_OVERRIDE);
    set_env("MLXCEL_QMV_MULTIROW", NULL);
    set_env("MLXCEL_QMM_TILE_M", NULL);
    /* CPU has no qmv/qmm knob: default even with a record-less cache mode */
    apply_env();
    assert_int_equal(tune_get_qmv_multirow(&qs, &cpu, &s), 0);
    assert_int_equal(s, TUNE_SRC_DEFAULT);
}

/* ==== stale / corrupt records fall back to the default ==== */
static void test_stale_record_ignored(void **st) {
    (void)st;
    const tune_device cpu = cpu_dev();
    const tune_geom g = attn_geom(&k_attn);
    plant(TUNE_OP_PAGED_DECODE_SPLITS, &cpu, &g, 4, 4096, 7);
    /* rewrite the file as if an older mlxcel had written it */
    tune_point p;
    mx_error err;
    assert_int_equal(tune_point_make(TUNE_OP_PAGED_DECODE_SPLITS, &cpu, &g, 4, 4096, &p, &err), 0);
    tune_key k;
    tune_point_key(&p, &cpu, &k);
    char name[128], path[600];
    tune_key_filename(&k, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "{\"schema\": %d, \"mlxcel_version\": \"0.0.0\", \"key\": {\"op\": \"%s\", "
               "\"device\": \"%s\", \"bucket\": \"%s\", \"dtype\": \"%s\"}, \"value\": 7, "
               "\"default\": 1}", TUNE_SCHEMA_VERSION, k.op, k.device, k.bucket, k.dtype);
    fclose(f);
    set_env("MLXCEL_AUTOTUNE", "cache");
    apply_env();
    tune_source s;
    const int v = tune_get_paged_decode_splits(&k_attn, &cpu, &s);
    assert_int_equal(s, TUNE_SRC_DEFAULT);
    assert_int_not_equal(v, 7);
    f = fopen(path, "w");
    fputs("{not json", f);
    fclose(f);
    apply_env();
    tune_get_paged_decode_splits(&k_attn, &cpu, &s);
    assert_int_equal(s, TUNE_SRC_DEFAULT);
}

/* ==== MLXCEL_AUTOTUNE=1: unseen paged-decode-splits shapes are tuned on first use ==== */
static void test_tune_on_first_use(void **st) {
    (void)st;
    const tune_attn_shape small = {1, 1024, 16, 2, 1, 16}; /* cheap to profile */
    const tune_device gpu = cuda_dev();
    tune_source s;
    /* cache mode never tunes */
    set_env("MLXCEL_AUTOTUNE", "cache");
    apply_env();
    tune_get_paged_decode_splits(&small, NULL, &s);
    assert_int_equal(s, TUNE_SRC_DEFAULT);
    assert_false(exists(g_dir));

    set_env("MLXCEL_AUTOTUNE", "1");
    apply_env();
    /* head_dim 16 is no shape of the CUDA split-K kernel (and this machine has no GPU):
     * default (1024 tokens = 64 chunks, 4 per split at least -> 16), nothing written */
    assert_int_equal(tune_get_paged_decode_splits(&small, &gpu, &s), 16);
    assert_int_equal(s, TUNE_SRC_DEFAULT);
    assert_false(exists(g_dir));
    /* the host CPU is tuned now and the winner stored */
    const int v = tune_get_paged_decode_splits(&small, NULL, &s);
    assert_int_equal(s, TUNE_SRC_TUNED);
    assert_true(v >= 1 && v <= 4); /* 1024 tokens = 4 attention pieces: candidates 1, 2, 4 */
    assert_true(exists(g_dir));
    long before = tune_store_fs_calls();
    assert_int_equal(tune_get_paged_decode_splits(&small, NULL, &s), v);
    assert_int_equal(s, TUNE_SRC_TUNED);
    assert_int_equal(tune_store_fs_calls(), before); /* memoised */
    /* a new process (reset) finds it in the cache */
    set_env("MLXCEL_AUTOTUNE", "cache");
    apply_env();
    assert_int_equal(tune_get_paged_decode_splits(&small, NULL, &s), v);
    assert_int_equal(s, TUNE_SRC_CACHE);
}

/* ==== Buckets and the matrix ==== */
static void test_buckets(void **st) {
    (void)st;
    assert_int_equal(tune_bucket_batch(1), 1);
    assert_int_equal(tune_bucket_batch(3), 4);    /* log2 3 = 1.58 -> 2^2 */
    assert_int_equal(tune_bucket_batch(5), 4);    /* log2 5 = 2.32 -> 2^2 */
    assert_int_equal(tune_bucket_batch(6), 8);
    assert_int_equal(tune_bucket_batch(0), 1);
    assert_int_equal(tune_bucket_batch(5000), 1024);
    assert_int_equal(tune_bucket_context(1024), 1024);
    assert_int_equal(tune_bucket_context(2000), 1024); /* 4^5.48 */
    assert_int_equal(tune_bucket_context(2100), 4096); /* 4^5.52 */
    assert_int_equal(tune_bucket_context(16384), 16384);
    assert_int_equal(tune_bucket_context(1), 256);
    assert_int_equal(tune_bucket_context(1 << 22), 1 << 20);
    /* the CPU default: 2 tasks on 4 threads -> 2 splits; at most one piece per split */
    assert_int_equal(tune_cpu_default_splits(1, 2, 256, 4), 2);
    assert_int_equal(tune_cpu_default_splits(1, 1, 8, 16), 8);
    assert_int_equal(tune_cpu_default_splits(1, 3, 64, 16), 6);
    assert_int_equal(tune_cpu_default_splits(4, 8, 256, 16), 1);
    assert_int_equal(tune_cpu_default_splits(1, 1, 1, 16), 1);
    /* pieces of TUNE_CPU_ATTN_PIECE keys */
    assert_int_equal(tune_cpu_attn_pieces(1), 1);
    assert_int_equal(tune_cpu_attn_pieces(TUNE_CPU_ATTN_PIECE), 1);
    assert_int_equal(tune_cpu_attn_pieces(TUNE_CPU_ATTN_PIECE + 1), 2);
    assert_int_equal(tune_cpu_attn_pieces(16384), 16384 / TUNE_CPU_ATTN_PIECE);
}

static void test_dry_run_matrix(void **st) {
    (void)st;
    const tune_device cpu = cpu_dev(), gpu = cuda_dev();
    tune_geom g = tune_geom_defaults();
    g.head_dim = 64, g.q_heads = 8, g.kv_heads = 2, g.block_size = 32;
    const int batches[] = {1, 3, 8, 8}, contexts[] = {256, 1000};
    tune_point pts[32];
    int n;
    mx_error err;
    assert_int_equal(tune_matrix_build(TUNE_OP_PAGED_DECODE_SPLITS, &cpu, &g, batches, 4,
                                       contexts, 2, pts, 32, &n, &err), 0);
    assert_int_equal(n, 6); /* batches 1,4,8 x contexts 256,1024 */
    assert_int_equal(pts[0].batch, 1);
    assert_int_equal(pts[0].context, 256);
    assert_string_equal(pts[0].bucket, "b1.c256.d64.q8.kv2.bs32");
    /* 256 keys = 1 piece of 256: nothing to split (2 tasks on 4 threads would want 2) */
    assert_int_equal(pts[0].n_cand, 1);
    assert_int_equal(pts[0].cand[0], 1);
    assert_int_equal(pts[0].default_value, 1);
    assert_int_equal(pts[1].context, 1024);
    assert_int_equal(pts[1].n_cand, 3); /* 4 pieces: 1, 2, 4 (the block size plays no part) */
    assert_int_equal(pts[1].cand[2], 4);
    assert_int_equal(pts[1].default_value, 2);
    assert_int_equal(pts[2].batch, 4);
    assert_int_equal(pts[2].default_value, 1); /* 8 tasks fill 4 threads */
    assert_int_equal(pts[5].batch, 8);
    /* CUDA: the built-in count (2 CTAs on 132 SMs, capped at 256 / 64 = 4) and powers of two
     * up to one 16-token chunk per warp per split (4) */
    assert_int_equal(tune_matrix_build(TUNE_OP_PAGED_DECODE_SPLITS, &gpu, &g, batches, 4,
                                       contexts, 2, pts, 32, &n, &err), 0);
    assert_int_equal(n, 6);
    assert_int_equal(pts[0].default_value, 4);
    assert_int_equal(pts[0].n_cand, 3);
    assert_int_equal(pts[0].cand[0], 1);
    assert_int_equal(pts[0].cand[2], 4);
    /* qmv has no context axis, qmm no batch axis */
    assert_int_equal(tune_matrix_build(TUNE_OP_QMV_MULTIROW, &gpu, &g, batches, 4, contexts, 2,
                                       pts, 32, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_string_equal(pts[1].bucket, "m4.n14336.k4096.q4g64");
    assert_int_equal(tune_matrix_build(TUNE_OP_QMM_TILE, &gpu, &g, batches, 4, contexts, 2, pts,
                                       32, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_int_equal(pts[1].context, 1024);
    /* CPU has no qmm/qmv; bad geometry is rejected */
    assert_int_equal(tune_matrix_build(TUNE_OP_QMM_TILE, &cpu, &g, batches, 4, contexts, 2, pts,
                                       32, &n, &err), -1);
    g.kv_heads = 3;
    assert_int_equal(tune_matrix_build(TUNE_OP_PAGED_DECODE_SPLITS, &cpu, &g, batches, 4,
                                       contexts, 2, pts, 32, &n, &err), -1);
    assert_non_null(strstr(err.msg, "kv heads 3"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_off_touches_no_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_precedence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_record_ignored, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tune_on_first_use, setup, teardown),
        cmocka_unit_test(test_buckets),
        cmocka_unit_test(test_dry_run_matrix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
