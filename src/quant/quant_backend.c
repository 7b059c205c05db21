/* CPU backend glue: backend_ops.matmul_q on MLX-quantized weights through mlxq_matmul. */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "quant/quant_backend.h"

int mlxq_from_qweight(mlxq_matrix *m, const mx_qweight *w, mx_error *err) {
    if (!w || w->w.dtype != MX_U32 || w->w.ndim != 2)
        return mx_fail(err, "quantized weight: expected a 2-D U32 packed tensor");
    if (w->scales.dtype != w->biases.dtype || w->scales.ndim != 2 || w->biases.ndim != 2)
        return mx_fail(err, "quantized weight: scales and biases must be 2-D of one dtype");
    if (w->bits <= 0 || w->bits > 8)
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
    if (w->scales.shape[0] != m->n || w->scales.shape[1] != m->k / m->group_size ||
        w->biases.shape[0] != m->n || w->biases.shape[1] != m->k / m->group_size)
        return mx_fail(err, "quantized weight: scales/biases shape does not match [%lld, %lld]",
                       (long long)m->n, (long long)(m->k / m->group_size));
    return 0;
}

void mlxq_cpu_matmul_q(mx_tensor *out, const mx_tensor *x, const mx_qweight *w) {
    mlxq_matrix m;
    mx_error err;
    const int64_t n = x->shape[0];
    int rc = mlxq_from_qweight(&m, w, &err);
    if (!rc && (x->dtype != MX_F32 || out->dtype != MX_F32 || x->shape[x->ndim - 1] != m.k ||
                out->shape[out->ndim - 1] != m.n || x->stride[0] != m.k || out->stride[0] != m.n))
        rc = mx_fail(&err, "quantized matmul: expected contiguous fp32 x [%lld, %lld] and out "
                     "[%lld, %lld]", (long long)n, (long long)m.k, (long long)n, (long long)m.n);
    if (!rc) rc = mlxq_matmul(out->data, x->data, n, &m, &err);
    if (rc) {
        /* The table entry returns nothing: an internal error is logged and yields zeros
         * rather than garbage. Shapes are validated at load time, so this means no memory. */
        LOG_ERR("%s", err.msg);
        memset(out->data, 0, (size_t)(n * out->shape[out->ndim - 1]) * sizeof(float));
    }
}
