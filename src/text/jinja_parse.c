/* Jinja parser, expressions: tokens -> AST. Precedence and grammar follow jinja2/parser.py:
 *   expr    := or ('if' or ('else' expr)?)*
 *   or      := and ('or' and)* ; and := not ('and' not)* ; not := 'not' not | compare
 *   compare := math1 (('=='|'!='|'<'|'<='|'>'|'>='|'in'|'not in') math1)*
 *   math1   := concat (('+'|'-') concat)* ; concat := math2 ('~' math2)*
 *   math2   := pow (('*'|'/'|'//'|'%') pow)* ; pow := unary ('**' unary)*
 *   unary   := ('-'|'+') unary-without-filters | primary postfix* ; then ('|' filter | 'is' test | call)*
 * so `x | length - 1` is (x|length) - 1 and `-x | abs` is abs(-x). */
#include <stdio.h>
#include <string.h>

#include "text/jinja_parser.h"

const jtok *jp_cur(jparser *P) { return &P->t[P->i]; }
const jtok *jp_peek(jparser *P, size_t k) { return &P->t[P->i + k < P->n ? P->i + k : P->n - 1]; }
void jp_adv(jparser *P) { if (P->i + 1 < P->n) P->i++; }

bool jp_is_op(const jtok *t, const char *op) {
    return t->kind == JT_OP && t->n == strlen(op) && !memcmp(t->p, op, t->n);
}
bool jp_is_name(const jtok *t, const char *name) {
    return t->kind == JT_NAME && t->n == strlen(name) && !memcmp(t->p, name, t->n);
}

static void jp_describe(const jtok *t, char *out, size_t cap) {
    switch (t->kind) {
    case JT_EOF: snprintf(out, cap, "end of template"); break;
    case JT_DATA: snprintf(out, cap, "template data"); break;
    case JT_VAR_BEGIN: snprintf(out, cap, "'{{'"); break;
    case JT_VAR_END: snprintf(out, cap, "'}}'"); break;
    case JT_BLOCK_BEGIN: snprintf(out, cap, "'{%%'"); break;
    case JT_BLOCK_END: snprintf(out, cap, "'%%}'"); break;
    case JT_STRING: snprintf(out, cap, "string literal"); break;
    default: snprintf(out, cap, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->p);
    }
}

int jp_fail_at(jparser *P, const jtok *t, const char *fmt, const char *arg) {
    char msg[256];
    snprintf(msg, sizeof msg, fmt, arg);
    return mx_fail(P->err, "chat template line %d: %s", t->line, msg);
}

int jp_unexpected(jparser *P, const char *expected) {
    char what[64], msg[160];
    jp_describe(jp_cur(P), what, sizeof what);
    if (expected) snprintf(msg, sizeof msg, "unexpected %s, expected %s", what, expected);
    else snprintf(msg, sizeof msg, "unexpected %s", what);
    return jp_fail_at(P, jp_cur(P), "%s", msg);
}

jnode *jp_mk(jparser *P, int kind, int line) {
    jnode *n = jarena_alloc(P->a, sizeof *n);
    if (!n) {
        mx_fail(P->err, "chat template: out of memory while parsing");
        return NULL;
    }
    n->kind = (uint8_t)kind;
    n->line = line;
    n->id = -1;
    return n;
}

const char *jp_tok_str(jparser *P, const jtok *t) { return jarena_strndup(P->a, t->p, t->n); }

int jp_nvec_push(jparser *P, jp_nvec *v, jnode *x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        jnode **nv = jarena_alloc(P->a, cap * sizeof *nv);
        if (!nv) return mx_fail(P->err, "chat template: out of memory while parsing");
        if (v->n) memcpy(nv, v->v, v->n * sizeof *nv);
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = x;
    return 0;
}
int jp_svec_push(jparser *P, jp_svec *v, const char *x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        const char **nv = jarena_alloc(P->a, cap * sizeof *nv);
        if (!nv) return mx_fail(P->err, "chat template: out of memory while parsing");
        if (v->n) memcpy(nv, v->v, v->n * sizeof *nv);
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = x;
    return 0;
}

