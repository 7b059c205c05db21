/* Launchers of the CUDA engine backend's kernels besides the decode set of cuda_ops.h:
 * elementwise ops over fp32 activations, the tiled attention over any row set, and MoE
 * routing / per-pair expert GEMVs. Plain C over raw device pointers and a stream; every
 * launcher returns 0 or a cudaError_t value and never synchronises.
 *
 * Activations are fp32 and contiguous in their last dimension (row stride given where rows
 * may be views). Weights are bf16 (the backend converts other float dtypes at upload). */
#ifndef MLXCEL_BACKEND_CUDA_ELEM_H
#define MLXCEL_BACKEND_CUDA_ELEM_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ==== Elementwise (ops_elem.cu) ==== */
/* out[i, :] = table[ids[i], :] * scale; round: scale and product rounded to bf16. */
int cuda_embed(float *out, const uint16_t *table, const int32_t *ids, int n, int H, int V,
               float scale, int round, cudaStream_t st);
/* out[r, :] = x[r, :] / rms(x[r, :]) * (w + offset) for rows r < rows of D elements; row r
 * of x starts at x + r * x_stride (out: out_stride). In place allowed. */
int cuda_rms_norm_f32(float *out, long out_stride, const float *x, long x_stride,
                      const uint16_t *w, float eps, float offset, int rows, int D,
                      cudaStream_t st);
/* x[i, h, :rot] rotated (rotate-half pairing) by cos_sin[i, rot / 2, 2]; x rows of heads * D
 * floats at stride x_stride. */
int cuda_rope_f32(float *x, long x_stride, const float *cos_sin, int n, int heads, int D, int rot,
                  cudaStream_t st);
/* A launch that does nothing but take part in the PDL chain (wait, trigger): ctas CTAs of 128
 * threads. MLXCEL_DIAG_EMPTY's probe of what one more kernel boundary costs a step. */
int cuda_empty_launch(int ctas, cudaStream_t st);
/* x[r, :cols] += y[r, :cols] */
int cuda_add_f32(float *x, long x_stride, const float *y, long y_stride, int rows, int cols,
                 cudaStream_t st);
/* out[r, :] = act(gate[r, :]) * up[r, :]; act: 0 silu, 1 gelu (tanh), 2 gelu (erf). */
int cuda_glu_f32(float *out, long out_stride, const float *gate, long g_stride, const float *up,
                 long u_stride, int rows, int cols, int act, cudaStream_t st);
/* x = cap * tanh(x / cap), n elements */
int cuda_softcap_f32(float *x, size_t n, float cap, cudaStream_t st);
/* out[i, :] = x[idx[i], :] (idx on the device) */
int cuda_gather_rows_f32(float *out, long out_stride, const float *x, long x_stride,
                         const int32_t *idx, int n, int cols, cudaStream_t st);
/* The columns of src [rows, N_0 + .. + N_{n-1}] (fp32, contiguous) into y_i [rows, N_i]
 * (contiguous), plus bias_i (bf16 [N_i]) where not NULL; n <= 3: one GEMM over weights stored
 * back to back, split into its segments' outputs. */
typedef struct cuda_split_segs {
    float *y[3];
    const uint16_t *bias[3];
    int N[3];
    int n;
} cuda_split_segs;
int cuda_split_cols_f32(const cuda_split_segs *s, const float *src, int rows, cudaStream_t st);
/* out[r, :] += bias (bf16) */
int cuda_bias_add_f32(float *out, long out_stride, const uint16_t *bias, int rows, int cols,
                      cudaStream_t st);
/* Elementwise dtype conversion between fp32 (0), bf16 (1), fp16 (2). */
enum { CUDA_EL_F32 = 0, CUDA_EL_BF16 = 1, CUDA_EL_F16 = 2 };
int cuda_convert(void *dst, int dst_dtype, const void *src, int src_dtype, size_t n,
                 cudaStream_t st);
/* Row-strided fp32 -> bf16 [rows, cols] (dense output), for cuBLASLt inputs. */
int cuda_f32_to_bf16_rows(uint16_t *dst, const float *src, long src_stride, int rows, int cols,
                          cudaStream_t st);
/* dst[r, :] = bf16(act(gate[r, :]) * up[r, :]) (contiguous rows of cols): a GLU feeding a
 * cuBLASLt matmul, computed by the input conversion itself. */
int cuda_glu_to_bf16_rows(uint16_t *dst, const float *gate, const float *up, int rows, int cols,
                          int act, cudaStream_t st);
