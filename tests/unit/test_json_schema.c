/* JSON Schema -> GBNF: which JSON texts each converted schema accepts (objects, arrays, strings,
 * formats with leap years, patterns, integer ranges checked exhaustively, bounded decimals,
 * combinators, $ref recursion), the refusals (each names the keyword and where it is), the
 * json_object mode and the builder that composes tool calls. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/json_schema.h"

/* ==== Helpers ==== */
static grammar *schema_grammar(const char *schema_text) {
    json_error_t je;
    json_t *s = json_loads(schema_text, JSON_DECODE_ANY, &je);
    if (!s) fail_msg("bad test schema %s: %s", schema_text, je.text);
    grammar *g = NULL;
    mx_error e = {{0}};
    if (grammar_from_json_schema(&g, s, &e)) fail_msg("schema refused: %s\n%s", e.msg, schema_text);
    json_decref(s);
    return g;
}

/* Each instance: '+' accepted, '-' rejected, then the JSON text. */
static void check(const char *schema_text, const char *const *cases) {
    grammar *g = schema_grammar(schema_text);
    for (; *cases; cases++) {
        const bool want = (*cases)[0] == '+';
        const char *t = *cases + 1;
        if (grammar_accepts(g, t, strlen(t)) != want)
            fail_msg("schema %s\n  should %s %s", schema_text, want ? "accept" : "reject", t);
    }
    grammar_release(g);
}

static void refused(const char *schema_text, const char *want) {
    json_error_t je;
    json_t *s = json_loads(schema_text, JSON_DECODE_ANY, &je);
    if (!s) fail_msg("bad test schema %s: %s", schema_text, je.text);
    grammar *g = NULL;
    mx_error e = {{0}};
    int rc = grammar_from_json_schema(&g, s, &e);
    json_decref(s);
    if (!rc) {
        grammar_release(g);
        fail_msg("schema accepted, expected \"%s\": %s", want, schema_text);
    }
    if (!strstr(e.msg, want)) fail_msg("error \"%s\" lacks \"%s\"", e.msg, want);
}

/* ==== Objects ==== */
static void test_objects(void **st) {
    (void)st;
    check("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"}},"
          "\"required\":[\"name\"],\"additionalProperties\":false}",
          (const char *[]){"+{\"name\":\"a\"}", "+{\"name\": \"a\", \"age\": 3}", "+{ \"name\" : \"a\" }\n",
                           "-{\"age\":3}", "-{\"name\":\"a\",\"x\":1}", "-{\"age\":3,\"name\":\"a\"}", "-{}", "-[]",
                           "-{\"name\":\"a\"}{}", NULL});
    /* every property optional, any subset in order */
    check("{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"},\"c\":{\"type\":\"integer\"}}}",
          (const char *[]){"+{}", "+{\"a\":1}", "+{\"b\":1}", "+{\"a\":1,\"c\":3}", "+{\"a\":1,\"b\":2,\"c\":3}",
                           "-{,\"a\":1}", "-{\"a\":1,}", "-{\"c\":1,\"a\":2}", NULL});
    /* additionalProperties: a schema for extra keys, never a declared name again */
    check("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\"],"
          "\"additionalProperties\":{\"type\":\"integer\"}}",
          (const char *[]){"+{\"a\":\"x\"}", "+{\"a\":\"x\",\"b\":1,\"ab\":2,\"\":3}", "-{\"a\":\"x\",\"a\":1}",
                           "-{\"a\":\"x\",\"b\":\"s\"}", NULL});
    check("{\"type\":\"object\",\"additionalProperties\":true,\"properties\":{\"k\":{\"const\":1}}}",
          (const char *[]){"+{}", "+{\"k\":1,\"z\":[1,{\"q\":null}]}", "-{\"k\":2}", "-{\"z\":1,\"k\":2}", NULL});
    /* odd property names are written as JSON, so they match exactly */
    check("{\"type\":\"object\",\"properties\":{\"a\\\"b\":{\"type\":\"null\"},\"\\u00e9 \\\\\":{\"type\":\"null\"}},"
          "\"required\":[\"a\\\"b\",\"\\u00e9 \\\\\"]}",
          (const char *[]){"+{\"a\\\"b\":null,\"\xC3\xA9 \\\\\":null}", NULL});
    /* a required name the properties do not declare takes additionalProperties' schema */
    check("{\"type\":\"object\",\"required\":[\"x\"],\"additionalProperties\":{\"type\":\"boolean\"}}",
          (const char *[]){"+{\"x\":true}", "-{}", "-{\"x\":1}", NULL});
    check("{\"type\":\"object\"}", (const char *[]){"+{}", "+{\"a\":{\"b\":[1,\"2\"]}}", "-[]", "-1", NULL});
}

