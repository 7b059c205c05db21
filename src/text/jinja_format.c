/* Python printf-style formatting: "%s and %d" % (a, b), "%(name)s" % mapping, and the
 * `format` filter that uses it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja_internal.h"

/* Pads `body` (already signed/prefixed where the sign goes first) to width. zero_from: byte index
 * in body after which zero padding goes (after sign / 0x prefix), or SIZE_MAX for spaces. */
static void pad_put(jbuf *b, const char *body, size_t n, int64_t width, bool left, size_t zero_from) {
    int64_t len = (int64_t)ju8_len(body, n);
    int64_t pad = width > len ? width - len : 0;
    if (left) {
        jbuf_put(b, body, n);
        for (int64_t i = 0; i < pad; i++) jbuf_put(b, " ", 1);
    } else if (zero_from != SIZE_MAX) {
        jbuf_put(b, body, zero_from);
        for (int64_t i = 0; i < pad; i++) jbuf_put(b, "0", 1);
        jbuf_put(b, body + zero_from, n - zero_from);
    } else {
        for (int64_t i = 0; i < pad; i++) jbuf_put(b, " ", 1);
        jbuf_put(b, body, n);
    }
}

static int format_int(jrender *r, int line, jbuf *b, jv v, char conv, const char *flags, int64_t width,
                      int64_t prec) {
    int64_t x;
    if (v.k == JV_INT) x = v.u.i;
    else if (v.k == JV_BOOL) x = v.u.b;
    else if (v.k == JV_FLOAT) {
        if (!isfinite(v.u.f)) return jr_fail(r, line, "cannot convert float %s to integer", isnan(v.u.f) ? "NaN" : "infinity");
        if (v.u.f >= 9.2e18 || v.u.f <= -9.2e18) return jr_fail(r, line, "integer overflow in %% format");
        x = (int64_t)v.u.f;
    } else {
        if (v.k == JV_UNDEF) return jr_undefined_error(r, line, v);
        return jr_fail(r, line, "%%%c format: a real number is required, not %s", conv, jv_type_name(v));
    }
    bool neg = x < 0;
    uint64_t u = neg ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
    char digits[80];
    int base = conv == 'x' || conv == 'X' ? 16 : conv == 'o' ? 8 : 10;
    const char *set = conv == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
    int nd = 0;
    do {
        digits[nd++] = set[u % (uint64_t)base];
        u /= (uint64_t)base;
    } while (u);
    char body[160];
    size_t k = 0;
    if (neg) body[k++] = '-';
    else if (strchr(flags, '+')) body[k++] = '+';
    else if (strchr(flags, ' ')) body[k++] = ' ';
    if (strchr(flags, '#') && base != 10) {
        body[k++] = '0';
        body[k++] = conv == 'o' ? 'o' : conv;
    }
    size_t zero_from = k;
    for (int64_t i = nd; i < prec && i < 64; i++) body[k++] = '0';
    while (nd) body[k++] = digits[--nd];
    bool left = strchr(flags, '-') != NULL;
    pad_put(b, body, k, width, left, strchr(flags, '0') && !left ? zero_from : SIZE_MAX);
    return 0;
}

static int format_float(jrender *r, int line, jbuf *b, jv v, char conv, const char *flags, int64_t width,
                        int64_t prec) {
    if (!jv_is_number(v)) {
        if (v.k == JV_UNDEF) return jr_undefined_error(r, line, v);
        return jr_fail(r, line, "must be real number, not %s", jv_type_name(v));
    }
    double f = jv_as_double(v);
    char cfmt[32], out[512];
    snprintf(cfmt, sizeof cfmt, "%%%s%s%s.%d%c", strchr(flags, '+') ? "+" : strchr(flags, ' ') ? " " : "",
             strchr(flags, '#') ? "#" : "", "", (int)(prec < 0 ? 6 : prec > 100 ? 100 : prec), conv);
    int n = snprintf(out, sizeof out, cfmt, f);
    if (n < 0 || (size_t)n >= sizeof out) return jr_fail(r, line, "%% format result too long");
    size_t zero_from = (out[0] == '-' || out[0] == '+' || out[0] == ' ') ? 1 : 0;
    bool left = strchr(flags, '-') != NULL;
    pad_put(b, out, (size_t)n, width, left, strchr(flags, '0') && !left && isfinite(f) ? zero_from : SIZE_MAX);
    return 0;
}

