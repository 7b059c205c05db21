/* Minimal JSON scanner used to stream model.vocab / model.merges (see tok_json.c). */
#ifndef MLXCEL_TEXT_TOK_JSON_H
#define MLXCEL_TEXT_TOK_JSON_H

#include <stdio.h>

#include "text/tok_internal.h"

typedef struct tk_jscan {
    const char *begin, *p, *end;
    const char *name; /* for messages */
    mx_error *err;
} tk_jscan;

void tk_js_ws(tk_jscan *s);
char tk_js_peek(tk_jscan *s);
int tk_js_expect(tk_jscan *s, char c);
int tk_js_string(tk_jscan *s, tk_buf *out); /* decoded UTF-8 into out (reset first) */
int tk_js_int(tk_jscan *s, int64_t *v);
int tk_js_skip(tk_jscan *s);                /* any value */
/* Object members: after '{', call until it returns 0 (end); 1 = key read and ':' consumed. */
int tk_js_next_member(tk_jscan *s, bool *first, tk_buf *key);
/* Array elements: after '[', call until it returns 0 (end); 1 = an element follows. */
int tk_js_next_elem(tk_jscan *s, bool *first);

#endif
