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
 * on CUDA all defaults are 0 ("auto": the kernel's own policy). */
int tune_get_paged_decode_splits(const tune_attn_shape *s, const tune_device *dev,
                                 tune_source *src);
int tune_get_qmv_multirow(const tune_qmat_shape *s, const tune_device *dev, tune_source *src);
int tune_get_qmm_tile_m(const tune_qmat_shape *s, const tune_device *dev, tune_source *src);

/* One line for startup logs: "autotune: cache (dir /x/autotune)" / "autotune: off". Pure. */
void tune_policy_describe(char *buf, size_t n);

/* Forgets memoised results and re-reads nothing else (tests; after `mlxcel tune`). */
void tune_policy_reset(void);

/* Budget of tuning on first use (smaller than `mlxcel tune`'s: it runs inside a request). */
tune_profile_opts tune_policy_online_opts(void);

#endif
