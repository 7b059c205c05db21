/* mlxcel inspect: memory estimate for a checkpoint (weights, KV cache, activations, headroom)
 * against the memory available on the chosen device. Errors print exactly one line. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/env.h"
#include "cli/cli.h"
#include "io/checkpoint.h"
#include "backend/kvfmt/kv_turbo.h"
#include "model/estimate.h"

#define DEFAULT_CTX 4096

static void usage(FILE *out) {
    fprintf(out,
            "usage: mlxcel inspect -m DIR [--ctx N] [--batch B] [--kv-dtype T] [-ctk T] [-ctv T]\n"
            "                      [--device cpu|cuda] [--json]\n\n"
            "Memory estimate for the checkpoint in DIR and whether it fits.\n\n"
            "  -m, --model DIR    checkpoint directory (config.json + *.safetensors)\n"
            "  -c, --ctx N        context length per sequence (default min(4096, max_position_embeddings))\n"
            "  -b, --batch B      concurrent sequences (default 1)\n"
            "  --kv-dtype T       KV cache element type of K and V: f32 (4 bytes), bf16, f16 (2 bytes),\n"
            "                     q8_0 (34 bytes per 32 values), q4_0 (18 bytes per 32 values),\n"
            "                     turbo2 / turbo3 / turbo4 (10 / 14 / 18 bytes per 32 values) -- the\n"
            "                     engine's -ctk/-ctv types, exact -- or int8 (1 byte plus one f32 scale\n"
            "                     per head per token: a what-if, the engine has no int8 cache);\n"
            "                     default: what the engine keeps on the device, f32 on cpu, bf16 on cuda\n"
            "  -ctk, --cache-type-k T, -ctv, --cache-type-v T\n"
            "                     K or V alone (over --kv-dtype), as generate/serve take them\n"
            "  --device D         where the model would run: cuda (free GPU memory) or cpu\n"
            "                     (MemAvailable); default cuda when a GPU is usable, else cpu\n"
            "  --json             one JSON object instead of the table\n\n"
            "Formulas:\n"
            "  weights     exact sum of tensor bytes in the safetensors headers\n"
            "  KV          per layer and token kv_heads x (K head row + V head row): head_dim x\n"
            "              elem_bytes (+ int8 scale), q8_0 / q4_0 head_dim / 32 x 34 / 18,\n"
            "              turbo2 / 3 / 4 head_dim / 32 x 10 / 14 / 18;\n"
            "              sliding-window layers hold at most sliding_window tokens;\n"
            "              total = batch x sum over layers of min(ctx, window) tokens\n"
            "  activations batch x min(ctx, 512) tokens x 4 bytes x (3 hidden + q_dim + 2 kv_dim\n"
            "              + 2 ffn + n_experts) + batch x vocab x 4 (fp32 logits); ffn = widest of\n"
            "              intermediate_size (dense layers) and experts_per_tok x moe_intermediate_size\n"
            "              (+ the shared expert's width and one more hidden row: llama4)\n"
            "  headroom    512 MiB + 5%% of (weights + KV + activations)\n"
            "  available   MLXCEL_MEMORY_LIMIT when set, else free GPU memory (cuda) or\n"
            "              MemAvailable from /proc/meminfo (cpu)\n");
}

/* ==== Available memory ==== */

static int meminfo_available(uint64_t *out) {
    FILE *fp = fopen("/proc/meminfo", "r");
    if (!fp) return -1;
    char line[256];
    int rc = -1;
    while (fgets(line, sizeof line, fp)) {
        unsigned long long kb;
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            *out = (uint64_t)kb * 1024;
            rc = 0;
            break;
        }
    }
    fclose(fp);
    return rc;
}

/* device: NULL = auto. Fills the bytes, the device actually used and where the figure came from. */
static int available_memory(const char *device, uint64_t *bytes, const char **dev_used,
                            char *source, size_t source_n, mx_error *err) {
    const bool want_cuda = device && !strcmp(device, "cuda");
    mx_device_facts facts;
    mx_error why;
    const bool use_cuda = (!device || want_cuda) && backend_device_facts(MX_DEV_CUDA, &facts, &why) == 0;
    if (want_cuda && !use_cuda) return mx_fail(err, "--device cuda: %s", why.msg);
    *dev_used = use_cuda ? "cuda" : "cpu";
    uint64_t limit = mx_env()->memory_limit;
    if (limit) {
        *bytes = limit;
        snprintf(source, source_n, "MLXCEL_MEMORY_LIMIT");
        return 0;
    }
    if (use_cuda) {
        *bytes = facts.free_bytes;
        snprintf(source, source_n, "free memory of GPU 0 (%.100s)", facts.name);
        return 0;
    }
    if (meminfo_available(bytes)) return mx_fail(err, "/proc/meminfo: no MemAvailable line");
    snprintf(source, source_n, "MemAvailable");
    return 0;
}

