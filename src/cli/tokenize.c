/* `mlxcel tokenize` and `mlxcel detokenize`: text <-> ids with a tokenizer.json, plus an
 * encode-throughput benchmark (`tokenize --bench FILE`, JSON on stdout). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "cli/cli.h"
#include "text/tokenizer.h"

/* ==== Shared ==== */

typedef struct tok_args {
    const char *tokenizer, *model_dir, *prompt, *ids, *bench;
    bool add_special, json, skip_special, special_as_text;
    int repeat, chunk;
} tok_args;

static char *slurp(FILE *f, size_t *n) {
    size_t cap = 1 << 16, len = 0;
    char *p = malloc(cap);
    if (!p) return NULL;
    size_t r;
    while ((r = fread(p + len, 1, cap - len - 1, f)) > 0) {
        len += r;
        if (cap - len < 2) {
            char *q = realloc(p, cap *= 2);
            if (!q) {
                free(p);
                return NULL;
            }
            p = q;
        }
    }
    p[len] = '\0';
    *n = len;
    return p;
}

static int load(const tok_args *a, tokenizer **t, const char *cmd) {
    mx_error err = {{0}};
    if (!a->tokenizer && !a->model_dir) {
        fprintf(stderr, "mlxcel %s: give --tokenizer FILE or -m DIR (see --help)\n", cmd);
        return 2;
    }
    int rc = a->tokenizer ? tok_load_file(t, a->tokenizer, &err) : tok_load_dir(t, a->model_dir, &err);
    if (rc) {
        fprintf(stderr, "mlxcel %s: %s\n", cmd, err.msg);
        return 1;
    }
    return 0;
}

/* Returns 0 on success, 2 on a usage error (message printed), 1 when --help was printed. */
static int parse(int argc, char **argv, tok_args *a, bool detok, const char *help) {
    memset(a, 0, sizeof *a);
    a->repeat = 3;
    a->chunk = 4096;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            fputs(help, stdout);
            return 1;
        } else if (!strcmp(o, "--tokenizer") && has_val) a->tokenizer = argv[++i];
        else if ((!strcmp(o, "-m") || !strcmp(o, "--model")) && has_val) a->model_dir = argv[++i];
        else if (!strcmp(o, "--json")) a->json = true;
        else if (!detok && (!strcmp(o, "-p") || !strcmp(o, "--prompt")) && has_val) a->prompt = argv[++i];
        else if (!detok && !strcmp(o, "--add-special")) a->add_special = true;
        else if (!detok && !strcmp(o, "--special-as-text")) a->special_as_text = true;
        else if (!detok && !strcmp(o, "--bench") && has_val) a->bench = argv[++i];
        else if (!detok && !strcmp(o, "--repeat") && has_val) {
            a->repeat = atoi(argv[++i]);
            if (a->repeat < 1 || a->repeat > 1000) {
                fprintf(stderr, "mlxcel tokenize: --repeat expects 1..1000\n");
                return 2;
            }
        } else if (!detok && !strcmp(o, "--chunk") && has_val) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 0 || v > (1L << 30)) {
                fprintf(stderr, "mlxcel tokenize: --chunk expects a byte count (0 = whole file)\n");
                return 2;
            }
            a->chunk = (int)v;
        } else if (detok && !strcmp(o, "--ids") && has_val) a->ids = argv[++i];
        else if (detok && !strcmp(o, "--skip-special")) a->skip_special = true;
        else {
            fprintf(stderr, "mlxcel %s: unknown or incomplete option '%s' (see --help)\n", argv[0], o);
            return 2;
        }
    }
    return 0;
}

/* ==== tokenize ==== */

