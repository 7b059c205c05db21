/* JSON Schema -> GBNF: the walk over a schema (types, objects, arrays, combinators, $ref).
 * Leaves (strings, numbers, primitives, the builder) are in json_schema_prim.c, `pattern` in
 * json_schema_regex.c. The shape of the rules follows llama.cpp's json_schema_to_grammar:
 * objects list required properties first (schema order), then optional ones in order, each
 * optional one free to be left out; not writing a property or an item the schema allows is
 * always valid, so an absent additionalProperties generates none. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/json_schema_internal.h"

/* ==== Errors and paths ==== */
/* Control characters (from property names or patterns) written as \xHH: one-line messages. */
static void escape_ctl(const char *in, char *out, size_t cap) {
    size_t n = 0;
    for (; *in && n + 5 < cap; in++) {
        unsigned char ch = (unsigned char)*in;
        if (ch < 0x20 || ch == 0x7F) n += (size_t)snprintf(out + n, cap - n, "\\x%02X", ch);
        else out[n++] = (char)ch;
    }
    out[n] = 0;
}

int jsc_fail(jsc *c, const char *fmt, ...) {
    char msg[800], m2[800], p2[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    escape_ctl(msg, m2, sizeof m2);
    escape_ctl(c->path[0] ? c->path : "/", p2, sizeof p2);
    return mx_fail(c->err, "schema at %s: %s", p2, m2);
}

/* Appends "/seg" (JSON pointer escaped); returns the old length for path_pop. */
size_t jsc_path_push(jsc *c, const char *seg) {
    size_t n = strlen(c->path), at = n;
    if (n + 2 < sizeof c->path) c->path[n++] = '/';
    for (const char *p = seg; *p && n + 3 < sizeof c->path; p++) {
        if (*p == '~') c->path[n++] = '~', c->path[n++] = '0';
        else if (*p == '/') c->path[n++] = '~', c->path[n++] = '1';
        else c->path[n++] = *p;
    }
    c->path[n] = 0;
    return at;
}

static size_t path_push_i(jsc *c, size_t i) {
    char b[24];
    snprintf(b, sizeof b, "%zu", i);
    return jsc_path_push(c, b);
}

void jsc_path_pop(jsc *c, size_t at) { c->path[at] = 0; }

/* ==== Keywords ==== */
static const char *k_annotations[] = {"$schema", "$id", "$comment", "title", "description", "default", "examples",
                                      "deprecated", "readOnly", "writeOnly", "$defs", "definitions", NULL};
static const char *k_constraints[] = {"type", "enum", "const", "nullable", "anyOf", "oneOf", "allOf", "$ref",
                                      "properties", "required", "additionalProperties", "items", "prefixItems",
                                      "additionalItems", "minItems", "maxItems", "uniqueItems", "minLength",
                                      "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
                                      "exclusiveMaximum", NULL};

static bool in_list(const char *k, const char *const *l) {
    for (; *l; l++)
        if (!strcmp(k, *l)) return true;
    return false;
}

/* Refuses keywords outside the subset, naming the first one. */
static int check_keywords(jsc *c, json_t *s) {
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        if (in_list(k, k_annotations) || in_list(k, k_constraints)) continue;
        return jsc_fail(c, "keyword '%s' is not supported (see docs/structured-output.md for the supported subset)", k);
    }
    json_t *u = json_object_get(s, "uniqueItems");
    if (u && !json_is_false(u)) return jsc_fail(c, "'uniqueItems': true is not supported");
    return 0;
}

/* Constraining keywords of s other than those listed. */
static const char *other_constraint(json_t *s, const char *const *allowed) {
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        if (in_list(k, k_annotations) || in_list(k, allowed)) continue;
        return k;
    }
    return NULL;
}

/* ==== Types of values ==== */
enum { T_OBJ = 1, T_ARR = 2, T_STR = 4, T_NUM = 8, T_BOOL = 16, T_NULL = 32, T_ALL = 63 };

