/* `mlxcel compare`: quality of a model A (e.g. quantized) against a reference B (e.g. bf16).
 *
 * B generates n tokens greedily after the prompt; its next-token distribution at each of
 * those n positions is kept. A then runs teacher-forced over the same sequence (prompt + B's
 * tokens, chunked prefill) and at each position we compare:
 *   top-1 agreement  argmax A == B's token (%)
 *   KL(B || A)       sum_v p_B(v) (log p_B(v) - log p_A(v)), mean and max (nats)
 *   margin           B's top-1 minus top-2 logit, median over all positions and over the
 *                    positions where A disagrees (disagreements at near-ties are benign)
 * With --decode, A runs the prompt as prefill and then one token per forward, as generation
 * does: the one-row decode kernels (GEMV / qmv) are what is compared, not the prefill ones.
 * -ctk / -ctv set model A's KV cache types (B keeps the backend's: CPU f32), so `compare -m M
 * --ref M -ctk q8_0 -ctv q8_0` measures a quantized cache against the f32 one on one model.
 * One model is resident at a time (B is freed before A loads). Same device for both. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/gen_common.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "runtime/runtime.h"
#include "text/tokenizer.h"

#define CMP_CHUNK 256

typedef struct cmp_opts {
    const char *a, *b, *prompt, *ids, *device;
    int n;
    int tp_size;   /* --tp-size: tensor-parallel ranks of model A (-m); the reference runs whole */
    bool json;
    bool decode;   /* --decode: A's generated positions one token per forward (decode kernels) */
    kv_type ctk, ctv; /* -ctk / -ctv: model A's cache types (B: the backend's) */
} cmp_opts;

/* ==== One model over a sequence ==== */
typedef struct cmp_model {
    runtime rt;   /* backend + model (no tokenizer: compare feeds ids) */
    model *m;     /* rt.m */
    kv_cache *kv;
    int V;
} cmp_model;

static int cm_open(cmp_model *c, const char *dir, const char *device, int ctx, int tp, kv_type ctk,
                   kv_type ctv, mx_error *err) {
    memset(c, 0, sizeof *c);
    rt_opts ro;
    rt_opts_default(&ro);
    ro.model_dir = dir;
    ro.device = device;
    ro.tp_size = tp;
    ro.cache_type_k = ctk;
    ro.cache_type_v = ctv;
    ro.tokenizer = RT_TOK_NONE;
    if (runtime_open(&c->rt, &ro, err)) return mx_wrap(err, "model %s", dir);
    c->m = c->rt.m;
    const model_spec *s = c->rt.spec;
    kv_cache_params kp = {.storage = KV_STORAGE_DENSE, .n_layers = s->n_layers,
                          .n_kv_heads = s->n_kv_heads, .head_dim = s->head_dim,
                          .ctx_size = ctx, .n_seqs = 1, .tp_size = model_tp_size(c->m),
                          .type_k = ctk, .type_v = ctv, .v_is_k = s->kv_lora_rank > 0};
    if (kv_cache_new(&c->kv, &kp, c->rt.be, err)) return -1;
    c->V = s->vocab_size;
    return 0;
}

static void cm_close(cmp_model *c) {
    if (c->kv) kv_cache_free(c->kv);
    runtime_close(&c->rt);
    memset(c, 0, sizeof *c);
}

/* Forward of seq[p0, p1) (earlier positions already cached); logits of rows whose position
 * is in [o0, o1) into lg [(min(p1, o1) - max(p0, o0)), V]. Dense slot 0: row = position. */
