/* Private state of the CUDA engine backend (host C; only src/backend/cuda includes this).
 *
 * One state per device (tensor parallelism: one thread per GPU, each bound to its device's
 * state by the bind_rank hook; every other thread uses device 0's), one stream per device:
 * every op is enqueued on `st` in program order, so the only
 * host synchronisations are the logits copy at the end of a forward, the weight upload ring
 * and the grouped MoE path of large (prefill) steps. Device failures are recorded as a sticky
 * error (first one wins) and reported by the `check` hook at the end of each forward. */
#ifndef MLXCEL_BACKEND_CUDA_BE_H
#define MLXCEL_BACKEND_CUDA_BE_H

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_info.h"
#include "backend/cuda/cuda_lt.h"
#include "backend/cuda/cuda_ops.h"
#include "tune/tune_ops.h"

#define CU_PIN_BUFS 4
#define CU_PIN_BYTES ((size_t)64 << 20)   /* 4 x 64 MiB reused pinned staging buffers */
#define CU_MISC_BYTES ((size_t)4 << 20)   /* small host->device copies (ids, tables) */
#define CU_GEMV_MAX_ROWS 8                /* rows the fast GEMV kernel takes */
#define CU_GRAPH_MAX_ROWS 256             /* decode steps up to this batch are captured */
#define CU_MOE_PAIR_MAX_ROWS 64           /* MoE rows handled by the per-pair device path */

typedef struct cu_pending {   /* lazy weight: device memory reserved, copied on first use */
    char *dptr;
    size_t nbytes;            /* device bytes (bf16) */
    const void *host;
    mx_dtype src_dtype;
    int64_t numel;
    bool raw;                 /* host dtype kept (quantized parts) */
    bool done;
} cu_pending;

typedef struct cu_graph {
    uint64_t key;
    cudaGraphExec_t exec;     /* NULL: key seen once (run eagerly, captured next time) */
    uint64_t last_use;
} cu_graph;

typedef struct cu_moe_table {  /* device arrays of expert weight pointers, per layer */
    const void **h_ptrs;       /* host copy of the pointer list: the lookup key */
    size_t n_ptrs;
    const uint16_t **d_ptrs;   /* [3][E] gate, up, down (dense bf16 or packed codes) */
    const void **d_sptrs;      /* [3][E] scales of quantized projections (NULL: all dense) */
    const void **d_bptrs;      /* [3][E] biases */
    int bits[3], group[3], sbt[3]; /* per projection; bits 0 = dense */
    bool quant;                /* some projection is quantized */
    int E;
} cu_moe_table;

typedef struct cu_lt_plan {
    int N, K, rows;
    long ldw, ldo;
    cu_lt_desc d; /* d.op != NULL: the slot is in use */
    uint64_t last_use;
} cu_lt_plan;

#define CU_LT_PLANS 64
#define CU_LT_WS_BYTES ((size_t)32 << 20) /* cuBLASLt workspace (the tuner's qmm bench too) */
#define CU_SPLIT_MEMO 256

#define CU_QKNOB_MEMO 1024

typedef struct cu_qknob_memo {  /* one resolved qmv multirow / qmm tile_m (cuda_qmatmul.c) */
    int op, rows, N, K, bits, group, value;
} cu_qknob_memo;

typedef struct cu_split_memo {  /* one resolved decode split count (cu_decode_splits) */
    int B, Hq, Hkv, D, bs, cap, S;
} cu_split_memo;

