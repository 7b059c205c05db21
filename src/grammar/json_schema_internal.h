/* Internals of the JSON Schema converter (json_schema*.c). */
#ifndef MLXCEL_GRAMMAR_JSON_SCHEMA_INTERNAL_H
#define MLXCEL_GRAMMAR_JSON_SCHEMA_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>

#include "grammar/grammar_internal.h"
#include "grammar/json_schema.h"

#define JS_MAX_DEPTH 64              /* nesting of schemas */
#define JS_MAX_TEXT (8u << 20)       /* GBNF text of one builder */

/* ==== Builder ==== */
typedef struct gb_rule {
    char *name, *body;
} gb_rule;

struct grammar_builder {
    gb_rule *rules;
    int n, cap;
    size_t bytes;     /* text size so far */
    gr_buf text;      /* grammar_builder_text's result */
};

/* Adds `name ::= body`, or finds it: the same name with the same body is one rule; a name taken
 * by another body gets a numeric suffix. *out: the name used (owned by b). 0 or -1. */
int gb_add(grammar_builder *b, const char *name, const char *body, const char **out, mx_error *err);
bool gb_has(grammar_builder *b, const char *name);

/* ==== Converter ==== */
typedef struct jsc {
    grammar_builder *b;
    json_t *root;             /* the document $ref pointers resolve in */
    char **ref_keys;          /* refs being or already converted -> their rule */
    const char **ref_rules;
    int n_refs;
    int depth;
    char path[512];           /* JSON pointer of the schema being converted */
    mx_error *err;
} jsc;

int jsc_fail(jsc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Primitive rules by name ("space", "char", "string", "number", "integer", "boolean", "null",
 * "value", "object", "array", "date", "time", "date-time", "uuid"), added with what they need;
 * NULL with c->err set on failure. */
const char *jsc_prim(jsc *c, const char *name);
/* A rule name derived from a hint: [A-Za-z0-9-] only. */
void jsc_rule_name(char *dst, size_t cap, const char *hint);

/* The rule matching one instance of s (named from name, or a primitive's). */
int jsc_visit(jsc *c, json_t *s, const char *name, const char **out);
/* type object / array parts of s. */
int jsc_object(jsc *c, json_t *s, const char *name, const char **out);
int jsc_array(jsc *c, json_t *s, const char *name, const char **out);
/* Appends "/seg" to c->path (JSON pointer escaped); returns the length to restore. */
size_t jsc_path_push(jsc *c, const char *seg);
void jsc_path_pop(jsc *c, size_t at);

/* GBNF literal of bytes / of the compact JSON text of a value, appended to o. */
void gb_literal(gr_buf *o, const char *s, size_t n);
int jsc_json_literal(jsc *c, gr_buf *o, json_t *v);

/* type string / number / integer: the rule matching s (enum and const are handled before). */
int jsc_string(jsc *c, json_t *s, const char *name, const char **out);
int jsc_number(jsc *c, json_t *s, bool integer, const char *name, const char **out);
/* pattern (ECMAScript regex subset) -> GBNF expression for the JSON-encoded string content
 * between the quotes. */
int jsc_regex(jsc *c, const char *pattern, gr_buf *out);
/* Appends a GBNF character class for code point ranges (pairs, sorted, disjoint). */
void gb_class(gr_buf *o, const uint32_t *r, int n);

#endif
