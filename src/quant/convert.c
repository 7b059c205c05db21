/* `mlxcel convert`, step 2: materialize the plan shard by shard (cast, quantize or dequantize),
 * write the safetensors shards + index, config.json, and copy the tokenizer files. See
 * convert.h for what is written and why. */
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "quant/convert.h"
#include "quant/quant.h"

#define CV_MAX_SHARD_DEFAULT (5ull << 30)

void mlxq_convert_defaults(mlxq_convert_opts *o) {
    memset(o, 0, sizeof *o);
    o->mlx_path = "mlx_model";
    o->bits = 4;
    o->group_size = 64;
    o->dtype = MX_DTYPE_INVALID;
    o->max_shard_bytes = CV_MAX_SHARD_DEFAULT;
    o->progress = -1;
}

/* ==== Progress ==== */

typedef struct progress {
    int mode; /* -2 silent, 0 plain lines, 1 bar */
    int total, done, last_decile;
    uint64_t bytes_total, bytes_done;
} progress;

static void progress_step(progress *p, const char *name, uint64_t bytes) {
    p->done++;
    p->bytes_done += bytes;
    if (p->mode == 1) {
        int width = 30, fill = p->total ? (int)((int64_t)width * p->done / p->total) : width;
        char bar[32];
        for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
        bar[width] = 0;
        fprintf(stderr, "\r\033[Kconvert [%s] %3d%%  %d/%d tensors  %.2f/%.2f GB  %.40s", bar,
                p->total ? 100 * p->done / p->total : 100, p->done, p->total,
                p->bytes_done / 1e9, p->bytes_total / 1e9, name);
        if (p->done == p->total) fputc('\n', stderr);
    } else if (p->mode == 0) {
        int dec = p->total ? 10 * p->done / p->total : 10;
        if (dec != p->last_decile) {
            fprintf(stderr, "convert: %d%% (%d/%d tensors, %.2f GB)\n", 10 * dec, p->done,
                    p->total, p->bytes_done / 1e9);
            p->last_decile = dec;
        }
    }
}

/* ==== Tensor materialization ==== */

/* A part's [rows, cols] block (row stride ld elements) written as [cols, rows] at dst. Tiles of
 * 32 x 32 elements keep the strided side's cache lines in use across a tile's columns. */
static void gather_transposed(uint8_t *dst, const cv_part *pt) {
    const size_t es = mx_dtype_size(pt->t->dtype);
    const uint8_t *src = (const uint8_t *)pt->t->data + pt->off;
    const int64_t R = pt->rows, C = pt->cols, ld = pt->ld;
#pragma omp parallel for schedule(static) if (R * C > 65536)
    for (int64_t r0 = 0; r0 < R; r0 += 32) {
        const int64_t r1 = r0 + 32 < R ? r0 + 32 : R;
        for (int64_t c0 = 0; c0 < C; c0 += 32) {
            const int64_t c1 = c0 + 32 < C ? c0 + 32 : C;
            /* constant-size memcpy: one unaligned-safe 16- / 32-bit move an element */
            for (int64_t c = c0; c < c1; c++)
                for (int64_t r = r0; r < r1; r++) {
                    const size_t d = (size_t)(c * R + r), f = (size_t)(r * ld + c);
                    if (es == 2) memcpy(dst + d * 2, src + f * 2, 2);
                    else if (es == 4) memcpy(dst + d * 4, src + f * 4, 4);
                    else memcpy(dst + d * es, src + f * es, es);
                }
        }
    }
}

/* The parts of o concatenated into one malloc'd (aligned) buffer. */
static void *gather(const cv_out *o, uint64_t *n_out) {
    uint64_t n = 0;
    for (int i = 0; i < o->n_parts; i++) n += o->parts[i].nbytes;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) return NULL;
    uint64_t at = 0;
    for (int i = 0; i < o->n_parts; i++) {
        if (o->parts[i].rows > 0)
            gather_transposed(buf + at, &o->parts[i]);
        else
            memcpy(buf + at, (const uint8_t *)o->parts[i].t->data + o->parts[i].off,
                   o->parts[i].nbytes);
        at += o->parts[i].nbytes;
    }
    *n_out = n;
    return buf;
}

