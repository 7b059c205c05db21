/* Jinja statements (if/for/set/macro/call/filter/with), callables, and the public
 * compile/render API. Scoping follows Jinja2: a for-loop body and a macro body are new scopes
 * (a `set` inside them does not leak out, which is why templates use namespace()), `if` is not. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja_internal.h"

/* ==== Callables ==== */
static int call_macro(jrender *r, int line, jv_macro *m, const jv *args, size_t n_args,
                      const char **kw_names, const jv *kw_vals, size_t n_kw, jv *out) {
    const jnode *def = m->def;
    const char *name = def->kind == JN_MACRO ? def->name : "caller";
    const jnode *body = def->kind == JN_MACRO ? def->a : def->b;
    jv_macro *caller = r->caller;
    r->caller = NULL;
    /* A macro call costs several C frames per level: weigh it so recursion stops early. */
    if (r->depth + 8 > r->max_depth) return jr_fail(r, line, "macro '%s' nested or recursed too deeply", name);
    if (n_args > def->n_names)
        return jr_fail(r, line, "macro '%s' takes not more than %zu argument(s)", name, def->n_names);
    jframe *f = jr_frame_new(r, m->closure);
    if (!f) return jr_oom(r, line);
    jv *vals = def->n_names ? jarena_alloc(&r->arena, def->n_names * sizeof(jv)) : NULL;
    bool *set = def->n_names ? jarena_alloc(&r->arena, def->n_names * sizeof(bool)) : NULL;
    if (def->n_names && (!vals || !set)) return jr_oom(r, line);
    for (size_t i = 0; i < n_args; i++) {
        vals[i] = args[i];
        set[i] = true;
    }
    for (size_t k = 0; k < n_kw; k++) {
        size_t i = 0;
        while (i < def->n_names && strcmp(def->names[i], kw_names[k])) i++;
        if (i == def->n_names) {
            if (!strcmp(kw_names[k], "caller") && kw_vals[k].k == JV_MACRO) {
                caller = kw_vals[k].u.m;
                continue;
            }
            return jr_fail(r, line, "macro '%s' takes no keyword argument '%s'", name, kw_names[k]);
        }
        if (set[i]) return jr_fail(r, line, "macro '%s' got multiple values for argument '%s'", name, kw_names[k]);
        vals[i] = kw_vals[k];
        set[i] = true;
    }
    jframe *saved = r->cur;
    r->cur = f;
    int rc = 0;
    /* Defaults are evaluated in the macro's scope, left to right, so they can use earlier args. */
    for (size_t i = 0; i < def->n_names && !rc; i++) {
        if (!set[i]) {
            if (def->kids2 && def->kids2[i]) rc = jr_eval(r, def->kids2[i], &vals[i]);
            else vals[i] = jv_undef(jr_hint(r, "parameter '%s' was not provided", def->names[i]));
        }
        if (!rc) rc = jr_assign(r, line, f, def->names[i], vals[i]);
    }
    if (!rc && caller) {
        jv c = {.k = JV_MACRO};
        c.u.m = caller;
        rc = jr_assign(r, line, f, "caller", c);
    }
    if (!rc) {
        jv empty_list = {.k = JV_LIST}, empty_dict = {.k = JV_DICT};
        empty_list.u.l = jv_list_new(&r->arena, 0);
        empty_dict.u.d = jv_dict_new(&r->arena, 0);
        if (!empty_list.u.l || !empty_dict.u.d) rc = jr_oom(r, line);
        else rc = jr_assign(r, line, f, "varargs", empty_list) || jr_assign(r, line, f, "kwargs", empty_dict);
    }
    jbuf b = {.limit = r->max_output};
    r->depth += 8;
    if (!rc) rc = jr_exec(r, body, &b);
    r->depth -= 8;
    r->cur = saved;
    r->brk = 0;
    if (rc) {
        jbuf_free(&b);
        return -1;
    }
    if (b.failed) {
        jbuf_free(&b);
        return jr_fail(r, line, "output larger than the limit (%zu bytes)", r->max_output);
    }
    *out = jr_string_from_buf(r, &b);
    return 0;
}

