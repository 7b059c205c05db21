/* Checkpoint directory: config + shards (index.json or *.safetensors), dtype detection,
 * MLX quantization consistency, logical parameter count, tensor lookup with shape checks. */
#include "io/checkpoint.h"

#include <dirent.h>
#include <stdbool.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ==== Helpers ==== */

static char *ck_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

static bool has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

static void fmt_shape(char *out, size_t n, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(out, n, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(out + k, n - k, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (k < n) snprintf(out + k, n - k, "]");
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Opens each of `names` (file names inside c->dir) into c->files. */
static int open_shards(ckpt *c, char **names, int n, mx_error *err) {
    c->files = calloc((size_t)(n ? n : 1), sizeof *c->files);
    if (!c->files) return mx_fail(err, "%s: out of memory", c->dir);
    for (int i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", c->dir, names[i]);
        if (st_open(&c->files[i], path, err)) return -1;
        c->n_files = i + 1;
    }
    return 0;
}

/* ==== Shard discovery ==== */

static int open_from_index(ckpt *c, const char *ipath, mx_error *err) {
    json_error_t je;
    json_t *root = json_load_file(ipath, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return mx_fail(err, "%s: not valid JSON (%.200s at line %d)", ipath, je.text, je.line);
    int rc = -1, n = 0;
    char **names = NULL;
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm) || !json_object_size(wm)) {
        mx_fail(err, "%s: field 'weight_map' must be a non-empty object", ipath);
        goto out;
    }
    names = calloc(json_object_size(wm), sizeof *names);
    if (!names) {
        mx_fail(err, "%s: out of memory", ipath);
        goto out;
    }
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v) {
        const char *f = json_is_string(v) ? json_string_value(v) : NULL;
        /* Shards must live in the directory itself: no paths, no "..". */
        if (!f || !*f || strchr(f, '/') || !strcmp(f, "..") || !strcmp(f, ".")) {
            mx_fail(err, "%s: weight_map entry '%.200s' must name a file in the same directory",
                    ipath, key);
            goto out;
        }
        int seen = 0;
        for (int i = 0; i < n && !seen; i++) seen = !strcmp(names[i], f);
        if (!seen) names[n++] = (char *)f;
    }
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    if (open_shards(c, names, n, err)) goto out;
    /* Every listed tensor must be where the index says. */
    json_object_foreach(wm, key, v) {
        const char *f = json_string_value(v);
        int i;
        for (i = 0; i < c->n_files; i++) {
            const char *base = strrchr(c->files[i].path, '/');
            if (!strcmp(base ? base + 1 : c->files[i].path, f)) break;
        }
        if (i == c->n_files || !st_find(&c->files[i], key)) {
            mx_fail(err, "%s: tensor '%.200s' is listed in shard %s but not found there", ipath,
                    key, f);
            goto out;
        }
    }
    rc = 0;
out:
    free(names);
    json_decref(root);
    return rc;
}

/* No index: every *.safetensors in the directory, sorted by name so shard order is stable.
 * readdir rather than glob(3): a directory name holding '[' or '*' must not change the match. */
static int open_from_glob(ckpt *c, mx_error *err) {
    DIR *d = opendir(c->dir);
    if (!d) return mx_fail(err, "%s: cannot list the directory", c->dir);
    int n = 0, cap = 0, rc = -1;
    char **names = NULL;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!has_suffix(de->d_name, ".safetensors") || de->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nn = realloc(names, (size_t)cap * sizeof *names);
            if (!nn) {
                mx_fail(err, "%s: out of memory", c->dir);
                goto out;
            }
            names = nn;
        }
        if (!(names[n] = ck_strdup(de->d_name))) {
            mx_fail(err, "%s: out of memory", c->dir);
            goto out;
        }
        n++;
    }
    if (!n) {
        mx_fail(err, "%s: no model.safetensors.index.json and no *.safetensors files", c->dir);
        goto out;
    }
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    rc = open_shards(c, names, n, err);
out:
    closedir(d);
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

/* ==== Whole-checkpoint checks ==== */

static bool is_float(mx_dtype t) { return t == MX_F32 || t == MX_F16 || t == MX_BF16; }

/* For `X.weight`: the companion `X.<suffix>` tensor, or NULL. */
static const st_tensor *companion(const ckpt *c, const char *wname, const char *suffix) {
    char buf[1024];
    size_t n = strlen(wname) - strlen(".weight");
    if (n + strlen(suffix) + 1 >= sizeof buf) return NULL;
    memcpy(buf, wname, n);
    snprintf(buf + n, sizeof buf - n, "%s", suffix);
    return ckpt_find(c, buf);
}

