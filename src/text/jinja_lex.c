/* Jinja lexer: template text -> data / tag / expression tokens.
 *
 * Follows Jinja2's lexer with trim_blocks=True and lstrip_blocks=True (what transformers uses):
 *   - "{%-", "{{-", "{#-" strip all whitespace before the tag; "-%}", "-}}", "-#}" all after it.
 *   - trim_blocks: one "\n" right after "%}" or "#}" is dropped ("+%}" keeps it).
 *   - lstrip_blocks: spaces/tabs between a line start and "{%"/"{#" are dropped ("{%+" keeps).
 *   - the end of a tag is only recognised while no (, [ or { is open.
 * The caller has already normalised newlines and dropped one trailing newline. */
#include <stdlib.h>
#include <string.h>

#include "text/jinja_internal.h"

typedef struct lexer {
    jarena *a;
    const char *s;
    size_t n, pos;
    int line;
    bool line_starting;
    jtok *toks;
    size_t n_toks, cap;
    mx_error *err;
} lexer;

static int lex_fail(lexer *L, const char *msg) {
    return mx_fail(L->err, "chat template line %d: %s", L->line, msg);
}

static int push(lexer *L, jtok t) {
    if (L->n_toks == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 64;
        jtok *nt = jarena_alloc(L->a, cap * sizeof *nt);
        if (!nt) return mx_fail(L->err, "chat template: out of memory while lexing");
        if (L->n_toks) memcpy(nt, L->toks, L->n_toks * sizeof *nt);
        L->toks = nt;
        L->cap = cap;
    }
    L->toks[L->n_toks++] = t;
    return 0;
}

