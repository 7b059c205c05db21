/* DeepSeek V3 multi-head latent attention (MLA) in its absorbed form, and the DeepSeek MoE
 * pieces (shared experts, grouped routing parameters).
 *
 * Notation: Hq query heads, R = qk_rope_head_dim, N = qk_nope_head_dim, V = v_head_dim,
 * Lq / Lkv = q / kv LoRA ranks, D = Lkv + R (spec head_dim), n rows of the step batch.
 *
 * transformers computes, per head h (W_UK_h / W_UV_h = head h's k_nope / v rows of kv_b_proj):
 *     k_h = [W_UK_h c | k_pe],  v_h = W_UV_h c,  q_h = [q_nope_h | q_pe_h]
 *     out_h = sum_j softmax_j(scale * q_h . k_h,j) v_h,j
 * with c = kv_a_layernorm(c_kv). Since q_nope_h . W_UK_h c = (W_UK_h^T q_nope_h) . c, and W_UV_h
 * is linear, the same values come from one shared latent key row per token
 *     key = [k_pe | c]   (D values; pe first so the backend's rope op rotates it in place)
 * and per head the absorbed query [q_pe_h | W_UK_h^T q_nope_h] (D values) against it, then
 * out_h = W_UV_h (sum_j p_j c_j). The KV cache therefore holds one head of D values per token
 * instead of Hq heads of N + R and V values (DeepSeek V3: 576 values instead of 128 x 320).
 *
 * The value row is the key row itself (V = K): the attention output's first R values per head
 * are then a weighted sum of k_pe that the W_UV step skips; only its last Lkv values (the
 * weighted latent) are used. The engine's cache keeps one pool for both when K and V have
 * one cache type (kv_cache_params.v_is_k: half the memory); with two types V is a copy.
 *
 * Absorption is applied per head each step as small matmuls rather than folded into q_b_proj /
 * o_proj at load: folding W_UK into q_b_proj would make a [Hq * Lkv, Lq] matrix (DeepSeek V3:
 * 4.7x q_b_proj), while per-head products cost Hq * D * (R + N) + Hq * V * Lkv MACs a row,
 * below the projections themselves. W_UK_h^T is copied at load into w_qabs together with an
 * identity block for q_pe ([[I_R, 0], [0, W_UK_h^T]], exact in the checkpoint dtype), so one
 * matmul a head builds the whole absorbed query; W_UV_h are row views of kv_b_proj.
 *
 * RoPE: with rope_interleave the checkpoint's pe values rotate in interleaved pairs; the pe
 * output rows of q_b_proj (q_proj) and kv_a_proj_with_mqa are permuted at load into the
 * rotate-half order (evens then odds), which is the same dot products (transformers applies
 * the same permutation to q and k before rotate-half).
 *
 * CPU backend, dense (bf16 / f16 / f32) weights, one TP rank: model_mla_check refuses others. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"

#define MLA_NORM_EPS 1e-6f /* q_a_layernorm / kv_a_layernorm: DeepseekV3RMSNorm's default eps */

/* ==== Checks ==== */
int model_mla_check(const model *m, mx_error *err) {
    const model_spec *s = &m->spec;
    if (s->kv_lora_rank <= 0) return 0;
    if (m->be->device != MX_DEV_CPU)
        return mx_fail(err, "%s runs on the CPU backend only for now (multi-head latent attention "
                       "and grouped routing have no %s kernels yet); use --device cpu",
                       s->model_type, m->be->name);
    if (m->tp_size > 1 || m->coll)
        return mx_fail(err, "%s: tensor parallelism is not supported for multi-head latent "
                       "attention yet; run with --tp-size 1", s->model_type);
    if (s->quant.bits || s->n_quant_overrides)
        return mx_fail(err, "%s: MLX-quantized checkpoints are not supported for this family yet "
                       "(the MLA weights are reordered and absorbed at load); use a bf16, f16 or "
                       "f32 checkpoint", s->model_type);
    return 0;
}

/* ==== Binding ==== */
typedef struct mla_src {
    model *m;
    model_weight_fn fn;
    void *ctx;
    const char *prefix;
    int li;
    mx_error *err;
} mla_src;