int jp_expect_op(jparser *P, const char *op) {
    if (!jp_is_op(jp_cur(P), op)) {
        char exp[16];
        snprintf(exp, sizeof exp, "'%s'", op);
        return jp_unexpected(P, exp);
    }
    jp_adv(P);
    return 0;
}

const char *jp_expect_name(jparser *P) {
    if (jp_cur(P)->kind != JT_NAME) {
        jp_unexpected(P, "a name");
        return NULL;
    }
    const char *s = jp_tok_str(P, jp_cur(P));
    jp_adv(P);
    return s;
}

static jnode *jp_parse_unary(jparser *P, bool with_filter);
static jnode *jp_parse_primary(jparser *P);

/* ==== Calls, filters, tests ==== */
int jp_parse_call_args(jparser *P, jnode *n) {
    jp_nvec args = {0}, kwv = {0};
    jp_svec kwn = {0};
    if (jp_expect_op(P, "(")) return -1;
    bool need_comma = false;
    while (!jp_is_op(jp_cur(P), ")")) {
        if (need_comma) {
            if (jp_expect_op(P, ",")) return -1;
            if (jp_is_op(jp_cur(P), ")")) break;
        }
        if (jp_is_op(jp_cur(P), "*") || jp_is_op(jp_cur(P), "**"))
            return jp_fail_at(P, jp_cur(P), "%s", "*args and **kwargs in calls are not supported");
        if (jp_cur(P)->kind == JT_NAME && jp_is_op(jp_peek(P, 1), "=")) {
            const char *key = jp_tok_str(P, jp_cur(P));
            jp_adv(P);
            jp_adv(P);
            jnode *v = jp_parse_expr(P, true);
            if (!key || !v || jp_svec_push(P, &kwn, key) || jp_nvec_push(P, &kwv, v)) return -1;
        } else {
            if (kwn.n) return jp_fail_at(P, jp_cur(P), "%s", "positional argument after keyword argument");
            jnode *v = jp_parse_expr(P, true);
            if (!v || jp_nvec_push(P, &args, v)) return -1;
        }
        need_comma = true;
    }
    jp_adv(P); /* ) */
    n->kids = args.v;
    n->n_kids = args.n;
    n->names = kwn.v;
    n->n_names = kwn.n;
    n->kids2 = kwv.v;
    n->n_kids2 = kwv.n;
    return 0;
}

static jnode *jp_parse_call(jparser *P, jnode *callee) {
    jnode *n = jp_mk(P, JN_CALL, jp_cur(P)->line);
    if (!n) return NULL;
    n->a = callee;
    return jp_parse_call_args(P, n) ? NULL : n;
}

/* name(.name)* as one dotted string */
const char *jp_parse_dotted(jparser *P) {
    const char *name = jp_expect_name(P);
    while (name && jp_is_op(jp_cur(P), ".") && jp_peek(P, 1)->kind == JT_NAME) {
        jp_adv(P);
        char buf[256];
        snprintf(buf, sizeof buf, "%s.%.*s", name, (int)jp_cur(P)->n, jp_cur(P)->p);
        name = jarena_strndup(P->a, buf, strlen(buf));
        jp_adv(P);
    }
    return name;
}

jnode *jp_parse_filter(jparser *P, jnode *arg) {
    int line = jp_cur(P)->line;
    jp_adv(P); /* | */
    jnode *n = jp_mk(P, JN_FILTER, line);
    if (!n) return NULL;
    n->a = arg;
    n->name = jp_parse_dotted(P);
    if (!n->name) return NULL;
    n->id = jinja_filter_id(n->name);
    if (jp_is_op(jp_cur(P), "(") && jp_parse_call_args(P, n)) return NULL;
    return n;
}

