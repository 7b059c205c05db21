/* Element types as safetensors names them, their sizes, and scalar conversions. */
#ifndef MLXCEL_BASE_DTYPE_H
#define MLXCEL_BASE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum {
    MX_F64 = 0, MX_F32, MX_F16, MX_BF16, MX_I64, MX_I32, MX_I16, MX_I8,
    MX_U64, MX_U32, MX_U16, MX_U8, MX_BOOL, MX_F8_E4M3, MX_F8_E5M2,
    MX_DTYPE_COUNT,
    MX_DTYPE_INVALID = -1
} mx_dtype;

/* "BF16" -> MX_BF16; unknown -> MX_DTYPE_INVALID. */
mx_dtype mx_dtype_from_name(const char *name);
const char *mx_dtype_name(mx_dtype t);
size_t mx_dtype_size(mx_dtype t);

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
