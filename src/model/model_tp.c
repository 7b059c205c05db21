/* Tensor parallelism (docs/tensor-parallel.md): a group of tp_size rank models, each bound
 * from the same checkpoint through a slicing weight source, run as one thread per rank with a
 * CPU collective. TP = 1 is not a group: model_bind_tp(1) is model_bind, whose forward takes
 * the same rank code with the collectives skipped. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"

/* ==== Slicing weight source ====
 * Wraps the checkpoint's source for rank r of N: column-parallel weights (Q/K/V and their
 * biases, gate/up) keep rows [r * d0 / N, (r + 1) * d0 / N) (zero-copy views: heads and MLP
 * units are contiguous rows); row-parallel weights (o_proj, down_proj) keep the same columns
 * (copied: a column slice is not contiguous and the matmul wants contiguous rows); embedding
 * and lm_head keep the rank's vocabulary rows; everything else (norms, o_proj bias) whole. */
typedef struct tp_src {
    model_weight_fn fn;
    void *ctx;
    int rank, n, v0, vn;
    void **owned;        /* host copies, handed to the rank model after binding */
    int n_owned, cap_owned;
    int oom;
} tp_src;

static bool ends_with(const char *s, const char *suf) {
    const size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static mx_tensor col_slice(tp_src *t, const mx_tensor *w) {
    const int64_t rows = w->shape[0], K = w->shape[1], k = K / t->n, c0 = t->rank * k;
    const size_t es = mx_dtype_size(w->dtype);
    if (t->n_owned == t->cap_owned) {
        const int cap = t->cap_owned ? 2 * t->cap_owned : 16;
        void **p = realloc(t->owned, (size_t)cap * sizeof *p);
        if (!p) goto oom;
        t->owned = p;
        t->cap_owned = cap;
    }
    char *dst = malloc((size_t)(rows * k) * es); /* [rows, K / N] */
    if (!dst) goto oom;
    t->owned[t->n_owned++] = dst;
    for (int64_t i = 0; i < rows; i++)
        memcpy(dst + (size_t)(i * k) * es, (const char *)w->data + (size_t)(i * w->stride[0] + c0) * es,
               (size_t)k * es);
    return mx_tensor_2d(dst, w->dtype, rows, k, w->device);
oom:
    t->oom = 1;
    return (mx_tensor){0};
}

static mx_tensor tp_weight(void *ctx, const char *name) {
    tp_src *t = ctx;
    mx_tensor w = t->fn(t->ctx, name);
    if (!w.data || w.ndim < 1) return w;
    static const char *k_rows[] = {".self_attn.q_proj.weight", ".self_attn.k_proj.weight",
                                   ".self_attn.v_proj.weight", ".self_attn.q_proj.bias",
                                   ".self_attn.k_proj.bias", ".self_attn.v_proj.bias",
                                   ".mlp.gate_proj.weight", ".mlp.up_proj.weight"};
    for (size_t i = 0; i < sizeof k_rows / sizeof k_rows[0]; i++)
        if (ends_with(name, k_rows[i])) {
            /* a shape that does not divide is left whole: binding then names the mismatch */
            if (w.shape[0] % t->n) return w;
            const int64_t d = w.shape[0] / t->n;
            return mx_tensor_rows(&w, t->rank * d, d);
        }
    if (ends_with(name, ".self_attn.o_proj.weight") || ends_with(name, ".mlp.down_proj.weight"))
        return w.ndim == 2 && w.shape[1] % t->n == 0 ? col_slice(t, &w) : w;
    if (ends_with(name, "embed_tokens.weight") || ends_with(name, "lm_head.weight"))
        return mx_tensor_rows(&w, t->v0, t->vn);
    return w;
}

/* ==== Group ==== */
static int tp_check(const model_spec *s, const backend_ops *be, int n, mx_error *err) {
    if (n < 1 || n > 64) return mx_fail(err, "--tp-size %d: expected 1..64", n);
    if (n == 1) return 0;
    if (be->device != MX_DEV_CPU)
        return mx_fail(err, "tensor parallelism on %s needs NCCL across %d GPUs: not built yet "
                       "(docs/tensor-parallel.md)", backend_device_name(be->device), n);
    if (s->n_kv_heads % n || s->n_heads % n)
        return mx_fail(err, "--tp-size %d: the model has %d query and %d KV heads; both must be "
                       "divisible by the TP size", n, s->n_heads, s->n_kv_heads);
    if (s->intermediate_size % n)
        return mx_fail(err, "--tp-size %d: intermediate_size %d is not divisible by the TP size", n,
                       s->intermediate_size);
    if (s->vocab_size < n)
        return mx_fail(err, "--tp-size %d: vocabulary of %d rows is smaller than the TP size", n,
                       s->vocab_size);
    if (s->n_experts > 0)
        return mx_fail(err, "--tp-size %d: MoE models (%d experts) are not supported with tensor "
                       "parallelism yet", n, s->n_experts);
    if (s->quant.bits || s->n_quant_overrides)
        return mx_fail(err, "--tp-size %d: MLX-quantized checkpoints are not supported with tensor "
                       "parallelism yet (dequantize with `mlxcel convert -d`)", n);
    return 0;
}

int model_bind_tp(model **out, const model_spec *spec, model_weight_fn fn, void *ctx,
                  const backend_ops *be, int tp_size, mx_error *err) {
    if (tp_check(spec, be, tp_size, err)) return -1;
    if (tp_size == 1) return model_bind_rank(out, spec, fn, ctx, be, 0, 1, err);
    model *g = calloc(1, sizeof *g);
    if (!g) return mx_fail(err, "out of memory");
    g->spec = *spec;
    g->be = be;
    g->tp_size = tp_size;
    g->rot_dim = rope_rot_dim(spec);
    g->shards = calloc((size_t)tp_size, sizeof(model *));
    g->coll = g->shards ? mx_collective_cpu_new(tp_size, err) : NULL;
    if (!g->coll) {
        const bool oom = !g->shards;
        model_free(g);
        return oom ? mx_fail(err, "out of memory") : -1;
    }
    for (int r = 0; r < tp_size; r++) {
        tp_src src = {.fn = fn, .ctx = ctx, .rank = r, .n = tp_size};
        tp_vocab_range(spec->vocab_size, r, tp_size, &src.v0, &src.vn);
        int rc = model_bind_rank(&g->shards[r], spec, tp_weight, &src, be, r, tp_size, err);
        if (src.oom) { /* a failed copy shows up as a missing tensor: name the real cause */
            if (rc == 0) model_free(g->shards[r]);
            g->shards[r] = NULL;
            rc = mx_fail(err, "out of memory slicing the row-parallel weights");
        }
        if (rc) {
            for (int i = 0; i < src.n_owned; i++) free(src.owned[i]);
            free(src.owned);
            model_free(g);
            return mx_wrap(err, "tensor-parallel rank %d of %d", r, tp_size);
        }
        model *sh = g->shards[r];
        sh->tp_owned = src.owned;
        sh->n_tp_owned = src.n_owned;
        sh->cap_tp_owned = src.cap_owned;
        sh->coll = g->coll;
        g->n_params += sh->n_params;
        g->weight_bytes += sh->weight_bytes;
    }
    g->n_lin = g->shards[0]->n_lin;
    g->n_lin_q = g->shards[0]->n_lin_q;
    *out = g;
    return 0;
}

int model_tp_size(const model *m) { return m->tp_size; }

/* ==== Forward: one thread per rank ====
 * The ranks > 0 wait at a gate until every thread exists: should one pthread_create fail,
 * the started ranks are told to return without entering the forward (a missing rank would
 * leave them at the collective's first barrier). */
typedef struct tp_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int state; /* 0 wait, 1 go, 2 abort */
} tp_gate;

