/* Tokenizer components on small synthetic tokenizer.json files (no network, no fixtures).
 * Expected splits for Split/Metaspace/ByteLevel/Digits/Punctuation/Whitespace and for
 * lstrip/rstrip added tokens are the ones in the tokenizers library's own unit tests
 * (pre_tokenizers/split.rs, metaspace.rs, byte_level.rs ..., tests/added_tokens.rs); BPE/decoder expectations follow from the
 * definitions (merge by rank, byte fallback, unk fusion) on vocabularies small enough to
 * check by hand. Parity on real tokenizers is test_tokenizer_parity. */
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

/* ==== Helpers ==== */

static tokenizer *load(const char *json) {
    tokenizer *t = NULL;
    mx_error err = {{0}};
    if (tok_load_json_text(&t, json, strlen(json), "test.json", &err)) {
        fprintf(stderr, "load failed: %s\n", err.msg);
        fail();
    }
    return t;
}

/* A tokenizer.json with an empty BPE model around the given component JSON fragments. */
static tokenizer *load_parts(const char *normalizer, const char *pre, const char *added) {
    char buf[8192];
    snprintf(buf, sizeof buf,
             "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, \"normalizer\": %s,"
             " \"pre_tokenizer\": %s, \"added_tokens\": %s}",
             normalizer ? normalizer : "null", pre ? pre : "null", added ? added : "[]");
    return load(buf);
}

static void expect_pieces(const tokenizer *t, const char *text, const char *want) {
    char *got;
    mx_error err;
    assert_int_equal(tk_debug_pieces(t, text, strlen(text), &got, &err), 0);
    if (strcmp(got, want)) fprintf(stderr, "text \"%s\": want \"%s\", got \"%s\"\n", text, want, got);
    assert_string_equal(got, want);
    free(got);
}

