/* Decode-path CUDA kernels: plain launchers over raw device pointers + shapes + a stream.
 *
 * This is the layer under the future CUDA backend (src/backend/backend.h): it knows nothing
 * about tensors or models. Every launcher returns 0 (cudaSuccess) or a cudaError_t value;
 * shapes the kernels cannot take return cudaErrorInvalidValue (2) before anything is
 * launched, so the backend should validate with user-facing messages first and treat a
 * non-zero return here as an internal error. Launchers never synchronise the stream.
 *
 * Dtype codes: CUDA_OPS_F32 (fp32) and CUDA_OPS_BF16 (bf16, raw uint16 bits). Pointers to
 * vector data must be 16-byte aligned where noted (cudaMalloc gives 256). */
#ifndef MLXCEL_BACKEND_CUDA_OPS_H
#define MLXCEL_BACKEND_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_elem.h"
#include "backend/cuda/cuda_qknobs.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { CUDA_OPS_F32 = 0, CUDA_OPS_BF16 = 1 };

/* ==== GEMV: y[r, n] = sum_k x[r, k] * W[n, k], r < rows <= 8 ====
 * W: [N, K] bf16 row-major (safetensors layout), read once per call for all rows.
 * x: [rows, K] (x_dtype), y: [rows, N] (y_dtype); fp32 accumulation.
 * Needs K % 8 == 0 and W, x 16-byte aligned; 1 <= rows <= 8. */
int cuda_gemv_bf16(const uint16_t *W, const void *x, int x_dtype, void *y, int y_dtype,
                   int rows, int N, int K, cudaStream_t stream);
/* Several weights sharing x and K in one launch (Q/K/V, gate/up): segment i computes
 * y[i][r, n] = sum_k x[r, k] * W[i][n, k] for n < N[i]; y[i] rows have stride N[i].
 * cta0 is filled by the launcher. */
#define CUDA_GEMV_MAX_SEGS 3
typedef struct cuda_gemv_segs {
    const uint16_t *W[CUDA_GEMV_MAX_SEGS];
    void *y[CUDA_GEMV_MAX_SEGS];
    int N[CUDA_GEMV_MAX_SEGS];
    int cta0[CUDA_GEMV_MAX_SEGS];
    int n;
} cuda_gemv_segs;
int cuda_gemv_bf16_multi(const cuda_gemv_segs *segs, const void *x, int x_dtype, int y_dtype,
                         int rows, int K, cudaStream_t stream);
/* Tensor-core GEMV for 1..CUDA_GEMV_TC_MAX_ROWS rows with bf16 x [rows, K] (gemv_tc.cu):
 * fp32 y per segment (rows of stride N[i]); K % 8 == 0, W and x 16-byte aligned. variant
 * picks a launch shape (0: the default; 0 .. cuda_gemv_tc_variants() - 1, for the bench). */
#define CUDA_GEMV_TC_MAX_ROWS 32
int cuda_gemv_tc(const cuda_gemv_segs *segs, const uint16_t *x, int rows, int K, int variant,
                 cudaStream_t stream);
int cuda_gemv_tc_variants(void);
/* The same with x given as bf16 hi + lo parts (cuda_bf16_split_rows): x [2 rows, K], rows
 * 0..rows-1 hi, rows..2 rows-1 lo; y = W (hi + lo), ~fp32-x precision at the bf16 kernel's
 * weight stream (the two parts are two MMA column groups sharing every weight fragment).
 * rows <= CUDA_GEMV_TC_MAX_ROWS / 2. */
int cuda_gemv_tc_split(const cuda_gemv_segs *segs, const uint16_t *x, int rows, int K,
                       int variant, cudaStream_t stream);
/* dst [2 rows, cols] bf16: rows 0..rows-1 bf16(v), rows..2 rows-1 bf16(v - bf16(v)), where
 * v = x, or act(x) * up when up != NULL (act as cuda_glu_f32); x, up [rows, cols]. */
