/* Llama 4 text (model_type llama4_text, or llama4 with it nested under text_config): the fields
 * that no other family has, read as transformers' Llama4TextConfig (4.5x and 5.x) fills them.
 *
 *   intermediate_size       expert width and shared-expert width (MoE layers)
 *   intermediate_size_mlp   dense MLP width (the other layers)
 *   moe_layers              explicit MoE layer list, else range(step - 1, L, step) with
 *                           step = interleave_moe_layer_step
 *   no_rope_layers          1 = the layer uses RoPE; absent or empty: layer l is NoPE when
 *                           (l + 1) % no_rope_layer_interval == 0
 *   layer_types             "chunked_attention" / "full_attention" per layer; absent: RoPE
 *                           layers are chunked, NoPE layers full
 *   attention_chunk_size    null = no chunking (chunked layers then attend causally)
 *   use_qk_norm             weightless RMS norm of q, k after RoPE (RoPE layers only)
 *   attn_temperature_tuning NoPE layers scale q by log(floor((pos + 1) / floor_scale) + 1)
 *                           * attn_scale + 1 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/spec_json.h"

/* Reads a list of n_layers small integers in [0, hi] (or, with `indices`, a list of layer
 * indices that sets out[i] = 1). Returns 1 when present, 0 absent/empty, -1 on error. */
static int layer_list(const spec_cfg *c, const char *key, model_spec *s, bool indices,
                      uint8_t *out) {
    const char *where;
    json_t *v = cfg_get(c, key, &where);
    if (!v || (json_is_array(v) && json_array_size(v) == 0 && !indices)) return 0;
    if (!json_is_array(v))
        return mx_fail(c->err, "%s: field '%s%s' must be an array", c->origin, where, key);
    const size_t n = json_array_size(v);
    if (!indices && (int)n < s->n_layers)
        return mx_fail(c->err, "%s: field '%s%s' has %zu entries, expected one per layer (%d)",
                       c->origin, where, key, n, s->n_layers);
    if (indices) memset(out, 0, MX_MAX_LAYERS);
    for (size_t i = 0; i < n && (indices || (int)i < s->n_layers); i++) {
        json_t *e = json_array_get(v, i);
        const long long x = json_is_integer(e) ? (long long)json_integer_value(e)
                            : json_is_boolean(e) ? (long long)json_is_true(e) : -1;
        if (indices) {
            if (x < 0 || x >= s->n_layers)
                return mx_fail(c->err, "%s: field '%s%s[%zu]' must be a layer index in [0, %d)",
                               c->origin, where, key, i, s->n_layers);
            out[x] = 1;
        } else {
            if (x != 0 && x != 1)
                return mx_fail(c->err, "%s: field '%s%s[%zu]' must be 0 or 1", c->origin, where,
                               key, i);
            out[i] = (uint8_t)x;
        }
    }
    return 1;
}

static int parse_layers(const spec_cfg *c, model_spec *s) {
    long long v;
    uint8_t use_rope[MX_MAX_LAYERS];
    int rc = layer_list(c, "no_rope_layers", s, false, use_rope);
    if (rc < 0) return -1;
    if (rc == 0) {
        if (cfg_int(c, "no_rope_layer_interval", false, 4, 1, 1 << 20, &v)) return -1;
        for (int l = 0; l < s->n_layers; l++) use_rope[l] = (l + 1) % v != 0;
    }
    for (int l = 0; l < s->n_layers; l++) s->layer_nope[l] = !use_rope[l];

    const char *where;
    json_t *lt = cfg_get(c, "layer_types", &where);
    if (lt) {
        if (!json_is_array(lt) || (int)json_array_size(lt) < s->n_layers)
            return mx_fail(c->err, "%s: field '%slayer_types' must be an array of %d strings",
                           c->origin, where, s->n_layers);
        for (int l = 0; l < s->n_layers; l++) {
            json_t *e = json_array_get(lt, (size_t)l);
            const char *t = json_is_string(e) ? json_string_value(e) : "";
            if (!strcmp(t, "chunked_attention")) s->layer_chunked[l] = 1;
            else if (!strcmp(t, "full_attention")) s->layer_chunked[l] = 0;
            else
                return mx_fail(c->err,
                               "%s: field '%slayer_types[%d]' must be \"chunked_attention\" or "
                               "\"full_attention\" for llama4",
                               c->origin, where, l);
        }
    } else {
        for (int l = 0; l < s->n_layers; l++) s->layer_chunked[l] = use_rope[l];
    }

    /* attention_chunk_size: absent -> 8192 (the class default), null -> no chunking */
    json_t *jc = c->text ? json_object_get(c->text, "attention_chunk_size") : NULL;
    if (!jc) jc = json_object_get(c->top, "attention_chunk_size");
    if (jc && json_is_null(jc)) {
        s->attn_chunk = 0;
    } else {
        if (cfg_int(c, "attention_chunk_size", false, 8192, 1, 1ll << 30, &v)) return -1;
        s->attn_chunk = (int)v;
    }
    return 0;
}

