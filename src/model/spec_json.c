/* Typed config.json access, RoPE and MLX quantization parsing for spec.c. */
#include "model/spec_json.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ==== Typed access ==== */

static const char *json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

json_t *cfg_get(const spec_cfg *c, const char *key, const char **where) {
    json_t *v = NULL;
    if (c->text && (v = json_object_get(c->text, key)) && !json_is_null(v)) {
        if (where) *where = "text_config.";
        return v;
    }
    v = json_object_get(c->top, key);
    if (where) *where = "";
    return (v && !json_is_null(v)) ? v : NULL;
}

bool cfg_has(const spec_cfg *c, const char *key) { return cfg_get(c, key, NULL) != NULL; }

/* Shared by the top-level and object variants: `v` may be NULL (absent). */
static int check_int(const spec_cfg *c, json_t *v, const char *where, const char *key,
                     bool required, long long def, long long lo, long long hi, long long *out) {
    if (!v || json_is_null(v)) {
        if (required)
            return mx_fail(c->err, "%s: missing required field '%s%s'", c->origin,
                           c->text && !*where ? "text_config." : where, key);
        *out = def;
        return 0;
    }
    long long x;
    if (json_is_integer(v)) {
        x = (long long)json_integer_value(v);
    } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
               fabs(json_real_value(v)) < 9e15) {
        x = (long long)json_real_value(v);
    } else {
        return mx_fail(c->err, "%s: field '%s%s' must be an integer, got %s", c->origin, where, key,
                       json_kind(v));
    }
    if (x < lo || x > hi)
        return mx_fail(c->err, "%s: field '%s%s' = %lld is out of range [%lld, %lld]", c->origin,
                       where, key, x, lo, hi);
    *out = x;
    return 0;
}

static int check_num(const spec_cfg *c, json_t *v, const char *where, const char *key,
                     bool required, double def, double lo, double hi, double *out) {
    if (!v || json_is_null(v)) {
        if (required)
            return mx_fail(c->err, "%s: missing required field '%s%s'", c->origin, where, key);
        *out = def;
        return 0;
    }
    if (!json_is_number(v))
        return mx_fail(c->err, "%s: field '%s%s' must be a number, got %s", c->origin, where, key,
                       json_kind(v));
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) /* also rejects NaN */
        return mx_fail(c->err, "%s: field '%s%s' = %g is out of range [%g, %g]", c->origin, where,
                       key, x, lo, hi);
    *out = x;
    return 0;
}

int cfg_int(const spec_cfg *c, const char *key, bool required, long long def, long long lo,
            long long hi, long long *out) {
    const char *where;
    json_t *v = cfg_get(c, key, &where);
    return check_int(c, v, where, key, required, def, lo, hi, out);
}

int cfg_num(const spec_cfg *c, const char *key, double def, double lo, double hi, double *out) {
    const char *where;
    json_t *v = cfg_get(c, key, &where);
    return check_num(c, v, where, key, false, def, lo, hi, out);
}

int cfg_bool(const spec_cfg *c, const char *key, bool def, bool *out) {
    const char *where;
    json_t *v = cfg_get(c, key, &where);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v))
        return mx_fail(c->err, "%s: field '%s%s' must be true or false, got %s", c->origin, where,
                       key, json_kind(v));
    *out = json_is_true(v);
    return 0;
}

int cfg_str(const spec_cfg *c, const char *key, const char **out) {
    const char *where;
    json_t *v = cfg_get(c, key, &where);
    *out = NULL;
    if (!v) return 0;
    if (!json_is_string(v))
        return mx_fail(c->err, "%s: field '%s%s' must be a string, got %s", c->origin, where, key,
                       json_kind(v));
    *out = json_string_value(v);
    return 0;
}

int obj_int(const spec_cfg *c, json_t *obj, const char *path, const char *key, bool required,
            long long def, long long lo, long long hi, long long *out) {
    char where[200];
    snprintf(where, sizeof where, "%.190s.", path);
    return check_int(c, json_object_get(obj, key), where, key, required, def, lo, hi, out);
}

int obj_num(const spec_cfg *c, json_t *obj, const char *path, const char *key, bool required,
            double def, double lo, double hi, double *out) {
    char where[200];
    snprintf(where, sizeof where, "%.190s.", path);
    return check_num(c, json_object_get(obj, key), where, key, required, def, lo, hi, out);
}

/* ==== RoPE ==== */

/* Fills `r` from one rope parameter object (4.x rope_scaling or a 5.x rope_parameters entry).
 * `r` arrives holding the theta and partial factor inherited from the top level. */
