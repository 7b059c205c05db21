/* Internals shared by srv_toolparse.c (the byte machine) and srv_toolparse_util.c (buffers,
 * literal and JSON-head matchers, value conversions). Not an API. */
#ifndef MLXCEL_SERVER_SRV_TOOLPARSE_INT_H
#define MLXCEL_SERVER_SRV_TOOLPARSE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/srv_toolparse.h"

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


/* ==== The machine's state (srv_toolparse.c; families in srv_toolparse_fam.c) ==== */
enum { T_START, T_THINK, T_AFTER_THINK, T_CONTENT, T_REGION };

enum { /* region sub-states */
    S_H_OPEN, S_H_TAIL, S_H_SKIP,                        /* <tool_call> ... </tool_call> */
    S_X_NAME, S_X_BODY, S_X_PKEY, S_X_PVAL,              /* <function=..> XML body */
    S_JC_HEAD, S_JBUF, S_AV, S_JC_REST,                  /* a JSON call object, its arguments */
    S_M_OPEN, S_M_ARR, S_M_NEXT, S_M_NAME, S_M_CALLID,   /* [TOOL_CALLS] */
    S_D_OPEN, S_D_TYPE, S_D_NAME, S_D_FENCE, S_D_CLOSE,  /* DeepSeek V3 tool tokens */
    S_P_OPEN, S_P_IDENT, S_P_ARGS, S_P_CODE,             /* <|python_tag|> */
    S_L_TAIL,                                            /* after a bare Llama JSON call */
    S_EXIT,                                              /* continuation: back to content */
};

enum { AV_WS, AV_CONT, AV_STR, AV_SCALAR }; /* arguments value scanner */

#define THINK_OPEN "<think>"
#define THINK_CLOSE "</think>"
#define DS_CALLS_BEGIN "<｜tool▁calls▁begin｜>"
#define DS_CALLS_END "<｜tool▁calls▁end｜>"
#define DS_CALL_BEGIN "<｜tool▁call▁begin｜>"
#define DS_CALL_END "<｜tool▁call▁end｜>"
#define DS_SEP "<｜tool▁sep｜>"

typedef struct cp_call {
    char id[40];
    char *name;
    cp_buf args;
} cp_call;

struct srv_cp {
    srv_cp_config cfg;
    int top, sub;
    int after_av, after_obj; /* where the arguments value / the call object hand over */
    cp_buf hold;             /* lookahead that may still be a marker */
    cp_buf raw;              /* an uncommitted region's bytes, opener included */
    cp_buf ws;               /* content whitespace held back */
    cp_buf rws;              /* reasoning whitespace held back */
    cp_buf in;               /* input queue (re-read bytes go to its front) */
    size_t in_rd;
    cp_buf tmp, key, val;    /* name / buffered object / XML key and value */
    cp_scan scan;
    char quote;              /* S_P_ARGS: the quote of the Python string being read, 0 outside */
    int av;
    bool committed;          /* the region has had a call */
    bool suppress;           /* the current call is dropped (parallel_tool_calls false) */
    bool reasoned;           /* a non-space reasoning byte was seen */
    int n_params;            /* XML parameters emitted for the current call */
    int n_seen;              /* calls parsed, suppressed ones included */
    /* the accumulated message */
    cp_buf content, reasoning;
    cp_call *calls;
    int n_calls, cap_calls;
    /* events of the current feed */
    srv_cp_sink sink;
    void *sink_ctx;
    int ev_kind, ev_index; /* -1: none pending */
    cp_buf ev;
    uint64_t rng;
};

/* Shared steps (srv_toolparse.c) */
void cp_call_begin(srv_cp *p, const char *name, size_t len); /* a call's commit point */
void cp_out_args(srv_cp *p, const char *s, size_t n);
void cp_region_exit(srv_cp *p, const char *c);               /* back to content, re-reading hold (+ c) */
void cp_fallback(srv_cp *p);                                 /* not a call after all: content */
void cp_av_start(srv_cp *p, int after);                      /* an arguments value, then `after` */
void cp_obj_start(srv_cp *p, int after_obj);                 /* a JSON call object, then `after_obj` */
void cp_go(srv_cp *p, int sub);
int cp_hold_lits(srv_cp *p, char c, const char *const *lits, int n, void (*rel)(srv_cp *, char));
void cp_rel_tmp(srv_cp *p, char c);
void cp_rel_val(srv_cp *p, char c);
void cp_st_av(srv_cp *p, char c);
/* The families' sub-machines (srv_toolparse_fam.c) */
void cp_st_hermes(srv_cp *p, char c);
void cp_st_mistral(srv_cp *p, char c);
void cp_st_deepseek(srv_cp *p, char c);
void cp_st_pytag(srv_cp *p, char c);

#endif
