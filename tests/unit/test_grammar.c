/* Grammar module: the GBNF parser (what it accepts, what it refuses and where), the compiled
 * automaton (sentences accepted and rejected), token masks against a brute-force check on a
 * small vocabulary and on the real Llama 3 / Mistral vocabularies, EOS and special tokens,
 * compaction of the parse tables, and matchers of one grammar on several threads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/grammar_internal.h"
#include "text/tokenizer.h"

/* ==== Helpers ==== */
static grammar *compile_ok(const char *text) {
    grammar *g = NULL;
    mx_error e = {{0}};
    if (grammar_compile(&g, text, strlen(text), &e)) fail_msg("grammar refused: %s\n%s", e.msg, text);
    return g;
}

static void expect(const char *text, const char *s, bool want) {
    grammar *g = compile_ok(text);
    if (grammar_accepts(g, s, strlen(s)) != want)
        fail_msg("grammar %s\n  should %s \"%s\"", text, want ? "accept" : "reject", s);
    grammar_release(g);
}

static const char *k_json_gbnf =
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::=\n"
    "  \"{\" ws (\n"
    "            string \":\" ws value\n"
    "    (\",\" ws string \":\" ws value)*\n"
    "  )? \"}\" ws\n"
    "array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\n"
    "# whitespace\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

static const char *k_arith_gbnf =
    "root  ::= expr\n"
    "expr  ::= term ((\"+\" | \"-\") term)*\n"
    "term  ::= factor ((\"*\" | \"/\") factor)*\n"
    "factor ::= num | \"(\" expr \")\"\n"
    "num   ::= [0-9]+\n";

/* ==== Parser and automaton ==== */
static void test_accepts(void **st) {
    (void)st;
    expect("root ::= \"abc\"", "abc", true);
    expect("root ::= \"abc\"", "ab", false);
    expect("root ::= \"abc\"", "abcd", false);
    expect("root ::= \"\"", "", true);
    expect("root ::= [a-c]+", "abcabc", true);
    expect("root ::= [a-c]+", "", false);
    expect("root ::= [a-c]*", "", true);
    expect("root ::= [^a]*", "bcd\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80", true); /* é € 😀 */
    expect("root ::= [^a]*", "bca", false);
    expect("root ::= [^a]*", "\xC3", false);             /* half a character */
    expect("root ::= [^a]*", "\xED\xA0\x80", false);     /* a surrogate encoded */
    expect("root ::= . . .", "a\xC3\xA9\xF0\x9F\x98\x80", true);
    expect("root ::= [\\u00e0-\\u00ff]", "\xC3\xA9", true);
    expect("root ::= [\\u00e0-\\u00ff]", "\xC3\x9F", false);
    expect("root ::= [\\x00-\\x7F]+", "hello\x01", true);
    expect("root ::= \"\\u00e9\\x41\\n\\t\\\\\\\"\\U0001F600\"", "\xC3\xA9" "A\n\t\\\"\xF0\x9F\x98\x80", true);
    expect("root ::= \"caf\xC3\xA9\"", "caf\xC3\xA9", true);
    expect("root ::= [\\]\\[\\-^]+", "]-[^", true);
    expect("root ::= x{2,3}\nx ::= \"ab\" | \"c\"", "abc", true);
    expect("root ::= x{2,3}\nx ::= \"ab\" | \"c\"", "abcabc", false); /* 4 of them */
    expect("root ::= x{2,3}\nx ::= \"ab\" | \"c\"", "c", false);
    expect("root ::= \"a\"{3}", "aaa", true);
    expect("root ::= \"a\"{3}", "aaaa", false);
    expect("root ::= \"a\"{2,}", "aaaaa", true);
    expect("root ::= \"a\"{2,}", "a", false);
    expect("root ::= \"a\"{,2}", "", true);
    expect("root ::= \"a\"{,2}", "aaa", false);
    expect("root ::= \"a\" {3}", "aaa", true); /* space before the repetition */
    expect("root ::= [a-z]{0,1000}", "hello", true);
    expect("root ::= (\"ab\"){500}", "ab", false);
    expect("root ::= \"(\" root \")\" | \"\"", "((()))", true);
    expect("root ::= \"(\" root \")\" | \"\"", "((())", false);
    expect("root ::= \"a\"\n  | \"b\"", "b", true); /* extension: a line that starts with | */
    expect("root ::= ( \"a\"\n  | \"b\" )*  # comment\n# another\n", "abba", true);
    expect("\n\nroot ::= (\"a\"\n\n  \"b\")", "ab", true);
    expect("root ::= a b\na ::= \"x\"?\nb ::= \"y\"", "y", true);
    expect("root ::= (\"\")*", "", true);
    expect("root ::= (\"a\"?)* \"b\"", "aab", true);
    expect("root ::= my_rule-2\nmy_rule-2 ::= \"z\"", "z", true);
    expect(k_json_gbnf, "{\"a\": [1, 2.5e3, true, null, \"x\\u00e9\"], \"b\": {}}", true);
    expect(k_json_gbnf, "{\"a\": [1, 2,]}", false);
    expect(k_json_gbnf, "{\"a\": 01}", false);
    expect(k_arith_gbnf, "(1+2)*3-4/5", true);
    expect(k_arith_gbnf, "(1+2", false);
    expect(k_arith_gbnf, "1++2", false);
}

