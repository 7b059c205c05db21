/* CUDA ops vs CPU ops on fresh random inputs (bf16 tolerances), and the test binary's main.
 *
 * Every check: the same bf16 weights and fp32 activations go to both backends; the CUDA
 * output buffer is poisoned with NaN first (an unwritten element fails the check); the error
 * is ||cuda - cpu|| / ||cpu||. Tolerances: 1e-5 where both sides do the same fp32 arithmetic
 * (elementwise), 2e-5 for reductions in another order (norms, GEMV), 1e-2 where the CUDA side
 * rounds an operand to bf16 (cuBLASLt input, bf16 KV cache). */
#include <time.h>

#include "gpu_test.h"

#include "backend/cuda/cuda_be.h"
#include "backend/cuda/cuda_elem.h"
#include "model/model_spec.h"

const backend_ops *g_cpu, *g_gpu;
int g_failures, g_checks;
uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static long g_first_bad = -1; /* index of the first non-finite element of the last comparison */

/* ==== Helpers ==== */
void gt_report(const char *what, double rel, double tol, long nan_count) {
    const int ok = nan_count == 0 && rel <= tol && rel == rel;
    g_checks++;
    if (!ok) g_failures++;
    printf("%-4s %-58s rel %.2e (tol %.0e)", ok ? "ok" : "FAIL", what, rel, tol);
    if (nan_count) printf(" NON-FINITE/UNWRITTEN: %ld, first at %ld", nan_count, g_first_bad);
    printf("\n");
}

/* gt_report with the non-finite count read after the comparison (an argument list has no
 * evaluation order, so passing `bad` next to gt_rel_err(..., &bad) would read it unset). */
void gt_report_err(const char *what, double rel, double tol, const long *nan_count) {
    gt_report(what, rel, tol, *nan_count);
}

