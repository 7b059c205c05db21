/* CUDA engine backend: the ops table (backend.h) over the kernels of src/backend/cuda.
 *
 * Layout: this file holds initialisation, memory, errors, host<->device copies and the
 * elementwise ops; cuda_load.c the weight upload policy; cuda_step.c the step arena, KV write,
 * attention dispatch and CUDA graphs; cuda_matmul.c GEMV / cuBLASLt and MoE.
 *
 * Numerics: activations fp32 on the device (the seam's contract), weights bf16 (other float
 * dtypes are converted once at upload), KV cache bf16, fp32 accumulation everywhere. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_be.h"
#include "backend/cuda/cuda_elem.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_qknobs.h"
#include "base/env.h"
#include "base/log.h"

/* Per device: device d's state lives in s_dev[d]; threads start bound to device 0. */
static cu_state s_dev[CUDA_MAX_DEVICES];
_Thread_local cu_state *cu_cur = &s_dev[0];

/* ==== Errors ==== */
void cu_fail(const char *fmt, ...) {
    if (g_cu.has_err) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_cu.err, sizeof g_cu.err, fmt, ap);
    va_end(ap);
    g_cu.has_err = true;
}

int cu_ck(int code, const char *what) {
    if (code == 0) return 0;
    cu_fail("CUDA: %s: %s", what, cudaGetErrorString((cudaError_t)code));
    return -1;
}

static int cu_check(mx_error *err) {
    cu_flush();
    if (!g_cu.has_err) return 0;
    g_cu.has_err = false;
    return mx_fail(err, "%s", g_cu.err);
}

/* ==== Memory ==== */
static void track(void *p, size_t n) {
    if (g_cu.n_al == g_cu.cap_al) {
        int cap = g_cu.cap_al ? 2 * g_cu.cap_al : 1024;
        void **np = realloc(g_cu.al_ptr, (size_t)cap * sizeof *np);
        size_t *ns = np ? realloc(g_cu.al_size, (size_t)cap * sizeof *ns) : NULL;
        if (np) g_cu.al_ptr = np;
        if (!ns) return; /* accounting only: the allocation itself is fine */
        g_cu.al_size = ns;
        g_cu.cap_al = cap;
    }
    g_cu.al_ptr[g_cu.n_al] = p;
    g_cu.al_size[g_cu.n_al++] = n;
    g_cu.cur_bytes += n;
    if (g_cu.cur_bytes > g_cu.peak_bytes) g_cu.peak_bytes = g_cu.cur_bytes;
}

void *cu_dev_alloc(size_t n) {
    void *p = NULL;
    if (cudaMalloc(&p, n ? n : 1) != cudaSuccess) {
        cudaGetLastError(); /* an allocation failure is reported by the caller */
        return NULL;
    }
    track(p, n);
    return p;
}

void cu_dev_free(void *p) {
    if (!p) return;
    for (int i = g_cu.n_al - 1; i >= 0; i--)
        if (g_cu.al_ptr[i] == p) {
            g_cu.cur_bytes -= g_cu.al_size[i];
            g_cu.al_ptr[i] = g_cu.al_ptr[g_cu.n_al - 1];
            g_cu.al_size[i] = g_cu.al_size[g_cu.n_al - 1];
            g_cu.n_al--;
            break;
        }
    cu_ck(cudaFree(p), "cudaFree");
}

int cu_ensure(void **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    if (g_cu.capturing) {
        cu_fail("internal: scratch growth (%zu bytes) during graph capture", need);
        return -1;
    }
    size_t n = *cap ? *cap : 1 << 20;
    while (n < need) n *= 2;
    void *p = cu_dev_alloc(n);
    if (!p) {
        cu_fail("out of GPU memory for %zu MiB of scratch", n >> 20);
        return -1;
    }
    if (*buf) {
        cu_graphs_clear(); /* captured graphs hold the old address */
        cu_dev_free(*buf);
    }
    *buf = p;
    *cap = n;
    /* zeroed: some scratch (the attention merge counters) must start at zero */
    return cu_ck(cudaMemsetAsync(p, 0, n, g_cu.st), "scratch zero") ? -1 : 0;
}

static void *be_alloc(size_t nbytes) {
    void *p = cu_dev_alloc(nbytes);
    if (p && cu_ck(cudaMemsetAsync(p, 0, nbytes, g_cu.st), "cudaMemsetAsync")) return NULL;
    return p;
}

static void be_free(void *p) {
    cu_flush();
    cu_graphs_clear(); /* a graph may reference the freed buffer */
    cu_dev_free(p);
}

