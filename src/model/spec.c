/* model_spec from config.json (+ generation_config.json).
 *
 * Accepts transformers 4.x and 5.x spellings. Defaults are the ones transformers applies for
 * each model_type, with one deliberate exception: the core shape fields (hidden_size,
 * num_hidden_layers, and for non-gemma families vocab_size, num_attention_heads,
 * intermediate_size) are required. Inventing a 4096-wide model for a config that lost its
 * hidden_size would only move the error to a confusing tensor-shape mismatch later. Gemma 3
 * multimodal configs really do omit vocab_size/heads/head_dim from text_config, so for gemma3
 * those take Gemma3TextConfig's defaults. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/model_spec.h"
#include "model/spec_json.h"

/* ==== Per-model_type defaults (transformers' config classes) ==== */

typedef struct type_defaults {
    const char *model_type;
    mx_family family;
    double rms_norm_eps;
    double rope_theta;
    int max_pos;
    int n_kv_heads;     /* 0 = num_attention_heads */
    int head_dim_absent; /* head_dim when the key is absent; 0 = hidden / heads */
    int sliding_window; /* default when the key is absent; 0 = none */
    int bos, eos, pad;  /* -1 = None */
    bool tie;
} type_defaults;

static const type_defaults k_types[] = {
    {"llama", FAM_LLAMA, 1e-6, 10000.0, 2048, 0, 0, 0, 1, 2, -1, false},
    {"mistral", FAM_LLAMA, 1e-6, 10000.0, 4096 * 32, 8, 0, 4096, 1, 2, -1, false},
    {"qwen2", FAM_QWEN2, 1e-6, 10000.0, 32768, 32, 0, 4096, -1, -1, -1, false},
    {"qwen3", FAM_QWEN3, 1e-6, 10000.0, 32768, 32, 128, 4096, -1, -1, -1, false},
    {"gemma3_text", FAM_GEMMA3, 1e-6, 1000000.0, 131072, 4, 256, 4096, 2, 1, 0, true},
    {"gemma3", FAM_GEMMA3, 1e-6, 1000000.0, 131072, 4, 256, 4096, 2, 1, 0, true},
    {"mixtral", FAM_MIXTRAL, 1e-5, 1000000.0, 4096 * 32, 8, 0, 0, 1, 2, -1, false},
    {"qwen3_moe", FAM_QWEN3_MOE, 1e-6, 10000.0, 32768, 4, 0, 4096, -1, -1, -1, false},
    {"llama4_text", FAM_LLAMA4, 1e-5, 500000.0, 131072, 8, 128, 0, 1, 2, -1, false},
    {"llama4", FAM_LLAMA4, 1e-5, 500000.0, 131072, 8, 128, 0, 1, 2, -1, false},
    {"deepseek_v3", FAM_DEEPSEEK_V3, 1e-6, 10000.0, 4096, 0, 0, 0, 0, 1, -1, false},
    {"kimi_k2", FAM_DEEPSEEK_V3, 1e-6, 10000.0, 4096, 0, 0, 0, 0, 1, -1, false},
};
#define N_TYPES (int)(sizeof k_types / sizeof k_types[0])

const char *spec_supported_types(void) {
    return "llama, mistral, qwen2, qwen3, gemma3, gemma3_text, mixtral, qwen3_moe, llama4, "
           "llama4_text, deepseek_v3, kimi_k2";
}

const char *spec_family_name(mx_family f) {
    static const char *names[FAM_COUNT] = {"llama", "qwen2", "qwen3", "gemma3", "mixtral",
                                           "qwen3_moe", "llama4", "deepseek_v3"};
    return (f >= 0 && f < FAM_COUNT) ? names[f] : "unknown";
}

/* ==== Pieces of the parse ==== */

