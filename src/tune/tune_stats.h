/* Robust timing statistics for the autotuner: median score, MAD-based spread, the adaptive
 * sample count and the rule that decides whether a candidate may replace the default. */
#ifndef MLXCEL_TUNE_STATS_H
#define MLXCEL_TUNE_STATS_H

#include <stdbool.h>

/* 1.4826 x MAD estimates the standard deviation of normally distributed samples while a few
 * outliers (a preempted thread, a page fault) barely move it. */
#define TUNE_MAD_TO_SIGMA 1.4826

typedef struct tune_stat {
    double median; /* seconds */
    double spread; /* 1.4826 x median absolute deviation, seconds */
    int n;         /* samples */
} tune_stat;

/* Median of x[0..n) (x is not modified); 0 when n == 0. */
double tune_median(const double *x, int n);
/* Median absolute deviation around the median; 0 when n == 0. */
double tune_mad(const double *x, int n);
/* median + spread of x[0..n). */
tune_stat tune_stat_of(const double *x, int n);

/* Samples to take for a candidate whose single run costs cost_s seconds: enough to fill
 * sample_s, at least min_reps and at most max_reps (cost_s <= 0 gives max_reps). */
int tune_adaptive_reps(double cost_s, double sample_s, int min_reps, int max_reps);

/* Relative spread of the two measurements combined: sqrt((sd/md)^2 + (sc/mc)^2). */
double tune_combined_rel_spread(const tune_stat *def, const tune_stat *cand);

/* The improvement rule: a candidate replaces the default only when its relative gain
 * (def.median - cand.median) / def.median exceeds max(min_improvement, combined relative
 * spread). gain_out / threshold_out (may be NULL) receive both numbers for reports. */
bool tune_improves(const tune_stat *def, const tune_stat *cand, double min_improvement,
                   double *gain_out, double *threshold_out);

#endif