static jnode *jp_parse_test(jparser *P, jnode *arg) {
    int line = jp_cur(P)->line;
    jp_adv(P); /* is */
    bool negated = false;
    if (jp_is_name(jp_cur(P), "not")) {
        negated = true;
        jp_adv(P);
    }
    jnode *n = jp_mk(P, JN_TEST, line);
    if (!n) return NULL;
    n->a = arg;
    n->name = jp_parse_dotted(P);
    if (!n->name) return NULL;
    n->id = jinja_test_id(n->name);
    const jtok *t = jp_cur(P);
    if (jp_is_op(t, "(")) {
        if (jp_parse_call_args(P, n)) return NULL;
    } else if ((t->kind == JT_NAME || t->kind == JT_STRING || t->kind == JT_INT || t->kind == JT_FLOAT ||
                jp_is_op(t, "[") || jp_is_op(t, "{")) &&
               !jp_is_name(t, "else") && !jp_is_name(t, "or") && !jp_is_name(t, "and")) {
        /* `x is divisibleby 3`, `x is sameas none`: one argument without parentheses. */
        if (jp_is_name(t, "is")) {
            jp_fail_at(P, t, "%s", "you cannot chain multiple tests with 'is'");
            return NULL;
        }
        jnode *a1 = jp_parse_primary(P);
        if (!a1) return NULL;
        n->kids = jarena_alloc(P->a, sizeof(jnode *));
        if (!n->kids) return NULL;
        n->kids[0] = a1;
        n->n_kids = 1;
    }
    if (!negated) return n;
    jnode *x = jp_mk(P, JN_NOT, line);
    if (x) x->a = n;
    return x;
}

static jnode *jp_parse_filter_expr(jparser *P, jnode *n) {
    while (n) {
        if (jp_is_op(jp_cur(P), "|")) n = jp_parse_filter(P, n);
        else if (jp_is_name(jp_cur(P), "is")) n = jp_parse_test(P, n);
        else if (jp_is_op(jp_cur(P), "(")) n = jp_parse_call(P, n);
        else break;
    }
    return n;
}

/* ==== Postfix: .attr, [item], [a:b:c], (call) ==== */
static jnode *jp_parse_subscript(jparser *P, jnode *obj) {
    int line = jp_cur(P)->line;
    jp_adv(P); /* [ */
    jnode *parts[3] = {NULL, NULL, NULL};
    int nparts = 0;
    bool is_slice = false;
    for (;;) {
        if (jp_is_op(jp_cur(P), ":")) {
            is_slice = true;
            if (nparts >= 2) return (jp_unexpected(P, "']'"), NULL);
            nparts++;
            jp_adv(P);
            continue;
        }
        if (jp_is_op(jp_cur(P), "]")) break;
        if (parts[nparts]) return (jp_unexpected(P, "']'"), NULL);
        parts[nparts] = jp_parse_expr(P, true);
        if (!parts[nparts]) return NULL;
        if (!is_slice && jp_is_op(jp_cur(P), ",")) return (jp_fail_at(P, jp_cur(P), "%s", "tuple subscripts are not supported"), NULL);
    }
    jp_adv(P); /* ] */
    if (!is_slice && !parts[0]) return (jp_fail_at(P, jp_cur(P), "%s", "empty subscript"), NULL);
    jnode *n = jp_mk(P, is_slice ? JN_SLICE : JN_GETITEM, line);
    if (!n) return NULL;
    n->a = obj;
    if (is_slice) {
        n->b = parts[0];
        n->c = parts[1];
        n->d = parts[2];
    } else {
        n->b = parts[0];
    }
    return n;
}

