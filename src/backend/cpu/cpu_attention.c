/* CPU KV write and attention over physical KV rows (dense and paged alike, see backend.h).
 *
 * Attention arithmetic, per (row, query head), is fixed by the scalar reference below and does
 * not depend on the batch. The row's keys are cut at absolute key positions into pieces of
 * CPU_ATTN_PIECE keys; each piece is one online-softmax pass in position order from a fresh
 * state,
 *     s = dot16(q, k) * scale            (cpu_dot_f32: 16 partial sums, multiply then add)
 *     [s = cap * tanh(s / cap)]
 *     if s > m: c = exp(m - s); l *= c; acc *= c; m = s
 *     e = exp(s - m); l += e; acc += e * v   (multiply then add, per element)
 * and the pieces' (m, l, acc) are merged in ascending order by the same step, a piece standing
 * for one key of weight l and value acc:
 *     if m_p > M: c = exp(M - m_p); L *= c; ACC *= c; M = m_p
 *     e = exp(m_p - M); L += l_p * e; ACC += e * acc_p
 *     out = ACC * (1 / L)
 * The split count (paged-decode-splits) only decides over how many tasks (threads) the pieces
 * of one (row, kv head) are spread: a split row's tasks leave each piece's partial in a
 * workspace and the in-order merge runs after them; an unsplit row merges as it goes. Both
 * compute the same values in the same order, so every split count gives the same bits.
 * The AVX2 and AVX-512 versions perform exactly these IEEE operations (no fused multiply-add,
 * same lanes, same fold tree), only several lanes at a time, so every kernel family gives the
 * same bits (tests/unit/test_batch_invariance.c compares them); the build is ISO C
 * (-ffp-contract=off), so the compiler does not fuse the scalar tails either. The G query heads
 * that share a KV head walk the keys together, so each K/V row is loaded once for all of them.
 * Cascade (cpu_cascade.h): a piece that is full for several rows and maps to the same physical
 * rows for all of them (the same block ids: rows under a prefix-cache hit, the rows of one
 * prefill chunk) is walked once for the group, each key applied to every member row's state by
 * the same per-key steps (keys_run), so each member's partial has the bits its own pass gives;
 * every row then merges its partials, shared and private, in ascending order as above. Cascade
 * changes which task reads a K/V row and how often, never a value
 * (tests/unit/test_cpu_cascade.c compares cascade off / auto / forced). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_cascade.h"
#include "backend/cpu/cpu_internal.h"
#include "base/env.h"
#include "base/log.h"
#include "backend/kvfmt/kv_quant.h"
#include "backend/kvfmt/kv_turbo.h"

/* ==== KV write ==== */
/* Pool rows store the cache type's dtype (f32, f16, bf16, q8_0, q4_0: backend/kvfmt/kv_quant.h); a row's
 * stored bits depend on its own values only. One pool as both K and V (kv_cache_params.v_is_k:
 * v equals k) is written once. */
void cpu_kv_write(mx_tensor *k_pool, mx_tensor *v_pool, const mx_tensor *k, const mx_tensor *v,
                  const mx_attn_batch *b) {
    /* pools: [n_phys_rows, n_kv_heads, head_dim / block]; k, v: [n, n_kv_heads, head_dim] f32 */
    const int H = (int)k->shape[1], D = (int)k->shape[2];
    for (int i = 0; i < b->n_rows; i++) {
        kvq_from_f32_heads(cpu_row_ptr(k_pool, b->write_rows[i]), k_pool->dtype, cpu_row_ptr(k, i), H, D);
        if (v_pool->data != k_pool->data)
            kvq_from_f32_heads(cpu_row_ptr(v_pool, b->write_rows[i]), v_pool->dtype, cpu_row_ptr(v, i), H, D);
    }
}

void cpu_kv_copy_rows(mx_tensor *pool, int64_t dst_row, int64_t src_row, int64_t n_rows) {
    const size_t row_bytes = (size_t)pool->stride[0] * mx_dtype_size(pool->dtype);
    memmove(cpu_row_ptr(pool, dst_row), cpu_row_ptr(pool, src_row), row_bytes * (size_t)n_rows);
}

/* ==== Vector primitives (three families, identical results) ==== */
/* s[g] = dot16(q + g * D, k) for g < G. */
typedef void (*scores_fn)(const float *q, const float *k, int G, int D, float *s);
/* a[d] *= c */
typedef void (*scale_fn)(float *a, float c, int D);
/* a[d] += e * v[d] */
typedef void (*axpy_fn)(float *a, float e, const float *v, int D);

typedef struct att_ops {
    scores_fn scores;
    scale_fn scale;
    axpy_fn axpy;
} att_ops;

