/* JSON Schema converter, the leaves: the rule builder, GBNF literals, primitive rules, strings
 * (lengths, formats) and numbers (integer ranges, bounded decimals). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/json_schema_internal.h"

/* ==== Builder ==== */
grammar_builder *grammar_builder_new(void) { return calloc(1, sizeof(grammar_builder)); }

void grammar_builder_free(grammar_builder *b) {
    if (!b) return;
    for (int i = 0; i < b->n; i++) free(b->rules[i].name), free(b->rules[i].body);
    free(b->rules);
    free(b->text.p);
    free(b);
}

static gb_rule *gb_find(grammar_builder *b, const char *name) {
    for (int i = 0; i < b->n; i++)
        if (!strcmp(b->rules[i].name, name)) return &b->rules[i];
    return NULL;
}

bool gb_has(grammar_builder *b, const char *name) { return gb_find(b, name) != NULL; }

int gb_add(grammar_builder *b, const char *name, const char *body, const char **out, mx_error *err) {
    char cand[160];
    snprintf(cand, sizeof cand, "%s", name);
    for (int k = 1;; k++) {
        gb_rule *r = gb_find(b, cand);
        if (!r) break;
        if (!strcmp(r->body, body)) {
            *out = r->name;
            return 0;
        }
        snprintf(cand, sizeof cand, "%.140s-%d", name, k);
    }
    const size_t len = strlen(body);
    if (b->bytes + len + strlen(cand) > JS_MAX_TEXT)
        return mx_fail(err, "schema: the grammar it needs passes %u MB; simplify the schema", JS_MAX_TEXT >> 20);
    if (b->n == b->cap) {
        int cap = b->cap ? 2 * b->cap : 32;
        gb_rule *nr = realloc(b->rules, (size_t)cap * sizeof *nr);
        if (!nr) return mx_fail(err, "schema: out of memory");
        b->rules = nr, b->cap = cap;
    }
    gb_rule *r = &b->rules[b->n];
    r->name = strdup(cand);
    r->body = strdup(body);
    if (!r->name || !r->body) {
        free(r->name), free(r->body);
        return mx_fail(err, "schema: out of memory");
    }
    b->n++;
    b->bytes += len + strlen(cand) + 6;
    *out = r->name;
    return 0;
}

int grammar_builder_add_rule(grammar_builder *b, const char *name, const char *body, mx_error *err) {
    if (!*name) return mx_fail(err, "grammar builder: empty rule name");
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'))
            return mx_fail(err, "grammar builder: rule name '%s' has characters outside [A-Za-z0-9_-]", name);
    if (gb_find(b, name)) return mx_fail(err, "grammar builder: rule '%s' already exists", name);
    const char *got;
    return gb_add(b, name, body, &got, err);
}

const char *grammar_builder_text(grammar_builder *b) {
    b->text.n = 0, b->text.oom = false;
    for (int i = 0; i < b->n; i++) {
        gr_buf_puts(&b->text, b->rules[i].name);
        gr_buf_puts(&b->text, " ::= ");
        gr_buf_puts(&b->text, b->rules[i].body);
        gr_buf_putc(&b->text, '\n');
    }
    return b->text.oom ? NULL : b->text.p ? b->text.p : "";
}

int grammar_builder_compile(grammar_builder *b, const char *root, grammar **out, mx_error *err) {
    const char *t = grammar_builder_text(b);
    if (!t) return mx_fail(err, "grammar builder: out of memory");
    return grammar_compile_root(out, t, strlen(t), root, err);
}

/* ==== Literals ==== */
void gb_literal(gr_buf *o, const char *s, size_t n) {
    gr_buf_putc(o, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"') gr_buf_puts(o, "\\\"");
        else if (ch == '\\') gr_buf_puts(o, "\\\\");
        else if (ch == '\n') gr_buf_puts(o, "\\n");
        else if (ch == '\r') gr_buf_puts(o, "\\r");
        else if (ch == '\t') gr_buf_puts(o, "\\t");
        else if (ch < 0x20 || ch == 0x7F) gr_buf_printf(o, "\\x%02X", ch);
        else gr_buf_putc(o, (char)ch); /* UTF-8 passes through (the parser checks it) */
    }
    gr_buf_putc(o, '"');
}

char *grammar_gbnf_literal(const char *s, size_t n) {
    gr_buf o = {0};
    gb_literal(&o, s, n);
    char *r = gr_buf_strdup(&o);
    free(o.p);
    return r;
}

