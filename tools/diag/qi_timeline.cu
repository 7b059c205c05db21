/* Where the time of the one-row fused qmv_i8 launches goes: a Llama-3.1-8B layer at B=1 on
 * q4g64 tiled weights, as the engine launches it (q/k/v with the RMSNorm and RoPE, o with the
 * residual add, gate+up in the GLU pair mode writing down's int8 x, down with the residual
 * add; no attention launch), LAYERS weight sets so that nothing stays in L2. Built with
 * -DQW_TIMELINE (qmv_frame.cuh's QW_TL stamps) it prints, per launch of the last layer, when
 * its warps reach each point of the walk; without, the layer's time alone (the stamps' cost).
 *   nvcc -O3 -std=c++17 -arch=sm_90a -Isrc [-DQW_TIMELINE] tools/diag/qi_timeline.cu \
 *     src/backend/cuda/cuda_info.cu -o qi_timeline && ./qi_timeline [iterations]
 * Diagnostic only: not part of the build or the tests. */
#include "backend/cuda/qmv_i8.cu"

#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

/* A knob to A/B inside one run (QI_AB: its values, comma-separated), e.g. a setter of
 * cuda_info.cu; stamped builds: qw_skip_pro (1: no in-CTA prep, x stale), else none. */
#ifdef QW_TIMELINE
static void qi_set(int v) { cudaMemcpyToSymbol(qw_skip_pro, &v, sizeof v); }
#else
static void qi_set(int) {}
#endif
#define QI_SET qi_set
#define QI_NAME "ab"

#define CK(x)                                                                                \
    do {                                                                                     \
        cudaError_t e_ = (x);                                                                \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));      \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

__global__ void fill_kernel(uint32_t *p, size_t n, uint32_t seed, uint32_t mask, uint32_t or_) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        p[i] = (h & mask) | or_;
    }
}

static void *dev_fill(size_t bytes, uint32_t seed, uint32_t mask = ~0u, uint32_t or_ = 0) {
    void *p;
    CK(cudaMalloc(&p, bytes));
    fill_kernel<<<1024, 256>>>((uint32_t *)p, bytes / 4, seed, mask, or_);
    CK(cudaGetLastError());
    return p;
}

/* bytes of a tiled q4g64 weight [N, K] */
static size_t tiled_bytes(int N, int K) {
    const qt_shape s = qt_of(4, 64, K);
    return (size_t)((N + 15) / 16) * s.NB * s.TB;
}

struct layer {
    void *q, *k, *v, *o, *gate, *up, *down;
};

