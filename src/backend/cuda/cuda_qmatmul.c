/* Quantized matmul dispatch of the CUDA backend (backend_ops.matmul_q).
 *
 * With MLXCEL_QMV_I8=N (default 8; 8-bit: MLXCEL_QMV_I8_Q8=N, default 0): 4-bit weights, group
 * 64 / 128, 1..N rows: the int8-activation tensor-core qmv (qmv_i8.cu), whose prep kernel also
 * computes a held RMSNorm or GLU that produces x (MLXCEL_QMV_I8_NORM / _GLU). With
 * MLXCEL_QMV_MMA=N (default 1: one row): the same weights, 1..N rows, <= 4096 output rows per
 * launch: the tensor-core qmv (qmv_mma.cu; see mma_ok). Then 4- and 8-bit weights with bf16
 * scales, rows <= CUDA_QMV_TC_MAX_ROWS (32): the streaming tensor-core qmv (qmv_bulk.cu)
 * unless MLXCEL_QMV_BULK=0, or with MLXCEL_QMV_TC=1 the helper-built tensor-core qmv
 * (qmv_tc.cu); x must be 16-byte aligned; other widths (and those without it), rows <=
 * CUDA_QMV_MAX_ROWS (8): the CUDA-core qmv (qgemv.cu). Several consecutive matmul_q on the
 * same x with the same quantization (Q/K/V, gate/up) are held back and launched as one
 * multi-segment qmv, as cu_matmul does for bf16. More rows: qmm (qmm.cu: dequantized slabs +
 * cuBLASLt). Row window and slab size: MLXCEL_QMV_MULTIROW / MLXCEL_QMM_TILE_M > the
 * autotuner's stored winner (MLXCEL_AUTOTUNE cache or 1) > the kernels' defaults; the
 * tensor-core qmv takes only the forced window (else all rows in one pass: the tuned windows
 * were measured on the CUDA-core kernel). */
#include <string.h>

#include "backend/cuda/cuda_be.h"
#include "backend/cuda/cuda_elem.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_tune_qmat.h"
#include "base/env.h"
#include "base/log.h"

/* ==== Descriptors ==== */
int cu_q_sb(mx_dtype t) {
    return t == MX_BF16 ? CUDA_QSB_BF16 : t == MX_F16 ? CUDA_QSB_F16 : t == MX_F32 ? CUDA_QSB_F32 : -1;
}

/* Logical N, K of a quantized weight; -1 (recorded) when the descriptor is not usable. */
int cu_q_shape(const mx_qweight *w, int *N, int *K) {
    if (w->w.dtype != MX_U32 || w->w.ndim != 2 || w->bits < 2 || w->bits > 8 || w->bits == 7 ||
        cu_q_sb(w->scales.dtype) < 0 || w->scales.dtype != w->biases.dtype ||
        w->w.stride[0] != w->w.shape[1] || w->scales.stride[0] != w->scales.shape[1] ||
        w->biases.stride[0] != w->biases.shape[1] || w->w.device != MX_DEV_CUDA) {
        cu_fail("quantized matmul: weight descriptor is not a contiguous U32 [N, K*bits/32] "
                "with f32/bf16/f16 scales on the device");
        return -1;
    }
    *N = (int)w->w.shape[0];
    *K = (int)(w->w.shape[1] * 32 / w->bits);
    return 0;
}

/* ==== Launch parameters: override > tuned > default ====
 * The value is a function of the shape within a process (the override is fixed at init, the
 * policy's answer per bucket is memoised there, the default is pure), and it is memoised here
 * per exact shape, so a CUDA graph captured for a decode step replays the window / slab its
 * eager run used, and the qmm scratch that run sized fits the replay. The first lookup of a
 * process (device id, record files) happens in an eager step: the first step of any graph key
 * runs eagerly and makes every quantized matmul the captured step makes. */
