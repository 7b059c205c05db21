/* CPU MoE: softmax routing, top-k, optional renormalisation (or llama4's sigmoid of the top-k
 * logits scaling each expert's input), then per-expert dispatch over the rows routed to it. Accumulation into each row follows ascending expert index, as transformers
 * does, so a row's value does not depend on which other rows share the step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "backend/moe_route.h"
#include "backend/cpu/cpu_quant.h"

/* Top-k of probs[E] by value (ties: lower index first). */
static void topk(const float *probs, int E, int k, int *idx, float *val) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int t = 0; t < j; t++) taken |= idx[t] == e;
            if (taken) continue;
            if (best < 0 || probs[e] > probs[best]) best = e;
        }
        idx[j] = best;
        val[j] = probs[best];
    }
}

/* Expert e's projection: dense or quantized (the same canonical dot either way). */
static void expert_matmul(mx_tensor *out, const mx_tensor *x, const mx_tensor *w,
                          const mx_qweight *q, int e) {
    if (q) mlxq_cpu_matmul_q(out, x, &q[e], NULL);
    else cpu_matmul(out, x, &w[e], NULL);
}

int cpu_moe(mx_tensor *out, const mx_tensor *x, const mx_tensor *router_logits,
            const mx_moe_experts *ex, const mx_moe_params *p, mx_error *err) {
    const int n = (int)x->shape[0], H = (int)x->shape[1], E = p->n_experts, K = p->top_k;
    const int ep = p->en > 0 ? p->e0 : 0; /* a present expert (TP ranks hold a range) */
    const int I = (int)(ex->qgate ? ex->qgate[ep].w.shape[0] : ex->gate[ep].shape[0]);
    int *sel = malloc((size_t)n * K * sizeof(int));        /* [n, K] chosen experts */
    float *wsel = malloc((size_t)n * K * sizeof(float));   /* [n, K] their weights */
    float *probs = malloc((size_t)(4 * E) * sizeof(float)); /* [E]; grouped: [4E] */
    int32_t *rows = malloc((size_t)n * sizeof(int32_t));   /* rows routed to one expert */
    float *rw = malloc((size_t)n * sizeof(float));         /* their weights */
    float *xe = malloc((size_t)n * H * sizeof(float));     /* [m, H] gathered inputs */
    float *g = malloc((size_t)n * I * sizeof(float));      /* [m, I] */
    float *u = malloc((size_t)n * I * sizeof(float));      /* [m, I] */
    float *y = malloc((size_t)n * H * sizeof(float));      /* [m, H] */
    int rc = 0;
    if (!sel || !wsel || !probs || !rows || !rw || !xe || !g || !u || !y) {
        rc = mx_fail(err, "moe: out of memory for %d rows", n);
        goto done;
    }
    /* ---- routing ---- */
    const bool sig_in = p->routing == MX_MOE_ROUTE_SIGMOID_IN;
    float *bias32 = NULL; /* grouped routing: [E] correction bias in fp32, after the scratch */
    if (p->ds_grouped && p->ds_bias && mx_tensor_present(p->ds_bias)) {
        bias32 = probs + 3 * E;
        cpu_row_to_f32(bias32, p->ds_bias->data, p->ds_bias->dtype, E);
    }
    for (int i = 0; i < n; i++) {
        const float *lg = cpu_row_ptr(router_logits, i);
        if (p->ds_grouped) { /* scratch 2E + 2 n_group <= 3E (groups of >= 2) */
            mx_route_grouped_sigmoid(lg, bias32, E, p->ds_n_group, p->ds_topk_group, K,
                                     p->norm_topk, p->ds_scale, sel + i * K, wsel + i * K, probs);
            continue;
        }
        if (sig_in) { /* llama4: top-k of the logits themselves, each scored sigmoid(logit) */
            topk(lg, E, K, sel + i * K, wsel + i * K);
            for (int j = 0; j < K; j++) wsel[i * K + j] = 1.0f / (1.0f + expf(-wsel[i * K + j]));
            continue;
        }
        float m = -INFINITY, s = 0.0f;
        for (int e = 0; e < E; e++) m = lg[e] > m ? lg[e] : m;
        for (int e = 0; e < E; e++) s += probs[e] = expf(lg[e] - m);
        for (int e = 0; e < E; e++) probs[e] /= s;
        topk(probs, E, K, sel + i * K, wsel + i * K);
        if (p->norm_topk) {
            float t = 0.0f;
            for (int j = 0; j < K; j++) t += wsel[i * K + j];
            for (int j = 0; j < K; j++) wsel[i * K + j] /= t;
        }
    }
    /* ---- dispatch ---- */
    for (int i = 0; i < n; i++) memset(cpu_row_ptr(out, i), 0, (size_t)H * sizeof(float));
    /* tensor parallelism: this rank's experts only (p->en = 0: all) */
    const int e_lo = p->en > 0 ? p->e0 : 0, e_hi = p->en > 0 ? p->e0 + p->en : E;
    for (int e = e_lo; e < e_hi; e++) {
        int m = 0;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < K; j++)
                if (sel[i * K + j] == e) {
                    rows[m] = i;
                    rw[m++] = wsel[i * K + j];
                }
        if (!m) continue;
        for (int r = 0; r < m; r++) memcpy(xe + (size_t)r * H, cpu_row_ptr(x, rows[r]), (size_t)H * 4);
        mx_tensor txe = mx_tensor_2d(xe, MX_F32, m, H, MX_DEV_CPU);
        mx_tensor tg = mx_tensor_2d(g, MX_F32, m, I, MX_DEV_CPU);
        mx_tensor tu = mx_tensor_2d(u, MX_F32, m, I, MX_DEV_CPU);
        mx_tensor ty = mx_tensor_2d(y, MX_F32, m, H, MX_DEV_CPU);
        if (sig_in) /* the expert sees s x (transformers scales the input, not the output) */
            for (int r = 0; r < m; r++)
                for (int h = 0; h < H; h++) xe[(size_t)r * H + h] *= rw[r];
        expert_matmul(&tg, &txe, ex->gate, ex->qgate, e);
        expert_matmul(&tu, &txe, ex->up, ex->qup, e);
        cpu_glu(&tg, &tg, &tu, p->activation);
        expert_matmul(&ty, &tg, ex->down, ex->qdown, e);
        for (int r = 0; r < m; r++) {
            float *o = cpu_row_ptr(out, rows[r]);
            const float w = sig_in ? 1.0f : rw[r];
            for (int h = 0; h < H; h++) o[h] += y[(size_t)r * H + h] * w;
        }
    }
done:
    free(sel); free(wsel); free(probs); free(rows); free(rw); free(xe); free(g); free(u); free(y);
    return rc;
}
