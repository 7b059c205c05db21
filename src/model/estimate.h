/* Memory estimate for a model_spec: weights (given, exact from the headers), KV cache,
 * activations, headroom. Pure arithmetic; `mlxcel inspect` prints it and the engine may use
 * it for admission. The formulas are documented in docs/inspect.md and `mlxcel inspect -h`. */
#ifndef MLXCEL_MODEL_ESTIMATE_H
#define MLXCEL_MODEL_ESTIMATE_H

#include <stdint.h>

#include "model/model_spec.h"

/* KV cache element types: the engine's cache types (f32, f16, bf16, q8_0, q4_0, turbo2..4:
 * -ctk / -ctv) and int8 (a what-if: one f32 scale per head per token; the engine has no int8
 * cache). */
typedef enum {
    MX_KV_F16 = 0, MX_KV_BF16, MX_KV_INT8, MX_KV_F32, MX_KV_Q8_0, MX_KV_Q4_0,
    MX_KV_TURBO2, MX_KV_TURBO3, MX_KV_TURBO4,
} mx_kv_dtype;

/* Prefill chunk the activation estimate assumes (tokens per sequence per step). */
#define ESTIMATE_PREFILL_CHUNK 512
/* Fixed headroom (CUDA context, cuBLAS workspace, allocator slack) plus a share of the rest. */
#define ESTIMATE_HEADROOM_FIXED (512ull << 20)
#define ESTIMATE_HEADROOM_PERCENT 5

typedef struct mx_mem_estimate {
    uint64_t params;                  /* logical parameters (quantized weights unpacked) */
    uint64_t weights_bytes;           /* exact, from the safetensors headers */
    uint64_t kv_bytes_per_token;      /* one more token of one sequence in every layer (with
                                       * the scales); sliding layers stop growing at the window */
    uint64_t kv_scale_bytes_per_token;/* the scales in it: int8 one f32 per head per token,
                                       * q8_0 / q4_0 / turbo one fp16 per 32 values; 0 otherwise */
    uint64_t kv_bytes_total;          /* batch x sum over layers of min(ctx, window) tokens */
    uint64_t activation_bytes;
    uint64_t headroom_bytes;
    uint64_t total_bytes;             /* weights + kv_total + activations + headroom */
    int ctx, batch;
    int n_sliding_layers;
} mx_mem_estimate;

const char *kv_dtype_name(mx_kv_dtype t);
/* "f16" | "bf16" | "f32" | "int8" | "q8_0" | "q4_0" | "turbo2" | "turbo3" | "turbo4" -> 0, else -1. */
int kv_dtype_parse(const char *s, mx_kv_dtype *out);
/* Values per block: 32 for q8_0 / q4_0 / turbo (head_dim must be a multiple), else 1. */
int kv_dtype_block(mx_kv_dtype t);
/* Bytes of one head's K (or V) row of head_dim values stored as t (q8_0 / q4_0 / turbo: whole blocks,
 * the engine's pool rows exactly); *scale_bytes: the scales in it. */
uint64_t kv_dtype_head_bytes(mx_kv_dtype t, int head_dim, uint64_t *scale_bytes);

/* Fills `out`; ctx and batch must be >= 1. The same type for K and V. */
void estimate_memory(const model_spec *s, uint64_t params, uint64_t weights_bytes, int ctx,
                     int batch, mx_kv_dtype kv, mx_mem_estimate *out);
/* The same with K and V types chosen apart (-ctk / -ctv). */
void estimate_memory_kv(const model_spec *s, uint64_t params, uint64_t weights_bytes, int ctx,
                        int batch, mx_kv_dtype kv_k, mx_kv_dtype kv_v, mx_mem_estimate *out);

#endif
