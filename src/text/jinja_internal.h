/* Jinja interpreter internals shared by jinja_*.c: arena, values, tokens, AST, render state.
 *
 * The interpreter mirrors what transformers' apply_chat_template uses: Jinja2 with
 * trim_blocks=True, lstrip_blocks=True, the loopcontrols extension, an immutable sandbox, and
 * Python semantics for values (str is a sequence of code points, ints vs floats, True/None
 * printing). Values live in a per-render arena: they are immutable except namespaces, so sharing
 * is safe and cycles (ns.self = ns) cannot leak. */
#ifndef MLXCEL_TEXT_JINJA_INTERNAL_H
#define MLXCEL_TEXT_JINJA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "text/chat_template.h"

/* ==== Arena ==== */
typedef struct jarena_chunk jarena_chunk;
typedef struct jarena {
    jarena_chunk *head;
    size_t used;  /* bytes handed out, for the memory limit */
    size_t limit; /* 0 = unlimited */
    bool failed;  /* an allocation went over the limit */
} jarena;

void *jarena_alloc(jarena *a, size_t n); /* zeroed; NULL over the limit or out of memory */
void jarena_free(jarena *a);
char *jarena_strndup(jarena *a, const char *s, size_t n);

/* ==== Values ==== */
typedef enum jv_kind {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT,
    JV_NS,     /* namespace(): the only mutable value */
    JV_MACRO,  /* macro or caller */
    JV_FUNC,   /* built-in global (range, namespace, raise_exception, ...) */
    JV_METHOD, /* bound method: "abc".strip, d.items, loop.cycle */
    JV_LOOP,   /* the loop variable of a for */
} jv_kind;

typedef struct jv_list jv_list;
typedef struct jv_dict jv_dict;
typedef struct jv_macro jv_macro;
typedef struct jv_method jv_method;
typedef struct jv_loop jv_loop;

typedef struct jv {
    uint8_t k;     /* jv_kind */
    uint8_t safe;  /* Markup from |safe: printing is unchanged (no autoescape), kept for |e */
    union {
        bool b;
        int64_t i;
        double f;
        struct { const char *p; size_t n; } s; /* UTF-8, not NUL-terminated in general */
        jv_list *l;
        jv_dict *d;      /* JV_DICT and JV_NS */
        jv_macro *m;
        int fn;          /* JV_FUNC id */
        jv_method *meth;
        jv_loop *loop;
        const char *undef; /* JV_UNDEF: hint for errors, "'x' is undefined" (NUL-terminated) */
    } u;
} jv;

struct jv_list { size_t n, cap; jv *v; bool tuple; };
struct jv_dict { size_t n, cap; jv *keys, *vals; };
struct jv_method { jv self; const char *name; };
struct jv_loop {
    const jv_list *items; /* [length] the (filtered) sequence being iterated */
    size_t index0;
    int depth0;
};

static inline jv jv_undef(const char *hint) { jv v = {.k = JV_UNDEF}; v.u.undef = hint; return v; }
static inline jv jv_none(void) { jv v = {.k = JV_NONE}; return v; }
static inline jv jv_bool(bool b) { jv v = {.k = JV_BOOL}; v.u.b = b; return v; }
static inline jv jv_int(int64_t i) { jv v = {.k = JV_INT}; v.u.i = i; return v; }
static inline jv jv_float(double f) { jv v = {.k = JV_FLOAT}; v.u.f = f; return v; }
static inline jv jv_strn(const char *p, size_t n) { jv v = {.k = JV_STR}; v.u.s.p = p; v.u.s.n = n; return v; }

