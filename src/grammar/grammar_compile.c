/* AST -> byte-level NFA (Thompson construction per rule), then the checks and tables the
 * runtime relies on: byte classes, tail-call returns, nullable rules and the refusal of left
 * recursion (which would make the epsilon closure push frames forever).
 *
 * Each rule is a start node and edges: GE_BYTE (a byte range), GE_EPS, GE_CALL (enter a rule,
 * continue at the return node when it finishes). Character classes become UTF-8 byte-range
 * sequences (RE2's split of a code point range into ranges of equal-length encodings), sharing
 * their lead-byte prefixes. A large bounded repetition of a large fragment compiles that
 * fragment once as an anonymous rule and chains calls to it, so `x{1000}` costs 1000 nodes,
 * not 1000 copies of x. */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_internal.h"

/* ==== Builder ==== */
typedef struct nb_edge {
    int32_t from;
    gn_edge e;
} nb_edge;

typedef struct nb {
    ga_grammar *ast;
    gn_node *nodes;
    int n, cap;
    nb_edge *edges;
    int ne, cap_e;
    int32_t *start;            /* [n_rules] start node per rule (AST rules first, then anonymous) */
    int32_t *owner;            /* [n_rules] AST rule an anonymous rule was cut from (names) */
    int n_rules, cap_rules;
    mx_error *err;
    bool fail;
} nb;

static int nb_fail(nb *b, const char *msg) {
    if (!b->fail) mx_fail(b->err, "grammar: %s", msg);
    b->fail = true;
    return -1;
}

static int32_t node_new(nb *b) {
    if (b->fail) return 0;
    if (b->n >= GR_MAX_NODES) return nb_fail(b, "too large (more than 1048576 automaton nodes; lower the repetition counts)"), 0;
    if (b->n == b->cap) {
        int cap = b->cap ? 2 * b->cap : 1024;
        gn_node *nn = realloc(b->nodes, (size_t)cap * sizeof *nn);
        if (!nn) return nb_fail(b, "out of memory"), 0;
        b->nodes = nn, b->cap = cap;
    }
    memset(&b->nodes[b->n], 0, sizeof b->nodes[b->n]);
    return b->n++;
}

static void edge_add(nb *b, int32_t from, uint8_t kind, uint8_t lo, uint8_t hi, int32_t to, int32_t rule) {
    if (b->fail) return;
    if (b->ne >= 8 * GR_MAX_NODES) {
        nb_fail(b, "too large (too many automaton edges)");
        return;
    }
    if (b->ne == b->cap_e) {
        int cap = b->cap_e ? 2 * b->cap_e : 2048;
        nb_edge *ne = realloc(b->edges, (size_t)cap * sizeof *ne);
        if (!ne) {
            nb_fail(b, "out of memory");
            return;
        }
        b->edges = ne, b->cap_e = cap;
    }
    b->edges[b->ne++] = (nb_edge){from, {kind, lo, hi, to, rule}};
}

static void eps(nb *b, int32_t from, int32_t to) {
    if (from != to) edge_add(b, from, GE_EPS, 0, 0, to, 0);
}

static int rule_new(nb *b, int32_t owner) {
    if (b->n_rules >= GR_MAX_RULES) return nb_fail(b, "too many rules");
    if (b->n_rules == b->cap_rules) {
        int cap = b->cap_rules ? 2 * b->cap_rules : 64;
        int32_t *s = realloc(b->start, (size_t)cap * sizeof *s);
        if (s) b->start = s;
        int32_t *o = realloc(b->owner, (size_t)cap * sizeof *o);
        if (o) b->owner = o;
        if (!s || !o) return nb_fail(b, "out of memory");
        b->cap_rules = cap;
    }
    b->start[b->n_rules] = -1;
    b->owner[b->n_rules] = owner;
    return b->n_rules++;
}

/* ==== UTF-8 ranges ==== */
/* Appends to seq[] the byte-range sequences (each: len, then len lo/hi pairs) of the code
 * points [lo, hi] (no surrogates inside). */
