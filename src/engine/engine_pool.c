/* Embedding pooling accumulators. See engine_pool.h. */
#include "engine/engine_pool.h"

#include <stdlib.h>
#include <string.h>

/* ==== Names ==== */
const char *engine_pooling_name(engine_pooling p) {
    switch (p) {
    case ENGINE_POOL_LAST: return "last";
    case ENGINE_POOL_MEAN: return "mean";
    case ENGINE_POOL_CLS: return "cls";
    case ENGINE_POOL_NONE: return "none";
    }
    return "?";
}

int engine_pooling_parse(const char *s, engine_pooling *out) {
    static const engine_pooling all[] = {ENGINE_POOL_LAST, ENGINE_POOL_MEAN, ENGINE_POOL_CLS, ENGINE_POOL_NONE};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(s, engine_pooling_name(all[i]))) {
            *out = all[i];
            return 0;
        }
    return -1;
}

/* ==== Accumulator ==== */
int eng_pool_init(eng_pool *p, engine_pooling kind, int n_prompt, int dim) {
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->dim = dim;
    p->n_prompt = n_prompt;
    const size_t rows = kind == ENGINE_POOL_NONE ? (size_t)n_prompt : 1;
    p->out = malloc(rows * (size_t)dim * sizeof(float));
    if (kind == ENGINE_POOL_MEAN) p->sum = calloc((size_t)dim, sizeof(double));
    if (!p->out || (kind == ENGINE_POOL_MEAN && !p->sum)) {
        eng_pool_free(p);
        return -1;
    }
    return 0;
}

void eng_pool_free(eng_pool *p) {
    free(p->sum);
    free(p->out);
    p->sum = NULL;
    p->out = NULL;
}

void eng_pool_reset(eng_pool *p) {
    p->n_added = 0;
    if (p->sum) memset(p->sum, 0, (size_t)p->dim * sizeof(double));
}

bool eng_pool_wants(const eng_pool *p, int pos) {
    switch (p->kind) {
    case ENGINE_POOL_LAST: return pos == p->n_prompt - 1;
    case ENGINE_POOL_CLS: return pos == 0;
    case ENGINE_POOL_MEAN: case ENGINE_POOL_NONE: return true;
    }
    return false;
}

void eng_pool_add(eng_pool *p, int pos, const float *h) {
    const size_t d = (size_t)p->dim;
    if (p->kind == ENGINE_POOL_MEAN) {
        for (size_t i = 0; i < d; i++) p->sum[i] += (double)h[i];
        p->n_added++;
    } else if (p->kind == ENGINE_POOL_NONE) {
        memcpy(p->out + (size_t)pos * d, h, d * sizeof(float));
    } else {
        memcpy(p->out, h, d * sizeof(float));
    }
}

const float *eng_pool_result(eng_pool *p, int *n_vec) {
    *n_vec = p->kind == ENGINE_POOL_NONE ? p->n_prompt : 1;
    if (p->kind == ENGINE_POOL_MEAN && p->n_added > 0)
        for (int i = 0; i < p->dim; i++) p->out[i] = (float)(p->sum[i] / (double)p->n_added);
    return p->out;
}
