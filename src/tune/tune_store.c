#include "tune/tune_store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/env.h"

/* ==== File-access accounting ==== */
static long g_fs_calls;

/* Every filesystem call of this module goes through FS(), so the counter is complete. */
#define FS(call) (__atomic_add_fetch(&g_fs_calls, 1, __ATOMIC_RELAXED), (call))

long tune_store_fs_calls(void) { return __atomic_load_n(&g_fs_calls, __ATOMIC_RELAXED); }

/* ==== Keys and paths ==== */
void tune_key_string(const tune_key *k, char *buf, size_t n) {
    snprintf(buf, n, "%s|%s|%s|%s", k->op, k->device, k->bucket, k->dtype);
}

void tune_key_filename(const tune_key *k, char *buf, size_t n) {
    char s[640];
    tune_key_string(k, s, sizeof s);
    const XXH64_hash_t h = XXH64(s, strlen(s), 0);
    snprintf(buf, n, "%s-%016" PRIx64 ".json", k->op, (uint64_t)h);
}

void tune_store_dir(char *buf, size_t n) { snprintf(buf, n, "%s/autotune", mx_env()->cache_dir); }

/* ==== Write ==== */
static int mkdir_p(const char *dir, mx_error *err) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s", dir) >= (int)sizeof tmp)
        return mx_fail(err, "cache directory path too long: %s", dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (FS(mkdir(tmp, 0755)) && errno != EEXIST)
            return mx_fail(err, "cannot create %s: %s", tmp, strerror(errno));
        *p = '/';
    }
    if (FS(mkdir(tmp, 0755)) && errno != EEXIST)
        return mx_fail(err, "cannot create %s: %s", tmp, strerror(errno));
    return 0;
}

static json_t *record_to_json(const tune_record *r) {
    json_t *o = json_object();
    json_object_set_new(o, "schema", json_integer(TUNE_SCHEMA_VERSION));
    json_object_set_new(o, "mlxcel_version", json_string(MLXCEL_VERSION));
    json_t *k = json_object();
    json_object_set_new(k, "op", json_string(r->key.op));
    json_object_set_new(k, "device", json_string(r->key.device));
    json_object_set_new(k, "bucket", json_string(r->key.bucket));
    json_object_set_new(k, "dtype", json_string(r->key.dtype));
    json_object_set_new(o, "key", k);
    json_object_set_new(o, "value", json_integer(r->value));
    json_object_set_new(o, "default", json_integer(r->default_value));
    json_object_set_new(o, "best_us", json_real(r->best_us));
    json_object_set_new(o, "spread_us", json_real(r->spread_us));
    json_object_set_new(o, "default_us", json_real(r->default_us));
    json_object_set_new(o, "speedup", json_real(r->speedup));
    json_object_set_new(o, "reps", json_integer(r->reps));
    json_object_set_new(o, "created", json_integer(r->created ? r->created : (int64_t)time(NULL)));
    return o;
}

