/* Sampler by distribution: a seeded sampler draws N tokens from a known logit vector, and the
 * counts must fit the exact target distribution of sampler.h's processing order, computed here
 * independently in double (bias -> penalties -> temperature -> top-k -> softmax -> top-p ->
 * min-p -> renormalise), by Pearson's chi-square goodness of fit:
 *   - a token outside the target's support (probability 0) is never drawn;
 *   - chi2 = sum over the support of (observed - expected)^2 / expected, df = support - 1,
 *     and its p-value Q(df / 2, chi2 / 2) (regularised upper incomplete gamma) must be
 *     >= ALPHA = 1e-6.
 * Bins expected fewer than 20 draws are pooled into one (then into the smallest bin if the pool
 * is still under 20), so the chi-square approximation holds.
 * Why 1e-6: under a correct sampler chi2 is (asymptotically) chi-square distributed, so a
 * seed fails a case with probability 1e-6, and all
 * N_CASES of them with at most ~2e-5: with the fixed seeds a correct sampler passes for
 * certain, and changing a seed keeps that odds. N = 40,000 draws a case gives the power:
 * a distribution off by 2% of a bin of probability 0.1 (a one-line bug shifts much more)
 * already costs chi2 ~ 16 per bin. Checked with a deliberate one-line bug of each kind in
 * sampler.c (temperature multiplied, top-k keeping k - 1, top-p dropping the token that
 * crosses p, min-p absolute instead of relative to p_max, top-p skipped after top-k, repeat
 * penalty dividing negative logits, presence and frequency swapped, the penalty window one
 * short, logit bias assigned instead of added): every one failed its case with chi2 >= 736
 * (p <= 1e-160; most p = 0 in double) and most drew tokens outside the target support
 * (docs/engine.md, "Sampler tests").
 * Every case asserts it drew N tokens and compared a support of >= 2 tokens. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sampler.h"

#define V 10
#define N_DRAWS 40000
#define ALPHA 1e-6

/* The logits every case starts from: a spread with positive and negative values (the repeat
 * penalty divides one and multiplies the other), no two equal. */
static const double k_logits[V] = {2.0, 1.6, 1.25, 0.9, 0.55, 0.1, -0.4, -0.9, -1.5, -2.2};

/* ==== Chi-square p-value: Q(a, x), the regularised upper incomplete gamma ==== */
static double gamma_q(double a, double x) {
    if (x <= 0) return 1.0;
    const double lg = lgamma(a);
    if (x < a + 1) { /* series for P, Q = 1 - P */
        double ap = a, sum = 1.0 / a, del = sum;
        for (int n = 0; n < 1000; n++) {
            ap += 1;
            del *= x / ap;
            sum += del;
            if (fabs(del) < fabs(sum) * 1e-15) break;
        }
        return 1.0 - sum * exp(-x + a * log(x) - lg);
    }
    /* continued fraction for Q (Lentz) */
    double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;
    for (int i = 1; i < 1000; i++) {
        const double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        if (fabs(d) < 1e-300) d = 1e-300;
        c = b + an / c;
        if (fabs(c) < 1e-300) c = 1e-300;
        d = 1 / d;
        const double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-15) break;
    }
    return exp(-x + a * log(x) - lg) * h;
}

/* ==== The target distribution, from sampler.h's order ==== */
typedef struct dcase {
    const char *name;
    sampling_params sp;
    int32_t hist[16];
    int n_hist;
} dcase;

static int by_value_desc(const double *x, int a, int b) { /* a before b: higher, then lower id */
    return x[a] > x[b] || (x[a] == x[b] && a < b);
}

