/* Where the time of the one-row fused qmv_i8 launches goes: a Llama-3.1-8B layer at B=1 on
 * q4g64 tiled weights, as the engine launches it (q/k/v with the RMSNorm and RoPE, o with the
 * residual add, gate+up in the GLU pair mode writing down's int8 x, down with the residual
 * add; no attention launch), 16 weight sets so that nothing stays in L2. Built with
 * -DQW_TIMELINE (qmv_frame.cuh's QW_TL stamps) it prints, per launch of the last layer, when
 * its warps reach each point of the walk; without, the layer's time alone (the stamps' cost).
 *   nvcc -O3 -std=c++17 -arch=sm_90a -Isrc [-DQW_TIMELINE] bench/qi_timeline.cu \
 *     src/backend/cuda/cuda_info.cu src/backend/cuda/qtile.cu -o qi_timeline
 *   ./qi_timeline [iterations]
 * Diagnostic only: not part of the build or the tests. */
#include "backend/cuda/qmv_i8.cu"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag_util.cuh"

/* A knob to A/B inside one run (QI_AB: its values v, comma-separated). v / 100: 1 = a
 * stand-in for attention between q/k/v and o (a PDL launch of 128 CTAs that waits, triggers
 * and spins ATTN_NS ns, default 6000), 2 = the same also asking L2 for gate+up's blocks
 * 1 .. v % 100 of every row tile (cp.async.bulk.prefetch: the DRAM is nearly idle during
 * attention at B=1). Stamped builds, v % 100: qw_diag_host (1: x made up in the in-CTA
 * prep, 2: no prep, x stale). */
static int g_attn, g_attn_pf;
#ifdef QW_TIMELINE
static void qi_set(int v) { qw_diag_host = v % 100, g_attn = v / 100, g_attn_pf = v % 100; }
#else
static void qi_set(int v) { g_attn = v / 100, g_attn_pf = v % 100; }
#endif
#define QI_SET qi_set
#define QI_NAME "ab"

/* bytes of a tiled q4g64 weight [N, K] */
static size_t tiled_bytes(int N, int K) { return cuda_q_tiled_bytes(N, K, 4, 64); }

enum { L = 16, D = 4096, F = 14336, KVD = 1024, HD = 128, SLOTS = 1024 };

/* One layer's weights, and the vectors every layer shares. */
typedef struct tl_layer {
    void *q, *k, *v, *o, *gate, *up, *down;
} tl_layer;
typedef struct tl_vecs {
    float *h, *xn, *att, *qy, *ky, *vy, *gy, *uy, *act, *oy, *dy, *cs;
    uint16_t *nw;
    void *kp, *vp, *ws;
    int64_t *slot;
    size_t wsb;
} tl_vecs;

static void tl_base(const tl_vecs *v, cuda_qmv_args *a, int K) {
    memset(a, 0, sizeof *a);
    a->rows = 1, a->K = K, a->ldx = K, a->bits = 4, a->group = 64, a->sb_dtype = CUDA_QSB_BF16;
    a->ws = v->ws, a->ws_bytes = v->wsb, a->tiled = 1;
}
static void tl_seg(cuda_qmv_args *a, int i, void *w, float *y, int N) {
    a->w[i] = (const uint32_t *)w, a->y[i] = y, a->ldy[i] = N, a->N[i] = N;
    a->n_segs = i + 1;
}

/* The attention stand-in: CTA c prefetches row tiles c, c + grid, .. of gate and up (blocks
 * 1 .. nb), then spins until ns after its wait. */
__global__ void fake_attn(float *out, long long ns, const uint8_t *gate, const uint8_t *up,
                          int tiles, int nb) {
    pdl_wait();
    pdl_trigger();
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    const size_t tb = qt_geo<4, 64>::TB, per = (size_t)qw_steps(D) / 4 * tb;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < 2 * tiles * nb;
         i += gridDim.x * blockDim.x) {
        const int m = i / (tiles * nb), r = i % (tiles * nb), rt = r / nb, b = 1 + r % nb;
        const uint8_t *p = (m ? up : gate) + rt * per + b * tb;
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"((unsigned)tb)
                     : "memory");
    }
    do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    while ((long long)(t - t0) < ns);
    if (threadIdx.x == 0) out[blockIdx.x] = (float)(t - t0);
}

