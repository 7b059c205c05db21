/* NCCL collective (docs/tensor-parallel.md): N ranks, one GPU each, driven by N threads of
 * this process (the TP group of model_tp.c). Each op is enqueued on the calling rank's stream
 * (the thread's bound backend state, cu_cur) after the backend's deferred ops are flushed, so
 * it is ordered after the producing kernels and before the consuming ones; it returns without
 * a host synchronisation.
 *
 * libnccl.so.2 is dlopened on first use (not linked): the binary starts without NCCL, and
 * only a CUDA TP group needs it. NVLink multicast (NVLS) is switched off before the
 * communicators exist (NCCL_NVLS_ENABLE=0): it can take a shared host's GPUs out of service;
 * nothing here calls cuMulticastCreate.
 *
 * Numerics: ncclAllReduce sums in the order of NCCL's algorithm (ring / tree, chunked), not in
 * rank order 0..N-1 as the CPU collective does. Every rank receives the same result, and a
 * given NCCL version, GPU count and topology repeat it run to run (NCCL_ALGO / NCCL_PROTO
 * pin the choice), but TP=N on CUDA is not bit-comparable with TP=N on the CPU. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/collective.h"
#include "backend/cuda/cuda_be.h"

#ifdef MLXCEL_HAVE_NCCL_H
#include <nccl.h>

/* ==== libnccl, dlopened ==== */
typedef struct nccl_api {
    __typeof__(&ncclCommInitAll) init_all;
    __typeof__(&ncclCommDestroy) destroy;
    __typeof__(&ncclAllReduce) all_reduce;
    __typeof__(&ncclAllGather) all_gather;
    __typeof__(&ncclGetErrorString) err_str;
    char why[256];   /* empty: loaded */
} nccl_api;

static nccl_api g_nccl;
static pthread_once_t g_nccl_once = PTHREAD_ONCE_INIT;

static void nccl_load(void) {
    void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
    if (!h) h = dlopen("libnccl.so", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(g_nccl.why, sizeof g_nccl.why, "cannot load libnccl.so.2 (%s); put NCCL's lib "
                 "directory on LD_LIBRARY_PATH", e ? e : "not found");
        return;
    }
#define SYM(field, name)                                                                  \
    do {                                                                                  \
        *(void **)&g_nccl.field = dlsym(h, name);                                         \
        if (!g_nccl.field) {                                                              \
            snprintf(g_nccl.why, sizeof g_nccl.why, "libnccl.so.2 has no symbol %s", name); \
            return;                                                                       \
        }                                                                                 \
    } while (0)
    SYM(init_all, "ncclCommInitAll");
    SYM(destroy, "ncclCommDestroy");
    SYM(all_reduce, "ncclAllReduce");
    SYM(all_gather, "ncclAllGather");
    SYM(err_str, "ncclGetErrorString");
#undef SYM
}

/* ==== State ==== */
typedef struct nccl_rank {
    ncclComm_t comm;
    int dev;
    float *stage;        /* [cap] device: all_gather send block + receive blocks */
    size_t cap;          /* floats */
} nccl_rank;

typedef struct nccl_coll {
    int size;
    nccl_rank *r;        /* [size] */
} nccl_coll;

static int check_dev_f32(const mx_tensor *t, const char *op, int rank, mx_error *err) {
    if (t->device != MX_DEV_CUDA || t->dtype != MX_F32)
        return mx_fail(err, "collective %s (NCCL): rank %d needs a CUDA f32 tensor (got %s on %s)",
                       op, rank, mx_dtype_name(t->dtype), backend_device_name(t->device));
    return 0;
}

/* The calling thread must be bound to the rank's device: its stream orders the op. */
static int rank_ready(nccl_coll *p, int rank, const char *op, mx_error *err) {
    if (rank < 0 || rank >= p->size)
        return mx_fail(err, "collective %s (NCCL): rank %d of %d", op, rank, p->size);
    if (cu_bound_device() != p->r[rank].dev)
        return mx_fail(err, "collective %s (NCCL): rank %d runs on a thread bound to GPU %d, "
                       "expected GPU %d", op, rank, cu_bound_device(), p->r[rank].dev);
    cu_flush(); /* deferred GEMVs / adds of this rank produce the operand */
    return 0;
}

