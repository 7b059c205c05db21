/* KV cache types (-ctk / -ctv; backend/kvfmt/kv_quant.h, kv/kv_cache.h):
 * - format: q8_0 and q4_0 blocks of small explicit vectors (all zero, negative and positive
 *   maxima, magnitude ties, halves, clamping, an fp16-rounded scale) against bytes worked out by
 *   hand from ggml's rules, and their dequantized values; f16 / bf16 rounding; the AVX2 and
 *   scalar reads give the same bits;
 * - attention: cpu_attention over a pool of each type equals cpu_attention over an f32 pool
 *   holding the dequantized values, bit for bit (GQA, paged rows, sliding window, soft-cap,
 *   every kernel family, split count and piece length), K and V of different types too;
 * - cache: pool shapes, exact bytes per token, copy-on-write of a shared prefix block and
 *   tensor-parallel rank views with q8_0 pools (whole blocks, byte for byte);
 * - parsing and refusals: llama.cpp's other types named, head_dim not a multiple of 32, a
 *   device backend (CUDA) refusing any type but its own before allocating anything. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "kv/kv_cache.h"
#include "backend/kvfmt/kv_quant.h"
#include "kv_attn_fixture.h"

/* ==== Format: hand-computed blocks ==== */
/* fp16 bit patterns: 1.0 = 0x3c00, 2.0 = 0x4000, -1.0 = 0xbc00, and 1/127 rounds to
 * 2^-7 * (1 + 8/1024) = 0.00787353515625 = 0x2008 (1/127 = 2^-7 * 1.00787..., 0.0787 * 1024 =
 * 8.06 -> 8). Blocks are little-endian: the fp16 low byte first. */

static void check_q8(const float *x, uint16_t want_d, const int8_t *want_q, float d_value) {
    uint8_t b[34];
    memset(b, 0xee, sizeof b);
    kvq_quantize_q8_0(x, b, 32);
    const uint16_t d = (uint16_t)(b[0] | b[1] << 8);
    if (d != want_d) fail_msg("q8_0 scale 0x%04x, want 0x%04x", d, want_d);
    for (int j = 0; j < 32; j++)
        if ((int8_t)b[2 + j] != want_q[j]) fail_msg("q8_0 q[%d] = %d, want %d", j, (int8_t)b[2 + j], want_q[j]);
    float y[32];
    for (int ref = 0; ref < 2; ref++) {
        kvq_force_ref(ref);
        kvq_dequantize_q8_0(b, y, 32);
        for (int j = 0; j < 32; j++)
            if (y[j] != (float)want_q[j] * d_value)
                fail_msg("q8_0 value %d = %.9g, want %.9g", j, y[j], (float)want_q[j] * d_value);
    }
    kvq_force_ref(false);
}

static void test_q8_0_blocks(void **st) {
    (void)st;
    /* amax 127: d = 1, id = 1, q = roundf(x) (halves away from zero) */
    float x[32] = {127, -2.5f, 2.5f, 0.5f, -0.5f, 1.5f, -1.5f, 0.49f, -126.6f, 3.0f};
    int8_t q[32] = {127, -3, 3, 1, -1, 2, -2, 0, -127, 3};
    check_q8(x, 0x3c00, q, 1.0f);
    /* all zero: d = 0, id = 0, every code 0 */
    float z[32] = {0};
    int8_t qz[32] = {0};
    check_q8(z, 0x0000, qz, 0.0f);
    /* the largest magnitude negative (-254): d = amax / 127 = 2, id = 0.5; 1 -> 0.5 -> 1,
     * 3 -> 1.5 -> 2, -5 -> -2.5 -> -3 (ties away from zero), 100 -> 50, -254 -> -127 */
    float n[32] = {1, 3, -5, 100, -254, 7};
    int8_t qn[32] = {1, 2, -3, 50, -127, 4}; /* 7 * 0.5 = 3.5 -> 4 */
    check_q8(n, 0x4000, qn, 2.0f);
    /* amax 1: d = 1/127 stored as fp16 0x2008, id = 1/d (from the fp32 d) ~ 127:
     * 1 -> 127, -1 -> -127, 0.25 -> 31.75 -> 32, 0.1 -> 12.7 -> 13, -0.02 -> -2.54 -> -3 */
    float f[32] = {1.0f, -1.0f, 0.25f, 0.1f, -0.02f};
    int8_t qf[32] = {127, -127, 32, 13, -3};
    check_q8(f, 0x2008, qf, 0.00787353515625f);
}

