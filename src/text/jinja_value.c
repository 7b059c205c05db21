/* Jinja values: arena, buffers, containers, and Python semantics for truth, equality,
 * ordering, str()/repr() and json.dumps(). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja_internal.h"

/* ==== Arena ==== */
struct jarena_chunk {
    jarena_chunk *next;
    size_t size, used;
    max_align_t data[];
};

#define JARENA_CHUNK (64 * 1024)

void *jarena_alloc(jarena *a, size_t n) {
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    if (n == 0) n = sizeof(max_align_t);
    if (a->limit && a->used + n > a->limit) {
        a->failed = true;
        return NULL;
    }
    jarena_chunk *c = a->head;
    if (!c || c->size - c->used < n) {
        size_t size = n > JARENA_CHUNK / 2 ? n : JARENA_CHUNK;
        c = malloc(sizeof *c + size);
        if (!c) {
            a->failed = true;
            return NULL;
        }
        c->size = size;
        c->used = 0;
        /* A big one-off block goes behind the head so the head keeps serving small ones. */
        if (size > JARENA_CHUNK && a->head) {
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = a->head;
            a->head = c;
        }
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

void jarena_free(jarena *a) {
    jarena_chunk *c = a->head;
    while (c) {
        jarena_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->used = 0;
}

char *jarena_strndup(jarena *a, const char *s, size_t n) {
    char *p = jarena_alloc(a, n + 1);
    if (!p) return NULL;
    if (n) memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

/* ==== Byte buffer ==== */
bool jbuf_put(jbuf *b, const char *s, size_t n) {
    if (b->failed) return false;
    if (b->limit && b->n + n > b->limit) {
        b->failed = true;
        return false;
    }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = true;
            return false;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return true;
}

bool jbuf_puts(jbuf *b, const char *s) { return jbuf_put(b, s, strlen(s)); }

bool jbuf_printf(jbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return false;
    if ((size_t)n < sizeof tmp) return jbuf_put(b, tmp, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big) return false;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    bool ok = jbuf_put(b, big, (size_t)n);
    free(big);
    return ok;
}

void jbuf_free(jbuf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* ==== Containers ==== */
jv_list *jv_list_new(jarena *a, size_t cap) {
    jv_list *l = jarena_alloc(a, sizeof *l);
    if (!l) return NULL;
    if (cap) {
        l->v = jarena_alloc(a, cap * sizeof(jv));
        if (!l->v) return NULL;
        l->cap = cap;
    }
    return l;
}

bool jv_list_push(jarena *a, jv_list *l, jv v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jv *nv = jarena_alloc(a, cap * sizeof(jv));
        if (!nv) return false;
        if (l->n) memcpy(nv, l->v, l->n * sizeof(jv));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
    return true;
}

jv_dict *jv_dict_new(jarena *a, size_t cap) {
    jv_dict *d = jarena_alloc(a, sizeof *d);
    if (!d) return NULL;
    if (cap) {
        d->keys = jarena_alloc(a, cap * sizeof(jv));
        d->vals = jarena_alloc(a, cap * sizeof(jv));
        if (!d->keys || !d->vals) return NULL;
        d->cap = cap;
    }
    return d;
}

const jv *jv_dict_get(const jv_dict *d, jv key) {
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->keys[i], key)) return &d->vals[i];
    return NULL;
}

const jv *jv_dict_get_str(const jv_dict *d, const char *key) {
    size_t n = strlen(key);
    for (size_t i = 0; i < d->n; i++)
        if (d->keys[i].k == JV_STR && d->keys[i].u.s.n == n && !memcmp(d->keys[i].u.s.p, key, n))
            return &d->vals[i];
    return NULL;
}

bool jv_dict_set(jarena *a, jv_dict *d, jv key, jv val) {
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->keys[i], key)) {
            d->vals[i] = val;
            return true;
        }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        jv *nk = jarena_alloc(a, cap * sizeof(jv)), *nv = jarena_alloc(a, cap * sizeof(jv));
        if (!nk || !nv) return false;
        if (d->n) {
            memcpy(nk, d->keys, d->n * sizeof(jv));
            memcpy(nv, d->vals, d->n * sizeof(jv));
        }
        d->keys = nk;
        d->vals = nv;
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
    return true;
}

/* ==== Python semantics ==== */
const char *jv_type_name(jv v) {
    switch ((jv_kind)v.k) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v.u.l->tuple ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_MACRO: return "Macro";
    case JV_FUNC: return "function";
    case JV_METHOD: return "builtin_function_or_method";
    case JV_LOOP: return "LoopContext";
    }
    return "object";
}