static const char k_tok_help[] =
    "usage: mlxcel tokenize (--tokenizer FILE | -m DIR) [--add-special] [--special-as-text] [-p TEXT] [--json]\n"
    "       mlxcel tokenize (--tokenizer FILE | -m DIR) --bench FILE [--repeat N] [--chunk BYTES]\n\n"
    "Encodes TEXT (or all of stdin) and prints the ids, space separated (a JSON array with --json).\n\n"
    "  --tokenizer FILE  a tokenizer.json\n"
    "  -m, --model DIR   a checkpoint directory (tokenizer.json + tokenizer_config.json)\n"
    "  -p, --prompt TEXT text to encode (default: stdin)\n"
    "  --add-special     apply the post-processor (BOS/EOS), as add_special_tokens=True\n"
    "  --special-as-text special-token text in the input stays plain text (untrusted input)\n"
    "  --json            print a JSON array\n"
    "  --bench FILE      encode FILE in chunks, N times, single-threaded, and print throughput\n"
    "                    as JSON: {\"bytes\", \"chunks\", \"tokens\", \"best_s\", \"median_s\",\n"
    "                    \"mb_per_s\" (from the best run), ...}; MB = 1e6 bytes\n"
    "  --chunk BYTES     chunk rule of tools/reference/bench_tokenizers.py: whole lines are\n"
    "                    appended until a chunk holds >= BYTES (default 4096; 0 = whole file)\n"
    "  --repeat N        runs for --bench (default 3)\n";

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Chunks as tools/reference/bench_tokenizers.py makes them: whole lines ('\n' kept with its
 * line) are appended to a chunk until it holds >= chunk bytes. chunk 0: the whole file. */
static size_t make_chunks(const char *text, size_t n, size_t chunk, size_t **starts) {
    size_t cap = 1024, k = 0;
    *starts = malloc((cap + 1) * sizeof **starts);
    size_t pos = 0;
    while (pos < n && *starts) {
        if (k == cap) {
            size_t *q = realloc(*starts, ((cap *= 2) + 1) * sizeof **starts);
            if (!q) break;
            *starts = q;
        }
        (*starts)[k++] = pos;
        if (chunk == 0) {
            pos = n;
            break;
        }
        size_t start = pos;
        while (pos < n && pos - start < chunk) {
            const char *nl = memchr(text + pos, '\n', n - pos);
            pos = nl ? (size_t)(nl - text) + 1 : n;
        }
    }
    if (*starts) (*starts)[k] = n;
    return k;
}

static int run_bench(const tokenizer *t, const tok_args *a) {
    FILE *f = fopen(a->bench, "rb");
    if (!f) {
        fprintf(stderr, "mlxcel tokenize: %s: %s\n", a->bench, strerror(errno));
        return 1;
    }
    size_t n;
    char *text = slurp(f, &n);
    fclose(f);
    if (!text) return 1;
    size_t *starts;
    size_t n_chunks = make_chunks(text, n, (size_t)a->chunk, &starts);
    double *times = calloc((size_t)a->repeat, sizeof *times);
    size_t n_tok = 0;
    int rc = 0;
    for (int r = 0; r < a->repeat && rc == 0; r++) {
        n_tok = 0;
        double t0 = mx_now();
        for (size_t c = 0; c < n_chunks; c++) {
            int32_t *ids;
            size_t k;
            mx_error err;
            if (tok_encode(t, text + starts[c], starts[c + 1] - starts[c], a->add_special, &ids, &k, &err)) {
                fprintf(stderr, "mlxcel tokenize: %s\n", err.msg);
                rc = 1;
                break;
            }
            n_tok += k;
            free(ids);
        }
        times[r] = mx_now() - t0;
    }
    if (rc == 0) {
        double first = times[0];
        qsort(times, (size_t)a->repeat, sizeof *times, cmp_double);
        double best = times[0], med = times[a->repeat / 2];
        printf("{\"tokenizer\": \"%s\", \"file\": \"%s\", \"bytes\": %zu, \"chunk_bytes\": %d, \"chunks\": %zu, "
               "\"tokens\": %zu, \"repeat\": %d, \"first_s\": %.4f, \"best_s\": %.4f, \"median_s\": %.4f, "
               "\"mb_per_s\": %.2f, \"mb_per_s_median\": %.2f, \"threads\": 1}\n",
               a->tokenizer ? a->tokenizer : a->model_dir, a->bench, n, a->chunk, n_chunks, n_tok, a->repeat, first,
               best, med, best > 0 ? (double)n / 1e6 / best : 0.0, med > 0 ? (double)n / 1e6 / med : 0.0);
    }
    free(starts);
    free(text);
    free(times);
    return rc;
}

