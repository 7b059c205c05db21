/* JSON Schema converter: objects and arrays. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/json_schema_internal.h"

/* ==== Keys outside a set ====
 * Extra property names (additionalProperties) must not repeat a declared property: JSON.parse
 * keeps the last of two equal keys, so {"a": 1, "a": "x"} would escape a's schema. Extra keys
 * are written with plain characters only (no escapes, so their text is their value) and kept
 * out of the declared names by a trie: at each node, stop only where no declared name ends,
 * continue into a child, or leave the trie with any other character. */
typedef struct ktrie {
    uint32_t cp;
    bool end;
    struct ktrie *kids, *next;
} ktrie;

static void ktrie_free(ktrie *t) {
    while (t) {
        ktrie *n = t->next;
        ktrie_free(t->kids);
        free(t);
        t = n;
    }
}

/* Plain key characters: what the generic string allows unescaped. */
static bool plain_cp(uint32_t cp) { return cp >= 0x20 && cp != '"' && cp != '\\' && cp != 0x7F; }

static int ktrie_add(ktrie *root, const char *key) {
    const uint8_t *p = (const uint8_t *)key;
    size_t n = strlen(key);
    ktrie *node = root;
    while (n) {
        uint32_t cp;
        int l = gr_utf8_decode(p, n, &cp);
        if (l < 0 || !plain_cp(cp)) return 0; /* not writable as an extra key: nothing to exclude */
        p += l, n -= (size_t)l;
        ktrie *k = node->kids;
        while (k && k->cp != cp) k = k->next;
        if (!k) {
            if (!(k = calloc(1, sizeof *k))) return -1;
            k->cp = cp, k->next = node->kids, node->kids = k;
        }
        node = k;
    }
    node->end = true;
    return 0;
}

/* Groups nest one level per character: every 100 characters the rest of the trie becomes a rule
 * of its own, so long names stay within the GBNF parser's nesting limit. */
static int ktrie_emit(jsc *c, gr_buf *o, const ktrie *t, int depth, const char *name, int *n_sub) {
    if (depth && depth % 100 == 0) {
        gr_buf sub = {0};
        if (ktrie_emit(c, &sub, t, 0, name, n_sub)) return free(sub.p), -1;
        char rn[220];
        snprintf(rn, sizeof rn, "%.180s-key-%d", name, ++*n_sub);
        const char *got;
        int rc = sub.oom ? jsc_fail(c, "out of memory") : gb_add(c->b, rn, sub.p, &got, c->err);
        free(sub.p);
        if (!rc) gr_buf_puts(o, got);
        return rc;
    }
    gr_buf_putc(o, '(');
    bool first = true;
    if (!t->end) gr_buf_puts(o, "\"\""), first = false;
    for (const ktrie *k = t->kids; k; k = k->next) {
        uint32_t r[2] = {k->cp, k->cp};
        gr_buf_puts(o, first ? "" : " | ");
        first = false;
        gb_class(o, r, 1);
        gr_buf_putc(o, ' ');
        if (ktrie_emit(c, o, k, depth + 1, name, n_sub)) return -1;
    }
    /* any other plain character, then anything plain */
    gr_buf_puts(o, first ? "" : " | ");
    gr_buf_puts(o, "[^\"\\\\\\x7F\\x00-\\x1F");
    for (const ktrie *k = t->kids; k; k = k->next) {
        if ((k->cp >= '0' && k->cp <= '9') || (k->cp >= 'a' && k->cp <= 'z') || (k->cp >= 'A' && k->cp <= 'Z'))
            gr_buf_putc(o, (char)k->cp);
        else if (k->cp < 0x100) gr_buf_printf(o, "\\x%02X", (unsigned)k->cp);
        else if (k->cp < 0x10000) gr_buf_printf(o, "\\u%04X", (unsigned)k->cp);
        else gr_buf_printf(o, "\\U%08X", (unsigned)k->cp);
    }
    gr_buf_puts(o, "] [^\"\\\\\\x7F\\x00-\\x1F]*)");
    return 0;
}

/* ==== Objects ==== */
typedef struct kv {
    const char *key;
    const char *rule; /* name of `"key" space ":" space value` */
} kv;