bool jv_truthy(jv v) {
    switch ((jv_kind)v.k) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s.n != 0;
    case JV_LIST: return v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0;
    default: return true;
    }
}

bool jv_is_number(jv v) { return v.k == JV_INT || v.k == JV_FLOAT || v.k == JV_BOOL; }

double jv_as_double(jv v) {
    if (v.k == JV_INT) return (double)v.u.i;
    if (v.k == JV_BOOL) return v.u.b ? 1.0 : 0.0;
    return v.u.f;
}

static int64_t as_int(jv v) { return v.k == JV_BOOL ? (int64_t)v.u.b : v.u.i; }

bool jv_equal(jv a, jv b) {
    if (jv_is_number(a) && jv_is_number(b)) {
        if (a.k != JV_FLOAT && b.k != JV_FLOAT) return as_int(a) == as_int(b);
        return jv_as_double(a) == jv_as_double(b);
    }
    if (a.k != b.k) return false;
    switch ((jv_kind)a.k) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return a.u.s.n == b.u.s.n && !memcmp(a.u.s.p, b.u.s.p, a.u.s.n);
    case JV_LIST:
        if (a.u.l->tuple != b.u.l->tuple || a.u.l->n != b.u.l->n) return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jv_equal(a.u.l->v[i], b.u.l->v[i])) return false;
        return true;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            const jv *o = jv_dict_get(b.u.d, a.u.d->keys[i]);
            if (!o || !jv_equal(a.u.d->vals[i], *o)) return false;
        }
        return true;
    case JV_NS: return a.u.d == b.u.d;
    case JV_MACRO: return a.u.m == b.u.m;
    case JV_FUNC: return a.u.fn == b.u.fn;
    case JV_METHOD: return a.u.meth == b.u.meth;
    case JV_LOOP: return a.u.loop == b.u.loop;
    default: return false;
    }
}

int jv_compare(jv a, jv b, int *out, mx_error *err) {
    if (jv_is_number(a) && jv_is_number(b)) {
        if (a.k != JV_FLOAT && b.k != JV_FLOAT) {
            int64_t x = as_int(a), y = as_int(b);
            *out = x < y ? -1 : x > y;
        } else {
            double x = jv_as_double(a), y = jv_as_double(b);
            *out = x < y ? -1 : x > y; /* NaN compares as equal-ish: every relation false */
            if (isnan(x) || isnan(y)) *out = 2;
        }
        return 0;
    }
    if (a.k == JV_STR && b.k == JV_STR) {
        /* Byte order of UTF-8 is code point order. */
        size_t n = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        int c = n ? memcmp(a.u.s.p, b.u.s.p, n) : 0;
        *out = c < 0 ? -1 : c > 0 ? 1 : a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n;
        return 0;
    }
    if (a.k == JV_LIST && b.k == JV_LIST && a.u.l->tuple == b.u.l->tuple) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (jv_equal(a.u.l->v[i], b.u.l->v[i])) continue;
            return jv_compare(a.u.l->v[i], b.u.l->v[i], out, err);
        }
        *out = a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
        return 0;
    }
    return mx_fail(err, "'<' not supported between instances of '%s' and '%s'", jv_type_name(a),
                   jv_type_name(b));
}

/* ==== UTF-8 ==== */
int32_t ju8_next(const char *p, size_t n, size_t *pos) {
    const unsigned char *s = (const unsigned char *)p;
    size_t i = *pos;
    unsigned c = s[i];
    int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (i + (size_t)len > n) len = (int)(n - i);
    int32_t cp = len == 1 ? (int32_t)c : len == 2 ? (int32_t)(c & 0x1F) : len == 3 ? (int32_t)(c & 0x0F)
                                                                                     : (int32_t)(c & 0x07);
    for (int k = 1; k < len; k++) cp = (cp << 6) | (s[i + (size_t)k] & 0x3F);
    *pos = i + (size_t)len;
    return cp;
}

size_t ju8_len(const char *p, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)p[i] & 0xC0) != 0x80) c++;
    return c;
}