static int cm_forward(cmp_model *c, const int32_t *seq, int p0, int p1, int o0, int o1, float *lg,
                      int *n_out, mx_error *err) {
    const int n = p1 - p0;
    int32_t *pos = malloc((size_t)n * 4), *sid = calloc((size_t)n, 4), *out = malloc((size_t)n * 4);
    int64_t *wr = malloc((size_t)n * 8);
    int32_t table[1] = {0};
    int no = 0, rc = -1;
    if (!pos || !sid || !out || !wr) {
        mx_fail(err, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        pos[i] = p0 + i, wr[i] = p0 + i;
        if (p0 + i >= o0 && p0 + i < o1) out[no++] = i;
    }
    model_batch b = {.n_rows = n, .tokens = seq + p0, .pos = pos, .seq = sid, .block_table = table,
                     .table_stride = 1, .n_seqs = 1, .write_rows = wr, .n_out = no, .out_rows = out};
    if (no == 0) { /* the forward needs one output row: take the last, discard it */
        b.n_out = 1;
        out[0] = n - 1;
        float *tmp = malloc((size_t)c->V * 4);
        rc = tmp ? model_forward(c->m, c->kv, &b, tmp, err) : mx_fail(err, "out of memory");
        free(tmp);
    } else {
        rc = model_forward(c->m, c->kv, &b, lg, err);
    }
    *n_out = no;
done:
    free(pos), free(sid), free(out), free(wr);
    return rc;
}

/* log-softmax in place (double accumulation); returns argmax; top-1 minus top-2 in *margin. */
static int log_softmax(float *l, int V, double *margin) {
    int am = 0;
    float m1 = -INFINITY, m2 = -INFINITY;
    for (int v = 0; v < V; v++) {
        if (l[v] > m1) m2 = m1, m1 = l[v], am = v;
        else if (l[v] > m2) m2 = l[v];
    }
    double s = 0;
    for (int v = 0; v < V; v++) s += exp((double)l[v] - m1);
    const double lse = m1 + log(s);
    for (int v = 0; v < V; v++) l[v] = (float)(l[v] - lse);
    if (margin) *margin = (double)m1 - m2;
    return am;
}

static int cmp_dbl(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    if (n < 1) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_dbl);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ==== Command ==== */
static int usage(void) {
    fprintf(stderr,
            "usage: mlxcel compare -m A --ref B (--prompt-ids 1,2,3 | -p TEXT) [-n 256]\n"
            "                      [--device cpu|cuda] [--tp-size N (model A)] [--decode]\n"
            "                      [-ctk TYPE] [-ctv TYPE] [--json]\n"
            "  B generates n tokens greedily; A runs teacher-forced over the same sequence\n"
            "  (chunked prefill; --decode: one token per forward after the prompt, as in\n"
            "  generation, so the decode kernels are compared).\n"
            "  -ctk/--cache-type-k, -ctv/--cache-type-v: model A's KV cache types (f32, f16,\n"
            "  bf16, q8_0, q4_0, turbo2, turbo3, turbo4; B keeps the backend's), e.g.\n"
            "  -m M --ref M -ctk q8_0 -ctv q8_0.\n"
            "  Reports top-1 agreement, KL(B||A) mean/max, median margin of B's top-1.\n");
    return 2;
}

static int parse(cmp_opts *o, int argc, char **argv) {
    memset(o, 0, sizeof *o);
    o->n = 256;
    o->tp_size = 1;
    o->device = "cpu";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const bool has = i + 1 < argc;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has) o->a = argv[++i];
        else if (!strcmp(a, "--ref") && has) o->b = argv[++i];
        else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && has) o->prompt = argv[++i];
        else if (!strcmp(a, "--prompt-ids") && has) o->ids = argv[++i];
        else if (!strcmp(a, "--device") && has) o->device = argv[++i];
        else if (!strcmp(a, "--json")) o->json = true;
        else if (!strcmp(a, "--decode")) o->decode = true;
        else if ((!strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k") || !strcmp(a, "-ctv") ||
                  !strcmp(a, "--cache-type-v")) && has) {
            const bool is_k = !strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k");
            mx_error e;
            if (kv_type_parse(argv[++i], is_k ? &o->ctk : &o->ctv, &e)) {
                fprintf(stderr, "mlxcel compare: %s: %s\n", a, e.msg);
                return -1;
            }
        }
        else if (!strcmp(a, "--tp-size") && has) {
            char *end = NULL;
            const long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 64) {
                fprintf(stderr, "mlxcel compare: --tp-size %s: expected an integer in [1, 64]\n", argv[i]);
                return -1;
            }
            o->tp_size = (int)v;
        } else if (!strcmp(a, "-n") && has) {
            char *end = NULL;
            const long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 1000000) {
                fprintf(stderr, "mlxcel compare: -n %s: expected an integer in [1, 1000000]\n", argv[i]);
                return -1;
            }
            o->n = (int)v;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            return 1;
        } else {
            fprintf(stderr, "mlxcel compare: unknown or incomplete option %s\n", a);
            return -1;
        }
    }
    if (!o->a || !o->b || (!o->prompt == !o->ids)) {
        fprintf(stderr, "mlxcel compare: need -m, --ref and exactly one of -p / --prompt-ids\n");
        return -1;
    }
    if (strcmp(o->device, "cpu") && strcmp(o->device, "cuda")) {
        fprintf(stderr, "mlxcel compare: --device %s: expected cpu or cuda\n", o->device);
        return -1;
    }
    return 0;
}