static int type_bit(const char *t) {
    if (!strcmp(t, "object")) return T_OBJ;
    if (!strcmp(t, "array")) return T_ARR;
    if (!strcmp(t, "string")) return T_STR;
    if (!strcmp(t, "number") || !strcmp(t, "integer")) return T_NUM;
    if (!strcmp(t, "boolean")) return T_BOOL;
    if (!strcmp(t, "null")) return T_NULL;
    return 0;
}

static int value_type(json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return T_OBJ;
    case JSON_ARRAY: return T_ARR;
    case JSON_STRING: return T_STR;
    case JSON_INTEGER: case JSON_REAL: return T_NUM;
    case JSON_TRUE: case JSON_FALSE: return T_BOOL;
    default: return T_NULL;
    }
}

static bool value_is_integer(json_t *v) {
    return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
}

/* ==== $ref ==== */
static json_t *resolve_pointer(jsc *c, const char *ref) {
    if (ref[0] != '#') return jsc_fail(c, "$ref '%.100s': only local references (#/...) are supported", ref), NULL;
    json_t *cur = c->root;
    const char *p = ref + 1;
    while (*p) {
        if (*p != '/') return jsc_fail(c, "$ref '%.100s' is not a JSON pointer", ref), NULL;
        p++;
        char seg[256];
        size_t n = 0;
        for (; *p && *p != '/' && n + 1 < sizeof seg; p++) {
            char ch = *p;
            if (ch == '~' && (p[1] == '0' || p[1] == '1')) ch = p[1] == '0' ? '~' : '/', p++;
            else if (ch == '%' && p[1] && p[2]) {
                int h = 0;
                for (int k = 1; k <= 2; k++) {
                    char d = p[k];
                    h = h * 16 + (d >= '0' && d <= '9' ? d - '0' : (d | 0x20) >= 'a' && (d | 0x20) <= 'f' ? (d | 0x20) - 'a' + 10 : 0);
                }
                ch = (char)h, p += 2;
            }
            seg[n++] = ch;
        }
        seg[n] = 0;
        if (json_is_object(cur)) cur = json_object_get(cur, seg);
        else if (json_is_array(cur)) {
            char *end;
            long i = strtol(seg, &end, 10);
            cur = *seg && !*end && i >= 0 ? json_array_get(cur, (size_t)i) : NULL;
        } else cur = NULL;
        if (!cur) return jsc_fail(c, "$ref '%.100s' points at nothing", ref), NULL;
    }
    return cur;
}


/* A rule name that no rule and no pending reference uses. */
static void unique_name(jsc *c, const char *hint, char *dst, size_t cap) {
    char base[128];
    jsc_rule_name(base, sizeof base, hint);
    snprintf(dst, cap, "%s", base);
    for (int k = 1;; k++) {
        bool taken = false;
        for (int i = 0; i < c->b->n && !taken; i++) taken = !strcmp(c->b->rules[i].name, dst);
        for (int i = 0; i < c->n_refs && !taken; i++) taken = !strcmp(c->ref_rules[i], dst);
        if (!taken) return;
        snprintf(dst, cap, "%s-%d", base, k);
    }
}

static int ref_register(jsc *c, const char *ref, const char *rule) {
    char **k = realloc(c->ref_keys, (size_t)(c->n_refs + 1) * sizeof *k);
    if (k) c->ref_keys = k;
    const char **r = realloc(c->ref_rules, (size_t)(c->n_refs + 1) * sizeof *r);
    if (r) c->ref_rules = r;
    char *kc = k && r ? strdup(ref) : NULL, *rc = kc ? strdup(rule) : NULL;
    if (!rc) return free(kc), jsc_fail(c, "out of memory");
    c->ref_keys[c->n_refs] = kc, c->ref_rules[c->n_refs] = rc;
    c->n_refs++;
    return 0;
}

