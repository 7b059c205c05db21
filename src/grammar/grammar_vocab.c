/* A vocabulary's token byte strings in a prefix tree laid out in preorder: node i's subtree is
 * [i, skip), children follow their parent. The mask walk (grammar_match.c) scans it linearly,
 * keeping the parse state of each depth, and jumps to `skip` when a prefix is refused, so a
 * prefix shared by many tokens is checked once. Llama 3's 128,000 tokens (831,311 bytes) make
 * 274,520 nodes. */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_internal.h"

static int cmp_tok(const void *a, const void *b, void *ctx) {
    const grammar_vocab *v = ctx;
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    const uint32_t lx = v->len[x], ly = v->len[y];
    int c = memcmp(v->data + v->off[x], v->data + v->off[y], lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static void vocab_destroy(grammar_vocab *v) {
    if (!v) return;
    free(v->flags), free(v->off), free(v->len), free(v->data), free(v->dup_next), free(v->nodes), free(v->eos);
    free(v->dups), free(v->skip);
    free(v);
}

/* Preorder nodes of the sorted eligible tokens. */
static int build_trie(grammar_vocab *v, int32_t *order, int n, mx_error *err) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += v->len[order[i]];
    v->nodes = malloc((total ? total : 1) * sizeof *v->nodes);
    v->skip = malloc((total ? total : 1) * sizeof *v->skip);
    int32_t path[GR_MAX_TOKEN_BYTES + 1];
    if (!v->nodes || !v->skip) return mx_fail(err, "grammar vocabulary: out of memory");
    int depth = 0, nn = 0;
    int32_t prev = -1;
    for (int k = 0; k < n; k++) {
        const int32_t id = order[k];
        const uint8_t *b = v->data + v->off[id];
        const int L = (int)v->len[id];
        int lcp = 0;
        if (prev >= 0) {
            const uint8_t *pb = v->data + v->off[prev];
            const int pl = (int)v->len[prev];
            while (lcp < L && lcp < pl && b[lcp] == pb[lcp]) lcp++;
        }
        for (; depth > lcp; depth--) v->skip[path[depth]] = nn; /* close subtrees */
        for (int d = lcp + 1; d <= L; d++) {
            v->nodes[nn] = (gv_node){.byte = b[d - 1], .depth = (uint8_t)d, .tokp = 0};
            path[d] = nn++;
        }
        depth = L;
        gv_node *last = &v->nodes[path[L]];
        if (!last->tokp) last->tokp = 32 + id;
        else { /* same bytes as an earlier token */
            int32_t t = last->tokp - 32;
            while (v->dup_next[t] >= 0) t = v->dup_next[t];
            v->dup_next[t] = id;
            int32_t *d = realloc(v->dups, (size_t)(v->n_dups + 1) * 2 * sizeof *d);
            if (!d) return mx_fail(err, "grammar vocabulary: out of memory");
            v->dups = d;
            d[2 * v->n_dups] = last->tokp - 32, d[2 * v->n_dups + 1] = id;
            v->n_dups++;
        }
        if (L > v->max_depth) v->max_depth = L;
        prev = id;
    }
    for (; depth > 0; depth--) v->skip[path[depth]] = nn;
    v->n_nodes = nn;
    return 0;
}

int grammar_vocab_new(grammar_vocab **out, int n_tokens, const char *const *bytes, const uint32_t *lens,
                      const uint8_t *flags, const int32_t *eos, int n_eos, mx_error *err) {
    *out = NULL;
    if (n_tokens <= 0) return mx_fail(err, "grammar vocabulary: no tokens");
    grammar_vocab *v = calloc(1, sizeof *v);
    if (!v) return mx_fail(err, "grammar vocabulary: out of memory");
    atomic_init(&v->refs, 1);
    v->n_tokens = n_tokens;
    size_t total = 0;
    for (int i = 0; i < n_tokens; i++) total += lens[i] <= GR_MAX_TOKEN_BYTES ? lens[i] : 0;
    v->flags = calloc((size_t)n_tokens, 1);
    v->off = malloc((size_t)n_tokens * sizeof *v->off);
    v->len = malloc((size_t)n_tokens * sizeof *v->len);
    v->dup_next = malloc((size_t)n_tokens * sizeof *v->dup_next);
    v->data = malloc(total ? total : 1);
    v->eos = malloc((size_t)(n_eos > 0 ? n_eos : 1) * sizeof *v->eos);
    int32_t *order = malloc((size_t)n_tokens * sizeof *order);
    if (!v->flags || !v->off || !v->len || !v->dup_next || !v->data || !v->eos || !order) {
        free(order);
        vocab_destroy(v);
        return mx_fail(err, "grammar vocabulary: out of memory");
    }
    size_t at = 0;
    int n = 0;
    for (int i = 0; i < n_tokens; i++) {
        const uint32_t l = lens[i] <= GR_MAX_TOKEN_BYTES ? lens[i] : 0; /* longer: never allowed */
        v->flags[i] = flags ? flags[i] : 0;
        v->off[i] = (uint32_t)at, v->len[i] = l;
        v->dup_next[i] = -1;
        if (l) memcpy(v->data + at, bytes[i], l);
        at += l;
        if (l && !(v->flags[i] & GRAMMAR_TOKEN_SPECIAL)) order[n++] = i;
    }
    for (int i = 0; i < n_eos; i++) {
        if (eos[i] < 0 || eos[i] >= n_tokens) {
            free(order);
            vocab_destroy(v);
            return mx_fail(err, "grammar vocabulary: EOS id %d outside [0, %d)", eos[i], n_tokens);
        }
        v->eos[v->n_eos++] = eos[i];
    }
    qsort_r(order, (size_t)n, sizeof *order, cmp_tok, v);
    int rc = build_trie(v, order, n, err);
    free(order);
    if (rc) {
        vocab_destroy(v);
        return -1;
    }
    *out = v;
    return 0;
}

grammar_vocab *grammar_vocab_retain(grammar_vocab *v) {
    if (v) atomic_fetch_add(&v->refs, 1);
    return v;
}

void grammar_vocab_release(grammar_vocab *v) {
    if (v && atomic_fetch_sub(&v->refs, 1) == 1) vocab_destroy(v);
}

int grammar_vocab_size(const grammar_vocab *v) { return v->n_tokens; }

const char *grammar_vocab_bytes(const grammar_vocab *v, int32_t id, size_t *len) {
    if (id < 0 || id >= v->n_tokens) {
        *len = 0;
        return "";
    }
    *len = v->len[id];
    return (const char *)v->data + v->off[id];
}

bool grammar_vocab_is_eos(const grammar_vocab *v, int32_t id) {
    for (int i = 0; i < v->n_eos; i++)
        if (v->eos[i] == id) return true;
    return false;
}
