/* mlxcel tune: argument parsing and printing around src/tune (profiler, matrix, record store). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "cli/cli.h"
#include "model/model_spec.h"
#include "tune/tune_ops.h"
#include "tune/tune_policy.h"
#include "tune/tune_runner.h"
#include "tune/tune_store.h"

#define MAX_LIST 32
#define MAX_POINTS 256

typedef struct tune_args {
    bool dry_run, json, ops_given[TUNE_OP_COUNT], any_op;
    const char *model_dir, *device;
    int head_dim, q_heads, kv_heads, block_size; /* 0 = from -m or the default */
    int batches[MAX_LIST], n_batches;
    int contexts[MAX_LIST], n_contexts;
    tune_profile_opts prof;
} tune_args;

/* ==== Usage ==== */
static void usage(FILE *out) {
    fprintf(out,
        "usage: mlxcel tune [options]\n\n"
        "Profiles launch candidates of the tunable ops and stores the winners under\n"
        "${MLXCEL_CACHE_DIR:-$HOME/.cache/mlxcel}/autotune. Inference uses them only with\n"
        "MLXCEL_AUTOTUNE=cache or 1 (see docs/tuning.md).\n\n"
        "options:\n"
        "  --dry-run               print the matrix (op x batch x context x candidates), no profiling\n"
        "  --op NAME               paged-decode-splits | qmm-tile | qmv-multirow; repeatable or\n"
        "                          comma-separated (default: every op the device supports:\n"
        "                          cpu: paged-decode-splits; cuda: all three)\n"
        "  -m, --model DIR         head geometry (and quantization) from DIR/config.json\n"
        "  --head-dim N            attention head dimension (128)\n"
        "  --q-heads N             query heads (32)\n"
        "  --kv-heads N            key/value heads (8)\n"
        "  --block-size N          paged KV block size in tokens (16)\n"
        "  --batch-sizes LIST      decode batch sizes (1,2,4,8)\n"
        "  --context-lengths LIST  context lengths (1024,4096,16384)\n"
        "  --warmup N              warm-up runs per candidate, at least (3)\n"
        "  --warmup-ms MS          warm-up time per candidate, at least (20)\n"
        "  --reps N                samples per candidate, at least (5)\n"
        "  --max-reps N            samples per candidate, at most (50)\n"
        "  --sample-ms MS          sampling time per candidate; sets the sample count (200)\n"
        "  --min-improvement F     relative gain a candidate needs over the default (0.02)\n"
        "  --device cuda|cpu       device to tune (default: cpu); cuda needs a build with CUDA\n"
        "                          and a GPU (--dry-run --device cuda shows its matrix without)\n"
        "  --json                  machine-readable output on stdout\n"
        "  -h, --help              this help\n\n"
        "Batch and context values snap to the record grid (batch: powers of 2; context: powers\n"
        "of 4 from 256). A candidate replaces the default only when it is faster by more than\n"
        "max(min-improvement, combined relative spread) and its output matches the default's.\n");
}

/* ==== Parsing ==== */
static int parse_int(const char *opt, const char *s, int lo, int hi, int *out) {
    char *end = NULL;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || *end || v < lo || v > hi) {
        fprintf(stderr, "mlxcel tune: %s expects an integer in [%d, %d], got '%s'\n", opt, lo, hi,
                s ? s : "");
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int parse_double(const char *opt, const char *s, double lo, double hi, double *out) {
    char *end = NULL;
    double v = s ? strtod(s, &end) : 0;
    if (!s || !*s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "mlxcel tune: %s expects a number in [%g, %g], got '%s'\n", opt, lo, hi,
                s ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_list(const char *opt, const char *s, int hi, int *out, int *n) {
    *n = 0;
    char buf[1024];
    if (!s || snprintf(buf, sizeof buf, "%s", s) >= (int)sizeof buf) {
        fprintf(stderr, "mlxcel tune: %s expects a comma-separated list\n", opt);
        return -1;
    }
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_LIST) {
            fprintf(stderr, "mlxcel tune: %s takes at most %d values\n", opt, MAX_LIST);
            return -1;
        }
        if (parse_int(opt, t, 1, hi, &out[(*n)++])) return -1;
    }
    if (!*n) {
        fprintf(stderr, "mlxcel tune: %s expects at least one value\n", opt);
        return -1;
    }
    return 0;
}

static int parse_ops(const char *s, tune_args *a) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        tune_op op;
        if (tune_op_from_name(t, &op)) {
            fprintf(stderr, "mlxcel tune: unknown --op '%s' (paged-decode-splits, qmm-tile, "
                            "qmv-multirow)\n", t);
            return -1;
        }
        a->ops_given[op] = a->any_op = true;
    }
    return 0;
}

