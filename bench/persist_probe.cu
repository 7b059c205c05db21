/* The first question of the persistent B=1 layer (NOTES-cuda, session 20's sketch): can one
 * resident grid stream two dependent q4g64 matmuls (gate+up [28672 x 4096], then down
 * [4096 x 14336], tiled blocks) through per-warp shared-memory rings at the DRAM rate, with a
 * grid-wide flag between them, so that down's first blocks arrive while gate+up's last ones
 * are computed and the flag is awaited? One CTA an SM of NW warps; each warp owns a contiguous
 * range of each matrix's blocks (blocks are contiguous in the tiled layout, tile-major) and a
 * ring of R block slots it refills itself by bulk copies (one mbarrier a slot), running ahead
 * across the flag. The blocks are computed as qmv_i8's one-row step does (int8 MMAs on x from
 * shared memory, per-group scale and bias); x is made up (no prep) and each warp adds its
 * partial rows into y with atomics: timing only, the outputs are not checked.
 * MODE: 0 the flag between the matrices; 1 no flag (down does not wait: the streaming alone);
 * 2 no compute (wait for each block, refill: the rings' copy rate).
 * Prints us a layer (16 weight sets: nothing stays in L2) and the rate against the bytes.
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Isrc bench/persist_probe.cu \
 *     src/backend/cuda/cuda_info.cu src/backend/cuda/qtile.cu -o persist_probe
 *   ./persist_probe [iterations]       (PP_AB="0,1,2": the modes to time, in order)
 * Diagnostic only: not part of the build or the tests. Written in session 20 without a GPU
 * (compiled here, never run): expect to debug it on the first call. */
#include "backend/cuda/qmv_i8.cu"

#include <stdio.h>
#include <stdlib.h>

#include "diag_util.cuh"

enum { L = 16, D = 4096, F = 14336 };
constexpr int TB = qt_geo<4, 64>::TB; /* 4,608 bytes: 16 rows x 4 steps + scales / biases */
constexpr int NWS = qt_geo<4, 64>::NW; /* scale words a row and block */

/* x of the longer matrix (K = F) as qmv_i8's in-CTA layout: [step][16 quads] (chunks 0..3 of
 * each half, then the zero quads the lanes off the diagonal read) */
constexpr int XSTEPS = F / 128;
constexpr size_t XBYTES = (size_t)XSTEPS * 16 * 16;

template <int NW, int R> constexpr size_t pp_smem() {
    return XBYTES + (size_t)NW * R * TB + (size_t)NW * R * 8;
}

