#include "tune/cpu_paged_decode.h"

#include <math.h>
#include <string.h>

/* ==== Validation ==== */
static int check_args(const cpu_paged_attn_args *a, mx_error *err) {
    if (a->B < 1 || a->n_q_heads < 1 || a->n_kv_heads < 1 || a->head_dim < 1 || a->block_size < 1)
        return mx_fail(err, "paged decode: B %d, heads %d/%d, head_dim %d, block %d must be >= 1",
                       a->B, a->n_q_heads, a->n_kv_heads, a->head_dim, a->block_size);
    if (a->n_q_heads % a->n_kv_heads)
        return mx_fail(err, "paged decode: %d kv heads do not divide %d q heads", a->n_kv_heads,
                       a->n_q_heads);
    if (a->num_splits < 1 || a->num_splits > CPU_PAGED_MAX_SPLITS)
        return mx_fail(err, "paged decode: %d splits (expected 1..%d)", a->num_splits,
                       CPU_PAGED_MAX_SPLITS);
    if (a->workspace_floats <
        cpu_paged_attn_workspace_floats(a->B, a->n_q_heads, a->head_dim, a->num_splits))
        return mx_fail(err, "paged decode: workspace of %zu floats too small", a->workspace_floats);
    if (a->window < 0) return mx_fail(err, "paged decode: window %d must be >= 0", a->window);
    const int n_seqs = a->seq ? a->n_seqs : a->B;
    for (int b = 0; b < a->B; b++) {
        const int len = a->seq_lens[b];
        const int sq = a->seq ? a->seq[b] : b;
        if (sq < 0 || sq >= n_seqs)
            return mx_fail(err, "paged decode: seq[%d] = %d outside [0, %d)", b, sq, n_seqs);
        if (len < 1 || len > a->pt_stride * a->block_size)
            return mx_fail(err, "paged decode: seq_lens[%d] = %d outside [1, %d]", b, len,
                           a->pt_stride * a->block_size);
        const int nb = (len + a->block_size - 1) / a->block_size;
        for (int i = 0; i < nb; i++) {
            const int32_t blk = a->page_table[(size_t)sq * a->pt_stride + i];
            if (blk < 0 || blk >= a->n_blocks)
                return mx_fail(err, "paged decode: page_table[%d][%d] = %d outside [0, %lld)", sq,
                               i, blk, (long long)a->n_blocks);
        }
    }
    return 0;
}

size_t cpu_paged_attn_workspace_floats(int B, int n_q_heads, int head_dim, int num_splits) {
    return (size_t)B * n_q_heads * num_splits * (size_t)(head_dim + 2);
}

/* Eight independent partial sums: without -ffast-math a single accumulator is a serial chain
 * of dependent adds; eight lanes let the compiler use one vector register. */
static inline float dot_f32(const float *a, const float *b, int n) {
    float s[8] = {0};
    int d = 0;
    for (; d + 8 <= n; d += 8)
        for (int j = 0; j < 8; j++) s[j] += a[d + j] * b[d + j];
    float r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (; d < n; d++) r += a[d] * b[d];
    return r;
}

/* y += a * x. GCC's -O2 cost model skips loops that need an alias check or a scalar tail;
 * restrict + omp simd (we build with OpenMP) make the vector loop explicit. */
static inline void axpy_f32(float *restrict y, const float *restrict x, float a, int n) {
#pragma omp simd
    for (int d = 0; d < n; d++) y[d] += a * x[d];
}

static inline void scale_f32(float *restrict y, float a, int n) {
#pragma omp simd
    for (int d = 0; d < n; d++) y[d] *= a;
}

/* ==== Partial attention of one (sequence, kv head, split) ====
 * Reads each K/V row once for the G query heads that share it (GQA), a block at a time:
 * the block's scores first, then one rescale of the running sums per block instead of one per
 * key, which keeps expf() off the per-key critical path. */

/* Keys of query b: positions [*lo, len); blocks [*first, *end). */
static void key_range(const cpu_paged_attn_args *a, int b, int *lo, int *first, int *end) {
    const int len = a->seq_lens[b];
    *lo = a->window > 0 && len > a->window ? len - a->window : 0;
    *first = *lo / a->block_size;
    *end = (len + a->block_size - 1) / a->block_size;
}

