/* Server request parsing, flag/env parsing and Prometheus rendering. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <cmocka.h>

#include "server/srv_config.h"
#include "server/srv_internal.h"
#include "server/srv_metrics.h"
#include "server/srv_request.h"

static srv_config defaults(void) {
    srv_config c;
    srv_config_defaults(&c);
    return c;
}

static int parse(srv_request *r, srv_api api, const char *body, mx_error *err) {
    srv_config c = defaults();
    return srv_request_parse(r, api, body, strlen(body), &c, 1000, err);
}

static void test_chat_ok(void **st) {
    (void)st;
    srv_request r;
    mx_error err;
    const char *b = "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"s\"},"
                    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}],"
                    "\"max_tokens\":5,\"max_completion_tokens\":7,\"temperature\":0.5,\"top_p\":0.9,\"seed\":3,"
                    "\"stop\":[\"x\",\"yy\"],\"logit_bias\":{\"12\":-100},\"logprobs\":true,\"top_logprobs\":3,"
                    "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"user\":\"u\",\"unknown\":1}";
    assert_int_equal(parse(&r, SRV_API_CHAT, b, &err), 0);
    assert_int_equal(r.max_tokens, 7); /* max_completion_tokens wins */
    assert_true(r.sampling.temperature == 0.5f);
    assert_true(r.sampling.has_seed && r.sampling.seed == 3);
    assert_int_equal(r.n_stops, 2);
    assert_string_equal(r.stops[1], "yy");
    assert_int_equal(r.sampling.n_logit_bias, 1);
    assert_int_equal(r.sampling.logit_bias[0].id, 12);
    assert_true(r.sampling.logprobs && r.sampling.top_logprobs == 3);
    assert_true(r.stream && r.include_usage);
    assert_string_equal(json_string_value(json_object_get(json_array_get(r.messages, 1), "content")), "ab");
    assert_true(r.add_generation_prompt); /* the default */
    srv_request_free(&r);
    assert_int_equal(parse(&r, SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],"
                                             "\"add_generation_prompt\":false}", &err), 0);
    assert_false(r.add_generation_prompt);
    srv_request_free(&r);
}

/* A stand-in tokenizer: one id per byte (the byte's value), after BOS 999 with add_special. */
static int bytes_as_ids(void *ctx, const char *text, bool add_special, int32_t **ids, size_t *n,
                        mx_error *err) {
    (void)ctx, (void)err;
    const size_t b = add_special ? 1 : 0;
    *n = strlen(text) + b;
    *ids = malloc(*n * sizeof **ids + 1);
    if (b) (*ids)[0] = 999;
    for (size_t i = b; i < *n; i++) (*ids)[i] = (unsigned char)text[i - b];
    return 0;
}

/* Resolves a mixed prompt and compares it with want[0..n). */
static void check_mixed(srv_api api, const char *body, const int32_t *want, size_t n) {
    srv_request r;
    mx_error err;
    assert_int_equal(parse(&r, api, body, &err), 0);
    assert_non_null(r.prompt_mixed);
    assert_int_equal(srv_request_mixed_prompt(&r, bytes_as_ids, NULL, 1000, &err), 0);
    assert_null(r.prompt_mixed);
    assert_int_equal(r.n_prompt_ids, n);
    assert_memory_equal(r.prompt_ids, want, n * sizeof *want);
    srv_request_free(&r);
}

/* llama-server's mixed prompt: ids as given, strings tokenized in place, the special tokens
 * only for a string that comes first; a one-element list of one; anything else named. */
