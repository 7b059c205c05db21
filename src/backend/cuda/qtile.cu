/* The repack of an MLX weight into the tiled layout (qtile.cuh), run once per weight at
 * upload (cuda_load.c). */
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/qtile.cuh"

/* One CTA a block (row tile rt = blockIdx.x / NB, batch b): thread i copies code quad i and,
 * i < 32 NW, scale word i. The scales move as raw 16-bit values. */
template <int G, int BITS>
__global__ void __launch_bounds__(256)
qt_tile_kernel(uint8_t *__restrict__ out, const uint8_t *__restrict__ w,
               const uint16_t *__restrict__ sc, const uint16_t *__restrict__ bi, int N, int K) {
    using Q = qt_geo<BITS, G>;
    const int S = (K + 127) / 128, NB = (S + Q::U - 1) / Q::U, NG = K / G;
    const int rt = (int)blockIdx.x / NB, b = (int)blockIdx.x % NB, i = (int)threadIdx.x;
    uint8_t *o = out + (size_t)blockIdx.x * Q::TB;
    const qt_quad d = qt_quad_at(i, Q::LQ);
    const int n = rt * 16 + d.g + 8 * d.ab, st = b * Q::U + d.u;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (n < N && st < S && st * 128 + 32 * d.t < K)
        v = *(const uint4 *)(w + (size_t)n * (K / 8 * BITS) + (size_t)st * 64 * Q::LQ +
                             16 * (d.t * Q::LQ + d.q));
    ((uint4 *)o)[i] = v;
    if (i < 32 * Q::NW) {
        const int kind = i / (8 * Q::NW), g = i / Q::NW % 8, j = i % Q::NW;
        const int nn = rt * 16 + g + 8 * (kind >> 1), g0 = b * Q::U * Q::C + 2 * j;
        const uint16_t *src = (kind & 1) ? bi : sc;
        const uint32_t lo = nn < N && g0 < NG ? src[(size_t)nn * NG + g0] : 0u;
        const uint32_t hi = nn < N && g0 + 1 < NG ? src[(size_t)nn * NG + g0 + 1] : 0u;
        ((uint32_t *)(o + 4096))[i] = lo | hi << 16;
    }
}

static bool qt_ok(int N, int K, int bits, int group) {
    return N >= 1 && (bits == 4 || bits == 8) && (group == 64 || group == 128) && K >= group &&
           K % group == 0;
}

extern "C" size_t cuda_q_tiled_bytes(int N, int K, int bits, int group) {
    if (!qt_ok(N, K, bits, group)) return 0;
    const qt_shape s = qt_of(bits, group, K);
    return (size_t)((N + 15) / 16) * s.NB * s.TB;
}

extern "C" int cuda_q_tile(void *out, const uint32_t *w, const void *scales, const void *biases,
                           int N, int K, int bits, int group, cudaStream_t st) {
    if (!qt_ok(N, K, bits, group) || !out || !w || !scales || !biases ||
        ((uintptr_t)out & 15) || ((uintptr_t)w & 15))
        return (int)cudaErrorInvalidValue;
    const unsigned blocks = (unsigned)((N + 15) / 16) * qt_of(bits, group, K).NB;
    const uint8_t *wb = (const uint8_t *)w;
    const uint16_t *s = (const uint16_t *)scales, *b = (const uint16_t *)biases;
    uint8_t *o = (uint8_t *)out;
    if (bits == 4 && group == 64) qt_tile_kernel<64, 4><<<blocks, 256, 0, st>>>(o, wb, s, b, N, K);
    else if (bits == 4) qt_tile_kernel<128, 4><<<blocks, 256, 0, st>>>(o, wb, s, b, N, K);
    else if (group == 64) qt_tile_kernel<64, 8><<<blocks, 256, 0, st>>>(o, wb, s, b, N, K);
    else qt_tile_kernel<128, 8><<<blocks, 256, 0, st>>>(o, wb, s, b, N, K);
    return (int)cudaGetLastError();
}
