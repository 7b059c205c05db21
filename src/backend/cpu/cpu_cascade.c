/* Cascade attention plan (cpu_cascade.h): which rows share which pieces, the policy, rounds.
 *
 * 1. Candidates: for every piece k, the rows for which k is full are partitioned by the block
 *    ids covering k (rows of one sequence agree by construction; sequences are compared by a
 *    hash of those ids, then the ids themselves). A class of >= 2 rows is a candidate unit.
 * 2. Policy: candidates with the same member rows form a group (e.g. B decode rows under one
 *    cached system prompt, or the rows of a prefill chunk over the keys before it). In auto
 *    mode a group whose rows share fewer keys than the floor is declined (its rows read those
 *    keys alone, as without cascade): a short shared span stays in the L2 cache between the
 *    rows that re-read it, and the extra barrier of a cascade round then costs more than it
 *    saves (docs/engine.md, "Cascade attention", for the measurements).
 * 3. Units: the kept candidates, plus (split count > 1) each private piece of a cascade row as
 *    a unit of one, so that a split row's pieces are still spread over threads.
 * 4. Chunks and rounds: the cascade rows are cut into chunks whose running states fit
 *    state_cap (a unit spanning chunks becomes one unit per chunk); each chunk's units in
 *    ascending k are cut into rounds where a round's partials would pass the workspace cap;
 *    each unit's partials get a workspace offset, each row a list of its slots. */
#include "backend/cpu/cpu_cascade.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* ==== Small helpers ==== */
typedef struct ivec {
    int *v;
    int64_t n, cap;
} ivec;

