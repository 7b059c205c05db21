/* End to end: every tiny checkpoint (tests/fixtures/models/<family>/ from the golden
 * generator, and tests/fixtures/ckpt/{llama_tiny,gemma3_sliding}) generates greedily on the
 * CPU and on CUDA, all prompts batched together (so decode steps run as captured graphs of
 * that batch size). Tokens must be identical "where margins allow": at the first position
 * where they differ, the CPU's top-1/top-2 logit margin must be below 2e-2 x (|top-1| + 1)
 * (bf16 KV / cuBLASLt rounding can flip a near tie; a wide margin is a bug). The first
 * sampled position's logits are compared by relative error (<= 3e-2).
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

typedef struct e2e_run {
    int32_t toks[E2E_MAX_PROMPTS][E2E_GEN];
    float margin[E2E_MAX_PROMPTS][E2E_GEN]; /* top1 - top2 at each sampled position */
    float scale[E2E_MAX_PROMPTS][E2E_GEN];  /* |top1| + 1 */
    float *first_logits[E2E_MAX_PROMPTS];
    int n[E2E_MAX_PROMPTS], vocab;
    int64_t ids[E2E_MAX_PROMPTS];
} e2e_run;

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
    if (!r->first_logits[i]) {
        r->first_logits[i] = malloc((size_t)V * 4);
        memcpy(r->first_logits[i], lg, (size_t)V * 4);
        r->vocab = V;
    }
}

/* KV cache types of the next runs (both backends; KV_TYPE_DEFAULT: each backend's own) */
static kv_type g_ctk, g_ctv;

static int run_model(const char *dir, const backend_ops *be, int32_t (*prompts)[64], const int *np,
                     int n_prompts, e2e_run *r, bool with_logits) {
    memset(r, 0, sizeof *r);
    for (int i = 0; i < E2E_MAX_PROMPTS; i++) r->ids[i] = -1;
    mx_error err;
    model *m = NULL;
    engine *e = NULL;
    if (model_load(&m, dir, be, &err)) {
        printf("skip %s on %s: %s\n", dir, be->name, err.msg);
        return -1;
    }
    engine_params ep;
    engine_params_default(&ep, model_spec_of(m));
    ep.n_parallel = n_prompts;
    ep.ctx_size = 128;
    ep.cache_type_k = g_ctk;
    ep.cache_type_v = g_ctv;
    int rc = -1;
    if (engine_new(&e, m, &ep, &err)) {
        printf("FAIL %s on %s: %s\n", dir, be->name, err.msg);
        goto out;
    }
    for (int i = 0; i < n_prompts; i++) {
        engine_request q = {.prompt = prompts[i], .n_prompt = np[i], .max_tokens = E2E_GEN,
                            .ignore_eos = true, .on_token = on_tok,
                            .on_logits = with_logits ? on_logits : NULL, .user = r,
                            .allow_device_sampling = true};
        sampling_params_default(&q.sampling);
        r->ids[i] = engine_submit(e, &q, &err);
        if (r->ids[i] < 0) {
            printf("FAIL %s: submit: %s\n", dir, err.msg);
            goto out;
        }
    }
    if (engine_run(e, &err) < 0) {
        printf("FAIL %s on %s: %s\n", dir, be->name, err.msg);
        goto out;
    }
    rc = 0;
out:
    engine_free(e);
    model_free(m);
    return rc;
}

