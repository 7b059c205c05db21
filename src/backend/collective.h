/* Collectives for tensor parallelism (docs/tensor-parallel.md): the ranks of one model call the
 * same op in the same order, each with its own tensors; the op returns when every rank's
 * result is in place.
 *
 * Implementations:
 * - CPU (collective_cpu.c): N threads of one process; shared memory + barriers. Sums run in a
 *   fixed order, rank 0 first then 1..N-1, so results are deterministic run to run.
 * - NCCL (collective_nccl.c, CUDA builds): N threads of one process, one GPU each; ops are
 *   enqueued on the calling rank's stream (no host wait). Sums follow NCCL's ring / tree order,
 *   not rank order: identical on every rank and repeatable for one NCCL version and topology,
 *   but not bit-equal to the CPU collective. */
#ifndef MLXCEL_BACKEND_COLLECTIVE_H
#define MLXCEL_BACKEND_COLLECTIVE_H

#include "backend/backend.h"

typedef struct mx_collective mx_collective;
struct mx_collective {
    const char *name;
    int size;   /* number of ranks */
    /* x [numel] f32 on every rank: x = sum over ranks (rank order 0..N-1). */
    int (*all_reduce_sum)(mx_collective *c, int rank, mx_tensor *x, mx_error *err);
    /* Each rank's in [rows, w_r] f32 lands in columns [col0_r, col0_r + w_r) of every rank's
     * out [rows, W] (the ranks' column blocks tile W). */
    int (*all_gather_cols)(mx_collective *c, int rank, mx_tensor *out, const mx_tensor *in,
                           int64_t col0, mx_error *err);
    void (*destroy)(mx_collective *c);
    void *impl;
};

/* CPU: `size` ranks as threads of this process (size >= 1). */
mx_collective *mx_collective_cpu_new(int size, mx_error *err);

/* NCCL (CUDA builds only; MLXCEL_HAVE_CUDA): rank r drives GPU devices[r] from a thread bound
 * to it (backend_ops.bind_device). Creates the communicators (ncclCommInitAll, NVLink
 * multicast off) and every device's backend state; libnccl.so.2 is dlopened here. */
mx_collective *mx_collective_nccl_new(int size, const int *devices, mx_error *err);

#endif
