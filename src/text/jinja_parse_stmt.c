/* Jinja parser, statements: if/for/set/macro/call/filter/with/generation/break/continue, and the
 * template body. Expressions are in jinja_parse.c. */
#include <stdio.h>
#include <string.h>

#include "text/jinja_parser.h"

/* ==== Statements ==== */
static jnode *parse_body(jparser *P, const char *const *ends);

static int expect_block_end(jparser *P) {
    if (jp_cur(P)->kind != JT_BLOCK_END) return jp_unexpected(P, "end of statement '%}'");
    jp_adv(P);
    return 0;
}

/* Assignment targets: name | name, name | (name, name) ; namespace attribute: name.attr */
static int parse_targets(jparser *P, jnode *n, bool allow_attr, const char *extra_end) {
    jp_svec names = {0};
    bool parens = jp_is_op(jp_cur(P), "(");
    if (parens) jp_adv(P);
    for (;;) {
        const char *name = jp_expect_name(P);
        if (!name || jp_svec_push(P, &names, name)) return -1;
        if (allow_attr && names.n == 1 && !parens && jp_is_op(jp_cur(P), ".")) {
            jp_adv(P);
            const char *attr = jp_expect_name(P);
            if (!attr) return -1;
            n->op = 1;
            n->name = name;
            n->names = jarena_alloc(P->a, sizeof(char *));
            if (!n->names) return -1;
            n->names[0] = attr;
            n->n_names = 1;
            return 0;
        }
        if (!jp_is_op(jp_cur(P), ",")) break;
        n->op = 2; /* tuple unpacking */
        jp_adv(P);
        if ((parens && jp_is_op(jp_cur(P), ")")) || (extra_end && jp_is_name(jp_cur(P), extra_end))) break;
    }
    if (parens && jp_expect_op(P, ")")) return -1;
    if (parens) n->op = 2;
    n->names = names.v;
    n->n_names = names.n;
    return 0;
}

static const char *const k_end_if[] = {"elif", "else", "endif", NULL};
static const char *const k_end_for[] = {"else", "endfor", NULL};
static const char *const k_end_endfor[] = {"endfor", NULL};

static jnode *parse_if(jparser *P, int line) {
    jnode *n = jp_mk(P, JN_IF, line);
    if (!n) return NULL;
    n->a = jp_parse_tuple(P, false, NULL, false);
    if (!n->a || expect_block_end(P)) return NULL;
    n->b = parse_body(P, k_end_if);
    if (!n->b) return NULL;
    const jtok *t = jp_cur(P); /* the end tag name */
    jp_adv(P);
    if (jp_is_name(t, "elif")) {
        n->c = parse_if(P, t->line);
        return n->c ? n : NULL;
    }
    if (jp_is_name(t, "else")) {
        if (expect_block_end(P)) return NULL;
        static const char *const ends[] = {"endif", NULL};
        n->c = parse_body(P, ends);
        if (!n->c) return NULL;
        jp_adv(P);
    }
    return expect_block_end(P) ? NULL : n;
}

static jnode *parse_for(jparser *P, int line) {
    jnode *n = jp_mk(P, JN_FOR, line);
    if (!n || parse_targets(P, n, false, "in")) return NULL;
    if (!jp_is_name(jp_cur(P), "in")) return (jp_unexpected(P, "'in'"), NULL);
    jp_adv(P);
    n->a = jp_parse_tuple(P, false, "recursive", false);
    if (!n->a) return NULL;
    if (jp_is_name(jp_cur(P), "if")) {
        jp_adv(P);
        n->b = jp_parse_expr(P, true);
        if (!n->b) return NULL;
    }
    if (jp_is_name(jp_cur(P), "recursive")) return (jp_fail_at(P, jp_cur(P), "%s", "recursive loops are not supported"), NULL);
    if (expect_block_end(P)) return NULL;
    P->loop_depth++;
    n->c = parse_body(P, k_end_for);
    P->loop_depth--;
    if (!n->c) return NULL;
    bool has_else = jp_is_name(jp_cur(P), "else");
    jp_adv(P);
    if (expect_block_end(P)) return NULL;
    if (has_else) {
        n->d = parse_body(P, k_end_endfor);
        if (!n->d) return NULL;
        jp_adv(P);
        if (expect_block_end(P)) return NULL;
    }
    return n;
}

/* A filter chain for {% filter f|g %} or {% set x | f %}: innermost argument is the body. */
static jnode *parse_filter_chain(jparser *P, int line) {
    jnode *n = jp_mk(P, JN_INPUT, line);
    while (n && jp_is_op(jp_cur(P), "|")) n = jp_parse_filter(P, n);
    return n;
}

