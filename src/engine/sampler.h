/* Token sampler: logit bias, repetition/presence/frequency penalties, greedy or
 * temperature + top-k + top-p + min-p sampling with a seeded PRNG, and log-probabilities.
 *
 * Processing order for one call of sampler_sample():
 *   1. logit bias        logits[id] += bias (a bias of -INFINITY bans the token)
 *   2. penalties         over the last repeat_last_n history ids (-1: all, 0: none):
 *                        repeat (llama.cpp/HF): logit > 0 ? logit / r : logit * r, once per
 *                        distinct id; then OpenAI: logit -= frequency * count + presence * (count > 0)
 *   3. greedy            temperature <= 0: argmax, the lowest id wins a tie; no PRNG draw
 *   4. temperature       logits /= temperature
 *   5. top-k             keep the k largest (ties broken by lower id)
 *   6. softmax
 *   7. top-p             keep the smallest prefix (by descending probability) whose cumulative
 *                        probability reaches top_p (at least one token)
 *   8. min-p             keep tokens with p >= min_p * p_max
 *   9. renormalise and draw one token with the PRNG
 * NaN logits are treated as -INFINITY. Top-p and min-p both keep a prefix of the descending
 * order computed from the same (un-renormalised) probabilities, so min-p is applied first
 * internally to shrink the sort; the kept set is exactly that of the order above.
 *
 * PRNG: xoshiro256** (Blackman & Vigna), its 256-bit state seeded from `seed` with splitmix64.
 * One 53-bit uniform double per sampled (non-greedy) token. Same seed + same logits sequence
 * => same tokens, on every platform.
 *
 * Log-probabilities: the "processed distribution" is log-softmax of the logits after steps 1-2
 * and, when sampling, step 4 (temperature 1 for greedy); it is taken before top-k/p/min-p
 * truncation, so a token that could not be drawn still has its model log-probability.
 */
#ifndef MLXCEL_ENGINE_SAMPLER_H
#define MLXCEL_ENGINE_SAMPLER_H

#include <stdint.h>

#include "base/error.h"

typedef struct mx_logit_bias {
    int32_t id;
    float bias;
} mx_logit_bias;

typedef struct sampling_params {
    float temperature;       /* <= 0: greedy (argmax, lowest id wins ties) */
    int top_k;               /* <= 0: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off (relative to the max probability) */
    float repeat_penalty;    /* 1: off; llama.cpp/HF: logit>0 ? logit/r : logit*r over the window */
    int repeat_last_n;       /* window for repeat/presence/frequency penalties; -1 = all, 0 = none */
    float presence_penalty;  /* OpenAI: -= presence * (count>0) */
    float frequency_penalty; /* OpenAI: -= frequency * count */
    const mx_logit_bias *logit_bias; /* copied by sampler_new; ids outside [0, vocab) are ignored */
    int n_logit_bias;
    uint64_t seed;           /* same seed + same logits sequence => same tokens */
} sampling_params;

/* temperature 0 (greedy), top_k 0, top_p 1, min_p 0, repeat_penalty 1, repeat_last_n 64,
 * presence/frequency 0, no logit bias, seed 0. */
void sampling_params_default(sampling_params *p);

/* Rejects NaN/inf temperature, top_p, min_p or penalties, repeat_penalty <= 0,
 * repeat_last_n < -1, min_p > 1, n_logit_bias < 0, a NULL logit_bias with n_logit_bias > 0
 * and NaN/+inf biases. Returns 0 or -1 with a message naming the field. */
int sampling_params_validate(const sampling_params *p, mx_error *e);

typedef struct sampler sampler;

/* NULL if p is invalid (see sampling_params_validate) or memory runs out. */
sampler *sampler_new(const sampling_params *p);
void sampler_free(sampler *s);

/* logits [vocab] are modified in place; history = prompt + generated ids. Returns the id,
 * or -1 if no token can be chosen (vocab <= 0, NULL logits, or every token banned / -inf).
 * If logprob_out != NULL, stores log-softmax of the chosen id after penalties/temperature. */
int32_t sampler_sample(sampler *s, float *logits, int vocab, const int32_t *history, int n_history,
                       float *logprob_out);

/* top-n log-probabilities (for OpenAI top_logprobs), from the last call's processed
 * distribution, highest first (ties: lower id first). Returns how many were written
 * (min(n, tokens with a finite log-probability)); 0 before the first call. */
int sampler_top_logprobs(const sampler *s, int n, int32_t *ids, float *logprobs);

#endif
