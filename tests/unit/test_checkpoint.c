/* Checkpoint directories built on the fly with st_write: single file, sharded with an index,
 * MLX-quantized; ckpt_find / ckpt_expect and their messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/checkpoint.h"

static char g_dir[256];
static uint8_t g_zeros[1 << 16];

static int setup(void **st) {
    (void)st;
    snprintf(g_dir, sizeof g_dir, "/tmp/mlxcel_ck_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **st) {
    (void)st;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void write_text(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

static void make_dir(char *out, const char *name) {
    sprintf(out, "%s/%s", g_dir, name);
    mkdir(out, 0755);
}

static void write_st(const char *dir, const char *name, st_write_tensor *ts, int n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    for (int i = 0; i < n; i++) ts[i].data = g_zeros;
    mx_error err;
    if (st_write(path, ts, n, NULL, NULL, 0, &err)) fail_msg("%s", err.msg);
}

#define CFG "{\"model_type\":\"llama\",\"hidden_size\":16,\"num_hidden_layers\":1," \
            "\"num_attention_heads\":2,\"vocab_size\":32,\"intermediate_size\":32%s}"

static void test_single_and_expect(void **st) {
    (void)st;
    char dir[300], cfg[512];
    make_dir(dir, "single");
    snprintf(cfg, sizeof cfg, CFG, ",\"torch_dtype\":\"float32\"");
    write_text(dir, "config.json", cfg);
    write_text(dir, "generation_config.json", "{\"eos_token_id\":[2,7]}");
    st_write_tensor ts[] = {
        {.name = "model.embed_tokens.weight", .dtype = MX_BF16, .ndim = 2, .shape = {32, 16}},
        {.name = "model.norm.weight", .dtype = MX_BF16, .ndim = 1, .shape = {16}},
        {.name = "model.layers.0.mlp.up_proj.weight", .dtype = MX_BF16, .ndim = 2, .shape = {32, 16}},
        {.name = "odd", .dtype = MX_I32, .ndim = 1, .shape = {3}},
    };
    write_st(dir, "model.safetensors", ts, 4);
    ckpt c;
    mx_error err = {0};
    if (ckpt_open(&c, dir, &err)) fail_msg("%s", err.msg);
    assert_int_equal(c.n_files, 1);
    assert_int_equal(c.n_params, 32 * 16 + 16 + 32 * 16 + 3);
    assert_int_equal(c.weights_bytes, (32 * 16 + 16 + 32 * 16) * 2 + 12);
    assert_int_equal(c.spec.dtype, MX_BF16); /* tensors win over torch_dtype */
    assert_int_equal(c.spec.n_eos, 2);
    assert_non_null(ckpt_find(&c, "model.norm.weight"));
    assert_null(ckpt_find(&c, "lm_head.weight"));

    const st_tensor *t;
    int64_t emb[2] = {32, 16}, bad[2] = {16, 32}, any[2] = {-1, 16};
    assert_int_equal(ckpt_expect(&c, "model.embed_tokens.weight", 2, emb, &t, &err), 0);
    assert_non_null(t);
    assert_int_equal(ckpt_expect(&c, "model.embed_tokens.weight", 2, any, &t, &err), 0);
    assert_int_equal(ckpt_expect(&c, "model.embed_tokens.weight", 2, bad, &t, &err), -1);
    assert_non_null(strstr(err.msg, "'model.embed_tokens.weight' has shape [32, 16], expected [16, 32]"));
    assert_non_null(strstr(err.msg, "model.safetensors"));
    assert_int_equal(ckpt_expect(&c, "lm_head.weight", 2, emb, &t, &err), -1);
    assert_non_null(strstr(err.msg, "missing tensor 'lm_head.weight' (expected shape [32, 16])"));
    int64_t three[1] = {3};
    assert_int_equal(ckpt_expect(&c, "odd", 1, three, &t, &err), -1);
    assert_non_null(strstr(err.msg, "dtype I32"));
    ckpt_close(&c);
}

