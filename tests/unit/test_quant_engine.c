/* MLX-quantized checkpoints in the CPU engine (docs/quantization.md, "The engine"):
 * - every tiny fixture under tests/fixtures/ckpt (and the golden models under
 *   tests/fixtures/models when present) converted with `mlxcel convert -q` at several bit
 *   widths and group sizes, and that output converted back with `-d` (bf16): greedy tokens and
 *   the raw logits of every generated position are bitwise identical (memcmp) between the
 *   quantized model and the dequantized dense one, several prompts batched;
 * - the same on random checkpoints large enough for groups of 64 and 128 (qwen2 with q/k/v
 *   biases and tied quantized embeddings; qwen3_moe with per-expert tensors that convert
 *   stacks into switch_mlp and an 8-bit router), every weight quantized;
 * - a hand-written quantized checkpoint with per-module overrides: `false` (kept bf16), other
 *   bit widths and group sizes, a quantized embedding and a 2-bit lm_head;
 * - batch invariance on quantized models: a prompt alone = batched with 17 others arriving at
 *   different steps, prefill chunks 1, 7, 64 (memcmp of its logits);
 * - `mlxcel inspect --json` on the quantized checkpoint: the parameters of the dense twin,
 *   the bytes the engine bound, the bits;
 * - llama4 (mlx_lm's llama4 sanitize): the golden fixtures' fused [in, out] experts split and
 *   transposed, float outputs equal to the source in the engine, quantized ones to their
 *   dequantized twins, the llama4 wrapper (4.x and 5.x names, vision tower dropped).
 * The non-vacuity checks: weights really are quantized (counted by the loader), and the
 * quantized model's logits differ from the original bf16 model's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "quant_engine_util.h"

static const char *src_dir(void) {
    const char *s = getenv("MLXCEL_SOURCE_DIR");
    if (!s) fail_msg("MLXCEL_SOURCE_DIR is not set (run through ctest)");
    return s;
}

static model *load(const char *dir) {
    model *m = NULL;
    mx_error err;
    if (model_load(&m, dir, backend_cpu(), &err)) fail_msg("%s", err.msg);
    return m;
}

/* ==== inspect ==== */
static void check_inspect(const char *qdir, const model *q, const model *d, int bits, int gs) {
    char out[400];
    snprintf(out, sizeof out, "%s/inspect.json", g_tmp);
    qe_sh("'%s' inspect -m '%s' --json > '%s'", qe_bin(), qdir, out);
    json_error_t je;
    json_t *j = json_load_file(out, 0, &je);
    if (!j) fail_msg("inspect --json: %s", je.text);
    const json_int_t params = json_integer_value(json_object_get(j, "params"));
    const json_int_t bytes = json_integer_value(json_object_get(j, "weights_bytes"));
    assert_int_equal(params, (json_int_t)model_n_params(d));
    assert_int_equal(params, (json_int_t)model_n_params(q));
    assert_int_equal(bytes, (json_int_t)model_weight_bytes(q));
    assert_int_equal(json_integer_value(json_object_get(j, "quant_bits")), bits);
    assert_int_equal(json_integer_value(json_object_get(j, "quant_group_size")), gs);
    json_decref(j);
}

/* ==== Quantized vs dequantized ==== */
/* Loads qdir and ddir, runs prompts 0..3 batched (chunk 7, staggered) on both: identical. */
static int compare_q_d(const char *qdir, const char *ddir, const char *orig, int bits, int gs,
                       bool all_quantized) {
    model *q = load(qdir), *d = load(ddir);
    int nw, nq, dw, dq;
    model_quant_counts(q, &nw, &nq);
    model_quant_counts(d, &dw, &dq);
    assert_int_equal(dq, 0);
    assert_int_equal(nw, dw);
    if (all_quantized && nq != nw) fail_msg("%s: %d of %d weights quantized", qdir, nq, nw);
    qe_run rq, rd;
    qe_generate(q, 0, 4, 7, true, &rq);
    qe_generate(d, 0, 4, 7, true, &rd);
    for (int i = 0; i < 4; i++)
        if (!qe_same(&rq, i, &rd, i))
            fail_msg("%s (q%d g%d): prompt %d: quantized and dequantized models differ", qdir,
                     bits, gs, i);
    if (bits) check_inspect(qdir, q, d, bits, gs);
    /* not vacuous: with weights quantized, the original model gives other logits */
    if (orig && nq > 0) {
        model *o = load(orig);
        qe_run ro;
        qe_generate(o, 0, 4, 7, true, &ro);
        assert_true(memcmp(ro.logits[0], rq.logits[0], (size_t)rq.vocab * sizeof(float)) != 0);
        qe_run_free(&ro);
        model_free(o);
    }
    qe_run_free(&rq);
    qe_run_free(&rd);
    model_free(q);
    model_free(d);
    return nq;
}