int cuda_bf16_split_rows(uint16_t *dst, const float *x, const float *up, int act, int rows,
                         int cols, cudaStream_t stream);
/* Fusions of the 1..2-row GEMV (fp32 x and y), each saving a launch of a decode step:
 * - norm_w: x is taken through rms_norm(x) * (norm_w + norm_offset) (eps norm_eps) by every
 *   CTA in its prologue (rows * K * 4 <= 64 KB); the normalized rows are stored in xn too;
 * - res (one segment): res[r, n] += y[r, n], the residual add (res must not be x);
 * - glu (two segments gate, up with equal N): glu[r, n] = act(gate[r, n]) * up[r, n];
 * - rope_cs (three segments q, k, v of head_dim-row heads, N % head_dim == 0, k and v equal):
 *   RoPE (neox pairs (j, j + head_dim / 2), all of head_dim rotated) on q and k with row r's
 *   (cos, sin) pairs rope_cs[r, head_dim / 2, 2], written rotated to y as cuda_rope_kv_f32
 *   leaves them; k and v also go to the pools (bf16 when pool_bf16, [slot, Hkv, head_dim]) at
 *   slot rope_rows[r] (< 0: not written). One launch for the projections, RoPE and KV write.
 * y of every segment is written as usual. cudaErrorInvalidValue when a fusion does not apply
 * (the caller then runs the plain ops). */
typedef struct cuda_gemv_fuse {
    const uint16_t *norm_w;
    float norm_eps, norm_offset;
    float *xn;
    float *res;
    float *glu;
    int act;
    const float *rope_cs;
    const int64_t *rope_rows;
    void *k_pool, *v_pool;
    int pool_bf16, head_dim;
} cuda_gemv_fuse;
int cuda_gemv_bf16_fused(const cuda_gemv_segs *segs, const cuda_gemv_fuse *f, const float *x,
                         int rows, int K, cudaStream_t stream);

/* ==== RMSNorm: y[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * (w + offset) ====
 * x: [rows, H] (x_dtype), w: [H] bf16, y: [rows, H] (y_dtype), fp32 accumulation.
 * offset is 0 for Llama, 1 for Gemma-style (1 + w). Needs H % 8 == 0, 16-byte aligned rows. */
int cuda_rmsnorm(const void *x, int x_dtype, const uint16_t *w, float offset, float eps,
                 void *y, int y_dtype, int rows, int H, cudaStream_t stream);

/* ==== RoPE (neox / HF rotate_half) on q and k, fused with the paged KV write ====
 * For token t (position pos[t], sequence seq[t], or t when seq == NULL):
 *   q_out[t, h, :] = rope(q[t, h, :])                     h < n_q_heads       (bf16)
 *   k_cache[slot(t), h, :] = rope(k[t, h, :])             h < n_kv_heads      (bf16)
 *   v_cache[slot(t), h, :] = v[t, h, :]
 * with slot(t) = block page_table[seq[t] * pt_stride + pos[t] / block_size], row
 * pos[t] % block_size. Cache pools: [n_blocks, block_size, n_kv_heads, head_dim] bf16.
 * q/k/v rows of token t start at q + t * q_stride (elements), so the fused QKV output
 * [T, (Hq + 2 Hkv) * D] can be passed directly (q_out may alias q).
 * inv_freq: [head_dim / 2] fp32 on the device (see cuda_rope_default_inv_freq; scaled
 * variants such as llama3 just pass another table). Angles are pos * inv_freq in fp32, the
 * rotation in fp32, one rounding to bf16, as HF does in fp32 attention.
 * Slots whose block id is outside [0, n_blocks) are skipped (the scheduler guarantees them). */