typedef struct cu_state {
    bool ready;
    cudaStream_t st;
    cuda_device_facts facts;
    /* ---- settings (from mx_env, resolved once) ---- */
    int gemv_rows;            /* rows <= this use the GEMV kernels */
    int gemv_tc_rows;         /* gemv_rows < rows <= this: tensor-core GEMV on the bf16 input */
    int gemv_split_rows;      /* ... as bf16 hi + lo parts up to these rows */
    int gemv_fuse;            /* MLXCEL_GEMV_FUSE: the most rows (0..2) at which the norm, the
                               * residual add and the GLU run inside the GEMVs */
    int gemv_rope;            /* MLXCEL_GEMV_ROPE: the most rows at which RoPE + the KV write run
                               * inside the q/k/v GEMV (max(gemv_fuse, 1), or 0) */
    int qmv_multirow;         /* MLXCEL_QMV_MULTIROW (0: the kernel's default) */
    int qmm_tile;             /* MLXCEL_QMM_TILE_M (0: the kernel's default) */
    bool qmv_tc;              /* MLXCEL_QMV_TC: tensor-core qmv (qmv_tc.cu) for bits 4 / 8 */
    bool qmv_bulk;            /* MLXCEL_QMV_BULK: streaming tensor-core qmv (qmv_bulk.cu) */
    int qmv_bulk_min_rows;    /* MLXCEL_QMV_BULK_MIN_ROWS: fewest rows it takes */
    int qmv_mma;              /* MLXCEL_QMV_MMA: most rows the 4-bit tensor-core qmv takes */
    int qmv_i8;               /* MLXCEL_QMV_I8: most 4-bit rows the int8-activation qmv takes */
    int qmv_i8_q8;            /* MLXCEL_QMV_I8_Q8: the same for 8-bit weights */
    bool qmv_i8_glu;          /* MLXCEL_QMV_I8_GLU: qmv_i8's prep computes the GLU it reads */
    bool qmv_i8_norm;         /* MLXCEL_QMV_I8_NORM: ... and the RMSNorm it reads */
    bool qmv_i8_inprep;       /* MLXCEL_QMV_I8_INPREP: one-row x prep inside the qmv CTAs */
    bool qmv_tiled;           /* MLXCEL_QMV_TILED: repack quantized weights at upload */
    const float *qx_ready;    /* the GLU output whose int8 x the last qmv launch left in the
                               * workspace (glu_next_q), else NULL */
    long q_fused[4];          /* qmv launches with x_inprep, res, glu_next_q, rope (tests) */
    int graph_cache;          /* 0 = no graphs */
    bool deterministic;
    int forced_splits;
    bool lazy, pinned, profile;
    /* ---- sticky error ---- */
    char err[512];
    bool has_err;
    /* ---- memory accounting ---- */
    void **al_ptr;
    size_t *al_size;
    int n_al, cap_al;
    uint64_t cur_bytes, peak_bytes;
    /* ---- weight upload ---- */
    void *pin[CU_PIN_BUFS];
    cudaEvent_t pin_ev[CU_PIN_BUFS];
    bool pin_busy[CU_PIN_BUFS];
    int pin_next;
    void *misc;               /* pinned CU_MISC_BYTES */
    cudaEvent_t misc_ev;
    bool misc_busy;
    uint64_t up_bytes, up_tensors, lazy_bytes_done;
    uint64_t up_repacked;     /* quantized weights uploaded in the tiled layout */
    double up_seconds, lazy_seconds;
    bool ttft_printed;
    cu_pending *pend;
    int n_pend, cap_pend, n_pend_left;
    bool pend_sorted;
    int max_k;                /* largest K (last dim) of any weight: sizes the bf16 x buffer */
    /* ---- scratch on the device ---- */
    void *xbf;                /* [rows, max_k] bf16 input of cuBLASLt */
    size_t xbf_cap;
    void *ycat;               /* [rows, sum N] fp32 output of a joined group (lt_run_joined) */
    size_t ycat_cap;
    void *lt_ws;
    size_t lt_ws_size;
    cublasLtHandle_t lt;
    cu_lt_plan plans[CU_LT_PLANS];
    uint64_t use_clock;
    void *attn_ws;            /* split-K partials */
    size_t attn_ws_cap;
    void *kvq_q;              /* TurboQuant K pools: the rotated queries */
    size_t kvq_q_cap;
    void *attn_cnt;           /* split-K merge counters (zero at rest) */
    size_t attn_cnt_cap;
    void *moe_buf;            /* MoE pair / group buffers */
    size_t moe_cap;
    void *ids_buf;            /* ids / indices that are not this step's (eager only) */
    size_t ids_cap;
    cu_moe_table *moe_tab;
    int n_moe_tab;
    void *moe_zero;           /* [moe_zero_cap] zero bf16: other TP ranks' experts */
    size_t moe_zero_cap;
    bool warned_lt;
    void *qmv_ws;             /* qmv: x' and chunk sums (cuda_qmv_workspace_bytes) */
    void *qstage;             /* the load's MLX-layout staging for cu_weight_upload_q */
    size_t qstage_cap;
    size_t qmv_ws_cap;
    void *qmm_buf;            /* qmm: bf16 x + dequantized slab */
    size_t qmm_cap;
    void *greedy_buf;         /* [ids n][logprobs n] on the device */
    size_t greedy_cap;
    /* ---- step arena: this forward's host arrays, on the device ---- */
    void *arena_h[2];
    cudaEvent_t arena_ev[2];
    bool arena_busy[2];
    int arena_i;
    size_t arena_hcap;
    char *arena_d;
    size_t arena_dcap;
    uint64_t arena_gen;       /* bumped when the device arena moves (graphs see addresses) */
    uint64_t step_id;
    const mx_attn_batch *ab;
    const int32_t *h_tokens, *h_out;
    int n_rows, n_out, n_seqs, table_cap;
    bool decode_only, in_step;
    int32_t *d_tokens, *d_pos, *d_seq, *d_out, *d_table, *d_tile0, *d_tilen;
    int64_t *d_write;
    int n_tiles, tile_rows;
    int hint_tile_rows;       /* rows per attention tile the last attention wanted */
    int hint_Hq, hint_D;
    bool hint_moe;
    /* ---- deferred GEMVs: consecutive matmuls on the same x run as one launch ---- */
    struct {
        const float *x;      /* what the kernel reads */
        const float *xin;    /* what the matmuls named: x, or the norm output when fused */
        int rows, K;
        const uint16_t *bias[3];
        cuda_gemv_segs segs;
        cuda_gemv_fuse fuse; /* norm prologue, residual add, GLU (1..2 rows, see cuda_ops.h) */
    } pend_mm;
    /* deferred quantized GEMVs (same rules; at most one of pend_mm / pend_q is held) */
    struct {
        cuda_qmv_args a;
        const uint16_t *bias[CUDA_QMV_MAX_SEGS];
    } pend_q;
    /* cuBLASLt matmuls on the same x (rows past the GEMV's), one bf16 conversion for all;
     * up != NULL: x is a GLU's gate, converted as act(x) * up */
    struct {
        const float *x, *up;
        int act, rows, K, n;
        const uint16_t *W[3], *bias[3];
        float *y[3];
        int N[3];
    } pend_lt;
    /* a residual add waiting for the RMSNorm that reads its result (fused launch) */
    struct {
        float *x;
        const float *y;
        int rows, cols;
        bool on;
    } pend_add;
    /* an RMSNorm (after its pending residual add when y != NULL) past the GEMV rows, held so
     * that when a cuBLASLt matmul reads its output next, the norm kernel writes that matmul's
     * bf16 input too (xbf_of = out then) and the conversion pass is skipped */
    struct {
        float *x, *out;
        const float *y;
        const uint16_t *w;
        float eps, offset;
        int rows, D;
        bool on;
    } pend_norm;
    const float *xbf_of;      /* xbf holds this fp32 x as bf16 (valid until the group runs) */
    /* rope(q), rope(k) waiting for the KV write of k (fused launch) */
    struct {
        float *x[2];
        long stride[2];
        int heads[2];
        const float *cs;
        int n, D, rot, count;
    } pend_rope;
    /* out = act(gate) * up waiting for the matmul that reads out: the GEMV computes it while
     * loading x (the GLU kernel and its output buffer are skipped; out is NOT written then,
     * which the forward never notices: it reads out only through that matmul) */
    struct {
        float *out;
        const float *gate, *up;
        int rows, cols, act;
        long os, gs, us;
        bool on;
    } pend_glu;
    /* ---- decode split counts resolved through the autotune policy ---- */
    tune_device tune_dev;     /* this GPU as the autotune records name it */
    bool tune_dev_ok;
    cu_split_memo split_memo[CU_SPLIT_MEMO];
    int n_split_memo;
    bool warned_capture_tune;
    /* ---- quantized-matmul launch parameters resolved through the autotune policy ---- */
    cu_qknob_memo qknob_memo[CU_QKNOB_MEMO];
    int n_qknob_memo;
    bool warned_capture_qknob;
    /* ---- graphs ---- */
    cu_graph *graphs;
    int n_graphs;
    bool capturing;
    uint64_t cap_key;
    uint64_t graphs_captured, graphs_replayed;
} cu_state;

