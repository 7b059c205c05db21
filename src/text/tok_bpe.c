/* BPE model: word -> initial symbols (chars, with byte fallback / unk) -> merges applied by
 * rank with a binary heap (ties: leftmost first, as tokenizers' Word::merge_all) -> ids.
 * Words are cached in a sharded table keyed by xxHash3 so that repeated words cost one
 * lookup; shards have their own mutex, so a shared tokenizer can encode from many threads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "text/tok_internal.h"

#define TK_CACHE_SLOTS 8192        /* per shard; power of two */
#define TK_CACHE_MAX (TK_CACHE_SLOTS / 2)
#define TK_CACHE_MAX_WORD 256      /* longer words are not cached */

typedef struct tk_cache_ent {
    uint64_t h;
    uint32_t koff, klen; /* klen == UINT32_MAX: empty */
    uint32_t voff, vlen;
} tk_cache_ent;

typedef struct tk_sym {
    int32_t id;
    int32_t prev, next; /* -1 at the ends */
    int32_t unk;        /* 1 when produced by the unk fallback (for fuse_unk) */
} tk_sym;

typedef struct tk_heap_ent {
    uint32_t rank, pos;
    int32_t l, r, id; /* the pair it was made for, and the merged id */
} tk_heap_ent;

/* ==== Tables ==== */

#define SP_SPACE "\xE2\x96\x81" /* U+2581, SentencePiece's space */

/* SentencePiece-style vocabularies without a pre-tokenizer hand whole texts to the model as
 * one word. When every token holding U+2581 is a run of U+2581 followed by text without it,
 * no merge can cross the point just before a U+2581 that follows another char, so the word
 * can be cut there and each part merged (and cached) on its own with identical results. */
static bool sp_split_safe(const tk_bpe *b) {
    if (b->ignore_merges || b->prefix || b->suffix || tk_map_get(&b->vocab, SP_SPACE, 3) < 0) return false;
    for (size_t i = 0; i < b->vocab.cap; i++) {
        const tk_map_ent *e = &b->vocab.slots[i];
        if (e->len == UINT32_MAX) continue;
        const char *k = tk_map_key(&b->vocab, e);
        size_t j = 0;
        while (j + 3 <= e->len && !memcmp(k + j, SP_SPACE, 3)) j += 3;
        if (memmem(k + j, e->len - j, SP_SPACE, 3)) return false;
    }
    return true;
}

int tk_bpe_init_tables(tk_bpe *b, mx_error *err) {
    (void)err;
    for (int i = 0; i < 256; i++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", i);
        b->byte_ids[i] = tk_map_get(&b->vocab, name, 6);
    }
    b->char_ids = malloc(0x800 * sizeof *b->char_ids);
    for (int32_t cp = 0; cp < 0x800; cp++) {
        char tmp[4];
        int l = tk_utf8_put(tmp, cp);
        b->char_ids[cp] = tk_map_get(&b->vocab, tmp, (size_t)l);
    }
    b->sp_split = sp_split_safe(b);
    b->cache = calloc(TK_CACHE_SHARDS, sizeof *b->cache);
    for (int i = 0; i < TK_CACHE_SHARDS; i++) pthread_mutex_init(&b->cache[i].mu, NULL);
    return 0;
}

void tk_bpe_free(tk_bpe *b) {
    tk_map_free(&b->vocab);
    free(b->pieces);
    free(b->piece_lens);
    free(b->merges);
    free(b->prefix);
    free(b->suffix);
    free(b->char_ids);
    if (b->cache) {
        for (int i = 0; i < TK_CACHE_SHARDS; i++) {
            pthread_mutex_destroy(&b->cache[i].mu);
            free(b->cache[i].slots);
            free(b->cache[i].keys.p);
            free(b->cache[i].vals.p);
        }
        free(b->cache);
    }
    memset(b, 0, sizeof *b);
}

