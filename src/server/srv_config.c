/* `mlxcel serve` flags. One table lists every option with its names, its LLAMA_ARG_* variable,
 * its type and range; the environment is applied first and argv second, so a flag wins. */
#include "server/srv_config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/env.h"
#include "base/log.h"
#include "kv/kv_cache.h"
#include "runtime/runtime.h"
#include "server/srv_embed.h"
#include "server/srv_tools.h"

/* ==== Option table ==== */
typedef enum { OPT_INT, OPT_I64, OPT_FLOAT, OPT_STR, OPT_FLAG, OPT_NOFLAG, OPT_SIZE, OPT_SPECIAL } opt_type;

typedef struct opt {
    const char *names[4]; /* NULL-terminated */
    const char *env;      /* LLAMA_ARG_* or NULL */
    opt_type type;
    size_t off;
    size_t size;          /* OPT_STR buffer size */
    double lo, hi;        /* numeric range */
    const char *help;
} opt;

#define F(field) offsetof(srv_config, field), sizeof(((srv_config *)0)->field)
static const opt k_opts[] = {
    {{"-m", "--model", NULL}, "LLAMA_ARG_MODEL", OPT_STR, F(model), 0, 0, "checkpoint directory"},
    {{"-a", "--alias", NULL}, "LLAMA_ARG_ALIAS", OPT_SPECIAL, F(aliases), 0, 0,
     "model name(s) served by the API, comma-separated"},
    {{"--chat-template-file", NULL}, "LLAMA_ARG_CHAT_TEMPLATE_FILE", OPT_STR, F(chat_template_file),
     0, 0, "Jinja chat template file (overrides the checkpoint's)"},
    {{"--embedding", "--embeddings", NULL}, "LLAMA_ARG_EMBEDDINGS", OPT_FLAG, F(embeddings), 0, 0,
     "embedding mode (llama-server's): POST /v1/embeddings, /embedding and /embeddings work, the "
     "generation routes answer 501"},
    {{"--pooling", NULL}, "LLAMA_ARG_POOLING", OPT_STR, F(pooling), 0, 0,
     "embeddings: last, mean, cls or none (default: the checkpoint's 1_Pooling/config.json, else last)"},
    {{"--reasoning-format", NULL}, "LLAMA_ARG_THINK", OPT_STR, F(reasoning_format), 0, 0,
     "chat replies' <think>: none (left in content), auto / deepseek (reasoning_content, default), "
     "deepseek-legacy (both)"},
    {{"--tool-call-parser", NULL}, NULL, OPT_STR, F(tool_call_parser), 0, 0,
     "tool-call syntax of the replies: auto (from the chat template, default), none, hermes, llama3, mistral, "
     "deepseek_v3"},
    {{"--chat-template-kwargs", NULL}, "LLAMA_ARG_CHAT_TEMPLATE_KWARGS", OPT_STR, F(chat_template_kwargs), 0, 0,
     "JSON object of chat template variables for every request (a request's chat_template_kwargs win)"},
    {{"--device", NULL}, NULL, OPT_STR, F(device), 0, 0, "compute device: cpu (default) or cuda"},
    {{"--load-format", NULL}, NULL, OPT_STR, F(load_format), 0, 0,
     "auto (default): the checkpoint's files; dummy: only config.json, generated weights"},
    {{"--tp-size", NULL}, NULL, OPT_INT, F(tp_size), 1, 64,
     "tensor-parallel ranks: threads on the CPU, one GPU each on CUDA (default 1)"},
    {{"--host", NULL}, "LLAMA_ARG_HOST", OPT_STR, F(host), 0, 0,
     "address to bind (default 127.0.0.1); a path ending in .sock binds a Unix socket"},
    {{"--port", NULL}, "LLAMA_ARG_PORT", OPT_INT, F(port), 0, 65535, "TCP port (default 8080; 0 = any free port)"},
    {{"--api-key", NULL}, "LLAMA_API_KEY", OPT_SPECIAL, F(api_keys), 0, 0,
     "require `Authorization: Bearer KEY` (comma-separated list; an empty key is refused) "
     "[env LLAMA_ARG_API_KEY too]"},
    {{"--api-key-file", NULL}, "LLAMA_ARG_API_KEY_FILE", OPT_SPECIAL, F(api_keys), 0, 0,
     "file of API keys, one per line, '#' comments (a file with no key is refused)"},
    {{"-to", "--timeout", NULL}, "LLAMA_ARG_TIMEOUT", OPT_INT, F(timeout_s), 1, 86400,
     "socket read/write idle timeout in seconds (default 600)"},
    {{"--header-timeout", NULL}, NULL, OPT_INT, F(header_timeout_s), 0, 86400,
     "seconds a connection has to send a complete request header, from its accept or its "
     "previous answer (keep-alive), however slowly it trickles bytes (default 10; 0 = off)"},
    {{"--max-connections-per-ip", NULL}, NULL, OPT_INT, F(max_conn_per_ip), 0, 1 << 20,
     "connections one client address may hold (IPv6: per /64); at the limit its oldest idle one "
     "is closed, or a new one refused if all are busy (default 0 = half of --threads-http)"},
    {{"--allowed-hosts", NULL}, NULL, OPT_SPECIAL, F(allowed_hosts), 0, 0,
     "Host names a keyless server bound to loopback answers besides localhost and loopback "
     "IPs (DNS-rebinding defence; comma-separated, '*' = any)"},
    {{"--allowed-origins", NULL}, NULL, OPT_SPECIAL, F(allowed_origins), 0, 0,
     "CORS origins (scheme://host[:port], comma-separated, '*' = any) answered besides the "
     "server's own and loopback pages; a list refuses every other Origin (403)"},
    {{"--max-body-size", NULL}, NULL, OPT_SIZE, F(max_body_bytes), 1024, 1ull << 32,
     "largest request body accepted, e.g. 16M (default 16M); larger answers 413"},
    {{"--sse-ping-interval", NULL}, "LLAMA_ARG_SSE_PING_INTERVAL", OPT_INT, F(sse_ping_s), 0, 3600,
     "seconds between SSE keep-alive comments on a quiet stream (default 15; 0 = off)"},
    {{"--threads-http", NULL}, "LLAMA_ARG_THREADS_HTTP", OPT_INT, F(threads_http), 1, 65536,
     "most simultaneous HTTP connections, one thread each; at the limit the oldest idle one is "
     "closed to admit a new one (default 1024)"},
    {{"--metrics", NULL}, "LLAMA_ARG_ENDPOINT_METRICS", OPT_FLAG, F(metrics), 0, 0,
     "enable GET /metrics (Prometheus text format)"},
    {{"--slots", NULL}, "LLAMA_ARG_ENDPOINT_SLOTS", OPT_FLAG, F(slots), 0, 0, "enable GET /slots (default on)"},
    {{"--no-slots", NULL}, NULL, OPT_NOFLAG, F(slots), 0, 0, "disable GET /slots"},
    {{"--webui", NULL}, "LLAMA_ARG_WEBUI", OPT_FLAG, F(webui), 0, 0,
     "serve the built-in chat page at GET / (default on)"},
    {{"--no-webui", NULL}, "LLAMA_ARG_NO_WEBUI", OPT_NOFLAG, F(webui), 0, 0,
     "no chat page: GET / answers 404 (llama-server's flag)"},
    {{"--port-file", NULL}, NULL, OPT_STR, F(port_file), 0, 0,
     "write the bound TCP port to this file once listening"},
    {{"-np", "--parallel", "--n-parallel", NULL}, "LLAMA_ARG_N_PARALLEL", OPT_INT, F(n_parallel), 1,
     4096, "sequence slots decoded together (default 4)"},
    {{"--max-batch-size", NULL}, NULL, OPT_INT, F(max_batch_size), 0, 4096,
     "most sequences in one step (default = --n-parallel)"},
    {{"--prefill-chunk-size", NULL}, NULL, OPT_INT, F(prefill_chunk_size), 0, 1 << 20,
     "prompt tokens per prefill chunk (default = --ubatch-size)"},
    {{"-b", "--batch-size", NULL}, "LLAMA_ARG_BATCH", OPT_INT, F(batch_size), 1, 1 << 20,
     "logical batch: most tokens in one step (default 2048)"},
    {{"-ub", "--ubatch-size", NULL}, "LLAMA_ARG_UBATCH", OPT_INT, F(ubatch_size), 1, 1 << 20,
     "physical batch: most tokens in one forward pass (default 512)"},
    {{"--prefill-grant-interval", NULL}, NULL, OPT_INT, F(prefill_grant_interval), 0, 1 << 20,
     "every N decode steps grant a prefill chunk to a waiting prompt (default 16; 0 = off)"},
    {{"-c", "--ctx-size", NULL}, "LLAMA_ARG_CTX_SIZE", OPT_INT, F(ctx_size), 0, 1 << 24,
     "context per sequence in tokens (default 0 = min(4096, the model's))"},
    {{"--max-queue-depth", NULL}, NULL, OPT_INT, F(max_queue_depth), 0, 1 << 24,
     "requests waiting for a slot before new ones get 503 (default 256; 0 = no limit)"},
    {{"--decode-storage-backend", NULL}, NULL, OPT_STR, F(storage), 0, 0,
     "KV storage: auto (default), dense or paged"},
    {{"-ctk", "--cache-type-k", NULL}, "LLAMA_ARG_CACHE_TYPE_K", OPT_STR, F(cache_type_k), 0, 0,
     "K cache type: f32 (CPU default), f16, bf16 (CUDA default), q8_0, q4_0, turbo2, turbo3, "
     "turbo4 (TurboQuant)"},
    {{"-ctv", "--cache-type-v", NULL}, "LLAMA_ARG_CACHE_TYPE_V", OPT_STR, F(cache_type_v), 0, 0,
     "V cache type: the same choices"},
    {{"-n", "--n-predict", "--predict", NULL}, "LLAMA_ARG_N_PREDICT", OPT_INT, F(n_predict), -1,
     1 << 24, "default max tokens per request (-1 = until the context is full)"},
    {{"--temp", "--temperature", NULL}, "LLAMA_ARG_TEMPERATURE", OPT_FLOAT, F(temperature), 0, 100,
     "default temperature (0.8)"},
    {{"--top-p", NULL}, "LLAMA_ARG_TOP_P", OPT_FLOAT, F(top_p), 0, 1, "default top-p (0.95)"},
    {{"--top-k", NULL}, "LLAMA_ARG_TOP_K", OPT_INT, F(top_k), 0, 1 << 24, "default top-k (40; 0 = off)"},
    {{"--min-p", NULL}, "LLAMA_ARG_MIN_P", OPT_FLOAT, F(min_p), 0, 1, "default min-p (0.05)"},
    {{"--repeat-penalty", NULL}, "LLAMA_ARG_REPEAT_PENALTY", OPT_FLOAT, F(repeat_penalty), 0, 100,
     "default repeat penalty (1.0 = off)"},
    {{"--repeat-last-n", NULL}, NULL, OPT_INT, F(repeat_last_n), -1, 1 << 24,
     "window of the penalties (64; -1 = whole context)"},
    {{"--presence-penalty", NULL}, "LLAMA_ARG_PRESENCE_PENALTY", OPT_FLOAT, F(presence_penalty), -2,
     2, "default presence penalty (0)"},
    {{"--frequency-penalty", NULL}, "LLAMA_ARG_FREQUENCY_PENALTY", OPT_FLOAT, F(frequency_penalty),
     -2, 2, "default frequency penalty (0)"},
    {{"-s", "--seed", NULL}, NULL, OPT_I64, F(seed), -1, 9.007199254740992e15,
     "default seed (-1 = random per request)"},
};
#undef F
#define N_OPTS (int)(sizeof k_opts / sizeof k_opts[0])