/* MLX packs X.weight as U32 [..., in * bits / 32] with X.scales / X.biases [..., in / group].
 * Returns 1 when `t` is such a packed weight (after checking it), 0 otherwise, -1 on error. */
static int check_packed(const ckpt *c, const st_file *f, const st_tensor *t, mx_quant *qout,
                        mx_error *err) {
    if (t->dtype != MX_U32 || !has_suffix(t->name, ".weight") || t->ndim < 1) return 0;
    const st_tensor *sc = companion(c, t->name, ".scales");
    if (!sc) return 0;
    const st_tensor *bi = companion(c, t->name, ".biases");
    mx_quant q = spec_quant_for(&c->spec, t->name);
    if (!q.bits)
        return mx_fail(err,
                       "%s: tensor '%s' is MLX-quantized (U32 with .scales) but %s/config.json "
                       "has no quantization for it",
                       f->path, t->name, c->dir);
    int64_t packed = t->shape[t->ndim - 1];
    int64_t in = packed * 32 / q.bits;
    char es[128], fs[128];
    int64_t want[ST_MAX_DIMS];
    memcpy(want, t->shape, sizeof want);
    want[t->ndim - 1] = in / q.group_size;
    if (packed * 32 % q.bits || in % q.group_size || sc->ndim != t->ndim ||
        memcmp(sc->shape, want, sizeof(int64_t) * (size_t)t->ndim)) {
        fmt_shape(es, sizeof es, t->ndim, want);
        fmt_shape(fs, sizeof fs, sc->ndim, sc->shape);
        return mx_fail(err,
                       "%s: tensor '%s' has shape %s, expected %s for %d-bit group-%d weights of "
                       "width %lld",
                       f->path, sc->name, fs, es, q.bits, q.group_size, (long long)in);
    }
    if (!bi)
        return mx_fail(err, "%s: tensor '%s' is MLX-quantized but its .biases tensor is missing",
                       f->path, t->name);
    if ((bi->ndim != sc->ndim || memcmp(bi->shape, sc->shape, sizeof(int64_t) * (size_t)sc->ndim))) {
        fmt_shape(es, sizeof es, sc->ndim, sc->shape);
        fmt_shape(fs, sizeof fs, bi->ndim, bi->shape);
        return mx_fail(err, "%s: tensor '%s' has shape %s, expected %s (same as its .scales)",
                       f->path, bi->name, fs, es);
    }
    *qout = q;
    return 1;
}

/* Logical parameter count, quantization checks, duplicate names and dtype detection. */
static int scan_tensors(ckpt *c, mx_error *err) {
    uint64_t float_bytes[MX_DTYPE_COUNT] = {0};
    c->weights_bytes = 0;
    c->n_params = 0;
    for (int fi = 0; fi < c->n_files; fi++) {
        const st_file *f = &c->files[fi];
        for (int ti = 0; ti < f->n_tensors; ti++) {
            const st_tensor *t = &f->tensors[ti];
            for (int fj = 0; fj < fi; fj++)
                if (st_find(&c->files[fj], t->name))
                    return mx_fail(err, "%s: tensor '%s' also appears in %s", f->path, t->name,
                                   c->files[fj].path);
            c->weights_bytes += t->nbytes;
            if (is_float(t->dtype)) float_bytes[t->dtype] += t->nbytes;
            mx_quant q = {0, 0};
            int packed = check_packed(c, f, t, &q, err);
            if (packed < 0) return -1;
            uint64_t elems = t->nbytes / mx_dtype_size(t->dtype);
            if (packed) {
                elems = elems * 32 / (uint64_t)q.bits; /* unpacked logical weights */
            } else if (has_suffix(t->name, ".scales") || has_suffix(t->name, ".biases")) {
                /* MLX quantization side data is not a parameter of the model. */
                char w[1024];
                size_t n = strlen(t->name) - 7;
                if (n < sizeof w - 8) {
                    memcpy(w, t->name, n);
                    snprintf(w + n, sizeof w - n, ".weight");
                    const st_tensor *wt = ckpt_find(c, w);
                    if (wt && wt->dtype == MX_U32) elems = 0;
                }
            }
            c->n_params += elems;
        }
    }
    /* The storage dtype is what most weight bytes are in; config's torch_dtype is only a hint
     * (MLX conversions keep it while the data changed). */
    mx_dtype best = MX_DTYPE_INVALID;
    for (int d = 0; d < MX_DTYPE_COUNT; d++)
        if (float_bytes[d] && (best == MX_DTYPE_INVALID || float_bytes[d] > float_bytes[best]))
            best = (mx_dtype)d;
    if (best != MX_DTYPE_INVALID) c->spec.dtype = best;
    return 0;
}

