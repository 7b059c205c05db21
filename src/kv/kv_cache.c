/* KV cache: block pool (refcount, LRU of reusable cached blocks, copy-on-write), page tables,
 * dense slots, prefix index (xxHash64 chain). See kv_cache.h. */
#include "kv/kv_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <xxhash.h>

#include "backend/kvfmt/kv_quant.h"
#include "backend/kvfmt/kv_turbo.h"

struct kv_cache {
    kv_cache_params p;
    const backend_ops *be;
    int64_t n_rows;          /* physical rows per layer pool */
    mx_dtype kt, vt;         /* pool element types (cache types K and V) */
    mx_tensor *k, *v;        /* [n_layers] pools [n_rows, n_kv_heads, head_dim / block] */
    /* multi-device backend with tp_size N > 1: [n_layers * N] rank pools [n_rows, n_kv_heads
     * / N, head_dim / block], rank r's on device r (k/v then describe rank 0's); NULL otherwise */
    mx_tensor *kr, *vr;
    int n_units;             /* paged: blocks; dense: slots */
    int32_t *refcount;       /* [n_units] */
    int32_t *free_stack;     /* [n_units] unindexed free units */
    int n_free;
    /* ---- prefix index (paged) ---- */
    uint8_t *indexed;        /* [n_blocks] */
    uint64_t *hash;          /* [n_blocks] chain hash of the block */
    uint64_t *parent;        /* [n_blocks] chain hash of its predecessor */
    int32_t *tokens;         /* [n_blocks, block_size] tokens of indexed blocks */
    int32_t *bucket;         /* [n_buckets] head block, -1 = empty */
    int32_t *bucket_next;    /* [n_blocks] */
    uint32_t n_buckets;      /* power of two */
    int32_t *lru_prev, *lru_next; /* [n_blocks] cached blocks with refcount 0 */
    int32_t lru_head, lru_tail;   /* head = least recently released */
    int n_lru;
    uint64_t hit_tokens;
};

/* ==== Storage policy ==== */
const char *kv_storage_name(kv_storage s) {
    return s == KV_STORAGE_PAGED ? "paged" : s == KV_STORAGE_DENSE ? "dense" : "auto";
}

int kv_storage_parse(const char *s, kv_storage *out) {
    if (!strcmp(s, "auto")) *out = KV_STORAGE_AUTO;
    else if (!strcmp(s, "dense")) *out = KV_STORAGE_DENSE;
    else if (!strcmp(s, "paged")) *out = KV_STORAGE_PAGED;
    else return -1;
    return 0;
}

kv_storage kv_storage_resolve(kv_storage requested, const model_spec *spec, char *reason,
                              size_t reason_len) {
    if (requested != KV_STORAGE_AUTO) {
        snprintf(reason, reason_len, "requested with --decode-storage-backend");
        return requested;
    }
    static const char *qualified[] = {"llama", "qwen3", "gemma3_text", "gemma3", "llama4_text",
                                      "llama4"};
    for (size_t i = 0; i < sizeof qualified / sizeof qualified[0]; i++)
        if (!strcmp(spec->model_type, qualified[i])) {
            snprintf(reason, reason_len, "auto: %s is a qualified family", spec->model_type);
            return KV_STORAGE_PAGED;
        }
    snprintf(reason, reason_len, "auto: %s is not a qualified family (llama, qwen3, gemma3_text, llama4)",
             spec->model_type);
    return KV_STORAGE_DENSE;
}

/* ==== Lifecycle ==== */
static bool paged(const kv_cache *kv) { return kv->p.storage == KV_STORAGE_PAGED; }
static int kv_tp(const kv_cache *kv) { return kv->p.tp_size > 1 ? kv->p.tp_size : 1; }

/* Multi-device backends: the calling thread's device becomes rank r's (rank 0's afterwards). */
static void kv_bind(const kv_cache *kv, int r) {
    mx_error e;
    if (kv->kr) kv->be->bind_device(r, &e);
}

/* Elements of one head's row in a pool of dtype t (head_dim values, head_dim / 32 blocks). */
static int64_t head_elems(const kv_cache *kv, mx_dtype t) { return kv->p.head_dim / mx_dtype_block(t); }

