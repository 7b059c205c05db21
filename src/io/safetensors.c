/* safetensors reader (mmap + bounded header parser) and writer.
 *
 * File layout: u64 little-endian header length N, N bytes of JSON header, data section.
 * The header maps tensor names to {dtype, shape, data_offsets: [begin, end]} (offsets relative
 * to the data section) plus an optional "__metadata__" object of string -> string.
 * Everything in the header is untrusted: every number is range-checked before use and every
 * product is overflow-checked, so a hostile file yields an error, never a wild read. */
#include "io/safetensors.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The reference implementation caps headers at 100 MB; real checkpoints stay far below
 * (a 1000-tensor shard has a ~100 KB header). */
#define ST_MAX_HEADER_LEN (100ull * 1024 * 1024)
#define ST_MAX_TENSORS (1 << 20)

/* ==== Helpers ==== */

static char *st_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

static int cmp_tensor_ptr_offset(const void *a, const void *b) {
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
    return 0;
}

/* Releases everything st_parse_header allocated; keeps the mapping fields. */
static void st_free_header(st_file *f) {
    for (int i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    for (int i = 0; i < f->n_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_vals[i]);
    }
    free(f->meta_keys);
    free(f->meta_vals);
    f->tensors = NULL;
    f->n_tensors = 0;
    f->meta_keys = f->meta_vals = NULL;
    f->n_meta = 0;
}

/* ==== Header parser ==== */

static int parse_metadata(st_file *f, json_t *meta, mx_error *err) {
    if (!json_is_object(meta)) return mx_fail(err, "header: __metadata__ is not a JSON object");
    size_t n = json_object_size(meta);
    f->meta_keys = calloc(n ? n : 1, sizeof(char *));
    f->meta_vals = calloc(n ? n : 1, sizeof(char *));
    if (!f->meta_keys || !f->meta_vals) return mx_fail(err, "header: out of memory");
    const char *k;
    json_t *v;
    json_object_foreach(meta, k, v) {
        if (!json_is_string(v))
            return mx_fail(err, "header: __metadata__ value of '%.100s' is not a string", k);
        f->meta_keys[f->n_meta] = st_strdup(k);
        f->meta_vals[f->n_meta] = st_strdup(json_string_value(v));
        f->n_meta++;
        if (!f->meta_keys[f->n_meta - 1] || !f->meta_vals[f->n_meta - 1])
            return mx_fail(err, "header: out of memory");
    }
    return 0;
}

/* Fills one tensor entry from its header object; name already set. */
static int parse_tensor(st_tensor *t, json_t *obj, uint64_t data_len, mx_error *err) {
    const char *nm = t->name;
    if (!json_is_object(obj)) return mx_fail(err, "tensor '%.200s': entry is not a JSON object", nm);
    json_t *jd = json_object_get(obj, "dtype");
    if (!json_is_string(jd)) return mx_fail(err, "tensor '%.200s': missing string \"dtype\"", nm);
    t->dtype = mx_dtype_from_name(json_string_value(jd));
    if (t->dtype == MX_DTYPE_INVALID)
        return mx_fail(err,
                       "tensor '%.200s': unknown dtype '%.40s' (expected one of F64, F32, F16, BF16, "
                       "I64, I32, I16, I8, U64, U32, U16, U8, BOOL, F8_E4M3, F8_E5M2)",
                       nm, json_string_value(jd));

    json_t *js = json_object_get(obj, "shape");
    if (!json_is_array(js)) return mx_fail(err, "tensor '%.200s': missing array \"shape\"", nm);
    size_t nd = json_array_size(js);
    if (nd > ST_MAX_DIMS)
        return mx_fail(err, "tensor '%.200s': %zu dimensions (at most %d supported)", nm, nd,
                       ST_MAX_DIMS);
    t->ndim = (int)nd;
    /* Element count, overflow-checked: it must end up equal to nbytes / dtype size anyway. */
    uint64_t elems = 1;
    bool overflow = false;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(js, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return mx_fail(err, "tensor '%.200s': shape[%zu] is not a non-negative integer", nm, i);
        uint64_t v = (uint64_t)json_integer_value(d);
        t->shape[i] = (int64_t)v;
        if (v && elems > UINT64_MAX / v) overflow = true;
        else elems *= v;
    }

    json_t *jo = json_object_get(obj, "data_offsets");
    if (!json_is_array(jo) || json_array_size(jo) != 2)
        return mx_fail(err, "tensor '%.200s': \"data_offsets\" must be [begin, end]", nm);
    json_t *jb = json_array_get(jo, 0), *je = json_array_get(jo, 1);
    if (!json_is_integer(jb) || !json_is_integer(je) || json_integer_value(jb) < 0 ||
        json_integer_value(je) < 0)
        return mx_fail(err, "tensor '%.200s': data_offsets are not non-negative integers", nm);
    uint64_t b = (uint64_t)json_integer_value(jb), e = (uint64_t)json_integer_value(je);
    if (b > e)
        return mx_fail(err, "tensor '%.200s': data_offsets [%llu, %llu] end before they begin", nm,
                       (unsigned long long)b, (unsigned long long)e);
    if (e > data_len)
        return mx_fail(err,
                       "tensor '%.200s': data_offsets [%llu, %llu] past the end of the data section "
                       "(%llu bytes)",
                       nm, (unsigned long long)b, (unsigned long long)e,
                       (unsigned long long)data_len);
    t->offset = b;
    t->nbytes = e - b;
    uint64_t esz = mx_dtype_size(t->dtype);
    if (overflow || elems > UINT64_MAX / esz)
        return mx_fail(err, "tensor '%.200s': shape x %s size overflows 64 bits (data_offsets span %llu)",
                       nm, mx_dtype_name(t->dtype), (unsigned long long)t->nbytes);
    if (elems * esz != t->nbytes)
        return mx_fail(err, "tensor '%.200s': shape x %s size is %llu bytes but data_offsets span %llu",
                       nm, mx_dtype_name(t->dtype), (unsigned long long)(elems * esz),
                       (unsigned long long)t->nbytes);
    return 0;
}