void srv_config_defaults(srv_config *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->host, sizeof c->host, "127.0.0.1");
    c->port = 8080;
    c->tp_size = 1;
    c->timeout_s = 600;
    c->header_timeout_s = 10;
    c->max_body_bytes = 16u << 20;
    c->sse_ping_s = 15;
    c->threads_http = 1024;
    c->slots = true;
    c->webui = true;
    c->n_parallel = 4;
    c->batch_size = 2048;
    c->ubatch_size = 512;
    c->prefill_grant_interval = 16;
    c->max_queue_depth = 256;
    snprintf(c->storage, sizeof c->storage, "auto");
    snprintf(c->device, sizeof c->device, "cpu");
    snprintf(c->load_format, sizeof c->load_format, "auto");
    snprintf(c->reasoning_format, sizeof c->reasoning_format, "auto");
    snprintf(c->tool_call_parser, sizeof c->tool_call_parser, "auto");
    c->n_predict = -1;
    c->temperature = 0.8f;
    c->top_p = 0.95f;
    c->top_k = 40;
    c->min_p = 0.05f;
    c->repeat_penalty = 1.0f;
    c->repeat_last_n = 64;
    c->seed = -1;
}

void srv_config_usage(FILE *out, const char *prog) {
    fprintf(out, "usage: %s -m DIR [options]\n\noptions:\n", prog);
    for (int i = 0; i < N_OPTS; i++) {
        char names[96] = "";
        for (int j = 0; k_opts[i].names[j]; j++) {
            if (j) strncat(names, ", ", sizeof names - strlen(names) - 1);
            strncat(names, k_opts[i].names[j], sizeof names - strlen(names) - 1);
        }
        fprintf(out, "  %-34s %s", names, k_opts[i].help);
        if (k_opts[i].env) fprintf(out, " [env %s]", k_opts[i].env);
        fputc('\n', out);
    }
    fprintf(out, "  -h, --help                         this help\n");
}