static void expect_error(const char *text, const char *want) {
    grammar *g = NULL;
    mx_error e = {{0}};
    if (!grammar_compile(&g, text, strlen(text), &e)) {
        grammar_release(g);
        fail_msg("grammar accepted, expected \"%s\":\n%s", want, text);
    }
    if (!strstr(e.msg, want)) fail_msg("error \"%s\" lacks \"%s\"", e.msg, want);
}

static void test_errors(void **st) {
    (void)st;
    expect_error("root ::= foo", "line 1 column 10: undefined rule 'foo'");
    expect_error("root ::= \"a\"\n\nx ::= y z", "line 3 column 7: undefined rule 'y'");
    expect_error("root ::= \"a", "line 1 column 10: unterminated string literal");
    expect_error("root ::= [ab", "unterminated character class");
    expect_error("root ::= [b-a]", "line 1 column 11: range end U+0061 is below its start U+0062");
    expect_error("root ::= \"\\q\"", "unknown escape \\'q'");
    expect_error("root ::= \"\\x4\"", "\\x needs 2 hex digits");
    expect_error("root ::= \"\\uD800\"", "not a Unicode scalar value");
    expect_error("root = \"a\"", "line 1 column 6: expected '::=' after the rule name 'root'");
    expect_error("root ::= \"a\"\nroot ::= \"b\"", "line 2 column 1: rule 'root' is defined twice");
    expect_error("root ::= root \"a\" | \"b\"", "rule 'root' is left-recursive");
    expect_error("root ::= a\na ::= b \"x\" | \"y\"\nb ::= \"\"? a", "left-recursive");
    expect_error("root ::= \"a\" | x\nx ::= \"b\" x", "rule 'x' can never finish");
    expect_error("start ::= \"a\"", "no rule named 'root'");
    expect_error("", "no rules");
    expect_error("   # only a comment\n", "no rules");
    expect_error("root ::= \"a\"{3,2}", "the maximum is below the minimum");
    expect_error("root ::= \"a\"{999999}", "repetition count above 100000");
    expect_error("root ::= \"a\"{}", "expected a repetition count");
    expect_error("root ::= (\"a\" \"b\"", "expected ')' to close the group");
    expect_error("root ::= \"a\" b ::= \"c\"", "a rule definition must start on its own line");
    expect_error("root ::= \"\xC3\"", "line 1 column 11: invalid UTF-8");
    expect_error("root ::= []", "empty character class");
    expect_error("root ::= [^\\x00-\\U0010FFFF]", "character class matches no character");
    expect_error("root ::= \"a\" )", "unexpected ')' in rule 'root'");
    char nul[] = "root ::= \"a\"\0";
    grammar *g;
    mx_error e;
    assert_int_equal(grammar_compile(&g, nul, sizeof nul - 1, &e), -1);
    assert_non_null(strstr(e.msg, "NUL byte"));
    /* a deep nest of groups is refused, not a stack overflow */
    char *deep = malloc(20000);
    strcpy(deep, "root ::= ");
    for (int i = 0; i < 2000; i++) strcat(deep, "(");
    strcat(deep, "\"a\"");
    for (int i = 0; i < 2000; i++) strcat(deep, ")");
    expect_error(deep, "groups nested deeper than 512");
    free(deep);
}

static void test_min_length(void **st) {
    (void)st;
    grammar *g = compile_ok("root ::= \"ab\" x | \"abcdef\"\nx ::= [0-9]{3} | \"long long\"");
    assert_int_equal(grammar_min_length(g, 100), 5);
    assert_int_equal(grammar_min_length(g, 3), -1);
    grammar_release(g);
}

