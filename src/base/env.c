#include "base/env.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static mx_env_t g_env;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Registered value lists (mx_env_register_choices) and whether env_load has run: g_choice_mu
 * orders a registration against a load, so a list is applied by one or the other. */
#define ENV_MAX_CHOICES 8
static mx_env_choices g_choices[ENV_MAX_CHOICES];
static int g_n_choices;
static bool g_loaded;
static pthread_mutex_t g_choice_mu = PTHREAD_MUTEX_INITIALIZER;

int mx_parse_bytes(const char *s, uint64_t *out) {
    if (!s || !*s) return -1;
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0) return -1;
    uint64_t mul = 1;
    if (*end) {
        switch (toupper((unsigned char)*end)) {
        case 'K': mul = 1ull << 10; break;
        case 'M': mul = 1ull << 20; break;
        case 'G': mul = 1ull << 30; break;
        case 'T': mul = 1ull << 40; break;
        default: return -1;
        }
        end++;
        if (toupper((unsigned char)*end) == 'I') end++;
        if (toupper((unsigned char)*end) == 'B') end++;
        if (*end) return -1;
    }
    *out = (uint64_t)(v * (double)mul);
    return 0;
}

static int env_int(const char *name, int def, int lo, int hi) {
    const char *s = getenv(name);
    if (!s || !*s) return def;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (*end || v < lo || v > hi) {
        fprintf(stderr, "mlxcel warn: %s=%s is not an integer in [%d, %d]; using %d\n", name, s, lo,
                hi, def);
        return def;
    }
    return (int)v;
}

/* An integer that must be one of vals[n] (or 0 = unset / policy). */
static int env_choice(const char *name, const int *vals, int n) {
    const char *s = getenv(name);
    if (!s || !*s) return 0;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    for (int i = 0; !*end && i < n; i++)
        if (v == vals[i]) return (int)v;
    if (!*end && v == 0) return 0;
    char list[160] = "";
    for (int i = 0; i < n; i++) {
        size_t l = strlen(list);
        snprintf(list + l, sizeof list - l, "%s%d", i ? ", " : "", vals[i]);
    }
    fprintf(stderr, "mlxcel warn: %s=%s is not one of %s (or 0 = policy); ignored\n", name, s,
            list);
    return 0;
}

static bool env_bool(const char *name, bool def) {
    const char *s = getenv(name);
    if (!s || !*s) return def;
    if (!strcmp(s, "1") || !strcasecmp(s, "true") || !strcasecmp(s, "on") || !strcasecmp(s, "yes"))
        return true;
    if (!strcmp(s, "0") || !strcasecmp(s, "false") || !strcasecmp(s, "off") || !strcasecmp(s, "no"))
        return false;
    fprintf(stderr, "mlxcel warn: %s=%s is not a boolean (0/1); using %d\n", name, s, (int)def);
    return def;
}

/* The field a registrable variable is read into; NULL for any other name. */
static int *choice_field(const char *name) {
    if (!strcmp(name, "MLXCEL_QMV_MULTIROW")) return &g_env.qmv_multirow;
    if (!strcmp(name, "MLXCEL_QMM_TILE_M")) return &g_env.qmm_tile_m;
    return NULL;
}

static void load_choice(const mx_env_choices *c) {
    int *f = choice_field(c->name);
    if (f) *f = env_choice(c->name, c->values, c->n);
}

void mx_env_register_choices(const mx_env_choices *c) {
    if (!c || !c->name || !choice_field(c->name)) {
        fprintf(stderr, "mlxcel warn: internal: no environment variable %s takes a value list\n",
                c && c->name ? c->name : "(null)");
        return;
    }
    pthread_mutex_lock(&g_choice_mu);
    bool known = false;
    for (int i = 0; i < g_n_choices; i++) known |= !strcmp(g_choices[i].name, c->name);
    if (!known && g_n_choices < ENV_MAX_CHOICES) {
        g_choices[g_n_choices++] = *c;
        if (g_loaded) load_choice(c); /* mx_env() already ran: read the variable now */
    }
    pthread_mutex_unlock(&g_choice_mu);
}

