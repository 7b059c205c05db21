/* The per-sequence matcher: a parse state advanced by the bytes of sampled tokens, and the mask
 * of tokens allowed next, computed by one linear walk of the vocabulary trie against the
 * grammar's lazily built state rows (grammar_rt.c) and cached per state. */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_internal.h"

/* ==== Mask cache (per grammar, for one vocabulary at a time) ==== */
static int mask_words_of(const grammar_vocab *v) { return (v->n_tokens + 31) / 32; }

/* Pool slots and matcher masks hold one scratch word before the mask (see mask_walk). */

/* A free slot of the pool; when full, every cached mask is dropped (they are cheap to redo
 * next to a model step, and the states that matter come back at once). */
static uint32_t *mask_slot_new(gr_rt *rt, int32_t s) {
    if (rt->n_mask == rt->mask_cap) {
        const size_t per = (size_t)(rt->mask_words + 1) * sizeof(uint32_t);
        int cap = rt->mask_cap ? 2 * rt->mask_cap : 16;
        if ((size_t)cap * per > GR_MASK_CACHE_BYTES) cap = (int)(GR_MASK_CACHE_BYTES / per);
        if (cap < 1) cap = 1;
        if (cap > rt->mask_cap) {
            uint32_t *p = realloc(rt->mask_pool, (size_t)cap * per);
            if (p) {
                rt->bytes += (size_t)(cap - rt->mask_cap) * per;
                rt->mask_pool = p, rt->mask_cap = cap;
            }
        }
        if (rt->n_mask == rt->mask_cap) { /* full (or no memory): start over */
            for (int i = 0; i < rt->n_st; i++) rt->st_mask[i] = -1;
            rt->n_mask = 0;
            if (!rt->mask_cap) return NULL;
        }
    }
    rt->st_mask[s] = rt->n_mask;
    return rt->mask_pool + (size_t)rt->n_mask++ * (size_t)(rt->mask_words + 1);
}

/* ==== The walk ==== */
/* bits[0..words) = the tokens whose bytes can follow state s0 (EOS where it may end).
 * st: [max_depth + 1] scratch (row offsets per depth). Returns -1 when a table could not grow.
 *
 * Preorder scan: a node's parent state is the row offset kept for depth - 1; a refused prefix
 * jumps over its subtree. While the next node is the current one's child (descending a token's
 * bytes), the offset stays in a register: the chain from one byte to the next is one L1 load
 * and an add. The token bit is set without a branch (tokp 0 hits a scratch word before bits). */
static int mask_walk(gr_rt *rt, const grammar_vocab *v, int32_t s0, uint32_t *bits_ext, int words, int32_t *st) {
    uint32_t *bits = bits_ext + 1;
    memset(bits_ext, 0, (size_t)(words + 1) * sizeof *bits);
    const gv_node *nd = v->nodes;
    const int N = v->n_nodes;
    const uint8_t *cls = rt->g->cls;
    const int32_t K = rt->K;
    const int32_t *rows = rt->rows;
    st[0] = s0 * K;
    for (int i = 0; i < N;) {
        const gv_node *x = &nd[i];
        const int d = x->depth;
        int32_t t = rows[st[d - 1] + cls[x->byte]];
        if (__builtin_expect(t < 0, 0)) {
            if (t == GR_UNKNOWN) {
                t = gr_rt_step(rt, st[d - 1] / K, cls[x->byte]);
                if (t == GR_FAIL) return -1;
                rows = rt->rows; /* the tables may have moved */
                t = t >= 0 ? t * K : t;
            }
            if (t < 0) {
                i = v->skip[i];
                continue;
            }
        }
        st[d] = t;
        bits_ext[x->tokp >> 5] |= 1u << (x->tokp & 31);
        i++;
    }
    for (int k = 0; k < v->n_dups; k++) {
        const int32_t a = v->dups[2 * k], b = v->dups[2 * k + 1];
        if (bits[a >> 5] >> (a & 31) & 1) bits[b >> 5] |= 1u << (b & 31);
    }
    if (gr_rt_accepting(rt, s0))
        for (int k = 0; k < v->n_eos; k++) bits[v->eos[k] >> 5] |= 1u << (v->eos[k] & 31);
    return 0;
}

