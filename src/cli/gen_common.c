/* Shared option parsing and set-up for `generate` and `run`. */
#include "cli/gen_common.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"

const char *const k_gen_opts_help =
    "  -n, --n-predict N          tokens to generate (default: until EOS or the context is full)\n"
    "  --temp T                   temperature; 0 = greedy (default: generation_config.json when\n"
    "                             it sets do_sample, else greedy)\n"
    "  --top-k K                  keep the K most likely tokens (0 = off)\n"
    "  --top-p P                  nucleus sampling (1 = off)\n"
    "  --min-p M                  drop tokens below M x the top probability (0 = off)\n"
    "  --repeat-penalty R         repetition penalty over the last --repeat-last-n tokens (1 = off)\n"
    "  --repeat-last-n N          window of the repetition penalty (default 64)\n"
    "  --presence-penalty P, --frequency-penalty F\n"
    "  --seed S                   random seed (same seed, same output; default: a fresh one)\n"
    "  --ignore-eos               keep generating past end-of-sequence tokens\n"
    "  --stop STR                 stop string (repeatable; needs tokenizer.json)\n"
    "  -c, --ctx-size N           tokens per sequence, prompt + output (default min(4096, model))\n"
    "  --device cpu|cuda          compute device (default cpu)\n"
    "  --tp-size N                tensor-parallel ranks (default 1; CPU: threads, CUDA: one GPU\n"
    "                             each over NCCL)\n"
    "  --load-format auto|dummy   dummy: read only config.json and generate the weights (vLLM's\n"
    "                             meaning; for timing and memory checks of shapes without files)\n"
    "  --decode-storage-backend auto|dense|paged\n"
    "                             KV storage; auto = paged for llama, qwen3, gemma3 text, llama4\n"
    "  --prefill-chunk-size N     prompt tokens per step (default 512)\n"
    "  -b, --batch-size N         token rows per engine step (default 2048)\n"
    "  --kv-blocks N              paged KV pool size in blocks (default: the context for all slots)\n"
    "  --no-prefix-cache          do not reuse cached prompt blocks\n"
    "  -ctk, --cache-type-k TYPE  K cache type: f32 (CPU default), f16, bf16, q8_0, q4_0 (ggml's\n"
    "                             blocks of 32 along head_dim), turbo2, turbo3, turbo4 (TurboQuant:\n"
    "                             rotated heads, Lloyd-Max codes of 2/3/4 bits; head_dim a power\n"
    "                             of two); CUDA default bf16, every type on CUDA too\n"
    "  -ctv, --cache-type-v TYPE  V cache type, the same choices\n"
    "  --no-chat-template         use the text as it is (tokenizer BOS handling only)\n"
    "  --chat-template-file F     Jinja chat template overriding the model's\n"
    "  --grammar GBNF             constrain the output to a GBNF grammar (llama.cpp's format)\n"
    "  --grammar-file F           ... read from a file\n"
    "  -j, --json-schema SCHEMA   constrain the output to JSON valid for a JSON schema\n"
    "  --json-schema-file F       ... read from a file (docs/structured-output.md)\n";

void gen_opts_default(gen_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_predict = -1;
    o->seed = -1;
    o->repeat_last_n = 64;
    o->device = "cpu";
    o->tp_size = 1;
    o->storage = "auto";
    o->prefill_chunk = 512;
    o->batch_size = 2048;
    o->n_parallel = 1;
    o->block_size = 16;
}

static int parse_int(const char *s, long long lo, long long hi, long long *out) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || !*s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_float(const char *s, double lo, double hi, float *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || !*s || *end || v < lo || v > hi) return -1;
    *out = (float)v;
    return 0;
}