/* The rule of the schema a reference points at; converted once, recursion allowed. */
static int ref_rule(jsc *c, const char *ref, const char **out) {
    for (int i = 0; i < c->n_refs; i++)
        if (!strcmp(c->ref_keys[i], ref)) {
            *out = c->ref_rules[i];
            return 0;
        }
    json_t *target = resolve_pointer(c, ref);
    if (!target) return -1;
    const char *last = strrchr(ref, '/');
    char name[160];
    unique_name(c, last ? last + 1 : "ref", name, sizeof name);
    if (ref_register(c, ref, name)) return -1;
    const char *rule = c->ref_rules[c->n_refs - 1];
    char saved[sizeof c->path];
    memcpy(saved, c->path, sizeof saved);
    snprintf(c->path, sizeof c->path, "%s", ref + 1);
    const char *got;
    int rc = jsc_visit(c, target, rule, &got);
    memcpy(c->path, saved, sizeof saved);
    if (rc) return -1;
    if (!strcmp(got, rule) && !gb_has(c->b, rule))
        return jsc_fail(c, "$ref '%.100s' leads only back to itself (no schema to match)", ref);
    if (strcmp(got, rule) && gb_add(c->b, rule, got, &got, c->err)) return -1;
    *out = rule;
    return 0;
}

/* ==== allOf ==== */
static int merge_into(jsc *c, json_t *m, json_t *part, json_t **allowed, bool *closed, int depth);

/* Folds one branch (a $ref is followed, nested allOf flattened) into m. */
static int merge_part(jsc *c, json_t *m, json_t *p, json_t **allowed, bool *closed, int depth) {
    if (depth > JS_MAX_DEPTH) return jsc_fail(c, "allOf/$ref nested deeper than %d", JS_MAX_DEPTH);
    if (json_is_true(p)) return 0;
    if (!json_is_object(p)) return jsc_fail(c, "allOf: a branch is not a schema object");
    if (check_keywords(c, p)) return -1;
    json_t *ref = json_object_get(p, "$ref");
    if (ref) {
        if (!json_is_string(ref)) return jsc_fail(c, "$ref must be a string");
        json_t *t = resolve_pointer(c, json_string_value(ref));
        if (!t || merge_part(c, m, t, allowed, closed, depth + 1)) return -1;
    }
    json_t *all = json_object_get(p, "allOf");
    if (all) {
        if (!json_is_array(all)) return jsc_fail(c, "'allOf' must be an array");
        for (size_t i = 0; i < json_array_size(all); i++)
            if (merge_part(c, m, json_array_get(all, i), allowed, closed, depth + 1)) return -1;
    }
    return merge_into(c, m, p, allowed, closed, depth);
}

