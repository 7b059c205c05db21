/* CUDA quantized kernels vs the CPU reference (src/quant) on fresh random inputs.
 *
 * Weights: random fp32 quantized by mlx_quantize (bit-exact MLX) into packed codes + scales /
 * biases in bf16, f16 or f32; the same host arrays go to the CPU ops and (upload_raw) to the
 * device. Every CUDA output buffer is NaN-poisoned first.
 *
 * Tolerance of a matmul element (rigorous, per element): the CPU multiplies x by the
 * dequantized value rounded to the scales dtype; qmv uses s*q + b unrounded (bias hoisted),
 * qmm rounds the weight and x to bf16. So |cuda - cpu| <= eps * sum_k |w_k x_k| with eps =
 * 2^-8 (bf16 scales), 2^-10 (f16), 2^-12 (f32) for qmv and 2^-7 / 2^-8 / 2^-8 for qmm,
 * where the fp32 reduction-order error is far below. The reported value is the largest
 * |cuda - cpu| / (eps * sum|w x| + 1e-6) over all elements: a wrong code, group, row or
 * missing bias term gives errors of the order of sum|w x| itself (ratio >> 1). The embedding
 * gather is bit-exact (tolerance 0). */
#include "gpu_test.h"

#include "backend/cuda/cuda_be.h"
#include "backend/cuda/cuda_elem.h"
#include "backend/cuda/cuda_ops.h"
#include "model/model_spec.h"
#include "quant/convert.h"
#include "quant/quant.h"

/* ==== A random quantized matrix on both sides ==== */
typedef struct qmat {
    int N, K, bits, group;
    mx_dtype sbt;
    uint32_t *wq;
    void *s, *b;
    float *deq;          /* [N, K] dequantized (CPU reference values) */
    mx_qweight host, dev;
    mx_qweight tl;       /* through the load path's upload_q: tl.tiled where it repacks */
} qmat;

static size_t sb_size(mx_dtype t) { return t == MX_F32 ? 4 : 2; }

static void qmat_make(qmat *m, int N, int K, int bits, int group, mx_dtype sbt) {
    memset(m, 0, sizeof *m);
    m->N = N, m->K = K, m->bits = bits, m->group = group, m->sbt = sbt;
    float *w = malloc((size_t)N * K * 4);
    gt_fill(w, (size_t)N * K, 1.0f / sqrtf((float)K));
    const int64_t G = K / group, nw = (int64_t)K * bits / 32;
    m->wq = malloc((size_t)N * nw * 4);
    m->s = malloc((size_t)N * G * sb_size(sbt));
    m->b = malloc((size_t)N * G * sb_size(sbt));
    m->deq = malloc((size_t)N * K * 4);
    mx_error err;
    /* the source in the scales dtype, as a checkpoint would hold it */
    void *src = w;
    if (sbt != MX_F32) {
        src = malloc((size_t)N * K * 2);
        for (size_t i = 0; i < (size_t)N * K; i++)
            ((uint16_t *)src)[i] = sbt == MX_BF16 ? mx_f32_to_bf16(w[i]) : mx_f32_to_f16(w[i]);
    }
    if (mlx_quantize(m->wq, m->s, m->b, src, sbt, N, K, bits, group, &err)) {
        fprintf(stderr, "quantize: %s\n", err.msg);
        exit(2);
    }
    if (src != w) free(src);
    if (mlx_dequantize(m->deq, MX_F32, m->wq, m->s, m->b, sbt, N, K, bits, group, &err)) {
        fprintf(stderr, "dequantize: %s\n", err.msg);
        exit(2);
    }
    free(w);
    m->host.w = mx_tensor_2d(m->wq, MX_U32, N, nw, MX_DEV_CPU);
    m->host.scales = mx_tensor_2d(m->s, sbt, N, G, MX_DEV_CPU);
    m->host.biases = mx_tensor_2d(m->b, sbt, N, G, MX_DEV_CPU);
    m->host.bits = bits, m->host.group_size = group;
    m->dev = m->host;
    if (g_gpu->upload_raw(&m->dev.w, &m->host.w, &err) ||
        g_gpu->upload_raw(&m->dev.scales, &m->host.scales, &err) ||
        g_gpu->upload_raw(&m->dev.biases, &m->host.biases, &err)) {
        fprintf(stderr, "upload_raw: %s\n", err.msg);
        exit(2);
    }
    m->tl.bits = bits, m->tl.group_size = group;
    if (g_gpu->upload_q(&m->tl, &m->host.w, &m->host.scales, &m->host.biases, &err) ||
        g_gpu->finish_load(&err)) {
        fprintf(stderr, "upload_q: %s\n", err.msg);
        exit(2);
    }
}

static void qmat_free(qmat *m) {
    gt_dev_free(&m->dev.w), gt_dev_free(&m->dev.scales), gt_dev_free(&m->dev.biases);
    gt_dev_free(&m->tl.w), gt_dev_free(&m->tl.scales), gt_dev_free(&m->tl.biases);
    free(m->wq), free(m->s), free(m->b), free(m->deq);
}

static int sb_code(mx_dtype t) { return t == MX_BF16 ? CUDA_QSB_BF16 : t == MX_F16 ? CUDA_QSB_F16 : CUDA_QSB_F32; }
static const char *sb_name(mx_dtype t) { return t == MX_BF16 ? "bf16" : t == MX_F16 ? "f16" : "f32"; }

static double eps_for(mx_dtype t, bool qmm) {
    if (qmm) return t == MX_BF16 ? 1.0 / 128 : 1.0 / 256;
    return t == MX_BF16 ? 1.0 / 256 : t == MX_F16 ? 1.0 / 1024 : 1.0 / 4096;
}

/* The error bound of output n of x row xr: eps * sum|w x|, plus with half (x rounded to
 * int8 per weight group, as qmv_i8 does: half[k] = half a step of k's group, absmax / 254)
 * sum_k |w_k| half[k], that rounding's worst case. */
static void x_half_steps(const float *xr, int K, int G, double *half) {
    for (int k0 = 0; k0 < K; k0 += G) {
        double a = 0;
        for (int k = k0; k < k0 + G && k < K; k++) a = fmax(a, fabs(xr[k]));
        for (int k = k0; k < k0 + G && k < K; k++) half[k] = a / 254;
    }
}
static double err_bound(const qmat *m, int n, const float *xr, const double *half, double eps) {
    const float *w = m->deq + (size_t)n * m->K;
    double s = 0, xs = 0;
    for (int k = 0; k < m->K; k++) {
        s += fabs((double)w[k] * xr[k]);
        if (half) xs += fabs(w[k]) * half[k];
    }
    return eps * s + xs;
}

/* Largest |out - ref| / (err_bound + 1e-6), i8: x rounded to int8 per group; non-finite
 * outputs counted in *bad. */
static double bound_ratio(const float *out, long ldo, const float *ref, const float *x, int rows,
                          const qmat *m, int n_off, double eps, bool i8, long *bad) {
    double worst = 0, *half = i8 ? malloc((size_t)m->K * sizeof *half) : NULL;
    *bad = 0;
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * m->K;
        if (half) x_half_steps(xr, m->K, m->group, half);
        for (int n = 0; n < m->N; n++) {
            const float o = out[(size_t)r * ldo + n_off + n];
            if (!isfinite(o)) {
                (*bad)++;
                continue;
            }
            const double q = fabs((double)o - ref[(size_t)r * m->N + n]) /
                             (err_bound(m, n, xr, half, eps) + 1e-6);
            if (q > worst) worst = q;
        }
    }
    free(half);
    return worst;
}

/* CPU reference y [rows, N] = x @ W^T (+ bias). */
static float *cpu_ref(const float *x, int rows, const qmat *m, const float *bias_f, uint16_t *bias_b) {
    float *ref = malloc((size_t)rows * m->N * 4);
    mx_tensor hx = mx_tensor_2d((void *)x, MX_F32, rows, m->K, MX_DEV_CPU);
    mx_tensor ho = mx_tensor_2d(ref, MX_F32, rows, m->N, MX_DEV_CPU);
    mx_tensor hb = bias_b ? mx_tensor_1d(bias_b, MX_BF16, m->N, MX_DEV_CPU) : (mx_tensor){0};
    (void)bias_f;
    g_cpu->matmul_q(&ho, &hx, &m->host, &hb);
    return ref;
}

/* ==== matmul_q through the backend (dispatch, deferral, bias) ==== */
static void test_matmul_q(int rows, int N, int K, int bits, int group, mx_dtype sbt, bool bias) {
    qmat m;
    qmat_make(&m, N, K, bits, group, sbt);
    float *x = malloc((size_t)rows * K * 4), *bf = malloc((size_t)N * 4);
    gt_fill(x, (size_t)rows * K, 1.0f);
    gt_fill(bf, (size_t)N, 0.5f);
    uint16_t *bb = bias ? gt_bf16(bf, (size_t)N) : NULL;
    float *ref = cpu_ref(x, rows, &m, bf, bb);
    const int64_t sx[2] = {rows, K}, so[2] = {rows, N};
    mx_tensor dx = gt_dev_f32(x, 2, sx), db = {0};
    if (bb) db = gt_dev_weight(bb, 1, (const int64_t[]){N});
    /* the MLX layout, then the tiled one where the load path repacked (the kernels that read
     * it: qmv_i8, else qmv_bulk at any row count, else qmm) */
    for (int lay = 0; lay < 1 + m.tl.tiled; lay++) {
        const bool tl = lay == 1;
        mx_tensor dout = gt_dev_poison(2, so);
        g_gpu->matmul_q(&dout, &dx, tl ? &m.tl : &m.dev, &db);
        float *o = malloc((size_t)rows * N * 4);
        gt_to_host(o, &dout);
        long bad = 0;
        /* the dispatch of cuda_qmatmul.c (x from the allocator: 16-byte aligned) */
        const bool tc = !tl && g_cu.qmv_tc && (bits == 4 || bits == 8) &&
                        rows <= CUDA_QMV_TC_MAX_ROWS;
        const bool i8 = !tc && (bits == 4 || bits == 8) && (group == 64 || group == 128) &&
                        rows >= 1 && rows <= (bits == 8 ? g_cu.qmv_i8_q8 : g_cu.qmv_i8) &&
                        sbt != MX_F32;
        const bool mma = !tl && !tc && !i8 && bits == 4 && (group == 64 || group == 128) &&
                         rows >= 1 && rows <= g_cu.qmv_mma && sbt != MX_F32 && N <= 4096;
        const bool bulk = (tl || !g_cu.qmv_tc) && !i8 && !mma && g_cu.qmv_bulk &&
                          (bits == 4 || bits == 8) && sbt == MX_BF16 && rows >= (tl ? 1 : 2) &&
                          rows <= CUDA_QMV_TC_MAX_ROWS;
        const bool qmm = !tc && !i8 && !mma && !bulk && (tl || rows > CUDA_QMV_MAX_ROWS);
        /* qmm and the streaming qmv round x to bf16, qmv_i8 to int8 per group */
        const double q = bound_ratio(o, N, ref, x, rows, &m, 0,
                                     eps_for(sbt, qmm || bulk), i8, &bad);
        char what[160];
        snprintf(what, sizeof what, "matmul_q %s %d rows [%d x %d] %d-bit g%d %s%s%s",
                 qmm    ? "qmm"
                 : tc   ? "qmv-tc"
                 : i8   ? "qmv-i8"
                 : mma  ? "qmv-mma"
                 : bulk ? "qmv-bulk"
                        : "qmv",
                 rows, N, K, bits, group, sb_name(sbt), bias ? " +bias" : "",
                 tl ? ", tiled" : "");
        gt_report(what, q, 1.0, bad);
        gt_dev_free(&dout);
        free(o);
    }
    gt_dev_free(&dx), gt_dev_free(&db);
    free(x), free(bf), free(bb), free(ref);
    qmat_free(&m);
}

