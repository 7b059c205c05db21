/* Jinja built-in filters and tests, as jinja2 3.1 defines them, with transformers' tojson
 * (json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja_internal.h"

jv jinja_strip(jv s, jv chars, bool left, bool right);
int jinja_case(jrender *r, int line, jv s, char mode, jv *out);
int jinja_str_replace(jrender *r, int line, jv s, jv old, jv new_, int64_t count, jv *out);
int jinja_dict_items(jrender *r, int line, const jv_dict *d, jv *out);

typedef struct fctx {
    jrender *r;
    const jnode *n;
    int line;
    const jv *args;
    size_t n_args;
    const char **kw_names;
    const jv *kw_vals;
    size_t n_kw;
} fctx;

/* Parameter `pos` (0 = first after the filtered value) or keyword `name`, else `def`. */
static jv param(const fctx *c, size_t pos, const char *name, jv def) {
    if (pos < c->n_args) return c->args[pos];
    for (size_t i = 0; name && i < c->n_kw; i++)
        if (!strcmp(c->kw_names[i], name)) return c->kw_vals[i];
    return def;
}

static jv listv(jv_list *l) {
    jv v = {.k = JV_LIST};
    v.u.l = l;
    return v;
}

static int to_str(const fctx *c, jv v, jv *out) {
    *out = jr_str(c->r, v);
    return out->k == JV_STR ? 0 : jr_oom(c->r, c->line);
}

/* ==== Attribute paths ("a.b.0") and item keys for sort/map/selectattr ==== */
static int attr_path(const fctx *c, jv item, jv path, jv *out) {
    if (path.k == JV_INT) return jr_getitem(c->r, c->line, item, path, out);
    if (path.k != JV_STR) return jr_fail(c->r, c->line, "attribute must be a string, not %s", jv_type_name(path));
    const char *p = path.u.s.p, *end = p + path.u.s.n;
    jv cur = item;
    while (p <= end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        if (!dot) dot = end;
        jv key = jv_strn(p, (size_t)(dot - p));
        bool digits = dot > p;
        for (const char *q = p; q < dot; q++) digits = digits && *q >= '0' && *q <= '9';
        if (digits && dot - p < 18) key = jv_int(strtoll(p, NULL, 10));
        if (jr_getitem(c->r, c->line, cur, key, &cur)) return -1;
        p = dot + 1;
    }
    *out = cur;
    return 0;
}

/* ==== Stable sort with a fallible comparison ==== */
typedef struct sortctx {
    const jv *keys;
    bool reverse;
    mx_error err;
    bool failed;
} sortctx;

static int sort_cmp(sortctx *s, size_t a, size_t b) {
    int out = 0;
    if (jv_compare(s->keys[a], s->keys[b], &out, &s->err)) s->failed = true;
    if (out == 2) out = 0;
    return s->reverse ? -out : out;
}

static void merge_sort(sortctx *s, size_t *idx, size_t *tmp, size_t n) {
    if (n < 2 || s->failed) return;
    size_t h = n / 2;
    merge_sort(s, idx, tmp, h);
    merge_sort(s, idx + h, tmp, n - h);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = sort_cmp(s, idx[j], idx[i]) < 0 ? idx[j++] : idx[i++];
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
}

/* Sorts items by keys (case-folded strings unless case_sensitive). */
static int sort_by(const fctx *c, jv_list *items, jv *keys, bool reverse, bool case_sensitive, jv_list **out) {
    size_t n = items->n;
    if (!case_sensitive)
        for (size_t i = 0; i < n; i++)
            if (keys[i].k == JV_STR && jinja_case(c->r, c->line, keys[i], 'l', &keys[i])) return -1;
    size_t *idx = malloc((n + 1) * sizeof *idx), *tmp = malloc((n + 1) * sizeof *tmp);
    if (!idx || !tmp) {
        free(idx);
        free(tmp);
        return jr_oom(c->r, c->line);
    }
    for (size_t i = 0; i < n; i++) idx[i] = i;
    if (jr_charge(c->r, c->line, (uint64_t)n * 20)) {
        free(idx);
        free(tmp);
        return -1;
    }
    sortctx s = {.keys = keys, .reverse = reverse};
    merge_sort(&s, idx, tmp, n);
    jv_list *l = s.failed ? NULL : jv_list_new(&c->r->arena, n);
    if (l)
        for (size_t i = 0; i < n; i++) l->v[l->n++] = items->v[idx[i]];
    free(idx);
    free(tmp);
    if (s.failed) return jr_fail(c->r, c->line, "%s", s.err.msg);
    if (!l) return jr_oom(c->r, c->line);
    *out = l;
    return 0;
}

