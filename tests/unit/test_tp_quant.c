/* Tensor parallelism of MLX-quantized checkpoints on the CPU (docs/tensor-parallel.md): the
 * golden fixtures (llama, qwen2, gemma3_text; MoE: qwen3_moe with stacked switch_mlp experts,
 * mixtral) converted by `mlxcel convert -q` at 4 and 8 bits, group 32 (a rank's share of the
 * attention width is 32 at TP 2): TP=2 greedy tokens equal TP=1's and the first sampled
 * position's logits agree within 1e-4 relative (the row-parallel o_proj / down_proj sum per
 * rank, then across ranks: another float order). Refused with its reason: a group size that
 * does not divide a rank's width (g64). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "engine_collect.h"
#include "model/model.h"
#include "test_tmpdir.h"

/* fixture `name` converted to `out` (under g_tmp) at bits / group */
static void convert(const char *name, int bits, int group, char *out, size_t len) {
    const char *src = getenv("MLXCEL_SOURCE_DIR"), *bin = getenv("MLXCEL_BIN");
    if (!bin) fail_msg("MLXCEL_BIN is not set (run through ctest)");
    snprintf(out, len, "%s/%s-q%dg%d", g_tmp, name, bits, group);
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "'%s' convert --hf-path '%s/tests/fixtures/models/%s' --mlx-path '%s' -q --q-bits %d "
             "--q-group-size %d > '%s.log' 2>&1",
             bin, src ? src : ".", name, out, bits, group, out);
    if (system(cmd) != 0) fail_msg("convert failed: %s (log %s.log)", cmd, out);
}

static void test_tp2_equals_tp1_quantized(void **st) {
    (void)st;
    static const char *k_models[] = {"llama", "qwen2", "gemma3_text", "qwen3_moe", "mixtral"};
    static const int k_bits[] = {4, 8};
    const int32_t p0[] = {1, 17, 301, 42, 5, 77, 250}, p1[] = {9, 3, 480, 12};
    const int32_t *pr[2] = {p0, p1};
    const int np[2] = {7, 4}, nw[2] = {16, 16};
    const ec_variant v = {"batched", KV_STORAGE_PAGED, 512, 16, true, false};
    for (size_t f = 0; f < sizeof k_models / sizeof k_models[0]; f++)
        for (size_t b = 0; b < sizeof k_bits / sizeof k_bits[0]; b++) {
            char dir[1024];
            convert(k_models[f], k_bits[b], 32, dir, sizeof dir);
            mx_error err;
            model *m1 = NULL, *m2 = NULL;
            if (model_load_tp(&m1, dir, backend_cpu(), 1, &err)) fail_msg("%s: %s", dir, err.msg);
            if (model_load_tp(&m2, dir, backend_cpu(), 2, &err)) fail_msg("%s TP 2: %s", dir, err.msg);
            assert_int_equal(model_tp_size(m2), 2);
            ec_collect a, c;
            ec_run(m1, pr, np, nw, 2, &v, &a);
            ec_run(m2, pr, np, nw, 2, &v, &c);
            for (int s = 0; s < 2; s++) {
                assert_int_equal(a.n[s], 16);
                assert_int_equal(c.n[s], 16);
                for (int i = 0; i < 16; i++)
                    if (a.toks[s][i] != c.toks[s][i])
                        fail_msg("%s q%d: prompt %d token %d: TP 2 gave %d, TP 1 %d", k_models[f],
                                 k_bits[b], s, i, c.toks[s][i], a.toks[s][i]);
                assert_non_null(a.first_logits[s]);
                assert_non_null(c.first_logits[s]);
                const double re = ec_rel_err(c.first_logits[s], a.first_logits[s], a.vocab);
                if (re > 1e-4) fail_msg("%s q%d: first logits rel err %.3g", k_models[f], k_bits[b], re);
            }
            ec_free(&a);
            ec_free(&c);
            model_free(m1);
            model_free(m2);
        }
}

static void test_tp_quantized_refusals(void **st) {
    (void)st;
    char dir[1024];
    mx_error err;
    model *m = NULL;
    convert("llama", 4, 64, dir, sizeof dir); /* a rank's attention width 32 < group 64 */
    assert_int_equal(model_load_tp(&m, dir, backend_cpu(), 2, &err), -1);
    assert_non_null(strstr(err.msg, "quantization group 64"));
    assert_int_equal(model_load_tp(&m, dir, backend_cpu(), 1, &err), 0); /* TP 1 is fine */
    model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tp2_equals_tp1_quantized),
        cmocka_unit_test(test_tp_quantized_refusals),
    };
    return cmocka_run_group_tests(tests, tmp_setup, tmp_teardown);
}
