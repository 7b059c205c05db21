/* Jinja tests (`x is defined`, `x is divisibleby 3`, ...) as jinja2 3.1 defines them. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "text/jinja_internal.h"

/* ==== Tests ==== */
enum { T_DEFINED, T_UNDEFINED, T_NONE, T_BOOLEAN, T_FALSE, T_TRUE, T_INTEGER, T_FLOAT, T_NUMBER,
       T_STRING, T_MAPPING, T_ITERABLE, T_SEQUENCE, T_CALLABLE, T_SAMEAS, T_ESCAPED, T_LOWER, T_UPPER,
       T_ODD, T_EVEN, T_DIVISIBLEBY, T_EQ, T_NE, T_LT, T_LE, T_GT, T_GE, T_IN, T_COUNT };
static const struct { const char *name; int id; } k_tests[] = {
    {"defined", T_DEFINED}, {"undefined", T_UNDEFINED}, {"none", T_NONE}, {"boolean", T_BOOLEAN},
    {"false", T_FALSE}, {"true", T_TRUE}, {"integer", T_INTEGER}, {"float", T_FLOAT}, {"number", T_NUMBER},
    {"string", T_STRING}, {"mapping", T_MAPPING}, {"iterable", T_ITERABLE}, {"sequence", T_SEQUENCE},
    {"callable", T_CALLABLE}, {"sameas", T_SAMEAS}, {"escaped", T_ESCAPED}, {"lower", T_LOWER},
    {"upper", T_UPPER}, {"odd", T_ODD}, {"even", T_EVEN}, {"divisibleby", T_DIVISIBLEBY},
    {"eq", T_EQ}, {"equalto", T_EQ}, {"==", T_EQ}, {"ne", T_NE}, {"!=", T_NE}, {"lt", T_LT},
    {"lessthan", T_LT}, {"<", T_LT}, {"le", T_LE}, {"<=", T_LE}, {"gt", T_GT}, {"greaterthan", T_GT},
    {">", T_GT}, {"ge", T_GE}, {">=", T_GE}, {"in", T_IN},
};

int jinja_test_id(const char *name) {
    for (size_t i = 0; i < sizeof k_tests / sizeof k_tests[0]; i++)
        if (!strcmp(k_tests[i].name, name)) return k_tests[i].id;
    return -1;
}