typedef struct u8seq {
    int len;
    uint8_t lo[4], hi[4];
} u8seq;

static void utf8_split(uint32_t lo, uint32_t hi, u8seq *out, int *n, int cap) {
    static const uint32_t lim[3] = {0x7F, 0x7FF, 0xFFFF};
    for (int k = 0; k < 3; k++)
        if (lo <= lim[k] && hi > lim[k]) {
            utf8_split(lo, lim[k], out, n, cap);
            utf8_split(lim[k] + 1, hi, out, n, cap);
            return;
        }
    int len = lo < 0x80 ? 1 : lo < 0x800 ? 2 : lo < 0x10000 ? 3 : 4;
    for (int i = 1; i < len; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                utf8_split(lo, lo | m, out, n, cap);
                utf8_split((lo | m) + 1, hi, out, n, cap);
                return;
            }
            if ((hi & m) != m) {
                utf8_split(lo, (hi & ~m) - 1, out, n, cap);
                utf8_split(hi & ~m, hi, out, n, cap);
                return;
            }
        }
    }
    if (*n >= cap) return;
    uint8_t a[4], z[4];
    gr_utf8_encode(lo, a);
    gr_utf8_encode(hi, z);
    u8seq *s = &out[(*n)++];
    s->len = len;
    for (int i = 0; i < len; i++) s->lo[i] = a[i], s->hi[i] = z[i];
}

/* ==== Fragments ==== */
static int32_t frag(nb *b, ga_node *x, int32_t in);

static int32_t frag_class(nb *b, const ga_node *x, int32_t in) {
    int32_t out = node_new(b);
    u8seq seq[64];
    const int e_first = b->ne; /* edges of this class: their prefixes are shared */
    for (int r = 0; r < x->n && !b->fail; r++) {
        int n = 0;
        utf8_split(x->ranges[2 * r], x->ranges[2 * r + 1], seq, &n, 64);
        for (int k = 0; k < n; k++) {
            int32_t cur = in;
            for (int j = 0; j + 1 < seq[k].len; j++) {
                int32_t nxt = -1;
                for (int e = e_first; e < b->ne; e++)
                    if (b->edges[e].from == cur && b->edges[e].e.kind == GE_BYTE && b->edges[e].e.lo == seq[k].lo[j] &&
                        b->edges[e].e.hi == seq[k].hi[j] && b->edges[e].e.to != out) {
                        nxt = b->edges[e].e.to;
                        break;
                    }
                if (nxt < 0) {
                    nxt = node_new(b);
                    edge_add(b, cur, GE_BYTE, seq[k].lo[j], seq[k].hi[j], nxt, 0);
                }
                cur = nxt;
            }
            edge_add(b, cur, GE_BYTE, seq[k].lo[seq[k].len - 1], seq[k].hi[seq[k].len - 1], out, 0);
        }
    }
    return out;
}

/* Estimated NFA nodes of x (saturating), to decide when a repetition calls an anonymous rule. */
static long est(const ga_node *x) {
    long s = 0;
    switch (x->kind) {
    case GA_LIT: return x->n;
    case GA_CLASS: return 4 + 2L * x->n;
    case GA_REF: return 1;
    case GA_SEQ: case GA_ALT:
        for (int i = 0; i < x->n && s < (1L << 30); i++) s += est(x->kids[i]);
        return s + 1;
    case GA_REP: {
        long c = x->max < 0 ? x->min + 1 : x->max;
        long e = est(x->kids[0]);
        return e > (1L << 30) / (c + 1) ? 1L << 30 : e * (c ? c : 1) + 2;
    }
    }
    return 1;
}

/* One copy of a repetition's body: inline, or a call of its anonymous rule. */
static int32_t rep_unit(nb *b, ga_node *x, int32_t in) {
    if (!x->anon) return frag(b, x, in);
    int32_t out = node_new(b);
    edge_add(b, in, GE_CALL, 0, 0, out, x->anon - 1);
    return out;
}

