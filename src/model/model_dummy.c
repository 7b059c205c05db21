/* --load-format dummy: weights generated from the config alone (model.h). The source answers
 * the binder's requests by name with the shape the config implies, present exactly when the
 * config says the checkpoint would have the tensor (biases, q/k norms, sandwich norms, an
 * untied lm_head), so the bound model runs the same ops as one loaded from files. */
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "model/model_internal.h"
#include "model/model_spec.h"

typedef struct dummy_src {
    model_spec spec;
    uint16_t *rnd;  /* [cap] bf16, uniform in [-0.02, 0.02) */
    uint16_t *ones; /* [ones_cap] bf16 1.0 (norm weights, as transformers initialises them) */
    size_t cap, ones_cap;
} dummy_src;

static void dummy_release(void *p) {
    dummy_src *d = p;
    if (!d) return;
    free(d->rnd);
    free(d->ones);
    free(d);
}

static mx_tensor dummy_view(uint16_t *data, int64_t d0, int64_t d1) {
    mx_tensor t = {0};
    t.data = data;
    t.dtype = MX_BF16;
    t.ndim = d1 ? 2 : 1;
    t.shape[0] = d0;
    t.shape[1] = d1;
    t.stride[0] = d1 ? d1 : 1;
    t.stride[1] = 1;
    t.device = MX_DEV_CPU;
    return t;
}

static bool is(const char *rel, const char *name) { return !strcmp(rel, name); }

static mx_tensor dummy_weight(void *ctx, const char *name) {
    dummy_src *d = ctx;
    const model_spec *s = &d->spec;
    const int64_t H = s->hidden_size, D = s->head_dim, V = s->vocab_size, I = s->intermediate_size;
    const int64_t QD = (int64_t)s->n_heads * D, KD = (int64_t)s->n_kv_heads * D;
    const mx_tensor none = {0};
    /* the decoder prefix is whatever the binder tries first ("model."); lm_head has none */
    const char *rel = strncmp(name, "model.", 6) ? name : name + 6;
    if (is(rel, "embed_tokens.weight")) return dummy_view(d->rnd, V, H);
    if (is(rel, "norm.weight")) return dummy_view(d->ones, H, 0);
    if (is(name, "lm_head.weight")) return s->tie_word_embeddings ? none : dummy_view(d->rnd, V, H);
    if (strncmp(rel, "layers.", 7)) return none;
    const char *p = strchr(rel + 7, '.');
    if (!p) return none;
    const char *l = p + 1; /* the name inside layer N */
    if (is(l, "input_layernorm.weight") || is(l, "post_attention_layernorm.weight"))
        return dummy_view(d->ones, H, 0);
    if (is(l, "pre_feedforward_layernorm.weight") || is(l, "post_feedforward_layernorm.weight"))
        return s->sandwich_norms ? dummy_view(d->ones, H, 0) : none;
    if (is(l, "self_attn.q_proj.weight")) return dummy_view(d->rnd, QD, H);
    if (is(l, "self_attn.k_proj.weight") || is(l, "self_attn.v_proj.weight"))
        return dummy_view(d->rnd, KD, H);
    if (is(l, "self_attn.o_proj.weight")) return dummy_view(d->rnd, H, QD);
    if (is(l, "self_attn.q_proj.bias")) return s->qkv_bias ? dummy_view(d->rnd, QD, 0) : none;
    if (is(l, "self_attn.k_proj.bias") || is(l, "self_attn.v_proj.bias"))
        return s->qkv_bias ? dummy_view(d->rnd, KD, 0) : none;
    if (is(l, "self_attn.o_proj.bias")) return s->o_bias ? dummy_view(d->rnd, H, 0) : none;
    if (is(l, "self_attn.q_norm.weight") || is(l, "self_attn.k_norm.weight"))
        return s->qk_norm ? dummy_view(d->ones, D, 0) : none;
    if (is(l, "mlp.gate_proj.weight") || is(l, "mlp.up_proj.weight")) return dummy_view(d->rnd, I, H);
    if (is(l, "mlp.down_proj.weight")) return dummy_view(d->rnd, H, I);
    return none;
}

/* bf16 of a uniform value in [-0.02, 0.02) from a xorshift stream (fixed seed: every run and
 * every rank sees the same weights). */
static void dummy_fill(uint16_t *p, size_t n) {
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = mx_f32_to_bf16(((float)(x >> 40) / (float)(1 << 24) * 2.0f - 1.0f) * 0.02f);
    }
}

int model_load_dummy_tp(model **out, const char *dir, const backend_ops *be, int tp_size,
                        mx_error *err) {
    dummy_src *d = calloc(1, sizeof *d);
    if (!d) return mx_fail(err, "out of memory");
    if (spec_load(&d->spec, dir, err)) {
        free(d);
        return -1;
    }
    const model_spec *s = &d->spec;
    if (s->n_experts > 0 || s->quant.bits) {
        if (s->n_experts > 0)
            mx_fail(err, "%s: --load-format dummy: MoE models (%d experts) are not supported yet",
                    dir, s->n_experts);
        else
            mx_fail(err, "%s: --load-format dummy makes bf16 weights; the config asks for MLX "
                    "quantization (remove its \"quantization\" block)", dir);
        free(d);
        return -1;
    }
    const size_t H = (size_t)s->hidden_size, D = (size_t)s->head_dim;
    const size_t sizes[] = {(size_t)s->vocab_size * H, (size_t)s->intermediate_size * H,
                            (size_t)s->n_heads * D * H, (size_t)s->n_kv_heads * D * H};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i] > d->cap) d->cap = sizes[i];
    d->ones_cap = H > D ? H : D;
    d->rnd = malloc(d->cap * 2);
    d->ones = malloc(d->ones_cap * 2);
    if (!d->rnd || !d->ones) {
        mx_fail(err, "--load-format dummy: out of host memory for %.2f GB of weights",
                d->cap * 2 / 1e9);
        dummy_release(d);
        return -1;
    }
    dummy_fill(d->rnd, d->cap);
    for (size_t i = 0; i < d->ones_cap; i++) d->ones[i] = mx_f32_to_bf16(1.0f);
    model *m = NULL;
    if (model_bind_tp(&m, s, dummy_weight, d, be, tp_size, err)) {
        mx_wrap(err, "%s (--load-format dummy)", dir);
        dummy_release(d);
        return -1;
    }
    m->ck = d;
    m->ck_free = dummy_release;
    *out = m;
    return 0;
}

int model_load_format_parse(const char *s, bool *dummy) {
    if (!strcmp(s, "auto") || !strcmp(s, "safetensors")) *dummy = false;
    else if (!strcmp(s, "dummy")) *dummy = true;
    else return -1;
    return 0;
}
