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

#ifdef __cplusplus
}
#endif

#endif
