/* The reply parser: a byte machine over the model's text (see srv_toolparse.h).
 *
 * Top states: START (a reply may open with <think>), THINK, AFTER_THINK (whitespace after
 * </think> is dropped), CONTENT (watching for the family's call openers), REGION (inside a
 * tool-call region, sub-states per family). Lookahead lives in `hold`: bytes that may still
 * become a marker. A region is tentative until its first call has a name (the commit point);
 * before that every byte is kept in `raw`, and if the syntax breaks, `raw` goes back to the
 * input as content (its first byte emitted, the rest re-read), so the result never depends
 * on where the text was cut. Whitespace at the end of content is held until more content
 * comes; a call that starts drops it (no "\n" content between or before calls). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/srv_toolparse.h"
#include "server/srv_toolparse_int.h"

/* ==== Events and the accumulated message ==== */
static void ev_flush(srv_cp *p) {
    if (p->ev_kind < 0) return;
    if (p->sink && p->ev.n) {
        srv_cp_event e = {.kind = (srv_cp_kind)p->ev_kind, .index = p->ev_index, .text = p->ev.p, .len = p->ev.n};
        p->sink(p->sink_ctx, &e);
    }
    p->ev.n = 0;
    p->ev_kind = -1;
}

static void ev_put(srv_cp *p, int kind, int index, const char *s, size_t n) {
    if (!n) return;
    if (p->ev_kind != kind || p->ev_index != index) {
        ev_flush(p);
        p->ev_kind = kind;
        p->ev_index = index;
    }
    cp_put(&p->ev, s, n);
}

static void out_content(srv_cp *p, const char *s, size_t n) {
    cp_put(&p->content, s, n);
    ev_put(p, SRV_CP_CONTENT, 0, s, n);
}

/* content byte through the whitespace hold */
static void content_char(srv_cp *p, char c) {
    if (cp_is_ws(c) && p->n_seen && !p->content.n) return; /* whitespace after calls only */
    if (p->cfg.format != SRV_TOOLS_NONE && cp_is_ws(c)) {
        cp_putc(&p->ws, c);
        return;
    }
    if (p->ws.n) {
        out_content(p, p->ws.p, p->ws.n);
        p->ws.n = 0;
    }
    out_content(p, &c, 1);
}

static void reason_char(srv_cp *p, char c) {
    if (cp_is_ws(c)) {
        if (p->reasoned) cp_putc(&p->rws, c); /* leading whitespace is dropped */
        return;
    }
    p->reasoned = true;
    if (p->rws.n) {
        cp_put(&p->reasoning, p->rws.p, p->rws.n);
        ev_put(p, SRV_CP_REASONING, 0, p->rws.p, p->rws.n);
        p->rws.n = 0;
    }
    cp_putc(&p->reasoning, c);
    ev_put(p, SRV_CP_REASONING, 0, &c, 1);
}

static void legacy(srv_cp *p, const char *s, size_t n) {
    if (p->cfg.reasoning == SRV_REASONING_LEGACY) out_content(p, s, n);
}

static const char k_alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

