/* Weight upload policy of the CUDA backend.
 *
 * eager (default): every weight is copied while the model binds; the copy goes through four
 *   reused 64 MiB pinned buffers: the host fills buffer i (the memcpy out of the mmapped
 *   checkpoint is where the file is actually read) while the DMA engine drains buffers i-1..i-3
 *   (cudaMemcpyAsync + an event per buffer), so file reads and PCIe transfers overlap; the ring
 *   carries over from one tensor to the next. finish_load waits for the last copies: all
 *   weights are resident before the model counts as loaded.
 * MLXCEL_CUDA_PINNED_LOAD=0: synchronous cudaMemcpy straight from the mapped file (pageable).
 * MLXCEL_WEIGHT_MATERIALIZATION=lazy: device memory is reserved at bind time (so an
 *   out-of-memory shows up at load, not mid-request) and each tensor is copied the first time
 *   an op reads it; a graph capture materialises whatever is still pending first.
 * Weights in fp16/fp32 are converted to bf16 on the host while staging (the kernels read
 * bf16). Quantized weights (U32 packed codes) and their scales / biases go through
 * upload_raw, which keeps the host dtype byte for byte (the qmv/qmm kernels read f16 and f32
 * scales as they are, so CUDA dequantizes to the same values as the CPU).
 * MLXCEL_PROFILE_TTFT=1 prints the [TTFT] upload counters. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_be.h"
#include "base/clock.h"
#include "base/env.h"
#include "base/log.h"

/* ==== Host conversion into a staging buffer ==== */
/* Element size on the device: bf16 unless raw (host dtype kept). */
static size_t dev_esize(mx_dtype t, bool raw) { return raw ? mx_dtype_size(t) : 2; }

static void to_bf16(uint16_t *dst, const void *src, mx_dtype t, int64_t i0, int64_t n, bool raw) {
    if (raw) {
        const size_t es = mx_dtype_size(t);
        memcpy(dst, (const char *)src + (size_t)i0 * es, (size_t)n * es);
    } else if (t == MX_BF16) {
        memcpy(dst, (const uint16_t *)src + i0, (size_t)n * 2);
    } else if (t == MX_F32) {
        const float *s = (const float *)src + i0;
        for (int64_t i = 0; i < n; i++) dst[i] = mx_f32_to_bf16(s[i]);
    } else {
        const uint16_t *s = (const uint16_t *)src + i0;
        for (int64_t i = 0; i < n; i++) dst[i] = mx_f32_to_bf16(mx_f16_to_f32(s[i]));
    }
}

static int pin_init(void) {
    if (g_cu.pin[0]) return 0;
    for (int i = 0; i < CU_PIN_BUFS; i++)
        if (cudaHostAlloc(&g_cu.pin[i], CU_PIN_BYTES, cudaHostAllocDefault) != cudaSuccess ||
            cudaEventCreateWithFlags(&g_cu.pin_ev[i], cudaEventDisableTiming) != cudaSuccess) {
            cudaGetLastError();
            return -1;
        }
    return 0;
}

/* numel elements of host (dtype t) -> dptr as bf16 (raw: as is), through the pinned ring. */
static int stage_copy(char *dptr, const void *host, mx_dtype t, int64_t numel, bool raw) {
    const size_t es = dev_esize(t, raw);
    const int64_t per = (int64_t)(CU_PIN_BYTES / es);
    for (int64_t i0 = 0; i0 < numel; i0 += per) {
        const int64_t n = numel - i0 < per ? numel - i0 : per;
        const int b = g_cu.pin_next;
        g_cu.pin_next = (b + 1) % CU_PIN_BUFS;
        /* buffer b's previous copy must have left before it is refilled */
        if (g_cu.pin_busy[b] && cu_ck(cudaEventSynchronize(g_cu.pin_ev[b]), "upload: event wait"))
            return -1;
        to_bf16(g_cu.pin[b], host, t, i0, n, raw);
        if (cu_ck(cudaMemcpyAsync(dptr + (size_t)i0 * es, g_cu.pin[b], (size_t)n * es,
                                  cudaMemcpyHostToDevice, g_cu.st),
                  "upload: cudaMemcpyAsync") ||
            cu_ck(cudaEventRecord(g_cu.pin_ev[b], g_cu.st), "upload: event record"))
            return -1;
        g_cu.pin_busy[b] = true;
    }
    return 0;
}