/* Q/K/V-like: three matmul_q on one x are held and launched as one multi-segment qmv. */
static void test_qkv(int rows, int H, int NQ, int NKV, int bits) {
    qmat m[3];
    const int Ns[3] = {NQ, NKV, NKV};
    float *x = malloc((size_t)rows * H * 4);
    gt_fill(x, (size_t)rows * H, 1.0f);
    const int64_t sx[2] = {rows, H};
    mx_tensor dx = gt_dev_f32(x, 2, sx), dout[3], none = {0};
    float *ref[3];
    for (int i = 0; i < 3; i++) {
        qmat_make(&m[i], Ns[i], H, bits, 64, MX_BF16);
        ref[i] = cpu_ref(x, rows, &m[i], NULL, NULL);
        dout[i] = gt_dev_poison(2, (const int64_t[]){rows, Ns[i]});
    }
    for (int i = 0; i < 3; i++) g_gpu->matmul_q(&dout[i], &dx, &m[i].dev, &none);
    const bool tc = g_cu.qmv_tc && (bits == 4 || bits == 8) && rows <= CUDA_QMV_TC_MAX_ROWS;
    const bool qmm = !tc && rows > CUDA_QMV_MAX_ROWS; /* then three separate qmm */
    for (int i = 0; i < 3; i++) {
        float *o = malloc((size_t)rows * Ns[i] * 4);
        gt_to_host(o, &dout[i]);
        long bad;
        const double q =
            bound_ratio(o, Ns[i], ref[i], x, rows, &m[i], 0, eps_for(MX_BF16, qmm), false, &bad);
        char what[160];
        snprintf(what, sizeof what, "%s 3 segments, seg %d: %d rows [%d x %d] %d-bit",
                 qmm ? "qmm" : tc ? "qmv-tc" : "qmv", i, rows, Ns[i], H, bits);
        gt_report(what, q, 1.0, bad);
        free(o), free(ref[i]), gt_dev_free(&dout[i]), qmat_free(&m[i]);
    }
    gt_dev_free(&dx);
    free(x);
}

/* GLU then matmul_q on its output (down projection): with qmv_i8 taking the launch and
 * MLXCEL_QMV_I8_GLU on, its prep kernel computes the GLU (no GLU launch); the result and the
 * GLU output must match the CPU either way (fused, or plain GLU + qmv when off / 8-bit). */
static void test_glu_qmv(int rows, int N, int K, int bits, int act, bool fuse) {
    qmat m;
    qmat_make(&m, N, K, bits, 64, MX_BF16);
    const size_t n = (size_t)rows * K;
    float *g = malloc(n * 4), *u = malloc(n * 4), *h = malloc(n * 4), *o = malloc(n * 4);
    gt_fill(g, n, 3.0f);
    gt_fill(u, n, 1.0f);
    mx_tensor hg = mx_tensor_2d(g, MX_F32, rows, K, MX_DEV_CPU);
    mx_tensor hu = mx_tensor_2d(u, MX_F32, rows, K, MX_DEV_CPU);
    mx_tensor hh = mx_tensor_2d(h, MX_F32, rows, K, MX_DEV_CPU);
    g_cpu->glu(&hh, &hg, &hu, act);
    float *ref = cpu_ref(h, rows, &m, NULL, NULL);
    const int64_t sx[2] = {rows, K};
    mx_tensor dg = gt_dev_f32(g, 2, sx), du = gt_dev_f32(u, 2, sx), dh = gt_dev_poison(2, sx);
    mx_tensor dy = gt_dev_poison(2, (const int64_t[]){rows, N}), none = {0};
    const bool was = g_cu.qmv_i8_glu;
    g_cu.qmv_i8_glu = fuse;
    g_gpu->glu(&dh, &dg, &du, act);
    g_gpu->matmul_q(&dy, &dh, &m.dev, &none);
    float *y = malloc((size_t)rows * N * 4);
    gt_to_host(y, &dy);
    gt_to_host(o, &dh);
    g_cu.qmv_i8_glu = was;
    const bool i8 = rows <= (bits == 8 ? g_cu.qmv_i8_q8 : g_cu.qmv_i8);
    long bad;
    const double q = bound_ratio(y, N, ref, h, rows, &m, 0, eps_for(MX_BF16, false), i8, &bad);
    double gw = 0, hmax = 0; /* the GLU output itself, relative to its largest value (the
                              * device's expf / erff differ from the CPU's in the last bits) */
    for (size_t i = 0; i < n; i++) hmax = fmax(hmax, fabs(h[i]));
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)o[i] - h[i]) / hmax;
        gw = isfinite(o[i]) ? (d > gw ? d : gw) : INFINITY;
    }
    char what[160];
    snprintf(what, sizeof what, "glu (act %d) + matmul_q %d rows [%d x %d] %d-bit, %s", act, rows,
             N, K, bits, fuse && i8 ? "GLU in the qmv_i8 prep" : "GLU launched");
    gt_report(what, q, 1.0, bad);
    snprintf(what, sizeof what, "  ... its GLU output [%d x %d] (relative to max)", rows, K);
    gt_report(what, gw, 1e-5, 0);
    free(g), free(u), free(h), free(o), free(y), free(ref);
    gt_dev_free(&dg), gt_dev_free(&du), gt_dev_free(&dh), gt_dev_free(&dy), qmat_free(&m);
}

/* (x += y;) h = rms_norm(x) then Q and K matmul_q on h (one joined qmv group): with qmv_i8
 * taking it and MLXCEL_QMV_I8_NORM on, its prep kernel computes the norm (no norm launch).
 * Q, K, the updated residual x and h itself must match the CPU either way. */
static void test_norm_qmv(int rows, int K, int bits, int group, bool residual, bool fuse) {
    qmat m[2];
    const int Ns[2] = {192, 64};
    const size_t n = (size_t)rows * K;
    float *x = malloc(n * 4), *y = malloc(n * 4), *h = malloc(n * 4), *o = malloc(n * 4);
    float *wf = malloc((size_t)K * 4);
    gt_fill(x, n, 2.0f);
    gt_fill(y, n, 1.0f);
    gt_fill(wf, (size_t)K, 1.0f);
    uint16_t *wb = gt_bf16(wf, (size_t)K);
    const int64_t sx[2] = {rows, K}, sk[1] = {K};
    mx_tensor dx = gt_dev_f32(x, 2, sx), dy = gt_dev_f32(y, 2, sx), dh = gt_dev_poison(2, sx);
    mx_tensor dw = gt_dev_weight(wb, 1, sk), none = {0}, dq[2];
    mx_tensor hx = mx_tensor_2d(x, MX_F32, rows, K, MX_DEV_CPU);
    mx_tensor hy = mx_tensor_2d(y, MX_F32, rows, K, MX_DEV_CPU);
    mx_tensor hh = mx_tensor_2d(h, MX_F32, rows, K, MX_DEV_CPU);
    mx_tensor hw = mx_tensor_1d(wb, MX_BF16, K, MX_DEV_CPU);
    if (residual) g_cpu->add(&hx, &hy);
    g_cpu->rms_norm(&hh, &hx, &hw, 1e-5f, 0.f);
    const bool was = g_cu.qmv_i8_norm;
    g_cu.qmv_i8_norm = fuse;
    if (residual) g_gpu->add(&dx, &dy);
    g_gpu->rms_norm(&dh, &dx, &dw, 1e-5f, 0.f);
    float *ref[2];
    for (int i = 0; i < 2; i++) {
        qmat_make(&m[i], Ns[i], K, bits, group, MX_BF16);
        ref[i] = cpu_ref(h, rows, &m[i], NULL, NULL);
        dq[i] = gt_dev_poison(2, (const int64_t[]){rows, Ns[i]});
        g_gpu->matmul_q(&dq[i], &dh, &m[i].dev, &none);
    }
    const bool i8 = rows <= (bits == 8 ? g_cu.qmv_i8_q8 : g_cu.qmv_i8);
    char what[160];
    for (int i = 0; i < 2; i++) {
        float *q = malloc((size_t)rows * Ns[i] * 4);
        gt_to_host(q, &dq[i]);
        long bad;
        const double b = bound_ratio(q, Ns[i], ref[i], h, rows, &m[i], 0,
                                     eps_for(MX_BF16, false), i8, &bad);
        snprintf(what, sizeof what, "%snorm + matmul_q seg %d: %d rows [%d x %d] %d-bit g%d, %s",
                 residual ? "add + " : "", i, rows, Ns[i], K, bits, group,
                 fuse && i8 ? "norm in the qmv_i8 prep" : "norm launched");
        gt_report(what, b, 1.0, bad);
        free(q), free(ref[i]), gt_dev_free(&dq[i]), qmat_free(&m[i]);
    }
    g_cu.qmv_i8_norm = was;
    /* the norm's outputs themselves: h and the residual sum, relative to their largest */
    for (int pass = 0; pass < 2; pass++) {
        const float *want = pass ? x : h;
        gt_to_host(o, pass ? &dx : &dh);
        double err = 0, mx = 0;
        for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(want[i]));
        for (size_t i = 0; i < n; i++)
            err = isfinite(o[i]) ? fmax(err, fabs((double)o[i] - want[i]) / mx) : INFINITY;
        snprintf(what, sizeof what, "  ... its %s [%d x %d] (relative to max)",
                 pass ? "residual x" : "norm output", rows, K);
        gt_report(what, err, 1e-5, 0);
    }
    free(x), free(y), free(h), free(o), free(wf), free(wb);
    gt_dev_free(&dx), gt_dev_free(&dy), gt_dev_free(&dh), gt_dev_free(&dw);
}