/* ==== Value parsing ==== */
static int parse_bool_text(const char *s, bool *out) {
    static const char *t[] = {"1", "true", "on", "enabled", "yes"};
    static const char *f[] = {"0", "false", "off", "disabled", "no"};
    for (int i = 0; i < 5; i++) {
        if (!strcasecmp(s, t[i])) { *out = true; return 0; }
        if (!strcasecmp(s, f[i])) { *out = false; return 0; }
    }
    return -1;
}

static int add_list(char (*dst)[256], int *n, int cap, const char *list, const char *what, mx_error *err) {
    const char *p = list;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        while (len && isspace((unsigned char)*p)) { p++; len--; }
        while (len && isspace((unsigned char)p[len - 1])) len--;
        if (len) {
            if (*n >= cap) return mx_fail(err, "%s: at most %d values", what, cap);
            if (len >= 256) return mx_fail(err, "%s: a value longer than 255 bytes", what);
            memcpy(dst[*n], p, len);
            dst[*n][len] = 0;
            (*n)++;
        }
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

/* API keys: an empty key (an empty value, blank between commas, only spaces) is refused. A
 * server started with `--api-key ''` (say, from an unset shell variable) would otherwise run
 * with no authentication at all and say nothing about it. */
static int add_keys(srv_config *c, const char *list, const char *what, mx_error *err) {
    for (const char *p = list;;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        bool blank = true;
        for (size_t i = 0; i < len; i++) blank &= isspace((unsigned char)p[i]) != 0;
        if (blank)
            return mx_fail(err, "%s: an empty API key%s would leave the server without authentication; give a "
                                "key, or leave the option out for a keyless server",
                           what, e || p != list ? " (between commas)" : "");
        if (!e) break;
        p = e + 1;
    }
    return add_list(c->api_keys, &c->n_api_keys, SRV_MAX_API_KEYS, list, what, err);
}

static int read_key_file(srv_config *c, const char *path, mx_error *err) {
    FILE *f = fopen(path, "r");
    if (!f) return mx_fail(err, "--api-key-file %s: %s", path, strerror(errno));
    char line[512];
    char what[1100];
    snprintf(what, sizeof what, "--api-key-file %s", path);
    int rc = 0, found = 0;
    while (fgets(line, sizeof line, f)) {
        size_t len = strcspn(line, "\r\n");
        line[len] = 0;
        char *p = line;
        while (isspace((unsigned char)*p)) p++;
        if (!*p || *p == '#') continue;
        if (add_keys(c, p, what, err)) {
            rc = -1;
            break;
        }
        found++;
    }
    fclose(f);
    if (!rc && !found)
        return mx_fail(err, "%s: the file holds no API key (only blank lines or '#' comments); a server "
                            "started with it would have no authentication", what);
    return rc;
}

/* --allowed-origins entries: '*' or scheme://host[:port] (what a browser sends as Origin);
 * "null" is never allowed (sandboxed frames and file: pages send it). --allowed-hosts: a name
 * or IP as it appears in Host, without a port; '*' = any. */
static int check_allowed(const char *v, bool origin, const char *name, mx_error *err) {
    if (!strcmp(v, "*")) return 0;
    if (origin) {
        if (!strcasecmp(v, "null"))
            return mx_fail(err, "%s: the origin 'null' (sandboxed frames, file: pages) cannot be allowed", name);
        const char *h = strstr(v, "://");
        if (!h || h == v || !h[3] || strchr(h + 3, '/'))
            return mx_fail(err, "%s: expected an origin such as https://app.example.com[:port] or '*', got '%s'",
                           name, v);
        return 0;
    }
    for (const char *p = v; *p; p++)
        if (*p == '/' || isspace((unsigned char)*p))
            return mx_fail(err, "%s: expected a host name or IP (no scheme, no path) or '*', got '%s'", name, v);
    return 0;
}

static int add_allowed(char (*dst)[256], int *n, const char *list, bool origin, const char *name, mx_error *err) {
    *n = 0;
    if (add_list(dst, n, SRV_MAX_ALLOWED, list, name, err)) return -1;
    for (int i = 0; i < *n; i++)
        if (check_allowed(dst[i], origin, name, err)) return -1;
    return 0;
}

static int set_value(srv_config *c, const opt *o, const char *name, const char *v, mx_error *err) {
    char *base = (char *)c + o->off;
    char *end = NULL;
    errno = 0;
    switch (o->type) {
    case OPT_INT: case OPT_I64: {
        long long x = strtoll(v, &end, 10);
        if (errno || end == v || *end || (double)x < o->lo || (double)x > o->hi)
            return mx_fail(err, "%s: expected an integer in [%.0f, %.0f], got '%s'", name, o->lo, o->hi, v);
        if (o->type == OPT_INT) *(int *)base = (int)x;
        else *(int64_t *)base = x;
        return 0;
    }
    case OPT_FLOAT: {
        double x = strtod(v, &end);
        if (errno || end == v || *end || !isfinite(x) || x < o->lo || x > o->hi)
            return mx_fail(err, "%s: expected a number in [%g, %g], got '%s'", name, o->lo, o->hi, v);
        *(float *)base = (float)x;
        return 0;
    }
    case OPT_SIZE: {
        uint64_t x;
        if (mx_parse_bytes(v, &x) || (double)x < o->lo || (double)x > o->hi)
            return mx_fail(err, "%s: expected a size in [%.0f, %.0f] bytes (K/M/G suffixes), got '%s'",
                           name, o->lo, o->hi, v);
        *(uint64_t *)base = x;
        return 0;
    }
    case OPT_STR:
        if (o->off == offsetof(srv_config, cache_type_k) || o->off == offsetof(srv_config, cache_type_v)) {
            kv_type t; /* llama.cpp's names; its other types get the supported list */
            if (kv_type_parse(v, &t, err)) return mx_wrap(err, "%s", name);
        }
        if (strlen(v) >= o->size) return mx_fail(err, "%s: value longer than %zu bytes", name, o->size - 1);
        memcpy(base, v, strlen(v) + 1);
        if (o->off == offsetof(srv_config, storage) && strcmp(v, "auto") && strcmp(v, "dense") &&
            strcmp(v, "paged"))
            return mx_fail(err, "%s: expected auto, dense or paged, got '%s'", name, v);
        if (o->off == offsetof(srv_config, device) && strcmp(v, "cpu") && strcmp(v, "cuda"))
            return mx_fail(err, "%s: expected cpu or cuda, got '%s'", name, v);
        if (o->off == offsetof(srv_config, load_format) && strcmp(v, "auto") && strcmp(v, "dummy"))
            return mx_fail(err, "%s: expected auto or dummy, got '%s'", name, v);
        if (o->off == offsetof(srv_config, reasoning_format)) {
            srv_reasoning_mode m;
            if (srv_reasoning_parse(v, &m))
                return mx_fail(err, "%s: expected none, auto, deepseek or deepseek-legacy, got '%s'", name, v);
        }
        if (o->off == offsetof(srv_config, tool_call_parser) && srv_tool_format_parse(v) == -2)
            return mx_fail(err, "%s: expected auto, none, hermes, llama3, mistral or deepseek_v3, got '%s'", name, v);
        if (o->off == offsetof(srv_config, chat_template_kwargs)) {
            json_t *kw = json_loads(v, 0, NULL);
            const bool obj = json_is_object(kw);
            json_decref(kw);
            if (!obj) return mx_fail(err, "%s: expected a JSON object, e.g. '{\"enable_thinking\":false}'", name);
        }
        return 0;
    case OPT_FLAG: case OPT_NOFLAG: {
        bool b;
        if (parse_bool_text(v, &b)) return mx_fail(err, "%s: expected a boolean (1/0, true/false, on/off), got '%s'", name, v);
        *(bool *)base = o->type == OPT_FLAG ? b : !b;
        return 0;
    }
    case OPT_SPECIAL:
        if (!strcmp(o->names[0], "-a")) {
            c->n_aliases = 0;
            return add_list(c->aliases, &c->n_aliases, SRV_MAX_ALIASES, v, name, err);
        }
        if (!strcmp(o->names[0], "--api-key")) return add_keys(c, v, name, err);
        if (!strcmp(o->names[0], "--allowed-hosts"))
            return add_allowed(c->allowed_hosts, &c->n_allowed_hosts, v, false, name, err);
        if (!strcmp(o->names[0], "--allowed-origins"))
            return add_allowed(c->allowed_origins, &c->n_allowed_origins, v, true, name, err);
        if (!*v) return mx_fail(err, "%s: empty file name", name);
        return read_key_file(c, v, err);
    }
    return mx_fail(err, "%s: internal option type", name);
}

/* Which generation_config.json default an option overrides (RT_GEN_*), 0 for none. */
static unsigned sampling_bit(const opt *o) {
    if (o->off == offsetof(srv_config, temperature)) return RT_GEN_TEMPERATURE;
    if (o->off == offsetof(srv_config, top_p)) return RT_GEN_TOP_P;
    if (o->off == offsetof(srv_config, top_k)) return RT_GEN_TOP_K;
    if (o->off == offsetof(srv_config, repeat_penalty)) return RT_GEN_REPEAT_PENALTY;
    return 0;
}

/* ==== Parse ==== */
int srv_config_parse(srv_config *c, int argc, char **argv, FILE *help_out, mx_error *err) {
    /* Environment first (the only place LLAMA_ARG_* are read), so flags override it.
     * LLAMA_ARG_REASONING_FORMAT is an alias of llama-server's LLAMA_ARG_THINK, which wins. */
    const char *rf = getenv("LLAMA_ARG_REASONING_FORMAT");
    if (rf && *rf) {
        for (int i = 0; i < N_OPTS; i++)
            if (k_opts[i].off == offsetof(srv_config, reasoning_format) &&
                set_value(c, &k_opts[i], "LLAMA_ARG_REASONING_FORMAT", rf, err))
                return -1;
    }
    /* An API-key variable that is set but empty is an error (below, unless flags give keys):
     * it reads as "authentication wanted", and skipping it as unset would serve keyless. */
    const char *env_key_empty = NULL;
    for (int i = 0; i < N_OPTS; i++) {
        if (!k_opts[i].env) continue;
        const char *v = getenv(k_opts[i].env);
        if (v && !*v && k_opts[i].type == OPT_SPECIAL && strcmp(k_opts[i].names[0], "-a"))
            env_key_empty = k_opts[i].env;
        if (!v || !*v) continue;
        if (set_value(c, &k_opts[i], k_opts[i].env, v, err)) return -1;
        c->sampling_set |= sampling_bit(&k_opts[i]);
    }
    /* LLAMA_ARG_API_KEY: the LLAMA_ARG_* spelling of llama-server's LLAMA_API_KEY. */
    const char *alt = getenv("LLAMA_ARG_API_KEY");
    if (alt && !*alt) env_key_empty = "LLAMA_ARG_API_KEY";
    if (alt && *alt) {
        const char *main_key = getenv("LLAMA_API_KEY");
        if (main_key && *main_key && strcmp(main_key, alt))
            return mx_fail(err, "LLAMA_API_KEY and LLAMA_ARG_API_KEY are both set, to different keys; set one");
        if (!(main_key && *main_key) && add_keys(c, alt, "LLAMA_ARG_API_KEY", err)) return -1;
    }
    /* The key list from the environment is replaced, not extended, by --api-key flags. */
    bool keys_from_flags = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
            srv_config_usage(help_out, argv[0]);
            return 1;
        }
        char name[64];
        const char *val = NULL;
        const char *eq = strncmp(arg, "--", 2) ? NULL : strchr(arg, '=');
        size_t nlen = eq ? (size_t)(eq - arg) : strlen(arg);
        if (nlen >= sizeof name) return mx_fail(err, "unknown option '%s' (see --help)", arg);
        memcpy(name, arg, nlen);
        name[nlen] = 0;
        if (eq) val = eq + 1;
        const opt *o = NULL;
        for (int k = 0; k < N_OPTS && !o; k++)
            for (int j = 0; k_opts[k].names[j]; j++)
                if (!strcmp(k_opts[k].names[j], name)) { o = &k_opts[k]; break; }
        if (!o) return mx_fail(err, "unknown option '%s' (see --help)", arg);
        if (o->type == OPT_FLAG || o->type == OPT_NOFLAG) {
            if (!val) val = "1";
        } else if (!val) {
            if (i + 1 >= argc) return mx_fail(err, "%s: missing value", name);
            val = argv[++i];
        }
        const bool key_opt = o->type == OPT_SPECIAL && (!strcmp(o->names[0], "--api-key") ||
                                                         !strcmp(o->names[0], "--api-key-file"));
        if (key_opt && !keys_from_flags) {
            c->n_api_keys = 0;
            keys_from_flags = true;
        }
        if (set_value(c, o, name, val, err)) return -1;
        c->sampling_set |= sampling_bit(o);
    }
    if (env_key_empty && !keys_from_flags)
        return mx_fail(err, "%s is set but empty: that would leave the server without authentication; give a "
                            "key, or unset the variable for a keyless server", env_key_empty);
    return 0;
}