static int q_knob(tune_op op, int rows, int N, int K, int bits, int group) {
    const bool qmv = op == TUNE_OP_QMV_MULTIROW;
    const int forced = qmv ? g_cu.qmv_multirow : g_cu.qmm_tile; /* validated by env.c */
    if (forced) return forced;
    if (mx_env()->autotune == MX_AUTOTUNE_OFF) /* no file access, no device query */
        return qmv ? cuda_qmv_default_multirow(rows, N, K, bits)
                   : cuda_qmm_default_tile_m(rows, N, K, bits);
    for (int i = g_cu.n_qknob_memo - 1; i >= 0; i--) {
        const cu_qknob_memo *m = &g_cu.qknob_memo[i];
        if (m->op == (int)op && m->rows == rows && m->N == N && m->K == K && m->bits == bits &&
            m->group == group)
            return m->value;
    }
    if (g_cu.capturing && !g_cu.warned_capture_qknob) {
        /* not expected (see above); the policy's answer for a bucket an eager step already
         * resolved is host-only and the same, so resolving here is still consistent */
        g_cu.warned_capture_qknob = true;
        LOG_WARN("autotune: %s for [%d x %d] x [%d x %d]^T first needed inside a graph capture",
                 tune_op_name(op), rows, K, N, K);
    }
    const int v = qmv ? cuda_tune_qmv_multirow(rows, N, K, bits, group)
                      : cuda_tune_qmm_tile_m(rows, N, K, bits, group);
    if (g_cu.n_qknob_memo == CU_QKNOB_MEMO) { /* many shapes (prefill lengths): drop the oldest */
        memmove(g_cu.qknob_memo, g_cu.qknob_memo + 1,
                (CU_QKNOB_MEMO - 1) * sizeof g_cu.qknob_memo[0]);
        g_cu.n_qknob_memo--;
    }
    g_cu.qknob_memo[g_cu.n_qknob_memo++] = (cu_qknob_memo){(int)op, rows, N, K, bits, group, v};
    LOG_DEBUG("%s: rows %d, weight [%d, %d] q%dg%d -> %d", tune_op_name(op), rows, N, K, bits,
              group, v);
    return v;
}

/* The autotuner profiles one [N, K] weight (the MLP up projection): a multi-segment launch of
 * equal segments (gate/up) is looked up by the segment's N, others by the total. */
static int qmv_window(const cuda_qmv_args *a) {
    int n_total = 0;
    bool same = true;
    for (int i = 0; i < a->n_segs; i++) n_total += a->N[i], same &= a->N[i] == a->N[0];
    return q_knob(TUNE_OP_QMV_MULTIROW, a->rows, same ? a->N[0] : n_total, a->K, a->bits,
                  a->group);
}

static void resident_q(const mx_qweight *w) {
    cu_resident(w->w.data);
    cu_resident(w->scales.data);
    cu_resident(w->biases.data);
}

/* ==== Which qmv ==== */
static bool tc_ok(const cuda_qmv_args *a) { return g_cu.qmv_tc && cuda_qmv_tc_supported(a); }
static bool bulk_ok(const cuda_qmv_args *a) {
    return !g_cu.qmv_tc && g_cu.qmv_bulk && cuda_qmv_bulk_supported(a);
}
/* By default (MLXCEL_QMV_BULK_MIN_ROWS=2) one row stays on the CUDA-core qmv, faster there on
 * the 8B shapes (H200, q4g64: down 25.1 against 39.7 us, lm_head 132.3 against 140.1 us; e2e
 * B=1 301.9 against 238.2 tok/s with 1); from 2 rows the streaming kernel's cost barely grows
 * with the rows while the CUDA-core kernel's does. */

/* MLXCEL_QMV_MMA=N (default 1): the tensor-core qmv (qmv_mma.cu: 16-byte chunk loads, groups
 * kept apart in the MMA's columns) takes 1..N rows of 4-bit g64 / g128 launches of <= 4096
 * output rows in all (o, down on the 8B shape). One row: H200 8B q4g64 B=1 345.6 / 340.1
 * against 333.3 / 333.5 tok/s without it (two calls; op bench o 10.1, down 19.7 against the
 * CUDA-core 10.3, 20.8 us). More rows stay on the streaming kernel: although the op bench has
 * qmv_mma ahead on these launches at 8 rows (o 13.1, down 28.5 against 14.3, 37.5 us), the
 * B=8 step was slower with it (1,964.5 against 2,154.7; bench/results/2026-12-03-qmv-mma.md). */