/* ==== Arrays ==== */
static void test_arrays(void **st) {
    (void)st;
    check("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}",
          (const char *[]){"+[1]", "+[1, 2, 3]", "-[]", "-[1,2,3,4]", "-[1,]", "-[\"a\"]", NULL});
    check("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"items\":false}",
          (const char *[]){"+[]", "+[\"a\"]", "+[\"a\",1]", "-[\"a\",1,2]", "-[1]", NULL});
    check("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"}],\"items\":{\"type\":\"boolean\"},\"minItems\":2}",
          (const char *[]){"+[\"a\",true]", "+[\"a\",true,false]", "-[\"a\"]", "-[\"a\",1]", NULL});
    check("{\"type\":\"array\",\"items\":[{\"type\":\"null\"}],\"additionalItems\":false}", /* draft 7 tuple */
          (const char *[]){"+[null]", "+[]", "-[null,null]", NULL});
    check("{\"type\":\"array\",\"maxItems\":0}", (const char *[]){"+[]", "-[1]", NULL});
    check("{\"type\":\"array\",\"uniqueItems\":false}", (const char *[]){"+[1,1]", NULL});
}

/* ==== Strings ==== */
static void test_strings(void **st) {
    (void)st;
    check("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}",
          (const char *[]){"+\"ab\"", "+\"abc\"", "-\"a\"", "-\"abcd\"", "+\"\xC3\xA9\xF0\x9F\x98\x80\"",
                           "+\"\\n\\u00e9\"", "+\"\\\"\\\\\"", "-\"\\ud83d\\ude00\"", "-\"a\nb\"", NULL});
    check("{\"enum\":[\"a\\\"b\",\"line\\nx\",1,null,[1,{\"k\":true}]]}",
          (const char *[]){"+\"a\\\"b\"", "+\"line\\nx\"", "+1", "+null", "+[1,{\"k\":true}]", "-\"ab\"", "-2", NULL});
    check("{\"type\":\"string\",\"enum\":[\"a\",1]}", (const char *[]){"+\"a\"", "-1", NULL}); /* kept to the type */
    check("{\"const\":{\"a\":[1,2]}}", (const char *[]){"+{\"a\":[1,2]}", "-{\"a\":[2,1]}", NULL});
    check("{\"type\":\"string\",\"format\":\"date\"}",
          (const char *[]){"+\"2024-02-29\"", "+\"2000-02-29\"", "+\"1600-02-29\"", "-\"1900-02-29\"",
                           "-\"2023-02-29\"", "+\"2023-02-28\"", "-\"2023-04-31\"", "+\"2023-12-31\"", "-\"2023-13-01\"",
                           "-\"2023-00-10\"", "-\"2023-01-00\"", NULL});
    check("{\"type\":\"string\",\"format\":\"time\"}",
          (const char *[]){"+\"23:59:59Z\"", "+\"00:00:00.123+05:30\"", "-\"24:00:00Z\"", "-\"12:00:00\"",
                           "-\"12:60:00Z\"", NULL});
    check("{\"type\":\"string\",\"format\":\"date-time\"}",
          (const char *[]){"+\"2024-01-31T10:20:30Z\"", "-\"2024-01-31 10:20:30Z\"", NULL});
    check("{\"type\":\"string\",\"format\":\"uuid\"}",
          (const char *[]){"+\"0e5f3c2a-1b2c-4d5e-8f90-a1b2c3d4e5f6\"", "-\"0e5f3c2a1b2c4d5e8f90a1b2c3d4e5f6\"", NULL});
    check("{\"type\":\"string\",\"format\":\"ipv4\"}",
          (const char *[]){"+\"192.168.0.255\"", "-\"256.1.1.1\"", "-\"01.1.1.1\"", NULL});
}