static int32_t frag_rep(nb *b, ga_node *r, int32_t in) {
    ga_node *x = r->kids[0];
    const long copies = r->max < 0 ? r->min + 1 : r->max;
    if (!x->anon && x->kind != GA_REF && copies > 1 && est(x) * copies > 256) {
        int a = rule_new(b, -1);
        if (a < 0) return in;
        x->anon = a + 1;
        int32_t s = node_new(b);
        b->start[a] = s;
        int32_t e = frag(b, x, s);
        if (!b->fail) b->nodes[e].end = 1;
    }
    int32_t cur = in;
    for (int i = 0; i < r->min && !b->fail; i++) cur = rep_unit(b, x, cur);
    if (r->max < 0) {
        int32_t loop = node_new(b);
        eps(b, cur, loop);
        int32_t e = rep_unit(b, x, loop);
        eps(b, e, loop);
        return loop;
    }
    if (r->max > r->min) {
        int32_t out = node_new(b);
        for (int i = r->min; i < r->max && !b->fail; i++) {
            eps(b, cur, out);
            cur = rep_unit(b, x, cur);
        }
        eps(b, cur, out);
        return out;
    }
    return cur;
}

static int32_t frag(nb *b, ga_node *x, int32_t in) {
    if (b->fail) return in;
    switch (x->kind) {
    case GA_LIT: {
        int32_t cur = in;
        for (int i = 0; i < x->n; i++) {
            int32_t nxt = node_new(b);
            edge_add(b, cur, GE_BYTE, x->bytes[i], x->bytes[i], nxt, 0);
            cur = nxt;
        }
        return cur;
    }
    case GA_CLASS: return frag_class(b, x, in);
    case GA_REF: {
        int32_t out = node_new(b);
        edge_add(b, in, GE_CALL, 0, 0, out, x->rule);
        return out;
    }
    case GA_SEQ: {
        int32_t cur = in;
        for (int i = 0; i < x->n; i++) cur = frag(b, x->kids[i], cur);
        return cur;
    }
    case GA_ALT: {
        /* alternatives leave from `in` itself: no fragment adds edges into its entry */
        int32_t out = node_new(b);
        for (int i = 0; i < x->n; i++) eps(b, frag(b, x->kids[i], in), out);
        return out;
    }
    case GA_REP: return frag_rep(b, x, in);
    }
    return in;
}

/* ==== Tables ==== */
/* Edges sorted by source node (counting sort, stable) into g. */
static int flatten(nb *b, grammar *g) {
    g->nodes = b->nodes;
    g->n_nodes = b->n;
    b->nodes = NULL;
    g->edges = malloc((size_t)(b->ne ? b->ne : 1) * sizeof *g->edges);
    if (!g->edges) return mx_fail(b->err, "grammar: out of memory");
    g->n_edges = b->ne;
    for (int i = 0; i < g->n_nodes; i++) g->nodes[i].ne = 0;
    for (int e = 0; e < b->ne; e++) g->nodes[b->edges[e].from].ne++;
    uint32_t off = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        g->nodes[i].e0 = off;
        off += g->nodes[i].ne;
        g->nodes[i].ne = 0;
    }
    for (int e = 0; e < b->ne; e++) {
        gn_node *nd = &g->nodes[b->edges[e].from];
        g->edges[nd->e0 + nd->ne++] = b->edges[e].e;
        if (b->edges[e].e.kind == GE_BYTE) nd->has_byte = 1;
    }
    return 0;
}

static void byte_classes(grammar *g) {
    uint8_t cut[257] = {0};
    for (int e = 0; e < g->n_edges; e++)
        if (g->edges[e].kind == GE_BYTE) cut[g->edges[e].lo] = 1, cut[g->edges[e].hi + 1] = 1;
    int c = 0;
    for (int x = 0; x < 256; x++) {
        if (x > 0 && cut[x]) c++;
        g->cls[x] = (uint8_t)c;
    }
    g->n_cls = c + 1;
    for (int x = 255; x >= 0; x--) g->cls_rep[g->cls[x]] = (uint8_t)x;
}

/* pure_ret: the node's epsilon closure consumes nothing and reaches a rule end. Computed
 * backwards over epsilon edges from the nodes that consume / end. */