/* Bytes of one layer's whole pool of dtype t (all ranks). */
static size_t pool_bytes(const kv_cache *kv, mx_dtype t) {
    return (size_t)kv->n_rows * (size_t)kv->p.n_kv_heads * (size_t)head_elems(kv, t) * mx_dtype_size(t);
}

/* ==== Cache types ==== */
static const struct {
    kv_type t;
    const char *name;
    mx_dtype dtype;
} k_types[] = {
    {KV_TYPE_F32, "f32", MX_F32},    {KV_TYPE_F16, "f16", MX_F16},    {KV_TYPE_BF16, "bf16", MX_BF16},
    {KV_TYPE_Q8_0, "q8_0", MX_Q8_0}, {KV_TYPE_Q4_0, "q4_0", MX_Q4_0},
    {KV_TYPE_TURBO2, "turbo2", MX_TQ2}, {KV_TYPE_TURBO3, "turbo3", MX_TQ3}, {KV_TYPE_TURBO4, "turbo4", MX_TQ4},
};
#define N_TYPES (int)(sizeof k_types / sizeof k_types[0])
#define TYPES_LIST "f32, f16, bf16, q8_0, q4_0, turbo2, turbo3, turbo4"

const char *kv_type_name(kv_type t) {
    for (int i = 0; i < N_TYPES; i++)
        if (k_types[i].t == t) return k_types[i].name;
    return "default";
}

int kv_type_parse(const char *s, kv_type *out, mx_error *err) {
    for (int i = 0; s && i < N_TYPES; i++)
        if (!strcasecmp(s, k_types[i].name)) {
            *out = k_types[i].t;
            return 0;
        }
    /* llama.cpp's other --cache-type values */
    static const char *k_llama[] = {"q4_1", "q5_0", "q5_1", "iq4_nl"};
    for (size_t i = 0; s && i < sizeof k_llama / sizeof k_llama[0]; i++)
        if (!strcasecmp(s, k_llama[i]))
            return mx_fail(err, "cache type %s (llama.cpp) is not supported; supported: " TYPES_LIST, s);
    return mx_fail(err, "unknown cache type '%s'; supported: " TYPES_LIST, s ? s : "");
}

mx_dtype kv_type_dtype(kv_type t, const backend_ops *be) {
    for (int i = 0; i < N_TYPES; i++)
        if (k_types[i].t == t) return k_types[i].dtype;
    /* the backend picks the default (CPU: f32 reference; CUDA: bf16) */
    return be->kv_dtype == MX_BF16 || be->kv_dtype == MX_F16 ? be->kv_dtype : MX_F32;
}

kv_type kv_type_of_dtype(mx_dtype t) {
    for (int i = 0; i < N_TYPES; i++)
        if (k_types[i].dtype == t) return k_types[i].t;
    return KV_TYPE_DEFAULT;
}

int kv_type_check(kv_type t, const backend_ops *be, int head_dim, const char *which, mx_error *err) {
    const mx_dtype dt = kv_type_dtype(t, be);
    const char *name = kv_type_name(kv_type_of_dtype(dt)), *sp = which ? " " : "";
    which = which ? which : "";
    if (be->device != MX_DEV_CPU && !be->kv_types_all && dt != be->kv_dtype)
        return mx_fail(err, "%s%scache type %s: the %s backend keeps %s KV; %s run on the CPU backend "
                       "only", which, sp, name, be->device == MX_DEV_CUDA ? "CUDA" : be->name,
                       kv_type_name(kv_type_of_dtype(be->kv_dtype)),
                       mx_dtype_block(dt) > 1 ? "quantized KV caches" : "other cache types");
    if (head_dim > 0 && kvq_turbo_bits(dt)) {
        mx_error why;
        if (kv_turbo_check(head_dim, kvq_turbo_bits(dt), &why))
            return mx_fail(err, "%s%scache type %s: %s", which, sp, name, why.msg);
    }
    if (head_dim > 0 && head_dim % mx_dtype_block(dt))
        return mx_fail(err, "%s%scache type %s stores blocks of %d values along head_dim, and the "
                       "model's head_dim is %d (not a multiple of %d); use f32, f16 or bf16",
                       which, sp, name, mx_dtype_block(dt), head_dim, mx_dtype_block(dt));
    return 0;
}

