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

/* ==== Linear / Embedding weights: dense or MLX-quantized ==== */
static void count_weight(binder *b, const mx_tensor *t) {
    b->m->weight_bytes += mx_tensor_nbytes(t);
}

/* The counts of one dense Linear weight t (shape already checked). */
static void count_dense(binder *b, const mx_tensor *t) {
    b->m->n_params += (uint64_t)mx_tensor_numel(t);
    count_weight(b, t);
    b->m->n_lin++;
}

/* The checkpoint tensor `full` (a ".weight" name) with logical shape shape[ndim] (2-D Linear,
 * 3-D stacked experts). A float tensor is bound dense into *w; a U32 one is MLX-packed: the
 * config must quantize that module (spec_quant_for), and `.scales` / `.biases` must exist with
 * [..., K / group] in one float dtype; all three are uploaded into *q (2-D and `own`: through
 * the backend's upload_q, which may keep them in a layout of its own; MoE experts are read
 * by kernels that take the MLX layout). Returns 1 quantized, 0 dense, -1 error. `embedding`
 * also needs the backend's embed_q. */
static int bind_any(binder *b, const char *full, const mx_tensor *t, int ndim, const int64_t *shape,
                    mx_tensor *w, mx_qweight *q, bool embedding, bool own) {
    model *m = b->m;
    memset(q, 0, sizeof *q);
    memset(w, 0, sizeof *w);
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) numel *= shape[d];
    char want[96];
    snprintf(want, sizeof want, ndim == 3 ? "[%lld, %lld, %lld]" : "[%lld, %lld]",
             (long long)shape[0], (long long)shape[1], ndim == 3 ? (long long)shape[2] : 0LL);
    if (t->dtype != MX_U32) {
        bool ok = t->ndim == ndim;
        for (int d = 0; ok && d < ndim; d++) ok = t->shape[d] == shape[d];
        if (!ok)
            return mx_fail(b->err, "tensor %s: expected shape %s, found ndim %d [%lld, %lld, ...]",
                           full, want, t->ndim, (long long)t->shape[0],
                           t->ndim > 1 ? (long long)t->shape[1] : 0LL);
        if (t->dtype != MX_BF16 && t->dtype != MX_F16 && t->dtype != MX_F32)
            return mx_fail(b->err, "tensor %s: dtype %s not supported (bf16, f16, f32 or MLX-packed "
                           "u32)", full, mx_dtype_name(t->dtype));
        if (m->be->upload(w, t, b->err)) return mx_wrap(b->err, "tensor %s", full);
        count_dense(b, t);
        return 0;
    }
    /* ---- MLX-packed ---- */
    const mx_quant qc = spec_quant_for(&m->spec, full);
    if (!qc.bits)
        return mx_fail(b->err, "tensor %s: U32 (MLX-packed) but config.json gives no quantization "
                       "for this module", full);
    const int64_t K = shape[ndim - 1];
    if (K % qc.group_size || K * qc.bits % 32)
        return mx_fail(b->err, "tensor %s: input size %lld is not a multiple of the group size %d",
                       full, (long long)K, qc.group_size);
    bool ok = t->ndim == ndim && t->shape[ndim - 1] == K * qc.bits / 32;
    for (int d = 0; ok && d < ndim - 1; d++) ok = t->shape[d] == shape[d];
    if (!ok)
        return mx_fail(b->err, "tensor %s: %d-bit packed weight of logical shape %s should have "
                       "last dimension %lld, found ndim %d [.., %lld]", full, qc.bits, want,
                       (long long)(K * qc.bits / 32), t->ndim, (long long)t->shape[t->ndim - 1]);
    if (!m->be->matmul_q || (embedding && !m->be->embed_q))
        return mx_fail(b->err, "tensor %s: MLX-quantized (%d-bit), which the %s backend cannot run "
                       "yet (dequantize with `mlxcel convert -d`)", full, qc.bits, m->be->name);
    char nm[400];
    const size_t base = strlen(full) - strlen(".weight");
    mx_tensor sb[2];
    static const char *k_side[2] = {"scales", "biases"};
    for (int i = 0; i < 2; i++) {
        snprintf(nm, sizeof nm, "%.*s.%s", (int)base, full, k_side[i]);
        sb[i] = b->fn(b->ctx, nm);
        bool sok = sb[i].data && sb[i].ndim == ndim && sb[i].shape[ndim - 1] == K / qc.group_size &&
                   (sb[i].dtype == MX_BF16 || sb[i].dtype == MX_F16 || sb[i].dtype == MX_F32);
        for (int d = 0; sok && d < ndim - 1; d++) sok = sb[i].shape[d] == shape[d];
        if (!sok)
            return mx_fail(b->err, "tensor %s: missing, or not a float tensor [.., %lld] (the "
                           "%s of the %d-bit, group %d weight %s)", nm,
                           (long long)(K / qc.group_size), k_side[i], qc.bits, qc.group_size, full);
    }
    if (sb[0].dtype != sb[1].dtype)
        return mx_fail(b->err, "tensor %s: scales are %s but biases %s", full,
                       mx_dtype_name(sb[0].dtype), mx_dtype_name(sb[1].dtype));
    int (*up)(mx_tensor *, const mx_tensor *, mx_error *) =
        m->be->upload_raw ? m->be->upload_raw : m->be->upload;
    q->bits = qc.bits;
    q->group_size = qc.group_size;
    if (ndim == 2 && own && m->be->upload_q) {
        if (m->be->upload_q(q, t, &sb[0], &sb[1], b->err)) return mx_wrap(b->err, "tensor %s", full);
    } else if (up(&q->w, t, b->err) || up(&q->scales, &sb[0], b->err) ||
               up(&q->biases, &sb[1], b->err)) {
        return mx_wrap(b->err, "tensor %s", full);
    }
    m->n_params += (uint64_t)numel;
    count_weight(b, t);
    count_weight(b, &sb[0]);
    count_weight(b, &sb[1]);
    m->n_lin++;
    m->n_lin_q++;
    return 1;
}