static jnode *jp_parse_postfix(jparser *P, jnode *n) {
    while (n) {
        const jtok *t = jp_cur(P);
        if (jp_is_op(t, ".")) {
            jp_adv(P);
            const jtok *a = jp_cur(P);
            if (a->kind == JT_NAME) {
                jnode *g = jp_mk(P, JN_GETATTR, t->line);
                if (!g) return NULL;
                g->a = n;
                g->name = jp_tok_str(P, a);
                jp_adv(P);
                n = g;
            } else if (a->kind == JT_INT) {
                jnode *k = jp_mk(P, JN_CONST, t->line), *g = jp_mk(P, JN_GETITEM, t->line);
                if (!k || !g) return NULL;
                k->val = jv_int(a->i);
                g->a = n;
                g->b = k;
                jp_adv(P);
                n = g;
            } else {
                jp_unexpected(P, "an attribute name");
                return NULL;
            }
        } else if (jp_is_op(t, "[")) {
            n = jp_parse_subscript(P, n);
        } else if (jp_is_op(t, "(")) {
            n = jp_parse_call(P, n);
        } else {
            break;
        }
    }
    return n;
}

/* ==== Primary ==== */
static jnode *jp_parse_primary(jparser *P) {
    const jtok *t = jp_cur(P);
    if (++P->depth > MAX_PARSE_DEPTH) {
        jp_fail_at(P, t, "%s", "expression nested too deeply");
        return NULL;
    }
    jnode *n = NULL;
    if (t->kind == JT_NAME) {
        n = jp_mk(P, JN_CONST, t->line);
        if (!n) return NULL;
        if (jp_is_name(t, "true") || jp_is_name(t, "True")) n->val = jv_bool(true);
        else if (jp_is_name(t, "false") || jp_is_name(t, "False")) n->val = jv_bool(false);
        else if (jp_is_name(t, "none") || jp_is_name(t, "None")) n->val = jv_none();
        else {
            n->kind = JN_NAME;
            n->name = jp_tok_str(P, t);
        }
        jp_adv(P);
    } else if (t->kind == JT_STRING) {
        /* Adjacent string literals concatenate, as in Python. */
        size_t total = 0, k = P->i;
        while (P->t[k].kind == JT_STRING) total += P->t[k++].n;
        char *s = jarena_alloc(P->a, total + 1);
        n = jp_mk(P, JN_CONST, t->line);
        if (!s || !n) return NULL;
        size_t off = 0;
        while (jp_cur(P)->kind == JT_STRING) {
            memcpy(s + off, jp_cur(P)->p, jp_cur(P)->n);
            off += jp_cur(P)->n;
            jp_adv(P);
        }
        n->val = jv_strn(s, total);
    } else if (t->kind == JT_INT || t->kind == JT_FLOAT) {
        n = jp_mk(P, JN_CONST, t->line);
        if (!n) return NULL;
        n->val = t->kind == JT_INT ? jv_int(t->i) : jv_float(t->f);
        jp_adv(P);
    } else if (jp_is_op(t, "(")) {
        jp_adv(P);
        n = jp_parse_tuple(P, true, NULL, true);
        if (!n || jp_expect_op(P, ")")) return NULL;
    } else if (jp_is_op(t, "[") || jp_is_op(t, "{")) {
        bool dict = jp_is_op(t, "{");
        const char *close = dict ? "}" : "]";
        jp_adv(P);
        jp_nvec keys = {0}, vals = {0};
        while (!jp_is_op(jp_cur(P), close)) {
            if (keys.n && jp_expect_op(P, ",")) return NULL;
            if (jp_is_op(jp_cur(P), close)) break;
            jnode *k = jp_parse_expr(P, true);
            if (!k || jp_nvec_push(P, &keys, k)) return NULL;
            if (dict) {
                if (jp_expect_op(P, ":")) return NULL;
                jnode *v = jp_parse_expr(P, true);
                if (!v || jp_nvec_push(P, &vals, v)) return NULL;
            }
        }
        jp_adv(P);
        n = jp_mk(P, dict ? JN_DICT : JN_LIST, t->line);
        if (!n) return NULL;
        n->kids = keys.v;
        n->n_kids = keys.n;
        n->kids2 = vals.v;
        n->n_kids2 = vals.n;
    } else {
        jp_unexpected(P, "an expression");
        return NULL;
    }
    P->depth--;
    return n;
}

