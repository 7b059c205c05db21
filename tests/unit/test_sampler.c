/* Sampler tests: greedy tie rule, determinism, support of top-k/top-p/min-p on crafted
 * distributions, penalties computed by hand, logit bias bans, log-probabilities. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sampler.h"

/* ==== Helpers ==== */

static sampler *make(float temperature, int top_k, float top_p, float min_p, uint64_t seed) {
    sampling_params p;
    sampling_params_default(&p);
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = seed;
    sampler *s = sampler_new(&p);
    assert_non_null(s);
    return s;
}

/* Draws `n` tokens from a fresh copy of `logits` each time and counts them in hist[vocab]. */
static void draw_many(sampler *s, const float *logits, int vocab, int n, int *hist) {
    float *buf = malloc((size_t)vocab * sizeof *buf);
    assert_non_null(buf);
    memset(hist, 0, (size_t)vocab * sizeof *hist);
    for (int i = 0; i < n; i++) {
        memcpy(buf, logits, (size_t)vocab * sizeof *buf);
        int32_t id = sampler_sample(s, buf, vocab, NULL, 0, NULL);
        assert_true(id >= 0 && id < vocab);
        hist[id]++;
    }
    free(buf);
}

/* logits = log(probs), so the softmax gives back probs exactly enough for support checks. */
static void log_of(const double *probs, float *logits, int n) {
    for (int i = 0; i < n; i++) logits[i] = probs[i] > 0 ? (float)log(probs[i]) : -INFINITY;
}

/* ==== Defaults and validation ==== */

static void test_defaults(void **st) {
    (void)st;
    sampling_params p;
    sampling_params_default(&p);
    assert_true(p.temperature == 0.0f && p.top_k == 0 && p.top_p == 1.0f && p.min_p == 0.0f);
    assert_true(p.repeat_penalty == 1.0f && p.repeat_last_n == 64 && p.seed == 0);
    assert_true(p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f);
    mx_error e;
    assert_int_equal(sampling_params_validate(&p, &e), 0);
    p.repeat_penalty = 0.0f;
    assert_int_equal(sampling_params_validate(&p, &e), -1);
    assert_non_null(strstr(e.msg, "repeat_penalty"));
    assert_null(sampler_new(&p));
    sampling_params_default(&p);
    p.temperature = NAN;
    assert_int_equal(sampling_params_validate(&p, &e), -1);
    sampling_params_default(&p);
    p.n_logit_bias = 2;
    assert_int_equal(sampling_params_validate(&p, &e), -1);
    mx_logit_bias b = {3, INFINITY};
    p.logit_bias = &b;
    p.n_logit_bias = 1;
    assert_int_equal(sampling_params_validate(&p, &e), -1);
    sampling_params_default(&p);
    p.repeat_last_n = -2;
    assert_int_equal(sampling_params_validate(&p, &e), -1);
}

/* ==== Greedy ==== */

static void test_greedy_ties(void **st) {
    (void)st;
    sampler *s = make(0.0f, 0, 1.0f, 0.0f, 0);
    float a[] = {1.0f, 3.0f, 3.0f, 2.0f};
    assert_int_equal(sampler_sample(s, a, 4, NULL, 0, NULL), 1);
    float b[] = {NAN, 5.0f, 5.0f, 5.0f};
    assert_int_equal(sampler_sample(s, b, 4, NULL, 0, NULL), 1);
    float c[] = {-INFINITY, -INFINITY};
    assert_int_equal(sampler_sample(s, c, 2, NULL, 0, NULL), -1);
    float d[] = {0.0f};
    assert_int_equal(sampler_sample(s, d, 0, NULL, 0, NULL), -1);
    assert_int_equal(sampler_sample(s, NULL, 4, NULL, 0, NULL), -1);
    /* greedy ignores top-k/top-p and consumes no randomness: sampling settings are irrelevant */
    sampler_free(s);
    s = make(0.0f, 1, 0.1f, 0.5f, 99);
    float e[] = {0.5f, -1.0f, 0.5f};
    assert_int_equal(sampler_sample(s, e, 3, NULL, 0, NULL), 0);
    sampler_free(s);
}

/* ==== Determinism ==== */