/* ==== Filters ==== */
#define F(name) static int f_##name(const fctx *c, jv v, jv *out)

F(abs) {
    if (v.k == JV_INT) {
        if (v.u.i == INT64_MIN) return jr_fail(c->r, c->line, "integer overflow");
        *out = jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
    } else if (v.k == JV_FLOAT) *out = jv_float(fabs(v.u.f));
    else if (v.k == JV_BOOL) *out = jv_int(v.u.b);
    else if (v.k == JV_UNDEF) return jr_undefined_error(c->r, c->line, v);
    else return jr_fail(c->r, c->line, "bad operand type for abs(): '%s'", jv_type_name(v));
    return 0;
}

F(attr) {
    jv name = param(c, 0, "name", jv_undef(NULL));
    if (name.k != JV_STR) return jr_fail(c->r, c->line, "attr filter expects a string name");
    char *s = jarena_strndup(&c->r->arena, name.u.s.p, name.u.s.n);
    if (!s) return jr_oom(c->r, c->line);
    if (v.k == JV_DICT && !jinja_has_method(v, s)) { /* getattr only: dict keys are not attributes */
        *out = jv_undef(jr_hint(c->r, "'dict object' has no attribute '%s'", s));
        return 0;
    }
    return jr_getattr(c->r, c->line, v, s, out);
}

F(batch) {
    jv cnt = param(c, 0, "linecount", jv_undef(NULL)), fill = param(c, 1, "fill_with", jv_none());
    jv_list *items, *l = jv_list_new(&c->r->arena, 0), *row = NULL;
    if (cnt.k != JV_INT || cnt.u.i <= 0) return jr_fail(c->r, c->line, "batch: linecount must be a positive integer");
    if (!l || jr_iterate(c->r, c->line, v, &items)) return -1;
    for (size_t i = 0; i < items->n; i++) {
        if (!row || row->n == (size_t)cnt.u.i) {
            row = jv_list_new(&c->r->arena, 0);
            if (!row || !jv_list_push(&c->r->arena, l, listv(row))) return jr_oom(c->r, c->line);
        }
        if (!jv_list_push(&c->r->arena, row, items->v[i])) return jr_oom(c->r, c->line);
    }
    if (row && fill.k != JV_NONE)
        while (row->n < (size_t)cnt.u.i)
            if (!jv_list_push(&c->r->arena, row, fill)) return jr_oom(c->r, c->line);
    *out = listv(l);
    return 0;
}

F(capitalize) { return to_str(c, v, &v) || jinja_case(c->r, c->line, v, 'c', out); }
F(lower) { return to_str(c, v, &v) || jinja_case(c->r, c->line, v, 'l', out); }
F(upper) { return to_str(c, v, &v) || jinja_case(c->r, c->line, v, 'u', out); }
/* jinja2's title filter (not str.title): words start after runs of [-\s({[<]; each word is its
 * first character upper-cased plus the rest lower-cased, so "they're" -> "They're". */
F(title) {
    if (to_str(c, v, &v)) return -1;
    jbuf b = {.limit = c->r->max_output};
    size_t i = 0;
    bool start = true;
    while (i < v.u.s.n) {
        size_t from = i;
        int32_t ch = ju8_next(v.u.s.p, v.u.s.n, &i);
        bool sep = ju8_is_space(ch) || ch == '-' || ch == '(' || ch == '{' || ch == '[' || ch == '<';
        jv piece = jv_strn(v.u.s.p + from, i - from), cased;
        if (sep) {
            jbuf_put(&b, piece.u.s.p, piece.u.s.n);
            start = true;
            continue;
        }
        if (jinja_case(c->r, c->line, piece, start ? 'u' : 'l', &cased)) {
            jbuf_free(&b);
            return -1;
        }
        jbuf_put(&b, cased.u.s.p, cased.u.s.n);
        start = false;
    }
    if (b.failed) { jbuf_free(&b); return jr_oom(c->r, c->line); }
    *out = jr_string_from_buf(c->r, &b);
    return 0;
}

F(center) {
    jv w = param(c, 0, "width", jv_int(80));
    if (to_str(c, v, &v)) return -1;
    if (w.k != JV_INT) return jr_fail(c->r, c->line, "center: width must be an integer");
    int64_t len = (int64_t)ju8_len(v.u.s.p, v.u.s.n), pad = w.u.i - len;
    if (pad <= 0) { *out = v; return 0; }
    if (w.u.i > 1000000) return jr_oom(c->r, c->line);
    /* CPython: left = pad/2 + (pad & width & 1) */
    int64_t left = pad / 2 + (pad & w.u.i & 1);
    jbuf b = {.limit = c->r->max_output};
    for (int64_t i = 0; i < left; i++) jbuf_put(&b, " ", 1);
    jbuf_put(&b, v.u.s.p, v.u.s.n);
    for (int64_t i = 0; i < pad - left; i++) jbuf_put(&b, " ", 1);
    *out = jr_string_from_buf(c->r, &b);
    return 0;
}

