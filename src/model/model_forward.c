/* The generic decoder forward over one step batch (prefill chunks and decode rows mixed).
 * Per layer:  h = norm(x); q,k,v = h W (+b); [q/k norm]; rope; write K/V; attention;
 *             o = att Wo (+b); [post-attn norm]; x += o;
 *             h = norm(x); m = MLP or MoE; [post-ffn norm]; x += m.
 * Then the final norm, lm_head and soft-capping only for the rows whose logits are needed, and
 * the final norm alone for the rows whose hidden states an embedding pools (hidden_rows). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "model/model_internal.h"
#include "tune/tune_policy.h"

_Static_assert((int)MOE_ROUTE_SIGMOID_IN == MX_MOE_ROUTE_SIGMOID_IN, "routing values match");

/* ==== Scratch ==== */
static int grow(model *m, float **p, size_t n, mx_error *err) {
    if (*p) m->be->free(*p);
    *p = m->be->alloc(n * sizeof(float));
    return *p ? 0 : mx_fail(err, "out of memory for %zu activations", n);
}

int model_ensure_scratch(model *m, int rows, int n_out, int n_hidden, mx_error *err) {
    const model_spec *s = &m->spec;
    if (rows > m->cap_rows) {
        /* this rank's widths (the whole model when tp_size is 1) */
        const size_t H = (size_t)s->hidden_size, QD = (size_t)m->hq * s->head_dim;
        const size_t KD = (size_t)m->hkv * s->head_dim;
        size_t I = (size_t)m->ffn;
        if ((size_t)s->moe_intermediate_size > I) I = (size_t)s->moe_intermediate_size;
        if ((size_t)s->shared_expert_size > I) I = (size_t)s->shared_expert_size;
        const size_t Ish = (size_t)s->moe_intermediate_size * s->n_shared_experts; /* deepseek */
        if (Ish > I) I = Ish;
        const size_t E = s->n_experts > 0 ? (size_t)s->n_experts : 1, r = (size_t)rows;
        if (grow(m, &m->x, r * H, err) || grow(m, &m->h, r * H, err) || grow(m, &m->q, r * QD, err) ||
            grow(m, &m->k, r * KD, err) || grow(m, &m->v, r * KD, err) ||
            grow(m, &m->att, r * QD, err) || grow(m, &m->o, r * H, err) ||
            grow(m, &m->g, r * I, err) || grow(m, &m->u, r * I, err) || grow(m, &m->rl, r * E, err) ||
            grow(m, &m->cs_glob, r * (size_t)m->rot_dim, err) ||
            grow(m, &m->cs_loc, r * (size_t)m->rot_dim, err))
            return -1;
        if (s->shared_expert_size > 0 && grow(m, &m->o2, r * H, err)) return -1;
        if (s->attn_temp_tuning && grow(m, &m->cs_temp, r * (size_t)m->rot_dim, err)) return -1;
        free(m->cs_host);
        free(m->inv_host);
        m->cs_host = malloc(r * (size_t)m->rot_dim * sizeof(float));
        m->inv_host = malloc(((size_t)m->rot_dim / 2 + 1) * sizeof(float));
        if (!m->cs_host || !m->inv_host) return mx_fail(err, "out of memory");
        if (m->coll) { /* embedding rows of tokens another rank owns stay zero */
            free(m->zero_host);
            m->zero_host = calloc(r * H, sizeof(float));
            if (!m->zero_host) return mx_fail(err, "out of memory");
        }
        m->cap_rows = rows;
    }
    if (n_out > m->cap_out) {
        if (grow(m, &m->xo, (size_t)n_out * s->hidden_size, err) ||
            grow(m, &m->lo, (size_t)n_out * s->vocab_size, err))
            return -1;
        if (m->coll) { /* a TP rank (a group of one too): its slice, gathered into lo */
            if (grow(m, &m->lol, (size_t)n_out * m->vn, err)) return -1;
        } else {
            m->lol = m->lo; /* one rank: its vocabulary slice is the whole head */
        }
        m->cap_out = n_out;
    }
    if (n_hidden > m->cap_hid) { /* embedding rows only: a generation step never allocates it */
        if (grow(m, &m->xh, (size_t)n_hidden * s->hidden_size, err)) return -1;
        m->cap_hid = n_hidden;
    }
    return 0;
}

