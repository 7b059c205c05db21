/* Shared helpers of the CPU backend (reference implementation: fp32 accumulation). */
#ifndef MLXCEL_BACKEND_CPU_INTERNAL_H
#define MLXCEL_BACKEND_CPU_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"

/* dst[0..n) = src row in fp32. */
static inline void cpu_row_to_f32(float *dst, const void *src, mx_dtype t, int64_t n) {
    if (t == MX_F32) {
        const float *s = (const float *)src;
        for (int64_t i = 0; i < n; i++) dst[i] = s[i];
    } else if (t == MX_BF16) {
        const uint16_t *s = (const uint16_t *)src;
        for (int64_t i = 0; i < n; i++) dst[i] = mx_bf16_to_f32(s[i]);
    } else {
        const uint16_t *s = (const uint16_t *)src;
        for (int64_t i = 0; i < n; i++) dst[i] = mx_f16_to_f32(s[i]);
    }
}

/* Pointer to element 0 of row r of a 2-D (or flattened leading-dim) tensor. */
static inline void *cpu_row_ptr(const mx_tensor *t, int64_t r) {
    return (char *)t->data + (size_t)(r * t->stride[0]) * mx_dtype_size(t->dtype);
}

/* Fixed-order fp32 dot product: 16 partial sums combined in a fixed tree, so the result does
 * not depend on how many rows share a call (batch composition never changes a row's value). */
static inline float cpu_dot_f32(const float *a, const float *b, int64_t n) {
    float acc[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) acc[j] += a[i + j] * b[i + j];
    for (int j = 0; i < n; i++, j++) acc[j] += a[i] * b[i];
    for (int w = 8; w >= 1; w >>= 1)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0];
}

void cpu_matmul(mx_tensor *out, const mx_tensor *x, const mx_tensor *w, const mx_tensor *bias);
int cpu_moe(mx_tensor *out, const mx_tensor *x, const mx_tensor *router_logits,
            const mx_moe_experts *ex, const mx_moe_params *p, mx_error *err);
void cpu_glu(mx_tensor *out, const mx_tensor *gate, const mx_tensor *up, int activation);
void cpu_kv_write(mx_tensor *k_pool, mx_tensor *v_pool, const mx_tensor *k, const mx_tensor *v,
                  const mx_attn_batch *b);
void cpu_attention(mx_tensor *out, const mx_tensor *q, const mx_tensor *k_pool,
                   const mx_tensor *v_pool, const mx_attn_batch *b, const mx_attn_params *p);
/* Keys per attention piece (cpu_attention.c): a row's keys are cut at multiples of it, each
 * piece's softmax partial is merged in order. A constant, not the block size: dense and paged
 * storage must cut the same keys. */
#define CPU_ATTN_PIECE 256
/* Tests only: cut pieces of `keys` keys (short test sequences get several pieces); 0 restores
 * CPU_ATTN_PIECE. */
void cpu_attention_force_piece(int keys);
/* The split count cpu_attention last resolved (mx_attn_batch.kv_splits, or the tune policy's
 * value for the step), before capping at a row's pieces; 0 before the first call. */
int cpu_attention_last_splits(void);
/* What the cascade policy decided in the last cpu_attention call on this thread
 * (cpu_cascade.h): groups kept and declined, rows on the cascade path, shared pieces kept,
 * rounds and row chunks, key reads per kv head saved; all 0 when nothing was shared (or
 * cascade is off). */
typedef struct cpu_cascade_info {
    int groups, declined, rows, shared_pieces, rounds, chunks;
    int64_t saved_keys;
} cpu_cascade_info;
void cpu_attention_last_cascade(cpu_cascade_info *out);
void cpu_kv_copy_rows(mx_tensor *pool, int64_t dst_row, int64_t src_row, int64_t n_rows);

/* ==== Matmul kernels ====
 * Every family computes each output as the canonical dot product of cpu_matmul.c (16 lanes,
 * FMA, fixed fold tree): bit-identical results across families and across row counts. */
typedef enum {
    CPU_ISA_AUTO = -1, /* the best family this CPU supports */
    CPU_ISA_SCALAR = 0,
    CPU_ISA_AVX2,      /* AVX2 + FMA + F16C */
    CPU_ISA_AVX512,    /* AVX-512F */
} cpu_isa;

