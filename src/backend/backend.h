/* The backend seam: a tensor descriptor and an ops table. src/model, src/engine and src/kv reach
 * a device only through this header; the CPU backend (src/backend/cpu) is the reference and the
 * CUDA backend implements the same table.
 *
 * Conventions (every backend):
 * - Activations are fp32, row-major, contiguous in their last dimension ("rows" = tokens of the
 *   step batch). Weights may be bf16, fp16 or fp32, or MLX-affine quantized (mx_qweight:
 *   matmul_q, embed_q, quantized experts in moe). Accumulation is fp32.
 * - Tensors passed to ops live on the backend's device (tensor.device == ops->device).
 * - KV storage is addressed by *physical rows*: a layer's K (and V) pool is
 *   [n_phys_rows, n_kv_heads, head_dim]. The KV cache module (src/kv) maps (sequence, position)
 *   to a physical row through a block table; dense storage is the special case of one block per
 *   sequence whose size is the sequence capacity, so one attention kernel serves both. */
#ifndef MLXCEL_BACKEND_BACKEND_H
#define MLXCEL_BACKEND_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/error.h"

#define MX_MAX_DIMS 4

typedef enum { MX_DEV_CPU = 0, MX_DEV_CUDA = 1 } mx_device;

/* ==== Tensor descriptor ==== */
typedef struct mx_tensor {
    void *data;                  /* NULL = absent (optional weights such as biases) */
    mx_dtype dtype;
    int ndim;
    int64_t shape[MX_MAX_DIMS];
    int64_t stride[MX_MAX_DIMS]; /* in elements */
    mx_device device;
} mx_tensor;

/* Contiguous descriptors. */
mx_tensor mx_tensor_1d(void *data, mx_dtype t, int64_t n0, mx_device dev);
mx_tensor mx_tensor_2d(void *data, mx_dtype t, int64_t n0, int64_t n1, mx_device dev);
mx_tensor mx_tensor_3d(void *data, mx_dtype t, int64_t n0, int64_t n1, int64_t n2, mx_device dev);
/* View of index i along dim 0 (ndim - 1 dims). */
mx_tensor mx_tensor_index(const mx_tensor *t, int64_t i);
/* View of rows [r0, r0 + n) along dim 0. */
mx_tensor mx_tensor_rows(const mx_tensor *t, int64_t r0, int64_t n);
int64_t mx_tensor_numel(const mx_tensor *t);
size_t mx_tensor_nbytes(const mx_tensor *t);
bool mx_tensor_present(const mx_tensor *t);

/* MLX affine-quantized weight (docs/quantization.md): logical [N, K], value of an element =
 * the scales-dtype value nearest to scale * code + bias (fp32 multiply, then add). */
typedef struct mx_qweight {
    mx_tensor w;       /* [N, K * bits / 32] u32 packed */
    mx_tensor scales;  /* [N, K / group] */
    mx_tensor biases;  /* [N, K / group] */
    int bits, group_size;
    /* a device backend's own layout (CUDA: cuda_q_tile, scales and biases inside w, their
     * data NULL); the shapes and dtypes stay the MLX tensors' */
    bool tiled;
} mx_qweight;

/* One product of matmul_group: out = x @ w^T (+ bias), w dense, or quantized when q is set. */
typedef struct mx_linear {
    mx_tensor *out;
    const mx_tensor *w;
    const mx_qweight *q;
    const mx_tensor *bias;
} mx_linear;

/* ==== Attention batch ====
 * Each row of the step batch is one query token of some sequence. Row i attends to the keys of
 * its sequence at positions [max(0, pos[i] - window + 1), pos[i]] (window 0 = causal, unbounded;
 * a chunked layer further starts at its chunk: mx_attn_first_key);
 * key position p of sequence s lives in physical row
 *     block_table[s * table_stride + p / block_size] * block_size + p % block_size. */
typedef struct mx_attn_batch {
    int n_rows;
    const int32_t *pos;          /* [n_rows] query position */
    const int32_t *seq;          /* [n_rows] sequence index into block_table */
    const int32_t *block_table;  /* [n_seqs, table_stride] physical block ids */
    int table_stride;
    int block_size;              /* tokens per block */
    const int64_t *write_rows;   /* [n_rows] physical row where this row's K/V are written */
    /* The arrays above are host memory, unchanged for the whole forward and identical for
     * every layer: a device backend uploads them once per step_id (new value every forward). */
    uint64_t step_id;
    /* Tasks the keys of one (row, kv head) are split over (paged-decode-splits), resolved by
     * the caller before the step: model_forward sets it for the CPU backend from the tune
     * policy (MLXCEL_PAGED_DECODE_SPLITS > autotune winner > built-in), the tuner to time
     * candidates; 0 = unsplit. The CPU backend's result does not depend on it (docs/engine.md,
     * "Batch invariance"). The CUDA backend ignores it (its count is per graph key,
     * cu_decode_splits). */
    int kv_splits;
} mx_attn_batch;