static int parse_params(jparser *P, jnode *n) {
    jp_svec names = {0};
    jp_nvec defs = {0};
    if (jp_expect_op(P, "(")) return -1;
    while (!jp_is_op(jp_cur(P), ")")) {
        if (names.n && jp_expect_op(P, ",")) return -1;
        if (jp_is_op(jp_cur(P), ")")) break;
        const char *name = jp_expect_name(P);
        jnode *def = NULL;
        if (!name) return -1;
        if (jp_is_op(jp_cur(P), "=")) {
            jp_adv(P);
            def = jp_parse_expr(P, true);
            if (!def) return -1;
        } else if (defs.n && defs.v[defs.n - 1]) {
            return jp_fail_at(P, jp_cur(P), "%s", "non-default argument follows default argument");
        }
        if (jp_svec_push(P, &names, name) || jp_nvec_push(P, &defs, def)) return -1;
    }
    jp_adv(P);
    n->names = names.v;
    n->n_names = names.n;
    n->kids2 = defs.v;
    n->n_kids2 = defs.n;
    return 0;
}

static jnode *parse_statement(jparser *P) {
    const jtok *t = jp_cur(P);
    int line = t->line;
    if (t->kind != JT_NAME) return (jp_unexpected(P, "a statement name"), NULL);
    char name[32];
    snprintf(name, sizeof name, "%.*s", (int)(t->n > 31 ? 31 : t->n), t->p);
    jp_adv(P);
    if (!strcmp(name, "if")) return parse_if(P, line);
    if (!strcmp(name, "for")) return parse_for(P, line);
    if (!strcmp(name, "set")) {
        jnode *n = jp_mk(P, JN_SET, line);
        if (!n || parse_targets(P, n, true, NULL)) return NULL;
        if (jp_is_op(jp_cur(P), "=")) {
            jp_adv(P);
            n->a = jp_parse_tuple(P, true, NULL, false);
            return n->a && !expect_block_end(P) ? n : NULL;
        }
        if (n->op != 0) return (jp_unexpected(P, "'='"), NULL);
        n->kind = JN_SET_BLOCK;
        n->name = n->names[0];
        n->b = parse_filter_chain(P, line);
        if (!n->b || expect_block_end(P)) return NULL;
        static const char *const ends[] = {"endset", NULL};
        n->a = parse_body(P, ends);
        if (!n->a) return NULL;
        jp_adv(P);
        return expect_block_end(P) ? NULL : n;
    }
    if (!strcmp(name, "macro")) {
        jnode *n = jp_mk(P, JN_MACRO, line);
        if (!n || !(n->name = jp_expect_name(P)) || parse_params(P, n) || expect_block_end(P)) return NULL;
        static const char *const ends[] = {"endmacro", NULL};
        int saved = P->loop_depth;
        P->loop_depth = 0;
        n->a = parse_body(P, ends);
        P->loop_depth = saved;
        if (!n->a) return NULL;
        jp_adv(P);
        if (jp_cur(P)->kind == JT_NAME) jp_adv(P); /* {% endmacro name %} */
        return expect_block_end(P) ? NULL : n;
    }
    if (!strcmp(name, "call")) {
        jnode *n = jp_mk(P, JN_CALL_BLOCK, line);
        if (!n) return NULL;
        if (jp_is_op(jp_cur(P), "(") && parse_params(P, n)) return NULL;
        n->a = jp_parse_expr(P, true);
        if (!n->a) return NULL;
        if (n->a->kind != JN_CALL) return (jp_fail_at(P, t, "%s", "expected a call after 'call'"), NULL);
        if (expect_block_end(P)) return NULL;
        static const char *const ends[] = {"endcall", NULL};
        n->b = parse_body(P, ends);
        if (!n->b) return NULL;
        jp_adv(P);
        return expect_block_end(P) ? NULL : n;
    }
    if (!strcmp(name, "filter")) {
        jnode *n = jp_mk(P, JN_FILTER_BLOCK, line);
        if (!n) return NULL;
        /* {% filter upper %}: the first filter has no leading '|'. */
        jnode *in = jp_mk(P, JN_INPUT, line), *f = jp_mk(P, JN_FILTER, line);
        if (!in || !f) return NULL;
        f->a = in;
        if (!(f->name = jp_parse_dotted(P))) return NULL;
        f->id = jinja_filter_id(f->name);
        if (jp_is_op(jp_cur(P), "(") && jp_parse_call_args(P, f)) return NULL;
        while (f && jp_is_op(jp_cur(P), "|")) f = jp_parse_filter(P, f);
        n->b = f;
        if (!f || expect_block_end(P)) return NULL;
        static const char *const ends[] = {"endfilter", NULL};
        n->a = parse_body(P, ends);
        if (!n->a) return NULL;
        jp_adv(P);
        return expect_block_end(P) ? NULL : n;
    }
    if (!strcmp(name, "with")) {
        jnode *n = jp_mk(P, JN_WITH, line);
        jp_svec names = {0};
        jp_nvec vals = {0};
        if (!n) return NULL;
        while (jp_cur(P)->kind != JT_BLOCK_END) {
            if (names.n && jp_expect_op(P, ",")) return NULL;
            const char *v = jp_expect_name(P);
            if (!v || jp_expect_op(P, "=")) return NULL;
            jnode *x = jp_parse_expr(P, true);
            if (!x || jp_svec_push(P, &names, v) || jp_nvec_push(P, &vals, x)) return NULL;
        }
        jp_adv(P);
        n->names = names.v;
        n->n_names = names.n;
        n->kids = vals.v;
        n->n_kids = vals.n;
        static const char *const ends[] = {"endwith", NULL};
        n->a = parse_body(P, ends);
        if (!n->a) return NULL;
        jp_adv(P);
        return expect_block_end(P) ? NULL : n;
    }
    if (!strcmp(name, "generation")) {
        /* transformers' {% generation %} marks assistant text; it renders its body as is. */
        if (expect_block_end(P)) return NULL;
        static const char *const ends[] = {"endgeneration", NULL};
        jnode *body = parse_body(P, ends);
        if (!body) return NULL;
        jp_adv(P);
        return expect_block_end(P) ? NULL : body;
    }
    if (!strcmp(name, "break") || !strcmp(name, "continue")) {
        if (!P->loop_depth) return (jp_fail_at(P, t, "'%s' outside of a loop", name), NULL);
        jnode *n = jp_mk(P, name[0] == 'b' ? JN_BREAK : JN_CONTINUE, line);
        return n && !expect_block_end(P) ? n : NULL;
    }
    static const char *const unsupported[] = {"include", "import", "from", "extends", "block",
                                              "do", "autoescape", "trans", NULL};
    for (int i = 0; unsupported[i]; i++)
        if (!strcmp(name, unsupported[i]))
            return (jp_fail_at(P, t, "the '%s' tag is not supported in chat templates", name), NULL);
    return (jp_fail_at(P, t, "unknown tag '%s'", name), NULL);
}