/* Rank pools on each rank's device (kv->kr / kv->vr). */
static int alloc_rank_pools(kv_cache *kv, mx_error *err) {
    const int n = kv_tp(kv), L = kv->p.n_layers;
    const int64_t hk = kv->p.n_kv_heads / n;
    kv->kr = calloc((size_t)L * n, sizeof(mx_tensor));
    kv->vr = calloc((size_t)L * n, sizeof(mx_tensor));
    if (!kv->kr || !kv->vr) return mx_fail(err, "kv cache: out of memory");
    const size_t kb = pool_bytes(kv, kv->kt) / n, vb = pool_bytes(kv, kv->vt) / n;
    for (int r = 0; r < n; r++) {
        if (kv->be->bind_device(r, err)) return -1;
        for (int l = 0; l < L; l++) {
            void *kd = kv->be->alloc(kb), *vd = kv->be->alloc(vb);
            kv->kr[l * n + r] = mx_tensor_3d(kd, kv->kt, kv->n_rows, hk, head_elems(kv, kv->kt), kv->be->device);
            kv->vr[l * n + r] = mx_tensor_3d(vd, kv->vt, kv->n_rows, hk, head_elems(kv, kv->vt), kv->be->device);
            if (!kd || !vd)
                return mx_fail(err, "kv cache: cannot allocate %zu MiB for layer %d on rank %d's "
                               "device (ctx %d, %s)", (kb + vb) >> 20, l, r,
                               kv->p.ctx_size, kv_storage_name(kv->p.storage));
        }
    }
    for (int l = 0; l < L; l++) { /* k/v describe rank 0's pools (dtype, bytes per token) */
        kv->k[l] = kv->kr[l * n];
        kv->v[l] = kv->vr[l * n];
    }
    kv_bind(kv, 0);
    return 0;
}