/* The layer's four launches as the engine issues them at B=1. */
static void tl_run_layer(const tl_vecs *v, const tl_layer *w, cudaStream_t st) {
    cuda_qmv_args a;
    tl_base(v, &a, D); /* q/k/v: norm of h, RoPE, k and v to the pools */
    tl_seg(&a, 0, w->q, v->qy, D), tl_seg(&a, 1, w->k, v->ky, KVD), tl_seg(&a, 2, w->v, v->vy, KVD);
    a.x = v->xn, a.norm_x = v->h, a.norm_w = v->nw, a.norm_eps = 1e-5f, a.x_inprep = 1;
    a.rope_cs = v->cs, a.rope_rows = v->slot, a.k_pool = v->kp, a.v_pool = v->vp;
    a.pool_bf16 = 1, a.head_dim = HD;
    CK((cudaError_t)cuda_qmv_i8(&a, st));
    if (g_attn) {
        static const long long ns = getenv("ATTN_NS") ? atoll(getenv("ATTN_NS")) : 6000;
        pdl_launch l;
        pdl_launch_config(&l, dim3(128), dim3(128), 0, st);
        CK(cudaLaunchKernelEx(&l.cfg, fake_attn, v->att + D, ns, (const uint8_t *)w->gate,
                              (const uint8_t *)w->up, F / 16, g_attn == 2 ? g_attn_pf : 0));
    }
    tl_base(v, &a, D); /* o: the residual add */
    tl_seg(&a, 0, w->o, v->oy, D);
    a.x = v->att, a.x_inprep = 1, a.res = v->h;
    CK((cudaError_t)cuda_qmv_i8(&a, st));
    tl_base(v, &a, D); /* gate+up: norm of h, the GLU pair mode, down's int8 x */
    tl_seg(&a, 0, w->gate, v->gy, F), tl_seg(&a, 1, w->up, v->uy, F);
    a.x = v->xn, a.norm_x = v->h, a.norm_w = v->nw, a.norm_eps = 1e-5f, a.x_inprep = 1;
    a.glu_next = v->act, a.glu_next_act = 0, a.glu_next_q = 1;
    CK((cudaError_t)cuda_qmv_i8(&a, st));
    tl_base(v, &a, F); /* down: x from the workspace, the residual add */
    tl_seg(&a, 0, w->down, v->dy, D);
    a.x = v->act, a.x_ready = 1, a.res = v->h;
    CK((cudaError_t)cuda_qmv_i8(&a, st));
}

#ifdef QW_TIMELINE
static unsigned long long g_tl[4][4096 * 16];
static int g_sm[4][4096];
static double g_v[4096];

/* Per-warp phase a -> b of launch kind k over the warps ws (median / p90 us). */
static void tl_phase(int k, const int *ws, int nw, const char *nm, int a, int b) {
    int n = 0;
    for (int i = 0; i < nw; i++) {
        const unsigned long long *t = g_tl[k] + ws[i] * 16;
        if (t[a] && t[b]) g_v[n++] = ((double)t[b] - (double)t[a]) / 1000.0;
    }
    if (!n) return;
    qsort(g_v, n, sizeof *g_v, cmp_double);
    printf("  phase %-16s median %7.3f p90 %7.3f us\n", nm, g_v[n / 2], g_v[n * 9 / 10]);
}

/* The stamps of the last layer's launches (their warps wrote last). */
static void tl_report(void) {
    CK(cudaMemcpyFromSymbol(g_tl, qw_tl, sizeof g_tl));
    CK(cudaMemcpyFromSymbol(g_sm, qw_tl_sm, sizeof g_sm));
    unsigned long long t0 = ~0ull;
    for (int k = 0; k < 4; k++)
        for (int w = 0; w < 4096; w++)
            if (g_tl[k][w * 16] && g_tl[k][w * 16] < t0) t0 = g_tl[k][w * 16];
    static const char *const names[4] = {"qkv", "o", "gate+up", "down"};
    static const char *const ev[16] = {"entry", "waited", "pro", "b0", "b1", "b2", "b3", "b4",
                                       "b5", "b6", "b7", "b8", "b9", "b10", "end", "written"};
    static const int order[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 15, 14};
    static int ws[4096];
    for (int k = 0; k < 4; k++) {
        int nw = 0, sms[256] = {0}, smax = 0, smin = 1 << 30, used = 0;
        for (int w = 0; w < 4096; w++) {
            const unsigned long long *t = g_tl[k] + w * 16;
            if (t[0] && t[14] && t[0] >= t0 && t[0] < t0 + 2000000) ws[nw++] = w;
        }
        if (!nw) continue;
        for (int i = 0; i < nw; i++) sms[g_sm[k][ws[i]] & 255]++;
        for (int i = 0; i < 256; i++)
            if (sms[i]) {
                smax = sms[i] > smax ? sms[i] : smax, smin = sms[i] < smin ? sms[i] : smin;
                used++;
            }
        printf("\n== %s: %d warps on %d SMs (%d..%d warps an SM); us from the layer's first "
               "stamp: min / p10 / median / p90 / max\n",
               names[k], nw, used, smin, smax);
        for (int oi = 0; oi < 16; oi++) {
            const int e = order[oi];
            int n = 0;
            for (int i = 0; i < nw; i++)
                if (g_tl[k][ws[i] * 16 + e]) g_v[n++] = (g_tl[k][ws[i] * 16 + e] - t0) / 1000.0;
            if (n < nw / 2) continue;
            qsort(g_v, n, sizeof *g_v, cmp_double);
            printf("  %-8s %6d  %8.2f %8.2f %8.2f %8.2f %8.2f\n", ev[e], n, g_v[0],
                   g_v[n / 10], g_v[n / 2], g_v[n * 9 / 10], g_v[n - 1]);
        }
        int nb = 0; /* load batches a warp (the first warp's) */
        while (nb < 11 && g_tl[k][ws[0] * 16 + 3 + nb]) nb++;
        tl_phase(k, ws, nw, "wait (entry..)", 0, 1);
        tl_phase(k, ws, nw, "pro", 1, 2);
        for (int b = 0; b < nb && b < 8; b++) {
            char nm[16];
            snprintf(nm, sizeof nm, "batch %d", b);
            tl_phase(k, ws, nw, nm, b ? 2 + b : 2, 3 + b);
        }
        tl_phase(k, ws, nw, "sum + write", 3 + nb - 1, 15);
        tl_phase(k, ws, nw, "epilogue", 15, 14);
    }
}
#endif