/* Host tensor prefix + "layers.<li>." + rel, shape [d0] (d1 0) or [d0, d1], float. Counts it. */
static int get(mla_src *S, const char *rel, int64_t d0, int64_t d1, bool linear, mx_tensor *t) {
    char full[400];
    snprintf(full, sizeof full, "%slayers.%d.%s", S->prefix, S->li, rel);
    *t = S->fn(S->ctx, full);
    if (!t->data) return mx_fail(S->err, "tensor %s: missing from the checkpoint", full);
    const int nd = d1 ? 2 : 1;
    if (t->ndim != nd || t->shape[0] != d0 || (nd == 2 && t->shape[1] != d1))
        return mx_fail(S->err, "tensor %s: expected shape [%lld%s%lld], found ndim %d [%lld, %lld]",
                       full, (long long)d0, d1 ? ", " : "", d1 ? (long long)d1 : 0LL, t->ndim,
                       (long long)t->shape[0], t->ndim > 1 ? (long long)t->shape[1] : 0LL);
    if (t->dtype != MX_BF16 && t->dtype != MX_F16 && t->dtype != MX_F32)
        return mx_fail(S->err, "tensor %s: dtype %s not supported for %s (bf16, f16, f32)", full,
                       mx_dtype_name(t->dtype), S->m->spec.model_type);
    S->m->n_params += (uint64_t)mx_tensor_numel(t);
    S->m->weight_bytes += mx_tensor_nbytes(t);
    S->m->n_lin += linear;
    return 0;
}

static int upload(mla_src *S, mx_tensor *dst, const mx_tensor *host) {
    return S->m->be->upload(dst, host, S->err);
}

/* A host buffer the model keeps (the CPU upload keeps views of it); freed by model_free. */
static void *own(mla_src *S, size_t bytes) {
    void *b = model_own(S->m, bytes);
    if (!b) mx_fail(S->err, "out of memory (%zu bytes)", bytes);
    return b;
}

/* pe index j of the rotate-half order -> the checkpoint's pe index */
static int pe_src(const model_spec *s, int j) {
    const int R = s->qk_rope_head_dim;
    if (!s->rope_interleave) return j;
    return j < R / 2 ? 2 * j : 2 * (j - R / 2) + 1;
}

/* dst = src with rows reordered: dst row j = src row rows[j]. */
static int reorder(mla_src *S, const mx_tensor *src, const int64_t *rows, mx_tensor *dst) {
    const size_t rb = (size_t)src->shape[1] * mx_dtype_size(src->dtype);
    char *b = own(S, rb * (size_t)src->shape[0]);
    if (!b) return -1;
    for (int64_t j = 0; j < src->shape[0]; j++)
        memcpy(b + (size_t)j * rb, (const char *)src->data + (size_t)rows[j] * rb, rb);
    mx_tensor h = mx_tensor_2d(b, src->dtype, src->shape[0], src->shape[1], MX_DEV_CPU);
    return upload(S, dst, &h);
}

/* w_qabs [Hq, D, R + N] in the dtype of src (a copy of its values, ones and zeros: exact), with
 * W_UK_h^T[i][c] (i < Lkv, c < N) at element h * sh + i * si + c * sc of src: kv_b_proj
 * [Hq * (N + V), Lkv] or mlx_lm's embed_q [Hq, Lkv, N]. */
static int build_qabs(mla_src *S, model_layer *L, const mx_tensor *src, int64_t sh, int64_t si,
                      int64_t sc) {
    const model_spec *s = &S->m->spec;
    const int Hq = s->n_heads, R = s->qk_rope_head_dim, N = s->qk_nope_head_dim,
              Lkv = s->kv_lora_rank, D = Lkv + R, C = R + N;
    const size_t es = mx_dtype_size(src->dtype);
    char *b = own(S, (size_t)Hq * D * C * es);
    if (!b) return -1;
    memset(b, 0, (size_t)Hq * D * C * es);
    const uint16_t one16 = src->dtype == MX_BF16 ? 0x3F80 : 0x3C00;
    const float one32 = 1.0f;
    const void *one = src->dtype == MX_F32 ? (const void *)&one32 : (const void *)&one16;
    for (int h = 0; h < Hq; h++) {
        char *w = b + (size_t)h * D * C * es; /* [D, C] */
        for (int r = 0; r < R; r++) memcpy(w + ((size_t)r * C + r) * es, one, es); /* q_pe */
        for (int i = 0; i < Lkv; i++)     /* row R + i: W_UK_h[:, i]^T, at columns R .. R+N */
            for (int c = 0; c < N; c++)
                memcpy(w + ((size_t)(R + i) * C + R + c) * es,
                       (const char *)src->data + (size_t)(h * sh + i * si + c * sc) * es, es);
    }
    mx_tensor t = mx_tensor_3d(b, src->dtype, Hq, D, C, MX_DEV_CPU);
    return upload(S, &L->w_qabs, &t);
}