/* The prompts of a fixture (expected.json's, else three fixed ones); returns their count. */
static int fixture_prompts(const char *dir, int32_t (*prompts)[64], int *np) {
    int n_prompts = 0;
    char p[1024];
    snprintf(p, sizeof p, "%s/expected.json", dir);
    json_t *j = json_load_file(p, 0, NULL);
    const json_t *cases = j ? json_object_get(j, "cases") : NULL;
    for (size_t c = 0; cases && c < json_array_size(cases) && n_prompts < E2E_MAX_PROMPTS; c++) {
        const json_t *ids = json_object_get(json_array_get(cases, c), "prompt_ids");
        if (!json_is_array(ids) || json_array_size(ids) < 1 || json_array_size(ids) > 64) continue;
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

/* CPU against CUDA as the header says; slack widens both bounds (0: as stated there). */
static void e2e_compare(const char *dir, const char *name, double slack) {
    int32_t prompts[E2E_MAX_PROMPTS][64];
    int np[E2E_MAX_PROMPTS];
    const int n_prompts = fixture_prompts(dir, prompts, np);
    e2e_run *cpu = malloc(sizeof *cpu), *gpu = malloc(sizeof *gpu), *dg = malloc(sizeof *dg);
    /* CPU and CUDA with a logits callback (host sampling), then CUDA without one: plain greedy
     * requests take the device-greedy path, which must give the same tokens */
    if (run_model(dir, g_cpu, prompts, np, n_prompts, cpu, true) ||
        run_model(dir, g_gpu, prompts, np, n_prompts, gpu, true) ||
        run_model(dir, g_gpu, prompts, np, n_prompts, dg, false)) {
        free(cpu);
        free(gpu);
        free(dg);
        return;
    }
    {
        char what[160];
        snprintf(what, sizeof what, "e2e %s: device greedy == host greedy on CUDA", name);
        gt_report(what, memcmp(gpu->toks, dg->toks, sizeof gpu->toks) ? 1.0 : 0.0, 0, 0);
    }
    uint64_t hash = 1469598103934665603ull;
    for (int i = 0; i < n_prompts; i++) {
        int diverge = -1;
        for (int t = 0; t < E2E_GEN && diverge < 0; t++)
            if (cpu->toks[i][t] != gpu->toks[i][t]) diverge = t;
        for (int t = 0; t < gpu->n[i]; t++) hash = (hash ^ (uint64_t)gpu->toks[i][t]) * 1099511628211ull;
        char what[160];
        if (diverge < 0) {
            snprintf(what, sizeof what, "e2e %s prompt %d: %d tokens identical", name, i, E2E_GEN);
            gt_report(what, 0, 0, 0);
        } else {
            const double rel_margin = cpu->margin[i][diverge] / cpu->scale[i][diverge];
            snprintf(what, sizeof what, "e2e %s prompt %d: differ at %d, CPU margin %.2e (near tie <= %.1e)",
                     name, i, diverge, rel_margin, 2e-2 + slack);
            gt_report(what, rel_margin, 2e-2 + slack, 0);
        }
        if (cpu->first_logits[i] && gpu->first_logits[i]) {
            long bad;
            snprintf(what, sizeof what, "e2e %s prompt %d: first logits", name, i);
            gt_report_err(what, gt_rel_err(gpu->first_logits[i], cpu->first_logits[i], (size_t)cpu->vocab, &bad),
                          3e-2 + slack, &bad);
        }
        free(cpu->first_logits[i]);
        free(gpu->first_logits[i]);
    }
    printf("tokens %s %016llx\n", name, (unsigned long long)hash);
    free(cpu);
    free(gpu);
    free(dg);
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
    int32_t prompts[E2E_MAX_PROMPTS][64];
    int np[E2E_MAX_PROMPTS];
    const int n_prompts = fixture_prompts(dir, prompts, np);
    e2e_run *t = malloc(sizeof *t), *f = malloc(sizeof *f);
    const kv_type ck = g_ctk, cv = g_ctv;
    double e = -1;
    if (!run_model(dir, g_cpu, prompts, np, n_prompts, t, true)) {
        g_ctk = g_ctv = KV_TYPE_F32;
        if (!run_model(dir, g_cpu, prompts, np, n_prompts, f, true)) {
            e = 0;
            for (int i = 0; i < n_prompts; i++) {
                long bad;
                const double r = gt_rel_err(t->first_logits[i], f->first_logits[i], (size_t)f->vocab, &bad);
                e = r > e ? r : e;
            }
        }
        g_ctk = ck, g_ctv = cv;
        for (int i = 0; i < n_prompts; i++) free(f->first_logits[i]);
    }
    for (int i = 0; i < n_prompts; i++) free(t->first_logits[i]);
    free(t);
    free(f);
    char full[200];
    snprintf(full, sizeof full, "%s (CPU's own error vs f32 %.2e)", name, e);
    if (e < 0) gt_report(full, 1, 0, 0);
    else e2e_compare(dir, full, 2 * e);
}

void gt_e2e_tiled(const char *dir, const char *name, bool bitwise) {
    int32_t prompts[3][64];
    int np[3];
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
        rc = run_model(dir, g_gpu, prompts, np, 3, r[t], true);
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
        for (int i = 0; i < 3; i++) free(r[t]->first_logits[i]);
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
    } else {
        printf("note: %s missing (golden fixtures not merged yet)\n", dir);
    }
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