static void partial_split(const cpu_paged_attn_args *a, int b, int kvh, int split, int n_splits,
                          float *ws /* [G, D + 2] */) {
    const int D = a->head_dim, bs = a->block_size, Hkv = a->n_kv_heads;
    const int G = a->n_q_heads / Hkv, len = a->seq_lens[b];
    const int32_t *table = a->page_table + (size_t)(a->seq ? a->seq[b] : b) * a->pt_stride;
    int lo, first, end;
    key_range(a, b, &lo, &first, &end);
    const int nb = end - first;
    const int blk0 = first + (int)((int64_t)nb * split / n_splits);
    const int blk1 = first + (int)((int64_t)nb * (split + 1) / n_splits);
    const float *q = a->q + ((size_t)b * a->n_q_heads + (size_t)kvh * G) * D; /* [G, D] */
    float s[64];                                                                /* scores */
    for (int g = 0; g < G; g++) {
        float *w = ws + (size_t)g * (D + 2);
        w[0] = -INFINITY; /* m */
        w[1] = 0.0f;      /* l */
        memset(w + 2, 0, (size_t)D * sizeof(float));
    }
    const size_t row = (size_t)Hkv * D; /* floats per physical KV row */
    for (int blk = blk0; blk < blk1; blk++) {
        /* tokens [t_lo, t_hi) of this block are keys (the window may cut the first block) */
        const int t_lo = blk * bs < lo ? lo - blk * bs : 0;
        const int t_hi = (blk + 1) * bs > len ? len - blk * bs : bs;
        const float *kb = a->k_cache + (size_t)table[blk] * bs * row + (size_t)kvh * D;
        const float *vb = a->v_cache + (size_t)table[blk] * bs * row + (size_t)kvh * D;
        /* Blocks larger than the score buffer go in chunks of 64 tokens. */
        for (int t0 = t_lo; t0 < t_hi; t0 += 64) {
            const int nt = t_hi - t0 < 64 ? t_hi - t0 : 64;
            for (int g = 0; g < G; g++) {
                const float *qg = q + (size_t)g * D;
                float *w = ws + (size_t)g * (D + 2);
                float mx = w[0];
                for (int t = 0; t < nt; t++) {
                    float sc = dot_f32(qg, kb + (size_t)(t0 + t) * row, D) * a->scale;
                    if (a->softcap > 0.0f) sc = a->softcap * tanhf(sc / a->softcap);
                    s[t] = sc;
                    if (sc > mx) mx = sc;
                }
                const float c = expf(w[0] - mx); /* 0 when m was -inf */
                float l = w[1] * c;
                float *acc = w + 2;
                scale_f32(acc, c, D);
                for (int t = 0; t < nt; t++) {
                    const float p = expf(s[t] - mx);
                    l += p;
                    axpy_f32(acc, vb + (size_t)(t0 + t) * row, p, D);
                }
                w[0] = mx;
                w[1] = l;
            }
        }
    }
}

/* ==== Driver: partials in parallel, then the log-sum-exp merge ==== */
int cpu_paged_decode_attn(const cpu_paged_attn_args *a, mx_error *err) {
    if (check_args(a, err)) return -1;
    const int B = a->B, Hq = a->n_q_heads, Hkv = a->n_kv_heads, D = a->head_dim;
    const int S = a->num_splits, G = Hq / Hkv;
    const size_t W = (size_t)D + 2;               /* floats per partial: m, l, acc[D] */
    const int64_t tasks = (int64_t)B * Hkv * S;
    /* ws: [B, Hkv, S, G, D + 2], so one task's partials are contiguous. A split past a
     * sequence's last block stays empty (m = -inf, l = 0) and drops out of the merge. */
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; t++) {
        const int split = (int)(t % S), kvh = (int)(t / S % Hkv), b = (int)(t / S / Hkv);
        int lo, first, end;
        key_range(a, b, &lo, &first, &end);
        const int n_splits = S < end - first ? S : end - first;
        float *ws = a->workspace + (size_t)t * G * W; /* [G, D + 2] */
        if (split < n_splits) {
            partial_split(a, b, kvh, split, n_splits, ws);
        } else {
            for (int g = 0; g < G; g++) {
                ws[(size_t)g * W] = -INFINITY;
                ws[(size_t)g * W + 1] = 0.0f;
            }
        }
    }
    const int64_t heads = (int64_t)B * Hq;
#pragma omp parallel for schedule(static)
    for (int64_t bh = 0; bh < heads; bh++) {
        const int b = (int)(bh / Hq), h = (int)(bh % Hq), kvh = h / G, g = h % G;
        const float *base = a->workspace + (((size_t)b * Hkv + kvh) * S * G + g) * W;
        const size_t step = (size_t)G * W; /* next split of the same q head */
        float M = -INFINITY;
        for (int s = 0; s < S; s++)
            if (base[s * step] > M) M = base[s * step];
        float *o = a->o + (size_t)bh * D;
        memset(o, 0, (size_t)D * sizeof(float));
        float L = 0.0f;
        for (int s = 0; s < S; s++) {
            const float *w = base + s * step;
            if (w[1] == 0.0f) continue; /* empty split */
            const float c = expf(w[0] - M);
            L += w[1] * c;
            for (int d = 0; d < D; d++) o[d] += w[2 + d] * c;
        }
        const float inv = L > 0.0f ? 1.0f / L : 0.0f;
        for (int d = 0; d < D; d++) o[d] *= inv;
    }
    return 0;
}