static int parse_moe(const spec_cfg *c, model_spec *s) {
    long long v;
    const int expert_width = s->intermediate_size; /* intermediate_size: experts + shared */
    if (cfg_int(c, "intermediate_size_mlp", false, 16384, 1, 1 << 22, &v)) return -1;
    s->intermediate_size = (int)v; /* the dense layers' width */
    if (cfg_int(c, "num_local_experts", false, 16, 1, 1024, &v)) return -1;
    s->n_experts = (int)v;
    if (cfg_int(c, "num_experts_per_tok", false, 1, 1, s->n_experts < 32 ? s->n_experts : 32, &v))
        return -1;
    s->n_experts_per_tok = (int)v;
    s->moe_intermediate_size = expert_width;
    s->shared_expert_size = expert_width;
    s->norm_topk_prob = false;
    s->moe_routing = MOE_ROUTE_SIGMOID_IN;
    uint8_t moe[MX_MAX_LAYERS];
    const int rc = layer_list(c, "moe_layers", s, true, moe);
    if (rc < 0) return -1;
    if (rc == 0) {
        if (cfg_int(c, "interleave_moe_layer_step", false, 1, 1, 1 << 20, &v)) return -1;
        memset(moe, 0, sizeof moe);
        for (int l = (int)v - 1; l < s->n_layers; l += (int)v) moe[l] = 1;
    }
    for (int l = 0; l < s->n_layers; l++) s->layer_dense_mlp[l] = !moe[l];
    return 0;
}

static int parse_attention(const spec_cfg *c, model_spec *s) {
    s->rope_interleaved = true;
    s->qk_norm = false; /* no q_norm / k_norm weights: the weightless norm below */
    if (cfg_bool(c, "use_qk_norm", true, &s->qk_l2_norm)) return -1;
    /* transformers: a bool; mlx_lm's TextArgs reads it as an int. Either spelling. */
    const char *where;
    json_t *t = cfg_get(c, "attn_temperature_tuning", &where);
    if (!t) s->attn_temp_tuning = true;
    else if (json_is_boolean(t)) s->attn_temp_tuning = json_is_true(t);
    else if (json_is_integer(t)) s->attn_temp_tuning = json_integer_value(t) != 0;
    else
        return mx_fail(c->err, "%s: field '%sattn_temperature_tuning' must be true or false",
                       c->origin, where);
    double f, a;
    if (cfg_num(c, "floor_scale", 8192, 1e-6, 1e12, &f) || cfg_num(c, "attn_scale", 0.1, 0, 1e6, &a))
        return -1;
    s->attn_temp_floor = (float)f;
    s->attn_temp_scale = (float)a;
    if (s->rope.partial_rotary_factor != 1.0)
        return mx_fail(c->err, "%s: llama4 with partial_rotary_factor %g is not supported (the "
                       "whole head is rotated)", c->origin, s->rope.partial_rotary_factor);
    return 0;
}

int spec_parse_llama4(const spec_cfg *c, model_spec *s) {
    return parse_layers(c, s) || parse_moe(c, s) || parse_attention(c, s) ? -1 : 0;
}
