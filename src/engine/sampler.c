/* Token sampler. The processing order and the PRNG are documented in sampler.h. */
#include "engine/sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ==== Types ==== */

/* One candidate token: v is a logit until the softmax step, a probability after it. */
typedef struct cand {
    float v;
    int32_t id;
} cand;

struct sampler {
    sampling_params p;
    mx_logit_bias *bias; /* [p.n_logit_bias], owned copy */
    uint64_t rng[4];     /* xoshiro256** state */
    int cap;             /* capacity of the scratch arrays below, in tokens */
    cand *cands;         /* [cap] candidates of the current call */
    float *proc;         /* [cap] processed logits of the last call (for log-probabilities) */
    int32_t *counts;     /* [cap] occurrence counts; all zero between calls */
    int n_proc;          /* vocab of the last call; 0 before the first call */
    float proc_lse;      /* log-sum-exp of proc[0..n_proc) */
};

/* ==== PRNG: splitmix64 seeding + xoshiro256** ==== */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t s[4]) {
    const uint64_t result = rotl64(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t s[4]) { return (double)(xoshiro_next(s) >> 11) * 0x1.0p-53; }

/* ==== Parameters ==== */

void sampling_params_default(sampling_params *p) {
    memset(p, 0, sizeof *p);
    p->temperature = 0.0f;
    p->top_k = 0;
    p->top_p = 1.0f;
    p->min_p = 0.0f;
    p->repeat_penalty = 1.0f;
    p->repeat_last_n = 64;
    p->presence_penalty = 0.0f;
    p->frequency_penalty = 0.0f;
    p->logit_bias = NULL;
    p->n_logit_bias = 0;
    p->seed = 0;
}

int sampling_params_validate(const sampling_params *p, mx_error *e) {
    if (!isfinite(p->temperature))
        return mx_fail(e, "sampling: temperature must be a finite number, got %g", p->temperature);
    if (!isfinite(p->top_p))
        return mx_fail(e, "sampling: top_p must be a finite number, got %g", p->top_p);
    if (!isfinite(p->min_p) || p->min_p > 1.0f)
        return mx_fail(e, "sampling: min_p must be a number <= 1, got %g", p->min_p);
    if (!isfinite(p->repeat_penalty) || p->repeat_penalty <= 0.0f)
        return mx_fail(e, "sampling: repeat_penalty must be > 0, got %g", p->repeat_penalty);
    if (p->repeat_last_n < -1)
        return mx_fail(e, "sampling: repeat_last_n must be >= -1 (-1 = whole history), got %d",
                       p->repeat_last_n);
    if (!isfinite(p->presence_penalty))
        return mx_fail(e, "sampling: presence_penalty must be finite, got %g", p->presence_penalty);
    if (!isfinite(p->frequency_penalty))
        return mx_fail(e, "sampling: frequency_penalty must be finite, got %g", p->frequency_penalty);
    if (p->n_logit_bias < 0 || (p->n_logit_bias > 0 && !p->logit_bias))
        return mx_fail(e, "sampling: logit_bias has %d entries but no array", p->n_logit_bias);
    for (int i = 0; i < p->n_logit_bias; i++) {
        float b = p->logit_bias[i].bias;
        if (isnan(b) || b == INFINITY)
            return mx_fail(e, "sampling: logit_bias[%d] (token %d) must be finite or -inf, got %g",
                           i, (int)p->logit_bias[i].id, b);
    }
    return 0;
}

/* ==== Lifecycle ==== */

sampler *sampler_new(const sampling_params *p) {
    mx_error e;
    if (!p || sampling_params_validate(p, &e) != 0) return NULL;
    sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = *p;
    if (p->n_logit_bias > 0) {
        s->bias = malloc((size_t)p->n_logit_bias * sizeof *s->bias);
        if (!s->bias) {
            free(s);
            return NULL;
        }
        memcpy(s->bias, p->logit_bias, (size_t)p->n_logit_bias * sizeof *s->bias);
    }
    s->p.logit_bias = s->bias;
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
    return s;
}

void sampler_free(sampler *s) {
    if (!s) return;
    free(s->bias);
    free(s->cands);
    free(s->proc);
    free(s->counts);
    free(s);
}

/* Grows the scratch arrays to hold `vocab` tokens; the new part of counts is zeroed. */
static int ensure_cap(sampler *s, int vocab) {
    if (vocab <= s->cap) return 0;
    cand *c = realloc(s->cands, (size_t)vocab * sizeof *c);
    if (!c) return -1;
    s->cands = c;
    float *pr = realloc(s->proc, (size_t)vocab * sizeof *pr);
    if (!pr) return -1;
    s->proc = pr;
    int32_t *cnt = realloc(s->counts, (size_t)vocab * sizeof *cnt);
    if (!cnt) return -1;
    memset(cnt + s->cap, 0, (size_t)(vocab - s->cap) * sizeof *cnt);
    s->counts = cnt;
    s->cap = vocab;
    return 0;
}

/* ==== Ordering and selection ==== */

/* Total order: higher value first, then lower id. */
static inline int cand_before(const cand *a, const cand *b) {
    return a->v > b->v || (a->v == b->v && a->id < b->id);
}

static int cand_cmp(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    if (cand_before(a, b)) return -1;
    if (cand_before(b, a)) return 1;
    return 0;
}

static inline void cand_swap(cand *a, cand *b) {
    cand t = *a;
    *a = *b;
    *b = t;
}

/* Moves the m first candidates (in cand_before order) to c[0..m), sorted. Quickselect with a
 * median-of-three pivot; falls back to sorting the remaining range after 2*log2(n) rounds so
 * the worst case stays O(n log n). */
static void select_top(cand *c, int n, int m) {
    if (m <= 0 || n <= 0) return;
    if (m >= n) {
        qsort(c, (size_t)n, sizeof *c, cand_cmp);
        return;
    }
    int lo = 0, hi = n - 1, budget = 2;
    for (int t = n; t > 1; t >>= 1) budget += 2;
    const int k = m - 1; /* position that must end up final */
    while (hi > lo) {
        if (budget-- == 0) {
            qsort(c + lo, (size_t)(hi - lo + 1), sizeof *c, cand_cmp);
            break;
        }
        int mid = lo + (hi - lo) / 2;
        if (cand_before(&c[mid], &c[lo])) cand_swap(&c[mid], &c[lo]);
        if (cand_before(&c[hi], &c[lo])) cand_swap(&c[hi], &c[lo]);
        if (cand_before(&c[hi], &c[mid])) cand_swap(&c[hi], &c[mid]);
        cand_swap(&c[mid], &c[hi]); /* median becomes the pivot at hi */
        const cand pv = c[hi];
        int store = lo;
        for (int i = lo; i < hi; i++)
            if (cand_before(&c[i], &pv)) cand_swap(&c[i], &c[store++]);
        cand_swap(&c[store], &c[hi]);
        if (store == k) break;
        if (store < k) lo = store + 1;
        else hi = store - 1;
    }
    qsort(c, (size_t)m, sizeof *c, cand_cmp);
}

/* ==== Processing steps ==== */

static void apply_bias(const sampler *s, float *logits, int vocab) {
    for (int i = 0; i < s->p.n_logit_bias; i++) {
        int32_t id = s->bias[i].id;
        if (id >= 0 && id < vocab) logits[id] += s->bias[i].bias;
    }
}

/* Repeat, presence and frequency penalties over the window; each distinct id is penalised once
 * (llama.cpp's order: repeat first, then frequency * count + presence). */
static void apply_penalties(sampler *s, float *logits, int vocab, const int32_t *history,
                            int n_history) {
    const sampling_params *p = &s->p;
    if (!history || n_history <= 0 || p->repeat_last_n == 0) return;
    if (p->repeat_penalty == 1.0f && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f)
        return;
    int start = 0;
    if (p->repeat_last_n > 0 && p->repeat_last_n < n_history) start = n_history - p->repeat_last_n;
    for (int i = start; i < n_history; i++) {
        int32_t id = history[i];
        if (id >= 0 && id < vocab) s->counts[id]++;
    }
    for (int i = start; i < n_history; i++) {
        int32_t id = history[i];
        if (id < 0 || id >= vocab || s->counts[id] == 0) continue;
        const int32_t count = s->counts[id];
        float l = logits[id];
        if (p->repeat_penalty != 1.0f) l = l > 0.0f ? l / p->repeat_penalty : l * p->repeat_penalty;
        l -= p->frequency_penalty * (float)count + p->presence_penalty;
        logits[id] = l;
        s->counts[id] = 0; /* once per distinct id; leaves counts all zero */
    }
}

/* Divides by the temperature (when > 0) and maps NaN to -inf and +inf to FLT_MAX, so every
 * later step sees ordered values. Keeps a copy and its log-sum-exp for log-probabilities. */
static void finalize_logits(sampler *s, float *logits, int vocab, float temperature) {
    float m = -INFINITY;
    for (int i = 0; i < vocab; i++) {
        float v = logits[i];
        if (temperature > 0.0f) v /= temperature;
        if (isnan(v)) v = -INFINITY;
        else if (v == INFINITY) v = FLT_MAX;
        logits[i] = v;
        if (v > m) m = v;
    }
    memcpy(s->proc, logits, (size_t)vocab * sizeof *logits);
    s->n_proc = vocab;
    if (m == -INFINITY) {
        s->proc_lse = -INFINITY;
        return;
    }
    double sum = 0.0;
    for (int i = 0; i < vocab; i++)
        if (logits[i] > -INFINITY) sum += exp((double)logits[i] - (double)m);
    s->proc_lse = (float)((double)m + log(sum));
}

static int32_t argmax(const float *x, int n) {
    int32_t best = -1;
    float bv = -INFINITY;
    for (int i = 0; i < n; i++)
        if (x[i] > bv) { /* strict: the lowest id wins a tie */
            bv = x[i];
            best = i;
        }
    return best;
}

/* Keeps the shortest prefix of the descending order whose cumulative probability reaches
 * top_p. Sorts only as much as needed: the top 64, 512, ... until the prefix is found. */
static int truncate_top_p(cand *c, int n, float top_p, int sorted) {
    int have = sorted ? n : 0; /* c[0..have) is known sorted and first in order */
    for (int want = 64;; want *= 8) {
        if (have < n && want > have) {
            if (want >= n / 2) want = n;
            select_top(c, n, want);
            have = want;
        }
        double cum = 0.0;
        for (int i = 0; i < have; i++) {
            cum += c[i].v;
            if (cum >= (double)top_p) return i + 1;
        }
        if (have >= n) return n;
    }
}

/* ==== Sampling ==== */

int32_t sampler_sample(sampler *s, float *logits, int vocab, const int32_t *history, int n_history,
                       float *logprob_out) {
    if (!s || !logits || vocab <= 0 || ensure_cap(s, vocab) != 0) return -1;
    const sampling_params *p = &s->p;

    apply_bias(s, logits, vocab);
    apply_penalties(s, logits, vocab, history, n_history);

    const int greedy = p->temperature <= 0.0f;
    finalize_logits(s, logits, vocab, greedy ? 0.0f : p->temperature);

    int32_t chosen;
    if (greedy) {
        chosen = argmax(logits, vocab);
    } else {
        /* Candidates: every token with a finite logit. */
        cand *c = s->cands;
        int n = 0;
        for (int i = 0; i < vocab; i++)
            if (logits[i] > -INFINITY) c[n++] = (cand){logits[i], i};
        if (n == 0) return -1;

        int sorted = 0;
        if (p->top_k > 0 && p->top_k < n) {
            select_top(c, n, p->top_k);
            n = p->top_k;
            sorted = 1;
        }

        /* Softmax over the candidates (exp is monotonic, so any sorted order is kept). */
        float m = c[0].v;
        for (int i = 1; i < n; i++)
            if (c[i].v > m) m = c[i].v;
        double sum = 0.0;
        for (int i = 0; i < n; i++) {
            c[i].v = (float)exp((double)c[i].v - (double)m);
            sum += c[i].v;
        }
        float pmax = 0.0f;
        for (int i = 0; i < n; i++) {
            c[i].v = (float)(c[i].v / sum);
            if (c[i].v > pmax) pmax = c[i].v;
        }

        /* min-p, then top-p: both keep a prefix of the descending order, so this yields the
         * same set as top-p first, with less to sort. Compaction keeps the relative order. */
        if (p->min_p > 0.0f) {
            const float thr = p->min_p * pmax;
            int k = 0;
            for (int i = 0; i < n; i++)
                if (c[i].v >= thr) c[k++] = c[i];
            n = k; /* >= 1: the max always passes */
        }
        if (p->top_p < 1.0f) n = truncate_top_p(c, n, p->top_p, sorted);

        double total = 0.0;
        for (int i = 0; i < n; i++) total += c[i].v;
        const double u = rng_uniform(s->rng) * total;
        double acc = 0.0;
        chosen = c[n - 1].id; /* if rounding leaves u beyond the last partial sum */
        for (int i = 0; i < n; i++) {
            acc += c[i].v;
            if (u < acc) {
                chosen = c[i].id;
                break;
            }
        }
    }
    if (chosen < 0) return -1;
    if (logprob_out) *logprob_out = s->proc[chosen] - s->proc_lse;
    return chosen;
}

/* ==== Log-probabilities ==== */

int sampler_top_logprobs(const sampler *s, int n, int32_t *ids, float *logprobs) {
    if (!s || n <= 0 || s->n_proc == 0 || !ids || !logprobs) return 0;
    const float *x = s->proc;
    const int vocab = s->n_proc;
    int count = 0;
    if (n <= 64) {
        /* Insertion into a small sorted buffer: O(vocab) for the usual n <= 20. */
        cand buf[64];
        for (int i = 0; i < vocab; i++) {
            if (!(x[i] > -INFINITY)) continue;
            cand cd = {x[i], i};
            if (count == n && !cand_before(&cd, &buf[count - 1])) continue;
            int j = count < n ? count++ : n - 1;
            while (j > 0 && cand_before(&cd, &buf[j - 1])) {
                buf[j] = buf[j - 1];
                j--;
            }
            buf[j] = cd;
        }
        for (int i = 0; i < count; i++) {
            ids[i] = buf[i].id;
            logprobs[i] = buf[i].v - s->proc_lse;
        }
        return count;
    }
    cand *c = malloc((size_t)vocab * sizeof *c);
    if (!c) return 0;
    int k = 0;
    for (int i = 0; i < vocab; i++)
        if (x[i] > -INFINITY) c[k++] = (cand){x[i], i};
    count = n < k ? n : k;
    select_top(c, k, count);
    for (int i = 0; i < count; i++) {
        ids[i] = c[i].id;
        logprobs[i] = c[i].v - s->proc_lse;
    }
    free(c);
    return count;
}
