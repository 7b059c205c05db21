/* `mlxcel inspect --json` on every committed fixture under tests/fixtures/ckpt agrees with an
 * independent count: params, weight bytes and KV bytes computed here from the config numbers
 * alone (architecture formulas), never from the safetensors headers or spec_parse. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <sys/wait.h>

#include <dirent.h>
#include <stdbool.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct counts {
    uint64_t params, weights, kv_tok_f16, kv_tok_int8;
    int n_layers, window;
    uint8_t sliding[256];
    uint64_t kv_layer_f16, kv_layer_int8; /* per layer per token */
} counts;

/* ==== Config reading (direct, no spec_parse) ==== */

static json_t *g_cfg, *g_txt;

static json_t *field(const char *k) {
    json_t *v = g_txt ? json_object_get(g_txt, k) : NULL;
    if (!v || json_is_null(v)) v = json_object_get(g_cfg, k);
    return (v && !json_is_null(v)) ? v : NULL;
}

static uint64_t num(const char *k, uint64_t def) {
    json_t *v = field(k);
    return v ? (uint64_t)json_integer_value(v) : def;
}

/* Quantization bits/group for a module from the config's MLX block; bits 0 = unquantized. */
static void quant_for(const char *module, int *bits, int *gs) {
    json_t *q = json_object_get(g_cfg, "quantization");
    *bits = 0;
    *gs = 0;
    if (!q) return;
    *bits = (int)json_integer_value(json_object_get(q, "bits"));
    *gs = (int)json_integer_value(json_object_get(q, "group_size"));
    json_t *o = json_object_get(q, module);
    if (o && json_is_object(o)) {
        *bits = (int)json_integer_value(json_object_get(o, "bits"));
        *gs = (int)json_integer_value(json_object_get(o, "group_size"));
    } else if (o && json_is_false(o)) {
        *bits = 0;
    }
}

/* A weight matrix [rows, cols] (times `copies`, for stacked experts). */
static void matrix(counts *c, const char *module, uint64_t rows, uint64_t cols, uint64_t copies) {
    int bits, gs;
    quant_for(module, &bits, &gs);
    c->params += rows * cols * copies;
    if (bits) /* packed U32 + bf16 scales and biases per group */
        c->weights += copies * (rows * cols * (uint64_t)bits / 8 + 2 * rows * (cols / (uint64_t)gs) * 2);
    else
        c->weights += rows * cols * copies * 2;
}

static void vec(counts *c, uint64_t n) {
    c->params += n;
    c->weights += n * 2;
}

static void count_config(const char *dir, counts *c) {
    char path[2048];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t je;
    g_cfg = json_load_file(path, 0, &je);
    assert_non_null(g_cfg);
    g_txt = json_object_get(g_cfg, "text_config");
    const char *mt = json_string_value(field("model_type"));
    bool gemma = !strncmp(mt, "gemma3", 6), qknorm = gemma || !strncmp(mt, "qwen3", 5);
    bool mixtral = !strcmp(mt, "mixtral"), qmoe = !strcmp(mt, "qwen3_moe");
    uint64_t H = num("hidden_size", 0), L = num("num_hidden_layers", 0), V = num("vocab_size", 0);
    uint64_t I = num("intermediate_size", 0), nh = num("num_attention_heads", 0);
    uint64_t nkv = num("num_key_value_heads", nh), hd = num("head_dim", H / nh);
    json_t *tie = field("tie_word_embeddings");
    bool tied = tie ? json_is_true(tie) : gemma;
    memset(c, 0, sizeof *c);
    c->n_layers = (int)L;

    char m[256];
    const char *pfx = g_txt ? "language_model.model." : "model.";
    snprintf(m, sizeof m, "%sembed_tokens", pfx);
    matrix(c, m, V, H, 1);
    if (!tied) matrix(c, "lm_head", V, H, 1);
    vec(c, H); /* final norm */
    for (uint64_t i = 0; i < L; i++) {
        static const char *k_proj[4] = {"q_proj", "k_proj", "v_proj", "o_proj"};
        uint64_t rows[4] = {nh * hd, nkv * hd, nkv * hd, H}, cols[4] = {H, H, H, nh * hd};
        for (int p = 0; p < 4; p++) {
            snprintf(m, sizeof m, "%slayers.%llu.self_attn.%s", pfx, (unsigned long long)i, k_proj[p]);
            matrix(c, m, rows[p], cols[p], 1);
        }
        if (qknorm) vec(c, 2 * hd);
        vec(c, (gemma ? 4 : 2) * H);
        bool dense = true;
        if (mixtral) dense = false;
        if (qmoe) {
            dense = false;
            json_t *ml = field("mlp_only_layers");
            for (size_t k = 0; ml && k < json_array_size(ml); k++)
                if ((uint64_t)json_integer_value(json_array_get(ml, k)) == i) dense = true;
        }
        if (dense) {
            static const char *k_mlp[3] = {"gate_proj", "up_proj", "down_proj"};
            for (int p = 0; p < 3; p++) {
                snprintf(m, sizeof m, "%slayers.%llu.mlp.%s", pfx, (unsigned long long)i, k_mlp[p]);
                matrix(c, m, p < 2 ? I : H, p < 2 ? H : I, 1);
            }
        } else {
            uint64_t E = mixtral ? num("num_local_experts", 8) : num("num_experts", 128);
            uint64_t MI = mixtral ? I : num("moe_intermediate_size", 768);
            matrix(c, "router", E, H, 1);
            matrix(c, "experts", 3 * MI, H, E);
        }
    }
    /* KV: K and V, nkv heads x head_dim; 2-byte elements, or 1 byte + f32 scale per head */
    c->kv_layer_f16 = 2 * nkv * hd * 2;
    c->kv_layer_int8 = 2 * nkv * hd + 2 * nkv * 4;
    c->kv_tok_f16 = L * c->kv_layer_f16;
    c->kv_tok_int8 = L * c->kv_layer_int8;
    if (gemma) {
        c->window = (int)num("sliding_window", 4096);
        uint64_t pat = num("sliding_window_pattern", 6);
        for (uint64_t i = 0; i < L; i++) c->sliding[i] = (i + 1) % pat != 0;
    }
    json_decref(g_cfg);
    g_cfg = g_txt = NULL;
}

