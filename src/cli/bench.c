/* `mlxcel bench`: prefill and decode throughput of the one engine (engine_step) per batch size.
 *
 * Per batch size B (after one warm-up run): B sequences of random prompt tokens are submitted at
 * once and run to gen_tokens each (greedy, EOS ignored, no prefix cache). With --shared-prefix N
 * the first N tokens of every prompt of a run are the same, the prefix cache is on, and an
 * untimed request puts those N tokens in it before the B are submitted (a cached system
 * prompt): the B prompts share its blocks and prefill only the rest. From the token timestamps:
 *   prefill tok/s  = prompt tokens computed (B * prompt_tokens less the prefix-cache hits) /
 *                    (time until the last sequence has its first token)
 *   TTFT           = first token - submit, per sequence (p50, max)
 *   decode tok/s   = tokens sampled after that moment / the time they took (aggregate; / B per
 *                    sequence): only pure decode steps count
 *   ITL            = gaps between consecutive tokens of a sequence in that window (p50, p99)
 *   memory         = high-water mark: device bytes allocated (CUDA) or process RSS (CPU)
 *   decode GB/s    = (weight bytes + KV bytes read per step) / step time, and its share of the
 *                    copy bandwidth measured at start on the same device (bytes read + written)
 * Each metric is the median over --repeat runs. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "cli/cli.h"
#include "engine/engine.h"
#include "runtime/runtime.h"

static const char *k_help =
    "usage: mlxcel bench -m DIR [options]\n"
    "\n"
    "Prefill/decode throughput of the engine per batch size: prefill tok/s, TTFT, decode tok/s\n"
    "(aggregate and per sequence), inter-token latency p50/p99, memory high-water mark, and the\n"
    "decode GB/s (weights + KV read per step) against the copy bandwidth measured at start.\n"
    "\n"
    "  -m, --model DIR            checkpoint directory\n"
    "  --device cpu|cuda          compute device (default cpu)\n"
    "  --tp-size N                tensor-parallel ranks (default 1; CPU: threads, CUDA: one GPU\n"
    "                             each over NCCL)\n"
    "  --load-format auto|dummy   dummy: read only config.json and generate the weights\n"
    "  --prompt-tokens N          random prompt tokens per sequence (default 512)\n"
    "  --gen-tokens N             tokens generated per sequence (default 128)\n"
    "  --batch LIST               batch sizes, comma-separated (default 1,8,32)\n"
    "  --repeat N                 runs per batch size; medians are reported (default 3)\n"
    "  --prefill-chunk-size N     prompt rows per sequence per step (default: the prompt length)\n"
    "  --shared-prefix N          the first N prompt tokens of every sequence of a run are the\n"
    "                             same, and are in the prefix cache before the run (an untimed\n"
    "                             request puts them there): the batch shares their KV blocks, and\n"
    "                             prefill tok/s counts the tokens computed (default 0: no prefix\n"
    "                             cache); decode GB/s still counts each sequence's whole context\n"
    "  -b, --batch-tokens N       token rows per step (default: every prompt of the batch in one\n"
    "                             step, up to 16384 rows, so decode runs with all B sequences in\n"
    "                             lockstep, as llama-batched-bench measures it; at least 2048)\n"
    "  --decode-storage-backend auto|dense|paged   KV storage (default auto)\n"
    "  -ctk, --cache-type-k TYPE  K cache type: f32 (CPU default), f16, bf16 (CUDA default), q8_0,\n"
    "                             q4_0, turbo2, turbo3, turbo4\n"
    "  -ctv, --cache-type-v TYPE  V cache type, the same choices\n"
    "  --seed S                   seed of the random prompts (default 1)\n"
    "  --json                     one JSON object on stdout instead of the table\n"
    "  -h, --help                 this help\n";

#define BENCH_MAX_BATCHES 16

typedef struct bench_opts {
    const char *model_dir;
    const char *device;
    int tp_size;
    bool dummy_weights;
    const char *storage;
    kv_type cache_type_k, cache_type_v;
    int prompt_tokens, gen_tokens, repeat, prefill_chunk, batch_tokens, shared_prefix;
    int batches[BENCH_MAX_BATCHES], n_batches;
    unsigned long long seed;
    bool json;
} bench_opts;

/* One batch-size run's figures (medians when repeated). */
typedef struct bench_result {
    int batch;
    double prefill_tps, ttft_p50_ms, ttft_max_ms;
    double decode_tps, decode_tps_seq, itl_p50_ms, itl_p99_ms;
    double mem_peak_bytes, decode_gbs, decode_pct_copy, step_bytes;
    int decode_tokens;
    double prefill_tokens;  /* prompt tokens computed (less prefix-cache hits) */
} bench_result;