typedef struct cuda_rope_kv_args {
    const uint16_t *q, *k, *v;         /* [T, *, D] bf16 with the strides below */
    long q_stride, k_stride, v_stride; /* elements between tokens */
    uint16_t *q_out;                   /* [T, Hq, D] bf16, row stride q_out_stride */
    long q_out_stride;
    uint16_t *k_cache, *v_cache;       /* [n_blocks, block_size, Hkv, D] bf16 */
    const int32_t *pos;                /* [T] */
    const int32_t *seq;                /* [T] page-table row per token, or NULL (row t) */
    const int32_t *page_table;         /* [n_seqs, pt_stride] block ids */
    const float *inv_freq;             /* [D / 2] */
    int T, n_q_heads, n_kv_heads, head_dim, block_size, pt_stride, n_blocks;
} cuda_rope_kv_args;
int cuda_rope_kv_write(const cuda_rope_kv_args *a, cudaStream_t stream);
/* Host helper: inv_freq[i] = 1 / theta^(2i / head_dim) in fp32 as HF computes it. */
void cuda_rope_default_inv_freq(float *inv_freq, int head_dim, float theta);

/* ==== Paged decode attention (flash-decoding: split-K + log-sum-exp merge) ====
 * One query token per sequence: q [B, Hq, D] bf16, o [B, Hq, D] (o_dtype). Sequence b
 * attends to its first seq_lens[b] cached tokens (the current token already written),
 * found through page_table[b * pt_stride + i / block_size]. GQA: query head h reads kv
 * head h / (Hq / Hkv); one CTA reads a kv head's span once for all its query heads.
 *
 * Splits: num_splits > 0 uses exactly that many splits per sequence (sequence b's blocks
 * cut into num_splits equal ranges, so the reduction order depends only on b's own length:
 * batch-invariant and bitwise reproducible); num_splits == 0 picks a count from the grid
 * size (fills the SMs; results then depend on the batch shape, still reproducible run to
 * run). deterministic != 0 with num_splits == 0 means CUDA_ATTN_DET_SPLITS.
 * Workspace: cuda_paged_attn_workspace_bytes(B, Hq, D, max splits) bytes, 16-aligned, and
 * split_counters: B * Hkv ints, zero before the first call, left zero by every call (the
 * last split of a (row, kv head) merges; with more than one split both are required).
 * Supported: head_dim 64 or 128, block_size a multiple of 16 (dense storage: the slot size),
 * Hq / Hkv in {1, 2, 4, 8}.
 * Row mode (pos != NULL, the engine's form): row b is one query at position pos[b] of the
 * sequence whose page-table row is row_seq[b] (NULL: b); it attends to keys
 * [max(0, pos - window + 1), pos] (window 0: all); seq_lens is then unused. q may be fp32
 * (q_f32 = 1). softcap > 0: scores = softcap * tanh(scores / softcap). Zero-initialised new
 * fields give the original behaviour. */
#define CUDA_ATTN_DET_SPLITS 16
#define CUDA_ATTN_MAX_SPLITS 128
typedef struct cuda_paged_attn_args {
    const void *q;                            /* [B, Hq, D] bf16 (or fp32, q_f32) */
    const uint16_t *k_cache, *v_cache;        /* [n_blocks, block_size, Hkv, D] heads of kf / vf */
    const int32_t *page_table;                /* [B, pt_stride] */
    const int32_t *seq_lens;                  /* [B], each in [1, pt_stride * block_size] */
    void *o;                                  /* [B, Hq, D] (o_dtype) */
    int o_dtype;
    void *workspace;                          /* see cuda_paged_attn_workspace_bytes */
    size_t workspace_bytes;
    int *split_counters;                      /* [B * Hkv], zero (see above) */
    int B, n_q_heads, n_kv_heads, head_dim, block_size, pt_stride;
    int max_seq_len;                          /* host-side bound on seq_lens (sizes the grid) */
    float scale;                              /* usually 1 / sqrt(head_dim) */
    int num_splits;                           /* 0 = auto */
    int deterministic;
    const int32_t *pos;                       /* [B] row mode, or NULL */
    const int32_t *row_seq;                   /* [B] page-table row per query (row mode) */
    int q_f32;                                /* q is fp32 [B, Hq, D] */
    int window;                               /* 0 = none */
    int chunk;                                /* 0 = none: keys from pos - pos % chunk */
    float softcap;                            /* 0 = none */
    int kv_settled;                           /* row mode: each row's keys before pos[b] were
                                                 written before the previous launch (a row
                                                 is its sequence's only one): those are read
                                                 before the PDL wait */
    cuda_kv_fmt kf, vf;                       /* the pools' formats: bf16 (zeroed) or any
                                                 other (the CUDA-core walk decoding on load;
                                                 TurboQuant rows as stored: q and the output
                                                 rotated by the caller) */
} cuda_paged_attn_args;
size_t cuda_paged_attn_workspace_bytes(int B, int n_q_heads, int head_dim, int max_splits);
/* The split count a call with these arguments would use (for logs, tuning and tests). */
int cuda_paged_attn_splits(const cuda_paged_attn_args *a);
int cuda_paged_decode_attn(const cuda_paged_attn_args *a, cudaStream_t stream);