static uint64_t kv_total(const counts *c, uint64_t per_layer, uint64_t ctx, uint64_t batch) {
    uint64_t t = 0;
    for (int i = 0; i < c->n_layers; i++) {
        uint64_t toks = c->sliding[i] && (uint64_t)c->window < ctx ? (uint64_t)c->window : ctx;
        t += per_layer * toks;
    }
    return t * batch;
}

/* ==== Running inspect ==== */

static json_t *inspect(const char *dir, const char *args) {
    const char *bin = getenv("MLXCEL_BIN");
    assert_non_null(bin);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "MLXCEL_MEMORY_LIMIT=64G '%s' inspect -m '%s' --json --device cpu %s",
             bin, dir, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, p);
    buf[n] = 0;
    int rc = pclose(p);
    if (rc) fail_msg("'%s' exited with %d", cmd, rc);
    json_error_t je;
    json_t *o = json_loads(buf, 0, &je);
    if (!o) fail_msg("inspect output is not JSON: %s", buf);
    return o;
}

static uint64_t jget(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    if (!json_is_integer(v)) fail_msg("inspect JSON lacks integer '%s'", k);
    return (uint64_t)json_integer_value(v);
}

static void check_fixture(const char *dir) {
    counts c;
    count_config(dir, &c);
    print_message("%s: params %llu weights %llu kv/token %llu\n", dir, (unsigned long long)c.params,
                  (unsigned long long)c.weights, (unsigned long long)c.kv_tok_f16);

    /* --device cpu: by default the CPU engine's fp32 K/V, twice the 2-byte counts */
    json_t *o = inspect(dir, "--ctx 64 --batch 3");
    assert_int_equal(jget(o, "params"), c.params);
    assert_int_equal(jget(o, "weights_bytes"), c.weights);
    assert_string_equal(json_string_value(json_object_get(o, "kv_dtype")), "f32");
    assert_int_equal(jget(o, "kv_bytes_per_token"), 2 * c.kv_tok_f16);
    assert_int_equal(jget(o, "kv_bytes_total"), kv_total(&c, 2 * c.kv_layer_f16, 64, 3));
    uint64_t sum = jget(o, "weights_bytes") + jget(o, "kv_bytes_total") + jget(o, "activation_bytes");
    assert_int_equal(jget(o, "total_bytes"), sum + jget(o, "headroom_bytes"));
    assert_int_equal(jget(o, "headroom_bytes"), (512ull << 20) + sum / 100 * 5);
    assert_int_equal(jget(o, "available_bytes"), 64ull << 30);
    assert_true(json_is_true(json_object_get(o, "fits")));
    assert_true(jget(o, "activation_bytes") > 0);
    json_decref(o);

    o = inspect(dir, "--ctx 40 --kv-dtype bf16");
    assert_int_equal(jget(o, "kv_bytes_per_token"), c.kv_tok_f16);
    assert_int_equal(jget(o, "kv_bytes_total"), kv_total(&c, c.kv_layer_f16, 40, 1));
    json_decref(o);

    o = inspect(dir, "--ctx 40 --kv-dtype int8");
    assert_int_equal(jget(o, "kv_bytes_per_token"), c.kv_tok_int8);
    assert_int_equal(jget(o, "kv_bytes_total"), kv_total(&c, c.kv_layer_int8, 40, 1));
    json_decref(o);
}