/* Converts n floats from src (sdt) to a new buffer in ddt; returns src itself when equal. */
static void *cast(void *src, mx_dtype sdt, mx_dtype ddt, int64_t n) {
    if (sdt == ddt) return src;
    void *dst = malloc((size_t)n * mx_dtype_size(ddt) + 1);
    if (!dst) return NULL;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) mlxq_store(dst, ddt, i, mlxq_load(src, sdt, i));
    return dst;
}

typedef struct shard_buf {
    int n, cap;
    st_write_tensor *ts;
    void **bufs;
} shard_buf;

static int shard_push(shard_buf *s, const char *name, mx_dtype dt, int ndim, const int64_t *shape,
                      void *data, mx_error *err) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        st_write_tensor *ts = realloc(s->ts, (size_t)cap * sizeof *ts);
        if (ts) s->ts = ts;
        void **b = realloc(s->bufs, (size_t)cap * sizeof *b);
        if (b) s->bufs = b;
        if (!ts || !b) return free(data), mx_fail(err, "convert: out of memory");
        s->cap = cap;
    }
    char *nm = strdup(name);
    if (!nm) return free(data), mx_fail(err, "convert: out of memory");
    st_write_tensor *t = &s->ts[s->n];
    memset(t, 0, sizeof *t);
    t->name = nm;
    t->dtype = dt;
    t->ndim = ndim;
    memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
    t->data = data;
    s->bufs[s->n++] = data;
    return 0;
}

static void shard_clear(shard_buf *s) {
    for (int i = 0; i < s->n; i++) free((void *)s->ts[i].name), free(s->bufs[i]);
    s->n = 0;
}

static int materialize(shard_buf *s, const cv_out *o, mx_error *err) {
    uint64_t nb;
    int64_t n = 1;
    for (int i = 0; i < o->ndim; i++) n *= o->shape[i];
    const int64_t k = o->shape[o->ndim - 1], rows = n / k;
    void *src = gather(o, &nb);
    if (!src) return mx_fail(err, "convert: out of memory reading '%s'", o->name);
    if (o->kind == CV_RAW) return shard_push(s, o->name, o->dtype, o->ndim, o->shape, src, err);
    if (o->kind == CV_DEQUANT) {
        uint64_t ns, nbb;
        cv_out so = {.n_parts = 1, .parts = &(cv_part){.t = o->qs, .nbytes = o->qs->nbytes}};
        cv_out bo = {.n_parts = 1, .parts = &(cv_part){.t = o->qb, .nbytes = o->qb->nbytes}};
        void *sc = gather(&so, &ns), *bi = gather(&bo, &nbb);
        void *out = malloc((size_t)n * mx_dtype_size(o->dtype) + 1);
        int rc = -1;
        if (!sc || !bi || !out) mx_fail(err, "convert: out of memory dequantizing '%s'", o->name);
        else if (mlx_dequantize(out, o->dtype, src, sc, bi, o->qs->dtype, rows, k, o->bits,
                                o->group_size, err))
            mx_wrap(err, "%s", o->name);
        else rc = 0;
        free(src), free(sc), free(bi);
        if (rc) return free(out), -1;
        return shard_push(s, o->name, o->dtype, o->ndim, o->shape, out, err);
    }
    void *w = cast(src, o->src_dtype, o->dtype, n);
    if (w != src) free(src);
    if (!w) return mx_fail(err, "convert: out of memory casting '%s'", o->name);
    if (o->kind == CV_FLOAT) return shard_push(s, o->name, o->dtype, o->ndim, o->shape, w, err);

    /* CV_QUANT: weight [.., k] -> packed [.., k * bits / 32] + scales/biases [.., k / gs] */
    size_t es = mx_dtype_size(o->dtype);
    uint32_t *wq = malloc((size_t)(n * o->bits / 32) * 4);
    void *sc = malloc((size_t)(n / o->group_size) * es), *bi = malloc((size_t)(n / o->group_size) * es);
    if (!wq || !sc || !bi || mlx_quantize(wq, sc, bi, w, o->dtype, rows, k, o->bits, o->group_size, err)) {
        if (!wq || !sc || !bi) mx_fail(err, "convert: out of memory quantizing '%s'", o->name);
        else mx_wrap(err, "%s", o->name);
        free(w), free(wq), free(sc), free(bi);
        return -1;
    }
    free(w);
    char base[256], nm[300];
    snprintf(base, sizeof base, "%.*s", (int)(strlen(o->name) - 7), o->name);
    int64_t shp[8];
    memcpy(shp, o->shape, sizeof shp);
    shp[o->ndim - 1] = k * o->bits / 32;
    snprintf(nm, sizeof nm, "%s.weight", base);
    if (shard_push(s, nm, MX_U32, o->ndim, shp, wq, err)) return free(sc), free(bi), -1;
    shp[o->ndim - 1] = k / o->group_size;
    snprintf(nm, sizeof nm, "%s.scales", base);
    if (shard_push(s, nm, o->dtype, o->ndim, shp, sc, err)) return free(bi), -1;
    snprintf(nm, sizeof nm, "%s.biases", base);
    return shard_push(s, nm, o->dtype, o->ndim, shp, bi, err);
}