/* ==== Greedy argmax over [rows, V] fp32 logits -> out [rows] int32 ====
 * Ties pick the smallest index (torch.argmax's first maximum); NaN never wins.
 * Workspace: cuda_argmax_workspace_bytes(rows) bytes. Needs V >= 1. */
size_t cuda_argmax_workspace_bytes(int rows);
int cuda_argmax_f32(const float *logits, int rows, int V, int32_t *out, void *workspace,
                    cudaStream_t stream);

/* ==== Greedy sampling on the device: ids [rows] and log-softmax of the chosen id ====
 * NaN counts as -inf, lowest id wins ties, a row without a finite logit gives id -1. */
int cuda_greedy_f32(const float *logits, int rows, int V, int32_t *ids, float *lps,
                    cudaStream_t stream);

/* ==== MLX affine-quantized matmul (qgemv.cu, qmm.cu) ====
 * y[r, n] = sum_k x[r, k] * Wq[n, k] with Wq[n, k] = scale[n, k / group] * q[n, k] +
 * bias[n, k / group] (src/backend/qfmt/qfmt.h: codes packed as one little-endian bit stream per row
 * in u32 words). x fp32 [rows, K] (row stride ldx), y fp32 [rows, N] (row stride ldy).
 * bits in {2, 3, 4, 5, 6, 8}, group in {32, 64, 128}, K % group == 0, scales and biases in
 * one dtype (CUDA_QSB_*). Weight, scales and biases of a row are contiguous; the packed
 * weight must be 16-byte aligned.
 *
 * Tunables (the autotuner calls these launchers with explicit values; the backend passes
 * the defaults, or MLXCEL_QMV_MULTIROW / MLXCEL_QMM_TILE_M when set):
 *   qmv-multirow (cuda_qmv): the row window, i.e. how many activation rows one pass of the
 *     kernel handles; rows are cut into ceil(rows / multirow) passes (grid.y), each pass
 *     reading the whole weight once. Valid: CUDA_QMV_MULTIROW_VALUES.
 *   qmm-tile (cuda_qmm): M of the GEMM in cuBLAS terms = weight rows per slab. qmm
 *     dequantizes the weight slab by slab (tile_m rows of W -> bf16 scratch) and runs a
 *     cuBLASLt bf16 GEMM (fp32 accumulate) per slab; small slabs stay in L2 (the dequantized
 *     bytes never reach HBM), large slabs give cuBLASLt bigger GEMMs. Valid:
 *     CUDA_QMM_TILE_VALUES. */
enum { CUDA_QSB_BF16 = 0, CUDA_QSB_F16 = 1, CUDA_QSB_F32 = 2 };
#define CUDA_QMV_MAX_ROWS 8
#define CUDA_QMV_MAX_SEGS 3
/* CUDA_QMV_MULTIROW_VALUES / CUDA_QMM_TILE_VALUES (+ _COUNT): cuda_qknobs.h */