static uint64_t next_rand(srv_cp *p) {
    uint64_t z = (p->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The commit point of a call: its name is known. */
void cp_call_begin(srv_cp *p, const char *name, size_t len) {
    p->committed = true;
    p->raw.n = 0;
    p->ws.n = 0; /* whitespace before a call is not content */
    p->n_params = 0;
    p->suppress = !p->cfg.parallel && p->n_seen > 0;
    p->n_seen++;
    if (p->suppress) return;
    if (p->n_calls == p->cap_calls) {
        int cap = p->cap_calls ? p->cap_calls * 2 : 4;
        cp_call *c = realloc(p->calls, (size_t)cap * sizeof *c);
        if (!c) {
            p->suppress = true;
            return;
        }
        p->calls = c;
        p->cap_calls = cap;
    }
    cp_call *c = &p->calls[p->n_calls];
    memset(c, 0, sizeof *c);
    memcpy(c->id, "call_", 5);
    for (int i = 0; i < 24; i++) c->id[5 + i] = k_alnum[next_rand(p) % 62];
    c->name = malloc(len + 1);
    if (c->name) {
        memcpy(c->name, name, len);
        c->name[len] = 0;
    }
    cp_put(&c->args, "", 0);
    ev_flush(p);
    if (p->sink) {
        srv_cp_event e = {.kind = SRV_CP_CALL, .index = p->n_calls, .text = c->name ? c->name : "",
                          .len = c->name ? len : 0, .id = c->id};
        p->sink(p->sink_ctx, &e);
    }
    p->n_calls++;
}

void cp_out_args(srv_cp *p, const char *s, size_t n) {
    if (p->suppress || !p->n_calls) return;
    cp_call *c = &p->calls[p->n_calls - 1];
    cp_put(&c->args, s, n);
    ev_put(p, SRV_CP_ARGS, p->n_calls - 1, s, n);
}

/* ==== Input queue ==== */
/* s[0..n) is read again before the rest of the input */
static void requeue(srv_cp *p, const char *s, size_t n) {
    if (!n) return;
    cp_buf nb = {0};
    cp_put(&nb, s, n);
    cp_put(&nb, p->in.p + p->in_rd, p->in.n - p->in_rd);
    cp_free(&p->in);
    p->in = nb;
    p->in_rd = 0;
}

/* What was held while a marker was possible (tmp, then hold) turns out to be content: back to
 * content, re-reading those bytes. */
static void release_as_content(srv_cp *p) {
    cp_buf back = {0};
    cp_put(&back, p->tmp.p, p->tmp.n);
    cp_put(&back, p->hold.p, p->hold.n);
    p->tmp.n = p->hold.n = 0;
    p->top = T_CONTENT;
    requeue(p, back.p, back.n);
    cp_free(&back);
}

/* Leaves the region: back to content, re-reading the held bytes (and c when given). */
void cp_region_exit(srv_cp *p, const char *c) {
    cp_buf back = {0};
    cp_put(&back, p->hold.p, p->hold.n);
    if (c) cp_putc(&back, *c);
    p->hold.n = 0;
    p->top = T_CONTENT;
    p->committed = false;
    p->raw.n = 0;
    requeue(p, back.p, back.n);
    cp_free(&back);
}

/* The region did not turn out to be a call: its first byte is content, the rest is re-read. */
void cp_fallback(srv_cp *p) {
    if (p->committed) {
        cp_region_exit(p, NULL);
        return;
    }
    cp_buf back = {0};
    cp_put(&back, p->raw.p, p->raw.n);
    p->raw.n = 0;
    p->hold.n = 0;
    p->top = T_CONTENT;
    if (back.n) {
        content_char(p, back.p[0]);
        requeue(p, back.p + 1, back.n - 1);
    }
    cp_free(&back);
}

/* ==== Region helpers ==== */
void cp_av_start(srv_cp *p, int after) {
    p->sub = S_AV;
    p->av = AV_WS;
    p->after_av = after;
    p->tmp.n = 0;
}

void cp_obj_start(srv_cp *p, int after_obj) {
    p->sub = S_JC_HEAD;
    p->after_obj = after_obj;
    p->hold.n = 0;
    cp_putc(&p->hold, '{');
}

void cp_go(srv_cp *p, int sub) {
    if (sub == S_EXIT) {
        cp_region_exit(p, NULL);
        return;
    }
    p->sub = sub;
    p->hold.n = 0;
    if (sub == S_JC_REST) p->scan = (cp_scan){.depth = 1};
}

/* Lookahead against literals; released bytes go to `rel` (NULL: dropped). Returns the index
 * of the literal matched, -1 while pending. */
int cp_hold_lits(srv_cp *p, char c, const char *const *lits, int n, void (*rel)(srv_cp *, char)) {
    cp_putc(&p->hold, c);
    for (;;) {
        bool partial = false;
        for (int i = 0; i < n; i++) {
            cp_match m = cp_lit(p->hold.p, p->hold.n, lits[i]);
            if (m == CP_MATCH) {
                p->hold.n = 0;
                return i;
            }
            partial |= m == CP_PARTIAL;
        }
        if (partial || !p->hold.n) return -1;
        const char first = p->hold.p[0];
        cp_shift(&p->hold, 1);
        if (rel) rel(p, first);
    }
}

void cp_rel_tmp(srv_cp *p, char c) { cp_putc(&p->tmp, c); }
void cp_rel_val(srv_cp *p, char c) { cp_putc(&p->val, c); }
static void rel_reason(srv_cp *p, char c) {
    reason_char(p, c);
    legacy(p, &c, 1);
}

/* ==== JSON call objects and arguments ==== */
static void jbuf_done(srv_cp *p);

static void st_jc_head(srv_cp *p, char c) {
    cp_putc(&p->hold, c);
    size_t off, len;
    cp_match m = cp_json_head(p->hold.p, p->hold.n, true, &off, &len);
    if (m == CP_PARTIAL) return;
    if (m == CP_MATCH) {
        cp_buf name = {0};
        cp_put(&name, p->hold.p + off, len);
        p->hold.n = 0;
        cp_call_begin(p, name.p, name.n);
        cp_free(&name);
        cp_av_start(p, S_JC_REST);
        return;
    }
    /* another key order: buffer the whole object and read it with a JSON parser */
    cp_buf h = p->hold;
    p->hold = (cp_buf){0};
    p->tmp.n = 0;
    p->scan = (cp_scan){0};
    p->sub = S_JBUF;
    for (size_t i = 0; i < h.n; i++) {
        cp_putc(&p->tmp, h.p[i]);
        if (!cp_scan_byte(&p->scan, h.p[i])) continue;
        /* closed already ({"name": "x"}): decide now; the bytes after it are read again when
         * it was a call (after a fallback they are in `raw`, which is re-read whole) */
        jbuf_done(p);
        if (p->committed) requeue(p, h.p + i + 1, h.n - i - 1);
        break;
    }
    cp_free(&h);
}

static void jbuf_done(srv_cp *p) {
    char *name = NULL, *args = NULL;
    if (cp_call_object(p->tmp.p, p->tmp.n, &name, &args)) {
        cp_fallback(p);
        return;
    }
    cp_call_begin(p, name, strlen(name));
    cp_out_args(p, args, strlen(args));
    free(name);
    free(args);
    cp_go(p, p->after_obj);
}

static void st_jbuf(srv_cp *p, char c) {
    cp_putc(&p->tmp, c);
    if (cp_scan_byte(&p->scan, c)) jbuf_done(p);
}

/* The arguments value: streamed as it comes when it is an object or array; a string value
 * (arguments given as a JSON text in a string) is decoded once complete. */
void cp_st_av(srv_cp *p, char c) {
    switch (p->av) {
    case AV_WS:
        if (cp_is_ws(c)) return;
        p->tmp.n = 0;
        if (c == '{' || c == '[') {
            p->scan = (cp_scan){0};
            cp_scan_byte(&p->scan, c);
            p->av = AV_CONT;
            cp_out_args(p, &c, 1);
        } else {
            cp_putc(&p->tmp, c);
            p->scan = (cp_scan){.in_str = c == '"'};
            p->av = c == '"' ? AV_STR : AV_SCALAR;
        }
        return;
    case AV_CONT:
        cp_out_args(p, &c, 1);
        if (cp_scan_byte(&p->scan, c)) cp_go(p, p->after_av);
        return;
    case AV_STR: {
        cp_putc(&p->tmp, c);
        cp_scan_byte(&p->scan, c);
        if (p->scan.in_str) return;
        size_t n = 0;
        char *s = cp_json_unquote(p->tmp.p, p->tmp.n, &n);
        if (s) cp_out_args(p, s, n);
        free(s);
        cp_go(p, p->after_av);
        return;
    }
    default: /* AV_SCALAR: a number, true, null ... until a delimiter, which is read again */
        if (c == ',' || c == '}' || c == ']' || cp_is_ws(c) || c == '<' || c == '`') {
            cp_out_args(p, p->tmp.p, p->tmp.n);
            cp_go(p, p->after_av);
            requeue(p, &c, 1);
            return;
        }
        cp_putc(&p->tmp, c);
    }
}

static void st_region(srv_cp *p, char c) {
    if (!p->committed) cp_putc(&p->raw, c);
    switch (p->sub) {
    case S_JC_HEAD: st_jc_head(p, c); return;
    case S_JBUF: st_jbuf(p, c); return;
    case S_AV: cp_st_av(p, c); return;
    case S_JC_REST:
        if (cp_scan_byte(&p->scan, c)) cp_go(p, p->after_obj);
        return;
    case S_L_TAIL:
        if (cp_is_ws(c)) return;
        cp_region_exit(p, c == ';' ? NULL : &c);
        return;
    default: break;
    }
    if (p->sub <= S_X_PVAL) cp_st_hermes(p, c);
    else if (p->sub <= S_M_CALLID) cp_st_mistral(p, c);
    else if (p->sub <= S_D_CLOSE) cp_st_deepseek(p, c);
    else cp_st_pytag(p, c);
}

/* ==== Content: the family's openers ==== */
typedef enum { O_HERMES, O_MISTRAL, O_DS_CALLS, O_DS_CALL, O_PYTAG, O_LLAMA } opener;

typedef struct lit_opener {
    opener o;
    const char *lit;
} lit_opener;

static cp_match openers(srv_cp *p, opener *which, size_t *noff, size_t *nlen) {
    const char *h = p->hold.p;
    const size_t n = p->hold.n;
    lit_opener lits[2];
    int nl = 0;
    switch (p->cfg.format) {
    case SRV_TOOLS_HERMES: lits[nl++] = (lit_opener){O_HERMES, "<tool_call>"}; break;
    case SRV_TOOLS_MISTRAL: lits[nl++] = (lit_opener){O_MISTRAL, "[TOOL_CALLS]"}; break;
    case SRV_TOOLS_DEEPSEEK_V3:
        lits[nl++] = (lit_opener){O_DS_CALLS, DS_CALLS_BEGIN};
        lits[nl++] = (lit_opener){O_DS_CALL, DS_CALL_BEGIN};
        break;
    case SRV_TOOLS_LLAMA3: lits[nl++] = (lit_opener){O_PYTAG, "<|python_tag|>"}; break;
    default: return CP_FAIL;
    }
    bool partial = false;
    for (int i = 0; i < nl; i++) {
        cp_match m = cp_lit(h, n, lits[i].lit);
        if (m == CP_MATCH) {
            *which = lits[i].o;
            return CP_MATCH;
        }
        partial |= m == CP_PARTIAL;
    }
    if (p->cfg.format == SRV_TOOLS_LLAMA3 && h[0] == '{') {
        /* a bare {"name": "TOOL", "parameters": ...}: only for a tool of the request, so that
         * a JSON answer is not taken for a call */
        cp_match m = cp_json_head(h, n, true, noff, nlen);
        if (m == CP_MATCH && srv_tool_set_has(p->cfg.tools, h + *noff, *nlen)) {
            *which = O_LLAMA;
            return CP_MATCH;
        }
        partial |= m == CP_PARTIAL;
    }
    return partial ? CP_PARTIAL : CP_FAIL;
}

static void region_open(srv_cp *p, opener o, size_t noff, size_t nlen) {
    p->top = T_REGION;
    p->committed = false;
    p->raw.n = 0;
    cp_put(&p->raw, p->hold.p, p->hold.n);
    switch (o) {
    case O_HERMES: p->sub = S_H_OPEN; break;
    case O_MISTRAL: p->sub = S_M_OPEN; break;
    case O_DS_CALLS: p->sub = S_D_OPEN; break;
    case O_DS_CALL: p->tmp.n = 0; p->sub = S_D_TYPE; break;
    case O_PYTAG: p->sub = S_P_OPEN; break;
    case O_LLAMA: {
        cp_buf name = {0};
        cp_put(&name, p->hold.p + noff, nlen);
        cp_call_begin(p, name.p, name.n);
        cp_free(&name);
        p->after_obj = S_L_TAIL;
        cp_av_start(p, S_JC_REST);
        break;
    }
    }
    p->hold.n = 0;
}

static void st_content(srv_cp *p, char c) {
    if (p->cfg.format == SRV_TOOLS_NONE) {
        content_char(p, c);
        return;
    }
    cp_putc(&p->hold, c);
    while (p->hold.n) {
        const char h0 = p->hold.p[0];
        cp_match m = CP_FAIL;
        opener o = O_HERMES;
        size_t noff = 0, nlen = 0;
        if (h0 == '<' || h0 == '[' || h0 == '{') m = openers(p, &o, &noff, &nlen);
        if (m == CP_PARTIAL) return;
        if (m == CP_MATCH) {
            region_open(p, o, noff, nlen);
            return;
        }
        cp_shift(&p->hold, 1);
        content_char(p, h0);
    }
}

/* ==== Reasoning ==== */
static void st_start(srv_cp *p, char c) {
    if (!p->hold.n && cp_is_ws(c)) {
        cp_putc(&p->tmp, c); /* leading whitespace: content again if no <think> follows */
        return;
    }
    cp_putc(&p->hold, c);
    switch (cp_lit(p->hold.p, p->hold.n, THINK_OPEN)) {
    case CP_PARTIAL: return;
    case CP_MATCH:
        legacy(p, p->tmp.p, p->tmp.n);
        legacy(p, THINK_OPEN, strlen(THINK_OPEN));
        p->tmp.n = 0;
        p->hold.n = 0;
        p->top = T_THINK;
        return;
    default:
        release_as_content(p);
    }
}

static void st_think(srv_cp *p, char c) {
    static const char *const close[] = {THINK_CLOSE};
    if (cp_hold_lits(p, c, close, 1, rel_reason) != 0) return;
    p->rws.n = 0; /* trailing whitespace of the thoughts */
    legacy(p, THINK_CLOSE, strlen(THINK_CLOSE));
    p->top = T_AFTER_THINK;
}

/* ==== Driver ==== */
static void step(srv_cp *p, char c) {
    switch (p->top) {
    case T_START: st_start(p, c); return;
    case T_THINK: st_think(p, c); return;
    case T_AFTER_THINK:
        if (cp_is_ws(c)) {
            legacy(p, &c, 1);
            return;
        }
        p->top = T_CONTENT;
        st_content(p, c);
        return;
    case T_CONTENT: st_content(p, c); return;
    default: st_region(p, c);
    }
}

/* Reads the queue up to byte `upto`; bytes a step puts back in front are read too. */
static void drain(srv_cp *p, size_t upto) {
    size_t left = upto - p->in_rd;
    while (left > 0) {
        const size_t before = p->in.n - p->in_rd;
        const char c = p->in.p[p->in_rd++];
        left--;
        step(p, c);
        left += (p->in.n - p->in_rd) - (before - 1); /* what a requeue added */
    }
    cp_shift(&p->in, p->in_rd);
    p->in_rd = 0;
}

srv_cp *srv_cp_new(const srv_cp_config *cfg) {
    srv_cp *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->cfg = *cfg;
    p->ev_kind = -1;
    static uint64_t counter;
    p->rng = cfg->id_seed ? cfg->id_seed
                          : ((uint64_t)time(NULL) << 20) ^ (uint64_t)(uintptr_t)p ^
                                (__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) * 0x9e3779b97f4a7c15ull);
    p->top = cfg->reasoning == SRV_REASONING_NONE ? T_CONTENT : cfg->start_in_reasoning ? T_THINK : T_START;
    return p;
}

void srv_cp_feed(srv_cp *p, const char *text, size_t n, srv_cp_sink sink, void *ctx) {
    p->sink = sink;
    p->sink_ctx = ctx;
    cp_put(&p->in, text, n);
    /* only whole characters are read: an event never ends inside one */
    drain(p, srv_utf8_complete(p->in.p ? p->in.p : "", p->in.n));
    ev_flush(p);
    p->sink = NULL;
}

void srv_cp_finish(srv_cp *p, srv_cp_sink sink, void *ctx) {
    p->sink = sink;
    p->sink_ctx = ctx;
    for (int guard = 0; guard < 1 << 20; guard++) {
        drain(p, p->in.n);
        if (p->top == T_START) { /* only whitespace and a partial "<think>": content */
            release_as_content(p);
            continue;
        }
        if (p->top == T_REGION && !p->committed) { /* never became a call */
            cp_fallback(p);
            continue;
        }
        if (p->top == T_CONTENT && p->hold.n) {
            /* a partial opener: its first byte is content, the rest may still hold one */
            cp_buf h = p->hold;
            p->hold = (cp_buf){0};
            content_char(p, h.p[0]);
            requeue(p, h.p + 1, h.n - 1);
            cp_free(&h);
            continue;
        }
        break;
    }
    if (p->top == T_THINK) {
        for (size_t i = 0; i < p->hold.n; i++) rel_reason(p, p->hold.p[i]);
        p->hold.n = 0;
    } else if (p->top == T_CONTENT) {
        if (p->ws.n && !p->n_seen) out_content(p, p->ws.p, p->ws.n);
    } else if (p->top == T_REGION) {
        if (p->sub == S_AV && p->av == AV_SCALAR) cp_out_args(p, p->tmp.p, p->tmp.n);
        if (p->sub == S_P_CODE) cp_out_args(p, "\"}", 2);
    }
    p->ws.n = 0;
    p->rws.n = 0;
    ev_flush(p);
    p->sink = NULL;
}

void srv_cp_free(srv_cp *p) {
    if (!p) return;
    cp_buf *bufs[] = {&p->hold, &p->raw, &p->ws, &p->rws, &p->in, &p->tmp, &p->key, &p->val,
                      &p->content, &p->reasoning, &p->ev};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cp_free(bufs[i]);
    for (int i = 0; i < p->n_calls; i++) {
        free(p->calls[i].name);
        cp_free(&p->calls[i].args);
    }
    free(p->calls);
    free(p);
}

/* ==== Accessors ==== */
const char *srv_cp_content(const srv_cp *p, size_t *len) {
    *len = p->content.n;
    return p->content.p ? p->content.p : "";
}

const char *srv_cp_reasoning(const srv_cp *p, size_t *len) {
    *len = p->reasoning.n;
    return p->reasoning.p ? p->reasoning.p : "";
}

int srv_cp_n_calls(const srv_cp *p) { return p->n_calls; }
const char *srv_cp_call_id(const srv_cp *p, int i) { return p->calls[i].id; }
const char *srv_cp_call_name(const srv_cp *p, int i) { return p->calls[i].name ? p->calls[i].name : ""; }

const char *srv_cp_call_args(const srv_cp *p, int i, size_t *len) {
    *len = p->calls[i].args.n;
    return p->calls[i].args.p ? p->calls[i].args.p : "";
}
