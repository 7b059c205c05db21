/* model_spec parsing: every family, transformers 4.x and 5.x spellings, quantization,
 * generation_config merging, and the error messages for bad fields. Configs are written with
 * single quotes for readability; q() turns them into JSON. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_spec.h"

static char g_buf[2][8192];

static const char *q(int slot, const char *s) {
    size_t n = strlen(s);
    assert_true(n < sizeof g_buf[0]);
    for (size_t i = 0; i <= n; i++) g_buf[slot][i] = s[i] == '\'' ? '"' : s[i];
    return g_buf[slot];
}

static void parse_ok(model_spec *s, const char *cfg, const char *gen) {
    mx_error err = {0};
    int rc = spec_parse(s, q(0, cfg), gen ? q(1, gen) : NULL, "m/config.json", &err);
    if (rc) fail_msg("spec_parse failed: %s", err.msg);
}

static void parse_err(const char *cfg, const char *gen, const char *needle) {
    model_spec s;
    mx_error err = {0};
    int rc = spec_parse(&s, q(0, cfg), gen ? q(1, gen) : NULL, "m/config.json", &err);
    if (!rc) fail_msg("accepted: %s", cfg);
    if (!strstr(err.msg, needle)) fail_msg("message '%s' lacks '%s'", err.msg, needle);
    if (!strstr(err.msg, "config.json")) fail_msg("message '%s' does not name the file", err.msg);
}

#define LLAMA_BASE "'hidden_size':64,'num_hidden_layers':4,'num_attention_heads':8,'vocab_size':1000,'intermediate_size':128"

/* ==== Families ==== */

static void test_llama_4x(void **st) {
    (void)st;
    model_spec s;
    parse_ok(&s,
             "{'model_type':'llama'," LLAMA_BASE ",'num_key_value_heads':2,'rope_theta':500000.0,"
             "'rope_scaling':{'rope_type':'llama3','factor':8.0,'low_freq_factor':1.0,"
             "'high_freq_factor':4.0,'original_max_position_embeddings':8192},"
             "'max_position_embeddings':131072,'rms_norm_eps':1e-5,'bos_token_id':1,"
             "'eos_token_id':[2,3],'torch_dtype':'bfloat16','tie_word_embeddings':true}",
             "{'eos_token_id':[3,4],'temperature':0.6,'top_p':0.9,'do_sample':true}");
    assert_int_equal(s.family, FAM_LLAMA);
    assert_string_equal(s.model_type, "llama");
    assert_int_equal(s.head_dim, 8);
    assert_int_equal(s.n_kv_heads, 2);
    assert_int_equal(s.rope.type, ROPE_LLAMA3);
    assert_true(s.rope.theta == 500000.0 && s.rope.factor == 8.0 && s.rope.high_freq_factor == 4.0);
    assert_int_equal(s.rope.original_max_pos, 8192);
    assert_true(fabs(s.rms_norm_eps - 1e-5) < 1e-12);
    assert_int_equal(s.n_eos, 3);
    assert_int_equal(s.eos_ids[0], 2);
    assert_int_equal(s.eos_ids[2], 4);
    assert_int_equal(s.bos_id, 1);
    assert_int_equal(s.pad_id, -1);
    assert_true(s.tie_word_embeddings);
    assert_int_equal(s.dtype, MX_BF16);
    assert_int_equal(s.sliding_window, 0);
    assert_true(fabsf(s.attn_scale - 1.0f / sqrtf(8.0f)) < 1e-7f);
    assert_true(s.gen_temperature == 0.6f && s.gen_top_p == 0.9f && s.gen_do_sample == 1);
    assert_int_equal(s.gen_top_k, 0);
    assert_int_equal(s.act, ACT_SILU);
    assert_false(s.qkv_bias || s.qk_norm || s.sandwich_norms);
    assert_true(s.embed_scale == 1.0f && s.norm_offset == 0.0f);
    assert_int_equal(s.n_experts, 0);
}