static inline const tk_merge_ent *merge_find(const tk_bpe *b, int32_t l, int32_t r) {
    uint64_t key = ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
    size_t j = (key * 0x9E3779B97F4A7C15ull) >> 20 & (b->merge_cap - 1);
    for (;; j = (j + 1) & (b->merge_cap - 1)) {
        const tk_merge_ent *e = &b->merges[j];
        if (e->key == key) return e;
        if (e->key == UINT64_MAX) return NULL;
    }
}

/* ==== Word cache ==== */

static bool cache_get(tk_bpe *b, uint64_t h, const char *w, size_t n, tk_ids *out) {
    tk_cache_shard *s = &b->cache[h >> 58];
    bool hit = false;
    pthread_mutex_lock(&s->mu);
    if (s->slots) {
        for (size_t j = h & (TK_CACHE_SLOTS - 1); s->slots[j].klen != UINT32_MAX; j = (j + 1) & (TK_CACHE_SLOTS - 1)) {
            const tk_cache_ent *e = &s->slots[j];
            if (e->h == h && e->klen == n && !memcmp(s->keys.p + e->koff, w, n)) {
                for (uint32_t i = 0; i < e->vlen; i++) tk_ids_push(out, s->vals.p[e->voff + i]);
                hit = true;
                break;
            }
        }
    }
    pthread_mutex_unlock(&s->mu);
    return hit;
}

static void cache_put(tk_bpe *b, uint64_t h, const char *w, size_t n, const int32_t *ids, size_t k) {
    tk_cache_shard *s = &b->cache[h >> 58];
    pthread_mutex_lock(&s->mu);
    if (!s->slots) {
        s->slots = malloc(TK_CACHE_SLOTS * sizeof *s->slots);
        if (!s->slots) goto out;
        for (size_t j = 0; j < TK_CACHE_SLOTS; j++) s->slots[j].klen = UINT32_MAX;
    }
    if (s->n >= TK_CACHE_MAX) goto out; /* full: stop inserting, like tokenizers' cache */
    size_t j = h & (TK_CACHE_SLOTS - 1);
    for (; s->slots[j].klen != UINT32_MAX; j = (j + 1) & (TK_CACHE_SLOTS - 1)) {
        const tk_cache_ent *e = &s->slots[j];
        if (e->h == h && e->klen == n && !memcmp(s->keys.p + e->koff, w, n)) goto out; /* raced */
    }
    s->slots[j] = (tk_cache_ent){h, (uint32_t)s->keys.n, (uint32_t)n, (uint32_t)s->vals.n, (uint32_t)k};
    tk_buf_put(&s->keys, w, n);
    for (size_t i = 0; i < k; i++) tk_ids_push(&s->vals, ids[i]);
    s->n++;
out:
    pthread_mutex_unlock(&s->mu);
}

/* ==== Heap of candidate merges, ordered by (rank, position) ==== */

static inline bool heap_less(const tk_heap_ent *a, const tk_heap_ent *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(tk_ctx *c, size_t *n, tk_heap_ent e) {
    if (*n == c->heap_cap) {
        c->heap_cap = c->heap_cap ? c->heap_cap * 2 : 64;
        c->heap = realloc(c->heap, c->heap_cap * sizeof *c->heap);
        if (!c->heap) abort();
    }
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&e, &c->heap[p])) break;
        c->heap[i] = c->heap[p];
        i = p;
    }
    c->heap[i] = e;
}

static tk_heap_ent heap_pop(tk_ctx *c, size_t *n) {
    tk_heap_ent top = c->heap[0], last = c->heap[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        const tk_heap_ent *best = &last;
        if (l < *n && heap_less(&c->heap[l], best)) { m = l; best = &c->heap[l]; }
        if (l + 1 < *n && heap_less(&c->heap[l + 1], best)) m = l + 1;
        if (m == i) break;
        c->heap[i] = c->heap[m];
        i = m;
    }
    if (*n) c->heap[i] = last;
    return top;
}

