/* Where the time of a B=1 decode attention launch goes: the Llama-3.1-8B shape (32 / 8 heads
 * of 128, bf16 KV pools in blocks of 16, fp32 q and output, 512 tokens of context in 1024 of
 * table: 16 splits as one cluster), launched as the engine launches it between a stand-in
 * for the q/k/v launch (PDL, spins PROD_NS ns, default 4000, writes q) and one for the o
 * launch (PDL, waits and reads the output), 32 layers of pools so that the KV is not all in
 * L2 (ATTN_CLUSTER=0: the global merge instead of the cluster's; PROD_CARVEOUT=n: the
 * stand-ins' preferred shared-memory carveout, percent; DEV_PREFER_SHARED=1:
 * cudaDeviceSetCacheConfig(cudaFuncCachePreferShared); PROD_GEMV=7: the engine's fused q/k/v
 * GEMV (norm, RoPE, KV write; 50 MB of weights a layer) as the producer, whose CTAs fill the
 * SMs' registers as in the engine; 1 | 2 | 4: the GEMV, with the norm, with the RoPE / KV
 * write; KSPLIT=n: its K split; SETTLED=0: no KV copies before the wait). Built with
 * -DATTN_TIMELINE (attn_decode.cu's AT_TL stamps) it prints, for the last layer, when the
 * CTAs reach each point of the launch, from the producer's end (the GEMV's: from attention's
 * first wait); without, the time a layer takes (stand-ins included) and without attention.
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Isrc [-DATTN_TIMELINE] \
 *     bench/attn_timeline.cu src/backend/cuda/cuda_info.cu src/backend/cuda/gemv.cu -o attn_tl
 *   ./attn_tl [iterations]
 * Diagnostic only: not part of the build or the tests. */
#include "backend/cuda/attn_decode.cu"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag_util.cuh"

enum { L = 32, HQ = 32, HKV = 8, HD = 128, BS = 16, NBLK = 64, CTX = 512, GRID = 132 };

__device__ unsigned long long pc_tl[2][GRID]; /* producer's end, consumer's wait, per CTA */

/* q/k/v stand-in: spins ns after its wait, then writes q (and the newest K / V row). */
__global__ void producer(float *q, uint16_t *k, uint16_t *v, long long ns) {
    pdl_wait();
    pdl_trigger();
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    while ((long long)(t - t0) < ns);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < HQ * HD; i += gridDim.x * blockDim.x)
        q[i] = 0.01f * (float)((i * 37) % 101 - 50);
    const size_t row = (size_t)(CTX - 1) * HKV * HD; /* block CTX / BS - 1, token 15 */
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < HKV * HD; i += gridDim.x * blockDim.x)
        k[row + i] = v[row + i] = 0x3c00;
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
        pc_tl[0][blockIdx.x] = t;
    }
}

/* o stand-in: waits, reads one output value. */
__global__ void consumer(const float *o, float *sink) {
    pdl_wait();
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
    if (threadIdx.x == 0) pc_tl[1][blockIdx.x] = t;
    pdl_trigger();
    if (threadIdx.x == 0) sink[blockIdx.x] = o[blockIdx.x];
}