static void check_q4(const float *x, uint16_t want_d, const uint8_t *want_codes, float d_value) {
    uint8_t b[18];
    memset(b, 0xee, sizeof b);
    kvq_quantize_q4_0(x, b, 32);
    const uint16_t d = (uint16_t)(b[0] | b[1] << 8);
    if (d != want_d) fail_msg("q4_0 scale 0x%04x, want 0x%04x", d, want_d);
    for (int j = 0; j < 16; j++) {
        const uint8_t want = (uint8_t)(want_codes[j] | want_codes[j + 16] << 4);
        if (b[2 + j] != want) fail_msg("q4_0 byte %d = 0x%02x, want 0x%02x", j, b[2 + j], want);
    }
    float y[32];
    for (int ref = 0; ref < 2; ref++) {
        kvq_force_ref(ref);
        kvq_dequantize_q4_0(b, y, 32);
        for (int j = 0; j < 32; j++) {
            const float want = (float)(want_codes[j] - 8) * d_value;
            if (y[j] != want) fail_msg("q4_0 value %d = %.9g, want %.9g", j, y[j], want);
        }
    }
    kvq_force_ref(false);
}

static void test_q4_0_blocks(void **st) {
    (void)st;
    /* max = -8 (largest magnitude, negative): d = -8 / -8 = 1, id = 1, code = min(15, (int)(x +
     * 8.5)): -8 -> 0, 7.5 -> 16 -> 15 (clamped), 0.5 -> 9, -0.5 -> 8, 1.5 -> 10, -7.6 -> 0.9 ->
     * 0, 0.49 -> 8.99 -> 8, 3 -> 11.5 -> 11, 0 -> 8; j + 16 in the high nibble: -1 -> 7,
     * 2 -> 10, -3.5 -> 5 */
    float x[32] = {-8, 7.5f, 0.5f, -0.5f, 1.5f, -7.6f, 0.49f, 3};
    x[16] = -1, x[17] = 2, x[31] = -3.5f;
    uint8_t c[32];
    memset(c, 8, sizeof c);
    const uint8_t lo[8] = {0, 15, 9, 8, 10, 0, 8, 11};
    memcpy(c, lo, 8);
    c[16] = 7, c[17] = 10, c[31] = 5;
    check_q4(x, 0x3c00, c, 1.0f);
    /* all zero: max = +0, d = +0 / -8 = -0 (IEEE), stored as fp16 0x8000 (as ggml does);
     * id = 0, every code (int)(0 + 8.5) = 8, bytes 0x88, values (8 - 8) * -0 = -0 */
    float z[32] = {0};
    uint8_t cz[32];
    memset(cz, 8, sizeof cz);
    check_q4(z, 0x8000, cz, -0.0f);
    /* +8 at j = 3 and -8 at j = 10 tie in magnitude: the first (+8) is max, d = -1, id = -1:
     * 8 -> -8 + 8.5 -> 0 (value (0 - 8) * -1 = 8), -8 -> 16.5 -> 15 (value -7), 2 -> 6.5 -> 6,
     * 0 -> 8; j = 20: -4 -> 12.5 -> 12 (value -4) */
    float p[32] = {2};
    p[3] = 8, p[10] = -8, p[20] = -4;
    uint8_t cp[32];
    memset(cp, 8, sizeof cp);
    cp[0] = 6, cp[3] = 0, cp[10] = 15, cp[20] = 12;
    check_q4(p, 0xbc00, cp, -1.0f);
}

