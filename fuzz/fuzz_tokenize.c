/* libFuzzer target: encoding arbitrary bytes (invalid UTF-8 included) with the real Llama 3,
 * Qwen 3, Mistral, DeepSeek-V3 and InternLM2 tokenizers (when tests/fixtures/tokenizers/npm
 * holds them) and with a synthetic tokenizer that uses every supported component. The first input byte picks the
 * tokenizer and flags (0x10 add special, 0x20 skip special, 0x40 specials as text); the rest
 * is the text. The ids are then decoded and streamed back. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"

static const char k_synth[] =
    "{\"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"byte_fallback\": true, \"fuse_unk\": true,"
    "  \"continuing_subword_prefix\": null, \"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2, \"a\": 3, \"b\": 4,"
    "  \"ab\": 5, \"\\u2581\": 6, \"\\u2581a\": 7, \"<0x41>\": 8, \"<0xC3>\": 9, \"<0xA9>\": 10, \"1\": 11, \"11\": 12},"
    "  \"merges\": [\"a b\", [\"\\u2581\", \"a\"], \"1 1\"]},"
    " \"added_tokens\": [{\"id\": 1, \"content\": \"<s>\", \"special\": true, \"normalized\": false},"
    "  {\"id\": 2, \"content\": \"</s>\", \"special\": true, \"normalized\": false, \"lstrip\": true, \"rstrip\": true},"
    "  {\"id\": 13, \"content\": \"ab\", \"special\": false, \"normalized\": true, \"single_word\": true}],"
    " \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFKC\"}, {\"type\": \"Lowercase\"},"
    "  {\"type\": \"Strip\", \"strip_left\": false, \"strip_right\": true},"
    "  {\"type\": \"Replace\", \"pattern\": {\"Regex\": \"\\\\d{3,}\"}, \"content\": \"111\"}]},"
    " \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
    "  {\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\s*[.,!?]\"}, \"behavior\": \"MergedWithPrevious\", \"invert\": false},"
    "  {\"type\": \"Split\", \"pattern\": {\"String\": \"x\"}, \"behavior\": \"MergedWithNext\", \"invert\": true},"
    "  {\"type\": \"Digits\", \"individual_digits\": false}, {\"type\": \"Punctuation\", \"behavior\": \"Contiguous\"},"
    "  {\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", \"prepend_scheme\": \"first\", \"split\": true}]},"
    " \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}},"
    "  {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [1], \"tokens\": [\"<s>\"]}}},"
    " \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", \"prepend_scheme\": \"first\"},"
    "  {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}, {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]}}";

static tokenizer *g_tok[6];
static int g_n;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    mx_error err;
    if (tok_load_json_text(&g_tok[g_n], k_synth, sizeof k_synth - 1, "synthetic", &err)) {
        fprintf(stderr, "fuzz_tokenize: %s\n", err.msg);
        abort();
    }
    g_n++;
    /* __FILE__ is absolute under CMake: find the fixtures next to this source file. */
    static const char *names[] = {"llama3", "qwen3", "mistral", "deepseek_v3", "internlm2"};
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", __FILE__);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    for (int i = 0; i < 5; i++) {
        char path[8192];
        snprintf(path, sizeof path, "%s/../tests/fixtures/tokenizers/npm/%s/tokenizer.json", dir, names[i]);
        if (tok_load_file(&g_tok[g_n], path, &err) == 0) g_n++;
        else fprintf(stderr, "fuzz_tokenize: %s (skipped)\n", err.msg);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const tokenizer *t = g_tok[data[0] % g_n];
    unsigned flags = (data[0] & 0x10 ? TOK_ENC_ADD_SPECIAL : 0) | (data[0] & 0x40 ? TOK_ENC_SPECIAL_AS_TEXT : 0);
    bool skip = data[0] & 0x20;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t *ids;
    size_t n;
    mx_error err;
    if (tok_encode_ex(t, text, len, flags, &ids, &n, &err)) return 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tok_vocab_size(t)) abort(); /* every id must be valid */
    char *back;
    size_t back_n;
    if (tok_decode_n(t, ids, n, skip, &back, &back_n, &err) == 0) {
        /* The stream must give exactly the whole decode (true for every decoder chain whose
         * output for a prefix of the ids is a prefix of the output: all but Strip with stop > 0)
         * unless the text holds U+FFFD, where long invalid runs are forced out best effort. */
        bool exact = !memmem(back, back_n, "\xEF\xBF\xBD", 3);
        tok_stream *s = tok_stream_new(t, skip);
        size_t got = 0;
        const char *o;
        size_t k;
        for (size_t i = 0; i < n; i++) {
            tok_stream_push(s, ids[i], &o, &k);
            if (exact && (got + k > back_n || memcmp(back + got, o, k))) abort();
            got += k;
        }
        tok_stream_flush(s, &o, &k);
        if (exact && (got + k != back_n || memcmp(back + got, o, k))) abort();
        tok_stream_free(s);
        free(back);
    }
    free(ids);
    return 0;
}