/* Growable byte buffer on the heap (output, str(), json). */
typedef struct jbuf { char *p; size_t n, cap; size_t limit; bool failed; } jbuf;
bool jbuf_put(jbuf *b, const char *s, size_t n);
bool jbuf_puts(jbuf *b, const char *s);
bool jbuf_printf(jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void jbuf_free(jbuf *b);

jv_list *jv_list_new(jarena *a, size_t cap);
bool jv_list_push(jarena *a, jv_list *l, jv v);
jv_dict *jv_dict_new(jarena *a, size_t cap);
bool jv_dict_set(jarena *a, jv_dict *d, jv key, jv val); /* replaces an equal key */
const jv *jv_dict_get(const jv_dict *d, jv key);
const jv *jv_dict_get_str(const jv_dict *d, const char *key);

const char *jv_type_name(jv v);   /* Python type name: 'str', 'int', 'list', 'dict', ... */
bool jv_truthy(jv v);
bool jv_equal(jv a, jv b);        /* Python ==: 1 == 1.0 == True, Undefined == Undefined */
/* Python ordering (<): returns -1/0/1 in *out, or -1 (with err) when the types do not order. */
int jv_compare(jv a, jv b, int *out, mx_error *err);
bool jv_is_number(jv v); /* int, float or bool */
double jv_as_double(jv v);

/* str(v) and repr(v) as Python prints them. False when the buffer hits its limit. */
bool jv_write_str(jbuf *b, jv v);
bool jv_write_repr(jbuf *b, jv v);
void jv_format_float(double f, char out[40]); /* Python repr(float) */
/* json.dumps(v, ensure_ascii, indent, separators, sort_keys); -1 with err on non-JSON values. */
typedef struct jjson_opts {
    bool ensure_ascii, sort_keys;
    const char *indent; /* NULL: single line */
    const char *item_sep, *key_sep;
} jjson_opts;
int jv_write_json(jbuf *b, jv v, const jjson_opts *o, int depth, mx_error *err);

/* Converts a jansson value (deep) into arena values. */
jv jv_from_json(jarena *a, const json_t *j);

/* ==== UTF-8 helpers (strings are sequences of code points, as in Python) ==== */
size_t ju8_len(const char *p, size_t n);                  /* code points */
size_t ju8_offset(const char *p, size_t n, size_t cp);    /* byte offset of code point cp */
int32_t ju8_next(const char *p, size_t n, size_t *pos);   /* decode at *pos, advance */
bool ju8_is_space(int32_t cp);                            /* Python str.isspace() */

/* ==== Tokens ==== */
typedef enum jtok_kind {
    JT_EOF, JT_DATA, JT_VAR_BEGIN, JT_VAR_END, JT_BLOCK_BEGIN, JT_BLOCK_END,
    JT_NAME, JT_STRING, JT_INT, JT_FLOAT, JT_OP,
} jtok_kind;

typedef struct jtok {
    uint8_t kind;
    int line;
    const char *p; size_t n;  /* text; for JT_STRING the unescaped value (arena) */
    int64_t i; double f;
} jtok;

/* Splits normalized source into tokens (arena). */
int jinja_lex(jarena *a, const char *src, size_t n, jtok **out, size_t *n_out, mx_error *err);

/* ==== AST ==== */
typedef enum jnode_kind {
    /* expressions */
    JN_CONST, JN_NAME, JN_GETATTR, JN_GETITEM, JN_SLICE, JN_CALL, JN_FILTER, JN_TEST,
    JN_NEG, JN_POS, JN_NOT, JN_AND, JN_OR, JN_BINOP, JN_COMPARE, JN_COND,
    JN_LIST, JN_TUPLE, JN_DICT,
    /* statements */
    JN_BODY, JN_DATA, JN_PRINT, JN_IF, JN_FOR, JN_SET, JN_SET_BLOCK, JN_MACRO, JN_CALL_BLOCK,
    JN_FILTER_BLOCK, JN_BREAK, JN_CONTINUE, JN_WITH, JN_NOOP,
    JN_INPUT, /* the rendered body of a filter block / set block, as the filter's argument */
} jnode_kind;

/* Binary operators and comparison operators (node->op). */
enum { JOP_ADD, JOP_SUB, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD, JOP_POW, JOP_CONCAT,
       JOP_EQ, JOP_NE, JOP_LT, JOP_LE, JOP_GT, JOP_GE, JOP_IN, JOP_NOTIN };

typedef struct jnode jnode;
struct jnode {
    uint8_t kind;
    uint8_t op;
    int line;
    jnode *a, *b, *c, *d;      /* children: operand(s), test/then/else, start/stop/step, ... */
    jnode **kids; size_t n_kids;  /* args / body statements / list items / dict keys */
    jnode **kids2; size_t n_kids2; /* keyword arg values / dict values / else body */
    const char **names; size_t n_names; /* keyword names / for targets / macro params */
    const char *name;          /* variable, attribute, filter, test, macro name */
    jv val;                    /* JN_CONST */
    int id;                    /* resolved filter/test id, or -1 when unknown */
};

/* Parses tokens into a JN_BODY tree. */
int jinja_parse(jarena *a, const jtok *toks, size_t n_toks, jnode **out, mx_error *err);

/* ==== Render state ==== */
typedef struct jframe jframe;
struct jframe {
    jframe *parent;
    jv_dict *vars;
};

typedef struct jrender {
    jarena arena;       /* every value made while rendering */
    jframe *root;       /* top-level template variables (parent: the context) */
    jv_dict *ctx;       /* render context and globals */
    mx_error *err;
    int depth, max_depth;
    uint64_t steps, max_steps;
    size_t max_output;
    int brk;            /* 1 break, 2 continue pending */
    jframe *cur;        /* innermost scope */
    jv input;           /* body text of the filter block / set block being filtered */
    jv_macro *caller;   /* pending `caller` for the macro invoked by {% call %} */
} jrender;

struct jv_macro {
    const jnode *def;   /* JN_MACRO, or JN_CALL_BLOCK for a caller */
    jframe *closure;    /* scope the macro was defined in */
};

struct jinja_template {
    jarena arena;
    jnode *root;
};

/* Fails with "chat template line N: ..." */
int jr_fail(jrender *r, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The error for using an undefined value. */
int jr_undefined_error(jrender *r, int line, jv v);
jv jr_str(jrender *r, jv v);                  /* str(v) as a JV_STR (arena) */
jv jr_string_from_buf(jrender *r, jbuf *b);   /* copies into the arena; frees b */

/* Scopes and helpers (jinja_eval.c). */
jv jr_lookup(jrender *r, const char *name);
int jr_assign(jrender *r, int line, jframe *f, const char *name, jv v);
jframe *jr_frame_new(jrender *r, jframe *parent);
int jr_oom(jrender *r, int line);
/* Charges n units of work to the step budget (for filters/operators whose cost grows with
 * their input, so that no single expression can run unbounded). */
int jr_charge(jrender *r, int line, uint64_t n);
uint64_t jr_cost(jv v); /* rough work to scan v once */
char *jr_hint(jrender *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Evaluation entry points (jinja_eval.c, jinja_exec.c). */
int jr_eval(jrender *r, const jnode *n, jv *out);
int jr_exec(jrender *r, const jnode *n, jbuf *out);
int jr_call_value(jrender *r, int line, jv callee, const jv *args, size_t n_args,
                  const char **kw_names, const jv *kw_vals, size_t n_kw, jv *out);
int jr_iterate(jrender *r, int line, jv v, jv_list **out); /* list(v) */
int jr_getattr(jrender *r, int line, jv obj, const char *name, jv *out);
int jr_getitem(jrender *r, int line, jv obj, jv key, jv *out);

/* Filters and tests (jinja_filters.c). ids resolved at parse time; -1 = unknown. */
int jinja_filter_id(const char *name);
int jinja_test_id(const char *name);
int jr_apply_filter(jrender *r, const jnode *n, jv arg, const jv *args, size_t n_args,
                    const char **kw_names, const jv *kw_vals, size_t n_kw, jv *out);
int jr_apply_test(jrender *r, const jnode *n, int id, const char *name, jv arg, const jv *args,
                  size_t n_args, bool *out);

/* Methods and globals (jinja_methods.c). */
bool jinja_has_method(jv self, const char *name);
int jr_call_method(jrender *r, int line, const jv_method *m, const jv *args, size_t n_args,
                   const char **kw_names, const jv *kw_vals, size_t n_kw, jv *out);
enum { JF_RANGE, JF_NAMESPACE, JF_DICT, JF_RAISE, JF_STRFTIME, JF_COUNT };
extern const char *const jinja_func_names[JF_COUNT];
int jr_call_func(jrender *r, int line, int fn, const jv *args, size_t n_args,
                 const char **kw_names, const jv *kw_vals, size_t n_kw, jv *out);
int jr_percent_format(jrender *r, int line, jv fmt, jv args, jv *out); /* "%s" % x */

#endif
