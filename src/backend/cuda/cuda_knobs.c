/* The CUDA quantized kernels' run-time launch parameters (cuda_qknobs.h) as value lists for
 * the environment parser: MLXCEL_QMV_MULTIROW / MLXCEL_QMM_TILE_M accept exactly these. Plain
 * C, compiled into every build (a CPU-only build too, CMakeLists.txt): the variables are read
 * and checked the same way whether or not this build can launch the kernels, and base/env.c
 * includes nothing of the backend. */
#include <pthread.h>

#include "backend/cuda/cuda_qknobs.h"
#include "base/env.h"

static const int k_multirow[CUDA_QMV_MULTIROW_COUNT] = CUDA_QMV_MULTIROW_VALUES;
static const int k_tile_m[CUDA_QMM_TILE_COUNT] = CUDA_QMM_TILE_VALUES;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void reg(void) {
    mx_env_register_choices(&(mx_env_choices){"MLXCEL_QMV_MULTIROW", k_multirow, CUDA_QMV_MULTIROW_COUNT});
    mx_env_register_choices(&(mx_env_choices){"MLXCEL_QMM_TILE_M", k_tile_m, CUDA_QMM_TILE_COUNT});
}

void cuda_knobs_register(void) { pthread_once(&g_once, reg); }
