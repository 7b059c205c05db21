/* Pre-tokenizers, run as a pipeline: stage k splits its piece and hands every sub-piece to
 * stage k+1; the last stage hands words to the BPE model. This is equivalent to tokenizers'
 * Sequence (each pre-tokenizer acts on every split independently) without materialising the
 * list of all splits of a 10 MB input. Each stage owns its scratch buffers in tk_ctx. */
#include <pthread.h>
#include <string.h>

#include "text/tok_internal.h"

/* ==== ByteLevel alphabet (GPT-2 bytes_to_unicode) ==== */

static int32_t g_b2c[256];
static unsigned char g_b2u[256][3]; /* [len, utf8...] */
static int16_t g_c2b[512];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Printable Latin-1 bytes map to themselves; the others to 256, 257, ... in byte order. */
static void init_bytelevel(void) {
    int n = 0;
    for (int b = 0; b < 512; b++) g_c2b[b] = -1;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        g_b2c[b] = keep ? b : 256 + n++;
        g_c2b[g_b2c[b]] = (int16_t)b;
        char tmp[4];
        int l = tk_utf8_put(tmp, g_b2c[b]);
        g_b2u[b][0] = (unsigned char)l;
        memcpy(&g_b2u[b][1], tmp, (size_t)l);
    }
}

int tk_cp_to_byte(int32_t cp) {
    pthread_once(&g_once, init_bytelevel);
    return (cp >= 0 && cp < 512) ? g_c2b[cp] : -1;
}

int32_t tk_byte_to_char(int b) {
    pthread_once(&g_once, init_bytelevel);
    return g_b2c[b & 255];
}

static void bytelevel_map(tk_buf *dst, const char *s, size_t n) {
    dst->n = 0;
    tk_buf_reserve(dst, n * 2);
    char *o = dst->p;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *e = g_b2u[(unsigned char)s[i]];
        o[0] = (char)e[1];
        if (e[0] == 2) o[1] = (char)e[2];
        o += e[0];
    }
    dst->n = (size_t)(o - dst->p);
}

/* ==== Split behaviours (tokenizers' SplitDelimiterBehavior) ==== */

static void apply_behavior(tk_spans *sp, tk_split_behavior bh) {
    size_t w = 0;
    bool prev = false;
    switch (bh) {
    case TK_SPLIT_REMOVED:
        for (size_t i = 0; i < sp->n; i++)
            if (!sp->p[i].m) sp->p[w++] = sp->p[i];
        break;
    case TK_SPLIT_ISOLATED: w = sp->n; break;
    case TK_SPLIT_MERGED_PREV:
        for (size_t i = 0; i < sp->n; i++) {
            tk_span s = sp->p[i];
            if (s.m && !prev && w) sp->p[w - 1].b = s.b;
            else sp->p[w++] = s;
            prev = s.m;
        }
        break;
    case TK_SPLIT_MERGED_NEXT: {
        /* right to left, writing from the end so nothing unread is overwritten */
        size_t r = sp->n;
        for (size_t i = sp->n; i-- > 0;) {
            tk_span s = sp->p[i];
            if (s.m && !prev && r < sp->n) sp->p[r].a = s.a;
            else sp->p[--r] = s;
            prev = s.m;
        }
        w = sp->n - r;
        memmove(sp->p, sp->p + r, w * sizeof *sp->p);
        break;
    }
    case TK_SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < sp->n; i++) {
            tk_span s = sp->p[i];
            if (s.m == (int)prev && w) sp->p[w - 1].b = s.b;
            else sp->p[w++] = s;
            prev = s.m;
        }
        break;
    }
    sp->n = w;
}

/* Every char satisfying the predicate is its own match; the runs between are gaps. */
typedef bool (*char_pred)(int32_t cp, int32_t arg);
static bool pred_ws(int32_t cp, int32_t a) { (void)a; return tk_is_whitespace(cp); }
static bool pred_num(int32_t cp, int32_t a) { (void)a; return tk_is_numeric(cp); }
static bool pred_punct(int32_t cp, int32_t a) { (void)a; return tk_is_punct(cp); }
static bool pred_eq(int32_t cp, int32_t a) { return cp == a; }

static void char_spans(const char *s, size_t n, char_pred f, int32_t arg, tk_spans *out) {
    size_t prev = 0;
    for (size_t i = 0; i < n;) {
        int32_t cp;
        int l = tk_utf8_next(s + i, n - i, &cp);
        if (f(cp, arg)) {
            if (prev != i) tk_spans_push(out, prev, i, 0);
            tk_spans_push(out, i, i + (size_t)l, 1);
            prev = i + (size_t)l;
        }
        i += (size_t)l;
    }
    if (prev != n || n == 0) tk_spans_push(out, prev, n, 0);
}