static int merge_into(jsc *c, json_t *m, json_t *p, json_t **allowed, bool *closed, int depth) {
    (void)depth;
    static const char *mins[] = {"minLength", "minItems", "minimum", "exclusiveMinimum", NULL};
    static const char *maxs[] = {"maxLength", "maxItems", "maximum", "exclusiveMaximum", NULL};
    const char *k;
    json_t *v;
    json_object_foreach(p, k, v) {
        if (!strcmp(k, "$ref") || !strcmp(k, "allOf") || in_list(k, k_annotations)) continue;
        json_t *old = json_object_get(m, k);
        if (!strcmp(k, "properties")) {
            if (!json_is_object(v)) return jsc_fail(c, "'properties' must be an object");
            if (!old) json_object_set_new(m, k, old = json_object());
            const char *pk;
            json_t *pv;
            json_object_foreach(v, pk, pv) {
                json_t *prev = json_object_get(old, pk);
                if (prev && !json_equal(prev, pv)) json_object_set_new(old, pk, json_pack("{s:[O,O]}", "allOf", prev, pv));
                else if (!prev) json_object_set(old, pk, pv);
            }
        } else if (!strcmp(k, "required")) {
            if (!json_is_array(v)) return jsc_fail(c, "'required' must be an array");
            if (!old) json_object_set_new(m, k, old = json_array());
            for (size_t i = 0; i < json_array_size(v); i++) {
                bool dup = false;
                for (size_t j = 0; j < json_array_size(old) && !dup; j++) dup = json_equal(json_array_get(old, j), json_array_get(v, i));
                if (!dup) json_array_append(old, json_array_get(v, i));
            }
        } else if (!strcmp(k, "additionalProperties")) {
            if (json_is_false(v)) { /* only this branch's properties may appear */
                json_t *keys = json_object();
                json_t *pr = json_object_get(p, "properties");
                const char *pk;
                json_t *pv;
                if (json_is_object(pr)) json_object_foreach(pr, pk, pv) json_object_set_new(keys, pk, json_true());
                if (*allowed) {
                    json_t *both = json_object();
                    json_object_foreach(*allowed, pk, pv) if (json_object_get(keys, pk)) json_object_set_new(both, pk, json_true());
                    json_decref(keys);
                    keys = both;
                    json_decref(*allowed);
                }
                *allowed = keys, *closed = true;
            } else if (!json_is_true(v)) {
                return jsc_fail(c, "allOf: an additionalProperties schema inside allOf is not supported");
            }
        } else if (!strcmp(k, "type")) {
            int bits = 0;
            if (json_is_string(v)) bits = type_bit(json_string_value(v));
            for (size_t i = 0; json_is_array(v) && i < json_array_size(v); i++)
                if (json_is_string(json_array_get(v, i))) bits |= type_bit(json_string_value(json_array_get(v, i)));
            if (old && !json_equal(old, v)) {
                int ob = json_is_string(old) ? type_bit(json_string_value(old)) : 0;
                for (size_t i = 0; json_is_array(old) && i < json_array_size(old); i++)
                    ob |= type_bit(json_string_value(json_array_get(old, i)));
                if (!(ob & bits)) return jsc_fail(c, "allOf: the branches' types exclude each other");
                return jsc_fail(c, "allOf: branches with different 'type' values are not supported");
            }
            if (!old) json_object_set(m, k, v);
        } else if (in_list(k, mins) || in_list(k, maxs)) {
            if (!json_is_number(v)) return jsc_fail(c, "'%s' must be a number", k);
            const bool lower = in_list(k, mins);
            if (!old || (lower ? json_number_value(v) > json_number_value(old) : json_number_value(v) < json_number_value(old)))
                json_object_set(m, k, v);
        } else if (old && !json_equal(old, v)) {
            return jsc_fail(c, "allOf: '%s' differs between the branches (only objects, types and bounds are merged)", k);
        } else if (!old) {
            json_object_set(m, k, v);
        }
    }
    return 0;
}

/* allOf (with s's own keywords) as one schema; *out a new reference. */
static int merge_allof(jsc *c, json_t *s, json_t **out) {
    json_t *m = json_object(), *allowed = NULL;
    bool closed = false;
    int rc = merge_part(c, m, s, &allowed, &closed, 0);
    if (!rc && closed) {
        json_object_set_new(m, "additionalProperties", json_false());
        json_t *pr = json_object_get(m, "properties");
        if (pr) {
            json_t *keep = json_object();
            const char *k;
            json_t *v;
            json_object_foreach(pr, k, v) if (json_object_get(allowed, k)) json_object_set(keep, k, v);
            json_object_set_new(m, "properties", keep);
        }
        json_t *req = json_object_get(m, "required");
        for (size_t i = 0; !rc && req && i < json_array_size(req); i++)
            if (!json_object_get(allowed, json_string_value(json_array_get(req, i))))
                rc = jsc_fail(c, "allOf: required property '%s' is excluded by another branch's additionalProperties: false",
                              json_string_value(json_array_get(req, i)));
    }
    json_decref(allowed);
    if (rc) return json_decref(m), -1;
    *out = m;
    return 0;
}