static void test_mixed_prompt(void **st) {
    (void)st;
    check_mixed(SRV_API_LLAMA_COMPLETION, "{\"prompt\":[7,\"ab\",8]}", (const int32_t[]){7, 'a', 'b', 8}, 4);
    check_mixed(SRV_API_LLAMA_COMPLETION, "{\"prompt\":[\"ab\",8,\"c\"]}",
                (const int32_t[]){999, 'a', 'b', 8, 'c'}, 5);
    check_mixed(SRV_API_COMPLETIONS, "{\"prompt\":[[5,\"\"]]}", (const int32_t[]){5}, 1);
    srv_request r;
    mx_error err;
    static const char *bad_bodies[] = {"{\"prompt\":[1,\"a\",2.5]}", "{\"prompt\":[1,\"a\",1000]}",
                                       "{\"prompt\":[1,\"a\",-1]}", "{\"prompt\":[1,null,\"a\"]}",
                                       "{\"prompt\":[[1,\"a\"],[2]]}"};
    for (size_t i = 0; i < sizeof bad_bodies / sizeof *bad_bodies; i++) {
        const bool ok = parse(&r, SRV_API_LLAMA_COMPLETION, bad_bodies[i], &err) == 0;
        assert_false(ok && srv_request_mixed_prompt(&r, bytes_as_ids, NULL, 1000, &err) == 0);
        assert_string_equal(r.bad_param, "prompt");
        srv_request_free(&r);
    }
    /* ids alone and text alone keep their own paths */
    assert_int_equal(parse(&r, SRV_API_LLAMA_COMPLETION, "{\"prompt\":[3,4]}", &err), 0);
    assert_null(r.prompt_mixed);
    assert_int_equal(r.n_prompt_ids, 2);
    assert_int_equal(srv_request_mixed_prompt(&r, bytes_as_ids, NULL, 1000, &err), 0); /* no-op */
    assert_int_equal(r.n_prompt_ids, 2);
    srv_request_free(&r);
}

/* /completion logit_bias [[string, bias]]: every token of the string gets the bias, after the
 * id entries; false bans them; an id out of the vocabulary is refused naming logit_bias. */
static void test_text_bias(void **st) {
    (void)st;
    srv_request r;
    mx_error err;
    assert_int_equal(parse(&r, SRV_API_LLAMA_COMPLETION,
                           "{\"prompt\":\"a\",\"logit_bias\":[[7,1.5],[\"AB\",-2],[\"C\",false]]}", &err), 0);
    assert_int_equal(r.n_bias_text, 2);
    assert_int_equal(r.sampling.n_logit_bias, 1);
    assert_int_equal(srv_request_text_bias(&r, bytes_as_ids, NULL, 1000, &err), 0);
    assert_int_equal(r.sampling.n_logit_bias, 4);
    assert_int_equal(r.sampling.logit_bias[1].id, 'A');
    assert_int_equal(r.sampling.logit_bias[2].id, 'B');
    assert_true(r.sampling.logit_bias[2].bias == -2.0f);
    assert_int_equal(r.sampling.logit_bias[3].id, 'C');
    assert_true(r.sampling.logit_bias[3].bias == -INFINITY);
    srv_request_free(&r);
    assert_int_equal(parse(&r, SRV_API_LLAMA_COMPLETION, "{\"prompt\":\"a\",\"logit_bias\":[[\"z\",1]]}", &err), 0);
    assert_int_equal(srv_request_text_bias(&r, bytes_as_ids, NULL, 100, &err), -1); /* 'z' = 122 */
    assert_string_equal(r.bad_param, "logit_bias");
    srv_request_free(&r);
}

/* seed -1 means random on every route (llama-server), any other value is a fixed seed */
static void test_seed(void **st) {
    (void)st;
    static const srv_api apis[] = {SRV_API_COMPLETIONS, SRV_API_LLAMA_COMPLETION};
    for (int i = 0; i < 2; i++) {
        srv_request r;
        mx_error err;
        assert_int_equal(parse(&r, apis[i], "{\"prompt\":\"a\",\"seed\":-1}", &err), 0);
        assert_false(r.sampling.has_seed);
        srv_request_free(&r);
        assert_int_equal(parse(&r, apis[i], "{\"prompt\":\"a\",\"seed\":-2}", &err), 0);
        assert_true(r.sampling.has_seed && r.sampling.seed == (uint64_t)-2);
        srv_request_free(&r);
    }
}

