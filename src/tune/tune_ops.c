#include "tune/tune_ops.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_qknobs.h" /* plain C: the candidate values in every build */

/* ==== Ops ==== */
static const char *const k_op_names[TUNE_OP_COUNT] = {"paged-decode-splits", "qmm-tile",
                                                      "qmv-multirow"};

const char *tune_op_name(tune_op op) {
    return op >= 0 && op < TUNE_OP_COUNT ? k_op_names[op] : "?";
}

int tune_op_from_name(const char *name, tune_op *op) {
    for (int i = 0; i < TUNE_OP_COUNT; i++)
        if (!strcmp(name, k_op_names[i])) {
            *op = (tune_op)i;
            return 0;
        }
    return -1;
}

bool tune_op_supported(tune_op op, tune_device_kind dev) {
    /* CPU: only the decode attention split is a launch choice; the CPU quantized matmuls have
     * no tile/row-window knob. */
    return dev == TUNE_DEV_CUDA || op == TUNE_OP_PAGED_DECODE_SPLITS;
}

const char *tune_device_kind_name(tune_device_kind k) { return k == TUNE_DEV_CUDA ? "cuda" : "cpu"; }

/* ==== Devices ==== */
void tune_device_make_id(tune_device *d) {
    const unsigned long long gib = (d->mem_bytes + (1ull << 29)) >> 30; /* rounded GiB */
    if (d->kind == TUNE_DEV_CUDA)
        snprintf(d->id, sizeof d->id, "cuda:%s:sm%d%d:mem%lluG", d->name, d->cc_major, d->cc_minor,
                 gib);
    else
        snprintf(d->id, sizeof d->id, "cpu:%s:t%d:mem%lluG", d->name, d->threads, gib);
}

static void read_cpu_model(char *out, size_t n) {
    snprintf(out, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10)) continue;
        const char *v = strchr(line, ':');
        if (!v) break;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        snprintf(out, n, "%s", v);
        out[strcspn(out, "\n")] = 0;
        break;
    }
    fclose(f);
}

static uint64_t read_mem_total(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) break;
    fclose(f);
    return (uint64_t)kb << 10;
}

void tune_device_cpu(tune_device *d) {
    memset(d, 0, sizeof *d);
    d->kind = TUNE_DEV_CPU;
    read_cpu_model(d->name, sizeof d->name);
    d->threads = omp_get_max_threads();
    d->mem_bytes = read_mem_total();
    tune_device_make_id(d);
}

int tune_device_cuda(tune_device *d, mx_error *err) {
    memset(d, 0, sizeof *d);
    d->kind = TUNE_DEV_CUDA;
    mx_device_facts f;
    if (backend_device_facts(MX_DEV_CUDA, &f, err)) {
        snprintf(d->name, sizeof d->name, "unavailable");
        tune_device_make_id(d);
        return -1;
    }
    snprintf(d->name, sizeof d->name, "%.*s", (int)sizeof d->name - 1, f.name);
    d->cc_major = f.cc_major;
    d->cc_minor = f.cc_minor;
    d->threads = f.sm_count;
    d->mem_bytes = f.total_bytes;
    tune_device_make_id(d);
    return 0;
}

/* ==== Geometry ==== */
tune_geom tune_geom_defaults(void) {
    tune_geom g = {128, 32, 8, 16, 4096, 14336, 4, 64};
    return g;
}

int tune_geom_check(const tune_geom *g, mx_error *err) {
    if (g->head_dim < 1 || g->head_dim > 1024)
        return mx_fail(err, "head dim %d out of range [1, 1024]", g->head_dim);
    if (g->q_heads < 1 || g->q_heads > 1024)
        return mx_fail(err, "q heads %d out of range [1, 1024]", g->q_heads);
    if (g->kv_heads < 1 || g->kv_heads > g->q_heads || g->q_heads % g->kv_heads)
        return mx_fail(err, "kv heads %d must divide q heads %d", g->kv_heads, g->q_heads);
    if (g->block_size < 1 || g->block_size > 4096)
        return mx_fail(err, "block size %d out of range [1, 4096]", g->block_size);
    if (g->hidden < 1 || g->intermediate < 1)
        return mx_fail(err, "hidden %d / intermediate %d must be positive", g->hidden,
                       g->intermediate);
    if (g->q_bits < 2 || g->q_bits > 8 || g->q_group < 1)
        return mx_fail(err, "quantization bits %d (2..8) / group %d invalid", g->q_bits, g->q_group);
    return 0;
}

/* ==== Buckets ==== */
/* Nearest power of `base` (in log scale) within [lo, hi]. */
static int snap_log(int v, int base_log2, int lo, int hi) {
    if (v <= lo) return lo;
    if (v >= hi) return hi;
    const double e = log2((double)v) / base_log2;
    int p = (int)lround(e) * base_log2;
    int r = 1 << p;
    if (r < lo) r = lo;
    if (r > hi) r = hi;
    return r;
}

