/* KV cache: block pool refcounts, page tables, prefix index (hash chain), LRU eviction,
 * copy-on-write, dense slots, storage policy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "kv/kv_cache.h"

static kv_cache *make(kv_storage st, int n_blocks, int n_seqs) {
    kv_cache_params p = {.storage = st, .n_layers = 2, .n_kv_heads = 1, .head_dim = 4,
                         .ctx_size = 64, .n_seqs = n_seqs, .block_size = 4, .n_blocks = n_blocks,
                         .prefix_cache = true};
    kv_cache *kv = NULL;
    mx_error err;
    assert_int_equal(kv_cache_new(&kv, &p, backend_cpu(), &err), 0);
    return kv;
}

static void test_paged_prefix(void **st) {
    (void)st;
    kv_cache *kv = make(KV_STORAGE_PAGED, 8, 1);
    mx_error err;
    int32_t toks[16];
    for (int i = 0; i < 16; i++) toks[i] = 100 + i;
    kv_seq a, b, c;
    kv_seq_init(&a);
    kv_seq_init(&b);
    kv_seq_init(&c);
    assert_int_equal(kv_seq_match_prefix(kv, &a, toks, 10), 0); /* cold */
    assert_int_equal(kv_seq_reserve(kv, &a, 10, &err), 0);
    assert_int_equal(a.n_blocks, 3);
    assert_int_equal(kv_cache_available(kv), 5);
    /* write a recognisable value in layer 0 for position 5 */
    float *k0 = kv_cache_k(kv, 0)->data;
    k0[kv_seq_row(kv, &a, 5) * 4] = 42.0f;
    kv_seq_commit(kv, &a, toks, 10); /* blocks 0, 1 full -> indexed */
    /* b shares the 2 full blocks (8 tokens) of the same prefix */
    assert_int_equal(kv_seq_match_prefix(kv, &b, toks, 12), 8);
    assert_int_equal(b.blocks[0], a.blocks[0]);
    assert_int_equal(b.blocks[1], a.blocks[1]);
    assert_true(k0[kv_seq_row(kv, &b, 5) * 4] == 42.0f);
    /* a different second block only matches the first */
    int32_t other[16];
    memcpy(other, toks, sizeof toks);
    other[6] = 7;
    assert_int_equal(kv_seq_match_prefix(kv, &c, other, 12), 4);
    kv_seq_release(kv, &c);
    /* at least one token is always left to compute */
    kv_seq_init(&c);
    assert_int_equal(kv_seq_match_prefix(kv, &c, toks, 8), 4);
    kv_seq_release(kv, &c);
    /* copy-on-write: writing into a shared block copies it */
    assert_int_equal(kv_seq_prepare_write(kv, &b, 5, 6), 0);
    assert_true(b.blocks[1] != a.blocks[1]);
    assert_true(k0[kv_seq_row(kv, &b, 5) * 4] == 42.0f);
    kv_seq_release(kv, &b);
    /* released indexed blocks stay matchable until evicted */
    kv_seq_release(kv, &a);
    kv_cache_stats s;
    kv_cache_get_stats(kv, &s);
    assert_int_equal(s.n_used, 0);
    assert_true(s.n_cached >= 2);
    kv_seq_init(&a);
    assert_int_equal(kv_seq_match_prefix(kv, &a, toks, 16), 8);
    kv_seq_release(kv, &a);
    /* exhausting the pool evicts cached blocks (LRU) and then reports "full" */
    kv_seq_init(&a);
    assert_int_equal(kv_seq_reserve(kv, &a, 32, &err), 0);
    assert_int_equal(kv_cache_available(kv), 0);
    kv_seq_init(&b);
    assert_int_equal(kv_seq_reserve(kv, &b, 4, &err), 1);
    assert_int_equal(kv_seq_match_prefix(kv, &b, toks, 16), 0); /* evicted */
    kv_seq_release(kv, &b);
    /* beyond the context: error */
    assert_int_equal(kv_seq_reserve(kv, &a, 65, &err), -1);
    kv_seq_release(kv, &a);
    kv_cache_free(kv);
}

/* MLA: K and V one pool (v_is_k) when they share a type. Copy-on-write copies the block once,
 * into the one pool, and the copy holds every row of the shared block; writes into the copy
 * leave the shared block alone. (The engine never writes into a shared block: it always
 * computes a sequence's last prompt token in a block of its own; kv_seq_prepare_write is the
 * only way there.) */