/* Segments share x, K, bits, group and the scales dtype (Q/K/V or gate/up in one launch). */
typedef struct cuda_qmv_args {
    const uint32_t *w[CUDA_QMV_MAX_SEGS];  /* [N_i, K * bits / 32] */
    const void *scales[CUDA_QMV_MAX_SEGS]; /* [N_i, K / group] */
    const void *biases[CUDA_QMV_MAX_SEGS];
    float *y[CUDA_QMV_MAX_SEGS];           /* [rows, ldy_i] */
    long ldy[CUDA_QMV_MAX_SEGS];
    int N[CUDA_QMV_MAX_SEGS];
    int n_segs;
    const float *x;                        /* [rows, ldx] */
    long ldx;
    int rows, K, bits, group, sb_dtype;    /* 1 <= rows <= CUDA_QMV_MAX_ROWS (tc: _TC_) */
    void *ws;                              /* cuda_qmv_workspace_bytes(K), 16-byte aligned */
    size_t ws_bytes;
    /* cuda_qmv_i8 only (others refuse it): with glu_out set, x is a GLU's gate and glu_up its
     * up, both [rows, ldx]; the input is act(x) * up (act: 0 silu, 1 gelu tanh, 2 gelu
     * erf), also written to glu_out [rows, ldx], so the GLU needs no launch of its own */
    float *glu_out;
    const float *glu_up;
    int glu_act;
    /* cuda_qmv_i8 only, not with glu_out: with norm_w set, x (written, row stride ldx) is
     * first computed as rms_norm(norm_x += norm_y) * (norm_w + norm_offset) over rows of K
     * (norm_x, norm_y contiguous [rows, K]; norm_y may be NULL: no residual add), as
     * cuda_add_rms_norm_f32 / cuda_rms_norm_f32 would, so the norm needs no launch either */
    float *norm_x;
    const float *norm_y;
    const uint16_t *norm_w; /* bf16 [K] */
    float norm_eps, norm_offset;
    int skip_prep; /* cuda_qmv_i8: no prep launch (MLXCEL_DIAG_SKIP=prep; output wrong) */
    /* cuda_qmv_i8 only. res (one segment, rows 1): res [1, N] += y as y is written, the residual
     * add after o / down. x_inprep (rows 1; no glu_out, no norm_y; x's int8 parts in shared memory
     * <= 48 KiB: K <= 19,584 4-bit, 10,240 8-bit): each CTA rounds x (or computes the norm) itself
     * instead of a prep launch; the workspace is not read. x_ready: the workspace already holds x's
     * int8 form (a glu_next_q launch wrote it): no prep launch. glu_next (x_inprep, two segments of
     * equal N): glu_next [1, N] = act(y0) * y1 (act glu_next_act, as glu_act), with glu_next_q
     * (N % 64 == 0) also written as the int8 x of a qmv with K = N, group 64 and these bits into
     * the workspace (cuda_qmv_i8_workspace_bytes(N)). With 8-bit weights every one-row fused
     * launch (x_inprep, x_ready) takes x as int8 hi + lo parts (~16 bits, not the plain int8
     * rounding); res, glu_next, rope need one of the two. */
    float *res;
    int x_inprep, x_ready;
    float *glu_next;
    int glu_next_act, glu_next_q;
    /* cuda_qmv_i8 only, rows 1, three segments q, k, v of heads of head_dim (% 32 == 0): q and
     * k rotated by RoPE over all head_dim dims in y (rope_cs [1, head_dim]: cos, sin of each
     * pair j < head_dim / 2, as cuda_rope_kv_f32 reads them), k and v also written to the KV
     * pools (bf16 or fp32 [slot][n_kv_heads][head_dim]) at slot rope_rows[0] (< 0: not) */
    const float *rope_cs;
    const int64_t *rope_rows;
    void *k_pool, *v_pool;
    int pool_bf16, head_dim;
    /* every w[i] is in the tiled layout (cuda_q_tile; bf16 scales inside, scales / biases
     * unused): only cuda_qmv_i8 and cuda_qmv_bulk take it */
    int tiled;
} cuda_qmv_args;
size_t cuda_qmv_workspace_bytes(int K);
/* multirow: one of CUDA_QMV_MULTIROW_VALUES (else cudaErrorInvalidValue). */
int cuda_qmv(const cuda_qmv_args *a, int multirow, cudaStream_t st);
int cuda_qmv_default_multirow(int rows, int N, int K, int bits);
/* 1 when multirow is one of CUDA_QMV_MULTIROW_VALUES. */
int cuda_qmv_valid_multirow(int multirow);