int tune_bucket_batch(int batch) { return snap_log(batch, 1, 1, 1024); }
int tune_bucket_context(int context) { return snap_log(context, 2, 256, 1 << 20); }

void tune_bucket_attn(char *buf, size_t n, int batch, int context, const tune_geom *g) {
    snprintf(buf, n, "b%d.c%d.d%d.q%d.kv%d.bs%d", tune_bucket_batch(batch),
             tune_bucket_context(context), g->head_dim, g->q_heads, g->kv_heads, g->block_size);
}

void tune_bucket_qmat(char *buf, size_t n, int rows, const tune_geom *g) {
    /* rows: decode batch (qmv) or prefill tokens (qmm); the weight is the MLP up projection
     * [intermediate, hidden], the largest matrix of a layer. */
    snprintf(buf, n, "m%d.n%d.k%d.q%dg%d", rows, g->intermediate, g->hidden, g->q_bits, g->q_group);
}

/* ==== Candidates ==== */
int tune_cpu_attn_pieces(int context) {
    const int c = context > 0 ? context : 1;
    return (c + TUNE_CPU_ATTN_PIECE - 1) / TUNE_CPU_ATTN_PIECE;
}

int tune_cpu_default_splits(int batch, int kv_heads, int n_pieces, int threads) {
    const int tasks = batch * kv_heads;
    const int s = tasks >= threads ? 1 : (threads + tasks - 1) / tasks;
    const int max_s = n_pieces > 1 ? n_pieces : 1;
    return s < max_s ? s : max_s;
}

int tune_cuda_default_splits(int batch, int kv_heads, int capacity_tokens, int sm_count) {
    const long ctas = (long)(batch > 0 ? batch : 1) * (kv_heads > 0 ? kv_heads : 1);
    const long sms = sm_count > 0 ? sm_count : TUNE_CUDA_DEFAULT_SMS;
    /* (sequence, kv head) pairs that alone fill every SM: no split (H200, 8B bf16, B=32:
     * 5,186 tok/s against 4,779 with the 2 splits below, which doubled the grid into a
     * second wave of CTAs and added the merge) */
    long S = ctas >= sms ? 1 : (2L * sms + ctas - 1) / ctas;
    const long max_chunks = ((long)(capacity_tokens > 0 ? capacity_tokens : 1) + 15) / 16;
    if (S > max_chunks / 4) S = max_chunks / 4;
    if (S < 1) S = 1;
    return S > TUNE_CUDA_MAX_SPLITS ? TUNE_CUDA_MAX_SPLITS : (int)S;
}

int tune_cuda_capacity_tokens(int context, int block_size) {
    const int bs = block_size > 0 ? block_size : 1;
    const long blocks = ((long)(context > 0 ? context : 1) + bs - 1) / bs;
    long cap = 1;
    while (cap < blocks) cap *= 2;
    const long t = cap * bs;
    return t > (1L << 30) ? 1 << 30 : (int)t;
}

int tune_cuda_context_of_capacity(int capacity_tokens) {
    const int c = capacity_tokens > 0 ? capacity_tokens : 1;
    return c - c / 4;
}

int tune_cuda_max_splits(int context) {
    const int m = context / 64; /* 16-token chunks / 4 warps */
    return m < 1 ? 1 : m > TUNE_CUDA_MAX_SPLITS ? TUNE_CUDA_MAX_SPLITS : m;
}

_Static_assert(CUDA_QMV_MULTIROW_COUNT + 1 <= TUNE_MAX_CANDIDATES &&
                   CUDA_QMM_TILE_COUNT + 1 <= TUNE_MAX_CANDIDATES,
               "the quantized knobs' candidates (auto + every value) fit a tune_point");