/* -q at (bits, gs), then -d of that: compare. Returns the number of quantized weights. */
static int roundtrip(const char *in, const char *tag, int bits, int gs, bool all_quantized) {
    char qd[400], dd[400];
    snprintf(qd, sizeof qd, "%s/%s_q%dg%d", g_tmp, tag, bits, gs);
    snprintf(dd, sizeof dd, "%s/%s_q%dg%d_deq", g_tmp, tag, bits, gs);
    qe_quantize(in, qd, bits, gs);
    qe_dequantize(qd, dd);
    const int nq = compare_q_d(qd, dd, in, bits, gs, all_quantized);
    qe_sh("rm -rf '%s' '%s'", qd, dd);
    return nq;
}

static const int k_cfg[][2] = {{4, 32}, {2, 32}, {3, 32}, {5, 32}, {6, 32}, {8, 32}, {4, 64}, {8, 128}};
#define N_CFG (int)(sizeof k_cfg / sizeof k_cfg[0])

static void test_fixtures(void **st) {
    (void)st;
    static const char *k_ckpt[] = {"llama_tiny", "gemma3_sliding", "qwen3_moe_tiny",
                                   "qwen3_sharded", "mixtral_mlx"};
    char in[400];
    for (size_t f = 0; f < sizeof k_ckpt / sizeof *k_ckpt; f++) {
        snprintf(in, sizeof in, "%s/tests/fixtures/ckpt/%s", src_dir(), k_ckpt[f]);
        for (int c = 0; c < N_CFG; c++) {
            const int nq = roundtrip(in, k_ckpt[f], k_cfg[c][0], k_cfg[c][1], false);
            /* group 32 divides every fixture's hidden size but gemma3_sliding's (16) */
            if (k_cfg[c][1] == 32 && f != 1) assert_true(nq > 0);
        }
    }
    /* an MLX checkpoint as committed (4-bit, one 8-bit override, quantized embeddings and
     * lm_head): dequantize and compare */
    char dd[400];
    snprintf(in, sizeof in, "%s/tests/fixtures/ckpt/llama_q4", src_dir());
    snprintf(dd, sizeof dd, "%s/llama_q4_deq", g_tmp);
    qe_dequantize(in, dd);
    compare_q_d(in, dd, NULL, 4, 32, true);
}

/* The golden models (tests/fixtures/models/<name>/, from tools/reference/make_fixtures.py),
 * when the checkout has them. */
static void test_golden_models(void **st) {
    (void)st;
    char dir[400];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/models", src_dir());
    DIR *dp = opendir(dir);
    if (!dp) fail_msg("%s: missing (the golden fixtures are committed)", dir);
    struct dirent *ent;
    int n = 0;
    while ((ent = readdir(dp))) {
        char in[700], cfg[760];
        if (ent->d_name[0] == '.') continue;
        snprintf(in, sizeof in, "%s/%s", dir, ent->d_name);
        snprintf(cfg, sizeof cfg, "%s/config.json", in);
        if (access(cfg, R_OK)) continue;
        model_spec spec;
        mx_error err;
        if (spec_load(&spec, in, &err) == 0 && spec.kv_lora_rank > 0) {
            /* MLA (deepseek_v3): `convert -q` refuses it, and the loader refuses quantized MLA
             * weights (docs/deepseek.md); test_mla checks the refusal */
            fprintf(stderr, "skip %s: MLA checkpoints are not quantized by convert yet\n", ent->d_name);
            continue;
        }
        for (int c = 0; c < N_CFG; c += 3) roundtrip(in, ent->d_name, k_cfg[c][0], k_cfg[c][1], false);
        n++;
    }
    closedir(dp);
    fprintf(stderr, "golden models converted and compared: %d\n", n);
    /* the 16 golden fixtures less the two MLA ones: a smaller count is a lost fixture */
    if (n < 14) fail_msg("only %d golden models converted and compared, 14 expected", n);
}

