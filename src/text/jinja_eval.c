/* Jinja evaluator: expressions and statements over arena values, with Python semantics and
 * the Undefined rules of jinja2's default Undefined (printing and iteration are silent,
 * attribute access, calls, arithmetic and ordering on an undefined value are errors). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja_internal.h"

/* ==== Errors ==== */
int jr_fail(jrender *r, int line, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return mx_fail(r->err, "chat template line %d: %s", line, msg);
}

int jr_undefined_error(jrender *r, int line, jv v) {
    return jr_fail(r, line, "%s", v.k == JV_UNDEF && v.u.undef ? v.u.undef : "value is undefined");
}

int jr_oom(jrender *r, int line) {
    return jr_fail(r, line, "template used more than the allowed memory (%zu bytes)", r->arena.limit);
}

uint64_t jr_cost(jv v) {
    switch ((jv_kind)v.k) {
    case JV_STR: return v.u.s.n / 64;
    case JV_LIST: return v.u.l->n / 4;
    case JV_DICT: case JV_NS: return v.u.d->n / 4;
    default: return 0;
    }
}

int jr_charge(jrender *r, int line, uint64_t n) {
    r->steps += n;
    if (r->steps > r->max_steps)
        return jr_fail(r, line, "template took too many steps (limit %llu)", (unsigned long long)r->max_steps);
    return 0;
}

jv jr_string_from_buf(jrender *r, jbuf *b) {
    size_t n = b->n;
    char *p = jarena_strndup(&r->arena, b->p ? b->p : "", n);
    jbuf_free(b);
    return p ? jv_strn(p, n) : jv_undef(NULL);
}

jv jr_str(jrender *r, jv v) {
    if (v.k == JV_STR) return v;
    jbuf b = {.limit = r->max_output};
    if (!jv_write_str(&b, v)) {
        jbuf_free(&b);
        return jv_undef(NULL);
    }
    size_t n = b.n;
    char *p = jarena_strndup(&r->arena, b.p ? b.p : "", n);
    jbuf_free(&b);
    return p ? jv_strn(p, n) : jv_undef(NULL);
}

char *jr_hint(jrender *r, const char *fmt, ...) {
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return jarena_strndup(&r->arena, msg, strlen(msg));
}

/* jinja2's object_type_repr: "dict object", "None", ... */
static const char *type_repr(jv v) {
    switch ((jv_kind)v.k) {
    case JV_NONE: return "None";
    case JV_DICT: return "dict object";
    case JV_LIST: return v.u.l->tuple ? "tuple object" : "list object";
    case JV_STR: return "str object";
    case JV_INT: return "int object";
    case JV_FLOAT: return "float object";
    case JV_BOOL: return "bool object";
    case JV_NS: return "jinja2.utils.Namespace object";
    default: return "object";
    }
}

/* ==== Variables ==== */
jv jr_lookup(jrender *r, const char *name) {
    for (jframe *f = r->cur; f; f = f->parent) {
        const jv *v = jv_dict_get_str(f->vars, name);
        if (v) return *v;
    }
    const jv *v = jv_dict_get_str(r->ctx, name);
    if (v) return *v;
    for (int i = 0; i < JF_COUNT; i++)
        if (!strcmp(jinja_func_names[i], name)) {
            jv f = {.k = JV_FUNC};
            f.u.fn = i;
            return f;
        }
    return jv_undef(jr_hint(r, "'%s' is undefined", name));
}

int jr_assign(jrender *r, int line, jframe *f, const char *name, jv v) {
    if (!jv_dict_set(&r->arena, f->vars, jv_strn(name, strlen(name)), v)) return jr_oom(r, line);
    return 0;
}

jframe *jr_frame_new(jrender *r, jframe *parent) {
    jframe *f = jarena_alloc(&r->arena, sizeof *f);
    if (!f) return NULL;
    f->parent = parent;
    f->vars = jv_dict_new(&r->arena, 0);
    return f->vars ? f : NULL;
}