/* mlx_lm's split of kv_b_proj (float; its quantized form is refused with the rest):
 * embed_q [Hq, Lkv, N] = W_UK_h^T, unembed_out [Hq, V, Lkv] = W_UV_h. */
static int bind_split(mla_src *S, model_layer *L) {
    const model_spec *s = &S->m->spec;
    const int64_t Hq = s->n_heads, N = s->qk_nope_head_dim, V = s->v_head_dim, Lkv = s->kv_lora_rank;
    const char *nm[2] = {"self_attn.embed_q.weight", "self_attn.unembed_out.weight"};
    const int64_t d1[2] = {Lkv, V}, d2[2] = {N, Lkv};
    mx_tensor t[2];
    for (int i = 0; i < 2; i++) {
        char full[400];
        snprintf(full, sizeof full, "%slayers.%d.%s", S->prefix, S->li, nm[i]);
        t[i] = S->fn(S->ctx, full);
        if (!t[i].data || t[i].ndim != 3 || t[i].shape[0] != Hq || t[i].shape[1] != d1[i] ||
            t[i].shape[2] != d2[i] ||
            (t[i].dtype != MX_BF16 && t[i].dtype != MX_F16 && t[i].dtype != MX_F32))
            return mx_fail(S->err, "tensor %s: expected a float tensor [%lld, %lld, %lld] (no "
                           "self_attn.kv_b_proj.weight in layer %d either)", full, (long long)Hq,
                           (long long)d1[i], (long long)d2[i], S->li);
        S->m->n_params += (uint64_t)mx_tensor_numel(&t[i]);
        S->m->weight_bytes += mx_tensor_nbytes(&t[i]);
        S->m->n_lin++;
    }
    mx_tensor uv = mx_tensor_2d(t[1].data, t[1].dtype, Hq * V, Lkv, MX_DEV_CPU); /* [Hq*V, Lkv] */
    return build_qabs(S, L, &t[0], Lkv * N, N, 1) || upload(S, &L->w_kvb, &uv) ? -1 : 0;
}

int model_mla_bind(model *m, model_layer *L, int li, model_weight_fn fn, void *ctx,
                   const char *prefix, mx_error *err) {
    const model_spec *s = &m->spec;
    const int H = s->hidden_size, Hq = s->n_heads, R = s->qk_rope_head_dim,
              N = s->qk_nope_head_dim, V = s->v_head_dim, Lq = s->q_lora_rank,
              Lkv = s->kv_lora_rank, C = R + N;
    mla_src S = {.m = m, .fn = fn, .ctx = ctx, .prefix = prefix, .li = li, .err = err};
    L->mla = true;
    mx_tensor t;
    int64_t *rows = malloc((size_t)(Hq * C > R + Lkv ? Hq * C : R + Lkv) * sizeof(int64_t));
    if (!rows) return mx_fail(err, "out of memory");
    int rc = -1;
    /* ---- q: q_a_proj + q_a_layernorm + q_b_proj, or q_proj; rows per head [pe | nope] ---- */
    for (int h = 0; h < Hq; h++)
        for (int j = 0; j < C; j++)
            rows[h * C + j] = (int64_t)h * C + (j < R ? N + pe_src(s, j) : j - R);
    if (Lq > 0) {
        if (get(&S, "self_attn.q_a_proj.weight", Lq, H, true, &t) || upload(&S, &L->wq_a.w, &t) ||
            get(&S, "self_attn.q_a_layernorm.weight", Lq, 0, false, &t) ||
            upload(&S, &L->q_a_norm, &t) ||
            get(&S, "self_attn.q_b_proj.weight", (int64_t)Hq * C, Lq, true, &t) ||
            reorder(&S, &t, rows, &L->wq.w))
            goto out;
    } else if (get(&S, "self_attn.q_proj.weight", (int64_t)Hq * C, H, true, &t) ||
               reorder(&S, &t, rows, &L->wq.w)) {
        goto out;
    }
    /* ---- kv: kv_a_proj_with_mqa rows [k_pe | c_kv], kv_a_layernorm, kv_b_proj ---- */
    for (int j = 0; j < R + Lkv; j++) rows[j] = j < R ? Lkv + pe_src(s, j) : j - R;
    if (get(&S, "self_attn.kv_a_proj_with_mqa.weight", R + Lkv, H, true, &t) ||
        reorder(&S, &t, rows, &L->wkv_a.w) ||
        get(&S, "self_attn.kv_a_layernorm.weight", Lkv, 0, false, &t) ||
        upload(&S, &L->kv_a_norm, &t) ||
        get(&S, "self_attn.o_proj.weight", H, (int64_t)Hq * V, true, &t) ||
        upload(&S, &L->wo.w, &t))
        goto out;
    char kvb[400];
    snprintf(kvb, sizeof kvb, "%slayers.%d.self_attn.kv_b_proj.weight", prefix, li);
    if (!fn(ctx, kvb).data) {
        rc = bind_split(&S, L);
        goto out;
    }
    if (get(&S, "self_attn.kv_b_proj.weight", (int64_t)Hq * (N + V), Lkv, true, &t) ||
        build_qabs(&S, L, &t, (int64_t)(N + V) * Lkv, 1, Lkv) || upload(&S, &L->w_kvb, &t))
        goto out;
    rc = 0;
out:
    free(rows);
    return rc;
}