/* ==== Llama 4: mlx_lm's llama4 sanitize ==== */
/* The golden llama4 fixtures hold transformers' fused [in, out] experts. Converted:
 * - float: each MoE layer's experts become experts.{gate,up,down}_proj.weight [E, out, in],
 *   element by element the transposes of the source's (H == I in the fixtures, so the shapes
 *   alone would not show a missing transpose); every other tensor is copied byte for byte; the
 *   engine gives the source's greedy tokens and logits bit for bit;
 * - -q at 8 bits g32 / g64 and 4 bits g64: every weight quantized (experts and router too, as
 *   mlx_lm's llama4 has no quant_predicate; norms never), tokens and logits = those of the
 *   dequantized twin;
 * - the llama4 wrapper (model_type llama4 + text_config) in transformers 4.x names
 *   (language_model.model.*) and 5.x names (model.language_model.*, float32 weights), with a
 *   vision tower and a projector: both convert to exactly the llama4_text output under
 *   language_model.*. */

static void open_ck(ckpt *c, const char *dir) {
    mx_error err;
    if (ckpt_open(c, dir, &err)) fail_msg("%s", err.msg);
}

static int ck_count(const ckpt *c) {
    int n = 0;
    for (int f = 0; f < c->n_files; f++) n += c->files[f].n_tensors;
    return n;
}

static const st_tensor *must_find(const ckpt *c, const char *name, mx_dtype dt, int ndim,
                                  int64_t d0, int64_t d1, int64_t d2) {
    const st_tensor *t = ckpt_find(c, name);
    if (!t) fail_msg("%s: no tensor %s", c->dir, name);
    const int64_t want[3] = {d0, d1, d2};
    bool ok = t->dtype == dt && t->ndim == ndim;
    for (int d = 0; ok && d < ndim; d++) ok = t->shape[d] == want[d];
    if (!ok) fail_msg("%s: %s is %s rank %d [%lld, %lld, ...], expected %s [%lld, %lld, %lld]",
                      c->dir, name, mx_dtype_name(t->dtype), t->ndim, (long long)t->shape[0],
                      (long long)t->shape[1], mx_dtype_name(dt), (long long)d0, (long long)d1,
                      (long long)d2);
    return t;
}

/* A float conversion of the fixture `src` (names model.*) against it. */
static void check_l4_float(const char *src, const char *out) {
    ckpt s, o;
    open_ck(&s, src);
    open_ck(&o, out);
    const int64_t E = s.spec.n_experts, H = s.spec.hidden_size, I = s.spec.moe_intermediate_size;
    int n_fused = 0;
    for (int f = 0; f < s.n_files; f++)
        for (int i = 0; i < s.files[f].n_tensors; i++) {
            const st_tensor *t = &s.files[f].tensors[i];
            char n[400];
            const size_t len = strlen(t->name);
            if (len > 13 && !strcmp(t->name + len - 13, ".gate_up_proj")) {
                n_fused++;
                const uint16_t *gu = t->data;
                snprintf(n, sizeof n, "%.*s.gate_proj.weight", (int)(len - 13), t->name);
                const uint16_t *g = must_find(&o, n, MX_BF16, 3, E, I, H)->data;
                snprintf(n, sizeof n, "%.*s.up_proj.weight", (int)(len - 13), t->name);
                const uint16_t *u = must_find(&o, n, MX_BF16, 3, E, I, H)->data;
                for (int64_t e = 0; e < E; e++)
                    for (int64_t r = 0; r < I; r++)
                        for (int64_t h = 0; h < H; h++) {
                            assert_int_equal(g[(e * I + r) * H + h], gu[(e * H + h) * 2 * I + r]);
                            assert_int_equal(u[(e * I + r) * H + h], gu[(e * H + h) * 2 * I + I + r]);
                        }
            } else if (len > 18 && !strcmp(t->name + len - 18, ".experts.down_proj")) {
                n_fused++;
                const uint16_t *dn = t->data;
                snprintf(n, sizeof n, "%s.weight", t->name);
                const uint16_t *d = must_find(&o, n, MX_BF16, 3, E, H, I)->data;
                for (int64_t e = 0; e < E; e++)
                    for (int64_t h = 0; h < H; h++)
                        for (int64_t r = 0; r < I; r++)
                            assert_int_equal(d[(e * H + h) * I + r], dn[(e * I + r) * H + h]);
            } else {
                const st_tensor *c = must_find(&o, t->name, t->dtype, t->ndim, t->shape[0],
                                               t->shape[1], t->shape[2]);
                assert_int_equal(c->nbytes, t->nbytes);
                assert_memory_equal(c->data, t->data, t->nbytes);
                continue;
            }
            assert_null(ckpt_find(&o, t->name)); /* the fused names are gone */
        }
    assert_true(n_fused > 0);
    /* gate_up -> gate + up, down -> down */
    assert_int_equal(ck_count(&o), ck_count(&s) + n_fused / 2);
    ckpt_close(&s);
    ckpt_close(&o);
}