static int kv_rule(jsc *c, const char *key, json_t *sub, const char *name, const char **out) {
    char sname[200], kname[220];
    char hint[128];
    jsc_rule_name(hint, sizeof hint, key);
    snprintf(sname, sizeof sname, "%.120s-%.60s", name, hint);
    const char *vrule;
    size_t at = jsc_path_push(c, "properties");
    size_t at2 = jsc_path_push(c, key);
    int rc = jsc_visit(c, sub, sname, &vrule);
    jsc_path_pop(c, at2);
    jsc_path_pop(c, at);
    if (rc) return -1;
    gr_buf body = {0};
    json_t *k = json_string(key);
    rc = k ? jsc_json_literal(c, &body, k) : jsc_fail(c, "property name '%.60s' is not valid UTF-8", key);
    json_decref(k);
    gr_buf_printf(&body, " space \":\" space %s", vrule);
    snprintf(kname, sizeof kname, "%.200s-kv", sname);
    if (!rc) rc = body.oom ? jsc_fail(c, "out of memory") : gb_add(c->b, kname, body.p, out, c->err);
    free(body.p);
    return rc;
}

/* The rule for optional kvs opt[i..] where the first one present comes without a comma:
 * llama.cpp's get_recursive_refs. */
static int opt_chain(jsc *c, const kv *opt, int n, int i, bool first_optional, const char *name, gr_buf *o) {
    const bool star = !strcmp(opt[i].key, "*");
    if (first_optional) gr_buf_printf(o, "( \",\" space %s )%s", opt[i].rule, star ? "*" : "?");
    else gr_buf_printf(o, "%s%s", opt[i].rule, star ? " ( \",\" space " : "");
    if (!first_optional && star) gr_buf_printf(o, "%s )*", opt[i].rule);
    if (i + 1 < n) {
        gr_buf rest = {0};
        if (opt_chain(c, opt, n, i + 1, true, name, &rest)) return free(rest.p), -1;
        char rn[200];
        snprintf(rn, sizeof rn, "%.150s-rest-%d", name, i + 1);
        const char *got;
        int rc = rest.oom ? jsc_fail(c, "out of memory") : gb_add(c->b, rn, rest.p, &got, c->err);
        free(rest.p);
        if (rc) return -1;
        gr_buf_printf(o, " %s", got);
    }
    return 0;
}

