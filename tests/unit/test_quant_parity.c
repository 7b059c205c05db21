/* Quantized models against transformers on their dequantized weights.
 *
 * tests/fixtures/quant_parity/<name>/ holds q/ (an MLX-quantized checkpoint written by
 * `mlxcel convert -q`), deq/ (its `convert -d` twin; both by
 * tools/reference/make_quant_parity_inputs.sh) and, once the lead has run
 * tools/reference/quant_parity.py deq OUT on the GPU machine, expected.json: transformers'
 * fp32 greedy tokens and first-position logits on deq's weights. For every case the engine on
 * q/ must give the same greedy tokens (compared up to the first step whose reference top-2
 * relative margin is below 1e-4: a random tiny model may have near-ties that fp32 rounding
 * decides either way), logits within ||out - ref|| / ||ref|| <= 1e-4, and the logits of
 * transformers' top-2 ids at every position up to there (`steps`) within 3e-5 of the step's
 * largest (measured worst 3.1e-6, see STEP_TOL).
 * Always: q/ and deq/ give bitwise identical logits in the engine (so the reference was
 * computed on exactly the weights the quantized model multiplies by). A directory without
 * expected.json FAILS (a missing reference must not pass as parity), and every directory must
 * compare at least one case and tokens and step logits past the first position. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <unistd.h>

#include "quant_engine_util.h"

#define MAX_NEW 64
/* top-2 logits of later positions against transformers, relative to the step's largest |value|
 * (measured: worst 3.1e-6, gemma3_sliding_q4g32, the others <= 6.9e-7, AVX2; 10x left for
 * other ISAs' rounding; a bf16 ulp is 3.9e-3) */
#define STEP_TOL 3e-5
static double g_worst;

typedef struct cap {
    int64_t id;
    int n;
    int32_t tok[MAX_NEW];
    float *first;
    float *steps; /* [n_lg, vocab] every sampled position's logits */
    int n_lg;
    int vocab;
} cap;

static int on_tok(void *u, int64_t id, int32_t t, float lp) {
    (void)id, (void)lp;
    cap *c = u;
    if (c->n < MAX_NEW) c->tok[c->n++] = t;
    return 0;
}

static void on_lg(void *u, int64_t id, const float *lg, int vocab) {
    (void)id;
    cap *c = u;
    if (c->n_lg < MAX_NEW) {
        float *n = realloc(c->steps, (size_t)(c->n_lg + 1) * vocab * sizeof(float));
        if (!n) fail_msg("out of memory");
        c->steps = n;
        memcpy(n + (size_t)c->n_lg++ * vocab, lg, (size_t)vocab * sizeof(float));
    }
    if (c->first) return;
    c->first = malloc((size_t)vocab * sizeof(float));
    memcpy(c->first, lg, (size_t)vocab * sizeof(float));
    c->vocab = vocab;
}

static void run_case(model *m, const int32_t *prompt, int np, int n_new, cap *c) {
    memset(c, 0, sizeof *c);
    engine_params p;
    engine_params_default(&p, model_spec_of(m));
    p.ctx_size = np + n_new + 1;
    engine *e = NULL;
    mx_error err;
    if (engine_new(&e, m, &p, &err)) fail_msg("%s", err.msg);
    engine_request rq = {.prompt = prompt, .n_prompt = np, .max_tokens = n_new, .ignore_eos = true,
                         .on_token = on_tok, .on_logits = on_lg, .user = c};
    sampling_params_default(&rq.sampling);
    rq.sampling.temperature = 0;
    if (engine_submit(e, &rq, &err) < 0 || engine_run(e, &err)) fail_msg("%s", err.msg);
    engine_free(e);
}