/* ==== RoPE tables for the step ==== */
static void build_cos_sin(model *m, const mx_rope *r, const model_batch *b, float *dst) {
    const int rd = m->rot_dim;
    int last_len = -1;
    float af = 1.0f;
    for (int i = 0; i < b->n_rows; i++) {
        /* Only dynamic NTK depends on the length; recompute when it changes between rows. */
        const int len = r->type == ROPE_DYNAMIC ? (b->rope_len ? b->rope_len[i] : b->pos[i] + 1) : 0;
        if (len != last_len) {
            rope_inv_freq(&m->spec, r, len, m->inv_host, &af);
            last_len = len;
        }
        rope_cos_sin(m->inv_host, rd, b->pos[i], af, m->cs_host + (size_t)i * rd);
    }
    mx_tensor t = mx_tensor_2d(dst, MX_F32, b->n_rows, rd, m->be->device);
    m->be->copy_from_host(&t, m->cs_host);
}

/* Llama 4's NoPE layers: q *= log(floor((pos + 1) / floor_scale) + 1) * attn_scale + 1, as
 * transformers computes it in fp32 (log1p of the floor). Applied through the rope op with
 * (cos, sin) = (scale, 0): x * c - y * 0 is x * c exactly, so no new op is needed. */
static void build_temp(model *m, const model_batch *b) {
    const int rd = m->rot_dim;
    const float fs = m->spec.attn_temp_floor, as = m->spec.attn_temp_scale;
    for (int i = 0; i < b->n_rows; i++) {
        const float sc = log1pf(floorf(((float)b->pos[i] + 1.0f) / fs)) * as + 1.0f;
        for (int j = 0; j < rd / 2; j++) {
            m->cs_host[(size_t)i * rd + 2 * j] = sc;
            m->cs_host[(size_t)i * rd + 2 * j + 1] = 0.0f;
        }
    }
    mx_tensor t = mx_tensor_2d(m->cs_temp, MX_F32, b->n_rows, rd, m->be->device);
    m->be->copy_from_host(&t, m->cs_host);
}

static bool ropes_equal(const mx_rope *a, const mx_rope *b) {
    return a->type == b->type && a->theta == b->theta && a->factor == b->factor &&
           a->original_max_pos == b->original_max_pos && a->low_freq_factor == b->low_freq_factor &&
           a->high_freq_factor == b->high_freq_factor && a->beta_fast == b->beta_fast &&
           a->beta_slow == b->beta_slow && a->attention_factor == b->attention_factor &&
           a->mscale == b->mscale && a->mscale_all_dim == b->mscale_all_dim;
}

/* ==== Weights: dense or MLX-quantized ==== */
static void linear(const backend_ops *be, mx_tensor *out, const mx_tensor *x, const model_weight *w,
                   const mx_tensor *bias) {
    if (model_weight_quantized(w)) be->matmul_q(out, x, &w->q, bias);
    else be->matmul(out, x, &w->w, bias);
}

/* Products of one x: one call where the backend groups them (the CPU's thread team then wakes
 * once), else one by one (the CUDA backend joins them itself). bias entries may be NULL. */
static void linear_n(const backend_ops *be, const mx_tensor *x, int n, mx_tensor *const *outs,
                     const model_weight *const *ws, const mx_tensor *const *biases) {
    if (!be->matmul_group) {
        for (int i = 0; i < n; i++) linear(be, outs[i], x, ws[i], biases[i]);
        return;
    }
    mx_linear ls[3];
    for (int i = 0; i < n; i++)
        ls[i] = (mx_linear){.out = outs[i], .w = &ws[i]->w,
                            .q = model_weight_quantized(ws[i]) ? &ws[i]->q : NULL, .bias = biases[i]};
    be->matmul_group(x, ls, n);
}