/* ==== The launchers with every tunable value ==== */

/* The one-row q / k / v qmv_i8 with RoPE + KV write in its epilogue (RoPE pair mode) against
 * the same qmv plain, then cuda_rope_kv_f32: rotated q and k, v, and both pools at the slot;
 * slot -1 leaves the pools alone. The pair mode may take another K split (sums within fp32
 * rounding; the pools one bf16 rounding). */
static void test_qmv_rope(int Hq, int Hkv, int D, int K, int bits, bool pool_bf16) {
    const int N[3] = {Hq * D, Hkv * D, Hkv * D}, half = D / 2, slots = 5;
    const size_t pool_n = (size_t)slots * Hkv * D, esz = pool_bf16 ? 2 : 4;
    qmat m[3];
    float *x = malloc((size_t)K * 4), *cs = malloc((size_t)D * 4);
    gt_fill(x, (size_t)K, 1.0f);
    for (int i = 0; i < half; i++)
        cs[2 * i] = cosf(0.37f * (float)i + 2), cs[2 * i + 1] = sinf(0.37f * (float)i + 2);
    mx_tensor dx = gt_dev_f32(x, 2, (const int64_t[]){1, K});
    mx_tensor dcs = gt_dev_f32(cs, 2, (const int64_t[]){1, D}), y[3][3];
    const int64_t slot_h[2] = {3, -1};
    int64_t *slot_d = NULL;
    void *kp[4], *vp[4];
    cudaMalloc((void **)&slot_d, sizeof slot_h);
    cudaMemcpy(slot_d, slot_h, sizeof slot_h, cudaMemcpyHostToDevice);
    for (int p = 0; p < 4; p++) {
        cudaMalloc(&kp[p], pool_n * esz), cudaMalloc(&vp[p], pool_n * esz);
        cudaMemset(kp[p], 0, pool_n * esz), cudaMemset(vp[p], 0, pool_n * esz);
    }
    cuda_qmv_args a;
    memset(&a, 0, sizeof a);
    for (int i = 0; i < 3; i++) {
        qmat_make(&m[i], N[i], K, bits, 64, MX_BF16);
        a.w[i] = m[i].dev.w.data, a.scales[i] = m[i].dev.scales.data;
        a.biases[i] = m[i].dev.biases.data, a.ldy[i] = a.N[i] = N[i];
        for (int p = 0; p < 3; p++) y[p][i] = gt_dev_poison(2, (const int64_t[]){1, N[i]});
    }
    a.n_segs = 3, a.x = dx.data, a.ldx = K, a.rows = 1, a.K = K, a.bits = bits, a.group = 64;
    a.sb_dtype = CUDA_QSB_BF16, a.x_inprep = 1;
    a.ws_bytes = cuda_qmv_i8_workspace_bytes(K);
    a.ws = g_gpu->alloc(a.ws_bytes);
    int rc[4];
    /* plain + rope_kv; fused; fused with slot -1; fused reading the tiled layout */
    for (int p = 0; p < 4; p++) {
        cuda_qmv_args t = a;
        for (int i = 0; i < 3; i++) {
            t.y[i] = y[p == 3 ? 2 : p ? 1 : 0][i].data;
            if (p == 3 && m[i].tl.tiled)
                t.w[i] = m[i].tl.w.data, t.scales[i] = t.biases[i] = NULL, t.tiled = 1;
        }
        if (p) {
            t.rope_cs = dcs.data, t.rope_rows = slot_d + (p == 2), t.head_dim = D;
            if (p == 3) t.rope_rows = slot_d;
            t.k_pool = kp[p], t.v_pool = vp[p], t.pool_bf16 = pool_bf16;
        }
        rc[p] = cuda_qmv_i8(&t, g_cu.st);
        if (!p && !rc[p])
            rc[p] = cuda_rope_kv_f32(t.y[0], N[0], t.y[1], N[1], t.y[2], N[2], dcs.data, 1, Hq,
                                     Hkv, D, D, slot_d, kp[0], vp[0], pool_bf16, g_cu.st);
    }
    cudaStreamSynchronize(g_cu.st);
    static const char *names[3] = {"q", "k", "v"};
    char what[160];
    for (int i = 0; i < 3; i++) {
        snprintf(what, sizeof what, "qmv_i8 + rope + kv write, %d/%d heads of %d, K %d, %d-bit: %s",
                 Hq, Hkv, D, K, bits, names[i]);
        if (rc[0] || rc[1] || rc[2] || rc[3]) {
            gt_report(what, 1.0, 0, 1);
            continue;
        }
        float *ref = malloc((size_t)N[i] * 4), *got = malloc((size_t)N[i] * 4);
        float *tgot = malloc((size_t)N[i] * 4);
        gt_to_host(ref, &y[0][i]);
        gt_to_host(got, &y[1][i]);
        gt_to_host(tgot, &y[2][i]);
        long bad, diff = 0;
        gt_report_err(what, gt_rel_err(got, ref, (size_t)N[i], &bad), 1e-5, &bad);
        for (int j = 0; j < N[i]; j++) diff += memcmp(&got[j], &tgot[j], 4) != 0;
        gt_report("  ... the same from the tiled layout, bitwise", m[i].tl.tiled ? 0 : 1, 0, diff);
        free(ref), free(got), free(tgot);
    }
    for (int i = 0; i < 2 && !rc[0] && !rc[1] && !rc[2] && !rc[3]; i++) {
        float *r = gt_pool_to_host(i ? vp[0] : kp[0], pool_n, pool_bf16);
        float *b = gt_pool_to_host(i ? vp[1] : kp[1], pool_n, pool_bf16);
        float *z = gt_pool_to_host(i ? vp[2] : kp[2], pool_n, pool_bf16);
        long bad;
        snprintf(what, sizeof what, "  ... %s pool (%s)", i ? "v" : "k",
                 pool_bf16 ? "bf16" : "fp32");
        gt_report_err(what, gt_rel_err(b, r, pool_n, &bad), pool_bf16 ? 8e-3 : 1e-5, &bad);
        double zmax = 0;
        for (size_t j = 0; j < pool_n; j++) zmax = fmax(zmax, fabs(z[j]));
        snprintf(what, sizeof what, "  ... %s pool untouched at slot -1", i ? "v" : "k");
        gt_report(what, zmax, 0, 0);
        float *tb = gt_pool_to_host(i ? vp[3] : kp[3], pool_n, pool_bf16);
        snprintf(what, sizeof what, "  ... %s pool from the tiled copy, bitwise", i ? "v" : "k");
        gt_report(what, memcmp(tb, b, pool_n * 4) ? 1.0 : 0.0, 0, 0);
        free(r), free(b), free(z), free(tb);
    }
    for (int i = 0; i < 3; i++) {
        qmat_free(&m[i]);
        for (int p = 0; p < 3; p++) gt_dev_free(&y[p][i]);
    }
    for (int p = 0; p < 4; p++) cudaFree(kp[p]), cudaFree(vp[p]);
    cudaFree(slot_d), g_gpu->free(a.ws);
    gt_dev_free(&dx), gt_dev_free(&dcs);
    free(x), free(cs);
}

/* gate / up, GLU, down at one row with nothing after the down (no residual add: the down
 * launch has no epilogue of its own, yet its x comes from the gate/up epilogue, hi + lo for
 * 8-bit): d checked against the CPU from the device's GLU output. */
static void test_glu_down(int K, int F, int bits) {
    qmat wg, wu, wd;
    qmat_make(&wg, F, K, bits, 64, MX_BF16);
    qmat_make(&wu, F, K, bits, 64, MX_BF16);
    qmat_make(&wd, K, F, bits, 64, MX_BF16);
    float *x = malloc((size_t)K * 4), *g = malloc((size_t)F * 4), *d = malloc((size_t)K * 4);
    gt_fill(x, (size_t)K, 1.0f);
    const int64_t sk[2] = {1, K}, sf[2] = {1, F};
    mx_tensor dx = gt_dev_f32(x, 2, sk), dg = gt_dev_poison(2, sf), du = gt_dev_poison(2, sf);
    mx_tensor dd = gt_dev_poison(2, sk), none = {0};
    long f0 = g_cu.q_fused[2];
    g_gpu->matmul_q(&dg, &dx, &wg.dev, &none);
    g_gpu->matmul_q(&du, &dx, &wu.dev, &none);
    g_gpu->glu(&dg, &dg, &du, ACT_SILU);
    g_gpu->matmul_q(&dd, &dg, &wd.dev, &none);
    gt_to_host(g, &dg);
    gt_to_host(d, &dd);
    float *r = cpu_ref(g, 1, &wd, NULL, NULL);
    long bad;
    char what[160];
    snprintf(what, sizeof what, "glu + down, no add after: %d-bit [%d x %d], GLU x fused %ld", bits,
             K, F, g_cu.q_fused[2] - f0);
    const double q = bound_ratio(d, K, r, g, 1, &wd, 0, eps_for(MX_BF16, false), bits != 8, &bad);
    gt_report_err(what, g_cu.qmv_i8_inprep && g_cu.q_fused[2] - f0 != 1 ? INFINITY : q, 1.0,
                  &bad);
    free(x), free(g), free(d), free(r);
    gt_dev_free(&dx), gt_dev_free(&dg), gt_dev_free(&du), gt_dev_free(&dd);
    qmat_free(&wg), qmat_free(&wu), qmat_free(&wd);
}

