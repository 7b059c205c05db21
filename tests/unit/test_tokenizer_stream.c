/* Streaming detokenizer on synthetic tokenizers: held-back UTF-8 (byte fallback and
 * ByteLevel), stop strings across tokens, special tokens shown/skipped, flush. The stream
 * must always produce exactly tok_decode of the whole sequence (up to a stop). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tok_internal.h"
#include "text/tokenizer.h"

/* ==== Tokenizers ==== */

/* SentencePiece style (Llama/Mistral decoder chain), byte fallback for c, é and €. */
static const char k_sp_json[] =
    "{\"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"byte_fallback\": true, \"fuse_unk\": true,"
    "  \"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2, \"<0x63>\": 3, \"<0xC3>\": 4, \"<0xA9>\": 5,"
    "   \"<0xE2>\": 6, \"<0x82>\": 7, \"<0xAC>\": 8,"
    "   \"\\u2581\": 9, \"a\": 10, \"b\": 11, \"\\u2581a\": 12, \"ab\": 13, \"\\u2581ab\": 14},"
    "  \"merges\": [\"\\u2581 a\", \"a b\", \"\\u2581a b\"]},"
    " \"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true, \"normalized\": false},"
    "  {\"id\": 1, \"content\": \"<s>\", \"special\": true, \"normalized\": false},"
    "  {\"id\": 2, \"content\": \"</s>\", \"special\": true, \"normalized\": false}],"
    " \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"\\u2581\"},"
    "  {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\\u2581\"}]},"
    " \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": \"\\u2581\"}, \"content\": \" \"},"
    "  {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}, {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]}}";

static tokenizer *load(const char *json) {
    tokenizer *t = NULL;
    mx_error err = {{0}};
    if (tok_load_json_text(&t, json, strlen(json), "test.json", &err)) {
        fprintf(stderr, "load failed: %s\n", err.msg);
        fail();
    }
    return t;
}

/* ByteLevel with one token per byte (id = byte value) plus <|eot|> = 256 (special). */
static tokenizer *load_bytes(void) {
    json_t *vocab = json_object();
    for (int b = 0; b < 256; b++) {
        char k[4] = {0};
        tk_utf8_put(k, tk_byte_to_char(b));
        json_object_set_new(vocab, k, json_integer(b));
    }
    json_t *root = json_pack("{s:{s:s,s:o,s:[]},s:[{s:i,s:s,s:b,s:b}],s:{s:s,s:b,s:b},s:{s:s}}",
                             "model", "type", "BPE", "vocab", vocab, "merges",
                             "added_tokens", "id", 256, "content", "<|eot|>", "special", 1, "normalized", 0,
                             "pre_tokenizer", "type", "ByteLevel", "add_prefix_space", 0, "use_regex", 1,
                             "decoder", "type", "ByteLevel");
    char *s = json_dumps(root, 0);
    tokenizer *t = load(s);
    free(s);
    json_decref(root);
    return t;
}

/* ==== Helpers ==== */

typedef struct run {
    char text[1024];
    size_t n;
    int stopped_at; /* index of the push that returned 1, or -1 */
} run;

static void run_stream(const tokenizer *t, const int32_t *ids, size_t n, bool skip, const char *const *stops,
                       int n_stops, run *r, bool flush) {
    tok_stream *s = tok_stream_new(t, skip);
    assert_non_null(s);
    tok_stream_set_stops(s, stops, n_stops);
    r->n = 0;
    r->stopped_at = -1;
    for (size_t i = 0; i < n; i++) {
        const char *o;
        size_t k;
        int st = tok_stream_push(s, ids[i], &o, &k);
        assert_true(r->n + k < sizeof r->text);
        memcpy(r->text + r->n, o, k);
        r->n += k;
        if (st) {
            r->stopped_at = (int)i;
            break;
        }
    }
    if (flush) {
        const char *o;
        size_t k;
        tok_stream_flush(s, &o, &k);
        memcpy(r->text + r->n, o, k);
        r->n += k;
    }
    r->text[r->n] = '\0';
    tok_stream_free(s);
}

static void expect_stream_eq_decode(const tokenizer *t, const int32_t *ids, size_t n, bool skip) {
    run r;
    run_stream(t, ids, n, skip, NULL, 0, &r, true);
    char *whole;
    mx_error err;
    assert_int_equal(tok_decode(t, ids, n, skip, &whole, &err), 0);
    assert_string_equal(r.text, whole);
    free(whole);
}