static void test_same_seed_same_tokens(void **st) {
    (void)st;
    enum { V = 50, N = 1000 };
    float logits[V], buf[V];
    for (int i = 0; i < V; i++) logits[i] = (float)sin(i * 1.7) * 2.0f;
    sampler *a = make(1.0f, 0, 1.0f, 0.0f, 1234);
    sampler *b = make(1.0f, 0, 1.0f, 0.0f, 1234);
    sampler *c = make(1.0f, 0, 1.0f, 0.0f, 1235);
    int32_t ta[N], tb[N], tc[N];
    int distinct = 0, seen[V] = {0};
    for (int i = 0; i < N; i++) {
        memcpy(buf, logits, sizeof buf);
        ta[i] = sampler_sample(a, buf, V, NULL, 0, NULL);
        memcpy(buf, logits, sizeof buf);
        tb[i] = sampler_sample(b, buf, V, NULL, 0, NULL);
        memcpy(buf, logits, sizeof buf);
        tc[i] = sampler_sample(c, buf, V, NULL, 0, NULL);
        if (!seen[ta[i]]++) distinct++;
    }
    assert_memory_equal(ta, tb, sizeof ta);
    assert_true(memcmp(ta, tc, sizeof ta) != 0); /* another seed gives another stream */
    assert_true(distinct > 10);                  /* it really samples */
    sampler_free(a);
    sampler_free(b);
    sampler_free(c);
}

/* ==== Support of top-k / top-p / min-p ==== */

static void test_top_k_support(void **st) {
    (void)st;
    enum { V = 10, N = 3000 };
    float logits[V];
    for (int i = 0; i < V; i++) logits[i] = (float)((i * 7) % V) * 0.3f; /* ids 3, 6, 9 highest */
    int hist[V];
    sampler *s = make(1.5f, 3, 1.0f, 0.0f, 7);
    draw_many(s, logits, V, N, hist);
    for (int i = 0; i < V; i++) {
        const int allowed = (i * 7) % V >= 7; /* ranks 9, 8, 7 -> ids 7, 4, 1 */
        if (allowed) assert_true(hist[i] > 0);
        else assert_int_equal(hist[i], 0);
    }
    sampler_free(s);
    /* top_k >= vocab keeps everything */
    s = make(1.0f, 100, 1.0f, 0.0f, 8);
    float flat[V] = {0};
    draw_many(s, flat, V, N, hist);
    for (int i = 0; i < V; i++) assert_true(hist[i] > 0);
    sampler_free(s);
}

static void test_top_p_support(void **st) {
    (void)st;
    enum { V = 6, N = 4000 };
    const double probs[V] = {0.05, 0.5, 0.02, 0.3, 0.13, 0.0};
    float logits[V];
    log_of(probs, logits, V);
    int hist[V];
    /* 0.5 + 0.3 = 0.8 >= 0.75: ids 1, 3 */
    sampler *s = make(1.0f, 0, 0.75f, 0.0f, 11);
    draw_many(s, logits, V, N, hist);
    for (int i = 0; i < V; i++) {
        if (i == 1 || i == 3) assert_true(hist[i] > 0);
        else assert_int_equal(hist[i], 0);
    }
    sampler_free(s);
    /* 0.93 >= 0.9: ids 1, 3, 4; renormalised, id 1 gets about 0.5 / 0.93 */
    s = make(1.0f, 0, 0.9f, 0.0f, 12);
    draw_many(s, logits, V, N, hist);
    for (int i = 0; i < V; i++) {
        if (i == 1 || i == 3 || i == 4) assert_true(hist[i] > 0);
        else assert_int_equal(hist[i], 0);
    }
    assert_true(fabs(hist[1] / (double)N - 0.5 / 0.93) < 0.03);
    sampler_free(s);
    /* top_p tiny: only the most likely token */
    s = make(1.0f, 0, 0.01f, 0.0f, 13);
    draw_many(s, logits, V, 200, hist);
    assert_int_equal(hist[1], 200);
    sampler_free(s);
}

static void test_min_p_support(void **st) {
    (void)st;
    enum { V = 6, N = 4000 };
    const double probs[V] = {0.05, 0.5, 0.02, 0.3, 0.13, 0.0};
    float logits[V];
    log_of(probs, logits, V);
    int hist[V];
    /* threshold 0.2 * 0.5 = 0.1: ids 1, 3, 4 */
    sampler *s = make(1.0f, 0, 1.0f, 0.2f, 21);
    draw_many(s, logits, V, N, hist);
    for (int i = 0; i < V; i++) {
        if (i == 1 || i == 3 || i == 4) assert_true(hist[i] > 0);
        else assert_int_equal(hist[i], 0);
    }
    sampler_free(s);
    /* threshold 0.3 * 0.5 = 0.15: ids 1, 3 (0.13 is out) */
    s = make(1.0f, 0, 1.0f, 0.3f, 23);
    draw_many(s, logits, V, N, hist);
    for (int i = 0; i < V; i++) {
        if (i == 1 || i == 3) assert_true(hist[i] > 0);
        else assert_int_equal(hist[i], 0);
    }
    sampler_free(s);
    /* min-p combined with top-p: the shorter prefix wins (top-p 0.75 -> ids 1, 3) */
    s = make(1.0f, 0, 0.75f, 0.2f, 22);
    draw_many(s, logits, V, N, hist);
    for (int i = 0; i < V; i++) {
        if (i == 1 || i == 3) assert_true(hist[i] > 0);
        else assert_int_equal(hist[i], 0);
    }
    sampler_free(s);
}

