/* Element types as safetensors names them, their sizes, and scalar conversions.
 *
 * MX_Q8_0 and MX_Q4_0 are block types (KV cache only, never read from a file): one element is
 * one block of MX_QBLOCK consecutive values with its fp16 scale, in ggml's layout (block_q8_0:
 * fp16 d, 32 x int8; block_q4_0: fp16 d, 16 bytes of nibbles). Shapes and strides of such a
 * tensor count blocks, so mx_dtype_size is the bytes of one block and mx_tensor_nbytes is exact.
 * MX_TQ2 / MX_TQ3 / MX_TQ4 are TurboQuant blocks (backend/kvfmt/kv_turbo.h): fp16 scale + 32 codes of 2, 3
 * or 4 bits of a head's ROTATED values (the head is rotated as a whole before its blocks are cut). */
#ifndef MLXCEL_BASE_DTYPE_H
#define MLXCEL_BASE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum {
    MX_F64 = 0, MX_F32, MX_F16, MX_BF16, MX_I64, MX_I32, MX_I16, MX_I8,
    MX_U64, MX_U32, MX_U16, MX_U8, MX_BOOL, MX_F8_E4M3, MX_F8_E5M2,
    MX_Q8_0, MX_Q4_0, MX_TQ2, MX_TQ3, MX_TQ4, /* block types, see above */
    MX_DTYPE_COUNT,
    MX_DTYPE_INVALID = -1
} mx_dtype;

/* Values in one block of a block type. */
#define MX_QBLOCK 32

/* "BF16" -> MX_BF16; unknown -> MX_DTYPE_INVALID. Safetensors names only: the block types
 * are not file dtypes. */
mx_dtype mx_dtype_from_name(const char *name);
const char *mx_dtype_name(mx_dtype t);
/* Bytes of one element (of one block for the block types). */
size_t mx_dtype_size(mx_dtype t);
/* Values per element: MX_QBLOCK for the block types, 1 otherwise. */
static inline int mx_dtype_block(mx_dtype t) { return t >= MX_Q8_0 && t <= MX_TQ4 ? MX_QBLOCK : 1; }

static inline float mx_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round to nearest even, NaN kept quiet. */
static inline uint16_t mx_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float mx_f16_to_f32(uint16_t h);
uint16_t mx_f32_to_f16(float f);

#endif