size_t ju8_offset(const char *p, size_t n, size_t cp) {
    size_t i = 0;
    while (cp > 0 && i < n) {
        i++;
        while (i < n && ((unsigned char)p[i] & 0xC0) == 0x80) i++;
        cp--;
    }
    return i;
}

bool ju8_is_space(int32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

/* ==== str() and repr() ==== */
void jv_format_float(double f, char out[40]) {
    if (isnan(f)) { strcpy(out, "nan"); return; }
    if (isinf(f)) { strcpy(out, f < 0 ? "-inf" : "inf"); return; }
    /* Shortest digits that round-trip, then Python's layout: exponent form when the decimal
     * exponent is < -4 or >= 16, else positional with at least one fractional digit. */
    char digits[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(digits, sizeof digits, "%.*e", prec - 1, f);
        if (strtod(digits, NULL) == f) break;
    }
    /* digits: [-]D[.DDD]e[+-]XX */
    const char *p = digits;
    bool neg = *p == '-';
    if (neg) p++;
    char mant[24];
    size_t m = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') mant[m++] = *p;
    mant[m] = '\0';
    int exp = atoi(p + 1);
    while (m > 1 && mant[m - 1] == '0') mant[--m] = '\0';
    char *o = out;
    if (neg) *o++ = '-';
    if (exp < -4 || exp >= 16) {
        *o++ = mant[0];
        if (m > 1) {
            *o++ = '.';
            memcpy(o, mant + 1, m - 1);
            o += m - 1;
        }
        sprintf(o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
        return;
    }
    if (exp < 0) {
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -exp - 1; i++) *o++ = '0';
        memcpy(o, mant, m);
        o += m;
    } else {
        for (int i = 0; i <= exp; i++) *o++ = (size_t)i < m ? mant[i] : '0';
        *o++ = '.';
        if ((size_t)exp + 1 < m) {
            memcpy(o, mant + exp + 1, m - (size_t)exp - 1);
            o += m - (size_t)exp - 1;
        } else {
            *o++ = '0';
        }
    }
    *o = '\0';
}

static bool write_str_repr(jbuf *b, const char *p, size_t n) {
    bool has_sq = memchr(p, '\'', n) != NULL, has_dq = memchr(p, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    if (!jbuf_put(b, &q, 1)) return false;
    size_t i = 0;
    while (i < n) {
        size_t start = i;
        int32_t c = ju8_next(p, n, &i);
        bool ok;
        if (c == q || c == '\\') {
            char e[2] = {'\\', (char)c};
            ok = jbuf_put(b, e, 2);
        } else if (c == '\n') ok = jbuf_puts(b, "\\n");
        else if (c == '\r') ok = jbuf_puts(b, "\\r");
        else if (c == '\t') ok = jbuf_puts(b, "\\t");
        else if (c < 0x20 || c == 0x7F) ok = jbuf_printf(b, "\\x%02x", (unsigned)c);
        else if (c >= 0x80 && c < 0xA0) ok = jbuf_printf(b, "\\x%02x", (unsigned)c);
        else ok = jbuf_put(b, p + start, i - start);
        if (!ok) return false;
    }
    return jbuf_put(b, &q, 1);
}

static bool write_seq(jbuf *b, const jv_list *l) {
    if (!jbuf_puts(b, l->tuple ? "(" : "[")) return false;
    for (size_t i = 0; i < l->n; i++) {
        if (i && !jbuf_puts(b, ", ")) return false;
        if (!jv_write_repr(b, l->v[i])) return false;
    }
    if (l->tuple && l->n == 1 && !jbuf_puts(b, ",")) return false;
    return jbuf_puts(b, l->tuple ? ")" : "]");
}

static bool write_dict(jbuf *b, const jv_dict *d) {
    if (!jbuf_puts(b, "{")) return false;
    for (size_t i = 0; i < d->n; i++) {
        if (i && !jbuf_puts(b, ", ")) return false;
        if (!jv_write_repr(b, d->keys[i]) || !jbuf_puts(b, ": ") || !jv_write_repr(b, d->vals[i]))
            return false;
    }
    return jbuf_puts(b, "}");
}

bool jv_write_repr(jbuf *b, jv v) {
    if (v.k == JV_STR) return write_str_repr(b, v.u.s.p, v.u.s.n);
    if (v.k == JV_UNDEF) return jbuf_puts(b, "Undefined");
    return jv_write_str(b, v);
}

bool jv_write_str(jbuf *b, jv v) {
    char tmp[40];
    switch ((jv_kind)v.k) {
    case JV_UNDEF: return true;
    case JV_NONE: return jbuf_puts(b, "None");
    case JV_BOOL: return jbuf_puts(b, v.u.b ? "True" : "False");
    case JV_INT: return jbuf_printf(b, "%lld", (long long)v.u.i);
    case JV_FLOAT: jv_format_float(v.u.f, tmp); return jbuf_puts(b, tmp);
    case JV_STR: return jbuf_put(b, v.u.s.p, v.u.s.n);
    case JV_LIST: return write_seq(b, v.u.l);
    case JV_DICT: return write_dict(b, v.u.d);
    case JV_NS: return jbuf_puts(b, "<Namespace ") && write_dict(b, v.u.d) && jbuf_puts(b, ">");
    case JV_MACRO: return jbuf_puts(b, "<Macro>");
    case JV_FUNC: return jbuf_puts(b, "<function>");
    case JV_METHOD: return jbuf_puts(b, "<built-in method>");
    case JV_LOOP: return jbuf_puts(b, "<LoopContext>");
    }
    return true;
}

/* ==== json.dumps ==== */
static bool json_put_string(jbuf *b, const char *p, size_t n, bool ascii) {
    if (!jbuf_puts(b, "\"")) return false;
    size_t i = 0;
    while (i < n) {
        size_t start = i;
        int32_t c = ju8_next(p, n, &i);
        bool ok;
        switch (c) {
        case '"': ok = jbuf_puts(b, "\\\""); break;
        case '\\': ok = jbuf_puts(b, "\\\\"); break;
        case '\n': ok = jbuf_puts(b, "\\n"); break;
        case '\r': ok = jbuf_puts(b, "\\r"); break;
        case '\t': ok = jbuf_puts(b, "\\t"); break;
        case '\b': ok = jbuf_puts(b, "\\b"); break;
        case '\f': ok = jbuf_puts(b, "\\f"); break;
        default:
            if (c < 0x20 || (ascii && c >= 0x7F)) {
                if (c >= 0x10000) {
                    int32_t v = c - 0x10000;
                    ok = jbuf_printf(b, "\\u%04x\\u%04x", (unsigned)(0xD800 | (v >> 10)),
                                     (unsigned)(0xDC00 | (v & 0x3FF)));
                } else {
                    ok = jbuf_printf(b, "\\u%04x", (unsigned)c);
                }
            } else {
                ok = jbuf_put(b, p + start, i - start);
            }
        }
        if (!ok) return false;
    }
    return jbuf_puts(b, "\"");
}

static bool json_newline(jbuf *b, const jjson_opts *o, int depth) {
    if (!jbuf_puts(b, "\n")) return false;
    for (int i = 0; i < depth; i++)
        if (!jbuf_puts(b, o->indent)) return false;
    return true;
}

/* sort_keys: indices of d's keys in string order (all keys must be strings, as json.dumps
 * with sort_keys requires comparable keys). */
static int cmp_keys(const void *x, const void *y, void *ctx) {
    const jv *keys = ctx;
    int out = 0;
    jv_compare(keys[*(const size_t *)x], keys[*(const size_t *)y], &out, NULL);
    return out;
}

int jv_write_json(jbuf *b, jv v, const jjson_opts *o, int depth, mx_error *err) {
    char tmp[40];
    if (depth > 256) return mx_fail(err, "tojson: value nested too deeply");
    switch ((jv_kind)v.k) {
    case JV_NONE: return jbuf_puts(b, "null") ? 0 : -1;
    case JV_BOOL: return jbuf_puts(b, v.u.b ? "true" : "false") ? 0 : -1;
    case JV_INT: return jbuf_printf(b, "%lld", (long long)v.u.i) ? 0 : -1;
    case JV_FLOAT:
        if (isnan(v.u.f)) return jbuf_puts(b, "NaN") ? 0 : -1;
        if (isinf(v.u.f)) return jbuf_puts(b, v.u.f < 0 ? "-Infinity" : "Infinity") ? 0 : -1;
        jv_format_float(v.u.f, tmp);
        return jbuf_puts(b, tmp) ? 0 : -1;
    case JV_STR: return json_put_string(b, v.u.s.p, v.u.s.n, o->ensure_ascii) ? 0 : -1;
    case JV_LIST: {
        const jv_list *l = v.u.l;
        if (!l->n) return jbuf_puts(b, "[]") ? 0 : -1;
        if (!jbuf_puts(b, "[")) return -1;
        for (size_t i = 0; i < l->n; i++) {
            if (i && !jbuf_puts(b, o->item_sep)) return -1;
            if (o->indent && !json_newline(b, o, depth + 1)) return -1;
            if (jv_write_json(b, l->v[i], o, depth + 1, err)) return -1;
        }
        if (o->indent && !json_newline(b, o, depth)) return -1;
        return jbuf_puts(b, "]") ? 0 : -1;
    }
    case JV_DICT: {
        const jv_dict *d = v.u.d;
        if (!d->n) return jbuf_puts(b, "{}") ? 0 : -1;
        size_t *order = malloc(d->n * sizeof *order);
        if (!order) return mx_fail(err, "out of memory");
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        if (o->sort_keys) {
            for (size_t i = 0; i < d->n; i++)
                if (d->keys[i].k != JV_STR) {
                    free(order);
                    return mx_fail(err, "tojson: sort_keys needs string keys");
                }
            qsort_r(order, d->n, sizeof *order, cmp_keys, d->keys);
        }
        int rc = jbuf_puts(b, "{") ? 0 : -1;
        for (size_t j = 0; j < d->n && !rc; j++) {
            size_t i = order[j];
            jv key = d->keys[i];
            if (j && !jbuf_puts(b, o->item_sep)) { rc = -1; break; }
            if (o->indent && !json_newline(b, o, depth + 1)) { rc = -1; break; }
            /* json.dumps turns scalar keys into strings: 1 -> "1", True -> "true", None -> "null". */
            if (key.k == JV_STR) {
                rc = json_put_string(b, key.u.s.p, key.u.s.n, o->ensure_ascii) ? 0 : -1;
            } else if (key.k == JV_INT || key.k == JV_FLOAT || key.k == JV_BOOL || key.k == JV_NONE) {
                jbuf kb = {0};
                if (jv_write_json(&kb, key, o, depth + 1, err)) { jbuf_free(&kb); rc = -1; break; }
                rc = kb.failed ? -1 : json_put_string(b, kb.p ? kb.p : "", kb.n, false) ? 0 : -1;
                jbuf_free(&kb);
            } else {
                rc = mx_fail(err, "tojson: keys must be str, int, float, bool or None, not %s",
                             jv_type_name(key));
            }
            if (rc) break;
            if (!jbuf_puts(b, o->key_sep)) { rc = -1; break; }
            rc = jv_write_json(b, d->vals[i], o, depth + 1, err);
        }
        free(order);
        if (rc) return -1;
        if (o->indent && !json_newline(b, o, depth)) return -1;
        return jbuf_puts(b, "}") ? 0 : -1;
    }
    default:
        return mx_fail(err, "tojson: Object of type %s is not JSON serializable", jv_type_name(v));
    }
}

/* ==== From jansson ==== */
jv jv_from_json(jarena *a, const json_t *j) {
    switch (json_typeof(j)) {
    case JSON_NULL: return jv_none();
    case JSON_TRUE: return jv_bool(true);
    case JSON_FALSE: return jv_bool(false);
    case JSON_INTEGER: return jv_int((int64_t)json_integer_value(j));
    case JSON_REAL: return jv_float(json_real_value(j));
    case JSON_STRING: return jv_strn(json_string_value(j), json_string_length(j));
    case JSON_ARRAY: {
        jv_list *l = jv_list_new(a, json_array_size(j));
        if (!l) return jv_none();
        for (size_t i = 0; i < json_array_size(j); i++) l->v[l->n++] = jv_from_json(a, json_array_get(j, i));
        jv v = {.k = JV_LIST};
        v.u.l = l;
        return v;
    }
    case JSON_OBJECT: {
        jv_dict *d = jv_dict_new(a, json_object_size(j));
        if (!d) return jv_none();
        const char *key;
        json_t *val;
        /* jansson keeps insertion order, which is what Python's json.load gives the template. */
        json_object_foreach((json_t *)j, key, val) {
            if (d->n == d->cap) break;
            d->keys[d->n] = jv_strn(key, strlen(key));
            d->vals[d->n] = jv_from_json(a, val);
            d->n++;
        }
        jv v = {.k = JV_DICT};
        v.u.d = d;
        return v;
    }
    }
    return jv_none();
}
