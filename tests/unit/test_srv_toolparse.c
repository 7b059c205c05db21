/* The reply parser (src/server/srv_toolparse.c) on real tool-call and reasoning transcripts of
 * each family (tests/fixtures/toolcalls/<family>.json, each case naming its source): the message it
 * finds, and the same message however the text is cut: whole, one byte at a time, and cut in
 * two at every byte. The streamed events must add up to the message and be well formed (a
 * call's header before its arguments, indexes 0, 1, 2 ...). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "server/srv_tools.h"

/* ==== What the events add up to ==== */
typedef struct acc {
    char *content, *reasoning;
    size_t nc, nr;
    int n_calls;
    char ids[16][40], names[16][300];
    char *args[16];
    size_t na[16];
    int last_index; /* events of a lower call index may not follow a higher one */
    bool bad;
    char why[200];
} acc;

static void put(char **b, size_t *n, const char *s, size_t k) {
    *b = realloc(*b, *n + k + 1);
    memcpy(*b + *n, s, k);
    *n += k;
    (*b)[*n] = 0;
}

static void sink(void *ctx, const srv_cp_event *e) {
    acc *a = ctx;
    switch (e->kind) {
    case SRV_CP_CONTENT: put(&a->content, &a->nc, e->text, e->len); break;
    case SRV_CP_REASONING: put(&a->reasoning, &a->nr, e->text, e->len); break;
    case SRV_CP_CALL:
        if (e->index != a->n_calls || a->n_calls >= 16) {
            a->bad = true;
            snprintf(a->why, sizeof a->why, "call header %d after %d calls", e->index, a->n_calls);
            return;
        }
        snprintf(a->ids[a->n_calls], 40, "%s", e->id);
        snprintf(a->names[a->n_calls], 300, "%.*s", (int)e->len, e->text);
        a->n_calls++;
        a->last_index = e->index;
        break;
    default:
        if (e->index != a->n_calls - 1 || e->index < a->last_index) {
            a->bad = true;
            snprintf(a->why, sizeof a->why, "arguments of call %d with %d headers", e->index, a->n_calls);
            return;
        }
        put(&a->args[e->index], &a->na[e->index], e->text, e->len);
    }
    if (!e->len && e->kind != SRV_CP_CALL) {
        a->bad = true;
        snprintf(a->why, sizeof a->why, "an empty event");
    }
}

static void acc_free(acc *a) {
    free(a->content);
    free(a->reasoning);
    for (int i = 0; i < 16; i++) free(a->args[i]);
    memset(a, 0, sizeof *a);
}

/* ==== Running one transcript ==== */
typedef struct run_cfg {
    srv_cp_config cfg;
    const char *text;
    size_t n;
} run_cfg;

/* Feeds the text cut at cuts[0..nc) (sorted), checks the events against the parser's own
 * message and returns the events' sum. */
static void run(const run_cfg *rc, const size_t *cuts, int ncuts, acc *a, const char *label) {
    memset(a, 0, sizeof *a);
    srv_cp *p = srv_cp_new(&rc->cfg);
    assert_non_null(p);
    size_t at = 0;
    for (int i = 0; i <= ncuts; i++) {
        const size_t end = i < ncuts ? cuts[i] : rc->n;
        srv_cp_feed(p, rc->text + at, end - at, sink, a);
        at = end;
    }
    srv_cp_finish(p, sink, a);
    if (a->bad) fail_msg("%s: %s", label, a->why);
    size_t n;
    const char *c = srv_cp_content(p, &n);
    if (n != a->nc || (n && memcmp(c, a->content, n))) fail_msg("%s: events' content differs from the message", label);
    c = srv_cp_reasoning(p, &n);
    if (n != a->nr || (n && memcmp(c, a->reasoning, n))) fail_msg("%s: events' reasoning differs", label);
    assert_int_equal(srv_cp_n_calls(p), a->n_calls);
    for (int i = 0; i < a->n_calls; i++) {
        const char *args = srv_cp_call_args(p, i, &n);
        if (n != a->na[i] || (n && memcmp(args, a->args[i], n))) fail_msg("%s: events' arguments %d differ", label, i);
        assert_string_equal(srv_cp_call_name(p, i), a->names[i]);
        assert_string_equal(srv_cp_call_id(p, i), a->ids[i]);
    }
    srv_cp_free(p);
}