int kv_cache_new(kv_cache **out, const kv_cache_params *p, const backend_ops *be, mx_error *err) {
    if (p->storage != KV_STORAGE_DENSE && p->storage != KV_STORAGE_PAGED)
        return mx_fail(err, "kv cache: storage must be resolved to dense or paged");
    if (p->ctx_size <= 0 || p->n_layers <= 0 || p->n_kv_heads <= 0 || p->head_dim <= 0)
        return mx_fail(err, "kv cache: invalid geometry");
    if (p->tp_size < 0 || (p->tp_size > 1 && p->n_kv_heads % p->tp_size))
        return mx_fail(err, "kv cache: %d KV heads cannot be split across %d tensor-parallel ranks",
                       p->n_kv_heads, p->tp_size);
    if (p->storage == KV_STORAGE_PAGED && (p->block_size <= 0 || p->n_blocks <= 0))
        return mx_fail(err, "kv cache: paged storage needs block_size > 0 and n_blocks > 0");
    if (p->storage == KV_STORAGE_DENSE && p->n_seqs <= 0)
        return mx_fail(err, "kv cache: dense storage needs n_seqs > 0");
    if (kv_type_check(p->type_k, be, p->head_dim, "K", err) ||
        kv_type_check(p->type_v, be, p->head_dim, "V", err))
        return -1;
    kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv) return mx_fail(err, "kv cache: out of memory");
    kv->p = *p;
    kv->be = be;
    kv->n_units = paged(kv) ? p->n_blocks : p->n_seqs;
    kv->n_rows = paged(kv) ? (int64_t)p->n_blocks * p->block_size : (int64_t)p->n_seqs * p->ctx_size;
    kv->k = calloc((size_t)p->n_layers, sizeof(mx_tensor));
    kv->v = calloc((size_t)p->n_layers, sizeof(mx_tensor));
    kv->refcount = calloc((size_t)kv->n_units, sizeof(int32_t));
    kv->free_stack = malloc((size_t)kv->n_units * sizeof(int32_t));
    if (!kv->k || !kv->v || !kv->refcount || !kv->free_stack) goto oom;
    kv->kt = kv_type_dtype(p->type_k, be);
    kv->vt = kv_type_dtype(p->type_v, be);
    kv->p.type_k = kv_type_of_dtype(kv->kt); /* resolved: what kv_cache_params_of reports */
    kv->p.type_v = kv_type_of_dtype(kv->vt);
    if (kv_tp(kv) > 1 && be->bind_device) {
        if (alloc_rank_pools(kv, err)) {
            kv_bind(kv, 0);
            kv_cache_free(kv);
            return -1;
        }
    }
    /* V = K (MLA): the K pool is the V pool too */
    kv->p.v_is_k = p->v_is_k && kv->kt == kv->vt && kv_tp(kv) == 1;
    const size_t kb = pool_bytes(kv, kv->kt), vb = kv->p.v_is_k ? 0 : pool_bytes(kv, kv->vt);
    for (int l = 0; l < p->n_layers && !kv->kr; l++) {
        void *kd = be->alloc(kb), *vd = kv->p.v_is_k ? kd : be->alloc(vb);
        kv->k[l] = mx_tensor_3d(kd, kv->kt, kv->n_rows, p->n_kv_heads, head_elems(kv, kv->kt), be->device);
        kv->v[l] = mx_tensor_3d(vd, kv->vt, kv->n_rows, p->n_kv_heads, head_elems(kv, kv->vt), be->device);
        if (!kd || !vd) {
            kv_cache_free(kv);
            return mx_fail(err, "kv cache: cannot allocate %zu MiB for layer %d (ctx %d, %s)",
                           (kb + vb) >> 20, l, p->ctx_size, kv_storage_name(p->storage));
        }
    }
    /* free stack pops from the end: push in reverse so unit 0 is used first */
    for (int i = 0; i < kv->n_units; i++) kv->free_stack[i] = kv->n_units - 1 - i;
    kv->n_free = kv->n_units;
    if (paged(kv)) {
        const int nb = p->n_blocks;
        kv->indexed = calloc((size_t)nb, 1);
        kv->hash = calloc((size_t)nb, sizeof(uint64_t));
        kv->parent = calloc((size_t)nb, sizeof(uint64_t));
        kv->tokens = calloc((size_t)nb * (size_t)p->block_size, sizeof(int32_t));
        kv->bucket_next = malloc((size_t)nb * sizeof(int32_t));
        kv->lru_prev = malloc((size_t)nb * sizeof(int32_t));
        kv->lru_next = malloc((size_t)nb * sizeof(int32_t));
        kv->n_buckets = 1;
        while (kv->n_buckets < 2u * (uint32_t)nb) kv->n_buckets <<= 1;
        kv->bucket = malloc(kv->n_buckets * sizeof(int32_t));
        if (!kv->indexed || !kv->hash || !kv->parent || !kv->tokens || !kv->bucket_next ||
            !kv->lru_prev || !kv->lru_next || !kv->bucket)
            goto oom;
        for (uint32_t i = 0; i < kv->n_buckets; i++) kv->bucket[i] = -1;
        kv->lru_head = kv->lru_tail = -1;
    }
    *out = kv;
    return 0;
oom:
    kv_cache_free(kv);
    return mx_fail(err, "kv cache: out of memory");
}

