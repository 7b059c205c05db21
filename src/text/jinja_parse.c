/* Jinja parser: tokens -> AST. Precedence and grammar follow jinja2/parser.py:
 *   expr    := or ('if' or ('else' expr)?)*
 *   or      := and ('or' and)* ; and := not ('and' not)* ; not := 'not' not | compare
 *   compare := math1 (('=='|'!='|'<'|'<='|'>'|'>='|'in'|'not in') math1)*
 *   math1   := concat (('+'|'-') concat)* ; concat := math2 ('~' math2)*
 *   math2   := pow (('*'|'/'|'//'|'%') pow)* ; pow := unary ('**' unary)*
 *   unary   := ('-'|'+') unary-without-filters | primary postfix* ; then ('|' filter | 'is' test | call)*
 * so `x | length - 1` is (x|length) - 1 and `-x | abs` is abs(-x). */
#include <stdio.h>
#include <string.h>

#include "text/jinja_internal.h"

#define MAX_PARSE_DEPTH 200

typedef struct parser {
    jarena *a;
    const jtok *t;
    size_t n, i;
    int depth;
    int loop_depth;
    mx_error *err;
} parser;

static const jtok *cur(parser *P) { return &P->t[P->i]; }
static const jtok *peek(parser *P, size_t k) { return &P->t[P->i + k < P->n ? P->i + k : P->n - 1]; }
static void adv(parser *P) { if (P->i + 1 < P->n) P->i++; }

static bool is_op(const jtok *t, const char *op) {
    return t->kind == JT_OP && t->n == strlen(op) && !memcmp(t->p, op, t->n);
}
static bool is_name(const jtok *t, const char *name) {
    return t->kind == JT_NAME && t->n == strlen(name) && !memcmp(t->p, name, t->n);
}

