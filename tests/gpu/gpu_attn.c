/* KV write + attention: CUDA vs CPU over paged and dense layouts, decode (split-K kernel) and
 * prefill / fallback shapes (tiled kernel), with sliding windows and soft-capping.
 *
 * K/V values are drawn bf16-representable, so the CPU's fp32 pool and the CUDA bf16 pool hold
 * the same numbers and the only difference left is the order of the sums (tolerance 1e-4).
 * Decode is also checked bitwise rerun-stable, and under MLXCEL_SDPA_DETERMINISTIC=1
 * batch-invariant (sequence 0 alone == sequence 0 in the batch). */
#include "gpu_test.h"

#include "backend/cuda/cuda_be.h"
#include "backend/cuda/cuda_elem.h"
#include "backend/kvfmt/kv_quant.h"

static uint64_t g_step = 1000;

typedef struct acase {
    const char *name;
    int Hq, Hkv, D, block;
    bool dense;
    int n_seqs;
    const int *lens;      /* [n_seqs] tokens in the cache */
    const int *q_from;    /* [n_seqs] first query position (len - 1: decode), NULL = decode */
    int window;
    float softcap;
    int chunk;            /* llama4 chunked attention (0 = none) */
} acase;

typedef struct kvset {
    int stride, n_rows_phys;
    int32_t *table;       /* [n_seqs, stride] */
    mx_tensor hk, hv;     /* CPU pools (f32 unless typed) */
    mx_tensor dk, dv;     /* CUDA pools (bf16 unless typed) */
} kvset;

/* A pool of n_rows rows of Hkv heads of D values of type t. */
static mx_tensor typed_pool(mx_dtype t, int n_rows, int Hkv, int D, bool dev) {
    const size_t bytes = (size_t)n_rows * Hkv * kvq_row_bytes(t, D);
    void *p = dev ? g_gpu->alloc(bytes) : calloc(bytes, 1);
    return mx_tensor_3d(p, t, n_rows, Hkv, D / mx_dtype_block(t), dev ? MX_DEV_CUDA : MX_DEV_CPU);
}

static int64_t phys(const kvset *s, int block, int seq, int p) {
    return (int64_t)s->table[(size_t)seq * s->stride + p / block] * block + p % block;
}

/* Runs one batch on the GPU inside a step (the backend reads the step's arrays). */
static void gpu_step(const mx_attn_batch *ab, int n_seqs, bool decode, void (*fn)(void *), void *ctx) {
    int32_t *tok = calloc((size_t)ab->n_rows, 4), *out = malloc((size_t)ab->n_rows * 4);
    for (int i = 0; i < ab->n_rows; i++) out[i] = i;
    mx_step st = {.ab = ab, .tokens = tok, .n_seqs = n_seqs, .n_out = decode ? ab->n_rows : 0,
                  .out_rows = out, .decode_only = decode};
    mx_error err;
    if (g_gpu->step_begin(&st, &err) < 0) {
        printf("FAIL step_begin: %s\n", err.msg);
        g_failures++;
    } else {
        fn(ctx);
        if (g_gpu->step_end(&err)) {
            printf("FAIL step_end: %s\n", err.msg);
            g_failures++;
        }
    }
    free(tok);
    free(out);
}

typedef struct fill_ctx {
    kvset *s;
    mx_tensor *dkt, *dvt;
    const mx_attn_batch *ab;
} fill_ctx;
static void fill_fn(void *p) {
    fill_ctx *c = p;
    g_gpu->kv_write(&c->s->dk, &c->s->dv, c->dkt, c->dvt, c->ab);
}

typedef struct attn_ctx {
    kvset *s;
    mx_tensor *dq, *dout;
    const mx_attn_batch *ab;
    const mx_attn_params *ap;
} attn_ctx;
static void attn_fn(void *p) {
    attn_ctx *c = p;
    g_gpu->attention(c->dout, c->dq, &c->s->dk, &c->s->dv, c->ab, c->ap);
}