static void test_llama_5x(void **st) {
    (void)st;
    model_spec s;
    parse_ok(&s,
             "{'model_type':'llama'," LLAMA_BASE ",'head_dim':null,'dtype':'float16',"
             "'rope_parameters':{'rope_type':'yarn','rope_theta':1000000.0,'factor':4.0,"
             "'original_max_position_embeddings':4096,'truncate':false},'attention_bias':true,"
             "'eos_token_id':2}",
             NULL);
    assert_int_equal(s.head_dim, 8);
    assert_int_equal(s.dtype, MX_F16);
    assert_int_equal(s.rope.type, ROPE_YARN);
    assert_true(s.rope.theta == 1e6 && s.rope.factor == 4.0 && s.rope.beta_fast == 32);
    assert_false(s.rope.truncate);
    assert_true(s.qkv_bias && s.o_bias);
    assert_true(s.rope_local.type == ROPE_YARN); /* = rope outside gemma */
    /* defaults: llama tie false, eps 1e-6, 4.x-style linear scaling via 'type' */
    assert_false(s.tie_word_embeddings);
    parse_ok(&s, "{'model_type':'llama'," LLAMA_BASE ",'rope_scaling':{'type':'linear','factor':2}}",
             NULL);
    assert_int_equal(s.rope.type, ROPE_LINEAR);
    assert_true(s.rope.theta == 10000.0 && s.rope.factor == 2.0);
    assert_true(fabs(s.rms_norm_eps - 1e-6) < 1e-15);
    assert_int_equal(s.bos_id, 1); /* LlamaConfig default */
    assert_int_equal(s.n_eos, 1);
    assert_int_equal(s.eos_ids[0], 2);
}

static void test_mistral(void **st) {
    (void)st;
    model_spec s;
    parse_ok(&s, "{'model_type':'mistral'," LLAMA_BASE ",'head_dim':16}", NULL);
    assert_int_equal(s.family, FAM_LLAMA);
    assert_int_equal(s.sliding_window, 4096); /* MistralConfig default when absent */
    for (int i = 0; i < 4; i++) assert_int_equal(s.layer_sliding[i], 1);
    assert_int_equal(s.head_dim, 16);
    assert_int_equal(s.n_kv_heads, 8);
    parse_ok(&s, "{'model_type':'mistral'," LLAMA_BASE ",'sliding_window':null}", NULL);
    assert_int_equal(s.sliding_window, 0);
    assert_int_equal(s.layer_sliding[0], 0);
}

static void test_qwen2_qwen3(void **st) {
    (void)st;
    model_spec s;
    parse_ok(&s,
             "{'model_type':'qwen2'," LLAMA_BASE ",'num_key_value_heads':4,'sliding_window':32768,"
             "'use_sliding_window':false,'eos_token_id':999,'bos_token_id':null}",
             NULL);
    assert_int_equal(s.family, FAM_QWEN2);
    assert_true(s.qkv_bias);
    assert_false(s.o_bias);
    assert_int_equal(s.sliding_window, 0);
    assert_int_equal(s.bos_id, -1);
    parse_ok(&s,
             "{'model_type':'qwen2'," LLAMA_BASE ",'num_key_value_heads':4,'sliding_window':16,'use_sliding_window':true,"
             "'max_window_layers':2}",
             NULL);
    assert_int_equal(s.sliding_window, 16);
    assert_int_equal(s.layer_sliding[1], 0);
    assert_int_equal(s.layer_sliding[2], 1);
    parse_err("{'model_type':'qwen3'," LLAMA_BASE "}", NULL, "num_key_value_heads' = 32");
    parse_ok(&s, "{'model_type':'qwen3'," LLAMA_BASE ",'num_key_value_heads':2}", NULL);
    assert_int_equal(s.family, FAM_QWEN3);
    assert_int_equal(s.head_dim, 128); /* Qwen3Config default when absent */
    assert_int_equal(s.n_kv_heads, 2);
    assert_true(s.qk_norm);
    assert_false(s.qkv_bias);
    parse_ok(&s, "{'model_type':'qwen3'," LLAMA_BASE ",'num_key_value_heads':8,'head_dim':null}", NULL);
    assert_int_equal(s.head_dim, 8);
}

