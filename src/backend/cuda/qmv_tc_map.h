/* Index math of the tensor-core qmv (qmv_tc.cu), in plain C so that the host unit test
 * (tests/unit/test_qmv_tc_map.c) runs exactly the functions the kernel runs.
 *
 * Fragment scheme (mma.sync m16n8k16, bf16 in, fp32 accumulate; A 16 x 16 row-major,
 * B 16 x 8, lane = 4 g + t):
 *   A rows g and g + 8 = weight rows n0 + g and n0 + g + 8; B column g = x row 8 i + g of
 *   n-tile i. Lane t owns the t-th quarter of every quantization group of its two weight rows:
 *   CL = group / 4 consecutive codes (CL * bits / 8 contiguous bytes, one load), so the 16 k
 *   slots of every MMA come from one group, whose scale then applies to the whole MMA result.
 *   A sum over k does not care which k sits in which slot as long as A and B agree, so a
 *   lane feeds its own codes in the order the bit extraction produces them ("pairs"):
 *     pair e of a lane = a bf16x2 register holding codes (qtc_pair_c0(e), qtc_pair_c0(e) + d),
 *     d = 4 (4-bit) or 2 (8-bit), code indices relative to the lane's quarter.
 *   MMA "unit" m uses pairs 2m (slots 2t, 2t+1: a0 row g, a1 row g+8, b0) and 2m + 1 (slots
 *   2t+8, 2t+9: a2, a3, b1). 8-bit codes q = 16 h + l run as two MMAs on the same B pairs:
 *   A = 0x4500 | h (= 2048 + 16 h) and A = 0x4300 | l (= 128 + l), so their sum is
 *   (2176 + q) x; 4-bit: A = 0x4300 | q = 128 + q. The offset goes back per group with
 *   sum(x): y += s * C + (b - QTC_OFFSET * s) * sum(x).
 * x staging (per warp, shared memory): "units" of 8 consecutive x values of one (x row,
 * group); unit v of a group covers codes 8 v .. 8 v + 7, i.e. quarter t = v / (CL / 8) and
 * pairs 4 u .. 4 u + 3 of that quarter, u = v % (CL / 8). */
#ifndef MLXCEL_BACKEND_CUDA_QMV_TC_MAP_H
#define MLXCEL_BACKEND_CUDA_QMV_TC_MAP_H

#include <stdint.h>

#ifdef __CUDACC__
#define QTC_HD __host__ __device__ __forceinline__
#else
#define QTC_HD static inline
#endif

#define QTC_MAX_ROWS 32 /* x rows per launch (4 n-tiles of 8) */

/* Codes per lane per group (a quarter), 32-bit words per lane per row per group, pairs. */
QTC_HD int qtc_cl(int group) { return group / 4; }
QTC_HD int qtc_lw(int bits, int group) { return group / 4 * bits / 32; }
QTC_HD int qtc_np(int group) { return group / 8; }

/* Codes of pair e (relative to the lane's quarter): c0 and c0 + qtc_pair_d(bits). */
QTC_HD int qtc_pair_c0(int bits, int e) {
    return bits == 4 ? 8 * (e >> 2) + (e & 3) : 4 * (e >> 1) + (e & 1);
}
QTC_HD int qtc_pair_d(int bits) { return bits == 4 ? 4 : 2; }

/* Pair position of code c of a quarter: pair index (*e) and half (0 low, 1 high). */
QTC_HD void qtc_code_pair(int bits, int c, int *e, int *half) {
    if (bits == 4) {
        *e = 4 * (c >> 3) + (c & 3);
        *half = (c >> 2) & 1;
    } else {
        *e = 2 * (c >> 2) + (c & 1);
        *half = (c >> 1) & 1;
    }
}

/* Offset the magic-number codes carry: 4-bit 128 + q, 8-bit (2048 + 16 h) + (128 + l). */
QTC_HD float qtc_offset(int bits) { return bits == 4 ? 128.0f : 2176.0f; }

