/* Cascade attention plan of the CPU backend (cpu_cascade.c; run by cpu_attention.c).
 *
 * A piece of keys (cpu_attention.c: piece k = keys [k P, (k + 1) P)) that is full for several
 * rows of a step (cut neither by a row's window start nor by its position) and that maps to the
 * same physical KV rows for all of them (the same block ids for the blocks covering it: a
 * prefix-cache hit, or the rows of one prefill chunk) holds identical K/V for those rows. Such a
 * piece is a *shared unit*: one task walks its keys once and applies each key to every member
 * row's online-softmax state, so the K/V are read once per group instead of once per row. Each
 * row's value is unchanged to the bit: a member's partial is the one its own pass would make,
 * and every row still merges its partials in ascending piece order.
 *
 * The plan only decides who shares what; it does no arithmetic. It is a pure function of the
 * batch's positions, sequences and block tables, the piece length, the window and the policy. */
#ifndef MLXCEL_BACKEND_CPU_CASCADE_H
#define MLXCEL_BACKEND_CPU_CASCADE_H

#include <stdint.h>

#include "backend/backend.h"

typedef enum { CASC_OFF = 0, CASC_AUTO, CASC_FORCE } casc_mode;

typedef struct casc_geom {
    int P;            /* keys per piece */
    int window;       /* mx_attn_params.window (0 = none) */
    int chunk;        /* mx_attn_params.chunk (0 = none): cuts a row's start like the window */
    int Hkv;          /* kv heads of this call */
    int64_t slot;     /* floats of one partial slot (a partial padded to whole cache lines) */
    int splits;       /* the call's split count: > 1 also makes the cascade rows' private
                         pieces tasks of their own (spread over threads) */
    casc_mode mode;
    int min_shared;   /* CASC_AUTO: a group is kept when its rows share at least this many keys */
    int64_t ws_cap;   /* workspace floats a round aims to stay under */
    int64_t state_cap; /* running-state floats of a chunk of cascade rows at most */
} casc_geom;

/* One piece computed by the compute phase: a shared unit (nm >= 2 rows, a full piece) or, with
 * splits > 1, one private piece of a cascade row (nm = 1, cut like the row's own piece). */
typedef struct casc_unit {
    int chunk;        /* its rows' chunk (members of one chunk only) */
    int k;            /* absolute piece index */
    int m0, nm;       /* member rows: plan.mem[m0 .. m0 + nm), ascending batch rows */
    int64_t off;      /* its partials in the round's workspace: member j, kv head h at
                         off + (h * nm + j) * slot (a task's members are contiguous) */
    int64_t t0;       /* its first compute task within the round */
} casc_unit;

/* The cascade rows are cut into chunks (plan.chunk_rows rows: their running states fit
 * state_cap; a group spanning chunks reads its K/V once per chunk). Each chunk's rounds go
 * through its rows' pieces in ascending order, [k0, k1) each, so that the partials of a round
 * fit the workspace (a piece of every row of the chunk fits by construction); rows fold them
 * into a running state kept across the rounds, in the order a lone row would. */
typedef struct casc_round {
    int ci0, ci1;     /* the chunk's cascade rows */
    int k0, k1;
    int u0, u1;       /* its units */
    int64_t n_tasks;  /* compute tasks (member slices x kv heads) */
    int64_t ws;       /* workspace floats */
} casc_round;

/* Where a cascade row finds the partial of one of its computed pieces: kv head h at
 * ws + off + h * hst. */
typedef struct casc_slot {
    int k;
    int64_t off, hst;
} casc_slot;

typedef struct casc_plan {
    /* what the policy decided (log, test hook) */
    int groups;       /* kept groups (rows sharing a set of pieces) */
    int declined;     /* candidate groups below the floor */
    int shared_units; /* shared pieces kept (a piece shared by several groups counts per group) */
    int64_t saved_keys; /* key reads per kv head saved: sum over units of (nm - 1) * P */
    /* the cascade rows (>= 1 shared piece); the others take cpu_attention's plain path */
    int n_rows;
    int *rows;        /* [n_rows] batch rows, ascending */
    int *casc_of;     /* [batch rows] index into rows, or -1 */
    int *slot0;       /* [n_rows + 1]: cascade row ci's slots are slots[slot0[ci] .. slot0[ci + 1]) */
    casc_slot *slots; /* per row ascending k */
    int n_units, n_rounds;
    casc_unit *units; /* ascending k */
    int *mem;
    casc_round *rounds;
    int64_t ws_max;   /* the largest round's workspace (floats) */
    int chunk_rows;   /* cascade rows a chunk at most (running states: chunk_rows x Hkv slots) */
    int n_chunks;
} casc_plan;

/* Member rows per compute task: a slice reads the piece's K/V once for all its rows; slices
 * spread one large group (a prefill chunk) over threads. */
#define CASC_SLICE 32

/* Builds the plan (pl zeroed first). Returns 0 (pl->n_rows may be 0: nothing shared or
 * declined) or -1 when out of memory (pl empty: the plain path runs, the same bits). */
int casc_plan_build(casc_plan *pl, const mx_attn_batch *b, const casc_geom *g);
void casc_plan_free(casc_plan *pl);

#endif