static int rope_from_obj(const spec_cfg *c, json_t *o, const char *path, int max_pos, mx_rope *r) {
    if (!json_is_object(o))
        return mx_fail(c->err, "%s: field '%s' must be an object, got %s", c->origin, path,
                       json_kind(o));
    json_t *jt = json_object_get(o, "rope_type");
    if (!jt || json_is_null(jt)) jt = json_object_get(o, "type"); /* 4.x spelling */
    const char *type = "default";
    if (jt && !json_is_null(jt)) {
        if (!json_is_string(jt))
            return mx_fail(c->err, "%s: field '%s.rope_type' must be a string", c->origin, path);
        type = json_string_value(jt);
    }
    static const struct { const char *name; mx_rope_type t; } k_types[] = {
        {"default", ROPE_DEFAULT}, {"linear", ROPE_LINEAR}, {"dynamic", ROPE_DYNAMIC},
        {"yarn", ROPE_YARN},       {"llama3", ROPE_LLAMA3},
    };
    int found = -1;
    for (int i = 0; i < (int)(sizeof k_types / sizeof k_types[0]); i++)
        if (!strcmp(type, k_types[i].name)) found = i;
    if (found < 0)
        return mx_fail(c->err,
                       "%s: field '%s.rope_type' = '%.60s' is not supported (supported: default, "
                       "linear, dynamic, yarn, llama3)",
                       c->origin, path, type);
    r->type = k_types[found].t;
    if (obj_num(c, o, path, "rope_theta", false, r->theta, 1e-3, 1e12, &r->theta)) return -1;
    if (obj_num(c, o, path, "partial_rotary_factor", false, r->partial_rotary_factor, 1e-6, 1.0,
                &r->partial_rotary_factor))
        return -1;
    if (r->type == ROPE_DEFAULT) return 0;

    if (obj_num(c, o, path, "factor", true, 1.0, 1e-6, 1e6, &r->factor)) return -1;
    long long omp;
    bool need_omp = r->type == ROPE_LLAMA3;
    if (obj_int(c, o, path, "original_max_position_embeddings", need_omp, max_pos, 1, 1ll << 30,
                &omp))
        return -1;
    r->original_max_pos = (int)omp;
    if (r->type == ROPE_LLAMA3) {
        if (obj_num(c, o, path, "low_freq_factor", true, 1, 1e-6, 1e6, &r->low_freq_factor) ||
            obj_num(c, o, path, "high_freq_factor", true, 4, 1e-6, 1e6, &r->high_freq_factor))
            return -1;
        if (r->high_freq_factor <= r->low_freq_factor)
            return mx_fail(c->err, "%s: field '%s.high_freq_factor' must exceed low_freq_factor",
                           c->origin, path);
    }
    if (r->type == ROPE_YARN) {
        if (obj_num(c, o, path, "beta_fast", false, 32, 1e-6, 1e6, &r->beta_fast) ||
            obj_num(c, o, path, "beta_slow", false, 1, 1e-6, 1e6, &r->beta_slow) ||
            obj_num(c, o, path, "mscale", false, 0, 0, 1e6, &r->mscale) ||
            obj_num(c, o, path, "mscale_all_dim", false, 0, 0, 1e6, &r->mscale_all_dim) ||
            obj_num(c, o, path, "attention_factor", false, 0, 0, 1e6, &r->attention_factor))
            return -1;
        json_t *tr = json_object_get(o, "truncate");
        if (tr && !json_is_null(tr)) {
            if (!json_is_boolean(tr))
                return mx_fail(c->err, "%s: field '%s.truncate' must be true or false", c->origin,
                               path);
            r->truncate = json_is_true(tr);
        }
    }
    return 0;
}

static void rope_defaults(mx_rope *r, double theta, double partial) {
    memset(r, 0, sizeof *r);
    r->type = ROPE_DEFAULT;
    r->theta = theta;
    r->factor = 1.0;
    r->beta_fast = 32;
    r->beta_slow = 1;
    r->truncate = true;
    r->partial_rotary_factor = partial;
}

int spec_parse_rope(const spec_cfg *c, model_spec *s, double default_theta) {
    double theta, local_theta, partial;
    if (cfg_num(c, "rope_theta", default_theta, 1e-3, 1e12, &theta)) return -1;
    if (cfg_num(c, "partial_rotary_factor", 1.0, 1e-6, 1.0, &partial)) return -1;
    /* Gemma 3's sliding layers use their own base (4.x rope_local_base_freq). */
    if (cfg_num(c, "rope_local_base_freq", s->family == FAM_GEMMA3 ? 10000.0 : theta, 1e-3, 1e12,
                &local_theta))
        return -1;
    rope_defaults(&s->rope, theta, partial);
    rope_defaults(&s->rope_local, s->family == FAM_GEMMA3 ? local_theta : theta, partial);

    const char *where;
    json_t *rp = cfg_get(c, "rope_parameters", &where);
    json_t *rs = cfg_get(c, "rope_scaling", NULL);
    char path[160];
    if (rp) { /* transformers 5.x */
        if (!json_is_object(rp))
            return mx_fail(c->err, "%s: field '%srope_parameters' must be an object, got %s",
                           c->origin, where, json_kind(rp));
        json_t *full = json_object_get(rp, "full_attention");
        json_t *slide = json_object_get(rp, "sliding_attention");
        if (full || slide) { /* keyed per layer type */
            if (full) {
                snprintf(path, sizeof path, "%srope_parameters.full_attention", where);
                if (rope_from_obj(c, full, path, s->max_position_embeddings, &s->rope)) return -1;
            }
            if (slide) {
                snprintf(path, sizeof path, "%srope_parameters.sliding_attention", where);
                if (rope_from_obj(c, slide, path, s->max_position_embeddings, &s->rope_local))
                    return -1;
            } else if (s->family != FAM_GEMMA3) {
                s->rope_local = s->rope;
            }
        } else {
            snprintf(path, sizeof path, "%srope_parameters", where);
            if (rope_from_obj(c, rp, path, s->max_position_embeddings, &s->rope)) return -1;
            if (s->family != FAM_GEMMA3) s->rope_local = s->rope;
        }
    } else if (rs) { /* transformers 4.x: scaling applies to the global layers only */
        snprintf(path, sizeof path, "%srope_scaling", where);
        if (rope_from_obj(c, rs, path, s->max_position_embeddings, &s->rope)) return -1;
        if (s->family != FAM_GEMMA3) s->rope_local = s->rope;
    }
    return 0;
}

