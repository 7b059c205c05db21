/* Private layout of `model` shared by model_load.c and model_forward.c. */
#ifndef MLXCEL_MODEL_INTERNAL_H
#define MLXCEL_MODEL_INTERNAL_H

#include "backend/collective.h"
#include "io/checkpoint.h"
#include "model/model.h"

struct model {
    model_spec spec;
    const backend_ops *be;
    void *ck;                    /* the weight source, owned when loaded from a directory */
    void (*ck_free)(void *);     /* set by model_load (keeps binding free of the reader) */
    model_weight tok_embd;       /* [V, H] */
    mx_tensor out_norm;          /* [H] */
    model_weight lm_head;        /* [V, H] (= tok_embd when tied) */
    bool no_head;                /* no lm_head.weight and not tied: hidden states only */
    model_layer *layers;         /* [n_layers] */
    uint64_t n_params, weight_bytes;
    uint64_t embd_bytes, expert_bytes; /* of weight_bytes: the token table, all MoE experts */
    int n_lin, n_lin_q;          /* Linear/Embedding weights bound, of which quantized */
    int rot_dim;
    uint64_t n_forward;          /* step ids for mx_attn_batch */
    struct model_splits_memo { uint64_t step; int hq, hkv, d, bs, S; } splits_memo; /* model_attn_splits */

    /* ---- tensor parallelism (model_tp.c, docs/tensor-parallel.md) ----
     * A rank model holds its slice of the weights; TP = 1 is rank 0 of 1 and takes the same
     * forward with the collectives skipped. A TP > 1 model is a group: shards[tp_size] rank
     * models sharing `coll`, and no weights of its own. */
    int tp_rank, tp_size;
    int hq, hkv, ffn;            /* this rank's query heads, KV heads, dense MLP width */
    int v0, vn;                  /* this rank's vocabulary rows [v0, v0 + vn) */
    int e0, en;                  /* this rank's MoE experts [e0, e0 + en) (all for one rank) */
    mx_collective *coll;         /* NULL outside a TP group; owned by the group */
    model **shards;              /* group only: [tp_size] */
    void **tp_owned;             /* host copies of column slices (CPU upload keeps views) */
    int n_tp_owned, cap_tp_owned;
    float *lol;                  /* [n_out, vn] this rank's logits (TP > 1; else = lo) */
    float *zero_host;            /* [rows, H] zeros for rows whose token another rank owns */

    /* ---- scratch (device), grown to cap_rows ---- */
    int cap_rows, cap_out;
    float *x;        /* [rows, H] residual stream */
    float *h;        /* [rows, H] normed input */
    float *q;        /* [rows, Hq * D] */
    float *k, *v;    /* [rows, Hkv * D] */
    float *att;      /* [rows, Hq * D] attention output */
    float *o;        /* [rows, H] projection output */
    float *g, *u;    /* [rows, I] MLP gate / up (I = max dense, expert width) */
    float *rl;       /* [rows, E] router logits */
    float *cs_glob;  /* [rows, rot_dim] cos/sin for full-attention layers */
    float *cs_loc;   /* [rows, rot_dim] cos/sin for sliding layers */
    float *o2;       /* [rows, H] llama4: the shared expert's output */
    float *cs_temp;  /* [rows, rot_dim] llama4 NoPE layers: (cos, sin) = (q scale, 0) */
    float *xo;       /* [n_out, H] gathered rows for the head */
    float *lo;       /* [n_out, V] logits on the device */
    float *xh;       /* [cap_hid, H] final-normed hidden states of the embedding rows */
    int cap_hid;
    mx_tensor ones;  /* [head_dim] weight of the weightless q/k norm (llama4) */
    void **host_owned; /* host copies of permuted / transposed weights (model_own: llama4, MLA) */
    int n_host_owned, cap_host_owned;
    float *mla_qa;   /* [rows, Lq] MLA q LoRA (model_mla.c) */
    float *mla_qf;   /* [rows, Hq * (R + N)] MLA per-head [q_pe | q_nope] */
    float *mla_ov;   /* [rows, Hq * V] MLA per-head values, the input of o_proj */
    int mla_cap;     /* rows of the three above */
    /* ---- host scratch ---- */
    float *cs_host;  /* [rows, rot_dim] */
    float *inv_host; /* [rot_dim / 2] */
};