/* Pushes ids one by one and checks what each push returns. */
static void expect_pushes(const tokenizer *t, const int32_t *ids, const char *const *want, size_t n, bool skip) {
    tok_stream *s = tok_stream_new(t, skip);
    for (size_t i = 0; i < n; i++) {
        const char *o;
        size_t k;
        assert_int_equal(tok_stream_push(s, ids[i], &o, &k), 0);
        if (k != strlen(want[i]) || memcmp(o, want[i], k))
            fprintf(stderr, "push %zu: want \"%s\", got \"%.*s\"\n", i, want[i], (int)k, o);
        assert_int_equal(k, strlen(want[i]));
        assert_memory_equal(o, want[i], k);
    }
    tok_stream_free(s);
}

/* ==== Tests ==== */

static void test_byte_fallback_held(void **st) {
    (void)st;
    tokenizer *t = load(k_sp_json);
    const int32_t ids[] = {12, 6, 7, 8, 14, 2};
    const char *want[] = {"a", "", "", "\xE2\x82\xAC", " ab", "</s>"};
    expect_pushes(t, ids, want, 6, false);
    expect_stream_eq_decode(t, ids, 6, false);
    expect_stream_eq_decode(t, ids, 6, true);
    tok_free(t);
}

static void test_bytelevel_emoji(void **st) {
    (void)st;
    tokenizer *t = load_bytes();
    const char *text = "hi \xF0\x9F\x98\x80!";
    int32_t *ids;
    size_t n;
    mx_error err;
    assert_int_equal(tok_encode(t, text, strlen(text), false, &ids, &n, &err), 0);
    assert_int_equal(n, 8);
    const char *want[] = {"h", "i", " ", "", "", "", "\xF0\x9F\x98\x80", "!"};
    expect_pushes(t, ids, want, 8, false);
    expect_stream_eq_decode(t, ids, n, false);
    free(ids);
    tok_free(t);
}

static void test_stop_spanning_tokens(void **st) {
    (void)st;
    tokenizer *t = load_bytes();
    const char *stops[] = {"STOP", "xyzzy"};
    /* "abcSTOPxyz": the stop spans S,T,O,P; "abc" is emitted, nothing after */
    const int32_t ids[] = {'a', 'b', 'c', 'S', 'T', 'O', 'P', 'x', 'y', 'z'};
    run r;
    run_stream(t, ids, 10, false, stops, 2, &r, true);
    assert_string_equal(r.text, "abc");
    assert_int_equal(r.stopped_at, 6);
    /* a partial stop is held back, then released when it cannot match any more */
    const int32_t ids2[] = {'a', 'S', 'T', 'x', 'S'};
    tok_stream *s = tok_stream_new(t, false);
    tok_stream_set_stops(s, stops, 2);
    /* "x" may start "xyzzy", so it is held until the next char rules that out */
    const char *want[] = {"a", "", "", "ST", "x"};
    for (int i = 0; i < 5; i++) {
        const char *o;
        size_t k;
        assert_int_equal(tok_stream_push(s, ids2[i], &o, &k), 0);
        assert_int_equal(k, strlen(want[i]));
        assert_memory_equal(o, want[i], k);
    }
    const char *o;
    size_t k;
    tok_stream_flush(s, &o, &k); /* end of stream: the held "S" is final text */
    assert_int_equal(k, 1);
    assert_memory_equal(o, "S", 1);
    assert_null(tok_stream_stop_word(s)); /* no stop matched */
    tok_stream_free(s);
    /* the stop that matched is known (llama-server's stopping_word): the earliest one */
    const int32_t ids4[] = {'x', 'y', 'z', 'z', 'y', 'S', 'T', 'O', 'P'};
    s = tok_stream_new(t, false);
    tok_stream_set_stops(s, stops, 2);
    int hit = 0;
    for (int i = 0; i < 9 && !hit; i++) hit = tok_stream_push(s, ids4[i], &o, &k);
    assert_true(hit);
    assert_string_equal(tok_stream_stop_word(s), "xyzzy");
    tok_stream_free(s);
    /* stop inside one token, and a stop made of a special token's text */
    const char *stops2[] = {"<|eot|>"};
    const int32_t ids3[] = {'o', 'k', 256, 'z'};
    run_stream(t, ids3, 4, false, stops2, 1, &r, true);
    assert_string_equal(r.text, "ok");
    assert_int_equal(r.stopped_at, 2);
    run_stream(t, ids3, 4, true, stops2, 1, &r, true); /* skipped: never seen */
    assert_string_equal(r.text, "okz");
    assert_int_equal(r.stopped_at, -1);
    tok_free(t);
}