static void scores_ref(const float *q, const float *k, int G, int D, float *s) {
    for (int g = 0; g < G; g++) s[g] = cpu_dot_f32(q + (size_t)g * D, k, D);
}
static void scale_ref(float *a, float c, int D) {
    for (int d = 0; d < D; d++) a[d] *= c;
}
static void axpy_ref(float *a, float e, const float *v, int D) {
    for (int d = 0; d < D; d++) a[d] += e * v[d];
}
static const att_ops k_ref_ops = {scores_ref, scale_ref, axpy_ref};

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86_ATT 1
#define A2 __attribute__((target("avx2")))
#define A5 __attribute__((target("avx512f,avx2")))

/* Lanes j and j + 8 already added: j += j + 4, j += j + 2, j += j + 1 (cpu_dot_f32's tree). */
static inline A2 float fold8(__m256 v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    return _mm_cvtss_f32(lo);
}

/* Mask of the first n (< 8) lanes for maskload. */
static inline A2 __m256i mask8(int n) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

static A2 void scores_avx2(const float *q, const float *k, int G, int D, float *s) {
    const int D16 = D & ~15, t = D - D16;
    for (int g = 0; g < G; g++) {
        const float *a = q + (size_t)g * D;
        __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
        for (int i = 0; i < D16; i += 16) {
            lo = _mm256_add_ps(lo, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(k + i)));
            hi = _mm256_add_ps(hi, _mm256_mul_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(k + i + 8)));
        }
        if (t) { /* tail elements go to lanes 0.., the rest add +0 (exact: a lane is never -0) */
            const __m256i m0 = mask8(t < 8 ? t : 8), m1 = mask8(t - 8 > 0 ? t - 8 : 0);
            lo = _mm256_add_ps(lo, _mm256_mul_ps(_mm256_maskload_ps(a + D16, m0), _mm256_maskload_ps(k + D16, m0)));
            hi = _mm256_add_ps(hi, _mm256_mul_ps(_mm256_maskload_ps(a + D16 + 8, m1),
                                                 _mm256_maskload_ps(k + D16 + 8, m1)));
        }
        s[g] = fold8(_mm256_add_ps(lo, hi));
    }
}

static A2 void scale_avx2(float *a, float c, int D) {
    const __m256 cv = _mm256_set1_ps(c);
    int d = 0;
    for (; d + 8 <= D; d += 8) _mm256_storeu_ps(a + d, _mm256_mul_ps(_mm256_loadu_ps(a + d), cv));
    for (; d < D; d++) a[d] *= c;
}

static A2 void axpy_avx2(float *a, float e, const float *v, int D) {
    const __m256 ev = _mm256_set1_ps(e);
    int d = 0;
    for (; d + 8 <= D; d += 8)
        _mm256_storeu_ps(a + d, _mm256_add_ps(_mm256_loadu_ps(a + d), _mm256_mul_ps(ev, _mm256_loadu_ps(v + d))));
    for (; d < D; d++) a[d] += e * v[d];
}

static A5 void scores_avx512(const float *q, const float *k, int G, int D, float *s) {
    const int D16 = D & ~15, t = D - D16;
    const __mmask16 m = (__mmask16)((1u << t) - 1);
    for (int g = 0; g < G; g++) {
        const float *a = q + (size_t)g * D;
        __m512 acc = _mm512_setzero_ps();
        for (int i = 0; i < D16; i += 16)
            acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(k + i)));
        if (t)
            acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, a + D16),
                                                   _mm512_maskz_loadu_ps(m, k + D16)));
        const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
        s[g] = fold8(_mm256_add_ps(_mm512_castps512_ps256(acc), hi));
    }
}

static A5 void scale_avx512(float *a, float c, int D) {
    const __m512 cv = _mm512_set1_ps(c);
    int d = 0;
    for (; d + 16 <= D; d += 16) _mm512_storeu_ps(a + d, _mm512_mul_ps(_mm512_loadu_ps(a + d), cv));
    for (; d < D; d++) a[d] *= c;
}

static A5 void axpy_avx512(float *a, float e, const float *v, int D) {
    const __m512 ev = _mm512_set1_ps(e);
    int d = 0;
    for (; d + 16 <= D; d += 16)
        _mm512_storeu_ps(a + d, _mm512_add_ps(_mm512_loadu_ps(a + d), _mm512_mul_ps(ev, _mm512_loadu_ps(v + d))));
    for (; d < D; d++) a[d] += e * v[d];
}

static const att_ops k_avx2_ops = {scores_avx2, scale_avx2, axpy_avx2};
static const att_ops k_avx512_ops = {scores_avx512, scale_avx512, axpy_avx512};
#endif

/* The family follows the matmul's (cpu_matmul_force_isa switches both). */
static const att_ops *att_ops_now(void) {
#ifdef HAVE_X86_ATT
    switch (cpu_matmul_isa()) {
    case CPU_ISA_AVX512: return &k_avx512_ops;
    case CPU_ISA_AVX2: return &k_avx2_ops;
    default: break;
    }
#endif
    return &k_ref_ops;
}