static int parse_activation(const spec_cfg *c, model_spec *s) {
    const char *a = NULL;
    if (cfg_str(c, "hidden_activation", &a)) return -1; /* gemma spelling */
    if (!a && cfg_str(c, "hidden_act", &a)) return -1;
    if (!a) a = s->family == FAM_GEMMA3 ? "gelu_pytorch_tanh" : "silu";
    if (!strcmp(a, "silu") || !strcmp(a, "swish")) s->act = ACT_SILU;
    else if (!strcmp(a, "gelu_pytorch_tanh") || !strcmp(a, "gelu_new") || !strcmp(a, "gelu_tanh"))
        s->act = ACT_GELU_TANH;
    else if (!strcmp(a, "gelu")) s->act = ACT_GELU;
    else
        return mx_fail(c->err,
                       "%s: field 'hidden_act' = '%.40s' is not supported (silu, gelu, "
                       "gelu_pytorch_tanh)",
                       c->origin, a);
    return 0;
}

/* Which layers attend through the sliding window. */
static int parse_sliding(const spec_cfg *c, model_spec *s, const type_defaults *td) {
    long long sw = 0, v;
    const char *where;
    json_t *jsw = json_object_get(c->text ? c->text : c->top, "sliding_window");
    if (!jsw && c->text) jsw = json_object_get(c->top, "sliding_window");
    bool absent = jsw == NULL; /* null means "no window", absent means the class default */
    if (cfg_int(c, "sliding_window", false, absent ? td->sliding_window : 0, 0, 1ll << 30, &sw))
        return -1;
    if (s->family == FAM_QWEN2 || s->family == FAM_QWEN3 || s->family == FAM_QWEN3_MOE) {
        bool use = false;
        if (cfg_bool(c, "use_sliding_window", false, &use)) return -1;
        if (!use) sw = 0;
    }
    if (s->family == FAM_LLAMA && !strcmp(td->model_type, "llama")) sw = 0; /* no such field */
    memset(s->layer_sliding, 0, sizeof s->layer_sliding);
    if (s->family == FAM_LLAMA4) { /* no sliding window; layer_types name chunked layers */
        s->sliding_window = 0;
        return 0;
    }

    json_t *lt = cfg_get(c, "layer_types", &where);
    if (lt) { /* transformers 5.x: explicit per-layer attention type */
        if (!json_is_array(lt) || (int)json_array_size(lt) != s->n_layers)
            return mx_fail(c->err, "%s: field '%slayer_types' must be an array of %d strings",
                           c->origin, where, s->n_layers);
        for (int i = 0; i < s->n_layers; i++) {
            json_t *e = json_array_get(lt, (size_t)i);
            const char *t = json_is_string(e) ? json_string_value(e) : "";
            if (!strcmp(t, "sliding_attention")) s->layer_sliding[i] = sw > 0;
            else if (strcmp(t, "full_attention"))
                return mx_fail(c->err,
                               "%s: field '%slayer_types[%d]' must be \"full_attention\" or "
                               "\"sliding_attention\"",
                               c->origin, where, i);
        }
    } else if (sw > 0 && s->family == FAM_GEMMA3) {
        /* Every pattern-th layer is global: layer i is global iff (i + 1) % pattern == 0. */
        if (cfg_int(c, "sliding_window_pattern", false, 6, 1, 1 << 20, &v)) return -1;
        for (int i = 0; i < s->n_layers; i++) s->layer_sliding[i] = (i + 1) % v != 0;
    } else if (sw > 0 && (s->family == FAM_QWEN2 || s->family == FAM_QWEN3)) {
        if (cfg_int(c, "max_window_layers", false, 28, 0, 1 << 20, &v)) return -1;
        for (int i = 0; i < s->n_layers; i++) s->layer_sliding[i] = i >= v;
    } else if (sw > 0) {
        for (int i = 0; i < s->n_layers; i++) s->layer_sliding[i] = 1;
    }
    int any = 0;
    for (int i = 0; i < s->n_layers; i++) any |= s->layer_sliding[i];
    s->sliding_window = any ? (int)sw : 0;
    return 0;
}

