/* libFuzzer target: chat template compile + render. Input: template source, optionally
 * followed by a NUL byte and a JSON render context. Any input must compile or fail cleanly,
 * and render or fail cleanly within the limits (no crash, leak, hang or unbounded memory). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat_template.h"

static const char k_default_ctx[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"Hi <b>\"},"
    " {\"role\": \"assistant\", \"content\": \"<think>r</think>A\", \"tool_calls\": [{\"id\": \"c1\", \"type\":"
    " \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"x\": 1.5, \"y\": [true, null]}}}]},"
    " {\"role\": \"tool\", \"content\": \"42\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\","
    " \"text\": \"t\"}, {\"type\": \"image\"}]}], \"tools\": [{\"type\": \"function\", \"function\":"
    " {\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}}], \"add_generation_prompt\": true,"
    " \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"enable_thinking\": false}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static json_t *def;
    if (!def) def = json_loads(k_default_ctx, 0, NULL);
    if (size > 1 << 16) return 0;
    const uint8_t *nul = memchr(data, 0, size);
    size_t tlen = nul ? (size_t)(nul - data) : size;
    char *src = malloc(tlen + 1);
    if (!src) return 0;
    memcpy(src, data, tlen);
    src[tlen] = '\0';
    json_t *ctx = NULL;
    if (nul) ctx = json_loadb((const char *)nul + 1, size - tlen - 1, 0, NULL);
    if (!json_is_object(ctx)) {
        json_decref(ctx);
        ctx = json_incref(def);
    }
    jinja_template *t = NULL;
    mx_error err;
    if (jinja_compile(&t, src, &err) == 0) {
        jinja_limits lim = {.max_output = 1 << 20, .max_memory = 64 << 20, .max_steps = 200000, .max_depth = 200};
        char *out = NULL;
        if (jinja_render_ex(t, ctx, &lim, &out, &err) == 0) free(out);
        jinja_free(t);
    }
    json_decref(ctx);
    free(src);
    return 0;
}
