/* The loader's grouped upload of Q/K/V (model_load.c bind_qkv, backend op upload_group): a
 * backend that takes groups is handed each layer's dense Q, K, V once, in that order, with the
 * shapes the layer asks for; the bound model has the same parameter count and gives the same
 * greedy tokens as one loaded tensor by tensor. Checked on the CPU backend with upload_group
 * recording the calls (the CUDA one places the three back to back: tests/gpu). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#include <string.h>

#include "backend/backend.h"
#include "engine_collect.h"
#include "model/model.h"

static backend_ops g_grp;
static int g_calls, g_bad;
static int64_t g_expect[3]; /* rows of Q, K, V */
static int64_t g_cols;

static int grp_upload(mx_tensor *dst, const mx_tensor *host, int n, mx_error *err) {
    g_calls++;
    if (n != 3) g_bad++;
    for (int i = 0; i < n && i < 3; i++) {
        if (host[i].ndim != 2 || host[i].shape[0] != g_expect[i] || host[i].shape[1] != g_cols)
            g_bad++;
        if (backend_cpu()->upload(&dst[i], &host[i], err)) return -1;
    }
    return 0;
}

static void test_group_matches_plain(void **st) {
    (void)st;
    static const char *k_fix[] = {"llama", "qwen2", "qwen3", "gemma3_text"};
    g_grp = *backend_cpu();
    g_grp.upload_group = grp_upload;
    assert_null(backend_cpu()->upload_group); /* the CPU keeps tensor-by-tensor uploads */
    for (size_t f = 0; f < sizeof k_fix / sizeof k_fix[0]; f++) {
        const char *src = getenv("MLXCEL_SOURCE_DIR");
        char dir[1400];
        snprintf(dir, sizeof dir, "%s/tests/fixtures/models/%s", src ? src : ".", k_fix[f]);
        mx_error err;
        model *mp = NULL, *mg = NULL;
        if (model_load_tp(&mp, dir, backend_cpu(), 1, &err)) fail_msg("%s: %s", dir, err.msg);
        const model_spec *s = model_spec_of(mp);
        g_expect[0] = (int64_t)s->n_heads * s->head_dim;
        g_expect[1] = g_expect[2] = (int64_t)s->n_kv_heads * s->head_dim;
        g_cols = s->hidden_size;
        g_calls = g_bad = 0;
        if (model_load_tp(&mg, dir, &g_grp, 1, &err)) fail_msg("%s grouped: %s", dir, err.msg);
        if (g_calls != s->n_layers || g_bad)
            fail_msg("%s: %d group uploads (%d layers), %d with a wrong count or shape", k_fix[f],
                     g_calls, s->n_layers, g_bad);
        assert_int_equal(model_n_params(mg), model_n_params(mp));
        assert_int_equal(model_weight_bytes(mg), model_weight_bytes(mp));
        char what[64];
        snprintf(what, sizeof what, "%s grouped", k_fix[f]);
        ec_expect_same_tokens(mp, mg, 10, what);
        model_free(mp);
        model_free(mg);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_group_matches_plain),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