/* Runs the case's queries on the GPU; out [n_rows, Hq, D] host. */
static void run_gpu_queries(kvset *s, const acase *c, const mx_attn_batch *ab, const float *q,
                            float *out) {
    const int64_t sq[3] = {ab->n_rows, c->Hq, c->D};
    mx_tensor dq = gt_dev_f32(q, 3, sq), dout = gt_dev_poison(3, sq);
    mx_attn_params ap = {.n_heads = c->Hq, .n_kv_heads = c->Hkv, .head_dim = c->D,
                         .scale = 1.0f / sqrtf((float)c->D), .softcap = c->softcap, .window = c->window,
                         .chunk = c->chunk};
    attn_ctx ctx = {s, &dq, &dout, ab, &ap};
    const bool decode = !c->q_from;
    gpu_step(ab, c->n_seqs, decode, attn_fn, &ctx);
    gt_to_host(out, &dout);
    gt_dev_free(&dq);
    gt_dev_free(&dout);
}

/* The case's queries again under another decode-attention setting (set(value); graphs
 * cleared so the step runs eagerly under it), then set(keep). */
static void run_setting(void (*set)(int), int value, int keep, kvset *s, const acase *c,
                        mx_attn_batch *qb, const float *q, float *out) {
    set(value);
    cu_graphs_clear();
    qb->step_id = ++g_step;
    run_gpu_queries(s, c, qb, q, out);
    set(keep);
    cu_graphs_clear();
}

/* kt, vt: the pool types on both backends (0: CPU f32 and CUDA bf16 pools, values drawn
 * bf16-representable). */