/* ==== Attribute and item access ==== */
static jv method(jrender *r, jv self, const char *name) {
    jv_method *m = jarena_alloc(&r->arena, sizeof *m);
    if (!m) return jv_undef(NULL);
    m->self = self;
    m->name = name;
    jv v = {.k = JV_METHOD};
    v.u.meth = m;
    return v;
}

static const char *const k_unsafe_methods[] = {"pop", "popitem", "setdefault", "update", "clear",
                                               "append", "extend", "insert", "remove", "sort",
                                               "reverse", NULL};

static int loop_attr(jrender *r, int line, const jv_loop *L, const char *name, jv *out) {
    size_t n = L->items->n, i = L->index0;
    if (!strcmp(name, "index")) *out = jv_int((int64_t)i + 1);
    else if (!strcmp(name, "index0")) *out = jv_int((int64_t)i);
    else if (!strcmp(name, "revindex")) *out = jv_int((int64_t)(n - i));
    else if (!strcmp(name, "revindex0")) *out = jv_int((int64_t)(n - i - 1));
    else if (!strcmp(name, "first")) *out = jv_bool(i == 0);
    else if (!strcmp(name, "last")) *out = jv_bool(i + 1 == n);
    else if (!strcmp(name, "length")) *out = jv_int((int64_t)n);
    else if (!strcmp(name, "depth")) *out = jv_int(L->depth0 + 1);
    else if (!strcmp(name, "depth0")) *out = jv_int(L->depth0);
    else if (!strcmp(name, "previtem"))
        *out = i > 0 ? L->items->v[i - 1] : jv_undef(jr_hint(r, "there is no previous item"));
    else if (!strcmp(name, "nextitem"))
        *out = i + 1 < n ? L->items->v[i + 1] : jv_undef(jr_hint(r, "there is no next item"));
    else if (!strcmp(name, "cycle")) {
        jv self = {.k = JV_LOOP};
        self.u.loop = (jv_loop *)L;
        *out = method(r, self, "cycle");
    } else {
        return jr_fail(r, line, "loop has no attribute '%s'", name);
    }
    return 0;
}

int jr_getattr(jrender *r, int line, jv obj, const char *name, jv *out) {
    if (obj.k == JV_UNDEF) return jr_undefined_error(r, line, obj);
    if (obj.k == JV_LOOP) return loop_attr(r, line, obj.u.loop, name, out);
    bool dunder = name[0] == '_' && name[1] == '_';
    if (dunder || ((obj.k == JV_DICT || obj.k == JV_LIST) && jinja_has_method(obj, name) == false)) {
        for (int i = 0; k_unsafe_methods[i] && !dunder; i++)
            if (!strcmp(name, k_unsafe_methods[i]) && (obj.k == JV_LIST || strcmp(name, "sort"))) {
                bool list_only = !strcmp(name, "append") || !strcmp(name, "extend") ||
                                 !strcmp(name, "insert") || !strcmp(name, "remove") || !strcmp(name, "reverse");
                bool dict_only = !strcmp(name, "popitem") || !strcmp(name, "setdefault") || !strcmp(name, "update");
                if ((list_only && obj.k != JV_LIST) || (dict_only && obj.k != JV_DICT)) break;
                *out = jv_undef(jr_hint(r, "access to attribute '%s' of '%s' object is unsafe.", name,
                                           jv_type_name(obj)));
                return 0;
            }
        if (dunder) {
            *out = jv_undef(jr_hint(r, "access to attribute '%s' of '%s' object is unsafe.", name,
                                       jv_type_name(obj)));
            return 0;
        }
    }
    if (jinja_has_method(obj, name)) {
        *out = method(r, obj, name);
        return 0;
    }
    if (obj.k == JV_DICT || obj.k == JV_NS) {
        const jv *v = jv_dict_get_str(obj.u.d, name);
        if (v) {
            *out = *v;
            return 0;
        }
    }
    *out = jv_undef(jr_hint(r, "'%s' has no attribute '%s'", type_repr(obj), name));
    return 0;
}

