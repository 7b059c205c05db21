/* mlxq_convert: the committed tiny checkpoints converted with every bits x group size, reopened
 * with ckpt_open; every source tensor is found under its MLX name, quantized exactly when
 * mlx_lm would, equal bit for bit to mlx_quantize of the original, and its dequantized values
 * within one scale of the original. Synthetic qwen3_moe checkpoints (hidden 64) cover the
 * router override, sharding, transformers 5.x fused experts and --dequantize. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "quant/convert.h"
#include "quant/quant.h"

static char g_tmp[256];
static int g_seq;

static int setup(void **st) {
    (void)st;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/mlxcel_cv_XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown(void **st) {
    (void)st;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

static void fresh_dir(char *out, size_t n) { snprintf(out, n, "%s/out%d", g_tmp, g_seq++); }

static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

static void convert_ok(const char *in, const char *out, bool q, int bits, int gs, bool deq,
                       uint64_t max_shard) {
    mlxq_convert_opts o;
    mlxq_convert_defaults(&o);
    o.hf_path = in, o.mlx_path = out, o.quantize = q, o.dequantize = deq;
    o.bits = bits, o.group_size = gs, o.progress = -2;
    if (max_shard) o.max_shard_bytes = max_shard;
    mx_error err;
    if (mlxq_convert(&o, &err)) fail_msg("convert %s (q%d g%d): %s", in, bits, gs, err.msg);
}

/* ==== Checking one converted checkpoint against its source ==== */

/* Source tensor name -> output name and element offset (per-expert tensors are stacked). */
static void map_name(const char *src, char *out, size_t n, int64_t *slice, int64_t numel) {
    const char *x = strstr(src, ".experts.");
    *slice = 0;
    if (x && ends_with(src, ".weight")) {
        char *end;
        long e = strtol(x + 9, &end, 10);
        const char *proj = end + 1;
        const char *mp = !strncmp(proj, "w1.", 3) ? "gate_proj"
                         : !strncmp(proj, "w3.", 3) ? "up_proj"
                         : !strncmp(proj, "w2.", 3) ? "down_proj" : NULL;
        char pj[64];
        if (!mp) {
            snprintf(pj, sizeof pj, "%.*s", (int)(strchr(proj, '.') - proj), proj);
            mp = pj;
        }
        snprintf(out, n, "%.*s.switch_mlp.%s.weight", (int)(x - src), src, mp);
        *slice = e * numel;
        return;
    }
    snprintf(out, n, "%s", src);
}

