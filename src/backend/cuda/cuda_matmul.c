/* Matmul and MoE dispatch of the CUDA backend.
 *
 * out[n, N] = x[n, K] @ W[N, K]^T: n <= MLXCEL_DENSE_GEMV_ROWS (default 2, <= 8) runs the
 * bf16 GEMV kernels on fp32 x (each weight byte read once per step for all rows, 16-byte
 * streaming loads); larger n converts x to bf16 once (or has the norm / GLU before it write
 * bf16) and runs the streaming tensor-core GEMV up to MLXCEL_GEMV_TC_ROWS (default 8), else
 * cuBLASLt (bf16 in, fp32 accumulate and output, plans cached per shape).
 * MLXCEL_DENSE_GEMV_ROWS=0 sends every row count to cuBLASLt. Shapes the
 * fast kernels cannot take (K % 8, strided views) use a simple generic GEMV.
 *
 * MoE: routing on the device; up to CU_MOE_PAIR_MAX_ROWS rows run per (row, expert) pair
 * GEMVs without leaving the device (graph-capturable decode); more rows (prefill) bring the
 * routing to the host once and run each used expert as one matmul over its gathered rows,
 * accumulated in ascending expert order (the CPU reference's order). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_be.h"
#include "backend/cuda/cuda_elem.h"
#include "backend/cuda/cuda_ops.h"
#include "base/env.h"
#include "base/log.h"

/* ==== cuBLASLt plans ==== */
static void plan_destroy(cu_lt_plan *p) {
    cu_lt_desc_destroy(&p->d);
    memset(p, 0, sizeof *p);
}

void cu_lt_destroy(void) {
    for (int i = 0; i < CU_LT_PLANS; i++) plan_destroy(&g_cu.plans[i]);
    cuda_qmm_release();
}

static cu_lt_plan *lt_plan(int N, int K, int rows, long ldw, long ldo) {
    cu_lt_plan *lru = &g_cu.plans[0];
    for (int i = 0; i < CU_LT_PLANS; i++) {
        cu_lt_plan *p = &g_cu.plans[i];
        if (p->d.op && p->N == N && p->K == K && p->rows == rows && p->ldw == ldw &&
            p->ldo == ldo) {
            p->last_use = ++g_cu.use_clock;
            return p;
        }
        if (!p->d.op || p->last_use < lru->last_use) lru = p;
    }
    plan_destroy(lru);
    cu_lt_plan *p = lru;
    p->N = N, p->K = K, p->rows = rows, p->ldw = ldw, p->ldo = ldo;
    p->last_use = ++g_cu.use_clock;
    /* A = W (ld ldw); the output's alignment left to cuBLASLt's assumption */
    cu_lt_desc_make(&p->d, g_cu.lt, N, K, rows, ldw, ldo, g_cu.lt_ws_size, 0);
    return p;
}

/* ==== Matmul ==== */
/* Rows whose tensor-core GEMV takes x as bf16 hi + lo (cuda_bf16_split_rows into xbf): fp32-x
 * precision at the bf16 kernel's weight stream. With bf16 x the 3..8-row decode was 50% faster
 * than the register-fed fp32-x kernel but moved an MoE e2e token (a router near-tie). */
static bool split_rows(int rows) {
    return rows <= g_cu.gemv_split_rows && rows <= g_cu.gemv_tc_rows &&
           2 * rows <= CUDA_GEMV_TC_MAX_ROWS;
}

/* Up to CUDA_GEMV_MAX_SEGS weights on the converted input g_cu.xbf (bf16, or its hi + lo
 * parts when split_rows), one launch of the tensor-core GEMV (rows <= g_cu.gemv_tc_rows);
 * y[i] rows of stride N[i], biases after. */
static void tc_run(int n, const uint16_t *const *W, float *const *y, const int *N,
                   const uint16_t *const *B, int rows, int K) {
    cuda_gemv_segs segs;
    memset(&segs, 0, sizeof segs);
    segs.n = n;
    for (int i = 0; i < n; i++) segs.W[i] = W[i], segs.y[i] = y[i], segs.N[i] = N[i];
    const uint16_t *xb = (const uint16_t *)g_cu.xbf;
    if (cu_ck(split_rows(rows) ? cuda_gemv_tc_split(&segs, xb, rows, K, 0, g_cu.st)
                               : cuda_gemv_tc(&segs, xb, rows, K, 0, g_cu.st),
              "tensor-core gemv"))
        return;
    for (int i = 0; i < n; i++)
        if (B[i]) cu_ck(cuda_bias_add_f32(y[i], N[i], B[i], rows, N[i], g_cu.st), "bias");
}

/* y = xbf @ W^T (+ bias) with the plan p; xbf = g_cu.xbf, already converted (as tc_run
 * reads it when tc, else plain bf16). */