static int parse_moe(const spec_cfg *c, model_spec *s) {
    long long v;
    memset(s->layer_dense_mlp, 0, sizeof s->layer_dense_mlp);
    s->n_experts = 0;
    s->n_experts_per_tok = 0;
    s->moe_intermediate_size = 0;
    s->norm_topk_prob = false;
    if (s->family == FAM_MIXTRAL) {
        if (cfg_int(c, "num_local_experts", false, 8, 1, 4096, &v)) return -1;
        s->n_experts = (int)v;
        if (cfg_int(c, "num_experts_per_tok", false, 2, 1, s->n_experts, &v)) return -1;
        s->n_experts_per_tok = (int)v;
        s->moe_intermediate_size = s->intermediate_size; /* experts are full-width MLPs */
        s->norm_topk_prob = true;
    } else if (s->family == FAM_QWEN3_MOE) {
        /* transformers 5.x writes the expert count as num_local_experts (num_experts is an
         * attribute alias); 4.x checkpoints write num_experts. Take whichever is present. */
        const char *ne = cfg_has(c, "num_local_experts") ? "num_local_experts" : "num_experts";
        if (cfg_int(c, ne, false, 128, 0, 4096, &v)) return -1;
        s->n_experts = (int)v;
        if (s->n_experts) {
            if (cfg_int(c, "num_experts_per_tok", false, 8, 1, s->n_experts, &v)) return -1;
            s->n_experts_per_tok = (int)v;
            if (cfg_int(c, "moe_intermediate_size", false, 768, 1, 1 << 22, &v)) return -1;
            s->moe_intermediate_size = (int)v;
        }
        if (cfg_bool(c, "norm_topk_prob", false, &s->norm_topk_prob)) return -1;
        long long step;
        if (cfg_int(c, "decoder_sparse_step", false, 1, 1, 1 << 20, &step)) return -1;
        for (int i = 0; i < s->n_layers; i++)
            s->layer_dense_mlp[i] = !(s->n_experts > 0 && (i + 1) % step == 0);
        const char *where;
        json_t *ml = cfg_get(c, "mlp_only_layers", &where);
        if (ml) {
            if (!json_is_array(ml))
                return mx_fail(c->err, "%s: field '%smlp_only_layers' must be an array", c->origin,
                               where);
            for (size_t i = 0; i < json_array_size(ml); i++) {
                json_t *e = json_array_get(ml, i);
                if (!json_is_integer(e) || json_integer_value(e) < 0 ||
                    json_integer_value(e) >= s->n_layers)
                    return mx_fail(c->err,
                                   "%s: field '%smlp_only_layers[%zu]' must be a layer index in "
                                   "[0, %d)",
                                   c->origin, where, i, s->n_layers);
                s->layer_dense_mlp[json_integer_value(e)] = 1;
            }
        }
        if (!s->n_experts) s->n_experts_per_tok = 0;
    }
    return 0;
}

/* Appends the ids of an int-or-list eos field, deduplicated. */
static int add_eos(model_spec *s, json_t *v, const char *origin, const char *field, mx_error *err) {
    if (!v || json_is_null(v)) return 0;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_integer(e) || json_integer_value(e) < 0 ||
            json_integer_value(e) >= s->vocab_size)
            return mx_fail(err, "%s: field '%s' must hold token ids in [0, %d)", origin, field,
                           s->vocab_size);
        int id = (int)json_integer_value(e), dup = 0;
        for (int k = 0; k < s->n_eos; k++) dup |= s->eos_ids[k] == id;
        if (dup) continue;
        if (s->n_eos >= MX_MAX_EOS)
            return mx_fail(err, "%s: field '%s' lists more than %d end-of-sequence ids", origin,
                           field, MX_MAX_EOS);
        s->eos_ids[s->n_eos++] = id;
    }
    return 0;
}

/* bos/pad: an id outside the vocabulary (e.g. -1) means "none" rather than an error. */
static int token_id(json_t *v, int def, int vocab) {
    if (!v) return def;
    if (!json_is_integer(v)) return -1;
    json_int_t x = json_integer_value(v);
    return (x >= 0 && x < vocab) ? (int)x : -1;
}

