/* Tokenizer helpers: growable buffers, UTF-8, Unicode predicates, string map, PCRE2 spans. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include <xxhash.h>

#include "text/tok_internal.h"

/* ==== Buffers ==== */

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "mlxcel: out of memory (%zu bytes)\n", n);
        abort();
    }
    return q;
}

void tk_buf_reserve(tk_buf *b, size_t extra) {
    if (b->n + extra <= b->cap) return;
    size_t cap = b->cap ? b->cap * 2 : 64;
    while (cap < b->n + extra) cap *= 2;
    b->p = xrealloc(b->p, cap);
    b->cap = cap;
}

void tk_buf_put(tk_buf *b, const void *s, size_t n) {
    if (!n) return;
    tk_buf_reserve(b, n);
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

void tk_grow(void **p, size_t *cap, size_t elem) {
    *cap = *cap ? *cap * 2 : 64;
    *p = xrealloc(*p, *cap * elem);
}

/* ==== UTF-8 ==== */

int tk_utf8_next(const char *s, size_t n, int32_t *cp) {
    const unsigned char *u = (const unsigned char *)s;
    if (u[0] < 0x80 || n < 2) {
        *cp = u[0];
        return 1;
    }
    if (u[0] < 0xE0) {
        *cp = ((u[0] & 0x1F) << 6) | (u[1] & 0x3F);
        return 2;
    }
    if (u[0] < 0xF0 || n < 4) {
        if (n < 3) {
            *cp = u[0];
            return 1;
        }
        *cp = ((u[0] & 0x0F) << 12) | ((u[1] & 0x3F) << 6) | (u[2] & 0x3F);
        return 3;
    }
    *cp = ((u[0] & 0x07) << 18) | ((u[1] & 0x3F) << 12) | ((u[2] & 0x3F) << 6) | (u[3] & 0x3F);
    return 4;
}

int tk_utf8_put(char *dst, int32_t cp) {
    return (int)utf8proc_encode_char(cp, (utf8proc_uint8_t *)dst);
}

/* Length of a valid UTF-8 sequence at s (0 when invalid), and the length of the maximal
 * prefix of a valid sequence (for U+FFFD substitution of maximal subparts). */
static size_t utf8_seq(const unsigned char *s, size_t n, size_t *maxpart) {
    unsigned c = s[0];
    size_t need;
    unsigned lo = 0x80, hi = 0xBF;
    *maxpart = 1;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return 0;
    for (size_t i = 1; i < need; i++) {
        if (i >= n) return 0;
        unsigned d = s[i];
        if (i == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xBF)) return 0;
        *maxpart = i + 1;
    }
    return need;
}

size_t tk_utf8_lossy(tk_buf *dst, const char *src, size_t n) {
    const unsigned char *s = (const unsigned char *)src;
    size_t i = 0, bad = 0, run = 0;
    tk_buf_reserve(dst, n);
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            run++;
            continue;
        }
        size_t part, k = utf8_seq(s + i, n - i, &part);
        if (k) {
            i += k;
            run += k;
            continue;
        }
        tk_buf_put(dst, s + i - run, run);
        run = 0;
        tk_buf_put(dst, "\xEF\xBF\xBD", 3);
        bad++;
        i += part;
    }
    tk_buf_put(dst, s + i - run, run);
    return bad;
}

bool tk_utf8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        /* 8 ASCII bytes at a time */
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, u + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        size_t part, k = utf8_seq(u + i, n - i, &part);
        if (!k) return false;
        i += k;
    }
    return true;
}

/* ==== Unicode predicates ==== */

