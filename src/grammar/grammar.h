/* Constrained decoding: grammars (llama.cpp's GBNF), token masks over a vocabulary, and the
 * per-sequence matcher the engine advances by sampled tokens. JSON Schema -> GBNF lives in
 * grammar/json_schema.h (it needs jansson; this header does not).
 *
 * Layers (docs/structured-output.md):
 *   grammar        GBNF text compiled to a byte-level pushdown automaton (rules -> NFA over
 *                  bytes, UTF-8 classes expanded to byte ranges). Immutable once compiled,
 *                  reference counted, shareable between sequences and threads. It also owns
 *                  the lazily built parse-state tables (interned stacks and state sets, the
 *                  byte transitions between them, the masks of visited states), guarded by its
 *                  own mutex: every sequence under one grammar reuses what the others found.
 *   grammar_vocab  the token byte strings of a tokenizer in a prefix tree (built once per
 *                  model), which ids are special (never allowed inside a grammar) and which are
 *                  EOS (allowed only where the grammar may end).
 *   grammar_matcher one sequence's position in the grammar: a state id, advanced by the bytes of
 *                  each sampled token, and the mask of the tokens allowed next.
 *
 * Threading: grammar_compile and the vocab are pure; matchers of one grammar may be used from
 * several threads (each call locks the grammar's tables); one matcher by one thread at a time. */
#ifndef MLXCEL_GRAMMAR_GRAMMAR_H
#define MLXCEL_GRAMMAR_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* ==== Grammar ==== */
typedef struct grammar grammar;

/* Compiles GBNF text (len bytes, UTF-8; llama.cpp's format, see docs/structured-output.md):
 *   name ::= alternatives       # one rule per line; a rule may continue inside ( ... ) or
 *                               # after a trailing |, and on lines that start with |
 *   "literal" with \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH escapes
 *   [a-z0-9_] [^"\\] character classes (ranges, negation, the same escapes), . any character
 *   ( ... ) groups, x* x+ x? x{m} x{m,} x{m,n} x{,n}, rule references, # comments
 * The start rule is `root`. Errors name the line and column ("grammar: line 3 column 12:
 * undefined rule 'valeu'"); left recursion, undefined rules and oversized grammars are refused. */
int grammar_compile(grammar **out, const char *gbnf, size_t len, mx_error *err);
/* Same with another start rule. */
int grammar_compile_root(grammar **out, const char *gbnf, size_t len, const char *root, mx_error *err);
grammar *grammar_retain(grammar *g);
void grammar_release(grammar *g);   /* NULL is fine */
/* True when the bytes s[0..n) form a complete sentence of the grammar (tests, tools). */
bool grammar_accepts(grammar *g, const char *s, size_t n);
/* Bytes of its shortest sentence, or -1 when none is at most limit bytes long (tests). */
int grammar_min_length(grammar *g, int limit);

/* ==== Vocabulary ==== */
typedef struct grammar_vocab grammar_vocab;

enum { GRAMMAR_TOKEN_SPECIAL = 1 };

/* bytes[i] / lens[i]: what token i contributes to the text in the middle of a stream (its own
 * bytes: a byte-level or <0xNN> token is one byte, a SentencePiece "▁x" is " x"); flags[i]:
 * GRAMMAR_TOKEN_SPECIAL for tokens a grammar never produces (control tokens). eos: the ids
 * that end generation. Tokens with no bytes are never allowed. Everything is copied. */
int grammar_vocab_new(grammar_vocab **out, int n_tokens, const char *const *bytes, const uint32_t *lens,
                      const uint8_t *flags, const int32_t *eos, int n_eos, mx_error *err);
grammar_vocab *grammar_vocab_retain(grammar_vocab *v);
void grammar_vocab_release(grammar_vocab *v);
int grammar_vocab_size(const grammar_vocab *v);
bool grammar_vocab_is_eos(const grammar_vocab *v, int32_t id);
/* The bytes token id contributes (as given to grammar_vocab_new; none for special tokens and ids
 * outside the vocabulary). Valid while v lives. */
const char *grammar_vocab_bytes(const grammar_vocab *v, int32_t id, size_t *len);

/* ==== Matcher (one sequence) ==== */
typedef struct grammar_matcher grammar_matcher;

/* A matcher at the start of g (both retained). NULL with err on out of memory. */
grammar_matcher *grammar_matcher_new(grammar *g, grammar_vocab *v, mx_error *err);
void grammar_matcher_free(grammar_matcher *m);

/* The tokens allowed next: a bitset over [0, n_vocab) (bit i of word i/32), n_vocab the
 * model's vocabulary (ids past the tokenizer's are never allowed). EOS ids are allowed where
 * the grammar may end; once it is complete and nothing else may follow, only they are. The
 * array belongs to the matcher and stays valid until its next call. NULL with err when the
 * grammar's tables failed (out of memory, an ambiguous grammar past the state-size limit). */
const uint32_t *grammar_matcher_mask(grammar_matcher *m, int n_vocab, mx_error *err);
/* Advances by a sampled token. 0, or -1 when the token is not allowed here (state unchanged). */
int grammar_matcher_accept(grammar_matcher *m, int32_t token, mx_error *err);
/* Advances by raw bytes (tests; a prompt prefix). 0 or -1 (state unchanged). */
int grammar_matcher_accept_bytes(grammar_matcher *m, const char *s, size_t n, mx_error *err);
/* The grammar may end here (EOS allowed). */
bool grammar_matcher_can_end(const grammar_matcher *m);
/* Complete and nothing else may follow: only EOS is allowed. */
bool grammar_matcher_is_done(const grammar_matcher *m);
/* An EOS token was accepted. */
bool grammar_matcher_ended(const grammar_matcher *m);

/* logits[i] = -inf for every i in [0, n) whose bit is clear. */
void grammar_mask_apply(const uint32_t *mask, float *logits, int n);

#endif