/* No two non-empty byte ranges may share a byte (aliasing would let one tensor's write, or a
 * hostile header, corrupt another). Zero-length tensors occupy nothing. */
static int check_overlaps(const st_file *f, mx_error *err) {
    if (f->n_tensors < 2) return 0;
    const st_tensor **v = malloc((size_t)f->n_tensors * sizeof *v);
    if (!v) return mx_fail(err, "header: out of memory");
    for (int i = 0; i < f->n_tensors; i++) v[i] = &f->tensors[i];
    qsort(v, (size_t)f->n_tensors, sizeof *v, cmp_tensor_ptr_offset);
    const st_tensor *prev = NULL;
    int rc = 0;
    for (int i = 0; i < f->n_tensors; i++) {
        if (!v[i]->nbytes) continue;
        if (prev && v[i]->offset < prev->offset + prev->nbytes) {
            rc = mx_fail(err, "tensors '%.200s' [%llu, %llu) and '%.200s' [%llu, %llu) overlap",
                         prev->name, (unsigned long long)prev->offset,
                         (unsigned long long)(prev->offset + prev->nbytes), v[i]->name,
                         (unsigned long long)v[i]->offset,
                         (unsigned long long)(v[i]->offset + v[i]->nbytes));
            break;
        }
        prev = v[i];
    }
    free(v);
    return rc;
}

int st_parse_header(st_file *f, const char *json, size_t json_len, uint64_t data_len,
                    mx_error *err) {
    memset(f, 0, sizeof *f); /* st_close is safe on the result, success or not */
    f->data_len = data_len;
    if (json_len > ST_MAX_HEADER_LEN)
        return mx_fail(err, "header of %zu bytes exceeds the %llu-byte cap", json_len,
                       ST_MAX_HEADER_LEN);
    json_error_t je;
    /* json_loadb is length-bounded (no NUL terminator needed); duplicates would make a name
     * ambiguous, so they are rejected. */
    json_t *root = json_loadb(json, json_len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        /* mx_fail keeps the message one line (a name or excerpt may hold a newline) */
        return mx_fail(err, "header is not valid JSON (%.200s at byte %d)", je.text, je.position);
    }
    int rc = 0;
    if (!json_is_object(root)) {
        rc = mx_fail(err, "header is not a JSON object");
        goto out;
    }
    size_t n = json_object_size(root);
    if (n > ST_MAX_TENSORS) {
        rc = mx_fail(err, "header lists %zu entries (at most %d)", n, ST_MAX_TENSORS);
        goto out;
    }
    f->tensors = calloc(n ? n : 1, sizeof *f->tensors);
    if (!f->tensors) {
        rc = mx_fail(err, "header: out of memory");
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) {
            if (f->meta_keys) {
                rc = mx_fail(err, "header: duplicate __metadata__");
                goto out;
            }
            if ((rc = parse_metadata(f, val, err))) goto out;
            continue;
        }
        st_tensor *t = &f->tensors[f->n_tensors];
        memset(t, 0, sizeof *t);
        if (!*key) {
            rc = mx_fail(err, "header: tensor with an empty name");
            goto out;
        }
        t->name = st_strdup(key);
        if (!t->name) {
            rc = mx_fail(err, "header: out of memory");
            goto out;
        }
        f->n_tensors++;
        if ((rc = parse_tensor(t, val, data_len, err))) goto out;
    }
    qsort(f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, cmp_tensor_name);
    rc = check_overlaps(f, err);