static bool index_of(jv key, size_t len, size_t *out) {
    if (key.k != JV_INT && key.k != JV_BOOL) return false;
    int64_t i = key.k == JV_BOOL ? key.u.b : key.u.i;
    if (i < 0) i += (int64_t)len;
    if (i < 0 || (uint64_t)i >= len) return false;
    *out = (size_t)i;
    return true;
}

int jr_getitem(jrender *r, int line, jv obj, jv key, jv *out) {
    if (obj.k == JV_UNDEF) return jr_undefined_error(r, line, obj);
    size_t i;
    if (obj.k == JV_DICT) {
        if (obj.u.d->n > 16 && jr_charge(r, line, obj.u.d->n / 16)) return -1;
        const jv *v = jv_dict_get(obj.u.d, key);
        if (v) {
            *out = *v;
            return 0;
        }
    } else if (obj.k == JV_LIST) {
        if (index_of(key, obj.u.l->n, &i)) {
            *out = obj.u.l->v[i];
            return 0;
        }
    } else if (obj.k == JV_STR && (key.k == JV_INT || key.k == JV_BOOL)) {
        if (jr_charge(r, line, jr_cost(obj))) return -1;
        size_t len = ju8_len(obj.u.s.p, obj.u.s.n);
        if (index_of(key, len, &i)) {
            size_t a = ju8_offset(obj.u.s.p, obj.u.s.n, i);
            size_t b = ju8_offset(obj.u.s.p + a, obj.u.s.n - a, 1);
            *out = jv_strn(obj.u.s.p + a, b);
            return 0;
        }
    }
    /* The sandbox falls back to an attribute of the same name (ns['x'], d['items']). */
    if (key.k == JV_STR && obj.k != JV_DICT) {
        char *name = jarena_strndup(&r->arena, key.u.s.p, key.u.s.n);
        if (!name) return jr_oom(r, line);
        return jr_getattr(r, line, obj, name, out);
    }
    if (key.k == JV_STR && jinja_has_method(obj, jarena_strndup(&r->arena, key.u.s.p, key.u.s.n) ?: "")) {
        *out = method(r, obj, jarena_strndup(&r->arena, key.u.s.p, key.u.s.n));
        return 0;
    }
    jbuf kb = {.limit = 200};
    jv_write_repr(&kb, key);
    if (key.k == JV_STR)
        *out = jv_undef(jr_hint(r, "'%s' has no attribute %s", type_repr(obj), kb.p ? kb.p : ""));
    else
        *out = jv_undef(jr_hint(r, "%s has no element %s", type_repr(obj), kb.p ? kb.p : ""));
    jbuf_free(&kb);
    return 0;
}

