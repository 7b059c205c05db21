/* End to end: every tiny checkpoint (tests/fixtures/models/<family>/ from the golden
 * generator, and tests/fixtures/ckpt/{llama_tiny,gemma3_sliding}) generates greedily on the
 * CPU and on CUDA, all prompts batched together (so decode steps run as captured graphs of
 * that batch size), and every one of the E2E_GEN positions is compared:
 * - tokens equal; where they differ, the CPU's top-1/top-2 margin at that position must be a
 *   near tie (<= E2E_TIE x (|top-1| + 1)): that position alone is excused, and both backends
 *   continue teacher-forced from the CPU's token (prompt + the CPU's tokens so far), so the
 *   positions after it are compared too;
 * - the logits of every compared position (the sequences equal up to it) within E2E_LOGITS
 *   relative L2 of the CPU's.
 * Every failure counts (gt_report): a model that fails to load on CUDA, a failed engine
 * creation, submit or run. Only the families of k_cpu_only may be refused by CUDA, and then
 * they must be (a stale entry fails too).
 *
 * Tolerances, from the measured runs (bench/results):
 * - E2E_TIE 2e-2: every divergence seen between CUDA and the CPU on these fixtures was a
 *   near tie of 2.5e-4 .. 5.4e-3 (2026-12-03-test-cuda-rows2.log: llama_q4g32 2.7e-4,
 *   qwen3_moe_q4g32 2.5e-4, llama_llama3 1.6e-3 / 1.2e-3, qwen3 3.2e-3, qwen3_moe 5.4e-3),
 *   while the one real defect found by this check (bf16 x in a MoE router GEMV, flipping a
 *   routing choice: 2026-12-03-attn-decode.md, section 4) showed as a divergence at 8.06e-2.
 *   2e-2 sits 3.7x above the largest benign one and 4x under that defect.
 * - E2E_LOGITS 3e-2: first-position logits measured 1.7e-3 .. 1.14e-2 relative
 *   (2026-12-03-test-cuda-rows2.log, worst gemma3_sliding prompt 0; llama4 fixtures
 *   2.3e-3 .. 6.9e-3, 2026-12-05-session25.md): 2.6x the worst. Positions past the first: the
 *   same bound; first measured on an H100 on 2026-12-08 (bench/results/2026-12-08-harden-
 *   h100.md): 1.9e-3 .. 1.02e-2 on the dense fixtures, mixtral 2.93e-2, qwen3_moe_q4g32
 *   2.38e-2, and over the bound qwen3_moe 6.19e-2 (position 1, weights unchanged: the first
 *   decode step of a MoE; not yet explained), llama4_text 5.32e-2 (weights regenerated that
 *   day); ckpt fixtures with peaked attention went to 0.13-0.85 (those scales reverted). The
 *   bound stays until the MoE case is understood: raising it to pass would hide a defect
 *   like the bf16 router one above.
 * Each fixture prints a `tokens <name> <hash>` line; bench/run_device.sh compares these lines
 * across MLX_CUDA_GRAPH_CACHE_SIZE=0 and MLXCEL_SDPA_DETERMINISTIC=1 runs. */
#include <dirent.h>
#include <jansson.h>
#include <sys/stat.h>

#include "backend/cuda/cuda_be.h"
#include "engine/engine.h"
#include "gpu_test.h"
#include "kv/kv_cache.h"

#define E2E_MAX_PROMPTS 8
#define E2E_GEN 24
#define E2E_MAX_PROMPT 128 /* prompt + teacher-forced tokens */
#define E2E_TIE 2e-2
#define E2E_LOGITS 3e-2

/* Families the CUDA backend refuses by design (model_type of config.json, and why). */
static const struct {
    const char *model_type, *why;
} k_cpu_only[] = {
    {"deepseek_v3", "multi-head latent attention runs on the CPU backend only (docs/deepseek.md)"},
    {"kimi_k2", "multi-head latent attention runs on the CPU backend only (docs/deepseek.md)"},
};

typedef struct e2e_run {
    int32_t toks[E2E_MAX_PROMPTS][E2E_GEN];
    float margin[E2E_MAX_PROMPTS][E2E_GEN]; /* top1 - top2 at each sampled position */
    float scale[E2E_MAX_PROMPTS][E2E_GEN];  /* |top1| + 1 */
    float *logits[E2E_MAX_PROMPTS][E2E_GEN]; /* [vocab] of each sampled position (with_logits) */
    float *first_logits[E2E_MAX_PROMPTS];    /* = logits[i][0] */
    int n[E2E_MAX_PROMPTS], vocab;
    int64_t ids[E2E_MAX_PROMPTS];
} e2e_run;