/* A -q conversion: the experts packed [E, out, in * bits / 32] with scales [E, out, in / gs],
 * every .weight of rank >= 2 packed, norms float. */
static void check_l4_quant(const char *out, const char *pre, int bits, int gs) {
    ckpt o;
    open_ck(&o, out);
    const model_spec *s = &o.spec;
    const int64_t E = s->n_experts, H = s->hidden_size, I = s->moe_intermediate_size;
    char n[400];
    for (int l = 0; l < s->n_layers; l++) {
        if (s->layer_dense_mlp[l]) continue;
        static const char *k_p[3] = {"gate_proj", "up_proj", "down_proj"};
        for (int p = 0; p < 3; p++) {
            const int64_t rows = p < 2 ? I : H, in = p < 2 ? H : I;
            snprintf(n, sizeof n, "%slayers.%d.feed_forward.experts.%s.weight", pre, l, k_p[p]);
            must_find(&o, n, MX_U32, 3, E, rows, in * bits / 32);
            snprintf(n, sizeof n, "%slayers.%d.feed_forward.experts.%s.scales", pre, l, k_p[p]);
            must_find(&o, n, MX_BF16, 3, E, rows, in / gs);
        }
        snprintf(n, sizeof n, "%slayers.%d.feed_forward.router.weight", pre, l);
        must_find(&o, n, MX_U32, 2, E, H * bits / 32, 0);
    }
    for (int f = 0; f < o.n_files; f++)
        for (int i = 0; i < o.files[f].n_tensors; i++) {
            const st_tensor *t = &o.files[f].tensors[i];
            const size_t len = strlen(t->name);
            if (len > 7 && !strcmp(t->name + len - 7, ".weight"))
                assert_int_equal(t->dtype, t->ndim >= 2 ? MX_U32 : MX_BF16);
        }
    ckpt_close(&o);
}

/* Loads both and runs prompts 0..3 (chunk 7, staggered): identical greedy tokens, and logits
 * identical (tol 0) or within tol relative (L2 over a sequence's logits). */
static void same_outputs(const char *a, const char *b, double tol) {
    model *ma = load(a), *mb = load(b);
    qe_run ra, rb;
    qe_generate(ma, 0, 4, 7, true, &ra);
    qe_generate(mb, 0, 4, 7, true, &rb);
    for (int i = 0; i < 4; i++) {
        if (!tol && !qe_same(&ra, i, &rb, i)) fail_msg("%s vs %s: prompt %d differs", a, b, i);
        if (memcmp(ra.tok[i], rb.tok[i], sizeof ra.tok[i]))
            fail_msg("%s vs %s: prompt %d: other greedy tokens", a, b, i);
        double num = 0, den = 0;
        for (size_t k = 0; k < (size_t)QE_MAX_GEN * ra.vocab; k++) {
            const double d = ra.logits[i][k] - rb.logits[i][k];
            num += d * d, den += (double)ra.logits[i][k] * ra.logits[i][k];
        }
        if (sqrt(num / den) > tol)
            fail_msg("%s vs %s: prompt %d: logits differ by %g relative", a, b, i, sqrt(num / den));
    }
    qe_run_free(&ra);
    qe_run_free(&rb);
    model_free(ma);
    model_free(mb);
}

/* The llama4 wrapper around a llama4_text fixture: transformers 4.x names (v5 false) or 5.x
 * names, a vision tower and a projector, config.json {model_type llama4, text_config,
 * vision_config}. The 5.x one holds its weights in float32 (exact widenings; torch_dtype stays
 * bfloat16), so its experts go through the 4-byte transpose and the cast. */
