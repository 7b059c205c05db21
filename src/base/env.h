/* Every MLXCEL_* (and MLX_*) environment variable is read here, once, with its default.
 * docs/environment.md documents each. An explicit value always wins over a policy: the
 * `*_set` flags tell policies whether the user pinned a value. */
#ifndef MLXCEL_BASE_ENV_H
#define MLXCEL_BASE_ENV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { MX_AUTOTUNE_OFF = 0, MX_AUTOTUNE_CACHE, MX_AUTOTUNE_ON } mx_autotune_mode;
/* MLXCEL_CASCADE_ATTENTION (the CPU attention's shared-piece path, docs/engine.md) */
typedef enum { MX_CASCADE_OFF = 0, MX_CASCADE_AUTO, MX_CASCADE_FORCE } mx_cascade_mode;
/* auto's floor: a group of rows is used when its rows share at least this many keys */
#define MX_CASCADE_MIN_SHARED_KEYS_DEFAULT 512

/* MLXCEL_DIAG_SKIP (list, "," or "+" between): CUDA decode kernels not launched, for timing
 * what each costs on the step's critical path (prep: the int8 qmv's x preparation, which
 * holds the norm / GLU on quantized models; qkv, o, gu, down: the 1..2-row bf16 GEMVs of a
 * layer, with whatever is fused into them). The outputs are wrong: diagnostics only. */
enum {
    MX_SKIP_ATTN = 1, MX_SKIP_NORM = 2, MX_SKIP_GLU = 4, MX_SKIP_ROPE = 8, MX_SKIP_PREP = 16,
    MX_SKIP_QKV = 32, MX_SKIP_O = 64, MX_SKIP_GU = 128, MX_SKIP_DOWN = 256
};

/* MLXCEL_GRAMMAR_OVERLAP (token masks of constrained rows during the forward, docs/engine.md) */
typedef enum { MX_OVERLAP_OFF = 0, MX_OVERLAP_AUTO, MX_OVERLAP_FORCE } mx_overlap_mode;

