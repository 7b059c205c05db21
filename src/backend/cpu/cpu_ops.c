/* CPU backend: the ops table, norms, RoPE, activations, MoE dispatch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/cpu/cpu_internal.h"
#include "base/clock.h"
#include "base/env.h"
#include "backend/cpu/cpu_quant.h"

/* ==== Memory ==== */
static void *cpu_alloc(size_t nbytes) { return calloc(1, nbytes ? nbytes : 1); }
static void cpu_free(void *p) { free(p); }

/* Weights are used where they are mapped. Eager materialisation (the default, as on CUDA):
 * the mapping's pages are read in at load, so the load time covers resident weights and the
 * first token pays no page faults on the checkpoint; MLXCEL_WEIGHT_MATERIALIZATION=lazy leaves
 * them to the first forward. */
static struct {
    uint64_t tensors, bytes;
    double seconds;
} g_load; /* since the last finish_load, for MLXCEL_PROFILE_TTFT */

static void populate(const void *p, size_t n) {
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t a = (uintptr_t)p & ~(pg - 1), e = ((uintptr_t)p + n + pg - 1) & ~(pg - 1);
#ifdef MADV_POPULATE_READ
    if (madvise((void *)a, e - a, MADV_POPULATE_READ) == 0) return;
#endif
    /* a kernel before 5.14, or a range that is not all one mapping: one read a page */
    const volatile char *c = p;
    for (size_t i = 0; i < n; i += pg) (void)c[i];
    if (n) (void)c[n - 1];
}

static int cpu_upload(mx_tensor *dst, const mx_tensor *host, mx_error *err) {
    (void)err;
    *dst = *host;
    dst->device = MX_DEV_CPU;
    if (!mx_env()->weight_lazy && host->data) {
        const double t0 = mx_now();
        const size_t n = mx_tensor_nbytes(host);
        populate(host->data, n);
        g_load.tensors++, g_load.bytes += n, g_load.seconds += mx_now() - t0;
    }
    return 0;
}

static int cpu_finish_load(mx_error *err) {
    (void)err;
    if (mx_env()->profile_ttft) {
        if (mx_env()->weight_lazy)
            fprintf(stderr, "[TTFT] weights: lazy, mapped, read on first use\n");
        else
            fprintf(stderr, "[TTFT] weights: eager, %llu tensors, %llu bytes (%.3f GB) read in %.3f s "
                            "(%.2f GB/s)\n",
                    (unsigned long long)g_load.tensors, (unsigned long long)g_load.bytes,
                    g_load.bytes / 1e9, g_load.seconds,
                    g_load.seconds > 0 ? g_load.bytes / 1e9 / g_load.seconds : 0.0);
    }
    g_load.tensors = g_load.bytes = 0, g_load.seconds = 0;
    return 0;
}

static void cpu_copy_to_host(void *dst, const mx_tensor *src) {
    memcpy(dst, src->data, mx_tensor_nbytes(src));
}

static void cpu_copy_from_host(mx_tensor *dst, const void *src) {
    memcpy(dst->data, src, mx_tensor_nbytes(dst));
}

/* ==== Elementwise ==== */
static void cpu_embed(mx_tensor *out, const mx_tensor *table, const int32_t *ids, int n, float scale,
                      bool round_scale) {
    const int64_t H = table->shape[1];
    /* transformers multiplies by a scale held in the embedding dtype: round it the same way */
    float s = scale;
    if (round_scale && table->dtype == MX_BF16) s = mx_bf16_to_f32(mx_f32_to_bf16(scale));
    if (round_scale && table->dtype == MX_F16) s = mx_f16_to_f32(mx_f32_to_f16(scale));
    for (int i = 0; i < n; i++) {
        float *o = cpu_row_ptr(out, i);
        cpu_row_to_f32(o, cpu_row_ptr(table, ids[i]), table->dtype, H);
        if (s != 1.0f) {
            for (int64_t j = 0; j < H; j++) {
                float v = o[j] * s;
                /* the product is also rounded to the table dtype in transformers */
                if (round_scale && table->dtype == MX_BF16) v = mx_bf16_to_f32(mx_f32_to_bf16(v));
                if (round_scale && table->dtype == MX_F16) v = mx_f16_to_f32(mx_f32_to_f16(v));
                o[j] = v;
            }
        }
    }
}

static void cpu_rms_norm(mx_tensor *out, const mx_tensor *x, const mx_tensor *w, float eps,
                         float offset) {
    const int64_t rows = x->shape[0], D = x->shape[x->ndim - 1];
    const int64_t per = mx_tensor_numel(x) / rows / D; /* [rows, per, D] flattened heads */
    float *w32 = malloc((size_t)D * sizeof(float));
    cpu_row_to_f32(w32, w->data, w->dtype, D);
    for (int64_t j = 0; j < D; j++) w32[j] += offset;
#pragma omp parallel for schedule(static) if (rows * per * D >= (1 << 16))
    for (int64_t r = 0; r < rows * per; r++) {
        const float *xi = (const float *)cpu_row_ptr(x, r / per) + (r % per) * D;
        float *oi = (float *)cpu_row_ptr(out, r / per) + (r % per) * D;
        double ss = 0.0;
        for (int64_t j = 0; j < D; j++) ss += (double)xi[j] * xi[j];
        const float inv = 1.0f / sqrtf((float)(ss / (double)D) + eps);
        for (int64_t j = 0; j < D; j++) oi[j] = (xi[j] * inv) * w32[j];
    }
    free(w32);
}