static void run_free(e2e_run *r) {
    for (int i = 0; i < E2E_MAX_PROMPTS; i++)
        for (int t = 0; t < E2E_GEN; t++) free(r->logits[i][t]);
    memset(r->logits, 0, sizeof r->logits);
    memset(r->first_logits, 0, sizeof r->first_logits);
}

static int slot(e2e_run *r, int64_t id) {
    for (int i = 0; i < E2E_MAX_PROMPTS; i++)
        if (r->ids[i] == id) return i;
    return -1;
}

static int on_tok(void *u, int64_t id, int32_t t, float lp) {
    (void)lp;
    e2e_run *r = u;
    const int i = slot(r, id);
    if (i >= 0 && r->n[i] < E2E_GEN) r->toks[i][r->n[i]++] = t;
    return 0;
}

static void on_logits(void *u, int64_t id, const float *lg, int V) {
    e2e_run *r = u;
    const int i = slot(r, id);
    if (i < 0 || r->n[i] >= E2E_GEN) return;
    float a = -INFINITY, b = -INFINITY;
    for (int v = 0; v < V; v++) {
        if (lg[v] > a) {
            b = a;
            a = lg[v];
        } else if (lg[v] > b) {
            b = lg[v];
        }
    }
    r->margin[i][r->n[i]] = a - b;
    r->scale[i][r->n[i]] = fabsf(a) + 1.0f;
    float *c = malloc((size_t)V * 4);
    if (c) memcpy(c, lg, (size_t)V * 4);
    r->logits[i][r->n[i]] = c;
    if (r->n[i] == 0) r->first_logits[i] = c;
    r->vocab = V;
}

/* KV cache types of the next runs (both backends; KV_TYPE_DEFAULT: each backend's own) */
static kv_type g_ctk, g_ctv;

/* Why CUDA may refuse this checkpoint (k_cpu_only), else NULL. */
static const char *cpu_only_reason(const char *dir) {
    model_spec s;
    mx_error err;
    if (spec_load(&s, dir, &err)) return NULL;
    for (size_t i = 0; i < sizeof k_cpu_only / sizeof k_cpu_only[0]; i++)
        if (!strcmp(s.model_type, k_cpu_only[i].model_type)) return k_cpu_only[i].why;
    return NULL;
}

/* One batched greedy run of n_prompts prompts, gen[i] tokens each. Returns 0, or -1 after
 * printing why (the caller counts the failure). */
static int run_model(const char *dir, const backend_ops *be, int32_t (*prompts)[E2E_MAX_PROMPT],
                     const int *np, const int *gen, int n_prompts, e2e_run *r, bool with_logits) {
    memset(r, 0, sizeof *r);
    for (int i = 0; i < E2E_MAX_PROMPTS; i++) r->ids[i] = -1;
    mx_error err;
    model *m = NULL;
    engine *e = NULL;
    if (model_load(&m, dir, be, &err)) {
        printf("FAIL %s on %s: load: %s\n", dir, be->name, err.msg);
        return -1;
    }
    engine_params ep;
    engine_params_default(&ep, model_spec_of(m));
    ep.n_parallel = n_prompts;
    ep.ctx_size = E2E_MAX_PROMPT + E2E_GEN;
    ep.cache_type_k = g_ctk;
    ep.cache_type_v = g_ctv;
    int rc = -1;
    if (engine_new(&e, m, &ep, &err)) {
        printf("FAIL %s on %s: engine: %s\n", dir, be->name, err.msg);
        goto out;
    }
    for (int i = 0; i < n_prompts; i++) {
        engine_request q = {.prompt = prompts[i], .n_prompt = np[i], .max_tokens = gen[i],
                            .ignore_eos = true, .on_token = on_tok,
                            .on_logits = with_logits ? on_logits : NULL, .user = r,
                            .allow_device_sampling = true};
        sampling_params_default(&q.sampling);
        r->ids[i] = engine_submit(e, &q, &err);
        if (r->ids[i] < 0) {
            printf("FAIL %s on %s: submit: %s\n", dir, be->name, err.msg);
            goto out;
        }
    }
    if (engine_run(e, &err) < 0) {
        printf("FAIL %s on %s: run: %s\n", dir, be->name, err.msg);
        goto out;
    }
    for (int i = 0; i < n_prompts; i++)
        if (r->n[i] != gen[i]) {
            printf("FAIL %s on %s: prompt %d gave %d tokens, %d asked\n", dir, be->name, i,
                   r->n[i], gen[i]);
            goto out;
        }
    rc = 0;
out:
    engine_free(e);
    model_free(m);
    return rc;
}