static void add_unique(tune_point *p, int v) {
    for (int i = 0; i < p->n_cand; i++)
        if (p->cand[i] == v) return;
    if (p->n_cand < TUNE_MAX_CANDIDATES) p->cand[p->n_cand++] = v;
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

int tune_point_make(tune_op op, const tune_device *dev, const tune_geom *g, int batch, int context,
                    tune_point *p, mx_error *err) {
    memset(p, 0, sizeof *p);
    p->op = op;
    if (!tune_op_supported(op, dev->kind))
        return mx_fail(err, "%s is not tunable on %s", tune_op_name(op),
                       tune_device_kind_name(dev->kind));
    if (batch < 1) return mx_fail(err, "batch size %d must be positive", batch);
    switch (op) {
    case TUNE_OP_PAGED_DECODE_SPLITS: {
        if (context < 1) return mx_fail(err, "context length %d must be positive", context);
        p->batch = tune_bucket_batch(batch);
        p->context = tune_bucket_context(context);
        tune_bucket_attn(p->bucket, sizeof p->bucket, p->batch, p->context, g);
        if (dev->kind == TUNE_DEV_CUDA) {
            /* the split-K kernel's shapes; the engine sends other ones to the tiled kernel */
            const int G = g->q_heads / g->kv_heads;
            if ((g->head_dim != 64 && g->head_dim != 128) || (G != 1 && G != 2 && G != 4 && G != 8) ||
                g->block_size % 16)
                return mx_fail(err, "paged-decode-splits on cuda needs head_dim 64 or 128, q heads "
                                    "/ kv heads in {1, 2, 4, 8} and a block size multiple of 16 "
                                    "(got head_dim %d, %d / %d heads, block %d)", g->head_dim,
                               g->q_heads, g->kv_heads, g->block_size);
            /* what cu_decode_splits() picks for a step of this length on this device */
            p->default_value = tune_cuda_default_splits(
                p->batch, g->kv_heads, tune_cuda_capacity_tokens(p->context, g->block_size),
                dev->threads);
            add_unique(p, p->default_value);
            for (int s = 1; s <= tune_cuda_max_splits(p->context); s *= 2) add_unique(p, s);
        } else {
            /* a split is a run of whole pieces: more splits than pieces run the same tasks */
            const int n_pieces = tune_cpu_attn_pieces(p->context);
            p->default_value = tune_cpu_default_splits(p->batch, g->kv_heads, n_pieces,
                                                       dev->threads);
            add_unique(p, p->default_value);
            for (int s = 1; s <= 64 && s <= n_pieces; s *= 2) add_unique(p, s);
        }
        break;
    }
    case TUNE_OP_QMV_MULTIROW: {
        p->batch = tune_bucket_batch(batch);
        tune_bucket_qmat(p->bucket, sizeof p->bucket, p->batch, g);
        /* 0 = the kernel's own policy; then its row windows up to the first that holds all
         * rows in one pass (a wider window only adds padded rows) */
        p->default_value = 0;
        add_unique(p, 0);
        static const int k_mr[CUDA_QMV_MULTIROW_COUNT] = CUDA_QMV_MULTIROW_VALUES;
        for (int i = 0; i < CUDA_QMV_MULTIROW_COUNT; i++) {
            add_unique(p, k_mr[i]);
            if (k_mr[i] >= p->batch) break;
        }
        break;
    }
    case TUNE_OP_QMM_TILE: {
        /* The prefill GEMM's M is the chunk's token count: the context axis. */
        if (context < 1) return mx_fail(err, "context length %d must be positive", context);
        p->context = tune_bucket_context(context);
        tune_bucket_qmat(p->bucket, sizeof p->bucket, p->context, g);
        /* 0 = the kernel's own policy; then its slab sizes up to the first that covers the
         * whole weight (N rows) in one slab: larger ones launch the same work */
        p->default_value = 0;
        add_unique(p, 0);
        static const int k_tile[CUDA_QMM_TILE_COUNT] = CUDA_QMM_TILE_VALUES;
        for (int i = 0; i < CUDA_QMM_TILE_COUNT; i++) {
            add_unique(p, k_tile[i]);
            if (k_tile[i] >= g->intermediate) break;
        }
        break;
    }
    default:
        return mx_fail(err, "unknown op %d", (int)op);
    }
    qsort(p->cand, (size_t)p->n_cand, sizeof p->cand[0], cmp_int);
    return 0;
}

int tune_matrix_build(tune_op op, const tune_device *dev, const tune_geom *g, const int *batches,
                      int n_batches, const int *contexts, int n_contexts, tune_point *out, int cap,
                      int *n, mx_error *err) {
    *n = 0;
    if (tune_geom_check(g, err)) return -1;
    /* qmv has no context axis, qmm no batch axis: iterate the other once. */
    const bool use_b = op != TUNE_OP_QMM_TILE, use_c = op != TUNE_OP_QMV_MULTIROW;
    const int nb = use_b ? n_batches : 1, nc = use_c ? n_contexts : 1;
    for (int bi = 0; bi < nb; bi++) {
        for (int ci = 0; ci < nc; ci++) {
            tune_point p;
            if (tune_point_make(op, dev, g, use_b ? batches[bi] : 1, use_c ? contexts[ci] : 0, &p,
                                err))
                return -1;
            bool dup = false;
            for (int i = 0; i < *n; i++)
                if (!strcmp(out[i].bucket, p.bucket)) dup = true;
            if (dup) continue;
            if (*n >= cap) return mx_fail(err, "matrix larger than %d points", cap);
            out[(*n)++] = p;
        }
    }
    return 0;
}

const char *tune_value_str(int v, char buf[16]) {
    if (v == 0) return "auto";
    snprintf(buf, 16, "%d", v);
    return buf;
}