/* ==== Attention: pieces, partials, merge ====
 * A row's keys [start, pos] are cut at absolute key positions into pieces of P keys (piece k =
 * keys [k * P, (k + 1) * P), the first one cut by the window start, the last by pos). Each piece
 * gives a partial (acc [G, D], m [G], l [G]) by the online softmax from a fresh state; the
 * partials are merged in ascending piece order. The cuts depend only on the row's own positions,
 * so the value of a row does not depend on the batch, the chunking or the split count. */

/* Partials of a group of split rows, or of a cascade round, at most (16 MiB; a single row, or
 * one piece of every cascade row, may exceed it: a row's partials are < G / (2 P) of its K/V). */
#define ATT_WS_CAP ((int64_t)1 << 22)

/* Floats of one partial: acc [G, D], then m [G], then l [G]. */
static size_t part_floats(int G, int D) { return (size_t)G * ((size_t)D + 2); }

static void part_reset(float *pt, int G, int D) {
    float *m = pt + (size_t)G * D, *l = m + G;
    memset(pt, 0, (size_t)G * D * sizeof(float));
    for (int g = 0; g < G; g++) m[g] = -INFINITY, l[g] = 0.0f;
}

/* What every task of one attention call reads. */
typedef struct att_ctx {
    mx_tensor *out;
    const mx_tensor *q, *k_pool, *v_pool;
    const mx_attn_batch *b;
    const mx_attn_params *p;
    const att_ops *ops;
    int G, D, Hkv, P, S; /* q heads per kv head, head dim, kv heads, piece keys, split count */
    float *ws;           /* partials of the current group's split rows */
    const int64_t *ws_off; /* [n_rows] offset of row i's partials in ws (split rows only) */
    /* TurboQuant pools hold rotated rows (backend/kvfmt/kv_turbo.h): a rotated K pool is read with the
     * rotated queries qrot [n_rows, n_heads, D] (<R q, R k> = <q, k>), and with a rotated V
     * pool the output is rotated back as it is stored */
    const float *qrot;
    bool v_rot;
    /* cascade (cpu_cascade.h): the plan (NULL: none), the partials of a round (cws) and the
     * running state of every cascade row and kv head (cst), slots of c_slot floats each */
    const casc_plan *cp;
    float *cws, *cst;
    int64_t c_slot;
} att_ctx;

/* Row i's G query heads of kv head kvh: [G, D] (rotated when the K pool is). */
static inline const float *row_q(const att_ctx *c, int i, int kvh) {
    const size_t off = (size_t)kvh * c->G * c->D;
    if (c->qrot) return c->qrot + (size_t)i * c->Hkv * c->G * c->D + off;
    return (const float *)cpu_row_ptr(c->q, i) + off;
}

/* Row i takes the cascade path. */
static inline bool is_casc(const att_ctx *c, int i) { return c->cp && c->cp->casc_of[i] >= 0; }

/* Row i's first key (window or chunk start) and its pieces [*first, *first + *n). */
static int row_pieces(const att_ctx *c, int i, int *first, int *n) {
    const int pos = c->b->pos[i];
    const int start = mx_attn_first_key(pos, c->p->window, c->p->chunk);
    *first = start / c->P;
    *n = pos / c->P - *first + 1;
    return start;
}

/* Tasks the pieces of one (row, kv head) are spread over: S, but never more than its pieces. */
static int row_splits(const att_ctx *c, int n_pieces) { return n_pieces < c->S ? n_pieces : c->S; }

/* One online-softmax step of one query head: a "key" of score sc and weight w (a key: 1; a
 * piece's partial: its l) with value v. rescale false when acc and l are still all +0, where
 * scaling them by expf(-inf) = 0 would change no bit. w * e is e exactly for a key (w = 1). */
static inline void osm_step(const att_ops *ops, float *ag, float *m, float *l, float sc, float w,
                            const float *v, int D, bool rescale) {
    if (sc > *m) {
        if (rescale) {
            const float cf = expf(*m - sc);
            *l *= cf;
            ops->scale(ag, cf, D);
        }
        *m = sc;
    }
    const float e = expf(sc - *m);
    *l += w * e;
    ops->axpy(ag, e, v, D);
}

/* K (or V) of physical row r, kv head kvh as D floats: the pool's own memory when it is f32,
 * else that head's row of the cache type (f16, bf16, q8_0, q4_0; TurboQuant: its rotated
 * values) converted exactly into buf [D]. Everything after it is the f32 arithmetic, so each
 * cache type keeps the contracts. */
static inline const float *kv_row(const mx_tensor *pool, int64_t r, int kvh, int D, float *buf) {
    if (pool->dtype == MX_F32) return (const float *)pool->data + r * pool->stride[0] + (size_t)kvh * D;
    kvq_to_f32(buf, (const char *)cpu_row_ptr(pool, r) + (size_t)kvh * kvq_row_bytes(pool->dtype, D),
               pool->dtype, D);
    return buf;
}

