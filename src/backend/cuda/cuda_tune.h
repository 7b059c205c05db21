/* The CUDA side of `mlxcel tune`: profiles CUDA matrix points on synthetic device data.
 * Host C with plain types only (no CUDA headers), so src/tune/tune_runner.c can call it when
 * the build has the CUDA backend (MLXCEL_HAVE_CUDA).
 *
 * Timing: one run of a candidate is a batch of L launches on the tuner's own stream between
 * two CUDA events; the profiler's clock is the accumulated event time, and sync() waits for
 * the batch's end event (a device sync per run). L is chosen per point so that a batch of the
 * default takes ~200 us (event resolution and launch jitter become noise); the same L holds
 * for every candidate of the point, and the statistics handed back are per launch. The
 * synthetic data comes in R replicas, launch i using replica i % R, so that a small point's
 * working set (R x its bytes, >= 256 MiB when memory allows) does not sit in the 50 MiB L2
 * as it never does in a real decode step, where the layer's weights stream in between. */
#ifndef MLXCEL_BACKEND_CUDA_TUNE_H
#define MLXCEL_BACKEND_CUDA_TUNE_H

#include <stdbool.h>

#include "base/error.h"
#include "tune/tune_ops.h"
#include "tune/tune_profile.h"

/* Whether this build can profile `op` on CUDA: paged-decode-splits (attn_decode.cu), qmm-tile
 * and qmv-multirow (qmm.cu / qgemv.cu through cuda_tune_qmat.h). why (may be NULL) receives
 * the reason when not (an op this file does not know). */
bool cuda_tune_op_available(tune_op op, const char **why);

/* Profiles p on device 0, which must be the device dev names (a record is only valid for the
 * device it was measured on). res holds per-launch statistics. 0, or -1 with err. */
int cuda_tune_run_point(const tune_point *p, const tune_device *dev, const tune_geom *g,
                        const tune_profile_opts *o, tune_profile_result *res, mx_error *err);

/* ==== Shared by the op benches (cuda_tune_attn.c, cuda_tune_qmat.c) ==== */
/* Launches per timed run for a single launch of cost one_s seconds (1..64). */
int cuda_tune_batch_launches(double one_s);
/* Replicas of a bytes-sized working set so that R x bytes >= 256 MiB, at most max_r, and
 * within half of the free device memory. */
int cuda_tune_replicas(double bytes, int max_r, double free_bytes);
/* Divides the per-run statistics of res by the launches per run. */
void cuda_tune_per_launch(tune_profile_result *res, int launches);
/* ||out - ref|| / ||ref|| over n floats (0 when both are 0). */
double cuda_tune_rel_err(const float *out, const float *ref, size_t n);
/* Fills n bf16 values (raw bits) / floats in [-amp, amp) from a seed (host). */
void cuda_tune_fill_bf16(uint16_t *dst, size_t n, float amp, uint64_t seed);
void cuda_tune_fill_f32(float *dst, size_t n, float amp, uint64_t seed);

/* paged-decode-splits (cuda_tune_attn.c) */
int cuda_tune_attn_point(const tune_point *p, const tune_geom *g, const tune_profile_opts *o,
                         tune_profile_result *res, mx_error *err);
/* qmm-tile / qmv-multirow (cuda_tune_qmat.c) */
int cuda_tune_qmat_point(const tune_point *p, const tune_geom *g, const tune_profile_opts *o,
                         tune_profile_result *res, mx_error *err);

#endif