/* Pageable path: straight from the mapping when already bf16, else via a converted copy. */
static int pageable_copy(char *dptr, const void *host, mx_dtype t, int64_t numel, bool raw) {
    /* cudaMemcpy is on the legacy stream: ours must not still be using dptr's neighbours */
    if (cu_ck(cudaStreamSynchronize(g_cu.st), "upload: stream synchronize")) return -1;
    if (t == MX_BF16 || raw)
        return cu_ck(cudaMemcpy(dptr, host, (size_t)numel * dev_esize(t, raw),
                                cudaMemcpyHostToDevice),
                     "upload: cudaMemcpy");
    const int64_t per = 1 << 24;
    uint16_t *tmp = malloc((size_t)(numel < per ? numel : per) * 2);
    if (!tmp) {
        cu_fail("upload: out of host memory");
        return -1;
    }
    int rc = 0;
    for (int64_t i0 = 0; i0 < numel && !rc; i0 += per) {
        const int64_t n = numel - i0 < per ? numel - i0 : per;
        to_bf16(tmp, host, t, i0, n, false);
        rc = cu_ck(cudaMemcpy(dptr + i0 * 2, tmp, (size_t)n * 2, cudaMemcpyHostToDevice),
                   "upload: cudaMemcpy");
    }
    free(tmp);
    return rc;
}

static int copy_weight(char *dptr, const void *host, mx_dtype t, int64_t numel, bool raw) {
    if (g_cu.pinned && pin_init() == 0) return stage_copy(dptr, host, t, numel, raw);
    return pageable_copy(dptr, host, t, numel, raw);
}

/* ==== Upload op ==== */
static int check_host(const mx_tensor *host, bool raw, mx_error *err) {
    if (raw ? host->dtype != MX_BF16 && host->dtype != MX_F16 && host->dtype != MX_F32 &&
                  host->dtype != MX_U32
            : host->dtype != MX_BF16 && host->dtype != MX_F16 && host->dtype != MX_F32)
        return mx_fail(err, "dtype %s cannot be uploaded (bf16, f16, f32%s)",
                       mx_dtype_name(host->dtype), raw ? ", u32" : "");
    int64_t expect = 1;
    for (int d = host->ndim - 1; d >= 0; d--) {
        if (host->stride[d] != expect) return mx_fail(err, "non-contiguous host tensor");
        expect *= host->shape[d];
    }
    return 0;
}

static size_t dev_bytes(const mx_tensor *host, bool raw) {
    return (size_t)mx_tensor_numel(host) * dev_esize(host->dtype, raw);
}

/* host -> the device bytes at d (allocated by the caller, dev_bytes long). */
static int place(mx_tensor *dst, const mx_tensor *host, bool raw, char *d, mx_error *err) {
    const int64_t numel = mx_tensor_numel(host);
    const size_t nbytes = dev_bytes(host, raw);
    const double t0 = mx_now();
    *dst = *host;
    dst->data = d;
    dst->dtype = raw ? host->dtype : MX_BF16;
    dst->device = MX_DEV_CUDA;
    if (!raw && host->ndim >= 1 && host->shape[host->ndim - 1] > g_cu.max_k)
        g_cu.max_k = (int)host->shape[host->ndim - 1];
    g_cu.up_tensors++;
    if (g_cu.lazy) {
        if (g_cu.n_pend == g_cu.cap_pend) {
            int cap = g_cu.cap_pend ? 2 * g_cu.cap_pend : 1024;
            cu_pending *p = realloc(g_cu.pend, (size_t)cap * sizeof *p);
            if (!p) return mx_fail(err, "out of memory");
            g_cu.pend = p;
            g_cu.cap_pend = cap;
        }
        g_cu.pend[g_cu.n_pend++] = (cu_pending){.dptr = d, .nbytes = nbytes, .host = host->data,
                                                .src_dtype = host->dtype, .numel = numel,
                                                .raw = raw};
        g_cu.n_pend_left++;
        g_cu.pend_sorted = false;
        return 0;
    }
    if (copy_weight(d, host->data, host->dtype, numel, raw)) {
        g_cu.has_err = false;
        return mx_fail(err, "%s", g_cu.err);
    }
    g_cu.up_bytes += nbytes;
    g_cu.up_seconds += mx_now() - t0;
    return 0;
}

static char *alloc_weights(size_t nbytes, mx_error *err) {
    char *d = cu_dev_alloc(nbytes);
    if (!d)
        mx_fail(err, "out of GPU memory for %.1f MiB (%.2f GiB allocated so far)",
                nbytes / 1048576.0, g_cu.cur_bytes / 1073741824.0);
    return d;
}