/* One-row decode chain through the backend ops, as a Llama layer issues them: o = a Wo;
 * h += o; xn = norm(h); g = xn Wg, u = xn Wu; g = act(g) * u; d = g Wd; h += d; xn2 =
 * norm(h); q = xn2 Wq. With MLXCEL_QMV_I8_INPREP the residual adds run in the o / down qmv
 * epilogues, the norms and x roundings inside the qmv CTAs, the GLU in the gate/up qmv's
 * pair epilogue, which also leaves the down qmv's int8 x (no prep, add, norm or GLU
 * launch). Every stage is checked against the CPU from the device's own inputs to it, the
 * fused launches are counted (a fusion that silently stopped engaging fails), and the
 * outputs must match the unfused path's to fp32 rounding. */
static void test_q_chain(int K, int F, int bits, mx_dtype sbt) {
    qmat wo, wg, wu, wd, wq;
    qmat_make(&wo, K, K, bits, 64, sbt);
    qmat_make(&wg, F, K, bits, 64, sbt);
    qmat_make(&wu, F, K, bits, 64, sbt);
    qmat_make(&wd, K, F, bits, 64, sbt);
    qmat_make(&wq, 96, K, bits, 64, sbt);
    float *a = malloc((size_t)K * 4), *h0 = malloc((size_t)K * 4), *nwf = malloc((size_t)K * 8);
    gt_fill(a, (size_t)K, 1.0f);
    gt_fill(h0, (size_t)K, 2.0f);
    gt_fill(nwf, (size_t)K * 2, 1.0f);
    uint16_t *nw = gt_bf16(nwf, (size_t)K * 2);
    const int64_t sk[2] = {1, K}, sf[2] = {1, F}, s1[1] = {K}, sq[2] = {1, 96};
    enum { O, H, XN, G, U, D, XN2, Q, NOUT };
    const int len[NOUT] = {K, K, K, F, F, K, K, 96};
    float *out[3][NOUT] = {{0}};
    const bool was = g_cu.qmv_i8_inprep;
    const bool tiled = wo.tl.tiled && wg.tl.tiled && wu.tl.tiled && wd.tl.tiled && wq.tl.tiled;
    /* 8-bit off: the CUDA-core qmv (MLXCEL_QMV_I8_Q8 0); on 2: on, the weights tiled */
    for (int on = 0; on < 2 + tiled; on++) {
        g_cu.qmv_i8_inprep = on != 0;
        const qmat *mm[5] = {&wo, &wg, &wu, &wd, &wq};
        const mx_qweight *W[5];
        for (int i = 0; i < 5; i++) W[i] = on == 2 ? &mm[i]->tl : &mm[i]->dev;
        long f0[3];
        memcpy(f0, g_cu.q_fused, sizeof f0);
        mx_tensor da = gt_dev_f32(a, 2, sk), dh = gt_dev_f32(h0, 2, sk);
        mx_tensor dw1 = gt_dev_weight(nw, 1, s1), dw2 = gt_dev_weight(nw + K, 1, s1);
        mx_tensor t[NOUT] = {gt_dev_poison(2, sk), dh,
                             gt_dev_poison(2, sk), gt_dev_poison(2, sf),
                             gt_dev_poison(2, sf), gt_dev_poison(2, sk),
                             gt_dev_poison(2, sk), gt_dev_poison(2, sq)};
        mx_tensor none = {0};
        g_gpu->matmul_q(&t[O], &da, W[0], &none);
        g_gpu->add(&t[H], &t[O]);
        g_gpu->rms_norm(&t[XN], &t[H], &dw1, 1e-5f, 0.f);
        g_gpu->matmul_q(&t[G], &t[XN], W[1], &none);
        g_gpu->matmul_q(&t[U], &t[XN], W[2], &none);
        g_gpu->glu(&t[G], &t[G], &t[U], ACT_SILU);
        g_gpu->matmul_q(&t[D], &t[G], W[3], &none);
        g_gpu->add(&t[H], &t[D]);
        g_gpu->rms_norm(&t[XN2], &t[H], &dw2, 1e-5f, 0.f);
        g_gpu->matmul_q(&t[Q], &t[XN2], W[4], &none);
        for (int i = 0; i < NOUT; i++) {
            out[on][i] = malloc((size_t)len[i] * 4);
            gt_to_host(out[on][i], &t[i]);
            gt_dev_free(&t[i]);
        }
        gt_dev_free(&da), gt_dev_free(&dw1), gt_dev_free(&dw2);
        long n[3];
        for (int i = 0; i < 3; i++) n[i] = g_cu.q_fused[i] - f0[i];
        char what[200];
        snprintf(what, sizeof what,
                 "q chain K %d F %d %d-bit %s, in-CTA prep %s: fused launches %ld / %ld / %ld "
                 "(x, res, GLU x)", K, F, bits, sb_name(sbt), on == 2 ? "on, tiled" : on ? "on" : "off",
                 n[0], n[1], n[2]);
        /* on: o, gate/up, down, q take x in-CTA (down: from the GLU epilogue, not in-CTA)... */
        const bool want = on ? n[0] == 3 && n[1] == 2 && n[2] == 1 : !n[0] && !n[1] && !n[2];
        gt_report(what, want ? 0 : 1, 0, 0);
    }
    g_cu.qmv_i8_inprep = was;
    float *const *o = out[1];
    /* each stage against the CPU from the device's inputs to it; 8-bit x is hi + lo int8
     * (~2^-15 of a group's largest): the weights' bound alone */
    const double eps = eps_for(sbt, false);
    const bool i8 = bits != 8;
    char what[200];
    long bad;
    float *r = cpu_ref(a, 1, &wo, NULL, NULL);
    snprintf(what, sizeof what, "  ... o = a Wo [%d x %d]", K, K);
    gt_report_err(what, bound_ratio(o[O], K, r, a, 1, &wo, 0, eps, i8, &bad), 1.0, &bad);
    free(r);
    float *h1 = malloc((size_t)K * 4), *hn = malloc((size_t)K * 4), *xr = malloc((size_t)K * 4);
    for (int k = 0; k < K; k++) h1[k] = h0[k] + o[O][k], hn[k] = h1[k] + o[D][k];
    snprintf(what, sizeof what, "  ... h + o + d (the residual adds)");
    gt_report_err(what, gt_rel_err(o[H], hn, (size_t)K, &bad), 1e-6, &bad);
    mx_tensor hx = mx_tensor_2d(xr, MX_F32, 1, K, MX_DEV_CPU);
    mx_tensor hin = mx_tensor_2d(h1, MX_F32, 1, K, MX_DEV_CPU);
    mx_tensor hw1 = mx_tensor_1d(nw, MX_BF16, K, MX_DEV_CPU);
    mx_tensor hw2 = mx_tensor_1d(nw + K, MX_BF16, K, MX_DEV_CPU);
    g_cpu->rms_norm(&hx, &hin, &hw1, 1e-5f, 0.f);
    snprintf(what, sizeof what, "  ... xn = norm(h + o)");
    gt_report_err(what, gt_rel_err(o[XN], xr, (size_t)K, &bad), 1e-5, &bad);
    r = cpu_ref(o[XN], 1, &wu, NULL, NULL);
    snprintf(what, sizeof what, "  ... u = xn Wu [%d x %d]", F, K);
    gt_report_err(what, bound_ratio(o[U], F, r, o[XN], 1, &wu, 0, eps, i8, &bad), 1.0, &bad);
    free(r);
    /* the GLU: act(xn Wg) * u, with xn Wg's own bound carried through silu (slope <= 1.1) */
    r = cpu_ref(o[XN], 1, &wg, NULL, NULL);
    double worst = 0, *half = i8 ? malloc((size_t)K * sizeof *half) : NULL;
    if (half) x_half_steps(o[XN], K, wg.group, half);
    bad = 0;
    for (int n = 0; n < F; n++) {
        const double g = r[n], want = g / (1 + exp(-g)) * o[U][n];
        const double b = err_bound(&wg, n, o[XN], half, eps);
        const double q = fabs(o[G][n] - want) / (1.1 * b * fabs(o[U][n]) + 1e-6);
        if (!isfinite(o[G][n])) bad++;
        else if (q > worst) worst = q;
    }
    free(r), free(half);
    snprintf(what, sizeof what, "  ... g = silu(xn Wg) * u (the pair epilogue)");
    gt_report_err(what, worst, 1.0, &bad);
    r = cpu_ref(o[G], 1, &wd, NULL, NULL);
    snprintf(what, sizeof what, "  ... d = g Wd [%d x %d] (x rounded by the gate/up epilogue)", K,
             F);
    gt_report_err(what, bound_ratio(o[D], K, r, o[G], 1, &wd, 0, eps, i8, &bad), 1.0, &bad);
    free(r);
    hin.data = o[H];
    g_cpu->rms_norm(&hx, &hin, &hw2, 1e-5f, 0.f);
    snprintf(what, sizeof what, "  ... xn2 = norm(h + o + d)");
    gt_report_err(what, gt_rel_err(o[XN2], xr, (size_t)K, &bad), 1e-5, &bad);
    r = cpu_ref(o[XN2], 1, &wq, NULL, NULL);
    snprintf(what, sizeof what, "  ... q = xn2 Wq [96 x %d]", K);
    gt_report_err(what, bound_ratio(o[Q], 96, r, o[XN2], 1, &wq, 0, eps, i8, &bad), 1.0, &bad);
    free(r);
    /* 4-bit: the in-CTA prep computes what the prep kernels do, thread for thread: o (same
     * grid) and the norm's output are bit-identical with it off */
    if (bits == 4) {
        snprintf(what, sizeof what, "  ... o and xn bit-identical to the prep kernels' (0 = yes)");
        const bool same = !memcmp(out[0][O], o[O], (size_t)K * 4) &&
                          !memcmp(out[0][XN], o[XN], (size_t)K * 4);
        gt_report(what, same ? 0 : 1, 0, 0);
    }
    /* the tiled layout (bf16 scales: upload_q repacked all five) gives every output bitwise */
    long diff = 0;
    for (int i = 0; tiled && i < NOUT; i++)
        for (int j = 0; j < len[i]; j++) diff += memcmp(&out[2][i][j], &o[i][j], 4) != 0;
    if (sbt == MX_BF16)
        gt_report("  ... the weights tiled (MLXCEL_QMV_TILED), every output bitwise",
                  tiled ? 0 : 1, 0, diff);
    free(h1), free(hn), free(xr);
    for (int i = 0; i < NOUT; i++) free(out[0][i]), free(out[1][i]), free(out[2][i]);
    free(a), free(h0), free(nwf), free(nw);
    qmat_free(&wo), qmat_free(&wg), qmat_free(&wu), qmat_free(&wd), qmat_free(&wq);
}

