/* Internal structures of the tokenizer (src/text/tok_*.c). Not part of the public API.
 *
 * Encoding pipeline (mirrors Hugging Face `tokenizers`):
 *   text -> added tokens split out (non-normalized ones on the raw text)
 *        -> normalizer on each remaining piece -> normalized added tokens split out
 *        -> pre-tokenizer stages (flattened Sequence), run as a pipeline piece by piece
 *        -> BPE on each final piece (word cache) -> post-processor (prefix/suffix ids).
 * Decoding: ids -> pieces (added tokens included) -> decoder stages (flattened) -> concat. */
#ifndef MLXCEL_TEXT_TOK_INTERNAL_H
#define MLXCEL_TEXT_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "text/tokenizer.h"

/* ==== Growable buffers ==== */
typedef struct tk_buf {
    char *p;
    size_t n, cap;
} tk_buf;
typedef struct tk_ids {
    int32_t *p;
    size_t n, cap;
} tk_ids;
typedef struct tk_span {
    size_t a, b; /* byte range [a, b) */
    int m;       /* 1 when the range is a pattern match */
} tk_span;
typedef struct tk_spans {
    tk_span *p;
    size_t n, cap;
} tk_spans;

/* These abort only on out-of-memory, which is not a property of the input. */
void tk_buf_reserve(tk_buf *b, size_t extra);
void tk_buf_put(tk_buf *b, const void *s, size_t n);
static inline void tk_buf_putc(tk_buf *b, char c) {
    if (b->n + 1 > b->cap) tk_buf_reserve(b, 1);
    b->p[b->n++] = c;
}
void tk_grow(void **p, size_t *cap, size_t elem);
static inline void tk_ids_push(tk_ids *v, int32_t id) {
    if (v->n == v->cap) tk_grow((void **)&v->p, &v->cap, sizeof *v->p);
    v->p[v->n++] = id;
}
static inline void tk_spans_push(tk_spans *v, size_t a, size_t b, int m) {
    if (v->n == v->cap) tk_grow((void **)&v->p, &v->cap, sizeof *v->p);
    v->p[v->n++] = (tk_span){a, b, m};
}

/* ==== Unicode helpers ==== */
/* Decodes one UTF-8 char at s[0..n) (n >= 1, input known valid). Returns its length. */
int tk_utf8_next(const char *s, size_t n, int32_t *cp);
int tk_utf8_put(char *dst, int32_t cp); /* dst has room for 4 bytes */
/* Appends src to dst, replacing each maximal invalid subsequence with U+FFFD (like Rust's
 * String::from_utf8_lossy). Returns the number of replacements. */
size_t tk_utf8_lossy(tk_buf *dst, const char *src, size_t n);
/* True when s[0..n) is valid UTF-8 (no overlongs, surrogates or code points above U+10FFFF). */
bool tk_utf8_valid(const char *s, size_t n);
bool tk_is_whitespace(int32_t cp); /* Rust char::is_whitespace (White_Space property) */
bool tk_is_numeric(int32_t cp);    /* Nd, Nl, No */
bool tk_is_alnum(int32_t cp);      /* L* or N* */
bool tk_is_punct(int32_t cp);      /* ASCII punctuation or P* */

/* ==== String -> int32 map (open addressing, xxHash3) ==== */
typedef struct tk_map_ent {
    uint64_t h;
    uint32_t off, len; /* key bytes in arena */
    int32_t val;
} tk_map_ent;
typedef struct tk_map {
    tk_map_ent *slots; /* [cap]; len==UINT32_MAX marks empty */
    size_t cap, n;
    tk_buf arena;
} tk_map;
void tk_map_init(tk_map *m, size_t expect);
void tk_map_free(tk_map *m);
/* Returns 1 when inserted, 0 when the key existed (value updated when overwrite). */
int tk_map_put(tk_map *m, const char *k, size_t n, int32_t val, bool overwrite);
int32_t tk_map_get(const tk_map *m, const char *k, size_t n); /* -1 when absent */
const char *tk_map_key(const tk_map *m, const tk_map_ent *e);

/* ==== Regex ==== */
typedef struct tk_regex {
    pcre2_code *code;
    pcre2_code *code_new; /* with the code points PCRE2's Unicode tables lack (tok_util.c), or NULL */
} tk_regex;
int tk_regex_compile(tk_regex *r, const char *pat, size_t n, bool literal, mx_error *err);
/* The Rust regex crate's \w (tokenizers' Whitespace pre-tokenizer, added tokens' single_word):
 * letters, marks, Nd, Nl, Pc, ZWNJ, ZWJ and k_word_delta's other Alphabetic or newer ones, as a
 * predicate and as PCRE2 class items (tok_util.c keeps both forms of the one definition). */