/* ==== MLX quantization ==== */

static int quant_check(const spec_cfg *c, const char *path, long long gs, long long bits) {
    if (bits != 2 && bits != 3 && bits != 4 && bits != 5 && bits != 6 && bits != 8)
        return mx_fail(c->err, "%s: field '%s.bits' = %lld is not supported (2, 3, 4, 5, 6, 8)",
                       c->origin, path, bits);
    if (gs != 32 && gs != 64 && gs != 128)
        return mx_fail(c->err,
                       "%s: field '%s.group_size' = %lld is not supported (32, 64, 128)",
                       c->origin, path, gs);
    return 0;
}

int spec_parse_quant(const spec_cfg *c, model_spec *s) {
    const char *qname = "quantization";
    json_t *q = json_object_get(c->top, "quantization");
    if (!q || json_is_null(q)) {
        qname = "quantization_config";
        q = json_object_get(c->top, "quantization_config");
    }
    s->quant.bits = 0;
    s->quant.group_size = 0;
    s->n_quant_overrides = 0;
    if (!q || json_is_null(q)) return 0;
    if (!json_is_object(q))
        return mx_fail(c->err, "%s: field '%s' must be an object, got %s", c->origin, qname,
                       json_kind(q));
    json_t *qm = json_object_get(q, "quant_method");
    if (!json_object_get(q, "bits") || !json_object_get(q, "group_size")) {
        if (json_is_string(qm))
            return mx_fail(c->err,
                           "%s: field '%s.quant_method' = '%.40s' is not supported (only MLX affine "
                           "quantization: {\"group_size\", \"bits\"})",
                           c->origin, qname, json_string_value(qm));
        return mx_fail(c->err, "%s: field '%s' needs integer \"group_size\" and \"bits\"",
                       c->origin, qname);
    }
    json_t *mode = json_object_get(q, "mode");
    if (mode && !json_is_null(mode) &&
        (!json_is_string(mode) || strcmp(json_string_value(mode), "affine")))
        return mx_fail(c->err, "%s: field '%s.mode' is not supported (only \"affine\")", c->origin,
                       qname);
    long long gs, bits;
    if (obj_int(c, q, qname, "group_size", true, 0, 1, 1 << 20, &gs) ||
        obj_int(c, q, qname, "bits", true, 0, 1, 64, &bits) || quant_check(c, qname, gs, bits))
        return -1;
    s->quant.bits = (int)bits;
    s->quant.group_size = (int)gs;

    /* Per-module entries: {"group_size", "bits"} or false (left unquantized). */
    const char *key;
    json_t *v;
    json_object_foreach(q, key, v) {
        bool is_obj = json_is_object(v);
        if (!is_obj && !json_is_false(v)) continue; /* group_size, bits, mode, ... */
        if (s->n_quant_overrides >= MX_MAX_QUANT_OVERRIDES)
            return mx_fail(c->err, "%s: field '%s' has more than %d per-module overrides",
                           c->origin, qname, MX_MAX_QUANT_OVERRIDES);
        mx_quant_override *o = &s->quant_overrides[s->n_quant_overrides];
        if (strlen(key) >= sizeof o->prefix)
            return mx_fail(c->err, "%s: field '%s.%.60s...' module path is too long", c->origin,
                           qname, key);
        memset(o, 0, sizeof *o);
        snprintf(o->prefix, sizeof o->prefix, "%s", key);
        if (is_obj) {
            char path[256];
            snprintf(path, sizeof path, "%s.%s", qname, key);
            long long ogs, obits;
            if (obj_int(c, v, path, "group_size", false, gs, 1, 1 << 20, &ogs) ||
                obj_int(c, v, path, "bits", false, bits, 1, 64, &obits) ||
                quant_check(c, path, ogs, obits))
                return -1;
            o->q.bits = (int)obits;
            o->q.group_size = (int)ogs;
        }
        s->n_quant_overrides++;
    }
    return 0;
}
