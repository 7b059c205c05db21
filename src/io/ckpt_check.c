/* ckpt_validate: every tensor the spec implies exists with the shape the config implies.
 *
 * Naming follows the Hugging Face layout ("<prefix>embed_tokens.weight",
 * "<prefix>layers.N.self_attn.q_proj.weight", ...). The prefix is taken from wherever the
 * embedding lives ("model.", "language_model.model.", "model.language_model."), so wrapped
 * multimodal checkpoints validate too. MoE experts are accepted in the three layouts found in
 * the wild: one tensor per expert (transformers 4.x), stacked [E, out, in] (MLX switch_mlp),
 * fused gate_up [E, 2*inter, hidden] (transformers 5.x); llama4's own names and layouts in
 * check_experts_l4. This is a validation pass for inspect
 * and loaders; it does not decide how the engine binds weights. */
#include <stdio.h>
#include <string.h>

#include "io/checkpoint.h"

typedef struct chk {
    const ckpt *c;
    char pfx[128];
    mx_error *err;
} chk;

static int expect(chk *k, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2) {
    char full[512];
    int64_t shape[3] = {d0, d1, d2};
    snprintf(full, sizeof full, "%s%s", k->pfx, name);
    return ckpt_expect(k->c, full, ndim, shape, NULL, k->err);
}

static bool present(chk *k, const char *name) {
    char full[512];
    snprintf(full, sizeof full, "%s%s", k->pfx, name);
    return ckpt_find(k->c, full) != NULL;
}

static int check_mlp(chk *k, int i, const char *pfx, int64_t hidden, int64_t inter) {
    char n[256];
    static const char *k_proj[3] = {"gate_proj", "up_proj", "down_proj"};
    for (int p = 0; p < 3; p++) {
        snprintf(n, sizeof n, "layers.%d.%s.%s.weight", i, pfx, k_proj[p]);
        if (p < 2 ? expect(k, n, 2, inter, hidden, 0) : expect(k, n, 2, hidden, inter, 0)) return -1;
    }
    return 0;
}

static int check_experts(chk *k, int i, const model_spec *s) {
    char n[256];
    int64_t E = s->n_experts, H = s->hidden_size, I = s->moe_intermediate_size;
    bool mixtral = s->family == FAM_MIXTRAL;
    const char *blk = mixtral ? "block_sparse_moe" : "mlp";
    snprintf(n, sizeof n, "layers.%d.%s.gate.weight", i, blk); /* router [E, hidden] */
    if (expect(k, n, 2, E, H, 0)) return -1;
    snprintf(n, sizeof n, "layers.%d.%s.switch_mlp.gate_proj.weight", i, blk);
    if (present(k, n)) { /* MLX: stacked experts */
        static const char *k_proj[3] = {"gate_proj", "up_proj", "down_proj"};
        for (int p = 0; p < 3; p++) {
            snprintf(n, sizeof n, "layers.%d.%s.switch_mlp.%s.weight", i, blk, k_proj[p]);
            if (p < 2 ? expect(k, n, 3, E, I, H) : expect(k, n, 3, E, H, I)) return -1;
        }
        return 0;
    }
    snprintf(n, sizeof n, "layers.%d.%s.experts.gate_up_proj", i, blk);
    if (present(k, n)) { /* transformers 5.x: fused, stacked */
        if (expect(k, n, 3, E, 2 * I, H)) return -1;
        snprintf(n, sizeof n, "layers.%d.%s.experts.down_proj", i, blk);
        return expect(k, n, 3, E, H, I);
    }
    for (int e = 0; e < E; e++) { /* transformers 4.x: one module per expert */
        if (mixtral) {
            static const char *k_w[3] = {"w1", "w3", "w2"}; /* gate, up, down */
            for (int p = 0; p < 3; p++) {
                snprintf(n, sizeof n, "layers.%d.block_sparse_moe.experts.%d.%s.weight", i, e, k_w[p]);
                if (p < 2 ? expect(k, n, 2, I, H, 0) : expect(k, n, 2, H, I, 0)) return -1;
            }
        } else {
            char sub[64];
            snprintf(sub, sizeof sub, "mlp.experts.%d", e);
            if (check_mlp(k, i, sub, H, I)) return -1;
        }
    }
    return 0;
}

/* Llama 4: feed_forward.router, experts stacked by mlx_lm (feed_forward.experts.* or
 * switch_mlp.* [E, out, in]) or transformers' fused [in, out] pair (gate_up_proj [E, H, 2I],
 * down_proj [E, I, H]), and the shared expert. */