static bool mma_ok(const cuda_qmv_args *a) {
    int n = 0;
    for (int i = 0; i < a->n_segs; i++) n += a->N[i];
    return a->rows >= 1 && a->rows <= g_cu.qmv_mma && n <= 4096 && cuda_qmv_mma_supported(a);
}

/* The int8-activation tensor-core qmv (qmv_i8.cu: x rounded to int8 per group) takes 1..N
 * rows of a 4-bit g64 / g128 launch, MLXCEL_QMV_I8=N (default 8), or of an 8-bit one,
 * MLXCEL_QMV_I8_Q8=N (default 0; one row in the fused launches of MLXCEL_QMV_I8_INPREP
 * always, with x as hi + lo int8 parts), ahead of qmv_mma. H200 8B q4g64 (synthetic weights):
 * B=1 386.7 against 344.4 tok/s, B=8 2,579.0 against 2,165.9; KL to bf16 through the decode
 * path (compare --decode) 1.815 against 1.788 nats. 8-bit is opt-in: there the x rounding is
 * as large as the weights' own (B=1 285.5 against 269.8 tok/s, but top-1 78.1% against 91.0%,
 * KL 0.0495 against 0.0150; bench/results/2026-12-03-qmv-i8.md). */
static bool i8_ok(const cuda_qmv_args *a) {
    int n = a->bits == 8 ? g_cu.qmv_i8_q8 : g_cu.qmv_i8;
    /* one 8-bit row in a fused launch takes x as int8 hi + lo (qmv_i8.cu): no rounding loss,
     * so it needs no opt-in */
    if (a->bits == 8 && a->rows == 1 && (a->x_inprep || a->x_ready) && n < 1) n = 1;
    return !g_cu.qmv_tc && a->rows >= 1 && a->rows <= n && cuda_qmv_i8_supported(a);
}

/* Rows a qmv handles for this weight and x (else qmm): the tensor-core kernel's limit when
 * it takes them. */
static int qmv_max_rows(const mx_qweight *w, const void *x, long ldx, int K) {
    cuda_qmv_args a;
    memset(&a, 0, sizeof a);
    a.w[0] = w->w.data;
    a.n_segs = 1, a.tiled = w->tiled;
    a.x = x, a.ldx = ldx, a.rows = 1, a.K = K, a.bits = w->bits, a.group = w->group_size;
    a.sb_dtype = cu_q_sb(w->scales.dtype);
    return tc_ok(&a) || bulk_ok(&a) ? CUDA_QMV_TC_MAX_ROWS : CUDA_QMV_MAX_ROWS;
}

/* The shared qmv workspace, grown to bytes, into a (-1, recorded, when it cannot grow). */
static int qmv_ws(cuda_qmv_args *a, size_t bytes) {
    if (cu_ensure(&g_cu.qmv_ws, &g_cu.qmv_ws_cap, bytes)) return -1;
    a->ws = g_cu.qmv_ws;
    a->ws_bytes = g_cu.qmv_ws_cap;
    return 0;
}