/* ==== Per-sequence token timestamps ==== */
typedef struct bench_seq {
    double *t;      /* [n] time of each sampled token */
    int n, cap;
    bool failed;
} bench_seq;

static int on_token(void *user, int64_t id, int32_t tok, float lp) {
    (void)id;
    (void)tok;
    (void)lp;
    bench_seq *s = user;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 256;
        double *t = realloc(s->t, (size_t)cap * sizeof(double));
        if (!t) return 1;
        s->t = t;
        s->cap = cap;
    }
    s->t[s->n++] = mx_now();
    return 0;
}

static void on_finish(void *user, int64_t id, engine_finish why, const engine_seq_stats *st) {
    (void)id;
    (void)st;
    if (why == ENGINE_FINISH_ERROR) ((bench_seq *)user)->failed = true;
}

/* ==== Statistics ==== */
static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of v[0..n) (sorted in place); 0 for an empty set. */
static double percentile(double *v, int n, double p) {
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int k = (int)ceil(p / 100.0 * n) - 1;
    if (k < 0) k = 0;
    if (k >= n) k = n - 1;
    return v[k];
}

/* ==== Memory: CPU resident-set high-water mark ==== */
static void rss_reset_peak(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w"); /* "5" resets VmHWM (Linux >= 4.0) */
    if (f) {
        fputs("5", f);
        fclose(f);
    }
}

static double rss_peak_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    double kb = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kb = strtod(line + 6, NULL);
    fclose(f);
    return kb * 1024.0;
}

/* memcpy bandwidth of this machine, bytes read + written per second (best of 5). */
static double cpu_copy_bandwidth(void) {
    const size_t n = 128u << 20;
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b) {
        free(a);
        free(b);
        return 0;
    }
    memset(a, 1, n);
    memset(b, 2, n);
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        const double t0 = mx_now();
        memcpy(b, a, n);
        const double t = mx_now() - t0;
        if (t < best) best = t;
        a[r] = b[n - 1 - r]; /* keep the copies observable */
    }
    free(a);
    free(b);
    return 2.0 * (double)n / best / 1e9;
}

/* ==== Bytes read per decode step ==== */
/* Weights a decode step of B rows streams: everything except the embedding table (only B rows
 * of it are read, unless it doubles as the tied lm_head), and of the MoE experts only those
 * the B rows are expected to select (E * (1 - (1 - k/E)^B) distinct experts per layer). Sizes
 * are as stored, so a quantized table or expert counts its packed bytes, not V * H * dtype. */
static double step_weight_bytes(const model *m, int B) {
    const model_spec *s = model_spec_of(m);
    double bytes = (double)model_weight_bytes(m);
    if (!s->tie_word_embeddings) bytes -= (double)model_embedding_bytes(m);
    if (s->n_experts > 0) { /* the share of every MoE layer's experts left unselected */
        const double E = s->n_experts, k = s->n_experts_per_tok;
        bytes -= (double)model_expert_bytes(m) * pow(1.0 - k / E, B);
    }
    return bytes;
}