/* Tensor-core qmv (qmv_tc.cu): bits 4 and 8, group 32 / 64 / 128, 1 <= rows <=
 * CUDA_QMV_TC_MAX_ROWS, x 16-byte aligned with ldx % 4 == 0; no workspace (ws unused).
 * window: x rows per pass over the weight, 1..CUDA_QMV_TC_MAX_ROWS, 0 = all rows in one pass
 * (the qmv-multirow tunable of cuda_qmv, with larger values allowed). */
#define CUDA_QMV_TC_MAX_ROWS 32
/* 1 when cuda_qmv_tc accepts a (shape, dtype and alignment; not the per-segment pointers). */
int cuda_qmv_tc_supported(const cuda_qmv_args *a);
int cuda_qmv_tc(const cuda_qmv_args *a, int window, cudaStream_t st);
/* Streaming tensor-core qmv (qmv_bulk.cu): bits 4 and 8, group 32 / 64 / 128, bf16 scales,
 * 1 <= rows <= CUDA_QMV_TC_MAX_ROWS, x 16-byte aligned with ldx % 4 == 0 (x is rounded to
 * bf16, the weights dequantized to the bf16 values the CPU reference computes); ws: 16-byte
 * aligned, cuda_qmv_bulk_workspace_bytes(K) (x in bf16, rewritten by every launch). variant:
 * a launch shape, 0 = the default (0 .. cuda_qmv_bulk_variants() - 1). */
size_t cuda_qmv_bulk_workspace_bytes(int K);
int cuda_qmv_bulk_supported(const cuda_qmv_args *a);
int cuda_qmv_bulk(const cuda_qmv_args *a, int variant, cudaStream_t st);
int cuda_qmv_bulk_variants(void);
/* Tensor-core qmv (qmv_mma.cu): 4-bit, group 64 / 128, bf16 or f16 scales, 1 <= rows <=
 * CUDA_QMV_MAX_ROWS, x 16-byte aligned with ldx % 4 == 0 (x split into bf16 hi + lo, fp32
 * scale / bias math per group); ws: 16-byte aligned, cuda_qmv_mma_workspace_bytes(K),
 * rewritten by every launch. */
size_t cuda_qmv_mma_workspace_bytes(int K);
int cuda_qmv_mma_supported(const cuda_qmv_args *a);
int cuda_qmv_mma(const cuda_qmv_args *a, cudaStream_t st);
/* Int8 tensor-core qmv (qmv_i8.cu): the contract of cuda_qmv_mma, bits 4 and 8 (8-bit codes
 * feed the u8 MMA as they are), but x is quantized to int8
 * per group (scale absmax / 127), as llama.cpp's q8_1 activations: results differ from the
 * fp32-x kernels by that rounding. ws: cuda_qmv_i8_workspace_bytes(K), rewritten by every
 * launch. */
size_t cuda_qmv_i8_workspace_bytes(int K);
int cuda_qmv_i8_supported(const cuda_qmv_args *a);
int cuda_qmv_i8(const cuda_qmv_args *a, cudaStream_t st);
/* One MLX weight [N, K] (bits 4 / 8, group 64 / 128, 16-bit scales) repacked into the tiled
 * layout (qtile.cuh: each qmv_i8 warp's load batch one contiguous block, scales and biases
 * inside) that cuda_qmv_i8, cuda_qmv_bulk, cuda_qmm, cuda_qdequant_bf16 and cuda_qembed read
 * with `tiled` set; cuda_q_tiled_bytes (0: not supported) is its size; out and w 16-byte
 * aligned. */
