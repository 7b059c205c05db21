#include "base/dtype.h"

#include <math.h>

static const struct {
    const char *name;
    size_t size;
} k_dtypes[MX_DTYPE_COUNT] = {
    [MX_F64] = {"F64", 8},  [MX_F32] = {"F32", 4},   [MX_F16] = {"F16", 2},
    [MX_BF16] = {"BF16", 2}, [MX_I64] = {"I64", 8},  [MX_I32] = {"I32", 4},
    [MX_I16] = {"I16", 2},  [MX_I8] = {"I8", 1},     [MX_U64] = {"U64", 8},
    [MX_U32] = {"U32", 4},  [MX_U16] = {"U16", 2},   [MX_U8] = {"U8", 1},
    [MX_BOOL] = {"BOOL", 1}, [MX_F8_E4M3] = {"F8_E4M3", 1}, [MX_F8_E5M2] = {"F8_E5M2", 1},
    [MX_Q8_0] = {"Q8_0", 2 + MX_QBLOCK}, [MX_Q4_0] = {"Q4_0", 2 + MX_QBLOCK / 2},
    [MX_TQ2] = {"TQ2", 2 + MX_QBLOCK * 2 / 8}, [MX_TQ3] = {"TQ3", 2 + MX_QBLOCK * 3 / 8},
    [MX_TQ4] = {"TQ4", 2 + MX_QBLOCK * 4 / 8},
};

mx_dtype mx_dtype_from_name(const char *name) {
    if (!name) return MX_DTYPE_INVALID;
    for (int i = 0; i < MX_Q8_0; i++) /* file dtypes only */
        if (!strcmp(name, k_dtypes[i].name)) return (mx_dtype)i;
    return MX_DTYPE_INVALID;
}

const char *mx_dtype_name(mx_dtype t) {
    return (t >= 0 && t < MX_DTYPE_COUNT) ? k_dtypes[t].name : "INVALID";
}

size_t mx_dtype_size(mx_dtype t) { return (t >= 0 && t < MX_DTYPE_COUNT) ? k_dtypes[t].size : 0; }

float mx_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: renormalize */
            float f = ldexpf((float)man, -24);
            return sign ? -f : f;
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 112) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t mx_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);   /* NaN */
    if (absu >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  /* overflow -> inf */
    if (absu < 0x38800000u) {                                     /* subnormal or zero */
        float a;
        memcpy(&a, &absu, 4);
        return (uint16_t)(sign | (uint32_t)lrintf(a * 16777216.0f));
    }
    uint32_t r = absu + 0xfffu + ((absu >> 13) & 1u); /* round to nearest even */
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}
