/* Test helper: tiny random-weight models held in memory (no files), for engine and KV tests,
 * and a naive full-recompute reference forward in double precision. Header-only; included by
 * one test file each. */
#ifndef MLXCEL_TEST_TINY_MODEL_H
#define MLXCEL_TEST_TINY_MODEL_H

#include "io/safetensors.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "model/model.h"

typedef struct tiny_w {
    char name[96];
    mx_tensor t;
    float *f;     /* fp32 copy of the bf16-rounded values (reference) */
} tiny_w;

typedef struct tiny_model {
    model_spec spec;
    tiny_w *w;
    int n;
    uint64_t rng;
} tiny_model;

static float tiny_rand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static void tiny_add(tiny_model *tm, const char *name, int64_t d0, int64_t d1, int64_t d2,
                     float scale, float base) {
    tiny_w *w = &tm->w[tm->n++];
    snprintf(w->name, sizeof w->name, "%s", name);
    const int64_t numel = d0 * (d1 ? d1 : 1) * (d2 ? d2 : 1);
    uint16_t *bf = malloc((size_t)numel * 2);
    w->f = malloc((size_t)numel * 4);
    for (int64_t i = 0; i < numel; i++) {
        bf[i] = mx_f32_to_bf16(base + scale * tiny_rand(&tm->rng));
        w->f[i] = mx_bf16_to_f32(bf[i]);
    }
    if (d2) w->t = mx_tensor_3d(bf, MX_BF16, d0, d1, d2, MX_DEV_CPU);
    else if (d1) w->t = mx_tensor_2d(bf, MX_BF16, d0, d1, MX_DEV_CPU);
    else w->t = mx_tensor_1d(bf, MX_BF16, d0, MX_DEV_CPU);
}

static const tiny_w *tiny_find(const tiny_model *tm, const char *name) {
    for (int i = 0; i < tm->n; i++)
        if (!strcmp(tm->w[i].name, name)) return &tm->w[i];
    return NULL;
}

__attribute__((unused)) static mx_tensor tiny_lookup(void *ctx, const char *name) {
    const tiny_w *w = tiny_find(ctx, name);
    mx_tensor r = {0};
    return w ? w->t : r;
}

typedef enum { TINY_LLAMA, TINY_GEMMA, TINY_MOE } tiny_kind;

/* llama: GQA 4/2, head 8, 2 layers, untied. gemma: sliding window 5 on layer 0, sandwich norms
 * with +1 offset, q/k norm, gelu, tied, embed scale, local rope base. moe: 4 experts top 2. */
static void tiny_build_d(tiny_model *tm, tiny_kind kind, uint64_t seed, int vocab, int head_dim);
__attribute__((unused)) static void tiny_build(tiny_model *tm, tiny_kind kind, uint64_t seed) {
    tiny_build_d(tm, kind, seed, 97, 8);
}
__attribute__((unused)) static void tiny_build_v(tiny_model *tm, tiny_kind kind, uint64_t seed, int vocab) {
    tiny_build_d(tm, kind, seed, vocab, 8);
}

/* The same models with heads of head_dim values (8 above; 32 for the q8_0 / q4_0 KV caches,
 * which store blocks of 32 along head_dim). */
