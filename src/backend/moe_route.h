/* MoE routing rules that are plain host arithmetic on one row of router logits, shared by
 * backends (the CPU runs them per row; a device backend may run them on copied-back logits)
 * and by the tests, which check them against a naive transcription of transformers. */
#ifndef MLXCEL_BACKEND_MOE_ROUTE_H
#define MLXCEL_BACKEND_MOE_ROUTE_H

#include <stdbool.h>

/* DeepSeek V3 (transformers DeepseekV3TopkRouter, noaux_tc): scores = sigmoid(logits[E]);
 * choice = scores + bias (bias NULL = zeros); each of n_group groups of E / n_group experts
 * scores the sum of its two best choices; the topk_group best groups stay, the others' choices
 * become 0 (as transformers' masked_fill(0.0)); the k best choices are the experts. Their
 * weights are their sigmoid scores, divided by (sum + 1e-20) when norm, times scale.
 * Ties go to the lower index. idx[k], w[k] in descending choice order; scratch [2 * E +
 * 2 * n_group] floats. */
void mx_route_grouped_sigmoid(const float *logits, const float *bias, int E, int n_group,
                              int topk_group, int k, bool norm, float scale, int *idx, float *w,
                              float *scratch);

#endif