/* One direct-launcher case: the weight, x [rows, K] on host and device, the CPU reference. */
typedef struct launch_case {
    qmat m;
    int rows;
    float *x, *ref; /* [rows, K], [rows, N] */
    mx_tensor dx;
} launch_case;

static void launch_case_make(launch_case *c, int rows, int N, int K, int bits, int group,
                             mx_dtype sbt) {
    qmat_make(&c->m, N, K, bits, group, sbt);
    c->rows = rows;
    c->x = malloc((size_t)rows * K * 4);
    gt_fill(c->x, (size_t)rows * K, 1.0f);
    c->ref = cpu_ref(c->x, rows, &c->m, NULL, NULL);
    const int64_t sx[2] = {rows, K};
    c->dx = gt_dev_f32(c->x, 2, sx);
}

static void launch_case_free(launch_case *c) {
    gt_dev_free(&c->dx);
    free(c->x), free(c->ref);
    qmat_free(&c->m);
}

/* Reports one launch: rc != 0 fails the check, else dout [rows, N] against the reference. */
static void launch_check(const launch_case *c, const char *what, int rc, const mx_tensor *dout,
                         double eps) {
    if (rc) {
        printf("FAIL %s: launch error %d\n", what, rc);
        g_failures++, g_checks++;
        return;
    }
    float *o = malloc((size_t)c->rows * c->m.N * 4);
    gt_to_host(o, dout);
    long bad = 0;
    const double q = bound_ratio(o, c->m.N, c->ref, c->x, c->rows, &c->m, 0, eps, false, &bad);
    gt_report(what, q, 1.0, bad);
    free(o);
}

static void test_qmv_multirow(int rows, int N, int K, int bits, int group, mx_dtype sbt) {
    launch_case c;
    launch_case_make(&c, rows, N, K, bits, group, sbt);
    const int64_t so[2] = {rows, N};
    const size_t wsb = cuda_qmv_workspace_bytes(K);
    void *ws = g_gpu->alloc(wsb);
    static const int mrs[CUDA_QMV_MULTIROW_COUNT] = CUDA_QMV_MULTIROW_VALUES;
    for (int i = 0; i < CUDA_QMV_MULTIROW_COUNT; i++) {
        mx_tensor dout = gt_dev_poison(2, so);
        cuda_qmv_args a;
        memset(&a, 0, sizeof a);
        a.w[0] = c.m.dev.w.data, a.scales[0] = c.m.dev.scales.data;
        a.biases[0] = c.m.dev.biases.data;
        a.y[0] = dout.data, a.ldy[0] = N, a.N[0] = N, a.n_segs = 1;
        a.x = c.dx.data, a.ldx = K, a.rows = rows, a.K = K, a.bits = bits, a.group = group;
        a.sb_dtype = sb_code(sbt), a.ws = ws, a.ws_bytes = wsb;
        const int rc = cuda_qmv(&a, mrs[i], g_cu.st);
        char what[160];
        snprintf(what, sizeof what, "cuda_qmv multirow %d: %d rows [%d x %d] %d-bit g%d %s", mrs[i],
                 rows, N, K, bits, group, sb_name(sbt));
        launch_check(&c, what, rc, &dout, eps_for(sbt, false));
        gt_dev_free(&dout);
    }
    g_gpu->free(ws);
    launch_case_free(&c);
}

static void test_qmm_tiles(int rows, int N, int K, int bits, int group, mx_dtype sbt) {
    launch_case c;
    launch_case_make(&c, rows, N, K, bits, group, sbt);
    const int64_t so[2] = {rows, N};
    static const int tiles[CUDA_QMM_TILE_COUNT] = CUDA_QMM_TILE_VALUES;
    for (int i = 0; i < CUDA_QMM_TILE_COUNT; i++) {
        mx_tensor dout = gt_dev_poison(2, so);
        const size_t sb = cuda_qmm_scratch_bytes(rows, N, K, tiles[i]);
        void *scratch = g_gpu->alloc(sb);
        cuda_qmm_args a;
        memset(&a, 0, sizeof a);
        a.w = c.m.dev.w.data, a.scales = c.m.dev.scales.data, a.biases = c.m.dev.biases.data;
        a.x = c.dx.data, a.ldx = K, a.y = dout.data, a.ldy = N;
        a.rows = rows, a.N = N, a.K = K, a.bits = bits, a.group = group, a.sb_dtype = sb_code(sbt);
        a.lt = g_cu.lt, a.lt_ws = g_cu.lt_ws, a.lt_ws_bytes = g_cu.lt_ws_size;
        a.scratch = scratch, a.scratch_bytes = sb;
        if (i == 0) /* valid arguments, a tile outside CUDA_QMM_TILE_VALUES: refused, no launch */
            gt_report("cuda_qmm refuses tile 64 (else valid arguments)",
                      cuda_qmm(&a, 64, g_cu.st) == (int)cudaErrorInvalidValue ? 0 : 1, 0, 0);
        const int rc = cuda_qmm(&a, tiles[i], g_cu.st);
        char what[160];
        snprintf(what, sizeof what, "cuda_qmm tile %d: %d rows [%d x %d] %d-bit g%d %s", tiles[i],
                 rows, N, K, bits, group, sb_name(sbt));
        launch_check(&c, what, rc, &dout, eps_for(sbt, true));
        if (c.m.tl.tiled && !rc) { /* the tiled layout dequantizes to the same bf16 slab */
            mx_tensor d2 = gt_dev_poison(2, so);
            cuda_qmm_args t = a;
            t.w = c.m.tl.w.data, t.scales = t.biases = NULL, t.tiled = 1, t.y = d2.data;
            const int rc2 = cuda_qmm(&t, tiles[i], g_cu.st);
            float *p = malloc((size_t)rows * N * 4), *q = malloc((size_t)rows * N * 4);
            gt_to_host(p, &dout);
            gt_to_host(q, &d2);
            gt_report("  ... tiled layout: bitwise the same y", rc2 ? 1 : 0, 0,
                      rc2 ? 0 : memcmp(p, q, (size_t)rows * N * 4) != 0);
            free(p), free(q);
            gt_dev_free(&d2);
        }
        g_gpu->free(scratch);
        gt_dev_free(&dout);
    }
    launch_case_free(&c);
}

/* cuda_qdequant_bf16 of rows [n0, n0 + n) from the tiled layout (the block path at n0 % 16
 * == 0, code by code otherwise) against the MLX layout's: bitwise. */
static void test_dequant_tiled(int N, int K, int bits, int group, int n0, int n) {
    qmat m;
    qmat_make(&m, N, K, bits, group, MX_BF16);
    uint16_t *d[2];
    int rc = !m.tl.tiled;
    for (int i = 0; i < 2; i++) {
        d[i] = g_gpu->alloc((size_t)n * K * 2);
        rc |= cuda_qdequant_bf16(d[i], K, i ? m.tl.w.data : m.dev.w.data,
                                 i ? NULL : m.dev.scales.data, i ? NULL : m.dev.biases.data,
                                 CUDA_QSB_BF16, i, n0, n, K, bits, group, g_cu.st);
    }
    uint16_t *h[2] = {malloc((size_t)n * K * 2), malloc((size_t)n * K * 2)};
    for (int i = 0; i < 2 && !rc; i++)
        cudaMemcpy(h[i], d[i], (size_t)n * K * 2, cudaMemcpyDeviceToHost);
    char what[160];
    snprintf(what, sizeof what, "dequant tiled rows [%d, %d) of [%d x %d] q%dg%d == MLX layout",
             n0, n0 + n, N, K, bits, group);
    gt_report(what, rc ? 1 : 0, 0, rc ? 0 : memcmp(h[0], h[1], (size_t)n * K * 2) != 0);
    for (int i = 0; i < 2; i++) g_gpu->free(d[i]), free(h[i]);
    qmat_free(&m);
}

/* The qmv_i8 (i8) or default-shape qmv_bulk launch a (already made, outputs in dout) again
 * on the weights' tiled layout (upload_q) into fresh outputs: qmv_i8 and 4-bit qmv_bulk give
 * bitwise the same y, padding included (the same arithmetic in the same order; only the
 * addresses differ); 8-bit qmv_bulk takes k in another order (its sums may differ in the
 * last bits): y within the MLX-layout launch's bound against the reference, padding kept. */
static void test_tiled_rerun(const cuda_qmv_args *a, const qmat *m, const mx_tensor *dout,
                             bool i8, float *const *ref, const float *x) {
    cuda_qmv_args t = *a;
    mx_tensor d2[CUDA_QMV_MAX_SEGS];
    for (int i = 0; i < a->n_segs; i++) {
        d2[i] = gt_dev_poison(2, (const int64_t[]){a->rows, a->ldy[i]});
        t.y[i] = d2[i].data, t.w[i] = m[i].tl.w.data, t.scales[i] = t.biases[i] = NULL;
    }
    t.tiled = 1;
    const int rc = i8 ? cuda_qmv_i8(&t, g_cu.st) : cuda_qmv_bulk(&t, 0, g_cu.st);
    const bool exact = i8 || a->bits == 4;
    long diff = 0;
    double q = 0;
    for (int i = 0; i < a->n_segs && !rc; i++) {
        const size_t n = (size_t)a->rows * a->ldy[i];
        float *p = malloc(n * 4), *o = malloc(n * 4);
        gt_to_host(p, &dout[i]);
        gt_to_host(o, &d2[i]);
        if (exact) {
            for (size_t j = 0; j < n; j++) diff += memcmp(&p[j], &o[j], 4) != 0;
        } else {
            long bad = 0;
            q = fmax(q, bound_ratio(o, a->ldy[i], ref[i], x, a->rows, &m[i], 0,
                                    eps_for(MX_BF16, true), false, &bad));
            diff += bad;
            for (int r = 0; r < a->rows; r++)
                for (long c = a->N[i]; c < a->ldy[i]; c++)
                    diff += !isnan(o[(size_t)r * a->ldy[i] + c]);
        }
        free(p), free(o);
    }
    for (int i = 0; i < a->n_segs; i++) gt_dev_free(&d2[i]);
    char what[160];
    snprintf(what, sizeof what, "  ... tiled layout: %s (%d rows [%d x %d] q%dg%d)",
             exact ? "bitwise the same y" : "y within the bound, padding kept", a->rows, m[0].N,
             a->K, a->bits, a->group);
    gt_report(what, rc ? 1e9 : q, exact ? 0 : 1.0, diff);
}