/* ==== One engine per batch size (its warm-up captures the decode graphs the runs replay) ==== */
static engine *bench_engine(const bench_opts *o, model *m, int B, int P, int G, mx_error *err) {
    const model_spec *spec = model_spec_of(m);
    engine_params ep;
    engine_params_default(&ep, spec);
    ep.n_parallel = B;
    ep.ctx_size = (P + G + 1 + 15) / 16 * 16; /* whole 16-token chunks (dense slots too) */
    ep.prefill_chunk = o->prefill_chunk > 0 ? o->prefill_chunk : (P < 8192 ? P : 8192);
    /* Every prompt prefilled before the first decode step (llama-batched-bench's S_PP then S_TG):
     * with a smaller budget the prompts would be staggered and the decode window would mix
     * batch sizes, measuring the scheduler's interleaving rather than B-row decode. */
    long all = (long)B * ep.prefill_chunk;
    if (all > 16384) all = 16384;
    ep.max_batch_tokens = o->batch_tokens > 0 ? o->batch_tokens : (int)all;
    if (ep.max_batch_tokens < ep.prefill_chunk) ep.max_batch_tokens = ep.prefill_chunk;
    if (ep.max_batch_tokens < 2048) ep.max_batch_tokens = 2048;
    ep.prefix_cache = o->shared_prefix > 0;
    kv_storage_parse(o->storage, &ep.storage);
    ep.cache_type_k = o->cache_type_k;
    ep.cache_type_v = o->cache_type_v;
    engine *e = NULL;
    return engine_new(&e, m, &ep, err) ? NULL : e;
}

/* ==== One run: B sequences of P random tokens, G generated each ==== */
/* n random ids (xorshift; one stream for the whole program: prompts differ per sequence and
 * per run). */
static void random_tokens(const bench_opts *o, int vocab, int32_t *out, int n) {
    static unsigned long long state;
    if (!state) state = o->seed * 0x9E3779B97F4A7C15ull + 1;
    for (int i = 0; i < n; i++) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out[i] = (int32_t)(state % (unsigned long long)vocab);
    }
}

