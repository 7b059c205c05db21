/* CPU collective: the ranks are threads of one process sharing memory. Each op publishes the
 * rank's pointers, waits on a barrier, reads the other ranks' buffers, and waits again before
 * anyone may overwrite them. A rank never writes another rank's buffer: the sum goes through
 * a shared result buffer, so reading and writing never race. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/collective.h"

typedef struct cpu_coll {
    pthread_barrier_t bar;
    int size;
    float **ptr;        /* [size] published buffers */
    int64_t *col0, *w;  /* [size] all_gather column blocks */
    int64_t *numel;     /* [size] all_reduce sizes, checked equal */
    float *sum;         /* [sum_cap] shared result of all_reduce */
    int64_t sum_cap;
    int bad;            /* set by rank 0 when the ranks disagree on a shape */
} cpu_coll;

static int check_f32(const mx_tensor *t, const char *op, mx_error *err) {
    if (t->device != MX_DEV_CPU || t->dtype != MX_F32)
        return mx_fail(err, "collective %s: needs a CPU f32 tensor (got %s on %s)", op,
                       mx_dtype_name(t->dtype), backend_device_name(t->device));
    return 0;
}

static int cpu_all_reduce(mx_collective *c, int rank, mx_tensor *x, mx_error *err) {
    cpu_coll *p = c->impl;
    const int64_t n = mx_tensor_numel(x);
    /* every rank reaches every barrier, even after a bad argument, so none is left waiting */
    const int ok = check_f32(x, "all_reduce_sum", err) == 0;
    p->ptr[rank] = ok ? x->data : NULL;
    p->numel[rank] = ok ? n : -1;
    pthread_barrier_wait(&p->bar);
    if (rank == 0) {
        p->bad = 0;
        for (int r = 0; r < p->size; r++) p->bad |= p->numel[r] != n || !p->ptr[r];
        if (!p->bad && n > p->sum_cap) {
            free(p->sum);
            p->sum = malloc((size_t)n * sizeof(float));
            p->sum_cap = p->sum ? n : 0;
            p->bad = !p->sum;
        }
    }
    pthread_barrier_wait(&p->bar);
    const int bad = p->bad;
    if (!bad) {
        /* rank r sums its contiguous chunk of elements, ranks added in order 0..N-1 */
        const int64_t chunk = (n + p->size - 1) / p->size, e0 = rank * chunk;
        const int64_t e1 = e0 + chunk < n ? e0 + chunk : n;
        for (int64_t i = e0; i < e1; i++) {
            float s = p->ptr[0][i];
            for (int r = 1; r < p->size; r++) s += p->ptr[r][i];
            p->sum[i] = s;
        }
    }
    pthread_barrier_wait(&p->bar);
    if (!bad) memcpy(x->data, p->sum, (size_t)n * sizeof(float));
    pthread_barrier_wait(&p->bar); /* p->sum is reused by the next call */
    if (bad)
        return ok ? mx_fail(err, "collective all_reduce_sum: ranks disagree on the size (rank %d: "
                            "%lld elements) or out of memory", rank, (long long)n)
                  : -1;
    return 0;
}

static int cpu_all_gather(mx_collective *c, int rank, mx_tensor *out, const mx_tensor *in,
                          int64_t col0, mx_error *err) {
    cpu_coll *p = c->impl;
    const int ok = check_f32(out, "all_gather_cols", err) == 0 &&
                   check_f32(in, "all_gather_cols", err) == 0 && in->ndim == 2 && out->ndim == 2 &&
                   in->shape[0] == out->shape[0] && col0 >= 0 &&
                   col0 + in->shape[1] <= out->shape[1];
    p->ptr[rank] = ok ? in->data : NULL;
    p->col0[rank] = col0;
    p->w[rank] = ok ? in->shape[1] : -1;
    p->numel[rank] = ok ? out->shape[0] : -1;
    pthread_barrier_wait(&p->bar);
    int bad = 0;
    for (int r = 0; r < p->size; r++) bad |= !p->ptr[r] || p->numel[r] != p->numel[0];
    if (!bad) {
        const int64_t rows = out->shape[0], W = out->shape[1];
        float *o = out->data;
        for (int r = 0; r < p->size; r++)
            for (int64_t i = 0; i < rows; i++)
                memcpy(o + i * W + p->col0[r], p->ptr[r] + i * p->w[r], (size_t)p->w[r] * sizeof(float));
    }
    pthread_barrier_wait(&p->bar); /* the inputs stay untouched until everyone has copied */
    if (bad)
        return ok ? mx_fail(err, "collective all_gather_cols: ranks disagree on the shapes (rank "
                            "%d)", rank)
                  : mx_fail(err, "collective all_gather_cols: rank %d: expected 2-D f32 CPU "
                            "tensors with in's columns inside out", rank);
    return 0;
}

/* p and its arrays (the barrier is the caller's) */
static void cpu_coll_free(cpu_coll *p) {
    free(p->ptr);
    free(p->col0);
    free(p->w);
    free(p->numel);
    free(p->sum);
    free(p);
}

static void cpu_destroy(mx_collective *c) {
    if (!c) return;
    cpu_coll *p = c->impl;
    if (p) {
        pthread_barrier_destroy(&p->bar);
        cpu_coll_free(p);
    }
    free(c);
}

mx_collective *mx_collective_cpu_new(int size, mx_error *err) {
    if (size < 1) {
        mx_fail(err, "collective: size %d, expected >= 1", size);
        return NULL;
    }
    mx_collective *c = calloc(1, sizeof *c);
    cpu_coll *p = calloc(1, sizeof *p);
    if (!c || !p) {
        free(c);
        free(p);
        mx_fail(err, "out of memory");
        return NULL;
    }
    c->impl = p;
    p->size = size;
    p->ptr = calloc((size_t)size, sizeof(float *));
    p->col0 = calloc((size_t)size, sizeof(int64_t));
    p->w = calloc((size_t)size, sizeof(int64_t));
    p->numel = calloc((size_t)size, sizeof(int64_t));
    if (!p->ptr || !p->col0 || !p->w || !p->numel ||
        pthread_barrier_init(&p->bar, NULL, (unsigned)size)) {
        cpu_coll_free(p);
        free(c);
        mx_fail(err, "collective: cannot create a barrier for %d threads", size);
        return NULL;
    }
    c->name = "cpu-threads";
    c->size = size;
    c->all_reduce_sum = cpu_all_reduce;
    c->all_gather_cols = cpu_all_gather;
    c->destroy = cpu_destroy;
    return c;
}
