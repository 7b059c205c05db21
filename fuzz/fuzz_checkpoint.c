/* libFuzzer target: a whole checkpoint directory, for what no single-file target reaches: the
 * MLX quantization block of config.json against the quantized tensor triplets (X.weight U32
 * packed, X.scales, X.biases), the shard index (model.safetensors.index.json) against the
 * shards, and the loader's binding of every tensor to the shapes the config implies.
 *
 * Input: NUL-separated parts  config.json \0 index.json \0 header \0 header ...
 * An empty index part means no index file (the shards are then found by name). Each header is
 * a safetensors header (JSON) that becomes a shard file: the 8-byte length, the header padded
 * to 8 bytes as writers do, and a data section as long as the largest data_offsets end
 * (<= 1 MiB) filled with a fixed pattern. One shard is model.safetensors, several are
 * model-0000i-of-0000n.safetensors (the names Hugging Face writes), at most 4.
 *
 * Checks: ckpt_open + ckpt_validate fail cleanly or succeed; on success every quantized
 * triplet whose scales and biases share a float dtype (what the loader requires) dequantizes
 * row by row within heap copies of exactly its three tensors' bytes; model_load on the CPU
 * backend fails cleanly or binds, and then every quantized weight it bound passes
 * mlxq_from_qweight and dequantizes inside the mapping, and every dense one is read at both
 * ends. Errors are one line. */
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "io/checkpoint.h"
#include "model/model.h"
#include "model/model_internal.h"
#include "quant/quant.h"
#include "backend/cpu/cpu_quant.h"

#define MAX_SHARDS 4
#define MAX_DATA (1u << 20)

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_dir[256];

static void cleanup_dir(void) {
    DIR *d = opendir(g_dir);
    if (d) {
        struct dirent *de;
        char p[512];
        while ((de = readdir(d)))
            if (de->d_name[0] != '.') snprintf(p, sizeof p, "%s/%s", g_dir, de->d_name), unlink(p);
        closedir(d);
    }
}

static void remove_dir(void) {
    cleanup_dir();
    rmdir(g_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    setenv("MLXCEL_LOG_LEVEL", "error", 0);
    struct stat sb;
    /* tmpfs when there is one: every input writes a few files */
    snprintf(g_dir, sizeof g_dir, "%s/mlxcel-fuzz-ckpt-XXXXXX", stat("/dev/shm", &sb) ? "/tmp" : "/dev/shm");
    if (!mkdtemp(g_dir)) {
        perror("fuzz_checkpoint: mkdtemp");
        abort();
    }
    atexit(remove_dir);
    return 0;
}

/* ==== Writing the directory ==== */
static void write_file(const char *name, const void *a, size_t na, const void *b, size_t nb) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    FILE *f = fopen(p, "wb");
    if (!f || (na && fwrite(a, 1, na, f) != na) || (nb && fwrite(b, 1, nb, f) != nb) || fclose(f)) {
        perror("fuzz_checkpoint: write");
        abort();
    }
}

/* The data section a header asks for: its largest data_offsets end, 0 when it has none usable. */
static size_t data_size(const char *hdr, size_t n) {
    json_t *o = json_loadb(hdr, n, 0, NULL);
    size_t end = 0;
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        json_t *off = json_object_get(v, "data_offsets");
        json_int_t e = json_integer_value(json_array_get(off, 1));
        if (e > 0 && (size_t)e <= MAX_DATA && (size_t)e > end) end = (size_t)e;
    }
    json_decref(o);
    return end;
}

static void write_shard(const char *name, const char *hdr, size_t n) {
    static uint8_t buf[8 + 65536 + 8 + MAX_DATA];
    if (n > 65536) n = 65536;
    size_t padded = (n + 7) & ~(size_t)7;
    size_t dn = data_size(hdr, n);
    uint64_t len = padded;
    memcpy(buf, &len, 8); /* little-endian hosts only (x86-64, arm64) */
    memcpy(buf + 8, hdr, n);
    memset(buf + 8 + n, ' ', padded - n);
    /* bf16 / f16 / f32 values of moderate size and every 4-bit code */
    for (size_t i = 0; i < dn; i++) buf[8 + padded + i] = (uint8_t)(i & 1 ? 0x3c : i * 37);
    write_file(name, buf, 8 + padded + dn, NULL, 0);
}

/* ==== Checks on what loaded ==== */
static bool float_dtype(mx_dtype t) { return t == MX_F32 || t == MX_F16 || t == MX_BF16; }

static void dequant_all(const mlxq_matrix *m) {
    float *row = malloc((size_t)m->k * sizeof *row);
    if (!row) return;
    for (int64_t r = 0; r < m->n; r++) mlxq_dequantize_rows(row, m, r, 1);
    free(row);
}

static void *dup_bytes(const st_tensor *t) {
    void *p = malloc(t->nbytes ? t->nbytes : 1);
    if (p && t->nbytes) memcpy(p, t->data, t->nbytes);
    return p;
}