static int bench_run(const bench_opts *o, model *m, engine *e, const backend_ops *be, int B, int P,
                     int G, double copy_gbs, bench_result *r, mx_error *err) {
    const model_spec *spec = model_spec_of(m);
    bench_seq *seqs = calloc((size_t)B, sizeof *seqs);
    int32_t *prompt = malloc((size_t)P * sizeof(int32_t));
    int rc = -1;
    if (!seqs || !prompt) {
        mx_fail(err, "out of memory");
        goto out;
    }
    /* random prompts, different per sequence and per run (xorshift); the first N tokens (shared
     * prefix) once per run, then put in the prefix cache by an untimed request */
    const int N = o->shared_prefix < P ? o->shared_prefix : 0;
    sampling_params sp;
    sampling_params_default(&sp);
    random_tokens(o, spec->vocab_size, prompt, N);
    if (N > 0) {
        engine_request warm = {.prompt = prompt, .n_prompt = N, .sampling = sp, .max_tokens = 1,
                               .ignore_eos = true};
        if (engine_submit(e, &warm, err) < 0 || engine_run(e, err) < 0) goto out;
    }
    engine_stats st0;
    engine_get_stats(e, &st0);
    const double t0 = mx_now();
    for (int b = 0; b < B; b++) {
        random_tokens(o, spec->vocab_size, prompt + N, P - N);
        engine_request req = {.prompt = prompt, .n_prompt = P, .sampling = sp, .max_tokens = G,
                              .ignore_eos = true, .on_token = on_token, .on_finish = on_finish,
                              .user = &seqs[b], .allow_device_sampling = true};
        if (engine_submit(e, &req, err) < 0) goto out;
    }
    if (engine_run(e, err) < 0) goto out;
    engine_stats st1;
    engine_get_stats(e, &st1);
    const double computed = (double)B * P - (double)(st1.prefix_reused_tokens - st0.prefix_reused_tokens);

    /* ---- figures from the timestamps ---- */
    double t_all_first = 0, t_end = 0;
    double *ttft = malloc((size_t)B * sizeof(double));
    double *itl = malloc((size_t)B * (size_t)G * sizeof(double));
    if (!ttft || !itl) {
        free(ttft);
        free(itl);
        mx_fail(err, "out of memory");
        goto out;
    }
    for (int b = 0; b < B; b++) {
        if (seqs[b].failed || seqs[b].n < 1) {
            free(ttft);
            free(itl);
            mx_fail(err, "batch %d: sequence %d did not run (see the log above)", B, b);
            goto out;
        }
        ttft[b] = (seqs[b].t[0] - t0) * 1e3;
        if (seqs[b].t[0] > t_all_first) t_all_first = seqs[b].t[0];
        if (seqs[b].t[seqs[b].n - 1] > t_end) t_end = seqs[b].t[seqs[b].n - 1];
    }
    int n_dec = 0, n_itl = 0;
    for (int b = 0; b < B; b++)
        for (int i = 1; i < seqs[b].n; i++)
            if (seqs[b].t[i - 1] >= t_all_first) {
                n_dec++;
                itl[n_itl++] = (seqs[b].t[i] - seqs[b].t[i - 1]) * 1e3;
            }
    memset(r, 0, sizeof *r);
    r->batch = B;
    r->prefill_tokens = computed;
    r->prefill_tps = t_all_first > t0 ? computed / (t_all_first - t0) : 0;
    r->ttft_max_ms = percentile(ttft, B, 100);
    r->ttft_p50_ms = percentile(ttft, B, 50);
    r->decode_tokens = n_dec;
    r->decode_tps = n_dec > 0 && t_end > t_all_first ? n_dec / (t_end - t_all_first) : 0;
    r->decode_tps_seq = r->decode_tps / B;
    r->itl_p50_ms = percentile(itl, n_itl, 50);
    r->itl_p99_ms = percentile(itl, n_itl, 99);
    r->mem_peak_bytes = be->mem_peak ? (double)be->mem_peak(false) : rss_peak_bytes();
    /* KV read per step: every sequence's context, on average P + G / 2 tokens in the window */
    const double kv_tok = (double)kv_cache_bytes_per_token(engine_kv(e));
    r->step_bytes = step_weight_bytes(m, B) + kv_tok * B * (P + G / 2.0);
    const double steps_per_s = r->decode_tps / B;
    r->decode_gbs = r->step_bytes * steps_per_s / 1e9;
    r->decode_pct_copy = copy_gbs > 0 ? 100.0 * r->decode_gbs / copy_gbs : 0;
    free(ttft);
    free(itl);
    rc = 0;
out:
    for (int b = 0; seqs && b < B; b++) free(seqs[b].t);
    free(seqs);
    free(prompt);
    return rc;
}

/* ==== Options ==== */
static int parse_pos_int(const char *s, int lo, int hi, int *out) {
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || !*s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

static int parse_batches(const char *s, bench_opts *o) {
    o->n_batches = 0;
    const char *p = s;
    while (*p) {
        char *end = NULL;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 1 || v > 4096 || o->n_batches == BENCH_MAX_BATCHES) return -1;
        o->batches[o->n_batches++] = (int)v;
        p = end;
        if (*p == ',') p++;
        else if (*p) return -1;
    }
    return o->n_batches ? 0 : -1;
}

