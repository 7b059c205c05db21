/* The CUDA autotune logic that needs no GPU: the built-in split count, capacity -> bucket,
 * the candidate lists and the Llama-3.1-8B matrix, the precedence of cu_decode_splits
 * (MLXCEL_PAGED_DECODE_SPLITS > MLXCEL_SDPA_DETERMINISTIC > cache > default), the quantized
 * knobs' candidates (the kernels' values) and hooks (with the real kernels' rules in a CUDA
 * build), and `mlxcel tune --device cuda` without a GPU. */
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

#include "backend/cuda/cuda_qknobs.h"
#include "base/env.h"
#include "tune/tune_ops.h"
#include "tune/tune_policy.h"
#include "tune/tune_runner.h"
#include "tune/tune_store.h"
#include "tune_test_util.h"
#ifdef MLXCEL_HAVE_CUDA
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_tune_qmat.h"
#endif

static int setup(void **st) {
    (void)st;
    return tt_setup("/tmp/mlxcel_tune_cuda_XXXXXX", "error");
}

static tune_device gpu(void) { return tt_cuda_dev("Test H200"); }

static tune_geom llama8b(void) { return tune_geom_defaults(); }

/* ==== Built-in count, capacity, candidates ==== */
static void test_default_splits(void **st) {
    (void)st;
    /* 2 CTAs per SM: B x 8 kv heads on 132 SMs -> ceil(264 / (8 B)) */
    assert_int_equal(tune_cuda_default_splits(1, 8, 16384, 132), 33);
    assert_int_equal(tune_cuda_default_splits(2, 8, 16384, 132), 17);
    assert_int_equal(tune_cuda_default_splits(8, 8, 16384, 132), 5);
    assert_int_equal(tune_cuda_default_splits(64, 8, 16384, 132), 1);
    assert_int_equal(tune_cuda_default_splits(16, 8, 1024, 132), 3);
    assert_int_equal(tune_cuda_default_splits(32, 8, 1024, 132), 1); /* 256 pairs >= 132 SMs */
    assert_int_equal(tune_cuda_default_splits(17, 8, 1024, 132), 1);
    /* capped at one 16-token chunk per warp (4 warps): 1024 tokens = 64 chunks -> 16 */
    assert_int_equal(tune_cuda_default_splits(1, 8, 1024, 132), 16);
    assert_int_equal(tune_cuda_default_splits(1, 1, 16, 132), 1);
    /* and at CUDA_ATTN_MAX_SPLITS */
    assert_int_equal(tune_cuda_default_splits(1, 1, 1 << 20, 132), 128);
    /* unknown SM count: an H100/H200's 132 */
    assert_int_equal(tune_cuda_default_splits(1, 8, 16384, 0), 33);
    assert_int_equal(tune_cuda_default_splits(1, 8, 16384, 66), 17);
}

static void test_capacity_buckets(void **st) {
    (void)st;
    /* the page-table stride grows in powers of two of blocks */
    assert_int_equal(tune_cuda_capacity_tokens(1024, 16), 1024);
    assert_int_equal(tune_cuda_capacity_tokens(1025, 16), 2048);
    assert_int_equal(tune_cuda_capacity_tokens(16416, 16), 32768);
    assert_int_equal(tune_cuda_capacity_tokens(100, 32), 128);
    /* bench at 16384 prompt + 32 generated tokens: capacity 32768 keys the 16384 bucket */
    const int c = tune_cuda_context_of_capacity(32768);
    assert_int_equal(c, 24576);
    assert_int_equal(tune_bucket_context(c), 16384);
    /* each matrix context is found again from the capacity a step of that length has */
    const int ctx[] = {1024, 4096, 16384};
    for (int i = 0; i < 3; i++) {
        const int cap = tune_cuda_capacity_tokens(ctx[i], 16);
        assert_int_equal(tune_bucket_context(tune_cuda_context_of_capacity(cap)), ctx[i]);
        /* ... and one token more (the stride doubles) still lands there */
        const int cap2 = tune_cuda_capacity_tokens(ctx[i] + 1, 16);
        assert_int_equal(cap2, 2 * cap);
        assert_int_equal(tune_bucket_context(tune_cuda_context_of_capacity(cap2)), ctx[i]);
    }
    assert_int_equal(tune_cuda_max_splits(1024), 16);
    assert_int_equal(tune_cuda_max_splits(4096), 64);
    assert_int_equal(tune_cuda_max_splits(16384), 128);
    assert_int_equal(tune_cuda_max_splits(32), 1);
}

