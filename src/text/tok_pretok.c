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

/* ==== Split behaviours (tokenizers' SplitDelimiterBehavior), streamed ====
 * Spans (match or gap) arrive in order; at most one is pending, so a 10 MB input never
 * becomes a list of millions of spans. Equivalent to the folds in tokenizers'
 * NormalizedString::split (MergedWithNext is its right-to-left fold read left to right: a
 * match joins the next span when that span is not a match). */

typedef struct splitter {
    tk_ctx *c;
    int k;              /* stage: pieces go to stage k + 1 */
    const char *s;
    bool at_start;
    bool bytelevel;     /* map each piece to the ByteLevel alphabet first */
    tk_split_behavior bh;
    bool invert;
    bool has_pend, prev_m;
    tk_span pend;
} splitter;

static int run_stage(tk_ctx *c, int k, const char *s, size_t n, bool at_start);

static int split_emit(splitter *sp, tk_span p) {
    if (p.b <= p.a) return 0;
    bool first = sp->at_start && p.a == 0;
    if (sp->bytelevel) {
        tk_buf *mb = &sp->c->stage_buf2[sp->k];
        bytelevel_map(mb, sp->s + p.a, p.b - p.a);
        return run_stage(sp->c, sp->k + 1, mb->p, mb->n, first);
    }
    return run_stage(sp->c, sp->k + 1, sp->s + p.a, p.b - p.a, first);
}

static int split_feed(void *arg, size_t a, size_t b, int m) {
    splitter *sp = arg;
    tk_span s = {a, b, sp->invert ? !m : m};
    int rc = 0;
    switch (sp->bh) {
    case TK_SPLIT_REMOVED: return s.m ? 0 : split_emit(sp, s);
    case TK_SPLIT_ISOLATED: return split_emit(sp, s);
    case TK_SPLIT_MERGED_PREV:
        if (s.m && !sp->prev_m && sp->has_pend) sp->pend.b = s.b;
        else {
            if (sp->has_pend) rc = split_emit(sp, sp->pend);
            sp->pend = s;
            sp->has_pend = true;
        }
        break;
    case TK_SPLIT_MERGED_NEXT:
        if (sp->has_pend && sp->pend.m && !s.m) s.a = sp->pend.a;
        else if (sp->has_pend) rc = split_emit(sp, sp->pend);
        sp->pend = s;
        sp->has_pend = true;
        break;
    case TK_SPLIT_CONTIGUOUS:
        if (s.m == (int)sp->prev_m && sp->has_pend) sp->pend.b = s.b;
        else {
            if (sp->has_pend) rc = split_emit(sp, sp->pend);
            sp->pend = s;
            sp->has_pend = true;
        }
        break;
    }
    sp->prev_m = s.m;
    return rc;
}

static int split_finish(splitter *sp) { return sp->has_pend ? split_emit(sp, sp->pend) : 0; }

/* Every char satisfying the predicate is its own match; the runs between are gaps. */
typedef bool (*char_pred)(int32_t cp, int32_t arg);
static bool pred_ws(int32_t cp, int32_t a) { (void)a; return tk_is_whitespace(cp); }
static bool pred_num(int32_t cp, int32_t a) { (void)a; return tk_is_numeric(cp); }
static bool pred_punct(int32_t cp, int32_t a) { (void)a; return tk_is_punct(cp); }
static bool pred_eq(int32_t cp, int32_t a) { return cp == a; }

static int char_split(splitter *sp, size_t n, char_pred f, int32_t arg) {
    const char *s = sp->s;
    size_t prev = 0;
    for (size_t i = 0; i < n;) {
        int32_t cp;
        int l = tk_utf8_next(s + i, n - i, &cp);
        if (f(cp, arg)) {
            if (prev != i && split_feed(sp, prev, i, 0)) return -1;
            if (split_feed(sp, i, i + (size_t)l, 1)) return -1;
            prev = i + (size_t)l;
        }
        i += (size_t)l;
    }
    if ((prev != n || n == 0) && split_feed(sp, prev, n, 0)) return -1;
    return split_finish(sp);
}

/* ==== Pipeline ==== */

static int run_stage(tk_ctx *c, int k, const char *s, size_t n, bool at_start) {
    const tokenizer *t = c->t;
    if (k == t->n_pres) return n ? tk_bpe_word(c, s, n) : 0;
    const tk_pre *p = &t->pres[k];
    tk_buf *buf = &c->stage_buf[k];
    splitter sp = {.c = c, .k = k, .s = s, .at_start = at_start, .bh = TK_SPLIT_ISOLATED};
    switch (p->kind) {
    case TK_PRE_BYTELEVEL:
        if (p->add_prefix_space && n && s[0] != ' ') {
            buf->n = 0;
            tk_buf_putc(buf, ' ');
            tk_buf_put(buf, s, n);
            sp.s = s = buf->p;
            n = buf->n;
        }
        sp.bytelevel = true;
        if (!p->use_regex) return split_emit(&sp, (tk_span){0, n, 0});
        if (tk_regex_each(&p->re, &c->rx[k], s, n, split_feed, &sp, c->err)) return -1;
        return split_finish(&sp);
    case TK_PRE_SPLIT:
    case TK_PRE_WHITESPACE:
        sp.bh = p->kind == TK_PRE_WHITESPACE ? TK_SPLIT_REMOVED : p->behavior;
        sp.invert = p->kind == TK_PRE_WHITESPACE ? true : p->invert;
        if (tk_regex_each(&p->re, &c->rx[k], s, n, split_feed, &sp, c->err)) return -1;
        return split_finish(&sp);
    case TK_PRE_DIGITS:
        sp.bh = p->individual_digits ? TK_SPLIT_ISOLATED : TK_SPLIT_CONTIGUOUS;
        return char_split(&sp, n, pred_num, 0);
    case TK_PRE_WHITESPACE_SPLIT:
        sp.bh = TK_SPLIT_REMOVED;
        return char_split(&sp, n, pred_ws, 0);
    case TK_PRE_PUNCTUATION:
        sp.bh = p->behavior;
        return char_split(&sp, n, pred_punct, 0);
    case TK_PRE_CHAR_DELIM:
        sp.bh = TK_SPLIT_REMOVED;
        return char_split(&sp, n, pred_eq, p->ch);
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
        sp.s = s = buf->p ? buf->p : "";
        n = buf->n;
        if (!p->split) return run_stage(c, k + 1, s, n, at_start);
        sp.bh = TK_SPLIT_MERGED_NEXT;
        return char_split(&sp, n, pred_eq, p->ch);
    }
    }
    return 0;
}

int tk_pretokenize(tk_ctx *c, const char *s, size_t n, bool at_start) {
    pthread_once(&g_once, init_bytelevel);
    return run_stage(c, 0, s, n, at_start);
}

void tk_pre_free(tk_pre *p) { tk_regex_free(&p->re); }