/* ==== Operators ==== */
static jnode *jp_parse_unary(jparser *P, bool with_filter) {
    const jtok *t = jp_cur(P);
    jnode *n;
    if (jp_is_op(t, "-") || jp_is_op(t, "+")) {
        if (++P->depth > MAX_PARSE_DEPTH) return (jp_fail_at(P, t, "%s", "expression nested too deeply"), NULL);
        jp_adv(P);
        jnode *x = jp_parse_unary(P, false);
        P->depth--;
        if (!x) return NULL;
        n = jp_mk(P, jp_is_op(t, "-") ? JN_NEG : JN_POS, t->line);
        if (!n) return NULL;
        n->a = x;
    } else {
        n = jp_parse_primary(P);
    }
    n = jp_parse_postfix(P, n);
    if (with_filter) n = jp_parse_filter_expr(P, n);
    return n;
}

static jnode *jp_binop(jparser *P, int op, int line, jnode *a, jnode *b) {
    if (!a || !b) return NULL;
    jnode *n = jp_mk(P, JN_BINOP, line);
    if (!n) return NULL;
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    return n;
}

static jnode *jp_parse_pow(jparser *P) {
    jnode *n = jp_parse_unary(P, true);
    while (n && jp_is_op(jp_cur(P), "**")) {
        int line = jp_cur(P)->line;
        jp_adv(P);
        n = jp_binop(P, JOP_POW, line, n, jp_parse_unary(P, true));
    }
    return n;
}

static jnode *jp_parse_math2(jparser *P) {
    jnode *n = jp_parse_pow(P);
    for (;;) {
        const jtok *t = jp_cur(P);
        int op = jp_is_op(t, "*") ? JOP_MUL : jp_is_op(t, "/") ? JOP_DIV : jp_is_op(t, "//") ? JOP_FLOORDIV
               : jp_is_op(t, "%") ? JOP_MOD : -1;
        if (!n || op < 0) return n;
        jp_adv(P);
        n = jp_binop(P, op, t->line, n, jp_parse_pow(P));
    }
}

static jnode *jp_parse_concat(jparser *P) {
    jnode *n = jp_parse_math2(P);
    while (n && jp_is_op(jp_cur(P), "~")) {
        int line = jp_cur(P)->line;
        jp_adv(P);
        n = jp_binop(P, JOP_CONCAT, line, n, jp_parse_math2(P));
    }
    return n;
}

static jnode *jp_parse_math1(jparser *P) {
    jnode *n = jp_parse_concat(P);
    for (;;) {
        const jtok *t = jp_cur(P);
        int op = jp_is_op(t, "+") ? JOP_ADD : jp_is_op(t, "-") ? JOP_SUB : -1;
        if (!n || op < 0) return n;
        jp_adv(P);
        n = jp_binop(P, op, t->line, n, jp_parse_concat(P));
    }
}

static jnode *jp_parse_compare(jparser *P) {
    jnode *left = jp_parse_math1(P), *result = NULL;
    while (left) {
        const jtok *t = jp_cur(P);
        int op = jp_is_op(t, "==") ? JOP_EQ : jp_is_op(t, "!=") ? JOP_NE : jp_is_op(t, "<") ? JOP_LT
               : jp_is_op(t, "<=") ? JOP_LE : jp_is_op(t, ">") ? JOP_GT : jp_is_op(t, ">=") ? JOP_GE
               : jp_is_name(t, "in") ? JOP_IN : -1;
        if (op < 0 && jp_is_name(t, "not") && jp_is_name(jp_peek(P, 1), "in")) {
            op = JOP_NOTIN;
            jp_adv(P);
        }
        if (op < 0) break;
        jp_adv(P);
        jnode *right = jp_parse_math1(P);
        jnode *cmp = jp_binop(P, op, t->line, left, right);
        if (!cmp) return NULL;
        cmp->kind = JN_COMPARE;
        /* a < b < c is (a < b) and (b < c) */
        if (result) {
            jnode *and = jp_mk(P, JN_AND, t->line);
            if (!and) return NULL;
            and->a = result;
            and->b = cmp;
            result = and;
        } else {
            result = cmp;
        }
        left = right;
    }
    return result ? result : left;
}