static void test_gemma3_4x_multimodal(void **st) {
    (void)st;
    model_spec s;
    parse_ok(&s,
             "{'model_type':'gemma3','architectures':['Gemma3ForConditionalGeneration'],"
             "'eos_token_id':[1,106],'torch_dtype':'bfloat16',"
             "'text_config':{'model_type':'gemma3_text','hidden_size':2560,'intermediate_size':10240,"
             "'num_hidden_layers':34,'rope_scaling':{'factor':8.0,'rope_type':'linear'},"
             "'sliding_window':1024}}",
             NULL);
    assert_int_equal(s.family, FAM_GEMMA3);
    assert_string_equal(s.model_type, "gemma3_text");
    assert_int_equal(s.vocab_size, 262208);
    assert_int_equal(s.n_heads, 8);
    assert_int_equal(s.n_kv_heads, 4);
    assert_int_equal(s.head_dim, 256);
    assert_true(s.tie_word_embeddings);
    assert_true(s.qk_norm && s.sandwich_norms);
    assert_true(s.norm_offset == 1.0f);
    assert_true(fabsf(s.embed_scale - sqrtf(2560.0f)) < 1e-4f);
    assert_true(fabsf(s.attn_scale - 1.0f / 16.0f) < 1e-7f); /* 256^-0.5 */
    assert_int_equal(s.act, ACT_GELU_TANH);
    assert_int_equal(s.sliding_window, 1024);
    /* pattern 6: layers 5, 11, 17, ... are global */
    for (int i = 0; i < 34; i++) assert_int_equal(s.layer_sliding[i], (i + 1) % 6 != 0);
    assert_int_equal(s.rope.type, ROPE_LINEAR);
    assert_true(s.rope.theta == 1e6 && s.rope.factor == 8.0);
    assert_int_equal(s.rope_local.type, ROPE_DEFAULT);
    assert_true(s.rope_local.theta == 10000.0);
    assert_int_equal(s.n_eos, 2);
    assert_int_equal(s.bos_id, 2);
    assert_int_equal(s.pad_id, 0);
    assert_true(s.attn_softcap == 0 && s.final_softcap == 0);
}

static void test_gemma3_5x_text(void **st) {
    (void)st;
    model_spec s;
    parse_ok(&s,
             "{'model_type':'gemma3_text','hidden_size':64,'num_hidden_layers':3,"
             "'num_attention_heads':4,'num_key_value_heads':1,'head_dim':32,'vocab_size':500,"
             "'intermediate_size':96,'query_pre_attn_scalar':64,'sliding_window':8,"
             "'final_logit_softcapping':30.0,'attn_logit_softcapping':50.0,"
             "'layer_types':['sliding_attention','full_attention','sliding_attention'],"
             "'rope_parameters':{'full_attention':{'rope_type':'default','rope_theta':1000000.0},"
             "'sliding_attention':{'rope_type':'default','rope_theta':10000.0}},"
             "'hidden_activation':'gelu_pytorch_tanh','tie_word_embeddings':false}",
             NULL);
    assert_int_equal(s.layer_sliding[0], 1);
    assert_int_equal(s.layer_sliding[1], 0);
    assert_int_equal(s.layer_sliding[2], 1);
    assert_true(s.rope.theta == 1e6 && s.rope_local.theta == 1e4);
    assert_true(s.final_softcap == 30.0f && s.attn_softcap == 50.0f);
    assert_true(fabsf(s.attn_scale - 0.125f) < 1e-7f);
    assert_false(s.tie_word_embeddings);
}