typedef struct tp_job {
    model *m;
    kv_cache *kv;
    const model_batch *b;
    float *logits;
    tp_gate *gate;
    mx_error err;
    int rc;
} tp_job;

static void *tp_run(void *arg) {
    tp_job *j = arg;
    if (j->gate) {
        pthread_mutex_lock(&j->gate->mu);
        while (j->gate->state == 0) pthread_cond_wait(&j->gate->cv, &j->gate->mu);
        const int st = j->gate->state;
        pthread_mutex_unlock(&j->gate->mu);
        if (st == 2) return NULL;
    }
    j->rc = model_forward_rank(j->m, j->kv, j->b, j->logits, &j->err);
    return NULL;
}

static void gate_open(tp_gate *g, int state) {
    pthread_mutex_lock(&g->mu);
    g->state = state;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

int model_tp_forward(model *g, kv_cache *kv, const model_batch *b, float *logits, mx_error *err) {
    const int n = g->tp_size;
    /* Everything that can fail on one rank alone happens here, before any rank waits on a
     * collective: a rank failing inside the forward would leave the others at a barrier. */
    const kv_cache_params *kvp = kv_cache_params_of(kv);
    if (kvp->tp_size != n)
        return mx_fail(err, "kv cache laid out for %d tensor-parallel ranks, model has %d",
                       kvp->tp_size > 1 ? kvp->tp_size : 1, n);
    if (b->n_rows <= 0) return 0;
    for (int r = 0; r < n; r++)
        if (model_ensure_scratch(g->shards[r], b->n_rows, b->n_out > 0 ? b->n_out : 1, err))
            return mx_wrap(err, "tensor-parallel rank %d", r);
    tp_gate gate = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .state = 0};
    tp_job jobs[64];
    pthread_t th[64];
    int started = 1;
    for (int r = 0; r < n; r++)
        jobs[r] = (tp_job){.m = g->shards[r], .kv = kv, .b = b, .logits = r == 0 ? logits : NULL,
                           .gate = r ? &gate : NULL};
    for (; started < n; started++)
        if (pthread_create(&th[started], NULL, tp_run, &jobs[started])) break;
    gate_open(&gate, started == n ? 1 : 2);
    if (started == n) tp_run(&jobs[0]);
    for (int r = 1; r < started; r++) pthread_join(th[r], NULL);
    pthread_mutex_destroy(&gate.mu);
    pthread_cond_destroy(&gate.cv);
    if (started < n) return mx_fail(err, "tensor parallelism: cannot start the thread of rank %d", started);
    for (int r = 0; r < n; r++)
        if (jobs[r].rc) {
            *err = jobs[r].err;
            return mx_wrap(err, "tensor-parallel rank %d", r);
        }
    return 0;
}