int gen_opts_parse(gen_opts *o, int argc, char **argv, int *i, const char *cmd) {
    const char *a = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    long long n;
#define NEED_VAL()                                                              \
    do {                                                                        \
        if (!v) {                                                               \
            fprintf(stderr, "mlxcel %s: %s needs a value\n", cmd, a);           \
            return -1;                                                          \
        }                                                                       \
        (*i)++;                                                                 \
    } while (0)
#define BAD(what)                                                                          \
    do {                                                                                   \
        fprintf(stderr, "mlxcel %s: %s expects %s, got '%s'\n", cmd, a, what, v);          \
        return -1;                                                                         \
    } while (0)
#define INT_OPT(field, lo, hi, what)                   \
    do {                                               \
        NEED_VAL();                                    \
        if (parse_int(v, lo, hi, &n)) BAD(what);       \
        field = (int)n;                                \
    } while (0)
#define FLOAT_OPT(field, lo, hi, what, setflag)        \
    do {                                               \
        NEED_VAL();                                    \
        if (parse_float(v, lo, hi, &field)) BAD(what); \
        setflag;                                       \
    } while (0)
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
        NEED_VAL();
        o->model_dir = v;
    } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
        INT_OPT(o->n_predict, -1, 1 << 30, "an integer >= -1");
    } else if (!strcmp(a, "--temp") || !strcmp(a, "--temperature")) {
        FLOAT_OPT(o->temp, 0, 100, "a number in [0, 100]", o->temp_set = true);
    } else if (!strcmp(a, "--top-k")) {
        INT_OPT(o->top_k, 0, 1 << 24, "an integer >= 0");
        o->top_k_set = true;
    } else if (!strcmp(a, "--top-p")) {
        FLOAT_OPT(o->top_p, 0, 1, "a number in [0, 1]", o->top_p_set = true);
    } else if (!strcmp(a, "--min-p")) {
        FLOAT_OPT(o->min_p, 0, 1, "a number in [0, 1]", o->min_p_set = true);
    } else if (!strcmp(a, "--repeat-penalty")) {
        FLOAT_OPT(o->repeat_penalty, 0.01, 100, "a number in (0, 100]", o->repeat_penalty_set = true);
    } else if (!strcmp(a, "--repeat-last-n")) {
        INT_OPT(o->repeat_last_n, -1, 1 << 24, "an integer >= -1");
    } else if (!strcmp(a, "--presence-penalty")) {
        FLOAT_OPT(o->presence_penalty, -2, 2, "a number in [-2, 2]", (void)0);
    } else if (!strcmp(a, "--frequency-penalty")) {
        FLOAT_OPT(o->frequency_penalty, -2, 2, "a number in [-2, 2]", (void)0);
    } else if (!strcmp(a, "--seed")) {
        NEED_VAL();
        if (parse_int(v, 0, (1ll << 62), &n)) BAD("a non-negative integer");
        o->seed = n;
    } else if (!strcmp(a, "--ignore-eos")) {
        o->ignore_eos = true;
    } else if (!strcmp(a, "--stop")) {
        NEED_VAL();
        if (o->n_stops == GEN_MAX_STOPS) BAD("at most 16 stop strings");
        if (!*v) BAD("a non-empty string");
        o->stops[o->n_stops++] = v;
    } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
        INT_OPT(o->ctx_size, 2, 1 << 24, "an integer >= 2");
    } else if (!strcmp(a, "--device")) {
        NEED_VAL();
        if (strcmp(v, "cpu") && strcmp(v, "cuda")) BAD("cpu or cuda");
        o->device = v;
    } else if (!strcmp(a, "--load-format")) {
        NEED_VAL();
        if (model_load_format_parse(v, &o->dummy_weights)) BAD("auto or dummy");
    } else if (!strcmp(a, "--tp-size")) {
        INT_OPT(o->tp_size, 1, 64, "an integer in 1..64");
    } else if (!strcmp(a, "--decode-storage-backend")) {
        NEED_VAL();
        kv_storage ks;
        if (kv_storage_parse(v, &ks)) BAD("auto, dense or paged");
        o->storage = v;
    } else if (!strcmp(a, "--prefill-chunk-size")) {
        INT_OPT(o->prefill_chunk, 1, 1 << 20, "an integer >= 1");
    } else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) {
        INT_OPT(o->batch_size, 1, 1 << 20, "an integer >= 1");
    } else if (!strcmp(a, "--kv-blocks")) {
        INT_OPT(o->kv_blocks, 1, 1 << 30, "an integer >= 1");
    } else if (!strcmp(a, "--no-prefix-cache")) {
        o->no_prefix_cache = true;
    } else if (!strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k") || !strcmp(a, "-ctv") ||
               !strcmp(a, "--cache-type-v")) {
        NEED_VAL();
        const bool is_k = !strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k");
        mx_error e;
        if (kv_type_parse(v, is_k ? &o->cache_type_k : &o->cache_type_v, &e)) {
            fprintf(stderr, "mlxcel %s: %s: %s\n", cmd, a, e.msg);
            return -1;
        }
    } else if (!strcmp(a, "--no-chat-template")) {
        o->no_chat_template = true;
    } else if (!strcmp(a, "--chat-template-file")) {
        NEED_VAL();
        o->chat_template_file = v;
    } else if (!strcmp(a, "--grammar") || !strcmp(a, "--grammar-file") || !strcmp(a, "-j") ||
               !strcmp(a, "--json-schema") || !strcmp(a, "--json-schema-file")) {
        NEED_VAL();
        if (o->grammar || o->grammar_file || o->json_schema || o->json_schema_file)
            BAD("a single grammar or schema (one of --grammar, --grammar-file, --json-schema, --json-schema-file)");
        if (!strcmp(a, "--grammar")) o->grammar = v;
        else if (!strcmp(a, "--grammar-file")) o->grammar_file = v;
        else if (!strcmp(a, "--json-schema-file")) o->json_schema_file = v;
        else o->json_schema = v;
    } else {
        return 0;
    }
    return 1;
#undef NEED_VAL
#undef BAD
#undef INT_OPT
#undef FLOAT_OPT
}