static void test_special_shown_or_skipped(void **st) {
    (void)st;
    tokenizer *t = load(k_sp_json);
    const int32_t ids[] = {1, 12, 9, 11, 2, 1, 14};
    run r;
    run_stream(t, ids, 7, true, NULL, 0, &r, true);
    assert_string_equal(r.text, "a b ab");
    run_stream(t, ids, 7, false, NULL, 0, &r, true);
    assert_string_equal(r.text, "<s> a b</s><s> ab");
    expect_stream_eq_decode(t, ids, 7, true);
    expect_stream_eq_decode(t, ids, 7, false);
    tok_free(t);
}

/* tok_stream_keep_special: the chosen special tokens are shown although the stream skips
 * special tokens (a chat reply's tool-call markers), the others stay skipped. */
static void test_special_kept(void **st) {
    (void)st;
    tokenizer *t = load(k_sp_json);
    const int32_t ids[] = {1, 12, 9, 11, 2, 1, 14};
    const int32_t keep[] = {2};
    tok_stream *s = tok_stream_new(t, true);
    assert_int_equal(tok_stream_keep_special(s, keep, 1), 0);
    char text[128] = "";
    for (size_t i = 0; i < 7; i++) {
        const char *o;
        size_t n;
        tok_stream_push(s, ids[i], &o, &n);
        strncat(text, o, n);
    }
    const char *o;
    size_t n;
    tok_stream_flush(s, &o, &n);
    strncat(text, o, n);
    assert_string_equal(text, "a b</s> ab");
    tok_stream_free(s);
    tok_free(t);

    t = load_bytes();
    const int32_t ids2[] = {'a', 256, 'b', 256};
    const int32_t keep2[] = {256};
    for (int k = 0; k < 2; k++) {
        s = tok_stream_new(t, true);
        if (k) tok_stream_keep_special(s, keep2, 1);
        text[0] = 0;
        for (size_t i = 0; i < 4; i++) {
            tok_stream_push(s, ids2[i], &o, &n);
            strncat(text, o, n);
        }
        tok_stream_flush(s, &o, &n);
        strncat(text, o, n);
        assert_string_equal(text, k ? "a<|eot|>b<|eot|>" : "ab");
        tok_stream_free(s);
    }
    tok_free(t);
}

static void test_flush_invalid(void **st) {
    (void)st;
    tokenizer *t = load_bytes();
    const int32_t ids[] = {'a', 0xE2, 0x82};
    run r;
    run_stream(t, ids, 3, false, NULL, 0, &r, false);
    assert_string_equal(r.text, "a");
    run_stream(t, ids, 3, false, NULL, 0, &r, true);
    assert_string_equal(r.text, "a\xEF\xBF\xBD"); /* one U+FFFD for the truncated sequence */
    tok_free(t);
    t = load(k_sp_json);
    const int32_t ids2[] = {12, 6, 7};
    run_stream(t, ids2, 3, false, NULL, 0, &r, true);
    assert_string_equal(r.text, "a\xEF\xBF\xBD\xEF\xBF\xBD"); /* ByteFallback: one per byte */
    tok_free(t);
}

/* SentencePiece: the leading-space strip applies to the first token of the stream only. */
static void test_metaspace_first_token(void **st) {
    (void)st;
    tokenizer *t = load(k_sp_json);
    const int32_t ids[] = {12, 12, 9, 14, 12};
    const char *want[] = {"a", " a", " ", " ab", " a"};
    expect_pushes(t, ids, want, 5, false);
    expect_stream_eq_decode(t, ids, 5, false);
    tok_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_byte_fallback_held),
        cmocka_unit_test(test_bytelevel_emoji),
        cmocka_unit_test(test_stop_spanning_tokens),
        cmocka_unit_test(test_special_shown_or_skipped),
        cmocka_unit_test(test_special_kept),
        cmocka_unit_test(test_flush_invalid),
        cmocka_unit_test(test_metaspace_first_token),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