F(length) {
    switch ((jv_kind)v.k) {
    case JV_UNDEF: *out = jv_int(0); return 0;
    case JV_STR: *out = jv_int((int64_t)ju8_len(v.u.s.p, v.u.s.n)); return 0;
    case JV_LIST: *out = jv_int((int64_t)v.u.l->n); return 0;
    case JV_DICT: *out = jv_int((int64_t)v.u.d->n); return 0;
    case JV_LOOP: *out = jv_int((int64_t)v.u.loop->items->n); return 0;
    default: return jr_fail(c->r, c->line, "object of type '%s' has no len()", jv_type_name(v));
    }
}

F(default) {
    jv def = param(c, 0, "default_value", jv_strn("", 0)), boolean = param(c, 1, "boolean", jv_bool(false));
    *out = v.k == JV_UNDEF || (jv_truthy(boolean) && !jv_truthy(v)) ? def : v;
    return 0;
}

F(dictsort) {
    jv cs = param(c, 0, "case_sensitive", jv_bool(false)), by = param(c, 1, "by", jv_strn("key", 3));
    jv rev = param(c, 2, "reverse", jv_bool(false));
    if (v.k != JV_DICT) return jr_fail(c->r, c->line, "dictsort: expected a mapping, not %s", jv_type_name(v));
    int pos = by.k == JV_STR && by.u.s.n == 5 && !memcmp(by.u.s.p, "value", 5) ? 1 : 0;
    if (by.k != JV_STR || (!pos && !(by.u.s.n == 3 && !memcmp(by.u.s.p, "key", 3))))
        return jr_fail(c->r, c->line, "You can only sort by either \"key\" or \"value\"");
    jv items;
    if (jinja_dict_items(c->r, c->line, v.u.d, &items)) return -1;
    jv *keys = jarena_alloc(&c->r->arena, (items.u.l->n + 1) * sizeof(jv));
    if (!keys) return jr_oom(c->r, c->line);
    for (size_t i = 0; i < items.u.l->n; i++) keys[i] = items.u.l->v[i].u.l->v[pos];
    jv_list *l;
    if (sort_by(c, items.u.l, keys, jv_truthy(rev), jv_truthy(cs), &l)) return -1;
    *out = listv(l);
    return 0;
}

F(escape) {
    if (v.safe && v.k == JV_STR) { *out = v; return 0; }
    if (to_str(c, v, &v)) return -1;
    jbuf b = {.limit = c->r->max_output};
    for (size_t i = 0; i < v.u.s.n; i++) {
        char ch = v.u.s.p[i];
        if (ch == '&') jbuf_puts(&b, "&amp;");
        else if (ch == '<') jbuf_puts(&b, "&lt;");
        else if (ch == '>') jbuf_puts(&b, "&gt;");
        else if (ch == '"') jbuf_puts(&b, "&#34;");
        else if (ch == '\'') jbuf_puts(&b, "&#39;");
        else jbuf_put(&b, &ch, 1);
    }
    *out = jr_string_from_buf(c->r, &b);
    out->safe = 1;
    return 0;
}

F(first) {
    jv_list *l;
    if (jr_iterate(c->r, c->line, v, &l)) return -1;
    *out = l->n ? l->v[0] : jv_undef(jr_hint(c->r, "No first item, sequence was empty."));
    return 0;
}

F(last) {
    jv_list *l;
    if (jr_iterate(c->r, c->line, v, &l)) return -1;
    *out = l->n ? l->v[l->n - 1] : jv_undef(jr_hint(c->r, "No last item, sequence was empty."));
    return 0;
}

/* Python int(str): optional sign, digits with single underscores, surrounding whitespace. */
static bool parse_int(jv s, int base, int64_t *out) {
    jv t = jinja_strip(s, jv_none(), true, true);
    char buf[80];
    size_t k = 0;
    for (size_t i = 0; i < t.u.s.n; i++) {
        if (k + 1 >= sizeof buf) return false;
        if (t.u.s.p[i] == '_') continue;
        buf[k++] = t.u.s.p[i];
    }
    buf[k] = '\0';
    if (!k) return false;
    char *end;
    long long v = strtoll(buf, &end, base);
    if (*end || buf[0] == ' ') return false;
    *out = v;
    return true;
}

