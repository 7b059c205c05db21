/* Parse states of a grammar, built lazily (a DFA over the pushdown automaton, as a regex engine
 * builds its lazy DFA).
 *
 * A configuration is (NFA node, stack): the node has byte edges to take next, the stack holds
 * the return nodes of the rules being parsed (hash-consed frames, so equal stacks have one id).
 * A state is the sorted set of configurations reachable after some input, plus whether the
 * root rule may end there; states are interned, so the same parse position always has the same
 * id. Each state has a row of next states per byte class, filled on demand (GR_UNKNOWN until
 * asked): the token-mask walk over the vocabulary trie (grammar_match.c) costs one table
 * lookup per trie node once the states around a position are known, and positions repeat (the
 * body of a string, the same key in the next array element, the same schema for the next
 * request), so most steps reuse rows and even whole masks.
 *
 * Growth is bounded: when the tables pass GR_RT_MAX_BYTES they are rebuilt with only the
 * states live matchers are in (gr_rt_maybe_compact). */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_internal.h"

/* ==== Hashing ==== */
static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static bool grow(void **p, size_t *cap, size_t need, size_t elem, size_t *bytes) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return false;
    *bytes += (c - *cap) * elem;
    *p = q, *cap = c;
    return true;
}

/* ==== Stacks ==== */
static bool stk_map_rehash(gr_rt *rt, uint32_t cap) {
    int32_t *m = malloc((size_t)cap * sizeof *m);
    if (!m) return false;
    memset(m, 0xff, (size_t)cap * sizeof *m);
    for (int id = 1; id < rt->n_stk; id++) {
        uint32_t h = (uint32_t)mix64(((uint64_t)(uint32_t)rt->stk_ret[id] << 32) | (uint32_t)rt->stk_parent[id]);
        while (m[h & (cap - 1)] >= 0) h++;
        m[h & (cap - 1)] = id;
    }
    rt->bytes += ((size_t)cap - rt->stk_map_cap) * sizeof *m;
    free(rt->stk_map);
    rt->stk_map = m, rt->stk_map_cap = cap;
    return true;
}

/* The stack with frame `ret` pushed on `parent`; -1 on out of memory. */
static int32_t stk_push(gr_rt *rt, int32_t ret, int32_t parent) {
    uint32_t h = (uint32_t)mix64(((uint64_t)(uint32_t)ret << 32) | (uint32_t)parent);
    for (uint32_t k = h;; k++) {
        int32_t id = rt->stk_map[k & (rt->stk_map_cap - 1)];
        if (id < 0) break;
        if (rt->stk_ret[id] == ret && rt->stk_parent[id] == parent) return id;
    }
    if ((size_t)(rt->n_stk + 1) * 2 > rt->stk_map_cap && !stk_map_rehash(rt, rt->stk_map_cap * 2)) return -1;
    size_t cap = (size_t)rt->cap_stk, cap2 = cap;
    if (!grow((void **)&rt->stk_ret, &cap, (size_t)rt->n_stk + 1, sizeof(int32_t), &rt->bytes) ||
        !grow((void **)&rt->stk_parent, &cap2, (size_t)rt->n_stk + 1, sizeof(int32_t), &rt->bytes))
        return -1;
    rt->cap_stk = (int)(cap < cap2 ? cap : cap2);
    const int32_t id = rt->n_stk++;
    rt->stk_ret[id] = ret, rt->stk_parent[id] = parent;
    uint32_t k = h;
    while (rt->stk_map[k & (rt->stk_map_cap - 1)] >= 0) k++;
    rt->stk_map[k & (rt->stk_map_cap - 1)] = id;
    return id;
}

/* ==== States ==== */
static uint64_t state_hash(const uint64_t *c, size_t n, bool accept) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n ^ ((uint64_t)accept << 63);
    for (size_t i = 0; i < n; i++) h = mix64(h ^ c[i]) + i;
    return h;
}

