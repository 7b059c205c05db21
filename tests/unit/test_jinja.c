/* Jinja semantics as jinja2 3.1 renders them with trim_blocks=True, lstrip_blocks=True (the
 * transformers environment). Each expectation follows the Jinja2 / Python documentation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "text/chat_template.h"

typedef struct rcase {
    const char *tpl;
    const char *ctx; /* JSON object or NULL */
    const char *want;
} rcase;

static int render(const char *tpl, const char *ctx_json, char **out, mx_error *err) {
    jinja_template *t = NULL;
    *out = NULL;
    if (jinja_compile(&t, tpl, err)) return -1;
    json_t *ctx = NULL;
    if (ctx_json) {
        json_error_t je;
        ctx = json_loads(ctx_json, 0, &je);
        if (!ctx) {
            jinja_free(t);
            snprintf(err->msg, sizeof err->msg, "bad test JSON: %s", je.text);
            return -1;
        }
    }
    int rc = jinja_render(t, ctx, out, err);
    json_decref(ctx);
    jinja_free(t);
    return rc;
}

static void run_cases(const rcase *cases, size_t n) {
    int failures = 0;
    for (size_t i = 0; i < n; i++) {
        char *out;
        mx_error err = {0};
        int rc = render(cases[i].tpl, cases[i].ctx, &out, &err);
        if (rc) {
            fprintf(stderr, "case %zu: %s\n  error: %s\n", i, cases[i].tpl, err.msg);
            failures++;
            continue;
        }
        if (strcmp(out, cases[i].want)) {
            fprintf(stderr, "case %zu: %s\n  want: [%s]\n  got:  [%s]\n", i, cases[i].tpl, cases[i].want, out);
            failures++;
        }
        free(out);
    }
    assert_int_equal(failures, 0);
}

#define RUN(arr) run_cases(arr, sizeof arr / sizeof arr[0])

static void test_whitespace(void **st) {
    (void)st;
    static const rcase c[] = {
        {"Hello {{ name }}!", "{\"name\": \"World\"}", "Hello World!"},
        {"{% if true %}\nyes\n{% endif %}\nend", NULL, "yes\nend"},
        {"  {% if true %}\n  x\n  {% endif %}\n", NULL, "  x\n"},
        {"a  {{- 'b' -}}  c", NULL, "abc"},
        {"a\n  {%- if true %} b {% endif -%}\n  c", NULL, "a b c"},
        {"  {{ 'x' }}", NULL, "  x"},                   /* lstrip_blocks ignores {{ */
        {"  {%+ if true %}x{% endif %}", NULL, "  x"},  /* {%+ keeps the indentation */
        {"{% if true +%}\nx{% endif %}", NULL, "\nx"},  /* +%} keeps the newline */
        {"abc\n", NULL, "abc"},                         /* one trailing newline dropped */
        {"abc\n\n", NULL, "abc\n"},
        {"a\r\nb\rc", NULL, "a\nb\nc"},
        {"a{# comment #}b", NULL, "ab"},
        {"a\n{# c #}\nb", NULL, "a\nb"},
        {"a\n  {# c #}\nb", NULL, "a\nb"},
        {"{% raw %}{{ x }}{% endraw %}", NULL, "{{ x }}"},
        {"{%- for m in ['a','b'] %}\n    {{- m + '\\n' }}\n{%- endfor %}", NULL, "a\nb\n"},
        {"x {{ 'y' }} {% if true %}z{% endif %}", NULL, "x y z"},
        {"{{ {'a': {'b': 1}} }}", NULL, "{'a': {'b': 1}}"}, /* }} inside braces is not the end */
        {"{% for i in [1,2] %}\n  {{ i }}\n{% endfor %}", NULL, "  1\n  2\n"},
    };
    RUN(c);
}