static void pair_push(tk_ctx *c, size_t *hn, int32_t pos) {
    const tk_sym *s = c->syms;
    int32_t nx = s[pos].next;
    if (nx < 0) return;
    const tk_merge_ent *m = merge_find(&c->t->bpe, s[pos].id, s[nx].id);
    if (m) heap_push(c, hn, (tk_heap_ent){m->rank, (uint32_t)pos, s[pos].id, s[nx].id, m->id});
}

/* ==== Word -> ids ==== */

static void sym_push(tk_ctx *c, size_t *n, int32_t id, int32_t unk) {
    if (*n == c->syms_cap) {
        c->syms_cap = c->syms_cap ? c->syms_cap * 2 : 64;
        c->syms = realloc(c->syms, c->syms_cap * sizeof *c->syms);
        if (!c->syms) abort();
    }
    c->syms[*n] = (tk_sym){id, (int32_t)*n - 1, (int32_t)*n + 1, unk};
    (*n)++;
}

static int32_t char_id(const tk_bpe *b, tk_buf *tmp, const char *ch, size_t l, bool first, bool last) {
    if (!b->prefix && !b->suffix) {
        if (l <= 2) {
            int32_t cp;
            tk_utf8_next(ch, l, &cp);
            if (cp < 0x800) return b->char_ids[cp];
        }
        return tk_map_get(&b->vocab, ch, l);
    }
    tmp->n = 0;
    if (b->prefix && !first) tk_buf_put(tmp, b->prefix, b->prefix_len);
    tk_buf_put(tmp, ch, l);
    if (b->suffix && last) tk_buf_put(tmp, b->suffix, b->suffix_len);
    return tk_map_get(&b->vocab, tmp->p, tmp->n);
}

static int bpe_segment(tk_ctx *c, tk_bpe *b, const char *w, size_t n) {
    tk_ids *out = c->out;
    uint64_t h = 0;
    bool cacheable = n <= TK_CACHE_MAX_WORD;
    if (cacheable) {
        h = XXH3_64bits(w, n);
        if (cache_get(b, h, w, n, out)) return 0;
    }
    /* Initial symbols. */
    size_t ns = 0;
    for (size_t i = 0; i < n;) {
        int32_t cp;
        size_t l = (size_t)tk_utf8_next(w + i, n - i, &cp);
        int32_t id = char_id(b, &c->word, w + i, l, i == 0, i + l == n);
        if (id >= 0) {
            sym_push(c, &ns, id, 0);
        } else {
            bool done = false;
            if (b->byte_fallback) {
                bool all = true;
                for (size_t k = 0; k < l; k++) all = all && b->byte_ids[(unsigned char)w[i + k]] >= 0;
                if (all) {
                    for (size_t k = 0; k < l; k++) sym_push(c, &ns, b->byte_ids[(unsigned char)w[i + k]], 0);
                    done = true;
                }
            }
            if (!done && b->unk_id >= 0) {
                if (!(b->fuse_unk && ns && c->syms[ns - 1].unk)) sym_push(c, &ns, b->unk_id, 1);
            }
        }
        i += l;
    }
    if (ns == 0) return 0;
    c->syms[ns - 1].next = -1;
    /* Merge by rank. */
    size_t hn = 0;
    for (size_t i = 0; i + 1 < ns; i++) pair_push(c, &hn, (int32_t)i);
    tk_sym *s = c->syms;
    while (hn) {
        tk_heap_ent e = heap_pop(c, &hn);
        int32_t p = (int32_t)e.pos, nx = s[p].next;
        if (s[p].id != e.l || nx < 0 || s[nx].id != e.r) continue; /* stale */
        s[p].id = e.id;
        s[p].unk = 0;
        s[p].next = s[nx].next;
        if (s[nx].next >= 0) s[s[nx].next].prev = p;
        s[nx].id = -1;
        if (s[p].prev >= 0) pair_push(c, &hn, s[p].prev);
        pair_push(c, &hn, p);
    }
    size_t start = out->n;
    for (int32_t i = 0; i >= 0; i = s[i].next) tk_ids_push(out, s[i].id);
    if (cacheable) cache_put(b, h, w, n, out->p + start, out->n - start);
    return 0;
}