/* The prompts of a fixture (expected.json's, else three fixed ones); returns their count. */
static int fixture_prompts(const char *dir, int32_t (*prompts)[E2E_MAX_PROMPT], int *np) {
    int n_prompts = 0;
    char p[1024];
    snprintf(p, sizeof p, "%s/expected.json", dir);
    json_t *j = json_load_file(p, 0, NULL);
    const json_t *cases = j ? json_object_get(j, "cases") : NULL;
    for (size_t c = 0; cases && c < json_array_size(cases) && n_prompts < E2E_MAX_PROMPTS; c++) {
        const json_t *ids = json_object_get(json_array_get(cases, c), "prompt_ids");
        if (!json_is_array(ids) || json_array_size(ids) < 1 ||
            json_array_size(ids) > E2E_MAX_PROMPT - E2E_GEN)
            continue;
        for (size_t i = 0; i < json_array_size(ids); i++)
            prompts[n_prompts][i] = (int32_t)json_integer_value(json_array_get(ids, i));
        np[n_prompts++] = (int)json_array_size(ids);
    }
    json_decref(j);
    if (!n_prompts) { /* no expected.json: fixed prompts of small ids */
        static const int lens[3] = {5, 17, 33};
        for (int i = 0; i < 3; i++) {
            for (int t = 0; t < lens[i]; t++) prompts[i][t] = (int32_t)((t * 7 + i * 3 + 1) % 29 + 1);
            np[i] = lens[i];
        }
        n_prompts = 3;
    }
    return n_prompts;
}

/* A checkpoint CUDA refuses: fine only for a declared CPU-only family, which it must refuse. */
static bool e2e_cpu_only(const char *dir, const char *name) {
    const char *why = cpu_only_reason(dir);
    if (!why) return false;
    model *m = NULL;
    mx_error err;
    char what[300];
    const int rc = model_load(&m, dir, g_gpu, &err);
    model_free(m);
    snprintf(what, sizeof what, "e2e %s: CPU-only family, CUDA refuses it (%.120s)", name, why);
    /* loading on CUDA now: the k_cpu_only entry is stale, remove it so the family is compared */
    gt_report(what, rc ? 0.0 : 1.0, 0, 0);
    return true;
}

