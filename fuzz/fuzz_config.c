/* libFuzzer target: config.json text (and, after the first NUL byte, generation_config.json)
 * through spec_parse; on success the derived numbers feed the memory estimate and the
 * quantization lookup, so absurd-but-accepted values surface as UBSan reports. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/estimate.h"
#include "model/model_spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size + 2);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = buf[size + 1] = '\0';
    size_t first = strlen(buf);
    const char *gen = first < size ? buf + first + 1 : NULL;
    static model_spec s; /* ~90 KB: keep it off the stack */
    mx_error err;
    if (spec_parse(&s, buf, gen, "fuzz/config.json", &err) == 0) {
        mx_mem_estimate e;
        estimate_memory(&s, 1ull << 40, 1ull << 40, 1 << 20, 64, MX_KV_INT8, &e);
        estimate_memory(&s, 0, 0, 1, 1, MX_KV_BF16, &e);
        (void)spec_quant_for(&s, "model.layers.0.mlp.down_proj.weight");
        if (s.n_layers < 1 || s.n_layers > MX_MAX_LAYERS || s.head_dim < 1 || s.n_kv_heads < 1 ||
            s.n_heads % s.n_kv_heads || s.n_eos > MX_MAX_EOS)
            __builtin_trap(); /* accepted specs satisfy the validated invariants */
    } else if (strchr(err.msg, '\n')) {
        __builtin_trap();
    }
    free(buf);
    return 0;
}
