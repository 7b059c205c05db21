/* Test helpers for quantized models in the engine: running `mlxcel convert`, writing small
 * random checkpoints (dense or MLX-quantized per module), and running prompts through the
 * engine while capturing greedy tokens and the raw logits of every sampled position.
 * Header-only; included by one test file each. */
#ifndef MLXCEL_TEST_QUANT_ENGINE_UTIL_H
#define MLXCEL_TEST_QUANT_ENGINE_UTIL_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend/backend.h"
#include "engine/engine.h"
#include "io/safetensors.h"
#include "quant/quant.h"

/* ==== Commands ==== */
/* g_tmp and its cmocka group setup / teardown (tmp_setup, tmp_teardown) */
#include "test_tmpdir.h"

/* Runs a shell command (output into g_tmp/cmd.log); fails the test with the log on error. */
__attribute__((format(printf, 1, 2), unused)) static void qe_sh(const char *fmt, ...) {
    char cmd[2048], log[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(log, sizeof log, "%s/cmd.log", g_tmp);
    char full[2400];
    snprintf(full, sizeof full, "{ %s ; } >'%s' 2>&1", cmd, log);
    if (system(full) != 0) {
        fprintf(stderr, "command failed: %s\n", cmd);
        FILE *f = fopen(log, "r");
        char line[512];
        while (f && fgets(line, sizeof line, f)) fputs(line, stderr);
        if (f) fclose(f);
        fail();
    }
}

__attribute__((unused)) static const char *qe_bin(void) {
    const char *b = getenv("MLXCEL_BIN");
    if (!b) fail_msg("MLXCEL_BIN is not set (run through ctest)");
    return b;
}

__attribute__((unused)) static void qe_quantize(const char *in, const char *out, int bits, int gs) {
    qe_sh("'%s' convert --hf-path '%s' --mlx-path '%s' -q --q-bits %d --q-group-size %d --no-progress",
          qe_bin(), in, out, bits, gs);
}

__attribute__((unused)) static void qe_dequantize(const char *in, const char *out) {
    qe_sh("'%s' convert --hf-path '%s' --mlx-path '%s' -d --no-progress", qe_bin(), in, out);
}

/* ==== Random checkpoints ==== */
typedef struct qe_ckpt {
    st_write_tensor t[256];
    int n;
    uint64_t rng;
} qe_ckpt;

__attribute__((unused)) static float qe_rand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

__attribute__((unused)) static void qe_put(qe_ckpt *c, const char *name, mx_dtype dt, int ndim, const int64_t *shape, void *data) {
    st_write_tensor *t = &c->t[c->n++];
    t->name = strdup(name);
    t->dtype = dt;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) t->shape[d] = shape[d];
    t->data = data;
}

/* A bf16 tensor `name` ([d0], [d0, d1] or [d0, d1, d2]) of values base + scale * U(-1, 1); with
 * bits > 0 (a ".weight"), stored MLX-quantized instead: .weight U32, .scales, .biases bf16. */
__attribute__((unused)) static void qe_add(qe_ckpt *c, const char *name, int64_t d0, int64_t d1, int64_t d2, float scale,
                   float base, int bits, int gs) {
    const int ndim = d2 ? 3 : d1 ? 2 : 1;
    const int64_t shape[3] = {d0, d1, d2};
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) numel *= shape[d];
    uint16_t *bf = malloc((size_t)numel * 2);
    for (int64_t i = 0; i < numel; i++) bf[i] = mx_f32_to_bf16(base + scale * qe_rand(&c->rng));
    if (!bits) {
        qe_put(c, name, MX_BF16, ndim, shape, bf);
        return;
    }
    const int64_t k = shape[ndim - 1], rows = numel / k;
    uint32_t *wq = malloc((size_t)(rows * k * bits / 32) * 4);
    uint16_t *s = malloc((size_t)(rows * k / gs) * 2), *b = malloc((size_t)(rows * k / gs) * 2);
    mx_error err;
    if (mlx_quantize(wq, s, b, bf, MX_BF16, rows, k, bits, gs, &err)) fail_msg("%s", err.msg);
    free(bf);
    char base_name[200], nm[220];
    snprintf(base_name, sizeof base_name, "%.*s", (int)(strlen(name) - 7), name); /* - ".weight" */
    int64_t ps[3] = {d0, d1, d2};
    ps[ndim - 1] = k * bits / 32;
    qe_put(c, name, MX_U32, ndim, ps, wq);
    ps[ndim - 1] = k / gs;
    snprintf(nm, sizeof nm, "%s.scales", base_name);
    qe_put(c, nm, MX_BF16, ndim, ps, s);
    snprintf(nm, sizeof nm, "%s.biases", base_name);
    qe_put(c, nm, MX_BF16, ndim, ps, b);
}

__attribute__((unused)) static void qe_write(qe_ckpt *c, const char *dir, const char *config_json) {
    mkdir(dir, 0755);
    char p[400];
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(config_json, f);
    fclose(f);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    const char *mk[1] = {"format"}, *mv[1] = {"pt"};
    mx_error err;
    if (st_write(p, c->t, c->n, mk, mv, 1, &err)) fail_msg("%s", err.msg);
    for (int i = 0; i < c->n; i++) {
        free((void *)c->t[i].name);
        free((void *)c->t[i].data);
    }
    c->n = 0;
}

