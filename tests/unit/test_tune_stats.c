/* Autotune statistics, the improvement rule and the profiler driven by a synthetic clock. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "tune/tune_profile.h"
#include "tune/tune_stats.h"

/* ==== Statistics ==== */
static void test_median_mad(void **st) {
    (void)st;
    const double odd[] = {5, 1, 3};
    const double even[] = {4, 1, 3, 2};
    assert_true(tune_median(odd, 3) == 3.0);
    assert_true(tune_median(even, 4) == 2.5);
    assert_true(tune_median(odd, 0) == 0.0);
    /* |x - 3| = 2,1,0,1,97 -> MAD 1: one outlier does not move it */
    const double out[] = {1, 2, 3, 4, 100};
    assert_true(tune_median(out, 5) == 3.0);
    assert_true(tune_mad(out, 5) == 1.0);
    tune_stat s = tune_stat_of(out, 5);
    assert_true(s.n == 5 && s.median == 3.0);
    assert_true(fabs(s.spread - 1.4826) < 1e-12);
    /* input order is preserved (medians work on a copy) */
    assert_true(odd[0] == 5 && odd[1] == 1);
    const double flat[] = {7, 7, 7, 7};
    assert_true(tune_stat_of(flat, 4).spread == 0.0);
}

static void test_adaptive_reps(void **st) {
    (void)st;
    assert_int_equal(tune_adaptive_reps(0.001, 0.2, 5, 50), 50);  /* 200 wanted, capped */
    assert_int_equal(tune_adaptive_reps(0.010, 0.2, 5, 50), 20);
    assert_int_equal(tune_adaptive_reps(0.1, 0.2, 5, 50), 5);     /* 2 wanted, floor */
    assert_int_equal(tune_adaptive_reps(0.0, 0.2, 5, 50), 50);    /* unknown cost */
    assert_int_equal(tune_adaptive_reps(0.03, 0.2, 5, 50), 7);    /* ceil(6.67) */
    assert_int_equal(tune_adaptive_reps(0.01, 0.2, 9, 3), 9);     /* max below min */
}

static void test_improvement_rule(void **st) {
    (void)st;
    double gain, thr;
    tune_stat def = {100.0, 1.0, 20};
    /* 10% faster, tight: wins; threshold is the 2% floor */
    tune_stat fast = {90.0, 0.9, 20};
    assert_true(tune_improves(&def, &fast, 0.02, &gain, &thr));
    assert_true(fabs(gain - 0.10) < 1e-12);
    assert_true(fabs(thr - 0.02) < 1e-12);
    /* 1.5% faster: below the minimum improvement */
    tune_stat slight = {98.5, 0.1, 20};
    assert_false(tune_improves(&def, &slight, 0.02, NULL, NULL));
    assert_true(tune_improves(&def, &slight, 0.01, NULL, NULL));
    /* 10% faster but noisy: combined relative spread sqrt(0.1^2 + 0.1^2) = 0.1414 > 0.10 */
    tune_stat noisy_def = {100.0, 10.0, 20}, noisy = {90.0, 9.0, 20};
    assert_false(tune_improves(&noisy_def, &noisy, 0.02, &gain, &thr));
    assert_true(fabs(thr - sqrt(0.02)) < 1e-12);
    /* the same gain with half the noise passes: sqrt(0.05^2 * 2) = 0.0707 */
    tune_stat calm_def = {100.0, 5.0, 20}, calm = {90.0, 4.5, 20};
    assert_true(tune_improves(&calm_def, &calm, 0.02, NULL, NULL));
    /* slower never wins; empty or zero measurements never win */
    tune_stat slow = {120.0, 0.0, 20}, empty = {0.0, 0.0, 0};
    assert_false(tune_improves(&def, &slow, 0.0, NULL, NULL));
    assert_false(tune_improves(&def, &empty, 0.0, NULL, NULL));
    assert_false(tune_improves(&empty, &fast, 0.0, NULL, NULL));
}

/* ==== Profiler on a synthetic clock ==== */
typedef struct fake {
    double now;              /* seconds */
    double cost[8];          /* per candidate value (values are 0..7) */
    double noise[8];         /* relative noise amplitude per value */
    int bad[8];              /* output mismatches the default */
    uint64_t lcg;
    char log[4096];          /* "R<v>" per run, "S" per sync */
    int log_n;
    int runs[8], syncs, checks[8];
} fake;

static double fake_clock(void *ctx) { return ((fake *)ctx)->now; }

static int fake_run(void *ctx, int v, mx_error *err) {
    (void)err;
    fake *f = ctx;
    f->lcg = f->lcg * 6364136223846793005ull + 1442695040888963407ull;
    const double u = (double)(f->lcg >> 11) / 9007199254740992.0 * 2.0 - 1.0; /* [-1, 1) */
    f->now += f->cost[v] * (1.0 + f->noise[v] * u);
    f->runs[v]++;
    if (f->log_n < (int)sizeof f->log - 2) f->log[f->log_n++] = (char)('0' + v);
    return 0;
}

static int fake_sync(void *ctx, mx_error *err) {
    (void)err;
    fake *f = ctx;
    f->syncs++;
    if (f->log_n < (int)sizeof f->log - 2) f->log[f->log_n++] = 'S';
    return 0;
}

static int fake_check(void *ctx, int v, int is_default, double *rel, mx_error *err) {
    (void)err, (void)is_default;
    fake *f = ctx;
    f->checks[v]++;
    *rel = f->bad[v] ? 0.5 : 0.0;
    return f->bad[v] ? TUNE_CHECK_MISMATCH : TUNE_CHECK_OK;
}