/* ==== Host <-> device ==== */
void *cu_upload_small(void *dev_dst, const void *src, size_t n) {
    if (g_cu.capturing) {
        cu_fail("internal: host upload of %zu bytes during graph capture", n);
        return NULL;
    }
    if (n > CU_MISC_BYTES) {
        /* cudaMemcpy runs on the legacy stream, which does not order with ours: drain ours
         * first (earlier kernels may still read dev_dst); it returns once the copy is done */
        if (cu_ck(cudaStreamSynchronize(g_cu.st), "cudaStreamSynchronize") ||
            cu_ck(cudaMemcpy(dev_dst, src, n, cudaMemcpyHostToDevice), "cudaMemcpy H2D"))
            return NULL;
        return dev_dst;
    }
    /* the pinned buffer is reused: wait for its previous copy to have left */
    if (g_cu.misc_busy && cu_ck(cudaEventSynchronize(g_cu.misc_ev), "cudaEventSynchronize"))
        return NULL;
    memcpy(g_cu.misc, src, n);
    if (cu_ck(cudaMemcpyAsync(dev_dst, g_cu.misc, n, cudaMemcpyHostToDevice, g_cu.st),
              "cudaMemcpyAsync H2D") ||
        cu_ck(cudaEventRecord(g_cu.misc_ev, g_cu.st), "cudaEventRecord"))
        return NULL;
    g_cu.misc_busy = true;
    return dev_dst;
}

static void be_copy_to_host(void *dst, const mx_tensor *src) {
    cu_flush();
    cu_ck(cudaMemcpyAsync(dst, src->data, mx_tensor_nbytes(src), cudaMemcpyDeviceToHost, g_cu.st),
          "copy to host");
    cu_ck(cudaStreamSynchronize(g_cu.st), "stream synchronize (copy to host)");
}

static void be_copy_from_host(mx_tensor *dst, const void *src) {
    cu_flush();
    cu_upload_small(dst->data, src, mx_tensor_nbytes(dst));
}

/* ==== Deferred elementwise ops ==== */
static void flush_add(void) {
    if (!g_cu.pend_add.on) return;
    g_cu.pend_add.on = false;
    cu_ck(cuda_add_f32(g_cu.pend_add.x, g_cu.pend_add.cols, g_cu.pend_add.y, g_cu.pend_add.cols,
                       g_cu.pend_add.rows, g_cu.pend_add.cols, g_cu.st),
          "add");
}

void cu_flush_rope(void) {
    /* the held GEMVs first: the held ropes may rotate their outputs (be_rope keeps both held
     * so the KV write can hand the rotation to the q/k/v GEMV's epilogue) */
    if (g_cu.pend_rope.count) cu_flush_mm();
    cu_flush_norm();
    const int cnt = g_cu.pend_rope.count;
    g_cu.pend_rope.count = 0;
    for (int i = 0; i < cnt; i++)
        cu_ck(cuda_rope_f32(g_cu.pend_rope.x[i], g_cu.pend_rope.stride[i], g_cu.pend_rope.cs,
                            g_cu.pend_rope.n, g_cu.pend_rope.heads[i], g_cu.pend_rope.D,
                            g_cu.pend_rope.rot, g_cu.st),
              "rope");
}

void cu_flush(void) {
    cu_flush_norm();
    cu_flush_glu();
    cu_flush_mm();
    flush_add();
    cu_flush_rope();
}

/* ==== Elementwise ops ==== */
static int el_dtype(mx_dtype t) {
    return t == MX_BF16 ? CUDA_EL_BF16 : t == MX_F16 ? CUDA_EL_F16 : CUDA_EL_F32;
}

/* The ids on the device: this step's tokens (uploaded by step_begin), else a scratch copy. */
static const int32_t *embed_ids(const int32_t *ids, int n) {
    const int32_t *d_ids = g_cu.in_step && ids == g_cu.h_tokens && n == g_cu.n_rows
                               ? g_cu.d_tokens
                               : NULL;
    if (!d_ids) { /* not this step's tokens: upload them into scratch */
        if (cu_ensure(&g_cu.ids_buf, &g_cu.ids_cap, (size_t)n * 4)) return NULL;
        d_ids = cu_upload_small(g_cu.ids_buf, ids, (size_t)n * 4);
    }
    return d_ids;
}

static void be_embed(mx_tensor *out, const mx_tensor *table, const int32_t *ids, int n,
                     float scale, bool round_scale) {
    cu_flush();
    cu_resident(table->data);
    const int32_t *d_ids = embed_ids(ids, n);
    if (!d_ids) return;
    cu_ck(cuda_embed(out->data, table->data, d_ids, n, (int)table->shape[1], (int)table->shape[0],
                     scale, round_scale, g_cu.st),
          "embed");
}

