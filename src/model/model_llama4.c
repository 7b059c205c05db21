/* Llama 4's weight layout, as host copies the model owns (model_load.c binds them like any
 * checkpoint tensor):
 *
 * - RoPE on interleaved pairs. transformers rotates (x[2i], x[2i+1]) by frequency i; the
 *   backends rotate (x[i], x[i + D/2]). Permuting the output rows of q_proj and k_proj per
 *   head (even dims first, then odd) makes the half-split rope compute exactly the interleaved
 *   one on permuted vectors; q.k is invariant under a permutation shared by q and k, the
 *   weightless q/k norm is a per-head scalar, and v is untouched, so attention outputs are
 *   unchanged. Packed MLX rows are whole rows of the output dimension: permuting them with
 *   their scales and biases is exact too.
 * - transformers' fused experts: gate_up_proj [E, H, 2I] (gate = the first I columns) and
 *   down_proj [E, I, H], i.e. [in, out] per expert; the MoE ops take [out, in]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"

void *model_own(model *m, size_t nbytes) {
    if (m->n_host_owned == m->cap_host_owned) {
        const int cap = m->cap_host_owned ? 2 * m->cap_host_owned : 16;
        void **p = realloc(m->host_owned, (size_t)cap * sizeof *p);
        if (!p) return NULL;
        m->host_owned = p;
        m->cap_host_owned = cap;
    }
    void *d = malloc(nbytes ? nbytes : 1);
    if (d) m->host_owned[m->n_host_owned++] = d;
    return d;
}

static bool ends_with(const char *s, const char *suf) {
    const size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* q_proj / k_proj's weight, MLX scales / biases, or bias: the rows to permute. */
static bool is_qk(const char *name) {
    static const char *k_mod[] = {".self_attn.q_proj", ".self_attn.k_proj"};
    static const char *k_part[] = {".weight", ".scales", ".biases", ".bias"};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++) {
            char suf[64];
            snprintf(suf, sizeof suf, "%s%s", k_mod[i], k_part[j]);
            if (ends_with(name, suf)) return true;
        }
    return false;
}

void l4_permute_rows(void *dst, const void *src, int64_t rows, size_t row_bytes, int D) {
    const int half = D / 2;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t head = r / D, j = r % D;
        /* new row j of a head: old row 2j (j < D/2), else old row 2(j - D/2) + 1 */
        const int64_t from = head * D + (j < half ? 2 * j : 2 * (j - half) + 1);
        memcpy((char *)dst + (size_t)r * row_bytes, (const char *)src + (size_t)from * row_bytes,
               row_bytes);
    }
}

mx_tensor l4_weight(void *ctx, const char *name) {
    l4_src *s = ctx;
    mx_tensor t = s->fn(s->ctx, name);
    const int D = s->m->spec.head_dim;
    if (!t.data || t.ndim < 1 || !is_qk(name) || t.shape[0] % D) return t; /* binding checks */
    int64_t inner = 1;
    for (int d = 1; d < t.ndim; d++) inner *= t.shape[d];
    const bool contiguous = t.ndim == 1 || t.stride[0] == inner;
    const size_t row_bytes = (size_t)inner * mx_dtype_size(t.dtype);
    void *dst = contiguous ? model_own(s->m, (size_t)t.shape[0] * row_bytes) : NULL;
    if (!dst) {
        s->oom = 1;
        return (mx_tensor){0};
    }
    l4_permute_rows(dst, t.data, t.shape[0], row_bytes, D);
    t.data = dst;
    return t;
}

/* [E, A, B] -> [E, B, A] (a host copy in the same dtype), NULL data on out of memory. */
mx_tensor l4_transpose_experts(model *m, const mx_tensor *t) {
    const int64_t E = t->shape[0], A = t->shape[1], B = t->shape[2];
    const size_t es = mx_dtype_size(t->dtype);
    char *dst = model_own(m, (size_t)(E * A * B) * es);
    if (!dst) return (mx_tensor){0};
    const char *src = t->data;
    for (int64_t e = 0; e < E; e++)
        for (int64_t a = 0; a < A; a++) {
            const char *row = src + (size_t)(e * t->stride[0] + a * t->stride[1]) * es;
            char *col = dst + (size_t)(e * B * A + a) * es;
            if (es == 2 && t->stride[2] == 1) /* bf16 / f16: the checkpoints' case */
                for (int64_t b = 0; b < B; b++)
                    ((uint16_t *)col)[b * A] = ((const uint16_t *)row)[b];
            else
                for (int64_t b = 0; b < B; b++)
                    memcpy(col + (size_t)(b * A) * es, row + (size_t)(b * t->stride[2]) * es, es);
        }
    return mx_tensor_3d(dst, t->dtype, E, B, A, t->device);
}