/* ==== Tensor-core qmv: the launcher directly ====
 * n_segs weights of N, N + 38, N + 2 rows (odd: partial 16-row CTAs) sharing x, y with a
 * row stride of N_i + 5 whose padding columns must stay poisoned; window 0 (one pass) or a
 * row window (several passes, a partial last one). bulk_variant: >= 0 the streaming kernel's
 * launch shape, QT_MMA the one-stream 4-bit kernel (qmv_mma.cu), else qmv_tc. */
#define QT_MMA (-2)
#define QT_I8 (-3) /* the int8-activation kernel (qmv_i8.cu) */
static void test_qmv_tc(int rows, int N, int K, int bits, int group, mx_dtype sbt, int n_segs,
                        int window, int bulk_variant) {
    qmat m[CUDA_QMV_MAX_SEGS];
    float *x = malloc((size_t)rows * K * 4), *ref[CUDA_QMV_MAX_SEGS];
    gt_fill(x, (size_t)rows * K, 1.0f);
    const int64_t sx[2] = {rows, K};
    mx_tensor dx = gt_dev_f32(x, 2, sx), dout[CUDA_QMV_MAX_SEGS];
    cuda_qmv_args a;
    memset(&a, 0, sizeof a);
    for (int i = 0; i < n_segs; i++) {
        const int Ni = N + (i == 1 ? 38 : i == 2 ? 2 : 0);
        qmat_make(&m[i], Ni, K, bits, group, sbt);
        ref[i] = cpu_ref(x, rows, &m[i], NULL, NULL);
        dout[i] = gt_dev_poison(2, (const int64_t[]){rows, Ni + 5});
        a.w[i] = m[i].dev.w.data, a.scales[i] = m[i].dev.scales.data;
        a.biases[i] = m[i].dev.biases.data;
        a.y[i] = dout[i].data, a.ldy[i] = Ni + 5, a.N[i] = Ni;
    }
    a.n_segs = n_segs;
    a.x = dx.data, a.ldx = K, a.rows = rows, a.K = K, a.bits = bits, a.group = group;
    a.sb_dtype = sb_code(sbt);
    void *ws = NULL;
    if (bulk_variant >= 0 || bulk_variant == QT_MMA || bulk_variant == QT_I8) {
        a.ws_bytes = bulk_variant >= 0       ? cuda_qmv_bulk_workspace_bytes(K)
                     : bulk_variant == QT_I8 ? cuda_qmv_i8_workspace_bytes(K)
                                             : cuda_qmv_mma_workspace_bytes(K);
        a.ws = ws = g_gpu->alloc(a.ws_bytes);
    }
    /* bulk_variant >= 0: the streaming kernel (qmv_bulk.cu; one pass, x rounded to bf16) */
    const int rc = bulk_variant >= 0       ? cuda_qmv_bulk(&a, bulk_variant, g_cu.st)
                   : bulk_variant == QT_MMA ? cuda_qmv_mma(&a, g_cu.st)
                   : bulk_variant == QT_I8  ? cuda_qmv_i8(&a, g_cu.st)
                                           : cuda_qmv_tc(&a, window, g_cu.st);
    for (int i = 0; i < n_segs; i++) {
        char what[160];
        if (bulk_variant == QT_MMA || bulk_variant == QT_I8)
            snprintf(what, sizeof what, "cuda_qmv_%s %d rows [%d x %d] %d-bit g%d %s, seg %d/%d",
                     bulk_variant == QT_I8 ? "i8" : "mma",
                     rows, m[i].N, K, bits, group, sb_name(sbt), i + 1, n_segs);
        else if (bulk_variant >= 0)
            snprintf(what, sizeof what, "cuda_qmv_bulk v%d %d rows [%d x %d] %d-bit g%d %s, seg %d/%d",
                     bulk_variant, rows, m[i].N, K, bits, group, sb_name(sbt), i + 1, n_segs);
        else
            snprintf(what, sizeof what, "cuda_qmv_tc %d rows [%d x %d] %d-bit g%d %s, seg %d/%d, window %d",
                     rows, m[i].N, K, bits, group, sb_name(sbt), i + 1, n_segs, window);
        if (rc) {
            printf("FAIL %s: launch error %d\n", what, rc);
            g_failures++, g_checks++;
        } else {
            const long ld = m[i].N + 5;
            float *o = malloc((size_t)rows * ld * 4);
            gt_to_host(o, &dout[i]);
            long bad = 0, pad_written = 0;
            const double q = bound_ratio(o, ld, ref[i], x, rows, &m[i], 0,
                                         eps_for(sbt, bulk_variant >= 0), bulk_variant == QT_I8,
                                         &bad);
            for (int r = 0; r < rows; r++)
                for (long n = m[i].N; n < ld; n++) pad_written += !isnan(o[(size_t)r * ld + n]);
            gt_report(what, q, 1.0, bad + pad_written);
            free(o);
        }
    }
    bool tiled = true;
    for (int i = 0; i < n_segs; i++) tiled = tiled && m[i].tl.tiled;
    if ((bulk_variant == QT_I8 || bulk_variant == 0) && !rc && tiled)
        test_tiled_rerun(&a, m, dout, bulk_variant == QT_I8, ref, x);
    for (int i = 0; i < n_segs; i++) free(ref[i]), gt_dev_free(&dout[i]), qmat_free(&m[i]);
    if (ws) g_gpu->free(ws);
    gt_dev_free(&dx);
    free(x);
}

/* Arguments cuda_qmv_tc must refuse without launching (bits, rows, group, alignment). */
static void test_qmv_tc_refusals(void) {
    cuda_qmv_args a;
    memset(&a, 0, sizeof a);
    float *dummy = g_gpu->alloc(4096);
    a.w[0] = (const uint32_t *)dummy, a.scales[0] = dummy, a.biases[0] = dummy, a.y[0] = dummy;
    a.ldy[0] = 64, a.N[0] = 64, a.n_segs = 1, a.x = dummy, a.ldx = 64, a.rows = 1, a.K = 64;
    a.bits = 4, a.group = 64, a.sb_dtype = CUDA_QSB_BF16;
    int bad = !cuda_qmv_tc_supported(&a); /* the valid base case */
    a.bits = 3, bad += cuda_qmv_tc_supported(&a) || cuda_qmv_tc(&a, 0, g_cu.st) != (int)cudaErrorInvalidValue;
    a.bits = 4, a.rows = CUDA_QMV_TC_MAX_ROWS + 1, bad += cuda_qmv_tc_supported(&a);
    a.rows = 1, a.group = 16, bad += cuda_qmv_tc_supported(&a);
    a.group = 64, a.x = dummy + 1, bad += cuda_qmv_tc_supported(&a);
    a.x = dummy, a.K = 96, bad += cuda_qmv_tc_supported(&a);
    a.K = 64, bad += cuda_qmv_tc(&a, CUDA_QMV_TC_MAX_ROWS + 1, g_cu.st) != (int)cudaErrorInvalidValue;
    gt_report("cuda_qmv_tc refuses bits 3, 33 rows, group 16, unaligned x, K % group, window 33", bad, 0, 0);
    /* the two 4-bit tensor-core qmv kernels share their limits */
    static const struct {
        const char *name;
        int (*supported)(const cuda_qmv_args *);
        int (*run)(const cuda_qmv_args *, cudaStream_t);
        size_t (*ws_bytes)(int);
        int bad_bits; /* the first width it refuses */
    } k4[] = {
        {"cuda_qmv_mma", cuda_qmv_mma_supported, cuda_qmv_mma, cuda_qmv_mma_workspace_bytes, 8},
        {"cuda_qmv_i8", cuda_qmv_i8_supported, cuda_qmv_i8, cuda_qmv_i8_workspace_bytes, 3}};
    for (size_t i = 0; i < sizeof k4 / sizeof k4[0]; i++) {
        a.x = dummy, a.K = 64, a.rows = 1, a.group = 64, a.bits = 4, a.sb_dtype = CUDA_QSB_BF16;
        a.ws = dummy, a.ws_bytes = k4[i].ws_bytes(64);
        bad = !k4[i].supported(&a);
        a.bits = k4[i].bad_bits;
        bad += k4[i].supported(&a) || k4[i].run(&a, g_cu.st) != (int)cudaErrorInvalidValue;
        a.bits = 4, a.group = 32, bad += k4[i].supported(&a);
        a.group = 64, a.rows = CUDA_QMV_MAX_ROWS + 1, bad += k4[i].supported(&a);
        a.rows = 1, a.x = dummy + 1, bad += k4[i].supported(&a);
        a.x = dummy, a.sb_dtype = CUDA_QSB_F32, bad += k4[i].supported(&a);
        a.sb_dtype = CUDA_QSB_BF16, a.ws_bytes = 16;
        bad += k4[i].run(&a, g_cu.st) != (int)cudaErrorInvalidValue;
        char what[160];
        snprintf(what, sizeof what, "%s refuses bits %d, group 32, 9 rows, unaligned x, f32 "
                 "scales, a short workspace", k4[i].name, k4[i].bad_bits);
        gt_report(what, bad, 0, 0);
    }
    g_gpu->free(dummy);
}

/* ==== Quantized embedding: bit-exact ==== */
static void test_embed_q(int V, int H, int bits, int group, mx_dtype sbt, float scale, bool round) {
    qmat m;
    qmat_make(&m, V, H, bits, group, sbt);
    const int n = 7;
    const int32_t ids[7] = {0, V - 1, 3 % V, 5 % V, V / 2, 1 % V, V - 1};
    float *ref = malloc((size_t)n * H * 4), *o = malloc((size_t)n * H * 4);
    mx_tensor ho = mx_tensor_2d(ref, MX_F32, n, H, MX_DEV_CPU);
    g_cpu->embed_q(&ho, &m.host, ids, n, scale, round);
    const int64_t so[2] = {n, H};
    mx_tensor dout = gt_dev_poison(2, so);
    g_gpu->embed_q(&dout, &m.dev, ids, n, scale, round);
    gt_to_host(o, &dout);
    long bad = 0;
    char what[160];
    snprintf(what, sizeof what, "embed_q V %d H %d %d-bit g%d %s scale %g%s (bit-exact)", V, H, bits,
             group, sb_name(sbt), scale, round ? " rounded" : "");
    gt_report(what, memcmp(o, ref, (size_t)n * H * 4) ? fmax(gt_rel_err(o, ref, (size_t)n * H, &bad), 1e-30) : 0.0,
              0, 0);
    if (m.tl.tiled) {
        g_gpu->embed_q(&dout, &m.tl, ids, n, scale, round);
        gt_to_host(o, &dout);
        gt_report("  ... tiled layout (bit-exact)",
                  memcmp(o, ref, (size_t)n * H * 4) ? 1.0 : 0.0, 0, 0);
    }
    gt_dev_free(&dout);
    free(ref), free(o);
    qmat_free(&m);
}