/* n consecutive keys (physical rows r, r + 1, ... of kv head kvh in the K and V pools) into one
 * row's state of its G query heads qv [G, D]: acc [G, D], m [G], l [G]. fresh: the state is a
 * piece's fresh one (acc, l all +0: rescaling them by expf(-inf) = 0 changes no bit). s: [G]
 * scores, then [2, D] for converted K and V rows (kv_row). The one place the per-key steps of
 * the header live: a row alone (piece_run) and a row of a shared piece (casc_shared_piece) go
 * through it, so both make the same bits. The per-key work is small (G dot products of D), so
 * everything the loop reads comes in as arguments (locals): the indirect calls would otherwise
 * make the compiler reload it for every key. */
static inline void keys_run(const att_ops *ops, const float *qv, int G, int D, float scale,
                            float cap, const mx_tensor *kp, const mx_tensor *vp, int64_t r, int kvh,
                            int n, bool fresh, float *acc, float *m, float *l, float *s) {
    float *kbuf = s + G, *vbuf = kbuf + D;
    for (int t = 0; t < n; t++, r++) {
        const float *k = kv_row(kp, r, kvh, D, kbuf), *v = kv_row(vp, r, kvh, D, vbuf);
        ops->scores(qv, k, G, D, s);
        for (int g = 0; g < G; g++) {
            float sc = s[g] * scale;
            if (cap > 0.0f) sc = cap * tanhf(sc / cap);
            osm_step(ops, acc + (size_t)g * D, &m[g], &l[g], sc, 1.0f, v, D, !fresh);
        }
        fresh = false;
    }
}

/* Online softmax of row i, kv head kvh over keys [lo, hi] into pt (reset first). s: keys_run's. */
static void piece_run(const att_ctx *c, int i, int kvh, int lo, int hi, float *pt, float *s) {
    const mx_attn_batch *b = c->b;
    const int G = c->G, D = c->D, bs = b->block_size;
    const int32_t *table = b->block_table + (size_t)b->seq[i] * (size_t)b->table_stride;
    float *m = pt + (size_t)G * D, *l = m + G;
    part_reset(pt, G, D);
    /* keys block by block: physical row = table[kp / bs] * bs + kp % bs */
    for (int kp = lo; kp <= hi;) {
        const int blk = kp / bs, last = (blk + 1) * bs - 1 < hi ? (blk + 1) * bs - 1 : hi;
        const int64_t r = (int64_t)table[blk] * bs + kp % bs;
        keys_run(c->ops, row_q(c, i, kvh), G, D, c->p->scale, c->p->softcap, c->k_pool, c->v_pool,
                 r, kvh, last - kp + 1, kp == lo, pt, m, l, s);
        kp = last + 1;
    }
}

/* Piece k of row i (keys from `start`) into pt. */
static void piece_k(const att_ctx *c, int i, int kvh, int start, int k, float *pt, float *s) {
    const int lo = k * c->P > start ? k * c->P : start;
    const int end = (k + 1) * c->P - 1, hi = end < c->b->pos[i] ? end : c->b->pos[i];
    piece_run(c, i, kvh, lo, hi, pt, s);
}

/* run = merge(run, pc): the online-softmax step with the piece as one weighted "key"
 * (weight l, value acc), with the same ops, so every kernel family gives the same bits. */
static void part_merge(const att_ops *ops, float *run, const float *pc, int G, int D) {
    float *m = run + (size_t)G * D, *l = m + G;
    const float *pm = pc + (size_t)G * D, *pl = pm + G;
    for (int g = 0; g < G; g++) /* rescale by 0 for the first piece (m = -inf), as before */
        osm_step(ops, run + (size_t)g * D, &m[g], &l[g], pm[g], pl[g], pc + (size_t)g * D, D, true);
}

/* out[i, kvh's q heads] = acc / l */
static void part_store(const att_ctx *c, int i, int kvh, const float *run) {
    const int G = c->G, D = c->D;
    float *o = (float *)cpu_row_ptr(c->out, i) + (size_t)kvh * G * D;
    const float *l = run + (size_t)G * D + G;
    for (int g = 0; g < G; g++) {
        const float inv = l[g] > 0.0f ? 1.0f / l[g] : 0.0f;
        for (int d = 0; d < D; d++) o[(size_t)g * D + d] = run[(size_t)g * D + d] * inv;
        if (c->v_rot) kv_turbo_unrotate(o + (size_t)g * D, D); /* a sum of rotated values */
    }
}

/* Partial of piece k (index from the row's first piece) of row i, kv head kvh in ws. */
static float *ws_slot(const att_ctx *c, int i, int kvh, int n_pieces, int k) {
    return c->ws + c->ws_off[i] + ((size_t)kvh * n_pieces + k) * part_floats(c->G, c->D);
}

/* Task j of (row i, kv head kvh): a contiguous run of the row's pieces. An unsplit row merges
 * them here and writes the output; a split row leaves each piece's partial in ws for
 * att_merge_task. run, pc: one partial each; s: piece_run's scratch ([G + 2 * D]). */