/* One launch of a qmv (rows beyond CUDA_QMV_MAX_ROWS only reach here when tc_ok or bulk_ok). */
static int qmv_launch_core(cuda_qmv_args *a) {
    if (a->glu_out && !i8_ok(a)) { /* cannot happen (checked when fused): stay correct */
        if (cu_ck(cuda_glu_f32(a->glu_out, a->ldx, a->x, a->ldx, a->glu_up, a->ldx, a->rows, a->K,
                               a->glu_act, g_cu.st),
                  "glu"))
            return -1;
        a->x = a->glu_out, a->glu_out = NULL, a->glu_up = NULL;
    }
    if (a->norm_w && !i8_ok(a)) { /* likewise */
        const int rc = a->norm_y ? cuda_add_rms_norm_f32(a->norm_x, a->norm_y, (float *)a->x,
                                                         a->norm_w, a->norm_eps, a->norm_offset,
                                                         a->rows, a->K, g_cu.st)
                                 : cuda_rms_norm_f32((float *)a->x, a->ldx, a->norm_x, a->K,
                                                     a->norm_w, a->norm_eps, a->norm_offset,
                                                     a->rows, a->K, g_cu.st);
        if (cu_ck(rc, "rms_norm")) return -1;
        a->norm_w = NULL;
    }
    if (tc_ok(a)) return cuda_qmv_tc(a, g_cu.qmv_multirow, g_cu.st);
    if (i8_ok(a)) {
        a->skip_prep = (mx_env()->diag_skip & MX_SKIP_PREP) != 0;
        size_t ws = cuda_qmv_i8_workspace_bytes(a->K);
        if (a->glu_next_q && cuda_qmv_i8_workspace_bytes(a->N[0]) > ws)
            ws = cuda_qmv_i8_workspace_bytes(a->N[0]);
        return qmv_ws(a, ws) ? -1 : cuda_qmv_i8(a, g_cu.st);
    }
    if (mma_ok(a))
        return qmv_ws(a, cuda_qmv_mma_workspace_bytes(a->K)) ? -1 : cuda_qmv_mma(a, g_cu.st);
    /* a tiled weight has no kernel below: the streaming one takes any row count */
    if ((a->rows >= g_cu.qmv_bulk_min_rows || a->tiled) && bulk_ok(a)) {
        if (qmv_ws(a, cuda_qmv_bulk_workspace_bytes(a->K))) return -1;
        /* all rows in one pass, unless MLXCEL_QMV_MULTIROW forces a window */
        const int win = g_cu.qmv_multirow > 0 ? g_cu.qmv_multirow : a->rows;
        for (int r0 = 0; r0 < a->rows; r0 += win) {
            cuda_qmv_args p = *a;
            p.rows = a->rows - r0 < win ? a->rows - r0 : win;
            p.x = a->x + (size_t)r0 * a->ldx;
            for (int i = 0; i < a->n_segs; i++) p.y[i] = a->y[i] + (size_t)r0 * a->ldy[i];
            const int rc = cuda_qmv_bulk(&p, 0, g_cu.st);
            if (rc) return rc;
        }
        return 0;
    }
    if (a->tiled) {
        cu_fail("internal: no qmv kernel for a tiled weight [%d x %d] at %d rows", a->N[0], a->K,
                a->rows);
        return -1;
    }
    if (qmv_ws(a, cuda_qmv_workspace_bytes(a->K))) return -1;
    return cuda_qmv(a, qmv_window(a), g_cu.st);
}

/* ==== Deferred multi-segment qmv ==== */
/* The one-row fusions (MLXCEL_QMV_I8_INPREP): x rounded inside the qmv_i8 CTAs where that
 * kernel takes the launch; a residual add or GLU epilogue (cu_q_take_add / _glu) it cannot
 * take runs after it as its own launch. qx_ready records a GLU output whose int8 x this
 * launch left in the workspace for the next qmv. */
