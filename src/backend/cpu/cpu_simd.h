/* x86-64 SIMD pieces of the canonical dot product (cpu_matmul.c) that other CPU kernels
 * computing it share (cpu_qdequant.c's fused one-row product): the target attributes
 * and the fixed horizontal fold of a 16-lane accumulator. Include only under
 * `defined(__x86_64__) && defined(__GNUC__)`. */
#ifndef MLXCEL_BACKEND_CPU_SIMD_H
#define MLXCEL_BACKEND_CPU_SIMD_H

#include <immintrin.h>

#define AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#define AVX512_TARGET __attribute__((target("avx512f,avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))
/* Full unrolling over a tile keeps the accumulators in registers (-O2 does not do it). */
#define UNROLL _Pragma("GCC unroll 8")

/* Lanes j and j + 8 already added (8 lanes in): j += j + 4, j += j + 2, j += j + 1. */
INLINE AVX2_TARGET float hsum8(__m256 v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    return _mm_cvtss_f32(lo);
}

/* Lanes j + (j + 8) first, then the 8-lane tree: the same pairs as the canonical fold. */
INLINE AVX512_TARGET float hsum16(__m512 a) {
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
    return hsum8(_mm256_add_ps(_mm512_castps512_ps256(a), hi));
}

#endif
