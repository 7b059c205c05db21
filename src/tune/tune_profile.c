#include "tune/tune_profile.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"

tune_profile_opts tune_profile_defaults(void) {
    tune_profile_opts o = {0};
    o.warmup = 3;
    o.warmup_ms = 20.0;
    o.min_reps = 5;
    o.max_reps = 50;
    o.sample_ms = 200.0;
    o.min_improvement = 0.02;
    return o;
}

static double wall_clock(void *ctx) {
    (void)ctx;
    return mx_now();
}

/* One timed run: launch + device sync, so the sample covers the whole kernel. */
static int timed_run(const tune_candidate *c, double (*clk)(void *), void *cctx, double *dt,
                     mx_error *err) {
    const double t0 = clk(cctx);
    if (c->run(c->ctx, c->value, err)) return mx_wrap(err, "candidate %d", c->value);
    if (c->sync && c->sync(c->ctx, err)) return mx_wrap(err, "candidate %d (sync)", c->value);
    *dt = clk(cctx) - t0;
    return 0;
}

/* ==== Step 1: correctness against the default ==== */
static int check_all(const tune_candidate *c, int n, int def, tune_profile_result *res,
                     mx_error *err) {
    double dummy;
    if (!c[def].check) return mx_fail(err, "the default candidate has no output check");
    /* The default runs first so that its output becomes the reference. */
    if (timed_run(&c[def], wall_clock, NULL, &dummy, err)) return -1;
    double e0 = 0.0;
    if (c[def].check(c[def].ctx, c[def].value, 1, &e0, err) < 0)
        return mx_wrap(err, "default %d (keeping the reference)", c[def].value);
    res->c[def].checked = true;
    for (int i = 0; i < n; i++) {
        if (i == def) continue;
        if (!c[i].check) continue; /* unchecked: may be timed, never selected */
        if (timed_run(&c[i], wall_clock, NULL, &dummy, err)) return -1;
        double e = 0.0;
        const int rc = c[i].check(c[i].ctx, c[i].value, 0, &e, err);
        if (rc < 0) return mx_wrap(err, "candidate %d (check)", c[i].value);
        res->c[i].checked = rc == TUNE_CHECK_OK;
        res->c[i].check_err = e;
    }
    return 0;
}

/* ==== Step 2: warm-up by count and by time; estimates each candidate's cost ==== */
static int warm_up(const tune_candidate *c, int n, const tune_profile_opts *o,
                   double (*clk)(void *), tune_profile_result *res, mx_error *err) {
    /* Warm-up time bounds the loop; the cap only guards a clock that does not advance. */
    const int cap = (o->warmup > 2 ? o->warmup : 2) + 10000;
    double *t = malloc((size_t)(cap > 0 ? cap : 1) * sizeof *t);
    if (!t) return mx_fail(err, "out of memory (warm-up timings)");
    for (int i = 0; i < n; i++) {
        int k = 0;
        double spent = 0.0;
        while (k < cap && (k < o->warmup || spent * 1e3 < o->warmup_ms || k < 2)) {
            if (timed_run(&c[i], clk, o->clock_ctx, &t[k], err)) {
                free(t);
                return -1;
            }
            spent += t[k++];
        }
        /* The first warm-up run pays cold caches / lazy setup: estimate from the rest. */
        res->c[i].cost_s = tune_median(t + 1, k - 1);
        res->c[i].reps = tune_adaptive_reps(res->c[i].cost_s, o->sample_ms * 1e-3, o->min_reps,
                                            o->max_reps);
    }
    free(t);
    return 0;
}

/* ==== Step 3: interleaved samples ==== */
static int sample_round_robin(const tune_candidate *c, int n, const tune_profile_opts *o,
                              double (*clk)(void *), tune_profile_result *res, mx_error *err) {
    int rounds = 0;
    for (int i = 0; i < n; i++)
        if (res->c[i].reps > rounds) rounds = res->c[i].reps;
    double *samples = malloc((size_t)n * (size_t)rounds * sizeof *samples); /* [n, rounds] */
    if (!samples) return mx_fail(err, "out of memory (samples)");
    int taken[TUNE_MAX_CANDIDATES] = {0};
    for (int r = 0; r < rounds; r++) {
        for (int j = 0; j < n; j++) {
            const int i = (j + r) % n;
            if (taken[i] >= res->c[i].reps) continue;
            if (timed_run(&c[i], clk, o->clock_ctx, &samples[(size_t)i * rounds + taken[i]],
                          err)) {
                free(samples);
                return -1;
            }
            taken[i]++;
        }
    }
    for (int i = 0; i < n; i++) res->c[i].stat = tune_stat_of(samples + (size_t)i * rounds, taken[i]);
    free(samples);
    return 0;
}

/* ==== Driver ==== */
int tune_profile(const tune_candidate *c, int n, int default_idx, const tune_profile_opts *o,
                 tune_profile_result *res, mx_error *err) {
    memset(res, 0, sizeof *res);
    if (n < 1 || n > TUNE_MAX_CANDIDATES)
        return mx_fail(err, "%d candidates (expected 1..%d)", n, TUNE_MAX_CANDIDATES);
    if (default_idx < 0 || default_idx >= n)
        return mx_fail(err, "default index %d out of range [0, %d)", default_idx, n);
    for (int i = 0; i < n; i++)
        if (!c[i].run) return mx_fail(err, "candidate %d has no run callback", c[i].value);
    double (*clk)(void *) = o->clock ? o->clock : wall_clock;
    res->n = n;
    res->default_idx = default_idx;
    res->selected_idx = default_idx;
    res->speedup = 1.0;
    for (int i = 0; i < n; i++) res->c[i].value = c[i].value;

    if (check_all(c, n, default_idx, res, err)) return -1;
    if (warm_up(c, n, o, clk, res, err)) return -1;
    if (sample_round_robin(c, n, o, clk, res, err)) return -1;

    const tune_stat *def = &res->c[default_idx].stat;
    double best = def->median;
    for (int i = 0; i < n; i++) {
        tune_cand_result *r = &res->c[i];
        if (i == default_idx) continue;
        r->improves = r->checked && tune_improves(def, &r->stat, o->min_improvement, &r->gain,
                                                  &r->threshold);
        if (!r->checked) tune_improves(def, &r->stat, o->min_improvement, &r->gain, &r->threshold);
        if (r->improves && r->stat.median < best) {
            best = r->stat.median;
            res->selected_idx = i;
        }
    }
    const double sel = res->c[res->selected_idx].stat.median;
    res->speedup = sel > 0.0 ? def->median / sel : 1.0;
    return 0;
}