static int qmv_launch(cuda_qmv_args *a) {
    g_cu.qx_ready = NULL;
    float *res = a->res, *glu = a->glu_next;
    const float *rope = a->rope_cs;
    if (g_cu.qmv_i8_inprep && a->rows == 1 && !a->x_ready && !a->glu_out && !a->norm_y) {
        cuda_qmv_args t = *a;
        t.x_inprep = 1;
        if (!i8_ok(&t)) t.res = NULL, t.glu_next = NULL, t.glu_next_q = 0, t.rope_cs = NULL;
        if (i8_ok(&t)) *a = t;
    }
    if (!i8_ok(a))
        a->res = NULL, a->glu_next = NULL, a->glu_next_q = 0, a->x_ready = 0, a->rope_cs = NULL;
    const int rc = qmv_launch_core(a);
    if (rc) return rc;
    if (a->glu_next && a->glu_next_q) g_cu.qx_ready = a->glu_next;
    g_cu.q_fused[0] += a->x_inprep != 0;
    g_cu.q_fused[1] += a->res != NULL;
    g_cu.q_fused[2] += a->glu_next && a->glu_next_q;
    g_cu.q_fused[3] += a->rope_cs != NULL;
    if (res && !a->res &&
        cu_ck(cuda_add_f32(res, a->N[0], a->y[0], a->ldy[0], a->rows, a->N[0], g_cu.st), "add"))
        return -1;
    if (glu && !a->glu_next &&
        cu_ck(cuda_glu_f32(glu, a->N[0], a->y[0], a->ldy[0], a->y[1], a->ldy[1], a->rows, a->N[0],
                           a->glu_next_act, g_cu.st), "glu"))
        return -1;
    const int D = a->head_dim;
    if (rope && !a->rope_cs &&
        cu_ck(cuda_rope_kv_f32(a->y[0], a->ldy[0], a->y[1], a->ldy[1], a->y[2], a->ldy[2], rope,
                               a->rows, a->N[0] / D, a->N[1] / D, D, D, a->rope_rows, a->k_pool,
                               a->v_pool, a->pool_bf16, g_cu.st), "rope + kv_write"))
        return -1;
    return 0;
}

/* x += y where y is the held one-row qmv_i8 group's only output (the residual add after o /
 * down): the qmv adds it as it writes y, so the RMSNorm that follows has no add to fuse and
 * the next qmv can compute it inside its CTAs. */
bool cu_q_take_add(float *x, const float *y, int rows, int cols) {
    cuda_qmv_args *a = &g_cu.pend_q.a;
    if (!g_cu.qmv_i8_inprep || rows != 1 || a->n_segs != 1 || a->y[0] != y || a->rows != 1 ||
        a->N[0] != cols || a->ldy[0] != cols || g_cu.pend_q.bias[0] || a->res || a->glu_next ||
        x == y || x == a->x || x == a->norm_x || x == a->glu_up || x == a->glu_out)
        return false;
    cuda_qmv_args t = *a;
    t.res = x, t.x_inprep = !a->x_ready; /* as qmv_launch will try */
    if (!i8_ok(&t)) return false;
    a->res = x;
    return true;
}

/* out = act(gate) * up where gate, up are the held one-row qmv_i8 group's two outputs (out
 * may be gate or up): the qmv pairs the rows in its CTAs and writes out (pair mode). */
bool cu_q_take_glu(float *out, const float *gate, const float *up, int rows, int cols, int act) {
    cuda_qmv_args *a = &g_cu.pend_q.a;
    if (!g_cu.qmv_i8_inprep || rows != 1 || a->n_segs != 2 || a->rows != 1 || a->y[0] != gate ||
        a->y[1] != up || a->N[0] != cols || a->N[1] != cols || a->ldy[0] != cols ||
        a->ldy[1] != cols || g_cu.pend_q.bias[0] || g_cu.pend_q.bias[1] || a->res ||
        a->glu_next || a->glu_out || a->x_ready || a->norm_y || out == a->x || out == a->norm_x)
        return false;
    cuda_qmv_args t = *a;
    t.glu_next = out, t.glu_next_act = act, t.x_inprep = 1;
    if (!i8_ok(&t)) return false;
    a->glu_next = out, a->glu_next_act = act;
    return true;
}

/* The held q / k / v group (three segments, one row; the caller checked the tensors) rotates
 * q and k and writes k and v to the KV pools in its epilogue (RoPE pair mode). */