static void lt_run(cu_lt_plan *p, float *y, long ldy, int rows, const uint16_t *W, int N, int K,
                   const uint16_t *B, bool tc) {
    if (tc && rows <= g_cu.gemv_tc_rows && ldy == N) {
        tc_run(1, &W, &y, &N, &B, rows, K);
        return;
    }
    const float alpha = 1.0f, beta = 0.0f;
    const cu_lt_desc *d = &p->d;
    if (cublasLtMatmul(g_cu.lt, d->op, &alpha, W, d->a, g_cu.xbf, d->b, &beta, y, d->c, y, d->c,
                       &d->algo, g_cu.lt_ws, g_cu.lt_ws_size, g_cu.st)) {
        cu_fail("cuBLASLt matmul [%d x %d] x [%d x %d]^T failed", rows, K, N, K);
        return;
    }
    if (B) cu_ck(cuda_bias_add_f32(y, ldy, B, rows, N, g_cu.st), "bias");
}

void cu_matmul_raw(float *y, long ldy, const float *x, long ldx, int rows, const mx_tensor *w,
                   const mx_tensor *bias) {
    if (rows <= 0) return;
    cu_flush();
    cu_resident(w->data);
    const bool has_bias = mx_tensor_present(bias);
    if (has_bias) cu_resident(bias->data);
    const int N = (int)w->shape[0], K = (int)w->shape[1];
    const long ldw = (long)w->stride[0];
    const uint16_t *W = w->data, *B = has_bias ? bias->data : NULL;
    const bool aligned = ((uintptr_t)W & 15) == 0 && ((uintptr_t)x & 15) == 0 && ldw % 8 == 0;
    bool generic = false;
    if (rows <= g_cu.gemv_rows) {
        if (K % 8 == 0 && ldw == K && ldx == K && ldy == N && aligned) {
            if (!cu_ck(cuda_gemv_bf16(W, x, CUDA_OPS_F32, y, CUDA_OPS_F32, rows, N, K, g_cu.st),
                       "gemv") && B)
                cu_ck(cuda_bias_add_f32(y, ldy, B, rows, N, g_cu.st), "bias");
            return;
        }
        generic = true;
    }
    if (!generic) {
        cu_lt_plan *p = aligned && K % 8 == 0 ? lt_plan(N, K, rows, ldw, ldy) : NULL;
        if (p && p->d.ok) {
            g_cu.xbf_of = NULL;
            /* hi + lo needs contiguous x; lt_run's tensor-core path needs ldy == N */
            const bool split = split_rows(rows) && ldx == K && ldy == N;
            if (cu_ensure(&g_cu.xbf, &g_cu.xbf_cap, (size_t)rows * K * (split ? 4 : 2)) ||
                cu_ck(split ? cuda_bf16_split_rows((uint16_t *)g_cu.xbf, x, NULL, 0, rows, K,
                                                   g_cu.st)
                            : cuda_f32_to_bf16_rows((uint16_t *)g_cu.xbf, x, ldx, rows, K,
                                                    g_cu.st),
                      "bf16 input"))
                return;
            /* strided x at split rows: cuBLASLt (the bf16 GEMV would take xbf as split) */
            lt_run(p, y, ldy, rows, W, N, K, B, split || !split_rows(rows));
            return;
        }
        if (!g_cu.warned_lt) {
            g_cu.warned_lt = true;
            LOG_WARN("cuBLASLt has no algorithm for [%d x %d] x [%d x %d]^T; using the generic "
                     "GEMV (slow)", rows, K, N, K);
        }
    }
    cu_ck(cuda_gemv_generic(y, ldy, x, ldx, W, ldw, B, rows, N, K, g_cu.st), "generic gemv");
}

/* ==== Deferred GEMVs ====
 * The forward issues Q, K, V (and gate, up) as separate matmuls on the same input. A GEMV-sized
 * matmul is held back; the next matmul on the same x joins it; anything else (another op, a
 * matmul reading a held output, a fourth weight) launches the group first as ONE kernel. */
static void flush_lt(void);

static void flush_gemv(void) {
    if (!g_cu.pend_mm.segs.n) return;
    cuda_gemv_segs segs = g_cu.pend_mm.segs;
    const cuda_gemv_fuse f = g_cu.pend_mm.fuse;
    g_cu.pend_mm.segs.n = 0;
    memset(&g_cu.pend_mm.fuse, 0, sizeof g_cu.pend_mm.fuse);
    const int rows = g_cu.pend_mm.rows, K = g_cu.pend_mm.K;
    /* timing diagnostics (outputs wrong): a layer's GEMV left out, told apart by its shape */
    if (mx_env()->diag_skip & cu_skip_kind(segs.n, segs.N[0], K)) return;
    const bool fused = f.norm_w || f.res || f.glu || f.rope_cs;
    int rc = fused ? cuda_gemv_bf16_fused(&segs, &f, g_cu.pend_mm.x, rows, K, g_cu.st)
                   : (int)cudaErrorInvalidValue;
    /* unfused, or a fusion that did not apply after all: the plain ops in the forward's order
     * (norm, GEMV, bias, residual add, GLU, RoPE + KV write) */
    const bool plain = rc == (int)cudaErrorInvalidValue;
    if (plain) {
        if (f.norm_w &&
            cu_ck(cuda_rms_norm_f32(f.xn, K, g_cu.pend_mm.x, K, f.norm_w, f.norm_eps, f.norm_offset,
                                    rows, K, g_cu.st), "rms_norm"))
            return;
        rc = cuda_gemv_bf16_multi(&segs, f.norm_w ? f.xn : g_cu.pend_mm.x, CUDA_OPS_F32,
                                  CUDA_OPS_F32, rows, K, g_cu.st);
    }
    if (cu_ck(rc, fused ? "fused gemv" : "gemv")) return;
    /* biases: the epilogue fusions refuse them, so a fused launch has them only with the norm */
    for (int i = 0; i < segs.n; i++)
        if (g_cu.pend_mm.bias[i])
            cu_ck(cuda_bias_add_f32(segs.y[i], segs.N[i], g_cu.pend_mm.bias[i], rows, segs.N[i],
                                    g_cu.st), "bias");
    if (plain && f.res)
        cu_ck(cuda_add_f32(f.res, segs.N[0], segs.y[0], segs.N[0], rows, segs.N[0], g_cu.st), "add");
    if (plain && f.glu)
        cu_ck(cuda_glu_f32(f.glu, segs.N[0], segs.y[0], segs.N[0], segs.y[1], segs.N[0], rows,
                           segs.N[0], f.act, g_cu.st), "glu");
    if (plain && f.rope_cs) {
        const int D = f.head_dim;
        cu_ck(cuda_rope_kv_f32(segs.y[0], segs.N[0], segs.y[1], segs.N[1], segs.y[2], segs.N[2],
                               f.rope_cs, rows, segs.N[0] / D, segs.N[1] / D, D, D, f.rope_rows,
                               f.k_pool, f.v_pool, f.pool_bf16, g_cu.st),
              "rope + kv_write");
    }
}

