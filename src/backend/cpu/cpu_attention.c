/* CPU KV write and attention over physical KV rows (dense and paged alike, see backend.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"

/* ==== KV write ==== */
void cpu_kv_write(mx_tensor *k_pool, mx_tensor *v_pool, const mx_tensor *k, const mx_tensor *v,
                  const mx_attn_batch *b) {
    /* pools: [n_phys_rows, n_kv_heads, head_dim] f32; k, v: [n, n_kv_heads, head_dim] f32 */
    const size_t row_bytes = (size_t)(k->shape[1] * k->shape[2]) * sizeof(float);
    for (int i = 0; i < b->n_rows; i++) {
        memcpy(cpu_row_ptr(k_pool, b->write_rows[i]), cpu_row_ptr(k, i), row_bytes);
        memcpy(cpu_row_ptr(v_pool, b->write_rows[i]), cpu_row_ptr(v, i), row_bytes);
    }
}

void cpu_kv_copy_rows(mx_tensor *pool, int64_t dst_row, int64_t src_row, int64_t n_rows) {
    const size_t row_bytes = (size_t)pool->stride[0] * mx_dtype_size(pool->dtype);
    memmove(cpu_row_ptr(pool, dst_row), cpu_row_ptr(pool, src_row), row_bytes * (size_t)n_rows);
}

/* ==== Attention ==== */
static inline int64_t phys_row(const mx_attn_batch *b, int seq, int pos) {
    const int32_t *table = b->block_table + (size_t)seq * (size_t)b->table_stride;
    return (int64_t)table[pos / b->block_size] * b->block_size + pos % b->block_size;
}

void cpu_attention(mx_tensor *out, const mx_tensor *q, const mx_tensor *k_pool,
                   const mx_tensor *v_pool, const mx_attn_batch *b, const mx_attn_params *p) {
    const int H = p->n_heads, G = p->n_heads / p->n_kv_heads, D = p->head_dim;
    const int64_t total = (int64_t)b->n_rows * H;
    int64_t work = 0; /* key visits, to keep tiny steps on the calling thread */
    for (int i = 0; i < b->n_rows; i++) work += (int64_t)(b->pos[i] + 1) * H * D;
#pragma omp parallel if (work >= (1 << 17))
    {
        float *acc = malloc((size_t)D * sizeof(float)); /* [D] running sum of p * v */
#pragma omp for schedule(dynamic, 4)
        for (int64_t t = 0; t < total; t++) {
            const int i = (int)(t / H), h = (int)(t % H), kvh = h / G;
            const float *qv = (const float *)cpu_row_ptr(q, i) + (size_t)h * D;
            float *o = (float *)cpu_row_ptr(out, i) + (size_t)h * D;
            const int pos = b->pos[i], seq = b->seq[i];
            const int start = p->window > 0 && pos - p->window + 1 > 0 ? pos - p->window + 1 : 0;
            /* Online softmax (running max m, normaliser l), one pass over the keys. */
            float m = -INFINITY, l = 0.0f;
            memset(acc, 0, (size_t)D * sizeof(float));
            for (int kp = start; kp <= pos; kp++) {
                const int64_t r = phys_row(b, seq, kp);
                const float *kv = (const float *)cpu_row_ptr(k_pool, r) + (size_t)kvh * D;
                const float *vv = (const float *)cpu_row_ptr(v_pool, r) + (size_t)kvh * D;
                float s = cpu_dot_f32(qv, kv, D) * p->scale;
                if (p->softcap > 0.0f) s = p->softcap * tanhf(s / p->softcap);
                if (s > m) {
                    const float c = expf(m - s); /* 0 on the first key (m = -inf) */
                    l *= c;
                    for (int d = 0; d < D; d++) acc[d] *= c;
                    m = s;
                }
                const float e = expf(s - m);
                l += e;
                for (int d = 0; d < D; d++) acc[d] += e * vv[d];
            }
            const float inv = l > 0.0f ? 1.0f / l : 0.0f;
            for (int d = 0; d < D; d++) o[d] = acc[d] * inv;
        }
        free(acc);
    }
}
