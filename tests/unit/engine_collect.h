/* What the engine streams back, per sequence (tests only): generated tokens, the first
 * sampled position's logits, the finish reason and cached-prefix length. Used by the golden
 * and tensor-parallel tests through the engine's on_token / on_logits / on_finish callbacks. */
#ifndef MLXCEL_TESTS_ENGINE_COLLECT_H
#define MLXCEL_TESTS_ENGINE_COLLECT_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

#define EC_MAX_SEQ 8
#define EC_MAX_TOK 256

typedef struct ec_collect {
    int64_t ids[EC_MAX_SEQ];            /* engine sequence id per slot */
    int32_t toks[EC_MAX_SEQ][EC_MAX_TOK];
    int n[EC_MAX_SEQ];
    float *first_logits[EC_MAX_SEQ];    /* [vocab], malloc'd; ec_free releases */
    int vocab;
    int n_cached[EC_MAX_SEQ];
    engine_finish why[EC_MAX_SEQ];
} ec_collect;

static inline int ec_slot(ec_collect *c, int64_t id) {
    for (int i = 0; i < EC_MAX_SEQ; i++)
        if (c->ids[i] == id) return i;
    return -1;
}

static inline int ec_on_token(void *u, int64_t id, int32_t t, float lp) {
    (void)lp;
    ec_collect *c = u;
    const int i = ec_slot(c, id);
    if (i >= 0 && c->n[i] < EC_MAX_TOK) c->toks[i][c->n[i]++] = t;
    return 0;
}

static inline void ec_on_logits(void *u, int64_t id, const float *lg, int vocab) {
    ec_collect *c = u;
    const int i = ec_slot(c, id);
    if (i >= 0 && !c->first_logits[i]) {
        c->first_logits[i] = malloc((size_t)vocab * sizeof(float));
        memcpy(c->first_logits[i], lg, (size_t)vocab * sizeof(float));
    }
}

static inline void ec_on_finish(void *u, int64_t id, engine_finish why, const engine_seq_stats *st) {
    ec_collect *c = u;
    const int i = ec_slot(c, id);
    if (i >= 0) {
        c->why[i] = why;
        c->n_cached[i] = st->n_cached;
    }
}

static inline void ec_free(ec_collect *c) {
    for (int i = 0; i < EC_MAX_SEQ; i++) {
        free(c->first_logits[i]);
        c->first_logits[i] = NULL;
    }
}

#endif