static void test_patterns(void **st) {
    (void)st;
    check("{\"type\":\"string\",\"pattern\":\"^[a-z]{2,3}\\\\d$\"}",
          (const char *[]){"+\"ab1\"", "+\"abc9\"", "-\"a1\"", "-\"abcd1\"", "-\"ab\"", NULL});
    check("{\"type\":\"string\",\"pattern\":\"^(foo|bar)+$\"}",
          (const char *[]){"+\"foo\"", "+\"barfoo\"", "-\"\"", "-\"fo\"", NULL});
    /* unanchored: the match may sit anywhere */
    check("{\"type\":\"string\",\"pattern\":\"ab\"}",
          (const char *[]){"+\"ab\"", "+\"xxabyy\"", "-\"a b\"", NULL});
    /* characters JSON escapes: written escaped */
    check("{\"type\":\"string\",\"pattern\":\"^\\\"[\\\\\\\\]\\\\n.$\"}",
          (const char *[]){"+\"\\\"\\\\\\n\\u0001\"", "+\"\\\"\\\\\\u000Ax\"", "-\"\\\"\\\\\\n\\n\"", NULL});
    check("{\"type\":\"string\",\"pattern\":\"^[^\\\\s]\\\\S?\\\\w*$\"}",
          (const char *[]){"+\"a\"", "+\"ab_9\"", "-\" a\"", "-\"a \"", NULL});
    check("{\"type\":\"string\",\"pattern\":\"^\\\\u00e9\\\\x41\\\\.\\\\u{1F600}$\"}",
          (const char *[]){"+\"\xC3\xA9" "A.\xF0\x9F\x98\x80\"", NULL});
    check("{\"type\":\"string\",\"pattern\":\"^a{2}b{1,}c{0,1}?$\"}", (const char *[]){"+\"aab\"", "+\"aabbc\"", "-\"ab\"", NULL});
}

/* ==== Numbers ==== */
static void int_range_exhaustive(long lo, long hi, bool xlo, bool xhi) {
    char s[200];
    snprintf(s, sizeof s, "{\"type\":\"integer\",\"%s\":%ld,\"%s\":%ld}", xlo ? "exclusiveMinimum" : "minimum", lo,
             xhi ? "exclusiveMaximum" : "maximum", hi);
    grammar *g = schema_grammar(s);
    const long a = xlo ? lo + 1 : lo, b = xhi ? hi - 1 : hi;
    for (long v = lo - 150; v <= hi + 150; v++) {
        char t[32];
        snprintf(t, sizeof t, "%ld", v);
        if (grammar_accepts(g, t, strlen(t)) != (v >= a && v <= b)) fail_msg("%s and %ld", s, v);
    }
    grammar_release(g);
}

static void test_integers(void **st) {
    (void)st;
    static const long bounds[][2] = {{0, 0},     {0, 9},      {0, 10},      {-1, 1},     {-10, 100}, {7, 93},
                                     {-250, -3}, {99, 1001},  {-999, 999},  {123, 4567}, {1, 1},     {-1000, -1000},
                                     {5, 6},     {-19, 1234}, {200, 12000}, {1000, 1099}};
    for (size_t i = 0; i < sizeof bounds / sizeof *bounds; i++)
        for (int x = 0; x < 4; x++) {
            if (bounds[i][1] - bounds[i][0] < 2 && x) continue;
            int_range_exhaustive(bounds[i][0], bounds[i][1], x & 1, x & 2);
        }
    check("{\"type\":\"integer\",\"minimum\":-5}",
          (const char *[]){"+-5", "+0", "+999999999999999", "-1000000000000000", "--6", "-1.5", "--0", NULL});
    check("{\"type\":\"integer\",\"maximum\":12345678901}",
          (const char *[]){"+12345678901", "-12345678902", "+-999999999999999", NULL});
    check("{\"type\":\"integer\",\"minimum\":0.5,\"maximum\":2.5}", (const char *[]){"+1", "+2", "-0", "-3", NULL});
    check("{\"type\":\"integer\"}", (const char *[]){"+0", "+-12", "-012", "-1e3", "-1.0", NULL});
}

