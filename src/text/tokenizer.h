/* Tokenizer from a Hugging Face tokenizer.json: normalizer -> pre-tokenizer -> model (BPE) ->
 * post-processor, decoders for the way back, added tokens matched before the model. */
#ifndef MLXCEL_TEXT_TOKENIZER_H
#define MLXCEL_TEXT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct tokenizer tokenizer;

/* path: a tokenizer.json file. */
int tok_load_file(tokenizer **out, const char *path, mx_error *err);
/* dir: a checkpoint directory holding tokenizer.json (tokenizer_config.json read when present
 * for bos/eos token names and add_bos_token). */
int tok_load_dir(tokenizer **out, const char *dir, mx_error *err);
/* json: the text of a tokenizer.json (len bytes); name is used in error messages. */
int tok_load_json_text(tokenizer **out, const char *json, size_t len, const char *name, mx_error *err);
void tok_free(tokenizer *t);

/* add_special: apply the post-processor (BOS/EOS insertion) as tokenizers' add_special_tokens.
 * *ids is malloc'd; caller frees. */
int tok_encode(const tokenizer *t, const char *text, size_t len, bool add_special, int32_t **ids,
               size_t *n_ids, mx_error *err);
/* Flags for tok_encode_ex. TOK_ENC_SPECIAL_AS_TEXT: special added tokens written in the text
 * are not recognised (tokenizers' encode_special_tokens / split_special_tokens=True), e.g. for
 * untrusted user content inside a chat template; non-special added tokens still are. */
enum { TOK_ENC_ADD_SPECIAL = 1, TOK_ENC_SPECIAL_AS_TEXT = 2 };
int tok_encode_ex(const tokenizer *t, const char *text, size_t len, unsigned flags, int32_t **ids,
                  size_t *n_ids, mx_error *err);
/* skip_special: drop special added tokens, as tokenizers' skip_special_tokens. *out malloc'd. */
int tok_decode(const tokenizer *t, const int32_t *ids, size_t n_ids, bool skip_special, char **out,
               mx_error *err);

/* Same, with the length of *out (decoded text may contain NUL bytes). */
int tok_decode_n(const tokenizer *t, const int32_t *ids, size_t n_ids, bool skip_special, char **out,
                 size_t *out_len, mx_error *err);

/* Same, but the bytes the decoders produce are kept as they are: a token that is only part of
 * a character (a ByteLevel or byte-fallback byte such as 0xC3) gives that byte, not U+FFFD.
 * For logprobs `bytes` and /tokenize pieces, which must show a token's own bytes. */
int tok_decode_bytes(const tokenizer *t, const int32_t *ids, size_t n_ids, bool skip_special, char **out,
                     size_t *out_len, mx_error *err);

int tok_vocab_size(const tokenizer *t);               /* including added tokens */
const char *tok_id_to_piece(const tokenizer *t, int32_t id); /* raw vocab string or NULL */
/* the same with its length: a vocab string may hold U+0000 (InternLM2's "\u0000" piece) */
const char *tok_id_to_piece_n(const tokenizer *t, int32_t id, size_t *len);
int32_t tok_piece_to_id(const tokenizer *t, const char *piece); /* -1 when absent */
bool tok_is_special(const tokenizer *t, int32_t id);
/* From tokenizer_config.json when loaded from a dir (NULL otherwise). */
const char *tok_bos_token(const tokenizer *t);
const char *tok_eos_token(const tokenizer *t);

/* ==== Token bytes (constrained decoding) ====
 * What each id adds to the text in the middle of a stream, as raw bytes: a ByteLevel or <0xNN>
 * token its byte, "▁the" " the", an added token its content (decoded after a context token, so
 * first-token decoder rules do not apply). Special tokens are flagged and have no bytes. */
typedef struct tok_vocab {
    int n;                 /* tok_vocab_size */
    char *data;            /* token i: data[off[i] .. off[i] + len[i]) */
    uint32_t *off, *len;
    uint8_t *special;      /* 1: a special added token (never text) */
} tok_vocab;
int tok_vocab_bytes(const tokenizer *t, tok_vocab *out, mx_error *err);
void tok_vocab_free(tok_vocab *v);

/* ==== Streaming detokenizer ====
 * Push ids one at a time; get back the text that is now final. Incomplete UTF-8 and
 * byte-fallback sequences are held back; stop strings that span token boundaries are found,
 * and text that could still become a stop string is held back until it cannot. */
typedef struct tok_stream tok_stream;

tok_stream *tok_stream_new(const tokenizer *t, bool skip_special);
void tok_stream_free(tok_stream *s);
/* Special tokens that are decoded even though the stream skips special tokens (copied): a chat
 * reply's tool-call or reasoning markers (Llama's <|python_tag|>, Mistral's [TOOL_CALLS]) that
 * are special tokens but must reach the parser. 0, or -1 out of memory. */
int tok_stream_keep_special(tok_stream *s, const int32_t *ids, size_t n);
/* Stop strings (copied). */
void tok_stream_set_stops(tok_stream *s, const char *const *stops, int n_stops);
/* Appends the newly final text to *out, *out_len (a view valid until the next call).
 * Returns 1 when a stop string matched (text before it emitted, the stop not), else 0. */
int tok_stream_push(tok_stream *s, int32_t id, const char **out, size_t *out_len);
/* The stop string that ended the stream (llama-server's stopping_word), NULL while none has. */
const char *tok_stream_stop_word(const tok_stream *s);
/* End of stream: whatever is held back (invalid UTF-8 replaced by U+FFFD). */
void tok_stream_flush(tok_stream *s, const char **out, size_t *out_len);

#endif