int main(int argc, char **argv) {
    const int iters = argc > 1 ? atoi(argv[1]) : 20;
    const long long prod_ns = getenv("PROD_NS") ? atoll(getenv("PROD_NS")) : 4000;
    cuda_set_pdl(1);
    if (getenv("ATTN_CLUSTER")) cuda_set_attn_cluster(atoi(getenv("ATTN_CLUSTER")));
    const int prod_gemv = getenv("PROD_GEMV") ? atoi(getenv("PROD_GEMV")) : 0;
    if (getenv("KSPLIT")) cuda_set_gemv_ksplit(atoi(getenv("KSPLIT")));
    if (getenv("DEV_PREFER_SHARED")) CK(cudaDeviceSetCacheConfig(cudaFuncCachePreferShared));
    if (getenv("PROD_CARVEOUT")) /* the stand-ins' shared-memory carveout (percent) */
        for (const void *f : {(const void *)producer, (const void *)consumer})
            CK(cudaFuncSetAttribute(f, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    atoi(getenv("PROD_CARVEOUT"))));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const size_t pool = (size_t)NBLK * BS * HKV * HD; /* elements of one layer's K (or V) */
    uint16_t *kp, *vp;
    CK(cudaMalloc(&kp, pool * 2 * L));
    CK(cudaMalloc(&vp, pool * 2 * L));
    CK(cudaMemset(kp, 0x3c, pool * 2 * L)); /* bf16 0x3c3c ~ 0.0115 */
    CK(cudaMemset(vp, 0x3c, pool * 2 * L));
    float *q, *o, *sink;
    CK(cudaMalloc(&q, HQ * HD * 4));
    CK(cudaMalloc(&o, HQ * HD * 4));
    CK(cudaMalloc(&sink, GRID * 4));
    int32_t table[NBLK], one[2] = {CTX - 1, 0}, *dtab, *dpos;
    for (int i = 0; i < NBLK; i++) table[i] = i;
    CK(cudaMalloc(&dtab, sizeof table));
    CK(cudaMalloc(&dpos, sizeof one));
    CK(cudaMemcpy(dtab, table, sizeof table, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dpos, one, sizeof one, cudaMemcpyHostToDevice));
    cuda_paged_attn_args a;
    memset(&a, 0, sizeof a);
    a.q = q, a.q_f32 = 1, a.page_table = dtab, a.pos = dpos, a.row_seq = dpos + 1;
    a.o = o, a.o_dtype = CUDA_OPS_F32;
    a.B = 1, a.n_q_heads = HQ, a.n_kv_heads = HKV, a.head_dim = HD, a.block_size = BS;
    a.pt_stride = NBLK, a.max_seq_len = NBLK * BS, a.scale = 0.08838834764831845f;
    a.kv_settled = getenv("SETTLED") ? atoi(getenv("SETTLED")) : 1; /* as the engine */
    const int S = cuda_paged_attn_splits(&a);
    a.workspace_bytes = cuda_paged_attn_workspace_bytes(1, HQ, HD, S);
    CK(cudaMalloc(&a.workspace, a.workspace_bytes));
    CK(cudaMalloc((void **)&a.split_counters, HKV * 4));
    CK(cudaMemset(a.split_counters, 0, HKV * 4));
    /* the engine's q/k/v launch: x [4096] fp32 through the norm, three segments, RoPE, the new
     * token's K / V into the pools at its slot */
    const size_t wq = (size_t)(HQ + 2 * HKV) * HD * HQ * HD; /* elements of one layer's W */
    uint16_t *w = NULL, *nw = NULL;
    float *x = NULL, *xn = NULL, *kv = NULL, *cs = NULL;
    int64_t *slot = NULL;
    if (prod_gemv) {
        CK(cudaMalloc(&w, wq * 2 * L));
        CK(cudaMemset(w, 0x3c, wq * 2 * L));
        CK(cudaMalloc(&nw, HQ * HD * 2));
        CK(cudaMemset(nw, 0x3f, HQ * HD * 2)); /* bf16 0x3f3f ~ 0.75 */
        CK(cudaMalloc(&x, HQ * HD * 4));
        CK(cudaMemset(x, 0x3c, HQ * HD * 4));
        CK(cudaMalloc(&xn, HQ * HD * 4));
        CK(cudaMalloc(&kv, 2 * HKV * HD * 4));
        CK(cudaMalloc(&cs, HD * 4));
        CK(cudaMemset(cs, 0, HD * 4));
        const int64_t s1 = CTX - 1;
        CK(cudaMalloc(&slot, sizeof s1));
        CK(cudaMemcpy(slot, &s1, sizeof s1, cudaMemcpyHostToDevice));
    }
    CK(cudaDeviceSynchronize());
    const auto qkv = [&](int l) {
        cuda_gemv_segs sg;
        memset(&sg, 0, sizeof sg);
        sg.n = 3;
        const uint16_t *wl = w + wq * l;
        sg.W[0] = wl, sg.W[1] = wl + (size_t)HQ * HD * HQ * HD;
        sg.W[2] = sg.W[1] + (size_t)HKV * HD * HQ * HD;
        sg.y[0] = q, sg.y[1] = kv, sg.y[2] = kv + HKV * HD;
        sg.N[0] = HQ * HD, sg.N[1] = sg.N[2] = HKV * HD;
        cuda_gemv_fuse f;
        memset(&f, 0, sizeof f);
        if (prod_gemv & 2) f.norm_w = nw, f.norm_eps = 1e-5f, f.xn = xn;
        if (prod_gemv & 4) {
            f.rope_cs = cs, f.rope_rows = slot, f.k_pool = kp + pool * l;
            f.v_pool = vp + pool * l, f.pool_bf16 = 1, f.head_dim = HD;
        }
        CK((cudaError_t)cuda_gemv_bf16_fused(&sg, &f, x, 1, HQ * HD, st));
    };
    const auto layer = [&](int l, bool attn) {
        pdl_launch p;
        pdl_launch_config(&p, dim3(GRID), dim3(256), 0, st);
        if (prod_gemv) qkv(l);
        else CK(cudaLaunchKernelEx(&p.cfg, producer, q, kp + pool * l, vp + pool * l, prod_ns));
        if (attn) {
            a.k_cache = kp + pool * l, a.v_cache = vp + pool * l;
            CK((cudaError_t)cuda_paged_decode_attn(&a, st));
        }
        pdl_launch_config(&p, dim3(GRID), dim3(256), 0, st);
        CK(cudaLaunchKernelEx(&p.cfg, consumer, (const float *)o, sink));
    };
    for (int attn = 1; attn >= 0; attn--) {
        double med, best;
        time_layers(st, iters, L, [&](int l) { layer(l, attn); }, &med, &best);
        printf("%s: layer median %.2f us, min %.2f (%d splits, %d x %d)\n",
               attn ? "with attention" : "stand-ins only", med, best, S, iters, L);
#ifdef ATTN_TIMELINE
        if (!attn) break;
        static unsigned long long tl[1024][10], pc[2][GRID];
        CK(cudaMemcpyFromSymbol(tl, at_tl, sizeof tl)); /* the last layer's launch wrote last */
        CK(cudaMemcpyFromSymbol(pc, pc_tl, sizeof pc));
        unsigned long long t0 = 0; /* the producer's end; the GEMV's: attention's first wait */
        for (int i = 0; i < GRID; i++) t0 = pc[0][i] > t0 ? pc[0][i] : t0;
        if (prod_gemv) {
            t0 = ~0ull;
            for (int c = 0; c < S * HKV; c++) t0 = tl[c][1] && tl[c][1] < t0 ? tl[c][1] : t0;
        }
        static const char *const ev[10] = {"entry", "waited", "q ready", "chunk 0", "walked",
                                           "warps in", "cluster", "partials", "written", ""};
        printf("attention, us from %s (min / median / max over the %d CTAs):\n",
               prod_gemv ? "its first CTA's wait" : "the producer's last CTA end", S * HKV);
        static double v[1024];
        for (int e = 0; e < 9; e++) {
            int n2 = 0;
            for (int c = 0; c < S * HKV; c++)
                if (tl[c][e]) v[n2++] = ((double)tl[c][e] - (double)t0) / 1000.0;
            if (!n2) continue;
            qsort(v, n2, sizeof *v, cmp_double);
            printf("  %-9s %4d %8.2f %8.2f %8.2f\n", ev[e], n2, v[0], v[n2 / 2], v[n2 - 1]);
        }
        int n3 = 0;
        for (int i = 0; i < GRID; i++) v[n3++] = ((double)pc[1][i] - (double)t0) / 1000.0;
        qsort(v, n3, sizeof *v, cmp_double);
        printf("  consumer waited %8.2f %8.2f %8.2f\n", v[0], v[n3 / 2], v[n3 - 1]);
#endif
    }
    return 0;
}