static int check_dir(const char *dir, const char *name) {
    char qd[800], dd[800], ej[800];
    snprintf(qd, sizeof qd, "%s/q", dir);
    snprintf(dd, sizeof dd, "%s/deq", dir);
    snprintf(ej, sizeof ej, "%s/expected.json", dir);
    model *q = NULL, *d = NULL;
    mx_error err;
    if (model_load(&q, qd, backend_cpu(), &err) || model_load(&d, dd, backend_cpu(), &err))
        fail_msg("%s", err.msg);
    int nw, nq;
    model_quant_counts(q, &nw, &nq);
    assert_true(nq > 0);
    qe_run rq, rd;
    qe_generate(q, 0, 3, 7, false, &rq);
    qe_generate(d, 0, 3, 7, false, &rd);
    for (int i = 0; i < 3; i++)
        if (!qe_same(&rq, i, &rd, i)) fail_msg("%s: q/ and deq/ differ (prompt %d)", name, i);
    qe_run_free(&rq);
    qe_run_free(&rd);
    model_free(d);
    int checked = 0;
    json_error_t je;
    if (access(ej, R_OK))
        fail_msg("%s: no expected.json: make it with tools/reference/quant_parity.py on the GPU "
                 "machine (a checkpoint without its transformers reference checks nothing)", name);
    json_t *doc = json_load_file(ej, 0, &je);
    if (!doc) fail_msg("%s: %s", ej, je.text);
    int n_tok_checked = 0, n_step_checked = 0;
    json_t *cases = json_object_get(doc, "cases");
    assert_true(json_is_array(cases) && json_array_size(cases) > 0);
    const int V = model_spec_of(q)->vocab_size;
    for (size_t ci = 0; ci < json_array_size(cases); ci++) {
        json_t *cs = json_array_get(cases, ci);
        json_t *jp = json_object_get(cs, "prompt_ids"), *jg = json_object_get(cs, "greedy");
        json_t *jl = json_object_get(cs, "logits"), *js = json_object_get(cs, "steps");
        const int np = (int)json_array_size(jp), ng = (int)json_array_size(jg);
        assert_true(np > 0 && ng > 0 && ng <= MAX_NEW && (int)json_array_size(jl) == V);
        int32_t *prompt = malloc((size_t)np * sizeof(int32_t));
        for (int i = 0; i < np; i++) prompt[i] = (int32_t)json_integer_value(json_array_get(jp, i));
        cap c;
        run_case(q, prompt, np, ng, &c);
        assert_int_equal(c.n, ng);
        /* tokens, up to the first undecidable step of the reference */
        int upto = ng;
        for (int s = 0; js && s < (int)json_array_size(js); s++) {
            json_t *st = json_array_get(js, s);
            const double t1 = json_number_value(json_array_get(st, 1));
            const double t2 = json_number_value(json_array_get(st, 3));
            if ((t1 - t2) / (fabs(t1) + 1e-30) < 1e-4) {
                /* the pick at step s may go either way, and everything after it with it */
                fprintf(stderr, "note: %s case %zu: near-tie at step %d, tokens compared to it\n",
                        name, ci, s);
                upto = s;
                break;
            }
        }
        for (int s = 0; s < upto; s++)
            if (c.tok[s] != (int32_t)json_integer_value(json_array_get(jg, s)))
                fail_msg("%s case %zu: token %d is %d, transformers %lld", name, ci, s, c.tok[s],
                         (long long)json_integer_value(json_array_get(jg, s)));
        n_tok_checked += upto;
        /* the top-2 logits of every position whose prefix is transformers' (up to and
         * including the near-tie step itself: its logits are still defined) */
        for (int s = 0; js && s < (int)json_array_size(js) && s <= upto && s < c.n_lg; s++) {
            json_t *st = json_array_get(js, s);
            const double v1 = json_number_value(json_array_get(st, 1));
            const double v2 = json_number_value(json_array_get(st, 3));
            const double scale = fmax(fmax(fabs(v1), fabs(v2)), 1e-30);
            for (int j = 0; j < 2; j++) {
                const json_int_t id = json_integer_value(json_array_get(st, (size_t)(2 * j)));
                const double ref = j ? v2 : v1;
                if (id < 0 || id >= V) fail_msg("%s case %zu step %d: id %lld", name, ci, s, (long long)id);
                const double err = fabs(c.steps[(size_t)s * V + id] - ref) / scale;
                if (err > g_worst) g_worst = err;
                if (err > STEP_TOL)
                    fail_msg("%s case %zu step %d: logit of id %lld is %.6g, transformers %.6g "
                             "(err %.3g of the step's max > %.0e)", name, ci, s, (long long)id,
                             c.steps[(size_t)s * V + id], ref, err, STEP_TOL);
                n_step_checked++;
            }
        }
        double num = 0, den = 0;
        for (int v = 0; v < V; v++) {
            const double r = json_number_value(json_array_get(jl, v)), dv = c.first[v] - r;
            num += dv * dv;
            den += r * r;
        }
        const double rel = sqrt(num / (den + 1e-30));
        if (rel > 1e-4) fail_msg("%s case %zu: logits rel err %g > 1e-4", name, ci, rel);
        fprintf(stderr, "%s case %zu: %d/%d tokens equal, logits rel err %.2e\n", name, ci, upto,
                ng, rel);
        free(c.first);
        free(c.steps);
        free(prompt);
        checked++;
    }
    json_decref(doc);
    model_free(q);
    /* nothing compared is not parity: at least one case, tokens past the first, and logits of
     * positions past the first */
    if (checked == 0 || n_tok_checked < 2 || n_step_checked <= 2 * checked)
        fail_msg("%s: only %d cases, %d tokens, %d step logits compared", name, checked,
                 n_tok_checked, n_step_checked);
    fprintf(stderr, "%s: %d cases, %d tokens, %d step logits (worst err %.2e)\n", name, checked,
            n_tok_checked, n_step_checked, g_worst);
    g_worst = 0;
    return checked;
}

static void test_quant_parity(void **st) {
    (void)st;
    const char *src = getenv("MLXCEL_SOURCE_DIR");
    if (!src) fail_msg("MLXCEL_SOURCE_DIR is not set (run through ctest)");
    char dir[400];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/quant_parity", src);
    DIR *dp = opendir(dir);
    if (!dp) fail_msg("%s: missing (tools/reference/make_quant_parity_inputs.sh)", dir);
    struct dirent *ent;
    int n_dirs = 0, n_cases = 0;
    while ((ent = readdir(dp))) {
        char sub[700], cfg[760];
        if (ent->d_name[0] == '.') continue;
        snprintf(sub, sizeof sub, "%s/%s", dir, ent->d_name);
        snprintf(cfg, sizeof cfg, "%s/q/config.json", sub);
        if (access(cfg, R_OK)) continue;
        n_cases += check_dir(sub, ent->d_name);
        n_dirs++;
    }
    closedir(dp);
    /* every fixture directory of make_quant_parity_inputs.sh (a smaller count is a lost one) */
    if (n_dirs < 10) fail_msg("%d quant parity checkpoints found under %s, 10 expected", n_dirs, dir);
    assert_true(n_cases >= 3 * n_dirs);
    fprintf(stderr, "quant parity: %d checkpoints, %d cases against transformers\n", n_dirs, n_cases);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_quant_parity)};
    return cmocka_run_group_tests(tests, tmp_setup, tmp_teardown);
}