/* ==== KV pool formats (kv_quant.cu, kv_codec.cuh) ====
 * The cache types of backend/kvfmt/kv_quant.h (f32, bf16, f16, q8_0, q4_0) and backend/kvfmt/kv_turbo.h
 * (TurboQuant 2 / 3 / 4 bits, rows in the rotated space), stored as the CPU stores them. */
enum { CUDA_KV_BF16 = 0 /* a zeroed cuda_kv_fmt */, CUDA_KV_F32, CUDA_KV_F16, CUDA_KV_Q8_0,
       CUDA_KV_Q4_0, CUDA_KV_TQ2, CUDA_KV_TQ3, CUDA_KV_TQ4 };
typedef struct cuda_kv_fmt {
    int type;         /* CUDA_KV_* */
    float code[16];   /* TurboQuant: the Lloyd-Max centroids (kv_turbo_codebook) */
    float bound[15];  /* TurboQuant: their cell bounds (kv_turbo_bounds), for writes */
} cuda_kv_fmt;
/* pool[rows[i]] (heads of D values, [*, Hkv] heads a row) = the K / V rows k[i], v[i] (fp32,
 * Hkv * D values at row stride k_stride / v_stride) in the pools' formats, bit for bit the
 * CPU's kv_write (kvq_from_f32_heads); rows[i] < 0 writes nothing. D % 32 == 0 and D <= 1024
 * for the blocked types (TurboQuant: a power of two). */
int cuda_kv_write_fmt(void *k_pool, const cuda_kv_fmt *kf, void *v_pool, const cuda_kv_fmt *vf,
                      const float *k, long k_stride, const float *v, long v_stride,
                      const int64_t *rows, int n, int Hkv, int D, cudaStream_t st);
/* TurboQuant's rotation R = H D / sqrt(D) of every head (D a power of two <= 1024): dst[r, h]
 * = R src[r, h] (inverse: R^T), rows of heads * D floats at strides dst_stride / src_stride;
 * dst == src allowed. */
int cuda_kv_rotate(float *dst, long dst_stride, const float *src, long src_stride, int n,
                   int heads, int D, int inverse, cudaStream_t st);

/* pools [*, width] (bf16 or fp32, pool_bf16): pool[rows[i], :] = k[i, :] for rows[i] >= 0. */
int cuda_kv_write(void *k_pool, void *v_pool, int pool_bf16, const float *k, long k_stride,
                  const float *v, long v_stride, const int64_t *rows, int n, int width,
                  cudaStream_t st);

/* ---- fused pairs the backend forms from consecutive ops (same arithmetic as the two) ---- */
/* x += y; out = rms_norm(x) * (w + offset); rows of D contiguous floats; out != x. */
int cuda_add_rms_norm_f32(float *x, const float *y, float *out, const uint16_t *w, float eps,
                          float offset, int rows, int D, cudaStream_t st);
/* (y != NULL: x += y;) out = rms_norm(x) * (w + offset), and out again as bf16 rows in ob
 * [rows, D]; contiguous rows, out != x. cudaErrorInvalidValue when the vector kernel does not
 * apply (D % 4, D > 4096, alignment): the caller runs the plain ops instead. */
int cuda_rms_norm_bf16copy(float *x, const float *y, float *out, uint16_t *ob, const uint16_t *w,
                           float eps, float offset, int rows, int D, cudaStream_t st);
/* rope(q) (q may be NULL), rope(k) in place, then the KV write of k and v at rows[i] (both
 * pools NULL: the rotations only). */
int cuda_rope_kv_f32(float *q, long q_stride, float *k, long k_stride, const float *v,
                     long v_stride, const float *cos_sin, int n, int Hq, int Hkv, int D, int rot,
                     const int64_t *rows, void *k_pool, void *v_pool, int pool_bf16,
                     cudaStream_t st);

/* ==== Tiled attention over any rows (attn_rows.cu) ====
 * Rows come in tiles: tile t covers rows [tile_row0[t], tile_row0[t] + tile_n[t]) of one
 * sequence (consecutive positions are not required). Row r: query q[r, Hq, D] at position
 * pos[r] of the sequence whose page-table row is seq[r]; keys [max(0, pos - window + 1), pos]
 * (chunk > 0: not before pos - pos % chunk)
 * at physical row table[seq * table_stride + p / block] * block + p % block of the pools
 * [*, Hkv] heads (any cuda_kv_fmt; TurboQuant rows are read as stored, in the rotated space:
 * the caller rotates q and the output). Output o[r, Hq, D] fp32. Scores soft-capped when
 * softcap > 0. Needs head_dim <= 256 and tile_n * (Hq / Hkv) <= CUDA_ATTN_ROWS_QV.
 * splits > 1 (cuda_attn_rows only): each (tile, kv head) walks its keys in `splits` parts,
 * whose partials go to ws (cuda_attn_rows_ws_bytes) and are merged in split order by a
 * second launch; the result depends on splits, never on other tiles. */