void kv_cache_free(kv_cache *kv) {
    if (!kv) return;
    if (kv->kr || kv->vr) { /* rank pools: each freed on its device */
        const int n = kv_tp(kv);
        for (int r = 0; r < n; r++) {
            mx_error e;
            if (kv->be->bind_device(r, &e)) continue;
            for (int l = 0; l < kv->p.n_layers; l++) {
                if (kv->kr && kv->kr[l * n + r].data) kv->be->free(kv->kr[l * n + r].data);
                if (kv->vr && kv->vr[l * n + r].data) kv->be->free(kv->vr[l * n + r].data);
            }
        }
        kv_bind(kv, 0);
        free(kv->kr);
        free(kv->vr);
        kv->kr = kv->vr = NULL;
        if (kv->k) memset(kv->k, 0, (size_t)kv->p.n_layers * sizeof(mx_tensor)); /* rank 0's views */
        if (kv->v) memset(kv->v, 0, (size_t)kv->p.n_layers * sizeof(mx_tensor));
    }
    for (int l = 0; kv->k && l < kv->p.n_layers; l++) {
        if (kv->k[l].data) kv->be->free(kv->k[l].data);
        if (kv->v[l].data && !kv->p.v_is_k) kv->be->free(kv->v[l].data);
    }
    free(kv->k); free(kv->v); free(kv->refcount); free(kv->free_stack);
    free(kv->indexed); free(kv->hash); free(kv->parent); free(kv->tokens);
    free(kv->bucket); free(kv->bucket_next); free(kv->lru_prev); free(kv->lru_next);
    free(kv);
}

const kv_cache_params *kv_cache_params_of(const kv_cache *kv) { return &kv->p; }
mx_tensor *kv_cache_k(kv_cache *kv, int layer) { return &kv->k[layer]; }

/* ==== Tensor-parallel views ====
 * With tp_size N the pool memory is rank-major: rank r's [n_rows, n_kv_heads / N, head_dim]
 * block starts at r * n_rows * (n_kv_heads / N) * head_dim, so each rank's pool is contiguous
 * for the attention op. N = 1 is the plain pool. */
static mx_tensor rank_view(const kv_cache *kv, const mx_tensor *pool, int rank) {
    const int n = kv_tp(kv);
    if (n == 1) return *pool;

    /* a q pool's head row is head_dim / 32 whole blocks, so a rank's heads start on a block */
    const int64_t hk = kv->p.n_kv_heads / n, he = pool->shape[2];
    mx_tensor t = mx_tensor_3d((char *)pool->data + (size_t)(rank * kv->n_rows * hk * he) *
                                                        mx_dtype_size(pool->dtype),
                               pool->dtype, kv->n_rows, hk, he, pool->device);
    return t;
}
/* separate rank pools (multi-device backends): rank r's own allocation on device r */
mx_tensor kv_cache_k_rank(kv_cache *kv, int layer, int rank) {
    return kv->kr ? kv->kr[layer * kv_tp(kv) + rank] : rank_view(kv, &kv->k[layer], rank);
}
mx_tensor kv_cache_v_rank(kv_cache *kv, int layer, int rank) {
    return kv->vr ? kv->vr[layer * kv_tp(kv) + rank] : rank_view(kv, &kv->v[layer], rank);
}
mx_tensor *kv_cache_v(kv_cache *kv, int layer) { return &kv->v[layer]; }
int kv_cache_table_block(const kv_cache *kv) { return paged(kv) ? kv->p.block_size : kv->p.ctx_size; }

size_t kv_cache_bytes_per_token(const kv_cache *kv) {
    const size_t head = (size_t)head_elems(kv, kv->kt) * mx_dtype_size(kv->kt) +
                        (kv->p.v_is_k ? 0 : (size_t)head_elems(kv, kv->vt) * mx_dtype_size(kv->vt));
    return (size_t)kv->p.n_layers * (size_t)kv->p.n_kv_heads * head;
}

/* ==== LRU of cached, unreferenced blocks ==== */
static void lru_remove(kv_cache *kv, int b) {
    const int pv = kv->lru_prev[b], nx = kv->lru_next[b];
    if (pv >= 0) kv->lru_next[pv] = nx; else kv->lru_head = nx;
    if (nx >= 0) kv->lru_prev[nx] = pv; else kv->lru_tail = pv;
    kv->n_lru--;
}

static void lru_push(kv_cache *kv, int b) {
    kv->lru_prev[b] = kv->lru_tail;
    kv->lru_next[b] = -1;
    if (kv->lru_tail >= 0) kv->lru_next[kv->lru_tail] = b; else kv->lru_head = b;
    kv->lru_tail = b;
    kv->n_lru++;
}

/* ==== Prefix index ==== */
static uint64_t block_hash(const int32_t *tokens, int bs, uint64_t parent) {
    return XXH64(tokens, (size_t)bs * sizeof(int32_t), parent);
}