/* model_forward.c: out = down(act(gate h) * up h), a dense gated MLP of width I (a layer's
 * MLP, a shared expert) through the model's g / u scratch. */
void model_mlp(model *m, mx_tensor *out, const mx_tensor *h, const model_weight *gate,
               const model_weight *up, const model_weight *down, int I);
/* model_llama4.c: host memory freed with the model (NULL on out of memory). */
void *model_own(model *m, size_t nbytes);
/* The weight source of a llama4 model: wraps the checkpoint's, returning q_proj / k_proj rows
 * (weight, MLX scales / biases, bias) permuted per head, even dims then odd, so that the
 * half-split rope computes the interleaved one (copies owned by m; oom set on failure). */
typedef struct l4_src {
    model_weight_fn fn;
    void *ctx;
    model *m;
    int oom;
} l4_src;
mx_tensor l4_weight(void *ctx, const char *name);
/* Rows of D-row heads permuted as l4_weight does: dst row h*D + j = src row h*D + 2j for
 * j < D/2, h*D + 2(j - D/2) + 1 otherwise. */
void l4_permute_rows(void *dst, const void *src, int64_t rows, size_t row_bytes, int D);
/* [E, A, B] -> [E, B, A] host copy owned by m (data NULL on out of memory). */
mx_tensor l4_transpose_experts(model *m, const mx_tensor *t);

/* model_load.c: one rank's model (rank 0 of 1 = the plain model). */
int model_bind_rank(model **out, const model_spec *spec, model_weight_fn fn, void *ctx,
                    const backend_ops *be, int rank, int tp_size, mx_error *err);
/* model_forward.c: scratch for a step of `rows` rows, n_out logits rows and n_hidden hidden rows. */
int model_ensure_scratch(model *m, int rows, int n_out, int n_hidden, mx_error *err);
/* model_forward.c: one rank's forward (outputs: only rank 0's are meaningful to the caller;
 * o NULL = none). */
int model_forward_rank(model *m, kv_cache *kv, const model_batch *b, const model_out *o, mx_error *err);
/* model_tp.c: a TP group's forward, one thread per rank (o: rank 0's outputs). */
int model_tp_forward(model *m, kv_cache *kv, const model_batch *b, const model_out *o, mx_error *err);
/* ==== DeepSeek V3 (model_mla.c) ==== */
/* Refuses what MLA does not run on yet (backend, TP, quantized weights); 0 for other families. */
int model_mla_check(const model *m, mx_error *err);
/* Binds layer li's MLA attention weights (prefix: the decoder's tensor prefix, e.g. "model."). */
int model_mla_bind(model *m, model_layer *L, int li, model_weight_fn fn, void *ctx,
                   const char *prefix, mx_error *err);
/* A MoE layer's shared experts and router correction bias. */
int model_mla_bind_moe(model *m, model_layer *L, int li, model_weight_fn fn, void *ctx,
                       const char *prefix, mx_error *err);
/* o [n, H] = MLA attention of the normed input h [n, H], absorbed; writes the latent K/V. */
int model_mla_attention(model *m, kv_cache *kv, int l, const mx_tensor *h, mx_tensor *o,
                        mx_attn_batch *ab, mx_error *err);
/* The MoE params' DeepSeek routing fields for layer L. */
void model_mla_moe_params(const model *m, const model_layer *L, mx_moe_params *mp);
/* A DeepSeek MoE layer with shared experts: x += o (the routed experts' output), then o = the
 * shared experts of h, which the forward adds next. No-op without shared experts. */
void model_mla_shared(model *m, const model_layer *L, const mx_tensor *h, mx_tensor *x, mx_tensor *o);
/* Vocabulary rows of a rank: ceil(V / N) per rank, the last rank the remainder. */
/* Binds the calling thread to rank `rank`'s device on a multi-device backend (rank r drives
 * device r); a no-op returning 0 on the CPU. err may be NULL. */
int model_tp_bind(const backend_ops *be, int rank, mx_error *err);
static inline void tp_vocab_range(int V, int rank, int n, int *v0, int *vn) {
    const int c = (V + n - 1) / n;
    *v0 = rank * c < V ? rank * c : V;
    *vn = (*v0 + c < V ? *v0 + c : V) - *v0;
}

/* mx_attn_batch.kv_splits for one attention geometry of this step (model_forward.c). */
int model_attn_splits(model *m, const mx_attn_batch *ab, const mx_attn_params *ap);

#endif
