/* Batch invariance of the CPU backend (docs/engine.md, "Batch invariance"):
 * - attention: the scalar, AVX2 and AVX-512 versions and every split count give the same bits,
 *   close to a double reference (paged rows, two interleaved sequences, GQA, sliding window,
 *   soft-capping, pieces of 1, 3, 4 and CPU_ATTN_PIECE keys);
 * - kernel level: every value of cpu_matmul equals the canonical dot product of its row and
 *   column (cpu_dot_ref) bit for bit, for every kernel family this CPU has, any row count,
 *   thread count, strides, weight dtype and K (tails included); the canonical dot itself is
 *   checked against a double-precision dot so that the comparison cannot pass vacuously;
 * - engine level, tiny dense / gemma-like / MoE models: the raw logits of one prompt at every
 *   generated position are bitwise identical (memcmp) run alone, batched with 1, 3, 17, 40 and
 *   63 other sequences (mixed prefill chunks and decode rows, arriving at different steps), with
 *   prefill chunk sizes 1, 7, 64 and 512, in dense and paged storage, and after a prefix-cache
 *   hit;
 * - attention split counts (paged-decode-splits): every count gives the same bits, kernel level
 *   (mx_attn_batch.kv_splits) and engine level (MLXCEL_PAGED_DECODE_SPLITS 1, 2, 3, 64, the
 *   whole scenario grid above, at attention pieces short enough to give every row several);
 * - the engine-level grid again with a q8_0 KV cache (-ctk q8_0 -ctv q8_0; llama- and
 *   gemma-like models with heads of 32): a row's quantized K/V depend on that row only, so the
 *   invariance holds for a quantized cache too (test_kv_quant.c: the attention over it equals
 *   the f32 attention over its dequantized values);
 * - the same with a TurboQuant cache (turbo4, llama-like, heads of 32);
 * - cascade attention forced (MLXCEL_CASCADE_ATTENTION=1: pieces shared by the rows of a chunk
 *   or a prefix hit walked once for them): the whole grid again, same bits (with each cache
 *   type above). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <omp.h>

#include "backend/cpu/cpu_internal.h"
#include "base/env.h"
#include "engine/engine.h"
#include "tune/tune_policy.h"
#include "tiny_model.h"

/* ==== Kernel level ==== */
static uint64_t g_rng = 12345;
static float frand(void) { return tiny_rand(&g_rng); }

/* w [N, ld] of dtype t (row stride ld >= K), values in [-1, 1); f holds the widened values. */
static void *make_weight(mx_dtype t, int N, int K, int ld, float *f) {
    const size_t esz = mx_dtype_size(t);
    char *w = calloc((size_t)N * ld, esz);
    for (int j = 0; j < N; j++)
        for (int k = 0; k < K; k++) {
            const float v = frand();
            const size_t i = (size_t)j * ld + k;
            if (t == MX_F32) {
                ((float *)w)[i] = v;
                f[(size_t)j * K + k] = v;
            } else if (t == MX_BF16) {
                ((uint16_t *)w)[i] = mx_f32_to_bf16(v);
                f[(size_t)j * K + k] = mx_bf16_to_f32(((uint16_t *)w)[i]);
            } else {
                ((uint16_t *)w)[i] = mx_f32_to_f16(v);
                f[(size_t)j * K + k] = mx_f16_to_f32(((uint16_t *)w)[i]);
            }
        }
    return w;
}

