/* DeepSeek V3 pieces against naive transcriptions of transformers, on random weights:
 * - the absorbed MLA forward (model_mla.c: one latent KV head, W_UK folded into the query,
 *   W_UV applied to the weighted latent) against the non-absorbed form (per-head k_nope / v
 *   from kv_b_proj, interleaved RoPE applied as transformers does), in double precision, with
 *   and without q LoRA, yarn and default rope; prefill logits and a decode step through the
 *   cache; and the softmax scale against its formula; also from mlx_lm's split of kv_b_proj
 *   (embed_q / unembed_out);
 * - grouped sigmoid routing (backend/moe_route.c) against a naive loop (sort-based top-k,
 *   masked_fill(0.0) of the dropped groups), over many random rows and shapes;
 * - released DeepSeek-V3 / Kimi K2 configs parse; `mlxcel convert -q` refuses MLA. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/moe_route.h"
#include "kv/kv_cache.h"
#include "model/model.h"

/* ==== Random f32 weights ==== */
typedef struct wt {
    char name[96];
    float *f;
    int64_t d0, d1, d2;
} wt;

typedef struct wset {
    wt w[64];
    int n;
    uint64_t rng;
} wset;

static float rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static void add(wset *ws, const char *name, int64_t d0, int64_t d1, float scale, float base) {
    assert_true(ws->n < (int)(sizeof ws->w / sizeof ws->w[0]));
    wt *w = &ws->w[ws->n++];
    snprintf(w->name, sizeof w->name, "%s", name);
    w->d0 = d0, w->d1 = d1, w->d2 = 0;
    const int64_t n = d0 * (d1 ? d1 : 1);
    w->f = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) w->f[i] = base + scale * rnd(&ws->rng);
}

static const float *get(const wset *ws, const char *fmt, int l) {
    char nm[96];
    snprintf(nm, sizeof nm, fmt, l);
    for (int i = 0; i < ws->n; i++)
        if (!strcmp(ws->w[i].name, nm)) return ws->w[i].f;
    fail_msg("no weight %s", nm);
    return NULL;
}

static mx_tensor lookup(void *ctx, const char *name) {
    const wset *ws = ctx;
    mx_tensor r = {0};
    for (int i = 0; i < ws->n; i++)
        if (!strcmp(ws->w[i].name, name))
            return ws->w[i].d2 ? mx_tensor_3d(ws->w[i].f, MX_F32, ws->w[i].d0, ws->w[i].d1, ws->w[i].d2, MX_DEV_CPU)
                 : ws->w[i].d1 ? mx_tensor_2d(ws->w[i].f, MX_F32, ws->w[i].d0, ws->w[i].d1, MX_DEV_CPU)
                               : mx_tensor_1d(ws->w[i].f, MX_F32, ws->w[i].d0, MX_DEV_CPU);
    return r;
}

/* ==== Naive reference (double) ==== */
static void norm(double *x, int n, const float *w, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    const double inv = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) x[i] = x[i] * inv * w[i];
}

static void mv(double *y, const float *W, const double *x, int N, int K) {
    for (int r = 0; r < N; r++) {
        double a = 0;
        for (int c = 0; c < K; c++) a += (double)W[(size_t)r * K + c] * x[c];
        y[r] = a;
    }
}

/* transformers' apply_rotary_pos_emb_interleave (or the plain one): v[R] in place */
static void rope_ref(double *v, int R, const float *cs, bool interleave) {
    double t[256];
    for (int i = 0; i < R; i++) t[i] = interleave ? (i < R / 2 ? v[2 * i] : v[2 * (i - R / 2) + 1]) : v[i];
    for (int j = 0; j < R / 2; j++) {
        const double c = cs[2 * j], s = cs[2 * j + 1], a = t[j], b = t[j + R / 2];
        v[j] = a * c - b * s;
        v[j + R / 2] = b * c + a * s;
    }
}

enum { MAXT = 16 };