/* The calling thread's device state: device 0's unless the thread was bound to another by
 * bind_rank (backend_cuda.c). A thread-local pointer, so the ops of rank threads running at
 * the same time never touch each other's streams, scratch, plans or graphs. */
extern _Thread_local cu_state *cu_cur;
#define g_cu (*cu_cur)
/* Device `dev`'s state, initialised (stream, cuBLASLt, pinned buffers) on first use; binds
 * the calling thread to it (cudaSetDevice + cu_cur). */
int cu_bind_device(int dev, mx_error *err);
int cu_bound_device(void);            /* the calling thread's device ordinal */

/* ==== Shared helpers (backend_cuda.c) ==== */
/* Records the first failure; returns 0 for cudaSuccess, else -1. */
int cu_ck(int code, const char *what);
void cu_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void *cu_dev_alloc(size_t n);         /* tracked cudaMalloc (not zeroed); NULL on failure */
void cu_dev_free(void *p);            /* tracked cudaFree */
int cu_ensure(void **buf, size_t *cap, size_t need); /* grow-only scratch */
/* Host array -> device through the pinned misc buffer (eager steps only). NULL on error. */
void *cu_upload_small(void *dev_dst, const void *src, size_t n);
void cu_graphs_clear(void);

/* ==== Weights (cuda_load.c) ==== */
int cu_weight_upload(mx_tensor *dst, const mx_tensor *host, mx_error *err);
/* Same, keeping the host dtype (U32 packed codes, f16/f32 scales and biases). */
int cu_weight_upload_raw(mx_tensor *dst, const mx_tensor *host, mx_error *err);
int cu_weight_upload_group(mx_tensor *dst, const mx_tensor *host, int n, mx_error *err);
int cu_weight_upload_q(mx_qweight *q, const mx_tensor *w, const mx_tensor *s, const mx_tensor *b,
                       mx_error *err);