int jr_percent_format(jrender *r, int line, jv fmt, jv args, jv *out) {
    const jv *list = &args;
    size_t n_list = 1, used = 0;
    const jv_dict *map = NULL;
    if (args.k == JV_LIST && args.u.l->tuple) {
        list = args.u.l->v;
        n_list = args.u.l->n;
    } else if (args.k == JV_DICT) {
        map = args.u.d;
    }
    jbuf b = {.limit = r->max_output};
    const char *p = fmt.u.s.p;
    size_t n = fmt.u.s.n;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        if (p[i] != '%') {
            jbuf_put(&b, p + i, 1);
            continue;
        }
        if (++i >= n) { rc = jr_fail(r, line, "incomplete format"); break; }
        jv v;
        bool have = false;
        if (p[i] == '(') {
            size_t e = i + 1;
            int depth = 1;
            while (e < n && depth) {
                if (p[e] == '(') depth++;
                else if (p[e] == ')') depth--;
                if (depth) e++;
            }
            if (e >= n) { rc = jr_fail(r, line, "incomplete format key"); break; }
            if (!map) { rc = jr_fail(r, line, "format requires a mapping"); break; }
            const jv *hit = jv_dict_get(map, jv_strn(p + i + 1, e - i - 1));
            if (!hit) { rc = jr_fail(r, line, "%% format: key '%.*s' not found", (int)(e - i - 1), p + i + 1); break; }
            v = *hit;
            have = true;
            i = e + 1;
        }
        char flags[8] = {0};
        int nf = 0;
        while (i < n && strchr("-+ 0#", p[i]) && p[i]) {
            if (nf < 7 && !strchr(flags, p[i])) flags[nf++] = p[i];
            i++;
        }
        int64_t width = 0, prec = -1;
        while (i < n && p[i] >= '0' && p[i] <= '9') {
            width = width * 10 + (p[i++] - '0');
            if (width > 100000) { rc = jr_fail(r, line, "%% format width too large"); break; }
        }
        if (rc) break;
        if (i < n && p[i] == '*') { rc = jr_fail(r, line, "'*' in %% formats is not supported"); break; }
        if (i < n && p[i] == '.') {
            prec = 0;
            i++;
            while (i < n && p[i] >= '0' && p[i] <= '9') {
                prec = prec * 10 + (p[i++] - '0');
                if (prec > 100000) { rc = jr_fail(r, line, "%% format precision too large"); break; }
            }
        }
        if (rc) break;
        while (i < n && (p[i] == 'h' || p[i] == 'l' || p[i] == 'L')) i++;
        if (i >= n) { rc = jr_fail(r, line, "incomplete format"); break; }
        char conv = p[i];
        if (conv == '%') {
            jbuf_put(&b, "%", 1);
            continue;
        }
        if (!have) {
            if (map) v = args; /* "%s" % {"a": 1} formats the dict itself */
            else if (used < n_list) v = list[used++];
            else { rc = jr_fail(r, line, "not enough arguments for format string"); break; }
        }
        bool left = strchr(flags, '-') != NULL;
        switch (conv) {
        case 's': case 'r': case 'a': {
            jbuf t = {.limit = r->max_output};
            if (conv == 's') jv_write_str(&t, v);
            else jv_write_repr(&t, v);
            size_t tn = t.n;
            if (prec >= 0) tn = ju8_offset(t.p ? t.p : "", t.n, (size_t)prec);
            pad_put(&b, t.p ? t.p : "", tn, width, left, SIZE_MAX);
            jbuf_free(&t);
            break;
        }
        case 'd': case 'i': case 'u': case 'x': case 'X': case 'o':
            rc = format_int(r, line, &b, v, conv == 'i' || conv == 'u' ? 'd' : conv, flags, width, prec);
            break;
        case 'f': case 'F': case 'e': case 'E': case 'g': case 'G':
            rc = format_float(r, line, &b, v, conv, flags, width, prec);
            break;
        case 'c': {
            char enc[8];
            size_t k = 0;
            if (v.k == JV_STR && ju8_len(v.u.s.p, v.u.s.n) == 1) {
                pad_put(&b, v.u.s.p, v.u.s.n, width, left, SIZE_MAX);
                break;
            }
            if (v.k != JV_INT || v.u.i < 0 || v.u.i > 0x10FFFF || (v.u.i >= 0xD800 && v.u.i <= 0xDFFF)) {
                rc = jr_fail(r, line, "%%c requires an int in range(0x110000) or a single character");
                break;
            }
            int32_t c = (int32_t)v.u.i;
            if (c < 0x80) enc[k++] = (char)c;
            else if (c < 0x800) { enc[k++] = (char)(0xC0 | (c >> 6)); enc[k++] = (char)(0x80 | (c & 0x3F)); }
            else if (c < 0x10000) { enc[k++] = (char)(0xE0 | (c >> 12)); enc[k++] = (char)(0x80 | ((c >> 6) & 0x3F)); enc[k++] = (char)(0x80 | (c & 0x3F)); }
            else { enc[k++] = (char)(0xF0 | (c >> 18)); enc[k++] = (char)(0x80 | ((c >> 12) & 0x3F)); enc[k++] = (char)(0x80 | ((c >> 6) & 0x3F)); enc[k++] = (char)(0x80 | (c & 0x3F)); }
            pad_put(&b, enc, k, width, left, SIZE_MAX);
            break;
        }
        default:
            rc = jr_fail(r, line, "unsupported format character '%c' (0x%x)", conv, (unsigned)(unsigned char)conv);
        }
    }
    if (!rc && !map && used < n_list)
        rc = jr_fail(r, line, "not all arguments converted during string formatting");
    if (!rc && b.failed) rc = jr_fail(r, line, "output larger than the limit (%zu bytes)", r->max_output);
    if (rc) {
        jbuf_free(&b);
        return -1;
    }
    *out = jr_string_from_buf(r, &b);
    return 0;
}
