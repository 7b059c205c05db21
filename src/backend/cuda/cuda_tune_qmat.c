/* qmv-multirow / qmm-tile tuning through the quantized kernels' provider
 * (cuda_tune_qmat.h), and the consumption hooks their dispatch calls. */
#include "backend/cuda/cuda_tune_qmat.h"

#include <cublasLt.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_be.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_tune_bench.h"
#include "base/dtype.h"
#include "base/env.h"

/* ==== The provider: cuda_qmv / cuda_qmm ====
 * The synthetic inputs are what the backend passes for an MLX checkpoint: fp32 x and y, bf16
 * scales and biases, one weight (one qmv segment). */
static int qmat_launch(tune_op op, const cuda_tune_qmat_bufs *b, int v, cudaStream_t st) {
    if (op == TUNE_OP_QMV_MULTIROW) {
        cuda_qmv_args a;
        memset(&a, 0, sizeof a);
        a.w[0] = b->w;
        a.scales[0] = b->scales;
        a.biases[0] = b->biases;
        a.y[0] = b->y;
        a.ldy[0] = b->N;
        a.N[0] = b->N;
        a.n_segs = 1;
        a.x = b->x_f32;
        a.ldx = b->K;
        a.rows = b->rows, a.K = b->K, a.bits = b->bits, a.group = b->group_size;
        a.sb_dtype = CUDA_QSB_BF16;
        a.ws = b->scratch, a.ws_bytes = b->scratch_bytes;
        return cuda_qmv(&a, v, st);
    }
    cuda_qmm_args a;
    memset(&a, 0, sizeof a);
    a.w = b->w, a.scales = b->scales, a.biases = b->biases;
    a.x = b->x_f32, a.ldx = b->K, a.y = b->y, a.ldy = b->N;
    a.rows = b->rows, a.N = b->N, a.K = b->K, a.bits = b->bits, a.group = b->group_size;
    a.sb_dtype = CUDA_QSB_BF16;
    a.lt = b->lt, a.lt_ws = b->lt_ws, a.lt_ws_bytes = b->lt_ws_bytes;
    a.scratch = b->scratch, a.scratch_bytes = b->scratch_bytes;
    return cuda_qmm(&a, v, st);
}

static int qmat_default(tune_op op, const tune_qmat_shape *s) {
    return op == TUNE_OP_QMV_MULTIROW ? cuda_qmv_default_multirow(s->rows, s->n, s->k, s->bits)
                                      : cuda_qmm_default_tile_m(s->rows, s->n, s->k, s->bits);
}

static bool qmat_valid(tune_op op, const tune_qmat_shape *s, int v) {
    (void)s; /* every listed value launches for every shape the kernels take */
    return op == TUNE_OP_QMV_MULTIROW ? cuda_qmv_valid_multirow(v) != 0
                                      : cuda_qmm_valid_tile_m(v) != 0;
}

static size_t qmat_scratch(tune_op op, const tune_qmat_shape *s) {
    if (op == TUNE_OP_QMV_MULTIROW) return cuda_qmv_workspace_bytes(s->k);
    /* the slab grows with tile_m (up to N): the largest value bounds them all */
    static const int k_tile[CUDA_QMM_TILE_COUNT] = CUDA_QMM_TILE_VALUES;
    return cuda_qmm_scratch_bytes(s->rows, s->n, s->k, k_tile[CUDA_QMM_TILE_COUNT - 1]);
}

static const cuda_tune_qmat_provider k_provider = {
    qmat_launch, {qmat_default, qmat_valid}, qmat_scratch, /* y_bf16 */ 0};

const cuda_tune_qmat_provider *cuda_tune_qmat(void) { return &k_provider; }

/* ==== Consumption hooks ==== */
static pthread_once_t g_dev_once = PTHREAD_ONCE_INIT;
static tune_device g_dev;

static void dev_init(void) {
    mx_error err;
    tune_device_cuda(&g_dev, &err); /* on failure the id names no real device: no record */
}