/* f16 / bf16 rows: round to nearest even on write, exact on read; both read paths agree. */
static void test_half_rows(void **st) {
    (void)st;
    /* 1 + 2^-11 is halfway between the f16 neighbours 1 and 1 + 2^-10: to even, 1;
     * 1 + 3 * 2^-11 is halfway between 1 + 2^-10 and 1 + 2^-9: to even, 1 + 2^-9 */
    const float x[9] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, -2.0f, 65504.0f, 0x1p-24f, 0, 1e-9f, 3.0f, -0.1f};
    const uint16_t want16[9] = {0x3c00, 0x3c02, 0xc000, 0x7bff, 0x0001, 0, 0, 0x4200, 0xae66};
    uint16_t h[9];
    kvq_from_f32(h, MX_F16, x, 9);
    for (int i = 0; i < 9; i++)
        if (h[i] != want16[i]) fail_msg("f16 of %.9g = 0x%04x, want 0x%04x", x[i], h[i], want16[i]);
    /* bf16: 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to even, 1 (0x3f80) */
    const float y[3] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -3.0f};
    const uint16_t want_bf[3] = {0x3f80, 0x3f82, 0xc040};
    kvq_from_f32(h, MX_BF16, y, 3);
    for (int i = 0; i < 3; i++) assert_int_equal(h[i], want_bf[i]);
    /* random rows of every type: the scalar and AVX2 reads give the same bits; q8_0 values lie
     * within d / 2 of the input (d <= amax / 127 before fp16 rounding) */
    uint64_t rng = 99;
    float in[96], a[96], b[96];
    uint8_t buf[96 * 4];
    for (int i = 0; i < 96; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        in[i] = ((float)((rng >> 40) & 0xffffff) / 16777216.0f - 0.5f) * (i % 7 ? 3.0f : 1e-6f);
    }
    const mx_dtype ts[] = {MX_F16, MX_BF16, MX_Q8_0, MX_Q4_0};
    for (int t = 0; t < 4; t++) {
        kvq_from_f32(buf, ts[t], in, 96);
        kvq_force_ref(true);
        kvq_to_f32(a, buf, ts[t], 96);
        kvq_force_ref(false);
        kvq_to_f32(b, buf, ts[t], 96);
        assert_memory_equal(a, b, sizeof a);
        if (ts[t] == MX_Q8_0)
            for (int i = 0; i < 96; i++) {
                float amax = 0;
                for (int j = i / 32 * 32; j < i / 32 * 32 + 32; j++) amax = fmaxf(amax, fabsf(in[j]));
                assert_true(fabsf(a[i] - in[i]) <= amax / 127 * 0.51f + 1e-30f);
            }
    }
    assert_int_equal(kvq_row_bytes(MX_Q8_0, 64), 68);
    assert_int_equal(kvq_row_bytes(MX_Q4_0, 64), 36);
    assert_int_equal(kvq_row_bytes(MX_F16, 64), 128);
}

/* ==== Attention: a quantized pool = an f32 pool of its dequantized values, bitwise ==== */
static float frand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static const int k_pieces[] = {0, 1, 3};
static const int k_splits[] = {1, 2, 3, 64};

/* Pools of types tk / tv written through cpu_kv_write from random K/V, and their dequantized
 * f32 copies; attention over both compared for every family / split / piece length. */