/* CPU against CUDA as the header says; slack widens both bounds (0: as stated there). */
static void e2e_compare(const char *dir, const char *name, double slack) {
    if (e2e_cpu_only(dir, name)) return;
    int32_t (*prompts)[E2E_MAX_PROMPT] = calloc(E2E_MAX_PROMPTS, sizeof *prompts);
    int np[E2E_MAX_PROMPTS], gen[E2E_MAX_PROMPTS];
    const int n_prompts = fixture_prompts(dir, prompts, np);
    e2e_run *cpu = calloc(1, sizeof *cpu), *gpu = calloc(1, sizeof *gpu), *dg = calloc(1, sizeof *dg);
    char what[240];
    for (int i = 0; i < n_prompts; i++) gen[i] = E2E_GEN;
    /* round 0: CPU and CUDA with a logits callback (host sampling), then CUDA without one:
     * plain greedy requests take the device-greedy path, which must give the same tokens */
    if (run_model(dir, g_cpu, prompts, np, gen, n_prompts, cpu, true) ||
        run_model(dir, g_gpu, prompts, np, gen, n_prompts, gpu, true) ||
        run_model(dir, g_gpu, prompts, np, gen, n_prompts, dg, false)) {
        snprintf(what, sizeof what, "e2e %s: CPU, CUDA and CUDA device-greedy runs", name);
        gt_report(what, 1, 0, 0);
        goto done;
    }
    snprintf(what, sizeof what, "e2e %s: device greedy == host greedy on CUDA", name);
    gt_report(what, memcmp(gpu->toks, dg->toks, sizeof gpu->toks) ? 1.0 : 0.0, 0, 0);
    /* per prompt: the positions compared so far (done[i]) and the CPU's tokens over them;
     * each round's runs hold the prompts cur[0..n_cur) in their slots 0..n_cur-1 */
    int done[E2E_MAX_PROMPTS] = {0}, excused[E2E_MAX_PROMPTS] = {0}, bad_at[E2E_MAX_PROMPTS];
    int cur[E2E_MAX_PROMPTS], n_cur = n_prompts;
    int32_t cpu_seq[E2E_MAX_PROMPTS][E2E_GEN];
    double worst_logits = 0;
    int n_logits = 0;
    uint64_t hash = 1469598103934665603ull;
    for (int i = 0; i < n_prompts; i++) {
        bad_at[i] = -1;
        cur[i] = i;
        for (int t = 0; t < gpu->n[i]; t++) hash = (hash ^ (uint64_t)gpu->toks[i][t]) * 1099511628211ull;
    }
    for (int round = 0; n_cur > 0; round++) { /* each round advances done[] by >= 1 */
        int next[E2E_MAX_PROMPTS], n_next = 0;
        for (int s = 0; s < n_cur; s++) {
            const int i = cur[s], len = E2E_GEN - done[i];
            int t = 0;
            for (; t < len; t++) {
                /* the logits of every position whose context is the same on both (a position
                 * where the picks then differ included) */
                if (cpu->logits[s][t] && gpu->logits[s][t]) {
                    long nb;
                    const double e = gt_rel_err(gpu->logits[s][t], cpu->logits[s][t],
                                                (size_t)cpu->vocab, &nb);
                    worst_logits = e > worst_logits ? e : worst_logits;
                    n_logits++;
                    if (e > E2E_LOGITS + slack || nb) {
                        snprintf(what, sizeof what, "e2e %s prompt %d position %d: logits", name, i,
                                 done[i] + t);
                        gt_report_err(what, e, E2E_LOGITS + slack, &nb);
                    }
                }
                if (cpu->toks[s][t] != gpu->toks[s][t]) break;
                cpu_seq[i][done[i] + t] = cpu->toks[s][t];
            }
            if (t == len) {
                done[i] = E2E_GEN;
                continue;
            }
            const double rel_margin = cpu->margin[s][t] / cpu->scale[s][t];
            if (rel_margin > E2E_TIE + slack) { /* a wide margin moved: a defect */
                snprintf(what, sizeof what, "e2e %s prompt %d: differ at %d (got %d, CPU %d), CPU "
                         "margin %.2e (near tie <= %.1e)", name, i, done[i] + t, gpu->toks[s][t],
                         cpu->toks[s][t], rel_margin, E2E_TIE + slack);
                gt_report(what, rel_margin, E2E_TIE + slack, 0);
                bad_at[i] = done[i] + t;
                continue;
            }
            printf("note e2e %s prompt %d: position %d excused, CPU margin %.2e (near tie); "
                   "teacher-forced from the CPU's token\n", name, i, done[i] + t, rel_margin);
            cpu_seq[i][done[i] + t] = cpu->toks[s][t];
            done[i] += t + 1;
            excused[i]++;
            if (done[i] < E2E_GEN) next[n_next++] = i;
        }
        if (n_next == 0) break;
        /* next round: the prompts that diverged at a near tie, continued from the CPU's tokens */
        int32_t (*tf)[E2E_MAX_PROMPT] = calloc(E2E_MAX_PROMPTS, sizeof *tf);
        int tnp[E2E_MAX_PROMPTS], tgen[E2E_MAX_PROMPTS];
        for (int k = 0; k < n_next; k++) {
            const int i = next[k];
            memcpy(tf[k], prompts[i], (size_t)np[i] * 4);
            memcpy(tf[k] + np[i], cpu_seq[i], (size_t)done[i] * 4);
            tnp[k] = np[i] + done[i];
            tgen[k] = E2E_GEN - done[i];
        }
        run_free(cpu);
        run_free(gpu);
        const int rc = run_model(dir, g_cpu, tf, tnp, tgen, n_next, cpu, true) ||
                       run_model(dir, g_gpu, tf, tnp, tgen, n_next, gpu, true);
        free(tf);
        if (rc) {
            snprintf(what, sizeof what, "e2e %s: teacher-forced round %d runs", name, round + 1);
            gt_report(what, 1, 0, 0);
            goto done;
        }
        memcpy(cur, next, sizeof next);
        n_cur = n_next;
    }
    for (int i = 0; i < n_prompts; i++) {
        if (bad_at[i] >= 0) continue;
        snprintf(what, sizeof what, "e2e %s prompt %d: %d positions compared, %d near ties excused",
                 name, i, E2E_GEN, excused[i]);
        gt_report(what, done[i] == E2E_GEN ? 0 : 1, 0, 0);
    }
    snprintf(what, sizeof what, "e2e %s: logits of %d positions (worst shown)", name, n_logits);
    gt_report(what, n_logits > 0 ? worst_logits : 1.0, E2E_LOGITS + slack, 0);
    printf("tokens %s %016llx\n", name, (unsigned long long)hash);
done:
    run_free(cpu);
    run_free(gpu);
    run_free(dg);
    free(cpu);
    free(gpu);
    free(dg);
    free(prompts);
}

