/* Memory estimate for a model_spec: weights (given, exact from the headers), KV cache,
 * activations, headroom. Pure arithmetic; `mlxcel inspect` prints it and the engine may use
 * it for admission. The formulas are documented in docs/inspect.md and `mlxcel inspect -h`. */
#ifndef MLXCEL_MODEL_ESTIMATE_H
#define MLXCEL_MODEL_ESTIMATE_H

#include <stdint.h>

#include "model/model_spec.h"

typedef enum { MX_KV_F16 = 0, MX_KV_BF16, MX_KV_INT8, MX_KV_F32 } mx_kv_dtype;

/* Prefill chunk the activation estimate assumes (tokens per sequence per step). */
#define ESTIMATE_PREFILL_CHUNK 512
/* Fixed headroom (CUDA context, cuBLAS workspace, allocator slack) plus a share of the rest. */
#define ESTIMATE_HEADROOM_FIXED (512ull << 20)
#define ESTIMATE_HEADROOM_PERCENT 5

typedef struct mx_mem_estimate {
    uint64_t params;                  /* logical parameters (quantized weights unpacked) */
    uint64_t weights_bytes;           /* exact, from the safetensors headers */
    uint64_t kv_bytes_per_token;      /* one more token of one sequence in every layer (with
                                       * int8 scales); sliding layers stop growing at the window */
    uint64_t kv_scale_bytes_per_token;/* int8 only: per-head-per-token f32 scales for K and V */
    uint64_t kv_bytes_total;          /* batch x sum over layers of min(ctx, window) tokens */
    uint64_t activation_bytes;
    uint64_t headroom_bytes;
    uint64_t total_bytes;             /* weights + kv_total + activations + headroom */
    int ctx, batch;
    int n_sliding_layers;
} mx_mem_estimate;

const char *kv_dtype_name(mx_kv_dtype t);
/* "f16" | "bf16" | "f32" | "int8" -> 0, else -1. */
int kv_dtype_parse(const char *s, mx_kv_dtype *out);

/* Fills `out`; ctx and batch must be >= 1. */
void estimate_memory(const model_spec *s, uint64_t params, uint64_t weights_bytes, int ctx,
                     int batch, mx_kv_dtype kv, mx_mem_estimate *out);

#endif