static void test_decimals(void **st) {
    (void)st;
    check("{\"type\":\"number\"}", (const char *[]){"+1", "+-0.5", "+1.25e-7", "+3E+10", "-1.", "-.5", "-01", NULL});
    check("{\"type\":\"number\",\"minimum\":0,\"maximum\":2}",
          (const char *[]){"+0", "+2", "+1.5", "+0.000001", "+1.999999", "-2.5", "-2.01", "--0.1", "-2.000001", NULL});
    check("{\"type\":\"number\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":1}",
          (const char *[]){"+0.5", "+0.000001", "-0", "-1", "-0.0", "-1.0", NULL});
    check("{\"type\":\"number\",\"minimum\":-1,\"maximum\":0}",
          (const char *[]){"+-1", "+-0.25", "+0", "--1.5", "-0.5", NULL});
    check("{\"type\":\"number\",\"minimum\":3}", (const char *[]){"+3", "+3.7", "+100.25", "-2.9", NULL});
}

/* ==== Combinators, references ==== */
static void test_combinators(void **st) {
    (void)st;
    check("{\"anyOf\":[{\"type\":\"string\",\"maxLength\":1},{\"type\":\"integer\"}],\"description\":\"x\"}",
          (const char *[]){"+\"a\"", "+7", "-\"ab\"", "-true", NULL});
    check("{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"a\"},\"x\":{\"type\":\"integer\"}},"
          "\"required\":[\"kind\"]},{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"b\"}},\"required\":[\"kind\"]}]}",
          (const char *[]){"+{\"kind\":\"a\",\"x\":1}", "+{\"kind\":\"b\"}", "-{\"kind\":\"c\"}", NULL});
    check("{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},"
          "{\"properties\":{\"b\":{\"type\":\"string\"}},\"required\":[\"b\"]}]}",
          (const char *[]){"+{\"a\":1,\"b\":\"x\"}", "-{\"a\":1}", "-{\"b\":\"x\"}", NULL});
    check("{\"allOf\":[{\"type\":\"integer\",\"minimum\":0},{\"maximum\":10,\"minimum\":3}]}",
          (const char *[]){"+3", "+10", "-2", "-11", NULL});
    check("{\"type\":[\"integer\",\"null\"],\"maximum\":3}", (const char *[]){"+3", "+null", "-4", "-\"a\"", NULL});
    check("{\"type\":\"string\",\"maxLength\":1,\"nullable\":true}", (const char *[]){"+\"a\"", "+null", "-\"ab\"", NULL});
    /* recursion through $defs and through the root */
    check("{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":"
          "\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"],\"additionalProperties\":false}},"
          "\"$ref\":\"#/$defs/node\"}",
          (const char *[]){"+{\"v\":1}", "+{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[{\"v\":3}]},{\"v\":4}]}",
                           "-{\"v\":1,\"kids\":[{}]}", NULL});
    check("{\"type\":\"object\",\"properties\":{\"next\":{\"$ref\":\"#\"}},\"additionalProperties\":false}",
          (const char *[]){"+{}", "+{\"next\":{\"next\":{}}}", NULL});
    check("{\"definitions\":{\"a~b/c\":{\"type\":\"boolean\"}},\"$ref\":\"#/definitions/a~0b~1c\"}",
          (const char *[]){"+true", "-1", NULL});
    check("true", (const char *[]){"+1", "+[{}]", "+\"s\"", NULL});
    check("{}", (const char *[]){"+null", NULL});
}

