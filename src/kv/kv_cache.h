/* KV cache: per-layer K/V pools on the backend, addressed by physical rows (backend.h).
 *
 * Paged storage: a pool of fixed-size blocks (16 tokens default) with refcounts; each sequence
 * has a page table of block ids. Full blocks are registered in a prefix index keyed by a hash
 * chain (xxHash64 of the block's tokens seeded with the previous block's hash), so a new
 * sequence whose prompt starts with cached blocks shares them instead of recomputing. A block
 * whose refcount drops to 0 stays indexed (reusable) until the allocator evicts it, least
 * recently released first. A write into a shared block copies it first (copy-on-write).
 *
 * Dense storage: one contiguous region of ctx_size tokens per sequence slot, the same
 * addressing with a single block of ctx_size tokens; no prefix sharing.
 *
 * Cache types (llama.cpp's --cache-type-k / --cache-type-v): K and V pools each hold f32, f16,
 * bf16, or ggml's q8_0 / q4_0 blocks of 32 values along head_dim (backend/kvfmt/kv_quant.h). A q pool is
 * [n_phys_rows, n_kv_heads, head_dim / 32] of MX_Q8_0 / MX_Q4_0 elements (one block each), so a
 * block never crosses a head and rows, rank slices and copy-on-write stay whole elements.
 * TurboQuant (turbo2 / turbo3 / turbo4, backend/kvfmt/kv_turbo.h) has the same shape of blocks, of a head's
 * values after a fixed random rotation (head_dim a power of two >= 32). The CPU backend takes
 * every type; a device backend only its own kv_dtype. */
#ifndef MLXCEL_KV_KV_CACHE_H
#define MLXCEL_KV_KV_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "base/error.h"
#include "model/model_spec.h"

typedef enum { KV_STORAGE_AUTO = 0, KV_STORAGE_DENSE, KV_STORAGE_PAGED } kv_storage;

const char *kv_storage_name(kv_storage s);
/* "auto" | "dense" | "paged" -> 0, else -1. */
int kv_storage_parse(const char *s, kv_storage *out);
/* Resolves auto for a model: paged for the qualified families (llama, qwen3, gemma3 text, llama4),
 * dense elsewhere. `reason` receives e.g. "auto: llama is a qualified family". */
kv_storage kv_storage_resolve(kv_storage requested, const model_spec *spec, char *reason,
                              size_t reason_len);

typedef enum {
    KV_TYPE_DEFAULT = 0, /* the backend's kv_dtype (CPU f32, CUDA bf16) */
    KV_TYPE_F32, KV_TYPE_F16, KV_TYPE_BF16, KV_TYPE_Q8_0, KV_TYPE_Q4_0,
    KV_TYPE_TURBO2, KV_TYPE_TURBO3, KV_TYPE_TURBO4, /* TurboQuant (backend/kvfmt/kv_turbo.h) */
} kv_type;

/* "f32", "f16", "bf16", "q8_0", "q4_0", "turbo2".."turbo4" ("default" for KV_TYPE_DEFAULT). */
const char *kv_type_name(kv_type t);
/* The names above (case-insensitive) -> 0. Else -1 and err: llama.cpp's other cache types
 * (q4_1, q5_0, q5_1, iq4_nl) named as not supported here, with the supported list. */
int kv_type_parse(const char *s, kv_type *out, mx_error *err);
/* The pool element type of t on backend be (KV_TYPE_DEFAULT: be->kv_dtype). */
mx_dtype kv_type_dtype(kv_type t, const backend_ops *be);
/* The cache type of a pool dtype (KV_TYPE_DEFAULT when it is none). */
kv_type kv_type_of_dtype(mx_dtype t);
/* Whether be can hold a cache of type t for heads of head_dim values (0: not known yet, that
 * check is skipped): a device backend only its own kv_dtype; q8_0 / q4_0 need head_dim % 32 ==
 * 0. -1 and a message naming the type otherwise, e.g. "K cache type q8_0: the CUDA backend
 * keeps bf16 KV; quantized KV caches run on the CPU backend only" (which: "K", "V" or NULL). */
int kv_type_check(kv_type t, const backend_ops *be, int head_dim, const char *which, mx_error *err);