static void test_moe(void **st) {
    (void)st;
    model_spec s;
    parse_ok(&s, "{'model_type':'mixtral'," LLAMA_BASE ",'num_local_experts':4,'num_experts_per_tok':2}",
             NULL);
    assert_int_equal(s.family, FAM_MIXTRAL);
    assert_int_equal(s.n_experts, 4);
    assert_int_equal(s.n_experts_per_tok, 2);
    assert_int_equal(s.moe_intermediate_size, 128);
    assert_true(s.norm_topk_prob);
    assert_true(s.rope.theta == 1e6);
    assert_true(fabs(s.rms_norm_eps - 1e-5) < 1e-15);
    parse_ok(&s,
             "{'model_type':'qwen3_moe'," LLAMA_BASE ",'head_dim':16,'num_key_value_heads':2,"
             "'num_experts':8,'num_experts_per_tok':2,'moe_intermediate_size':32,"
             "'norm_topk_prob':true,'decoder_sparse_step':1,'mlp_only_layers':[0,3]}",
             NULL);
    assert_int_equal(s.family, FAM_QWEN3_MOE);
    assert_int_equal(s.n_experts, 8);
    assert_int_equal(s.moe_intermediate_size, 32);
    assert_true(s.norm_topk_prob && s.qk_norm);
    assert_int_equal(s.layer_dense_mlp[0], 1);
    assert_int_equal(s.layer_dense_mlp[1], 0);
    assert_int_equal(s.layer_dense_mlp[3], 1);
    parse_ok(&s, "{'model_type':'qwen3_moe'," LLAMA_BASE ",'num_experts':8,'decoder_sparse_step':2}",
             NULL);
    assert_int_equal(s.layer_dense_mlp[0], 1); /* (0+1) % 2 != 0 */
    assert_int_equal(s.layer_dense_mlp[1], 0);
    assert_false(s.norm_topk_prob);
    assert_int_equal(s.head_dim, 8);
    /* transformers 5.x saves the count as num_local_experts (no num_experts in the file) */
    parse_ok(&s,
             "{'model_type':'qwen3_moe'," LLAMA_BASE ",'num_local_experts':4,"
             "'num_experts_per_tok':2,'moe_intermediate_size':32,'mlp_only_layers':[1]}",
             NULL);
    assert_int_equal(s.n_experts, 4);
    assert_int_equal(s.n_experts_per_tok, 2);
    assert_int_equal(s.layer_dense_mlp[0], 0);
    assert_int_equal(s.layer_dense_mlp[1], 1);
}

static void test_quant(void **st) {
    (void)st;
    model_spec s;
    parse_ok(&s,
             "{'model_type':'llama'," LLAMA_BASE ",'quantization':{'group_size':64,'bits':4,"
             "'model.layers.0.mlp.gate_proj':{'group_size':32,'bits':8},"
             "'model.layers.1.self_attn.q_proj':false}}",
             NULL);
    assert_int_equal(s.quant.bits, 4);
    assert_int_equal(s.quant.group_size, 64);
    assert_int_equal(s.n_quant_overrides, 2);
    mx_quant qq = spec_quant_for(&s, "model.layers.0.mlp.gate_proj");
    assert_true(qq.bits == 8 && qq.group_size == 32);
    qq = spec_quant_for(&s, "model.layers.0.mlp.gate_proj.scales");
    assert_int_equal(qq.bits, 8);
    qq = spec_quant_for(&s, "model.layers.1.self_attn.q_proj.weight");
    assert_int_equal(qq.bits, 0);
    qq = spec_quant_for(&s, "model.layers.10.mlp.gate_proj");
    assert_true(qq.bits == 4 && qq.group_size == 64);
    parse_ok(&s, "{'model_type':'llama'," LLAMA_BASE ",'quantization_config':{'group_size':128,'bits':8}}",
             NULL);
    assert_int_equal(s.quant.bits, 8);
    parse_ok(&s, "{'model_type':'llama'," LLAMA_BASE "}", NULL);
    assert_int_equal(spec_quant_for(&s, "x").bits, 0);
    parse_err("{'model_type':'llama'," LLAMA_BASE ",'quantization_config':{'quant_method':'gptq','w':4}}",
              NULL, "gptq");
    parse_err("{'model_type':'llama'," LLAMA_BASE ",'quantization':{'group_size':64,'bits':7}}", NULL,
              "quantization.bits");
    parse_err("{'model_type':'llama'," LLAMA_BASE ",'quantization':{'group_size':48,'bits':4}}", NULL,
              "quantization.group_size");
}

/* ==== Errors ==== */

