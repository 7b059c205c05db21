/* MLX affine format checks, bit packing and matrix descriptors: the definition of the format
 * (qfmt.h), which both the converter (quant/) and the CPU backend's kernels use. */
#include <string.h>

#include "backend/qfmt/qfmt.h"

/* ==== Format ==== */

bool mlxq_valid_bits(int bits) {
    return bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8;
}

bool mlxq_valid_group(int gs) { return gs == 32 || gs == 64 || gs == 128; }

int mlxq_check(int bits, int group_size, int64_t k, const char *what, mx_error *err) {
    if (!mlxq_valid_bits(bits))
        return mx_fail(err, "%s: %d-bit quantization is not supported (2, 3, 4, 5, 6, 8)", what,
                       bits);
    if (!mlxq_valid_group(group_size))
        return mx_fail(err, "%s: group size %d is not supported (32, 64, 128)", what, group_size);
    if (k <= 0 || k % group_size)
        return mx_fail(err, "%s: input dimension %lld is not a multiple of the group size %d",
                       what, (long long)k, group_size);
    return 0;
}

/* ==== Bit packing ==== */
/* A row is one little-endian bit stream. For 2/4/8 bits this is MLX's "value i of a word at
 * bits*i"; for 3/5/6 bits MLX writes packs of 8 (3, 5 bit) or 4 (6 bit) codes into 3 or 5
 * bytes, low bits first, which read as little-endian words is the same stream. A group always
 * spans whole words (group_size * bits is a multiple of 32). */

void mlxq_pack_row(uint32_t *dst, const uint8_t *q, int64_t k, int bits) {
    const int64_t nw = mlxq_packed_cols(k, bits);
    memset(dst, 0, (size_t)nw * sizeof *dst);
    for (int64_t i = 0; i < k; i++) {
        int64_t p = i * bits;
        int64_t wi = p >> 5;
        int sh = (int)(p & 31);
        uint32_t v = q[i];
        dst[wi] |= v << sh;
        if (sh + bits > 32) dst[wi + 1] |= v >> (32 - sh);
    }
}

void mlxq_unpack_row(uint8_t *q, const uint32_t *src, int64_t k, int bits) {
    const uint32_t mask = (1u << bits) - 1;
    if (32 % bits == 0) {
        const int per = 32 / bits;
        for (int64_t w = 0; w < k / per; w++) {
            uint32_t v = src[w];
            for (int j = 0; j < per; j++, v >>= bits) q[w * per + j] = (uint8_t)(v & mask);
        }
        return;
    }
    for (int64_t i = 0; i < k; i++) {
        int64_t p = i * bits;
        int64_t wi = p >> 5;
        int sh = (int)(p & 31);
        uint64_t v = src[wi] >> sh;
        if (sh + bits > 32) v |= (uint64_t)src[wi + 1] << (32 - sh);
        q[i] = (uint8_t)(v & mask);
    }
}

/* ==== Matrix descriptors ==== */

mlxq_matrix mlxq_matrix_rows(const mlxq_matrix *m, int64_t r0, int64_t nr) {
    mlxq_matrix v = *m;
    const int64_t ng = m->k / m->group_size, es = (int64_t)mx_dtype_size(m->sb_dtype);
    v.w = m->w + r0 * mlxq_packed_cols(m->k, m->bits);
    v.scales = (const uint8_t *)m->scales + r0 * ng * es;
    v.biases = (const uint8_t *)m->biases + r0 * ng * es;
    v.n = nr;
    return v;
}

int mlxq_matrix_check(const mlxq_matrix *m, mx_error *err) {
    if (!m || !m->w || !m->scales || !m->biases)
        return mx_fail(err, "quantized matrix: weight, scales or biases missing");
    if (mlxq_check(m->bits, m->group_size, m->k, "quantized matrix", err)) return -1;
    if (!mlxq_float_dtype(m->sb_dtype))
        return mx_fail(err, "quantized matrix: scales dtype %s, expected F32, BF16 or F16",
                       mx_dtype_name(m->sb_dtype));
    if (m->n <= 0) return mx_fail(err, "quantized matrix: %lld output rows", (long long)m->n);
    return 0;
}