/* Every triplet ckpt_open accepted, read as the kernels read it. */
static void check_ckpt_triplets(const ckpt *c) {
    for (int fi = 0; fi < c->n_files; fi++) {
        const st_file *f = &c->files[fi];
        for (int ti = 0; ti < f->n_tensors; ti++) {
            const st_tensor *t = &f->tensors[ti];
            size_t n = strlen(t->name);
            if (t->dtype != MX_U32 || n < 7 || strcmp(t->name + n - 7, ".weight") || t->ndim < 1) continue;
            char nm[1100];
            snprintf(nm, sizeof nm, "%.*s.scales", (int)(n - 7), t->name);
            const st_tensor *sc = ckpt_find(c, nm);
            snprintf(nm, sizeof nm, "%.*s.biases", (int)(n - 7), t->name);
            const st_tensor *bi = ckpt_find(c, nm);
            mx_quant q = spec_quant_for(&c->spec, t->name);
            if (!sc || !bi || !q.bits || !float_dtype(sc->dtype) || sc->dtype != bi->dtype) continue;
            int64_t rows = 1;
            for (int d = 0; d < t->ndim - 1; d++) rows *= t->shape[d];
            /* Heap copies of exactly each tensor's bytes: a read past one is an ASan report (in
             * the file mapping it would land in the next tensor unseen). */
            void *cw = dup_bytes(t), *cs = dup_bytes(sc), *cb = dup_bytes(bi);
            mlxq_matrix m = {.w = cw, .scales = cs, .biases = cb, .sb_dtype = sc->dtype, .n = rows,
                             .k = t->shape[t->ndim - 1] * 32 / q.bits, .bits = q.bits, .group_size = q.group_size};
            mx_error err;
            if (cw && cs && cb && rows > 0 && mlxq_matrix_check(&m, &err) == 0) dequant_all(&m);
            free(cw);
            free(cs);
            free(cb);
        }
    }
}

static void touch_dense(const mx_tensor *t) {
    if (!t->data || t->ndim < 1) return;
    size_t n = mx_tensor_nbytes(t);
    if (!n) return;
    volatile const uint8_t *p = t->data;
    size_t last = n - 1;
    (void)p[0];
    (void)p[last];
}

static void check_qweight(const mx_qweight *q) {
    if (!q->bits) return;
    mlxq_matrix m;
    mx_error err;
    if (mlxq_from_qweight(&m, q, &err)) {
        fprintf(stderr, "fuzz_checkpoint: the loader bound a quantized weight the kernels refuse: %s\n", err.msg);
        abort();
    }
    dequant_all(&m);
}

static void check_weight(const model_weight *w) {
    if (model_weight_quantized(w)) check_qweight(&w->q);
    else touch_dense(&w->w);
}

static void check_model(const model *m) {
    check_weight(&m->tok_embd);
    check_weight(&m->lm_head);
    touch_dense(&m->out_norm);
    for (int l = 0; l < m->spec.n_layers; l++) {
        const model_layer *L = &m->layers[l];
        const model_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down,
                                    &L->router, &L->sh_gate, &L->sh_up, &L->sh_down, &L->wq_a, &L->wkv_a};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) check_weight(ws[i]);
        const mx_tensor *ts[] = {&L->attn_norm, &L->q_norm, &L->k_norm, &L->ffn_norm, &L->post_attn_norm,
                                 &L->post_ffn_norm, &L->bq, &L->bk, &L->bv, &L->bo};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) touch_dense(ts[i]);
        for (int e = 0; L->moe && e < m->spec.n_experts; e++) {
            if (L->exp_qgate) check_qweight(&L->exp_qgate[e]), check_qweight(&L->exp_qup[e]),
                check_qweight(&L->exp_qdown[e]);
            if (L->exp_gate) touch_dense(&L->exp_gate[e]), touch_dense(&L->exp_up[e]), touch_dense(&L->exp_down[e]);
        }
    }
}

static void check_msg(const mx_error *err) {
    if (!memchr(err->msg, '\0', sizeof err->msg) || strchr(err->msg, '\n')) {
        fprintf(stderr, "fuzz_checkpoint: an error message that is not one line: %.200s\n", err->msg);
        abort();
    }
}

/* ==== Target ==== */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *part[2 + MAX_SHARDS];
    size_t plen[2 + MAX_SHARDS];
    int np = 0;
    const char *p = (const char *)data, *end = p + size;
    while (np < 2 + MAX_SHARDS && p <= end) {
        const char *z = memchr(p, 0, (size_t)(end - p));
        part[np] = p;
        plen[np] = z ? (size_t)(z - p) : (size_t)(end - p);
        np++;
        if (!z) break;
        p = z + 1;
    }
    if (np < 3) return 0; /* a config, an index (maybe empty) and one shard at least */
    cleanup_dir();
    write_file("config.json", part[0], plen[0], NULL, 0);
    if (plen[1]) write_file("model.safetensors.index.json", part[1], plen[1], NULL, 0);
    const int shards = np - 2;
    for (int i = 0; i < shards; i++) {
        char name[64];
        if (shards == 1) snprintf(name, sizeof name, "model.safetensors");
        else snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", i + 1, shards);
        write_shard(name, part[2 + i], plen[2 + i]);
    }

    /* FUZZ_VERBOSE=1: what each step said (to see what a seed reaches). */
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("FUZZ_VERBOSE") != NULL;
    ckpt c;
    mx_error err = {{0}};
    if (ckpt_open(&c, g_dir, &err) == 0) {
        check_ckpt_triplets(&c);
        int rc = ckpt_validate(&c, &err);
        if (rc) check_msg(&err);
        if (verbose) fprintf(stderr, "ckpt_open: ok, ckpt_validate: %s\n", rc ? err.msg : "ok");
        ckpt_close(&c);
    } else {
        check_msg(&err);
        if (verbose) fprintf(stderr, "ckpt_open: %s\n", err.msg);
    }
    model *m = NULL;
    if (model_load(&m, g_dir, backend_cpu(), &err) == 0) {
        if (verbose) fprintf(stderr, "model_load: ok (%d layers, %d of %d linear weights quantized)\n",
                             m->spec.n_layers, m->n_lin_q, m->n_lin);
        check_model(m);
        model_free(m);
    } else {
        check_msg(&err);
        if (verbose) fprintf(stderr, "model_load: %s\n", err.msg);
    }
    return 0;
}