static int parse_generation(model_spec *s, json_t *g, const char *origin, mx_error *err) {
    static const struct { const char *key; int kind; } k_fields[] = {
        {"temperature", 0}, {"top_p", 1}, {"top_k", 2}, {"repetition_penalty", 3}};
    for (int i = 0; i < 4; i++) {
        json_t *v = json_object_get(g, k_fields[i].key);
        if (!v || json_is_null(v)) continue;
        if (!json_is_number(v))
            return mx_fail(err, "%s: field '%s' must be a number", origin, k_fields[i].key);
        double x = json_number_value(v);
        bool ok = x >= 0 && x <= 1e6;
        if (k_fields[i].kind == 1) ok = x >= 0 && x <= 1;
        if (k_fields[i].kind == 2) ok = json_is_integer(v) && x >= 0 && x <= (1 << 24);
        if (k_fields[i].kind == 3) ok = x > 0 && x <= 100;
        if (!ok) return mx_fail(err, "%s: field '%s' = %g is out of range", origin, k_fields[i].key, x);
        if (k_fields[i].kind == 0) s->gen_temperature = (float)x;
        if (k_fields[i].kind == 1) s->gen_top_p = (float)x;
        if (k_fields[i].kind == 2) s->gen_top_k = (int)x;
        if (k_fields[i].kind == 3) s->gen_repetition_penalty = (float)x;
    }
    json_t *ds = json_object_get(g, "do_sample");
    if (ds && !json_is_null(ds)) {
        if (!json_is_boolean(ds)) return mx_fail(err, "%s: field 'do_sample' must be true or false", origin);
        s->gen_do_sample = json_is_true(ds);
    }
    if (s->bos_id < 0) s->bos_id = token_id(json_object_get(g, "bos_token_id"), -1, s->vocab_size);
    if (s->pad_id < 0) s->pad_id = token_id(json_object_get(g, "pad_token_id"), -1, s->vocab_size);
    return add_eos(s, json_object_get(g, "eos_token_id"), origin, "eos_token_id", err);
}

static mx_dtype dtype_from_torch(const char *t) {
    if (!strncmp(t, "torch.", 6)) t += 6;
    if (!strcmp(t, "bfloat16")) return MX_BF16;
    if (!strcmp(t, "float16") || !strcmp(t, "half")) return MX_F16;
    if (!strcmp(t, "float32") || !strcmp(t, "float")) return MX_F32;
    return MX_DTYPE_INVALID;
}

/* ==== Main parse ==== */

/* Untrusted names and parser excerpts can hold control characters (a JSON "\n" in a tensor
 * name); an error message must stay one line, so they become '?'. Returns -1. */