/* ==== Bit extraction: word wi of a lane's quarter -> 4 bf16x2 A registers ====
 * 4-bit: r[p] = codes (p, p + 4) of the word = pairs 4 wi + p, p = 0..3.
 * 8-bit: bytes q0..q3; r[0] = l(q0), l(q2) (pair 2 wi, low nibbles), r[1] = h(q0), h(q2)
 *        (same pair, high nibbles), r[2] = l(q1), l(q3), r[3] = h(q1), h(q3) (pair 2 wi + 1).
 * Each half is 0x4300 | nibble (128 + n) or, for 8-bit high nibbles, 0x4500 | n (2048 + 16 n). */
QTC_HD void qtc_decode_word(int bits, uint32_t w, uint32_t r[4]) {
    if (bits == 4) {
        r[0] = (w & 0x000F000Fu) | 0x43004300u;
        r[1] = ((w >> 4) & 0x000F000Fu) | 0x43004300u;
        r[2] = ((w >> 8) & 0x000F000Fu) | 0x43004300u;
        r[3] = ((w >> 12) & 0x000F000Fu) | 0x43004300u;
    } else {
        r[0] = (w & 0x000F000Fu) | 0x43004300u;
        r[1] = ((w >> 4) & 0x000F000Fu) | 0x45004500u;
        r[2] = ((w >> 8) & 0x000F000Fu) | 0x43004300u;
        r[3] = ((w >> 12) & 0x000F000Fu) | 0x45004500u;
    }
}

/* The two MMAs of word wi: A registers (indices into qtc_decode_word's r: a0/a1 from row g /
 * g + 8 register ra, a2/a3 from register rb) and B pairs (b0 = pair pb, b1 = pair pb + 1). */
QTC_HD void qtc_word_mma(int bits, int wi, int j, int *ra, int *rb, int *pb) {
    if (bits == 4) { /* unit 2 wi + j: pairs 4 wi + 2 j, 4 wi + 2 j + 1 */
        *ra = 2 * j;
        *rb = 2 * j + 1;
        *pb = 4 * wi + 2 * j;
    } else { /* j = 0: low nibbles, j = 1: high nibbles, both on pairs 2 wi, 2 wi + 1 */
        *ra = j;
        *rb = 2 + j;
        *pb = 2 * wi;
    }
}

/* ==== x staging: unit v of a group (8 values, codes 8 v .. 8 v + 7 of the group) ==== */
/* Quarter (lane t) and first pair of unit v. */
QTC_HD int qtc_unit_t(int group, int v) { return v / (qtc_cl(group) / 8); }
QTC_HD int qtc_unit_e0(int group, int v) { return 4 * (v % (qtc_cl(group) / 8)); }
/* The 8 values v[0..7] of a unit as its 4 pairs (low, high): pair e0 + p = (v[lo[p]], v[hi[p]]). */
QTC_HD void qtc_unit_pairs(int bits, int p, int *lo, int *hi) {
    if (bits == 4) {
        *lo = p;
        *hi = p + 4;
    } else {
        *lo = (p >> 1) * 4 + (p & 1);
        *hi = *lo + 2;
    }
}

/* Accumulator element e (0..3) of a lane in n-tile i: x row (within the pass) and weight row
 * (within the CTA's 16): c0, c1 = row g, columns 2t, 2t + 1; c2, c3 = row g + 8. */
QTC_HD int qtc_c_xrow(int i, int lane, int e) { return 8 * i + 2 * (lane & 3) + (e & 1); }
QTC_HD int qtc_c_wrow(int lane, int e) { return (lane >> 2) + (e >= 2 ? 8 : 0); }

/* Staging stride per lane (words): hi pairs, lo pairs, 4 words of padding (16-byte reads of
 * 8 consecutive lanes then hit 8 different bank groups). */
QTC_HD int qtc_lane_stride(int group) { return 2 * qtc_np(group) + 4; }

#endif