static void same(const acc *x, const acc *y, const char *label) {
    if (x->nc != y->nc || (x->nc && memcmp(x->content, y->content, x->nc)))
        fail_msg("%s: content '%s' vs '%s'", label, x->content ? x->content : "", y->content ? y->content : "");
    if (x->nr != y->nr || (x->nr && memcmp(x->reasoning, y->reasoning, x->nr))) fail_msg("%s: reasoning differs", label);
    if (x->n_calls != y->n_calls) fail_msg("%s: %d calls vs %d", label, x->n_calls, y->n_calls);
    for (int i = 0; i < x->n_calls; i++) {
        if (strcmp(x->names[i], y->names[i]) || strcmp(x->ids[i], y->ids[i]) || x->na[i] != y->na[i] ||
            (x->na[i] && memcmp(x->args[i], y->args[i], x->na[i])))
            fail_msg("%s: call %d differs ('%s' vs '%s')", label, i, x->args[i] ? x->args[i] : "",
                     y->args[i] ? y->args[i] : "");
    }
}

/* ==== Expectations ==== */
static void check_expect(const acc *a, json_t *exp, const char *label) {
    json_t *content = json_object_get(exp, "content"), *rc = json_object_get(exp, "reasoning_content");
    const char *want = json_is_string(content) ? json_string_value(content) : "";
    if (strlen(want) != a->nc || memcmp(want, a->content ? a->content : "", a->nc))
        fail_msg("%s: content '%s', want '%s'", label, a->content ? a->content : "", want);
    if (json_is_null(content) && !json_array_size(json_object_get(exp, "tool_calls")))
        fail_msg("%s: a null content needs tool calls in the fixture", label);
    if (rc) {
        want = json_string_value(rc);
        if (strlen(want) != a->nr || memcmp(want, a->reasoning ? a->reasoning : "", a->nr))
            fail_msg("%s: reasoning '%s', want '%s'", label, a->reasoning ? a->reasoning : "", want);
    }
    json_t *calls = json_object_get(exp, "tool_calls");
    if (!calls) return;
    if ((int)json_array_size(calls) != a->n_calls)
        fail_msg("%s: %d calls, want %zu", label, a->n_calls, json_array_size(calls));
    for (int i = 0; i < a->n_calls; i++) {
        json_t *c = json_array_get(calls, (size_t)i);
        assert_string_equal(a->names[i], json_string_value(json_object_get(c, "name")));
        if (strncmp(a->ids[i], "call_", 5) || strlen(a->ids[i]) != 29) fail_msg("%s: id '%s'", label, a->ids[i]);
        json_t *text = json_object_get(c, "arguments_text");
        if (text) {
            if (strlen(json_string_value(text)) != a->na[i] || memcmp(json_string_value(text), a->args[i], a->na[i]))
                fail_msg("%s: arguments '%s', want '%s'", label, a->args[i], json_string_value(text));
            continue;
        }
        json_error_t je;
        json_t *got = json_loadb(a->args[i] ? a->args[i] : "", a->na[i], 0, &je);
        if (!got) fail_msg("%s: arguments of call %d are not JSON: '%s'", label, i, a->args[i] ? a->args[i] : "");
        if (!json_equal(got, json_object_get(c, "arguments")))
            fail_msg("%s: arguments of call %d: '%s'", label, i, a->args[i]);
        json_decref(got);
    }
}

static srv_tool_format format_of(const char *s) {
    int f = srv_tool_format_parse(s);
    return f < 0 ? SRV_TOOLS_NONE : (srv_tool_format)f;
}

static srv_reasoning_mode reasoning_of(json_t *v) {
    const char *s = json_is_string(v) ? json_string_value(v) : "none";
    if (!strcmp(s, "legacy")) return SRV_REASONING_LEGACY;
    srv_reasoning_mode m = SRV_REASONING_NONE;
    assert_int_equal(srv_reasoning_parse(s, &m), 0);
    return m;
}

static int g_cases, g_runs;