bool tk_is_rust_word(int32_t cp);
void tk_rust_word_items(tk_buf *out);
/* The first UTF-8 byte of code point cp (grows with cp). */
static inline unsigned tk_utf8_lead(uint32_t cp) {
    return cp < 0x80 ? cp : cp < 0x800 ? 0xC0 | cp >> 6 : cp < 0x10000 ? 0xE0 | cp >> 12 : 0xF0 | cp >> 18;
}
void tk_regex_free(tk_regex *r);
/* Per-caller matcher state (match data, JIT stack), created on first use. */
typedef struct tk_rx_state {
    pcre2_match_data *md;
    pcre2_match_context *mc;
    pcre2_jit_stack *js;
} tk_rx_state;
void tk_rx_state_free(tk_rx_state *st);
/* Calls fn for every non-overlapping match of r in s[0..n) (m=1) and the gaps between (m=0),
 * in order, like tokenizers' Pattern::find_matches. A non-zero return from fn stops the walk
 * and is returned. Returns -1 on a matcher error. */
typedef int (*tk_span_fn)(void *arg, size_t a, size_t b, int m);
int tk_regex_each(const tk_regex *r, tk_rx_state *st, const char *s, size_t n, tk_span_fn fn, void *arg,
                  mx_error *err);
int tk_regex_spans(const tk_regex *r, tk_rx_state *st, const char *s, size_t n, tk_spans *out, mx_error *err);

/* ==== Normalizers ==== */
typedef enum {
    TK_NORM_NFC, TK_NORM_NFD, TK_NORM_NFKC, TK_NORM_NFKD, TK_NORM_LOWERCASE, TK_NORM_PREPEND,
    TK_NORM_REPLACE, TK_NORM_STRIP, TK_NORM_STRIP_ACCENTS
} tk_norm_kind;
typedef struct tk_norm {
    tk_norm_kind kind;
    char *s;          /* Prepend text / Replace content */
    size_t s_len;
    tk_regex re;      /* Replace pattern */
    bool left, right; /* Strip */
} tk_norm;

/* ==== Pre-tokenizers ==== */
typedef enum {
    TK_PRE_BYTELEVEL, TK_PRE_SPLIT, TK_PRE_DIGITS, TK_PRE_METASPACE, TK_PRE_WHITESPACE,
    TK_PRE_WHITESPACE_SPLIT, TK_PRE_PUNCTUATION, TK_PRE_CHAR_DELIM
} tk_pre_kind;
typedef enum {
    TK_SPLIT_REMOVED, TK_SPLIT_ISOLATED, TK_SPLIT_MERGED_PREV, TK_SPLIT_MERGED_NEXT,
    TK_SPLIT_CONTIGUOUS
} tk_split_behavior;
typedef enum { TK_PREPEND_ALWAYS, TK_PREPEND_FIRST, TK_PREPEND_NEVER } tk_prepend_scheme;
typedef struct tk_pre {
    tk_pre_kind kind;
    bool add_prefix_space, use_regex; /* ByteLevel */
    tk_regex re;                      /* Split, ByteLevel (use_regex), Whitespace */
    tk_split_behavior behavior;
    bool invert;
    bool individual_digits;           /* Digits */
    int32_t ch;                       /* Metaspace replacement / CharDelimiterSplit */
    tk_prepend_scheme prepend;        /* Metaspace */
    bool split;                       /* Metaspace */
} tk_pre;

/* ==== Decoders ==== */
typedef enum {
    TK_DEC_BYTELEVEL, TK_DEC_METASPACE, TK_DEC_BYTE_FALLBACK, TK_DEC_FUSE, TK_DEC_STRIP,
    TK_DEC_REPLACE, TK_DEC_BPE_SUFFIX
} tk_dec_kind;
typedef struct tk_dec {
    tk_dec_kind kind;
    int32_t ch;                   /* Metaspace replacement, Strip content */
    tk_prepend_scheme prepend;    /* Metaspace */
    size_t start, stop;           /* Strip */
    char *pat, *content;          /* Replace (string pattern), BPEDecoder suffix in pat */
    size_t pat_len, content_len;
} tk_dec;

/* ==== Added tokens ==== */
typedef struct tk_added {
    char *content;
    size_t len;
    char *match;      /* what the matcher looks for: content, or for a normalized token its
                       * content through the normalizers (as tokenizers' AddedVocabulary) */
    size_t match_len; /* 0: never matches (normalized to nothing) */
    int32_t id;
    bool special, normalized, lstrip, rstrip, single_word;
} tk_added;
/* Sets each normalized added token's match string (tokenizer.c); after the normalizers load. */
int tk_added_normalize(struct tokenizer *t, mx_error *err);
/* Whether decoding with skip_special drops id (tokenizer.c). */
bool tk_skip_special(const struct tokenizer *t, int32_t id);
/* Leftmost-longest matcher over a subset of added tokens. */
typedef struct tk_matcher {
    int32_t *order;      /* [n] indices into tokenizer.added, grouped by first byte, longest first */
    int32_t first[257];  /* order[first[c] .. first[c+1]) start with byte c */
    int n;
} tk_matcher;