/* Large vocabulary: the partial selection must keep exactly the top-p prefix computed by a
 * full sort here. */
static int cmp_desc(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

static void test_top_p_large_vocab(void **st) {
    (void)st;
    enum { V = 5000, N = 3000 };
    float *logits = malloc(V * sizeof *logits);
    double *p = malloc(V * sizeof *p), *sorted = malloc(V * sizeof *sorted);
    int *hist = malloc(V * sizeof *hist);
    assert_true(logits && p && sorted && hist);
    uint32_t x = 12345;
    double sum = 0, m = -1e30;
    for (int i = 0; i < V; i++) {
        x = x * 1664525u + 1013904223u;
        logits[i] = (float)((x >> 8) % 100000) / 100000.0f * 8.0f; /* distinct-ish, spread */
        if (logits[i] > m) m = logits[i];
    }
    for (int i = 0; i < V; i++) sum += p[i] = exp((double)logits[i] - m);
    for (int i = 0; i < V; i++) sorted[i] = p[i] /= sum;
    qsort(sorted, V, sizeof *sorted, cmp_desc);
    const float top_p = 0.6f;
    double cum = 0, cutoff = 0;
    int keep = 0;
    for (; keep < V; keep++) {
        cum += sorted[keep];
        if (cum >= top_p) {
            cutoff = sorted[keep];
            keep++;
            break;
        }
    }
    assert_true(keep > 64); /* exercises growing the partial sort past the first 64 */
    sampler *s = make(1.0f, 0, top_p, 0.0f, 31);
    draw_many(s, logits, V, N, hist);
    int drawn_ids = 0;
    for (int i = 0; i < V; i++) {
        if (hist[i]) drawn_ids++;
        if (p[i] < cutoff * (1 - 1e-6)) assert_int_equal(hist[i], 0);
    }
    assert_true(drawn_ids > keep / 4);
    sampler_free(s);
    free(logits);
    free(p);
    free(sorted);
    free(hist);
}

/* ==== Penalties ==== */

static void test_penalties(void **st) {
    (void)st;
    sampling_params p;
    sampling_params_default(&p);
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 4;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    sampler *s = sampler_new(&p);
    assert_non_null(s);
    /* history: id 0 is outside the last-4 window; in it: 1 x2, 2 x1, 3 x1; 99 out of vocab */
    const int32_t hist[] = {0, 1, 2, 1, 99, 3};
    const int32_t hist2[] = {0, 0, 1, 2, 1, 3};
    float l[] = {2.0f, 4.0f, -1.0f, 3.0f, 1.0f};
    int32_t id = sampler_sample(s, l, 5, hist2, 6, NULL);
    /* window = {2, 1, 3} of hist2[2..5]: 1 x2, 2 x1, 3 x1 */
    assert_float_equal(l[0], 2.0f, 1e-6);
    assert_float_equal(l[1], 4.0f / 2.0f - 0.25f * 2 - 0.5f, 1e-6); /* 1.0 */
    assert_float_equal(l[2], -1.0f * 2.0f - 0.25f - 0.5f, 1e-6);    /* -2.75 */
    assert_float_equal(l[3], 3.0f / 2.0f - 0.25f - 0.5f, 1e-6);     /* 0.75 */
    assert_float_equal(l[4], 1.0f, 1e-6);
    assert_int_equal(id, 0);
    /* the window counts the out-of-vocab id 99 as a slot but ignores it */
    float l2[] = {2.0f, 4.0f, -1.0f, 3.0f, 1.0f};
    sampler_sample(s, l2, 5, hist, 6, NULL);
    assert_float_equal(l2[0], 2.0f, 1e-6);                       /* outside the window */
    assert_float_equal(l2[1], 4.0f / 2.0f - 0.25f * 1 - 0.5f, 1e-6); /* window {2, 1, 99, 3} */
    sampler_free(s);

    /* repeat_last_n = -1: whole history; 0: no penalties */
    p.repeat_last_n = -1;
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 1.0f;
    p.repeat_penalty = 1.0f;
    s = sampler_new(&p);
    float l3[] = {5.0f, 5.0f, 5.0f};
    const int32_t h3[] = {0, 0, 0, 2};
    assert_int_equal(sampler_sample(s, l3, 3, h3, 4, NULL), 1);
    assert_float_equal(l3[0], 2.0f, 1e-6);
    assert_float_equal(l3[2], 4.0f, 1e-6);
    sampler_free(s);
    p.repeat_last_n = 0;
    s = sampler_new(&p);
    float l4[] = {5.0f, 5.0f, 5.0f};
    assert_int_equal(sampler_sample(s, l4, 3, h3, 4, NULL), 0);
    assert_float_equal(l4[0], 5.0f, 1e-6);
    sampler_free(s);
}

/* ==== Logit bias ==== */

static void test_logit_bias_ban(void **st) {
    (void)st;
    enum { V = 4, N = 2000 };
    mx_logit_bias bias[] = {{2, -INFINITY}, {0, 1.5f}, {77, 3.0f} /* out of vocab: ignored */};
    sampling_params p;
    sampling_params_default(&p);
    p.logit_bias = bias;
    p.n_logit_bias = 3;
    sampler *s = sampler_new(&p);
    assert_non_null(s);
    float g[V] = {0.0f, 1.0f, 10.0f, 1.2f};
    assert_int_equal(sampler_sample(s, g, V, NULL, 0, NULL), 0); /* 1.5 beats 1.2, 2 is banned */
    sampler_free(s);
    p.temperature = 2.0f;
    p.seed = 5;
    s = sampler_new(&p);
    bias[0].bias = 0; /* the sampler keeps its own copy of the bias array */
    float l[V] = {0.0f, 1.0f, 10.0f, 1.2f};
    int hist[V];
    draw_many(s, l, V, N, hist);
    assert_int_equal(hist[2], 0);
    assert_true(hist[0] > 0 && hist[1] > 0 && hist[3] > 0);
    sampler_free(s);
}

/* ==== Log-probabilities ==== */

static void test_logprobs(void **st) {
    (void)st;
    float l[] = {1.0f, 3.0f, 2.0f, -INFINITY, 3.0f};
    double lse = log(exp(1.0) + exp(3.0) + exp(2.0) + exp(3.0));
    sampler *s = make(0.0f, 0, 1.0f, 0.0f, 0);
    int32_t ids[8];
    float lp[8];
    assert_int_equal(sampler_top_logprobs(s, 3, ids, lp), 0); /* before the first call */
    float chosen_lp = 0;
    assert_int_equal(sampler_sample(s, l, 5, NULL, 0, &chosen_lp), 1);
    assert_float_equal(chosen_lp, 3.0 - lse, 1e-5);
    assert_int_equal(sampler_top_logprobs(s, 8, ids, lp), 4); /* -inf is not listed */
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 4);
    assert_int_equal(ids[2], 2);
    assert_int_equal(ids[3], 0);
    assert_float_equal(lp[2], 2.0 - lse, 1e-5);
    sampler_free(s);
    /* with temperature the processed distribution is logits / T */
    s = make(2.0f, 1, 1.0f, 0.0f, 3);
    float l2[] = {1.0f, 3.0f, 2.0f};
    double lse2 = log(exp(0.5) + exp(1.5) + exp(1.0));
    assert_int_equal(sampler_sample(s, l2, 3, NULL, 0, &chosen_lp), 1); /* top_k 1 */
    assert_float_equal(chosen_lp, 1.5 - lse2, 1e-5);
    assert_int_equal(sampler_top_logprobs(s, 2, ids, lp), 2);
    assert_int_equal(ids[1], 2);
    assert_float_equal(lp[1], 1.0 - lse2, 1e-5);
    sampler_free(s);
}