/* ==== oneOf: branches must exclude each other ==== */
/* The JSON types a schema admits (a $ref followed a few levels). */
static int schema_types(jsc *c, json_t *s, int depth) {
    if (depth > 8 || json_is_true(s) || !json_is_object(s)) return json_is_false(s) ? 0 : T_ALL;
    json_t *cv = json_object_get(s, "const"), *ev = json_object_get(s, "enum"), *t = json_object_get(s, "type");
    json_t *ref = json_object_get(s, "$ref");
    int bits = T_ALL;
    if (cv) bits &= value_type(cv);
    if (json_is_array(ev)) {
        int e = 0;
        for (size_t i = 0; i < json_array_size(ev); i++) e |= value_type(json_array_get(ev, i));
        bits &= e;
    }
    if (json_is_string(t)) bits &= type_bit(json_string_value(t));
    else if (json_is_array(t)) {
        int tb = 0;
        for (size_t i = 0; i < json_array_size(t); i++)
            if (json_is_string(json_array_get(t, i))) tb |= type_bit(json_string_value(json_array_get(t, i)));
        bits &= tb;
    }
    if (json_is_string(ref)) {
        mx_error *keep = c->err, scratch;
        c->err = &scratch; /* an unresolvable ref is reported when it is converted */
        json_t *tg = resolve_pointer(c, json_string_value(ref));
        c->err = keep;
        if (tg) bits &= schema_types(c, tg, depth + 1);
    }
    static const char *combs[] = {"anyOf", "oneOf"};
    for (int k = 0; k < 2; k++) {
        json_t *a = json_object_get(s, combs[k]);
        if (!json_is_array(a)) continue;
        int u = 0;
        for (size_t i = 0; i < json_array_size(a); i++) u |= schema_types(c, json_array_get(a, i), depth + 1);
        bits &= u;
    }
    if (json_is_true(json_object_get(s, "nullable"))) bits |= T_NULL;
    return bits;
}

/* The values a schema is limited to by const/enum (a new array), or NULL. */
static json_t *schema_values(json_t *s) {
    if (!json_is_object(s)) return NULL;
    json_t *cv = json_object_get(s, "const"), *ev = json_object_get(s, "enum");
    if (cv) return json_pack("[O]", cv);
    if (json_is_array(ev)) return json_incref(ev);
    return NULL;
}

static bool values_disjoint(json_t *a, json_t *b) {
    for (size_t i = 0; i < json_array_size(a); i++)
        for (size_t j = 0; j < json_array_size(b); j++)
            if (json_equal(json_array_get(a, i), json_array_get(b, j))) return false;
    return true;
}

static bool has_required(json_t *s, const char *k) {
    json_t *r = json_object_get(s, "required");
    for (size_t i = 0; json_is_array(r) && i < json_array_size(r); i++)
        if (json_is_string(json_array_get(r, i)) && !strcmp(json_string_value(json_array_get(r, i)), k)) return true;
    return false;
}

/* Whether no instance can match both (a sufficient test: types, const/enum values, a required
 * discriminator property with disjoint values, or a required property the other forbids). */
static bool disjoint(jsc *c, json_t *a, json_t *b) {
    if (!(schema_types(c, a, 0) & schema_types(c, b, 0))) return true;
    json_t *va = schema_values(a), *vb = schema_values(b);
    bool d = va && vb && values_disjoint(va, vb);
    json_decref(va), json_decref(vb);
    if (d || !json_is_object(a) || !json_is_object(b)) return d;
    for (int pass = 0; pass < 2; pass++) {
        json_t *x = pass ? b : a, *y = pass ? a : b;
        json_t *px = json_object_get(x, "properties"), *py = json_object_get(y, "properties");
        const char *k;
        json_t *v;
        if (!json_is_object(px)) continue;
        json_object_foreach(px, k, v) {
            if (!has_required(x, k)) continue;
            if (json_is_false(json_object_get(y, "additionalProperties")) && !json_object_get(py, k)) return true;
            if (!has_required(y, k) || !json_is_object(py)) continue;
            json_t *v1 = schema_values(v), *v2 = schema_values(json_object_get(py, k));
            bool dd = v1 && v2 && values_disjoint(v1, v2);
            json_decref(v1), json_decref(v2);
            if (dd) return true;
        }
    }
    return false;
}

