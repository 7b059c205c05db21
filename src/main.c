/* mlxcel: subcommand dispatch only. */
#include <stdio.h>
#include <string.h>

#include "base/env.h"
#include "cli/cli.h"

typedef struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} command;

/* A subcommand is listed here only once it works. */
static const command k_commands[] = {
    {"generate", cmd_generate, "one prompt, streamed to stdout, timing line at the end (--json)"},
    {"run", cmd_run, "interactive chat with the model's chat template (/bye, /clear, \"\"\")"},
    {"serve", cmd_serve, "HTTP server: OpenAI and llama-server APIs, continuous batching (also mlxcel-server)"},
    {"bench", cmd_bench, "engine throughput per batch size: prefill/decode tok/s, TTFT, ITL, GB/s"},
    {"compare", cmd_compare, "model vs reference on the reference's greedy text: top-1 agreement, KL, margin"},
    {"inspect", cmd_inspect, "memory estimate for a checkpoint: weights, KV cache, fits or not"},
    {"convert", cmd_convert, "Hugging Face checkpoint -> MLX checkpoint (cast, 2..8-bit affine quantization)"},
    {"tune", cmd_tune, "kernel autotuning: profile launch candidates, store the winners"},
    {"tokenize", cmd_tokenize, "text -> token ids with a tokenizer.json (--bench: encode MB/s)"},
    {"detokenize", cmd_detokenize, "token ids -> text with a tokenizer.json"},
    {"apply-template", cmd_apply_template, "render a checkpoint's chat template for a conversation"},
    {"loadtest", cmd_loadtest, "steady-state load test of a running server: tok/s, TTFT, ITL, failures"},
};
#define N_COMMANDS (int)(sizeof k_commands / sizeof k_commands[0])

static void usage(FILE *out) {
    fprintf(out,
            "mlxcel %s: LLM inference runtime and server (CUDA and CPU)\n\n"
            "usage: mlxcel <command> [options]\n"
            "       mlxcel <command> --help\n\n"
            "commands:\n",
            MLXCEL_VERSION);
    for (int i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %-15s %s\n", k_commands[i].name, k_commands[i].summary);
    fprintf(out, "\noptions:\n  -h, --help     this help\n  --version      print the version\n"
                 "\nEnvironment variables: see docs/environment.md\n");
}

static const command *find_command(const char *name) {
    for (int i = 0; i < N_COMMANDS; i++)
        if (!strcmp(k_commands[i].name, name)) return &k_commands[i];
    return NULL;
}

int main(int argc, char **argv) {
    mx_env_apply_omp_defaults(argv); /* may re-exec with OMP_WAIT_POLICY=passive */
    const char *self = strrchr(argv[0], '/');
    self = self ? self + 1 : argv[0];
    /* Installed as mlxcel-server: behave as `mlxcel serve`. */
    if (!strcmp(self, "mlxcel-server")) {
        const command *c = find_command("serve");
        if (!c) {
            fprintf(stderr, "mlxcel-server: this build has no server yet\n");
            return 2;
        }
        argv[0] = (char *)"serve";
        return c->fn(argc, argv);
    }
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("mlxcel %s\n", MLXCEL_VERSION);
        return 0;
    }
    const command *c = find_command(argv[1]);
    if (!c) {
        fprintf(stderr, "mlxcel: unknown command '%s' (see mlxcel --help)\n", argv[1]);
        return 2;
    }
    return c->fn(argc - 1, argv + 1);
}