static void be_embed_q(mx_tensor *out, const mx_qweight *table, const int32_t *ids, int n,
                       float scale, bool round_scale) {
    cu_flush();
    int V, H;
    if (cu_q_shape(table, &V, &H)) return;
    if (out->dtype != MX_F32 || out->shape[out->ndim - 1] != H || out->stride[0] != H) {
        cu_fail("quantized embedding: expected contiguous fp32 out [%d, %d]", n, H);
        return;
    }
    cu_resident(table->w.data);
    cu_resident(table->scales.data);
    cu_resident(table->biases.data);
    const int32_t *d_ids = embed_ids(ids, n);
    if (!d_ids) return;
    cu_ck(cuda_qembed(out->data, table->w.data, table->scales.data, table->biases.data,
                      cu_q_sb(table->scales.dtype), table->tiled, d_ids, n, V, H, table->bits,
                      table->group_size, scale, round_scale, g_cu.st),
          "quantized embed");
}

void cu_flush_norm(void) {
    if (!g_cu.pend_norm.on) return;
    g_cu.pend_norm.on = false;
    if (mx_env()->diag_skip & MX_SKIP_NORM) return; /* timing diagnostics: output wrong */
    if (g_cu.pend_norm.y)
        cu_ck(cuda_add_rms_norm_f32(g_cu.pend_norm.x, g_cu.pend_norm.y, g_cu.pend_norm.out,
                                    g_cu.pend_norm.w, g_cu.pend_norm.eps, g_cu.pend_norm.offset,
                                    g_cu.pend_norm.rows, g_cu.pend_norm.D, g_cu.st),
              "add + rms_norm");
    else
        cu_ck(cuda_rms_norm_f32(g_cu.pend_norm.out, g_cu.pend_norm.D, g_cu.pend_norm.x,
                                g_cu.pend_norm.D, g_cu.pend_norm.w, g_cu.pend_norm.eps,
                                g_cu.pend_norm.offset, g_cu.pend_norm.rows, g_cu.pend_norm.D,
                                g_cu.st),
              "rms_norm");
}

/* Holds the norm past the GEMV rows (see pend_norm); runs it now otherwise. */
static void norm_run_or_hold(float *x, const float *y, float *out, const uint16_t *w, float eps,
                             float offset, int rows, int D) {
    g_cu.pend_norm.x = x;
    g_cu.pend_norm.y = y;
    g_cu.pend_norm.out = out;
    g_cu.pend_norm.w = w;
    g_cu.pend_norm.eps = eps;
    g_cu.pend_norm.offset = offset;
    g_cu.pend_norm.rows = rows;
    g_cu.pend_norm.D = D;
    g_cu.pend_norm.on = true;
    /* held past the GEMV rows (cuBLASLt input), at 1..2 GEMV rows (the GEMV prologue) and at
     * the int8 qmv's rows (its prep kernel computes the norm, cuda_qmatmul.c norm_into_i8) */
    const bool lt = rows > g_cu.gemv_rows;
    const bool gemv = rows <= g_cu.gemv_fuse && rows <= g_cu.gemv_rows && !y;
    const int i8_rows = g_cu.qmv_i8 > g_cu.qmv_i8_q8 ? g_cu.qmv_i8 : g_cu.qmv_i8_q8;
    const bool i8 = g_cu.qmv_i8_norm && rows <= i8_rows;
    if (!(lt || gemv || i8) || out == x || D % 8) cu_flush_norm();
}

static void be_rms_norm(mx_tensor *out, const mx_tensor *x, const mx_tensor *w, float eps,
                        float offset) {
    cu_resident(w->data);
    const int64_t D = x->shape[x->ndim - 1];
    const int64_t rows = mx_tensor_numel(x) / D;
    if (g_cu.pend_add.on && g_cu.pend_add.x == x->data && g_cu.pend_add.cols == D &&
        g_cu.pend_add.rows == rows && out->data != x->data && out->data != g_cu.pend_add.y) {
        g_cu.pend_add.on = false; /* x += y and the norm of the result: one launch */
        norm_run_or_hold(g_cu.pend_add.x, g_cu.pend_add.y, out->data, w->data, eps, offset,
                         (int)rows, (int)D);
        return;
    }
    cu_flush();
    /* rows may be [n, heads] flattened: contiguous descriptors only (what the forward passes) */
    norm_run_or_hold(x->data, NULL, out->data, w->data, eps, offset, (int)rows, (int)D);
}