static void env_load(void) {
    memset(&g_env, 0, sizeof g_env);
    const char *s;

    g_env.log_level = 2;
    if ((s = getenv("MLXCEL_LOG_LEVEL")) && *s) {
        static const char *lv[] = {"error", "warn", "info", "debug"};
        int found = -1;
        for (int i = 0; i < 4; i++)
            if (!strcasecmp(s, lv[i])) found = i;
        if (found < 0)
            fprintf(stderr, "mlxcel warn: MLXCEL_LOG_LEVEL=%s unknown (error|warn|info|debug)\n", s);
        else
            g_env.log_level = found;
    }

    if ((s = getenv("MLXCEL_MEMORY_LIMIT")) && *s && mx_parse_bytes(s, &g_env.memory_limit))
        fprintf(stderr, "mlxcel warn: MLXCEL_MEMORY_LIMIT=%s is not a size (e.g. 80G); ignored\n", s);

    if ((s = getenv("MLXCEL_CACHE_DIR")) && *s)
        snprintf(g_env.cache_dir, sizeof g_env.cache_dir, "%s", s);
    else
        snprintf(g_env.cache_dir, sizeof g_env.cache_dir, "%s/.cache/mlxcel",
                 getenv("HOME") ? getenv("HOME") : "/tmp");

    g_env.autotune = MX_AUTOTUNE_OFF;
    if ((s = getenv("MLXCEL_AUTOTUNE")) && *s) {
        if (!strcmp(s, "0") || !strcasecmp(s, "off")) g_env.autotune = MX_AUTOTUNE_OFF;
        else if (!strcasecmp(s, "cache")) g_env.autotune = MX_AUTOTUNE_CACHE;
        else if (!strcmp(s, "1") || !strcasecmp(s, "on")) g_env.autotune = MX_AUTOTUNE_ON;
        else fprintf(stderr, "mlxcel warn: MLXCEL_AUTOTUNE=%s unknown (0|cache|1); autotune off\n", s);
    }

    g_env.weight_lazy = false;
    if ((s = getenv("MLXCEL_WEIGHT_MATERIALIZATION")) && *s) {
        if (!strcasecmp(s, "lazy")) g_env.weight_lazy = true;
        else if (strcasecmp(s, "eager"))
            fprintf(stderr, "mlxcel warn: MLXCEL_WEIGHT_MATERIALIZATION=%s unknown (eager|lazy)\n", s);
    }
    g_env.cuda_pinned_load = env_bool("MLXCEL_CUDA_PINNED_LOAD", true);
    g_env.profile_ttft = env_bool("MLXCEL_PROFILE_TTFT", false);
    g_env.responses_store_max = env_int("MLXCEL_RESPONSES_STORE_MAX", 1000, 0, 1 << 20);
    g_env.responses_store_bytes = 64ull << 20;
    if ((s = getenv("MLXCEL_RESPONSES_STORE_BYTES")) && *s && mx_parse_bytes(s, &g_env.responses_store_bytes)) {
        fprintf(stderr, "mlxcel warn: MLXCEL_RESPONSES_STORE_BYTES=%s is not a size (e.g. 64M); using 64M\n", s);
        g_env.responses_store_bytes = 64ull << 20;
    }
    g_env.dense_gemv_rows = env_int("MLXCEL_DENSE_GEMV_ROWS", 2, 0, 64);
    g_env.sdpa_deterministic = env_bool("MLXCEL_SDPA_DETERMINISTIC", false);
    g_env.cuda_pdl = env_bool("MLXCEL_CUDA_PDL", true);
    g_env.cuda_prefer_shared = env_bool("MLXCEL_CUDA_PREFER_SHARED", false);
    g_env.lt_splitk = env_bool("MLXCEL_LT_SPLITK", true);
    g_env.join_qkv = env_bool("MLXCEL_JOIN_QKV", true);
    g_env.gemv_fuse = env_int("MLXCEL_GEMV_FUSE", 1, 0, 2);
    g_env.gemv_rope = env_bool("MLXCEL_GEMV_ROPE", true);
    g_env.gemv_tc_rows = env_int("MLXCEL_GEMV_TC_ROWS", 8, 0, 32);
    g_env.gemv_split_rows = env_int("MLXCEL_GEMV_TC_SPLIT_ROWS", 8, 0, 16);
    g_env.gemv_prefetch_kb = env_int("MLXCEL_GEMV_PREFETCH_KB", 0, 0, 4096);
    if ((s = getenv("MLXCEL_DIAG_SKIP")) && *s) {
        static const char *const k_skip[] = {"attn", "norm", "glu", "rope", "prep",
                                             "qkv",  "o",    "gu",  "down"};
        const int n_skip = (int)(sizeof k_skip / sizeof k_skip[0]);
        char buf[128];
        snprintf(buf, sizeof buf, "%s", s);
        char *save = NULL;
        for (char *t = strtok_r(buf, ",+", &save); t; t = strtok_r(NULL, ",+", &save)) {
            int k = 0;
            while (k < n_skip && strcasecmp(t, k_skip[k])) k++;
            if (k < n_skip)
                g_env.diag_skip |= 1u << k;
            else
                fprintf(stderr, "mlxcel warn: MLXCEL_DIAG_SKIP: '%s' unknown (attn, norm, glu, "
                                "rope, prep, qkv, o, gu, down)\n", t);
        }
    }
    g_env.diag_empty = env_int("MLXCEL_DIAG_EMPTY", 0, 0, 8);
    g_env.attn_cluster = env_int("MLXCEL_ATTN_CLUSTER", 16, 0, 16);
    g_env.attn_stages = env_int("MLXCEL_ATTN_STAGES", 3, 1, 3);
    g_env.attn_tc = env_bool("MLXCEL_ATTN_TC", true);
    g_env.attn_early_kv = env_bool("MLXCEL_ATTN_EARLY_KV", true);
    g_env.gemv_early = env_bool("MLXCEL_GEMV_EARLY", true);
    g_env.gemv_persist = env_bool("MLXCEL_GEMV_PERSIST", false);
    static const int k_ksplit[] = {1, 2, 4};
    g_env.gemv_ksplit = env_choice("MLXCEL_GEMV_KSPLIT", k_ksplit, 3);
    g_env.tp_group = env_bool("MLXCEL_TP_GROUP", false);
    /* The tuning page's Metal command-buffer budgets have no counterpart here (no Metal
     * backend; CUDA captures a whole decode step as one graph, the CPU has no command
     * buffers): a value set for them is named once instead of silently ignored. */
    static const char *const k_metal[] = {"MLX_MAX_OPS_PER_BUFFER", "MLX_MAX_MB_PER_BUFFER",
                                          "MLXCEL_DECODE_MB_PER_BUFFER"};
    for (size_t i = 0; i < sizeof k_metal / sizeof k_metal[0]; i++)
        if ((s = getenv(k_metal[i])) && *s)
            fprintf(stderr, "mlxcel note: %s=%s is a Metal command-buffer budget; this build has no "
                            "Metal backend (CUDA captures each decode step as one graph, bounded by "
                            "MLX_CUDA_GRAPH_CACHE_SIZE; the CPU has no command buffers), so it has no "
                            "effect (docs/environment.md)\n", k_metal[i], s);
    g_env.cuda_graph_cache_size = env_int("MLX_CUDA_GRAPH_CACHE_SIZE", 2000, 0, 1 << 30);
    g_env.cuda_sdpa_cache_size = env_int("MLX_CUDA_SDPA_CACHE_SIZE", 2000, 0, 1 << 30);
    g_env.paged_decode_splits = env_int("MLXCEL_PAGED_DECODE_SPLITS", 0, 0, 1024);
    g_env.cascade_attention = MX_CASCADE_AUTO;
    if ((s = getenv("MLXCEL_CASCADE_ATTENTION")) && *s) {
        if (!strcmp(s, "0") || !strcasecmp(s, "off")) g_env.cascade_attention = MX_CASCADE_OFF;
        else if (!strcmp(s, "1") || !strcasecmp(s, "on")) g_env.cascade_attention = MX_CASCADE_FORCE;
        else if (strcasecmp(s, "auto"))
            fprintf(stderr, "mlxcel warn: MLXCEL_CASCADE_ATTENTION=%s unknown (auto|0|1); using "
                            "auto\n", s);
    }
    g_env.grammar_overlap = MX_OVERLAP_AUTO;
    if ((s = getenv("MLXCEL_GRAMMAR_OVERLAP")) && *s) {
        if (!strcmp(s, "0") || !strcasecmp(s, "off")) g_env.grammar_overlap = MX_OVERLAP_OFF;
        else if (!strcmp(s, "1") || !strcasecmp(s, "on")) g_env.grammar_overlap = MX_OVERLAP_FORCE;
        else if (strcasecmp(s, "auto"))
            fprintf(stderr, "mlxcel warn: MLXCEL_GRAMMAR_OVERLAP=%s unknown (auto|0|1); using auto\n", s);
    }
    g_env.cascade_min_shared_keys =
        env_int("MLXCEL_CASCADE_MIN_SHARED_KEYS", MX_CASCADE_MIN_SHARED_KEYS_DEFAULT, 0, 1 << 30);
    /* the valid values of the CUDA kernels: registered lists (backend/cuda/cuda_knobs.c) */
    pthread_mutex_lock(&g_choice_mu);
    for (int i = 0; i < g_n_choices; i++) load_choice(&g_choices[i]);
    g_loaded = true;
    pthread_mutex_unlock(&g_choice_mu);
    g_env.qmv_tc = env_bool("MLXCEL_QMV_TC", false);
    g_env.qmv_bulk = env_bool("MLXCEL_QMV_BULK", true);
    g_env.qmv_bulk_min_rows = env_int("MLXCEL_QMV_BULK_MIN_ROWS", 2, 1, 32);
    g_env.qmv_mma = env_int("MLXCEL_QMV_MMA", 1, 0, 8);
    g_env.qmv_i8 = env_int("MLXCEL_QMV_I8", 8, 0, 8);
    g_env.qmv_i8_q8 = env_int("MLXCEL_QMV_I8_Q8", 0, 0, 8);
    g_env.qmv_i8_glu = env_bool("MLXCEL_QMV_I8_GLU", true);
    g_env.qmv_i8_norm = env_bool("MLXCEL_QMV_I8_NORM", true);
    g_env.qmv_i8_inprep = env_bool("MLXCEL_QMV_I8_INPREP", true);
    g_env.qmv_tiled = env_bool("MLXCEL_QMV_TILED", true);
}

const mx_env_t *mx_env(void) {
    pthread_once(&g_once, env_load);
    return &g_env;
}

void mx_env_reload(void) {
    pthread_once(&g_once, env_load);
    env_load();
}

/* ==== OpenMP defaults ==== */
void mx_env_apply_omp_defaults(char **argv) {
    const char *policy = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT");
    if ((policy && *policy) || (spin && *spin) || !argv || !argv[0]) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1)) return;
    execv("/proc/self/exe", argv);
    /* no /proc (or exec refused): keep running with the library's default policy; the
     * variable is removed again so that what the process reports matches what it does */
    unsetenv("OMP_WAIT_POLICY");
}