/* ==== Public API ==== */

int ckpt_open(ckpt *c, const char *dir, mx_error *err) {
    memset(c, 0, sizeof *c);
    struct stat sb;
    if (stat(dir, &sb) || !S_ISDIR(sb.st_mode))
        return mx_fail(err, "%s: not a checkpoint directory (does not exist or is not a directory)",
                       dir);
    c->dir = ck_strdup(dir);
    if (!c->dir) return mx_fail(err, "%s: out of memory", dir);
    for (size_t n = strlen(c->dir); n > 1 && c->dir[n - 1] == '/'; n--) c->dir[n - 1] = '\0';
    dir = c->dir;
    if (spec_load(&c->spec, dir, err)) goto fail;
    char ipath[4096];
    snprintf(ipath, sizeof ipath, "%s/model.safetensors.index.json", dir);
    int rc = access(ipath, F_OK) == 0 ? open_from_index(c, ipath, err) : open_from_glob(c, err);
    if (rc || scan_tensors(c, err)) goto fail;
    return 0;
fail:
    ckpt_close(c);
    for (char *p = err ? err->msg : NULL; p && *p; p++) /* one line, whatever the input held */
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    return -1;
}

void ckpt_close(ckpt *c) {
    if (!c) return;
    for (int i = 0; i < c->n_files; i++) st_close(&c->files[i]);
    free(c->files);
    free(c->dir);
    memset(c, 0, sizeof *c);
}

const st_tensor *ckpt_find(const ckpt *c, const char *name) {
    for (int i = 0; i < c->n_files; i++) {
        const st_tensor *t = st_find(&c->files[i], name);
        if (t) return t;
    }
    return NULL;
}

const st_file *ckpt_file_of(const ckpt *c, const char *name) {
    for (int i = 0; i < c->n_files; i++)
        if (st_find(&c->files[i], name)) return &c->files[i];
    return NULL;
}

int ckpt_expect(const ckpt *c, const char *name, int ndim, const int64_t *shape,
                const st_tensor **out, mx_error *err) {
    char es[160], fs[160];
    fmt_shape(es, sizeof es, ndim, shape);
    const st_tensor *t = ckpt_find(c, name);
    if (out) *out = t;
    if (!t)
        return mx_fail(err, "%s: missing tensor '%s' (expected shape %s)", c->dir, name, es);
    const st_file *f = ckpt_file_of(c, name);
    int64_t want[ST_MAX_DIMS];
    if (ndim < 0 || ndim > ST_MAX_DIMS) return mx_fail(err, "%s: bad expected rank %d", name, ndim);
    memcpy(want, shape, sizeof(int64_t) * (size_t)ndim);
    const char *what = "";
    if (t->dtype == MX_U32 && ndim > 0) {
        mx_quant q = spec_quant_for(&c->spec, name);
        if (!q.bits || shape[ndim - 1] < 0 || shape[ndim - 1] * q.bits % 32)
            return mx_fail(err,
                           "%s: tensor '%s' is U32 but %s/config.json gives no usable quantization "
                           "for it (expected a float tensor of shape %s)",
                           f->path, name, c->dir, es);
        want[ndim - 1] = shape[ndim - 1] * q.bits / 32;
        what = " (packed)";
    } else if (!is_float(t->dtype)) {
        return mx_fail(err, "%s: tensor '%s' has dtype %s, expected F32, F16, BF16 or MLX-packed U32",
                       f->path, name, mx_dtype_name(t->dtype));
    }
    bool ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = want[i] < 0 || want[i] == t->shape[i];
    if (!ok) {
        fmt_shape(fs, sizeof fs, t->ndim, t->shape);
        char ws[160];
        fmt_shape(ws, sizeof ws, ndim, want);
        return mx_fail(err, "%s: tensor '%s' has shape %s, expected %s%s", f->path, name, fs, ws,
                       what);
    }
    return 0;
}