/* The dry-run matrix for Llama-3.1-8B (head_dim 128, 32 q heads, 8 kv heads, block 16). */
static void test_llama8b_matrix(void **st) {
    (void)st;
    const tune_device d = gpu();
    const tune_geom g = llama8b();
    const int batches[] = {1, 2, 4, 8}, contexts[] = {1024, 4096, 16384};
    tune_point pts[32];
    int n = 0;
    mx_error err;
    assert_int_equal(tune_matrix_build(TUNE_OP_PAGED_DECODE_SPLITS, &d, &g, batches, 4, contexts,
                                       3, pts, 32, &n, &err), 0);
    assert_int_equal(n, 12);
    for (int i = 0; i < n; i++) {
        const tune_point *p = &pts[i];
        assert_int_equal(p->batch, batches[i / 3]);
        assert_int_equal(p->context, contexts[i % 3]);
        char want[128];
        snprintf(want, sizeof want, "b%d.c%d.d128.q32.kv8.bs16", p->batch, p->context);
        assert_string_equal(p->bucket, want);
        assert_int_equal(p->default_value,
                         tune_cuda_default_splits(p->batch, 8, p->context, 132));
        /* sorted, unique, within [1, min(128, context / 64)] except the default, which is
         * in the list; every power of two up to that bound is */
        bool has_def = false;
        int pow2 = 0;
        for (int j = 0; j < p->n_cand; j++) {
            const int v = p->cand[j];
            if (j) assert_true(v > p->cand[j - 1]);
            has_def |= v == p->default_value;
            if ((v & (v - 1)) == 0) pow2++;
            assert_true(v >= 1 && v <= 128);
            if (v != p->default_value) assert_true(v <= p->context / 64);
        }
        assert_true(has_def);
        int want_pow2 = 0;
        for (int v = 1; v <= tune_cuda_max_splits(p->context); v *= 2) want_pow2++;
        assert_int_equal(pow2, want_pow2);
    }
    /* b1.c1024: 1,2,4,8,16 (16 is also the default); b8.c16384: 1..128 plus the default 5 */
    assert_int_equal(pts[0].n_cand, 5);
    assert_int_equal(pts[0].default_value, 16);
    assert_int_equal(pts[11].n_cand, 9);
    assert_int_equal(pts[11].default_value, 5);
    assert_int_equal(pts[11].cand[3], 5);
    /* shapes the split-K kernel does not take are refused with the reason */
    tune_geom bad = g;
    bad.head_dim = 256;
    assert_int_equal(tune_matrix_build(TUNE_OP_PAGED_DECODE_SPLITS, &d, &bad, batches, 4,
                                       contexts, 3, pts, 32, &n, &err), -1);
    assert_non_null(strstr(err.msg, "head_dim 64 or 128"));
}

/* ==== Precedence of the CUDA decode split count ==== */
static void plant_split(const tune_device *d, int batch, int context, int value) {
    const tune_geom g = llama8b();
    tt_plant(TUNE_OP_PAGED_DECODE_SPLITS, d, &g, batch, context, value, NULL);
}

static int cuda_splits(int B, int cap, const tune_device *d, tune_source *s) {
    return tune_cuda_paged_decode_splits(B, 32, 8, 128, 16, cap, d, s);
}