static void run_file(const char *name) {
    char path[1024];
    const char *src = getenv("MLXCEL_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/tests/fixtures/toolcalls/%s.json", src ? src : ".", name);
    json_error_t je;
    json_t *f = json_load_file(path, 0, &je);
    if (!f) fail_msg("%s: %s", path, je.text);
    srv_tool_set tools = {0};
    char field[64];
    mx_error err;
    if (srv_tool_set_parse_openai(&tools, json_object_get(f, "tools"), field, sizeof field, &err))
        fail_msg("%s: tools: %s", path, err.msg);
    size_t ci;
    json_t *c;
    json_array_foreach(json_object_get(f, "cases"), ci, c) {
        char label[256];
        snprintf(label, sizeof label, "%s: %s", name, json_string_value(json_object_get(c, "name")));
        json_t *fmt = json_object_get(c, "format");
        json_t *par = json_object_get(c, "parallel");
        run_cfg rc = {.cfg = {.format = format_of(json_string_value(fmt ? fmt : json_object_get(f, "format"))),
                              .reasoning = reasoning_of(json_object_get(c, "reasoning")),
                              .start_in_reasoning = json_is_true(json_object_get(c, "start_in_reasoning")),
                              .parallel = !json_is_false(par), .tools = &tools, .id_seed = 42 + ci},
                      .text = json_string_value(json_object_get(c, "text"))};
        rc.n = json_string_length(json_object_get(c, "text"));
        acc whole, x;
        run(&rc, NULL, 0, &whole, label);
        check_expect(&whole, json_object_get(c, "expect"), label);
        /* one byte at a time */
        size_t *cuts = malloc((rc.n + 1) * sizeof *cuts);
        for (size_t k = 1; k < rc.n; k++) cuts[k - 1] = k;
        run(&rc, cuts, rc.n > 1 ? (int)rc.n - 1 : 0, &x, label);
        same(&whole, &x, label);
        acc_free(&x);
        /* cut in two at every byte */
        for (size_t k = 1; k < rc.n; k++) {
            char l2[300];
            snprintf(l2, sizeof l2, "%s (cut at %zu)", label, k);
            run(&rc, &k, 1, &x, l2);
            same(&whole, &x, l2);
            acc_free(&x);
            g_runs++;
        }
        free(cuts);
        acc_free(&whole);
        g_cases++;
    }
    srv_tool_set_clear(&tools);
    json_decref(f);
}

static void test_hermes(void **st) { (void)st; run_file("hermes"); }
static void test_llama3(void **st) { (void)st; run_file("llama3"); }
static void test_mistral(void **st) { (void)st; run_file("mistral"); }
static void test_deepseek(void **st) { (void)st; run_file("deepseek_v3"); }
static void test_reasoning(void **st) { (void)st; run_file("reasoning"); }

/* A withheld partial marker is released as soon as it cannot be one, not only at the end. */
static void test_release_early(void **st) {
    (void)st;
    srv_cp_config cfg = {.format = SRV_TOOLS_HERMES, .parallel = true, .id_seed = 1};
    srv_cp *p = srv_cp_new(&cfg);
    acc a = {0};
    srv_cp_feed(p, "ab <tool_c", 10, sink, &a);
    assert_int_equal(a.nc, 2); /* "ab"; " " held (it would be dropped before a call) */
    srv_cp_feed(p, "ar", 2, sink, &a);
    assert_int_equal(a.nc, 12);
    assert_memory_equal(a.content, "ab <tool_car", 12);
    srv_cp_free(p);
    acc_free(&a);
}

/* Text cut inside a UTF-8 character: events end on whole characters. */
static void test_utf8_cut(void **st) {
    (void)st;
    srv_cp_config cfg = {.format = SRV_TOOLS_HERMES, .parallel = true};
    srv_cp *p = srv_cp_new(&cfg);
    acc a = {0};
    srv_cp_feed(p, "\xC3", 1, sink, &a);
    assert_int_equal(a.nc, 0);
    srv_cp_feed(p, "\xA9t\xE6\x9D", 4, sink, &a);
    assert_int_equal(a.nc, 3);
    assert_memory_equal(a.content, "\xC3\xA9t", 3);
    srv_cp_feed(p, "\xB1", 1, sink, &a);
    srv_cp_finish(p, sink, &a);
    assert_int_equal(a.nc, 6);
    srv_cp_free(p);
    acc_free(&a);
}

/* Random texts built from the families' markers and JSON pieces: for every format and
 * reasoning mode, the message is the same whole, byte by byte, and cut at random places
 * (a parser that decided anything by where a piece ended would differ). */