static float load_f(const void *p, mx_dtype t, int64_t i) {
    if (t == MX_BF16) return mx_bf16_to_f32(((const uint16_t *)p)[i]);
    if (t == MX_F16) return mx_f16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

static void check_tensor(const ckpt *src, const ckpt *out, const st_tensor *t, int bits, int gs,
                         bool quantize) {
    if (src->spec.tie_word_embeddings && !strcmp(t->name, "lm_head.weight")) {
        assert_null(ckpt_find(out, t->name));
        return;
    }
    int64_t numel = 1;
    for (int i = 0; i < t->ndim; i++) numel *= t->shape[i];
    char oname[512];
    int64_t off;
    map_name(t->name, oname, sizeof oname, &off, numel);
    const st_tensor *o = ckpt_find(out, oname);
    if (!o) fail_msg("%s: no output tensor '%s'", t->name, oname);
    const int64_t in = t->shape[t->ndim - 1], rows = numel / in;
    int eb = bits, eg = gs;
    bool q = quantize && ends_with(t->name, ".weight") && t->ndim >= 2 && in % gs == 0;
    if (q && src->spec.family == FAM_QWEN3_MOE && ends_with(t->name, "mlp.gate.weight")) {
        eb = 8, eg = 64;
        q = in % 64 == 0;
    }
    size_t es = mx_dtype_size(t->dtype);
    if (!q) {
        if (o->dtype != t->dtype) fail_msg("%s: dtype %s, expected %s", oname,
                                          mx_dtype_name(o->dtype), mx_dtype_name(t->dtype));
        assert_memory_equal((const uint8_t *)o->data + off * es, t->data, (size_t)numel * es);
        return;
    }
    if (o->dtype != MX_U32) fail_msg("%s: not quantized (q%d g%d)", oname, eb, eg);
    mx_quant sq = spec_quant_for(&out->spec, oname);
    if (sq.bits != eb || sq.group_size != eg)
        fail_msg("%s: config says q%d g%d, expected q%d g%d", oname, sq.bits, sq.group_size, eb, eg);
    char sn[512], bn[512];
    snprintf(sn, sizeof sn, "%.*s.scales", (int)(strlen(oname) - 7), oname);
    snprintf(bn, sizeof bn, "%.*s.biases", (int)(strlen(oname) - 7), oname);
    const st_tensor *s = ckpt_find(out, sn), *b = ckpt_find(out, bn);
    assert_non_null(s);
    assert_non_null(b);
    assert_int_equal(o->shape[o->ndim - 1], in * eb / 32);
    assert_int_equal(s->shape[s->ndim - 1], in / eg);
    /* exact: our own quantize of the source slice */
    int64_t nw = rows * in * eb / 32, ng = rows * in / eg;
    uint32_t *wq = malloc((size_t)nw * 4);
    void *sc = malloc((size_t)ng * es), *bi = malloc((size_t)ng * es);
    float *d = malloc((size_t)numel * sizeof(float));
    mx_error err;
    assert_int_equal(mlx_quantize(wq, sc, bi, t->data, t->dtype, rows, in, eb, eg, &err), 0);
    int64_t woff = off * eb / 32, goff = off / eg;
    assert_memory_equal((const uint32_t *)o->data + woff, wq, (size_t)nw * 4);
    assert_memory_equal((const uint8_t *)s->data + goff * es, sc, (size_t)ng * es);
    assert_memory_equal((const uint8_t *)b->data + goff * es, bi, (size_t)ng * es);
    /* within the quantization error of the original */
    assert_int_equal(mlx_dequantize(d, MX_F32, (const uint32_t *)o->data + woff,
                                    (const uint8_t *)s->data + goff * es,
                                    (const uint8_t *)b->data + goff * es, s->dtype, rows, in, eb,
                                    eg, &err), 0);
    for (int64_t i = 0; i < numel; i++) {
        float scale = fabsf(load_f(sc, s->dtype, i / eg));
        float e = fabsf(d[i] - load_f(t->data, t->dtype, i));
        /* one scale (see test_quant) plus the bf16 rounding of scale, bias and the result */
        float bias = fabsf(load_f(bi, s->dtype, i / eg));
        if (e > scale * (1.0f + (1 << eb) / 128.0f) + bias / 64.0f + 1e-6f)
            fail_msg("%s[%lld]: |dequantized - original| = %g, scale %g", oname, (long long)i, e, scale);
    }
    free(wq), free(sc), free(bi), free(d);
}

static void check_converted(const char *src_dir, const char *out_dir, int bits, int gs, bool q) {
    ckpt src, out;
    mx_error err;
    if (ckpt_open(&src, src_dir, &err)) fail_msg("%s", err.msg);
    if (ckpt_open(&out, out_dir, &err)) fail_msg("reopening %s: %s", out_dir, err.msg);
    if (ckpt_validate(&out, &err)) fail_msg("validating %s: %s", out_dir, err.msg);
    if (q) {
        assert_int_equal(out.spec.quant.bits, bits);
        assert_int_equal(out.spec.quant.group_size, gs);
    } else {
        assert_int_equal(out.spec.quant.bits, 0);
    }
    for (int f = 0; f < src.n_files; f++)
        for (int i = 0; i < src.files[f].n_tensors; i++)
            check_tensor(&src, &out, &src.files[f].tensors[i], bits, gs, q);
    ckpt_close(&src);
    ckpt_close(&out);
}

/* ==== The committed tiny checkpoints ==== */

static void run_fixture(const char *name, bool all_combos) {
    char in[1024], out[512];
    snprintf(in, sizeof in, "%s/tests/fixtures/ckpt/%s", getenv("MLXCEL_SOURCE_DIR"), name);
    const int bits[] = {2, 3, 4, 5, 6, 8}, groups[] = {32, 64, 128};
    for (int b = 0; b < 6; b++)
        for (int g = 0; g < 3; g++) {
            if (!all_combos && !((bits[b] == 4 && groups[g] == 32) || (bits[b] == 3 && groups[g] == 64)))
                continue;
            fresh_dir(out, sizeof out);
            convert_ok(in, out, true, bits[b], groups[g], false, 0);
            check_converted(in, out, bits[b], groups[g], true);
        }
    fresh_dir(out, sizeof out); /* plain cast, no quantization */
    convert_ok(in, out, false, 4, 64, false, 0);
    check_converted(in, out, 4, 64, false);
}

static void test_llama_tiny(void **st) { (void)st; run_fixture("llama_tiny", true); }
static void test_qwen3_moe_tiny(void **st) { (void)st; run_fixture("qwen3_moe_tiny", true); }
static void test_mixtral_mlx(void **st) { (void)st; run_fixture("mixtral_mlx", false); }
static void test_gemma3(void **st) { (void)st; run_fixture("gemma3_sliding", false); }
static void test_sharded_input(void **st) { (void)st; run_fixture("qwen3_sharded", false); }

static void test_side_files(void **st) {
    (void)st;
    char in[1024], out[512], p[700];
    snprintf(in, sizeof in, "%s/tests/fixtures/ckpt/llama_tiny", getenv("MLXCEL_SOURCE_DIR"));
    fresh_dir(out, sizeof out);
    convert_ok(in, out, true, 4, 32, false, 0);
    snprintf(p, sizeof p, "%s/generation_config.json", out);
    assert_int_equal(access(p, R_OK), 0);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", out);
    assert_int_equal(access(p, R_OK), 0);
}

/* ==== Synthetic qwen3_moe, hidden 64 ==== */

#define QCFG "{\"model_type\":\"qwen3_moe\",\"hidden_size\":64,\"num_hidden_layers\":2," \
    "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":16,\"vocab_size\":64," \
    "\"intermediate_size\":64,\"moe_intermediate_size\":32,\"num_experts\":4," \
    "\"num_experts_per_tok\":2,\"norm_topk_prob\":true,\"decoder_sparse_step\":1," \
    "\"mlp_only_layers\":[0],\"max_position_embeddings\":256,\"tie_word_embeddings\":false," \
    "\"torch_dtype\":\"bfloat16\",\"_name_or_path\":\"x\"}"

typedef struct synth {
    int n;
    st_write_tensor ts[64];
    uint16_t *bufs[64];
} synth;

static uint64_t g_rng = 12345;
static float rnd(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return ((float)((g_rng >> 40) & 0xffffff) / 16777216.0f - 0.5f) * 0.2f;
}

static void add(synth *s, const char *name, int ndim, int64_t a, int64_t b, int64_t c) {
    st_write_tensor *t = &s->ts[s->n];
    int64_t n = a * (ndim > 1 ? b : 1) * (ndim > 2 ? c : 1);
    uint16_t *d = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) d[i] = mx_f32_to_bf16(rnd());
    t->name = strdup(name);
    t->dtype = MX_BF16;
    t->ndim = ndim;
    t->shape[0] = a, t->shape[1] = b, t->shape[2] = c;
    t->data = d;
    s->bufs[s->n++] = d;
}