/* ==== Output ==== */

static double gib(uint64_t b) { return (double)b / (double)(1ull << 30); }

/* "q8_0", or "K q8_0 / V f16" when they differ */
static const char *kv_label(mx_kv_dtype k, mx_kv_dtype v, char *buf, size_t n) {
    if (k == v) snprintf(buf, n, "%s", kv_dtype_name(k));
    else snprintf(buf, n, "K %s / V %s", kv_dtype_name(k), kv_dtype_name(v));
    return buf;
}

static void print_table(const ckpt *c, const mx_mem_estimate *e, mx_kv_dtype kv, mx_kv_dtype kvv,
                        uint64_t avail, const char *dev, const char *source) {
    char kl[64];
    const model_spec *s = &c->spec;
    printf("model       %s\n", c->dir);
    printf("            %s (%s family), %d layers, hidden %d, heads %d/%d kv, head_dim %d, vocab %d\n",
           s->model_type, spec_family_name(s->family), s->n_layers, s->hidden_size, s->n_heads,
           s->n_kv_heads, s->head_dim, s->vocab_size);
    if (s->n_experts) {
        int n_moe = 0;
        for (int l = 0; l < s->n_layers; l++) n_moe += !s->layer_dense_mlp[l];
        printf("            MoE: %d experts, %d per token, %d of %d layers", s->n_experts,
               s->n_experts_per_tok, n_moe, s->n_layers);
        if (s->moe_routing == MOE_ROUTE_SIGMOID_IN)
            printf(" (sigmoid-scaled input, shared expert of %d)", s->shared_expert_size);
        printf("\n");
    }
    if (s->family == FAM_LLAMA4) {
        int n_nope = 0, n_chunked = 0;
        for (int l = 0; l < s->n_layers; l++)
            n_nope += s->layer_nope[l], n_chunked += s->attn_chunk > 0 && s->layer_chunked[l];
        printf("            attention: %d NoPE layers%s, %d chunked layers of %d tokens%s\n", n_nope,
               s->attn_temp_tuning ? " (temperature tuned)" : "", n_chunked, s->attn_chunk,
               s->qk_l2_norm ? ", q/k norm after RoPE" : "");
    }
    if (s->kv_lora_rank > 0) /* the cache holds the latent, one head per token (model_mla.c) */
        printf("            MLA: latent KV head of %d (kv_lora_rank %d + rope %d) per token, "
               "%d query heads absorbed; K and V rows both hold it\n", s->head_dim,
               s->kv_lora_rank, s->qk_rope_head_dim, s->n_heads);
    if (s->quant.bits)
        printf("weights     %s, MLX affine %d-bit group %d (%d per-module overrides), %d file(s)\n",
               mx_dtype_name(s->dtype), s->quant.bits, s->quant.group_size, s->n_quant_overrides,
               c->n_files);
    else
        printf("weights     %s, %d file(s)\n", mx_dtype_name(s->dtype), c->n_files);
    if (e->params >= 1000000000ull)
        printf("params      %.2f B (%llu)\n", (double)e->params / 1e9, (unsigned long long)e->params);
    else
        printf("params      %.2f M (%llu)\n", (double)e->params / 1e6, (unsigned long long)e->params);
    printf("context     %d tokens x batch %d, KV cache %s", e->ctx, e->batch, kv_label(kv, kvv, kl, sizeof kl));
    if (e->n_sliding_layers)
        printf(", %d of %d layers slide over %d tokens", e->n_sliding_layers, s->n_layers,
               s->sliding_window);
    printf("\n\n");
    printf("  %-22s %16s %12s\n", "", "bytes", "GiB");
    printf("  %-22s %16llu %12.3f\n", "weights", (unsigned long long)e->weights_bytes, gib(e->weights_bytes));
    printf("  %-22s %16llu %12s  (%.1f KiB%s)\n", "KV per token", (unsigned long long)e->kv_bytes_per_token,
           "", (double)e->kv_bytes_per_token / 1024.0, e->kv_scale_bytes_per_token ? ", incl. scales" : "");
    printf("  %-22s %16llu %12.3f\n", "KV total", (unsigned long long)e->kv_bytes_total, gib(e->kv_bytes_total));
    printf("  %-22s %16llu %12.3f\n", "activations", (unsigned long long)e->activation_bytes,
           gib(e->activation_bytes));
    printf("  %-22s %16llu %12.3f\n", "headroom", (unsigned long long)e->headroom_bytes, gib(e->headroom_bytes));
    printf("  %-22s %16llu %12.3f\n", "total", (unsigned long long)e->total_bytes, gib(e->total_bytes));
    printf("  %-22s %16llu %12.3f  (%s: %s)\n", "available", (unsigned long long)avail, gib(avail), dev,
           source);
    printf("\nfits: %s\n", e->total_bytes <= avail ? "yes" : "no");
}

