/* Memory estimate arithmetic. Everything in 64-bit: 1M context x 256 layers overflows 32. */
#include "model/estimate.h"

#include <string.h>

const char *kv_dtype_name(mx_kv_dtype t) {
    return t == MX_KV_INT8 ? "int8" : t == MX_KV_BF16 ? "bf16" : t == MX_KV_F32 ? "f32" : "f16";
}

int kv_dtype_parse(const char *s, mx_kv_dtype *out) {
    if (!s) return -1;
    if (!strcmp(s, "f16") || !strcmp(s, "fp16") || !strcmp(s, "float16")) *out = MX_KV_F16;
    else if (!strcmp(s, "bf16") || !strcmp(s, "bfloat16")) *out = MX_KV_BF16;
    else if (!strcmp(s, "f32") || !strcmp(s, "fp32") || !strcmp(s, "float32")) *out = MX_KV_F32;
    else if (!strcmp(s, "int8") || !strcmp(s, "q8")) *out = MX_KV_INT8;
    else return -1;
    return 0;
}

void estimate_memory(const model_spec *s, uint64_t params, uint64_t weights_bytes, int ctx,
                     int batch, mx_kv_dtype kv, mx_mem_estimate *out) {
    memset(out, 0, sizeof *out);
    out->params = params;
    out->weights_bytes = weights_bytes;
    out->ctx = ctx;
    out->batch = batch;

    /* ==== KV cache ==== */
    /* Per layer and token: K and V, n_kv_heads x head_dim elements each. int8 adds one f32
     * scale per head per token for K and for V. */
    uint64_t elems = 2ull * (uint64_t)s->n_kv_heads * (uint64_t)s->head_dim;
    uint64_t elem_bytes = kv == MX_KV_INT8 ? 1 : kv == MX_KV_F32 ? 4 : 2;
    uint64_t scale_bytes = kv == MX_KV_INT8 ? 2ull * (uint64_t)s->n_kv_heads * 4 : 0;
    uint64_t layer_tok = elems * elem_bytes + scale_bytes;
    uint64_t total = 0;
    for (int i = 0; i < s->n_layers; i++) {
        bool sliding = s->layer_sliding[i] && s->sliding_window > 0;
        uint64_t toks = (uint64_t)ctx;
        if (sliding && (uint64_t)s->sliding_window < toks) toks = (uint64_t)s->sliding_window;
        out->n_sliding_layers += sliding;
        total += layer_tok * toks;
        out->kv_bytes_per_token += layer_tok;
        out->kv_scale_bytes_per_token += scale_bytes;
    }
    out->kv_bytes_total = total * (uint64_t)batch;

    /* ==== Activations ==== */
    /* One step of `batch` sequences each prefilling a chunk of min(ctx, 512) tokens, fp32
     * working buffers per token: residual, normed input and attention output (3 x hidden),
     * q/k/v (q_dim + 2 kv_dim), gate and up (2 x ffn width), router logits (n_experts).
     * Attention is fused (no [tokens x ctx] score matrix). Plus fp32 logits for one row per
     * sequence. */
    uint64_t ffn = 0;
    bool any_dense = !s->n_experts;
    for (int i = 0; i < s->n_layers && !any_dense; i++) any_dense = s->layer_dense_mlp[i];
    if (any_dense) ffn = (uint64_t)s->intermediate_size;
    if (s->n_experts) {
        uint64_t moe = (uint64_t)s->n_experts_per_tok * (uint64_t)s->moe_intermediate_size;
        if (moe > ffn) ffn = moe;
    }
    uint64_t chunk = (uint64_t)(ctx < ESTIMATE_PREFILL_CHUNK ? ctx : ESTIMATE_PREFILL_CHUNK);
    uint64_t tokens = chunk * (uint64_t)batch;
    uint64_t per_tok = 4ull * (3ull * (uint64_t)s->hidden_size +
                               (uint64_t)s->n_heads * (uint64_t)s->head_dim +
                               2ull * (uint64_t)s->n_kv_heads * (uint64_t)s->head_dim + 2ull * ffn +
                               (uint64_t)s->n_experts);
    out->activation_bytes = tokens * per_tok + (uint64_t)batch * (uint64_t)s->vocab_size * 4ull;

    /* ==== Headroom and total ==== */
    uint64_t sum = weights_bytes + out->kv_bytes_total + out->activation_bytes;
    out->headroom_bytes = ESTIMATE_HEADROOM_FIXED + sum / 100 * ESTIMATE_HEADROOM_PERCENT;
    out->total_bytes = sum + out->headroom_bytes;
}
