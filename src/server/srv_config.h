/* `mlxcel serve` configuration: command-line flags, with llama-server's LLAMA_ARG_* environment
 * variables as fallbacks (a flag always wins over its variable). */
#ifndef MLXCEL_SERVER_SRV_CONFIG_H
#define MLXCEL_SERVER_SRV_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/error.h"

#define SRV_MAX_ALIASES 8
#define SRV_MAX_API_KEYS 16
#define SRV_MAX_ALLOWED 16

typedef struct srv_config {
    /* ---- model ---- */
    char model[1024];            /* -m, --model (LLAMA_ARG_MODEL) */
    char aliases[SRV_MAX_ALIASES][256]; /* -a, --alias, comma-separated (LLAMA_ARG_ALIAS) */
    int n_aliases;
    char chat_template_file[1024]; /* --chat-template-file (LLAMA_ARG_CHAT_TEMPLATE_FILE) */
    char device[16];             /* --device cpu|cuda (default cpu) */
    char load_format[16];        /* --load-format auto|dummy (default auto) */
    int tp_size;                 /* --tp-size: tensor-parallel ranks (default 1; CUDA: GPUs) */

    /* ---- embeddings (docs/embeddings.md) ---- */
    bool embeddings;             /* --embedding, --embeddings (LLAMA_ARG_EMBEDDINGS): the embeddings
                                    routes work, the generation routes answer 501 (llama-server) */
    char pooling[8];             /* --pooling none|mean|cls|last (LLAMA_ARG_POOLING), "" = the
                                    checkpoint's sentence-transformers config, else last */

    /* ---- chat: tools and reasoning (docs/tools.md) ---- */
    char reasoning_format[24];   /* --reasoning-format none|auto|deepseek|deepseek-legacy (LLAMA_ARG_THINK) */
    char tool_call_parser[24];   /* --tool-call-parser auto|none|hermes|llama3|mistral|deepseek_v3 */
    char chat_template_kwargs[4096]; /* --chat-template-kwargs JSON (LLAMA_ARG_CHAT_TEMPLATE_KWARGS) */

    /* ---- HTTP ---- */
    char host[1024];             /* --host (LLAMA_ARG_HOST); "*.sock" = Unix socket path */
    int port;                    /* --port (LLAMA_ARG_PORT), 0 = ephemeral */
    char api_keys[SRV_MAX_API_KEYS][256]; /* --api-key (LLAMA_API_KEY, LLAMA_ARG_API_KEY), --api-key-file
                                             (LLAMA_ARG_API_KEY_FILE); an empty key is refused */
    int n_api_keys;
    int timeout_s;               /* -to, --timeout (LLAMA_ARG_TIMEOUT): socket idle read/write */
    int header_timeout_s;        /* --header-timeout: a connection's next request header must be
                                    complete this long after its accept or its previous answer; 0 = off */
    int max_conn_per_ip;         /* --max-connections-per-ip; 0 = half of --threads-http */
    char allowed_hosts[SRV_MAX_ALLOWED][256]; /* --allowed-hosts: Host names a keyless loopback server
                                                 also answers ("*" = any) */
    int n_allowed_hosts;
    char allowed_origins[SRV_MAX_ALLOWED][256]; /* --allowed-origins: CORS origins ("*" = any) */
    int n_allowed_origins;
    uint64_t max_body_bytes;     /* --max-body-size */
    int sse_ping_s;              /* --sse-ping-interval (LLAMA_ARG_SSE_PING_INTERVAL), 0 = off */
    int threads_http;            /* --threads-http (LLAMA_ARG_THREADS_HTTP): connections served at once
                                    (one thread each); the oldest idle one is closed to admit another */
    bool metrics;                /* --metrics (LLAMA_ARG_ENDPOINT_METRICS) */
    bool slots;                  /* --slots / --no-slots (LLAMA_ARG_ENDPOINT_SLOTS) */
    bool webui;                  /* --webui / --no-webui (LLAMA_ARG_WEBUI, LLAMA_ARG_NO_WEBUI):
                                    the chat page at GET / (default on) */
    char port_file[1024];        /* --port-file: write the bound port here (tests) */

    /* ---- scheduling ---- */
    int n_parallel;              /* -np, --parallel, --n-parallel (LLAMA_ARG_N_PARALLEL) */
    int max_batch_size;          /* --max-batch-size: sequences per step, 0 = n_parallel */
    int prefill_chunk_size;      /* --prefill-chunk-size: prompt tokens per chunk, 0 = ubatch */
    int batch_size;              /* -b, --batch-size (LLAMA_ARG_BATCH): logical tokens per step */
    int ubatch_size;             /* -ub, --ubatch-size (LLAMA_ARG_UBATCH): physical per forward */
    int prefill_grant_interval;  /* --prefill-grant-interval, 0 = off */
    int ctx_size;                /* -c, --ctx-size (LLAMA_ARG_CTX_SIZE), 0 = from the model */
    int max_queue_depth;         /* --max-queue-depth: waiting requests before 503, 0 = no limit */
    char storage[16];            /* --decode-storage-backend auto|dense|paged */
    char cache_type_k[16];       /* -ctk, --cache-type-k (LLAMA_ARG_CACHE_TYPE_K): f32|f16|bf16|q8_0|q4_0,
                                    "" = the backend's (CPU f32, CUDA bf16) */
    char cache_type_v[16];       /* -ctv, --cache-type-v (LLAMA_ARG_CACHE_TYPE_V) */

    /* ---- default sampling (requests override) ---- */
    int n_predict;               /* -n, --n-predict (LLAMA_ARG_N_PREDICT), -1 = until ctx */
    float temperature;           /* --temp (LLAMA_ARG_TEMPERATURE) */
    float top_p;                 /* --top-p (LLAMA_ARG_TOP_P) */
    int top_k;                   /* --top-k (LLAMA_ARG_TOP_K) */
    float min_p;                 /* --min-p (LLAMA_ARG_MIN_P) */
    float repeat_penalty;        /* --repeat-penalty (LLAMA_ARG_REPEAT_PENALTY) */
    int repeat_last_n;           /* --repeat-last-n */
    float presence_penalty;      /* --presence-penalty (LLAMA_ARG_PRESENCE_PENALTY) */
    float frequency_penalty;     /* --frequency-penalty (LLAMA_ARG_FREQUENCY_PENALTY) */
    int64_t seed;                /* -s, --seed, -1 = random */
    unsigned sampling_set;       /* RT_GEN_* bits (runtime.h) of the defaults above that a flag
                                    or LLAMA_ARG_* variable set: generation_config.json fills
                                    the others (srv_backend_engine.c) */
} srv_config;

void srv_config_defaults(srv_config *c);
/* Reads the LLAMA_ARG_* variables (the only place they are read), then argv (argv[0] is the
 * command name). Returns 0, 1 when --help was printed to `help_out`, -1 on a bad flag/value. */
int srv_config_parse(srv_config *c, int argc, char **argv, FILE *help_out, mx_error *err);
/* Fills derived values (max_batch_size, prefill_chunk_size) and checks their interplay. */
int srv_config_finalize(srv_config *c, int model_ctx, mx_error *err);
void srv_config_usage(FILE *out, const char *prog);

#endif