static void test_values(void **st) {
    (void)st;
    static const rcase c[] = {
        {"[{{ missing }}]", NULL, "[]"},
        {"{{ 'a' ~ 1 ~ none ~ true }}", NULL, "a1NoneTrue"},
        {"{{ true }} {{ false }} {{ none }} {{ True }} {{ None }}", NULL, "True False None True None"},
        {"{{ 1 + 2 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }}", NULL,
         "3 3.5 3 -4 1 2 1024"},
        {"{{ 3 }} {{ 3.0 }} {{ 1e20 }} {{ 1.5e-7 }} {{ 10 / 5 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 123456789012345.6 }}",
         NULL, "3 3.0 1e+20 1.5e-07 2.0 0.30000000000000004 1e+16 123456789012345.6"},
        {"{{ x }} {{ y }} {{ z }}", "{\"x\": 1, \"y\": 1.0, \"z\": 2.5e-5}", "1 1.0 2.5e-05"},
        {"{{ [1, 'a', none, true, 1.5] }}", NULL, "[1, 'a', None, True, 1.5]"},
        {"{{ [\"it's\"] }} {{ ['a\"b'] }} {{ ['x\\ny'] }}", NULL, "[\"it's\"] ['a\"b'] ['x\\ny']"},
        {"{{ (1, 2) }} {{ (1,) }} {{ () }}", NULL, "(1, 2) (1,) ()"},
        {"{{ 'a\\nb' }}|{{ \"t\\tx\" }}|{{ '\\u00e9' }}|{{ 'it\\'s' }}", NULL, "a\nb|t\tx|\xc3\xa9|it's"},
        {"{{ 'a' 'b' }}", NULL, "ab"},
        {"{{ 0 or 'x' }} {{ 1 and 'y' }} [{{ '' and 'z' }}]", NULL, "x y []"},
        {"{{ 'y' if x else 'n' }} [{{ 'y' if x }}]", "{\"x\": 0}", "n []"},
        {"{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }}", NULL,
         "True False True True True"},
        {"{{ 'a' in 'abc' }} {{ 2 in [1,2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ 'x' in missing }}", NULL,
         "True True True True False"},
        {"{{ -x }} {{ not x }} {{ -2 | abs }}", "{\"x\": 3}", "-3 False 2"},
        {"{{ x | length - 1 }}", "{\"x\": [1, 2, 3]}", "2"},
        {"{{ 'ab' * 3 }} {{ [0] * 2 }}", NULL, "ababab [0, 0]"},
        {"{{ [1] + [2] }} {{ 'a' + 'b' }}", NULL, "[1, 2] ab"},
    };
    RUN(c);
}