static void check_kernel_shape(mx_dtype t, int K, int N, bool with_bias) {
    const int ldw = K + 3, ldx = K + 5, max_n = 41, ldo = N + 2;
    float *wf = malloc((size_t)N * K * sizeof(float));
    void *w = make_weight(t, N, K, ldw, wf);
    float *x = malloc((size_t)max_n * ldx * sizeof(float));
    for (int i = 0; i < max_n * ldx; i++) x[i] = frand();
    float bias[128];
    for (int j = 0; j < N; j++) bias[j] = frand();
    /* expected: the canonical dot of each (row, column), sanity-checked against double */
    float *want = malloc((size_t)max_n * N * sizeof(float));
    for (int r = 0; r < max_n; r++)
        for (int j = 0; j < N; j++) {
            const char *wr = (const char *)w + (size_t)j * ldw * mx_dtype_size(t);
            const float d = cpu_dot_ref(x + (size_t)r * ldx, wr, t, K);
            double ref = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                ref += (double)x[(size_t)r * ldx + k] * wf[(size_t)j * K + k];
                mag += fabs((double)x[(size_t)r * ldx + k] * wf[(size_t)j * K + k]);
            }
            assert_true(fabs(d - ref) <= 1e-6 * mag + 1e-30);
            want[(size_t)r * N + j] = with_bias ? d + bias[j] : d;
        }
    mx_tensor tw = mx_tensor_2d(w, t, N, K, MX_DEV_CPU);
    tw.stride[0] = ldw;
    mx_tensor tb = with_bias ? mx_tensor_1d(bias, MX_F32, N, MX_DEV_CPU) : (mx_tensor){0};
    float *out = malloc((size_t)max_n * ldo * sizeof(float));
    static const int rows[] = {1, 2, 3, 4, 5, 7, 9, 17, 41};
    static const int threads[] = {1, 2, 3};
    for (int isa = CPU_ISA_SCALAR; isa <= CPU_ISA_AVX512; isa++) {
        if (cpu_matmul_force_isa((cpu_isa)isa)) continue;
        for (int ti = 0; ti < 3; ti++) {
            omp_set_num_threads(threads[ti]);
            for (int ri = 0; ri < 9; ri++) {
                const int n = rows[ri];
                /* rows [r0, r0 + n) of x: a row's value must not depend on its neighbours */
                const int r0 = max_n - n;
                mx_tensor tx = mx_tensor_2d(x + (size_t)r0 * ldx, MX_F32, n, K, MX_DEV_CPU);
                tx.stride[0] = ldx;
                mx_tensor to = mx_tensor_2d(out, MX_F32, n, N, MX_DEV_CPU);
                to.stride[0] = ldo;
                memset(out, 0xff, (size_t)max_n * ldo * sizeof(float));
                cpu_matmul(&to, &tx, &tw, &tb);
                for (int r = 0; r < n; r++) {
                    if (memcmp(out + (size_t)r * ldo, want + (size_t)(r0 + r) * N, (size_t)N * 4)) {
                        fprintf(stderr, "%s dtype %d K %d N %d n %d threads %d row %d differs\n",
                                cpu_isa_name((cpu_isa)isa), (int)t, K, N, n, threads[ti], r);
                        fail();
                    }
                    /* the padding between rows is never written */
                    for (int j = N; j < ldo; j++) assert_true(isnan(out[(size_t)r * ldo + j]));
                }
            }
        }
    }
    cpu_matmul_force_isa(CPU_ISA_AUTO);
    omp_set_num_threads(omp_get_num_procs());
    free(out); free(want); free(x); free(w); free(wf);
}

static void test_kernel_canonical(void **st) {
    (void)st;
    static const int Ks[] = {1, 15, 16, 17, 24, 33, 100, 768};
    static const int Ns[] = {1, 5, 7, 13, 70};
    static const mx_dtype ts[] = {MX_BF16, MX_F16, MX_F32};
    for (int a = 0; a < 8; a++)
        for (int b = 0; b < 5; b++)
            for (int c = 0; c < 3; c++) check_kernel_shape(ts[c], Ks[a], Ns[b], (a + b) % 2);
}

/* A product big enough to run on several threads and panels: compared row by row with the
 * same rows computed one at a time. */