typedef struct kv_cache_params {
    kv_storage storage;  /* DENSE or PAGED (resolved) */
    int n_layers, n_kv_heads, head_dim;
    int ctx_size;        /* max tokens per sequence */
    int n_seqs;          /* dense: number of slots */
    int block_size;      /* paged: tokens per block */
    int n_blocks;        /* paged: pool size */
    bool prefix_cache;   /* paged: share full prompt blocks between sequences */
    int tp_size;         /* tensor-parallel ranks sharing the pools (0 or 1: none); see
                            kv_cache_k_rank */
    kv_type type_k, type_v; /* cache types (0: the backend's); kv_cache_params_of gives them
                               resolved */
    bool v_is_k;         /* every V row is written equal to its K row (DeepSeek's MLA latent,
                            model_mla.c): with one type for both and no tensor parallelism one
                            pool serves as both, half the memory; kv_cache_params_of says
                            whether it does */
} kv_cache_params;

typedef struct kv_cache kv_cache;

/* One sequence's view of the cache. Zero-initialise (or kv_seq_init) before use. */
typedef struct kv_seq {
    int32_t *blocks;     /* [n_blocks] page table (dense: one entry, the slot) */
    int n_blocks, cap_blocks;
    int n_tokens;        /* tokens whose K/V are in the cache */
    int n_indexed;       /* leading full blocks registered in the prefix index */
    uint64_t chain_hash; /* hash of block n_indexed - 1 (0 before the first) */
} kv_seq;

int kv_cache_new(kv_cache **out, const kv_cache_params *p, const backend_ops *be, mx_error *err);
void kv_cache_free(kv_cache *kv);
const kv_cache_params *kv_cache_params_of(const kv_cache *kv);

/* Per-layer pools: [n_phys_rows, n_kv_heads, head_dim / mx_dtype_block] of the K / V cache
 * type's dtype (default: the backend's kv_dtype, CPU f32). */
mx_tensor *kv_cache_k(kv_cache *kv, int layer);
mx_tensor *kv_cache_v(kv_cache *kv, int layer);
/* Rank r's part of a layer's pool under tensor parallelism: [n_phys_rows, n_kv_heads / tp,
 * head_dim / block], contiguous (rank-major memory of one pool; on a multi-device backend, a separate
 * pool on rank r's device, and kv_cache_k/v describe rank 0's); tp_size <= 1: the whole pool. */
mx_tensor kv_cache_k_rank(kv_cache *kv, int layer, int rank);
mx_tensor kv_cache_v_rank(kv_cache *kv, int layer, int rank);
/* Block size as seen by attention (block_size, or ctx_size for dense). */
int kv_cache_table_block(const kv_cache *kv);
/* Bytes of K+V per token (all layers), exactly what the pools hold per physical row. */
size_t kv_cache_bytes_per_token(const kv_cache *kv);

void kv_seq_init(kv_seq *s);
/* Makes room for positions [0, n_tokens): allocates blocks (paged) or a slot (dense).
 * Returns 0, or 1 when the pool is exhausted (nothing changed; the caller may preempt),
 * or -1 with err when n_tokens exceeds ctx_size. */
int kv_seq_reserve(kv_cache *kv, kv_seq *s, int n_tokens, mx_error *err);
/* Releases the sequence's blocks / slot; full indexed blocks stay cached for reuse. */
void kv_seq_release(kv_cache *kv, kv_seq *s);
/* Attaches cached blocks matching the longest full-block prefix of tokens[0..n), keeping at
 * least one token to compute. Returns the number of reused tokens (s->n_tokens). Paged with
 * prefix cache only; 0 otherwise. s must be empty. */
int kv_seq_match_prefix(kv_cache *kv, kv_seq *s, const int32_t *tokens, int n);
/* Before writing positions [from, to): copies any shared block in that range (copy-on-write).
 * Returns 0, 1 when no block is free for the copy. */
int kv_seq_prepare_write(kv_cache *kv, kv_seq *s, int from, int to);
/* Physical row of position pos. */
int64_t kv_seq_row(const kv_cache *kv, const kv_seq *s, int pos);
/* After the forward wrote positions up to n_tokens: records it and indexes newly full blocks
 * (tokens[0..n_tokens) are the sequence's tokens). */
void kv_seq_commit(kv_cache *kv, kv_seq *s, const int32_t *tokens, int n_tokens);

/* Free capacity: blocks that can be allocated now (free + evictable cached), or free slots. */
int kv_cache_available(const kv_cache *kv);
/* Blocks needed to hold n tokens (dense: 1 slot). */
int kv_cache_blocks_for(const kv_cache *kv, int n_tokens);

typedef struct kv_cache_stats {
    int n_blocks, n_free, n_cached, n_used;
    uint64_t prefix_hits_tokens; /* tokens served from the prefix index since creation */
} kv_cache_stats;
void kv_cache_get_stats(const kv_cache *kv, kv_cache_stats *st);

#endif
