/* Step arena, KV write, attention dispatch and CUDA graphs of the CUDA backend.
 *
 * Step arena: at step_begin the step's host arrays (tokens, positions, sequence rows, KV write
 * rows, output rows, page table, attention tiles) are packed into a pinned buffer and copied
 * in ONE cudaMemcpyAsync to a device arena at fixed offsets; every op of the step reads them
 * there. Two pinned buffers alternate, each guarded by an event, so packing step i+1 never
 * overwrites bytes step i's copy has not sent yet. The page table is repacked to a stride
 * (table_cap) that only grows, in powers of two, so a decode step's addresses and shapes are
 * a function of its batch size alone.
 *
 * Graphs: a pure decode step (every row its sequence's only row, all rows sampled) of batch B
 * is keyed by (B, table_cap, arena generation). First sighting: run eagerly (it grows every
 * scratch buffer, materialises lazy weights, builds MoE tables); second: captured with
 * cudaStreamBeginCapture over the whole op sequence, instantiated and launched; after that:
 * replayed with one cudaGraphLaunch. Host inputs reach the graph through the arena copy,
 * which stays outside the graph. Freeing or moving any device buffer clears the cache. The
 * cache holds at most MLX_CUDA_GRAPH_CACHE_SIZE entries (least recently used evicted).
 *
 * Attention: pure decode steps use the split-K paged kernel (head_dim 64/128, G <= 8); its
 * split count depends only on (B, kv heads, table capacity), or is fixed
 * (MLXCEL_PAGED_DECODE_SPLITS, or CUDA_ATTN_DET_SPLITS under MLXCEL_SDPA_DETERMINISTIC=1), so
 * eager and replayed runs of a step compute the same bits. Everything else goes to the tiled
 * kernels (cuda_attn_flash on tensor cores, cuda_attn_rows).
 *
 * KV cache types: the fast paths (GEMV / qmv epilogues writing rotated k and v, the split-K
 * decode kernel) take bf16 pools (the default; f32 too for the writes). Pools of the other
 * types (f16, q8_0, q4_0, TurboQuant) are written by cuda_kv_write_fmt with the CPU's bits
 * and decoded on load by the readers: prefill on tensor cores (f16 on f16 MMAs, exact; the
 * others rounded to bf16 in the tile, as a bf16 cache holds them), decode rows by the split-K
 * kernel (q8_0 / q4_0 / f16 on its tensor-core walk, the rest on its CUDA-core walk in fp32;
 * attn_decode.cu), or, for shapes it does not take, the tiled kernel with the keys split over
 * the GPU (cuda_attn_rows splits). TurboQuant keys are read in their rotated space, so the
 * query is rotated first; TurboQuant values give a rotated output, rotated back after. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_be.h"
#include "backend/cuda/cuda_elem.h"
#include "backend/cuda/cuda_ops.h"
#include "base/clock.h"
#include "base/env.h"
#include "base/log.h"
#include "backend/kvfmt/kv_quant.h"
#include "backend/kvfmt/kv_turbo.h"
#include "tune/tune_policy.h"

static size_t al256(size_t n) { return (n + 255) & ~(size_t)255; }

/* ==== Graph cache ==== */
void cu_graphs_clear(void) {
    for (int i = 0; i < g_cu.n_graphs; i++)
        if (g_cu.graphs[i].exec) cudaGraphExecDestroy(g_cu.graphs[i].exec);
    g_cu.n_graphs = 0;
}

static cu_graph *graph_find(uint64_t key) {
    for (int i = 0; i < g_cu.n_graphs; i++)
        if (g_cu.graphs[i].key == key) return &g_cu.graphs[i];
    return NULL;
}

static cu_graph *graph_insert(uint64_t key) {
    if (g_cu.graph_cache <= 0) return NULL;
    if (!g_cu.graphs) {
        g_cu.graphs = calloc((size_t)g_cu.graph_cache, sizeof *g_cu.graphs);
        if (!g_cu.graphs) return NULL;
    }
    if (g_cu.n_graphs == g_cu.graph_cache) { /* evict the least recently used */
        int lru = 0;
        for (int i = 1; i < g_cu.n_graphs; i++)
            if (g_cu.graphs[i].last_use < g_cu.graphs[lru].last_use) lru = i;
        if (g_cu.graphs[lru].exec) cudaGraphExecDestroy(g_cu.graphs[lru].exec);
        g_cu.graphs[lru] = g_cu.graphs[--g_cu.n_graphs];
    }
    cu_graph *g = &g_cu.graphs[g_cu.n_graphs++];
    memset(g, 0, sizeof *g);
    g->key = key;
    g->last_use = ++g_cu.use_clock;
    return g;
}