static void print_json(const ckpt *c, const mx_mem_estimate *e, mx_kv_dtype kv, mx_kv_dtype kvv,
                       uint64_t avail, const char *dev, const char *source) {
    const model_spec *s = &c->spec;
    char kl[64];
    json_t *o = json_object();
    json_object_set_new(o, "model_dir", json_string(c->dir));
    json_object_set_new(o, "model_type", json_string(s->model_type));
    json_object_set_new(o, "family", json_string(spec_family_name(s->family)));
    json_object_set_new(o, "dtype", json_string(mx_dtype_name(s->dtype)));
    json_object_set_new(o, "quant_bits", json_integer(s->quant.bits));
    json_object_set_new(o, "quant_group_size", json_integer(s->quant.group_size));
    json_object_set_new(o, "n_files", json_integer(c->n_files));
    json_object_set_new(o, "params", json_integer((json_int_t)e->params));
    json_object_set_new(o, "weights_bytes", json_integer((json_int_t)e->weights_bytes));
    json_object_set_new(o, "ctx", json_integer(e->ctx));
    json_object_set_new(o, "batch", json_integer(e->batch));
    json_object_set_new(o, "kv_dtype", json_string(kv_label(kv, kvv, kl, sizeof kl)));
    json_object_set_new(o, "kv_dtype_k", json_string(kv_dtype_name(kv)));
    json_object_set_new(o, "kv_dtype_v", json_string(kv_dtype_name(kvv)));
    json_object_set_new(o, "kv_bytes_per_token", json_integer((json_int_t)e->kv_bytes_per_token));
    json_object_set_new(o, "kv_scale_bytes_per_token", json_integer((json_int_t)e->kv_scale_bytes_per_token));
    json_object_set_new(o, "kv_bytes_total", json_integer((json_int_t)e->kv_bytes_total));
    json_object_set_new(o, "sliding_window", json_integer(s->sliding_window));
    json_object_set_new(o, "n_sliding_layers", json_integer(e->n_sliding_layers));
    json_object_set_new(o, "n_layers", json_integer(s->n_layers));
    if (s->family == FAM_LLAMA4) {
        int n_nope = 0, n_chunked = 0;
        for (int l = 0; l < s->n_layers; l++)
            n_nope += s->layer_nope[l], n_chunked += s->attn_chunk > 0 && s->layer_chunked[l];
        json_object_set_new(o, "n_nope_layers", json_integer(n_nope));
        json_object_set_new(o, "attention_chunk_size", json_integer(s->attn_chunk));
        json_object_set_new(o, "n_chunked_layers", json_integer(n_chunked));
        json_object_set_new(o, "shared_expert_size", json_integer(s->shared_expert_size));
    }
    json_object_set_new(o, "activation_bytes", json_integer((json_int_t)e->activation_bytes));
    json_object_set_new(o, "headroom_bytes", json_integer((json_int_t)e->headroom_bytes));
    json_object_set_new(o, "total_bytes", json_integer((json_int_t)e->total_bytes));
    json_object_set_new(o, "available_bytes", json_integer((json_int_t)avail));
    json_object_set_new(o, "available_source", json_string(source));
    json_object_set_new(o, "device", json_string(dev));
    json_object_set_new(o, "fits", json_boolean(e->total_bytes <= avail));
    char *txt = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (txt) printf("%s\n", txt);
    free(txt);
    json_decref(o);
}

/* ==== Entry ==== */