/* ==== Masks on a small vocabulary ==== */
typedef struct small_vocab {
    const char *bytes[16];
    uint32_t lens[16];
    uint8_t flags[16];
    int n;
} small_vocab;

static grammar_vocab *make_small(small_vocab *sv, const int32_t *eos, int n_eos) {
    static const char *toks[] = {"a", "b", "ab", "abc", "{", "}", "\"", "\xC3", "\xA9", "\xC3\xA9", "<s>", "</s>",
                                 "", "b\"}", " "};
    sv->n = 15;
    for (int i = 0; i < sv->n; i++) {
        sv->bytes[i] = toks[i];
        sv->lens[i] = (uint32_t)strlen(toks[i]);
        sv->flags[i] = i == 10 || i == 11 ? GRAMMAR_TOKEN_SPECIAL : 0;
    }
    grammar_vocab *v = NULL;
    mx_error e;
    assert_int_equal(grammar_vocab_new(&v, sv->n, sv->bytes, sv->lens, sv->flags, eos, n_eos, &e), 0);
    return v;
}

/* Whether token t may follow `prefix`: a fresh matcher fed prefix then t. */
static bool brute_allowed(grammar *g, grammar_vocab *v, const char *prefix, int32_t t) {
    mx_error e;
    grammar_matcher *m = grammar_matcher_new(g, v, &e);
    assert_non_null(m);
    assert_int_equal(grammar_matcher_accept_bytes(m, prefix, strlen(prefix), &e), 0);
    bool ok = grammar_matcher_accept(m, t, &e) == 0;
    grammar_matcher_free(m);
    return ok;
}

static void check_mask_brute(grammar *g, grammar_vocab *v, const char *prefix, int n_vocab) {
    mx_error e;
    grammar_matcher *m = grammar_matcher_new(g, v, &e);
    assert_int_equal(grammar_matcher_accept_bytes(m, prefix, strlen(prefix), &e), 0);
    const uint32_t *mask = grammar_matcher_mask(m, n_vocab, &e);
    assert_non_null(mask);
    for (int t = 0; t < n_vocab; t++) {
        const bool bit = mask[t >> 5] >> (t & 31) & 1;
        const bool want = t < grammar_vocab_size(v) && brute_allowed(g, v, prefix, t);
        if (bit != want) fail_msg("after \"%s\": token %d bit %d, brute force %d", prefix, t, bit, want);
    }
    grammar_matcher_free(m);
}

static void test_mask_small(void **st) {
    (void)st;
    small_vocab sv;
    const int32_t eos[] = {11};
    grammar_vocab *v = make_small(&sv, eos, 1);
    grammar *g = compile_ok("root ::= \"{\" [ab]* (\"\\\"\" | \"\xC3\xA9\")? \"}\" \" \"?");
    static const char *prefixes[] = {"", "{", "{ab", "{a\"", "{\xC3", "{\xC3\xA9", "{}", "{} "};
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) check_mask_brute(g, v, prefixes[i], 40);
    mx_error e;
    grammar_matcher *m = grammar_matcher_new(g, v, &e);
    /* special and empty tokens are never allowed; a refused token leaves the state as it was */
    const uint32_t *mask = grammar_matcher_mask(m, 15, &e);
    assert_int_equal(mask[0], 1u << 4); /* only "{" */
    assert_int_equal(grammar_matcher_accept(m, 10, &e), -1);
    assert_int_equal(grammar_matcher_accept(m, 12, &e), -1);
    assert_int_equal(grammar_matcher_accept(m, 0, &e), -1);
    assert_int_equal(grammar_matcher_accept(m, 11, &e), -1); /* EOS before the end */
    assert_int_equal(grammar_matcher_accept(m, 4, &e), 0);
    assert_false(grammar_matcher_can_end(m));
    assert_int_equal(grammar_matcher_accept(m, 13, &e), 0); /* b"} */
    assert_true(grammar_matcher_can_end(m));
    assert_false(grammar_matcher_is_done(m)); /* a space may still come */
    mask = grammar_matcher_mask(m, 15, &e);
    assert_int_equal(mask[0], (1u << 11) | (1u << 14));
    assert_int_equal(grammar_matcher_accept(m, 14, &e), 0);
    assert_true(grammar_matcher_is_done(m));
    mask = grammar_matcher_mask(m, 15, &e);
    assert_int_equal(mask[0], 1u << 11); /* complete: only EOS */
    assert_int_equal(grammar_matcher_accept(m, 11, &e), 0);
    assert_true(grammar_matcher_ended(m));
    mask = grammar_matcher_mask(m, 15, &e);
    assert_int_equal(mask[0], 0);
    assert_int_equal(grammar_matcher_accept(m, 0, &e), -1);
    grammar_matcher_free(m);
    /* a model vocabulary larger than the tokenizer's: the extra ids are never allowed */
    m = grammar_matcher_new(g, v, &e);
    grammar_matcher_accept_bytes(m, "{", 1, &e);
    mask = grammar_matcher_mask(m, 100, &e);
    for (int t = 15; t < 100; t++) assert_false(mask[t >> 5] >> (t & 31) & 1);
    /* ... and smaller: the tail bits are cleared */
    mask = grammar_matcher_mask(m, 3, &e);
    assert_int_equal(mask[0] & ~7u, 0);
    grammar_matcher_free(m);
    grammar_release(g);
    grammar_vocab_release(v);
}