static void check_attention(mx_dtype tk, mx_dtype tv, int Hq, int Hkv, int D, int window, float softcap) {
    const int n = KVF_ROWS, rows = KVF_POOL_ROWS;
    const size_t nf = (size_t)n * Hq * D, pf = (size_t)rows * Hkv * D;
    uint64_t rng = 4242 + (uint64_t)D;
    float *q = malloc(nf * 4), *kf = malloc(pf * 4), *vf = malloc(pf * 4);
    float *kd = malloc(pf * 4), *vd = malloc(pf * 4), *o1 = malloc(nf * 4), *o2 = malloc(nf * 4);
    for (size_t i = 0; i < nf; i++) q[i] = frand(&rng);
    for (size_t i = 0; i < pf; i++) kf[i] = 2 * frand(&rng), vf[i] = frand(&rng);
    kf[5] = 40.0f; /* an outlier: its block's scale coarsens the others */
    kv_attn_fix f;
    kv_attn_fix_init(&f, tk, tv, Hq, Hkv, D, window, softcap, kf, vf);
    kvq_to_f32(kd, f.kq, tk, (int64_t)pf);
    kvq_to_f32(vd, f.vq, tv, (int64_t)pf);
    if (tk != MX_F32) assert_true(memcmp(kd, kf, pf * 4) != 0); /* the cache did round */
    mx_tensor tkd = mx_tensor_3d(kd, MX_F32, rows, Hkv, D, MX_DEV_CPU);
    mx_tensor tvd = mx_tensor_3d(vd, MX_F32, rows, Hkv, D, MX_DEV_CPU);
    mx_tensor tq = mx_tensor_3d(q, MX_F32, n, Hq, D, MX_DEV_CPU);
    mx_tensor t1 = mx_tensor_3d(o1, MX_F32, n, Hq, D, MX_DEV_CPU);
    mx_tensor t2 = mx_tensor_3d(o2, MX_F32, n, Hq, D, MX_DEV_CPU);
    for (int pi = 0; pi < 3; pi++) {
        cpu_attention_force_piece(k_pieces[pi]);
        for (int isa = CPU_ISA_SCALAR; isa <= CPU_ISA_AVX512; isa++) {
            if (cpu_matmul_force_isa((cpu_isa)isa)) continue;
            for (int si = 0; si < 4; si++) {
                f.b.kv_splits = k_splits[si];
                memset(o1, 0xff, nf * 4);
                memset(o2, 0x7f, nf * 4);
                cpu_attention(&t1, &tq, &f.tkq, &f.tvq, &f.b, &f.p);
                cpu_attention(&t2, &tq, &tkd, &tvd, &f.b, &f.p);
                if (memcmp(o1, o2, nf * 4))
                    fail_msg("K %s V %s D %d %s piece %d splits %d: differs from the dequantized pool",
                             mx_dtype_name(tk), mx_dtype_name(tv), D, cpu_isa_name((cpu_isa)isa),
                             k_pieces[pi], k_splits[si]);
            }
        }
        cpu_matmul_force_isa(CPU_ISA_AUTO);
    }
    cpu_attention_force_piece(0);
    kv_attn_fix_free(&f);
    free(q), free(kf), free(vf), free(kd), free(vd), free(o1), free(o2);
}

static void test_attention_types(void **st) {
    (void)st;
    const mx_dtype ts[] = {MX_F16, MX_BF16, MX_Q8_0, MX_Q4_0};
    static const int Ds[] = {32, 64, 96};
    for (int t = 0; t < 4; t++)
        for (int d = 0; d < 3; d++) {
            check_attention(ts[t], ts[t], 4, 2, Ds[d], 0, 0.0f);
            check_attention(ts[t], ts[t], 6, 1, Ds[d], 5, 0.0f);
            check_attention(ts[t], ts[t], 8, 2, Ds[d], 7, 15.0f);
        }
    check_attention(MX_F16, MX_BF16, 4, 2, 20, 0, 0.0f); /* halves need no blocks */
    check_attention(MX_Q8_0, MX_F16, 4, 2, 64, 0, 0.0f); /* K and V apart */
    check_attention(MX_F32, MX_Q4_0, 4, 2, 64, 3, 0.0f);
    check_attention(MX_Q4_0, MX_Q8_0, 4, 1, 32, 0, 0.0f);
}

/* ==== Cache: shapes, bytes, copy-on-write, rank views ==== */
static kv_cache *make(kv_type t, int Hkv, int D, int tp, mx_error *err) {
    kv_cache_params p = {.storage = KV_STORAGE_PAGED, .n_layers = 2, .n_kv_heads = Hkv, .head_dim = D,
                         .ctx_size = 64, .block_size = 4, .n_blocks = 8, .prefix_cache = true,
                         .tp_size = tp, .type_k = t, .type_v = t};
    kv_cache *kv = NULL;
    return kv_cache_new(&kv, &p, backend_cpu(), err) ? NULL : kv;
}