int model_mla_bind_moe(model *m, model_layer *L, int li, model_weight_fn fn, void *ctx,
                       const char *prefix, mx_error *err) {
    const model_spec *s = &m->spec;
    const int H = s->hidden_size, I = s->moe_intermediate_size * s->n_shared_experts;
    mla_src S = {.m = m, .fn = fn, .ctx = ctx, .prefix = prefix, .li = li, .err = err};
    mx_tensor t;
    if (get(&S, "mlp.gate.e_score_correction_bias", s->n_experts, 0, false, &t) ||
        upload(&S, &L->e_bias, &t))
        return -1;
    if (s->n_shared_experts <= 0) return 0;
    return get(&S, "mlp.shared_experts.gate_proj.weight", I, H, true, &t) ||
                   upload(&S, &L->w_gate.w, &t) ||
                   get(&S, "mlp.shared_experts.up_proj.weight", I, H, true, &t) ||
                   upload(&S, &L->w_up.w, &t) ||
                   get(&S, "mlp.shared_experts.down_proj.weight", H, I, true, &t) ||
                   upload(&S, &L->w_down.w, &t)
               ? -1
               : 0;
}

/* ==== Forward ==== */
/* [n, cols] view at p with a row stride of ld floats. */
static mx_tensor view2(float *p, int64_t n, int64_t cols, int64_t ld, mx_device dev) {
    mx_tensor t = mx_tensor_2d(p, MX_F32, n, cols, dev);
    t.stride[0] = ld;
    return t;
}

static int grow(model *m, float **p, size_t n, mx_error *err) {
    if (*p) m->be->free(*p);
    *p = m->be->alloc(n * sizeof(float));
    return *p ? 0 : mx_fail(err, "out of memory for %zu MLA activations", n);
}