static void target(const dcase *c, double *prob) {
    const sampling_params *p = &c->sp;
    double l[V];
    for (int v = 0; v < V; v++) l[v] = k_logits[v];
    for (int i = 0; i < p->n_logit_bias; i++) /* 1. bias */
        if (p->logit_bias[i].id >= 0 && p->logit_bias[i].id < V) l[p->logit_bias[i].id] += p->logit_bias[i].bias;
    /* 2. penalties over the last repeat_last_n ids of the history, once per distinct id */
    int start = 0, count[V] = {0};
    if (p->repeat_last_n == 0) start = c->n_hist;
    else if (p->repeat_last_n > 0 && p->repeat_last_n < c->n_hist) start = c->n_hist - p->repeat_last_n;
    for (int i = start; i < c->n_hist; i++) count[c->hist[i]]++;
    for (int v = 0; v < V; v++) {
        if (!count[v]) continue;
        if (p->repeat_penalty != 1.0f) l[v] = l[v] > 0 ? l[v] / p->repeat_penalty : l[v] * p->repeat_penalty;
        l[v] -= p->frequency_penalty * count[v] + p->presence_penalty;
    }
    for (int v = 0; v < V; v++) l[v] /= p->temperature; /* 4. temperature */
    /* order: descending value, ties to the lower id */
    int ord[V];
    for (int v = 0; v < V; v++) ord[v] = v;
    for (int i = 0; i < V; i++)
        for (int j = i + 1; j < V; j++)
            if (by_value_desc(l, ord[j], ord[i])) {
                const int t = ord[i];
                ord[i] = ord[j];
                ord[j] = t;
            }
    int n = 0;
    while (n < V && isfinite(l[ord[n]])) n++;           /* -inf (banned) never drawn */
    if (p->top_k > 0 && p->top_k < n) n = p->top_k;        /* 5. top-k */
    double q[V] = {0}, sum = 0;                             /* 6. softmax over the kept */
    for (int i = 0; i < n; i++) sum += q[i] = exp(l[ord[i]] - l[ord[0]]);
    for (int i = 0; i < n; i++) q[i] /= sum;
    if (p->top_p < 1.0f) {                                  /* 7. top-p: shortest prefix >= p */
        double cum = 0;
        int k = 0;
        while (k < n) {
            cum += q[k++];
            if (cum >= p->top_p) break;
        }
        n = k;
    }
    if (p->min_p > 0) {                                     /* 8. min-p: p >= min_p * p_max */
        int k = 0;
        while (k < n && q[k] >= p->min_p * q[0]) k++;
        n = k;
    }
    double tot = 0;                                         /* 9. renormalise */
    for (int i = 0; i < n; i++) tot += q[i];
    for (int v = 0; v < V; v++) prob[v] = 0;
    for (int i = 0; i < n; i++) prob[ord[i]] = q[i] / tot;
}

/* Draws N_DRAWS tokens and returns the chi-square p-value against target(); *outside counts
 * the draws of tokens the target never draws (each such draw fails the case). *support
 * receives the target's support size, *bins_out the number of chi-square bins (df = bins - 1). */
static double draw_and_test(const dcase *c, uint64_t seed, int *support, double *chi2_out,
                           int *bins_out, long *outside) {
    double prob[V];
    target(c, prob);
    sampling_params sp = c->sp;
    sp.seed = seed;
    sampler *s = sampler_new(&sp);
    assert_non_null(s);
    long cnt[V] = {0};
    *outside = 0;
    for (int d = 0; d < N_DRAWS; d++) {
        float lg[V];
        for (int v = 0; v < V; v++) lg[v] = (float)k_logits[v];
        const int32_t t = sampler_sample(s, lg, V, c->hist, c->n_hist, NULL);
        if (t < 0 || t >= V) fail_msg("%s: sampler returned %d", c->name, t);
        cnt[t]++;
    }
    sampler_free(s);
    /* bins: every token of the support, those expected < 20 draws pooled */
    double be[V + 1], bo[V + 1], pe = 0, po = 0;
    int nb = 0, k = 0;
    long drawn = 0;
    for (int v = 0; v < V; v++) {
        drawn += cnt[v];
        if (prob[v] == 0) {
            if (cnt[v])
                fprintf(stderr, "  %s: token %d drawn %ld times, its target probability is 0\n",
                        c->name, v, cnt[v]);
            *outside += cnt[v];
            continue;
        }
        k++;
        const double e = prob[v] * N_DRAWS;
        if (e < 20) pe += e, po += (double)cnt[v];
        else be[nb] = e, bo[nb++] = (double)cnt[v];
    }
    assert_int_equal(drawn, N_DRAWS);
    if (pe >= 20 || (pe > 0 && nb == 0)) {
        be[nb] = pe, bo[nb++] = po;
    } else if (pe > 0) { /* a small pool joins the smallest bin */
        int m = 0;
        for (int b = 1; b < nb; b++) m = be[b] < be[m] ? b : m;
        be[m] += pe, bo[m] += po;
    }
    double chi2 = 0;
    for (int b = 0; b < nb; b++) chi2 += (bo[b] - be[b]) * (bo[b] - be[b]) / be[b];
    *support = k;
    *chi2_out = chi2;
    *bins_out = nb;
    return nb > 1 ? gamma_q((nb - 1) / 2.0, chi2 / 2.0) : 1.0;
}