static void attn_case_typed(const acase *c, mx_dtype kt, mx_dtype vt) {
    const int Hkv = c->Hkv, D = c->D, W = Hkv * D, block = c->block;
    kvset s = {0};
    int max_len = 0, total = 0;
    for (int i = 0; i < c->n_seqs; i++) {
        max_len = c->lens[i] > max_len ? c->lens[i] : max_len;
        total += c->lens[i];
    }
    /* ---- layout: paged (random block permutation) or dense (one slot per sequence) ---- */
    if (c->dense) {
        s.stride = 1;
        s.n_rows_phys = c->n_seqs * block;
        s.table = malloc((size_t)c->n_seqs * 4);
        for (int i = 0; i < c->n_seqs; i++) s.table[i] = c->n_seqs - 1 - i;
    } else {
        s.stride = (max_len + block - 1) / block;
        const int nb = c->n_seqs * s.stride + 3;
        s.n_rows_phys = nb * block;
        int32_t *perm = malloc((size_t)nb * 4);
        for (int i = 0; i < nb; i++) perm[i] = i;
        for (int i = nb - 1; i > 0; i--) {
            const int j = (int)((unsigned)(gt_randn() * 1e6f) % (unsigned)(i + 1));
            const int t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        s.table = malloc((size_t)c->n_seqs * s.stride * 4);
        for (int i = 0; i < c->n_seqs * s.stride; i++) s.table[i] = perm[i];
        free(perm);
    }
    const bool typed = kt != 0;
    s.hk = typed_pool(typed ? kt : MX_F32, s.n_rows_phys, Hkv, D, false);
    s.hv = typed_pool(typed ? vt : MX_F32, s.n_rows_phys, Hkv, D, false);
    s.dk = typed_pool(typed ? kt : MX_BF16, s.n_rows_phys, Hkv, D, true);
    s.dv = typed_pool(typed ? vt : MX_BF16, s.n_rows_phys, Hkv, D, true);

    /* ---- fill every sequence's K/V through kv_write on both sides ---- */
    float *k = malloc((size_t)total * W * 4), *v = malloc((size_t)total * W * 4);
    gt_fill(k, (size_t)total * W, 1.0f);
    gt_fill(v, (size_t)total * W, 1.0f);
    if (!typed) {
        gt_round_bf16(k, (size_t)total * W);
        gt_round_bf16(v, (size_t)total * W);
    }
    int32_t *pos = malloc((size_t)total * 4), *seq = malloc((size_t)total * 4);
    int64_t *wr = malloc((size_t)total * 8);
    for (int i = 0, r = 0; i < c->n_seqs; i++)
        for (int p = 0; p < c->lens[i]; p++, r++) {
            pos[r] = p;
            seq[r] = i;
            wr[r] = phys(&s, block, i, p);
        }
    mx_attn_batch fb = {.n_rows = total, .pos = pos, .seq = seq, .block_table = s.table,
                        .table_stride = s.stride, .block_size = block, .write_rows = wr,
                        .step_id = ++g_step};
    mx_tensor hkt = mx_tensor_3d(k, MX_F32, total, Hkv, D, MX_DEV_CPU);
    mx_tensor hvt = mx_tensor_3d(v, MX_F32, total, Hkv, D, MX_DEV_CPU);
    g_cpu->kv_write(&s.hk, &s.hv, &hkt, &hvt, &fb);
    const int64_t sk[3] = {total, Hkv, D};
    mx_tensor dkt = gt_dev_f32(k, 3, sk), dvt = gt_dev_f32(v, 3, sk);
    fill_ctx fc = {&s, &dkt, &dvt, &fb};
    gpu_step(&fb, c->n_seqs, false, fill_fn, &fc);
    gt_dev_free(&dkt);
    gt_dev_free(&dvt);
    if (typed) { /* both backends store the same bytes (cuda_kv_write_fmt's contract) */
        for (int i = 0; i < 2; i++) {
            const mx_tensor *hp = i ? &s.hv : &s.hk, *dp = i ? &s.dv : &s.dk;
            const size_t bytes = (size_t)s.n_rows_phys * Hkv * kvq_row_bytes(hp->dtype, D);
            uint8_t *got = malloc(bytes);
            cudaMemcpy(got, dp->data, bytes, cudaMemcpyDeviceToHost);
            size_t diff = 0;
            for (size_t b = 0; b < bytes; b++) diff += got[b] != ((const uint8_t *)hp->data)[b];
            char what[200];
            snprintf(what, sizeof what, "%s: %s pool bytes == CPU's (%zu of %zu differ)", c->name,
                     i ? "V" : "K", diff, bytes);
            gt_report(what, (double)diff, 0, 0);
            free(got);
        }
    }

    /* ---- query batch: decode (last position) or chunks [q_from, len) ---- */
    int nq = 0;
    for (int i = 0; i < c->n_seqs; i++) nq += c->q_from ? c->lens[i] - c->q_from[i] : 1;
    int32_t *qpos = malloc((size_t)nq * 4), *qseq = malloc((size_t)nq * 4);
    int64_t *qwr = malloc((size_t)nq * 8);
    for (int i = 0, r = 0; i < c->n_seqs; i++) {
        const int from = c->q_from ? c->q_from[i] : c->lens[i] - 1;
        for (int p = from; p < c->lens[i]; p++, r++) {
            qpos[r] = p;
            qseq[r] = i;
            qwr[r] = -1;
        }
    }
    mx_attn_batch qb = {.n_rows = nq, .pos = qpos, .seq = qseq, .block_table = s.table,
                        .table_stride = s.stride, .block_size = block, .write_rows = qwr,
                        .step_id = ++g_step};
    const size_t qn = (size_t)nq * c->Hq * D;
    float *q = malloc(qn * 4), *ref = malloc(qn * 4), *out = malloc(qn * 4), *out2 = malloc(qn * 4);
    gt_fill(q, qn, 1.0f);
    mx_attn_params ap = {.n_heads = c->Hq, .n_kv_heads = Hkv, .head_dim = D,
                         .scale = 1.0f / sqrtf((float)D), .softcap = c->softcap, .window = c->window,
                         .chunk = c->chunk};
    mx_tensor hq = mx_tensor_3d(q, MX_F32, nq, c->Hq, D, MX_DEV_CPU);
    mx_tensor hout = mx_tensor_3d(ref, MX_F32, nq, c->Hq, D, MX_DEV_CPU);
    g_cpu->attention(&hout, &hq, &s.hk, &s.hv, &qb, &ap);
    run_gpu_queries(&s, c, &qb, q, out);
    long bad;
    /* rows that do not take the split-K decode kernel run on tensor cores when head_dim is
     * 64/128 (the backend's own rule, cu_attention): q and P are rounded to bf16 */
    const int G = c->Hq / Hkv;
    const bool split_k = !typed && !c->q_from && (G == 1 || G == 2 || G == 4 || G == 8) && block % 16 == 0;
    const bool flash = !split_k && (D == 64 || D == 128) && G <= CUDA_ATTN_FLASH_QV &&
                       !(typed && (!c->q_from || kt == MX_F32 || vt == MX_F32));
    char name[160];
    snprintf(name, sizeof name, "%s%s", c->name, flash ? " [flash, bf16 q/P]" : "");
    gt_report_err(name, gt_rel_err(out, ref, qn, &bad), flash ? 1e-2 : 1e-4, &bad);
    if (!c->q_from) {
        /* rerun: bitwise identical */
        qb.step_id = ++g_step;
        run_gpu_queries(&s, c, &qb, q, out2);
        char what[128];
        snprintf(what, sizeof what, "  rerun bitwise identical");
        gt_report(what, memcmp(out, out2, qn * 4) ? 1.0 : 0.0, 0, 0);
        /* the split merge inside a cluster and through global memory: the same bits */
        const int cl = cuda_attn_cluster();
        run_setting(cuda_set_attn_cluster, cl ? 0 : 16, cl, &s, c, &qb, q, out2);
        snprintf(what, sizeof what, "  cluster merge %s: bitwise identical", cl ? "off" : "on");
        gt_report(what, memcmp(out, out2, qn * 4) ? 1.0 : 0.0, 0, 0);
        /* one chunk in flight per warp against the ring's stages: the same bits */
        const int ns = cuda_attn_stages();
        run_setting(cuda_set_attn_stages, ns > 1 ? 1 : 3, ns, &s, c, &qb, q, out2);
        snprintf(what, sizeof what, "  %d stage(s): bitwise identical", ns > 1 ? 1 : 3);
        gt_report(what, memcmp(out, out2, qn * 4) ? 1.0 : 0.0, 0, 0);
        /* the first KV chunks copied before the PDL wait or after it: the same bits */
        const int ek = cuda_attn_early_kv();
        run_setting(cuda_set_attn_early_kv, !ek, ek, &s, c, &qb, q, out2);
        snprintf(what, sizeof what, "  early KV copies %s: bitwise identical", ek ? "off" : "on");
        gt_report(what, memcmp(out, out2, qn * 4) ? 1.0 : 0.0, 0, 0);
        /* the other walk (CUDA cores / tensor cores with q and P as bf16 hi + lo) against
         * the CPU, at the same tolerance */
        const int tc = cuda_attn_tc();
        run_setting(cuda_set_attn_tc, !tc, tc, &s, c, &qb, q, out2);
        snprintf(what, sizeof what, "  %s walk vs CPU", tc ? "CUDA-core" : "tensor-core");
        gt_report_err(what, gt_rel_err(out2, ref, qn, &bad), flash ? 1e-2 : 1e-4, &bad);
        if (g_cu.deterministic && c->n_seqs > 1) {
            /* sequence 0 alone must give the bits it gets inside the batch */
            mx_attn_batch one = qb;
            one.n_rows = 1;
            one.step_id = ++g_step;
            acase c1 = *c;
            c1.n_seqs = 1;
            run_gpu_queries(&s, &c1, &one, q, out2);
            gt_report("  deterministic: batch-invariant (seq 0 alone)",
                      memcmp(out, out2, (size_t)c->Hq * D * 4) ? 1.0 : 0.0, 0, 0);
        }
    }
    free(q), free(ref), free(out), free(out2), free(qpos), free(qseq), free(qwr);
    free(k), free(v), free(pos), free(seq), free(wr), free(s.table);
    free(s.hk.data), free(s.hv.data);
    gt_dev_free(&s.dk);
    gt_dev_free(&s.dv);
}

static void attn_case(const acase *c) { attn_case_typed(c, 0, 0); }

/* rope(q), rope(k), kv_write issued back to back run as one fused launch on CUDA: q must be
 * rotated in place and the pool rows must hold rotated k and plain v (partial rotary too). */
typedef struct ropekv_ctx {
    mx_tensor *q, *k, *v, *kp, *vp;
    const float *cs;
    int rot;
    const mx_attn_batch *ab;
} ropekv_ctx;
static void ropekv_fn(void *p) {
    ropekv_ctx *c = p;
    g_gpu->rope(c->q, c->cs, c->rot);
    g_gpu->rope(c->k, c->cs, c->rot);
    g_gpu->kv_write(c->kp, c->vp, c->k, c->v, c->ab);
}

static void test_rope_kv_fused(int rot) {
    const int n = 5, Hq = 8, Hkv = 2, D = 64, rows_phys = 64;
    const size_t nq = (size_t)n * Hq * D, nk = (size_t)n * Hkv * D, np = (size_t)rows_phys * Hkv * D;
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4), *cs = malloc((size_t)n * rot * 4);
    gt_fill(q, nq, 1.0f);
    gt_fill(k, nk, 1.0f);
    gt_fill(v, nk, 1.0f);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < rot / 2; j++) {
            const double a = (double)(i + 40) / pow(10000.0, 2.0 * j / rot);
            cs[(size_t)i * rot + 2 * j] = (float)cos(a);
            cs[(size_t)i * rot + 2 * j + 1] = (float)sin(a);
        }
    int32_t pos[5] = {40, 41, 42, 43, 44}, seq[5] = {0, 0, 0, 0, 0}, table[4] = {3, 1, 2, 0};
    int64_t wr[5] = {50, 51, 52, 53, -1}; /* the last row writes nothing */
    mx_attn_batch ab = {.n_rows = n, .pos = pos, .seq = seq, .block_table = table, .table_stride = 4,
                        .block_size = 16, .write_rows = wr, .step_id = ++g_step};
    /* CPU reference */
    float *rq = malloc(nq * 4), *rk = malloc(nk * 4), *pk = calloc(np, 4), *pv = calloc(np, 4);
    memcpy(rq, q, nq * 4);
    memcpy(rk, k, nk * 4);
    mx_tensor hq = mx_tensor_3d(rq, MX_F32, n, Hq, D, MX_DEV_CPU), hk = mx_tensor_3d(rk, MX_F32, n, Hkv, D, MX_DEV_CPU);
    mx_tensor hv = mx_tensor_3d(v, MX_F32, n, Hkv, D, MX_DEV_CPU);
    mx_tensor hkp = mx_tensor_3d(pk, MX_F32, rows_phys, Hkv, D, MX_DEV_CPU), hvp = mx_tensor_3d(pv, MX_F32, rows_phys, Hkv, D, MX_DEV_CPU);
    g_cpu->rope(&hq, cs, rot);
    g_cpu->rope(&hk, cs, rot);
    mx_attn_batch cab = ab;
    int64_t wr_cpu[4] = {50, 51, 52, 53};
    cab.n_rows = 4; /* the CPU op has no "skip" rows */
    cab.write_rows = wr_cpu;
    g_cpu->kv_write(&hkp, &hvp, &hk, &hv, &cab);
    gt_round_bf16(pk, np);
    gt_round_bf16(pv, np);
    /* CUDA */
    const int64_t sq[3] = {n, Hq, D}, sk[3] = {n, Hkv, D}, sc[2] = {n, rot};
    mx_tensor dq = gt_dev_f32(q, 3, sq), dk = gt_dev_f32(k, 3, sk), dv = gt_dev_f32(v, 3, sk);
    mx_tensor dcs = gt_dev_f32(cs, 2, sc);
    mx_tensor dkp = mx_tensor_3d(g_gpu->alloc(np * 2), MX_BF16, rows_phys, Hkv, D, MX_DEV_CUDA);
    mx_tensor dvp = mx_tensor_3d(g_gpu->alloc(np * 2), MX_BF16, rows_phys, Hkv, D, MX_DEV_CUDA);
    ropekv_ctx c = {&dq, &dk, &dv, &dkp, &dvp, dcs.data, rot, &ab};
    gpu_step(&ab, 1, false, ropekv_fn, &c);
    float *oq = malloc(nq * 4), *ok = malloc(np * 4), *ov = malloc(np * 4);
    gt_to_host(oq, &dq);
    const int64_t sp[3] = {rows_phys, Hkv, D};
    mx_tensor f = gt_dev_poison(3, sp);
    g_gpu->convert(&f, &dkp);
    gt_to_host(ok, &f);
    g_gpu->convert(&f, &dvp);
    gt_to_host(ov, &f);
    long bad;
    char what[96];
    snprintf(what, sizeof what, "rope(q) + rope(k) + kv_write fused, rot %d: q", rot);
    gt_report_err(what, gt_rel_err(oq, rq, nq, &bad), 1e-6, &bad);
    snprintf(what, sizeof what, "rope(q) + rope(k) + kv_write fused, rot %d: K pool", rot);
    gt_report_err(what, gt_rel_err(ok, pk, np, &bad), 4e-3, &bad);
    snprintf(what, sizeof what, "rope(q) + rope(k) + kv_write fused, rot %d: V pool", rot);
    gt_report_err(what, gt_rel_err(ov, pv, np, &bad), 0, &bad);
    gt_dev_free(&dq), gt_dev_free(&dk), gt_dev_free(&dv), gt_dev_free(&dcs), gt_dev_free(&dkp),
        gt_dev_free(&dvp), gt_dev_free(&f);
    free(q), free(k), free(v), free(cs), free(rq), free(rk), free(pk), free(pv), free(oq), free(ok), free(ov);
}