static int write_all(int fd, const char *s, size_t n) {
    while (n) {
        const ssize_t w = FS(write(fd, s, n));
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

int tune_store_write(const char *dir, const tune_record *r, mx_error *err) {
    if (mkdir_p(dir, err)) return -1;
    char name[128], path[4352], tmp[4352];
    tune_key_filename(&r->key, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    /* The temp file lives in the same directory so rename() is atomic: a reader sees the old
     * record or the new one, never half of one. */
    static int seq;
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp.%ld.%d", dir, name, (long)getpid(),
             __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED));
    json_t *o = record_to_json(r);
    char *text = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(o);
    if (!text) return mx_fail(err, "cannot serialise the record for %s", path);
    int fd = FS(open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (fd < 0) {
        mx_fail(err, "cannot create %s: %s", tmp, strerror(errno));
        free(text);
        return -1;
    }
    int rc = write_all(fd, text, strlen(text)) || write_all(fd, "\n", 1) ? -1 : 0;
    if (rc) mx_fail(err, "cannot write %s: %s", tmp, strerror(errno));
    if (!rc && FS(fsync(fd))) rc = mx_fail(err, "cannot fsync %s: %s", tmp, strerror(errno));
    if (FS(close(fd)) && !rc) rc = mx_fail(err, "cannot close %s: %s", tmp, strerror(errno));
    free(text);
    if (!rc && FS(rename(tmp, path))) rc = mx_fail(err, "cannot rename %s -> %s: %s", tmp, path,
                                                   strerror(errno));
    if (rc) {
        FS(unlink(tmp));
        return -1;
    }
    /* Persist the directory entry too, so a crash right after cannot lose the rename. */
    int dfd = FS(open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (dfd >= 0) {
        FS(fsync(dfd));
        FS(close(dfd));
    }
    return 0;
}

/* ==== Read ==== */
static int get_str(json_t *o, const char *k, const char **out) {
    json_t *v = json_object_get(o, k);
    if (!json_is_string(v)) return -1;
    *out = json_string_value(v);
    return 0;
}

static int get_num(json_t *o, const char *k, double *out) {
    json_t *v = json_object_get(o, k);
    if (!json_is_number(v)) return -1;
    *out = json_number_value(v);
    return 0;
}

int tune_store_read(const char *dir, const tune_key *k, tune_record *out, mx_error *err) {
    char name[128], path[4352];
    tune_key_filename(k, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = FS(fopen(path, "rb"));
    if (!f) {
        if (errno == ENOENT || errno == ENOTDIR) return TUNE_READ_MISSING;
        mx_fail(err, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    json_error_t je;
    json_t *o = FS(json_loadf(f, JSON_REJECT_DUPLICATES, &je));
    FS(fclose(f));
    if (!o) {
        mx_fail(err, "%s: corrupt record (%s, line %d)", path, je.text, je.line);
        return TUNE_READ_IGNORED;
    }
    int rc = TUNE_READ_IGNORED;
    json_t *schema = json_object_get(o, "schema");
    const char *ver = NULL;
    if (!json_is_object(o) || !json_is_integer(schema) || get_str(o, "mlxcel_version", &ver)) {
        mx_fail(err, "%s: corrupt record (expected an object with \"schema\" and "
                     "\"mlxcel_version\")", path);
        goto out;
    }
    if (json_integer_value(schema) != TUNE_SCHEMA_VERSION) {
        mx_fail(err, "%s: stale record (schema %" JSON_INTEGER_FORMAT ", this build reads %d)",
                path, json_integer_value(schema), TUNE_SCHEMA_VERSION);
        goto out;
    }
    if (strcmp(ver, MLXCEL_VERSION)) {
        mx_fail(err, "%s: stale record (written by mlxcel %s, this is %s); run mlxcel tune again",
                path, ver, MLXCEL_VERSION);
        goto out;
    }
    json_t *key = json_object_get(o, "key");
    const char *op, *dev, *bucket, *dtype;
    if (!json_is_object(key) || get_str(key, "op", &op) || get_str(key, "device", &dev) ||
        get_str(key, "bucket", &bucket) || get_str(key, "dtype", &dtype)) {
        mx_fail(err, "%s: corrupt record (field \"key\" must hold strings op, device, bucket, "
                     "dtype)", path);
        goto out;
    }
    if (strcmp(op, k->op) || strcmp(dev, k->device) || strcmp(bucket, k->bucket) ||
        strcmp(dtype, k->dtype)) {
        mx_fail(err, "%s: record belongs to another key (%s|%s|%s|%s)", path, op, dev, bucket,
                dtype);
        goto out;
    }
    json_t *val = json_object_get(o, "value"), *def = json_object_get(o, "default");
    if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) > 4096 ||
        !json_is_integer(def)) {
        mx_fail(err, "%s: corrupt record (fields \"value\" and \"default\" must be integers, "
                     "value in [0, 4096])", path);
        goto out;
    }
    memset(out, 0, sizeof *out);
    out->key = *k;
    out->value = (int)json_integer_value(val);
    out->default_value = (int)json_integer_value(def);
    double reps = 0, created = 0;
    /* Measurements are informational: missing ones read 0 rather than rejecting the winner. */
    get_num(o, "best_us", &out->best_us);
    get_num(o, "spread_us", &out->spread_us);
    get_num(o, "default_us", &out->default_us);
    get_num(o, "speedup", &out->speedup);
    get_num(o, "reps", &reps);
    get_num(o, "created", &created);
    /* A count no int64 / int holds (a hand-edited file) reads 0: the cast would be undefined. */
    out->reps = reps >= 0 && reps <= INT_MAX ? (int)reps : 0;
    out->created = created > -9.2e18 && created < 9.2e18 ? (int64_t)created : 0;
    rc = TUNE_READ_OK;
out:
    json_decref(o);
    return rc;
}