/* Logits [V] at the last of tokens[0..n), the non-absorbed way. */
static void ref_logits(const model_spec *s, const wset *ws, const int32_t *tok, int n, double *out,
                       bool split) {
    const int H = s->hidden_size, Hq = s->n_heads, R = s->qk_rope_head_dim, N = s->qk_nope_head_dim,
              Vd = s->v_head_dim, Lq = s->q_lora_rank, Lkv = s->kv_lora_rank, C = N + R,
              I = s->intermediate_size;
    double (*x)[64] = calloc(MAXT, sizeof *x), h[64], qa[64], q[512], ckv[64], kvb[1024];
    double (*kn)[512] = calloc(MAXT, sizeof *kn), (*vv)[512] = calloc(MAXT, sizeof *vv);
    double (*kpe)[16] = calloc(MAXT, sizeof *kpe), (*qq)[512] = calloc(MAXT, sizeof *qq);
    double att[512], o[64], g[256], u[256];
    float inv[64], af, cs[MAXT][64];
    rope_inv_freq(s, &s->rope, 0, inv, &af);
    for (int t = 0; t < n; t++) rope_cos_sin(inv, R, t, af, cs[t]);
    const float *emb = get(ws, "model.embed_tokens.weight", -1);
    for (int t = 0; t < n; t++)
        for (int i = 0; i < H; i++) x[t][i] = emb[(size_t)tok[t] * H + i];
    for (int l = 0; l < s->n_layers; l++) {
        for (int t = 0; t < n; t++) {
            memcpy(h, x[t], sizeof(double) * H);
            norm(h, H, get(ws, "model.layers.%d.input_layernorm.weight", l), s->rms_norm_eps);
            if (Lq) {
                mv(qa, get(ws, "model.layers.%d.self_attn.q_a_proj.weight", l), h, Lq, H);
                norm(qa, Lq, get(ws, "model.layers.%d.self_attn.q_a_layernorm.weight", l), 1e-6);
                mv(q, get(ws, "model.layers.%d.self_attn.q_b_proj.weight", l), qa, Hq * C, Lq);
            } else {
                mv(q, get(ws, "model.layers.%d.self_attn.q_proj.weight", l), h, Hq * C, H);
            }
            for (int hd = 0; hd < Hq; hd++) rope_ref(q + hd * C + N, R, cs[t], s->rope_interleave);
            memcpy(qq[t], q, sizeof(double) * Hq * C);
            mv(ckv, get(ws, "model.layers.%d.self_attn.kv_a_proj_with_mqa.weight", l), h, Lkv + R, H);
            memcpy(kpe[t], ckv + Lkv, sizeof(double) * R);
            rope_ref(kpe[t], R, cs[t], s->rope_interleave);
            norm(ckv, Lkv, get(ws, "model.layers.%d.self_attn.kv_a_layernorm.weight", l), 1e-6);
            mv(kvb, get(ws, split ? "ref.layers.%d.kv_b_proj" : "model.layers.%d.self_attn.kv_b_proj.weight", l),
               ckv, Hq * (N + Vd), Lkv);
            for (int hd = 0; hd < Hq; hd++) {
                memcpy(kn[t] + hd * N, kvb + hd * (N + Vd), sizeof(double) * N);
                memcpy(vv[t] + hd * Vd, kvb + hd * (N + Vd) + N, sizeof(double) * Vd);
            }
        }
        for (int t = 0; t < n; t++) { /* causal attention, then o_proj and the MLP */
            for (int hd = 0; hd < Hq; hd++) {
                double sc[MAXT], mx = -1e300, sum = 0;
                for (int j = 0; j <= t; j++) {
                    double d = 0;
                    for (int i = 0; i < N; i++) d += qq[t][hd * C + i] * kn[j][hd * N + i];
                    for (int i = 0; i < R; i++) d += qq[t][hd * C + N + i] * kpe[j][i];
                    sc[j] = d * s->attn_scale;
                    mx = sc[j] > mx ? sc[j] : mx;
                }
                for (int j = 0; j <= t; j++) sum += sc[j] = exp(sc[j] - mx);
                for (int i = 0; i < Vd; i++) {
                    double a = 0;
                    for (int j = 0; j <= t; j++) a += sc[j] / sum * vv[j][hd * Vd + i];
                    att[hd * Vd + i] = a;
                }
            }
            mv(o, get(ws, "model.layers.%d.self_attn.o_proj.weight", l), att, H, Hq * Vd);
            for (int i = 0; i < H; i++) x[t][i] += o[i];
            memcpy(h, x[t], sizeof(double) * H);
            norm(h, H, get(ws, "model.layers.%d.post_attention_layernorm.weight", l), s->rms_norm_eps);
            mv(g, get(ws, "model.layers.%d.mlp.gate_proj.weight", l), h, I, H);
            mv(u, get(ws, "model.layers.%d.mlp.up_proj.weight", l), h, I, H);
            for (int i = 0; i < I; i++) g[i] = g[i] / (1 + exp(-g[i])) * u[i];
            mv(o, get(ws, "model.layers.%d.mlp.down_proj.weight", l), g, H, I);
            for (int i = 0; i < H; i++) x[t][i] += o[i];
        }
    }
    memcpy(h, x[n - 1], sizeof(double) * H);
    norm(h, H, get(ws, "model.norm.weight", -1), s->rms_norm_eps);
    mv(out, get(ws, "lm_head.weight", -1), h, s->vocab_size, H);
    free(x), free(kn), free(vv), free(kpe), free(qq);
}