static void test_kernel_large(void **st) {
    (void)st;
    const int K = 300, N = 1100, n = 37;
    float *wf = malloc((size_t)N * K * sizeof(float));
    void *w = make_weight(MX_BF16, N, K, K, wf);
    float *x = malloc((size_t)n * K * sizeof(float)), *a = malloc((size_t)n * N * 4);
    float *one = malloc((size_t)N * 4);
    for (int i = 0; i < n * K; i++) x[i] = frand();
    mx_tensor tw = mx_tensor_2d(w, MX_BF16, N, K, MX_DEV_CPU), nb = {0};
    omp_set_num_threads(4);
    mx_tensor tx = mx_tensor_2d(x, MX_F32, n, K, MX_DEV_CPU), ta = mx_tensor_2d(a, MX_F32, n, N, MX_DEV_CPU);
    cpu_matmul(&ta, &tx, &tw, &nb);
    omp_set_num_threads(1);
    for (int r = 0; r < n; r++) {
        mx_tensor t1 = mx_tensor_2d(x + (size_t)r * K, MX_F32, 1, K, MX_DEV_CPU);
        mx_tensor o1 = mx_tensor_2d(one, MX_F32, 1, N, MX_DEV_CPU);
        cpu_matmul(&o1, &t1, &tw, &nb);
        assert_memory_equal(one, a + (size_t)r * N, (size_t)N * 4);
    }
    omp_set_num_threads(omp_get_num_procs());
    free(one); free(a); free(x); free(w); free(wf);
}

/* ==== Attention: kernel families and split counts agree bit for bit ==== */
/* Piece lengths (cpu_attention_force_piece; 0 = CPU_ATTN_PIECE) and split counts
 * (mx_attn_batch.kv_splits) tried: pieces of 1, 3 (cut inside blocks of 4) and 4 keys give the
 * test's rows (positions up to 22) several pieces. */
static const int k_pieces[] = {0, 1, 3, 4};
static const int k_splits[] = {1, 2, 3, 4, 64};