static int msg_one_line(mx_error *e) {
    if (e)
        for (char *p = e->msg; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    return -1;
}


static int parse_shapes(const spec_cfg *c, model_spec *s, const type_defaults *td) {
    bool gemma = s->family == FAM_GEMMA3;
    long long v;
    if (cfg_int(c, "hidden_size", true, 0, 1, 1 << 20, &v)) return -1;
    s->hidden_size = (int)v;
    if (cfg_int(c, "num_hidden_layers", true, 0, 1, MX_MAX_LAYERS, &v)) return -1;
    s->n_layers = (int)v;
    if (cfg_int(c, "vocab_size", !gemma, 262208, 1, 1 << 24, &v)) return -1;
    s->vocab_size = (int)v;
    bool need_inter = !gemma && s->family != FAM_QWEN3_MOE;
    if (cfg_int(c, "intermediate_size", need_inter, gemma ? 9216 : 6144, 1, 1 << 22, &v)) return -1;
    s->intermediate_size = (int)v;
    if (cfg_int(c, "num_attention_heads", !gemma, 8, 1, 4096, &v)) return -1;
    s->n_heads = (int)v;
    if (cfg_int(c, "num_key_value_heads", false, td->n_kv_heads ? td->n_kv_heads : s->n_heads, 1,
                4096, &v))
        return -1;
    s->n_kv_heads = (int)v;
    if (s->n_kv_heads > s->n_heads || s->n_heads % s->n_kv_heads)
        return mx_fail(c->err,
                       "%s: field 'num_key_value_heads' = %d must divide num_attention_heads = %d",
                       c->origin, s->n_kv_heads, s->n_heads);
    /* head_dim: absent -> class default, null -> hidden / heads. */
    json_t *hd = json_object_get(c->text ? c->text : c->top, "head_dim");
    if (!hd && c->text) hd = json_object_get(c->top, "head_dim");
    long long derived = s->hidden_size / s->n_heads;
    long long def = (!hd && td->head_dim_absent) ? td->head_dim_absent : derived;
    if (cfg_int(c, "head_dim", false, def, 1, 4096, &v)) return -1;
    if (v == derived && !cfg_has(c, "head_dim") && s->hidden_size % s->n_heads)
        return mx_fail(c->err,
                       "%s: field 'num_attention_heads' = %d does not divide hidden_size = %d "
                       "(and no head_dim is given)",
                       c->origin, s->n_heads, s->hidden_size);
    if (v % 2)
        return mx_fail(c->err, "%s: field 'head_dim' = %lld must be even (rotary embedding)",
                       c->origin, v);
    s->head_dim = (int)v;
    if (cfg_int(c, "max_position_embeddings", false, td->max_pos, 1, 1ll << 30, &v)) return -1;
    s->max_position_embeddings = (int)v;
    if (cfg_num(c, "rms_norm_eps", td->rms_norm_eps, 1e-12, 0.5, &s->rms_norm_eps)) return -1;
    return 0;
}

static int parse_attention(const spec_cfg *c, model_spec *s) {
    bool bias = false, mlp_bias = false;
    if (cfg_bool(c, "attention_bias", false, &bias)) return -1;
    if (cfg_bool(c, "mlp_bias", false, &mlp_bias)) return -1;
    if (mlp_bias)
        return mx_fail(c->err, "%s: field 'mlp_bias' = true is not supported", c->origin);
    /* llama/qwen3/gemma3 attention_bias covers q, k, v and o; qwen2 always biases q/k/v only. */
    s->qkv_bias = s->family == FAM_QWEN2 ? true : bias;
    s->o_bias = s->family == FAM_QWEN2 ? false : bias;
    s->qk_norm = s->family == FAM_QWEN3 || s->family == FAM_QWEN3_MOE || s->family == FAM_GEMMA3;
    s->attn_scale = (float)(1.0 / sqrt((double)s->head_dim));
    s->attn_softcap = s->final_softcap = 0;
    if (s->family == FAM_GEMMA3) {
        double qs, cap;
        if (cfg_num(c, "query_pre_attn_scalar", 256, 1e-6, 1e9, &qs)) return -1;
        s->attn_scale = (float)(1.0 / sqrt(qs));
        if (cfg_num(c, "attn_logit_softcapping", 0, 0, 1e6, &cap)) return -1;
        s->attn_softcap = (float)cap;
        if (cfg_num(c, "final_logit_softcapping", 0, 0, 1e6, &cap)) return -1;
        s->final_softcap = (float)cap;
        s->norm_offset = 1.0f;
        s->sandwich_norms = true;
        s->embed_scale = sqrtf((float)s->hidden_size);
    }
    return 0;
}

/* A key written as null is "None"; an absent key takes the class default. */
static bool cfg_present(const spec_cfg *c, const char *key) {
    return (c->text && json_object_get(c->text, key)) || json_object_get(c->top, key);
}

static int parse_tokens(const spec_cfg *c, model_spec *s, const type_defaults *td) {
    const char *w;
    json_t *v;
    s->bos_id = cfg_present(c, "bos_token_id")
                    ? token_id(cfg_get(c, "bos_token_id", NULL), -1, s->vocab_size)
                    : token_id(NULL, td->bos, s->vocab_size);
    s->pad_id = cfg_present(c, "pad_token_id")
                    ? token_id(cfg_get(c, "pad_token_id", NULL), -1, s->vocab_size)
                    : token_id(NULL, td->pad, s->vocab_size);
    if (s->bos_id >= s->vocab_size) s->bos_id = -1;
    if (s->pad_id >= s->vocab_size) s->pad_id = -1;
    s->n_eos = 0;
    if ((v = cfg_get(c, "eos_token_id", &w))) {
        char f[64];
        snprintf(f, sizeof f, "%seos_token_id", w);
        if (add_eos(s, v, c->origin, f, c->err)) return -1;
    } else if (!cfg_present(c, "eos_token_id") && td->eos >= 0 && td->eos < s->vocab_size) {
        s->eos_ids[s->n_eos++] = td->eos;
    }
    return 0;
}

static void gen_origin_for(const char *origin, char *out, size_t n) {
    const char *slash = strrchr(origin, '/');
    if (slash) snprintf(out, n, "%.*s/generation_config.json", (int)(slash - origin), origin);
    else snprintf(out, n, "generation_config.json");
}

int spec_parse(model_spec *spec, const char *config_json, const char *generation_json,
               const char *origin, mx_error *err) {
    if (!origin) origin = "config.json";
    memset(spec, 0, sizeof *spec);
    json_error_t je;
    json_t *root = json_loads(config_json ? config_json : "", JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        mx_fail(err, "%s: not valid JSON (%.200s at line %d column %d)", origin, je.text, je.line,
                je.column);
        return msg_one_line(err);
    }
    int rc = -1;
    json_t *gen = NULL;
    spec_cfg c = {.top = root, .text = NULL, .origin = origin, .err = err};
    if (!json_is_object(root)) {
        mx_fail(err, "%s: top level is not a JSON object", origin);
        goto out;
    }
    json_t *tc = json_object_get(root, "text_config");
    if (tc && !json_is_null(tc)) {
        if (!json_is_object(tc)) {
            mx_fail(err, "%s: field 'text_config' must be an object", origin);
            goto out;
        }
        c.text = tc;
    }

    /* model_type -> family and defaults */
    const char *mt = NULL;
    if (cfg_str(&c, "model_type", &mt)) goto out;
    if (!mt) {
        mx_fail(err, "%s: missing field 'model_type' (supported: %s)", origin, spec_supported_types());
        goto out;
    }
    const type_defaults *td = NULL;
    for (int i = 0; i < N_TYPES; i++)
        if (!strcmp(mt, k_types[i].model_type)) td = &k_types[i];
    if (!td) {
        mx_fail(err, "%s: model_type '%.40s' is not supported (supported: %s)", origin, mt,
                spec_supported_types());
        goto out;
    }
    snprintf(spec->model_type, sizeof spec->model_type, "%s", mt);
    spec->family = td->family;
    spec->embed_scale = 1.0f;
    spec->gen_temperature = -1;
    spec->gen_top_p = -1;
    spec->gen_do_sample = -1;

    if (parse_shapes(&c, spec, td) || parse_attention(&c, spec) || parse_activation(&c, spec) ||
        spec_parse_rope(&c, spec, td->rope_theta) || parse_sliding(&c, spec, td) ||
        parse_moe(&c, spec) || parse_tokens(&c, spec, td) || spec_parse_quant(&c, spec) ||
        (spec->family == FAM_DEEPSEEK_V3 && spec_parse_deepseek(&c, spec)))
        goto out;
    if (spec->family == FAM_LLAMA4 && spec_parse_llama4(&c, spec)) goto out;
    if (cfg_bool(&c, "tie_word_embeddings", td->tie, &spec->tie_word_embeddings)) goto out;

    const char *dt = NULL, *dt_field = "dtype";
    if (cfg_str(&c, "dtype", &dt)) goto out; /* 5.x spelling */
    if (!dt) {
        dt_field = "torch_dtype";
        if (cfg_str(&c, "torch_dtype", &dt)) goto out;
    }
    spec->dtype = MX_BF16; /* refined from the tensors by ckpt_open */
    if (dt) {
        spec->dtype = dtype_from_torch(dt);
        if (spec->dtype == MX_DTYPE_INVALID) {
            mx_fail(err, "%s: field '%s' = '%.40s' is not supported (bfloat16, float16, float32)",
                    origin, dt_field, dt);
            goto out;
        }
    }

    if (generation_json) {
        char gorigin[1200];
        gen_origin_for(origin, gorigin, sizeof gorigin);
        gen = json_loads(generation_json, 0, &je);
        if (!gen) {
            mx_fail(err, "%s: not valid JSON (%.200s at line %d column %d)", gorigin, je.text,
                    je.line, je.column);
            goto out;
        }
        if (!json_is_object(gen)) {
            mx_fail(err, "%s: top level is not a JSON object", gorigin);
            goto out;
        }
        if (parse_generation(spec, gen, gorigin, err)) goto out;
    }
    rc = 0;
out:
    json_decref(gen);
    json_decref(root);
    if (rc) msg_one_line(err);
    return rc;
}

/* ==== Files ==== */

/* Reads a whole small text file; NULL + error when missing (if required) or too large. */
static char *read_text(const char *path, bool required, mx_error *err, int *missing) {
    *missing = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        *missing = 1;
        if (required) mx_fail(err, "%s: cannot open (a checkpoint directory needs it)", path);
        return NULL;
    }
    enum { CAP = 16 << 20 }; /* configs are kilobytes; refuse to slurp a huge file */
    /* A regular file's own size (a 16 MiB buffer per config read costs ~0.1 s under ASan); a
     * pipe or device is read up to the cap. One byte more is asked for, to see a file longer
     * than its size said (it grew while being read) or than the cap. */
    struct stat sb;
    const bool regular = fstat(fileno(fp), &sb) == 0 && S_ISREG(sb.st_mode);
    if (regular && sb.st_size > CAP) {
        fclose(fp);
        mx_fail(err, "%s: larger than %d bytes; not a config file", path, CAP);
        return NULL;
    }
    const size_t want = regular ? (size_t)sb.st_size : (size_t)CAP;
    char *buf = malloc(want + 1);
    size_t n = buf ? fread(buf, 1, want + 1, fp) : 0;
    fclose(fp);
    if (!buf) {
        mx_fail(err, "%s: out of memory", path);
        return NULL;
    }
    if (n > want) {
        free(buf);
        if (regular) mx_fail(err, "%s: changed while being read", path);
        else mx_fail(err, "%s: larger than %d bytes; not a config file", path, CAP);
        return NULL;
    }
    buf[n] = '\0';
    if (strlen(buf) != n) {
        free(buf);
        mx_fail(err, "%s: contains NUL bytes; not a JSON text", path);
        return NULL;
    }
    return buf;
}

