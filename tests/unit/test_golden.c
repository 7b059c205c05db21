/* Golden parity against transformers (fixtures from tools/reference/make_fixtures.py, in
 * tests/fixtures/models/<name>/ with expected.json). For every fixture and prompt:
 * - greedy tokens identical to transformers, logits at the first generated position within
 *   ||out - ref|| / ||ref|| <= 1e-4;
 * - the same tokens with paged and dense storage, prefill chunk sizes 1, 7 and 64, all prompts
 *   batched together, and on a prefix-cache hit.
 * The reference sequence is `greedy` (no-cache loop), except for rope "dynamic", where it is
 * `greedy_generate` (transformers with its KV cache): a KV-cached engine keeps the frequencies
 * each key was written with, which the no-cache loop recomputes at every step by design.
 * A dynamic-RoPE fixture must say "fresh_model_per_run": made otherwise, transformers'
 * `greedy_generate` inherits rotary state that the no-cache loop left in the same model
 * object for prompts longer than the original context.
 * Fails when a required fixture is missing: the parity claim must never pass vacuously. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine_collect.h"

#define MAX_CASES 8
#define MAX_TOK 256

static const char *k_required[] = {"llama", "llama_linear", "llama_dynamic", "llama_yarn",
                                   "llama_llama3", "mistral", "qwen2", "qwen3", "gemma3_text",
                                   "mixtral", "qwen3_moe", "llama4_text", "llama4_text_top2",
                                   "deepseek_v3", "deepseek_v3_noqlora"};

typedef struct gcase {
    int32_t prompt[MAX_TOK];
    int n_prompt;
    int32_t want[MAX_TOK];
    int n_want;
    float *logits;       /* [vocab] reference */
} gcase;

typedef ec_collect collect;
_Static_assert(MAX_CASES == EC_MAX_SEQ && MAX_TOK == EC_MAX_TOK, "collect sizes");

typedef ec_variant variant;

/* Runs the cases (batched together or one engine run each; see ec_run). */
static void run_variant(model *m, const gcase *cs, int n_cases, const variant *v, collect *c) {
    const int32_t *pr[MAX_CASES];
    int np[MAX_CASES], nw[MAX_CASES];
    for (int i = 0; i < n_cases; i++) pr[i] = cs[i].prompt, np[i] = cs[i].n_prompt, nw[i] = cs[i].n_want;
    ec_run(m, pr, np, nw, n_cases, v, c);
}

static void free_collect(collect *c) {
    for (int i = 0; i < MAX_CASES; i++) free(c->first_logits[i]);
}

static int load_cases(const char *path, gcase *cs, int vocab, bool dynamic) {
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    if (!doc) fail_msg("%s: %s (line %d)", path, je.text, je.line);
    /* a dynamic-RoPE reference made without a fresh model per run carries transformers' stale
     * rotary state (see above): refuse it rather than check against it */
    if (dynamic && !json_is_true(json_object_get(doc, "fresh_model_per_run")))
        fail_msg("%s: made without a fresh model per run; regenerate it with "
                 "tools/device_fixtures2.sh", path);
    json_t *cases = json_object_get(doc, "cases");
    assert_true(json_is_array(cases));
    int n = 0;
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        if (n == MAX_CASES) break;
        gcase *g = &cs[n++];
        json_t *pr = json_object_get(c, "prompt_ids");
        json_t *want = json_object_get(c, dynamic ? "greedy_generate" : "greedy");
        json_t *lg = json_object_get(c, "logits");
        assert_true(json_is_array(pr) && json_is_array(want) && json_is_array(lg));
        g->n_prompt = (int)json_array_size(pr);
        g->n_want = (int)json_array_size(want);
        assert_true(g->n_prompt <= MAX_TOK && g->n_want <= MAX_TOK);
        for (int k = 0; k < g->n_prompt; k++) g->prompt[k] = (int32_t)json_integer_value(json_array_get(pr, k));
        for (int k = 0; k < g->n_want; k++) g->want[k] = (int32_t)json_integer_value(json_array_get(want, k));
        assert_int_equal((int)json_array_size(lg), vocab);
        g->logits = malloc((size_t)vocab * sizeof(float));
        for (int k = 0; k < vocab; k++) g->logits[k] = (float)json_number_value(json_array_get(lg, k));
    }
    json_decref(doc);
    return n;
}