static int check_experts_l4(chk *k, int i, const model_spec *s) {
    char n[256];
    const int64_t E = s->n_experts, H = s->hidden_size, I = s->moe_intermediate_size;
    snprintf(n, sizeof n, "layers.%d.feed_forward.router.weight", i);
    if (expect(k, n, 2, E, H, 0)) return -1;
    static const char *k_mods[2] = {"experts", "switch_mlp"};
    static const char *k_proj[3] = {"gate_proj", "up_proj", "down_proj"};
    bool found = false;
    for (int m = 0; m < 2 && !found; m++) {
        snprintf(n, sizeof n, "layers.%d.feed_forward.%s.gate_proj.weight", i, k_mods[m]);
        if (!present(k, n)) continue;
        found = true;
        for (int p = 0; p < 3; p++) {
            snprintf(n, sizeof n, "layers.%d.feed_forward.%s.%s.weight", i, k_mods[m], k_proj[p]);
            if (p < 2 ? expect(k, n, 3, E, I, H) : expect(k, n, 3, E, H, I)) return -1;
        }
    }
    if (!found) {
        /* [in, out] as transformers writes them, or already [out, in] (then both are) */
        char full[512];
        snprintf(n, sizeof n, "layers.%d.feed_forward.experts.gate_up_proj", i);
        snprintf(full, sizeof full, "%s%s", k->pfx, n);
        const st_tensor *gu = ckpt_find(k->c, full);
        const bool out_in = gu && gu->ndim == 3 && gu->shape[1] == 2 * I && gu->shape[2] == H &&
                            H != 2 * I;
        if (out_in ? expect(k, n, 3, E, 2 * I, H) : expect(k, n, 3, E, H, 2 * I)) return -1;
        snprintf(n, sizeof n, "layers.%d.feed_forward.experts.down_proj", i);
        if (out_in ? expect(k, n, 3, E, H, I) : expect(k, n, 3, E, I, H)) return -1;
    }
    return s->shared_expert_size > 0
               ? check_mlp(k, i, "feed_forward.shared_expert", H, s->shared_expert_size)
               : 0;
}

/* DeepSeek V3 (MLA): q_a_proj / q_a_layernorm / q_b_proj (or q_proj), kv_a_proj_with_mqa,
 * kv_a_layernorm, kv_b_proj, o_proj; MoE layers add the router's e_score_correction_bias and
 * the shared experts. The multi-token-prediction layers past n_layers are not checked. */
static int check_mla_layer(chk *k, int i, const model_spec *s) {
    char n[256];
    const int64_t H = s->hidden_size, Hq = s->n_heads, R = s->qk_rope_head_dim,
                  N = s->qk_nope_head_dim, V = s->v_head_dim, Lq = s->q_lora_rank,
                  Lkv = s->kv_lora_rank;
    static const char *k_w[7] = {"q_a_proj", "q_b_proj", "q_proj", "kv_a_proj_with_mqa",
                                 "kv_b_proj", "o_proj", NULL};
    const int64_t shp[6][2] = {{Lq, H}, {Hq * (N + R), Lq}, {Hq * (N + R), H}, {Lkv + R, H},
                               {Hq * (N + V), Lkv}, {H, Hq * V}};
    snprintf(n, sizeof n, "layers.%d.self_attn.kv_b_proj.weight", i);
    const bool split = !present(k, n); /* mlx_lm: embed_q [Hq, Lkv, N], unembed_out [Hq, V, Lkv] */
    if (split) {
        snprintf(n, sizeof n, "layers.%d.self_attn.embed_q.weight", i);
        if (expect(k, n, 3, Hq, Lkv, N)) return -1;
        snprintf(n, sizeof n, "layers.%d.self_attn.unembed_out.weight", i);
        if (expect(k, n, 3, Hq, V, Lkv)) return -1;
    }
    for (int p = 0; k_w[p]; p++) {
        if ((Lq > 0 ? p == 2 : p < 2) || (split && p == 4)) continue;
        snprintf(n, sizeof n, "layers.%d.self_attn.%s.weight", i, k_w[p]);
        if (expect(k, n, 2, shp[p][0], shp[p][1], 0)) return -1;
    }
    snprintf(n, sizeof n, "layers.%d.self_attn.kv_a_layernorm.weight", i);
    if (expect(k, n, 1, Lkv, 0, 0)) return -1;
    if (Lq > 0) {
        snprintf(n, sizeof n, "layers.%d.self_attn.q_a_layernorm.weight", i);
        if (expect(k, n, 1, Lq, 0, 0)) return -1;
    }
    for (int p = 0; p < 2; p++) {
        snprintf(n, sizeof n, "layers.%d.%s.weight", i, p ? "post_attention_layernorm" : "input_layernorm");
        if (expect(k, n, 1, H, 0, 0)) return -1;
    }
    if (s->layer_dense_mlp[i]) return check_mlp(k, i, "mlp", H, s->intermediate_size);
    snprintf(n, sizeof n, "layers.%d.mlp.gate.e_score_correction_bias", i);
    if (expect(k, n, 1, s->n_experts, 0, 0)) return -1;
    if (s->n_shared_experts > 0 &&
        check_mlp(k, i, "mlp.shared_experts", H, (int64_t)s->moe_intermediate_size * s->n_shared_experts))
        return -1;
    return check_experts(k, i, s);
}