static void check_attention(int Hq, int Hkv, int D, int window, float softcap) {
    const int n = 6, bs = 4, n_blocks = 12, rows = n_blocks * bs, stride = 6;
    const size_t nf = (size_t)n * Hq * D;
    float *q = malloc(nf * 4), *kp = malloc((size_t)rows * Hkv * D * 4);
    float *vp = malloc((size_t)rows * Hkv * D * 4), *ref = malloc(nf * 4), *o = malloc(nf * 4);
    for (size_t i = 0; i < nf; i++) q[i] = frand();
    for (int i = 0; i < rows * Hkv * D; i++) kp[i] = frand(), vp[i] = frand();
    /* two sequences with scattered blocks; rows of both interleaved in the batch */
    const int32_t table[2 * 6] = {7, 2, 9, 0, 11, 4, 1, 10, 3, 8, 5, 6};
    const int32_t pos[6] = {0, 3, 22, 9, 17, 5}, seq[6] = {0, 0, 0, 1, 1, 1};
    const int64_t wr[6] = {0};
    mx_attn_batch b = {.n_rows = n, .pos = pos, .seq = seq, .block_table = table,
                       .table_stride = stride, .block_size = bs, .write_rows = wr};
    mx_attn_params p = {.n_heads = Hq, .n_kv_heads = Hkv, .head_dim = D,
                        .scale = 1.0f / sqrtf((float)D), .softcap = softcap, .window = window};
    mx_tensor tq = mx_tensor_3d(q, MX_F32, n, Hq, D, MX_DEV_CPU);
    mx_tensor tk = mx_tensor_3d(kp, MX_F32, rows, Hkv, D, MX_DEV_CPU);
    mx_tensor tv = mx_tensor_3d(vp, MX_F32, rows, Hkv, D, MX_DEV_CPU);
    mx_tensor to = mx_tensor_3d(o, MX_F32, n, Hq, D, MX_DEV_CPU);
    for (int pi = 0; pi < 4; pi++) {
        cpu_attention_force_piece(k_pieces[pi]);
        /* reference bits of this piece length: scalar, unsplit */
        mx_tensor tr = mx_tensor_3d(ref, MX_F32, n, Hq, D, MX_DEV_CPU);
        assert_int_equal(cpu_matmul_force_isa(CPU_ISA_SCALAR), 0);
        b.kv_splits = 1;
        cpu_attention(&tr, &tq, &tk, &tv, &b, &p);
        for (int isa = CPU_ISA_SCALAR; isa <= CPU_ISA_AVX512; isa++) {
            if (cpu_matmul_force_isa((cpu_isa)isa)) continue;
            for (int si = 0; si < 5; si++) {
                b.kv_splits = k_splits[si];
                memset(o, 0xff, nf * 4);
                cpu_attention(&to, &tq, &tk, &tv, &b, &p);
                if (memcmp(ref, o, nf * 4)) {
                    fprintf(stderr, "%s piece %d splits %d differs\n", cpu_isa_name((cpu_isa)isa),
                            k_pieces[pi], k_splits[si]);
                    fail();
                }
            }
        }
        cpu_matmul_force_isa(CPU_ISA_AUTO);
        for (int i = 0; i < n; i++)
            for (int h = 0; h < Hq; h++) {
                const int kvh = h / (Hq / Hkv), lo = window > 0 && pos[i] - window + 1 > 0 ? pos[i] - window + 1 : 0;
                double sc[32], mx = -1e300, den = 0;
                for (int t = lo; t <= pos[i]; t++) {
                    const int r = table[seq[i] * stride + t / bs] * bs + t % bs;
                    double d = 0;
                    for (int e = 0; e < D; e++) d += (double)q[((size_t)i * Hq + h) * D + e] * kp[((size_t)r * Hkv + kvh) * D + e];
                    d *= p.scale;
                    if (softcap > 0) d = softcap * tanh(d / softcap);
                    sc[t - lo] = d;
                    mx = d > mx ? d : mx;
                }
                for (int t = lo; t <= pos[i]; t++) den += exp(sc[t - lo] - mx);
                for (int e = 0; e < D; e++) {
                    double acc = 0;
                    for (int t = lo; t <= pos[i]; t++) {
                        const int r = table[seq[i] * stride + t / bs] * bs + t % bs;
                        acc += exp(sc[t - lo] - mx) / den * vp[((size_t)r * Hkv + kvh) * D + e];
                    }
                    assert_true(fabs(acc - ref[((size_t)i * Hq + h) * D + e]) < 1e-5);
                }
            }
    }
    cpu_attention_force_piece(0);
    free(ref); free(o); free(q); free(kp); free(vp);
}

static void test_attention_families(void **st) {
    (void)st;
    static const int Ds[] = {8, 16, 20, 64, 72, 100};
    for (int d = 0; d < 6; d++) {
        check_attention(4, 2, Ds[d], 0, 0.0f);
        check_attention(6, 1, Ds[d], 5, 0.0f);
        check_attention(2, 2, Ds[d], 0, 20.0f);
        check_attention(8, 2, Ds[d], 7, 15.0f);
    }
}

/* ==== Engine level ==== */
#define N_GEN 8
#define VOCAB 97

typedef struct capture {
    int64_t target;                /* id whose logits are recorded */
    float logits[N_GEN][VOCAB];
    int n_logits;
    int finished;
} capture;

static void on_logits(void *user, int64_t id, const float *lg, int vocab) {
    capture *c = user;
    assert_int_equal(vocab, VOCAB);
    if (id == c->target && c->n_logits < N_GEN) memcpy(c->logits[c->n_logits++], lg, sizeof c->logits[0]);
}

static void on_finish(void *user, int64_t id, engine_finish why, const engine_seq_stats *s) {
    (void)id; (void)s;
    assert_int_equal(why, ENGINE_FINISH_LENGTH);
    ((capture *)user)->finished++;
}