/* ==== Combinators, literals ==== */
static int alternatives(jsc *c, json_t *arr, const char *kw, const char *name, const char **out) {
    if (!json_is_array(arr) || !json_array_size(arr)) return jsc_fail(c, "'%s' must be a non-empty array", kw);
    if (!strcmp(kw, "oneOf"))
        for (size_t i = 0; i < json_array_size(arr); i++)
            for (size_t j = i + 1; j < json_array_size(arr); j++)
                if (!disjoint(c, json_array_get(arr, i), json_array_get(arr, j)))
                    return jsc_fail(c, "oneOf: branches %zu and %zu may both match one value, which oneOf forbids and "
                                    "a grammar cannot rule out; use anyOf, or tell them apart by type, const/enum "
                                    "or a required property", i, j);
    gr_buf body = {0};
    size_t at = jsc_path_push(c, kw);
    for (size_t i = 0; i < json_array_size(arr); i++) {
        char sub[160];
        snprintf(sub, sizeof sub, "%s-%zu", name, i);
        const char *r;
        size_t at2 = path_push_i(c, i);
        if (jsc_visit(c, json_array_get(arr, i), sub, &r)) return free(body.p), -1;
        jsc_path_pop(c, at2);
        gr_buf_printf(&body, "%s%s", i ? " | " : "", r);
    }
    jsc_path_pop(c, at);
    if (body.oom) return free(body.p), jsc_fail(c, "out of memory");
    int rc = gb_add(c->b, name, body.p, out, c->err);
    free(body.p);
    return rc;
}

/* Literal values (const / enum), kept to those of the schema's type. */
static int literals(jsc *c, json_t *s, json_t *vals, const char *name, const char **out) {
    json_t *t = json_object_get(s, "type");
    int tb = T_ALL;
    bool int_only = false;
    if (t) {
        tb = 0;
        for (size_t i = 0; i < (json_is_array(t) ? json_array_size(t) : 1); i++) {
            json_t *e = json_is_array(t) ? json_array_get(t, i) : t;
            if (!json_is_string(e)) return jsc_fail(c, "'type' must be a string or an array of strings");
            tb |= type_bit(json_string_value(e));
            int_only = !strcmp(json_string_value(e), "integer") && !json_is_array(t);
        }
    }
    const char *space = jsc_prim(c, "space");
    if (!space) return -1;
    gr_buf body = {0};
    int n = 0;
    for (size_t i = 0; i < json_array_size(vals); i++) {
        json_t *v = json_array_get(vals, i);
        if (!(value_type(v) & tb) || (int_only && !value_is_integer(v))) continue;
        if (n++) gr_buf_puts(&body, " | ");
        if (jsc_json_literal(c, &body, v)) return free(body.p), -1;
    }
    if (!n) return free(body.p), jsc_fail(c, "no value of const/enum has the schema's type");
    gr_buf_printf(&body, "%s%s", n > 1 ? ") " : " ", space);
    char *text = NULL;
    if (n > 1 && !body.oom && (text = malloc(body.n + 2))) text[0] = '(', memcpy(text + 1, body.p, body.n + 1);
    int rc = body.oom || (n > 1 && !text) ? jsc_fail(c, "out of memory") : gb_add(c->b, name, n > 1 ? text : body.p, out, c->err);
    free(text), free(body.p);
    return rc;
}

/* ==== The walk ==== */
static int visit_typed(jsc *c, json_t *s, const char *t, const char *name, const char **out) {
    if (!strcmp(t, "object")) return jsc_object(c, s, name, out);
    if (!strcmp(t, "array")) return jsc_array(c, s, name, out);
    if (!strcmp(t, "string")) return jsc_string(c, s, name, out);
    if (!strcmp(t, "number") || !strcmp(t, "integer")) return jsc_number(c, s, t[1] == 'n', name, out);
    if (!strcmp(t, "boolean") || !strcmp(t, "null")) {
        *out = jsc_prim(c, t);
        return *out ? 0 : -1;
    }
    return jsc_fail(c, "unknown type '%.40s'", t);
}