int model_mla_attention(model *m, kv_cache *kv, int l, const mx_tensor *h, mx_tensor *o,
                        mx_attn_batch *ab, mx_error *err) {
    const model_spec *s = &m->spec;
    const backend_ops *be = m->be;
    const model_layer *L = &m->layers[l];
    const mx_device dev = be->device;
    const int n = (int)h->shape[0], Hq = s->n_heads, R = s->qk_rope_head_dim,
              N = s->qk_nope_head_dim, V = s->v_head_dim, Lq = s->q_lora_rank,
              Lkv = s->kv_lora_rank, D = Lkv + R, C = R + N;
    if (n > m->mla_cap) {
        const size_t r = (size_t)n;
        if ((Lq > 0 && grow(m, &m->mla_qa, r * Lq, err)) || grow(m, &m->mla_qf, r * Hq * C, err) ||
            grow(m, &m->mla_ov, r * Hq * V, err))
            return -1;
        m->mla_cap = n;
    }
    mx_tensor qf = mx_tensor_3d(m->mla_qf, MX_F32, n, Hq, C, dev);  /* [n, Hq, R + N] */
    mx_tensor qf2 = mx_tensor_2d(m->mla_qf, MX_F32, n, Hq * C, dev);
    mx_tensor k = mx_tensor_3d(m->k, MX_F32, n, 1, D, dev);         /* [n, 1, D] latent row */
    mx_tensor k2 = mx_tensor_2d(m->k, MX_F32, n, D, dev);
    mx_tensor ckv = view2(m->k + R, n, Lkv, D, dev);               /* [n, Lkv] c_kv of k */
    mx_tensor qa = mx_tensor_3d(m->q, MX_F32, n, Hq, D, dev);       /* [n, Hq, D] absorbed */
    mx_tensor att = mx_tensor_3d(m->att, MX_F32, n, Hq, D, dev);    /* [n, Hq, D] */
    mx_tensor ov = mx_tensor_2d(m->mla_ov, MX_F32, n, Hq * V, dev); /* [n, Hq * V] */

    /* ---- projections: q [n, Hq, R + N], latent key [n, 1, R + Lkv] ---- */
    if (Lq > 0) {
        mx_tensor qlo = mx_tensor_2d(m->mla_qa, MX_F32, n, Lq, dev); /* [n, Lq] */
        be->matmul(&qlo, h, &L->wq_a.w, NULL);
        be->rms_norm(&qlo, &qlo, &L->q_a_norm, MLA_NORM_EPS, 0.0f);
        be->matmul(&qf2, &qlo, &L->wq.w, NULL);
    } else {
        be->matmul(&qf2, h, &L->wq.w, NULL);
    }
    be->matmul(&k2, h, &L->wkv_a.w, NULL);
    be->rms_norm(&ckv, &ckv, &L->kv_a_norm, MLA_NORM_EPS, 0.0f);
    be->rope(&qf, m->cs_glob, R);
    be->rope(&k, m->cs_glob, R);
    mx_tensor kpool = kv_cache_k_rank(kv, l, m->tp_rank), vpool = kv_cache_v_rank(kv, l, m->tp_rank);
    be->kv_write(&kpool, &vpool, &k, &k, ab); /* V = K: see the top of this file */

    /* ---- absorbed queries: qa_h [n, D] = qf_h [n, R + N] @ w_qabs_h^T ---- */
    for (int hd = 0; hd < Hq; hd++) {
        mx_tensor x = view2(m->mla_qf + (size_t)hd * C, n, C, (int64_t)Hq * C, dev);
        mx_tensor y = view2(m->q + (size_t)hd * D, n, D, (int64_t)Hq * D, dev);
        mx_tensor w = mx_tensor_index(&L->w_qabs, hd); /* [D, R + N] */
        be->matmul(&y, &x, &w, NULL);
    }
    mx_attn_params ap = {.n_heads = Hq, .n_kv_heads = 1, .head_dim = D, .scale = s->attn_scale};
    ab->kv_splits = model_attn_splits(m, ab, &ap);
    be->attention(&att, &qa, &kpool, &vpool, ab, &ap);

    /* ---- values: ov_h [n, V] = latent part of att_h [n, Lkv] @ W_UV_h^T, then o_proj ----
     * W_UV_h: rows of kv_b_proj [Hq * (N + V), Lkv] or of unembed_out as [Hq * V, Lkv] */
    const bool split = L->w_kvb.shape[0] == (int64_t)Hq * V;
    for (int hd = 0; hd < Hq; hd++) {
        mx_tensor x = view2(m->att + (size_t)hd * D + R, n, Lkv, (int64_t)Hq * D, dev);
        mx_tensor y = view2(m->mla_ov + (size_t)hd * V, n, V, (int64_t)Hq * V, dev);
        mx_tensor w = mx_tensor_rows(&L->w_kvb, split ? (int64_t)hd * V : (int64_t)hd * (N + V) + N,
                                     V); /* [V, Lkv] */
        be->matmul(&y, &x, &w, NULL);
    }
    be->matmul(o, &ov, &L->wo.w, NULL);
    return 0;
}

/* ==== MoE ==== */
void model_mla_moe_params(const model *m, const model_layer *L, mx_moe_params *mp) {
    const model_spec *s = &m->spec;
    if (!s->moe_grouped_sigmoid) return;
    mp->ds_grouped = true;
    mp->ds_n_group = s->moe_n_group;
    mp->ds_topk_group = s->moe_topk_group;
    mp->ds_scale = s->routed_scaling_factor;
    mp->ds_bias = mx_tensor_present(&L->e_bias) ? &L->e_bias : NULL;
}

void model_mla_shared(model *m, const model_layer *L, const mx_tensor *h, mx_tensor *x, mx_tensor *o) {
    const model_spec *s = &m->spec;
    const backend_ops *be = m->be;
    if (s->n_shared_experts <= 0 || !mx_tensor_present(&L->w_gate.w)) return;
    be->add(x, o); /* the routed experts' share */
    model_mlp(m, o, h, &L->w_gate, &L->w_up, &L->w_down,
              s->moe_intermediate_size * s->n_shared_experts); /* the forward adds it next */
}