/* A 2-D Linear / Embedding weight [d0, d1], dense or quantized. */
static int bind_lin(binder *b, model_weight *dst, bool required, int64_t d0, int64_t d1,
                    const char *fmt, int layer, int expert, bool embedding) {
    char name[320], full[400];
    if (expert >= 0) snprintf(name, sizeof name, fmt, layer, expert);
    else if (layer >= 0) snprintf(name, sizeof name, fmt, layer);
    else snprintf(name, sizeof name, "%s", fmt);
    snprintf(full, sizeof full, "%s%s", b->prefix, name);
    mx_tensor t = b->fn(b->ctx, full);
    memset(dst, 0, sizeof *dst);
    if (!t.data) return required ? mx_fail(b->err, "tensor %s: missing from the checkpoint", full) : 0;
    const int64_t shape[2] = {d0, d1};
    return bind_any(b, full, &t, 2, shape, &dst->w, &dst->q, embedding, expert < 0) < 0 ? -1 : 0;
}

/* Q, K, V [QD | KD | KD, H]: when all three are dense in one float dtype and the backend takes
 * groups, they go up as one buffer, back to back (the backend may then run the three matmuls
 * as one); otherwise each is bound on its own, dense or quantized. */
static int bind_qkv(binder *b, model_layer *L, int li, int64_t QD, int64_t KD, int64_t H) {
    static const char *k_fmt[3] = {"layers.%d.self_attn.q_proj.weight",
                                   "layers.%d.self_attn.k_proj.weight",
                                   "layers.%d.self_attn.v_proj.weight"};
    model_weight *dst[3] = {&L->wq, &L->wk, &L->wv};
    const int64_t d0[3] = {QD, KD, KD};
    char full[3][400];
    mx_tensor t[3];
    bool group = b->m->be->upload_group != NULL;
    for (int i = 0; i < 3; i++) {
        char name[320];
        snprintf(name, sizeof name, k_fmt[i], li);
        snprintf(full[i], sizeof full[i], "%s%s", b->prefix, name);
        t[i] = b->fn(b->ctx, full[i]);
        memset(dst[i], 0, sizeof *dst[i]);
        group = group && t[i].data && t[i].ndim == 2 && t[i].shape[0] == d0[i] &&
                t[i].shape[1] == H && t[i].dtype == t[0].dtype &&
                (t[i].dtype == MX_BF16 || t[i].dtype == MX_F16 || t[i].dtype == MX_F32);
    }
    if (group) {
        mx_tensor w[3];
        if (b->m->be->upload_group(w, t, 3, b->err))
            return mx_wrap(b->err, "tensors %slayers.%d.self_attn.{q,k,v}_proj.weight", b->prefix, li);
        for (int i = 0; i < 3; i++) {
            dst[i]->w = w[i];
            count_dense(b, &t[i]);
        }
        return 0;
    }
    for (int i = 0; i < 3; i++) {
        if (!t[i].data) return mx_fail(b->err, "tensor %s: missing from the checkpoint", full[i]);
        const int64_t shape[2] = {d0[i], H};
        if (bind_any(b, full[i], &t[i], 2, shape, &dst[i]->w, &dst[i]->q, false, true) < 0)
            return -1;
    }
    return 0;
}

