/* JSON Schema `pattern` -> GBNF. The pattern is an ECMAScript regular expression with the `u`
 * flag (what ajv compiles); the GBNF produced matches the JSON *encoding* of the strings the
 * pattern accepts: a `"` in the value is written \", a control character \u00XX, everything
 * else as itself. A pattern without ^ matches anywhere, so any characters may precede (and
 * without $, follow) the match, as JSON Schema says.
 *
 * Supported: literals, ., [...] [^...] with ranges, \d \D \w \W \s \S, \t \n \r \v \f \0, \xHH,
 * \uHHHH, \u{...}, escaped syntax characters, groups ( ) (?: ) (?<name> ), alternation, the
 * quantifiers * + ? {n} {n,} {n,m} (lazy forms alike: the same strings), ^ at the start and $
 * at the end. Refused with the construct named: lookaround, backreferences, \b \B, \p{...},
 * \cX, anchors elsewhere, and ^/$ with a top-level | (write ^(a|b)$). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/json_schema_internal.h"

typedef struct rx {
    jsc *c;
    const char *s;
    size_t n, i;
    int depth;
    const char *pattern;
} rx;

static int rx_fail(rx *r, const char *what) {
    return jsc_fail(r->c, "pattern '%.80s': %s (at offset %zu)", r->pattern, what, r->i);
}

/* ==== Code point sets (range pairs) ==== */
typedef struct cset {
    uint32_t *r;
    int n, cap;
} cset;

static void cs_add(cset *s, uint32_t lo, uint32_t hi) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        uint32_t *nr = realloc(s->r, (size_t)cap * 2 * sizeof *nr);
        if (!nr) return;
        s->r = nr, s->cap = cap;
    }
    s->r[2 * s->n] = lo, s->r[2 * s->n + 1] = hi;
    s->n++;
}