/* ==== Matcher ==== */
grammar_matcher *grammar_matcher_new(grammar *g, grammar_vocab *v, mx_error *err) {
    grammar_matcher *m = calloc(1, sizeof *m);
    if (!m) return mx_fail(err, "grammar: out of memory"), NULL;
    m->wstate = malloc((size_t)(v->max_depth + 2) * sizeof *m->wstate);
    if (!m->wstate) {
        free(m);
        return mx_fail(err, "grammar: out of memory"), NULL;
    }
    pthread_mutex_lock(&g->mu);
    gr_rt *rt = gr_rt_get(g);
    if (!rt) {
        pthread_mutex_unlock(&g->mu);
        free(m->wstate);
        free(m);
        return mx_fail(err, "grammar: out of memory building the parse tables"), NULL;
    }
    m->state = rt->initial;
    m->next = rt->live;
    if (rt->live) rt->live->prev = m;
    rt->live = m;
    pthread_mutex_unlock(&g->mu);
    m->g = grammar_retain(g);
    m->v = grammar_vocab_retain(v);
    return m;
}

void grammar_matcher_free(grammar_matcher *m) {
    if (!m) return;
    grammar *g = m->g;
    pthread_mutex_lock(&g->mu);
    if (m->prev) m->prev->next = m->next;
    else if (g->rt) g->rt->live = m->next;
    if (m->next) m->next->prev = m->prev;
    pthread_mutex_unlock(&g->mu);
    grammar_release(g);
    grammar_vocab_release(m->v);
    free(m->mask_buf);
    free(m->wstate);
    free(m);
}

const uint32_t *grammar_matcher_mask(grammar_matcher *m, int n_vocab, mx_error *err) {
    const int words = (n_vocab + 31) / 32, vw = mask_words_of(m->v);
    const int need = words > vw ? words : vw; /* the walk may write vw words here */
    if (need > m->mask_words) {
        uint32_t *p = realloc(m->mask_buf, (size_t)(need + 1) * sizeof *p);
        if (!p) return mx_fail(err, "grammar: out of memory"), NULL;
        m->mask_buf = p, m->mask_words = need;
    }
    uint32_t *mask = m->mask_buf + 1;
    memset(mask, 0, (size_t)words * sizeof *mask);
    if (m->ended || m->state < 0) return mask; /* nothing may follow */
    grammar *g = m->g;
    pthread_mutex_lock(&g->mu);
    gr_rt *rt = g->rt;
    int rc = gr_rt_maybe_compact(rt);
    if (!rc && rt->mask_vocab != m->v) { /* another vocabulary: its masks differ */
        for (int i = 0; i < rt->n_st; i++) rt->st_mask[i] = -1;
        rt->n_mask = 0;
        if (rt->mask_words != vw) {
            free(rt->mask_pool);
            rt->mask_pool = NULL, rt->mask_cap = 0;
        }
        rt->mask_vocab = m->v, rt->mask_words = vw;
    }
    const uint32_t *src = NULL;
    if (!rc) {
        if (rt->st_mask[m->state] >= 0) {
            src = rt->mask_pool + (size_t)rt->st_mask[m->state] * (size_t)(vw + 1) + 1;
        } else {
            uint32_t *slot = mask_slot_new(rt, m->state);
            uint32_t *dst = slot ? slot : m->mask_buf; /* no cache slot: straight into the matcher */
            rc = mask_walk(rt, m->v, m->state, dst, vw, m->wstate);
            if (rc && slot) rt->st_mask[m->state] = -1, rt->n_mask--;
            src = dst + 1;
        }
    }
    if (!rc && src != mask) memcpy(mask, src, (size_t)(vw < words ? vw : words) * sizeof *mask);
    pthread_mutex_unlock(&g->mu);
    if (rc) return mx_fail(err, "grammar: the parse tables could not grow (out of memory, or an ambiguous grammar "
                                "past %d parse positions at once)", GR_MAX_CFG), NULL;
    if (vw >= words && n_vocab % 32) /* tokens past n_vocab: the model cannot produce them */
        mask[words - 1] &= (1u << (n_vocab % 32)) - 1;
    return mask;
}

/* Steps the state through bytes; GR_DEAD / GR_FAIL when refused. Caller holds g->mu. */
static int32_t step_bytes(gr_rt *rt, int32_t s, const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n && s >= 0; i++) s = gr_rt_next(rt, s, b[i]);
    return s;
}

int grammar_matcher_accept(grammar_matcher *m, int32_t token, mx_error *err) {
    const grammar_vocab *v = m->v;
    if (m->ended) return mx_fail(err, "grammar: token %d after the end of the grammar", token);
    if (grammar_vocab_is_eos(v, token)) {
        if (!grammar_matcher_can_end(m)) return mx_fail(err, "grammar: EOS token %d before the grammar is complete", token);
        m->ended = true;
        return 0;
    }
    if (token < 0 || token >= v->n_tokens || !v->len[token] || (v->flags[token] & GRAMMAR_TOKEN_SPECIAL))
        return mx_fail(err, "grammar: token %d cannot appear inside the grammar", token);
    return grammar_matcher_accept_bytes(m, (const char *)v->data + v->off[token], v->len[token], err);
}