/* Prompt i: length 5 + (i * 13) % 41 tokens (the target, i = 0, has 29 tokens). */
static int make_prompt(int i, int32_t *p) {
    const int n = i == 0 ? 29 : 5 + (i * 13) % 41;
    for (int k = 0; k < n; k++) p[k] = (int32_t)((i * 37 + k * 11 + 1) % (VOCAB - 1));
    return n;
}

typedef struct scenario {
    kv_storage storage;
    int chunk;
    int n_others;
    bool prefix;        /* paged + prefix cache: a sequence sharing the target's prefix runs first */
} scenario;

static void submit(engine *e, int i, capture *c, int max_tokens, int64_t *id_out) {
    int32_t p[64];
    const int n = make_prompt(i, p);
    engine_request r = {.prompt = p, .n_prompt = n, .max_tokens = max_tokens, .ignore_eos = true,
                        .on_logits = on_logits, .on_finish = on_finish, .user = c};
    sampling_params_default(&r.sampling);
    r.sampling.temperature = 0;
    mx_error err;
    const int64_t id = engine_submit(e, &r, &err);
    assert_true(id >= 0);
    if (id_out) *id_out = id;
}

static kv_type g_cache_type; /* -ctk / -ctv of every engine the scenarios make (0: f32) */

static void run_scenario(model *m, const model_spec *spec, scenario sc, capture *c) {
    memset(c, 0, sizeof *c);
    c->target = -1;
    engine_params p;
    engine_params_default(&p, spec);
    p.cache_type_k = p.cache_type_v = g_cache_type;
    p.ctx_size = 96;
    p.storage = sc.storage;
    p.prefill_chunk = sc.chunk;
    p.n_parallel = 1 + sc.n_others;
    p.block_size = 4;
    p.prefix_cache = sc.prefix;
    engine *e = NULL;
    mx_error err;
    assert_int_equal(engine_new(&e, m, &p, &err), 0);
    int expect_finished = 1 + sc.n_others;
    if (sc.prefix) {
        /* same first 24 tokens as the target, then different: 6 full blocks to reuse */
        int32_t q[64];
        const int n = make_prompt(0, q);
        for (int k = 24; k < n; k++) q[k] = (q[k] + 5) % (VOCAB - 1);
        engine_request r = {.prompt = q, .n_prompt = n, .max_tokens = 2, .ignore_eos = true,
                            .on_finish = on_finish, .user = c};
        sampling_params_default(&r.sampling);
        assert_true(engine_submit(e, &r, &err) >= 0);
        assert_int_equal(engine_run(e, &err), 0);
        expect_finished++;
    }
    /* half of the others arrive with the target, the rest two steps later: the target's
     * prefill and decode rows share steps with other prefill chunks and decode rows */
    const int first_wave = sc.n_others / 2;
    for (int i = 1; i <= first_wave; i++) submit(e, i, c, 3 + i % 7, NULL);
    submit(e, 0, c, N_GEN, &c->target);
    for (int s = 0; s < 2; s++) assert_true(engine_step(e, &err) >= 0);
    for (int i = first_wave + 1; i <= sc.n_others; i++) submit(e, i, c, 3 + i % 7, NULL);
    assert_int_equal(engine_run(e, &err), 0);
    engine_stats st;
    engine_get_stats(e, &st);
    if (sc.prefix) assert_true(st.prefix_reused_tokens >= 24);
    engine_free(e);
    assert_int_equal(c->n_logits, N_GEN);
    assert_int_equal(c->finished, expect_finished);
}

/* MLXCEL_PAGED_DECODE_SPLITS = splits (0: unset, the policy), applied as a new process would. */
static void set_splits_env(int splits) {
    char v[16];
    snprintf(v, sizeof v, "%d", splits);
    if (splits > 0) setenv("MLXCEL_PAGED_DECODE_SPLITS", v, 1);
    else unsetenv("MLXCEL_PAGED_DECODE_SPLITS");
    mx_env_reload();
    tune_policy_reset();
}