static int check_layer(chk *k, int i, const model_spec *s) {
    if (s->kv_lora_rank > 0) return check_mla_layer(k, i, s);
    char n[256];
    int64_t H = s->hidden_size, D = s->head_dim, QD = (int64_t)s->n_heads * D,
            KD = (int64_t)s->n_kv_heads * D;
    static const char *k_attn[4] = {"q_proj", "k_proj", "v_proj", "o_proj"};
    for (int p = 0; p < 4; p++) {
        int64_t out = p == 0 ? QD : p == 3 ? H : KD, in = p == 3 ? QD : H;
        snprintf(n, sizeof n, "layers.%d.self_attn.%s.weight", i, k_attn[p]);
        if (expect(k, n, 2, out, in, 0)) return -1;
        bool bias = p < 3 ? s->qkv_bias : s->o_bias;
        if (bias) {
            snprintf(n, sizeof n, "layers.%d.self_attn.%s.bias", i, k_attn[p]);
            if (expect(k, n, 1, out, 0, 0)) return -1;
        }
    }
    if (s->qk_norm) {
        snprintf(n, sizeof n, "layers.%d.self_attn.q_norm.weight", i);
        if (expect(k, n, 1, D, 0, 0)) return -1;
        snprintf(n, sizeof n, "layers.%d.self_attn.k_norm.weight", i);
        if (expect(k, n, 1, D, 0, 0)) return -1;
    }
    static const char *k_norms[4] = {"input_layernorm", "post_attention_layernorm",
                                     "pre_feedforward_layernorm", "post_feedforward_layernorm"};
    for (int p = 0; p < (s->sandwich_norms ? 4 : 2); p++) {
        snprintf(n, sizeof n, "layers.%d.%s.weight", i, k_norms[p]);
        if (expect(k, n, 1, H, 0, 0)) return -1;
    }
    const bool l4 = s->family == FAM_LLAMA4;
    if (s->n_experts && !s->layer_dense_mlp[i])
        return l4 ? check_experts_l4(k, i, s) : check_experts(k, i, s);
    return check_mlp(k, i, l4 ? "feed_forward" : "mlp", H, s->intermediate_size);
}

int ckpt_validate(const ckpt *c, mx_error *err) {
    const model_spec *s = &c->spec;
    chk k = {.c = c, .err = err};
    /* Find the prefix in front of "embed_tokens.weight". */
    const char *emb = NULL;
    for (int f = 0; f < c->n_files && !emb; f++)
        for (int t = 0; t < c->files[f].n_tensors; t++) {
            const char *nm = c->files[f].tensors[t].name;
            size_t l = strlen(nm);
            if (l >= 19 && !strcmp(nm + l - 19, "embed_tokens.weight") &&
                (l == 19 || nm[l - 20] == '.') && l - 19 < sizeof k.pfx) {
                emb = nm;
                break;
            }
        }
    if (!emb) return mx_fail(err, "%s: missing tensor 'model.embed_tokens.weight'", c->dir);
    snprintf(k.pfx, sizeof k.pfx, "%.*s", (int)(strlen(emb) - 19), emb);
    if (expect(&k, "embed_tokens.weight", 2, s->vocab_size, s->hidden_size, 0)) return -1;
    if (expect(&k, "norm.weight", 1, s->hidden_size, 0, 0)) return -1;
    for (int i = 0; i < s->n_layers; i++)
        if (check_layer(&k, i, s)) return -1;
    if (!s->tie_word_embeddings) {
        /* lm_head sits beside the decoder: "lm_head.weight" or "<wrapper>.lm_head.weight". */
        char head[256];
        size_t pl = strlen(k.pfx);
        snprintf(head, sizeof head, "lm_head.weight");
        if (!ckpt_find(c, head) && pl > 6 && !strcmp(k.pfx + pl - 6, "model.")) {
            snprintf(head, sizeof head, "%.*slm_head.weight", (int)(pl - 6), k.pfx);
        }
        int64_t shape[2] = {s->vocab_size, s->hidden_size};
        if (ckpt_expect(c, head, 2, shape, NULL, err)) return -1;
    }
    return 0;
}