static int profile(fake *f, int n, int def, tune_profile_opts *o, tune_profile_result *r) {
    tune_candidate c[8];
    for (int i = 0; i < n; i++) c[i] = (tune_candidate){i, f, fake_run, fake_sync, fake_check};
    o->clock = fake_clock;
    o->clock_ctx = f;
    mx_error err;
    return tune_profile(c, n, def, o, r, &err);
}

static void test_profile_selects_clear_winner(void **st) {
    (void)st;
    fake f = {.cost = {1e-3, 0.8e-3, 0.99e-3, 0.7e-3}, .noise = {0.01, 0.01, 0.01, 0.01},
              .lcg = 1};
    f.bad[3] = 1; /* the fastest one computes garbage */
    tune_profile_opts o = tune_profile_defaults();
    tune_profile_result r;
    assert_int_equal(profile(&f, 4, 0, &o, &r), 0);
    /* every candidate was checked once; the mismatching one is never selected */
    for (int i = 0; i < 4; i++) assert_int_equal(f.checks[i], 1);
    assert_false(r.c[3].checked);
    assert_false(r.c[3].improves);
    assert_true(r.c[3].stat.median < r.c[1].stat.median); /* it was still the fastest */
    assert_int_equal(r.selected_idx, 1);                  /* 20% faster, 1% noise */
    assert_false(r.c[2].improves);                        /* 1% faster: below 2% */
    assert_true(fabs(r.speedup - 1.25) < 0.03);
    assert_true(fabs(r.c[0].stat.median - 1e-3) < 2e-5);
}

static void test_profile_noise_keeps_default(void **st) {
    (void)st;
    /* 10% faster, but +-50% noise on both: the spread (~0.37 relative each) hides the gain */
    fake f = {.cost = {1e-3, 0.9e-3}, .noise = {0.5, 0.5}, .lcg = 7};
    tune_profile_opts o = tune_profile_defaults();
    tune_profile_result r;
    assert_int_equal(profile(&f, 2, 0, &o, &r), 0);
    assert_int_equal(r.selected_idx, 0);
    assert_true(r.c[1].threshold > 0.2);
    assert_true(r.speedup == 1.0);
    /* a higher minimum improvement also keeps a quiet 20% gain out */
    fake g = {.cost = {1e-3, 0.8e-3}, .noise = {0.01, 0.01}, .lcg = 3};
    o = tune_profile_defaults();
    o.min_improvement = 0.3;
    assert_int_equal(profile(&g, 2, 0, &o, &r), 0);
    assert_int_equal(r.selected_idx, 0);
}

static void test_profile_round_robin_and_reps(void **st) {
    (void)st;
    /* cheap (1 ms) vs dear (10 ms): 50 ms of samples -> 40 (capped) vs 5 */
    fake f = {.cost = {10e-3, 1e-3, 10e-3}, .noise = {0, 0, 0}, .lcg = 5};
    tune_profile_opts o = tune_profile_defaults();
    o.warmup = 2;
    o.warmup_ms = 0;
    o.min_reps = 5;
    o.max_reps = 40;
    o.sample_ms = 50;
    tune_profile_result r;
    assert_int_equal(profile(&f, 3, 0, &o, &r), 0);
    assert_int_equal(r.c[0].reps, 5);
    assert_int_equal(r.c[1].reps, 40);
    assert_int_equal(r.c[0].stat.n, 5);
    assert_int_equal(r.c[1].stat.n, 40);
    /* one device sync after every run */
    int runs = 0;
    for (int i = 0; i < 3; i++) runs += f.runs[i];
    assert_int_equal(f.syncs, runs);
    for (int i = 0; i + 1 < f.log_n; i += 2) assert_true(f.log[i] != 'S' && f.log[i + 1] == 'S');
    /* sampling: the first 5 rounds run all three candidates, each round a rotation */
    const int sample_runs = 5 + 40 + 5;
    const char *s = f.log + (runs - sample_runs) * 2; /* "vS" pairs */
    for (int round = 0; round < 5; round++) {
        int seen[3] = {0};
        for (int j = 0; j < 3; j++) seen[s[(round * 3 + j) * 2] - '0']++;
        assert_true(seen[0] == 1 && seen[1] == 1 && seen[2] == 1);
        assert_int_equal(s[round * 3 * 2] - '0', round % 3); /* starting candidate rotates */
    }
    /* warm-up by count: at least 2 warm-up runs + 1 check run before sampling */
    assert_int_equal(f.runs[0], 1 + 2 + 5);
    /* warm-up by time: 30 ms of warm-up on a 1 ms candidate takes 30 runs */
    fake g = {.cost = {1e-3, 1e-3}, .lcg = 9};
    o.warmup = 1;
    o.warmup_ms = 30;
    o.min_reps = o.max_reps = 5;
    assert_int_equal(profile(&g, 2, 0, &o, &r), 0);
    assert_int_equal(g.runs[0], 1 + 30 + 5);
}

static void test_profile_bad_input(void **st) {
    (void)st;
    fake f = {.cost = {1e-3}, .lcg = 1};
    tune_profile_opts o = tune_profile_defaults();
    tune_profile_result r;
    assert_int_equal(profile(&f, 0, 0, &o, &r), -1);
    assert_int_equal(profile(&f, 1, 3, &o, &r), -1);
    assert_int_equal(profile(&f, 1, 0, &o, &r), 0); /* the default alone is selected */
    assert_int_equal(r.selected_idx, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_median_mad),
        cmocka_unit_test(test_adaptive_reps),
        cmocka_unit_test(test_improvement_rule),
        cmocka_unit_test(test_profile_selects_clear_winner),
        cmocka_unit_test(test_profile_noise_keeps_default),
        cmocka_unit_test(test_profile_round_robin_and_reps),
        cmocka_unit_test(test_profile_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
