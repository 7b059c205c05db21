/* A loaded model: spec + weights bound on a backend + the generic decoder forward over a step
 * batch. Families differ only through model_spec fields and tensor names (model_load.c). */
#ifndef MLXCEL_MODEL_MODEL_H
#define MLXCEL_MODEL_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "base/error.h"
#include "kv/kv_cache.h"
#include "model/model_spec.h"

/* A Linear / Embedding weight [N, K]: dense (w) or MLX affine-quantized (q.bits > 0; then
 * w.data is NULL). Which one is decided per tensor by its dtype (U32 = packed), the bits and
 * group size by the config's quantization block (spec_quant_for). */
typedef struct model_weight {
    mx_tensor w;
    mx_qweight q;
} model_weight;

static inline bool model_weight_quantized(const model_weight *w) { return w->q.bits > 0; }

typedef struct model_layer {
    mx_tensor attn_norm;                 /* [H] input_layernorm */
    model_weight wq, wk, wv, wo;         /* [Hq*D, H] [Hkv*D, H] [Hkv*D, H] [H, Hq*D] */
    mx_tensor bq, bk, bv, bo;            /* optional biases */
    mx_tensor q_norm, k_norm;            /* [D] optional (qwen3, gemma3) */
    mx_tensor post_attn_norm;            /* [H] sandwich norms only (gemma3) */
    mx_tensor ffn_norm;                  /* [H] norm before the MLP */
    mx_tensor post_ffn_norm;             /* [H] sandwich norms only */
    model_weight w_gate, w_up, w_down;   /* dense MLP [I, H] [I, H] [H, I] */
    model_weight router;                 /* MoE [E, H] */
    /* MoE experts, per projection either dense views or quantized views (the other NULL):
     * [E] x gate [Ie, H], up [Ie, H], down [H, Ie] */
    mx_tensor *exp_gate, *exp_up, *exp_down;
    mx_qweight *exp_qgate, *exp_qup, *exp_qdown;
    model_weight sh_gate, sh_up, sh_down; /* llama4 shared expert [Is, H] [Is, H] [H, Is] */
    bool moe;
    /* ---- DeepSeek MLA (model_mla.c; R = qk_rope_head_dim, N = qk_nope_head_dim, V = v_head_dim,
     * Lq / Lkv = q / kv LoRA ranks, D = Lkv + R). wq is q_b_proj [Hq*(R+N), Lq] (q_proj
     * [.., H] without q LoRA) with each head's rows reordered to [pe | nope]; wo is o_proj.
     * Shared experts of a MoE layer sit in w_gate / w_up / w_down. ---- */
    bool mla;
    model_weight wq_a;       /* [Lq, H] q_a_proj (absent without q LoRA) */
    model_weight wkv_a;      /* [R + Lkv, H] kv_a_proj_with_mqa, rows reordered to [k_pe | c_kv] */
    mx_tensor q_a_norm;      /* [Lq] */
    mx_tensor kv_a_norm;     /* [Lkv] */
    mx_tensor w_qabs;        /* [Hq, D, R + N] per head [[I_R, 0], [0, W_UK_h^T]] */
    mx_tensor w_kvb;         /* [Hq*(N+V), Lkv] kv_b_proj: head h's V rows are its W_UV (or
                              * mlx_lm's unembed_out [Hq, V, Lkv] as [Hq*V, Lkv]) */
    mx_tensor e_bias;        /* [E] router e_score_correction_bias */
} model_layer;

/* Host-side weight source for binding: returns the tensor called `name` (host memory), or
 * a tensor with data NULL when absent. */
typedef mx_tensor (*model_weight_fn)(void *ctx, const char *name);

typedef struct model model;

/* Step batch for the forward (host arrays; see mx_attn_batch for the KV addressing). */
typedef struct model_batch {
    int n_rows;
    const int32_t *tokens;       /* [n_rows] */
    const int32_t *pos;          /* [n_rows] */
    const int32_t *seq;          /* [n_rows] index into block_table */
    const int32_t *rope_len;     /* [n_rows] sequence length for dynamic NTK RoPE (the length of
                                    the row's sequence as known this step); NULL = pos + 1 */
    const int32_t *block_table;  /* [n_seqs, table_stride] */
    int table_stride;
    int n_seqs;
    const int64_t *write_rows;   /* [n_rows] physical KV row per row */
    int n_out;
    const int32_t *out_rows;     /* [n_out] rows whose logits are computed */
    int n_hidden;
    const int32_t *hidden_rows;  /* [n_hidden] rows whose final hidden states are returned
                                    (after the final norm, before the lm_head): embeddings */
} model_batch;

/* Where a forward's results go (host memory; NULL = not wanted). logits [n_out, vocab] for
 * out_rows, or with ids + logprobs [n_out] the device's greedy pick instead of the logits
 * (model_has_device_greedy); hidden [n_hidden, hidden_size] for hidden_rows. */
typedef struct model_out {
    float *logits;
    int32_t *ids;
    float *logprobs;
    float *hidden;
} model_out;