static int knob(tune_op op, int rows, int N, int K, int bits, int group) {
    const cuda_tune_qmat_provider *pv = cuda_tune_qmat();
    const tune_qmat_shape s = {rows, N, K, bits, group};
    if (mx_env()->autotune != MX_AUTOTUNE_OFF) pthread_once(&g_dev_once, dev_init);
    /* off mode reads no file and needs no device id: resolve() never looks at it */
    const tune_device *dev = &g_dev;
    tune_device off_dev;
    if (mx_env()->autotune == MX_AUTOTUNE_OFF) {
        memset(&off_dev, 0, sizeof off_dev);
        off_dev.kind = TUNE_DEV_CUDA;
        dev = &off_dev;
    }
    return op == TUNE_OP_QMV_MULTIROW ? tune_qmv_multirow(&s, dev, &pv->rules, NULL)
                                      : tune_qmm_tile_m(&s, dev, &pv->rules, NULL);
}

int cuda_tune_qmv_multirow(int rows, int N, int K, int bits, int group_size) {
    return knob(TUNE_OP_QMV_MULTIROW, rows, N, K, bits, group_size);
}

int cuda_tune_qmm_tile_m(int rows, int N, int K, int bits, int group_size) {
    return knob(TUNE_OP_QMM_TILE, rows, N, K, bits, group_size);
}

/* ==== Bench ==== */
#define QMAT_REPLICAS_MAX 64

typedef struct qmat_bench {
    const cuda_tune_qmat_provider *pv;
    tune_op op;
    tune_qmat_shape shape;
    cuda_tune_timer tm; /* stream, events, the profiler's clock */
    cuda_tune_qmat_bufs r[QMAT_REPLICAS_MAX]; /* weights per replica; x and y shared */
    float *d_x;
    uint16_t *d_xb;
    void *d_y;
    void *d_scratch, *d_lt_ws;        /* the kernels' scratch; cuBLASLt workspace (qmm) */
    cublasLtHandle_t lt;
    float *h_y, *h_ref;
    uint16_t *h_yb;
    size_t n_y;
    int L, R, def_value;
} qmat_bench;

static void qb_free(qmat_bench *b) {
    cuda_tune_timer_free(&b->tm); /* waits for the stream first */
    for (int i = 0; i < b->R; i++) {
        cudaFree((void *)b->r[i].w);
        cudaFree((void *)b->r[i].scales);
        cudaFree((void *)b->r[i].biases);
    }
    cudaFree(b->d_x), cudaFree(b->d_xb), cudaFree(b->d_y);
    cudaFree(b->d_scratch), cudaFree(b->d_lt_ws);
    /* qmm.cu's plans keep descriptors and an algorithm, not the handle: nothing to release */
    if (b->lt) cublasLtDestroy(b->lt);
    free(b->h_y), free(b->h_ref), free(b->h_yb);
    cudaGetLastError();
    memset(b, 0, sizeof *b);
}

static int qb_run(void *ctx, int value, mx_error *err) {
    qmat_bench *b = ctx;
    const int v = value > 0 ? value : b->def_value; /* 0: the kernels' own default */
    if (cuda_tune_timer_begin(&b->tm, err)) return -1;
    for (int i = 0; i < b->L; i++) {
        const int rc = b->pv->launch(b->op, &b->r[i % b->R], v, b->tm.st);
        if (rc) return mx_fail(err, "CUDA tuner: %s launch with %d: %s", tune_op_name(b->op), v,
                               cudaGetErrorString((cudaError_t)rc));
    }
    return cuda_tune_timer_end(&b->tm, err);
}

static int qb_sync(void *ctx, mx_error *err) {
    return cuda_tune_timer_sync(&((qmat_bench *)ctx)->tm, err);
}

static double qb_clock(void *ctx) { return ((qmat_bench *)ctx)->tm.gpu_s; }

static int qb_check(void *ctx, int value, int is_default, double *rel_err, mx_error *err) {
    (void)value;
    qmat_bench *b = ctx;
    float *dst = is_default ? b->h_ref : b->h_y;
    if (b->pv->y_bf16) {
        if (cuda_tune_ck(cudaMemcpy(b->h_yb, b->d_y, b->n_y * 2, cudaMemcpyDeviceToHost),
                         "y download", err))
            return -1;
        for (size_t i = 0; i < b->n_y; i++) dst[i] = mx_bf16_to_f32(b->h_yb[i]);
    } else if (cuda_tune_ck(cudaMemcpy(dst, b->d_y, b->n_y * 4, cudaMemcpyDeviceToHost),
                            "y download", err)) {
        return -1;
    }
    if (is_default) {
        *rel_err = 0.0;
        return TUNE_CHECK_OK;
    }
    /* fp32 sums in another order: ~1e-6; bf16 output rounding: up to 2^-9 per element */
    const double tol = b->pv->y_bf16 ? 1e-2 : 1e-3;
    *rel_err = cuda_tune_rel_err(b->h_y, b->h_ref, b->n_y);
    return *rel_err <= tol ? TUNE_CHECK_OK : TUNE_CHECK_MISMATCH;
}