/* Every scenario (storage, chunk size, batch, prefix hit) against base, bit for bit. With
 * splits > 0 the engine's attention must have run with that count. */
static void check_grid(model *m, const model_spec *spec, const capture *base, int piece,
                       int splits, capture *o) {
    static const int chunks[] = {1, 7, 64, 512};
    /* 63 others: the server's "64 concurrent greedy requests" case at engine level */
    static const int others[] = {0, 1, 3, 17, 40, 63};
    for (int st = 0; st < 2; st++)
        for (int ci = 0; ci < 4; ci++)
            for (int oi = 0; oi < 6; oi++) {
                /* every chunk size alone; batches with chunks 7 and 64 (mixed steps) */
                if (others[oi] > 0 && chunks[ci] != 7 && chunks[ci] != 64) continue;
                const scenario sc = {st ? KV_STORAGE_PAGED : KV_STORAGE_DENSE, chunks[ci], others[oi], false};
                run_scenario(m, spec, sc, o);
                if (memcmp(base->logits, o->logits, sizeof base->logits)) {
                    fprintf(stderr, "model %s piece %d splits %d storage %d chunk %d others %d: "
                            "logits differ\n", spec->model_type, piece, splits, st, chunks[ci],
                            others[oi]);
                    fail();
                }
                if (splits > 0) assert_int_equal(cpu_attention_last_splits(), splits);
            }
    /* prefix-cache hit, alone and in a batch */
    for (int oi = 0; oi < 2; oi++) {
        run_scenario(m, spec, (scenario){KV_STORAGE_PAGED, 7, oi ? 17 : 0, true}, o);
        assert_memory_equal(base->logits, o->logits, sizeof base->logits);
    }
}

/* Under AddressSanitizer (make test's second pass) each code path runs once: the value grids
 * repeated over cache types are the Release pass's job and cost minutes there. */
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