bool cu_q_take_rope(const float *cs, const int64_t *rows, void *k_pool, void *v_pool,
                    int pool_bf16, int head_dim) {
    cuda_qmv_args *a = &g_cu.pend_q.a;
    if (!g_cu.qmv_i8_inprep || a->n_segs != 3 || a->rope_cs) return false;
    cuda_qmv_args t = *a;
    t.rope_cs = cs, t.rope_rows = rows, t.k_pool = k_pool, t.v_pool = v_pool;
    t.pool_bf16 = pool_bf16, t.head_dim = head_dim, t.x_inprep = 1;
    if (!i8_ok(&t)) return false;
    t.x_inprep = 0; /* qmv_launch decides */
    *a = t;
    return true;
}

void cu_flush_qmv(void) {
    if (!g_cu.pend_q.a.n_segs) return;
    cuda_qmv_args a = g_cu.pend_q.a;
    g_cu.pend_q.a.n_segs = 0;
    /* timing diagnostics (outputs wrong): a one-row layer qmv left out, with its epilogues */
    if (a.rows == 1 && (mx_env()->diag_skip & cu_skip_kind(a.n_segs, a.N[0], a.K))) return;
    const int rc = qmv_launch(&a);
    if (rc < 0 || cu_ck(rc, "qmv")) return;
    for (int i = 0; i < a.n_segs; i++)
        if (g_cu.pend_q.bias[i])
            cu_ck(cuda_bias_add_f32(a.y[i], a.ldy[i], g_cu.pend_q.bias[i], a.rows, a.N[i], g_cu.st),
                  "bias");
}

/* ==== Raw entry (MoE grouped path, non-deferred) ==== */
void cu_matmul_q_raw(float *y, long ldy, const float *x, long ldx, int rows, const mx_qweight *w,
                     const mx_tensor *bias) {
    int N, K;
    if (rows <= 0) return;
    cu_flush();
    if (cu_q_shape(w, &N, &K)) return;
    resident_q(w);
    const uint16_t *B = mx_tensor_present(bias) ? bias->data : NULL;
    if (B) cu_resident(B);
    const int sbt = cu_q_sb(w->scales.dtype);
    if (rows <= qmv_max_rows(w, x, ldx, K)) {
        cuda_qmv_args a;
        memset(&a, 0, sizeof a);
        a.w[0] = w->w.data;
        a.scales[0] = w->scales.data;
        a.biases[0] = w->biases.data;
        a.y[0] = y;
        a.ldy[0] = ldy;
        a.N[0] = N;
        a.n_segs = 1, a.tiled = w->tiled;
        a.x = x;
        a.ldx = ldx;
        a.rows = rows, a.K = K, a.bits = w->bits, a.group = w->group_size, a.sb_dtype = sbt;
        const int rc = qmv_launch(&a);
        if (rc < 0 || cu_ck(rc, "qmv")) return;
    } else {
        const int tile = q_knob(TUNE_OP_QMM_TILE, rows, N, K, w->bits, w->group_size);
        const size_t need = cuda_qmm_scratch_bytes(rows, N, K, tile);
        if (cu_ensure(&g_cu.qmm_buf, &g_cu.qmm_cap, need)) return;
        cuda_qmm_args a;
        memset(&a, 0, sizeof a);
        a.w = w->w.data;
        a.scales = w->scales.data;
        a.biases = w->biases.data;
        a.tiled = w->tiled;
        a.x = x, a.ldx = ldx, a.y = y, a.ldy = ldy;
        a.rows = rows, a.N = N, a.K = K, a.bits = w->bits, a.group = w->group_size;
        a.sb_dtype = sbt;
        a.lt = g_cu.lt, a.lt_ws = g_cu.lt_ws, a.lt_ws_bytes = g_cu.lt_ws_size;
        a.scratch = g_cu.qmm_buf, a.scratch_bytes = g_cu.qmm_cap;
        const int rc = cuda_qmm(&a, tile, g_cu.st);
        if (rc == (int)cudaErrorNotSupported) {
            cu_fail("cuBLASLt has no algorithm for the quantized matmul [%d x %d] x [%d x %d]^T",
                    rows, K, N, K);
            return;
        }
        if (cu_ck(rc, "qmm")) return;
    }
    if (B) cu_ck(cuda_bias_add_f32(y, ldy, B, rows, N, g_cu.st), "bias");
}