typedef struct mx_attn_params {
    int n_heads, n_kv_heads, head_dim;
    float scale;     /* softmax scale */
    float softcap;   /* 0 = none: else scores = softcap * tanh(scores / softcap) */
    int window;      /* 0 = none */
    int chunk;       /* 0 = none: else only keys of the query's chunk, [pos - pos % chunk, pos] */
} mx_attn_params;

/* Row at position pos sees keys [mx_attn_first_key(pos, window, chunk), pos]: the later of the
 * sliding-window start and the chunk start. One definition for every backend's host code. */
static inline int mx_attn_first_key(int pos, int window, int chunk) {
    int s = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
    if (chunk > 0 && pos - pos % chunk > s) s = pos - pos % chunk;
    return s;
}

/* GLU / MoE activation (mx_moe_params.activation, glu's activation; model_spec.act). */
typedef enum { ACT_SILU = 0, ACT_GELU_TANH, ACT_GELU } mx_activation;

/* ==== MoE ==== */
/* mx_moe_params.routing (the values of model_spec's mx_moe_routing) */
enum { MX_MOE_ROUTE_SOFTMAX = 0, MX_MOE_ROUTE_SIGMOID_IN = 1 };
typedef struct mx_moe_params {
    int n_experts, top_k;
    bool norm_topk;        /* renormalise the k selected probabilities to sum 1 */
    int activation;        /* mx_activation (above) */
    int routing;           /* MX_MOE_ROUTE_*: 0 softmax; 1 llama4's
                              sigmoid(top-k logit) scaling the expert's input, outputs summed
                              (norm_topk ignored) */
    /* Tensor parallelism: only experts [e0, e0 + en) are present (the others' entries of the
     * expert arrays are absent) and only they contribute; routing still spans all n_experts.
     * en = 0: every expert. */
    int e0, en;
    /* DeepSeek V3 routing instead of softmax top-k when ds_grouped (backend/moe_route.h):
     * sigmoid scores, top-k by score + ds_bias among the ds_topk_group best of ds_n_group
     * groups, weights the chosen scores (renormalised when norm_topk) times ds_scale. The CPU
     * backend implements it; the CUDA backend does not (deepseek_v3 is refused there at load). */
    bool ds_grouped;
    int ds_n_group, ds_topk_group;
    float ds_scale;
    const mx_tensor *ds_bias;  /* [n_experts] e_score_correction_bias (any float dtype); NULL = 0 */
} mx_moe_params;

/* Expert e's weights: gate [I, H], up [I, H], down [H, I] (views into fused tensors are fine).
 * Per projection, either the dense array or the quantized one is set (the other NULL); e.g.
 * gate/up quantized and down dense when the group size does not divide I. */
typedef struct mx_moe_experts {
    const mx_tensor *gate, *up, *down;     /* arrays of n_experts, or NULL */
    const mx_qweight *qgate, *qup, *qdown; /* arrays of n_experts, or NULL (matmul_q backends) */
} mx_moe_experts;

/* ==== Step hooks (device backends) ====
 * model_forward announces each forward to the backend before the first op, with every host
 * array the ops of this step will pass (same pointers). A device backend uploads them once,
 * and for a pure decode step may replay a captured graph of the whole op sequence instead of
 * having the ops issued again (CUDA graphs per batch size). */
typedef struct mx_step {
    const mx_attn_batch *ab;     /* the batch every kv_write / attention of this step receives */
    const int32_t *tokens;       /* [n_rows] ids passed to embed */
    int n_seqs;                  /* rows of ab->block_table */
    int n_out;
    const int32_t *out_rows;     /* [n_out] idx passed to gather_rows */
    bool decode_only;            /* every row is the one row of its sequence, and sampled */
} mx_step;

enum { MX_STEP_RUN = 0, MX_STEP_REPLAYED = 1 };