/* Python slice indices for a sequence of length n. */
static int slice_eval(jrender *r, const jnode *n, jv obj, jv *out) {
    jv parts[3] = {jv_none(), jv_none(), jv_none()};
    const jnode *nodes[3] = {n->b, n->c, n->d};
    for (int k = 0; k < 3; k++) {
        if (nodes[k] && jr_eval(r, nodes[k], &parts[k])) return -1;
        if (parts[k].k == JV_BOOL) parts[k] = jv_int(parts[k].u.b);
        if (parts[k].k != JV_NONE && parts[k].k != JV_INT) {
            *out = jv_undef(jr_hint(r, "slice indices must be integers or None"));
            return 0;
        }
    }
    if (obj.k == JV_UNDEF) return jr_undefined_error(r, n->line, obj);
    if (jr_charge(r, n->line, jr_cost(obj))) return -1;
    if (obj.k != JV_LIST && obj.k != JV_STR) {
        *out = jv_undef(jr_hint(r, "'%s' object is not subscriptable", jv_type_name(obj)));
        return 0;
    }
    int64_t step = parts[2].k == JV_INT ? parts[2].u.i : 1;
    if (step == 0) return jr_fail(r, n->line, "slice step cannot be zero");
    int64_t len = obj.k == JV_LIST ? (int64_t)obj.u.l->n : (int64_t)ju8_len(obj.u.s.p, obj.u.s.n);
    int64_t start, stop;
    if (parts[0].k == JV_NONE) start = step < 0 ? len - 1 : 0;
    else {
        start = parts[0].u.i;
        if (start < 0) start += len;
        if (start < 0) start = step < 0 ? -1 : 0;
        if (start >= len) start = step < 0 ? len - 1 : len;
    }
    if (parts[1].k == JV_NONE) stop = step < 0 ? -1 : len;
    else {
        stop = parts[1].u.i;
        if (stop < 0) stop += len;
        if (stop < 0) stop = step < 0 ? -1 : 0;
        if (stop >= len) stop = step < 0 ? len - 1 : len;
    }
    /* Collect indices */
    if (obj.k == JV_LIST) {
        jv_list *l = jv_list_new(&r->arena, 0);
        if (!l) return jr_oom(r, n->line);
        l->tuple = obj.u.l->tuple;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
            if (!jv_list_push(&r->arena, l, obj.u.l->v[i])) return jr_oom(r, n->line);
        out->k = JV_LIST;
        out->safe = 0;
        out->u.l = l;
        return 0;
    }
    /* Strings: code point offsets table, then copy. */
    size_t *off = malloc(((size_t)len + 1) * sizeof *off);
    if (!off) return jr_oom(r, n->line);
    size_t pos = 0;
    for (int64_t i = 0; i < len; i++) {
        off[i] = pos;
        ju8_next(obj.u.s.p, obj.u.s.n, &pos);
    }
    off[len] = obj.u.s.n;
    jbuf b = {.limit = r->max_output};
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
        jbuf_put(&b, obj.u.s.p + off[i], off[i + 1] - off[i]);
    free(off);
    if (b.failed) {
        jbuf_free(&b);
        return jr_oom(r, n->line);
    }
    size_t bn = b.n;
    char *p = jarena_strndup(&r->arena, b.p ? b.p : "", bn);
    jbuf_free(&b);
    if (!p) return jr_oom(r, n->line);
    *out = jv_strn(p, bn);
    return 0;
}

/* ==== Iteration ==== */
int jr_iterate(jrender *r, int line, jv v, jv_list **out) {
    jv_list *l;
    if (v.k == JV_STR && jr_charge(r, line, v.u.s.n)) return -1;
    switch ((jv_kind)v.k) {
    case JV_UNDEF:
        l = jv_list_new(&r->arena, 0);
        break;
    case JV_LIST:
        *out = v.u.l;
        return 0;
    case JV_DICT:
        l = jv_list_new(&r->arena, v.u.d->n);
        if (l) {
            memcpy(l->v, v.u.d->keys, v.u.d->n * sizeof(jv));
            l->n = v.u.d->n;
        }
        break;
    case JV_STR: {
        l = jv_list_new(&r->arena, 0);
        size_t pos = 0;
        while (l && pos < v.u.s.n) {
            size_t start = pos;
            ju8_next(v.u.s.p, v.u.s.n, &pos);
            if (!jv_list_push(&r->arena, l, jv_strn(v.u.s.p + start, pos - start))) l = NULL;
        }
        break;
    }
    default:
        return jr_fail(r, line, "'%s' object is not iterable", jv_type_name(v));
    }
    if (!l) return jr_oom(r, line);
    *out = l;
    return 0;
}

/* ==== Operators ==== */
static int arith_error(jrender *r, int line, const char *op, jv a, jv b) {
    if (a.k == JV_UNDEF) return jr_undefined_error(r, line, a);
    if (b.k == JV_UNDEF) return jr_undefined_error(r, line, b);
    return jr_fail(r, line, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_type_name(a),
                   jv_type_name(b));
}

static int64_t as_i64(jv v) { return v.k == JV_BOOL ? (int64_t)v.u.b : v.u.i; }

