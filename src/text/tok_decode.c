/* Decoding: ids -> pieces (added tokens included, special ones optionally skipped) -> decoder
 * stages (ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, BPEDecoder) -> concat.
 * Mirrors tokenizers' Tokenizer::decode + Decoder::decode_chain. */
#include <stdlib.h>
#include <string.h>

#include "text/tok_internal.h"

/* A list of tokens: spans into one text buffer. */
typedef struct toklist {
    tk_buf text;
    tk_spans sp;
} toklist;

static void tl_reset(toklist *l) {
    l->text.n = 0;
    l->sp.n = 0;
}

static void tl_add(toklist *l, const char *s, size_t n) {
    size_t a = l->text.n;
    tk_buf_put(&l->text, s, n);
    tk_spans_push(&l->sp, a, l->text.n, 0);
}

/* Begins a token whose bytes are appended to l->text by the caller; ended by tl_end. */
static size_t tl_begin(toklist *l) { return l->text.n; }
static void tl_end(toklist *l, size_t a) { tk_spans_push(&l->sp, a, l->text.n, 0); }

/* ==== Stages ==== */

/* keep_raw: the bytes as they are (tok_decode_bytes); else invalid UTF-8 becomes U+FFFD. */
static void dec_bytelevel(const toklist *in, toklist *out, bool keep_raw) {
    tk_buf raw = {0};
    for (size_t i = 0; i < in->sp.n; i++) {
        const char *s = in->text.p + in->sp.p[i].a;
        size_t n = in->sp.p[i].b - in->sp.p[i].a, start = raw.n;
        bool ok = true;
        for (size_t k = 0; k < n;) {
            int32_t cp;
            k += (size_t)tk_utf8_next(s + k, n - k, &cp);
            int b = tk_cp_to_byte(cp);
            if (b < 0) {
                ok = false;
                break;
            }
            tk_buf_putc(&raw, (char)b);
        }
        if (!ok) { /* a char outside the byte alphabet: the token's own UTF-8 */
            raw.n = start;
            tk_buf_put(&raw, s, n);
        }
    }
    size_t a = tl_begin(out);
    if (keep_raw) tk_buf_put(&out->text, raw.p ? raw.p : "", raw.n);
    else tk_utf8_lossy(&out->text, raw.p ? raw.p : "", raw.n);
    tl_end(out, a);
    free(raw.p);
}