out:
    json_decref(root);
    if (rc) {
        st_free_header(f);
    }
    return rc;
}

/* ==== Reader ==== */

int st_open(st_file *f, const char *path, mx_error *err) {
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mx_fail(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) < 0) {
        int e = errno;
        close(fd);
        return mx_fail(err, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return mx_fail(err, "%s: not a regular file", path);
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size < 8) { /* mmap of an empty file fails; report it as what it is */
        close(fd);
        return st_parse_buffer(f, "", (size_t)size, path, err);
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file alive */
    if (map == MAP_FAILED) return mx_fail(err, "%s: cannot mmap: %s", path, strerror(e));

    if (st_parse_buffer(f, map, (size_t)size, path, err)) {
        munmap(map, (size_t)size);
        return -1;
    }
    f->map = map;
    f->map_size = (size_t)size;
    f->path = st_strdup(path);
    if (!f->path) {
        st_close(f);
        return mx_fail(err, "%s: out of memory", path);
    }
    return 0;
}

int st_parse_buffer(st_file *f, const void *buf, size_t size, const char *name, mx_error *err) {
    memset(f, 0, sizeof *f);
    if (size < 8)
        return mx_fail(err, "%s: truncated: %zu bytes, shorter than the 8-byte header length", name,
                       size);
    const uint8_t *p = buf;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | p[i]; /* little-endian on any host */
    if (hlen > ST_MAX_HEADER_LEN)
        return mx_fail(err, "%s: header length %llu exceeds the %llu-byte cap", name,
                       (unsigned long long)hlen, ST_MAX_HEADER_LEN);
    if (hlen > size - 8)
        return mx_fail(err, "%s: header length %llu runs past the end of the %zu-byte file", name,
                       (unsigned long long)hlen, size);
    if (hlen < 2)
        return mx_fail(err, "%s: header length %llu is too short for a JSON object", name,
                       (unsigned long long)hlen);
    if (st_parse_header(f, (const char *)p + 8, (size_t)hlen, size - 8 - hlen, err)) {
        mx_wrap(err, "%s", name);
        return -1;
    }
    f->header_len = hlen;
    f->data = p + 8 + hlen;
    for (int i = 0; i < f->n_tensors; i++) f->tensors[i].data = f->data + f->tensors[i].offset;
    return 0;
}

void st_close(st_file *f) {
    if (!f) return;
    st_free_header(f);
    if (f->map) munmap(f->map, f->map_size);
    free(f->path);
    memset(f, 0, sizeof *f);
}

const st_tensor *st_find(const st_file *f, const char *name) {
    if (!f || !name || !f->n_tensors) return NULL;
    st_tensor key = {.name = (char *)name};
    return bsearch(&key, f->tensors, (size_t)f->n_tensors, sizeof key, cmp_tensor_name);
}

const char *st_meta(const st_file *f, const char *key) {
    if (!f || !key) return NULL;
    for (int i = 0; i < f->n_meta; i++)
        if (!strcmp(f->meta_keys[i], key)) return f->meta_vals[i];
    return NULL;
}

/* ==== Writer ==== */

static int write_all(FILE *fp, const void *buf, size_t n) { return fwrite(buf, 1, n, fp) == n ? 0 : -1; }

int st_write(const char *path, const st_write_tensor *tensors, int n, const char *const *meta_keys,
             const char *const *meta_vals, int n_meta, mx_error *err) {
    json_t *root = json_object();
    if (!root) return mx_fail(err, "%s: out of memory", path);
    uint64_t off = 0;
    int rc = 0;
    char *hdr = NULL;
    FILE *fp = NULL;
    char tmp[4096];
    uint64_t *offs = calloc(n > 0 ? (size_t)n : 1, sizeof *offs);
    if (!offs) {
        rc = mx_fail(err, "%s: out of memory", path);
        goto out;
    }
    if (n_meta > 0) {
        json_t *m = json_object();
        for (int i = 0; i < n_meta; i++) json_object_set_new(m, meta_keys[i], json_string(meta_vals[i]));
        json_object_set_new(root, "__metadata__", m);
    }
    for (int i = 0; i < n; i++) {
        const st_write_tensor *t = &tensors[i];
        size_t esz = mx_dtype_size(t->dtype);
        if (!esz || t->ndim < 0 || t->ndim > ST_MAX_DIMS || !t->name || !strcmp(t->name, "__metadata__")) {
            rc = mx_fail(err, "%s: tensor %d ('%s'): invalid dtype, rank or name", path, i,
                         t->name ? t->name : "(null)");
            goto out;
        }
        if (json_object_get(root, t->name)) {
            rc = mx_fail(err, "%s: duplicate tensor name '%s'", path, t->name);
            goto out;
        }
        uint64_t nb = esz;
        json_t *shape = json_array();
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] < 0) {
                json_decref(shape);
                rc = mx_fail(err, "%s: tensor '%s': negative dimension", path, t->name);
                goto out;
            }
            nb *= (uint64_t)t->shape[d];
            json_array_append_new(shape, json_integer(t->shape[d]));
        }
        off = (off + 7) & ~7ull; /* 8-byte aligned so mapped data can be read in place */
        offs[i] = off;
        json_t *e = json_object();
        json_object_set_new(e, "dtype", json_string(mx_dtype_name(t->dtype)));
        json_object_set_new(e, "shape", shape);
        json_t *o = json_array();
        json_array_append_new(o, json_integer((json_int_t)off));
        json_array_append_new(o, json_integer((json_int_t)(off + nb)));
        json_object_set_new(e, "data_offsets", o);
        json_object_set_new(root, t->name, e);
        off += nb;
    }
    hdr = json_dumps(root, JSON_COMPACT);
    if (!hdr) {
        rc = mx_fail(err, "%s: cannot serialise the header", path);
        goto out;
    }
    /* Pad the header with spaces so the data section starts 8-byte aligned in the file. */
    size_t hl = strlen(hdr), padded = (hl + 7) & ~(size_t)7;
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    fp = fopen(tmp, "wb");
    if (!fp) {
        rc = mx_fail(err, "%s: cannot create: %s", tmp, strerror(errno));
        goto out;
    }
    uint8_t lenle[8];
    for (int i = 0; i < 8; i++) lenle[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    static const char spaces[8] = "        ";
    static const uint8_t zeros[8] = {0};
    if (write_all(fp, lenle, 8) || write_all(fp, hdr, hl) || write_all(fp, spaces, padded - hl)) goto ioerr;
    uint64_t pos = 0;
    for (int i = 0; i < n; i++) {
        const st_write_tensor *t = &tensors[i];
        uint64_t nb = mx_dtype_size(t->dtype);
        for (int d = 0; d < t->ndim; d++) nb *= (uint64_t)t->shape[d];
        if (offs[i] > pos && write_all(fp, zeros, (size_t)(offs[i] - pos))) goto ioerr;
        if (nb && write_all(fp, t->data, (size_t)nb)) goto ioerr;
        pos = offs[i] + nb;
    }
    if (fclose(fp)) {
        fp = NULL;
        goto ioerr;
    }
    fp = NULL;
    /* Write-then-rename: a crash never leaves a half-written file under the final name. */
    if (rename(tmp, path)) {
        rc = mx_fail(err, "%s: cannot rename from %s: %s", path, tmp, strerror(errno));
        unlink(tmp);
    }
    goto out;
ioerr:
    rc = mx_fail(err, "%s: write failed: %s", tmp, strerror(errno));
    if (fp) fclose(fp);
    unlink(tmp);
out:
    free(offs);
    free(hdr);
    json_decref(root);
    return rc;
}
