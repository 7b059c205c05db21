/* model_spec: the one struct every family fills from config.json. The generic decoder reads
 * only this; family files (src/model/family_*.c) map tensor names and set fields, nothing more.
 * Filled by spec_load() (src/model/spec.c) from config.json (+ nested text_config) and
 * generation_config.json, accepting transformers 4.x and 5.x spellings. */
#ifndef MLXCEL_MODEL_SPEC_H
#define MLXCEL_MODEL_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "base/dtype.h"
#include "base/error.h"

#define MX_MAX_LAYERS 256
#define MX_MAX_EOS 8
#define MX_MAX_QUANT_OVERRIDES 512

typedef enum {
    FAM_LLAMA = 0,  /* llama, mistral */
    FAM_QWEN2,      /* qkv bias */
    FAM_QWEN3,      /* q/k RMSNorm */
    FAM_GEMMA3,     /* gemma3, gemma3_text */
    FAM_MIXTRAL,    /* top-k softmax routing */
    FAM_QWEN3_MOE,  /* norm_topk_prob */
    FAM_LLAMA4,     /* llama4_text, llama4: sigmoid-scaled MoE + shared expert, NoPE layers,
                       chunked attention, interleaved RoPE, parameterless q/k norm */
    FAM_DEEPSEEK_V3, /* deepseek_v3, kimi_k2: MLA attention, grouped sigmoid routing (model_mla.c) */
    FAM_COUNT
} mx_family;

/* mx_activation (ACT_*): backend/backend.h, the seam the GLU and MoE ops take it through. */

/* MoE routing (mx_moe_params.routing). */
typedef enum {
    MOE_ROUTE_SOFTMAX = 0, /* softmax over all experts, top-k, weights scale expert outputs */
    MOE_ROUTE_SIGMOID_IN,  /* llama4: top-k of the logits, sigmoid(logit) scales the expert's
                              input (down(act(gate(s x)) * up(s x))), outputs summed */
} mx_moe_routing;

typedef enum {
    ROPE_DEFAULT = 0, /* plain theta^(-2i/d) */
    ROPE_LINEAR,      /* positions / factor */
    ROPE_DYNAMIC,     /* NTK-aware dynamic scaling past original_max_pos */
    ROPE_YARN,
    ROPE_LLAMA3,
} mx_rope_type;

typedef struct mx_rope {
    mx_rope_type type;
    double theta;                  /* base */
    double factor;                 /* linear/dynamic/yarn/llama3 scaling factor (1 = none) */
    int original_max_pos;          /* original_max_position_embeddings (llama3, yarn, dynamic) */
    double low_freq_factor;        /* llama3 */
    double high_freq_factor;       /* llama3 */
    double beta_fast, beta_slow;   /* yarn (32, 1) */
    double mscale, mscale_all_dim; /* yarn (optional, 0 = absent) */
    double attention_factor;       /* yarn: explicit attention scaling; 0 = derive */
    bool truncate;                 /* yarn (transformers 5.x `truncate`, default true) */
    double partial_rotary_factor;  /* fraction of head_dim rotated (1 = all) */
} mx_rope;

typedef struct mx_quant {
    int bits;       /* 0 = not quantized */
    int group_size; /* 32, 64, 128 */
} mx_quant;

typedef struct mx_quant_override {
    char prefix[160];   /* module path as in the config, e.g. "model.layers.0.mlp.gate" */
    mx_quant q;         /* bits 0 = `false` (kept unquantized) */
} mx_quant_override;

