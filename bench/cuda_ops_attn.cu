/* cuda_ops_bench suite for paged decode attention (Llama-3.1-8B geometry: 32 q heads,
 * 8 kv heads, head_dim 128, 16-token blocks). One 2 GB K and V pool each; every
 * configuration draws its sequences' blocks from a random permutation of the pool, and the
 * timed repetitions rotate among disjoint block sets so L2 cannot serve repeats. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_info.h"
#include "backend/cuda/cuda_ops.h"
#include "cuda_ops_bench.h"
#include "cuda_ops_ref.h"

#define A_HQ 32
#define A_HKV 8
#define A_D 128
#define A_BS 16
#define A_POOL_BLOCKS 65536 /* 2 GiB per pool: 32 sequences x 16384 tokens, twice */
#define A_SETS 8

typedef struct attn_ctx {
    cuda_paged_attn_args a; /* set 0; rep s swaps in the set's q, page table and output */
    int nsets;
    uint16_t *q[A_SETS], *o[A_SETS];
    int32_t *pt[A_SETS];
} attn_ctx;

static void attn_rep(void *c, int rep) {
    attn_ctx *x = (attn_ctx *)c;
    cuda_paged_attn_args a = x->a;
    int s = rep % x->nsets;
    a.q = x->q[s];
    a.o = x->o[s];
    a.page_table = x->pt[s];
    CKL(cuda_paged_decode_attn(&a, g_stream));
}