static void test_cache_types(void **st) {
    (void)st;
    mx_error err;
    /* bytes per token: 2 layers x 4 heads x (K + V head rows of 64 values) */
    const struct { kv_type t; mx_dtype d; int64_t elems; size_t head; } want[] = {
        {KV_TYPE_DEFAULT, MX_F32, 64, 256}, {KV_TYPE_F32, MX_F32, 64, 256},
        {KV_TYPE_F16, MX_F16, 64, 128},     {KV_TYPE_BF16, MX_BF16, 64, 128},
        {KV_TYPE_Q8_0, MX_Q8_0, 2, 68},     {KV_TYPE_Q4_0, MX_Q4_0, 2, 36},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        kv_cache *kv = make(want[i].t, 4, 64, 1, &err);
        assert_non_null(kv);
        const mx_tensor *k = kv_cache_k(kv, 1), *v = kv_cache_v(kv, 0);
        assert_int_equal(k->dtype, want[i].d);
        assert_int_equal(v->dtype, want[i].d);
        assert_int_equal(k->shape[0], 32);
        assert_int_equal(k->shape[1], 4);
        assert_int_equal(k->shape[2], want[i].elems);
        assert_int_equal(mx_tensor_nbytes(k), 32 * 4 * want[i].head);
        assert_int_equal(kv_cache_bytes_per_token(kv), 2 * 4 * 2 * want[i].head);
        assert_int_equal(kv_cache_params_of(kv)->type_k, want[i].t ? want[i].t : KV_TYPE_F32);
        kv_cache_free(kv);
    }
    /* K q8_0 + V f16 */
    kv_cache_params p = {.storage = KV_STORAGE_DENSE, .n_layers = 3, .n_kv_heads = 2, .head_dim = 32,
                         .ctx_size = 8, .n_seqs = 1, .type_k = KV_TYPE_Q8_0, .type_v = KV_TYPE_F16};
    kv_cache *kv = NULL;
    assert_int_equal(kv_cache_new(&kv, &p, backend_cpu(), &err), 0);
    assert_int_equal(kv_cache_bytes_per_token(kv), 3 * 2 * (34 + 64));
    kv_cache_free(kv);
}

/* A q8_0 pool: a shared prefix block keeps its bytes when a sequence reuses it, and a
 * copy-on-write copies whole rows (every head's blocks) to the new block. */
static void test_prefix_cow_q8(void **st) {
    (void)st;
    mx_error err;
    kv_cache *kv = make(KV_TYPE_Q8_0, 2, 64, 1, &err);
    assert_non_null(kv);
    int32_t toks[12];
    for (int i = 0; i < 12; i++) toks[i] = 100 + i;
    kv_seq a, b;
    kv_seq_init(&a);
    kv_seq_init(&b);
    assert_int_equal(kv_seq_reserve(kv, &a, 10, &err), 0);
    /* rows 0..9 of a through kv_write: [n, 2 heads, 64] */
    float k[10 * 128], v[10 * 128];
    uint64_t rng = 7;
    for (int i = 0; i < 10 * 128; i++) k[i] = frand(&rng), v[i] = 3 * frand(&rng);
    int64_t wr[10];
    for (int i = 0; i < 10; i++) wr[i] = kv_seq_row(kv, &a, i);
    mx_attn_batch wb = {.n_rows = 10, .write_rows = wr};
    mx_tensor tk = mx_tensor_3d(k, MX_F32, 10, 2, 64, MX_DEV_CPU), tv = mx_tensor_3d(v, MX_F32, 10, 2, 64, MX_DEV_CPU);
    for (int l = 0; l < 2; l++) cpu_kv_write(kv_cache_k(kv, l), kv_cache_v(kv, l), &tk, &tv, &wb);
    kv_seq_commit(kv, &a, toks, 10);
    enum { row_bytes = 2 * 2 * 34 }; /* 2 heads x 2 blocks x 34 bytes: one pool row */
    uint8_t before[2][row_bytes];
    memcpy(before[0], cpu_row_ptr(kv_cache_k(kv, 1), kv_seq_row(kv, &a, 5)), row_bytes);
    memcpy(before[1], cpu_row_ptr(kv_cache_v(kv, 0), kv_seq_row(kv, &a, 6)), row_bytes);
    /* the bytes are the row's own quantization */
    uint8_t own[row_bytes];
    kvq_quantize_q8_0(k + 5 * 128, own, 128);
    assert_memory_equal(own, before[0], row_bytes);
    assert_int_equal(kv_seq_match_prefix(kv, &b, toks, 12), 8);
    assert_int_equal(b.blocks[1], a.blocks[1]);
    assert_int_equal(kv_seq_prepare_write(kv, &b, 5, 6), 0); /* shared block 1: copied */
    assert_true(b.blocks[1] != a.blocks[1]);
    assert_memory_equal(cpu_row_ptr(kv_cache_k(kv, 1), kv_seq_row(kv, &b, 5)), before[0], row_bytes);
    assert_memory_equal(cpu_row_ptr(kv_cache_v(kv, 0), kv_seq_row(kv, &b, 6)), before[1], row_bytes);
    kv_seq_release(kv, &a);
    kv_seq_release(kv, &b);
    kv_cache_free(kv);
}