/* raw: keep the host dtype (U32 packed codes, f16/f32 scales); else convert to bf16. */
static int upload(mx_tensor *dst, const mx_tensor *host, bool raw, mx_error *err) {
    if (check_host(host, raw, err)) return -1;
    char *d = alloc_weights(dev_bytes(host, raw), err);
    return d ? place(dst, host, raw, d, err) : -1;
}

int cu_weight_upload(mx_tensor *dst, const mx_tensor *host, mx_error *err) {
    return upload(dst, host, false, err);
}

int cu_weight_upload_raw(mx_tensor *dst, const mx_tensor *host, mx_error *err) {
    return upload(dst, host, true, err);
}

/* One allocation, tensors back to back (bf16 sizes are even; a tensor whose bytes are not a
 * multiple of 16 leaves the next one unaligned, which the matmuls check and then run apart). */
int cu_weight_upload_group(mx_tensor *dst, const mx_tensor *host, int n, mx_error *err) {
    if (!mx_env()->join_qkv) { /* MLXCEL_JOIN_QKV=0: apart, so their matmuls run apart */
        for (int i = 0; i < n; i++)
            if (upload(&dst[i], &host[i], false, err)) return -1;
        return 0;
    }
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if (check_host(&host[i], false, err)) return -1;
        total += dev_bytes(&host[i], false);
    }
    char *d = alloc_weights(total, err);
    if (!d) return -1;
    for (int i = 0; i < n; i++) {
        if (place(&dst[i], &host[i], false, d, err)) return -1;
        d += dev_bytes(&host[i], false);
    }
    return 0;
}

/* ==== Quantized weights in the tiled layout (MLXCEL_QMV_TILED, default on) ====
 * A 2-D weight of 4 or 8 bits, group 64 or 128 and bf16 scales goes through a reused device
 * staging buffer in the MLX layout and is repacked from there (cuda_q_tile, on the upload
 * stream) into its own allocation: the MLX layout is never resident, so the repack costs no
 * memory beyond the staging buffer (the largest such weight), freed by finish_load. The
 * layout is read by qmv_i8, qmv_bulk, qmm and the embedding gather only, so it is used where
 * those take every launch: eager loads (the repack needs the bytes at bind time), without
 * MLXCEL_QMV_TC, with MLXCEL_QMV_BULK, and for 4-bit with MLXCEL_QMV_I8 >= 1. */
static bool tile_ok(const mx_qweight *q, const mx_tensor *w, const mx_tensor *s,
                    const mx_tensor *b) {
    if (!g_cu.qmv_tiled || g_cu.lazy || g_cu.qmv_tc || !g_cu.qmv_bulk ||
        (q->bits == 4 && g_cu.qmv_i8 < 1) || w->ndim != 2 || s->dtype != MX_BF16 ||
        b->dtype != MX_BF16 || w->shape[0] > INT_MAX || w->shape[1] > INT_MAX / 32)
        return false;
    const int N = (int)w->shape[0], K = (int)(w->shape[1] * 32 / q->bits);
    return cuda_q_tiled_bytes(N, K, q->bits, q->group_size) != 0;
}

static size_t al16(size_t n) { return (n + 15) & ~(size_t)15; }

int cu_weight_upload_q(mx_qweight *q, const mx_tensor *w, const mx_tensor *s, const mx_tensor *b,
                       mx_error *err) {
    if (!tile_ok(q, w, s, b))
        return upload(&q->w, w, true, err) || upload(&q->scales, s, true, err) ||
                       upload(&q->biases, b, true, err)
                   ? -1
                   : 0;
    if (check_host(w, true, err) || check_host(s, true, err) || check_host(b, true, err)) return -1;
    const int N = (int)w->shape[0], K = (int)(w->shape[1] * 32 / q->bits);
    const size_t nw = al16(dev_bytes(w, true)), ns = al16(dev_bytes(s, true));
    const size_t need = nw + ns + dev_bytes(b, true);
    if (need > g_cu.qstage_cap) { /* cudaFree waits for the repack still reading it */
        cu_dev_free(g_cu.qstage);
        g_cu.qstage_cap = 0;
        if (!(g_cu.qstage = alloc_weights(need, err))) return -1;
        g_cu.qstage_cap = need;
    }
    char *d = alloc_weights(cuda_q_tiled_bytes(N, K, q->bits, q->group_size), err);
    if (!d) return -1;
    mx_tensor m[3];
    char *st = g_cu.qstage;
    if (place(&m[0], w, true, st, err) || place(&m[1], s, true, st + nw, err) ||
        place(&m[2], b, true, st + nw + ns, err)) {
        cu_dev_free(d);
        return -1;
    }
    /* pageable copies run on the legacy stream, and may still be in flight */
    if ((!(g_cu.pinned && g_cu.pin[0]) && cu_ck(cudaDeviceSynchronize(), "upload: synchronize")) ||
        cu_ck(cuda_q_tile(d, m[0].data, m[1].data, m[2].data, N, K, q->bits, q->group_size,
                          g_cu.st),
              "upload: weight repack")) {
        g_cu.has_err = false;
        cu_dev_free(d);
        return mx_fail(err, "%s", g_cu.err);
    }
    q->w = m[0], q->scales = m[1], q->biases = m[2];
    q->w.data = d, q->scales.data = NULL, q->biases.data = NULL;
    q->tiled = true;
    g_cu.up_repacked++;
    return 0;
}