static int pure_returns(grammar *g) {
    const int n = g->n_nodes;
    int32_t *rev0 = calloc((size_t)n + 1, sizeof *rev0), *rev = malloc((size_t)(g->n_edges + 1) * sizeof *rev);
    uint8_t *cons = calloc((size_t)n, 1), *reach = calloc((size_t)n, 1);
    int32_t *q = malloc((size_t)(n + 1) * sizeof *q);
    if (!rev0 || !rev || !cons || !reach || !q) {
        free(rev0), free(rev), free(cons), free(reach), free(q);
        return -1;
    }
    for (int i = 0; i < n; i++)
        for (uint32_t e = g->nodes[i].e0; e < g->nodes[i].e0 + g->nodes[i].ne; e++)
            if (g->edges[e].kind == GE_EPS) rev0[g->edges[e].to + 1]++;
    for (int i = 0; i < n; i++) rev0[i + 1] += rev0[i];
    int32_t *fill = calloc((size_t)n, sizeof *fill);
    if (!fill) {
        free(rev0), free(rev), free(cons), free(reach), free(q);
        return -1;
    }
    for (int i = 0; i < n; i++)
        for (uint32_t e = g->nodes[i].e0; e < g->nodes[i].e0 + g->nodes[i].ne; e++)
            if (g->edges[e].kind == GE_EPS) {
                int t = g->edges[e].to;
                rev[rev0[t] + fill[t]++] = i;
            }
    free(fill);
    for (int pass = 0; pass < 2; pass++) {
        uint8_t *mark = pass ? reach : cons;
        int qn = 0;
        for (int i = 0; i < n; i++) {
            bool seed = false;
            if (pass) seed = g->nodes[i].end;
            else
                for (uint32_t e = g->nodes[i].e0; e < g->nodes[i].e0 + g->nodes[i].ne; e++)
                    if (g->edges[e].kind != GE_EPS) seed = true;
            if (seed) mark[i] = 1, q[qn++] = i;
        }
        for (int h = 0; h < qn; h++) {
            int t = q[h];
            for (int k = rev0[t]; k < rev0[t + 1]; k++)
                if (!mark[rev[k]]) mark[rev[k]] = 1, q[qn++] = rev[k];
        }
    }
    for (int i = 0; i < n; i++) g->nodes[i].pure_ret = !cons[i] && reach[i];
    free(rev0), free(rev), free(cons), free(reach), free(q);
    return 0;
}

/* Walks rule r's nodes reachable from its start without consuming a byte (epsilon edges, and
 * calls of nullable rules continue at their return node). Returns whether an end is reached;
 * with callees != NULL appends each rule called on the way once (mark dedupes, left clear). */
typedef struct lr_scratch {
    uint8_t *seen;            /* [N] */
    int32_t *stack, *visited; /* [N] each */
    uint8_t *mark;            /* [R] */
    int32_t *list;            /* [R] */
    int n_list;
} lr_scratch;

static bool walk_nullable(const grammar *g, int r, const uint8_t *nullable, lr_scratch *w, bool callees,
                          bool bytes) {
    int sp = 0, nv = 0;
    bool end = false;
    const int32_t s0 = g->rule_start[r];
    w->stack[sp++] = s0, w->seen[s0] = 1, w->visited[nv++] = s0;
    w->n_list = 0;
    while (sp) {
        int32_t v = w->stack[--sp];
        if (g->nodes[v].end) end = true;
        for (uint32_t e = g->nodes[v].e0; e < g->nodes[v].e0 + g->nodes[v].ne; e++) {
            const gn_edge *ed = &g->edges[e];
            int32_t t = -1;
            if (ed->kind == GE_EPS || (bytes && ed->kind == GE_BYTE)) t = ed->to;
            else if (ed->kind == GE_CALL) {
                if (callees && !w->mark[ed->rule]) w->mark[ed->rule] = 1, w->list[w->n_list++] = ed->rule;
                if (nullable[ed->rule]) t = ed->to;
            }
            if (t >= 0 && !w->seen[t]) w->seen[t] = 1, w->stack[sp++] = t, w->visited[nv++] = t;
        }
    }
    for (int i = 0; i < nv; i++) w->seen[w->visited[i]] = 0;
    for (int i = 0; i < w->n_list; i++) w->mark[w->list[i]] = 0;
    return end;
}