static void test_sharded(void **st) {
    (void)st;
    char dir[300], cfg[512];
    make_dir(dir, "sharded");
    snprintf(cfg, sizeof cfg, CFG, "");
    write_text(dir, "config.json", cfg);
    st_write_tensor a[] = {{.name = "x", .dtype = MX_F16, .ndim = 1, .shape = {4}}};
    st_write_tensor b[] = {{.name = "y", .dtype = MX_F16, .ndim = 2, .shape = {2, 2}}};
    write_st(dir, "model-00001-of-00002.safetensors", a, 1);
    write_st(dir, "model-00002-of-00002.safetensors", b, 1);
    write_st(dir, "stray.safetensors", b, 1); /* not in the index: ignored */
    write_text(dir, "model.safetensors.index.json",
               "{\"metadata\":{\"total_size\":16},\"weight_map\":{\"x\":\"model-00001-of-00002."
               "safetensors\",\"y\":\"model-00002-of-00002.safetensors\"}}");
    ckpt c;
    mx_error err = {0};
    if (ckpt_open(&c, dir, &err)) fail_msg("%s", err.msg);
    assert_int_equal(c.n_files, 2);
    assert_int_equal(c.weights_bytes, 16);
    assert_int_equal(c.spec.dtype, MX_F16);
    assert_non_null(ckpt_find(&c, "y"));
    ckpt_close(&c);

    /* an index entry pointing at the wrong shard */
    write_text(dir, "model.safetensors.index.json",
               "{\"weight_map\":{\"x\":\"model-00002-of-00002.safetensors\"}}");
    assert_int_equal(ckpt_open(&c, dir, &err), -1);
    assert_non_null(strstr(err.msg, "tensor 'x' is listed in shard model-00002-of-00002"));
    /* a path escaping the directory */
    write_text(dir, "model.safetensors.index.json", "{\"weight_map\":{\"x\":\"../x.safetensors\"}}");
    assert_int_equal(ckpt_open(&c, dir, &err), -1);
    assert_non_null(strstr(err.msg, "same directory"));
    /* no index: glob finds the same name twice (stray duplicates y) */
    char p[400];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    unlink(p);
    assert_int_equal(ckpt_open(&c, dir, &err), -1);
    assert_non_null(strstr(err.msg, "tensor 'y' also appears in"));
}

static void test_quantized(void **st) {
    (void)st;
    char dir[300], cfg[512];
    make_dir(dir, "quant");
    snprintf(cfg, sizeof cfg, CFG,
             ",\"quantization\":{\"group_size\":32,\"bits\":4,"
             "\"model.layers.0.mlp.down_proj\":{\"group_size\":32,\"bits\":8}}");
    write_text(dir, "config.json", cfg);
    /* up_proj [32 out, 64 in] at 4 bits: packed [32, 8], scales/biases [32, 2];
     * down_proj [16, 32] at 8 bits: packed [16, 8], scales [16, 1] */
    st_write_tensor ts[] = {
        {.name = "model.layers.0.mlp.up_proj.weight", .dtype = MX_U32, .ndim = 2, .shape = {32, 8}},
        {.name = "model.layers.0.mlp.up_proj.scales", .dtype = MX_BF16, .ndim = 2, .shape = {32, 2}},
        {.name = "model.layers.0.mlp.up_proj.biases", .dtype = MX_BF16, .ndim = 2, .shape = {32, 2}},
        {.name = "model.layers.0.mlp.down_proj.weight", .dtype = MX_U32, .ndim = 2, .shape = {16, 8}},
        {.name = "model.layers.0.mlp.down_proj.scales", .dtype = MX_BF16, .ndim = 2, .shape = {16, 1}},
        {.name = "model.layers.0.mlp.down_proj.biases", .dtype = MX_BF16, .ndim = 2, .shape = {16, 1}},
        {.name = "model.norm.weight", .dtype = MX_BF16, .ndim = 1, .shape = {16}},
    };
    write_st(dir, "model.safetensors", ts, 7);
    ckpt c;
    mx_error err = {0};
    if (ckpt_open(&c, dir, &err)) fail_msg("%s", err.msg);
    assert_int_equal(c.n_params, 32 * 64 + 16 * 32 + 16);
    int64_t up[2] = {32, 64}, down[2] = {16, 32}, wrong[2] = {32, 32};
    assert_int_equal(ckpt_expect(&c, "model.layers.0.mlp.up_proj.weight", 2, up, NULL, &err), 0);
    assert_int_equal(ckpt_expect(&c, "model.layers.0.mlp.down_proj.weight", 2, down, NULL, &err), 0);
    assert_int_equal(ckpt_expect(&c, "model.layers.0.mlp.up_proj.weight", 2, wrong, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "has shape [32, 8], expected [32, 4] (packed)"));
    ckpt_close(&c);

    /* scales that disagree with the packed width */
    ts[1].shape[1] = 3;
    ts[2].shape[1] = 3;
    write_st(dir, "model.safetensors", ts, 7);
    assert_int_equal(ckpt_open(&c, dir, &err), -1);
    assert_non_null(strstr(err.msg, "'model.layers.0.mlp.up_proj.scales' has shape [32, 3], expected [32, 2]"));
}

static void test_dir_errors(void **st) {
    (void)st;
    ckpt c;
    mx_error err;
    assert_int_equal(ckpt_open(&c, "/nonexistent/dir", &err), -1);
    assert_non_null(strstr(err.msg, "/nonexistent/dir"));
    char dir[300], cfg[512];
    make_dir(dir, "noweights");
    assert_int_equal(ckpt_open(&c, dir, &err), -1);
    assert_non_null(strstr(err.msg, "config.json"));
    snprintf(cfg, sizeof cfg, CFG, "");
    write_text(dir, "config.json", cfg);
    assert_int_equal(ckpt_open(&c, dir, &err), -1);
    assert_non_null(strstr(err.msg, "no *.safetensors"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_and_expect),
        cmocka_unit_test(test_sharded),
        cmocka_unit_test(test_quantized),
        cmocka_unit_test(test_dir_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