static void att_task(const att_ctx *c, int i, int kvh, int j, float *run, float *pc, float *s) {
    if (is_casc(c, i)) return; /* cascade path */
    int first, n;
    const int start = row_pieces(c, i, &first, &n), S = row_splits(c, n);
    if (j >= S) return;
    const int k0 = (int)((int64_t)j * n / S), k1 = (int)((int64_t)(j + 1) * n / S);
    if (S == 1) {
        part_reset(run, c->G, c->D);
        for (int k = k0; k < k1; k++) {
            piece_k(c, i, kvh, start, first + k, pc, s);
            part_merge(c->ops, run, pc, c->G, c->D);
        }
        part_store(c, i, kvh, run);
        return;
    }
    /* computed in this thread's pc, then copied: neighbouring slots belong to other tasks, and
     * updating a slot key by key would bounce their shared cache lines between threads */
    for (int k = k0; k < k1; k++) {
        piece_k(c, i, kvh, start, first + k, pc, s);
        memcpy(ws_slot(c, i, kvh, n, k), pc, part_floats(c->G, c->D) * sizeof(float));
    }
}

/* The in-order merge of a split row's partials (after all its tasks ran). */
static void att_merge_task(const att_ctx *c, int i, int kvh, float *run) {
    if (is_casc(c, i)) return;
    int first, n;
    row_pieces(c, i, &first, &n);
    if (row_splits(c, n) == 1) return; /* merged by its task */
    part_reset(run, c->G, c->D);
    for (int k = 0; k < n; k++) part_merge(c->ops, run, ws_slot(c, i, kvh, n, k), c->G, c->D);
    part_store(c, i, kvh, run);
}

/* ==== Cascade: shared pieces, then each row's in-order fold ====
 * (cpu_cascade.h says what is shared; here is how it is computed.) Per round of the plan:
 * compute tasks (unit, member slice, kv head) leave each member's partial of the unit's piece
 * in cws; after the barrier, fold tasks (cascade row, kv head) merge the row's pieces of the
 * round in ascending order into its running state in cst, computing the pieces no unit holds
 * (its private ones, when unsplit) on the spot, exactly as att_task's unsplit loop does. */

/* Keys per step of a shared piece: each member row takes a run of at most this many keys
 * before the next member does, so the run's K/V (16 x D x 2 floats) stay in L1 while every
 * member of the slice reads them. */
#define CASC_SEG 16

/* Partials of members [j0, j1) of a shared unit (a full piece, the same physical rows for
 * every member) into their slots: the piece's keys are walked once; each key run is applied
 * to every member's state with keys_run, the steps a lone row's piece_run takes. A run of a
 * non-f32 cache is converted once for the slice into seg ([2, CASC_SEG, D] after keys_run's
 * scratch in s) and read from there as an f32 pool: the same values, so the same bits. */
static void casc_shared_piece(const att_ctx *c, const casc_unit *u, int j0, int j1, int kvh,
                              float *s) {
    const mx_attn_batch *b = c->b;
    const int G = c->G, D = c->D, bs = b->block_size, *mem = c->cp->mem + u->m0;
    const int lo = u->k * c->P, hi = lo + c->P - 1;
    /* every member maps the piece to the same blocks: the first member's table serves all */
    const int32_t *table = b->block_table + (size_t)b->seq[mem[j0]] * (size_t)b->table_stride;
    float *slots = c->cws + u->off + (int64_t)kvh * u->nm * c->c_slot; /* member j: + j * slot */
    for (int j = j0; j < j1; j++) part_reset(slots + j * c->c_slot, G, D);
    for (int kp = lo; kp <= hi;) {
        const int blk = kp / bs, end = (blk + 1) * bs - 1 < hi ? (blk + 1) * bs - 1 : hi;
        const int n = end - kp + 1 < CASC_SEG ? end - kp + 1 : CASC_SEG;
        int64_t r = (int64_t)table[blk] * bs + kp % bs;
        const mx_tensor *kpool = c->k_pool, *vpool = c->v_pool;
        int h = kvh;
        mx_tensor kseg, vseg;
        if (kpool->dtype != MX_F32 || vpool->dtype != MX_F32) {
            float *kb = s + G + 2 * (size_t)D, *vb = kb + (size_t)CASC_SEG * D;
            for (int t = 0; t < n; t++) {
                const float *kr = kv_row(kpool, r + t, kvh, D, kb + (size_t)t * D);
                const float *vr = kv_row(vpool, r + t, kvh, D, vb + (size_t)t * D);
                if (kr != kb + (size_t)t * D) memcpy(kb + (size_t)t * D, kr, (size_t)D * sizeof *kr);
                if (vr != vb + (size_t)t * D) memcpy(vb + (size_t)t * D, vr, (size_t)D * sizeof *vr);
            }
            kseg = mx_tensor_3d(kb, MX_F32, n, 1, D, MX_DEV_CPU);
            vseg = mx_tensor_3d(vb, MX_F32, n, 1, D, MX_DEV_CPU);
            kpool = &kseg, vpool = &vseg, r = 0, h = 0;
        }
        for (int j = j0; j < j1; j++) {
            float *pt = slots + j * c->c_slot, *m = pt + (size_t)G * D;
            keys_run(c->ops, row_q(c, mem[j], kvh), G, D, c->p->scale, c->p->softcap, kpool,
                     vpool, r, h, n, kp == lo, pt, m, m + G, s);
        }
        kp += n;
    }
}