static void test_defaults_from_config(void **st) {
    (void)st;
    srv_request r;
    mx_error err;
    assert_int_equal(parse(&r, SRV_API_COMPLETIONS, "{\"prompt\":[1,2,3]}", &err), 0);
    assert_int_equal((int)r.n_prompt_ids, 3);
    assert_int_equal(r.max_tokens, -1);
    assert_true(r.sampling.temperature == 0.8f && r.sampling.top_k == 40);
    assert_false(r.sampling.has_seed);
    srv_request_free(&r);
}

/* Each bad body must fail and name its field. */
/* OpenAI n and /v1/completions' list of prompts: element 0 parsed as the prompt, the list
 * kept for the server; best_of equal to n accepted. */
static void test_choices(void **st) {
    (void)st;
    srv_request r;
    mx_error err;
    assert_int_equal(parse(&r, SRV_API_COMPLETIONS, "{\"prompt\":[\"ab\",[5,6],[7,\"c\"]],\"n\":3,\"best_of\":3}", &err), 0);
    assert_int_equal(r.n_choices, 3);
    assert_non_null(r.prompt_list);
    assert_int_equal(json_array_size(r.prompt_list), 3);
    assert_string_equal(r.prompt_text, "ab");
    srv_request_free(&r);
    assert_int_equal(parse(&r, SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"n\":128}", &err), 0);
    assert_int_equal(r.n_choices, 128);
    assert_null(r.prompt_list);
    srv_request_free(&r);
    /* a choice's copy: sampling, logit_bias and stops owned apart, no prompt */
    assert_int_equal(parse(&r, SRV_API_COMPLETIONS, "{\"prompt\":[\"ab\",\"cd\"],\"n\":2,\"stop\":[\"x\",\"yz\"],"
                                                    "\"logit_bias\":{\"5\":2},\"temperature\":0.5,\"seed\":9}", &err), 0);
    srv_request c;
    assert_int_equal(srv_request_copy_choice(&c, &r, &err), 0);
    assert_null(c.prompt_text);
    assert_null(c.prompt_list);
    assert_int_equal(c.n_stops, 2);
    assert_string_equal(c.stops[1], "yz");
    assert_ptr_not_equal(c.stops[1], r.stops[1]);
    assert_int_equal(c.sampling.n_logit_bias, 1);
    assert_int_equal(c.sampling.logit_bias[0].id, 5);
    assert_ptr_not_equal(c.sampling.logit_bias, r.sampling.logit_bias);
    assert_true(c.sampling.temperature == 0.5f && c.sampling.has_seed && c.sampling.seed == 9);
    assert_int_equal(c.n_choices, 2);
    srv_request_free(&c);
    srv_request_free(&r);
    assert_int_equal(parse(&r, SRV_API_COMPLETIONS, "{\"prompt\":[\"ab\"]}", &err), 0);
    assert_int_equal(r.n_choices, 1);
    assert_null(r.prompt_list); /* a one-element list is one prompt */
    srv_request_free(&r);
}

/* Structured output: what compiles, and that every choice holds the grammar. */
static void test_structured(void **st) {
    (void)st;
    srv_config d;
    srv_config_defaults(&d);
    mx_error err;
    srv_request r, k;
    static const char *bodies[] = {
        "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"response_format\":{\"type\":\"json_object\"}}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"w\",\"strict\":true,\"schema\":{\"type\":\"boolean\"}}}}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"grammar\":\"root ::= \\\"x\\\"\"}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"json_schema\":true}",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
        if (srv_request_parse(&r, SRV_API_CHAT, bodies[i], strlen(bodies[i]), &d, 100, &err)) fail_msg("%s: %s", bodies[i], err.msg);
        assert_non_null(r.grammar);
        assert_int_equal(srv_request_copy_choice(&k, &r, &err), 0);
        assert_ptr_equal(k.grammar, r.grammar);
        srv_request_free(&r); /* the choice keeps its own reference */
        assert_true(grammar_accepts(k.grammar, i == 2 ? "x" : i == 1 ? "true" : "{}", i == 1 ? 4 : i == 2 ? 1 : 2));
        srv_request_free(&k);
    }
    const char *text = "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"response_format\":{\"type\":\"text\"},\"grammar\":\"\"}";
    assert_int_equal(srv_request_parse(&r, SRV_API_CHAT, text, strlen(text), &d, 100, &err), 0);
    assert_null(r.grammar);
    srv_request_free(&r);
    srv_grammar_cache_clear();
}