static int nccl_fail(ncclResult_t rc, const char *op, int rank, mx_error *err) {
    return mx_fail(err, "collective %s (NCCL): rank %d: %s", op, rank, g_nccl.err_str(rc));
}

/* ==== all_reduce_sum: in place on the rank's stream ==== */
static int nccl_all_reduce(mx_collective *c, int rank, mx_tensor *x, mx_error *err) {
    nccl_coll *p = c->impl;
    if (check_dev_f32(x, "all_reduce_sum", rank, err) || rank_ready(p, rank, "all_reduce_sum", err))
        return -1;
    const size_t n = (size_t)mx_tensor_numel(x);
    const ncclResult_t rc = g_nccl.all_reduce(x->data, x->data, n, ncclFloat32, ncclSum,
                                              p->r[rank].comm, g_cu.st);
    return rc == ncclSuccess ? 0 : nccl_fail(rc, "all_reduce_sum", rank, err);
}

/* ==== all_gather_cols ====
 * ncclAllGather moves equal counts, the vocabulary blocks are not (the last is shorter): each
 * rank pads its [rows, w_r] block to [rows, wmax] (wmax = ceil(W / N), the split of
 * tp_vocab_range), gathers N such blocks, then copies block r's first w_r columns to columns
 * [r * wmax, r * wmax + w_r) of out. The padding columns are gathered but never read. */
static int nccl_all_gather(mx_collective *c, int rank, mx_tensor *out, const mx_tensor *in,
                           int64_t col0, mx_error *err) {
    nccl_coll *p = c->impl;
    if (check_dev_f32(out, "all_gather_cols", rank, err) ||
        check_dev_f32(in, "all_gather_cols", rank, err))
        return -1;
    const int N = p->size;
    const int64_t rows = out->shape[0], W = out->shape[1], wmax = (W + N - 1) / N;
    const int64_t w = in->shape[1];
    /* rank r's block: columns [min(r * wmax, W), + min(wmax, W - that)) (tp_vocab_range) */
    const int64_t c0e = rank * wmax < W ? rank * wmax : W, we = W - c0e < wmax ? W - c0e : wmax;
    if (in->ndim != 2 || out->ndim != 2 || in->shape[0] != rows || col0 != c0e || w != we ||
        (rows > 1 && (in->stride[0] != w || out->stride[0] != W)))
        return mx_fail(err, "collective all_gather_cols (NCCL): rank %d: expected contiguous "
                       "in [%lld, %lld] at column %lld of out [%lld, %lld] (blocks of ceil(W/N))",
                       rank, (long long)rows, (long long)we, (long long)c0e, (long long)rows,
                       (long long)W);
    if (rank_ready(p, rank, "all_gather_cols", err)) return -1;
    nccl_rank *r = &p->r[rank];
    const size_t blk = (size_t)(rows * wmax), need = blk * (size_t)(N + 1);
    if (need > r->cap) { /* grow-only; cudaFree waits for the stream's earlier use */
        cu_dev_free(r->stage);
        r->stage = cu_dev_alloc(need * sizeof(float));
        r->cap = r->stage ? need : 0;
        if (!r->stage)
            return mx_fail(err, "collective all_gather_cols (NCCL): rank %d: out of GPU memory "
                           "for %zu MiB of staging", rank, (need * sizeof(float)) >> 20);
    }
    float *send = r->stage, *recv = r->stage + blk; /* send [rows, wmax]; recv [N][rows, wmax] */
    cudaStream_t st = g_cu.st;
    if (w > 0 && cu_ck(cudaMemcpy2DAsync(send, (size_t)wmax * 4, in->data, (size_t)w * 4,
                                         (size_t)w * 4, (size_t)rows, cudaMemcpyDeviceToDevice, st),
                       "all_gather pack"))
        goto cuda_err;
    const ncclResult_t rc = g_nccl.all_gather(send, recv, blk, ncclFloat32, r->comm, st);
    if (rc != ncclSuccess) return nccl_fail(rc, "all_gather_cols", rank, err);
    for (int q = 0; q < N; q++) {
        const int64_t c0 = q * wmax, wq = W - c0 < wmax ? W - c0 : wmax;
        if (wq <= 0) continue;
        if (cu_ck(cudaMemcpy2DAsync((float *)out->data + c0, (size_t)W * 4, recv + (size_t)q * blk,
                                    (size_t)wmax * 4, (size_t)wq * 4, (size_t)rows,
                                    cudaMemcpyDeviceToDevice, st),
                  "all_gather unpack"))
            goto cuda_err;
    }
    return 0;
cuda_err:
    g_cu.has_err = false;
    return mx_fail(err, "collective all_gather_cols (NCCL): rank %d: %s", rank, g_cu.err);
}

