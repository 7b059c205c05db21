/* Weight binding: maps each family's tensor names onto model_layer slots, checks shapes, and
 * makes the weights usable on the backend. The names are the only per-family knowledge here;
 * everything else lives in model_spec. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"

/* ==== Name lookup ==== */
typedef struct binder {
    model *m;
    model_weight_fn fn;
    void *ctx;
    const char *prefix;  /* "model." or a multimodal wrapper's text prefix */
    mx_error *err;
} binder;

static mx_tensor find(binder *b, const char *fmt, int layer, int expert) {
    char rel[256], full[320];
    if (expert >= 0) snprintf(rel, sizeof rel, fmt, layer, expert);
    else if (layer >= 0) snprintf(rel, sizeof rel, fmt, layer);
    else snprintf(rel, sizeof rel, "%s", fmt);
    snprintf(full, sizeof full, "%s%s", b->prefix, rel);
    return b->fn(b->ctx, full);
}

/* Binds `name` with the given 1-D or 2-D shape (d1 = 0 for 1-D). */
static int bind(binder *b, mx_tensor *dst, bool required, int64_t d0, int64_t d1, const char *fmt,
                int layer, int expert) {
    mx_tensor t = find(b, fmt, layer, expert);
    char name[320];
    if (expert >= 0) snprintf(name, sizeof name, fmt, layer, expert);
    else if (layer >= 0) snprintf(name, sizeof name, fmt, layer);
    else snprintf(name, sizeof name, "%s", fmt);
    if (!t.data) {
        if (!required) {
            memset(dst, 0, sizeof *dst);
            return 0;
        }
        return mx_fail(b->err, "tensor %s%s: missing from the checkpoint", b->prefix, name);
    }
    const int ndim = d1 ? 2 : 1;
    if (t.ndim != ndim || t.shape[0] != d0 || (ndim == 2 && t.shape[1] != d1))
        return mx_fail(b->err, "tensor %s%s: expected shape [%lld%s%lld], found ndim %d [%lld, %lld]",
                       b->prefix, name, (long long)d0, d1 ? ", " : "", d1 ? (long long)d1 : 0LL,
                       t.ndim, (long long)t.shape[0], t.ndim > 1 ? (long long)t.shape[1] : 0LL);
    if (t.dtype != MX_BF16 && t.dtype != MX_F16 && t.dtype != MX_F32)
        return mx_fail(b->err, "tensor %s%s: dtype %s not supported (bf16, f16, f32)", b->prefix,
                       name, mx_dtype_name(t.dtype));
    if (b->m->be->upload(dst, &t, b->err)) return mx_wrap(b->err, "tensor %s%s", b->prefix, name);
    b->m->n_params += (uint64_t)mx_tensor_numel(&t);
    b->m->weight_bytes += mx_tensor_nbytes(&t);
    return 0;
}