int jsc_json_literal(jsc *c, gr_buf *o, json_t *v) {
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!t) return jsc_fail(c, "a value could not be written as JSON");
    gb_literal(o, t, strlen(t));
    free(t);
    return 0;
}

void gb_class(gr_buf *o, const uint32_t *r, int n) {
    gr_buf_putc(o, '[');
    for (int i = 0; i < n; i++)
        for (int k = 0; k < (r[2 * i] == r[2 * i + 1] ? 1 : 2); k++) {
            if (k) gr_buf_putc(o, '-');
            uint32_t cp = r[2 * i + k];
            if ((cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) gr_buf_putc(o, (char)cp);
            else if (cp < 0x100) gr_buf_printf(o, "\\x%02X", (unsigned)cp);
            else if (cp < 0x10000) gr_buf_printf(o, "\\u%04X", (unsigned)cp);
            else gr_buf_printf(o, "\\U%08X", (unsigned)cp);
        }
    gr_buf_putc(o, ']');
}

void jsc_rule_name(char *dst, size_t cap, const char *hint) {
    size_t n = 0;
    bool dash = false;
    for (const char *p = hint; *p && n + 2 < cap; p++) {
        char ch = *p;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        if (ok) dst[n++] = ch, dash = false;
        else if (!dash && n) dst[n++] = '-', dash = true;
    }
    while (n && dst[n - 1] == '-') n--;
    if (!n) dst[n++] = 'x';
    dst[n] = 0;
}

/* ==== Primitive rules ====
 * Fixed names, so value / object / array can refer to each other; a name already taken by
 * another body (a hand-written rule of the builder) is an error naming it. */
typedef struct prim_def {
    const char *name;
    const char *deps[4];
    const char *body;
} prim_def;

static const prim_def k_prims[] = {
    {"space", {NULL}, "| \" \" | \"\\n\"{1,2} [ \\t]{0,20}"},
    /* one character of a JSON string; \u escapes never name a surrogate, so each is one code
     * point (what maxLength counts) */
    {"char", {NULL},
     "[^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\/bfnrt] | \"u\" ([0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] "
     "[0-9a-fA-F]{2}))"},
    {"string", {"char", "space"}, "\"\\\"\" char* \"\\\"\" space"},
    {"integral-part", {NULL}, "[0] | [1-9] [0-9]{0,14}"},
    {"decimal-part", {NULL}, "[0-9]{1,16}"},
    {"number", {"integral-part", "decimal-part", "space"},
     "(\"-\"? integral-part) (\".\" decimal-part)? ([eE] [-+]? [0-9]{1,2})? space"},
    {"integer", {"integral-part", "space"}, "(\"-\"? integral-part) space"},
    {"boolean", {"space"}, "(\"true\" | \"false\") space"},
    {"null", {"space"}, "\"null\" space"},
    {"value", {"string", "number", "boolean", "null"}, "object | array | string | number | boolean | null"},
    {"object", {"value"}, "\"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )? \"}\" space"},
    {"array", {"value"}, "\"[\" space ( value (\",\" space value)* )? \"]\" space"},
    {"leap-year", {NULL},
     "[0-9]{2} (\"0\" [48] | [2468] [048] | [13579] [26]) | ([02468] [048] | [13579] [26]) \"00\""},
    {"date", {"leap-year"},
     "[0-9]{4} \"-\" ( (\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01]) | (\"0\" [469] | "
     "\"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") | \"02-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]) ) | "
     "leap-year \"-02-29\""},
    {"time", {NULL},
     "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? (\"Z\" | [+-] ([01] "
     "[0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])"},
    {"date-time", {"date", "time"}, "date \"T\" time"},
    {"uuid", {NULL}, "[0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12}"},
    {"ipv4-octet", {NULL}, "\"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9]{2} | [1-9]? [0-9]"},
    {"ipv4", {"ipv4-octet"}, "ipv4-octet \".\" ipv4-octet \".\" ipv4-octet \".\" ipv4-octet"},
};

static int prim_add(jsc *c, const prim_def *d) {
    gb_rule *r = gb_find(c->b, d->name);
    if (r) return strcmp(r->body, d->body) ? jsc_fail(c, "the rule name '%s' is taken by another rule (the JSON "
                                                          "schema rules need it)", d->name)
                                           : 0;
    const char *got;
    return gb_add(c->b, d->name, d->body, &got, c->err);
}

