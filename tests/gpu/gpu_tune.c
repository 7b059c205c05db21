/* The CUDA tuner on the real device: small paged-decode-splits, qmv-multirow and qmm-tile
 * points profiled end to end (synthetic KV / MLX-affine weights, event timing, every
 * candidate's output checked against the default's), and the record they make. */
#include <math.h>

#include "gpu_test.h"
#include "tune/tune_ops.h"
#include "tune/tune_runner.h"

static void point_check(const char *label, tune_op op, const tune_geom *gp, int batch,
                        int context) {
    tune_device dev;
    mx_error err;
    if (tune_device_cuda(&dev, &err)) {
        printf("FAIL tune %s: %s\n", label, err.msg);
        g_failures++, g_checks++;
        return;
    }
    const tune_geom g = *gp;
    tune_point p;
    if (tune_point_make(op, &dev, &g, batch, context, &p, &err)) {
        printf("FAIL tune %s: %s\n", label, err.msg);
        g_failures++, g_checks++;
        return;
    }
    tune_profile_opts o = tune_profile_defaults();
    o.warmup = 2, o.warmup_ms = 2.0, o.min_reps = 3, o.max_reps = 5, o.sample_ms = 5.0;
    tune_profile_result res;
    tune_record rec;
    if (tune_run_point(&p, &dev, &g, &o, &res, &rec, &err)) {
        printf("FAIL tune %s: %s\n", label, err.msg);
        g_failures++, g_checks++;
        return;
    }
    /* every candidate must reproduce the default's output (1e-3 relative) */
    double worst = 0.0;
    long unchecked = 0, bad_time = 0;
    for (int i = 0; i < res.n; i++) {
        if (!res.c[i].checked) unchecked++;
        if (res.c[i].check_err > worst || isnan(res.c[i].check_err)) worst = res.c[i].check_err;
        if (!(res.c[i].stat.median > 0.0) || res.c[i].stat.median > 0.1) bad_time++;
        printf("  %s: %s %5d  %8.2f us +- %.2f  (%d reps, check %.2e)\n", label,
               tune_op_name(op), res.c[i].value,
               res.c[i].stat.median * 1e6, res.c[i].stat.spread * 1e6, res.c[i].stat.n,
               res.c[i].check_err);
    }
    char what[160];
    snprintf(what, sizeof what, "tune %s: %d candidates match the default (%d)", label, res.n,
             p.default_value);
    gt_report(what, worst, 1e-3, unchecked);
    snprintf(what, sizeof what, "tune %s: per-launch medians in (0, 100 ms]", label);
    gt_report(what, (double)bad_time, 0.5, 0);
    snprintf(what, sizeof what, "tune %s: record = selected (%d), default %d, speedup %.3f", label,
             rec.value, rec.default_value, rec.speedup);
    gt_report(what, rec.value == res.c[res.selected_idx].value && rec.speedup >= 1.0 ? 0.0 : 1.0,
              0.5, 0);
}

static void tune_point_check(const char *label, int batch, int context, int head_dim, int q_heads,
                             int kv_heads, int block) {
    tune_geom g = tune_geom_defaults();
    g.head_dim = head_dim, g.q_heads = q_heads, g.kv_heads = kv_heads, g.block_size = block;
    point_check(label, TUNE_OP_PAGED_DECODE_SPLITS, &g, batch, context);
}

/* weight [N, K], bits / group; rows = batch (qmv) or context (qmm, bucketed: >= 256) */
static void qmat_point_check(const char *label, tune_op op, int rows, int N, int K, int bits,
                             int group) {
    tune_geom g = tune_geom_defaults();
    g.intermediate = N, g.hidden = K, g.q_bits = bits, g.q_group = group;
    point_check(label, op, &g, op == TUNE_OP_QMV_MULTIROW ? rows : 1,
                op == TUNE_OP_QMM_TILE ? rows : 0);
}

int gt_run_tune_tests(void) {
    tune_point_check("b2.c1024 D128 G4", 2, 1024, 128, 32, 8, 16);
    tune_point_check("b1.c4096 D64 G4 block 32", 1, 4096, 64, 32, 8, 32);
    tune_point_check("b8.c256 D128 G8", 8, 256, 128, 64, 8, 16);
    /* windows 1, 2, 4, 8 on 8 rows; 3-bit codes straddle words */
    qmat_point_check("qmv m8 [2048 x 1024] q4g64", TUNE_OP_QMV_MULTIROW, 8, 2048, 1024, 4, 64);
    qmat_point_check("qmv m4 [1000 x 768] q3g32", TUNE_OP_QMV_MULTIROW, 4, 1000, 768, 3, 32);
    /* slabs 256 .. 4096 over 3000 rows: every slab count, a partial last slab */
    qmat_point_check("qmm m256 [3000 x 1024] q4g64", TUNE_OP_QMM_TILE, 256, 3000, 1024, 4, 64);
    return 0;
}