/* out[n, H] = down(act(gate h) * up h): a dense gated MLP of width I (a layer's MLP, a MoE
 * layer's shared expert), through the model's g / u scratch. */
void model_mlp(model *m, mx_tensor *out, const mx_tensor *h, const model_weight *gate,
               const model_weight *up, const model_weight *down, int I) {
    const backend_ops *be = m->be;
    const int n = (int)h->shape[0];
    mx_tensor g = mx_tensor_2d(m->g, MX_F32, n, I, be->device);
    mx_tensor u = mx_tensor_2d(m->u, MX_F32, n, I, be->device);
    linear_n(be, h, 2, (mx_tensor *const[]){&g, &u}, (const model_weight *const[]){gate, up},
             (const mx_tensor *const[]){NULL, NULL});
    be->glu(&g, &g, &u, (int)m->spec.act);
    linear(be, out, &g, down, NULL);
}

/* ==== Collectives: no-ops for one rank ==== */
/* A rank of a group (coll set) always calls the collective, also in a group of one
 * (MLXCEL_TP_GROUP=1: the NCCL path on one GPU); a plain model never does. */
static int tp_reduce(model *m, mx_tensor *x, mx_error *err) {
    return m->coll ? m->coll->all_reduce_sum(m->coll, m->tp_rank, x, err) : 0;
}

/* Vocabulary-parallel embedding: this rank writes the rows of the tokens in [v0, v0 + vn)
 * (runs of consecutive owned tokens in one call), zeros elsewhere; the all-reduce then gives
 * each row exactly its owner's values (x + 0 is exact). One rank owns every token: one call. */
static int tp_embed(model *m, mx_tensor *x, const int32_t *tokens, int n, float es, mx_error *err) {
    const backend_ops *be = m->be;
    if (m->vn == m->spec.vocab_size) { /* one rank owns every token */
        if (model_weight_quantized(&m->tok_embd)) be->embed_q(x, &m->tok_embd.q, tokens, n, es, false);
        else be->embed(x, &m->tok_embd.w, tokens, n, es, false);
        return tp_reduce(m, x, err); /* a group of one: the (identity) collective still runs */
    }
    be->copy_from_host(x, m->zero_host);
    int32_t loc[64]; /* local ids of one run */
    for (int i = 0; i < n;) {
        if (tokens[i] < m->v0 || tokens[i] >= m->v0 + m->vn) {
            i++;
            continue;
        }
        int j = i;
        while (j < n && j - i < 64 && tokens[j] >= m->v0 && tokens[j] < m->v0 + m->vn) {
            loc[j - i] = tokens[j] - m->v0;
            j++;
        }
        mx_tensor xr = mx_tensor_rows(x, i, j - i);
        if (model_weight_quantized(&m->tok_embd)) be->embed_q(&xr, &m->tok_embd.q, loc, j - i, es, false);
        else be->embed(&xr, &m->tok_embd.w, loc, j - i, es, false);
        i = j;
    }
    return tp_reduce(m, x, err);
}

/* ==== Attention split count ====
 * Tunables are resolved before an op runs, never inside it: the CPU backend's split count
 * (paged-decode-splits: MLXCEL_PAGED_DECODE_SPLITS > cached winner > built-in default, keyed by
 * rows, longest context and geometry) is looked up here at the first layer of a forward and
 * reused by the others of the same geometry, and handed down in mx_attn_batch.kv_splits. The
 * CUDA backend keys its own count per graph (cu_decode_splits) and ignores the field. */
