#include "tune/tune_stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ==== Order statistics ==== */
static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of a scratch copy; the caller's samples keep their (round-robin) order for reports. */
static double median_inplace(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

double tune_median(const double *x, int n) {
    if (n <= 0) return 0.0;
    double stackbuf[256];
    double *tmp = n <= 256 ? stackbuf : malloc((size_t)n * sizeof *tmp);
    if (!tmp) return 0.0; /* only reachable when out of memory; a 0 median never wins */
    memcpy(tmp, x, (size_t)n * sizeof *tmp);
    const double m = median_inplace(tmp, n);
    if (tmp != stackbuf) free(tmp);
    return m;
}

double tune_mad(const double *x, int n) {
    if (n <= 0) return 0.0;
    const double m = tune_median(x, n);
    double stackbuf[256];
    double *dev = n <= 256 ? stackbuf : malloc((size_t)n * sizeof *dev);
    if (!dev) return 0.0;
    for (int i = 0; i < n; i++) dev[i] = fabs(x[i] - m);
    const double mad = median_inplace(dev, n);
    if (dev != stackbuf) free(dev);
    return mad;
}

tune_stat tune_stat_of(const double *x, int n) {
    tune_stat s = {0.0, 0.0, n > 0 ? n : 0};
    if (n <= 0) return s;
    s.median = tune_median(x, n);
    s.spread = TUNE_MAD_TO_SIGMA * tune_mad(x, n);
    return s;
}

/* ==== Sample count ==== */
int tune_adaptive_reps(double cost_s, double sample_s, int min_reps, int max_reps) {
    if (min_reps < 1) min_reps = 1;
    if (max_reps < min_reps) max_reps = min_reps;
    if (!(cost_s > 0.0)) return max_reps;
    /* The epsilon keeps an exact ratio (50 ms / 10 ms) from rounding up to one more sample. */
    const double want = ceil(sample_s / cost_s - 1e-9);
    if (want <= (double)min_reps) return min_reps;
    if (want >= (double)max_reps) return max_reps;
    return (int)want;
}

/* ==== Improvement rule ==== */
double tune_combined_rel_spread(const tune_stat *def, const tune_stat *cand) {
    if (!(def->median > 0.0) || !(cand->median > 0.0)) return INFINITY;
    const double rd = def->spread / def->median, rc = cand->spread / cand->median;
    return sqrt(rd * rd + rc * rc);
}

bool tune_improves(const tune_stat *def, const tune_stat *cand, double min_improvement,
                   double *gain_out, double *threshold_out) {
    double gain = 0.0, thr = INFINITY;
    if (def->median > 0.0 && cand->median > 0.0 && def->n > 0 && cand->n > 0) {
        gain = (def->median - cand->median) / def->median;
        thr = tune_combined_rel_spread(def, cand);
        if (thr < min_improvement) thr = min_improvement;
    }
    if (gain_out) *gain_out = gain;
    if (threshold_out) *threshold_out = thr;
    return gain > thr;
}