/* One block at b (shared memory) of 16 rows: 4 steps of int8 MMAs against x from step s0. */
__device__ __forceinline__ void pp_block(const uint8_t *b, const uint4 *xs, int s0, int lane,
                                         float acc[4]) {
    const int g = lane >> 2, t = lane & 3;
    const bool on = g < 2 && (g & 1) == (t >> 1); /* the diagonal (one x row, C = 2) */
    const uint4 *xl = on ? xs + t : xs + 4 + t;
    const uint8_t *sw = b + 4096 + 4 * NWS * g;
#pragma unroll
    for (int u = 0; u < 4; u++) {
        const uint4 qa = *(const uint4 *)(b + u * 1024 + 16 * lane);
        const uint4 qb = *(const uint4 *)(b + u * 1024 + 512 + 16 * lane);
        const uint4 *xp = xl + (size_t)(s0 + u) * 16;
        const uint4 bx0 = xp[0], bx1 = xp[8];
        const uint32_t wda[4] = {qa.x, qa.y, qa.z, qa.w}, wdb[4] = {qb.x, qb.y, qb.z, qb.w};
        int d[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
#pragma unroll
        for (int w = 0; w < 4; w++) {
            const uint32_t a0 = wda[w] & 0x0F0F0F0Fu, a1 = wdb[w] & 0x0F0F0F0Fu;
            const uint32_t a2 = (wda[w] >> 4) & 0x0F0F0F0Fu, a3 = (wdb[w] >> 4) & 0x0F0F0F0Fu;
            const uint4 &bb = (w >> 1) ? bx1 : bx0;
            mma_u8s8_16832(d[w & 1], a0, a1, a2, a3, (w & 1) ? bb.z : bb.x, (w & 1) ? bb.w : bb.y);
        }
        /* the step's scale / bias words: word u holds groups 2u, 2u + 1 */
        const uint32_t ws[4] = {*(const uint32_t *)(sw + 4 * u),
                                *(const uint32_t *)(sw + 32 * NWS + 4 * u),
                                *(const uint32_t *)(sw + 64 * NWS + 4 * u),
                                *(const uint32_t *)(sw + 96 * NWS + 4 * u)};
        const float sc[4] = {qw_sb<CUDA_QSB_BF16>(&ws[0], 0), qw_sb<CUDA_QSB_BF16>(&ws[0], 1),
                             qw_sb<CUDA_QSB_BF16>(&ws[2], 0), qw_sb<CUDA_QSB_BF16>(&ws[2], 1)};
        const float bi[4] = {qw_sb<CUDA_QSB_BF16>(&ws[1], 0), qw_sb<CUDA_QSB_BF16>(&ws[1], 1),
                             qw_sb<CUDA_QSB_BF16>(&ws[3], 0), qw_sb<CUDA_QSB_BF16>(&ws[3], 1)};
#pragma unroll
        for (int i = 0; i < 4; i++) /* x's scale 1/127 and group sum 1 (made up) */
            acc[i] = fmaf(sc[i] * (1.f / 127.f), (float)(d[0][i] + d[1][i]), acc[i] + bi[i]);
    }
}

/* The warp's partial of tile `tile` (rows 16 tile + g, + 8; the two group columns summed)
 * into y. */
__device__ __forceinline__ void pp_flush(float *y, int tile, int lane, float acc[4]) {
    const int g = lane >> 2, t = lane & 3;
    if (tile >= 0 && t == 0) {
        atomicAdd(y + 16 * tile + g, acc[0] + acc[1]);
        atomicAdd(y + 16 * tile + g + 8, acc[2] + acc[3]);
    }
    acc[0] = acc[1] = acc[2] = acc[3] = 0.f;
}

template <int NW, int R>
__global__ void __launch_bounds__(NW * 32, 1)
pp_kernel(const uint8_t *__restrict__ wa, int na_tiles, int nba, const uint8_t *__restrict__ wb,
          int nb_tiles, int nbb, float *ya, float *yb, unsigned *ctr, unsigned target, int mode) {
    extern __shared__ __align__(16) uint8_t pp_sm[];
    const uint4 *xs = (const uint4 *)pp_sm;
    uint8_t *ring = pp_sm + XBYTES;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    uint8_t *slots = ring + (size_t)warp * R * TB;
    uint64_t *bar = (uint64_t *)(ring + (size_t)NW * R * TB) + warp * R;
    /* x made up: bytes of a hash, zero quads zero */
    for (int i = threadIdx.x; i < XSTEPS * 16; i += NW * 32) {
        const uint32_t h = (uint32_t)i * 2654435761u;
        ((uint4 *)pp_sm)[i] = ((i & 15) >= 4 && (i & 15) < 8) || (i & 15) >= 12
                                  ? make_uint4(0, 0, 0, 0)
                                  : make_uint4(h & 0x3f3f3f3fu, h >> 3 & 0x3f3f3f3fu,
                                               h >> 5 & 0x3f3f3f3fu, h >> 7 & 0x3f3f3f3fu);
    }
    __syncthreads();
    /* this warp's ranges: [a0, a1) of A's blocks, [b0, b1) of B's */
    const long W = (long)gridDim.x * NW, gw = (long)blockIdx.x * NW + warp;
    const long TA = (long)na_tiles * nba, TBk = (long)nb_tiles * nbb;
    const long a0 = gw * TA / W, a1 = (gw + 1) * TA / W, b0 = gw * TBk / W, b1 = (gw + 1) * TBk / W;
    const long nA = a1 - a0, n = nA + (b1 - b0);
    const auto src = [&](long j) {
        return j < nA ? wa + (size_t)(a0 + j) * TB : wb + (size_t)(b0 + j - nA) * TB;
    };
    if (lane == 0) {
        for (int r = 0; r < R; r++) mbar_init(&bar[r], 1);
        mbar_init_fence_cluster();
        for (long j = 0; j < R && j < n; j++) {
            mbar_expect(&bar[j], TB);
            bulk_g2s(slots + (size_t)j * TB, src(j), TB, &bar[j]);
        }
    }
    __syncwarp();
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    int tile = -1;
    for (long j = 0; j < n; j++) {
        if (j == nA) { /* A done by this warp: its partial out, then the flag */
            pp_flush(ya, tile, lane, acc);
            tile = -1;
            if (mode == 0) {
                __threadfence();
                __syncwarp();
                if (lane == 0) {
                    atomicAdd(ctr, 1u);
                    unsigned v;
                    do asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(ctr));
                    while ((int)(v - target) < 0);
                }
                __syncwarp();
            }
        }
        const int r = (int)(j % R);
        mbar_wait(&bar[r], (unsigned)(j / R) & 1u);
        if (mode != 2) {
            const bool inA = j < nA;
            const long blk = inA ? a0 + j : b0 + j - nA;
            const int nb = inA ? nba : nbb, tl = (int)(blk / nb), kb = (int)(blk % nb);
            if (tl != tile) pp_flush(inA ? ya : yb, tile, lane, acc), tile = tl;
            pp_block(slots + (size_t)r * TB, xs, 4 * kb, lane, acc);
        }
        __syncwarp(); /* every lane's reads of the slot before the refill overwrites it */
        if (lane == 0 && j + R < n) {
            fence_proxy_async();
            mbar_expect(&bar[r], TB);
            bulk_g2s(slots + (size_t)r * TB, src(j + R), TB, &bar[r]);
        }
    }
    if (n == nA) { /* no B blocks: still count, so the flag completes */
        pp_flush(ya, tile, lane, acc);
        tile = -1;
        if (mode == 0 && lane == 0) atomicAdd(ctr, 1u);
    }
    pp_flush(yb, tile, lane, acc);
}