int jr_apply_test(jrender *r, const jnode *n, int id, const char *name, jv v, const jv *args, size_t n_args,
                  bool *out) {
    int line = n->line;
    jv a = n_args ? args[0] : jv_undef(NULL);
    bool need_arg = id == T_SAMEAS || id == T_DIVISIBLEBY || (id >= T_EQ && id <= T_IN);
    if (need_arg && !n_args) return jr_fail(r, line, "test '%s' needs an argument", name);
    if (!need_arg && n_args) return jr_fail(r, line, "test '%s' takes no arguments", name);
    switch (id) {
    case T_DEFINED: *out = v.k != JV_UNDEF; return 0;
    case T_UNDEFINED: *out = v.k == JV_UNDEF; return 0;
    case T_NONE: *out = v.k == JV_NONE; return 0;
    case T_BOOLEAN: *out = v.k == JV_BOOL; return 0;
    case T_FALSE: *out = v.k == JV_BOOL && !v.u.b; return 0;
    case T_TRUE: *out = v.k == JV_BOOL && v.u.b; return 0;
    case T_INTEGER: *out = v.k == JV_INT; return 0;
    case T_FLOAT: *out = v.k == JV_FLOAT; return 0;
    case T_NUMBER: *out = jv_is_number(v); return 0;
    case T_STRING: *out = v.k == JV_STR; return 0;
    case T_MAPPING: *out = v.k == JV_DICT; return 0;
    case T_ITERABLE: *out = v.k == JV_STR || v.k == JV_LIST || v.k == JV_DICT || v.k == JV_UNDEF; return 0;
    case T_SEQUENCE: *out = v.k == JV_STR || v.k == JV_LIST || v.k == JV_DICT || v.k == JV_UNDEF; return 0;
    case T_CALLABLE: *out = v.k == JV_MACRO || v.k == JV_FUNC || v.k == JV_METHOD; return 0;
    case T_SAMEAS:
        if (v.k != a.k) *out = false;
        else if (v.k == JV_NONE || v.k == JV_UNDEF) *out = true;
        else if (v.k == JV_BOOL) *out = v.u.b == a.u.b;
        else if (v.k == JV_INT) *out = v.u.i == a.u.i && v.u.i >= -5 && v.u.i <= 256; /* CPython small ints */
        else if (v.k == JV_LIST || v.k == JV_DICT || v.k == JV_NS) *out = v.u.l == a.u.l;
        else *out = false;
        return 0;
    case T_ESCAPED: *out = v.safe; return 0;
    case T_LOWER:
    case T_UPPER: {
        jv s = jr_str(r, v), res;
        jv_method meth = {.self = s, .name = id == T_LOWER ? "islower" : "isupper"};
        if (s.k != JV_STR) return jr_oom(r, line);
        if (jr_call_method(r, line, &meth, NULL, 0, NULL, NULL, 0, &res)) return -1;
        *out = res.u.b;
        return 0;
    }
    case T_ODD:
    case T_EVEN:
    case T_DIVISIBLEBY: {
        jv rem;
        jv div = id == T_DIVISIBLEBY ? a : jv_int(2);
        if (v.k == JV_UNDEF) return jr_undefined_error(r, line, v);
        if (!jv_is_number(v) || !jv_is_number(div)) return jr_fail(r, line, "test '%s' needs numbers", name);
        if (jv_as_double(div) == 0.0) return jr_fail(r, line, "integer division or modulo by zero");
        if (v.k != JV_FLOAT && div.k != JV_FLOAT) {
            int64_t x = v.k == JV_BOOL ? v.u.b : v.u.i, y = div.k == JV_BOOL ? div.u.b : div.u.i;
            int64_t m = y == -1 ? 0 : x % y;
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            rem = jv_int(m);
        } else {
            double m = fmod(jv_as_double(v), jv_as_double(div));
            if (m != 0 && ((m < 0) != (jv_as_double(div) < 0))) m += jv_as_double(div);
            rem = jv_float(m);
        }
        bool zero = jv_as_double(rem) == 0.0;
        *out = id == T_ODD ? (rem.k == JV_INT ? rem.u.i == 1 : jv_as_double(rem) == 1.0) : zero;
        return 0;
    }
    case T_EQ: *out = jv_equal(v, a); return 0;
    case T_NE: *out = !jv_equal(v, a); return 0;
    case T_LT: case T_LE: case T_GT: case T_GE: {
        int cmp;
        mx_error e;
        if (v.k == JV_UNDEF) return jr_undefined_error(r, line, v);
        if (a.k == JV_UNDEF) return jr_undefined_error(r, line, a);
        if (jv_compare(v, a, &cmp, &e)) return jr_fail(r, line, "%s", e.msg);
        *out = cmp == 2 ? false : id == T_LT ? cmp < 0 : id == T_LE ? cmp <= 0 : id == T_GT ? cmp > 0 : cmp >= 0;
        return 0;
    }
    case T_IN: {
        if (a.k == JV_STR) {
            if (v.k != JV_STR) return jr_fail(r, line, "'in <string>' requires string as left operand, not %s", jv_type_name(v));
            *out = memmem(a.u.s.p, a.u.s.n, v.u.s.p, v.u.s.n) != NULL || v.u.s.n == 0;
        } else if (a.k == JV_LIST) {
            *out = false;
            for (size_t i = 0; i < a.u.l->n && !*out; i++) *out = jv_equal(v, a.u.l->v[i]);
        } else if (a.k == JV_DICT) {
            *out = jv_dict_get(a.u.d, v) != NULL;
        } else if (a.k == JV_UNDEF) {
            *out = false;
        } else {
            return jr_fail(r, line, "argument of type '%s' is not iterable", jv_type_name(a));
        }
        return 0;
    }
    }
    return jr_fail(r, line, "unknown test '%s'", name);
}