static int cmp_pair(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Sorted, merged, surrogates removed; complemented over all scalar values when neg. */
static void cs_norm(cset *s, bool neg) {
    if (s->n > 1) qsort(s->r, (size_t)s->n, 2 * sizeof *s->r, cmp_pair);
    int m = 0;
    for (int i = 0; i < s->n; i++) {
        if (m && s->r[2 * i] <= s->r[2 * m - 1] + 1) {
            if (s->r[2 * i + 1] > s->r[2 * m - 1]) s->r[2 * m - 1] = s->r[2 * i + 1];
        } else {
            s->r[2 * m] = s->r[2 * i], s->r[2 * m + 1] = s->r[2 * i + 1];
            m++;
        }
    }
    s->n = m;
    cset t = {0};
    if (neg) {
        uint32_t next = 0;
        for (int i = 0; i < s->n; i++) {
            if (s->r[2 * i] > next) cs_add(&t, next, s->r[2 * i] - 1);
            next = s->r[2 * i + 1] + 1;
        }
        if (next <= 0x10FFFF) cs_add(&t, next, 0x10FFFF);
    } else {
        for (int i = 0; i < s->n; i++) cs_add(&t, s->r[2 * i], s->r[2 * i + 1]);
    }
    cset u = {0};
    for (int i = 0; i < t.n; i++) {
        uint32_t lo = t.r[2 * i], hi = t.r[2 * i + 1];
        if (hi < 0xD800 || lo > 0xDFFF) { cs_add(&u, lo, hi); continue; }
        if (lo < 0xD800) cs_add(&u, lo, 0xD7FF);
        if (hi > 0xDFFF) cs_add(&u, 0xE000, hi);
    }
    free(t.r), free(s->r);
    *s = u;
}

static bool cs_has(const cset *s, uint32_t cp) {
    for (int i = 0; i < s->n; i++)
        if (cp >= s->r[2 * i] && cp <= s->r[2 * i + 1]) return true;
    return false;
}

/* The JSON encodings of a normalized set: raw characters as a class, then \" \\ and \u00XX. */
static void cs_emit(gr_buf *o, const cset *s) {
    cset raw = {0};
    for (int i = 0; i < s->n; i++) {
        uint32_t lo = s->r[2 * i], hi = s->r[2 * i + 1];
        for (uint32_t cut = lo; cut <= hi;) { /* drop 0x00-0x1F, '"', '\\' */
            uint32_t end = hi;
            if (cut < 0x20) { cut = 0x20; continue; }
            if (cut == '"' || cut == '\\') { cut++; continue; }
            if (cut < '"' && end >= '"') end = '"' - 1;
            else if (cut < '\\' && end >= '\\') end = '\\' - 1;
            cs_add(&raw, cut, end);
            if (end == 0x10FFFF) break;
            cut = end + 1;
        }
    }
    int alts = raw.n > 0;
    gr_buf tmp = {0};
    if (raw.n) gb_class(&tmp, raw.r, raw.n);
    if (cs_has(s, '"')) gr_buf_puts(&tmp, alts++ ? " | \"\\\\\\\"\"" : "\"\\\\\\\"\"");
    if (cs_has(s, '\\')) gr_buf_puts(&tmp, alts++ ? " | \"\\\\\\\\\"" : "\"\\\\\\\\\"");
    /* control characters: \u00XX in either case, and JSON's short forms where there is one */
    static const char shorts[][2] = {{'\b', 'b'}, {'\t', 't'}, {'\n', 'n'}, {'\f', 'f'}, {'\r', 'r'}};
    for (uint32_t cc = 0; cc < 0x20; cc++) {
        if (!cs_has(s, cc)) continue;
        const unsigned lo = cc & 15;
        gr_buf_printf(&tmp, "%s\"\\\\u00%u\"", alts++ ? " | " : "", (unsigned)(cc >> 4));
        if (lo < 10) gr_buf_printf(&tmp, " \"%u\"", lo);
        else gr_buf_printf(&tmp, " [%c%c]", 'a' + lo - 10, 'A' + lo - 10);
        for (size_t k = 0; k < sizeof shorts / sizeof *shorts; k++)
            if ((uint32_t)shorts[k][0] == cc) gr_buf_printf(&tmp, " | \"\\\\%c\"", shorts[k][1]), alts++;
    }
    if (alts > 1) gr_buf_putc(o, '(');
    gr_buf_put(o, tmp.p ? tmp.p : "", tmp.n);
    if (alts > 1) gr_buf_putc(o, ')');
    free(tmp.p), free(raw.r);
}

/* ==== Escapes and classes ==== */
static int peekc(const rx *r) { return r->i < r->n ? (unsigned char)r->s[r->i] : -1; }

static int hexv(int ch) {
    return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
}

static void add_class_escape(cset *s, int e) {
    cset t = {0};
    const int k = e | 0x20; /* d, w, s */
    if (k == 'd') cs_add(&t, '0', '9');
    else if (k == 'w') cs_add(&t, '0', '9'), cs_add(&t, 'A', 'Z'), cs_add(&t, '_', '_'), cs_add(&t, 'a', 'z');
    else { /* ECMAScript WhiteSpace and LineTerminator */
        static const uint32_t ws[][2] = {{9, 13}, {32, 32}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                                         {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
                                         {0xFEFF, 0xFEFF}};
        for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) cs_add(&t, ws[i][0], ws[i][1]);
    }
    cs_norm(&t, e != k); /* upper case: the complement */
    for (int i = 0; i < t.n; i++) cs_add(s, t.r[2 * i], t.r[2 * i + 1]);
    free(t.r);
}

/* After a backslash: a single code point (*cp), or a class escape (*cls = d/D/w/W/s/S). */
static int parse_escape(rx *r, bool in_class, uint32_t *cp, int *cls) {
    *cls = 0;
    int e = peekc(r);
    if (e < 0) return rx_fail(r, "a trailing backslash");
    r->i++;
    switch (e) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S': *cls = e; return 0;
    case 't': *cp = '\t'; return 0;
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 'v': *cp = '\v'; return 0;
    case 'f': *cp = '\f'; return 0;
    case '0':
        if (peekc(r) >= '0' && peekc(r) <= '9') return rx_fail(r, "octal escapes are not supported");
        *cp = 0;
        return 0;
    case 'b':
        if (in_class) { *cp = 8; return 0; }
        return rx_fail(r, "the word boundary \\b is not supported");
    case 'B': return rx_fail(r, "\\B is not supported");
    case 'c': return rx_fail(r, "control escapes \\cX are not supported");
    case 'p': case 'P': return rx_fail(r, "Unicode property escapes \\p{...} are not supported");
    case 'k': return rx_fail(r, "named backreferences are not supported");
    case 'x': {
        int a = hexv(peekc(r)), b = r->i + 1 < r->n ? hexv((unsigned char)r->s[r->i + 1]) : -1;
        if (a < 0 || b < 0) return rx_fail(r, "\\x needs two hex digits");
        r->i += 2;
        *cp = (uint32_t)(a * 16 + b);
        return 0;
    }
    case 'u': {
        uint32_t v = 0;
        if (peekc(r) == '{') {
            r->i++;
            int nd = 0;
            while (hexv(peekc(r)) >= 0 && nd < 7) v = v * 16 + (uint32_t)hexv(peekc(r)), r->i++, nd++;
            if (!nd || peekc(r) != '}' || v > 0x10FFFF) return rx_fail(r, "a bad \\u{...} escape");
            r->i++;
        } else {
            for (int k = 0; k < 4; k++) {
                if (hexv(peekc(r)) < 0) return rx_fail(r, "\\u needs four hex digits");
                v = v * 16 + (uint32_t)hexv(peekc(r)), r->i++;
            }
        }
        if (v >= 0xD800 && v <= 0xDFFF) return rx_fail(r, "escapes of UTF-16 surrogates are not supported");
        *cp = v;
        return 0;
    }
    default:
        if (e >= '1' && e <= '9') return rx_fail(r, "backreferences are not supported");
        if (strchr("^$\\.*+?()[]{}|/", e) || (in_class && e == '-')) {
            *cp = (uint32_t)e;
            return 0;
        }
        return rx_fail(r, "an unknown escape (only syntax characters may be escaped with the u flag)");
    }
}

