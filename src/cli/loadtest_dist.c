/* mlxcel loadtest: prompt and output length distributions.
 *
 * A request's lengths are a pure function of (--seed, the request's index over the run, which
 * length): every server run under the same seed sees the same sequence of lengths, whatever
 * the timing of its answers. Laws:
 *   N | fixed:N                      always N
 *   uniform:A,B                      integers A..B, each equally likely
 *   lognormal:MEAN,SIGMA[,MIN,MAX]   exp(mu + SIGMA z), z standard normal, mu = ln MEAN - SIGMA^2/2
 *                                    (so the unclamped mean is MEAN), rounded, then clamped to
 *                                    [MIN, MAX] (default 1 and 2^20): the mass beyond a clamp lands
 *                                    on it, so the realized mean is a little off MEAN (the report
 *                                    gives the realized figures)
 *   sharegpt                         the ShareGPT-like preset, see LT_SHAREGPT_* below */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/loadtest.h"

/* ShareGPT-like lengths. Means: the vLLM paper (Kwon et al., "Efficient Memory Management for
 * Large Language Model Serving with PagedAttention", SOSP 2023, section 6.1 / figure 11) gives
 * ShareGPT mean input 161.31 and mean output 337.99 tokens (its text: 8.4x and 5.8x Alpaca's
 * 19.31 and 58.45; the figures are quoted from the paper as remembered, the ratios check, the
 * paper itself could not be re-read where this was written). Clamps: vLLM's benchmark_serving.py (sample_sharegpt_requests) drops conversations
 * with fewer than 4 prompt or output tokens and prompts over 1024 tokens. Spread: the paper
 * shows long right tails but gives no figure; SIGMA 1.0 (prompt; p90 / median = 3.6) and 0.8
 * (output; p90 / median = 2.8) are this program's choice, not a measurement of the data set. */
#define LT_SHAREGPT_PROMPT "lognormal:161,1.0,4,1024"
#define LT_SHAREGPT_GEN "lognormal:338,0.8,4,1024"
#define LT_LEN_MAX (1 << 20)

/* ==== PRNG ==== */
uint64_t lt_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 random bits. */
static double unit(uint64_t *st) { return (double)(lt_splitmix64(st) >> 11) * 0x1p-53; }

/* ==== Parsing ==== */
/* Splits "a,b,c" into at most `max` numbers; returns how many, or -1 on a bad number. */
static int parse_nums(const char *s, double *v, int max) {
    int n = 0;
    const char *p = s;
    for (;;) {
        if (n == max) return -1;
        char *e;
        errno = 0;
        v[n] = strtod(p, &e);
        if (errno || e == p || !isfinite(v[n])) return -1;
        n++;
        if (*e == 0) return n;
        if (*e != ',') return -1;
        p = e + 1;
    }
}

static bool is_int(double x) { return x == floor(x); }

int lt_dist_parse(const char *s, bool gen, lt_dist *d, char *err, size_t errn) {
    memset(d, 0, sizeof *d);
    const char *what = gen ? "--gen-tokens-dist" : "--prompt-tokens-dist";
    if (!strcmp(s, "sharegpt")) s = gen ? LT_SHAREGPT_GEN : LT_SHAREGPT_PROMPT;
    const char *colon = strchr(s, ':');
    const size_t kl = colon ? (size_t)(colon - s) : 0;
    const char *args = colon ? colon + 1 : s;
    double v[4];
    const int n = parse_nums(args, v, 4);
    if (!colon || (kl == 5 && !strncmp(s, "fixed", 5))) {
        if (n != 1 || !is_int(v[0]) || v[0] < 1 || v[0] > LT_LEN_MAX) goto bad;
        d->kind = LT_DIST_FIXED;
        d->lo = d->hi = (int)v[0];
        d->mean = v[0];
        snprintf(d->spec, sizeof d->spec, "fixed:%d", d->lo);
    } else if (kl == 7 && !strncmp(s, "uniform", 7)) {
        if (n != 2 || !is_int(v[0]) || !is_int(v[1]) || v[0] < 1 || v[1] < v[0] || v[1] > LT_LEN_MAX) goto bad;
        d->kind = LT_DIST_UNIFORM;
        d->lo = (int)v[0];
        d->hi = (int)v[1];
        d->mean = (v[0] + v[1]) / 2;
        snprintf(d->spec, sizeof d->spec, "uniform:%d,%d", d->lo, d->hi);
    } else if (kl == 9 && !strncmp(s, "lognormal", 9)) {
        if (n != 2 && n != 4) goto bad;
        d->kind = LT_DIST_LOGNORMAL;
        d->mean = v[0];
        d->sigma = v[1];
        d->lo = n == 4 ? (int)v[2] : 1;
        d->hi = n == 4 ? (int)v[3] : LT_LEN_MAX;
        if (!(v[0] >= 1 && v[0] <= LT_LEN_MAX) || !(v[1] >= 0 && v[1] <= 4)) goto bad;
        if (n == 4 && (!is_int(v[2]) || !is_int(v[3]) || v[2] < 1 || v[3] < v[2] || v[3] > LT_LEN_MAX)) goto bad;
        snprintf(d->spec, sizeof d->spec, "lognormal:%g,%g,%d,%d", d->mean, d->sigma, d->lo, d->hi);
    } else {
        snprintf(err, errn, "%s: unknown law in '%s' (fixed:N, uniform:A,B, lognormal:MEAN,SIGMA[,MIN,MAX], sharegpt)",
                 what, s);
        return -1;
    }
    return 0;
bad:
    snprintf(err, errn,
             "%s: invalid '%s' (fixed:N; uniform:A,B with 1 <= A <= B; lognormal:MEAN,SIGMA[,MIN,MAX] with MEAN >= 1, "
             "0 <= SIGMA <= 4, integer clamps 1 <= MIN <= MAX; lengths at most %d)",
             what, s, LT_LEN_MAX);
    return -1;
}

/* ==== Drawing ==== */
int lt_dist_draw(const lt_dist *d, uint64_t seed, uint64_t idx, bool gen) {
    if (d->kind == LT_DIST_FIXED) return d->lo;
    /* Its own stream per (seed, request, which length): independent of the prompt ids' PRNG
     * (keyed by seed ^ idx * another constant) and of the other length. */
    uint64_t st = seed ^ (idx * 0x9fb21c651e98df25ull) ^ (gen ? 0x5851f42d4c957f2dull : 0x2545f4914f6cdd1dull);
    lt_splitmix64(&st);
    if (d->kind == LT_DIST_UNIFORM) {
        const uint64_t span = (uint64_t)(d->hi - d->lo) + 1;
        return d->lo + (int)(unit(&st) * (double)span); /* 53-bit unit: no modulo bias to speak of */
    }
    /* Box-Muller: u1 in (0, 1] keeps the logarithm finite. */
    const double u1 = 1.0 - unit(&st), u2 = unit(&st);
    const double z = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
    const double mu = log(d->mean) - 0.5 * d->sigma * d->sigma;
    const double x = exp(mu + d->sigma * z);
    if (!(x < (double)d->hi)) return d->hi; /* also +inf */
    const long r = lround(x);
    return r < d->lo ? d->lo : r > d->hi ? d->hi : (int)r;
}
