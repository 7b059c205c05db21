/* The runtime (src/runtime): one opener for every front end. Checked on the committed demo
 * model (CPU): tokenizer / template / engine as asked, template discovery, the sampling
 * defaults of generation_config.json (transformers' do_sample rule), and the server taking
 * them as its defaults unless a flag set them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "runtime/runtime.h"
#include "server/srv_backend_engine.h"
#include "server/srv_config.h"
#include "test_tmpdir.h"

static char g_demo[1024];

static void write_file(const char *dir, const char *name, const char *text) {
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* DIR with the demo model's files linked in, and its own generation_config.json. */
static void demo_copy(const char *dir, const char *gen_config) {
    mkdir(dir, 0755);
    static const char *files[] = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char src[1200], dst[1200];
        snprintf(src, sizeof src, "%s/%s", g_demo, files[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
        unlink(dst);
        assert_int_equal(symlink(src, dst), 0);
    }
    write_file(dir, "generation_config.json", gen_config);
}

static void test_open_demo(void **st) {
    (void)st;
    rt_opts o;
    rt_opts_default(&o);
    o.model_dir = g_demo;
    runtime rt;
    mx_error err = {0};
    assert_int_equal(runtime_open(&rt, &o, &err), 0);
    assert_non_null(rt.m);
    assert_non_null(rt.tok);
    assert_non_null(rt.tpl);
    assert_string_equal(rt.tpl_src, "tokenizer_config.json");
    assert_null(rt.e);
    /* the demo's generation_config.json says do_sample false: greedy */
    assert_true(rt.sampling.temperature <= 0);
    assert_int_equal(rt.gen_fields, 0);
    engine_params ep;
    engine_params_default(&ep, rt.spec);
    assert_int_equal(runtime_start_engine(&rt, &ep, &err), 0);
    assert_non_null(rt.e);
    assert_int_not_equal(runtime_start_engine(&rt, &ep, &err), 0); /* once */
    runtime_close(&rt);
    assert_null(rt.m);

    o.tokenizer = RT_TOK_NONE;
    assert_int_equal(runtime_open(&rt, &o, &err), 0);
    assert_null(rt.tok);
    assert_null(rt.tpl); /* a template needs the tokenizer */
    runtime_close(&rt);

    o.tokenizer = RT_TOK_OPTIONAL;
    o.no_chat_template = true;
    assert_int_equal(runtime_open(&rt, &o, &err), 0);
    assert_non_null(rt.tok);
    assert_null(rt.tpl);
    runtime_close(&rt);
}

static void test_open_errors(void **st) {
    (void)st;
    rt_opts o;
    rt_opts_default(&o);
    runtime rt;
    mx_error err = {0};
    assert_int_not_equal(runtime_open(&rt, &o, &err), 0);
    assert_non_null(strstr(err.msg, "-m DIR"));
    /* a model without tokenizer.json: optional is fine, required names the file */
    char dir[400];
    snprintf(dir, sizeof dir, "%s/notok", g_tmp);
    mkdir(dir, 0755);
    char src[1200], dst[1200];
    snprintf(src, sizeof src, "%s/config.json", g_demo);
    snprintf(dst, sizeof dst, "%s/config.json", dir);
    assert_int_equal(symlink(src, dst), 0);
    snprintf(src, sizeof src, "%s/model.safetensors", g_demo);
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    assert_int_equal(symlink(src, dst), 0);
    o.model_dir = dir;
    assert_int_equal(runtime_open(&rt, &o, &err), 0);
    assert_null(rt.tok);
    runtime_close(&rt);
    o.tokenizer = RT_TOK_REQUIRED;
    assert_int_not_equal(runtime_open(&rt, &o, &err), 0);
    assert_non_null(strstr(err.msg, "tokenizer.json"));
    /* no GPU here (CI, this machine): the CUDA backend is refused before anything loads */
    o.tokenizer = RT_TOK_NONE;
    o.device = "cuda";
    assert_int_not_equal(runtime_open(&rt, &o, &err), 0);
    assert_null(rt.m);
}

static void test_template_source(void **st) {
    (void)st;
    char dir[400], src[1024];
    snprintf(dir, sizeof dir, "%s/tpl", g_tmp);
    mkdir(dir, 0755);
    runtime_template_source(dir, NULL, src, sizeof src);
    assert_string_equal(src, "");
    runtime_template_source(dir, "/x/t.jinja", src, sizeof src);
    assert_string_equal(src, "/x/t.jinja");
    write_file(dir, "tokenizer_config.json", "{\"chat_template\": null}");
    runtime_template_source(dir, NULL, src, sizeof src);
    assert_string_equal(src, ""); /* a null template is none */
    write_file(dir, "tokenizer_config.json", "{\"chat_template\": \"{{ x }}\"}");
    runtime_template_source(dir, NULL, src, sizeof src);
    assert_string_equal(src, "tokenizer_config.json");
    write_file(dir, "tokenizer_config.json", "{not json");
    runtime_template_source(dir, NULL, src, sizeof src);
    assert_string_equal(src, "tokenizer_config.json"); /* named: the loader says why */
    write_file(dir, "chat_template.jinja", "{{ x }}");
    runtime_template_source(dir, NULL, src, sizeof src);
    assert_string_equal(src, "chat_template.jinja");
}

static void test_generation_defaults(void **st) {
    (void)st;
    model_spec s;
    memset(&s, 0, sizeof s);
    s.gen_do_sample = 1;
    s.gen_temperature = 0.6f;
    s.gen_top_p = 0.9f;
    s.gen_top_k = 20;
    s.gen_repetition_penalty = 1.1f;
    sampling_params sp;
    sampling_params_default(&sp);
    unsigned f = 0;
    runtime_generation_defaults(&s, &sp, &f);
    assert_int_equal(f, RT_GEN_TEMPERATURE | RT_GEN_TOP_P | RT_GEN_TOP_K | RT_GEN_REPEAT_PENALTY);
    assert_true(sp.temperature == 0.6f && sp.top_p == 0.9f && sp.top_k == 20 && sp.repeat_penalty == 1.1f);
    /* do_sample false: transformers ignores the sampling fields, keeps the penalty */
    s.gen_do_sample = 0;
    sampling_params_default(&sp);
    runtime_generation_defaults(&s, &sp, &f);
    assert_int_equal(f, RT_GEN_REPEAT_PENALTY);
    assert_true(sp.temperature <= 0 && sp.top_k == 0 && sp.repeat_penalty == 1.1f);
    /* do_sample with no temperature: transformers' default 1.0 */
    s.gen_do_sample = 1;
    s.gen_temperature = -1;
    s.gen_top_p = -1;
    s.gen_top_k = 0;
    s.gen_repetition_penalty = -1;
    sampling_params_default(&sp);
    runtime_generation_defaults(&s, &sp, &f);
    assert_int_equal(f, RT_GEN_TEMPERATURE);
    assert_true(sp.temperature == 1.0f);
}

/* The server: generation_config.json fills the defaults no flag set. */
static void test_server_defaults(void **st) {
    (void)st;
    char dir[400];
    snprintf(dir, sizeof dir, "%s/sampled", g_tmp);
    demo_copy(dir, "{\"do_sample\": true, \"temperature\": 0.6, \"top_p\": 0.9, \"top_k\": 20,"
                   " \"eos_token_id\": 2}");
    for (int flagged = 0; flagged < 2; flagged++) {
        srv_config c;
        srv_config_defaults(&c);
        char *argv[] = {"serve", "-m", dir, "--temp", "0.3"};
        mx_error err = {0};
        assert_int_equal(srv_config_parse(&c, flagged ? 5 : 3, argv, stdout, &err), 0);
        assert_int_equal(c.sampling_set, flagged ? RT_GEN_TEMPERATURE : 0u);
        srv_backend be;
        assert_int_equal(srv_backend_engine_open(&be, &c, &err), 0);
        assert_true(c.temperature == (flagged ? 0.3f : 0.6f));
        assert_true(c.top_p == 0.9f);
        assert_int_equal(c.top_k, 20);
        assert_true(c.min_p == 0.05f); /* not in generation_config: llama-server's default */
        srv_backend_engine_close(&be);
    }
}

int main(void) {
    const char *src = getenv("MLXCEL_SOURCE_DIR");
    snprintf(g_demo, sizeof g_demo, "%s/models/wordnet-chat-16m", src ? src : ".");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_demo),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_template_source),
        cmocka_unit_test(test_generation_defaults),
        cmocka_unit_test(test_server_defaults),
    };
    return cmocka_run_group_tests(tests, tmp_setup, tmp_teardown);
}