/* ==== MoE experts: per-expert tensors or transformers 5.x fused 3-D tensors ==== */
static int bind_experts(binder *b, model_layer *L, int li) {
    const model_spec *s = &b->m->spec;
    const int E = s->n_experts, H = s->hidden_size, I = s->moe_intermediate_size;
    L->exp_gate = calloc((size_t)E, sizeof(mx_tensor));
    L->exp_up = calloc((size_t)E, sizeof(mx_tensor));
    L->exp_down = calloc((size_t)E, sizeof(mx_tensor));
    if (!L->exp_gate || !L->exp_up || !L->exp_down) return mx_fail(b->err, "out of memory");
    const char *router_names[] = {"layers.%d.mlp.gate.weight", "layers.%d.block_sparse_moe.gate.weight"};
    const char *router = NULL;
    for (int i = 0; i < 2 && !router; i++)
        if (find(b, router_names[i], li, -1).data) router = router_names[i];
    if (!router)
        return mx_fail(b->err, "layer %d: no MoE router (%smodel.layers.%d.mlp.gate.weight)", li,
                       b->prefix, li);
    if (bind(b, &L->router, true, E, H, router, li, -1)) return -1;

    mx_tensor gu = find(b, "layers.%d.mlp.experts.gate_up_proj", li, -1);
    if (gu.data) { /* fused: gate_up [E, 2I, H], down [E, H, I] */
        mx_tensor dn = find(b, "layers.%d.mlp.experts.down_proj", li, -1);
        if (gu.ndim != 3 || gu.shape[0] != E || gu.shape[1] != 2 * I || gu.shape[2] != H || !dn.data ||
            dn.ndim != 3 || dn.shape[0] != E || dn.shape[1] != H || dn.shape[2] != I)
            return mx_fail(b->err, "layer %d: fused experts: expected gate_up_proj [%d, %d, %d] and "
                           "down_proj [%d, %d, %d]", li, E, 2 * I, H, E, H, I);
        mx_tensor gud, dnd;
        if (b->m->be->upload(&gud, &gu, b->err) || b->m->be->upload(&dnd, &dn, b->err)) return -1;
        for (int e = 0; e < E; e++) {
            mx_tensor ge = mx_tensor_index(&gud, e);
            L->exp_gate[e] = mx_tensor_rows(&ge, 0, I);
            L->exp_up[e] = mx_tensor_rows(&ge, I, I);
            L->exp_down[e] = mx_tensor_index(&dnd, e);
        }
        b->m->n_params += (uint64_t)(mx_tensor_numel(&gu) + mx_tensor_numel(&dn));
        b->m->weight_bytes += mx_tensor_nbytes(&gu) + mx_tensor_nbytes(&dn);
        return 0;
    }
    const bool mixtral = find(b, "layers.%d.block_sparse_moe.experts.%d.w1.weight", li, 0).data != NULL;
    for (int e = 0; e < E; e++) {
        if (mixtral) {
            if (bind(b, &L->exp_gate[e], true, I, H, "layers.%d.block_sparse_moe.experts.%d.w1.weight", li, e) ||
                bind(b, &L->exp_up[e], true, I, H, "layers.%d.block_sparse_moe.experts.%d.w3.weight", li, e) ||
                bind(b, &L->exp_down[e], true, H, I, "layers.%d.block_sparse_moe.experts.%d.w2.weight", li, e))
                return -1;
        } else if (bind(b, &L->exp_gate[e], true, I, H, "layers.%d.mlp.experts.%d.gate_proj.weight", li, e) ||
                   bind(b, &L->exp_up[e], true, I, H, "layers.%d.mlp.experts.%d.up_proj.weight", li, e) ||
                   bind(b, &L->exp_down[e], true, H, I, "layers.%d.mlp.experts.%d.down_proj.weight", li, e)) {
            return -1;
        }
    }
    return 0;
}

/* ==== Layers ==== */
static int bind_layer(binder *b, int li) {
    model *m = b->m;
    const model_spec *s = &m->spec;
    model_layer *L = &m->layers[li];
    const int H = s->hidden_size, D = s->head_dim, QD = s->n_heads * D, KD = s->n_kv_heads * D;
    if (bind(b, &L->attn_norm, true, H, 0, "layers.%d.input_layernorm.weight", li, -1) ||
        bind(b, &L->wq, true, QD, H, "layers.%d.self_attn.q_proj.weight", li, -1) ||
        bind(b, &L->wk, true, KD, H, "layers.%d.self_attn.k_proj.weight", li, -1) ||
        bind(b, &L->wv, true, KD, H, "layers.%d.self_attn.v_proj.weight", li, -1) ||
        bind(b, &L->wo, true, H, QD, "layers.%d.self_attn.o_proj.weight", li, -1) ||
        bind(b, &L->bq, s->qkv_bias, QD, 0, "layers.%d.self_attn.q_proj.bias", li, -1) ||
        bind(b, &L->bk, s->qkv_bias, KD, 0, "layers.%d.self_attn.k_proj.bias", li, -1) ||
        bind(b, &L->bv, s->qkv_bias, KD, 0, "layers.%d.self_attn.v_proj.bias", li, -1) ||
        bind(b, &L->bo, s->o_bias, H, 0, "layers.%d.self_attn.o_proj.bias", li, -1) ||
        bind(b, &L->q_norm, s->qk_norm, D, 0, "layers.%d.self_attn.q_norm.weight", li, -1) ||
        bind(b, &L->k_norm, s->qk_norm, D, 0, "layers.%d.self_attn.k_norm.weight", li, -1))
        return -1;
    if (s->sandwich_norms) {
        if (bind(b, &L->post_attn_norm, true, H, 0, "layers.%d.post_attention_layernorm.weight", li, -1) ||
            bind(b, &L->ffn_norm, true, H, 0, "layers.%d.pre_feedforward_layernorm.weight", li, -1) ||
            bind(b, &L->post_ffn_norm, true, H, 0, "layers.%d.post_feedforward_layernorm.weight", li, -1))
            return -1;
    } else if (bind(b, &L->ffn_norm, true, H, 0, "layers.%d.post_attention_layernorm.weight", li, -1)) {
        return -1;
    }
    L->moe = s->n_experts > 0 && !s->layer_dense_mlp[li];
    if (L->moe) return bind_experts(b, L, li);
    const int I = s->intermediate_size;
    return bind(b, &L->w_gate, true, I, H, "layers.%d.mlp.gate_proj.weight", li, -1) ||
                   bind(b, &L->w_up, true, I, H, "layers.%d.mlp.up_proj.weight", li, -1) ||
                   bind(b, &L->w_down, true, H, I, "layers.%d.mlp.down_proj.weight", li, -1)
               ? -1
               : 0;
}