static int repeat_seq(jrender *r, int line, jv seq, int64_t times, jv *out) {
    if (times < 0) times = 0;
    if (seq.k == JV_STR ? seq.u.s.n == 0 : seq.u.l->n == 0) times = 0; /* '' * 10**12 is '' */
    if (jr_charge(r, line, (uint64_t)times)) return -1;
    size_t unit = seq.k == JV_STR ? seq.u.s.n : seq.u.l->n * sizeof(jv);
    if (unit && (uint64_t)times > (r->arena.limit ? r->arena.limit : SIZE_MAX / 2) / unit) return jr_oom(r, line);
    if (seq.k == JV_STR) {
        char *p = jarena_alloc(&r->arena, seq.u.s.n * (size_t)times + 1);
        if (!p) return jr_oom(r, line);
        for (int64_t i = 0; i < times; i++) memcpy(p + (size_t)i * seq.u.s.n, seq.u.s.p, seq.u.s.n);
        *out = jv_strn(p, seq.u.s.n * (size_t)times);
        return 0;
    }
    jv_list *l = jv_list_new(&r->arena, seq.u.l->n * (size_t)times);
    if (!l) return jr_oom(r, line);
    l->tuple = seq.u.l->tuple;
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < seq.u.l->n; k++) l->v[l->n++] = seq.u.l->v[k];
    out->k = JV_LIST;
    out->safe = 0;
    out->u.l = l;
    return 0;
}

