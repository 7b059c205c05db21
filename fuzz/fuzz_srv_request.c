/* libFuzzer target: HTTP request bodies of the generation routes (chat, completions,
 * llama-server /completion) through srv_request_parse. Any input must parse or fail cleanly. */
#include <stddef.h>
#include <stdint.h>

#include "server/srv_request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static srv_config cfg;
    static int init;
    if (!init) { srv_config_defaults(&cfg); init = 1; }
    if (size == 0) return 0;
    srv_api api = (srv_api)(data[0] % 3);
    srv_request r;
    mx_error err;
    srv_request_parse(&r, api, (const char *)data + 1, size - 1, &cfg, 32000, &err);
    srv_request_free(&r);
    return 0;
}
