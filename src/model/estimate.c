/* Memory estimate arithmetic. Everything in 64-bit: 1M context x 256 layers overflows 32. */
#include "model/estimate.h"

#include <string.h>

const char *kv_dtype_name(mx_kv_dtype t) {
    switch (t) {
    case MX_KV_INT8: return "int8";
    case MX_KV_BF16: return "bf16";
    case MX_KV_F32: return "f32";
    case MX_KV_Q8_0: return "q8_0";
    case MX_KV_Q4_0: return "q4_0";
    case MX_KV_TURBO2: return "turbo2";
    case MX_KV_TURBO3: return "turbo3";
    case MX_KV_TURBO4: return "turbo4";
    default: return "f16";
    }
}

int kv_dtype_block(mx_kv_dtype t) { return t >= MX_KV_Q8_0 && t <= MX_KV_TURBO4 ? 32 : 1; }

uint64_t kv_dtype_head_bytes(mx_kv_dtype t, int head_dim, uint64_t *scale_bytes) {
    const uint64_t D = (uint64_t)head_dim, blocks = (D + 31) / 32;
    uint64_t sc = 0, b;
    switch (t) {
    case MX_KV_INT8: sc = 4, b = D + sc; break;           /* int8 codes + one f32 scale */
    case MX_KV_F32: b = 4 * D; break;
    case MX_KV_Q8_0: sc = 2 * blocks, b = blocks * 34; break; /* fp16 d + 32 int8 */
    case MX_KV_Q4_0: sc = 2 * blocks, b = blocks * 18; break; /* fp16 d + 16 bytes of nibbles */
    case MX_KV_TURBO2: case MX_KV_TURBO3: case MX_KV_TURBO4: /* fp16 s + 32 codes of 2..4 bits */
        sc = 2 * blocks, b = blocks * (2 + 4 * (uint64_t)(t - MX_KV_TURBO2 + 2));
        break;
    default: b = 2 * D; break;                              /* f16, bf16 */
    }
    if (scale_bytes) *scale_bytes = sc;
    return b;
}

int kv_dtype_parse(const char *s, mx_kv_dtype *out) {
    if (!s) return -1;
    if (!strcmp(s, "f16") || !strcmp(s, "fp16") || !strcmp(s, "float16")) *out = MX_KV_F16;
    else if (!strcmp(s, "bf16") || !strcmp(s, "bfloat16")) *out = MX_KV_BF16;
    else if (!strcmp(s, "f32") || !strcmp(s, "fp32") || !strcmp(s, "float32")) *out = MX_KV_F32;
    else if (!strcmp(s, "int8") || !strcmp(s, "q8")) *out = MX_KV_INT8;
    else if (!strcmp(s, "q8_0")) *out = MX_KV_Q8_0;
    else if (!strcmp(s, "q4_0")) *out = MX_KV_Q4_0;
    else if (!strcmp(s, "turbo2")) *out = MX_KV_TURBO2;
    else if (!strcmp(s, "turbo3")) *out = MX_KV_TURBO3;
    else if (!strcmp(s, "turbo4")) *out = MX_KV_TURBO4;
    else return -1;
    return 0;
}

void estimate_memory(const model_spec *s, uint64_t params, uint64_t weights_bytes, int ctx,
                     int batch, mx_kv_dtype kv, mx_mem_estimate *out) {
    estimate_memory_kv(s, params, weights_bytes, ctx, batch, kv, kv, out);
}

void estimate_memory_kv(const model_spec *s, uint64_t params, uint64_t weights_bytes, int ctx,
                        int batch, mx_kv_dtype kv_k, mx_kv_dtype kv_v, mx_mem_estimate *out) {
    memset(out, 0, sizeof *out);
    out->params = params;
    out->weights_bytes = weights_bytes;
    out->ctx = ctx;
    out->batch = batch;

    /* ==== KV cache ==== */
    /* Per layer and token: K and V, n_kv_heads rows of head_dim values each, in their types
     * (kv_dtype_head_bytes: int8 adds one f32 scale per head, q8_0 / q4_0 one fp16 per block). */
    uint64_t sk, sv;
    const uint64_t hk = kv_dtype_head_bytes(kv_k, s->head_dim, &sk);
    uint64_t hv = kv_dtype_head_bytes(kv_v, s->head_dim, &sv);
    if (s->kv_lora_rank > 0 && kv_k == kv_v) hv = sv = 0; /* MLA, one type: one pool is both */
    uint64_t scale_bytes = (uint64_t)s->n_kv_heads * (sk + sv);
    uint64_t layer_tok = (uint64_t)s->n_kv_heads * (hk + hv);
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
     * q/k/v (q_dim + 2 kv_dim), gate and up (2 x ffn width), router logits (n_experts);
     * a shared expert (llama4) adds its width to the MoE's and one hidden row for its output.
     * Chunked attention (llama4) keeps every key in the cache: no KV saving, unlike windows.
     * Attention is fused (no [tokens x ctx] score matrix). Plus fp32 logits for one row per
     * sequence. */
    uint64_t ffn = 0;
    bool any_dense = !s->n_experts;
    for (int i = 0; i < s->n_layers && !any_dense; i++) any_dense = s->layer_dense_mlp[i];
    if (any_dense) ffn = (uint64_t)s->intermediate_size;
    if (s->n_experts) {
        uint64_t moe = (uint64_t)s->n_experts_per_tok * (uint64_t)s->moe_intermediate_size +
                       (uint64_t)s->shared_expert_size;
        if (moe > ffn) ffn = moe;
    }
    uint64_t chunk = (uint64_t)(ctx < ESTIMATE_PREFILL_CHUNK ? ctx : ESTIMATE_PREFILL_CHUNK);
    uint64_t tokens = chunk * (uint64_t)batch;
    uint64_t per_tok = 4ull * ((s->shared_expert_size > 0 ? 4ull : 3ull) * (uint64_t)s->hidden_size +
                               (uint64_t)s->n_heads * (uint64_t)s->head_dim +
                               2ull * (uint64_t)s->n_kv_heads * (uint64_t)s->head_dim + 2ull * ffn +
                               (uint64_t)s->n_experts);
    out->activation_bytes = tokens * per_tok + (uint64_t)batch * (uint64_t)s->vocab_size * 4ull;

    /* ==== Headroom and total ==== */
    uint64_t sum = weights_bytes + out->kv_bytes_total + out->activation_bytes;
    out->headroom_bytes = ESTIMATE_HEADROOM_FIXED + sum / 100 * ESTIMATE_HEADROOM_PERCENT;
    out->total_bytes = sum + out->headroom_bytes;
}