static int binop(jrender *r, int line, int op, jv a, jv b, jv *out) {
    static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**"};
    bool num = jv_is_number(a) && jv_is_number(b);
    bool ints = num && a.k != JV_FLOAT && b.k != JV_FLOAT;
    switch (op) {
    case JOP_ADD:
        if (ints) {
            int64_t x;
            if (__builtin_add_overflow(as_i64(a), as_i64(b), &x)) return jr_fail(r, line, "integer overflow");
            *out = jv_int(x);
        } else if (num) {
            *out = jv_float(jv_as_double(a) + jv_as_double(b));
        } else if (a.k == JV_STR && b.k == JV_STR) {
            char *p = jarena_alloc(&r->arena, a.u.s.n + b.u.s.n + 1);
            if (!p) return jr_oom(r, line);
            memcpy(p, a.u.s.p, a.u.s.n);
            memcpy(p + a.u.s.n, b.u.s.p, b.u.s.n);
            *out = jv_strn(p, a.u.s.n + b.u.s.n);
        } else if (a.k == JV_LIST && b.k == JV_LIST && a.u.l->tuple == b.u.l->tuple) {
            jv_list *l = jv_list_new(&r->arena, a.u.l->n + b.u.l->n);
            if (!l) return jr_oom(r, line);
            l->tuple = a.u.l->tuple;
            if (a.u.l->n) memcpy(l->v, a.u.l->v, a.u.l->n * sizeof(jv));
            if (b.u.l->n) memcpy(l->v + a.u.l->n, b.u.l->v, b.u.l->n * sizeof(jv));
            l->n = a.u.l->n + b.u.l->n;
            out->k = JV_LIST;
            out->safe = 0;
            out->u.l = l;
        } else {
            return arith_error(r, line, "+", a, b);
        }
        return 0;
    case JOP_SUB:
        if (ints) {
            int64_t x;
            if (__builtin_sub_overflow(as_i64(a), as_i64(b), &x)) return jr_fail(r, line, "integer overflow");
            *out = jv_int(x);
        } else if (num) {
            *out = jv_float(jv_as_double(a) - jv_as_double(b));
        } else {
            return arith_error(r, line, "-", a, b);
        }
        return 0;
    case JOP_MUL:
        if (ints) {
            int64_t x;
            if (__builtin_mul_overflow(as_i64(a), as_i64(b), &x)) return jr_fail(r, line, "integer overflow");
            *out = jv_int(x);
        } else if (num) {
            *out = jv_float(jv_as_double(a) * jv_as_double(b));
        } else if ((a.k == JV_STR || a.k == JV_LIST) && (b.k == JV_INT || b.k == JV_BOOL)) {
            return repeat_seq(r, line, a, as_i64(b), out);
        } else if ((b.k == JV_STR || b.k == JV_LIST) && (a.k == JV_INT || a.k == JV_BOOL)) {
            return repeat_seq(r, line, b, as_i64(a), out);
        } else {
            return arith_error(r, line, "*", a, b);
        }
        return 0;
    case JOP_DIV:
    case JOP_FLOORDIV:
    case JOP_MOD:
        if (a.k == JV_STR && op == JOP_MOD) return jr_percent_format(r, line, a, b, out);
        if (!num) return arith_error(r, line, names[op], a, b);
        if (jv_as_double(b) == 0.0)
            return jr_fail(r, line, op == JOP_MOD ? "integer modulo by zero" : "division by zero");
        if (op == JOP_DIV) {
            *out = jv_float(jv_as_double(a) / jv_as_double(b));
        } else if (ints) {
            int64_t x = as_i64(a), y = as_i64(b);
            if (x == INT64_MIN && y == -1) return jr_fail(r, line, "integer overflow");
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {
                q--;
                m += y;
            }
            *out = jv_int(op == JOP_FLOORDIV ? q : m);
        } else {
            /* CPython's float floor division / modulo */
            double x = jv_as_double(a), y = jv_as_double(b);
            double m = fmod(x, y), q = (x - m) / y;
            if (m != 0.0) {
                if ((y < 0) != (m < 0)) {
                    m += y;
                    q -= 1.0;
                }
            } else {
                m = copysign(0.0, y);
            }
            if (q != 0.0) {
                double f = floor(q);
                if (q - f > 0.5) f += 1.0;
                q = f;
            } else {
                q = copysign(0.0, x / y);
            }
            *out = jv_float(op == JOP_FLOORDIV ? q : m);
        }
        return 0;
    case JOP_POW:
        if (!num) return arith_error(r, line, "**", a, b);
        if (ints && as_i64(b) >= 0) {
            int64_t base = as_i64(a), e = as_i64(b), x = 1;
            while (e > 0) {
                if (e & 1 && __builtin_mul_overflow(x, base, &x)) return jr_fail(r, line, "integer overflow");
                e >>= 1;
                if (e && __builtin_mul_overflow(base, base, &base)) return jr_fail(r, line, "integer overflow");
            }
            *out = jv_int(x);
        } else {
            *out = jv_float(pow(jv_as_double(a), jv_as_double(b)));
        }
        return 0;
    case JOP_CONCAT: {
        jv x = jr_str(r, a), y = jr_str(r, b);
        if (x.k != JV_STR || y.k != JV_STR) return jr_oom(r, line);
        return binop(r, line, JOP_ADD, x, y, out);
    }
    }
    return jr_fail(r, line, "unknown operator");
}

static int contains(jrender *r, int line, jv item, jv container, bool *out) {
    switch ((jv_kind)container.k) {
    case JV_STR:
        if (jr_charge(r, line, container.u.s.n / 64)) return -1;
        if (item.k == JV_UNDEF) return jr_undefined_error(r, line, item);
        if (item.k != JV_STR)
            return jr_fail(r, line, "'in <string>' requires string as left operand, not %s", jv_type_name(item));
        *out = item.u.s.n == 0 || memmem(container.u.s.p, container.u.s.n, item.u.s.p, item.u.s.n) != NULL;
        return 0;
    case JV_LIST:
        *out = false;
        if (jr_charge(r, line, container.u.l->n)) return -1;
        for (size_t i = 0; i < container.u.l->n && !*out; i++) *out = jv_equal(item, container.u.l->v[i]);
        return 0;
    case JV_DICT:
        if (jr_charge(r, line, container.u.d->n)) return -1;
        *out = jv_dict_get(container.u.d, item) != NULL;
        return 0;
    case JV_UNDEF:
        *out = false;
        return 0;
    default:
        return jr_fail(r, line, "argument of type '%s' is not iterable", jv_type_name(container));
    }
}