void gt_e2e_fixture(const char *dir, const char *name) { e2e_compare(dir, name, 0); }

/* With KV cache types (g_ctk / g_ctv) on both backends. The pools hold the bytes each
 * backend's K/V rows round to, and CUDA's rows differ from the CPU's by its bf16 products, so
 * a coarse type (4 bits and below) can round a value a whole step the other way: the two runs
 * may differ by up to the type's own error on either side. That error, e = the largest
 * first-logits relative error of the CPU with the type against the CPU with f32 over the
 * prompts, widens both bounds by 2 e (the triangle inequality through the f32 runs, whose
 * CPU / CUDA difference the plain bounds already cover). */
static void e2e_typed(const char *dir, const char *name) {
    int32_t (*prompts)[E2E_MAX_PROMPT] = calloc(E2E_MAX_PROMPTS, sizeof *prompts);
    int np[E2E_MAX_PROMPTS], gen[E2E_MAX_PROMPTS];
    const int n_prompts = fixture_prompts(dir, prompts, np);
    for (int i = 0; i < n_prompts; i++) gen[i] = E2E_GEN;
    e2e_run *t = calloc(1, sizeof *t), *f = calloc(1, sizeof *f);
    const kv_type ck = g_ctk, cv = g_ctv;
    double e = -1;
    if (!run_model(dir, g_cpu, prompts, np, gen, n_prompts, t, true)) {
        g_ctk = g_ctv = KV_TYPE_F32;
        if (!run_model(dir, g_cpu, prompts, np, gen, n_prompts, f, true)) {
            e = 0;
            for (int i = 0; i < n_prompts; i++) {
                long bad;
                const double r = gt_rel_err(t->first_logits[i], f->first_logits[i], (size_t)f->vocab, &bad);
                e = r > e ? r : e;
            }
        }
        g_ctk = ck, g_ctv = cv;
    }
    run_free(t);
    run_free(f);
    free(t);
    free(f);
    free(prompts);
    char full[200];
    snprintf(full, sizeof full, "%s (CPU's own error vs f32 %.2e)", name, e);
    if (e < 0) gt_report(full, 1, 0, 0);
    else e2e_compare(dir, full, 2 * e);
}

