/* Cascade attention of the CPU backend (src/backend/cpu/cpu_cascade.h, cpu_attention.c):
 * - kernel level: cascade off, auto and forced give the same bits on random paged K/V with
 *   random block tables where rows share leading blocks (the rows of one prefill chunk, decode
 *   rows of sequences sharing their first N blocks, tables that diverge inside a piece), with
 *   sliding windows, soft-capping, GQA G = 1 / 4 / 8, head dims 64 / 128 / 80, blocks of 16 and
 *   32 and short pieces (many of them), for split counts 1 / 2 / 3 / 64, 1 and 3 threads, and
 *   every kernel family this CPU has; forced cascade must really have shared pieces, and the
 *   values are close to a double-precision reference; a batch whose partials need several
 *   workspace rounds, and one whose cascade rows are cut into chunks, give the same bits too;
 * - policy: a group below the floor is declined, `1` ignores the floor, `0` turns it off,
 *   invalid values warn and keep auto;
 * - engine level: greedy tokens and raw logits of requests sharing a cached system prompt are
 *   identical with MLXCEL_CASCADE_ATTENTION=0, auto and 1 (forced pieces of 4 keys, and the
 *   production 256-key pieces with a 300-token prefix), and the shared pieces were used; the
 *   same under tensor parallelism (two rank threads planning and running at once). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <omp.h>

#include "backend/cpu/cpu_internal.h"
#include "base/env.h"
#include "engine/engine.h"
#include "tiny_model.h"

static uint64_t g_rng = 20261205;

/* MLXCEL_CASCADE_ATTENTION (NULL: unset) and the floor (NULL: default), re-read. */
static void set_cascade(const char *mode, const char *floor) {
    if (mode) setenv("MLXCEL_CASCADE_ATTENTION", mode, 1);
    else unsetenv("MLXCEL_CASCADE_ATTENTION");
    if (floor) setenv("MLXCEL_CASCADE_MIN_SHARED_KEYS", floor, 1);
    else unsetenv("MLXCEL_CASCADE_MIN_SHARED_KEYS");
    mx_env_reload();
}

/* ==== Kernel level: a paged pool, tables sharing leading blocks, rows ==== */
typedef struct cfix {
    int Hq, Hkv, D, bs, window;
    float softcap;
    int chunk;               /* llama4 chunked attention (0 = none) */
    int n, n_seq, stride, pool_rows;
    int32_t pos[256], seq[256];
    int32_t *table;          /* [n_seq, stride] */
    float *q, *k, *v;        /* q: [n, Hq, D]; k, v: [pool_rows, Hkv, D] */
} cfix;

static int rnd(int n) { return (int)((tiny_rand(&g_rng) + 1.0f) * 0.5f * (float)n) % n; }

/* Sequence s has len[s] keys; its first share[s] blocks are the system blocks (so two
 * sequences agree on min(share) leading blocks), the rest its own; physical blocks scattered. */