static void cpu_rope(mx_tensor *x, const float *cos_sin, int rot_dim) {
    /* x: [n, heads, head_dim]; cos_sin: [n, rot_dim / 2, 2] */
    const int64_t n = x->shape[0], heads = x->shape[1], D = x->shape[2];
    const int half = rot_dim / 2;
    for (int64_t i = 0; i < n; i++) {
        const float *cs = cos_sin + (size_t)i * rot_dim;
        for (int64_t h = 0; h < heads; h++) {
            float *v = (float *)cpu_row_ptr(x, i) + h * D;
            for (int j = 0; j < half; j++) {
                const float c = cs[2 * j], s = cs[2 * j + 1];
                const float a = v[j], b = v[j + half];
                /* q*cos + rotate_half(q)*sin, rotate_half = (-x2, x1) */
                v[j] = a * c - b * s;
                v[j + half] = b * c + a * s;
            }
        }
    }
}

static void cpu_add(mx_tensor *x, const mx_tensor *y) {
    const int64_t rows = x->shape[0], cols = mx_tensor_numel(x) / rows;
    for (int64_t r = 0; r < rows; r++) {
        float *a = cpu_row_ptr(x, r);
        const float *b = cpu_row_ptr(y, r);
        for (int64_t j = 0; j < cols; j++) a[j] += b[j];
    }
}

static inline float act_apply(float g, int activation) {
    switch (activation) {
    case ACT_GELU_TANH: {
        const float k = 0.7978845608028654f; /* sqrt(2 / pi) */
        return 0.5f * g * (1.0f + tanhf(k * (g + 0.044715f * g * g * g)));
    }
    case ACT_GELU: return 0.5f * g * (1.0f + erff(g * 0.7071067811865476f));
    default: return g / (1.0f + expf(-g));
    }
}

void cpu_glu(mx_tensor *out, const mx_tensor *gate, const mx_tensor *up, int activation) {
    const int64_t rows = gate->shape[0], cols = gate->shape[1];
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
    for (int64_t r = 0; r < rows; r++) {
        const float *g = cpu_row_ptr(gate, r), *u = cpu_row_ptr(up, r);
        float *o = cpu_row_ptr(out, r);
        for (int64_t j = 0; j < cols; j++) o[j] = act_apply(g[j], activation) * u[j];
    }
}

static void cpu_softcap(mx_tensor *x, float cap) {
    const int64_t rows = x->shape[0], cols = mx_tensor_numel(x) / rows;
    for (int64_t r = 0; r < rows; r++) {
        float *a = cpu_row_ptr(x, r);
        for (int64_t j = 0; j < cols; j++) a[j] = cap * tanhf(a[j] / cap);
    }
}

static void cpu_gather_rows(mx_tensor *out, const mx_tensor *x, const int32_t *idx, int n) {
    const size_t row_bytes = (size_t)(mx_tensor_numel(x) / x->shape[0]) * mx_dtype_size(x->dtype);
    for (int i = 0; i < n; i++) memcpy(cpu_row_ptr(out, i), cpu_row_ptr(x, idx[i]), row_bytes);
}

static void cpu_convert(mx_tensor *dst, const mx_tensor *src) {
    const int64_t n = mx_tensor_numel(src);
    float *tmp = malloc((size_t)n * sizeof(float));
    cpu_row_to_f32(tmp, src->data, src->dtype, n);
    if (dst->dtype == MX_F32) {
        memcpy(dst->data, tmp, (size_t)n * sizeof(float));
    } else {
        uint16_t *d = dst->data;
        for (int64_t i = 0; i < n; i++)
            d[i] = dst->dtype == MX_BF16 ? mx_f32_to_bf16(tmp[i]) : mx_f32_to_f16(tmp[i]);
    }
    free(tmp);
}

/* ==== Ops table ==== */
static const backend_ops k_cpu_ops = {
    .name = "cpu",
    .device = MX_DEV_CPU,
    .kv_dtype = MX_F32,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_upload,
    .finish_load = cpu_finish_load,
    .copy_to_host = cpu_copy_to_host,
    .copy_from_host = cpu_copy_from_host,
    .embed = cpu_embed,
    .rms_norm = cpu_rms_norm,
    .rope = cpu_rope,
    .add = cpu_add,
    .glu = cpu_glu,
    .softcap = cpu_softcap,
    .gather_rows = cpu_gather_rows,
    .matmul = cpu_matmul,
    .matmul_q = mlxq_cpu_matmul_q, /* cpu_qops.c */
    .matmul_group = mlxq_cpu_matmul_group,
    .embed_q = mlxq_cpu_embed_q,
    .moe = cpu_moe,
    .kv_write = cpu_kv_write,
    .attention = cpu_attention,
    .kv_copy_rows = cpu_kv_copy_rows,
    .convert = cpu_convert,
};

const backend_ops *backend_cpu(void) { return &k_cpu_ops; }