static int *perm_of(int n, uint64_t seed) {
    int *p = (int *)malloc((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) p[i] = i;
    for (int i = n - 1; i > 0; i--) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        int j = (int)((seed >> 33) % (uint64_t)(i + 1));
        int t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
    return p;
}

/* Runs the attention once on set 0 with the given split mode and output dtype, compares
 * with ref [B, Hq, D]; returns the relative error (and counts a failure). */
static double attn_check(attn_ctx *x, int num_splits, int det, int o_dt, const double *ref,
                         const char *label) {
    cuda_paged_attn_args a = x->a;
    a.num_splits = num_splits;
    a.deterministic = det;
    a.o_dtype = o_dt;
    const size_t n = (size_t)a.B * A_HQ * A_D;
    void *o = dmalloc(n * 4);
    poison(o, n * 4);
    a.o = o;
    CKL(cuda_paged_decode_attn(&a, g_stream));
    double *got = d2h_f64(o, n, o_dt == CUDA_OPS_BF16);
    size_t nan;
    double mx, rel = ref_rel_err(ref, got, n, &nan, &mx);
    char what[120];
    snprintf(what, sizeof what, "attn %s splits=%d%s o=%s", label, cuda_paged_attn_splits(&a),
             det ? " det" : "", o_dt == CUDA_OPS_BF16 ? "bf16" : "f32");
    check_report(what, rel, mx, nan, o_dt == CUDA_OPS_BF16 ? 8e-3 : 1e-4);
    free(got);
    CK(cudaFree(o));
    return rel;
}

/* Deterministic mode: two runs are bitwise equal, and sequence 0 alone (B = 1) gives the
 * same bits as sequence 0 inside the batch (batch invariance). */
static void attn_det_check(attn_ctx *x, const char *label) {
    cuda_paged_attn_args a = x->a;
    a.num_splits = 0;
    a.deterministic = 1;
    a.o_dtype = CUDA_OPS_F32;
    const size_t n = (size_t)a.B * A_HQ * A_D;
    float *o1 = (float *)dmalloc(n * 4), *o2 = (float *)dmalloc(n * 4);
    poison(o1, n * 4);
    poison(o2, n * 4);
    a.o = o1;
    CKL(cuda_paged_decode_attn(&a, g_stream));
    a.o = o2;
    CKL(cuda_paged_decode_attn(&a, g_stream));
    float *h1 = (float *)d2h(o1, n * 4), *h2 = (float *)d2h(o2, n * 4);
    const int rerun_same = memcmp(h1, h2, n * 4) == 0;
    cuda_paged_attn_args one = a; /* sequence 0 alone */
    one.B = 1;
    poison(o2, n * 4);
    one.o = o2;
    CKL(cuda_paged_decode_attn(&one, g_stream));
    float *h3 = (float *)d2h(o2, (size_t)A_HQ * A_D * 4);
    const int batch_inv = memcmp(h1, h3, (size_t)A_HQ * A_D * 4) == 0;
    char what[120];
    snprintf(what, sizeof what, "attn %s det: rerun bitwise %s, batch-invariant %s", label,
             rerun_same ? "yes" : "NO", batch_inv ? "yes" : "NO");
    check_report(what, (rerun_same && batch_inv) ? 0.0 : 1.0, 0, 0, 0.0);
    free(h1); free(h2); free(h3);
    CK(cudaFree(o1)); CK(cudaFree(o2));
}

void suite_attention(void) {
    const size_t pool_elems = (size_t)A_POOL_BLOCKS * A_BS * A_HKV * A_D;
    logf_("\n== paged decode attention (Hq %d, Hkv %d, D %d, block %d, pool %d blocks)\n", A_HQ,
          A_HKV, A_D, A_BS, A_POOL_BLOCKS);
    uint16_t *kc = (uint16_t *)dmalloc(pool_elems * 2), *vc = (uint16_t *)dmalloc(pool_elems * 2);
    fill_bf16(kc, pool_elems, next_seed(), 1.0f);
    fill_bf16(vc, pool_elems, next_seed(), 1.0f);
    uint16_t *kc_h = (uint16_t *)d2h(kc, pool_elems * 2), *vc_h = (uint16_t *)d2h(vc, pool_elems * 2);
    const size_t ws_bytes = cuda_paged_attn_workspace_bytes(32, A_HQ, A_D, CUDA_ATTN_MAX_SPLITS);
    void *ws = dmalloc(ws_bytes);
    int *cnt = (int *)dmalloc(32 * A_HKV * sizeof(int)); /* split merge counters */
    CK(cudaMemset(cnt, 0, 32 * A_HKV * sizeof(int)));
    const int Bs[] = {1, 8, 32}, ctxs[] = {512, 2048, 8192, 16384};
    for (int bi = 0; bi < 3; bi++) {
        for (int ci = 0; ci < 4; ci++) {
            const int B = Bs[bi], ctx = ctxs[ci], pt_stride = ctx / A_BS;
            attn_ctx x;
            memset(&x, 0, sizeof x);
            /* Ragged lengths (partial last blocks) near ctx. */
            int32_t *lens_h = (int32_t *)malloc(B * sizeof(int32_t));
            long need = 0, kv_tokens = 0;
            for (int b = 0; b < B; b++) {
                lens_h[b] = ctx - (b * 7) % 16;
                need += (lens_h[b] + A_BS - 1) / A_BS;
                kv_tokens += lens_h[b];
            }
            x.nsets = (int)(A_POOL_BLOCKS / need);
            x.nsets = x.nsets > A_SETS ? A_SETS : x.nsets < 1 ? 1 : x.nsets;
            int *perm = perm_of(A_POOL_BLOCKS, next_seed());
            int32_t *pt_h = (int32_t *)malloc((size_t)A_SETS * B * pt_stride * sizeof(int32_t));
            for (int s = 0; s < x.nsets; s++) {
                long used = s * need;
                for (int b = 0; b < B; b++)
                    for (int j = 0; j < pt_stride; j++) {
                        int32_t *e = &pt_h[((size_t)s * B + b) * pt_stride + j];
                        *e = j < (lens_h[b] + A_BS - 1) / A_BS ? perm[used++] : -1;
                    }
                x.pt[s] = (int32_t *)dmalloc((size_t)B * pt_stride * 4);
                CK(cudaMemcpy(x.pt[s], pt_h + (size_t)s * B * pt_stride,
                              (size_t)B * pt_stride * 4, cudaMemcpyHostToDevice));
                x.q[s] = (uint16_t *)dmalloc((size_t)B * A_HQ * A_D * 2);
                fill_bf16(x.q[s], (size_t)B * A_HQ * A_D, next_seed(), 1.0f);
                x.o[s] = (uint16_t *)dmalloc((size_t)B * A_HQ * A_D * 2);
            }
            int32_t *lens = (int32_t *)dmalloc(B * 4);
            CK(cudaMemcpy(lens, lens_h, B * 4, cudaMemcpyHostToDevice));
            cuda_paged_attn_args *a = &x.a;
            a->q = x.q[0];
            a->k_cache = kc;
            a->v_cache = vc;
            a->page_table = x.pt[0];
            a->seq_lens = lens;
            a->o = x.o[0];
            a->o_dtype = CUDA_OPS_BF16;
            a->workspace = ws;
            a->workspace_bytes = ws_bytes;
            a->split_counters = cnt;
            a->B = B;
            a->n_q_heads = A_HQ;
            a->n_kv_heads = A_HKV;
            a->head_dim = A_D;
            a->block_size = A_BS;
            a->pt_stride = pt_stride;
            a->max_seq_len = ctx;
            a->scale = 1.0f / sqrtf((float)A_D);

            /* Reference on set 0 (scores scaled in double from the same fp32 scale). */
            uint16_t *q_h = (uint16_t *)d2h(x.q[0], (size_t)B * A_HQ * A_D * 2);
            double *ref = (double *)malloc((size_t)B * A_HQ * A_D * sizeof(double));
            for (int b = 0; b < B; b++)
                ref_attn(q_h + (size_t)b * A_HQ * A_D, kc_h, vc_h, pt_h + (size_t)b * pt_stride,
                         lens_h[b], A_HQ, A_HKV, A_D, A_BS, a->scale, ref + (size_t)b * A_HQ * A_D);
            char label[48];
            snprintf(label, sizeof label, "B=%d ctx=%d", B, ctx);
            logf_("-- %s (%d rotation sets)\n", label, x.nsets);
            int f0 = g_fail;
            double rel = attn_check(&x, 0, 0, CUDA_OPS_BF16, ref, label);
            attn_check(&x, 1, 0, CUDA_OPS_F32, ref, label);
            attn_check(&x, 7, 0, CUDA_OPS_F32, ref, label);
            attn_check(&x, 0, 1, CUDA_OPS_F32, ref, label);
            if (B == 8 && ctx == 2048) attn_det_check(&x, label);
            const int fail = g_fail > f0;
            const double bytes = (double)kv_tokens * A_HKV * A_D * 2 * 2 + 2.0 * B * A_HQ * A_D * 2;
            char shape[80];
            snprintf(shape, sizeof shape, "%s S=%d", label, cuda_paged_attn_splits(a));
            timing t = bench_time(attn_rep, &x, 5, 30);
            result_add("attn auto", shape, t, bytes, rel, fail);
            { /* one chunk in flight per warp (the kernel before the stage ring) */
                const int keep = cuda_attn_stages();
                cuda_set_attn_stages(1);
                t = bench_time(attn_rep, &x, 5, 30);
                result_add("attn 1 stage", shape, t, bytes, rel, fail);
                cuda_set_attn_stages(keep);
            }
            { /* the other walk: "tc" tensor cores, "cc" CUDA cores (MLXCEL_ATTN_TC) */
                const int keep = cuda_attn_tc();
                cuda_set_attn_tc(!keep);
                const int ft = g_fail;
                const double rt = attn_check(&x, 0, 0, CUDA_OPS_F32, ref, label);
                t = bench_time(attn_rep, &x, 5, 30);
                result_add(keep ? "attn cc" : "attn tc", shape, t, bytes, rt, g_fail > ft);
                cuda_set_attn_tc(keep);
            }
            if (B == 1) { /* the split merge through global memory only */
                const int keep = cuda_attn_cluster();
                cuda_set_attn_cluster(0);
                t = bench_time(attn_rep, &x, 5, 30);
                result_add("attn global", shape, t, bytes, rel, fail);
                cuda_set_attn_cluster(keep);
            }
            if (ci >= 2) { /* deterministic split count, long contexts */
                a->deterministic = 1;
                snprintf(shape, sizeof shape, "%s S=%d", label, cuda_paged_attn_splits(a));
                t = bench_time(attn_rep, &x, 5, 30);
                result_add("attn det", shape, t, bytes, rel, fail);
            }
            for (int s = 0; s < x.nsets; s++) {
                CK(cudaFree(x.q[s])); CK(cudaFree(x.o[s])); CK(cudaFree(x.pt[s]));
            }
            CK(cudaFree(lens));
            free(lens_h); free(perm); free(pt_h); free(q_h); free(ref);
        }
    }
    free(kc_h); free(vc_h);
    CK(cudaFree(kc)); CK(cudaFree(vc)); CK(cudaFree(ws)); CK(cudaFree(cnt));
}