/* One literal code point of the pattern (raw UTF-8). */
static int parse_raw(rx *r, uint32_t *cp) {
    int l = gr_utf8_decode((const uint8_t *)r->s + r->i, r->n - r->i, cp);
    if (l < 0) return rx_fail(r, "invalid UTF-8");
    r->i += (size_t)l;
    return 0;
}

static int parse_class(rx *r, cset *s) {
    r->i++; /* [ */
    bool neg = false;
    if (peekc(r) == '^') neg = true, r->i++;
    cset t = {0};
    while (1) {
        if (r->i >= r->n) return free(t.r), rx_fail(r, "an unterminated character class");
        if (peekc(r) == ']') break;
        uint32_t lo, hi;
        int cls = 0;
        if (peekc(r) == '\\') {
            r->i++;
            if (parse_escape(r, true, &lo, &cls)) return free(t.r), -1;
        } else if (parse_raw(r, &lo)) {
            return free(t.r), -1;
        }
        if (cls) {
            if (peekc(r) == '-' && r->i + 1 < r->n && r->s[r->i + 1] != ']')
                return free(t.r), rx_fail(r, "a range with a class escape as its end");
            add_class_escape(&t, cls);
            continue;
        }
        hi = lo;
        if (peekc(r) == '-' && r->i + 1 < r->n && r->s[r->i + 1] != ']') {
            r->i++;
            if (peekc(r) == '\\') {
                r->i++;
                if (parse_escape(r, true, &hi, &cls)) return free(t.r), -1;
                if (cls) return free(t.r), rx_fail(r, "a range with a class escape as its end");
            } else if (parse_raw(r, &hi)) {
                return free(t.r), -1;
            }
            if (hi < lo) return free(t.r), rx_fail(r, "a range out of order");
        }
        cs_add(&t, lo, hi);
    }
    r->i++;
    cs_norm(&t, neg);
    *s = t;
    return 0;
}

/* ==== Expressions ==== */
static int parse_alt(rx *r, gr_buf *o, int *n_alts);

static int parse_quant(rx *r, gr_buf *o) {
    int q = peekc(r);
    if (q == '*' || q == '+' || q == '?') {
        r->i++;
        gr_buf_putc(o, (char)q);
    } else if (q == '{') {
        size_t at = r->i++;
        long a = -1, b = -1;
        bool comma = false;
        while (peekc(r) >= '0' && peekc(r) <= '9' && a < GR_MAX_REPEAT + 1) a = (a < 0 ? 0 : a * 10) + (peekc(r) - '0'), r->i++;
        if (peekc(r) == ',') {
            comma = true, r->i++;
            while (peekc(r) >= '0' && peekc(r) <= '9' && b < GR_MAX_REPEAT + 1) b = (b < 0 ? 0 : b * 10) + (peekc(r) - '0'), r->i++;
        }
        if (a < 0 || peekc(r) != '}') {
            r->i = at;
            return rx_fail(r, "a lone '{' (escape it as \\{)");
        }
        r->i++;
        if (a > GR_MAX_REPEAT || b > GR_MAX_REPEAT) return rx_fail(r, "a repetition count above 100000");
        if (comma && b >= 0 && b < a) return rx_fail(r, "a repetition {n,m} with m < n");
        if (!comma) gr_buf_printf(o, "{%ld}", a);
        else if (b < 0) gr_buf_printf(o, "{%ld,}", a);
        else gr_buf_printf(o, "{%ld,%ld}", a, b);
    } else {
        return 0;
    }
    if (peekc(r) == '?') r->i++; /* lazy: the same strings */
    q = peekc(r);
    if (q == '*' || q == '+' || q == '?' || q == '{') return rx_fail(r, "a quantifier after a quantifier");
    return 0;
}