/* Tensor parallelism over a q8_0 pool: rank r's slice [rows, heads / 2, 2 blocks] starts at
 * r * rows * 2 * 2 blocks of 34 bytes; the slices hold exactly the full pool's heads. */
static void test_rank_views_q8(void **st) {
    (void)st;
    mx_error err;
    kv_cache *kv = make(KV_TYPE_Q8_0, 4, 64, 2, &err);
    assert_non_null(kv);
    mx_tensor k0 = kv_cache_k_rank(kv, 0, 0), k1 = kv_cache_k_rank(kv, 0, 1);
    assert_int_equal(k1.dtype, MX_Q8_0);
    assert_int_equal(k1.shape[0], 32);
    assert_int_equal(k1.shape[1], 2);
    assert_int_equal(k1.shape[2], 2);
    assert_ptr_equal(k0.data, kv_cache_k(kv, 0)->data);
    assert_ptr_equal(k1.data, (char *)kv_cache_k(kv, 0)->data + 32 * 2 * 2 * 34);
    assert_int_equal(mx_tensor_nbytes(&k0) + mx_tensor_nbytes(&k1), mx_tensor_nbytes(kv_cache_k(kv, 0)));
    /* copy-on-write copies every rank's part */
    int32_t toks[12];
    for (int i = 0; i < 12; i++) toks[i] = 100 + i;
    kv_seq a, b;
    kv_seq_init(&a);
    kv_seq_init(&b);
    assert_int_equal(kv_seq_reserve(kv, &a, 10, &err), 0);
    const int64_t row = kv_seq_row(kv, &a, 5);
    memset(cpu_row_ptr(&k1, row), 0x5a, 2 * 2 * 34);
    memset(cpu_row_ptr(&k0, row), 0x33, 2 * 2 * 34);
    kv_seq_commit(kv, &a, toks, 10);
    assert_int_equal(kv_seq_match_prefix(kv, &b, toks, 12), 8);
    assert_int_equal(kv_seq_prepare_write(kv, &b, 5, 6), 0);
    const int64_t nrow = kv_seq_row(kv, &b, 5);
    assert_true(nrow != row);
    assert_memory_equal(cpu_row_ptr(&k1, nrow), cpu_row_ptr(&k1, row), 2 * 2 * 34);
    assert_memory_equal(cpu_row_ptr(&k0, nrow), cpu_row_ptr(&k0, row), 2 * 2 * 34);
    kv_seq_release(kv, &a);
    kv_seq_release(kv, &b);
    kv_cache_free(kv);
}

/* ==== Parsing and refusals ==== */
static int g_allocs;
static void *counting_alloc(size_t n) {
    g_allocs++;
    return calloc(1, n ? n : 1);
}