int cmd_compare(int argc, char **argv) {
    cmp_opts o;
    const int pr = parse(&o, argc, argv);
    if (pr) return pr > 0 ? (usage(), 0) : usage();
    mx_error err = {0};
    /* model A's cache types are refused before the reference runs (runtime_open checks again) */
    const backend_ops *be = backend_get(strcmp(o.device, "cuda") ? MX_DEV_CPU : MX_DEV_CUDA, &err);
    if (!be) {
        fprintf(stderr, "mlxcel compare: %s\n", err.msg);
        return 1;
    }
    int32_t *prompt = NULL, *seq = NULL;
    int P = 0, rc = 1;
    float *lpb = NULL, *lg = NULL;
    double *margin = NULL, *mdis = NULL;
    cmp_model c = {0};
    if (o.ids) {
        if (gen_parse_ids(o.ids, &prompt, &P, &err)) goto fail;
    } else {
        tokenizer *tok = NULL;
        size_t nn = 0;
        if (tok_load_dir(&tok, o.b, &err) ||
            tok_encode(tok, o.prompt, strlen(o.prompt), true, &prompt, &nn, &err)) {
            if (tok) tok_free(tok);
            goto fail;
        }
        tok_free(tok);
        P = (int)nn;
    }
    if (P < 1) {
        mx_fail(&err, "empty prompt");
        goto fail;
    }
    const int n = o.n, T = P + n;
    seq = malloc((size_t)T * 4);
    margin = malloc((size_t)n * sizeof *margin);
    mdis = malloc((size_t)n * sizeof *mdis);
    if (!seq || !margin || !mdis) {
        mx_fail(&err, "out of memory");
        goto fail;
    }
    memcpy(seq, prompt, (size_t)P * 4);

    /* ---- reference: greedy generation, log-probs kept ---- */
    if (kv_type_check(o.ctk, be, 0, "K", &err) || kv_type_check(o.ctv, be, 0, "V", &err)) goto fail;
    if (cm_open(&c, o.b, o.device, T, 1, KV_TYPE_DEFAULT, KV_TYPE_DEFAULT, &err)) goto fail;
    const int V = c.V;
    lpb = malloc((size_t)n * V * 4);
    lg = malloc((size_t)CMP_CHUNK * V * 4);
    if (!lpb || !lg) {
        mx_fail(&err, "out of memory for %d x %d log-probs", n, V);
        goto fail;
    }
    int no = 0;
    for (int p0 = 0; p0 < P; p0 += CMP_CHUNK) { /* prompt: logits of the last row only */
        const int p1 = p0 + CMP_CHUNK < P ? p0 + CMP_CHUNK : P;
        if (cm_forward(&c, seq, p0, p1, P - 1, P, lpb, &no, &err)) goto fail;
    }
    for (int t = 0; t < n; t++) {
        float *l = lpb + (size_t)t * V;
        seq[P + t] = log_softmax(l, V, &margin[t]);
        if (t + 1 < n && cm_forward(&c, seq, P + t, P + t + 1, P + t, P + t + 1,
                                    lpb + (size_t)(t + 1) * V, &no, &err))
            goto fail;
    }
    cm_close(&c);

    /* ---- model A teacher-forced ---- */
    if (cm_open(&c, o.a, o.device, T, o.tp_size, o.ctk, o.ctv, &err)) goto fail;
    const kv_cache_params *kvp = kv_cache_params_of(c.kv);
    if (c.V != V) {
        mx_fail(&err, "vocabulary sizes differ: %s has %d, %s has %d", o.a, c.V, o.b, V);
        goto fail;
    }
    int agree = 0, nd = 0, done = 0;
    double kl_sum = 0, kl_max = 0;
    for (int p0 = 0, p1; p0 < T - 1; p0 = p1) {
        p1 = p0 + CMP_CHUNK < T - 1 ? p0 + CMP_CHUNK : T - 1;
        if (o.decode) p1 = p0 < P ? (p1 < P ? p1 : P) : p0 + 1;
        if (cm_forward(&c, seq, p0, p1, P - 1, T - 1, lg, &no, &err)) goto fail;
        for (int i = 0; i < no; i++, done++) {
            float *la = lg + (size_t)i * V;
            const float *lb = lpb + (size_t)done * V;
            const int am = log_softmax(la, V, NULL);
            if (am == seq[P + done]) agree++;
            else mdis[nd++] = margin[done];
            double kl = 0;
            for (int v = 0; v < V; v++) {
                const double pb = exp((double)lb[v]);
                if (pb > 0) kl += pb * ((double)lb[v] - la[v]);
            }
            kl = kl < 0 ? 0 : kl; /* rounding of identical distributions */
            kl_sum += kl;
            if (kl > kl_max) kl_max = kl;
        }
    }
    if (done != n) {
        mx_fail(&err, "internal: compared %d of %d positions", done, n);
        goto fail;
    }
    const double top1 = 100.0 * agree / n, kl_mean = kl_sum / n;
    const double med_dis = median(mdis, nd), med = median(margin, n);
    if (o.json) {
        char dis[32];
        if (nd) snprintf(dis, sizeof dis, "%.6g", med_dis);
        else snprintf(dis, sizeof dis, "null");
        printf("{\"model\": \"%s\", \"ref\": \"%s\", \"device\": \"%s\", \"prompt_tokens\": %d, "
               "\"positions\": %d, \"top1_agreement_pct\": %.3f, \"kl_mean\": %.6g, \"kl_max\": %.6g, "
               "\"median_margin\": %.6g, \"median_margin_disagree\": %s, "
               "\"disagree\": %d, \"decode\": %s, \"cache_type_k\": \"%s\", \"cache_type_v\": \"%s\"}\n",
               o.a, o.b, o.device, P, n, top1, kl_mean, kl_max, med, dis, nd,
               o.decode ? "true" : "false", kv_type_name(kvp->type_k), kv_type_name(kvp->type_v));
    }
    else
        printf("compare %s (KV cache K %s, V %s) vs ref %s (%s): %d positions after a %d-token prompt\n"
               "  top-1 agreement %.2f%% (%d disagree), KL(ref||model) mean %.4g max %.4g nats, "
               "median margin %.3g (at disagreements %.3g)\n",
               o.a, kv_type_name(kvp->type_k), kv_type_name(kvp->type_v), o.b, o.device, n, P, top1, n - agree, kl_mean, kl_max, med, nd ? med_dis : NAN);
    rc = 0;
fail:
    if (rc) fprintf(stderr, "mlxcel compare: %s\n", err.msg);
    cm_close(&c);
    free(prompt), free(seq), free(lpb), free(lg), free(margin), free(mdis);
    return rc;
}