/* MLXCEL_DIAG_SKIP's kind of a layer matmul launch (GEMV or qmv) by its shape: three weights
 * q/k/v, two gate/up, one square o, one narrower down; 0 otherwise. */
unsigned cu_skip_kind(int n_segs, int N0, int K) {
    return n_segs == 3 ? MX_SKIP_QKV
           : n_segs == 2 ? MX_SKIP_GU
           : N0 == K     ? MX_SKIP_O
           : N0 < K      ? MX_SKIP_DOWN
                         : 0;
}

/* ==== GEMV fusions (1..2 rows; the kernel side is in gemv.cu) ==== */
static bool mm_fusable(void) {
    return g_cu.pend_mm.segs.n > 0 && g_cu.pend_mm.rows <= g_cu.gemv_fuse &&
           !g_cu.pend_mm.fuse.res && !g_cu.pend_mm.fuse.glu;
}

/* x += y where y is the held GEMV's only output: the GEMV adds it into x as it writes y. */
bool cu_mm_take_add(float *x, const float *y, int rows, int cols) {
    if (!mm_fusable() || g_cu.pend_mm.segs.n != 1 || g_cu.pend_mm.segs.y[0] != y ||
        g_cu.pend_mm.bias[0] || g_cu.pend_mm.rows != rows || g_cu.pend_mm.segs.N[0] != cols ||
        x == g_cu.pend_mm.x || x == g_cu.pend_mm.xin || x == y)
        return false;
    g_cu.pend_mm.fuse.res = x;
    return true;
}

/* out = act(gate) * up where gate, up are the held GEMV's two outputs. out may be gate or up
 * (the forward writes it in place): one lane writes gate, up and then out of each unit. */
bool cu_mm_take_glu(float *out, const float *gate, const float *up, int rows, int cols, int act) {
    if (!mm_fusable() || g_cu.pend_mm.segs.n != 2 || g_cu.pend_mm.segs.y[0] != gate ||
        g_cu.pend_mm.segs.y[1] != up || g_cu.pend_mm.bias[0] || g_cu.pend_mm.bias[1] ||
        g_cu.pend_mm.rows != rows || g_cu.pend_mm.segs.N[0] != cols ||
        g_cu.pend_mm.segs.N[1] != cols || out == g_cu.pend_mm.x || out == g_cu.pend_mm.xin)
        return false;
    g_cu.pend_mm.fuse.glu = out;
    g_cu.pend_mm.fuse.act = act;
    return true;
}

void cu_flush_mm(void) {
    cu_flush_norm();
    cu_flush_qmv();
    flush_lt();
    flush_gemv();
}

/* The pending group's weights back to back in memory (Q, K, V: the loader's upload_group):
 * one GEMM over all of them into the ycat scratch, then one kernel splits the columns into
 * each output (+ bias). One weight stream instead of n, and none of the small GEMMs' split-K
 * reduces (H200, 8B, 32 rows: Q/K/V as one GEMM 18.9 us against ~35 us for the three plus
 * their reduces). false: not back to back, or no plan; the caller runs them apart. */
static bool lt_run_joined(int n, int rows, int K) {
    int Nt = 0;
    for (int i = 0; i < n; i++) {
        if (g_cu.pend_lt.W[i] != g_cu.pend_lt.W[0] + (size_t)Nt * K) return false;
        Nt += g_cu.pend_lt.N[i];
    }
    cu_lt_plan *p = lt_plan(Nt, K, rows, K, Nt);
    if (!p->d.ok || cu_ensure(&g_cu.ycat, &g_cu.ycat_cap, (size_t)rows * Nt * 4)) return false;
    lt_run(p, g_cu.ycat, Nt, rows, g_cu.pend_lt.W[0], Nt, K, NULL, false); /* rows > tc rows */
    cuda_split_segs s;
    memset(&s, 0, sizeof s);
    s.n = n;
    for (int i = 0; i < n; i++)
        s.y[i] = g_cu.pend_lt.y[i], s.N[i] = g_cu.pend_lt.N[i], s.bias[i] = g_cu.pend_lt.bias[i];
    cu_ck(cuda_split_cols_f32(&s, g_cu.ycat, rows, g_cu.st), "split of a joined matmul");
    return true;
}