static const prim_def *prim_find(const char *name) {
    for (size_t i = 0; i < sizeof k_prims / sizeof *k_prims; i++)
        if (!strcmp(k_prims[i].name, name)) return &k_prims[i];
    return NULL;
}

const char *jsc_prim(jsc *c, const char *name) {
    const prim_def *d = prim_find(name);
    if (!d) return jsc_fail(c, "internal: no primitive rule '%s'", name), NULL;
    if (gb_find(c->b, name)) return prim_add(c, d) ? NULL : d->name;
    if (!strcmp(name, "value") || !strcmp(name, "object") || !strcmp(name, "array")) {
        /* the cycle: all three at once, after what they use */
        static const char *all[] = {"string", "number", "boolean", "null", "value", "object", "array"};
        for (size_t i = 0; i < 4; i++)
            if (!jsc_prim(c, all[i])) return NULL;
        for (size_t i = 4; i < 7; i++)
            if (prim_add(c, prim_find(all[i]))) return NULL;
        return d->name;
    }
    for (int k = 0; k < 4 && d->deps[k]; k++)
        if (!jsc_prim(c, d->deps[k])) return NULL;
    return prim_add(c, d) ? NULL : d->name;
}

/* ==== Strings ==== */
static bool get_count(jsc *c, json_t *s, const char *k, long *out, int *rc) {
    json_t *v = json_object_get(s, k);
    if (!v) return false;
    double x = json_is_number(v) ? json_number_value(v) : -1;
    if (!json_is_number(v) || x < 0 || x != floor(x) || x > GR_MAX_REPEAT)
        *rc = jsc_fail(c, "'%s' must be an integer in [0, %d]", k, GR_MAX_REPEAT);
    *out = (long)x;
    return true;
}

int jsc_string(jsc *c, json_t *s, const char *name, const char **out) {
    long lo = 0, hi = -1;
    int rc = 0;
    const bool has_lo = get_count(c, s, "minLength", &lo, &rc), has_hi = get_count(c, s, "maxLength", &hi, &rc);
    if (rc) return -1;
    if (has_hi && hi < lo) return jsc_fail(c, "maxLength %ld is below minLength %ld", hi, lo);
    json_t *pattern = json_object_get(s, "pattern"), *format = json_object_get(s, "format");
    if ((pattern || format) && (has_lo || has_hi))
        return jsc_fail(c, "'%s' together with minLength/maxLength is not supported", pattern ? "pattern" : "format");
    if (pattern && format) return jsc_fail(c, "'pattern' together with 'format' is not supported");
    const char *space = jsc_prim(c, "space");
    if (!space) return -1;
    gr_buf body = {0};
    if (pattern) {
        if (!json_is_string(pattern)) return jsc_fail(c, "'pattern' must be a string");
        gr_buf_puts(&body, "\"\\\"\" ");
        if (jsc_regex(c, json_string_value(pattern), &body)) return free(body.p), -1;
        gr_buf_printf(&body, " \"\\\"\" %s", space);
    } else if (format) {
        static const char *fmts[] = {"date", "time", "date-time", "uuid", "ipv4"};
        const char *f = json_is_string(format) ? json_string_value(format) : "";
        const char *rule = NULL;
        for (size_t i = 0; i < sizeof fmts / sizeof *fmts; i++)
            if (!strcmp(f, fmts[i]) && !(rule = jsc_prim(c, fmts[i]))) return -1;
        if (!rule)
            return jsc_fail(c, "format '%s' is not supported (supported: date, time, date-time, uuid, ipv4)", f);
        gr_buf_printf(&body, "\"\\\"\" %s \"\\\"\" %s", rule, space);
    } else {
        const char *ch = jsc_prim(c, "char");
        if (!ch) return -1;
        if (!has_lo && !has_hi) {
            *out = jsc_prim(c, "string");
            return *out ? 0 : -1;
        }
        if (has_hi) gr_buf_printf(&body, "\"\\\"\" %s{%ld,%ld} \"\\\"\" %s", ch, lo, hi, space);
        else gr_buf_printf(&body, "\"\\\"\" %s{%ld,} \"\\\"\" %s", ch, lo, space);
    }
    if (body.oom) return free(body.p), jsc_fail(c, "out of memory");
    int r = gb_add(c->b, name, body.p, out, c->err);
    free(body.p);
    return r;
}