/* All calls of every rule (callers[c] lists the rules that call c), for the nullable worklist. */
static int callers_of(const grammar *g, int32_t **c0_out, int32_t **c_out) {
    const int R = g->n_rules;
    int32_t *rule_of = malloc((size_t)g->n_nodes * sizeof *rule_of);
    int32_t *c0 = calloc((size_t)R + 1, sizeof *c0);
    if (!rule_of || !c0) return free(rule_of), free(c0), -1;
    /* nodes are created rule by rule, except anonymous rules inside their owner's range: a
     * node's rule is the last rule whose start is <= it among starts sorted; simpler and exact:
     * count every call edge for the caller found by a flood from each start */
    for (int i = 0; i < g->n_nodes; i++) rule_of[i] = -1;
    int32_t *q = malloc((size_t)g->n_nodes * sizeof *q);
    if (!q) return free(rule_of), free(c0), -1;
    for (int r = 0; r < R; r++) {
        int qn = 0;
        if (rule_of[g->rule_start[r]] >= 0) continue;
        rule_of[g->rule_start[r]] = r, q[qn++] = g->rule_start[r];
        for (int h = 0; h < qn; h++) {
            const gn_node *nd = &g->nodes[q[h]];
            for (uint32_t e = nd->e0; e < nd->e0 + nd->ne; e++) {
                int32_t t = g->edges[e].to;
                if (rule_of[t] < 0) rule_of[t] = r, q[qn++] = t;
            }
        }
    }
    free(q);
    for (int e = 0, v = 0; v < g->n_nodes; v++)
        for (e = (int)g->nodes[v].e0; e < (int)(g->nodes[v].e0 + g->nodes[v].ne); e++)
            if (g->edges[e].kind == GE_CALL && rule_of[v] >= 0) c0[g->edges[e].rule + 1]++;
    for (int r = 0; r < R; r++) c0[r + 1] += c0[r];
    int32_t *c = malloc((size_t)(c0[R] + 1) * sizeof *c), *fill = calloc((size_t)R + 1, sizeof *fill);
    if (!c || !fill) return free(rule_of), free(c0), free(c), free(fill), -1;
    for (int v = 0; v < g->n_nodes; v++)
        for (int e = (int)g->nodes[v].e0; e < (int)(g->nodes[v].e0 + g->nodes[v].ne); e++)
            if (g->edges[e].kind == GE_CALL && rule_of[v] >= 0) {
                int callee = g->edges[e].rule;
                c[c0[callee] + fill[callee]++] = rule_of[v];
            }
    free(fill), free(rule_of);
    *c0_out = c0, *c_out = c;
    return 0;
}

/* Refuses rules reachable from the root that can never finish (every way through them calls a
 * rule that cannot): generation there could only stop at the token limit. */
static int check_productive(const grammar *g, const uint8_t *productive, char **names, mx_error *err) {
    const int R = g->n_rules;
    uint8_t *reach = calloc((size_t)R, 1);
    int32_t *q = malloc((size_t)(R + 1) * sizeof *q);
    if (!reach || !q) return free(reach), free(q), mx_fail(err, "grammar: out of memory");
    /* rules called from the nodes of rule r: flood r's nodes (they never cross into a callee) */
    uint8_t *seen = calloc((size_t)g->n_nodes, 1);
    int32_t *st = malloc((size_t)(g->n_nodes + 1) * sizeof *st);
    int rc = 0, qn = 0;
    if (!seen || !st) rc = mx_fail(err, "grammar: out of memory");
    if (!rc) reach[g->root] = 1, q[qn++] = g->root;
    for (int h = 0; h < qn && !rc; h++) {
        const int r = q[h];
        if (!productive[r]) {
            rc = mx_fail(err, "grammar: rule '%s' can never finish (each of its alternatives recurses into a rule "
                         "that must go on)", names[r]);
            break;
        }
        int sp = 0;
        st[sp++] = g->rule_start[r];
        seen[g->rule_start[r]] = 1;
        while (sp) {
            const gn_node *nd = &g->nodes[st[--sp]];
            for (uint32_t e = nd->e0; e < nd->e0 + nd->ne; e++) {
                const gn_edge *ed = &g->edges[e];
                if (ed->kind == GE_CALL && !reach[ed->rule]) reach[ed->rule] = 1, q[qn++] = ed->rule;
                if (!seen[ed->to]) seen[ed->to] = 1, st[sp++] = ed->to;
            }
        }
    }
    free(reach), free(q), free(seen), free(st);
    return rc;
}

