/* The tunable ops, their candidate sets and defaults, devices, shape buckets and the
 * (op x batch x context x candidates) matrix that `mlxcel tune` profiles. */
#ifndef MLXCEL_TUNE_OPS_H
#define MLXCEL_TUNE_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "tune/tune_profile.h"

typedef enum {
    TUNE_OP_PAGED_DECODE_SPLITS = 0, /* KV splits of split-K paged decode attention */
    TUNE_OP_QMM_TILE,                /* M tile of the quantized GEMM (prefill), CUDA */
    TUNE_OP_QMV_MULTIROW,            /* row window of the quantized GEMV (decode), CUDA */
    TUNE_OP_COUNT
} tune_op;

typedef enum { TUNE_DEV_CPU = 0, TUNE_DEV_CUDA } tune_device_kind;

/* "paged-decode-splits" etc.; -1 when unknown. */
const char *tune_op_name(tune_op op);
int tune_op_from_name(const char *name, tune_op *op);
bool tune_op_supported(tune_op op, tune_device_kind dev);
const char *tune_device_kind_name(tune_device_kind k);

/* ==== Device identity ====
 * A record is only valid on the device it was measured on: the id joins the name, the compute
 * capability (CPU: the thread count the kernels use) and the memory size. */
typedef struct tune_device {
    tune_device_kind kind;
    char name[128];
    int cc_major, cc_minor; /* CUDA only */
    int threads;            /* CPU: OpenMP threads; CUDA: SM count */
    uint64_t mem_bytes;
    char id[256];           /* e.g. "cpu:AMD EPYC 7B13:t2:mem23G", "cuda:NVIDIA H200:sm90:mem140G" */
} tune_device;

/* This host's CPU (reads /proc/cpuinfo, /proc/meminfo). Never fails: unknown parts read
 * "unknown". */
void tune_device_cpu(tune_device *d);
/* CUDA device 0; -1 with err when this build or machine has none. */
int tune_device_cuda(tune_device *d, mx_error *err);
/* Rebuilds d->id from the other fields (for devices filled by hand, e.g. in tests). */
void tune_device_make_id(tune_device *d);

/* ==== Geometry ==== */
typedef struct tune_geom {
    int head_dim, q_heads, kv_heads, block_size; /* paged-decode-splits */
    int hidden, intermediate, q_bits, q_group;   /* qmm-tile / qmv-multirow */
} tune_geom;

/* Llama-3.1-8B: head_dim 128, 32 q heads, 8 kv heads, block 16; hidden 4096,
 * intermediate 14336, 4-bit group 64. */
tune_geom tune_geom_defaults(void);
int tune_geom_check(const tune_geom *g, mx_error *err);

/* ==== Shape buckets ====
 * Runtime shapes map to the nearest point (in log scale) of a fixed grid so that records made
 * by `mlxcel tune` are found for nearby shapes: batch on powers of two (1..1024), context on
 * powers of four (256..1048576), which contain the default matrix 1,2,4,8 x 1024,4096,16384. */
int tune_bucket_batch(int batch);
int tune_bucket_context(int context);

/* Bucket strings (part of a record's key). */
void tune_bucket_attn(char *buf, size_t n, int batch, int context, const tune_geom *g);
void tune_bucket_qmat(char *buf, size_t n, int rows, const tune_geom *g);

/* ==== Candidates and defaults ==== */
/* CUDA split-K limits (cuda_ops.h's CUDA_ATTN_MAX_SPLITS / CUDA_ATTN_DET_SPLITS; the CUDA
 * build asserts they agree). */
#define TUNE_CUDA_MAX_SPLITS 128
#define TUNE_CUDA_DET_SPLITS 16
/* SM count assumed when the device is unknown (dry run without a GPU): an H100/H200's. */
#define TUNE_CUDA_DEFAULT_SMS 132

/* The CUDA backend's built-in split count (cu_decode_splits): about two CTAs per SM over the
 * B x kv_heads (sequence, kv head) pairs, or 1 when the pairs alone fill every SM, but at
 * least one 16-token chunk per warp (4 warps) in each split of the table capacity, in [1,
 * TUNE_CUDA_MAX_SPLITS]. sm_count <= 0 means TUNE_CUDA_DEFAULT_SMS. */
int tune_cuda_default_splits(int batch, int kv_heads, int capacity_tokens, int sm_count);
/* Table capacity the CUDA engine has for a step whose longest sequence holds `context`
 * tokens: the page-table stride grows in powers of two, so ceil(context / block) blocks
 * rounded up to a power of two, times the block size. */
int tune_cuda_capacity_tokens(int context, int block_size);
/* The context a CUDA decode step of table capacity `capacity_tokens` is keyed by: its
 * sequences hold between capacity / 2 and capacity tokens (the stride doubles when one
 * outgrows it), so the middle, 3/4 of the capacity. Capacity 32768 (a 16416-token
 * sequence) thus maps to the 16384 bucket, not to 65536. */
int tune_cuda_context_of_capacity(int capacity_tokens);
/* Largest split count worth a candidate for `context` tokens: one 16-token chunk per warp
 * (4 warps) in each split, at most TUNE_CUDA_MAX_SPLITS. */
int tune_cuda_max_splits(int context);

/* Keys per piece of the CPU attention (cpu_attention.c's CPU_ATTN_PIECE; it asserts they
 * agree): the unit a CPU split count divides a row's keys into. */
#define TUNE_CPU_ATTN_PIECE 256
/* Pieces of a `context`-token row: the most tasks a CPU split count can give it. */
int tune_cpu_attn_pieces(int context);
/* Built-in CPU split count: split only when batch x kv heads (the unsplit tasks) leaves
 * threads idle, ceil(threads / tasks), and never beyond one piece per split. */
int tune_cpu_default_splits(int batch, int kv_heads, int n_pieces, int threads);

/* One matrix row: an op at one (batch, context) bucket. value 0 = "auto" (the kernel's own
 * policy), the default of the CUDA quantized-matmul knobs. CUDA paged-decode-splits
 * candidates: powers of two up to tune_cuda_max_splits(context) plus the built-in count
 * (tune_cuda_default_splits at the capacity of `context`, with the device's SM count). context is 0 for ops where it does not apply. */
typedef struct tune_point {
    tune_op op;
    int batch, context;
    char bucket[128];
    int n_cand;
    int cand[TUNE_MAX_CANDIDATES];
    int default_value;
} tune_point;

/* Candidate set and default of one point. */
int tune_point_make(tune_op op, const tune_device *dev, const tune_geom *g, int batch, int context,
                    tune_point *p, mx_error *err);

/* The matrix for one op: batches x contexts (snapped to buckets, duplicates dropped; ops
 * without a context axis use batches only). *n = rows written (<= cap). */
int tune_matrix_build(tune_op op, const tune_device *dev, const tune_geom *g, const int *batches,
                      int n_batches, const int *contexts, int n_contexts, tune_point *out, int cap,
                      int *n, mx_error *err);

/* "auto" for 0, the number otherwise. */
const char *tune_value_str(int v, char buf[16]);

#endif