/* Compute task t of round rd: find its unit (units' first tasks ascend), then its member slice
 * and kv head. A unit of one is a private piece of a split cascade row: piece_k, into its slot
 * (slots are whole cache lines: no other task writes next to it). */
static void casc_compute_task(const att_ctx *c, const casc_round *rd, int64_t t, float *s) {
    const casc_unit *units = c->cp->units;
    int lo = rd->u0, hi = rd->u1 - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (units[mid].t0 <= t) lo = mid;
        else hi = mid - 1;
    }
    const casc_unit *u = &units[lo];
    const int n_sl = (u->nm + CASC_SLICE - 1) / CASC_SLICE, x = (int)(t - u->t0);
    const int kvh = x / n_sl, sl = x % n_sl;
    if (u->nm == 1) {
        const int i = c->cp->mem[u->m0];
        int first, n;
        const int start = row_pieces(c, i, &first, &n);
        piece_k(c, i, kvh, start, u->k, c->cws + u->off + (int64_t)kvh * c->c_slot, s);
        return;
    }
    casc_shared_piece(c, u, (int)((int64_t)sl * u->nm / n_sl), (int)((int64_t)(sl + 1) * u->nm / n_sl),
                      kvh, s);
}

/* Fold of cascade row ci (batch row i), kv head kvh over its pieces in round rd, in ascending
 * order: a unit's partial from cws, any other piece computed here (pc). The running state
 * lives in cst between rounds; the last round stores the output. */
static void casc_fold_task(const att_ctx *c, const casc_round *rd, int ci, int kvh, float *pc,
                           float *s) {
    const casc_plan *pl = c->cp;
    const int i = pl->rows[ci];
    int first, n;
    const int start = row_pieces(c, i, &first, &n), last = first + n - 1;
    const int ka = rd->k0 > first ? rd->k0 : first, kb = rd->k1 < last + 1 ? rd->k1 : last + 1;
    if (ka >= kb) return;
    float *st = c->cst + ((int64_t)(ci - rd->ci0) * c->Hkv + kvh) * c->c_slot; /* chunk's rows */
    if (ka == first) part_reset(st, c->G, c->D);
    int x = pl->slot0[ci];
    const int x_end = pl->slot0[ci + 1];
    while (x < x_end && pl->slots[x].k < ka) x++; /* the row's slots ascend in k */
    for (int k = ka; k < kb; k++) {
        const float *pt = pc;
        if (x < x_end && pl->slots[x].k == k) {
            pt = c->cws + pl->slots[x].off + kvh * pl->slots[x].hst;
            x++;
        } else {
            piece_k(c, i, kvh, start, k, pc, s);
        }
        part_merge(c->ops, st, pt, c->G, c->D);
    }
    if (kb == last + 1) part_store(c, i, kvh, st);
}

static void casc_folds(const att_ctx *c, const casc_round *rd, int64_t t, float *pc, float *s) {
    casc_fold_task(c, rd, rd->ci0 + (int)(t / c->Hkv), (int)(t % c->Hkv), pc, s);
}

/* Every round of the plan; inside the parallel region. scratch: as att_group's. */
static void casc_run(const att_ctx *c, float *scratch) {
    const casc_plan *pl = c->cp;
    const size_t pf = part_floats(c->G, c->D);
    float *pc = scratch + pf, *s = pc + pf;
    for (int r = 0; r < pl->n_rounds; r++) {
        const casc_round *rd = &pl->rounds[r];
        const int64_t n_folds = (int64_t)(rd->ci1 - rd->ci0) * c->Hkv;
#pragma omp for schedule(dynamic, 1) /* its barrier: the round's partials are in cws */
        for (int64_t t = 0; t < rd->n_tasks; t++) casc_compute_task(c, rd, t, s);
        if (r + 1 < pl->n_rounds) {
#pragma omp for schedule(dynamic, 1) /* its barrier: cws is free for the next round */
            for (int64_t t = 0; t < n_folds; t++) casc_folds(c, rd, t, pc, s);
        } else {
#pragma omp for schedule(dynamic, 1) nowait /* the plain rows' tasks may start */
            for (int64_t t = 0; t < n_folds; t++) casc_folds(c, rd, t, pc, s);
        }
    }
}

/* Test hook (cpu_internal.h): what the last call on this thread decided. */
static _Thread_local cpu_cascade_info g_last_casc;

void cpu_attention_last_cascade(cpu_cascade_info *out) { *out = g_last_casc; }

static casc_mode casc_mode_of(mx_cascade_mode m) {
    return m == MX_CASCADE_OFF ? CASC_OFF : m == MX_CASCADE_FORCE ? CASC_FORCE : CASC_AUTO;
}