#define CUDA_ATTN_ROWS_QV 32
typedef struct cuda_attn_rows_args {
    const float *q;              /* [n_rows, Hq, D] */
    float *o;                    /* [n_rows, Hq, D] */
    const void *k_pool, *v_pool; /* [*, Hkv] heads */
    cuda_kv_fmt kf, vf;          /* the pools' formats */
    const int32_t *pos, *seq;    /* [n_rows] */
    const int32_t *table;        /* [n_seqs, table_stride] */
    int table_stride, block;
    const int32_t *tile_row0, *tile_n; /* [n_tiles] */
    int n_tiles;
    int n_heads, n_kv_heads, head_dim, window;
    int chunk;                   /* 0 = none: else keys of the query's chunk only */
    float scale, softcap;
    int splits, ws_qv;           /* split count (0, 1: none); query vectors a tile at most */
    float *ws;                   /* splits > 1: cuda_attn_rows_ws_bytes of scratch */
} cuda_attn_rows_args;
int cuda_attn_rows(const cuda_attn_rows_args *a, cudaStream_t st);
size_t cuda_attn_rows_ws_bytes(int n_tiles, int n_kv_heads, int head_dim, int splits, int ws_qv);
/* Same contract on tensor cores (attn_flash.cu): head_dim 64 or 128, up to CUDA_ATTN_FLASH_QV
 * query vectors per tile (tile_n * G), 16-byte aligned pools, no splits. f16 pools (K and V)
 * run on f16 MMAs with their values exact; other pools are dequantized into the bf16 tiles
 * the MMAs read (values rounded to bf16). */
#define CUDA_ATTN_FLASH_QV 64
int cuda_attn_flash(const cuda_attn_rows_args *a, cudaStream_t st);

/* ==== MoE (moe.cu) ==== */
/* Routing per row: mode 0: softmax(logits[r, :E]), top-k (ties: lower index), optional
 * renormalisation; mode 1 (llama4): top-k of the logits, weights sigmoid(logit) (norm_topk
 * ignored). sel[r, k] sorted by ascending expert id (the CPU's accumulation order), wsel[r, k]
 * their weights. k <= 32, E <= 1024. */
int cuda_moe_route(const float *logits, long l_stride, int rows, int E, int k, int norm_topk,
                   int mode, int32_t *sel, float *wsel, cudaStream_t st);
/* Pair p = (row p / k, expert sel[p]): h[p, :I] = act(s Wg[e] x[row]) * (s Wu[e] x[row]) with
 * s = xscale[p] (NULL: 1). gate / up: device arrays [E] of bf16 [I, H] weight pointers. */
int cuda_moe_gate_up(float *h, const float *x, long x_stride, const int32_t *sel, int n_pairs,
                     int k, const uint16_t *const *gate, const uint16_t *const *up, int I,
                     int H, int act, const float *xscale, cudaStream_t st);
/* y[p, :H] = Wd[sel[p]] h[p, :I]; down: [E] bf16 [H, I] pointers. */
int cuda_moe_down(float *y, const float *h, const int32_t *sel, int n_pairs,
                  const uint16_t *const *down, int H, int I, cudaStream_t st);
/* out[r, :] = sum_j wsel[r, j] * y[r * k + j, :] in j order (wsel NULL: weights 1). */
int cuda_moe_combine(float *out, long out_stride, const float *y, const float *wsel, int rows,
                     int k, int H, cudaStream_t st);
/* out[rows[i], :] += w[i] * y[i, :] for i < n (rows distinct within one call; w NULL: 1). */
int cuda_scatter_add_rows(float *out, long out_stride, const float *y, const int32_t *rows,
                          const float *w, int n, int H, cudaStream_t st);
/* x[i, :H] *= w[i] for i < n (row stride ld). */
int cuda_scale_rows_f32(float *x, long ld, const float *w, int n, int H, cudaStream_t st);

/* Small-row generic GEMV for shapes the fast kernel does not take (K % 8 != 0, strided x):
 * y[r, n] = sum_k x[r, k] * W[n, k] (+ bias), W bf16 [N, K] with row stride w_stride. */
int cuda_gemv_generic(float *y, long y_stride, const float *x, long x_stride, const uint16_t *W,
                      long w_stride, const uint16_t *bias, int rows, int N, int K,
                      cudaStream_t st);

#ifdef __cplusplus
}
#endif

#endif