static void tiny_build_d(tiny_model *tm, tiny_kind kind, uint64_t seed, int vocab, int head_dim) {
    memset(tm, 0, sizeof *tm);
    tm->rng = seed;
    model_spec *s = &tm->spec;
    snprintf(s->model_type, sizeof s->model_type, "%s",
             kind == TINY_GEMMA ? "gemma3_text" : kind == TINY_MOE ? "qwen3_moe" : "llama");
    s->family = kind == TINY_GEMMA ? FAM_GEMMA3 : kind == TINY_MOE ? FAM_QWEN3_MOE : FAM_LLAMA;
    s->vocab_size = vocab;
    s->hidden_size = 32;
    s->intermediate_size = 48;
    s->n_layers = 2;
    s->n_heads = 4;
    s->n_kv_heads = 2;
    s->head_dim = head_dim;
    s->max_position_embeddings = 256;
    s->rms_norm_eps = 1e-6;
    s->rope.type = ROPE_DEFAULT;
    s->rope.theta = 10000.0;
    s->rope.factor = 1.0;
    s->rope.partial_rotary_factor = 1.0;
    s->rope_local = s->rope;
    s->attn_scale = 1.0f / sqrtf((float)head_dim);
    s->embed_scale = 1.0f;
    s->bos_id = -1;
    s->pad_id = -1;
    s->eos_ids[0] = vocab - 1;
    s->n_eos = 1;
    s->dtype = MX_BF16;
    s->act = ACT_SILU;
    if (kind == TINY_GEMMA) {
        s->norm_offset = 1.0f;
        s->qk_norm = true;
        s->sandwich_norms = true;
        s->sliding_window = 5;
        s->layer_sliding[0] = 1;
        s->rope_local.theta = 100.0;
        s->act = ACT_GELU_TANH;
        s->tie_word_embeddings = true;
        s->embed_scale = sqrtf(32.0f);
        s->attn_scale = 1.0f / sqrtf(16.0f);
    }
    if (kind == TINY_MOE) {
        s->qk_norm = true;
        s->n_experts = 4;
        s->n_experts_per_tok = 2;
        s->moe_intermediate_size = 24;
        s->norm_topk_prob = true;
    }
    tm->w = calloc(64 + (size_t)s->n_layers * 64, sizeof(tiny_w));
    const int H = 32, D = head_dim, I = 48, V = vocab;
    const float nb = kind == TINY_GEMMA ? 0.0f : 1.0f; /* norm weight centre */
    char nm[96];
    tiny_add(tm, "model.embed_tokens.weight", V, H, 0, 1.0f, 0);
    tiny_add(tm, "model.norm.weight", H, 0, 0, 0.1f, nb);
    if (!s->tie_word_embeddings) tiny_add(tm, "lm_head.weight", V, H, 0, 0.3f, 0);
    for (int l = 0; l < s->n_layers; l++) {
#define W2(suffix, a, b, sc) snprintf(nm, sizeof nm, "model.layers.%d." suffix, l), tiny_add(tm, nm, a, b, 0, sc, 0)
#define W1(suffix, a, sc, base) snprintf(nm, sizeof nm, "model.layers.%d." suffix, l), tiny_add(tm, nm, a, 0, 0, sc, base)
        W1("input_layernorm.weight", H, 0.1f, nb);
        W2("self_attn.q_proj.weight", 4 * D, H, 0.3f);
        W2("self_attn.k_proj.weight", 2 * D, H, 0.3f);
        W2("self_attn.v_proj.weight", 2 * D, H, 0.3f);
        W2("self_attn.o_proj.weight", H, 4 * D, 0.3f);
        W1("post_attention_layernorm.weight", H, 0.1f, nb);
        if (s->qk_norm) {
            W1("self_attn.q_norm.weight", D, 0.1f, nb);
            W1("self_attn.k_norm.weight", D, 0.1f, nb);
        }
        if (s->sandwich_norms) {
            W1("pre_feedforward_layernorm.weight", H, 0.1f, nb);
            W1("post_feedforward_layernorm.weight", H, 0.1f, nb);
        }
        if (s->n_experts) {
            W2("mlp.gate.weight", 4, H, 0.5f);
            for (int e = 0; e < 4; e++) {
                char en[64];
                snprintf(en, sizeof en, "mlp.experts.%d.gate_proj.weight", e);
                snprintf(nm, sizeof nm, "model.layers.%d.%s", l, en), tiny_add(tm, nm, 24, H, 0, 0.3f, 0);
                snprintf(en, sizeof en, "mlp.experts.%d.up_proj.weight", e);
                snprintf(nm, sizeof nm, "model.layers.%d.%s", l, en), tiny_add(tm, nm, 24, H, 0, 0.3f, 0);
                snprintf(en, sizeof en, "mlp.experts.%d.down_proj.weight", e);
                snprintf(nm, sizeof nm, "model.layers.%d.%s", l, en), tiny_add(tm, nm, H, 24, 0, 0.3f, 0);
            }
        } else {
            W2("mlp.gate_proj.weight", I, H, 0.3f);
            W2("mlp.up_proj.weight", I, H, 0.3f);
            W2("mlp.down_proj.weight", H, I, 0.3f);
        }
#undef W1
#undef W2
    }
}

static void tiny_free(tiny_model *tm) {
    for (int i = 0; i < tm->n; i++) {
        free(tm->w[i].t.data);
        free(tm->w[i].f);
    }
    free(tm->w);
}

/* ==== Naive reference: full recompute in double, no cache ==== */
static const float *tiny_f(const tiny_model *tm, const char *fmt, int l, int e) {
    char nm[96];
    if (e >= 0) snprintf(nm, sizeof nm, fmt, l, e);
    else snprintf(nm, sizeof nm, fmt, l);
    const tiny_w *w = tiny_find(tm, nm);
    return w ? w->f : NULL;
}

static void ref_norm(double *x, int n, const float *w, double eps, double off) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    const double inv = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) x[i] = x[i] * inv * (w[i] + off);
}

