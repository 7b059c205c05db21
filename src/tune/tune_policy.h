/* Consumption of tuned values: what a kernel launch should use, and where it came from.
 *
 * Precedence: explicit override variable (MLXCEL_PAGED_DECODE_SPLITS, MLXCEL_QMV_MULTIROW,
 * MLXCEL_QMM_TILE_M) > cached winner > built-in default. The cache is consulted only when
 * MLXCEL_AUTOTUNE is `cache` or `1`; unset or `0` makes no file access at all. With `1` an
 * unseen paged-decode-splits shape is tuned on first use (on devices this build can profile)
 * and stored. Results are memoised per key, so files are read once per process; the first
 * resolution of each key is logged at info level (generate and serve show what they apply). */
#ifndef MLXCEL_TUNE_POLICY_H
#define MLXCEL_TUNE_POLICY_H

#include <stdbool.h>
#include <stddef.h>

#include "tune/tune_ops.h"

typedef enum {
    TUNE_SRC_DEFAULT = 0, /* built-in policy */
    TUNE_SRC_CACHE,       /* a stored winner */
    TUNE_SRC_TUNED,       /* tuned just now (MLXCEL_AUTOTUNE=1) and stored */
    TUNE_SRC_OVERRIDE     /* the explicit environment variable */
} tune_source;

const char *tune_source_name(tune_source s);

/* Decode attention shape at run time. */
typedef struct tune_attn_shape {
    int batch, context; /* sequences in the step; longest cached length */
    int head_dim, q_heads, kv_heads, block_size;
} tune_attn_shape;

/* Quantized matmul shape at run time: rows x [n, k] weight, bits / group. */
typedef struct tune_qmat_shape {
    int rows, n, k, bits, group_size;
} tune_qmat_shape;

/* dev: the device the launch runs on; NULL = this host's CPU (identified lazily, only when the
 * cache is consulted). src may be NULL. On the CPU the default is tune_cpu_default_splits();
 * on CUDA the split default is tune_cuda_default_splits() at the capacity of s->context
 * (dev->threads = SM count) and the quantized-matmul defaults are 0 ("auto"). */
int tune_get_paged_decode_splits(const tune_attn_shape *s, const tune_device *dev,
                                 tune_source *src);
int tune_get_qmv_multirow(const tune_qmat_shape *s, const tune_device *dev, tune_source *src);
int tune_get_qmm_tile_m(const tune_qmat_shape *s, const tune_device *dev, tune_source *src);

/* The CUDA decode step's split count (cu_decode_splits): MLXCEL_PAGED_DECODE_SPLITS >
 * MLXCEL_SDPA_DETERMINISTIC=1 (TUNE_CUDA_DET_SPLITS) > cached winner (MLXCEL_AUTOTUNE cache
 * or 1; with 1 an unseen bucket is tuned now, so call it outside any graph capture) >
 * tune_cuda_default_splits(). The bucket is (batch, tune_cuda_context_of_capacity(capacity),
 * geometry), so the value is a function of (batch, geometry, capacity) within a process:
 * lookups are memoised. dev: the CUDA device (its SM count sizes the default). Result in
 * [1, TUNE_CUDA_MAX_SPLITS]. */
int tune_cuda_paged_decode_splits(int batch, int q_heads, int kv_heads, int head_dim,
                                  int block_size, int capacity_tokens, const tune_device *dev,
                                  tune_source *src);

/* What a quantized-matmul kernel says about its knob (multirow / tile_m): the value its
 * built-in policy uses for a shape, and whether a value can launch for it. NULL members:
 * default 0, every value valid. */
typedef struct tune_knob_rules {
    int (*default_value)(tune_op op, const tune_qmat_shape *s);
    bool (*valid)(tune_op op, const tune_qmat_shape *s, int value);
} tune_knob_rules;

/* Consumption hooks of the CUDA quantized kernels: MLXCEL_QMV_MULTIROW / MLXCEL_QMM_TILE_M >
 * cached winner > rules->default_value(). A value (override or cached) the rules reject is
 * replaced by the default with a warning (once per op); a stored 0 ("auto") is the default.
 * Memoised per bucket like the other lookups. */
int tune_qmv_multirow(const tune_qmat_shape *s, const tune_device *dev, const tune_knob_rules *r,
                      tune_source *src);
int tune_qmm_tile_m(const tune_qmat_shape *s, const tune_device *dev, const tune_knob_rules *r,
                    tune_source *src);

/* One line for startup logs: "autotune: cache (dir /x/autotune)" / "autotune: off". Pure. */
void tune_policy_describe(char *buf, size_t n);

/* Forgets memoised results and re-reads nothing else (tests; after `mlxcel tune`). */
void tune_policy_reset(void);

/* Budget of tuning on first use (smaller than `mlxcel tune`'s: it runs inside a request). */
tune_profile_opts tune_policy_online_opts(void);

#endif