static void be_rope(mx_tensor *x, const float *cos_sin, int rot_dim) {
    cu_flush_glu(); /* the held GEMVs stay held: cu_flush_rope runs them before any rope */
    if (g_cu.pend_add.on) cu_flush();
    /* rope(q), rope(k) are held for the KV write that follows (one fused launch) */
    struct { int n, D; } sh = {(int)x->shape[0], (int)x->shape[2]};
    if (g_cu.pend_rope.count == 1 && (g_cu.pend_rope.cs != cos_sin || g_cu.pend_rope.n != sh.n ||
                                      g_cu.pend_rope.D != sh.D || g_cu.pend_rope.rot != rot_dim ||
                                      g_cu.pend_rope.x[0] == x->data))
        cu_flush_rope();
    if (g_cu.pend_rope.count < 2) {
        const int i = g_cu.pend_rope.count++;
        g_cu.pend_rope.x[i] = x->data;
        g_cu.pend_rope.stride[i] = (long)x->stride[0];
        g_cu.pend_rope.heads[i] = (int)x->shape[1];
        g_cu.pend_rope.cs = cos_sin;
        g_cu.pend_rope.n = sh.n;
        g_cu.pend_rope.D = sh.D;
        g_cu.pend_rope.rot = rot_dim;
        return;
    }
    cu_flush_rope();
    cu_ck(cuda_rope_f32(x->data, (long)x->stride[0], cos_sin, (int)x->shape[0], (int)x->shape[1],
                        (int)x->shape[2], rot_dim, g_cu.st),
          "rope");
}

static void be_add(mx_tensor *x, const mx_tensor *y) {
    const int64_t rows = x->shape[0], cols = mx_tensor_numel(x) / rows;
    if (x->stride[0] == cols && y->stride[0] == cols && !g_cu.pend_norm.on &&
        (cu_mm_take_add(x->data, y->data, (int)rows, (int)cols) ||
         cu_q_take_add(x->data, y->data, (int)rows, (int)cols)))
        return; /* the held GEMV / qmv writing y adds it into x */
    cu_flush();
    if (x->stride[0] == cols && y->stride[0] == cols && x->data != y->data) {
        /* held: the RMSNorm that usually follows reads x and fuses the add */
        g_cu.pend_add.x = x->data;
        g_cu.pend_add.y = y->data;
        g_cu.pend_add.rows = (int)rows;
        g_cu.pend_add.cols = (int)cols;
        g_cu.pend_add.on = true;
        return;
    }
    cu_ck(cuda_add_f32(x->data, (long)x->stride[0], y->data, (long)y->stride[0], (int)rows,
                       (int)cols, g_cu.st),
          "add");
}

static void be_glu(mx_tensor *out, const mx_tensor *gate, const mx_tensor *up, int activation) {
    const int rows = (int)gate->shape[0], cols = (int)gate->shape[1];
    if (out->stride[0] == cols && gate->stride[0] == cols && up->stride[0] == cols &&
        !g_cu.pend_norm.on &&
        (cu_mm_take_glu(out->data, gate->data, up->data, rows, cols, activation) ||
         cu_q_take_glu(out->data, gate->data, up->data, rows, cols, activation)))
        return; /* the held gate/up GEMV / qmv writes act(gate) * up itself */
    cu_flush();
    g_cu.pend_glu.out = out->data;
    g_cu.pend_glu.gate = gate->data;
    g_cu.pend_glu.up = up->data;
    g_cu.pend_glu.os = (long)out->stride[0];
    g_cu.pend_glu.gs = (long)gate->stride[0];
    g_cu.pend_glu.us = (long)up->stride[0];
    g_cu.pend_glu.rows = (int)gate->shape[0];
    g_cu.pend_glu.cols = (int)gate->shape[1];
    g_cu.pend_glu.act = activation;
    g_cu.pend_glu.on = true;
}

void cu_flush_glu(void) {
    cu_flush_norm();
    if (!g_cu.pend_glu.on) return;
    g_cu.pend_glu.on = false;
    if (mx_env()->diag_skip & MX_SKIP_GLU) return; /* timing diagnostics: output wrong */
    cu_ck(cuda_glu_f32(g_cu.pend_glu.out, g_cu.pend_glu.os, g_cu.pend_glu.gate, g_cu.pend_glu.gs,
                       g_cu.pend_glu.up, g_cu.pend_glu.us, g_cu.pend_glu.rows, g_cu.pend_glu.cols,
                       g_cu.pend_glu.act, g_cu.st),
          "glu");
}

static void be_softcap(mx_tensor *x, float cap) {
    cu_flush();
    cu_ck(cuda_softcap_f32(x->data, (size_t)mx_tensor_numel(x), cap, g_cu.st), "softcap");
}

