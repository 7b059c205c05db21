/* Internal structures of the grammar module (src/grammar/). Not part of the public API.
 *
 * Pipeline: GBNF text -> AST (gbnf_parse.c) -> byte-level NFA per rule (grammar_compile.c) ->
 * lazily built parse states (grammar_rt.c) -> token masks over a vocabulary trie
 * (grammar_match.c, grammar_vocab.c). */
#ifndef MLXCEL_GRAMMAR_GRAMMAR_INTERNAL_H
#define MLXCEL_GRAMMAR_GRAMMAR_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "grammar/grammar.h"

/* ==== Limits (hostile input costs bounded memory) ==== */
#define GR_MAX_NODES (1 << 20)       /* NFA nodes of one grammar */
#define GR_MAX_RULES (1 << 16)
#define GR_MAX_REPEAT 100000         /* m, n of x{m,n} */
#define GR_MAX_DEPTH 512             /* nesting of groups in GBNF text */
#define GR_MAX_CFG 20000             /* (node, stack) pairs of one parse state */
#define GR_MAX_TOKEN_BYTES 255       /* longer tokens are never allowed */
#define GR_RT_MAX_BYTES (64u << 20)  /* parse tables of one grammar before they are compacted */
#define GR_MASK_CACHE_BYTES (16u << 20)