/* Parses statements until a block whose first name is in `ends` (left as the current token,
 * just after its '{%'), or end of input when ends is NULL. */
static jnode *parse_body(jparser *P, const char *const *ends) {
    int line = jp_cur(P)->line;
    jp_nvec kids = {0};
    if (++P->depth > MAX_PARSE_DEPTH) return (jp_fail_at(P, jp_cur(P), "%s", "blocks nested too deeply"), NULL);
    for (;;) {
        const jtok *t = jp_cur(P);
        jnode *n = NULL;
        if (t->kind == JT_EOF) {
            if (!ends) break;
            char msg[96];
            snprintf(msg, sizeof msg, "unexpected end of template, expected '%s'",
                     ends[1] ? ends[1] : ends[0]);
            for (int i = 0; ends[i]; i++)
                if (!strncmp(ends[i], "end", 3)) snprintf(msg, sizeof msg, "unexpected end of template, expected '%s'", ends[i]);
            return (jp_fail_at(P, t, "%s", msg), NULL);
        } else if (t->kind == JT_DATA) {
            n = jp_mk(P, JN_DATA, t->line);
            if (!n) return NULL;
            n->val = jv_strn(t->p, t->n);
            jp_adv(P);
        } else if (t->kind == JT_VAR_BEGIN) {
            jp_adv(P);
            n = jp_mk(P, JN_PRINT, t->line);
            if (!n || !(n->a = jp_parse_tuple(P, true, NULL, false))) return NULL;
            if (jp_cur(P)->kind != JT_VAR_END) return (jp_unexpected(P, "end of print statement '}}'"), NULL);
            jp_adv(P);
        } else if (t->kind == JT_BLOCK_BEGIN) {
            jp_adv(P);
            const jtok *nt = jp_cur(P);
            for (int i = 0; ends && ends[i]; i++)
                if (jp_is_name(nt, ends[i])) goto done;
            if (nt->kind == JT_NAME && nt->n > 3 && !memcmp(nt->p, "end", 3))
                return (jp_fail_at(P, nt, "unexpected '%s'", jp_tok_str(P, nt)), NULL);
            if (jp_is_name(nt, "elif") || jp_is_name(nt, "else"))
                return (jp_fail_at(P, nt, "unexpected '%s'", jp_tok_str(P, nt)), NULL);
            n = parse_statement(P);
            if (!n) return NULL;
        } else {
            return (jp_unexpected(P, NULL), NULL);
        }
        if (jp_nvec_push(P, &kids, n)) return NULL;
    }
done:
    P->depth--;
    jnode *body = jp_mk(P, JN_BODY, line);
    if (!body) return NULL;
    body->kids = kids.v;
    body->n_kids = kids.n;
    return body;
}

int jinja_parse(jarena *a, const jtok *toks, size_t n_toks, jnode **out, mx_error *err) {
    jparser P = {.a = a, .t = toks, .n = n_toks, .err = err};
    jnode *root = parse_body(&P, NULL);
    if (!root) return -1;
    *out = root;
    return 0;
}