static void write_wrapper(const char *fixture, const char *dir, bool v5) {
    ckpt s;
    open_ck(&s, fixture);
    qe_ckpt c = {.rng = 7};
    for (int f = 0; f < s.n_files; f++)
        for (int i = 0; i < s.files[f].n_tensors; i++) {
            const st_tensor *t = &s.files[f].tensors[i];
            char n[400];
            if (!strncmp(t->name, "model.", 6))
                snprintf(n, sizeof n, "%s%s", v5 ? "model.language_model." : "language_model.model.",
                         t->name + 6);
            else
                snprintf(n, sizeof n, "%s%s", v5 ? "" : "language_model.", t->name);
            if (v5 && t->dtype == MX_BF16) { /* widened: convert casts back to bf16 */
                const int64_t k = (int64_t)(t->nbytes / 2);
                float *d = malloc((size_t)k * 4);
                for (int64_t j = 0; j < k; j++) d[j] = mx_bf16_to_f32(((const uint16_t *)t->data)[j]);
                qe_put(&c, n, MX_F32, t->ndim, t->shape, d);
                continue;
            }
            void *d = malloc(t->nbytes);
            memcpy(d, t->data, t->nbytes);
            qe_put(&c, n, t->dtype, t->ndim, t->shape, d);
        }
    const char *vp = v5 ? "model." : "";
    char n[200];
    snprintf(n, sizeof n, "%svision_model.patch_embedding.linear.weight", vp);
    qe_add(&c, n, 16, 48, 0, 0.1f, 0, 0, 0);
    snprintf(n, sizeof n, "%svision_model.model.layers.0.mlp.fc1.weight", vp);
    qe_add(&c, n, 64, 16, 0, 0.1f, 0, 0, 0);
    snprintf(n, sizeof n, "%smulti_modal_projector.linear_1.weight", vp);
    qe_add(&c, n, s.spec.hidden_size, 16, 0, 0.1f, 0, 0, 0);
    char p[760];
    snprintf(p, sizeof p, "%s/config.json", fixture);
    json_error_t je;
    json_t *text = json_load_file(p, 0, &je);
    if (!text) fail_msg("%s: %s", p, je.text);
    json_t *w = json_pack("{s:s, s:[s], s:b, s:s, s:i, s:o, s:{s:s, s:i, s:i}}", "model_type",
                          "llama4", "architectures", "Llama4ForConditionalGeneration",
                          "tie_word_embeddings", 0, "torch_dtype", "bfloat16", "image_token_index",
                          200, "text_config", text, "vision_config", "model_type",
                          "llama4_vision_model", "hidden_size", 16, "num_hidden_layers", 1);
    char *cfg = json_dumps(w, JSON_INDENT(2));
    qe_write(&c, dir, cfg);
    free(cfg);
    json_decref(w);
    ckpt_close(&s);
}

/* The wrapper's output = the llama4_text output under language_model.*, byte for byte. */
static void check_same_renamed(const char *text_out, const char *wrap_out) {
    ckpt a, b;
    open_ck(&a, text_out);
    open_ck(&b, wrap_out);
    assert_int_equal(ck_count(&a), ck_count(&b));
    for (int f = 0; f < a.n_files; f++)
        for (int i = 0; i < a.files[f].n_tensors; i++) {
            const st_tensor *t = &a.files[f].tensors[i];
            char n[400];
            if (!strncmp(t->name, "model.", 6))
                snprintf(n, sizeof n, "language_model.model.%s", t->name + 6);
            else
                snprintf(n, sizeof n, "language_model.%s", t->name);
            const st_tensor *u = must_find(&b, n, t->dtype, t->ndim, t->shape[0], t->shape[1],
                                           t->shape[2]);
            assert_int_equal(u->nbytes, t->nbytes);
            assert_memory_equal(u->data, t->data, t->nbytes);
        }
    ckpt_close(&a);
    ckpt_close(&b);
    /* config.json: the wrapper's, less vision_config */
    char p[400];
    snprintf(p, sizeof p, "%s/config.json", wrap_out);
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    if (!j) fail_msg("%s: %s", p, je.text);
    assert_string_equal(json_string_value(json_object_get(j, "model_type")), "llama4");
    assert_true(json_is_object(json_object_get(j, "text_config")));
    assert_null(json_object_get(j, "vision_config"));
    json_decref(j);
}

