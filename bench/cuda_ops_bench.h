/* Shared harness of cuda_ops_bench: checked CUDA calls, device random fills, event timing,
 * and the result table. Used by cuda_ops.cu (main, GEMV, cuBLASLt) and
 * cuda_ops_small.cu (RMSNorm, RoPE + KV write, attention, argmax). */
#ifndef MLXCEL_BENCH_CUDA_OPS_BENCH_H
#define MLXCEL_BENCH_CUDA_OPS_BENCH_H

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Every CUDA call is checked; a failure here is a harness bug or a broken device: abort. */
#define CK(call)                                                                        \
    do {                                                                                \
        cudaError_t ck_e_ = (call);                                                     \
        if (ck_e_ != cudaSuccess) {                                                     \
            fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #call,             \
                    cudaGetErrorString(ck_e_));                                         \
            exit(2);                                                                    \
        }                                                                               \
    } while (0)
/* Launchers return a cudaError_t as int; check it and the sticky error after the launch. */
#define CKL(call)                                                                       \
    do {                                                                                \
        int ckl_e_ = (call);                                                            \
        if (ckl_e_ != 0) {                                                              \
            fprintf(stderr, "%s:%d: %s -> %d (%s)\n", __FILE__, __LINE__, #call, ckl_e_, \
                    cudaGetErrorString((cudaError_t)ckl_e_));                           \
            exit(2);                                                                    \
        }                                                                               \
        CK(cudaGetLastError());                                                         \
    } while (0)

/* ==== Global state ==== */
extern cudaStream_t g_stream;
extern double g_copy_gbs;  /* measured D2D copy bandwidth, read + write, GB/s */
extern int g_sm_count;
extern int g_fail;         /* number of failed checks */
extern FILE *g_log;        /* full log (also stdout) */

void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ==== Data ==== */
/* Uniform in [-scale, scale), from a hash of (seed, index): fresh per seed, on the device. */
void fill_bf16(uint16_t *p, size_t n, uint64_t seed, float scale);
void fill_f32(float *p, size_t n, uint64_t seed, float scale);
/* 0xFF bytes: NaN in both fp32 and bf16, so unwritten outputs show as NaN. */
void poison(void *p, size_t bytes);
uint64_t next_seed(void);
void *dmalloc(size_t bytes);
/* A cuBLASLt handle and a 32 MiB device workspace for it (exits on failure). */
void lt_open(cublasLtHandle_t *lt, void **ws, size_t *ws_bytes);
/* Device -> new host buffer; widened to double. */
double *d2h_f64(const void *d, size_t n, int is_bf16);
void *d2h(const void *d, size_t bytes);

/* ==== Timing ==== */
/* Enqueues one repetition; rep selects the input set (rotation so L2 cannot serve repeats). */
typedef void (*bench_fn)(void *ctx, int rep);
typedef struct timing {
    double med_us, min_us;
} timing;
timing bench_time(bench_fn fn, void *ctx, int warmup, int reps);

/* ==== Results ==== */
/* status: 0 ok, 1 FAIL; rel < 0 means "not checked here". */
void result_add(const char *op, const char *shape, timing t, double bytes, double rel, int fail);
void result_print_table(void);
/* Records a correctness check: prints it, counts a failure. Returns fail (0/1). */
int check_report(const char *what, double rel, double max_abs, size_t n_nan, double tol);

/* ==== Suites (cuda_ops_small.cu) ==== */
void suite_rmsnorm(void);
void suite_rope(void);
void suite_attention(void);
void suite_argmax(void);
/* ==== Suite qmv (cuda_ops_qmv.cu) ==== */
void suite_qmv(void);
/* ==== Suite stream (cuda_ops_stream.cu): weight reads by access pattern ==== */
void suite_stream(void);
/* ==== Suite gemvtc (cuda_ops_gemvtc.cu) ==== */
void suite_gemvtc(void);

#endif