static void test_errors(void **st) {
    (void)st;
    parse_err("{'model_type':'gpt2'," LLAMA_BASE "}", NULL, "qwen3_moe"); /* lists supported */
    parse_err("{'model_type':'gpt2'," LLAMA_BASE "}", NULL, "'gpt2' is not supported");
    parse_err("{" LLAMA_BASE "}", NULL, "model_type");
    parse_err("{'model_type':'llama','num_hidden_layers':4,'num_attention_heads':8,'vocab_size':10,"
              "'intermediate_size':8}",
              NULL, "hidden_size");
    parse_err("{'model_type':'llama','hidden_size':-64,'num_hidden_layers':4,'num_attention_heads':8,"
              "'vocab_size':10,'intermediate_size':8}",
              NULL, "'hidden_size' = -64");
    parse_err("{'model_type':'llama','hidden_size':64,'num_hidden_layers':400,'num_attention_heads':8,"
              "'vocab_size':10,'intermediate_size':8}",
              NULL, "num_hidden_layers");
    parse_err("{'model_type':'llama','hidden_size':64,'num_hidden_layers':4,'num_attention_heads':8,"
              "'vocab_size':100000000,'intermediate_size':8}",
              NULL, "vocab_size");
    parse_err("{'model_type':'llama'," LLAMA_BASE ",'num_key_value_heads':3}", NULL,
              "num_key_value_heads");
    parse_err("{'model_type':'llama','hidden_size':60,'num_hidden_layers':4,'num_attention_heads':8,"
              "'vocab_size':10,'intermediate_size':8}",
              NULL, "does not divide");
    parse_err("{'model_type':'llama'," LLAMA_BASE ",'hidden_size':'big'}", NULL, "not valid JSON");
    parse_err("{'model_type':'llama','hidden_size':'big','num_hidden_layers':4,'num_attention_heads':8,"
              "'vocab_size':10,'intermediate_size':8}",
              NULL, "must be an integer");
    parse_err("{'model_type':'llama'," LLAMA_BASE ",'rope_scaling':{'rope_type':'longrope','factor':2}}",
              NULL, "rope_scaling.rope_type");
    parse_err("{'model_type':'llama'," LLAMA_BASE ",'rope_scaling':{'rope_type':'llama3','factor':8,'original_max_position_embeddings':8192}}",
              NULL, "low_freq_factor");
    parse_err("{'model_type':'llama'," LLAMA_BASE ",'rope_theta':-1}", NULL, "rope_theta");
    parse_err("{'model_type':'llama'," LLAMA_BASE ",'rms_norm_eps':0}", NULL, "rms_norm_eps");
    parse_err("{'model_type':'llama'," LLAMA_BASE ",'eos_token_id':5000}", NULL, "eos_token_id");
    parse_err("{'model_type':'llama'," LLAMA_BASE ",'hidden_act':'relu2'}", NULL, "hidden_act");
    parse_err("{'model_type':'llama'," LLAMA_BASE ",'torch_dtype':'int8'}", NULL, "torch_dtype");
    parse_err("{'model_type':'llama'," LLAMA_BASE ",'head_dim':7}", NULL, "head_dim");
    parse_err("{'model_type':'gemma3_text'," LLAMA_BASE ",'layer_types':['full_attention']}", NULL,
              "layer_types");
    parse_err("{'model_type':'qwen3_moe'," LLAMA_BASE ",'mlp_only_layers':[9]}", NULL,
              "mlp_only_layers[0]");
    parse_err("{'model_type':'mixtral'," LLAMA_BASE ",'num_experts_per_tok':9}", NULL,
              "num_experts_per_tok");
    parse_err("[1]", NULL, "not a JSON object");
    /* fuzz finding: parser excerpts with raw newlines must not split the message */
    model_spec s;
    mx_error err;
    assert_int_equal(spec_parse(&s, "{\"model_type\": \"llama\", \"x\": [\n   \\\n ]}", NULL,
                                "m/config.json", &err), -1);
    assert_null(strchr(err.msg, '\n'));
    assert_int_equal(spec_parse(&s, q(0, "{'model_type':'bad\\nname'}"), NULL, "m/config.json", &err), -1);
    assert_null(strchr(err.msg, '\n'));
    parse_err("{'model_type':'llama'," LLAMA_BASE "}", "{'eos_token_id':'x'}", "generation_config.json");
    parse_err("{'model_type':'llama'," LLAMA_BASE "}", "{nope", "generation_config.json");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_4x),  cmocka_unit_test(test_llama_5x),
        cmocka_unit_test(test_mistral),   cmocka_unit_test(test_qwen2_qwen3),
        cmocka_unit_test(test_gemma3_4x_multimodal), cmocka_unit_test(test_gemma3_5x_text),
        cmocka_unit_test(test_moe),       cmocka_unit_test(test_quant),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