/* ==== Quantized MoE ==== */
static void test_moe_q(int n, int E, int k, int H, int I, int bits, bool dense_down, int routing) {
    float *x = malloc((size_t)n * H * 4), *rl = malloc((size_t)n * E * 4), *ref = malloc((size_t)n * H * 4);
    gt_fill(x, (size_t)n * H, 1.0f);
    gt_fill(rl, (size_t)n * E, 2.0f);
    qmat *qg = calloc((size_t)E, sizeof *qg), *qu = calloc((size_t)E, sizeof *qu), *qd = calloc((size_t)E, sizeof *qd);
    mx_qweight *hg = calloc((size_t)E, sizeof *hg), *hu = calloc((size_t)E, sizeof *hu), *hd = calloc((size_t)E, sizeof *hd);
    mx_qweight *dg = calloc((size_t)E, sizeof *dg), *du = calloc((size_t)E, sizeof *du), *dd = calloc((size_t)E, sizeof *dd);
    mx_tensor *hdd = calloc((size_t)E, sizeof *hdd), *ddd = calloc((size_t)E, sizeof *ddd);
    uint16_t **dbf = calloc((size_t)E, sizeof *dbf);
    for (int e = 0; e < E; e++) {
        qmat_make(&qg[e], I, H, bits, 64, MX_BF16);
        qmat_make(&qu[e], I, H, bits, 64, MX_BF16);
        hg[e] = qg[e].host, dg[e] = qg[e].dev, hu[e] = qu[e].host, du[e] = qu[e].dev;
        if (dense_down) { /* a dense bf16 down projection next to quantized gate/up */
            float *w = malloc((size_t)H * I * 4);
            gt_fill(w, (size_t)H * I, 1.0f / sqrtf((float)I));
            dbf[e] = gt_bf16(w, (size_t)H * I);
            free(w);
            hdd[e] = mx_tensor_2d(dbf[e], MX_BF16, H, I, MX_DEV_CPU);
            ddd[e] = gt_dev_weight(dbf[e], 2, (const int64_t[]){H, I});
        } else {
            qmat_make(&qd[e], H, I, bits, 64, MX_BF16);
            hd[e] = qd[e].host, dd[e] = qd[e].dev;
        }
    }
    mx_moe_params p = {.n_experts = E, .top_k = k, .norm_topk = true, .activation = ACT_SILU,
                       .routing = routing};
    mx_moe_experts hex = {.qgate = hg, .qup = hu}, dex = {.qgate = dg, .qup = du};
    if (dense_down) hex.down = hdd, dex.down = ddd;
    else hex.qdown = hd, dex.qdown = dd;
    mx_tensor hx = mx_tensor_2d(x, MX_F32, n, H, MX_DEV_CPU), hr = mx_tensor_2d(rl, MX_F32, n, E, MX_DEV_CPU);
    mx_tensor ho = mx_tensor_2d(ref, MX_F32, n, H, MX_DEV_CPU);
    mx_error err;
    const int64_t sx[2] = {n, H}, sr[2] = {n, E};
    char what[160];
    snprintf(what, sizeof what, "moe_q %d rows, %d experts top %d, H %d I %d %d-bit%s (%s)%s", n, E, k,
             H, I, bits, dense_down ? " + dense down" : "", n <= CU_MOE_PAIR_MAX_ROWS ? "pairs" : "grouped",
             routing == MX_MOE_ROUTE_SIGMOID_IN ? " llama4 routing" : "");
    if (g_cpu->moe(&ho, &hx, &hr, &hex, &p, &err)) {
        printf("FAIL %s: CPU: %s\n", what, err.msg);
        g_failures++, g_checks++;
    } else {
        mx_tensor dx = gt_dev_f32(x, 2, sx), dr = gt_dev_f32(rl, 2, sr), dout = gt_dev_poison(2, sx);
        if (g_gpu->moe(&dout, &dx, &dr, &dex, &p, &err)) {
            printf("FAIL %s: %s\n", what, err.msg);
            g_failures++, g_checks++;
        } else {
            float *o = malloc((size_t)n * H * 4);
            gt_to_host(o, &dout);
            long bad = 0;
            /* a composition of matmuls: relative L2 error (qmm rounds to bf16 above 8 rows) */
            gt_report(what, gt_rel_err(o, ref, (size_t)n * H, &bad), n <= CU_MOE_PAIR_MAX_ROWS ? 1e-2 : 2e-2, bad);
            free(o);
        }
        gt_dev_free(&dx), gt_dev_free(&dr), gt_dev_free(&dout);
    }
    for (int e = 0; e < E; e++) {
        qmat_free(&qg[e]), qmat_free(&qu[e]);
        if (dense_down) gt_dev_free(&ddd[e]), free(dbf[e]);
        else qmat_free(&qd[e]);
    }
    free(qg), free(qu), free(qd), free(hg), free(hu), free(hd), free(dg), free(du), free(dd);
    free(hdd), free(ddd), free(dbf), free(x), free(rl), free(ref);
}