/* ==== Ops table entry ==== */
/* The launch arguments a fusion check asks i8_ok about: x [rows, K] contiguous, w's format. */
static void i8_probe(cuda_qmv_args *t, const float *x, int rows, int K, const mx_qweight *w) {
    memset(t, 0, sizeof *t);
    t->x = x, t->ldx = K, t->rows = rows, t->K = K, t->bits = w->bits;
    t->group = w->group_size, t->sb_dtype = cu_q_sb(w->scales.dtype), t->tiled = w->tiled;
}

/* A held GLU whose output x this qmv reads, when qmv_i8 takes the launch: its prep kernel
 * computes act(gate) * up (and writes x) instead of a GLU launch of its own
 * (MLXCEL_QMV_I8_GLU). Fills a's x (the gate) and GLU fields and drops the held GLU. */
static bool glu_into_i8(cuda_qmv_args *a, const mx_tensor *x, const mx_qweight *w, int rows,
                        int K) {
    if (!g_cu.qmv_i8_glu || !g_cu.pend_glu.on || g_cu.pend_glu.out != x->data ||
        g_cu.pend_glu.rows != rows || g_cu.pend_glu.cols != K || g_cu.pend_glu.os != K ||
        g_cu.pend_glu.gs != K || g_cu.pend_glu.us != K || x->stride[0] != K ||
        x->dtype != MX_F32 || x->shape[x->ndim - 1] != K)
        return false;
    cuda_qmv_args t;
    i8_probe(&t, g_cu.pend_glu.gate, rows, K, w);
    t.glu_out = g_cu.pend_glu.out, t.glu_up = g_cu.pend_glu.up, t.glu_act = g_cu.pend_glu.act;
    if (!i8_ok(&t)) return false;
    a->x = t.x, a->glu_out = t.glu_out, a->glu_up = t.glu_up, a->glu_act = t.glu_act;
    g_cu.pend_glu.on = false;
    return true;
}

/* A held RMSNorm whose output x this qmv reads, when qmv_i8 takes the launch: its prep
 * kernel computes the norm (and writes x) instead of the norm's own launch
 * (MLXCEL_QMV_I8_NORM). Fills the norm fields into a and drops the held norm. */
static bool norm_into_i8(cuda_qmv_args *a, const mx_tensor *x, const mx_qweight *w, int rows,
                         int K) {
    if (!g_cu.qmv_i8_norm || !g_cu.pend_norm.on || g_cu.pend_norm.out != x->data ||
        g_cu.pend_norm.rows != rows || g_cu.pend_norm.D != K || x->stride[0] != K ||
        x->dtype != MX_F32 || x->shape[x->ndim - 1] != K)
        return false;
    cuda_qmv_args t;
    i8_probe(&t, x->data, rows, K, w);
    t.norm_x = g_cu.pend_norm.x, t.norm_y = g_cu.pend_norm.y, t.norm_w = g_cu.pend_norm.w;
    t.norm_eps = g_cu.pend_norm.eps, t.norm_offset = g_cu.pend_norm.offset;
    if (!i8_ok(&t)) return false;
    *a = t;
    g_cu.pend_norm.on = false;
    return true;
}