static int compare(jrender *r, int line, int op, jv a, jv b, bool *out) {
    if (op == JOP_EQ || op == JOP_NE) {
        if (jr_charge(r, line, jr_cost(a) + jr_cost(b))) return -1;
        *out = jv_equal(a, b) == (op == JOP_EQ);
        return 0;
    }
    if (op == JOP_IN || op == JOP_NOTIN) {
        if (contains(r, line, a, b, out)) return -1;
        if (op == JOP_NOTIN) *out = !*out;
        return 0;
    }
    if (a.k == JV_UNDEF) return jr_undefined_error(r, line, a);
    if (b.k == JV_UNDEF) return jr_undefined_error(r, line, b);
    int c;
    mx_error e;
    if (jv_compare(a, b, &c, &e)) return jr_fail(r, line, "%s", e.msg);
    if (c == 2) *out = false; /* NaN */
    else *out = op == JOP_LT ? c < 0 : op == JOP_LE ? c <= 0 : op == JOP_GT ? c > 0 : c >= 0;
    return 0;
}

/* ==== Expressions ==== */
static int eval_args(jrender *r, const jnode *n, jv **args, jv **kw) {
    *args = n->n_kids ? jarena_alloc(&r->arena, n->n_kids * sizeof(jv)) : NULL;
    *kw = n->n_kids2 ? jarena_alloc(&r->arena, n->n_kids2 * sizeof(jv)) : NULL;
    if ((n->n_kids && !*args) || (n->n_kids2 && !*kw)) return jr_oom(r, n->line);
    for (size_t i = 0; i < n->n_kids; i++)
        if (jr_eval(r, n->kids[i], &(*args)[i])) return -1;
    for (size_t i = 0; i < n->n_kids2; i++)
        if (jr_eval(r, n->kids2[i], &(*kw)[i])) return -1;
    return 0;
}

static int make_seq(jrender *r, const jnode *n, bool tuple, jv *out) {
    jv_list *l = jv_list_new(&r->arena, n->n_kids);
    if (!l) return jr_oom(r, n->line);
    l->tuple = tuple;
    for (size_t i = 0; i < n->n_kids; i++)
        if (jr_eval(r, n->kids[i], &l->v[l->n++])) return -1;
    *out = (jv){.k = JV_LIST};
    out->u.l = l;
    return 0;
}