F(int) {
    jv def = param(c, 0, "default", jv_int(0)), base = param(c, 1, "base", jv_int(10));
    int64_t x;
    if (v.k == JV_UNDEF) return jr_undefined_error(c->r, c->line, v);
    if (v.k == JV_INT || v.k == JV_BOOL) { *out = jv_int(v.k == JV_BOOL ? v.u.b : v.u.i); return 0; }
    if (v.k == JV_FLOAT && isfinite(v.u.f) && fabs(v.u.f) < 9.2e18) { *out = jv_int((int64_t)v.u.f); return 0; }
    if (v.k == JV_STR) {
        if (parse_int(v, base.k == JV_INT ? (int)base.u.i : 10, &x)) { *out = jv_int(x); return 0; }
        char buf[80];
        jv t = jinja_strip(v, jv_none(), true, true);
        if (t.u.s.n < sizeof buf) {
            memcpy(buf, t.u.s.p, t.u.s.n);
            buf[t.u.s.n] = '\0';
            char *end;
            double d = strtod(buf, &end);
            if (t.u.s.n && !*end && isfinite(d) && fabs(d) < 9.2e18) { *out = jv_int((int64_t)d); return 0; }
        }
    }
    *out = def;
    return 0;
}

F(float) {
    jv def = param(c, 0, "default", jv_float(0.0));
    if (v.k == JV_UNDEF) return jr_undefined_error(c->r, c->line, v);
    if (jv_is_number(v)) { *out = jv_float(jv_as_double(v)); return 0; }
    if (v.k == JV_STR) {
        jv t = jinja_strip(v, jv_none(), true, true);
        char buf[80];
        if (t.u.s.n && t.u.s.n < sizeof buf) {
            memcpy(buf, t.u.s.p, t.u.s.n);
            buf[t.u.s.n] = '\0';
            char *end;
            double d = strtod(buf, &end);
            if (!*end) { *out = jv_float(d); return 0; }
        }
    }
    *out = def;
    return 0;
}

F(format) {
    if (to_str(c, v, &v)) return -1;
    if (c->n_kw && c->n_args) return jr_fail(c->r, c->line, "can't handle positional and keyword arguments at the same time");
    jv args;
    if (c->n_kw) {
        jv_dict *d = jv_dict_new(&c->r->arena, c->n_kw);
        if (!d) return jr_oom(c->r, c->line);
        for (size_t i = 0; i < c->n_kw; i++)
            jv_dict_set(&c->r->arena, d, jv_strn(c->kw_names[i], strlen(c->kw_names[i])), c->kw_vals[i]);
        args = (jv){.k = JV_DICT};
        args.u.d = d;
    } else {
        jv_list *l = jv_list_new(&c->r->arena, c->n_args);
        if (!l) return jr_oom(c->r, c->line);
        l->tuple = true;
        for (size_t i = 0; i < c->n_args; i++) l->v[l->n++] = c->args[i];
        args = listv(l);
    }
    return jr_percent_format(c->r, c->line, v, args, out);
}

F(indent) {
    jv w = param(c, 0, "width", jv_int(4)), first = param(c, 1, "first", jv_bool(false));
    jv blank = param(c, 2, "blank", jv_bool(false));
    if (to_str(c, v, &v)) return -1;
    jv ind;
    if (w.k == JV_STR) ind = w;
    else if (w.k == JV_INT || w.k == JV_BOOL) {
        int64_t k = w.k == JV_BOOL ? w.u.b : w.u.i;
        if (k > 10000) return jr_fail(c->r, c->line, "indent width too large");
        char *sp = jarena_alloc(&c->r->arena, (size_t)(k > 0 ? k : 0) + 1);
        if (!sp) return jr_oom(c->r, c->line);
        memset(sp, ' ', (size_t)(k > 0 ? k : 0));
        ind = jv_strn(sp, (size_t)(k > 0 ? k : 0));
    } else return jr_fail(c->r, c->line, "indent width must be an int or a string");
    /* jinja2: s += "\n"; lines = s.splitlines(); first line as is, others indented unless blank */
    jv lines;
    jv_method meth = {.self = v, .name = "splitlines"};
    char *withnl = jarena_alloc(&c->r->arena, v.u.s.n + 2);
    if (!withnl) return jr_oom(c->r, c->line);
    memcpy(withnl, v.u.s.p, v.u.s.n);
    withnl[v.u.s.n] = '\n';
    meth.self = jv_strn(withnl, v.u.s.n + 1);
    if (jr_call_method(c->r, c->line, &meth, NULL, 0, NULL, NULL, 0, &lines)) return -1;
    jbuf b = {.limit = c->r->max_output};
    const jv_list *l = lines.u.l;
    if (jv_truthy(first)) jbuf_put(&b, ind.u.s.p, ind.u.s.n);
    for (size_t i = 0; i < l->n; i++) {
        jv ln = l->v[i];
        if (i) {
            jbuf_put(&b, "\n", 1);
            if (jv_truthy(blank) || ln.u.s.n) jbuf_put(&b, ind.u.s.p, ind.u.s.n);
        }
        jbuf_put(&b, ln.u.s.p, ln.u.s.n);
    }
    if (b.failed) { jbuf_free(&b); return jr_oom(c->r, c->line); }
    *out = jr_string_from_buf(c->r, &b);
    return 0;
}