/* Opens a checkpoint directory (config.json + safetensors) and binds the weights. */
int model_load(model **out, const char *dir, const backend_ops *be, mx_error *err);
/* Binds weights from any source (tests build models in memory). spec is copied. */
int model_bind(model **out, const model_spec *spec, model_weight_fn fn, void *ctx,
               const backend_ops *be, mx_error *err);
void model_free(model *m);

/* ==== Tensor parallelism (model_tp.c, docs/tensor-parallel.md) ====
 * tp_size ranks, each with a slice of the weights: Q/K/V and gate/up split by output rows
 * (heads / intermediate), o_proj and down_proj by input columns followed by an all-reduce,
 * embedding and lm_head by vocabulary rows. tp_size 1 is the plain model through the same
 * forward. Ranks are threads: on the CPU with a fixed-order collective, on CUDA one GPU each
 * over NCCL. Needs n_heads and n_kv_heads (and intermediate_size, the MoE expert count)
 * divisible by tp_size; MLX-quantized checkpoints split their packed codes, scales and biases
 * like the weights (the group size must divide a rank's o_proj / down_proj width); quantized
 * MoE checkpoints run TP on the CPU only. */
int model_load_tp(model **out, const char *dir, const backend_ops *be, int tp_size, mx_error *err);
/* --load-format dummy (vLLM's meaning): only DIR/config.json is read; every weight is
 * generated (norm weights 1, the others uniform in [-0.02, 0.02) from a fixed seed, one shared
 * host buffer of the largest tensor's size), so shapes that exist only as a config can be
 * benchmarked and served, also across TP ranks. Dense models; MoE is refused. */
int model_load_dummy_tp(model **out, const char *dir, const backend_ops *be, int tp_size,
                        mx_error *err);
/* "auto" (checkpoint files) or "dummy": 0 ok and *dummy set, -1 unknown. */
int model_load_format_parse(const char *s, bool *dummy);
int model_bind_tp(model **out, const model_spec *spec, model_weight_fn fn, void *ctx,
                  const backend_ops *be, int tp_size, mx_error *err);
int model_tp_size(const model *m);

const model_spec *model_spec_of(const model *m);
const backend_ops *model_backend(const model *m);
uint64_t model_n_params(const model *m);
uint64_t model_weight_bytes(const model *m);
/* Of model_weight_bytes, as stored (packed codes + scales + biases when quantized): the token
 * embedding table, and every MoE expert of every layer. */
uint64_t model_embedding_bytes(const model *m);
uint64_t model_expert_bytes(const model *m);
/* Quantization summary for start-up lines, e.g. "MLX affine 4-bit, group 64; 2 per-module
 * overrides (1 unquantized, 1 at 8-bit/g64); 14 of 15 weights quantized". Writes "none" for a
 * dense model. */
void model_describe_quant(const model *m, char *buf, size_t len);
/* Linear / Embedding weights bound (a tied head counts once; fused experts per tensor), and
 * how many of them are MLX-quantized. */
void model_quant_counts(const model *m, int *n_weights, int *n_quantized);

/* Forward over the step batch: writes this step's K/V into the cache, and logits for
 * out_rows into logits [n_out, vocab] (host memory). */
int model_forward(model *m, kv_cache *kv, const model_batch *b, float *logits, mx_error *err);
/* Same forward, but the backend picks the greedy token of each out row on the device and only
 * ids [n_out] and their log-softmax logprobs [n_out] reach the host. Only when
 * model_has_device_greedy(); the engine uses it when every sampled sequence is plain greedy. */
int model_forward_greedy(model *m, kv_cache *kv, const model_batch *b, int32_t *ids,
                         float *logprobs, mx_error *err);
bool model_has_device_greedy(const model *m);
/* The general form of the two above: logits (or device greedy ids) for out_rows and final hidden
 * states for hidden_rows from one forward. Rows of generations and of embeddings share a step. */
int model_forward_out(model *m, kv_cache *kv, const model_batch *b, const model_out *o, mx_error *err);
/* false for a checkpoint without lm_head.weight whose tie_word_embeddings is false (an embedding
 * model saved without its head, e.g. a sentence-transformers Qwen3-Embedding): it computes hidden
 * states only, and a forward that asks logits of it fails naming the missing tensor. */
bool model_has_lm_head(const model *m);

/* ==== RoPE tables (model_rope.c) ==== */
/* Rotated dims: head_dim * partial_rotary_factor (even). */
int rope_rot_dim(const model_spec *s);
/* inv_freq [rot_dim / 2] and the cos/sin scale for a RoPE variant, as transformers computes
 * them; seq_len matters for dynamic NTK only (length of the sequence seen so far). */
void rope_inv_freq(const model_spec *s, const mx_rope *r, int seq_len, float *inv_freq,
                   float *attn_factor);
/* cos_sin [rot_dim / 2, 2] for one position. */
void rope_cos_sin(const float *inv_freq, int rot_dim, int pos, float attn_factor, float *cos_sin);

#endif