double gt_rel_err(const float *a, const float *ref, size_t n, long *nan_count) {
    double num = 0, den = 0;
    long bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) {
            if (!bad) g_first_bad = (long)i;
            bad++;
            continue;
        }
        const double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    *nan_count = bad;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static uint64_t next_u64(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

float gt_randn(void) { /* sum of 4 uniforms, variance 1 */
    float s = 0;
    for (int i = 0; i < 4; i++) s += (float)((next_u64() >> 40) & 0xffffff) / 16777216.0f - 0.5f;
    return s * 1.7320508f;
}

void gt_fill(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = gt_randn() * scale;
}

uint16_t *gt_bf16(const float *x, size_t n) {
    uint16_t *b = malloc(n * 2);
    for (size_t i = 0; i < n; i++) b[i] = mx_f32_to_bf16(x[i]);
    return b;
}

void gt_round_bf16(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = mx_bf16_to_f32(mx_f32_to_bf16(x[i]));
}

static mx_tensor shaped(void *data, mx_dtype t, int ndim, const int64_t *shape, mx_device dev) {
    if (ndim == 1) return mx_tensor_1d(data, t, shape[0], dev);
    if (ndim == 2) return mx_tensor_2d(data, t, shape[0], shape[1], dev);
    return mx_tensor_3d(data, t, shape[0], shape[1], shape[2], dev);
}

mx_tensor gt_dev_f32(const float *host, int ndim, const int64_t *shape) {
    mx_tensor h = shaped((void *)host, MX_F32, ndim, shape, MX_DEV_CPU);
    mx_tensor d = shaped(g_gpu->alloc(mx_tensor_nbytes(&h)), MX_F32, ndim, shape, MX_DEV_CUDA);
    g_gpu->copy_from_host(&d, host);
    return d;
}

mx_tensor gt_dev_poison(int ndim, const int64_t *shape) {
    mx_tensor d = shaped(NULL, MX_F32, ndim, shape, MX_DEV_CUDA);
    const size_t n = (size_t)mx_tensor_numel(&d);
    float *nan = malloc(n * 4);
    for (size_t i = 0; i < n; i++) nan[i] = NAN;
    d.data = g_gpu->alloc(n * 4);
    g_gpu->copy_from_host(&d, nan);
    free(nan);
    return d;
}

mx_tensor gt_dev_weight(const uint16_t *bf, int ndim, const int64_t *shape) {
    mx_tensor h = shaped((void *)bf, MX_BF16, ndim, shape, MX_DEV_CPU), d;
    mx_error err;
    if (g_gpu->upload(&d, &h, &err)) {
        fprintf(stderr, "upload failed: %s\n", err.msg);
        exit(2);
    }
    return d;
}

void gt_to_host(float *dst, const mx_tensor *t) { g_gpu->copy_to_host(dst, t); }
void gt_dev_free(mx_tensor *t) {
    if (t->data) g_gpu->free(t->data);
    t->data = NULL;
}

static void check_dev(const char *what, const mx_tensor *dev, const float *ref, double tol) {
    const size_t n = (size_t)mx_tensor_numel(dev);
    float *o = malloc(n * 4);
    gt_to_host(o, dev);
    long bad;
    const double rel = gt_rel_err(o, ref, n, &bad);
    gt_report(what, rel, tol, bad);
    free(o);
}

/* ==== Ops ==== */
static void test_matmul(int rows, int N, int K, bool bias) {
    float *x = malloc((size_t)rows * K * 4), *w = malloc((size_t)N * K * 4), *b = malloc((size_t)N * 4);
    float *ref = malloc((size_t)rows * N * 4);
    gt_fill(x, (size_t)rows * K, 1.0f);
    gt_fill(w, (size_t)N * K, 1.0f / sqrtf((float)K));
    gt_fill(b, (size_t)N, 0.5f);
    uint16_t *wb = gt_bf16(w, (size_t)N * K), *bb = gt_bf16(b, (size_t)N);
    const int64_t sx[2] = {rows, K}, sw[2] = {N, K}, so[2] = {rows, N}, sb[1] = {N};
    /* the GEMVs keep fp32 x (the tensor-core one as bf16 hi + lo parts): the reference takes
     * the same x; cuBLASLt rounds x to bf16 (tolerance 1e-2) */
    const int gemv = rows <= g_cu.gemv_rows;
    float *xr = malloc((size_t)rows * K * 4);
    memcpy(xr, x, (size_t)rows * K * 4);
    mx_tensor hx = mx_tensor_2d(xr, MX_F32, rows, K, MX_DEV_CPU);
    mx_tensor hw = mx_tensor_2d(wb, MX_BF16, N, K, MX_DEV_CPU), hb = mx_tensor_1d(bb, MX_BF16, N, MX_DEV_CPU);
    mx_tensor ho = mx_tensor_2d(ref, MX_F32, rows, N, MX_DEV_CPU), none = {0};
    g_cpu->matmul(&ho, &hx, &hw, bias ? &hb : &none);
    mx_tensor dx = gt_dev_f32(x, 2, sx), dw = gt_dev_weight(wb, 2, sw), db = gt_dev_weight(bb, 1, sb);
    mx_tensor dout = gt_dev_poison(2, so);
    g_gpu->matmul(&dout, &dx, &dw, bias ? &db : &none);
    char what[96];
    char ks[16] = "";
    if (gemv && rows <= 2 && cuda_gemv_ksplit()) snprintf(ks, sizeof ks, " K split %d", cuda_gemv_ksplit());
    snprintf(what, sizeof what, "matmul rows %d N %d K %d%s (%s%s)", rows, N, K, bias ? " +bias" : "",
             gemv ? (K % 8 ? "generic gemv" : "gemv") : "cuBLASLt", ks);
    check_dev(what, &dout, ref, gemv ? 3e-5 : 1e-2);
    gt_dev_free(&dx), gt_dev_free(&dw), gt_dev_free(&db), gt_dev_free(&dout);
    free(x), free(xr), free(w), free(b), free(ref), free(wb), free(bb);
}

/* Q/K/V-style: three matmuls on one x are held and launched as one multi-segment GEMV. joined:
 * the weights go up as one buffer (upload_group, as the loader does for Q/K/V), so past the
 * GEMV rows the three run as one cuBLASLt GEMM plus the column split (with the bias). */
static void test_matmul_fused(int rows, bool joined) {
    const int K = 4096, Ns[3] = {4096, 1024, 1000};
    float *x = malloc((size_t)rows * K * 4);
    gt_fill(x, (size_t)rows * K, 1.0f);
    const int64_t sx[2] = {rows, K};
    mx_tensor dx = gt_dev_f32(x, 2, sx), none = {0};
    mx_tensor hx = mx_tensor_2d(x, MX_F32, rows, K, MX_DEV_CPU);
    mx_tensor dw[3], dout[3], hb = {0}, db = {0};
    float *ref[3];
    uint16_t *wb[3];
    float bias[1000];
    gt_fill(bias, 1000, 1.0f);
    uint16_t *bb = gt_bf16(bias, 1000);
    const int64_t sb[1] = {1000};
    hb = mx_tensor_1d(bb, MX_BF16, 1000, MX_DEV_CPU);
    db = gt_dev_weight(bb, 1, sb);
    for (int i = 0; i < 3; i++) {
        float *w = malloc((size_t)Ns[i] * K * 4);
        gt_fill(w, (size_t)Ns[i] * K, 1.0f / 64.0f);
        wb[i] = gt_bf16(w, (size_t)Ns[i] * K);
        free(w);
        ref[i] = malloc((size_t)rows * Ns[i] * 4);
        mx_tensor hw = mx_tensor_2d(wb[i], MX_BF16, Ns[i], K, MX_DEV_CPU);
        mx_tensor ho = mx_tensor_2d(ref[i], MX_F32, rows, Ns[i], MX_DEV_CPU);
        g_cpu->matmul(&ho, &hx, &hw, i == 2 ? &hb : &none);
        const int64_t sw[2] = {Ns[i], K}, so[2] = {rows, Ns[i]};
        if (!joined) dw[i] = gt_dev_weight(wb[i], 2, sw);
        dout[i] = gt_dev_poison(2, so);
    }
    if (joined) {
        mx_tensor hw[3];
        mx_error err;
        for (int i = 0; i < 3; i++) hw[i] = mx_tensor_2d(wb[i], MX_BF16, Ns[i], K, MX_DEV_CPU);
        if (g_gpu->upload_group(dw, hw, 3, &err)) {
            fprintf(stderr, "upload_group failed: %s\n", err.msg);
            exit(2);
        }
    }
    for (int i = 0; i < 3; i++) g_gpu->matmul(&dout[i], &dx, &dw[i], i == 2 ? &db : &none);
    for (int i = 0; i < 3; i++) {
        char what[96];
        snprintf(what, sizeof what, "%s rows %d segment %d (N %d%s)",
                 joined ? "joined weights" : "fused gemv", rows, i, Ns[i], i == 2 ? " +bias" : "");
        check_dev(what, &dout[i], ref[i], rows <= g_cu.gemv_rows ? 3e-5 : 1e-2);
        if (!joined || i == 0) gt_dev_free(&dw[i]); /* joined: one allocation, at dw[0] */
        gt_dev_free(&dout[i]);
        free(ref[i]), free(wb[i]);
    }
    gt_dev_free(&dx), gt_dev_free(&db);
    free(x), free(bb);
}

/* glu(g, g, u) then a GEMV-sized matmul on g: one GEMV computing act(g) * u as its input. */
static void test_glu_matmul_fused(int rows, int act) {
    const int K = 1536, N = 520;
    float *g = malloc((size_t)rows * K * 4), *u = malloc((size_t)rows * K * 4);
    float *w = malloc((size_t)N * K * 4), *ref = malloc((size_t)rows * N * 4);
    gt_fill(g, (size_t)rows * K, 2.0f);
    gt_fill(u, (size_t)rows * K, 1.0f);
    gt_fill(w, (size_t)N * K, 1.0f / 32.0f);
    uint16_t *wb = gt_bf16(w, (size_t)N * K);
    const int64_t sx[2] = {rows, K}, sw[2] = {N, K}, so[2] = {rows, N};
    mx_tensor dg = gt_dev_f32(g, 2, sx), du = gt_dev_f32(u, 2, sx), dw = gt_dev_weight(wb, 2, sw);
    mx_tensor dout = gt_dev_poison(2, so);
    mx_tensor hg = mx_tensor_2d(g, MX_F32, rows, K, MX_DEV_CPU), hu = mx_tensor_2d(u, MX_F32, rows, K, MX_DEV_CPU);
    mx_tensor hw = mx_tensor_2d(wb, MX_BF16, N, K, MX_DEV_CPU), ho = mx_tensor_2d(ref, MX_F32, rows, N, MX_DEV_CPU);
    mx_tensor none = {0};
    g_cpu->glu(&hg, &hg, &hu, act);
    g_cpu->matmul(&ho, &hg, &hw, &none);
    g_gpu->glu(&dg, &dg, &du, act);
    g_gpu->matmul(&dout, &dg, &dw, &none);
    char what[96];
    snprintf(what, sizeof what, "glu (act %d) fused into the gemv, rows %d", act, rows);
    /* act/exp in another library: a little looser; past the GEMV rows the GLU is computed by
     * the bf16 conversion feeding cuBLASLt */
    check_dev(what, &dout, ref, rows <= g_cu.gemv_rows ? 1e-4 : 1e-2);
    gt_dev_free(&dg), gt_dev_free(&du), gt_dev_free(&dw), gt_dev_free(&dout);
    free(g), free(u), free(w), free(ref), free(wb);
}

static void test_norm_rope_elem(void) {
    /* rms_norm over [rows, D] and per head [n, heads, D], offsets 0 and 1 */
    const int n = 5, heads = 8, D = 128, H = 4096;
    float *x = malloc((size_t)n * H * 4), *ref = malloc((size_t)n * H * 4), *wv = malloc((size_t)H * 4);
    gt_fill(x, (size_t)n * H, 2.0f);
    gt_fill(wv, H, 0.1f);
    for (int i = 0; i < H; i++) wv[i] += 1.0f;
    uint16_t *wb = gt_bf16(wv, H);
    for (int off = 0; off < 2; off++) {
        const int64_t sx[2] = {n, H}, sw[1] = {H};
        mx_tensor hx = mx_tensor_2d(x, MX_F32, n, H, MX_DEV_CPU), ho = mx_tensor_2d(ref, MX_F32, n, H, MX_DEV_CPU);
        mx_tensor hw = mx_tensor_1d(wb, MX_BF16, H, MX_DEV_CPU);
        g_cpu->rms_norm(&ho, &hx, &hw, 1e-5f, (float)off);
        mx_tensor dx = gt_dev_f32(x, 2, sx), dw = gt_dev_weight(wb, 1, sw), dout = gt_dev_poison(2, sx);
        g_gpu->rms_norm(&dout, &dx, &dw, 1e-5f, (float)off);
        check_dev(off ? "rms_norm [5, 4096] offset 1" : "rms_norm [5, 4096]", &dout, ref, 2e-5);
        /* per head, in place */
        const int64_t s3[3] = {n, heads, D}, sd[1] = {D};
        mx_tensor h3 = mx_tensor_3d(x, MX_F32, n, heads, D, MX_DEV_CPU), o3 = mx_tensor_3d(ref, MX_F32, n, heads, D, MX_DEV_CPU);
        mx_tensor hwd = mx_tensor_1d(wb, MX_BF16, D, MX_DEV_CPU);
        g_cpu->rms_norm(&o3, &h3, &hwd, 1e-6f, (float)off);
        mx_tensor d3 = gt_dev_f32(x, 3, s3), dwd = gt_dev_weight(wb, 1, sd);
        g_gpu->rms_norm(&d3, &d3, &dwd, 1e-6f, (float)off);
        check_dev("rms_norm per head [5, 8, 128] in place", &d3, ref, 2e-5);
        gt_dev_free(&dx), gt_dev_free(&dw), gt_dev_free(&dout), gt_dev_free(&d3), gt_dev_free(&dwd);
    }
    /* rope: full and partial rotary, angles up to 1e4 rad */
    for (int rot = D; rot >= D / 2; rot /= 2) {
        float *cs = malloc((size_t)n * rot * 4);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < rot / 2; j++) {
                const double a = (double)(i * 997 + 3) / pow(10000.0, 2.0 * j / rot);
                cs[(size_t)i * rot + 2 * j] = (float)cos(a);
                cs[(size_t)i * rot + 2 * j + 1] = (float)sin(a);
            }
        memcpy(ref, x, (size_t)n * heads * D * 4);
        mx_tensor h3 = mx_tensor_3d(ref, MX_F32, n, heads, D, MX_DEV_CPU);
        g_cpu->rope(&h3, cs, rot);
        const int64_t s3[3] = {n, heads, D}, sc[2] = {n, rot};
        mx_tensor d3 = gt_dev_f32(x, 3, s3), dcs = gt_dev_f32(cs, 2, sc);
        g_gpu->rope(&d3, dcs.data, rot);
        check_dev(rot == D ? "rope [5, 8, 128]" : "rope partial rot 64", &d3, ref, 1e-6);
        gt_dev_free(&d3), gt_dev_free(&dcs);
        free(cs);
    }
    /* add, glu (3 activations), softcap, gather, convert */
    const int rows = 7, cols = 1000;
    float *a = malloc((size_t)rows * cols * 4), *b = malloc((size_t)rows * cols * 4);
    gt_fill(a, (size_t)rows * cols, 3.0f);
    gt_fill(b, (size_t)rows * cols, 3.0f);
    const int64_t s2[2] = {rows, cols};
    mx_tensor ha = mx_tensor_2d(a, MX_F32, rows, cols, MX_DEV_CPU), hb = mx_tensor_2d(b, MX_F32, rows, cols, MX_DEV_CPU);
    mx_tensor hr = mx_tensor_2d(ref, MX_F32, rows, cols, MX_DEV_CPU);
    memcpy(ref, a, (size_t)rows * cols * 4);
    g_cpu->add(&hr, &hb);
    mx_tensor da = gt_dev_f32(a, 2, s2), db = gt_dev_f32(b, 2, s2), dout = gt_dev_poison(2, s2);
    g_gpu->add(&da, &db);
    check_dev("add [7, 1000]", &da, ref, 1e-7);
    gt_dev_free(&da);
    for (int act = ACT_SILU; act <= ACT_GELU; act++) {
        g_cpu->glu(&hr, &ha, &hb, act);
        da = gt_dev_f32(a, 2, s2);
        g_gpu->glu(&dout, &da, &db, act);
        check_dev(act == ACT_SILU ? "glu silu" : act == ACT_GELU_TANH ? "glu gelu tanh" : "glu gelu erf",
                  &dout, ref, 1e-5);
        gt_dev_free(&da);
    }
    memcpy(ref, a, (size_t)rows * cols * 4);
    g_cpu->softcap(&hr, 2.5f);
    da = gt_dev_f32(a, 2, s2);
    g_gpu->softcap(&da, 2.5f);
    check_dev("softcap 2.5", &da, ref, 1e-6);
    const int32_t idx[4] = {6, 0, 3, 3};
    const int64_t sg[2] = {4, cols};
    mx_tensor hg = mx_tensor_2d(ref, MX_F32, 4, cols, MX_DEV_CPU), dg = gt_dev_poison(2, sg);
    /* from b: da was soft-capped on the device above, ha was not */
    g_cpu->gather_rows(&hg, &hb, idx, 4);
    g_gpu->gather_rows(&dg, &db, idx, 4);
    check_dev("gather_rows 4 of 7", &dg, ref, 0);
    /* convert f32 -> bf16 -> f32 on the device vs rounding on the host */
    mx_tensor dbf = {0};
    dbf = mx_tensor_2d(g_gpu->alloc((size_t)rows * cols * 2), MX_BF16, rows, cols, MX_DEV_CUDA);
    mx_tensor dback = gt_dev_poison(2, s2);
    g_gpu->convert(&dbf, &db);
    g_gpu->convert(&dback, &dbf);
    memcpy(ref, b, (size_t)rows * cols * 4);
    gt_round_bf16(ref, (size_t)rows * cols);
    check_dev("convert f32 -> bf16 -> f32", &dback, ref, 0);
    gt_dev_free(&da), gt_dev_free(&db), gt_dev_free(&dout), gt_dev_free(&dg), gt_dev_free(&dbf),
        gt_dev_free(&dback);
    /* embedding with a scale, plain and rounded to the table dtype */
    const int V = 300, E = 256, ne = 6;
    float *tab = malloc((size_t)V * E * 4);
    gt_fill(tab, (size_t)V * E, 1.0f);
    uint16_t *tb = gt_bf16(tab, (size_t)V * E);
    const int32_t ids[6] = {0, 299, 17, 17, 150, 3};
    const int64_t st[2] = {V, E}, se[2] = {ne, E};
    mx_tensor ht = mx_tensor_2d(tb, MX_BF16, V, E, MX_DEV_CPU), he = mx_tensor_2d(ref, MX_F32, ne, E, MX_DEV_CPU);
    mx_tensor dt = gt_dev_weight(tb, 2, st);
    for (int round = 0; round < 2; round++) {
        g_cpu->embed(&he, &ht, ids, ne, 45.25f, round);
        mx_tensor de = gt_dev_poison(2, se);
        g_gpu->embed(&de, &dt, ids, ne, 45.25f, round);
        check_dev(round ? "embed x scale, rounded to bf16" : "embed x scale", &de, ref, 1e-7);
        gt_dev_free(&de);
    }
    gt_dev_free(&dt);
    free(tab), free(tb), free(a), free(b), free(x), free(ref), free(wv), free(wb);
}