static int parse_seq(rx *r, gr_buf *o) {
    bool any = false;
    while (r->i < r->n) {
        int ch = peekc(r);
        if (ch == '|' || ch == ')') break;
        if (ch == '^') return rx_fail(r, "'^' is supported only at the start of the pattern");
        if (ch == '$') {
            if (r->i + 1 == r->n && r->depth == 0) break; /* the end anchor: the caller takes it */
            return rx_fail(r, "'$' is supported only at the end of the pattern");
        }
        if (ch == '*' || ch == '+' || ch == '?') return rx_fail(r, "a quantifier with nothing to repeat");
        if (ch == ']' || ch == '}') return rx_fail(r, "a lone ']' or '}' (escape it)");
        if (any) gr_buf_putc(o, ' ');
        any = true;
        if (ch == '(') {
            r->i++;
            if (peekc(r) == '?') {
                r->i++;
                int k = peekc(r);
                if (k == ':') r->i++;
                else if (k == '<' && r->i + 1 < r->n && r->s[r->i + 1] != '=' && r->s[r->i + 1] != '!') {
                    while (r->i < r->n && r->s[r->i] != '>') r->i++;
                    if (r->i >= r->n) return rx_fail(r, "an unterminated group name");
                    r->i++;
                } else if (k == '=' || k == '!' || k == '<') {
                    return rx_fail(r, "lookahead and lookbehind are not supported");
                } else {
                    return rx_fail(r, "an unknown group kind (?...)");
                }
            }
            if (++r->depth > 64) return rx_fail(r, "groups nested deeper than 64");
            gr_buf_putc(o, '(');
            int na;
            if (parse_alt(r, o, &na)) return -1;
            if (peekc(r) != ')') return rx_fail(r, "an unclosed group");
            r->i++, r->depth--;
            gr_buf_putc(o, ')');
        } else {
            cset s = {0};
            int rc = 0;
            if (ch == '[') {
                rc = parse_class(r, &s);
            } else if (ch == '.') {
                r->i++;
                cs_add(&s, '\n', '\n'), cs_add(&s, '\r', '\r'), cs_add(&s, 0x2028, 0x2029);
                cs_norm(&s, true);
            } else if (ch == '\\') {
                r->i++;
                uint32_t cp;
                int cls;
                if (!(rc = parse_escape(r, false, &cp, &cls))) {
                    if (cls) add_class_escape(&s, cls);
                    else cs_add(&s, cp, cp);
                    cs_norm(&s, false);
                }
            } else {
                uint32_t cp;
                if (!(rc = parse_raw(r, &cp))) cs_add(&s, cp, cp), cs_norm(&s, false);
            }
            if (!rc && !s.n) rc = rx_fail(r, "a character class that matches nothing");
            if (!rc) cs_emit(o, &s);
            free(s.r);
            if (rc) return -1;
        }
        if (parse_quant(r, o)) return -1;
    }
    if (!any) gr_buf_puts(o, "\"\"");
    return 0;
}

static int parse_alt(rx *r, gr_buf *o, int *n_alts) {
    *n_alts = 1;
    if (parse_seq(r, o)) return -1;
    while (peekc(r) == '|') {
        r->i++;
        gr_buf_puts(o, " | ");
        if (parse_seq(r, o)) return -1;
        (*n_alts)++;
    }
    return 0;
}

int jsc_regex(jsc *c, const char *pattern, gr_buf *out) {
    rx r = {.c = c, .s = pattern, .n = strlen(pattern), .pattern = pattern};
    const bool start = r.n && pattern[0] == '^';
    if (start) r.i = 1;
    gr_buf body = {0};
    int n_alts;
    if (parse_alt(&r, &body, &n_alts)) return free(body.p), -1;
    bool end = false;
    if (peekc(&r) == '$') end = true, r.i++;
    if (r.i < r.n) {
        free(body.p);
        return rx_fail(&r, peekc(&r) == ')' ? "an unmatched ')'" : "unexpected text");
    }
    if ((start || end) && n_alts > 1) {
        free(body.p);
        return jsc_fail(c, "pattern '%.80s': ^ or $ with a top-level | is not supported (write ^(a|b)$)", pattern);
    }
    const char *ch = start && end ? "" : jsc_prim(c, "char");
    if (!ch) return free(body.p), -1;
    if (!start) gr_buf_printf(out, "%s* ", ch);
    gr_buf_putc(out, '(');
    gr_buf_put(out, body.p ? body.p : "", body.n);
    gr_buf_putc(out, ')');
    if (!end) gr_buf_printf(out, " %s*", ch);
    free(body.p);
    return body.oom || out->oom ? jsc_fail(c, "out of memory") : 0;
}