int jsc_object(jsc *c, json_t *s, const char *name, const char **out) {
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *ap = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return jsc_fail(c, "'properties' must be an object");
    if (req && !json_is_array(req)) return jsc_fail(c, "'required' must be an array of strings");
    if (ap && !json_is_boolean(ap) && !json_is_object(ap))
        return jsc_fail(c, "'additionalProperties' must be a boolean or a schema");
    for (size_t i = 0; req && i < json_array_size(req); i++)
        if (!json_is_string(json_array_get(req, i))) return jsc_fail(c, "'required' must be an array of strings");
    if (!props && !req && (!ap || json_is_true(ap))) return (*out = jsc_prim(c, "object")) ? 0 : -1;
    const size_t np = props ? json_object_size(props) : 0, nr = req ? json_array_size(req) : 0;
    kv *reqs = calloc(np + nr + 1, sizeof *reqs), *opts = calloc(np + 2, sizeof *opts);
    int n_req = 0, n_opt = 0, rc = 0;
    if (!reqs || !opts) {
        free(reqs), free(opts);
        return jsc_fail(c, "out of memory");
    }
    const char *pk;
    json_t *pv;
    if (props) json_object_foreach(props, pk, pv) {
        bool r = false;
        for (size_t i = 0; i < nr && !r; i++) r = !strcmp(json_string_value(json_array_get(req, i)), pk);
        kv *dst = r ? &reqs[n_req++] : &opts[n_opt++];
        dst->key = pk;
        if ((rc = kv_rule(c, pk, pv, name, &dst->rule))) goto out;
    }
    /* required names the properties do not declare take additionalProperties' schema */
    for (size_t i = 0; i < nr; i++) {
        const char *k = json_string_value(json_array_get(req, i));
        bool seen = props && json_object_get(props, k);
        for (int j = 0; j < n_req && !seen; j++) seen = !strcmp(reqs[j].key, k);
        if (seen) continue;
        if (json_is_false(ap)) {
            rc = jsc_fail(c, "required property '%.60s' is not declared and additionalProperties is false", k);
            goto out;
        }
        reqs[n_req].key = k;
        if ((rc = kv_rule(c, k, json_is_object(ap) ? ap : json_true(), name, &reqs[n_req].rule))) goto out;
        n_req++;
    }
    if (ap && !json_is_false(ap)) { /* extra properties: keys outside the declared ones */
        ktrie root = {0};
        const char *k;
        json_t *v;
        if (props) json_object_foreach(props, k, v) if (ktrie_add(&root, k)) rc = jsc_fail(c, "out of memory");
        for (int j = 0; j < n_req; j++) if (ktrie_add(&root, reqs[j].key)) rc = jsc_fail(c, "out of memory");
        gr_buf key = {0};
        gr_buf_puts(&key, "\"\\\"\" ");
        int n_sub = 0;
        if (!rc) rc = ktrie_emit(c, &key, &root, 0, name, &n_sub);
        gr_buf_puts(&key, " \"\\\"\" space");
        ktrie_free(root.kids);
        char kn[200], vn[200];
        snprintf(kn, sizeof kn, "%.150s-additional-key", name);
        snprintf(vn, sizeof vn, "%.150s-additional", name);
        const char *krule, *vrule;
        size_t at = jsc_path_push(c, "additionalProperties");
        if (!rc) rc = key.oom ? jsc_fail(c, "out of memory") : gb_add(c->b, kn, key.p, &krule, c->err);
        free(key.p);
        if (!rc) rc = jsc_visit(c, ap, vn, &vrule);
        jsc_path_pop(c, at);
        if (rc) goto out;
        if (!jsc_prim(c, "space")) { rc = -1; goto out; }
        gr_buf body = {0};
        gr_buf_printf(&body, "%s \":\" space %s", krule, vrule);
        snprintf(kn, sizeof kn, "%.150s-additional-kv", name);
        rc = body.oom ? jsc_fail(c, "out of memory") : gb_add(c->b, kn, body.p, &opts[n_opt].rule, c->err);
        free(body.p);
        if (rc) goto out;
        opts[n_opt++].key = "*";
    }
    gr_buf body = {0};
    const char *space = jsc_prim(c, "space");
    if (!space) { rc = -1; goto out; }
    gr_buf_puts(&body, "\"{\" space ");
    for (int j = 0; j < n_req; j++) gr_buf_printf(&body, "%s%s", j ? " \",\" space " : "", reqs[j].rule);
    if (n_opt) {
        gr_buf_puts(&body, n_req ? " ( \",\" space ( " : " ( ");
        for (int i = 0; i < n_opt && !rc; i++) {
            if (i) gr_buf_puts(&body, " | ");
            rc = opt_chain(c, opts, n_opt, i, false, name, &body);
        }
        gr_buf_puts(&body, n_req ? " ) )?" : " )?");
    }
    gr_buf_puts(&body, " \"}\" space");
    if (!rc) rc = body.oom ? jsc_fail(c, "out of memory") : gb_add(c->b, name, body.p, out, c->err);
    free(body.p);
out:
    free(reqs), free(opts);
    return rc;
}

/* ==== Arrays ==== */
static int get_items_count(jsc *c, json_t *s, const char *k, long *v) {
    json_t *x = json_object_get(s, k);
    if (!x) return 0;
    double d = json_is_number(x) ? json_number_value(x) : -1;
    if (d < 0 || d != floor(d) || d > GR_MAX_REPEAT) return jsc_fail(c, "'%s' must be an integer in [0, %d]", k, GR_MAX_REPEAT);
    *v = (long)d;
    return 0;
}