/* The plan of this call (pl zeroed: none) and its buffers in c; false when nothing cascades. */
static bool casc_setup(att_ctx *c, casc_plan *pl) {
    const mx_env_t *env = mx_env();
    memset(pl, 0, sizeof *pl);
    const size_t pf = part_floats(c->G, c->D);
    c->c_slot = (int64_t)(pf + 15) / 16 * 16; /* whole 64-byte lines: tasks never share one */
    const casc_geom g = {.P = c->P, .window = c->p->window, .chunk = c->p->chunk, .Hkv = c->Hkv, .slot = c->c_slot,
                         .splits = c->S, .mode = casc_mode_of(env->cascade_attention),
                         .min_shared = env->cascade_min_shared_keys, .ws_cap = ATT_WS_CAP,
                         .state_cap = ATT_WS_CAP / 4};
    const int rc = casc_plan_build(pl, c->b, &g);
    g_last_casc = (cpu_cascade_info){.groups = pl->groups, .declined = pl->declined,
                                     .rows = pl->n_rows, .shared_pieces = pl->shared_units,
                                     .rounds = pl->n_rounds, .chunks = pl->n_chunks,
                                     .saved_keys = pl->saved_keys};
    static _Thread_local uint64_t logged_step;
    if ((pl->groups || pl->declined) && (!c->b->step_id || c->b->step_id != logged_step)) {
        logged_step = c->b->step_id; /* once a step, not once a layer */
        LOG_DEBUG("cpu attention cascade: %d groups (%d declined), %d of %d rows, %d shared "
                  "pieces, %lld key reads saved per kv head, %d row chunks, %d rounds",
                  pl->groups, pl->declined, pl->n_rows, c->b->n_rows, pl->shared_units,
                  (long long)pl->saved_keys, pl->n_chunks, pl->n_rounds);
    }
    if (rc || pl->n_rows == 0) return false;
    const size_t ws_b = (size_t)pl->ws_max * sizeof(float);
    const size_t st_b = (size_t)pl->chunk_rows * (size_t)c->Hkv * (size_t)c->c_slot * sizeof(float);
    c->cws = ws_b ? aligned_alloc(64, (ws_b + 63) / 64 * 64) : NULL;
    c->cst = aligned_alloc(64, (st_b + 63) / 64 * 64);
    if ((ws_b && !c->cws) || !c->cst) { /* no memory: the plain path, the same bits */
        free(c->cws), free(c->cst);
        c->cws = c->cst = NULL;
        casc_plan_free(pl);
        g_last_casc = (cpu_cascade_info){0};
        return false;
    }
    c->cp = pl;
    return true;
}

/* ==== Attention: split count, workspace, driver ==== */
/* Test hooks (cpu_internal.h): a piece length other than CPU_ATTN_PIECE, the last split count. */
static _Atomic int g_piece = CPU_ATTN_PIECE;
static _Atomic int g_last_splits;

void cpu_attention_force_piece(int keys) { g_piece = keys > 0 ? keys : CPU_ATTN_PIECE; }
int cpu_attention_last_splits(void) { return g_last_splits; }

/* The step's split count, resolved by the caller before the step (model_forward: the tune
 * policy, once per forward and geometry; the tuner: its candidate), never looked up from inside
 * the op. 0 (a caller that resolved none): unsplit, one task per (row, kv head); the count
 * changes the speed only, never a value. */
static int att_splits(const mx_attn_batch *b) {
    const int S = b->kv_splits > 0 ? b->kv_splits : 1;
    g_last_splits = S;
    return S;
}

/* Offsets of the split rows' partials (ws_off, -1: unsplit row) and row groups [grp[g],
 * grp[g + 1]) whose partials fit ATT_WS_CAP. Returns the groups' largest workspace in floats,
 * 0 when no row is split (then one group of all rows). */
static int64_t att_plan(const att_ctx *c, int64_t *ws_off, int *grp, int *n_grp) {
    const int64_t per_piece = (int64_t)c->Hkv * (int64_t)part_floats(c->G, c->D);
    int64_t used = 0, most = 0;
    *n_grp = 0;
    grp[0] = 0;
    for (int i = 0; i < c->b->n_rows; i++) {
        int first, n;
        row_pieces(c, i, &first, &n);
        ws_off[i] = -1;
        if (row_splits(c, n) == 1 || is_casc(c, i)) continue;
        const int64_t need = n * per_piece;
        if (used > 0 && used + need > ATT_WS_CAP) grp[++*n_grp] = i, used = 0;
        ws_off[i] = used;
        used += need;
        most = used > most ? used : most;
    }
    grp[++*n_grp] = c->b->n_rows;
    return most;
}

/* Runs the tasks of rows [r0, r1), then (split rows) the merges; inside a parallel region.
 * scratch: this thread's run, pc partials and scores. */