int gt_run_attn_tests(void) {
    test_rope_kv_fused(64);
    test_rope_kv_fused(32);
    static const int lens6[6] = {1, 15, 16, 17, 300, 1000};
    static const int lens3[3] = {700, 33, 128};
    static const int from3[3] = {650, 0, 100};
    static const int lens2[2] = {2048, 513};
    static const acase cases[] = {
        {"decode paged D128 G4 (split-K)", 32, 8, 128, 16, false, 6, lens6, NULL, 0, 0, 0},
        {"decode paged D128 G8 window 100 softcap 30", 32, 4, 128, 16, false, 6, lens6, NULL, 100, 30, 0},
        {"decode paged D64 G4 block 32 (1B shape)", 32, 8, 64, 32, false, 2, lens2, NULL, 0, 0, 0},
        {"decode paged D128 G1", 8, 8, 128, 16, false, 3, lens3, NULL, 0, 0, 0},
        {"decode paged D128 G2 window 5", 16, 8, 128, 16, false, 6, lens6, NULL, 5, 0, 0},
        {"decode dense D128 G4 (slot 2048)", 32, 8, 128, 2048, true, 2, lens2, NULL, 0, 0, 0},
        {"decode paged D256 G2 (tiled fallback)", 8, 4, 256, 16, false, 3, lens3, NULL, 0, 50, 0},
        {"decode paged D128 G16 (tiled fallback)", 32, 2, 128, 16, false, 6, lens6, NULL, 0, 0, 0},
        {"prefill chunks paged D128 G4", 32, 8, 128, 16, false, 3, lens3, from3, 0, 0, 0},
        {"prefill chunks paged D128 G4 window 50", 32, 8, 128, 16, false, 3, lens3, from3, 50, 0, 0},
        {"prefill chunks dense D80 G2 softcap 20", 8, 4, 80, 1024, true, 3, lens3, from3, 0, 20, 0},
        {"prefill chunks paged D8 G2 block 4 (tiny)", 4, 2, 8, 4, false, 3, lens3, from3, 7, 0, 0},
        {"prefill chunks paged D64 G8 softcap 30", 64, 8, 64, 16, false, 3, lens3, from3, 0, 30, 0},
        {"prefill chunks paged D128 G16 window 300", 32, 2, 128, 32, false, 3, lens3, from3, 300, 0, 0},
        {"prefill chunks dense D128 G1", 8, 8, 128, 1024, true, 3, lens3, from3, 0, 0, 0},
        /* llama4 chunked layers: keys of the query's chunk only (decode bounds its walk by it) */
        {"decode paged D128 G4 chunk 64", 32, 8, 128, 16, false, 6, lens6, NULL, 0, 0, 64},
        {"decode paged D128 G8 chunk 100 window 30", 32, 4, 128, 16, false, 6, lens6, NULL, 30, 0, 100},
        {"decode paged D256 G2 chunk 40 (tiled fallback)", 8, 4, 256, 16, false, 3, lens3, NULL, 0, 0, 40},
        {"prefill chunks paged D128 G4 chunk 128 (flash)", 32, 8, 128, 16, false, 3, lens3, from3, 0, 0, 128},
        {"prefill chunks dense D80 G2 chunk 24 (tiled)", 8, 4, 80, 1024, true, 3, lens3, from3, 0, 0, 24},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) attn_case(&cases[i]);
    /* split counts of every merge form: 2, odd, the largest cluster (16, non-portable), and
     * one past it (global); the short cases (a chunk a warp at most) take the cluster merge,
     * the longer ones the stage ring */
    static const int lens_short[3] = {20, 33, 64};
    static const acase short_cases[] = {
        {"decode paged D128 G4 short", 32, 8, 128, 16, false, 3, lens_short, NULL, 0, 0, 0},
        {"decode paged D64 G8 short softcap 30", 32, 4, 64, 16, false, 3, lens_short, NULL, 0, 30, 0},
    };
    static const int forced[] = {2, 7, 16, 17};
    const int keep = g_cu.forced_splits;
    for (size_t f = 0; f < sizeof forced / sizeof forced[0]; f++) {
        g_cu.forced_splits = forced[f];
        cu_graphs_clear();
        for (size_t i = 0; i < 7; i++) {
            acase c = i < 5 ? cases[i] : short_cases[i - 5];
            /* the page-table stride (the kernel's length bound) only grows in a process:
             * start it afresh, as a new server's would be (graphs are keyed by it) */
            g_cu.table_cap = 0;
            cu_graphs_clear();
            char name[160];
            snprintf(name, sizeof name, "%s, %d splits", c.name, forced[f]);
            c.name = name;
            attn_case(&c);
        }
    }
    g_cu.forced_splits = keep;
    cu_graphs_clear();

    /* KV cache types: pools written on both backends (same bytes), attention against the
     * CPU's on them; decode rows on the split kernel (exact values: 1e-4; q8_0 / q4_0 on its
     * tensor-core walk, the blocks' integers in bf16 and their scales in fp32, the others and
     * "the other walk" below on its CUDA-core walk), prefill on tensor cores (values rounded
     * to bf16: 1e-2), f32 pools on the CUDA-core kernel */
    static const struct { mx_dtype k, v; const char *name; } types[] = {
        {MX_F16, MX_F16, "f16"},       {MX_Q8_0, MX_Q8_0, "q8_0"}, {MX_Q4_0, MX_Q4_0, "q4_0"},
        {MX_TQ4, MX_TQ4, "turbo4"},    {MX_TQ3, MX_TQ3, "turbo3"}, {MX_TQ2, MX_TQ2, "turbo2"},
        {MX_Q8_0, MX_TQ3, "K q8_0 V turbo3"}, {MX_TQ4, MX_F16, "K turbo4 V f16"},
        {MX_F32, MX_F32, "f32"},       {MX_BF16, MX_Q4_0, "K bf16 V q4_0"},
    };
    static const int tcase[] = {0, 1, 2, 5, 6, 8, 9, 12, 15, 16, 18};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t ci = 0; ci < sizeof tcase / sizeof tcase[0]; ci++) {
            acase c = cases[tcase[ci]];
            if (c.D % 32 && mx_dtype_block(types[ti].k) * mx_dtype_block(types[ti].v) > 1) continue;
            if ((kvq_turbo_bits(types[ti].k) || kvq_turbo_bits(types[ti].v)) && (c.D & (c.D - 1))) continue;
            char name[200];
            snprintf(name, sizeof name, "[%s] %s", types[ti].name, c.name);
            c.name = name;
            g_cu.table_cap = 0;
            cu_graphs_clear();
            attn_case_typed(&c, types[ti].k, types[ti].v);
        }
    /* the decode split count forced (odd, one past 16, the most) */
    static const int tforced[] = {1, 7, 17, 32};
    for (size_t f = 0; f < sizeof tforced / sizeof tforced[0]; f++) {
        g_cu.forced_splits = tforced[f];
        for (size_t ti = 1; ti < 4; ti++) {
            acase c = cases[ti == 3 ? 4 : 0];
            char name[200];
            snprintf(name, sizeof name, "[%s] %s, %d splits", types[ti].name, c.name, tforced[f]);
            c.name = name;
            g_cu.table_cap = 0;
            cu_graphs_clear();
            attn_case_typed(&c, types[ti].k, types[ti].v);
        }
    }
    g_cu.forced_splits = keep;
    cu_graphs_clear();
    return 0;
}