static int ivec_push(ivec *a, int x) {
    if (a->n == a->cap) {
        const int64_t cap = a->cap ? 2 * a->cap : 256;
        int *v = realloc(a->v, (size_t)cap * sizeof *v);
        if (!v) return -1;
        a->v = v, a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

static uint64_t mix64(uint64_t h, uint64_t x) { /* splitmix64 of h ^ x */
    uint64_t z = h ^ (x + 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int cmp_int(const void *a, const void *b) {
    const int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* A row's keys: [start, pos], pieces [first, last], full pieces [fk0, fk1). */
typedef struct row_span {
    int start, first, last, fk0, fk1;
} row_span;

static row_span span_of(const mx_attn_batch *b, const casc_geom *g, int i) {
    const int pos = b->pos[i], P = g->P;
    row_span s;
    s.start = mx_attn_first_key(pos, g->window, g->chunk); /* cut like the window's start */
    s.first = s.start / P, s.last = pos / P;
    s.fk0 = (s.start + P - 1) / P, s.fk1 = (pos + 1) / P;
    return s;
}

/* Block ids of piece k in sequence `seq`'s table: [*n] starting at the returned pointer. */
static const int32_t *piece_blocks(const mx_attn_batch *b, int P, int seq, int k, int *n) {
    const int bs = b->block_size, b0 = k * P / bs, b1 = ((k + 1) * P - 1) / bs;
    *n = b1 - b0 + 1;
    return b->block_table + (size_t)seq * (size_t)b->table_stride + b0;
}

/* ==== 1. Candidates ==== */
typedef struct seq_key {
    uint64_t h;
    int run; /* index of the sequence's run of rows */
} seq_key;

static int cmp_seq_key(const void *a, const void *b) {
    const seq_key *x = a, *y = b;
    if (x->h != y->h) return x->h < y->h ? -1 : 1;
    return (x->run > y->run) - (x->run < y->run);
}

typedef struct seq_row {
    int seq, row;
} seq_row;

static int cmp_seq_row(const void *a, const void *b) {
    const seq_row *x = a, *y = b;
    if (x->seq != y->seq) return x->seq < y->seq ? -1 : 1;
    return (x->row > y->row) - (x->row < y->row);
}

typedef struct cands {
    ivec k, m0, nm, mem; /* candidate c: piece k[c], members mem[m0[c] .. m0[c] + nm[c]) */
} cands;

static void cands_free(cands *c) { free(c->k.v), free(c->m0.v), free(c->nm.v), free(c->mem.v); }

/* Rows sorted by (sequence, row) and cut into runs of one sequence: run r is
 * sr[rs[r] .. rs[r + 1]). Returns the number of runs. */
static int seq_runs(const mx_attn_batch *b, seq_row *sr, int *rs) {
    const int n = b->n_rows;
    for (int i = 0; i < n; i++) sr[i] = (seq_row){b->seq[i], i};
    qsort(sr, (size_t)n, sizeof *sr, cmp_seq_row);
    int nr = 0;
    for (int i = 0; i < n; i++)
        if (i == 0 || sr[i].seq != sr[i - 1].seq) rs[nr++] = i;
    rs[nr] = n;
    return nr;
}

/* Candidate units of piece k. keys: scratch of [runs]. */
static int piece_candidates(const mx_attn_batch *b, const casc_geom *g, const row_span *sp,
                            const seq_row *sr, const int *rs, int nr, int k, seq_key *keys,
                            cands *out) {
    int nk = 0, full = 0;
    for (int r = 0; r < nr; r++) {
        int cnt = 0;
        for (int x = rs[r]; x < rs[r + 1]; x++) cnt += sp[sr[x].row].fk0 <= k && k < sp[sr[x].row].fk1;
        if (!cnt) continue;
        full += cnt;
        int nb;
        const int32_t *ids = piece_blocks(b, g->P, sr[rs[r]].seq, k, &nb);
        uint64_t h = (uint64_t)nb;
        for (int j = 0; j < nb; j++) h = mix64(h, (uint64_t)(uint32_t)ids[j]);
        keys[nk++] = (seq_key){h, r};
    }
    if (full < 2) return 0;
    qsort(keys, (size_t)nk, sizeof *keys, cmp_seq_key);
    for (int a = 0; a < nk;) {
        /* a class: the runs after a with the same ids (the hash first, then the ids: a hash
         * collision only splits a class, it never merges two) */
        int nb;
        const int32_t *ida = piece_blocks(b, g->P, sr[rs[keys[a].run]].seq, k, &nb);
        int e = a + 1;
        while (e < nk && keys[e].h == keys[a].h &&
               !memcmp(ida, piece_blocks(b, g->P, sr[rs[keys[e].run]].seq, k, &nb), (size_t)nb * 4))
            e++;
        const int64_t m0 = out->mem.n;
        for (int c = a; c < e; c++)
            for (int x = rs[keys[c].run]; x < rs[keys[c].run + 1]; x++) {
                const int i = sr[x].row;
                if (sp[i].fk0 <= k && k < sp[i].fk1 && ivec_push(&out->mem, i)) return -1;
            }
        const int nm = (int)(out->mem.n - m0);
        if (nm >= 2) {
            qsort(out->mem.v + m0, (size_t)nm, sizeof(int), cmp_int);
            if (ivec_push(&out->k, k) || ivec_push(&out->m0, (int)m0) || ivec_push(&out->nm, nm))
                return -1;
        } else {
            out->mem.n = m0;
        }
        a = e;
    }
    return 0;
}

static int find_candidates(const mx_attn_batch *b, const casc_geom *g, const row_span *sp,
                           cands *out) {
    const int n = b->n_rows;
    int k_lo = 1 << 30, k_hi = 0;
    for (int i = 0; i < n; i++)
        if (sp[i].fk1 > sp[i].fk0) {
            k_lo = sp[i].fk0 < k_lo ? sp[i].fk0 : k_lo;
            k_hi = sp[i].fk1 > k_hi ? sp[i].fk1 : k_hi;
        }
    if (k_lo >= k_hi) return 0;
    seq_row *sr = malloc((size_t)n * sizeof *sr);
    int *rs = malloc(((size_t)n + 1) * sizeof *rs);
    seq_key *keys = malloc((size_t)n * sizeof *keys);
    int rc = -1;
    if (sr && rs && keys) {
        const int nr = seq_runs(b, sr, rs);
        rc = 0;
        for (int k = k_lo; k < k_hi && !rc; k++) rc = piece_candidates(b, g, sp, sr, rs, nr, k, keys, out);
    }
    free(sr), free(rs), free(keys);
    return rc;
}

/* ==== 2. Policy: groups of candidates with the same members ==== */
typedef struct cand_key {
    uint64_t h;
    int c;
} cand_key;

static _Thread_local const cands *g_sort_cands; /* qsort's context (TP ranks are threads) */

static int cmp_cand_key(const void *a, const void *b) {
    const cand_key *x = a, *y = b;
    if (x->h != y->h) return x->h < y->h ? -1 : 1;
    const cands *cs = g_sort_cands;
    const int nx = cs->nm.v[x->c], ny = cs->nm.v[y->c];
    if (nx != ny) return nx < ny ? -1 : 1;
    const int d = memcmp(cs->mem.v + cs->m0.v[x->c], cs->mem.v + cs->m0.v[y->c], (size_t)nx * 4);
    if (d) return d;
    return (x->c > y->c) - (x->c < y->c);
}

static bool same_members(const cands *cs, int a, int b) {
    return cs->nm.v[a] == cs->nm.v[b] &&
           !memcmp(cs->mem.v + cs->m0.v[a], cs->mem.v + cs->m0.v[b], (size_t)cs->nm.v[a] * 4);
}

/* keep[c] for every candidate; fills the plan's policy figures. */
static int apply_policy(const cands *cs, const casc_geom *g, bool *keep, casc_plan *pl) {
    const int nc = (int)cs->k.n;
    cand_key *ck = malloc((size_t)nc * sizeof *ck);
    if (!ck) return -1;
    for (int c = 0; c < nc; c++) {
        uint64_t h = (uint64_t)cs->nm.v[c];
        for (int j = 0; j < cs->nm.v[c]; j++) h = mix64(h, (uint64_t)cs->mem.v[cs->m0.v[c] + j]);
        ck[c] = (cand_key){h, c};
    }
    g_sort_cands = cs;
    qsort(ck, (size_t)nc, sizeof *ck, cmp_cand_key);
    for (int a = 0; a < nc;) {
        int e = a + 1;
        while (e < nc && ck[e].h == ck[a].h && same_members(cs, ck[a].c, ck[e].c)) e++;
        const int64_t keys = (int64_t)(e - a) * g->P, saved = keys * (cs->nm.v[ck[a].c] - 1);
        const bool ok = g->mode == CASC_FORCE || keys >= g->min_shared;
        for (int x = a; x < e; x++) keep[ck[x].c] = ok;
        if (ok) pl->groups++, pl->shared_units += e - a, pl->saved_keys += saved;
        else pl->declined++;
        a = e;
    }
    free(ck);
    return 0;
}

/* ==== 3. Units ==== */
static _Thread_local const int *g_sort_mem; /* qsort's context (TP ranks are threads) */

static int cmp_unit(const void *a, const void *b) {
    const casc_unit *x = a, *y = b;
    if (x->chunk != y->chunk) return x->chunk < y->chunk ? -1 : 1;
    if (x->k != y->k) return x->k < y->k ? -1 : 1;
    const int rx = g_sort_mem[x->m0], ry = g_sort_mem[y->m0];
    return (rx > ry) - (rx < ry);
}

/* The cascade rows: every member of a kept candidate, ascending. */
static int make_rows(casc_plan *pl, const cands *cs, const bool *keep, int n_batch) {
    pl->casc_of = malloc((size_t)n_batch * sizeof(int));
    pl->rows = malloc((size_t)n_batch * sizeof(int));
    if (!pl->casc_of || !pl->rows) return -1;
    for (int i = 0; i < n_batch; i++) pl->casc_of[i] = -1;
    for (int c = 0; c < (int)cs->k.n; c++)
        for (int j = 0; keep[c] && j < cs->nm.v[c]; j++) pl->casc_of[cs->mem.v[cs->m0.v[c] + j]] = 0;
    for (int i = 0; i < n_batch; i++)
        if (pl->casc_of[i] == 0) pl->casc_of[i] = pl->n_rows, pl->rows[pl->n_rows++] = i;
    return 0;
}

/* Appends the unit of piece k with members mem[0..nm) (ascending rows), one unit per chunk
 * they fall in, to the plan's arrays (sized by the caller). Returns the units added. */
static int add_unit(casc_plan *pl, int k, const int *mem, int nm, int *m_next) {
    int added = 0;
    for (int a = 0; a < nm;) {
        const int chunk = pl->casc_of[mem[a]] / pl->chunk_rows;
        int e = a + 1;
        while (e < nm && pl->casc_of[mem[e]] / pl->chunk_rows == chunk) e++;
        if (pl->units) {
            pl->units[pl->n_units++] = (casc_unit){.chunk = chunk, .k = k, .m0 = *m_next, .nm = e - a};
            memcpy(pl->mem + *m_next, mem + a, (size_t)(e - a) * sizeof(int));
        }
        *m_next += e - a, added++;
        a = e;
    }
    return added;
}

/* Kept candidates and (splits > 1) the cascade rows' private pieces, in ascending k. */
static int make_units(casc_plan *pl, const cands *cs, const bool *keep, const row_span *sp,
                      const casc_geom *g) {
    const int nc = (int)cs->k.n;
    /* shared[pc0[ci] + k - first]: piece k of cascade row ci is in a kept unit */
    int64_t *pc0 = malloc(((size_t)pl->n_rows + 1) * sizeof *pc0);
    if (!pc0) return -1;
    pc0[0] = 0;
    for (int ci = 0; ci < pl->n_rows; ci++) {
        const row_span s = sp[pl->rows[ci]];
        pc0[ci + 1] = pc0[ci] + s.last - s.first + 1;
    }
    char *shared = calloc((size_t)pc0[pl->n_rows] + 1, 1);
    int64_t n_units = 0, n_mem = 0;
    for (int c = 0; c < nc && shared; c++) {
        if (!keep[c]) continue;
        int dummy = 0; /* units not allocated yet: add_unit only counts */
        n_units += add_unit(pl, cs->k.v[c], cs->mem.v + cs->m0.v[c], cs->nm.v[c], &dummy);
        n_mem += cs->nm.v[c];
        for (int j = 0; j < cs->nm.v[c]; j++) {
            const int i = cs->mem.v[cs->m0.v[c] + j], ci = pl->casc_of[i];
            shared[pc0[ci] + cs->k.v[c] - sp[i].first] = 1;
        }
    }
    if (g->splits > 1) { /* every other piece of a cascade row: a unit of one */
        const int64_t priv = pc0[pl->n_rows] - n_mem; /* n_mem: the shared memberships */
        n_units += priv, n_mem += priv;
    }
    pl->units = malloc((size_t)(n_units > 0 ? n_units : 1) * sizeof *pl->units);
    pl->mem = malloc((size_t)(n_mem > 0 ? n_mem : 1) * sizeof(int));
    int rc = -1;
    if (!shared || !pl->units || !pl->mem) goto out;
    int m_next = 0;
    for (int c = 0; c < nc; c++)
        if (keep[c]) add_unit(pl, cs->k.v[c], cs->mem.v + cs->m0.v[c], cs->nm.v[c], &m_next);
    for (int ci = 0; g->splits > 1 && ci < pl->n_rows; ci++) {
        const int i = pl->rows[ci];
        for (int k = sp[i].first; k <= sp[i].last; k++)
            if (!shared[pc0[ci] + k - sp[i].first]) add_unit(pl, k, &i, 1, &m_next);
    }
    g_sort_mem = pl->mem;
    qsort(pl->units, (size_t)pl->n_units, sizeof *pl->units, cmp_unit);
    rc = 0;
out:
    free(pc0), free(shared);
    return rc;
}

/* ==== 4. Rounds, offsets, slots ==== */
static int64_t unit_tasks(const casc_unit *u, int Hkv) {
    return (int64_t)((u->nm + CASC_SLICE - 1) / CASC_SLICE) * Hkv;
}

/* The rounds of the chunk whose units are [u0, u1) and cascade rows [ci0, ci1). */
static void chunk_rounds(casc_plan *pl, const row_span *sp, const casc_geom *g, int u0, int u1,
                         int ci0, int ci1) {
    int k_lo = 1 << 30, k_hi = 0;
    for (int ci = ci0; ci < ci1; ci++) {
        const row_span s = sp[pl->rows[ci]];
        k_lo = s.first < k_lo ? s.first : k_lo;
        k_hi = s.last + 1 > k_hi ? s.last + 1 : k_hi;
    }
    casc_round *r = &pl->rounds[pl->n_rounds++];
    *r = (casc_round){.ci0 = ci0, .ci1 = ci1, .k0 = k_lo, .u0 = u0};
    for (int u = u0; u < u1;) {
        /* the units of piece k join the round, or (round not empty, cap passed) open the next */
        const int k = pl->units[u].k;
        int e = u;
        int64_t need = 0;
        while (e < u1 && pl->units[e].k == k) need += (int64_t)pl->units[e++].nm * g->Hkv * g->slot;
        if (r->ws > 0 && r->ws + need > g->ws_cap) {
            r->k1 = k, r->u1 = u;
            r = &pl->rounds[pl->n_rounds++];
            *r = (casc_round){.ci0 = ci0, .ci1 = ci1, .k0 = k, .u0 = u};
        }
        for (; u < e; u++) {
            casc_unit *x = &pl->units[u];
            x->off = r->ws, x->t0 = r->n_tasks;
            r->ws += (int64_t)x->nm * g->Hkv * g->slot;
            r->n_tasks += unit_tasks(x, g->Hkv);
        }
        pl->ws_max = r->ws > pl->ws_max ? r->ws : pl->ws_max;
    }
    r->k1 = k_hi, r->u1 = u1;
}

static int make_rounds(casc_plan *pl, const row_span *sp, const casc_geom *g) {
    pl->rounds = malloc((size_t)(pl->n_units + pl->n_chunks) * sizeof *pl->rounds);
    if (!pl->rounds) return -1;
    for (int u = 0; u < pl->n_units;) { /* units sorted by chunk: each chunk's are contiguous */
        const int c = pl->units[u].chunk;
        int e = u;
        while (e < pl->n_units && pl->units[e].chunk == c) e++;
        const int ci1 = (c + 1) * pl->chunk_rows;
        chunk_rounds(pl, sp, g, u, e, c * pl->chunk_rows, ci1 < pl->n_rows ? ci1 : pl->n_rows);
        u = e;
    }
    return 0;
}

static int make_slots(casc_plan *pl, const casc_geom *g) {
    pl->slot0 = calloc((size_t)pl->n_rows + 1, sizeof(int));
    int *fill = malloc(((size_t)pl->n_rows + 1) * sizeof(int));
    int64_t total = 0;
    for (int u = 0; u < pl->n_units; u++) total += pl->units[u].nm;
    pl->slots = malloc((size_t)(total ? total : 1) * sizeof *pl->slots);
    if (!pl->slot0 || !fill || !pl->slots) {
        free(fill);
        return -1;
    }
    for (int u = 0; u < pl->n_units; u++)
        for (int j = 0; j < pl->units[u].nm; j++) pl->slot0[pl->casc_of[pl->mem[pl->units[u].m0 + j]] + 1]++;
    for (int ci = 0; ci < pl->n_rows; ci++) pl->slot0[ci + 1] += pl->slot0[ci];
    memcpy(fill, pl->slot0, ((size_t)pl->n_rows + 1) * sizeof(int));
    for (int u = 0; u < pl->n_units; u++) { /* units in ascending k: each row's slots too */
        const casc_unit *x = &pl->units[u];
        for (int j = 0; j < x->nm; j++)
            pl->slots[fill[pl->casc_of[pl->mem[x->m0 + j]]]++] =
                (casc_slot){x->k, x->off + (int64_t)j * g->slot, (int64_t)x->nm * g->slot};
    }
    free(fill);
    return 0;
}

/* ==== Driver ==== */
void casc_plan_free(casc_plan *pl) {
    free(pl->rows), free(pl->casc_of), free(pl->slot0), free(pl->slots);
    free(pl->units), free(pl->mem), free(pl->rounds);
    memset(pl, 0, sizeof *pl);
}

int casc_plan_build(casc_plan *pl, const mx_attn_batch *b, const casc_geom *g) {
    memset(pl, 0, sizeof *pl);
    const int n = b->n_rows;
    if (g->mode == CASC_OFF || n < 2) return 0;
    row_span *sp = malloc((size_t)n * sizeof *sp);
    cands cs = {0};
    bool *keep = NULL;
    int rc = -1;
    if (!sp) goto out;
    for (int i = 0; i < n; i++) sp[i] = span_of(b, g, i);
    if (find_candidates(b, g, sp, &cs)) goto out;
    rc = 0;
    if (cs.k.n == 0) goto out;
    rc = -1;
    if (!(keep = malloc((size_t)cs.k.n * sizeof *keep)) || apply_policy(&cs, g, keep, pl)) goto out;
    rc = 0;
    if (pl->groups == 0) goto out;
    rc = -1;
    if (make_rows(pl, &cs, keep, n)) goto out;
    /* chunks: a piece of every row of one fits a quarter of the workspace (so a round holds
       several pieces) and their running states fit state_cap */
    const int64_t per_row = (int64_t)g->Hkv * g->slot;
    int64_t R = (g->state_cap < g->ws_cap / 4 ? g->state_cap : g->ws_cap / 4) / per_row;
    R = R < CASC_SLICE ? CASC_SLICE : R;
    pl->chunk_rows = (int)(R < pl->n_rows ? R : pl->n_rows);
    pl->n_chunks = (pl->n_rows + pl->chunk_rows - 1) / pl->chunk_rows;
    if (make_units(pl, &cs, keep, sp, g) || make_rounds(pl, sp, g) || make_slots(pl, g)) goto out;
    rc = 0;
out:
    if (rc || pl->n_units == 0) { /* nothing to run (the policy figures stay for the log) */
        const int groups = pl->groups, declined = pl->declined;
        casc_plan_free(pl);
        if (!rc) pl->groups = groups, pl->declined = declined;
    }
    free(sp), free(keep);
    cands_free(&cs);
    return rc;
}
