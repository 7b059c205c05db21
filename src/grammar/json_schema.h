/* JSON Schema -> GBNF (grammar/grammar.h), and a builder that composes literal text with
 * schema-constrained JSON (tool calls). The supported subset and every refusal are listed in
 * docs/structured-output.md; a keyword outside it is refused with an error naming it and where
 * it is ("schema at /properties/age: 'multipleOf' is not supported"), never ignored.
 *
 * Output shape (as llama.cpp's json_schema_to_grammar): compact JSON with optional whitespace
 * after each token (`space ::= | " " | "\n"{1,2} [ \t]{0,20}`), properties in the order the
 * schema lists them (required ones first), strings with any character or escape.
 *
 * Composition, e.g. a Qwen-style tool call constrained to two tools:
 *
 *     grammar_builder *b = grammar_builder_new();
 *     const char *call;                       // {"name": "f", "arguments": {...}} | ... as a rule
 *     grammar_builder_add_schema(b, "call", tool_call_schema, &call, err);   // anyOf of objects
 *     grammar_builder_add_rule(b, "root", "\"<tool_call>\\n\" call \"\\n</tool_call>\"", err);
 *     grammar *g;
 *     grammar_builder_compile(b, "root", &g, err);
 *     grammar_builder_free(b);
 *
 * grammar_gbnf_literal() quotes arbitrary text for such rule bodies. Rules of several schemas
 * share the primitive rules (space, string, ...) and get distinct names. */
#ifndef MLXCEL_GRAMMAR_JSON_SCHEMA_H
#define MLXCEL_GRAMMAR_JSON_SCHEMA_H

#include <jansson.h>
#include <stddef.h>

#include "base/error.h"
#include "grammar/grammar.h"

/* ==== One schema ==== */
/* The GBNF text of schema (root rule `root`); *gbnf malloc'd. */
int grammar_json_schema_to_gbnf(json_t *schema, char **gbnf, mx_error *err);
/* Converted and compiled. */
int grammar_from_json_schema(grammar **out, json_t *schema, mx_error *err);
/* Any JSON object (OpenAI's response_format json_object). */
int grammar_json_object(grammar **out, mx_error *err);

/* ==== Builder: rules from several schemas and hand-written rules ==== */
typedef struct grammar_builder grammar_builder;

grammar_builder *grammar_builder_new(void);
void grammar_builder_free(grammar_builder *b);
/* Adds the rules of schema; *rule (owned by b, valid until it is freed) is the name of the rule
 * that matches one instance, derived from name_hint ([A-Za-z0-9-], made unique). */
int grammar_builder_add_schema(grammar_builder *b, const char *name_hint, json_t *schema, const char **rule,
                               mx_error *err);
/* Adds `name ::= body` (GBNF); a name already taken is an error. */
int grammar_builder_add_rule(grammar_builder *b, const char *name, const char *body, mx_error *err);
/* The GBNF text so far (owned by b, valid until the next call on b). */
const char *grammar_builder_text(grammar_builder *b);
int grammar_builder_compile(grammar_builder *b, const char *root, grammar **out, mx_error *err);

/* s[0..n) as a GBNF string literal with its quotes ("a\"b"); malloc'd. */
char *grammar_gbnf_literal(const char *s, size_t n);

#endif