/* ==== Cases ==== */
static const mx_logit_bias k_bias[] = {{7, 2.3f}, {0, -INFINITY}, {3, -0.75f}, {42, 9.0f}};

static void params(sampling_params *p, float temp) {
    sampling_params_default(p);
    p->temperature = temp;
    p->repeat_last_n = -1;
}

static void make_cases(dcase *cs, int *n) {
    int k = 0;
#define CASE(nm) (memset(&cs[k], 0, sizeof cs[k]), cs[k].name = nm, &cs[k++])
    dcase *c;
    c = CASE("temperature 1"); params(&c->sp, 1.0f);
    c = CASE("temperature 0.6"); params(&c->sp, 0.6f);
    c = CASE("temperature 1.8"); params(&c->sp, 1.8f);
    c = CASE("top-k 4"); params(&c->sp, 1.0f); c->sp.top_k = 4;
    /* top-p 0.62: the cumulative target crosses it at the 3rd token (0.328, 0.548, 0.702 at
     * T = 1), away from any boundary */
    c = CASE("top-p 0.62"); params(&c->sp, 1.0f); c->sp.top_p = 0.62f;
    c = CASE("min-p 0.3"); params(&c->sp, 1.0f); c->sp.min_p = 0.3f;
    c = CASE("min-p 0.3, temperature 0.7"); params(&c->sp, 0.7f); c->sp.min_p = 0.3f;
    /* top-k 4 renormalised, then top-p 0.77 over those: cumulative 0.404, 0.675, 0.866 -> 3
     * tokens (top-p over the full vocabulary's probabilities would keep 4: 0.702, 0.811) */
    c = CASE("top-k 4 + top-p 0.77"); params(&c->sp, 1.0f); c->sp.top_k = 4; c->sp.top_p = 0.77f;
    /* T 1.3, top-k 5 (cumulative 0.327 0.568 0.752 0.893), top-p 0.85 keeps 4, min-p 0.5
     * (threshold 0.164) 3 */
    c = CASE("top-k 5 + top-p 0.85 + min-p 0.5, T 1.3"); params(&c->sp, 1.3f);
    c->sp.top_k = 5, c->sp.top_p = 0.85f, c->sp.min_p = 0.5f;
    /* repeat penalty over the history: positive logits divided (0, 2), negative multiplied
     * (6, 8); ids outside the window (repeat_last_n 5) untouched (1) */
    c = CASE("repeat penalty 1.6, window 5"); params(&c->sp, 1.0f); c->sp.repeat_penalty = 1.6f;
    c->sp.repeat_last_n = 5;
    { static const int32_t h[] = {1, 1, 1, 0, 2, 6, 8, 8}; memcpy(c->hist, h, sizeof h); c->n_hist = 8; }
    /* presence + frequency: id 0 three times (-2.0), id 4 once (-0.8), id 9 twice (-1.4) */
    c = CASE("presence 0.2 + frequency 0.6"); params(&c->sp, 1.0f);
    c->sp.presence_penalty = 0.2f, c->sp.frequency_penalty = 0.6f;
    { static const int32_t h[] = {0, 4, 0, 9, 0, 9}; memcpy(c->hist, h, sizeof h); c->n_hist = 6; }
    /* logit bias: +2.3 on 7, id 0 banned, -0.75 on 3, an id outside the vocabulary ignored */
    c = CASE("logit bias"); params(&c->sp, 1.0f); c->sp.logit_bias = k_bias; c->sp.n_logit_bias = 4;
    /* everything at once: order 1 7 2 4 3 5 6 after bias and penalties, cumulative 0.373 0.663
     * 0.765 0.865 0.926 over the top 7 at T 0.8: top-p 0.9 keeps 5 */
    c = CASE("bias + penalties + T 0.8 + top-k 7 + top-p 0.9"); params(&c->sp, 0.8f);
    c->sp.logit_bias = k_bias, c->sp.n_logit_bias = 4, c->sp.repeat_penalty = 1.3f;
    c->sp.frequency_penalty = 0.2f, c->sp.top_k = 7, c->sp.top_p = 0.9f;
    { static const int32_t h[] = {2, 2, 5, 8}; memcpy(c->hist, h, sizeof h); c->n_hist = 4; }
#undef CASE
    *n = k;
}

