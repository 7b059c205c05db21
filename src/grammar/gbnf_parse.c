/* GBNF text -> AST. The syntax is llama.cpp's (grammars/README.md there): rules `name ::= ...`
 * one per line, alternatives `|`, groups, postfix `* + ? {m} {m,} {m,n} {,n}`, string literals
 * and character classes with escapes, `.`, `#` comments. Newlines end a rule except inside
 * parentheses and after `|`; as an extension a rule also continues on a line that starts with
 * `|` (llama.cpp refuses that layout, so no grammar it accepts changes meaning). Rule names
 * take [A-Za-z0-9_-] (llama.cpp: no `_`; a superset again). Every error names a line and
 * column. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_internal.h"

/* ==== Arena and source positions ==== */
void *ga_alloc(ga_grammar *g, size_t n) {
    n = (n + 15) & ~(size_t)15;
    ga_block *b = g->arena;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->next = g->arena, b->used = 0, b->cap = cap;
        g->arena = b;
    }
    void *p = (char *)(b + 1) + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

void ga_free(ga_grammar *g) {
    for (ga_block *b = g->arena, *n; b; b = n) {
        n = b->next;
        free(b);
    }
    free(g->rules);
    memset(g, 0, sizeof *g);
}

void ga_line_col(const ga_grammar *g, uint32_t pos, int *line, int *col) {
    int l = 1, c = 1;
    for (uint32_t i = 0; i < pos && i < g->src_len; i++) {
        if (g->src[i] == '\n') l++, c = 1;
        else if (((unsigned char)g->src[i] & 0xC0) != 0x80) c++; /* columns count characters */
    }
    *line = l, *col = c;
}

int ga_rule_find(const ga_grammar *g, const char *name) {
    for (int i = 0; i < g->n_rules; i++)
        if (!strcmp(g->rules[i].name, name)) return i;
    return -1;
}

/* ==== Parser state ==== */
typedef struct pctx {
    ga_grammar *g;
    const char *s;
    size_t n, i;
    int depth;
    mx_error *err;
} pctx;

static int perr(pctx *p, size_t pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int perr(pctx *p, size_t pos, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line, col;
    ga_line_col(p->g, (uint32_t)pos, &line, &col);
    return mx_fail(p->err, "grammar: line %d column %d: %s", line, col, msg);
}

static int peek(const pctx *p) { return p->i < p->n ? (unsigned char)p->s[p->i] : -1; }

/* A character for messages: printable ASCII as itself, else its code. */
static const char *show(int c, char *buf) {
    if (c < 0) snprintf(buf, 16, "end of input");
    else if (c > 0x20 && c < 0x7F) snprintf(buf, 16, "'%c'", c);
    else snprintf(buf, 16, "byte 0x%02X", c);
    return buf;
}

/* Spaces, tabs, CRs and comments; newlines too when nl_ok. */
static void skip_ws(pctx *p, bool nl_ok) {
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == ' ' || c == '\t' || c == '\r') p->i++;
        else if (c == '\n' && nl_ok) p->i++;
        else if (c == '#') {
            while (p->i < p->n && p->s[p->i] != '\n') p->i++;
        } else break;
    }
}

