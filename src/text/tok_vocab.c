/* The bytes each token adds to the text in the middle of a stream, for constrained decoding
 * (grammar/grammar.h's vocabulary). A token is decoded after a context token and the context's
 * own text is cut off, so first-token decoder rules (SentencePiece's "strip the leading space",
 * a Strip decoder) act on the context, not on the token: "▁the" gives " the", a ByteLevel or
 * <0xNN> piece its one byte, an added token its content. */
#include <stdlib.h>
#include <string.h>

#include "text/tok_internal.h"

/* A plain token to decode before each one: a lone ASCII letter every vocabulary has. */
static int32_t context_token(const tokenizer *t) {
    static const char *cands[] = {"a", "e", "x", "0", "\xC4\xA0" /* ByteLevel space */};
    for (size_t i = 0; i < sizeof cands / sizeof *cands; i++) {
        int32_t id = tok_piece_to_id(t, cands[i]);
        if (id >= 0 && !tok_is_special(t, id)) return id;
    }
    return -1;
}

int tok_vocab_bytes(const tokenizer *t, tok_vocab *out, mx_error *err) {
    memset(out, 0, sizeof *out);
    const int n = tok_vocab_size(t);
    out->n = n;
    out->off = malloc((size_t)n * sizeof *out->off);
    out->len = calloc((size_t)n, sizeof *out->len);
    out->special = calloc((size_t)n, 1);
    tk_buf data = {0};
    if (!out->off || !out->len || !out->special) goto oom;
    const int32_t ctx = context_token(t);
    char *pre = NULL;
    size_t pre_n = 0;
    if (ctx >= 0 && tok_decode_bytes(t, &ctx, 1, false, &pre, &pre_n, err)) goto fail;
    for (int32_t id = 0; id < n; id++) {
        out->off[id] = (uint32_t)data.n;
        if (tok_is_special(t, id)) {
            out->special[id] = 1;
            continue;
        }
        if (!tok_id_to_piece(t, id)) continue; /* a hole in the ids: no bytes, never allowed */
        int32_t pair[2] = {ctx, id};
        char *s = NULL;
        size_t sn = 0;
        if (tok_decode_bytes(t, ctx >= 0 ? pair : pair + 1, ctx >= 0 ? 2 : 1, false, &s, &sn, err)) {
            free(pre);
            goto fail;
        }
        const char *b = s;
        size_t bn = sn;
        if (ctx >= 0 && sn >= pre_n && !memcmp(s, pre, pre_n)) b += pre_n, bn -= pre_n;
        else if (ctx >= 0) { /* the context did not decode as a prefix: the token alone */
            free(s);
            if (tok_decode_bytes(t, &id, 1, false, &s, &sn, err)) {
                free(pre);
                goto fail;
            }
            b = s, bn = sn;
        }
        tk_buf_put(&data, b, bn);
        out->len[id] = (uint32_t)bn;
        free(s);
    }
    free(pre);
    out->data = data.p ? data.p : malloc(1);
    if (!out->data) goto oom;
    return 0;
oom:
    mx_fail(err, "tokenizer: out of memory");
fail:
    free(data.p);
    tok_vocab_free(out);
    return -1;
}

void tok_vocab_free(tok_vocab *v) {
    free(v->data), free(v->off), free(v->len), free(v->special);
    memset(v, 0, sizeof *v);
}