int cu_finish_load(mx_error *err);
void cu_resident(const void *dptr);   /* lazy policy: makes the weight holding dptr resident */
void cu_resident_all(void);

/* ==== Step, attention, graphs (cuda_step.c) ==== */
int cu_step_begin(const mx_step *st, mx_error *err);
int cu_step_end(mx_error *err);
void cu_kv_write(mx_tensor *k_pool, mx_tensor *v_pool, const mx_tensor *k, const mx_tensor *v,
                 const mx_attn_batch *b);
void cu_attention(mx_tensor *out, const mx_tensor *q, const mx_tensor *k_pool,
                  const mx_tensor *v_pool, const mx_attn_batch *b, const mx_attn_params *p);
/* Split count of the paged decode kernel for a pure decode step of B rows at table capacity
 * capacity_tokens: MLXCEL_PAGED_DECODE_SPLITS > MLXCEL_SDPA_DETERMINISTIC > autotune winner
 * (MLXCEL_AUTOTUNE cache|1) > built-in policy. Fixed for its arguments within a process (the
 * graph key holds B and the capacity; the geometry is the model's), so a captured step
 * replays with the count its eager run used. */
int cu_decode_splits(int B, int n_q_heads, int n_kv_heads, int head_dim, int block_size,
                     int capacity_tokens);

/* ==== Matmul and MoE (cuda_matmul.c) ==== */
void cu_matmul_raw(float *y, long ldy, const float *x, long ldx, int rows, const mx_tensor *w,
                   const mx_tensor *bias);
void cu_matmul(mx_tensor *out, const mx_tensor *x, const mx_tensor *w, const mx_tensor *bias);
int cu_moe(mx_tensor *out, const mx_tensor *x, const mx_tensor *router_logits,
           const mx_moe_experts *ex, const mx_moe_params *p, mx_error *err);
void cu_lt_destroy(void);
/* Launches every deferred op (GEMV group, residual add, RoPE). Every op calls it before
 * touching device data; an op that defers itself flushes the other kinds first, so at most
 * one kind is pending and program order is kept. */
void cu_flush(void);
void cu_flush_mm(void);
void cu_flush_rope(void);
void cu_flush_glu(void);
void cu_flush_norm(void);
/* GEMV epilogue fusions of a held 1..2-row GEMV group (cuda_matmul.c); false: not taken */
bool cu_mm_take_add(float *x, const float *y, int rows, int cols);
bool cu_mm_take_glu(float *out, const float *gate, const float *up, int rows, int cols, int act);
/* MLXCEL_DIAG_SKIP's kind of a layer matmul launch (GEMV or qmv) by its shape */
unsigned cu_skip_kind(int n_segs, int N0, int K);

/* ==== Quantized matmul (cuda_qmatmul.c) ==== */
int cu_q_sb(mx_dtype t);                          /* CUDA_QSB_* or -1 */
int cu_q_shape(const mx_qweight *w, int *N, int *K); /* -1 (recorded) when unusable */
void cu_matmul_q(mx_tensor *out, const mx_tensor *x, const mx_qweight *w, const mx_tensor *bias);
void cu_matmul_q_raw(float *y, long ldy, const float *x, long ldx, int rows, const mx_qweight *w,
                     const mx_tensor *bias);
void cu_flush_qmv(void);                          /* part of cu_flush_mm */
/* The same two epilogues for a held one-row qmv_i8 group (MLXCEL_QMV_I8_INPREP) */
bool cu_q_take_add(float *x, const float *y, int rows, int cols);
bool cu_q_take_glu(float *out, const float *gate, const float *up, int rows, int cols, int act);
/* ... and the RoPE + KV write of its q / k / v outputs (cuda_qmv_args' rope fields) */
bool cu_q_take_rope(const float *cs, const int64_t *rows, void *k_pool, void *v_pool,
                    int pool_bf16, int head_dim);

#endif