static bool st_map_rehash(gr_rt *rt, uint32_t cap) {
    int32_t *m = malloc((size_t)cap * sizeof *m);
    if (!m) return false;
    memset(m, 0xff, (size_t)cap * sizeof *m);
    for (int id = 0; id < rt->n_st; id++) {
        uint32_t h = (uint32_t)state_hash(rt->cfgs + rt->st_off[id], rt->st_n[id], rt->st_accept[id]);
        while (m[h & (cap - 1)] >= 0) h++;
        m[h & (cap - 1)] = id;
    }
    rt->bytes += ((size_t)cap - rt->st_map_cap) * sizeof *m;
    free(rt->st_map);
    rt->st_map = m, rt->st_map_cap = cap;
    return true;
}

/* The id of state (c[0..n) sorted, accept); GR_FAIL on out of memory. */
static int32_t st_intern(gr_rt *rt, const uint64_t *c, size_t n, bool accept) {
    const uint32_t h = (uint32_t)state_hash(c, n, accept);
    for (uint32_t k = h;; k++) {
        int32_t id = rt->st_map[k & (rt->st_map_cap - 1)];
        if (id < 0) break;
        if (rt->st_n[id] == n && rt->st_accept[id] == accept && (!n || !memcmp(rt->cfgs + rt->st_off[id], c, n * sizeof *c)))
            return id;
    }
    if ((size_t)(rt->n_st + 1) * 2 > rt->st_map_cap && !st_map_rehash(rt, rt->st_map_cap * 2)) return GR_FAIL;
    size_t cap_cfgs = rt->cap_cfgs;
    if (!grow((void **)&rt->cfgs, &cap_cfgs, rt->n_cfgs + n, sizeof *rt->cfgs, &rt->bytes)) return GR_FAIL;
    rt->cap_cfgs = cap_cfgs;
    size_t caps[5] = {(size_t)rt->cap_st, (size_t)rt->cap_st, (size_t)rt->cap_st, (size_t)rt->cap_st, 0};
    const size_t need = (size_t)rt->n_st + 1;
    if (!grow((void **)&rt->st_off, &caps[0], need, sizeof *rt->st_off, &rt->bytes) ||
        !grow((void **)&rt->st_n, &caps[1], need, sizeof *rt->st_n, &rt->bytes) ||
        !grow((void **)&rt->st_accept, &caps[2], need, sizeof *rt->st_accept, &rt->bytes) ||
        !grow((void **)&rt->st_mask, &caps[3], need, sizeof *rt->st_mask, &rt->bytes))
        return GR_FAIL;
    size_t rows_cap = (size_t)rt->cap_st * (size_t)rt->K;
    if (!grow((void **)&rt->rows, &rows_cap, need * (size_t)rt->K, sizeof *rt->rows, &rt->bytes)) return GR_FAIL;
    size_t m = caps[0];
    for (int i = 1; i < 4; i++) m = caps[i] < m ? caps[i] : m;
    if (rows_cap / (size_t)rt->K < m) m = rows_cap / (size_t)rt->K;
    rt->cap_st = (int)m;
    const int32_t id = rt->n_st++;
    rt->st_off[id] = (uint32_t)rt->n_cfgs;
    rt->st_n[id] = (uint32_t)n;
    rt->st_accept[id] = accept;
    rt->st_mask[id] = -1;
    if (n) memcpy(rt->cfgs + rt->n_cfgs, c, n * sizeof *c);
    rt->n_cfgs += n;
    int32_t *row = rt->rows + (size_t)id * (size_t)rt->K;
    for (int k = 0; k < rt->K; k++) row[k] = GR_UNKNOWN;
    uint32_t k = h;
    while (rt->st_map[k & (rt->st_map_cap - 1)] >= 0) k++;
    rt->st_map[k & (rt->st_map_cap - 1)] = id;
    return id;
}