/* The type the keywords of an untyped schema imply (they apply only to that type, so keeping
 * to it is valid), or NULL for any value. */
static const char *implied_type(json_t *s) {
    static const char *obj[] = {"properties", "required", "additionalProperties", NULL};
    static const char *arr[] = {"items", "prefixItems", "additionalItems", "minItems", "maxItems", NULL};
    static const char *str[] = {"minLength", "maxLength", "pattern", "format", NULL};
    static const char *num[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        if (in_list(k, obj)) return "object";
        if (in_list(k, arr)) return "array";
        if (in_list(k, str)) return "string";
        if (in_list(k, num)) return "number";
    }
    return NULL;
}

int jsc_visit(jsc *c, json_t *s, const char *name, const char **out) {
    if (c->depth >= JS_MAX_DEPTH) return jsc_fail(c, "schemas nested deeper than %d", JS_MAX_DEPTH);
    if (json_is_true(s)) return (*out = jsc_prim(c, "value")) ? 0 : -1;
    if (json_is_false(s)) return jsc_fail(c, "the schema false admits no value");
    if (!json_is_object(s)) return jsc_fail(c, "expected a schema (an object or a boolean)");
    if (check_keywords(c, s)) return -1;
    c->depth++;
    int rc = -1;
    json_t *tmp = NULL, *v;
    const char *other;
    if (json_is_true(json_object_get(s, "nullable"))) { /* OpenAPI: the schema or null */
        tmp = json_copy(s);
        json_object_del(tmp, "nullable");
        json_t *alt = json_pack("{s:[O,{s:s}]}", "anyOf", tmp, "type", "null");
        rc = alternatives(c, json_object_get(alt, "anyOf"), "anyOf", name, out);
        json_decref(alt);
    } else if ((v = json_object_get(s, "nullable")) && !json_is_false(v)) {
        rc = jsc_fail(c, "'nullable' must be a boolean");
    } else if ((v = json_object_get(s, "allOf"))) {
        if (!json_is_array(v) || !json_array_size(v)) rc = jsc_fail(c, "'allOf' must be a non-empty array");
        else if (!merge_allof(c, s, &tmp)) rc = jsc_visit(c, tmp, name, out);
    } else if ((v = json_object_get(s, "$ref"))) {
        static const char *only[] = {"$ref", NULL};
        if (!json_is_string(v)) rc = jsc_fail(c, "'$ref' must be a string");
        else if ((other = other_constraint(s, only))) { /* $ref with more constraints: both apply */
            tmp = json_pack("{s:[O]}", "allOf", s);
            json_t *inner = json_copy(s);
            json_object_del(inner, "$defs"), json_object_del(inner, "definitions");
            json_array_set_new(json_object_get(tmp, "allOf"), 0, inner);
            json_t *merged;
            if (!merge_allof(c, tmp, &merged)) rc = jsc_visit(c, merged, name, out), json_decref(merged);
        } else {
            rc = ref_rule(c, json_string_value(v), out);
        }
    } else if ((v = json_object_get(s, "anyOf")) || (v = json_object_get(s, "oneOf"))) {
        const char *kw = json_object_get(s, "anyOf") ? "anyOf" : "oneOf";
        static const char *only[] = {"anyOf", "oneOf", NULL};
        if (json_object_get(s, "anyOf") && json_object_get(s, "oneOf")) rc = jsc_fail(c, "anyOf together with oneOf is not supported");
        else if ((other = other_constraint(s, only)))
            rc = jsc_fail(c, "'%s' next to '%s' is not supported (move it into each branch)", other, kw);
        else rc = alternatives(c, v, kw, name, out);
    } else if ((v = json_object_get(s, "const")) || (v = json_object_get(s, "enum"))) {
        static const char *only[] = {"const", "enum", "type", NULL};
        const bool is_const = json_object_get(s, "const") != NULL;
        if ((other = other_constraint(s, only))) rc = jsc_fail(c, "'%s' next to '%s' is not supported", other, is_const ? "const" : "enum");
        else if (!is_const && (!json_is_array(v) || !json_array_size(v))) rc = jsc_fail(c, "'enum' must be a non-empty array");
        else if (is_const) {
            tmp = json_pack("[O]", v);
            rc = literals(c, s, tmp, name, out);
        } else rc = literals(c, s, v, name, out);
    } else if ((v = json_object_get(s, "type"))) {
        if (json_is_string(v)) rc = visit_typed(c, s, json_string_value(v), name, out);
        else if (!json_is_array(v) || !json_array_size(v)) rc = jsc_fail(c, "'type' must be a string or a non-empty array");
        else {
            gr_buf body = {0};
            rc = 0;
            for (size_t i = 0; i < json_array_size(v) && !rc; i++) {
                json_t *t = json_array_get(v, i);
                char sub[160];
                const char *r;
                if (!json_is_string(t)) { rc = jsc_fail(c, "'type' must be a string or an array of strings"); break; }
                snprintf(sub, sizeof sub, "%s-%s", name, json_string_value(t));
                rc = visit_typed(c, s, json_string_value(t), sub, &r);
                if (!rc) gr_buf_printf(&body, "%s%s", i ? " | " : "", r);
            }
            if (!rc) rc = body.oom ? jsc_fail(c, "out of memory") : gb_add(c->b, name, body.p, out, c->err);
            free(body.p);
        }
    } else {
        const char *t = implied_type(s);
        rc = t ? visit_typed(c, s, t, name, out) : ((*out = jsc_prim(c, "value")) ? 0 : -1);
    }
    json_decref(tmp);
    c->depth--;
    return rc;
}