static void test_mask_apply(void **st) {
    (void)st;
    float l[70];
    for (int i = 0; i < 70; i++) l[i] = (float)i;
    uint32_t mask[3] = {0xFFFFFFFFu, 0x00000005u, 0x2u};
    grammar_mask_apply(mask, l, 70);
    for (int i = 0; i < 70; i++) {
        const bool keep = i < 32 || i == 32 || i == 34 || i == 65;
        if (keep) assert_float_equal(l[i], (float)i, 0);
        else assert_true(isinf(l[i]) && l[i] < 0);
    }
}

/* ==== Real vocabularies ==== */
static tokenizer *load_tok(const char *name) {
    const char *src = getenv("MLXCEL_SOURCE_DIR");
    assert_non_null(src);
    char path[2048];
    snprintf(path, sizeof path, "%s/tests/fixtures/tokenizers/npm/%s/tokenizer.json", src, name);
    tokenizer *t = NULL;
    mx_error e;
    if (tok_load_file(&t, path, &e)) fail_msg("%s (run tools/fetch_tokenizers.sh)", e.msg);
    return t;
}

static grammar_vocab *vocab_of(tokenizer *t, tok_vocab *tv, int32_t eos) {
    mx_error e;
    assert_int_equal(tok_vocab_bytes(t, tv, &e), 0);
    const char **p = malloc((size_t)tv->n * sizeof *p);
    for (int i = 0; i < tv->n; i++) p[i] = tv->data + tv->off[i];
    grammar_vocab *v = NULL;
    assert_int_equal(grammar_vocab_new(&v, tv->n, p, tv->len, tv->special, &eos, 1, &e), 0);
    free(p);
    return v;
}

static void assert_token_bytes(const tok_vocab *tv, tokenizer *t, const char *piece, const char *want, size_t wl) {
    int32_t id = tok_piece_to_id(t, piece);
    assert_true(id >= 0);
    if (tv->len[id] != wl || memcmp(tv->data + tv->off[id], want, wl)) fail_msg("token '%s': wrong bytes", piece);
}

static void test_real_vocab(void **st) {
    (void)st;
    tokenizer *t = load_tok("llama3");
    tok_vocab tv;
    const int32_t eot = tok_piece_to_id(t, "<|eot_id|>");
    grammar_vocab *v = vocab_of(t, &tv, eot);
    assert_token_bytes(&tv, t, "\xC4\xA0the", " the", 4); /* ByteLevel Ġthe */
    assert_token_bytes(&tv, t, "\xC3\x83", "\xC3", 1);    /* one byte of a character */
    assert_true(tv.special[eot] && tv.len[eot] == 0);
    grammar *g = compile_ok(k_json_gbnf);
    static const char *prefixes[] = {"", "{", "{\"na", "{\"name\": \"hel\\", "{\"a\": [1, 2", "{\"a\": 1}", "{\"a\": \"\xC3"};
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) check_mask_brute(g, v, prefixes[i], tv.n + 256);
    /* the arithmetic grammar: digits and operators only */
    grammar *ga = compile_ok(k_arith_gbnf);
    check_mask_brute(ga, v, "(12+", tv.n);
    grammar_release(ga);
    grammar_release(g);
    grammar_vocab_release(v);
    tok_vocab_free(&tv);
    tok_free(t);

    /* SentencePiece: "▁the" is " the", <0x41> is "A" (the context token keeps the space) */
    t = load_tok("mistral");
    v = vocab_of(t, &tv, tok_piece_to_id(t, "</s>"));
    assert_token_bytes(&tv, t, "\xE2\x96\x81the", " the", 4);
    assert_token_bytes(&tv, t, "<0x41>", "A", 1);
    assert_token_bytes(&tv, t, "<0x0A>", "\n", 1);
    g = compile_ok(k_json_gbnf);
    check_mask_brute(g, v, "{\"x\": ", tv.n);
    grammar_release(g);
    grammar_vocab_release(v);
    tok_vocab_free(&tv);
    tok_free(t);
}