/* MoE: device routing + pair GEMVs (few rows) and the grouped path (many rows). */
static void test_moe(int n, int E, int k, int H, int I, int routing) {
    float *x = malloc((size_t)n * H * 4), *rl = malloc((size_t)n * E * 4), *ref = malloc((size_t)n * H * 4);
    gt_fill(x, (size_t)n * H, 1.0f);
    gt_fill(rl, (size_t)n * E, 2.0f);
    float *wg = malloc((size_t)E * I * H * 4), *wd = malloc((size_t)E * H * I * 4);
    float *wu = malloc((size_t)E * I * H * 4);
    gt_fill(wg, (size_t)E * I * H, 1.0f / sqrtf((float)H));
    gt_fill(wu, (size_t)E * I * H, 1.0f / sqrtf((float)H));
    gt_fill(wd, (size_t)E * H * I, 1.0f / sqrtf((float)I));
    uint16_t *bg = gt_bf16(wg, (size_t)E * I * H), *bu = gt_bf16(wu, (size_t)E * I * H);
    uint16_t *bd = gt_bf16(wd, (size_t)E * H * I);
    mx_tensor *hg = calloc((size_t)E, sizeof *hg), *hu = calloc((size_t)E, sizeof *hu), *hd = calloc((size_t)E, sizeof *hd);
    mx_tensor *dg = calloc((size_t)E, sizeof *dg), *du = calloc((size_t)E, sizeof *du), *dd = calloc((size_t)E, sizeof *dd);
    const int64_t s_gu[2] = {I, H}, s_d[2] = {H, I}, sx[2] = {n, H}, sr[2] = {n, E};
    for (int e = 0; e < E; e++) {
        hg[e] = mx_tensor_2d(bg + (size_t)e * I * H, MX_BF16, I, H, MX_DEV_CPU);
        hu[e] = mx_tensor_2d(bu + (size_t)e * I * H, MX_BF16, I, H, MX_DEV_CPU);
        hd[e] = mx_tensor_2d(bd + (size_t)e * H * I, MX_BF16, H, I, MX_DEV_CPU);
        dg[e] = gt_dev_weight(bg + (size_t)e * I * H, 2, s_gu);
        du[e] = gt_dev_weight(bu + (size_t)e * I * H, 2, s_gu);
        dd[e] = gt_dev_weight(bd + (size_t)e * H * I, 2, s_d);
    }
    mx_moe_params p = {.n_experts = E, .top_k = k, .norm_topk = true, .activation = ACT_SILU,
                       .routing = routing};
    mx_moe_experts hex = {.gate = hg, .up = hu, .down = hd}, dex = {.gate = dg, .up = du, .down = dd};
    mx_tensor hx = mx_tensor_2d(x, MX_F32, n, H, MX_DEV_CPU), hr = mx_tensor_2d(rl, MX_F32, n, E, MX_DEV_CPU);
    mx_tensor ho = mx_tensor_2d(ref, MX_F32, n, H, MX_DEV_CPU);
    mx_error err;
    g_cpu->moe(&ho, &hx, &hr, &hex, &p, &err);
    mx_tensor dx = gt_dev_f32(x, 2, sx), dr = gt_dev_f32(rl, 2, sr), dout = gt_dev_poison(2, sx);
    char what[96];
    snprintf(what, sizeof what, "moe %d rows, %d experts top %d, H %d I %d (%s%s)", n, E, k, H, I,
             n <= CU_MOE_PAIR_MAX_ROWS ? "pairs" : "grouped",
             routing == MX_MOE_ROUTE_SIGMOID_IN ? ", llama4 sigmoid-input routing" : "");
    if (g_gpu->moe(&dout, &dx, &dr, &dex, &p, &err)) {
        printf("FAIL %s: %s\n", what, err.msg);
        g_failures++, g_checks++;
    } else {
        /* grouped matmuls of > 8 rows use cuBLASLt (bf16 inputs) */
        check_dev(what, &dout, ref, n <= CU_MOE_PAIR_MAX_ROWS ? 2e-5 : 1e-2);
    }
    for (int e = 0; e < E; e++) gt_dev_free(&dg[e]), gt_dev_free(&du[e]), gt_dev_free(&dd[e]);
    gt_dev_free(&dx), gt_dev_free(&dr), gt_dev_free(&dout);
    free(hg), free(hu), free(hd), free(dg), free(du), free(dd), free(bg), free(bu), free(bd);
    free(wg), free(wu), free(wd), free(x), free(rl), free(ref);
}

