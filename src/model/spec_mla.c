/* model_spec fields of DeepSeek V3 (model_type deepseek_v3; kimi_k2, the same architecture
 * under its own name): multi-head latent attention and grouped sigmoid MoE routing, as
 * transformers' DeepseekV3Config reads them (defaults are its defaults).
 *
 * The attention runs absorbed (model_mla.c): the KV cache holds one latent head per token of
 * kv_lora_rank + qk_rope_head_dim values, so this sets n_kv_heads = 1 and head_dim to that
 * width; every consumer of the cache geometry (the KV cache, the memory estimate, inspect,
 * the engine) then sees the latent size without knowing about MLA.
 *
 * Not read: num_nextn_predict_layers (the multi-token-prediction layers model.layers.{n}..
 * are extra tensors the forward never asks for), moe_layer_freq (transformers ignores it; every
 * released config has 1), ep_size. */
#include <math.h>
#include <string.h>

#include "model/spec_json.h"

static double yarn_get_mscale(double scale, double mscale) {
    return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

/* A key written as null is "None"; an absent key takes the class default. */
static json_t *raw(const spec_cfg *c, const char *key) {
    json_t *v = c->text ? json_object_get(c->text, key) : NULL;
    return v ? v : json_object_get(c->top, key);
}

int spec_parse_deepseek(const spec_cfg *c, model_spec *s) {
    long long v;
    bool attn_bias = false;
    if (cfg_bool(c, "attention_bias", false, &attn_bias)) return -1;
    if (attn_bias)
        return mx_fail(c->err, "%s: field 'attention_bias' = true is not supported for %s",
                       c->origin, s->model_type);
    s->qkv_bias = s->o_bias = false;
    s->qk_norm = false;

    /* ---- MLA ---- */
    json_t *ql = raw(c, "q_lora_rank");
    s->q_lora_rank = 0;
    if (!ql || !json_is_null(ql)) {
        if (cfg_int(c, "q_lora_rank", false, 1536, 1, 1 << 20, &v)) return -1;
        s->q_lora_rank = (int)v;
    }
    if (cfg_int(c, "kv_lora_rank", false, 512, 1, 1 << 20, &v)) return -1;
    s->kv_lora_rank = (int)v;
    if (cfg_int(c, "qk_nope_head_dim", false, 128, 1, 4096, &v)) return -1;
    s->qk_nope_head_dim = (int)v;
    if (cfg_int(c, "qk_rope_head_dim", false, 64, 2, 4096, &v)) return -1;
    if (v % 2)
        return mx_fail(c->err, "%s: field 'qk_rope_head_dim' = %lld must be even", c->origin, v);
    s->qk_rope_head_dim = (int)v;
    if (cfg_int(c, "v_head_dim", false, 128, 1, 4096, &v)) return -1;
    s->v_head_dim = (int)v;
    if (cfg_bool(c, "rope_interleave", true, &s->rope_interleave)) return -1;
    /* the cache geometry: one latent head [c_kv | k_pe] per token (model_mla.c) */
    s->n_kv_heads = 1;
    s->head_dim = s->kv_lora_rank + s->qk_rope_head_dim;
    /* softmax scale: qk_head_dim^-0.5, times yarn_get_mscale(factor, mscale_all_dim)^2 when
     * the rope is scaled and mscale_all_dim is set (DeepseekV3Attention.__init__) */
    double scale = 1.0 / sqrt((double)(s->qk_nope_head_dim + s->qk_rope_head_dim));
    if (s->rope.type != ROPE_DEFAULT && s->rope.mscale_all_dim > 0) {
        const double m = yarn_get_mscale(s->rope.factor, s->rope.mscale_all_dim);
        scale *= m * m;
    }
    s->attn_scale = (float)scale;

    /* ---- MoE ---- */
    const char *sf = NULL, *tm = NULL;
    if (cfg_str(c, "scoring_func", &sf) || cfg_str(c, "topk_method", &tm)) return -1;
    if (sf && strcmp(sf, "sigmoid"))
        return mx_fail(c->err, "%s: field 'scoring_func' = '%.40s' is not supported (sigmoid)",
                       c->origin, sf);
    if (tm && strcmp(tm, "noaux_tc"))
        return mx_fail(c->err, "%s: field 'topk_method' = '%.40s' is not supported (noaux_tc)",
                       c->origin, tm);
    if (cfg_int(c, "n_routed_experts", false, 256, 1, 4096, &v)) return -1;
    s->n_experts = (int)v;
    if (cfg_int(c, "num_experts_per_tok", false, 8, 1, s->n_experts, &v)) return -1;
    s->n_experts_per_tok = (int)v;
    if (cfg_int(c, "moe_intermediate_size", false, 2048, 1, 1 << 22, &v)) return -1;
    s->moe_intermediate_size = (int)v;
    if (cfg_int(c, "n_shared_experts", false, 1, 0, 4096, &v)) return -1;
    s->n_shared_experts = (int)v;
    if (cfg_int(c, "n_group", false, 8, 1, s->n_experts, &v)) return -1;
    s->moe_n_group = (int)v;
    if (cfg_int(c, "topk_group", false, 4, 1, s->moe_n_group, &v)) return -1;
    s->moe_topk_group = (int)v;
    double rsf;
    if (cfg_num(c, "routed_scaling_factor", 2.5, 0, 1e6, &rsf)) return -1;
    s->routed_scaling_factor = (float)rsf;
    if (cfg_bool(c, "norm_topk_prob", true, &s->norm_topk_prob)) return -1;
    const int per = s->n_experts / s->moe_n_group;
    if (s->n_experts % s->moe_n_group || per < 2)
        return mx_fail(c->err, "%s: field 'n_group' = %d must divide n_routed_experts = %d into "
                       "groups of at least 2", c->origin, s->moe_n_group, s->n_experts);
    if (s->n_experts_per_tok > s->moe_topk_group * per)
        return mx_fail(c->err, "%s: num_experts_per_tok = %d exceeds the %d experts of topk_group "
                       "= %d groups", c->origin, s->n_experts_per_tok, s->moe_topk_group * per,
                       s->moe_topk_group);
    s->moe_grouped_sigmoid = true;
    if (cfg_int(c, "first_k_dense_replace", false, 3, 0, MX_MAX_LAYERS, &v)) return -1;
    for (int i = 0; i < s->n_layers; i++) s->layer_dense_mlp[i] = i < v;
    return 0;
}