/* ==== Compaction ==== */
static void test_compaction(void **st) {
    (void)st;
    small_vocab sv;
    const int32_t eos[] = {11};
    grammar_vocab *v = make_small(&sv, eos, 1);
    grammar *g = compile_ok("root ::= [ab]{0,3000} \"}\"");
    mx_error e;
    grammar_matcher *m = grammar_matcher_new(g, v, &e), *m2 = grammar_matcher_new(g, v, &e);
    assert_int_equal(grammar_matcher_accept_bytes(m2, "ab", 2, &e), 0);
    char *text = malloc(3001);
    for (int i = 0; i < 2000; i++) {
        /* each step reaches new states; the tables are compacted well before the end */
        g->rt->bytes += 1u << 20;
        assert_int_equal(grammar_matcher_accept(m, i % 2 ? 1 : 0, &e), 0);
        text[i] = i % 2 ? 'b' : 'a';
    }
    text[2000] = 0;
    assert_true(g->rt->n_compactions >= 10); /* the tables were rebuilt many times */
    /* both matchers are where they were */
    const uint32_t *mask = grammar_matcher_mask(m, 15, &e);
    assert_int_equal(mask[0], (1u << 0) | (1u << 1) | (1u << 2) | (1u << 5));
    assert_int_equal(grammar_matcher_accept_bytes(m2, "}", 1, &e), 0);
    assert_true(grammar_matcher_is_done(m2));
    assert_int_equal(grammar_matcher_accept_bytes(m, "}", 1, &e), 0);
    assert_true(grammar_matcher_is_done(m));
    grammar_matcher_free(m), grammar_matcher_free(m2);
    free(text);
    grammar_release(g);
    grammar_vocab_release(v);
}

/* ==== Threads ==== */
typedef struct thr {
    grammar *g;
    grammar_vocab *v;
    uint64_t seed;
    uint32_t sig; /* a hash of the tokens chosen */
} thr;

static void *thr_run(void *arg) {
    thr *a = arg;
    mx_error e;
    uint64_t x = a->seed;
    for (int rep = 0; rep < 20; rep++) {
        grammar_matcher *m = grammar_matcher_new(a->g, a->v, &e);
        for (int step = 0; step < 40 && !grammar_matcher_ended(m); step++) {
            const uint32_t *mask = grammar_matcher_mask(m, 15, &e);
            int c[16], n = 0;
            for (int t = 0; t < 15; t++)
                if (mask[0] >> t & 1) c[n++] = t;
            if (!n) break;
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            int t = c[(x >> 33) % (uint64_t)n];
            if (grammar_matcher_accept(m, t, &e)) return NULL;
            a->sig = a->sig * 31 + (uint32_t)t;
        }
        grammar_matcher_free(m);
    }
    return arg;
}

static void test_threads(void **st) {
    (void)st;
    small_vocab sv;
    const int32_t eos[] = {11};
    grammar_vocab *v = make_small(&sv, eos, 1);
    grammar *g = compile_ok("root ::= \"{\" ([ab] | \"\xC3\xA9\")* \"}\" \" \"?");
    thr a[4], b[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) a[i] = (thr){g, v, (uint64_t)i + 1, 0};
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, thr_run, &a[i]);
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(th[i], &r);
        assert_non_null(r);
    }
    /* the same runs one at a time, on a fresh grammar: the same tokens */
    grammar *g2 = compile_ok("root ::= \"{\" ([ab] | \"\xC3\xA9\")* \"}\" \" \"?");
    for (int i = 0; i < 4; i++) {
        b[i] = (thr){g2, v, (uint64_t)i + 1, 0};
        assert_non_null(thr_run(&b[i]));
        assert_int_equal(a[i].sig, b[i].sig);
    }
    grammar_release(g), grammar_release(g2);
    grammar_vocab_release(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepts),     cmocka_unit_test(test_errors),     cmocka_unit_test(test_min_length),
        cmocka_unit_test(test_mask_small),  cmocka_unit_test(test_mask_apply), cmocka_unit_test(test_real_vocab),
        cmocka_unit_test(test_compaction),  cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