int cmd_tokenize(int argc, char **argv) {
    tok_args a;
    int pr = parse(argc, argv, &a, false, k_tok_help);
    if (pr) return pr == 1 ? 0 : 2;
    tokenizer *t;
    int rc = load(&a, &t, "tokenize");
    if (rc) return rc;
    if (a.bench) {
        rc = run_bench(t, &a);
        tok_free(t);
        return rc;
    }
    size_t n;
    char *text = a.prompt ? strdup(a.prompt) : slurp(stdin, &n);
    if (a.prompt) n = strlen(a.prompt);
    int32_t *ids = NULL;
    size_t n_ids = 0;
    mx_error err;
    unsigned flags = (a.add_special ? TOK_ENC_ADD_SPECIAL : 0) | (a.special_as_text ? TOK_ENC_SPECIAL_AS_TEXT : 0);
    if (!text || tok_encode_ex(t, text, n, flags, &ids, &n_ids, &err)) {
        fprintf(stderr, "mlxcel tokenize: %s\n", text ? err.msg : "out of memory");
        free(text);
        tok_free(t);
        return 1;
    }
    if (a.json) putchar('[');
    for (size_t i = 0; i < n_ids; i++) printf(i ? (a.json ? ", %d" : " %d") : "%d", ids[i]);
    printf(a.json ? "]\n" : "\n");
    free(ids);
    free(text);
    tok_free(t);
    return 0;
}

/* ==== detokenize ==== */

static const char k_detok_help[] =
    "usage: mlxcel detokenize (--tokenizer FILE | -m DIR) [--ids 1,2,3] [--skip-special] [--json]\n\n"
    "Decodes ids (from --ids, or stdin: separated by commas/spaces, a JSON array works too) and\n"
    "prints the text.\n\n"
    "  --tokenizer FILE  a tokenizer.json\n"
    "  -m, --model DIR   a checkpoint directory\n"
    "  --ids LIST        ids, e.g. 9906,1917\n"
    "  --skip-special    drop special tokens (skip_special_tokens=True)\n"
    "  --json            print the text as a JSON string\n";

static int parse_ids(const char *s, int32_t **out, size_t *n) {
    size_t cap = 64;
    int32_t *v = malloc(cap * sizeof *v);
    *n = 0;
    while (v && *s) {
        if (strchr(" \t\r\n,[]", *s)) {
            s++;
            continue;
        }
        char *end;
        errno = 0;
        long x = strtol(s, &end, 10);
        if (end == s || errno || x < 0 || x > INT32_MAX) {
            fprintf(stderr, "mlxcel detokenize: bad id near '%.20s' (expected non-negative integers)\n", s);
            free(v);
            return -1;
        }
        if (*n == cap) {
            int32_t *q = realloc(v, (cap *= 2) * sizeof *v);
            if (!q) break;
            v = q;
        }
        v[(*n)++] = (int32_t)x;
        s = end;
    }
    *out = v;
    return v ? 0 : -1;
}

/* s[0..n) may hold U+0000 (InternLM2 has a piece for it): printed as \u0000, never the end */
static void print_json_string(const char *s, size_t n) {
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; p < (const unsigned char *)s + n; p++) {
        if (*p == '"' || *p == '\\') printf("\\%c", *p);
        else if (*p == '\n') fputs("\\n", stdout);
        else if (*p == '\t') fputs("\\t", stdout);
        else if (*p == '\r') fputs("\\r", stdout);
        else if (*p < 0x20) printf("\\u%04x", *p);
        else putchar(*p);
    }
    puts("\"");
}

int cmd_detokenize(int argc, char **argv) {
    tok_args a;
    int pr = parse(argc, argv, &a, true, k_detok_help);
    if (pr) return pr == 1 ? 0 : 2;
    size_t n;
    char *in = a.ids ? strdup(a.ids) : slurp(stdin, &n);
    int32_t *ids;
    size_t n_ids;
    if (!in || parse_ids(in, &ids, &n_ids)) {
        free(in);
        return 2;
    }
    free(in);
    tokenizer *t;
    int rc = load(&a, &t, "detokenize");
    if (rc) {
        free(ids);
        return rc;
    }
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] >= tok_vocab_size(t)) {
            fprintf(stderr, "mlxcel detokenize: id %d is outside the vocabulary (size %d)\n", ids[i],
                    tok_vocab_size(t));
            free(ids);
            tok_free(t);
            return 1;
        }
    char *text;
    size_t text_n;
    mx_error err;
    if (tok_decode_n(t, ids, n_ids, a.skip_special, &text, &text_n, &err)) {
        fprintf(stderr, "mlxcel detokenize: %s\n", err.msg);
        rc = 1;
    } else {
        if (a.json) print_json_string(text, text_n);
        else {
            fwrite(text, 1, text_n, stdout);
            putchar('\n');
        }
        free(text);
    }
    free(ids);
    tok_free(t);
    return rc;
}
