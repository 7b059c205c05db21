/* A small JSON scanner for the two big arrays of a tokenizer.json (model.vocab with ~10^5
 * entries and model.merges with ~10^5), read straight into the tokenizer's tables: a general
 * DOM (jansson) spends most of the load time building hash tables for them. Everything else
 * in the file is small and goes through jansson. Strict enough for the files `tokenizers`
 * writes; every malformed input is an error with its line and column, never a crash. */
#include <stdlib.h>
#include <string.h>

#include "text/tok_json.h"

#define MAX_DEPTH 64

static int fail_at(tk_jscan *s, const char *what) {
    int line = 1, col = 1;
    for (const char *q = s->begin; q < s->p && q < s->end; q++) {
        if (*q == '\n') {
            line++;
            col = 1;
        } else
            col++;
    }
    return mx_fail(s->err, "invalid JSON at line %d column %d: %s", line, col, what);
}

void tk_js_ws(tk_jscan *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t')) s->p++;
}

int tk_js_expect(tk_jscan *s, char c) {
    tk_js_ws(s);
    if (s->p >= s->end || *s->p != c) {
        char msg[32];
        snprintf(msg, sizeof msg, "expected '%c'", c);
        return fail_at(s, msg);
    }
    s->p++;
    return 0;
}

/* Peeks the next non-space char (0 at the end). */
char tk_js_peek(tk_jscan *s) {
    tk_js_ws(s);
    return s->p < s->end ? *s->p : 0;
}

static int hex4(const char *p, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        *v = *v * 16 + (uint32_t)d;
    }
    return 0;
}

int tk_js_string(tk_jscan *s, tk_buf *out) {
    out->n = 0;
    if (tk_js_expect(s, '"')) return -1;
    for (;;) {
        const char *q = s->p;
        while (q < s->end && *q != '"' && *q != '\\') q++;
        tk_buf_put(out, s->p, (size_t)(q - s->p));
        s->p = q;
        if (q >= s->end) return fail_at(s, "unterminated string");
        if (*q == '"') {
            s->p++;
            break;
        }
        if (q + 1 >= s->end) return fail_at(s, "unterminated string");
        char e = q[1];
        s->p = q + 2;
        switch (e) {
        case '"': tk_buf_putc(out, '"'); break;
        case '\\': tk_buf_putc(out, '\\'); break;
        case '/': tk_buf_putc(out, '/'); break;
        case 'b': tk_buf_putc(out, '\b'); break;
        case 'f': tk_buf_putc(out, '\f'); break;
        case 'n': tk_buf_putc(out, '\n'); break;
        case 'r': tk_buf_putc(out, '\r'); break;
        case 't': tk_buf_putc(out, '\t'); break;
        case 'u': {
            uint32_t cp;
            if (s->end - s->p < 4 || hex4(s->p, &cp)) return fail_at(s, "bad \\u escape");
            s->p += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) { /* surrogate pair */
                uint32_t lo;
                if (s->end - s->p < 6 || s->p[0] != '\\' || s->p[1] != 'u' || hex4(s->p + 2, &lo) || lo < 0xDC00 ||
                    lo > 0xDFFF)
                    return fail_at(s, "unpaired surrogate in \\u escape");
                s->p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF)
                return fail_at(s, "unpaired surrogate in \\u escape");
            char tmp[4];
            tk_buf_put(out, tmp, (size_t)tk_utf8_put(tmp, (int32_t)cp));
            break;
        }
        default: return fail_at(s, "bad escape in string");
        }
    }
    if (!tk_utf8_valid(out->p ? out->p : "", out->n)) return fail_at(s, "string is not valid UTF-8");
    return 0;
}

int tk_js_int(tk_jscan *s, int64_t *v) {
    tk_js_ws(s);
    const char *q = s->p;
    bool neg = q < s->end && *q == '-';
    if (neg) q++;
    int64_t x = 0;
    const char *d = q;
    while (q < s->end && *q >= '0' && *q <= '9') {
        if (x > (INT64_MAX - 9) / 10) return fail_at(s, "integer too large");
        x = x * 10 + (*q++ - '0');
    }
    if (q == d || (q < s->end && (*q == '.' || *q == 'e' || *q == 'E'))) return fail_at(s, "expected an integer");
    s->p = q;
    *v = neg ? -x : x;
    return 0;
}

static int skip(tk_jscan *s, int depth) {
    if (depth > MAX_DEPTH) return fail_at(s, "nesting too deep");
    char c = tk_js_peek(s);
    if (c == '"') {
        tk_buf tmp = {0};
        int rc = tk_js_string(s, &tmp);
        free(tmp.p);
        return rc;
    }
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        s->p++;
        if (tk_js_peek(s) == close) {
            s->p++;
            return 0;
        }
        for (;;) {
            if (c == '{') {
                if (tk_js_peek(s) != '"') return fail_at(s, "expected a key");
                if (skip(s, depth + 1) || tk_js_expect(s, ':')) return -1;
            }
            if (skip(s, depth + 1)) return -1;
            char n = tk_js_peek(s);
            if (n == ',') {
                s->p++;
                continue;
            }
            if (n == close) {
                s->p++;
                return 0;
            }
            return fail_at(s, c == '{' ? "expected ',' or '}'" : "expected ',' or ']'");
        }
    }
    /* literal or number */
    const char *q = s->p;
    while (q < s->end && (strchr("+-.0123456789eE", *q) || (*q >= 'a' && *q <= 'z'))) q++;
    if (q == s->p) return fail_at(s, "unexpected character");
    s->p = q;
    return 0;
}

int tk_js_skip(tk_jscan *s) { return skip(s, 0); }

int tk_js_next_member(tk_jscan *s, bool *first, tk_buf *key) {
    char c = tk_js_peek(s);
    if (*first) {
        *first = false;
        if (c == '}') {
            s->p++;
            return 0;
        }
    } else {
        if (c == '}') {
            s->p++;
            return 0;
        }
        if (c != ',') return fail_at(s, "expected ',' or '}'");
        s->p++;
    }
    if (tk_js_string(s, key) || tk_js_expect(s, ':')) return -1;
    return 1;
}

int tk_js_next_elem(tk_jscan *s, bool *first) {
    char c = tk_js_peek(s);
    if (c == ']') {
        s->p++;
        return 0;
    }
    if (!*first) {
        if (c != ',') return fail_at(s, "expected ',' or ']'");
        s->p++;
    }
    *first = false;
    return 1;
}