/* ==== Attention tiles: runs of one sequence's rows, up to 32 / G rows each ==== */
static int build_tiles(int32_t *row0, int32_t *cnt, const mx_attn_batch *ab, int tile_rows) {
    int nt = 0;
    for (int i = 0; i < ab->n_rows; i++) {
        if (nt > 0 && ab->seq[i] == ab->seq[row0[nt - 1]] && cnt[nt - 1] < tile_rows) {
            cnt[nt - 1]++;
        } else {
            row0[nt] = i;
            cnt[nt++] = 1;
        }
    }
    return nt;
}

/* ==== Step begin: pack + upload the step arrays; pick run / capture / replay ==== */
int cu_step_begin(const mx_step *st, mx_error *err) {
    cu_flush();
    if (g_cu.has_err) {
        g_cu.has_err = false;
        return mx_fail(err, "%s", g_cu.err);
    }
    const mx_attn_batch *ab = st->ab;
    const int n = ab->n_rows, n_out = st->n_out, n_seqs = st->n_seqs > 0 ? st->n_seqs : 1;
    if (ab->table_stride > g_cu.table_cap) {
        int cap = g_cu.table_cap ? g_cu.table_cap : 1;
        while (cap < ab->table_stride) cap *= 2;
        g_cu.table_cap = cap;
        cu_graphs_clear();
    }
    const int tile_rows = g_cu.hint_tile_rows > 0 ? g_cu.hint_tile_rows : 1;
    /* arena layout: [tokens n][pos n][seq n][out n_out][table n_seqs x cap][tile0 n][tilen n]
     * [write_rows n] (int64 last), each 256-aligned */
    const size_t o_tok = 0, o_pos = o_tok + al256((size_t)n * 4), o_seq = o_pos + al256((size_t)n * 4);
    const size_t o_out = o_seq + al256((size_t)n * 4);
    const size_t o_tab = o_out + al256((size_t)(n_out > 0 ? n_out : 1) * 4);
    const size_t o_t0 = o_tab + al256((size_t)n_seqs * g_cu.table_cap * 4);
    const size_t o_tn = o_t0 + al256((size_t)n * 4), o_wr = o_tn + al256((size_t)n * 4);
    const size_t total = o_wr + al256((size_t)n * 8);
    /* host side: two alternating pinned buffers */
    if (total > g_cu.arena_hcap) {
        for (int i = 0; i < 2; i++) {
            if (g_cu.arena_busy[i]) cudaEventSynchronize(g_cu.arena_ev[i]);
            g_cu.arena_busy[i] = false;
            if (g_cu.arena_h[i]) cudaFreeHost(g_cu.arena_h[i]);
            g_cu.arena_h[i] = NULL;
        }
        size_t cap = 1 << 16;
        while (cap < total) cap *= 2;
        for (int i = 0; i < 2; i++)
            if (cudaHostAlloc(&g_cu.arena_h[i], cap, cudaHostAllocDefault) != cudaSuccess) {
                cudaGetLastError();
                g_cu.arena_hcap = 0;
                return mx_fail(err, "CUDA: cannot allocate %zu KiB of pinned memory", cap >> 10);
            }
        g_cu.arena_hcap = cap;
    }
    if (total > g_cu.arena_dcap) {
        size_t cap = 1 << 16;
        while (cap < total) cap *= 2;
        if (g_cu.arena_d) {
            cu_graphs_clear();
            cu_dev_free(g_cu.arena_d);
        }
        g_cu.arena_d = cu_dev_alloc(cap);
        g_cu.arena_dcap = g_cu.arena_d ? cap : 0;
        g_cu.arena_gen++;
        if (!g_cu.arena_d) return mx_fail(err, "CUDA: out of GPU memory for the step arena");
    }
    const int ai = g_cu.arena_i;
    g_cu.arena_i ^= 1;
    if (g_cu.arena_busy[ai] && cudaEventSynchronize(g_cu.arena_ev[ai]) != cudaSuccess)
        return mx_fail(err, "CUDA: %s", cudaGetErrorString(cudaGetLastError()));
    char *h = g_cu.arena_h[ai];
    memcpy(h + o_tok, st->tokens, (size_t)n * 4);
    memcpy(h + o_pos, ab->pos, (size_t)n * 4);
    memcpy(h + o_seq, ab->seq, (size_t)n * 4);
    if (n_out > 0) memcpy(h + o_out, st->out_rows, (size_t)n_out * 4);
    int32_t *tab = (int32_t *)(h + o_tab);
    memset(tab, 0, (size_t)n_seqs * g_cu.table_cap * 4);
    for (int s = 0; s < n_seqs && ab->block_table; s++)
        memcpy(tab + (size_t)s * g_cu.table_cap, ab->block_table + (size_t)s * ab->table_stride,
               (size_t)ab->table_stride * 4);
    g_cu.n_tiles = build_tiles((int32_t *)(h + o_t0), (int32_t *)(h + o_tn), ab, tile_rows);
    g_cu.tile_rows = tile_rows;
    memcpy(h + o_wr, ab->write_rows, (size_t)n * 8);
    if (cudaMemcpyAsync(g_cu.arena_d, h, total, cudaMemcpyHostToDevice, g_cu.st) != cudaSuccess ||
        cudaEventRecord(g_cu.arena_ev[ai], g_cu.st) != cudaSuccess)
        return mx_fail(err, "CUDA: step upload: %s", cudaGetErrorString(cudaGetLastError()));
    g_cu.arena_busy[ai] = true;
    char *d = g_cu.arena_d;
    g_cu.d_tokens = (int32_t *)(d + o_tok);
    g_cu.d_pos = (int32_t *)(d + o_pos);
    g_cu.d_seq = (int32_t *)(d + o_seq);
    g_cu.d_out = (int32_t *)(d + o_out);
    g_cu.d_table = (int32_t *)(d + o_tab);
    g_cu.d_tile0 = (int32_t *)(d + o_t0);
    g_cu.d_tilen = (int32_t *)(d + o_tn);
    g_cu.d_write = (int64_t *)(d + o_wr);
    g_cu.ab = ab;
    g_cu.h_tokens = st->tokens;
    g_cu.h_out = st->out_rows;
    g_cu.n_rows = n;
    g_cu.n_out = n_out;
    g_cu.n_seqs = n_seqs;
    g_cu.decode_only = st->decode_only;
    g_cu.step_id = ab->step_id;
    g_cu.in_step = true;

    /* ---- graphs: pure decode steps only ---- */
    const int graph_rows = g_cu.hint_moe ? CU_MOE_PAIR_MAX_ROWS : CU_GRAPH_MAX_ROWS;
    if (g_cu.graph_cache <= 0 || !st->decode_only || n > graph_rows) return MX_STEP_RUN;
    const uint64_t key = ((uint64_t)n << 40) ^ ((uint64_t)g_cu.table_cap << 20) ^ g_cu.arena_gen;
    cu_graph *g = graph_find(key);
    if (!g) { /* first sighting: eager run sizes every scratch buffer */
        graph_insert(key);
        return MX_STEP_RUN;
    }
    g->last_use = ++g_cu.use_clock;
    if (g->exec) {
        if (cudaGraphLaunch(g->exec, g_cu.st) != cudaSuccess)
            return mx_fail(err, "CUDA: graph launch: %s", cudaGetErrorString(cudaGetLastError()));
        g_cu.graphs_replayed++;
        return MX_STEP_REPLAYED;
    }
    cu_resident_all(); /* lazy weights must not be copied inside the graph */
    if (cudaStreamBeginCapture(g_cu.st, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        cudaGetLastError(); /* capture refused: run eagerly */
        return MX_STEP_RUN;
    }
    g_cu.capturing = true;
    g_cu.cap_key = key;
    return MX_STEP_RUN;
}

int cu_step_end(mx_error *err) {
    cu_flush();
    g_cu.in_step = false;
    int rc = 0;
    if (g_cu.capturing) {
        cudaGraph_t graph = NULL;
        const cudaError_t e = cudaStreamEndCapture(g_cu.st, &graph);
        g_cu.capturing = false;
        cu_graph *g = graph_find(g_cu.cap_key);
        cudaGraphExec_t exec = NULL;
        if (e != cudaSuccess || g_cu.has_err || !graph ||
            cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
            cu_fail("CUDA graph capture of a decode step failed: %s",
                    cudaGetErrorString(e != cudaSuccess ? e : cudaGetLastError()));
            rc = -1;
        } else if (cudaGraphLaunch(exec, g_cu.st) != cudaSuccess) {
            cu_fail("CUDA: graph launch: %s", cudaGetErrorString(cudaGetLastError()));
            cudaGraphExecDestroy(exec);
            rc = -1;
        } else if (g) {
            g->exec = exec;
            g_cu.graphs_captured++;
        } else {
            cudaGraphExecDestroy(exec); /* evicted meanwhile: nothing keeps it */
        }
        if (graph) cudaGraphDestroy(graph);
    }
    if (g_cu.profile && g_cu.lazy && !g_cu.ttft_printed) {
        g_cu.ttft_printed = true;
        fprintf(stderr, "[TTFT] first step: %.3f GB of weights uploaded lazily in %.3f s (%.2f GB/s)\n",
                g_cu.lazy_bytes_done / 1e9, g_cu.lazy_seconds,
                g_cu.lazy_seconds > 0 ? g_cu.lazy_bytes_done / 1e9 / g_cu.lazy_seconds : 0.0);
    }
    if (rc && err) {
        g_cu.has_err = false;
        return mx_fail(err, "%s", g_cu.err);
    }
    return rc;
}

/* ==== KV write ==== */
/* The step's arrays live in the arena; anything else is uploaded (eager only). */
static const void *step_array(const void *host, const void *h_step, const void *d_step,
                              size_t nbytes) {
    if (g_cu.in_step && host == h_step) return d_step;
    if (cu_ensure(&g_cu.ids_buf, &g_cu.ids_cap, nbytes)) return NULL;
    return cu_upload_small(g_cu.ids_buf, host, nbytes);
}

/* Whether a held q/k/v matmul group's outputs (y0, y1, y2 of row strides N[3], `rows` rows)
 * are the held rope(q), rope(k) and this write's k and v, with all of head_dim rotated. */
static bool rope_targets(const void *y0, const void *y1, const void *y2, const int N[3],
                         int rows, const mx_tensor *k, const mx_tensor *v,
                         const mx_attn_batch *b) {
    const int D = g_cu.pend_rope.D;
    return g_cu.pend_rope.count == 2 && rows == b->n_rows && g_cu.pend_rope.rot == D &&
           y0 == g_cu.pend_rope.x[0] && y1 == k->data && y2 == v->data &&
           g_cu.pend_rope.stride[0] == N[0] && k->stride[0] == N[1] && v->stride[0] == N[2] &&
           g_cu.pend_rope.heads[0] * D == N[0] && (int)k->shape[1] * D == N[1] && N[2] == N[1];
}

/* MLXCEL_GEMV_ROPE: the held q/k/v GEMV (<= g_cu.gemv_rope rows, no biases, nothing else fused
 * into its epilogue) with rope_targets can rotate and write the KV pools itself
 * (cuda_gemv_fuse.rope_cs). */
static bool rope_in_gemv(const mx_tensor *k, const mx_tensor *v, const mx_attn_batch *b) {
    const cuda_gemv_segs *s = &g_cu.pend_mm.segs;
    return s->n == 3 && g_cu.pend_mm.rows <= g_cu.gemv_rope && g_cu.pend_rope.D % 8 == 0 &&
           rope_targets(s->y[0], s->y[1], s->y[2], s->N, g_cu.pend_mm.rows, k, v, b) &&
           !g_cu.pend_mm.bias[0] && !g_cu.pend_mm.bias[1] && !g_cu.pend_mm.bias[2] &&
           !g_cu.pend_mm.fuse.res && !g_cu.pend_mm.fuse.glu;
}

/* The same for a held one-row qmv_i8 group, outputs contiguous (cu_q_take_rope checks the
 * kernel's rules). */
static bool rope_in_qmv(const mx_tensor *k, const mx_tensor *v, const mx_attn_batch *b) {
    const cuda_qmv_args *a = &g_cu.pend_q.a;
    return a->n_segs == 3 && a->rows == 1 && a->ldy[0] == a->N[0] && a->ldy[1] == a->N[1] &&
           a->ldy[2] == a->N[2] &&
           rope_targets(a->y[0], a->y[1], a->y[2], a->N, a->rows, k, v, b) &&
           !g_cu.pend_q.bias[0] && !g_cu.pend_q.bias[1] && !g_cu.pend_q.bias[2];
}

/* The held GEMV group (rope_in_gemv) takes the rotation and the KV write. */
static bool gemv_take_rope(const int64_t *rows, const mx_tensor *k_pool,
                           const mx_tensor *v_pool) {
    cuda_gemv_fuse *f = &g_cu.pend_mm.fuse;
    f->rope_cs = g_cu.pend_rope.cs;
    f->rope_rows = rows;
    f->k_pool = k_pool->data;
    f->v_pool = v_pool->data;
    f->pool_bf16 = k_pool->dtype == MX_BF16;
    f->head_dim = g_cu.pend_rope.D;
    return true;
}

/* The device format of a KV pool dtype (TurboQuant: with its codebook); -1 if none. */
static int kv_fmt_of(mx_dtype t, cuda_kv_fmt *f) {
    static const struct { mx_dtype t; int type; } k_map[] = {
        {MX_F32, CUDA_KV_F32}, {MX_BF16, CUDA_KV_BF16}, {MX_F16, CUDA_KV_F16},
        {MX_Q8_0, CUDA_KV_Q8_0}, {MX_Q4_0, CUDA_KV_Q4_0}, {MX_TQ2, CUDA_KV_TQ2},
        {MX_TQ3, CUDA_KV_TQ3}, {MX_TQ4, CUDA_KV_TQ4}};
    memset(f, 0, sizeof *f);
    for (size_t i = 0; i < sizeof k_map / sizeof k_map[0]; i++)
        if (k_map[i].t == t) {
            f->type = k_map[i].type;
            const int bits = kvq_turbo_bits(t);
            if (bits) {
                memcpy(f->code, kv_turbo_codebook(bits), sizeof(float) << bits);
                memcpy(f->bound, kv_turbo_bounds(bits), sizeof(float) * ((1u << bits) - 1));
            }
            return 0;
        }
    return -1;
}

/* Pools the fused writes and the split-K decode kernel take: both bf16 (or both f32 for the
 * writes). */
static bool pools_plain(const mx_tensor *k_pool, const mx_tensor *v_pool) {
    return k_pool->dtype == v_pool->dtype && (k_pool->dtype == MX_BF16 || k_pool->dtype == MX_F32);
}

void cu_kv_write(mx_tensor *k_pool, mx_tensor *v_pool, const mx_tensor *k, const mx_tensor *v,
                 const mx_attn_batch *b) {
    const int nr = g_cu.pend_rope.count;
    const bool fuse = nr > 0 && g_cu.pend_rope.x[nr - 1] == k->data && g_cu.pend_rope.n == b->n_rows &&
                      g_cu.pend_rope.D == (int)k->shape[2] && g_cu.pend_rope.heads[nr - 1] == (int)k->shape[1] &&
                      (nr == 1 || g_cu.pend_rope.x[0] != v->data);
    const bool plain = pools_plain(k_pool, v_pool);
    const bool in_gemv = plain && fuse && rope_in_gemv(k, v, b);
    if (in_gemv || (plain && fuse && rope_in_qmv(k, v, b))) {
        const int64_t *rows = step_array(b->write_rows, g_cu.ab ? g_cu.ab->write_rows : NULL,
                                         g_cu.d_write, (size_t)b->n_rows * 8);
        /* without rows the plain path below reports it */
        if (rows && (in_gemv ? gemv_take_rope(rows, k_pool, v_pool)
                             : cu_q_take_rope(g_cu.pend_rope.cs, rows, k_pool->data,
                                              v_pool->data, k_pool->dtype == MX_BF16,
                                              g_cu.pend_rope.D))) {
            g_cu.pend_rope.count = 0;
            cu_flush_mm();
            return;
        }
    }
    if (!fuse) cu_flush();
    else cu_flush_mm();
    const int64_t *rows = step_array(b->write_rows, g_cu.ab ? g_cu.ab->write_rows : NULL,
                                     g_cu.d_write, (size_t)b->n_rows * 8);
    if (!rows) {
        g_cu.pend_rope.count = 0;
        return;
    }
    if (fuse) { /* rope(q), rope(k) and (plain pools) this write: one launch */
        g_cu.pend_rope.count = 0;
        if (mx_env()->diag_skip & MX_SKIP_ROPE) return; /* timing diagnostics: output wrong */
        if (cu_ck(cuda_rope_kv_f32(nr == 2 ? g_cu.pend_rope.x[0] : NULL, nr == 2 ? g_cu.pend_rope.stride[0] : 0,
                                   k->data, (long)k->stride[0], v->data, (long)v->stride[0],
                                   g_cu.pend_rope.cs, b->n_rows, nr == 2 ? g_cu.pend_rope.heads[0] : 0,
                                   (int)k->shape[1], (int)k->shape[2], g_cu.pend_rope.rot, rows,
                                   plain ? k_pool->data : NULL, plain ? v_pool->data : NULL,
                                   k_pool->dtype == MX_BF16, g_cu.st),
                  "rope + kv_write") || plain)
            return;
    }
    if (plain) {
        const int width = (int)(k->shape[1] * k->shape[2]);
        cu_ck(cuda_kv_write(k_pool->data, v_pool->data, k_pool->dtype == MX_BF16, k->data,
                            (long)k->stride[0], v->data, (long)v->stride[0], rows, b->n_rows,
                            width, g_cu.st),
              "kv_write");
        return;
    }
    cuda_kv_fmt kf, vf;
    if (kv_fmt_of(k_pool->dtype, &kf) || kv_fmt_of(v_pool->dtype, &vf)) {
        cu_fail("kv_write: a %s / %s KV pool is not a CUDA cache type", mx_dtype_name(k_pool->dtype),
                mx_dtype_name(v_pool->dtype));
        return;
    }
    cu_ck(cuda_kv_write_fmt(k_pool->data, &kf, v_pool->data, &vf, k->data, (long)k->stride[0],
                            v->data, (long)v->stride[0], rows, b->n_rows, (int)k->shape[1],
                            (int)k->shape[2], g_cu.st),
          "kv_write");
}

/* ==== Attention ==== */
int cu_decode_splits(int B, int n_q_heads, int n_kv_heads, int head_dim, int block_size,
                     int capacity_tokens) {
    if (g_cu.forced_splits > 0) return g_cu.forced_splits;
    if (g_cu.deterministic) return CUDA_ATTN_DET_SPLITS;
    if (mx_env()->autotune == MX_AUTOTUNE_OFF) /* no file access, no device query */
        return tune_cuda_default_splits(B, n_kv_heads, capacity_tokens, g_cu.facts.sm_count);
    for (int i = 0; i < g_cu.n_split_memo; i++) {
        const cu_split_memo *m = &g_cu.split_memo[i];
        if (m->B == B && m->Hq == n_q_heads && m->Hkv == n_kv_heads && m->D == head_dim &&
            m->bs == block_size && m->cap == capacity_tokens)
            return m->S;
    }
    if (!g_cu.tune_dev_ok) {
        mx_error err;
        if (tune_device_cuda(&g_cu.tune_dev, &err)) LOG_WARN("autotune: %s", err.msg);
        g_cu.tune_dev.threads = g_cu.facts.sm_count; /* the default's SM count either way */
        g_cu.tune_dev_ok = true;
    }
    int S;
    tune_source src = TUNE_SRC_DEFAULT;
    if (g_cu.capturing) {
        /* Cannot happen: a graph key's first step runs eagerly and resolves every shape it
         * uses. Tuning here would launch and synchronise inside the capture, so take the
         * built-in count (unmemoised: an eager step resolves it properly later). */
        if (!g_cu.warned_capture_tune) {
            g_cu.warned_capture_tune = true;
            LOG_WARN("autotune: decode split count first needed inside a graph capture (B %d, "
                     "capacity %d); using the built-in count", B, capacity_tokens);
        }
        return tune_cuda_default_splits(B, n_kv_heads, capacity_tokens, g_cu.facts.sm_count);
    }
    if (mx_env()->autotune == MX_AUTOTUNE_ON) {
        /* tuning on first use may run now: let the step's queued work finish so the timings
         * see a quiet device (this is an eager step; replays never get here) */
        cudaStreamSynchronize(g_cu.st);
    }
    S = tune_cuda_paged_decode_splits(B, n_q_heads, n_kv_heads, head_dim, block_size,
                                      capacity_tokens, &g_cu.tune_dev, &src);
    if (g_cu.n_split_memo == CU_SPLIT_MEMO) { /* many shapes: forget the oldest */
        memmove(g_cu.split_memo, g_cu.split_memo + 1, (CU_SPLIT_MEMO - 1) * sizeof g_cu.split_memo[0]);
        g_cu.n_split_memo--;
    }
    g_cu.split_memo[g_cu.n_split_memo++] =
        (cu_split_memo){B, n_q_heads, n_kv_heads, head_dim, block_size, capacity_tokens, S};
    LOG_DEBUG("decode splits: B %d capacity %d -> %d (%s)", B, capacity_tokens, S,
              tune_source_name(src));
    return S;
}

void cu_attention(mx_tensor *out, const mx_tensor *q, const mx_tensor *k_pool,
                  const mx_tensor *v_pool, const mx_attn_batch *b, const mx_attn_params *p) {
    cu_flush();
    if (!g_cu.in_step || b != g_cu.ab) {
        cu_fail("internal: attention outside the announced step");
        return;
    }
    const int G = p->n_heads / p->n_kv_heads, D = p->head_dim;
    g_cu.hint_Hq = p->n_heads;
    g_cu.hint_D = D;
    const bool pool_bf16 = k_pool->dtype == MX_BF16 && v_pool->dtype == MX_BF16;
    cuda_kv_fmt kf, vf;
    if (kv_fmt_of(k_pool->dtype, &kf) || kv_fmt_of(v_pool->dtype, &vf)) {
        cu_fail("attention: a %s / %s KV pool is not a CUDA cache type",
                mx_dtype_name(k_pool->dtype), mx_dtype_name(v_pool->dtype));
        return;
    }
    const int n = b->n_rows, qw = p->n_heads * D;
    const float *qd = q->data;
    if (kvq_turbo_bits(k_pool->dtype)) { /* <q, R^T y> = <R q, y> */
        if (cu_ensure(&g_cu.kvq_q, &g_cu.kvq_q_cap, (size_t)n * qw * sizeof(float)) ||
            cu_ck(cuda_kv_rotate(g_cu.kvq_q, qw, q->data, qw, n, p->n_heads, D, 0, g_cu.st),
                  "rotate q (TurboQuant K)"))
            return;
        qd = g_cu.kvq_q;
    }
    /* a weighted sum of rotated values: R^T once, after */
    const bool v_rot = kvq_turbo_bits(v_pool->dtype) > 0;
    const bool fast = g_cu.decode_only && (D == 64 || D == 128) &&
                      (G == 1 || G == 2 || G == 4 || G == 8) && b->block_size % 16 == 0;
    if (fast) {
        const int cap_tokens = g_cu.table_cap * b->block_size;
        const int S = cu_decode_splits(b->n_rows, p->n_heads, p->n_kv_heads, D, b->block_size,
                                       cap_tokens);
        const size_t ws = cuda_paged_attn_workspace_bytes(b->n_rows, p->n_heads, D, S);
        if (S > 1 && (cu_ensure(&g_cu.attn_ws, &g_cu.attn_ws_cap, ws) ||
                      cu_ensure(&g_cu.attn_cnt, &g_cu.attn_cnt_cap,
                                (size_t)b->n_rows * p->n_kv_heads * sizeof(int))))
            return;
        cuda_paged_attn_args a = {0};
        a.q = qd;
        a.q_f32 = 1;
        a.kf = kf;
        a.vf = vf;
        a.k_cache = k_pool->data;
        a.v_cache = v_pool->data;
        a.page_table = g_cu.d_table;
        a.pos = g_cu.d_pos;
        a.row_seq = g_cu.d_seq;
        a.o = out->data;
        a.o_dtype = CUDA_OPS_F32;
        a.workspace = g_cu.attn_ws;
        a.workspace_bytes = g_cu.attn_ws_cap;
        a.split_counters = (int *)g_cu.attn_cnt;
        a.B = b->n_rows;
        a.n_q_heads = p->n_heads;
        a.n_kv_heads = p->n_kv_heads;
        a.head_dim = D;
        a.block_size = b->block_size;
        a.pt_stride = g_cu.table_cap;
        a.max_seq_len = cap_tokens;
        a.scale = p->scale;
        a.num_splits = S;
        a.window = p->window;
        a.chunk = p->chunk;
        a.softcap = p->softcap;
        a.kv_settled = cuda_attn_early_kv(); /* decode_only: one row a sequence */
        if (!(mx_env()->diag_skip & MX_SKIP_ATTN)) /* else timing diagnostics: output wrong */
            cu_ck(cuda_paged_decode_attn(&a, g_cu.st), "decode attention");
        for (int i = 0; i < mx_env()->diag_empty; i++) /* timing: what a boundary costs */
            cu_ck(cuda_empty_launch(cuda_sm_count(), g_cu.st), "empty launch");
        if (v_rot)
            cu_ck(cuda_kv_rotate(out->data, qw, out->data, qw, n, p->n_heads, D, 1, g_cu.st),
                  "rotate output (TurboQuant V)");
        return;
    }
    /* Decode rows the split-K kernel does not take, on other cache types: the CUDA-core
     * kernel with the keys split (the count from the table capacity, and under
     * MLXCEL_SDPA_DETERMINISTIC=1 from it alone, so a sequence's bits do not depend on the
     * batch). Otherwise tensor cores for head_dim 64/128 (f32 pools stay exact on the
     * CUDA-core kernel), the CUDA-core kernel for the rest. */
    const bool split_rows = g_cu.decode_only && !pool_bf16;
    const bool flash = !split_rows && k_pool->dtype != MX_F32 && v_pool->dtype != MX_F32 &&
                       (D == 64 || D == 128) && G <= CUDA_ATTN_FLASH_QV &&
                       ((uintptr_t)k_pool->data & 15) == 0 && ((uintptr_t)v_pool->data & 15) == 0;
    const int qv_max = flash ? CUDA_ATTN_FLASH_QV : CUDA_ATTN_ROWS_QV;
    const int tr = G >= qv_max ? 1 : qv_max / G;
    g_cu.hint_tile_rows = tr;
    if (tr != g_cu.tile_rows) { /* tiles were cut for another shape: recut and upload (eager) */
        int32_t *t = malloc((size_t)b->n_rows * 8);
        if (!t) {
            cu_fail("out of memory");
            return;
        }
        g_cu.n_tiles = build_tiles(t, t + b->n_rows, b, tr);
        g_cu.tile_rows = tr;
        /* both halves fit where the step put them (n_rows entries each) */
        cu_upload_small(g_cu.d_tile0, t, (size_t)b->n_rows * 4);
        cu_upload_small(g_cu.d_tilen, t + b->n_rows, (size_t)b->n_rows * 4);
        free(t);
    }
    int S = 1;
    if (split_rows) {
        const int cap = g_cu.table_cap * b->block_size, sms = g_cu.facts.sm_count;
        S = (cap + 255) / 256;
        if (!g_cu.deterministic) { /* enough CTAs for about two waves, no more */
            const int want = (2 * sms + g_cu.n_tiles * p->n_kv_heads - 1) / (g_cu.n_tiles * p->n_kv_heads);
            S = S < want ? S : want;
        }
        if (g_cu.forced_splits > 0) S = g_cu.forced_splits;
        S = S < 1 ? 1 : S > 32 ? 32 : S;
    }
    const int ws_qv = G >= qv_max ? G : tr * G;
    const size_t ws = cuda_attn_rows_ws_bytes(g_cu.n_tiles, p->n_kv_heads, D, S, ws_qv);
    if (S > 1 && cu_ensure(&g_cu.attn_ws, &g_cu.attn_ws_cap, ws)) return;
    cuda_attn_rows_args a = {0};
    a.q = qd;
    a.o = out->data;
    a.k_pool = k_pool->data;
    a.v_pool = v_pool->data;
    a.kf = kf;
    a.vf = vf;
    a.splits = S;
    a.ws_qv = ws_qv;
    a.ws = S > 1 ? g_cu.attn_ws : NULL;
    a.pos = g_cu.d_pos;
    a.seq = g_cu.d_seq;
    a.table = g_cu.d_table;
    a.table_stride = g_cu.table_cap;
    a.block = b->block_size;
    a.tile_row0 = g_cu.d_tile0;
    a.tile_n = g_cu.d_tilen;
    a.n_tiles = g_cu.n_tiles;
    a.n_heads = p->n_heads;
    a.n_kv_heads = p->n_kv_heads;
    a.head_dim = D;
    a.window = p->window;
    a.chunk = p->chunk;
    a.scale = p->scale;
    a.softcap = p->softcap;
    if (cu_ck(flash ? cuda_attn_flash(&a, g_cu.st) : cuda_attn_rows(&a, g_cu.st),
              flash ? "attention (flash)" : "attention (tiled)"))
        return;
    if (v_rot)
        cu_ck(cuda_kv_rotate(out->data, qw, out->data, qw, n, p->n_heads, D, 1, g_cu.st),
              "rotate output (TurboQuant V)");
}