static void check_engine_kv(tiny_kind kind, int head_dim, kv_type cache) {
    tiny_model tm;
    tiny_build_d(&tm, kind, 777 + kind, VOCAB, head_dim);
    model *m = NULL;
    mx_error err;
    assert_int_equal(model_bind(&m, &tm.spec, tiny_lookup, &tm, backend_cpu(), &err), 0);
    capture *base = malloc(sizeof *base), *o = malloc(sizeof *o);
    unsetenv("MLXCEL_AUTOTUNE"); /* no cached winner: the policy is the built-in count */
    set_splits_env(0);
    if (cache) { /* the quantized cache is in use: its logits are not the f32 cache's, but close */
        g_cache_type = KV_TYPE_DEFAULT;
        run_scenario(m, &tm.spec, (scenario){KV_STORAGE_DENSE, 512, 0, false}, o);
        g_cache_type = cache;
    }
    run_scenario(m, &tm.spec, (scenario){KV_STORAGE_DENSE, 512, 0, false}, base);
    if (cache) {
        assert_true(memcmp(o->logits, base->logits, sizeof base->logits) != 0);
        /* measured max |diff|, logits up to ~3: q8_0 0.012, turbo4 0.23 (q4_0, not run here: 2.9) */
        const float bound = cache == KV_TYPE_TURBO4 ? 0.5f : 0.1f;
        for (int t = 0; t < N_GEN; t++)
            for (int v = 0; v < VOCAB; v++) assert_true(fabsf(o->logits[t][v] - base->logits[t][v]) < bound);
    }
    /* the logits are not degenerate: positions differ, values spread */
    assert_true(memcmp(base->logits[0], base->logits[1], sizeof base->logits[0]) != 0);
    float lo = 1e30f, hi = -1e30f;
    for (int v = 0; v < VOCAB; v++) {
        lo = base->logits[0][v] < lo ? base->logits[0][v] : lo;
        hi = base->logits[0][v] > hi ? base->logits[0][v] : hi;
    }
    assert_true(hi - lo > 0.1f);
    check_grid(m, &tm.spec, base, 0, 0, o);
    /* Split counts: the test's sequences (<= 37 tokens) fit one piece of CPU_ATTN_PIECE keys,
     * so pieces of 3 (cut inside blocks of 4) and 4 keys give every row several; each piece
     * length has its own bits (the cuts are part of the arithmetic), the same for every split
     * count, storage, chunk size and batch. */
    static const int pieces[] = {3, 4}, splits[] = {1, 2, 3, 64};
    for (int pi = 0; pi < 2; pi++) {
        cpu_attention_force_piece(pieces[pi]);
        set_splits_env(0);
        run_scenario(m, &tm.spec, (scenario){KV_STORAGE_DENSE, 512, 0, false}, base);
        for (int si = 0; si < 4; si++) {
            set_splits_env(splits[si]);
            check_grid(m, &tm.spec, base, pieces[pi], splits[si], o);
        }
    }
    /* Cascade attention forced (every full piece shared by two or more rows walked once for
     * them: the rows of a prefill chunk, a prefix hit's rows): the same bits again, with
     * pieces of 3 keys (cut inside blocks) and 4, unsplit and split. */
    setenv("MLXCEL_CASCADE_ATTENTION", "1", 1);
    for (int pi = 0; pi < (SANITIZED && cache ? 0 : 2); pi++) {
        cpu_attention_force_piece(pieces[pi]);
        set_splits_env(0);
        run_scenario(m, &tm.spec, (scenario){KV_STORAGE_DENSE, 512, 0, false}, base);
        unsetenv("MLXCEL_CASCADE_ATTENTION");
        set_splits_env(0);
        run_scenario(m, &tm.spec, (scenario){KV_STORAGE_DENSE, 512, 0, false}, o);
        assert_memory_equal(base->logits, o->logits, sizeof base->logits); /* = cascade auto */
        setenv("MLXCEL_CASCADE_ATTENTION", "1", 1);
        for (int si = 0; si < 2; si++) {
            set_splits_env(si ? 3 : 0);
            check_grid(m, &tm.spec, base, pieces[pi], si ? 3 : 0, o);
        }
    }
    unsetenv("MLXCEL_CASCADE_ATTENTION");
    cpu_attention_force_piece(0);
    set_splits_env(0);
    g_cache_type = KV_TYPE_DEFAULT;
    free(base);
    free(o);
    model_free(m);
    tiny_free(&tm);
}

static void check_engine(tiny_kind kind) { check_engine_kv(kind, 8, KV_TYPE_DEFAULT); }

static void test_engine_llama(void **st) { (void)st; check_engine(TINY_LLAMA); }
static void test_engine_gemma(void **st) { (void)st; check_engine(TINY_GEMMA); }
static void test_engine_moe(void **st) { (void)st; check_engine(TINY_MOE); }
static void test_engine_llama_q8_0(void **st) { (void)st; check_engine_kv(TINY_LLAMA, 32, KV_TYPE_Q8_0); }
static void test_engine_gemma_q8_0(void **st) { (void)st; check_engine_kv(TINY_GEMMA, 32, KV_TYPE_Q8_0); }
/* TurboQuant: rotated rows, rotated queries, outputs rotated back: the same contracts */
static void test_engine_llama_turbo4(void **st) {
    (void)st;
    if (SANITIZED) skip(); /* its paths run under ASan in test_kv_turbo */
    check_engine_kv(TINY_LLAMA, 32, KV_TYPE_TURBO4);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernel_canonical), cmocka_unit_test(test_kernel_large),
        cmocka_unit_test(test_attention_families),
        cmocka_unit_test(test_engine_llama),     cmocka_unit_test(test_engine_gemma),
        cmocka_unit_test(test_engine_moe),       cmocka_unit_test(test_engine_llama_q8_0),
        cmocka_unit_test(test_engine_gemma_q8_0),
        cmocka_unit_test(test_engine_llama_turbo4),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
