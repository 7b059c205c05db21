/* libFuzzer target: tokenizer.json loading (any bytes). A file that loads is then used:
 * encode a few strings with and without special tokens, decode ids (in and out of range),
 * and stream them with a stop string. Nothing may crash, leak or read out of bounds. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"

static const char *k_texts[] = {"", "Hello world", " a  b\n\tc 123 <s> \xE2\x96\x81x", "\xF0\x9F\x98\x80\xFF\xC3"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tokenizer *t = NULL;
    mx_error err;
    if (tok_load_json_text(&t, (const char *)data, size, "fuzz.json", &err)) return 0;
    for (size_t i = 0; i < sizeof k_texts / sizeof k_texts[0]; i++) {
        for (int sp = 0; sp < 2; sp++) {
            int32_t *ids;
            size_t n;
            if (tok_encode(t, k_texts[i], strlen(k_texts[i]), sp, &ids, &n, &err)) continue;
            char *text;
            if (tok_decode(t, ids, n, sp, &text, &err) == 0) free(text);
            free(ids);
        }
    }
    int32_t probe[8] = {0, 1, 2, 3, tok_vocab_size(t) - 1, tok_vocab_size(t), -1, 0x7fffffff};
    char *text;
    if (tok_decode(t, probe, 8, false, &text, &err) == 0) free(text);
    tok_stream *s = tok_stream_new(t, false);
    const char *stops[] = {"a"};
    tok_stream_set_stops(s, stops, 1);
    for (int i = 0; i < 8; i++) {
        const char *o;
        size_t k;
        tok_stream_push(s, probe[i], &o, &k);
    }
    const char *o;
    size_t k;
    tok_stream_flush(s, &o, &k);
    tok_stream_free(s);
    for (int32_t id = 0; id < 4; id++) (void)tok_id_to_piece(t, id);
    (void)tok_piece_to_id(t, "a");
    tok_free(t);
    return 0;
}