/* ==== Absorbed vs naive ==== */
/* mlx_lm's layout: kv_b_proj of layer l split into embed_q [Hq, Lkv, N] and unembed_out
 * [Hq, V, Lkv]; the reference keeps reading kv_b_proj under a name the model does not ask for. */
static void split_kvb(wset *ws, const model_spec *s, int l) {
    const int Hq = s->n_heads, N = s->qk_nope_head_dim, Vd = s->v_head_dim, Lkv = s->kv_lora_rank;
    char nm[96];
    snprintf(nm, sizeof nm, "model.layers.%d.self_attn.kv_b_proj.weight", l);
    wt *kvb = NULL;
    for (int i = 0; i < ws->n; i++)
        if (!strcmp(ws->w[i].name, nm)) kvb = &ws->w[i];
    assert_non_null(kvb);
    snprintf(nm, sizeof nm, "model.layers.%d.self_attn.embed_q.weight", l);
    add(ws, nm, Hq, Lkv, 0, 0);
    wt *eq = &ws->w[ws->n - 1];
    eq->d2 = N;
    eq->f = realloc(eq->f, (size_t)Hq * Lkv * N * sizeof(float));
    snprintf(nm, sizeof nm, "model.layers.%d.self_attn.unembed_out.weight", l);
    add(ws, nm, Hq, Vd, 0, 0);
    wt *uo = &ws->w[ws->n - 1];
    uo->d2 = Lkv;
    uo->f = realloc(uo->f, (size_t)Hq * Vd * Lkv * sizeof(float));
    for (int h = 0; h < Hq; h++)
        for (int i = 0; i < Lkv; i++) {
            for (int c = 0; c < N; c++)
                eq->f[((size_t)h * Lkv + i) * N + c] = kvb->f[((size_t)h * (N + Vd) + c) * Lkv + i];
            for (int v = 0; v < Vd; v++)
                uo->f[((size_t)h * Vd + v) * Lkv + i] = kvb->f[((size_t)h * (N + Vd) + N + v) * Lkv + i];
        }
    snprintf(kvb->name, sizeof kvb->name, "ref.layers.%d.kv_b_proj", l);
}