/* Refuses left recursion: a rule reachable from itself through calls made before any byte. */
static int check_left_recursion(grammar *g, char **names, mx_error *err) {
    const int R = g->n_rules, N = g->n_nodes;
    lr_scratch w = {0};
    uint8_t *nullable = calloc((size_t)R, 1), *queued = calloc((size_t)R, 1), *col = calloc((size_t)R, 1);
    w.seen = calloc((size_t)N, 1);
    w.stack = malloc((size_t)(N + 1) * sizeof *w.stack);
    w.visited = malloc((size_t)(N + 1) * sizeof *w.visited);
    w.mark = calloc((size_t)R, 1);
    w.list = malloc((size_t)(R + 1) * sizeof *w.list);
    int32_t *adj0 = calloc((size_t)R + 1, sizeof *adj0), *adj = NULL, *c0 = NULL, *callers = NULL;
    int32_t *wl = malloc((size_t)(R + 1) * sizeof *wl), *it = malloc((size_t)(R + 1) * sizeof *it);
    int32_t *path = malloc((size_t)(R + 1) * sizeof *path);
    int rc = -1;
    if (!nullable || !queued || !col || !w.seen || !w.stack || !w.visited || !w.mark || !w.list || !adj0 || !wl ||
        !it || !path || callers_of(g, &c0, &callers))
        goto oom;
    /* pass 1: productive rules (can finish at all: bytes allowed); pass 0: nullable rules (can
     * finish without a byte). Worklist: a rule is walked again when a callee turns true. */
    for (int pass = 1; pass >= 0; pass--) {
        memset(nullable, 0, (size_t)R);
        int head = 0, tail = 0;
        for (int r = 0; r < R; r++) wl[tail++] = r, queued[r] = 1;
        while (head != tail) {
            int r = wl[head];
            head = head == R ? 0 : head + 1;
            queued[r] = 0;
            if (nullable[r] || !walk_nullable(g, r, nullable, &w, false, pass)) continue;
            nullable[r] = 1;
            for (int k = c0[r]; k < c0[r + 1]; k++) {
                int c = callers[k];
                if (!nullable[c] && !queued[c]) {
                    queued[c] = 1, wl[tail] = c;
                    tail = tail == R ? 0 : tail + 1;
                }
            }
        }
        if (pass == 1 && (rc = check_productive(g, nullable, names, err))) goto done;
    }
    /* left-call graph as adjacency lists */
    size_t cap = 64, n_adj = 0;
    adj = malloc(cap * sizeof *adj);
    if (!adj) goto oom;
    for (int r = 0; r < R; r++) {
        walk_nullable(g, r, nullable, &w, true, false);
        for (int k = 0; k < w.n_list; k++) {
            if (n_adj == cap) {
                int32_t *na = realloc(adj, 2 * cap * sizeof *na);
                if (!na) goto oom;
                adj = na, cap *= 2;
            }
            adj[n_adj++] = w.list[k];
        }
        adj0[r + 1] = (int32_t)n_adj;
    }
    /* iterative DFS with colours: 1 on the path, 2 done */
    rc = 0;
    for (int s = 0; s < R && !rc; s++) {
        if (col[s]) continue;
        int sp = 0;
        path[sp] = s, it[sp] = adj0[s], col[s] = 1, sp++;
        while (sp && !rc) {
            int v = path[sp - 1];
            if (it[sp - 1] < adj0[v + 1]) {
                int u = adj[it[sp - 1]++];
                if (col[u] == 1)
                    rc = mx_fail(err, "grammar: rule '%s' is left-recursive (it can reach itself before reading "
                                 "any character; rewrite it with repetition, e.g. x ::= y (op y)*)", names[u]);
                else if (!col[u])
                    col[u] = 1, path[sp] = u, it[sp] = adj0[u], sp++;
            } else {
                col[v] = 2, sp--;
            }
        }
    }
    goto done;
oom:
    rc = mx_fail(err, "grammar: out of memory");
done:
    free(nullable), free(queued), free(col), free(w.seen), free(w.stack), free(w.visited), free(w.mark);
    free(w.list), free(adj0), free(adj), free(c0), free(callers), free(wl), free(it), free(path);
    return rc;
}