static void test_split_precedence(void **st) {
    (void)st;
    const tune_device d = gpu();
    tune_source s;
    /* unset: the built-in count, and no file access even with a record on disk */
    plant_split(&d, 8, 16384, 16);
    long before = tune_store_fs_calls();
    assert_int_equal(cuda_splits(8, 32768, &d, &s), tune_cuda_default_splits(8, 8, 32768, 132));
    assert_int_equal(s, TUNE_SRC_DEFAULT);
    assert_int_equal(tune_store_fs_calls(), before);
    /* cache: the winner of the bucket the capacity maps to (32768 -> 24576 -> c16384) */
    set_env("MLXCEL_AUTOTUNE", "cache");
    apply_env();
    assert_int_equal(cuda_splits(8, 32768, &d, &s), 16);
    assert_int_equal(s, TUNE_SRC_CACHE);
    assert_int_equal(cuda_splits(8, 16384, &d, &s), 16); /* same bucket */
    /* memoised: the same answer again without a file access (graph replay stays valid) */
    before = tune_store_fs_calls();
    for (int i = 0; i < 3; i++) assert_int_equal(cuda_splits(8, 32768, &d, &s), 16);
    assert_int_equal(tune_store_fs_calls(), before);
    /* another batch bucket has no record: default */
    assert_int_equal(cuda_splits(1, 32768, &d, &s), tune_cuda_default_splits(1, 8, 32768, 132));
    assert_int_equal(s, TUNE_SRC_DEFAULT);
    /* MLXCEL_SDPA_DETERMINISTIC=1 keeps its fixed count over the cache */
    set_env("MLXCEL_SDPA_DETERMINISTIC", "1");
    apply_env();
    assert_int_equal(cuda_splits(8, 32768, &d, &s), TUNE_CUDA_DET_SPLITS);
    assert_int_equal(s, TUNE_SRC_DEFAULT);
    /* MLXCEL_PAGED_DECODE_SPLITS wins over both, clamped to the kernel's limit */
    set_env("MLXCEL_PAGED_DECODE_SPLITS", "3");
    apply_env();
    assert_int_equal(cuda_splits(8, 32768, &d, &s), 3);
    assert_int_equal(s, TUNE_SRC_OVERRIDE);
    set_env("MLXCEL_PAGED_DECODE_SPLITS", "500");
    apply_env();
    assert_int_equal(cuda_splits(8, 32768, &d, &s), 128);
    set_env("MLXCEL_PAGED_DECODE_SPLITS", NULL);
    set_env("MLXCEL_SDPA_DETERMINISTIC", NULL);
    /* a stored 0 means the built-in policy; a stored 300 is clamped */
    plant_split(&d, 2, 4096, 0);
    plant_split(&d, 4, 4096, 300);
    apply_env();
    assert_int_equal(cuda_splits(2, 4096, &d, &s), tune_cuda_default_splits(2, 8, 4096, 132));
    assert_int_equal(cuda_splits(4, 4096, &d, &s), 128);
    /* a record that kept the default means the built-in policy for every shape of its
     * bucket: capacity 2048 (1025..2048 tokens) maps to c1024, where tuning kept 16, but the
     * built-in count at capacity 2048 is 32 */
    plant_split(&d, 1, 1024, tune_cuda_default_splits(1, 8, 1024, 132));
    apply_env();
    assert_int_equal(cuda_splits(1, 2048, &d, &s), 32);
    assert_int_equal(s, TUNE_SRC_CACHE);
    assert_int_equal(cuda_splits(1, 1024, &d, &s), 16);
    /* another device (other memory size) never sees these records */
    tune_device other = d;
    other.mem_bytes = 80ull << 30;
    tune_device_make_id(&other);
    assert_int_equal(cuda_splits(8, 32768, &other, &s), tune_cuda_default_splits(8, 8, 32768, 132));
    assert_int_equal(s, TUNE_SRC_DEFAULT);
}

/* ==== Quantized knobs: candidates, env > cache > the kernel's default ==== */
static const int k_mr[CUDA_QMV_MULTIROW_COUNT] = CUDA_QMV_MULTIROW_VALUES;
static const int k_tiles[CUDA_QMM_TILE_COUNT] = CUDA_QMM_TILE_VALUES;

/* qmv: auto + the kernel's windows up to the first >= the rows; qmm: auto + its slabs up to
 * the first >= N. */
