/* Byte parity with transformers' apply_chat_template. The expected renders are produced on a
 * machine with transformers by tools/reference/make_template_fixtures.py into
 * tests/fixtures/templates/<llama3|qwen3|mistral|gemma3>.json; each holds the template text, the
 * special tokens, and per case the conversation index (into conversations.json),
 * add_generation_prompt, extra variables, and "expected" text or an "error".
 * A missing fixture fails the test: parity is what this module promises.
 * Usage: test_chat_template_parity [FIXTURE_DIR NAME...]: other fixtures in the same form, e.g.
 * renders of more checkpoints' templates by tools/reference/node/template_fixtures.mjs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "text/chat_template.h"

static const char *const k_names[] = {"llama3", "qwen3", "mistral", "gemma3"};
static const char *const *g_names = k_names;
static size_t g_n_names = sizeof k_names / sizeof k_names[0];
static const char *g_dir; /* NULL: the committed fixtures */

static json_t *load_json(const char *rel) {
    const char *root = getenv("MLXCEL_SOURCE_DIR");
    char path[1024];
    if (rel[0] == '/') snprintf(path, sizeof path, "%s", rel);
    else snprintf(path, sizeof path, "%s/%s", root ? root : ".", rel);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) fprintf(stderr, "%s: %s (expected renders come from tools/reference/make_template_fixtures.py)\n",
                    path, je.text);
    return j;
}

/* Shows where two renders first differ. */
static void show_diff(const char *want, const char *got) {
    size_t i = 0;
    while (want[i] && want[i] == got[i]) i++;
    size_t from = i > 40 ? i - 40 : 0;
    fprintf(stderr, "  first difference at byte %zu\n  want: ...%.80s\n  got:  ...%.80s\n", i, want + from,
            got + from);
}

/* Writes a checkpoint dir with the fixture's template and tokens so that the whole
 * chat_template_load + chat_template_apply path is what gets compared. */
static int make_model_dir(const json_t *fx, char *dir, size_t cap) {
    snprintf(dir, cap, "/tmp/mlxcel_parity_XXXXXX");
    if (!mkdtemp(dir)) return -1;
    json_t *cfg = json_object();
    json_object_set(cfg, "chat_template", json_object_get(fx, "chat_template"));
    const char *toks[] = {"bos_token", "eos_token", "pad_token", "unk_token"};
    for (int i = 0; i < 4; i++) {
        json_t *v = json_object_get(fx, toks[i]);
        if (json_is_string(v)) json_object_set(cfg, toks[i], v);
    }
    char path[1100];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    int rc = json_dump_file(cfg, path, 0);
    json_decref(cfg);
    return rc;
}

static void test_parity(void **st) {
    (void)st;
    json_t *convs_doc = load_json("tests/fixtures/templates/conversations.json");
    assert_non_null(convs_doc);
    json_t *convs = json_object_get(convs_doc, "conversations");
    assert_true(json_is_array(convs));
    int failures = 0, checked = 0, missing = 0;
    for (size_t t = 0; t < g_n_names; t++) {
        char rel[1024];
        if (g_dir) snprintf(rel, sizeof rel, "%s/%s.json", g_dir, g_names[t]);
        else snprintf(rel, sizeof rel, "tests/fixtures/templates/%s.json", g_names[t]);
        json_t *fx = load_json(rel);
        if (!fx) {
            missing++;
            continue;
        }
        char dir[256];
        assert_int_equal(make_model_dir(fx, dir, sizeof dir), 0);
        chat_template *ct = NULL;
        mx_error err = {0};
        if (chat_template_load(&ct, dir, NULL, &err)) {
            fprintf(stderr, "%s: template does not compile: %s\n", g_names[t], err.msg);
            failures++;
        }
        size_t i;
        json_t *c;
        json_array_foreach(ct ? json_object_get(fx, "cases") : NULL, i, c) {
            json_int_t conv_id = json_integer_value(json_object_get(c, "conversation"));
            json_t *conv = NULL, *it;
            size_t k;
            json_array_foreach(convs, k, it)
                if (json_integer_value(json_object_get(it, "id")) == conv_id) conv = it;
            assert_non_null(conv);
            bool agp = json_is_true(json_object_get(c, "add_generation_prompt"));
            json_t *extra = json_deep_copy(json_object_get(c, "extra"));
            if (!extra) extra = json_object();
            json_t *tools = json_object_get(conv, "tools");
            if (tools && !json_object_get(extra, "tools")) json_object_set(extra, "tools", tools);
            char *out = NULL;
            int rc = chat_template_apply(ct, json_object_get(conv, "messages"), extra, agp, &out, &err);
            const char *want = json_string_value(json_object_get(c, "expected"));
            const char *want_err = json_string_value(json_object_get(c, "error"));
            const char *err_type = json_string_value(json_object_get(c, "error_type"));
            checked++;
            if (want) {
                if (rc) {
                    fprintf(stderr, "%s case %zu (conversation %lld, agp=%d): error: %s\n", g_names[t], i,
                            (long long)conv_id, agp, err.msg);
                    failures++;
                } else if (strcmp(out, want)) {
                    fprintf(stderr, "%s case %zu (conversation %lld, agp=%d): render differs\n", g_names[t], i,
                            (long long)conv_id, agp);
                    show_diff(want, out);
                    failures++;
                }
            } else {
                /* transformers raised: we must fail too; a template's own raise_exception
                 * message (TemplateError) must come through. */
                if (!rc) {
                    fprintf(stderr, "%s case %zu (conversation %lld): expected error '%s', rendered fine\n",
                            g_names[t], i, (long long)conv_id, want_err ? want_err : "?");
                    failures++;
                } else if (err_type && !strcmp(err_type, "TemplateError") && want_err && !strstr(err.msg, want_err)) {
                    fprintf(stderr, "%s case %zu: error '%s' does not contain '%s'\n", g_names[t], i, err.msg,
                            want_err);
                    failures++;
                }
            }
            free(out);
            json_decref(extra);
        }
        if (ct && i == 0) { /* a fixture with no cases checks nothing */
            fprintf(stderr, "%s: fixture has no cases\n", g_names[t]);
            failures++;
        }
        chat_template_free(ct);
        char path[300];
        snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
        unlink(path);
        rmdir(dir);
        json_decref(fx);
    }
    fprintf(stderr, "template parity: %d cases checked, %d failed, %d fixture files missing\n", checked, failures,
            missing);
    json_decref(convs_doc);
    assert_int_equal(missing, 0);
    assert_int_equal(failures, 0);
    assert_true(checked > 0);
}

int main(int argc, char **argv) {
    if (argc > 2) {
        g_dir = argv[1];
        g_names = (const char *const *)(argv + 2);
        g_n_names = (size_t)(argc - 2);
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_parity)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