int jr_call_value(jrender *r, int line, jv callee, const jv *args, size_t n_args,
                  const char **kw_names, const jv *kw_vals, size_t n_kw, jv *out) {
    switch ((jv_kind)callee.k) {
    case JV_MACRO: return call_macro(r, line, callee.u.m, args, n_args, kw_names, kw_vals, n_kw, out);
    case JV_FUNC: return jr_call_func(r, line, callee.u.fn, args, n_args, kw_names, kw_vals, n_kw, out);
    case JV_METHOD: return jr_call_method(r, line, callee.u.meth, args, n_args, kw_names, kw_vals, n_kw, out);
    case JV_UNDEF: return jr_undefined_error(r, line, callee);
    default: return jr_fail(r, line, "'%s' object is not callable", jv_type_name(callee));
    }
}

/* ==== Statements ==== */
static int write_value(jrender *r, int line, jbuf *out, jv v) {
    if (!jv_write_str(out, v) || out->failed)
        return jr_fail(r, line, "output larger than the limit (%zu bytes)", r->max_output);
    return 0;
}

static int unpack(jrender *r, const jnode *n, jframe *f, jv v) {
    if (n->op != 2) return jr_assign(r, n->line, f, n->names[0], v);
    jv_list *items;
    if (v.k == JV_UNDEF) return jr_undefined_error(r, n->line, v);
    if (jr_iterate(r, n->line, v, &items)) return -1;
    if (items->n != n->n_names)
        return jr_fail(r, n->line, items->n > n->n_names ? "too many values to unpack (expected %zu)"
                                                        : "not enough values to unpack (expected %zu)",
                       n->n_names);
    for (size_t i = 0; i < n->n_names; i++)
        if (jr_assign(r, n->line, f, n->names[i], items->v[i])) return -1;
    return 0;
}

/* Renders a body into a string value (set blocks, filter blocks). */
static int capture(jrender *r, const jnode *body, jv *out) {
    jbuf b = {.limit = r->max_output};
    if (jr_exec(r, body, &b)) {
        jbuf_free(&b);
        return -1;
    }
    if (b.failed) {
        jbuf_free(&b);
        return jr_fail(r, body->line, "output larger than the limit (%zu bytes)", r->max_output);
    }
    *out = jr_string_from_buf(r, &b);
    return 0;
}

static int exec_for(jrender *r, const jnode *n, jbuf *out) {
    jv seq;
    jv_list *items;
    if (jr_eval(r, n->a, &seq) || jr_iterate(r, n->line, seq, &items)) return -1;
    jframe *saved = r->cur;
    if (n->b) { /* {% for x in xs if cond %}: filter first, loop.length counts the kept items */
        jv_list *kept = jv_list_new(&r->arena, 0);
        jframe *f = jr_frame_new(r, saved);
        if (!kept || !f) return jr_oom(r, n->line);
        r->cur = f;
        for (size_t i = 0; i < items->n; i++) {
            jv c;
            if (unpack(r, n, f, items->v[i]) || jr_eval(r, n->b, &c)) {
                r->cur = saved;
                return -1;
            }
            if (jv_truthy(c) && !jv_list_push(&r->arena, kept, items->v[i])) {
                r->cur = saved;
                return jr_oom(r, n->line);
            }
        }
        r->cur = saved;
        items = kept;
    }
    jv_loop *L = jarena_alloc(&r->arena, sizeof *L);
    if (!L) return jr_oom(r, n->line);
    L->items = items;
    int rc = 0;
    for (size_t i = 0; i < items->n && !rc; i++) {
        if (++r->steps > r->max_steps) {
            rc = jr_fail(r, n->line, "template took too many steps (limit %llu)", (unsigned long long)r->max_steps);
            break;
        }
        /* A fresh scope per iteration: assignments do not carry over between iterations. */
        jframe *f = jr_frame_new(r, saved);
        jv_loop *it = jarena_alloc(&r->arena, sizeof *it);
        if (!f || !it) {
            rc = jr_oom(r, n->line);
            break;
        }
        *it = *L;
        it->index0 = i;
        jv lv = {.k = JV_LOOP};
        lv.u.loop = it;
        rc = unpack(r, n, f, items->v[i]) || jr_assign(r, n->line, f, "loop", lv);
        if (rc) break;
        r->cur = f;
        rc = jr_exec(r, n->c, out);
        r->cur = saved;
        if (r->brk == 1) {
            r->brk = 0;
            break;
        }
        r->brk = 0;
    }
    r->cur = saved;
    if (!rc && items->n == 0 && n->d) rc = jr_exec(r, n->d, out);
    return rc;
}