static void test_access(void **st) {
    (void)st;
    const char *msgs = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", "
                       "\"content\": \"yo\"}], \"d\": {\"b\": 1, \"a\": 2, \"items\": \"key\"}}";
    static rcase c[] = {
        {"{{ messages[0]['role'] }} {{ messages[0].role }} {{ messages[-1].content }} {{ messages.1.role }}",
         NULL, "user user yo assistant"},
        {"[{{ messages[0].missing }}] {{ messages[0].missing is defined }} {{ messages[5] is defined }}", NULL,
         "[] False False"},
        {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", NULL, "b=1;a=2;items=key;"},
        {"{{ d.get('a') }} {{ d.get('z', 'no') }} {{ d.get('z') }} {{ d['items'] }}", NULL, "2 no None key"},
        {"{{ d.keys() | list }} {{ d.values() | list }}", NULL, "['b', 'a', 'items'] [1, 2, 'key']"},
        {"{{ messages | selectattr('role', 'equalto', 'user') | list | length }}", NULL, "1"},
        {"{{ messages | map(attribute='role') | join(',') }}", NULL, "user,assistant"},
        {"{{ messages | rejectattr('role', 'eq', 'user') | map(attribute='content') | first }}", NULL, "yo"},
        {"{{ messages | selectattr('missing') | list }}", NULL, "[]"},
        {"{% for k, v in d | dictsort %}{{ k }}{% endfor %}", NULL, "abitems"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) c[i].ctx = msgs;
    RUN(c);
}

static void test_strings(void **st) {
    (void)st;
    static const rcase c[] = {
        {"{{ 'a,b,c'.split(',') }} {{ '  a  b '.split() }} {{ 'a b c'.split(None, 1) }} {{ 'a b c'.rsplit(' ', 1) }}",
         NULL, "['a', 'b', 'c'] ['a', 'b'] ['a', 'b c'] ['a b', 'c']"},
        {"[{{ '  x \\n'.strip() }}] [{{ 'xxhixx'.strip('x') }}] [{{ '\\n\\nhi'.lstrip('\\n') }}] [{{ 'hi  '.rstrip() }}]",
         NULL, "[x] [hi] [hi] [hi]"},
        {"{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} {{ 'hello'.startswith('lo') }}", NULL,
         "True True False"},
        {"{{ 'Hello World'.replace('o', '0') }} {{ 'aaa'.replace('a', 'b', 2) }}", NULL, "Hell0 W0rld bba"},
        {"{{ 'abc'[::-1] }} {{ 'h\xc3\xa9llo'[1] }} {{ 'h\xc3\xa9llo' | length }} {{ 'h\xc3\xa9llo'[1:3] }}", NULL,
         "cba \xc3\xa9 5 \xc3\xa9l"},
        {"{{ [1,2,3,4][1:] }} {{ [1,2,3,4][:-1] }} {{ [1,2,3,4][::2] }} {{ [1,2,3][::-1] }} {{ [1,2][5:] }}", NULL,
         "[2, 3, 4] [1, 2, 3] [1, 3] [3, 2, 1] []"},
        {"{{ 'hello world' | title }} {{ 'hELLO' | capitalize }} {{ 'AbC' | lower }} {{ 'abc'.upper() }}", NULL,
         "Hello World Hello abc ABC"},
        {"{{ 'a<b>&\"' | e }}", NULL, "a&lt;b&gt;&amp;&#34;"},
        {"{{ 'x</think>\\n\\nanswer'.split('</think>')[-1].lstrip('\\n') }}", NULL, "answer"},
        {"{{ '-'.join(['a', 'b']) }} {{ 'abcabc'.find('c') }} {{ 'abc'.count('b') }}", NULL, "a-b 2 1"},
        {"{{ '%s-%d-%05.2f|%x|%5s|%-3s|' % ('a', 3, 2.5, 255, 'r', 'l') }}", NULL, "a-3-02.50|ff|    r|l  |"},
        {"{{ '%(a)s=%(b)d' % {'a': 'k', 'b': 2} }} {{ 'v=%s' % 5 }} {{ '%s' | format('q') }}", NULL, "k=2 v=5 q"},
        {"{{ '{} and {name}'.format(1, name='n') }}", NULL, "1 and n"},
    };
    RUN(c);
}

static void test_filters(void **st) {
    (void)st;
    static const rcase c[] = {
        {"{{ '  hi  ' | trim }}|{{ [3,1,2] | sort | join(',') }}|{{ 'abc' | upper }}|{{ [1,2,3] | length }}", NULL,
         "hi|1,2,3|ABC|3"},
        {"{{ [1,2,3] | first }}{{ [1,2,3] | last }}|{{ none | default('d') }}|{{ missing | default('d') }}|"
         "{{ '' | default('e', true) }}", NULL, "13|None|d|e"},
        {"{{ {'a': 1, 'b': [true, none, 'x\"y'], 'c': 1.5} | tojson }}", NULL,
         "{\"a\": 1, \"b\": [true, null, \"x\\\"y\"], \"c\": 1.5}"},
        {"{{ {'a': [1, 2], 'e': {}} | tojson(indent=2) }}", NULL,
         "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"e\": {}\n}"},
        {"{{ '\xc3\xa9\\n' | tojson }} {{ '\xc3\xa9' | tojson(ensure_ascii=true) }}", NULL,
         "\"\xc3\xa9\\n\" \"\\u00e9\""},
        {"{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }} {{ [1, 2] | tojson(separators=(',', ':')) }}", NULL,
         "{\"a\": 2, \"b\": 1} [1,2]"},
        {"{{ [1,2,1,3] | unique | list }} {{ [1,2,3] | reverse | list }} {{ 'abc' | reverse }}", NULL,
         "[1, 2, 3] [3, 2, 1] cba"},
        {"{{ ['B', 'a', 'C'] | sort }} {{ ['B', 'a', 'C'] | sort(case_sensitive=true) }} {{ [2, 1] | sort(reverse=true) }}",
         NULL, "['a', 'B', 'C'] ['B', 'C', 'a'] [2, 1]"},
        {"{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}",
         NULL, "a\n  b\n\n  c|  a\n  b|a\n  \n  b"},
        {"{{ '42' | int + 1 }} {{ '3.7' | int }} {{ 'x' | int }} {{ '2.5' | float }} {{ 3.9 | int }} {{ 7 | string }}",
         NULL, "43 3 0 2.5 3 7"},
        {"{{ {'a': 1} | items | list }} {{ 'ab' | list }} {{ [1, 2, 3] | sum }} {{ [3, 1, 2] | max }}", NULL,
         "[('a', 1)] ['a', 'b'] 6 3"},
        {"{{ ['a', 'b'] | map('upper') | join }} {{ [1, 2, 3, 4] | select('odd') | list }}", NULL, "AB [1, 3]"},
        {"{{ 'x' | safe }} {{ 2.567 | round(1) }} {{ [1, 2, 3] | batch(2) | list }}", NULL,
         "x 2.6 [[1, 2], [3]]"},
        {"{% filter upper %}abc{% endfilter %}", NULL, "ABC"},
        {"{% set x %}hi {{ 1 }}{% endset %}[{{ x }}]", NULL, "[hi 1]"},
        {"{% set x | upper %}hi{% endset %}{{ x }}", NULL, "HI"},
    };
    RUN(c);
}

static void test_tests(void **st) {
    (void)st;
    static const rcase c[] = {
        {"{{ x is defined }} {{ y is defined }} {{ none is none }} {{ 'a' is string }} {{ {} is mapping }} "
         "{{ [] is iterable }} {{ 3 is odd }} {{ 4 is divisibleby 2 }} {{ y is not defined }}", "{\"x\": 1}",
         "True False True True True True True True True"},
        {"{{ 1 is integer }} {{ true is integer }} {{ 1.0 is float }} {{ true is number }} {{ true is boolean }} "
         "{{ false is false }} {{ y is iterable }} {{ none is iterable }} {{ 'a' is sequence }}", NULL,
         "True False True True True True True False True"},
        {"{{ x is none }} {{ x is not none }} {{ 1 is eq 1 }} {{ 2 is gt 1 }} {{ 1 is in [1] }} {{ 'A' is upper }}",
         "{\"x\": null}", "True False True True True True"},
        {"{{ enable_thinking is defined and enable_thinking is false }}", "{\"enable_thinking\": false}", "True"},
    };
    RUN(c);
}

static void test_control(void **st) {
    (void)st;
    static const rcase c[] = {
        {"{% for x in ['a','b','c'] %}{{ loop.index }}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}", NULL,
         "1a,2b,3c"},
        {"{% for x in [1,2,3] %}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.length }} {% endfor %}",
         NULL, "03True3 12False3 21False3 "},
        {"{% for x in [1,2,3] %}[{{ loop.previtem }}|{{ loop.nextitem }}]{% endfor %}", NULL, "[|2][1|3][2|]"},
        {"{% for x in [] %}x{% else %}empty{% endfor %}", NULL, "empty"},
        {"{% for x in missing %}x{% endfor %}ok", NULL, "ok"},
        {"{% set x = 1 %}{% for i in [1,2] %}{% set x = x + 10 %}{{ x }} {% endfor %}{{ x }}", NULL, "11 11 1"},
        {"{% set ns = namespace(c=0) %}{% for i in [1,2,3] %}{% set ns.c = ns.c + i %}{% endfor %}{{ ns.c }}", NULL,
         "6"},
        {"{% if false %}a{% elif x == 2 %}b{% else %}c{% endif %}", "{\"x\": 2}", "b"},
        {"{% for i in range(10) %}{% if i == 3 %}{% break %}{% endif %}{% if i == 1 %}{% continue %}{% endif %}"
         "{{ i }}{% endfor %}", NULL, "02"},
        {"{% for x in 'abc' %}{{ loop.cycle('o', 'e') }}{% endfor %}", NULL, "oeo"},
        {"{% for x in [1,2,3,4] if x is even %}{{ loop.index }}:{{ x }} {% endfor %}", NULL, "1:2 2:4 "},
        {"{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }},{% endfor %}", NULL, "3,7,"},
        {"{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}", NULL, "xy"},
        {"{% with a = 1 %}{{ a }}{% endwith %}[{{ a }}]", NULL, "1[]"},
        {"{% set a, b = 1, 2 %}{{ b }}{{ a }}", NULL, "21"},
        {"{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(3, 0, -1) | list }}", NULL,
         "[0, 1, 2] [1, 3, 5] [3, 2, 1]"},
        {"{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} "
         "{{ greet('B', punct='?') }} {{ greet(name='C') }}", NULL, "Hi A! Hi B? Hi C!"},
        {"{% macro wrap(t) %}<{{ t }}:{{ caller() }}>{% endmacro %}{% call wrap('p') %}inner{% endcall %}", NULL,
         "<p:inner>"},
        {"{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}", NULL, "321"},
        {"{% set d = {'k': 'v'} %}{{ d.k }}{% set l = [1, 2] %}{{ l[1] }}", NULL, "v2"},
        {"{% generation %}gen{% endgeneration %}", NULL, "gen"},
    };
    RUN(c);
}

/* ==== Errors: clear messages with the line ==== */
static void expect_error(const char *tpl, const char *ctx, const char *needle) {
    char *out = NULL;
    mx_error err = {0};
    int rc = render(tpl, ctx, &out, &err);
    if (rc == 0) fprintf(stderr, "expected an error for %s, got [%s]\n", tpl, out);
    assert_int_equal(rc, -1);
    if (!strstr(err.msg, needle)) fprintf(stderr, "error for %s: [%s], wanted [%s]\n", tpl, err.msg, needle);
    assert_non_null(strstr(err.msg, needle));
    free(out);
}

static void test_errors(void **st) {
    (void)st;
    expect_error("a\n{{ x | foo }}", NULL, "chat template line 2: unknown filter 'foo'");
    expect_error("{{ x is foo }}", NULL, "unknown test 'foo'");
    expect_error("{% include 'x' %}", NULL, "line 1: the 'include' tag is not supported");
    expect_error("{% frobnicate %}", NULL, "unknown tag 'frobnicate'");
    expect_error("{% if x %}\nabc", NULL, "line 2: unexpected end of template, expected 'endif'");
    expect_error("{{ x + }}", NULL, "line 1: unexpected '}}'");
    expect_error("{{ 'abc }}", NULL, "unterminated string");
    expect_error("{{ (1 }}", NULL, "unexpected '}'");
    expect_error("{{ x.y }}", NULL, "'x' is undefined");
    expect_error("{{ d.a.b }}", "{\"d\": {}}", "'dict object' has no attribute 'a'");
    expect_error("{{ 'a' + 1 }}", NULL, "unsupported operand type(s) for +: 'str' and 'int'");
    expect_error("{{ x + 1 }}", NULL, "'x' is undefined");
    expect_error("\n\n{{ raise_exception('Roles must alternate') }}", NULL, "line 3: Roles must alternate");
    expect_error("{{ 1 / 0 }}", NULL, "division by zero");
    expect_error("{{ range(1000000) | list }}", NULL, "Range too big");
    expect_error("{% break %}", NULL, "'break' outside of a loop");
    expect_error("{{ x | tojson }}", NULL, "not JSON serializable");
    expect_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", NULL, "too deeply");
    expect_error("{{ [].append(1) }}", NULL, "unsafe");
    expect_error("{% for x in 3 %}{% endfor %}", NULL, "'int' object is not iterable");
    expect_error("{% endif %}", NULL, "unexpected 'endif'");
    expect_error("\xff", NULL, "not valid UTF-8");
    /* code point escapes past Unicode, up to all 32 bits (libFuzzer, session 21: the value
     * overflowed a signed int) */
    expect_error("{{ '\\UFFFFFFFF' }}", NULL, "invalid code point escape");
    expect_error("{{ '\\U80000000' }}", NULL, "invalid code point escape");
    expect_error("{{ '\\U00110000' }}", NULL, "invalid code point escape");
    expect_error("{{ '\\uD800' }}", NULL, "invalid code point escape");
    char *out = NULL;
    mx_error err = {0};
    assert_int_equal(render("{{ '\\U0010FFFF|\\u00e9|\\x41|\\101' }}", NULL, &out, &err), 0);
    assert_string_equal(out, "\xf4\x8f\xbf\xbf|\xc3\xa9|A|A");
    free(out);
}

static void test_limits(void **st) {
    (void)st;
    jinja_template *t;
    mx_error err = {0};
    char *out = NULL;
    assert_int_equal(jinja_compile(&t, "{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", &err), 0);
    jinja_limits lim = jinja_default_limits;
    lim.max_output = 1 << 20;
    assert_int_equal(jinja_render_ex(t, NULL, &lim, &out, &err), -1);
    assert_non_null(strstr(err.msg, "limit"));
    lim = jinja_default_limits;
    lim.max_steps = 1000;
    assert_int_equal(jinja_render_ex(t, NULL, &lim, &out, &err), -1);
    assert_non_null(strstr(err.msg, "too many steps"));
    jinja_free(t);
    /* Deeply nested parentheses are a parse error, not a stack overflow. */
    char deep[4096];
    size_t k = 0;
    k += (size_t)snprintf(deep, sizeof deep, "{{ ");
    for (int i = 0; i < 1000; i++) deep[k++] = '(';
    deep[k] = '\0';
    assert_int_equal(jinja_compile(&t, deep, &err), -1);
    /* compile once, render many */
    assert_int_equal(jinja_compile(&t, "{{ n }}", &err), 0);
    for (int i = 0; i < 3; i++) {
        json_t *ctx = json_pack("{s:i}", "n", i);
        assert_int_equal(jinja_render(t, ctx, &out, &err), 0);
        char want[8];
        snprintf(want, sizeof want, "%d", i);
        assert_string_equal(out, want);
        free(out);
        json_decref(ctx);
    }
    jinja_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whitespace), cmocka_unit_test(test_values), cmocka_unit_test(test_access),
        cmocka_unit_test(test_strings),    cmocka_unit_test(test_filters), cmocka_unit_test(test_tests),
        cmocka_unit_test(test_control),    cmocka_unit_test(test_errors),  cmocka_unit_test(test_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