static void ref_mv(double *y, const float *W, const double *x, int N, int K) {
    for (int j = 0; j < N; j++) {
        double s = 0;
        for (int k = 0; k < K; k++) s += (double)W[(size_t)j * K + k] * x[k];
        y[j] = s;
    }
}

static double ref_act(double g, int act) {
    if (act == ACT_GELU_TANH) return 0.5 * g * (1 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
    return g / (1 + exp(-g));
}

static void ref_rope(double *v, int D, int pos, double theta) {
    for (int j = 0; j < D / 2; j++) {
        const double inv = 1.0 / pow(theta, 2.0 * j / D), a = pos * inv;
        const double x1 = v[j], x2 = v[j + D / 2];
        v[j] = x1 * cos(a) - x2 * sin(a);
        v[j + D / 2] = x2 * cos(a) + x1 * sin(a);
    }
}

/* Logits [V] at the last position of tokens[0..n). */
__attribute__((unused)) static void tiny_ref_logits(const tiny_model *tm, const int32_t *tokens, int n, double *logits) {
    const model_spec *s = &tm->spec;
    const int H = s->hidden_size, D = s->head_dim, Hq = s->n_heads, Hkv = s->n_kv_heads, V = s->vocab_size;
    const double eps = s->rms_norm_eps, off = s->norm_offset;
    double *x = calloc((size_t)n * H, 8), *K = calloc((size_t)n * Hkv * D, 8), *Vv = calloc((size_t)n * Hkv * D, 8);
    double *Q = calloc((size_t)n * Hq * D, 8), *h = calloc(H, 8), *att = calloc((size_t)Hq * D, 8);
    double *o = calloc(H, 8), *g = calloc(64, 8), *u = calloc(64, 8), *sc = calloc((size_t)n, 8);
    const float *emb = tiny_f(tm, "model.embed_tokens.weight", 0, -1);
    for (int t = 0; t < n; t++)
        for (int i = 0; i < H; i++) x[(size_t)t * H + i] = emb[(size_t)tokens[t] * H + i] * (double)s->embed_scale;
    for (int l = 0; l < s->n_layers; l++) {
        const bool sliding = s->sliding_window > 0 && s->layer_sliding[l];
        const double theta = sliding ? s->rope_local.theta : s->rope.theta;
        for (int t = 0; t < n; t++) {
            memcpy(h, x + (size_t)t * H, (size_t)H * 8);
            ref_norm(h, H, tiny_f(tm, "model.layers.%d.input_layernorm.weight", l, -1), eps, off);
            ref_mv(Q + (size_t)t * Hq * D, tiny_f(tm, "model.layers.%d.self_attn.q_proj.weight", l, -1), h, Hq * D, H);
            ref_mv(K + (size_t)t * Hkv * D, tiny_f(tm, "model.layers.%d.self_attn.k_proj.weight", l, -1), h, Hkv * D, H);
            ref_mv(Vv + (size_t)t * Hkv * D, tiny_f(tm, "model.layers.%d.self_attn.v_proj.weight", l, -1), h, Hkv * D, H);
            for (int hh = 0; hh < Hq; hh++) {
                double *q = Q + ((size_t)t * Hq + hh) * D;
                if (s->qk_norm) ref_norm(q, D, tiny_f(tm, "model.layers.%d.self_attn.q_norm.weight", l, -1), eps, off);
                ref_rope(q, D, t, theta);
            }
            for (int hh = 0; hh < Hkv; hh++) {
                double *k = K + ((size_t)t * Hkv + hh) * D;
                if (s->qk_norm) ref_norm(k, D, tiny_f(tm, "model.layers.%d.self_attn.k_norm.weight", l, -1), eps, off);
                ref_rope(k, D, t, theta);
            }
        }
        for (int t = 0; t < n; t++) {
            for (int hh = 0; hh < Hq; hh++) {
                const int kvh = hh / (Hq / Hkv);
                const int start = sliding && t - s->sliding_window + 1 > 0 ? t - s->sliding_window + 1 : 0;
                double m = -1e300, z = 0;
                for (int p = start; p <= t; p++) {
                    double d = 0;
                    for (int i = 0; i < D; i++) d += Q[((size_t)t * Hq + hh) * D + i] * K[((size_t)p * Hkv + kvh) * D + i];
                    sc[p] = d * s->attn_scale;
                    if (sc[p] > m) m = sc[p];
                }
                for (int p = start; p <= t; p++) z += sc[p] = exp(sc[p] - m);
                for (int i = 0; i < D; i++) {
                    double a = 0;
                    for (int p = start; p <= t; p++) a += sc[p] / z * Vv[((size_t)p * Hkv + kvh) * D + i];
                    att[hh * D + i] = a;
                }
            }
            ref_mv(o, tiny_f(tm, "model.layers.%d.self_attn.o_proj.weight", l, -1), att, H, Hq * D);
            if (s->sandwich_norms) ref_norm(o, H, tiny_f(tm, "model.layers.%d.post_attention_layernorm.weight", l, -1), eps, off);
            for (int i = 0; i < H; i++) x[(size_t)t * H + i] += o[i];
            memcpy(h, x + (size_t)t * H, (size_t)H * 8);
            ref_norm(h, H, tiny_f(tm, s->sandwich_norms ? "model.layers.%d.pre_feedforward_layernorm.weight"
                                                         : "model.layers.%d.post_attention_layernorm.weight", l, -1), eps, off);
            memset(o, 0, (size_t)H * 8);
            if (s->n_experts) {
                double lg[8], pr[8], z = 0, mx = -1e300;
                ref_mv(lg, tiny_f(tm, "model.layers.%d.mlp.gate.weight", l, -1), h, s->n_experts, H);
                for (int e = 0; e < s->n_experts; e++) mx = lg[e] > mx ? lg[e] : mx;
                for (int e = 0; e < s->n_experts; e++) z += pr[e] = exp(lg[e] - mx);
                int sel[2];
                double ws[2], wsum = 0;
                for (int j = 0; j < 2; j++) {
                    int b = -1;
                    for (int e = 0; e < s->n_experts; e++)
                        if ((j == 0 || e != sel[0]) && (b < 0 || pr[e] > pr[b])) b = e;
                    sel[j] = b;
                    wsum += ws[j] = pr[b] / z;
                }
                for (int j = 0; j < 2; j++) {
                    const int I = s->moe_intermediate_size, e = sel[j];
                    double y[64];
                    ref_mv(g, tiny_f(tm, "model.layers.%d.mlp.experts.%d.gate_proj.weight", l, e), h, I, H);
                    ref_mv(u, tiny_f(tm, "model.layers.%d.mlp.experts.%d.up_proj.weight", l, e), h, I, H);
                    for (int i = 0; i < I; i++) g[i] = ref_act(g[i], s->act) * u[i];
                    ref_mv(y, tiny_f(tm, "model.layers.%d.mlp.experts.%d.down_proj.weight", l, e), g, H, I);
                    for (int i = 0; i < H; i++) o[i] += y[i] * ws[j] / (s->norm_topk_prob ? wsum : 1.0);
                }
            } else {
                const int I = s->intermediate_size;
                ref_mv(g, tiny_f(tm, "model.layers.%d.mlp.gate_proj.weight", l, -1), h, I, H);
                ref_mv(u, tiny_f(tm, "model.layers.%d.mlp.up_proj.weight", l, -1), h, I, H);
                for (int i = 0; i < I; i++) g[i] = ref_act(g[i], s->act) * u[i];
                ref_mv(o, tiny_f(tm, "model.layers.%d.mlp.down_proj.weight", l, -1), g, H, I);
            }
            if (s->sandwich_norms) ref_norm(o, H, tiny_f(tm, "model.layers.%d.post_feedforward_layernorm.weight", l, -1), eps, off);
            for (int i = 0; i < H; i++) x[(size_t)t * H + i] += o[i];
        }
    }
    memcpy(h, x + (size_t)(n - 1) * H, (size_t)H * 8);
    ref_norm(h, H, tiny_f(tm, "model.norm.weight", 0, -1), eps, off);
    ref_mv(logits, tiny_f(tm, s->tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight", 0, -1), h, V, H);
    free(x); free(K); free(Vv); free(Q); free(h); free(att); free(o); free(g); free(u); free(sc);
}


/* Writes the tiny model's (bf16) tensors to a safetensors file, for tests that go through the
 * real loader. Returns st_write's status. */
static inline int tiny_write_safetensors(const tiny_model *tm, const char *path, mx_error *err) {
    st_write_tensor *wt = calloc((size_t)tm->n, sizeof *wt);
    for (int i = 0; i < tm->n; i++) {
        wt[i].name = tm->w[i].name;
        wt[i].dtype = MX_BF16;
        wt[i].ndim = tm->w[i].t.ndim;
        for (int d = 0; d < wt[i].ndim; d++) wt[i].shape[d] = tm->w[i].t.shape[d];
        wt[i].data = tm->w[i].t.data;
    }
    int rc = st_write(path, wt, tm->n, NULL, NULL, 0, err);
    free(wt);
    return rc;
}

#endif