/* ==== MoE experts ====
 * Three layouts: MLX stacked `switch_mlp.{gate,up,down}_proj.weight` [E, out, in] (what
 * `mlxcel convert` and mlx_lm write; dense or quantized per projection), transformers 5.x fused
 * `experts.gate_up_proj` [E, 2I, H] + `experts.down_proj` [E, H, I] (dense), and one module per
 * expert (transformers 4.x; mixtral w1/w3/w2), dense or quantized. */

/* Per projection p (gate, up, down): expert views into either the dense or the quantized array. */
static int experts_alloc(binder *b, model_layer *L, int E) {
    mx_tensor **d[3] = {&L->exp_gate, &L->exp_up, &L->exp_down};
    mx_qweight **q[3] = {&L->exp_qgate, &L->exp_qup, &L->exp_qdown};
    for (int p = 0; p < 3; p++) {
        *d[p] = calloc((size_t)E, sizeof(mx_tensor));
        *q[p] = calloc((size_t)E, sizeof(mx_qweight));
        if (!*d[p] || !*q[p]) return mx_fail(b->err, "out of memory");
    }
    return 0;
}

/* Under tensor parallelism the rank binds only its experts [m->e0, m->e0 + m->en): the
 * stacked / fused tensors arrive sliced to those (model_tp.c), per-expert tensors of other
 * ranks are never asked for, and the other entries of the expert arrays stay absent. */
static int bind_stacked(binder *b, model_layer *L, int li, const char *mod) {
    const model_spec *s = &b->m->spec;
    const int64_t E = b->m->en, e0 = b->m->e0, H = s->hidden_size, I = s->moe_intermediate_size;
    static const char *k_proj[3] = {"gate_proj", "up_proj", "down_proj"};
    mx_tensor *dv[3] = {L->exp_gate, L->exp_up, L->exp_down};
    mx_qweight *qv[3] = {L->exp_qgate, L->exp_qup, L->exp_qdown};
    for (int p = 0; p < 3; p++) {
        char full[400];
        snprintf(full, sizeof full, "%slayers.%d.%s.%s.weight", b->prefix, li, mod, k_proj[p]);
        mx_tensor t = b->fn(b->ctx, full);
        if (!t.data) return mx_fail(b->err, "tensor %s: missing from the checkpoint", full);
        const int64_t shape[3] = {E, p < 2 ? I : H, p < 2 ? H : I};
        mx_tensor w;
        mx_qweight q;
        const int kind = bind_any(b, full, &t, 3, shape, &w, &q, false, false);
        if (kind < 0) return -1;
        for (int64_t e = 0; e < E; e++) {
            if (kind) {
                qv[p][e0 + e] = q;
                qv[p][e0 + e].w = mx_tensor_index(&q.w, e);
                qv[p][e0 + e].scales = mx_tensor_index(&q.scales, e);
                qv[p][e0 + e].biases = mx_tensor_index(&q.biases, e);
            } else {
                dv[p][e0 + e] = mx_tensor_index(&w, e);
            }
        }
    }
    return 0;
}

