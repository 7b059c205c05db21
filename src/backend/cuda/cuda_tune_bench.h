/* What the CUDA op benches (cuda_tune_attn.c, cuda_tune_qmat.c) share beyond cuda_tune.h:
 * the error check and the timed launch batch (one stream, an event before and after the
 * batch, the accumulated event time as the profiler's clock). Includes the CUDA runtime
 * header, so only the benches and cuda_tune.c include it (cuda_tune.h stays plain C for
 * src/tune/). */
#ifndef MLXCEL_BACKEND_CUDA_TUNE_BENCH_H
#define MLXCEL_BACKEND_CUDA_TUNE_BENCH_H

#include <cuda_runtime_api.h>
#include <stdbool.h>

#include "backend/cuda/cuda_tune.h"

/* 0 when e is cudaSuccess; otherwise clears the sticky error and fails err with
 * "CUDA tuner: <what>: <CUDA's message>". */
int cuda_tune_ck(cudaError_t e, const char *what, mx_error *err);

typedef struct cuda_tune_timer {
    cudaStream_t st;       /* the tuner's own non-blocking stream */
    cudaEvent_t ev0, ev1;  /* recorded before / after each run's batch of launches */
    bool st_ok, ev0_ok, ev1_ok;
    double gpu_s;          /* accumulated event time (the profiler's clock) */
} cuda_tune_timer;

/* Creates the stream and both events in t (zeroed by the caller). 0, or -1 with err; what
 * was made is released by cuda_tune_timer_free. */
int cuda_tune_timer_init(cuda_tune_timer *t, mx_error *err);
/* Waits for the stream, then destroys what init made; a zeroed timer is fine. */
void cuda_tune_timer_free(cuda_tune_timer *t);
/* Records ev0 / ev1 on the stream around a batch. 0, or -1 with err. */
int cuda_tune_timer_begin(cuda_tune_timer *t, mx_error *err);
int cuda_tune_timer_end(cuda_tune_timer *t, mx_error *err);
/* Waits for ev1 and adds the ev0 -> ev1 time to gpu_s. 0, or -1 with err. */
int cuda_tune_timer_sync(cuda_tune_timer *t, mx_error *err);

/* Launches per timed run (*L, which c->run reads): times one launch of c->value after two
 * warm ones, then cuda_tune_batch_launches of that, at least R (every replica in each run).
 * t is the timer c->run / c->sync use. 0, or -1 with err. */
int cuda_tune_calibrate(const tune_candidate *c, cuda_tune_timer *t, int R, int *L,
                        mx_error *err);

#endif