int jr_exec(jrender *r, const jnode *n, jbuf *out) {
    jv v;
    switch ((jnode_kind)n->kind) {
    case JN_BODY:
        for (size_t i = 0; i < n->n_kids; i++) {
            if (jr_exec(r, n->kids[i], out)) return -1;
            if (r->brk) break;
        }
        return 0;
    case JN_DATA:
        if (!jbuf_put(out, n->val.u.s.p, n->val.u.s.n))
            return jr_fail(r, n->line, "output larger than the limit (%zu bytes)", r->max_output);
        return 0;
    case JN_PRINT:
        return jr_eval(r, n->a, &v) || write_value(r, n->line, out, v) ? -1 : 0;
    case JN_IF:
        if (jr_eval(r, n->a, &v)) return -1;
        if (jv_truthy(v)) return jr_exec(r, n->b, out);
        return n->c ? jr_exec(r, n->c, out) : 0;
    case JN_FOR:
        return exec_for(r, n, out);
    case JN_SET:
        if (jr_eval(r, n->a, &v)) return -1;
        if (n->op == 1) {
            jv ns = jr_lookup(r, n->name);
            if (ns.k != JV_NS) return jr_fail(r, n->line, "cannot assign attribute on non-namespace object");
            if (!jv_dict_set(&r->arena, ns.u.d, jv_strn(n->names[0], strlen(n->names[0])), v))
                return jr_oom(r, n->line);
            return 0;
        }
        return unpack(r, n, r->cur, v);
    case JN_SET_BLOCK: {
        jv saved = r->input;
        if (capture(r, n->a, &r->input)) return -1;
        int rc = jr_eval(r, n->b, &v);
        r->input = saved;
        return rc ? -1 : jr_assign(r, n->line, r->cur, n->name, v);
    }
    case JN_FILTER_BLOCK: {
        jv saved = r->input;
        if (capture(r, n->a, &r->input)) return -1;
        int rc = jr_eval(r, n->b, &v);
        r->input = saved;
        return rc || write_value(r, n->line, out, v) ? -1 : 0;
    }
    case JN_MACRO: {
        jv_macro *m = jarena_alloc(&r->arena, sizeof *m);
        if (!m) return jr_oom(r, n->line);
        m->def = n;
        m->closure = r->cur;
        v = (jv){.k = JV_MACRO};
        v.u.m = m;
        return jr_assign(r, n->line, r->cur, n->name, v);
    }
    case JN_CALL_BLOCK: {
        const jnode *call = n->a;
        jv callee, *args = NULL, *kw = NULL;
        if (jr_eval(r, call->a, &callee)) return -1;
        args = call->n_kids ? jarena_alloc(&r->arena, call->n_kids * sizeof(jv)) : NULL;
        kw = call->n_kids2 ? jarena_alloc(&r->arena, call->n_kids2 * sizeof(jv)) : NULL;
        if ((call->n_kids && !args) || (call->n_kids2 && !kw)) return jr_oom(r, n->line);
        for (size_t i = 0; i < call->n_kids; i++)
            if (jr_eval(r, call->kids[i], &args[i])) return -1;
        for (size_t i = 0; i < call->n_kids2; i++)
            if (jr_eval(r, call->kids2[i], &kw[i])) return -1;
        jv_macro *caller = jarena_alloc(&r->arena, sizeof *caller);
        if (!caller) return jr_oom(r, n->line);
        caller->def = n;
        caller->closure = r->cur;
        r->caller = callee.k == JV_MACRO ? caller : NULL;
        int rc = jr_call_value(r, n->line, callee, args, call->n_kids, call->names, kw, call->n_names, &v);
        r->caller = NULL;
        return rc || write_value(r, n->line, out, v) ? -1 : 0;
    }
    case JN_WITH: {
        jframe *saved = r->cur, *f = jr_frame_new(r, saved);
        if (!f) return jr_oom(r, n->line);
        for (size_t i = 0; i < n->n_names; i++)
            if (jr_eval(r, n->kids[i], &v) || jr_assign(r, n->line, f, n->names[i], v)) return -1;
        r->cur = f;
        int rc = jr_exec(r, n->a, out);
        r->cur = saved;
        return rc;
    }
    case JN_BREAK: r->brk = 1; return 0;
    case JN_CONTINUE: r->brk = 2; return 0;
    case JN_NOOP: return 0;
    default:
        return jr_fail(r, n->line, "expression used as a statement");
    }
}