/* Returns 0 to go on, 1 after --help, -1 on a bad argument. */
static int parse_args(int argc, char **argv, tune_args *a) {
    memset(a, 0, sizeof *a);
    a->prof = tune_profile_defaults();
    static const int def_b[] = {1, 2, 4, 8}, def_c[] = {1024, 4096, 16384};
    memcpy(a->batches, def_b, sizeof def_b), a->n_batches = 4;
    memcpy(a->contexts, def_c, sizeof def_c), a->n_contexts = 3;
    for (int i = 1; i < argc; i++) {
        char *arg = argv[i], *val = NULL, name[64];
        /* --opt=value and --opt value */
        const char *eq = !strncmp(arg, "--", 2) ? strchr(arg, '=') : NULL;
        if (eq) {
            snprintf(name, sizeof name, "%.*s", (int)(eq - arg), arg);
            val = (char *)eq + 1;
        } else {
            snprintf(name, sizeof name, "%s", arg);
        }
#define FLAG(s) (!strcmp(name, s))
#define VALUE() (val ? val : (i + 1 < argc ? argv[++i] : NULL))
        if (FLAG("-h") || FLAG("--help")) {
            usage(stdout);
            return 1;
        } else if (FLAG("--dry-run")) a->dry_run = true;
        else if (FLAG("--json")) a->json = true;
        else if (FLAG("--op")) {
            const char *v = VALUE();
            if (!v) return fprintf(stderr, "mlxcel tune: --op needs a value\n"), -1;
            if (parse_ops(v, a)) return -1;
        } else if (FLAG("-m") || FLAG("--model")) {
            if (!(a->model_dir = VALUE())) return fprintf(stderr, "mlxcel tune: -m needs a dir\n"), -1;
        } else if (FLAG("--device")) {
            a->device = VALUE();
            if (!a->device || (strcmp(a->device, "cuda") && strcmp(a->device, "cpu")))
                return fprintf(stderr, "mlxcel tune: --device expects cuda or cpu\n"), -1;
        } else if (FLAG("--head-dim")) { if (parse_int(name, VALUE(), 1, 1024, &a->head_dim)) return -1; }
        else if (FLAG("--q-heads")) { if (parse_int(name, VALUE(), 1, 1024, &a->q_heads)) return -1; }
        else if (FLAG("--kv-heads")) { if (parse_int(name, VALUE(), 1, 1024, &a->kv_heads)) return -1; }
        else if (FLAG("--block-size")) { if (parse_int(name, VALUE(), 1, 4096, &a->block_size)) return -1; }
        else if (FLAG("--batch-sizes")) { if (parse_list(name, VALUE(), 1024, a->batches, &a->n_batches)) return -1; }
        else if (FLAG("--context-lengths")) { if (parse_list(name, VALUE(), 1 << 20, a->contexts, &a->n_contexts)) return -1; }
        else if (FLAG("--warmup")) { if (parse_int(name, VALUE(), 0, 100000, &a->prof.warmup)) return -1; }
        else if (FLAG("--warmup-ms")) { if (parse_double(name, VALUE(), 0, 600000, &a->prof.warmup_ms)) return -1; }
        else if (FLAG("--reps")) { if (parse_int(name, VALUE(), 1, 100000, &a->prof.min_reps)) return -1; }
        else if (FLAG("--max-reps")) { if (parse_int(name, VALUE(), 1, 100000, &a->prof.max_reps)) return -1; }
        else if (FLAG("--sample-ms")) { if (parse_double(name, VALUE(), 0, 600000, &a->prof.sample_ms)) return -1; }
        else if (FLAG("--min-improvement")) { if (parse_double(name, VALUE(), 0, 10, &a->prof.min_improvement)) return -1; }
        else {
            fprintf(stderr, "mlxcel tune: unknown option '%s' (see mlxcel tune --help)\n", arg);
            return -1;
        }
#undef FLAG
#undef VALUE
    }
    if (a->prof.max_reps < a->prof.min_reps) {
        fprintf(stderr, "mlxcel tune: --max-reps %d is below --reps %d\n", a->prof.max_reps,
                a->prof.min_reps);
        return -1;
    }
    return 0;
}