static void index_remove(kv_cache *kv, int b) {
    int32_t *pp = &kv->bucket[kv->hash[b] & (kv->n_buckets - 1)];
    while (*pp >= 0 && *pp != b) pp = &kv->bucket_next[*pp];
    if (*pp == b) *pp = kv->bucket_next[b];
    kv->indexed[b] = 0;
}

static int index_find(const kv_cache *kv, uint64_t h, uint64_t parent, const int32_t *tokens) {
    const int bs = kv->p.block_size;
    for (int b = kv->bucket[h & (kv->n_buckets - 1)]; b >= 0; b = kv->bucket_next[b])
        if (kv->hash[b] == h && kv->parent[b] == parent &&
            !memcmp(kv->tokens + (size_t)b * bs, tokens, (size_t)bs * sizeof(int32_t)))
            return b;
    return -1;
}

static void index_insert(kv_cache *kv, int b, uint64_t h, uint64_t parent, const int32_t *tokens) {
    const int bs = kv->p.block_size;
    kv->hash[b] = h;
    kv->parent[b] = parent;
    memcpy(kv->tokens + (size_t)b * bs, tokens, (size_t)bs * sizeof(int32_t));
    const uint32_t i = (uint32_t)(h & (kv->n_buckets - 1));
    kv->bucket_next[b] = kv->bucket[i];
    kv->bucket[i] = b;
    kv->indexed[b] = 1;
}

/* ==== Units (blocks or slots) ==== */
static int unit_alloc(kv_cache *kv) {
    int b = -1;
    if (kv->n_free > 0) {
        b = kv->free_stack[--kv->n_free];
    } else if (paged(kv) && kv->lru_head >= 0) {
        b = kv->lru_head; /* evict the least recently released cached block */
        lru_remove(kv, b);
        index_remove(kv, b);
    }
    if (b >= 0) kv->refcount[b] = 1;
    return b;
}

static void unit_ref(kv_cache *kv, int b) {
    if (kv->refcount[b] == 0 && paged(kv) && kv->indexed[b]) lru_remove(kv, b);
    kv->refcount[b]++;
}

static void unit_unref(kv_cache *kv, int b) {
    if (--kv->refcount[b] > 0) return;
    if (paged(kv) && kv->indexed[b]) lru_push(kv, b);
    else kv->free_stack[kv->n_free++] = b;
}

int kv_cache_available(const kv_cache *kv) { return kv->n_free + (paged(kv) ? kv->n_lru : 0); }

int kv_cache_blocks_for(const kv_cache *kv, int n_tokens) {
    return paged(kv) ? (n_tokens + kv->p.block_size - 1) / kv->p.block_size : 1;
}

/* ==== Sequences ==== */
void kv_seq_init(kv_seq *s) { memset(s, 0, sizeof *s); }

static int seq_grow_table(kv_seq *s, int need) {
    if (need <= s->cap_blocks) return 0;
    int cap = s->cap_blocks ? s->cap_blocks : 4;
    while (cap < need) cap *= 2;
    int32_t *nb = realloc(s->blocks, (size_t)cap * sizeof(int32_t));
    if (!nb) return -1;
    s->blocks = nb;
    s->cap_blocks = cap;
    return 0;
}

int kv_seq_reserve(kv_cache *kv, kv_seq *s, int n_tokens, mx_error *err) {
    if (n_tokens > kv->p.ctx_size)
        return mx_fail(err, "sequence of %d tokens exceeds the context size %d", n_tokens,
                       kv->p.ctx_size);
    const int need = kv_cache_blocks_for(kv, n_tokens);
    if (need <= s->n_blocks) return 0;
    if (kv_cache_available(kv) < need - s->n_blocks) return 1;
    if (seq_grow_table(s, need)) return 1;
    while (s->n_blocks < need) s->blocks[s->n_blocks++] = unit_alloc(kv);
    return 0;
}

void kv_seq_release(kv_cache *kv, kv_seq *s) {
    for (int i = s->n_blocks - 1; i >= 0; i--) unit_unref(kv, s->blocks[i]);
    free(s->blocks);
    kv_seq_init(s);
}

