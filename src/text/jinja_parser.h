/* Parser internals shared by jinja_parse.c (expressions) and jinja_parse_stmt.c (statements). */
#ifndef MLXCEL_TEXT_JINJA_PARSER_H
#define MLXCEL_TEXT_JINJA_PARSER_H

#include "text/jinja_internal.h"

#define MAX_PARSE_DEPTH 200

typedef struct jparser {
    jarena *a;
    const jtok *t;
    size_t n, i;
    int depth;
    int loop_depth;
    mx_error *err;
} jparser;

/* Growable node / name arrays in the arena. */
typedef struct jp_nvec { jnode **v; size_t n, cap; } jp_nvec;
typedef struct jp_svec { const char **v; size_t n, cap; } jp_svec;

const jtok *jp_cur(jparser *P);
const jtok *jp_peek(jparser *P, size_t k);
void jp_adv(jparser *P);
bool jp_is_op(const jtok *t, const char *op);
bool jp_is_name(const jtok *t, const char *name);
int jp_fail_at(jparser *P, const jtok *t, const char *fmt, const char *arg);
int jp_unexpected(jparser *P, const char *expected);
jnode *jp_mk(jparser *P, int kind, int line);
const char *jp_tok_str(jparser *P, const jtok *t);
int jp_nvec_push(jparser *P, jp_nvec *v, jnode *x);
int jp_svec_push(jparser *P, jp_svec *v, const char *x);
int jp_expect_op(jparser *P, const char *op);
const char *jp_expect_name(jparser *P);
int jp_parse_call_args(jparser *P, jnode *n);
const char *jp_parse_dotted(jparser *P);
jnode *jp_parse_filter(jparser *P, jnode *arg);
jnode *jp_parse_expr(jparser *P, bool with_cond);
jnode *jp_parse_tuple(jparser *P, bool with_cond, const char *extra_end, bool explicit_parens);

#endif