static void test_qmat_candidates(void **st) {
    (void)st;
    const tune_device d = gpu();
    tune_geom g = llama8b();
    const int batches[] = {1, 2, 3, 4, 8}, contexts[] = {1024, 4096, 16384};
    tune_point pts[16];
    int n = 0;
    mx_error err;
    assert_int_equal(tune_matrix_build(TUNE_OP_QMV_MULTIROW, &d, &g, batches, 5, contexts, 3, pts,
                                       16, &n, &err), 0);
    assert_int_equal(n, 4); /* 3 and 4 share the m4 bucket; no context axis */
    for (int i = 0; i < n; i++) {
        const tune_point *p = &pts[i];
        char want[64];
        snprintf(want, sizeof want, "m%d.n14336.k4096.q4g64", p->batch);
        assert_string_equal(p->bucket, want);
        assert_int_equal(p->default_value, 0);
        assert_int_equal(p->cand[0], 0);
        int m = 0; /* the kernel's windows <= the rows (powers of two: the last is == rows) */
        while (m < CUDA_QMV_MULTIROW_COUNT && k_mr[m] <= p->batch) m++;
        assert_int_equal(p->n_cand, 1 + m);
        for (int j = 0; j < m; j++) assert_int_equal(p->cand[1 + j], k_mr[j]);
        assert_int_equal(p->cand[p->n_cand - 1], p->batch);
    }
    assert_int_equal(tune_matrix_build(TUNE_OP_QMM_TILE, &d, &g, batches, 5, contexts, 3, pts, 16,
                                       &n, &err), 0);
    assert_int_equal(n, 3); /* rows = the prefill length (context axis); no batch axis */
    for (int i = 0; i < n; i++) {
        char want[64];
        snprintf(want, sizeof want, "m%d.n14336.k4096.q4g64", contexts[i]);
        assert_string_equal(pts[i].bucket, want);
        /* N = 14336: every slab up to 16384 (the first that covers the weight) */
        assert_int_equal(pts[i].n_cand, 1 + CUDA_QMM_TILE_COUNT);
        assert_int_equal(pts[i].cand[0], 0);
        for (int j = 0; j < CUDA_QMM_TILE_COUNT; j++) assert_int_equal(pts[i].cand[1 + j], k_tiles[j]);
    }
    /* a 4096-row weight: slabs beyond 4096 would repeat the one-slab launch */
    g.intermediate = 4096;
    tune_point p;
    assert_int_equal(tune_point_make(TUNE_OP_QMM_TILE, &d, &g, 1, 4096, &p, &err), 0);
    assert_int_equal(p.cand[p.n_cand - 1], 4096);
    for (int j = 1; j < p.n_cand; j++) assert_true(p.cand[j] > p.cand[j - 1]);
    int want = 1;
    for (int j = 0; j < CUDA_QMM_TILE_COUNT && k_tiles[j] <= 4096; j++) want++;
    assert_int_equal(p.n_cand, want);
    g.intermediate = 5000; /* not a slab size: the first slab above it ends the list */
    assert_int_equal(tune_point_make(TUNE_OP_QMM_TILE, &d, &g, 1, 4096, &p, &err), 0);
    assert_int_equal(p.cand[p.n_cand - 1], 8192);
    assert_int_equal(p.cand[p.n_cand - 2], 4096);
}

/* Rules of a kernel (the CUDA build checks the real ones below): qmv windows 1, 2, 4 (8 is
 * in the environment's list but this kernel cannot launch it); qmm slabs up to 8192. */
static int fake_default(tune_op op, const tune_qmat_shape *s) {
    return op == TUNE_OP_QMV_MULTIROW ? (s->rows >= 4 ? 4 : 2) : 2048;
}
static bool fake_valid(tune_op op, const tune_qmat_shape *s, int v) {
    (void)s;
    return op == TUNE_OP_QMV_MULTIROW ? v == 1 || v == 2 || v == 4 : v >= 256 && v <= 8192;
}

static void plant_qmat(const tune_device *d, tune_op op, int rows, int value, const char *bucket) {
    const tune_geom g = llama8b();
    tt_plant(op, d, &g, op == TUNE_OP_QMV_MULTIROW ? rows : 1, op == TUNE_OP_QMM_TILE ? rows : 0,
             value, bucket);
}

