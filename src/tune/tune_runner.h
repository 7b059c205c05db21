/* Runs one matrix point: builds the op's synthetic inputs, profiles its candidates and turns
 * the result into a record. Shared by `mlxcel tune` and tuning on first use. */
#ifndef MLXCEL_TUNE_RUNNER_H
#define MLXCEL_TUNE_RUNNER_H

#include <stdbool.h>

#include "tune/tune_ops.h"
#include "tune/tune_profile.h"
#include "tune/tune_store.h"

/* Whether this build can profile ops on the device kind (CPU: yes; CUDA: when built with the
 * CUDA backend). */
bool tune_can_profile(tune_device_kind kind);
/* Whether `op` can be profiled on `kind` by this build (CUDA qmm-tile / qmv-multirow need the
 * quantized kernels connected); why (may be NULL) receives the reason when not. */
bool tune_op_available(tune_op op, tune_device_kind kind, const char **why);

/* Element type of the op's data on the device ("f32" on the CPU, "bf16" on CUDA). */
const char *tune_point_dtype(const tune_point *p, const tune_device *dev);
void tune_point_key(const tune_point *p, const tune_device *dev, tune_key *k);

/* Profiles p on dev and fills res and rec (rec->value = the selected candidate). On CUDA the
 * timings are per launch (CUDA events around a batch of launches, see cuda_tune.h). */
int tune_run_point(const tune_point *p, const tune_device *dev, const tune_geom *g,
                   const tune_profile_opts *o, tune_profile_result *res, tune_record *rec,
                   mx_error *err);

#endif