/* ==== Entry points ==== */
static void jsc_free(jsc *c) {
    for (int i = 0; i < c->n_refs; i++) free(c->ref_keys[i]), free((char *)c->ref_rules[i]);
    free(c->ref_keys), free(c->ref_rules);
}

int grammar_builder_add_schema(grammar_builder *b, const char *name_hint, json_t *schema, const char **rule,
                               mx_error *err) {
    jsc c = {.b = b, .root = schema, .err = err};
    char name[160];
    unique_name(&c, name_hint && *name_hint ? name_hint : "schema", name, sizeof name);
    int rc = ref_register(&c, "#", name);
    const char *got = NULL;
    if (!rc) rc = jsc_visit(&c, schema, name, &got);
    if (!rc && strcmp(got, name)) rc = gb_add(b, name, got, &got, err); /* got: owned by b now */
    if (!rc) *rule = got;
    jsc_free(&c);
    return rc;
}

int grammar_json_schema_to_gbnf(json_t *schema, char **gbnf, mx_error *err) {
    *gbnf = NULL;
    grammar_builder *b = grammar_builder_new();
    if (!b) return mx_fail(err, "schema: out of memory");
    jsc c = {.b = b, .root = schema, .err = err};
    int rc = ref_register(&c, "#", "root");
    const char *got = NULL;
    if (!rc) rc = jsc_visit(&c, schema, "root", &got);
    if (!rc && strcmp(got, "root")) rc = gb_add(b, "root", got, &got, err);
    if (!rc) {
        const char *t = grammar_builder_text(b);
        *gbnf = t ? strdup(t) : NULL;
        if (!*gbnf) rc = mx_fail(err, "schema: out of memory");
    }
    jsc_free(&c);
    grammar_builder_free(b);
    return rc;
}

int grammar_from_json_schema(grammar **out, json_t *schema, mx_error *err) {
    char *text;
    *out = NULL;
    if (grammar_json_schema_to_gbnf(schema, &text, err)) return -1;
    int rc = grammar_compile(out, text, strlen(text), err);
    free(text);
    return rc;
}

int grammar_json_object(grammar **out, mx_error *err) {
    json_t *s = json_pack("{s:s}", "type", "object");
    int rc = grammar_from_json_schema(out, s, err);
    json_decref(s);
    return rc;
}