F(items) {
    if (v.k == JV_UNDEF) { *out = listv(jv_list_new(&c->r->arena, 0)); return 0; }
    if (v.k != JV_DICT) return jr_fail(c->r, c->line, "Can only get item pairs from a mapping.");
    return jinja_dict_items(c->r, c->line, v.u.d, out);
}

F(join) {
    jv sep = param(c, 0, "d", jv_strn("", 0)), attr = param(c, 1, "attribute", jv_none());
    jv_list *l;
    if (to_str(c, sep, &sep) || jr_iterate(c->r, c->line, v, &l)) return -1;
    jbuf b = {.limit = c->r->max_output};
    for (size_t i = 0; i < l->n; i++) {
        jv item = l->v[i];
        if (attr.k != JV_NONE && attr_path(c, item, attr, &item)) { jbuf_free(&b); return -1; }
        if (i) jbuf_put(&b, sep.u.s.p, sep.u.s.n);
        jv_write_str(&b, item);
    }
    if (b.failed) { jbuf_free(&b); return jr_oom(c->r, c->line); }
    *out = jr_string_from_buf(c->r, &b);
    return 0;
}

F(list) {
    jv_list *l, *copy;
    if (jr_iterate(c->r, c->line, v, &l)) return -1;
    copy = jv_list_new(&c->r->arena, l->n);
    if (!copy) return jr_oom(c->r, c->line);
    if (l->n) memcpy(copy->v, l->v, l->n * sizeof(jv));
    copy->n = l->n;
    *out = listv(copy);
    return 0;
}

static int test_by_name(const fctx *c, jv name, jv v, const jv *args, size_t n_args, bool *out) {
    if (name.k != JV_STR) return jr_fail(c->r, c->line, "test name must be a string");
    char *s = jarena_strndup(&c->r->arena, name.u.s.p, name.u.s.n);
    if (!s) return jr_oom(c->r, c->line);
    int id = jinja_test_id(s);
    if (id < 0) return jr_fail(c->r, c->line, "unknown test '%s'", s);
    return jr_apply_test(c->r, c->n, id, s, v, args, n_args, out);
}

/* select / reject / selectattr / rejectattr */
static int select_common(const fctx *c, jv v, bool attr, bool keep_if, jv *out) {
    jv_list *l, *res = jv_list_new(&c->r->arena, 0);
    if (!res || jr_iterate(c->r, c->line, v, &l)) return res ? -1 : jr_oom(c->r, c->line);
    size_t first_test = attr ? 1 : 0;
    jv attr_name = attr ? param(c, 0, NULL, jv_undef(NULL)) : jv_none();
    if (attr && attr_name.k == JV_UNDEF) return jr_fail(c->r, c->line, "selectattr/rejectattr need an attribute name");
    bool has_test = c->n_args > first_test;
    for (size_t i = 0; i < l->n; i++) {
        jv x = l->v[i];
        bool t;
        if (attr && attr_path(c, x, attr_name, &x)) return -1;
        if (has_test) {
            if (test_by_name(c, c->args[first_test], x, c->args + first_test + 1, c->n_args - first_test - 1, &t))
                return -1;
        } else {
            t = jv_truthy(x);
        }
        if (t == keep_if && !jv_list_push(&c->r->arena, res, l->v[i])) return jr_oom(c->r, c->line);
    }
    *out = listv(res);
    return 0;
}
F(select) { return select_common(c, v, false, true, out); }
F(reject) { return select_common(c, v, false, false, out); }
F(selectattr) { return select_common(c, v, true, true, out); }
F(rejectattr) { return select_common(c, v, true, false, out); }