/* gu [E, 2I, H] (gate rows first) and dn [E, H, I]. */
static int bind_fused(binder *b, model_layer *L, int li, const mx_tensor *gu, mx_tensor dn) {
    const model_spec *s = &b->m->spec;
    const int E = b->m->en, e0 = b->m->e0, H = s->hidden_size, I = s->moe_intermediate_size;
    if (gu->ndim != 3 || gu->shape[0] != E || gu->shape[1] != 2 * I || gu->shape[2] != H || !dn.data ||
        dn.ndim != 3 || dn.shape[0] != E || dn.shape[1] != H || dn.shape[2] != I ||
        (gu->dtype != MX_BF16 && gu->dtype != MX_F16 && gu->dtype != MX_F32) || dn.dtype != gu->dtype)
        return mx_fail(b->err, "layer %d: fused experts: expected float gate_up_proj [%d, %d, %d] and "
                       "down_proj [%d, %d, %d]", li, E, 2 * I, H, E, H, I);
    mx_tensor gud, dnd;
    if (b->m->be->upload(&gud, gu, b->err) || b->m->be->upload(&dnd, &dn, b->err)) return -1;
    for (int e = 0; e < E; e++) {
        mx_tensor ge = mx_tensor_index(&gud, e);
        L->exp_gate[e0 + e] = mx_tensor_rows(&ge, 0, I);
        L->exp_up[e0 + e] = mx_tensor_rows(&ge, I, I);
        L->exp_down[e0 + e] = mx_tensor_index(&dnd, e);
    }
    b->m->n_params += (uint64_t)(mx_tensor_numel(gu) + mx_tensor_numel(&dn));
    b->m->weight_bytes += mx_tensor_nbytes(gu) + mx_tensor_nbytes(&dn);
    b->m->n_lin += 2;
    return 0;
}

static int bind_per_expert(binder *b, model_layer *L, int li, bool mixtral) {
    const model_spec *s = &b->m->spec;
    const int E = s->n_experts, H = s->hidden_size, I = s->moe_intermediate_size;
    static const char *k_mix[3] = {"layers.%d.block_sparse_moe.experts.%d.w1.weight",
                                   "layers.%d.block_sparse_moe.experts.%d.w3.weight",
                                   "layers.%d.block_sparse_moe.experts.%d.w2.weight"};
    static const char *k_hf[3] = {"layers.%d.mlp.experts.%d.gate_proj.weight",
                                  "layers.%d.mlp.experts.%d.up_proj.weight",
                                  "layers.%d.mlp.experts.%d.down_proj.weight"};
    mx_tensor *dv[3] = {L->exp_gate, L->exp_up, L->exp_down};
    mx_qweight *qv[3] = {L->exp_qgate, L->exp_qup, L->exp_qdown};
    const int e0 = b->m->e0, e1 = b->m->e0 + b->m->en;
    (void)E;
    for (int p = 0; p < 3; p++)
        for (int e = e0; e < e1; e++) {
            model_weight w;
            const char *fmt = mixtral ? k_mix[p] : k_hf[p];
            if (bind_lin(b, &w, true, p < 2 ? I : H, p < 2 ? H : I, fmt, li, e, false)) return -1;
            /* the MoE op takes one array per projection: all dense or all quantized */
            if (e > e0 && model_weight_quantized(&w) != (qv[p][e0].bits > 0))
                return mx_fail(b->err, "layer %d: experts 0 and %d of the %s projection differ in "
                               "quantization (all experts of a projection must be quantized, or "
                               "none)", li, e, p == 0 ? "gate" : p == 1 ? "up" : "down");
            dv[p][e] = w.w;
            qv[p][e] = w.q;
        }
    return 0;
}