static void be_gather_rows(mx_tensor *out, const mx_tensor *x, const int32_t *idx, int n) {
    cu_flush();
    const int32_t *d_idx =
        g_cu.in_step && idx == g_cu.h_out && n == g_cu.n_out ? g_cu.d_out : NULL;
    if (!d_idx) {
        if (cu_ensure(&g_cu.ids_buf, &g_cu.ids_cap, (size_t)n * 4)) return;
        d_idx = cu_upload_small(g_cu.ids_buf, idx, (size_t)n * 4);
        if (!d_idx) return;
    }
    const int64_t cols = mx_tensor_numel(x) / x->shape[0];
    cu_ck(cuda_gather_rows_f32(out->data, (long)out->stride[0], x->data, (long)x->stride[0], d_idx,
                               n, (int)cols, g_cu.st),
          "gather_rows");
}

static void be_kv_copy_rows(mx_tensor *pool, int64_t dst_row, int64_t src_row, int64_t n_rows) {
    cu_flush();
    const size_t row = (size_t)pool->stride[0] * mx_dtype_size(pool->dtype);
    cu_ck(cudaMemcpyAsync((char *)pool->data + (size_t)dst_row * row,
                          (char *)pool->data + (size_t)src_row * row, row * (size_t)n_rows,
                          cudaMemcpyDeviceToDevice, g_cu.st),
          "kv copy rows");
}

static void be_convert(mx_tensor *dst, const mx_tensor *src) {
    cu_flush();
    cu_ck(cuda_convert(dst->data, el_dtype(dst->dtype), src->data, el_dtype(src->dtype),
                       (size_t)mx_tensor_numel(src), g_cu.st),
          "convert");
}

/* ==== Hooks: describe, memory peak, copy bandwidth ==== */
static void be_describe(char *buf, size_t len) {
    const cuda_device_facts *f = &g_cu.facts;
    char splits[48];
    if (g_cu.forced_splits) snprintf(splits, sizeof splits, "%d (forced)", g_cu.forced_splits);
    else if (g_cu.deterministic) snprintf(splits, sizeof splits, "%d (deterministic)", CUDA_ATTN_DET_SPLITS);
    else if (mx_env()->autotune == MX_AUTOTUNE_CACHE) snprintf(splits, sizeof splits, "auto + autotune cache");
    else if (mx_env()->autotune == MX_AUTOTUNE_ON) snprintf(splits, sizeof splits, "auto + autotune 1");
    else snprintf(splits, sizeof splits, "auto");
    /* quantized matmul: qmv row window / qmm slab (cuda_qmatmul.c q_knob) */
    const char *at = mx_env()->autotune == MX_AUTOTUNE_CACHE ? " + autotune cache"
                     : mx_env()->autotune == MX_AUTOTUNE_ON  ? " + autotune 1"
                                                             : "";
    char mr[40], tm[40], ks[24], mm[128] = "";
    if (!g_cu.qmv_tc && (g_cu.qmv_i8 || g_cu.qmv_i8_q8))
        snprintf(mm, sizeof mm, " (qmv_i8, int8 x: 4-bit <= %d rows, 8-bit <= %d rows%s%s)",
                 g_cu.qmv_i8, g_cu.qmv_i8_q8, g_cu.qmv_i8_norm ? ", norm" : "",
                 g_cu.qmv_i8_glu ? ", GLU" : "");
    else if (!g_cu.qmv_tc && g_cu.qmv_mma)
        snprintf(mm, sizeof mm, " (qmv_mma for 4-bit launches of <= 4096 outputs, <= %d rows)",
                 g_cu.qmv_mma);
    if (cuda_gemv_ksplit()) snprintf(ks, sizeof ks, "%d (forced)", cuda_gemv_ksplit());
    else snprintf(ks, sizeof ks, "auto");
    if (g_cu.qmv_multirow) snprintf(mr, sizeof mr, "%d (forced)", g_cu.qmv_multirow);
    else snprintf(mr, sizeof mr, "auto%s", at);
    if (g_cu.qmm_tile) snprintf(tm, sizeof tm, "%d (forced)", g_cu.qmm_tile);
    else snprintf(tm, sizeof tm, "auto%s", at);
    snprintf(buf, len,
             "%s, compute capability %d.%d, %d SMs, %.1f GiB (%.1f GiB free) | GEMV rows <= %d "
             "(tensor-core GEMV on bf16 x to %d, its x as bf16 hi + lo to %d, cuBLASLt above; "
             "K split %s, early loads %s, "
             "L2 prefetch %d KB per CTA, fusions to %d rows, RoPE in GEMV to %d rows) | "
             "CUDA graphs %s (cache %d) | "
             "PDL %s | decode splits %s, cluster merge <= %d, %d stages%s | "
             "qmv window %s%s%s, qmm slab %s | weights %s%s | KV bf16",
             f->name, f->cc_major, f->cc_minor, f->sm_count, f->total_bytes / 1073741824.0,
             f->free_bytes / 1073741824.0, g_cu.gemv_rows,
             g_cu.gemv_tc_rows > g_cu.gemv_rows ? g_cu.gemv_tc_rows : g_cu.gemv_rows,
             g_cu.gemv_tc_rows < g_cu.gemv_split_rows ? g_cu.gemv_tc_rows : g_cu.gemv_split_rows,
             ks, cuda_gemv_early() ? "on" : "off", cuda_gemv_prefetch() / 1024,
             g_cu.gemv_fuse, g_cu.gemv_rope,
             g_cu.graph_cache ? "on" : "off",
             g_cu.graph_cache, cuda_pdl_enabled() ? "on" : "off", splits, cuda_attn_cluster(),
             cuda_attn_stages(), cuda_attn_tc() ? ", tensor cores" : "", mr,
             g_cu.qmv_tc ? " (qmv_tc for 4/8-bit, <= 32 rows)"
                         : g_cu.qmv_bulk ? " (streaming tensor-core qmv for 4/8-bit, <= 32 rows)" : "",
             mm, tm,
             g_cu.lazy ? "lazy" : "eager",
             g_cu.lazy ? "" : g_cu.pinned ? " (pinned 4 x 64 MiB)" : " (pageable)");
}