static void describe(const jtok *t, char *out, size_t cap) {
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

static int fail_at(parser *P, const jtok *t, const char *fmt, const char *arg) {
    char msg[256];
    snprintf(msg, sizeof msg, fmt, arg);
    return mx_fail(P->err, "chat template line %d: %s", t->line, msg);
}

static int unexpected(parser *P, const char *expected) {
    char what[64], msg[160];
    describe(cur(P), what, sizeof what);
    if (expected) snprintf(msg, sizeof msg, "unexpected %s, expected %s", what, expected);
    else snprintf(msg, sizeof msg, "unexpected %s", what);
    return fail_at(P, cur(P), "%s", msg);
}

static jnode *mk(parser *P, int kind, int line) {
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

static const char *tok_str(parser *P, const jtok *t) { return jarena_strndup(P->a, t->p, t->n); }

/* Growable node / name arrays in the arena. */
typedef struct nvec { jnode **v; size_t n, cap; } nvec;
static int nvec_push(parser *P, nvec *v, jnode *x) {
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
typedef struct svec { const char **v; size_t n, cap; } svec;
static int svec_push(parser *P, svec *v, const char *x) {
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

static jnode *parse_expr(parser *P, bool with_cond);
static jnode *parse_tuple(parser *P, bool with_cond, const char *extra_end, bool explicit_parens);
static jnode *parse_unary(parser *P, bool with_filter);
static jnode *parse_primary(parser *P);

static int expect_op(parser *P, const char *op) {
    if (!is_op(cur(P), op)) {
        char exp[16];
        snprintf(exp, sizeof exp, "'%s'", op);
        return unexpected(P, exp);
    }
    adv(P);
    return 0;
}

static const char *expect_name(parser *P) {
    if (cur(P)->kind != JT_NAME) {
        unexpected(P, "a name");
        return NULL;
    }
    const char *s = tok_str(P, cur(P));
    adv(P);
    return s;
}

/* ==== Calls, filters, tests ==== */
static int parse_call_args(parser *P, jnode *n) {
    nvec args = {0}, kwv = {0};
    svec kwn = {0};
    if (expect_op(P, "(")) return -1;
    bool need_comma = false;
    while (!is_op(cur(P), ")")) {
        if (need_comma) {
            if (expect_op(P, ",")) return -1;
            if (is_op(cur(P), ")")) break;
        }
        if (is_op(cur(P), "*") || is_op(cur(P), "**"))
            return fail_at(P, cur(P), "%s", "*args and **kwargs in calls are not supported");
        if (cur(P)->kind == JT_NAME && is_op(peek(P, 1), "=")) {
            const char *key = tok_str(P, cur(P));
            adv(P);
            adv(P);
            jnode *v = parse_expr(P, true);
            if (!key || !v || svec_push(P, &kwn, key) || nvec_push(P, &kwv, v)) return -1;
        } else {
            if (kwn.n) return fail_at(P, cur(P), "%s", "positional argument after keyword argument");
            jnode *v = parse_expr(P, true);
            if (!v || nvec_push(P, &args, v)) return -1;
        }
        need_comma = true;
    }
    adv(P); /* ) */
    n->kids = args.v;
    n->n_kids = args.n;
    n->names = kwn.v;
    n->n_names = kwn.n;
    n->kids2 = kwv.v;
    n->n_kids2 = kwv.n;
    return 0;
}

static jnode *parse_call(parser *P, jnode *callee) {
    jnode *n = mk(P, JN_CALL, cur(P)->line);
    if (!n) return NULL;
    n->a = callee;
    return parse_call_args(P, n) ? NULL : n;
}

/* name(.name)* as one dotted string */
static const char *parse_dotted(parser *P) {
    const char *name = expect_name(P);
    while (name && is_op(cur(P), ".") && peek(P, 1)->kind == JT_NAME) {
        adv(P);
        char buf[256];
        snprintf(buf, sizeof buf, "%s.%.*s", name, (int)cur(P)->n, cur(P)->p);
        name = jarena_strndup(P->a, buf, strlen(buf));
        adv(P);
    }
    return name;
}

static jnode *parse_filter(parser *P, jnode *arg) {
    int line = cur(P)->line;
    adv(P); /* | */
    jnode *n = mk(P, JN_FILTER, line);
    if (!n) return NULL;
    n->a = arg;
    n->name = parse_dotted(P);
    if (!n->name) return NULL;
    n->id = jinja_filter_id(n->name);
    if (is_op(cur(P), "(") && parse_call_args(P, n)) return NULL;
    return n;
}

static jnode *parse_test(parser *P, jnode *arg) {
    int line = cur(P)->line;
    adv(P); /* is */
    bool negated = false;
    if (is_name(cur(P), "not")) {
        negated = true;
        adv(P);
    }
    jnode *n = mk(P, JN_TEST, line);
    if (!n) return NULL;
    n->a = arg;
    n->name = parse_dotted(P);
    if (!n->name) return NULL;
    n->id = jinja_test_id(n->name);
    const jtok *t = cur(P);
    if (is_op(t, "(")) {
        if (parse_call_args(P, n)) return NULL;
    } else if ((t->kind == JT_NAME || t->kind == JT_STRING || t->kind == JT_INT || t->kind == JT_FLOAT ||
                is_op(t, "[") || is_op(t, "{")) &&
               !is_name(t, "else") && !is_name(t, "or") && !is_name(t, "and")) {
        /* `x is divisibleby 3`, `x is sameas none`: one argument without parentheses. */
        if (is_name(t, "is")) {
            fail_at(P, t, "%s", "you cannot chain multiple tests with 'is'");
            return NULL;
        }
        jnode *a1 = parse_primary(P);
        if (!a1) return NULL;
        n->kids = jarena_alloc(P->a, sizeof(jnode *));
        if (!n->kids) return NULL;
        n->kids[0] = a1;
        n->n_kids = 1;
    }
    if (!negated) return n;
    jnode *x = mk(P, JN_NOT, line);
    if (x) x->a = n;
    return x;
}

static jnode *parse_filter_expr(parser *P, jnode *n) {
    while (n) {
        if (is_op(cur(P), "|")) n = parse_filter(P, n);
        else if (is_name(cur(P), "is")) n = parse_test(P, n);
        else if (is_op(cur(P), "(")) n = parse_call(P, n);
        else break;
    }
    return n;
}

/* ==== Postfix: .attr, [item], [a:b:c], (call) ==== */
static jnode *parse_subscript(parser *P, jnode *obj) {
    int line = cur(P)->line;
    adv(P); /* [ */
    jnode *parts[3] = {NULL, NULL, NULL};
    int nparts = 0;
    bool is_slice = false;
    for (;;) {
        if (is_op(cur(P), ":")) {
            is_slice = true;
            if (nparts >= 2) return (unexpected(P, "']'"), NULL);
            nparts++;
            adv(P);
            continue;
        }
        if (is_op(cur(P), "]")) break;
        if (parts[nparts]) return (unexpected(P, "']'"), NULL);
        parts[nparts] = parse_expr(P, true);
        if (!parts[nparts]) return NULL;
        if (!is_slice && is_op(cur(P), ",")) return (fail_at(P, cur(P), "%s", "tuple subscripts are not supported"), NULL);
    }
    adv(P); /* ] */
    if (!is_slice && !parts[0]) return (fail_at(P, cur(P), "%s", "empty subscript"), NULL);
    jnode *n = mk(P, is_slice ? JN_SLICE : JN_GETITEM, line);
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

static jnode *parse_postfix(parser *P, jnode *n) {
    while (n) {
        const jtok *t = cur(P);
        if (is_op(t, ".")) {
            adv(P);
            const jtok *a = cur(P);
            if (a->kind == JT_NAME) {
                jnode *g = mk(P, JN_GETATTR, t->line);
                if (!g) return NULL;
                g->a = n;
                g->name = tok_str(P, a);
                adv(P);
                n = g;
            } else if (a->kind == JT_INT) {
                jnode *k = mk(P, JN_CONST, t->line), *g = mk(P, JN_GETITEM, t->line);
                if (!k || !g) return NULL;
                k->val = jv_int(a->i);
                g->a = n;
                g->b = k;
                adv(P);
                n = g;
            } else {
                unexpected(P, "an attribute name");
                return NULL;
            }
        } else if (is_op(t, "[")) {
            n = parse_subscript(P, n);
        } else if (is_op(t, "(")) {
            n = parse_call(P, n);
        } else {
            break;
        }
    }
    return n;
}

/* ==== Primary ==== */
static jnode *parse_primary(parser *P) {
    const jtok *t = cur(P);
    if (++P->depth > MAX_PARSE_DEPTH) {
        fail_at(P, t, "%s", "expression nested too deeply");
        return NULL;
    }
    jnode *n = NULL;
    if (t->kind == JT_NAME) {
        n = mk(P, JN_CONST, t->line);
        if (!n) return NULL;
        if (is_name(t, "true") || is_name(t, "True")) n->val = jv_bool(true);
        else if (is_name(t, "false") || is_name(t, "False")) n->val = jv_bool(false);
        else if (is_name(t, "none") || is_name(t, "None")) n->val = jv_none();
        else {
            n->kind = JN_NAME;
            n->name = tok_str(P, t);
        }
        adv(P);
    } else if (t->kind == JT_STRING) {
        /* Adjacent string literals concatenate, as in Python. */
        size_t total = 0, k = P->i;
        while (P->t[k].kind == JT_STRING) total += P->t[k++].n;
        char *s = jarena_alloc(P->a, total + 1);
        n = mk(P, JN_CONST, t->line);
        if (!s || !n) return NULL;
        size_t off = 0;
        while (cur(P)->kind == JT_STRING) {
            memcpy(s + off, cur(P)->p, cur(P)->n);
            off += cur(P)->n;
            adv(P);
        }
        n->val = jv_strn(s, total);
    } else if (t->kind == JT_INT || t->kind == JT_FLOAT) {
        n = mk(P, JN_CONST, t->line);
        if (!n) return NULL;
        n->val = t->kind == JT_INT ? jv_int(t->i) : jv_float(t->f);
        adv(P);
    } else if (is_op(t, "(")) {
        adv(P);
        n = parse_tuple(P, true, NULL, true);
        if (!n || expect_op(P, ")")) return NULL;
    } else if (is_op(t, "[") || is_op(t, "{")) {
        bool dict = is_op(t, "{");
        const char *close = dict ? "}" : "]";
        adv(P);
        nvec keys = {0}, vals = {0};
        while (!is_op(cur(P), close)) {
            if (keys.n && expect_op(P, ",")) return NULL;
            if (is_op(cur(P), close)) break;
            jnode *k = parse_expr(P, true);
            if (!k || nvec_push(P, &keys, k)) return NULL;
            if (dict) {
                if (expect_op(P, ":")) return NULL;
                jnode *v = parse_expr(P, true);
                if (!v || nvec_push(P, &vals, v)) return NULL;
            }
        }
        adv(P);
        n = mk(P, dict ? JN_DICT : JN_LIST, t->line);
        if (!n) return NULL;
        n->kids = keys.v;
        n->n_kids = keys.n;
        n->kids2 = vals.v;
        n->n_kids2 = vals.n;
    } else {
        unexpected(P, "an expression");
        return NULL;
    }
    P->depth--;
    return n;
}

/* ==== Operators ==== */
static jnode *parse_unary(parser *P, bool with_filter) {
    const jtok *t = cur(P);
    jnode *n;
    if (is_op(t, "-") || is_op(t, "+")) {
        if (++P->depth > MAX_PARSE_DEPTH) return (fail_at(P, t, "%s", "expression nested too deeply"), NULL);
        adv(P);
        jnode *x = parse_unary(P, false);
        P->depth--;
        if (!x) return NULL;
        n = mk(P, is_op(t, "-") ? JN_NEG : JN_POS, t->line);
        if (!n) return NULL;
        n->a = x;
    } else {
        n = parse_primary(P);
    }
    n = parse_postfix(P, n);
    if (with_filter) n = parse_filter_expr(P, n);
    return n;
}

static jnode *binop(parser *P, int op, int line, jnode *a, jnode *b) {
    if (!a || !b) return NULL;
    jnode *n = mk(P, JN_BINOP, line);
    if (!n) return NULL;
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    return n;
}

static jnode *parse_pow(parser *P) {
    jnode *n = parse_unary(P, true);
    while (n && is_op(cur(P), "**")) {
        int line = cur(P)->line;
        adv(P);
        n = binop(P, JOP_POW, line, n, parse_unary(P, true));
    }
    return n;
}

static jnode *parse_math2(parser *P) {
    jnode *n = parse_pow(P);
    for (;;) {
        const jtok *t = cur(P);
        int op = is_op(t, "*") ? JOP_MUL : is_op(t, "/") ? JOP_DIV : is_op(t, "//") ? JOP_FLOORDIV
               : is_op(t, "%") ? JOP_MOD : -1;
        if (!n || op < 0) return n;
        adv(P);
        n = binop(P, op, t->line, n, parse_pow(P));
    }
}

static jnode *parse_concat(parser *P) {
    jnode *n = parse_math2(P);
    while (n && is_op(cur(P), "~")) {
        int line = cur(P)->line;
        adv(P);
        n = binop(P, JOP_CONCAT, line, n, parse_math2(P));
    }
    return n;
}

static jnode *parse_math1(parser *P) {
    jnode *n = parse_concat(P);
    for (;;) {
        const jtok *t = cur(P);
        int op = is_op(t, "+") ? JOP_ADD : is_op(t, "-") ? JOP_SUB : -1;
        if (!n || op < 0) return n;
        adv(P);
        n = binop(P, op, t->line, n, parse_concat(P));
    }
}

static jnode *parse_compare(parser *P) {
    jnode *left = parse_math1(P), *result = NULL;
    while (left) {
        const jtok *t = cur(P);
        int op = is_op(t, "==") ? JOP_EQ : is_op(t, "!=") ? JOP_NE : is_op(t, "<") ? JOP_LT
               : is_op(t, "<=") ? JOP_LE : is_op(t, ">") ? JOP_GT : is_op(t, ">=") ? JOP_GE
               : is_name(t, "in") ? JOP_IN : -1;
        if (op < 0 && is_name(t, "not") && is_name(peek(P, 1), "in")) {
            op = JOP_NOTIN;
            adv(P);
        }
        if (op < 0) break;
        adv(P);
        jnode *right = parse_math1(P);
        jnode *cmp = binop(P, op, t->line, left, right);
        if (!cmp) return NULL;
        cmp->kind = JN_COMPARE;
        /* a < b < c is (a < b) and (b < c) */
        if (result) {
            jnode *and = mk(P, JN_AND, t->line);
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

static jnode *parse_not(parser *P) {
    if (is_name(cur(P), "not")) {
        const jtok *t = cur(P);
        if (++P->depth > MAX_PARSE_DEPTH) return (fail_at(P, t, "%s", "expression nested too deeply"), NULL);
        adv(P);
        jnode *x = parse_not(P);
        P->depth--;
        if (!x) return NULL;
        jnode *n = mk(P, JN_NOT, t->line);
        if (n) n->a = x;
        return n;
    }
    return parse_compare(P);
}

static jnode *parse_and(parser *P) {
    jnode *n = parse_not(P);
    while (n && is_name(cur(P), "and")) {
        int line = cur(P)->line;
        adv(P);
        jnode *b = parse_not(P), *x = mk(P, JN_AND, line);
        if (!b || !x) return NULL;
        x->a = n;
        x->b = b;
        n = x;
    }
    return n;
}

static jnode *parse_or(parser *P) {
    jnode *n = parse_and(P);
    while (n && is_name(cur(P), "or")) {
        int line = cur(P)->line;
        adv(P);
        jnode *b = parse_and(P), *x = mk(P, JN_OR, line);
        if (!b || !x) return NULL;
        x->a = n;
        x->b = b;
        n = x;
    }
    return n;
}

static jnode *parse_expr(parser *P, bool with_cond) {
    if (++P->depth > MAX_PARSE_DEPTH) return (fail_at(P, cur(P), "%s", "expression nested too deeply"), NULL);
    jnode *n = parse_or(P);
    while (with_cond && n && is_name(cur(P), "if")) {
        int line = cur(P)->line;
        adv(P);
        jnode *test = parse_or(P), *x = mk(P, JN_COND, line);
        if (!test || !x) return NULL;
        x->a = test;
        x->b = n;
        if (is_name(cur(P), "else")) {
            adv(P);
            x->c = parse_expr(P, true);
            if (!x->c) return NULL;
        }
        n = x;
    }
    P->depth--;
    return n;
}

static bool is_tuple_end(parser *P, const char *extra_end) {
    const jtok *t = cur(P);
    return t->kind == JT_VAR_END || t->kind == JT_BLOCK_END || t->kind == JT_EOF || is_op(t, ")") ||
           (extra_end && is_name(t, extra_end));
}

static jnode *parse_tuple(parser *P, bool with_cond, const char *extra_end, bool explicit_parens) {
    int line = cur(P)->line;
    nvec items = {0};
    bool is_tuple = false;
    for (;;) {
        if (items.n && expect_op(P, ",")) return NULL;
        if (is_tuple_end(P, extra_end)) break;
        jnode *x = parse_expr(P, with_cond);
        if (!x || nvec_push(P, &items, x)) return NULL;
        if (is_op(cur(P), ",")) is_tuple = true;
        else break;
    }
    if (!is_tuple) {
        if (items.n) return items.v[0];
        if (!explicit_parens) return (unexpected(P, "an expression"), NULL);
    }
    jnode *n = mk(P, JN_TUPLE, line);
    if (!n) return NULL;
    n->kids = items.v;
    n->n_kids = items.n;
    return n;
}

/* ==== Statements ==== */
static jnode *parse_body(parser *P, const char *const *ends);

static int expect_block_end(parser *P) {
    if (cur(P)->kind != JT_BLOCK_END) return unexpected(P, "end of statement '%}'");
    adv(P);
    return 0;
}

/* Assignment targets: name | name, name | (name, name) ; namespace attribute: name.attr */
static int parse_targets(parser *P, jnode *n, bool allow_attr, const char *extra_end) {
    svec names = {0};
    bool parens = is_op(cur(P), "(");
    if (parens) adv(P);
    for (;;) {
        const char *name = expect_name(P);
        if (!name || svec_push(P, &names, name)) return -1;
        if (allow_attr && names.n == 1 && !parens && is_op(cur(P), ".")) {
            adv(P);
            const char *attr = expect_name(P);
            if (!attr) return -1;
            n->op = 1;
            n->name = name;
            n->names = jarena_alloc(P->a, sizeof(char *));
            if (!n->names) return -1;
            n->names[0] = attr;
            n->n_names = 1;
            return 0;
        }
        if (!is_op(cur(P), ",")) break;
        n->op = 2; /* tuple unpacking */
        adv(P);
        if ((parens && is_op(cur(P), ")")) || (extra_end && is_name(cur(P), extra_end))) break;
    }
    if (parens && expect_op(P, ")")) return -1;
    if (parens) n->op = 2;
    n->names = names.v;
    n->n_names = names.n;
    return 0;
}

static const char *const k_end_if[] = {"elif", "else", "endif", NULL};
static const char *const k_end_for[] = {"else", "endfor", NULL};
static const char *const k_end_endfor[] = {"endfor", NULL};

static jnode *parse_if(parser *P, int line) {
    jnode *n = mk(P, JN_IF, line);
    if (!n) return NULL;
    n->a = parse_tuple(P, false, NULL, false);
    if (!n->a || expect_block_end(P)) return NULL;
    n->b = parse_body(P, k_end_if);
    if (!n->b) return NULL;
    const jtok *t = cur(P); /* the end tag name */
    adv(P);
    if (is_name(t, "elif")) {
        n->c = parse_if(P, t->line);
        return n->c ? n : NULL;
    }
    if (is_name(t, "else")) {
        if (expect_block_end(P)) return NULL;
        static const char *const ends[] = {"endif", NULL};
        n->c = parse_body(P, ends);
        if (!n->c) return NULL;
        adv(P);
    }
    return expect_block_end(P) ? NULL : n;
}

static jnode *parse_for(parser *P, int line) {
    jnode *n = mk(P, JN_FOR, line);
    if (!n || parse_targets(P, n, false, "in")) return NULL;
    if (!is_name(cur(P), "in")) return (unexpected(P, "'in'"), NULL);
    adv(P);
    n->a = parse_tuple(P, false, "recursive", false);
    if (!n->a) return NULL;
    if (is_name(cur(P), "if")) {
        adv(P);
        n->b = parse_expr(P, true);
        if (!n->b) return NULL;
    }
    if (is_name(cur(P), "recursive")) return (fail_at(P, cur(P), "%s", "recursive loops are not supported"), NULL);
    if (expect_block_end(P)) return NULL;
    P->loop_depth++;
    n->c = parse_body(P, k_end_for);
    P->loop_depth--;
    if (!n->c) return NULL;
    bool has_else = is_name(cur(P), "else");
    adv(P);
    if (expect_block_end(P)) return NULL;
    if (has_else) {
        n->d = parse_body(P, k_end_endfor);
        if (!n->d) return NULL;
        adv(P);
        if (expect_block_end(P)) return NULL;
    }
    return n;
}

/* A filter chain for {% filter f|g %} or {% set x | f %}: innermost argument is the body. */
static jnode *parse_filter_chain(parser *P, int line) {
    jnode *n = mk(P, JN_INPUT, line);
    while (n && is_op(cur(P), "|")) n = parse_filter(P, n);
    return n;
}

static int parse_params(parser *P, jnode *n) {
    svec names = {0};
    nvec defs = {0};
    if (expect_op(P, "(")) return -1;
    while (!is_op(cur(P), ")")) {
        if (names.n && expect_op(P, ",")) return -1;
        if (is_op(cur(P), ")")) break;
        const char *name = expect_name(P);
        jnode *def = NULL;
        if (!name) return -1;
        if (is_op(cur(P), "=")) {
            adv(P);
            def = parse_expr(P, true);
            if (!def) return -1;
        } else if (defs.n && defs.v[defs.n - 1]) {
            return fail_at(P, cur(P), "%s", "non-default argument follows default argument");
        }
        if (svec_push(P, &names, name) || nvec_push(P, &defs, def)) return -1;
    }
    adv(P);
    n->names = names.v;
    n->n_names = names.n;
    n->kids2 = defs.v;
    n->n_kids2 = defs.n;
    return 0;
}

static jnode *parse_statement(parser *P) {
    const jtok *t = cur(P);
    int line = t->line;
    if (t->kind != JT_NAME) return (unexpected(P, "a statement name"), NULL);
    char name[32];
    snprintf(name, sizeof name, "%.*s", (int)(t->n > 31 ? 31 : t->n), t->p);
    adv(P);
    if (!strcmp(name, "if")) return parse_if(P, line);
    if (!strcmp(name, "for")) return parse_for(P, line);
    if (!strcmp(name, "set")) {
        jnode *n = mk(P, JN_SET, line);
        if (!n || parse_targets(P, n, true, NULL)) return NULL;
        if (is_op(cur(P), "=")) {
            adv(P);
            n->a = parse_tuple(P, true, NULL, false);
            return n->a && !expect_block_end(P) ? n : NULL;
        }
        if (n->op != 0) return (unexpected(P, "'='"), NULL);
        n->kind = JN_SET_BLOCK;
        n->name = n->names[0];
        n->b = parse_filter_chain(P, line);
        if (!n->b || expect_block_end(P)) return NULL;
        static const char *const ends[] = {"endset", NULL};
        n->a = parse_body(P, ends);
        if (!n->a) return NULL;
        adv(P);
        return expect_block_end(P) ? NULL : n;
    }
    if (!strcmp(name, "macro")) {
        jnode *n = mk(P, JN_MACRO, line);
        if (!n || !(n->name = expect_name(P)) || parse_params(P, n) || expect_block_end(P)) return NULL;
        static const char *const ends[] = {"endmacro", NULL};
        int saved = P->loop_depth;
        P->loop_depth = 0;
        n->a = parse_body(P, ends);
        P->loop_depth = saved;
        if (!n->a) return NULL;
        adv(P);
        if (cur(P)->kind == JT_NAME) adv(P); /* {% endmacro name %} */
        return expect_block_end(P) ? NULL : n;
    }
    if (!strcmp(name, "call")) {
        jnode *n = mk(P, JN_CALL_BLOCK, line);
        if (!n) return NULL;
        if (is_op(cur(P), "(") && parse_params(P, n)) return NULL;
        n->a = parse_expr(P, true);
        if (!n->a) return NULL;
        if (n->a->kind != JN_CALL) return (fail_at(P, t, "%s", "expected a call after 'call'"), NULL);
        if (expect_block_end(P)) return NULL;
        static const char *const ends[] = {"endcall", NULL};
        n->b = parse_body(P, ends);
        if (!n->b) return NULL;
        adv(P);
        return expect_block_end(P) ? NULL : n;
    }
    if (!strcmp(name, "filter")) {
        jnode *n = mk(P, JN_FILTER_BLOCK, line);
        if (!n) return NULL;
        /* {% filter upper %}: the first filter has no leading '|'. */
        jnode *in = mk(P, JN_INPUT, line), *f = mk(P, JN_FILTER, line);
        if (!in || !f) return NULL;
        f->a = in;
        if (!(f->name = parse_dotted(P))) return NULL;
        f->id = jinja_filter_id(f->name);
        if (is_op(cur(P), "(") && parse_call_args(P, f)) return NULL;
        while (f && is_op(cur(P), "|")) f = parse_filter(P, f);
        n->b = f;
        if (!f || expect_block_end(P)) return NULL;
        static const char *const ends[] = {"endfilter", NULL};
        n->a = parse_body(P, ends);
        if (!n->a) return NULL;
        adv(P);
        return expect_block_end(P) ? NULL : n;
    }
    if (!strcmp(name, "with")) {
        jnode *n = mk(P, JN_WITH, line);
        svec names = {0};
        nvec vals = {0};
        if (!n) return NULL;
        while (cur(P)->kind != JT_BLOCK_END) {
            if (names.n && expect_op(P, ",")) return NULL;
            const char *v = expect_name(P);
            if (!v || expect_op(P, "=")) return NULL;
            jnode *x = parse_expr(P, true);
            if (!x || svec_push(P, &names, v) || nvec_push(P, &vals, x)) return NULL;
        }
        adv(P);
        n->names = names.v;
        n->n_names = names.n;
        n->kids = vals.v;
        n->n_kids = vals.n;
        static const char *const ends[] = {"endwith", NULL};
        n->a = parse_body(P, ends);
        if (!n->a) return NULL;
        adv(P);
        return expect_block_end(P) ? NULL : n;
    }
    if (!strcmp(name, "generation")) {
        /* transformers' {% generation %} marks assistant text; it renders its body as is. */
        if (expect_block_end(P)) return NULL;
        static const char *const ends[] = {"endgeneration", NULL};
        jnode *body = parse_body(P, ends);
        if (!body) return NULL;
        adv(P);
        return expect_block_end(P) ? NULL : body;
    }
    if (!strcmp(name, "break") || !strcmp(name, "continue")) {
        if (!P->loop_depth) return (fail_at(P, t, "'%s' outside of a loop", name), NULL);
        jnode *n = mk(P, name[0] == 'b' ? JN_BREAK : JN_CONTINUE, line);
        return n && !expect_block_end(P) ? n : NULL;
    }
    static const char *const unsupported[] = {"include", "import", "from", "extends", "block",
                                              "do", "autoescape", "trans", NULL};
    for (int i = 0; unsupported[i]; i++)
        if (!strcmp(name, unsupported[i]))
            return (fail_at(P, t, "the '%s' tag is not supported in chat templates", name), NULL);
    return (fail_at(P, t, "unknown tag '%s'", name), NULL);
}

/* Parses statements until a block whose first name is in `ends` (left as the current token,
 * just after its '{%'), or end of input when ends is NULL. */
static jnode *parse_body(parser *P, const char *const *ends) {
    int line = cur(P)->line;
    nvec kids = {0};
    if (++P->depth > MAX_PARSE_DEPTH) return (fail_at(P, cur(P), "%s", "blocks nested too deeply"), NULL);
    for (;;) {
        const jtok *t = cur(P);
        jnode *n = NULL;
        if (t->kind == JT_EOF) {
            if (!ends) break;
            char msg[96];
            snprintf(msg, sizeof msg, "unexpected end of template, expected '%s'",
                     ends[1] ? ends[1] : ends[0]);
            for (int i = 0; ends[i]; i++)
                if (!strncmp(ends[i], "end", 3)) snprintf(msg, sizeof msg, "unexpected end of template, expected '%s'", ends[i]);
            return (fail_at(P, t, "%s", msg), NULL);
        } else if (t->kind == JT_DATA) {
            n = mk(P, JN_DATA, t->line);
            if (!n) return NULL;
            n->val = jv_strn(t->p, t->n);
            adv(P);
        } else if (t->kind == JT_VAR_BEGIN) {
            adv(P);
            n = mk(P, JN_PRINT, t->line);
            if (!n || !(n->a = parse_tuple(P, true, NULL, false))) return NULL;
            if (cur(P)->kind != JT_VAR_END) return (unexpected(P, "end of print statement '}}'"), NULL);
            adv(P);
        } else if (t->kind == JT_BLOCK_BEGIN) {
            adv(P);
            const jtok *nt = cur(P);
            for (int i = 0; ends && ends[i]; i++)
                if (is_name(nt, ends[i])) goto done;
            if (nt->kind == JT_NAME && nt->n > 3 && !memcmp(nt->p, "end", 3))
                return (fail_at(P, nt, "unexpected '%s'", tok_str(P, nt)), NULL);
            if (is_name(nt, "elif") || is_name(nt, "else"))
                return (fail_at(P, nt, "unexpected '%s'", tok_str(P, nt)), NULL);
            n = parse_statement(P);
            if (!n) return NULL;
        } else {
            return (unexpected(P, NULL), NULL);
        }
        if (nvec_push(P, &kids, n)) return NULL;
    }
done:
    P->depth--;
    jnode *body = mk(P, JN_BODY, line);
    if (!body) return NULL;
    body->kids = kids.v;
    body->n_kids = kids.n;
    return body;
}

int jinja_parse(jarena *a, const jtok *toks, size_t n_toks, jnode **out, mx_error *err) {
    parser P = {.a = a, .t = toks, .n = n_toks, .err = err};
    jnode *root = parse_body(&P, NULL);
    if (!root) return -1;
    *out = root;
    return 0;
}