void gt_e2e_tiled(const char *dir, const char *name, bool bitwise) {
    int32_t prompts[3][E2E_MAX_PROMPT];
    int np[3];
    const int gen[3] = {E2E_GEN, E2E_GEN, E2E_GEN};
    static const int lens[3] = {5, 40, 17}; /* prefill 62 rows: qmm; decode 3 rows */
    for (int i = 0; i < 3; i++) {
        for (int t = 0; t < lens[i]; t++) prompts[i][t] = (int32_t)((t * 11 + i * 5 + 3) % 97 + 4);
        np[i] = lens[i];
    }
    e2e_run *r[2] = {calloc(1, sizeof(e2e_run)), calloc(1, sizeof(e2e_run))};
    const bool was = g_cu.qmv_tiled;
    uint64_t repacked[2];
    int rc = 0;
    for (int t = 0; t < 2 && !rc; t++) {
        g_cu.qmv_tiled = t == 1;
        const uint64_t r0 = g_cu.up_repacked;
        rc = run_model(dir, g_gpu, prompts, np, gen, 3, r[t], true);
        repacked[t] = g_cu.up_repacked - r0;
    }
    g_cu.qmv_tiled = was;
    char what[200];
    if (rc) {
        snprintf(what, sizeof what, "e2e %s tiled: both loads ran", name);
        gt_report(what, 1, 0, 0);
    } else {
        snprintf(what, sizeof what, "e2e %s: %llu weights repacked at load, 0 with "
                 "MLXCEL_QMV_TILED=0", name, (unsigned long long)repacked[1]);
        gt_report(what, repacked[1] > 0 && repacked[0] == 0 ? 0 : 1, 0, 0);
        for (int i = 0; i < 3; i++) {
            int diverge = -1;
            for (int t = 0; t < E2E_GEN && diverge < 0; t++)
                if (r[0]->toks[i][t] != r[1]->toks[i][t]) diverge = t;
            long bad = 0;
            const double rel = gt_rel_err(r[1]->first_logits[i], r[0]->first_logits[i],
                                          (size_t)r[0]->vocab, &bad);
            if (bitwise) {
                snprintf(what, sizeof what, "e2e %s prompt %d: tiled == MLX layout, tokens and "
                         "first logits bitwise", name, i);
                const bool same = diverge < 0 && !memcmp(r[0]->first_logits[i],
                                                         r[1]->first_logits[i],
                                                         (size_t)r[0]->vocab * 4);
                gt_report(what, same ? 0 : fmax(rel, 1e-30), 0, bad);
            } else {
                const double m = diverge < 0 ? 0 : r[0]->margin[i][diverge] / r[0]->scale[i][diverge];
                snprintf(what, sizeof what, "e2e %s prompt %d: tiled vs MLX layout, tokens "
                         "(differ at %d, margin %.2e <= 2e-2)", name, i, diverge, m);
                gt_report(what, m, 2e-2, 0);
                snprintf(what, sizeof what, "e2e %s prompt %d: tiled vs MLX layout, first logits",
                         name, i);
                gt_report_err(what, rel, 1e-3, &bad);
            }
        }
    }
    for (int t = 0; t < 2; t++) {
        run_free(r[t]);
        free(r[t]);
    }
}

int gt_run_e2e_tests(const char *src) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/models", src);
    DIR *d = opendir(dir);
    int n = 0;
    if (d) {
        struct dirent *de;
        char names[64][200];
        while ((de = readdir(d)) && n < 64)
            if (de->d_name[0] != '.') snprintf(names[n++], sizeof names[0], "%.199s", de->d_name);
        closedir(d);
        for (int i = 0; i < n; i++) { /* sorted: stable output order */
            for (int k = i + 1; k < n; k++)
                if (strcmp(names[k], names[i]) < 0) {
                    char t[200];
                    memcpy(t, names[i], sizeof t);
                    memcpy(names[i], names[k], sizeof t);
                    memcpy(names[k], t, sizeof t);
                }
            char p[1400 + 256];
            snprintf(p, sizeof p, "%.1023s/%.199s", dir, names[i]);
            gt_e2e_fixture(p, names[i]);
        }
    }
    /* every golden fixture (16 committed): a lost directory is a failure, not a shorter run */
    char what[1100];
    snprintf(what, sizeof what, "e2e: %d golden fixtures under %s (16 expected)", n, dir);
    gt_report(what, n >= 16 ? 0 : 1, 0, 0);
    static const char *extra[] = {"llama_tiny", "gemma3_sliding"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(dir, sizeof dir, "%s/tests/fixtures/ckpt/%s", src, extra[i]);
        gt_e2e_fixture(dir, extra[i]);
    }
    /* KV cache types (-ctk / -ctv) on the demo model (heads of 64: every type applies), the
     * same type on both backends (e2e_typed's bounds) */
    static const kv_type tk[][2] = {
        {KV_TYPE_F32, KV_TYPE_F32},       {KV_TYPE_F16, KV_TYPE_F16},
        {KV_TYPE_Q8_0, KV_TYPE_Q8_0},     {KV_TYPE_Q4_0, KV_TYPE_Q4_0},
        {KV_TYPE_TURBO4, KV_TYPE_TURBO4}, {KV_TYPE_TURBO3, KV_TYPE_TURBO2},
        {KV_TYPE_Q8_0, KV_TYPE_TURBO4},
    };
    snprintf(dir, sizeof dir, "%s/models/wordnet-chat-16m", src);
    for (size_t i = 0; i < sizeof tk / sizeof tk[0]; i++) {
        g_ctk = tk[i][0];
        g_ctv = tk[i][1];
        char name[96];
        snprintf(name, sizeof name, "wordnet-chat-16m ctk %s ctv %s", kv_type_name(g_ctk),
                 kv_type_name(g_ctv));
        e2e_typed(dir, name);
    }
    g_ctk = g_ctv = KV_TYPE_DEFAULT;
    return 0;
}