static void test_llama4_convert(void **st) {
    (void)st;
    static const char *k_fix[] = {"llama4_text", "llama4_text_top2"};
    static const int k_q[][2] = {{8, 32}, {8, 64}, {4, 64}};
    char in[400], out[400], tag[64];
    for (int f = 0; f < 2; f++) {
        snprintf(in, sizeof in, "%s/tests/fixtures/models/%s", src_dir(), k_fix[f]);
        snprintf(out, sizeof out, "%s/%s_float", g_tmp, k_fix[f]);
        qe_sh("'%s' convert --hf-path '%s' --mlx-path '%s' --no-progress", qe_bin(), in, out);
        check_l4_float(in, out);
        same_outputs(in, out, 0);
        /* float32 holds every bf16 value exactly: the same bits out of the engine; float16
         * rounds the activations differently: the same tokens, logits close */
        snprintf(out, sizeof out, "%s/%s_f32", g_tmp, k_fix[f]);
        qe_sh("'%s' convert --hf-path '%s' --mlx-path '%s' --dtype float32 --no-progress",
              qe_bin(), in, out);
        same_outputs(in, out, 0);
        snprintf(out, sizeof out, "%s/%s_f16", g_tmp, k_fix[f]);
        qe_sh("'%s' convert --hf-path '%s' --mlx-path '%s' --dtype float16 --no-progress",
              qe_bin(), in, out);
        same_outputs(in, out, 1e-4);
        for (int c = 0; c < 3; c++) {
            snprintf(tag, sizeof tag, "%s_l4", k_fix[f]);
            snprintf(out, sizeof out, "%s/%s_q%dg%d", g_tmp, tag, k_q[c][0], k_q[c][1]);
            qe_quantize(in, out, k_q[c][0], k_q[c][1]);
            check_l4_quant(out, "model.", k_q[c][0], k_q[c][1]);
            qe_sh("rm -rf '%s'", out);
            roundtrip(in, tag, k_q[c][0], k_q[c][1], true);
        }
    }
    /* the wrapper, 4.x and 5.x names */
    char text_out[400];
    snprintf(in, sizeof in, "%s/tests/fixtures/models/llama4_text", src_dir());
    snprintf(text_out, sizeof text_out, "%s/llama4_text_float", g_tmp);
    for (int v5 = 0; v5 < 2; v5++) {
        char wrap[400];
        snprintf(wrap, sizeof wrap, "%s/llama4_wrap%d", g_tmp, v5);
        write_wrapper(in, wrap, v5);
        snprintf(out, sizeof out, "%s/llama4_wrap%d_float", g_tmp, v5);
        qe_sh("'%s' convert --hf-path '%s' --mlx-path '%s' --no-progress", qe_bin(), wrap, out);
        check_same_renamed(text_out, out);
        same_outputs(in, out, 0);
        snprintf(out, sizeof out, "%s/llama4_wrap%d_q4", g_tmp, v5);
        qe_quantize(wrap, out, 4, 64);
        check_l4_quant(out, "language_model.model.", 4, 64);
        snprintf(tag, sizeof tag, "llama4_wrap%d", v5);
        roundtrip(wrap, tag, 4, 64, true);
    }
}

/* ==== Random checkpoints with every weight quantizable ==== */
enum { SH = 128, SI = 256, SV = 200, SE = 4, SIE = 64 };

