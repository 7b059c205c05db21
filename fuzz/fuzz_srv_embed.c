/* libFuzzer target: request bodies of the embeddings routes (POST /v1/embeddings, /embedding)
 * through srv_embed_parse, with a byte tokenizer (one id per byte, BOS first) and small limits
 * so that the context and dimension checks are reached. Any input must parse or fail cleanly,
 * and a parse that succeeds must hold only what the limits allow. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_embed.h"

static int fuzz_embed_tok(void *ctx, const char *text, bool add_special, int32_t **ids, size_t *n, mx_error *err) {
    (void)ctx;
    const size_t len = strlen(text), k = add_special ? 1 : 0;
    *ids = malloc((len + k + 1) * sizeof **ids);
    if (!*ids) return mx_fail(err, "out of memory");
    if (k) (*ids)[0] = 1;
    for (size_t i = 0; i < len; i++) (*ids)[k + i] = (unsigned char)text[i];
    *n = len + k;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const srv_embed_limits lim = {.n_embd = 64, .n_ctx = 48, .vocab = 300, .tokenize = fuzz_embed_tok};
    srv_embed_req r;
    mx_error err;
    if (srv_embed_parse(&r, data[0] & 1, (const char *)data + 1, size - 1, &lim, &err) == 0) {
        if (r.n < 1 || r.n > SRV_EMBED_MAX_INPUTS || r.dims < 0 || r.dims > lim.n_embd) abort();
        for (int i = 0; i < r.n; i++) {
            if (r.n_ids[i] < 1 || r.n_ids[i] > (size_t)lim.n_ctx) abort();
            for (size_t k = 0; k < r.n_ids[i]; k++)
                if (r.ids[i][k] < 0 || r.ids[i][k] >= lim.vocab) abort();
        }
    }
    srv_embed_req_free(&r);
    return 0;
}