static void check_config(const char *cfg, const char *what, bool split) {
    model_spec s;
    mx_error err;
    if (spec_parse(&s, cfg, NULL, what, &err)) fail_msg("%s: %s", what, err.msg);
    assert_int_equal(s.n_kv_heads, 1);
    assert_int_equal(s.head_dim, s.kv_lora_rank + s.qk_rope_head_dim);
    double want = 1.0 / sqrt((double)(s.qk_nope_head_dim + s.qk_rope_head_dim));
    if (s.rope.type == ROPE_YARN) {
        const double m = 0.1 * s.rope.mscale_all_dim * log(s.rope.factor) + 1.0;
        want *= m * m;
    }
    assert_true(fabs(s.attn_scale - want) < 1e-6 * want);

    const int H = s.hidden_size, Hq = s.n_heads, R = s.qk_rope_head_dim, N = s.qk_nope_head_dim,
              Vd = s.v_head_dim, Lq = s.q_lora_rank, Lkv = s.kv_lora_rank, I = s.intermediate_size,
              V = s.vocab_size;
    wset *ws = calloc(1, sizeof *ws);
    ws->rng = 12345;
    add(ws, "model.embed_tokens.weight", V, H, 1.0f, 0);
    add(ws, "model.norm.weight", H, 0, 0.2f, 1.0f);
    add(ws, "lm_head.weight", V, H, 0.2f, 0);
    for (int l = 0; l < s.n_layers; l++) {
        char nm[96];
#define ADD(suffix, d0, d1, sc, b) (snprintf(nm, sizeof nm, "model.layers.%d." suffix, l), add(ws, nm, d0, d1, sc, b))
        ADD("input_layernorm.weight", H, 0, 0.2f, 1.0f);
        ADD("post_attention_layernorm.weight", H, 0, 0.2f, 1.0f);
        if (Lq) {
            ADD("self_attn.q_a_proj.weight", Lq, H, 0.3f, 0);
            ADD("self_attn.q_a_layernorm.weight", Lq, 0, 0.2f, 1.0f);
            ADD("self_attn.q_b_proj.weight", Hq * (N + R), Lq, 0.3f, 0);
        } else {
            ADD("self_attn.q_proj.weight", Hq * (N + R), H, 0.3f, 0);
        }
        ADD("self_attn.kv_a_proj_with_mqa.weight", Lkv + R, H, 0.3f, 0);
        ADD("self_attn.kv_a_layernorm.weight", Lkv, 0, 0.2f, 1.0f);
        ADD("self_attn.kv_b_proj.weight", Hq * (N + Vd), Lkv, 0.3f, 0);
        ADD("self_attn.o_proj.weight", H, Hq * Vd, 0.2f, 0);
        ADD("mlp.gate_proj.weight", I, H, 0.2f, 0);
        ADD("mlp.up_proj.weight", I, H, 0.2f, 0);
        ADD("mlp.down_proj.weight", H, I, 0.2f, 0);
#undef ADD
    }
    for (int l = 0; split && l < s.n_layers; l++) split_kvb(ws, &s, l);
    model *m = NULL;
    if (model_bind(&m, &s, lookup, ws, backend_cpu(), &err)) fail_msg("%s: %s", what, err.msg);
    kv_cache *kv = NULL;
    kv_cache_params kp = {.storage = KV_STORAGE_DENSE, .n_layers = s.n_layers, .n_kv_heads = 1,
                          .head_dim = s.head_dim, .ctx_size = 32, .n_seqs = 1};
    assert_int_equal(kv_cache_new(&kv, &kp, backend_cpu(), &err), 0);
    enum { T = 9 };
    int32_t tok[T], pos[T], sid[T], table[1] = {0};
    int64_t wr[T];
    for (int i = 0; i < T; i++) tok[i] = (i * 7 + 3) % V, pos[i] = i, sid[i] = 0, wr[i] = i;
    double ref[512], rel[2];
    float lg[512];
    /* prefill of T - 1 tokens, then one decode row reading the cache */
    for (int step = 0; step < 2; step++) {
        const int r0 = step ? T - 1 : 0, n = step ? 1 : T - 1, last = n - 1;
        model_batch b = {.n_rows = n, .tokens = tok + r0, .pos = pos + r0, .seq = sid,
                         .block_table = table, .table_stride = 1, .n_seqs = 1,
                         .write_rows = wr + r0, .n_out = 1, .out_rows = &last};
        assert_int_equal(model_forward(m, kv, &b, lg, &err), 0);
        ref_logits(&s, ws, tok, r0 + n, ref, split);
        double num = 0, den = 0;
        for (int v = 0; v < V; v++) num += (lg[v] - ref[v]) * (lg[v] - ref[v]), den += ref[v] * ref[v];
        rel[step] = sqrt(num / den);
    }
    fprintf(stderr, "mla %-24s prefill rel err %.3g, decode rel err %.3g\n", what, rel[0], rel[1]);
    assert_true(rel[0] < 1e-5 && rel[1] < 1e-5);
    kv_cache_free(kv);
    model_free(m);
    for (int i = 0; i < ws->n; i++) free(ws->w[i].f);
    free(ws);
}