static void expect_ids(const tokenizer *t, const char *text, bool special, const int32_t *want, size_t n) {
    int32_t *ids;
    size_t k;
    mx_error err;
    assert_int_equal(tok_encode(t, text, strlen(text), special, &ids, &k, &err), 0);
    if (k != n || memcmp(ids, want, n * sizeof *ids)) {
        fprintf(stderr, "text \"%s\": want", text);
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", want[i]);
        fprintf(stderr, ", got");
        for (size_t i = 0; i < k; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
        fail();
    }
    free(ids);
}
#define EXPECT_IDS(t, text, special, ...)                                                              \
    do {                                                                                               \
        const int32_t w_[] = {__VA_ARGS__};                                                            \
        expect_ids(t, text, special, w_, sizeof w_ / sizeof w_[0]);                                    \
    } while (0)

static void expect_decode(const tokenizer *t, const int32_t *ids, size_t n, bool skip, const char *want) {
    char *got;
    mx_error err;
    assert_int_equal(tok_decode(t, ids, n, skip, &got, &err), 0);
    assert_string_equal(got, want);
    free(got);
}

/* ==== Pre-tokenizers (expectations from tokenizers' own tests) ==== */

static void test_split_behaviors(void **st) {
    (void)st;
    static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    static const char *want[] = {
        "How|are|you|doing|?",
        "How| |are| |you| |doing|?",
        "How |are |you |doing|?",
        "How| are| you| doing|?",
        "How| |are| |you| |doing?",
    };
    for (int i = 0; i < 5; i++) {
        char pre[256];
        snprintf(pre, sizeof pre,
                 "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\w+|[^\\\\w\\\\s]+\"}, \"behavior\": \"%s\","
                 " \"invert\": true}", names[i]);
        tokenizer *t = load_parts(NULL, pre, NULL);
        expect_pieces(t, "How are you doing?", want[i]);
        tok_free(t);
    }
    /* consecutive delimiters, and delimiters at both ends: tokenizers 0.23.2 (Node bindings,
     * splitPreTokenizer("-", behavior, false).preTokenizeString) gave these */
    static const char *want2[][2] = {
        {"The|final|countdown", "a|b"},
        {"The|-|final|-|-|countdown", "-|-|a|-|-|-|b|-"},
        {"The-|final-|-|countdown", "-|-|a-|-|-|b-"},
        {"The|-final|-|-countdown", "-|-a|-|-|-b|-"},
        {"The|-|final|--|countdown", "--|a|---|b|-"},
    };
    for (int i = 0; i < 5; i++) {
        char pre[256];
        snprintf(pre, sizeof pre, "{\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, "
                 "\"behavior\": \"%s\", \"invert\": false}", names[i]);
        tokenizer *t = load_parts(NULL, pre, NULL);
        expect_pieces(t, "The-final--countdown", want2[i][0]);
        expect_pieces(t, "--a---b-", want2[i][1]);
        tok_free(t);
    }
}

static void test_split_string_and_invert(void **st) {
    (void)st;
    tokenizer *t = load_parts(NULL, "{\"type\": \"Split\", \"pattern\": {\"String\": \" \"}, \"behavior\": \"Removed\", \"invert\": false}", NULL);
    expect_pieces(t, "Hey, man!", "Hey,|man!");
    expect_pieces(t, "Hello Hello Hello", "Hello|Hello|Hello");
    tok_free(t);
    t = load_parts(NULL, "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\s+\"}, \"behavior\": \"Removed\", \"invert\": false}", NULL);
    expect_pieces(t, "Hey, man!", "Hey,|man!");
    tok_free(t);
    t = load_parts(NULL, "{\"type\": \"Split\", \"pattern\": {\"String\": \"Hello\"}, \"behavior\": \"Removed\", \"invert\": true}", NULL);
    expect_pieces(t, "Hello Hello Hello", "Hello|Hello|Hello");
    tok_free(t);
    /* a string pattern is literal, not a regex */
    t = load_parts(NULL, "{\"type\": \"Split\", \"pattern\": {\"String\": \".\"}, \"behavior\": \"Isolated\", \"invert\": false}", NULL);
    expect_pieces(t, "a.b", "a|.|b");
    tok_free(t);
}

/* \s and \w mean what they mean in Oniguruma (tokenizers' engine): \s = 0009-000D, 0085 and
 * the Z categories (so U+180E and U+FEFF are not spaces), \w = letters, marks, numbers, Pc. */
static void test_regex_classes(void **st) {
    (void)st;
    tokenizer *t = load_parts(NULL, "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\s+\"}, \"behavior\": \"Removed\", \"invert\": false}", NULL);
    expect_pieces(t, "a\xC2\x85" "b\xC2\xA0" "c\xE2\x80\xA8" "d", "a|b|c|d");
    expect_pieces(t, "a\xE1\xA0\x8E" "b\xEF\xBB\xBF" "c\xE2\x80\x8B" "d", "a\xE1\xA0\x8E" "b\xEF\xBB\xBF" "c\xE2\x80\x8B" "d");
    tok_free(t);
    t = load_parts(NULL, "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"[^\\\\s\\\\w]+\"}, \"behavior\": \"Isolated\", \"invert\": false}", NULL);
    expect_pieces(t, "e\xCC\x81_x!?y", "e\xCC\x81_x|!?|y"); /* combining mark and _ are \w */
    tok_free(t);
    /* Code points assigned after PCRE2 10.42's Unicode 14 tables join their categories as in
     * tokenizers (Unicode 16): U+1FAF8 (So, 15.0) under DeepSeek-V3's " ?[\p{P}\p{S}]+", a CJK
     * extension H letter (U+31350, Lo, 15.0) and Garay (U+10D50, Lu, 16.0) in \p{L}+ and
     * \p{Lu}, U+0897 (Mn, 16.0) in \w; the first texts take the plain pattern, the others the
     * one with the newer code points. */
    t = load_parts(NULL, "{\"type\": \"Split\", \"pattern\": {\"Regex\": \" ?[\\\\p{P}\\\\p{S}]+|\\\\p{L}+|\\\\pN\"},"
                         " \"behavior\": \"Isolated\", \"invert\": false}", NULL);
    expect_pieces(t, "a !b", "a| !|b");
    expect_pieces(t, "a \xF0\x9F\xAB\xB8", "a| \xF0\x9F\xAB\xB8");
    expect_pieces(t, "x\xF0\xB1\x8D\x90y 1", "x\xF0\xB1\x8D\x90y| |1");
    tok_free(t);
    t = load_parts(NULL, "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\P{Lu}+\"},"
                         " \"behavior\": \"Isolated\", \"invert\": false}", NULL);
    expect_pieces(t, "abCde", "ab|C|de");
    expect_pieces(t, "ab\xF0\x90\xB5\x90" "de", "ab|\xF0\x90\xB5\x90|de");
    tok_free(t);
    t = load_parts(NULL, "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\w+\"},"
                         " \"behavior\": \"Isolated\", \"invert\": false}", NULL);
    expect_pieces(t, "ab\xE0\xA2\x97" "c d", "ab\xE0\xA2\x97" "c| |d");
    tok_free(t);
}

static void test_metaspace(void **st) {
    (void)st;
    tokenizer *t = load_parts(NULL, "{\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", \"prepend_scheme\": \"always\", \"split\": true}",
                              "[{\"id\": 0, \"content\": \"<m>\", \"special\": true, \"normalized\": false}]");
    expect_pieces(t, "Hey friend!", "\xE2\x96\x81Hey|\xE2\x96\x81" "friend!");
    expect_pieces(t, "Hey   friend!", "\xE2\x96\x81Hey|\xE2\x96\x81|\xE2\x96\x81|\xE2\x96\x81" "friend!");
    expect_pieces(t, "<m>Hey", "<m>|\xE2\x96\x81Hey");
    tok_free(t);
    /* first: only the piece at the very start of the input gets the prefix */
    t = load_parts(NULL, "{\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", \"prepend_scheme\": \"first\", \"split\": true}",
                   "[{\"id\": 0, \"content\": \"<m>\", \"special\": true, \"normalized\": false}]");
    expect_pieces(t, "Hey friend", "\xE2\x96\x81Hey|\xE2\x96\x81" "friend");
    expect_pieces(t, "<m>Hey friend", "<m>|Hey|\xE2\x96\x81" "friend");
    tok_free(t);
    t = load_parts(NULL, "{\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", \"prepend_scheme\": \"never\", \"split\": false}", NULL);
    expect_pieces(t, "Hey friend", "Hey\xE2\x96\x81" "friend");
    tok_free(t);
}

static void test_bytelevel_pretok(void **st) {
    (void)st;
    tokenizer *t = load_parts(NULL, "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}", NULL);
    expect_pieces(t, "Hello my friend, how is your day going?",
                  "Hello|\xC4\xA0my|\xC4\xA0" "friend|,|\xC4\xA0how|\xC4\xA0is|\xC4\xA0your|\xC4\xA0" "day|\xC4\xA0going|?");
    expect_pieces(t, "Hello there       dear",
                  "Hello|\xC4\xA0there|\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0|\xC4\xA0" "dear");
    expect_pieces(t, "Hello there\nHello there", "Hello|\xC4\xA0there|\xC4\x8A|Hello|\xC4\xA0there");
    expect_pieces(t, "i\xE2\xAD\xA2j", "i|\xC3\xA2\xC5\x83\xC2\xA2|j"); /* i⭢j -> i, âŃ¢, j */
    tok_free(t);
    t = load_parts(NULL, "{\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"use_regex\": false}", NULL);
    expect_pieces(t, "Hello my", "\xC4\xA0Hello\xC4\xA0my");
    tok_free(t);
}

static void test_added_strip(void **st) {
    (void)st;
    /* tests/added_tokens.rs: lstrip with add_prefix_space, rstrip without */
    tokenizer *t = load_parts(NULL, "{\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"use_regex\": true}",
                              "[{\"id\": 0, \"content\": \"<mask>\", \"special\": true, \"normalized\": false, \"lstrip\": true}]");
    expect_pieces(t, "I saw a <mask> \xF0\x9F\x98\xBA",
                  "\xC4\xA0I|\xC4\xA0saw|\xC4\xA0" "a|<mask>|\xC4\xA0\xC3\xB0\xC5\x81\xC4\xBA\xC2\xBA");
    tok_free(t);
    t = load_parts(NULL, "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}",
                   "[{\"id\": 0, \"content\": \"<mask>\", \"special\": true, \"normalized\": false, \"rstrip\": true}]");
    expect_pieces(t, "I saw a <mask> \xF0\x9F\x98\xBA", "I|\xC4\xA0saw|\xC4\xA0" "a|\xC4\xA0|<mask>|\xC3\xB0\xC5\x81\xC4\xBA\xC2\xBA");
    tok_free(t);
    /* tokenizers finds every match before it strips: the space that the first " world"'s rstrip
     * takes still starts the second match (found against the Rust library's Node bindings) */
    t = load_parts(NULL, NULL, "[{\"id\": 0, \"content\": \" world\", \"special\": false, \"normalized\": false, \"rstrip\": true}]");
    expect_pieces(t, "a world world", "a| world| world");
    tok_free(t);
    /* a normalized token is looked for as its normalized content, and decodes as that */
    t = load_parts("{\"type\": \"Lowercase\"}", NULL,
                   "[{\"id\": 0, \"content\": \"HeLLo\", \"special\": false, \"normalized\": true}]");
    expect_pieces(t, "say HELLO", "say |HeLLo");
    int32_t hid = 0;
    expect_decode(t, &hid, 1, false, "hello");
    tok_free(t);
}

static void test_added_single_word_and_longest(void **st) {
    {   /* single_word uses the Rust regex crate's \w: a combining mark before the token is a
         * word character (no match), U+00B2 is not (a match) */
        tokenizer *t = load_parts(NULL, NULL, "[{\"id\": 0, \"content\": \"ab\", \"single_word\": true, \"normalized\": false}]");
        expect_pieces(t, "e\xCC\x81" "ab", "e\xCC\x81" "ab");
        expect_pieces(t, "\xC2\xB2" "ab", "\xC2\xB2|ab");
        tok_free(t);
    }
    (void)st;
    tokenizer *t = load_parts(NULL, "{\"type\": \"WhitespaceSplit\"}",
                              "[{\"id\": 0, \"content\": \"ab\", \"special\": false, \"normalized\": false, \"single_word\": true},"
                              " {\"id\": 1, \"content\": \"<x>\", \"special\": true, \"normalized\": false},"
                              " {\"id\": 2, \"content\": \"<x><y>\", \"special\": true, \"normalized\": false}]");
    expect_pieces(t, "ab cab abc ab", "ab|cab|abc|ab");
    expect_pieces(t, "q<x><y>r<x>", "q|<x><y>|r|<x>"); /* longest match first */
    tok_free(t);
    /* normalized added tokens are matched after the normalizer */
    t = load_parts("{\"type\": \"Lowercase\"}", "{\"type\": \"WhitespaceSplit\"}",
                   "[{\"id\": 0, \"content\": \"hey\", \"special\": false, \"normalized\": true},"
                   " {\"id\": 1, \"content\": \"YO\", \"special\": false, \"normalized\": false}]");
    expect_pieces(t, "HEYthere YO yo", "hey|there|YO|yo");
    tok_free(t);
}

static void test_digits_punct_whitespace(void **st) {
    (void)st;
    tokenizer *t = load_parts(NULL, "{\"type\": \"Digits\", \"individual_digits\": false}", NULL);
    expect_pieces(t, "Hey 123 friend!", "Hey |123| friend!");
    tok_free(t);
    t = load_parts(NULL, "{\"type\": \"Digits\", \"individual_digits\": true}", NULL);
    expect_pieces(t, "Hey 123 friend!", "Hey |1|2|3| friend!");
    tok_free(t);
    t = load_parts(NULL, "{\"type\": \"Punctuation\", \"behavior\": \"Isolated\"}", NULL);
    expect_pieces(t, "Hey friend!     How are you?!?", "Hey friend|!|     How are you|?|!|?");
    tok_free(t);
    t = load_parts(NULL, "{\"type\": \"Whitespace\"}", NULL);
    expect_pieces(t, "Hey man!", "Hey|man|!");
    /* the Rust regex crate's \w: U+00B2 (No) is not a word character, ZWJ and U+24B6 are */
    expect_pieces(t, "x\xC2\xB2 a\xE2\x80\x8D" "b \xE2\x92\xB6z", "x|\xC2\xB2|a\xE2\x80\x8D" "b|\xE2\x92\xB6z");
    expect_pieces(t, "How are you doing?", "How|are|you|doing|?");
    expect_pieces(t, "\n", "");
    tok_free(t);
    t = load_parts(NULL, "{\"type\": \"WhitespaceSplit\"}", NULL);
    expect_pieces(t, "Hey man!", "Hey|man!");
    tok_free(t);
    t = load_parts(NULL, "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"WhitespaceSplit\"}, {\"type\": \"Digits\", \"individual_digits\": true}]}", NULL);
    expect_pieces(t, "ab12 c3", "ab|1|2|c|3");
    tok_free(t);
}

/* ==== Normalizers ==== */

static void test_normalizers(void **st) {
    (void)st;
    tokenizer *t = load_parts("{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFKC\"}, {\"type\": \"Lowercase\"}, {\"type\": \"Strip\", \"strip_left\": true, \"strip_right\": true}]}", NULL, NULL);
    expect_pieces(t, "  \xEF\xAC\x81 \xE2\x85\xA0 ABC  ", "fi i abc"); /* ﬁ Ⅰ -> fi i */
    tok_free(t);
    t = load_parts("{\"type\": \"NFD\"}", NULL, NULL);
    expect_pieces(t, "\xC3\xA9", "e\xCC\x81");
    tok_free(t);
    t = load_parts("{\"type\": \"NFC\"}", NULL, NULL);
    expect_pieces(t, "e\xCC\x81", "\xC3\xA9");
    tok_free(t);
    t = load_parts("{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"\\u2581\"}, {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\\u2581\"}]}",
                   NULL, "[{\"id\": 0, \"content\": \"<s>\", \"special\": true, \"normalized\": false}]");
    /* the normalizer runs on each piece between added tokens (legacy Llama behaviour) */
    expect_pieces(t, "a b<s>c", "\xE2\x96\x81" "a\xE2\x96\x81" "b|<s>|\xE2\x96\x81" "c");
    tok_free(t);
    t = load_parts("{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"[0-9]+\"}, \"content\": \"#\"}", NULL, NULL);
    expect_pieces(t, "a12b3", "a#b#");
    tok_free(t);
    /* tokenizers' own Unicode tables (tok_unicode_delta.h): its normalization tables are older
     * (U+32FF stays under NFKC; U+11935 U+11930 do not compose; U+0898, a mark it does not
     * know, is a starter and keeps U+0301 apart from the e), its lowercase newer (Garay
     * U+10D50 -> U+10D70), its StripAccents removes every mark (U+0903 is Mc) it knows */
    t = load_parts("{\"type\": \"NFKC\"}", NULL, NULL);
    expect_pieces(t, "\xE3\x8B\xBF\xEF\xAC\x81", "\xE3\x8B\xBF" "fi");
    expect_pieces(t, "\xF0\x91\xA4\xB5\xF0\x91\xA4\xB0", "\xF0\x91\xA4\xB5\xF0\x91\xA4\xB0");
    expect_pieces(t, "e\xE0\xA2\x98\xCC\x81" "e\xCC\x81", "e\xE0\xA2\x98\xCC\x81\xC3\xA9");
    tok_free(t);
    t = load_parts("{\"type\": \"Lowercase\"}", NULL, NULL);
    expect_pieces(t, "A\xF0\x90\xB5\x90\xC3\x89", "a\xF0\x90\xB5\xB0\xC3\xA9");
    tok_free(t);
    t = load_parts("{\"type\": \"StripAccents\"}", NULL, NULL);
    expect_pieces(t, "a\xE0\xA4\x83" "b\xCC\x81" "c\xE0\xA2\x98", "abc\xE0\xA2\x98");
    tok_free(t);
}

/* ==== BPE model ==== */

/* SentencePiece-style: Prepend/Replace normalizer, byte fallback, unk, Llama decoder. */
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
    " \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}},"
    "  {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, {\"SpecialToken\": {\"id\": \"</s>\", \"type_id\": 0}}],"
    "  \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [1], \"tokens\": [\"<s>\"]},"
    "   \"</s>\": {\"id\": \"</s>\", \"ids\": [2], \"tokens\": [\"</s>\"]}}},"
    " \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": \"\\u2581\"}, \"content\": \" \"},"
    "  {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}, {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]}}";

static void test_bpe_sentencepiece(void **st) {
    (void)st;
    tokenizer *t = load(k_sp_json);
    EXPECT_IDS(t, "ab", false, 14);             /* ▁ a -> ▁a, ▁a b -> ▁ab */
    EXPECT_IDS(t, "ab", true, 1, 14, 2);        /* TemplateProcessing */
    EXPECT_IDS(t, "ac", false, 12, 3);          /* c -> <0x63> */
    EXPECT_IDS(t, "a\xC3\xA9", false, 12, 4, 5); /* é -> <0xC3><0xA9> */
    EXPECT_IDS(t, "ax", false, 12, 0);          /* x: no byte token -> <unk> */
    EXPECT_IDS(t, "axx", false, 12, 0);         /* fuse_unk: one <unk> for xx */
    EXPECT_IDS(t, "a b", false, 12, 9, 11);     /* ▁a ▁ b: "▁b" is not a merge */
    EXPECT_IDS(t, "", true, 1, 2);
    EXPECT_IDS(t, "<s>ab", false, 1, 14);
    const int32_t d1[] = {1, 14, 9, 6, 7, 8, 2};
    expect_decode(t, d1, 7, false, "<s> ab \xE2\x82\xAC</s>");
    expect_decode(t, d1, 7, true, "ab \xE2\x82\xAC");
    const int32_t d2[] = {12, 6, 7};          /* incomplete UTF-8 from byte fallback: one U+FFFD per byte */
    expect_decode(t, d2, 3, false, "a\xEF\xBF\xBD\xEF\xBF\xBD");
    char *raw;
    size_t raw_n;
    mx_error raw_err;
    assert_int_equal(tok_decode_bytes(t, d2, 3, false, &raw, &raw_n, &raw_err), 0); /* the bytes themselves */
    assert_int_equal(raw_n, 3);
    assert_memory_equal(raw, "a\xE2\x82", 3);
    free(raw);
    const int32_t d3[] = {99999, 12};         /* unknown ids are skipped */
    expect_decode(t, d3, 2, false, "a");
    assert_int_equal(tok_vocab_size(t), 15);
    assert_string_equal(tok_id_to_piece(t, 14), "\xE2\x96\x81" "ab");
    assert_int_equal(tok_piece_to_id(t, "ab"), 13);
    assert_int_equal(tok_piece_to_id(t, "zz"), -1);
    assert_true(tok_is_special(t, 1));
    assert_false(tok_is_special(t, 12));
    tok_free(t);
    /* without fuse_unk every unknown char is its own <unk> */
    char *j = strdup(k_sp_json);
    memcpy(strstr(j, "\"fuse_unk\": true"), "\"fuse_unk\": 0   ", 16);
    t = load(j);
    EXPECT_IDS(t, "axx", false, 12, 0, 0);
    tok_free(t);
    free(j);
}

/* InternLM2's vocabulary holds the piece "\u0000" (id 354 there): it encodes U+0000 and decodes
 * back to that one byte, not to an empty string (found against the JavaScript tokenizers
 * library: "\u0000nul inside" decoded as "<s>nul inside"). */
static void test_nul_piece(void **st) {
    (void)st;
    tokenizer *t = load("{\"model\": {\"type\": \"BPE\", \"byte_fallback\": true,"
                        " \"vocab\": {\"<s>\": 0, \"\\u0000\": 1, \"n\": 2, \"\\u2581x\": 3}, \"merges\": []},"
                        " \"added_tokens\": [{\"id\": 0, \"content\": \"<s>\", \"special\": true}],"
                        " \"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"},"
                        " \"content\": \"\\u2581\"},"
                        " \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\","
                        " \"pattern\": {\"String\": \"\\u2581\"}, \"content\": \" \"}, {\"type\": \"ByteFallback\"},"
                        " {\"type\": \"Fuse\"}]}}");
    int32_t *ids;
    size_t n;
    mx_error err;
    assert_int_equal(tok_encode(t, "\0n", 2, false, &ids, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 2);
    const int32_t d[] = {0, 1, 2, 3};
    char *got;
    size_t got_n;
    assert_int_equal(tok_decode_n(t, d, 4, false, &got, &got_n, &err), 0);
    assert_int_equal(got_n, 7);
    assert_memory_equal(got, "<s>\0n x", 7);
    free(got);
    size_t pn;
    assert_non_null(tok_id_to_piece_n(t, 1, &pn));
    assert_int_equal(pn, 1);
    free(ids);
    tok_free(t);
}

static void test_bpe_prefix_suffix_ignore_merges(void **st) {
    (void)st;
    /* WordPiece-like continuing_subword_prefix: merged token drops the right part's prefix */
    tokenizer *t = load("{\"model\": {\"type\": \"BPE\", \"continuing_subword_prefix\": \"##\","
                        " \"vocab\": {\"a\": 0, \"##b\": 1, \"##c\": 2, \"ab\": 3, \"##bc\": 4, \"b\": 5},"
                        " \"merges\": [[\"##b\", \"##c\"], [\"a\", \"##b\"]]}, \"pre_tokenizer\": {\"type\": \"WhitespaceSplit\"}}");
    EXPECT_IDS(t, "abc", false, 0, 4);  /* ##b ##c (rank 0) first, then a + ##bc has no merge */
    EXPECT_IDS(t, "ab b", false, 3, 5);
    tok_free(t);
    t = load("{\"model\": {\"type\": \"BPE\", \"end_of_word_suffix\": \"</w>\","
             " \"vocab\": {\"a\": 0, \"b</w>\": 1, \"ab</w>\": 2, \"b\": 3, \"a</w>\": 4},"
             " \"merges\": [\"a b</w>\"]}, \"pre_tokenizer\": {\"type\": \"WhitespaceSplit\"},"
             " \"decoder\": {\"type\": \"BPEDecoder\", \"suffix\": \"</w>\"}}");
    EXPECT_IDS(t, "ab ba a", false, 2, 3, 4, 4);
    const int32_t d[] = {2, 3, 4, 4};
    expect_decode(t, d, 4, false, "ab ba a");
    tok_free(t);
    /* ignore_merges: a word in the vocabulary is one token even without a merge path */
    const char *j = "{\"model\": {\"type\": \"BPE\", \"ignore_merges\": %s,"
                    " \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"abc\": 3, \"ab\": 4}, \"merges\": [\"a b\"]}}";
    char buf[512];
    snprintf(buf, sizeof buf, j, "true");
    t = load(buf);
    EXPECT_IDS(t, "abc", false, 3);
    tok_free(t);
    snprintf(buf, sizeof buf, j, "false");
    t = load(buf);
    EXPECT_IDS(t, "abc", false, 4, 2);
    tok_free(t);
}

static void test_bpe_rank_order(void **st) {
    (void)st;
    /* lowest rank first, leftmost on ties: "aaa" with [a a] -> "aa" "a" */
    tokenizer *t = load("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"aa\": 1, \"b\": 2, \"ab\": 3, \"aab\": 4},"
                        " \"merges\": [\"a b\", \"a a\", \"aa b\"]}}");
    EXPECT_IDS(t, "aaa", false, 1, 0);
    EXPECT_IDS(t, "aab", false, 0, 3); /* a b (rank 0) wins over a a */
    EXPECT_IDS(t, "aaaa", false, 1, 1);
    tok_free(t);
}

/* ==== Errors are reported, never crash ==== */

static void test_errors(void **st) {
    (void)st;
    static const char *bad[] = {
        "",
        "[]",
        "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}",
        "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": \"x\"}, \"merges\": []}}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a\"]}}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"UnicodeScripts\"}}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, \"normalizer\": {\"type\": \"Precompiled\"}}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}}]}}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": [], \"unk_token\": \"<unk>\"}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tokenizer *t = (tokenizer *)1;
        mx_error err = {{0}};
        assert_int_equal(tok_load_json_text(&t, bad[i], strlen(bad[i]), "bad.json", &err), -1);
        assert_null(t);
        assert_true(strlen(err.msg) > 0);
        assert_non_null(strstr(err.msg, "bad.json"));
    }
    mx_error err;
    tokenizer *t;
    assert_int_equal(tok_load_file(&t, "/nonexistent/tokenizer.json", &err), -1);
    assert_non_null(strstr(err.msg, "/nonexistent/tokenizer.json"));
    /* WordPiece is named in the message */
    assert_int_equal(tok_load_json_text(&t, bad[2], strlen(bad[2]), "x", &err), -1);
    assert_non_null(strstr(err.msg, "WordPiece"));
}

/* Arbitrary bytes encode without error; invalid UTF-8 is replaced by U+FFFD first. */
static void test_invalid_utf8(void **st) {
    (void)st;
    tokenizer *t = load(k_sp_json);
    int32_t *ids;
    size_t n;
    mx_error err;
    const char bad[] = "a\xFF\xC3";
    assert_int_equal(tok_encode(t, bad, 3, false, &ids, &n, &err), 0);
    assert_true(n >= 1 && ids[0] == 12);
    free(ids);
    tok_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_behaviors),
        cmocka_unit_test(test_split_string_and_invert),
        cmocka_unit_test(test_regex_classes),
        cmocka_unit_test(test_metaspace),
        cmocka_unit_test(test_bytelevel_pretok),
        cmocka_unit_test(test_added_strip),
        cmocka_unit_test(test_added_single_word_and_longest),
        cmocka_unit_test(test_digits_punct_whitespace),
        cmocka_unit_test(test_normalizers),
        cmocka_unit_test(test_bpe_sentencepiece),
        cmocka_unit_test(test_nul_piece),
        cmocka_unit_test(test_bpe_prefix_suffix_ignore_merges),
        cmocka_unit_test(test_bpe_rank_order),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_invalid_utf8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