int grammar_matcher_accept_bytes(grammar_matcher *m, const char *s, size_t n, mx_error *err) {
    if (m->state < 0) return mx_fail(err, "grammar: nothing can follow");
    pthread_mutex_lock(&m->g->mu);
    gr_rt *rt = m->g->rt;
    int32_t t = gr_rt_maybe_compact(rt) ? GR_FAIL : step_bytes(rt, m->state, (const uint8_t *)s, n);
    if (t >= 0) m->state = t;
    pthread_mutex_unlock(&m->g->mu);
    if (t == GR_FAIL) return mx_fail(err, "grammar: the parse tables could not grow");
    if (t < 0) return mx_fail(err, "grammar: the text does not continue the grammar");
    return 0;
}

bool grammar_matcher_can_end(const grammar_matcher *m) {
    if (m->state < 0) return false;
    pthread_mutex_lock(&m->g->mu);
    bool r = gr_rt_accepting(m->g->rt, m->state);
    pthread_mutex_unlock(&m->g->mu);
    return r;
}

bool grammar_matcher_is_done(const grammar_matcher *m) {
    if (m->state < 0) return false;
    pthread_mutex_lock(&m->g->mu);
    bool r = gr_rt_done(m->g->rt, m->state);
    pthread_mutex_unlock(&m->g->mu);
    return r;
}

bool grammar_matcher_ended(const grammar_matcher *m) { return m->ended; }

bool grammar_accepts(grammar *g, const char *s, size_t n) {
    pthread_mutex_lock(&g->mu);
    gr_rt *rt = gr_rt_get(g);
    bool ok = false;
    if (rt && rt->initial >= 0) {
        int32_t t = step_bytes(rt, rt->initial, (const uint8_t *)s, n);
        ok = t >= 0 && gr_rt_accepting(rt, t);
    }
    pthread_mutex_unlock(&g->mu);
    return ok;
}

/* ==== Applying a mask ==== */
void grammar_mask_apply(const uint32_t *mask, float *logits, int n) {
    const float ninf = -__builtin_inff();
    for (int w = 0; w * 32 < n; w++) {
        const uint32_t bits = mask[w];
        if (bits == 0xFFFFFFFFu) continue;
        const int lim = n - w * 32 < 32 ? n - w * 32 : 32;
        float *l = logits + (size_t)w * 32;
        if (!bits) {
            for (int i = 0; i < lim; i++) l[i] = ninf;
            continue;
        }
        for (int i = 0; i < lim; i++)
            if (!(bits >> i & 1)) l[i] = ninf;
    }
}

/* ==== Shortest sentence ==== */
int grammar_min_length(grammar *g, int limit) {
    pthread_mutex_lock(&g->mu);
    gr_rt *rt = gr_rt_get(g);
    int result = -1;
    int32_t *dist = NULL, *q = NULL;
    size_t cap = 0, qn = 0;
    if (!rt || rt->initial < 0) goto out;
    for (size_t h = 0;; h++) {
        if (h == 0) { /* seed */
            cap = (size_t)rt->n_st + 1024;
            dist = malloc(cap * sizeof *dist), q = malloc(cap * sizeof *q);
            if (!dist || !q) goto out;
            for (size_t i = 0; i < cap; i++) dist[i] = -1;
            dist[rt->initial] = 0, q[qn++] = rt->initial;
        }
        if (h >= qn) break;
        const int32_t s = q[h];
        if (gr_rt_accepting(rt, s)) {
            result = dist[s];
            break;
        }
        if (dist[s] >= limit) continue;
        for (int c = 0; c < rt->K; c++) {
            int32_t t = rt->rows[(size_t)s * (size_t)rt->K + (size_t)c];
            t = t == GR_UNKNOWN ? gr_rt_step(rt, s, c) : t < 0 ? t : t / rt->K;
            if (t == GR_FAIL) goto out;
            if (t < 0) continue;
            if ((size_t)t >= cap || qn >= cap) {
                size_t nc = ((size_t)rt->n_st > qn ? (size_t)rt->n_st : qn) * 2 + 1024;
                int32_t *nd = realloc(dist, nc * sizeof *nd), *nq = nd ? realloc(q, nc * sizeof *nq) : NULL;
                if (nd) dist = nd;
                if (!nd || !nq) goto out;
                q = nq;
                for (size_t i = cap; i < nc; i++) dist[i] = -1;
                cap = nc;
            }
            if (dist[t] < 0) dist[t] = dist[s] + 1, q[qn++] = t;
        }
    }
out:
    free(dist), free(q);
    pthread_mutex_unlock(&g->mu);
    return result;
}
