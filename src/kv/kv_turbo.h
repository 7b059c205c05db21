/* TurboQuant KV rows (Zandieh et al., arXiv 2504.19874, the MSE quantizer with norm correction).
 *
 * One row is one (token, kv head) vector x of dim values (dim a power of two). It is turned by
 * a fixed random rotation R = H D / sqrt(dim) (D: +-1 signs from a fixed seed, H: the
 * Walsh-Hadamard matrix), after which every coordinate of x / |x| is close to N(0, 1 / dim)
 * whatever x was, so one scalar codebook fits every model: the Lloyd-Max quantizer of N(0, 1)
 * at `bits` bits (2, 3 or 4), computed here once. A row stores a float scale s and one code per
 * coordinate; its value in the rotated space is s * c[code], s chosen so that the rebuilt
 * vector has x's norm exactly ("norm correction").
 *
 * Attention never turns the keys back: <q, R^T y> = <R q, y>, so the query is rotated once and
 * the keys are read in the rotated space; a softmax-weighted sum of rotated values is rotated
 * back once per output (R^T is linear). */
#ifndef MLXCEL_KV_KV_TURBO_H
#define MLXCEL_KV_KV_TURBO_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define KV_TURBO_MAX_DIM 1024

/* 0 when rows of dim values at `bits` bits can be stored, else -1 with err saying why. */
int kv_turbo_check(int dim, int bits, mx_error *err);
/* Bytes of one row: the f32 scale, then dim codes of `bits` bits, packed little-endian. */
size_t kv_turbo_row_bytes(int dim, int bits);
/* The 2^bits Lloyd-Max centroids of N(0, 1), ascending (bits 1..4). */
const float *kv_turbo_codebook(int bits);

/* x <- R x and x <- R^T x (in place; dim a power of two <= KV_TURBO_MAX_DIM). */
void kv_turbo_rotate(float *x, int dim);
void kv_turbo_unrotate(float *x, int dim);

/* Encodes x[dim] into row (kv_turbo_row_bytes bytes); scratch: dim floats. */
void kv_turbo_encode(const float *x, int dim, int bits, uint8_t *row, float *scratch);
/* The row in the rotated space: y[i] = s * c[code i] (what attention reads). */
void kv_turbo_decode_rot(const uint8_t *row, int dim, int bits, float *y);
/* The row rebuilt: R^T of the above. */
void kv_turbo_decode(const uint8_t *row, int dim, int bits, float *x);

#endif
