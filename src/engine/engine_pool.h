/* Pooling of an embedding request's final hidden states, position by position as the engine's
 * steps compute them (engine.c). Private to the engine.
 *
 * Positions arrive in ascending order (prefill chunks in order, rows of a chunk in order), and
 * the mean sums them in double in that order, so the result depends on the positions' values
 * only: chunk sizes, the batch and preemption (which restarts the sum) never change its bits. */
#ifndef MLXCEL_ENGINE_ENGINE_POOL_H
#define MLXCEL_ENGINE_ENGINE_POOL_H

#include <stdbool.h>

#include "engine/engine.h"

typedef struct eng_pool {
    engine_pooling kind;
    int dim;        /* hidden size */
    int n_prompt;   /* positions of the sequence */
    int n_added;    /* positions summed (mean) */
    double *sum;    /* [dim] mean */
    float *out;     /* [n_prompt, dim] none; else [dim] */
} eng_pool;

/* 0, or -1 out of memory. */
int eng_pool_init(eng_pool *p, engine_pooling kind, int n_prompt, int dim);
void eng_pool_free(eng_pool *p);
/* Back to nothing summed (the sequence's KV was released and it is recomputed). */
void eng_pool_reset(eng_pool *p);
/* Whether the hidden state of position pos is needed. */
bool eng_pool_wants(const eng_pool *p, int pos);
/* Takes the state h [dim] of position pos (one eng_pool_wants said yes to). */
void eng_pool_add(eng_pool *p, int pos, const float *h);
/* After the last position: the pooled vector(s) [*n_vec, dim]. */
const float *eng_pool_result(eng_pool *p, int *n_vec);

#endif
