/* The attention set-up shared by test_kv_quant and test_kv_turbo: K / V pools of types tk / tv
 * (48 rows of Hkv heads x D, written from f32 rows through the CPU backend's kv_write, pool row
 * r = batch row r) and a batch of 6 query rows of two sequences through a shuffled page table
 * of 4-token blocks. Header-only: each test includes it once. */
#ifndef MLXCEL_TESTS_KV_ATTN_FIXTURE_H
#define MLXCEL_TESTS_KV_ATTN_FIXTURE_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "base/dtype.h"

enum { KVF_ROWS = 6, KVF_BS = 4, KVF_BLOCKS = 12, KVF_POOL_ROWS = KVF_BLOCKS * KVF_BS };

typedef struct kv_attn_fix {
    void *kq, *vq;         /* the pools' data (calloc'ed) */
    mx_tensor tkq, tvq;    /* [KVF_POOL_ROWS, Hkv, D / block] of tk / tv */
    int64_t wr[KVF_POOL_ROWS];
    int32_t table[2 * 6], pos[KVF_ROWS], seq[KVF_ROWS];
    mx_attn_batch b;       /* points into this struct: keep it in place */
    mx_attn_params p;
} kv_attn_fix;

static void kv_attn_fix_init(kv_attn_fix *f, mx_dtype tk, mx_dtype tv, int Hq, int Hkv, int D, int window,
                             float softcap, float *kf, float *vf) {
    static const int32_t table[2 * 6] = {7, 2, 9, 0, 11, 4, 1, 10, 3, 8, 5, 6};
    static const int32_t pos[KVF_ROWS] = {0, 3, 22, 9, 17, 5}, seq[KVF_ROWS] = {0, 0, 0, 1, 1, 1};
    const int rows = KVF_POOL_ROWS, kb = mx_dtype_block(tk), vb = mx_dtype_block(tv);
    f->kq = calloc((size_t)rows * Hkv * (D / kb), mx_dtype_size(tk));
    f->vq = calloc((size_t)rows * Hkv * (D / vb), mx_dtype_size(tv));
    f->tkq = mx_tensor_3d(f->kq, tk, rows, Hkv, D / kb, MX_DEV_CPU);
    f->tvq = mx_tensor_3d(f->vq, tv, rows, Hkv, D / vb, MX_DEV_CPU);
    for (int r = 0; r < rows; r++) f->wr[r] = r;
    const mx_attn_batch wb = {.n_rows = rows, .write_rows = f->wr};
    mx_tensor tkf = mx_tensor_3d(kf, MX_F32, rows, Hkv, D, MX_DEV_CPU);
    mx_tensor tvf = mx_tensor_3d(vf, MX_F32, rows, Hkv, D, MX_DEV_CPU);
    cpu_kv_write(&f->tkq, &f->tvq, &tkf, &tvf, &wb);
    memcpy(f->table, table, sizeof table);
    memcpy(f->pos, pos, sizeof pos);
    memcpy(f->seq, seq, sizeof seq);
    f->b = (mx_attn_batch){.n_rows = KVF_ROWS, .pos = f->pos, .seq = f->seq, .block_table = f->table,
                           .table_stride = 6, .block_size = KVF_BS, .write_rows = f->wr};
    f->p = (mx_attn_params){.n_heads = Hq, .n_kv_heads = Hkv, .head_dim = D,
                            .scale = 1.0f / sqrtf((float)D), .softcap = softcap, .window = window};
}

static void kv_attn_fix_free(kv_attn_fix *f) {
    free(f->kq);
    free(f->vq);
}

#endif