static void att_group(const att_ctx *c, int r0, int r1, bool merge, float *scratch) {
    const size_t pf = part_floats(c->G, c->D);
    float *run = scratch, *pc = run + pf, *s = pc + pf;
    const int64_t per_row = (int64_t)c->Hkv * c->S, n_tasks = (r1 - r0) * per_row;
#pragma omp for schedule(dynamic, 1) nowait /* unsplit: the region's end is the one barrier */
    for (int64_t t = 0; t < n_tasks; t++) {
        const int i = r0 + (int)(t / per_row), kvh = (int)(t % per_row / c->S);
        att_task(c, i, kvh, (int)(t % c->S), run, pc, s);
    }
    if (!merge) return;
#pragma omp barrier /* every piece's partial is in ws */
#pragma omp for schedule(dynamic, 1) /* its barrier: ws is free for the next group */
    for (int64_t t = 0; t < (int64_t)(r1 - r0) * c->Hkv; t++)
        att_merge_task(c, r0 + (int)(t / c->Hkv), (int)(t % c->Hkv), run);
}

void cpu_attention(mx_tensor *out, const mx_tensor *q, const mx_tensor *k_pool,
                   const mx_tensor *v_pool, const mx_attn_batch *b, const mx_attn_params *p) {
    att_ctx c = {.out = out, .q = q, .k_pool = k_pool, .v_pool = v_pool, .b = b, .p = p,
                 .ops = att_ops_now(), .G = p->n_heads / p->n_kv_heads, .D = p->head_dim,
                 .Hkv = p->n_kv_heads, .P = g_piece, .S = att_splits(b)};
    int max_pieces = 1; /* S beyond a row's pieces only adds empty tasks */
    for (int i = 0; i < b->n_rows; i++) {
        int first, n;
        row_pieces(&c, i, &first, &n);
        max_pieces = n > max_pieces ? n : max_pieces;
    }
    c.S = c.S < max_pieces ? c.S : max_pieces;
    float *qrot = NULL;
    if (kvq_turbo_bits(k_pool->dtype) && (qrot = malloc((size_t)b->n_rows * p->n_heads * c.D * sizeof(float)))) {
        for (int i = 0; i < b->n_rows; i++) {
            float *r = qrot + (size_t)i * p->n_heads * c.D;
            memcpy(r, cpu_row_ptr(q, i), (size_t)p->n_heads * c.D * sizeof(float));
            for (int h = 0; h < p->n_heads; h++) kv_turbo_rotate(r + (size_t)h * c.D, c.D);
        }
    }
    c.qrot = qrot, c.v_rot = kvq_turbo_bits(v_pool->dtype) > 0;
    casc_plan cplan; /* rows sharing pieces: the cascade path (before the split plan: its rows
                        leave the plain path) */
    const bool casc = casc_setup(&c, &cplan);
    const int n_thr = omp_get_max_threads();
    /* run, pc partials; s: scores, kbuf, vbuf, and a cascade slice's converted key run */
    const size_t scratch_f = 2 * part_floats(c.G, c.D) + (size_t)c.G + 2 * (size_t)c.D * (1 + CASC_SEG);
    float *scratch = malloc((size_t)n_thr * scratch_f * sizeof(float));
    int64_t *ws_off = c.S > 1 ? malloc((size_t)b->n_rows * sizeof *ws_off) : NULL;
    int *grp = c.S > 1 ? malloc(((size_t)b->n_rows + 1) * sizeof *grp) : NULL;
    int n_grp = 1;
    int64_t ws_f = 0;
    if (ws_off && grp) ws_f = att_plan(&c, ws_off, grp, &n_grp);
    if (ws_f > 0) c.ws = malloc((size_t)ws_f * sizeof(float)), c.ws_off = ws_off;
    if (!c.ws) { /* no split row, or no memory for the partials: unsplit, the same bits */
        c.S = 1, n_grp = 1;
        free(grp), grp = NULL;
    }
    if (!scratch || (kvq_turbo_bits(k_pool->dtype) && !qrot)) { /* no memory: a defined (zero) result */
        for (int i = 0; i < b->n_rows; i++)
            memset(cpu_row_ptr(out, i), 0, (size_t)p->n_heads * c.D * sizeof(float));
    } else {
        int64_t work = 0; /* key visits x head dim, to keep small steps on the calling thread */
        for (int i = 0; i < b->n_rows; i++) work += (int64_t)(b->pos[i] + 1) * p->n_heads * c.D;
#pragma omp parallel if (work >= (1 << 17))
        {
            float *mine = scratch + (size_t)omp_get_thread_num() * scratch_f;
            if (casc) casc_run(&c, mine);
            for (int g = 0; g < n_grp; g++)
                att_group(&c, grp ? grp[g] : 0, grp ? grp[g + 1] : b->n_rows, c.ws != NULL, mine);
        }
    }
    free(c.ws), free(ws_off), free(grp), free(scratch), free(qrot);
    free(c.cws), free(c.cst);
    casc_plan_free(&cplan);
}