/* ==== Entry ==== */
int gr_build_nfa(grammar *g, ga_grammar *ast, int root, mx_error *err) {
    nb b = {.ast = ast, .err = err};
    for (int r = 0; r < ast->n_rules; r++) rule_new(&b, r);
    for (int r = 0; r < ast->n_rules && !b.fail; r++) {
        int32_t s = node_new(&b);
        b.start[r] = s;
        const int first_anon = b.n_rules;
        int32_t e = frag(&b, ast->rules[r].body, s);
        if (!b.fail) b.nodes[e].end = 1;
        for (int a = first_anon; a < b.n_rules; a++) b.owner[a] = r;
    }
    char **names = NULL;
    int rc = -1;
    if (b.fail) goto out;
    g->rule_start = b.start, g->n_rules = b.n_rules, g->root = root;
    b.start = NULL;
    if (flatten(&b, g)) goto out;
    byte_classes(g);
    if (pure_returns(g)) {
        mx_fail(err, "grammar: out of memory");
        goto out;
    }
    names = calloc((size_t)g->n_rules, sizeof *names);
    if (!names) {
        mx_fail(err, "grammar: out of memory");
        goto out;
    }
    for (int r = 0; r < g->n_rules; r++) names[r] = ast->rules[b.owner[r] >= 0 ? b.owner[r] : 0].name;
    rc = check_left_recursion(g, names, err);
out:
    free(names);
    free(b.nodes);
    free(b.edges);
    free(b.start);
    free(b.owner);
    return rc;
}

static void grammar_destroy(grammar *g) {
    gr_rt_free(g->rt);
    pthread_mutex_destroy(&g->mu);
    free(g->nodes);
    free(g->edges);
    free(g->rule_start);
    free(g);
}

int grammar_compile_root(grammar **out, const char *gbnf, size_t len, const char *root, mx_error *err) {
    *out = NULL;
    ga_grammar ast;
    if (gbnf_parse(&ast, gbnf, len, err)) {
        ga_free(&ast);
        return -1;
    }
    int r = ga_rule_find(&ast, root);
    if (r < 0) {
        ga_free(&ast);
        return mx_fail(err, "grammar: no rule named '%s' (the start rule)", root);
    }
    grammar *g = calloc(1, sizeof *g);
    if (!g) {
        ga_free(&ast);
        return mx_fail(err, "grammar: out of memory");
    }
    atomic_init(&g->refs, 1);
    pthread_mutex_init(&g->mu, NULL);
    int rc = gr_build_nfa(g, &ast, r, err);
    ga_free(&ast);
    if (rc) {
        grammar_destroy(g);
        return -1;
    }
    *out = g;
    return 0;
}

int grammar_compile(grammar **out, const char *gbnf, size_t len, mx_error *err) {
    return grammar_compile_root(out, gbnf, len, "root", err);
}

grammar *grammar_retain(grammar *g) {
    if (g) atomic_fetch_add(&g->refs, 1);
    return g;
}

void grammar_release(grammar *g) {
    if (g && atomic_fetch_sub(&g->refs, 1) == 1) grammar_destroy(g);
}