static int bind_experts(binder *b, model_layer *L, int li) {
    const model_spec *s = &b->m->spec;
    const int E = s->n_experts, H = s->hidden_size;
    if (experts_alloc(b, L, E)) return -1;
    const char *router_names[] = {"layers.%d.mlp.gate.weight", "layers.%d.block_sparse_moe.gate.weight"};
    const char *blks[] = {"mlp", "block_sparse_moe"};
    int ri = -1;
    for (int i = 0; i < 2 && ri < 0; i++)
        if (find(b, router_names[i], li, -1).data) ri = i;
    if (ri < 0)
        return mx_fail(b->err, "layer %d: no MoE router (%slayers.%d.mlp.gate.weight)", li,
                       b->prefix, li);
    if (bind_lin(b, &L->router, true, E, H, router_names[ri], li, -1, false)) return -1;

    char rel[160];
    snprintf(rel, sizeof rel, "layers.%%d.%s.switch_mlp.gate_proj.weight", blks[ri]);
    const uint64_t before = b->m->weight_bytes;
    int rc;
    if (find(b, rel, li, -1).data) {
        char mod[64];
        snprintf(mod, sizeof mod, "%s.switch_mlp", blks[ri]);
        rc = bind_stacked(b, L, li, mod);
    } else {
        mx_tensor gu = find(b, "layers.%d.mlp.experts.gate_up_proj", li, -1);
        rc = gu.data ? bind_fused(b, L, li, &gu, find(b, "layers.%d.mlp.experts.down_proj", li, -1))
                     : bind_per_expert(b, L, li,
                                       find(b, "layers.%d.block_sparse_moe.experts.%d.w1.weight",
                                            li, 0).data != NULL);
    }
    b->m->expert_bytes += b->m->weight_bytes - before;
    return rc;
}

/* Llama 4: router `feed_forward.router`, experts stacked [E, out, in] by mlx_lm
 * (`feed_forward.experts.{gate,up,down}_proj.weight`, also as `switch_mlp`; dense or quantized)
 * or transformers' fused [in, out] pair (`feed_forward.experts.gate_up_proj` [E, H, 2I],
 * `down_proj` [E, I, H]: transposed into host copies), and the shared expert. */
static int bind_experts_l4(binder *b, model_layer *L, int li) {
    model *m = b->m;
    const model_spec *s = &m->spec;
    const int E = s->n_experts, H = s->hidden_size, I = s->moe_intermediate_size;
    const int Is = s->shared_expert_size;
    if (experts_alloc(b, L, E) ||
        bind_lin(b, &L->router, true, E, H, "layers.%d.feed_forward.router.weight", li, -1, false))
        return -1;
    const uint64_t before = m->weight_bytes;
    int rc;
    if (find(b, "layers.%d.feed_forward.experts.gate_proj.weight", li, -1).data) {
        rc = bind_stacked(b, L, li, "feed_forward.experts");
    } else if (find(b, "layers.%d.feed_forward.switch_mlp.gate_proj.weight", li, -1).data) {
        rc = bind_stacked(b, L, li, "feed_forward.switch_mlp");
    } else {
        mx_tensor gu = find(b, "layers.%d.feed_forward.experts.gate_up_proj", li, -1);
        mx_tensor dn = find(b, "layers.%d.feed_forward.experts.down_proj", li, -1);
        if (!gu.data || !dn.data || gu.ndim != 3 || dn.ndim != 3)
            return mx_fail(b->err, "layer %d: no llama4 experts (%slayers.%d.feed_forward.experts."
                           "gate_up_proj [E, H, 2I] + down_proj [E, I, H], or experts.{gate,up,"
                           "down}_proj.weight [E, out, in])", li, b->prefix, li);
        /* transformers' own layout is [in, out]; a gate_up already [out, in] is taken as is
         * and so is its down_proj (H == I cannot tell down's orientation by shape: it follows
         * gate_up's, which differs unless H == 2I, where transformers' layout is assumed) */
        const bool in_out = gu.shape[1] == H && gu.shape[2] == 2 * I;
        if (in_out) gu = l4_transpose_experts(m, &gu);
        if (in_out && gu.data && dn.shape[1] == I && dn.shape[2] == H) dn = l4_transpose_experts(m, &dn);
        if (!gu.data || !dn.data) return mx_fail(b->err, "out of memory transposing the experts");
        rc = bind_fused(b, L, li, &gu, dn);
    }
    m->expert_bytes += m->weight_bytes - before;
    if (rc || !Is) return rc ? -1 : 0;
    return bind_lin(b, &L->sh_gate, true, Is, H, "layers.%d.feed_forward.shared_expert.gate_proj.weight",
                    li, -1, false) ||
                   bind_lin(b, &L->sh_up, true, Is, H,
                            "layers.%d.feed_forward.shared_expert.up_proj.weight", li, -1, false) ||
                   bind_lin(b, &L->sh_down, true, H, Is,
                            "layers.%d.feed_forward.shared_expert.down_proj.weight", li, -1, false)
               ? -1
               : 0;
}

