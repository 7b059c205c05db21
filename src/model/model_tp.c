/* Tensor parallelism (docs/tensor-parallel.md): a group of tp_size rank models, each bound
 * from the same checkpoint through a slicing weight source, run as one thread per rank with a
 * CPU collective. TP = 1 is not a group: model_bind_tp(1) is model_bind, whose forward takes
 * the same rank code with the collectives skipped. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "model/model_internal.h"

/* ==== Collective of a device group ====
 * CUDA: NCCL over GPUs 0..n-1, rank r on GPU r (collective_nccl.c). */
static mx_collective *device_collective(int n, mx_error *err) {
#ifdef MLXCEL_HAVE_CUDA
    int dev[64];
    for (int i = 0; i < n; i++) dev[i] = i;
    return mx_collective_nccl_new(n, dev, err);
#else
    mx_fail(err, "tensor parallelism on a device backend: this build has no CUDA (NCCL)");
    (void)n;
    return NULL;
#endif
}

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

/* name is module + suffix: ".weight", or an MLX-quantized Linear's ".scales" / ".biases"
 * (packed codes, per-group scales and biases are sliced like the weight they belong to: rows,
 * or columns of codes and of groups; tp_check makes the group size divide a rank's width), or
 * ".bias" when `bias` (the Q/K/V biases follow their rows). */
static bool is_part_of(const char *name, const char *module, bool bias) {
    static const char *parts[] = {".weight", ".scales", ".biases", ".bias"};
    const size_t a = strlen(name), b = strlen(module);
    for (size_t i = 0; i < (bias ? 4u : 3u); i++) {
        const size_t c = strlen(parts[i]);
        if (a >= b + c && !strcmp(name + a - c, parts[i]) && !strncmp(name + a - c - b, module, b))
            return true;
    }
    return false;
}

static mx_tensor tp_weight(void *ctx, const char *name) {
    tp_src *t = ctx;
    mx_tensor w = t->fn(t->ctx, name);
    if (!w.data || w.ndim < 1) return w;
    static const char *k_rows[] = {".self_attn.q_proj", ".self_attn.k_proj", ".self_attn.v_proj",
                                   ".mlp.gate_proj", ".mlp.up_proj"};
    for (size_t i = 0; i < sizeof k_rows / sizeof k_rows[0]; i++)
        if (is_part_of(name, k_rows[i], i < 3)) {
            /* a shape that does not divide is left whole: binding then names the mismatch */
            if (w.shape[0] % t->n) return w;
            const int64_t d = w.shape[0] / t->n;
            return mx_tensor_rows(&w, t->rank * d, d);
        }
    if (is_part_of(name, ".self_attn.o_proj", false) || is_part_of(name, ".mlp.down_proj", false))
        return w.ndim == 2 && w.shape[1] % t->n == 0 ? col_slice(t, &w) : w;
    if (is_part_of(name, "embed_tokens", false) || is_part_of(name, "lm_head", false))
        return mx_tensor_rows(&w, t->v0, t->vn);
    /* MoE: stacked / fused expert tensors [E, ...] keep the rank's experts (zero-copy; the
     * per-expert layout is never asked for other ranks' experts: model_load.c) */
    static const char *k_experts[] = {".switch_mlp.gate_proj", ".switch_mlp.up_proj",
                                      ".switch_mlp.down_proj", ".experts.gate_up_proj",
                                      ".experts.down_proj"};
    for (size_t i = 0; i < sizeof k_experts / sizeof k_experts[0]; i++)
        if ((is_part_of(name, k_experts[i], false) || ends_with(name, k_experts[i])) && w.ndim == 3 &&
            w.shape[0] % t->n == 0) {
            const int64_t en = w.shape[0] / t->n;
            return mx_tensor_rows(&w, t->rank * en, en);
        }
    return w;
}

/* ==== Group ==== */
int model_tp_bind(const backend_ops *be, int rank, mx_error *err) {
    if (!be->bind_device) return 0;
    mx_error scratch;
    return be->bind_device(rank, err ? err : &scratch);
}