int model_attn_splits(model *m, const mx_attn_batch *ab, const mx_attn_params *ap) {
    if (m->be->device != MX_DEV_CPU) return 0;
    struct model_splits_memo *memo = &m->splits_memo;
    if (ab->step_id && memo->step == ab->step_id && memo->hq == ap->n_heads &&
        memo->hkv == ap->n_kv_heads && memo->d == ap->head_dim && memo->bs == ab->block_size)
        return memo->S;
    int ctx = 1;
    for (int i = 0; i < ab->n_rows; i++) ctx = ab->pos[i] + 1 > ctx ? ab->pos[i] + 1 : ctx;
    const tune_attn_shape shape = {ab->n_rows, ctx, ap->head_dim, ap->n_heads, ap->n_kv_heads,
                                   ab->block_size};
    tune_source src;
    int S = tune_get_paged_decode_splits(&shape, NULL, &src);
    S = S < 1 ? 1 : S;
    LOG_DEBUG("cpu attention splits: %d rows, context %d -> %d (%s)", ab->n_rows, ctx, S,
              tune_source_name(src));
    memo->step = ab->step_id, memo->hq = ap->n_heads, memo->hkv = ap->n_kv_heads;
    memo->d = ap->head_dim, memo->bs = ab->block_size, memo->S = S;
    return S;
}

/* ==== Forward ==== */
/* logits (host [n_out, V]) or, for device greedy sampling, ids + logprobs (host [n_out]); hidden
 * (host [n_hidden, H]). o NULL: nothing goes to the host (the ranks > 0 of a TP group). */