int gen_parse_ids(const char *s, int32_t **ids, int *n, mx_error *err) {
    int cap = 16, k = 0;
    int32_t *v = malloc((size_t)cap * sizeof(int32_t));
    if (!v) return mx_fail(err, "out of memory");
    const char *p = s;
    while (*p) {
        char *end = NULL;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX) {
            free(v);
            return mx_fail(err, "--prompt-ids: expected comma-separated non-negative integers, got '%s'", s);
        }
        if (k == cap) {
            int32_t *nv = realloc(v, (size_t)(cap *= 2) * sizeof(int32_t));
            if (!nv) {
                free(v);
                return mx_fail(err, "out of memory");
            }
            v = nv;
        }
        v[k++] = (int32_t)x;
        p = end;
        while (*p == ' ') p++;
        if (*p == ',') p++;
        else if (*p) {
            free(v);
            return mx_fail(err, "--prompt-ids: expected comma-separated non-negative integers, got '%s'", s);
        }
    }
    if (!k) {
        free(v);
        return mx_fail(err, "--prompt-ids: no ids given");
    }
    *ids = v;
    *n = k;
    return 0;
}

/* ==== Session ==== */
static void emit_stderr(void *user, const char *line) {
    (void)user;
    fprintf(stderr, "%s\n", line);
}

int gen_session_open(gen_session *s, const gen_opts *o, const char *cmd, mx_error *err) {
    memset(s, 0, sizeof *s);
    if (!o->model_dir) return mx_fail(err, "no model: give -m DIR (see mlxcel %s --help)", cmd);
    rt_opts ro;
    rt_opts_default(&ro);
    ro.model_dir = o->model_dir;
    ro.device = o->device;
    ro.tp_size = o->tp_size;
    ro.dummy_weights = o->dummy_weights;
    ro.cache_type_k = o->cache_type_k;
    ro.cache_type_v = o->cache_type_v;
    ro.tokenizer = RT_TOK_OPTIONAL;
    ro.chat_template_file = o->chat_template_file;
    ro.no_chat_template = o->no_chat_template;
    if (runtime_open(&s->rt, &ro, err)) return -1;
    if (!s->rt.tok && o->n_stops) {
        gen_session_close(s);
        return mx_fail(err, "--stop needs %s/tokenizer.json, which is missing", o->model_dir);
    }
    if (gen_grammar_open(s, o, err)) {
        gen_session_close(s);
        return -1;
    }
    /* sampling: defaults < generation_config.json (runtime) < flags */
    s->sp = s->rt.sampling;
    if (o->temp_set) s->sp.temperature = o->temp;
    if (o->top_k_set) s->sp.top_k = o->top_k;
    if (o->top_p_set) s->sp.top_p = o->top_p;
    if (o->min_p_set) s->sp.min_p = o->min_p;
    if (o->repeat_penalty_set) s->sp.repeat_penalty = o->repeat_penalty;
    s->sp.repeat_last_n = o->repeat_last_n;
    s->sp.presence_penalty = o->presence_penalty;
    s->sp.frequency_penalty = o->frequency_penalty;
    /* no --seed: a fresh seed per run (same seed, same output) */
    s->sp.seed = o->seed >= 0 ? (uint64_t)o->seed : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    if (sampling_params_validate(&s->sp, err)) {
        gen_session_close(s);
        return -1;
    }
    engine_params ep;
    engine_params_default(&ep, s->rt.spec);
    if (o->ctx_size) ep.ctx_size = o->ctx_size;
    kv_storage_parse(o->storage, &ep.storage);
    ep.prefill_chunk = o->prefill_chunk;
    ep.max_batch_tokens = o->batch_size;
    ep.n_parallel = o->n_parallel;
    ep.n_kv_blocks = o->kv_blocks;
    ep.block_size = o->block_size;
    ep.prefix_cache = !o->no_prefix_cache;
    ep.cache_type_k = o->cache_type_k;
    ep.cache_type_v = o->cache_type_v;
    if (runtime_start_engine(&s->rt, &ep, err)) {
        gen_session_close(s);
        return -1;
    }
    runtime_describe(&s->rt, emit_stderr, NULL);
    return 0;
}

static int encode(const gen_session *s, const char *text, bool special, int32_t **ids, int *n,
                  mx_error *err) {
    size_t nn = 0;
    if (tok_encode(s->rt.tok, text, strlen(text), special, ids, &nn, err)) return -1;
    *n = (int)nn;
    return 0;
}

int gen_render_chat(const gen_session *s, const json_t *messages, int32_t **ids, int *n, mx_error *err) {
    char *text = NULL;
    if (chat_template_apply(s->rt.tpl, messages, NULL, true, &text, err)) return -1;
    const int rc = encode(s, text, false, ids, n, err);
    free(text);
    return rc;
}

int gen_encode_raw(const gen_session *s, const char *text, int32_t **ids, int *n, mx_error *err) {
    return encode(s, text, true, ids, n, err);
}

void gen_session_close(gen_session *s) {
    grammar_release(s->grammar);
    grammar_vocab_release(s->grammar_vocab);
    runtime_close(&s->rt);
    memset(s, 0, sizeof *s);
}
