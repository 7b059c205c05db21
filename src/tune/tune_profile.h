/* The interleaved profiler. An op hands it a set of candidates (one launch parameter each)
 * through run / sync / check callbacks, so the CPU kernels, the CUDA kernels and the unit tests
 * plug in the same way. */
#ifndef MLXCEL_TUNE_PROFILE_H
#define MLXCEL_TUNE_PROFILE_H

#include <stdbool.h>

#include "base/error.h"
#include "tune/tune_stats.h"

#define TUNE_MAX_CANDIDATES 16

/* check() results */
#define TUNE_CHECK_OK 0
#define TUNE_CHECK_MISMATCH 1

typedef struct tune_candidate {
    int value; /* the launch parameter this candidate stands for */
    void *ctx; /* op state: synthetic inputs, output buffers */
    /* Launches one run with `value` (may be asynchronous). 0 or -1 with err. */
    int (*run)(void *ctx, int value, mx_error *err);
    /* Waits until the last run finished (device sync); NULL when run() is synchronous. */
    int (*sync)(void *ctx, mx_error *err);
    /* Called after a synced run. For the default (is_default = 1) it keeps the output as the
     * reference and returns TUNE_CHECK_OK; otherwise compares the output with that reference:
     * TUNE_CHECK_OK, TUNE_CHECK_MISMATCH (rel_err tells how far), or -1 with err on failure.
     * A candidate without check() can never win. */
    int (*check)(void *ctx, int value, int is_default, double *rel_err, mx_error *err);
} tune_candidate;

typedef struct tune_profile_opts {
    int warmup;             /* warm-up runs per candidate, at least */
    double warmup_ms;       /* ... and at least this much warm-up time per candidate */
    int min_reps;           /* samples per candidate, at least (--reps) */
    int max_reps;           /* samples per candidate, at most (--max-reps) */
    double sample_ms;       /* sample budget per candidate: reps = sample_ms / run cost */
    double min_improvement; /* relative gain a candidate needs at least (0.02 = 2%) */
    /* Clock in seconds; NULL = monotonic wall clock (tests inject a synthetic one). */
    double (*clock)(void *clock_ctx);
    void *clock_ctx;
} tune_profile_opts;

/* Defaults: warmup 3 / 20 ms, reps 5..50, sample 200 ms, min improvement 0.02. */
tune_profile_opts tune_profile_defaults(void);

typedef struct tune_cand_result {
    int value;
    bool checked;     /* output matched the default's (the default itself: true) */
    double check_err; /* relative error reported by check() */
    double cost_s;    /* warm-up estimate of one run */
    int reps;         /* samples planned from the cost */
    tune_stat stat;   /* over the samples taken */
    double gain;      /* relative gain over the default */
    double threshold; /* what the gain had to exceed */
    bool improves;    /* passed the improvement rule */
} tune_cand_result;

typedef struct tune_profile_result {
    int n;
    int default_idx;
    int selected_idx;             /* default_idx unless a candidate passed the rule */
    double speedup;               /* default median / selected median */
    tune_cand_result c[TUNE_MAX_CANDIDATES];
} tune_profile_result;

/* Profiles n candidates (n <= TUNE_MAX_CANDIDATES), c[default_idx] being the built-in default:
 *   1. every candidate runs once and is checked against the default's output;
 *   2. warm-up by count and time, which also measures each candidate's cost;
 *   3. samples, adapted to each cost, taken round-robin (one run + sync per sample, the
 *      starting candidate rotating each round so no one always follows the same neighbour);
 *   4. score = median, spread = 1.4826 x MAD; the fastest checked candidate that beats the
 *      default by more than max(min_improvement, combined relative spread) is selected.
 * Returns 0, or -1 with err when a callback fails (a mismatch is not a failure). */
int tune_profile(const tune_candidate *c, int n, int default_idx, const tune_profile_opts *o,
                 tune_profile_result *res, mx_error *err);

#endif