/* ==== Entry ==== */
int gt_run_quant_tests(const char *src_dir) {
    static const int bits[] = {2, 3, 4, 5, 6, 8}, groups[] = {32, 64, 128};
    static const int rows[] = {1, 2, 3, 5, 8, 17, 100};
    static const mx_dtype sbts[] = {MX_BF16, MX_F16, MX_F32};
    int c = 0;
    /* N odd, K = 640 (not a multiple of 512: a partial warp step in the 4-bit kernel) */
    for (size_t b = 0; b < 6; b++)
        for (size_t g = 0; g < 3; g++)
            for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++, c++)
                test_matmul_q(rows[r], 131, 640, bits[b], groups[g], sbts[c % 3], c % 4 == 0);
    /* decode shapes: split-K CTAs (few rows of W) and one warp per row group */
    test_matmul_q(1, 4096, 4096, 4, 64, MX_BF16, false);
    test_matmul_q(1, 14336, 4096, 4, 64, MX_BF16, false);
    test_matmul_q(1, 4096, 14336, 4, 64, MX_BF16, false);
    test_matmul_q(8, 4096, 4096, 8, 64, MX_BF16, true);
    test_matmul_q(4, 1024, 4096, 8, 32, MX_F16, false);
    test_qkv(1, 4096, 4096, 1024, 4);
    test_qkv(5, 2048, 2048, 256, 8);
    test_qkv(3, 1024, 1024, 256, 4); /* 4-bit, 3 rows, 3 segments */
    for (size_t b = 0; b < 6; b++) {
        test_qmv_multirow(8, 257, 1152, bits[b], 64, MX_BF16);
        test_qmv_multirow(5, 33, 512, bits[b], 128, MX_F32);
        test_qmv_multirow(3, 65, 3072, bits[b], 32, MX_F16);
    }
    /* tensor-core qmv: bits x groups x rows, K = 640 / 1152 (not a multiple of the 128 / 256
     * k batches), odd N, segments, row windows */
    static const int tc_rows[] = {1, 2, 3, 8, 9, 17, 32};
    for (size_t b = 0; b < 2; b++)
        for (size_t g = 0; g < 3; g++)
            for (size_t r = 0; r < sizeof tc_rows / sizeof tc_rows[0]; r++, c++)
                test_qmv_tc(tc_rows[r], 131, r % 2 ? 640 : 1152, b ? 8 : 4, groups[g], sbts[c % 3],
                            1 + (int)(r % 3), 0, -1);
    test_qmv_tc(32, 257, 4096, 4, 64, MX_BF16, 1, 8, -1);  /* 4 passes of 8 rows */
    test_qmv_tc(17, 100, 640, 8, 32, MX_F16, 2, 5, -1);    /* passes 5, 5, 5, 2 */
    test_qmv_tc(5, 4000, 4096, 4, 128, MX_F32, 3, 0, -1);  /* many CTAs: 4 warps per CTA */
    test_qmv_tc(1, 17, 14336, 4, 64, MX_BF16, 1, 0, -1);   /* long K, one CTA per segment */
    /* the streaming qmv, every launch variant: bits x groups x rows x segments; K = 640 / 1152
     * (partial last stage), odd N (partial row blocks); bf16 scales only */
    for (size_t b = 0; b < 2; b++)
        for (size_t g = 0; g < 3; g++)
            for (size_t r = 0; r < sizeof tc_rows / sizeof tc_rows[0]; r++)
                test_qmv_tc(tc_rows[r], 131, r % 2 ? 640 : 1152, b ? 8 : 4, groups[g], MX_BF16,
                            1 + (int)(r % 3), 0, 0);
    for (int v = 1; v < cuda_qmv_bulk_variants(); v++) /* the other launch shapes: a few cases */
        for (size_t b = 0; b < 2; b++) {
            test_qmv_tc(3, 131, 1152, b ? 8 : 4, 64, MX_BF16, 2, 0, v);
            test_qmv_tc(17, 131, 640, b ? 8 : 4, 32, MX_BF16, 3, 0, v);
        }
    test_qmv_tc(9, 1000, 2048, 4, 64, MX_BF16, 3, 0, 0);  /* many CTAs */
    /* K that ends inside a warp's super-tile (4 lanes x 16 bytes): part of the warp has no
     * codes yet must join the MMAs (4-bit: K % 128, 8-bit: K % 64); 64 and 128 are the K of
     * the quantized e2e fixtures (hidden 64, intermediate 128) */
    test_qmv_tc(17, 64, 64, 4, 32, MX_BF16, 3, 0, 0);
    test_qmv_tc(2, 64, 128 + 64, 4, 32, MX_BF16, 2, 0, 0);
    test_qmv_tc(17, 64, 96, 8, 32, MX_BF16, 1, 0, 0);
    test_qmv_tc(9, 40, 640 + 32, 8, 32, MX_BF16, 2, 0, 3);
    test_qmv_tc(1, 17, 14336, 8, 128, MX_BF16, 1, 0, 0);  /* long K */
    test_qmv_tc(5, 70, 192, 8, 64, MX_BF16, 2, 0, 0);     /* tiled: a block's second step empty */
    test_qmv_tc(30, 70, 192, 4, 64, MX_BF16, 1, 0, 0);
    /* the one-stream 4-bit kernel: groups 64 / 128 x rows x segments x scale dtypes; K = 640
     * (a partial load batch: 10 groups of 64, 5 of 128), odd N (partial 16-row tiles), K split
     * over 1..8 warps (few rows: split; 4000 rows: not) */
    static const int mma_rows[] = {1, 2, 3, 5, 8};
    for (size_t g = 1; g < 3; g++)
        for (size_t r = 0; r < sizeof mma_rows / sizeof mma_rows[0]; r++, c++)
            test_qmv_tc(mma_rows[r], 131, r % 2 ? 640 : 4096, 4, groups[g], sbts[c % 2],
                        1 + (int)(r % 3), 0, QT_MMA);
    test_qmv_tc(1, 4000, 1024, 4, 64, MX_BF16, 3, 0, QT_MMA);
    test_qmv_tc(8, 17, 14336, 4, 64, MX_F16, 1, 0, QT_MMA); /* long K */
    test_qmv_tc(3, 17, 14336 + 128, 4, 128, MX_BF16, 2, 0, QT_MMA); /* a partial last batch */
    test_qmv_tc(2, 40, 64, 4, 64, MX_BF16, 2, 0, QT_MMA);   /* one group */
    /* the int8-activation kernel: the same cases, 4- and 8-bit */
    for (int b8 = 0; b8 < 2; b8++)
        for (size_t g = 1; g < 3; g++)
            for (size_t r = 0; r < sizeof mma_rows / sizeof mma_rows[0]; r++, c++)
                test_qmv_tc(mma_rows[r], 131, r % 2 ? 640 : 4096, b8 ? 8 : 4, groups[g],
                            sbts[c % 2], 1 + (int)(r % 3), 0, QT_I8);
    test_qmv_tc(8, 17, 14336, 8, 64, MX_BF16, 1, 0, QT_I8);
    test_qmv_tc(2, 40, 64, 8, 64, MX_F16, 2, 0, QT_I8);
    test_qmv_tc(1, 4000, 1024, 4, 64, MX_BF16, 3, 0, QT_I8);
    test_qmv_tc(8, 17, 14336, 4, 64, MX_F16, 1, 0, QT_I8);
    test_qmv_tc(3, 17, 14336 + 128, 4, 128, MX_BF16, 2, 0, QT_I8); /* a partial last batch */
    test_qmv_tc(2, 40, 64, 4, 64, MX_BF16, 2, 0, QT_I8);
    test_qmv_tc(1, 64, 384, 4, 64, MX_BF16, 1, 0, QT_I8); /* 3 steps: one partial batch */
    test_qmv_tc_refusals();
    /* the dispatch every way: MLXCEL_QMV_TC / _BULK / _MMA / _I8 on and off */
    const bool tc_on = g_cu.qmv_tc, bulk_on = g_cu.qmv_bulk;
    const int mma_on = g_cu.qmv_mma, i8_on = g_cu.qmv_i8, i8_q8 = g_cu.qmv_i8_q8;
    for (int on = 0; on < 5; on++) { /* CUDA-core qmv + qmm, qmv_tc, streaming, mma, i8 */
        g_cu.qmv_tc = on == 1;
        g_cu.qmv_bulk = on >= 2;
        g_cu.qmv_mma = on == 3 ? 8 : 0;
        g_cu.qmv_i8 = g_cu.qmv_i8_q8 = on == 4 ? 8 : 0;
        test_matmul_q(8, 131, 640, 4, 64, MX_BF16, true);
        test_matmul_q(17, 131, 640, 8, 32, MX_F16, false);
        test_matmul_q(32, 257, 1152, 4, 128, MX_BF16, true);
        test_qkv(20, 1024, 1024, 256, 4);
    }
    g_cu.qmv_tc = tc_on;
    g_cu.qmv_bulk = bulk_on;
    g_cu.qmv_mma = mma_on;
    g_cu.qmv_i8 = i8_on;
    g_cu.qmv_i8_q8 = i8_q8;
    /* the tiled layout at the default settings: 8-bit one row (qmv_bulk), the streaming
     * kernel's row counts, and qmm */
    test_matmul_q(1, 131, 640, 8, 64, MX_BF16, true);
    test_matmul_q(6, 300, 1024, 8, 128, MX_BF16, false);
    test_matmul_q(20, 131, 640, 4, 64, MX_BF16, false);
    test_matmul_q(40, 200, 512, 8, 64, MX_BF16, true);
    test_matmul_q(40, 200, 512, 4, 128, MX_BF16, false);
    for (int f = 0; f < 2; f++) {
        test_glu_qmv(1, 300, 1024, 4, f ? ACT_GELU_TANH : ACT_SILU, f == 0);
        test_glu_qmv(5, 130, 14336 / 8, 4, ACT_SILU, f == 0);
        test_glu_qmv(8, 64, 512, 4, ACT_GELU, f == 0);
        test_glu_qmv(2, 100, 1024, 8, ACT_SILU, f == 0);
        test_norm_qmv(1, 4096, 4, 64, true, f == 0);
        test_norm_qmv(3, 1024, 4, 128, false, f == 0);
        test_norm_qmv(8, 2560, 4, 64, true, f == 0);
        test_norm_qmv(2, 512, 8, 64, true, f == 0);
    }
    test_qmv_rope(32, 8, 128, 4096, 4, true); /* the 8B q / k / v */
    test_qmv_rope(4, 2, 64, 1024, 4, false);
    test_qmv_rope(8, 2, 32, 512, 8, true);
    test_glu_down(1024, 2816, 8);
    test_glu_down(512, 1536, 4);
    test_q_chain(4096, 14336, 4, MX_BF16); /* the 8B layer's shapes */
    test_q_chain(512, 1472, 4, MX_F16);
    test_q_chain(1024, 2816, 8, MX_BF16);
    test_q_chain(4096, 14336, 8, MX_BF16); /* 8-bit: x as hi + lo; the down's from the GLU */
    test_qmm_tiles(17, 1000, 256, 4, 64, MX_BF16);
    test_qmm_tiles(33, 700, 384, 8, 64, MX_BF16);
    test_dequant_tiled(100, 640, 4, 64, 16, 70);  /* blocks; a partial last row tile */
    test_dequant_tiled(100, 640, 8, 128, 32, 68);
    test_dequant_tiled(100, 384, 4, 128, 5, 37);  /* code by code */
    test_dequant_tiled(100, 192, 8, 64, 3, 90);
    test_qmm_tiles(100, 2100, 384, 8, 128, MX_F16);
    test_qmm_tiles(300, 600, 512, 3, 32, MX_F32);
    for (size_t b = 0; b < 6; b++) {
        test_embed_q(97, 256, bits[b], 64, sbts[b % 3], 1.0f, false);
        test_embed_q(50, 384, bits[b], 128, sbts[(b + 1) % 3], 2.5f, b % 2 == 0);
    }
    test_moe_q(1, 8, 2, 256, 128, 4, false, MX_MOE_ROUTE_SOFTMAX);
    test_moe_q(5, 8, 2, 256, 128, 8, false, MX_MOE_ROUTE_SOFTMAX);
    test_moe_q(3, 8, 2, 256, 128, 4, true, MX_MOE_ROUTE_SOFTMAX);
    test_moe_q(100, 8, 2, 256, 128, 4, false, MX_MOE_ROUTE_SOFTMAX);
    test_moe_q(100, 8, 2, 256, 128, 4, true, MX_MOE_ROUTE_SOFTMAX);
    test_moe_q(1, 8, 1, 256, 128, 4, false, MX_MOE_ROUTE_SIGMOID_IN);
    test_moe_q(3, 8, 2, 256, 128, 4, true, MX_MOE_ROUTE_SIGMOID_IN);
    test_moe_q(100, 8, 2, 256, 128, 4, false, MX_MOE_ROUTE_SIGMOID_IN);
    /* end to end: the quantized parity fixtures, CUDA tokens vs CPU tokens */
    if (src_dir) {
        static const char *k_fix[] = {"llama_q4g32", "qwen2_q4g32", "qwen3_moe_q4g32",
                                      "mixtral_mlx_q4g32", "gemma3_text_q4g32"};
        for (size_t i = 0; i < sizeof k_fix / sizeof k_fix[0]; i++) {
            char dir[1200], name[96];
            snprintf(dir, sizeof dir, "%s/tests/fixtures/quant_parity/%s/q", src_dir, k_fix[i]);
            snprintf(name, sizeof name, "quant %s", k_fix[i]);
            gt_e2e_fixture(dir, name);
        }
        /* the demo model quantized with groups the tiled layout takes: the load-time repack
         * end to end (4-bit bitwise against the MLX layout; 8-bit also against the CPU) */
        char tmp[] = "/tmp/mlxcel_gpu_q_XXXXXX";
        if (mkdtemp(tmp)) {
            static const int k_q[3][2] = {{4, 64}, {8, 64}, {4, 128}};
            for (int i = 0; i < 3; i++) {
                char in[1200], out[1200], name[96];
                snprintf(in, sizeof in, "%s/models/wordnet-chat-16m", src_dir);
                snprintf(out, sizeof out, "%s/q%dg%d", tmp, k_q[i][0], k_q[i][1]);
                snprintf(name, sizeof name, "demo q%dg%d", k_q[i][0], k_q[i][1]);
                mlxq_convert_opts o;
                mlxq_convert_defaults(&o);
                o.hf_path = in, o.mlx_path = out, o.quantize = true, o.progress = -2;
                o.bits = k_q[i][0], o.group_size = k_q[i][1];
                mx_error err;
                if (mlxq_convert(&o, &err)) {
                    printf("FAIL convert %s: %s\n", name, err.msg);
                    g_failures++, g_checks++;
                    continue;
                }
                gt_e2e_tiled(out, name, k_q[i][0] == 4);
                if (k_q[i][0] == 8) gt_e2e_fixture(out, name);
            }
            char cmd[1300];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
            if (system(cmd)) printf("note: could not remove %s\n", tmp);
        }
    }
    return 0;
}