/* ==== Refusals ==== */
static void test_refusals(void **st) {
    (void)st;
    refused("{\"type\":\"integer\",\"multipleOf\":2}", "schema at /: keyword 'multipleOf' is not supported");
    refused("{\"properties\":{\"a\":{\"not\":{\"type\":\"null\"}}}}", "schema at /properties/a: keyword 'not'");
    refused("{\"if\":{},\"then\":{}}", "keyword 'if'");
    refused("{\"type\":\"object\",\"patternProperties\":{}}", "'patternProperties'");
    refused("{\"type\":\"object\",\"minProperties\":1}", "'minProperties'");
    refused("{\"type\":\"array\",\"uniqueItems\":true}", "'uniqueItems': true is not supported");
    refused("{\"type\":\"array\",\"contains\":{}}", "'contains'");
    refused("{\"type\":\"string\",\"format\":\"email\"}", "format 'email' is not supported");
    refused("{\"type\":\"string\",\"pattern\":\"^(?=a)b$\"}", "lookahead and lookbehind are not supported");
    refused("{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "backreferences are not supported");
    refused("{\"type\":\"string\",\"pattern\":\"\\\\bword\"}", "\\b is not supported");
    refused("{\"type\":\"string\",\"pattern\":\"^a|b$\"}", "top-level | is not supported");
    refused("{\"type\":\"string\",\"pattern\":\"a^b\"}", "'^' is supported only at the start");
    refused("{\"type\":\"string\",\"pattern\":\"\\\\p{L}\"}", "Unicode property escapes");
    refused("{\"type\":\"string\",\"pattern\":\"a{2\"}", "a lone '{'");
    refused("{\"type\":\"string\",\"pattern\":\"^a$\",\"maxLength\":3}", "'pattern' together with minLength/maxLength");
    refused("{\"type\":\"number\",\"minimum\":0.5}", "a bound that is not an integer (0.5) on type number");
    refused("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "no integer satisfies");
    refused("{\"type\":\"integer\",\"minimum\":1e300}", "beyond +-2^53");
    refused("{\"type\":\"integer\",\"exclusiveMinimum\":true}", "as a boolean (draft 4)");
    refused("{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"string\",\"maxLength\":2}]}", "oneOf: branches 0 and 1 may both match");
    refused("{\"anyOf\":[{\"type\":\"string\"}],\"maxLength\":2}", "'maxLength' next to 'anyOf' is not supported");
    refused("{\"$ref\":\"http://example.com/s.json\"}", "only local references");
    refused("{\"$ref\":\"#/$defs/missing\"}", "points at nothing");
    refused("{\"$ref\":\"#/$defs/a\",\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}}}", "leads only back to itself");
    refused("false", "the schema false admits no value");
    refused("{\"properties\":{\"a\":false},\"required\":[\"a\"]}", "schema at /properties/a: the schema false");
    refused("{\"type\":\"object\",\"required\":[\"x\"],\"additionalProperties\":false}", "required property 'x' is not declared");
    refused("{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "maxItems 2 is below minItems 3");
    refused("{\"type\":\"array\",\"prefixItems\":[{}],\"items\":false,\"minItems\":2}", "minItems 2 cannot be met");
    refused("{\"enum\":[]}", "'enum' must be a non-empty array");
    refused("{\"type\":\"string\",\"enum\":[1,2]}", "no value of const/enum has the schema's type");
    refused("{\"type\":\"strin\"}", "unknown type 'strin'");
    refused("{\"type\":\"string\",\"maxLength\":-1}", "'maxLength' must be an integer");
    refused("{\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", "types exclude each other");
    refused("{\"allOf\":[{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false},{\"required\":[\"a\"]}]}",
            "required property 'a' is excluded");
    refused("{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#\"}},\"required\":[\"a\"]}", "can never finish");
    refused("[1,2]", "expected a schema");
    /* nesting beyond the limit */
    char deep[4096] = "";
    for (int i = 0; i < 70; i++) strcat(deep, "{\"items\":");
    strcat(deep, "{}");
    for (int i = 0; i < 70; i++) strcat(deep, "}");
    refused(deep, "nested deeper than 64");
}

/* ==== json_object, the builder ==== */
static void test_json_object(void **st) {
    (void)st;
    grammar *g;
    mx_error e;
    assert_int_equal(grammar_json_object(&g, &e), 0);
    const char *yes[] = {"{}", "{\"a\": [1, {\"b\": null}], \"c\": \"\\u00e9\"}", " "};
    assert_true(grammar_accepts(g, yes[0], strlen(yes[0])));
    assert_true(grammar_accepts(g, yes[1], strlen(yes[1])));
    assert_false(grammar_accepts(g, "[]", 2));
    assert_false(grammar_accepts(g, "\"a\"", 3));
    assert_false(grammar_accepts(g, " {}", 3));
    grammar_release(g);
}

static void test_builder_tool_call(void **st) {
    (void)st;
    mx_error e;
    json_t *tool = json_loads("{\"anyOf\":["
                              "{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"get_weather\"},\"arguments\":"
                              "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"],"
                              "\"additionalProperties\":false}},\"required\":[\"name\",\"arguments\"],\"additionalProperties\":false},"
                              "{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"now\"},\"arguments\":{\"type\":\"object\","
                              "\"additionalProperties\":false}},\"required\":[\"name\",\"arguments\"],\"additionalProperties\":false}]}",
                              0, NULL);
    assert_non_null(tool);
    grammar_builder *b = grammar_builder_new();
    const char *call = NULL;
    assert_int_equal(grammar_builder_add_schema(b, "tool call", tool, &call, &e), 0);
    assert_string_equal(call, "tool-call");
    char *open = grammar_gbnf_literal("<tool_call>\n", 12), *close = grammar_gbnf_literal("\n</tool_call>", 13);
    char body[512];
    snprintf(body, sizeof body, "(%s %s %s)+", open, call, close);
    free(open), free(close);
    assert_int_equal(grammar_builder_add_rule(b, "root", body, &e), 0);
    assert_int_equal(grammar_builder_add_rule(b, "root", "\"x\"", &e), -1); /* taken */
    assert_int_equal(grammar_builder_add_rule(b, "bad name", "\"x\"", &e), -1);
    /* a second schema in the same builder shares the primitives and gets its own names */
    const char *other;
    json_t *s2 = json_loads("{\"type\":\"string\"}", 0, NULL);
    assert_int_equal(grammar_builder_add_schema(b, "tool call", s2, &other, &e), 0);
    assert_true(strncmp(other, "tool-call-", 10) == 0); /* "tool-call" and its branches are taken */
    json_decref(s2);
    grammar *g;
    if (grammar_builder_compile(b, "root", &g, &e)) fail_msg("%s\n%s", e.msg, grammar_builder_text(b));
    const char *ok1 = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    const char *ok2 = "<tool_call>\n{\"name\":\"now\",\"arguments\":{}}\n</tool_call><tool_call>\n{\"name\":\"now\","
                      "\"arguments\":{}}\n</tool_call>";
    const char *bad1 = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>";
    const char *bad2 = "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>";
    assert_true(grammar_accepts(g, ok1, strlen(ok1)));
    assert_true(grammar_accepts(g, ok2, strlen(ok2)));
    assert_false(grammar_accepts(g, bad1, strlen(bad1)));
    assert_false(grammar_accepts(g, bad2, strlen(bad2)));
    grammar_release(g);
    /* a hand-written rule that takes a primitive's name is an error naming it */
    grammar_builder *b2 = grammar_builder_new();
    assert_int_equal(grammar_builder_add_rule(b2, "space", "\"x\"", &e), 0);
    assert_int_equal(grammar_builder_add_schema(b2, "s", tool, &call, &e), -1);
    assert_non_null(strstr(e.msg, "'space' is taken"));
    grammar_builder_free(b2);
    grammar_builder_free(b);
    json_decref(tool);
    /* literals survive any bytes */
    const char *weird = "a\"b\\c\n\t\x01\x7F\xC3\xA9";
    char *lit = grammar_gbnf_literal(weird, strlen(weird));
    char rule[128];
    snprintf(rule, sizeof rule, "root ::= %s", lit);
    free(lit);
    assert_int_equal(grammar_compile(&g, rule, strlen(rule), &e), 0);
    assert_true(grammar_accepts(g, weird, strlen(weird)));
    grammar_release(g);
    /* the text of a schema's grammar */
    char *text;
    json_t *s = json_loads("{\"type\":\"boolean\"}", 0, NULL);
    assert_int_equal(grammar_json_schema_to_gbnf(s, &text, &e), 0);
    assert_non_null(strstr(text, "root ::= boolean"));
    free(text);
    json_decref(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_objects),     cmocka_unit_test(test_arrays),      cmocka_unit_test(test_strings),
        cmocka_unit_test(test_patterns),    cmocka_unit_test(test_integers),    cmocka_unit_test(test_decimals),
        cmocka_unit_test(test_combinators), cmocka_unit_test(test_refusals),    cmocka_unit_test(test_json_object),
        cmocka_unit_test(test_builder_tool_call),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