static void write_synth(const char *dir, bool fused) {
    synth s = {0};
    char n[128];
    add(&s, "model.embed_tokens.weight", 2, 64, 64, 0);
    add(&s, "lm_head.weight", 2, 64, 64, 0);
    add(&s, "model.norm.weight", 1, 64, 0, 0);
    for (int l = 0; l < 2; l++) {
        const char *p1[] = {"q_proj", "k_proj", "v_proj", "o_proj"};
        const int64_t rows[] = {64, 32, 32, 64};
        for (int i = 0; i < 4; i++) {
            snprintf(n, sizeof n, "model.layers.%d.self_attn.%s.weight", l, p1[i]);
            add(&s, n, 2, rows[i], 64, 0);
        }
        snprintf(n, sizeof n, "model.layers.%d.self_attn.q_norm.weight", l), add(&s, n, 1, 16, 0, 0);
        snprintf(n, sizeof n, "model.layers.%d.self_attn.k_norm.weight", l), add(&s, n, 1, 16, 0, 0);
        snprintf(n, sizeof n, "model.layers.%d.input_layernorm.weight", l), add(&s, n, 1, 64, 0, 0);
        snprintf(n, sizeof n, "model.layers.%d.post_attention_layernorm.weight", l), add(&s, n, 1, 64, 0, 0);
    }
    add(&s, "model.layers.0.mlp.gate_proj.weight", 2, 64, 64, 0);
    add(&s, "model.layers.0.mlp.up_proj.weight", 2, 64, 64, 0);
    add(&s, "model.layers.0.mlp.down_proj.weight", 2, 64, 64, 0);
    add(&s, "model.layers.1.mlp.gate.weight", 2, 4, 64, 0);
    if (fused) {
        add(&s, "model.layers.1.mlp.experts.gate_up_proj", 3, 4, 64, 64);
        add(&s, "model.layers.1.mlp.experts.down_proj", 3, 4, 64, 32);
    } else {
        for (int e = 0; e < 4; e++) {
            snprintf(n, sizeof n, "model.layers.1.mlp.experts.%d.gate_proj.weight", e), add(&s, n, 2, 32, 64, 0);
            snprintf(n, sizeof n, "model.layers.1.mlp.experts.%d.up_proj.weight", e), add(&s, n, 2, 32, 64, 0);
            snprintf(n, sizeof n, "model.layers.1.mlp.experts.%d.down_proj.weight", e), add(&s, n, 2, 64, 32, 0);
        }
    }
    mkdir(dir, 0755);
    char p[600];
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *fp = fopen(p, "w");
    assert_non_null(fp);
    fputs(QCFG, fp);
    fclose(fp);
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    fp = fopen(p, "w");
    fputs("{}", fp);
    fclose(fp);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    mx_error err;
    if (st_write(p, s.ts, s.n, NULL, NULL, 0, &err)) fail_msg("%s", err.msg);
    for (int i = 0; i < s.n; i++) free((void *)s.ts[i].name), free(s.bufs[i]);
}

