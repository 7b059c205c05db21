/* TurboQuant KV rows (Zandieh et al., arXiv 2504.19874: the MSE quantizer, with norm correction).
 *
 * One head's vector x (dim values, dim a power of two >= 32) is turned by a fixed random
 * rotation R = H D / sqrt(dim) (D: +-1 signs from a fixed seed, H: the Walsh-Hadamard matrix),
 * after which every coordinate of sqrt(dim) R x / |x| is close to N(0, 1) whatever x was, so
 * one scalar codebook fits every model: the Lloyd-Max quantizer of N(0, 1) at `bits` bits (2,
 * 3 or 4), computed here once. The rotated coordinates are stored in blocks of 32 (the KV
 * block types' MX_QBLOCK): an fp16 scale s, then 32 codes of `bits` bits, packed
 * little-endian; a code's value is s * c[code], s chosen so that the block's values have the
 * norm of the rotated block they stand for (norm correction). 2.5, 3.5, 4.5 bits a value.
 *
 * Attention never turns keys back: <q, R^T y> = <R q, y>, so the query is rotated once and the
 * keys are read in the rotated space; a softmax-weighted sum of rotated values is rotated back
 * once per output (R^T is linear). */
#ifndef MLXCEL_BACKEND_KVFMT_KV_TURBO_H
#define MLXCEL_BACKEND_KVFMT_KV_TURBO_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define KV_TURBO_BLOCK 32
#define KV_TURBO_MAX_DIM 1024

/* D's sign i (+-1): the top bit of splitmix64(i + 1), a fixed sequence on every platform
 * and run (rows written by one process are read back by it, but the prefix cache and the
 * tests rely on the same rows for the same input). One definition for the CPU's table and
 * the CUDA kernels (backend/cuda/kv_quant.cu), whose pools must hold the same bytes. */
#ifdef __CUDACC__
__host__ __device__
#endif
static inline float kv_turbo_sign(int i) {
    uint64_t z = (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return z >> 63 ? -1.0f : 1.0f;
}

/* 0 when heads of dim values can be stored at `bits` bits, else -1 with err saying why. */
int kv_turbo_check(int dim, int bits, mx_error *err);
/* Bytes of one block of 32 values: the fp16 scale, then the codes. */
static inline size_t kv_turbo_block_bytes(int bits) { return 2 + (size_t)KV_TURBO_BLOCK * (size_t)bits / 8; }
/* The 2^bits Lloyd-Max centroids of N(0, 1), ascending (bits 1..4; NULL otherwise). */
const float *kv_turbo_codebook(int bits);
/* Their 2^bits - 1 cell bounds (a value v codes as the number of bounds below it). */
const float *kv_turbo_bounds(int bits);

/* x <- R x and x <- R^T x (in place; dim a power of two <= KV_TURBO_MAX_DIM). */
void kv_turbo_rotate(float *x, int dim);
void kv_turbo_unrotate(float *x, int dim);

/* One head: x[dim] -> dim / 32 blocks at dst. scratch: dim floats. */
void kv_turbo_encode(const float *x, int dim, int bits, void *dst, float *scratch);
/* n values (a multiple of 32) of blocks, in the rotated space: y[i] = s * c[code i]. */
void kv_turbo_decode_rot(const void *src, int bits, float *y, int64_t n);
/* The same values through one chosen code path, all of them bit for bit equal: REF the plain
 * one-code-at-a-time unpack (the definition), C the portable table path, AVX2 eight lanes at a
 * time (-1 where the CPU or compiler lacks it); AUTO is kv_turbo_decode_rot's choice (AVX2
 * where the CPU has it, else C). 0 on success. */
typedef enum { KV_TURBO_READ_AUTO, KV_TURBO_READ_REF, KV_TURBO_READ_C, KV_TURBO_READ_AVX2 } kv_turbo_read;
int kv_turbo_decode_rot_with(const void *src, int bits, float *y, int64_t n, kv_turbo_read how);
/* One head rebuilt: R^T of the above. */
void kv_turbo_decode(const void *src, int dim, int bits, float *x);

#endif