static void test_distributions(void **st) {
    (void)st;
    dcase cs[16];
    int n = 0;
    make_cases(cs, &n);
    int failed = 0;
    for (int i = 0; i < n; i++) {
        int support, bins;
        long outside;
        double chi2;
        const double pv = draw_and_test(&cs[i], 0x5eed0000u + (uint64_t)i, &support, &chi2, &bins,
                                        &outside);
        const bool bad = pv < ALPHA || outside > 0;
        fprintf(stderr, "%-46s support %2d  chi2 %9.2f  df %d  p %.3g  outside %ld%s\n",
                cs[i].name, support, chi2, bins - 1, pv, outside, bad ? "  FAIL" : "");
        assert_true(support >= 2 && bins >= 2); /* a support of one token tests nothing */
        failed += bad;
    }
    assert_int_equal(n, 13);
    assert_int_equal(failed, 0);
}

/* The target itself: spot values computed by hand from the spec (so a shared misreading of
 * sampler.h by this file and the sampler would not pass unnoticed). */
static void test_targets_by_hand(void **st) {
    (void)st;
    dcase cs[16];
    int n = 0;
    make_cases(cs, &n);
    double p[V], z = 0;
    /* temperature 1: plain softmax */
    target(&cs[0], p);
    for (int v = 0; v < V; v++) z += exp(k_logits[v]);
    for (int v = 0; v < V; v++) assert_true(fabs(p[v] - exp(k_logits[v]) / z) < 1e-12);
    /* top-k 4: the first four, renormalised */
    target(&cs[3], p);
    z = exp(2.0) + exp(1.6) + exp(1.25) + exp(0.9);
    assert_true(fabs(p[0] - exp(2.0) / z) < 1e-12 && p[4] == 0 && p[9] == 0);
    /* top-p 0.62: three tokens */
    target(&cs[4], p);
    assert_true(p[2] > 0 && p[3] == 0);
    /* min-p 0.3 at T 1: p_v / p_0 = exp(l_v - 2) >= 0.3 <=> l_v >= 2 + ln 0.3 = 0.796: 4 tokens */
    target(&cs[5], p);
    assert_true(p[3] > 0 && p[4] == 0);
    /* top-k 4 + top-p 0.77: three tokens (full-vocabulary top-p 0.77 would keep four) */
    target(&cs[7], p);
    assert_true(p[2] > 0 && p[3] == 0);
    /* T 1.3, top-k 5, top-p 0.85, min-p 0.5: three tokens */
    target(&cs[8], p);
    assert_true(p[2] > 0 && p[3] == 0);
    /* repeat penalty window 5 = ids {0, 2, 6, 8, 8}: 0 -> 2 / 1.6, 6 -> -0.4 * 1.6, 1 untouched */
    target(&cs[9], p);
    assert_true(fabs(p[0] / p[1] - exp(2.0 / 1.6 - 1.6)) < 1e-6);
    assert_true(fabs(p[6] / p[1] - exp(-0.4 * 1.6 - 1.6)) < 1e-6);
    /* presence + frequency: 0 -> 2 - 0.6 * 3 - 0.2 */
    target(&cs[10], p);
    assert_true(fabs(p[0] / p[1] - exp(2.0 - 3 * 0.6f - 0.2f - 1.6)) < 1e-6);
    /* bias: 0 banned, 7 -> -0.9 + 2.3, 3 -> 0.9 - 0.75 */
    target(&cs[11], p);
    assert_true(p[0] == 0 && fabs(p[7] / p[1] - exp(-0.9 + 2.3f - 1.6)) < 1e-6);
    assert_true(fabs(p[3] / p[1] - exp(0.9 - 0.75f - 1.6)) < 1e-6);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_targets_by_hand),
        cmocka_unit_test(test_distributions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