int cu_finish_load(mx_error *err) {
    const double t0 = mx_now();
    if (cu_ck(cudaStreamSynchronize(g_cu.st), "waiting for the weight uploads")) {
        g_cu.has_err = false;
        return mx_fail(err, "%s", g_cu.err);
    }
    cu_dev_free(g_cu.qstage); /* the repacks are done */
    g_cu.qstage = NULL, g_cu.qstage_cap = 0;
    g_cu.up_seconds += mx_now() - t0;
    if (g_cu.profile) {
        if (g_cu.lazy) {
            uint64_t reserved = 0;
            for (int i = 0; i < g_cu.n_pend; i++) reserved += g_cu.pend[i].nbytes;
            fprintf(stderr, "[TTFT] weights: lazy, %llu tensors, %.3f GB reserved on the GPU, "
                            "uploaded on first use\n",
                    (unsigned long long)g_cu.up_tensors, reserved / 1e9);
        } else {
            fprintf(stderr, "[TTFT] weights: eager (%s), %llu tensors, %.3f GB uploaded in %.3f s "
                            "(%.2f GB/s), %llu quantized weights repacked\n",
                    g_cu.pinned ? "pinned 4 x 64 MiB" : "pageable",
                    (unsigned long long)g_cu.up_tensors, g_cu.up_bytes / 1e9, g_cu.up_seconds,
                    g_cu.up_seconds > 0 ? g_cu.up_bytes / 1e9 / g_cu.up_seconds : 0.0,
                    (unsigned long long)g_cu.up_repacked);
        }
    }
    return 0;
}

/* ==== Lazy materialisation ==== */
static int cmp_pend(const void *a, const void *b) {
    const char *x = ((const cu_pending *)a)->dptr, *y = ((const cu_pending *)b)->dptr;
    return x < y ? -1 : x > y;
}

static void materialise(cu_pending *p) {
    if (g_cu.capturing) { /* copies inside a graph would re-run at every replay */
        cu_fail("internal: lazy weight upload during graph capture");
        return;
    }
    const double t0 = mx_now();
    if (copy_weight(p->dptr, p->host, p->src_dtype, p->numel, p->raw)) return;
    p->done = true;
    g_cu.n_pend_left--;
    g_cu.lazy_bytes_done += p->nbytes;
    g_cu.up_bytes += p->nbytes;
    g_cu.lazy_seconds += mx_now() - t0;
}

void cu_resident(const void *dptr) {
    if (!g_cu.n_pend_left || !dptr) return;
    if (!g_cu.pend_sorted) {
        qsort(g_cu.pend, (size_t)g_cu.n_pend, sizeof *g_cu.pend, cmp_pend);
        g_cu.pend_sorted = true;
    }
    const char *p = dptr;
    int lo = 0, hi = g_cu.n_pend - 1, hit = -1;
    while (lo <= hi) { /* last entry whose start is <= p (views point inside a tensor) */
        const int mid = (lo + hi) / 2;
        if (g_cu.pend[mid].dptr <= p) {
            hit = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    if (hit < 0) return;
    cu_pending *e = &g_cu.pend[hit];
    if (!e->done && p < e->dptr + e->nbytes) materialise(e);
}

void cu_resident_all(void) {
    for (int i = 0; i < g_cu.n_pend && g_cu.n_pend_left; i++)
        if (!g_cu.pend[i].done) materialise(&g_cu.pend[i]);
}
