/* mlxcel convert: Hugging Face checkpoint -> MLX checkpoint (cast, MLX affine quantization),
 * with mlx_lm.convert's flags and meaning. The work is in src/quant/convert.c. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "cli/cli.h"
#include "quant/convert.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: mlxcel convert --hf-path DIR [--mlx-path OUT] [-q] [--q-bits N]\n"
            "                      [--q-group-size N] [--dtype float16|bfloat16|float32] [-d]\n\n"
            "Converts a Hugging Face checkpoint to MLX format, as mlx_lm.convert does.\n\n"
            "  --hf-path, --model DIR  input checkpoint (config.json + *.safetensors)\n"
            "  --mlx-path OUT          output directory, must not exist (default mlx_model)\n"
            "  -q, --quantize          MLX affine quantization of the Linear and Embedding\n"
            "                          weights whose input size the group size divides\n"
            "  --q-bits N              2, 3, 4, 5, 6 or 8 (default 4)\n"
            "  --q-group-size N        32, 64 or 128 (default 64)\n"
            "  --q-mode affine         the only mode (mxfp4/nvfp4/mxfp8 are not supported)\n"
            "  --dtype T               dtype of the floating tensors (scales and biases too);\n"
            "                          default config.json's torch_dtype, else unchanged\n"
            "                          (f16, bf16, f32 are accepted too)\n"
            "  -d, --dequantize        dequantize an MLX-quantized checkpoint\n"
            "  --max-shard-size SIZE   largest shard (default 5G; K/M/G suffixes)\n"
            "  --no-progress           no progress output\n\n"
            "Tokenizer files, chat templates and generation_config.json are copied.\n");
}

static mx_dtype parse_dtype(const char *s) {
    if (!strcmp(s, "float16") || !strcmp(s, "f16") || !strcmp(s, "fp16")) return MX_F16;
    if (!strcmp(s, "bfloat16") || !strcmp(s, "bf16")) return MX_BF16;
    if (!strcmp(s, "float32") || !strcmp(s, "f32") || !strcmp(s, "fp32")) return MX_F32;
    return MX_DTYPE_INVALID;
}

static int parse_int(const char *opt, const char *s, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < 1 || v > 1024) {
        fprintf(stderr, "mlxcel convert: %s expects a positive integer, got '%s'\n", opt, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

int cmd_convert(int argc, char **argv) {
    enum { O_HF = 256, O_MLX, O_BITS, O_GS, O_MODE, O_DTYPE, O_SHARD, O_NOPROG };
    static const struct option k_opts[] = {
        {"hf-path", required_argument, 0, O_HF},   {"model", required_argument, 0, O_HF},
        {"mlx-path", required_argument, 0, O_MLX}, {"quantize", no_argument, 0, 'q'},
        {"q-bits", required_argument, 0, O_BITS},  {"q-group-size", required_argument, 0, O_GS},
        {"q-mode", required_argument, 0, O_MODE},  {"dtype", required_argument, 0, O_DTYPE},
        {"dequantize", no_argument, 0, 'd'},       {"max-shard-size", required_argument, 0, O_SHARD},
        {"no-progress", no_argument, 0, O_NOPROG}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    mlxq_convert_opts o;
    mlxq_convert_defaults(&o);
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":qdh", k_opts, NULL)) != -1) {
        switch (c) {
        case O_HF: o.hf_path = optarg; break;
        case O_MLX: o.mlx_path = optarg; break;
        case 'q': o.quantize = true; break;
        case 'd': o.dequantize = true; break;
        case O_BITS:
            if (parse_int("--q-bits", optarg, &o.bits)) return 2;
            break;
        case O_GS:
            if (parse_int("--q-group-size", optarg, &o.group_size)) return 2;
            break;
        case O_MODE:
            if (strcmp(optarg, "affine")) {
                fprintf(stderr, "mlxcel convert: --q-mode %s is not supported (only affine)\n",
                        optarg);
                return 2;
            }
            break;
        case O_DTYPE:
            o.dtype = parse_dtype(optarg);
            if (o.dtype == MX_DTYPE_INVALID) {
                fprintf(stderr, "mlxcel convert: --dtype %s: expected float16, bfloat16 or "
                        "float32\n", optarg);
                return 2;
            }
            break;
        case O_SHARD:
            if (mx_parse_bytes(optarg, &o.max_shard_bytes) || o.max_shard_bytes == 0) {
                fprintf(stderr, "mlxcel convert: --max-shard-size %s: expected a size such as "
                        "5G or 500M\n", optarg);
                return 2;
            }
            break;
        case O_NOPROG: o.progress = -2; break;
        case 'h': usage(stdout); return 0;
        case ':':
            fprintf(stderr, "mlxcel convert: %s needs a value\n", argv[optind - 1]);
            return 2;
        default:
            fprintf(stderr, "mlxcel convert: unknown option '%s' (see --help)\n", argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "mlxcel convert: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!o.hf_path) {
        fprintf(stderr, "mlxcel convert: --hf-path DIR is required (see --help)\n");
        return 2;
    }
    if (!o.quantize && (o.bits != 4 || o.group_size != 64))
        fprintf(stderr, "mlxcel convert: note: --q-bits/--q-group-size have no effect without -q\n");
    mx_error err;
    if (mlxq_convert(&o, &err)) {
        fprintf(stderr, "mlxcel convert: %s\n", err.msg);
        return 1;
    }
    if (o.progress != -2)
        fprintf(stderr, "mlxcel convert: wrote %s%s\n", o.mlx_path,
                o.quantize ? " (quantized)" : o.dequantize ? " (dequantized)" : "");
    return 0;
}
