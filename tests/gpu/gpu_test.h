/* GPU test binary (tests/gpu): every CUDA backend op against the CPU op on fresh random
 * inputs, and the tiny checkpoints end to end (CUDA tokens vs CPU tokens). Built only with
 * MLXCEL_CUDA=ON, never registered with CTest (CI has no GPU); bench/run_device.sh runs it.
 * Every problem is a counted failure (gt_report): a failed launch, load, engine creation,
 * submit or run, a fixture directory that is missing, a run without the source dir, and a run
 * that checked nothing; only the CPU-only families of gpu_e2e.c's k_cpu_only may be refused.
 *
 * Tolerances (relative L2 unless said otherwise) and the worst value measured under each in
 * the last full log of this binary (bench/results/2026-12-03-test-cuda-rows2.log, H200,
 * 1,060 checks, 1 failed: the bf16-x defect of the e2e line; the later run of
 * 2026-12-05-session25.md: 1,488 checks, 0 failed):
 *   0 (bitwise)   199 checks, all 0   the same arithmetic in the same order (fused vs split
 *                                     steps, device greedy vs host greedy)
 *   1e-6 / 1e-7   16 checks, <= 4.8e-8  elementwise fp32 both sides (softcap, embed scale)
 *   1e-5 / 2e-5   33 checks, <= 4.9e-7  fp32 reductions in another order (norms, MoE sums)
 *   3e-5          19 checks, <= 6.4e-7  GEMV with fp32 x (K split)
 *   1e-4          103 checks, <= 1.0e-6 attention / tensor-core GEMV sums in another order
 *   1e-3          6 checks, <= 3.9e-7   tuner candidates against the default
 *   1e-2          36 checks, <= 3.0e-3  an operand rounded to bf16 (cuBLASLt input, bf16 KV,
 *                                     flash attention's bf16 MMAs)
 *   1 (ratio)     566 checks, <= 0.89   quantized kernels: |cuda - cpu| over the error bound
 *                                     derived for that kernel (gpu_quant.c), not a guess
 *   e2e           gpu_e2e.c's header: near-tie margin 2e-2 (benign divergences 2.5e-4 ..
 *                 5.4e-3, the one defect 8.06e-2), logits 3e-2 (measured <= 1.14e-2) */
#ifndef MLXCEL_TESTS_GPU_TEST_H
#define MLXCEL_TESTS_GPU_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"

extern const backend_ops *g_cpu, *g_gpu;
extern int g_failures, g_checks;
extern uint64_t g_rng;

/* Records one check: prints "ok"/"FAIL" with the relative error and the tolerance. */
void gt_report(const char *what, double rel, double tol, long nan_count);
void gt_report_err(const char *what, double rel, double tol, const long *nan_count);
/* ||a - ref|| / ||ref|| (float64), and the number of non-finite values of a. */
double gt_rel_err(const float *a, const float *ref, size_t n, long *nan_count);
float gt_randn(void);
void gt_fill(float *x, size_t n, float scale);
uint16_t *gt_bf16(const float *x, size_t n);         /* malloc'd bf16 copy */
void gt_round_bf16(float *x, size_t n);              /* in place: x = bf16(x) */

/* Device tensors for the CUDA side. */
mx_tensor gt_dev_f32(const float *host, int ndim, const int64_t *shape); /* copy of host */
mx_tensor gt_dev_poison(int ndim, const int64_t *shape);                /* NaN-filled */
mx_tensor gt_dev_weight(const uint16_t *bf, int ndim, const int64_t *shape);
float *gt_pool_to_host(const void *d, size_t n, bool bf16); /* KV pool (bf16 / fp32) as floats */
void gt_to_host(float *dst, const mx_tensor *t);
void gt_dev_free(mx_tensor *t);

int gt_run_op_tests(void);        /* gpu_ops.c, gpu_attn.c */
int gt_run_attn_tests(void);
int gt_run_e2e_tests(const char *src_dir); /* gpu_e2e.c */
int gt_run_tune_tests(void);      /* gpu_tune.c */
/* One checkpoint directory end to end: CUDA greedy tokens vs CPU greedy tokens. */
void gt_e2e_fixture(const char *dir, const char *name);
/* A quantized checkpoint on CUDA loaded with its weights repacked (MLXCEL_QMV_TILED) and not:
 * the same tokens and first logits, bitwise when `bitwise` (4-bit: the kernels do the same
 * arithmetic on either layout), else tokens where margins allow and logits within 1e-3. */
void gt_e2e_tiled(const char *dir, const char *name, bool bitwise);
/* gpu_quant.c: quantized kernels vs the CPU reference; quantized fixtures end to end when
 * src_dir is given. */
int gt_run_quant_tests(const char *src_dir);

#endif