typedef struct mx_env_t {
    int log_level;                 /* MLXCEL_LOG_LEVEL: error|warn|info|debug (info) */
    uint64_t memory_limit;         /* MLXCEL_MEMORY_LIMIT: bytes, K/M/G/T suffixes; 0 = unset */
    char cache_dir[1024];          /* MLXCEL_CACHE_DIR, else $HOME/.cache/mlxcel */
    mx_autotune_mode autotune;     /* MLXCEL_AUTOTUNE: unset/0 | cache | 1 */
    bool weight_lazy;              /* MLXCEL_WEIGHT_MATERIALIZATION=lazy (eager) */
    bool cuda_pinned_load;         /* MLXCEL_CUDA_PINNED_LOAD (1) */
    bool profile_ttft;             /* MLXCEL_PROFILE_TTFT (0) */
    int responses_store_max;       /* MLXCEL_RESPONSES_STORE_MAX (1000): /v1/responses kept (0: none) */
    uint64_t responses_store_bytes; /* MLXCEL_RESPONSES_STORE_BYTES (64M): ... and their JSON bytes */
    bool cuda_pdl;                 /* MLXCEL_CUDA_PDL (1): programmatic dependent launch */
    bool cuda_prefer_shared;       /* MLXCEL_CUDA_PREFER_SHARED (0): one carveout for all */
    bool lt_splitk;                /* MLXCEL_LT_SPLITK (1): cuBLASLt may pick split-K algorithms */
    bool join_qkv;                 /* MLXCEL_JOIN_QKV (1): Q/K/V in one device buffer, one GEMM */
    int gemv_fuse;                 /* MLXCEL_GEMV_FUSE (1): norm/add/GLU in GEMVs of <= N rows */
    bool gemv_rope;                /* MLXCEL_GEMV_ROPE (1): RoPE + KV write in the q/k/v GEMV */
    int gemv_prefetch_kb;          /* MLXCEL_GEMV_PREFETCH_KB (0): L2 prefetch per GEMV CTA */
    unsigned diag_skip;            /* MLXCEL_DIAG_SKIP: MX_SKIP_* kernels not launched (timing) */
    int diag_empty;                /* MLXCEL_DIAG_EMPTY (0): empty launches after attention */
    int attn_cluster;              /* MLXCEL_ATTN_CLUSTER (16): most splits merged in a cluster */
    int attn_stages;               /* MLXCEL_ATTN_STAGES (3): decode-attention chunks in flight */
    bool attn_tc;                  /* MLXCEL_ATTN_TC (1): decode attention on the tensor cores */
    bool attn_early_kv;            /* MLXCEL_ATTN_EARLY_KV (1): KV copies before the PDL wait */
    bool gemv_early;               /* MLXCEL_GEMV_EARLY (1): first weight batch before the PDL wait */
    bool gemv_persist;             /* MLXCEL_GEMV_PERSIST (0): 1..2-row GEMV in one CTA wave */
    int gemv_ksplit;               /* MLXCEL_GEMV_KSPLIT (0 = per shape): 1..2-row GEMV K split */
    int dense_gemv_rows;           /* MLXCEL_DENSE_GEMV_ROWS (2); 0 = cuBLASLt for all rows */
    int gemv_tc_rows;              /* MLXCEL_GEMV_TC_ROWS (8): tensor-core GEMV up to these rows */
    int gemv_split_rows;           /* MLXCEL_GEMV_TC_SPLIT_ROWS (8): ... on x as bf16 hi + lo */
    bool sdpa_deterministic;       /* MLXCEL_SDPA_DETERMINISTIC (0) */
    int cuda_graph_cache_size;     /* MLX_CUDA_GRAPH_CACHE_SIZE (2000) */
    int cuda_sdpa_cache_size;      /* MLX_CUDA_SDPA_CACHE_SIZE (2000) */
    int paged_decode_splits;       /* MLXCEL_PAGED_DECODE_SPLITS (0 = policy) */
    mx_cascade_mode cascade_attention; /* MLXCEL_CASCADE_ATTENTION: auto | 0 | 1 (auto) */
    int cascade_min_shared_keys;   /* MLXCEL_CASCADE_MIN_SHARED_KEYS (512): auto's floor */
    int qmv_multirow;              /* MLXCEL_QMV_MULTIROW (0 = policy) */
    bool qmv_tc;                   /* MLXCEL_QMV_TC (1): tensor-core qmv for 4/8-bit weights */
    bool qmv_bulk;                 /* MLXCEL_QMV_BULK (1): streaming tensor-core qmv (qmv_bulk.cu) */
    int qmv_bulk_min_rows;         /* MLXCEL_QMV_BULK_MIN_ROWS (2): fewest rows it takes */
    int qmv_mma;                   /* MLXCEL_QMV_MMA (1): most rows qmv_mma.cu takes (0: off) */
    int qmv_i8;                    /* MLXCEL_QMV_I8 (8): most rows of 4-bit qmv_i8.cu takes */
    int qmv_i8_q8;                 /* MLXCEL_QMV_I8_Q8 (0): the same for 8-bit (0: off) */
    bool qmv_i8_glu;               /* MLXCEL_QMV_I8_GLU (1): its prep computes a held GLU */
    bool qmv_i8_norm;              /* MLXCEL_QMV_I8_NORM (1): ... and a held RMSNorm */
    bool qmv_i8_inprep;            /* MLXCEL_QMV_I8_INPREP (1): one row: x prep in the qmv */
    bool qmv_tiled;                /* MLXCEL_QMV_TILED (1): CUDA repacks quantized weights */
    int qmm_tile_m;                /* MLXCEL_QMM_TILE_M (0 = policy) */
    bool tp_group;                 /* MLXCEL_TP_GROUP (0): --tp-size 1 as a TP group of one rank */
    mx_overlap_mode grammar_overlap; /* MLXCEL_GRAMMAR_OVERLAP: auto | 0 | 1 (auto: device backends) */
} mx_env_t;

/* ==== Value lists owned above base ====
 * MLXCEL_QMV_MULTIROW and MLXCEL_QMM_TILE_M take only the values the CUDA kernels can launch;
 * those lists belong to the CUDA backend (backend/cuda/cuda_knobs.c), which registers them
 * here, so base includes nothing of ours. The variables are still read here, once, like every
 * other: a value not in the list is reported on stderr and ignored (0 = the policy). Until its
 * list is registered a variable reads as 0, so nothing unchecked reaches a kernel; a list
 * registered after the first mx_env() re-reads its variable then. Registering a name again
 * does nothing. */
typedef struct mx_env_choices {
    const char *name;   /* MLXCEL_QMV_MULTIROW or MLXCEL_QMM_TILE_M */
    const int *values;  /* [n], the valid values (0 = policy is always accepted) */
    int n;
} mx_env_choices;
void mx_env_register_choices(const mx_env_choices *c);

/* Parsed on first call; thread-safe after that. Invalid values are reported once on stderr
 * and the default is kept. */
const mx_env_t *mx_env(void);
/* Re-reads the environment (tests). */
void mx_env_reload(void);

/* "12G", "512M", "1024" -> bytes. Returns 0 on success. */
int mx_parse_bytes(const char *s, uint64_t *out);

/* OpenMP wait policy default (docs/engine.md, "Threads"): when neither OMP_WAIT_POLICY nor
 * GOMP_SPINCOUNT is set, sets OMP_WAIT_POLICY=passive and re-executes the program
 * (/proc/self/exe, same argv and pid): libgomp reads these variables once, when it is loaded
 * before main, so setting them later has no effect. Spinning barriers made decode 10-30x
 * slower on a loaded machine. Returns (and the program goes on as it is) when a policy is
 * already set or the re-exec is impossible. Call first thing in main. */
void mx_env_apply_omp_defaults(char **argv);

#endif