typedef struct model_spec {
    char model_type[48];     /* as written in config.json (text_config's when nested) */
    mx_family family;

    /* ---- shapes ---- */
    int vocab_size;
    int hidden_size;
    int intermediate_size;   /* dense MLP width */
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int head_dim;            /* explicit head_dim, else hidden_size / n_heads */
    int max_position_embeddings;

    /* ---- norms ---- */
    double rms_norm_eps;
    float norm_offset;       /* gemma: weight + 1 */
    bool qk_norm;            /* qwen3, gemma3: RMSNorm over head_dim on q and k */
    bool sandwich_norms;     /* gemma3: post_attention_layernorm / post_feedforward_layernorm */

    /* ---- attention ---- */
    bool qkv_bias;           /* qwen2: bias on q/k/v projections */
    bool o_bias;             /* bias on o_proj (attention_bias in llama configs) */
    float attn_scale;        /* softmax scale: query_pre_attn_scalar^-0.5 or head_dim^-0.5 */
    float attn_softcap;      /* 0 = none */
    float final_softcap;     /* 0 = none (final_logit_softcapping) */
    int sliding_window;      /* 0 = none */
    uint8_t layer_sliding[MX_MAX_LAYERS]; /* 1 = this layer uses the sliding window + local rope */
    mx_rope rope;            /* global (full-attention) layers */
    mx_rope rope_local;      /* sliding layers (gemma3: rope_local_base_freq); = rope elsewhere */

    /* ---- MLP / MoE ---- */
    mx_activation act;
    int n_experts;           /* 0 = dense */
    int n_experts_per_tok;
    int moe_intermediate_size;
    bool norm_topk_prob;     /* qwen3_moe: renormalise top-k weights; mixtral: always */
    uint8_t layer_dense_mlp[MX_MAX_LAYERS]; /* MoE models: 1 = this layer has a dense MLP */
    mx_moe_routing moe_routing;
    int shared_expert_size;  /* llama4: width of the dense shared expert of MoE layers; 0 = none */

    /* ---- llama4 attention ---- */
    bool rope_interleaved;   /* RoPE on pairs (x[2i], x[2i+1]): q/k rows permuted at load so the
                                half-split rope applies (q.k is invariant to a shared order) */
    bool qk_l2_norm;         /* weightless RMS norm of q and k over head_dim AFTER RoPE, on
                                RoPE layers only (use_qk_norm) */
    uint8_t layer_nope[MX_MAX_LAYERS];    /* 1 = no RoPE on this layer */
    uint8_t layer_chunked[MX_MAX_LAYERS]; /* 1 = chunked attention (when attn_chunk > 0) */
    int attn_chunk;          /* attention_chunk_size: keys of the query's chunk only; 0 = none */
    bool attn_temp_tuning;   /* NoPE layers: q *= log(floor((pos + 1) / floor) + 1) * scale + 1 */
    float attn_temp_floor;   /* floor_scale */
    float attn_temp_scale;   /* attn_scale */

    /* ---- DeepSeek V3 (spec_mla.c, model_mla.c) ----
     * kv_lora_rank > 0 = multi-head latent attention, run in its absorbed form: the KV cache
     * holds one latent head per token, so n_kv_heads is 1 and head_dim is kv_lora_rank +
     * qk_rope_head_dim (the absorbed query / key width); the checkpoint's own widths are the
     * fields below. */
    int q_lora_rank;          /* 0 = plain q_proj (q_lora_rank null) */
    int kv_lora_rank;
    int qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
    bool rope_interleave;     /* pe rows interleaved in pairs (permuted to rotate-half at load) */
    int n_shared_experts;     /* shared_experts: one SwiGLU of moe_intermediate_size * n */
    bool moe_grouped_sigmoid; /* sigmoid scores + e_score_correction_bias, group-limited top-k */
    int moe_n_group, moe_topk_group;
    float routed_scaling_factor;

    /* ---- embeddings ---- */
    bool tie_word_embeddings;
    float embed_scale;       /* gemma: sqrt(hidden_size); 1 elsewhere */

    /* ---- tokens ---- */
    int bos_id;              /* -1 = none */
    int pad_id;              /* -1 = none */
    int eos_ids[MX_MAX_EOS]; /* config.json + generation_config.json, deduplicated */
    int n_eos;

    /* ---- generation defaults (generation_config.json; <0 / 0 = absent) ---- */
    float gen_temperature;
    float gen_top_p;
    int gen_top_k;
    float gen_repetition_penalty;
    int gen_do_sample;       /* -1 = absent, 0 = greedy, 1 = sample */

    /* ---- storage ---- */
    mx_dtype dtype;          /* torch_dtype / dtype of the checkpoint (BF16, F16, F32) */
    mx_quant quant;          /* MLX affine quantization default; bits 0 = none */
    int n_quant_overrides;
    mx_quant_override quant_overrides[MX_MAX_QUANT_OVERRIDES];
} model_spec;

/* Reads DIR/config.json and, when present, DIR/generation_config.json. Errors name the file
 * and the field. An unknown model_type lists the supported ones. */
int spec_load(model_spec *spec, const char *dir, mx_error *err);
/* Parses config.json text (generation_config may be NULL). `origin` names the file in errors. */
int spec_parse(model_spec *spec, const char *config_json, const char *generation_json,
               const char *origin, mx_error *err);

/* The quantization that applies to the module at `path` (e.g. "model.layers.3.self_attn.q_proj"). */
mx_quant spec_quant_for(const model_spec *spec, const char *path);

const char *spec_family_name(mx_family f);
/* "llama, mistral, qwen2, ..." for error messages. */
const char *spec_supported_types(void);

#endif