static int parse_opts(bench_opts *o, int argc, char **argv) {
    memset(o, 0, sizeof *o);
    o->device = "cpu";
    o->tp_size = 1;
    o->storage = "auto";
    o->prompt_tokens = 512;
    o->gen_tokens = 128;
    o->repeat = 3;
    o->seed = 1;
    parse_batches("1,8,32", o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("%s", k_help);
            return 1;
        }
        if (!strcmp(a, "--json")) {
            o->json = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "mlxcel bench: %s needs a value (see --help)\n", a);
            return -1;
        }
        int bad = 0;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model_dir = v;
        else if (!strcmp(a, "--device")) {
            bad = strcmp(v, "cpu") && strcmp(v, "cuda");
            o->device = v;
        } else if (!strcmp(a, "--tp-size")) bad = parse_pos_int(v, 1, 64, &o->tp_size);
        else if (!strcmp(a, "--load-format")) bad = model_load_format_parse(v, &o->dummy_weights);
        else if (!strcmp(a, "--prompt-tokens")) bad = parse_pos_int(v, 1, 1 << 20, &o->prompt_tokens);
        else if (!strcmp(a, "--gen-tokens")) bad = parse_pos_int(v, 1, 1 << 20, &o->gen_tokens);
        else if (!strcmp(a, "--repeat")) bad = parse_pos_int(v, 1, 1000, &o->repeat);
        else if (!strcmp(a, "--prefill-chunk-size")) bad = parse_pos_int(v, 1, 1 << 20, &o->prefill_chunk);
        else if (!strcmp(a, "--shared-prefix")) bad = parse_pos_int(v, 0, 1 << 20, &o->shared_prefix);
        else if (!strcmp(a, "-b") || !strcmp(a, "--batch-tokens"))
            bad = parse_pos_int(v, 1, 1 << 20, &o->batch_tokens);
        else if (!strcmp(a, "--batch")) bad = parse_batches(v, o);
        else if (!strcmp(a, "--decode-storage-backend")) {
            kv_storage ks;
            bad = kv_storage_parse(v, &ks);
            o->storage = v;
        } else if (!strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k") || !strcmp(a, "-ctv") ||
                   !strcmp(a, "--cache-type-v")) {
            const bool is_k = !strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k");
            mx_error e;
            if (kv_type_parse(v, is_k ? &o->cache_type_k : &o->cache_type_v, &e)) {
                fprintf(stderr, "mlxcel bench: %s: %s\n", a, e.msg);
                return -1;
            }
        } else if (!strcmp(a, "--seed")) {
            char *end = NULL;
            errno = 0;
            o->seed = strtoull(v, &end, 10);
            bad = errno || !*v || *end;
        } else {
            fprintf(stderr, "mlxcel bench: unknown option '%s' (see --help)\n", a);
            return -1;
        }
        if (bad) {
            fprintf(stderr, "mlxcel bench: bad value '%s' for %s (see --help)\n", v, a);
            return -1;
        }
        i++;
    }
    if (!o->model_dir) {
        fprintf(stderr, "mlxcel bench: give -m DIR (see --help)\n");
        return -1;
    }
    if (o->shared_prefix >= o->prompt_tokens) {
        fprintf(stderr, "mlxcel bench: --shared-prefix %d must be less than --prompt-tokens %d "
                        "(each prompt needs a token of its own)\n", o->shared_prefix, o->prompt_tokens);
        return -1;
    }
    return 0;
}

/* ==== Output ==== */
static json_t *result_json(const bench_result *r, int repeat) {
    json_t *j = json_object();
    json_object_set_new(j, "batch", json_integer(r->batch));
    json_object_set_new(j, "repeats", json_integer(repeat));
    json_object_set_new(j, "prefill_tok_s", json_real(r->prefill_tps));
    json_object_set_new(j, "prefill_tokens", json_real(r->prefill_tokens));
    json_object_set_new(j, "ttft_ms_p50", json_real(r->ttft_p50_ms));
    json_object_set_new(j, "ttft_ms_max", json_real(r->ttft_max_ms));
    json_object_set_new(j, "decode_tok_s", json_real(r->decode_tps));
    json_object_set_new(j, "decode_tok_s_per_seq", json_real(r->decode_tps_seq));
    json_object_set_new(j, "decode_tokens_timed", json_integer(r->decode_tokens));
    json_object_set_new(j, "itl_ms_p50", json_real(r->itl_p50_ms));
    json_object_set_new(j, "itl_ms_p99", json_real(r->itl_p99_ms));
    json_object_set_new(j, "mem_peak_bytes", json_real(r->mem_peak_bytes));
    json_object_set_new(j, "decode_bytes_per_step", json_real(r->step_bytes));
    json_object_set_new(j, "decode_gb_s", json_real(r->decode_gbs));
    json_object_set_new(j, "decode_pct_of_copy", json_real(r->decode_pct_copy));
    return j;
}