static void test_router_override_and_shards(void **st) {
    (void)st;
    char in[512], out[512], p[700];
    snprintf(in, sizeof in, "%s/synth", g_tmp);
    write_synth(in, false);
    fresh_dir(out, sizeof out);
    convert_ok(in, out, true, 4, 64, false, 6000); /* small shards: several files + index */
    check_converted(in, out, 4, 64, true);
    ckpt c;
    mx_error err;
    assert_int_equal(ckpt_open(&c, out, &err), 0);
    assert_true(c.n_files > 1);
    mx_quant g = spec_quant_for(&c.spec, "model.layers.1.mlp.gate");
    assert_int_equal(g.bits, 8);
    assert_int_equal(g.group_size, 64);
    /* expert down_proj: input 32 is not a multiple of 64, stays bf16 (stacked) */
    const st_tensor *t = ckpt_find(&c, "model.layers.1.mlp.switch_mlp.down_proj.weight");
    assert_non_null(t);
    assert_int_equal(t->dtype, MX_BF16);
    assert_int_equal(t->ndim, 3);
    assert_null(ckpt_find(&c, "model.layers.1.mlp.experts.0.up_proj.weight"));
    ckpt_close(&c);
    /* config: _name_or_path dropped, both quantization blocks present */
    snprintf(p, sizeof p, "%s/config.json", out);
    FILE *fp = fopen(p, "r");
    char buf[4096] = {0};
    assert_true(fread(buf, 1, sizeof buf - 1, fp) > 0);
    fclose(fp);
    assert_null(strstr(buf, "_name_or_path"));
    assert_non_null(strstr(buf, "\"quantization_config\""));
    assert_non_null(strstr(buf, "\"model.layers.1.mlp.gate\""));
    snprintf(p, sizeof p, "%s/tokenizer.json", out);
    assert_int_equal(access(p, R_OK), 0);

    /* dequantize back: each float equals mlx_dequantize of the quantized tensor */
    char back[512];
    fresh_dir(back, sizeof back);
    convert_ok(out, back, false, 4, 64, true, 0);
    ckpt q, d;
    assert_int_equal(ckpt_open(&q, out, &err), 0);
    assert_int_equal(ckpt_open(&d, back, &err), 0);
    assert_int_equal(d.spec.quant.bits, 0);
    const st_tensor *qw = ckpt_find(&q, "model.layers.0.mlp.up_proj.weight");
    const st_tensor *qs = ckpt_find(&q, "model.layers.0.mlp.up_proj.scales");
    const st_tensor *qb = ckpt_find(&q, "model.layers.0.mlp.up_proj.biases");
    const st_tensor *dw = ckpt_find(&d, "model.layers.0.mlp.up_proj.weight");
    assert_non_null(dw);
    assert_int_equal(dw->dtype, MX_BF16);
    assert_null(ckpt_find(&d, "model.layers.0.mlp.up_proj.scales"));
    uint16_t ref[64 * 64];
    assert_int_equal(mlx_dequantize(ref, MX_BF16, qw->data, qs->data, qb->data, MX_BF16, 64, 64,
                                    4, 64, &err), 0);
    assert_memory_equal(dw->data, ref, sizeof ref);
    ckpt_close(&q);
    ckpt_close(&d);
}

