/* Token-mask cost of constrained decoding on a real vocabulary (grammar/grammar.h).
 *
 * usage: grammar_mask_bench TOKENIZER_JSON [ROWS...]   (default rows: 1 32)
 *
 * For each grammar (json_object, a nested JSON schema, a GBNF arithmetic grammar) and each row
 * count B, B matchers of one compiled grammar follow B different documents (real JSON / real
 * expressions, tokenized by the tokenizer itself) in lockstep, as B constrained sequences of
 * one engine step do: every step computes each row's mask over the whole vocabulary, then
 * advances it by its document's next token. Times are thread CPU time per row-step (the
 * machine is shared), reported as mean / p50 / p99, for:
 *   cold  a freshly compiled grammar (its parse tables and mask cache start empty),
 *   warm  the same grammar object on new documents (what a server sees for a schema it has
 *         served before: grammars are cached by source),
 * and the cost of applying a mask to a row of logits (grammar_mask_apply). The masks are
 * checked: every document token must be allowed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "text/tokenizer.h"

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t g_rng = 12345;
static uint32_t rnd(uint32_t n) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(g_rng >> 33) % n;
}

static const char *k_words[] = {"ocean", "harbor", "lantern", "maple", "quartz", "river", "saffron", "tundra",
                                "velvet", "willow", "Zürich", "café", "naïve", "東京", "emoji 😀", "O'Neil",
                                "a \\\"quoted\\\" word", "line\\nbreak", "north", "south"};
#define NW (int)(sizeof k_words / sizeof *k_words)

/* ==== Documents ==== */
static void doc_object(char *b, size_t cap) { /* json_object: any object */
    int n = snprintf(b, cap, "{\"title\": \"%s %s\", \"count\": %u, \"ok\": %s, \"items\": [", k_words[rnd(NW)],
                     k_words[rnd(NW)], rnd(100000), rnd(2) ? "true" : "false");
    for (int i = 0, m = 2 + (int)rnd(4); i < m; i++)
        n += snprintf(b + n, cap - (size_t)n, "%s{\"name\": \"%s\", \"score\": %u.%u}", i ? ", " : "", k_words[rnd(NW)],
                      rnd(100), rnd(100));
    snprintf(b + n, cap - (size_t)n, "], \"note\": \"%s and %s, then %s.\"}", k_words[rnd(NW)], k_words[rnd(NW)],
             k_words[rnd(NW)]);
}

static const char *k_person_schema =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"maxLength\":60},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
    "\"email\":{\"type\":\"string\",\"pattern\":\"^[a-z]+@[a-z]+\\\\.com$\"},"
    "\"address\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":\"string\"},\"city\":{\"type\":\"string\"},"
    "\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"}},\"required\":[\"street\",\"city\",\"zip\"],"
    "\"additionalProperties\":false},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":20},\"maxItems\":8},"
    "\"joined\":{\"type\":\"string\",\"format\":\"date\"},"
    "\"role\":{\"enum\":[\"admin\",\"editor\",\"viewer\"]}},"
    "\"required\":[\"name\",\"age\",\"address\",\"tags\",\"joined\",\"role\"],\"additionalProperties\":false}";

static void doc_person(char *b, size_t cap) {
    static const char *roles[] = {"admin", "editor", "viewer"};
    /* required properties first, in schema order, then the optional ones (the grammar's order) */
    int n = snprintf(b, cap, "{\"name\": \"%s %s\", \"age\": %u, \"address\": {\"street\": "
                     "\"%u %s Street\", \"city\": \"%s\", \"zip\": \"%05u\"}, \"tags\": [",
                     k_words[rnd(NW)], k_words[rnd(NW)], rnd(100), 1 + rnd(999), k_words[rnd(NW)],
                     k_words[rnd(NW)], rnd(100000));
    for (int i = 0, m = 1 + (int)rnd(4); i < m; i++) n += snprintf(b + n, cap - (size_t)n, "%s\"%s\"", i ? ", " : "", k_words[rnd(8)]);
    snprintf(b + n, cap - (size_t)n, "], \"joined\": \"20%02u-0%u-1%u\", \"role\": \"%s\", \"email\": \"ann@mail.com\"}",
             rnd(30), 1 + rnd(9), rnd(10), roles[rnd(3)]);
}