/* ==== Integer ranges ==== */
/* Decimal digits of v into d (no leading zeros); returns the length. */
static int digits(uint64_t v, char *d) {
    char t[24];
    int n = 0;
    do t[n++] = (char)('0' + v % 10), v /= 10;
    while (v);
    for (int i = 0; i < n; i++) d[i] = t[n - 1 - i];
    d[n] = 0;
    return n;
}

/* Numbers whose n-digit strings lie in [A, B] (same length, A <= B). */
static void same_len(gr_buf *o, const char *A, const char *B, int n) {
    int p = 0;
    while (p < n && A[p] == B[p]) p++;
    if (p) gb_literal(o, A, (size_t)p);
    if (p == n) return;
    const int r = n - p - 1;
    bool a0 = true, b9 = true;
    for (int i = p + 1; i < n; i++) a0 &= A[i] == '0', b9 &= B[i] == '9';
    if (p) gr_buf_putc(o, ' ');
    gr_buf_putc(o, '(');
    bool first = true;
    char x = A[p], y = B[p];
    char lo_start = x, hi_end = y;
    if (!a0) { /* x followed by [A_rest, 99..9] */
        char nines[24];
        memset(nines, '9', (size_t)r), nines[r] = 0;
        gr_buf_printf(o, "\"%c\" ", x);
        same_len(o, A + p + 1, nines, r);
        first = false;
        lo_start = (char)(x + 1);
    }
    if (!b9) hi_end = (char)(y - 1);
    if (lo_start <= hi_end) {
        if (!first) gr_buf_puts(o, " | ");
        if (lo_start == hi_end) gr_buf_printf(o, "\"%c\"", lo_start);
        else gr_buf_printf(o, "[%c-%c]", lo_start, hi_end);
        if (r) gr_buf_printf(o, " [0-9]{%d}", r);
        first = false;
    }
    if (!b9) { /* y followed by [00..0, B_rest] */
        char zeros[24];
        memset(zeros, '0', (size_t)r), zeros[r] = 0;
        if (!first) gr_buf_puts(o, " | ");
        gr_buf_printf(o, "\"%c\" ", y);
        same_len(o, zeros, B + p + 1, r);
    }
    gr_buf_putc(o, ')');
}

/* Non-negative integers in [a, b] as decimal text, as alternatives appended with sep. */
static void pos_range(gr_buf *o, uint64_t a, uint64_t b, bool *first) {
    uint64_t p10 = 1;
    for (int len = 1; len <= 19 && a <= b; len++) {
        const uint64_t lo_l = len == 1 ? 0 : p10, hi_l = p10 * 10 - 1;
        p10 *= 10;
        if (b < lo_l || a > hi_l) continue;
        const uint64_t lo = a > lo_l ? a : lo_l, hi = b < hi_l ? b : hi_l;
        char A[24], B[24];
        digits(lo, A), digits(hi, B);
        if (!*first) gr_buf_puts(o, " | ");
        *first = false;
        same_len(o, A, B, len);
    }
}

/* Integers in [lo, hi] (|values| <= 2^53). */
static void int_range(gr_buf *o, int64_t lo, int64_t hi, bool *first) {
    if (lo > hi) return;
    if (hi >= 0) pos_range(o, (uint64_t)(lo > 0 ? lo : 0), (uint64_t)hi, first);
    if (lo < 0) {
        const int64_t a = hi < 0 ? -hi : 1, b = -lo;
        if (!*first) gr_buf_puts(o, " | ");
        *first = false;
        gr_buf_puts(o, "\"-\" (");
        bool f2 = true;
        pos_range(o, (uint64_t)a, (uint64_t)b, &f2);
        gr_buf_putc(o, ')');
    }
}

/* ==== Numbers ==== */
#define JS_INT_CAP 999999999999999LL /* 15 digits: an open side stops here (exact in a double) */
#define JS_FRAC_CAP 2147483647LL     /* integer part of a bounded decimal: k.dddddd stays
                                        strictly between k and k + 1 after JSON.parse */

