/* CPU backend glue: backend_ops.matmul_q and embed_q on MLX-quantized weights. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_quant.h"
#include "base/log.h"

int mlxq_from_qweight(mlxq_matrix *m, const mx_qweight *w, mx_error *err) {
    if (!w || w->w.dtype != MX_U32 || w->w.ndim != 2)
        return mx_fail(err, "quantized weight: expected a 2-D U32 packed tensor");
    if (w->scales.dtype != w->biases.dtype || w->scales.ndim != 2 || w->biases.ndim != 2)
        return mx_fail(err, "quantized weight: scales and biases must be 2-D of one dtype");
    if (!mlxq_valid_bits(w->bits))
        return mx_fail(err, "quantized weight: %d bits is not supported", w->bits);
    memset(m, 0, sizeof *m);
    m->w = w->w.data;
    m->scales = w->scales.data;
    m->biases = w->biases.data;
    m->sb_dtype = w->scales.dtype;
    m->n = w->w.shape[0];
    m->k = w->w.shape[1] * 32 / w->bits;
    m->bits = w->bits;
    m->group_size = w->group_size;
    if (mlxq_matrix_check(m, err)) return -1;
    /* rows are addressed as contiguous (packed rows, groups) */
    if (w->w.stride[0] != w->w.shape[1] || w->scales.stride[0] != w->scales.shape[1] ||
        w->biases.stride[0] != w->biases.shape[1])
        return mx_fail(err, "quantized weight: rows must be contiguous");
    if (w->w.shape[1] * 32 % w->bits || w->scales.shape[0] != m->n ||
        w->scales.shape[1] != m->k / m->group_size || w->biases.shape[0] != m->n ||
        w->biases.shape[1] != m->k / m->group_size)
        return mx_fail(err, "quantized weight: scales/biases shape does not match [%lld, %lld]",
                       (long long)m->n, (long long)(m->k / m->group_size));
    return 0;
}

static void zero_rows(mx_tensor *out, int64_t n) {
    for (int64_t r = 0; r < n; r++)
        memset(cpu_row_ptr(out, r), 0, (size_t)out->shape[out->ndim - 1] * sizeof(float));
}

/* The cpu_mm of out = x @ w^T for a quantized w, its descriptor in *m; false (out zeroed, the
 * error logged: the table entries return nothing, shapes are validated at load time) when w
 * does not fit. */
static bool quant_mm(cpu_mm *mm, mlxq_matrix *m, mx_tensor *out, const mx_tensor *x, const mx_qweight *w,
                     const mx_tensor *bias) {
    mx_error err;
    const int64_t n = x->shape[0];
    int rc = mlxq_from_qweight(m, w, &err);
    if (!rc && (x->dtype != MX_F32 || out->dtype != MX_F32 || x->shape[x->ndim - 1] != m->k ||
                out->shape[out->ndim - 1] != m->n || out->shape[0] != n))
        rc = mx_fail(&err, "quantized matmul: expected fp32 x [%lld, %lld] and out [%lld, %lld]",
                     (long long)n, (long long)m->k, (long long)n, (long long)m->n);
    if (rc) {
        LOG_ERR("%s", err.msg);
        zero_rows(out, n);
        return false;
    }
    *mm = (cpu_mm){.out = out, .N = m->n, .fill = mlxq_fill_rows, .wtile = mlxq_wtile_for(m), .ctx = m,
                   .bias = bias};
    return true;
}

void mlxq_cpu_matmul_q(mx_tensor *out, const mx_tensor *x, const mx_qweight *w,
                       const mx_tensor *bias) {
    mlxq_matrix m;
    cpu_mm mm;
    if (quant_mm(&mm, &m, out, x, w, bias)) cpu_matmul_group(x, &mm, 1);
}

void mlxq_cpu_matmul_group(const mx_tensor *x, const mx_linear *ls, int n) {
    mlxq_matrix m[CPU_MM_GROUP_MAX];
    cpu_mm mm[CPU_MM_GROUP_MAX];
    for (int done = 0; done < n; done += CPU_MM_GROUP_MAX) {
        int k = 0;
        for (int i = done; i < n && i < done + CPU_MM_GROUP_MAX; i++) {
            const mx_linear *l = &ls[i];
            if (!l->q) mm[k++] = (cpu_mm){.out = l->out, .w = l->w, .bias = l->bias};
            else if (quant_mm(&mm[k], &m[k], l->out, x, l->q, l->bias)) k++;
        }
        cpu_matmul_group(x, mm, k);
    }
}

void mlxq_cpu_embed_q(mx_tensor *out, const mx_qweight *table, const int32_t *ids, int n,
                      float scale, bool round_scale) {
    mlxq_matrix m;
    mx_error err;
    int rc = mlxq_from_qweight(&m, table, &err);
    if (!rc && (out->dtype != MX_F32 || out->shape[out->ndim - 1] != m.k || out->stride[0] != m.k))
        rc = mx_fail(&err, "quantized embedding: expected contiguous fp32 out [%d, %lld]", n,
                     (long long)m.k);
    if (!rc) rc = mlxq_embed(out->data, &m, ids, n, scale, round_scale, &err);
    if (rc) {
        LOG_ERR("%s", err.msg);
        zero_rows(out, n);
    }
}
