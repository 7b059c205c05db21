#ifndef MLXCEL_BACKEND_CUDA_INFO_H
#define MLXCEL_BACKEND_CUDA_INFO_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cuda_device_facts {
    char name[256];
    int cc_major, cc_minor;
    int sm_count;
    size_t free_bytes, total_bytes;
} cuda_device_facts;

/* Device 0's facts; -1 when no usable GPU (no driver, no device). Never aborts. */
int cuda_device_info(cuda_device_facts *out);
/* Device `dev`'s facts (free/total bytes of the calling thread's current device, which the
 * backend sets to `dev` first); -1 when that device does not exist. */
int cuda_device_info_of(int dev, cuda_device_facts *out);
/* Visible CUDA devices (0 without a driver). */
int cuda_device_count(void);
/* Largest device ordinal the per-device caches of the kernel launchers hold (tensor
 * parallelism: one thread per GPU). */
#define CUDA_MAX_DEVICES 16
/* The calling thread's current device, clamped to [0, CUDA_MAX_DEVICES): index of the
 * launchers' per-device caches (SM counts, cudaFuncSetAttribute done flags). */
int cuda_cur_device(void);
/* SMs of the current device (cached per device; 132 if the query fails): grid sizing. */
int cuda_sm_count(void);

/* Programmatic dependent launch (compute capability >= 9.0): decode kernels may start while
 * their predecessor finishes (see cuda_kernels.cuh). On unless MLXCEL_CUDA_PDL=0 (set by the backend at start). */
void cuda_set_pdl(int on);
int cuda_pdl_enabled(void);

/* L2 prefetch budget of a GEMV CTA (bytes of its weight block requested before its PDL wait,
 * so the weight stream starts while the previous kernel finishes); MLXCEL_GEMV_PREFETCH_KB. */
void cuda_set_gemv_prefetch(int bytes);
int cuda_gemv_prefetch(void);
/* K split of the 1..2-row CUDA-core GEMV (warps sharing a row group): 1, 2 or 4; 0 = chosen
 * per shape (MLXCEL_GEMV_KSPLIT). */
void cuda_set_gemv_ksplit(int ks);
int cuda_gemv_ksplit(void);
/* 1..2-row GEMV: its first weight batch is loaded before the PDL wait (MLXCEL_GEMV_EARLY,
 * default on). */
void cuda_set_gemv_early(int on);
int cuda_gemv_early(void);
/* 1..2-row GEMV: at most one wave of CTAs, each walking several row tiles with x staged (and
 * normalised) once (MLXCEL_GEMV_PERSIST, default off). 0: off, 1: one wave, n > 1: at most n
 * CTAs (the tests: many tiles a CTA). */
void cuda_set_gemv_persist(int n);
int cuda_gemv_persist(void);
/* Decode attention: split counts 2..n merge inside one thread-block cluster (distributed
 * shared memory) instead of through global partials; 0 = never (MLXCEL_ATTN_CLUSTER,
 * default 16, at most 16). */
void cuda_set_attn_cluster(int n);
int cuda_attn_cluster(void);
/* Decode attention: chunks a warp keeps in flight through its shared-memory ring, 1..3 (1: it
 * copies one chunk and waits for it before computing); MLXCEL_ATTN_STAGES, default 3. */
void cuda_set_attn_stages(int n);
int cuda_attn_stages(void);
/* Decode attention's first KV chunks copied before its PDL wait (the engine's decode step,
 * cuda_paged_attn_args.kv_settled); MLXCEL_ATTN_EARLY_KV. */
void cuda_set_attn_early_kv(int on);
int cuda_attn_early_kv(void);
/* Decode attention on the tensor cores (q and P as bf16 hi + lo MMA rows); MLXCEL_ATTN_TC,
 * default 1 (B=32 8B e2e +4.9%, 8K-token attention 1.3-1.4x; session 12). */
void cuda_set_attn_tc(int on);
int cuda_attn_tc(void);

#ifdef __cplusplus
}
#endif

#endif