/* ==== Per-thread hot-word cache ====
 * Text repeats a few thousand words; a direct-mapped table private to the thread answers
 * them without the shared cache's lock or the big vocabulary table's cache misses. Keyed by a
 * 128-bit hash of the word (a false hit would need a 128-bit collision) and tagged with the
 * tokenizer's serial number, so it is cleared when the thread moves to another tokenizer
 * (even one allocated at the same address). Words of up to L1_IDS tokens only. */
#define L1_SLOTS 4096
#define L1_IDS 5
typedef struct tk_l1 {
    uint64_t lo, hi;
    int32_t n; /* 0 = empty */
    int32_t ids[L1_IDS];
} tk_l1;
typedef struct tk_l1_table {
    uint64_t serial;
    tk_l1 slot[L1_SLOTS];
} tk_l1_table;

static pthread_key_t g_l1_key;
static pthread_once_t g_l1_once = PTHREAD_ONCE_INIT;
static void l1_key_init(void) { pthread_key_create(&g_l1_key, free); }

static tk_l1_table *l1_get(uint64_t serial) {
    pthread_once(&g_l1_once, l1_key_init);
    tk_l1_table *l1 = pthread_getspecific(g_l1_key);
    if (!l1) {
        l1 = calloc(1, sizeof *l1);
        if (!l1 || pthread_setspecific(g_l1_key, l1)) {
            free(l1);
            return NULL;
        }
        l1->serial = serial;
    }
    if (l1->serial != serial) {
        memset(l1->slot, 0, sizeof l1->slot);
        l1->serial = serial;
    }
    return l1;
}

static int bpe_word_uncached(tk_ctx *c, tk_bpe *b, const char *w, size_t n);

int tk_bpe_word(tk_ctx *c, const char *w, size_t n) {
    tk_bpe *b = (tk_bpe *)&c->t->bpe; /* the caches are the only mutable part */
    if (c->collect) {
        if (c->collect->n) tk_buf_putc(c->collect, '|');
        tk_buf_put(c->collect, w, n);
        return 0;
    }
    if (!c->l1) {
        c->l1 = l1_get(c->t->serial);
        if (!c->l1) return bpe_word_uncached(c, b, w, n);
    }
    XXH128_hash_t h = XXH3_128bits(w, n);
    tk_l1 *e = &c->l1->slot[h.low64 & (L1_SLOTS - 1)];
    if (e->n && e->lo == h.low64 && e->hi == h.high64) {
        for (int32_t i = 0; i < e->n; i++) tk_ids_push(c->out, e->ids[i]);
        return 0;
    }
    size_t start = c->out->n;
    if (bpe_word_uncached(c, b, w, n)) return -1;
    size_t k = c->out->n - start;
    if (k >= 1 && k <= L1_IDS) {
        e->lo = h.low64;
        e->hi = h.high64;
        e->n = (int32_t)k;
        memcpy(e->ids, c->out->p + start, k * sizeof *e->ids);
    }
    return 0;
}

static int bpe_word_uncached(tk_ctx *c, tk_bpe *b, const char *w, size_t n) {
    if (b->ignore_merges) {
        int32_t id = tk_map_get(&b->vocab, w, n);
        if (id >= 0) {
            tk_ids_push(c->out, id);
            return 0;
        }
    }
    if (!b->sp_split) return bpe_segment(c, b, w, n);
    /* cut before each U+2581 that follows another char (see sp_split_safe) */
    size_t start = 0, i = 0;
    while (i < n) {
        const char *f = memmem(w + i, n - i, SP_SPACE, 3);
        if (!f) break;
        size_t at = (size_t)(f - w);
        if (at > start && (at < 3 || memcmp(w + at - 3, SP_SPACE, 3))) {
            if (bpe_segment(c, b, w + start, at - start)) return -1;
            start = at;
        }
        i = at + 3;
    }
    return bpe_segment(c, b, w + start, n - start);
}