static void test_fixtures(void **st) {
    (void)st;
    const char *src = getenv("MLXCEL_SOURCE_DIR");
    assert_non_null(src);
    char root[1024];
    snprintf(root, sizeof root, "%s/tests/fixtures/ckpt", src);
    DIR *d = opendir(root);
    assert_non_null(d);
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char dir[1400];
        snprintf(dir, sizeof dir, "%s/%s", root, de->d_name);
        check_fixture(dir);
        n++;
    }
    closedir(d);
    assert_true(n >= 5);
}

/* The engine's cache types on the demo model (8 layers, 2 KV heads of 64): q8_0 34 bytes and
 * q4_0 18 bytes per 32 values, -ctk / -ctv over --kv-dtype, the pools' bytes exactly. */
static void test_cache_types(void **st) {
    (void)st;
    const char *src = getenv("MLXCEL_SOURCE_DIR");
    char dir[1400];
    snprintf(dir, sizeof dir, "%s/models/wordnet-chat-16m", src);
    json_t *o = inspect(dir, "--ctx 100 --kv-dtype q8_0");
    assert_string_equal(json_string_value(json_object_get(o, "kv_dtype")), "q8_0");
    assert_int_equal(jget(o, "kv_bytes_per_token"), 8 * 2 * 2 * 68);
    assert_int_equal(jget(o, "kv_scale_bytes_per_token"), 8 * 2 * 2 * 4);
    assert_int_equal(jget(o, "kv_bytes_total"), 100 * 8 * 2 * 2 * 68);
    json_decref(o);
    o = inspect(dir, "--ctx 100 --kv-dtype f16 -ctk q8_0 --cache-type-v q4_0");
    assert_string_equal(json_string_value(json_object_get(o, "kv_dtype")), "K q8_0 / V q4_0");
    assert_string_equal(json_string_value(json_object_get(o, "kv_dtype_k")), "q8_0");
    assert_string_equal(json_string_value(json_object_get(o, "kv_dtype_v")), "q4_0");
    assert_int_equal(jget(o, "kv_bytes_per_token"), 8 * 2 * (68 + 36));
    json_decref(o);
    o = inspect(dir, "-ctv f16");
    assert_int_equal(jget(o, "kv_bytes_per_token"), 8 * 2 * (256 + 128)); /* K: cpu's f32 */
    json_decref(o);
    /* a fixture with heads of 16: q8_0 refused (exit 1), naming head_dim */
    char cmd[3000];
    snprintf(cmd, sizeof cmd, "'%s' inspect -m '%s/tests/fixtures/models/llama' --kv-dtype q8_0 2>&1",
             getenv("MLXCEL_BIN"), src);
    FILE *p = popen(cmd, "r");
    static char buf[4096];
    buf[fread(buf, 1, sizeof buf - 1, p)] = 0;
    const int rc = pclose(p);
    assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) == 1);
    assert_non_null(strstr(buf, "head_dim of"));
    assert_non_null(strstr(buf, "is 16 (not a multiple of 32)"));
}

/* A limit far below the estimate: fits must be false, and exit status still 0. */
static void test_does_not_fit(void **st) {
    (void)st;
    const char *src = getenv("MLXCEL_SOURCE_DIR");
    const char *bin = getenv("MLXCEL_BIN");
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "MLXCEL_MEMORY_LIMIT=1M '%s' inspect -m '%s/tests/fixtures/ckpt/llama_tiny' --json",
             bin, src);
    FILE *p = popen(cmd, "r");
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, p);
    buf[n] = 0;
    assert_int_equal(pclose(p), 0);
    json_t *o = json_loads(buf, 0, NULL);
    assert_non_null(o);
    assert_true(json_is_false(json_object_get(o, "fits")));
    assert_int_equal(json_integer_value(json_object_get(o, "available_bytes")), 1 << 20);
    assert_string_equal(json_string_value(json_object_get(o, "available_source")), "MLXCEL_MEMORY_LIMIT");
    json_decref(o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures),
        cmocka_unit_test(test_does_not_fit),
        cmocka_unit_test(test_cache_types),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