/* Device greedy: argmax (NaN = -inf, lowest id on ties) and log-softmax of the chosen id.
 * V: 128256 (chunks held in registers), 1000 (one chunk), 300007 (chunks walked in a loop). */
static void test_greedy(int V) {
    const int n = 4;
    float *lg = malloc((size_t)n * V * 4);
    gt_fill(lg, (size_t)n * V, 3.0f);
    lg[(size_t)1 * V + 77] = 50.0f; /* row 1: a tie at 77 and 99: 77 wins */
    lg[(size_t)1 * V + 99] = 50.0f;
    lg[(size_t)2 * V + 5] = NAN;    /* row 2: NaN never wins */
    for (int v = 0; v < V; v++) lg[(size_t)3 * V + v] = -INFINITY; /* row 3: nothing finite */
    const int64_t sl[2] = {n, V};
    mx_tensor dl = gt_dev_f32(lg, 2, sl);
    int32_t ids[4];
    float lps[4];
    mx_error err;
    if (g_gpu->greedy_rows(ids, lps, &dl, &err)) {
        printf("FAIL greedy_rows: %s\n", err.msg);
        g_failures++, g_checks++;
        free(lg);
        return;
    }
    for (int r = 0; r < n; r++) {
        const float *x = lg + (size_t)r * V;
        int best = -1;
        for (int v = 0; v < V; v++)
            if (x[v] == x[v] && x[v] != -INFINITY && (best < 0 || x[v] > x[best])) best = v;
        double lse = 0;
        for (int v = 0; v < V && best >= 0; v++)
            if (x[v] == x[v] && x[v] != -INFINITY) lse += exp((double)x[v] - x[best]);
        const double want_lp = best >= 0 ? -log(lse) : -INFINITY;
        char what[96];
        snprintf(what, sizeof what, "greedy V %d row %d: id %d (want %d), logprob %.5f (want %.5f)",
                 V, r, ids[r], best, lps[r], want_lp);
        const double d = best >= 0 ? fabs(lps[r] - want_lp) / (fabs(want_lp) + 1e-3) : (lps[r] == -INFINITY ? 0 : 1);
        gt_report(what, ids[r] == best ? d : 1.0, 1e-4, 0);
    }
    gt_dev_free(&dl);
    free(lg);
}

