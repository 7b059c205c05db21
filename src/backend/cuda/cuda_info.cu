/* Device facts for the host side (memory estimate, start-up lines). */
#include <cuda_runtime.h>
#include <stdio.h>

#include "backend/cuda/cuda_info.h"

extern "C" int cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
        cudaGetLastError(); /* clear the sticky "no device" error */
        return 0;
    }
    return n;
}

extern "C" int cuda_cur_device(void) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 0;
    return dev >= 0 && dev < CUDA_MAX_DEVICES ? dev : 0;
}

extern "C" int cuda_sm_count(void) {
    static int s_sms[CUDA_MAX_DEVICES]; /* per device: one thread per GPU under TP */
    const int cd = cuda_cur_device();
    if (!s_sms[cd]) {
        int sms = 0;
        if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, cd) != cudaSuccess ||
            sms < 1)
            return 132;
        s_sms[cd] = sms;
    }
    return s_sms[cd];
}

extern "C" int cuda_device_info(cuda_device_facts *out) { return cuda_device_info_of(0, out); }

extern "C" int cuda_device_info_of(int dev, cuda_device_facts *out) {
    const int n = cuda_device_count();
    if (n <= 0 || dev < 0 || dev >= n) return -1;
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) return -1;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return -1;
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    out->sm_count = p.multiProcessorCount;
    out->free_bytes = free_b;
    out->total_bytes = total_b;
    return 0;
}

/* Programmatic dependent launch for the decode kernels (set once at backend start). */
static int g_pdl = 0;
extern "C" void cuda_set_pdl(int on) { g_pdl = on; }
extern "C" int cuda_pdl_enabled(void) { return g_pdl; }

/* Bytes of each weight block a GEMV CTA asks L2 for before its dependency wait (set once). */
static int g_gemv_prefetch = 0;
extern "C" void cuda_set_gemv_prefetch(int bytes) { g_gemv_prefetch = bytes < 0 ? 0 : bytes; }
extern "C" int cuda_gemv_prefetch(void) { return g_gemv_prefetch; }
static int g_attn_cluster = 16;
extern "C" void cuda_set_attn_cluster(int n) { g_attn_cluster = n < 0 ? 0 : n > 16 ? 16 : n; }
extern "C" int cuda_attn_cluster(void) { return g_attn_cluster; }
static int g_attn_stages = 3;
extern "C" void cuda_set_attn_stages(int n) { g_attn_stages = n < 1 ? 1 : n > 3 ? 3 : n; }
extern "C" int cuda_attn_stages(void) { return g_attn_stages; }
static int g_attn_early_kv = 1;
extern "C" void cuda_set_attn_early_kv(int on) { g_attn_early_kv = on != 0; }
extern "C" int cuda_attn_early_kv(void) { return g_attn_early_kv; }
static int g_attn_tc = 1; /* the backend sets it from MLXCEL_ATTN_TC and the device */
extern "C" void cuda_set_attn_tc(int on) { g_attn_tc = on != 0; }
extern "C" int cuda_attn_tc(void) { return g_attn_tc; }
static int g_gemv_ksplit = 0;
extern "C" void cuda_set_gemv_ksplit(int ks) {
    g_gemv_ksplit = ks == 1 || ks == 2 || ks == 4 ? ks : 0;
}
extern "C" int cuda_gemv_ksplit(void) { return g_gemv_ksplit; }
static int g_gemv_early = 1; /* the backend sets MLXCEL_GEMV_EARLY at start */
extern "C" void cuda_set_gemv_early(int on) { g_gemv_early = on != 0; }
extern "C" int cuda_gemv_early(void) { return g_gemv_early; }
static int g_gemv_persist = 0; /* the backend sets MLXCEL_GEMV_PERSIST at start */
extern "C" void cuda_set_gemv_persist(int n) { g_gemv_persist = n < 0 ? 0 : n; }
extern "C" int cuda_gemv_persist(void) { return g_gemv_persist; }