/* ==== BPE model ==== */
#define TK_CACHE_SHARDS 64
typedef struct tk_cache_shard {
    pthread_mutex_t mu;
    struct tk_cache_ent *slots; /* [TK_CACHE_SLOTS] */
    size_t n;
    tk_buf keys;
    tk_ids vals;
} tk_cache_shard;
typedef struct tk_merge_ent {
    uint64_t key;   /* (left id << 32) | right id; UINT64_MAX = empty */
    uint32_t rank;
    int32_t id;     /* merged token */
} tk_merge_ent;
typedef struct tk_bpe {
    tk_map vocab;
    const char **pieces;   /* [n_pieces] id -> vocab string (NULL for holes) */
    uint32_t *piece_lens;  /* [n_pieces] its bytes (a piece may hold U+0000) */
    int32_t n_pieces;
    tk_merge_ent *merges;  /* [merge_cap] */
    size_t merge_cap, n_merges;
    int32_t unk_id;        /* -1 when none */
    bool byte_fallback, fuse_unk, ignore_merges;
    bool sp_split;         /* words may be cut before U+2581 runs (see tok_bpe.c) */
    char *prefix, *suffix; /* continuing_subword_prefix / end_of_word_suffix (NULL = none) */
    size_t prefix_len, suffix_len;
    int32_t byte_ids[256]; /* <0xNN> ids, -1 when absent */
    int32_t *char_ids;     /* [0x800] id of a lone code point < 0x800, -2 = look up in map */
    tk_cache_shard *cache; /* [TK_CACHE_SHARDS] */
} tk_bpe;

/* ==== The tokenizer ==== */
struct tokenizer {
    tk_bpe bpe;
    tk_norm *norms;
    int n_norms;
    tk_pre *pres;
    int n_pres;
    tk_dec *decs;
    int n_decs;
    bool has_decoder;
    tk_added *added;
    int n_added;
    tk_matcher match_raw, match_norm; /* non-normalized / normalized added tokens */
    int32_t *added_of_id;  /* [n_ids] index into added or -1 */
    int32_t n_ids;         /* vocabulary size incl. added tokens */
    tk_ids post_prefix, post_suffix; /* post-processor ids around $A (add_special) */
    char *bos, *eos;
    uint64_t serial;       /* unique per loaded tokenizer (tags per-thread caches) */
};

/* Per-call encode state (scratch buffers reused across pieces). */
#define TK_MAX_STAGES 16
typedef struct tk_ctx {
    const tokenizer *t;
    tk_ids *out;
    tk_buf stage_buf[TK_MAX_STAGES], stage_buf2[TK_MAX_STAGES];
    tk_spans stage_spans[TK_MAX_STAGES];
    tk_rx_state rx[TK_MAX_STAGES + 1]; /* per pre-tokenizer stage; the last for normalizers */
    tk_buf norm_a, norm_b;
    tk_spans added_raw, added_norm;
    /* BPE work arrays */
    struct tk_sym *syms;
    size_t syms_cap;
    struct tk_heap_ent *heap;
    size_t heap_cap;
    tk_buf word;
    struct tk_l1_table *l1; /* this thread's hot-word cache (tok_bpe.c) */
    bool special_as_text; /* TOK_ENC_SPECIAL_AS_TEXT */
    tk_buf *collect; /* tests: when set, words and added tokens are appended here, '|'-joined */
    mx_error *err;
} tk_ctx;

/* Tests: the pieces the model would see (pre-tokenized words, added tokens as their content),
 * joined by '|', into *out (malloc'd). */
int tk_debug_pieces(const tokenizer *t, const char *text, size_t len, char **out, mx_error *err);

/* tok_load.c */
int tk_load_json(tokenizer *t, const char *json, size_t len, const char *name, mx_error *err);
/* tok_normalize.c: applies every normalizer to s; *out points at s or a ctx scratch buffer. */
int tk_normalize_str(tk_ctx *c, const char *s, size_t n, const char **out, size_t *out_n);
void tk_norm_free(tk_norm *n);
/* tok_pretok.c: pre-tokenizes s and feeds each final piece to the BPE model. */
int tk_pretokenize(tk_ctx *c, const char *s, size_t n, bool at_start);
void tk_pre_free(tk_pre *p);
int32_t tk_byte_to_char(int b);
int tk_cp_to_byte(int32_t cp); /* -1 when cp is not in the ByteLevel alphabet */
/* tok_bpe.c */
int tk_bpe_init_tables(tk_bpe *b, mx_error *err);
int tk_bpe_word(tk_ctx *c, const char *w, size_t n);
void tk_bpe_free(tk_bpe *b);
void tk_ctx_free(tk_ctx *c);
/* tok_decode.c: appends the decoded text of ids to out. */
void tk_decode_append(const tokenizer *t, const int32_t *ids, size_t n, bool skip_special, tk_buf *out);
/* The same, decoding the special tokens of keep[0..n_keep) even with skip_special. */
void tk_decode_append_keep(const tokenizer *t, const int32_t *ids, size_t n, bool skip_special,
                           const int32_t *keep, size_t n_keep, tk_buf *out);
void tk_dec_free(tk_dec *d);

#endif