static void fix_pool(cfix *f, int n_seq, const int *len, const int *share) {
    int max_len = 0, max_share = 0;
    for (int s = 0; s < n_seq; s++) {
        max_len = len[s] > max_len ? len[s] : max_len;
        max_share = share[s] > max_share ? share[s] : max_share;
    }
    f->n_seq = n_seq, f->stride = (max_len + f->bs - 1) / f->bs;
    const int n_blocks = max_share + n_seq * f->stride;
    int *perm = malloc((size_t)n_blocks * sizeof(int));
    for (int i = 0; i < n_blocks; i++) perm[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        const int j = rnd(i + 1), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    f->table = malloc((size_t)n_seq * f->stride * sizeof(int32_t));
    int next = max_share;
    for (int s = 0; s < n_seq; s++)
        for (int b = 0; b < f->stride; b++)
            f->table[s * f->stride + b] = b < share[s] ? perm[b] : perm[next++];
    free(perm);
    f->pool_rows = n_blocks * f->bs;
    const size_t kvf = (size_t)f->pool_rows * f->Hkv * f->D;
    f->k = malloc(kvf * 4), f->v = malloc(kvf * 4);
    for (size_t i = 0; i < kvf; i++) f->k[i] = 2.0f * tiny_rand(&g_rng), f->v[i] = tiny_rand(&g_rng);
}

static void fix_row(cfix *f, int seq, int pos) {
    assert_true(f->n < 256);
    f->seq[f->n] = seq, f->pos[f->n] = pos, f->n++;
}

static void fix_q(cfix *f) {
    const size_t qf = (size_t)f->n * f->Hq * f->D;
    f->q = malloc(qf * 4);
    for (size_t i = 0; i < qf; i++) f->q[i] = 2.0f * tiny_rand(&g_rng);
}

static void fix_free(cfix *f) { free(f->table), free(f->q), free(f->k), free(f->v); }

static void fix_run(const cfix *f, int S, float *o) {
    mx_attn_batch b = {.n_rows = f->n, .pos = f->pos, .seq = f->seq, .block_table = f->table,
                       .table_stride = f->stride, .block_size = f->bs, .kv_splits = S};
    mx_attn_params p = {.n_heads = f->Hq, .n_kv_heads = f->Hkv, .head_dim = f->D,
                        .scale = 1.0f / sqrtf((float)f->D), .softcap = f->softcap,
                        .window = f->window, .chunk = f->chunk};
    mx_tensor tq = mx_tensor_3d(f->q, MX_F32, f->n, f->Hq, f->D, MX_DEV_CPU);
    mx_tensor tk = mx_tensor_3d(f->k, MX_F32, f->pool_rows, f->Hkv, f->D, MX_DEV_CPU);
    mx_tensor tv = mx_tensor_3d(f->v, MX_F32, f->pool_rows, f->Hkv, f->D, MX_DEV_CPU);
    mx_tensor to = mx_tensor_3d(o, MX_F32, f->n, f->Hq, f->D, MX_DEV_CPU);
    memset(o, 0xff, (size_t)f->n * f->Hq * f->D * 4);
    cpu_attention(&to, &tq, &tk, &tv, &b, &p);
}

/* |out - softmax(q K^T) V| in double for row i (every q head). */
static void check_reference(const cfix *f, int i, const float *o) {
    const int G = f->Hq / f->Hkv, pos = f->pos[i];
    int lo = f->window > 0 && pos - f->window + 1 > 0 ? pos - f->window + 1 : 0;
    if (f->chunk > 0 && pos - pos % f->chunk > lo) lo = pos - pos % f->chunk; /* its chunk */
    double *sc = malloc((size_t)(pos - lo + 1) * sizeof(double));
    for (int h = 0; h < f->Hq; h++) {
        const float *q = f->q + ((size_t)i * f->Hq + h) * f->D;
        double mx = -1e300, den = 0;
        for (int t = lo; t <= pos; t++) {
            const int r = f->table[f->seq[i] * f->stride + t / f->bs] * f->bs + t % f->bs;
            const float *k = f->k + ((size_t)r * f->Hkv + h / G) * f->D;
            double d = 0;
            for (int e = 0; e < f->D; e++) d += (double)q[e] * k[e];
            d /= sqrt((double)f->D);
            if (f->softcap > 0) d = f->softcap * tanh(d / f->softcap);
            sc[t - lo] = d;
            mx = d > mx ? d : mx;
        }
        for (int t = lo; t <= pos; t++) den += exp(sc[t - lo] - mx);
        for (int e = 0; e < f->D; e++) {
            double acc = 0;
            for (int t = lo; t <= pos; t++) {
                const int r = f->table[f->seq[i] * f->stride + t / f->bs] * f->bs + t % f->bs;
                acc += exp(sc[t - lo] - mx) / den * f->v[((size_t)r * f->Hkv + h / G) * f->D + e];
            }
            assert_true(fabs(acc - o[(size_t)h * f->D + e]) < 1e-5);
        }
    }
    free(sc);
}

/* Every mode x split count x thread count x kernel family against cascade off, scalar,
 * unsplit, one thread. Returns the rows forced cascade put on its path (max over runs). */
static int check_bits(const cfix *f, int piece, const char *what) {
    static const int splits[] = {1, 2, 3, 64}, threads[] = {1, 3};
    static const char *modes[] = {"0", "auto", "1"};
    const size_t nf = (size_t)f->n * f->Hq * f->D, row = (size_t)f->Hq * f->D;
    float *ref = malloc(nf * 4), *o = malloc(nf * 4);
    cpu_attention_force_piece(piece);
    omp_set_num_threads(1);
    assert_int_equal(cpu_matmul_force_isa(CPU_ISA_SCALAR), 0);
    set_cascade("0", NULL);
    fix_run(f, 1, ref);
    cpu_cascade_info info;
    cpu_attention_last_cascade(&info);
    assert_int_equal(info.rows, 0); /* off: nothing shared */
    for (int i = 0; i < f->n; i += 7) check_reference(f, i, ref + i * row);
    int casc_rows = 0;
    for (int isa = CPU_ISA_SCALAR; isa <= CPU_ISA_AVX512; isa++) {
        if (cpu_matmul_force_isa((cpu_isa)isa)) continue;
        for (int mi = 0; mi < 3; mi++) {
            set_cascade(modes[mi], NULL);
            for (int ti = 0; ti < 2; ti++) {
                omp_set_num_threads(threads[ti]);
                for (int si = 0; si < 4; si++) {
                    fix_run(f, splits[si], o);
                    cpu_attention_last_cascade(&info);
                    if (mi == 2) casc_rows = info.rows > casc_rows ? info.rows : casc_rows;
                    if (memcmp(ref, o, nf * 4)) {
                        fprintf(stderr, "%s: %s cascade %s splits %d threads %d piece %d differs\n",
                                what, cpu_isa_name((cpu_isa)isa), modes[mi], splits[si],
                                threads[ti], piece);
                        fail();
                    }
                }
            }
        }
    }
    cpu_matmul_force_isa(CPU_ISA_AUTO);
    omp_set_num_threads(omp_get_num_procs());
    cpu_attention_force_piece(0);
    set_cascade(NULL, NULL);
    free(ref), free(o);
    return casc_rows;
}

typedef struct geo {
    int Hq, Hkv, D, bs, window;
    float softcap;
} geo;

/* llama4's attention chunk of the next fixtures (0 = none): set around the chunked cases */
static int g_chunk;

static cfix fix_new(geo g) {
    cfix f;
    memset(&f, 0, sizeof f);
    f.Hq = g.Hq, f.Hkv = g.Hkv, f.D = g.D, f.bs = g.bs, f.window = g.window, f.softcap = g.softcap;
    f.chunk = g_chunk;
    return f;
}

/* The rows of one prefill chunk: consecutive positions of one sequence (they share every
 * block), after the chunk's earlier keys. */
static void case_prefill_chunk(geo g, int piece) {
    cfix f = fix_new(g);
    const int len[] = {230}, share[] = {0};
    fix_pool(&f, 1, len, share);
    for (int p = 170; p < 230; p++) fix_row(&f, 0, p);
    fix_q(&f);
    assert_true(check_bits(&f, piece, "prefill chunk") > 0);
    fix_free(&f);
}

/* Decode rows of 7 sequences sharing their first blocks (a cached system prompt of 8 or 5
 * blocks: the 5-block ones diverge from the others there, inside a piece when the piece is
 * not a multiple of the blocks), one unrelated sequence, and a prefill chunk of sequence 1
 * interleaved with them. */
static void case_shared_prefix(geo g, int piece) {
    cfix f = fix_new(g);
    const int len[] = {200, 180, 215, 199, 160, 190, 205, 170};
    const int share[] = {8, 8, 8, 5, 5, 8, 5, 0};
    fix_pool(&f, 8, len, share);
    for (int s = 0; s < 8; s++) {
        fix_row(&f, s, len[s] - 1);
        if (s == 1)
            for (int p = 150; p < 175; p += 2) fix_row(&f, 1, p);
    }
    fix_row(&f, 4, 10); /* a row with no full piece */
    fix_q(&f);
    assert_true(check_bits(&f, piece, "shared prefix") > 0);
    fix_free(&f);
}

/* The production piece length: 4 sequences under a 288-token system prompt, decode rows and
 * a prefill chunk crossing the end of piece 0. */
static void case_long_prefix(geo g) {
    cfix f = fix_new(g);
    const int len[] = {300, 311, 320, 305}, share[] = {288 / g.bs, 288 / g.bs, 288 / g.bs, 1};
    fix_pool(&f, 4, len, share);
    for (int s = 0; s < 4; s++) fix_row(&f, s, len[s] - 1);
    for (int p = 250; p < 262; p++) fix_row(&f, 3, p);
    fix_q(&f);
    assert_true(check_bits(&f, 0, "long prefix") > 0);
    fix_free(&f);
}

/* GQA 1 / 4 / 8, head dims 64 / 128 / 80, blocks of 16 / 32, windows, soft-capping; pieces
 * shorter than, equal to and not multiples of the blocks. */
static void test_kernel_bits(void **st) {
    (void)st;
    case_prefill_chunk((geo){4, 4, 64, 16, 0, 0.0f}, 16);
    case_prefill_chunk((geo){8, 2, 128, 32, 0, 30.0f}, 24);
    case_prefill_chunk((geo){8, 1, 80, 16, 50, 0.0f}, 20);
    case_shared_prefix((geo){4, 4, 64, 16, 0, 0.0f}, 32);
    case_shared_prefix((geo){8, 2, 80, 32, 0, 0.0f}, 24);
    case_shared_prefix((geo){8, 1, 128, 16, 0, 20.0f}, 48);
    case_shared_prefix((geo){8, 2, 64, 16, 90, 0.0f}, 16);  /* window start inside the prefix */
    case_shared_prefix((geo){16, 2, 64, 32, 120, 25.0f}, 40);
    /* llama4 chunked layers: the start jumps to the chunk's (inside and past the prefix) */
    g_chunk = 96;
    case_shared_prefix((geo){8, 2, 64, 16, 0, 0.0f}, 16);
    g_chunk = 150;
    case_shared_prefix((geo){8, 2, 64, 32, 0, 0.0f}, 40);
    g_chunk = 64;
    case_prefill_chunk((geo){8, 2, 64, 16, 0, 0.0f}, 16);
    g_chunk = 0;
    case_long_prefix((geo){12, 4, 64, 16, 0, 0.0f});        /* CPU_ATTN_PIECE */
    case_long_prefix((geo){8, 8, 128, 32, 0, 0.0f});
}

/* f's rows with the cascade forced, at two split counts, against the run without it (row
 * `check` also against the reference): the same bits, every row in the cascade, and more than
 * one workspace round (want_rounds) or more than one row chunk. Piece length `piece`, 3 threads. */
static void forced_same_bits(cfix *f, int Hq, int D, int piece, int check, const int splits[2], int rows,
                             bool want_rounds) {
    const size_t nf = (size_t)f->n * Hq * D;
    float *ref = malloc(nf * 4), *o = malloc(nf * 4);
    cpu_attention_force_piece(piece);
    omp_set_num_threads(3);
    set_cascade("0", NULL);
    fix_run(f, 1, ref);
    check_reference(f, check, ref + (size_t)check * Hq * D);
    for (int si = 0; si < 2; si++) {
        set_cascade("1", NULL);
        fix_run(f, splits[si], o);
        cpu_cascade_info info;
        cpu_attention_last_cascade(&info);
        assert_int_equal(info.rows, rows);
        assert_true(want_rounds ? info.rounds > 1 : info.chunks > 1);
        assert_memory_equal(ref, o, nf * 4);
    }
    cpu_attention_force_piece(0);
    omp_set_num_threads(omp_get_num_procs());
    set_cascade(NULL, NULL);
    free(ref), free(o);
}

/* Pieces of one key over long rows: the cascade rows' partials need more than one workspace
 * round (each round's partials bounded), same bits. */
static void test_rounds(void **st) {
    (void)st;
    cfix f = fix_new((geo){4, 1, 8, 16, 0, 0.0f});
    const int len[] = {1200, 1200}, share[] = {40, 40};
    fix_pool(&f, 2, len, share);
    for (int i = 0; i < 160; i++) fix_row(&f, i % 2, 1000 + (i * 37) % 200);
    fix_q(&f);
    forced_same_bits(&f, 4, 8, 1, 17, (const int[]){1, 3}, 160, true);
    fix_free(&f);
}

/* A wide geometry (64 q / 8 kv heads of 128: 8,320 floats of running state a row) and 300
 * rows of three sequences under one prompt: the cascade rows are cut into chunks (a group
 * then reads its K/V once per chunk), with the same bits. */
static void test_row_chunks(void **st) {
    (void)st;
    cfix f = fix_new((geo){64, 8, 128, 16, 0, 0.0f});
    const int len[] = {48, 48, 48}, share[] = {2, 2, 2};
    fix_pool(&f, 3, len, share);
    for (int i = 0; i < 255; i++) fix_row(&f, i % 3, 40 + i % 8);
    fix_q(&f);
    forced_same_bits(&f, 64, 128, 8, 100, (const int[]){1, 2}, 255, false);
    fix_free(&f);
}

/* ==== Policy ==== */
/* Three decode rows of sequences sharing their first 2 pieces of 16 keys (blocks of 16), and
 * a fourth row alone; returns what the call decided. */
static cpu_cascade_info policy_run(const char *mode, const char *floor) {
    cfix f = fix_new((geo){4, 2, 16, 16, 0, 0.0f});
    const int len[] = {40, 45, 47, 50}, share[] = {2, 2, 2, 0};
    fix_pool(&f, 4, len, share);
    for (int s = 0; s < 4; s++) fix_row(&f, s, len[s] - 1);
    fix_q(&f);
    float *o = malloc((size_t)f.n * f.Hq * f.D * 4);
    cpu_attention_force_piece(16);
    set_cascade(mode, floor);
    fix_run(&f, 1, o);
    cpu_cascade_info info;
    cpu_attention_last_cascade(&info);
    cpu_attention_force_piece(0);
    set_cascade(NULL, NULL);
    free(o);
    fix_free(&f);
    return info;
}

/* The default policy at the production piece length: 3 decode rows under a system prompt of
 * `shared` keys (blocks of 16), each with 40 keys of its own. */
static cpu_cascade_info policy_default(int shared) {
    cfix f = fix_new((geo){8, 2, 64, 16, 0, 0.0f});
    const int len[] = {shared + 40, shared + 41, shared + 45};
    const int share[] = {shared / 16, shared / 16, shared / 16};
    fix_pool(&f, 3, len, share);
    for (int s = 0; s < 3; s++) fix_row(&f, s, len[s] - 1);
    fix_q(&f);
    float *o = malloc((size_t)f.n * f.Hq * f.D * 4);
    set_cascade(NULL, NULL);
    fix_run(&f, 1, o);
    cpu_cascade_info info;
    cpu_attention_last_cascade(&info);
    free(o);
    fix_free(&f);
    return info;
}

static void test_policy(void **st) {
    (void)st;
    /* one group: 3 rows sharing 2 pieces of 16 keys (32 keys), saving (3 - 1) x 32 = 64 key
     * reads per kv head */
    cpu_cascade_info in = policy_run("1", NULL);
    assert_int_equal(in.groups, 1);
    assert_int_equal(in.declined, 0);
    assert_int_equal(in.rows, 3);
    assert_int_equal(in.shared_pieces, 2);
    assert_int_equal(in.saved_keys, 64);
    in = policy_run(NULL, "32"); /* auto at its floor: kept */
    assert_int_equal(in.groups, 1);
    assert_int_equal(in.rows, 3);
    in = policy_run(NULL, "33"); /* below the floor: declined, its rows take the plain path */
    assert_int_equal(in.groups, 0);
    assert_int_equal(in.declined, 1);
    assert_int_equal(in.rows, 0);
    in = policy_run("auto", "100000");
    assert_int_equal(in.declined, 1);
    in = policy_run("1", "100000"); /* forced: any group of >= 2 rows, no floor */
    assert_int_equal(in.groups, 1);
    assert_int_equal(in.rows, 3);
    in = policy_run("0", "0"); /* the kill switch */
    assert_int_equal(in.groups, 0);
    assert_int_equal(in.declined, 0);
    assert_int_equal(in.rows, 0);
    /* the defaults: auto, 512 shared keys (two production pieces) */
    set_cascade(NULL, NULL);
    assert_int_equal(mx_env()->cascade_attention, MX_CASCADE_AUTO);
    assert_int_equal(mx_env()->cascade_min_shared_keys, 512);
    in = policy_default(256); /* one shared piece: declined */
    assert_int_equal(in.groups, 0);
    assert_int_equal(in.declined, 1);
    in = policy_default(512); /* two: kept */
    assert_int_equal(in.groups, 1);
    assert_int_equal(in.rows, 3);
    assert_int_equal(in.shared_pieces, 2);
    /* invalid values: a warning, and the defaults */
    set_cascade("sometimes", "-5");
    assert_int_equal(mx_env()->cascade_attention, MX_CASCADE_AUTO);
    assert_int_equal(mx_env()->cascade_min_shared_keys, 512);
    set_cascade("off", NULL);
    assert_int_equal(mx_env()->cascade_attention, MX_CASCADE_OFF);
    set_cascade("on", NULL);
    assert_int_equal(mx_env()->cascade_attention, MX_CASCADE_FORCE);
    set_cascade(NULL, NULL);
}

/* ==== Engine level: requests under one cached system prompt ==== */
#define N_REQ 6
#define N_GEN 6
#define VOCAB 97

typedef struct e2e_out {
    int64_t ids[N_REQ];
    int32_t toks[N_REQ][N_GEN];
    int n_toks[N_REQ];
    float logits[N_REQ][N_GEN][VOCAB];
    int n_logits[N_REQ];
    int max_casc_rows; /* most rows the last attention call of a step shared pieces for */
} e2e_out;

static int req_of(e2e_out *o, int64_t id) {
    for (int r = 0; r < N_REQ; r++)
        if (o->ids[r] == id) return r;
    return -1;
}

static void on_logits(void *user, int64_t id, const float *lg, int vocab) {
    e2e_out *o = user;
    assert_int_equal(vocab, VOCAB);
    const int r = req_of(o, id);
    if (r >= 0 && o->n_logits[r] < N_GEN) memcpy(o->logits[r][o->n_logits[r]++], lg, sizeof o->logits[0][0]);
    cpu_cascade_info info;
    cpu_attention_last_cascade(&info);
    o->max_casc_rows = info.rows > o->max_casc_rows ? info.rows : o->max_casc_rows;
}

static int on_token(void *user, int64_t id, int32_t t, float lp) {
    (void)lp;
    e2e_out *o = user;
    const int r = req_of(o, id);
    if (r >= 0 && o->n_toks[r] < N_GEN) o->toks[r][o->n_toks[r]++] = t;
    return 0;
}

/* A warm request puts the system prompt (sys_len tokens) in the prefix cache; then N_REQ
 * requests (system prompt + a suffix of their own) are submitted at once: their prefill
 * chunks and decode rows share the system prompt's blocks. */
static void run_e2e(model *m, const model_spec *spec, int sys_len, int chunk, e2e_out *o) {
    memset(o, 0, sizeof *o);
    for (int r = 0; r < N_REQ; r++) o->ids[r] = -1;
    engine_params p;
    engine_params_default(&p, spec);
    p.ctx_size = sys_len + 64;
    p.n_parallel = N_REQ;
    p.block_size = 4;
    p.prefill_chunk = chunk;
    p.storage = KV_STORAGE_PAGED;
    p.prefix_cache = true;
    engine *e = NULL;
    mx_error err;
    assert_int_equal(engine_new(&e, m, &p, &err), 0);
    int32_t prompt[512];
    for (int k = 0; k < sys_len; k++) prompt[k] = (int32_t)((k * 29 + 7) % (VOCAB - 1));
    engine_request w = {.prompt = prompt, .n_prompt = sys_len + 1, .max_tokens = 1, .ignore_eos = true};
    prompt[sys_len] = 5;
    sampling_params_default(&w.sampling);
    w.sampling.temperature = 0;
    assert_true(engine_submit(e, &w, &err) >= 0);
    assert_int_equal(engine_run(e, &err), 0);
    for (int r = 0; r < N_REQ; r++) {
        const int n_suf = 3 + r * 5;
        for (int k = 0; k < n_suf; k++) prompt[sys_len + k] = (int32_t)((r * 31 + k * 7 + 2) % (VOCAB - 1));
        engine_request q = {.prompt = prompt, .n_prompt = sys_len + n_suf, .max_tokens = N_GEN,
                            .ignore_eos = true, .on_token = on_token, .on_logits = on_logits,
                            .user = o};
        sampling_params_default(&q.sampling);
        q.sampling.temperature = 0;
        o->ids[r] = engine_submit(e, &q, &err);
        assert_true(o->ids[r] >= 0);
    }
    assert_int_equal(engine_run(e, &err), 0);
    engine_stats es;
    engine_get_stats(e, &es);
    assert_true(es.prefix_reused_tokens >= (uint64_t)N_REQ * (sys_len / 4 * 4 - 4));
    engine_free(e);
    for (int r = 0; r < N_REQ; r++) {
        assert_int_equal(o->n_toks[r], N_GEN);
        assert_int_equal(o->n_logits[r], N_GEN);
    }
}

static void check_e2e(tiny_kind kind, int sys_len, int piece) {
    tiny_model tm;
    tiny_build_v(&tm, kind, 4242 + kind, VOCAB);
    tm.spec.max_position_embeddings = 1024;
    model *m = NULL;
    mx_error err;
    assert_int_equal(model_bind(&m, &tm.spec, tiny_lookup, &tm, backend_cpu(), &err), 0);
    e2e_out *base = malloc(sizeof *base), *o = malloc(sizeof *o);
    cpu_attention_force_piece(piece);
    static const int chunks[] = {512, 7};
    for (int ci = 0; ci < 2; ci++) {
        set_cascade("0", NULL);
        run_e2e(m, &tm.spec, sys_len, chunks[ci], base);
        assert_int_equal(base->max_casc_rows, 0);
        static const char *modes[] = {"auto", "1"};
        for (int mi = 0; mi < 2; mi++) {
            set_cascade(modes[mi], mi == 0 ? "0" : NULL); /* auto with no floor: it engages */
            run_e2e(m, &tm.spec, sys_len, chunks[ci], o);
            assert_true(o->max_casc_rows >= 2);
            assert_memory_equal(base->toks, o->toks, sizeof base->toks);
            if (memcmp(base->logits, o->logits, sizeof base->logits)) {
                fprintf(stderr, "%s sys %d piece %d chunk %d cascade %s: logits differ\n",
                        tm.spec.model_type, sys_len, piece, chunks[ci], modes[mi]);
                fail();
            }
        }
        set_cascade(NULL, NULL); /* the default policy: the same tokens */
        run_e2e(m, &tm.spec, sys_len, chunks[ci], o);
        assert_memory_equal(base->toks, o->toks, sizeof base->toks);
        assert_memory_equal(base->logits, o->logits, sizeof base->logits);
    }
    cpu_attention_force_piece(0);
    free(base), free(o);
    model_free(m);
    tiny_free(&tm);
}

/* Tensor parallelism: two rank threads run the attention (and the cascade planner) at once,
 * each over its kv head; forced cascade gives the bits of cascade off. */
static void check_e2e_tp(void) {
    tiny_model tm;
    tiny_build_v(&tm, TINY_LLAMA, 99, VOCAB);
    model *m = NULL;
    mx_error err;
    assert_int_equal(model_bind_tp(&m, &tm.spec, tiny_lookup, &tm, backend_cpu(), 2, &err), 0);
    e2e_out *base = malloc(sizeof *base), *o = malloc(sizeof *o);
    cpu_attention_force_piece(4);
    set_cascade("0", NULL);
    run_e2e(m, &tm.spec, 26, 7, base);
    set_cascade("1", NULL);
    run_e2e(m, &tm.spec, 26, 7, o);
    assert_memory_equal(base->toks, o->toks, sizeof base->toks);
    assert_memory_equal(base->logits, o->logits, sizeof base->logits);
    cpu_attention_force_piece(0);
    set_cascade(NULL, NULL);
    free(base), free(o);
    model_free(m);
    tiny_free(&tm);
}

static void test_engine_shared_prompt(void **st) {
    (void)st;
    check_e2e(TINY_LLAMA, 26, 4);   /* pieces of 4 keys: 6 shared, cut inside no block */
    check_e2e(TINY_GEMMA, 26, 3);   /* sliding window 5 on layer 0, pieces cut inside blocks */
    check_e2e(TINY_MOE, 26, 4);
    check_e2e(TINY_LLAMA, 300, 0);  /* production pieces: the first 256 keys shared */
    check_e2e_tp();
}

int main(void) {
    set_cascade(NULL, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernel_bits),
        cmocka_unit_test(test_rounds),
        cmocka_unit_test(test_row_chunks),
        cmocka_unit_test(test_policy),
        cmocka_unit_test(test_engine_shared_prompt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