static uint64_t be_mem_peak(bool reset) {
    const uint64_t p = g_cu.peak_bytes;
    if (reset) g_cu.peak_bytes = g_cu.cur_bytes;
    return p;
}

/* D2D copy of 1 GiB (less when memory is short): bytes read + written / best of 5. */
static double be_copy_bandwidth(void) {
    cu_flush();
    size_t n = (size_t)1 << 30;
    void *a = NULL, *b = NULL;
    while (n >= ((size_t)64 << 20)) {
        if (cudaMalloc(&a, n) == cudaSuccess && cudaMalloc(&b, n) == cudaSuccess) break;
        cudaGetLastError();
        if (a) cudaFree(a);
        a = b = NULL;
        n /= 2;
    }
    if (!a || !b) return 0;
    cudaEvent_t e0, e1;
    double best = 0;
    if (cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess) {
        cudaMemsetAsync(a, 0x5a, n, g_cu.st);
        cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, g_cu.st); /* warm-up */
        for (int r = 0; r < 5; r++) {
            float ms = 0;
            cudaEventRecord(e0, g_cu.st);
            cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, g_cu.st);
            cudaEventRecord(e1, g_cu.st);
            if (cudaEventSynchronize(e1) == cudaSuccess && cudaEventElapsedTime(&ms, e0, e1) ==
                cudaSuccess && ms > 0) {
                const double gbs = 2.0 * (double)n / (ms * 1e-3) / 1e9;
                if (gbs > best) best = gbs;
            }
        }
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
    }
    cudaGetLastError();
    cudaFree(a);
    cudaFree(b);
    return best;
}

/* ==== Greedy sampling on the device ==== */
static int be_greedy_rows(int32_t *ids, float *logprobs, const mx_tensor *logits, mx_error *err) {
    cu_flush();
    const int n = (int)logits->shape[0], V = (int)logits->shape[1];
    if (logits->stride[0] != V) return mx_fail(err, "greedy: logits rows must be contiguous");
    const size_t half = ((size_t)n * 4 + 255) & ~(size_t)255;
    if (cu_ensure(&g_cu.greedy_buf, &g_cu.greedy_cap, 2 * half)) return cu_check(err), -1;
    char *d = g_cu.greedy_buf;
    cu_ck(cuda_greedy_f32(logits->data, n, V, (int32_t *)d, (float *)(d + half), g_cu.st), "greedy");
    cu_ck(cudaMemcpyAsync(ids, d, (size_t)n * 4, cudaMemcpyDeviceToHost, g_cu.st), "greedy ids");
    cu_ck(cudaMemcpyAsync(logprobs, d + half, (size_t)n * 4, cudaMemcpyDeviceToHost, g_cu.st),
          "greedy logprobs");
    cu_ck(cudaStreamSynchronize(g_cu.st), "stream synchronize (greedy)");
    return cu_check(err);
}

