/* CPU paged decode attention, split-K (flash-decoding): the KV sequence of each (sequence, kv
 * head) is cut into `num_splits` block ranges that run on different threads, each producing a
 * partial softmax (max m, normaliser l, unnormalised p.V); a merge combines them by
 * log-sum-exp. The split count is the tunable `paged-decode-splits`.
 *
 * Layout matches the CUDA kernel (src/backend/cuda/cuda_ops.h) and the CPU backend's pools
 * ([n_phys_rows, n_kv_heads, head_dim] f32 with phys_row = block * block_size + offset), so the
 * engine's decode rows can call it as is: with seq = mx_attn_batch.seq, seq_lens = pos + 1,
 * page_table = block_table, and the params' scale / softcap / window, it computes what
 * backend_cpu()->attention computes for those rows (test_tune_cpu_attn checks it). It lives in
 * src/tune until the CPU backend adopts it. */
#ifndef MLXCEL_TUNE_CPU_PAGED_DECODE_H
#define MLXCEL_TUNE_CPU_PAGED_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define CPU_PAGED_MAX_SPLITS 256

typedef struct cpu_paged_attn_args {
    const float *q;                 /* [B, Hq, D] one query token per sequence */
    const float *k_cache, *v_cache; /* [n_blocks, block_size, Hkv, D] */
    const int32_t *page_table;      /* [n_seqs, pt_stride] physical block ids */
    const int32_t *seq;             /* [B] page-table row of query b; NULL = row b */
    const int32_t *seq_lens;        /* [B] cached tokens (the current one included), >= 1 */
    float *o;                       /* [B, Hq, D] */
    float *workspace;               /* cpu_paged_attn_workspace_floats(B, Hq, D, splits) */
    size_t workspace_floats;
    int B, n_q_heads, n_kv_heads, head_dim, block_size, pt_stride;
    int64_t n_blocks;               /* blocks in the caches (bounds-checks the page table) */
    int n_seqs;                     /* page-table rows (bounds-checks seq; B when seq is NULL) */
    float scale;                    /* usually 1 / sqrt(head_dim) */
    float softcap;                  /* 0 = none, else scores = softcap * tanh(scores / softcap) */
    int window;                     /* 0 = none, else only the last `window` keys */
    int num_splits;                 /* >= 1; a sequence with fewer blocks uses fewer */
} cpu_paged_attn_args;

/* Floats of workspace: partial (m, l, acc[D]) per (sequence, q head, split). */
size_t cpu_paged_attn_workspace_floats(int B, int n_q_heads, int head_dim, int num_splits);

/* Validates the arguments (page-table entries included) and computes o. 0 or -1 with err. */
int cpu_paged_decode_attn(const cpu_paged_attn_args *a, mx_error *err);

#endif
