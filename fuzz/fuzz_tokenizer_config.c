/* libFuzzer target: tokenizer_config.json, the checkpoint file two loaders read: the chat
 * template's (chat_template_load: "chat_template" as a string or a list of named templates,
 * the special tokens bos/eos/unk/sep/pad/cls/mask as strings or AddedToken objects,
 * additional_special_tokens; the template compiled) and the tokenizer's (tok_load_dir:
 * bos_token / eos_token, add_bos_token / add_eos_token over a small real tokenizer.json, that of
 * tests/fixtures/serve_tokenizer, then an encode with the special tokens).
 * The input is the file; it is written into a private directory next to the tokenizer.json.
 * Loading a tokenizer costs ~0.1 s under ASan (fixed-size tables), so tok_load_dir runs on one
 * input in eight, chosen by a hash of the input (the same input always takes the same path).
 * Checks: both fail cleanly or succeed; errors are one line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "text/chat_template.h"
#include "text/tokenizer.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_dir[256], g_cfg[512], g_tok[512];

static void cleanup(void) {
    unlink(g_cfg);
    unlink(g_tok);
    rmdir(g_dir);
}

static void write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f)) {
        perror("fuzz_tokenizer_config: write");
        abort();
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    struct stat sb;
    snprintf(g_dir, sizeof g_dir, "%s/mlxcel-fuzz-tokcfg-XXXXXX", stat("/dev/shm", &sb) ? "/tmp" : "/dev/shm");
    if (!mkdtemp(g_dir)) {
        perror("fuzz_tokenizer_config: mkdtemp");
        abort();
    }
    snprintf(g_cfg, sizeof g_cfg, "%s/tokenizer_config.json", g_dir);
    snprintf(g_tok, sizeof g_tok, "%s/tokenizer.json", g_dir);
    atexit(cleanup);
    /* __FILE__ is absolute under CMake: the fixture next to this source file. */
    char src[4096], path[8192];
    snprintf(src, sizeof src, "%s", __FILE__);
    char *slash = strrchr(src, '/');
    if (slash) *slash = '\0';
    snprintf(path, sizeof path, "%s/../tests/fixtures/serve_tokenizer/tokenizer.json", src);
    FILE *f = fopen(path, "rb");
    static char buf[1 << 20];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (!f || !n) {
        fprintf(stderr, "fuzz_tokenizer_config: cannot read %s\n", path);
        abort();
    }
    fclose(f);
    write_file(g_tok, buf, n);
    return 0;
}

static void check_msg(const mx_error *err) {
    if (!memchr(err->msg, '\0', sizeof err->msg) || strchr(err->msg, '\n')) __builtin_trap(); /* one line */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    write_file(g_cfg, data, size);
    mx_error err = {{0}};
    chat_template *ct = NULL;
    if (chat_template_load(&ct, g_dir, NULL, &err) == 0) {
        if (!chat_template_source(ct)) __builtin_trap();
        chat_template_free(ct);
    } else {
        check_msg(&err);
    }
    if (XXH64(data, size, 0) % 8) return 0;
    tokenizer *t = NULL;
    if (tok_load_dir(&t, g_dir, &err) == 0) {
        int32_t *ids;
        size_t n;
        if (tok_encode(t, "<|im_start|>user\nhi", 19, true, &ids, &n, &err) == 0) {
            for (size_t i = 0; i < n; i++)
                if (ids[i] < 0 || ids[i] >= tok_vocab_size(t)) __builtin_trap();
            free(ids);
        }
        (void)tok_bos_token(t);
        (void)tok_eos_token(t);
        tok_free(t);
    } else {
        check_msg(&err);
    }
    return 0;
}