/* ==== Ops table ==== */
static const backend_ops k_cuda_ops = {
    .name = "cuda",
    .device = MX_DEV_CUDA,
    .kv_dtype = MX_BF16,
    .kv_types_all = true,
    .alloc = be_alloc,
    .free = be_free,
    .upload = cu_weight_upload,
    .upload_raw = cu_weight_upload_raw,
    .upload_group = cu_weight_upload_group,
    .upload_q = cu_weight_upload_q,
    .copy_to_host = be_copy_to_host,
    .copy_from_host = be_copy_from_host,
    .embed = be_embed,
    .rms_norm = be_rms_norm,
    .rope = be_rope,
    .add = be_add,
    .glu = be_glu,
    .softcap = be_softcap,
    .gather_rows = be_gather_rows,
    .matmul = cu_matmul,
    .matmul_q = cu_matmul_q,
    .embed_q = be_embed_q,
    .moe = cu_moe,
    .kv_write = cu_kv_write,
    .attention = cu_attention,
    .kv_copy_rows = be_kv_copy_rows,
    .convert = be_convert,
    .finish_load = cu_finish_load,
    .step_begin = cu_step_begin,
    .step_end = cu_step_end,
    .check = cu_check,
    .describe = be_describe,
    .mem_peak = be_mem_peak,
    .copy_bandwidth = be_copy_bandwidth,
    .greedy_rows = be_greedy_rows,
    .bind_device = cu_bind_device,
    .device_count = cuda_device_count,
};

/* ==== Initialisation ==== */
/* Initialises the calling thread's state (g_cu) for device `dev`, already current. */
static int cu_init(int dev, mx_error *err) {
    if (g_cu.ready) return 0;
    if (cuda_device_info_of(dev, &g_cu.facts))
        return dev ? mx_fail(err, "--device cuda: no usable GPU %d (%d visible)", dev, cuda_device_count())
                   : mx_fail(err, "--device cuda: no usable NVIDIA GPU (no driver or no device)");
    if (cudaStreamCreateWithFlags(&g_cu.st, cudaStreamNonBlocking) != cudaSuccess)
        return mx_fail(err, "--device cuda: cannot create a stream on GPU %d: %s", dev,
                       cudaGetErrorString(cudaGetLastError()));
    cuda_knobs_register(); /* before qmv_multirow / qmm_tile_m are read */
    const mx_env_t *env = mx_env();
    if (env->diag_skip && dev == 0)
        LOG_WARN("MLXCEL_DIAG_SKIP: some decode kernels (%s%s%s%s%s) are not launched; the "
                 "outputs are wrong (timing diagnostics only)",
                 env->diag_skip & MX_SKIP_ATTN ? "attn " : "",
                 env->diag_skip & MX_SKIP_NORM ? "norm " : "",
                 env->diag_skip & MX_SKIP_GLU ? "glu " : "",
                 env->diag_skip & MX_SKIP_ROPE ? "rope " : "",
                 env->diag_skip & MX_SKIP_PREP ? "prep" : "");
    g_cu.gemv_rows = env->dense_gemv_rows > CU_GEMV_MAX_ROWS ? CU_GEMV_MAX_ROWS : env->dense_gemv_rows;
    g_cu.gemv_fuse = env->gemv_fuse;
    g_cu.gemv_rope = env->gemv_rope ? (env->gemv_fuse > 1 ? env->gemv_fuse : 1) : 0;
    /* MLXCEL_DENSE_GEMV_ROWS=0 means cuBLASLt for every row count: no tensor-core GEMV either */
    g_cu.gemv_tc_rows = g_cu.gemv_rows ? env->gemv_tc_rows : 0;
    g_cu.gemv_split_rows = env->gemv_split_rows;
    g_cu.graph_cache = env->cuda_graph_cache_size;
    g_cu.qmv_multirow = env->qmv_multirow; /* validated by env.c against cuda_knobs.c's lists */
    g_cu.qmm_tile = env->qmm_tile_m;
    g_cu.qmv_tc = env->qmv_tc;
    g_cu.qmv_bulk = env->qmv_bulk;
    g_cu.qmv_bulk_min_rows = env->qmv_bulk_min_rows;
    g_cu.qmv_mma = env->qmv_mma;
    g_cu.qmv_i8 = env->qmv_i8;
    g_cu.qmv_i8_q8 = env->qmv_i8_q8;
    g_cu.qmv_i8_glu = env->qmv_i8_glu;
    g_cu.qmv_i8_norm = env->qmv_i8_norm;
    g_cu.qmv_i8_inprep = env->qmv_i8_inprep;
    g_cu.qmv_tiled = env->qmv_tiled;
    g_cu.deterministic = env->sdpa_deterministic;
    g_cu.forced_splits = env->paged_decode_splits > CUDA_ATTN_MAX_SPLITS ? CUDA_ATTN_MAX_SPLITS
                                                                         : env->paged_decode_splits;
    g_cu.lazy = env->weight_lazy;
    g_cu.pinned = env->cuda_pinned_load;
    g_cu.profile = env->profile_ttft;
    if (dev == 0) cuda_set_pdl(env->cuda_pdl && g_cu.facts.cc_major >= 9); /* process-wide */
    /* MLXCEL_CUDA_PREFER_SHARED (off): every kernel with the largest shared-memory carveout.
     * A kernel whose carveout differs from the running one's cannot share its SMs, so PDL
     * cannot start it early (session 18, bench/attn_timeline.cu: attention entered 3.6 us
     * before its producer's end instead of 0.3 us after, once the carveouts matched); but
     * device-wide the smaller L1 cost the 8B bf16 B=1 step 7%, hence off */
    if (env->cuda_prefer_shared &&
        cudaDeviceSetCacheConfig(cudaFuncCachePreferShared) != cudaSuccess)
        cudaGetLastError(); /* a preference: refused, the driver's choice stays */
    /* cp.async.bulk.prefetch is sm_90+; the kernels compile it out below, this keeps it honest */
    if (dev == 0) cuda_set_gemv_prefetch(g_cu.facts.cc_major >= 9 ? env->gemv_prefetch_kb * 1024 : 0);
    if (dev == 0) cuda_set_attn_cluster(g_cu.facts.cc_major >= 9 ? env->attn_cluster : 0);
    if (dev == 0) cuda_set_attn_stages(env->attn_stages);
    if (dev == 0) cuda_set_attn_early_kv(env->attn_early_kv);
    if (dev == 0) cuda_set_attn_tc(g_cu.facts.cc_major >= 8 && env->attn_tc);
    if (dev == 0) cuda_set_gemv_ksplit(env->gemv_ksplit);
    if (dev == 0) cuda_set_gemv_early(env->gemv_early);
    if (dev == 0) cuda_set_gemv_persist(env->gemv_persist);
    if (cudaHostAlloc(&g_cu.misc, CU_MISC_BYTES, cudaHostAllocDefault) != cudaSuccess ||
        cudaEventCreateWithFlags(&g_cu.misc_ev, cudaEventDisableTiming) != cudaSuccess)
        return mx_fail(err, "--device cuda: cannot allocate %zu MiB of pinned host memory",
                       CU_MISC_BYTES >> 20);
    for (int i = 0; i < 2; i++)
        if (cudaEventCreateWithFlags(&g_cu.arena_ev[i], cudaEventDisableTiming) != cudaSuccess)
            return mx_fail(err, "--device cuda: cannot create events");
    if (cublasLtCreate(&g_cu.lt) != CUBLAS_STATUS_SUCCESS)
        return mx_fail(err, "--device cuda: cuBLASLt initialisation failed");
    g_cu.lt_ws_size = CU_LT_WS_BYTES;
    if (dev == 0) cu_lt_set_splitk(env->lt_splitk); /* process-wide */
    g_cu.lt_ws = cu_dev_alloc(g_cu.lt_ws_size);
    if (!g_cu.lt_ws) return mx_fail(err, "--device cuda: out of GPU memory for the cuBLASLt workspace");
    g_cu.hint_tile_rows = CUDA_ATTN_ROWS_QV;
    g_cu.ready = true;
    return 0;
}