int kv_seq_match_prefix(kv_cache *kv, kv_seq *s, const int32_t *tokens, int n) {
    if (!paged(kv) || !kv->p.prefix_cache || s->n_blocks || n <= 1) return 0;
    const int bs = kv->p.block_size;
    const int max_blocks = (n - 1) / bs; /* keep the last prompt token to compute */
    uint64_t chain = 0;
    int matched = 0;
    for (; matched < max_blocks; matched++) {
        const int32_t *bt = tokens + (size_t)matched * bs;
        const uint64_t h = block_hash(bt, bs, chain);
        const int b = index_find(kv, h, chain, bt);
        if (b < 0 || seq_grow_table(s, matched + 1)) break;
        unit_ref(kv, b);
        s->blocks[s->n_blocks++] = b;
        chain = h;
    }
    s->n_tokens = matched * bs;
    s->n_indexed = matched;
    s->chain_hash = chain;
    kv->hit_tokens += (uint64_t)s->n_tokens;
    return s->n_tokens;
}

int kv_seq_prepare_write(kv_cache *kv, kv_seq *s, int from, int to) {
    if (!paged(kv) || to <= from) return 0;
    const int bs = kv->p.block_size;
    for (int bi = from / bs; bi <= (to - 1) / bs && bi < s->n_blocks; bi++) {
        const int old = s->blocks[bi];
        if (kv->refcount[old] <= 1) continue;
        const int nb = unit_alloc(kv);
        if (nb < 0) return 1;
        for (int l = 0; l < kv->p.n_layers; l++) {
            /* pools are shared per layer: copy rows old -> new block (same pool), in each
             * tensor-parallel rank's part of it */
            const int64_t src = (int64_t)old * bs, dst = (int64_t)nb * bs;
            for (int r = 0; r < kv_tp(kv); r++) {
                kv_bind(kv, r); /* rank pools on their own devices: copy there */
                mx_tensor kr = kv_cache_k_rank(kv, l, r), vr = kv_cache_v_rank(kv, l, r);
                kv->be->kv_copy_rows(&kr, dst, src, bs);
                if (!kv->p.v_is_k) kv->be->kv_copy_rows(&vr, dst, src, bs); /* else done */
            }
            kv_bind(kv, 0);
        }
        unit_unref(kv, old);
        s->blocks[bi] = nb;
        if (bi < s->n_indexed) s->n_indexed = bi; /* the copy is ours: re-indexed on commit */
    }
    return 0;
}

int64_t kv_seq_row(const kv_cache *kv, const kv_seq *s, int pos) {
    if (!paged(kv)) return (int64_t)s->blocks[0] * kv->p.ctx_size + pos;
    const int bs = kv->p.block_size;
    return (int64_t)s->blocks[pos / bs] * bs + pos % bs;
}

void kv_seq_commit(kv_cache *kv, kv_seq *s, const int32_t *tokens, int n_tokens) {
    s->n_tokens = n_tokens;
    if (!paged(kv) || !kv->p.prefix_cache) return;
    const int bs = kv->p.block_size;
    while ((s->n_indexed + 1) * bs <= n_tokens) {
        const int bi = s->n_indexed;
        const int32_t *bt = tokens + (size_t)bi * bs;
        const uint64_t h = block_hash(bt, bs, s->chain_hash);
        const int b = s->blocks[bi];
        /* An identical block computed by another sequence may already be indexed: keep that
         * one; this block stays private and is freed on release. */
        if (!kv->indexed[b] && index_find(kv, h, s->chain_hash, bt) < 0)
            index_insert(kv, b, h, s->chain_hash, bt);
        s->chain_hash = h;
        s->n_indexed++;
    }
}

void kv_cache_get_stats(const kv_cache *kv, kv_cache_stats *st) {
    st->n_blocks = kv->n_units;
    st->n_free = kv->n_free;
    st->n_cached = paged(kv) ? kv->n_lru : 0;
    st->n_used = kv->n_units - kv->n_free - st->n_cached;
    st->prefix_hits_tokens = kv->hit_tokens;
}