/* ==== Set-up: device, geometry, matrix ==== */
static char g_dev_err[1024]; /* why the CUDA device is unusable */

/* The device to tune. A CUDA dry run works without a GPU (placeholder device, 132 SMs);
 * *have_gpu says whether profiling can run. */
static void setup_device(const tune_args *a, tune_device *dev, bool *have_gpu) {
    const bool cuda = a->device && !strcmp(a->device, "cuda");
    *have_gpu = false;
    if (!cuda) {
        tune_device_cpu(dev);
        return;
    }
    mx_error err;
    *have_gpu = tune_device_cuda(dev, &err) == 0;
    if (!*have_gpu && a->dry_run)
        LOG_INFO("tune: %s; the matrix uses a placeholder device (%d SMs)", err.msg,
                 TUNE_CUDA_DEFAULT_SMS);
    if (!*have_gpu) snprintf(g_dev_err, sizeof g_dev_err, "%s", err.msg);
}

/* -m DIR: the geometry of the model's config.json, read by the one config parser every
 * command uses (spec_load: text_config first, head_dim implied, quantization block). */
static int geom_from_model(const char *dir, tune_geom *g, mx_error *err) {
    model_spec *s = malloc(sizeof *s); /* tens of KB of per-layer tables */
    if (!s) return mx_fail(err, "out of memory");
    if (spec_load(s, dir, err)) {
        free(s);
        return -1;
    }
    g->q_heads = s->n_heads;
    g->kv_heads = s->n_kv_heads;
    g->head_dim = s->head_dim;
    g->hidden = s->hidden_size;
    if (s->intermediate_size > 0) g->intermediate = s->intermediate_size;
    if (s->quant.bits) {
        g->q_bits = s->quant.bits;
        g->q_group = s->quant.group_size;
    }
    free(s);
    return 0;
}

