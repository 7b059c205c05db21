/* cuda_ops_bench suites for RMSNorm, RoPE + paged KV write, paged decode attention and
 * argmax: each checks against the CPU reference on fresh random inputs (outputs poisoned
 * with NaN first), then times with events. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_ops.h"
#include "cuda_ops_bench.h"
#include "cuda_ops_ref.h"

#define TOL_BF16 8e-3 /* bf16 output rounding is ~1.1e-3 rms; 8e-3 flags real bugs only */
#define TOL_F32 1e-4

/* Host permutation of [0, n) (Fisher-Yates, fixed seed per call site). */
static int *host_perm(int n, uint64_t seed) {
    int *p = (int *)malloc((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) p[i] = i;
    for (int i = n - 1; i > 0; i--) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        int j = (int)((seed >> 33) % (uint64_t)(i + 1));
        int t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
    return p;
}

static int32_t *h2d_i32(const int32_t *h, size_t n) {
    int32_t *d = (int32_t *)dmalloc(n * sizeof(int32_t));
    CK(cudaMemcpy(d, h, n * sizeof(int32_t), cudaMemcpyHostToDevice));
    return d;
}

/* ==== RMSNorm ==== */

#define NORM_SETS 8
typedef struct norm_ctx {
    int R, H, x_dt, y_dt;
    float offset;
    void *x[NORM_SETS], *y[NORM_SETS];
    uint16_t *w;
} norm_ctx;

static void norm_rep(void *c, int rep) {
    norm_ctx *n = (norm_ctx *)c;
    int s = rep % NORM_SETS;
    CKL(cuda_rmsnorm(n->x[s], n->x_dt, n->w, n->offset, 1e-5f, n->y[s], n->y_dt, n->R, n->H,
                     g_stream));
}

void suite_rmsnorm(void) {
    struct { int R, x_dt, y_dt; float offset; } cfg[] = {
        {1, CUDA_OPS_BF16, CUDA_OPS_BF16, 0.f},
        {8, CUDA_OPS_F32, CUDA_OPS_BF16, 1.f},
        {32, CUDA_OPS_BF16, CUDA_OPS_F32, 0.f},
    };
    logf_("\n== rmsnorm\n");
    norm_ctx n;
    memset(&n, 0, sizeof n);
    n.H = 4096;
    n.w = (uint16_t *)dmalloc((size_t)n.H * 2);
    for (int s = 0; s < NORM_SETS; s++) {
        n.x[s] = dmalloc((size_t)32 * n.H * 4);
        n.y[s] = dmalloc((size_t)32 * n.H * 4);
    }
    for (size_t ci = 0; ci < sizeof cfg / sizeof cfg[0]; ci++) {
        n.R = cfg[ci].R;
        n.x_dt = cfg[ci].x_dt;
        n.y_dt = cfg[ci].y_dt;
        n.offset = cfg[ci].offset;
        const int xb = n.x_dt == CUDA_OPS_BF16, yb = n.y_dt == CUDA_OPS_BF16;
        const size_t cnt = (size_t)n.R * n.H;
        fill_bf16(n.w, n.H, next_seed(), 1.0f);
        for (int s = 0; s < NORM_SETS; s++) {
            if (xb)
                fill_bf16((uint16_t *)n.x[s], cnt, next_seed(), 3.0f);
            else
                fill_f32((float *)n.x[s], cnt, next_seed(), 3.0f);
        }
        poison(n.y[0], cnt * 4);
        norm_rep(&n, 0);
        double *xd = d2h_f64(n.x[0], cnt, xb);
        float *xf = (float *)malloc(cnt * sizeof(float));
        for (size_t i = 0; i < cnt; i++) xf[i] = (float)xd[i];
        uint16_t *wh = (uint16_t *)d2h(n.w, (size_t)n.H * 2);
        double *ref = (double *)malloc(cnt * sizeof(double));
        ref_rmsnorm(xf, wh, n.offset, 1e-5f, ref, n.R, n.H);
        double *got = d2h_f64(n.y[0], cnt, yb);
        size_t nan;
        double mx, rel = ref_rel_err(ref, got, cnt, &nan, &mx);
        char shape[48], what[96];
        snprintf(shape, sizeof shape, "%dx%d x=%s y=%s%s", n.R, n.H, xb ? "bf16" : "f32",
                 yb ? "bf16" : "f32", n.offset != 0.f ? " +1" : "");
        snprintf(what, sizeof what, "rmsnorm %s", shape);
        int fail = check_report(what, rel, mx, nan, yb ? TOL_BF16 : TOL_F32);
        timing t = bench_time(norm_rep, &n, 5, 50);
        result_add("rmsnorm", shape, t, (double)cnt * ((xb ? 2 : 4) + (yb ? 2 : 4)) + n.H * 2.0,
                   rel, fail);
        free(xd);
        free(xf);
        free(wh);
        free(ref);
        free(got);
    }
    for (int s = 0; s < NORM_SETS; s++) {
        CK(cudaFree(n.x[s]));
        CK(cudaFree(n.y[s]));
    }
    CK(cudaFree(n.w));
}

/* ==== RoPE + paged KV write ==== */

typedef struct rope_ctx {
    cuda_rope_kv_args a;
} rope_ctx;

static void rope_rep(void *c, int rep) {
    (void)rep;
    CKL(cuda_rope_kv_write(&((rope_ctx *)c)->a, g_stream));
}

void suite_rope(void) {
    const int Hq = 32, Hkv = 8, D = 128, BS = 16, PT = 1024, NB = 4096;
    const size_t slot_elems = (size_t)Hkv * D, pool_elems = (size_t)NB * BS * slot_elems;
    logf_("\n== rope + paged kv write (Hq %d, Hkv %d, D %d, theta 500000, fused qkv input)\n",
          Hq, Hkv, D);
    float inv_freq_h[64];
    cuda_rope_default_inv_freq(inv_freq_h, D, 500000.0f);
    float *inv_freq = (float *)dmalloc(sizeof inv_freq_h);
    CK(cudaMemcpy(inv_freq, inv_freq_h, sizeof inv_freq_h, cudaMemcpyHostToDevice));
    uint16_t *kc = (uint16_t *)dmalloc(pool_elems * 2), *vc = (uint16_t *)dmalloc(pool_elems * 2);
    const int Ts[] = {1, 32};
    for (int ti = 0; ti < 2; ti++) {
        const int T = Ts[ti], row = (Hq + 2 * Hkv) * D;
        uint16_t *qkv = (uint16_t *)dmalloc((size_t)T * row * 2);
        uint16_t *qo = (uint16_t *)dmalloc((size_t)T * Hq * D * 2);
        fill_bf16(qkv, (size_t)T * row, next_seed(), 1.0f);
        /* Positions spread over a long context; the slot each token writes is distinct. */
        int32_t *pos_h = (int32_t *)malloc(T * sizeof(int32_t));
        int32_t *pt_h = (int32_t *)malloc((size_t)T * PT * sizeof(int32_t));
        int *perm = host_perm(NB, next_seed());
        for (int t = 0; t < T; t++) {
            pos_h[t] = (int)((next_seed() >> 33) % 16384);
            for (int j = 0; j < PT; j++) pt_h[(size_t)t * PT + j] = perm[(T + t * 7 + j) % NB];
            pt_h[(size_t)t * PT + pos_h[t] / BS] = perm[t];
        }
        int32_t *pos = h2d_i32(pos_h, T), *pt = h2d_i32(pt_h, (size_t)T * PT);
        rope_ctx c;
        memset(&c, 0, sizeof c);
        cuda_rope_kv_args *a = &c.a;
        a->q = qkv;
        a->k = qkv + Hq * D;
        a->v = qkv + (Hq + Hkv) * D;
        a->q_stride = a->k_stride = a->v_stride = row;
        a->q_out = qo;
        a->q_out_stride = Hq * D;
        a->k_cache = kc;
        a->v_cache = vc;
        a->pos = pos;
        a->seq = NULL;
        a->page_table = pt;
        a->inv_freq = inv_freq;
        a->T = T;
        a->n_q_heads = Hq;
        a->n_kv_heads = Hkv;
        a->head_dim = D;
        a->block_size = BS;
        a->pt_stride = PT;
        a->n_blocks = NB;
        poison(qo, (size_t)T * Hq * D * 2);
        poison(kc, pool_elems * 2);
        poison(vc, pool_elems * 2);
        rope_rep(&c, 0);
        uint16_t *qkv_h = (uint16_t *)d2h(qkv, (size_t)T * row * 2);
        double *qo_got = d2h_f64(qo, (size_t)T * Hq * D, 1);
        uint16_t *kc_h = (uint16_t *)d2h(kc, pool_elems * 2), *vc_h = (uint16_t *)d2h(vc, pool_elems * 2);
        double *ref_q = (double *)malloc((size_t)T * Hq * D * sizeof(double));
        double *ref_kv = (double *)malloc((size_t)T * 2 * slot_elems * sizeof(double));
        double *got_kv = (double *)malloc((size_t)T * 2 * slot_elems * sizeof(double));
        size_t stray = 0;
        unsigned char *mine = (unsigned char *)calloc((size_t)NB * BS, 1);
        for (int t = 0; t < T; t++) {
            const uint16_t *tok = qkv_h + (size_t)t * row;
            for (int h = 0; h < Hq; h++)
                ref_rope(tok + h * D, inv_freq_h, pos_h[t], D, ref_q + ((size_t)t * Hq + h) * D);
            const size_t slot = (size_t)pt_h[(size_t)t * PT + pos_h[t] / BS] * BS + pos_h[t] % BS;
            mine[slot] = 1;
            double *rk = ref_kv + (size_t)t * 2 * slot_elems, *gk = got_kv + (size_t)t * 2 * slot_elems;
            for (int h = 0; h < Hkv; h++) {
                ref_rope(tok + (Hq + h) * D, inv_freq_h, pos_h[t], D, rk + h * D);
                for (int i = 0; i < D; i++) {
                    rk[slot_elems + h * D + i] = ref_bf16_to_f32(tok[(Hq + Hkv + h) * D + i]);
                    gk[h * D + i] = ref_bf16_to_f32(kc_h[slot * slot_elems + h * D + i]);
                    gk[slot_elems + h * D + i] = ref_bf16_to_f32(vc_h[slot * slot_elems + h * D + i]);
                }
            }
        }
        /* Nothing outside the T written slots may change (still the 0xFFFF poison). */
        for (size_t sl = 0; sl < (size_t)NB * BS; sl++) {
            if (mine[sl]) continue;
            for (size_t i = 0; i < slot_elems; i++)
                stray += (kc_h[sl * slot_elems + i] != 0xFFFF) + (vc_h[sl * slot_elems + i] != 0xFFFF);
        }
        size_t nan1, nan2;
        double mx1, mx2;
        double rq = ref_rel_err(ref_q, qo_got, (size_t)T * Hq * D, &nan1, &mx1);
        double rk = ref_rel_err(ref_kv, got_kv, (size_t)T * 2 * slot_elems, &nan2, &mx2);
        char what[96], shape[48];
        snprintf(shape, sizeof shape, "T=%d", T);
        snprintf(what, sizeof what, "rope q_out %s", shape);
        int fail = check_report(what, rq, mx1, nan1, TOL_BF16);
        snprintf(what, sizeof what, "rope k/v cache slots %s (stray writes %zu)", shape, stray);
        fail |= check_report(what, stray ? 1.0 : rk, mx2, nan2, TOL_BF16);
        timing t = bench_time(rope_rep, &c, 5, 50);
        result_add("rope+kv", shape, t, (double)T * (Hq + 2 * Hkv) * D * 2 * 2, fmax(rq, rk), fail);
        free(pos_h); free(pt_h); free(perm); free(qkv_h); free(qo_got); free(kc_h); free(vc_h);
        free(ref_q); free(ref_kv); free(got_kv); free(mine);
        CK(cudaFree(qkv)); CK(cudaFree(qo)); CK(cudaFree(pos)); CK(cudaFree(pt));
    }
    CK(cudaFree(kc)); CK(cudaFree(vc)); CK(cudaFree(inv_freq));
}

/* ==== Argmax ==== */

#define AM_SETS 8
typedef struct am_ctx {
    int R, V;
    float *x[AM_SETS];
    int32_t *out;
    void *ws;
} am_ctx;

static void am_rep(void *c, int rep) {
    am_ctx *a = (am_ctx *)c;
    CKL(cuda_argmax_f32(a->x[rep % AM_SETS], a->R, a->V, a->out, a->ws, g_stream));
}

void suite_argmax(void) {
    struct { int R, V, timed; } cfg[] = {{3, 1001, 0}, {1, 128256, 1}, {8, 128256, 1}, {32, 128256, 1}};
    logf_("\n== argmax\n");
    for (size_t ci = 0; ci < sizeof cfg / sizeof cfg[0]; ci++) {
        am_ctx a;
        a.R = cfg[ci].R;
        a.V = cfg[ci].V;
        const size_t cnt = (size_t)a.R * a.V;
        for (int s = 0; s < AM_SETS; s++) {
            a.x[s] = (float *)dmalloc(cnt * 4);
            fill_f32(a.x[s], cnt, next_seed(), 1.0f);
        }
        a.out = (int32_t *)dmalloc((size_t)a.R * 4);
        a.ws = dmalloc(cuda_argmax_workspace_bytes(a.R));
        /* Plant a tie at the maximum in each row: the first index must win. */
        int32_t *expect = (int32_t *)malloc((size_t)a.R * 4);
        for (int r = 0; r < a.R; r++) {
            int i = (int)((next_seed() >> 33) % (uint64_t)a.V), j = (int)((next_seed() >> 33) % (uint64_t)a.V);
            if (i == j) j = (i + 1) % a.V;
            const float big = 2.0f;
            CK(cudaMemcpy(a.x[0] + (size_t)r * a.V + i, &big, 4, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(a.x[0] + (size_t)r * a.V + j, &big, 4, cudaMemcpyHostToDevice));
            expect[r] = i < j ? i : j;
        }
        CK(cudaMemset(a.out, 0xFF, (size_t)a.R * 4));
        am_rep(&a, 0);
        float *xh = (float *)d2h(a.x[0], cnt * 4);
        int32_t *got = (int32_t *)d2h(a.out, (size_t)a.R * 4), *ref = (int32_t *)malloc((size_t)a.R * 4);
        ref_argmax(xh, a.R, a.V, ref);
        int bad = 0;
        for (int r = 0; r < a.R; r++) bad += got[r] != ref[r] || got[r] != expect[r];
        char shape[48], what[96];
        snprintf(shape, sizeof shape, "%dx%d f32", a.R, a.V);
        snprintf(what, sizeof what, "argmax %s (rows wrong: %d of %d)", shape, bad, a.R);
        int fail = check_report(what, bad ? 1.0 : 0.0, 0, 0, 0.0);
        if (cfg[ci].timed) {
            timing t = bench_time(am_rep, &a, 5, 50);
            result_add("argmax", shape, t, (double)cnt * 4 + a.R * 4.0, bad ? 1.0 : 0.0, fail);
        }
        for (int s = 0; s < AM_SETS; s++) CK(cudaFree(a.x[s]));
        CK(cudaFree(a.out));
        CK(cudaFree(a.ws));
        free(expect); free(xh); free(got); free(ref);
    }
}