/* The streaming tensor-core GEMV directly (every launch variant): two segments sharing bf16 x
 * (N and N + 21 rows: partial 16-row CTAs), K with a partial k-tile and a partial stage; the
 * reference multiplies the same bf16-rounded x (fp32 accumulation: tolerance 1e-4). */
static void test_gemv_tc(int rows, int N, int K) {
    const int Ns[2] = {N, N + 21};
    float *x = calloc((size_t)rows * K, 4);
    gt_fill(x, (size_t)rows * K, 1.0f);
    uint16_t *xb = gt_bf16(x, (size_t)rows * K);
    for (size_t i = 0; i < (size_t)rows * K; i++) x[i] = mx_bf16_to_f32(xb[i]);
    mx_tensor dxb = gt_dev_weight(xb, 2, (const int64_t[]){rows, K}); /* bf16 bits on the device */
    mx_tensor dw[2];
    float *ref[2];
    for (int sgi = 0; sgi < 2; sgi++) {
        float *w = malloc((size_t)Ns[sgi] * K * 4);
        gt_fill(w, (size_t)Ns[sgi] * K, 1.0f / sqrtf((float)K));
        uint16_t *wb = gt_bf16(w, (size_t)Ns[sgi] * K);
        ref[sgi] = malloc((size_t)rows * Ns[sgi] * 4);
        mx_tensor hx = mx_tensor_2d(x, MX_F32, rows, K, MX_DEV_CPU);
        mx_tensor hw = mx_tensor_2d(wb, MX_BF16, Ns[sgi], K, MX_DEV_CPU);
        mx_tensor ho = mx_tensor_2d(ref[sgi], MX_F32, rows, Ns[sgi], MX_DEV_CPU), none = {0};
        g_cpu->matmul(&ho, &hx, &hw, &none);
        dw[sgi] = gt_dev_weight(wb, 2, (const int64_t[]){Ns[sgi], K});
        free(w), free(wb);
    }
    for (int v = 0; v < cuda_gemv_tc_variants(); v++) {
        mx_tensor dout[2];
        cuda_gemv_segs segs;
        memset(&segs, 0, sizeof segs);
        segs.n = 2;
        for (int sgi = 0; sgi < 2; sgi++) {
            dout[sgi] = gt_dev_poison(2, (const int64_t[]){rows, Ns[sgi]});
            segs.W[sgi] = dw[sgi].data, segs.y[sgi] = dout[sgi].data, segs.N[sgi] = Ns[sgi];
        }
        const int rc = cuda_gemv_tc(&segs, dxb.data, rows, K, v, g_cu.st);
        for (int sgi = 0; sgi < 2; sgi++) {
            char what[96];
            snprintf(what, sizeof what, "cuda_gemv_tc v%d rows %d [%d x %d] seg %d", v, rows,
                     Ns[sgi], K, sgi);
            if (rc) {
                gt_report(what, 1.0, 0, 1);
            } else {
                check_dev(what, &dout[sgi], ref[sgi], 1e-4);
            }
            gt_dev_free(&dout[sgi]);
        }
    }
    for (int sgi = 0; sgi < 2; sgi++) gt_dev_free(&dw[sgi]), free(ref[sgi]);
    gt_dev_free(&dxb);
    free(x), free(xb);
}

/* x as bf16 hi + lo parts (cuda_bf16_split_rows on the device) into the streaming GEMV: the
 * reference multiplies the fp32 x itself (tolerance 1e-4, as the fp32-x kernels). */