static const char *k_cfg_qlora =
    "{\"model_type\": \"deepseek_v3\", \"vocab_size\": 96, \"hidden_size\": 48, "
    "\"intermediate_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 3, "
    "\"num_key_value_heads\": 3, \"q_lora_rank\": 24, \"kv_lora_rank\": 20, "
    "\"qk_nope_head_dim\": 12, \"qk_rope_head_dim\": 8, \"v_head_dim\": 10, "
    "\"first_k_dense_replace\": 2, \"n_routed_experts\": 4, \"n_group\": 2, \"topk_group\": 1, "
    "\"num_experts_per_tok\": 2, \"max_position_embeddings\": 128, \"rope_interleave\": true, "
    "\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4.0, \"beta_fast\": 32, \"beta_slow\": 1, "
    "\"mscale\": 1.0, \"mscale_all_dim\": 0.8, \"original_max_position_embeddings\": 32}}";

static const char *k_cfg_plain =
    "{\"model_type\": \"kimi_k2\", \"vocab_size\": 80, \"hidden_size\": 32, "
    "\"intermediate_size\": 40, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
    "\"num_key_value_heads\": 4, \"q_lora_rank\": null, \"kv_lora_rank\": 16, "
    "\"qk_nope_head_dim\": 8, \"qk_rope_head_dim\": 4, \"v_head_dim\": 6, "
    "\"first_k_dense_replace\": 2, \"n_routed_experts\": 4, \"n_group\": 1, \"topk_group\": 1, "
    "\"num_experts_per_tok\": 2, \"rope_interleave\": false, \"rope_theta\": 50000.0}";

static void test_mla_absorbed_matches_naive(void **st) {
    (void)st;
    check_config(k_cfg_qlora, "q lora + yarn interleave", false);
    check_config(k_cfg_plain, "q_proj + default rope", false);
    check_config(k_cfg_qlora, "mlx_lm embed_q/unembed_out", true);
}

/* ==== Released configs ==== */
/* DeepSeek-V3's config.json (transformers 4.x spelling) with its fp8 quantization_config, and
 * Kimi K2's: parsed with the latent cache geometry; fp8 is refused by name. */
#define DSV3_BODY                                                                                   \
    "\"architectures\": [\"DeepseekV3ForCausalLM\"], \"attention_bias\": false, "                 \
    "\"bos_token_id\": 0, \"eos_token_id\": 1, \"ep_size\": 1, \"first_k_dense_replace\": 3, "      \
    "\"hidden_act\": \"silu\", \"hidden_size\": 7168, \"intermediate_size\": 18432, "               \
    "\"kv_lora_rank\": 512, \"max_position_embeddings\": 163840, \"model_type\": \"deepseek_v3\", " \
    "\"moe_intermediate_size\": 2048, \"moe_layer_freq\": 1, \"n_group\": 8, "                      \
    "\"n_routed_experts\": 256, \"n_shared_experts\": 1, \"norm_topk_prob\": true, "               \
    "\"num_attention_heads\": 128, \"num_experts_per_tok\": 8, \"num_hidden_layers\": 61, "         \
    "\"num_key_value_heads\": 128, \"num_nextn_predict_layers\": 1, \"q_lora_rank\": 1536, "         \
    "\"qk_nope_head_dim\": 128, \"qk_rope_head_dim\": 64, \"rms_norm_eps\": 1e-06, "               \
    "\"rope_scaling\": {\"beta_fast\": 32, \"beta_slow\": 1, \"factor\": 40, \"mscale\": 1.0, "     \
    "\"mscale_all_dim\": 1.0, \"original_max_position_embeddings\": 4096, \"type\": \"yarn\"}, "     \
    "\"rope_theta\": 10000, \"routed_scaling_factor\": 2.5, \"scoring_func\": \"sigmoid\", "        \
    "\"tie_word_embeddings\": false, \"topk_group\": 4, \"topk_method\": \"noaux_tc\", "           \
    "\"torch_dtype\": \"bfloat16\", \"v_head_dim\": 128, \"vocab_size\": 129280"

