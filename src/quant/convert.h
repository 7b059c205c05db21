/* `mlxcel convert`: Hugging Face checkpoint -> MLX checkpoint, with mlx_lm.convert's meaning.
 *
 * - Floating tensors are cast to the output dtype (--dtype, else config.json's torch_dtype /
 *   dtype, else each tensor keeps its own).
 * - With quantize: every Linear / Embedding weight (a `.weight` of rank >= 2; stacked experts
 *   included) whose input dimension is a multiple of the group size is quantized after the
 *   cast, as mlx_lm's quantize_model does: embeddings and lm_head included, norms (rank 1)
 *   never. Family rule: qwen3_moe router gates (`*.mlp.gate`) get {"group_size": 64,
 *   "bits": 8} (mlx_lm's Model.quant_predicate); mixtral's gate follows the defaults.
 * - Tensor names as mlx_lm's sanitize writes them: per-expert weights stacked into
 *   `*.switch_mlp.{gate,up,down}_proj.weight` [E, out, in] (mixtral w1/w3/w2 map to
 *   gate/up/down; transformers 5.x fused `experts.gate_up_proj` is split), lm_head dropped
 *   when tie_word_embeddings, rotary inv_freq buffers dropped. llama4 (mlx_lm models/llama4.py):
 *   `vision_model` / `multi_modal_projector` tensors dropped, the fused [in, out] experts
 *   `feed_forward.experts.gate_up_proj` [E, H, 2I] (gate = first I columns) and `down_proj`
 *   [E, I, H] split and transposed into `feed_forward.experts.{gate,up,down}_proj.weight`
 *   [E, out, in]; transformers 5.x wrapper names `model.language_model.*` / `lm_head.weight`
 *   become mlx_lm's `language_model.model.*` / `language_model.lm_head.weight`.
 * - config.json gets "quantization" and "quantization_config" ({"group_size", "bits", "mode":
 *   "affine"} plus per-module overrides), loses _name_or_path / vision_config; keys sorted,
 *   4-space indent. torch_dtype is set to the output dtype (mlx_lm leaves it stale).
 * - Shards of at most max_shard_bytes (5 GiB: mlx_lm's 5 << 30) named
 *   model-0000i-of-0000n.safetensors (model.safetensors when one), metadata {"format": "mlx"},
 *   and model.safetensors.index.json (always, with total_size and total_parameters).
 * - Tokenizer and generation files are copied (tokenizer*, special_tokens_map.json,
 *   added_tokens.json, vocab.json, merges.txt, *.tiktoken, chat_template.*,
 *   generation_config.json, *.py).
 * - dequantize: the inverse for an MLX-quantized input (quantization block removed).
 * The output directory must not exist (as mlx_lm); on failure it is removed again. */
#ifndef MLXCEL_QUANT_CONVERT_H
#define MLXCEL_QUANT_CONVERT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/error.h"

typedef struct mlxq_convert_opts {
    const char *hf_path;       /* input checkpoint directory */
    const char *mlx_path;      /* output directory (must not exist) */
    bool quantize;
    bool dequantize;
    int bits;                  /* 0 = 4 */
    int group_size;            /* 0 = 64 */
    mx_dtype dtype;            /* MX_DTYPE_INVALID = from config.json */
    uint64_t max_shard_bytes;  /* 0 = 5 GiB */
    int progress;              /* -1 = bar when stderr is a TTY, 0 = plain lines, 1 = bar,
                                  -2 = silent */
} mlxq_convert_opts;

void mlxq_convert_defaults(mlxq_convert_opts *o);
int mlxq_convert(const mlxq_convert_opts *o, mx_error *err);

/* ---- internals shared by convert.c and convert_plan.c ---- */
typedef enum { CV_RAW = 0, CV_FLOAT, CV_QUANT, CV_DEQUANT } cv_kind;

struct st_tensor;

typedef struct cv_part {             /* a byte range of a source tensor */
    const struct st_tensor *t;
    uint64_t off, nbytes;
    /* rows > 0: instead a [rows, cols] block of elements (the source's dtype) starting at byte
     * off, `ld` elements from one row to the next, written transposed as [cols, rows] (nbytes =
     * rows * cols * element size); llama4's fused [in, out] experts */
    int64_t rows, cols, ld;
} cv_part;

typedef struct cv_out {
    char name[256];          /* tensor name; CV_QUANT: the module path (no .weight) */
    cv_kind kind;
    int ndim;
    int64_t shape[8];        /* logical shape of the (float) tensor */
    mx_dtype src_dtype;      /* dtype of the parts (CV_RAW: the tensor's) */
    mx_dtype dtype;          /* output float dtype (CV_QUANT: scales/biases dtype) */
    int n_parts;
    cv_part *parts;          /* concatenated in order */
    int bits, group_size;    /* CV_QUANT: target; CV_DEQUANT / packed CV_RAW: the input's */
    const struct st_tensor *qs, *qb; /* CV_DEQUANT: input scales / biases */
    uint64_t out_bytes;      /* bytes written (all tensors of the entry) */
    uint64_t n_params;       /* logical parameters */
} cv_out;

typedef struct cv_override {
    char module[256];
    int bits, group_size;
} cv_override;

typedef struct cv_plan {
    int n, cap;
    cv_out *outs;            /* sorted by name */
    int n_overrides;
    cv_override overrides[512]; /* = MX_MAX_QUANT_OVERRIDES, what the loader accepts */
    bool l4_rename;          /* llama4 under transformers 5.x wrapper names (plan-internal) */
} cv_plan;

struct ckpt;
/* Builds the list of output tensors from the opened checkpoint. */
int cv_plan_build(cv_plan *p, const struct ckpt *c, const mlxq_convert_opts *o, mx_error *err);
void cv_plan_free(cv_plan *p);

#endif