static void test_random_invariance(void **st) {
    (void)st;
    static const char *const frag[] = {
        "<tool_call>", "</tool_call>", "{", "}", "\"name\": \"", "get_weather", "\"", "\"arguments\": ",
        "\"parameters\": ", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "<think>", "</think>", "<|python_tag|>",
        ".call(", "q=\"v\")", "\n", " ", "\xC3\xA9", "\xE6\x9D\xB1", "```json\n", "```", "<function=",
        "<parameter=", "</parameter>", "</function>", ";", ",", "[", "]", "\\\"", "city", ":", "python",
        "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "function", "<｜tool▁call▁end｜>", "<｜",
        "1", "true", "abc",
    };
    const int nf = (int)(sizeof frag / sizeof frag[0]);
    srv_tool_set tools = {0};
    mx_error err;
    assert_int_equal(srv_tool_set_add(&tools, "get_weather", NULL, false, &err), 0);
    assert_int_equal(srv_tool_set_add(&tools, "python", NULL, false, &err), 0);
    uint64_t rng = 0x1234567;
#define RND() (rng = rng * 6364136223846793005ull + 1442695040888963407ull, (unsigned)(rng >> 33))
    char text[2048];
    int runs = 0, with_calls = 0, with_reasoning = 0;
    /* half the texts open a call of their format, so that the random rest closes or breaks it */
    static const char *const opening[] = {
        "<think>\nhm", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": ",
        "{\"name\": \"get_weather\", \"parameters\": {\"city\": ",
        "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": ",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{",
    };
    for (int t = 0; t < 1500; t++) {
        size_t n = 0;
        if (t % 2) {
            n = strlen(opening[t % 5]);
            memcpy(text, opening[t % 5], n);
        }
        const int k = 1 + (int)(RND() % 40);
        for (int i = 0; i < k; i++) {
            const char *f = frag[RND() % (unsigned)nf];
            size_t l = strlen(f);
            memcpy(text + n, f, l);
            n += l;
        }
        const srv_tool_format fmt = (srv_tool_format)(t % 5);
        run_cfg rc = {.cfg = {.format = fmt, .reasoning = (srv_reasoning_mode)(t / 5 % 3),
                              .start_in_reasoning = t % 7 == 0, .parallel = t % 3 != 0, .tools = &tools,
                              .id_seed = 7},
                      .text = text, .n = n};
        acc whole, x;
        char label[64];
        snprintf(label, sizeof label, "random text %d (format %s)", t, srv_tool_format_name(fmt));
        run(&rc, NULL, 0, &whole, label);
        with_calls += whole.n_calls > 0;
        with_reasoning += whole.nr > 0;
        size_t cuts[3];
        for (int r = 0; r < 4 && n > 1; r++) {
            for (int i = 0; i < 3; i++) cuts[i] = 1 + RND() % (n - 1);
            for (int i = 0; i < 3; i++)
                for (int j = i + 1; j < 3; j++)
                    if (cuts[j] < cuts[i]) { size_t tmp = cuts[i]; cuts[i] = cuts[j]; cuts[j] = tmp; }
            run(&rc, cuts, 3, &x, label);
            same(&whole, &x, label);
            acc_free(&x);
            runs++;
        }
        size_t *all = malloc(n * sizeof *all);
        for (size_t i = 1; i < n; i++) all[i - 1] = i;
        run(&rc, all, (int)n - 1, &x, label);
        same(&whole, &x, label);
        acc_free(&x);
        free(all);
        acc_free(&whole);
    }
#undef RND
    print_message("toolparse: 1500 random texts (%d with calls, %d with reasoning), %d random cuts\n", with_calls,
                  with_reasoning, runs);
    assert_true(with_calls >= 100 && with_reasoning >= 100);
    srv_tool_set_clear(&tools);
}

static void test_summary(void **st) {
    (void)st;
    print_message("toolparse: %d transcripts, %d cut runs\n", g_cases, g_runs);
    assert_true(g_cases >= 40);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hermes),    cmocka_unit_test(test_llama3),        cmocka_unit_test(test_mistral),
        cmocka_unit_test(test_deepseek),  cmocka_unit_test(test_reasoning),     cmocka_unit_test(test_release_early),
        cmocka_unit_test(test_utf8_cut),  cmocka_unit_test(test_random_invariance), cmocka_unit_test(test_summary),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