static void test_released_configs(void **st) {
    (void)st;
    model_spec s;
    mx_error err;
    assert_int_equal(spec_parse(&s, "{" DSV3_BODY "}", NULL, "dsv3", &err), 0);
    assert_int_equal(s.family, FAM_DEEPSEEK_V3);
    assert_int_equal(s.n_kv_heads, 1);
    assert_int_equal(s.head_dim, 576);
    assert_int_equal(rope_rot_dim(&s), 64);
    assert_true(s.rope_interleave); /* the class default: the key is absent */
    assert_int_equal(s.q_lora_rank, 1536);
    assert_int_equal(s.n_experts, 256);
    assert_int_equal(s.layer_dense_mlp[2], 1);
    assert_int_equal(s.layer_dense_mlp[3], 0);
    const double m = 0.1 * log(40.0) + 1.0;
    assert_true(fabs(s.attn_scale - m * m / sqrt(192.0)) < 1e-6);
    /* the official checkpoint's fp8 quantization_config is refused by name */
    const char *fp8 = "{" DSV3_BODY ", \"quantization_config\": {\"activation_scheme\": \"dynamic\", "
                      "\"fmt\": \"e4m3\", \"quant_method\": \"fp8\", \"weight_block_size\": [128, 128]}}";
    assert_int_equal(spec_parse(&s, fp8, NULL, "dsv3", &err), -1);
    assert_non_null(strstr(err.msg, "fp8"));
    const char *kimi =
        "{\"model_type\": \"kimi_k2\", \"vocab_size\": 163840, \"hidden_size\": 7168, "
        "\"intermediate_size\": 18432, \"num_hidden_layers\": 61, \"num_attention_heads\": 64, "
        "\"num_key_value_heads\": 64, \"kv_lora_rank\": 512, \"q_lora_rank\": 1536, "
        "\"qk_nope_head_dim\": 128, \"qk_rope_head_dim\": 64, \"v_head_dim\": 128, "
        "\"n_routed_experts\": 384, \"num_experts_per_tok\": 8, \"n_group\": 1, \"topk_group\": 1, "
        "\"first_k_dense_replace\": 1, \"routed_scaling_factor\": 2.827, \"bos_token_id\": 163584, "
        "\"eos_token_id\": 163585, \"max_position_embeddings\": 131072, \"rope_theta\": 50000.0, "
        "\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 32.0, \"beta_fast\": 1.0, "
        "\"beta_slow\": 1.0, \"mscale\": 1.0, \"mscale_all_dim\": 1.0, "
        "\"original_max_position_embeddings\": 4096}}";
    assert_int_equal(spec_parse(&s, kimi, NULL, "kimi", &err), 0);
    assert_int_equal(s.family, FAM_DEEPSEEK_V3);
    assert_int_equal(s.head_dim, 576);
    assert_int_equal(s.n_experts, 384);
    assert_true(fabs(s.routed_scaling_factor - 2.827f) < 1e-6);
    /* what MLA does not support is refused, by the family's name */
    char bad[4096];
    snprintf(bad, sizeof bad, "{%s}", DSV3_BODY);
    memcpy(strstr(bad, "sigmoid"), "softmax", 7); /* deepseek_v2's scoring */
    assert_int_equal(spec_parse(&s, bad, NULL, "dsv3", &err), -1);
    assert_non_null(strstr(err.msg, "scoring_func"));
}

/* ==== Grouped routing vs a naive loop ==== */
/* Indices of the k largest of v[n] (stable: ties to the lower index), by selection sort. */
static void naive_topk(const double *v, int n, int k, int *idx) {
    int order[4096];
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 0; i < k; i++)
        for (int j = i + 1; j < n; j++)
            if (v[order[j]] > v[order[i]] || (v[order[j]] == v[order[i]] && order[j] < order[i])) {
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
    for (int i = 0; i < k; i++) idx[i] = order[i];
}

