/* Tensor descriptor helpers and backend lookup. */
#include "backend/backend.h"

#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_qknobs.h" /* plain C, every build: cuda_knobs_register */
#ifdef MLXCEL_HAVE_CUDA
#include "backend/cuda/cuda_info.h" /* the seam dispatches to its backends */
#endif

/* ==== Descriptors ==== */
static void tensor_fill_strides(mx_tensor *t) {
    int64_t s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        t->stride[d] = s;
        s *= t->shape[d];
    }
}

mx_tensor mx_tensor_1d(void *data, mx_dtype t, int64_t n0, mx_device dev) {
    mx_tensor r = {.data = data, .dtype = t, .ndim = 1, .shape = {n0}, .device = dev};
    tensor_fill_strides(&r);
    return r;
}

mx_tensor mx_tensor_2d(void *data, mx_dtype t, int64_t n0, int64_t n1, mx_device dev) {
    mx_tensor r = {.data = data, .dtype = t, .ndim = 2, .shape = {n0, n1}, .device = dev};
    tensor_fill_strides(&r);
    return r;
}

mx_tensor mx_tensor_3d(void *data, mx_dtype t, int64_t n0, int64_t n1, int64_t n2, mx_device dev) {
    mx_tensor r = {.data = data, .dtype = t, .ndim = 3, .shape = {n0, n1, n2}, .device = dev};
    tensor_fill_strides(&r);
    return r;
}

mx_tensor mx_tensor_index(const mx_tensor *t, int64_t i) {
    mx_tensor r = *t;
    r.data = t->data ? (char *)t->data + (size_t)(i * t->stride[0]) * mx_dtype_size(t->dtype) : NULL;
    for (int d = 1; d < t->ndim; d++) {
        r.shape[d - 1] = t->shape[d];
        r.stride[d - 1] = t->stride[d];
    }
    r.ndim = t->ndim - 1;
    return r;
}

mx_tensor mx_tensor_rows(const mx_tensor *t, int64_t r0, int64_t n) {
    mx_tensor r = *t;
    r.data = t->data ? (char *)t->data + (size_t)(r0 * t->stride[0]) * mx_dtype_size(t->dtype) : NULL;
    r.shape[0] = n;
    return r;
}

int64_t mx_tensor_numel(const mx_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

size_t mx_tensor_nbytes(const mx_tensor *t) {
    return (size_t)mx_tensor_numel(t) * mx_dtype_size(t->dtype);
}

bool mx_tensor_present(const mx_tensor *t) { return t && t->data != NULL; }

/* ==== Lookup ==== */
const char *backend_device_name(mx_device dev) { return dev == MX_DEV_CUDA ? "cuda" : "cpu"; }

const backend_ops *backend_get(mx_device dev, mx_error *err) {
    /* the CUDA knobs' value lists check their variables in every build, as they always have */
    cuda_knobs_register();
    if (dev == MX_DEV_CPU) return backend_cpu();
#ifdef MLXCEL_HAVE_CUDA
    return backend_cuda(err);
#else
    mx_fail(err, "this build has no CUDA backend (configure with nvcc present, -DMLXCEL_CUDA=ON; "
                 "or use --device cpu)");
    return NULL;
#endif
}

int backend_device_facts(mx_device dev, mx_device_facts *out, mx_error *err) {
    memset(out, 0, sizeof *out);
    if (dev != MX_DEV_CUDA) return mx_fail(err, "device facts: only CUDA devices are asked");
#ifdef MLXCEL_HAVE_CUDA
    cuda_device_facts f;
    if (cuda_device_info(&f)) return mx_fail(err, "no usable CUDA device (driver or GPU missing)");
    snprintf(out->name, sizeof out->name, "%s", f.name);
    out->cc_major = f.cc_major;
    out->cc_minor = f.cc_minor;
    out->sm_count = f.sm_count;
    out->free_bytes = f.free_bytes;
    out->total_bytes = f.total_bytes;
    return 0;
#else
    return mx_fail(err, "this build has no CUDA backend");
#endif
}