/* ==== Entry points ==== */
int model_bind(model **out, const model_spec *spec, model_weight_fn fn, void *ctx,
               const backend_ops *be, mx_error *err) {
    model *m = calloc(1, sizeof *m);
    if (!m) return mx_fail(err, "out of memory");
    m->spec = *spec;
    m->be = be;
    const model_spec *s = &m->spec;
    if (s->n_layers <= 0 || s->n_layers > MX_MAX_LAYERS || s->n_heads <= 0 || s->n_kv_heads <= 0 ||
        s->n_heads % s->n_kv_heads || s->head_dim <= 0 || s->hidden_size <= 0 || s->vocab_size <= 0) {
        mx_fail(err, "model spec: inconsistent shapes (layers %d, heads %d/%d, head_dim %d)",
                s->n_layers, s->n_heads, s->n_kv_heads, s->head_dim);
        free(m);
        return -1;
    }
    m->rot_dim = rope_rot_dim(s);
    m->layers = calloc((size_t)s->n_layers, sizeof(model_layer));
    if (!m->layers) {
        free(m);
        return mx_fail(err, "out of memory");
    }
    binder b = {.m = m, .fn = fn, .ctx = ctx, .err = err, .prefix = "model."};
    static const char *prefixes[] = {"model.", "model.language_model.", "language_model.model.", ""};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        b.prefix = prefixes[i];
        if (find(&b, "embed_tokens.weight", -1, -1).data) break;
    }
    const int H = s->hidden_size, V = s->vocab_size;
    if (bind(&b, &m->tok_embd, true, V, H, "embed_tokens.weight", -1, -1) ||
        bind(&b, &m->out_norm, true, H, 0, "norm.weight", -1, -1))
        goto fail;
    for (int l = 0; l < s->n_layers; l++)
        if (bind_layer(&b, l)) goto fail;
    /* lm_head sits outside the decoder prefix */
    {
        const char *head_prefix = !strcmp(b.prefix, "language_model.model.") ? "language_model."
                                  : !strcmp(b.prefix, "model.language_model.") ? "" : "";
        binder hb = b;
        hb.prefix = head_prefix;
        mx_tensor t = find(&hb, "lm_head.weight", -1, -1);
        if (t.data && !s->tie_word_embeddings) {
            if (bind(&hb, &m->lm_head, true, V, H, "lm_head.weight", -1, -1)) goto fail;
        } else if (!t.data && !s->tie_word_embeddings) {
            mx_fail(err, "tensor lm_head.weight: missing and tie_word_embeddings is false");
            goto fail;
        } else {
            m->lm_head = m->tok_embd;
        }
    }
    /* device backends: every weight resident (eager) before the model counts as loaded */
    if (be->finish_load && be->finish_load(err)) goto fail;
    *out = m;
    return 0;
fail:
    model_free(m);
    return -1;
}

void model_free(model *m) {
    if (!m) return;
    for (int l = 0; m->layers && l < m->spec.n_layers; l++) {
        free(m->layers[l].exp_gate);
        free(m->layers[l].exp_up);
        free(m->layers[l].exp_down);
    }
    free(m->layers);
    const backend_ops *be = m->be;
    float *bufs[] = {m->x, m->h, m->q, m->k, m->v, m->att, m->o, m->g, m->u, m->rl,
                     m->cs_glob, m->cs_loc, m->xo, m->lo};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->free(bufs[i]);
    free(m->cs_host);
    free(m->inv_host);
    if (m->ck && m->ck_free) m->ck_free(m->ck);
    free(m);
}

const model_spec *model_spec_of(const model *m) { return &m->spec; }
const backend_ops *model_backend(const model *m) { return m->be; }
uint64_t model_n_params(const model *m) { return m->n_params; }
uint64_t model_weight_bytes(const model *m) { return m->weight_bytes; }