static const char *k_arith =
    "root  ::= expr\n"
    "expr  ::= term (ws (\"+\" | \"-\") ws term)*\n"
    "term  ::= factor (ws (\"*\" | \"/\") ws factor)*\n"
    "factor ::= num | \"(\" ws expr ws \")\"\n"
    "num   ::= [0-9]+ (\".\" [0-9]+)?\n"
    "ws    ::= \" \"?\n";

static void doc_arith(char *b, size_t cap) {
    static const char *ops[] = {" + ", " - ", " * ", " / "};
    int n = 0;
    for (int i = 0, m = 6 + (int)rnd(8); i < m && (size_t)n + 40 < cap; i++) {
        if (i) n += snprintf(b + n, cap - (size_t)n, "%s", ops[rnd(4)]);
        if (rnd(3) == 0) n += snprintf(b + n, cap - (size_t)n, "(%u.%u - %u)", rnd(1000), rnd(100), rnd(50));
        else n += snprintf(b + n, cap - (size_t)n, "%u", rnd(100000));
    }
}

/* ==== Measurement ==== */
static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct stat3 {
    double mean, p50, p99;
    long n;
} stat3;

static stat3 stats(double *v, long n) {
    stat3 s = {0, 0, 0, n};
    if (!n) return s;
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    for (long i = 0; i < n; i++) s.mean += v[i];
    s.mean /= (double)n;
    s.p50 = v[n / 2];
    s.p99 = v[(long)((double)n * 0.99)];
    return s;
}