static void test_cow_single_pool(void **st) {
    (void)st;
    kv_cache_params p = {.storage = KV_STORAGE_PAGED, .n_layers = 2, .n_kv_heads = 1,
                         .head_dim = 8, .ctx_size = 64, .block_size = 4, .n_blocks = 8,
                         .prefix_cache = true, .v_is_k = true};
    kv_cache *kv = NULL;
    mx_error err;
    assert_int_equal(kv_cache_new(&kv, &p, backend_cpu(), &err), 0);
    assert_true(kv_cache_params_of(kv)->v_is_k);
    assert_int_equal(kv_cache_bytes_per_token(kv), 2 * 8 * 4); /* K only: half of K + V */
    for (int l = 0; l < 2; l++) assert_ptr_equal(kv_cache_k(kv, l)->data, kv_cache_v(kv, l)->data);
    int32_t toks[12];
    for (int i = 0; i < 12; i++) toks[i] = 7 + 3 * i;
    kv_seq a, b;
    kv_seq_init(&a);
    kv_seq_init(&b);
    assert_int_equal(kv_seq_reserve(kv, &a, 10, &err), 0);
    /* every row of a's blocks, both layers: a recognisable value per (layer, position, dim) */
    for (int l = 0; l < 2; l++) {
        float *k = kv_cache_k(kv, l)->data;
        for (int pos = 0; pos < 10; pos++)
            for (int d = 0; d < 8; d++) k[kv_seq_row(kv, &a, pos) * 8 + d] = (float)(1000 * l + 10 * pos + d);
    }
    kv_seq_commit(kv, &a, toks, 10); /* blocks 0, 1 full: indexed */
    assert_int_equal(kv_seq_match_prefix(kv, &b, toks, 12), 8);
    const int shared = b.blocks[1];
    assert_int_equal(shared, a.blocks[1]);
    kv_cache_stats s0, s1;
    kv_cache_get_stats(kv, &s0);
    assert_int_equal(kv_seq_prepare_write(kv, &b, 6, 7), 0);
    kv_cache_get_stats(kv, &s1);
    assert_int_equal(s1.n_used, s0.n_used + 1); /* one new block, not one per pool */
    assert_true(b.blocks[1] != shared);
    assert_int_equal(b.blocks[0], a.blocks[0]); /* block 0 untouched: still shared */
    for (int l = 0; l < 2; l++) {
        float *k = kv_cache_k(kv, l)->data, *v = kv_cache_v(kv, l)->data;
        for (int pos = 4; pos < 8; pos++)
            for (int d = 0; d < 8; d++) {
                const float want = (float)(1000 * l + 10 * pos + d);
                assert_true(k[kv_seq_row(kv, &b, pos) * 8 + d] == want); /* copied */
                assert_true(v[kv_seq_row(kv, &b, pos) * 8 + d] == want); /* the same pool */
            }
        /* a write into b's copy leaves a's block as it was */
        k[kv_seq_row(kv, &b, 6) * 8] = -1.0f;
        assert_true(k[kv_seq_row(kv, &a, 6) * 8] == (float)(1000 * l + 60));
    }
    kv_seq_release(kv, &b);
    kv_seq_release(kv, &a);
    kv_cache_get_stats(kv, &s1);
    assert_int_equal(s1.n_used, 0);
    kv_cache_free(kv);
}

static void test_dense(void **st) {
    (void)st;
    kv_cache *kv = make(KV_STORAGE_DENSE, 0, 2);
    mx_error err;
    kv_seq a, b, c;
    kv_seq_init(&a);
    kv_seq_init(&b);
    kv_seq_init(&c);
    assert_int_equal(kv_seq_reserve(kv, &a, 10, &err), 0);
    assert_int_equal(kv_seq_reserve(kv, &b, 60, &err), 0);
    assert_int_equal(kv_seq_reserve(kv, &c, 1, &err), 1); /* both slots taken */
    assert_int_equal(kv_seq_row(kv, &b, 3), (int64_t)b.blocks[0] * 64 + 3);
    assert_int_equal(kv_cache_table_block(kv), 64);
    kv_seq_release(kv, &a);
    assert_int_equal(kv_seq_reserve(kv, &c, 1, &err), 0);
    kv_seq_release(kv, &b);
    kv_seq_release(kv, &c);
    kv_cache_free(kv);
}

static void test_policy(void **st) {
    (void)st;
    model_spec s;
    memset(&s, 0, sizeof s);
    char why[160];
    strcpy(s.model_type, "llama");
    assert_int_equal(kv_storage_resolve(KV_STORAGE_AUTO, &s, why, sizeof why), KV_STORAGE_PAGED);
    assert_string_equal(why, "auto: llama is a qualified family");
    strcpy(s.model_type, "mixtral");
    assert_int_equal(kv_storage_resolve(KV_STORAGE_AUTO, &s, why, sizeof why), KV_STORAGE_DENSE);
    assert_int_equal(kv_storage_resolve(KV_STORAGE_PAGED, &s, why, sizeof why), KV_STORAGE_PAGED);
    kv_storage k;
    assert_int_equal(kv_storage_parse("paged", &k), 0);
    assert_int_equal(k, KV_STORAGE_PAGED);
    assert_int_equal(kv_storage_parse("bogus", &k), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paged_prefix),
        cmocka_unit_test(test_cow_single_pool),
        cmocka_unit_test(test_dense),
        cmocka_unit_test(test_policy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