static int forward(model *m, kv_cache *kv, const model_batch *b, const model_out *res, mx_error *err) {
    static const model_out none = {0};
    if (!res) res = &none;
    const model_spec *s = &m->spec;
    const backend_ops *be = m->be;
    const int n = b->n_rows, H = s->hidden_size, D = s->head_dim;
    /* this rank's heads and vocabulary slice (all of them for one rank) */
    const int Hq = m->hq, Hkv = m->hkv, V = s->vocab_size, Vl = m->vn;
    const mx_device dev = be->device;
    if (n <= 0) return 0;
    const kv_cache_params *kvp = kv_cache_params_of(kv);
    if ((kvp->tp_size > 1 ? kvp->tp_size : 1) != m->tp_size)
        return mx_fail(err, "kv cache laid out for %d tensor-parallel ranks, model has %d",
                       kvp->tp_size > 1 ? kvp->tp_size : 1, m->tp_size);
    if (b->n_out > 0 && m->no_head)
        return mx_fail(err, "tensor lm_head.weight: missing and tie_word_embeddings is false, so this "
                            "checkpoint computes embeddings only (mlxcel serve --embeddings)");
    if (model_ensure_scratch(m, n, b->n_out > 0 ? b->n_out : 1, b->n_hidden, err)) return -1;

    mx_tensor x = mx_tensor_2d(m->x, MX_F32, n, H, dev);       /* [n, H] */
    mx_tensor h = mx_tensor_2d(m->h, MX_F32, n, H, dev);       /* [n, H] */
    mx_tensor q = mx_tensor_3d(m->q, MX_F32, n, Hq, D, dev);   /* [n, Hq, D] */
    mx_tensor k = mx_tensor_3d(m->k, MX_F32, n, Hkv, D, dev);  /* [n, Hkv, D] */
    mx_tensor v = mx_tensor_3d(m->v, MX_F32, n, Hkv, D, dev);  /* [n, Hkv, D] */
    mx_tensor att = mx_tensor_3d(m->att, MX_F32, n, Hq, D, dev);
    mx_tensor o = mx_tensor_2d(m->o, MX_F32, n, H, dev);       /* [n, H] */
    mx_tensor q2 = mx_tensor_2d(m->q, MX_F32, n, Hq * D, dev);
    mx_tensor k2 = mx_tensor_2d(m->k, MX_F32, n, Hkv * D, dev);
    mx_tensor v2 = mx_tensor_2d(m->v, MX_F32, n, Hkv * D, dev);
    mx_tensor att2 = mx_tensor_2d(m->att, MX_F32, n, Hq * D, dev);

    /* int arrays of the batch go to the device as-is on CPU; a device backend copies them
     * inside its attention/kv ops from these host pointers. */
    mx_attn_batch ab = {.n_rows = n, .pos = b->pos, .seq = b->seq, .block_table = b->block_table,
                        .table_stride = b->table_stride, .block_size = kv_cache_table_block(kv),
                        .write_rows = b->write_rows, .step_id = ++m->n_forward};

    bool any_sliding = false, any_global = false;
    for (int l = 0; l < s->n_layers; l++) {
        any_sliding |= s->sliding_window > 0 && s->layer_sliding[l];
        any_global |= !(s->sliding_window > 0 && s->layer_sliding[l]);
    }
    /* sliding layers use rope_local (gemma3: its own base); when it equals the global one,
     * they share the global table */
    const bool same_rope = ropes_equal(&s->rope, &s->rope_local);
    if (any_global || same_rope) build_cos_sin(m, &s->rope, b, m->cs_glob);
    if (any_sliding && !same_rope) build_cos_sin(m, &s->rope_local, b, m->cs_loc);
    bool any_nope = false;
    for (int l = 0; l < s->n_layers; l++) any_nope |= s->layer_nope[l];
    if (any_nope && s->attn_temp_tuning) build_temp(m, b);

    /* A device backend uploads the step's host arrays once here, and for a pure decode step
     * may replay a captured graph of everything up to step_end instead of the op calls. */
    bool decode_only = b->n_out == n && b->n_hidden == 0;
    for (int i = 0; i < n && decode_only; i++) decode_only = b->out_rows[i] == i && b->seq[i] == i;
    const mx_step st = {.ab = &ab, .tokens = b->tokens, .n_seqs = b->n_seqs, .n_out = b->n_out,
                        .out_rows = b->out_rows, .decode_only = decode_only};
    const int mode = be->step_begin ? be->step_begin(&st, err) : MX_STEP_RUN;
    if (mode < 0) return -1;
    int rc = 0;
    if (mode == MX_STEP_RUN) {
        const float es = s->embed_scale > 0 ? s->embed_scale : 1.0f;
        rc = tp_embed(m, &x, b->tokens, n, es, err);
        const float eps = (float)s->rms_norm_eps, off = s->norm_offset;

        for (int l = 0; l < s->n_layers && rc == 0; l++) {
            const model_layer *L = &m->layers[l];
            const bool sliding = s->sliding_window > 0 && s->layer_sliding[l];
            /* ---- attention ---- */
            be->rms_norm(&h, &x, &L->attn_norm, eps, off);
            if (L->mla) { /* DeepSeek multi-head latent attention, absorbed (model_mla.c) */
                if ((rc = model_mla_attention(m, kv, l, &h, &o, &ab, err))) break;
                goto attn_out;
            }
            linear_n(be, &h, 3, (mx_tensor *const[]){&q2, &k2, &v2},
                     (const model_weight *const[]){&L->wq, &L->wk, &L->wv},
                     (const mx_tensor *const[]){&L->bq, &L->bk, &L->bv});
            if (mx_tensor_present(&L->q_norm)) {
                be->rms_norm(&q, &q, &L->q_norm, eps, off);
                be->rms_norm(&k, &k, &L->k_norm, eps, off);
            }
            const float *cs = sliding && !same_rope ? m->cs_loc : m->cs_glob;
            const bool nope = s->layer_nope[l];
            if (m->rot_dim > 0 && !nope) {
                be->rope(&q, cs, m->rot_dim);
                be->rope(&k, cs, m->rot_dim);
            }
            if (s->qk_l2_norm && !nope) { /* llama4: weightless, after the rotation */
                be->rms_norm(&q, &q, &m->ones, eps, 0.0f);
                be->rms_norm(&k, &k, &m->ones, eps, 0.0f);
            }
            if (nope && s->attn_temp_tuning) be->rope(&q, m->cs_temp, m->rot_dim);
            mx_tensor kpool = kv_cache_k_rank(kv, l, m->tp_rank), vpool = kv_cache_v_rank(kv, l, m->tp_rank);
            be->kv_write(&kpool, &vpool, &k, &v, &ab);
            mx_attn_params ap = {.n_heads = Hq, .n_kv_heads = Hkv, .head_dim = D,
                                 .scale = s->attn_scale > 0 ? s->attn_scale : 1.0f / sqrtf((float)D),
                                 .softcap = s->attn_softcap, .window = sliding ? s->sliding_window : 0,
                                 .chunk = s->layer_chunked[l] ? s->attn_chunk : 0};
            ab.kv_splits = model_attn_splits(m, &ab, &ap);
            be->attention(&att, &q, &kpool, &vpool, &ab, &ap);
            /* row-parallel: partial sums over this rank's heads; the bias once, on rank 0 */
            linear(be, &o, &att2, &L->wo, m->tp_rank == 0 ? &L->bo : NULL);
            if ((rc = tp_reduce(m, &o, err))) break;
        attn_out:
            if (s->sandwich_norms) be->rms_norm(&o, &o, &L->post_attn_norm, eps, off);
            be->add(&x, &o);

            /* ---- MLP / MoE ---- */
            be->rms_norm(&h, &x, &L->ffn_norm, eps, off);
            if (L->moe) {
                const int E = s->n_experts;
                mx_tensor rl = mx_tensor_2d(m->rl, MX_F32, n, E, dev);
                linear(be, &rl, &h, &L->router, NULL);
                /* per projection: the quantized views when its experts are packed (asked of a
                 * present expert: under TP the others are absent, all zero) */
                const int ep = m->en < E ? m->e0 : 0;
                const bool qg = L->exp_qgate[ep].bits, qu = L->exp_qup[ep].bits,
                           qd = L->exp_qdown[ep].bits;
                mx_moe_experts ex = {.gate = qg ? NULL : L->exp_gate, .up = qu ? NULL : L->exp_up,
                                     .down = qd ? NULL : L->exp_down, .qgate = qg ? L->exp_qgate : NULL,
                                     .qup = qu ? L->exp_qup : NULL, .qdown = qd ? L->exp_qdown : NULL};
                /* this rank's experts only (all of them for one rank), then the ranks' sum */
                mx_moe_params mp = {.n_experts = E, .top_k = s->n_experts_per_tok,
                                    .norm_topk = s->norm_topk_prob, .activation = (int)s->act,
                                    .routing = (int)s->moe_routing,
                                    .e0 = m->e0, .en = m->en < E ? m->en : 0};
                model_mla_moe_params(m, L, &mp); /* deepseek: grouped sigmoid routing */
                if (be->moe(&o, &h, &rl, &ex, &mp, err)) {
                    rc = mx_wrap(err, "layer %d", l);
                    break; /* step_end still runs: a device backend may be capturing */
                }
                if (s->shared_expert_size > 0) { /* llama4: + the dense shared expert of h */
                    mx_tensor o2 = mx_tensor_2d(m->o2, MX_F32, n, H, dev); /* [n, H] */
                    model_mlp(m, &o2, &h, &L->sh_gate, &L->sh_up, &L->sh_down, s->shared_expert_size);
                    be->add(&o, &o2);
                }
                if ((rc = tp_reduce(m, &o, err))) break;
                if (L->mla) model_mla_shared(m, L, &h, &x, &o); /* deepseek shared experts */
            } else {
                model_mlp(m, &o, &h, &L->w_gate, &L->w_up, &L->w_down, m->ffn);
                if ((rc = tp_reduce(m, &o, err))) break; /* row-parallel down_proj */
            }
            if (s->sandwich_norms) be->rms_norm(&o, &o, &L->post_ffn_norm, eps, off);
            be->add(&x, &o);
        }

        /* ---- head, only for the sampled rows ---- */
        if (b->n_out > 0 && rc == 0) {
            mx_tensor xo = mx_tensor_2d(m->xo, MX_F32, b->n_out, H, dev);
            mx_tensor lol = mx_tensor_2d(m->lol, MX_F32, b->n_out, Vl, dev); /* [n_out, vn] */
            be->gather_rows(&xo, &x, b->out_rows, b->n_out);
            be->rms_norm(&xo, &xo, &m->out_norm, eps, off);
            linear(be, &lol, &xo, &m->lm_head, NULL);
            if (s->final_softcap > 0) be->softcap(&lol, s->final_softcap);
            if (m->coll) { /* vocabulary-parallel head: every rank's columns into lo */
                mx_tensor lo = mx_tensor_2d(m->lo, MX_F32, b->n_out, V, dev);
                rc = m->coll->all_gather_cols(m->coll, m->tp_rank, &lo, &lol, m->v0, err);
            }
        }
        /* ---- final hidden states of the embedding rows: the final norm, no head (x is whole
         * on every rank: the layers end in an all-reduce) ---- */
        if (b->n_hidden > 0 && rc == 0) {
            mx_tensor xh = mx_tensor_2d(m->xh, MX_F32, b->n_hidden, H, dev); /* [n_hidden, H] */
            be->gather_rows(&xh, &x, b->hidden_rows, b->n_hidden);
            be->rms_norm(&xh, &xh, &m->out_norm, eps, off);
        }
    }
    if (be->step_end && be->step_end(rc ? NULL : err) && rc == 0) return -1;
    if (rc) return -1;
    if (b->n_out > 0) {
        mx_tensor lo = mx_tensor_2d(m->lo, MX_F32, b->n_out, V, dev);
        if (res->ids) {
            if (be->greedy_rows(res->ids, res->logprobs, &lo, err)) return -1;
        } else if (res->logits) {
            be->copy_to_host(res->logits, &lo);
        }
    }
    if (b->n_hidden > 0 && res->hidden) {
        mx_tensor xh = mx_tensor_2d(m->xh, MX_F32, b->n_hidden, H, dev);
        be->copy_to_host(res->hidden, &xh);
    }
    return be->check ? be->check(err) : 0;
}

