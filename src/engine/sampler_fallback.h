#define MLXCEL_SAMPLER_FALLBACK 1
/* TEMPORARY: greedy-only stand-in with the API of src/engine/sampler.h (reference branch).
 * Deleted when that lands; only temperature 0 is honoured here. */
#ifndef MLXCEL_ENGINE_SAMPLER_FALLBACK_H
#define MLXCEL_ENGINE_SAMPLER_FALLBACK_H

#include <stdint.h>

typedef struct sampling_logit_bias { int32_t token; float bias; } sampling_logit_bias;

typedef struct sampling_params {
    float temperature;
    int top_k;
    float top_p, min_p;
    float repeat_penalty;
    int repeat_last_n;
    float presence_penalty, frequency_penalty;
    const sampling_logit_bias *logit_bias;
    int n_logit_bias;
    uint64_t seed;
} sampling_params;

typedef struct sampler sampler;

void sampling_params_default(sampling_params *p);
sampler *sampler_new(const sampling_params *p);
void sampler_free(sampler *s);
int32_t sampler_sample(sampler *s, float *logits, int vocab, const int32_t *history, int n_history,
                       float *logprob_out);

#endif