static void test_qmat_hooks(void **st) {
    (void)st;
    const tune_device d = gpu();
    const tune_knob_rules rules = {fake_default, fake_valid};
    const tune_qmat_shape qv = {4, 14336, 4096, 4, 64}, qm = {4096, 14336, 4096, 4, 64};
    tune_source s;
    /* off: the kernel's default, no file access even with records on disk */
    plant_qmat(&d, TUNE_OP_QMV_MULTIROW, 4, 2, "m4.n14336.k4096.q4g64");
    plant_qmat(&d, TUNE_OP_QMM_TILE, 4096, 16384, "m4096.n14336.k4096.q4g64");
    plant_qmat(&d, TUNE_OP_QMM_TILE, 1024, 512, "m1024.n14336.k4096.q4g64");
    long before = tune_store_fs_calls();
    assert_int_equal(tune_qmv_multirow(&qv, &d, &rules, &s), 4);
    assert_int_equal(s, TUNE_SRC_DEFAULT);
    assert_int_equal(tune_qmm_tile_m(&qm, &d, &rules, &s), 2048);
    assert_int_equal(s, TUNE_SRC_DEFAULT);
    assert_int_equal(tune_store_fs_calls(), before);
    /* cache: stored winners (keys carry the rows bucket, N, K, bits, group) */
    set_env("MLXCEL_AUTOTUNE", "cache");
    apply_env();
    assert_int_equal(tune_qmv_multirow(&qv, &d, &rules, &s), 2);
    assert_int_equal(s, TUNE_SRC_CACHE);
    const tune_qmat_shape qv3 = {3, 14336, 4096, 4, 64}; /* 3 rows: the m4 bucket */
    assert_int_equal(tune_qmv_multirow(&qv3, &d, &rules, &s), 2);
    const tune_qmat_shape qm1k = {1000, 14336, 4096, 4, 64}; /* 1000 rows: m1024 */
    assert_int_equal(tune_qmm_tile_m(&qm1k, &d, &rules, &s), 512);
    assert_int_equal(s, TUNE_SRC_CACHE);
    /* a stored value this kernel cannot launch: the default */
    assert_int_equal(tune_qmm_tile_m(&qm, &d, &rules, &s), 2048);
    assert_int_equal(s, TUNE_SRC_DEFAULT);
    /* memoised: no further file access */
    before = tune_store_fs_calls();
    for (int i = 0; i < 3; i++) assert_int_equal(tune_qmv_multirow(&qv, &d, &rules, &s), 2);
    assert_int_equal(tune_store_fs_calls(), before);
    /* other bits / another N: another key, no record */
    const tune_qmat_shape qv8 = {4, 14336, 4096, 8, 64}, qvn = {4, 4096, 4096, 4, 64};
    assert_int_equal(tune_qmv_multirow(&qv8, &d, &rules, &s), 4);
    assert_int_equal(s, TUNE_SRC_DEFAULT);
    assert_int_equal(tune_qmv_multirow(&qvn, &d, &rules, &s), 4);
    assert_int_equal(s, TUNE_SRC_DEFAULT);
    /* the override variables win when the kernel can launch them */
    set_env("MLXCEL_QMV_MULTIROW", "1");
    set_env("MLXCEL_QMM_TILE_M", "8192");
    apply_env();
    assert_int_equal(tune_qmv_multirow(&qv, &d, &rules, &s), 1);
    assert_int_equal(s, TUNE_SRC_OVERRIDE);
    assert_int_equal(tune_qmm_tile_m(&qm1k, &d, &rules, &s), 8192);
    assert_int_equal(s, TUNE_SRC_OVERRIDE);
    set_env("MLXCEL_QMV_MULTIROW", "8"); /* accepted by the environment, not this kernel */
    set_env("MLXCEL_QMM_TILE_M", "32");  /* not a slab size at all: ignored by env.c */
    apply_env();
    assert_int_equal(mx_env()->qmm_tile_m, 0);
    assert_int_equal(tune_qmv_multirow(&qv, &d, &rules, &s), 4);
    assert_int_equal(s, TUNE_SRC_DEFAULT);
    assert_int_equal(tune_qmm_tile_m(&qm1k, &d, &rules, &s), 512); /* the cache again */
    assert_int_equal(s, TUNE_SRC_CACHE);
    set_env("MLXCEL_QMV_MULTIROW", NULL);
    set_env("MLXCEL_QMM_TILE_M", NULL);
    set_env("MLXCEL_AUTOTUNE", NULL);
    apply_env();
#ifdef MLXCEL_HAVE_CUDA
    /* the connected provider: the kernels' own rules (cuda_ops.h) */
    const cuda_tune_qmat_provider *pv = cuda_tune_qmat();
    assert_non_null(pv);
    assert_non_null(pv->launch);
    assert_int_equal(pv->y_bf16, 0);
    /* The defaults as documented, written out (not recomputed by the functions that make
     * them): qmv-multirow is the first of 1, 2, 4, 8 that holds all the rows (docs/tuning.md);
     * qmm-tile the first slab of 256 .. 16384 rows covering N = 14336 within the slab budget
     * of docs/environment.md (MLXCEL_QMM_TILE_M): <= 16 MiB of bf16 for <= 256 rows, so with
     * K = 4096 at most 2048 rows, else <= 128 MiB: 16384 rows (the first to cover 14336). */
    static const int k_mr_want[CUDA_QMV_MAX_ROWS + 1] = {0, 1, 2, 4, 4, 8, 8, 8, 8};
    _Static_assert(CUDA_QMV_MAX_ROWS == 8, "k_mr_want lists rows 1..8");
    for (int rows = 1; rows <= CUDA_QMV_MAX_ROWS; rows++) {
        const tune_qmat_shape q = {rows, 14336, 4096, 4, 64};
        assert_int_equal(pv->rules.default_value(TUNE_OP_QMV_MULTIROW, &q), k_mr_want[rows]);
    }
    const int ms[] = {16, 256, 257, 4096, 16384};
    const int tile_want[] = {2048, 2048, 16384, 16384, 16384};
    for (int i = 0; i < 5; i++) {
        const tune_qmat_shape q = {ms[i], 14336, 4096, 4, 64};
        assert_int_equal(pv->rules.default_value(TUNE_OP_QMM_TILE, &q), tile_want[i]);
        /* N = 1000: the first slab covering it, 1024 rows (8 MiB), whatever the budget */
        const tune_qmat_shape q1k = {ms[i], 1000, 4096, 4, 64};
        assert_int_equal(pv->rules.default_value(TUNE_OP_QMM_TILE, &q1k), 1024);
        /* scratch for the largest slab covers every candidate */
        for (int j = 0; j < CUDA_QMM_TILE_COUNT; j++)
            assert_true(pv->scratch_bytes(TUNE_OP_QMM_TILE, &q) >=
                        cuda_qmm_scratch_bytes(ms[i], 14336, 4096, k_tiles[j]));
    }
    assert_true(pv->scratch_bytes(TUNE_OP_QMV_MULTIROW, &qv) >= cuda_qmv_workspace_bytes(4096));
    for (int j = 0; j < CUDA_QMV_MULTIROW_COUNT; j++)
        assert_true(pv->rules.valid(TUNE_OP_QMV_MULTIROW, &qv, k_mr[j]));
    for (int j = 0; j < CUDA_QMM_TILE_COUNT; j++)
        assert_true(pv->rules.valid(TUNE_OP_QMM_TILE, &qm, k_tiles[j]));
    assert_false(pv->rules.valid(TUNE_OP_QMV_MULTIROW, &qv, 3));
    assert_false(pv->rules.valid(TUNE_OP_QMM_TILE, &qm, 32));
    /* the dispatch hooks: off -> the kernel's default; the override wins */
    assert_int_equal(cuda_tune_qmm_tile_m(4096, 14336, 4096, 4, 64),
                     cuda_qmm_default_tile_m(4096, 14336, 4096, 4));
    assert_int_equal(cuda_tune_qmv_multirow(3, 14336, 4096, 4, 64),
                     cuda_qmv_default_multirow(3, 14336, 4096, 4));
    set_env("MLXCEL_QMM_TILE_M", "512");
    set_env("MLXCEL_QMV_MULTIROW", "2");
    apply_env();
    assert_int_equal(cuda_tune_qmm_tile_m(4096, 14336, 4096, 4, 64), 512);
    assert_int_equal(cuda_tune_qmv_multirow(3, 14336, 4096, 4, 64), 2);
    set_env("MLXCEL_QMM_TILE_M", NULL);
    set_env("MLXCEL_QMV_MULTIROW", NULL);
    apply_env();
#endif
}