/* ==== Growable byte buffer ==== */
typedef struct gr_buf {
    char *p;
    size_t n, cap;
    bool oom; /* an allocation failed: the content is incomplete */
} gr_buf;
void gr_buf_put(gr_buf *b, const void *s, size_t n);
void gr_buf_puts(gr_buf *b, const char *s);
void gr_buf_putc(gr_buf *b, char c);
void gr_buf_printf(gr_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* NUL-terminated copy of the content (malloc'd) or NULL. */
char *gr_buf_strdup(const gr_buf *b);

/* UTF-8: decodes one code point of s[0..n); returns its length, or -1 when invalid (overlong,
 * surrogate, > U+10FFFF, truncated). */
int gr_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);
int gr_utf8_encode(uint32_t cp, uint8_t *out); /* out has room for 4 */

/* ==== AST ==== */
typedef enum { GA_ALT, GA_SEQ, GA_LIT, GA_CLASS, GA_REF, GA_REP } ga_kind;

typedef struct ga_node {
    ga_kind kind;
    int n;                    /* kids (ALT, SEQ; REP has 1), bytes (LIT), range pairs (CLASS) */
    struct ga_node **kids;
    uint8_t *bytes;           /* LIT: UTF-8 */
    uint32_t *ranges;         /* CLASS: [lo0, hi0, lo1, hi1, ...] code points, sorted, disjoint,
                                 surrogates removed */
    int rule;                 /* REF */
    int min, max;             /* REP: max < 0 = unbounded */
    uint32_t pos;             /* byte offset in the source */
    int anon;                 /* NFA rule + 1 when compiled as an anonymous rule (repetitions) */
} ga_node;

typedef struct ga_rule {
    char *name;
    ga_node *body;            /* NULL while only referenced */
    uint32_t def_pos, ref_pos;
} ga_rule;

typedef struct ga_block { struct ga_block *next; size_t used, cap; } ga_block;

typedef struct ga_grammar {
    ga_rule *rules;
    int n_rules, cap_rules;
    ga_block *arena;
    const char *src;          /* for line/column of errors */
    size_t src_len;
} ga_grammar;

void *ga_alloc(ga_grammar *g, size_t n);
void ga_free(ga_grammar *g);
/* Line and column (1-based) of byte offset pos. */
void ga_line_col(const ga_grammar *g, uint32_t pos, int *line, int *col);
int gbnf_parse(ga_grammar *g, const char *src, size_t len, mx_error *err);
int ga_rule_find(const ga_grammar *g, const char *name);

/* ==== NFA ==== */
enum { GE_BYTE = 0, GE_EPS = 1, GE_CALL = 2 };

typedef struct gn_edge {
    uint8_t kind, lo, hi;     /* GE_BYTE: byte range [lo, hi] */
    int32_t to;               /* target node (CALL: the return node) */
    int32_t rule;             /* GE_CALL */
} gn_edge;

typedef struct gn_node {
    uint32_t e0, ne;          /* edges[e0 .. e0 + ne) */
    uint8_t end;              /* the rule may finish here */
    uint8_t pure_ret;         /* only reaches rule ends without consuming: a call returning
                                 here needs no stack frame (tail call) */
    uint8_t has_byte;         /* has a GE_BYTE edge */
} gn_node;

typedef struct gr_rt gr_rt;

struct grammar {
    atomic_int refs;
    gn_node *nodes;
    int n_nodes;
    gn_edge *edges;
    int n_edges;
    int32_t *rule_start;      /* [n_rules] */
    int n_rules;
    int root;
    uint8_t cls[256];         /* byte -> class: bytes no edge tells apart share a class */
    uint8_t cls_rep[256];     /* class -> its first byte */
    int n_cls;
    pthread_mutex_t mu;       /* guards rt */
    gr_rt *rt;                /* parse tables, created on first use */
};

/* grammar_compile.c: the AST's rules into g's NFA. */
int gr_build_nfa(grammar *g, ga_grammar *ast, int root, mx_error *err);

/* ==== Parse states (grammar_rt.c); caller holds g->mu ==== */
#define GR_DEAD (-1)
#define GR_UNKNOWN (-2)
#define GR_FAIL (-3)         /* a table could not grow (memory or GR_MAX_CFG) */

typedef struct grammar_matcher grammar_matcher;

struct gr_rt {
    grammar *g;
    int K;                    /* byte classes */
    /* stacks: id 0 is the empty stack; frame (ret node, parent id) */
    int32_t *stk_ret, *stk_parent;
    int n_stk, cap_stk;
    int32_t *stk_map;         /* open addressing: stack ids, -1 = empty */
    uint32_t stk_map_cap;
    /* states: a sorted set of configurations (node << 32 | stack) and whether the grammar may
     * end there */
    uint64_t *cfgs;
    size_t n_cfgs, cap_cfgs;
    uint32_t *st_off, *st_n;
    uint8_t *st_accept;
    int32_t *st_mask;         /* slot of its cached mask, -1 = none */
    int n_st, cap_st;
    int32_t *st_map;
    uint32_t st_map_cap;
    int32_t *rows;            /* [n_st * K] per byte class: the next state's row offset (its id
                                 times K, so the mask walk chains lookups without a multiply),
                                 GR_DEAD, or GR_UNKNOWN until asked */
    /* closure scratch */
    uint64_t *work, *out;
    size_t cap_work, cap_out;
    uint64_t *seen_key;
    uint32_t *seen_stamp, stamp, seen_cap;
    int32_t initial;
    /* masks of visited states, for one vocabulary at a time */
    const grammar_vocab *mask_vocab;
    int mask_words;
    uint32_t *mask_pool;      /* [mask_cap * mask_words] */
    int n_mask, mask_cap;
    /* matchers using these tables (compaction renumbers their states) */
    grammar_matcher *live;
    size_t bytes;             /* rough size of the tables */
    uint64_t n_compactions;
};

gr_rt *gr_rt_get(grammar *g);               /* creates on first use; NULL on OOM */
void gr_rt_free(gr_rt *rt);
/* The next state (its id) from s on class c; computes and stores it when unknown. */
int32_t gr_rt_step(gr_rt *rt, int32_t s, int c);
static inline int32_t gr_rt_next(gr_rt *rt, int32_t s, uint8_t byte) {
    int c = rt->g->cls[byte];
    int32_t t = rt->rows[(size_t)s * (size_t)rt->K + (size_t)c];
    if (t == GR_UNKNOWN) return gr_rt_step(rt, s, c);
    return t < 0 ? t : t / rt->K;
}
static inline bool gr_rt_accepting(const gr_rt *rt, int32_t s) { return rt->st_accept[s] != 0; }
static inline bool gr_rt_done(const gr_rt *rt, int32_t s) { return rt->st_accept[s] && rt->st_n[s] == 0; }
/* Drops every state no live matcher is in when the tables outgrew GR_RT_MAX_BYTES. */
int gr_rt_maybe_compact(gr_rt *rt);

/* ==== Vocabulary trie (grammar_vocab.c) ==== */
/* 8 bytes: the walk streams these (2.2 MB for Llama 3); skips live apart (read on refusals). */
typedef struct gv_node {
    uint8_t byte;
    uint8_t depth;            /* 1 = first byte of a token (tokens are at most 255 bytes) */
    uint16_t pad;
    int32_t tokp;             /* 32 + the token ending here, 0 = none (more in dup_next): the
                                 walk sets bit tokp of (mask - 1 word) without a branch */
} gv_node;

struct grammar_vocab {
    atomic_int refs;
    int n_tokens;
    uint8_t *flags;
    uint32_t *off, *len;      /* [n_tokens] bytes of token i: data[off[i] .. off[i] + len[i]) */
    uint8_t *data;
    int32_t *dup_next;        /* [n_tokens] next token with the same bytes, -1 = none */
    int32_t *dups;            /* [n_dups] pairs (first token, another with its bytes) */
    int n_dups;
    gv_node *nodes;
    int32_t *skip;            /* [n_nodes] index of the first node after node i's subtree */
    int n_nodes;
    int max_depth;
    int32_t *eos;
    int n_eos;
};

struct grammar_matcher {
    grammar *g;
    grammar_vocab *v;
    int32_t state;
    bool ended;               /* EOS accepted */
    uint32_t *mask_buf;       /* one scratch word, then the mask */
    int mask_words;
    int32_t *wstate;          /* walk scratch: state per depth [max_depth + 1] */
    struct grammar_matcher *prev, *next; /* rt->live */
};

#endif