/* group: a TP group even for n = 1 (MLXCEL_TP_GROUP=1: the collective path on one device) */
static int tp_check(const model_spec *s, const backend_ops *be, int n, bool group, mx_error *err) {
    if (n < 1 || n > 64) return mx_fail(err, "--tp-size %d: expected 1..64", n);
    if (n == 1 && !group) return 0;
    /* the rank slicing knows neither feed_forward.* names, the shared expert, nor the q/k row
     * permutation of the interleaved rope: refuse rather than run a wrong split */
    if (s->family == FAM_LLAMA4)
        return mx_fail(err, "--tp-size %d: model_type '%s' (llama4) is not supported with tensor "
                       "parallelism yet; run it with --tp-size 1", n, s->model_type);
    if (s->kv_lora_rank > 0) /* its heads share one latent KV head; no split written yet */
        return mx_fail(err, "--tp-size %d: %s (multi-head latent attention) does not run tensor-"
                       "parallel yet; use --tp-size 1", n, s->model_type);
    if (be->device != MX_DEV_CPU) {
        const int have = be->device_count ? be->device_count() : 0;
        if (!be->bind_device)
            return mx_fail(err, "tensor parallelism on %s: the backend drives one device only",
                           backend_device_name(be->device));
        if (n > have)
            return mx_fail(err, "--tp-size %d on %s: one GPU per rank, and %d GPU%s visible", n,
                           backend_device_name(be->device), have, have == 1 ? " is" : "s are");
    }
    if (s->n_kv_heads % n || s->n_heads % n)
        return mx_fail(err, "--tp-size %d: the model has %d query and %d KV heads; both must be "
                       "divisible by the TP size", n, s->n_heads, s->n_kv_heads);
    if (s->intermediate_size % n)
        return mx_fail(err, "--tp-size %d: intermediate_size %d is not divisible by the TP size", n,
                       s->intermediate_size);
    if (s->vocab_size < n)
        return mx_fail(err, "--tp-size %d: vocabulary of %d rows is smaller than the TP size", n,
                       s->vocab_size);
    if (s->n_experts > 0 && s->n_experts % n)
        return mx_fail(err, "--tp-size %d: the model has %d MoE experts, not divisible by the TP "
                       "size", n, s->n_experts);
    /* CUDA's few-row MoE kernels visit every routed expert, and an absent quantized one has
     * no zero stand-in there yet (the dense ones do) */
    if (n > 1 && (s->quant.bits || s->n_quant_overrides) && s->n_experts > 0 &&
        be->device != MX_DEV_CPU)
        return mx_fail(err, "--tp-size %d: MLX-quantized MoE checkpoints are not supported with "
                       "tensor parallelism on %s yet (on the CPU they are; dequantize with "
                       "`mlxcel convert -d`)", n, backend_device_name(be->device));
    if (n > 1 && (s->quant.bits || s->n_quant_overrides)) {
        /* o_proj / down_proj are split by input columns: their group size must divide a
         * rank's width, so that a rank's codes, scales and biases are whole groups */
        const int wa = s->n_heads * s->head_dim / n, wf = s->intermediate_size / n;
        for (int l = 0; l < s->n_layers; l++) {
            char path[96];
            snprintf(path, sizeof path, "model.layers.%d.self_attn.o_proj", l);
            const mx_quant qo = spec_quant_for(s, path);
            snprintf(path, sizeof path, "model.layers.%d.mlp.down_proj", l);
            const mx_quant qd = spec_quant_for(s, path);
            const bool dense_mlp = s->n_experts == 0 || s->layer_dense_mlp[l];
            if (qo.bits && wa % qo.group_size)
                return mx_fail(err, "--tp-size %d: a rank's share of the attention width (heads x "
                               "head_dim) is %d, not a multiple of layer %d's o_proj quantization "
                               "group %d", n, wa, l, qo.group_size);
            if (dense_mlp && qd.bits && wf % qd.group_size)
                return mx_fail(err, "--tp-size %d: a rank's share of intermediate_size is %d, not a "
                               "multiple of layer %d's down_proj quantization group %d", n, wf, l,
                               qd.group_size);
        }
    }
    return 0;
}