/* ==== Files ==== */

static int mkdir_p(const char *path, mx_error *err) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) && errno != EEXIST)
            return mx_fail(err, "%s: cannot create directory: %s", buf, strerror(errno));
        *p = '/';
    }
    return 0;
}

/* Removes the output directory we created (only plain files inside it). */
static void remove_output(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[4096];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(dir);
}

static int copy_file(const char *src, const char *dst, mx_error *err) {
    FILE *in = fopen(src, "rb");
    if (!in) return mx_fail(err, "%s: cannot read: %s", src, strerror(errno));
    FILE *out = fopen(dst, "wb");
    if (!out) return fclose(in), mx_fail(err, "%s: cannot write: %s", dst, strerror(errno));
    char buf[1 << 16];
    size_t n;
    int rc = 0;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n) rc = mx_fail(err, "%s: write failed", dst);
    if (ferror(in)) rc = mx_fail(err, "%s: read failed", src);
    fclose(in);
    if (fclose(out) && !rc) rc = mx_fail(err, "%s: write failed", dst);
    return rc;
}

/* Tokenizer and generation files, as mlx_lm saves them next to the weights. */
static int copy_side_files(const char *src, const char *dst, mx_error *err) {
    static const char *k_pat[] = {"tokenizer*", "special_tokens_map.json", "added_tokens.json",
                                  "vocab.json", "vocab.txt", "merges.txt", "*.tiktoken",
                                  "tiktoken.model", "chat_template*", "generation_config.json",
                                  "*.py"};
    DIR *d = opendir(src);
    if (!d) return mx_fail(err, "%s: cannot list: %s", src, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while (!rc && (e = readdir(d))) {
        bool want = false;
        for (size_t i = 0; i < sizeof k_pat / sizeof *k_pat; i++)
            if (!fnmatch(k_pat[i], e->d_name, 0)) want = true;
        if (!want) continue;
        char a[4096], b[4096];
        struct stat sb;
        snprintf(a, sizeof a, "%s/%s", src, e->d_name);
        if (stat(a, &sb) || !S_ISREG(sb.st_mode)) continue;
        snprintf(b, sizeof b, "%s/%s", dst, e->d_name);
        rc = copy_file(a, b, err);
    }
    closedir(d);
    return rc;
}

static const char *dtype_config_name(mx_dtype t) {
    return t == MX_BF16 ? "bfloat16" : t == MX_F16 ? "float16" : t == MX_F32 ? "float32" : NULL;
}

static mx_dtype dtype_from_config(json_t *cfg) {
    const char *keys[] = {"torch_dtype", "dtype"};
    json_t *objs[2] = {cfg, json_object_get(cfg, "text_config")};
    for (int o = 0; o < 2; o++)
        for (int k = 0; k < 2; k++) {
            json_t *v = objs[o] ? json_object_get(objs[o], keys[k]) : NULL;
            const char *s = json_is_string(v) ? json_string_value(v) : "";
            if (!strcmp(s, "bfloat16")) return MX_BF16;
            if (!strcmp(s, "float16")) return MX_F16;
            if (!strcmp(s, "float32")) return MX_F32;
        }
    return MX_DTYPE_INVALID;
}

static int write_config(json_t *cfg, const cv_plan *p, const mlxq_convert_opts *o,
                        const char *path, mx_error *err) {
    json_object_del(cfg, "_name_or_path");
    json_object_del(cfg, "vision_config");
    const char *dn = dtype_config_name(o->dtype);
    if (dn) {
        if (json_object_get(cfg, "dtype")) json_object_set_new(cfg, "dtype", json_string(dn));
        if (json_object_get(cfg, "torch_dtype") || !json_object_get(cfg, "dtype"))
            json_object_set_new(cfg, "torch_dtype", json_string(dn));
    }
    if (o->dequantize) {
        json_object_del(cfg, "quantization");
        json_object_del(cfg, "quantization_config");
    }
    if (o->quantize) {
        json_t *q = json_pack("{s:i, s:i, s:s}", "group_size", o->group_size, "bits", o->bits,
                              "mode", "affine");
        for (int i = 0; q && i < p->n_overrides; i++)
            json_object_set_new(q, p->overrides[i].module,
                                json_pack("{s:i, s:i}", "group_size", p->overrides[i].group_size,
                                          "bits", p->overrides[i].bits));
        if (!q) return mx_fail(err, "convert: out of memory");
        json_object_set_new(cfg, "quantization_config", json_deep_copy(q));
        json_object_set_new(cfg, "quantization", q);
    }
    if (json_dump_file(cfg, path, JSON_INDENT(4) | JSON_SORT_KEYS))
        return mx_fail(err, "%s: cannot write", path);
    return 0;
}

/* ==== Driver ==== */

static int write_shards(const cv_plan *p, const mlxq_convert_opts *o, json_t *wmap,
                        progress *pg, mx_error *err) {
    /* mlx_lm's make_shards: start a new shard when the next entry would pass the limit */
    int *shard_of = malloc((size_t)p->n * sizeof *shard_of);
    if (!shard_of) return mx_fail(err, "convert: out of memory");
    int n_shards = 1;
    uint64_t acc = 0;
    for (int i = 0; i < p->n; i++) {
        if (acc > 0 && acc + p->outs[i].out_bytes > o->max_shard_bytes) n_shards++, acc = 0;
        acc += p->outs[i].out_bytes;
        shard_of[i] = n_shards - 1;
    }
    shard_buf sb = {0};
    const char *meta_k[] = {"format"}, *meta_v[] = {"mlx"};
    int rc = 0, i = 0;
    for (int sh = 0; sh < n_shards && !rc; sh++) {
        char fname[64], path[4200];
        if (n_shards == 1) snprintf(fname, sizeof fname, "model.safetensors");
        else snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", sh + 1, n_shards);
        for (; i < p->n && shard_of[i] == sh && !rc; i++) {
            int before = sb.n;
            rc = materialize(&sb, &p->outs[i], err);
            for (int t = before; !rc && t < sb.n; t++)
                json_object_set_new(wmap, sb.ts[t].name, json_string(fname));
            if (!rc) progress_step(pg, p->outs[i].name, p->outs[i].out_bytes);
        }
        snprintf(path, sizeof path, "%s/%s", o->mlx_path, fname);
        if (!rc) rc = st_write(path, sb.ts, sb.n, meta_k, meta_v, 1, err);
        if (!rc && pg->mode == 0)
            fprintf(stderr, "convert: wrote %s (%d tensors)\n", fname, sb.n);
        shard_clear(&sb);
    }
    free(sb.ts), free(sb.bufs), free(shard_of);
    return rc;
}

int mlxq_convert(const mlxq_convert_opts *opts, mx_error *err) {
    mlxq_convert_opts o = *opts;
    if (!o.bits) o.bits = 4;
    if (!o.group_size) o.group_size = 64;
    if (!o.max_shard_bytes) o.max_shard_bytes = CV_MAX_SHARD_DEFAULT;
    if (!o.hf_path || !o.mlx_path) return mx_fail(err, "convert: --hf-path and --mlx-path are required");
    if (o.quantize && o.dequantize)
        return mx_fail(err, "convert: choose either --quantize or --dequantize, not both");
    if (o.quantize && mlxq_check(o.bits, o.group_size, o.group_size, "convert", err)) return -1;
    if (o.dtype != MX_DTYPE_INVALID && !dtype_config_name(o.dtype))
        return mx_fail(err, "convert: --dtype must be float16, bfloat16 or float32");
    struct stat st;
    if (!stat(o.mlx_path, &st))
        return mx_fail(err, "%s: already exists; delete it or choose another --mlx-path", o.mlx_path);

    ckpt c;
    if (ckpt_open(&c, o.hf_path, err)) return -1;
    char cpath[4200];
    snprintf(cpath, sizeof cpath, "%s/config.json", c.dir);
    json_error_t jerr;
    json_t *cfg = json_load_file(cpath, 0, &jerr);
    cv_plan plan = {0};
    json_t *index = NULL;
    bool created = false;
    int rc = -1;
    if (!cfg || !json_is_object(cfg)) {
        mx_fail(err, "%s: line %d: %s", cpath, jerr.line, jerr.text);
        goto out;
    }
    if (o.dtype == MX_DTYPE_INVALID) o.dtype = dtype_from_config(cfg);
    if (o.quantize && c.spec.quant.bits) {
        mx_fail(err, "%s: the checkpoint is already quantized (%d-bit); convert it with "
                "--dequantize first", o.hf_path, c.spec.quant.bits);
        goto out;
    }
    if (o.dequantize && !c.spec.quant.bits) {
        mx_fail(err, "%s: --dequantize: the checkpoint is not quantized", o.hf_path);
        goto out;
    }
    if (cv_plan_build(&plan, &c, &o, err)) goto out;

    progress pg = {.mode = o.progress == -1 ? (isatty(2) ? 1 : 0) : o.progress,
                   .total = plan.n, .last_decile = 0};
    uint64_t total_size = 0, total_params = 0;
    for (int i = 0; i < plan.n; i++) {
        pg.bytes_total += plan.outs[i].out_bytes;
        total_size += plan.outs[i].out_bytes;
        total_params += plan.outs[i].n_params;
    }
    if (mkdir_p(o.mlx_path, err)) goto out;
    if (mkdir(o.mlx_path, 0755)) {
        mx_fail(err, "%s: cannot create directory: %s", o.mlx_path, strerror(errno));
        goto out;
    }
    created = true;
    json_t *wmap = json_object();
    index = json_pack("{s:{s:I, s:I}, s:o}", "metadata", "total_size", (json_int_t)total_size,
                      "total_parameters", (json_int_t)total_params, "weight_map", wmap);
    if (!index) {
        mx_fail(err, "convert: out of memory");
        goto out;
    }
    if (write_shards(&plan, &o, wmap, &pg, err)) goto out;
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", o.mlx_path);
    if (json_dump_file(index, path, JSON_INDENT(4) | JSON_SORT_KEYS)) {
        mx_fail(err, "%s: cannot write", path);
        goto out;
    }
    snprintf(path, sizeof path, "%s/config.json", o.mlx_path);
    if (write_config(cfg, &plan, &o, path, err) || copy_side_files(c.dir, o.mlx_path, err)) goto out;
    rc = 0;
out:
    if (rc && created) remove_output(o.mlx_path);
    json_decref(index);
    json_decref(cfg);
    cv_plan_free(&plan);
    ckpt_close(&c);
    return rc;
}