int model_forward_out(model *m, kv_cache *kv, const model_batch *b, const model_out *o, mx_error *err) {
    if (b->n_hidden > 0 && !o->hidden) return mx_fail(err, "internal: hidden rows without a destination");
    if (o->ids && !model_has_device_greedy(m))
        return mx_fail(err, "backend %s has no device greedy sampling", m->be->name);
    if (m->shards) return model_tp_forward(m, kv, b, o, err);
    return forward(m, kv, b, o, err);
}

int model_forward(model *m, kv_cache *kv, const model_batch *b, float *logits, mx_error *err) {
    const model_out o = {.logits = logits};
    return model_forward_out(m, kv, b, &o, err);
}

int model_forward_rank(model *m, kv_cache *kv, const model_batch *b, const model_out *o, mx_error *err) {
    return forward(m, kv, b, o, err);
}

int model_forward_greedy(model *m, kv_cache *kv, const model_batch *b, int32_t *ids,
                         float *logprobs, mx_error *err) {
    const model_out o = {.ids = ids, .logprobs = logprobs};
    return model_forward_out(m, kv, b, &o, err);
}

bool model_has_device_greedy(const model *m) { return m->be->greedy_rows != NULL && !m->shards; }

bool model_has_lm_head(const model *m) {
    return m->shards ? !m->shards[0]->no_head : !m->no_head;
}