/* A bound: *v and whether it is exclusive; draft-4 boolean exclusive* are refused. */
static int get_bound(jsc *c, json_t *s, const char *k, const char *xk, double *v, bool *excl, bool *has) {
    json_t *a = json_object_get(s, k), *x = json_object_get(s, xk);
    *has = false, *excl = false;
    if (x && json_is_boolean(x))
        return jsc_fail(c, "'%s' as a boolean (draft 4) is not supported; give the bound as a number", xk);
    if (a && !json_is_number(a)) return jsc_fail(c, "'%s' must be a number", k);
    if (x && !json_is_number(x)) return jsc_fail(c, "'%s' must be a number", xk);
    if (a) *v = json_number_value(a), *has = true;
    if (x) {
        const double xv = json_number_value(x);
        const bool lower = k[1] == 'i'; /* minimum */
        if (!*has || (lower ? xv >= *v : xv <= *v)) *v = xv, *excl = true;
        *has = true;
    }
    if (*has && !(fabs(*v) <= 9007199254740992.0))
        return jsc_fail(c, "'%s' %g is beyond +-2^53 (JSON numbers are doubles)", *excl ? xk : k, *v);
    return 0;
}

int jsc_number(jsc *c, json_t *s, bool integer, const char *name, const char **out) {
    double lo, hi;
    bool xlo, xhi, hlo, hhi;
    if (get_bound(c, s, "minimum", "exclusiveMinimum", &lo, &xlo, &hlo) ||
        get_bound(c, s, "maximum", "exclusiveMaximum", &hi, &xhi, &hhi))
        return -1;
    if (!hlo && !hhi) {
        *out = jsc_prim(c, integer ? "integer" : "number");
        return *out ? 0 : -1;
    }
    if (!integer && ((hlo && lo != floor(lo)) || (hhi && hi != floor(hi))))
        return jsc_fail(c, "a bound that is not an integer (%g) on type number is not supported", hlo && lo != floor(lo) ? lo : hi);
    /* integers in range */
    int64_t ilo = hlo ? (int64_t)(xlo && lo == floor(lo) ? lo + 1 : ceil(lo)) : INT64_MIN;
    int64_t ihi = hhi ? (int64_t)(xhi && hi == floor(hi) ? hi - 1 : floor(hi)) : INT64_MAX;
    if (!hlo) ilo = ihi < -JS_INT_CAP ? ihi : -JS_INT_CAP;
    if (!hhi) ihi = ilo > JS_INT_CAP ? ilo : JS_INT_CAP;
    const char *space = jsc_prim(c, "space");
    if (!space) return -1;
    gr_buf body = {0};
    bool first = true;
    gr_buf_putc(&body, '(');
    int_range(&body, ilo, ihi, &first);
    if (!integer) {
        /* k.f (f > 0 in at most 6 digits) lies strictly inside (k, k + 1): allowed when that
         * whole interval is in range, i.e. k in [lo, hi - 1] (bounds integers, either kind) */
        const int64_t blo = hlo ? (int64_t)lo : -JS_FRAC_CAP - 1, bhi = hhi ? (int64_t)hi : JS_FRAC_CAP + 1;
        int64_t plo = blo > 0 ? blo : 0, phi = bhi - 1 < JS_FRAC_CAP ? bhi - 1 : JS_FRAC_CAP;
        /* -k.f lies in (-(k + 1), -k): k in [-hi, -lo - 1] */
        int64_t nlo = -bhi > 0 ? -bhi : 0, nhi = -blo - 1 < JS_FRAC_CAP ? -blo - 1 : JS_FRAC_CAP;
        const char *frac = "\".\" [0-9]{0,5} [1-9]";
        if (plo <= phi) {
            if (!first) gr_buf_puts(&body, " | ");
            first = false;
            bool f2 = true;
            gr_buf_puts(&body, "(");
            pos_range(&body, (uint64_t)plo, (uint64_t)phi, &f2);
            gr_buf_printf(&body, ") %s", frac);
        }
        if (nlo <= nhi) {
            if (!first) gr_buf_puts(&body, " | ");
            first = false;
            bool f2 = true;
            gr_buf_puts(&body, "\"-\" (");
            pos_range(&body, (uint64_t)nlo, (uint64_t)nhi, &f2);
            gr_buf_printf(&body, ") %s", frac);
        }
    }
    if (first) {
        free(body.p);
        return jsc_fail(c, "no %s satisfies the minimum/maximum bounds", integer ? "integer" : "number");
    }
    gr_buf_printf(&body, ") %s", space);
    if (body.oom) return free(body.p), jsc_fail(c, "out of memory");
    int r = gb_add(c->b, name, body.p, out, c->err);
    free(body.p);
    return r;
}
