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

int ckpt_open(ckpt *c, const char *dir, mx_error *err);
void ckpt_close(ckpt *c);
/* NULL when absent. */
const st_tensor *ckpt_find(const ckpt *c, const char *name);
/* Finds `name` and checks dtype class and shape; errors name the tensor, expected and found. */
int ckpt_expect(const ckpt *c, const char *name, int ndim, const int64_t *shape,
                const st_tensor **out, mx_error *err);

#endif