static int setup_geom(const tune_args *a, tune_geom *g) {
    *g = tune_geom_defaults();
    mx_error err;
    if (a->model_dir && geom_from_model(a->model_dir, g, &err)) {
        fprintf(stderr, "mlxcel tune: %s\n", err.msg);
        return -1;
    }
    if (a->head_dim) g->head_dim = a->head_dim;
    if (a->q_heads) g->q_heads = a->q_heads;
    if (a->kv_heads) g->kv_heads = a->kv_heads;
    if (a->block_size) g->block_size = a->block_size;
    if (tune_geom_check(g, &err)) {
        fprintf(stderr, "mlxcel tune: geometry: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static void note_snapping(const tune_args *a) {
    for (int i = 0; i < a->n_batches; i++)
        if (tune_bucket_batch(a->batches[i]) != a->batches[i])
            LOG_INFO("tune: batch %d snaps to bucket %d", a->batches[i],
                     tune_bucket_batch(a->batches[i]));
    for (int i = 0; i < a->n_contexts; i++)
        if (tune_bucket_context(a->contexts[i]) != a->contexts[i])
            LOG_INFO("tune: context %d snaps to bucket %d", a->contexts[i],
                     tune_bucket_context(a->contexts[i]));
}

/* Every selected (or supported) op's matrix, concatenated. A dry run lists every op the
 * device kind has; a real run only those this build can profile: an op asked for by --op that
 * cannot be profiled is an error, one implied by the default is skipped with a note. */
static int build_matrix(const tune_args *a, const tune_device *dev, const tune_geom *g,
                        tune_point *pts, int *n) {
    *n = 0;
    for (int op = 0; op < TUNE_OP_COUNT; op++) {
        if (a->any_op && !a->ops_given[op]) continue;
        if (!tune_op_supported((tune_op)op, dev->kind)) {
            if (!a->any_op) continue;
            fprintf(stderr, "mlxcel tune: %s is CUDA-only; on the cpu only paged-decode-splits "
                            "is tunable\n", tune_op_name((tune_op)op));
            return -1;
        }
        const char *why = NULL;
        if (!tune_op_available((tune_op)op, dev->kind, &why)) {
            if (a->dry_run) {
                LOG_INFO("tune: %s: %s (listed, not tunable by this build)",
                         tune_op_name((tune_op)op), why);
            } else if (a->any_op) {
                fprintf(stderr, "mlxcel tune: --op %s: %s\n", tune_op_name((tune_op)op), why);
                return -1;
            } else {
                LOG_INFO("tune: skipping %s: %s", tune_op_name((tune_op)op), why);
                continue;
            }
        }
        int m = 0;
        mx_error err;
        if (tune_matrix_build((tune_op)op, dev, g, a->batches, a->n_batches, a->contexts,
                              a->n_contexts, pts + *n, MAX_POINTS - *n, &m, &err)) {
            fprintf(stderr, "mlxcel tune: %s: %s\n", tune_op_name((tune_op)op), err.msg);
            return -1;
        }
        *n += m;
    }
    if (*n == 0 && !a->dry_run) {
        fprintf(stderr, "mlxcel tune: nothing to tune on %s\n", tune_device_kind_name(dev->kind));
        return -1;
    }
    return 0;
}

/* ==== Printing ==== */
static json_t *json_axis(int v) { return v > 0 ? json_integer(v) : json_null(); }

static json_t *json_header(const tune_device *dev, const tune_geom *g, bool dry) {
    json_t *o = json_object();
    json_object_set_new(o, "dry_run", json_boolean(dry));
    json_object_set_new(o, "mlxcel_version", json_string(MLXCEL_VERSION));
    json_t *d = json_object();
    json_object_set_new(d, "kind", json_string(tune_device_kind_name(dev->kind)));
    json_object_set_new(d, "id", json_string(dev->id));
    json_object_set_new(o, "device", d);
    json_t *ge = json_object();
    json_object_set_new(ge, "head_dim", json_integer(g->head_dim));
    json_object_set_new(ge, "q_heads", json_integer(g->q_heads));
    json_object_set_new(ge, "kv_heads", json_integer(g->kv_heads));
    json_object_set_new(ge, "block_size", json_integer(g->block_size));
    json_object_set_new(ge, "hidden", json_integer(g->hidden));
    json_object_set_new(ge, "intermediate", json_integer(g->intermediate));
    json_object_set_new(ge, "q_bits", json_integer(g->q_bits));
    json_object_set_new(ge, "q_group", json_integer(g->q_group));
    json_object_set_new(o, "geometry", ge);
    char dir[1100];
    tune_store_dir(dir, sizeof dir);
    json_object_set_new(o, "cache_dir", json_string(dir));
    return o;
}

static json_t *json_point(const tune_point *p, const tune_device *dev) {
    json_t *o = json_object();
    json_object_set_new(o, "op", json_string(tune_op_name(p->op)));
    json_object_set_new(o, "batch", json_axis(p->batch));
    json_object_set_new(o, "context", json_axis(p->context));
    json_object_set_new(o, "bucket", json_string(p->bucket));
    json_object_set_new(o, "dtype", json_string(tune_point_dtype(p, dev)));
    json_object_set_new(o, "default", json_integer(p->default_value));
    json_t *c = json_array();
    for (int i = 0; i < p->n_cand; i++) json_array_append_new(c, json_integer(p->cand[i]));
    json_object_set_new(o, "candidates", c);
    return o;
}

static void print_json(json_t *o) {
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (s) puts(s);
    free(s);
}

static const char *axis_str(int v, char buf[16]) {
    if (v <= 0) return "-";
    snprintf(buf, 16, "%d", v);
    return buf;
}

static void print_header(const tune_device *dev, const tune_geom *g) {
    printf("device %s\ngeometry: head_dim %d, q_heads %d, kv_heads %d, block_size %d; "
           "qmat %dx%d, %d-bit group %d\n",
           dev->id, g->head_dim, g->q_heads, g->kv_heads, g->block_size, g->intermediate,
           g->hidden, g->q_bits, g->q_group);
}

static int dry_run(const tune_args *a, const tune_device *dev, const tune_geom *g,
                   const tune_point *pts, int n) {
    if (a->json) {
        json_t *o = json_header(dev, g, true);
        json_t *m = json_array();
        for (int i = 0; i < n; i++) json_array_append_new(m, json_point(&pts[i], dev));
        json_object_set_new(o, "matrix", m);
        print_json(o);
        json_decref(o);
        return 0;
    }
    print_header(dev, g);
    printf("%-20s %6s %8s  %-32s %7s  %s\n", "op", "batch", "context", "bucket", "default",
           "candidates");
    long runs = 0;
    for (int i = 0; i < n; i++) {
        const tune_point *p = &pts[i];
        char b1[16], b2[16], b3[16], cands[256] = "";
        for (int j = 0; j < p->n_cand; j++) {
            char vb[16];
            snprintf(cands + strlen(cands), sizeof cands - strlen(cands), "%s%s", j ? "," : "",
                     tune_value_str(p->cand[j], vb));
        }
        printf("%-20s %6s %8s  %-32s %7s  %s\n", tune_op_name(p->op), axis_str(p->batch, b1),
               axis_str(p->context, b2), p->bucket, tune_value_str(p->default_value, b3), cands);
        runs += p->n_cand;
    }
    printf("%d points, %ld candidates (dry run: nothing profiled, nothing written)\n", n, runs);
    return 0;
}

/* ==== Profiling ==== */
static json_t *json_result(const tune_point *p, const tune_device *dev,
                           const tune_profile_result *r, const tune_record *rec, const char *file) {
    json_t *o = json_point(p, dev);
    const tune_cand_result *sel = &r->c[r->selected_idx];
    json_object_set_new(o, "selected", json_integer(sel->value));
    json_object_set_new(o, "best_us", json_real(rec->best_us));
    json_object_set_new(o, "spread_us", json_real(rec->spread_us));
    json_object_set_new(o, "reps", json_integer(rec->reps));
    json_object_set_new(o, "speedup", json_real(r->speedup));
    json_object_set_new(o, "record", file ? json_string(file) : json_null());
    json_t *cs = json_array();
    for (int i = 0; i < r->n; i++) {
        const tune_cand_result *c = &r->c[i];
        json_t *e = json_object();
        json_object_set_new(e, "value", json_integer(c->value));
        json_object_set_new(e, "median_us", json_real(c->stat.median * 1e6));
        json_object_set_new(e, "spread_us", json_real(c->stat.spread * 1e6));
        json_object_set_new(e, "reps", json_integer(c->stat.n));
        json_object_set_new(e, "checked", json_boolean(c->checked));
        json_object_set_new(e, "check_rel_err", json_real(c->check_err));
        json_object_set_new(e, "gain", json_real(i == r->default_idx ? 0.0 : c->gain));
        json_object_set_new(e, "improves", json_boolean(c->improves));
        json_array_append_new(cs, e);
    }
    json_object_set_new(o, "candidates_measured", cs);
    return o;
}

static void print_table_header(tune_op op, const tune_device *dev, const tune_point *p) {
    printf("\n%s on %s (%s)\n", tune_op_name(op), dev->id, tune_point_dtype(p, dev));
    printf("%6s %8s %8s %9s %11s %10s %6s %8s\n", "batch", "context", "default", "selected",
           "best_us", "spread_us", "reps", "speedup");
}

static int run_all(const tune_args *a, const tune_device *dev, const tune_geom *g,
                   const tune_point *pts, int n) {
    char dir[1100];
    tune_store_dir(dir, sizeof dir);
    json_t *out = a->json ? json_header(dev, g, false) : NULL, *results = json_array();
    if (!a->json) print_header(dev, g);
    int failed = 0;
    for (int i = 0; i < n; i++) {
        const tune_point *p = &pts[i];
        if (!a->json && (i == 0 || pts[i - 1].op != p->op)) print_table_header(p->op, dev, p);
        fflush(stdout);
        LOG_INFO("tune: %s %s (%d candidates)", tune_op_name(p->op), p->bucket, p->n_cand);
        tune_profile_result r;
        tune_record rec;
        mx_error err;
        if (tune_run_point(p, dev, g, &a->prof, &r, &rec, &err)) {
            fprintf(stderr, "mlxcel tune: %s\n", err.msg);
            failed++;
            continue;
        }
        for (int j = 0; j < r.n; j++)
            if (!r.c[j].checked)
                LOG_WARN("tune: %s %s: candidate %d rejected, output differs from the default's "
                         "(relative error %.3g)", tune_op_name(p->op), p->bucket, r.c[j].value,
                         r.c[j].check_err);
        char file[1400] = "", fname[128];
        if (tune_store_write(dir, &rec, &err)) {
            fprintf(stderr, "mlxcel tune: %s\n", err.msg);
            failed++;
        } else {
            tune_key_filename(&rec.key, fname, sizeof fname);
            snprintf(file, sizeof file, "%s/%s", dir, fname);
        }
        if (a->json) {
            json_array_append_new(results, json_result(p, dev, &r, &rec, *file ? file : NULL));
        } else {
            char b1[16], b2[16], b3[16], b4[16];
            printf("%6s %8s %8s %9s %11.1f %10.1f %6d %7.3fx\n", axis_str(p->batch, b1),
                   axis_str(p->context, b2), tune_value_str(p->default_value, b3),
                   tune_value_str(rec.value, b4), rec.best_us, rec.spread_us, rec.reps,
                   r.speedup);
        }
    }
    if (a->json) {
        json_object_set_new(out, "results", results);
        json_object_set_new(out, "failed", json_integer(failed));
        print_json(out);
        json_decref(out);
    } else {
        json_decref(results);
        printf("\nrecords in %s (applied with MLXCEL_AUTOTUNE=cache or 1)%s\n", dir,
               failed ? "; some points failed, see above" : "");
    }
    return failed ? 1 : 0;
}

/* ==== Entry ==== */
int cmd_tune(int argc, char **argv) {
    tune_args a;
    const int pr = parse_args(argc, argv, &a);
    if (pr) return pr > 0 ? 0 : 2;
    tune_device dev;
    tune_geom g;
    bool have_gpu;
    setup_device(&a, &dev, &have_gpu);
    if (setup_geom(&a, &g)) return 2;
    note_snapping(&a);
    static tune_point pts[MAX_POINTS];
    int n = 0;
    if (!a.dry_run && dev.kind == TUNE_DEV_CUDA && !tune_can_profile(TUNE_DEV_CUDA)) {
        fprintf(stderr, "mlxcel tune: the CUDA tuner is not available: this build has no CUDA "
                        "backend (configure with -DMLXCEL_CUDA=ON); --dry-run --device cuda "
                        "prints the matrix\n");
        return 2;
    }
    if (build_matrix(&a, &dev, &g, pts, &n)) return 2;
    if (a.dry_run) return dry_run(&a, &dev, &g, pts, n);
    if (dev.kind == TUNE_DEV_CUDA && !have_gpu) {
        fprintf(stderr, "mlxcel tune: the CUDA tuner is not available: %s\n", g_dev_err);
        return 2;
    }
    return run_all(&a, &dev, &g, pts, n);
}