static int parse_pos(const char *s, long lo, long hi, int *out) {
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

int cmd_inspect(int argc, char **argv) {
    static const struct option k_opts[] = {
        {"model", required_argument, NULL, 'm'}, {"ctx", required_argument, NULL, 'c'},
        {"batch", required_argument, NULL, 'b'}, {"kv-dtype", required_argument, NULL, 'k'},
        {"device", required_argument, NULL, 'd'}, {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},        {"cache-type-k", required_argument, NULL, 'K'},
        {"cache-type-v", required_argument, NULL, 'V'}, {NULL, 0, NULL, 0},
    };
    const char *dir = NULL, *kv_s = NULL, *kv_k = NULL, *kv_v = NULL, *device = NULL;
    int ctx = 0, batch = 1, json = 0, opt;
    /* llama.cpp's -ctk / -ctv: getopt would read them as -c tk / -c tv */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-ctk")) argv[i] = "--cache-type-k";
        else if (!strcmp(argv[i], "-ctv")) argv[i] = "--cache-type-v";
    }
    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "m:c:b:h", k_opts, NULL)) != -1) {
        switch (opt) {
        case 'm': dir = optarg; break;
        case 'c':
            if (parse_pos(optarg, 1, 1l << 30, &ctx)) {
                fprintf(stderr, "mlxcel inspect: --ctx '%s' is not a positive integer\n", optarg);
                return 2;
            }
            break;
        case 'b':
            if (parse_pos(optarg, 1, 1 << 20, &batch)) {
                fprintf(stderr, "mlxcel inspect: --batch '%s' is not a positive integer\n", optarg);
                return 2;
            }
            break;
        case 'k': kv_s = optarg; break;
        case 'K': kv_k = optarg; break;
        case 'V': kv_v = optarg; break;
        case 'd':
            if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda")) {
                fprintf(stderr, "mlxcel inspect: --device '%s' is not cpu or cuda\n", optarg);
                return 2;
            }
            device = optarg;
            break;
        case 'j': json = 1; break;
        case 'h': usage(stdout); return 0;
        default:
            fprintf(stderr, "mlxcel inspect: unknown or incomplete option '%s' (see --help)\n",
                    argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "mlxcel inspect: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
    if (!dir) {
        fprintf(stderr, "mlxcel inspect: -m DIR is required (see --help)\n");
        return 2;
    }
    mx_kv_dtype kv = MX_KV_F16, kvk, kvv;
    if (kv_s && kv_dtype_parse(kv_s, &kv)) {
        fprintf(stderr, "mlxcel inspect: --kv-dtype '%s' is not f32, bf16, f16, q8_0, q4_0, turbo2, turbo3, "
                        "turbo4 or int8\n", kv_s);
        return 2;
    }
    if ((kv_k && (kv_dtype_parse(kv_k, &kvk) || kvk == MX_KV_INT8)) ||
        (kv_v && (kv_dtype_parse(kv_v, &kvv) || kvv == MX_KV_INT8))) {
        fprintf(stderr, "mlxcel inspect: cache type '%s' is not f32, f16, bf16, q8_0, q4_0, turbo2, turbo3 "
                        "or turbo4\n",
                kv_k && (kv_dtype_parse(kv_k, &kvk) || kvk == MX_KV_INT8) ? kv_k : kv_v);
        return 2;
    }

    ckpt c;
    mx_error err = {0};
    if (ckpt_open(&c, dir, &err) || ckpt_validate(&c, &err)) {
        fprintf(stderr, "mlxcel inspect: %s\n", err.msg);
        if (c.dir) ckpt_close(&c);
        return 1;
    }
    int rc = 1;
    int max_pos = c.spec.max_position_embeddings;
    if (!ctx) ctx = max_pos < DEFAULT_CTX ? max_pos : DEFAULT_CTX;
    if (ctx > max_pos) {
        fprintf(stderr, "mlxcel inspect: --ctx %d exceeds max_position_embeddings %d of %s/config.json\n",
                ctx, max_pos, dir);
        rc = 2;
        goto out;
    }
    uint64_t avail = 0;
    const char *dev = "cpu";
    char source[160];
    if (available_memory(device, &avail, &dev, source, sizeof source, &err)) {
        fprintf(stderr, "mlxcel inspect: %s\n", err.msg);
        goto out;
    }
    /* the cache the engine would allocate there: the CPU backend keeps fp32 K/V, CUDA bf16 */
    if (!kv_s) kv = !strcmp(dev, "cuda") ? MX_KV_BF16 : MX_KV_F32;
    if (!kv_k) kvk = kv;
    if (!kv_v) kvv = kv;
    for (int w = 0; w < 2; w++) { /* q8_0 / q4_0 blocks of 32 along head_dim, as the engine */
        const mx_kv_dtype t = w ? kvv : kvk;
        if (c.spec.head_dim % kv_dtype_block(t)) {
            fprintf(stderr, "mlxcel inspect: cache type %s stores blocks of 32 values along head_dim, "
                            "and head_dim of %s/config.json is %d (not a multiple of 32)\n",
                    kv_dtype_name(t), dir, c.spec.head_dim);
            goto out;
        }
        mx_error why;
        if (t >= MX_KV_TURBO2 && kv_turbo_check(c.spec.head_dim, 2 + (int)(t - MX_KV_TURBO2), &why)) {
            fprintf(stderr, "mlxcel inspect: cache type %s: %s\n", kv_dtype_name(t), why.msg);
            goto out;
        }
    }
    mx_mem_estimate e;
    estimate_memory_kv(&c.spec, c.n_params, c.weights_bytes, ctx, batch, kvk, kvv, &e);
    if (json) print_json(&c, &e, kvk, kvv, avail, dev, source);
    else print_table(&c, &e, kvk, kvv, avail, dev, source);
    rc = 0;
out:
    ckpt_close(&c);
    return rc;
}