int main(int argc, char **argv) {
    const int iters = argc > 1 ? atoi(argv[1]) : 20, L = 16, D = 4096, F = 14336;
    const int KVD = 1024, HD = 128, SLOTS = 1024;
    cuda_set_pdl(1);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    /* tiled blocks hold their bf16 scales: keep every word a pair of small bf16 values */
    const uint32_t m = 0x3f3f3f3fu;
    std::vector<layer> ly(L);
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
    float *h = (float *)dev_fill(D * 4, 1, 0x007fffffu, 0x3c000000u);
    float *xn = (float *)dev_fill(D * 4, 2, 0x007fffffu, 0x3c000000u);
    float *att = (float *)dev_fill(D * 4, 3, 0x007fffffu, 0x3c000000u);
    float *qy = (float *)dev_fill(D * 4, 4), *ky = (float *)dev_fill(KVD * 4, 5);
    float *vy = (float *)dev_fill(KVD * 4, 6), *gy = (float *)dev_fill(F * 4, 7);
    float *uy = (float *)dev_fill(F * 4, 8), *act = (float *)dev_fill(F * 4, 9);
    float *oy = (float *)dev_fill(D * 4, 10), *dy = (float *)dev_fill(D * 4, 12);
    uint16_t *nw = (uint16_t *)dev_fill(D * 2, 13, 0x007f007fu, 0x3f803f80u);
    float *cs = (float *)dev_fill(HD * 4, 14, 0x007fffffu, 0x3e000000u);
    void *kp = dev_fill((size_t)SLOTS * KVD * 2, 15), *vp = dev_fill((size_t)SLOTS * KVD * 2, 16);
    int64_t slot = 7, *slotd;
    CK(cudaMalloc(&slotd, 8));
    CK(cudaMemcpy(slotd, &slot, 8, cudaMemcpyHostToDevice));
    const size_t wsb = cuda_qmv_i8_workspace_bytes(F);
    void *ws;
    CK(cudaMalloc(&ws, wsb));
    CK(cudaDeviceSynchronize());

    const auto base = [&](cuda_qmv_args &a, int K) {
        memset(&a, 0, sizeof a);
        a.rows = 1, a.K = K, a.ldx = K, a.bits = 4, a.group = 64, a.sb_dtype = CUDA_QSB_BF16;
        a.ws = ws, a.ws_bytes = wsb, a.tiled = 1;
    };
    const auto seg = [](cuda_qmv_args &a, int i, void *w, float *y, int N) {
        a.w[i] = (const uint32_t *)w, a.y[i] = y, a.ldy[i] = N, a.N[i] = N;
        a.n_segs = i + 1;
    };
    const auto run_layer = [&](const layer &w) {
        cuda_qmv_args a;
        base(a, D); /* q/k/v: norm of h, RoPE, k and v to the pools */
        seg(a, 0, w.q, qy, D), seg(a, 1, w.k, ky, KVD), seg(a, 2, w.v, vy, KVD);
        a.x = xn, a.norm_x = h, a.norm_w = nw, a.norm_eps = 1e-5f, a.x_inprep = 1;
        a.rope_cs = cs, a.rope_rows = slotd, a.k_pool = kp, a.v_pool = vp, a.pool_bf16 = 1;
        a.head_dim = HD;
        CK((cudaError_t)cuda_qmv_i8(&a, st));
        base(a, D); /* o: the residual add */
        seg(a, 0, w.o, oy, D);
        a.x = att, a.x_inprep = 1, a.res = h;
        CK((cudaError_t)cuda_qmv_i8(&a, st));
        base(a, D); /* gate+up: norm of h, the GLU pair mode, down's int8 x */
        seg(a, 0, w.gate, gy, F), seg(a, 1, w.up, uy, F);
        a.x = xn, a.norm_x = h, a.norm_w = nw, a.norm_eps = 1e-5f, a.x_inprep = 1;
        a.glu_next = act, a.glu_next_act = 0, a.glu_next_q = 1;
        CK((cudaError_t)cuda_qmv_i8(&a, st));
        base(a, F); /* down: x from the workspace, the residual add */
        seg(a, 0, w.down, dy, D);
        a.x = act, a.x_ready = 1, a.res = h;
        CK((cudaError_t)cuda_qmv_i8(&a, st));
    };
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    /* QI_AB: the values of the knob under test to time (QI_SET), the last one stamped */
    const char *pfs = getenv("QI_AB") ? getenv("QI_AB") : "1";
    for (const char *c = pfs; *c;) {
        const int pf = atoi(c);
        QI_SET(pf);
        for (int l = 0; l < L; l++) run_layer(ly[l]); /* warm-up */
        CK(cudaStreamSynchronize(st));
        std::vector<float> per;
        for (int it = 0; it < iters; it++) {
            CK(cudaEventRecord(e0, st));
            for (int l = 0; l < L; l++) run_layer(ly[l]);
            CK(cudaEventRecord(e1, st));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            per.push_back(ms * 1000.f / L);
        }
        std::sort(per.begin(), per.end());
        printf("%s %d: layer (qkv, o, gate+up, down; no attention) median %.2f us, min %.2f "
               "(%d x %d)\n", QI_NAME, pf, per[per.size() / 2], per[0], iters, L);
        while (*c && *c != ',') c++;
        if (*c == ',') c++;
    }
#ifdef QW_TIMELINE
    static unsigned long long tl[4][4096 * 16];
    static int sm[4][4096];
    CK(cudaMemcpyFromSymbol(tl, qw_tl, sizeof tl));
    CK(cudaMemcpyFromSymbol(sm, qw_tl_sm, sizeof sm));
    unsigned long long t0 = ~0ull;
    for (int k = 0; k < 4; k++)
        for (int w = 0; w < 4096; w++)
            if (tl[k][w * 16]) t0 = std::min(t0, tl[k][w * 16]);
    const char *names[4] = {"qkv", "o", "gate+up", "down"};
    const char *ev[16] = {"entry", "waited", "pro", "b0", "b1", "b2", "b3", "b4",
                          "b5", "b6", "b7", "b8", "b9", "b10", "end", "written"};
    /* the last layer's launches are the last writers: keep warps stamped after t0's layer */
    for (int k = 0; k < 4; k++) {
        std::vector<int> ws_;
        for (int w = 0; w < 4096; w++)
            if (tl[k][w * 16] && tl[k][w * 16 + 14] && tl[k][w * 16] >= t0 &&
                tl[k][w * 16] < t0 + 2000000)
                ws_.push_back(w);
        if (ws_.empty()) continue;
        int sms[256] = {0};
        for (int w : ws_) sms[sm[k][w] & 255]++;
        int smax = 0, smin = 1 << 30, used = 0;
        for (int i = 0; i < 256; i++)
            if (sms[i]) smax = std::max(smax, sms[i]), smin = std::min(smin, sms[i]), used++;
        printf("\n== %s: %zu warps on %d SMs (%d..%d warps an SM); us from the layer's first "
               "stamp: min / p10 / median / p90 / max\n",
               names[k], ws_.size(), used, smin, smax);
        const int order[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 15, 14};
        for (int oi = 0; oi < 16; oi++) {
            const int e = order[oi];
            std::vector<double> v;
            for (int w : ws_)
                if (tl[k][w * 16 + e]) v.push_back((tl[k][w * 16 + e] - t0) / 1000.0);
            if (v.size() < ws_.size() / 2) continue;
            std::sort(v.begin(), v.end());
            const size_t n = v.size();
            printf("  %-8s %6zu  %8.2f %8.2f %8.2f %8.2f %8.2f\n", ev[e], n, v[0], v[n / 10],
                   v[n / 2], v[n * 9 / 10], v[n - 1]);
        }
        int nb = 0; /* load batches a warp (the first warp's) */
        while (nb < 11 && tl[k][ws_[0] * 16 + 3 + nb]) nb++;
        /* per-warp phase lengths (median / p90 us) */
        const auto phase = [&](const char *nm, int a, int b) {
            std::vector<double> v;
            for (int w : ws_)
                if (tl[k][w * 16 + a] && tl[k][w * 16 + b])
                    v.push_back(((double)tl[k][w * 16 + b] - (double)tl[k][w * 16 + a]) / 1000.0);
            if (v.empty()) return;
            std::sort(v.begin(), v.end());
            printf("  phase %-16s median %7.3f p90 %7.3f us\n", nm, v[v.size() / 2],
                   v[v.size() * 9 / 10]);
        };
        phase("wait (entry..)", 0, 1);
        phase("pro", 1, 2);
        phase("batch 0", 2, 3);
        phase("batch 1", 3, 4);
        phase("batch 2", 4, 5);
        phase("batch 3", 5, 6);
        phase("batch 4", 6, 7);
        phase("batch 7", 9, 10);
        phase("sum + write", 3 + nb - 1, 15);
        phase("epilogue", 15, 14);
    }
#endif
    return 0;
}