/* ==== Deferred cuBLASLt matmuls ====
 * Past the GEMV row counts the same grouping saves conversions: Q/K/V (gate/up) share one
 * fp32 -> bf16 conversion of x, and a GLU waiting for the down projection is computed by the
 * conversion itself (act(gate) * up -> bf16), so neither the GLU kernel nor its fp32 output
 * pass exist. */
static void flush_lt(void) {
    if (!g_cu.pend_lt.n) return;
    const int n = g_cu.pend_lt.n, rows = g_cu.pend_lt.rows, K = g_cu.pend_lt.K;
    g_cu.pend_lt.n = 0;
    cu_lt_plan *plans[CUDA_GEMV_MAX_SEGS];
    for (int i = 0; i < n; i++) {
        plans[i] = lt_plan(g_cu.pend_lt.N[i], K, rows, K, g_cu.pend_lt.N[i]);
        if (!plans[i]->d.ok) { /* cannot happen after the join check; stay correct anyway */
            if (g_cu.pend_lt.up && /* the GLU in place first: the generic GEMV reads plain x */
                cu_ck(cuda_glu_f32((float *)g_cu.pend_lt.x, K, g_cu.pend_lt.x, K, g_cu.pend_lt.up, K,
                                   rows, K, g_cu.pend_lt.act, g_cu.st), "glu"))
                return;
            for (int j = 0; j < n; j++)
                cu_ck(cuda_gemv_generic(g_cu.pend_lt.y[j], g_cu.pend_lt.N[j], g_cu.pend_lt.x, K,
                                        g_cu.pend_lt.W[j], K, g_cu.pend_lt.bias[j], rows,
                                        g_cu.pend_lt.N[j], K, g_cu.st),
                      "generic gemv");
            return;
        }
    }
    const bool split = split_rows(rows);
    const bool ready = g_cu.xbf_of == g_cu.pend_lt.x && !g_cu.pend_lt.up && !split;
    g_cu.xbf_of = NULL; /* consumed by this group: x may hold other data after it */
    if (!ready && cu_ensure(&g_cu.xbf, &g_cu.xbf_cap, (size_t)rows * K * (split ? 4 : 2))) return;
    if (ready) {
        /* the norm that produced x wrote it as bf16 too */
    } else if (split) {
        if (cu_ck(cuda_bf16_split_rows((uint16_t *)g_cu.xbf, g_cu.pend_lt.x, g_cu.pend_lt.up,
                                       g_cu.pend_lt.act, rows, K, g_cu.st),
                  "bf16 hi + lo input"))
            return;
    } else if (g_cu.pend_lt.up) {
        if (cu_ck(cuda_glu_to_bf16_rows((uint16_t *)g_cu.xbf, g_cu.pend_lt.x, g_cu.pend_lt.up, rows,
                                        K, g_cu.pend_lt.act, g_cu.st), "glu -> bf16 input"))
            return;
    } else if (cu_ck(cuda_f32_to_bf16_rows((uint16_t *)g_cu.xbf, g_cu.pend_lt.x, K, rows, K, g_cu.st),
                     "bf16 input")) {
        return;
    }
    if (rows <= g_cu.gemv_tc_rows) { /* the group as one launch */
        tc_run(n, g_cu.pend_lt.W, g_cu.pend_lt.y, g_cu.pend_lt.N, g_cu.pend_lt.bias, rows, K);
        return;
    }
    if (n >= 2 && lt_run_joined(n, rows, K)) return;
    for (int i = 0; i < n; i++)
        lt_run(plans[i], g_cu.pend_lt.y[i], g_cu.pend_lt.N[i], rows, g_cu.pend_lt.W[i],
               g_cu.pend_lt.N[i], K, g_cu.pend_lt.bias[i], false); /* rows > gemv_tc_rows */
}

/* Joins (or starts) the pending cuBLASLt group; false when the shape does not qualify. */
static bool defer_lt(mx_tensor *out, const mx_tensor *x, const mx_tensor *w, const mx_tensor *bias,
                     const float *up, int act) {
    const int rows = (int)x->shape[0], N = (int)w->shape[0], K = (int)w->shape[1];
    if (rows <= g_cu.gemv_rows || K % 8 || w->stride[0] != K || x->stride[0] != K ||
        out->stride[0] != N || ((uintptr_t)w->data & 15) || ((uintptr_t)x->data & 15))
        return false;
    if (!lt_plan(N, K, rows, K, N)->d.ok) return false;
    cu_flush_qmv(); /* other kinds first: at most one kind is pending */
    flush_gemv();
    bool join = g_cu.pend_lt.n > 0 && !up && !g_cu.pend_lt.up && g_cu.pend_lt.x == x->data &&
                g_cu.pend_lt.rows == rows && g_cu.pend_lt.K == K && g_cu.pend_lt.n < CUDA_GEMV_MAX_SEGS;
    for (int i = 0; join && i < g_cu.pend_lt.n; i++)
        if (g_cu.pend_lt.y[i] == x->data || g_cu.pend_lt.y[i] == out->data) join = false;
    if (!join) flush_lt();
    cu_resident(w->data);
    if (mx_tensor_present(bias)) cu_resident(bias->data);
    const int i = g_cu.pend_lt.n++;
    g_cu.pend_lt.x = x->data;
    g_cu.pend_lt.up = up;
    g_cu.pend_lt.act = act;
    g_cu.pend_lt.rows = rows;
    g_cu.pend_lt.K = K;
    g_cu.pend_lt.W[i] = w->data;
    g_cu.pend_lt.y[i] = out->data;
    g_cu.pend_lt.N[i] = N;
    g_cu.pend_lt.bias[i] = mx_tensor_present(bias) ? bias->data : NULL;
    return true;
}

