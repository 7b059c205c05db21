/* Loading a model from a checkpoint directory (separate from binding so that in-memory
 * models in tests do not pull in the checkpoint reader). */
#include <stdlib.h>

#include "model/model_internal.h"

static void ckpt_release(void *p) {
    ckpt_close(p);
    free(p);
}

static mx_tensor ckpt_weight(void *ctx, const char *name) {
    const st_tensor *t = ckpt_find((const ckpt *)ctx, name);
    mx_tensor r = {0};
    if (!t) return r;
    r.data = (void *)t->data;
    r.dtype = t->dtype;
    r.ndim = t->ndim > MX_MAX_DIMS ? MX_MAX_DIMS : t->ndim;
    for (int d = 0; d < r.ndim; d++) r.shape[d] = t->shape[d];
    int64_t st = 1;
    for (int d = r.ndim - 1; d >= 0; d--) {
        r.stride[d] = st;
        st *= r.shape[d];
    }
    r.device = MX_DEV_CPU;
    return r;
}

int model_load(model **out, const char *dir, const backend_ops *be, mx_error *err) {
    return model_load_tp(out, dir, be, 1, err);
}

int model_load_tp(model **out, const char *dir, const backend_ops *be, int tp_size, mx_error *err) {
    ckpt *c = calloc(1, sizeof *c);
    if (!c) return mx_fail(err, "out of memory");
    if (ckpt_open(c, dir, err)) {
        free(c);
        return -1;
    }
    model *m = NULL;
    if (model_bind_tp(&m, &c->spec, ckpt_weight, c, be, tp_size, err)) {
        mx_wrap(err, "%s", dir);
        ckpt_close(c);
        free(c);
        return -1;
    }
    m->ck = c;
    m->ck_free = ckpt_release;
    *out = m;
    return 0;
}

