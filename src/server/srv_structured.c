/* Structured output fields of the generation routes (docs/structured-output.md):
 *   response_format  OpenAI: {"type": "text"} | {"type": "json_object"[, "schema": S]} |
 *                    {"type": "json_schema", "json_schema": {"name", "description", "schema",
 *                    "strict"}}; the `schema` of json_object is llama-server's extension
 *   json_schema      llama-server: a JSON schema
 *   grammar          llama-server: GBNF text
 * on every route. At most one of them constrains a request; each is compiled into a grammar
 * here (on the HTTP thread), so a bad schema or grammar is a 400 naming the field and the
 * problem before anything is queued. Compiled grammars are kept in a small LRU keyed by their
 * source, so requests with the same schema share one grammar and with it the parse tables and
 * token masks its matchers build (grammar/grammar.h). */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/json_schema.h"
#include "server/srv_request.h"

/* ==== Cache of compiled grammars ==== */
#define SRV_GRAMMAR_CACHE 16
#define SRV_GRAMMAR_CACHE_KEY_MAX (1u << 20) /* longer sources are compiled, not cached */

typedef struct gcache_ent {
    char *key;
    grammar *g;
    uint64_t used;
} gcache_ent;

static pthread_mutex_t g_cache_mu = PTHREAD_MUTEX_INITIALIZER;
static gcache_ent g_cache[SRV_GRAMMAR_CACHE];
static uint64_t g_cache_clock;

static grammar *cache_get(const char *key) {
    grammar *g = NULL;
    pthread_mutex_lock(&g_cache_mu);
    for (int i = 0; i < SRV_GRAMMAR_CACHE; i++)
        if (g_cache[i].key && !strcmp(g_cache[i].key, key)) {
            g_cache[i].used = ++g_cache_clock;
            g = grammar_retain(g_cache[i].g);
            break;
        }
    pthread_mutex_unlock(&g_cache_mu);
    return g;
}

static void cache_put(const char *key, grammar *g) {
    if (strlen(key) > SRV_GRAMMAR_CACHE_KEY_MAX) return;
    char *k = strdup(key);
    if (!k) return;
    pthread_mutex_lock(&g_cache_mu);
    int victim = 0;
    for (int i = 0; i < SRV_GRAMMAR_CACHE; i++) {
        if (!g_cache[i].key) { victim = i; break; }
        if (g_cache[i].used < g_cache[victim].used) victim = i;
    }
    gcache_ent old = g_cache[victim];
    g_cache[victim] = (gcache_ent){k, grammar_retain(g), ++g_cache_clock};
    pthread_mutex_unlock(&g_cache_mu);
    free(old.key);
    grammar_release(old.g);
}

void srv_grammar_cache_clear(void) {
    pthread_mutex_lock(&g_cache_mu);
    for (int i = 0; i < SRV_GRAMMAR_CACHE; i++) {
        free(g_cache[i].key);
        grammar_release(g_cache[i].g);
        memset(&g_cache[i], 0, sizeof g_cache[i]);
    }
    pthread_mutex_unlock(&g_cache_mu);
}

/* ==== Compiling ==== */
static int from_schema(json_t *schema, grammar **out, mx_error *err) {
    char *dump = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!dump) return mx_fail(err, "out of memory");
    char *key = malloc(strlen(dump) + 8);
    if (!key) return free(dump), mx_fail(err, "out of memory");
    strcpy(key, "schema:"), strcat(key, dump);
    free(dump);
    int rc = 0;
    if (!(*out = cache_get(key)) && !(rc = grammar_from_json_schema(out, schema, err))) cache_put(key, *out);
    free(key);
    return rc;
}

int srv_grammar_compile_cached(const char *text, size_t len, grammar **out, mx_error *err) {
    char *key = malloc(len + 6);
    if (!key) return mx_fail(err, "out of memory");
    memcpy(key, "gbnf:", 5), memcpy(key + 5, text, len), key[len + 5] = 0;
    int rc = 0;
    if (!(*out = cache_get(key)) && !(rc = grammar_compile(out, text, len, err))) cache_put(key, *out);
    free(key);
    return rc;
}