int main(int argc, char **argv) {
    const int iters = argc > 1 ? atoi(argv[1]) : 20;
    cuda_set_pdl(1);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    /* tiled blocks hold their bf16 scales: keep every word a pair of small bf16 values */
    const uint32_t m = 0x3f3f3f3fu;
    static tl_layer ly[L];
    for (int l = 0; l < L; l++) {
        ly[l].q = dev_fill(tiled_bytes(D, D), 11 + l, m);
        ly[l].k = dev_fill(tiled_bytes(KVD, D), 31 + l, m);
        ly[l].v = dev_fill(tiled_bytes(KVD, D), 51 + l, m);
        ly[l].o = dev_fill(tiled_bytes(D, D), 71 + l, m);
        ly[l].gate = dev_fill(tiled_bytes(F, D), 91 + l, m);
        ly[l].up = dev_fill(tiled_bytes(F, D), 111 + l, m);
        ly[l].down = dev_fill(tiled_bytes(D, F), 131 + l, m);
    }
    /* fp32 vectors: small positive values (0x3c.. exponent), bf16 norm weight near 1 */
    tl_vecs v;
    v.h = (float *)dev_fill(D * 4, 1, 0x007fffffu, 0x3c000000u);
    v.xn = (float *)dev_fill(D * 4, 2, 0x007fffffu, 0x3c000000u);
    v.att = (float *)dev_fill(D * 4 + 128 * 4, 3, 0x007fffffu, 0x3c000000u); /* + fake_attn's */
    v.qy = (float *)dev_fill(D * 4, 4), v.ky = (float *)dev_fill(KVD * 4, 5);
    v.vy = (float *)dev_fill(KVD * 4, 6), v.gy = (float *)dev_fill(F * 4, 7);
    v.uy = (float *)dev_fill(F * 4, 8), v.act = (float *)dev_fill(F * 4, 9);
    v.oy = (float *)dev_fill(D * 4, 10), v.dy = (float *)dev_fill(D * 4, 12);
    v.nw = (uint16_t *)dev_fill(D * 2, 13, 0x007f007fu, 0x3f803f80u);
    v.cs = (float *)dev_fill(HD * 4, 14, 0x007fffffu, 0x3e000000u);
    v.kp = dev_fill((size_t)SLOTS * KVD * 2, 15), v.vp = dev_fill((size_t)SLOTS * KVD * 2, 16);
    const int64_t slot = 7;
    CK(cudaMalloc((void **)&v.slot, 8));
    CK(cudaMemcpy(v.slot, &slot, 8, cudaMemcpyHostToDevice));
    v.wsb = cuda_qmv_i8_workspace_bytes(F);
    CK(cudaMalloc(&v.ws, v.wsb));
    CK(cudaDeviceSynchronize());

    /* QI_AB: the values of the knob under test to time (QI_SET), the last one stamped */
    const char *ab = getenv("QI_AB") ? getenv("QI_AB") : "0";
    for (const char *c = ab; *c;) {
        const int val = atoi(c);
        QI_SET(val);
        double med, best;
        time_layers(st, iters, L, [&](int l) { tl_run_layer(&v, &ly[l], st); }, &med, &best);
        printf("%s %d: layer (qkv, o, gate+up, down; no attention) median %.2f us, min %.2f "
               "(%d x %d)\n", QI_NAME, val, med, best, iters, L);
        while (*c && *c != ',') c++;
        if (*c == ',') c++;
    }
#ifdef QW_TIMELINE
    tl_report();
#endif
    return 0;
}