/* ==== The CLI on a machine without a GPU ==== */
static int run(const char *args, char **out, char **errs) {
    const char *bin = getenv("MLXCEL_BIN");
    assert_non_null(bin);
    const int st = tt_run_tune(bin, args, out);
    *errs = tt_read_stderr();
    return st;
}

static void test_cli_cuda(void **st) {
    (void)st;
    char *out, *errs;
    /* dry run, Llama-3.1-8B geometry (the default), JSON: 12 split points, every default in
     * its candidate list, the matrix the library builds */
    assert_int_equal(run("--dry-run --json --device cuda --op paged-decode-splits", &out, &errs), 0);
    json_t *o = json_loads(out, 0, NULL);
    assert_non_null(o);
    json_t *m = json_object_get(o, "matrix");
    assert_int_equal(json_array_size(m), 12);
    json_t *last = json_array_get(m, 11);
    assert_string_equal(json_string_value(json_object_get(last, "bucket")),
                        "b8.c16384.d128.q32.kv8.bs16");
    assert_string_equal(json_string_value(json_object_get(last, "dtype")), "bf16");
    assert_int_equal(json_integer_value(json_object_get(last, "default")), 5);
    assert_int_equal(json_array_size(json_object_get(last, "candidates")), 9);
    json_decref(o);
    free(out), free(errs);
    /* -m: geometry from config.json (Qwen3-8B-like: 32 q heads, 8 kv heads, head_dim 128) */
    char dir[400], path[500], args[700];
    snprintf(dir, sizeof dir, "%s/model", g_root);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"model_type\": \"qwen3\", \"hidden_size\": 4096, \"num_attention_heads\": 32, "
          "\"num_key_value_heads\": 4, \"head_dim\": 64, \"intermediate_size\": 12288, "
          "\"num_hidden_layers\": 2, \"vocab_size\": 1000}", f);
    fclose(f);
    snprintf(args, sizeof args, "--dry-run --json --device cuda -m %s --batch-sizes 2 "
                                "--context-lengths 4096", dir);
    assert_int_equal(run(args, &out, &errs), 0);
    o = json_loads(out, 0, NULL);
    assert_non_null(o);
    m = json_object_get(o, "matrix");
    assert_int_equal(json_array_size(m), 3); /* one point per op */
    assert_string_equal(json_string_value(json_object_get(json_array_get(m, 0), "bucket")),
                        "b2.c4096.d64.q32.kv4.bs16");
    json_decref(o);
    free(out), free(errs);
    /* the quantized ops' dry-run matrix: rows buckets, the kernels' values as candidates */
    assert_int_equal(run("--dry-run --json --device cuda --op qmv-multirow --op qmm-tile "
                         "--batch-sizes 1,8 --context-lengths 4096", &out, &errs), 0);
    o = json_loads(out, 0, NULL);
    assert_non_null(o);
    m = json_object_get(o, "matrix");
    assert_int_equal(json_array_size(m), 3); /* qmv m1, m8; qmm m4096 */
    int n_qmv = 0, n_qmm = 0;
    for (size_t i = 0; i < json_array_size(m); i++) {
        json_t *pt = json_array_get(m, i);
        const char *op = json_string_value(json_object_get(pt, "op"));
        const char *bucket = json_string_value(json_object_get(pt, "bucket"));
        json_t *cand = json_object_get(pt, "candidates");
        assert_non_null(op);
        assert_non_null(bucket);
        if (!strcmp(op, "qmv-multirow")) {
            n_qmv++;
            /* m1: auto, 1; m8: auto, 1, 2, 4, 8 */
            assert_int_equal(json_array_size(cand), !strcmp(bucket, "m1.n14336.k4096.q4g64")
                                                        ? 2 : 1 + CUDA_QMV_MULTIROW_COUNT);
        } else {
            assert_string_equal(op, "qmm-tile");
            assert_string_equal(bucket, "m4096.n14336.k4096.q4g64");
            n_qmm++;
            assert_int_equal(json_array_size(cand), 1 + CUDA_QMM_TILE_COUNT);
            assert_int_equal(json_integer_value(json_array_get(cand, CUDA_QMM_TILE_COUNT)),
                             k_tiles[CUDA_QMM_TILE_COUNT - 1]);
        }
    }
    assert_int_equal(n_qmv, 2);
    assert_int_equal(n_qmm, 1);
    json_decref(o);
    free(out), free(errs);
    /* no GPU here: every op is refused, not pretended (a CPU-only build refuses --device
     * cuda itself), and nothing is written */
    static const char *const ops[] = {"paged-decode-splits", "qmv-multirow", "qmm-tile"};
    for (int i = 0; i < 3; i++) {
        char a[128];
        snprintf(a, sizeof a, "--device cuda --op %s", ops[i]);
        assert_int_equal(run(a, &out, &errs), 2);
        assert_non_null(strstr(errs, "CUDA tuner is not available"));
        if (tune_can_profile(TUNE_DEV_CUDA)) assert_null(strstr(errs, "no CUDA backend"));
        free(out), free(errs);
    }
    struct stat sb;
    assert_int_not_equal(stat(g_cache, &sb), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_splits),
        cmocka_unit_test(test_capacity_buckets),
        cmocka_unit_test(test_llama8b_matrix),
        cmocka_unit_test_setup_teardown(test_split_precedence, setup, teardown),
        cmocka_unit_test(test_qmat_candidates),
        cmocka_unit_test_setup_teardown(test_qmat_hooks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cli_cuda, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