size_t cuda_q_tiled_bytes(int N, int K, int bits, int group);
int cuda_q_tile(void *out, const uint32_t *w, const void *scales, const void *biases, int N, int K,
                int bits, int group, cudaStream_t st);
/* cuda_qmv_mma's K split: warps on the same rows split K until the grid holds warps_per_sm
 * warps per SM (default 16), keeping >= min_batches load batches per warp (default 2); 0
 * restores a default. For the op bench. */
void cuda_qmv_mma_set_split(int warps_per_sm, int min_batches);

typedef struct cuda_qmm_args {
    const uint32_t *w;                     /* [N, K * bits / 32] */
    const void *scales, *biases;           /* [N, K / group] */
    const float *x;                        /* [rows, ldx] */
    long ldx;
    float *y;                              /* [rows, ldy] */
    long ldy;
    int rows, N, K, bits, group, sb_dtype;
    int tiled;                             /* w in the tiled layout (scales / biases unused) */
    void *lt;                              /* cublasLtHandle_t */
    void *lt_ws;                           /* cuBLASLt workspace */
    size_t lt_ws_bytes;
    void *scratch;                         /* cuda_qmm_scratch_bytes(rows, N, K, tile_m) */
    size_t scratch_bytes;
} cuda_qmm_args;
size_t cuda_qmm_scratch_bytes(int rows, int N, int K, int tile_m);
/* tile_m: one of CUDA_QMM_TILE_VALUES (else cudaErrorInvalidValue). A cuBLASLt failure
 * returns cudaErrorNotSupported. */
int cuda_qmm(const cuda_qmm_args *a, int tile_m, cudaStream_t st);
int cuda_qmm_default_tile_m(int rows, int N, int K, int bits);
int cuda_qmm_valid_tile_m(int tile_m);
/* Frees the plans cached by cuda_qmm (before destroying the cuBLASLt handle). */
void cuda_qmm_release(void);

/* out[rows, ldo] bf16 = dequantized rows [n0, n0 + n) (the CPU reference's values, rounded
 * from the scales dtype to bf16). */
int cuda_qdequant_bf16(uint16_t *out, long ldo, const uint32_t *w, const void *scales,
                       const void *biases, int sb_dtype, int tiled, int n0, int n, int K,
                       int bits, int group, cudaStream_t st);
/* Quantized embedding gather: out[i, :] = dequantized row ids[i] (CPU reference values) *
 * scale; with round_scale the scale and product are rounded to the scales dtype. ids on the
 * device, clamped to [0, V). */
int cuda_qembed(float *out, const uint32_t *w, const void *scales, const void *biases,
                int sb_dtype, int tiled, const int32_t *ids, int n, int V, int H, int bits,
                int group, float scale, int round_scale, cudaStream_t st);

/* ==== Quantized / mixed MoE experts, per (row, expert) pair (moe_q.cu) ====
 * A projection is dense (bits 0: w[e] bf16 [out, in]) or quantized (w, scales, biases [e]);
 * the pointer arrays live on the device. */
typedef struct cuda_moe_proj {
    const void *const *w;
    const void *const *scales;
    const void *const *biases;
    int bits, group, sb_dtype;
} cuda_moe_proj;
/* h[p, i] = act(s gate_e(x[p / k]))_i * (s up_e(x[p / k]))_i, e = sel[p], s = xscale[p]
 * (NULL: 1; llama4's routing scales the expert's input). */
int cuda_moe_gate_up_q(float *h, const float *x, long x_stride, const int32_t *sel, int n_pairs,
                       int k, cuda_moe_proj gate, cuda_moe_proj up, int I, int H, int act,
                       const float *xscale, cudaStream_t st);
/* y[p, j] = down_e(h[p])_j */
int cuda_moe_down_q(float *y, const float *h, const int32_t *sel, int n_pairs,
                    cuda_moe_proj down, int H, int I, cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
