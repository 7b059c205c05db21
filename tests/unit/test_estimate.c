/* estimate_memory on real model shapes, against figures worked out by hand:
 * Llama-3.1-8B KV is the well-known 128 KiB per token (32 layers x 2 x 8 kv heads x 128 x 2 B);
 * Gemma-3-4B has 5 global layers of 34 (pattern 6) and 29 capped at the 1024-token window. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "model/estimate.h"

static const char *k_llama31_8b =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"attention_bias\":false,\"bos_token_id\":128000,"
    "\"eos_token_id\":[128001,128008,128009],\"hidden_act\":\"silu\",\"hidden_size\":4096,"
    "\"intermediate_size\":14336,\"max_position_embeddings\":131072,\"mlp_bias\":false,"
    "\"model_type\":\"llama\",\"num_attention_heads\":32,\"num_hidden_layers\":32,"
    "\"num_key_value_heads\":8,\"pretraining_tp\":1,\"rms_norm_eps\":1e-05,"
    "\"rope_scaling\":{\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
    "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"},\"rope_theta\":500000.0,"
    "\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\",\"vocab_size\":128256}";

static const char *k_gemma3_4b =
    "{\"architectures\":[\"Gemma3ForConditionalGeneration\"],\"model_type\":\"gemma3\","
    "\"eos_token_id\":[1,106],\"torch_dtype\":\"bfloat16\",\"text_config\":{\"hidden_size\":2560,"
    "\"intermediate_size\":10240,\"model_type\":\"gemma3_text\",\"num_hidden_layers\":34,"
    "\"rope_scaling\":{\"factor\":8.0,\"rope_type\":\"linear\"},\"sliding_window\":1024}}";

static void test_llama31_8b(void **st) {
    (void)st;
    static model_spec s;
    mx_error err;
    assert_int_equal(spec_parse(&s, k_llama31_8b, NULL, "config.json", &err), 0);
    mx_mem_estimate e;
    estimate_memory(&s, 8030261248ull, 16060522496ull, 8192, 1, MX_KV_BF16, &e);
    assert_int_equal(e.kv_bytes_per_token, 131072);
    assert_int_equal(e.kv_bytes_total, 1ull << 30);
    assert_int_equal(e.n_sliding_layers, 0);
    estimate_memory(&s, 0, 0, 8192, 4, MX_KV_INT8, &e);
    /* int8: 32 x (2 x 8 x 128 x 1 + 2 x 8 x 4 scale bytes) */
    assert_int_equal(e.kv_bytes_per_token, 32 * (2048 + 64));
    assert_int_equal(e.kv_scale_bytes_per_token, 32 * 64);
    assert_int_equal(e.kv_bytes_total, 32ull * (2048 + 64) * 8192 * 4);
    /* the engine's cache types: q8_0 = 34 bytes per 32 values, q4_0 = 18; K and V apart */
    estimate_memory(&s, 0, 0, 8192, 1, MX_KV_Q8_0, &e);
    assert_int_equal(e.kv_bytes_per_token, 32 * 8 * 2 * (128 / 32 * 34)); /* 68 KiB */
    assert_int_equal(e.kv_scale_bytes_per_token, 32 * 8 * 2 * (128 / 32 * 2));
    estimate_memory_kv(&s, 0, 0, 8192, 1, MX_KV_Q8_0, MX_KV_Q4_0, &e);
    assert_int_equal(e.kv_bytes_per_token, 32 * 8 * (4 * 34 + 4 * 18));
    estimate_memory_kv(&s, 0, 0, 8192, 1, MX_KV_F32, MX_KV_Q4_0, &e);
    assert_int_equal(e.kv_bytes_per_token, 32 * 8 * (128 * 4 + 4 * 18));
    assert_int_equal(e.kv_bytes_total, 32ull * 8 * (128 * 4 + 4 * 18) * 8192);
    estimate_memory(&s, 8030261248ull, 16060522496ull, 8192, 4, MX_KV_INT8, &e);
    /* total is the sum of its parts */
    assert_int_equal(e.total_bytes,
                     e.weights_bytes + e.kv_bytes_total + e.activation_bytes + e.headroom_bytes);
}

static void test_gemma3_4b(void **st) {
    (void)st;
    static model_spec s;
    mx_error err;
    assert_int_equal(spec_parse(&s, k_gemma3_4b, NULL, "config.json", &err), 0);
    mx_mem_estimate e;
    estimate_memory(&s, 0, 0, 32768, 1, MX_KV_BF16, &e);
    assert_int_equal(e.n_sliding_layers, 29);
    assert_int_equal(e.kv_bytes_per_token, 34 * 4096);
    assert_int_equal(e.kv_bytes_total, 5ull * 32768 * 4096 + 29ull * 1024 * 4096);
    /* below the window, every layer holds all tokens */
    estimate_memory(&s, 0, 0, 512, 2, MX_KV_F16, &e);
    assert_int_equal(e.kv_bytes_total, 2ull * 34 * 512 * 4096);
}

static void test_kv_dtype_parse(void **st) {
    (void)st;
    mx_kv_dtype t;
    assert_int_equal(kv_dtype_parse("int8", &t), 0);
    assert_int_equal(t, MX_KV_INT8);
    assert_int_equal(kv_dtype_parse("bf16", &t), 0);
    assert_int_equal(t, MX_KV_BF16);
    assert_int_equal(kv_dtype_parse("f32", &t), 0);
    assert_int_equal(t, MX_KV_F32);
    assert_string_equal(kv_dtype_name(MX_KV_F32), "f32");
    assert_int_equal(kv_dtype_parse("q4", &t), -1);
    assert_int_equal(kv_dtype_parse("q8_0", &t), 0);
    assert_int_equal(t, MX_KV_Q8_0);
    assert_int_equal(kv_dtype_parse("q4_0", &t), 0);
    assert_string_equal(kv_dtype_name(t), "q4_0");
    assert_int_equal(kv_dtype_block(MX_KV_Q4_0), 32);
    assert_int_equal(kv_dtype_block(MX_KV_BF16), 1);
    assert_string_equal(kv_dtype_name(MX_KV_F16), "f16");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama31_8b),
        cmocka_unit_test(test_gemma3_4b),
        cmocka_unit_test(test_kv_dtype_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