static void test_top_logprobs_many(void **st) {
    (void)st;
    enum { V = 300, N = 100 };
    float l[V];
    int32_t inv[V]; /* inv[value] = id: values are a permutation of 0..299 (gcd(37, 300) = 1) */
    for (int i = 0; i < V; i++) {
        l[i] = (float)((i * 37) % V);
        inv[(i * 37) % V] = i;
    }
    sampler *s = make(0.0f, 0, 1.0f, 0.0f, 0);
    assert_int_equal(sampler_sample(s, l, V, NULL, 0, NULL), inv[V - 1]);
    int32_t ids[N];
    float lp[N];
    /* n > 64 takes the selection path, n <= 64 the insertion path: both must agree */
    assert_int_equal(sampler_top_logprobs(s, N, ids, lp), N);
    for (int i = 0; i < N; i++) assert_int_equal(ids[i], inv[V - 1 - i]);
    for (int i = 1; i < N; i++) assert_float_equal(lp[i - 1] - lp[i], 1.0, 1e-4);
    int32_t ids2[10];
    float lp2[10];
    assert_int_equal(sampler_top_logprobs(s, 10, ids2, lp2), 10);
    assert_memory_equal(ids, ids2, sizeof ids2);
    sampler_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_greedy_ties),
        cmocka_unit_test(test_same_seed_same_tokens),
        cmocka_unit_test(test_top_k_support),
        cmocka_unit_test(test_top_p_support),
        cmocka_unit_test(test_min_p_support),
        cmocka_unit_test(test_top_p_large_vocab),
        cmocka_unit_test(test_penalties),
        cmocka_unit_test(test_logit_bias_ban),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_top_logprobs_many),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