/* ==== Ops table ==== */
typedef struct backend_ops {
    const char *name;
    mx_device device;
    mx_dtype kv_dtype;                        /* element type of the KV pools (CPU: f32) */
    bool kv_types_all;                        /* device backend that also keeps pools of every
                                                 other cache type (backend/kvfmt/kv_quant.h) */

    /* ---- memory ---- */
    void *(*alloc)(size_t nbytes);            /* zeroed; NULL on failure */
    void (*free)(void *p);
    /* Makes a weight usable on the device: CPU returns the host view as is. */
    int (*upload)(mx_tensor *dst, const mx_tensor *host, mx_error *err);
    /* Same, keeping the host dtype byte for byte (quantized weights: U32 packed codes and
     * their f16/bf16/f32 scales and biases). NULL: upload (which keeps dtypes on the CPU). */
    int (*upload_raw)(mx_tensor *dst, const mx_tensor *host, mx_error *err);
    /* upload of n dense weights sharing their input (Q, K, V) into one device buffer, back to
     * back in order, so that the backend may run their matmuls as one. NULL: upload each. */
    int (*upload_group)(mx_tensor *dst, const mx_tensor *host, int n, mx_error *err);
    /* upload of one 2-D MLX-quantized weight (packed codes w, scales s, biases b: host
     * tensors) into *q (bits, group_size set by the caller), in a layout of the backend's
     * choosing (q->tiled). NULL: upload_raw of each. */
    int (*upload_q)(mx_qweight *q, const mx_tensor *w, const mx_tensor *s, const mx_tensor *b,
                    mx_error *err);
    void (*copy_to_host)(void *dst, const mx_tensor *src);
    void (*copy_from_host)(mx_tensor *dst, const void *src);

    /* ---- elementwise / norms ---- */
    /* out[n, H] = table[ids[i]] * scale; `scale` is applied in the table's dtype precision
     * when round_scale is set (transformers multiplies in the embedding dtype). */
    void (*embed)(mx_tensor *out, const mx_tensor *table, const int32_t *ids, int n, float scale,
                  bool round_scale);
    /* out[r] = x[r] / rms(x[r]) * (w + offset); x, out: [rows, D] (rows may be n*heads). */
    void (*rms_norm)(mx_tensor *out, const mx_tensor *x, const mx_tensor *w, float eps, float offset);
    /* x[n, heads, head_dim] rotated in place on its first rot_dim dims, rotate-half (NeoX)
     * pairing; cos_sin: [n, rot_dim / 2, 2] per-row (cos, sin) already scaled by the
     * attention factor. */
    void (*rope)(mx_tensor *x, const float *cos_sin, int rot_dim);
    void (*add)(mx_tensor *x, const mx_tensor *y);         /* x += y */
    /* out[n, I] = act(gate) * up */
    void (*glu)(mx_tensor *out, const mx_tensor *gate, const mx_tensor *up, int activation);
    void (*softcap)(mx_tensor *x, float cap);              /* x = cap * tanh(x / cap) */
    /* out[i] = x[idx[i]] for i < n (row gather, used for logits of selected rows); idx is
     * host memory. */
    void (*gather_rows)(mx_tensor *out, const mx_tensor *x, const int32_t *idx, int n);

    /* ---- matmul ---- */
    /* out[n, N] = x[n, K] @ w[N, K]^T (+ bias[N]). */
    void (*matmul)(mx_tensor *out, const mx_tensor *x, const mx_tensor *w, const mx_tensor *bias);
    /* Same with a quantized weight (bias optional); NULL when the backend has none. A backend
     * that sets it also handles embed_q and quantized experts in moe. CPU: bit-identical to
     * matmul on the dequantized weight (docs/quantization.md). */
    void (*matmul_q)(mx_tensor *out, const mx_tensor *x, const mx_qweight *w, const mx_tensor *bias);
    /* Products of one x (q/k/v, gate/up), each as matmul / matmul_q computes it; NULL: the
     * forward calls those one by one. CPU: one parallel region for all of them. */
    void (*matmul_group)(const mx_tensor *x, const mx_linear *ls, int n);
    /* embed from a quantized table [V, H] (dequantized rows; scale as embed). */
    void (*embed_q)(mx_tensor *out, const mx_qweight *table, const int32_t *ids, int n,
                    float scale, bool round_scale);

    /* ---- MoE: routing + expert dispatch ----
     * out[n, H] = sum_k p_k * down_e(act(gate_e x) * up_e x) over the top-k experts of
     * softmax(router_logits[n, E]); with routing 1 (llama4) the top-k of the logits, each
     * with s_k = sigmoid(logit): out = sum_k down_e(act(s_k gate_e x) * (s_k up_e x)). */
    int (*moe)(mx_tensor *out, const mx_tensor *x, const mx_tensor *router_logits,
               const mx_moe_experts *ex, const mx_moe_params *p, mx_error *err);

    /* ---- KV + attention ---- */
    /* k_pool/v_pool: [n_phys_rows, n_kv_heads, head_dim]; k, v: [n, n_kv_heads, head_dim]. */
    void (*kv_write)(mx_tensor *k_pool, mx_tensor *v_pool, const mx_tensor *k, const mx_tensor *v,
                     const mx_attn_batch *b);
    /* out[n, n_heads, head_dim] from q[n, n_heads, head_dim] against the pools (which already
     * hold this step's keys). Serves prefill chunks and decode rows alike. */
    void (*attention)(mx_tensor *out, const mx_tensor *q, const mx_tensor *k_pool,
                      const mx_tensor *v_pool, const mx_attn_batch *b, const mx_attn_params *p);
    /* Copies physical rows src -> dst of a pool (copy-on-write of a shared KV block). */
    void (*kv_copy_rows)(mx_tensor *pool, int64_t dst_row, int64_t src_row, int64_t n_rows);

    /* ---- convert ---- */
    void (*convert)(mx_tensor *dst, const mx_tensor *src);   /* same shape, any float dtypes */

    /* ---- optional hooks (NULL = not needed) ---- */
    /* After the last upload of a model: waits until every weight is resident (eager policy). */
    int (*finish_load)(mx_error *err);
    /* Before the first op of a forward: MX_STEP_RUN (issue the ops) or MX_STEP_REPLAYED (the
     * backend already enqueued the whole op sequence; skip to step_end); -1 on error. */
    int (*step_begin)(const mx_step *st, mx_error *err);
    /* After the last op of a forward, before the logits are copied to the host (err may be
     * NULL when the forward already failed: the backend only cleans up). */
    int (*step_end)(mx_error *err);
    /* Device errors are sticky: the first failure since the last call, as -1 + err. */
    int (*check)(mx_error *err);
    /* One line: device, capability, memory, applied launch settings. */
    void (*describe)(char *buf, size_t len);
    /* Peak device bytes allocated since the last reset (reset = true clears it). */
    uint64_t (*mem_peak)(bool reset);
    /* Measured device copy bandwidth in GB/s (bytes read + written), 0 on failure. */
    double (*copy_bandwidth)(void);
    /* Greedy sampling on the device: for each row of logits [n, V] (device), the argmax
     * (NaN = -inf, lowest id wins ties; -1 when no logit is finite) and its log-softmax, into
     * host ids[n] / logprobs[n]; only 8 bytes per row cross to the host. */
    int (*greedy_rows)(int32_t *ids, float *logprobs, const mx_tensor *logits, mx_error *err);
    /* Tensor parallelism over several devices of one backend (one thread per device): binds
     * the calling thread to device `ordinal`, so its ops, allocations, frees and uploads go
     * there until it binds another (threads start on device 0). NULL: one device only. */
    int (*bind_device)(int ordinal, mx_error *err);
    int (*device_count)(void);                /* devices bind_device accepts */
} backend_ops;

const backend_ops *backend_cpu(void);
/* CUDA builds only (src/backend/cuda): initialises device 0 on first call; NULL + err when
 * no usable GPU is present. Use backend_get, which also works in builds without CUDA. */
const backend_ops *backend_cuda(mx_error *err);
/* NULL and an error naming the reason when the device has no backend in this build. */
const backend_ops *backend_get(mx_device dev, mx_error *err);
const char *backend_device_name(mx_device dev);

/* What a front end may want to know of a device without opening its backend (inspect's
 * available memory, tune's device key): device 0 of that kind. */
typedef struct mx_device_facts {
    char name[256];
    int cc_major, cc_minor;      /* CUDA compute capability; 0 on the CPU */
    int sm_count;                /* CUDA multiprocessors; 0 on the CPU */
    size_t free_bytes, total_bytes;
} mx_device_facts;
/* CUDA: the GPU's facts, -1 + err when the build has no CUDA backend or no GPU is usable (never
 * aborts, initialises nothing). The CPU is not asked here (its facts are the host's). */
int backend_device_facts(mx_device dev, mx_device_facts *out, mx_error *err);

#endif