/* ==== Layers ==== */
static int bind_layer(binder *b, int li) {
    model *m = b->m;
    const model_spec *s = &m->spec;
    model_layer *L = &m->layers[li];
    /* this rank's slice: heads and MLP width divided by the TP degree (1 = the whole model) */
    const int H = s->hidden_size, D = s->head_dim, QD = m->hq * D, KD = m->hkv * D;
    if (s->kv_lora_rank > 0) { /* DeepSeek MLA (model_mla.c) */
        if (bind(b, &L->attn_norm, true, H, 0, "layers.%d.input_layernorm.weight", li, -1) ||
            model_mla_bind(m, L, li, b->fn, b->ctx, b->prefix, b->err))
            return -1;
    } else if (bind(b, &L->attn_norm, true, H, 0, "layers.%d.input_layernorm.weight", li, -1) ||
        bind_qkv(b, L, li, QD, KD, H) ||
        bind_lin(b, &L->wo, true, H, QD, "layers.%d.self_attn.o_proj.weight", li, -1, false) ||
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
    if (L->moe) {
        if (s->family == FAM_LLAMA4) return bind_experts_l4(b, L, li);
        return bind_experts(b, L, li) ||
                       (L->mla && model_mla_bind_moe(m, L, li, b->fn, b->ctx, b->prefix, b->err))
                   ? -1
                   : 0;
    }
    const int I = m->ffn;
    const char *ff = s->family == FAM_LLAMA4 ? "feed_forward" : "mlp";
    char fg[96], fu[96], fd[96];
    snprintf(fg, sizeof fg, "layers.%%d.%s.gate_proj.weight", ff);
    snprintf(fu, sizeof fu, "layers.%%d.%s.up_proj.weight", ff);
    snprintf(fd, sizeof fd, "layers.%%d.%s.down_proj.weight", ff);
    return bind_lin(b, &L->w_gate, true, I, H, fg, li, -1, false) ||
                   bind_lin(b, &L->w_up, true, I, H, fu, li, -1, false) ||
                   bind_lin(b, &L->w_down, true, H, I, fd, li, -1, false)
               ? -1
               : 0;
}

/* ==== Entry points ==== */
int model_bind(model **out, const model_spec *spec, model_weight_fn fn, void *ctx,
               const backend_ops *be, mx_error *err) {
    return model_bind_rank(out, spec, fn, ctx, be, 0, 1, err);
}

/* One rank's model; fn returns that rank's slices (model_tp.c), or whole tensors for 1 rank.
 * The divisibility of heads / width by tp_size is checked by the caller. */
int model_bind_rank(model **out, const model_spec *spec, model_weight_fn fn, void *ctx,
                    const backend_ops *be, int rank, int tp_size, mx_error *err) {
    model *m = calloc(1, sizeof *m);
    if (!m) return mx_fail(err, "out of memory");
    m->spec = *spec;
    m->be = be;
    const model_spec *s = &m->spec;
    m->tp_rank = rank;
    m->tp_size = tp_size;
    m->hq = s->n_heads / tp_size;
    m->hkv = s->n_kv_heads / tp_size;
    m->ffn = s->intermediate_size / tp_size;
    m->en = s->n_experts > 0 ? s->n_experts / tp_size : 0;
    m->e0 = rank * m->en;
    tp_vocab_range(s->vocab_size, rank, tp_size, &m->v0, &m->vn);
    if (s->n_layers <= 0 || s->n_layers > MX_MAX_LAYERS || s->n_heads <= 0 || s->n_kv_heads <= 0 ||
        s->n_heads % s->n_kv_heads || s->head_dim <= 0 || s->hidden_size <= 0 || s->vocab_size <= 0) {
        mx_fail(err, "model spec: inconsistent shapes (layers %d, heads %d/%d, head_dim %d)",
                s->n_layers, s->n_heads, s->n_kv_heads, s->head_dim);
        free(m);
        return -1;
    }
    if (model_mla_check(m, err)) {
        free(m);
        return -1;
    }
    m->rot_dim = rope_rot_dim(s);
    m->layers = calloc((size_t)s->n_layers, sizeof(model_layer));
    if (!m->layers) {
        free(m);
        return mx_fail(err, "out of memory");
    }
    /* llama4: q/k rows come permuted for the half-split rope (model_llama4.c) */
    l4_src l4 = {.fn = fn, .ctx = ctx, .m = m};
    if (s->rope_interleaved) {
        fn = l4_weight;
        ctx = &l4;
    }
    if (s->qk_l2_norm) { /* the weightless norm: RMSNorm with a weight of ones */
        float *one = model_own(m, (size_t)s->head_dim * sizeof(float));
        if (!one) {
            mx_fail(err, "out of memory");
            goto fail;
        }
        for (int i = 0; i < s->head_dim; i++) one[i] = 1.0f;
        const mx_tensor host = mx_tensor_1d(one, MX_F32, s->head_dim, MX_DEV_CPU);
        if (be->upload(&m->ones, &host, err)) goto fail;
    }
    binder b = {.m = m, .fn = fn, .ctx = ctx, .err = err, .prefix = "model."};
    static const char *prefixes[] = {"model.", "model.language_model.", "language_model.model.", ""};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        b.prefix = prefixes[i];
        if (find(&b, "embed_tokens.weight", -1, -1).data) break;
    }
    const int H = s->hidden_size, V = m->vn; /* this rank's vocabulary rows */
    if (bind_lin(&b, &m->tok_embd, true, V, H, "embed_tokens.weight", -1, -1, true)) goto fail;
    m->embd_bytes = m->weight_bytes; /* as stored: a quantized table is not V * H * dtype */
    if (bind(&b, &m->out_norm, true, H, 0, "norm.weight", -1, -1)) goto fail;
    for (int l = 0; l < s->n_layers; l++)
        if (bind_layer(&b, l)) goto fail;
    if (l4.oom) { /* a failed copy shows up as a missing tensor: name the real cause */
        mx_fail(err, "out of memory permuting the q/k projections");
        goto fail;
    }
    /* lm_head sits outside the decoder prefix */
    {
        const char *head_prefix = !strcmp(b.prefix, "language_model.model.") ? "language_model."
                                  : !strcmp(b.prefix, "model.language_model.") ? "" : "";
        binder hb = b;
        hb.prefix = head_prefix;
        mx_tensor t = find(&hb, "lm_head.weight", -1, -1);
        if (t.data && !s->tie_word_embeddings) {
            if (bind_lin(&hb, &m->lm_head, true, V, H, "lm_head.weight", -1, -1, false)) goto fail;
        } else if (!t.data && !s->tie_word_embeddings) {
            /* an embedding checkpoint saved without its head (sentence-transformers' Qwen3Model
             * layout): hidden states only; a forward asking logits names the tensor */
            m->no_head = true;
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
    if (m->shards) { /* a TP group: the ranks hold the weights, the group the checkpoint */
        for (int r = 0; r < m->tp_size; r++) { /* each rank's buffers on its own device */
            if (m->shards[r] && model_tp_bind(m->be, r, NULL)) continue; /* leaked, not misfreed */
            model_free(m->shards[r]);
        }
        model_tp_bind(m->be, 0, NULL);
        free(m->shards);
        if (m->coll) m->coll->destroy(m->coll);
        if (m->ck && m->ck_free) m->ck_free(m->ck);
        free(m);
        return;
    }
    for (int i = 0; i < m->n_tp_owned; i++) free(m->tp_owned[i]);
    free(m->tp_owned);
    free(m->zero_host);
    for (int l = 0; m->layers && l < m->spec.n_layers; l++) {
        free(m->layers[l].exp_gate);
        free(m->layers[l].exp_up);
        free(m->layers[l].exp_down);
        free(m->layers[l].exp_qgate);
        free(m->layers[l].exp_qup);
        free(m->layers[l].exp_qdown);
    }
    free(m->layers);
    const backend_ops *be = m->be;
    float *bufs[] = {m->x, m->h, m->q, m->k, m->v, m->att, m->o, m->g, m->u, m->rl,
                     m->cs_glob, m->cs_loc, m->o2, m->cs_temp, m->xo, m->lo, m->lol != m->lo ? m->lol : NULL, m->xh,
                     m->mla_qa, m->mla_qf, m->mla_ov};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->free(bufs[i]);
    free(m->cs_host);
    free(m->inv_host);
    if (m->ck && m->ck_free) m->ck_free(m->ck);
    /* after the checkpoint: a backend may have kept views of these host copies until now */
    for (int i = 0; i < m->n_host_owned; i++) free(m->host_owned[i]);
    free(m->host_owned);
    free(m);
}

const model_spec *model_spec_of(const model *m) { return &m->spec; }
const backend_ops *model_backend(const model *m) { return m->be; }
uint64_t model_n_params(const model *m) { return m->n_params; }
uint64_t model_weight_bytes(const model *m) { return m->weight_bytes; }
uint64_t model_embedding_bytes(const model *m) { return m->embd_bytes; }
uint64_t model_expert_bytes(const model *m) { return m->expert_bytes; }

void model_quant_counts(const model *m, int *n_weights, int *n_quantized) {
    *n_weights = m->n_lin;
    *n_quantized = m->n_lin_q;
}

void model_describe_quant(const model *m, char *buf, size_t len) {
    const model_spec *s = &m->spec;
    if (!s->quant.bits && !m->n_lin_q) {
        snprintf(buf, len, "none");
        return;
    }
    int n_false = 0, n_other = 0;
    char other[96] = "";
    for (int i = 0; i < s->n_quant_overrides; i++) {
        const mx_quant *q = &s->quant_overrides[i].q;
        if (!q->bits) n_false++;
        else if (q->bits != s->quant.bits || q->group_size != s->quant.group_size) {
            if (!n_other++) snprintf(other, sizeof other, "%d-bit/g%d", q->bits, q->group_size);
        }
    }
    char ov[192] = "";
    if (s->n_quant_overrides) {
        const int n_same = s->n_quant_overrides - n_false - n_other;
        int o = snprintf(ov, sizeof ov, "; %d per-module override%s (", s->n_quant_overrides,
                         s->n_quant_overrides == 1 ? "" : "s");
        const char *sep = "";
        if (n_false) o += snprintf(ov + o, sizeof ov - (size_t)o, "%d unquantized", n_false), sep = ", ";
        if (n_other)
            o += snprintf(ov + o, sizeof ov - (size_t)o, "%s%d at %s%s", sep, n_other, other,
                          n_other > 1 ? " or other" : ""), sep = ", ";
        if (n_same) o += snprintf(ov + o, sizeof ov - (size_t)o, "%s%d as the default", sep, n_same);
        snprintf(ov + o, sizeof ov - (size_t)o, ")");
    }
    snprintf(buf, len, "MLX affine %d-bit, group %d%s; %d of %d weights quantized", s->quant.bits,
             s->quant.group_size, ov, m->n_lin_q, m->n_lin);
}