static int qb_init(qmat_bench *b, const tune_point *p, const tune_geom *g, mx_error *err) {
    memset(b, 0, sizeof *b);
    b->pv = cuda_tune_qmat();
    b->op = p->op;
    const int rows = p->op == TUNE_OP_QMV_MULTIROW ? p->batch : p->context;
    const int N = g->intermediate, K = g->hidden, bits = g->q_bits, gs = g->q_group;
    b->shape = (tune_qmat_shape){rows, N, K, bits, gs};
    if (K % gs || ((long)K * bits) % 32)
        return mx_fail(err, "weight [%d, %d] with %d-bit groups of %d: K must be a multiple of "
                            "the group and of 32 / bits", N, K, bits, gs);
    b->def_value = b->pv->rules.default_value ? b->pv->rules.default_value(p->op, &b->shape) : 0;
    if (b->def_value <= 0)
        return mx_fail(err, "the %s kernel reports no default for m%d.n%d.k%d", tune_op_name(p->op),
                       rows, N, K);
    const size_t w_words = (size_t)N * K * bits / 32, n_groups = (size_t)N * (K / gs);
    const double w_bytes = w_words * 4.0 + n_groups * 4.0;
    const size_t n_x = (size_t)rows * K;
    b->n_y = (size_t)rows * N;
    size_t free_b = 0, total_b = 0;
    if (cuda_tune_ck(cudaMemGetInfo(&free_b, &total_b), "memory info", err)) return -1;
    const size_t scratch = b->pv->scratch_bytes(p->op, &b->shape);
    const size_t lt_ws = p->op == TUNE_OP_QMM_TILE ? CU_LT_WS_BYTES : 0;
    const double fixed = n_x * 6.0 + b->n_y * 4.0 + (double)scratch + (double)lt_ws;
    if (w_bytes + fixed > free_b / 2.0)
        return mx_fail(err, "m%d.n%d.k%d needs %.2f GiB, more than half of the %.2f GiB free", rows,
                       N, K, (w_bytes + fixed) / 1073741824.0, free_b / 1073741824.0);
    b->R = cuda_tune_replicas(w_bytes, QMAT_REPLICAS_MAX, free_b - fixed);
    if (cuda_tune_timer_init(&b->tm, err)) return -1;
    if (cuda_tune_ck(cudaMalloc((void **)&b->d_x, n_x * 4), "alloc x", err) ||
        cuda_tune_ck(cudaMalloc((void **)&b->d_xb, n_x * 2), "alloc x", err) ||
        cuda_tune_ck(cudaMalloc(&b->d_y, b->n_y * 4), "alloc y", err) ||
        cuda_tune_ck(cudaMalloc(&b->d_scratch, scratch), "alloc kernel scratch", err))
        return -1;
    if (lt_ws) {
        if (cublasLtCreate(&b->lt) != CUBLAS_STATUS_SUCCESS) {
            b->lt = NULL;
            return mx_fail(err, "CUDA tuner: cuBLASLt initialisation failed");
        }
        if (cuda_tune_ck(cudaMalloc(&b->d_lt_ws, lt_ws), "alloc cuBLASLt workspace", err))
            return -1;
    }
    b->h_y = malloc(b->n_y * 4), b->h_ref = malloc(b->n_y * 4);
    b->h_yb = b->pv->y_bf16 ? malloc(b->n_y * 2) : NULL;
    uint32_t *hw = malloc(w_words * 4);
    uint16_t *hs = malloc(n_groups * 2), *hb = malloc(n_groups * 2), *hxb = malloc(n_x * 2);
    float *hx = malloc(n_x * 4);
    int rc = -1;
    if (!b->h_y || !b->h_ref || (b->pv->y_bf16 && !b->h_yb) || !hw || !hs || !hb || !hxb || !hx) {
        mx_fail(err, "CUDA tuner: out of host memory");
        goto out;
    }
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < w_words; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        hw[i] = (uint32_t)(s >> 16);
    }
    /* deq values ~ U(-1, 1) / sqrt(K) scale: the sums stay O(1) */
    const float levels = (float)((1 << bits) - 1), amp = 2.0f / sqrtf((float)K);
    for (size_t i = 0; i < n_groups; i++) {
        hs[i] = mx_f32_to_bf16(amp / levels);
        hb[i] = mx_f32_to_bf16(-amp / 2);
    }
    cuda_tune_fill_f32(hx, n_x, 1.0f, 0x2545f4914f6cdd1dull);
    for (size_t i = 0; i < n_x; i++) hxb[i] = mx_f32_to_bf16(hx[i]);
    if (cuda_tune_ck(cudaMemcpy(b->d_x, hx, n_x * 4, cudaMemcpyHostToDevice), "x upload", err) ||
        cuda_tune_ck(cudaMemcpy(b->d_xb, hxb, n_x * 2, cudaMemcpyHostToDevice), "x upload", err))
        goto out;
    for (int r = 0; r < b->R; r++) {
        void *w = NULL, *sc = NULL, *bi = NULL;
        cuda_tune_qmat_bufs *q = &b->r[r];
        const cudaError_t e1 = cudaMalloc(&w, w_words * 4), e2 = cudaMalloc(&sc, n_groups * 2),
                          e3 = cudaMalloc(&bi, n_groups * 2);
        q->w = w, q->scales = sc, q->biases = bi; /* freed by qb_free even on failure */
        if (cuda_tune_ck(e1 != cudaSuccess   ? e1
                         : e2 != cudaSuccess ? e2
                                             : e3,
                         "alloc weights", err) ||
            cuda_tune_ck(cudaMemcpy(w, hw, w_words * 4, cudaMemcpyHostToDevice), "weight upload",
                         err) ||
            cuda_tune_ck(cudaMemcpy(sc, hs, n_groups * 2, cudaMemcpyHostToDevice), "scale upload",
                         err) ||
            cuda_tune_ck(cudaMemcpy(bi, hb, n_groups * 2, cudaMemcpyHostToDevice), "bias upload",
                         err)) {
            b->R = r + 1;
            goto out;
        }
        q->x_f32 = b->d_x, q->x_bf16 = b->d_xb, q->y = b->d_y;
        q->rows = rows, q->N = N, q->K = K, q->bits = bits, q->group_size = gs;
        q->scratch = b->d_scratch, q->scratch_bytes = scratch;
        q->lt = b->lt, q->lt_ws = b->d_lt_ws, q->lt_ws_bytes = lt_ws;
    }
    const tune_candidate def = {0, b, qb_run, qb_sync, NULL}; /* 0: the kernels' default */
    if (cuda_tune_calibrate(&def, &b->tm, b->R, &b->L, err)) goto out;
    rc = 0;