static void test_fused_experts(void **st) {
    (void)st;
    char in[512], out[512];
    snprintf(in, sizeof in, "%s/synth_fused", g_tmp);
    write_synth(in, true);
    fresh_dir(out, sizeof out);
    convert_ok(in, out, true, 8, 32, false, 0);
    ckpt src, c;
    mx_error err;
    assert_int_equal(ckpt_open(&src, in, &err), 0);
    assert_int_equal(ckpt_open(&c, out, &err), 0);
    const st_tensor *gu = ckpt_find(&src, "model.layers.1.mlp.experts.gate_up_proj");
    const st_tensor *g = ckpt_find(&c, "model.layers.1.mlp.switch_mlp.gate_proj.weight");
    const st_tensor *u = ckpt_find(&c, "model.layers.1.mlp.switch_mlp.up_proj.weight");
    assert_non_null(g);
    assert_non_null(u);
    /* expert 2: gate = rows 0..31 of its [64, 64] slab, up = rows 32..63 */
    uint32_t wq[32 * 64 * 8 / 32];
    uint16_t sc[32 * 2], bi[32 * 2];
    const uint16_t *slab = (const uint16_t *)gu->data + 2 * 64 * 64;
    assert_int_equal(mlx_quantize(wq, sc, bi, slab, MX_BF16, 32, 64, 8, 32, &err), 0);
    assert_memory_equal((const uint32_t *)g->data + 2 * 32 * 16, wq, sizeof wq);
    assert_int_equal(mlx_quantize(wq, sc, bi, slab + 32 * 64, MX_BF16, 32, 64, 8, 32, &err), 0);
    assert_memory_equal((const uint32_t *)u->data + 2 * 32 * 16, wq, sizeof wq);
    ckpt_close(&src);
    ckpt_close(&c);
}

static void test_errors(void **st) {
    (void)st;
    char in[1024], out[512], q[512];
    snprintf(in, sizeof in, "%s/tests/fixtures/ckpt/llama_tiny", getenv("MLXCEL_SOURCE_DIR"));
    mlxq_convert_opts o;
    mx_error err;
    mlxq_convert_defaults(&o);
    o.hf_path = in, o.mlx_path = g_tmp, o.progress = -2;
    assert_int_equal(mlxq_convert(&o, &err), -1); /* exists */
    assert_non_null(strstr(err.msg, "already exists"));
    fresh_dir(out, sizeof out);
    o.mlx_path = out, o.quantize = true, o.bits = 7;
    assert_int_equal(mlxq_convert(&o, &err), -1);
    assert_non_null(strstr(err.msg, "7-bit"));
    assert_int_equal(access(out, F_OK), -1); /* nothing left behind */
    o.bits = 4, o.dequantize = true;
    assert_int_equal(mlxq_convert(&o, &err), -1);
    o.dequantize = false;
    fresh_dir(q, sizeof q);
    convert_ok(in, q, true, 4, 32, false, 0);
    o.hf_path = q;
    assert_int_equal(mlxq_convert(&o, &err), -1); /* already quantized */
    assert_non_null(strstr(err.msg, "already quantized"));
    assert_int_equal(access(out, F_OK), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_tiny),    cmocka_unit_test(test_qwen3_moe_tiny),
        cmocka_unit_test(test_mixtral_mlx),   cmocka_unit_test(test_gemma3),
        cmocka_unit_test(test_sharded_input), cmocka_unit_test(test_side_files),
        cmocka_unit_test(test_router_override_and_shards),
        cmocka_unit_test(test_fused_experts), cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
