/* MoE routing arithmetic (see moe_route.h). fp32 as transformers computes the router. */
#include "backend/moe_route.h"

#include <math.h>

void mx_route_grouped_sigmoid(const float *logits, const float *bias, int E, int n_group,
                              int topk_group, int k, bool norm, float scale, int *idx, float *w,
                              float *scratch) {
    float *score = scratch;                    /* [E] sigmoid */
    float *choice = scratch + E;               /* [E] score + bias, 0 outside the kept groups */
    float *gscore = scratch + 2 * E;           /* [n_group] */
    float *keep = scratch + 2 * E + n_group;   /* [n_group] 1 = kept */
    const int per = E / n_group;
    for (int e = 0; e < E; e++) {
        score[e] = 1.0f / (1.0f + expf(-logits[e]));
        choice[e] = score[e] + (bias ? bias[e] : 0.0f);
    }
    /* ---- group scores: the two best choices of each group ---- */
    for (int g = 0; g < n_group; g++) {
        const float *c = choice + g * per;
        int a = 0, b = -1;
        for (int i = 1; i < per; i++)
            if (c[i] > c[a]) a = i;
        for (int i = 0; i < per; i++)
            if (i != a && (b < 0 || c[i] > c[b])) b = i;
        gscore[g] = c[a] + c[b];
        keep[g] = 0.0f;
    }
    /* ---- keep the topk_group best groups; the others' choices become 0 ---- */
    for (int j = 0; j < topk_group; j++) {
        int best = -1;
        for (int g = 0; g < n_group; g++)
            if (keep[g] == 0.0f && (best < 0 || gscore[g] > gscore[best])) best = g;
        keep[best] = 1.0f;
    }
    for (int g = 0; g < n_group; g++)
        if (keep[g] == 0.0f)
            for (int i = 0; i < per; i++) choice[g * per + i] = 0.0f;
    /* ---- top-k experts by choice; weights from the sigmoid scores ---- */
    float sum = 0.0f;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool used = false;
            for (int t = 0; t < j && !used; t++) used = idx[t] == e;
            if (!used && (best < 0 || choice[e] > choice[best])) best = e;
        }
        idx[j] = best;
        w[j] = score[best];
        sum += w[j];
    }
    const float d = norm ? sum + 1e-20f : 1.0f;
    for (int j = 0; j < k; j++) w[j] = w[j] / d * scale;
}