static void test_gemv_tc_split(int rows, int N, int K) {
    float *x = calloc((size_t)rows * K, 4), *w = malloc((size_t)N * K * 4);
    float *ref = malloc((size_t)rows * N * 4);
    gt_fill(x, (size_t)rows * K, 1.0f);
    gt_fill(w, (size_t)N * K, 1.0f / sqrtf((float)K));
    uint16_t *wb = gt_bf16(w, (size_t)N * K);
    mx_tensor hx = mx_tensor_2d(x, MX_F32, rows, K, MX_DEV_CPU);
    mx_tensor hw = mx_tensor_2d(wb, MX_BF16, N, K, MX_DEV_CPU);
    mx_tensor ho = mx_tensor_2d(ref, MX_F32, rows, N, MX_DEV_CPU), none = {0};
    g_cpu->matmul(&ho, &hx, &hw, &none);
    mx_tensor dw = gt_dev_weight(wb, 2, (const int64_t[]){N, K});
    mx_tensor dx = gt_dev_f32(x, 2, (const int64_t[]){rows, K});
    /* [2 rows, K] bf16 fits the bytes of [rows, K] fp32 */
    mx_tensor dxs = gt_dev_poison(2, (const int64_t[]){rows, K});
    const int rc0 = cuda_bf16_split_rows(dxs.data, dx.data, NULL, 0, rows, K, g_cu.st);
    for (int v = 0; v < cuda_gemv_tc_variants(); v++) {
        mx_tensor dout = gt_dev_poison(2, (const int64_t[]){rows, N});
        cuda_gemv_segs segs;
        memset(&segs, 0, sizeof segs);
        segs.n = 1;
        segs.W[0] = dw.data, segs.y[0] = dout.data, segs.N[0] = N;
        const int rc = rc0 ? rc0 : cuda_gemv_tc_split(&segs, dxs.data, rows, K, v, g_cu.st);
        char what[96];
        snprintf(what, sizeof what, "cuda_gemv_tc_split v%d rows %d [%d x %d]", v, rows, N, K);
        if (rc)
            gt_report(what, 1.0, 0, 1);
        else
            check_dev(what, &dout, ref, 1e-4);
        gt_dev_free(&dout);
    }
    gt_dev_free(&dw), gt_dev_free(&dx), gt_dev_free(&dxs);
    free(x), free(w), free(wb), free(ref);
}

float *gt_pool_to_host(const void *d, size_t n, bool bf16) {
    float *h = malloc(n * 4);
    if (bf16) {
        uint16_t *b = malloc(n * 2);
        cudaMemcpy(b, d, n * 2, cudaMemcpyDeviceToHost);
        for (size_t i = 0; i < n; i++) h[i] = mx_bf16_to_f32(b[i]);
        free(b);
    } else {
        cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost);
    }
    return h;
}

/* The q/k/v GEMV with RoPE + KV write in its epilogue (cuda_gemv_fuse.rope_cs) against the
 * plain launches on the same inputs (the GEMV, then cuda_rope_kv_f32): rotated q and k, v,
 * and both pools, including a row whose slot is -1 (not written). The same K split ks for
 * both, so the sums are the same; the rotation may contract differently (tolerance 1e-6,
 * pools one bf16 rounding). */
static void test_gemv_rope(int rows, int Hq, int Hkv, int D, int K, bool pool_bf16, int ks) {
    const int N[3] = {Hq * D, Hkv * D, Hkv * D}, half = D / 2, slots = 6;
    const size_t pool_n = (size_t)slots * Hkv * D, esz = pool_bf16 ? 2 : 4;
    float *x = malloc((size_t)rows * K * 4), *cs = malloc((size_t)rows * D * 4);
    gt_fill(x, (size_t)rows * K, 1.0f);
    for (int i = 0; i < rows * half; i++) {
        const float ang = 0.37f * (float)(i % half) + 11.0f * (float)(i / half);
        cs[2 * i] = cosf(ang), cs[2 * i + 1] = sinf(ang);
    }
    mx_tensor dx = gt_dev_f32(x, 2, (const int64_t[]){rows, K});
    mx_tensor dcs = gt_dev_f32(cs, 2, (const int64_t[]){rows, D});
    mx_tensor dw[3], y[2][3];
    for (int i = 0; i < 3; i++) {
        float *w = malloc((size_t)N[i] * K * 4);
        gt_fill(w, (size_t)N[i] * K, 1.0f / sqrtf((float)K));
        uint16_t *wb = gt_bf16(w, (size_t)N[i] * K);
        dw[i] = gt_dev_weight(wb, 2, (const int64_t[]){N[i], K});
        for (int pth = 0; pth < 2; pth++)
            y[pth][i] = gt_dev_poison(2, (const int64_t[]){rows, N[i]});
        free(w), free(wb);
    }
    const int64_t slot_h[2] = {4, -1};
    int64_t *slot_d = NULL;
    void *kp[2] = {NULL, NULL}, *vp[2] = {NULL, NULL};
    cudaMalloc((void **)&slot_d, sizeof slot_h);
    cudaMemcpy(slot_d, slot_h, sizeof slot_h, cudaMemcpyHostToDevice);
    for (int pth = 0; pth < 2; pth++) {
        cudaMalloc(&kp[pth], pool_n * esz), cudaMalloc(&vp[pth], pool_n * esz);
        cudaMemset(kp[pth], 0, pool_n * esz), cudaMemset(vp[pth], 0, pool_n * esz);
    }
    const int ks_prev = cuda_gemv_ksplit();
    cuda_set_gemv_ksplit(ks);
    int rc[2] = {-1, -1};
    for (int pth = 0; pth < 2; pth++) {
        cuda_gemv_segs segs;
        memset(&segs, 0, sizeof segs);
        segs.n = 3;
        for (int i = 0; i < 3; i++)
            segs.W[i] = dw[i].data, segs.y[i] = y[pth][i].data, segs.N[i] = N[i];
        if (pth == 0) {
            rc[0] = cuda_gemv_bf16_multi(&segs, dx.data, CUDA_OPS_F32, CUDA_OPS_F32, rows, K,
                                         g_cu.st);
            if (!rc[0])
                rc[0] = cuda_rope_kv_f32(y[0][0].data, N[0], y[0][1].data, N[1], y[0][2].data, N[2],
                                         dcs.data, rows, Hq, Hkv, D, D, slot_d, kp[0], vp[0],
                                         pool_bf16, g_cu.st);
        } else {
            cuda_gemv_fuse f;
            memset(&f, 0, sizeof f);
            f.rope_cs = dcs.data, f.rope_rows = slot_d, f.k_pool = kp[1], f.v_pool = vp[1];
            f.pool_bf16 = pool_bf16, f.head_dim = D;
            rc[1] = cuda_gemv_bf16_fused(&segs, &f, dx.data, rows, K, g_cu.st);
        }
    }
    cudaStreamSynchronize(g_cu.st);
    cuda_set_gemv_ksplit(ks_prev);
    static const char *names[3] = {"q", "k", "v"};
    char what[120];
    for (int i = 0; i < 3; i++) {
        snprintf(what, sizeof what, "gemv + rope + kv write, rows %d, %d/%d heads of %d, K %d, "
                 "ks %d: %s", rows, Hq, Hkv, D, K, ks, names[i]);
        if (rc[0] || rc[1]) {
            gt_report(what, 1.0, 0, 1);
            continue;
        }
        float *ref = malloc((size_t)rows * N[i] * 4);
        gt_to_host(ref, &y[0][i]);
        check_dev(what, &y[1][i], ref, 1e-6);
        free(ref);
    }
    for (int i = 0; i < 2 && !rc[0] && !rc[1]; i++) {
        float *a = gt_pool_to_host(i ? vp[0] : kp[0], pool_n, pool_bf16);
        float *b = gt_pool_to_host(i ? vp[1] : kp[1], pool_n, pool_bf16);
        long bad = 0;
        const double rel = gt_rel_err(b, a, pool_n, &bad);
        snprintf(what, sizeof what, "gemv + rope + kv write, rows %d, ks %d, %s pool (%s)", rows,
                 ks, i ? "v" : "k", pool_bf16 ? "bf16" : "fp32");
        gt_report(what, rel, pool_bf16 ? 8e-3 : 1e-6, bad);
        free(a), free(b);
    }
    for (int i = 0; i < 3; i++) {
        gt_dev_free(&dw[i]);
        for (int pth = 0; pth < 2; pth++) gt_dev_free(&y[pth][i]);
    }
    for (int pth = 0; pth < 2; pth++) cudaFree(kp[pth]), cudaFree(vp[pth]);
    cudaFree(slot_d);
    gt_dev_free(&dx), gt_dev_free(&dcs);
    free(x), free(cs);
}

