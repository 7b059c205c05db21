/* Random JSON schemas -> constrained generation from random logits over a real vocabulary.
 *
 * usage: schema_random TOKENIZER_JSON N SEED OUT.jsonl
 *
 * A seeded generator writes N schemas of the supported subset (objects with required/optional
 * properties and awkward names, additionalProperties false / true / a schema, arrays with
 * prefixItems and item counts, strings with lengths / enums / formats / patterns, integer and
 * number ranges, booleans, null, anyOf, oneOf, allOf, nullable, type lists, $defs/$ref with
 * recursion). Each is converted and compiled; a fake model then generates under the token mask:
 * most schemas pick a uniformly random allowed token (what argmax over iid random logits picks),
 * every 8th samples random logits through the engine's sampler (temperature 1) after
 * grammar_mask_apply. Generation stops at EOS (allowed only where the grammar may end) or at a
 * budget of 400 tokens. The ids are decoded by the tokenizer itself (not the grammar's byte
 * table) and written with the schema as one JSON line; tests/grammar/validate.mjs checks every
 * finished output with ajv, an implementation no one here wrote.
 *
 * Exit status 1 when a schema fails to convert, a sampled token is refused by the matcher, or a
 * budget cut happens on a schema whose shortest instance does not fit the budget (a generator
 * bug: the cut could then not be the random walk's doing). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sampler.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "text/tokenizer.h"

#define BUDGET 400

/* ==== PRNG ==== */
static uint64_t g_rng;
static uint64_t rnd(void) {
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static int ri(int n) { return (int)(rnd() % (uint64_t)n); }
static bool chance(int pct) { return ri(100) < pct; }

/* ==== Schema generator ==== */
static const char *k_names[] = {"name", "age", "id", "tags", "value", "a\"b", "with space", "ünïcödé", "",
                                "emoji😀", "back\\slash", "x", "items", "type", "nested", "Ω", "n1", "url"};
static const char *k_strings[] = {"red", "green", "line\nbreak", "tab\there", "quote\"d", "\x01ctl", "é", "😀",
                                  "", "back\\", "a b", "ZZ"};
static const char *k_patterns[] = {"^[a-z]{1,5}$", "^\\d{3}-\\d{4}$", "^(foo|bar){1,3}$", "^[A-Z][a-z]{0,6}$",
                                   "^\\w{2,4}@\\w{2,4}\\.com$", "^[^\\s]{1,5}$", "^\"?[a-c]{1,3}\\\\?$",
                                   "^.{1,4}$", "^(?:ab|c)?[0-9]+?x{2}$", "^[\\u00e0-\\u00ff]{2}$",
                                   "^\\S\\s\\S$", "^[^a-z]{0,3}$"};
static const char *k_formats[] = {"date", "time", "date-time", "uuid", "ipv4"};

static json_t *gen(int depth, json_t *defs);

static json_t *gen_string(void) {
    json_t *s = json_pack("{s:s}", "type", "string");
    switch (ri(6)) {
    case 0: case 1: {
        int hi = ri(13), lo = hi ? ri(hi < 4 ? hi + 1 : 4) : 0;
        json_object_set_new(s, "maxLength", json_integer(hi));
        if (lo) json_object_set_new(s, "minLength", json_integer(lo));
        break;
    }
    case 2: {
        json_t *e = json_array();
        for (int i = 0, n = 1 + ri(4); i < n; i++)
            json_array_append_new(e, json_string(k_strings[ri(sizeof k_strings / sizeof *k_strings)]));
        json_object_set_new(s, "enum", e);
        break;
    }
    case 3: json_object_set_new(s, "format", json_string(k_formats[ri(5)])); break;
    case 4: json_object_set_new(s, "pattern", json_string(k_patterns[ri(sizeof k_patterns / sizeof *k_patterns)])); break;
    default: json_object_set_new(s, "const", json_string(k_strings[ri(sizeof k_strings / sizeof *k_strings)])); break;
    }
    return s;
}

static json_t *gen_number(bool integer) {
    json_t *s = json_pack("{s:s}", "type", integer ? "integer" : "number");
    static const long vals[] = {0, 1, -1, 7, -20, 99, 100, -1000, 12345, 999999, -5, 2147483647};
    long a = vals[ri(12)], b = vals[ri(12)];
    if (a > b) { long t = a; a = b; b = t; }
    const int mode = ri(6);
    if (mode == 1 || mode == 3) json_object_set_new(s, chance(30) ? "exclusiveMinimum" : "minimum", json_integer(a));
    if (mode == 2 || mode == 3) {
        if (b - a < 2) b = a + 2; /* an exclusive pair still holds an integer */
        json_object_set_new(s, chance(30) ? "exclusiveMaximum" : "maximum", json_integer(b));
    }
    if (mode == 4) json_object_set_new(s, "minimum", json_integer(a)), json_object_set_new(s, "maximum", json_integer(a));
    return s;
}

static json_t *gen_object_ap(int depth, json_t *defs, bool closed_ok) {
    json_t *s = json_pack("{s:s, s:o}", "type", "object", "properties", json_object());
    json_t *props = json_object_get(s, "properties"), *req = json_array();
    for (int i = 0, n = ri(5); i < n; i++) {
        const char *k = k_names[ri(sizeof k_names / sizeof *k_names)];
        if (json_object_get(props, k)) continue;
        json_object_set_new(props, k, gen(depth + 1, defs));
        if (chance(60)) json_array_append_new(req, json_string(k));
    }
    json_object_set_new(s, "required", req);
    const int ap = closed_ok ? ri(20) : 19;
    if (ap < 15) json_object_set_new(s, "additionalProperties", json_false());
    else if (ap == 15) json_object_set_new(s, "additionalProperties", json_pack("{s:s, s:i}", "type", "integer", "maximum", 9));
    else if (ap == 16) json_object_set_new(s, "additionalProperties", json_pack("{s:s}", "type", "boolean"));
    /* else absent: extras allowed, none generated */
    return s;
}

static json_t *gen_object(int depth, json_t *defs) { return gen_object_ap(depth, defs, true); }

static json_t *gen_array(int depth, json_t *defs) {
    json_t *s = json_pack("{s:s}", "type", "array");
    int np = 1 << 20;
    if (chance(25)) {
        json_t *p = json_array();
        np = 1 + ri(3);
        for (int i = 0; i < np; i++) json_array_append_new(p, gen(depth + 1, defs));
        json_object_set_new(s, "prefixItems", p);
        if (chance(50)) json_object_set_new(s, "items", gen(depth + 1, defs)), np = 1 << 20;
        else json_object_set_new(s, "items", json_false());
    } else {
        json_object_set_new(s, "items", gen(depth + 1, defs));
    }
    int lo = ri(3), hi = lo + ri(3);
    if (lo > np) lo = np; /* items false: at most the prefix */
    if (lo) json_object_set_new(s, "minItems", json_integer(lo));
    json_object_set_new(s, "maxItems", json_integer(hi > 0 ? hi : 1));
    return s;
}

static json_t *gen_scalar(void) {
    switch (ri(9)) {
    case 0: case 1: case 2: return gen_string();
    case 3: case 4: return gen_number(true);
    case 5: return gen_number(false);
    case 6: return json_pack("{s:s}", "type", "boolean");
    case 7: return json_pack("{s:s}", "type", "null");
    default: return json_pack("{s:[s,s], s:i}", "type", "string", "null", "maxLength", 3);
    }
}

static json_t *gen(int depth, json_t *defs) {
    if (depth >= 3) return gen_scalar();
    switch (ri(16)) {
    case 0: case 1: case 2: return gen_object(depth, defs);
    case 3: case 4: return gen_array(depth, defs);
    case 5: { /* anyOf */
        json_t *a = json_array();
        for (int i = 0, n = 2 + ri(2); i < n; i++) json_array_append_new(a, gen(depth + 1, defs));
        return json_pack("{s:o}", "anyOf", a);
    }
    case 6: /* oneOf: branches of different types */
        return json_pack("{s:[o,{s:s},{s:s,s:b}]}", "oneOf", gen_number(true), "type", "null", "type", "boolean",
                         "nullable", 0);
    case 7: /* allOf: two objects */
        return json_pack("{s:[o,{s:{s:{s:s,s:i}}, s:[s]}]}", "allOf", gen_object_ap(depth + 1, defs, false), "properties",
                         "extra", "type", "string", "maxLength", 4, "required", "extra");
    case 8: { /* nullable */
        json_t *s = gen_scalar();
        if (json_is_string(json_object_get(s, "type")) && !json_object_get(s, "enum") && !json_object_get(s, "const"))
            json_object_set_new(s, "nullable", json_true());
        return s;
    }
    case 9: { /* mixed enum */
        return json_pack("{s:[i,s,n,b,{s:i},[i,i],f]}", "enum", 1, "a", 1, "x", 1, 1, 2, 2.5);
    }
    case 10: { /* a definition referenced */
        char name[32];
        json_t *d = gen(depth + 1, defs); /* first: it may add definitions itself */
        snprintf(name, sizeof name, "d%zu", json_object_size(defs));
        json_object_set_new(defs, name, d);
        char ref[48];
        snprintf(ref, sizeof ref, "#/$defs/%s", name);
        return json_pack("{s:s}", "$ref", ref);
    }
    default: return gen_scalar();
    }
}

static json_t *gen_root(int i) {
    json_t *defs = json_object(), *s;
    if (i % 25 == 7) { /* recursion through $defs */
        json_object_set_new(defs, "node",
                            json_pack("{s:s, s:{s:{s:s,s:i,s:i}, s:{s:s, s:{s:s}, s:i}}, s:[s], s:b}", "type", "object",
                                      "properties", "v", "type", "integer", "minimum", 0, "maximum", 9, "kids",
                                      "type", "array", "items", "$ref", "#/$defs/node", "maxItems", 2, "required",
                                      "v", "additionalProperties", 0));
        s = json_pack("{s:s}", "$ref", "#/$defs/node");
    } else {
        s = chance(80) ? gen_object(0, defs) : gen(0, defs);
    }
    if (json_object_size(defs)) json_object_set(s, "$defs", defs);
    json_decref(defs);
    return s;
}

/* ==== Generation ==== */
static int pick_uniform(const uint32_t *mask, int V) {
    int n = 0;
    for (int w = 0; w * 32 < V; w++) n += __builtin_popcount(mask[w]);
    if (!n) return -1;
    int k = ri(n);
    for (int w = 0; w * 32 < V; w++) {
        int c = __builtin_popcount(mask[w]);
        if (k >= c) { k -= c; continue; }
        for (int b = 0; b < 32; b++)
            if (mask[w] >> b & 1 && k-- == 0) return w * 32 + b;
    }
    return -1;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s TOKENIZER_JSON N SEED OUT.jsonl\n", argv[0]);
        return 2;
    }
    const int N = atoi(argv[2]);
    g_rng = strtoull(argv[3], NULL, 10);
    mx_error err;
    tokenizer *tok;
    if (tok_load_file(&tok, argv[1], &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    tok_vocab tv;
    if (tok_vocab_bytes(tok, &tv, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    const char **ptr = malloc((size_t)tv.n * sizeof *ptr);
    for (int i = 0; i < tv.n; i++) ptr[i] = tv.data + tv.off[i];
    int32_t eos[2];
    int n_eos = 0;
    const char *eos_names[] = {"<|eot_id|>", "<|end_of_text|>", "<|im_end|>", "</s>"};
    for (int k = 0; k < 4 && n_eos < 2; k++) {
        int32_t id = tok_piece_to_id(tok, eos_names[k]);
        if (id >= 0) eos[n_eos++] = id;
    }
    grammar_vocab *voc;
    if (grammar_vocab_new(&voc, tv.n, ptr, tv.len, tv.special, eos, n_eos, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    const int V = tv.n;
    FILE *out = fopen(argv[4], "w");
    if (!out) return fprintf(stderr, "%s: cannot write\n", argv[4]), 1;
    float *logits = malloc((size_t)V * sizeof *logits);
    int32_t *ids = malloc(BUDGET * sizeof *ids);
    int failures = 0, cuts = 0, tokens = 0;
    for (int i = 0; i < N; i++) {
        json_t *schema = gen_root(i);
        grammar *g = NULL;
        if (grammar_from_json_schema(&g, schema, &err)) {
            char *t = json_dumps(schema, JSON_COMPACT);
            fprintf(stderr, "schema %d: %s\n  %s\n", i, err.msg, t);
            free(t), json_decref(schema);
            failures++;
            continue;
        }
        grammar_matcher *m = grammar_matcher_new(g, voc, &err);
        sampling_params sp;
        sampling_params_default(&sp);
        sp.temperature = 1.0f, sp.seed = rnd();
        sampler *smp = i % 8 == 3 ? sampler_new(&sp) : NULL;
        int n = 0;
        bool ended = false, refused = false;
        while (n < BUDGET) {
            const uint32_t *mask = grammar_matcher_mask(m, V, &err);
            if (!mask) { fprintf(stderr, "schema %d: %s\n", i, err.msg); refused = true; break; }
            int32_t t;
            if (smp) {
                for (int k = 0; k < V; k++) logits[k] = (float)((double)(rnd() >> 11) * 0x1.0p-53 * 8.0);
                grammar_mask_apply(mask, logits, V);
                t = sampler_sample(smp, logits, V, ids, n, NULL);
            } else {
                t = pick_uniform(mask, V);
            }
            if (t < 0) { fprintf(stderr, "schema %d: empty mask after %d tokens\n", i, n); refused = true; break; }
            if (grammar_matcher_accept(m, t, &err)) { fprintf(stderr, "schema %d: %s\n", i, err.msg); refused = true; break; }
            if (grammar_matcher_ended(m)) { ended = true; break; }
            ids[n++] = t;
        }
        tokens += n;
        if (refused) failures++;
        char *text = NULL;
        size_t tl = 0;
        tok_decode_n(tok, ids, (size_t)n, true, &text, &tl, &err);
        int min_len = -1;
        if (!ended && !refused) {
            cuts++;
            min_len = grammar_min_length(g, BUDGET + 1);
            if (min_len < 0 || min_len > BUDGET / 2) {
                fprintf(stderr, "schema %d: cut at %d tokens, and its shortest instance is %d bytes (generator too big)\n",
                        i, BUDGET, min_len);
                failures++;
            }
        }
        json_t *line = json_pack("{s:i, s:O, s:s%, s:b, s:i}", "i", i, "schema", schema, "output", text ? text : "",
                                 tl, "cut", !ended, "tokens", n);
        if (!line) { /* the decoded text is not UTF-8: the grammar let a partial character through */
            fprintf(stderr, "schema %d: output is not valid UTF-8\n", i);
            failures++;
        } else {
            char *l = json_dumps(line, JSON_COMPACT | JSON_ENSURE_ASCII);
            fprintf(out, "%s\n", l);
            free(l);
        }
        json_decref(line), free(text), json_decref(schema);
        sampler_free(smp);
        grammar_matcher_free(m);
        grammar_release(g);
    }
    fclose(out);
    printf("schema_random: %d schemas, %d tokens generated, %d cut at the %d-token budget, %d failures\n", N, tokens,
           cuts, BUDGET, failures);
    grammar_vocab_release(voc);
    tok_vocab_free(&tv);
    free(ptr), free(logits), free(ids);
    tok_free(tok);
    return failures ? 1 : 0;
}