/* B rows of grammar g follow B documents of gen in lockstep; per row-step times into t. */
static long run_rows(grammar *g, grammar_vocab *v, tokenizer *tok, int B, void (*gen)(char *, size_t), double *t,
                     int n_vocab) {
    int32_t **ids = calloc((size_t)B, sizeof *ids);
    size_t *n = calloc((size_t)B, sizeof *n);
    grammar_matcher **m = calloc((size_t)B, sizeof *m);
    mx_error err;
    size_t steps = 0;
    for (int r = 0; r < B; r++) {
        char doc[4096];
        gen(doc, sizeof doc);
        if (tok_encode_ex(tok, doc, strlen(doc), 0, &ids[r], &n[r], &err)) { fprintf(stderr, "%s\n", err.msg); exit(1); }
        if (!grammar_accepts(g, doc, strlen(doc))) { fprintf(stderr, "document outside its grammar: %s\n", doc); exit(1); }
        m[r] = grammar_matcher_new(g, v, &err);
        if (n[r] > steps) steps = n[r];
    }
    long k = 0;
    for (size_t s = 0; s <= steps; s++)
        for (int r = 0; r < B; r++) {
            if (s > n[r]) continue;
            const double t0 = cpu_now();
            const uint32_t *mask = grammar_matcher_mask(m[r], n_vocab, &err);
            t[k++] = (cpu_now() - t0) * 1e6;
            if (!mask) { fprintf(stderr, "%s\n", err.msg); exit(1); }
            const int32_t next = s < n[r] ? ids[r][s] : -1;
            if (next >= 0) {
                if (!(mask[next >> 5] >> (next & 31) & 1)) { fprintf(stderr, "token %d refused by the mask\n", next); exit(1); }
                if (grammar_matcher_accept(m[r], next, &err)) { fprintf(stderr, "%s\n", err.msg); exit(1); }
            } else if (!grammar_matcher_can_end(m[r])) {
                fprintf(stderr, "document complete but the grammar cannot end\n");
                exit(1);
            }
        }
    for (int r = 0; r < B; r++) grammar_matcher_free(m[r]), free(ids[r]);
    free(ids), free(n), free(m);
    return k;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s TOKENIZER_JSON [ROWS...]\n", argv[0]);
        return 2;
    }
    mx_error err;
    tokenizer *tok;
    if (tok_load_file(&tok, argv[1], &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    tok_vocab tv;
    double t0 = cpu_now();
    if (tok_vocab_bytes(tok, &tv, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    const double t_bytes = cpu_now() - t0;
    const char **ptr = malloc((size_t)tv.n * sizeof *ptr);
    for (int i = 0; i < tv.n; i++) ptr[i] = tv.data + tv.off[i];
    int32_t eos = tok_piece_to_id(tok, "<|eot_id|>");
    if (eos < 0) eos = tv.n - 1;
    grammar_vocab *v;
    t0 = cpu_now();
    if (grammar_vocab_new(&v, tv.n, ptr, tv.len, tv.special, &eos, 1, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    const double t_trie = cpu_now() - t0;
    const int n_vocab = tv.n;
    printf("vocabulary: %d tokens; token bytes %.0f ms, prefix tree %.0f ms (CPU time, once per model)\n", tv.n,
           t_bytes * 1e3, t_trie * 1e3);
    int rows[8] = {1, 32}, n_rows = 2;
    if (argc > 2) {
        n_rows = 0;
        for (int i = 2; i < argc && n_rows < 8; i++) rows[n_rows++] = atoi(argv[i]);
    }
    struct { const char *name; void (*gen)(char *, size_t); } cases[] = {
        {"json_object", doc_object}, {"nested schema", doc_person}, {"GBNF arithmetic", doc_arith}};
    double *t = malloc(sizeof(double) * 2000000);
    printf("%-16s %4s %5s %10s %10s %10s %8s\n", "grammar", "B", "pass", "mean us", "p50 us", "p99 us", "steps");
    for (int ci = 0; ci < 3; ci++)
        for (int ri = 0; ri < n_rows; ri++) {
            grammar *g = NULL;
            if (ci == 0) grammar_json_object(&g, &err);
            else if (ci == 1) {
                json_t *s = json_loads(k_person_schema, 0, NULL);
                if (grammar_from_json_schema(&g, s, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
                json_decref(s);
            } else if (grammar_compile(&g, k_arith, strlen(k_arith), &err)) return fprintf(stderr, "%s\n", err.msg), 1;
            for (int pass = 0; pass < 2; pass++) {
                long k = run_rows(g, v, tok, rows[ri], cases[ci].gen, t, n_vocab);
                stat3 st = stats(t, k);
                printf("%-16s %4d %5s %10.1f %10.1f %10.1f %8ld\n", cases[ci].name, rows[ri], pass ? "warm" : "cold",
                       st.mean, st.p50, st.p99, st.n);
            }
            grammar_release(g);
        }
    /* applying a mask to a row of logits: half the vocabulary allowed, in runs */
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    uint32_t *mask = malloc((size_t)(n_vocab + 31) / 32 * sizeof *mask);
    for (int w = 0; w < (n_vocab + 31) / 32; w++) mask[w] = w % 3 ? 0xFFFFFFFFu : 0x0F0F0F0Fu;
    double best = 1e9;
    for (int rep = 0; rep < 200; rep++) {
        for (int i = 0; i < n_vocab; i++) logits[i] = (float)i;
        t0 = cpu_now();
        grammar_mask_apply(mask, logits, n_vocab);
        const double dt = cpu_now() - t0;
        if (dt < best) best = dt;
    }
    printf("grammar_mask_apply over %d logits: %.1f us (best of 200)\n", n_vocab, best * 1e6);
    free(t), free(logits), free(mask), free(ptr);
    grammar_vocab_release(v);
    tok_vocab_free(&tv);
    tok_free(tok);
    return 0;
}