/* A held norm whose output this cuBLASLt-sized matmul reads: run it writing xbf too. */
static void norm_into_xbf(const mx_tensor *out, const mx_tensor *x, const mx_tensor *w) {
    const int rows = (int)x->shape[0], N = (int)w->shape[0], K = (int)w->shape[1];
    if (x->data != g_cu.pend_norm.out || rows != g_cu.pend_norm.rows || K != g_cu.pend_norm.D ||
        rows <= g_cu.gemv_rows || split_rows(rows) || w->stride[0] != K || x->stride[0] != K ||
        out->stride[0] != N || ((uintptr_t)w->data & 15) || ((uintptr_t)x->data & 15) ||
        !lt_plan(N, K, rows, K, N)->d.ok)
        return; /* at split rows the plain norm runs: the split conversion reads fp32 x */
    flush_lt(); /* an earlier group still holding xbf goes first (cannot be pending: safety) */
    if (cu_ensure(&g_cu.xbf, &g_cu.xbf_cap, (size_t)rows * K * 2)) return;
    if (cuda_rms_norm_bf16copy(g_cu.pend_norm.x, g_cu.pend_norm.y, g_cu.pend_norm.out,
                               (uint16_t *)g_cu.xbf, g_cu.pend_norm.w, g_cu.pend_norm.eps,
                               g_cu.pend_norm.offset, rows, K, g_cu.st))
        return; /* the kernel does not apply: the plain norm runs at the flush below */
    g_cu.pend_norm.on = false;
    g_cu.xbf_of = x->data;
}

void cu_matmul(mx_tensor *out, const mx_tensor *x, const mx_tensor *w, const mx_tensor *bias) {
    const int rows = (int)x->shape[0], N = (int)w->shape[0], K = (int)w->shape[1];
    const bool fast = rows >= 1 && rows <= g_cu.gemv_rows && K % 8 == 0 && w->stride[0] == K &&
                      x->stride[0] == K && out->stride[0] == N && ((uintptr_t)w->data & 15) == 0 &&
                      ((uintptr_t)x->data & 15) == 0;
    if (g_cu.pend_norm.on && !fast) norm_into_xbf(out, x, w);
    /* a held 1..2-row norm whose output this GEMV reads: the GEMV's prologue computes it */
    bool norm_fused = false;
    const float *kx = x->data;
    cuda_gemv_fuse nf;
    memset(&nf, 0, sizeof nf);
    if (g_cu.pend_norm.on && fast && rows <= g_cu.gemv_fuse && x->data == g_cu.pend_norm.out &&
        !g_cu.pend_norm.y && rows == g_cu.pend_norm.rows && K == g_cu.pend_norm.D &&
        (size_t)rows * ((K + 255) / 256 * 256) * 4 <= 64 * 1024 &&
        ((uintptr_t)g_cu.pend_norm.x & 15) == 0 && out->data != g_cu.pend_norm.x &&
        !(g_cu.pend_mm.segs.n > 0 && g_cu.pend_mm.xin == x->data)) {
        g_cu.pend_norm.on = false;
        norm_fused = true;
        kx = g_cu.pend_norm.x;
        nf.norm_w = g_cu.pend_norm.w;
        nf.norm_eps = g_cu.pend_norm.eps;
        nf.norm_offset = g_cu.pend_norm.offset;
        nf.xn = g_cu.pend_norm.out;
    }
    if (g_cu.pend_glu.on) {
        /* Past the GEMV rows the GLU becomes the cuBLASLt input conversion (computed once).
         * A GEMV does not take it: every CTA would recompute act(gate) * up for all of x
         * (measured on the 8B shape: the B=1 step 18% slower), so the GLU kernel runs. */
        if (!fast && x->data == g_cu.pend_glu.out && g_cu.pend_glu.rows == rows &&
            g_cu.pend_glu.cols == K && g_cu.pend_glu.gs == K && g_cu.pend_glu.us == K &&
            g_cu.pend_glu.gate == x->data) {
            /* in place (out == gate, as the forward does): the group's x is the gate */
            g_cu.pend_glu.on = false;
            if (defer_lt(out, x, w, bias, g_cu.pend_glu.up, g_cu.pend_glu.act)) {
                flush_lt(); /* nothing can join a GLU group */
                return;
            }
            g_cu.pend_glu.on = true;
        }
        cu_flush_glu();
    }
    cu_flush_rope(); /* other kinds first: at most one kind is pending */
    if (g_cu.pend_add.on) cu_flush();
    if (!fast) {
        if (defer_lt(out, x, w, bias, NULL, 0)) return;
        cu_flush();
        cu_matmul_raw(out->data, (long)out->stride[0], x->data, (long)x->stride[0], rows, w, bias);
        return;
    }
    cu_resident(w->data);
    if (mx_tensor_present(bias)) cu_resident(bias->data);
    bool join = !norm_fused && g_cu.pend_mm.segs.n > 0 && g_cu.pend_mm.xin == x->data &&
                g_cu.pend_mm.rows == rows && g_cu.pend_mm.K == K &&
                g_cu.pend_mm.segs.n < CUDA_GEMV_MAX_SEGS && !g_cu.pend_mm.fuse.res &&
                !g_cu.pend_mm.fuse.glu;
    for (int i = 0; join && i < g_cu.pend_mm.segs.n; i++) /* x must not be a held output */
        if (g_cu.pend_mm.segs.y[i] == x->data || g_cu.pend_mm.segs.y[i] == out->data) join = false;
    if (join && g_cu.pend_mm.fuse.norm_w && out->data == g_cu.pend_mm.x) join = false;
    if (!join) {
        cu_flush_mm();
        g_cu.pend_mm.fuse = nf;
    }
    const int i = g_cu.pend_mm.segs.n++;
    if (!join) g_cu.pend_mm.x = kx; /* a joining matmul reads what the group reads */
    g_cu.pend_mm.xin = x->data;
    g_cu.pend_mm.rows = rows;
    g_cu.pend_mm.K = K;
    g_cu.pend_mm.segs.W[i] = w->data;
    g_cu.pend_mm.segs.y[i] = out->data;
    g_cu.pend_mm.segs.N[i] = N;
    g_cu.pend_mm.bias[i] = mx_tensor_present(bias) ? bias->data : NULL;
}