F(map) {
    jv_list *l, *res;
    if (jr_iterate(c->r, c->line, v, &l)) return -1;
    res = jv_list_new(&c->r->arena, l->n);
    if (!res) return jr_oom(c->r, c->line);
    jv attr = param(c, c->n_args ? 99 : 0, "attribute", jv_undef(NULL));
    if (attr.k != JV_UNDEF) {
        jv def = param(c, 99, "default", jv_undef(NULL));
        for (size_t i = 0; i < l->n; i++) {
            jv x;
            if (attr_path(c, l->v[i], attr, &x)) return -1;
            res->v[res->n++] = x.k == JV_UNDEF && def.k != JV_UNDEF ? def : x;
        }
        *out = listv(res);
        return 0;
    }
    if (!c->n_args || c->args[0].k != JV_STR) return jr_fail(c->r, c->line, "map requires a filter name or attribute=");
    char *fname = jarena_strndup(&c->r->arena, c->args[0].u.s.p, c->args[0].u.s.n);
    if (!fname) return jr_oom(c->r, c->line);
    int id = jinja_filter_id(fname);
    if (id < 0) return jr_fail(c->r, c->line, "unknown filter '%s'", fname);
    jnode fake = *c->n;
    fake.id = id;
    fake.name = fname;
    for (size_t i = 0; i < l->n; i++)
        if (jr_apply_filter(c->r, &fake, l->v[i], c->args + 1, c->n_args - 1, c->kw_names, c->kw_vals, c->n_kw,
                            &res->v[res->n++]))
            return -1;
    *out = listv(res);
    return 0;
}

static int minmax(const fctx *c, jv v, bool want_max, jv *out) {
    jv cs = param(c, 0, "case_sensitive", jv_bool(false)), attr = param(c, 1, "attribute", jv_none());
    jv_list *l;
    if (jr_iterate(c->r, c->line, v, &l)) return -1;
    if (!l->n) {
        *out = jv_undef(jr_hint(c->r, "No aggregated item, sequence was empty."));
        return 0;
    }
    jv best = l->v[0], best_key = best;
    for (size_t i = 0; i < l->n; i++) {
        jv key = l->v[i];
        if (attr.k != JV_NONE && attr_path(c, key, attr, &key)) return -1;
        if (!jv_truthy(cs) && key.k == JV_STR && jinja_case(c->r, c->line, key, 'l', &key)) return -1;
        int cmp = 0;
        mx_error e;
        if (i && jv_compare(key, best_key, &cmp, &e)) return jr_fail(c->r, c->line, "%s", e.msg);
        if (i == 0 || (want_max ? cmp > 0 : cmp < 0)) {
            best = l->v[i];
            best_key = key;
        }
    }
    *out = best;
    return 0;
}
F(max) { return minmax(c, v, true, out); }
F(min) { return minmax(c, v, false, out); }

F(replace) {
    jv old = param(c, 0, "old", jv_undef(NULL)), new_ = param(c, 1, "new", jv_undef(NULL));
    jv count = param(c, 2, "count", jv_none());
    if (to_str(c, v, &v)) return -1;
    if (old.k != JV_STR && to_str(c, old, &old)) return -1;
    if (new_.k != JV_STR && to_str(c, new_, &new_)) return -1;
    return jinja_str_replace(c->r, c->line, v, old, new_, count.k == JV_INT ? count.u.i : -1, out);
}

F(reverse) {
    if (v.k == JV_STR) {
        jbuf b = {.limit = c->r->max_output};
        size_t n = v.u.s.n, end = n;
        while (end > 0) {
            size_t start = end - 1;
            while (start > 0 && ((unsigned char)v.u.s.p[start] & 0xC0) == 0x80) start--;
            jbuf_put(&b, v.u.s.p + start, end - start);
            end = start;
        }
        *out = jr_string_from_buf(c->r, &b);
        return 0;
    }
    jv_list *l, *res;
    if (jr_iterate(c->r, c->line, v, &l)) return -1;
    res = jv_list_new(&c->r->arena, l->n);
    if (!res) return jr_oom(c->r, c->line);
    for (size_t i = l->n; i > 0; i--) res->v[res->n++] = l->v[i - 1];
    *out = listv(res);
    return 0;
}

F(round) {
    jv prec = param(c, 0, "precision", jv_int(0)), method = param(c, 1, "method", jv_strn("common", 6));
    if (!jv_is_number(v)) return v.k == JV_UNDEF ? jr_undefined_error(c->r, c->line, v)
                                                 : jr_fail(c->r, c->line, "round: expected a number");
    double x = jv_as_double(v), scale = pow(10.0, prec.k == JV_INT ? (double)prec.u.i : 0.0);
    char m = method.k == JV_STR && method.u.s.n ? method.u.s.p[0] : 'c';
    bool common = !(m == 'f' || (m == 'c' && method.u.s.n == 4));
    if (common && v.k == JV_INT && (prec.k != JV_INT || prec.u.i >= 0)) { *out = v; return 0; }
    if (common && prec.k == JV_INT && prec.u.i >= 0 && prec.u.i <= 300 && isfinite(x)) {
        /* Python's round() rounds the exact binary value half-to-even; so does glibc's printf. */
        char buf[400];
        snprintf(buf, sizeof buf, "%.*f", (int)prec.u.i, x);
        *out = jv_float(strtod(buf, NULL));
        return 0;
    }
    double y = x * scale;
    y = m == 'f' ? floor(y) : !common ? ceil(y) : nearbyint(y);
    *out = jv_float(y / scale);
    return 0;
}