int cu_bound_device(void) { return (int)(cu_cur - s_dev); }

int cu_bind_device(int dev, mx_error *err) {
    if (dev < 0 || dev >= CUDA_MAX_DEVICES)
        return mx_fail(err, "--device cuda: GPU %d: at most %d GPUs are supported", dev, CUDA_MAX_DEVICES);
    if (cu_cur == &s_dev[dev] && s_dev[dev].ready) return 0; /* this thread is bound already */
    if (cudaSetDevice(dev) != cudaSuccess) {
        const cudaError_t e = cudaGetLastError();
        return mx_fail(err, "--device cuda: cannot use GPU %d (%d visible): %s", dev,
                       cuda_device_count(), cudaGetErrorString(e));
    }
    cu_cur = &s_dev[dev];
    return cu_init(dev, err);
}

const backend_ops *backend_cuda(mx_error *err) {
    /* device 0 on the calling thread: what every thread that binds nothing else uses */
    if (cu_cur != &s_dev[0] || !s_dev[0].ready) {
        cu_state *prev = cu_cur;
        if (cu_bind_device(0, err)) return NULL;
        if (prev != &s_dev[0]) { /* a bound rank thread asking for the table: keep its device */
            mx_error e2;
            cu_bind_device((int)(prev - s_dev), &e2);
        }
    }
    return &k_cuda_ops;
}
