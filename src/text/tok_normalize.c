/* Normalizers: NFC/NFD/NFKC/NFKD (utf8proc), Lowercase, StripAccents, Strip, Prepend, Replace.
 * Each step maps a string to a new string; steps ping-pong between two scratch buffers. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "text/tok_internal.h"
#include "text/tok_unicode_delta.h"

/* ==== Unicode versions ====
 * tokenizers normalizes with older tables than utf8proc 2.8's (it leaves U+32FF, U+11938, ...
 * alone under NFKC / NFD) and lowercases with newer ones (Garay, U+A7CB, ...); its StripAccents
 * removes every mark (Mn, Mc, Me) of its own tables. tok_unicode_delta.h, asked of tokenizers
 * itself (tools/reference/unicode/make_unicode_delta.sh), lists the differences. */

static bool norm_frozen(int32_t cp) {
    if (cp < (int32_t)k_norm_frozen[0][0]) return false;
    for (size_t i = 0; i < sizeof k_norm_frozen / sizeof k_norm_frozen[0]; i++)
        if (cp >= (int32_t)k_norm_frozen[i][0] && cp <= (int32_t)k_norm_frozen[i][1]) return true;
    return false;
}

static int cmp_u32(const void *a, const void *b) {
    const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static int32_t lower_of(int32_t cp) {
    const uint32_t key = (uint32_t)cp;
    const uint32_t(*e)[2] = bsearch(&key, k_lower_delta, sizeof k_lower_delta / sizeof k_lower_delta[0],
                                    sizeof k_lower_delta[0], cmp_u32);
    return e ? (int32_t)(*e)[1] : utf8proc_tolower(cp);
}

static bool is_mark(int32_t cp) {
    const utf8proc_category_t k = utf8proc_category(cp);
    const bool m = k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME;
    const uint32_t key = (uint32_t)cp;
    return bsearch(&key, k_strip_delta, sizeof k_strip_delta / sizeof k_strip_delta[0], sizeof k_strip_delta[0],
                   cmp_u32) ? !m : m;
}

/* ==== Steps ==== */

static void map_run(tk_buf *dst, const char *s, size_t n, utf8proc_option_t opt) {
    utf8proc_uint8_t *out = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &out, opt | UTF8PROC_STABLE);
    if (r < 0) /* cannot happen on valid UTF-8; keep the text as it is */
        tk_buf_put(dst, s, n);
    else
        tk_buf_put(dst, out, (size_t)r);
    free(out);
}

static bool g_frozen_lead[256]; /* the UTF-8 lead bytes of k_norm_frozen's code points */
static pthread_once_t g_frozen_once = PTHREAD_ONCE_INIT;

static void frozen_lead_init(void) {
    for (size_t r = 0; r < sizeof k_norm_frozen / sizeof k_norm_frozen[0]; r++) /* leads grow with the code point */
        for (unsigned b = tk_utf8_lead(k_norm_frozen[r][0]); b <= tk_utf8_lead(k_norm_frozen[r][1]); b++)
            g_frozen_lead[b] = true;
}

/* A non-ASCII run through utf8proc, the code points tokenizers leaves alone copied as they are
 * (all are starters: no reordering or composition crosses them, so the parts between them
 * normalize on their own). Runs without a lead byte of one (CJK, most scripts) skip the
 * per-code-point look. */
static void map_segment(tk_buf *dst, const char *s, size_t n, utf8proc_option_t opt) {
    size_t k = 0;
    while (k < n && !g_frozen_lead[(unsigned char)s[k]]) k++;
    if (k == n) {
        map_run(dst, s, n, opt);
        return;
    }
    size_t a = 0;
    for (size_t i = 0; i < n;) {
        int32_t cp;
        const size_t l = (size_t)tk_utf8_next(s + i, n - i, &cp);
        if (norm_frozen(cp)) {
            if (i > a) map_run(dst, s + a, i - a, opt);
            tk_buf_put(dst, s + i, l);
            a = i + l;
        }
        i += l;
    }
    if (a < n) map_run(dst, s + a, n - a, opt);
}

/* ASCII is stable under every normalization form, never reorders, and never composes with
 * the char before it, so only non-ASCII runs (with the one ASCII char before them, which a
 * following combining mark may compose with) go through utf8proc. */