static unsigned g_done; /* warps counted on the flag so far (it is never reset) */

template <int NW, int R> static void pp_time(int iters, int mode, uint8_t **wa, uint8_t **wb,
                                             float *ya, float *yb, unsigned *ctr, int sms,
                                             cudaStream_t st) {
    const size_t smem = pp_smem<NW, R>();
    CK(cudaFuncSetAttribute(pp_kernel<NW, R>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)smem));
    const unsigned W = (unsigned)sms * NW;
    const int nba = qw_steps(D) / 4, nbb = qw_steps(F) / 4;
    double med, best;
    time_layers(st, iters, L, [&](int l) {
        g_done += mode == 0 ? W : 0;
        pp_kernel<NW, R><<<sms, NW * 32, smem, st>>>(wa[l], 2 * F / 16, nba, wb[l], D / 16, nbb,
                                                     ya, yb, ctr, g_done, mode);
        CK(cudaGetLastError());
    }, &med, &best);
    const double mb = ((double)(2 * F / 16) * nba + (double)(D / 16) * nbb) * TB / 1e6;
    printf("warps %2d ring %d mode %d: %.2f us median (min %.2f), %.1f MB, %.0f GB/s "
           "(4,250 GB/s: %.1f us)\n", NW, R, mode, med, best, mb, mb * 1e3 / med, mb / 4.25);
}

int main(int argc, char **argv) {
    const int iters = argc > 1 ? atoi(argv[1]) : 20;
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    static uint8_t *wa[L], *wb[L];
    const size_t ba = cuda_q_tiled_bytes(2 * F, D, 4, 64), bb = cuda_q_tiled_bytes(D, F, 4, 64);
    for (int l = 0; l < L; l++) { /* small bf16 scales: every word a pair of 0x3f.. values */
        wa[l] = (uint8_t *)dev_fill(ba, 11 + l, 0x3f3f3f3fu);
        wb[l] = (uint8_t *)dev_fill(bb, 51 + l, 0x3f3f3f3fu);
    }
    CK(cudaDeviceSynchronize());
    float *ya, *yb;
    unsigned *ctr;
    CK(cudaMalloc((void **)&ya, 2 * F * 4));
    CK(cudaMalloc((void **)&yb, D * 4));
    CK(cudaMalloc((void **)&ctr, 4));
    CK(cudaMemsetAsync(ya, 0, 2 * F * 4, st));
    CK(cudaMemsetAsync(yb, 0, D * 4, st));
    CK(cudaMemsetAsync(ctr, 0, 4, st));
    CK(cudaStreamSynchronize(st));
    const char *ab = getenv("PP_AB") ? getenv("PP_AB") : "0,1,2";
    for (const char *c = ab; *c;) {
        const int mode = atoi(c);
        pp_time<16, 2>(iters, mode, wa, wb, ya, yb, ctr, sms, st);
        pp_time<12, 3>(iters, mode, wa, wb, ya, yb, ctr, sms, st);
        pp_time<8, 4>(iters, mode, wa, wb, ya, yb, ctr, sms, st);
        while (*c && *c != ',') c++;
        if (*c == ',') c++;
    }
    return 0;
}