bool tk_is_whitespace(int32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

bool tk_is_numeric(int32_t c) {
    if (c < 0x80) return c >= '0' && c <= '9';
    utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

bool tk_is_alnum(int32_t c) {
    if (c < 0x80) return (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z');
    utf8proc_category_t k = utf8proc_category(c);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
           (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

bool tk_is_punct(int32_t c) {
    if (c < 0x80)
        return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
               (c >= 0x7B && c <= 0x7E);
    utf8proc_category_t k = utf8proc_category(c);
    return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

/* ==== String map ==== */

#define EMPTY_LEN UINT32_MAX

void tk_map_init(tk_map *m, size_t expect) {
    size_t cap = 16;
    while (cap < expect * 2) cap *= 2;
    m->slots = xrealloc(NULL, cap * sizeof *m->slots);
    for (size_t i = 0; i < cap; i++) m->slots[i].len = EMPTY_LEN;
    m->cap = cap;
    m->n = 0;
    memset(&m->arena, 0, sizeof m->arena);
}

void tk_map_free(tk_map *m) {
    free(m->slots);
    free(m->arena.p);
    memset(m, 0, sizeof *m);
}

static void map_grow(tk_map *m) {
    tk_map_ent *old = m->slots;
    size_t oc = m->cap;
    m->cap *= 2;
    m->slots = xrealloc(NULL, m->cap * sizeof *m->slots);
    for (size_t i = 0; i < m->cap; i++) m->slots[i].len = EMPTY_LEN;
    for (size_t i = 0; i < oc; i++) {
        if (old[i].len == EMPTY_LEN) continue;
        size_t j = old[i].h & (m->cap - 1);
        while (m->slots[j].len != EMPTY_LEN) j = (j + 1) & (m->cap - 1);
        m->slots[j] = old[i];
    }
    free(old);
}

int tk_map_put(tk_map *m, const char *k, size_t n, int32_t val, bool overwrite) {
    if ((m->n + 1) * 2 > m->cap) map_grow(m);
    uint64_t h = XXH3_64bits(k, n);
    size_t j = h & (m->cap - 1);
    for (; m->slots[j].len != EMPTY_LEN; j = (j + 1) & (m->cap - 1)) {
        tk_map_ent *e = &m->slots[j];
        if (e->h == h && e->len == n && !memcmp(m->arena.p + e->off, k, n)) {
            if (overwrite) e->val = val;
            return 0;
        }
    }
    tk_map_ent *e = &m->slots[j];
    e->h = h;
    e->off = (uint32_t)m->arena.n;
    e->len = (uint32_t)n;
    e->val = val;
    tk_buf_put(&m->arena, k, n);
    tk_buf_putc(&m->arena, '\0'); /* keys are C strings too */
    m->n++;
    return 1;
}

int32_t tk_map_get(const tk_map *m, const char *k, size_t n) {
    if (!m->cap) return -1;
    uint64_t h = XXH3_64bits(k, n);
    for (size_t j = h & (m->cap - 1); m->slots[j].len != EMPTY_LEN; j = (j + 1) & (m->cap - 1)) {
        const tk_map_ent *e = &m->slots[j];
        if (e->h == h && e->len == n && !memcmp(m->arena.p + e->off, k, n)) return e->val;
    }
    return -1;
}

const char *tk_map_key(const tk_map *m, const tk_map_ent *e) { return m->arena.p + e->off; }

/* ==== Regex (PCRE2, UTF + UCP, JIT) ==== */

/* Oniguruma's (and so tokenizers') \s is 0009-000D, 0085 and the Z categories; PCRE2 with UCP
 * also counts U+180E. Its \w is Letter|Mark|Number|Connector_Punctuation; PCRE2 10.42's misses
 * marks. Rewrite the shorthands into explicit classes so both engines agree. */
#define ONIG_S "\\t-\\r\\x{85}\\p{Z}"
static const char *const k_onig_w[] = {"L", "M", "N", "Pc"};

/* tokenizers' Unicode tables are newer than PCRE2 10.42's (Unicode 16.0 against 14.0): the
 * code points assigned since then (new emoji such as U+1FAF8, CJK extensions H and I, ...)
 * join each general-category property they belong to, so " \U0001FAF8" splits alike under
 * DeepSeek-V3's " ?[\p{P}\p{S}]+". The longer classes cost ~10-15% of encode speed, so a
 * pattern naming such a property compiles twice and the longer form runs only on text that
 * holds one of those code points (g_new_cp). */
#include "tok_unicode_delta.h"

static uint8_t g_new_cp[0x110000 / 8]; /* the code points of k_uni_delta */
static bool g_new_lead[256];            /* the UTF-8 lead bytes that start one of them */
static pthread_once_t g_new_cp_once = PTHREAD_ONCE_INIT;

static void new_cp_init(void) {
    for (size_t i = 0; i < sizeof k_uni_delta / sizeof k_uni_delta[0]; i++) {
        const char *p = k_uni_delta[i].ranges;
        while ((p = strstr(p, "\\x{"))) { /* "\x{A}" or "\x{A}-\x{B}" */
            char *e;
            unsigned long a = strtoul(p + 3, &e, 16), b = a;
            p = e + 1;
            if (p[0] == '-') {
                b = strtoul(p + 4, &e, 16);
                p = e + 1;
            }
            for (unsigned long c = a; c <= b && c < 0x110000; c++) {
                g_new_cp[c >> 3] |= (uint8_t)(1u << (c & 7));
                g_new_lead[tk_utf8_lead((uint32_t)c)] = true;
            }
        }
    }
}

/* Whether valid UTF-8 s holds a code point of g_new_cp (ASCII runs and the sequences whose
 * lead byte starts none, e.g. all of CJK's, are skipped undecoded; the input is valid, so a
 * lead byte's continuation bytes are there). */
static bool has_new_cp(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        const unsigned b = u[i];
        if (b < 0x80) { /* ASCII: then whole words of it */
            uint64_t w;
            i++;
            while (i + 8 <= n && (memcpy(&w, u + i, 8), !(w & 0x8080808080808080ull))) i += 8;
            continue;
        }
        const size_t len = b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
        if (g_new_lead[b]) {
            uint32_t cp;
            if (len == 2) cp = (b & 0x1Fu) << 6 | (u[i + 1] & 0x3Fu);
            else if (len == 3) cp = (b & 0x0Fu) << 12 | (u[i + 1] & 0x3Fu) << 6 | (u[i + 2] & 0x3Fu);
            else cp = (b & 0x07u) << 18 | (u[i + 1] & 0x3Fu) << 12 | (u[i + 2] & 0x3Fu) << 6 | (u[i + 3] & 0x3Fu);
            if (cp < 0x110000 && (g_new_cp[cp >> 3] >> (cp & 7) & 1)) return true;
        }
        i += len;
    }
    return false;
}

bool tk_is_rust_word(int32_t cp) {
    if (cp < 0x80) return cp == '_' || tk_is_alnum(cp);
    const utf8proc_category_t k = utf8proc_category(cp);
    bool w = (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
             (k >= UTF8PROC_CATEGORY_MN && k <= UTF8PROC_CATEGORY_ME) || k == UTF8PROC_CATEGORY_ND ||
             k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_PC || cp == 0x200C || cp == 0x200D;
    for (size_t i = 0; i < sizeof k_word_delta / sizeof k_word_delta[0]; i++)
        if (cp >= (int32_t)k_word_delta[i][0] && cp <= (int32_t)k_word_delta[i][1]) return !w;
    return w;
}

void tk_rust_word_items(tk_buf *out) {
    static const char base[] = "\\p{L}\\p{M}\\p{Nd}\\p{Nl}\\p{Pc}\\x{200C}\\x{200D}";
    tk_buf_put(out, base, sizeof base - 1);
    for (size_t i = 0; i < sizeof k_word_delta / sizeof k_word_delta[0]; i++) {
        char r[48];
        int k = snprintf(r, sizeof r, "\\x{%X}-\\x{%X}", (unsigned)k_word_delta[i][0], (unsigned)k_word_delta[i][1]);
        tk_buf_put(out, r, (size_t)k);
    }
}

static const tk_uni_delta *uni_delta(const char *name, size_t n) {
    for (size_t i = 0; i < sizeof k_uni_delta / sizeof k_uni_delta[0]; i++)
        if (strlen(k_uni_delta[i].cat) == n && !memcmp(k_uni_delta[i].cat, name, n)) return &k_uni_delta[i];
    return NULL;
}

/* \p{name} as class items: the property and, with delta, the code points it gained since
 * PCRE2's tables (*used set when there are any). */
static void put_prop_items(tk_buf *out, const char *name, size_t n, bool delta, bool *used) {
    tk_buf_put(out, "\\p{", 3);
    tk_buf_put(out, name, n);
    tk_buf_putc(out, '}');
    const tk_uni_delta *d = delta ? uni_delta(name, n) : NULL;
    if (d) {
        tk_buf_put(out, d->ranges, strlen(d->ranges));
        *used = true;
    }
}

/* Reads a property escape at p (after the backslash: "p{Lu}", "P{L}", "pL"); returns its length
 * (0 when it is not one) and the name. */
static size_t prop_escape(const char *p, size_t n, const char **name, size_t *name_n) {
    if (n < 2 || (p[0] != 'p' && p[0] != 'P')) return 0;
    if (p[1] != '{') {
        *name = p + 1;
        *name_n = 1;
        return 2;
    }
    size_t e = 2;
    while (e < n && p[e] != '}') e++;
    if (e >= n) return 0;
    *name = p + 2;
    *name_n = e - 2;
    return e + 1;
}

static void rewrite_classes(tk_buf *out, const char *p, size_t n, bool delta, bool *used) {
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char e = p[i + 1];
            bool neg = e == 'S' || e == 'W' || e == 'P';
            const char *name;
            size_t name_n, plen = prop_escape(p + i + 1, n - i - 1, &name, &name_n);
            if (delta && plen && name[0] != '^' && uni_delta(name, name_n) && !(in_class && neg)) {
                if (!in_class) tk_buf_put(out, neg ? "[^" : "[", neg ? 2 : 1);
                put_prop_items(out, name, name_n, true, used);
                if (!in_class) tk_buf_putc(out, ']');
                i += plen;
                continue;
            }
            if ((e == 's' || e == 'S' || e == 'w' || e == 'W') && !(in_class && neg)) {
                if (!in_class) tk_buf_put(out, neg ? "[^" : "[", neg ? 2 : 1);
                if (e == 's' || e == 'S') tk_buf_put(out, ONIG_S, strlen(ONIG_S));
                else
                    for (size_t k = 0; k < sizeof k_onig_w / sizeof k_onig_w[0]; k++)
                        put_prop_items(out, k_onig_w[k], strlen(k_onig_w[k]), delta, used);
                if (!in_class) tk_buf_putc(out, ']');
            } else
                tk_buf_put(out, p + i, 2);
            i++;
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = 1;
            tk_buf_putc(out, c);
            /* a ']' right after '[' or '[^' is a literal */
            if (i + 1 < n && p[i + 1] == '^') tk_buf_putc(out, p[++i]);
            if (i + 1 < n && p[i + 1] == ']') tk_buf_putc(out, p[++i]);
            continue;
        }
        if (c == ']' && in_class) in_class = 0;
        tk_buf_putc(out, c);
    }
}

/* One compiled form of pat (rewritten unless literal; delta: with the newer code points). */
static pcre2_code *compile_one(const char *pat, size_t n, bool literal, bool delta, bool *used,
                               mx_error *err) {
    int ec;
    PCRE2_SIZE eo;
    tk_buf rw = {0};
    const char *src = pat;
    size_t src_n = n;
    if (!literal) {
        rewrite_classes(&rw, pat, n, delta, used);
        src = rw.p ? rw.p : "";
        src_n = rw.n;
    }
    /* PCRE2_LITERAL admits UTF but not UCP (which only matters for classes anyway). */
    uint32_t opt = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)src, src_n, opt, &ec, &eo, NULL);
    free(rw.p);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        mx_fail(err, "regex /%.*s/: %s", (int)(n > 200 ? 200 : n), pat, (const char *)msg);
        return NULL;
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE); /* without JIT PCRE2 interprets: slower, same result */
    return code;
}

int tk_regex_compile(tk_regex *r, const char *pat, size_t n, bool literal, mx_error *err) {
    bool used = false;
    r->code = r->code_new = NULL;
    /* the form with the newer code points first: when the pattern names no property that
     * gained any, it is the plain form too, and the only one compiled */
    pcre2_code *code = compile_one(pat, n, literal, !literal, &used, err);
    if (!code) return -1;
    if (!used) {
        r->code = code;
        return 0;
    }
    pthread_once(&g_new_cp_once, new_cp_init);
    r->code_new = code;
    if (!(r->code = compile_one(pat, n, false, false, &used, err))) {
        tk_regex_free(r);
        return -1;
    }
    return 0;
}

void tk_regex_free(tk_regex *r) {
    if (r->code) pcre2_code_free(r->code);
    if (r->code_new) pcre2_code_free(r->code_new);
    r->code = r->code_new = NULL;
}

/* Input is valid UTF-8 (sanitized on entry to tok_encode), so the per-call UTF check is
 * skipped. The JIT stack grows on demand for long matches (e.g. megabytes of spaces). */
int tk_regex_each(const tk_regex *r, tk_rx_state *st, const char *s, size_t n, tk_span_fn fn, void *arg,
                  mx_error *err) {
    if (n == 0) return fn(arg, 0, 0, 0);
    if (!st->md) st->md = pcre2_match_data_create(4, NULL);
    if (!st->md) return mx_fail(err, "regex: out of memory");
    const pcre2_code *code = r->code_new && has_new_cp(s, n) ? r->code_new : r->code;
    size_t prev = 0, pos = 0;
    while (pos <= n) {
        int m = pcre2_match(code, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, st->md, st->mc);
        if (m == PCRE2_ERROR_JIT_STACKLIMIT && !st->js) {
            st->js = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, NULL);
            if (!st->mc) st->mc = pcre2_match_context_create(NULL);
            if (!st->js || !st->mc) return mx_fail(err, "regex: out of memory");
            pcre2_jit_stack_assign(st->mc, NULL, st->js);
            continue;
        }
        if (m == PCRE2_ERROR_NOMATCH) break;
        if (m < 0 && m != PCRE2_ERROR_NOMEMORY) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(m, msg, sizeof msg);
            return mx_fail(err, "regex match failed: %s", (const char *)msg);
        }
        if (m < 0) return mx_fail(err, "regex match: out of memory");
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(st->md);
        size_t a = ov[0], b = ov[1];
        if (a != prev && fn(arg, prev, a, 0)) return -1;
        if (fn(arg, a, b, 1)) return -1;
        prev = pos = b;
        if (a == b) { /* empty match: continue one char further, as find_iter does */
            if (pos >= n) break;
            int32_t cp;
            pos += tk_utf8_next(s + pos, n - pos, &cp);
        }
    }
    if (prev != n) return fn(arg, prev, n, 0);
    return 0;
}

void tk_rx_state_free(tk_rx_state *st) {
    if (st->md) pcre2_match_data_free(st->md);
    if (st->mc) pcre2_match_context_free(st->mc);
    if (st->js) pcre2_jit_stack_free(st->js);
    memset(st, 0, sizeof *st);
}

static int push_span(void *arg, size_t a, size_t b, int m) {
    tk_spans_push(arg, a, b, m);
    return 0;
}

int tk_regex_spans(const tk_regex *r, tk_rx_state *st, const char *s, size_t n, tk_spans *out, mx_error *err) {
    return tk_regex_each(r, st, s, n, push_span, out, err);
}