/* qwen2: q/k/v biases, tied embeddings. */
static void write_qwen2(const char *dir, uint64_t seed) {
    qe_ckpt c = {.rng = seed};
    char n[160];
    qe_add(&c, "model.embed_tokens.weight", SV, SH, 0, 0.5f, 0, 0, 0);
    qe_add(&c, "model.norm.weight", SH, 0, 0, 0.1f, 1, 0, 0);
    for (int l = 0; l < 2; l++) {
        static const char *k_w[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                    "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
        static const int64_t k_d[][2] = {{SH, SH}, {64, SH}, {64, SH}, {SH, SH}, {SI, SH}, {SI, SH}, {SH, SI}};
        for (int w = 0; w < 7; w++) {
            snprintf(n, sizeof n, "model.layers.%d.%s.weight", l, k_w[w]);
            qe_add(&c, n, k_d[w][0], k_d[w][1], 0, 0.12f, 0, 0, 0);
            if (w < 3) {
                snprintf(n, sizeof n, "model.layers.%d.%s.bias", l, k_w[w]);
                qe_add(&c, n, k_d[w][0], 0, 0, 0.3f, 0, 0, 0);
            }
        }
        snprintf(n, sizeof n, "model.layers.%d.input_layernorm.weight", l);
        qe_add(&c, n, SH, 0, 0, 0.1f, 1, 0, 0);
        snprintf(n, sizeof n, "model.layers.%d.post_attention_layernorm.weight", l);
        qe_add(&c, n, SH, 0, 0, 0.1f, 1, 0, 0);
    }
    qe_write(&c, dir,
             "{\"model_type\": \"qwen2\", \"hidden_size\": 128, \"num_hidden_layers\": 2, "
             "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 200, "
             "\"intermediate_size\": 256, \"max_position_embeddings\": 512, \"rms_norm_eps\": 1e-6, "
             "\"rope_theta\": 10000.0, \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\", "
             "\"eos_token_id\": 199}");
}

/* qwen3_moe: layer 0 dense MLP, layer 1 MoE with per-expert tensors, q/k norms, untied. */
static void write_moe(const char *dir, uint64_t seed) {
    qe_ckpt c = {.rng = seed};
    char n[160];
    qe_add(&c, "model.embed_tokens.weight", SV, SH, 0, 0.5f, 0, 0, 0);
    qe_add(&c, "model.norm.weight", SH, 0, 0, 0.1f, 1, 0, 0);
    qe_add(&c, "lm_head.weight", SV, SH, 0, 0.12f, 0, 0, 0);
    for (int l = 0; l < 2; l++) {
        static const char *k_w[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                    "self_attn.o_proj"};
        static const int64_t k_d[][2] = {{SH, SH}, {64, SH}, {64, SH}, {SH, SH}};
        for (int w = 0; w < 4; w++) {
            snprintf(n, sizeof n, "model.layers.%d.%s.weight", l, k_w[w]);
            qe_add(&c, n, k_d[w][0], k_d[w][1], 0, 0.12f, 0, 0, 0);
        }
        snprintf(n, sizeof n, "model.layers.%d.self_attn.q_norm.weight", l);
        qe_add(&c, n, 32, 0, 0, 0.1f, 1, 0, 0);
        snprintf(n, sizeof n, "model.layers.%d.self_attn.k_norm.weight", l);
        qe_add(&c, n, 32, 0, 0, 0.1f, 1, 0, 0);
        snprintf(n, sizeof n, "model.layers.%d.input_layernorm.weight", l);
        qe_add(&c, n, SH, 0, 0, 0.1f, 1, 0, 0);
        snprintf(n, sizeof n, "model.layers.%d.post_attention_layernorm.weight", l);
        qe_add(&c, n, SH, 0, 0, 0.1f, 1, 0, 0);
        static const char *k_m[] = {"gate_proj", "up_proj", "down_proj"};
        if (l == 0) {
            for (int w = 0; w < 3; w++) {
                snprintf(n, sizeof n, "model.layers.0.mlp.%s.weight", k_m[w]);
                qe_add(&c, n, w < 2 ? SI : SH, w < 2 ? SH : SI, 0, 0.12f, 0, 0, 0);
            }
            continue;
        }
        qe_add(&c, "model.layers.1.mlp.gate.weight", SE, SH, 0, 0.5f, 0, 0, 0);
        for (int e = 0; e < SE; e++)
            for (int w = 0; w < 3; w++) {
                snprintf(n, sizeof n, "model.layers.1.mlp.experts.%d.%s.weight", e, k_m[w]);
                qe_add(&c, n, w < 2 ? SIE : SH, w < 2 ? SH : SIE, 0, 0.15f, 0, 0, 0);
            }
    }
    qe_write(&c, dir,
             "{\"model_type\": \"qwen3_moe\", \"hidden_size\": 128, \"num_hidden_layers\": 2, "
             "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 32, "
             "\"vocab_size\": 200, \"intermediate_size\": 256, \"moe_intermediate_size\": 64, "
             "\"num_experts\": 4, \"num_experts_per_tok\": 2, \"norm_topk_prob\": true, "
             "\"decoder_sparse_step\": 1, \"mlp_only_layers\": [0], \"max_position_embeddings\": 512, "
             "\"rope_theta\": 1000000.0, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\", "
             "\"eos_token_id\": 199}");
}

static void test_synthetic(void **st) {
    (void)st;
    char qw[300], moe[300];
    snprintf(qw, sizeof qw, "%s/synth_qwen2", g_tmp);
    snprintf(moe, sizeof moe, "%s/synth_moe", g_tmp);
    write_qwen2(qw, 11);
    write_moe(moe, 12);
    static const int k_s[][2] = {{4, 64}, {4, 128}, {8, 64}, {3, 32}, {2, 128}, {6, 64}};
    for (int c = 0; c < 6; c++) {
        roundtrip(qw, "synth_qwen2", k_s[c][0], k_s[c][1], true);
        /* the router gate: 8-bit group 64 (qwen3_moe rule); experts stacked and quantized,
         * except down_proj (input 64) at group 128, which stays bf16 */
        roundtrip(moe, "synth_moe", k_s[c][0], k_s[c][1], k_s[c][1] <= 64);
    }
}

/* ==== Per-module overrides written by hand ==== */
static void test_mixed_overrides(void **st) {
    (void)st;
    char qd[300], dd[300];
    snprintf(qd, sizeof qd, "%s/mixed", g_tmp);
    snprintf(dd, sizeof dd, "%s/mixed_deq", g_tmp);
    qe_ckpt c = {.rng = 99};
    char n[160];
    qe_add(&c, "model.embed_tokens.weight", SV, SH, 0, 0.5f, 0, 6, 64);
    qe_add(&c, "model.norm.weight", SH, 0, 0, 0.1f, 1, 0, 0);
    qe_add(&c, "lm_head.weight", SV, SH, 0, 0.12f, 0, 2, 32);
    for (int l = 0; l < 2; l++) {
        static const char *k_w[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                    "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
        static const int64_t k_d[][2] = {{SH, SH}, {64, SH}, {64, SH}, {SH, SH}, {SI, SH}, {SI, SH}, {SH, SI}};
        for (int w = 0; w < 7; w++) {
            int bits = 4, gs = 64;
            if (l == 0 && w == 0) bits = 8, gs = 32;      /* override */
            if (l == 0 && w == 6) bits = 0;               /* false */
            if (l == 1 && w == 1) bits = 3, gs = 128;     /* override */
            if (l == 1 && w == 4) bits = 5, gs = 32;      /* override */
            snprintf(n, sizeof n, "model.layers.%d.%s.weight", l, k_w[w]);
            qe_add(&c, n, k_d[w][0], k_d[w][1], 0, 0.12f, 0, bits, gs);
        }
        snprintf(n, sizeof n, "model.layers.%d.input_layernorm.weight", l);
        qe_add(&c, n, SH, 0, 0, 0.1f, 1, 0, 0);
        snprintf(n, sizeof n, "model.layers.%d.post_attention_layernorm.weight", l);
        qe_add(&c, n, SH, 0, 0, 0.1f, 1, 0, 0);
    }
#define QOV "\"group_size\": 64, \"bits\": 4, " \
            "\"model.embed_tokens\": {\"group_size\": 64, \"bits\": 6}, " \
            "\"lm_head\": {\"group_size\": 32, \"bits\": 2}, " \
            "\"model.layers.0.self_attn.q_proj\": {\"group_size\": 32, \"bits\": 8}, " \
            "\"model.layers.0.mlp.down_proj\": false, " \
            "\"model.layers.1.self_attn.k_proj\": {\"group_size\": 128, \"bits\": 3}, " \
            "\"model.layers.1.mlp.gate_proj\": {\"group_size\": 32, \"bits\": 5}"
    qe_write(&c, qd,
             "{\"model_type\": \"llama\", \"hidden_size\": 128, \"num_hidden_layers\": 2, "
             "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 200, "
             "\"intermediate_size\": 256, \"max_position_embeddings\": 512, \"rms_norm_eps\": 1e-5, "
             "\"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\", \"eos_token_id\": 199, "
             "\"quantization\": {" QOV "}, \"quantization_config\": {" QOV "}}");
#undef QOV
    qe_dequantize(qd, dd);
    model *q = load(qd);
    int nw, nq;
    model_quant_counts(q, &nw, &nq);
    assert_int_equal(nw, 16);
    assert_int_equal(nq, 15);
    char line[320];
    model_describe_quant(q, line, sizeof line);
    assert_non_null(strstr(line, "MLX affine 4-bit, group 64"));
    assert_non_null(strstr(line, "6 per-module overrides"));
    assert_non_null(strstr(line, "1 unquantized"));
    assert_non_null(strstr(line, "15 of 16 weights quantized"));
    model_free(q);
    compare_q_d(qd, dd, NULL, 4, 64, false);
}

/* ==== Batch invariance on quantized models ==== */
static void check_invariance(const char *qdir) {
    model *m = load(qdir);
    qe_run alone, o;
    qe_generate(m, 0, 1, 512, false, &alone);
    static const int chunks[] = {1, 7, 64};
    for (int ci = 0; ci < 3; ci++) {
        qe_generate(m, 0, 1, chunks[ci], false, &o);
        if (!qe_same(&alone, 0, &o, 0)) fail_msg("%s: chunk %d alone differs", qdir, chunks[ci]);
        qe_run_free(&o);
        qe_generate(m, 0, 18, chunks[ci], true, &o);
        if (!qe_same(&alone, 0, &o, 0))
            fail_msg("%s: chunk %d with 17 others differs", qdir, chunks[ci]);
        qe_run_free(&o);
    }
    qe_run_free(&alone);
    model_free(m);
}

static void test_batch_invariance(void **st) {
    (void)st;
    char src[300], q[300];
    snprintf(src, sizeof src, "%s/inv_qwen2", g_tmp);
    snprintf(q, sizeof q, "%s/inv_qwen2_q", g_tmp);
    write_qwen2(src, 21);
    qe_quantize(src, q, 4, 64);
    check_invariance(q);
    snprintf(src, sizeof src, "%s/inv_moe", g_tmp);
    snprintf(q, sizeof q, "%s/inv_moe_q", g_tmp);
    write_moe(src, 22);
    qe_quantize(src, q, 3, 32);
    check_invariance(q);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures),         cmocka_unit_test(test_golden_models),
        cmocka_unit_test(test_synthetic),        cmocka_unit_test(test_mixed_overrides),
        cmocka_unit_test(test_batch_invariance), cmocka_unit_test(test_llama4_convert),
    };
    return cmocka_run_group_tests(tests, tmp_setup, tmp_teardown);
}