/* RMSNorm in the GEMV's prologue (cuda_gemv_fuse.norm_w) against the CPU's norm then matmul,
 * at K split ks (the norm's scale applies after the split sum): both segments' outputs and
 * the normalized rows CTA 0 stores (xn). */
static void test_gemv_norm(int rows, int K, int ks) {
    const int N[2] = {1000, 4096};
    const float eps = 1e-5f, off = ks == 2 ? 1.0f : 0.0f;
    float *x = malloc((size_t)rows * K * 4), *nwf = malloc((size_t)K * 4);
    float *xn = malloc((size_t)rows * K * 4);
    gt_fill(x, (size_t)rows * K, 1.0f);
    gt_fill(nwf, (size_t)K, 1.0f);
    uint16_t *nwb = gt_bf16(nwf, (size_t)K);
    mx_tensor hx = mx_tensor_2d(x, MX_F32, rows, K, MX_DEV_CPU), none = {0};
    mx_tensor hnw = mx_tensor_1d(nwb, MX_BF16, K, MX_DEV_CPU);
    mx_tensor hxn = mx_tensor_2d(xn, MX_F32, rows, K, MX_DEV_CPU);
    g_cpu->rms_norm(&hxn, &hx, &hnw, eps, off);
    mx_tensor dx = gt_dev_f32(x, 2, (const int64_t[]){rows, K});
    mx_tensor dnw = gt_dev_weight(nwb, 1, (const int64_t[]){K});
    mx_tensor dxn = gt_dev_poison(2, (const int64_t[]){rows, K});
    mx_tensor dw[2], dy[2];
    float *ref[2];
    cuda_gemv_segs segs;
    memset(&segs, 0, sizeof segs);
    segs.n = 2;
    for (int i = 0; i < 2; i++) {
        float *w = malloc((size_t)N[i] * K * 4);
        gt_fill(w, (size_t)N[i] * K, 1.0f / sqrtf((float)K));
        uint16_t *wb = gt_bf16(w, (size_t)N[i] * K);
        ref[i] = malloc((size_t)rows * N[i] * 4);
        mx_tensor hw = mx_tensor_2d(wb, MX_BF16, N[i], K, MX_DEV_CPU);
        mx_tensor ho = mx_tensor_2d(ref[i], MX_F32, rows, N[i], MX_DEV_CPU);
        g_cpu->matmul(&ho, &hxn, &hw, &none);
        dw[i] = gt_dev_weight(wb, 2, (const int64_t[]){N[i], K});
        dy[i] = gt_dev_poison(2, (const int64_t[]){rows, N[i]});
        segs.W[i] = dw[i].data, segs.y[i] = dy[i].data, segs.N[i] = N[i];
        free(w), free(wb);
    }
    cuda_gemv_fuse f;
    memset(&f, 0, sizeof f);
    f.norm_w = dnw.data, f.norm_eps = eps, f.norm_offset = off, f.xn = dxn.data;
    const int ks_prev = cuda_gemv_ksplit();
    cuda_set_gemv_ksplit(ks);
    const int rc = cuda_gemv_bf16_fused(&segs, &f, dx.data, rows, K, g_cu.st);
    cudaStreamSynchronize(g_cu.st);
    cuda_set_gemv_ksplit(ks_prev);
    char what[96];
    for (int i = 0; i < 3; i++) {
        snprintf(what, sizeof what, "gemv with the norm, rows %d, K %d, ks %d: %s", rows, K, ks,
                 i == 2 ? "xn" : i ? "segment 1" : "segment 0");
        if (rc) gt_report(what, 1.0, 0, 1);
        else check_dev(what, i == 2 ? &dxn : &dy[i], i == 2 ? xn : ref[i], i == 2 ? 2e-5 : 3e-5);
    }
    for (int i = 0; i < 2; i++) gt_dev_free(&dw[i]), gt_dev_free(&dy[i]), free(ref[i]);
    gt_dev_free(&dx), gt_dev_free(&dnw), gt_dev_free(&dxn);
    free(x), free(nwf), free(nwb), free(xn);
}

