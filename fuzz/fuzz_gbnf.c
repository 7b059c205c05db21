/* libFuzzer target: GBNF text through grammar_compile. Input: the grammar, optionally followed
 * by a NUL byte and a sample text. Any input must compile or fail with a one-line message that
 * names a line and column (or the whole grammar); a compiled grammar then matches the sample,
 * finds its shortest sentence within a bound, and drives a matcher over a small vocabulary for
 * a few tokens: no crash, leak, hang or unbounded memory. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"

static grammar_vocab *small_vocab(void) {
    static const char *toks[] = {"a", "b", "{", "}", "\"", " ", "\n", "0", "1", ":", ",", "[", "]", "ab", "\xC3",
                                 "\xA9", "\xC3\xA9", "\\", "x", "</s>", "true", "null", "-", ".", "e"};
    enum { N = sizeof toks / sizeof *toks };
    const char *p[N];
    uint32_t l[N];
    uint8_t f[N] = {0};
    for (int i = 0; i < N; i++) p[i] = toks[i], l[i] = (uint32_t)strlen(toks[i]);
    f[19] = GRAMMAR_TOKEN_SPECIAL;
    const int32_t eos = 19;
    grammar_vocab *v = NULL;
    mx_error e;
    grammar_vocab_new(&v, N, p, l, f, &eos, 1, &e);
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static grammar_vocab *voc;
    if (!voc) voc = small_vocab();
    if (size > 1 << 16) return 0;
    const uint8_t *nul = memchr(data, 0, size);
    const size_t glen = nul ? (size_t)(nul - data) : size;
    grammar *g = NULL;
    mx_error err;
    if (grammar_compile(&g, (const char *)data, glen, &err)) {
        if (strchr(err.msg, '\n') || strncmp(err.msg, "grammar: ", 9)) __builtin_trap();
        return 0;
    }
    if (nul) (void)grammar_accepts(g, (const char *)nul + 1, size - glen - 1);
    (void)grammar_min_length(g, 64);
    grammar_matcher *m = grammar_matcher_new(g, voc, &err);
    for (int step = 0; m && step < 16; step++) {
        const uint32_t *mask = grammar_matcher_mask(m, 32, &err);
        if (!mask) break;
        int pick = -1;
        for (int t = 0; t < 32 && pick < 0; t++)
            if (mask[0] >> ((t + step * 7) % 32) & 1) pick = (t + step * 7) % 32;
        if (pick < 0) break;
        if (grammar_matcher_accept(m, pick, &err)) __builtin_trap(); /* the mask allowed it */
        if (grammar_matcher_ended(m)) break;
    }
    grammar_matcher_free(m);
    grammar_release(g);
    return 0;
}