static jnode *jp_parse_not(jparser *P) {
    if (jp_is_name(jp_cur(P), "not")) {
        const jtok *t = jp_cur(P);
        if (++P->depth > MAX_PARSE_DEPTH) return (jp_fail_at(P, t, "%s", "expression nested too deeply"), NULL);
        jp_adv(P);
        jnode *x = jp_parse_not(P);
        P->depth--;
        if (!x) return NULL;
        jnode *n = jp_mk(P, JN_NOT, t->line);
        if (n) n->a = x;
        return n;
    }
    return jp_parse_compare(P);
}

static jnode *jp_parse_and(jparser *P) {
    jnode *n = jp_parse_not(P);
    while (n && jp_is_name(jp_cur(P), "and")) {
        int line = jp_cur(P)->line;
        jp_adv(P);
        jnode *b = jp_parse_not(P), *x = jp_mk(P, JN_AND, line);
        if (!b || !x) return NULL;
        x->a = n;
        x->b = b;
        n = x;
    }
    return n;
}

static jnode *jp_parse_or(jparser *P) {
    jnode *n = jp_parse_and(P);
    while (n && jp_is_name(jp_cur(P), "or")) {
        int line = jp_cur(P)->line;
        jp_adv(P);
        jnode *b = jp_parse_and(P), *x = jp_mk(P, JN_OR, line);
        if (!b || !x) return NULL;
        x->a = n;
        x->b = b;
        n = x;
    }
    return n;
}

jnode *jp_parse_expr(jparser *P, bool with_cond) {
    if (++P->depth > MAX_PARSE_DEPTH) return (jp_fail_at(P, jp_cur(P), "%s", "expression nested too deeply"), NULL);
    jnode *n = jp_parse_or(P);
    while (with_cond && n && jp_is_name(jp_cur(P), "if")) {
        int line = jp_cur(P)->line;
        jp_adv(P);
        jnode *test = jp_parse_or(P), *x = jp_mk(P, JN_COND, line);
        if (!test || !x) return NULL;
        x->a = test;
        x->b = n;
        if (jp_is_name(jp_cur(P), "else")) {
            jp_adv(P);
            x->c = jp_parse_expr(P, true);
            if (!x->c) return NULL;
        }
        n = x;
    }
    P->depth--;
    return n;
}

static bool jp_is_tuple_end(jparser *P, const char *extra_end) {
    const jtok *t = jp_cur(P);
    return t->kind == JT_VAR_END || t->kind == JT_BLOCK_END || t->kind == JT_EOF || jp_is_op(t, ")") ||
           (extra_end && jp_is_name(t, extra_end));
}

jnode *jp_parse_tuple(jparser *P, bool with_cond, const char *extra_end, bool explicit_parens) {
    int line = jp_cur(P)->line;
    jp_nvec items = {0};
    bool is_tuple = false;
    for (;;) {
        if (items.n && jp_expect_op(P, ",")) return NULL;
        if (jp_is_tuple_end(P, extra_end)) break;
        jnode *x = jp_parse_expr(P, with_cond);
        if (!x || jp_nvec_push(P, &items, x)) return NULL;
        if (jp_is_op(jp_cur(P), ",")) is_tuple = true;
        else break;
    }
    if (!is_tuple) {
        if (items.n) return items.v[0];
        if (!explicit_parens) return (jp_unexpected(P, "an expression"), NULL);
    }
    jnode *n = jp_mk(P, JN_TUPLE, line);
    if (!n) return NULL;
    n->kids = items.v;
    n->n_kids = items.n;
    return n;
}

