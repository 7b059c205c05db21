/* TEMPORARY greedy stand-in (see sampler_fallback.h). */
#include "engine/sampler_fallback.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct sampler { sampling_params p; };

void sampling_params_default(sampling_params *p) {
    memset(p, 0, sizeof *p);
    p->temperature = 0.8f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->repeat_penalty = 1.0f;
    p->repeat_last_n = 64;
}

sampler *sampler_new(const sampling_params *p) {
    sampler *s = calloc(1, sizeof *s);
    if (s) s->p = *p;
    return s;
}

void sampler_free(sampler *s) { free(s); }

int32_t sampler_sample(sampler *s, float *logits, int vocab, const int32_t *history, int n_history,
                       float *logprob_out) {
    (void)s; (void)history; (void)n_history;
    int best = 0;
    for (int i = 1; i < vocab; i++)
        if (logits[i] > logits[best]) best = i;
    if (logprob_out) {
        double z = 0;
        for (int i = 0; i < vocab; i++) z += exp((double)logits[i] - logits[best]);
        *logprob_out = (float)-log(z);
    }
    return best;
}
