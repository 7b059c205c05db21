/* Helpers of the reply parser (srv_toolparse.c): buffers, literal and JSON-head matchers that
 * say "not yet" when the text ends early, a bracket scanner, and the conversions of the
 * non-JSON call syntaxes (Llama's Python keyword arguments, the XML parameter body) to JSON. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_toolparse.h"
#include "server/srv_toolparse_int.h"

/* ==== Buffers ==== */
void cp_put(cp_buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        if (cap < 64) cap = 64;
        char *p = realloc(b->p, cap);
        if (!p) return;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void cp_shift(cp_buf *b, size_t k) {
    if (k >= b->n) {
        b->n = 0;
        if (b->p) b->p[0] = 0;
        return;
    }
    memmove(b->p, b->p + k, b->n - k);
    b->n -= k;
    b->p[b->n] = 0;
}

void cp_free(cp_buf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

void cp_put_json_escaped(cp_buf *b, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        char esc[8];
        switch (c) {
        case '"': cp_put(b, "\\\"", 2); break;
        case '\\': cp_put(b, "\\\\", 2); break;
        case '\n': cp_put(b, "\\n", 2); break;
        case '\r': cp_put(b, "\\r", 2); break;
        case '\t': cp_put(b, "\\t", 2); break;
        default:
            if (c < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", c);
                cp_put(b, esc, 6);
            } else {
                cp_putc(b, (char)c);
            }
        }
    }
}

size_t srv_utf8_complete(const char *s, size_t n) {
    /* look back over at most 3 continuation bytes for the lead byte of the last character */
    size_t i = n, k = 0;
    while (i > 0 && k < 3 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) i--, k++;
    if (i == 0) return n;
    const unsigned char lead = (unsigned char)s[i - 1];
    size_t need = lead >= 0xF0 && lead < 0xF8 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (lead < 0xC0) return n;     /* ASCII, or a stray continuation run: nothing to wait for */
    if (k + 1 >= need) return n;   /* the last character is complete */
    return i - 1;                  /* it needs more bytes: stop before its lead byte */
}

/* ==== Literal and JSON-head matching ==== */
cp_match cp_lit(const char *s, size_t n, const char *lit) {
    size_t i = 0;
    for (; i < n && lit[i]; i++)
        if (s[i] != lit[i]) return CP_FAIL;
    if (i < n) return CP_FAIL; /* s is longer than the literal */
    return lit[i] ? CP_PARTIAL : CP_MATCH;
}

/* A cursor over text that may still grow: every step says ok (1), no (0), or "ran out" (-1). */
typedef struct cur {
    const char *s;
    size_t n, i;
} cur;

static int c_ws(cur *c) {
    while (c->i < c->n && cp_is_ws(c->s[c->i])) c->i++;
    return c->i < c->n ? 1 : -1;
}

static int c_lit(cur *c, const char *lit) {
    for (size_t k = 0; lit[k]; k++, c->i++) {
        if (c->i >= c->n) return -1;
        if (c->s[c->i] != lit[k]) return 0;
    }
    return 1;
}

/* either literal (they differ before either ends) */
static int c_alt(cur *c, const char *a, const char *b) {
    cur t = *c;
    int r = c_lit(&t, a);
    if (r != 0) {
        *c = t;
        return r;
    }
    return c_lit(c, b);
}

/* ws, lit, ws: the common "separator" step of the head */
static int c_sep(cur *c, const char *lit) {
    int r;
    if ((r = c_ws(c)) != 1) return r;
    if ((r = c_lit(c, lit)) != 1) return r;
    return 1;
}

cp_match cp_json_head(const char *s, size_t n, bool brace, size_t *name_off, size_t *name_len) {
    cur c = {s, n, 0};
    int r;
#define STEP(x)                                                                                 \
    do {                                                                                        \
        if ((r = (x)) != 1) return r < 0 ? CP_PARTIAL : CP_FAIL;                                \
    } while (0)
    if (brace) STEP(c_lit(&c, "{"));
    STEP(c_ws(&c));
    /* optional "type": "function", (Llama 3.x emits it at times) */
    if (c.s[c.i] == '"') {
        if (c.i + 1 >= c.n) return CP_PARTIAL;
        if (c.s[c.i + 1] == 't') {
            STEP(c_lit(&c, "\"type\""));
            STEP(c_sep(&c, ":"));
            STEP(c_sep(&c, "\"function\""));
            STEP(c_sep(&c, ","));
            STEP(c_ws(&c));
        }
    }
    STEP(c_lit(&c, "\"name\""));
    STEP(c_sep(&c, ":"));
    STEP(c_sep(&c, "\""));
    const size_t a = c.i;
    for (;; c.i++) {
        if (c.i >= c.n) return c.i - a > 256 ? CP_FAIL : CP_PARTIAL;
        const unsigned char ch = (unsigned char)c.s[c.i];
        if (ch == '"') break;
        if (ch == '\\' || ch < 0x20 || c.i - a >= 256) return CP_FAIL;
    }
    if (c.i == a) return CP_FAIL;
    *name_off = a;
    *name_len = c.i - a;
    c.i++;
    STEP(c_sep(&c, ","));
    STEP(c_ws(&c));
    STEP(c_alt(&c, "\"arguments\"", "\"parameters\""));
    STEP(c_sep(&c, ":"));
#undef STEP
    return CP_MATCH;
}

bool cp_scan_byte(cp_scan *s, char c) {
    if (s->in_str) {
        if (s->esc) s->esc = false;
        else if (c == '\\') s->esc = true;
        else if (c == '"') s->in_str = false;
        return false;
    }
    if (c == '"') s->in_str = true;
    else if (c == '{' || c == '[') s->depth++;
    else if (c == '}' || c == ']') return --s->depth == 0;
    return false;
}

/* ==== Conversions ==== */
char *cp_json_unquote(const char *s, size_t n, size_t *out_len) {
    json_t *v = json_loadb(s, n, JSON_DECODE_ANY, NULL);
    if (!json_is_string(v)) {
        json_decref(v);
        return NULL;
    }
    const size_t len = json_string_length(v);
    char *out = malloc(len + 1);
    if (out) {
        memcpy(out, json_string_value(v), len);
        out[len] = 0;
        *out_len = len;
    }
    json_decref(v);
    return out;
}

static char *dump(json_t *v) {
    char *s = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_decref(v);
    return s;
}

int cp_call_object(const char *s, size_t n, char **name, char **args) {
    json_t *o = json_loadb(s, n, 0, NULL);
    json_t *nm = json_object_get(o, "name"), *a = json_object_get(o, "arguments");
    if (!a) a = json_object_get(o, "parameters");
    if (!json_is_object(o) || !json_is_string(nm) || !json_string_length(nm) || !a) {
        json_decref(o);
        return -1;
    }
    *name = strdup(json_string_value(nm));
    *args = json_is_string(a) ? strdup(json_string_value(a)) : json_dumps(a, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(o);
    if (!*name || !*args) {
        free(*name);
        free(*args);
        return -1;
    }
    return 0;
}

/* One Python literal at s[*i..n): a quoted string, a number, True/False/None. */
static json_t *py_value(const char *s, size_t n, size_t *i) {
    size_t k = *i;
    if (k < n && (s[k] == '"' || s[k] == '\'')) {
        const char q = s[k++];
        cp_buf b = {0};
        for (; k < n && s[k] != q; k++) {
            if (s[k] == '\\' && k + 1 < n) {
                k++;
                const char e = s[k];
                cp_putc(&b, e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e);
            } else {
                cp_putc(&b, s[k]);
            }
        }
        if (k >= n) {
            cp_free(&b);
            return NULL;
        }
        *i = k + 1;
        json_t *v = json_stringn(b.p ? b.p : "", b.n);
        cp_free(&b);
        return v;
    }
    size_t e = k;
    while (e < n && s[e] != ',' && !cp_is_ws(s[e])) e++;
    if (e == k) return NULL;
    *i = e;
    if (e - k == 4 && !memcmp(s + k, "True", 4)) return json_true();
    if (e - k == 5 && !memcmp(s + k, "False", 5)) return json_false();
    if (e - k == 4 && !memcmp(s + k, "None", 4)) return json_null();
    json_t *num = json_loadb(s + k, e - k, JSON_DECODE_ANY, NULL);
    if (json_is_number(num)) return num;
    json_decref(num);
    return NULL;
}

char *cp_python_kwargs_json(const char *s, size_t n) {
    json_t *o = json_object();
    size_t i = 0;
    for (;;) {
        while (i < n && cp_is_ws(s[i])) i++;
        if (i >= n) break;
        const size_t a = i;
        while (i < n && (s[i] == '_' || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
                         (i > a && s[i] >= '0' && s[i] <= '9')))
            i++;
        const size_t klen = i - a;
        while (i < n && cp_is_ws(s[i])) i++;
        if (!klen || i >= n || s[i] != '=') goto bad;
        i++;
        while (i < n && cp_is_ws(s[i])) i++;
        json_t *v = py_value(s, n, &i);
        if (!v) goto bad;
        char key[128];
        if (klen >= sizeof key) {
            json_decref(v);
            goto bad;
        }
        memcpy(key, s + a, klen);
        key[klen] = 0;
        json_object_set_new(o, key, v);
        while (i < n && cp_is_ws(s[i])) i++;
        if (i < n && s[i] == ',') i++;
        else if (i < n) goto bad;
    }
    return dump(o);
bad:
    json_decref(o);
    return NULL;
}

char *cp_xml_value_json(const char *v, size_t n, const char *schema_type) {
    if (schema_type && strcmp(schema_type, "string")) {
        json_t *x = json_loadb(v, n, JSON_DECODE_ANY, NULL);
        if (x) return dump(x);
    }
    return dump(json_stringn(v, n));
}