static void test_grouped_routing(void **st) {
    (void)st;
    static const int k_shapes[][4] = {/* E, n_group, topk_group, k */
                                      {8, 4, 2, 2}, {16, 4, 2, 4}, {256, 8, 4, 8}, {12, 1, 1, 3},
                                      {384, 1, 1, 8}, {64, 8, 3, 6}, {6, 3, 3, 6}};
    uint64_t rng = 99;
    int checked = 0;
    for (size_t sh = 0; sh < sizeof k_shapes / sizeof k_shapes[0]; sh++) {
        const int E = k_shapes[sh][0], G = k_shapes[sh][1], TG = k_shapes[sh][2], K = k_shapes[sh][3];
        const int per = E / G;
        for (int row = 0; row < 200; row++) {
            float lg[512], bias[512], w[16], scratch[4 * 512];
            int idx[16];
            const bool norm = row % 2 == 0;
            const float scale = row % 3 ? 2.5f : 1.0f;
            for (int e = 0; e < E; e++) lg[e] = 4 * rnd(&rng), bias[e] = row % 5 ? 0.5f * rnd(&rng) : 0.0f;
            mx_route_grouped_sigmoid(lg, bias, E, G, TG, K, norm, scale, idx, w, scratch);
            /* naive, as DeepseekV3TopkRouter */
            double sc[512], ch[512], gs[512];
            for (int e = 0; e < E; e++) sc[e] = 1.0 / (1.0 + exp(-(double)lg[e])), ch[e] = sc[e] + bias[e];
            for (int g = 0; g < G; g++) {
                int t2[2];
                naive_topk(ch + g * per, per, 2, t2);
                gs[g] = ch[g * per + t2[0]] + ch[g * per + t2[1]];
            }
            int gk[64], ek[16];
            naive_topk(gs, G, TG, gk);
            double masked[512];
            for (int e = 0; e < E; e++) {
                bool kept = false;
                for (int j = 0; j < TG; j++) kept |= gk[j] == e / per;
                masked[e] = kept ? ch[e] : 0.0;
            }
            naive_topk(masked, E, K, ek);
            double sum = 0;
            for (int j = 0; j < K; j++) sum += sc[ek[j]];
            for (int j = 0; j < K; j++) {
                int at = -1;
                for (int t = 0; t < K; t++)
                    if (idx[t] == ek[j]) at = t;
                if (at < 0) fail_msg("E %d groups %d/%d k %d row %d: expert %d not chosen", E, G, TG, K, row, ek[j]);
                const double want = sc[ek[j]] / (norm ? sum + 1e-20 : 1.0) * scale;
                assert_true(fabs(w[at] - want) <= 1e-5 * fabs(want) + 1e-7);
            }
            checked++;
        }
    }
    fprintf(stderr, "grouped routing: %d rows agree with the naive router\n", checked);
}

/* ==== convert -q refuses MLA (the tiny fixture), by the family's name ==== */
static void test_convert_refuses(void **st) {
    (void)st;
    const char *bin = getenv("MLXCEL_BIN"), *src = getenv("MLXCEL_SOURCE_DIR");
    if (!bin || !src) /* CTest sets both (tests/CMakeLists.txt): unset is a broken harness */
        fail_msg("MLXCEL_BIN / MLXCEL_SOURCE_DIR unset: run through ctest");
    char cmd[3000], out[1024] = "";
    snprintf(cmd, sizeof cmd, "'%s' convert --hf-path '%s/tests/fixtures/models/deepseek_v3' "
             "--mlx-path /tmp/mlxcel-test-mla-never-written -q 2>&1", bin, src);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    const size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    assert_int_not_equal(pclose(p), 0);
    assert_non_null(strstr(out, "quantizing deepseek_v3 (multi-head latent attention) is not supported"));
    assert_int_not_equal(access("/tmp/mlxcel-test-mla-never-written", F_OK), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grouped_routing),
        cmocka_unit_test(test_released_configs),
        cmocka_unit_test(test_mla_absorbed_matches_naive),
        cmocka_unit_test(test_convert_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