/* ==== Running prompts ==== */
#define QE_MAX_SEQ 64
#define QE_MAX_GEN 12

typedef struct qe_run {
    int64_t ids[QE_MAX_SEQ];
    int n_seq;
    int vocab;
    int n_tok[QE_MAX_SEQ];
    int32_t tok[QE_MAX_SEQ][QE_MAX_GEN];
    float *logits[QE_MAX_SEQ]; /* [QE_MAX_GEN, vocab] */
    int n_logits[QE_MAX_SEQ];
    int finished;
} qe_run;

static int qe_slot(qe_run *r, int64_t id) {
    for (int i = 0; i < r->n_seq; i++)
        if (r->ids[i] == id) return i;
    return -1;
}

static int qe_on_token(void *u, int64_t id, int32_t t, float lp) {
    (void)lp;
    qe_run *r = u;
    const int i = qe_slot(r, id);
    if (i >= 0 && r->n_tok[i] < QE_MAX_GEN) r->tok[i][r->n_tok[i]++] = t;
    return 0;
}

static void qe_on_logits(void *u, int64_t id, const float *lg, int vocab) {
    qe_run *r = u;
    const int i = qe_slot(r, id);
    if (i < 0 || r->n_logits[i] >= QE_MAX_GEN) return;
    if (!r->logits[i]) r->logits[i] = calloc((size_t)QE_MAX_GEN * vocab, sizeof(float));
    r->vocab = vocab;
    memcpy(r->logits[i] + (size_t)r->n_logits[i]++ * vocab, lg, (size_t)vocab * sizeof(float));
}

static void qe_on_finish(void *u, int64_t id, engine_finish why, const engine_seq_stats *st) {
    (void)id, (void)why, (void)st;
    ((qe_run *)u)->finished++;
}

__attribute__((unused)) static void qe_run_free(qe_run *r) {
    for (int i = 0; i < QE_MAX_SEQ; i++) free(r->logits[i]);
    memset(r, 0, sizeof *r);
}

/* Prompt i of a set: deterministic ids in [0, vocab). */
__attribute__((unused)) static int qe_prompt(int i, int vocab, int32_t *p) {
    const int n = i == 0 ? 29 : 3 + (i * 13) % 37;
    for (int k = 0; k < n; k++) p[k] = (int32_t)((i * 37 + k * 11 + 1) % vocab);
    return n;
}

/* Greedy, QE_MAX_GEN tokens each: prompts first..first+n-1 all submitted at once (when
 * stagger, half of them two steps later), n_parallel = n, prefill chunk `chunk`. */
__attribute__((unused)) static void qe_generate(model *m, int first, int n, int chunk, bool stagger, qe_run *r) {
    memset(r, 0, sizeof *r);
    const model_spec *spec = model_spec_of(m);
    engine_params p;
    engine_params_default(&p, spec);
    p.ctx_size = 96;
    p.n_parallel = n;
    p.prefill_chunk = chunk;
    p.block_size = 8;
    engine *e = NULL;
    mx_error err;
    if (engine_new(&e, m, &p, &err)) fail_msg("%s", err.msg);
    for (int i = 0; i < n; i++) {
        if (stagger && i == n / 2 + 1)
            for (int s = 0; s < 2; s++) assert_true(engine_step(e, &err) >= 0);
        int32_t pr[64];
        const int np = qe_prompt(first + i, spec->vocab_size, pr);
        engine_request rq = {.prompt = pr, .n_prompt = np, .max_tokens = QE_MAX_GEN,
                             .ignore_eos = true, .on_token = qe_on_token, .on_logits = qe_on_logits,
                             .on_finish = qe_on_finish, .user = r};
        sampling_params_default(&rq.sampling);
        rq.sampling.temperature = 0;
        r->n_seq = i + 1;
        r->ids[i] = -2; /* not yet known: callbacks cannot fire before engine_step */
        const int64_t id = engine_submit(e, &rq, &err);
        if (id < 0) fail_msg("%s", err.msg);
        r->ids[i] = id;
    }
    if (engine_run(e, &err)) fail_msg("%s", err.msg);
    engine_free(e);
    assert_int_equal(r->finished, n);
    for (int i = 0; i < n; i++) {
        assert_int_equal(r->n_tok[i], QE_MAX_GEN);
        assert_int_equal(r->n_logits[i], QE_MAX_GEN);
    }
}

/* Sequence a of run x equals sequence b of run y: tokens and raw logits, bit for bit. */
__attribute__((unused)) static bool qe_same(const qe_run *x, int a, const qe_run *y, int b) {
    return x->vocab == y->vocab && !memcmp(x->tok[a], y->tok[b], sizeof x->tok[a]) &&
           !memcmp(x->logits[a], y->logits[b], (size_t)QE_MAX_GEN * x->vocab * sizeof(float));
}

#endif