void cu_matmul_q(mx_tensor *out, const mx_tensor *x, const mx_qweight *w, const mx_tensor *bias) {
    const int rows = (int)x->shape[0];
    int N, K;
    const bool shape_ok = !cu_q_shape(w, &N, &K);
    cuda_qmv_args fz; /* a held norm or GLU this qmv computes in its prep kernel */
    memset(&fz, 0, sizeof fz);
    /* x is the GLU output a held one-row qmv writes in its epilogue: with this qmv's format
     * (g64, the same bits) it also leaves x's int8 form in the workspace for it */
    cuda_qmv_args *pq = &g_cu.pend_q.a;
    g_cu.qx_ready = NULL; /* only a launch inside this call counts: nothing ran in between */
    if (pq->n_segs && pq->glu_next == x->data) {
        cuda_qmv_args t;
        memset(&t, 0, sizeof t);
        if (shape_ok) i8_probe(&t, x->data, rows, K, w);
        t.x_ready = 1;
        pq->glu_next_q = shape_ok && rows == 1 && K == pq->N[0] && w->bits == pq->bits &&
                         w->group_size == 64 && x->stride[0] == K && x->dtype == MX_F32 &&
                         i8_ok(&t);
    }
    bool glu_fused = false, norm_fused = false;
    if (shape_ok && (g_cu.pend_norm.on || g_cu.pend_glu.on)) {
        norm_fused = norm_into_i8(&fz, x, w, rows, K);
        if (!norm_fused && g_cu.pend_glu.on) {
            cu_flush_norm();
            glu_fused = glu_into_i8(&fz, x, w, rows, K);
        }
    }
    cu_flush_glu(); /* a norm or GLU feeding this matmul runs first unless fused just above */
    cu_flush_rope();
    if (g_cu.pend_add.on) cu_flush();
    if (!shape_ok) return;
    if (rows < 1 || x->dtype != MX_F32 || x->shape[x->ndim - 1] != K ||
        rows > qmv_max_rows(w, x->data, (long)x->stride[0], K)) {
        cu_flush();
        cu_matmul_q_raw(out->data, (long)out->stride[0], x->data, (long)x->stride[0], rows, w, bias);
        return;
    }
    resident_q(w);
    if (mx_tensor_present(bias)) cu_resident(bias->data);
    const int sbt = cu_q_sb(w->scales.dtype);
    cuda_qmv_args *a = &g_cu.pend_q.a;
    bool join = !glu_fused && !norm_fused && !a->glu_out && !a->res && !a->glu_next &&
                !a->rope_cs && !a->x_ready && a->n_segs > 0 && a->x == x->data &&
                a->ldx == (long)x->stride[0] &&
                a->rows == rows && a->K == K && a->bits == w->bits && a->group == w->group_size &&
                a->sb_dtype == sbt && a->tiled == w->tiled && a->n_segs < CUDA_QMV_MAX_SEGS;
    for (int i = 0; join && i < a->n_segs; i++) /* x must not be a held output */
        if ((const void *)a->y[i] == x->data || (void *)a->y[i] == out->data) join = false;
    if (!join) cu_flush_mm(); /* the held bf16 GEMVs or qmv group launch first */
    const bool ready = !join && g_cu.qx_ready == x->data && !glu_fused && !norm_fused;
    g_cu.qx_ready = NULL;
    const int i = a->n_segs++;
    if (i == 0) { /* the fused fields of an earlier group */
        a->glu_out = NULL, a->glu_up = NULL, a->glu_act = 0;
        a->norm_x = NULL, a->norm_y = NULL, a->norm_w = NULL;
        a->res = NULL, a->glu_next = NULL, a->glu_next_act = 0, a->glu_next_q = 0;
        a->x_inprep = 0, a->x_ready = ready, a->rope_cs = NULL;
    }
    a->x = x->data;
    a->ldx = (long)x->stride[0];
    a->rows = rows, a->K = K, a->bits = w->bits, a->group = w->group_size, a->sb_dtype = sbt;
    a->tiled = w->tiled;
    a->w[i] = w->w.data;
    a->scales[i] = w->scales.data;
    a->biases[i] = w->biases.data;
    a->y[i] = out->data;
    a->ldy[i] = (long)out->stride[0];
    a->N[i] = N;
    g_cu.pend_q.bias[i] = mx_tensor_present(bias) ? bias->data : NULL;
    if (glu_fused) {
        a->x = fz.x, a->glu_out = fz.glu_out, a->glu_up = fz.glu_up;
        a->glu_act = fz.glu_act;
    }
    if (norm_fused) { /* x stays the norm's output: Q, K, V on it join this group */
        a->norm_x = fz.norm_x, a->norm_y = fz.norm_y, a->norm_w = fz.norm_w;
        a->norm_eps = fz.norm_eps, a->norm_offset = fz.norm_offset;
    }
}