/* ==== Fields ==== */
static int fail_field(srv_request *r, mx_error *err, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_field(srv_request *r, mx_error *err, const char *field, const char *fmt, ...) {
    char msg[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* bad_param is the top-level field (what OpenAI's error.param names) */
    const char *dot = strchr(field, '.');
    snprintf(r->bad_param, sizeof r->bad_param, "%.*s", (int)(dot ? (size_t)(dot - field) : strlen(field)), field);
    return mx_fail(err, "%s: %s", field, msg);
}

/* Refuses keys of an object other than those listed. */
static int only_keys(srv_request *r, json_t *o, const char *field, const char *const *keys, mx_error *err) {
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        bool known = false;
        for (const char *const *p = keys; *p && !known; p++) known = !strcmp(k, *p);
        if (!known) return fail_field(r, err, field, "unknown field '%s'", k);
    }
    return 0;
}

static int schema_grammar(srv_request *r, json_t *schema, const char *field, mx_error *err) {
    if (!json_is_object(schema) && !json_is_boolean(schema))
        return fail_field(r, err, field, "expected a JSON schema (an object or a boolean)");
    mx_error e2;
    if (from_schema(schema, &r->grammar, &e2)) return fail_field(r, err, field, "%s", e2.msg);
    return 0;
}

static int parse_response_format(srv_request *r, json_t *rf, mx_error *err) {
    if (!json_is_object(rf)) return fail_field(r, err, "response_format", "expected an object");
    json_t *ty = json_object_get(rf, "type");
    if (!json_is_string(ty)) return fail_field(r, err, "response_format.type", "required: text, json_object or json_schema");
    const char *t = json_string_value(ty);
    if (!strcmp(t, "text")) {
        static const char *keys[] = {"type", NULL};
        return only_keys(r, rf, "response_format", keys, err);
    }
    if (!strcmp(t, "json_object")) {
        static const char *keys[] = {"type", "schema", NULL};
        if (only_keys(r, rf, "response_format", keys, err)) return -1;
        json_t *schema = json_object_get(rf, "schema"); /* llama-server: an object with a schema */
        if (schema) return schema_grammar(r, schema, "response_format.schema", err);
        /* any object: through the cache like a schema, so its tables are shared too */
        json_t *any = json_pack("{s:s}", "type", "object");
        const int rc = any ? schema_grammar(r, any, "response_format", err) : fail_field(r, err, "response_format", "out of memory");
        json_decref(any);
        return rc;
    }
    if (!strcmp(t, "json_schema")) {
        static const char *keys[] = {"type", "json_schema", NULL};
        static const char *js_keys[] = {"name", "description", "schema", "strict", NULL};
        if (only_keys(r, rf, "response_format", keys, err)) return -1;
        json_t *js = json_object_get(rf, "json_schema");
        if (!json_is_object(js)) return fail_field(r, err, "response_format.json_schema", "required: an object with a schema");
        if (only_keys(r, js, "response_format.json_schema", js_keys, err)) return -1;
        json_t *name = json_object_get(js, "name"), *desc = json_object_get(js, "description");
        json_t *strict = json_object_get(js, "strict"), *schema = json_object_get(js, "schema");
        if (name && !json_is_null(name)) {
            const char *n = json_is_string(name) ? json_string_value(name) : NULL;
            bool ok = n && *n && strlen(n) <= 64;
            for (const char *p = n; ok && *p; p++)
                ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '-';
            if (!ok) return fail_field(r, err, "response_format.json_schema.name", "expected 1-64 characters of a-z, A-Z, 0-9, _ and -");
        }
        if (desc && !json_is_null(desc) && !json_is_string(desc))
            return fail_field(r, err, "response_format.json_schema.description", "expected a string");
        /* strict true or false: the schema is enforced either way (a stronger promise than
         * OpenAI's best effort without strict) */
        if (strict && !json_is_null(strict) && !json_is_boolean(strict))
            return fail_field(r, err, "response_format.json_schema.strict", "expected a boolean");
        if (!schema) return fail_field(r, err, "response_format.json_schema.schema", "required");
        return schema_grammar(r, schema, "response_format.json_schema.schema", err);
    }
    return fail_field(r, err, "response_format.type", "'%.40s' is not supported (text, json_object, json_schema)", t);
}

int srv_request_parse_structured(srv_request *r, json_t *o, mx_error *err) {
    json_t *rf = json_object_get(o, "response_format"), *js = json_object_get(o, "json_schema");
    json_t *gb = json_object_get(o, "grammar");
    if (rf && json_is_null(rf)) rf = NULL;
    if (js && json_is_null(js)) js = NULL;
    if (gb && json_is_null(gb)) gb = NULL;
    const bool rf_text = rf && json_is_object(rf) && json_is_string(json_object_get(rf, "type")) &&
                         !strcmp(json_string_value(json_object_get(rf, "type")), "text");
    const int n = (rf && !rf_text) + (js != NULL) + (gb != NULL);
    if (n > 1)
        return fail_field(r, err, gb ? "grammar" : "json_schema",
                          "give only one of response_format (json_object / json_schema), json_schema and grammar");
    snprintf(r->grammar_field, sizeof r->grammar_field, "%s", gb ? "grammar" : js ? "json_schema" : "response_format");
    if (rf) return parse_response_format(r, rf, err);
    if (js) return schema_grammar(r, js, "json_schema", err);
    if (gb) {
        if (!json_is_string(gb)) return fail_field(r, err, "grammar", "expected GBNF text (a string)");
        if (!json_string_length(gb)) return 0; /* llama-server: an empty grammar is no grammar */
        mx_error e2;
        if (srv_grammar_compile_cached(json_string_value(gb), json_string_length(gb), &r->grammar, &e2))
            return fail_field(r, err, "grammar", "%s", strncmp(e2.msg, "grammar: ", 9) ? e2.msg : e2.msg + 9);
    }
    return 0;
}
