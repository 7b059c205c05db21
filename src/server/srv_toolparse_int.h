/* Internals shared by srv_toolparse.c (the byte machine) and srv_toolparse_util.c (buffers,
 * literal and JSON-head matchers, value conversions). Not an API. */
#ifndef MLXCEL_SERVER_SRV_TOOLPARSE_INT_H
#define MLXCEL_SERVER_SRV_TOOLPARSE_INT_H

#include <stdbool.h>
#include <stddef.h>

/* ==== Growable byte buffer (NUL-terminated; allocation failure drops the bytes) ==== */
typedef struct cp_buf {
    char *p;
    size_t n, cap;
} cp_buf;

void cp_put(cp_buf *b, const char *s, size_t n);
static inline void cp_putc(cp_buf *b, char c) { cp_put(b, &c, 1); }
static inline void cp_puts(cp_buf *b, const char *s) {
    size_t n = 0;
    while (s[n]) n++;
    cp_put(b, s, n);
}
void cp_shift(cp_buf *b, size_t k); /* drops the first k bytes */
void cp_free(cp_buf *b);
/* JSON string escaping of s[0..n) (no quotes added), bytes >= 0x80 copied as they are */
void cp_put_json_escaped(cp_buf *b, const char *s, size_t n);

/* ==== Matching ==== */
typedef enum cp_match { CP_FAIL = 0, CP_PARTIAL, CP_MATCH } cp_match;

static inline bool cp_is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
/* s[0..n) against a literal: MATCH when equal, PARTIAL when a proper prefix of it, else FAIL */
cp_match cp_lit(const char *s, size_t n, const char *lit);
/* {"name": "NAME", "arguments": (or "parameters":), optionally after "type": "function",
 * matched up to the colon before the arguments. brace: s starts at the '{' (else at the first
 * key). On MATCH the name is s[*name_off .. *name_off + *name_len). */
cp_match cp_json_head(const char *s, size_t n, bool brace, size_t *name_off, size_t *name_len);

/* ==== JSON scanning (depth of brackets outside strings) ==== */
typedef struct cp_scan {
    int depth;
    bool in_str, esc;
} cp_scan;
/* Feeds one byte; returns true when it closed the outermost bracket (depth back to 0). */
bool cp_scan_byte(cp_scan *s, char c);

/* ==== Conversions (malloc'd JSON text, or NULL when the input is not what is expected) ==== */
/* Llama 3.1 built-in call arguments: k="v", n=3, flag=True -> {"k":"v","n":3,"flag":true} */
char *cp_python_kwargs_json(const char *s, size_t n);
/* A <parameter=K> value of the XML tool-call body as JSON: a string unless the parameter's
 * schema type is not "string" and the text parses as JSON. */
char *cp_xml_value_json(const char *v, size_t n, const char *schema_type);
/* A buffered {"name":..,"arguments":..} object in any key order: *name malloc'd and *args the
 * arguments as JSON text (a string value is unwrapped). 0, or -1 when it is not a call. */
int cp_call_object(const char *s, size_t n, char **name, char **args);
/* The decoded text of a JSON string literal s[0..n) (quotes included), NULL when invalid. */
char *cp_json_unquote(const char *s, size_t n, size_t *out_len);

#endif
