/* CUDA tuner: device check, dispatch per op and the helpers the op benches share. */
#include "backend/cuda/cuda_tune.h"

#include <math.h>
#include <string.h>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_tune_bench.h"
#include "base/dtype.h"

_Static_assert(TUNE_CUDA_MAX_SPLITS == CUDA_ATTN_MAX_SPLITS, "tune_ops.h split limit");
_Static_assert(TUNE_CUDA_DET_SPLITS == CUDA_ATTN_DET_SPLITS, "tune_ops.h deterministic splits");

/* ==== Availability ==== */
bool cuda_tune_op_available(tune_op op, const char **why) {
    if (op == TUNE_OP_PAGED_DECODE_SPLITS || op == TUNE_OP_QMV_MULTIROW || op == TUNE_OP_QMM_TILE)
        return true;
    if (why) *why = "no CUDA kernel has this launch parameter";
    return false;
}

/* ==== Dispatch ==== */
int cuda_tune_run_point(const tune_point *p, const tune_device *dev, const tune_geom *g,
                        const tune_profile_opts *o, tune_profile_result *res, mx_error *err) {
    tune_device here;
    if (tune_device_cuda(&here, err)) return -1;
    if (strcmp(here.id, dev->id))
        return mx_fail(err, "asked to tune for %s but device 0 is %s", dev->id, here.id);
    const char *why = NULL;
    if (!cuda_tune_op_available(p->op, &why))
        return mx_fail(err, "%s: %s", tune_op_name(p->op), why);
    if (p->op == TUNE_OP_PAGED_DECODE_SPLITS) return cuda_tune_attn_point(p, g, o, res, err);
    return cuda_tune_qmat_point(p, g, o, res, err);
}

/* ==== Helpers ==== */
int cuda_tune_batch_launches(double one_s) {
    if (!(one_s > 0.0)) return 64;
    const double l = ceil(200e-6 / one_s);
    return l < 1.0 ? 1 : l > 64.0 ? 64 : (int)l;
}

int cuda_tune_replicas(double bytes, int max_r, double free_bytes) {
    if (!(bytes > 0.0) || max_r < 1) return 1;
    int r = (int)ceil(256.0 * 1048576.0 / bytes);
    if (r > max_r) r = max_r;
    while (r > 1 && r * bytes > free_bytes / 2) r--;
    return r < 1 ? 1 : r;
}

void cuda_tune_per_launch(tune_profile_result *res, int launches) {
    const double k = launches > 0 ? 1.0 / launches : 1.0;
    for (int i = 0; i < res->n; i++) {
        res->c[i].cost_s *= k;
        res->c[i].stat.median *= k;
        res->c[i].stat.spread *= k;
    }
}

double cuda_tune_rel_err(const float *out, const float *ref, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)out[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num); /* NaN stays NaN: never within tolerance */
}

static float rnd(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (float)((*s >> 40) * (1.0 / 8388608.0)) - 1.0f; /* [-1, 1) */
}

void cuda_tune_fill_bf16(uint16_t *dst, size_t n, float amp, uint64_t seed) {
    uint64_t s = seed | 1;
    for (size_t i = 0; i < n; i++) dst[i] = mx_f32_to_bf16(amp * rnd(&s));
}

void cuda_tune_fill_f32(float *dst, size_t n, float amp, uint64_t seed) {
    uint64_t s = seed | 1;
    for (size_t i = 0; i < n; i++) dst[i] = amp * rnd(&s);
}

/* ==== Timed launch batches (cuda_tune_bench.h) ==== */
int cuda_tune_ck(cudaError_t e, const char *what, mx_error *err) {
    if (e == cudaSuccess) return 0;
    cudaGetLastError();
    return mx_fail(err, "CUDA tuner: %s: %s", what, cudaGetErrorString(e));
}

int cuda_tune_timer_init(cuda_tune_timer *t, mx_error *err) {
    if (cuda_tune_ck(cudaStreamCreateWithFlags(&t->st, cudaStreamNonBlocking), "stream", err))
        return -1;
    t->st_ok = true;
    if (cuda_tune_ck(cudaEventCreate(&t->ev0), "event", err)) return -1;
    t->ev0_ok = true;
    if (cuda_tune_ck(cudaEventCreate(&t->ev1), "event", err)) return -1;
    t->ev1_ok = true;
    return 0;
}

void cuda_tune_timer_free(cuda_tune_timer *t) {
    if (t->st_ok) cudaStreamSynchronize(t->st);
    if (t->ev0_ok) cudaEventDestroy(t->ev0);
    if (t->ev1_ok) cudaEventDestroy(t->ev1);
    if (t->st_ok) cudaStreamDestroy(t->st);
    memset(t, 0, sizeof *t);
}

int cuda_tune_timer_begin(cuda_tune_timer *t, mx_error *err) {
    return cuda_tune_ck(cudaEventRecord(t->ev0, t->st), "event record", err);
}

int cuda_tune_timer_end(cuda_tune_timer *t, mx_error *err) {
    return cuda_tune_ck(cudaEventRecord(t->ev1, t->st), "event record", err);
}

int cuda_tune_timer_sync(cuda_tune_timer *t, mx_error *err) {
    if (cuda_tune_ck(cudaEventSynchronize(t->ev1), "synchronize", err)) return -1;
    float ms = 0.f;
    if (cuda_tune_ck(cudaEventElapsedTime(&ms, t->ev0, t->ev1), "event time", err)) return -1;
    t->gpu_s += ms * 1e-3;
    return 0;
}

int cuda_tune_calibrate(const tune_candidate *c, cuda_tune_timer *t, int R, int *L,
                        mx_error *err) {
    *L = 1;
    for (int k = 0; k < 2; k++)
        if (c->run(c->ctx, c->value, err) || c->sync(c->ctx, err)) return -1;
    const double t0 = t->gpu_s;
    if (c->run(c->ctx, c->value, err) || c->sync(c->ctx, err)) return -1;
    *L = cuda_tune_batch_launches(t->gpu_s - t0);
    if (*L < R) *L = R;
    return 0;
}