F(safe) {
    if (to_str(c, v, out)) return -1;
    out->safe = 1;
    return 0;
}

F(sort) {
    jv rev = param(c, 0, "reverse", jv_bool(false)), cs = param(c, 1, "case_sensitive", jv_bool(false));
    jv attr = param(c, 2, "attribute", jv_none());
    jv_list *l, *res;
    if (jr_iterate(c->r, c->line, v, &l)) return -1;
    jv *keys = jarena_alloc(&c->r->arena, (l->n + 1) * sizeof(jv));
    if (!keys) return jr_oom(c->r, c->line);
    for (size_t i = 0; i < l->n; i++) {
        keys[i] = l->v[i];
        if (attr.k != JV_NONE && attr_path(c, l->v[i], attr, &keys[i])) return -1;
    }
    if (sort_by(c, l, keys, jv_truthy(rev), jv_truthy(cs), &res)) return -1;
    *out = listv(res);
    return 0;
}

F(string) {
    if (v.k == JV_STR) { *out = v; return 0; }
    return to_str(c, v, out);
}

F(sum) {
    jv attr = param(c, 0, "attribute", jv_none()), acc = param(c, 1, "start", jv_int(0));
    jv_list *l;
    if (jr_iterate(c->r, c->line, v, &l)) return -1;
    for (size_t i = 0; i < l->n; i++) {
        jv x = l->v[i];
        if (attr.k != JV_NONE && attr_path(c, x, attr, &x)) return -1;
        if (x.k == JV_UNDEF) return jr_undefined_error(c->r, c->line, x);
        if (!jv_is_number(x) || !jv_is_number(acc))
            return jr_fail(c->r, c->line, "unsupported operand type(s) for +: '%s' and '%s'", jv_type_name(acc), jv_type_name(x));
        if (acc.k == JV_FLOAT || x.k == JV_FLOAT) acc = jv_float(jv_as_double(acc) + jv_as_double(x));
        else {
            int64_t s;
            if (__builtin_add_overflow(acc.k == JV_BOOL ? acc.u.b : acc.u.i, x.k == JV_BOOL ? x.u.b : x.u.i, &s))
                return jr_fail(c->r, c->line, "integer overflow");
            acc = jv_int(s);
        }
    }
    *out = acc;
    return 0;
}

F(tojson) {
    /* transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) */
    jv ea = param(c, 0, "ensure_ascii", jv_bool(false)), ind = param(c, 1, "indent", jv_none());
    jv seps = param(c, 2, "separators", jv_none()), sk = param(c, 3, "sort_keys", jv_bool(false));
    jjson_opts o = {.ensure_ascii = jv_truthy(ea), .sort_keys = jv_truthy(sk)};
    char spaces[64];
    if (ind.k == JV_INT || ind.k == JV_BOOL) {
        int64_t k = ind.k == JV_BOOL ? ind.u.b : ind.u.i;
        if (k > 63) return jr_fail(c->r, c->line, "tojson: indent too large");
        memset(spaces, ' ', (size_t)(k > 0 ? k : 0));
        spaces[k > 0 ? k : 0] = '\0';
        o.indent = spaces;
    } else if (ind.k == JV_STR) {
        o.indent = jarena_strndup(&c->r->arena, ind.u.s.p, ind.u.s.n);
        if (!o.indent) return jr_oom(c->r, c->line);
    } else if (ind.k != JV_NONE) {
        return jr_fail(c->r, c->line, "tojson: indent must be an int, a string or None");
    }
    o.item_sep = o.indent ? "," : ", ";
    o.key_sep = ": ";
    if (seps.k == JV_LIST && seps.u.l->n == 2 && seps.u.l->v[0].k == JV_STR && seps.u.l->v[1].k == JV_STR) {
        o.item_sep = jarena_strndup(&c->r->arena, seps.u.l->v[0].u.s.p, seps.u.l->v[0].u.s.n);
        o.key_sep = jarena_strndup(&c->r->arena, seps.u.l->v[1].u.s.p, seps.u.l->v[1].u.s.n);
        if (!o.item_sep || !o.key_sep) return jr_oom(c->r, c->line);
    } else if (seps.k != JV_NONE) {
        return jr_fail(c->r, c->line, "tojson: separators must be a pair of strings");
    }
    jbuf b = {.limit = c->r->max_output};
    mx_error e;
    if (jv_write_json(&b, v, &o, 0, &e)) {
        jbuf_free(&b);
        if (b.failed) return jr_fail(c->r, c->line, "tojson: output larger than the limit");
        return jr_fail(c->r, c->line, "%s", e.msg);
    }
    if (b.failed) { jbuf_free(&b); return jr_fail(c->r, c->line, "tojson: output larger than the limit"); }
    *out = jr_string_from_buf(c->r, &b);
    return 0;
}

