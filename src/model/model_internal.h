/* Private layout of `model` shared by model_load.c and model_forward.c. */
#ifndef MLXCEL_MODEL_INTERNAL_H
#define MLXCEL_MODEL_INTERNAL_H

#include "io/checkpoint.h"
#include "model/model.h"

struct model {
    model_spec spec;
    const backend_ops *be;
    ckpt *ck;                    /* owned when loaded from a directory */
    void (*ck_free)(ckpt *);     /* set by model_load (keeps binding free of the reader) */
    model_weight tok_embd;       /* [V, H] */
    mx_tensor out_norm;          /* [H] */
    model_weight lm_head;        /* [V, H] (= tok_embd when tied) */
    model_layer *layers;         /* [n_layers] */
    uint64_t n_params, weight_bytes;
    int n_lin, n_lin_q;          /* Linear/Embedding weights bound, of which quantized */
    int rot_dim;
    uint64_t n_forward;          /* step ids for mx_attn_batch */

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
    float *xo;       /* [n_out, H] gathered rows for the head */
    float *lo;       /* [n_out, V] logits on the device */
    /* ---- host scratch ---- */
    float *cs_host;  /* [rows, rot_dim] */
    float *inv_host; /* [rot_dim / 2] */
};

#endif