bool cpu_isa_supported(cpu_isa isa);
const char *cpu_isa_name(cpu_isa isa);
/* The family cpu_matmul uses now. */
cpu_isa cpu_matmul_isa(void);
/* Forces a family (tests compare them); CPU_ISA_AUTO restores the default. -1 when the CPU
 * lacks it. */
int cpu_matmul_force_isa(cpu_isa isa);
/* The canonical dot product of x[K] (fp32) and one weight row w[K] of dtype wdtype: the value
 * cpu_matmul produces for that (row, column) pair before the bias, whatever the batch. */
float cpu_dot_ref(const float *x, const void *w, mx_dtype wdtype, int64_t K);

/* Weight rows produced on demand (quantized weights): writes rows [j0, j0 + nr) of the
 * logical [N, K] weight as fp32 into dst [nr, K]. Called concurrently from several threads
 * (different rows, different dst). */
typedef void (*cpu_wfill_fn)(float *dst, int64_t j0, int64_t nr, const void *ctx);
/* out[n, N] = x[n, K] @ W^T (+ bias[N]) with W's rows from `fill`: the same driver, panels and
 * canonical dot as cpu_matmul on the fp32 rows, so a weight that fill produces as the widened
 * values of a dense bf16/f16/f32 weight gives bit-identical outputs to cpu_matmul on that
 * weight, for every row count. Each panel of weight rows is produced once per call and swept
 * by all rows (decode reads a packed weight once per step). */
void cpu_matmul_fill(mx_tensor *out, const mx_tensor *x, int64_t N, cpu_wfill_fn fill,
                     const void *ctx, const mx_tensor *bias);
/* A tile straight from the stored weight (quantized: dequantized in registers): out[r * ldo
 * + c] = the canonical dot of x row r (x + r * ldx) and weight row j0 + c (+ bias[c] when
 * bias), r < nr <= 4, c < nc <= the family's tile width for nr rows (cpu_matmul.c's
 * nc_one_row for one row, nc for more: at most 6). Bit-identical to `fill` then the fp32 tile. */
typedef void (*cpu_wtile_fn)(int nr, int nc, const float *x, int64_t ldx, int64_t j0, float *out,
                             int64_t ldo, const float *bias, const void *ctx);
#define CPU_WTILE_MAX_ROWS 4
#define CPU_WTILE_MAX_NC 6
/* cpu_matmul_fill, with wtile (may be NULL) taking the calls of at most CPU_WTILE_MAX_ROWS
 * rows (decode of a few sequences): no fp32 rows made; more rows amortise the scratch. */
void cpu_matmul_fill_tile(mx_tensor *out, const mx_tensor *x, int64_t N, cpu_wfill_fn fill,
                          cpu_wtile_fn wtile, const void *ctx, const mx_tensor *bias);
/* One product of cpu_matmul_group: a dense weight w, or (w NULL) N rows from fill / wtile / ctx
 * as cpu_matmul_fill_tile takes them. */
typedef struct cpu_mm {
    mx_tensor *out;
    const mx_tensor *w;
    int64_t N;
    cpu_wfill_fn fill;
    cpu_wtile_fn wtile;
    const void *ctx;
    const mx_tensor *bias;
} cpu_mm;
#define CPU_MM_GROUP_MAX 4
/* Products of the same x, each exactly as cpu_matmul / cpu_matmul_fill_tile computes it, in one
 * OpenMP parallel region (per CPU_MM_GROUP_MAX of them): q/k/v or gate/up wake the thread team
 * once instead of once each. */
void cpu_matmul_group(const mx_tensor *x, const cpu_mm *mms, int n);

/* ==== Quantized weights (cpu_qdequant.c, cpu_qmatmul.c; the format: backend/qfmt/qfmt.h) ==== */
struct mlxq_matrix;
/* cpu_wfill_fn over an mlxq_matrix (ctx): rows [j0, j0 + nr) dequantized into dst [nr, k]. */
void mlxq_fill_rows(float *dst, int64_t j0, int64_t nr, const void *ctx);
/* The fused product of a few rows over an mlxq_matrix (ctx) for this CPU's kernel family, or
 * NULL (then the rows go through mlxq_fill_rows): cpu_qdequant.c. */
cpu_wtile_fn mlxq_wtile_for(const struct mlxq_matrix *m);

#endif