/* ==== Closure ==== */
/* Marks cfg seen in this closure; false when it already was. */
static bool seen_add(gr_rt *rt, uint64_t cfg) {
    uint32_t h = (uint32_t)mix64(cfg);
    for (;; h++) {
        uint32_t k = h & (rt->seen_cap - 1);
        if (rt->seen_stamp[k] != rt->stamp) {
            rt->seen_stamp[k] = rt->stamp, rt->seen_key[k] = cfg;
            return true;
        }
        if (rt->seen_key[k] == cfg) return false;
    }
}

/* Doubles the seen table, keeping this closure's entries. */
static bool seen_grow(gr_rt *rt) {
    const uint32_t cap = rt->seen_cap * 2;
    uint64_t *key = malloc((size_t)cap * sizeof *key);
    uint32_t *stamp = calloc((size_t)cap, sizeof *stamp);
    if (!key || !stamp) return free(key), free(stamp), false;
    for (uint32_t i = 0; i < rt->seen_cap; i++) {
        if (rt->seen_stamp[i] != rt->stamp) continue;
        uint32_t h = (uint32_t)mix64(rt->seen_key[i]);
        while (stamp[h & (cap - 1)] == rt->stamp) h++;
        stamp[h & (cap - 1)] = rt->stamp, key[h & (cap - 1)] = rt->seen_key[i];
    }
    rt->bytes += (size_t)(cap - rt->seen_cap) * 12;
    free(rt->seen_key), free(rt->seen_stamp);
    rt->seen_key = key, rt->seen_stamp = stamp, rt->seen_cap = cap;
    return true;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static inline uint64_t cfg_of(int32_t node, int32_t stk) { return ((uint64_t)(uint32_t)node << 32) | (uint32_t)stk; }

/* Everything reachable from the seeds rt->work[0..n) without consuming a byte: configurations at
 * nodes with byte edges, and whether the root can end. Interned. */
static int32_t closure(gr_rt *rt, size_t n) {
    const grammar *g = rt->g;
    if (++rt->stamp == 0) { /* stamps wrapped: clear */
        memset(rt->seen_stamp, 0, (size_t)rt->seen_cap * sizeof *rt->seen_stamp);
        rt->stamp = 1;
    }
    size_t n_out = 0, visited = 0;
    bool accept = false;
    while (n) {
        const uint64_t cfg = rt->work[--n];
        if ((visited + 1) * 2 > rt->seen_cap && !seen_grow(rt)) return GR_FAIL;
        if (!seen_add(rt, cfg)) continue;
        if (++visited > 4 * (size_t)GR_MAX_CFG) return GR_FAIL;
        const int32_t node = (int32_t)(cfg >> 32), stk = (int32_t)(uint32_t)cfg;
        const gn_node *nd = &g->nodes[node];
        /* room for every push of this node: its edges plus a pop */
        if (!grow((void **)&rt->work, &rt->cap_work, n + nd->ne + 1, sizeof *rt->work, &rt->bytes)) return GR_FAIL;
        if (nd->has_byte) {
            if (!grow((void **)&rt->out, &rt->cap_out, n_out + 1, sizeof *rt->out, &rt->bytes)) return GR_FAIL;
            rt->out[n_out++] = cfg;
        }
        for (uint32_t e = nd->e0; e < nd->e0 + nd->ne; e++) {
            const gn_edge *ed = &g->edges[e];
            if (ed->kind == GE_EPS) rt->work[n++] = cfg_of(ed->to, stk);
            else if (ed->kind == GE_CALL) {
                int32_t s2 = g->nodes[ed->to].pure_ret ? stk : stk_push(rt, ed->to, stk);
                if (s2 < 0) return GR_FAIL;
                rt->work[n++] = cfg_of(g->rule_start[ed->rule], s2);
            }
        }
        if (nd->end) {
            if (stk == 0) accept = true;
            else rt->work[n++] = cfg_of(rt->stk_ret[stk], rt->stk_parent[stk]);
        }
    }
    if (n_out > GR_MAX_CFG) return GR_FAIL;
    if (!n_out && !accept) return GR_DEAD;
    if (n_out > 1) qsort(rt->out, n_out, sizeof *rt->out, cmp_u64);
    return st_intern(rt, rt->out, n_out, accept);
}

int32_t gr_rt_step(gr_rt *rt, int32_t s, int c) {
    const grammar *g = rt->g;
    const uint8_t b = g->cls_rep[c];
    size_t n = 0;
    const uint32_t off = rt->st_off[s], cnt = rt->st_n[s];
    for (uint32_t i = 0; i < cnt; i++) {
        const uint64_t cfg = rt->cfgs[off + i];
        const gn_node *nd = &g->nodes[cfg >> 32];
        for (uint32_t e = nd->e0; e < nd->e0 + nd->ne; e++) {
            const gn_edge *ed = &g->edges[e];
            if (ed->kind != GE_BYTE || b < ed->lo || b > ed->hi) continue;
            if (!grow((void **)&rt->work, &rt->cap_work, n + 1, sizeof *rt->work, &rt->bytes)) return GR_FAIL;
            rt->work[n++] = cfg_of(ed->to, (int32_t)(uint32_t)cfg);
        }
    }
    const int32_t t = n ? closure(rt, n) : GR_DEAD;
    if (t != GR_FAIL) rt->rows[(size_t)s * (size_t)rt->K + (size_t)c] = t >= 0 ? t * rt->K : t;
    return t;
}

/* ==== Lifecycle ==== */
static void rt_clear(gr_rt *rt) {
    free(rt->stk_ret), free(rt->stk_parent), free(rt->stk_map);
    free(rt->cfgs), free(rt->st_off), free(rt->st_n), free(rt->st_accept), free(rt->st_mask), free(rt->st_map);
    free(rt->rows), free(rt->work), free(rt->out), free(rt->seen_key), free(rt->seen_stamp), free(rt->mask_pool);
    grammar *g = rt->g;
    grammar_matcher *live = rt->live;
    memset(rt, 0, sizeof *rt);
    rt->g = g, rt->live = live;
}

/* Empty tables: the empty stack (id 0) and the initial state. */
static int rt_init(gr_rt *rt) {
    const grammar *g = rt->g;
    rt->K = g->n_cls;
    rt->initial = GR_FAIL;
    rt->seen_cap = 256;
    rt->seen_key = malloc((size_t)rt->seen_cap * sizeof *rt->seen_key);
    rt->seen_stamp = calloc((size_t)rt->seen_cap, sizeof *rt->seen_stamp);
    rt->stk_map_cap = 1024, rt->st_map_cap = 1024;
    rt->stk_map = malloc((size_t)rt->stk_map_cap * sizeof *rt->stk_map);
    rt->st_map = malloc((size_t)rt->st_map_cap * sizeof *rt->st_map);
    size_t cap = 0;
    if (!rt->seen_key || !rt->seen_stamp || !rt->stk_map || !rt->st_map ||
        !grow((void **)&rt->stk_ret, &cap, 64, sizeof(int32_t), &rt->bytes))
        return -1;
    cap = 0;
    if (!grow((void **)&rt->stk_parent, &cap, 64, sizeof(int32_t), &rt->bytes)) return -1;
    rt->cap_stk = 64;
    rt->bytes += (size_t)rt->seen_cap * 12 + (size_t)(rt->stk_map_cap + rt->st_map_cap) * 4;
    memset(rt->stk_map, 0xff, (size_t)rt->stk_map_cap * sizeof *rt->stk_map);
    memset(rt->st_map, 0xff, (size_t)rt->st_map_cap * sizeof *rt->st_map);
    rt->stk_ret[0] = rt->stk_parent[0] = -1;
    rt->n_stk = 1;
    if (!grow((void **)&rt->work, &rt->cap_work, 16, sizeof *rt->work, &rt->bytes)) return -1;
    rt->work[0] = cfg_of(g->rule_start[g->root], 0);
    rt->initial = closure(rt, 1);
    return rt->initial >= 0 || rt->initial == GR_DEAD ? 0 : -1;
}

gr_rt *gr_rt_get(grammar *g) {
    if (g->rt) return g->rt;
    gr_rt *rt = calloc(1, sizeof *rt);
    if (!rt) return NULL;
    rt->g = g;
    if (rt_init(rt)) {
        gr_rt_free(rt);
        return NULL;
    }
    g->rt = rt;
    return rt;
}

void gr_rt_free(gr_rt *rt) {
    if (!rt) return;
    rt_clear(rt);
    free(rt);
}

/* ==== Compaction ==== */
/* A live matcher's state written out as (accept, n, then per configuration: node, depth,
 * return nodes from the top of the stack down). */
static bool dump_state(const gr_rt *rt, int32_t s, int32_t **buf, size_t *n, size_t *cap) {
    size_t dummy = 0;
    if (!grow((void **)buf, cap, *n + 2, sizeof **buf, &dummy)) return false;
    (*buf)[(*n)++] = rt->st_accept[s];
    (*buf)[(*n)++] = (int32_t)rt->st_n[s];
    for (uint32_t i = 0; i < rt->st_n[s]; i++) {
        const uint64_t cfg = rt->cfgs[rt->st_off[s] + i];
        int32_t depth = 0;
        for (int32_t k = (int32_t)(uint32_t)cfg; k; k = rt->stk_parent[k]) depth++;
        if (!grow((void **)buf, cap, *n + 2 + (size_t)depth, sizeof **buf, &dummy)) return false;
        (*buf)[(*n)++] = (int32_t)(cfg >> 32);
        (*buf)[(*n)++] = depth;
        for (int32_t k = (int32_t)(uint32_t)cfg; k; k = rt->stk_parent[k]) (*buf)[(*n)++] = rt->stk_ret[k];
    }
    return true;
}

static int32_t load_state(gr_rt *rt, const int32_t *buf, size_t *at) {
    const bool accept = buf[(*at)++];
    const int32_t n = buf[(*at)++];
    uint64_t *c = malloc(((size_t)n + 1) * sizeof *c);
    if (!c) return GR_FAIL;
    for (int32_t i = 0; i < n; i++) {
        const int32_t node = buf[(*at)++], depth = buf[(*at)++];
        const int32_t *rets = buf + *at; /* top first: push from the bottom */
        *at += (size_t)depth;
        int32_t stk = 0;
        for (int32_t d = depth - 1; d >= 0 && stk >= 0; d--) stk = stk_push(rt, rets[d], stk);
        if (stk < 0) return free(c), GR_FAIL;
        c[i] = cfg_of(node, stk);
    }
    qsort(c, (size_t)n, sizeof *c, cmp_u64);
    int32_t id = st_intern(rt, c, (size_t)n, accept);
    free(c);
    return id;
}

int gr_rt_maybe_compact(gr_rt *rt) {
    if (rt->bytes < GR_RT_MAX_BYTES) return 0;
    int32_t *buf = NULL;
    size_t n = 0, cap = 0;
    for (grammar_matcher *m = rt->live; m; m = m->next)
        if (m->state >= 0 && !dump_state(rt, m->state, &buf, &n, &cap)) {
            free(buf);
            return -1;
        }
    const uint64_t nc = rt->n_compactions + 1;
    rt_clear(rt);
    rt->n_compactions = nc;
    if (rt_init(rt)) {
        free(buf);
        return -1;
    }
    size_t at = 0;
    for (grammar_matcher *m = rt->live; m; m = m->next)
        if (m->state >= 0 && (m->state = load_state(rt, buf, &at)) == GR_FAIL) {
            free(buf);
            return -1;
        }
    free(buf);
    return 0;
}