/* ==== Lifecycle ==== */
static void nccl_destroy(mx_collective *c) {
    if (!c) return;
    nccl_coll *p = c->impl;
    if (p && p->r) {
        const int home = cu_bound_device();
        for (int i = 0; i < p->size; i++) {
            mx_error e;
            if (p->r[i].stage && cu_bind_device(p->r[i].dev, &e) == 0) cu_dev_free(p->r[i].stage);
            if (p->r[i].comm) g_nccl.destroy(p->r[i].comm);
        }
        mx_error e;
        cu_bind_device(home, &e);
        free(p->r);
    }
    free(p);
    free(c);
}

mx_collective *mx_collective_nccl_new(int size, const int *devices, mx_error *err) {
    if (size < 1 || size > CUDA_MAX_DEVICES) {
        mx_fail(err, "collective (NCCL): %d ranks, expected 1..%d", size, CUDA_MAX_DEVICES);
        return NULL;
    }
    mx_error e;
    pthread_once(&g_nccl_once, nccl_load);
    if (g_nccl.why[0]) {
        mx_fail(err, "tensor parallelism on CUDA: %s", g_nccl.why);
        return NULL;
    }
    /* Before any communicator exists: NVLink multicast stays off (a program using it can put
     * a shared host's GPUs out of service), whatever the caller's environment says. */
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    mx_collective *c = calloc(1, sizeof *c);
    nccl_coll *p = calloc(1, sizeof *p);
    ncclComm_t *comms = calloc((size_t)size, sizeof *comms);
    if (p) p->r = calloc((size_t)size, sizeof *p->r);
    if (!c || !p || !p->r || !comms) {
        if (p) free(p->r);
        free(p);
        free(c);
        free(comms);
        mx_fail(err, "out of memory");
        return NULL;
    }
    c->impl = p;
    p->size = size;
    /* every device's backend state exists before the communicators (bind initialises it);
     * the ranks' steps run eagerly: CUDA graphs are off on the group's GPUs */
    const int home = cu_bound_device();
    for (int i = 0; i < size; i++) {
        p->r[i].dev = devices[i];
        for (int j = 0; j < i; j++)
            if (devices[j] == devices[i]) {
                mx_fail(err, "collective (NCCL): GPU %d given to ranks %d and %d", devices[i], j, i);
                goto fail;
            }
        if (cu_bind_device(devices[i], err)) goto fail;
        g_cu.graph_cache = 0;
    }
    cu_bind_device(home, &e);
    const ncclResult_t rc = g_nccl.init_all(comms, size, devices);
    /* ncclCommInitAll visits every device: make the caller's current again (the binding's
     * fast path would not, as cu_cur did not change) */
    cudaSetDevice(home);
    if (rc != ncclSuccess) {
        mx_fail(err, "tensor parallelism on CUDA: ncclCommInitAll over %d GPUs: %s", size,
                g_nccl.err_str(rc));
        goto fail;
    }
    for (int i = 0; i < size; i++) p->r[i].comm = comms[i];
    free(comms);
    c->name = "nccl";
    c->size = size;
    c->all_reduce_sum = nccl_all_reduce;
    c->all_gather_cols = nccl_all_gather;
    c->destroy = nccl_destroy;
    return c;
fail:
    cu_bind_device(home, &e);
    free(comms);
    nccl_destroy(c);
    return NULL;
}

#else /* no nccl.h at build time */

mx_collective *mx_collective_nccl_new(int size, const int *devices, mx_error *err) {
    (void)size;
    (void)devices;
    mx_fail(err, "tensor parallelism on CUDA: this build has no NCCL (nccl.h was not found "
            "at configure time)");
    return NULL;
}

#endif