/* ==== MoE ==== */
/* Device arrays of per-expert pointers of one layer: weights (dense bf16 or packed codes)
 * and, for quantized projections, scales and biases. Built once per layer. */
/* Under tensor parallelism the experts of other ranks are absent (NULL data): their entries
 * point at one zeroed bf16 buffer of I * H elements, so the per-pair kernels compute exactly 0
 * for them (act(0) * 0 = 0, then a zero down projection) and their routing weight adds +0.
 * Dense only: TP refuses quantized checkpoints. */
static const void *moe_zero(int I, int H) {
    const size_t need = (size_t)I * (size_t)H * 2;
    if (need > g_cu.moe_zero_cap) {
        void *z = cu_dev_alloc(need);
        if (!z || cu_ck(cudaMemsetAsync(z, 0, need, g_cu.st), "moe zero expert")) {
            cu_dev_free(z);
            return NULL;
        }
        /* the old one stays referenced by tables built before: kept (a few MiB, rare) */
        g_cu.moe_zero = z;
        g_cu.moe_zero_cap = need;
    }
    return g_cu.moe_zero;
}

static const cu_moe_table *moe_table(const mx_moe_experts *ex, int E, int I, int H) {
    const mx_tensor *dv[3] = {ex->gate, ex->up, ex->down};
    const mx_qweight *qv[3] = {ex->qgate, ex->qup, ex->qdown};
    bool quant = false;
    for (int j = 0; j < 3; j++) quant |= !dv[j];
    const size_t n = (size_t)(quant ? 9 : 3) * E;
    const void **h = calloc(n, sizeof *h);
    if (!h) return NULL;
    cu_moe_table m;
    memset(&m, 0, sizeof m);
    for (int j = 0; j < 3; j++)
        for (int e = 0; e < E; e++) {
            if (dv[j]) {
                h[j * E + e] = dv[j][e].data;
                if (!h[j * E + e] && !(h[j * E + e] = moe_zero(I, H))) {
                    free(h);
                    return NULL;
                }
            } else {
                const mx_qweight *q = &qv[j][e];
                h[j * E + e] = q->w.data;
                h[(3 + j) * E + e] = q->scales.data;
                h[(6 + j) * E + e] = q->biases.data;
                m.bits[j] = q->bits;
                m.group[j] = q->group_size;
                m.sbt[j] = cu_q_sb(q->scales.dtype);
            }
        }
    /* The key is the pointer list itself: a layer array of a later model may sit at a freed
     * one's host address, so an address key could hand back another model's experts. */
    for (int i = 0; i < g_cu.n_moe_tab; i++)
        if (g_cu.moe_tab[i].n_ptrs == n && !memcmp(g_cu.moe_tab[i].h_ptrs, h, n * sizeof *h) &&
            !memcmp(g_cu.moe_tab[i].bits, m.bits, sizeof m.bits)) {
            free(h);
            return &g_cu.moe_tab[i];
        }
    cu_moe_table *t = realloc(g_cu.moe_tab, (size_t)(g_cu.n_moe_tab + 1) * sizeof *t);
    const void **d = t ? cu_dev_alloc(n * sizeof *h) : NULL;
    if (t) g_cu.moe_tab = t;
    if (!d) {
        free(h);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        if (h[i]) cu_resident(h[i]);
    if (!cu_upload_small(d, h, n * sizeof *h)) {
        free(h);
        cu_dev_free(d);
        return NULL;
    }
    m.h_ptrs = h;
    m.n_ptrs = n;
    m.d_ptrs = (const uint16_t **)d;
    m.d_sptrs = quant ? d + 3 * E : NULL;
    m.d_bptrs = quant ? d + 6 * E : NULL;
    m.quant = quant;
    m.E = E;
    g_cu.moe_tab[g_cu.n_moe_tab] = m;
    return &g_cu.moe_tab[g_cu.n_moe_tab++];
}

static cuda_moe_proj moe_proj(const cu_moe_table *t, int j) {
    const int E = t->E;
    cuda_moe_proj p = {(const void *const *)(t->d_ptrs + j * E),
                       t->bits[j] ? t->d_sptrs + j * E : NULL,
                       t->bits[j] ? t->d_bptrs + j * E : NULL, t->bits[j], t->group[j], t->sbt[j]};
    return p;
}

/* Per-(row, expert) GEMVs: few rows, no host round trip. */
static int moe_pairs(mx_tensor *out, const mx_tensor *x, const mx_tensor *rl,
                     const cu_moe_table *t, const mx_moe_params *p, int I) {
    const int n = (int)x->shape[0], H = (int)x->shape[1], k = p->top_k, np = n * k;
    const size_t o_w = ((size_t)np * 4 + 255) & ~(size_t)255;
    const size_t o_h = o_w + (((size_t)np * 4 + 255) & ~(size_t)255);
    const size_t o_y = o_h + (((size_t)np * I * 4 + 255) & ~(size_t)255);
    if (cu_ensure(&g_cu.moe_buf, &g_cu.moe_cap, o_y + (size_t)np * H * 4)) return -1;
    char *b = g_cu.moe_buf;
    int32_t *sel = (int32_t *)b;
    float *wsel = (float *)(b + o_w), *hb = (float *)(b + o_h), *yb = (float *)(b + o_y);
    const uint16_t *const *gp = t->d_ptrs, *const *up = t->d_ptrs + t->E, *const *dp = t->d_ptrs + 2 * t->E;
    /* llama4 (sigmoid-in): the routing weight scales the expert's input, outputs summed */
    const bool sig_in = p->routing == MX_MOE_ROUTE_SIGMOID_IN;
    if (cu_ck(cuda_moe_route(rl->data, (long)rl->stride[0], n, p->n_experts, k, p->norm_topk,
                             sig_in, sel, wsel, g_cu.st), "moe route"))
        return -1;
    const float *xscale = sig_in ? wsel : NULL;
    if (t->quant) {
        if (cu_ck(cuda_moe_gate_up_q(hb, x->data, (long)x->stride[0], sel, np, k, moe_proj(t, 0),
                                     moe_proj(t, 1), I, H, p->activation, xscale, g_cu.st),
                  "moe gate/up (q)") ||
            cu_ck(cuda_moe_down_q(yb, hb, sel, np, moe_proj(t, 2), H, I, g_cu.st), "moe down (q)"))
            return -1;
    } else if (cu_ck(cuda_moe_gate_up(hb, x->data, (long)x->stride[0], sel, np, k, gp, up, I, H,
                                      p->activation, xscale, g_cu.st), "moe gate/up") ||
               cu_ck(cuda_moe_down(yb, hb, sel, np, dp, H, I, g_cu.st), "moe down")) {
        return -1;
    }
    if (cu_ck(cuda_moe_combine(out->data, (long)out->stride[0], yb, sig_in ? NULL : wsel, n, k,
                               H, g_cu.st),
              "moe combine"))
        return -1;
    return 0;
}

/* Expert e's projection j (0 gate, 1 up, 2 down) on m gathered rows, dense or quantized. */
static void moe_mm(float *y, long ldy, const float *x, long ldx, int m, const mx_moe_experts *ex,
                   int j, int e) {
    const mx_tensor *d = j == 0 ? ex->gate : j == 1 ? ex->up : ex->down;
    const mx_qweight *q = j == 0 ? ex->qgate : j == 1 ? ex->qup : ex->qdown;
    if (d) cu_matmul_raw(y, ldy, x, ldx, m, &d[e], NULL);
    else cu_matmul_q_raw(y, ldy, x, ldx, m, &q[e], NULL);
}

/* Grouped: routing to the host once, then one matmul per used expert over its rows. */
static int moe_grouped(mx_tensor *out, const mx_tensor *x, const mx_tensor *rl,
                       const mx_moe_experts *ex, const mx_moe_params *p, int I) {
    const int n = (int)x->shape[0], H = (int)x->shape[1], k = p->top_k, E = p->n_experts;
    const size_t al = 256;
#define AL(v) (((size_t)(v) + al - 1) / al * al)
    const size_t o_w = AL((size_t)n * k * 4), o_xe = o_w + AL((size_t)n * k * 4);
    const size_t o_g = o_xe + AL((size_t)n * H * 4), o_u = o_g + AL((size_t)n * I * 4);
    const size_t o_y = o_u + AL((size_t)n * I * 4), o_idx = o_y + AL((size_t)n * H * 4);
    const size_t o_rw = o_idx + AL((size_t)n * 4), total = o_rw + AL((size_t)n * 4);
#undef AL
    if (cu_ensure(&g_cu.moe_buf, &g_cu.moe_cap, total)) return -1;
    char *b = g_cu.moe_buf;
    int32_t *sel = (int32_t *)b, *d_idx = (int32_t *)(b + o_idx);
    float *wsel = (float *)(b + o_w), *xe = (float *)(b + o_xe), *g = (float *)(b + o_g);
    float *u = (float *)(b + o_u), *y = (float *)(b + o_y), *d_rw = (float *)(b + o_rw);
    int32_t *h_sel = malloc((size_t)n * k * 4), *h_idx = malloc((size_t)n * 4);
    float *h_w = malloc((size_t)n * k * 4), *h_rw = malloc((size_t)n * 4);
    int rc = -1;
    if (!h_sel || !h_idx || !h_w || !h_rw) {
        cu_fail("out of memory");
        goto done;
    }
    const bool sig_in = p->routing == MX_MOE_ROUTE_SIGMOID_IN; /* llama4: scales the input */
    if (cu_ck(cuda_moe_route(rl->data, (long)rl->stride[0], n, E, k, p->norm_topk, sig_in, sel,
                             wsel, g_cu.st), "moe route") ||
        cu_ck(cudaMemcpyAsync(h_sel, sel, (size_t)n * k * 4, cudaMemcpyDeviceToHost, g_cu.st), "moe sel") ||
        cu_ck(cudaMemcpyAsync(h_w, wsel, (size_t)n * k * 4, cudaMemcpyDeviceToHost, g_cu.st), "moe w") ||
        cu_ck(cudaStreamSynchronize(g_cu.st), "moe routing") ||
        cu_ck(cudaMemsetAsync(out->data, 0, (size_t)n * out->stride[0] * 4, g_cu.st), "moe zero"))
        goto done;
    /* tensor parallelism: this rank's experts only (p->en = 0: all) */
    const int e_lo = p->en > 0 ? p->e0 : 0, e_hi = p->en > 0 ? p->e0 + p->en : E;
    for (int e = e_lo; e < e_hi; e++) {
        int m = 0;
        for (int r = 0; r < n; r++)
            for (int j = 0; j < k; j++)
                if (h_sel[r * k + j] == e) {
                    h_idx[m] = r;
                    h_rw[m++] = h_w[r * k + j];
                }
        if (!m) continue;
        if (!cu_upload_small(d_idx, h_idx, (size_t)m * 4) || !cu_upload_small(d_rw, h_rw, (size_t)m * 4) ||
            cu_ck(cuda_gather_rows_f32(xe, H, x->data, (long)x->stride[0], d_idx, m, H, g_cu.st),
                  "moe gather") ||
            (sig_in && cu_ck(cuda_scale_rows_f32(xe, H, d_rw, m, H, g_cu.st), "moe input scale")))
            goto done;
        moe_mm(g, I, xe, H, m, ex, 0, e);
        moe_mm(u, I, xe, H, m, ex, 1, e);
        if (cu_ck(cuda_glu_f32(g, I, g, I, u, I, m, I, p->activation, g_cu.st), "moe glu")) goto done;
        moe_mm(y, H, g, I, m, ex, 2, e);
        if (cu_ck(cuda_scatter_add_rows(out->data, (long)out->stride[0], y, d_idx,
                                        sig_in ? NULL : d_rw, m, H,
                                        g_cu.st), "moe scatter"))
            goto done;
    }
    rc = g_cu.has_err ? -1 : 0;
done:
    free(h_sel);
    free(h_idx);
    free(h_w);
    free(h_rw);
    return rc;
}

int cu_moe(mx_tensor *out, const mx_tensor *x, const mx_tensor *router_logits,
           const mx_moe_experts *ex, const mx_moe_params *p, mx_error *err) {
    cu_flush();
    g_cu.hint_moe = true;
    const int n = (int)x->shape[0];
    if ((!ex->gate && !ex->qgate) || (!ex->up && !ex->qup) || (!ex->down && !ex->qdown))
        return mx_fail(err, "MoE: an expert projection has neither dense nor quantized weights");
    const int ep = p->en > 0 ? p->e0 : 0; /* a present expert (TP ranks hold a range) */
    const int I = ex->gate ? (int)ex->gate[ep].shape[0] : (int)ex->qgate[ep].w.shape[0];
    if (p->top_k < 1 || p->top_k > 32 || p->n_experts > 1024 || p->top_k > p->n_experts)
        return mx_fail(err, "MoE: top-k %d of %d experts is not supported on CUDA (k <= 32, "
                       "E <= 1024)", p->top_k, p->n_experts);
    const cu_moe_table *t = NULL;
    int rc;
    if (n <= CU_MOE_PAIR_MAX_ROWS) {
        t = moe_table(ex, p->n_experts, I, (int)x->shape[1]);
        rc = t ? moe_pairs(out, x, router_logits, t, p, I) : -1;
    } else {
        rc = moe_grouped(out, x, router_logits, ex, p, I);
    }
    if (rc || g_cu.has_err) {
        if (!g_cu.has_err) cu_fail("MoE: out of memory for the expert tables");
        g_cu.has_err = false;
        return mx_fail(err, "%s", g_cu.err);
    }
    return 0;
}