out:
    free(hw), free(hs), free(hb), free(hxb), free(hx);
    return rc;
}

int cuda_tune_qmat_point(const tune_point *p, const tune_geom *g, const tune_profile_opts *o,
                         tune_profile_result *res, mx_error *err) {
    qmat_bench b;
    if (qb_init(&b, p, g, err)) {
        qb_free(&b);
        return mx_wrap(err, "%s %s", tune_op_name(p->op), p->bucket);
    }
    /* candidates the kernel can launch for this shape; 0 ("auto", the default) always, and
     * not its explicit twin (the value the default resolves to: the same launch again) */
    tune_candidate c[TUNE_MAX_CANDIDATES];
    int n = 0, def = -1;
    for (int i = 0; i < p->n_cand; i++) {
        const int v = p->cand[i];
        if (v > 0 && b.pv->rules.valid && !b.pv->rules.valid(p->op, &b.shape, v)) continue;
        if (v > 0 && v == b.def_value) continue;
        if (v == p->default_value) def = n;
        c[n++] = (tune_candidate){v, &b, qb_run, qb_sync, qb_check};
    }
    if (def < 0) {
        qb_free(&b);
        return mx_fail(err, "default %d missing from the candidates", p->default_value);
    }
    tune_profile_opts oo = *o;
    oo.clock = qb_clock;
    oo.clock_ctx = &b;
    const int rc = tune_profile(c, n, def, &oo, res, err);
    const int L = b.L;
    qb_free(&b);
    if (rc) return mx_wrap(err, "%s %s", tune_op_name(p->op), p->bucket);
    cuda_tune_per_launch(res, L);
    return 0;
}