static int check_tokens(const char *name, const char *label, const gcase *cs, int n, const collect *c) {
    int bad = 0;
    for (int i = 0; i < n; i++) {
        if (c->n[i] == cs[i].n_want && !memcmp(c->toks[i], cs[i].want, (size_t)cs[i].n_want * 4)) continue;
        int at = 0;
        while (at < c->n[i] && at < cs[i].n_want && c->toks[i][at] == cs[i].want[at]) at++;
        fprintf(stderr, "  %s [%s] prompt %d (len %d): tokens differ at step %d (got %d, want %d; %d generated)\n",
                name, label, i, cs[i].n_prompt, at, at < c->n[i] ? c->toks[i][at] : -1,
                at < cs[i].n_want ? cs[i].want[at] : -1, c->n[i]);
        bad++;
    }
    return bad;
}

static int check_fixture(const char *dir, const char *name) {
    char path[2400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    model *m = NULL;
    mx_error err;
    if (model_load(&m, path, backend_cpu(), &err)) {
        fprintf(stderr, "  %s: load failed: %s\n", name, err.msg);
        return 1;
    }
    const model_spec *s = model_spec_of(m);
    snprintf(path, sizeof path, "%s/%s/expected.json", dir, name);
    gcase cs[MAX_CASES];
    const int n = load_cases(path, cs, s->vocab_size, s->rope.type == ROPE_DYNAMIC);
    int bad = 0;
    const variant vs[] = {
        {"auto", KV_STORAGE_AUTO, 512, 16, false, false},
        {"dense", KV_STORAGE_DENSE, 512, 16, false, false},
        {"paged", KV_STORAGE_PAGED, 512, 16, false, false},
        {"chunk1", KV_STORAGE_PAGED, 1, 16, false, false},
        {"chunk7", KV_STORAGE_PAGED, 7, 16, false, false},
        {"chunk64", KV_STORAGE_DENSE, 64, 16, false, false},
        {"batched", KV_STORAGE_PAGED, 7, 16, true, false},
        {"batched-dense", KV_STORAGE_DENSE, 64, 16, true, false},
        {"prefix-hit", KV_STORAGE_PAGED, 512, 4, false, true},
    };
    for (size_t v = 0; v < sizeof vs / sizeof vs[0]; v++) {
        collect c;
        run_variant(m, cs, n, &vs[v], &c);
        bad += check_tokens(name, vs[v].label, cs, n, &c);
        if (v == 0) { /* logits at the first generated position */
            for (int i = 0; i < n; i++) {
                double num = 0, den = 0;
                for (int k = 0; k < s->vocab_size; k++) {
                    const double d = (double)c.first_logits[i][k] - cs[i].logits[k];
                    num += d * d;
                    den += (double)cs[i].logits[k] * cs[i].logits[k];
                }
                const double rel = sqrt(num / (den > 0 ? den : 1));
                if (rel > 1e-4) {
                    fprintf(stderr, "  %s prompt %d: logits rel err %.3g > 1e-4\n", name, i, rel);
                    bad++;
                }
            }
        }
        if (vs[v].prefix_rerun)
            for (int i = 0; i < n; i++)
                if (cs[i].n_prompt > 4 && c.n_cached[i] == 0) {
                    fprintf(stderr, "  %s prompt %d: expected a prefix-cache hit\n", name, i);
                    bad++;
                }
        free_collect(&c);
    }
    for (int i = 0; i < n; i++) free(cs[i].logits);
    model_free(m);
    fprintf(stderr, "golden %-18s %d prompts: %s\n", name, n, bad ? "FAIL" : "ok");
    return bad;
}

static void test_golden(void **st) {
    (void)st;
    const char *src = getenv("MLXCEL_SOURCE_DIR");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/models", src ? src : ".");
    int bad = 0, found = 0;
    for (size_t r = 0; r < sizeof k_required / sizeof k_required[0]; r++) {
        char p[2400];
        snprintf(p, sizeof p, "%s/%s/expected.json", dir, k_required[r]);
        FILE *f = fopen(p, "r");
        if (!f) {
            fprintf(stderr, "golden: missing fixture %s (make it with tools/reference/make_fixtures.py)\n", p);
            bad++;
        } else {
            fclose(f);
        }
    }
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *ent;
        while ((ent = readdir(d))) {
            if (ent->d_name[0] == '.') continue;
            char p[2400];
            snprintf(p, sizeof p, "%s/%s/expected.json", dir, ent->d_name);
            FILE *f = fopen(p, "r");
            if (!f) continue;
            fclose(f);
            found++;
            bad += check_fixture(dir, ent->d_name);
        }
        closedir(d);
    }
    if (!found) fail_msg("no golden fixtures under %s", dir);
    assert_int_equal(bad, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_golden)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
