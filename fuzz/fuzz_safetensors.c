/* libFuzzer target for the safetensors reader. Each input is tried two ways:
 *  1. as a whole file image (length prefix, JSON header, data) through st_parse_buffer, the
 *     validation st_open applies; on success every tensor's first and last byte is read, so an
 *     out-of-range offset that slipped through shows up under ASan;
 *  2. as a bare header JSON against a 4 KiB data section through st_parse_header, so the
 *     fuzzer reaches the per-tensor checks without having to keep the length prefix right. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_result(int rc, st_file *f, const mx_error *err) {
    if (rc == 0) {
        volatile uint8_t sink = 0;
        for (int i = 0; i < f->n_tensors; i++) {
            const st_tensor *t = &f->tensors[i];
            if (t->data && t->nbytes) {
                const uint8_t *p = t->data;
                sink ^= p[0] ^ p[t->nbytes - 1];
            }
            if (st_find(f, t->name) != t) __builtin_trap(); /* lookup must be exact */
        }
        (void)st_meta(f, "format");
        (void)sink;
        st_close(f);
    } else if (!memchr(err->msg, '\0', sizeof err->msg) || strchr(err->msg, '\n')) {
        __builtin_trap(); /* errors are one terminated line */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_file f;
    mx_error err;
    int rc = st_parse_buffer(&f, data, size, "fuzz.safetensors", &err);
    check_result(rc, &f, &err);
    rc = st_parse_header(&f, (const char *)data, size, 4096, &err);
    check_result(rc, &f, &err);
    return 0;
}