static int eval_inner(jrender *r, const jnode *n, jv *out) {
    jv a, b;
    bool t;
    switch ((jnode_kind)n->kind) {
    case JN_CONST: *out = n->val; return 0;
    case JN_NAME: *out = jr_lookup(r, n->name); return 0;
    case JN_INPUT: *out = r->input; return 0;
    case JN_GETATTR:
        return jr_eval(r, n->a, &a) || jr_getattr(r, n->line, a, n->name, out) ? -1 : 0;
    case JN_GETITEM:
        return jr_eval(r, n->a, &a) || jr_eval(r, n->b, &b) || jr_getitem(r, n->line, a, b, out) ? -1 : 0;
    case JN_SLICE:
        return jr_eval(r, n->a, &a) || slice_eval(r, n, a, out) ? -1 : 0;
    case JN_CALL: {
        jv *args, *kw;
        if (jr_eval(r, n->a, &a) || eval_args(r, n, &args, &kw)) return -1;
        return jr_call_value(r, n->line, a, args, n->n_kids, n->names, kw, n->n_names, out);
    }
    case JN_FILTER: {
        jv *args, *kw;
        if (n->id < 0) return jr_fail(r, n->line, "unknown filter '%s'", n->name);
        if (jr_eval(r, n->a, &a) || eval_args(r, n, &args, &kw)) return -1;
        return jr_apply_filter(r, n, a, args, n->n_kids, n->names, kw, n->n_names, out);
    }
    case JN_TEST: {
        jv *args, *kw;
        if (n->id < 0) return jr_fail(r, n->line, "unknown test '%s'", n->name);
        if (jr_eval(r, n->a, &a) || eval_args(r, n, &args, &kw)) return -1;
        if (n->n_names) return jr_fail(r, n->line, "test '%s' takes no keyword arguments", n->name);
        if (jr_apply_test(r, n, n->id, n->name, a, args, n->n_kids, &t)) return -1;
        *out = jv_bool(t);
        return 0;
    }
    case JN_NEG:
    case JN_POS:
        if (jr_eval(r, n->a, &a)) return -1;
        if (a.k == JV_UNDEF) return jr_undefined_error(r, n->line, a);
        if (!jv_is_number(a))
            return jr_fail(r, n->line, "bad operand type for unary %s: '%s'", n->kind == JN_NEG ? "-" : "+",
                           jv_type_name(a));
        if (a.k == JV_FLOAT) *out = jv_float(n->kind == JN_NEG ? -a.u.f : a.u.f);
        else if (n->kind == JN_NEG && as_i64(a) == INT64_MIN) return jr_fail(r, n->line, "integer overflow");
        else *out = jv_int(n->kind == JN_NEG ? -as_i64(a) : as_i64(a));
        return 0;
    case JN_NOT:
        if (jr_eval(r, n->a, &a)) return -1;
        *out = jv_bool(!jv_truthy(a));
        return 0;
    case JN_AND:
    case JN_OR: /* Python returns the deciding operand, not a bool */
        if (jr_eval(r, n->a, &a)) return -1;
        if (jv_truthy(a) == (n->kind == JN_OR)) {
            *out = a;
            return 0;
        }
        return jr_eval(r, n->b, out);
    case JN_BINOP:
        return jr_eval(r, n->a, &a) || jr_eval(r, n->b, &b) || binop(r, n->line, n->op, a, b, out) ? -1 : 0;
    case JN_COMPARE:
        if (jr_eval(r, n->a, &a) || jr_eval(r, n->b, &b) || compare(r, n->line, n->op, a, b, &t)) return -1;
        *out = jv_bool(t);
        return 0;
    case JN_COND:
        if (jr_eval(r, n->a, &a)) return -1;
        if (jv_truthy(a)) return jr_eval(r, n->b, out);
        if (n->c) return jr_eval(r, n->c, out);
        *out = jv_undef(jr_hint(r, "the inline if-expression on line %d evaluated to false and no else "
                                      "section was defined.", n->line));
        return 0;
    case JN_LIST: return make_seq(r, n, false, out);
    case JN_TUPLE: return make_seq(r, n, true, out);
    case JN_DICT: {
        jv_dict *d = jv_dict_new(&r->arena, n->n_kids);
        if (!d) return jr_oom(r, n->line);
        for (size_t i = 0; i < n->n_kids; i++) {
            if (jr_eval(r, n->kids[i], &a) || jr_eval(r, n->kids2[i], &b)) return -1;
            if (a.k == JV_LIST && !a.u.l->tuple) return jr_fail(r, n->line, "unhashable type: 'list'");
            if (a.k == JV_DICT || a.k == JV_NS || a.k == JV_UNDEF)
                return jr_fail(r, n->line, "unhashable type: '%s'", jv_type_name(a));
            if (!jv_dict_set(&r->arena, d, a, b)) return jr_oom(r, n->line);
        }
        *out = (jv){.k = JV_DICT};
        out->u.d = d;
        return 0;
    }
    default:
        return jr_fail(r, n->line, "statement used as an expression");
    }
}

int jr_eval(jrender *r, const jnode *n, jv *out) {
    if (++r->steps > r->max_steps) return jr_fail(r, n->line, "template took too many steps (limit %llu)",
                                                  (unsigned long long)r->max_steps);
    if (++r->depth > r->max_depth) {
        r->depth--;
        return jr_fail(r, n->line, "template nested or recursed too deeply");
    }
    int rc = eval_inner(r, n, out);
    r->depth--;
    if (!rc && r->arena.failed) rc = jr_oom(r, n->line);
    return rc;
}