int model_bind_tp(model **out, const model_spec *spec, model_weight_fn fn, void *ctx,
                  const backend_ops *be, int tp_size, mx_error *err) {
    const bool group = tp_size > 1 || mx_env()->tp_group;
    if (tp_check(spec, be, tp_size, group, err)) return -1;
    if (!group) return model_bind_rank(out, spec, fn, ctx, be, 0, 1, err);
    model *g = calloc(1, sizeof *g);
    if (!g) return mx_fail(err, "out of memory");
    g->spec = *spec;
    g->be = be;
    g->tp_size = tp_size;
    g->rot_dim = rope_rot_dim(spec);
    g->shards = calloc((size_t)tp_size, sizeof(model *));
    g->coll = !g->shards ? NULL : be->device == MX_DEV_CPU ? mx_collective_cpu_new(tp_size, err)
                                                           : device_collective(tp_size, err);
    if (!g->coll) {
        const bool oom = !g->shards;
        model_free(g);
        return oom ? mx_fail(err, "out of memory") : -1;
    }
    for (int r = 0; r < tp_size; r++) {
        tp_src src = {.fn = fn, .ctx = ctx, .rank = r, .n = tp_size};
        tp_vocab_range(spec->vocab_size, r, tp_size, &src.v0, &src.vn);
        /* rank r's weights go to its device (the calling thread returns to rank 0's below) */
        int rc = model_tp_bind(be, r, err);
        if (rc == 0) rc = model_bind_rank(&g->shards[r], spec, tp_weight, &src, be, r, tp_size, err);
        if (src.oom) { /* a failed copy shows up as a missing tensor: name the real cause */
            if (rc == 0) model_free(g->shards[r]);
            g->shards[r] = NULL;
            rc = mx_fail(err, "out of memory slicing the row-parallel weights");
        }
        if (rc) {
            for (int i = 0; i < src.n_owned; i++) free(src.owned[i]);
            free(src.owned);
            model_free(g); /* binds each rank's device to free its buffers, then rank 0's */
            return mx_wrap(err, "tensor-parallel rank %d of %d", r, tp_size);
        }
        model *sh = g->shards[r];
        sh->tp_owned = src.owned;
        sh->n_tp_owned = src.n_owned;
        sh->cap_tp_owned = src.cap_owned;
        sh->coll = g->coll;
        g->n_params += sh->n_params;
        g->weight_bytes += sh->weight_bytes;
        g->embd_bytes += sh->embd_bytes;
        g->expert_bytes += sh->expert_bytes;
    }
    model_tp_bind(be, 0, NULL);
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
    int rank;
    kv_cache *kv;
    const model_batch *b;
    const model_out *o;
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
    /* a device rank drives its own GPU: bind before any op (rank 0: the calling thread) */
    j->rc = model_tp_bind(j->m->be, j->rank, &j->err);
    if (j->rc == 0) j->rc = model_forward_rank(j->m, j->kv, j->b, j->o, &j->err);
    return NULL;
}

static void gate_open(tp_gate *g, int state) {
    pthread_mutex_lock(&g->mu);
    g->state = state;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

int model_tp_forward(model *g, kv_cache *kv, const model_batch *b, const model_out *o, mx_error *err) {
    const int n = g->tp_size;
    /* Everything that can fail on one rank alone happens here, before any rank waits on a
     * collective: a rank failing inside the forward would leave the others at a barrier. */
    const kv_cache_params *kvp = kv_cache_params_of(kv);
    if (kvp->tp_size != n)
        return mx_fail(err, "kv cache laid out for %d tensor-parallel ranks, model has %d",
                       kvp->tp_size > 1 ? kvp->tp_size : 1, n);
    if (b->n_rows <= 0) return 0;
    for (int r = 0; r < n; r++) /* each rank's scratch on its device */
        if (model_tp_bind(g->be, r, err) ||
            model_ensure_scratch(g->shards[r], b->n_rows, b->n_out > 0 ? b->n_out : 1, b->n_hidden, err)) {
            model_tp_bind(g->be, 0, NULL);
            return mx_wrap(err, "tensor-parallel rank %d", r);
        }
    tp_gate gate = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .state = 0};
    tp_job jobs[64];
    pthread_t th[64];
    int started = 1;
    for (int r = 0; r < n; r++)
        jobs[r] = (tp_job){.m = g->shards[r], .rank = r, .kv = kv, .b = b, .o = r == 0 ? o : NULL,
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