int srv_config_finalize(srv_config *c, int model_ctx, mx_error *err) {
    /* --pooling shapes embeddings only: without --embeddings it would do nothing */
    if (c->pooling[0]) {
        srv_pooling p;
        if (!strcmp(c->pooling, "rank"))
            return mx_fail(err, "--pooling rank: reranking is not supported by this server");
        if (srv_pooling_parse(c->pooling, &p))
            return mx_fail(err, "--pooling: expected none, mean, cls or last, got '%s'", c->pooling);
        if (!c->embeddings)
            return mx_fail(err, "--pooling %s takes effect in embedding mode only: add --embeddings", c->pooling);
    }
    /* the default of every request that names none: the sampler refuses 0 (it divides by it) */
    if (!(c->repeat_penalty > 0))
        return mx_fail(err, "--repeat-penalty %g: must be > 0 (1 = off)", (double)c->repeat_penalty);
    if (c->max_conn_per_ip == 0) c->max_conn_per_ip = c->threads_http > 1 ? c->threads_http / 2 : 1;
    if (c->ctx_size == 0) c->ctx_size = model_ctx;
    if (c->ctx_size <= 0) return mx_fail(err, "--ctx-size: the model gives no context length; set one");
    /* llama-server: the physical batch never exceeds the logical one. */
    if (c->ubatch_size > c->batch_size) c->ubatch_size = c->batch_size;
    if (c->max_batch_size > c->n_parallel)
        /* the KV pool holds -np contexts: more sequences than that can never run together */
        LOG_WARN("--max-batch-size %d exceeds -np/--parallel %d: clamped to %d (the KV pool holds -np "
                 "contexts, so at most -np sequences run together; raise -np for a larger batch)",
                 c->max_batch_size, c->n_parallel, c->n_parallel);
    if (c->max_batch_size == 0 || c->max_batch_size > c->n_parallel) c->max_batch_size = c->n_parallel;
    if (c->prefill_chunk_size == 0) c->prefill_chunk_size = c->ubatch_size;
    if (c->prefill_chunk_size > c->batch_size)
        return mx_fail(err, "--prefill-chunk-size %d exceeds --batch-size %d", c->prefill_chunk_size,
                       c->batch_size);
    if (c->batch_size < c->max_batch_size)
        return mx_fail(err, "--batch-size %d is smaller than --max-batch-size %d: every decoding "
                            "sequence needs one token of the step", c->batch_size, c->max_batch_size);
    return 0;
}