static bool is_name_char(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static ga_node *node_new(pctx *p, ga_kind k, size_t pos) {
    ga_node *n = ga_alloc(p->g, sizeof *n);
    if (!n) {
        mx_fail(p->err, "grammar: out of memory");
        return NULL;
    }
    n->kind = k;
    n->pos = (uint32_t)pos;
    return n;
}

/* ==== Rules table ==== */
static int rule_ref(pctx *p, const char *name, size_t len, size_t pos) {
    for (int i = 0; i < p->g->n_rules; i++)
        if (strlen(p->g->rules[i].name) == len && !memcmp(p->g->rules[i].name, name, len)) return i;
    ga_grammar *g = p->g;
    if (g->n_rules >= GR_MAX_RULES) return perr(p, pos, "more than %d rules", GR_MAX_RULES);
    if (g->n_rules == g->cap_rules) {
        int cap = g->cap_rules ? 2 * g->cap_rules : 32;
        ga_rule *r = realloc(g->rules, (size_t)cap * sizeof *r);
        if (!r) return mx_fail(p->err, "grammar: out of memory");
        g->rules = r, g->cap_rules = cap;
    }
    ga_rule *r = &g->rules[g->n_rules];
    memset(r, 0, sizeof *r);
    r->name = ga_alloc(g, len + 1);
    if (!r->name) return mx_fail(p->err, "grammar: out of memory");
    memcpy(r->name, name, len);
    r->ref_pos = (uint32_t)pos;
    return g->n_rules++;
}

/* ==== Characters and escapes ==== */
static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class (escape or raw UTF-8) -> code point. */
static int parse_char(pctx *p, uint32_t *cp) {
    const size_t at = p->i;
    char buf[16];
    if (p->i >= p->n) return perr(p, at, "unexpected end of input");
    if (p->s[p->i] != '\\') {
        int l = gr_utf8_decode((const uint8_t *)p->s + p->i, p->n - p->i, cp);
        if (l < 0) return perr(p, at, "invalid UTF-8");
        p->i += (size_t)l;
        return 0;
    }
    p->i++;
    int c = peek(p);
    p->i++;
    int digits = 0;
    switch (c) {
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    case '0': *cp = 0; return 0;
    case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': case '.':
        *cp = (uint32_t)c;
        return 0;
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    default: return perr(p, at, "unknown escape \\%s", c < 0 ? "(end of input)" : (show(c, buf), buf));
    }
    uint32_t v = 0;
    for (int k = 0; k < digits; k++) {
        int h = hexval(peek(p));
        if (h < 0) return perr(p, at, "\\%c needs %d hex digits", c, digits);
        v = v * 16 + (uint32_t)h;
        p->i++;
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return perr(p, at, "\\%c escape U+%04X is not a Unicode scalar value", c, (unsigned)v);
    *cp = v;
    return 0;
}

/* ==== Primaries ==== */
static ga_node *parse_literal(pctx *p) {
    const size_t at = p->i++;
    size_t cap = 16, n = 0;
    uint8_t *bytes = malloc(cap);
    if (!bytes) return mx_fail(p->err, "grammar: out of memory"), NULL;
    while (1) {
        if (p->i >= p->n) {
            free(bytes);
            return perr(p, at, "unterminated string literal"), NULL;
        }
        if (p->s[p->i] == '"') break;
        uint32_t cp;
        if (parse_char(p, &cp)) return free(bytes), NULL;
        if (n + 4 > cap) {
            cap *= 2;
            uint8_t *nb = realloc(bytes, cap);
            if (!nb) return free(bytes), mx_fail(p->err, "grammar: out of memory"), NULL;
            bytes = nb;
        }
        n += (size_t)gr_utf8_encode(cp, bytes + n);
    }
    p->i++;
    ga_node *lit = node_new(p, GA_LIT, at);
    if (lit && n) {
        lit->bytes = ga_alloc(p->g, n);
        if (!lit->bytes) lit = NULL, mx_fail(p->err, "grammar: out of memory");
        else memcpy(lit->bytes, bytes, n);
    }
    if (lit) lit->n = (int)n;
    free(bytes);
    return lit;
}

static int cmp_u32pair(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Sorts and merges ranges (pairs), complements them when neg, removes surrogates. Returns the
 * pair count written into out (room for n + 2 pairs). */
static int ranges_normalize(uint32_t *r, int n, bool neg, uint32_t *out) {
    qsort(r, (size_t)n, 2 * sizeof *r, cmp_u32pair);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m && r[2 * i] <= out[2 * m - 1] + 1) {
            if (r[2 * i + 1] > out[2 * m - 1]) out[2 * m - 1] = r[2 * i + 1];
        } else {
            out[2 * m] = r[2 * i], out[2 * m + 1] = r[2 * i + 1];
            m++;
        }
    }
    if (neg) {
        uint32_t *tmp = r; /* r has room for n pairs; the complement has at most m + 1 */
        int k = 0;
        uint32_t next = 0;
        for (int i = 0; i < m; i++) {
            if (out[2 * i] > next) tmp[2 * k] = next, tmp[2 * k + 1] = out[2 * i] - 1, k++;
            next = out[2 * i + 1] + 1;
        }
        if (next <= 0x10FFFF) tmp[2 * k] = next, tmp[2 * k + 1] = 0x10FFFF, k++;
        memcpy(out, tmp, (size_t)k * 2 * sizeof *out);
        m = k;
    }
    /* cut out U+D800..U+DFFF (not encodable in UTF-8) */
    int k = 0;
    uint32_t *res = malloc((size_t)(m + 1) * 2 * sizeof *res);
    if (!res) return -1;
    for (int i = 0; i < m; i++) {
        uint32_t lo = out[2 * i], hi = out[2 * i + 1];
        if (hi < 0xD800 || lo > 0xDFFF) { res[2 * k] = lo, res[2 * k + 1] = hi, k++; continue; }
        if (lo < 0xD800) res[2 * k] = lo, res[2 * k + 1] = 0xD7FF, k++;
        if (hi > 0xDFFF) res[2 * k] = 0xE000, res[2 * k + 1] = hi, k++;
    }
    memcpy(out, res, (size_t)k * 2 * sizeof *out);
    free(res);
    return k;
}

static ga_node *class_node(pctx *p, size_t at, uint32_t *r, int n, bool neg) {
    uint32_t *out = malloc((size_t)(n + 2) * 2 * sizeof *out);
    if (!out) return mx_fail(p->err, "grammar: out of memory"), NULL;
    int m = ranges_normalize(r, n, neg, out);
    if (m < 0) return free(out), mx_fail(p->err, "grammar: out of memory"), NULL;
    if (m == 0) return free(out), perr(p, at, "character class matches no character"), NULL;
    ga_node *c = node_new(p, GA_CLASS, at);
    if (c) {
        c->ranges = ga_alloc(p->g, (size_t)m * 2 * sizeof *c->ranges);
        if (!c->ranges) c = NULL, mx_fail(p->err, "grammar: out of memory");
        else memcpy(c->ranges, out, (size_t)m * 2 * sizeof *out), c->n = m;
    }
    free(out);
    return c;
}

static ga_node *parse_class(pctx *p) {
    const size_t at = p->i++;
    bool neg = false;
    if (peek(p) == '^') neg = true, p->i++;
    int n = 0, cap = 8;
    uint32_t *r = malloc((size_t)(cap + 2) * 2 * sizeof *r);
    if (!r) return mx_fail(p->err, "grammar: out of memory"), NULL;
    while (1) {
        if (p->i >= p->n) return free(r), perr(p, at, "unterminated character class"), NULL;
        if (p->s[p->i] == ']') break;
        uint32_t lo, hi;
        const size_t item = p->i;
        if (parse_char(p, &lo)) return free(r), NULL;
        hi = lo;
        if (peek(p) == '-' && p->i + 1 < p->n && p->s[p->i + 1] != ']') {
            p->i++;
            if (parse_char(p, &hi)) return free(r), NULL;
            if (hi < lo) return free(r), perr(p, item, "range end U+%04X is below its start U+%04X", hi, lo), NULL;
        }
        if (n == cap) {
            cap *= 2;
            uint32_t *nr = realloc(r, (size_t)(cap + 2) * 2 * sizeof *r);
            if (!nr) return free(r), mx_fail(p->err, "grammar: out of memory"), NULL;
            r = nr;
        }
        r[2 * n] = lo, r[2 * n + 1] = hi, n++;
    }
    p->i++;
    if (n == 0 && !neg) return free(r), perr(p, at, "empty character class"), NULL;
    ga_node *c = class_node(p, at, r, n, neg);
    free(r);
    return c;
}

/* ==== Expressions ==== */
static ga_node *parse_alternates(pctx *p, bool nested);

static int parse_uint(pctx *p, int *out) {
    const size_t at = p->i;
    long v = 0;
    if (peek(p) < '0' || peek(p) > '9') return perr(p, at, "expected a number");
    while (peek(p) >= '0' && peek(p) <= '9') {
        v = v * 10 + (peek(p) - '0');
        if (v > GR_MAX_REPEAT) return perr(p, at, "repetition count above %d", GR_MAX_REPEAT);
        p->i++;
    }
    *out = (int)v;
    return 0;
}

static ga_node *wrap_rep(pctx *p, ga_node *x, int min, int max, size_t at) {
    ga_node *r = node_new(p, GA_REP, at);
    if (!r) return NULL;
    r->kids = ga_alloc(p->g, sizeof *r->kids);
    if (!r->kids) return mx_fail(p->err, "grammar: out of memory"), NULL;
    r->kids[0] = x, r->n = 1, r->min = min, r->max = max;
    return r;
}

static ga_node *parse_postfix(pctx *p, ga_node *x) {
    while (1) {
        skip_ws(p, false);
        const size_t at = p->i;
        int c = peek(p);
        if (c == '*') p->i++, x = wrap_rep(p, x, 0, -1, at);
        else if (c == '+') p->i++, x = wrap_rep(p, x, 1, -1, at);
        else if (c == '?') p->i++, x = wrap_rep(p, x, 0, 1, at);
        else if (c == '{') {
            p->i++;
            skip_ws(p, false);
            int lo = 0, hi = -1;
            bool has_lo = false;
            if (peek(p) >= '0' && peek(p) <= '9') {
                if (parse_uint(p, &lo)) return NULL;
                has_lo = true;
            }
            skip_ws(p, false);
            if (peek(p) == ',') {
                p->i++;
                skip_ws(p, false);
                if (peek(p) >= '0' && peek(p) <= '9' && parse_uint(p, &hi)) return NULL;
                if (!has_lo && hi < 0) return perr(p, at, "repetition {,} needs a bound"), NULL;
            } else {
                if (!has_lo) return perr(p, at, "expected a repetition count after '{'"), NULL;
                hi = lo;
            }
            skip_ws(p, false);
            if (peek(p) != '}') return perr(p, p->i, "expected '}' to close the repetition"), NULL;
            p->i++;
            if (hi >= 0 && hi < lo) return perr(p, at, "repetition {%d,%d}: the maximum is below the minimum", lo, hi), NULL;
            x = wrap_rep(p, x, lo, hi, at);
        } else {
            return x;
        }
        if (!x) return NULL;
    }
}

static ga_node *parse_sequence(pctx *p, bool nested) {
    ga_node **items = NULL;
    int n = 0, cap = 0;
    const size_t at = p->i;
    while (1) {
        skip_ws(p, nested);
        const size_t pos = p->i;
        int c = peek(p);
        ga_node *x = NULL;
        if (c == '"') x = parse_literal(p);
        else if (c == '[') x = parse_class(p);
        else if (c == '.') {
            p->i++;
            uint32_t all[4] = {0, 0x10FFFF};
            x = class_node(p, pos, all, 1, false);
        } else if (c == '(') {
            if (++p->depth > GR_MAX_DEPTH) return free(items), perr(p, pos, "groups nested deeper than %d", GR_MAX_DEPTH), NULL;
            p->i++;
            skip_ws(p, true);
            x = parse_alternates(p, true);
            if (x) {
                skip_ws(p, true);
                if (peek(p) != ')') {
                    char b[16];
                    free(items);
                    return perr(p, p->i, "expected ')' to close the group, got %s", show(peek(p), b)), NULL;
                }
                p->i++;
            }
            p->depth--;
        } else if (is_name_char(c)) {
            size_t s0 = p->i;
            while (is_name_char(peek(p))) p->i++;
            size_t len = p->i - s0;
            size_t save = p->i;
            skip_ws(p, false);
            if (p->n - p->i >= 3 && !memcmp(p->s + p->i, "::=", 3))
                return free(items), perr(p, s0, "a rule definition must start on its own line"), NULL;
            p->i = save;
            int r = rule_ref(p, p->s + s0, len, s0);
            if (r < 0) return free(items), NULL;
            x = node_new(p, GA_REF, s0);
            if (x) x->rule = r;
        } else {
            break;
        }
        if (x) x = parse_postfix(p, x);
        if (!x) return free(items), NULL;
        if (n == cap) {
            cap = cap ? 2 * cap : 8;
            ga_node **ni = realloc(items, (size_t)cap * sizeof *ni);
            if (!ni) return free(items), mx_fail(p->err, "grammar: out of memory"), NULL;
            items = ni;
        }
        items[n++] = x;
    }
    if (n == 1) {
        ga_node *one = items[0];
        free(items);
        return one;
    }
    ga_node *s = node_new(p, GA_SEQ, at);
    if (s && n) {
        s->kids = ga_alloc(p->g, (size_t)n * sizeof *s->kids);
        if (!s->kids) s = NULL, mx_fail(p->err, "grammar: out of memory");
        else memcpy(s->kids, items, (size_t)n * sizeof *items);
    }
    if (s) s->n = n;
    free(items);
    return s;
}

static ga_node *parse_alternates(pctx *p, bool nested) {
    const size_t at = p->i;
    ga_node **alts = NULL;
    int n = 0, cap = 0;
    while (1) {
        ga_node *s = parse_sequence(p, nested);
        if (!s) return free(alts), NULL;
        if (n == cap) {
            cap = cap ? 2 * cap : 4;
            ga_node **na = realloc(alts, (size_t)cap * sizeof *na);
            if (!na) return free(alts), mx_fail(p->err, "grammar: out of memory"), NULL;
            alts = na;
        }
        alts[n++] = s;
        skip_ws(p, nested);
        if (peek(p) == '|') {
            p->i++;
            skip_ws(p, true);
            continue;
        }
        if (!nested) { /* extension: the next line starts with '|' */
            size_t save = p->i;
            skip_ws(p, true);
            if (peek(p) == '|') {
                p->i++;
                skip_ws(p, true);
                continue;
            }
            p->i = save;
        }
        break;
    }
    if (n == 1) {
        ga_node *one = alts[0];
        free(alts);
        return one;
    }
    ga_node *a = node_new(p, GA_ALT, at);
    if (a) {
        a->kids = ga_alloc(p->g, (size_t)n * sizeof *a->kids);
        if (!a->kids) a = NULL, mx_fail(p->err, "grammar: out of memory");
        else memcpy(a->kids, alts, (size_t)n * sizeof *alts), a->n = n;
    }
    free(alts);
    return a;
}

/* ==== Rules ==== */
static int parse_rule(pctx *p) {
    const size_t at = p->i;
    char b[16];
    if (!is_name_char(peek(p))) return perr(p, at, "expected a rule name, got %s", show(peek(p), b));
    while (is_name_char(peek(p))) p->i++;
    const size_t len = p->i - at;
    skip_ws(p, false);
    if (p->n - p->i < 3 || memcmp(p->s + p->i, "::=", 3))
        return perr(p, p->i, "expected '::=' after the rule name '%.*s'", (int)(len > 64 ? 64 : len), p->s + at);
    p->i += 3;
    skip_ws(p, true);
    int r = rule_ref(p, p->s + at, len, at);
    if (r < 0) return -1;
    if (p->g->rules[r].body)
        return perr(p, at, "rule '%s' is defined twice", p->g->rules[r].name);
    ga_node *body = parse_alternates(p, false);
    if (!body) return -1;
    skip_ws(p, false);
    if (p->i < p->n && p->s[p->i] != '\n')
        return perr(p, p->i, "unexpected %s in rule '%s'", show(peek(p), b), p->g->rules[r].name);
    p->g->rules[r].body = body;
    p->g->rules[r].def_pos = (uint32_t)at;
    return 0;
}

int gbnf_parse(ga_grammar *g, const char *src, size_t len, mx_error *err) {
    memset(g, 0, sizeof *g);
    g->src = src, g->src_len = len;
    pctx p = {.g = g, .s = src, .n = len, .err = err};
    if (memchr(src, 0, len)) {
        size_t z = (size_t)((const char *)memchr(src, 0, len) - src);
        return perr(&p, z, "the grammar text holds a NUL byte");
    }
    skip_ws(&p, true);
    while (p.i < p.n) {
        if (parse_rule(&p)) return -1;
        skip_ws(&p, true);
    }
    if (g->n_rules == 0) return mx_fail(err, "grammar: no rules (an empty grammar)");
    for (int i = 0; i < g->n_rules; i++)
        if (!g->rules[i].body) return perr(&p, g->rules[i].ref_pos, "undefined rule '%s'", g->rules[i].name);
    return 0;
}