static void test_parse_and_refusals(void **st) {
    (void)st;
    mx_error err;
    kv_type t;
    static const char *ok[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "Q8_0"};
    static const kv_type want[] = {KV_TYPE_F32, KV_TYPE_F16, KV_TYPE_BF16, KV_TYPE_Q8_0, KV_TYPE_Q4_0, KV_TYPE_Q8_0};
    for (int i = 0; i < 6; i++) {
        assert_int_equal(kv_type_parse(ok[i], &t, &err), 0);
        assert_int_equal(t, want[i]);
    }
    assert_string_equal(kv_type_name(KV_TYPE_Q4_0), "q4_0");
    static const char *llama[] = {"q4_1", "q5_0", "q5_1", "iq4_nl"};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(kv_type_parse(llama[i], &t, &err), -1);
        assert_non_null(strstr(err.msg, llama[i]));
        assert_non_null(strstr(err.msg, "not supported"));
        assert_non_null(strstr(err.msg, "f32, f16, bf16, q8_0, q4_0"));
    }
    assert_int_equal(kv_type_parse("q8", &t, &err), -1);
    assert_non_null(strstr(err.msg, "unknown cache type 'q8'"));
    /* head_dim 16 (the golden fixtures): no whole block of 32 */
    kv_cache_params p = {.storage = KV_STORAGE_DENSE, .n_layers = 1, .n_kv_heads = 2, .head_dim = 16,
                         .ctx_size = 8, .n_seqs = 1, .type_v = KV_TYPE_Q4_0};
    kv_cache *kv = NULL;
    assert_int_equal(kv_cache_new(&kv, &p, backend_cpu(), &err), -1);
    assert_non_null(strstr(err.msg, "V cache type q4_0"));
    assert_non_null(strstr(err.msg, "head_dim is 16"));
    p.type_v = KV_TYPE_BF16; /* halves: any head_dim */
    assert_int_equal(kv_cache_new(&kv, &p, backend_cpu(), &err), 0);
    kv_cache_free(kv);
    /* a device backend keeps its own type (the CPU table relabelled as CUDA with bf16 pools):
     * anything else is refused before any pool is allocated */
    backend_ops cuda_like = *backend_cpu();
    cuda_like.device = MX_DEV_CUDA;
    cuda_like.kv_dtype = MX_BF16;
    cuda_like.alloc = counting_alloc;
    p.head_dim = 64;
    p.type_v = KV_TYPE_DEFAULT;
    p.type_k = KV_TYPE_Q8_0;
    g_allocs = 0;
    assert_int_equal(kv_cache_new(&kv, &p, &cuda_like, &err), -1);
    assert_string_equal(err.msg, "K cache type q8_0: the CUDA backend keeps bf16 KV; quantized KV "
                                 "caches run on the CPU backend only");
    assert_int_equal(g_allocs, 0);
    assert_int_equal(kv_type_check(KV_TYPE_F16, &cuda_like, 0, NULL, &err), -1);
    assert_string_equal(err.msg, "cache type f16: the CUDA backend keeps bf16 KV; other cache types run "
                                 "on the CPU backend only");
    assert_int_equal(kv_type_check(KV_TYPE_BF16, &cuda_like, 0, "V", &err), 0);
    assert_int_equal(kv_type_check(KV_TYPE_DEFAULT, &cuda_like, 0, "V", &err), 0);
    p.type_k = KV_TYPE_BF16;
    assert_int_equal(kv_cache_new(&kv, &p, &cuda_like, &err), 0);
    assert_int_equal(kv_cache_k(kv, 0)->dtype, MX_BF16);
    kv_cache_free(kv);
    /* one that keeps every type (the real CUDA backend) takes them, head_dim rules still apply */
    cuda_like.kv_types_all = true;
    p.type_k = KV_TYPE_Q8_0;
    p.type_v = KV_TYPE_TURBO3;
    assert_int_equal(kv_cache_new(&kv, &p, &cuda_like, &err), 0);
    assert_int_equal(kv_cache_k(kv, 0)->dtype, MX_Q8_0);
    assert_int_equal(kv_cache_v(kv, 0)->dtype, MX_TQ3);
    kv_cache_free(kv);
    assert_int_equal(kv_type_check(KV_TYPE_Q4_0, &cuda_like, 16, "K", &err), -1);
    assert_non_null(strstr(err.msg, "head_dim is 16"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q8_0_blocks),     cmocka_unit_test(test_q4_0_blocks),
        cmocka_unit_test(test_half_rows),       cmocka_unit_test(test_attention_types),
        cmocka_unit_test(test_cache_types),     cmocka_unit_test(test_prefix_cow_q8),
        cmocka_unit_test(test_rank_views_q8),   cmocka_unit_test(test_parse_and_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