int spec_load(model_spec *spec, const char *dir, mx_error *err) {
    char cpath[1100], gpath[1100];
    snprintf(cpath, sizeof cpath, "%s/config.json", dir);
    snprintf(gpath, sizeof gpath, "%s/generation_config.json", dir);
    int missing;
    char *cfg = read_text(cpath, true, err, &missing);
    if (!cfg) return -1;
    char *gen = read_text(gpath, false, err, &missing);
    if (!gen && !missing) {
        free(cfg);
        return -1;
    }
    int rc = spec_parse(spec, cfg, gen, cpath, err);
    free(cfg);
    free(gen);
    return rc;
}

/* ==== Quantization lookup ==== */

mx_quant spec_quant_for(const model_spec *spec, const char *path) {
    if (!spec->quant.bits || !path) return spec->quant;
    size_t n = strlen(path);
    /* Accept a tensor name too: strip a trailing .weight/.scales/.biases. */
    static const char *k_suffix[] = {".weight", ".scales", ".biases"};
    for (int i = 0; i < 3; i++) {
        size_t m = strlen(k_suffix[i]);
        if (n > m && !strcmp(path + n - m, k_suffix[i])) {
            n -= m;
            break;
        }
    }
    for (int i = 0; i < spec->n_quant_overrides; i++) {
        const mx_quant_override *o = &spec->quant_overrides[i];
        if (strlen(o->prefix) == n && !strncmp(o->prefix, path, n)) return o->q;
    }
    return spec->quant;
}