/* Median of each figure over the repeats. */
static void median_of(bench_result *runs, int n, bench_result *out) {
    double v[1000];
    *out = runs[0];
#define MED(f)                                         \
    do {                                               \
        for (int i = 0; i < n; i++) v[i] = runs[i].f;  \
        out->f = percentile(v, n, 50);                 \
    } while (0)
    MED(prefill_tps); MED(ttft_p50_ms); MED(ttft_max_ms); MED(decode_tps); MED(decode_tps_seq);
    MED(itl_p50_ms); MED(itl_p99_ms); MED(mem_peak_bytes); MED(decode_gbs); MED(decode_pct_copy);
    MED(step_bytes); MED(prefill_tokens);
#undef MED
}

int cmd_bench(int argc, char **argv) {
    bench_opts o;
    const int pr = parse_opts(&o, argc, argv);
    if (pr) return pr > 0 ? 0 : 2;
    mx_error err = {{0}};
    /* the device line and the copy bandwidth before the weights take the device's memory */
    const backend_ops *be = backend_get(!strcmp(o.device, "cuda") ? MX_DEV_CUDA : MX_DEV_CPU, &err);
    if (!be) {
        fprintf(stderr, "mlxcel bench: %s\n", err.msg);
        return 1;
    }
    char dev_line[512];
    if (be->describe) be->describe(dev_line, sizeof dev_line);
    else snprintf(dev_line, sizeof dev_line, "cpu");
    fprintf(stderr, "device: %s\n", dev_line);
    const double copy_gbs = be->copy_bandwidth ? be->copy_bandwidth() : cpu_copy_bandwidth();
    fprintf(stderr, "copy bandwidth: %.1f GB/s (read + write)\n", copy_gbs);
    rt_opts ro; /* a cache type the device cannot hold is refused before the weights load */
    rt_opts_default(&ro);
    ro.model_dir = o.model_dir;
    ro.device = o.device;
    ro.tp_size = o.tp_size;
    ro.dummy_weights = o.dummy_weights;
    ro.cache_type_k = o.cache_type_k;
    ro.cache_type_v = o.cache_type_v;
    ro.tokenizer = RT_TOK_NONE; /* random token ids */
    runtime rt;
    if (runtime_open(&rt, &ro, &err)) {
        fprintf(stderr, "mlxcel bench: %s\n", err.msg);
        return 1;
    }
    model *m = rt.m;
    const double load_s = rt.load_seconds;
    fprintf(stderr, "model loaded in %.2f s: %.3f GB of weights\n", load_s,
            (double)model_weight_bytes(m) / 1e9);
    char qline[320];
    model_describe_quant(m, qline, sizeof qline);
    fprintf(stderr, "quantization: %s\n", qline);
    const int P = o.prompt_tokens, G = o.gen_tokens;
    int rc = 1;
    bench_result res[BENCH_MAX_BATCHES];
    bench_result *runs = calloc((size_t)o.repeat, sizeof *runs);
    const char *kv_k = "", *kv_v = "";
    size_t kv_tok = 0;
    if (!runs) goto out;
    for (int bi = 0; bi < o.n_batches; bi++) {
        const int B = o.batches[bi];
        if (be->mem_peak) be->mem_peak(true);
        else rss_reset_peak();
        engine *e = bench_engine(&o, m, B, P, G, &err);
        if (!e) goto fail;
        if (bi == 0) {
            const engine_params *ep = engine_params_of(e);
            kv_k = kv_type_name(ep->cache_type_k), kv_v = kv_type_name(ep->cache_type_v);
            kv_tok = kv_cache_bytes_per_token(engine_kv(e));
            fprintf(stderr, "kv cache: K %s, V %s (%zu bytes per token)\n", kv_k, kv_v, kv_tok);
        }
        /* warm-up on the same engine: first-use costs (lazy uploads, cuBLASLt plans, graph
         * capture of this batch size, BLAS threads) stay out of the timed runs */
        fprintf(stderr, "batch %d: warm-up\n", B);
        int brc = bench_run(&o, m, e, be, B, P, G < 4 ? G : 4, copy_gbs, &runs[0], &err);
        for (int r = 0; r < o.repeat && !brc; r++) {
            fprintf(stderr, "batch %d: run %d/%d\n", B, r + 1, o.repeat);
            brc = bench_run(&o, m, e, be, B, P, G, copy_gbs, &runs[r], &err);
        }
        engine_free(e);
        if (brc) goto fail;
        median_of(runs, o.repeat, &res[bi]);
    }
    if (o.json) {
        json_t *j = json_object(), *arr = json_array();
        json_object_set_new(j, "model", json_string(o.model_dir));
        json_object_set_new(j, "device", json_string(be->name));
        json_object_set_new(j, "device_info", json_string(dev_line));
        json_object_set_new(j, "tp_size", json_integer(o.tp_size));
        json_object_set_new(j, "copy_gb_s", json_real(copy_gbs));
        json_object_set_new(j, "weight_bytes", json_integer((json_int_t)model_weight_bytes(m)));
        json_object_set_new(j, "embedding_bytes", json_integer((json_int_t)model_embedding_bytes(m)));
        json_object_set_new(j, "expert_bytes", json_integer((json_int_t)model_expert_bytes(m)));
        json_object_set_new(j, "load_s", json_real(load_s));
        json_object_set_new(j, "prompt_tokens", json_integer(P));
        json_object_set_new(j, "gen_tokens", json_integer(G));
        json_object_set_new(j, "cache_type_k", json_string(kv_k));
        json_object_set_new(j, "cache_type_v", json_string(kv_v));
        json_object_set_new(j, "kv_bytes_per_token", json_integer((json_int_t)kv_tok));
        json_object_set_new(j, "shared_prefix", json_integer(o.shared_prefix));
        for (int bi = 0; bi < o.n_batches; bi++) json_array_append_new(arr, result_json(&res[bi], o.repeat));
        json_object_set_new(j, "results", arr);
        char *txt = json_dumps(j, JSON_COMPACT);
        printf("%s\n", txt);
        free(txt);
        json_decref(j);
    } else {
        char tp[32] = ""; /* only with TP, so single-rank headers stay as they were */
        if (o.tp_size > 1) snprintf(tp, sizeof tp, " | tp %d", o.tp_size);
        char shared[48] = ""; /* only with a shared prefix, likewise */
        if (o.shared_prefix > 0) snprintf(shared, sizeof shared, " | shared prefix %d", o.shared_prefix);
        printf("model %s | %s%s | prompt %d%s | gen %d | kv K %s V %s | copy %.1f GB/s | median of %d\n",
               o.model_dir, dev_line, tp, P, shared, G, kv_k, kv_v, copy_gbs, o.repeat);
        printf("%6s %12s %10s %12s %12s %9s %9s %10s %9s %7s\n", "batch", "prefill t/s", "TTFT ms",
               "decode t/s", "per seq t/s", "ITL p50", "ITL p99", "mem MiB", "GB/s", "% copy");
        for (int bi = 0; bi < o.n_batches; bi++) {
            const bench_result *r = &res[bi];
            printf("%6d %12.1f %10.1f %12.1f %12.1f %9.2f %9.2f %10.0f %9.1f %7.1f\n", r->batch,
                   r->prefill_tps, r->ttft_p50_ms, r->decode_tps, r->decode_tps_seq, r->itl_p50_ms,
                   r->itl_p99_ms, r->mem_peak_bytes / 1048576.0, r->decode_gbs, r->decode_pct_copy);
        }
    }
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "mlxcel bench: %s\n", err.msg);
out:
    free(runs);
    runtime_close(&rt);
    return rc;
}
