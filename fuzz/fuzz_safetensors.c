/* libFuzzer target: a whole safetensors image (length prefix, JSON header, data) through the
 * same validation st_open applies; on success every tensor's bytes are touched so an
 * out-of-range offset that slipped through shows up under ASan. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_file f;
    mx_error err;
    if (st_parse_buffer(&f, data, size, "fuzz.safetensors", &err) == 0) {
        volatile uint8_t sink = 0;
        for (int i = 0; i < f.n_tensors; i++) {
            const st_tensor *t = &f.tensors[i];
            const uint8_t *p = t->data;
            if (t->nbytes) sink ^= p[0] ^ p[t->nbytes - 1];
            if (st_find(&f, t->name) != t) __builtin_trap(); /* lookup must be exact */
        }
        (void)st_meta(&f, "format");
        (void)sink;
        st_close(&f);
    } else if (!memchr(err.msg, '\0', sizeof err.msg) || strchr(err.msg, '\n')) {
        __builtin_trap(); /* errors are one terminated line */
    }
    return 0;
}
