/* A checkpoint directory: config.json (+ generation_config.json), one or more safetensors
 * shards (model.safetensors.index.json, else every *.safetensors), the tokenizer files. */
#ifndef MLXCEL_IO_CHECKPOINT_H
#define MLXCEL_IO_CHECKPOINT_H

#include <stdint.h>

#include "io/safetensors.h"
#include "model/model_spec.h"

typedef struct ckpt {
    char *dir;
    model_spec spec;
    int n_files;
    st_file *files;
    uint64_t weights_bytes;   /* sum of tensor byte lengths over all shards */
    uint64_t n_params;        /* logical parameter count (quantized weights unpacked) */
} ckpt;

/* Loads config.json (+ generation_config.json) into c->spec, opens every shard, and checks the
 * whole set: no tensor in two shards, index entries present, MLX-packed weights consistent
 * with their scales/biases and the config's quantization. spec.dtype is set to the float dtype
 * holding most weight bytes. Errors name the file and the problem. */
int ckpt_open(ckpt *c, const char *dir, mx_error *err);
void ckpt_close(ckpt *c);
/* NULL when absent. */
const st_tensor *ckpt_find(const ckpt *c, const char *name);
/* The shard holding `name`, NULL when absent. */
const st_file *ckpt_file_of(const ckpt *c, const char *name);
/* Finds `name` and checks dtype class and shape; errors name the tensor, expected and found.
 * `shape` is the logical shape; an entry < 0 matches any size. Float tensors (F32/F16/BF16)
 * must match it exactly. A U32 tensor is accepted as an MLX-packed weight when the config
 * quantizes that module: its last dimension must then be shape[-1] * bits / 32 (the matching
 * .scales/.biases were already checked by ckpt_open). Any other dtype is an error. */
int ckpt_expect(const ckpt *c, const char *name, int ndim, const int64_t *shape,
                const st_tensor **out, mx_error *err);

/* Checks that every tensor the spec implies (embeddings, norms, attention, MLP or experts,
 * lm_head unless tied) exists with the shape the config implies. Hugging Face names under any
 * wrapper prefix; MoE experts per-expert, MLX-stacked or 5.x-fused. src/io/ckpt_check.c. */
int ckpt_validate(const ckpt *c, mx_error *err);

#endif