/* ==== Pipeline ==== */

static int run_stage(tk_ctx *c, int k, const char *s, size_t n, bool at_start);

static int emit_spans(tk_ctx *c, int k, const char *s, tk_spans *sp, bool at_start) {
    for (size_t i = 0; i < sp->n; i++) {
        tk_span p = sp->p[i];
        if (p.b > p.a && run_stage(c, k + 1, s + p.a, p.b - p.a, at_start && p.a == 0)) return -1;
    }
    return 0;
}

static int run_stage(tk_ctx *c, int k, const char *s, size_t n, bool at_start) {
    const tokenizer *t = c->t;
    if (k == t->n_pres) return n ? tk_bpe_word(c, s, n) : 0;
    const tk_pre *p = &t->pres[k];
    tk_spans *sp = &c->stage_spans[k];
    tk_buf *buf = &c->stage_buf[k];
    sp->n = 0;
    switch (p->kind) {
    case TK_PRE_BYTELEVEL: {
        if (p->add_prefix_space && n && s[0] != ' ') {
            buf->n = 0;
            tk_buf_putc(buf, ' ');
            tk_buf_put(buf, s, n);
            s = buf->p;
            n = buf->n;
        }
        if (p->use_regex) {
            if (tk_regex_spans(&p->re, s, n, sp, c->err)) return -1;
        } else
            tk_spans_push(sp, 0, n, 0);
        tk_buf *mb = &c->stage_buf2[k];
        for (size_t i = 0; i < sp->n; i++) {
            tk_span q = sp->p[i];
            if (q.b == q.a) continue;
            bytelevel_map(mb, s + q.a, q.b - q.a);
            if (run_stage(c, k + 1, mb->p, mb->n, at_start && q.a == 0)) return -1;
        }
        return 0;
    }
    case TK_PRE_SPLIT:
    case TK_PRE_WHITESPACE:
        if (tk_regex_spans(&p->re, s, n, sp, c->err)) return -1;
        if (p->invert || p->kind == TK_PRE_WHITESPACE)
            for (size_t i = 0; i < sp->n; i++) sp->p[i].m = !sp->p[i].m;
        apply_behavior(sp, p->kind == TK_PRE_WHITESPACE ? TK_SPLIT_REMOVED : p->behavior);
        return emit_spans(c, k, s, sp, at_start);
    case TK_PRE_DIGITS:
        char_spans(s, n, pred_num, 0, sp);
        apply_behavior(sp, p->individual_digits ? TK_SPLIT_ISOLATED : TK_SPLIT_CONTIGUOUS);
        return emit_spans(c, k, s, sp, at_start);
    case TK_PRE_WHITESPACE_SPLIT:
        char_spans(s, n, pred_ws, 0, sp);
        apply_behavior(sp, TK_SPLIT_REMOVED);
        return emit_spans(c, k, s, sp, at_start);
    case TK_PRE_PUNCTUATION:
        char_spans(s, n, pred_punct, 0, sp);
        apply_behavior(sp, p->behavior);
        return emit_spans(c, k, s, sp, at_start);
    case TK_PRE_CHAR_DELIM:
        char_spans(s, n, pred_eq, p->ch, sp);
        apply_behavior(sp, TK_SPLIT_REMOVED);
        return emit_spans(c, k, s, sp, at_start);
    case TK_PRE_METASPACE: {
        char rep[4];
        int rl = tk_utf8_put(rep, p->ch);
        buf->n = 0;
        bool starts = n >= (size_t)rl && !memcmp(s, rep, (size_t)rl);
        /* A leading space becomes the replacement too, so check for it as well. */
        if (!starts && n && s[0] == ' ') starts = true;
        if (n && !starts && (p->prepend == TK_PREPEND_ALWAYS || (p->prepend == TK_PREPEND_FIRST && at_start)))
            tk_buf_put(buf, rep, (size_t)rl);
        for (size_t i = 0; i < n; i++) {
            if (s[i] == ' ') tk_buf_put(buf, rep, (size_t)rl);
            else tk_buf_putc(buf, s[i]);
        }
        s = buf->p ? buf->p : "";
        n = buf->n;
        if (!p->split) return run_stage(c, k + 1, s, n, at_start);
        char_spans(s, n, pred_eq, p->ch, sp);
        apply_behavior(sp, TK_SPLIT_MERGED_NEXT);
        return emit_spans(c, k, s, sp, at_start);
    }
    }
    return 0;
}

int tk_pretokenize(tk_ctx *c, const char *s, size_t n, bool at_start) {
    pthread_once(&g_once, init_bytelevel);
    return run_stage(c, 0, s, n, at_start);
}

void tk_pre_free(tk_pre *p) { tk_regex_free(&p->re); }