int gt_run_op_tests(void) {
    test_greedy(128256);
    test_greedy(1000);
    test_greedy(300007);
    const int rows[] = {1, 2, 3, 5, 8, 9, 33, 128};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) test_matmul(rows[i], 4096, 4096, false);
    test_matmul(1, 14336, 4096, false);
    test_matmul(4, 4096, 14336, true);
    test_matmul(2, 1000, 100, true);  /* odd N, K % 8 != 0: generic GEMV */
    test_matmul(20, 97, 44, false);   /* cuBLASLt refuses K % 8: generic fallback */
    test_matmul(3, 1003, 4104, false); /* partial 16-row tile, K % 32 != 0 */
    /* every K split of the 1..2-row kernel: partial row groups, a K that is no whole batch,
     * a K of one batch (parts without work), two x chunks (rows 2, K 14336 fp32) */
    const int ks_prev = cuda_gemv_ksplit();
    for (int ks = 1; ks <= 4; ks *= 2) {
        cuda_set_gemv_ksplit(ks);
        test_matmul(1, 1003, 4104, true);
        test_matmul(2, 2048, 1024, false);
        test_matmul(2, 4096, 14336, false);
        test_matmul(1, 96, 3072, false);
    }
    cuda_set_gemv_ksplit(ks_prev);
    static const int tc_rows[] = {1, 3, 8, 9, 17, 32};
    for (size_t i = 0; i < sizeof tc_rows / sizeof tc_rows[0]; i++)
        test_gemv_tc(tc_rows[i], 1003, i % 2 ? 4104 : 1160);
    static const int split_rows[] = {1, 3, 5, 8, 16};
    for (size_t i = 0; i < sizeof split_rows / sizeof split_rows[0]; i++)
        test_gemv_tc_split(split_rows[i], 1003, i % 2 ? 4104 : 1160);
    test_matmul(7, 17, 8, false);      /* K = 8: one lane of four has k */
    test_matmul(300, 2048, 2048, true);
    test_matmul_fused(1, false);
    test_matmul_fused(6, false);
    test_matmul_fused(20, false); /* cuBLASLt group: one bf16 conversion for the three */
    test_matmul_fused(20, true);  /* ... and one GEMM over the joined weights */
    test_matmul_fused(3, true);   /* the GEMV path reads the joined weights as segments */
    test_glu_matmul_fused(1, ACT_SILU);
    test_glu_matmul_fused(2, ACT_GELU);
    test_glu_matmul_fused(40, ACT_SILU); /* GLU inside the conversion for cuBLASLt */
    test_glu_matmul_fused(5, ACT_GELU_TANH);
    for (int ks = 1; ks <= 4; ks *= 2) { /* the norm prologue at every K split */
        test_gemv_norm(1, 4096, ks);
        test_gemv_norm(2, 2048, ks);
    }
    test_gemv_norm(1, 8192, 2); /* more norm-weight pieces than the early loads */
    for (int ks = 1; ks <= 4; ks *= 2) /* the 8B shape's q/k/v at every K split */
        test_gemv_rope(1, 32, 8, 128, 4096, true, ks);
    test_gemv_rope(2, 4, 2, 64, 1024, false, 1); /* two rows (one slot -1), fp32 pools */
    test_gemv_rope(2, 4, 2, 64, 2048, false, 2);
    /* persistent CTAs (MLXCEL_GEMV_PERSIST), 7 of them: many tiles each, two turns of the
     * K-split totals, the norm applied once, segments and the epilogues per tile */
    const int persist_prev = cuda_gemv_persist();
    cuda_set_gemv_persist(7);
    for (int ks = 1; ks <= 4; ks *= 2) {
        cuda_set_gemv_ksplit(ks);
        test_matmul(1, 1003, 4104, true);
        test_matmul(2, 2048, 1024, false);
        test_matmul(2, 4096, 14336, false); /* two x chunks: one wave, not persistent */
        test_gemv_norm(1, 4096, ks);
        test_gemv_rope(1, 32, 8, 128, 4096, true, ks);
    }
    cuda_set_gemv_ksplit(ks_prev);
    test_glu_matmul_fused(1, ACT_SILU);
    test_matmul_fused(1, false);
    cuda_set_gemv_persist(persist_prev);
    test_glu_matmul_fused(8, ACT_SILU);
    test_norm_rope_elem();
    test_moe(1, 128, 8, 2048, 768, MX_MOE_ROUTE_SOFTMAX);
    test_moe(5, 16, 4, 256, 96, MX_MOE_ROUTE_SOFTMAX);
    test_moe(100, 16, 4, 256, 96, MX_MOE_ROUTE_SOFTMAX);
    test_moe(1, 16, 1, 256, 96, MX_MOE_ROUTE_SIGMOID_IN);
    test_moe(5, 16, 2, 256, 96, MX_MOE_ROUTE_SIGMOID_IN);
    test_moe(100, 16, 2, 256, 96, MX_MOE_ROUTE_SIGMOID_IN);
    return 0;
}

int main(int argc, char **argv) {
    const char *src = argc > 1 ? argv[1] : getenv("MLXCEL_SOURCE_DIR");
    mx_error err;
    g_cpu = backend_cpu();
    g_gpu = backend_get(MX_DEV_CUDA, &err);
    if (!g_gpu) {
        fprintf(stderr, "test_cuda: %s\n", err.msg);
        return 2;
    }
    char line[512];
    g_gpu->describe(line, sizeof line);
    printf("device: %s\n", line);
    /* TEST_CUDA_ONLY=attn,e2e (any of ops, attn, tune, quant, e2e): only those groups (the
     * other configurations of bench/run_device.sh differ only there) */
    const char *only = getenv("TEST_CUDA_ONLY");
#define GROUP(g) (!only || strstr(only, g))
    /* each group's wall time, so a slow group shows in the log */
#define TIMED(name, call)                                                                  \
    do {                                                                                   \
        struct timespec t0_, t1_;                                                          \
        clock_gettime(CLOCK_MONOTONIC, &t0_);                                              \
        call;                                                                              \
        clock_gettime(CLOCK_MONOTONIC, &t1_);                                              \
        printf("group %s: %.1f s\n", name,                                                 \
               (double)(t1_.tv_sec - t0_.tv_sec) + (t1_.tv_nsec - t0_.tv_nsec) * 1e-9);   \
    } while (0)
    if (GROUP("ops")) TIMED("ops", gt_run_op_tests());
    if (GROUP("attn")) TIMED("attn", gt_run_attn_tests());
    if (GROUP("tune")) TIMED("tune", gt_run_tune_tests());
    if (GROUP("quant")) {
        /* without the source dir the quantized fixtures end to end would not run */
        if (!src) gt_report("quant: the source dir (argv[1] or MLXCEL_SOURCE_DIR) is given", 1, 0, 0);
        TIMED("quant", gt_run_quant_tests(src));
    }
    if (GROUP("e2e")) {
        if (src) TIMED("e2e", gt_run_e2e_tests(src));
        else gt_report("e2e: the source dir (argv[1] or MLXCEL_SOURCE_DIR) is given", 1, 0, 0);
    }
#undef TIMED
#undef GROUP
    if (g_gpu->check(&err)) {
        printf("FAIL device error: %s\n", err.msg);
        g_failures++;
    }
    printf("\n%d checks, %d failed\n", g_checks, g_failures);
    /* a run that checked nothing did not pass (TEST_CUDA_ONLY naming no group, say) */
    if (g_checks == 0) {
        printf("FAIL no check ran (TEST_CUDA_ONLY=%s)\n", only ? only : "");
        return 1;
    }
    return g_failures ? 1 : 0;
}
