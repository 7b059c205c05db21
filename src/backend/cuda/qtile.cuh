/* The tiled weight layout of the CUDA backend (cuda_q_tile; MLXCEL_QMV_TILED, default on:
 * 2-D quantized weights of 4 or 8 bits, group 64 or 128, bf16 scales are repacked at upload
 * and the MLX layout is not kept). A qmv_i8 warp's load batch, the codes and raw scales /
 * biases of 16 rows x U steps of 128 codes, is one contiguous block of TB bytes in the order
 * its lanes read it, so a warp's walk is one sequential stream (the MLX layout reads 16 row
 * pieces of 64 LQ bytes per load, K BITS / 8 bytes apart). qmv_bulk stages whole blocks.
 *
 * Block (row tile rt = n / 16, batch b = step / U) at (rt NB + b) TB, NB = ceil(steps / U).
 * Inside: the 16-byte quad q (< LQ) of lane L = 4 g + t (chunk t: codes 32 t .. 32 t + 31 of
 * the step, as in the MLX row), row half ab (row rt 16 + g + 8 ab), step u of the batch at
 * ((u LQ + q) 2 + ab) 512 + 16 L; then 4 x 8 x NW 32-bit words: kind (scales of rows g,
 * biases of g, scales of g + 8, biases of g + 8), then g, then word j (groups 2j, 2j + 1 of
 * the batch, the even one in the low half). Zeros past N, K or the steps. */
#ifndef MLXCEL_BACKEND_CUDA_QTILE_CUH
#define MLXCEL_BACKEND_CUDA_QTILE_CUH

#include <stddef.h>
#include <stdint.h>

/* Compile-time geometry of a (bits, group). */
template <int BITS, int G> struct qt_geo {
    static constexpr int U = BITS == 4 ? 4 : 2; /* steps per block: the same code bytes */
    static constexpr int LQ = BITS / 4;         /* 16-byte quads per lane chunk */
    static constexpr int C = 128 / G;           /* groups per step */
    static constexpr int NW = U * C / 2;        /* 32-bit scale words per row and block */
    static constexpr int TB = 4096 + 128 * NW;  /* bytes per block */
};

/* Run-time geometry of one weight [N, K]. */
struct qt_shape {
    int bits, group, U, LQ, NW, TB, NB;
};

__host__ __device__ inline qt_shape qt_of(int bits, int group, int K) {
    qt_shape s;
    s.bits = bits, s.group = group;
    s.U = bits == 4 ? 4 : 2;
    s.LQ = bits / 4;
    s.NW = s.U * (128 / group) / 2;
    s.TB = 4096 + 128 * s.NW;
    s.NB = ((K + 127) / 128 + s.U - 1) / s.U;
    return s;
}

/* Quad i (< 256) of a block, as one thread of the repack or of the block-wise dequantize
 * handles it: row rt 16 + g + 8 ab, step u of the batch, chunk t, quad q (< LQ) of it. */
struct qt_quad {
    int g, ab, u, t, q;
};
__host__ __device__ inline qt_quad qt_quad_at(int i, int LQ) {
    const int lane = i & 31;
    return qt_quad{lane >> 2, (i >> 5) & 1, (i >> 6) / LQ, lane & 3, (i >> 6) % LQ};
}

__host__ __device__ inline size_t qt_block(const qt_shape &s, int n, int k) {
    return ((size_t)(n >> 4) * s.NB + (k >> 7) / s.U) * s.TB;
}

/* Byte offset of the 32-bit word holding code k of row n; *shift: the code's bit offset in
 * it (codes never straddle a word at 4 or 8 bits). */
__host__ __device__ inline size_t qt_code_word(const qt_shape &s, int n, int k, int *shift) {
    const int u = (k >> 7) % s.U, t = (k >> 5) & 3, bit = (k & 31) * s.bits;
    const int q = bit >> 7, ab = (n >> 3) & 1, lane = 4 * (n & 7) + t;
    *shift = bit & 31;
    return qt_block(s, n, k) + ((u * s.LQ + q) * 2 + ab) * 512 + 16 * lane + 4 * ((bit & 127) >> 5);
}

/* Byte offset of the raw 16-bit scale (bias = 0) or bias (1) of code k's group in row n. */
__host__ __device__ inline size_t qt_sb_half(const qt_shape &s, int n, int k, int bias) {
    const int gb = (k % (s.U * 128)) / s.group, kind = 2 * ((n >> 3) & 1) + bias;
    return qt_block(s, n, k) + 4096 + ((kind * 8 + (n & 7)) * s.NW + (gb >> 1)) * 4 + (gb & 1) * 2;
}

#endif