static void dec_metaspace(const tk_dec *d, const toklist *in, toklist *out) {
    for (size_t i = 0; i < in->sp.n; i++) {
        const char *s = in->text.p + in->sp.p[i].a;
        size_t n = in->sp.p[i].b - in->sp.p[i].a, a = tl_begin(out);
        for (size_t k = 0; k < n;) {
            int32_t cp;
            int l = tk_utf8_next(s + k, n - k, &cp);
            if (cp == d->ch) {
                if (!(i == 0 && d->prepend != TK_PREPEND_NEVER)) tk_buf_putc(&out->text, ' ');
            } else
                tk_buf_put(&out->text, s + k, (size_t)l);
            k += (size_t)l;
        }
        tl_end(out, a);
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static void flush_bytes(toklist *out, tk_buf *bytes, bool keep_raw) {
    if (!bytes->n) return;
    if (keep_raw || tk_utf8_valid(bytes->p, bytes->n)) tl_add(out, bytes->p, bytes->n);
    else /* one U+FFFD per byte, as tokenizers does */
        for (size_t k = 0; k < bytes->n; k++) tl_add(out, "\xEF\xBF\xBD", 3);
    bytes->n = 0;
}

static void dec_byte_fallback(const toklist *in, toklist *out, bool keep_raw) {
    tk_buf bytes = {0};
    for (size_t i = 0; i < in->sp.n; i++) {
        const char *s = in->text.p + in->sp.p[i].a;
        size_t n = in->sp.p[i].b - in->sp.p[i].a;
        if (n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' && hexval(s[3]) >= 0 && hexval(s[4]) >= 0) {
            tk_buf_putc(&bytes, (char)(hexval(s[3]) * 16 + hexval(s[4])));
            continue;
        }
        flush_bytes(out, &bytes, keep_raw);
        tl_add(out, s, n);
    }
    flush_bytes(out, &bytes, keep_raw);
    free(bytes.p);
}

static void dec_fuse(const toklist *in, toklist *out) {
    size_t a = tl_begin(out);
    for (size_t i = 0; i < in->sp.n; i++)
        tk_buf_put(&out->text, in->text.p + in->sp.p[i].a, in->sp.p[i].b - in->sp.p[i].a);
    tl_end(out, a);
}

static void dec_strip(const tk_dec *d, const toklist *in, toklist *out) {
    char rep[4];
    size_t rl = (size_t)tk_utf8_put(rep, d->ch);
    for (size_t i = 0; i < in->sp.n; i++) {
        const char *s = in->text.p + in->sp.p[i].a;
        size_t a = 0, b = in->sp.p[i].b - in->sp.p[i].a;
        for (size_t k = 0; k < d->start && b - a >= rl && !memcmp(s + a, rep, rl); k++) a += rl;
        for (size_t k = 0; k < d->stop && b - a >= rl && !memcmp(s + b - rl, rep, rl); k++) b -= rl;
        tl_add(out, s + a, b - a);
    }
}

static void replace_into(tk_buf *dst, const char *s, size_t n, const char *pat, size_t pl, const char *rep,
                         size_t rl) {
    size_t k = 0;
    while (k < n) {
        const char *f = pl <= n - k ? memmem(s + k, n - k, pat, pl) : NULL;
        if (!f) break;
        tk_buf_put(dst, s + k, (size_t)(f - (s + k)));
        tk_buf_put(dst, rep, rl);
        k = (size_t)(f - s) + pl;
    }
    tk_buf_put(dst, s + k, n - k);
}

static void dec_replace(const tk_dec *d, const toklist *in, toklist *out, bool bpe_suffix) {
    for (size_t i = 0; i < in->sp.n; i++) {
        const char *s = in->text.p + in->sp.p[i].a;
        size_t n = in->sp.p[i].b - in->sp.p[i].a, a = tl_begin(out);
        if (bpe_suffix) {
            bool last = i + 1 == in->sp.n;
            replace_into(&out->text, s, n, d->pat, d->pat_len, last ? "" : " ", last ? 0 : 1);
        } else
            replace_into(&out->text, s, n, d->pat, d->pat_len, d->content, d->content_len);
        tl_end(out, a);
    }
}

/* ==== Entry ==== */

/* keep[0..n_keep): special tokens decoded even with skip_special (a chat route's tool-call and
 * reasoning markers, which the reply parser must see) */
static bool kept(const int32_t *keep, size_t n_keep, int32_t id) {
    for (size_t i = 0; i < n_keep; i++)
        if (keep[i] == id) return true;
    return false;
}

static void decode_chain(const tokenizer *t, const int32_t *ids, size_t n, bool skip_special, bool keep_raw,
                         const int32_t *keep, size_t n_keep, tk_buf *out) {
    toklist l[2] = {0};
    int cur = 0;
    /* never a NULL base pointer, even when every token is empty */
    tk_buf_reserve(&l[0].text, 64);
    tk_buf_reserve(&l[1].text, 64);
    for (size_t i = 0; i < n; i++) {
        size_t pn;
        const char *p = tok_id_to_piece_n(t, ids[i], &pn);
        if (!p || (skip_special && tk_skip_special(t, ids[i]) && !kept(keep, n_keep, ids[i]))) continue;
        tl_add(&l[0], p, pn);
    }
    if (!t->has_decoder) { /* tokenizers joins the pieces with spaces */
        for (size_t i = 0; i < l[0].sp.n; i++) {
            if (i) tk_buf_putc(out, ' ');
            tk_buf_put(out, l[0].text.p + l[0].sp.p[i].a, l[0].sp.p[i].b - l[0].sp.p[i].a);
        }
        goto done;
    }
    for (int k = 0; k < t->n_decs; k++) {
        const tk_dec *d = &t->decs[k];
        toklist *in = &l[cur], *o = &l[cur ^ 1];
        tl_reset(o);
        switch (d->kind) {
        case TK_DEC_BYTELEVEL: dec_bytelevel(in, o, keep_raw); break;
        case TK_DEC_METASPACE: dec_metaspace(d, in, o); break;
        case TK_DEC_BYTE_FALLBACK: dec_byte_fallback(in, o, keep_raw); break;
        case TK_DEC_FUSE: dec_fuse(in, o); break;
        case TK_DEC_STRIP: dec_strip(d, in, o); break;
        case TK_DEC_REPLACE: dec_replace(d, in, o, false); break;
        case TK_DEC_BPE_SUFFIX: dec_replace(d, in, o, true); break;
        }
        cur ^= 1;
    }
    for (size_t i = 0; i < l[cur].sp.n; i++)
        tk_buf_put(out, l[cur].text.p + l[cur].sp.p[i].a, l[cur].sp.p[i].b - l[cur].sp.p[i].a);
done:
    for (int k = 0; k < 2; k++) {
        free(l[k].text.p);
        free(l[k].sp.p);
    }
}

void tk_decode_append(const tokenizer *t, const int32_t *ids, size_t n, bool skip_special, tk_buf *out) {
    decode_chain(t, ids, n, skip_special, false, NULL, 0, out);
}

void tk_decode_append_keep(const tokenizer *t, const int32_t *ids, size_t n, bool skip_special,
                           const int32_t *keep, size_t n_keep, tk_buf *out) {
    decode_chain(t, ids, n, skip_special, false, keep, n_keep, out);
}

static int decode_to(const tokenizer *t, const int32_t *ids, size_t n_ids, bool skip_special, bool keep_raw,
                     char **out, size_t *out_len) {
    tk_buf b = {0};
    decode_chain(t, ids, n_ids, skip_special, keep_raw, NULL, 0, &b);
    tk_buf_putc(&b, '\0');
    *out = b.p;
    if (out_len) *out_len = b.n - 1;
    return 0;
}

int tok_decode_n(const tokenizer *t, const int32_t *ids, size_t n_ids, bool skip_special, char **out,
                 size_t *out_len, mx_error *err) {
    (void)err; /* unknown ids are skipped, as tokenizers does: decoding cannot fail */
    return decode_to(t, ids, n_ids, skip_special, false, out, out_len);
}

int tok_decode_bytes(const tokenizer *t, const int32_t *ids, size_t n_ids, bool skip_special, char **out,
                     size_t *out_len, mx_error *err) {
    (void)err;
    return decode_to(t, ids, n_ids, skip_special, true, out, out_len);
}

int tok_decode(const tokenizer *t, const int32_t *ids, size_t n_ids, bool skip_special, char **out,
               mx_error *err) {
    return tok_decode_n(t, ids, n_ids, skip_special, out, NULL, err);
}

void tk_dec_free(tk_dec *d) {
    free(d->pat);
    free(d->content);
}