static void norm_unicode(tk_buf *dst, const char *s, size_t n, utf8proc_option_t opt) {
    pthread_once(&g_frozen_once, frozen_lead_init);
    size_t i = 0;
    tk_buf_reserve(dst, n);
    while (i < n) {
        size_t j = i;
        while (j < n && (unsigned char)s[j] < 0x80) j++;
        if (j == n) {
            tk_buf_put(dst, s + i, n - i);
            return;
        }
        size_t start = j > i ? j - 1 : i;
        tk_buf_put(dst, s + i, start - i);
        size_t e = j;
        while (e < n && (unsigned char)s[e] >= 0x80) e++;
        map_segment(dst, s + start, e - start, opt);
        i = e;
    }
}

/* Per-char full lowercase mapping, as Rust's char::to_lowercase (no final-sigma context). */
static void norm_lower(tk_buf *dst, const char *s, size_t n) {
    tk_buf_reserve(dst, n);
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            tk_buf_putc(dst, (char)(c >= 'A' && c <= 'Z' ? c + 32 : c));
            i++;
            continue;
        }
        int32_t cp;
        i += (size_t)tk_utf8_next(s + i, n - i, &cp);
        char tmp[8];
        if (cp == 0x130) { /* LATIN CAPITAL I WITH DOT ABOVE -> i + COMBINING DOT ABOVE */
            tk_buf_put(dst, "i\xCC\x87", 3);
            continue;
        }
        tk_buf_put(dst, tmp, (size_t)tk_utf8_put(tmp, lower_of(cp)));
    }
}

static void norm_strip_accents(tk_buf *dst, const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        int32_t cp;
        int l = tk_utf8_next(s + i, n - i, &cp);
        if (!is_mark(cp)) tk_buf_put(dst, s + i, (size_t)l);
        i += (size_t)l;
    }
}

static void norm_strip(tk_buf *dst, const char *s, size_t n, bool left, bool right) {
    size_t a = 0, b = n;
    while (left && a < b) {
        int32_t cp;
        int l = tk_utf8_next(s + a, b - a, &cp);
        if (!tk_is_whitespace(cp)) break;
        a += (size_t)l;
    }
    while (right && b > a) {
        size_t k = b - 1;
        while (k > a && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
        int32_t cp;
        tk_utf8_next(s + k, b - k, &cp);
        if (!tk_is_whitespace(cp)) break;
        b = k;
    }
    tk_buf_put(dst, s + a, b - a);
}

static int norm_replace(tk_ctx *c, const tk_norm *nm, tk_buf *dst, const char *s, size_t n) {
    tk_spans *sp = &c->stage_spans[TK_MAX_STAGES - 1];
    sp->n = 0;
    if (tk_regex_spans(&nm->re, &c->rx[TK_MAX_STAGES], s, n, sp, c->err)) return -1;
    for (size_t i = 0; i < sp->n; i++) {
        if (sp->p[i].m) tk_buf_put(dst, nm->s, nm->s_len);
        else tk_buf_put(dst, s + sp->p[i].a, sp->p[i].b - sp->p[i].a);
    }
    return 0;
}

/* ==== Entry ==== */

int tk_normalize_str(tk_ctx *c, const char *s, size_t n, const char **out, size_t *out_n) {
    const tokenizer *t = c->t;
    tk_buf *bufs[2] = {&c->norm_a, &c->norm_b};
    int cur = 0;
    for (int i = 0; i < t->n_norms; i++) {
        const tk_norm *nm = &t->norms[i];
        tk_buf *dst = bufs[cur];
        dst->n = 0;
        switch (nm->kind) {
        case TK_NORM_NFC: norm_unicode(dst, s, n, UTF8PROC_COMPOSE); break;
        case TK_NORM_NFD: norm_unicode(dst, s, n, UTF8PROC_DECOMPOSE); break;
        case TK_NORM_NFKC: norm_unicode(dst, s, n, UTF8PROC_COMPOSE | UTF8PROC_COMPAT); break;
        case TK_NORM_NFKD: norm_unicode(dst, s, n, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT); break;
        case TK_NORM_LOWERCASE: norm_lower(dst, s, n); break;
        case TK_NORM_STRIP_ACCENTS: norm_strip_accents(dst, s, n); break;
        case TK_NORM_STRIP: norm_strip(dst, s, n, nm->left, nm->right); break;
        case TK_NORM_PREPEND:
            if (n) tk_buf_put(dst, nm->s, nm->s_len);
            tk_buf_put(dst, s, n);
            break;
        case TK_NORM_REPLACE:
            if (norm_replace(c, nm, dst, s, n)) return -1;
            break;
        }
        s = dst->p ? dst->p : "";
        n = dst->n;
        cur ^= 1;
    }
    *out = s;
    *out_n = n;
    return 0;
}

void tk_norm_free(tk_norm *n) {
    free(n->s);
    tk_regex_free(&n->re);
}