int jsc_array(jsc *c, json_t *s, const char *name, const char **out) {
    json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    json_t *more = json_object_get(s, "additionalItems");
    long lo = 0, hi = -1;
    if (get_items_count(c, s, "minItems", &lo) || get_items_count(c, s, "maxItems", &hi)) return -1;
    if (hi >= 0 && hi < lo) return jsc_fail(c, "maxItems %ld is below minItems %ld", hi, lo);
    const char *pkey = "prefixItems";
    if (json_is_array(items)) { /* draft 4-7 tuples: items [..] + additionalItems */
        if (prefix) return jsc_fail(c, "'items' as an array together with 'prefixItems' is not supported");
        prefix = items, items = more, pkey = "items";
    } else if (more) {
        return jsc_fail(c, "'additionalItems' is supported only with 'items' as an array");
    }
    if (prefix && !json_is_array(prefix)) return jsc_fail(c, "'prefixItems' must be an array of schemas");
    const long np = prefix ? (long)json_array_size(prefix) : 0;
    if (json_is_false(items)) hi = hi < 0 || hi > np ? np : hi;
    if (lo > (hi < 0 ? lo : hi)) return jsc_fail(c, "minItems %ld cannot be met: at most %ld items are allowed", lo, hi);
    if (!jsc_prim(c, "space")) return -1;
    /* rules of the prefix items and of the rest */
    const char **pr = calloc((size_t)np + 1, sizeof *pr);
    if (!pr) return jsc_fail(c, "out of memory");
    int rc = 0;
    for (long i = 0; i < np && !rc; i++) {
        char sub[200];
        snprintf(sub, sizeof sub, "%.150s-%ld", name, i);
        size_t at = jsc_path_push(c, pkey);
        char idx[24];
        snprintf(idx, sizeof idx, "%ld", i);
        size_t at2 = jsc_path_push(c, idx);
        rc = jsc_visit(c, json_array_get(prefix, (size_t)i), sub, &pr[i]);
        jsc_path_pop(c, at2), jsc_path_pop(c, at);
    }
    const char *rest = NULL;
    const bool more_items = hi < 0 || hi > np;
    if (!rc && more_items) {
        char sub[200];
        snprintf(sub, sizeof sub, "%.150s-item", name);
        size_t at = jsc_path_push(c, items && pkey[0] == 'i' ? "additionalItems" : "items");
        rc = jsc_visit(c, items && !json_is_false(items) ? items : json_true(), sub, &rest);
        jsc_path_pop(c, at);
    }
    if (rc) return free(pr), -1;
    /* "[" (e0 ("," e1 (...)?)?)? "]": element i (0-based) is pr[i] below np, else rest; the
     * first lo are required */
    gr_buf body = {0};
    gr_buf_puts(&body, "\"[\" space ");
    int open = 0;
    const long n_fixed = hi >= 0 && hi < np ? hi : np;
    long i = 0;
    for (; i < n_fixed; i++) {
        const bool req = i < lo;
        if (!req) gr_buf_puts(&body, "( "), open++;
        gr_buf_printf(&body, "%s%s ", i ? "\",\" space " : "", pr[i]);
    }
    if (more_items) { /* items i.. from rest: at least lo - i, at most hi - i */
        const long need = lo > i ? lo - i : 0, cap = hi < 0 ? -1 : hi - i;
        if (i == 0) { /* the first has no comma */
            if (need == 0) gr_buf_puts(&body, "( "), open++;
            gr_buf_printf(&body, "%s ", rest);
            const long n2 = need > 0 ? need - 1 : 0, c2 = cap < 0 ? -1 : cap - 1;
            if (c2 < 0) gr_buf_printf(&body, "( \",\" space %s ){%ld,} ", rest, n2);
            else if (c2 > 0) gr_buf_printf(&body, "( \",\" space %s ){%ld,%ld} ", rest, n2, c2);
        } else if (cap < 0) {
            gr_buf_printf(&body, "( \",\" space %s ){%ld,} ", rest, need);
        } else if (cap > 0) {
            gr_buf_printf(&body, "( \",\" space %s ){%ld,%ld} ", rest, need, cap);
        }
    }
    for (; open > 0; open--) gr_buf_puts(&body, ")? ");
    gr_buf_puts(&body, "\"]\" space");
    rc = body.oom ? jsc_fail(c, "out of memory") : gb_add(c->b, name, body.p, out, c->err);
    free(body.p), free(pr);
    return rc;
}