/* ==== Public API ==== */
static bool valid_utf8(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t len;
        uint32_t cp;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; }
        else return false;
        if (i + len > n) return false;
        for (size_t k = 1; k < len; k++) {
            if ((p[i + k] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
            return false;
        i += len;
    }
    return true;
}

int jinja_compile(jinja_template **out, const char *src, mx_error *err) {
    *out = NULL;
    if (!src) return mx_fail(err, "chat template: no template source");
    size_t n = strlen(src);
    if (!valid_utf8(src, n)) return mx_fail(err, "chat template: source is not valid UTF-8");
    jinja_template *t = calloc(1, sizeof *t);
    if (!t) return mx_fail(err, "chat template: out of memory");
    /* Jinja normalises \r\n and \r to \n, then drops one trailing newline. */
    char *norm = jarena_alloc(&t->arena, n + 1);
    if (!norm) {
        free(t);
        return mx_fail(err, "chat template: out of memory");
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') {
            norm[k++] = '\n';
            if (i + 1 < n && src[i + 1] == '\n') i++;
        } else {
            norm[k++] = src[i];
        }
    }
    if (k && norm[k - 1] == '\n') k--;
    norm[k] = '\0';
    jtok *toks;
    size_t n_toks;
    if (jinja_lex(&t->arena, norm, k, &toks, &n_toks, err) || jinja_parse(&t->arena, toks, n_toks, &t->root, err)) {
        jinja_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

void jinja_free(jinja_template *t) {
    if (!t) return;
    jarena_free(&t->arena);
    free(t);
}

const jinja_limits jinja_default_limits = {
    .max_output = 256u << 20, .max_memory = 1024u << 20, .max_steps = 200000000, .max_depth = 500};

int jinja_render_ex(const jinja_template *t, const json_t *ctx, const jinja_limits *lim, char **out,
                    mx_error *err) {
    *out = NULL;
    if (!lim) lim = &jinja_default_limits;
    if (ctx && !json_is_object(ctx)) return mx_fail(err, "chat template: render context must be a JSON object");
    jrender r = {.err = err, .max_depth = lim->max_depth, .max_steps = lim->max_steps,
                 .max_output = lim->max_output};
    r.arena.limit = lim->max_memory;
    jv c = ctx ? jv_from_json(&r.arena, ctx) : (jv){.k = JV_NONE};
    r.ctx = c.k == JV_DICT ? c.u.d : jv_dict_new(&r.arena, 0);
    r.root = r.ctx ? jr_frame_new(&r, NULL) : NULL;
    r.cur = r.root;
    r.input = jv_undef(NULL);
    int rc;
    if (!r.root || r.arena.failed) {
        rc = mx_fail(err, "chat template: render context larger than the memory limit");
    } else {
        jbuf b = {.limit = lim->max_output};
        rc = jr_exec(&r, t->root, &b);
        if (!rc && b.failed) rc = mx_fail(err, "chat template: output larger than the limit (%zu bytes)", lim->max_output);
        if (!rc) {
            *out = b.p ? b.p : strdup("");
            if (!*out) rc = mx_fail(err, "chat template: out of memory");
        } else {
            jbuf_free(&b);
        }
    }
    jarena_free(&r.arena);
    return rc;
}

int jinja_render(const jinja_template *t, const json_t *ctx, char **out, mx_error *err) {
    return jinja_render_ex(t, ctx, NULL, out, err);
}