static void test_rejections(void **st) {
    (void)st;
    static const struct { srv_api api; const char *body, *field; } k[] = {
        {SRV_API_CHAT, "{\"messages\":[", "body"},
        {SRV_API_CHAT, "[]", "body"},
        {SRV_API_CHAT, "{}", "messages"},
        {SRV_API_CHAT, "{\"messages\":[]}", "messages"},
        {SRV_API_CHAT, "{\"messages\":[{\"role\":\"x\",\"content\":\"a\"}]}", "messages[0].role"},
        {SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", "messages[0].content"},
        {SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"temperature\":3}", "temperature"},
        {SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"n\":129}", "n"},
        {SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000\"}]}", "body"},
        {SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"top_logprobs\":2}", "top_logprobs"},
        {SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"stream_options\":{}}", "stream_options"},
        {SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"response_format\":{\"type\":\"xml\"}}", "response_format"},
        {SRV_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"not\":{}}}}}", "response_format"},
        {SRV_API_COMPLETIONS, "{\"prompt\":\"a\",\"grammar\":\"root ::= x\"}", "grammar"},
        {SRV_API_LLAMA_COMPLETION, "{\"prompt\":\"a\",\"grammar\":5}", "grammar"},
        {SRV_API_LLAMA_COMPLETION, "{\"prompt\":\"a\",\"json_schema\":{\"type\":\"integer\",\"multipleOf\":2}}", "json_schema"},
        {SRV_API_LLAMA_COMPLETION, "{\"prompt\":\"a\",\"json_schema\":{},\"grammar\":\"root ::= \\\"a\\\"\"}", "grammar"},
        {SRV_API_COMPLETIONS, "{\"prompt\":\"a\",\"max_tokens\":0}", "max_tokens"},
        {SRV_API_COMPLETIONS, "{\"prompt\":\"a\",\"max_tokens\":1.5}", "max_tokens"},
        {SRV_API_COMPLETIONS, "{\"prompt\":\"a\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", "stop"},
        {SRV_API_COMPLETIONS, "{\"prompt\":\"a\",\"logit_bias\":{\"1000\":1}}", "logit_bias"},
        {SRV_API_COMPLETIONS, "{\"prompt\":\"a\",\"logit_bias\":{\"1\":101}}", "logit_bias"},
        {SRV_API_LLAMA_COMPLETION, "{\"prompt\":[\"a\",\"b\"]}", "prompt"},
        {SRV_API_COMPLETIONS, "{\"prompt\":[\"a\",[]]}", "prompt"},
        {SRV_API_COMPLETIONS, "{\"prompt\":[\"a\",[1,1000]]}", "prompt"},
        {SRV_API_COMPLETIONS, "{\"prompt\":[\"a\",null]}", "prompt"},
        {SRV_API_COMPLETIONS, "{\"prompt\":[\"a\",\"b\",\"c\"],\"n\":43}", "n"},
        {SRV_API_COMPLETIONS, "{\"prompt\":\"a\",\"n\":2,\"best_of\":3}", "best_of"},
        {SRV_API_COMPLETIONS, "{\"prompt\":[1,-1]}", "prompt"},
        {SRV_API_COMPLETIONS, "{\"prompt\":\"a\",\"echo\":true}", "echo"},
        {SRV_API_COMPLETIONS, "{\"prompt\":\"a\",\"logprobs\":6}", "logprobs"},
        {SRV_API_COMPLETIONS, "{\"prompt\":\"a\",\"presence_penalty\":\"x\"}", "presence_penalty"},
        {SRV_API_COMPLETIONS, "{\"prompt\":\"a\",\"user\":5}", "user"},
        {SRV_API_COMPLETIONS, "{\"prompt\":\"a\",\"prompt\":\"b\"}", "body"},
        {SRV_API_LLAMA_COMPLETION, "{\"prompt\":\"a\",\"n_predict\":-2}", "n_predict"},
        {SRV_API_LLAMA_COMPLETION, "{\"prompt\":\"a\",\"logit_bias\":[[1]]}", "logit_bias"},
        /* accepted by the old ranges, refused by the sampler (sampling_params_validate) */
        {SRV_API_LLAMA_COMPLETION, "{\"prompt\":\"a\",\"repeat_penalty\":0}", "repeat_penalty"},
        {SRV_API_COMPLETIONS, "{\"prompt\":\"a\",\"repeat_penalty\":0}", "repeat_penalty"},
        {SRV_API_LLAMA_COMPLETION, "{\"prompt\":\"a\",\"logit_bias\":[[1,1e300]]}", "logit_bias"},
        {SRV_API_LLAMA_COMPLETION, "{\"prompt\":\"a\",\"logit_bias\":[[1,-1e39]]}", "logit_bias"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        srv_request r;
        mx_error err;
        int rc = parse(&r, k[i].api, k[i].body, &err);
        if (rc != -1 || strcmp(r.bad_param, k[i].field)) fail_msg("case %zu (%s): rc %d param '%s' msg '%s'", i, k[i].body, rc, r.bad_param, err.msg);
        assert_true(strstr(err.msg, k[i].field) == err.msg);
        srv_request_free(&r);
    }
}

static void test_llama_completion(void **st) {
    (void)st;
    srv_request r;
    mx_error err;
    assert_int_equal(parse(&r, SRV_API_LLAMA_COMPLETION,
                           "{\"prompt\":\"a\",\"n_predict\":9,\"n_probs\":2,\"logit_bias\":[[5,false],[6,1.5]],\"seed\":-1}", &err), 0);
    assert_int_equal(r.max_tokens, 9);
    assert_true(r.sampling.logprobs && r.sampling.top_logprobs == 2);
    assert_int_equal(r.sampling.n_logit_bias, 2);
    assert_true(r.sampling.logit_bias[0].bias < -1e30f);
    assert_false(r.sampling.has_seed);
    srv_request_free(&r);
}

static void test_config_env_and_flags(void **st) {
    (void)st;
    setenv("LLAMA_ARG_N_PARALLEL", "6", 1);
    setenv("LLAMA_ARG_CTX_SIZE", "4096", 1);
    setenv("LLAMA_ARG_ENDPOINT_METRICS", "enabled", 1);
    srv_config c = defaults();
    mx_error err;
    char *argv[] = {"serve", "-c", "1024", "--alias=a,b", "--decode-storage-backend", "paged", "-ub", "4096", NULL};
    assert_int_equal(srv_config_parse(&c, 8, argv, stdout, &err), 0);
    assert_int_equal(c.n_parallel, 6);
    assert_int_equal(c.ctx_size, 1024);
    assert_true(c.metrics);
    assert_int_equal(c.n_aliases, 2);
    assert_string_equal(c.aliases[1], "b");
    assert_int_equal(srv_config_finalize(&c, 8192, &err), 0);
    assert_int_equal(c.ubatch_size, 2048); /* clamped to the logical batch */
    assert_int_equal(c.prefill_chunk_size, 2048);
    assert_int_equal(c.max_batch_size, 6);
    unsetenv("LLAMA_ARG_N_PARALLEL");
    unsetenv("LLAMA_ARG_CTX_SIZE");
    unsetenv("LLAMA_ARG_ENDPOINT_METRICS");

    char *bad1[] = {"serve", "--decode-storage-backend", "fast", NULL};
    c = defaults();
    assert_int_equal(srv_config_parse(&c, 3, bad1, stdout, &err), -1);
    char *bad2[] = {"serve", "--port", "70000", NULL};
    c = defaults();
    assert_int_equal(srv_config_parse(&c, 3, bad2, stdout, &err), -1);
    assert_non_null(strstr(err.msg, "--port"));
    char *bad3[] = {"serve", "--frobnicate", NULL};
    c = defaults();
    assert_int_equal(srv_config_parse(&c, 2, bad3, stdout, &err), -1);
    setenv("LLAMA_ARG_PORT", "abc", 1);
    c = defaults();
    char *none[] = {"serve", NULL};
    assert_int_equal(srv_config_parse(&c, 1, none, stdout, &err), -1);
    assert_non_null(strstr(err.msg, "LLAMA_ARG_PORT"));
    unsetenv("LLAMA_ARG_PORT");
    /* -ctk / -ctv and llama-server's LLAMA_ARG_CACHE_TYPE_K / _V (a flag wins) */
    setenv("LLAMA_ARG_CACHE_TYPE_K", "q8_0", 1);
    setenv("LLAMA_ARG_CACHE_TYPE_V", "q4_0", 1);
    c = defaults();
    char *ct[] = {"serve", "-ctv", "f16", NULL};
    assert_int_equal(srv_config_parse(&c, 3, ct, stdout, &err), 0);
    assert_string_equal(c.cache_type_k, "q8_0");
    assert_string_equal(c.cache_type_v, "f16");
    setenv("LLAMA_ARG_CACHE_TYPE_V", "q5_1", 1);
    c = defaults();
    assert_int_equal(srv_config_parse(&c, 1, none, stdout, &err), -1);
    assert_non_null(strstr(err.msg, "LLAMA_ARG_CACHE_TYPE_V: cache type q5_1 (llama.cpp) is not supported; "
                                    "supported: f32, f16, bf16, q8_0, q4_0"));
    unsetenv("LLAMA_ARG_CACHE_TYPE_K");
    unsetenv("LLAMA_ARG_CACHE_TYPE_V");
    char *bad5[] = {"serve", "--cache-type-k", "iq4_nl", NULL};
    c = defaults();
    assert_int_equal(srv_config_parse(&c, 3, bad5, stdout, &err), -1);
    assert_non_null(strstr(err.msg, "--cache-type-k: cache type iq4_nl (llama.cpp) is not supported"));
    c = defaults();
    assert_string_equal(c.cache_type_k, ""); /* unset: the backend's type */
    /* a default the sampler would refuse in every request is refused at start-up */
    char *bad4[] = {"serve", "--repeat-penalty", "0", NULL};
    c = defaults();
    assert_int_equal(srv_config_parse(&c, 3, bad4, stdout, &err), 0);
    assert_int_equal(srv_config_finalize(&c, 8192, &err), -1);
    assert_non_null(strstr(err.msg, "--repeat-penalty"));
}

static void test_metrics_render(void **st) {
    (void)st;
    srv_metrics *m = srv_metrics_new();
    srv_metrics_add(m, SM_HTTP_RESPONSES_TOTAL, "200", 2);
    srv_metrics_add(m, SM_HTTP_RESPONSES_TOTAL, "418", 1);
    srv_metrics_observe(m, SM_TTFT_SECONDS, 0.03);
    srv_metrics_observe(m, SM_TTFT_SECONDS, 100);
    srv_engine_stats es = {0};
    es.kv_blocks_total = 10;
    es.kv_blocks_used = 4;
    es.decode_rows_total = 123;
    es.preemptions_total = 3;
    srv_metrics_from_engine(m, &es);
    char *text;
    size_t len;
    assert_int_equal(srv_metrics_render(m, &text, &len), 0);
    assert_non_null(strstr(text, "mlxcel_http_responses_total{code=\"200\"} 2\n"));
    assert_non_null(strstr(text, "mlxcel_http_responses_total{code=\"other\"} 1\n"));
    assert_non_null(strstr(text, "mlxcel_time_to_first_token_seconds_bucket{le=\"0.025\"} 0\n"));
    assert_non_null(strstr(text, "mlxcel_time_to_first_token_seconds_bucket{le=\"0.05\"} 1\n"));
    assert_non_null(strstr(text, "mlxcel_time_to_first_token_seconds_bucket{le=\"60\"} 1\n"));
    assert_non_null(strstr(text, "mlxcel_time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\n"));
    assert_non_null(strstr(text, "mlxcel_kv_blocks_free 6\n"));
    /* mlxcel loadtest's server breakdown reads these two (rows per step, preemptions) */
    assert_non_null(strstr(text, "# TYPE mlxcel_decode_rows_total counter\nmlxcel_decode_rows_total 123\n"));
    assert_non_null(strstr(text, "# TYPE mlxcel_preemptions_total counter\nmlxcel_preemptions_total 3\n"));
    assert_non_null(strstr(text, "# TYPE llamacpp:requests_deferred gauge\n"));
    free(text);
    srv_metrics_free(m);
}

/* An error reply is one JSON object whose message is one line of valid UTF-8, whatever request
 * bytes the message quotes (fuzz/regress/route_detokenize, route_apply_template: jansson's
 * "near '...'" held a raw newline, or half of a UTF-8 sequence, and the reply had no body). */
static void test_error_reply_one_line(void **st) {
    (void)st;
    srv_config cfg;
    srv_config_defaults(&cfg);
    static const char *bodies[] = {"\"ok\\\n\0\0\0" "0}", "{\"prompt\":\"{\\\xde\x9c\x96\x8ey\"}",
                                   "{\"a\":\"\xc3\"}", "{\"messages\": [\n\t\x7f"};
    static const size_t lens[] = {10, 0, 0, 0};
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        srv_request r;
        mx_error err;
        const size_t len = lens[i] ? lens[i] : strlen(bodies[i]);
        assert_int_equal(srv_request_parse(&r, SRV_API_COMPLETIONS, bodies[i], len, &cfg, 256, &err), -1);
        char *reply = srv_resp_error(400, err.msg, r.bad_param);
        srv_request_free(&r);
        assert_non_null(reply);
        json_t *o = json_loads(reply, 0, NULL); /* jansson refuses invalid UTF-8 */
        assert_non_null(o);
        const char *msg = json_string_value(json_object_get(json_object_get(o, "error"), "message"));
        assert_non_null(msg);
        assert_true(strlen(msg) > 10);
        for (const char *p = msg; *p; p++) assert_true((unsigned char)*p >= 0x20 && *p != 0x7f);
        json_decref(o);
        free(reply);
    }
    /* a message with no quoted bytes is kept as it is */
    char *reply = srv_resp_error(400, "max_tokens: expected an integer >= 1 (\xc3\xa9 \"x\")", "max_tokens");
    assert_non_null(strstr(reply, "\"message\":\"max_tokens: expected an integer >= 1 (\xc3\xa9 \\\"x\\\")\""));
    free(reply);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_ok),          cmocka_unit_test(test_defaults_from_config),
        cmocka_unit_test(test_rejections),
        cmocka_unit_test(test_structured),       cmocka_unit_test(test_llama_completion),
        cmocka_unit_test(test_choices),
        cmocka_unit_test(test_config_env_and_flags), cmocka_unit_test(test_metrics_render),
        cmocka_unit_test(test_seed),             cmocka_unit_test(test_text_bias), cmocka_unit_test(test_mixed_prompt),
        cmocka_unit_test(test_error_reply_one_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