F(trim) {
    jv chars = param(c, 0, "chars", jv_none());
    if (to_str(c, v, &v)) return -1;
    if (chars.k != JV_NONE && chars.k != JV_STR) return jr_fail(c->r, c->line, "trim: chars must be a string");
    *out = jinja_strip(v, chars, true, true);
    return 0;
}

F(unique) {
    jv cs = param(c, 0, "case_sensitive", jv_bool(false)), attr = param(c, 1, "attribute", jv_none());
    jv_list *l, *res, *seen;
    if (jr_iterate(c->r, c->line, v, &l)) return -1;
    res = jv_list_new(&c->r->arena, 0);
    seen = jv_list_new(&c->r->arena, 0);
    if (!res || !seen) return jr_oom(c->r, c->line);
    for (size_t i = 0; i < l->n; i++) {
        jv key = l->v[i];
        if (attr.k != JV_NONE && attr_path(c, key, attr, &key)) return -1;
        if (!jv_truthy(cs) && key.k == JV_STR && jinja_case(c->r, c->line, key, 'l', &key)) return -1;
        bool dup = false;
        if (jr_charge(c->r, c->line, seen->n + 1)) return -1;
        for (size_t k = 0; k < seen->n && !dup; k++) dup = jv_equal(seen->v[k], key);
        if (dup) continue;
        if (!jv_list_push(&c->r->arena, seen, key) || !jv_list_push(&c->r->arena, res, l->v[i]))
            return jr_oom(c->r, c->line);
    }
    *out = listv(res);
    return 0;
}

F(wordcount) {
    if (to_str(c, v, &v)) return -1;
    int64_t words = 0;
    bool in = false;
    size_t i = 0;
    while (i < v.u.s.n) {
        int32_t ch = ju8_next(v.u.s.p, v.u.s.n, &i);
        bool w = ch == '_' || (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch >= 0x80;
        if (w && !in) words++;
        in = w;
    }
    *out = jv_int(words);
    return 0;
}

typedef int (*filter_fn)(const fctx *, jv, jv *);
static const struct { const char *name; filter_fn fn; } k_filters[] = {
    {"abs", f_abs}, {"attr", f_attr}, {"batch", f_batch}, {"capitalize", f_capitalize}, {"center", f_center},
    {"count", f_length}, {"d", f_default}, {"default", f_default}, {"dictsort", f_dictsort}, {"e", f_escape},
    {"escape", f_escape}, {"first", f_first}, {"float", f_float}, {"forceescape", f_escape},
    {"format", f_format}, {"indent", f_indent}, {"int", f_int}, {"items", f_items}, {"join", f_join},
    {"last", f_last}, {"length", f_length}, {"list", f_list}, {"lower", f_lower}, {"map", f_map},
    {"max", f_max}, {"min", f_min}, {"reject", f_reject}, {"rejectattr", f_rejectattr},
    {"replace", f_replace}, {"reverse", f_reverse}, {"round", f_round}, {"safe", f_safe},
    {"select", f_select}, {"selectattr", f_selectattr}, {"sort", f_sort}, {"string", f_string},
    {"sum", f_sum}, {"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim}, {"unique", f_unique},
    {"upper", f_upper}, {"wordcount", f_wordcount},
};
#define N_FILTERS (int)(sizeof k_filters / sizeof k_filters[0])

int jinja_filter_id(const char *name) {
    for (int i = 0; i < N_FILTERS; i++)
        if (!strcmp(k_filters[i].name, name)) return i;
    return -1;
}

int jr_apply_filter(jrender *r, const jnode *n, jv arg, const jv *args, size_t n_args,
                    const char **kw_names, const jv *kw_vals, size_t n_kw, jv *out) {
    if (n->id < 0 || n->id >= N_FILTERS) return jr_fail(r, n->line, "unknown filter '%s'", n->name);
    fctx c = {r, n, n->line, args, n_args, kw_names, kw_vals, n_kw};
    out->safe = 0;
    if (jr_charge(r, n->line, jr_cost(arg))) return -1;
    return k_filters[n->id].fn(&c, arg, out);
}