static void count_lines(lexer *L, size_t from, size_t to) {
    for (size_t i = from; i < to; i++)
        if (L->s[i] == '\n') L->line++;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

/* Python str.rstrip() on a UTF-8 slice: returns the new length. */
static size_t rstrip_len(const char *p, size_t n) {
    size_t i = 0, keep = 0;
    while (i < n) {
        int32_t c = ju8_next(p, n, &i);
        if (!ju8_is_space(c)) keep = i;
    }
    return keep;
}

/* Emits data text [from, to) adjusted for the sign of the tag that follows it. */
static int emit_data(lexer *L, size_t from, size_t to, char sign, bool lstrip_ok) {
    size_t len = to - from;
    const char *p = L->s + from;
    if (sign == '-') {
        len = rstrip_len(p, len);
    } else if (sign != '+' && lstrip_ok) {
        size_t l_pos = 0;
        for (size_t i = len; i > 0; i--)
            if (p[i - 1] == '\n') { l_pos = i; break; }
        if (l_pos > 0 || L->line_starting) {
            bool only_ws = true;
            for (size_t i = l_pos; i < len; i++)
                if (p[i] != ' ' && p[i] != '\t') { only_ws = false; break; }
            if (only_ws) len = l_pos;
        }
    }
    int line = L->line;
    count_lines(L, from, to);
    if (!len) return 0;
    jtok t = {.kind = JT_DATA, .line = line, .p = p, .n = len};
    return push(L, t);
}

/* ==== String literals: Python's unicode-escape decoding of the quoted text ==== */
static bool put_cp(char *o, size_t *k, uint32_t cp) {
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    if (cp < 0x80) o[(*k)++] = (char)cp;
    else if (cp < 0x800) { o[(*k)++] = (char)(0xC0 | (cp >> 6)); o[(*k)++] = (char)(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) {
        o[(*k)++] = (char)(0xE0 | (cp >> 12)); o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        o[(*k)++] = (char)(0xF0 | (cp >> 18)); o[(*k)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    }
    return true;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int unescape(lexer *L, const char *p, size_t n, jtok *t) {
    /* Output is never longer than 2 + 10/4 of the input (a "\é" grows into "\\xe9"). */
    char *o = jarena_alloc(L->a, n * 3 + 1);
    if (!o) return mx_fail(L->err, "chat template: out of memory while lexing");
    size_t k = 0, i = 0;
    while (i < n) {
        if (p[i] != '\\' || i + 1 >= n) { o[k++] = p[i++]; continue; }
        char c = p[i + 1];
        if ((unsigned char)c >= 0x80) {
            /* Jinja first backslash-escapes non-ASCII text, so "\é" decodes to "\xe9". */
            size_t j = i + 1;
            int32_t cp = ju8_next(p, n, &j);
            char tmp[16];
            int m = cp < 0x100 ? snprintf(tmp, sizeof tmp, "\\x%02x", (unsigned)cp)
                    : cp < 0x10000 ? snprintf(tmp, sizeof tmp, "\\u%04x", (unsigned)cp)
                                   : snprintf(tmp, sizeof tmp, "\\U%08x", (unsigned)cp);
            o[k++] = '\\';
            memcpy(o + k, tmp + 1, (size_t)m - 1);
            k += (size_t)m - 1;
            i = j;
            continue;
        }
        i += 2;
        switch (c) {
        case '\n': break;
        case '\\': o[k++] = '\\'; break;
        case '\'': o[k++] = '\''; break;
        case '"': o[k++] = '"'; break;
        case 'a': o[k++] = '\a'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'n': o[k++] = '\n'; break;
        case 'r': o[k++] = '\r'; break;
        case 't': o[k++] = '\t'; break;
        case 'v': o[k++] = '\v'; break;
        case 'x': case 'u': case 'U': {
            int want = c == 'x' ? 2 : c == 'u' ? 4 : 8;
            uint32_t cp = 0; /* \UFFFFFFFF: 8 digits fill it (a signed int overflowed) */
            for (int d = 0; d < want; d++) {
                int h = i < n ? hexval(p[i]) : -1;
                if (h < 0) return lex_fail(L, "truncated escape sequence in string literal");
                cp = cp * 16 + (uint32_t)h;
                i++;
            }
            if (!put_cp(o, &k, cp)) return lex_fail(L, "invalid code point escape in string literal");
            break;
        }
        case 'N': return lex_fail(L, "\\N{...} escapes are not supported in string literals");
        default:
            if (c >= '0' && c <= '7') {
                uint32_t cp = (uint32_t)(c - '0');
                for (int d = 0; d < 2 && i < n && p[i] >= '0' && p[i] <= '7'; d++)
                    cp = cp * 8 + (uint32_t)(p[i++] - '0');
                put_cp(o, &k, cp);
            } else {
                o[k++] = '\\';
                o[k++] = c;
            }
        }
    }
    o[k] = '\0';
    t->p = o;
    t->n = k;
    return 0;
}

/* ==== Expression tokens inside {{ }} / {% %} ==== */
static const char *const k_ops2[] = {"//", "**", "==", "!=", "<=", ">="};
static const char k_ops1[] = "+-/*%~[](){}<>=.:|,;";

/* Lexes tokens until the closing tag. end = '}' for "}}", '%' for "%}". */
static int lex_tag(lexer *L, char end) {
    char stack[256];
    int depth = 0;
    for (;;) {
        const char *s = L->s;
        size_t pos = L->pos;
        if (pos >= L->n) return lex_fail(L, end == '}' ? "unexpected end of template, expected '}}'"
                                                       : "unexpected end of template, expected '%}'");
        /* End of tag, only while brackets are balanced. */
        if (depth == 0) {
            size_t q = pos;
            char sign = 0;
            if ((s[q] == '-' || (s[q] == '+' && end == '%')) && q + 2 < L->n && s[q + 1] == end &&
                s[q + 2] == '}')
                sign = s[q++];
            if (q + 1 < L->n && s[q] == end && s[q + 1] == '}') {
                q += 2;
                if (sign == '-') {
                    while (q < L->n && is_ws(s[q])) q++;
                } else if (end == '%' && sign != '+' && q < L->n && s[q] == '\n') {
                    q++;
                }
                jtok t = {.kind = end == '}' ? JT_VAR_END : JT_BLOCK_END, .line = L->line};
                if (push(L, t)) return -1;
                L->line_starting = s[q - 1] == '\n';
                count_lines(L, pos, q);
                L->pos = q;
                return 0;
            }
        }
        char c = s[pos];
        if (is_ws(c)) {
            if (c == '\n') L->line++;
            L->pos++;
            continue;
        }
        jtok t = {.line = L->line};
        if (is_digit(c)) {
            /* float: digits then .digits and/or e[+-]digits; not right after a '.' (x.0.1). */
            size_t q = pos;
            while (q < L->n && (is_digit(s[q]) || (s[q] == '_' && q + 1 < L->n && is_digit(s[q + 1])))) q++;
            size_t int_end = q;
            bool is_float = false;
            bool after_dot = pos > 0 && s[pos - 1] == '.';
            if (!after_dot && q + 1 < L->n && s[q] == '.' && is_digit(s[q + 1])) {
                q++;
                while (q < L->n && (is_digit(s[q]) || (s[q] == '_' && q + 1 < L->n && is_digit(s[q + 1])))) q++;
                is_float = true;
            }
            if (!after_dot && q < L->n && (s[q] == 'e' || s[q] == 'E')) {
                size_t r = q + 1;
                if (r < L->n && (s[r] == '+' || s[r] == '-')) r++;
                if (r < L->n && is_digit(s[r])) {
                    while (r < L->n && (is_digit(s[r]) || (s[r] == '_' && r + 1 < L->n && is_digit(s[r + 1])))) r++;
                    q = r;
                    is_float = true;
                }
            }
            char num[128];
            size_t k = 0;
            for (size_t i = pos; i < (is_float ? q : int_end) && k < sizeof num - 1; i++)
                if (s[i] != '_') num[k++] = s[i];
            num[k] = '\0';
            if (!is_float && !strcmp(num, "0") && int_end + 1 < L->n &&
                (s[int_end] == 'x' || s[int_end] == 'X') && hexval(s[int_end + 1]) >= 0) {
                /* 0x1f */
                uint64_t v = 0;
                q = int_end + 1;
                for (; q < L->n && (hexval(s[q]) >= 0 || s[q] == '_'); q++) {
                    if (s[q] == '_') continue;
                    if (v > (uint64_t)INT64_MAX / 16) return lex_fail(L, "integer literal too large");
                    v = v * 16 + (uint64_t)hexval(s[q]);
                }
                t.kind = JT_INT;
                t.i = (int64_t)v;
            } else if (is_float) {
                t.kind = JT_FLOAT;
                t.f = strtod(num, NULL);
            } else {
                unsigned long long v = strtoull(num, NULL, 10);
                if (k > 19 || v > (unsigned long long)INT64_MAX) return lex_fail(L, "integer literal too large");
                t.kind = JT_INT;
                t.i = (int64_t)v;
                q = int_end;
            }
            t.p = s + pos;
            t.n = q - pos;
            L->pos = q;
        } else if (is_name_start(c)) {
            size_t q = pos;
            while (q < L->n && is_name_char(s[q])) q++;
            t.kind = JT_NAME;
            t.p = s + pos;
            t.n = q - pos;
            L->pos = q;
        } else if (c == '\'' || c == '"') {
            size_t q = pos + 1;
            while (q < L->n && s[q] != c) q += s[q] == '\\' ? 2 : 1;
            if (q >= L->n) return lex_fail(L, "unterminated string literal");
            t.kind = JT_STRING;
            if (unescape(L, s + pos + 1, q - pos - 1, &t)) return -1;
            count_lines(L, pos, q);
            L->pos = q + 1;
        } else {
            size_t len = 0;
            for (size_t i = 0; i < sizeof k_ops2 / sizeof *k_ops2; i++)
                if (pos + 1 < L->n && s[pos] == k_ops2[i][0] && s[pos + 1] == k_ops2[i][1]) len = 2;
            if (!len && strchr(k_ops1, c) && c) len = 1;
            if (!len) {
                char msg[64];
                snprintf(msg, sizeof msg, "unexpected char '%c' in expression", c);
                return lex_fail(L, msg);
            }
            if (len == 1 && (c == '(' || c == '[' || c == '{')) {
                if (depth == (int)sizeof stack) return lex_fail(L, "brackets nested too deeply");
                stack[depth++] = c == '(' ? ')' : c == '[' ? ']' : '}';
            } else if (len == 1 && (c == ')' || c == ']' || c == '}')) {
                char msg[64];
                if (!depth) {
                    snprintf(msg, sizeof msg, "unexpected '%c'", c);
                    return lex_fail(L, msg);
                }
                if (stack[depth - 1] != c) {
                    snprintf(msg, sizeof msg, "unexpected '%c', expected '%c'", c, stack[depth - 1]);
                    return lex_fail(L, msg);
                }
                depth--;
            }
            t.kind = JT_OP;
            t.p = s + pos;
            t.n = len;
            L->pos = pos + len;
        }
        if (push(L, t)) return -1;
    }
}

/* ==== Root: data and tags ==== */
int jinja_lex(jarena *a, const char *src, size_t n, jtok **out, size_t *n_out, mx_error *err) {
    lexer L = {.a = a, .s = src, .n = n, .line = 1, .line_starting = true, .err = err};
    while (L.pos < n) {
        /* Next tag start. */
        size_t t = L.pos;
        const char *hit = NULL;
        while (t + 1 < n) {
            hit = memchr(src + t, '{', n - t - 1);
            if (!hit) break;
            t = (size_t)(hit - src);
            char c = src[t + 1];
            if (c == '{' || c == '%' || c == '#') break;
            t++;
            hit = NULL;
        }
        if (!hit) {
            if (emit_data(&L, L.pos, n, 0, false)) return -1;
            L.pos = n;
            break;
        }
        char kind = src[t + 1];
        size_t q = t + 2;
        char sign = 0;
        if (q < n && (src[q] == '-' || src[q] == '+')) sign = src[q++];
        if (kind == '#') {
            size_t e = q;
            while (e + 1 < n && !(src[e] == '#' && src[e + 1] == '}')) e++;
            if (e + 1 >= n) {
                count_lines(&L, L.pos, t);
                return lex_fail(&L, "missing end of comment tag");
            }
            if (emit_data(&L, L.pos, t, sign, true)) return -1;
            char esign = e > q && (src[e - 1] == '-' || src[e - 1] == '+') ? src[e - 1] : 0;
            size_t r = e + 2;
            if (esign == '-') while (r < n && is_ws(src[r])) r++;
            else if (esign != '+' && r < n && src[r] == '\n') r++;
            count_lines(&L, t, r);
            L.line_starting = src[r - 1] == '\n';
            L.pos = r;
            continue;
        }
        if (kind == '%') {
            /* {% raw %} ... {% endraw %}: the body is data, verbatim. */
            size_t r = q;
            while (r < n && is_ws(src[r])) r++;
            if (r + 3 <= n && !memcmp(src + r, "raw", 3) && (r + 3 == n || !is_name_char(src[r + 3]))) {
                size_t e = r + 3;
                while (e < n && is_ws(src[e])) e++;
                bool dash = e < n && src[e] == '-';
                if (dash) e++;
                if (e + 1 < n && src[e] == '%' && src[e + 1] == '}') {
                    if (emit_data(&L, L.pos, t, sign, true)) return -1;
                    e += 2;
                    if (dash) while (e < n && is_ws(src[e])) e++;
                    count_lines(&L, t, e);
                    L.line_starting = src[e - 1] == '\n';
                    /* Find {%[-+]? endraw [-+]?%} */
                    size_t b = e;
                    for (;; b++) {
                        if (b + 1 >= n) return lex_fail(&L, "missing end of raw directive");
                        if (src[b] != '{' || src[b + 1] != '%') continue;
                        size_t x = b + 2;
                        char rsign = 0;
                        if (x < n && (src[x] == '-' || src[x] == '+')) rsign = src[x++];
                        while (x < n && is_ws(src[x])) x++;
                        if (x + 6 > n || memcmp(src + x, "endraw", 6)) continue;
                        x += 6;
                        while (x < n && is_ws(src[x])) x++;
                        char esign = 0;
                        if (x < n && (src[x] == '-' || src[x] == '+')) esign = src[x++];
                        if (x + 1 >= n || src[x] != '%' || src[x + 1] != '}') continue;
                        x += 2;
                        if (esign == '-') while (x < n && is_ws(src[x])) x++;
                        else if (esign != '+' && x < n && src[x] == '\n') x++;
                        if (emit_data(&L, e, b, rsign, true)) return -1;
                        count_lines(&L, b, x);
                        L.line_starting = src[x - 1] == '\n';
                        L.pos = x;
                        break;
                    }
                    continue;
                }
            }
        }
        if (emit_data(&L, L.pos, t, sign, kind == '%')) return -1;
        jtok bt = {.kind = kind == '%' ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, .line = L.line};
        if (push(&L, bt)) return -1;
        L.pos = q;
        if (lex_tag(&L, kind == '%' ? '%' : '}')) return -1;
    }
    jtok eof = {.kind = JT_EOF, .line = L.line};
    if (push(&L, eof)) return -1;
    *out = L.toks;
    *n_out = L.n_toks;
    return 0;
}
